//! The twins of `loopnest.silu_mul`: the family's generated twins (x64
//! AVX-512 and AVX2, arm64 NEON), emitted from its own nest by the native
//! lowerings like every other family's ([`crate::ops::native`]). The nest
//! takes `exp`, so both lowerings send it down the map route
//! ([`crate::map_route`]): read back as `(g ⊘ (1 ⊕ exp(−g))) ⊗ u` and
//! emitted by weft-elementwise's map lowerings, the exp twins' own steps.
//! They are validated against the arm before a planner may choose them
//! ([`super::validation`]).

use std::sync::Arc;

use weft_kernel::Twin;

use super::SiluMul;
use crate::native_x64::Tier;
use crate::ops::native::{native_twins, NestA64Twin, NestX64Twin};

/// The AVX-512 twin's name.
pub const AVX512: &str = "loopnest.silu_mul.twin.avx512";
/// The AVX2 twin's name.
pub const AVX2: &str = "loopnest.silu_mul.twin.avx2";
/// The NEON twin's name.
pub const NEON: &str = "loopnest.silu_mul.twin.neon";

/// The x64 twin at `tier`.
pub fn x64_twin(tier: Tier) -> NestX64Twin<SiluMul> {
    match tier {
        Tier::Avx512 => NestX64Twin::new(tier, AVX512),
        Tier::Avx2 => NestX64Twin::new(tier, AVX2),
    }
}

/// The arm64 twin.
pub fn neon_twin() -> NestA64Twin<SiluMul> {
    NestA64Twin::new(NEON)
}

/// Every twin of the arm, widest x64 tier first, then arm64.
pub fn twins() -> Vec<Arc<dyn Twin>> {
    native_twins::<SiluMul>(AVX512, AVX2, NEON)
}
