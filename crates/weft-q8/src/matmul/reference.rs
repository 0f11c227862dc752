//! The scalar reference of `q8_0.matmul`: the contract's order, literally,
//! on canonical (unpacked) W. It defines the family's results; the arm and
//! its twins must match it bit for bit (NaNs by class).

use std::ops::Range;

use super::super::block::{f16_to_f32, BLOCK_BYTES};
use super::super::{Q8Activations, Q8Weights};

/// `q_b = Σ_{k<32} w[k] · x[k]` over the quants of one block pair.
pub fn block_dot(w: &[u8], x: &[u8]) -> i32 {
    w.iter()
        .zip(x)
        .map(|(a, b)| i32::from(*a as i8) * i32::from(*b as i8))
        .sum()
}

/// One output: row `w_row` (blocks of bytes) against vector `x_vec`.
pub fn dot_row(w_row: &[u8], x_vec: &[u8]) -> f32 {
    let mut acc = 0.0f32;
    for (wb, xb) in w_row
        .chunks_exact(BLOCK_BYTES)
        .zip(x_vec.chunks_exact(BLOCK_BYTES))
    {
        let dw = f16_to_f32(u16::from_le_bytes([wb[0], wb[1]]));
        let dx = f16_to_f32(u16::from_le_bytes([xb[0], xb[1]]));
        let s = dw * dx;
        let q = block_dot(&wb[2..], &xb[2..]);
        // `f32::mul_add` is one rounding on every target (fmaf).
        acc = (q as f32).mul_add(s, acc);
    }
    acc
}

/// `y[n · rows + r] = W[r] · X[n]` for `r` in `rows`, every `n`; other
/// outputs untouched. `y` must hold `batch · W.rows()` f32s.
pub fn matmul(w: &Q8Weights, x: &Q8Activations, y: &mut [f32], rows: Range<usize>) {
    let row_bytes = w.blocks() * BLOCK_BYTES;
    for n in 0..x.batch() {
        let xv = &x.bytes()[n * row_bytes..(n + 1) * row_bytes];
        for r in rows.clone() {
            let wr = &w.bytes()[r * row_bytes..(r + 1) * row_bytes];
            y[n * w.rows() + r] = dot_row(wr, xv);
        }
    }
}
