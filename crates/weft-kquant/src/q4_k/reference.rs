//! The scalar reference of `q4_k.matvec`: the contract's order, literally.
//! It defines the family's results; the arm and every twin match it bit
//! for bit (NaNs by class).

use std::ops::Range;

use weft_quant::kquant::{scale_min_k4, Q8_K_BYTES, QK_K};
use weft_quant::q8_0::f16_to_f32;

use super::BLOCK_BYTES;
use crate::{Activations, KWeights};

/// Lanes of the contract.
pub const LANES: usize = 8;

/// Super-block `w` (144 bytes) against `x` (292 bytes): the exact integer
/// lanes `(L, N)` of the contract's step 1.
pub fn block_lanes(w: &[u8], x: &[u8]) -> ([i32; LANES], [i32; LANES]) {
    let scales: &[u8; 12] = w[4..16].try_into().expect("12 scale bytes");
    let qs = &w[16..16 + QK_K / 2];
    let xq = |i: usize| i32::from(x[4 + i] as i8);
    let bs = |k: usize| {
        i32::from(i16::from_le_bytes([
            x[4 + QK_K + 2 * k],
            x[5 + QK_K + 2 * k],
        ]))
    };
    let (mut l, mut n) = ([0i32; LANES], [0i32; LANES]);
    for j in 0..8 {
        let (s, m) = scale_min_k4(j, scales);
        let (s, m) = (i32::from(s), i32::from(m));
        for (lane, out) in l.iter_mut().enumerate() {
            let mut dot = 0;
            for k in 0..4 {
                let i = 4 * lane + k; // element of sub-block j
                let byte = qs[32 * (j / 2) + i];
                let q = if j % 2 == 0 { byte & 0x0f } else { byte >> 4 };
                dot += i32::from(q) * xq(32 * j + i);
            }
            *out += s * dot;
        }
        n[j] = m * (bs(2 * j) + bs(2 * j + 1));
    }
    (l, n)
}

/// One output: row `w_row` (super-blocks of bytes) against vector `x_vec`.
pub fn dot_row(w_row: &[u8], x_vec: &[u8]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut mac = [0.0f32; LANES];
    for (w, x) in w_row
        .chunks_exact(BLOCK_BYTES)
        .zip(x_vec.chunks_exact(Q8_K_BYTES))
    {
        let d = f16_to_f32(u16::from_le_bytes([w[0], w[1]]));
        let dmin = f16_to_f32(u16::from_le_bytes([w[2], w[3]]));
        let dx = f32::from_le_bytes([x[0], x[1], x[2], x[3]]);
        let (dd, dm) = (d * dx, dmin * dx);
        let (l, n) = block_lanes(w, x);
        for lane in 0..LANES {
            acc[lane] += l[lane] as f32 * dd;
            mac[lane] += n[lane] as f32 * dm;
        }
    }
    fold(&acc, &mac)
}

/// The contract's fold.
pub fn fold(acc: &[f32; LANES], mac: &[f32; LANES]) -> f32 {
    let t: [f32; LANES] = std::array::from_fn(|l| acc[l] - mac[l]);
    let u = [t[0] + t[4], t[1] + t[5], t[2] + t[6], t[3] + t[7]];
    (u[0] + u[2]) + (u[1] + u[3])
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

/// The dot product in f64 from the dequantised values (ggml's
/// `dequantize_row_q4_K` and `dequantize_row_q8_K`): the value the
/// contract approximates, for error bounds.
pub fn dot_row_f64(w_row: &[u8], x_vec: &[u8]) -> f64 {
    use weft_quant::Format;
    let cols = w_row.len() / BLOCK_BYTES * QK_K;
    let (mut wf, mut xf) = (vec![0.0f32; cols], vec![0.0f32; cols]);
    Format::Q4_K
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
