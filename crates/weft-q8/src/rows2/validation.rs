//! Validation of rows2 twins against the rows2 arm: the brief's row counts
//! (1, 2, 3, 5, 4096) × blocks per row (1, 2, 3, 448), every batch 1..=8
//! where it is cheap, special binary16 scales on both sides, quants of
//! -128 in W, and member views that start inside W at odd and even rows.
//! 4096 rows are checked at 1–3 blocks and 448 blocks at up to 5 rows (the
//! shared [`shapes`]): a 4096 × 448 case is 62 MB of weights, too slow to
//! generate and run in a debug build under qemu.
//!
//! Library code: the rows2 arm's entry in the family's
//! [`entry`](super::super::entry) checks its twins with these cases, on
//! offers whose contract takes [`Q8Rows2Args`].

use std::ops::Range;

use weft_kernel::{Bench, Kernel, Offer, PlacedCode, Refusal, Workbench};
use weft_validate::{Element, Outputs, Validation, CANARY_F32};

use super::super::validation::{
    random_activations, random_weights, shapes, special_activations, special_weights,
};
use super::super::Q8Activations;
use super::{Q8Rows2Args, Q8Rows2Weights, ARGS_NAME, LAYOUT};

/// One case: packed weights, activations and the rows to compute.
pub struct Rows2Case {
    /// The weights, packed.
    pub w: Q8Rows2Weights,
    /// The activations.
    pub x: Q8Activations,
    /// The rows computed (a member view).
    pub rows: Range<usize>,
}

/// The batches a shape is checked at: all of them while the case is small.
fn batches(rows: usize, blocks: usize) -> &'static [usize] {
    match rows * blocks {
        0..=1536 => &[1, 2, 3, 4, 5, 6, 7, 8],
        1537..=4096 => &[1, 2, 3, 8],
        _ => &[1, 2, 3],
    }
}

/// The cases, deterministic in `seed`.
pub fn rows2_cases(seed: u64) -> Vec<Rows2Case> {
    let mut out = Vec::new();
    for (i, (rows, blocks)) in shapes().into_iter().enumerate() {
        let s = seed.wrapping_add(1000 * i as u64);
        let w = Q8Rows2Weights::from_weights(&random_weights(rows, blocks, s, true));
        for &batch in batches(rows, blocks) {
            out.push(Rows2Case {
                w: w.clone(),
                x: random_activations(blocks, batch, s + batch as u64),
                rows: 0..rows,
            });
        }
    }
    // Member views inside W: odd and even starts and ends, single rows,
    // an empty range, the whole of an odd-row W.
    let w = Q8Rows2Weights::from_weights(&random_weights(11, 6, seed + 7, true));
    for (i, rows) in [3..10, 4..9, 3..4, 1..2, 10..11, 0..11, 5..5, 2..8]
        .into_iter()
        .enumerate()
    {
        out.push(Rows2Case {
            w: w.clone(),
            x: random_activations(6, 1 + i % 4, seed + 8 + i as u64),
            rows,
        });
    }
    // Special scales on both sides, quants of -128 in W, odd rows and
    // batches, every tail length.
    for (j, (rows, blocks, batch)) in [(5usize, 7usize, 3usize), (3, 5, 8), (6, 6, 5), (7, 9, 2)]
        .into_iter()
        .enumerate()
    {
        let s = seed + 90 + 10 * j as u64;
        out.push(Rows2Case {
            w: Q8Rows2Weights::from_weights(&special_weights(rows, blocks, s)),
            x: special_activations(blocks, batch, s + 1, j),
            rows: 0..rows,
        });
    }
    out
}

/// Validation of rows2 twins.
pub struct Rows2Validation;

// SAFETY: `Args` is the `#[repr(C)]` struct of contracts naming
// ARGS_NAME, and `run` calls a kernel only with args built by
// `Q8Rows2Args::new`, which checks every extent against the buffers that
// live across the call.
unsafe impl Validation for Rows2Validation {
    type Args = Q8Rows2Args;
    type Case = Rows2Case;

    fn args_name(&self) -> &str {
        ARGS_NAME
    }

    fn generator(&self) -> String {
        "q8_0.matvec rows2 cases v1".to_owned()
    }

    fn cases(&self, _offer: &Offer, seed: u64) -> Vec<Rows2Case> {
        rows2_cases(seed)
    }

    fn run(&self, kernel: &Kernel<Q8Rows2Args>, case: &Rows2Case) -> Result<Outputs, Refusal> {
        let n = case.x.batch() * case.w.rows();
        let mut y = vec![f32::from_bits(CANARY_F32); n];
        let args = Q8Rows2Args::new(&case.w, &case.x, &mut y, case.rows.clone())?;
        // SAFETY: `Q8Rows2Args::new` checked the extents against `case`
        // and `y`, which outlive the call.
        unsafe { kernel.call(&args) };
        let mut out = Outputs::from_f32(y);
        out.element = Element::F32;
        Ok(out)
    }

    fn describe_input(&self, case: &Rows2Case, index: usize) -> String {
        let rows = case.w.rows();
        format!(
            "rows {rows} blocks {} batch {} range {:?}: vector {} row {}",
            case.w.blocks(),
            case.x.batch(),
            case.rows,
            index / rows,
            index % rows
        )
    }
}

/// The rows2 contract's [`Workbench`]: the offer's own packed weights (the
/// site's, repacked at plan time) and random activations at its geometry.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rows2Bench;

/// Prepared inputs of [`Rows2Bench`].
struct Rows2Prepared {
    w: Q8Rows2Weights,
    x: Q8Activations,
    y: Vec<f32>,
}

impl Workbench for Rows2Bench {
    fn prepare(&self, offer: &Offer, seed: u64) -> Result<Box<dyn Bench>, Refusal> {
        if offer.contract.args != ARGS_NAME {
            return Err(Refusal::BadOperand {
                operand: "args".to_owned(),
                reason: format!(
                    "the rows2 bench runs {ARGS_NAME}, not {}",
                    offer.contract.args
                ),
            });
        }
        let g = &offer.contract.geometry;
        let (rows, cols, batch) = (
            g.require("rows")?,
            g.require("cols")?,
            g.get("batch").unwrap_or(1),
        );
        let (rows, blocks, batch) = super::super::check_geometry(rows, cols, batch)?;
        let op = offer
            .packed
            .iter()
            .find(|p| p.name == "weights")
            .ok_or_else(|| Refusal::BadOperand {
                operand: "weights".to_owned(),
                reason: format!("the offer carries no {LAYOUT} operand"),
            })?;
        Ok(Box::new(Rows2Prepared {
            w: Q8Rows2Weights::from_operand(op, rows, 32 * blocks)?,
            x: random_activations(blocks, batch, seed ^ 0x5eed),
            y: vec![0.0; rows * batch],
        }))
    }
}

impl Bench for Rows2Prepared {
    unsafe fn run(&mut self, code: &std::sync::Arc<PlacedCode>) -> Result<(), Refusal> {
        // SAFETY: the caller promises `code` is a body built for a rows2
        // offer, which honours the leaf ABI for `Q8Rows2Args`.
        let kernel = unsafe { Kernel::<Q8Rows2Args>::from_placed(code.clone(), 0)? };
        let rows = self.w.rows();
        let args = Q8Rows2Args::new(&self.w, &self.x, &mut self.y, 0..rows)?;
        // SAFETY: `new` checked the extents against buffers owned by `self`,
        // which outlive the call.
        unsafe { kernel.call(&args) };
        Ok(())
    }
}
