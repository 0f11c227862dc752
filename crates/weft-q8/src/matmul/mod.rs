//! The Q8_0 matrix–matrix family (`q8_0.matmul`): `Y = W·X` for a prompt's
//! worth of activation vectors at once, weights repacked at plan time into
//! 16-row panels, one FMA per block and output.
//!
//! `q8_0.matvec` is built for decode: a few vectors, W streamed from
//! memory, a contract (no FMA, four strided lanes) whose float part costs
//! five vector operations per block pair and output. A prompt is compute
//! bound, so this family's contract is shaped for an outer product
//! instead: sixteen rows of a panel lie across one 512-bit register (four
//! bytes each, the `vpdpbusd`/`sdot` group), a vector's four quants are
//! broadcast against them, and the float part is one multiply and one
//! fused multiply–add per block, shared by nothing and reduced by nothing.
//!
//! # Packed layout `q8_0.panel16`
//!
//! [`pack`] turns canonical W (`rows × blocks` Q8_0 blocks, see the
//! [family docs](super)) into `⌈rows/16⌉ × blocks` **panel blocks** of
//! [`PANEL_BLOCK_BYTES`] = 576 bytes; panel `p` holds rows `16p..16p+16`,
//! its block `b` starts at byte `(p · blocks + b) · 576`:
//!
//! | bytes | content |
//! |---|---|
//! | `4j .. 4j+4` (`j < 16`) | `f32(dw)` of row `16p + j`, block `b` (exact widening, little-endian) |
//! | `64 + 64g + 4j .. +4` (`g < 8`) | quants `4g..4g+4` of row `16p + j`, each stored as `w + 128` (a `u8`) |
//!
//! Rows past `rows` in the last panel are **padding**: scale `+0.0`,
//! quants `0x80` (`w = 0`); their outputs are computed and never written.
//! The quants are stored biased because `vpdpbusd` multiplies unsigned
//! bytes in a register by signed bytes it may broadcast from memory: the
//! activation's four quants are the broadcast. arm64 bodies flip the bias
//! back with one `eor` per weight register (shared by every vector of a
//! tile).
//!
//! # Contract (how every body rounds)
//!
//! For one row `r` and one vector `n`, with `w`/`x` the quants and
//! `dw_b`/`dx_b` the scales of block `b`:
//!
//! 1. Integer part, exact, **per block**: `q_b = Σ_{k<32} w[32b+k] ·
//!    x[32b+k]` (an `i32`, `|q_b| ≤ 32 · 128 · 127 < 2^24`, so `f32(q_b)` is
//!    exact). Any exact method may compute it (`vpdpbusd` on the biased
//!    quants less `128 · Σx`, `sdot`, widening multiplies).
//! 2. Scale: `s_b = f32(dw_b) ⊗ f32(dx_b)` (exact widenings, one IEEE
//!    multiply, round to nearest even).
//! 3. Accumulate **with FMA**, one lane: `acc = +0.0`; for `b = 0, 1, …` in
//!    order, `acc ← fma(f32(q_b), s_b, acc)` (one rounding).
//! 4. `y = acc`.
//!
//! The result differs from both `q8_0.matvec` contracts (other roundings),
//! so a prompt run through this family gives logits a few ulps away from
//! the same prompt fed one token at a time through `q8_0.matvec`. NaN
//! outputs compare by class (F16C and `fcvtl` quieten a signalling-NaN
//! scale, integer widening does not).
//!
//! # Arguments and row ranges
//!
//! [`Q8MatmulArgs`] has [`Q8MatvecArgs`](super::Q8MatvecArgs)'s layout
//! (same [`offsets`](super::offsets)) with `weights` pointing at the
//! packed bytes and `batch` in `1..=`[`MAX_BATCH`]. A call computes the
//! panels that meet `row_start..row_end` and writes `y[n · rows + r]`
//! only for `r` in that range; the offer's member views cut at multiples
//! of 16 so that no panel is computed by two threads.
//!
//! # Who packs
//!
//! A site that carries its `weights` (canonical Q8_0 bytes) gets an offer
//! that carries them packed, a plan-time operand shared by the arm and its
//! twins. A site without them (a model's layers: one site serves every
//! layer, weights are call arguments) gets an offer with no packed
//! operand, and its caller packs each matrix once
//! ([`Q8PanelWeights::from_canonical`]) and passes the panels per call.
//!
//! # Bodies
//!
//! [`arm`] is the Cranelift panel arm, the reference every twin is judged
//! against; [`twin_x64`] the AVX-512 VNNI tiles (48 rows × 4 vectors, 32
//! × 6); [`twin_avx2`] one panel × two vectors for hosts without VNNI
//! (`vpmaddubsw`, as the AVX2 matvec twins); [`twin_a64`] the SDOT tile
//! on arm64. The planner prices each from its bytes at the site's
//! geometry and races those it cannot separate.

pub mod arm;
pub mod reference;
pub mod twin_a64;
pub mod twin_avx2;
pub mod twin_x64;
pub mod validation;

#[cfg(test)]
mod tests;

use std::ops::Range;
use std::sync::Arc;

use weft_kernel::{
    Aliasing, ArithmeticContract, Contract, FmaUse, Geometry, KernelArgs, NanRule, PackedOperand,
    ReductionOrder, Refusal,
};

use super::block::f16_to_f32;
use super::{Q8Activations, Q8Weights, BLOCK_BYTES, BLOCK_LEN};

/// The family's name.
pub const FAMILY: &str = "q8_0.matmul";

/// The arm's candidate name.
pub const ARM_NAME: &str = "q8_0.matmul.arm.panel16";

/// The name of the argument struct in contracts.
pub const ARGS_NAME: &str = "Q8MatmulArgs";

/// The packed layout's name ([`PackedOperand::layout`]).
pub const LAYOUT: &str = "q8_0.panel16";

/// Rows per panel: one 512-bit register of i32 lanes.
pub const PANEL_ROWS: usize = 16;

/// Bytes of one panel block: 16 f32 scales, then 8 groups of 16 × 4
/// biased quants.
pub const PANEL_BLOCK_BYTES: usize = 4 * PANEL_ROWS + PANEL_ROWS * BLOCK_LEN;

/// Byte offset of the quants in a panel block.
pub const QUANTS_AT: usize = 4 * PANEL_ROWS;

/// Bytes of one group (four quants of each of the 16 rows).
pub const GROUP_BYTES: usize = 4 * PANEL_ROWS;

/// Groups of four quants per block.
pub const GROUPS: usize = BLOCK_LEN / 4;

/// Largest batch (activation vectors per call) the contract admits.
pub const MAX_BATCH: usize = 512;

/// The family as a planner registers it: the panel arm with its twins
/// (every ISA; the planner skips what the host cannot run), validation and
/// micro-race bench.
pub fn entry() -> weft_kernel::FamilyEntry {
    use weft_kernel::{ArmEntry, Twin};
    use weft_validate::Checker;
    fn arc<T: Twin + 'static>(t: T) -> Arc<dyn Twin> {
        Arc::new(t)
    }
    weft_kernel::FamilyEntry {
        family: weft_kernel::Family(FAMILY),
        arms: vec![ArmEntry::new(
            Arc::new(arm::Q8MatmulArm),
            twin_x64::TWINS
                .into_iter()
                .map(arc)
                .chain(twin_avx2::TWINS.into_iter().map(arc))
                .chain(twin_a64::TWINS.into_iter().map(arc))
                .collect(),
            Arc::new(Checker(validation::MatmulValidation)),
            Some(Arc::new(validation::MatmulBench)),
        )],
    }
}

/// Panels of a matrix with `rows` rows.
pub fn panels(rows: usize) -> usize {
    rows.div_ceil(PANEL_ROWS)
}

fn bad(operand: &str, reason: String) -> Refusal {
    Refusal::BadOperand {
        operand: operand.to_owned(),
        reason,
    }
}

fn geometry_refusal(reason: String) -> Refusal {
    Refusal::UnsupportedGeometry { reason }
}

/// Check a geometry against the contract: `rows ≥ 1`, `cols` a positive
/// multiple of 32, `batch` in `1..=MAX_BATCH`, every byte extent within
/// `isize`. Returns `(rows, blocks, batch)`.
pub fn check_geometry(rows: u64, cols: u64, batch: u64) -> Result<(usize, usize, usize), Refusal> {
    if batch == 0 || batch > MAX_BATCH as u64 {
        return Err(geometry_refusal(format!(
            "batch {batch} is outside 1..={MAX_BATCH}"
        )));
    }
    // The matvec check covers rows and cols; its batch bound is its own.
    let (rows, blocks, _) = super::check_geometry(rows, cols, 1)?;
    panels(rows)
        .checked_mul(blocks)
        .and_then(|n| n.checked_mul(PANEL_BLOCK_BYTES))
        .filter(|n| *n <= isize::MAX as usize)
        .ok_or_else(|| geometry_refusal("rows × cols too large".into()))?;
    Ok((rows, blocks, batch as usize))
}

/// The geometry of a site: `rows`, `cols`, `batch`.
pub fn geometry(rows: u64, cols: u64, batch: u64) -> Geometry {
    super::geometry(rows, cols, batch)
}

/// The `(rows, cols, batch)` of a geometry, checked against the contract
/// (`batch` defaults to 1).
pub fn dims(geometry: &Geometry) -> Result<(u64, u64, u64), Refusal> {
    let rows = geometry.require("rows")?;
    let cols = geometry.require("cols")?;
    let batch = geometry.get("batch").unwrap_or(1);
    check_geometry(rows, cols, batch)?;
    Ok((rows, cols, batch))
}

/// The contract of every `q8_0.matmul` offer (module docs).
pub fn contract(rows: u64, cols: u64, batch: u64) -> Contract {
    Contract {
        family: FAMILY.to_owned(),
        geometry: geometry(rows, cols, batch),
        args: ARGS_NAME.to_owned(),
        arithmetic: ArithmeticContract {
            accumulator_lanes: 1,
            reduction: ReductionOrder::Sequential,
            fma: FmaUse::AsSpecified,
            nan: NanRule::ByClass,
            notes: "q_b = exact i32 dot of the 32 quants of block b; \
                    s_b = f32(dw_b)*f32(dx_b); acc = fma(f32(q_b), s_b, acc) \
                    for b in order from +0.0; weights packed as q8_0.panel16; \
                    activation quants in -127..=127"
                .to_owned(),
        },
        aliasing: Aliasing::disjoint(),
    }
}

/// Repack canonical W bytes (`rows × blocks` blocks) into the
/// `q8_0.panel16` layout (module docs). The caller has checked the length.
fn pack_bytes(w: &[u8], rows: usize, blocks: usize) -> Vec<u8> {
    let mut out = vec![0u8; packed_len(rows, blocks)];
    pack_into(w, rows, blocks, &mut out);
    out
}

/// Bytes of a `rows × 32·blocks` matrix in the `q8_0.panel16` layout.
pub fn packed_len(rows: usize, blocks: usize) -> usize {
    panels(rows) * blocks * PANEL_BLOCK_BYTES
}

/// Pack canonical Q8_0 bytes of `rows × 32·blocks` into `out`, which the
/// caller places (the engine packs every block's matrices into one
/// huge-page arena, in the order a step reads them).
///
/// # Panics
///
/// If `w` is not `rows · blocks` canonical blocks or `out` is not
/// [`packed_len`] bytes: a caller's bug, not input (lengths are checked
/// where the bytes arrive, as [`Q8PanelWeights::from_canonical`] does).
pub fn pack_into(w: &[u8], rows: usize, blocks: usize, out: &mut [u8]) {
    assert_eq!(w.len(), rows * blocks * BLOCK_BYTES, "canonical bytes");
    assert_eq!(out.len(), packed_len(rows, blocks), "packed bytes");
    let row_bytes = blocks * BLOCK_BYTES;
    let panel_bytes = blocks * PANEL_BLOCK_BYTES;
    for (p, panel) in out.chunks_exact_mut(panel_bytes).enumerate() {
        for (b, dst) in panel.chunks_exact_mut(PANEL_BLOCK_BYTES).enumerate() {
            // Padding rows: scale +0.0, quants w = 0 (`out` may hold
            // anything).
            dst[..QUANTS_AT].fill(0);
            dst[QUANTS_AT..].fill(0x80);
            for j in 0..PANEL_ROWS {
                let r = PANEL_ROWS * p + j;
                if r >= rows {
                    break;
                }
                let src = &w[r * row_bytes + b * BLOCK_BYTES..][..BLOCK_BYTES];
                let d = f16_to_f32(u16::from_le_bytes([src[0], src[1]]));
                dst[4 * j..4 * j + 4].copy_from_slice(&d.to_bits().to_le_bytes());
                for g in 0..GROUPS {
                    let at = QUANTS_AT + GROUP_BYTES * g + 4 * j;
                    for k in 0..4 {
                        dst[at + k] = src[2 + 4 * g + k] ^ 0x80;
                    }
                }
            }
        }
    }
}

/// Repack W into the `q8_0.panel16` layout.
pub fn pack(w: &Q8Weights) -> Vec<u8> {
    pack_bytes(w.bytes(), w.rows(), w.blocks())
}

/// Row `r`'s scales (as f32) and quants (signed), read back from a packed
/// buffer: block `b` is `(dw_b, q[32b..32b+32])`. Tests and the reference
/// read the layout through this one function.
pub fn unpack_row(packed: &[u8], blocks: usize, r: usize) -> Vec<(f32, [i8; BLOCK_LEN])> {
    let (p, j) = (r / PANEL_ROWS, r % PANEL_ROWS);
    let panel = &packed[p * blocks * PANEL_BLOCK_BYTES..(p + 1) * blocks * PANEL_BLOCK_BYTES];
    panel
        .chunks_exact(PANEL_BLOCK_BYTES)
        .map(|src| {
            let d = f32::from_le_bytes(src[4 * j..4 * j + 4].try_into().expect("4 bytes"));
            let mut q = [0i8; BLOCK_LEN];
            for g in 0..GROUPS {
                for k in 0..4 {
                    q[4 * g + k] = (src[QUANTS_AT + GROUP_BYTES * g + 4 * j + k] ^ 0x80) as i8;
                }
            }
            (d, q)
        })
        .collect()
}

/// Blocks per row of canonical Q8_0 bytes `w` of `rows × cols`, refusing a
/// geometry the contract does not admit or a wrong length
/// (`bad-operand`): the check before [`pack_into`].
pub fn canonical_blocks(w: &[u8], rows: usize, cols: usize) -> Result<usize, Refusal> {
    let (rows, blocks, _) = check_geometry(rows as u64, cols as u64, 1)?;
    let want = rows * blocks * BLOCK_BYTES;
    if w.len() != want {
        return Err(bad(
            "weights",
            format!("{} bytes, {rows}×{cols} Q8_0 needs {want}", w.len()),
        ));
    }
    Ok(blocks)
}

/// W in the `q8_0.panel16` layout, its length checked against its geometry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Q8PanelWeights {
    bytes: Arc<[u8]>,
    rows: usize,
    blocks: usize,
}

impl Q8PanelWeights {
    /// Repack `w`.
    pub fn from_weights(w: &Q8Weights) -> Self {
        Self {
            bytes: pack(w).into(),
            rows: w.rows(),
            blocks: w.blocks(),
        }
    }

    /// Pack canonical Q8_0 bytes of `rows × cols` (GGUF's row-major
    /// blocks), refusing a geometry the contract does not admit or a wrong
    /// length (`bad-operand`).
    pub fn from_canonical(w: &[u8], rows: usize, cols: usize) -> Result<Self, Refusal> {
        let blocks = canonical_blocks(w, rows, cols)?;
        Ok(Self {
            bytes: pack_bytes(w, rows, blocks).into(),
            rows,
            blocks,
        })
    }

    /// Wrap bytes already in the layout for `rows × cols`, refusing a
    /// wrong length (`bad-operand`).
    pub fn from_packed(bytes: Arc<[u8]>, rows: usize, cols: usize) -> Result<Self, Refusal> {
        let (rows, blocks, _) = check_geometry(rows as u64, cols as u64, 1)?;
        let want = packed_len(rows, blocks);
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

    /// Rows of W (not counting padding rows).
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

/// Activations for this family: [`Q8Activations`] with a batch of up to
/// [`MAX_BATCH`] vectors (the matvec constructor stops at its own 8).
/// Refuses a wrong length and a quant of -128 (`bad-operand`).
pub fn activations(bytes: Vec<u8>, cols: usize, batch: usize) -> Result<Q8Activations, Refusal> {
    let (_, blocks, batch) = check_geometry(1, cols as u64, batch as u64)?;
    Q8Activations::checked(bytes, blocks, batch)
}

/// The arguments of every `q8_0.matmul` kernel (`extern "C" fn(*const
/// Q8MatmulArgs)`): [`Q8MatvecArgs`](super::Q8MatvecArgs)'s layout, with
/// `weights` in the `q8_0.panel16` layout. Build them with
/// [`Q8MatmulArgs::new`] or [`Q8MatmulArgs::from_slices`], which check
/// every length.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Q8MatmulArgs {
    /// `⌈rows/16⌉ · blocks` panel blocks (the packed operand).
    pub weights: *const u8,
    /// `batch · blocks` Q8_0 blocks, quants in `-127..=127`.
    pub x: *const u8,
    /// `batch · rows` f32 outputs (`y[n · rows + r]`).
    pub y: *mut f32,
    /// Rows of W (the stride of `y` between vectors).
    pub rows: usize,
    /// Blocks per row (`cols / 32`).
    pub blocks: usize,
    /// Activation vectors, `1..=MAX_BATCH`.
    pub batch: usize,
    /// First row written.
    pub row_start: usize,
    /// One past the last row written (`row_start ≤ row_end ≤ rows`).
    pub row_end: usize,
}

// The emitters address this struct through `super::offsets`.
const _: () = {
    use super::offsets as o;
    use std::mem::{offset_of, size_of};
    assert!(offset_of!(Q8MatmulArgs, weights) == o::WEIGHTS as usize);
    assert!(offset_of!(Q8MatmulArgs, x) == o::X as usize);
    assert!(offset_of!(Q8MatmulArgs, y) == o::Y as usize);
    assert!(offset_of!(Q8MatmulArgs, rows) == o::ROWS as usize);
    assert!(offset_of!(Q8MatmulArgs, blocks) == o::BLOCKS as usize);
    assert!(offset_of!(Q8MatmulArgs, batch) == o::BATCH as usize);
    assert!(offset_of!(Q8MatmulArgs, row_start) == o::ROW_START as usize);
    assert!(offset_of!(Q8MatmulArgs, row_end) == o::ROW_END as usize);
    assert!(size_of::<Q8MatmulArgs>() == size_of::<super::Q8MatvecArgs>());
};

impl Q8MatmulArgs {
    /// Arguments for rows `rows` of `Y = W·X`, every length checked: `x`
    /// must have W's blocks per row, `y` exactly `batch · W.rows()` f32s,
    /// and `rows` must lie inside W.
    pub fn new(
        weights: &Q8PanelWeights,
        x: &Q8Activations,
        y: &mut [f32],
        rows: Range<usize>,
    ) -> Result<Self, Refusal> {
        Self::from_slices(
            weights.bytes(),
            x.bytes(),
            y,
            (weights.rows(), BLOCK_LEN * weights.blocks(), x.batch()),
            rows,
        )
    }

    /// Arguments over packed weights and raw Q8_0 activation bytes,
    /// every length checked: `weights` exactly the `q8_0.panel16` bytes of
    /// `rows × cols`, `x` exactly `batch` vectors of `cols` with no quant
    /// of -128, `y` exactly `batch · rows` f32s, `row_range` inside
    /// `0..rows`.
    pub fn from_slices(
        weights: &[u8],
        x: &[u8],
        y: &mut [f32],
        (rows, cols, batch): (usize, usize, usize),
        row_range: Range<usize>,
    ) -> Result<Self, Refusal> {
        let (rows, blocks, batch) = check_geometry(rows as u64, cols as u64, batch as u64)?;
        let want = packed_len(rows, blocks);
        if weights.len() != want {
            return Err(bad(
                "weights",
                format!(
                    "{} packed bytes, {rows}×{cols} in {LAYOUT} needs {want}",
                    weights.len()
                ),
            ));
        }
        super::check_x(x, blocks, batch)?;
        if y.len() != batch * rows {
            return Err(bad(
                "y",
                format!("{} f32s, needs {}", y.len(), batch * rows),
            ));
        }
        if row_range.start > row_range.end || row_range.end > rows {
            return Err(bad(
                "rows",
                format!("{row_range:?} is not inside 0..{rows}"),
            ));
        }
        Ok(Self {
            weights: weights.as_ptr(),
            x: x.as_ptr(),
            y: y.as_mut_ptr(),
            rows,
            blocks,
            batch,
            row_start: row_range.start,
            row_end: row_range.end,
        })
    }
}

// SAFETY: `Q8MatmulArgs` is the `#[repr(C)]` struct of every contract
// naming ARGS_NAME. A body reads `weights` and `x` (never written by any
// body) and writes `y[n · rows + r]` only for `r` in `row_start..row_end`
// (it may compute other rows of an edge panel, but never stores them), so
// copies restricted to disjoint row ranges write disjoint f32s and may run
// on different threads at once.
unsafe impl KernelArgs for Q8MatmulArgs {
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
unsafe impl Send for Q8MatmulArgs {}
// SAFETY: as for `Send`; a shared `&Q8MatmulArgs` only lets threads copy it.
unsafe impl Sync for Q8MatmulArgs {}
