//! CPU features and sets of them.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::Isa;

/// One instruction-set feature a kernel may depend on.
///
/// The discriminant is the feature's bit in [`Features`] and part of the
/// [`Fingerprint`](crate::Fingerprint) encoding: it never changes, and new
/// features are only ever appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[repr(u8)]
pub enum Feature {
    /// x86 SSE2 (baseline on x86-64).
    Sse2 = 0,
    /// x86 SSE4.1.
    Sse41 = 1,
    /// x86 SSE4.2.
    Sse42 = 2,
    /// x86 POPCNT.
    Popcnt = 3,
    /// x86 AVX (OS saves ymm state).
    Avx = 4,
    /// x86 AVX2.
    Avx2 = 5,
    /// x86 FMA3.
    Fma = 6,
    /// x86 F16C: fp16 <-> f32 conversion (`vcvtph2ps`).
    F16c = 7,
    /// x86 BMI1.
    Bmi1 = 8,
    /// x86 BMI2.
    Bmi2 = 9,
    /// x86 AVX-512 Foundation (OS saves zmm and mask state).
    Avx512f = 10,
    /// x86 AVX-512 byte and word instructions.
    Avx512bw = 11,
    /// x86 AVX-512 vector-length extensions (EVEX on xmm/ymm).
    Avx512vl = 12,
    /// x86 AVX-512 doubleword and quadword instructions.
    Avx512dq = 13,
    /// x86 AVX-512 conflict detection.
    Avx512cd = 14,
    /// x86 AVX-512 VNNI: EVEX `vpdpbusd` and friends.
    Avx512vnni = 15,
    /// x86 AVX-512 BF16.
    Avx512bf16 = 16,
    /// x86 AVX-512 FP16 arithmetic.
    Avx512fp16 = 17,
    /// x86 AVX-VNNI: the VEX-encoded `vpdpbusd` (distinct from AVX-512 VNNI).
    AvxVnni = 18,
    /// arm64 Advanced SIMD.
    Neon = 19,
    /// arm64 SDOT/UDOT (FEAT_DotProd).
    Dotprod = 20,
    /// arm64 SMMLA/UMMLA/USMMLA (FEAT_I8MM).
    I8mm = 21,
    /// arm64 half-precision arithmetic (FEAT_FP16).
    Fp16 = 22,
    /// arm64 BFloat16 (FEAT_BF16).
    Bf16 = 23,
}

impl Feature {
    /// Every feature, in bit order.
    pub const ALL: [Feature; 24] = [
        Feature::Sse2,
        Feature::Sse41,
        Feature::Sse42,
        Feature::Popcnt,
        Feature::Avx,
        Feature::Avx2,
        Feature::Fma,
        Feature::F16c,
        Feature::Bmi1,
        Feature::Bmi2,
        Feature::Avx512f,
        Feature::Avx512bw,
        Feature::Avx512vl,
        Feature::Avx512dq,
        Feature::Avx512cd,
        Feature::Avx512vnni,
        Feature::Avx512bf16,
        Feature::Avx512fp16,
        Feature::AvxVnni,
        Feature::Neon,
        Feature::Dotprod,
        Feature::I8mm,
        Feature::Fp16,
        Feature::Bf16,
    ];

    /// The name std's `is_*_feature_detected!` macros use for this feature
    /// (`"sse4.1"`, `"avx512vnni"`, `"avxvnni"`, `"dotprod"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Feature::Sse2 => "sse2",
            Feature::Sse41 => "sse4.1",
            Feature::Sse42 => "sse4.2",
            Feature::Popcnt => "popcnt",
            Feature::Avx => "avx",
            Feature::Avx2 => "avx2",
            Feature::Fma => "fma",
            Feature::F16c => "f16c",
            Feature::Bmi1 => "bmi1",
            Feature::Bmi2 => "bmi2",
            Feature::Avx512f => "avx512f",
            Feature::Avx512bw => "avx512bw",
            Feature::Avx512vl => "avx512vl",
            Feature::Avx512dq => "avx512dq",
            Feature::Avx512cd => "avx512cd",
            Feature::Avx512vnni => "avx512vnni",
            Feature::Avx512bf16 => "avx512bf16",
            Feature::Avx512fp16 => "avx512fp16",
            Feature::AvxVnni => "avxvnni",
            Feature::Neon => "neon",
            Feature::Dotprod => "dotprod",
            Feature::I8mm => "i8mm",
            Feature::Fp16 => "fp16",
            Feature::Bf16 => "bf16",
        }
    }

    /// The feature whose [`name`](Feature::name) is `name`, if any.
    pub fn from_name(name: &str) -> Option<Feature> {
        Feature::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The instruction set this feature belongs to.
    pub const fn isa(self) -> Isa {
        if (self as u8) < Feature::Neon as u8 {
            Isa::X86_64
        } else {
            Isa::Aarch64
        }
    }

    const fn bit(self) -> u64 {
        1u64 << (self as u8)
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of [`Feature`]s, one bit each (bit index = the feature's
/// discriminant).
///
/// `Debug` lists the feature names, e.g. `Features{avx, avx2, fma}`.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Features(u64);

impl Features {
    /// The empty set.
    pub const EMPTY: Features = Features(0);

    /// Whether `feature` is in the set.
    pub const fn contains(self, feature: Feature) -> bool {
        self.0 & feature.bit() != 0
    }

    /// Whether every feature of `required` is in the set.
    pub const fn contains_all(self, required: Features) -> bool {
        self.0 & required.0 == required.0
    }

    /// Adds `feature` to the set.
    pub fn insert(&mut self, feature: Feature) {
        self.0 |= feature.bit();
    }

    /// Removes `feature` from the set.
    pub fn remove(&mut self, feature: Feature) {
        self.0 &= !feature.bit();
    }

    /// The set with `feature` added (for building constants).
    pub const fn with(self, feature: Feature) -> Features {
        Features(self.0 | feature.bit())
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The raw bits (bit `n` = the feature with discriminant `n`).
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// The features in the set, in bit order.
    pub fn iter(self) -> impl Iterator<Item = Feature> {
        Feature::ALL.into_iter().filter(move |f| self.contains(*f))
    }
}

impl FromIterator<Feature> for Features {
    fn from_iter<I: IntoIterator<Item = Feature>>(iter: I) -> Self {
        let mut set = Features::EMPTY;
        set.extend(iter);
        set
    }
}

impl Extend<Feature> for Features {
    fn extend<I: IntoIterator<Item = Feature>>(&mut self, iter: I) {
        for feature in iter {
            self.insert(feature);
        }
    }
}

impl fmt::Debug for Features {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Features{")?;
        for (i, feature) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(feature.name())?;
        }
        f.write_str("}")
    }
}
