//! The grouped arm's CLIF, compiled by Cranelift for either ISA: the
//! reference its twins are validated against.
//!
//! A panel of 16 output channels covers `16 / cout_g` consecutive groups
//! (panel `p`: output channels `16p .. 16p + 16`, groups from `g0 = 16p /
//! cout_g`); lane `l` reads group `g0 + l / cout_g`'s x. When `cout_g ≥
//! 4` each f32x4 of the panel (lanes `4v .. 4v + 3`) lies in one group,
//! so its x is one broadcast per pixel and input channel; when `cout_g`
//! is 1 or 2 its four lanes are loaded one by one (a test of `cout_g` at
//! each tap picks the `ci` loop):
//!
//! ```text
//! for p in 0..⌈cout/16⌉                                // panels
//!   for row in row_start..row_end                     // (b, oh)
//!     for ow in 0..ow_lo:            pixel(1, checked) // left border
//!     for ow in ow_lo.. step 2 while ow + 2 ≤ ow_hi:   pixel(2, unchecked)
//!     for ow in ..out_w:             pixel(1, checked) // the rest
//! pixel(n): acc = bias; for kh (row inside?) for kw (column inside, if
//!           checked) for ci in 0..cin_g (broadcast, or lane by lane):
//!           acc[r][l] = fma(x[r, (g0 + l/cout_g)·cin_g + ci], w[ci][l],
//!           acc[r][l]); epilogue; store the panel's channels below cout
//! ```
//!
//! A lane whose group does not exist (the last panel when `16 / cout_g`
//! does not divide `groups`) reads the last existing group's x (inside
//! x); it is never stored.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, Endianness, Function, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use weft_managed::Target;

use super::ARM_PIXELS;
use crate::{offsets, PANEL};

fn flags() -> MemFlagsData {
    let mut f = MemFlagsData::new().with_endianness(Endianness::Little);
    f.set_notrap();
    f
}

fn le() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

/// The argument fields every body loads, and values derived from them.
struct Env {
    x: Value,
    filt: Value,
    y: Value,
    in_h: Value,
    in_w: Value,
    cout: Value,
    k_h: Value,
    k_w: Value,
    stride: Value,
    pad: Value,
    dil: Value,
    out_h: Value,
    out_w: Value,
    ow_lo: Value,
    ow_hi: Value,
    panels: Value,
    act: Value,
    row_start: Value,
    row_end: Value,
    img_start: Value,
    oh_start: Value,
    /// Input channels of a group (the direct reduction's length).
    cin_g: Value,
    /// Output channels of a group.
    cout_g: Value,
    /// Bytes of one input pixel (`cin · 4`).
    pix_in: Value,
    /// Bytes of one input row (`in_w · cin · 4`).
    row_in: Value,
    /// Bytes of one output pixel (`cout · 4`).
    pix_out: Value,
    /// The weights after the bias lines.
    wb: Value,
}

/// The image and the row in it of the current flattened row: set from
/// `img_start`/`oh_start` before the row loop, stepped after each row.
struct RowWalk {
    img: Variable,
    oh: Variable,
}

impl RowWalk {
    fn start(b: &mut FunctionBuilder<'_>, e: &Env) -> RowWalk {
        let w = RowWalk {
            img: b.declare_var(types::I64),
            oh: b.declare_var(types::I64),
        };
        b.def_var(w.img, e.img_start);
        b.def_var(w.oh, e.oh_start);
        w
    }

    /// The next row: `oh + 1`, or the next image's row 0.
    fn step(&self, b: &mut FunctionBuilder<'_>, e: &Env) {
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
struct RowCtx {
    /// The image's first input element.
    xb: Value,
    /// `oh · stride − pad` (wrapping: a negative row is a huge unsigned).
    ih0: Value,
    /// y's first element of the row (plus the panel, for direct).
    yrow: Value,
}

/// A counted loop `var = start; while var < end { body; var += step }`,
/// the body emitted by `body` from its first block (leaving the builder in
/// an open block that continues to the increment).
fn counted(
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
fn looped(
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
fn taps(
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
fn epilogue(b: &mut FunctionBuilder<'_>, e: &Env, vals: &[Variable], vector: bool) {
    let relu = b.create_block();
    let six = b.create_block();
    let done = b.create_block();
    b.ins().brif(e.act, relu, &[], done, &[]);
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

/// One tile of `npix` pixels from column `ow` × the panel at `wpanel`
/// (bias at `biasp`, `lanes` channels to store, `xv[l]` the byte offset
/// of lane `l`'s group's first x channel from the panel's).
#[allow(clippy::too_many_arguments)]
fn grouped_pixels(
    b: &mut FunctionBuilder<'_>,
    e: &Env,
    row: &RowCtx,
    (wpanel, biasp, lanes): (Value, Value, Value),
    xv: [Value; 16],
    ow: Value,
    npix: usize,
    checked: bool,
) {
    let f = flags();
    let accs: Vec<Variable> = (0..npix * 4).map(|_| b.declare_var(types::F32X4)).collect();
    for r in 0..npix {
        for v in 0..4 {
            let x = b.ins().load(types::F32X4, f, biasp, 16 * v as i32);
            b.def_var(accs[r * 4 + v], x);
        }
    }
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
        // cout_g ≥ 4: each f32x4 lies in one group (one broadcast);
        // otherwise its lanes span groups (four loads, lane by lane).
        let splat_blk = b.create_block();
        let gather_blk = b.create_block();
        let joined = b.create_block();
        let small = b.ins().icmp_imm_u(IntCC::UnsignedLessThan, e.cout_g, 4);
        b.ins().brif(small, gather_blk, &[], splat_blk, &[]);
        for gather in [false, true] {
            b.switch_to_block(if gather { gather_blk } else { splat_blk });
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
                        for (v, w) in wv.iter().enumerate() {
                            let xs = if gather {
                                let mut vec = None;
                                for j in 0..4 {
                                    let pl = b.ins().iadd(p, xv[4 * v + j]);
                                    let s = b.ins().load(types::F32, f, pl, 0);
                                    vec = Some(match vec {
                                        None => b.ins().scalar_to_vector(types::F32X4, s),
                                        Some(a) => b.ins().insertlane(a, s, j as u8),
                                    });
                                }
                                vec.expect("four lanes")
                            } else {
                                let pv = b.ins().iadd(p, xv[4 * v]);
                                let s = b.ins().load(types::F32, f, pv, 0);
                                b.ins().splat(types::F32X4, s)
                            };
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
            b.ins().jump(joined, &[]);
        }
        b.switch_to_block(joined);
    });
    epilogue(b, e, &accs, true);
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

fn build_grouped(b: &mut FunctionBuilder<'_>, e: &Env) {
    let p = b.declare_var(types::I64);
    let row = b.declare_var(types::I64);
    let ow = b.declare_var(types::I64);
    let zero = b.ins().iconst(types::I64, 0);
    // cout_g = 2^sh (1, 2, 4 or 8): lane l's group in the panel is l >> sh.
    let sh = b.ins().ctz(e.cout_g);
    let grp_bytes = b.ins().ishl_imm_u(e.cin_g, 2);
    let sixteen = b.ins().iconst(types::I64, PANEL as i64);
    let per_panel = b.ins().ushr(sixteen, sh);
    let x_step = b.ins().imul(per_panel, grp_bytes);
    let tap_bytes = b.ins().ishl_imm_u(e.cin_g, 6);
    let taps = b.ins().imul(e.k_h, e.k_w);
    let w_step = b.ins().imul(taps, tap_bytes);
    let cm1 = b.ins().iadd_imm_s(e.cout_g, -1);
    counted(
        b,
        p,
        zero,
        |_| e.panels,
        1,
        |b| {
            let pv = b.use_var(p);
            let off = b.ins().imul(pv, w_step);
            let wpanel = b.ins().iadd(e.wb, off);
            let yoff = b.ins().ishl_imm_u(pv, 6);
            let biasp = b.ins().iadd(e.filt, yoff);
            let first = b.ins().ishl_imm_u(pv, 4);
            let left = b.ins().isub(e.cout, first);
            let cap = b.ins().iconst(types::I64, PANEL as i64);
            let lanes = b.ins().umin(left, cap);
            // The panel's groups that exist, and each vector's group
            // (clamped to the last of them, so its x stays inside x).
            let ng = b.ins().iadd(lanes, cm1);
            let ng = b.ins().ushr(ng, sh);
            let last = b.ins().iadd_imm_s(ng, -1);
            let xv: [Value; 16] = std::array::from_fn(|l| {
                let k = b.ins().iconst(types::I64, l as i64);
                let gi = b.ins().ushr(k, sh);
                let gi = b.ins().umin(gi, last);
                b.ins().imul(gi, grp_bytes)
            });
            let xoff = b.ins().imul(pv, x_step);
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
                            grouped_pixels(b, e, &ctx, panel, xv, o, 1, true);
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
                            grouped_pixels(b, e, &ctx, panel, xv, o, ARM_PIXELS as usize, false);
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
                            grouped_pixels(b, e, &ctx, panel, xv, o, 1, true);
                        },
                    );
                    walk.step(b, e);
                },
            );
        },
    );
}

/// A row's image, first input row and output address; `panel_off` (the
/// panel's byte offset within a pixel) is added to the output address.
/// The row's image and row in it come from the walk's variables (no
/// division: on arm64 Cranelift guards a `udiv` with a trap block).
fn row_ctx(
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

/// Build the grouped arm's CLIF for `target`.
pub fn build_function(target: &Target) -> Function {
    let mut func = target.leaf_function("conv_grouped_arm");
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
    let act = ld(&mut b, offsets::ACT);
    let row_start = ld(&mut b, offsets::ROW_START);
    let row_end = ld(&mut b, offsets::ROW_END);
    let img_start = ld(&mut b, offsets::IMG_START);
    let oh_start = ld(&mut b, offsets::OH_START);
    let cin_g = ld(&mut b, offsets::CIN_G);
    let cout_g = ld(&mut b, offsets::COUT_G);
    // This layout's panels: ⌈cout / 16⌉ (not the argument's `panels`).
    let panels = b.ins().iadd_imm_s(cout, PANEL as i64 - 1);
    let panels = b.ins().ushr_imm_u(panels, 4);
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
        pix_in,
        row_in,
        pix_out,
        wb,
    };
    build_grouped(&mut b, &e);
    b.ins().return_(&[]);
    b.seal_all_blocks();
    b.finalize(target.frontend_config());
    func
}
