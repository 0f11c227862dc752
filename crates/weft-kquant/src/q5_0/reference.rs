//! The scalar reference of `q5_0.matvec`: the contract's order, literally.
//! It defines the family's results; the arm and every twin match it bit
//! for bit (NaNs by class).

use std::ops::Range;

use weft_quant::q8_0::{f16_to_f32, BLOCK_BYTES as X_BYTES};

use super::BLOCK_BYTES;
use crate::{Activations, KWeights};

/// Lanes of the contract.
pub const LANES: usize = 8;

/// Weight quant `i` (`0..32`) of block `w`, in `-16..=15`.
pub fn quant(w: &[u8], i: usize) -> i32 {
    let qh = u32::from_le_bytes([w[2], w[3], w[4], w[5]]);
    let byte = w[6 + i % 16];
    let nibble = if i < 16 { byte & 0x0f } else { byte >> 4 };
    let fifth = ((qh >> i) & 1) as u8;
    i32::from(nibble | fifth << 4) - 16
}

/// Block `w` (22 bytes) against `x` (34 bytes): the contract's exact
/// integer lanes.
pub fn block_lanes(w: &[u8], x: &[u8]) -> [i32; LANES] {
    std::array::from_fn(|l| {
        (4 * l..4 * l + 4)
            .map(|i| quant(w, i) * i32::from(x[2 + i] as i8))
            .sum()
    })
}

/// One output: row `w_row` (blocks of bytes) against vector `x_vec`.
pub fn dot_row(w_row: &[u8], x_vec: &[u8]) -> f32 {
    let mut acc = [0.0f32; LANES];
    for (w, x) in w_row
        .chunks_exact(BLOCK_BYTES)
        .zip(x_vec.chunks_exact(X_BYTES))
    {
        let dw = f16_to_f32(u16::from_le_bytes([w[0], w[1]]));
        let dx = f16_to_f32(u16::from_le_bytes([x[0], x[1]]));
        let s = dw * dx;
        for (a, i) in acc.iter_mut().zip(block_lanes(w, x)) {
            *a += i as f32 * s;
        }
    }
    let u = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    (u[0] + u[2]) + (u[1] + u[3])
}

/// `y[n · rows + r] = W[r] · X[n]` for `r` in `rows`, every `n`; other
/// outputs untouched. `y` must hold `batch · W.rows()` f32s.
pub fn matvec(w: &KWeights, x: &Activations, y: &mut [f32], rows: Range<usize>) {
    let w_row = w.blocks() * BLOCK_BYTES;
    let x_vec = w.blocks() * X_BYTES;
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
    let cols = w_row.len() / BLOCK_BYTES * 32;
    let (mut wf, mut xf) = (vec![0.0f32; cols], vec![0.0f32; cols]);
    Format::Q5_0
        .dequantize(w_row, &mut wf)
        .expect("whole blocks");
    Format::Q8_0
        .dequantize(x_vec, &mut xf)
        .expect("whole blocks");
    wf.iter()
        .zip(&xf)
        .map(|(&a, &b)| f64::from(a) * f64::from(b))
        .sum()
}
