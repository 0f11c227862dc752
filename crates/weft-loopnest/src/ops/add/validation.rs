//! Validation of `loopnest.add` twins against the arm: the cases that hunt
//! for differences and how one case runs.
//!
//! Cases: every pair of a special `x` and a special `y` ([`cases::specials`]:
//! ±0, ±inf, quiet and signalling NaNs with payloads, subnormals, ±max,
//! sums that overflow or cancel), whole and as an inner range shifted so
//! each pair meets other lanes; every range length 0..=33 from starts 0, 1,
//! 2, 3, 5, 16 and 17 inside longer buffers (so both a partial first step
//! and elements after `end` exist); decode and prompt lengths (576, 640,
//! 1536, 4099) of hunting values and random bits; and the offer's own
//! length (up to 2^17), whole and as an inner range. `x` and `y` start 0–3
//! elements past a 64-byte boundary; the guards around `x` must come back
//! untouched and the elements of `x` outside the range unchanged.

use std::ops::Range;

use weft_kernel::{Kernel, Offer, Refusal};
use weft_validate::{Checker, Outputs, SplitMix64, Validation};

use super::{Add, AddArgs, ARGS_NAME};
use crate::ops::cases::{self, guarded, hunting_vec, place, show, GUARD};

/// One case: both operands, the range computed, and how far past a 64-byte
/// boundary `x` and `y` start.
#[derive(Clone, Debug)]
pub struct Case {
    /// `len` values updated.
    pub x: Vec<f32>,
    /// `len` values added.
    pub y: Vec<f32>,
    /// The elements computed.
    pub range: Range<usize>,
    /// Elements past a 64-byte boundary of `x` and `y`.
    pub misalign: [usize; 2],
}

/// Validation of `loopnest.add` twins.
#[derive(Clone, Copy, Debug, Default)]
pub struct AddValidation;

/// The family's twin check: [`AddValidation`] through weft-validate.
pub fn checker() -> Checker<AddValidation> {
    Checker(AddValidation)
}

// SAFETY: `Args` is the `#[repr(C)]` struct of contracts naming ARGS_NAME,
// and `run` calls a kernel only with args built by `AddArgs::new`, which
// checks every extent against buffers that live across the call.
unsafe impl Validation for AddValidation {
    type Args = AddArgs;
    type Case = Case;

    fn args_name(&self) -> &str {
        ARGS_NAME
    }

    fn generator(&self) -> String {
        "loopnest.add cases v1".to_owned()
    }

    fn cases(&self, offer: &Offer, seed: u64) -> Vec<Case> {
        let mut out = Vec::new();
        let mut n = 0usize;
        let mut push = |out: &mut Vec<Case>, x: Vec<f32>, y: Vec<f32>, range: Range<usize>| {
            n += 1;
            out.push(Case {
                x,
                y,
                range,
                misalign: [n % 4, (n + 1) % 4],
            });
        };
        let s = cases::specials();
        let (x, y): (Vec<f32>, Vec<f32>) = s
            .iter()
            .flat_map(|&a| s.iter().map(move |&b| (a, b)))
            .unzip();
        let len = x.len();
        push(&mut out, x.clone(), y.clone(), 0..len);
        let mut x2 = x;
        x2.rotate_left(7);
        push(&mut out, x2, y, 3..len - 2);
        let mut rng = SplitMix64::new(seed);
        for start in [0usize, 1, 2, 3, 5, 16, 17] {
            for len in 0..=33usize {
                let total = start + len + 1 + len % 3;
                let x = hunting_vec(&mut rng, total);
                let y = hunting_vec(&mut rng, total);
                push(&mut out, x, y, start..start + len);
            }
        }
        for len in [576usize, 640, 1536] {
            let x = hunting_vec(&mut rng, len);
            let y = hunting_vec(&mut rng, len);
            push(&mut out, x, y, 0..len);
        }
        let bits =
            |rng: &mut SplitMix64, n| (0..n).map(|_| f32::from_bits(rng.next_u32())).collect();
        let (x, y) = (bits(&mut rng, 4099), bits(&mut rng, 4099));
        push(&mut out, x, y, 1..4099);
        if let Some(len) = offer.contract.geometry.get("len") {
            let len = len as usize;
            if (1..=1 << 17).contains(&len) {
                let x = hunting_vec(&mut rng, len);
                let y = hunting_vec(&mut rng, len);
                push(&mut out, x.clone(), y.clone(), 0..len);
                push(&mut out, x, y, len / 3..len - len / 5);
            }
        }
        out
    }

    fn run(&self, kernel: &Kernel<AddArgs>, case: &Case) -> Result<Outputs, Refusal> {
        let len = case.x.len();
        let op = Add::new(len)?;
        let (mut xbuf, xs) = place(&case.x, case.misalign[0]);
        let (ybuf, ys) = place(&case.y, case.misalign[1]);
        let args = AddArgs::new(
            &op,
            &mut xbuf[xs..xs + len],
            &ybuf[ys..ys + len],
            case.range.clone(),
        )?;
        // SAFETY: `new` checked the extents against the buffers, which
        // outlive the call.
        unsafe { kernel.call(&args) };
        Ok(Outputs::from_f32(guarded(&xbuf, xs, len)))
    }

    fn describe_input(&self, case: &Case, index: usize) -> String {
        let len = case.x.len();
        let head = format!(
            "len {len} range {:?} misalign {:?}",
            case.range, case.misalign
        );
        match index.checked_sub(GUARD) {
            Some(i) if i < len => format!(
                "{head}: x[{i}] of x {}, y {}",
                show(case.x[i]),
                show(case.y[i])
            ),
            _ => format!("{head}: guard f32 {index} around x"),
        }
    }
}
