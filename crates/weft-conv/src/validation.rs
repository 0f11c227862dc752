//! The cases a twin of either family is judged on, and the micro-race
//! bench.
//!
//! Bodies read every extent from their arguments, so cases need not share
//! the offer's geometry; they sweep what breaks tiled convolution code:
//!
//! - channels 1, 3, 5, 17, 33 (and 48, 64: whole and ragged panels, groups
//!   of panels) on both sides;
//! - spatial extents 1, 7, 13 (rows and columns apart), 56 for a few;
//!   batch 1, 2 and 3; short rows (7 × 7, 5 × 9) whose tiles span rows
//!   and images, with every remainder of panels by three;
//! - kernels 1×1, 3×3, 5×5, 7×7 with stride 1 and 2, dilation 1 and 2,
//!   padding 0 to 3 (borders with no interior column, and columns with
//!   no tap at all);
//! - every epilogue, with and without bias;
//! - x and y starting 1–3 floats into their buffers; special values
//!   (NaN, ±∞, ±0, subnormals, overflowing products) sown into x, the
//!   filter and the bias;
//! - row ranges (member views), empty ones included;
//! - for the direct family, grouped convolutions: groups 2, 3 and 4 with
//!   `cin / groups` and `cout / groups` from 1, 3, 5, 16, 17, 33 (48, 64:
//!   several whole panels in a group), and channel multipliers
//!   (`groups = cin`, `cout = 2 · cin`), over the kernels, strides,
//!   dilations, paddings, batches, short rows and member views above.
//!
//! The output is the whole y buffer, the floats before the start and the
//! guard after the end included (y starts as NaN), so a store outside the
//! rows computed, or a missed one, is a mismatch too.

use std::ops::Range;

use weft_kernel::{Bench, Kernel, Offer, PlacedCode, Refusal, Workbench};
use weft_validate::{f32_special_values, Element, Outputs, SplitMix64, Validation, CANARY_F32};

use crate::arm::ArmKind;
use crate::{Activation, ConvArgs, ConvGeometry, PackedFilter, ARGS_NAME};

/// One case: a geometry, its operands (x and y at offsets into their
/// buffers), the filter as given (OHWI) and packed, and the rows computed.
#[derive(Clone, Debug)]
pub struct ConvCase {
    /// The geometry (its `act` is the epilogue).
    pub g: ConvGeometry,
    /// x's buffer and where x starts in it.
    pub x: (Vec<f32>, usize),
    /// The filter, OHWI.
    pub w: Vec<f32>,
    /// The bias, if any.
    pub bias: Option<Vec<f32>>,
    /// The filter packed for the arm.
    pub packed: PackedFilter,
    /// y's initial buffer (NaN) and where y starts in it.
    pub y: (Vec<f32>, usize),
    /// The flattened output rows computed.
    pub rows: Range<u64>,
}

impl ConvCase {
    /// The arguments of this case over `y` (a copy of its y buffer).
    pub fn args(&self, y: &mut [f32]) -> Result<ConvArgs, Refusal> {
        ConvArgs::rows(
            &self.g,
            &self.x.0[self.x.1..],
            &self.packed,
            &mut y[self.y.1..],
            self.rows.clone(),
        )
    }
}

/// The values every conv case draws, deterministic in its seed.
pub(crate) struct Gen {
    rng: SplitMix64,
    specials: Vec<u32>,
}

impl Gen {
    /// A generator from `seed` that sows special values when asked.
    pub(crate) fn new(seed: u64) -> Gen {
        Gen {
            rng: SplitMix64::new(seed),
            specials: f32_special_values(),
        }
    }

    fn value(&mut self) -> f32 {
        // Exact small multiples of 1/64 half the time (sums that cancel
        // and tie), wide random values the other half.
        if self.rng.next_u32() & 1 == 0 {
            (self.rng.below(513) as f32 - 256.0) / 64.0
        } else {
            let u = self.rng.unit_f64() * 2.0 - 1.0;
            (u * 8.0f64.powf(self.rng.unit_f64() * 4.0 - 2.0)) as f32
        }
    }

    /// `len` values, with a few special ones sown in when `special`.
    pub(crate) fn values(&mut self, len: usize, special: bool) -> Vec<f32> {
        let mut v: Vec<f32> = (0..len).map(|_| self.value()).collect();
        if special && !v.is_empty() {
            for _ in 0..(len / 64).clamp(1, 8) {
                let at = self.rng.below(len as u64) as usize;
                let s = self.specials[self.rng.below(self.specials.len() as u64) as usize];
                v[at] = f32::from_bits(s);
            }
        }
        v
    }
}

/// Build one case of `g`, its filter packed by `pack`, offsets `off`
/// into x's and y's buffers, rows `rows` (all when `None`); `None` when
/// `g` or the packing refuses.
#[allow(clippy::too_many_arguments)]
pub(crate) fn case(
    gen: &mut Gen,
    g: ConvGeometry,
    off: usize,
    bias: bool,
    special: bool,
    rows: Option<Range<u64>>,
    pack: impl FnOnce(&ConvGeometry, &[f32], Option<&[f32]>) -> Result<PackedFilter, Refusal>,
) -> Option<ConvCase> {
    let s = g.check().ok()?;
    let mut x = vec![0.0f32; off];
    x.extend(gen.values(g.x_len(), special));
    x.extend([1.0f32; 3]);
    let w = gen.values(g.w_len(), special);
    let bias = bias.then(|| gen.values(g.cout as usize, special));
    let packed = pack(&g, &w, bias.as_deref()).ok()?;
    let y = vec![f32::NAN; off + g.y_len(&s) + 3];
    Some(ConvCase {
        g,
        x: (x, off),
        w,
        bias,
        packed,
        y: (y, off),
        rows: rows.unwrap_or(0..g.batch * s.out_h),
    })
}

/// A case's outputs from `kernel`: the whole y buffer and a 16-float
/// canary guard after it (every conv validation's [`Validation::run`]).
pub(crate) fn run_case(kernel: &Kernel<ConvArgs>, case: &ConvCase) -> Result<Outputs, Refusal> {
    let mut y = case.y.0.clone();
    y.extend(std::iter::repeat_n(f32::from_bits(CANARY_F32), 16));
    let args = case.args(&mut y)?;
    // SAFETY: `ConvArgs::rows` checked the extents against `case` and `y`,
    // which outlive the call.
    unsafe { kernel.call(&args) };
    let mut out = Outputs::from_f32(y);
    out.element = Element::F32;
    Ok(out)
}

/// Where output word `index` of a case lies (every conv validation's
/// [`Validation::describe_input`]).
pub(crate) fn describe_case(case: &ConvCase, index: usize) -> String {
    let g = &case.g;
    let s = g.check().expect("cases are checked");
    let e = index.wrapping_sub(case.y.1) as u64;
    let (pix, co) = (e / g.cout, e % g.cout);
    format!(
        "{g:?} bias {} x at +{} rows {:?}: y[row {}, column {}, channel {co}]",
        case.bias.is_some(),
        case.x.1,
        case.rows,
        pix / s.out_w,
        pix % s.out_w
    )
}

/// A geometry with its own extents.
#[allow(clippy::too_many_arguments)]
fn geo(
    batch: u64,
    (in_h, in_w): (u64, u64),
    (cin, cout): (u64, u64),
    k: u64,
    stride: u64,
    pad: u64,
    dil: u64,
    act: Activation,
) -> ConvGeometry {
    ConvGeometry {
        batch,
        in_h,
        in_w,
        cin,
        cout,
        k_h: k,
        k_w: k,
        stride,
        pad,
        dil,
        groups: 1,
        act,
    }
}

/// Channels swept on both sides.
pub const CHANNELS: [u64; 5] = [1, 3, 5, 17, 33];

/// The activation of the `idx`-th case: every one in turn, shifted by one
/// every four cases so that each meets every `idx % 4` (the cases' offset
/// and special-value cycles).
pub fn activation(idx: usize) -> Activation {
    Activation::ALL[(idx + idx / 4) % Activation::ALL.len()]
}

/// The cases for `kind`'s family, deterministic in `seed`.
pub fn cases(kind: ArmKind, seed: u64) -> Vec<ConvCase> {
    let mut gen = Gen::new(seed);
    let mut out = Vec::new();
    let mut idx = 0usize;
    let depthwise = kind == ArmKind::Depthwise;
    // Shapes are given as direct ones; depthwise takes cin as its channels.
    let mut push = |gen: &mut Gen, g: ConvGeometry, rows: Option<Range<u64>>| {
        let act = crate::validation::activation(idx);
        let g = if depthwise {
            g.depthwise(g.cin).with_act(act)
        } else {
            g.with_act(act)
        };
        let special = idx % 4 == 3;
        if let Some(c) = case(gen, g, idx % 4, idx % 3 != 1, special, rows, |g, w, b| {
            PackedFilter::pack(kind, g, w, b)
        }) {
            out.push(c);
        }
        idx += 1;
    };
    let none = Activation::None;
    // Channels, both sides (depthwise: each channel count once per row).
    let couts: &[u64] = if depthwise {
        &[1]
    } else {
        &[1, 3, 5, 17, 33, 48, 64]
    };
    for &cin in CHANNELS.iter().chain(&[48, 64]) {
        for &cout in couts {
            push(
                &mut gen,
                geo(1, (7, 6), (cin, cout), 3, 1, 1, 1, none),
                None,
            );
        }
    }
    // Kernels × strides × dilations, two paddings each, spatial extents
    // and channels cycling.
    let spatial = [(7, 13), (13, 7), (1, 13), (13, 1), (7, 7), (13, 13)];
    let chans = [(3, 5), (5, 17), (17, 33), (1, 3), (33, 17)];
    let mut n = 0usize;
    for k in [1u64, 3, 5, 7] {
        for stride in [1u64, 2] {
            for dil in [1u64, 2] {
                for pad in [n as u64 % 2, k / 2 * dil + n as u64 % 2] {
                    let (hw, ch) = (spatial[n % spatial.len()], chans[n % chans.len()]);
                    push(&mut gen, geo(1, hw, ch, k, stride, pad, dil, none), None);
                    n += 1;
                }
            }
        }
    }
    // Padding past the kernel: whole border columns with no tap inside.
    push(&mut gen, geo(1, (5, 5), (5, 17), 3, 1, 3, 1, none), None);
    push(&mut gen, geo(1, (2, 3), (3, 5), 1, 1, 2, 1, none), None);
    // Batch 3, all rows and member views (empty and single rows too).
    for rows in [None, Some(4..11), Some(20..21), Some(0..1), Some(5..5)] {
        push(&mut gen, geo(3, (7, 7), (5, 17), 3, 1, 1, 1, none), rows);
    }
    push(&mut gen, geo(3, (13, 7), (17, 33), 3, 2, 1, 1, none), None);
    // Short rows (the AVX-512 direct twin's flattened tiles: consecutive
    // pixels across rows and images, each tap masked per pixel): 7 × 7
    // and 5 × 9, pads 1 and 2, kernels 3 and 5, dilation 2, stride 2,
    // whole panels by three, two, one, and a ragged one; member views
    // starting mid-image.
    for (b, hw, ch, k, stride, pad, dil) in [
        (1, (7, 7), (33, 48), 3, 1, 1, 1),
        (2, (7, 7), (17, 80), 5, 1, 2, 1),
        (1, (5, 9), (5, 40), 3, 1, 1, 1),
        (2, (5, 9), (64, 113), 5, 1, 2, 1),
        (1, (9, 5), (3, 64), 3, 1, 2, 2),
        (1, (7, 7), (1, 100), 3, 1, 1, 2),
        (2, (13, 13), (17, 33), 3, 2, 1, 1),
    ] {
        push(&mut gen, geo(b, hw, ch, k, stride, pad, dil, none), None);
    }
    for rows in [Some(3..12), Some(6..8), Some(13..14)] {
        push(&mut gen, geo(2, (7, 7), (17, 48), 3, 1, 1, 1, none), rows);
    }
    // A few large ones: the interior tiles' whole widths and leftovers.
    push(&mut gen, geo(1, (56, 56), (17, 33), 3, 1, 1, 1, none), None);
    push(&mut gen, geo(1, (56, 56), (3, 17), 7, 2, 3, 1, none), None);
    push(&mut gen, geo(1, (14, 14), (33, 64), 3, 1, 2, 2, none), None);
    push(&mut gen, geo(1, (30, 29), (64, 48), 5, 1, 2, 1, none), None);
    if !depthwise {
        for (g, rows) in grouped() {
            push(&mut gen, g, rows);
        }
    }
    out
}

/// The grouped geometries of the direct family's cases (module docs):
/// `(groups, cin_g, cout_g)` over kernels, strides, dilations, paddings,
/// batches, short rows and member views.
pub fn grouped() -> Vec<(ConvGeometry, Option<Range<u64>>)> {
    let none = Activation::None;
    let with = |groups: u64, (cin_g, cout_g): (u64, u64), g: ConvGeometry| ConvGeometry {
        cin: groups * cin_g,
        cout: groups * cout_g,
        groups,
        ..g
    };
    let base = |b, hw, k, stride, pad, dil| geo(b, hw, (1, 1), k, stride, pad, dil, none);
    let mut out = Vec::new();
    // Every channel pair once, groups cycling, 3 × 3 pad 1 and 1 × 1.
    let sides = [1u64, 3, 5, 16, 17, 33];
    let mut n = 0u64;
    for &cin_g in &sides {
        for &cout_g in &sides {
            if cin_g == 1 && cout_g == 1 {
                continue; // groups = cin = cout: depthwise's family
            }
            let groups = 2 + n % 3;
            let k = if n % 4 == 3 { 1 } else { 3 };
            let g = base(1, (5, 6), k, 1, k / 2, 1);
            out.push((with(groups, (cin_g, cout_g), g), None));
            n += 1;
        }
    }
    // Kernels × strides × dilations × paddings, ragged extents.
    for (groups, ch, b, hw, k, stride, pad, dil) in [
        (2, (3, 5), 1, (7, 13), 3, 2, 0, 1),
        (3, (5, 17), 1, (13, 7), 3, 1, 2, 2),
        (4, (17, 3), 3, (7, 7), 3, 2, 1, 1),
        (2, (16, 33), 1, (9, 11), 1, 2, 1, 1),
        (3, (1, 16), 1, (13, 13), 3, 1, 1, 2),
        (4, (33, 1), 1, (5, 9), 1, 1, 0, 1),
        (2, (5, 48), 1, (14, 14), 3, 1, 1, 1),
        (2, (3, 64), 1, (13, 30), 3, 1, 1, 1),
        (3, (5, 33), 1, (30, 29), 3, 1, 1, 1),
        (4, (3, 17), 2, (9, 9), 5, 1, 2, 1),
        (2, (17, 17), 1, (13, 13), 3, 2, 2, 2),
    ] {
        let g = base(b, hw, k, stride, pad, dil);
        out.push((with(groups, ch, g), None));
    }
    // Channel multiplier 2 (groups = cin, cout = 2 · cin).
    for (c, b, hw, k, stride, pad, dil) in [
        (8, 1, (7, 7), 3, 1, 1, 1),
        (5, 1, (13, 13), 3, 2, 2, 2),
        (17, 3, (7, 6), 1, 1, 0, 1),
        (3, 1, (30, 29), 3, 1, 1, 1),
    ] {
        let g = base(b, hw, k, stride, pad, dil);
        out.push((with(c, (1, 2), g), None));
    }
    // Short rows (the flattened tiles) and member views over batch 3.
    for (groups, ch, b, hw, rows) in [
        (2, (17, 48), 1, (7, 7), None),
        (3, (3, 33), 2, (7, 7), Some(3..12)),
        (4, (5, 5), 2, (5, 9), Some(1..6)),
        (2, (16, 17), 3, (7, 7), Some(4..11)),
        (2, (16, 17), 3, (7, 7), Some(20..21)),
        (3, (5, 3), 3, (7, 7), Some(5..5)),
    ] {
        let g = base(b, hw, 3, 1, 1, 1);
        out.push((with(groups, ch, g), rows));
    }
    out
}

/// Validation of a family's twins against its arm.
#[derive(Clone, Copy, Debug)]
pub struct ConvValidation(pub ArmKind);

// SAFETY: `Args` is the `#[repr(C)]` struct of contracts naming ARGS_NAME,
// and `run` calls a kernel only with arguments built by `ConvArgs::rows`,
// which checks every extent against buffers that outlive the call.
unsafe impl Validation for ConvValidation {
    type Args = ConvArgs;
    type Case = ConvCase;

    fn args_name(&self) -> &str {
        ARGS_NAME
    }

    fn generator(&self) -> String {
        format!("{} cases v3", self.0.family())
    }

    fn cases(&self, _offer: &Offer, seed: u64) -> Vec<ConvCase> {
        cases(self.0, seed)
    }

    fn run(&self, kernel: &Kernel<ConvArgs>, case: &ConvCase) -> Result<Outputs, Refusal> {
        run_case(kernel, case)
    }

    fn describe_input(&self, case: &ConvCase, index: usize) -> String {
        describe_case(case, index)
    }
}

/// Runs a body on random operands at its offer's geometry (the offer's
/// own packed filter), for the planner's micro-race.
#[derive(Clone, Copy, Debug)]
pub struct ConvBench(pub ArmKind);

struct Prepared {
    g: ConvGeometry,
    x: Vec<f32>,
    packed: PackedFilter,
    y: Vec<f32>,
}

impl Workbench for ConvBench {
    fn prepare(&self, offer: &Offer, seed: u64) -> Result<Box<dyn Bench>, Refusal> {
        if offer.contract.args != ARGS_NAME {
            return Err(Refusal::BadOperand {
                operand: "args".to_owned(),
                reason: format!(
                    "the conv bench runs {ARGS_NAME}, not {}",
                    offer.contract.args
                ),
            });
        }
        let (g, s) = ConvGeometry::from_geometry(&offer.contract.geometry)?;
        let packed = PackedFilter::from_site(offer.packed.iter().find(|p| p.name == "w"), &g)?;
        let x = Gen::new(seed).values(g.x_len(), false);
        let y = vec![0.0f32; g.y_len(&s)];
        Ok(Box::new(Prepared { g, x, packed, y }))
    }
}

impl Bench for Prepared {
    unsafe fn run(&mut self, code: &std::sync::Arc<PlacedCode>) -> Result<(), Refusal> {
        // SAFETY: the caller promises `code` is a body built for a conv
        // offer, which honours the leaf ABI for `ConvArgs`.
        let kernel = unsafe { Kernel::<ConvArgs>::from_placed(code.clone(), 0)? };
        let args = ConvArgs::new(&self.g, &self.x, &self.packed, &mut self.y)?;
        // SAFETY: `new` checked the extents against buffers owned by `self`.
        unsafe { kernel.call(&args) };
        Ok(())
    }
}
