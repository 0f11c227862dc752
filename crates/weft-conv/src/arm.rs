//! The arms: CLIF built here, compiled by Cranelift through weft-managed
//! for either ISA. They are the references their twins are validated
//! against, and both round as the contract says.
//!
//! The direct arm, for each panel of 16 output channels (four f32x4) —
//! panel `p = g · group_panels + q` of group `g` (pack's layout), its x
//! channels `g · cin_g ..` and y channels `g · cout_g + 16q ..`, walked
//! with `p` (a step, no division):
//!
//! ```text
//! for p in 0..panels                                   // (g, q) walked
//!   for row in row_start..row_end                     // (b, oh)
//!     for ow in 0..ow_lo:            pixel(1, checked) // left border
//!     for ow in ow_lo.. step 2 while ow + 2 ≤ ow_hi:   pixel(2, unchecked)
//!     for ow in ..out_w:             pixel(1, checked) // the rest
//! pixel(n): acc = bias; for kh (row inside?) for kw (column inside, if
//!           checked) for ci in 0..cin_g: acc[r] = fma(splat(x[r, g·cin_g
//!           + ci]), w[ci], acc[r]); epilogue; store the panel's channels
//!           below cout_g within the group
//! ```
//!
//! The depthwise arm, per output pixel: the whole panels of 16 channels
//! (four f32x4 lanes of x against the tap's line), then the channels past
//! the last whole panel one at a time (x's lanes past `cout` belong to the
//! next pixel, so they are never loaded as a vector).

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, Endianness, Function, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use weft_kernel::{Family, Host, Isa, LoopTrip, MemberViews, NativeCode, Offer, Refusal, Site};
use weft_managed::arm_build::build_native;
use weft_managed::Target;

use crate::pack::PackedFilter;
use crate::{bad, contract, offsets, ConvGeometry, Shape, DEPTHWISE, DIRECT, PANEL};

/// The arms, one per family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArmKind {
    /// `conv.direct`: every `groups` but depthwise's (grouped and
    /// channel-multiplier convolutions included), tiles of pixels × a
    /// 16-channel panel of one group.
    Direct,
    /// `conv.depthwise`: `groups = cin = cout`, vector over channels.
    Depthwise,
}

/// Output pixels in the direct arm's interior tile.
pub const ARM_PIXELS: u64 = 2;

impl ArmKind {
    /// Both arms, in registration order.
    pub const ALL: [ArmKind; 2] = [ArmKind::Direct, ArmKind::Depthwise];

    /// The arm's candidate name.
    pub fn name(self) -> &'static str {
        match self {
            ArmKind::Direct => "conv.direct.arm",
            ArmKind::Depthwise => "conv.depthwise.arm",
        }
    }

    /// The family it serves.
    pub fn family(self) -> &'static str {
        match self {
            ArmKind::Direct => DIRECT,
            ArmKind::Depthwise => DEPTHWISE,
        }
    }

    /// Whether the arm computes `g` (`unsupported-geometry` if not).
    pub fn serves(self, g: &ConvGeometry) -> Result<(), Refusal> {
        let ok = match self {
            ArmKind::Direct => crate::family_of(g) == DIRECT,
            ArmKind::Depthwise => g.is_depthwise(),
        };
        if ok {
            Ok(())
        } else {
            Err(Refusal::UnsupportedGeometry {
                reason: format!(
                    "{} serves {}, not groups = {} with cin = {}, cout = {}",
                    self.name(),
                    match self {
                        ArmKind::Direct => "every groups but groups = cin = cout (cin > 1)",
                        ArmKind::Depthwise => "groups = cin = cout",
                    },
                    g.groups,
                    g.cin,
                    g.cout
                ),
            })
        }
    }
}

/// The arm `ArmKind` as a [`weft_kernel::Arm`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvArm(pub ArmKind);

pub(crate) fn flags() -> MemFlagsData {
    let mut f = MemFlagsData::new().with_endianness(Endianness::Little);
    f.set_notrap();
    f
}

pub(crate) fn le() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

/// The member views of a site: the flattened output rows, one at a time.
pub fn views(g: &ConvGeometry, s: &Shape) -> MemberViews {
    MemberViews {
        axis: "rows".to_owned(),
        extent: g.batch * s.out_h,
        granule: 1,
    }
}

fn trip(name: &str, trips: u64, depth: u32) -> LoopTrip {
    LoopTrip {
        name: name.to_owned(),
        trips,
        depth,
    }
}

/// The three loops over a pixel's taps and input channels at `depth`.
fn tap_nest(out: &mut Vec<LoopTrip>, g: &ConvGeometry, depth: u32, channels: bool) {
    out.push(trip("kh", g.k_h, depth));
    out.push(trip("kw", g.k_w, depth + 1));
    if channels {
        out.push(trip("ci", g.cin / g.groups, depth + 2));
    }
}

/// The loop nest of the arm at `g` for a call over every row, in the
/// order weft-cost finds loops in its bytes (module docs' pseudocode).
pub fn nest(kind: ArmKind, g: &ConvGeometry, s: &Shape) -> Vec<LoopTrip> {
    let rows = g.batch * s.out_h;
    let mut out = Vec::new();
    match kind {
        ArmKind::Direct => {
            out.push(trip("panels", s.panels, 0));
            out.push(trip("rows", rows, 1));
            let tiles = (s.ow_hi - s.ow_lo) / ARM_PIXELS;
            for (name, trips) in [
                ("left", s.ow_lo),
                ("tiles", tiles),
                ("rest", s.out_w - s.ow_lo - tiles * ARM_PIXELS),
            ] {
                out.push(trip(name, trips, 2));
                tap_nest(&mut out, g, 3, true);
            }
        }
        ArmKind::Depthwise => {
            out.push(trip("rows", rows, 0));
            out.push(trip("columns", s.out_w, 1));
            out.push(trip("panels", g.cout / PANEL as u64, 2));
            tap_nest(&mut out, g, 3, false);
            out.push(trip("channels", g.cout % PANEL as u64, 2));
            tap_nest(&mut out, g, 3, false);
        }
    }
    out
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}

/// The offer of `kind` at `site`, or why it cannot serve it: the filter
/// (and bias) packed, the rows as member views, the nest.
pub fn offer(kind: ArmKind, site: &Site) -> Result<Offer, Refusal> {
    if site.family.name() != kind.family() {
        return Err(Refusal::UnsupportedGeometry {
            reason: format!("family {} is not {}", site.family, kind.family()),
        });
    }
    let (g, s) = ConvGeometry::from_geometry(&site.geometry)?;
    kind.serves(&g)?;
    let w = site
        .operand("w")
        .ok_or_else(|| bad("w", "packing needs the filter at plan time".to_owned()))?;
    let bias = site.operand("bias").map(|b| f32s(&b.bytes));
    let packed = PackedFilter::pack(kind, &g, &f32s(&w.bytes), bias.as_deref())?;
    let operand = packed.operand();
    let bytes = 4 * (g.x_len() + g.y_len(&s)) as u64 + operand.bytes.len() as u64;
    Ok(Offer {
        contract: contract(kind.family(), &site.geometry),
        packed: vec![operand],
        views: Some(views(&g, &s)),
        loops: crate::silu::after(nest(kind, &g, &s), &g, &s, 4, false),
        flops: 2 * g.macs(&s),
        bytes_moved: bytes,
    })
}

// SAFETY: the body reads x (inside `batch × in_h × in_w × cin`, taps
// outside skipped), the packed filter (its lines), and writes y only in
// its rows `row_start..row_end` and channels below cout (module docs);
// it returns. Validation checks it against the reference.
unsafe impl weft_kernel::Arm for ConvArm {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn family(&self) -> Family {
        Family(self.0.family())
    }

    fn offer(&self, site: &Site, _host: &Host) -> Result<Offer, Refusal> {
        offer(self.0, site)
    }

    fn build(&self, offer: &Offer, isa: Isa) -> Result<NativeCode, Refusal> {
        if offer.contract.family != self.0.family() {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!("offer is for {}", offer.contract.family),
            });
        }
        let kind = self.0;
        build_native(isa, |t| t.compile(build_function(t, kind)))
    }
}

/// The argument fields every body loads, and values derived from them.
pub(crate) struct Env {
    pub(crate) x: Value,
    pub(crate) filt: Value,
    pub(crate) y: Value,
    pub(crate) in_h: Value,
    pub(crate) in_w: Value,
    pub(crate) cout: Value,
    pub(crate) k_h: Value,
    pub(crate) k_w: Value,
    pub(crate) stride: Value,
    pub(crate) pad: Value,
    pub(crate) dil: Value,
    pub(crate) out_h: Value,
    pub(crate) out_w: Value,
    pub(crate) ow_lo: Value,
    pub(crate) ow_hi: Value,
    pub(crate) panels: Value,
    pub(crate) act: Value,
    pub(crate) row_start: Value,
    pub(crate) row_end: Value,
    pub(crate) img_start: Value,
    pub(crate) oh_start: Value,
    /// Input channels of a group (the direct reduction's length).
    pub(crate) cin_g: Value,
    /// Output channels of a group.
    pub(crate) cout_g: Value,
    /// Panels of a group.
    pub(crate) group_panels: Value,
    /// Bytes of one input pixel (`cin · 4`).
    pub(crate) pix_in: Value,
    /// Bytes of one input row (`in_w · cin · 4`).
    pub(crate) row_in: Value,
    /// Bytes of one output pixel (`cout · 4`).
    pub(crate) pix_out: Value,
    /// The weights after the bias lines.
    pub(crate) wb: Value,
}

/// The image and the row in it of the current flattened row: set from
/// `img_start`/`oh_start` before the row loop, stepped after each row.
pub(crate) struct RowWalk {
    img: Variable,
    oh: Variable,
}

impl RowWalk {
    pub(crate) fn start(b: &mut FunctionBuilder<'_>, e: &Env) -> RowWalk {
        let w = RowWalk {
            img: b.declare_var(types::I64),
            oh: b.declare_var(types::I64),
        };
        b.def_var(w.img, e.img_start);
        b.def_var(w.oh, e.oh_start);
        w
    }

    /// The next row: `oh + 1`, or the next image's row 0.
    pub(crate) fn step(&self, b: &mut FunctionBuilder<'_>, e: &Env) {
        let (img, oh) = (b.use_var(self.img), b.use_var(self.oh));
        let oh = b.ins().iadd_imm_s(oh, 1);
        let wrap = b.ins().icmp(IntCC::Equal, oh, e.out_h);
        let zero = b.ins().iconst(types::I64, 0);
        let oh = b.ins().select(wrap, zero, oh);
        let next = b.ins().iadd_imm_s(img, 1);
        let img = b.ins().select(wrap, next, img);
        b.def_var(self.oh, oh);
        b.def_var(self.img, img);
    }
}

/// Where one row's pixels read and write.
pub(crate) struct RowCtx {
    /// The image's first input element.
    pub(crate) xb: Value,
    /// `oh · stride − pad` (wrapping: a negative row is a huge unsigned).
    pub(crate) ih0: Value,
    /// y's first element of the row (plus the panel, for direct).
    pub(crate) yrow: Value,
}

/// A counted loop `var = start; while var < end { body; var += step }`,
/// the body emitted by `body` from its first block (leaving the builder in
/// an open block that continues to the increment).
pub(crate) fn counted(
    b: &mut FunctionBuilder<'_>,
    var: Variable,
    start: Value,
    end: impl Fn(&mut FunctionBuilder<'_>) -> Value,
    step: i64,
    body: impl FnOnce(&mut FunctionBuilder<'_>),
) {
    looped(
        b,
        var,
        start,
        |b, v| {
            let e = end(b);
            b.ins().icmp(IntCC::UnsignedLessThan, v, e)
        },
        step,
        body,
    )
}

/// `var = start; while more(var) { body; var += step }`.
pub(crate) fn looped(
    b: &mut FunctionBuilder<'_>,
    var: Variable,
    start: Value,
    more: impl Fn(&mut FunctionBuilder<'_>, Value) -> Value,
    step: i64,
    body: impl FnOnce(&mut FunctionBuilder<'_>),
) {
    let head = b.create_block();
    let body_blk = b.create_block();
    let done = b.create_block();
    b.def_var(var, start);
    b.ins().jump(head, &[]);
    b.switch_to_block(head);
    let v = b.use_var(var);
    let go = more(b, v);
    b.ins().brif(go, body_blk, &[], done, &[]);
    b.switch_to_block(body_blk);
    body(b);
    let v = b.use_var(var);
    let v = b.ins().iadd_imm_s(v, step);
    b.def_var(var, v);
    b.ins().jump(head, &[]);
    b.switch_to_block(done);
}

/// The loops over a pixel's taps: rows `kh` whose input row is inside,
/// columns `kw` whose input column is inside (checked only when
/// `checked`); `inner` gets the tap's input pixel address and its tap
/// index `kh · k_w + kw`, and emits from the tap's block.
pub(crate) fn taps(
    b: &mut FunctionBuilder<'_>,
    e: &Env,
    row: &RowCtx,
    iw0: Value,
    checked: bool,
    mut inner: impl FnMut(&mut FunctionBuilder<'_>, Value, Value),
) {
    let kh = b.declare_var(types::I64);
    let kw = b.declare_var(types::I64);
    let zero = b.ins().iconst(types::I64, 0);
    counted(
        b,
        kh,
        zero,
        |_| e.k_h,
        1,
        |b| {
            let inside = b.create_block();
            let next = b.create_block();
            let khv = b.use_var(kh);
            let dh = b.ins().imul(khv, e.dil);
            let ih = b.ins().iadd(row.ih0, dh);
            let ok = b.ins().icmp(IntCC::UnsignedLessThan, ih, e.in_h);
            b.ins().brif(ok, inside, &[], next, &[]);
            b.switch_to_block(inside);
            let off = b.ins().imul(ih, e.row_in);
            let xrow = b.ins().iadd(row.xb, off);
            let zero = b.ins().iconst(types::I64, 0);
            counted(
                b,
                kw,
                zero,
                |_| e.k_w,
                1,
                |b| {
                    let tap = b.create_block();
                    let skip = b.create_block();
                    let kwv = b.use_var(kw);
                    let dw = b.ins().imul(kwv, e.dil);
                    let iw = b.ins().iadd(iw0, dw);
                    if checked {
                        let ok = b.ins().icmp(IntCC::UnsignedLessThan, iw, e.in_w);
                        b.ins().brif(ok, tap, &[], skip, &[]);
                    } else {
                        b.ins().jump(tap, &[]);
                    }
                    b.switch_to_block(tap);
                    let off = b.ins().imul(iw, e.pix_in);
                    let px = b.ins().iadd(xrow, off);
                    let khv = b.use_var(kh);
                    let t = b.ins().imul(khv, e.k_w);
                    let kwv = b.use_var(kw);
                    let t = b.ins().iadd(t, kwv);
                    inner(b, px, t);
                    b.ins().jump(skip, &[]);
                    b.switch_to_block(skip);
                },
            );
            b.ins().jump(next, &[]);
            b.switch_to_block(next);
        },
    );
}

/// The epilogue on `vals` (f32x4 or f32), in place: nothing, ReLU, or
/// ReLU then the clamp at 6, as `act` says at run time.
pub(crate) fn epilogue(b: &mut FunctionBuilder<'_>, e: &Env, vals: &[Variable], vector: bool) {
    let relu = b.create_block();
    let six = b.create_block();
    let done = b.create_block();
    // ReLU for act 1 and 2; SiLU (3) is the pass after the tiles.
    let a1 = b.ins().iadd_imm_s(e.act, -1);
    let clamps = b.ins().icmp_imm_u(IntCC::UnsignedLessThan, a1, 2);
    b.ins().brif(clamps, relu, &[], done, &[]);
    let consts = |b: &mut FunctionBuilder<'_>, c: f32| {
        let s = b.ins().f32const(c);
        if vector {
            b.ins().splat(types::F32X4, s)
        } else {
            s
        }
    };
    // y = cmp ? k : y, lane-wise.
    let pick = |b: &mut FunctionBuilder<'_>, cc: FloatCC, k: Value, v: Variable| {
        let y = b.use_var(v);
        let m = b.ins().fcmp(cc, k, y);
        let out = if vector {
            let m = b.ins().bitcast(types::F32X4, le(), m);
            b.ins().bitselect(m, k, y)
        } else {
            b.ins().select(m, k, y)
        };
        b.def_var(v, out);
    };
    b.switch_to_block(relu);
    let zero = consts(b, 0.0);
    for v in vals {
        pick(b, FloatCC::GreaterThan, zero, *v);
    }
    let is6 = b
        .ins()
        .icmp_imm_u(IntCC::Equal, e.act, crate::Activation::Relu6 as i64);
    b.ins().brif(is6, six, &[], done, &[]);
    b.switch_to_block(six);
    let k6 = consts(b, 6.0);
    for v in vals {
        pick(b, FloatCC::LessThan, k6, *v);
    }
    b.ins().jump(done, &[]);
    b.switch_to_block(done);
}

/// A tile's accumulators, `npix` pixels × four f32x4, each starting at
/// the panel's bias line (`biasp`).
pub(crate) fn tile_accumulators(
    b: &mut FunctionBuilder<'_>,
    biasp: Value,
    npix: usize,
) -> Vec<Variable> {
    let f = flags();
    let accs: Vec<Variable> = (0..npix * 4).map(|_| b.declare_var(types::F32X4)).collect();
    for r in 0..npix {
        for v in 0..4 {
            let x = b.ins().load(types::F32X4, f, biasp, 16 * v as i32);
            b.def_var(accs[r * 4 + v], x);
        }
    }
    accs
}

/// A tile's epilogue and stores: the `npix` pixels from column `ow` of
/// `row`, the panel's first `lanes` channels (whole panels as vectors, a
/// ragged one lane by lane).
pub(crate) fn finish_tile(
    b: &mut FunctionBuilder<'_>,
    e: &Env,
    row: &RowCtx,
    accs: &[Variable],
    (ow, npix, lanes): (Value, usize, Value),
) {
    let f = flags();
    epilogue(b, e, accs, true);
    // Store: whole panels as vectors, a ragged one lane by lane.
    let whole = b.create_block();
    let ragged = b.create_block();
    let done = b.create_block();
    let full = b.ins().icmp_imm_u(IntCC::Equal, lanes, PANEL as i64);
    b.ins().brif(full, whole, &[], ragged, &[]);
    let pixel_ptr = |b: &mut FunctionBuilder<'_>, r: usize| {
        let o = b.ins().iadd_imm_s(ow, r as i64);
        let o = b.ins().imul(o, e.pix_out);
        b.ins().iadd(row.yrow, o)
    };
    b.switch_to_block(whole);
    for r in 0..npix {
        let p = pixel_ptr(b, r);
        for v in 0..4 {
            let a = b.use_var(accs[r * 4 + v]);
            b.ins().store(f, a, p, 16 * v as i32);
        }
    }
    b.ins().jump(done, &[]);
    b.switch_to_block(ragged);
    for r in 0..npix {
        let p = pixel_ptr(b, r);
        for l in 0..PANEL {
            let st = b.create_block();
            let next = b.create_block();
            let more = b
                .ins()
                .icmp_imm_u(IntCC::UnsignedGreaterThan, lanes, l as i64);
            b.ins().brif(more, st, &[], next, &[]);
            b.switch_to_block(st);
            let a = b.use_var(accs[r * 4 + l / 4]);
            let s = b.ins().extractlane(a, (l % 4) as u8);
            b.ins().store(f, s, p, 4 * l as i32);
            b.ins().jump(next, &[]);
            b.switch_to_block(next);
        }
    }
    b.ins().jump(done, &[]);
    b.switch_to_block(done);
}

/// One direct tile of `npix` pixels from column `ow` × the panel at
/// `wpanel` (bias at `biasp`, `lanes` channels to store).
#[allow(clippy::too_many_arguments)]
fn direct_pixels(
    b: &mut FunctionBuilder<'_>,
    e: &Env,
    row: &RowCtx,
    (wpanel, biasp, lanes): (Value, Value, Value),
    ow: Value,
    npix: usize,
    checked: bool,
) {
    let f = flags();
    let accs = tile_accumulators(b, biasp, npix);
    let s = b.ins().imul(ow, e.stride);
    let iw0 = b.ins().isub(s, e.pad);
    let pix_step = b.ins().imul(e.stride, e.pix_in);
    let ci = b.declare_var(types::I64);
    let px = b.declare_var(types::I64);
    let pw = b.declare_var(types::I64);
    taps(b, e, row, iw0, checked, |b, xp, t| {
        let tap_bytes = b.ins().ishl_imm_u(e.cin_g, 6);
        let off = b.ins().imul(t, tap_bytes);
        let wp = b.ins().iadd(wpanel, off);
        b.def_var(px, xp);
        b.def_var(pw, wp);
        let zero = b.ins().iconst(types::I64, 0);
        counted(
            b,
            ci,
            zero,
            |_| e.cin_g,
            1,
            |b| {
                let (pxv, pwv) = (b.use_var(px), b.use_var(pw));
                let wv: Vec<Value> = (0..4)
                    .map(|v| b.ins().load(types::F32X4, f, pwv, 16 * v))
                    .collect();
                let mut p = pxv;
                for r in 0..npix {
                    if r > 0 {
                        p = b.ins().iadd(p, pix_step);
                    }
                    let xs = b.ins().load(types::F32, f, p, 0);
                    let xs = b.ins().splat(types::F32X4, xs);
                    for (v, w) in wv.iter().enumerate() {
                        let acc = b.use_var(accs[r * 4 + v]);
                        let acc = b.ins().fma(xs, *w, acc);
                        b.def_var(accs[r * 4 + v], acc);
                    }
                }
                let pxv = b.ins().iadd_imm_s(pxv, 4);
                let pwv = b.ins().iadd_imm_s(pwv, 64);
                b.def_var(px, pxv);
                b.def_var(pw, pwv);
            },
        );
    });
    finish_tile(b, e, row, &accs, (ow, npix, lanes));
}

fn build_direct(b: &mut FunctionBuilder<'_>, e: &Env) {
    let p = b.declare_var(types::I64);
    let row = b.declare_var(types::I64);
    let ow = b.declare_var(types::I64);
    // The group walk: the panel within its group, and the group's first
    // x and y channel in bytes (stepped with p, no division).
    let q = b.declare_var(types::I64);
    let xg = b.declare_var(types::I64);
    let yg = b.declare_var(types::I64);
    let zero = b.ins().iconst(types::I64, 0);
    b.def_var(q, zero);
    b.def_var(xg, zero);
    b.def_var(yg, zero);
    let x_step = b.ins().ishl_imm_u(e.cin_g, 2);
    let y_step = b.ins().ishl_imm_u(e.cout_g, 2);
    counted(
        b,
        p,
        zero,
        |_| e.panels,
        1,
        |b| {
            let pv = b.use_var(p);
            let tap_bytes = b.ins().ishl_imm_u(e.cin_g, 6);
            let taps = b.ins().imul(e.k_h, e.k_w);
            let stride = b.ins().imul(taps, tap_bytes);
            let off = b.ins().imul(pv, stride);
            let wpanel = b.ins().iadd(e.wb, off);
            let off = b.ins().ishl_imm_u(pv, 6);
            let biasp = b.ins().iadd(e.filt, off);
            let qv = b.use_var(q);
            let first = b.ins().imul_imm_s(qv, PANEL as i64);
            let left = b.ins().isub(e.cout_g, first);
            let cap = b.ins().iconst(types::I64, PANEL as i64);
            let lanes = b.ins().umin(left, cap);
            let qoff = b.ins().ishl_imm_u(qv, 6);
            let ygv = b.use_var(yg);
            let yoff = b.ins().iadd(ygv, qoff);
            let xoff = b.use_var(xg);
            let panel = (wpanel, biasp, lanes);
            let walk = RowWalk::start(b, e);
            counted(
                b,
                row,
                e.row_start,
                |_| e.row_end,
                1,
                |b| {
                    let rv = b.use_var(row);
                    let mut ctx = row_ctx(b, e, rv, &walk, Some(yoff));
                    ctx.xb = b.ins().iadd(ctx.xb, xoff);
                    counted(
                        b,
                        ow,
                        zero,
                        |_| e.ow_lo,
                        1,
                        |b| {
                            let o = b.use_var(ow);
                            direct_pixels(b, e, &ctx, panel, o, 1, true);
                        },
                    );
                    // Interior tiles: while ow + ARM_PIXELS ≤ ow_hi.
                    let start = b.use_var(ow);
                    looped(
                        b,
                        ow,
                        start,
                        |b, v| {
                            let last = b.ins().iadd_imm_s(v, ARM_PIXELS as i64);
                            b.ins().icmp(IntCC::UnsignedLessThanOrEqual, last, e.ow_hi)
                        },
                        ARM_PIXELS as i64,
                        |b| {
                            let o = b.use_var(ow);
                            direct_pixels(b, e, &ctx, panel, o, ARM_PIXELS as usize, false);
                        },
                    );
                    let start = b.use_var(ow);
                    counted(
                        b,
                        ow,
                        start,
                        |_| e.out_w,
                        1,
                        |b| {
                            let o = b.use_var(ow);
                            direct_pixels(b, e, &ctx, panel, o, 1, true);
                        },
                    );
                    walk.step(b, e);
                },
            );
            // The next panel: q + 1, or the next group's first.
            let qv = b.use_var(q);
            let q1 = b.ins().iadd_imm_s(qv, 1);
            let wrap = b.ins().icmp(IntCC::Equal, q1, e.group_panels);
            let q1 = b.ins().select(wrap, zero, q1);
            b.def_var(q, q1);
            let xgv = b.use_var(xg);
            let xn = b.ins().iadd(xgv, x_step);
            let xn = b.ins().select(wrap, xn, xgv);
            b.def_var(xg, xn);
            let ygv = b.use_var(yg);
            let yn = b.ins().iadd(ygv, y_step);
            let yn = b.ins().select(wrap, yn, ygv);
            b.def_var(yg, yn);
        },
    );
}

/// A row's image, first input row and output address; `panel_off` (the
/// panel's byte offset within a pixel) is added to the output address.
/// The row's image and row in it come from the walk's variables (no
/// division: on arm64 Cranelift guards a `udiv` with a trap block).
pub(crate) fn row_ctx(
    b: &mut FunctionBuilder<'_>,
    e: &Env,
    rv: Value,
    walk: &RowWalk,
    panel_off: Option<Value>,
) -> RowCtx {
    let (img, oh) = (b.use_var(walk.img), b.use_var(walk.oh));
    let img_bytes = b.ins().imul(e.in_h, e.row_in);
    let off = b.ins().imul(img, img_bytes);
    let xb = b.ins().iadd(e.x, off);
    let s = b.ins().imul(oh, e.stride);
    let ih0 = b.ins().isub(s, e.pad);
    let row_bytes = b.ins().imul(e.out_w, e.pix_out);
    let off = b.ins().imul(rv, row_bytes);
    let mut yrow = b.ins().iadd(e.y, off);
    if let Some(p) = panel_off {
        yrow = b.ins().iadd(yrow, p);
    }
    RowCtx { xb, ih0, yrow }
}

fn build_depthwise(b: &mut FunctionBuilder<'_>, e: &Env) {
    let f = flags();
    let row = b.declare_var(types::I64);
    let ow = b.declare_var(types::I64);
    let p = b.declare_var(types::I64);
    let c = b.declare_var(types::I64);
    let taps_per_panel = b.ins().imul(e.k_h, e.k_w);
    let whole = b.ins().ushr_imm_u(e.cout, 4);
    let walk = RowWalk::start(b, e);
    counted(
        b,
        row,
        e.row_start,
        |_| e.row_end,
        1,
        |b| {
            let rv = b.use_var(row);
            let ctx = row_ctx(b, e, rv, &walk, None);
            let zero = b.ins().iconst(types::I64, 0);
            counted(
                b,
                ow,
                zero,
                |_| e.out_w,
                1,
                |b| {
                    let o = b.use_var(ow);
                    let s = b.ins().imul(o, e.stride);
                    let iw0 = b.ins().isub(s, e.pad);
                    let yo = b.ins().imul(o, e.pix_out);
                    let ypix = b.ins().iadd(ctx.yrow, yo);
                    let zero = b.ins().iconst(types::I64, 0);
                    counted(
                        b,
                        p,
                        zero,
                        |_| whole,
                        1,
                        |b| {
                            let pv = b.use_var(p);
                            let poff = b.ins().ishl_imm_u(pv, 6);
                            let biasp = b.ins().iadd(e.filt, poff);
                            let accs: Vec<Variable> =
                                (0..4).map(|_| b.declare_var(types::F32X4)).collect();
                            for (v, acc) in accs.iter().enumerate() {
                                let x = b.ins().load(types::F32X4, f, biasp, 16 * v as i32);
                                b.def_var(*acc, x);
                            }
                            let first = b.ins().imul(pv, taps_per_panel);
                            taps(b, e, &ctx, iw0, true, |b, xp, t| {
                                let xp = b.ins().iadd(xp, poff);
                                let line = b.ins().iadd(first, t);
                                let off = b.ins().ishl_imm_u(line, 6);
                                let wp = b.ins().iadd(e.wb, off);
                                for (v, acc) in accs.iter().enumerate() {
                                    let xv = b.ins().load(types::F32X4, f, xp, 16 * v as i32);
                                    let wv = b.ins().load(types::F32X4, f, wp, 16 * v as i32);
                                    let a = b.use_var(*acc);
                                    let a = b.ins().fma(xv, wv, a);
                                    b.def_var(*acc, a);
                                }
                            });
                            epilogue(b, e, &accs, true);
                            let yp = b.ins().iadd(ypix, poff);
                            for (v, acc) in accs.iter().enumerate() {
                                let a = b.use_var(*acc);
                                b.ins().store(f, a, yp, 16 * v as i32);
                            }
                        },
                    );
                    let start = b.ins().ishl_imm_u(whole, 4);
                    counted(
                        b,
                        c,
                        start,
                        |_| e.cout,
                        1,
                        |b| {
                            let cv = b.use_var(c);
                            let coff = b.ins().ishl_imm_u(cv, 2);
                            let bp = b.ins().iadd(e.filt, coff);
                            let acc = b.declare_var(types::F32);
                            let x = b.ins().load(types::F32, f, bp, 0);
                            b.def_var(acc, x);
                            let pv = b.ins().ushr_imm_u(cv, 4);
                            let first = b.ins().imul(pv, taps_per_panel);
                            let lane = b.ins().band_imm_s(cv, PANEL as i64 - 1);
                            let lane = b.ins().ishl_imm_u(lane, 2);
                            taps(b, e, &ctx, iw0, true, |b, xp, t| {
                                let xp = b.ins().iadd(xp, coff);
                                let line = b.ins().iadd(first, t);
                                let off = b.ins().ishl_imm_u(line, 6);
                                let wp = b.ins().iadd(e.wb, off);
                                let wp = b.ins().iadd(wp, lane);
                                let xv = b.ins().load(types::F32, f, xp, 0);
                                let wv = b.ins().load(types::F32, f, wp, 0);
                                let a = b.use_var(acc);
                                let a = b.ins().fma(xv, wv, a);
                                b.def_var(acc, a);
                            });
                            epilogue(b, e, &[acc], false);
                            let yp = b.ins().iadd(ypix, coff);
                            let a = b.use_var(acc);
                            b.ins().store(f, a, yp, 0);
                        },
                    );
                },
            );
            walk.step(b, e);
        },
    );
}

/// Where a layout's weights start: after `panels` bias lines, the count
/// in the arguments (the direct and depthwise layouts), or one line per
/// 16 output channels (the grouped layout, whose panels span groups).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BiasLines {
    /// `ConvArgs::panels`.
    Panels,
    /// `⌈cout / 16⌉`.
    CoutLanes,
}

/// A leaf function named `name` over [`ConvArgs`](crate::ConvArgs): every
/// field loaded into an [`Env`] (its `panels` and the weights' start as
/// `lines` says), then `body`, then the return.
pub(crate) fn build_with(
    target: &Target,
    name: &str,
    lines: BiasLines,
    body: impl FnOnce(&mut FunctionBuilder<'_>, &Env),
) -> Function {
    let mut func = target.leaf_function(name);
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut fctx);
    let ptr = target.pointer_type();
    let trusted = MemFlagsData::trusted();
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let args = b.block_params(entry)[0];
    let ld = |b: &mut FunctionBuilder<'_>, off| b.ins().load(ptr, trusted, args, off);
    let x = ld(&mut b, offsets::X);
    let filt = ld(&mut b, offsets::FILT);
    let y = ld(&mut b, offsets::Y);
    let in_h = ld(&mut b, offsets::IN_H);
    let in_w = ld(&mut b, offsets::IN_W);
    let cin = ld(&mut b, offsets::CIN);
    let cout = ld(&mut b, offsets::COUT);
    let k_h = ld(&mut b, offsets::K_H);
    let k_w = ld(&mut b, offsets::K_W);
    let stride = ld(&mut b, offsets::STRIDE);
    let pad = ld(&mut b, offsets::PAD);
    let dil = ld(&mut b, offsets::DIL);
    let out_h = ld(&mut b, offsets::OUT_H);
    let out_w = ld(&mut b, offsets::OUT_W);
    let ow_lo = ld(&mut b, offsets::OW_LO);
    let ow_hi = ld(&mut b, offsets::OW_HI);
    let panels = match lines {
        BiasLines::Panels => ld(&mut b, offsets::PANELS),
        BiasLines::CoutLanes => {
            let p = b.ins().iadd_imm_s(cout, PANEL as i64 - 1);
            b.ins().ushr_imm_u(p, 4)
        }
    };
    let act = ld(&mut b, offsets::ACT);
    let row_start = ld(&mut b, offsets::ROW_START);
    let row_end = ld(&mut b, offsets::ROW_END);
    let img_start = ld(&mut b, offsets::IMG_START);
    let oh_start = ld(&mut b, offsets::OH_START);
    let cin_g = ld(&mut b, offsets::CIN_G);
    let cout_g = ld(&mut b, offsets::COUT_G);
    let group_panels = ld(&mut b, offsets::GROUP_PANELS);
    let pix_in = b.ins().ishl_imm_u(cin, 2);
    let row_in = b.ins().imul(in_w, pix_in);
    let pix_out = b.ins().ishl_imm_u(cout, 2);
    let bias_bytes = b.ins().ishl_imm_u(panels, 6);
    let wb = b.ins().iadd(filt, bias_bytes);
    let e = Env {
        x,
        filt,
        y,
        in_h,
        in_w,
        cout,
        k_h,
        k_w,
        stride,
        pad,
        dil,
        out_h,
        out_w,
        ow_lo,
        ow_hi,
        panels,
        act,
        row_start,
        row_end,
        img_start,
        oh_start,
        cin_g,
        cout_g,
        group_panels,
        pix_in,
        row_in,
        pix_out,
        wb,
    };
    body(&mut b, &e);
    crate::silu::clif_pass(&mut b, act, y, row_start, row_end, out_w, cout);
    b.ins().return_(&[]);
    b.seal_all_blocks();
    b.finalize(target.frontend_config());
    func
}

/// Build the CLIF of `kind` for `target`.
pub fn build_function(target: &Target, kind: ArmKind) -> Function {
    build_with(target, "conv_arm", BiasLines::Panels, |b, e| match kind {
        ArmKind::Direct => build_direct(b, e),
        ArmKind::Depthwise => build_depthwise(b, e),
    })
}
