//! x86-64: std's feature macros (they check XCR0, so AVX and AVX-512 are
//! reported only when the OS saves their state) and CPUID for identity and
//! cache geometry.

use std::arch::is_x86_feature_detected as has;
use std::arch::x86_64::{__cpuid_count, CpuidResult};

use super::PartialCaches;
use crate::{Feature, Features};

pub(crate) fn features() -> Features {
    let detected = [
        (Feature::Sse2, has!("sse2")),
        (Feature::Sse41, has!("sse4.1")),
        (Feature::Sse42, has!("sse4.2")),
        (Feature::Popcnt, has!("popcnt")),
        (Feature::Avx, has!("avx")),
        (Feature::Avx2, has!("avx2")),
        (Feature::Fma, has!("fma")),
        (Feature::F16c, has!("f16c")),
        (Feature::Bmi1, has!("bmi1")),
        (Feature::Bmi2, has!("bmi2")),
        (Feature::Avx512f, has!("avx512f")),
        (Feature::Avx512bw, has!("avx512bw")),
        (Feature::Avx512vl, has!("avx512vl")),
        (Feature::Avx512dq, has!("avx512dq")),
        (Feature::Avx512cd, has!("avx512cd")),
        (Feature::Avx512vnni, has!("avx512vnni")),
        (Feature::Avx512bf16, has!("avx512bf16")),
        (Feature::Avx512fp16, has!("avx512fp16")),
        (Feature::AvxVnni, has!("avxvnni")),
    ];
    detected
        .into_iter()
        .filter_map(|(feature, present)| present.then_some(feature))
        .collect()
}

fn cpuid(leaf: u32, subleaf: u32) -> CpuidResult {
    // CPUID exists on every x86-64 CPU; std's intrinsic is safe to call.
    __cpuid_count(leaf, subleaf)
}

fn regs_to_string(words: &[u32]) -> Option<String> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim_matches(|c: char| c == '\0' || c.is_whitespace());
    (!text.is_empty()).then(|| text.to_string())
}

/// The CPUID vendor string (leaf 0) and brand string (leaves
/// 0x8000_0002..=0x8000_0004).
pub(crate) fn identity() -> (Option<String>, Option<String>) {
    let leaf0 = cpuid(0, 0);
    let vendor = regs_to_string(&[leaf0.ebx, leaf0.edx, leaf0.ecx]);
    let max_ext = cpuid(0x8000_0000, 0).eax;
    let model = if max_ext >= 0x8000_0004 {
        let words: Vec<u32> = (0x8000_0002..=0x8000_0004u32)
            .flat_map(|leaf| {
                let r = cpuid(leaf, 0);
                [r.eax, r.ebx, r.ecx, r.edx]
            })
            .collect();
        regs_to_string(&words)
    } else {
        None
    };
    (vendor, model)
}

/// Cache geometry from CPUID: AMD's leaf 0x8000_001D when the topology
/// extensions bit says it exists, else the deterministic cache parameters
/// of leaf 4 (Intel). Both use the same register layout.
pub(crate) fn cpuid_caches() -> PartialCaches {
    let max_basic = cpuid(0, 0).eax;
    let max_ext = cpuid(0x8000_0000, 0).eax;
    let topology_extensions = max_ext >= 0x8000_0001 && cpuid(0x8000_0001, 0).ecx & (1 << 22) != 0;
    let leaf = if topology_extensions && max_ext >= 0x8000_001D {
        0x8000_001D
    } else if max_basic >= 4 {
        4
    } else {
        return PartialCaches::default();
    };
    let mut found = PartialCaches::default();
    for subleaf in 0..16 {
        let r = cpuid(leaf, subleaf);
        let kind = r.eax & 0x1f; // 0 none, 1 data, 2 instruction, 3 unified
        if kind == 0 {
            break;
        }
        if kind == 2 {
            continue;
        }
        let level = (r.eax >> 5) & 0x7;
        let ways = u64::from((r.ebx >> 22) & 0x3ff) + 1;
        let partitions = u64::from((r.ebx >> 12) & 0x3ff) + 1;
        let line = (r.ebx & 0xfff) + 1;
        let sets = u64::from(r.ecx) + 1;
        let size = ways * partitions * u64::from(line) * sets;
        if let Ok(size) = u32::try_from(size) {
            found.record(level, size, Some(line));
        }
    }
    found
}
