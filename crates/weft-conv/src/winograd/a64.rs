//! The arm64 (A64, NEON) twin of the Winograd arm: blocks of 6 tiles ×
//! 16 output channels, the arm's offer and packed `U`, the contract's
//! operations per output, written with weft-a64.
//!
//! The skeleton is the x64 twins' ([`super::x64`]): a call walks the
//! tiles of its rows in flattened `(b, th, tw)` order, in blocks of 6
//! consecutive tiles (a block may span tile rows and images; the call's
//! last one is cut short: its missing tiles read only padding and store
//! nothing). Per block:
//!
//! 1. **V** (`v_tiles`, `v_vec`, `v_one`): per tile, its 16 input
//!    pointers — the pixel `(2·th − pad + i, 2·tw − pad + j)` of x, or a
//!    line of zeros on the stack when it lies outside (NEON has no masked
//!    loads; the zero line stands in for them) — then per four input
//!    channels (`.4s`) and for the `cin % 4` left one at a time (scalar
//!    `s` registers: the same IEEE operations per lane), the row step
//!    `e = d B` and the column step `V = Bᵀ e` in registers (d in v0–v3,
//!    e in v4–v19, V in v0–v3 and v20–v31), stored to `V[ξ][t][ci]` on the
//!    stack (`16 · 6 · cin` floats).
//! 2. **Products** (`panels`, `xi`, `ci`): per panel of 16 output
//!    channels and position ξ, 6 × 4 accumulators v8–v31 from +0; per
//!    `ci` the panel's line of `U` in v0–v3, one `ldr s` of `V[ξ][t][ci]`
//!    per tile (post-indexed) and `fmla acc.4s, u.4s, v.s[0]` (`u·v + acc`
//!    fused: the contract's `fma(V, U, m)` bit for bit, the product
//!    commutes exactly); the accumulators go to `M[ξ][t]` on the stack.
//! 3. **Output** (`o_tiles`): per tile and vector of four channels,
//!    `Y = Aᵀ M A` from the stack in the contract's order, `+ bias`, the
//!    epilogue, and the stores of the pixels in the call's rows and the
//!    image's columns: whole `.4s` vectors when the panel is whole, lane
//!    by lane up to `cout` otherwise (the packed lines past `cout` are
//!    zero, so a ragged panel is computed whole).
//!
//! The epilogue is the direct NEON twin's ([`crate::twin_a64`]): ReLU is
//! `fcmgt m, zero, acc` then `bic acc, acc, m` (`0 > acc ? +0 : acc`, NaN
//! and −0 kept); ReLU6 then `fcmgt m, acc, six` and `bit acc, six, m`
//! (`acc > 6 ? 6 : acc`). `fmax zero, acc` would not do: it orders −0
//! below +0 and so turns −0 into +0, which the contract keeps.
//!
//! ABI: AAPCS64 leaf; the argument pointer stays in `x0`; only `x0`–`x17`
//! and `v0`–`v31` are written, `d8`–`d15` saved and restored. The frame
//! is fixed (under [`super::STACK_BYTES`]), allocated a page at a time
//! with a touch of each (no probe call: bodies are leaves).

use std::sync::Arc;

use weft_a64::{d, mem, q, s, v, x, Arr, Assembler, Cond, EncodeError, Gpr, Label, Op, SP, XZR};
use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};

use super::{check_offer, tiles, trip, MAX_CIN};
use crate::{offsets, ConvGeometry, Shape, PANEL};

const NEON: &[Feature] = &[Feature::Neon];

/// Tiles per block (the register tile's rows).
pub const TILES: usize = 6;

/// The Winograd arm's NEON twin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WinogradA64;

/// The Winograd arm's arm64 twins.
pub fn twins() -> Vec<Arc<dyn Twin>> {
    vec![Arc::new(WinogradA64)]
}

// SAFETY: the body reads x only at pixels inside the input (rows and
// columns checked; outside, its own zero line) and channels below cin
// (whole vectors of four, the rest one at a time), the packed filter's
// lines, its own frame (which it allocates page by page), and writes y
// only in its rows, columns below out_w and channels below cout (lane by
// lane in a ragged panel); it returns normally, restoring d8–d15.
// Validation checks it against the arm.
unsafe impl Twin for WinogradA64 {
    fn name(&self) -> &'static str {
        "conv.direct.winograd.twin.neon.6x16"
    }

    fn isa(&self) -> Isa {
        Isa::Aarch64
    }

    fn requires(&self) -> &'static [Feature] {
        NEON
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        check_offer(self.name(), offer)?;
        crate::twin_a64::native(self.name(), emit())
    }

    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        match ConvGeometry::from_geometry(&offer.contract.geometry) {
            Ok((g, s)) => crate::silu::after(nest(&g, &s), &g, &s, 4, false),
            Err(_) => offer.loops.clone(),
        }
    }
}

/// The twin's loop nest at `g` for a call over every row, in the order
/// the emitter writes its loops (module docs).
pub fn nest(g: &ConvGeometry, s: &Shape) -> Vec<LoopTrip> {
    let (th, tw) = tiles(s);
    let t = TILES as u64;
    let blocks = (g.batch * th * tw).div_ceil(t);
    vec![
        trip("blocks", blocks, 0),
        trip("v_tiles", t, 1),
        trip("v_vec", g.cin / 4, 2),
        trip("v_one", g.cin % 4, 2),
        trip("panels", s.panels, 1),
        trip("xi", 16, 2),
        trip("ci", g.cin, 3),
        trip("o_tiles", t, 2),
    ]
}

// General registers.
const ARGS: Gpr = x(0);
/// The block's tile (V and output phases).
const TT: Gpr = x(1);
/// The chunk's byte offset in a pixel's channels (V phase).
const CH: Gpr = x(2);
/// The tile's info (V phase: then its V row).
const R: Gpr = x(3);
/// The position (products).
const XI: Gpr = x(4);
const PW: Gpr = x(5);
const CI: Gpr = x(6);
/// V of the block's tiles at the current ci (products).
const PX: [Gpr; TILES] = [x(7), x(8), x(9), x(10), x(11), x(12)];
const T1: Gpr = x(13);
const T2: Gpr = x(14);
const T3: Gpr = x(15);
const T4: Gpr = x(16);
const T5: Gpr = x(17);

// Scalar slots (bytes above sp).
const S_PIXIN: i64 = 0;
const S_ROWIN: i64 = 8;
const S_IMGIN: i64 = 16;
const S_PIXOUT: i64 = 24;
const S_ROWOUT: i64 = 32;
const S_TILESW: i64 = 40;
const S_UB: i64 = 48;
const S_CIBYTES: i64 = 56;
const S_XISTRIDE: i64 = 64;
/// Bytes of a tile's row of V (`cin · 4`).
const S_XS: i64 = 72;
/// Bytes of a position's rows of V (`6 · cin · 4`).
const S_VXI: i64 = 80;
const S_TH: i64 = 88;
const S_TW: i64 = 96;
const S_IMGROW: i64 = 104;
const S_XIMG: i64 = 112;
/// The panel of 16 output channels.
const S_P: i64 = 120;
/// The panel's `U` for ξ = 0, ci = 0.
const S_UG: i64 = 128;
/// The panel's bias.
const S_BIAS: i64 = 136;
/// Output channels from the panel's first to cout.
const S_LEFT: i64 = 144;
/// The V region and the zero line (absolute).
const S_VB: i64 = 152;
const S_ZB: i64 = 160;
/// `cin · 4` and its whole vectors' part (`⌊cin/4⌋ · 16`).
const S_CIN4: i64 = 168;
const S_CIN4V: i64 = 176;
/// The tile's 16 input pointers, `4i + j`.
const S_PTR: i64 = 256;
/// Per block tile `t`, 64 bytes at `S_TILES + 64 t`.
const S_TILES: i64 = 512;
const T_IH0: i64 = 0;
const T_IW0: i64 = 8;
const T_XIMG: i64 = 16;
const T_YPIX: i64 = 24;
const T_ST0: i64 = 32;
const T_ST1: i64 = 40;
const T_STC1: i64 = 48;
/// The zero line: `MAX_CIN` floats.
const S_ZERO: i64 = 1024;
/// `M[ξ][t][u]`, 64 bytes a tile, [`M_XI`] a position.
const S_M: i64 = S_ZERO + 4 * MAX_CIN as i64;
const M_XI: i64 = 64 * TILES as i64;
/// `V[ξ][t][ci]`.
const S_V: i64 = (S_M + 16 * M_XI + 4095) / 4096 * 4096;

/// The whole frame below the saved d8–d15, a multiple of 4096.
pub const FRAME: i64 = (S_V + 16 * TILES as i64 * 4 * MAX_CIN as i64 + 4095) / 4096 * 4096;

fn acc(t: usize, u: usize) -> u8 {
    (8 + 4 * t + u) as u8
}

/// `reg ← field` of the arguments.
fn field(a: &mut Assembler, reg: Gpr, off: i32) -> Result<(), EncodeError> {
    a.ldr(reg, mem(ARGS).off(i64::from(off)))
}

fn slot(a: &mut Assembler, reg: Gpr, off: i64) -> Result<(), EncodeError> {
    a.ldr(reg, mem(SP).off(off))
}

fn put(a: &mut Assembler, reg: Gpr, off: i64) -> Result<(), EncodeError> {
    a.str(reg, mem(SP).off(off))
}

/// `reg ← sp + off` (`off` below 2²⁴; clobbers nothing else).
fn sp_plus(a: &mut Assembler, reg: Gpr, off: i64) -> Result<(), EncodeError> {
    a.mov(reg, SP)?;
    if off < 4096 {
        return a.add(reg, reg, off);
    }
    a.add(reg, reg, off & 0xfff)?;
    a.op(Op::ADD_IMM_X, (reg, reg, off >> 12, 12))
}

/// `while test { body }`: `test` branches to the label it is given to
/// leave.
fn while_loop(
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

/// `for reg in 0..n { body }` with `n` a constant.
fn counted(
    a: &mut Assembler,
    reg: Gpr,
    n: i64,
    body: impl FnOnce(&mut Assembler) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    a.mov(reg, XZR)?;
    while_loop(
        a,
        |a, done| {
            a.cmp(reg, n)?;
            a.b_cond(Cond::Hs, done)
        },
        |a| {
            body(a)?;
            a.add(reg, reg, 1)
        },
    )
}

/// The epilogue on the `.4s` registers `accs` (`tmp` three free ones).
fn epilogue(a: &mut Assembler, accs: &[u8], tmp: [u8; 3]) -> Result<(), EncodeError> {
    let [m, zero, six] = tmp;
    let done = a.new_label();
    field(a, T1, offsets::ACT)?;
    a.cbz(T1, done)?;
    // SiLU is the pass after the tiles (crate::silu).
    a.cmp(T1, crate::silu::CODE as i64)?;
    a.b_cond(Cond::Eq, done)?;
    a.movi(v(zero).d2(), 0)?;
    for &r in accs {
        a.fcmgt(v(m).s4(), v(zero).s4(), v(r).s4())?;
        a.bic(v(r).b16(), v(r).b16(), v(m).b16())?;
    }
    a.cmp(T1, crate::Activation::Relu6 as i64)?;
    a.b_cond(Cond::Ne, done)?;
    let k6 = weft_a64::fimm(6.0).ok_or(EncodeError::NoMatchingForm {
        mnemonic: "fmov #6.0",
    })?;
    a.fmov(v(six).s4(), k6)?;
    for &r in accs {
        a.fcmgt(v(m).s4(), v(r).s4(), v(six).s4())?;
        a.bit(v(r).b16(), v(six).b16(), v(m).b16())?;
    }
    a.bind(done)
}

/// Set up tile `TT` of the block from the cursor (its info at `R`), and
/// advance the cursor if the tile is in the call.
fn tile_setup(a: &mut Assembler) -> Result<(), EncodeError> {
    let (invalid, done) = (a.new_label(), a.new_label());
    sp_plus(a, R, S_TILES)?;
    a.lsl(T1, TT, 6)?;
    a.add(R, R, T1)?;
    // r0 = imgrow + 2·th.
    slot(a, T1, S_TH)?;
    a.add(T1, T1, T1)?;
    slot(a, T2, S_IMGROW)?;
    a.add(T1, T1, T2)?;
    field(a, T2, offsets::ROW_END)?;
    a.cmp(T1, T2)?;
    a.b_cond(Cond::Hs, invalid)?;
    // st0 = r0 ≥ row_start.
    field(a, T2, offsets::ROW_START)?;
    a.cmp(T1, T2)?;
    a.cset(T3, Cond::Hs)?;
    a.str(T3, mem(R).off(T_ST0))?;
    // st1 = r0 + 1 < row_end and 2·th + 1 < out_h.
    a.add(T3, T1, 1)?;
    field(a, T2, offsets::ROW_END)?;
    a.cmp(T3, T2)?;
    a.cset(T3, Cond::Lo)?;
    slot(a, T2, S_TH)?;
    a.add(T2, T2, T2)?;
    a.add(T2, T2, 1)?;
    field(a, T4, offsets::OUT_H)?;
    a.cmp(T2, T4)?;
    a.cset(T4, Cond::Lo)?;
    a.and(T3, T3, T4)?;
    a.str(T3, mem(R).off(T_ST1))?;
    // ypix = y + (r0 · out_w + 2·tw) · pixout.
    field(a, T2, offsets::OUT_W)?;
    a.mul(T1, T1, T2)?;
    slot(a, T2, S_TW)?;
    a.add(T2, T2, T2)?;
    a.add(T1, T1, T2)?;
    slot(a, T3, S_PIXOUT)?;
    field(a, T4, offsets::Y)?;
    a.madd(T1, T1, T3, T4)?;
    a.str(T1, mem(R).off(T_YPIX))?;
    // stc1 = 2·tw + 1 < out_w; iw0 = 2·tw − pad.
    a.add(T3, T2, 1)?;
    field(a, T4, offsets::OUT_W)?;
    a.cmp(T3, T4)?;
    a.cset(T3, Cond::Lo)?;
    a.str(T3, mem(R).off(T_STC1))?;
    field(a, T4, offsets::PAD)?;
    a.sub(T2, T2, T4)?;
    a.str(T2, mem(R).off(T_IW0))?;
    // ih0 = 2·th − pad.
    slot(a, T2, S_TH)?;
    a.add(T2, T2, T2)?;
    a.sub(T2, T2, T4)?;
    a.str(T2, mem(R).off(T_IH0))?;
    slot(a, T2, S_XIMG)?;
    a.str(T2, mem(R).off(T_XIMG))?;
    // Advance: tw + 1, or the next tile row, or the next image.
    slot(a, T1, S_TW)?;
    a.add(T1, T1, 1)?;
    put(a, T1, S_TW)?;
    slot(a, T2, S_TILESW)?;
    a.cmp(T1, T2)?;
    a.b_cond(Cond::Lo, done)?;
    a.str(XZR, mem(SP).off(S_TW))?;
    slot(a, T1, S_TH)?;
    a.add(T1, T1, 1)?;
    put(a, T1, S_TH)?;
    a.add(T1, T1, T1)?;
    field(a, T2, offsets::OUT_H)?;
    a.cmp(T1, T2)?;
    a.b_cond(Cond::Lo, done)?;
    a.str(XZR, mem(SP).off(S_TH))?;
    slot(a, T1, S_IMGROW)?;
    a.add(T1, T1, T2)?;
    put(a, T1, S_IMGROW)?;
    slot(a, T1, S_XIMG)?;
    slot(a, T2, S_IMGIN)?;
    a.add(T1, T1, T2)?;
    put(a, T1, S_XIMG)?;
    a.b(done)?;
    // A tile past the call: every row outside, nothing stored.
    a.bind(invalid)?;
    a.mov(T1, 1i64 << 62)?;
    a.str(T1, mem(R).off(T_IH0))?;
    a.str(XZR, mem(R).off(T_IW0))?;
    a.str(XZR, mem(R).off(T_ST0))?;
    a.str(XZR, mem(R).off(T_ST1))?;
    a.str(XZR, mem(R).off(T_STC1))?;
    field(a, T1, offsets::X)?;
    a.str(T1, mem(R).off(T_XIMG))?;
    field(a, T1, offsets::Y)?;
    a.str(T1, mem(R).off(T_YPIX))?;
    a.bind(done)
}

/// The tile's 16 input pointers (info at `R`): x's pixel, or the zero
/// line when the row or the column is outside. Uses x4–x12 and CH.
fn tile_pointers(a: &mut Assembler) -> Result<(), EncodeError> {
    let off = |j: usize| x(4 + j as u8);
    let okc = |j: usize| x(8 + j as u8);
    a.ldr(T4, mem(R).off(T_IW0))?;
    slot(a, T1, S_PIXIN)?;
    field(a, T3, offsets::IN_W)?;
    for j in 0..4 {
        a.add(T2, T4, j as i64)?;
        a.mul(off(j), T2, T1)?;
        a.cmp(T2, T3)?;
        a.cset(okc(j), Cond::Lo)?;
    }
    a.ldr(x(12), mem(R).off(T_XIMG))?;
    a.ldr(T4, mem(R).off(T_IH0))?;
    slot(a, T5, S_ZB)?;
    for i in 0..4 {
        // T1 = ih, T3 = inside, T2 = the row.
        a.add(T1, T4, i as i64)?;
        field(a, T3, offsets::IN_H)?;
        a.cmp(T1, T3)?;
        a.cset(T3, Cond::Lo)?;
        slot(a, T2, S_ROWIN)?;
        a.madd(T2, T1, T2, x(12))?;
        for j in 0..4 {
            a.and(CH, T3, okc(j))?;
            a.add(T1, T2, off(j))?;
            a.cmp(CH, 0)?;
            a.csel(T1, T1, T5, Cond::Ne)?;
            put(a, T1, S_PTR + 8 * (4 * i + j) as i64)?;
        }
    }
    Ok(())
}

/// The register of `V[ξ]` in a chunk (module docs).
fn vreg(xi: usize) -> u8 {
    if xi < 4 {
        xi as u8
    } else {
        (16 + xi) as u8
    }
}

/// One chunk of the tile's input channels at `CH`: four (`vector`) or
/// one, V stored at `R + CH + ξ · VXI`.
fn chunk(a: &mut Assembler, vector: bool) -> Result<(), EncodeError> {
    type Op = fn(&mut Assembler, u8, u8, u8) -> Result<(), EncodeError>;
    let (add, sub): (Op, Op) = if vector {
        (
            |a, d, n, m| a.fadd(v(d).s4(), v(n).s4(), v(m).s4()),
            |a, d, n, m| a.fsub(v(d).s4(), v(n).s4(), v(m).s4()),
        )
    } else {
        (
            |a, d, n, m| a.fadd(s(d), s(n), s(m)),
            |a, d, n, m| a.fsub(s(d), s(n), s(m)),
        )
    };
    let reg = |r: u8| if vector { q(r) } else { s(r) };
    let e = |i: usize, j: usize| (4 + 4 * i + j) as u8;
    // Rows: e[i][·] = d[i][·] B.
    for i in 0..4 {
        for j in 0..4u8 {
            let p = x(4 + j);
            slot(a, p, S_PTR + 8 * (4 * i as i64 + i64::from(j)))?;
            a.ldr(reg(j), mem(p).idx(CH))?;
        }
        sub(a, e(i, 0), 0, 2)?; // d0 − d2
        add(a, e(i, 1), 1, 2)?; // d1 + d2
        sub(a, e(i, 2), 2, 1)?; // d2 − d1
        sub(a, e(i, 3), 1, 3)?; // d1 − d3
    }
    // Columns: V[·][j] = Bᵀ e[·][j], at ξ = 4i + j.
    for j in 0..4 {
        sub(a, vreg(j), e(0, j), e(2, j))?; // e0 − e2
        add(a, vreg(4 + j), e(1, j), e(2, j))?; // e1 + e2
        sub(a, vreg(8 + j), e(2, j), e(1, j))?; // e2 − e1
        sub(a, vreg(12 + j), e(1, j), e(3, j))?; // e1 − e3
    }
    a.add(T1, R, CH)?;
    slot(a, T2, S_VXI)?;
    for xi in 0..16 {
        a.str(reg(vreg(xi)), mem(T1))?;
        if xi < 15 {
            a.add(T1, T1, T2)?;
        }
    }
    Ok(())
}

/// The panel's products at position `XI` into `M[ξ]`.
fn products(a: &mut Assembler) -> Result<(), EncodeError> {
    for t in 0..TILES {
        for u in 0..4 {
            a.movi(v(acc(t, u)).d2(), 0)?;
        }
    }
    slot(a, T1, S_XISTRIDE)?;
    slot(a, T2, S_UG)?;
    a.madd(PW, XI, T1, T2)?;
    slot(a, T1, S_VXI)?;
    slot(a, T2, S_VB)?;
    a.madd(PX[0], XI, T1, T2)?;
    slot(a, T1, S_XS)?;
    for t in 1..TILES {
        a.add(PX[t], PX[t - 1], T1)?;
    }
    field(a, CI, offsets::CIN)?;
    let ci = a.new_label();
    a.bind(ci)?;
    a.ldp(q(0), q(1), mem(PW))?;
    a.ldp(q(2), q(3), mem(PW).off(32))?;
    a.add(PW, PW, 2 * 64)?;
    for (t, &px) in PX.iter().enumerate() {
        let b = 4 + (t % 4) as u8;
        a.ldr(s(b), mem(px).post(4))?;
        for u in 0..4u8 {
            a.fmla(v(acc(t, u as usize)).s4(), v(u).s4(), v(b).s(0))?;
        }
    }
    a.subs(CI, CI, 1)?;
    a.b_cond(Cond::Ne, ci)?;
    // M[ξ] at sp + S_M + ξ · M_XI.
    a.mov(T1, M_XI)?;
    sp_plus(a, T2, S_M)?;
    a.madd(T1, XI, T1, T2)?;
    for t in 0..TILES {
        for u in (0..4).step_by(2) {
            a.stp(
                q(acc(t, u)),
                q(acc(t, u + 1)),
                mem(T1).off(64 * t as i64 + 16 * u as i64),
            )?;
        }
    }
    Ok(())
}

/// The output transform of tile `TT` for the panel, stored.
fn output(a: &mut Assembler) -> Result<(), EncodeError> {
    // R = the tile's info, T5 = its M, T4 = the panel's bias.
    sp_plus(a, R, S_TILES)?;
    a.lsl(T1, TT, 6)?;
    a.add(R, R, T1)?;
    sp_plus(a, T5, S_M)?;
    a.add(T5, T5, T1)?;
    slot(a, T4, S_BIAS)?;
    // Y of pixel p = 2a + c, vector u, in v(16 + 4p + u).
    let y = |p: usize, u: usize| (16 + 4 * p + u) as u8;
    for u in 0..4usize {
        let m = |xi: usize| mem(T5).off(xi as i64 * M_XI + 16 * u as i64);
        for j in 0..4usize {
            for k in 0..4u8 {
                a.ldr(q(k), m(4 * k as usize + j))?;
            }
            let (r0, r1) = ((4 + j) as u8, (8 + j) as u8);
            a.fadd(v(r0).s4(), v(0).s4(), v(1).s4())?; // M0 + M1
            a.fadd(v(r0).s4(), v(r0).s4(), v(2).s4())?; // + M2
            a.fsub(v(r1).s4(), v(1).s4(), v(2).s4())?; // M1 − M2
            a.fsub(v(r1).s4(), v(r1).s4(), v(3).s4())?; // − M3
        }
        for row in 0..2usize {
            let r = |j: usize| (4 + 4 * row + j) as u8;
            let (y0, y1) = (y(2 * row, u), y(2 * row + 1, u));
            a.fadd(v(y0).s4(), v(r(0)).s4(), v(r(1)).s4())?; // r0 + r1
            a.fadd(v(y0).s4(), v(y0).s4(), v(r(2)).s4())?; // + r2
            a.fsub(v(y1).s4(), v(r(1)).s4(), v(r(2)).s4())?; // r1 − r2
            a.fsub(v(y1).s4(), v(y1).s4(), v(r(3)).s4())?; // − r3
        }
        a.ldr(q(12), mem(T4).off(16 * u as i64))?;
        for p in 0..4 {
            a.fadd(v(y(p, u)).s4(), v(y(p, u)).s4(), v(12).s4())?;
        }
    }
    let accs: Vec<u8> = (16..32).collect();
    epilogue(a, &accs, [13, 14, 15])?;
    // The stores: T1 = the tile's first pixel at the panel.
    a.ldr(T1, mem(R).off(T_YPIX))?;
    slot(a, T2, S_P)?;
    a.lsl(T2, T2, 6)?;
    a.add(T1, T1, T2)?;
    slot(a, T2, S_LEFT)?;
    for p in 0..4usize {
        let (row, right) = (p / 2, p % 2 == 1);
        let skip = a.new_label();
        a.ldr(T3, mem(R).off(if row == 0 { T_ST0 } else { T_ST1 }))?;
        a.cbz(T3, skip)?;
        if right {
            a.ldr(T3, mem(R).off(T_STC1))?;
            a.cbz(T3, skip)?;
        }
        // T3 = the pixel.
        a.mov(T3, T1)?;
        if row == 1 {
            slot(a, CH, S_ROWOUT)?;
            a.add(T3, T3, CH)?;
        }
        if right {
            slot(a, CH, S_PIXOUT)?;
            a.add(T3, T3, CH)?;
        }
        let ragged = a.new_label();
        a.cmp(T2, PANEL as i64)?;
        a.b_cond(Cond::Lo, ragged)?;
        a.stp(q(y(p, 0)), q(y(p, 1)), mem(T3))?;
        a.stp(q(y(p, 2)), q(y(p, 3)), mem(T3).off(32))?;
        a.b(skip)?;
        a.bind(ragged)?;
        for l in 0..PANEL {
            a.cmp(T2, l as i64)?;
            a.b_cond(Cond::Ls, skip)?;
            a.mov(s(13), v(y(p, l / 4)).s((l % 4) as u8))?;
            a.str(s(13), mem(T3).off(4 * l as i64))?;
        }
        a.bind(skip)?;
    }
    Ok(())
}

/// Panel `S_P`'s pointers: `U`, the bias and the channels left.
fn panel_setup(a: &mut Assembler) -> Result<(), EncodeError> {
    slot(a, T1, S_P)?;
    a.lsr(T2, T1, 1)?;
    slot(a, T3, S_CIBYTES)?;
    slot(a, T4, S_UB)?;
    a.madd(T2, T2, T3, T4)?;
    a.and(T3, T1, 1)?;
    a.lsl(T3, T3, 6)?;
    a.add(T2, T2, T3)?;
    put(a, T2, S_UG)?;
    a.lsl(T2, T1, 6)?;
    field(a, T3, offsets::FILT)?;
    a.add(T3, T3, T2)?;
    put(a, T3, S_BIAS)?;
    a.lsl(T2, T1, 4)?;
    field(a, T3, offsets::COUT)?;
    a.sub(T3, T3, T2)?;
    put(a, T3, S_LEFT)
}

fn emit() -> Result<Vec<u32>, EncodeError> {
    let mut asm = Assembler::new();
    body(&mut asm)?;
    asm.finish()
}

fn body(a: &mut Assembler) -> Result<(), EncodeError> {
    a.stp(d(8), d(9), mem(SP).pre(-64))?;
    a.stp(d(10), d(11), mem(SP).off(16))?;
    a.stp(d(12), d(13), mem(SP).off(32))?;
    a.stp(d(14), d(15), mem(SP).off(48))?;
    // The frame, a page at a time, each page touched.
    for _ in 0..FRAME / 4096 {
        a.op(Op::SUB_IMM_X, (SP, SP, 1, 12))?;
        a.str(XZR, mem(SP))?;
    }
    // Sizes in bytes, once.
    field(a, T1, offsets::CIN)?;
    a.lsl(T1, T1, 2)?;
    put(a, T1, S_PIXIN)?;
    put(a, T1, S_XS)?;
    put(a, T1, S_CIN4)?;
    a.mov(T2, TILES as i64)?;
    a.mul(T2, T1, T2)?;
    put(a, T2, S_VXI)?;
    a.and(T2, T1, !15i64)?;
    put(a, T2, S_CIN4V)?;
    field(a, T2, offsets::IN_W)?;
    a.mul(T1, T1, T2)?;
    put(a, T1, S_ROWIN)?;
    field(a, T2, offsets::IN_H)?;
    a.mul(T1, T1, T2)?;
    put(a, T1, S_IMGIN)?;
    field(a, T1, offsets::COUT)?;
    a.lsl(T1, T1, 2)?;
    put(a, T1, S_PIXOUT)?;
    field(a, T2, offsets::OUT_W)?;
    a.mul(T1, T1, T2)?;
    put(a, T1, S_ROWOUT)?;
    field(a, T1, offsets::OUT_W)?;
    a.add(T1, T1, 1)?;
    a.lsr(T1, T1, 1)?;
    put(a, T1, S_TILESW)?;
    // Panels of 32: two bias lines each, then U.
    field(a, T1, offsets::PANELS)?;
    a.add(T1, T1, 1)?;
    a.lsr(T1, T1, 1)?;
    a.lsl(T2, T1, 7)?;
    field(a, T3, offsets::FILT)?;
    a.add(T2, T2, T3)?;
    put(a, T2, S_UB)?;
    field(a, T2, offsets::CIN)?;
    a.lsl(T2, T2, 7)?;
    put(a, T2, S_CIBYTES)?;
    a.mul(T2, T2, T1)?;
    put(a, T2, S_XISTRIDE)?;
    sp_plus(a, T1, S_V)?;
    put(a, T1, S_VB)?;
    // The zero line.
    sp_plus(a, T1, S_ZERO)?;
    put(a, T1, S_ZB)?;
    for r in 0..4 {
        a.movi(v(r).d2(), 0)?;
    }
    for _ in 0..4 * MAX_CIN / 64 {
        a.st1(v(0).list(4, Arr::S4), mem(T1).post(64))?;
    }
    // The cursor.
    field(a, T1, offsets::OH_START)?;
    a.lsr(T1, T1, 1)?;
    put(a, T1, S_TH)?;
    a.str(XZR, mem(SP).off(S_TW))?;
    field(a, T1, offsets::IMG_START)?;
    field(a, T2, offsets::OUT_H)?;
    a.mul(T2, T1, T2)?;
    put(a, T2, S_IMGROW)?;
    slot(a, T2, S_IMGIN)?;
    field(a, T3, offsets::X)?;
    a.madd(T1, T1, T2, T3)?;
    put(a, T1, S_XIMG)?;

    while_loop(
        a,
        |a, done| {
            slot(a, T1, S_TH)?;
            a.add(T1, T1, T1)?;
            slot(a, T2, S_IMGROW)?;
            a.add(T1, T1, T2)?;
            field(a, T2, offsets::ROW_END)?;
            a.cmp(T1, T2)?;
            a.b_cond(Cond::Hs, done)
        },
        |a| {
            // V for the block's tiles.
            counted(a, TT, TILES as i64, |a| {
                tile_setup(a)?;
                tile_pointers(a)?;
                // R = the tile's row of V.
                slot(a, T1, S_XS)?;
                slot(a, T2, S_VB)?;
                a.madd(R, TT, T1, T2)?;
                a.mov(CH, XZR)?;
                for (vector, end, step) in [(true, S_CIN4V, 16), (false, S_CIN4, 4)] {
                    while_loop(
                        a,
                        |a, done| {
                            slot(a, T1, end)?;
                            a.cmp(CH, T1)?;
                            a.b_cond(Cond::Hs, done)
                        },
                        |a| {
                            chunk(a, vector)?;
                            a.add(CH, CH, step)
                        },
                    )?;
                }
                Ok(())
            })?;
            // Panels of 16 output channels.
            a.str(XZR, mem(SP).off(S_P))?;
            while_loop(
                a,
                |a, done| {
                    slot(a, T1, S_P)?;
                    field(a, T2, offsets::PANELS)?;
                    a.cmp(T1, T2)?;
                    a.b_cond(Cond::Hs, done)
                },
                |a| {
                    panel_setup(a)?;
                    counted(a, XI, 16, products)?;
                    counted(a, TT, TILES as i64, output)?;
                    slot(a, T1, S_P)?;
                    a.add(T1, T1, 1)?;
                    put(a, T1, S_P)
                },
            )
        },
    )?;
    crate::silu::a64_pass(a, ARGS)?;
    // Pop the frame, restore d8–d15, return.
    for _ in 0..FRAME / 4096 {
        a.op(Op::ADD_IMM_X, (SP, SP, 1, 12))?;
    }
    a.ldp(d(14), d(15), mem(SP).off(48))?;
    a.ldp(d(12), d(13), mem(SP).off(32))?;
    a.ldp(d(10), d(11), mem(SP).off(16))?;
    a.ldp(d(8), d(9), mem(SP).post(64))?;
    a.ret()
}
