//! The row-pair contract of `q8_0.matvec`: arm `q8_0.matvec.arm.rows2`,
//! weights repacked at plan time into row pairs (layout `q8_0.rows2`),
//! integer part per block — the shape `smmla` computes.
//!
//! `smmla vd.4s, vn.16b, vm.16b` adds to the 2×2 tile `vd[i][j]` the dot
//! product of the 8-byte row `i` of `vn` with the 8-byte row `j` of `vm`.
//! With two activation vectors' 8-byte chunks in `vn` and two weight rows'
//! chunks in `vm`, four `smmla` (chunks 0..4 of a block) leave in one
//! register the whole block's integer dot product for 2 vectors × 2 rows.
//! The weights arrive already interleaved (so no permute is needed per
//! chunk at run time); the activations of a vector pair need one `zip1`
//! and one `zip2` per 16 bytes, shared by every row pair of a pass.
//!
//! # Packed layout `q8_0.rows2`
//!
//! [`pack`] turns canonical W (`rows × blocks` Q8_0 blocks, see the
//! [family docs](super)) into `⌈rows/2⌉ × blocks` **pair blocks** of
//! [`PAIR_BLOCK_BYTES`] = 68 bytes; pair `p` holds rows `2p` and `2p + 1`,
//! its block `b` starts at byte `(p · blocks + b) · 68`:
//!
//! | bytes | content |
//! |---|---|
//! | 0..2 | scale of row `2p`, block `b` (binary16, little-endian) |
//! | 2..4 | scale of row `2p + 1`, block `b` |
//! | 4 + 16c .. 12 + 16c | quants `8c..8c+8` of row `2p` (`c = 0..4`) |
//! | 12 + 16c .. 20 + 16c | quants `8c..8c+8` of row `2p + 1` |
//!
//! An odd row count gets a **padding row** `rows` (scale `+0`, quants 0)
//! in its last pair; its outputs are computed and never written. For an
//! even row count the packed bytes are exactly as many as W's.
//!
//! # Contract (how the arm and its twins round)
//!
//! For one row `r` and one vector `n`, with `w`/`x` the quants and
//! `dw_b`/`dx_b` the scales of block `b`:
//!
//! 1. Integer part, exact, **per block**: `q_b = Σ_{k<32} w[32b+k] ·
//!    x[32b+k]` (an `i32`; `|q_b| ≤ 32 · 128 · 127 < 2^24`, so `f32(q_b)`
//!    is exact). Any exact method may compute it (`smmla` over the four
//!    8-byte chunks, `sdot` then `addp`, widening multiplies).
//! 2. Scale: `s_b = f32(dw_b) ⊗ f32(dx_b)` (exact widening, one IEEE f32
//!    multiply, round to nearest even).
//! 3. Accumulate, **no FMA**: four f32 lanes `acc[g]` (`g = 0..4`), all
//!    `+0.0` at first; for `b = 0, 1, …` in order,
//!    `acc[b mod 4] ← acc[b mod 4] ⊕ (f32(q_b) ⊗ s_b)`.
//! 4. Fold: `y = (acc[0] ⊕ acc[2]) ⊕ (acc[1] ⊕ acc[3])`.
//!
//! The result differs from the f32x4 contract's (fewer, different
//! roundings) — which is why this is a contract of its own and not a twin
//! of the f32x4 arm. NaN outputs compare by class (`fcvtl` quietens a
//! signalling-NaN scale, integer widening does not).
//!
//! # Arguments and row ranges
//!
//! [`Q8Rows2Args`] has [`Q8MatvecArgs`](super::Q8MatvecArgs)'s layout
//! (same [`offsets`](super::offsets)) with `weights` pointing at the
//! packed bytes. A call computes the pairs that meet `row_start..row_end`
//! and writes `y[n · rows + r]` only for `r` in that range, so any range
//! is valid, odd starts and ends included; the offer's member views cut at
//! even rows (granule 2) so that no pair is computed by two threads.
//!
//! # Registers in the bodies
//!
//! The arm and the twins hold one pair's four lanes for vectors `n`,
//! `n + 1` as one `.4s` per group: lane `2i + j` is vector `n + i`, row
//! `2p + j` (the `smmla` tile order with activations as the first
//! operand), so after the fold lanes 0, 1 are adjacent outputs.

pub mod arm;
pub mod reference;
pub mod twin_a64;
pub mod validation;

#[cfg(test)]
mod tests;

use std::ops::Range;
use std::sync::Arc;

use weft_kernel::{
    Aliasing, ArithmeticContract, Contract, FmaUse, KernelArgs, NanRule, PackedOperand,
    ReductionOrder, Refusal,
};

use super::{check_geometry, geometry, Q8Activations, Q8Weights, BLOCK_BYTES, BLOCK_LEN, FAMILY};

/// The arm's candidate name.
pub const ARM_NAME: &str = "q8_0.matvec.arm.rows2";

/// The name of the argument struct in this contract.
pub const ARGS_NAME: &str = "Q8Rows2Args";

/// The packed layout's name ([`PackedOperand::layout`]).
pub const LAYOUT: &str = "q8_0.rows2";

/// Bytes of one pair block: two scales and 64 interleaved quants.
pub const PAIR_BLOCK_BYTES: usize = 2 * BLOCK_BYTES;

/// Accumulator lanes per output (`b mod 4`).
pub const GROUPS: usize = 4;

/// Bytes of an 8-byte chunk (one `smmla` row).
const CHUNK: usize = 8;

/// Row pairs of a matrix with `rows` rows.
pub fn pairs(rows: usize) -> usize {
    rows.div_ceil(2)
}

/// Repack canonical W bytes (`rows × blocks` blocks) into the
/// `q8_0.rows2` layout (module docs). The caller has checked the length.
fn pack_bytes(w: &[u8], rows: usize, blocks: usize) -> Vec<u8> {
    let row_bytes = blocks * BLOCK_BYTES;
    let mut out = vec![0u8; pairs(rows) * blocks * PAIR_BLOCK_BYTES];
    for (p, pair) in out.chunks_exact_mut(blocks * PAIR_BLOCK_BYTES).enumerate() {
        for (j, r) in [2 * p, 2 * p + 1].into_iter().enumerate() {
            if r >= rows {
                continue; // the padding row stays all zero
            }
            let row = &w[r * row_bytes..(r + 1) * row_bytes];
            for (b, src) in row.chunks_exact(BLOCK_BYTES).enumerate() {
                let dst = &mut pair[b * PAIR_BLOCK_BYTES..(b + 1) * PAIR_BLOCK_BYTES];
                dst[2 * j..2 * j + 2].copy_from_slice(&src[..2]);
                for c in 0..BLOCK_LEN / CHUNK {
                    let at = 4 + 16 * c + CHUNK * j;
                    dst[at..at + CHUNK].copy_from_slice(&src[2 + CHUNK * c..2 + CHUNK * (c + 1)]);
                }
            }
        }
    }
    out
}

/// Repack W into the `q8_0.rows2` layout.
pub fn pack(w: &Q8Weights) -> Vec<u8> {
    pack_bytes(w.bytes(), w.rows(), w.blocks())
}

/// The canonical bytes of row `r`, read back from a packed buffer (tests
/// and diagnostics; the inverse of [`pack`] for rows `< rows`).
pub fn unpack_row(packed: &[u8], blocks: usize, r: usize) -> Vec<u8> {
    let (p, j) = (r / 2, r % 2);
    let pair = &packed[p * blocks * PAIR_BLOCK_BYTES..(p + 1) * blocks * PAIR_BLOCK_BYTES];
    let mut out = Vec::with_capacity(blocks * BLOCK_BYTES);
    for src in pair.chunks_exact(PAIR_BLOCK_BYTES) {
        out.extend_from_slice(&src[2 * j..2 * j + 2]);
        for c in 0..BLOCK_LEN / CHUNK {
            let at = 4 + 16 * c + CHUNK * j;
            out.extend_from_slice(&src[at..at + CHUNK]);
        }
    }
    out
}

/// The contract of every `q8_0.matvec` offer of the rows2 arm (module docs).
pub fn contract(rows: u64, cols: u64, batch: u64) -> Contract {
    Contract {
        family: FAMILY.to_owned(),
        geometry: geometry(rows, cols, batch),
        args: ARGS_NAME.to_owned(),
        arithmetic: ArithmeticContract {
            accumulator_lanes: GROUPS as u32,
            reduction: ReductionOrder::Strided {
                lanes: GROUPS as u32,
                fold: "lane b mod 4: y = (g0+g2)+(g1+g3)".to_owned(),
            },
            fma: FmaUse::Never,
            nan: NanRule::ByClass,
            notes: "q_b = exact i32 dot of the 32 quants of block b; \
                    s_b = f32(dw_b)*f32(dx_b); acc[b%4] += f32(q_b)*s_b \
                    (mul then add); weights packed as q8_0.rows2; \
                    activation quants in -127..=127"
                .to_owned(),
        },
        aliasing: Aliasing::disjoint(),
    }
}

fn bad(operand: &str, reason: String) -> Refusal {
    Refusal::BadOperand {
        operand: operand.to_owned(),
        reason,
    }
}

/// W in the `q8_0.rows2` layout, its length checked against its geometry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Q8Rows2Weights {
    bytes: Arc<[u8]>,
    rows: usize,
    blocks: usize,
}

impl Q8Rows2Weights {
    /// Repack `w`.
    pub fn from_weights(w: &Q8Weights) -> Self {
        Self {
            bytes: pack(w).into(),
            rows: w.rows(),
            blocks: w.blocks(),
        }
    }

    /// Wrap bytes already in the layout for `rows × cols`, refusing a
    /// wrong length (`bad-operand`).
    pub fn from_packed(bytes: Arc<[u8]>, rows: usize, cols: usize) -> Result<Self, Refusal> {
        let (rows, blocks, _) = check_geometry(rows as u64, cols as u64, 1)?;
        let want = pairs(rows) * blocks * PAIR_BLOCK_BYTES;
        if bytes.len() != want {
            return Err(bad(
                "weights",
                format!(
                    "{} packed bytes, {rows}×{cols} in {LAYOUT} needs {want}",
                    bytes.len()
                ),
            ));
        }
        Ok(Self {
            bytes,
            rows,
            blocks,
        })
    }

    /// Wrap an offer's packed operand, refusing another layout by name
    /// (`unknown-layout`) and a wrong length (`bad-operand`).
    pub fn from_operand(op: &PackedOperand, rows: usize, cols: usize) -> Result<Self, Refusal> {
        if op.layout != LAYOUT {
            return Err(Refusal::UnknownLayout {
                layout: op.layout.to_owned(),
            });
        }
        Self::from_packed(op.bytes.clone(), rows, cols)
    }

    /// The packed bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Rows of W (not counting a padding row).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Blocks per row.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// The packed operand an offer carries.
    pub fn operand(&self) -> PackedOperand {
        PackedOperand {
            name: "weights",
            layout: LAYOUT,
            bytes: self.bytes.clone(),
        }
    }
}

/// The arguments of every rows2 kernel (`extern "C" fn(*const
/// Q8Rows2Args)`): [`Q8MatvecArgs`](super::Q8MatvecArgs)'s layout, with
/// `weights` in the `q8_0.rows2` layout. Build them with
/// [`Q8Rows2Args::new`], which checks every length.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Q8Rows2Args {
    /// `⌈rows/2⌉ · blocks` pair blocks (the packed operand).
    pub weights: *const u8,
    /// `batch · blocks` Q8_0 blocks, quants in `-127..=127`.
    pub x: *const u8,
    /// `batch · rows` f32 outputs (`y[n · rows + r]`).
    pub y: *mut f32,
    /// Rows of W (the stride of `y` between vectors).
    pub rows: usize,
    /// Blocks per row (`cols / 32`).
    pub blocks: usize,
    /// Activation vectors, `1..=8`.
    pub batch: usize,
    /// First row written.
    pub row_start: usize,
    /// One past the last row written (`row_start ≤ row_end ≤ rows`).
    pub row_end: usize,
}

// The emitters address both argument structs through `super::offsets`.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(offset_of!(Q8Rows2Args, weights) == super::offsets::WEIGHTS as usize);
    assert!(offset_of!(Q8Rows2Args, x) == super::offsets::X as usize);
    assert!(offset_of!(Q8Rows2Args, y) == super::offsets::Y as usize);
    assert!(offset_of!(Q8Rows2Args, rows) == super::offsets::ROWS as usize);
    assert!(offset_of!(Q8Rows2Args, blocks) == super::offsets::BLOCKS as usize);
    assert!(offset_of!(Q8Rows2Args, batch) == super::offsets::BATCH as usize);
    assert!(offset_of!(Q8Rows2Args, row_start) == super::offsets::ROW_START as usize);
    assert!(offset_of!(Q8Rows2Args, row_end) == super::offsets::ROW_END as usize);
    assert!(size_of::<Q8Rows2Args>() == size_of::<super::Q8MatvecArgs>());
};

impl Q8Rows2Args {
    /// Arguments for rows `rows` of `Y = W·X`, every length checked: `x`
    /// must have W's blocks per row, `y` exactly `batch · W.rows()` f32s,
    /// and `rows` must lie inside W.
    pub fn new(
        weights: &Q8Rows2Weights,
        x: &Q8Activations,
        y: &mut [f32],
        rows: Range<usize>,
    ) -> Result<Self, Refusal> {
        if x.blocks() != weights.blocks() {
            return Err(bad(
                "x",
                format!(
                    "{} blocks per vector, W has {} per row",
                    x.blocks(),
                    weights.blocks()
                ),
            ));
        }
        let want = x.batch() * weights.rows();
        if y.len() != want {
            return Err(bad("y", format!("{} f32s, needs {want}", y.len())));
        }
        if rows.start > rows.end || rows.end > weights.rows() {
            return Err(bad(
                "rows",
                format!("{rows:?} is not inside 0..{}", weights.rows()),
            ));
        }
        Ok(Self {
            weights: weights.bytes().as_ptr(),
            x: x.bytes().as_ptr(),
            y: y.as_mut_ptr(),
            rows: weights.rows(),
            blocks: weights.blocks(),
            batch: x.batch(),
            row_start: rows.start,
            row_end: rows.end,
        })
    }
}

// SAFETY: `Q8Rows2Args` is the `#[repr(C)]` struct of every contract
// naming ARGS_NAME. A body reads `weights` and `x` (never written by any
// body) and writes `y[n · rows + r]` only for `r` in `row_start..row_end`
// (it may compute the other row of an edge pair, but never stores it), so
// copies restricted to disjoint row ranges write disjoint f32s and may run
// on different threads at once.
unsafe impl KernelArgs for Q8Rows2Args {
    const NAME: &'static str = ARGS_NAME;

    fn range(&self) -> Range<u64> {
        self.row_start as u64..self.row_end as u64
    }

    fn restrict(&self, range: Range<u64>) -> Self {
        Self {
            row_start: range.start as usize,
            row_end: range.end as usize,
            ..*self
        }
    }
}

// SAFETY: see `KernelArgs` above: the pointers are only dereferenced by a
// body called through `Kernel::call`, whose caller keeps them valid; the
// struct itself is plain data.
unsafe impl Send for Q8Rows2Args {}
// SAFETY: as for `Send`; a shared `&Q8Rows2Args` only lets threads copy it.
unsafe impl Sync for Q8Rows2Args {}
