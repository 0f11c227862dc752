//! Every block format Weft reads, behind one dispatch: [`Format`] knows a
//! format's block geometry and turns its bytes into f32 exactly as ggml's
//! reference `to_float` does.
//!
//! `tests/ggml_pinned.rs` holds the proof: blocks made by ggml's quantiser
//! and blocks of random bytes (NaN, infinite and subnormal scales
//! included), each with the f32 values ggml's own code computed for them,
//! compared bit for bit.

use crate::{f16, kquant, q4_0, q4_1, q5, q8_0};

/// A block format with its dequantiser.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum Format {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16: the top half of a binary32.
    BF16,
    /// 32 × 4-bit, one fp16 scale, offset 8.
    Q4_0,
    /// 32 × 4-bit, fp16 scale and minimum.
    Q4_1,
    /// 32 × 5-bit, one fp16 scale, offset 16.
    Q5_0,
    /// 32 × 5-bit, fp16 scale and minimum.
    Q5_1,
    /// 32 × 8-bit, one fp16 scale.
    Q8_0,
    /// 256 × 2-bit in 16 sub-blocks with 4-bit scales and minimums.
    Q2_K,
    /// 256 × 3-bit in 16 sub-blocks with 6-bit signed scales.
    Q3_K,
    /// 256 × 4-bit in 8 sub-blocks with 6-bit scales and minimums.
    Q4_K,
    /// 256 × 5-bit in 8 sub-blocks with 6-bit scales and minimums.
    Q5_K,
    /// 256 × 6-bit in 16 sub-blocks with 8-bit signed scales.
    Q6_K,
    /// 256 × 8-bit with an f32 scale and per-16 sums: K-quant activations.
    Q8_K,
}

impl Format {
    /// Every format, in ggml id order.
    pub const ALL: &'static [Format] = &[
        Format::F32,
        Format::F16,
        Format::Q4_0,
        Format::Q4_1,
        Format::Q5_0,
        Format::Q5_1,
        Format::Q8_0,
        Format::Q2_K,
        Format::Q3_K,
        Format::Q4_K,
        Format::Q5_K,
        Format::Q6_K,
        Format::Q8_K,
        Format::BF16,
    ];

    /// ggml's `type_name` for the format.
    pub fn name(self) -> &'static str {
        match self {
            Format::F32 => "f32",
            Format::F16 => "f16",
            Format::BF16 => "bf16",
            Format::Q4_0 => "q4_0",
            Format::Q4_1 => "q4_1",
            Format::Q5_0 => "q5_0",
            Format::Q5_1 => "q5_1",
            Format::Q8_0 => "q8_0",
            Format::Q2_K => "q2_K",
            Format::Q3_K => "q3_K",
            Format::Q4_K => "q4_K",
            Format::Q5_K => "q5_K",
            Format::Q6_K => "q6_K",
            Format::Q8_K => "q8_K",
        }
    }

    /// Elements per block.
    pub fn block_len(self) -> usize {
        match self {
            Format::F32 | Format::F16 | Format::BF16 => 1,
            Format::Q4_0 | Format::Q4_1 | Format::Q5_0 | Format::Q5_1 | Format::Q8_0 => 32,
            Format::Q2_K
            | Format::Q3_K
            | Format::Q4_K
            | Format::Q5_K
            | Format::Q6_K
            | Format::Q8_K => kquant::QK_K,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Format::F32 => 4,
            Format::F16 | Format::BF16 => 2,
            Format::Q4_0 => q4_0::BLOCK_BYTES,
            Format::Q4_1 => q4_1::BLOCK_BYTES,
            Format::Q5_0 => q5::Q5_0_BYTES,
            Format::Q5_1 => q5::Q5_1_BYTES,
            Format::Q8_0 => q8_0::BLOCK_BYTES,
            Format::Q2_K => kquant::Q2_K_BYTES,
            Format::Q3_K => kquant::Q3_K_BYTES,
            Format::Q4_K => kquant::Q4_K_BYTES,
            Format::Q5_K => kquant::Q5_K_BYTES,
            Format::Q6_K => kquant::Q6_K_BYTES,
            Format::Q8_K => kquant::Q8_K_BYTES,
        }
    }

    /// The bytes `elements` values take, if they are whole blocks.
    pub fn bytes_for(self, elements: usize) -> Option<usize> {
        if !elements.is_multiple_of(self.block_len()) {
            return None;
        }
        (elements / self.block_len()).checked_mul(self.block_bytes())
    }

    /// Decode `src` into `dst`, which must be exactly the elements `src`
    /// holds in whole blocks. Any bit pattern decodes.
    pub fn dequantize(self, src: &[u8], dst: &mut [f32]) -> Result<(), BlockLengthError> {
        if self.bytes_for(dst.len()) != Some(src.len()) {
            return Err(BlockLengthError {
                format: self,
                bytes: src.len(),
                elements: dst.len(),
            });
        }
        match self {
            Format::F32 => f16::f32_from_le_into(src, dst).expect("lengths checked"),
            Format::F16 => f16::f16_to_f32_into(src, dst).expect("lengths checked"),
            Format::BF16 => f16::bf16_to_f32_into(src, dst).expect("lengths checked"),
            Format::Q4_0 => blocks(src, dst, q4_0::dequantize_block),
            Format::Q4_1 => blocks(src, dst, |b, y| {
                *y = q4_1::BlockQ4_1::from_bytes(b).dequantize()
            }),
            Format::Q5_0 => blocks(src, dst, q5::dequantize_q5_0),
            Format::Q5_1 => blocks(src, dst, q5::dequantize_q5_1),
            Format::Q8_0 => blocks(src, dst, |b, y| {
                *y = q8_0::BlockQ8_0::from_bytes(b).dequantize()
            }),
            Format::Q2_K => blocks(src, dst, kquant::dequantize_q2_k),
            Format::Q3_K => blocks(src, dst, kquant::dequantize_q3_k),
            Format::Q4_K => blocks(src, dst, kquant::dequantize_q4_k),
            Format::Q5_K => blocks(src, dst, kquant::dequantize_q5_k),
            Format::Q6_K => blocks(src, dst, kquant::dequantize_q6_k),
            Format::Q8_K => blocks(src, dst, kquant::dequantize_q8_k),
        }
        Ok(())
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Apply a block decoder to each whole block (lengths already checked).
fn blocks<const B: usize, const N: usize>(
    src: &[u8],
    dst: &mut [f32],
    decode: impl Fn(&[u8; B], &mut [f32; N]),
) {
    for (s, d) in src.chunks_exact(B).zip(dst.chunks_exact_mut(N)) {
        decode(
            s.try_into().expect("exact chunk"),
            d.try_into().expect("exact chunk"),
        );
    }
}

/// Bytes that are not whole blocks of the elements asked for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("length-mismatch: {bytes} bytes of {format} are not {elements} elements in whole blocks of {} ({} bytes each)", format.block_len(), format.block_bytes())]
pub struct BlockLengthError {
    /// The format.
    pub format: Format,
    /// Source bytes.
    pub bytes: usize,
    /// Destination elements.
    pub elements: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ragged_or_short_source_is_a_length_error_not_a_panic() {
        for &f in Format::ALL {
            let mut dst = vec![0.0f32; f.block_len()];
            let good = vec![0u8; f.block_bytes()];
            assert_eq!(f.dequantize(&good, &mut dst), Ok(()), "{f}");
            for bytes in [0, f.block_bytes() - 1, f.block_bytes() + 1] {
                let err = f.dequantize(
                    &good.iter().copied().cycle().take(bytes).collect::<Vec<_>>(),
                    &mut dst,
                );
                assert!(
                    matches!(err, Err(BlockLengthError { format, .. }) if format == f),
                    "{f} {bytes}"
                );
            }
            if f.block_len() > 1 {
                // A super-block count that does not divide the row.
                let mut ragged = vec![0.0f32; f.block_len() + 1];
                assert!(f.dequantize(&good, &mut ragged).is_err(), "{f}");
            }
        }
    }

    #[test]
    fn zero_bytes_decode_to_zeros_in_every_format() {
        for &f in Format::ALL {
            let mut dst = vec![1.0f32; 2 * f.block_len()];
            f.dequantize(&vec![0u8; 2 * f.block_bytes()], &mut dst)
                .expect("whole blocks");
            assert!(dst.iter().all(|&v| v == 0.0), "{f}");
        }
    }
}
