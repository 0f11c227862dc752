//! The scalar reference of `q8_0.matvec`: the contract's order, literally.
//! It defines the family's results; arms and twins must match it bit for
//! bit (NaNs by class).

use std::ops::Range;

use super::block::{f16_to_f32, BLOCK_BYTES};
use super::{Q8Activations, Q8Weights};

/// Number of accumulator groups (`b mod 4`).
pub const GROUPS: usize = 4;

/// Dword partial sums per block.
pub const PARTS: usize = 8;

/// `q[j] = Σ_{k<4} w[4j+k] · x[4j+k]` for the 32 quants of one block pair.
pub fn block_parts(w: &[u8], x: &[u8]) -> [i32; PARTS] {
    let mut q = [0i32; PARTS];
    for (j, qj) in q.iter_mut().enumerate() {
        for k in 0..4 {
            *qj += i32::from(w[4 * j + k] as i8) * i32::from(x[4 * j + k] as i8);
        }
    }
    q
}

/// One output: row `w_row` (blocks of bytes) against vector `x_vec`.
pub fn dot_row(w_row: &[u8], x_vec: &[u8]) -> f32 {
    let blocks = w_row.len() / BLOCK_BYTES;
    let mut acc = [[0.0f32; PARTS]; GROUPS];
    for b in 0..blocks {
        let wb = &w_row[b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES];
        let xb = &x_vec[b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES];
        let dw = f16_to_f32(u16::from_le_bytes([wb[0], wb[1]]));
        let dx = f16_to_f32(u16::from_le_bytes([xb[0], xb[1]]));
        let s = dw * dx;
        let q = block_parts(&wb[2..], &xb[2..]);
        let lane = &mut acc[b % GROUPS];
        for j in 0..PARTS {
            lane[j] += q[j] as f32 * s;
        }
    }
    fold(&acc)
}

/// The contract's final fold of the 32 lanes.
pub fn fold(acc: &[[f32; PARTS]; GROUPS]) -> f32 {
    let mut t = [0.0f32; PARTS];
    for (j, tj) in t.iter_mut().enumerate() {
        *tj = (acc[0][j] + acc[2][j]) + (acc[1][j] + acc[3][j]);
    }
    let u = [t[0] + t[4], t[1] + t[5], t[2] + t[6], t[3] + t[7]];
    (u[0] + u[2]) + (u[1] + u[3])
}

/// `y[n · rows + r] = W[r] · X[n]` for `r` in `rows`, every `n`; other
/// outputs untouched. `y` must hold `batch · W.rows()` f32s.
pub fn matvec(w: &Q8Weights, x: &Q8Activations, y: &mut [f32], rows: Range<usize>) {
    let row_bytes = w.blocks() * BLOCK_BYTES;
    for n in 0..x.batch() {
        let xv = &x.bytes()[n * row_bytes..(n + 1) * row_bytes];
        for r in rows.clone() {
            let wr = &w.bytes()[r * row_bytes..(r + 1) * row_bytes];
            y[n * w.rows() + r] = dot_row(wr, xv);
        }
    }
}

/// The exact-ish value in f64 (naive dequantised dot), for error bounds.
pub fn dot_row_f64(w_row: &[u8], x_vec: &[u8]) -> f64 {
    let mut sum = 0.0f64;
    for (wb, xb) in w_row
        .chunks_exact(BLOCK_BYTES)
        .zip(x_vec.chunks_exact(BLOCK_BYTES))
    {
        let dw = f64::from(f16_to_f32(u16::from_le_bytes([wb[0], wb[1]])));
        let dx = f64::from(f16_to_f32(u16::from_le_bytes([xb[0], xb[1]])));
        for k in 0..32 {
            sum += dw * f64::from(wb[2 + k] as i8) * dx * f64::from(xb[2 + k] as i8);
        }
    }
    sum
}

/// `Σ |dw·w·dx·x|` in f64: the scale of the rounding error bound.
pub fn abs_dot_row_f64(w_row: &[u8], x_vec: &[u8]) -> f64 {
    let mut sum = 0.0f64;
    for (wb, xb) in w_row
        .chunks_exact(BLOCK_BYTES)
        .zip(x_vec.chunks_exact(BLOCK_BYTES))
    {
        let dw = f64::from(f16_to_f32(u16::from_le_bytes([wb[0], wb[1]])));
        let dx = f64::from(f16_to_f32(u16::from_le_bytes([xb[0], xb[1]])));
        for k in 0..32 {
            sum += (dw * f64::from(wb[2 + k] as i8) * dx * f64::from(xb[2 + k] as i8)).abs();
        }
    }
    sum
}
