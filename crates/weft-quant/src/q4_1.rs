//! The Q4_1 block format (ggml `block_q4_1`): its dequantiser, its
//! reference quantiser, and the re-quantisation to Q8_0 done at load time.
//!
//! A block is [`BLOCK_BYTES`] = 20 bytes: the scale `d` and the minimum `m`
//! as IEEE binary16 (little-endian), then 16 bytes of nibbles. Byte `j`
//! holds element `j` in its low nibble and element `j + 16` in its high
//! nibble. Element `i` is `q[i] * f32(d) + f32(m)` in f32 — ggml's
//! `dequantize_row_q4_1` writes `x0*d + m` with `x0` an `int` in `0..=15`.
//!
//! That expression has one rounding however the C compiler builds it: `q`
//! has 4 significant bits and `f32(d)` at most 11, so `q * d` is exact in
//! f32 (no overflow: `|d| <= 65504`; no underflow: `d` is a multiple of
//! 2^-24), and a fused multiply-add gives the same bits as a multiply then
//! an add. So [`BlockQ4_1::dequantize`] is bit-identical to ggml's whether
//! or not it was built with FMA contraction.

use super::q8_0;
use half::f16;

/// Weights per block.
pub const BLOCK_LEN: usize = 32;

/// Bytes per block: two fp16 (`d`, `m`) and 16 bytes of nibbles.
pub const BLOCK_BYTES: usize = 20;

/// One Q4_1 block, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ4_1 {
    /// The scale, as binary16 bits.
    pub d: u16,
    /// The minimum (offset), as binary16 bits.
    pub m: u16,
    /// Byte `j`: element `j` in bits 0..4, element `j + 16` in bits 4..8.
    pub qs: [u8; BLOCK_LEN / 2],
}

impl BlockQ4_1 {
    /// Decode 20 bytes (any bit patterns are valid).
    pub fn from_bytes(bytes: &[u8; BLOCK_BYTES]) -> Self {
        let mut qs = [0u8; BLOCK_LEN / 2];
        qs.copy_from_slice(&bytes[4..]);
        Self {
            d: u16::from_le_bytes([bytes[0], bytes[1]]),
            m: u16::from_le_bytes([bytes[2], bytes[3]]),
            qs,
        }
    }

    /// The block's 20 bytes in GGUF order.
    pub fn to_bytes(&self) -> [u8; BLOCK_BYTES] {
        let mut out = [0u8; BLOCK_BYTES];
        out[..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..4].copy_from_slice(&self.m.to_le_bytes());
        out[4..].copy_from_slice(&self.qs);
        out
    }

    /// The 4-bit quant of element `i` (`0..32`).
    pub fn quant(&self, i: usize) -> u8 {
        let byte = self.qs[i % (BLOCK_LEN / 2)];
        if i < BLOCK_LEN / 2 {
            byte & 0x0f
        } else {
            byte >> 4
        }
    }

    /// The 32 values, as ggml's `dequantize_row_q4_1` computes them.
    pub fn dequantize(&self) -> [f32; BLOCK_LEN] {
        let d = f16::from_bits(self.d).to_f32();
        let m = f16::from_bits(self.m).to_f32();
        let mut y = [0.0f32; BLOCK_LEN];
        for (j, byte) in self.qs.iter().enumerate() {
            y[j] = f32::from(byte & 0x0f) * d + m;
            y[j + BLOCK_LEN / 2] = f32::from(byte >> 4) * d + m;
        }
        y
    }
}

/// Quantise 32 values to one block as ggml's `quantize_row_q4_1_ref`:
///
/// ```text
/// min, max over x (starting from +FLT_MAX, -FLT_MAX; `<` and `>`)
/// d  = (max - min) / 15;   id = d != 0 ? 1/d : 0
/// q  = MIN(15, (int8_t)((x - min) * id + 0.5f))     (truncating cast)
/// ```
///
/// The C cast is undefined for NaN or out-of-range values; here they
/// saturate (NaN → 0) and the quant is clamped to `0..=15`. Useful to build
/// test and embedded models; loading never quantises to Q4_1.
pub fn quantize_block(x: &[f32; BLOCK_LEN]) -> BlockQ4_1 {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let quant = |v: f32| -> u8 {
        let t = ((v - min) * id + 0.5) as i8;
        t.clamp(0, 15) as u8
    };
    let mut qs = [0u8; BLOCK_LEN / 2];
    for (j, q) in qs.iter_mut().enumerate() {
        *q = quant(x[j]) | (quant(x[j + BLOCK_LEN / 2]) << 4);
    }
    BlockQ4_1 {
        d: q8_0::f32_to_f16(d),
        m: q8_0::f32_to_f16(min),
        qs,
    }
}

/// Re-quantise one Q4_1 block to Q8_0: dequantise exactly as ggml, then
/// quantise with the reference Q8_0 quantiser — the bytes `llama-quantize
/// --allow-requantize` writes for the same block.
pub fn requantize_block(block: &[u8; BLOCK_BYTES]) -> [u8; q8_0::BLOCK_BYTES] {
    let values = BlockQ4_1::from_bytes(block).dequantize();
    q8_0::quantize_block(&values).to_bytes()
}

/// Re-quantise whole Q4_1 bytes to Q8_0 bytes.
///
/// `src.len()` must be a multiple of 20 and `dst.len()` exactly
/// `src.len() / 20 * 34`; otherwise nothing is written and the error says
/// which length is wrong.
pub fn requantize_into(src: &[u8], dst: &mut [u8]) -> Result<(), RequantizeError> {
    if !src.len().is_multiple_of(BLOCK_BYTES) {
        return Err(RequantizeError::RaggedSource { len: src.len() });
    }
    let blocks = src.len() / BLOCK_BYTES;
    if dst.len() != blocks * q8_0::BLOCK_BYTES {
        return Err(RequantizeError::WrongDestination {
            len: dst.len(),
            want: blocks * q8_0::BLOCK_BYTES,
        });
    }
    for (s, d) in src
        .chunks_exact(BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(q8_0::BLOCK_BYTES))
    {
        let s: &[u8; BLOCK_BYTES] = s.try_into().expect("chunks_exact gives 20 bytes");
        d.copy_from_slice(&requantize_block(s));
    }
    Ok(())
}

/// Why a re-quantisation could not run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequantizeError {
    /// The Q4_1 bytes are not a whole number of 20-byte blocks.
    #[error("ragged-source: Q4_1 source of {len} bytes is not a whole number of {BLOCK_BYTES}-byte blocks")]
    RaggedSource {
        /// The source length.
        len: usize,
    },
    /// The destination does not hold exactly one Q8_0 block per Q4_1 block.
    #[error("wrong-destination: Q8_0 destination of {len} bytes, {want} needed")]
    WrongDestination {
        /// The destination length.
        len: usize,
        /// The length needed.
        want: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nibble_layout_is_low_then_high_half() {
        // d = 1, m = 0: element j is its nibble.
        let mut qs = [0u8; 16];
        for (j, q) in qs.iter_mut().enumerate() {
            *q = (j as u8) | (((15 - j) as u8) << 4);
        }
        let b = BlockQ4_1 {
            d: 0x3c00,
            m: 0,
            qs,
        };
        let y = b.dequantize();
        for j in 0..16 {
            assert_eq!(y[j], j as f32);
            assert_eq!(y[j + 16], (15 - j) as f32);
            assert_eq!(b.quant(j), j as u8);
            assert_eq!(b.quant(j + 16), (15 - j) as u8);
        }
    }

    #[test]
    fn dequantize_is_one_rounding_of_q_times_d_plus_m() {
        // d = 0.1 (fp16 0x2e66), m = -0.3 (0xb4cd): q*d exact, one rounding in the add.
        let b = BlockQ4_1 {
            d: 0x2e66,
            m: 0xb4cd,
            qs: [0x7f; 16],
        };
        let d = f16::from_bits(0x2e66).to_f32() as f64;
        let m = f16::from_bits(0xb4cd).to_f32() as f64;
        let y = b.dequantize();
        assert_eq!(y[0], (15.0 * d + m) as f32);
        assert_eq!(y[16], (7.0 * d + m) as f32);
        // And the FMA form agrees (the product is exact).
        assert_eq!(y[0], 15.0f32.mul_add(d as f32, m as f32));
    }

    #[test]
    fn bytes_round_trip() {
        let bytes: [u8; 20] = core::array::from_fn(|i| (i * 37 + 11) as u8);
        assert_eq!(BlockQ4_1::from_bytes(&bytes).to_bytes(), bytes);
    }

    #[test]
    fn requantize_checks_both_lengths() {
        let mut dst = [0u8; 34];
        assert_eq!(
            requantize_into(&[0u8; 19], &mut dst),
            Err(RequantizeError::RaggedSource { len: 19 })
        );
        assert_eq!(
            requantize_into(&[0u8; 40], &mut dst),
            Err(RequantizeError::WrongDestination { len: 34, want: 68 })
        );
        assert_eq!(requantize_into(&[0u8; 20], &mut dst), Ok(()));
    }

    #[test]
    fn reference_quantiser_round_trips_within_half_a_step() {
        let x: [f32; 32] = core::array::from_fn(|i| (i as f32 - 9.5) * 0.31);
        let b = quantize_block(&x);
        let step = f16::from_bits(b.d).to_f32();
        for (v, y) in x.iter().zip(b.dequantize()) {
            assert!(
                (v - y).abs() <= step * 0.5 + 1e-3,
                "{v} vs {y} (step {step})"
            );
        }
    }
}
