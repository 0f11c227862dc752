//! Validation of `q8_0.matmul` twins against the panel arm: row counts
//! around the panel (1, 15, 16, 17, 33, 47, 48, 50, 4096) × blocks (1, 2,
//! 3, 7, 448), batches 1..=17, 31, 64, 255 and 512 (every tile remainder of
//! any body up to 16 vectors wide), special binary16 scales on both sides,
//! quants of -128 in W, member views that start and end inside panels, and
//! the offer's own shape while it is small enough to run in a debug build.
//!
//! Library code: the family's [`entry`](super::entry) checks its twins
//! with these cases.

use std::ops::Range;

use weft_kernel::{Bench, Kernel, Offer, PlacedCode, Refusal, Workbench};
use weft_validate::{Element, Outputs, Validation, CANARY_F32};

use super::super::block::quantize_row;
use super::super::validation::{random_weights, special_activations, special_weights, Rng};
use super::super::Q8Activations;
use super::{activations, check_geometry, Q8MatmulArgs, Q8PanelWeights, ARGS_NAME};

/// One case: packed weights, activations and the rows to compute.
pub struct MatmulCase {
    /// The weights, packed.
    pub w: Q8PanelWeights,
    /// The activations.
    pub x: Q8Activations,
    /// The rows computed (a member view).
    pub rows: Range<usize>,
}

/// `batch` random activation vectors of `blocks` blocks through the
/// reference quantiser (any batch the contract admits).
pub fn batch_activations(blocks: usize, batch: usize, seed: u64) -> Q8Activations {
    let mut rng = Rng::new(seed);
    let x: Vec<f32> = (0..blocks * 32 * batch).map(|_| rng.f32()).collect();
    let bytes = quantize_row(&x).expect("whole blocks");
    activations(bytes, blocks * 32, batch).expect("activations")
}

/// The batches a shape is checked at: every tile remainder while the case
/// is small, fewer as it grows.
fn batches(rows: usize, blocks: usize) -> Vec<usize> {
    match rows * blocks {
        0..=400 => (1..=17).chain([31, 64]).collect(),
        401..=4096 => vec![1, 2, 3, 4, 5, 8, 13],
        _ => vec![1, 3],
    }
}

/// Most outputs any one case computes in a debug build (the offer's own
/// shape is added under this bound; larger ones are covered by the fixed
/// shapes, which share every code path of the bodies).
const OWN_SHAPE_LIMIT: usize = 1 << 24;

/// The cases for `offer`, deterministic in `seed`.
pub fn matmul_cases(offer: Option<&Offer>, seed: u64) -> Vec<MatmulCase> {
    let mut out = Vec::new();
    let mut shapes = Vec::new();
    for rows in [1usize, 15, 16, 17, 33, 47, 48, 50] {
        for blocks in [1usize, 2, 3, 7] {
            shapes.push((rows, blocks));
        }
    }
    shapes.extend([(4096, 1), (4096, 3), (5, 448), (97, 18)]);
    for (i, (rows, blocks)) in shapes.into_iter().enumerate() {
        let s = seed.wrapping_add(1000 * i as u64);
        let w = Q8PanelWeights::from_weights(&random_weights(rows, blocks, s, true));
        for batch in batches(rows, blocks) {
            out.push(MatmulCase {
                w: w.clone(),
                x: batch_activations(blocks, batch, s + batch as u64),
                rows: 0..rows,
            });
        }
    }
    // Long batches: a prompt's chunk and the contract's largest.
    let w = Q8PanelWeights::from_weights(&random_weights(40, 3, seed + 5, true));
    for batch in [255, 512] {
        out.push(MatmulCase {
            w: w.clone(),
            x: batch_activations(3, batch, seed + 6 + batch as u64),
            rows: 0..40,
        });
    }
    // Member views inside W: starts and ends inside panels and on their
    // edges, single rows, an empty range, the whole of a ragged W.
    let w = Q8PanelWeights::from_weights(&random_weights(50, 6, seed + 7, true));
    for (i, rows) in [
        3..10,
        16..32,
        15..17,
        0..50,
        5..5,
        31..49,
        48..50,
        49..50,
        0..16,
    ]
    .into_iter()
    .enumerate()
    {
        out.push(MatmulCase {
            w: w.clone(),
            x: batch_activations(6, 1 + 3 * i, seed + 8 + i as u64),
            rows,
        });
    }
    // Special scales on both sides, quants of -128 in W, ragged rows and
    // batches.
    for (j, (rows, blocks, batch)) in [(5usize, 7usize, 3usize), (19, 5, 8), (33, 6, 5), (7, 9, 2)]
        .into_iter()
        .enumerate()
    {
        let s = seed + 90 + 10 * j as u64;
        out.push(MatmulCase {
            w: Q8PanelWeights::from_weights(&special_weights(rows, blocks, s)),
            x: special_activations(blocks, batch, s + 1, j),
            rows: 0..rows,
        });
    }
    // The offer's own shape, when it is small enough.
    if let Some(offer) = offer {
        let g = &offer.contract.geometry;
        if let (Some(rows), Some(cols), batch) =
            (g.get("rows"), g.get("cols"), g.get("batch").unwrap_or(1))
        {
            if let Ok((rows, blocks, batch)) = check_geometry(rows, cols, batch) {
                if rows * blocks * 32 * batch <= OWN_SHAPE_LIMIT {
                    out.push(MatmulCase {
                        w: Q8PanelWeights::from_weights(&random_weights(
                            rows,
                            blocks,
                            seed + 77,
                            true,
                        )),
                        x: batch_activations(blocks, batch, seed + 78),
                        rows: 0..rows,
                    });
                }
            }
        }
    }
    out
}

/// Validation of `q8_0.matmul` twins.
pub struct MatmulValidation;

// SAFETY: `Args` is the `#[repr(C)]` struct of contracts naming
// ARGS_NAME, and `run` calls a kernel only with args built by
// `Q8MatmulArgs::new`, which checks every extent against the buffers that
// live across the call.
unsafe impl Validation for MatmulValidation {
    type Args = Q8MatmulArgs;
    type Case = MatmulCase;

    fn args_name(&self) -> &str {
        ARGS_NAME
    }

    fn generator(&self) -> String {
        format!("q8_0.matmul panel16 cases v1 (own shape up to {OWN_SHAPE_LIMIT})")
    }

    fn cases(&self, offer: &Offer, seed: u64) -> Vec<MatmulCase> {
        matmul_cases(Some(offer), seed)
    }

    fn run(&self, kernel: &Kernel<Q8MatmulArgs>, case: &MatmulCase) -> Result<Outputs, Refusal> {
        let n = case.x.batch() * case.w.rows();
        let mut y = vec![f32::from_bits(CANARY_F32); n];
        let args = Q8MatmulArgs::new(&case.w, &case.x, &mut y, case.rows.clone())?;
        // SAFETY: `Q8MatmulArgs::new` checked the extents against `case`
        // and `y`, which outlive the call.
        unsafe { kernel.call(&args) };
        let mut out = Outputs::from_f32(y);
        out.element = Element::F32;
        Ok(out)
    }

    fn describe_input(&self, case: &MatmulCase, index: usize) -> String {
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

/// The family's [`Workbench`]: the offer's own packed weights (the site's,
/// repacked at plan time) and random activations at its geometry.
#[derive(Clone, Copy, Debug, Default)]
pub struct MatmulBench;

/// Prepared inputs of [`MatmulBench`].
struct MatmulPrepared {
    w: Q8PanelWeights,
    x: Q8Activations,
    y: Vec<f32>,
}

impl Workbench for MatmulBench {
    fn prepare(&self, offer: &Offer, seed: u64) -> Result<Box<dyn Bench>, Refusal> {
        if offer.contract.args != ARGS_NAME {
            return Err(Refusal::BadOperand {
                operand: "args".to_owned(),
                reason: format!(
                    "the q8_0.matmul bench runs {ARGS_NAME}, not {}",
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
        let (rows, blocks, batch) = check_geometry(rows, cols, batch)?;
        // The offer's own packed weights, or (weights passed per call)
        // random ones packed here.
        let w = match offer.packed.iter().find(|p| p.name == "weights") {
            Some(op) => Q8PanelWeights::from_operand(op, rows, 32 * blocks)?,
            None => Q8PanelWeights::from_weights(&random_weights(rows, blocks, seed, false)),
        };
        Ok(Box::new(MatmulPrepared {
            w,
            x: batch_activations(blocks, batch, seed ^ 0x5eed),
            y: vec![0.0; rows * batch],
        }))
    }
}

impl Bench for MatmulPrepared {
    unsafe fn run(&mut self, code: &std::sync::Arc<PlacedCode>) -> Result<(), Refusal> {
        // SAFETY: the caller promises `code` is a body built for a
        // q8_0.matmul offer, which honours the leaf ABI for `Q8MatmulArgs`.
        let kernel = unsafe { Kernel::<Q8MatmulArgs>::from_placed(code.clone(), 0)? };
        let rows = self.w.rows();
        let args = Q8MatmulArgs::new(&self.w, &self.x, &mut self.y, 0..rows)?;
        // SAFETY: `new` checked the extents against buffers owned by `self`,
        // which outlive the call.
        unsafe { kernel.call(&args) };
        Ok(())
    }
}
