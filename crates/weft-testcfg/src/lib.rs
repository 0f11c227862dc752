//! The host's CPU features as `cfg`s for tests, set from a build script.
//!
//! One job: let a test that needs a CPU feature say so in its attributes,
//! `#[cfg_attr(not(weft_host_has = "avx512f"), ignore = "needs avx512f")]`,
//! so that `cargo test` on a host without the feature *reports* it as
//! ignored, with the feature's name, instead of passing it silently. A
//! crate calls [`emit`] from its `build.rs` (this crate is a
//! build-dependency only; nothing of it reaches a library).
//!
//! Invariants:
//!
//! - **Detected where the tests run.** A build script runs on the build
//!   machine; its features are the test host's only when the target's
//!   architecture is the build machine's, so only then are x86-64 features
//!   detected. A build for another architecture is run under
//!   `.ci/qemu-aarch64` (qemu-user with `-cpu max`), which has every
//!   AArch64 feature Weft names, so a cross build for aarch64 sets them all.
//! - **Every name is declared** (`rustc-check-cfg`), so a misspelt feature
//!   in a test's attribute is a compile-time warning, not a test that never
//!   runs.

/// One list per ISA gives both the names a test may use and the detector
/// that checks each one, so the two cannot drift apart.
macro_rules! features {
    (@detect "x86_64", $f:tt) => {
        std::is_x86_feature_detected!($f)
    };
    (@detect "aarch64", $f:tt) => {
        std::arch::is_aarch64_feature_detected!($f)
    };
    ($list:ident, $detect:ident, $arch:tt, [$($f:tt),* $(,)?]) => {
        #[doc = concat!("The ", $arch, " features tests may name, as the standard library's detector spells them.")]
        pub const $list: &[&str] = &[$($f),*];

        #[cfg(target_arch = $arch)]
        fn $detect() -> Vec<&'static str> {
            let mut v = Vec::new();
            $(if features!(@detect $arch, $f) { v.push($f); })*
            v
        }

        #[cfg(not(target_arch = $arch))]
        fn $detect() -> Vec<&'static str> {
            Vec::new()
        }
    };
}

features!(
    X86_FEATURES,
    detected_x86,
    "x86_64",
    [
        "avx",
        "avx2",
        "fma",
        "f16c",
        "bmi2",
        "avx512f",
        "avx512bw",
        "avx512dq",
        "avx512vl",
        "avx512vnni",
        "avx512bf16",
    ]
);

features!(
    AARCH64_FEATURES,
    detected_aarch64,
    "aarch64",
    ["neon", "dotprod", "fp16", "i8mm"]
);

/// The extra flag `weft_host_zen4_plus`: an AMD Zen 4 or later core (family
/// 19h model 10h and up, or a later family), the hosts the shipped Zen
/// port tables claim.
pub const ZEN4_PLUS: &str = "weft_host_zen4_plus";

/// Print the `cargo:` lines for a build script: the declaration of every
/// name, then `weft_host_has="…"` for each feature the test host has.
pub fn emit() {
    let values: Vec<String> = X86_FEATURES
        .iter()
        .chain(AARCH64_FEATURES)
        .map(|f| format!("\"{f}\""))
        .collect();
    println!(
        "cargo::rustc-check-cfg=cfg(weft_host_has, values({}))",
        values.join(", ")
    );
    println!("cargo::rustc-check-cfg=cfg({ZEN4_PLUS})");
    println!("cargo::rerun-if-changed=build.rs");
    for f in host_features() {
        println!("cargo::rustc-cfg=weft_host_has=\"{f}\"");
    }
    if zen4_plus() {
        println!("cargo::rustc-cfg={ZEN4_PLUS}");
    }
}

/// Whether the target's architecture is the build machine's.
fn native_target() -> bool {
    std::env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|a| a == std::env::consts::ARCH)
}

fn target_arch() -> String {
    std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default()
}

/// The features the test host has (see the crate's invariants).
pub fn host_features() -> Vec<&'static str> {
    match (target_arch().as_str(), native_target()) {
        ("x86_64", true) => detected_x86(),
        ("aarch64", true) => detected_aarch64(),
        // Cross builds for aarch64 run under qemu-user -cpu max.
        ("aarch64", false) => AARCH64_FEATURES.to_vec(),
        _ => Vec::new(),
    }
}

/// Whether the test host is AMD Zen 4 or later with AVX-512 (x86-64
/// native builds only).
fn zen4_plus() -> bool {
    #[cfg(target_arch = "x86_64")]
    if native_target() {
        use std::arch::x86_64::__cpuid_count;
        let l0 = __cpuid_count(0, 0);
        let vendor: Vec<u8> = [l0.ebx, l0.edx, l0.ecx]
            .iter()
            .flat_map(|r| r.to_le_bytes())
            .collect();
        let leaf1 = __cpuid_count(1, 0);
        let base_family = (leaf1.eax >> 8) & 0xf;
        let family = base_family
            + if base_family == 0xf {
                (leaf1.eax >> 20) & 0xff
            } else {
                0
            };
        let model = ((leaf1.eax >> 4) & 0xf) | (((leaf1.eax >> 16) & 0xf) << 4);
        return vendor == b"AuthenticAMD"
            && (family > 0x19 || (family == 0x19 && model >= 0x10))
            && std::is_x86_feature_detected!("avx512f");
    }
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_feature_detected_is_one_a_test_may_name() {
        // The build machine's own features (a test build is native).
        for f in super::host_features() {
            assert!(
                super::X86_FEATURES.contains(&f) || super::AARCH64_FEATURES.contains(&f),
                "{f}"
            );
        }
        let mut all: Vec<_> = super::X86_FEATURES
            .iter()
            .chain(super::AARCH64_FEATURES)
            .collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "every name declared once");
    }
}
