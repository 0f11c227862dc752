//! The Q4_0 block format (ggml `block_q4_0`).
//!
//! A block is [`BLOCK_BYTES`] = 18 bytes: the scale `d` as binary16, then
//! 16 bytes of nibbles; byte `j` holds element `j` (low nibble) and
//! `j + 16` (high nibble). Element `i` is `(q[i] - 8) * f32(d)`: an integer
//! of 4 bits times an 11-bit significand, exact in f32 and rounded once,
//! so no compiler's contraction choice can change it.

use crate::q8_0::f16_to_f32;

/// Weights per block.
pub const BLOCK_LEN: usize = 32;

/// Bytes per block: fp16 `d` and 16 bytes of nibbles.
pub const BLOCK_BYTES: usize = 18;

/// The block's 32 values, as ggml's `dequantize_row_q4_0`.
pub fn dequantize_block(b: &[u8; BLOCK_BYTES], y: &mut [f32; BLOCK_LEN]) {
    let d = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    for (j, &q) in b[2..].iter().enumerate() {
        y[j] = (i32::from(q & 0x0f) - 8) as f32 * d;
        y[j + 16] = (i32::from(q >> 4) - 8) as f32 * d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nibbles_are_offset_by_eight_low_half_first() {
        let mut b = [0u8; BLOCK_BYTES];
        b[..2].copy_from_slice(&0x3c00u16.to_le_bytes()); // d = 1
        b[2] = 0xf0; // element 0 = 0 - 8, element 16 = 15 - 8
        let mut y = [0.0; BLOCK_LEN];
        dequantize_block(&b, &mut y);
        assert_eq!((y[0], y[16], y[1]), (-8.0, 7.0, -8.0));
    }
}
