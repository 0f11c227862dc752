//! Validation of `loopnest.argmax` twins against the arm: the cases that
//! hunt for differences and how one case runs.
//!
//! A body is compiled for one `len` (its guard refuses others), so the
//! cases are logits of the offer's length; tests judge every length in
//! 1..=33 and the vocabularies' to reach every remainder. Cases: a single
//! maximum at every position (all positions up to 64, else the first and
//! last 40 and others at random); the maximum repeated at two and three
//! positions (the first must win, across lanes and in the remainder); `-0`
//! and `+0` as the maximum in either order; one NaN (quiet, signalling,
//! either sign, with payloads) at a moving position, and several NaNs (the
//! first wins); `+inf` with and without a NaN; all `-inf` (index 0); all
//! equal; ordinary values and random bit patterns. The logits start 0–3
//! elements past a 64-byte boundary; the guards around the one `u32`
//! output must come back untouched.

use weft_kernel::{Kernel, Offer, Refusal};
use weft_validate::{Checker, Element, Outputs, SplitMix64, Validation};

use super::{Argmax, ArgmaxArgs, ARGS_NAME};
use crate::ops::cases::{place, show, GUARD};
use crate::ops::NestOp;

/// One case: the logits and how far past a 64-byte boundary they start.
#[derive(Clone, Debug)]
pub struct Case {
    /// `len` logits.
    pub logits: Vec<f32>,
    /// Elements past a 64-byte boundary.
    pub misalign: usize,
    /// What the case is about, for mismatch reports.
    pub what: String,
}

/// Validation of `loopnest.argmax` twins.
#[derive(Clone, Copy, Debug, Default)]
pub struct ArgmaxValidation;

/// The family's twin check: [`ArgmaxValidation`] through weft-validate.
pub fn checker() -> Checker<ArgmaxValidation> {
    Checker(ArgmaxValidation)
}

/// The canary of the `u32` guards.
const CANARY_U32: u32 = 0xdead_beef;

// SAFETY: `Args` is the `#[repr(C)]` struct of contracts naming ARGS_NAME,
// and `run` calls a kernel only with args built by `ArgmaxArgs::new`, which
// checks the length against a buffer that lives across the call (and
// `out` is an element of a buffer that does too).
unsafe impl Validation for ArgmaxValidation {
    type Args = ArgmaxArgs;
    type Case = Case;

    fn args_name(&self) -> &str {
        ARGS_NAME
    }

    fn generator(&self) -> String {
        "loopnest.argmax cases v1".to_owned()
    }

    fn cases(&self, offer: &Offer, seed: u64) -> Vec<Case> {
        let Ok(op) = Argmax::from_geometry(&offer.contract.geometry) else {
            return Vec::new();
        };
        let n = op.len;
        let mut rng = SplitMix64::new(seed);
        let mut out = Vec::new();
        let push = |out: &mut Vec<Case>, logits: Vec<f32>, what: String| {
            let misalign = out.len() % 4;
            out.push(Case {
                logits,
                misalign,
                what,
            });
        };
        let ordinary = |rng: &mut SplitMix64| -> Vec<f32> {
            (0..n)
                .map(|_| ((rng.next_u32() >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 20.0)
                .collect()
        };
        let mut positions: Vec<usize> = if n <= 64 {
            (0..n).collect()
        } else {
            (0..40).chain(n - 40..n).collect()
        };
        positions.extend((0..20).map(|_| rng.below(n as u64) as usize));
        for &p in &positions {
            let mut x = ordinary(&mut rng);
            x[p] = 100.0;
            push(&mut out, x, format!("the maximum at {p}"));
        }
        // Ties: the first of two or three equal maxima wins.
        for k in 0..24 {
            let mut x = ordinary(&mut rng);
            let mut at: Vec<usize> = (0..2 + k % 2)
                .map(|_| rng.below(n as u64) as usize)
                .collect();
            if k < 8 {
                // In the same lane, or in the remainder.
                at = vec![k % n, (k + 16) % n, n - 1];
            }
            for &p in &at {
                x[p] = 50.0;
            }
            push(&mut out, x, format!("equal maxima at {at:?}"));
        }
        // Signed zeros as the maximum, in either order.
        for (a, b) in [(0.0f32, -0.0f32), (-0.0, 0.0)] {
            let mut x: Vec<f32> = ordinary(&mut rng).iter().map(|v| -v.abs() - 1.0).collect();
            let (p, q) = (rng.below(n as u64) as usize, rng.below(n as u64) as usize);
            x[p.min(q)] = a;
            x[p.max(q)] = b;
            push(
                &mut out,
                x,
                format!("{a} and {b} at {} and {}", p.min(q), p.max(q)),
            );
        }
        // NaNs: one at a moving position, then several.
        let nans = [
            0x7fc0_0000u32,
            0xffc0_0000,
            0x7f80_0001,
            0xffa5_a5a5,
            0x7fc1_2345,
        ];
        for (k, &bits) in nans.iter().enumerate() {
            for &p in positions.iter().step_by(3) {
                let mut x = ordinary(&mut rng);
                x[p] = f32::from_bits(bits);
                if k % 2 == 0 {
                    x[(p + 5) % n] = f32::INFINITY;
                }
                push(&mut out, x, format!("NaN {bits:#010x} at {p}"));
            }
        }
        for _ in 0..8 {
            let mut x = ordinary(&mut rng);
            for _ in 0..3 {
                let p = rng.below(n as u64) as usize;
                x[p] = f32::from_bits(nans[p % nans.len()]);
            }
            push(&mut out, x, "several NaNs".to_owned());
        }
        // Infinities, all -inf, all equal, random bits.
        let mut x = ordinary(&mut rng);
        x[rng.below(n as u64) as usize] = f32::INFINITY;
        push(&mut out, x, "+inf".to_owned());
        push(&mut out, vec![f32::NEG_INFINITY; n], "all -inf".to_owned());
        push(&mut out, vec![3.5; n], "all equal".to_owned());
        for _ in 0..4 {
            let x = (0..n).map(|_| f32::from_bits(rng.next_u32())).collect();
            push(&mut out, x, "random bits".to_owned());
        }
        out
    }

    fn run(&self, kernel: &Kernel<ArgmaxArgs>, case: &Case) -> Result<Outputs, Refusal> {
        let op = Argmax::new(case.logits.len())?;
        let (buf, s) = place(&case.logits, case.misalign);
        let mut out = vec![CANARY_U32; 2 * GUARD + 1];
        let args = ArgmaxArgs::new(&op, &buf[s..s + op.len], &mut out[GUARD])?;
        // SAFETY: `new` checked the length against the logits; they and
        // `out` outlive the call.
        unsafe { kernel.call(&args) };
        Ok(Outputs {
            element: Element::Int,
            bits: out.into_iter().map(u64::from).collect(),
        })
    }

    fn describe_input(&self, case: &Case, index: usize) -> String {
        let head = format!(
            "len {} misalign {}: {}",
            case.logits.len(),
            case.misalign,
            case.what
        );
        if index == GUARD {
            let max = case
                .logits
                .iter()
                .position(|v| v.is_nan())
                .map(|p| format!("first NaN at {p}: {}", show(case.logits[p])));
            format!(
                "{head}: the index{}",
                max.map_or(String::new(), |m| format!(" ({m})"))
            )
        } else {
            format!("{head}: guard u32 {index} around the index")
        }
    }
}
