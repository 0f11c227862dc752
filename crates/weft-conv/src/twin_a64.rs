//! arm64 (A64, NEON) twins of both arms: the same offer (packed filter,
//! row views), the body written with weft-a64, performing its arm's FMAs
//! per output in the arm's order (kh, kw, ci).
//!
//! The skeleton is the x64 twins' ([`crate::twin_x64`]) with one panel a
//! group: for each whole panel of 16 channels (four `.4s` vectors) and
//! each output row, the left border's pixels one at a time with column
//! checks, interior tiles of 6 pixels without, the interior's leftover as
//! tiles of 4, 2, 1 (each at most once), the right border one at a time.
//! A tile holds `pixels × 4` accumulators (6 × 4 = 24: v8–v31, so
//! `d8`–`d15` are saved). Per tap the direct tile runs a `ci` loop — the
//! panel's line for `ci` in v0–v3, one `ldr s` of x per pixel
//! (post-indexed) and `fmla acc.4s, w.4s, x.s[0]` (`w·x + acc` fused: the
//! contract's `fma(x, w, acc)` bit for bit, the product commutes exactly)
//! — and the depthwise tile loads the tap's line once and each pixel's
//! four vectors of x against it.
//!
//! Groups: the direct twin walks its panels in the layout's order, `p =
//! g · group_panels + q`, stepping `q` and, at a group's last panel, x's
//! and y's group offsets (`4 · cin_g`, `4 · cout_g`) with `p`; its `ci`
//! loop runs `cin_g` times, and the ragged panel is the one whose `16q`
//! reaches past `cout_g`.
//!
//! NEON has no masked loads or stores. The direct twin computes a ragged
//! last panel of a group whole (its lines are zero past `cout_g`, and x
//! is only broadcast from channels that exist) and stores it lane by lane
//! up to `cout_g`. The depthwise twin cannot load x's lanes past `cout` (they are
//! the next pixel's, or past the buffer), so its channels past the last
//! whole panel run one at a time, every pixel with row and column checks,
//! in scalar `fmadd` (`x·w + acc`), as the depthwise arm's tail does.
//!
//! The epilogue: ReLU is `fcmgt m, zero, acc` then `bic acc, acc, m`
//! (`0 > acc ? +0 : acc`, NaN and −0 kept); ReLU6 then `fcmgt m, acc,
//! six` and `bit acc, six, m` (`acc > 6 ? 6 : acc`).
//!
//! ABI: AAPCS64 leaf; the argument pointer stays in `x0`; only `x0`–`x17`
//! and `v0`–`v31` are written, `d8`–`d15` saved and restored; a 224-byte
//! frame holds loop state.

use std::sync::Arc;

use weft_a64::{d, mem, q, s, v, x, Assembler, Cond, EncodeError, Gpr, Label, SP, XZR};
use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};

use crate::arm::ArmKind;
use crate::{offsets, ConvGeometry, Shape, PANEL};

const NEON: &[Feature] = &[Feature::Neon];

/// Pixels in an interior tile, then the leftover tiles.
pub const PIXELS: (u64, [u64; 3]) = (6, [4, 2, 1]);

/// The NEON twin of an arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvA64(pub ArmKind);

/// The arm64 twins of `kind`'s offer.
pub fn twins(kind: ArmKind) -> Vec<Arc<dyn Twin>> {
    vec![Arc::new(ConvA64(kind))]
}

// SAFETY: the body reads x only at taps inside the input (rows and
// columns checked, interior tiles by `ow_lo..ow_hi`, which `ConvArgs`
// derives) and within the channels that exist (whole panels as vectors,
// the rest one at a time), the packed filter's lines, and writes y only
// in its rows and channels below cout; it returns normally, restoring
// d8–d15. Validation checks it against the arm.
unsafe impl Twin for ConvA64 {
    fn name(&self) -> &'static str {
        match self.0 {
            ArmKind::Direct => "conv.direct.twin.neon.6x16",
            ArmKind::Depthwise => "conv.depthwise.twin.neon.6x16",
        }
    }

    fn isa(&self) -> Isa {
        Isa::Aarch64
    }

    fn requires(&self) -> &'static [Feature] {
        NEON
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        crate::check_offer(
            self.name(),
            offer,
            self.0.family(),
            Some(crate::PackedFilter::layout(self.0)),
        )?;
        crate::twin_a64::native(self.name(), emit(self.0))
    }

    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        match ConvGeometry::from_geometry(&offer.contract.geometry) {
            Ok((g, s)) => crate::silu::after(nest(self.0, &g, &s), &g, &s, 4, false),
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
/// order the emitter writes its loops (module docs).
pub fn nest(kind: ArmKind, g: &ConvGeometry, s: &Shape) -> Vec<LoopTrip> {
    let rows = g.batch * s.out_h;
    let channels = kind == ArmKind::Direct;
    let taps = |out: &mut Vec<LoopTrip>, depth: u32, used: bool| {
        out.push(trip("kh", if used { g.k_h } else { 0 }, depth));
        out.push(trip("kw", g.k_w, depth + 1));
        if channels {
            out.push(trip("ci", g.cin / g.groups, depth + 2));
        }
    };
    let (tile, leftovers) = PIXELS;
    let tiles = (s.ow_hi - s.ow_lo) / tile;
    let panels = match kind {
        ArmKind::Direct => s.panels,
        ArmKind::Depthwise => g.cout / PANEL as u64,
    };
    let mut out = vec![trip("panels", panels, 0), trip("rows", rows, 1)];
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
    if kind == ArmKind::Direct {
        return out;
    }
    out.push(trip("channels", g.cout % PANEL as u64, 0));
    out.push(trip("rows", rows, 1));
    out.push(trip("columns", s.out_w, 2));
    taps(&mut out, 3, true);
    out
}

// General registers.
pub(crate) const ARGS: Gpr = x(0);
/// The panel (whole panels) or the channel (the tail).
pub(crate) const P: Gpr = x(1);
pub(crate) const ROW: Gpr = x(2);
pub(crate) const OW: Gpr = x(3);
pub(crate) const KH: Gpr = x(4);
pub(crate) const KW: Gpr = x(5);
pub(crate) const PW: Gpr = x(6);
pub(crate) const CI: Gpr = x(7);
/// x of tile pixels 0..6.
pub(crate) const PX: [Gpr; 6] = [x(8), x(9), x(10), x(11), x(12), x(13)];
pub(crate) const T1: Gpr = x(14);
pub(crate) const T2: Gpr = x(15);
pub(crate) const T3: Gpr = x(16);
/// Bytes between two pixels of a tile (`stride · cin · 4`).
pub(crate) const XS: Gpr = x(17);

// Stack slots (bytes above sp, below the saved d8–d15).
pub(crate) const S_XB: i64 = 0;
pub(crate) const S_IH0: i64 = 8;
pub(crate) const S_IW0: i64 = 16;
pub(crate) const S_XROW: i64 = 24;
pub(crate) const S_PIXIN: i64 = 32;
pub(crate) const S_ROWIN: i64 = 40;
pub(crate) const S_TAPB: i64 = 48;
pub(crate) const S_PIXOUT: i64 = 56;
pub(crate) const S_WB: i64 = 64;
pub(crate) const S_PSTRIDE: i64 = 72;
pub(crate) const S_WHOLE: i64 = 80;
pub(crate) const S_IMGIN: i64 = 88;
pub(crate) const S_ROWOUT: i64 = 96;
pub(crate) const S_YROW: i64 = 104;
/// The panel's weights (whole panels) or the channel's lane in its
/// panel's (the tail).
pub(crate) const S_WPANEL: i64 = 112;
/// The panel's (or the channel's) bias.
pub(crate) const S_BIASP: i64 = 120;
/// x's byte offset of the panel's (channel's) first channel: for direct,
/// its group's (`4 · g · cin_g`).
pub(crate) const S_XPANEL: i64 = 128;
/// y's byte offset of the panel's (channel's) first channel.
pub(crate) const S_YOFF: i64 = 136;
/// Direct: the panel's index within its group (`q`).
const S_Q: i64 = 144;
/// Direct: y's byte offset of the group's first channel (`4 · g ·
/// cout_g`).
const S_YG: i64 = 152;
const FRAME: i64 = 160;

pub(crate) fn acc(r: usize, u: usize) -> u8 {
    (8 + r * 4 + u) as u8
}

/// `reg ← field` of the arguments.
pub(crate) fn field(a: &mut Assembler, reg: Gpr, off: i32) -> Result<(), EncodeError> {
    a.ldr(reg, mem(ARGS).off(i64::from(off)))
}

pub(crate) fn slot(a: &mut Assembler, reg: Gpr, off: i64) -> Result<(), EncodeError> {
    a.ldr(reg, mem(SP).off(off))
}

pub(crate) fn put(a: &mut Assembler, reg: Gpr, off: i64) -> Result<(), EncodeError> {
    a.str(reg, mem(SP).off(off))
}

/// `while test { body }`: `test` branches to the label it is given to
/// leave.
pub(crate) fn while_loop(
    a: &mut Assembler,
    test: impl FnOnce(&mut Assembler, Label) -> Result<(), EncodeError>,
    body: impl FnOnce(&mut Assembler) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    let (head, done) = (a.new_label(), a.new_label());
    a.bind(head)?;
    test(a, done)?;
    body(a)?;
    a.b(head)?;
    a.bind(done)
}

/// The loops over a pixel's taps (x64's `taps`): `inner` emits the tap
/// with T1 holding its input column.
pub(crate) fn taps(
    a: &mut Assembler,
    checked: bool,
    inner: impl FnOnce(&mut Assembler) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    let (kh_head, kh_next, kh_done) = (a.new_label(), a.new_label(), a.new_label());
    let (kw_head, kw_next) = (a.new_label(), a.new_label());
    a.mov(KH, XZR)?;
    a.bind(kh_head)?;
    field(a, T1, offsets::K_H)?;
    a.cmp(KH, T1)?;
    a.b_cond(Cond::Hs, kh_done)?;
    field(a, T1, offsets::DIL)?;
    slot(a, T2, S_IH0)?;
    a.madd(T1, KH, T1, T2)?;
    field(a, T2, offsets::IN_H)?;
    a.cmp(T1, T2)?;
    a.b_cond(Cond::Hs, kh_next)?;
    slot(a, T2, S_ROWIN)?;
    slot(a, T3, S_XB)?;
    a.madd(T1, T1, T2, T3)?;
    put(a, T1, S_XROW)?;
    a.mov(KW, XZR)?;
    a.bind(kw_head)?;
    field(a, T1, offsets::K_W)?;
    a.cmp(KW, T1)?;
    a.b_cond(Cond::Hs, kh_next)?;
    field(a, T1, offsets::DIL)?;
    slot(a, T2, S_IW0)?;
    a.madd(T1, KW, T1, T2)?;
    if checked {
        field(a, T2, offsets::IN_W)?;
        a.cmp(T1, T2)?;
        a.b_cond(Cond::Hs, kw_next)?;
    }
    inner(a)?;
    a.bind(kw_next)?;
    a.add(KW, KW, 1)?;
    a.b(kw_head)?;
    a.bind(kh_next)?;
    a.add(KH, KH, 1)?;
    a.b(kh_head)?;
    a.bind(kh_done)
}

/// PX[0..pixels] ← x of the tap's pixels (T1 = the first's column),
/// PW ← the tap's weights (`S_WPANEL + (kh · k_w + kw) · S_TAPB`).
pub(crate) fn tap_pointers(a: &mut Assembler, pixels: usize) -> Result<(), EncodeError> {
    slot(a, T2, S_PIXIN)?;
    slot(a, T3, S_XROW)?;
    a.madd(PX[0], T1, T2, T3)?;
    for r in 1..pixels {
        a.add(PX[r], PX[r - 1], XS)?;
    }
    field(a, T1, offsets::K_W)?;
    a.madd(T1, KH, T1, KW)?;
    slot(a, T2, S_TAPB)?;
    slot(a, T3, S_WPANEL)?;
    a.madd(PW, T1, T2, T3)
}

/// The epilogue on the `.4s` registers `accs` (v4–v7 free).
pub(crate) fn epilogue(a: &mut Assembler, accs: &[u8]) -> Result<(), EncodeError> {
    let done = a.new_label();
    field(a, T1, offsets::ACT)?;
    a.cbz(T1, done)?;
    // SiLU is the pass after the tiles (crate::silu).
    a.cmp(T1, crate::silu::CODE as i64)?;
    a.b_cond(Cond::Eq, done)?;
    a.movi(v(5).d2(), 0)?;
    for &r in accs {
        a.fcmgt(v(4).s4(), v(5).s4(), v(r).s4())?;
        a.bic(v(r).b16(), v(r).b16(), v(4).b16())?;
    }
    a.cmp(T1, crate::Activation::Relu6 as i64)?;
    a.b_cond(Cond::Ne, done)?;
    let six = weft_a64::fimm(6.0).ok_or(EncodeError::NoMatchingForm {
        mnemonic: "fmov #6.0",
    })?;
    a.fmov(v(6).s4(), six)?;
    for &r in accs {
        a.fcmgt(v(4).s4(), v(r).s4(), v(6).s4())?;
        a.bit(v(r).b16(), v(6).b16(), v(4).b16())?;
    }
    a.bind(done)
}

/// One tile of `pixels` from `OW` × the panel (module docs).
fn tile(a: &mut Assembler, kind: ArmKind, pixels: usize, checked: bool) -> Result<(), EncodeError> {
    slot(a, T1, S_BIASP)?;
    for r in 0..pixels {
        for u in 0..4 {
            a.ldr(q(acc(r, u)), mem(T1).off(16 * u as i64))?;
        }
    }
    field(a, T1, offsets::STRIDE)?;
    field(a, T2, offsets::PAD)?;
    a.mul(T1, OW, T1)?;
    a.sub(T1, T1, T2)?;
    put(a, T1, S_IW0)?;
    taps(a, checked, |a| {
        tap_pointers(a, pixels)?;
        match kind {
            ArmKind::Direct => {
                let ci = a.new_label();
                field(a, CI, offsets::CIN_G)?;
                a.bind(ci)?;
                for u in 0..4u8 {
                    a.ldr(q(u), mem(PW).off(16 * i64::from(u)))?;
                }
                a.add(PW, PW, 64)?;
                for (r, &px) in PX.iter().enumerate().take(pixels) {
                    let t = 4 + (r % 4) as u8;
                    a.ldr(s(t), mem(px).post(4))?;
                    for u in 0..4 {
                        a.fmla(v(acc(r, u)).s4(), v(u as u8).s4(), v(t).s(0))?;
                    }
                }
                a.subs(CI, CI, 1)?;
                a.b_cond(Cond::Ne, ci)
            }
            ArmKind::Depthwise => {
                for u in 0..4u8 {
                    a.ldr(q(u), mem(PW).off(16 * i64::from(u)))?;
                }
                for (r, &px) in PX.iter().enumerate().take(pixels) {
                    for u in 0..4 {
                        let t = 4 + u as u8;
                        a.ldr(q(t), mem(px).off(16 * u as i64))?;
                        a.fmla(v(acc(r, u)).s4(), v(t).s4(), v(u as u8).s4())?;
                    }
                }
                Ok(())
            }
        }
    })?;
    let accs: Vec<u8> = (0..pixels)
        .flat_map(|r| (0..4).map(move |u| acc(r, u)))
        .collect();
    epilogue(a, &accs)?;
    slot(a, T2, S_PIXOUT)?;
    slot(a, T3, S_YROW)?;
    a.madd(T1, OW, T2, T3)?;
    let (ragged, done) = (a.new_label(), a.new_label());
    if kind == ArmKind::Direct {
        // T3 = the panel's channels below cout_g in its group (1..);
        // under 16: lanes.
        field(a, T3, offsets::COUT_G)?;
        slot(a, CI, S_Q)?;
        a.lsl(CI, CI, 4)?;
        a.sub(T3, T3, CI)?;
        a.cmp(T3, PANEL as i64)?;
        a.b_cond(Cond::Lo, ragged)?;
    }
    for r in 0..pixels {
        for u in 0..4 {
            a.str(q(acc(r, u)), mem(T1).off(16 * u as i64))?;
        }
        if r + 1 < pixels {
            a.add(T1, T1, T2)?;
        }
    }
    if kind == ArmKind::Direct {
        a.b(done)?;
        a.bind(ragged)?;
        for r in 0..pixels {
            let next = a.new_label();
            for l in 0..PANEL {
                a.cmp(T3, l as i64)?;
                a.b_cond(Cond::Ls, next)?;
                a.mov(s(4), v(acc(r, l / 4)).s((l % 4) as u8))?;
                a.str(s(4), mem(T1).off(4 * l as i64))?;
            }
            a.bind(next)?;
            if r + 1 < pixels {
                a.add(T1, T1, T2)?;
            }
        }
    }
    a.bind(done)
}

/// One output channel `P` of one pixel, scalar, every tap checked.
fn channel(a: &mut Assembler, kind: ArmKind) -> Result<(), EncodeError> {
    let accr = 16u8;
    slot(a, T1, S_BIASP)?;
    a.ldr(s(accr), mem(T1).off(0))?;
    field(a, T1, offsets::STRIDE)?;
    field(a, T2, offsets::PAD)?;
    a.mul(T1, OW, T1)?;
    a.sub(T1, T1, T2)?;
    put(a, T1, S_IW0)?;
    taps(a, true, |a| {
        tap_pointers(a, 1)?;
        match kind {
            ArmKind::Direct => {
                let ci = a.new_label();
                field(a, CI, offsets::CIN_G)?;
                a.bind(ci)?;
                a.ldr(s(4), mem(PX[0]).post(4))?;
                a.ldr(s(5), mem(PW).post(64))?;
                a.fmadd(s(accr), s(4), s(5), s(accr))?;
                a.subs(CI, CI, 1)?;
                a.b_cond(Cond::Ne, ci)
            }
            ArmKind::Depthwise => {
                a.ldr(s(4), mem(PX[0]).off(0))?;
                a.ldr(s(5), mem(PW).off(0))?;
                a.fmadd(s(accr), s(4), s(5), s(accr))
            }
        }
    })?;
    epilogue(a, &[accr])?;
    slot(a, T2, S_PIXOUT)?;
    slot(a, T3, S_YROW)?;
    a.madd(T1, OW, T2, T3)?;
    a.str(s(accr), mem(T1).off(0))
}

/// Per row: `S_XB` (the image, plus `S_XPANEL`), `S_IH0` and `S_YROW`
/// (the row's first output, plus `S_YOFF`).
pub(crate) fn row_setup(a: &mut Assembler) -> Result<(), EncodeError> {
    field(a, T2, offsets::OUT_H)?;
    a.udiv(T1, ROW, T2)?;
    a.msub(T2, T1, T2, ROW)?; // oh
    field(a, T3, offsets::STRIDE)?;
    a.mul(T2, T2, T3)?;
    field(a, T3, offsets::PAD)?;
    a.sub(T2, T2, T3)?;
    put(a, T2, S_IH0)?;
    slot(a, T2, S_IMGIN)?;
    field(a, T3, offsets::X)?;
    a.madd(T1, T1, T2, T3)?;
    slot(a, T2, S_XPANEL)?;
    a.add(T1, T1, T2)?;
    put(a, T1, S_XB)?;
    slot(a, T2, S_ROWOUT)?;
    field(a, T3, offsets::Y)?;
    a.madd(T1, ROW, T2, T3)?;
    slot(a, T2, S_YOFF)?;
    a.add(T1, T1, T2)?;
    put(a, T1, S_YROW)
}

/// `for ROW in row_start..row_end { row_setup; body }`.
pub(crate) fn rows(
    a: &mut Assembler,
    body: impl FnOnce(&mut Assembler) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    field(a, ROW, offsets::ROW_START)?;
    while_loop(
        a,
        |a, done| {
            field(a, T1, offsets::ROW_END)?;
            a.cmp(ROW, T1)?;
            a.b_cond(Cond::Hs, done)
        },
        |a| {
            row_setup(a)?;
            body(a)?;
            a.add(ROW, ROW, 1)
        },
    )
}

/// One output row from `OW = 0`: the left border a pixel at a time
/// (checked), interior tiles of `pixels.0` (unchecked) while they fit
/// below `ow_hi`, then each leftover width of `pixels.1` at most once,
/// then the right border a pixel at a time. `tile(a, pixels, checked)`
/// emits one tile at `OW`.
pub(crate) fn row_walk(
    a: &mut Assembler,
    (width, leftovers): (u64, [u64; 3]),
    tile: impl Fn(&mut Assembler, usize, bool) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    a.mov(OW, XZR)?;
    singles(a, offsets::OW_LO, |a| tile(a, 1, true))?;
    let fits = |a: &mut Assembler, h: u64, skip: Label| {
        a.add(T1, OW, h as i64)?;
        field(a, T2, offsets::OW_HI)?;
        a.cmp(T1, T2)?;
        a.b_cond(Cond::Hi, skip)
    };
    while_loop(
        a,
        |a, done| fits(a, width, done),
        |a| {
            tile(a, width as usize, false)?;
            a.add(OW, OW, width as i64)
        },
    )?;
    for h in leftovers {
        let skip = a.new_label();
        fits(a, h, skip)?;
        tile(a, h as usize, false)?;
        a.add(OW, OW, h as i64)?;
        a.bind(skip)?;
    }
    singles(a, offsets::OUT_W, |a| tile(a, 1, true))
}

/// `while OW < field { one(); OW += 1 }`: the border pixels, one at a
/// time (`one` emits a checked one-pixel tile).
fn singles(
    a: &mut Assembler,
    bound: i32,
    one: impl FnOnce(&mut Assembler) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    while_loop(
        a,
        |a, done| {
            field(a, T1, bound)?;
            a.cmp(OW, T1)?;
            a.b_cond(Cond::Hs, done)
        },
        |a| {
            one(a)?;
            a.add(OW, OW, 1)
        },
    )
}

fn emit(kind: ArmKind) -> Result<Vec<u32>, EncodeError> {
    let mut asm = Assembler::new();
    body(&mut asm, kind)?;
    asm.finish()
}

/// A body's words as `name`'s [`NativeCode`] (an encoding error refused
/// by name).
pub(crate) fn native(
    name: &str,
    words: Result<Vec<u32>, EncodeError>,
) -> Result<NativeCode, Refusal> {
    let words = words.map_err(|e| Refusal::EmitError {
        message: format!("{name}: {e}"),
    })?;
    Ok(NativeCode {
        isa: Isa::Aarch64,
        bytes: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
        pool: None,
        loops: Vec::new(),
    })
}

/// Save d8–d15, open a `frame`-byte frame, and store x's sizes in bytes
/// (`S_PIXIN`, `S_ROWIN`, `S_IMGIN`; `XS`, a tile's pixel step).
pub(crate) fn enter(a: &mut Assembler, frame: i64) -> Result<(), EncodeError> {
    a.stp(d(8), d(9), mem(SP).pre(-64))?;
    a.stp(d(10), d(11), mem(SP).off(16))?;
    a.stp(d(12), d(13), mem(SP).off(32))?;
    a.stp(d(14), d(15), mem(SP).off(48))?;
    a.sub(SP, SP, frame)?;
    field(a, T1, offsets::CIN)?;
    a.lsl(T1, T1, 2)?;
    put(a, T1, S_PIXIN)?;
    field(a, T2, offsets::STRIDE)?;
    a.mul(XS, T1, T2)?;
    field(a, T2, offsets::IN_W)?;
    a.mul(T1, T1, T2)?;
    put(a, T1, S_ROWIN)?;
    field(a, T2, offsets::IN_H)?;
    a.mul(T1, T1, T2)?;
    put(a, T1, S_IMGIN)
}

fn body(a: &mut Assembler, kind: ArmKind) -> Result<(), EncodeError> {
    enter(a, FRAME)?;
    match kind {
        ArmKind::Direct => {
            field(a, T1, offsets::CIN_G)?;
            a.lsl(T1, T1, 6)?;
        }
        ArmKind::Depthwise => a.mov(T1, 64)?,
    }
    put(a, T1, S_TAPB)?;
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
    a.lsr(T1, T1, 4)?;
    put(a, T1, S_WHOLE)?;
    // The weights after the bias lines: filt + panels · 64.
    field(a, T2, offsets::FILT)?;
    field(a, T1, offsets::PANELS)?;
    a.lsl(T1, T1, 6)?;
    a.add(T1, T1, T2)?;
    put(a, T1, S_WB)?;
    a.str(XZR, mem(SP).off(S_XPANEL))?;
    a.str(XZR, mem(SP).off(S_Q))?;
    a.str(XZR, mem(SP).off(S_YG))?;

    // Whole panels (direct: every panel, the ragged one stored by lane).
    a.mov(P, XZR)?;
    while_loop(
        a,
        |a, done| {
            match kind {
                ArmKind::Direct => field(a, T1, offsets::PANELS)?,
                ArmKind::Depthwise => slot(a, T1, S_WHOLE)?,
            }
            a.cmp(P, T1)?;
            a.b_cond(Cond::Hs, done)
        },
        |a| {
            slot(a, T1, S_PSTRIDE)?;
            slot(a, T2, S_WB)?;
            a.madd(T1, P, T1, T2)?;
            put(a, T1, S_WPANEL)?;
            a.lsl(T3, P, 6)?;
            match kind {
                ArmKind::Direct => {
                    // y: the group's channels, then the panel's in it.
                    slot(a, T1, S_Q)?;
                    a.lsl(T1, T1, 6)?;
                    slot(a, T2, S_YG)?;
                    a.add(T1, T1, T2)?;
                    put(a, T1, S_YOFF)?;
                }
                ArmKind::Depthwise => {
                    put(a, T3, S_YOFF)?;
                    put(a, T3, S_XPANEL)?;
                }
            }
            field(a, T2, offsets::FILT)?;
            a.add(T1, T2, T3)?;
            put(a, T1, S_BIASP)?;
            rows(a, |a| {
                row_walk(a, PIXELS, |a, pixels, checked| {
                    tile(a, kind, pixels, checked)
                })
            })?;
            if kind == ArmKind::Direct {
                next_panel(a)?;
            }
            a.add(P, P, 1)
        },
    )?;
    if kind == ArmKind::Direct {
        return epilogue_frame(a);
    }
    // The channels past the last whole panel, one at a time.
    slot(a, P, S_WHOLE)?;
    a.lsl(P, P, 4)?;
    while_loop(
        a,
        |a, done| {
            field(a, T1, offsets::COUT)?;
            a.cmp(P, T1)?;
            a.b_cond(Cond::Hs, done)
        },
        |a| {
            // Weights: the panel's, at the channel's lane.
            a.lsr(T1, P, 4)?;
            slot(a, T2, S_PSTRIDE)?;
            slot(a, T3, S_WB)?;
            a.madd(T1, T1, T2, T3)?;
            a.and(T2, P, 15)?;
            a.lsl(T2, T2, 2)?;
            a.add(T1, T1, T2)?;
            put(a, T1, S_WPANEL)?;
            a.lsl(T3, P, 2)?;
            put(a, T3, S_YOFF)?;
            if kind == ArmKind::Depthwise {
                put(a, T3, S_XPANEL)?;
            }
            field(a, T2, offsets::FILT)?;
            a.add(T1, T2, T3)?;
            put(a, T1, S_BIASP)?;
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
                        channel(a, kind)?;
                        a.add(OW, OW, 1)
                    },
                )
            })?;
            a.add(P, P, 1)
        },
    )?;
    epilogue_frame(a)
}

/// The direct group walk's step: `q + 1`, or at the group's last panel
/// `q = 0` and x's and y's group offsets on by `4 · cin_g`, `4 · cout_g`.
fn next_panel(a: &mut Assembler) -> Result<(), EncodeError> {
    let same = a.new_label();
    slot(a, T1, S_Q)?;
    a.add(T1, T1, 1)?;
    put(a, T1, S_Q)?;
    field(a, T2, offsets::GROUP_PANELS)?;
    a.cmp(T1, T2)?;
    a.b_cond(Cond::Ne, same)?;
    a.str(XZR, mem(SP).off(S_Q))?;
    field(a, T1, offsets::CIN_G)?;
    a.lsl(T1, T1, 2)?;
    slot(a, T2, S_XPANEL)?;
    a.add(T2, T2, T1)?;
    put(a, T2, S_XPANEL)?;
    field(a, T1, offsets::COUT_G)?;
    a.lsl(T1, T1, 2)?;
    slot(a, T2, S_YG)?;
    a.add(T2, T2, T1)?;
    put(a, T2, S_YG)?;
    a.bind(same)
}

/// Pop the frame, restore d8–d15, return.
fn epilogue_frame(a: &mut Assembler) -> Result<(), EncodeError> {
    leave(a, FRAME)
}

/// The SiLU pass over the call's rows, then pop a `frame`-byte frame,
/// restore d8–d15 and return.
pub(crate) fn leave(a: &mut Assembler, frame: i64) -> Result<(), EncodeError> {
    crate::silu::a64_pass(a, ARGS)?;
    a.add(SP, SP, frame)?;
    a.ldp(d(14), d(15), mem(SP).off(48))?;
    a.ldp(d(12), d(13), mem(SP).off(32))?;
    a.ldp(d(10), d(11), mem(SP).off(16))?;
    a.ldp(d(8), d(9), mem(SP).post(64))?;
    a.ret()
}
