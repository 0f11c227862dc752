//! What the validations of the generated twins share: values that hunt for
//! differences, and buffers placed at a chosen misalignment between
//! canary guards.
//!
//! Library code, not a test helper: the planner judges twins on cases
//! built from these.

use weft_validate::{align_up_elements, f32_special_values, SplitMix64, CANARY_F32};

/// Canary f32s on each side of every buffer a kernel writes.
pub const GUARD: usize = 16;

/// Every special class ([`f32_special_values`]: ±0, ±inf, quiet and
/// signalling NaNs with payloads, subnormals, ±min normal, ±max, ±1) and
/// huge, tiny and ordinary values around them.
pub fn specials() -> Vec<f32> {
    let mut v: Vec<f32> = f32_special_values()
        .into_iter()
        .map(f32::from_bits)
        .collect();
    v.extend([
        3.0e38, -3.0e38, 1.0e30, -1.0e30, 1.0e20, 1.0e-20, 1.0e-30, -1.0e-30, 1.5, -2.75, 0.1,
        1.0e-40,
    ]);
    v
}

/// One value: mostly ordinary over many binades, with specials,
/// subnormals, random bit patterns and huge or tiny values mixed in.
pub fn hunting(rng: &mut SplitMix64, specials: &[f32]) -> f32 {
    let r = rng.next_u64();
    let unit = ((r >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0;
    match r % 16 {
        0 | 1 => specials[(r >> 8) as usize % specials.len()],
        2 => f32::from_bits((r >> 8) as u32 & 0x807f_ffff),
        3 => f32::from_bits((r >> 16) as u32),
        4 => unit * 1.0e30,
        5 => unit * 1.0e-30,
        // Magnitudes spread over 2^-20..2^20: sums whose order matters.
        6 | 7 => unit * f32::from_bits(((127 - 20 + (r >> 32) % 41) as u32) << 23),
        _ => unit,
    }
}

/// `n` values from [`hunting`].
pub fn hunting_vec(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
    let s = specials();
    (0..n).map(|_| hunting(rng, &s)).collect()
}

/// `values` copied into a fresh buffer `misalign` elements past a 64-byte
/// boundary, with at least [`GUARD`] canaries either side; returns the
/// buffer and where the values start.
pub fn place(values: &[f32], misalign: usize) -> (Vec<f32>, usize) {
    let mut buf = vec![f32::from_bits(CANARY_F32); values.len() + 3 * GUARD + 16 + misalign];
    let mut start = align_up_elements(buf.as_ptr(), 64) + misalign;
    while start < GUARD {
        start += 16;
    }
    buf[start..start + values.len()].copy_from_slice(values);
    (buf, start)
}

/// The `len` values at `start` with their guards: what a run returns.
pub fn guarded(buf: &[f32], start: usize, len: usize) -> Vec<f32> {
    buf[start - GUARD..start + len + GUARD].to_vec()
}

/// An input word and its bits, for mismatch reports.
pub fn show(x: f32) -> String {
    format!("{:#010x} ({x:e})", x.to_bits())
}
