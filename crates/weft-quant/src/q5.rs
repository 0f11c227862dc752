//! The Q5_0 and Q5_1 block formats (ggml `block_q5_0`, `block_q5_1`).
//!
//! Both keep 32 five-bit quants as 16 bytes of low nibbles (byte `j`:
//! element `j` low, element `j + 16` high) and a little-endian `u32` of
//! fifth bits (bit `i` for element `i`). Q5_0 is
//! `d`, `qh`, `qs` (22 bytes) and element `i` is `(q[i] - 16) * f32(d)`;
//! Q5_1 is `d`, `m`, `qh`, `qs` (24 bytes) and element `i` is
//! `q[i] * f32(d) + f32(m)`. Either product is exact in f32 (5 + 11
//! significant bits), so each element is rounded once, FMA or not.

use crate::q8_0::f16_to_f32;

/// Weights per block (both formats).
pub const BLOCK_LEN: usize = 32;

/// Bytes per Q5_0 block.
pub const Q5_0_BYTES: usize = 22;

/// Bytes per Q5_1 block.
pub const Q5_1_BYTES: usize = 24;

/// The five-bit quants (`0..32`) from the high-bit word and the nibbles.
fn quants(qh: &[u8], qs: &[u8]) -> [i32; BLOCK_LEN] {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut q = [0i32; BLOCK_LEN];
    for (j, &byte) in qs.iter().enumerate() {
        q[j] = i32::from(byte & 0x0f) | (((qh >> j) & 1) << 4) as i32;
        q[j + 16] = i32::from(byte >> 4) | (((qh >> (j + 16)) & 1) << 4) as i32;
    }
    q
}

/// A Q5_0 block's 32 values, as ggml's `dequantize_row_q5_0`.
pub fn dequantize_q5_0(b: &[u8; Q5_0_BYTES], y: &mut [f32; BLOCK_LEN]) {
    let d = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    for (y, q) in y.iter_mut().zip(quants(&b[2..6], &b[6..])) {
        *y = (q - 16) as f32 * d;
    }
}

/// A Q5_1 block's 32 values, as ggml's `dequantize_row_q5_1`.
pub fn dequantize_q5_1(b: &[u8; Q5_1_BYTES], y: &mut [f32; BLOCK_LEN]) {
    let d = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    let m = f16_to_f32(u16::from_le_bytes([b[2], b[3]]));
    for (y, q) in y.iter_mut().zip(quants(&b[4..8], &b[8..])) {
        *y = q as f32 * d + m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fifth_bit_of_element_i_is_bit_i_of_the_word() {
        let mut b = [0u8; Q5_0_BYTES];
        b[..2].copy_from_slice(&0x3c00u16.to_le_bytes()); // d = 1
        b[2..6].copy_from_slice(&(1u32 << 17 | 1).to_le_bytes());
        b[6] = 0x21; // element 0 low nibble 1, element 16 low nibble 2
        b[7] = 0x03; // element 1 = 3, element 17 = 0 with its fifth bit
        let mut y = [0.0; BLOCK_LEN];
        dequantize_q5_0(&b, &mut y);
        assert_eq!((y[0], y[16], y[1], y[17]), (1.0, -14.0, -13.0, 0.0));
    }
}
