//! The arm64 (A64, NEON) twin of the grouped arm: the arm's offer
//! ([`super::GROUPED_LAYOUT`]), the body written with weft-a64, each
//! output's FMAs in the arm's order (kh, kw, ci within its group), so the
//! arm's bits.
//!
//! A panel is 16 output channels (four `.4s` vectors, v0–v3 its weight
//! line per `ci`) spanning `16 / cout_g` groups; lane `l` needs, at a
//! pixel and `ci`, `x[pixel, (l / cout_g) · cin_g + ci]` (relative to the
//! panel's first group). How a tile gets that x, by `cout_g` (a test at
//! entry picks one of four bodies, each the whole walk):
//!
//! - 8: a vector lies in one group, so two `ldr s` a pixel (group 1 at a
//!   register offset) and `fmla acc.4s, w.4s, x.s[0]` by element;
//! - 4: likewise, four `ldr s` (groups 1–3 at register offsets);
//! - 2: a vector spans two groups: two lane loads (`ld1 {t.s}[i]`,
//!   post-indexed by the group stride `4 · cin_g`) and `zip1 t, t, t`
//!   give `[a, a, b, b]`, then a vector `fmla`;
//! - 1: four lane loads give the vector's four groups, a vector `fmla`.
//!
//! Every `fmla` is `w·x + acc` fused: the contract's `fma(x, w, acc)` bit
//! for bit (the product commutes exactly).
//!
//! Walk (as the direct NEON twin, [`crate::twin_a64`]): the whole panels
//! (`⌊cout / 16⌋`, every group of them existing) outermost; per output
//! row the left border one pixel at a time with column checks, interior
//! tiles of 6 pixels without (6 × 4 accumulators: v8–v31, so `d8`–`d15`
//! are saved), the interior's leftover as tiles of 4, 2, 1 (each at most
//! once), the right border one at a time. Taps whose row lies outside are
//! skipped for the whole tile, a checked pixel's outside columns too:
//! nothing is multiplied by the padding.
//!
//! The ragged last panel (`cout % 16` channels, when `16 / cout_g` does
//! not divide the groups) runs after them, shared by every `cout_g`: one
//! pixel at a time, every tap checked, each lane's x loaded by its own
//! offset from a table built per panel on the stack (the lane's group,
//! clamped to the last existing one, so no lane reads past x: NEON has no
//! masked loads), vector `fmla`s, and stores lane by lane below `cout`.
//!
//! The epilogue is the direct NEON twin's (act 0 and act 3 skip it; SiLU
//! is [`crate::silu`]'s pass over the call's rows after the tiles, right
//! before the frame is popped).
//!
//! ABI: AAPCS64 leaf; the argument pointer stays in `x0`; only `x0`–`x17`
//! and `v0`–`v31` are written, `d8`–`d15` saved and restored.

use std::sync::Arc;

use weft_a64::{mem, q, s, v, Assembler, Cond, EncodeError, Label, XZR};
use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};

use super::{check_offer, panels};
use crate::{offsets, ConvGeometry, Shape, PANEL};

/// The NEON twin's name.
pub const NAME: &str = "conv.direct.grouped.twin.neon.6x16";

/// Pixels in an interior tile, then the leftover tiles.
pub const PIXELS: (u64, [u64; 3]) = (6, [4, 2, 1]);

/// The `cout_g` of each body, in emission order.
pub const BODIES: [u64; 4] = [1, 2, 4, 8];

const NEON: &[Feature] = &[Feature::Neon];

/// The grouped arm's NEON twin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupedA64;

/// The grouped arm's arm64 twins.
pub fn twins() -> Vec<Arc<dyn Twin>> {
    vec![Arc::new(GroupedA64)]
}

// SAFETY: the body reads x only at taps inside the input (rows checked,
// columns checked outside `ow_lo..ow_hi`, which `ConvArgs` derives) and
// only the channels of the panel's existing groups (whole panels hold
// only existing groups; the ragged one clamps each lane's group), the
// packed filter's lines, and writes y only in its rows and channels below
// cout (lane by lane in the ragged panel); it returns normally, restoring
// d8–d15. Validation checks it against the arm.
unsafe impl Twin for GroupedA64 {
    fn name(&self) -> &'static str {
        NAME
    }

    fn isa(&self) -> Isa {
        Isa::Aarch64
    }

    fn requires(&self) -> &'static [Feature] {
        NEON
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        check_offer(NAME, offer)?;
        crate::twin_a64::native(NAME, emit())
    }

    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        match ConvGeometry::from_geometry(&offer.contract.geometry) {
            Ok((g, s)) => crate::silu::after(nest(&g, &s), &g, &s, 4, false),
            Err(_) => offer.loops.clone(),
        }
    }
}

fn trip(name: &str, trips: u64, depth: u32) -> LoopTrip {
    LoopTrip {
        name: name.to_owned(),
        trips,
        depth,
    }
}

/// The loop nest of the twin at `g` for a call over every row, in the
/// order the emitter writes its loops: the four bodies (`cout_g` 1, 2, 4,
/// 8; those not taken with zero panels), then the ragged panel's walk
/// (zero or one trip).
pub fn nest(g: &ConvGeometry, s: &Shape) -> Vec<LoopTrip> {
    let rows = g.batch * s.out_h;
    let cin_g = g.cin / g.groups.max(1);
    let cout_g = g.cout / g.groups.max(1);
    let whole = g.cout / PANEL as u64;
    let taps = |out: &mut Vec<LoopTrip>, depth: u32, used: bool| {
        out.push(trip("kh", if used { g.k_h } else { 0 }, depth));
        out.push(trip("kw", g.k_w, depth + 1));
        out.push(trip("ci", cin_g, depth + 2));
    };
    let (tile, leftovers) = PIXELS;
    let tiles = (s.ow_hi - s.ow_lo) / tile;
    let mut out = Vec::new();
    for cg in BODIES {
        out.push(trip("panels", u64::from(cg == cout_g) * whole, 0));
        out.push(trip("rows", rows, 1));
        out.push(trip("left", s.ow_lo, 2));
        taps(&mut out, 3, true);
        out.push(trip("tiles", tiles, 2));
        taps(&mut out, 3, true);
        let mut rem = s.ow_hi - s.ow_lo - tiles * tile;
        for h in leftovers {
            let used = rem >= h;
            if used {
                rem -= h;
            }
            taps(&mut out, 2, used);
        }
        out.push(trip("right", s.out_w - s.ow_hi, 2));
        taps(&mut out, 3, true);
    }
    out.push(trip("ragged", panels(g) - whole, 0));
    out.push(trip("rows", rows, 1));
    out.push(trip("columns", s.out_w, 2));
    taps(&mut out, 3, true);
    out
}

// Registers and the stack slots below `S_XSTEP`: the direct NEON
// twin's, with its helpers (the walk is the same).
use crate::twin_a64::{
    acc, enter, epilogue, field, leave, put, row_walk, rows, slot, tap_pointers, taps, while_loop,
    CI, OW, P, PW, PX, S_BIASP, S_IW0, S_PIXOUT, S_PSTRIDE, S_ROWOUT, S_TAPB, S_WB, S_WHOLE,
    S_WPANEL, S_XPANEL, S_YOFF, S_YROW, T1, T2, T3,
};

/// x's bytes a panel (`(16 / cout_g) · cin_g · 4`).
const S_XSTEP: i64 = 144;
/// The ragged panel's channels (`cout − 16p`, below 16).
const S_LANES: i64 = 152;
/// Panels (`⌈cout / 16⌉`).
const S_PANELS: i64 = 160;
/// The ragged panel's per-lane x offsets (16 words): lane `l`'s group,
/// clamped to the last existing one, times `4 · cin_g`.
const S_XO: i64 = 168;
const FRAME: i64 = 304;

/// The accumulators of `pixels` ← the panel's bias line; `S_IW0` ← the
/// first pixel's leftmost input column.
fn tile_start(a: &mut Assembler, pixels: usize) -> Result<(), EncodeError> {
    slot(a, T1, S_BIASP)?;
    for r in 0..pixels {
        a.ldp(q(acc(r, 0)), q(acc(r, 1)), mem(T1))?;
        a.ldp(q(acc(r, 2)), q(acc(r, 3)), mem(T1).off(32))?;
    }
    field(a, T1, offsets::STRIDE)?;
    field(a, T2, offsets::PAD)?;
    a.mul(T1, OW, T1)?;
    a.sub(T1, T1, T2)?;
    put(a, T1, S_IW0)
}

/// One tile of `pixels` from `OW` × a whole panel of `cout_g = cg`
/// (module docs: how each lane gets its group's x).
fn tile(a: &mut Assembler, cg: u64, pixels: usize, checked: bool) -> Result<(), EncodeError> {
    tile_start(a, pixels)?;
    taps(a, checked, |a| {
        tap_pointers(a, pixels)?;
        // T2 = the group stride 4 · cin_g; at cout_g 4, T3 and T1 its
        // double and triple (groups 2 and 3).
        field(a, T2, offsets::CIN_G)?;
        a.lsl(T2, T2, 2)?;
        if cg == 4 {
            a.add(T3, T2, T2)?;
            a.add(T1, T3, T2)?;
        }
        let ci = a.new_label();
        field(a, CI, offsets::CIN_G)?;
        a.bind(ci)?;
        a.ldp(q(0), q(1), mem(PW))?;
        a.ldp(q(2), q(3), mem(PW).off(32))?;
        a.add(PW, PW, 64)?;
        for (r, &px) in PX.iter().enumerate().take(pixels) {
            match cg {
                8 => {
                    a.ldr(s(5), mem(px).idx(T2))?;
                    a.ldr(s(4), mem(px).post(4))?;
                    for u in 0..4 {
                        let t = 4 + (u / 2) as u8;
                        a.fmla(v(acc(r, u)).s4(), v(u as u8).s4(), v(t).s(0))?;
                    }
                }
                4 => {
                    a.ldr(s(5), mem(px).idx(T2))?;
                    a.ldr(s(6), mem(px).idx(T3))?;
                    a.ldr(s(7), mem(px).idx(T1))?;
                    a.ldr(s(4), mem(px).post(4))?;
                    for u in 0..4 {
                        let t = 4 + u as u8;
                        a.fmla(v(acc(r, u)).s4(), v(u as u8).s4(), v(t).s(0))?;
                    }
                }
                _ => {
                    // Lane loads walking the groups from this ci's x.
                    let per = if cg == 2 { 2 } else { 4 };
                    a.mov(T1, px)?;
                    for u in 0..4 {
                        let t = 4 + u as u8;
                        for j in 0..per {
                            a.ld1(v(t).s(j), mem(T1).post_reg(T2))?;
                        }
                        if cg == 2 {
                            // [a, b, …] → [a, a, b, b]
                            a.zip1(v(t).s4(), v(t).s4(), v(t).s4())?;
                        }
                        a.fmla(v(acc(r, u)).s4(), v(u as u8).s4(), v(t).s4())?;
                    }
                    a.add(px, px, 4)?;
                }
            }
        }
        a.subs(CI, CI, 1)?;
        a.b_cond(Cond::Ne, ci)
    })?;
    let accs: Vec<u8> = (0..pixels)
        .flat_map(|r| (0..4).map(move |u| acc(r, u)))
        .collect();
    epilogue(a, &accs)?;
    slot(a, T2, S_PIXOUT)?;
    slot(a, T3, S_YROW)?;
    a.madd(T1, OW, T2, T3)?;
    for r in 0..pixels {
        a.stp(q(acc(r, 0)), q(acc(r, 1)), mem(T1))?;
        a.stp(q(acc(r, 2)), q(acc(r, 3)), mem(T1).off(32))?;
        if r + 1 < pixels {
            a.add(T1, T1, T2)?;
        }
    }
    Ok(())
}

/// One pixel at `OW` of the ragged panel: every tap checked, each lane's
/// x at its own offset (`S_XO`), stores below `S_LANES`.
fn ragged_pixel(a: &mut Assembler) -> Result<(), EncodeError> {
    tile_start(a, 1)?;
    taps(a, true, |a| {
        tap_pointers(a, 1)?;
        let ci = a.new_label();
        field(a, CI, offsets::CIN_G)?;
        a.bind(ci)?;
        a.ldp(q(0), q(1), mem(PW))?;
        a.ldp(q(2), q(3), mem(PW).off(32))?;
        a.add(PW, PW, 64)?;
        for l in 0..PANEL {
            slot(a, T1, S_XO + 8 * l as i64)?;
            a.add(T1, T1, PX[0])?;
            a.ld1(v(4 + (l / 4) as u8).s((l % 4) as u8), mem(T1))?;
        }
        a.add(PX[0], PX[0], 4)?;
        for u in 0..4 {
            a.fmla(v(acc(0, u)).s4(), v(u as u8).s4(), v(4 + u as u8).s4())?;
        }
        a.subs(CI, CI, 1)?;
        a.b_cond(Cond::Ne, ci)
    })?;
    epilogue(a, &[acc(0, 0), acc(0, 1), acc(0, 2), acc(0, 3)])?;
    slot(a, T2, S_PIXOUT)?;
    slot(a, T3, S_YROW)?;
    a.madd(T1, OW, T2, T3)?;
    slot(a, T3, S_LANES)?;
    let next = a.new_label();
    for l in 0..PANEL {
        a.cmp(T3, l as i64)?;
        a.b_cond(Cond::Ls, next)?;
        a.mov(s(4), v(acc(0, l / 4)).s((l % 4) as u8))?;
        a.str(s(4), mem(T1).off(4 * l as i64))?;
    }
    a.bind(next)
}

/// The panel `P`'s pointers: `S_WPANEL`, `S_BIASP`, `S_YOFF`, `S_XPANEL`.
fn panel_setup(a: &mut Assembler) -> Result<(), EncodeError> {
    slot(a, T1, S_PSTRIDE)?;
    slot(a, T2, S_WB)?;
    a.madd(T1, P, T1, T2)?;
    put(a, T1, S_WPANEL)?;
    a.lsl(T3, P, 6)?;
    put(a, T3, S_YOFF)?;
    field(a, T2, offsets::FILT)?;
    a.add(T1, T2, T3)?;
    put(a, T1, S_BIASP)?;
    slot(a, T1, S_XSTEP)?;
    a.mul(T1, P, T1)?;
    put(a, T1, S_XPANEL)
}

/// The whole panels at `cout_g = cg`.
fn whole_panels(a: &mut Assembler, cg: u64) -> Result<(), EncodeError> {
    a.mov(P, XZR)?;
    while_loop(
        a,
        |a, done| {
            slot(a, T1, S_WHOLE)?;
            a.cmp(P, T1)?;
            a.b_cond(Cond::Hs, done)
        },
        |a| {
            panel_setup(a)?;
            rows(a, |a| {
                row_walk(a, PIXELS, |a, pixels, checked| tile(a, cg, pixels, checked))
            })?;
            a.add(P, P, 1)
        },
    )
}

/// The ragged last panel (if any): its lane offsets, then every pixel.
fn ragged_panel(a: &mut Assembler) -> Result<(), EncodeError> {
    slot(a, P, S_WHOLE)?;
    while_loop(
        a,
        |a, done| {
            slot(a, T1, S_PANELS)?;
            a.cmp(P, T1)?;
            a.b_cond(Cond::Hs, done)
        },
        |a| {
            panel_setup(a)?;
            // lanes = cout − 16p; the last group = ⌈lanes / cout_g⌉ − 1.
            field(a, T1, offsets::COUT)?;
            a.lsl(T2, P, 4)?;
            a.sub(T1, T1, T2)?;
            put(a, T1, S_LANES)?;
            field(a, CI, offsets::COUT_G)?;
            a.add(T1, T1, CI)?;
            a.sub(T1, T1, 1)?;
            a.udiv(T1, T1, CI)?;
            a.sub(T3, T1, 1)?;
            field(a, T2, offsets::CIN_G)?;
            a.lsl(T2, T2, 2)?;
            for l in 0..PANEL {
                // min(l / cout_g, last) · 4 · cin_g
                a.mov(T1, l as i64)?;
                a.udiv(T1, T1, CI)?;
                a.cmp(T1, T3)?;
                a.csel(T1, T1, T3, Cond::Ls)?;
                a.mul(T1, T1, T2)?;
                put(a, T1, S_XO + 8 * l as i64)?;
            }
            rows(a, |a| {
                a.mov(OW, XZR)?;
                while_loop(
                    a,
                    |a, done| {
                        field(a, T1, offsets::OUT_W)?;
                        a.cmp(OW, T1)?;
                        a.b_cond(Cond::Hs, done)
                    },
                    |a| {
                        ragged_pixel(a)?;
                        a.add(OW, OW, 1)
                    },
                )
            })?;
            a.add(P, P, 1)
        },
    )
}

fn emit() -> Result<Vec<u32>, EncodeError> {
    let mut asm = Assembler::new();
    body(&mut asm)?;
    asm.finish()
}

fn body(a: &mut Assembler) -> Result<(), EncodeError> {
    enter(a, FRAME)?;
    field(a, T1, offsets::CIN_G)?;
    a.lsl(T1, T1, 6)?;
    put(a, T1, S_TAPB)?;
    // A panel's x: (16 / cout_g) · cin_g · 4 = 64 · cin_g / cout_g.
    field(a, T2, offsets::COUT_G)?;
    a.udiv(T3, T1, T2)?;
    put(a, T3, S_XSTEP)?;
    field(a, T2, offsets::K_H)?;
    a.mul(T1, T1, T2)?;
    field(a, T2, offsets::K_W)?;
    a.mul(T1, T1, T2)?;
    put(a, T1, S_PSTRIDE)?;
    field(a, T1, offsets::COUT)?;
    a.lsl(T1, T1, 2)?;
    put(a, T1, S_PIXOUT)?;
    field(a, T2, offsets::OUT_W)?;
    a.mul(T1, T1, T2)?;
    put(a, T1, S_ROWOUT)?;
    field(a, T1, offsets::COUT)?;
    a.lsr(T2, T1, 4)?;
    put(a, T2, S_WHOLE)?;
    // Panels ⌈cout / 16⌉ (not the args' `panels`, which counts the
    // direct layout's); the weights after their bias lines.
    a.add(T1, T1, 15)?;
    a.lsr(T1, T1, 4)?;
    put(a, T1, S_PANELS)?;
    field(a, T2, offsets::FILT)?;
    a.lsl(T1, T1, 6)?;
    a.add(T1, T1, T2)?;
    put(a, T1, S_WB)?;
    // One body a cout_g.
    let labels: Vec<Label> = BODIES.iter().map(|_| a.new_label()).collect();
    let ragged = a.new_label();
    field(a, T1, offsets::COUT_G)?;
    for (i, cg) in BODIES.iter().enumerate().take(BODIES.len() - 1) {
        a.cmp(T1, *cg as i64)?;
        a.b_cond(Cond::Eq, labels[i])?;
    }
    a.b(labels[BODIES.len() - 1])?;
    for (i, cg) in BODIES.iter().enumerate() {
        a.bind(labels[i])?;
        whole_panels(a, *cg)?;
        if i + 1 < BODIES.len() {
            a.b(ragged)?;
        }
    }
    a.bind(ragged)?;
    ragged_panel(a)?;
    leave(a, FRAME)
}
