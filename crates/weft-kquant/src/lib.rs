//! weft-kquant: the families whose weights stay in the GGUF block formats
//! people download — the K-quants and Q5_0 — multiplied natively, never
//! converted to another format at load time (Q8_0 would take up to twice
//! the bytes a token reads).
//!
//! One job: the contracts, scalar references, Cranelift arms, twins (x64
//! AVX2/AVX-512, arm64 SDOT) and validation of these products: [`q4_k`] (`q4_k.matvec`) and
//! [`q6_k`] (`q6_k.matvec`), weights times Q8_K activations, and [`q5_0`]
//! (`q5_0.matvec`), weights times Q8_0 activations — llama.cpp's pairings.
//! What they share lives here once: the argument struct, weights and
//! activations ([`KWeights`], [`Activations`]), the offer, the validation
//! cases ([`validation`], [`cases`]) and each ISA's frame around a
//! family's block body (one row at a time, each row one linear stream:
//! interleaving rows' streams measured up to 3.7× slower from DRAM on
//! Zen 4).
//!
//! Invariants:
//! - **Activations are Q8_K for the K-quants, Q8_0 for Q5_0** ([`x_format`],
//!   llama.cpp's pairing), made by [`quantize_activations`] with ggml's
//!   reference rounding (weft-quant's quantisers, pinned against ggml's
//!   bytes). Wrapping Q8_K bytes checks that every super-block's `bsums`
//!   are the sums of its quants, so a body may use either.
//! - **Any weight bytes are valid**: every scale bit pattern (subnormal,
//!   infinite, NaN), every 6-bit sub-scale and minimum.
//! - **Every body of an arm is bit-identical to it** (NaNs by class:
//!   F16C quietens a signalling NaN scale, integer widening does not);
//!   the family's module states the order every body follows.
//!
//! The argument struct ([`KMatvecArgs`]) is shared by the three
//! contracts, as `Q8MatvecArgs` is by the Q8_0 ones; `blocks` counts the
//! weight format's blocks (256 values for the K-quants, 32 for Q5_0).

mod a64;
pub mod cases;
mod clif;
pub mod q4_k;
pub mod q5_0;
pub mod q6_k;
mod twin;
pub mod validation;
mod x64;

use std::ops::Range;
use std::sync::Arc;

use weft_kernel::{
    Contract, Geometry, Kernel, KernelArgs, LoopTrip, MemberViews, NativeCode, Offer, Refusal,
};
use weft_quant::kquant::{quantize_q8_k, Q8_K_BYTES, QK_K};
use weft_quant::Format;

/// The name of [`KMatvecArgs`] in contracts.
pub const ARGS_NAME: &str = "KMatvecArgs";

/// Largest batch (activation vectors per call) the contracts admit.
pub const MAX_BATCH: usize = 8;

/// The arguments of every K-quant matrix-vector kernel (`extern "C"
/// fn(*const KMatvecArgs)`): `Y = W·X` for rows `row_start..row_end`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KMatvecArgs {
    /// `rows · blocks` weight super-blocks (the GGUF tensor bytes).
    pub weights: *const u8,
    /// `batch · blocks` Q8_K super-blocks.
    pub x: *const u8,
    /// `batch · rows` f32 outputs (`y[n · rows + r]`).
    pub y: *mut f32,
    /// Rows of W (the stride of `y` between vectors).
    pub rows: usize,
    /// Super-blocks per row (`cols / 256`).
    pub blocks: usize,
    /// Activation vectors, `1..=8`.
    pub batch: usize,
    /// First row computed.
    pub row_start: usize,
    /// One past the last row computed (`row_start ≤ row_end ≤ rows`).
    pub row_end: usize,
}

// SAFETY: `KMatvecArgs` is the `#[repr(C)]` struct of every contract
// naming ARGS_NAME. A body reads `weights` and `x` (never written by any
// body) and writes `y[n · rows + r]` only for `r` in `row_start..row_end`,
// so copies restricted to disjoint row ranges write disjoint f32s and may
// run on different threads at once.
unsafe impl KernelArgs for KMatvecArgs {
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

// SAFETY: the pointers are only dereferenced by a body called through
// `Kernel::call`, whose caller keeps them valid; the struct is plain data.
unsafe impl Send for KMatvecArgs {}
// SAFETY: as for `Send`; a shared `&KMatvecArgs` only lets threads copy it.
unsafe impl Sync for KMatvecArgs {}

/// Byte offsets of the fields of [`KMatvecArgs`] (the emitters' view).
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

pub(crate) fn bad(operand: &str, reason: String) -> Refusal {
    Refusal::BadOperand {
        operand: operand.to_owned(),
        reason,
    }
}

pub(crate) fn geometry_refusal(reason: String) -> Refusal {
    Refusal::UnsupportedGeometry { reason }
}

/// The activation format a weight format is multiplied with, as
/// llama.cpp pairs them: Q8_K for the K-quants, Q8_0 for Q5_0; `None` for
/// a format no family here takes as weights.
pub fn x_format(w: Format) -> Option<Format> {
    match w {
        Format::Q4_K | Format::Q6_K => Some(Format::Q8_K),
        Format::Q5_0 => Some(Format::Q8_0),
        _ => None,
    }
}

fn pairing(w: Format) -> Result<Format, Refusal> {
    x_format(w).ok_or_else(|| bad("weights", format!("no family here multiplies {w} weights")))
}

/// Check a geometry against the contracts for weights of `w`: `rows ≥ 1`,
/// `cols` a positive multiple of `w`'s block, `batch` in `1..=8`, every
/// byte extent addressable. Returns `(rows, blocks, batch)`.
pub fn check_geometry(
    rows: u64,
    cols: u64,
    batch: u64,
    w: Format,
) -> Result<(usize, usize, usize), Refusal> {
    let x = pairing(w)?;
    let block = w.block_len() as u64;
    if rows == 0 {
        return Err(geometry_refusal("rows is 0".into()));
    }
    if cols == 0 || !cols.is_multiple_of(block) {
        return Err(geometry_refusal(format!(
            "cols {cols} is not a positive multiple of {block}"
        )));
    }
    if batch == 0 || batch > MAX_BATCH as u64 {
        return Err(geometry_refusal(format!(
            "batch {batch} is outside 1..={MAX_BATCH}"
        )));
    }
    let rows = usize::try_from(rows).map_err(|_| geometry_refusal("rows too large".into()))?;
    let blocks =
        usize::try_from(cols / block).map_err(|_| geometry_refusal("cols too large".into()))?;
    rows.max(MAX_BATCH)
        .checked_mul(blocks)
        .and_then(|n| n.checked_mul(w.block_bytes().max(x.block_bytes())))
        .filter(|n| *n <= isize::MAX as usize)
        .ok_or_else(|| geometry_refusal("rows × cols too large".into()))?;
    Ok((rows, blocks, batch as usize))
}

/// Quantised activations: `batch` vectors of `blocks` blocks of Q8_K or
/// Q8_0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Activations {
    bytes: Vec<u8>,
    format: Format,
    blocks: usize,
    batch: usize,
}

impl Activations {
    /// Wrap `format` bytes (Q8_K or Q8_0) of `batch` vectors of `cols`
    /// values: any scales and quants, but a Q8_K super-block's 16 `bsums`
    /// must be the sums of its quants in groups of 16 (`bad-operand`
    /// otherwise), the precondition that lets a body use them for the
    /// quants' sums.
    pub fn from_bytes(
        bytes: Vec<u8>,
        format: Format,
        cols: usize,
        batch: usize,
    ) -> Result<Self, Refusal> {
        let weights = match format {
            Format::Q8_K => Format::Q4_K,
            Format::Q8_0 => Format::Q5_0,
            _ => return Err(bad("x", format!("{format} is not an activation format"))),
        };
        let (_, blocks, batch) = check_geometry(1, cols as u64, batch as u64, weights)?;
        let want = batch * blocks * format.block_bytes();
        if bytes.len() != want {
            return Err(bad(
                "x",
                format!(
                    "{} bytes, {batch}×{cols} {format} needs {want}",
                    bytes.len()
                ),
            ));
        }
        if format == Format::Q8_K {
            if let Some(i) = bytes
                .chunks_exact(Q8_K_BYTES)
                .position(|b| bsums_of(b) != b[4 + QK_K..])
            {
                return Err(bad(
                    "x",
                    format!("super-block {i}: bsums are not the sums of its quants"),
                ));
            }
        }
        Ok(Self {
            bytes,
            format,
            blocks,
            batch,
        })
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Q8_K or Q8_0.
    pub fn format(&self) -> Format {
        self.format
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

/// The 32 bytes of `bsums` a Q8_K super-block's quants give.
pub fn bsums_of(block: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (j, o) in out.chunks_exact_mut(2).enumerate() {
        let sum: i16 = block[4 + 16 * j..20 + 16 * j]
            .iter()
            .map(|&q| i16::from(q as i8))
            .sum();
        o.copy_from_slice(&sum.to_le_bytes());
    }
    out
}

/// Quantise `batch` f32 vectors of `cols` values (`x[n · cols + i]`) to
/// `format` (Q8_K or Q8_0) with ggml's reference rounding
/// (`quantize_row_q8_K_ref`, `quantize_row_q8_0_ref`). Values must be
/// finite (ggml's quantisers assert bounds NaN and infinities break); a
/// non-finite value is `bad-operand`.
pub fn quantize_activations(
    x: &[f32],
    format: Format,
    cols: usize,
    batch: usize,
) -> Result<Activations, Refusal> {
    if x.len() != cols * batch {
        return Err(bad("x", format!("{} values for {batch}×{cols}", x.len())));
    }
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        return Err(bad("x", format!("value {i} is {}", x[i])));
    }
    if !x.len().is_multiple_of(format.block_len()) {
        return Err(geometry_refusal(format!(
            "cols {cols} is not whole {format} blocks"
        )));
    }
    let mut bytes = Vec::with_capacity(x.len() / format.block_len() * format.block_bytes());
    match format {
        Format::Q8_K => {
            for block in x.chunks_exact(QK_K) {
                bytes.extend_from_slice(&quantize_q8_k(block.try_into().expect("256 values")));
            }
        }
        Format::Q8_0 => weft_quant::q8_0::quantize_row_into(x, &mut bytes)
            .map_err(|e| geometry_refusal(e.to_string()))?,
        _ => return Err(bad("x", format!("{format} is not an activation format"))),
    }
    Activations::from_bytes(bytes, format, cols, batch)
}

impl KMatvecArgs {
    /// Arguments over raw bytes at any alignment, every length checked:
    /// `weights` exactly `rows × blocks` blocks of format `w`, `x` exactly
    /// `batch` vectors of its activation format's blocks
    /// ([`x_format`]), `y` exactly `batch · rows` f32s, `row_range` inside
    /// `0..rows`.
    pub fn from_slices(
        weights: &[u8],
        w: Format,
        x: &[u8],
        y: &mut [f32],
        (rows, cols, batch): (usize, usize, usize),
        row_range: Range<usize>,
    ) -> Result<Self, Refusal> {
        let (rows, blocks, batch) = check_geometry(rows as u64, cols as u64, batch as u64, w)?;
        let block_bytes = w.block_bytes();
        let xf = pairing(w)?;
        if weights.len() != rows * blocks * block_bytes {
            return Err(bad(
                "weights",
                format!(
                    "{} bytes, {rows}×{cols} needs {}",
                    weights.len(),
                    rows * blocks * block_bytes
                ),
            ));
        }
        if x.len() != batch * blocks * xf.block_bytes() {
            return Err(bad(
                "x",
                format!(
                    "{} bytes, {batch}×{cols} {xf} needs {}",
                    x.len(),
                    batch * blocks * xf.block_bytes()
                ),
            ));
        }
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

/// A K-quant weight matrix: `rows × blocks` super-blocks of `format`'s
/// bytes (the GGUF tensor data; any bit patterns are valid), shared and
/// owned by whoever made them: a `Vec`, or a model's weights arena.
#[derive(Clone)]
pub struct KWeights {
    bytes: Arc<dyn AsRef<[u8]> + Send + Sync>,
    format: Format,
    rows: usize,
    blocks: usize,
}

impl std::fmt::Debug for KWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KWeights")
            .field("format", &self.format)
            .field("rows", &self.rows)
            .field("blocks", &self.blocks)
            .finish()
    }
}

impl KWeights {
    /// Wrap `rows × cols` weights of `format` (one [`x_format`] pairs:
    /// Q4_K, Q6_K, Q5_0; `cols` whole blocks); the length must be exact.
    pub fn from_shared(
        bytes: impl AsRef<[u8]> + Send + Sync + 'static,
        format: Format,
        rows: usize,
        cols: usize,
    ) -> Result<Self, Refusal> {
        let (rows, blocks, _) = check_geometry(rows as u64, cols as u64, 1, format)?;
        let want = rows * blocks * format.block_bytes();
        let len = (*bytes.as_ref()).len();
        if len != want {
            return Err(bad(
                "weights",
                format!("{len} bytes, {rows}×{cols} {format} needs {want}"),
            ));
        }
        Ok(Self {
            bytes: Arc::new(bytes),
            format,
            rows,
            blocks,
        })
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        (*self.bytes).as_ref()
    }

    /// The block format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Super-blocks per row.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.blocks * self.format.block_len()
    }

    /// The arguments for rows `rows` of `Y = W·X`, every length checked.
    pub fn args(
        &self,
        x: &Activations,
        y: &mut [f32],
        rows: Range<usize>,
    ) -> Result<KMatvecArgs, Refusal> {
        KMatvecArgs::from_slices(
            self.bytes(),
            self.format,
            x.bytes(),
            y,
            (self.rows, self.cols(), x.batch()),
            rows,
        )
    }
}

/// The `(rows, cols, batch)` of a geometry, checked against the
/// contracts for weights of `w` (`batch` defaults to 1).
pub fn site_dims(geometry: &Geometry, w: Format) -> Result<(u64, u64, u64), Refusal> {
    let rows = geometry.require("rows")?;
    let cols = geometry.require("cols")?;
    let batch = geometry.get("batch").unwrap_or(1);
    check_geometry(rows, cols, batch, w)?;
    Ok((rows, cols, batch))
}

/// The offer of a matrix-vector arm for weights of `w`: its `contract`,
/// member views over rows, the loops batch → rows → blocks, and the bytes
/// a call moves (W once per two vectors, X, Y).
pub fn offer(contract: Contract, w: Format) -> Result<Offer, Refusal> {
    let (rows, cols, batch) = site_dims(&contract.geometry, w)?;
    let x = pairing(w)?;
    let blocks = cols / w.block_len() as u64;
    let loop_trip = |name: &str, trips, depth| LoopTrip {
        name: name.to_owned(),
        trips,
        depth,
    };
    Ok(Offer {
        contract,
        packed: Vec::new(),
        views: Some(MemberViews {
            axis: "rows".to_owned(),
            extent: rows,
            granule: 1,
        }),
        loops: vec![
            loop_trip("batch", batch, 0),
            loop_trip("rows", rows, 1),
            loop_trip("blocks", blocks, 2),
        ],
        flops: 2 * rows * cols * batch,
        bytes_moved: rows * blocks * w.block_bytes() as u64 * batch.min(2)
            + batch * blocks * x.block_bytes() as u64
            + 4 * rows * batch,
    })
}

/// A placed K-quant matrix-vector kernel (arm or twin of any K-quant
/// family) with a checked interface.
pub struct KMatvecKernel {
    kernel: Kernel<KMatvecArgs>,
    format: Format,
}

impl std::fmt::Debug for KMatvecKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.kernel.fmt(f)
    }
}

impl KMatvecKernel {
    /// Place `code`, a body for weights of `format`.
    ///
    /// # Safety
    ///
    /// `code` must be a body of the K-quant matrix-vector family for
    /// `format`, for the host, honouring the leaf ABI for [`KMatvecArgs`]:
    /// it reads only the super-blocks of `weights` and `x` the arguments
    /// name, writes only `y[n · rows + r]` for rows in
    /// `row_start..row_end`, and returns normally.
    pub unsafe fn from_native(code: &NativeCode, format: Format) -> Result<Self, Refusal> {
        // SAFETY: the caller promises such a leaf body.
        let kernel = unsafe { Kernel::from_native(code)? };
        Ok(Self { kernel, format })
    }

    /// The placed kernel, for callers that split calls themselves.
    pub fn kernel(&self) -> &Kernel<KMatvecArgs> {
        &self.kernel
    }

    fn check_format(&self, w: &KWeights) -> Result<(), Refusal> {
        if w.format() == self.format {
            Ok(())
        } else {
            Err(bad(
                "weights",
                format!("{} weights for a {} kernel", w.format(), self.format),
            ))
        }
    }

    /// `Y = W·X` for rows `rows`, lengths checked.
    pub fn run(
        &self,
        weights: &KWeights,
        x: &Activations,
        y: &mut [f32],
        rows: Range<usize>,
    ) -> Result<(), Refusal> {
        self.check_format(weights)?;
        let args = weights.args(x, y, rows)?;
        // SAFETY: `args` checked every extent against the borrowed buffers,
        // which outlive the call.
        unsafe { self.kernel.call(&args) };
        Ok(())
    }

    /// `Y = W·X` split over at most `threads` scoped threads by `views`;
    /// bit-identical to one call (each output is computed by one range).
    pub fn run_threaded(
        &self,
        weights: &KWeights,
        x: &Activations,
        y: &mut [f32],
        views: &MemberViews,
        threads: u64,
    ) -> Result<(), Refusal> {
        self.check_format(weights)?;
        let whole = weights.args(x, y, 0..weights.rows())?;
        if views.axis != "rows" || views.extent != weights.rows() as u64 {
            return Err(bad(
                "views",
                format!(
                    "{} of extent {} does not split {} rows",
                    views.axis,
                    views.extent,
                    weights.rows()
                ),
            ));
        }
        std::thread::scope(|scope| {
            for r in views.split(threads) {
                let part = whole.restrict(r);
                let kernel = &self.kernel;
                // SAFETY: `whole` was checked against buffers that outlive
                // the scope; the parts' row ranges are disjoint and a body
                // writes only its own rows' outputs.
                scope.spawn(move || unsafe { kernel.call(&part) });
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_refuses_ragged_columns_empty_rows_big_batches_and_unpaired_formats() {
        assert!(check_geometry(1, 256, 1, Format::Q4_K).is_ok());
        assert!(check_geometry(1, 640, 1, Format::Q5_0).is_ok());
        for (rows, cols, batch) in [
            (0, 256, 1),
            (1, 255, 1),
            (1, 0, 1),
            (1, 640, 1),
            (1, 256, 0),
            (1, 256, 9),
        ] {
            assert!(matches!(
                check_geometry(rows, cols, batch, Format::Q4_K),
                Err(Refusal::UnsupportedGeometry { .. })
            ));
        }
        assert!(matches!(
            check_geometry(1, 256, 1, Format::Q8_0),
            Err(Refusal::BadOperand { .. })
        ));
    }

    #[test]
    fn activations_refuse_non_finite_values_wrong_lengths_and_false_sums() {
        let mut x = vec![0.5f32; 512];
        assert!(quantize_activations(&x, Format::Q8_K, 256, 2).is_ok());
        assert!(quantize_activations(&x, Format::Q8_0, 256, 2).is_ok());
        assert!(
            quantize_activations(&x, Format::Q8_K, 256, 1).is_err(),
            "512 values for 1×256"
        );
        x[300] = f32::NAN;
        assert!(matches!(
            quantize_activations(&x, Format::Q8_K, 256, 2),
            Err(Refusal::BadOperand { .. })
        ));
        assert!(Activations::from_bytes(vec![0; 291], Format::Q8_K, 256, 1).is_err());
        assert!(Activations::from_bytes(vec![0; 34], Format::Q4_K, 32, 1).is_err());
        let mut bytes = quantize_activations(&[0.25f32; 256], Format::Q8_K, 256, 1)
            .unwrap()
            .bytes()
            .to_vec();
        bytes[4 + 256] ^= 1;
        assert!(matches!(
            Activations::from_bytes(bytes, Format::Q8_K, 256, 1),
            Err(Refusal::BadOperand { .. })
        ));
    }
}
