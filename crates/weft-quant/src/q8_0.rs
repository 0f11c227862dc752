//! The Q8_0 block format (GGUF/ggml `block_q8_0`) and its quantiser.
//!
//! (The file reader, `weft-gguf`, and the Q8_0 family, `weft-q8`, both use
//! it; neither depends on the other.)
//!
//! A block is [`BLOCK_BYTES`] = 34 bytes: the scale `d` as IEEE binary16,
//! little-endian, then [`BLOCK_LEN`] = 32 quants `q[i]` as two's-complement
//! `i8`. The value of element `i` is `f32(d) * q[i]`.
//!
//! [`quantize_block`] gives the bytes of llama.cpp's
//! `quantize_row_q8_0_ref` for every finite input:
//!
//! ```text
//! amax = max |x[i]|          (C's MAX(a, b) = a > b ? a : b, left to right)
//! d    = amax / 127           (f32)
//! id   = d != 0 ? 1 / d : 0   (f32, from the f32 d, not the fp16 one)
//! d16  = fp16(d)              (round to nearest, ties to even)
//! q[i] = roundf(x[i] * id)    (half away from zero), as i8
//! ```
//!
//! Where C is undefined (a NaN or out-of-range `float → int8_t`
//! conversion, reachable only with non-finite inputs or with `1/d`
//! overflowing for subnormal `amax`), this quantiser clamps: NaN → 0,
//! anything else to `-127..=127`. So its quants never hold -128, which the
//! activation side of the matvec contract relies on.

use half::f16;

/// Weights (or activations) per block.
pub const BLOCK_LEN: usize = 32;

/// Bytes per block: a 2-byte fp16 scale and 32 `i8` quants.
pub const BLOCK_BYTES: usize = 34;

/// One Q8_0 block, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ8_0 {
    /// The scale, as binary16 bits.
    pub d: u16,
    /// The quants.
    pub qs: [i8; BLOCK_LEN],
}

impl BlockQ8_0 {
    /// The block's 34 bytes in GGUF order.
    pub fn to_bytes(&self) -> [u8; BLOCK_BYTES] {
        let mut out = [0u8; BLOCK_BYTES];
        out[..2].copy_from_slice(&self.d.to_le_bytes());
        for (o, q) in out[2..].iter_mut().zip(self.qs) {
            *o = q as u8;
        }
        out
    }

    /// Decode 34 bytes (any bit patterns are valid).
    pub fn from_bytes(bytes: &[u8; BLOCK_BYTES]) -> Self {
        let mut qs = [0i8; BLOCK_LEN];
        for (q, b) in qs.iter_mut().zip(&bytes[2..]) {
            *q = *b as i8;
        }
        Self {
            d: u16::from_le_bytes([bytes[0], bytes[1]]),
            qs,
        }
    }

    /// The scale widened to f32 (exact).
    pub fn scale(&self) -> f32 {
        f16_to_f32(self.d)
    }

    /// The 32 values `f32(d) * q[i]`.
    pub fn dequantize(&self) -> [f32; BLOCK_LEN] {
        let d = self.scale();
        self.qs.map(|q| d * f32::from(q))
    }
}

/// binary16 bits → f32, exact (normals, subnormals, zeros, infinities;
/// NaNs stay NaNs).
pub fn f16_to_f32(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// f32 → binary16 bits, round to nearest, ties to even (overflow → ±inf).
pub fn f32_to_f16(x: f32) -> u16 {
    f16::from_f32(x).to_bits()
}

/// `roundf(v)` (half away from zero) as a quant: NaN → 0, otherwise
/// clamped to `-127..=127`.
///
/// Written without `f32::round`, which on baseline x86-64 (no SSE4.1) is a
/// libm call per element and dominated model loading. Clamping first is
/// exact because rounding is monotone and ±127 round to themselves; for
/// `|c| <= 127` the truncation `t` is exact and so is `c - t`, so comparing
/// that fraction with ±0.5 rounds half away from zero exactly as `roundf`.
/// NaN survives the clamp, truncates to 0 (Rust's saturating cast), and its
/// fraction compares false both ways. `to_quant_matches_roundf` proves the
/// equivalence on every tie and its neighbours.
#[inline]
pub(crate) fn to_quant(v: f32) -> i8 {
    let c = v.clamp(-127.0, 127.0);
    let t = c as i32;
    let frac = c - t as f32;
    (t + i32::from(frac >= 0.5) - i32::from(frac <= -0.5)) as i8
}

/// Quantise 32 values to one block, bytes as `quantize_row_q8_0_ref`.
pub fn quantize_block(x: &[f32; BLOCK_LEN]) -> BlockQ8_0 {
    let mut amax = 0.0f32;
    for v in x {
        let a = v.abs();
        // C: MAX(amax, a) = amax > a ? amax : a.
        amax = if amax > a { amax } else { a };
    }
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; BLOCK_LEN];
    for (q, v) in qs.iter_mut().zip(x) {
        *q = to_quant(v * id);
    }
    BlockQ8_0 {
        d: f32_to_f16(d),
        qs,
    }
}

/// Why a row cannot be quantised.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The row's length is not a multiple of 32.
    #[error("ragged-row: length {len} is not a multiple of {BLOCK_LEN}")]
    Ragged {
        /// The length given.
        len: usize,
    },
}

/// Quantise a row (length a multiple of 32) to `len / 32` blocks of bytes,
/// appended to `out`.
pub fn quantize_row_into(x: &[f32], out: &mut Vec<u8>) -> Result<(), FormatError> {
    if !x.len().is_multiple_of(BLOCK_LEN) {
        return Err(FormatError::Ragged { len: x.len() });
    }
    out.reserve(x.len() / BLOCK_LEN * BLOCK_BYTES);
    for chunk in x.chunks_exact(BLOCK_LEN) {
        let block: &[f32; BLOCK_LEN] = chunk
            .try_into()
            .map_err(|_| FormatError::Ragged { len: x.len() })?;
        out.extend_from_slice(&quantize_block(block).to_bytes());
    }
    Ok(())
}

/// Quantise a row to a fresh byte vector (see [`quantize_row_into`]).
pub fn quantize_row(x: &[f32]) -> Result<Vec<u8>, FormatError> {
    let mut out = Vec::new();
    quantize_row_into(x, &mut out)?;
    Ok(out)
}

/// Decode block `index` of a byte slice of blocks, if it is there.
pub fn block_at(bytes: &[u8], index: usize) -> Option<BlockQ8_0> {
    let start = index.checked_mul(BLOCK_BYTES)?;
    let chunk = bytes.get(start..start.checked_add(BLOCK_BYTES)?)?;
    let array: &[u8; BLOCK_BYTES] = chunk.try_into().ok()?;
    Some(BlockQ8_0::from_bytes(array))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quantiser's rounding as first written: C's `roundf`, then clamp.
    fn to_quant_by_roundf(v: f32) -> i8 {
        let r = v.round();
        if r.is_nan() {
            0
        } else {
            r.clamp(-127.0, 127.0) as i8
        }
    }

    #[test]
    fn to_quant_matches_roundf() {
        let mut cases = vec![
            0.0f32,
            -0.0,
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            f32::from_bits(1),
            127.49998,
            127.5,
            128.0,
            -127.5,
            -128.5,
            1e9,
            -1e9,
        ];
        // Every half-integer tie in range and its two f32 neighbours, and
        // every integer with its neighbours.
        for k in -300..=300 {
            for base in [k as f32 + 0.5, k as f32] {
                cases.push(base);
                cases.push(f32::from_bits(base.to_bits().wrapping_add(1)));
                cases.push(f32::from_bits(base.to_bits().wrapping_sub(1)));
            }
        }
        // A dense sweep of the range products `x * id` actually land in.
        let mut x = -130.0f32;
        while x <= 130.0 {
            cases.push(x);
            x += 1.0 / 1024.0 + 1e-7;
        }
        for v in cases {
            assert_eq!(
                to_quant(v),
                to_quant_by_roundf(v),
                "v = {v:e} ({:#x})",
                v.to_bits()
            );
        }
    }
}
