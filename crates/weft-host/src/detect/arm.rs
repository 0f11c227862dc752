//! arm64: std's feature macros, which ask the OS (HWCAP on Linux, sysctl on
//! macOS, IsProcessorFeaturePresent on Windows).

use std::arch::is_aarch64_feature_detected as has;

use crate::{Feature, Features};

pub(crate) fn features() -> Features {
    let detected = [
        (Feature::Neon, has!("neon")),
        (Feature::Dotprod, has!("dotprod")),
        (Feature::I8mm, has!("i8mm")),
        (Feature::Fp16, has!("fp16")),
        (Feature::Bf16, has!("bf16")),
    ];
    detected
        .into_iter()
        .filter_map(|(feature, present)| present.then_some(feature))
        .collect()
}
