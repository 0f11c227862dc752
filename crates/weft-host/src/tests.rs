//! Unit tests: detection agrees with std, the fingerprint is pinned.

use crate::fingerprint::Fnv1a64;
use crate::*;

fn synthetic_host() -> Host {
    Host {
        isa: Isa::X86_64,
        os: Os::Linux,
        vendor: "AuthenticAMD".to_string(),
        model: "AMD EPYC".to_string(),
        features: [Feature::Sse2, Feature::Avx, Feature::Avx2, Feature::Fma]
            .into_iter()
            .collect(),
        caches: Caches {
            line: 64,
            l1d: Some(48 << 10),
            l2: Some(1 << 20),
            l3: None,
        },
        logical_cores: 2,
    }
}

#[test]
fn fnv1a64_matches_published_test_vectors() {
    for (input, expected) in [
        (&b""[..], 0xcbf2_9ce4_8422_2325u64),
        (b"a", 0xaf63_dc4c_8601_ec8c),
        (b"foobar", 0x8594_4171_f739_67e8),
    ] {
        let mut h = Fnv1a64::new();
        h.bytes(input);
        assert_eq!(h.0, expected, "FNV-1a 64 of {input:?}");
    }
}

#[test]
fn fingerprint_of_synthetic_host_is_golden() {
    // Pinned: if this changes, every cached verdict is invalidated. Change
    // the tag in `Fingerprint::of` and this value together, on purpose.
    let fp = synthetic_host().fingerprint();
    assert_eq!(fp, Fingerprint(GOLDEN), "got {fp}");
    assert_eq!(fp.to_string().len(), 16);
}

/// Computed independently (Python, from the encoding documented on
/// `Fingerprint`), not copied from this implementation's output.
const GOLDEN: u64 = 0x4e67_9517_27bb_c1ad;

#[test]
fn fingerprint_changes_with_every_covered_field() {
    let base = synthetic_host();
    let fp = base.fingerprint();
    let mut variants = Vec::new();
    let mut h = base.clone();
    h.features.insert(Feature::Avx512f);
    variants.push(("feature", h));
    let mut h = base.clone();
    h.features.remove(Feature::Fma);
    variants.push(("feature removed", h));
    let mut h = base.clone();
    h.isa = Isa::Aarch64;
    variants.push(("isa", h));
    let mut h = base.clone();
    h.os = Os::Windows;
    variants.push(("os", h));
    let mut h = base.clone();
    h.vendor = "GenuineIntel".to_string();
    variants.push(("vendor", h));
    let mut h = base.clone();
    h.model.push('X');
    variants.push(("model", h));
    let mut h = base.clone();
    h.caches.line = 128;
    variants.push(("line", h));
    let mut h = base.clone();
    h.caches.l1d = None;
    variants.push(("l1d", h));
    let mut h = base.clone();
    h.caches.l2 = Some(2 << 20);
    variants.push(("l2", h));
    let mut h = base.clone();
    h.caches.l3 = Some(0);
    variants.push(("l3 known", h));
    // Field boundaries are length-prefixed: moving a byte between vendor
    // and model changes the fingerprint.
    let mut h = base.clone();
    h.vendor = "AuthenticAMDA".to_string();
    h.model = "MD EPYC".to_string();
    variants.push(("vendor/model boundary", h));
    for (what, host) in variants {
        assert_ne!(
            host.fingerprint(),
            fp,
            "changing {what} kept the fingerprint"
        );
    }
    let mut h = base.clone();
    h.logical_cores = 64;
    assert_eq!(h.fingerprint(), fp, "logical_cores is not covered");
}

#[test]
fn fingerprint_is_stable_for_the_same_host() {
    assert_eq!(host().fingerprint(), Host::detect().fingerprint());
    assert_eq!(host(), &Host::detect());
    assert!(std::ptr::eq(host(), host()));
}

#[test]
fn fingerprint_display_is_sixteen_hex_digits() {
    assert_eq!(Fingerprint(0xab).to_string(), "00000000000000ab");
    assert_eq!(
        format!("{:?}", Fingerprint(1)),
        "Fingerprint(0000000000000001)"
    );
    let text = host().fingerprint().to_string();
    assert_eq!(text.len(), 16);
    assert!(text
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
}

#[test]
fn feature_bits_names_and_isas_are_consistent() {
    for (i, f) in Feature::ALL.iter().enumerate() {
        assert_eq!(*f as usize, i, "{f:?} out of order in ALL");
        assert_eq!(Feature::from_name(f.name()), Some(*f));
        assert_eq!(f.to_string(), f.name());
    }
    let names: std::collections::BTreeSet<_> = Feature::ALL.iter().map(|f| f.name()).collect();
    assert_eq!(names.len(), Feature::ALL.len());
    assert_eq!(Feature::AvxVnni.isa(), Isa::X86_64);
    assert_eq!(Feature::Neon.isa(), Isa::Aarch64);
    assert_eq!(Feature::from_name("avx-vnni"), None);
}

#[test]
fn features_set_operations() {
    let mut set = Features::default();
    assert!(set.is_empty());
    set.insert(Feature::Fma);
    set.insert(Feature::Avx2);
    set.insert(Feature::Avx2);
    assert!(set.contains(Feature::Fma) && set.contains(Feature::Avx2));
    assert!(!set.contains(Feature::Avx));
    let need = Features::EMPTY.with(Feature::Avx2).with(Feature::Fma);
    assert!(set.contains_all(need));
    assert!(set.contains_all(Features::EMPTY));
    assert!(!need.with(Feature::Avx512f).is_empty());
    assert!(!set.contains_all(need.with(Feature::Avx512f)));
    assert_eq!(
        set.iter().collect::<Vec<_>>(),
        vec![Feature::Avx2, Feature::Fma]
    );
    assert_eq!(set, Features::from_iter([Feature::Fma, Feature::Avx2]));
    assert_eq!(format!("{set:?}"), "Features{avx2, fma}");
    assert_eq!(format!("{:?}", Features::EMPTY), "Features{}");
    set.remove(Feature::Fma);
    assert_eq!(set.bits(), 1 << Feature::Avx2 as u8);
}

#[test]
fn host_round_trips_through_serde() {
    let h = host().clone();
    let bytes = bincode::serialize(&h).expect("serialize");
    let back: Host = bincode::deserialize(&bytes).expect("deserialize");
    assert_eq!(back, h);
    assert_eq!(back.fingerprint(), h.fingerprint());
}

#[test]
fn host_identity_is_filled_in() {
    let h = host();
    eprintln!("{h:#?}\nfingerprint {}", h.fingerprint());
    assert_eq!(h.isa, Isa::of_target());
    assert_eq!(h.os, Os::of_target());
    assert!(!h.vendor.is_empty() && !h.model.is_empty());
    assert!(h.logical_cores >= 1);
    assert_eq!(h.vendor, h.vendor.trim());
    assert_eq!(h.model, h.model.trim());
    for f in h.features.iter() {
        assert_eq!(f.isa(), h.isa, "{f} reported on the wrong ISA");
        assert!(h.has(f));
    }
}

#[test]
fn caches_are_plausible() {
    let c = host().caches;
    assert!(
        c.line.is_power_of_two() && (16..=256).contains(&c.line),
        "{c:?}"
    );
    if let Some(l1d) = c.l1d {
        assert!((4 << 10..=4 << 20).contains(&l1d), "{c:?}");
    }
    if let (Some(l1d), Some(l2)) = (c.l1d, c.l2) {
        assert!(l2 > l1d, "{c:?}");
    }
    if let Some(l3) = c.l3 {
        assert!(l3 >= 256 << 10, "{c:?}");
    }
    // Where the OS or CPUID says, L1d and L2 are known.
    if cfg!(any(target_os = "linux", target_arch = "x86_64")) {
        assert!(c.l1d.is_some() && c.l2.is_some(), "{c:?}");
    }
}

#[cfg(target_os = "linux")]
#[test]
fn sysfs_sizes_parse() {
    use crate::detect::linux::parse_size;
    assert_eq!(parse_size("48K"), Some(48 << 10));
    assert_eq!(parse_size("32768K\n"), Some(32 << 20));
    assert_eq!(parse_size("1M"), Some(1 << 20));
    assert_eq!(parse_size("512"), Some(512));
    assert_eq!(parse_size("8G"), None);
    assert_eq!(parse_size("K"), None);
    assert_eq!(parse_size(""), None);
}

#[cfg(target_os = "linux")]
#[test]
fn arm_cpuinfo_parses() {
    use crate::detect::linux::parse_arm_cpuinfo;
    let text = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n\
                CPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd0c\n\n\
                processor\t: 1\nCPU implementer\t: 0x51\nCPU part\t: 0x001\n";
    assert_eq!(
        parse_arm_cpuinfo(text),
        (Some("ARM".to_string()), Some("part 0xd0c".to_string()))
    );
    assert_eq!(
        parse_arm_cpuinfo("CPU implementer : 0x99\n"),
        (Some("implementer 0x99".to_string()), None)
    );
    assert_eq!(parse_arm_cpuinfo("flags: fpu\n"), (None, None));
}

#[cfg(target_os = "linux")]
#[test]
fn arm_midr_parses() {
    use crate::detect::linux::parse_midr;
    // Neoverse N1 r3p1.
    assert_eq!(
        parse_midr("0x00000000413fd0c1\n"),
        (Some("ARM".to_string()), Some("part 0xd0c".to_string()))
    );
    assert_eq!(
        parse_midr("0x00000000610f0220"),
        (Some("Apple".to_string()), Some("part 0x022".to_string()))
    );
    assert_eq!(parse_midr("garbage"), (None, None));
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::is_x86_feature_detected as has;
    use std::arch::x86_64::__cpuid_count;

    use crate::*;

    #[test]
    fn features_equal_what_std_reports() {
        let h = host();
        for f in Feature::ALL {
            let std_says = match f {
                Feature::Sse2 => has!("sse2"),
                Feature::Sse41 => has!("sse4.1"),
                Feature::Sse42 => has!("sse4.2"),
                Feature::Popcnt => has!("popcnt"),
                Feature::Avx => has!("avx"),
                Feature::Avx2 => has!("avx2"),
                Feature::Fma => has!("fma"),
                Feature::F16c => has!("f16c"),
                Feature::Bmi1 => has!("bmi1"),
                Feature::Bmi2 => has!("bmi2"),
                Feature::Avx512f => has!("avx512f"),
                Feature::Avx512bw => has!("avx512bw"),
                Feature::Avx512vl => has!("avx512vl"),
                Feature::Avx512dq => has!("avx512dq"),
                Feature::Avx512cd => has!("avx512cd"),
                Feature::Avx512vnni => has!("avx512vnni"),
                Feature::Avx512bf16 => has!("avx512bf16"),
                Feature::Avx512fp16 => has!("avx512fp16"),
                Feature::AvxVnni => has!("avxvnni"),
                _ => false,
            };
            assert_eq!(h.has(f), std_says, "{f}");
        }
        assert!(h.has(Feature::Sse2), "x86-64 baseline");
    }

    /// Raw CPUID bits (no OS check) agree with the detected set where the
    /// feature needs no OS-saved state, and bound it where it does.
    #[test]
    fn features_agree_with_raw_cpuid() {
        let h = host();
        let leaf1 = __cpuid_count(1, 0);
        let leaf7 = __cpuid_count(7, 0);
        let leaf7_1 = __cpuid_count(7, 1);
        assert_eq!(h.has(Feature::Sse41), leaf1.ecx & (1 << 19) != 0);
        assert_eq!(h.has(Feature::Popcnt), leaf1.ecx & (1 << 23) != 0);
        assert_eq!(h.has(Feature::Bmi2), leaf7.ebx & (1 << 8) != 0);
        // State-carrying features: CPUID is necessary, not sufficient.
        let cpuid_implies = [
            (Feature::Avx512f, leaf7.ebx & (1 << 16) != 0),
            (Feature::Avx512vnni, leaf7.ecx & (1 << 11) != 0),
            (Feature::AvxVnni, leaf7_1.eax & (1 << 4) != 0),
            (Feature::Avx512bf16, leaf7_1.eax & (1 << 5) != 0),
            (Feature::Avx512fp16, leaf7.edx & (1 << 23) != 0),
        ];
        for (f, cpuid_says) in cpuid_implies {
            assert!(!h.has(f) || cpuid_says, "{f} detected but CPUID lacks it");
        }
    }

    /// On AMD Zen 4 or later (family 0x19 model >= 0x10, or family >= 0x1A)
    /// with AVX-512 enabled by the OS, the features the twins rely on are
    /// there. Ignored, by name, on other hosts.
    #[test]
    #[cfg_attr(
        not(weft_host_zen4_plus),
        ignore = "needs an AMD Zen 4 or later host with AVX-512"
    )]
    fn zen4_or_later_reports_the_avx512_twin_features() {
        let h = host();
        for f in [
            Feature::Avx2,
            Feature::Fma,
            Feature::F16c,
            Feature::Avx512f,
            Feature::Avx512bw,
            Feature::Avx512vl,
            Feature::Avx512dq,
            Feature::Avx512cd,
            Feature::Avx512vnni,
            Feature::Avx512bf16,
        ] {
            assert!(h.has(f), "{f} missing on Zen 4+: {:?}", h.features);
        }
        assert!(!h.has(Feature::Avx512fp16), "no Zen has AVX512-FP16");
    }

    #[test]
    fn x86_identity_comes_from_cpuid() {
        let h = host();
        assert_eq!(
            h.vendor.len(),
            12,
            "CPUID vendor strings are 12 bytes: {:?}",
            h.vendor
        );
        assert_ne!(h.model, "unknown");
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use std::arch::is_aarch64_feature_detected as has;

    use crate::*;

    #[test]
    fn features_equal_what_std_reports() {
        let h = host();
        for f in Feature::ALL {
            let std_says = match f {
                Feature::Neon => has!("neon"),
                Feature::Dotprod => has!("dotprod"),
                Feature::I8mm => has!("i8mm"),
                Feature::Fp16 => has!("fp16"),
                Feature::Bf16 => has!("bf16"),
                _ => false,
            };
            assert_eq!(h.has(f), std_says, "{f}");
        }
        assert!(h.has(Feature::Neon), "arm64 baseline");
    }
}

#[test]
fn last_level_cache_is_l3_else_l2_and_an_unknown_one_is_assumed() {
    let c = |l2, l3| Caches {
        line: 64,
        l1d: Some(32 << 10),
        l2,
        l3,
    };
    assert_eq!(
        c(Some(1 << 20), Some(32 << 20)).last_level(),
        Some(32 << 20)
    );
    assert_eq!(c(Some(1 << 20), None).last_level(), Some(1 << 20));
    assert_eq!(c(Some(1 << 20), Some(0)).last_level(), Some(1 << 20));
    assert_eq!(c(Some(0), Some(0)).last_level(), None);
    assert_eq!(c(None, None).last_level(), None);
    assert_eq!(
        c(Some(0), None).last_level_or_assumed(),
        Caches::ASSUMED_LAST_LEVEL
    );
    assert_eq!(c(Some(1 << 20), None).last_level_or_assumed(), 1 << 20);
}

#[test]
fn the_last_level_share_is_the_cache_capped_at_four_mib_a_core() {
    let c = |l3: Option<u32>| Caches {
        line: 64,
        l1d: Some(48 << 10),
        l2: Some(2 << 20),
        l3,
    };
    // A guest of 2 vCPUs on a socket with a 480 MiB L3: 8 MiB are its.
    assert_eq!(c(Some(480 << 20)).last_level_share(2), 8 << 20);
    // A desktop whose L3 is smaller than the cap: all of it.
    assert_eq!(c(Some(32 << 20)).last_level_share(16), 32 << 20);
    // No core count is taken as one core; no overflow at huge counts.
    assert_eq!(c(Some(32 << 20)).last_level_share(0), 4 << 20);
    assert_eq!(c(Some(32 << 20)).last_level_share(u32::MAX), 32 << 20);
    // Unknown L3 falls back to L2.
    assert_eq!(c(None).last_level_share(2), 2 << 20);
}
