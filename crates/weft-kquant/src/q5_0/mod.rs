//! The `q5_0.matvec` family: `Y = W·X` with W in Q5_0 (the GGUF tensor
//! bytes, 22 per block of 32 weights) and X in Q8_0, as llama.cpp pairs
//! them.
//!
//! # Layout
//!
//! - **W** is `rows × cols`, `cols = 32 · blocks`, row-major blocks:
//!   `d` (binary16), `qh` (32 fifth bits, little-endian), 16 bytes of
//!   nibbles — byte `j` holds element `j` low and element `j + 16` high.
//!   Element `i` is `(nibble | bit i of qh << 4) - 16`, in `-16..=15`.
//! - **X**: `batch` vectors (`1..=8`) of `blocks` Q8_0 blocks (`d`, 32
//!   `i8`; any bytes).
//! - **Y** is `batch × rows` f32, `y[n · rows + r]`.
//!
//! # Contract (how every arm and twin rounds)
//!
//! For one row and one vector, block `b` with weight quants `q[i]`,
//! activation quants `x[i]` and scales `dw`, `dx`:
//!
//! 1. Integer lanes, exact (`|I| ≤ 8192`, exact in f32):
//!    `I[l] = Σ_{k<4} q[4l+k] · x[4l+k]`, `l < 8`: dword `l` of the block.
//! 2. `s = f32(dw) ⊗ f32(dx)` (exact widenings, one f32 multiply).
//! 3. `acc[l] ← acc[l] ⊕ (f32(I[l]) ⊗ s)`, all `+0.0` at first, blocks
//!    in order, **no FMA**.
//! 4. Fold: `u[l] = acc[l] ⊕ acc[l+4]` (`l < 4`);
//!    `y = (u[0] ⊕ u[2]) ⊕ (u[1] ⊕ u[3])`.
//!
//! Eight lanes are one ymm of a block's 32 bytes (low nibbles then high
//! ones are elements 0–15 then 16–31), two `.4s` on NEON.

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
use weft_quant::Format;

use super::{check_geometry as check_k_geometry, ARGS_NAME};

/// The family's name.
pub const FAMILY: &str = "q5_0.matvec";

/// Bytes per weight block.
pub const BLOCK_BYTES: usize = weft_quant::q5::Q5_0_BYTES;

/// The family as a planner registers it: one arm with its x64 and arm64 twins,
/// validation and bench.
pub fn entry() -> weft_kernel::FamilyEntry {
    use weft_kernel::{ArmEntry, Twin};
    use weft_validate::Checker;
    fn arc<T: Twin + 'static>(t: T) -> Arc<dyn Twin> {
        Arc::new(t)
    }
    let lanes8 = ArmEntry::new(
        Arc::new(arm::Q5_0MatvecArm),
        twin_x64::TWINS
            .into_iter()
            .map(arc)
            .chain(twin_a64::TWINS.into_iter().map(arc))
            .collect(),
        Arc::new(Checker(crate::validation::KValidation(Format::Q5_0))),
        Some(Arc::new(crate::validation::KBench(Format::Q5_0))),
    );
    weft_kernel::FamilyEntry {
        family: weft_kernel::Family(FAMILY),
        arms: vec![lanes8],
    }
}

/// Check a geometry against the contract; returns `(rows, blocks, batch)`.
pub fn check_geometry(rows: u64, cols: u64, batch: u64) -> Result<(usize, usize, usize), Refusal> {
    check_k_geometry(rows, cols, batch, Format::Q5_0)
}

/// The geometry of a site: `rows`, `cols`, `batch`.
pub fn geometry(rows: u64, cols: u64, batch: u64) -> Geometry {
    Geometry::new()
        .with("rows", rows)
        .with("cols", cols)
        .with("batch", batch)
}

/// The contract of every `q5_0.matvec` offer (see the module docs).
pub fn contract(rows: u64, cols: u64, batch: u64) -> Contract {
    Contract {
        family: FAMILY.to_owned(),
        geometry: geometry(rows, cols, batch),
        args: ARGS_NAME.to_owned(),
        arithmetic: ArithmeticContract {
            accumulator_lanes: 8,
            reduction: ReductionOrder::Strided {
                lanes: 8,
                fold: "u[l] = acc[l]+acc[l+4]; y = (u0+u2)+(u1+u3)".to_owned(),
            },
            fma: FmaUse::Never,
            nan: NanRule::ByClass,
            notes: "per block: I[l] = exact i32 dot of dword l; s = f32(dw)*f32(dx); \
                    acc[l] += f32(I[l])*s (mul then add)"
                .to_owned(),
        },
        aliasing: Aliasing::disjoint(),
    }
}
