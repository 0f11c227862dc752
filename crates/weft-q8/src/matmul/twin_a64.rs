//! arm64 twin of the panel arm, emitted with weft-a64: an SDOT
//! (FEAT_DotProd) outer product over a tile of **8 rows × 4 vectors**,
//! one `fmla` per block and output.
//!
//! # The tile
//!
//! A tile is half a panel (two quarters, rows `8h..8h+8`: the packed
//! bytes of quarters `2(h mod 2)` and `2(h mod 2) + 1` lie next to each
//! other in every group, so half `h` is panel `h/2` shifted by `32 · (h mod
//! 2)` bytes) against four vectors. Its registers, all 32:
//!
//! | registers | content |
//! |---|---|
//! | `v0`–`v7` | integer part `q` of (quarter `i`, vector `k`) at `4i + k`, zeroed per block |
//! | `v16`–`v23` | float accumulators of the same tiles (one `.4s` = 4 rows × 1 vector) |
//! | `v24`–`v31` | vector `k`'s 32 quants of the block at `24 + 2k`, `25 + 2k`; then the scales `s_b` |
//! | `v8`–`v11` | one group's weights for the two quarters, two groups in flight |
//! | `v12` | `0x80` in every byte (the bias flip) |
//! | `v13` | the four vectors' scales (`.4h`, then `.4s`) |
//! | `v14`, `v15` | the two quarters' row scales |
//!
//! Why this shape: 16 accumulators (8 integer, 8 float) are the most
//! that leave room for a block's activation quants and the weights. A
//! whole panel × 4 vectors needs 32 accumulators; a whole panel × 2
//! vectors fits too, but each weight register (one `ldp` and one `eor`
//! per two quarters) then serves two `sdot` instead of four, and every
//! vector tile re-reads the panel: 8 rows × 4 vectors halves both the
//! weight loads and the `eor`s per `sdot`. Batches that are not a
//! multiple of four end with a 2-vector and a 1-vector tile (same
//! registers, fewer of them).
//!
//! # One block
//!
//! - **Activations**: per vector, `ldr h` (k = 0: clears the register, so
//!   no chain from block to block) or `ld1 {v13.h}[k]` of its scale, then
//!   `ld1 {2 × .16b}` of its 32 quants; each pointer advances one block.
//! - **Integer part**, per group `g`: `ldp` of the 32 packed bytes (4 rows
//!   × 4 biased quants per quarter), `eor` with `0x80` (signed weights,
//!   shared by the tile's vectors), then per quarter and vector `sdot
//!   q.4s, w.16b, x.4b[g mod 4]`: the by-element form broadcasts the
//!   vector's quants `4g..4g+4` from the register holding them. Exact:
//!   `|q| ≤ 32 · 128 · 127`.
//! - **Scales**: `fcvtl` widens the vectors' binary16 scales exactly (a
//!   signalling NaN comes out quiet; the arm's integer widening keeps it
//!   signalling until its `fmul`: NaNs compare by class), then `fmul
//!   s.4s, dw.4s, dx.s[k]`: `s_b = f32(dw) ⊗ f32(dx)` per row.
//! - **Float part**: `scvtf` (exact, `|q| < 2^24`), `fmla acc, q, s`:
//!   `fma(f32(q), s_b, acc)`, the contract's one rounding.
//!
//! # Loops and stores
//!
//! Halves of panels `h = row_start/8, …` while `8h < row_end` (a half the
//! range does not meet is not computed: its outputs would never be
//! stored), inside them the vector tiles, inside those the blocks. A
//! quarter wholly inside `row_start..row_end` is stored by `str q`, one
//! per vector; a quarter at an edge of the range lane by lane (`st1
//! {v.s}[j]`) for the rows inside it.
//!
//! ABI as in [the f32x4 twins](super::super::twin_a64): `x0`–`x17`
//! (never `x18`), `v0`–`v31`, `d8`–`d15` saved on the stack.

use weft_a64::{h, mem, q, v, w, x, Arr, Assembler, Cond, EncodeError, Gpr, Label, XZR};
use weft_kernel::{Feature, Isa, LoopAnnotation, LoopTrip, NativeCode, Offer, Refusal, Twin};

use super::super::twin_a64::{
    add_lsl, callee_saved, emit_refusal, load_args, native, ArgRegs, LoopMark, SDOT_FEATURES,
};
use super::super::BLOCK_BYTES;
use super::arm::check_offer;
use super::{GROUPS, GROUP_BYTES, PANEL_BLOCK_BYTES, PANEL_ROWS, QUANTS_AT};

/// Rows of a tile: half a panel.
pub const TILE_ROWS: usize = PANEL_ROWS / 2;

/// Vectors of a full tile.
pub const TILE_VECTORS: usize = 4;

/// Quarters (`.4s` of rows) in a tile.
const QUARTERS: usize = TILE_ROWS / 4;

/// The SDOT twin of the panel arm (module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Q8MatmulSdot;

/// Every arm64 twin of the panel arm.
pub const TWINS: [Q8MatmulSdot; 1] = [Q8MatmulSdot];

impl Q8MatmulSdot {
    /// The body: independent of the geometry (any rows, blocks, batch and
    /// row range the arguments name).
    pub fn body(&self) -> Result<NativeCode, Refusal> {
        emit().map_err(|e| emit_refusal(self.name(), e))
    }
}

// SAFETY: the body reads only the panel blocks of the half panels meeting
// row_start..row_end and the blocks of the `batch` vectors, writes only
// outputs of rows in the range, keeps the AAPCS64 callee-saved registers
// and returns (module docs); validation checks its results against the arm.
unsafe impl Twin for Q8MatmulSdot {
    fn name(&self) -> &'static str {
        "q8_0.matmul.twin.sdot.8x4"
    }

    fn isa(&self) -> Isa {
        Isa::Aarch64
    }

    fn requires(&self) -> &'static [Feature] {
        SDOT_FEATURES
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        check_offer(offer, self.name())?;
        self.body()
    }

    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        let g = &offer.contract.geometry;
        let rows = g.get("rows").unwrap_or(0);
        let blocks = g.get("cols").unwrap_or(0) / 32;
        let batch = g.get("batch").unwrap_or(1);
        let trip = |name: &str, trips, depth| LoopTrip {
            name: name.to_owned(),
            trips,
            depth,
        };
        // The 2- and 1-vector tiles are guarded code inside the halves'
        // loop, each around its own block loop, run when the batch leaves
        // those vectors over.
        let when = |taken: bool| if taken { blocks } else { 0 };
        vec![
            trip("halves", rows.div_ceil(TILE_ROWS as u64), 0),
            trip("vectors4", batch / 4, 1),
            trip("blocks", blocks, 2),
            trip("blocks-2-vectors", when(batch % 4 >= 2), 1),
            trip("blocks-1-vector", when(batch % 2 == 1), 1),
        ]
    }
}

// ---------------------------------------------------------------- body ---

/// General registers beyond the argument fields (x1–x8).
const TMP: Gpr = x(0);
/// [`TMP`]'s low half (`tbz` on bits below 32).
const TMP_W: Gpr = w(0);
/// `blocks · 34`: one vector's bytes.
const VEC_BYTES: Gpr = x(9);
/// First row of the current half panel (a multiple of 8).
const R0: Gpr = x(10);
/// First vector of the current tile.
const N: Gpr = x(11);
/// Vector `k`'s activation pointer; `&y[(n + k) · rows + r0]` when
/// storing.
const PX: [Gpr; TILE_VECTORS] = [x(12), x(13), x(14), x(15)];
/// The tile's packed-weight pointer; a lane store's address when storing.
const PW: Gpr = x(16);
/// Blocks left; `4 · rows` when storing.
const LEFT: Gpr = x(17);

/// Vector registers (module docs).
fn iacc(i: usize, k: usize) -> u8 {
    (4 * i + k) as u8
}
fn facc(i: usize, k: usize) -> u8 {
    (16 + 4 * i + k) as u8
}
/// Vector `k`'s quants `16 half .. 16 half + 16`; after the integer part,
/// `s_b` of (quarter `half`, vector `k`).
fn xq(k: usize, half: usize) -> u8 {
    (24 + 2 * k + half) as u8
}
/// The two register pairs of the in-flight groups (by parity of `g`).
const WQ: [u8; 2] = [8, 10];
const BIAS: u8 = 12;
const DX: u8 = 13;
const DW: u8 = 14;

/// One block of the tile for `vectors` vectors (1, 2 or 4); every pointer
/// advances by one block.
fn block(a: &mut Assembler, vectors: usize) -> Result<(), EncodeError> {
    // Activation scales and quants.
    for (k, px) in PX.iter().enumerate().take(vectors) {
        if k == 0 {
            a.ldr(h(DX), mem(*px).post(2))?;
        } else {
            a.ld1(v(DX).h(k as u8), mem(*px).post(2))?;
        }
        a.ld1(v(xq(k, 0)).list(2, Arr::B16), mem(*px).post(32))?;
    }
    // Integer part: group g's weights for both quarters sit in 32
    // consecutive bytes; the next group's load is issued before this
    // group's dot products.
    let group_at = |g: usize| (QUANTS_AT + GROUP_BYTES * g) as i64;
    a.ldp(q(WQ[0]), q(WQ[0] + 1), mem(PW).off(group_at(0)))?;
    for i in 0..QUARTERS {
        for k in 0..vectors {
            a.movi(v(iacc(i, k)).d2(), 0)?;
        }
    }
    for g in 0..GROUPS {
        let w = WQ[g % 2];
        for i in 0..QUARTERS as u8 {
            a.eor(v(w + i).b16(), v(w + i).b16(), v(BIAS).b16())?;
        }
        if g + 1 < GROUPS {
            let next = WQ[(g + 1) % 2];
            a.ldp(q(next), q(next + 1), mem(PW).off(group_at(g + 1)))?;
        }
        for i in 0..QUARTERS {
            for k in 0..vectors {
                a.sdot(
                    v(iacc(i, k)).s4(),
                    v(w + i as u8).b16(),
                    v(xq(k, g / 4)).b4((g % 4) as u8),
                )?;
            }
        }
    }
    // Scales: s_b = f32(dw) * f32(dx), per quarter and vector.
    a.ldp(q(DW), q(DW + 1), mem(PW).post(PANEL_BLOCK_BYTES as i64))?;
    a.fcvtl(v(DX).s4(), v(DX).h4())?;
    for i in 0..QUARTERS {
        for k in 0..vectors {
            a.fmul(v(xq(k, i)).s4(), v(DW + i as u8).s4(), v(DX).s(k as u8))?;
        }
    }
    // Float part: acc = fma(f32(q), s_b, acc).
    for i in 0..QUARTERS {
        for k in 0..vectors {
            a.scvtf(v(iacc(i, k)).s4(), v(iacc(i, k)).s4())?;
        }
    }
    for i in 0..QUARTERS {
        for k in 0..vectors {
            a.fmla(v(facc(i, k)).s4(), v(iacc(i, k)).s4(), v(xq(k, i)).s4())?;
        }
    }
    Ok(())
}

/// The register holding row `r0 + j`: [`R0`] itself, or [`TMP`].
fn row_of(a: &mut Assembler, j: i64) -> Result<Gpr, EncodeError> {
    if j == 0 {
        return Ok(R0);
    }
    a.add(TMP, R0, j)?;
    Ok(TMP)
}

/// Store the tile's outputs whose rows lie in `row_start..row_end`.
fn store(a: &mut Assembler, r: &ArgRegs, vectors: usize) -> Result<(), EncodeError> {
    // PX[k] = &y[(n + k) · rows + r0].
    a.madd(TMP, N, r.rows, R0)?;
    add_lsl(a, PX[0], r.y, TMP, 2)?;
    if vectors > 1 {
        a.lsl(LEFT, r.rows, 2)?;
    }
    for k in 1..vectors {
        a.add(PX[k], PX[k - 1], LEFT)?;
    }
    for i in 0..QUARTERS {
        let (partial, next) = (a.new_label(), a.new_label());
        let first = 4 * i as i64;
        // Wholly inside: r0 + 4i >= row_start and r0 + 4i + 4 <= row_end.
        let row = row_of(a, first)?;
        a.cmp(row, r.row_start)?;
        a.b_cond(Cond::Lo, partial)?;
        a.add(TMP, row, 4)?;
        a.cmp(TMP, r.row_end)?;
        a.b_cond(Cond::Hi, partial)?;
        for (k, px) in PX.iter().enumerate().take(vectors) {
            a.str(q(facc(i, k)), mem(*px).off(4 * first))?;
        }
        a.b(next)?;
        // At an edge of the range: each row inside it.
        a.bind(partial)?;
        for j in 0..4 {
            let skip = a.new_label();
            let row = row_of(a, first + j)?;
            a.cmp(row, r.row_start)?;
            a.b_cond(Cond::Lo, skip)?;
            a.cmp(row, r.row_end)?;
            a.b_cond(Cond::Hs, skip)?;
            for (k, px) in PX.iter().enumerate().take(vectors) {
                let at = if first + j == 0 {
                    *px
                } else {
                    a.add(PW, *px, 4 * (first + j))?;
                    PW
                };
                a.st1(v(facc(i, k)).s(j as u8), mem(at))?;
            }
            a.bind(skip)?;
        }
        a.bind(next)?;
    }
    Ok(())
}

/// One tile of `vectors` vectors from vector `N` on the half panel at
/// `R0`: pointers, the block loop, stores.
fn tile(
    a: &mut Assembler,
    r: &ArgRegs,
    vectors: usize,
    name: &'static str,
    loops: &mut Vec<LoopAnnotation>,
) -> Result<(), EncodeError> {
    let (top, done) = (a.new_label(), a.new_label());
    a.madd(PX[0], N, VEC_BYTES, r.x)?;
    for k in 1..vectors {
        a.add(PX[k], PX[k - 1], VEC_BYTES)?;
    }
    // PW = w + (r0 / 16) · blocks · 576 + 32 · ((r0 / 8) mod 2).
    a.mov(TMP, PANEL_BLOCK_BYTES as i64)?;
    a.mul(TMP, TMP, r.blocks)?;
    a.lsr(PW, R0, 4)?;
    a.madd(PW, PW, TMP, r.w)?;
    a.and(TMP, R0, TILE_ROWS as i64)?;
    add_lsl(a, PW, PW, TMP, 2)?;
    for i in 0..QUARTERS {
        for k in 0..vectors {
            a.movi(v(facc(i, k)).d2(), 0)?;
        }
    }
    // The contract has blocks >= 1; zero blocks stores +0.0 as the arm does.
    a.mov(LEFT, r.blocks)?;
    a.cbz(LEFT, done)?;
    let mark = LoopMark::bind(a, top, name)?;
    block(a, vectors)?;
    a.subs(LEFT, LEFT, 1)?;
    loops.push(mark.back_edge(a, Cond::Ne, top)?);
    a.bind(done)?;
    store(a, r, vectors)
}

/// The whole body.
fn emit() -> Result<NativeCode, EncodeError> {
    debug_assert_eq!(PANEL_BLOCK_BYTES, 64 + 64 * GROUPS);
    debug_assert_eq!(GROUP_BYTES, 4 * PANEL_ROWS);
    let mut a = Assembler::new();
    let mut loops = Vec::new();
    let (half, quad, rest, single, next_half, done): (Label, Label, Label, Label, Label, Label) = (
        a.new_label(),
        a.new_label(),
        a.new_label(),
        a.new_label(),
        a.new_label(),
        a.new_label(),
    );
    let r = load_args(&mut a)?;
    callee_saved(&mut a, true)?;
    a.mov(TMP, BLOCK_BYTES as i64)?;
    a.mul(VEC_BYTES, r.blocks, TMP)?;
    a.movi(v(BIAS).b16(), 0x80)?;
    // Half panels meeting the range (an empty range meets none).
    a.and(R0, r.row_start, !(TILE_ROWS as i64 - 1))?;
    a.bind(half)?;
    a.cmp(R0, r.row_end)?;
    a.b_cond(Cond::Hs, done)?;
    a.mov(N, XZR)?;
    a.bind(quad)?;
    a.add(TMP, N, TILE_VECTORS as i64)?;
    a.cmp(TMP, r.batch)?;
    a.b_cond(Cond::Hi, rest)?;
    tile(&mut a, &r, 4, "blocks", &mut loops)?;
    a.add(N, N, TILE_VECTORS as i64)?;
    a.b(quad)?;
    // batch mod 4 vectors left: two, then one.
    a.bind(rest)?;
    a.sub(TMP, r.batch, N)?;
    a.tbz(TMP_W, 1, single)?;
    tile(&mut a, &r, 2, "blocks-2-vectors", &mut loops)?;
    a.add(N, N, 2)?;
    a.bind(single)?;
    a.cmp(N, r.batch)?;
    a.b_cond(Cond::Hs, next_half)?;
    tile(&mut a, &r, 1, "blocks-1-vector", &mut loops)?;
    a.bind(next_half)?;
    a.add(R0, R0, TILE_ROWS as i64)?;
    a.b(half)?;
    a.bind(done)?;
    callee_saved(&mut a, false)?;
    a.ret()?;
    Ok(native(&a.finish()?, loops))
}
