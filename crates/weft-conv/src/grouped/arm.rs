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

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Function, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;
use weft_managed::Target;

use super::ARM_PIXELS;
use crate::arm::{
    build_with, counted, finish_tile, flags, looped, row_ctx, taps, tile_accumulators, BiasLines,
    Env, RowCtx, RowWalk,
};
use crate::PANEL;

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
    finish_tile(b, e, row, &accs, (ow, npix, lanes));
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

/// Build the grouped arm's CLIF for `target` (its weights follow one bias
/// line per 16 output channels).
pub fn build_function(target: &Target) -> Function {
    build_with(
        target,
        "conv_grouped_arm",
        BiasLines::CoutLanes,
        build_grouped,
    )
}
