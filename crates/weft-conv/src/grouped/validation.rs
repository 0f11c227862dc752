//! The cases the grouped arm meets against the reference and its twins
//! against it (the direct family's contract, [`crate::reference`]):
//!
//! - groups 2 – 32 (the last panel short of groups when `16 / cout_g`
//!   does not divide them: groups 3, 5, 7), `cout_g` 1, 2, 4 and 8,
//!   `cin_g` 1, 2, 3, 4, 8, 16 as far as each `cout_g` is served (`(16 /
//!   cout_g) · cin_g ≤ 32`), channel multipliers (`cin_g = 1, cout_g =
//!   2`);
//! - kernels 1 × 1 and 3 × 3, stride 1 and 2, dilation 1 and 2, padding
//!   0 – 2, batch 1 and 3, ragged sizes (rows and columns apart) and
//!   short rows (no interior column, one column);
//! - every epilogue, with and without bias; x and y starting 1–3 floats
//!   into their buffers; special values (NaN, ±∞, ±0, subnormals) sown
//!   into x, the filter and the bias (an `∞` in x beside a padded tap
//!   is NaN if the tap is multiplied rather than skipped);
//! - row ranges (member views): inside one image, across images, empty.
//!
//! The output is the whole y buffer (NaN before the call) plus a guard.

use std::ops::Range;

use weft_kernel::{Kernel, Offer, Refusal};
use weft_validate::{Outputs, Validation};

use crate::validation::{case, describe_case, run_case, ConvCase, Gen};
use crate::{Activation, ConvArgs, ConvGeometry, PackedFilter, ARGS_NAME};

/// A grouped geometry: `groups` of `(cin_g, cout_g)`, a `k × k` kernel.
#[allow(clippy::too_many_arguments)]
pub fn geo(
    batch: u64,
    (in_h, in_w): (u64, u64),
    groups: u64,
    (cin_g, cout_g): (u64, u64),
    k: u64,
    stride: u64,
    pad: u64,
    dil: u64,
) -> ConvGeometry {
    ConvGeometry {
        batch,
        in_h,
        in_w,
        cin: groups * cin_g,
        cout: groups * cout_g,
        k_h: k,
        k_w: k,
        stride,
        pad,
        dil,
        groups,
        act: Activation::None,
    }
}

/// The geometries and row ranges of the cases (module docs).
pub fn geometries() -> Vec<(ConvGeometry, Option<Range<u64>>)> {
    let mut out = Vec::new();
    // Every (cin_g, cout_g), groups cycling (whole and short last panels),
    // kernels, strides, dilations and paddings cycling, ragged sizes.
    let groups = [2u64, 3, 4, 5, 7, 8, 16, 32];
    let sizes = [(5u64, 6u64), (7, 13), (13, 7), (1, 9), (9, 2), (6, 6)];
    let mut n = 0usize;
    for cout_g in [1u64, 2, 4, 8] {
        for cin_g in [1u64, 2, 3, 4, 8, 16] {
            if (16 / cout_g) * cin_g > 32 || (cin_g, cout_g) == (1, 1) {
                continue;
            }
            for rep in 0..3 {
                let k = if (n + rep) % 3 == 2 { 1 } else { 3 };
                let stride = 1 + ((n / 2 + rep) % 2) as u64;
                let dil = 1 + ((n / 3 + rep) % 2) as u64;
                let pad = ((n + 2 * rep) % 3) as u64;
                let (h, w) = sizes[(n + rep) % sizes.len()];
                let gr = groups[(n * 3 + rep) % groups.len()];
                out.push((
                    geo(1, (h, w), gr, (cin_g, cout_g), k, stride, pad, dil),
                    None,
                ));
            }
            n += 1;
        }
    }
    // Batch 3, short rows, member views.
    for rows in [None, Some(2..9), Some(6..7), Some(0..21), Some(4..4)] {
        out.push((geo(3, (7, 7), 5, (3, 4), 3, 1, 1, 1), rows));
    }
    out.push((geo(3, (5, 9), 3, (8, 8), 3, 2, 2, 1), Some(1..8)));
    out.push((geo(3, (2, 3), 4, (2, 4), 3, 1, 2, 2), None));
    // ResNeXt-like: 32 groups of 4 → 4, and 8 → 8, 3 × 3 pad 1.
    out.push((geo(1, (14, 14), 32, (4, 4), 3, 1, 1, 1), None));
    out.push((geo(1, (12, 11), 16, (8, 8), 3, 2, 1, 1), Some(1..6)));
    out.push((geo(1, (30, 29), 32, (4, 4), 3, 1, 1, 1), None));
    // Channel multiplier 2 and one-channel groups, whole and short panels.
    out.push((geo(1, (13, 14), 24, (1, 2), 3, 1, 1, 1), None));
    out.push((geo(3, (7, 7), 9, (1, 2), 3, 2, 1, 1), Some(2..7)));
    out.push((geo(1, (11, 10), 19, (2, 1), 3, 1, 2, 2), None));
    out
}

/// The grouped cases, deterministic in `seed`.
pub fn cases(seed: u64) -> Vec<ConvCase> {
    let mut gen = Gen::new(seed);
    let mut out = Vec::new();
    for (idx, (g, rows)) in geometries().into_iter().enumerate() {
        let g = g.with_act(crate::validation::activation(idx));
        if let Some(c) = case(
            &mut gen,
            g,
            idx % 4,
            idx % 3 != 1,
            idx % 4 == 3,
            rows,
            PackedFilter::pack_grouped,
        ) {
            out.push(c);
        }
    }
    out
}

/// Validation of the grouped twins against the grouped arm.
#[derive(Clone, Copy, Debug)]
pub struct GroupedValidation;

// SAFETY: `Args` is the `#[repr(C)]` struct of contracts naming ARGS_NAME,
// and `run` calls a kernel only with arguments built by `ConvArgs::rows`,
// which checks every extent against buffers that outlive the call.
unsafe impl Validation for GroupedValidation {
    type Args = ConvArgs;
    type Case = ConvCase;

    fn args_name(&self) -> &str {
        ARGS_NAME
    }

    fn generator(&self) -> String {
        "conv.direct.grouped cases v1".to_owned()
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
