//! Validation of `q8_0.matvec` twins against their arm: the cases that hunt
//! for differences (rows 1, 2, 3, 5, 4096 × blocks per row 1, 2, 3, 448
//! and a few odd shapes, every batch 1..=8 somewhere, special fp16 scales,
//! quants of -128 in the weights, W and X starting 0–6 bytes past a
//! 64-byte boundary, a member view that starts inside W, and guard f32s
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

/// Row counts × blocks per row of the brief (1, 2, 3, 5, 4096 × 1, 2, 3,
/// 448) and a few odd shapes. 4096 × 448 (62 MB of W) is left out under
/// aarch64, where the suite runs emulated and generating it alone would
/// take most of a minute per twin.
pub fn shapes() -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    for rows in [1usize, 2, 3, 5, 4096] {
        for blocks in [1usize, 2, 3, 448] {
            if rows == 4096 && blocks == 448 && cfg!(target_arch = "aarch64") {
                continue;
            }
            v.push((rows, blocks));
        }
    }
    v.extend([(4, 4), (7, 5), (9, 8), (6, 7)]);
    v
}

/// The batches run at shape number `i` of [`shapes`] with `rows × blocks`
/// blocks: every batch 1..=8 on small shapes, 1 and one more (cycling
/// through 2..=8) on larger ones, 1 alone on the largest.
pub fn batches(i: usize, rows: usize, blocks: usize) -> Vec<usize> {
    match rows * blocks {
        n if n <= 64 => (1..=8).collect(),
        n if n <= 1 << 16 => vec![1, 2 + i % 7],
        _ => vec![1],
    }
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

    fn cases(&self, _offer: &Offer, seed: u64) -> Vec<Case> {
        let mut out = Vec::new();
        for (i, (rows, blocks)) in shapes().into_iter().enumerate() {
            let s = seed.wrapping_add(1000 * i as u64);
            let w = random_weights(rows, blocks, s, true);
            for (j, batch) in batches(i, rows, blocks).into_iter().enumerate() {
                out.push(Case {
                    w: w.clone(),
                    x: random_activations(blocks, batch, s + 1 + j as u64),
                    rows: 0..rows,
                    w_misalign: (i + j) % 7,
                    x_misalign: (3 * i + j) % 5,
                });
            }
        }
        // A member view that starts inside W.
        out.push(Case {
            w: random_weights(11, 6, seed + 7, true),
            x: random_activations(6, 2, seed + 8),
            rows: 3..10,
            w_misalign: 1,
            x_misalign: 2,
        });
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
