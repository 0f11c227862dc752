//! The 1 × 1 convolution as the planner's f32 GEMM over pixels: a
//! [`Region`] whose chain is *bias → `f32.gemm` → activation* and whose
//! fused site is the convolution itself, so the planner chooses between
//! weft-gemm's bodies and the convolution's by the price of their bytes
//! (and races them when it cannot tell), and every GEMM the planner learns
//! to run faster serves these convolutions too, without a copy.
//!
//! # Why a region, and why the chain has the same bits
//!
//! A 1 × 1, stride-1, unpadded, ungrouped convolution over NHWC is
//! `y[p, co] = act(bias[co] + Σ_ci x[p, ci] · w[co, ci])` for every pixel
//! `p` of the `m = batch · in_h · in_w`: the GEMM `C = A·Bᵀ` with A = x
//! (`m × cin`, dense), B given transposed (`w`, `cout × cin`, the OHWI
//! filter as it is) and C = y (`m × cout`). The conv contract starts each
//! accumulator at the bias and then takes one FMA per input channel in
//! order; `f32.gemm`'s contract starts it at `β ⊗ C` and takes one FMA
//! per `k` in order, `α = 1` skipping its multiply. So:
//!
//! 1. **bias** (`conv.epilogue`, stage 0): `y[p, co] ← bias[co]` over the
//!    call's pixels (only when the site has a bias);
//! 2. **`f32.gemm`** at `m × cout × cin`, B = the filter given transposed
//!    at plan time, `α = 1`, `β = 1` after the bias stage (`acc ← 1 ⊗
//!    bias`, exact but for a signalling NaN's quieting, which both
//!    contracts compare by class) or `β = 0` without one (`acc ← +0`, as
//!    the conv contract's missing bias, and y is not read);
//! 3. **act** (`conv.epilogue`, stage 1): `y ← act(y)` in place, with the
//!    conv family's own activation steps (ReLU's and ReLU6's comparisons,
//!    [`crate::silu`]), only when the site has one.
//!
//! Each output is the conv contract's sequence of roundings, so the chain
//! gives the fused site's bits (the tests hold both to the reference on
//! hunting inputs); the region changes no numerics, as regions promise.
//!
//! # The epilogue family (`conv.epilogue`)
//!
//! Its bodies take [`ConvArgs`] (the convolution's own arguments: the same
//! rows, member views and epilogue code), reading only `y`, `filt`, `cout`,
//! `out_w`, `act` and the row range; `x` is never read. Its geometry is
//! the convolution's plus `stage` (0: bias, whose `act` is none; 1: act).
//! Stage 0's packed operand `bias` is [`BIAS_LAYOUT`]: `⌈cout / 16⌉`
//! 64-byte lines, channel `co` at lane `co % 16` of line `co / 16`, `+0`
//! past `cout` (the direct layout's bias lines). The CLIF arm
//! ([`arm`]) walks f32x4 vectors with a one-float tail; its twins are
//! AVX-512 (zmm, masked tails), AVX2 (ymm, one-float tails) and NEON
//! (`q`, one-float tails) ([`x64`], [`a64`]), each bit for bit the arm:
//! stage 0 copies bits, and stage 1 is the tile epilogues' and the SiLU
//! pass's code.
//!
//! # Running it
//!
//! [`region`] builds the region for a geometry [`serves`] accepts;
//! [`Pointwise`] holds what a compiled plan hands back (the packed
//! operands, the GEMM's split axis) and runs the planner's choice, or
//! either alternative:
//!
//! ```no_run
//! use weft_conv::{pointwise, Activation, ConvGeometry};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let g = ConvGeometry::square(1, 14, 256, 1024, 1, 1, 0).with_act(Activation::Relu);
//! let (w, bias) = (vec![0.01f32; 1024 * 256], vec![0.5f32; 1024]);
//! let mut catalogue = weft_plan::Catalogue::new();
//! for e in weft_conv::entries().into_iter().chain([pointwise::entry(), weft_gemm::entry()]) {
//!     catalogue.register(e)?;
//! }
//! let host = weft_host::Host::detect();
//! let mut planner = weft_plan::Planner::for_host(catalogue, host, weft_plan::Options::from_env()?);
//! let region = pointwise::region("res4.conv1", &g, &w, Some(&bias))?;
//! let plan = planner.compile_with_regions(&[], &[region])?;
//! let layer = pointwise::Pointwise::new(&plan, "res4.conv1", &g)?;
//! let x = vec![1.0f32; 14 * 14 * 256];
//! let mut y = vec![0.0f32; 14 * 14 * 1024];
//! layer.run(&plan, &weft_plan::Executor::new(2), &x, &mut y)?;
//! # Ok(()) }
//! ```

pub mod a64;
pub mod arm;
pub mod validation;
pub mod x64;

#[cfg(test)]
mod tests;

use std::ops::Range;
use std::sync::Arc;

use weft_gemm::{BLayout, GemmArgs, MatRef, SiteOperands};
use weft_kernel::{
    Aliasing, ArithmeticContract, Contract, FmaUse, LoopTrip, NanRule, Offer, PackedOperand,
    ReductionOrder, Refusal, Site,
};
use weft_plan::{Alternative, CompiledPlan, Executor, Member, PlanError, Region};

use crate::pack::{lines_of, Line};
use crate::{bad, Activation, ConvArgs, ConvError, ConvGeometry, PackedFilter, Shape, PANEL};

/// The epilogue family's name.
pub const EPILOGUE: &str = "conv.epilogue";

/// The layout of stage 0's packed bias (module docs).
pub const BIAS_LAYOUT: &str = "conv.epilogue.bias16";

/// What an epilogue site does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u64)]
pub enum Stage {
    /// `y[p, co] ← bias[co]` (before the GEMM; the site's `act` is none).
    Bias = 0,
    /// `y ← act(y)` in place (after the GEMM).
    Act = 1,
}

impl Stage {
    /// From a geometry's `stage`, refused by name otherwise.
    pub fn of(g: &weft_kernel::Geometry) -> Result<Stage, Refusal> {
        match g.require("stage")? {
            0 => Ok(Stage::Bias),
            1 => Ok(Stage::Act),
            s => Err(Refusal::UnsupportedGeometry {
                reason: format!("stage = {s}: 0 (bias) or 1 (act)"),
            }),
        }
    }
}

/// Whether the region serves `g`: a 1 × 1 kernel, stride 1, no padding,
/// one group (then x's pixels are y's, one to one, and the GEMM's rows).
/// Dilation does not matter to a single tap.
pub fn serves(g: &ConvGeometry) -> Result<Shape, Refusal> {
    let s = g.check()?;
    if (g.k_h, g.k_w, g.stride, g.pad, g.groups) != (1, 1, 1, 0, 1) {
        return Err(Refusal::UnsupportedGeometry {
            reason: format!(
                "the GEMM over pixels takes 1 × 1, stride 1, pad 0, one group, not {}×{} stride {} pad {} groups {}",
                g.k_h, g.k_w, g.stride, g.pad, g.groups
            ),
        });
    }
    Ok(s)
}

/// The GEMM's rows: every pixel of every image.
pub fn pixels(g: &ConvGeometry) -> usize {
    (g.batch * g.in_h * g.in_w) as usize
}

/// An epilogue site of `g` at `stage` (stage 0 carries `bias`, and its
/// geometry's `act` is none).
pub fn epilogue_site(
    g: &ConvGeometry,
    stage: Stage,
    bias: Option<&[f32]>,
) -> Result<Site, ConvError> {
    g.check()?;
    let g = match stage {
        Stage::Bias => g.with_act(Activation::None),
        Stage::Act => *g,
    };
    let mut s = Site::new(
        weft_kernel::Family(EPILOGUE),
        g.to_geometry().with("stage", stage as u64),
    );
    if let (Stage::Bias, Some(b)) = (stage, bias) {
        let bytes: Vec<u8> = b.iter().flat_map(|v| v.to_le_bytes()).collect();
        s = s.with_operand("bias", bytes.into());
    }
    Ok(s)
}

/// The region for `g` (which [`serves`] must accept): its chain is the
/// bias stage (with a bias), the GEMM, the act stage (with an
/// activation); its fused site is the convolution. Members are labelled
/// `{label}.bias`, `{label}.gemm`, `{label}.act` and `{label}.conv`.
pub fn region(
    label: &str,
    g: &ConvGeometry,
    w: &[f32],
    bias: Option<&[f32]>,
) -> Result<Region, Refusal> {
    serves(g)?;
    if w.len() != g.w_len() {
        return Err(bad(
            "w",
            format!("{} elements, a {g:?} filter has {}", w.len(), g.w_len()),
        ));
    }
    if bias.is_some_and(|b| b.len() as u64 != g.cout) {
        return Err(bad("bias", format!("cout = {} elements expected", g.cout)));
    }
    let mut chain = Vec::new();
    if bias.is_some() {
        chain.push(Member::new(
            epilogue_site(g, Stage::Bias, bias)?.with_label(format!("{label}.bias")),
        ));
    }
    let (m, n, k) = (pixels(g), g.cout as usize, g.cin as usize);
    chain.push(Member::new(
        weft_gemm::site(m, n, k, BLayout::Transposed, Some(w)).with_label(format!("{label}.gemm")),
    ));
    if g.act != Activation::None {
        chain.push(Member::new(
            epilogue_site(g, Stage::Act, None)?.with_label(format!("{label}.act")),
        ));
    }
    let fused = crate::site(g, w, bias)?.with_label(format!("{label}.conv"));
    Ok(Region {
        label: label.to_owned(),
        chain,
        fused: Member::new(fused),
    })
}

/// Stage 0's bias, packed ([`BIAS_LAYOUT`]).
#[derive(Clone, Debug, PartialEq)]
pub struct PackedBias {
    lines: Vec<Line>,
    cout: u64,
}

impl PackedBias {
    /// Pack `bias` (`cout` elements).
    pub fn pack(bias: &[f32]) -> PackedBias {
        let mut lines = vec![Line([0.0; PANEL]); bias.len().div_ceil(PANEL)];
        for (co, b) in bias.iter().enumerate() {
            lines[co / PANEL].0[co % PANEL] = *b;
        }
        PackedBias {
            lines,
            cout: bias.len() as u64,
        }
    }

    /// As an offer's packed operand `bias`.
    pub fn operand(&self) -> PackedOperand {
        let bytes: Vec<u8> = self
            .lines
            .iter()
            .flat_map(|l| l.0.iter().flat_map(|v| v.to_le_bytes()))
            .collect();
        PackedOperand {
            name: "bias",
            layout: BIAS_LAYOUT,
            bytes: bytes.into(),
        }
    }

    /// Back from a compiled site's operand for `cout` channels; another
    /// layout or length is `bad-operand`.
    pub fn from_operand(op: &PackedOperand, cout: u64) -> Result<PackedBias, Refusal> {
        let want = cout.div_ceil(PANEL as u64) as usize * 64;
        if op.layout != BIAS_LAYOUT || op.bytes.len() != want {
            return Err(bad(
                "bias",
                format!(
                    "{} bytes of {}, {cout} channels packed are {want} bytes of {BIAS_LAYOUT}",
                    op.bytes.len(),
                    op.layout
                ),
            ));
        }
        Ok(PackedBias {
            lines: lines_of(&op.bytes),
            cout,
        })
    }

    /// Channel `co`'s bias.
    pub fn get(&self, co: usize) -> f32 {
        self.lines[co / PANEL].0[co % PANEL]
    }
}

/// The arguments of `stage` over the flattened output rows `rows` of `y`
/// (`g`'s geometry): stage 0 takes `bias` packed for `g.cout` channels
/// and runs without an activation; stage 1 takes none and runs `g.act`.
/// `x` is never read: it is y's pointer.
pub fn args(
    g: &ConvGeometry,
    stage: Stage,
    bias: Option<&PackedBias>,
    y: &mut [f32],
    rows: Range<u64>,
) -> Result<ConvArgs, Refusal> {
    let s = g.check()?;
    let g = &match (stage, bias) {
        (Stage::Bias, Some(_)) => g.with_act(Activation::None),
        (Stage::Act, None) => *g,
        (Stage::Bias, None) => return Err(bad("bias", "the bias stage needs its bias".to_owned())),
        (Stage::Act, Some(_)) => return Err(bad("bias", "the act stage takes no bias".to_owned())),
    };
    ConvArgs::check_y(g, &s, y, &rows)?;
    if let Some(b) = bias {
        if b.cout != g.cout {
            return Err(bad(
                "bias",
                format!("packed for {} channels, cout = {}", b.cout, g.cout),
            ));
        }
    }
    let filt = bias.map_or(std::ptr::null(), |b| b.lines.as_ptr().cast());
    let y = y.as_mut_ptr();
    Ok(ConvArgs::from_parts(g, &s, (y.cast_const(), filt, y), rows))
}

/// The contract of an epilogue site at `g` (module docs).
pub fn contract(g: &weft_kernel::Geometry) -> Contract {
    Contract {
        family: EPILOGUE.to_owned(),
        geometry: g.clone(),
        args: crate::ARGS_NAME.to_owned(),
        arithmetic: ArithmeticContract {
            accumulator_lanes: 1,
            reduction: ReductionOrder::Sequential,
            fma: FmaUse::AsSpecified,
            nan: NanRule::ByClass,
            notes: "stage 0: y = bias (bits copied); stage 1: y = act(y), the conv \
                    family's ReLU/ReLU6 comparisons and SiLU steps"
                .to_owned(),
        },
        aliasing: Aliasing::disjoint(),
    }
}

/// Elements of y a call over every row touches.
fn elements(g: &ConvGeometry, s: &Shape) -> u64 {
    g.y_len(s) as u64
}

/// The loop nest of a body at `g`, `stage`: `lanes` floats a step, then
/// one at a time (unless `masked`, whose tails are one masked step); at
/// stage 1 one loop for both ReLUs, or (`apart`) one for each, then the
/// SiLU pass's loops, which every body carries (zero trips but at act 3).
pub fn nest(
    g: &ConvGeometry,
    s: &Shape,
    stage: Stage,
    (lanes, masked, apart): (u64, bool, bool),
) -> Vec<LoopTrip> {
    let trip = |name: &str, trips, depth| LoopTrip {
        name: name.to_owned(),
        trips,
        depth,
    };
    let mut out = Vec::new();
    match stage {
        Stage::Bias => {
            out.push(trip("pixels", g.batch * s.out_h * s.out_w, 0));
            out.push(trip("channels", g.cout / lanes, 1));
            if !masked {
                out.push(trip("channel_tail", g.cout % lanes, 1));
            }
        }
        Stage::Act => {
            let loops: &[&[Activation]] = if apart {
                &[&[Activation::Relu], &[Activation::Relu6]]
            } else {
                &[&[Activation::Relu, Activation::Relu6]]
            };
            for acts in loops {
                let n = if acts.contains(&g.act) {
                    elements(g, s)
                } else {
                    0
                };
                out.push(trip("act", n / lanes, 0));
                if !masked {
                    out.push(trip("act_tail", n % lanes, 0));
                }
            }
        }
    }
    crate::silu::after(out, g, s, lanes, masked)
}

/// [`nest`] at `offer`'s geometry and stage (the offer's own loops if it
/// has neither): what every body's [`weft_kernel::Twin::nest`] states.
pub fn nest_of(offer: &Offer, steps: (u64, bool, bool)) -> Vec<LoopTrip> {
    match (
        ConvGeometry::from_geometry(&offer.contract.geometry),
        Stage::of(&offer.contract.geometry),
    ) {
        (Ok((g, s)), Ok(stage)) => nest(&g, &s, stage, steps),
        _ => offer.loops.clone(),
    }
}

/// The offer at an epilogue site: stage 0's bias packed, the rows as
/// member views.
pub fn offer(site: &Site) -> Result<Offer, Refusal> {
    if site.family.name() != EPILOGUE {
        return Err(Refusal::UnsupportedGeometry {
            reason: format!("family {} is not {EPILOGUE}", site.family),
        });
    }
    let stage = Stage::of(&site.geometry)?;
    let (g, s) = ConvGeometry::from_geometry(&site.geometry)?;
    let n = elements(&g, &s);
    let (packed, flops, bytes) = match stage {
        Stage::Bias => {
            if g.act != Activation::None {
                return Err(Refusal::UnsupportedGeometry {
                    reason: "the bias stage has no activation (act = 0)".to_owned(),
                });
            }
            let bias: Vec<f32> = match site.operand("bias") {
                Some(b) => b
                    .bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
                None => vec![0.0; g.cout as usize],
            };
            if bias.len() as u64 != g.cout {
                return Err(bad(
                    "bias",
                    format!("{} elements, cout = {}", bias.len(), g.cout),
                ));
            }
            let p = PackedBias::pack(&bias);
            (vec![p.operand()], 0, 4 * n + 64 * p.lines.len() as u64)
        }
        Stage::Act => {
            let per = if g.act == Activation::Silu { 20 } else { 2 };
            (Vec::new(), per * n, 8 * n)
        }
    };
    Ok(Offer {
        contract: contract(&site.geometry),
        packed,
        views: Some(crate::arm::views(&g, &s)),
        loops: nest(&g, &s, stage, (4, false, false)),
        flops,
        bytes_moved: bytes,
    })
}

/// The epilogue family as a planner registers it: the arm with its
/// AVX-512, AVX2 and NEON twins, its check and its bench.
pub fn entry() -> weft_kernel::FamilyEntry {
    use weft_kernel::ArmEntry;
    use weft_validate::Checker;
    weft_kernel::FamilyEntry {
        family: weft_kernel::Family(EPILOGUE),
        arms: vec![ArmEntry::new(
            Arc::new(arm::EpilogueArm),
            x64::twins().into_iter().chain(a64::twins()).collect(),
            Arc::new(Checker(validation::EpilogueValidation)),
            Some(Arc::new(validation::EpilogueBench)),
        )],
    }
}

/// Why a [`Pointwise`] cannot be built or run. Each `Display` starts with
/// the error's name.
#[derive(Debug, thiserror::Error)]
pub enum PointwiseError {
    /// The plan has no such region, or a member's kernel takes other
    /// arguments.
    #[error("{0}")]
    Plan(#[from] PlanError),
    /// An operand or a geometry refused by name.
    #[error("{0}")]
    Refused(#[from] Refusal),
}

/// A compiled 1 × 1 region, ready to run (module docs).
#[derive(Clone, Debug)]
pub struct Pointwise {
    g: ConvGeometry,
    choice: Alternative,
    /// Plan indices: the bias stage, the GEMM, the act stage, the fused
    /// convolution.
    bias_site: Option<usize>,
    gemm_site: usize,
    act_site: Option<usize>,
    fused_site: usize,
    bias: Option<PackedBias>,
    gemm: SiteOperands,
    filter: PackedFilter,
}

impl Pointwise {
    /// The region `label` of `plan`, built by [`region`] for `g`.
    pub fn new(
        plan: &CompiledPlan,
        label: &str,
        g: &ConvGeometry,
    ) -> Result<Pointwise, PointwiseError> {
        serves(g)?;
        let r = plan.region(label)?;
        let family = |i: usize| plan.sites()[i].contract.family.as_str();
        let mut bias_site = None;
        let mut act_site = None;
        let mut gemm_site = None;
        for &i in &r.chain {
            match family(i) {
                weft_gemm::FAMILY => gemm_site = Some(i),
                EPILOGUE => match Stage::of(&plan.sites()[i].contract.geometry)? {
                    Stage::Bias => bias_site = Some(i),
                    Stage::Act => act_site = Some(i),
                },
                other => {
                    return Err(bad("region", format!("a chain member of family {other}")).into())
                }
            }
        }
        let gemm_site =
            gemm_site.ok_or_else(|| bad("region", "no f32.gemm in the chain".to_owned()))?;
        if act_site.is_some() != (g.act != Activation::None) {
            return Err(bad(
                "region",
                format!("the act stage does not match {:?}", g.act),
            )
            .into());
        }
        let bias = match bias_site {
            Some(i) => Some(PackedBias::from_operand(
                plan.sites()[i]
                    .packed("bias")
                    .ok_or_else(|| bad("bias", "the bias stage packed no bias".to_owned()))?,
                g.cout,
            )?),
            None => None,
        };
        let s = &plan.sites()[gemm_site];
        let gemm = SiteOperands::new(
            s.packed("b"),
            s.views.as_ref(),
            g.cin as usize,
            g.cout as usize,
        )?;
        let filter = PackedFilter::from_site(plan.sites()[r.fused].packed("w"), g)?;
        Ok(Pointwise {
            g: *g,
            choice: r.choice,
            bias_site,
            gemm_site,
            act_site,
            fused_site: r.fused,
            bias,
            gemm,
            filter,
        })
    }

    /// The alternative the planner chose.
    pub fn choice(&self) -> Alternative {
        self.choice
    }

    /// `y ← conv(x)` by the planner's choice.
    pub fn run(
        &self,
        plan: &CompiledPlan,
        exec: &Executor,
        x: &[f32],
        y: &mut [f32],
    ) -> Result<(), PointwiseError> {
        self.run_as(self.choice, plan, exec, x, y)
    }

    /// `y ← conv(x)` by `alt` (either gives the same bits).
    pub fn run_as(
        &self,
        alt: Alternative,
        plan: &CompiledPlan,
        exec: &Executor,
        x: &[f32],
        y: &mut [f32],
    ) -> Result<(), PointwiseError> {
        let g = &self.g;
        if alt == Alternative::Fused {
            let args = ConvArgs::new(g, x, &self.filter, y)?;
            let k = plan.kernel::<ConvArgs>(self.fused_site)?;
            // SAFETY: `ConvArgs::new` checked every extent against `x`,
            // the packed filter and `y`, which outlive the call.
            unsafe { k.run(exec, &args) };
            return Ok(());
        }
        // Both extents before any slicing: a short x or y is refused by
        // name, whichever stages the chain has.
        if x.len() < g.x_len() {
            return Err(bad(
                "x",
                format!("{} elements, the geometry needs {}", x.len(), g.x_len()),
            )
            .into());
        }
        let rows = 0..g.batch * g.in_h;
        ConvArgs::check_y(g, &serves(g)?, y, &rows)?;
        if let Some(i) = self.bias_site {
            let args = args(g, Stage::Bias, self.bias.as_ref(), y, rows.clone())?;
            let k = plan.kernel::<ConvArgs>(i)?;
            // SAFETY: `args` checked y's extent and the packed bias's
            // channels; both outlive the call.
            unsafe { k.run(exec, &args) };
        }
        let (m, n, kk) = (pixels(g), g.cout as usize, g.cin as usize);
        let beta = if self.bias_site.is_some() { 1.0 } else { 0.0 };
        let a = MatRef::dense(&x[..m * kk], m, kk);
        let gemm: GemmArgs = self.gemm.args(a, None, &mut y[..m * n], n, (1.0, beta))?;
        let k = plan.kernel::<GemmArgs>(self.gemm_site)?;
        // SAFETY: `SiteOperands::args` checked A, the packed B and C's
        // extents; x, the plan's packed B and y outlive the call.
        unsafe { k.run(exec, &gemm) };
        if let Some(i) = self.act_site {
            let args = args(g, Stage::Act, None, y, rows)?;
            let k = plan.kernel::<ConvArgs>(i)?;
            // SAFETY: `args` checked y's extent; the act stage reads and
            // writes only y.
            unsafe { k.run(exec, &args) };
        }
        Ok(())
    }
}
