//! The Q8_0 family: the GGUF `Q8_0` block format, its quantisers, and the
//! matrix–vector product `Y = W·X` with `W` and `X` in Q8_0
//! (family `q8_0.matvec`).
//!
//! # Layout
//!
//! - A **block** ([`block`]) is 34 bytes: scale `d` (binary16,
//!   little-endian), then 32 `i8` quants; value `i` is `f32(d) * q[i]`.
//! - **W** is `rows × cols`, `cols = 32 · blocks`, row-major blocks: block
//!   `b` of row `r` starts at byte `(r · blocks + b) · 34` (exactly the
//!   GGUF tensor data). Any bytes are valid: quants may be -128, scales may
//!   be any binary16 (subnormal, inf, NaN).
//! - **X** is `batch` activation vectors (`1..=8`), each `blocks` blocks,
//!   vector `n` starting at byte `n · blocks · 34`, made by
//!   [`quantize_activations`] (the weight quantiser's exact rounding, see
//!   [`block`]). **Precondition:** activation quants lie in `-127..=127`
//!   ([`Q8Activations`] checks it), so every exact integer method
//!   (sign tricks, biases) gives the same dot products.
//! - **Y** is `batch × rows` f32, `y[n · rows + r]`.
//! # Family layout
//!
//! Every family crate is laid out the same way: this file is the contract
//! (arguments, geometry, rounding) and [`entry`], which registers each arm
//! with its own twins, check and bench; [`reference`](mod@reference) is the scalar
//! definition of the results; [`arm`] the Cranelift body; [`twin_x64`] and
//! [`twin_a64`] the bodies Weft emits itself; [`validation`] the cases a
//! twin is judged on. The second contract ([`rows2`]) and the activation
//! quantiser ([`quantize`]) repeat that layout one level down. The block
//! numerics ([`block`]) are `weft-quant`'s, shared with the file reader.
//!
//! - Arguments: [`Q8MatvecArgs`] (`#[repr(C)]`, 8 words); a call computes
//!   rows `row_start..row_end` of every vector, touching only those outputs.
//!
//! # Contract (how every arm and twin rounds)
//!
//! For one row `r` and one vector `n`, with `w`/`x` the quants and
//! `dw_b`/`dx_b` the scales of block `b`:
//!
//! 1. Integer part, exact: for block `b` and `j = 0..8`,
//!    `q[b][j] = Σ_{k<4} w[32b+4j+k] · x[32b+4j+k]` (an `i32`, `|q| ≤ 65024`,
//!    so `f32(q)` is exact). Any exact method may compute it.
//! 2. Scale: `s_b = f32(dw_b) ⊗ f32(dx_b)` (fp16 widening is exact; `⊗` is
//!    one IEEE f32 multiply, round to nearest even).
//! 3. Accumulate, **no FMA**: 32 f32 lanes `acc[g][j]` (`g = 0..4`, `j =
//!    0..8`), all `+0.0` at first; for `b = 0, 1, …` in order,
//!    `acc[b mod 4][j] ← acc[b mod 4][j] ⊕ (f32(q[b][j]) ⊗ s_b)`.
//! 4. Fold: `t[j] = (acc[0][j] ⊕ acc[2][j]) ⊕ (acc[1][j] ⊕ acc[3][j])`;
//!    `u[j] = t[j] ⊕ t[j+4]` (`j < 4`); `y = (u[0] ⊕ u[2]) ⊕ (u[1] ⊕ u[3])`.
//!
//! A lane that receives `+0.0 ⊗ s` or `f32(0) ⊗ 0` keeps its value (an
//! accumulator that starts at `+0.0` is never `-0.0`), so a twin may pad a
//! ragged last group with zero quants and a zero scale. NaN outputs compare
//! by class ([`weft_kernel::NanRule::ByClass`]): F16C quietens signalling
//! NaN scales, integer widening does not. The arm holds the 32 lanes as
//! eight f32x4 vectors (`acc[g][0..4]`, `acc[g][4..8]`); an AVX2 twin as
//! four ymm, an AVX-512 twin as two zmm (`acc[0]|acc[1]`, `acc[2]|acc[3]`);
//! an arm64 twin ([`twin_a64`]) as eight `.4s` per row, integer part by `sdot`.
//!
//! A second contract of the family, with its own arm, packed weights and
//! arm64 twins (`smmla`, `sdot`), lives in [`rows2`]: integer part per
//! block, four lanes per output. [`entry`] registers both arms, each with
//! its own twins, validation and bench, so a twin is judged by its own
//! arm's contract with no dispatch on contract names.

pub mod arm;
pub mod block;
pub mod matmul;
pub mod quantize;
pub mod reference;
pub mod rows2;
pub mod twin_a64;
pub mod twin_x64;
pub mod validation;

#[cfg(test)]
mod tests;

use std::ops::Range;
use std::sync::Arc;

use weft_kernel::{
    Aliasing, ArithmeticContract, Contract, FmaUse, Geometry, KernelArgs, NanRule, ReductionOrder,
    Refusal,
};

pub use block::{BlockQ8_0, BLOCK_BYTES, BLOCK_LEN};

/// The family's name.
pub const FAMILY: &str = "q8_0.matvec";

/// The family as a planner registers it: two arms, each with its own
/// contract, twins (all ISAs; the planner skips what the host cannot run),
/// validation and micro-race bench — f32x4 first (the default), then rows2,
/// whose weights are packed.
pub fn entry() -> weft_kernel::FamilyEntry {
    use std::sync::Arc;
    use weft_kernel::{ArmEntry, Twin};
    use weft_validate::Checker;
    fn arc<T: Twin + 'static>(t: T) -> Arc<dyn Twin> {
        Arc::new(t)
    }
    let f32x4 = ArmEntry::new(
        Arc::new(arm::Q8MatvecArm),
        twin_x64::TWINS
            .into_iter()
            .map(arc)
            .chain(twin_a64::SDOT_TWINS.into_iter().map(arc))
            .collect(),
        Arc::new(Checker(validation::Q8Validation)),
        Some(Arc::new(validation::Q8Bench)),
    );
    let rows2 = ArmEntry::new(
        Arc::new(rows2::arm::Q8Rows2Arm),
        rows2::twin_a64::ROWS2_TWINS.into_iter().map(arc).collect(),
        Arc::new(Checker(rows2::validation::Rows2Validation)),
        Some(Arc::new(rows2::validation::Rows2Bench)),
    );
    weft_kernel::FamilyEntry {
        family: weft_kernel::Family(FAMILY),
        arms: vec![f32x4, rows2],
    }
}

/// The name of the argument struct in contracts.
pub const ARGS_NAME: &str = "Q8MatvecArgs";

/// Largest batch (activation vectors per call) the contract admits.
pub const MAX_BATCH: usize = 8;

/// The arguments of every `q8_0.matvec` kernel (`extern "C" fn(*const
/// Q8MatvecArgs)`). Build them with [`Q8MatvecArgs::new`], which checks
/// every length.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Q8MatvecArgs {
    /// `rows · blocks` Q8_0 blocks.
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
    /// First row computed.
    pub row_start: usize,
    /// One past the last row computed (`row_start ≤ row_end ≤ rows`).
    pub row_end: usize,
}

// SAFETY: `Q8MatvecArgs` is the `#[repr(C)]` struct of every contract
// naming ARGS_NAME. A body reads `weights` and `x` (never written by any
// body) and writes `y[n · rows + r]` only for `r` in `row_start..row_end`,
// so copies restricted to disjoint row ranges write disjoint f32s and may
// run on different threads at once.
unsafe impl KernelArgs for Q8MatvecArgs {
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
unsafe impl Send for Q8MatvecArgs {}
// SAFETY: as for `Send`; a shared `&Q8MatvecArgs` only lets threads copy it.
unsafe impl Sync for Q8MatvecArgs {}

/// Byte offsets of the fields of [`Q8MatvecArgs`] (the emitters' view).
pub mod offsets {
    /// `weights`.
    pub const WEIGHTS: i32 = 0;
    /// `x`.
    pub const X: i32 = 8;
    /// `y`.
    pub const Y: i32 = 16;
    /// `rows`.
    pub const ROWS: i32 = 24;
    /// `blocks`.
    pub const BLOCKS: i32 = 32;
    /// `batch`.
    pub const BATCH: i32 = 40;
    /// `row_start`.
    pub const ROW_START: i32 = 48;
    /// `row_end`.
    pub const ROW_END: i32 = 56;
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
/// multiple of 32, `batch` in `1..=8`. Returns `(rows, blocks, batch)`.
pub fn check_geometry(rows: u64, cols: u64, batch: u64) -> Result<(usize, usize, usize), Refusal> {
    if rows == 0 {
        return Err(geometry_refusal("rows is 0".into()));
    }
    if cols == 0 || !cols.is_multiple_of(BLOCK_LEN as u64) {
        return Err(geometry_refusal(format!(
            "cols {cols} is not a positive multiple of {BLOCK_LEN}"
        )));
    }
    if batch == 0 || batch > MAX_BATCH as u64 {
        return Err(geometry_refusal(format!(
            "batch {batch} is outside 1..={MAX_BATCH}"
        )));
    }
    let rows = usize::try_from(rows).map_err(|_| geometry_refusal("rows too large".into()))?;
    let blocks = usize::try_from(cols / BLOCK_LEN as u64)
        .map_err(|_| geometry_refusal("cols too large".into()))?;
    // Byte extents must fit in isize for the kernels' address arithmetic.
    rows.checked_mul(blocks)
        .and_then(|n| n.checked_mul(BLOCK_BYTES))
        .filter(|n| *n <= isize::MAX as usize)
        .ok_or_else(|| geometry_refusal("rows × cols too large".into()))?;
    Ok((rows, blocks, batch as usize))
}

/// The geometry of a site: `rows`, `cols`, `batch`.
pub fn geometry(rows: u64, cols: u64, batch: u64) -> Geometry {
    Geometry::new()
        .with("rows", rows)
        .with("cols", cols)
        .with("batch", batch)
}

/// The contract of every `q8_0.matvec` offer (see the module docs).
pub fn contract(rows: u64, cols: u64, batch: u64) -> Contract {
    Contract {
        family: FAMILY.to_owned(),
        geometry: geometry(rows, cols, batch),
        args: ARGS_NAME.to_owned(),
        arithmetic: ArithmeticContract {
            accumulator_lanes: 32,
            reduction: ReductionOrder::Strided {
                lanes: 32,
                fold: "lane (b mod 4, j): t[j] = (g0+g2)+(g1+g3); u[j] = t[j]+t[j+4]; \
                       y = (u0+u2)+(u1+u3)"
                    .to_owned(),
            },
            fma: FmaUse::Never,
            nan: NanRule::ByClass,
            notes: "q[b][j] = exact i32 dot of bytes 4j..4j+4 of block b; \
                    s_b = f32(dw_b)*f32(dx_b); acc[b%4][j] += f32(q[b][j])*s_b \
                    (mul then add); activation quants in -127..=127"
                .to_owned(),
        },
        aliasing: Aliasing::disjoint(),
    }
}

/// A Q8_0 weight matrix: `rows × blocks` blocks of bytes, checked.
///
/// The bytes are shared and owned by whoever made them: a `Vec`, or
/// memory placed for streaming (a model's weights on huge pages).
#[derive(Clone)]
pub struct Q8Weights {
    bytes: Arc<dyn AsRef<[u8]> + Send + Sync>,
    rows: usize,
    blocks: usize,
}

impl std::fmt::Debug for Q8Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Q8Weights")
            .field("rows", &self.rows)
            .field("blocks", &self.blocks)
            .field("bytes", &self.bytes().len())
            .finish()
    }
}

impl PartialEq for Q8Weights {
    fn eq(&self, other: &Q8Weights) -> bool {
        (self.rows, self.blocks) == (other.rows, other.blocks) && self.bytes() == other.bytes()
    }
}

impl Eq for Q8Weights {}

impl Q8Weights {
    /// Wrap GGUF Q8_0 tensor bytes of `rows × cols` (`cols` a multiple of
    /// 32); any bit patterns are valid.
    pub fn from_bytes(bytes: Vec<u8>, rows: usize, cols: usize) -> Result<Self, Refusal> {
        Self::from_shared(bytes, rows, cols)
    }

    /// [`Q8Weights::from_bytes`] over bytes owned elsewhere.
    pub fn from_shared(
        bytes: impl AsRef<[u8]> + Send + Sync + 'static,
        rows: usize,
        cols: usize,
    ) -> Result<Self, Refusal> {
        let (rows, blocks, _) = check_geometry(rows as u64, cols as u64, 1)?;
        let want = rows * blocks * BLOCK_BYTES;
        let len = bytes.as_ref().len();
        if len != want {
            return Err(bad(
                "weights",
                format!("{len} bytes, {rows}×{cols} Q8_0 needs {want}"),
            ));
        }
        Ok(Self {
            bytes: Arc::new(bytes),
            rows,
            blocks,
        })
    }

    /// Quantise row-major f32 weights `rows × cols` with the reference
    /// quantiser.
    pub fn quantize(values: &[f32], rows: usize, cols: usize) -> Result<Self, Refusal> {
        check_geometry(rows as u64, cols as u64, 1)?;
        if values.len() != rows * cols {
            return Err(bad(
                "weights",
                format!("{} values for {rows}×{cols}", values.len()),
            ));
        }
        let mut bytes = Vec::new();
        for row in values.chunks_exact(cols) {
            block::quantize_row_into(row, &mut bytes)
                .map_err(|e| geometry_refusal(e.to_string()))?;
        }
        Self::from_bytes(bytes, rows, cols)
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        (*self.bytes).as_ref()
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Blocks per row.
    pub fn blocks(&self) -> usize {
        self.blocks
    }
}

/// Quantised activations: `batch` vectors of `blocks` blocks whose quants
/// lie in `-127..=127` (checked, the contract's precondition).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Q8Activations {
    bytes: Vec<u8>,
    blocks: usize,
    batch: usize,
}

impl Q8Activations {
    /// Wrap Q8_0 bytes of `batch` vectors of `cols` values, refusing a
    /// quant of -128 (`bad-operand`).
    pub fn from_bytes(bytes: Vec<u8>, cols: usize, batch: usize) -> Result<Self, Refusal> {
        let (_, blocks, batch) = check_geometry(1, cols as u64, batch as u64)?;
        Self::checked(bytes, blocks, batch)
    }

    /// Wrap `bytes` of a geometry the caller's contract has admitted,
    /// checking them as every contract of the crate needs ([`check_x`]).
    pub(crate) fn checked(bytes: Vec<u8>, blocks: usize, batch: usize) -> Result<Self, Refusal> {
        check_x(&bytes, blocks, batch)?;
        Ok(Self {
            bytes,
            blocks,
            batch,
        })
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Blocks per vector.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Vectors.
    pub fn batch(&self) -> usize {
        self.batch
    }
}

/// Activation bytes as every contract of the crate takes them: exactly
/// `batch` vectors of `blocks` Q8_0 blocks, no quant of -128 (the
/// precondition that makes every exact integer method agree);
/// `bad-operand` otherwise.
pub(crate) fn check_x(x: &[u8], blocks: usize, batch: usize) -> Result<(), Refusal> {
    let want = batch * blocks * BLOCK_BYTES;
    if x.len() != want {
        return Err(bad(
            "x",
            format!(
                "{} bytes, {batch}×{} Q8_0 needs {want}",
                x.len(),
                blocks * BLOCK_LEN
            ),
        ));
    }
    if let Some(i) = x
        .chunks_exact(BLOCK_BYTES)
        .position(|b| b[2..].contains(&0x80))
    {
        return Err(bad(
            "x",
            format!("block {i} holds the quant -128 (the contract needs -127..=127)"),
        ));
    }
    Ok(())
}

/// The activation-quantisation kernel (scalar reference): `batch` f32
/// vectors of `cols` values each (`x[n · cols + i]`) to Q8_0. Its rounding
/// is the weight quantiser's, bit for bit ([`block::quantize_block`]).
pub fn quantize_activations(
    x: &[f32],
    cols: usize,
    batch: usize,
) -> Result<Q8Activations, Refusal> {
    check_geometry(1, cols as u64, batch as u64)?;
    if x.len() != cols * batch {
        return Err(bad("x", format!("{} values for {batch}×{cols}", x.len())));
    }
    let bytes = block::quantize_row(x).map_err(|e| geometry_refusal(e.to_string()))?;
    Q8Activations::from_bytes(bytes, cols, batch)
}

impl Q8MatvecArgs {
    /// Arguments over raw Q8_0 bytes at any alignment, every length
    /// checked as [`Q8MatvecArgs::new`] does: `weights` exactly `rows ×
    /// cols` blocks, `x` exactly `batch` vectors of `cols` with no quant of
    /// -128, `y` exactly `batch · rows` f32s, `row_range` inside `0..rows`.
    pub fn from_slices(
        weights: &[u8],
        x: &[u8],
        y: &mut [f32],
        (rows, cols, batch): (usize, usize, usize),
        row_range: Range<usize>,
    ) -> Result<Self, Refusal> {
        let (rows, blocks, batch) = check_geometry(rows as u64, cols as u64, batch as u64)?;
        let row_bytes = blocks * BLOCK_BYTES;
        if weights.len() != rows * row_bytes {
            return Err(bad(
                "weights",
                format!(
                    "{} bytes, {rows}×{cols} Q8_0 needs {}",
                    weights.len(),
                    rows * row_bytes
                ),
            ));
        }
        check_x(x, blocks, batch)?;
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

impl Q8MatvecArgs {
    /// Arguments for rows `rows` of `Y = W·X`, every length checked: `x`
    /// must have W's blocks per row, `y` exactly `batch · W.rows()` f32s,
    /// and `rows` must lie inside W.
    pub fn new(
        weights: &Q8Weights,
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
