//! The Winograd arm's CLIF, compiled by Cranelift for either ISA: the
//! reference its twins are validated against.
//!
//! ```text
//! for (b, th) while b·out_h + 2·th < row_end          // tile_rows
//!   for tw in 0..⌈out_w/2⌉                            // tiles
//!     for ci in 0..cin step 4: V[ξ][ci..ci+4] → slot   // v_ci4 (f32x4)
//!     for ci in ..cin: V[ξ][ci] → slot                  // v_ci1
//!     for p in 0..panels (16 channels)                 // panels
//!       for q in 0..8: positions 2q, 2q+1              // positions
//!         m = 0 (8 × f32x4); for ci: m += V · U        // ci
//!         M[ξ] → slot
//!       Y = Aᵀ M A (f32x4), + bias, epilogue, store the pixels in range
//! ```
//!
//! A tile element outside the input is `select(inside, load, +0)`, its
//! load reading the image's first element instead.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, Endianness, Function, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind, Value,
};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use weft_managed::Target;

use super::{MAX_CIN, WPANEL};
use crate::{offsets, PANEL};

/// Bytes of one position's row of V in the arm's slot (`MAX_CIN` floats).
const V_ROW: i32 = 4 * MAX_CIN as i32;

fn flags() -> MemFlagsData {
    let mut f = MemFlagsData::new().with_endianness(Endianness::Little);
    f.set_notrap();
    f
}

fn le() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

/// `var = start; while var < end { body; var += step }`.
fn counted(
    b: &mut FunctionBuilder<'_>,
    var: Variable,
    start: Value,
    end: Value,
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
    let go = b.ins().icmp(IntCC::UnsignedLessThan, v, end);
    b.ins().brif(go, body_blk, &[], done, &[]);
    b.switch_to_block(body_blk);
    body(b);
    let v = b.use_var(var);
    let v = b.ins().iadd_imm_s(v, step);
    b.def_var(var, v);
    b.ins().jump(head, &[]);
    b.switch_to_block(done);
}

/// Emit `then` only when `cond` (an i8) is non-zero.
fn when(b: &mut FunctionBuilder<'_>, cond: Value, then: impl FnOnce(&mut FunctionBuilder<'_>)) {
    let yes = b.create_block();
    let done = b.create_block();
    b.ins().brif(cond, yes, &[], done, &[]);
    b.switch_to_block(yes);
    then(b);
    b.ins().jump(done, &[]);
    b.switch_to_block(done);
}

/// The epilogue on f32x4 variables, in place (crate docs).
fn epilogue(b: &mut FunctionBuilder<'_>, act: Value, vals: &[Variable]) {
    let relu = b.create_block();
    let six = b.create_block();
    let done = b.create_block();
    // ReLU for act 1 and 2; SiLU (3) is the pass after the tiles.
    let a1 = b.ins().iadd_imm_s(act, -1);
    let clamps = b.ins().icmp_imm_u(IntCC::UnsignedLessThan, a1, 2);
    b.ins().brif(clamps, relu, &[], done, &[]);
    let pick = |b: &mut FunctionBuilder<'_>, cc: FloatCC, k: Value, v: Variable| {
        let y = b.use_var(v);
        let m = b.ins().fcmp(cc, k, y);
        let m = b.ins().bitcast(types::F32X4, le(), m);
        let out = b.ins().bitselect(m, k, y);
        b.def_var(v, out);
    };
    b.switch_to_block(relu);
    let zero = b.ins().f32const(0.0);
    let zero = b.ins().splat(types::F32X4, zero);
    for v in vals {
        pick(b, FloatCC::GreaterThan, zero, *v);
    }
    let is6 = b
        .ins()
        .icmp_imm_u(IntCC::Equal, act, crate::Activation::Relu6 as i64);
    b.ins().brif(is6, six, &[], done, &[]);
    b.switch_to_block(six);
    let k6 = b.ins().f32const(6.0);
    let k6 = b.ins().splat(types::F32X4, k6);
    for v in vals {
        pick(b, FloatCC::LessThan, k6, *v);
    }
    b.ins().jump(done, &[]);
    b.switch_to_block(done);
}

/// Store one pixel's 16 channels (four f32x4) at `p`: whole when `lanes`
/// is 16, else lane by lane below `lanes`.
fn store_pixel(b: &mut FunctionBuilder<'_>, vals: &[Variable], p: Value, lanes: Value) {
    let f = flags();
    let whole = b.create_block();
    let ragged = b.create_block();
    let done = b.create_block();
    let full = b.ins().icmp_imm_u(IntCC::Equal, lanes, PANEL as i64);
    b.ins().brif(full, whole, &[], ragged, &[]);
    b.switch_to_block(whole);
    for (k, v) in vals.iter().enumerate() {
        let a = b.use_var(*v);
        b.ins().store(f, a, p, 16 * k as i32);
    }
    b.ins().jump(done, &[]);
    b.switch_to_block(ragged);
    for l in 0..PANEL {
        let more = b
            .ins()
            .icmp_imm_u(IntCC::UnsignedGreaterThan, lanes, l as i64);
        when(b, more, |b| {
            let a = b.use_var(vals[l / 4]);
            let s = b.ins().extractlane(a, (l % 4) as u8);
            b.ins().store(f, s, p, 4 * l as i32);
        });
    }
    b.ins().jump(done, &[]);
    b.switch_to_block(done);
}

/// `[a0 − a2, a1 + a2, a2 − a1, a1 − a3]` (the input transform's step).
fn bt(b: &mut FunctionBuilder<'_>, a: [Value; 4]) -> [Value; 4] {
    [
        b.ins().fsub(a[0], a[2]),
        b.ins().fadd(a[1], a[2]),
        b.ins().fsub(a[2], a[1]),
        b.ins().fsub(a[1], a[3]),
    ]
}

/// `[(a0 + a1) + a2, (a1 − a2) − a3]` (the output transform's step).
fn at(b: &mut FunctionBuilder<'_>, a: [Value; 4]) -> [Value; 2] {
    let s = b.ins().fadd(a[0], a[1]);
    let s = b.ins().fadd(s, a[2]);
    let d = b.ins().fsub(a[1], a[2]);
    let d = b.ins().fsub(d, a[3]);
    [s, d]
}

/// Build the arm's CLIF for `target`.
pub fn build_function(target: &Target) -> Function {
    let mut func = target.leaf_function("conv_winograd_arm");
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut fctx);
    let ptr = target.pointer_type();
    let trusted = MemFlagsData::trusted();
    let f = flags();
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
    let pad = ld(&mut b, offsets::PAD);
    let out_h = ld(&mut b, offsets::OUT_H);
    let out_w = ld(&mut b, offsets::OUT_W);
    let panels = ld(&mut b, offsets::PANELS);
    let act = ld(&mut b, offsets::ACT);
    let row_start = ld(&mut b, offsets::ROW_START);
    let row_end = ld(&mut b, offsets::ROW_END);
    let img_start = ld(&mut b, offsets::IMG_START);
    let oh_start = ld(&mut b, offsets::OH_START);

    let vslot = b.create_sized_stack_slot(StackSlotData::new(
        StackSlotKind::ExplicitSlot,
        16 * V_ROW as u32,
        6,
    ));
    let mslot =
        b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 16 * 64, 6));
    let vbase = b.ins().stack_addr(ptr, vslot, 0);
    let mbase = b.ins().stack_addr(ptr, mslot, 0);

    let pix_in = b.ins().ishl_imm_u(cin, 2);
    let row_in = b.ins().imul(in_w, pix_in);
    let img_in = b.ins().imul(in_h, row_in);
    let pix_out = b.ins().ishl_imm_u(cout, 2);
    let row_out = b.ins().imul(out_w, pix_out);
    let wp = b.ins().iadd_imm_s(panels, 1);
    let wp = b.ins().ushr_imm_u(wp, 1);
    let bias_bytes = b.ins().imul_imm_s(wp, (WPANEL * 4) as i64);
    let ub = b.ins().iadd(filt, bias_bytes);
    let ci_bytes = b.ins().imul_imm_s(cin, (WPANEL * 4) as i64);
    let xi_stride = b.ins().imul(wp, ci_bytes);
    let tiles_w = b.ins().iadd_imm_s(out_w, 1);
    let tiles_w = b.ins().ushr_imm_u(tiles_w, 1);

    // The cursor over tile rows.
    let th = b.declare_var(types::I64);
    let imgrow = b.declare_var(types::I64);
    let ximg = b.declare_var(types::I64);
    let th0 = b.ins().ushr_imm_u(oh_start, 1);
    b.def_var(th, th0);
    let ir0 = b.ins().imul(img_start, out_h);
    b.def_var(imgrow, ir0);
    let xo = b.ins().imul(img_start, img_in);
    let xi0 = b.ins().iadd(x, xo);
    b.def_var(ximg, xi0);

    let head = b.create_block();
    let body = b.create_block();
    let done = b.create_block();
    b.ins().jump(head, &[]);
    b.switch_to_block(head);
    let (thv, irv) = (b.use_var(th), b.use_var(imgrow));
    let th2 = b.ins().ishl_imm_u(thv, 1);
    let r0 = b.ins().iadd(irv, th2);
    let go = b.ins().icmp(IntCC::UnsignedLessThan, r0, row_end);
    b.ins().brif(go, body, &[], done, &[]);
    b.switch_to_block(body);
    {
        let st0 = b
            .ins()
            .icmp(IntCC::UnsignedGreaterThanOrEqual, r0, row_start);
        let oh1 = b.ins().iadd_imm_s(th2, 1);
        let in_img = b.ins().icmp(IntCC::UnsignedLessThan, oh1, out_h);
        let r1 = b.ins().iadd_imm_s(r0, 1);
        let in_range = b.ins().icmp(IntCC::UnsignedLessThan, r1, row_end);
        let st1 = b.ins().band(in_img, in_range);
        let ih0 = b.ins().isub(th2, pad);
        let xb = b.use_var(ximg);
        let mut row_ok = [ih0; 4];
        let mut row_off = [ih0; 4];
        for i in 0..4 {
            let ih = b.ins().iadd_imm_s(ih0, i as i64);
            row_ok[i] = b.ins().icmp(IntCC::UnsignedLessThan, ih, in_h);
            row_off[i] = b.ins().imul(ih, row_in);
        }
        let ro = b.ins().imul(r0, row_out);
        let yrow = b.ins().iadd(y, ro);
        let tw = b.declare_var(types::I64);
        let zero = b.ins().iconst(types::I64, 0);
        counted(&mut b, tw, zero, tiles_w, 1, |b| {
            let twv = b.use_var(tw);
            let tw2 = b.ins().ishl_imm_u(twv, 1);
            let iw0 = b.ins().isub(tw2, pad);
            let mut offs = [iw0; 16];
            let mut oks = [row_ok[0]; 16];
            for j in 0..4 {
                let iw = b.ins().iadd_imm_s(iw0, j as i64);
                let col_ok = b.ins().icmp(IntCC::UnsignedLessThan, iw, in_w);
                let col_off = b.ins().imul(iw, pix_in);
                for i in 0..4 {
                    let ok = b.ins().band(row_ok[i], col_ok);
                    let off = b.ins().iadd(row_off[i], col_off);
                    let zero = b.ins().iconst(types::I64, 0);
                    offs[4 * i + j] = b.ins().select(ok, off, zero);
                    oks[4 * i + j] = ok;
                }
            }
            // V for every input channel: four at a time (f32x4), then
            // the rest one at a time; V[ξ] is a row of MAX_CIN floats.
            let ci = b.declare_var(types::I64);
            let zero = b.ins().iconst(types::I64, 0);
            let v_step = |b: &mut FunctionBuilder<'_>, civ: Value, ty: types::Type| {
                let co4 = b.ins().ishl_imm_u(civ, 2);
                let p = b.ins().iadd(xb, co4);
                let fz = b.ins().f32const(0.0);
                let fz = if ty == types::F32 {
                    fz
                } else {
                    b.ins().splat(ty, fz)
                };
                let mut d = [fz; 16];
                for k in 0..16 {
                    let a = b.ins().iadd(p, offs[k]);
                    let v = b.ins().load(ty, f, a, 0);
                    d[k] = b.ins().select(oks[k], v, fz);
                }
                let mut e = [fz; 16];
                for i in 0..4 {
                    let r = bt(b, [d[4 * i], d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]]);
                    e[4 * i..4 * i + 4].copy_from_slice(&r);
                }
                let vp = b.ins().iadd(vbase, co4);
                for j in 0..4 {
                    let c = bt(b, [e[j], e[4 + j], e[8 + j], e[12 + j]]);
                    for (i, v) in c.into_iter().enumerate() {
                        b.ins().store(f, v, vp, V_ROW * (4 * i + j) as i32);
                    }
                }
            };
            let whole = b.ins().band_imm_s(cin, -4);
            counted(b, ci, zero, whole, 4, |b| {
                let civ = b.use_var(ci);
                v_step(b, civ, types::F32X4);
            });
            let start = b.use_var(ci);
            counted(b, ci, start, cin, 1, |b| {
                let civ = b.use_var(ci);
                v_step(b, civ, types::F32);
            });
            let ow1 = b.ins().iadd_imm_s(tw2, 1);
            let st_c1 = b.ins().icmp(IntCC::UnsignedLessThan, ow1, out_w);
            let po = b.ins().imul(tw2, pix_out);
            let ypix = b.ins().iadd(yrow, po);
            let p = b.declare_var(types::I64);
            let zero = b.ins().iconst(types::I64, 0);
            counted(b, p, zero, panels, 1, |b| {
                let pv = b.use_var(p);
                let half = b.ins().band_imm_s(pv, 1);
                let half = b.ins().ishl_imm_u(half, 6);
                let pw = b.ins().ushr_imm_u(pv, 1);
                let o = b.ins().imul(pw, ci_bytes);
                let up = b.ins().iadd(ub, o);
                let up = b.ins().iadd(up, half);
                let q = b.declare_var(types::I64);
                let zero = b.ins().iconst(types::I64, 0);
                let eight = b.ins().iconst(types::I64, 16 / super::ARM_POSITIONS as i64);
                counted(b, q, zero, eight, 1, |b| {
                    let qv = b.use_var(q);
                    let xi0 = b.ins().ishl_imm_u(qv, 1);
                    let o = b.ins().imul(xi0, xi_stride);
                    let pu0 = b.ins().iadd(up, o);
                    let pu1 = b.ins().iadd(pu0, xi_stride);
                    let o = b.ins().imul_imm_s(xi0, V_ROW as i64);
                    let pv0 = b.ins().iadd(vbase, o);
                    let accs: Vec<Variable> = (0..8).map(|_| b.declare_var(types::F32X4)).collect();
                    let fz = b.ins().f32const(0.0);
                    let z = b.ins().splat(types::F32X4, fz);
                    for a in &accs {
                        b.def_var(*a, z);
                    }
                    // Pointers stepped each iteration: V (both positions)
                    // and U (both positions).
                    let (pvar, u0var, u1var) = (
                        b.declare_var(types::I64),
                        b.declare_var(types::I64),
                        b.declare_var(types::I64),
                    );
                    b.def_var(pvar, pv0);
                    b.def_var(u0var, pu0);
                    b.def_var(u1var, pu1);
                    let ci = b.declare_var(types::I64);
                    let zero = b.ins().iconst(types::I64, 0);
                    counted(b, ci, zero, cin, 1, |b| {
                        let vp = b.use_var(pvar);
                        let ups = [b.use_var(u0var), b.use_var(u1var)];
                        for (s, u) in ups.into_iter().enumerate() {
                            let v = b.ins().load(types::F32, f, vp, V_ROW * s as i32);
                            let v = b.ins().splat(types::F32X4, v);
                            for k in 0..4 {
                                let w = b.ins().load(types::F32X4, f, u, 16 * k as i32);
                                let a = b.use_var(accs[4 * s + k]);
                                let a = b.ins().fma(v, w, a);
                                b.def_var(accs[4 * s + k], a);
                            }
                        }
                        let vp = b.ins().iadd_imm_s(vp, 4);
                        b.def_var(pvar, vp);
                        for (var, u) in [u0var, u1var].into_iter().zip(ups) {
                            let u = b.ins().iadd_imm_s(u, (WPANEL * 4) as i64);
                            b.def_var(var, u);
                        }
                    });
                    let o = b.ins().ishl_imm_u(xi0, 6);
                    let mp = b.ins().iadd(mbase, o);
                    for (n, a) in accs.iter().enumerate() {
                        let v = b.use_var(*a);
                        b.ins().store(f, v, mp, 16 * n as i32);
                    }
                });
                // Y = Aᵀ M A, + bias, per f32x4 of the panel.
                let bo = b.ins().ishl_imm_u(pv, 6);
                let bp = b.ins().iadd(filt, bo);
                let outs: Vec<Variable> = (0..16).map(|_| b.declare_var(types::F32X4)).collect();
                for k in 0..4 {
                    let m: Vec<Value> = (0..16)
                        .map(|xi| {
                            b.ins()
                                .load(types::F32X4, f, mbase, (64 * xi + 16 * k) as i32)
                        })
                        .collect();
                    let mut r = [[m[0]; 4]; 2];
                    for j in 0..4 {
                        let c = at(b, [m[j], m[4 + j], m[8 + j], m[12 + j]]);
                        r[0][j] = c[0];
                        r[1][j] = c[1];
                    }
                    let bias = b.ins().load(types::F32X4, f, bp, 16 * k as i32);
                    for a in 0..2 {
                        let yv = at(b, r[a]);
                        for c in 0..2 {
                            let v = b.ins().fadd(yv[c], bias);
                            b.def_var(outs[4 * (2 * a + c) + k], v);
                        }
                    }
                }
                epilogue(b, act, &outs);
                let first = b.ins().imul_imm_s(pv, PANEL as i64);
                let left = b.ins().isub(cout, first);
                let cap = b.ins().iconst(types::I64, PANEL as i64);
                let lanes = b.ins().umin(left, cap);
                let base = b.ins().iadd(ypix, bo);
                let right = b.ins().iadd(base, pix_out);
                let below = b.ins().iadd(base, row_out);
                let corner = b.ins().iadd(below, pix_out);
                let s01 = b.ins().band(st0, st_c1);
                let s11 = b.ins().band(st1, st_c1);
                for (n, (cond, at)) in [(st0, base), (s01, right), (st1, below), (s11, corner)]
                    .into_iter()
                    .enumerate()
                {
                    when(b, cond, |b| {
                        store_pixel(b, &outs[4 * n..4 * n + 4], at, lanes)
                    });
                }
            });
        });
        // The next tile row: th + 1, or the next image's first.
        let thv = b.use_var(th);
        let next = b.ins().iadd_imm_s(thv, 1);
        let n2 = b.ins().ishl_imm_u(next, 1);
        let wrap = b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, n2, out_h);
        let zero = b.ins().iconst(types::I64, 0);
        let nth = b.ins().select(wrap, zero, next);
        b.def_var(th, nth);
        let irv = b.use_var(imgrow);
        let nir = b.ins().iadd(irv, out_h);
        let nir = b.ins().select(wrap, nir, irv);
        b.def_var(imgrow, nir);
        let xv = b.use_var(ximg);
        let nx = b.ins().iadd(xv, img_in);
        let nx = b.ins().select(wrap, nx, xv);
        b.def_var(ximg, nx);
        b.ins().jump(head, &[]);
    }
    b.switch_to_block(done);
    crate::silu::clif_pass(&mut b, act, y, row_start, row_end, out_w, cout);
    b.ins().return_(&[]);
    b.seal_all_blocks();
    b.finalize(target.frontend_config());
    func
}
