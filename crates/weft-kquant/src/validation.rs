//! Validation of the K-quant matrix-vector twins against their arm, one
//! generator for every weight format: the cases that hunt for differences
//! — rows 1, 2, 3, 5, 17 and 640 × super-blocks per row 1, 2, 3, 8, every
//! batch 1..=8 on the small shapes; weight super-blocks of random bytes
//! (every sub-block scale, minimum and quant) with special binary16
//! super-scales (±0, subnormals, ±inf, quiet and signalling NaN);
//! activations both from ggml's quantiser and of random quants (-128
//! included) with special f32 scales; member views starting inside W at
//! odd and even rows; W and X starting 0–6 bytes past a 64-byte boundary;
//! guard f32s around Y that must come back untouched.
//!
//! Library code, not a test helper: the planner validates twins through
//! each family's `entry()` [`Checker`](weft_validate::Checker) on these
//! cases.

use weft_kernel::{Kernel, Offer, Refusal};
use weft_validate::{Element, Outputs, Validation, CANARY_F32};

use weft_quant::Format;

use crate::cases::{misaligned_copy, random_activations, raw_activations, Rng, Y_GUARD};
use crate::{check_geometry, x_format, Activations, KMatvecArgs, KWeights, ARGS_NAME};

/// Where a super-block of `format` keeps its binary16 super-scales.
pub fn scale_offsets(format: Format) -> &'static [usize] {
    match format {
        Format::Q2_K => &[80, 82],
        Format::Q3_K => &[108],
        Format::Q6_K => &[208],
        Format::Q5_0 | Format::Q8_0 => &[0],
        _ => &[0, 2], // Q4_K, Q5_K, Q4_1, Q5_1: d, dmin first
    }
}

/// Random weights of `format`: every byte random except the binary16
/// super-scales, which are normal values around 2^-7 (negative ones too),
/// or with `specials` one in eight from
/// [`SPECIAL_HALVES`](crate::cases::SPECIAL_HALVES).
pub fn random_weights(
    format: Format,
    rows: usize,
    blocks: usize,
    seed: u64,
    specials: bool,
) -> KWeights {
    let mut rng = Rng::new(seed);
    let block_bytes = format.block_bytes();
    let mut bytes = vec![0u8; rows * blocks * block_bytes];
    for block in bytes.chunks_exact_mut(block_bytes) {
        for b in block.iter_mut() {
            *b = rng.next_u64() as u8;
        }
        for &at in scale_offsets(format) {
            block[at..at + 2].copy_from_slice(&rng.half(specials).to_le_bytes());
        }
    }
    KWeights::from_shared(bytes, format, rows, blocks * format.block_len()).expect("weights")
}

/// Rows × super-blocks per row; the offer's own shape is added to them.
pub fn shapes() -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    for rows in [1usize, 2, 3, 5, 17, 640] {
        for blocks in [1usize, 2, 3, 8] {
            v.push((rows, blocks));
        }
    }
    v
}

/// One case: weights, activations, the rows to compute, and how far past
/// a 64-byte boundary W and X start in the buffers the kernels read.
pub struct Case {
    /// The weights.
    pub w: KWeights,
    /// The activations.
    pub x: Activations,
    /// The rows computed (a member view).
    pub rows: std::ops::Range<usize>,
    /// W's first byte is this many bytes past a 64-byte boundary.
    pub w_misalign: usize,
    /// X's first byte is this many bytes past a 64-byte boundary.
    pub x_misalign: usize,
}

/// Validation of the twins of a K-quant matrix-vector arm for weights of
/// the format it holds.
pub struct KValidation(pub Format);

// SAFETY: `Args` is the `#[repr(C)]` struct of contracts naming
// ARGS_NAME, and `run` calls a kernel only with args built by
// `KMatvecArgs::from_slices`, which checks every extent against buffers
// that live across the call.
unsafe impl Validation for KValidation {
    type Args = KMatvecArgs;
    type Case = Case;

    fn args_name(&self) -> &str {
        ARGS_NAME
    }

    fn generator(&self) -> String {
        format!("{} matvec cases v1", self.0)
    }

    fn cases(&self, offer: &Offer, seed: u64) -> Vec<Case> {
        let xf = x_format(self.0).unwrap_or(Format::Q8_K);
        let mut out = Vec::new();
        let mut misalign = 0usize;
        let mut push = |out: &mut Vec<Case>, w: KWeights, x, rows| {
            misalign += 1;
            out.push(Case {
                w,
                x,
                rows,
                w_misalign: misalign % 7,
                x_misalign: (3 * misalign) % 5,
            });
        };
        for (i, (rows, blocks)) in shapes().into_iter().enumerate() {
            let s = seed.wrapping_add(1000 * i as u64);
            let batches: Vec<usize> = match rows * blocks {
                0..=24 => (1..=8).collect(),
                _ => vec![1, 2 + i % 7],
            };
            let w = random_weights(self.0, rows, blocks, s, true);
            for batch in batches {
                let x = if batch % 3 == 2 {
                    raw_activations(xf, blocks, batch, s + batch as u64)
                } else {
                    random_activations(xf, blocks, batch, s + batch as u64)
                };
                push(&mut out, w.clone(), x, 0..rows);
            }
        }
        // The offer's own shape at its batch: what a plan will run.
        let g = &offer.contract.geometry;
        if let (Some(rows), Some(cols), Some(batch)) =
            (g.get("rows"), g.get("cols"), g.get("batch"))
        {
            if let Ok((rows, blocks, batch)) = check_geometry(rows, cols, batch, self.0) {
                if rows * blocks <= 1 << 14 {
                    let w = random_weights(self.0, rows, blocks, seed + 3, true);
                    let x = random_activations(xf, blocks, batch, seed + 4);
                    push(&mut out, w, x, 0..rows);
                }
            }
        }
        // Member views that start inside W (odd and even starts, empty).
        for (i, rows) in [3..10, 4..9, 1..2, 10..11, 5..5].into_iter().enumerate() {
            let s = seed + 7 + 10 * i as u64;
            let w = random_weights(self.0, 11, 2, s, true);
            let x = random_activations(xf, 2, 1 + i % 3, s + 1);
            push(&mut out, w, x, rows);
        }
        out
    }

    fn run(&self, kernel: &Kernel<KMatvecArgs>, case: &Case) -> Result<Outputs, Refusal> {
        let n = case.x.batch() * case.w.rows();
        let mut y = vec![f32::from_bits(CANARY_F32); n + 2 * Y_GUARD];
        let (wbuf, ws) = misaligned_copy(case.w.bytes(), case.w_misalign);
        let (xbuf, xs) = misaligned_copy(case.x.bytes(), case.x_misalign);
        let args = KMatvecArgs::from_slices(
            &wbuf[ws..ws + case.w.bytes().len()],
            case.w.format(),
            &xbuf[xs..xs + case.x.bytes().len()],
            &mut y[Y_GUARD..Y_GUARD + n],
            (case.w.rows(), case.w.cols(), case.x.batch()),
            case.rows.clone(),
        )?;
        // SAFETY: `from_slices` checked the extents against the buffers,
        // which outlive the call.
        unsafe { kernel.call(&args) };
        let mut out = Outputs::from_f32(y);
        out.element = Element::F32;
        Ok(out)
    }

    fn describe_input(&self, case: &Case, index: usize) -> String {
        let rows = case.w.rows();
        let n = case.x.batch() * rows;
        let head = format!(
            "rows {rows} super-blocks {} batch {} range {:?} W+{} X+{}",
            case.w.blocks(),
            case.x.batch(),
            case.rows,
            case.w_misalign,
            case.x_misalign
        );
        match index.checked_sub(Y_GUARD) {
            Some(k) if k < n => format!("{head}: vector {} row {}", k / rows, k % rows),
            _ => format!("{head}: guard f32 {index} around Y"),
        }
    }
}

/// The family's [`Workbench`](weft_kernel::Workbench): random weights
/// (finite scales) and quantised activations at an offer's geometry.
#[derive(Clone, Copy, Debug)]
pub struct KBench(pub Format);

struct Prepared {
    w: KWeights,
    x: Activations,
    y: Vec<f32>,
}

impl weft_kernel::Workbench for KBench {
    fn prepare(&self, offer: &Offer, seed: u64) -> Result<Box<dyn weft_kernel::Bench>, Refusal> {
        let xf = x_format(self.0).unwrap_or(Format::Q8_K);
        if offer.contract.args != ARGS_NAME {
            return Err(Refusal::BadOperand {
                operand: "args".to_owned(),
                reason: format!("KBench runs {ARGS_NAME}, not {}", offer.contract.args),
            });
        }
        let g = &offer.contract.geometry;
        let (rows, blocks, batch) = check_geometry(
            g.require("rows")?,
            g.require("cols")?,
            g.get("batch").unwrap_or(1),
            self.0,
        )?;
        Ok(Box::new(Prepared {
            w: random_weights(self.0, rows, blocks, seed, false),
            x: random_activations(xf, blocks, batch, seed ^ 0x5eed),
            y: vec![0.0; rows * batch],
        }))
    }
}

impl weft_kernel::Bench for Prepared {
    unsafe fn run(
        &mut self,
        code: &std::sync::Arc<weft_kernel::PlacedCode>,
    ) -> Result<(), Refusal> {
        // SAFETY: the caller promises `code` is a body of this format's
        // family, which honours the leaf ABI for `KMatvecArgs`.
        let kernel = unsafe { Kernel::<KMatvecArgs>::from_placed(code.clone(), 0)? };
        let args = self.w.args(&self.x, &mut self.y, 0..self.w.rows())?;
        // SAFETY: `args` checked the extents against buffers owned by
        // `self`, which outlive the call.
        unsafe { kernel.call(&args) };
        Ok(())
    }
}
