//! The `q6_k.matvec` family: `Y = W·X` with W in Q6_K (the GGUF tensor
//! bytes, 210 per super-block of 256 weights) and X in Q8_K.
//!
//! # Layout
//!
//! - **W** is `rows × cols`, `cols = 256 · blocks`, row-major
//!   super-blocks: 128 bytes of low nibbles `ql`, 64 bytes of high bit
//!   pairs `qh`, 16 signed sub-block scales, `d` (binary16). Element `e`
//!   of half `h` (`e < 128`; `l = e mod 32`, `k = e / 32`) is
//!   `ql[64h + l + 32(k mod 2)]`'s low (`k < 2`) or high nibble, with bits
//!   `2k, 2k+1` of `qh[32h + l]` above it, minus 32; sub-block `e / 16`
//!   (weft-quant's [`kquant`](weft_quant::kquant) and ggml's
//!   `dequantize_row_q6_K` give the same order).
//! - **X**: `batch` vectors (`1..=8`) of `blocks` Q8_K super-blocks, whose
//!   `bsums` are the sums of their quants (checked).
//! - **Y** is `batch × rows` f32, `y[n · rows + r]`.
//!
//! # Contract (how every arm and twin rounds)
//!
//! For one row and one vector, super-block `b` with weight quants `q[e]`
//! (`-32..=31`), scales `sc[j]` (`i8`), activation quants `x[e]` and scale
//! `dx`:
//!
//! 1. Integer part, exact (any exact method; `|S| < 2^28`):
//!    `S = Σ_{j<16} sc[j] · Σ_{e in sub-block j} q[e] · x[e]`.
//! 2. `s = f32(d) ⊗ dx` (exact widening, one f32 multiply).
//! 3. `acc ← acc ⊕ (f32(S) ⊗ s)`, `acc` from `+0.0`, super-blocks in
//!    order, **no FMA**; `f32(S)` rounds to nearest, ties to even (`S` may
//!    exceed 2^24). `y = acc`.
//!
//! One scalar chain per output: a super-block costs ~100 instructions of
//! integer work, so its one multiply-add is never the bottleneck, and the
//! contract leaves every body free to sum the integers however it likes.

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
use weft_quant::kquant::Q6_K_BYTES;
use weft_quant::Format;

use super::{check_geometry as check_k_geometry, ARGS_NAME};

/// The family's name.
pub const FAMILY: &str = "q6_k.matvec";

/// Bytes per weight super-block.
pub const BLOCK_BYTES: usize = Q6_K_BYTES;

/// The family as a planner registers it: one arm with its x64 and arm64 twins,
/// validation and bench.
pub fn entry() -> weft_kernel::FamilyEntry {
    use weft_kernel::{ArmEntry, Twin};
    use weft_validate::Checker;
    fn arc<T: Twin + 'static>(t: T) -> Arc<dyn Twin> {
        Arc::new(t)
    }
    let scalar = ArmEntry::new(
        Arc::new(arm::Q6KMatvecArm),
        twin_x64::TWINS
            .into_iter()
            .map(arc)
            .chain(twin_a64::TWINS.into_iter().map(arc))
            .collect(),
        Arc::new(Checker(crate::validation::KValidation(Format::Q6_K))),
        Some(Arc::new(crate::validation::KBench(Format::Q6_K))),
    );
    weft_kernel::FamilyEntry {
        family: weft_kernel::Family(FAMILY),
        arms: vec![scalar],
    }
}

/// Check a geometry against the contract; returns `(rows, blocks, batch)`.
pub fn check_geometry(rows: u64, cols: u64, batch: u64) -> Result<(usize, usize, usize), Refusal> {
    check_k_geometry(rows, cols, batch, Format::Q6_K)
}

/// The geometry of a site: `rows`, `cols`, `batch`.
pub fn geometry(rows: u64, cols: u64, batch: u64) -> Geometry {
    Geometry::new()
        .with("rows", rows)
        .with("cols", cols)
        .with("batch", batch)
}

/// The contract of every `q6_k.matvec` offer (see the module docs).
pub fn contract(rows: u64, cols: u64, batch: u64) -> Contract {
    Contract {
        family: FAMILY.to_owned(),
        geometry: geometry(rows, cols, batch),
        args: ARGS_NAME.to_owned(),
        arithmetic: ArithmeticContract {
            accumulator_lanes: 1,
            reduction: ReductionOrder::Strided {
                lanes: 1,
                fold: "y = acc".to_owned(),
            },
            fma: FmaUse::Never,
            nan: NanRule::ByClass,
            notes: "per super-block: S = Σ_j sc_j·(exact i32 dot of sub-block j); \
                    s = f32(d)*dx; acc += f32(S)*s (mul then add)"
                .to_owned(),
        },
        aliasing: Aliasing::disjoint(),
    }
}
