//! The f32 direct 2-D convolution families (`conv.direct`,
//! `conv.depthwise`): NHWC activations, filters packed at plan time into
//! the layout each body reads, one fixed rounding per output element, so
//! every arm and twin of a family gives the same bits and the planner may
//! choose among them by speed alone.
//!
//! # Geometry
//!
//! [`ConvGeometry`]: `batch × in_h × in_w × cin` input, `cout` output
//! channels, a `k_h × k_w` kernel, one `stride`, `pad` and `dil`ation for
//! both spatial axes (padding is symmetric: `pad` rows above and below,
//! `pad` columns left and right), `groups`, and the epilogue
//! ([`Activation`]). [`ConvGeometry::check`] refuses impossible geometries
//! with a typed [`ConvError`] (zero extents, an empty output, channels not
//! divisible by the groups, sizes past [`MAX_ELEMENTS`]) and never panics;
//! the output is `out_h = (in_h + 2·pad − dil·(k_h − 1) − 1) / stride + 1`
//! rows, the same for columns.
//!
//! # Operands
//!
//! - **x**: `batch × in_h × in_w × cin`, dense NHWC (channel fastest).
//! - **filter**: `cout × k_h × k_w × (cin / groups)` (OHWI, the TFLite and
//!   ONNX-NHWC order) and an optional bias of `cout`; a site gives both
//!   at plan time and the arm packs them ([`pack`]).
//! - **y**: `batch × out_h × out_w × cout`, dense NHWC.
//!
//! x, the packed filter and y are disjoint (no aliasing is declared). A
//! call computes the output rows `row_start..row_end` of the flattened
//! `(batch, out_h)` axis, every column and channel of them, and touches no
//! other element of y.
//!
//! # Contract (how every body rounds)
//!
//! For each output `(b, oh, ow, co)` of group `g = co / (cout / groups)`,
//! with `fma` one fused multiply-add rounding to nearest even:
//!
//! 1. `acc ← bias[co]` (`+0.0` when the site has no bias);
//! 2. for `kh = 0 … k_h − 1`, then `kw = 0 … k_w − 1`, then
//!    `ci = 0 … cin/groups − 1`, in that order, **skipping** every tap
//!    whose input row `ih = oh·stride − pad + kh·dil` or column
//!    `iw = ow·stride − pad + kw·dil` lies outside the input (padding is
//!    not an FMA with zero: `fma(0, ∞, acc)` would be NaN):
//!    `acc ← fma(x[b, ih, iw, g·cin/groups + ci], w[co, kh, kw, ci], acc)`;
//! 3. the epilogue: `none`: `y = acc`; `relu`: `y = 0 > acc ? +0 : acc`;
//!    `relu6`: `r = 0 > acc ? +0 : acc; y = 6 < r ? 6 : r`. A NaN
//!    passes both comparisons unchanged and `−0` stays `−0` (x64's
//!    `vmaxps zero, acc` and `vminps six, r` compute exactly this);
//!    `silu`: `y = acc · σ(acc)` by the family's own f32 steps ([`silu`]:
//!    a Cody–Waite `exp`, one division), applied by every body in one
//!    pass over the call's rows after its tiles;
//! 4. `y[b, oh, ow, co] ← y`.
//!
//! So the reduction is sequential, one accumulator per output, FMA at
//! every step; bodies differ in tiling (how many pixels and channels a
//! register tile holds, which loop is outermost), never in numerics. The
//! scalar [`reference`](mod@reference) is the definition all of them meet.
//! SiLU's `exp` is not weft-libm's correctly rounded one (whose binary64
//! steps need a register plan of their own): [`silu`] states the f32 steps
//! and their error (at most 4 ulps for `acc ≥ −87`).
//!
//! # Families and arms
//!
//! - `conv.direct` (every `groups` but depthwise's: `groups = 1`, grouped
//!   convolutions with `1 < groups < cin`, channel multipliers `groups =
//!   cin`, `cout = m · cin`), arm `conv.direct.arm`: the filter in panels
//!   of 16 output channels of one group ([`pack::DIRECT_LAYOUT`]:
//!   `⌈cout_g / 16⌉` panels a group, padding lanes zero, so a panel never
//!   mixes groups); register tiles of output pixels (along a row) × one
//!   panel, vector over the group's output channels, one broadcast of x
//!   per pixel and input channel of the group. Pixels whose every tap
//!   column is inside the input run in tiles without column checks; the
//!   border pixels run one at a time with them.
//! - `conv.depthwise` (`groups = cin = cout`), arm `conv.depthwise.arm`:
//!   the taps of 16 channels contiguous ([`pack::DEPTHWISE_LAYOUT`]),
//!   vector over channels, one pixel at a time.
//!
//! - `conv.direct`, second arm `conv.direct.winograd` ([`winograd`]): for
//!   3 × 3, stride 1, dilation 1 (`cin ≤ 512`), Winograd F(2 × 2, 3 × 3)
//!   with **its own contract** (the padding read as +0 inside a 4 × 4
//!   input tile, `V = Bᵀ d B`, `U = G g Gᵀ` packed at plan time
//!   ([`pack::WINOGRAD_LAYOUT`]), per position a sequential FMA over `ci`
//!   from +0, `Y = Aᵀ M A`, then `act(Y + bias)`, every add in a fixed
//!   order): other bits than the direct arm's, so the planner chooses
//!   between the two arms by the price of their bytes (stage 1), then
//!   among the chosen arm's bodies. AVX-512 (7 tiles × 32 channels) and
//!   AVX2 (6 × 16) twins, and a NEON one (6 tiles × 16 channels).
//!
//! - `conv.direct`, third arm `conv.direct.grouped` ([`grouped`]): grouped
//!   convolutions whose groups have 1, 2, 4 or 8 output channels (and at
//!   most 32 input channels a panel), the direct contract unchanged, so the same
//!   bits as the direct arm: panels of 16 output channels spanning `16 /
//!   cout_g` consecutive groups ([`pack::GROUPED_LAYOUT`]), where the
//!   direct arm's one-group panels leave most lanes idle. The arm
//!   broadcasts each f32x4's own group's x (lane by lane at `cout_g` 1
//!   and 2); the AVX-512 and AVX2 twins load a panel's input channels
//!   once a tap and permute them per `ci` (`vpermps`, `vpermi2ps`; AVX2
//!   per 8-lane half); the NEON twin (6 pixels × 16 channels,
//!   [`grouped::a64`]) uses `fmla` by element at `cout_g` 4 and 8 and
//!   builds each vector's x by lane loads at 1 and 2. The planner picks
//!   the arm by price (ResNeXt's 32-group 3 × 3 on x64: 3.5× the direct
//!   twin); other grouped geometries it
//!   refuses by name (`unsupported-geometry`) and the direct arm serves.
//!
//! - The 1 × 1 convolution (stride 1, no padding, one group) as
//!   weft-gemm's `f32.gemm` over pixels, through the planner
//!   ([`pointwise`]): a region whose chain is a bias stage, the GEMM (the
//!   OHWI filter is B given transposed at plan time; `β = 1` over the
//!   bias, so each output is the contract's own sequence of roundings)
//!   and an act stage, against the `conv.direct` site itself. The planner
//!   prices both and chooses (or races), so the convolution gains every
//!   GEMM body without a copy; the stages are the small family
//!   `conv.epilogue` (a CLIF arm, AVX-512, AVX2 and NEON twins).
//!
//! Grouped convolutions (`1 < groups < cin`, and channel multipliers
//! above one) belong to `conv.direct` and are served by its direct arm and
//! its twins: each panel reads its group's input channels `g · cin_g ..
//! (g + 1) · cin_g` (x's pixel stride stays `cin`), reduces over `cin_g =
//! cin / groups` in the contract's order, and stores its group's output
//! channels (y's pixel stride stays `cout`), lanes past `cout_g = cout /
//! groups` masked. The Winograd arm refuses them by name
//! (`unsupported-geometry`), as the depthwise arm refuses everything but
//! `groups = cin = cout`; [`family_of`] sends that one geometry to
//! `conv.depthwise` and every other to `conv.direct`.
//!
//! Twins take an arm's offer and replace its body: AVX-512 and AVX2 + FMA
//! bodies of each arm ([`twin_x64`], the direct ones once per group) and
//! NEON ones ([`twin_a64`]), over the same packed layout, with wider register tiles (up to 12 pixels ×
//! 32 channels; at short rows, AVX-512 direct tiles of 7 pixels spanning
//! rows × 48 channels, each pixel's taps outside the input masked out of
//! its FMAs). Threads split the flattened output rows (member view
//! `rows`, granule 1); every output is the same sequence of operations in
//! any split.
//!
//! # Example
//!
//! One layer through the planner (`examples/cnn.rs` runs a three-layer
//! CNN — 3×3 convolution with ReLU, depthwise with SiLU, pointwise —
//! from weights in a file it writes, checking each layer against the
//! reference: `cargo run --release -p weft-conv --example cnn`):
//!
//! ```no_run
//! use weft_conv::{Activation, ConvArgs, ConvGeometry, PackedFilter};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let g = ConvGeometry::square(1, 56, 64, 64, 3, 1, 1).with_act(Activation::Relu);
//! let w = vec![0.01f32; 64 * 3 * 3 * 64];
//! let mut catalogue = weft_plan::Catalogue::new();
//! for e in weft_conv::entries() {
//!     catalogue.register(e)?;
//! }
//! let host = weft_host::Host::detect();
//! let mut planner = weft_plan::Planner::for_host(catalogue, host, weft_plan::Options::from_env()?);
//! let plan = planner.compile(&[weft_conv::site(&g, &w, None)?])?;
//! let filter = PackedFilter::from_site(plan.sites()[0].packed("w"), &g)?;
//! let x = vec![1.0f32; 56 * 56 * 64];
//! let mut y = vec![0.0f32; 56 * 56 * 64];
//! let args = ConvArgs::new(&g, &x, &filter, &mut y)?;
//! // SAFETY: `args` was checked against `x`, `filter` and `y`, live until it returns.
//! unsafe { plan.kernel::<ConvArgs>(0)?.run(&weft_plan::Executor::new(2), &args) };
//! # Ok(()) }
//! ```

pub mod arm;
pub mod grouped;
pub mod pack;
pub mod pointwise;
pub mod reference;
pub mod silu;
pub mod twin_a64;
pub mod twin_x64;
pub mod validation;
pub mod winograd;

#[cfg(test)]
mod tests;

use std::ops::Range;

use weft_kernel::{
    Aliasing, ArithmeticContract, Contract, FmaUse, Geometry, KernelArgs, NanRule, ReductionOrder,
    Refusal,
};

pub use pack::PackedFilter;

/// The direct family's name.
pub const DIRECT: &str = "conv.direct";

/// The depthwise family's name.
pub const DEPTHWISE: &str = "conv.depthwise";

/// The name of the argument struct in contracts.
pub const ARGS_NAME: &str = "ConvArgs";

/// Largest element count of any operand (x, the filter, y): every byte
/// offset a body computes fits an `i64` with room to spare.
pub const MAX_ELEMENTS: u64 = 1 << 31;

/// Output channels per panel of a packed filter.
pub const PANEL: usize = 16;

/// The fused epilogue (crate docs give its exact definition).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u64)]
pub enum Activation {
    /// `y = acc`.
    None = 0,
    /// `y = 0 > acc ? +0 : acc`.
    Relu = 1,
    /// ReLU, then `6 < y ? 6 : y`.
    Relu6 = 2,
    /// `acc / (1 + exp(−acc))` by the family's own f32 steps ([`silu`]).
    Silu = 3,
}

impl Activation {
    /// Every activation, in code order.
    pub const ALL: [Activation; 4] = [
        Activation::None,
        Activation::Relu,
        Activation::Relu6,
        Activation::Silu,
    ];

    /// From its code (`0` … `3`).
    pub fn from_code(code: u64) -> Option<Activation> {
        Self::ALL.into_iter().find(|a| *a as u64 == code)
    }

    /// The epilogue on one accumulator, exactly as every body applies it.
    pub fn apply(self, acc: f32) -> f32 {
        match self {
            Activation::None => return acc,
            Activation::Silu => return silu::silu(acc),
            Activation::Relu | Activation::Relu6 => {}
        }
        let r = if 0.0 > acc { 0.0 } else { acc };
        if self == Activation::Relu6 && 6.0 < r {
            6.0
        } else {
            r
        }
    }
}

/// Why a geometry cannot be a convolution. Each `Display` starts with the
/// error's name ([`ConvError::name`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConvError {
    /// An extent that must be at least one is zero.
    #[error("zero-extent: {name} is 0")]
    ZeroExtent {
        /// Which extent.
        name: &'static str,
    },
    /// The kernel, dilated, does not fit the padded input: no output.
    #[error("empty-output: a {kernel}-tap dilated kernel does not fit {padded} padded {axis}")]
    EmptyOutput {
        /// `rows` or `columns`.
        axis: &'static str,
        /// `dil · (k − 1) + 1`.
        kernel: u64,
        /// `in + 2 · pad`.
        padded: u64,
    },
    /// `cin` or `cout` is not a multiple of `groups`.
    #[error("groups-indivisible: {name} = {channels} is not a multiple of {groups} groups")]
    GroupsIndivisible {
        /// `cin` or `cout`.
        name: &'static str,
        /// Its value.
        channels: u64,
        /// The groups.
        groups: u64,
    },
    /// An operand or an intermediate product is too large.
    #[error("too-large: {what} exceeds {MAX_ELEMENTS} elements or overflows")]
    TooLarge {
        /// What overflowed.
        what: &'static str,
    },
    /// A site's geometry has a dimension this family does not know, or
    /// lacks one.
    #[error("bad-geometry: {reason}")]
    BadGeometry {
        /// Why.
        reason: String,
    },
}

impl ConvError {
    /// The error's stable name (the prefix of its `Display`).
    pub fn name(&self) -> &'static str {
        match self {
            ConvError::ZeroExtent { .. } => "zero-extent",
            ConvError::EmptyOutput { .. } => "empty-output",
            ConvError::GroupsIndivisible { .. } => "groups-indivisible",
            ConvError::TooLarge { .. } => "too-large",
            ConvError::BadGeometry { .. } => "bad-geometry",
        }
    }
}

impl From<ConvError> for Refusal {
    fn from(e: ConvError) -> Refusal {
        Refusal::UnsupportedGeometry {
            reason: e.to_string(),
        }
    }
}

/// A convolution's shape and epilogue (crate docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvGeometry {
    /// Images.
    pub batch: u64,
    /// Input rows.
    pub in_h: u64,
    /// Input columns.
    pub in_w: u64,
    /// Input channels.
    pub cin: u64,
    /// Output channels.
    pub cout: u64,
    /// Kernel rows.
    pub k_h: u64,
    /// Kernel columns.
    pub k_w: u64,
    /// Stride, both axes.
    pub stride: u64,
    /// Zero padding on each side, both axes.
    pub pad: u64,
    /// Dilation, both axes.
    pub dil: u64,
    /// Groups (`cin` for depthwise).
    pub groups: u64,
    /// The fused epilogue.
    pub act: Activation,
}

/// What [`ConvGeometry::check`] derives: output extents and the interior
/// columns (those whose every tap column is inside the input).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Output rows.
    pub out_h: u64,
    /// Output columns.
    pub out_w: u64,
    /// First interior output column (`⌈pad / stride⌉`, at most `out_w`).
    pub ow_lo: u64,
    /// One past the last interior column (at least `ow_lo`).
    pub ow_hi: u64,
    /// Panels of [`PANEL`] output channels of the packed filter: for
    /// depthwise `⌈cout / 16⌉`; otherwise `groups · group_panels` (a
    /// panel never mixes groups; [`pack::DIRECT_LAYOUT`]).
    pub panels: u64,
    /// Panels of one group (`⌈(cout / groups) / 16⌉`; for depthwise,
    /// where the layout does not split groups, `panels`).
    pub group_panels: u64,
}

impl ConvGeometry {
    /// A square convolution: `batch` images of `size × size × cin`, `cout`
    /// outputs, a `k × k` kernel, `stride`, `pad`, dilation 1, one group,
    /// no epilogue.
    pub fn square(
        batch: u64,
        size: u64,
        cin: u64,
        cout: u64,
        k: u64,
        stride: u64,
        pad: u64,
    ) -> ConvGeometry {
        ConvGeometry {
            batch,
            in_h: size,
            in_w: size,
            cin,
            cout,
            k_h: k,
            k_w: k,
            stride,
            pad,
            dil: 1,
            groups: 1,
            act: Activation::None,
        }
    }

    /// The depthwise convolution of `c` channels (`groups = cin = cout`).
    pub fn depthwise(self, c: u64) -> ConvGeometry {
        ConvGeometry {
            cin: c,
            cout: c,
            groups: c,
            ..self
        }
    }

    /// The same geometry with another epilogue.
    pub fn with_act(self, act: Activation) -> ConvGeometry {
        ConvGeometry { act, ..self }
    }

    /// Whether this is depthwise (`groups = cin = cout`).
    pub fn is_depthwise(&self) -> bool {
        self.groups == self.cin && self.cin == self.cout
    }

    /// The output shape, or why there is none. Never panics.
    pub fn check(&self) -> Result<Shape, ConvError> {
        for (name, v) in [
            ("batch", self.batch),
            ("in_h", self.in_h),
            ("in_w", self.in_w),
            ("cin", self.cin),
            ("cout", self.cout),
            ("k_h", self.k_h),
            ("k_w", self.k_w),
            ("stride", self.stride),
            ("dil", self.dil),
            ("groups", self.groups),
        ] {
            if v == 0 {
                return Err(ConvError::ZeroExtent { name });
            }
        }
        for (name, channels) in [("cin", self.cin), ("cout", self.cout)] {
            if !channels.is_multiple_of(self.groups) {
                return Err(ConvError::GroupsIndivisible {
                    name,
                    channels,
                    groups: self.groups,
                });
            }
        }
        let big = |what| ConvError::TooLarge { what };
        let mul = |a: u64, b: u64, what| {
            a.checked_mul(b)
                .filter(|v| *v <= MAX_ELEMENTS)
                .ok_or(big(what))
        };
        let out = |axis, size: u64, k: u64| -> Result<u64, ConvError> {
            let kernel = self
                .dil
                .checked_mul(k - 1)
                .and_then(|v| v.checked_add(1))
                .filter(|v| *v <= MAX_ELEMENTS)
                .ok_or(big("the dilated kernel"))?;
            let padded = self
                .pad
                .checked_mul(2)
                .and_then(|v| v.checked_add(size))
                .filter(|v| *v <= MAX_ELEMENTS)
                .ok_or(big("the padded input"))?;
            if padded < kernel {
                return Err(ConvError::EmptyOutput {
                    axis,
                    kernel,
                    padded,
                });
            }
            Ok((padded - kernel) / self.stride + 1)
        };
        let out_h = out("rows", self.in_h, self.k_h)?;
        let out_w = out("columns", self.in_w, self.k_w)?;
        let x = mul(self.batch, self.in_h, "x")?;
        let x = mul(x, self.in_w, "x")?;
        mul(x, self.cin, "x")?;
        let y = mul(self.batch, out_h, "y")?;
        let y = mul(y, out_w, "y")?;
        mul(y, self.cout, "y")?;
        let (panels, group_panels) = if self.is_depthwise() {
            let p = self.cout.div_ceil(PANEL as u64);
            (p, p)
        } else {
            let per = (self.cout / self.groups).div_ceil(PANEL as u64);
            (self.groups * per, per)
        };
        let taps = mul(self.k_h, self.k_w, "the filter")?;
        let w = mul(taps, self.cin / self.groups, "the filter")?;
        mul(w, panels * PANEL as u64, "the packed filter")?;
        mul(taps, panels * PANEL as u64, "the packed filter")?;
        let ow_lo = self.pad.div_ceil(self.stride).min(out_w);
        // Column ow is interior when ow·s − pad + (k_w − 1)·dil ≤ in_w − 1.
        let reach = self.dil * (self.k_w - 1);
        let ow_hi = if self.in_w - 1 + self.pad >= reach {
            ((self.in_w - 1 + self.pad - reach) / self.stride + 1).min(out_w)
        } else {
            0
        };
        Ok(Shape {
            out_h,
            out_w,
            ow_lo,
            ow_hi: ow_hi.max(ow_lo),
            panels,
            group_panels,
        })
    }

    /// As a site's geometry.
    pub fn to_geometry(&self) -> Geometry {
        Geometry::new()
            .with("batch", self.batch)
            .with("in_h", self.in_h)
            .with("in_w", self.in_w)
            .with("cin", self.cin)
            .with("cout", self.cout)
            .with("k_h", self.k_h)
            .with("k_w", self.k_w)
            .with("stride", self.stride)
            .with("pad", self.pad)
            .with("dil", self.dil)
            .with("groups", self.groups)
            .with("act", self.act as u64)
    }

    /// From a site's geometry, checked.
    pub fn from_geometry(g: &Geometry) -> Result<(ConvGeometry, Shape), ConvError> {
        let get = |name: &'static str| {
            g.get(name).ok_or_else(|| ConvError::BadGeometry {
                reason: format!("no dimension `{name}`"),
            })
        };
        let act = get("act")?;
        let c = ConvGeometry {
            batch: get("batch")?,
            in_h: get("in_h")?,
            in_w: get("in_w")?,
            cin: get("cin")?,
            cout: get("cout")?,
            k_h: get("k_h")?,
            k_w: get("k_w")?,
            stride: get("stride")?,
            pad: get("pad")?,
            dil: get("dil")?,
            groups: get("groups")?,
            act: Activation::from_code(act).ok_or_else(|| ConvError::BadGeometry {
                reason: format!("act = {act}: 0 (none), 1 (relu), 2 (relu6) or 3 (silu)"),
            })?,
        };
        let shape = c.check()?;
        Ok((c, shape))
    }

    /// Elements of x.
    pub fn x_len(&self) -> usize {
        (self.batch * self.in_h * self.in_w * self.cin) as usize
    }

    /// Elements of y (of a checked geometry's `shape`).
    pub fn y_len(&self, shape: &Shape) -> usize {
        (self.batch * shape.out_h * shape.out_w * self.cout) as usize
    }

    /// Elements of the OHWI filter.
    pub fn w_len(&self) -> usize {
        (self.cout * self.k_h * self.k_w * (self.cin / self.groups)) as usize
    }

    /// Multiply-adds of one whole call (taps inside the input or not).
    pub fn macs(&self, shape: &Shape) -> u64 {
        self.y_len(shape) as u64 * self.k_h * self.k_w * (self.cin / self.groups)
    }
}

/// The family a geometry belongs to: depthwise when `groups = cin = cout`
/// (`cin > 1`), direct otherwise.
pub fn family_of(g: &ConvGeometry) -> &'static str {
    if g.is_depthwise() && g.cin > 1 {
        DEPTHWISE
    } else {
        DIRECT
    }
}

/// A site for `g`: the filter `w` (OHWI, `g.w_len()` elements) and the
/// optional `bias` (`cout`) given at plan time, so the arm may pack them.
pub fn site(
    g: &ConvGeometry,
    w: &[f32],
    bias: Option<&[f32]>,
) -> Result<weft_kernel::Site, ConvError> {
    g.check()?;
    let to_bytes = |v: &[f32]| -> std::sync::Arc<[u8]> {
        v.iter()
            .flat_map(|e| e.to_le_bytes())
            .collect::<Vec<u8>>()
            .into()
    };
    let mut s = weft_kernel::Site::new(weft_kernel::Family(family_of(g)), g.to_geometry())
        .with_operand("w", to_bytes(w));
    if let Some(b) = bias {
        s = s.with_operand("bias", to_bytes(b));
    }
    Ok(s)
}

/// The contract every arm of `family` offers at `g` (crate docs).
pub fn contract(family: &str, g: &Geometry) -> Contract {
    Contract {
        family: family.to_owned(),
        geometry: g.clone(),
        args: ARGS_NAME.to_owned(),
        arithmetic: ArithmeticContract {
            accumulator_lanes: 1,
            reduction: ReductionOrder::Sequential,
            fma: FmaUse::AsSpecified,
            nan: NanRule::ByClass,
            notes: "acc = bias (or +0); for kh, kw, ci in order, taps outside the input \
                    skipped: acc = fma(x, w, acc); y = act(acc)"
                .to_owned(),
        },
        aliasing: Aliasing::disjoint(),
    }
}

/// The arguments of every body of both families (`extern "C" fn(*const
/// ConvArgs)`). Build them with [`ConvArgs::new`], which checks every
/// extent against the buffers and derives the shape.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ConvArgs {
    /// x, NHWC.
    pub x: *const f32,
    /// The packed filter: bias lines, then the weights ([`pack`]).
    pub filt: *const f32,
    /// y, NHWC.
    pub y: *mut f32,
    /// Images.
    pub batch: u64,
    /// Input rows.
    pub in_h: u64,
    /// Input columns.
    pub in_w: u64,
    /// Input channels.
    pub cin: u64,
    /// Output channels.
    pub cout: u64,
    /// Kernel rows.
    pub k_h: u64,
    /// Kernel columns.
    pub k_w: u64,
    /// Stride.
    pub stride: u64,
    /// Padding.
    pub pad: u64,
    /// Dilation.
    pub dil: u64,
    /// Output rows per image.
    pub out_h: u64,
    /// Output columns.
    pub out_w: u64,
    /// First interior output column.
    pub ow_lo: u64,
    /// One past the last interior output column.
    pub ow_hi: u64,
    /// Panels of 16 output channels.
    pub panels: u64,
    /// The epilogue, [`Activation`] as a word.
    pub act: u64,
    /// First flattened output row (`b · out_h + oh`) computed.
    pub row_start: u64,
    /// One past the last.
    pub row_end: u64,
    /// `row_start / out_h`: the image of the first row (kept with
    /// `row_start` by the constructors and `restrict`, so a body need not
    /// divide).
    pub img_start: u64,
    /// `row_start % out_h`.
    pub oh_start: u64,
    /// Groups (`cin` for depthwise).
    pub groups: u64,
    /// Input channels of a group (`cin / groups`): the direct bodies'
    /// reduction length.
    pub cin_g: u64,
    /// Output channels of a group (`cout / groups`): the direct bodies'
    /// lane mask counts from it.
    pub cout_g: u64,
    /// Panels of one group ([`Shape::group_panels`]).
    pub group_panels: u64,
}

/// Byte offsets of the fields of [`ConvArgs`] (the emitters' view).
pub mod offsets {
    /// `x`.
    pub const X: i32 = 0;
    /// `filt`.
    pub const FILT: i32 = 8;
    /// `y`.
    pub const Y: i32 = 16;
    /// `batch`.
    pub const BATCH: i32 = 24;
    /// `in_h`.
    pub const IN_H: i32 = 32;
    /// `in_w`.
    pub const IN_W: i32 = 40;
    /// `cin`.
    pub const CIN: i32 = 48;
    /// `cout`.
    pub const COUT: i32 = 56;
    /// `k_h`.
    pub const K_H: i32 = 64;
    /// `k_w`.
    pub const K_W: i32 = 72;
    /// `stride`.
    pub const STRIDE: i32 = 80;
    /// `pad`.
    pub const PAD: i32 = 88;
    /// `dil`.
    pub const DIL: i32 = 96;
    /// `out_h`.
    pub const OUT_H: i32 = 104;
    /// `out_w`.
    pub const OUT_W: i32 = 112;
    /// `ow_lo`.
    pub const OW_LO: i32 = 120;
    /// `ow_hi`.
    pub const OW_HI: i32 = 128;
    /// `panels`.
    pub const PANELS: i32 = 136;
    /// `act`.
    pub const ACT: i32 = 144;
    /// `row_start`.
    pub const ROW_START: i32 = 152;
    /// `row_end`.
    pub const ROW_END: i32 = 160;
    /// `img_start`.
    pub const IMG_START: i32 = 168;
    /// `oh_start`.
    pub const OH_START: i32 = 176;
    /// `groups`.
    pub const GROUPS: i32 = 184;
    /// `cin_g`.
    pub const CIN_G: i32 = 192;
    /// `cout_g`.
    pub const COUT_G: i32 = 200;
    /// `group_panels`.
    pub const GROUP_PANELS: i32 = 208;
}

// SAFETY: `ConvArgs` is the `#[repr(C)]` struct of every contract naming
// ARGS_NAME. A body reads x and the filter (never written) and writes y
// only in the flattened rows `row_start..row_end`; `restrict` narrows that
// range, so restricted copies of one value write disjoint rows and read
// nothing another writes.
unsafe impl KernelArgs for ConvArgs {
    const NAME: &'static str = ARGS_NAME;

    fn range(&self) -> Range<u64> {
        self.row_start..self.row_end
    }

    fn restrict(&self, range: Range<u64>) -> Self {
        let out_h = self.out_h.max(1);
        ConvArgs {
            row_start: range.start,
            row_end: range.end,
            img_start: range.start / out_h,
            oh_start: range.start % out_h,
            ..*self
        }
    }
}

// SAFETY: plain data whose pointers are only dereferenced by a body called
// through `Kernel::call`, whose caller keeps them valid.
unsafe impl Send for ConvArgs {}
// SAFETY: as for `Send`; a shared `&ConvArgs` only lets threads copy it.
unsafe impl Sync for ConvArgs {}

fn bad(operand: &str, reason: String) -> Refusal {
    Refusal::BadOperand {
        operand: operand.to_owned(),
        reason,
    }
}

/// `offer` is one of `family`'s, with [`ConvArgs`], and (given a
/// `layout`) its filter `w` is packed in that layout: what every body of
/// this crate checks before emitting, refused by `name` otherwise
/// (`unsupported-geometry`, `unknown-layout`).
pub(crate) fn check_offer(
    name: &str,
    offer: &weft_kernel::Offer,
    family: &str,
    layout: Option<&str>,
) -> Result<(), Refusal> {
    if offer.contract.family != family || offer.contract.args != ARGS_NAME {
        return Err(Refusal::UnsupportedGeometry {
            reason: format!(
                "{name} serves {family} with {ARGS_NAME}, not {} with {}",
                offer.contract.family, offer.contract.args
            ),
        });
    }
    match layout {
        Some(l) if !offer.packed.iter().any(|p| p.name == "w" && p.layout == l) => {
            Err(Refusal::UnknownLayout {
                layout: format!("{name}: the offer's filter is not {l}"),
            })
        }
        _ => Ok(()),
    }
}

impl ConvArgs {
    /// Arguments computing all of y for `g`, each extent checked: x must
    /// hold `g.x_len()` elements, y `g.y_len()`, and `filter` must be
    /// packed for `g`'s family and filter shape. Refused by name
    /// (`bad-operand`, `unsupported-geometry`) otherwise.
    pub fn new(
        g: &ConvGeometry,
        x: &[f32],
        filter: &PackedFilter,
        y: &mut [f32],
    ) -> Result<ConvArgs, Refusal> {
        let shape = g.check()?;
        Self::rows(g, x, filter, y, 0..(g.batch * shape.out_h))
    }

    /// As [`ConvArgs::new`], computing only the flattened output rows
    /// `rows` (a member view's range; it must lie inside
    /// `0..batch · out_h`).
    pub fn rows(
        g: &ConvGeometry,
        x: &[f32],
        filter: &PackedFilter,
        y: &mut [f32],
        rows: Range<u64>,
    ) -> Result<ConvArgs, Refusal> {
        let s = g.check()?;
        if x.len() < g.x_len() {
            return Err(bad(
                "x",
                format!("{} elements, the geometry needs {}", x.len(), g.x_len()),
            ));
        }
        filter.fits(g)?;
        Self::check_y(g, &s, y, &rows)?;
        Ok(ConvArgs::from_parts(
            g,
            &s,
            (x.as_ptr(), filter.as_ptr(), y.as_mut_ptr()),
            rows,
        ))
    }

    /// `y` holds all of `g`'s output (shape `s`) and `rows` lies inside
    /// its flattened rows: `bad-operand` otherwise.
    pub(crate) fn check_y(
        g: &ConvGeometry,
        s: &Shape,
        y: &[f32],
        rows: &Range<u64>,
    ) -> Result<(), Refusal> {
        if y.len() < g.y_len(s) {
            return Err(bad(
                "y",
                format!("{} elements, the geometry needs {}", y.len(), g.y_len(s)),
            ));
        }
        if rows.start > rows.end || rows.end > g.batch * s.out_h {
            return Err(bad(
                "y",
                format!("rows {rows:?} outside 0..{}", g.batch * s.out_h),
            ));
        }
        Ok(())
    }

    /// The fields of `g` (checked, with shape `s`) over `rows`, with the
    /// pointers `(x, filt, y)` as given: the constructors' common tail.
    pub(crate) fn from_parts(
        g: &ConvGeometry,
        s: &Shape,
        (x, filt, y): (*const f32, *const f32, *mut f32),
        rows: Range<u64>,
    ) -> ConvArgs {
        ConvArgs {
            x,
            filt,
            y,
            batch: g.batch,
            in_h: g.in_h,
            in_w: g.in_w,
            cin: g.cin,
            cout: g.cout,
            k_h: g.k_h,
            k_w: g.k_w,
            stride: g.stride,
            pad: g.pad,
            dil: g.dil,
            out_h: s.out_h,
            out_w: s.out_w,
            ow_lo: s.ow_lo,
            ow_hi: s.ow_hi,
            panels: s.panels,
            act: g.act as u64,
            row_start: rows.start,
            row_end: rows.end,
            img_start: rows.start / s.out_h,
            oh_start: rows.start % s.out_h,
            groups: g.groups,
            cin_g: g.cin / g.groups,
            cout_g: g.cout / g.groups,
            group_panels: s.group_panels,
        }
    }
}

/// The two families as a planner registers them: `conv.direct` (the
/// direct arm, shipped, then the Winograd arm, [`winograd`], then the
/// grouped arm, [`grouped`]) and
/// `conv.depthwise` (one arm), each arm with its twins (the planner keeps
/// those the host runs; on other ISAs the arm alone), its check and its
/// micro-race bench.
pub fn entries() -> Vec<weft_kernel::FamilyEntry> {
    arm::ArmKind::ALL.into_iter().map(entry).collect()
}

/// One family's registration (see [`entries`]).
pub fn entry(kind: arm::ArmKind) -> weft_kernel::FamilyEntry {
    use std::sync::Arc;
    use weft_kernel::ArmEntry;
    use weft_validate::Checker;
    let mut arms = vec![ArmEntry::new(
        Arc::new(arm::ConvArm(kind)),
        twin_x64::twins(kind)
            .into_iter()
            .chain(twin_a64::twins(kind))
            .collect(),
        Arc::new(Checker(validation::ConvValidation(kind))),
        Some(Arc::new(validation::ConvBench(kind))),
    )];
    if kind == arm::ArmKind::Direct {
        arms.push(winograd::arm_entry());
        arms.push(grouped::arm_entry());
    }
    weft_kernel::FamilyEntry {
        family: weft_kernel::Family(kind.family()),
        arms,
    }
}
