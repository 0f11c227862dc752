//! Validation of `q8_0.matvec` twins against their arm: the cases that hunt
//! for differences (rows 1, 2, 3, 5, 4096 × blocks per row 1, 2, 3, 448
//! and a few odd shapes, every batch 1..=8 on the small shapes and more
//! than one elsewhere, special fp16 scales on both sides, quants of -128
//! in the weights, member views that start inside W at odd and even rows,
//! W and X starting 0–6 bytes past a 64-byte boundary, and guard f32s
//! around Y that must come back untouched) and how one case runs.
//!
//! Library code, not a test helper: the planner validates twins through
//! [`entry`](super::entry)'s [`Checker`](weft_validate::Checker) on
//! these same cases.

use weft_kernel::{Kernel, Offer, Refusal};
use weft_validate::{align_up_elements, Element, Outputs, Validation, CANARY_F32};

use super::{quantize_activations, Q8Activations, Q8MatvecArgs, Q8Weights, ARGS_NAME};

/// Guard f32s on each side of Y.
pub const Y_GUARD: usize = 8;

/// Deterministic xorshift, the cases' source of randomness.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (never the all-zero state).
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A value in `[-2, 2)` on a 2^-22 grid.
    pub fn f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
    }
}

/// Random weights as raw bytes: any quant (-128 included), scales from a
/// spread of normal fp16 values plus, when `specials`, subnormal, zero,
/// negative and occasional inf/NaN scales.
pub fn random_weights(rows: usize, blocks: usize, seed: u64, specials: bool) -> Q8Weights {
    let mut rng = Rng::new(seed);
    let mut bytes = Vec::with_capacity(rows * blocks * 34);
    for _ in 0..rows * blocks {
        let pick = rng.next_u64() % 64;
        let d: u16 = match (specials, pick) {
            (true, 0) => 0x0001 + (rng.next_u64() % 0x3ff) as u16, // subnormal
            (true, 1) => 0x8000 | (rng.next_u64() % 0x400) as u16, // -subnormal / -0
            (true, 2) => 0x0000,
            (true, 3) if rng.next_u64().is_multiple_of(8) => 0x7c00,
            (true, 4) if rng.next_u64().is_multiple_of(8) => 0x7e01,
            _ => {
                let e = 0x1800 + (rng.next_u64() % 0x1000) as u16; // ~2^-9 .. 2^-5
                e | ((rng.next_u64() % 2) as u16) << 15
            }
        };
        bytes.extend_from_slice(&d.to_le_bytes());
        // Eight quants per draw (any byte, -128 included).
        for _ in 0..4 {
            bytes.extend_from_slice(&rng.next_u64().to_le_bytes());
        }
    }
    Q8Weights::from_bytes(bytes, rows, blocks * 32).expect("weights")
}

/// `batch` random activation vectors of `blocks` blocks, through the
/// reference quantiser.
pub fn random_activations(blocks: usize, batch: usize, seed: u64) -> Q8Activations {
    let mut rng = Rng::new(seed);
    let x: Vec<f32> = (0..blocks * 32 * batch).map(|_| rng.f32()).collect();
    quantize_activations(&x, blocks * 32, batch).expect("activations")
}

/// Binary16 scales a twin's widening could get wrong: ±0, ±smallest and
/// ±largest subnormal, smallest normal, ±1, ±inf, a quiet and a
/// signalling NaN.
pub const SPECIAL_SCALES: [u16; 14] = [
    0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x0400, 0x3c00, 0xbc00, 0x7c00, 0xfc00, 0x7e00,
    0x7d01, 0x7bff,
];

/// Activations whose block scales cycle through [`SPECIAL_SCALES`] (from
/// `offset`), quants random in `-127..=127`.
pub fn special_activations(blocks: usize, batch: usize, seed: u64, offset: usize) -> Q8Activations {
    let mut rng = Rng::new(seed);
    let mut bytes = Vec::with_capacity(blocks * batch * 34);
    for i in 0..blocks * batch {
        let d = SPECIAL_SCALES[(i + offset) % SPECIAL_SCALES.len()];
        bytes.extend_from_slice(&d.to_le_bytes());
        for _ in 0..32 {
            bytes.push(((rng.next_u64() % 255) as i32 - 127) as i8 as u8);
        }
    }
    Q8Activations::from_bytes(bytes, blocks * 32, batch).expect("activations")
}

/// Weights whose block scales cycle through [`SPECIAL_SCALES`], quants
/// random with every fourth one -128.
pub fn special_weights(rows: usize, blocks: usize, seed: u64) -> Q8Weights {
    let mut rng = Rng::new(seed);
    let mut bytes = Vec::with_capacity(rows * blocks * 34);
    for i in 0..rows * blocks {
        let d = SPECIAL_SCALES[(i * 5) % SPECIAL_SCALES.len()];
        bytes.extend_from_slice(&d.to_le_bytes());
        for k in 0..32 {
            let q = if k % 4 == 3 {
                0x80
            } else {
                rng.next_u64() as u8
            };
            bytes.push(q);
        }
    }
    Q8Weights::from_bytes(bytes, rows, blocks * 32).expect("weights")
}

/// Row counts × blocks per row of the brief and a few odd shapes, kept
/// small for debug builds; the offer's own shape is added to them.
pub fn shapes() -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    for rows in [1usize, 2, 3, 5, 4096] {
        for blocks in [1usize, 2, 3, 448] {
            if rows == 4096 && blocks == 448 {
                continue;
            }
            v.push((rows, blocks));
        }
    }
    v.extend([(4, 4), (7, 5), (9, 8), (6, 7)]);
    v
}

/// Whether the offer's own shape is validated too: always natively; under
/// aarch64, where the suite runs emulated, only up to a million weights
/// (generating 4096 × 448 blocks alone would take most of a minute).
fn offer_shape_fits(rows: usize, blocks: usize) -> bool {
    !cfg!(target_arch = "aarch64") || rows * blocks * 32 <= 1 << 20
}

/// One case: weights, activations, the rows to compute, and how far past
/// a 64-byte boundary W and X start in the buffers the kernels read.
pub struct Case {
    /// The weights.
    pub w: Q8Weights,
    /// The activations.
    pub x: Q8Activations,
    /// The rows computed (a member view).
    pub rows: std::ops::Range<usize>,
    /// W's first byte is this many bytes past a 64-byte boundary.
    pub w_misalign: usize,
    /// X's first byte is this many bytes past a 64-byte boundary.
    pub x_misalign: usize,
}

/// `bytes` copied into a fresh buffer at `misalign` bytes past a 64-byte
/// boundary; returns the buffer and where the copy starts.
fn misaligned_copy(bytes: &[u8], misalign: usize) -> (Vec<u8>, usize) {
    let mut buf = vec![0u8; bytes.len() + 64 + misalign];
    let start = align_up_elements(buf.as_ptr(), 64) + misalign;
    buf[start..start + bytes.len()].copy_from_slice(bytes);
    (buf, start)
}

/// Validation of `q8_0.matvec` twins on the brief's shapes.
pub struct Q8Validation;

// SAFETY: `Args` is the `#[repr(C)]` struct of contracts naming
// ARGS_NAME, and `run` calls a kernel only with args built by
// `Q8MatvecArgs::new`, which checks every extent against the buffers
// that live across the call.
unsafe impl Validation for Q8Validation {
    type Args = Q8MatvecArgs;
    type Case = Case;

    fn args_name(&self) -> &str {
        ARGS_NAME
    }

    fn generator(&self) -> String {
        "q8_0.matvec f32x4 cases v1".to_owned()
    }

    fn cases(&self, offer: &Offer, seed: u64) -> Vec<Case> {
        let mut out = Vec::new();
        let mut misalign = 0usize;
        let mut push = |out: &mut Vec<Case>, w: Q8Weights, x, rows| {
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
            // Every batch on the small shapes (a twin may pair vectors),
            // and batches beyond 1 on the others, cycling through 2..=8.
            let more = 2 + i % 7;
            let batches: Vec<usize> = match rows * blocks {
                0..=64 => (1..=8).collect(),
                65..=65536 => vec![1, more],
                _ => vec![1],
            };
            let w = random_weights(rows, blocks, s, true);
            for batch in batches {
                let x = random_activations(blocks, batch, s + batch as u64);
                push(&mut out, w.clone(), x, 0..rows);
            }
        }
        // The offer's own shape at its batch: what a plan will run (the
        // suite's offer is the brief's largest, 4096 × 448 blocks).
        let g = &offer.contract.geometry;
        if let (Some(rows), Some(cols), Some(batch)) =
            (g.get("rows"), g.get("cols"), g.get("batch"))
        {
            let (rows, blocks, batch) = (rows as usize, cols as usize / 32, batch as usize);
            if blocks > 0 && offer_shape_fits(rows, blocks) {
                let w = random_weights(rows, blocks, seed + 3, true);
                let x = random_activations(blocks, batch, seed + 4);
                push(&mut out, w, x, 0..rows);
            }
        }
        // Member views that start inside W (odd and even starts).
        for (i, rows) in [3..10, 4..9, 1..2, 10..11, 5..5].into_iter().enumerate() {
            let s = seed + 7 + 10 * i as u64;
            let w = random_weights(11, 6, s, true);
            let x = random_activations(6, 2 + i % 2, s + 1);
            push(&mut out, w, x, rows);
        }
        // Special scales on both sides, quants of -128 in W.
        for (rows, blocks, batch) in [(5usize, 7usize, 3usize), (3, 5, 8)] {
            let w = special_weights(rows, blocks, seed + 90);
            let x = special_activations(blocks, batch, seed + 91, rows);
            push(&mut out, w, x, 0..rows);
        }
        out
    }

    fn run(&self, kernel: &Kernel<Q8MatvecArgs>, case: &Case) -> Result<Outputs, Refusal> {
        let n = case.x.batch() * case.w.rows();
        let mut y = vec![f32::from_bits(CANARY_F32); n + 2 * Y_GUARD];
        let (wbuf, ws) = misaligned_copy(case.w.bytes(), case.w_misalign);
        let (xbuf, xs) = misaligned_copy(case.x.bytes(), case.x_misalign);
        let args = Q8MatvecArgs::from_slices(
            &wbuf[ws..ws + case.w.bytes().len()],
            &xbuf[xs..xs + case.x.bytes().len()],
            &mut y[Y_GUARD..Y_GUARD + n],
            (case.w.rows(), case.w.blocks() * 32, case.x.batch()),
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
            "rows {rows} blocks {} batch {} range {:?} W+{} X+{}",
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

/// The family's [`Workbench`](weft_kernel::Workbench): random weights and
/// activations at an offer's geometry (finite scales, so every body runs
/// the same instruction path it would on a model's weights).
#[derive(Clone, Copy, Debug, Default)]
pub struct Q8Bench;

/// Prepared inputs of [`Q8Bench`].
struct Q8Prepared {
    w: Q8Weights,
    x: Q8Activations,
    y: Vec<f32>,
}

impl weft_kernel::Workbench for Q8Bench {
    fn prepare(&self, offer: &Offer, seed: u64) -> Result<Box<dyn weft_kernel::Bench>, Refusal> {
        // Its bench calls bodies with `Q8MatvecArgs`: other contracts of
        // the family (rows2's packed weights) have benches of their own.
        if offer.contract.args != ARGS_NAME {
            return Err(Refusal::BadOperand {
                operand: "args".to_owned(),
                reason: format!("Q8Bench runs {ARGS_NAME}, not {}", offer.contract.args),
            });
        }
        let g = &offer.contract.geometry;
        let (rows, cols, batch) = (
            g.require("rows")?,
            g.require("cols")?,
            g.get("batch").unwrap_or(1),
        );
        let (rows, blocks, batch) = super::check_geometry(rows, cols, batch)?;
        Ok(Box::new(Q8Prepared {
            w: random_weights(rows, blocks, seed, false),
            x: random_activations(blocks, batch, seed ^ 0x5eed),
            y: vec![0.0; rows * batch],
        }))
    }
}

impl weft_kernel::Bench for Q8Prepared {
    unsafe fn run(
        &mut self,
        code: &std::sync::Arc<weft_kernel::PlacedCode>,
    ) -> Result<(), Refusal> {
        // SAFETY: the caller promises `code` is a q8_0.matvec body, which
        // honours the leaf ABI for `Q8MatvecArgs`.
        let kernel = unsafe { Kernel::<Q8MatvecArgs>::from_placed(code.clone(), 0)? };
        let rows = self.w.rows();
        let args = Q8MatvecArgs::new(&self.w, &self.x, &mut self.y, 0..rows)?;
        // SAFETY: `new` checked the extents against buffers owned by `self`,
        // which outlive the call.
        unsafe { kernel.call(&args) };
        Ok(())
    }
}
