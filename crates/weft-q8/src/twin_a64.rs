//! arm64 twins of the f32x4 arm (`q8_0.matvec.arm.f32x4`): the body
//! emitted with weft-a64, integer part by `sdot` (FEAT_DotProd).
//!
//! Per block, for each row of the pass:
//!
//! - **Integer part**: the block's 32 weight quants and 32 activation
//!   quants as two `.16b` halves; `sdot` into a zeroed `.4s` register gives
//!   `q[b][0..4]` and `q[b][4..8]` exactly (signed × signed: weights may be
//!   -128; every dword sum is at most 4 · 128 · 128 in magnitude).
//! - **Scale**: `ldr h` + scalar `fcvt s, h` for `dw` and `dx` (the exact
//!   binary16 widening `fcvtl` performs, one lane), then one scalar
//!   `fmul`: `s_b = f32(dw) ⊗ f32(dx)`. A signalling-NaN scale comes out
//!   quiet (the arm keeps it signalling until its `fmul`): NaNs compare by
//!   class.
//! - **Float part**: `scvtf` (exact: `|q| < 2^24`), `fmul` by the scale
//!   element `v.s[0]`, then `fadd` into the lane (never `fmla`), into the
//!   contract's 32 lanes held as eight `.4s` registers per row:
//!   `acc[g][0..4]`, `acc[g][4..8]` for `g = 0..4`.
//! - **Fold**: the contract's order: `t = (acc0 ⊕ acc2) ⊕ (acc1 ⊕ acc3)`
//!   per half, `u = t_lo ⊕ t_hi`, `ext #8` and `fadd` give
//!   `(u0 ⊕ u2, u1 ⊕ u3)`, scalar `faddp` adds those two.
//!
//! Loops: a pass of `rows_per_pass` rows (1 or 2; the 2-row pass shares
//! the activation loads, the activation scale and the loop overhead, and is
//! followed by a 1-row pass for an odd last row) is the outer loop, vectors
//! the inner one (a batch re-reads the pass's rows from cache), then groups
//! of four blocks and up to three tail blocks into groups 0, 1, 2, as in
//! the arm. The stages of a block are emitted interleaved across the
//! pass's rows (distinct registers per row) so that in-order cores
//! (Cortex-A55/A510 have FEAT_DotProd) can overlap them.
//!
//! ABI (AAPCS64 leaf): the argument pointer arrives in `x0`; only
//! `x0`–`x17` (never `x18`) and `v0`–`v31` are written; the low halves of
//! `v8`–`v15` are callee-saved, so a body that uses them saves `d8`–`d15`
//! on the stack first and restores them before `ret`. It reads only the
//! blocks of rows `row_start..row_end` and of the `batch` vectors, and
//! writes only their outputs.
//!
//! What Cranelift offers here is recorded in [`arm`](super::arm)'s docs:
//! with FEAT_DotProd its aarch64 backend folds the arm's signed dot tree
//! into the same `sdot`, so the twin's gains are the scale widening (one
//! `fcvt` against a dozen integer operations), two rows per pass and a
//! loop with no spills.

use weft_a64::{
    d, h, mem, q, s, v, x, Assembler, Cond, EncodeError, Gpr, Inst, Label, Op, SP, XZR,
};
use weft_kernel::{Feature, Isa, LoopAnnotation, LoopTrip, NativeCode, Offer, Refusal, Twin};

use super::{offsets, ARGS_NAME, BLOCK_BYTES, FAMILY};

// ------------------------------------------------------------- shared ---

/// An emission error as the seam's named refusal.
pub(super) fn emit_refusal(twin: &str, e: EncodeError) -> Refusal {
    Refusal::EmitError {
        message: format!("{twin}: {e}"),
    }
}

/// The words as [`NativeCode`] (no pool: every word is an instruction).
pub(super) fn native(words: &[u32], loops: Vec<LoopAnnotation>) -> NativeCode {
    NativeCode {
        isa: Isa::Aarch64,
        bytes: words.iter().flat_map(|wd| wd.to_le_bytes()).collect(),
        pool: None,
        loops,
    }
}

/// `add d, n, m, lsl #shift` (the shifted-register form).
pub(super) fn add_lsl(
    a: &mut Assembler,
    dst: Gpr,
    n: Gpr,
    m: Gpr,
    shift: u8,
) -> Result<(), EncodeError> {
    a.emit(Inst::with_mnemonic(
        "add",
        [dst.into(), n.into(), m.into(), weft_a64::lsl(shift)],
    )?)
}

/// Save (`save`) or restore the callee-saved `d8`–`d15` in a 64-byte frame.
pub(super) fn callee_saved(a: &mut Assembler, save: bool) -> Result<(), EncodeError> {
    if save {
        a.stp(d(8), d(9), mem(SP).pre(-64))?;
        a.stp(d(10), d(11), mem(SP).off(16))?;
        a.stp(d(12), d(13), mem(SP).off(32))?;
        a.stp(d(14), d(15), mem(SP).off(48))
    } else {
        a.ldp(d(14), d(15), mem(SP).off(48))?;
        a.ldp(d(12), d(13), mem(SP).off(32))?;
        a.ldp(d(10), d(11), mem(SP).off(16))?;
        a.ldp(d(8), d(9), mem(SP).post(64))
    }
}

/// Records where a loop starts and where its back edge is, in bytes.
pub(super) struct LoopMark {
    name: &'static str,
    head: usize,
}

impl LoopMark {
    /// Bind `label` here as the head of a loop called `name`.
    pub(super) fn bind(
        a: &mut Assembler,
        label: Label,
        name: &'static str,
    ) -> Result<Self, EncodeError> {
        a.bind(label)?;
        Ok(Self {
            name,
            head: 4 * a.len(),
        })
    }

    /// Emit the back edge `b.<cond> label` and return the annotation.
    pub(super) fn back_edge(
        self,
        a: &mut Assembler,
        cond: Cond,
        label: Label,
    ) -> Result<LoopAnnotation, EncodeError> {
        let back_edge = 4 * a.len();
        a.b_cond(cond, label)?;
        Ok(LoopAnnotation {
            name: self.name.to_owned(),
            head: self.head,
            back_edge,
        })
    }
}

/// The argument fields both contracts' structs share (same layout).
pub(super) struct ArgRegs {
    pub(super) w: Gpr,
    pub(super) x: Gpr,
    pub(super) y: Gpr,
    pub(super) rows: Gpr,
    pub(super) blocks: Gpr,
    pub(super) batch: Gpr,
    pub(super) row_start: Gpr,
    pub(super) row_end: Gpr,
}

/// Load every argument field from `[x0]` into x1–x8.
pub(super) fn load_args(a: &mut Assembler) -> Result<ArgRegs, EncodeError> {
    let r = ArgRegs {
        w: x(1),
        x: x(2),
        y: x(3),
        rows: x(4),
        blocks: x(5),
        batch: x(6),
        row_start: x(7),
        row_end: x(8),
    };
    let args = x(0);
    for (reg, off) in [
        (r.w, offsets::WEIGHTS),
        (r.x, offsets::X),
        (r.y, offsets::Y),
        (r.rows, offsets::ROWS),
        (r.blocks, offsets::BLOCKS),
        (r.batch, offsets::BATCH),
        (r.row_start, offsets::ROW_START),
        (r.row_end, offsets::ROW_END),
    ] {
        a.ldr(reg, mem(args).off(i64::from(off)))?;
    }
    Ok(r)
}

/// The features every SDOT body needs.
pub(super) const SDOT_FEATURES: &[Feature] = &[Feature::Neon, Feature::Dotprod];

// ----------------------------------------------------------- the twin ---

/// An SDOT twin of the f32x4 arm with `rows_per_pass` rows per pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Q8MatvecSdot {
    rows_per_pass: u8,
}

/// Every SDOT twin of the f32x4 arm: one and two rows per pass.
pub const SDOT_TWINS: [Q8MatvecSdot; 2] = [Q8MatvecSdot::new(1), Q8MatvecSdot::new(2)];

impl Q8MatvecSdot {
    /// The twin with `rows_per_pass` rows per pass (1 or 2; anything else
    /// is refused at emit time).
    pub const fn new(rows_per_pass: u8) -> Self {
        Self { rows_per_pass }
    }

    /// Rows per pass.
    pub fn rows_per_pass(&self) -> u8 {
        self.rows_per_pass
    }

    /// The body: independent of the geometry (any rows, blocks, batch and
    /// row range the arguments name).
    pub fn body(&self) -> Result<NativeCode, Refusal> {
        if !(1..=2).contains(&self.rows_per_pass) {
            return Err(Refusal::EmitError {
                message: format!("{}: no {}-row pass", self.name(), self.rows_per_pass),
            });
        }
        emit_sdot(usize::from(self.rows_per_pass)).map_err(|e| emit_refusal(self.name(), e))
    }
}

// SAFETY: the body reads only the blocks of rows row_start..row_end and of
// the `batch` vectors, writes only their outputs, keeps the AAPCS64
// callee-saved registers and returns (module docs); validation checks its
// results against the arm.
unsafe impl Twin for Q8MatvecSdot {
    fn name(&self) -> &'static str {
        match self.rows_per_pass {
            1 => "q8_0.matvec.twin.sdot.r1",
            2 => "q8_0.matvec.twin.sdot.r2",
            _ => "q8_0.matvec.twin.sdot",
        }
    }

    fn isa(&self) -> Isa {
        Isa::Aarch64
    }

    fn requires(&self) -> &'static [Feature] {
        SDOT_FEATURES
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        if offer.contract.family != FAMILY || offer.contract.args != ARGS_NAME {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!(
                    "{} serves {FAMILY} with {ARGS_NAME}, not {} with {}",
                    self.name(),
                    offer.contract.family,
                    offer.contract.args
                ),
            });
        }
        if let Some(p) = offer.packed.first() {
            return Err(Refusal::UnknownLayout {
                layout: p.layout.to_owned(),
            });
        }
        self.body()
    }

    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        let g = &offer.contract.geometry;
        let rows = g.get("rows").unwrap_or(0);
        let blocks = g.get("cols").unwrap_or(0) / 32;
        let batch = g.get("batch").unwrap_or(1);
        let pass = |name: &str, trips: u64| {
            [
                LoopTrip {
                    name: name.to_owned(),
                    trips,
                    depth: 0,
                },
                LoopTrip {
                    name: "batch".to_owned(),
                    trips: batch,
                    depth: 1,
                },
                // The `blocks % 4` tail blocks are guarded straight-line
                // code after this loop, not a loop.
                LoopTrip {
                    name: "blocks4".to_owned(),
                    trips: blocks / 4,
                    depth: 2,
                },
            ]
        };
        let mut out = Vec::new();
        if self.rows_per_pass == 2 {
            // Two-row passes, then one one-row pass for an odd last row.
            out.extend(pass("row-pairs", rows / 2));
            out.extend(pass("rows", rows % 2));
        } else {
            out.extend(pass("rows", rows));
        }
        out
    }
}

// ---------------------------------------------------------------- body ---

/// General registers of the f32x4 body beyond the argument fields (x1–x8).
const ROW_BYTES: Gpr = x(9);
const N: Gpr = x(10);
const PX: Gpr = x(11);
/// `PW[i]` walks row `i` of the pass.
const PW: [Gpr; 2] = [x(12), x(13)];
const QUADS: Gpr = x(14);
const TMP: Gpr = x(15);
const IDX: Gpr = x(16);
/// The current row (the pass's first).
const R: Gpr = x(7);

/// Vector registers: the activation halves and scale, and per row of the
/// pass its weight halves, scale and the two dot products.
const XQ: [u8; 2] = [0, 1];
const XS: u8 = 2;
struct RowRegs {
    wq: [u8; 2],
    ws: u8,
    dot: [u8; 2],
}
const ROW_REGS: [RowRegs; 2] = [
    RowRegs {
        wq: [3, 4],
        ws: 5,
        dot: [6, 7],
    },
    RowRegs {
        wq: [8, 9],
        ws: 10,
        dot: [11, 12],
    },
];

/// Accumulator `acc[g][half]` of row `i` of the pass.
fn acc(i: usize, g: usize, half: usize) -> u8 {
    (16 + 8 * i + 2 * g + half) as u8
}

/// One block into accumulator group `g` for the pass's `rows` rows; every
/// pointer advances by one block.
fn sdot_block(a: &mut Assembler, rows: usize, g: usize) -> Result<(), EncodeError> {
    let blk = BLOCK_BYTES as i64;
    // Loads: quants at +2 and +18 (ldur), then the scale with post-index.
    a.ldr(q(XQ[0]), mem(PX).off(2))?;
    a.ldr(q(XQ[1]), mem(PX).off(18))?;
    a.ldr(h(XS), mem(PX).post(blk))?;
    for (rr, pw) in ROW_REGS.iter().zip(PW).take(rows) {
        a.ldr(q(rr.wq[0]), mem(pw).off(2))?;
        a.ldr(q(rr.wq[1]), mem(pw).off(18))?;
        a.ldr(h(rr.ws), mem(pw).post(blk))?;
    }
    // Integer part.
    for rr in ROW_REGS.iter().take(rows) {
        for k in 0..2 {
            a.movi(v(rr.dot[k]).d2(), 0)?;
        }
    }
    for rr in ROW_REGS.iter().take(rows) {
        for ((dot, wq), xq) in rr.dot.iter().zip(rr.wq).zip(XQ) {
            a.sdot(v(*dot).s4(), v(wq).b16(), v(xq).b16())?;
        }
    }
    // Scales: s_b = f32(dw) * f32(dx).
    a.fcvt(s(XS), h(XS))?;
    for rr in ROW_REGS.iter().take(rows) {
        a.fcvt(s(rr.ws), h(rr.ws))?;
        a.fmul(s(rr.ws), s(rr.ws), s(XS))?;
    }
    // Float part: f32(q), times s_b, added into the group's lanes.
    for rr in ROW_REGS.iter().take(rows) {
        for k in 0..2 {
            a.scvtf(v(rr.dot[k]).s4(), v(rr.dot[k]).s4())?;
        }
    }
    for rr in ROW_REGS.iter().take(rows) {
        for k in 0..2 {
            a.fmul(v(rr.dot[k]).s4(), v(rr.dot[k]).s4(), v(rr.ws).s(0))?;
        }
    }
    for (i, rr) in ROW_REGS.iter().enumerate().take(rows) {
        for k in 0..2 {
            let lane = acc(i, g, k);
            a.fadd(v(lane).s4(), v(lane).s4(), v(rr.dot[k]).s4())?;
        }
    }
    Ok(())
}

/// The contract's fold of row `i`'s 32 lanes into `s(acc(i, 0, 0))`.
fn fold_row(a: &mut Assembler, i: usize) -> Result<(), EncodeError> {
    for half in 0..2 {
        let (a0, a1, a2, a3) = (
            acc(i, 0, half),
            acc(i, 1, half),
            acc(i, 2, half),
            acc(i, 3, half),
        );
        a.fadd(v(a0).s4(), v(a0).s4(), v(a2).s4())?;
        a.fadd(v(a1).s4(), v(a1).s4(), v(a3).s4())?;
        a.fadd(v(a0).s4(), v(a0).s4(), v(a1).s4())?;
    }
    let (lo, hi) = (acc(i, 0, 0), acc(i, 0, 1));
    // u[j] = t[j] + t[j+4].
    a.fadd(v(lo).s4(), v(lo).s4(), v(hi).s4())?;
    // (u0 + u2, u1 + u3) in lanes 0 and 1, then their sum.
    a.ext(v(hi).b16(), v(lo).b16(), v(lo).b16(), 8)?;
    a.fadd(v(lo).s4(), v(lo).s4(), v(hi).s4())?;
    a.op(Op::FADDP_SCALAR, (s(lo), v(lo).s2()))
}

/// The passes of `rows` rows while that many rows are left.
fn sdot_pass(
    a: &mut Assembler,
    r: &ArgRegs,
    rows: usize,
    loops: &mut Vec<LoopAnnotation>,
) -> Result<(), EncodeError> {
    let (pass, vec_top, next_pass, after) =
        (a.new_label(), a.new_label(), a.new_label(), a.new_label());
    let (quad, tail, fold) = (a.new_label(), a.new_label(), a.new_label());
    a.bind(pass)?;
    a.add(TMP, R, rows as i64)?;
    a.cmp(TMP, r.row_end)?;
    a.b_cond(Cond::Hi, after)?;
    a.mov(N, XZR)?;
    a.bind(vec_top)?;
    a.cmp(N, r.batch)?;
    a.b_cond(Cond::Hs, next_pass)?;
    a.madd(PX, N, ROW_BYTES, r.x)?;
    a.madd(PW[0], R, ROW_BYTES, r.w)?;
    if rows > 1 {
        a.add(PW[1], PW[0], ROW_BYTES)?;
    }
    for i in 0..rows {
        for g in 0..4 {
            for half in 0..2 {
                a.movi(v(acc(i, g, half)).d2(), 0)?;
            }
        }
    }
    a.lsr(QUADS, r.blocks, 2)?;
    a.cbz(QUADS, tail)?;
    let mark = LoopMark::bind(a, quad, "blocks4")?;
    for g in 0..4 {
        sdot_block(a, rows, g)?;
    }
    a.subs(QUADS, QUADS, 1)?;
    loops.push(mark.back_edge(a, Cond::Ne, quad)?);
    a.bind(tail)?;
    a.ands(TMP, r.blocks, 3)?;
    a.b_cond(Cond::Eq, fold)?;
    for g in 0..3 {
        sdot_block(a, rows, g)?;
        if g < 2 {
            a.cmp(TMP, g as i64 + 1)?;
            a.b_cond(Cond::Eq, fold)?;
        }
    }
    a.bind(fold)?;
    a.madd(IDX, N, r.rows, R)?;
    for i in 0..rows {
        fold_row(a, i)?;
        if i > 0 {
            a.add(IDX, IDX, 1)?;
        }
        a.str(s(acc(i, 0, 0)), mem(r.y).idx_scaled(IDX))?;
    }
    a.add(N, N, 1)?;
    a.b(vec_top)?;
    a.bind(next_pass)?;
    a.add(R, R, rows as i64)?;
    a.b(pass)?;
    a.bind(after)
}

/// The whole f32x4 SDOT body with `rows_per_pass` rows per pass.
fn emit_sdot(rows_per_pass: usize) -> Result<NativeCode, EncodeError> {
    let mut a = Assembler::new();
    let mut loops = Vec::new();
    let saves = rows_per_pass > 1;
    let r = load_args(&mut a)?;
    if saves {
        callee_saved(&mut a, true)?;
    }
    a.mov(TMP, BLOCK_BYTES as i64)?;
    a.mul(ROW_BYTES, r.blocks, TMP)?;
    if rows_per_pass > 1 {
        sdot_pass(&mut a, &r, rows_per_pass, &mut loops)?;
    }
    sdot_pass(&mut a, &r, 1, &mut loops)?;
    if saves {
        callee_saved(&mut a, false)?;
    }
    a.ret()?;
    Ok(native(&a.finish()?, loops))
}
