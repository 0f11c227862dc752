//! Validation of `loopnest.rmsnorm` twins against the arm: the cases that
//! hunt for differences and how one case runs.
//!
//! A body is compiled for one `dim` (its guard refuses any other), so the
//! cases are rows of the offer's `dim`; tests judge at every `dim` in
//! 1..=33 and at the model's (576, 640, …) to reach every tail. Cases: rows
//! of hunting values (magnitudes over 2^-20..2^20, so the sum's lanes and
//! fold order show), each special value ([`cases::specials`]) in a row of
//! ordinary values at a position that moves from row to row (through every
//! lane), rows of zeros (`ss = 0`: with `eps = 0` the scale is inf and
//! `y` NaN), of huge values (the squares overflow: scale 0), of tiny and
//! subnormal values (the squares underflow), of random bits, and eps
//! values from 1e-5 and 1e-6 to 0, −0, negative, subnormal, inf and NaN;
//! many rows (about 2^15 elements) whose squares lie in one binade or a
//! few, so that other orders of the sum (lanes, fold) round differently
//! and some of those differences survive the division and the root;
//! row ranges whole, inner, single and empty. `x`, `w` and `y` start 0–3
//! elements past a 64-byte boundary; `y` starts as a pattern of its own,
//! so rows outside the range and the guards around `y` must come back
//! untouched.

use std::ops::Range;

use weft_kernel::{Kernel, Offer, Refusal};
use weft_validate::{Checker, Outputs, SplitMix64, Validation};

use super::{RmsNorm, RmsNormArgs, ARGS_NAME};
use crate::ops::cases::{self, guarded, hunting, place, show, GUARD};
use crate::ops::NestOp;

/// One case: the rows, the weights, eps, the rows computed, and how far
/// past a 64-byte boundary `x`, `w` and `y` start.
#[derive(Clone, Debug)]
pub struct Case {
    /// Row length.
    pub dim: usize,
    /// `rows · dim` inputs.
    pub x: Vec<f32>,
    /// `dim` weights.
    pub w: Vec<f32>,
    /// Added to the mean of squares.
    pub eps: f32,
    /// The rows computed.
    pub rows: Range<usize>,
    /// Elements past a 64-byte boundary of `x`, `w` and `y`.
    pub misalign: [usize; 3],
}

impl Case {
    fn total_rows(&self) -> usize {
        self.x.len() / self.dim
    }
}

/// Validation of `loopnest.rmsnorm` twins.
#[derive(Clone, Copy, Debug, Default)]
pub struct RmsNormValidation;

/// The family's twin check: [`RmsNormValidation`] through weft-validate.
pub fn checker() -> Checker<RmsNormValidation> {
    Checker(RmsNormValidation)
}

/// `y`'s starting contents: a pattern no body computes by accident.
fn y_pattern(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| f32::from_bits(0x4b00_0000 | i as u32 & 0x7f_ffff))
        .collect()
}

// SAFETY: `Args` is the `#[repr(C)]` struct of contracts naming ARGS_NAME,
// and `run` calls a kernel only with args built by `RmsNormArgs::new`,
// which checks every extent against buffers that live across the call.
unsafe impl Validation for RmsNormValidation {
    type Args = RmsNormArgs;
    type Case = Case;

    fn args_name(&self) -> &str {
        ARGS_NAME
    }

    fn generator(&self) -> String {
        "loopnest.rmsnorm cases v1".to_owned()
    }

    fn cases(&self, offer: &Offer, seed: u64) -> Vec<Case> {
        let Ok(op) = RmsNorm::from_geometry(&offer.contract.geometry) else {
            return Vec::new();
        };
        let dim = op.dim;
        let mut rng = SplitMix64::new(seed);
        let s = cases::specials();
        let mut out = Vec::new();
        let mut n = 0usize;
        let mut push = |out: &mut Vec<Case>, x: Vec<f32>, w: Vec<f32>, eps, rows| {
            n += 1;
            out.push(Case {
                dim,
                x,
                w,
                eps,
                rows,
                misalign: [n % 4, (n + 1) % 4, (n + 3) % 4],
            });
        };
        let ordinary = |rng: &mut SplitMix64, k: usize| -> Vec<f32> {
            (0..k)
                .map(|_| ((rng.next_u32() >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 6.0)
                .collect()
        };
        // Hunting rows and weights, whole and as inner ranges.
        for (rows, range) in [(3usize, 0..3), (4, 1..3), (3, 2..3), (2, 1..1)] {
            let x = (0..rows * dim).map(|_| hunting(&mut rng, &s)).collect();
            let w = (0..dim).map(|_| hunting(&mut rng, &s)).collect();
            push(&mut out, x, w, 1e-5, range);
        }
        // Each special in a row of ordinary values, at a moving position.
        let mut x = ordinary(&mut rng, s.len() * dim);
        for (r, v) in s.iter().enumerate() {
            x[r * dim + (r * 7) % dim] = *v;
        }
        let w = ordinary(&mut rng, dim);
        push(&mut out, x, w.clone(), 1e-6, 0..s.len());
        // Specials as weights.
        let w_special: Vec<f32> = (0..dim).map(|i| s[i % s.len()]).collect();
        let x = ordinary(&mut rng, 2 * dim);
        push(&mut out, x, w_special, 1e-5, 0..2);
        // Zeros, huge, tiny and subnormal rows, random bits.
        let mut x = vec![0.0f32; dim];
        x.extend((0..dim).map(|i| if i % 2 == 0 { -0.0 } else { 0.0 }));
        x.extend((0..dim).map(|i| 1.0e20 * (1.0 + i as f32)));
        x.extend((0..dim).map(|i| 1.0e-25 * (1.0 + i as f32)));
        x.extend((0..dim).map(|_| f32::from_bits(rng.next_u32() & 0x807f_ffff)));
        x.extend((0..dim).map(|_| f32::from_bits(rng.next_u32())));
        for eps in [
            1e-5f32,
            0.0,
            -0.0,
            -1.0,
            f32::from_bits(1),
            f32::INFINITY,
            f32::NAN,
        ] {
            push(&mut out, x.clone(), w.clone(), eps, 0..6);
        }
        // Rows whose partial sums round differently in other orders: squares
        // of one binade or a few (so no term is absorbed).
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
        // A one-ulp difference in `ss` often vanishes in `scale`, so many
        // rows: about 2^15 elements, at least 32 rows.
        let rows = ((1usize << 15) / dim).clamp(32, 2048);
        for binades in [1u32, 8] {
            let x = spread(&mut rng, rows * dim, binades);
            push(&mut out, x, w.clone(), 1e-6, 0..rows);
        }
        // Ordinary rows at several magnitudes: the model's case.
        for scale in [1.0f32, 1e-3, 1e3] {
            let x = ordinary(&mut rng, 8 * dim)
                .iter()
                .map(|v| v * scale)
                .collect();
            push(&mut out, x, w.clone(), 1e-6, 0..8);
        }
        out
    }

    fn run(&self, kernel: &Kernel<RmsNormArgs>, case: &Case) -> Result<Outputs, Refusal> {
        let (dim, total) = (case.dim, case.total_rows());
        let op = RmsNorm::new(dim, total.max(1))?;
        let n = case.x.len();
        let (xbuf, xs) = place(&case.x, case.misalign[0]);
        let (wbuf, ws) = place(&case.w, case.misalign[1]);
        let (mut ybuf, ys) = place(&y_pattern(n), case.misalign[2]);
        let args = RmsNormArgs::new(
            &op,
            &xbuf[xs..xs + n],
            &wbuf[ws..ws + dim],
            &mut ybuf[ys..ys + n],
            case.eps,
            case.rows.clone(),
        )?;
        // SAFETY: `new` checked the extents against the buffers, which
        // outlive the call.
        unsafe { kernel.call(&args) };
        Ok(Outputs::from_f32(guarded(&ybuf, ys, n)))
    }

    fn describe_input(&self, case: &Case, index: usize) -> String {
        let n = case.x.len();
        let head = format!(
            "dim {} rows {:?} of {} eps {} misalign {:?}",
            case.dim,
            case.rows,
            case.total_rows(),
            show(case.eps),
            case.misalign
        );
        match index.checked_sub(GUARD) {
            Some(i) if i < n => format!(
                "{head}: y[{}][{}] of x {}, w {}",
                i / case.dim,
                i % case.dim,
                show(case.x[i]),
                show(case.w[i % case.dim])
            ),
            _ => format!("{head}: guard f32 {index} around y"),
        }
    }
}
