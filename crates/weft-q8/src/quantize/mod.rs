//! The activation quantiser as a family of its own, `q8_0.quantize`:
//! `batch` f32 vectors of `cols` values each to Q8_0 blocks, the input of
//! every `q8_0.matvec` call.
//!
//! # Layout
//!
//! - **x** is `batch · cols` f32 (`x[n · cols + i]`), `cols` a positive
//!   multiple of 32 and `batch` in `1..=512` (the `q8_0.matmul` contract's
//!   batch; a `q8_0.matvec` call takes at most 8).
//!   Since vector `n`'s blocks follow vector `n-1`'s, the input is simply
//!   `blocks = batch · cols / 32` groups of 32 consecutive f32.
//! - **out** is `blocks` Q8_0 blocks of 34 bytes: flat block `k` comes from
//!   `x[32k..32k+32]` and is written at byte `34k` — exactly the
//!   [`Q8Activations`] layout.
//! - Arguments: [`Q8QuantizeArgs`] (`#[repr(C)]`, 5 words); a call
//!   quantises flat blocks `block_start..block_end` and writes only their
//!   bytes. The member views split the `blocks` axis (any cut is valid:
//!   blocks are independent).
//!
//! # Contract
//!
//! Block `k`'s 34 bytes are [`quantize_block`](super::block::quantize_block)
//! of its 32 values, bit for bit: `amax` by C's `MAX(a, b) = a > b ? a : b`
//! from `0.0`, left to right, over `|x_i|` (so a NaN resets the running
//! maximum, and a NaN in the last position makes `amax` NaN); `d = amax /
//! 127`; `id = d != 0 ? 1 / d : 0` (a NaN `d` gives a NaN `id`); the stored
//! scale is `d` rounded to binary16 to nearest even (overflow to `inf`, a
//! NaN quieted with its payload's top bits, as IEEE conversion does);
//! `q_i = roundf(x_i · id)` (ties away from zero), NaN → 0, clamped to
//! `-127..=127`. Every step is an IEEE operation with one defined result,
//! and all outputs are integers or a binary16 pattern, so outputs compare
//! **by bits** (NaN scales included: every implementation here quiets and
//! truncates the payload the same way). No FMA; no reduction whose order
//! could matter (the maximum of non-NaN values is order-free, and a block
//! with a NaN takes the literal left-to-right fold).

pub mod arm;
pub mod twin_a64;
pub mod twin_x64;
pub mod validation;

#[cfg(test)]
mod tests;

use std::ops::Range;

use weft_kernel::{
    Aliasing, ArithmeticContract, Contract, FmaUse, Geometry, KernelArgs, NanRule, ReductionOrder,
    Refusal,
};

use super::matmul::check_geometry;
use super::{Q8Activations, BLOCK_BYTES, BLOCK_LEN};

/// The family's name.
pub const FAMILY: &str = "q8_0.quantize";

/// The name of the argument struct in contracts.
pub const ARGS_NAME: &str = "Q8QuantizeArgs";

/// The family as a planner registers it: the arm, every twin (all ISAs;
/// the planner skips what the host cannot run) and their validation.
pub fn entry() -> weft_kernel::FamilyEntry {
    use std::sync::Arc;
    let mut twins: Vec<Arc<dyn weft_kernel::Twin>> = twin_x64::TWINS
        .iter()
        .map(|t| Arc::new(*t) as Arc<dyn weft_kernel::Twin>)
        .collect();
    twins.push(Arc::new(twin_a64::QuantizeNeon));
    weft_kernel::FamilyEntry {
        family: weft_kernel::Family(FAMILY),
        arms: vec![weft_kernel::ArmEntry::new(
            Arc::new(arm::QuantizeArm),
            twins,
            Arc::new(weft_validate::Checker(validation::QuantizeValidation)),
            Some(Arc::new(validation::QuantizeBench)),
        )],
    }
}

/// The arguments of every `q8_0.quantize` kernel (`extern "C" fn(*const
/// Q8QuantizeArgs)`). Build them with [`Q8QuantizeArgs::new`], which checks
/// every length.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Q8QuantizeArgs {
    /// `32 · blocks` f32 inputs (any alignment).
    pub x: *const f32,
    /// `34 · blocks` output bytes.
    pub out: *mut u8,
    /// Flat blocks in `x` and `out` (`batch · cols / 32`).
    pub blocks: usize,
    /// First flat block quantised.
    pub block_start: usize,
    /// One past the last (`block_start ≤ block_end ≤ blocks`).
    pub block_end: usize,
}

// SAFETY: `Q8QuantizeArgs` is the `#[repr(C)]` struct of every contract
// naming ARGS_NAME. A body reads `x[32k..32k+32]` and writes
// `out[34k..34k+34]` only for `k` in `block_start..block_end`, so copies
// restricted to disjoint block ranges write disjoint bytes, and no body
// writes what another reads (`x` is never written).
unsafe impl KernelArgs for Q8QuantizeArgs {
    const NAME: &'static str = ARGS_NAME;

    fn range(&self) -> Range<u64> {
        self.block_start as u64..self.block_end as u64
    }

    fn restrict(&self, range: Range<u64>) -> Self {
        Self {
            block_start: range.start as usize,
            block_end: range.end as usize,
            ..*self
        }
    }
}

// SAFETY: see `KernelArgs` above: the pointers are dereferenced only by a
// body called through `Kernel::call`, whose caller keeps them valid.
unsafe impl Send for Q8QuantizeArgs {}
// SAFETY: as for `Send`; a shared reference only lets threads copy it.
unsafe impl Sync for Q8QuantizeArgs {}

/// Byte offsets of the fields of [`Q8QuantizeArgs`] (the emitters' view).
pub mod offsets {
    /// `x`.
    pub const X: i32 = 0;
    /// `out`.
    pub const OUT: i32 = 8;
    /// `blocks`.
    pub const BLOCKS: i32 = 16;
    /// `block_start`.
    pub const BLOCK_START: i32 = 24;
    /// `block_end`.
    pub const BLOCK_END: i32 = 32;
}

fn bad(operand: &str, reason: String) -> Refusal {
    Refusal::BadOperand {
        operand: operand.to_owned(),
        reason,
    }
}

impl Q8QuantizeArgs {
    /// Arguments quantising flat blocks `blocks` of `batch` vectors of
    /// `cols` values: `x` must hold exactly `batch · cols` f32 and `out`
    /// exactly `batch · cols / 32 · 34` bytes (any alignment), and the range
    /// must lie inside; otherwise a named refusal (`unsupported-geometry`
    /// for `cols`/`batch`, `bad-operand` for lengths and the range).
    pub fn new(
        x: &[f32],
        out: &mut [u8],
        cols: usize,
        batch: usize,
        blocks: Range<usize>,
    ) -> Result<Self, Refusal> {
        let (_, per_vector, batch) = check_geometry(1, cols as u64, batch as u64)?;
        let total = per_vector * batch;
        if x.len() != total * BLOCK_LEN {
            return Err(bad(
                "x",
                format!(
                    "{} f32s, {batch}×{cols} needs {}",
                    x.len(),
                    total * BLOCK_LEN
                ),
            ));
        }
        if out.len() != total * BLOCK_BYTES {
            return Err(bad(
                "out",
                format!(
                    "{} bytes, {total} Q8_0 blocks need {}",
                    out.len(),
                    total * BLOCK_BYTES
                ),
            ));
        }
        if blocks.start > blocks.end || blocks.end > total {
            return Err(bad(
                "blocks",
                format!("{blocks:?} is not inside 0..{total}"),
            ));
        }
        Ok(Self {
            x: x.as_ptr(),
            out: out.as_mut_ptr(),
            blocks: total,
            block_start: blocks.start,
            block_end: blocks.end,
        })
    }
}

/// The geometry of a site: `cols`, `batch`.
pub fn geometry(cols: u64, batch: u64) -> Geometry {
    Geometry::new().with("cols", cols).with("batch", batch)
}

/// The `(cols, batch, blocks)` of a geometry, checked against the
/// contract (`batch` defaults to 1).
pub fn dims(geometry: &Geometry) -> Result<(u64, u64, u64), Refusal> {
    let cols = geometry.require("cols")?;
    let batch = geometry.get("batch").unwrap_or(1);
    let (_, per_vector, batch_ok) = check_geometry(1, cols, batch)?;
    Ok((cols, batch, (per_vector * batch_ok) as u64))
}

/// The contract of every `q8_0.quantize` offer (see the module docs).
pub fn contract(cols: u64, batch: u64) -> Contract {
    Contract {
        family: FAMILY.to_owned(),
        geometry: geometry(cols, batch),
        args: ARGS_NAME.to_owned(),
        arithmetic: ArithmeticContract {
            accumulator_lanes: 1,
            reduction: ReductionOrder::Described(
                "amax = C MAX(amax, |x_i|) from 0.0, i = 0..32 left to right (order-free \
                 without NaN)"
                    .to_owned(),
            ),
            fma: FmaUse::Never,
            nan: NanRule::ByBits,
            notes: "quantize_block bit for bit: d = amax/127; id = d != 0 ? 1/d : 0; \
                    scale = binary16 RNE of d; q = clamp(roundf(x*id), -127, 127), NaN -> 0"
                .to_owned(),
        },
        aliasing: Aliasing::disjoint(),
    }
}

/// Quantise with the scalar reference: the bytes every kernel must write
/// (`batch · cols / 32` blocks).
pub fn reference(x: &[f32], cols: usize, batch: usize) -> Result<Q8Activations, Refusal> {
    super::quantize_activations(x, cols, batch)
}
