//! The cases the Winograd twins are judged on (against the Winograd arm),
//! and which the arm meets against [`super::reference`]:
//!
//! - channels 1, 3, 5, 17, 33, 64 on both sides (ragged 16- and 32-channel
//!   panels, whole ones, one channel);
//! - sizes 1, 2, 3, 7, 13 and 56 (rows and columns apart), so odd and even
//!   `out_h`/`out_w` and tiles cut at the bottom and right edges; padding
//!   0, 1 and 2 (a tile wholly in the padding at pad 2);
//! - batch 1 and 3 (blocks of tiles spanning tile rows and images);
//! - every epilogue, with and without bias;
//! - x and y starting 1–3 floats into their buffers; special values (NaN,
//!   ±∞, ±0, subnormals, huge values whose transforms overflow) sown into
//!   x, the filter and the bias;
//! - row ranges (member views): starting and ending at odd rows, inside
//!   one tile row, across images, empty.
//!
//! The output is the whole y buffer (NaN before the call) plus a guard,
//! so a store outside the rows, columns or channels computed, or a missed
//! one, is a mismatch.

use std::ops::Range;

use weft_kernel::{Kernel, Offer, Refusal};
use weft_validate::{Outputs, Validation};

use crate::validation::{case, describe_case, run_case, ConvCase, Gen};
use crate::{Activation, ConvArgs, ConvGeometry, PackedFilter, ARGS_NAME};

/// A 3 × 3, stride-1 geometry.
fn geo(batch: u64, (in_h, in_w): (u64, u64), (cin, cout): (u64, u64), pad: u64) -> ConvGeometry {
    ConvGeometry {
        batch,
        in_h,
        in_w,
        cin,
        cout,
        k_h: 3,
        k_w: 3,
        stride: 1,
        pad,
        dil: 1,
        groups: 1,
        act: Activation::None,
    }
}

/// Channels swept on both sides.
pub const CHANNELS: [u64; 6] = [1, 3, 5, 17, 33, 64];

/// The Winograd cases, deterministic in `seed`.
pub fn cases(seed: u64) -> Vec<ConvCase> {
    let mut gen = Gen::new(seed);
    let mut out = Vec::new();
    let mut idx = 0usize;
    let mut push = |gen: &mut Gen, g: ConvGeometry, rows: Option<Range<u64>>| {
        let g = g.with_act(crate::validation::activation(idx));
        if let Some(c) = case(
            gen,
            g,
            idx % 4,
            idx % 3 != 1,
            idx % 4 == 3,
            rows,
            PackedFilter::pack_winograd,
        ) {
            out.push(c);
        }
        idx += 1;
    };
    // Channels, both sides, at an odd output (7 × 6 at pad 1: 7 × 6).
    for cin in CHANNELS {
        for cout in CHANNELS {
            push(&mut gen, geo(1, (7, 6), (cin, cout), 1), None);
        }
    }
    // Sizes × paddings (rows and columns apart), channels cycling.
    let sizes = [1u64, 2, 3, 7, 13];
    let chans = [(3, 5), (17, 33), (5, 17), (33, 3), (1, 64), (64, 17)];
    let mut n = 0;
    for &h in &sizes {
        for &w in &sizes {
            for pad in [0u64, 1, 2] {
                if (h + 2 * pad < 3) || (w + 2 * pad < 3) {
                    continue;
                }
                if (h * 5 + w * 3 + pad) % 3 != 0 && h != w {
                    continue;
                }
                push(&mut gen, geo(1, (h, w), chans[n % chans.len()], pad), None);
                n += 1;
            }
        }
    }
    // Batch 3, all rows and member views: odd starts and ends, one row,
    // inside one tile row, across images, empty.
    for rows in [
        None,
        Some(3..10),
        Some(4..11),
        Some(5..6),
        Some(0..1),
        Some(6..8),
        Some(13..21),
        Some(7..7),
    ] {
        push(&mut gen, geo(3, (7, 7), (5, 17), 1), rows);
    }
    push(&mut gen, geo(3, (13, 7), (17, 33), 2), Some(1..36));
    push(&mut gen, geo(3, (2, 5), (3, 40), 1), None);
    // Large ones: whole blocks of tiles, many tile rows.
    push(&mut gen, geo(1, (56, 56), (17, 33), 1), None);
    push(&mut gen, geo(1, (56, 13), (64, 64), 1), Some(9..50));
    push(&mut gen, geo(1, (13, 56), (33, 80), 0), None);
    push(&mut gen, geo(2, (14, 14), (64, 48), 1), None);
    out
}

/// Validation of the Winograd twins against the Winograd arm.
#[derive(Clone, Copy, Debug)]
pub struct WinogradValidation;

// SAFETY: `Args` is the `#[repr(C)]` struct of contracts naming ARGS_NAME,
// and `run` calls a kernel only with arguments built by `ConvArgs::rows`,
// which checks every extent against buffers that outlive the call.
unsafe impl Validation for WinogradValidation {
    type Args = ConvArgs;
    type Case = ConvCase;

    fn args_name(&self) -> &str {
        ARGS_NAME
    }

    fn generator(&self) -> String {
        "conv.direct.winograd cases v1".to_owned()
    }

    fn cases(&self, _offer: &Offer, seed: u64) -> Vec<ConvCase> {
        cases(seed)
    }

    fn run(&self, kernel: &Kernel<ConvArgs>, case: &ConvCase) -> Result<Outputs, Refusal> {
        run_case(kernel, case)
    }

    fn describe_input(&self, case: &ConvCase, index: usize) -> String {
        describe_case(case, index)
    }
}
