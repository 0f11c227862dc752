//! The cases the epilogue twins are judged on (against the arm), and the
//! micro-race bench.
//!
//! Bodies read every extent from their arguments, so cases sweep what
//! breaks a vector loop over pixels and channels, at the offer's stage:
//!
//! - `cout` 1, 3, 4, 5, 8, 15, 16, 17, 31, 33, 64, 100 (every tail of 4, 8
//!   and 16 lanes, whole and ragged lines), output rows of 1, 7 and 56
//!   columns, batch 1 and 3;
//! - row ranges (member views): odd starts and ends, one row, empty;
//! - y starting 0–3 floats into its buffer (unaligned starts);
//! - stage 0: y NaN before the call (a missed store shows), biases with
//!   special values (NaN, ±∞, ±0, subnormals: copied as bits);
//! - stage 1: every activation over values that hunt its edges: ±0, NaN,
//!   ±∞, subnormals, values about 6 (ReLU6's clamp), about −87 and −110
//!   (SiLU's range reduction and clamp), and wide random ones.
//!
//! The output is the whole y buffer, the floats before its start and a
//! guard after its end included, so a store outside the rows is a
//! mismatch too.

use std::ops::Range;

use weft_kernel::{Bench, Kernel, Offer, PlacedCode, Refusal, Workbench};
use weft_validate::{f32_special_values, Element, Outputs, SplitMix64, Validation, CANARY_F32};

use super::{args, PackedBias, Stage};
use crate::{Activation, ConvArgs, ConvGeometry, ARGS_NAME};

/// One case: a geometry (1 × 1; its `act` is stage 1's), the stage, the
/// bias (stage 0), y's initial buffer and where y starts in it, the rows.
#[derive(Clone, Debug)]
pub struct EpilogueCase {
    /// The geometry.
    pub g: ConvGeometry,
    /// The stage.
    pub stage: Stage,
    /// Stage 0's bias, packed.
    pub bias: Option<PackedBias>,
    /// y's initial buffer and where y starts in it.
    pub y: (Vec<f32>, usize),
    /// The flattened output rows computed.
    pub rows: Range<u64>,
}

impl EpilogueCase {
    /// The arguments of this case over `y` (a copy of its y buffer).
    pub fn args(&self, y: &mut [f32]) -> Result<ConvArgs, Refusal> {
        args(
            &self.g,
            self.stage,
            self.bias.as_ref(),
            &mut y[self.y.1..],
            self.rows.clone(),
        )
    }
}

/// Values that hunt the activations' edges.
fn edges() -> Vec<f32> {
    let mut v: Vec<f32> = f32_special_values()
        .into_iter()
        .map(f32::from_bits)
        .collect();
    for c in [0.0f32, 6.0, -87.0, -87.3, -103.0, -110.0, -110.5, 88.0] {
        v.extend([c, c.next_up(), c.next_down()]);
    }
    v
}

fn values(rng: &mut SplitMix64, len: usize, edges: &[f32]) -> Vec<f32> {
    (0..len)
        .map(|_| match rng.below(4) {
            0 => edges[rng.below(edges.len() as u64) as usize],
            1 => (rng.below(1025) as f32 - 512.0) / 64.0,
            _ => {
                let u = rng.unit_f64() * 2.0 - 1.0;
                (u * 8.0f64.powf(rng.unit_f64() * 5.0 - 2.0)) as f32
            }
        })
        .collect()
}

/// The cases at `stage`, deterministic in `seed`.
pub fn cases(stage: Stage, seed: u64) -> Vec<EpilogueCase> {
    let mut rng = SplitMix64::new(seed);
    let edges = edges();
    let mut out = Vec::new();
    let mut idx = 0usize;
    let mut push = |rng: &mut SplitMix64,
                    batch: u64,
                    (h, w): (u64, u64),
                    cout: u64,
                    rows: Option<Range<u64>>| {
        let act = Activation::ALL[idx % 4];
        let g = ConvGeometry {
            batch,
            in_h: h,
            in_w: w,
            cin: 1 + (idx as u64 % 3),
            cout,
            k_h: 1,
            k_w: 1,
            stride: 1,
            pad: 0,
            dil: 1,
            groups: 1,
            act: if stage == Stage::Act {
                act
            } else {
                Activation::None
            },
        };
        let s = g.check().expect("1 × 1 geometries are valid");
        let off = idx % 4;
        let n = g.y_len(&s);
        let mut y = vec![f32::NAN; off];
        match stage {
            Stage::Bias => y.extend(std::iter::repeat_n(f32::NAN, n)),
            Stage::Act => y.extend(values(rng, n, &edges)),
        }
        y.extend([1.0f32; 3]);
        let bias =
            (stage == Stage::Bias).then(|| PackedBias::pack(&values(rng, cout as usize, &edges)));
        out.push(EpilogueCase {
            g,
            stage,
            bias,
            y: (y, off),
            rows: rows.unwrap_or(0..batch * h),
        });
        idx += 1;
    };
    for cout in [1u64, 3, 4, 5, 8, 15, 16, 17, 31, 33, 64, 100] {
        for size in [(1u64, 1u64), (7, 7), (3, 56)] {
            push(&mut rng, 1, size, cout, None);
        }
    }
    for rows in [Some(1..2), Some(3..10), Some(4..4), Some(0..21), None] {
        push(&mut rng, 3, (7, 5), 17, rows.clone());
        push(&mut rng, 3, (7, 5), 33, rows);
    }
    // Every activation at each of a few shapes (the rotation above
    // gives each shape one).
    for _ in 0..4 {
        push(&mut rng, 1, (5, 9), 19, None);
        push(&mut rng, 2, (4, 4), 64, Some(1..7));
    }
    out
}

/// Validation of the epilogue twins against the arm.
#[derive(Clone, Copy, Debug)]
pub struct EpilogueValidation;

// SAFETY: `Args` is the `#[repr(C)]` struct of contracts naming ARGS_NAME,
// and `run` calls a kernel only with arguments built by `pointwise::args`,
// which checks y's extent and the bias's channels against buffers that
// outlive the call.
unsafe impl Validation for EpilogueValidation {
    type Args = ConvArgs;
    type Case = EpilogueCase;

    fn args_name(&self) -> &str {
        ARGS_NAME
    }

    fn generator(&self) -> String {
        "conv.epilogue cases v1".to_owned()
    }

    fn cases(&self, offer: &Offer, seed: u64) -> Vec<EpilogueCase> {
        match Stage::of(&offer.contract.geometry) {
            Ok(stage) => cases(stage, seed),
            Err(_) => Vec::new(),
        }
    }

    fn run(&self, kernel: &Kernel<ConvArgs>, case: &EpilogueCase) -> Result<Outputs, Refusal> {
        let mut y = case.y.0.clone();
        y.extend(std::iter::repeat_n(f32::from_bits(CANARY_F32), 16));
        let args = case.args(&mut y)?;
        // SAFETY: `pointwise::args` checked y's extent and the bias; both
        // outlive the call.
        unsafe { kernel.call(&args) };
        let mut out = Outputs::from_f32(y);
        out.element = Element::F32;
        Ok(out)
    }

    fn describe_input(&self, case: &EpilogueCase, index: usize) -> String {
        let g = &case.g;
        let e = index.wrapping_sub(case.y.1) as u64;
        format!(
            "{:?} {g:?} y at +{} rows {:?}: y[pixel {}, channel {}] (was {:?})",
            case.stage,
            case.y.1,
            case.rows,
            e / g.cout,
            e % g.cout,
            case.y.0.get(index)
        )
    }
}

/// The micro-race bench: y and the bias at the offer's geometry.
#[derive(Clone, Copy, Debug)]
pub struct EpilogueBench;

struct Prepared {
    g: ConvGeometry,
    stage: Stage,
    bias: Option<PackedBias>,
    y: Vec<f32>,
}

impl Workbench for EpilogueBench {
    fn prepare(&self, offer: &Offer, seed: u64) -> Result<Box<dyn Bench>, Refusal> {
        let stage = Stage::of(&offer.contract.geometry)?;
        let (g, s) = ConvGeometry::from_geometry(&offer.contract.geometry)?;
        let bias = match stage {
            Stage::Bias => Some(match offer.packed.iter().find(|p| p.name == "bias") {
                Some(op) => PackedBias::from_operand(op, g.cout)?,
                None => PackedBias::pack(&vec![0.0; g.cout as usize]),
            }),
            Stage::Act => None,
        };
        let mut rng = SplitMix64::new(seed);
        let y = values(&mut rng, g.y_len(&s), &[0.0]);
        Ok(Box::new(Prepared { g, stage, bias, y }))
    }
}

impl Bench for Prepared {
    unsafe fn run(&mut self, code: &std::sync::Arc<PlacedCode>) -> Result<(), Refusal> {
        // SAFETY: the caller promises `code` is a body built for an
        // epilogue offer, which honours the leaf ABI for `ConvArgs`.
        let kernel = unsafe { Kernel::<ConvArgs>::from_placed(code.clone(), 0)? };
        let rows = 0..self.g.batch * self.g.in_h;
        let args = args(&self.g, self.stage, self.bias.as_ref(), &mut self.y, rows)?;
        // SAFETY: `args` checked the extents against buffers owned by `self`.
        unsafe { kernel.call(&args) };
        Ok(())
    }
}
