//! The `q4_k.matvec` family: `Y = W·X` with W in Q4_K (the GGUF tensor
//! bytes, 144 per super-block of 256 weights) and X in Q8_K.
//!
//! # Layout
//!
//! - **W** is `rows × cols`, `cols = 256 · blocks`, row-major
//!   super-blocks: `d`, `dmin` (binary16), 12 bytes of packed 6-bit
//!   sub-block scales and minimums, 128 bytes of nibbles. Bytes `32p..32p+32`
//!   of the nibbles hold sub-block `2p` in their low halves and `2p + 1` in
//!   their high halves (weft-quant's [`kquant`](weft_quant::kquant)).
//! - **X** is `batch` vectors (`1..=8`) of `blocks` Q8_K super-blocks
//!   (292 bytes: f32 `d`, 256 `i8` quants, 16 `i16` sums of 16 quants).
//! - **Y** is `batch × rows` f32, `y[n · rows + r]`.
//!
//! # Contract (how every arm and twin rounds)
//!
//! For one row and one vector, super-block `b` with weight quants `q[i]`
//! (`0..=15`), sub-block scales `s[j]` and minimums `m[j]` (`0..=63`,
//! [`scale_min_k4`](weft_quant::kquant::scale_min_k4)), activation quants
//! `x[i]`, sums `bs[k]` and scale `dx`:
//!
//! 1. Integer parts, exact (any exact method; every value fits 2^24, so
//!    its f32 is exact too): eight lanes
//!    `L[l] = Σ_{j<8} s[j] · Σ_{k<4} q[32j+4l+k] · x[32j+4l+k]` — lane `l`
//!    is dword `l` of every 32-byte sub-block — and eight
//!    `N[l] = m[l] · (bs[2l] + bs[2l+1])`.
//! 2. Scales: `dd = f32(d) ⊗ dx`, `dm = f32(dmin) ⊗ dx` (exact widening,
//!    one f32 multiply each).
//! 3. Accumulate, **no FMA**, all lanes `+0.0` at first, `b = 0, 1, …` in
//!    order: `acc[l] ← acc[l] ⊕ (f32(L[l]) ⊗ dd)`, then
//!    `mac[l] ← mac[l] ⊕ (f32(N[l]) ⊗ dm)`.
//! 4. Fold: `t[l] = acc[l] ⊖ mac[l]`; `u[l] = t[l] ⊕ t[l+4]` (`l < 4`);
//!    `y = (u[0] ⊕ u[2]) ⊕ (u[1] ⊕ u[3])`.
//!
//! The eight lanes are one ymm on AVX2, two `.4s` on NEON, and the dword
//! lanes of `vpmaddwd` with the sub-block's scale — so the contract costs
//! a SIMD body nothing; llama.cpp keeps the same lanes but fuses step 3
//! into FMAs, so its sums differ from these in the last bits.

pub mod arm;
pub mod reference;
pub mod twin_a64;
pub mod twin_x64;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use weft_kernel::{
    Aliasing, ArithmeticContract, Contract, FmaUse, Geometry, NanRule, ReductionOrder, Refusal,
};
use weft_quant::kquant::Q4_K_BYTES;
use weft_quant::Format;

use super::{check_geometry as check_k_geometry, ARGS_NAME};

/// The family's name.
pub const FAMILY: &str = "q4_k.matvec";

/// Bytes per weight super-block.
pub const BLOCK_BYTES: usize = Q4_K_BYTES;

/// The family as a planner registers it: one arm with its x64 and arm64 twins,
/// validation and bench.
pub fn entry() -> weft_kernel::FamilyEntry {
    use weft_kernel::{ArmEntry, Twin};
    use weft_validate::Checker;
    fn arc<T: Twin + 'static>(t: T) -> Arc<dyn Twin> {
        Arc::new(t)
    }
    let lanes8 = ArmEntry::new(
        Arc::new(arm::Q4KMatvecArm),
        twin_x64::TWINS
            .into_iter()
            .map(arc)
            .chain(twin_a64::TWINS.into_iter().map(arc))
            .collect(),
        Arc::new(Checker(crate::validation::KValidation(Format::Q4_K))),
        Some(Arc::new(crate::validation::KBench(Format::Q4_K))),
    );
    weft_kernel::FamilyEntry {
        family: weft_kernel::Family(FAMILY),
        arms: vec![lanes8],
    }
}

/// Check a geometry against the contract; returns `(rows, blocks, batch)`.
pub fn check_geometry(rows: u64, cols: u64, batch: u64) -> Result<(usize, usize, usize), Refusal> {
    check_k_geometry(rows, cols, batch, Format::Q4_K)
}

/// The geometry of a site: `rows`, `cols`, `batch`.
pub fn geometry(rows: u64, cols: u64, batch: u64) -> Geometry {
    Geometry::new()
        .with("rows", rows)
        .with("cols", cols)
        .with("batch", batch)
}

/// The contract of every `q4_k.matvec` offer (see the module docs).
pub fn contract(rows: u64, cols: u64, batch: u64) -> Contract {
    Contract {
        family: FAMILY.to_owned(),
        geometry: geometry(rows, cols, batch),
        args: ARGS_NAME.to_owned(),
        arithmetic: ArithmeticContract {
            accumulator_lanes: 16,
            reduction: ReductionOrder::Strided {
                lanes: 8,
                fold: "t[l] = acc[l] - mac[l]; u[l] = t[l]+t[l+4]; y = (u0+u2)+(u1+u3)".to_owned(),
            },
            fma: FmaUse::Never,
            nan: NanRule::ByClass,
            notes: "per super-block: L[l] = Σ_j s_j·(exact i32 dot of dword l of sub-block j), \
                    N[l] = m_l·(bs[2l]+bs[2l+1]); dd = f32(d)*dx, dm = f32(dmin)*dx; \
                    acc[l] += f32(L[l])*dd, mac[l] += f32(N[l])*dm (mul then add)"
                .to_owned(),
        },
        aliasing: Aliasing::disjoint(),
    }
}
