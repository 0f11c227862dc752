//! Validation of `loopnest.add_rmsnorm` twins against the arm: the cases
//! that hunt for differences and how one case runs.
//!
//! A body is compiled for one `dim`, so the cases are rows of the offer's
//! `dim`. Cases: rows of hunting values in `x` and `y` (magnitudes over
//! 2^-20..2^20, so the sum's lanes and fold order show; sums that cancel,
//! overflow and meet NaNs), each special value ([`cases::specials`]) in `x`
//! and in `y` at a position that moves from row to row, specials as
//! weights, `x + y` of zeros, huge, tiny and subnormal sums and random
//! bits under eps from 1e-5 to 0, −0, negative, subnormal, inf and NaN;
//! about 2^15 elements whose `h²` lie in one binade or a few (so other
//! orders of the sum round differently); row ranges whole, inner, single
//! and empty. `x`, `y`, `w` and `out` start 0–3 elements past a 64-byte
//! boundary; `out` starts as a pattern of its own, so rows outside the
//! range and the guards around `x` and `out` must come back untouched.
//! Both outputs are compared: `x` (the residual stream) and `out`.

use std::ops::Range;

use weft_kernel::{Bench, Kernel, Offer, PlacedCode, Refusal, Workbench};
use weft_validate::{Checker, Outputs, SplitMix64, Validation};

use super::{AddRmsNorm, AddRmsNormArgs, ARGS_NAME};
use crate::ops::cases::{self, guarded, hunting, place, show, GUARD};
use crate::ops::NestOp;

/// One case: the rows, what is added, the weights, eps, the rows computed,
/// and how far past a 64-byte boundary `x`, `y`, `w` and `out` start.
#[derive(Clone, Debug)]
pub struct Case {
    /// Row length.
    pub dim: usize,
    /// `rows · dim` residual values.
    pub x: Vec<f32>,
    /// `rows · dim` values added.
    pub y: Vec<f32>,
    /// `dim` weights.
    pub w: Vec<f32>,
    /// Added to the mean of squares.
    pub eps: f32,
    /// The rows computed.
    pub rows: Range<usize>,
    /// Elements past a 64-byte boundary of `x`, `y`, `w` and `out`.
    pub misalign: [usize; 4],
}

/// Validation of `loopnest.add_rmsnorm` twins.
#[derive(Clone, Copy, Debug, Default)]
pub struct AddRmsNormValidation;

/// The family's twin check: [`AddRmsNormValidation`] through weft-validate.
pub fn checker() -> Checker<AddRmsNormValidation> {
    Checker(AddRmsNormValidation)
}

/// `out`'s starting contents: a pattern no body computes by accident.
fn out_pattern(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| f32::from_bits(0x4b00_0000 | i as u32 & 0x7f_ffff))
        .collect()
}

// SAFETY: `Args` is the `#[repr(C)]` struct of contracts naming ARGS_NAME,
// and `run` calls a kernel only with args built by `AddRmsNormArgs::new`,
// which checks every extent against buffers that live across the call.
unsafe impl Validation for AddRmsNormValidation {
    type Args = AddRmsNormArgs;
    type Case = Case;

    fn args_name(&self) -> &str {
        ARGS_NAME
    }

    fn generator(&self) -> String {
        "loopnest.add_rmsnorm cases v1".to_owned()
    }

    fn cases(&self, offer: &Offer, seed: u64) -> Vec<Case> {
        let Ok(op) = AddRmsNorm::from_geometry(&offer.contract.geometry) else {
            return Vec::new();
        };
        let dim = op.dim;
        let mut rng = SplitMix64::new(seed);
        let s = cases::specials();
        let mut out = Vec::new();
        let mut n = 0usize;
        let mut push = |out: &mut Vec<Case>, x: Vec<f32>, y: Vec<f32>, w: Vec<f32>, eps, rows| {
            n += 1;
            out.push(Case {
                dim,
                x,
                y,
                w,
                eps,
                rows,
                misalign: [n % 4, (n + 1) % 4, (n + 2) % 4, (n + 3) % 4],
            });
        };
        let ordinary = |rng: &mut SplitMix64, k: usize| -> Vec<f32> {
            (0..k)
                .map(|_| ((rng.next_u32() >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 6.0)
                .collect()
        };
        let hunt = |rng: &mut SplitMix64, k: usize| -> Vec<f32> {
            (0..k).map(|_| hunting(rng, &s)).collect()
        };
        // Hunting rows, addends and weights, whole and as inner ranges.
        for (rows, range) in [(3usize, 0..3), (4, 1..3), (3, 2..3), (2, 1..1)] {
            let x = hunt(&mut rng, rows * dim);
            let y = hunt(&mut rng, rows * dim);
            let w = hunt(&mut rng, dim);
            push(&mut out, x, y, w, 1e-5, range);
        }
        // Each special in x, then in y, in rows of ordinary values.
        let w = ordinary(&mut rng, dim);
        for in_y in [false, true] {
            let mut a = ordinary(&mut rng, s.len() * dim);
            for (r, v) in s.iter().enumerate() {
                a[r * dim + (r * 7) % dim] = *v;
            }
            let b = ordinary(&mut rng, s.len() * dim);
            let (x, y) = if in_y { (b, a) } else { (a, b) };
            push(&mut out, x, y, w.clone(), 1e-6, 0..s.len());
        }
        // Specials as weights.
        let w_special: Vec<f32> = (0..dim).map(|i| s[i % s.len()]).collect();
        let (x, y) = (ordinary(&mut rng, 2 * dim), ordinary(&mut rng, 2 * dim));
        push(&mut out, x, y, w_special, 1e-5, 0..2);
        // Sums that are zero, huge, tiny, subnormal, random bits.
        let mut x = ordinary(&mut rng, dim);
        let mut y: Vec<f32> = x.iter().map(|v| -v).collect();
        x.extend((0..dim).map(|i| 1.0e20 * (1.0 + i as f32)));
        y.extend((0..dim).map(|i| 1.0e20 * (2.0 + i as f32)));
        x.extend((0..dim).map(|i| 1.0e-25 * (1.0 + i as f32)));
        y.extend((0..dim).map(|_| 0.0));
        x.extend((0..dim).map(|_| f32::from_bits(rng.next_u32() & 0x807f_ffff)));
        y.extend((0..dim).map(|_| f32::from_bits(rng.next_u32() & 0x807f_ffff)));
        x.extend((0..dim).map(|_| f32::from_bits(rng.next_u32())));
        y.extend((0..dim).map(|_| f32::from_bits(rng.next_u32())));
        for eps in [
            1e-5f32,
            0.0,
            -0.0,
            -1.0,
            f32::from_bits(1),
            f32::INFINITY,
            f32::NAN,
        ] {
            push(&mut out, x.clone(), y.clone(), w.clone(), eps, 0..5);
        }
        // Rows whose partial sums round differently in other orders.
        let spread = |rng: &mut SplitMix64, k: usize, binades: u32| -> Vec<f32> {
            (0..k)
                .map(|_| {
                    let r = rng.next_u64();
                    let m = 1.0 + (r >> 40) as f32 / (1u64 << 24) as f32;
                    let e = ((r >> 32) & 0xff) as u32 % binades;
                    let sign = if r & 1 == 0 { 1.0 } else { -1.0 };
                    sign * m * f32::from_bits((127 + e - binades / 2) << 23)
                })
                .collect()
        };
        let rows = ((1usize << 15) / dim).clamp(32, 2048);
        for binades in [1u32, 8] {
            let x = spread(&mut rng, rows * dim, binades);
            let y: Vec<f32> = spread(&mut rng, rows * dim, binades)
                .iter()
                .map(|v| v * 0.125)
                .collect();
            push(&mut out, x, y, w.clone(), 1e-6, 0..rows);
        }
        out
    }

    fn run(&self, kernel: &Kernel<AddRmsNormArgs>, case: &Case) -> Result<Outputs, Refusal> {
        let dim = case.dim;
        let n = case.x.len();
        let op = AddRmsNorm::new(dim, (n / dim).max(1))?;
        let (mut xbuf, xs) = place(&case.x, case.misalign[0]);
        let (ybuf, ys) = place(&case.y, case.misalign[1]);
        let (wbuf, ws) = place(&case.w, case.misalign[2]);
        let (mut obuf, os) = place(&out_pattern(n), case.misalign[3]);
        let args = AddRmsNormArgs::new(
            &op,
            &mut xbuf[xs..xs + n],
            &ybuf[ys..ys + n],
            &wbuf[ws..ws + dim],
            &mut obuf[os..os + n],
            case.eps,
            case.rows.clone(),
        )?;
        // SAFETY: `new` checked the extents against the buffers, which
        // outlive the call.
        unsafe { kernel.call(&args) };
        let mut words = guarded(&xbuf, xs, n);
        words.extend(guarded(&obuf, os, n));
        Ok(Outputs::from_f32(words))
    }

    fn describe_input(&self, case: &Case, index: usize) -> String {
        let (n, dim) = (case.x.len(), case.dim);
        let head = format!(
            "dim {dim} rows {:?} of {} eps {} misalign {:?}",
            case.rows,
            n / dim,
            show(case.eps),
            case.misalign
        );
        let span = n + 2 * GUARD;
        let (what, at) = if index < span {
            ("x", index)
        } else {
            ("out", index - span)
        };
        match at.checked_sub(GUARD) {
            Some(i) if i < n => format!(
                "{head}: {what}[{}][{}] of x {}, y {}, w {}",
                i / dim,
                i % dim,
                show(case.x[i]),
                show(case.y[i]),
                show(case.w[i % dim])
            ),
            _ => format!("{head}: guard f32 {at} around {what}"),
        }
    }
}

/// The family's [`Workbench`]: ordinary rows at an offer's shape (`y` a
/// thousandth of `x`, so repeated calls keep the stream finite for
/// millions of calls). The planner races a fused region against its chain
/// on it (`weft_plan::Region`).
#[derive(Clone, Copy, Debug, Default)]
pub struct AddRmsNormBench;

struct Prepared {
    op: AddRmsNorm,
    x: Vec<f32>,
    y: Vec<f32>,
    w: Vec<f32>,
    out: Vec<f32>,
}

impl Workbench for AddRmsNormBench {
    fn prepare(&self, offer: &Offer, seed: u64) -> Result<Box<dyn Bench>, Refusal> {
        if offer.contract.args != ARGS_NAME {
            return Err(Refusal::BadOperand {
                operand: "args".to_owned(),
                reason: format!(
                    "AddRmsNormBench runs {ARGS_NAME}, not {}",
                    offer.contract.args
                ),
            });
        }
        let op = AddRmsNorm::from_geometry(&offer.contract.geometry)?;
        let n = op.rows * op.dim;
        let x = crate::ops::bench::ordinary(seed, n, 1.0);
        Ok(Box::new(Prepared {
            op,
            y: crate::ops::bench::ordinary(seed ^ 1, n, 1e-3),
            w: crate::ops::bench::ordinary(seed ^ 2, op.dim, 1.0),
            out: vec![0.0; n],
            x,
        }))
    }
}

impl Bench for Prepared {
    unsafe fn run(&mut self, code: &std::sync::Arc<PlacedCode>) -> Result<(), Refusal> {
        // SAFETY: the caller promises `code` is a loopnest.add_rmsnorm body,
        // which honours the leaf ABI for `AddRmsNormArgs`.
        let kernel = unsafe { Kernel::<AddRmsNormArgs>::from_placed(code.clone(), 0)? };
        let args = AddRmsNormArgs::new(
            &self.op,
            &mut self.x,
            &self.y,
            &self.w,
            &mut self.out,
            1e-5,
            0..self.op.rows,
        )?;
        // SAFETY: `new` checked the extents against buffers owned by `self`,
        // which outlive the call.
        unsafe { kernel.call(&args) };
        Ok(())
    }
}
