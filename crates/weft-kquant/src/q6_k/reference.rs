//! The scalar reference of `q6_k.matvec`: the contract's order, literally.
//! It defines the family's results; the arm and every twin match it bit
//! for bit (NaNs by class).

use std::ops::Range;

use weft_quant::kquant::{Q8_K_BYTES, QK_K};
use weft_quant::q8_0::f16_to_f32;

use super::BLOCK_BYTES;
use crate::{Activations, KWeights};

/// Weight quant `e` (`0..256`, ggml's order) of super-block `w`, in
/// `-32..=31`.
pub fn quant(w: &[u8], e: usize) -> i32 {
    let (h, e) = (e / 128, e % 128);
    let (k, l) = (e / 32, e % 32);
    let ql = w[64 * h + l + 32 * (k % 2)];
    let low = if k < 2 { ql & 0x0f } else { ql >> 4 };
    let high = (w[128 + 32 * h + l] >> (2 * k)) & 3;
    i32::from(low | high << 4) - 32
}

/// Super-block `w` (210 bytes) against `x` (292 bytes): the contract's
/// exact integer `S`.
pub fn block_sum(w: &[u8], x: &[u8]) -> i32 {
    (0..16)
        .map(|j| {
            let sc = i32::from(w[192 + j] as i8);
            let dot: i32 = (16 * j..16 * j + 16)
                .map(|e| quant(w, e) * i32::from(x[4 + e] as i8))
                .sum();
            sc * dot
        })
        .sum()
}

/// One output: row `w_row` (super-blocks of bytes) against vector `x_vec`.
pub fn dot_row(w_row: &[u8], x_vec: &[u8]) -> f32 {
    let mut acc = 0.0f32;
    for (w, x) in w_row
        .chunks_exact(BLOCK_BYTES)
        .zip(x_vec.chunks_exact(Q8_K_BYTES))
    {
        let d = f16_to_f32(u16::from_le_bytes([w[208], w[209]]));
        let dx = f32::from_le_bytes([x[0], x[1], x[2], x[3]]);
        acc += block_sum(w, x) as f32 * (d * dx);
    }
    acc
}

/// `y[n · rows + r] = W[r] · X[n]` for `r` in `rows`, every `n`; other
/// outputs untouched. `y` must hold `batch · W.rows()` f32s.
pub fn matvec(w: &KWeights, x: &Activations, y: &mut [f32], rows: Range<usize>) {
    let w_row = w.blocks() * BLOCK_BYTES;
    let x_vec = w.blocks() * Q8_K_BYTES;
    for n in 0..x.batch() {
        let xv = &x.bytes()[n * x_vec..(n + 1) * x_vec];
        for r in rows.clone() {
            y[n * w.rows() + r] = dot_row(&w.bytes()[r * w_row..(r + 1) * w_row], xv);
        }
    }
}

/// The dot product in f64 from ggml's dequantised values, for error
/// bounds.
pub fn dot_row_f64(w_row: &[u8], x_vec: &[u8]) -> f64 {
    use weft_quant::Format;
    let cols = w_row.len() / BLOCK_BYTES * QK_K;
    let (mut wf, mut xf) = (vec![0.0f32; cols], vec![0.0f32; cols]);
    Format::Q6_K
        .dequantize(w_row, &mut wf)
        .expect("whole super-blocks");
    Format::Q8_K
        .dequantize(x_vec, &mut xf)
        .expect("whole super-blocks");
    wf.iter()
        .zip(&xf)
        .map(|(&a, &b)| f64::from(a) * f64::from(b))
        .sum()
}
