//! arm64 twins of the rows2 arm, emitted with weft-a64: the integer part
//! by `smmla` (FEAT_I8MM) or by `sdot` + `addp` (FEAT_DotProd), everything
//! else shared.
//!
//! Loops: a pass of `pairs` row pairs (1 or 2; two share the activation
//! loads, zips and scales) while that many pairs meet the row range, then
//! one-pair passes; inside a pass, vectors two at a time (a **vector
//! pair**, the second slot of the tile) and an odd last vector alone; then
//! groups of four pair blocks and up to three tail blocks into groups 0,
//! 1, 2, as in the arm.
//!
//! One pair block, for the pass's pairs (stages interleaved across pairs,
//! distinct registers per pair):
//!
//! - **Activation scales** as `.4h` → `.4s` by `fcvtl`: `[dx_n, dx_n,
//!   dx_n+1, dx_n+1]` (`ld1r` of each, `zip1 .2s`), or `dx_n` four times
//!   for a lone vector.
//! - **Row scales**: `ld1r {.2s}` of the pair block's 4 scale bytes gives
//!   `[d0, d1, d0, d1]`; `fcvtl`; one `fmul` by the activation scales
//!   gives `s_b` in tile order (lane `2i + j`: vector `n + i`, row `2p +
//!   j`).
//! - **Integer part, smmla**: the activation chunks of the vector pair,
//!   `zip1`/`zip2 .2d` of the two vectors' 16-byte halves (four per block,
//!   shared by the pass's pairs), are the first operand, the packed chunk
//!   registers the second: four `smmla` into a zeroed register give the
//!   block's `q` for 2 vectors × 2 rows. A lone vector is loaded as four
//!   `.1d` (upper halves zero; the tile's second vector slot computes 0).
//! - **Integer part, sdot**: each vector's chunks loaded twice per
//!   register (`ld1r {.2d}`); per vector four `sdot` with the packed chunk
//!   registers give `[2p lo, 2p hi, 2p+1 lo, 2p+1 hi]`; `addp` of the two
//!   vectors' registers gives the same tile as `smmla` (a lone vector is
//!   paired with itself).
//! - **Float part**: `scvtf`, `fmul` by `s_b`, `fadd` into the group's
//!   lanes (never `fmla`).
//!
//! Fold `(acc0 ⊕ acc2) ⊕ (acc1 ⊕ acc3)` on whole registers; each output
//! lane is stored with `st1 {v.s}[lane]` if its row lies in
//! `row_start..row_end` (only the range's edge pairs can have a row
//! outside it; a pass's second pair never starts before `row_start`).
//!
//! ABI as in [the f32x4 twins](super::super::twin_a64): `x0`–`x17` (never
//! `x18`), `v0`–`v31`, `d8`–`d15` saved on the stack when used.

use weft_a64::{mem, v, x, Arr, Assembler, Cond, EncodeError, Gpr, XZR};
use weft_kernel::{Feature, Isa, LoopAnnotation, LoopTrip, NativeCode, Offer, Refusal, Twin};

use super::super::twin_a64::{
    add_lsl, callee_saved, emit_refusal, load_args, native, ArgRegs, LoopMark, SDOT_FEATURES,
};
use super::super::{BLOCK_BYTES, FAMILY};
use super::{ARGS_NAME, LAYOUT, PAIR_BLOCK_BYTES};

/// How the integer part of a pair block is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dot {
    /// `smmla`: one instruction per chunk for 2 vectors × 2 rows (FEAT_I8MM).
    Smmla,
    /// `sdot` per vector and chunk, then `addp` (FEAT_DotProd).
    Sdot,
}

/// A twin of the rows2 arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Q8Rows2A64 {
    dot: Dot,
    pairs: u8,
}

/// Every arm64 twin of the rows2 arm.
pub const ROWS2_TWINS: [Q8Rows2A64; 4] = [
    Q8Rows2A64::new(Dot::Smmla, 1),
    Q8Rows2A64::new(Dot::Smmla, 2),
    Q8Rows2A64::new(Dot::Sdot, 1),
    Q8Rows2A64::new(Dot::Sdot, 2),
];

const SMMLA_FEATURES: &[Feature] = &[Feature::Neon, Feature::I8mm];

impl Q8Rows2A64 {
    /// The twin computing the integer part with `dot`, `pairs` row pairs
    /// per pass (1 or 2; anything else is refused at emit time).
    pub const fn new(dot: Dot, pairs: u8) -> Self {
        Self { dot, pairs }
    }

    /// The dot-product method.
    pub fn dot(&self) -> Dot {
        self.dot
    }

    /// Row pairs per pass.
    pub fn pairs(&self) -> u8 {
        self.pairs
    }

    /// The body: independent of the geometry.
    pub fn body(&self) -> Result<NativeCode, Refusal> {
        if !(1..=2).contains(&self.pairs) {
            return Err(Refusal::EmitError {
                message: format!("{}: no {}-pair pass", self.name(), self.pairs),
            });
        }
        emit(self.dot, usize::from(self.pairs)).map_err(|e| emit_refusal(self.name(), e))
    }
}

// SAFETY: the body reads only the pair blocks of the pairs meeting
// row_start..row_end and the blocks of the `batch` vectors, writes only
// outputs of rows in the range, keeps the AAPCS64 callee-saved registers
// and returns (module docs); validation checks its results against the arm.
unsafe impl Twin for Q8Rows2A64 {
    fn name(&self) -> &'static str {
        match (self.dot, self.pairs) {
            (Dot::Smmla, 1) => "q8_0.matvec.twin.rows2.smmla.r2",
            (Dot::Smmla, 2) => "q8_0.matvec.twin.rows2.smmla.r4",
            (Dot::Smmla, _) => "q8_0.matvec.twin.rows2.smmla",
            (Dot::Sdot, 1) => "q8_0.matvec.twin.rows2.sdot.r2",
            (Dot::Sdot, 2) => "q8_0.matvec.twin.rows2.sdot.r4",
            (Dot::Sdot, _) => "q8_0.matvec.twin.rows2.sdot",
        }
    }

    fn isa(&self) -> Isa {
        Isa::Aarch64
    }

    fn requires(&self) -> &'static [Feature] {
        match self.dot {
            Dot::Smmla => SMMLA_FEATURES,
            Dot::Sdot => SDOT_FEATURES,
        }
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
        match offer.packed.first() {
            Some(p) if p.layout == LAYOUT => self.body(),
            Some(p) => Err(Refusal::UnknownLayout {
                layout: p.layout.to_owned(),
            }),
            None => Err(Refusal::BadOperand {
                operand: "weights".to_owned(),
                reason: format!("the offer carries no {LAYOUT} operand"),
            }),
        }
    }

    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        let g = &offer.contract.geometry;
        let rows = g.get("rows").unwrap_or(0);
        let blocks = g.get("cols").unwrap_or(0) / 32;
        let batch = g.get("batch").unwrap_or(1);
        let pairs = rows.div_ceil(2);
        let pass = |name: &str, trips: u64| {
            // A loop over vector pairs with the block loop inside, then
            // the last vector of an odd batch: guarded straight-line code
            // around its own block loop (one level up).
            let trip = |name: &str, trips, depth| LoopTrip {
                name: name.to_owned(),
                trips,
                depth,
            };
            vec![
                trip(name, trips, 0),
                trip("vector-pairs", batch / 2, 1),
                trip("blocks4", blocks / 4, 2),
                trip("blocks4-last-vector", blocks / 4, 1),
            ]
        };
        let mut out = Vec::new();
        if self.pairs == 2 {
            out.extend(pass("pairs2", pairs / 2));
            out.extend(pass("pairs", pairs % 2));
        } else {
            out.extend(pass("pairs", pairs));
        }
        out
    }
}

// ---------------------------------------------------------------- body ---

/// General registers beyond the argument fields (x1–x8).
const ROW_BYTES: Gpr = x(9);
/// First row of the pass's first pair (even).
const R0: Gpr = x(10);
const N: Gpr = x(11);
/// Activation pointers of vectors `n` and `n + 1`.
const PX: [Gpr; 2] = [x(12), x(13)];
/// Packed-weight pointers of the pass's pairs.
const PW: [Gpr; 2] = [x(14), x(15)];
const QUADS: Gpr = x(16);
const TMP: Gpr = x(17);
/// Free once the arguments are loaded.
const TMP2: Gpr = x(0);

/// Vector registers.
/// Activation scales `[dx_n, dx_n, dx_n+1, dx_n+1]`.
const XS: u8 = 31;
/// Activation chunk registers: smmla: raw halves v0–v3, zipped v4–v7;
/// sdot: vector n's chunks (twice each) v0–v3, vector n+1's v4–v7.
const XR: u8 = 0;
const XZ: u8 = 4;
struct PairRegs {
    /// Four consecutive registers: the pair block's chunks.
    wq: u8,
    /// Row scales, then `s_b`.
    s: u8,
    /// The tile (and sdot's vector-n register).
    tile: u8,
    /// sdot's vector-n+1 register.
    other: u8,
}
const PAIR_REGS: [PairRegs; 2] = [
    PairRegs {
        wq: 26,
        s: 30,
        tile: 24,
        other: 13,
    },
    PairRegs {
        wq: 8,
        s: 12,
        tile: 25,
        other: 14,
    },
];

/// Lane group `g` of pair `i` of the pass.
fn acc(i: usize, g: usize) -> u8 {
    (16 + 4 * i + g) as u8
}

/// Whether a body uses any of `v8`–`v15` (so saves `d8`–`d15`).
fn uses_callee_saved(dot: Dot, pairs: usize) -> bool {
    pairs > 1 || dot == Dot::Sdot
}

/// One pair block into group `g` for `pairs` pairs and `vectors` (1 or 2)
/// vectors; every pointer advances by one block.
fn pair_block(
    a: &mut Assembler,
    dot: Dot,
    pairs: usize,
    vectors: usize,
    g: usize,
) -> Result<(), EncodeError> {
    let regs = &PAIR_REGS[..pairs];
    // Activation scales.
    a.ld1r(v(XS).list(1, Arr::H4), mem(PX[0]).post(2))?;
    if vectors == 2 {
        a.ld1r(v(XZ).list(1, Arr::H4), mem(PX[1]).post(2))?;
        a.zip1(v(XS).s2(), v(XS).s2(), v(XZ).s2())?;
    }
    // Activation quants.
    match (dot, vectors) {
        (Dot::Smmla, 2) => {
            a.ld1(v(XR).list(2, Arr::B16), mem(PX[0]).post(32))?;
            a.ld1(v(XR + 2).list(2, Arr::B16), mem(PX[1]).post(32))?;
        }
        (Dot::Smmla, _) => a.ld1(v(XZ).list(4, Arr::D1), mem(PX[0]).post(32))?,
        (Dot::Sdot, _) => {
            for (k, px) in PX.iter().enumerate().take(vectors) {
                for c in 0..4u8 {
                    let reg = if k == 0 { XR } else { XZ } + c;
                    a.ld1r(v(reg).list(1, Arr::D2), mem(*px).post(8))?;
                }
            }
        }
    }
    // Row scales and packed chunks.
    for (p, pw) in regs.iter().zip(PW) {
        a.ld1r(v(p.s).list(1, Arr::S2), mem(pw).post(4))?;
        a.ld1(v(p.wq).list(4, Arr::B16), mem(pw).post(64))?;
    }
    a.fcvtl(v(XS).s4(), v(XS).h4())?;
    if dot == Dot::Smmla && vectors == 2 {
        for c in 0..2u8 {
            a.zip1(v(XZ + 2 * c).d2(), v(XR + c).d2(), v(XR + 2 + c).d2())?;
            a.zip2(v(XZ + 2 * c + 1).d2(), v(XR + c).d2(), v(XR + 2 + c).d2())?;
        }
    }
    // Integer part.
    for p in regs {
        a.movi(v(p.tile).d2(), 0)?;
        if dot == Dot::Sdot && vectors == 2 {
            a.movi(v(p.other).d2(), 0)?;
        }
    }
    for c in 0..4u8 {
        for p in regs {
            match dot {
                Dot::Smmla => a.smmla(v(p.tile).s4(), v(XZ + c).b16(), v(p.wq + c).b16())?,
                Dot::Sdot => {
                    a.sdot(v(p.tile).s4(), v(p.wq + c).b16(), v(XR + c).b16())?;
                    if vectors == 2 {
                        a.sdot(v(p.other).s4(), v(p.wq + c).b16(), v(XZ + c).b16())?;
                    }
                }
            }
        }
    }
    if dot == Dot::Sdot {
        for p in regs {
            let second = if vectors == 2 { p.other } else { p.tile };
            a.addp(v(p.tile).s4(), v(p.tile).s4(), v(second).s4())?;
        }
    }
    // Scales: s_b = f32(dw) * f32(dx) in tile order.
    for p in regs {
        a.fcvtl(v(p.s).s4(), v(p.s).h4())?;
    }
    for p in regs {
        a.fmul(v(p.s).s4(), v(p.s).s4(), v(XS).s4())?;
    }
    // Float part.
    for p in regs {
        a.scvtf(v(p.tile).s4(), v(p.tile).s4())?;
    }
    for p in regs {
        a.fmul(v(p.tile).s4(), v(p.tile).s4(), v(p.s).s4())?;
    }
    for (i, p) in regs.iter().enumerate() {
        a.fadd(v(acc(i, g)).s4(), v(acc(i, g)).s4(), v(p.tile).s4())?;
    }
    Ok(())
}

/// Fold, then store each output lane whose row is in range.
fn fold_and_store(
    a: &mut Assembler,
    r: &ArgRegs,
    pairs: usize,
    vectors: usize,
) -> Result<(), EncodeError> {
    for i in 0..pairs {
        let (a0, a1, a2, a3) = (acc(i, 0), acc(i, 1), acc(i, 2), acc(i, 3));
        a.fadd(v(a0).s4(), v(a0).s4(), v(a2).s4())?;
        a.fadd(v(a1).s4(), v(a1).s4(), v(a3).s4())?;
        a.fadd(v(a0).s4(), v(a0).s4(), v(a1).s4())?;
    }
    // QUADS (free now) = n · rows + r0: the output index of (n, r0).
    a.madd(QUADS, N, r.rows, R0)?;
    for i in 0..pairs {
        for k in 0..vectors {
            let (skip_lo, skip_hi) = (a.new_label(), a.new_label());
            // TMP2 = &y[(n + k) · rows + r0 + 2i].
            if k == 0 {
                a.add(TMP2, QUADS, 2 * i as i64)?;
            } else {
                a.add(TMP2, QUADS, r.rows)?;
                a.add(TMP2, TMP2, 2 * i as i64)?;
            }
            add_lsl(a, TMP2, r.y, TMP2, 2)?;
            let lane = 2 * k as u8;
            if i == 0 {
                // Only the range's first pair can start before row_start.
                a.cmp(R0, r.row_start)?;
                a.b_cond(Cond::Lo, skip_lo)?;
            }
            a.st1(v(acc(i, 0)).s(lane), mem(TMP2))?;
            a.bind(skip_lo)?;
            a.add(TMP, R0, 2 * i as i64 + 1)?;
            a.cmp(TMP, r.row_end)?;
            a.b_cond(Cond::Hs, skip_hi)?;
            a.add(TMP2, TMP2, 4)?;
            a.st1(v(acc(i, 0)).s(lane + 1), mem(TMP2))?;
            a.bind(skip_hi)?;
        }
    }
    Ok(())
}

/// The accumulation over every block for `pairs` pairs and `vectors`
/// vectors starting at vector `N`, then fold and stores.
fn vector_body(
    a: &mut Assembler,
    r: &ArgRegs,
    dot: Dot,
    pairs: usize,
    vectors: usize,
    loops: &mut Vec<LoopAnnotation>,
) -> Result<(), EncodeError> {
    let (quad, tail, fold) = (a.new_label(), a.new_label(), a.new_label());
    a.madd(PX[0], N, ROW_BYTES, r.x)?;
    if vectors == 2 {
        a.add(PX[1], PX[0], ROW_BYTES)?;
    }
    // Pair p (first row r0) starts at r0 · row_bytes in the packed bytes.
    a.madd(PW[0], R0, ROW_BYTES, r.w)?;
    if pairs == 2 {
        add_lsl(a, PW[1], PW[0], ROW_BYTES, 1)?;
    }
    for i in 0..pairs {
        for g in 0..4 {
            a.movi(v(acc(i, g)).d2(), 0)?;
        }
    }
    a.lsr(QUADS, r.blocks, 2)?;
    a.cbz(QUADS, tail)?;
    let mark = LoopMark::bind(a, quad, "blocks4")?;
    for g in 0..4 {
        pair_block(a, dot, pairs, vectors, g)?;
    }
    a.subs(QUADS, QUADS, 1)?;
    loops.push(mark.back_edge(a, Cond::Ne, quad)?);
    a.bind(tail)?;
    a.ands(TMP, r.blocks, 3)?;
    a.b_cond(Cond::Eq, fold)?;
    for g in 0..3 {
        pair_block(a, dot, pairs, vectors, g)?;
        if g < 2 {
            a.cmp(TMP, g as i64 + 1)?;
            a.b_cond(Cond::Eq, fold)?;
        }
    }
    a.bind(fold)?;
    fold_and_store(a, r, pairs, vectors)
}

/// The passes of `pairs` pairs while that many pairs meet the range.
fn pass(
    a: &mut Assembler,
    r: &ArgRegs,
    dot: Dot,
    pairs: usize,
    loops: &mut Vec<LoopAnnotation>,
) -> Result<(), EncodeError> {
    let (top, vec_pair, single, next, after) = (
        a.new_label(),
        a.new_label(),
        a.new_label(),
        a.new_label(),
        a.new_label(),
    );
    a.bind(top)?;
    // The pass's last pair must start before row_end.
    if pairs > 1 {
        a.add(TMP, R0, 2 * (pairs as i64 - 1))?;
        a.cmp(TMP, r.row_end)?;
    } else {
        a.cmp(R0, r.row_end)?;
    }
    a.b_cond(Cond::Hs, after)?;
    a.mov(N, XZR)?;
    a.bind(vec_pair)?;
    a.add(TMP, N, 2)?;
    a.cmp(TMP, r.batch)?;
    a.b_cond(Cond::Hi, single)?;
    vector_body(a, r, dot, pairs, 2, loops)?;
    a.add(N, N, 2)?;
    a.b(vec_pair)?;
    a.bind(single)?;
    a.cmp(N, r.batch)?;
    a.b_cond(Cond::Hs, next)?;
    vector_body(a, r, dot, pairs, 1, loops)?;
    a.bind(next)?;
    a.add(R0, R0, 2 * pairs as i64)?;
    a.b(top)?;
    a.bind(after)
}

/// The whole rows2 body.
fn emit(dot: Dot, pairs: usize) -> Result<NativeCode, EncodeError> {
    debug_assert_eq!(PAIR_BLOCK_BYTES, 4 + 64);
    let mut a = Assembler::new();
    let mut loops = Vec::new();
    let done = a.new_label();
    let saves = uses_callee_saved(dot, pairs);
    let r = load_args(&mut a)?;
    if saves {
        callee_saved(&mut a, true)?;
    }
    a.mov(TMP, BLOCK_BYTES as i64)?;
    a.mul(ROW_BYTES, r.blocks, TMP)?;
    // An empty range writes nothing.
    a.cmp(r.row_start, r.row_end)?;
    a.b_cond(Cond::Hs, done)?;
    a.and(R0, r.row_start, !1i64)?;
    if pairs > 1 {
        pass(&mut a, &r, dot, pairs, &mut loops)?;
    }
    pass(&mut a, &r, dot, 1, &mut loops)?;
    a.bind(done)?;
    if saves {
        callee_saved(&mut a, false)?;
    }
    a.ret()?;
    Ok(native(&a.finish()?, loops))
}
