//! F16, BF16 and F32 tensors: little-endian binary16, bfloat16 and
//! binary32 elements.
//!
//! GGUF data are only byte-aligned when read from a `Vec<u8>` or an
//! embedded slice, so these read through `from_le_bytes` and never cast a
//! byte pointer to a float pointer.

/// Widen little-endian binary16 bytes to f32 (exact; NaNs stay NaNs).
///
/// `src.len()` must be `2 * dst.len()`.
pub fn f16_to_f32_into(src: &[u8], dst: &mut [f32]) -> Result<(), LengthError> {
    check(src.len(), dst.len(), 2)?;
    for (s, d) in src.chunks_exact(2).zip(dst.iter_mut()) {
        *d = half::f16::from_bits(u16::from_le_bytes([s[0], s[1]])).to_f32();
    }
    Ok(())
}

/// Widen little-endian bfloat16 bytes to f32: the 16 bits become the top
/// half of the binary32 (exact, NaN payloads too, as ggml's
/// `ggml_bf16_to_fp32`).
///
/// `src.len()` must be `2 * dst.len()`.
pub fn bf16_to_f32_into(src: &[u8], dst: &mut [f32]) -> Result<(), LengthError> {
    check(src.len(), dst.len(), 2)?;
    for (s, d) in src.chunks_exact(2).zip(dst.iter_mut()) {
        *d = f32::from_bits(u32::from(u16::from_le_bytes([s[0], s[1]])) << 16);
    }
    Ok(())
}

/// Copy little-endian binary32 bytes to f32 (bit for bit, NaN payloads too).
///
/// `src.len()` must be `4 * dst.len()`.
pub fn f32_from_le_into(src: &[u8], dst: &mut [f32]) -> Result<(), LengthError> {
    check(src.len(), dst.len(), 4)?;
    for (s, d) in src.chunks_exact(4).zip(dst.iter_mut()) {
        *d = f32::from_bits(u32::from_le_bytes([s[0], s[1], s[2], s[3]]));
    }
    Ok(())
}

fn check(src: usize, dst: usize, width: usize) -> Result<(), LengthError> {
    if dst.checked_mul(width) == Some(src) {
        Ok(())
    } else {
        Err(LengthError { src, dst, width })
    }
}

/// The byte source does not hold exactly one element per destination slot.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("length-mismatch: {src} source bytes for {dst} elements of {width} bytes")]
pub struct LengthError {
    /// Source bytes.
    pub src: usize,
    /// Destination elements.
    pub dst: usize,
    /// Bytes per element.
    pub width: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_widening_is_exact_for_every_bit_pattern() {
        let src: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
        let mut dst = vec![0.0f32; 1 << 16];
        f16_to_f32_into(&src, &mut dst).expect("lengths match");
        for (bits, got) in (0..=u16::MAX).zip(dst) {
            let want = half::f16::from_bits(bits).to_f64();
            if want.is_nan() {
                assert!(got.is_nan(), "{bits:#x}");
            } else {
                assert_eq!(f64::from(got), want, "{bits:#x}");
            }
        }
    }

    #[test]
    fn f32_passthrough_keeps_bits_and_checks_lengths() {
        let bits = [0x7fc0_0001u32, 0x8000_0000, 1, 0x3f80_0000];
        let src: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
        let mut dst = [0.0f32; 4];
        f32_from_le_into(&src, &mut dst).expect("lengths match");
        assert_eq!(dst.map(f32::to_bits), bits);
        assert_eq!(
            f32_from_le_into(&src[1..], &mut dst),
            Err(LengthError {
                src: 15,
                dst: 4,
                width: 4
            })
        );
    }
}
