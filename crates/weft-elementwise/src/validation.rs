//! How an elementwise twin is judged against its arm, once for every
//! caller: the planner's check ([`checker`], through [`crate::entry`]), the
//! x64 and arm64 tests, and the family's benches. weft-validate's
//! [`UnaryF32`] runs the cases: its specials (±0, ±inf, quiet and
//! signalling NaNs with payloads, subnormal and normal extremes, ±max,
//! ±1), three ulps either side of each of the function's boundaries below,
//! random subnormals, random bit patterns and uniform samples of the
//! ranges where the function is interesting — the whole pool at every
//! start offset 0..=3 from a 64-byte boundary, then every length up to two
//! vectors at each offset, guards around the output.

use weft_validate::{Checker, UnaryF32, UnaryF32Inputs};

use crate::{table, ElementwiseArgs, Func, ELEMENTWISE_TABLE};

/// Inputs where exp's binary64 fast path fails its rounding test (found by
/// scanning every f32 of magnitude 2^-31..104 with the reference), so the
/// slow path runs.
pub const EXP_SLOW_INPUTS: [u32; 3] = [0xbae0_e25c, 0xbbf0_edf1, 0xc169_12cd];

/// The inputs `func`'s twins are judged on, for a body `lanes` f32s wide
/// (it decides the tail lengths tried).
pub fn inputs(func: Func, lanes: usize) -> UnaryF32Inputs {
    match func {
        Func::Exp => {
            let mut b: Vec<f32> = vec![
                -150.0,
                -149.0,
                100.0,
                88.72284,
                f32::from_bits(0x42b1_7218), // expf's overflow threshold
                f32::from_bits(0x42b1_7217),
                89.0,
                -87.33654,
                -103.972_08,
                -103.278_93,
                -104.0,
                -0.0,
                0.0,
                1.0,
                -1.0,
                0.5,
                1e-8,
                -1e-8,
            ];
            // Range-reduction boundaries: multiples of ln2/64.
            for k in -8..=8 {
                b.push(k as f32 * (std::f32::consts::LN_2 / 64.0));
            }
            b.extend(EXP_SLOW_INPUTS.iter().map(|&u| f32::from_bits(u)));
            UnaryF32Inputs::new(lanes)
                .with_boundaries(&b)
                .with_range(-104.0, 89.0)
                .with_range(-1.0, 1.0)
                .with_range(-0.01, 0.01)
        }
        Func::Erf => {
            let mut b: Vec<f32> = vec![
                table::ERF_Z_SMALL as f32,
                -(table::ERF_Z_SMALL as f32),
                table::ERF_Z_MAX as f32,
                -(table::ERF_Z_MAX as f32),
                1e-20,
                -1e-20,
                4.0,
                -4.0,
            ];
            // The interval table's edges.
            for i in 7..=63 {
                b.push(i as f32 / 16.0);
                b.push(-(i as f32) / 16.0);
            }
            UnaryF32Inputs::new(lanes)
                .with_boundaries(&b)
                .with_range(-4.0, 4.0)
                .with_range(-0.5, 0.5)
        }
    }
}

/// The arguments a case describes: `len` elements at each pointer and the
/// static table.
fn args(input: *const f32, output: *mut f32, len: usize) -> ElementwiseArgs {
    ElementwiseArgs {
        input,
        output,
        len,
        table: ELEMENTWISE_TABLE.as_ptr(),
    }
}

/// An elementwise validation ([`validation`]).
pub type Validation = UnaryF32<ElementwiseArgs, fn(*const f32, *mut f32, usize) -> ElementwiseArgs>;

/// [`inputs`] run through [`UnaryF32`] over [`ElementwiseArgs`].
pub fn validation(func: Func, lanes: usize) -> Validation {
    // SAFETY: `ElementwiseArgs` is the `#[repr(C)]` struct every
    // elementwise contract names, and `args` describes exactly the `len`
    // elements behind each pointer it is given, plus the static table.
    unsafe {
        UnaryF32::new(
            crate::ARGS_NAME,
            inputs(func, lanes),
            args as fn(*const f32, *mut f32, usize) -> ElementwiseArgs,
        )
    }
}

/// The widest body any twin emits: two zmm halves, 32 lanes.
pub const WIDEST_LANES: usize = 32;

/// The planner's check of `func`'s twins: [`validation`] at the widest
/// body, so every twin's tails are tried.
pub fn checker(func: Func) -> Checker<Validation> {
    Checker(validation(func, WIDEST_LANES))
}
