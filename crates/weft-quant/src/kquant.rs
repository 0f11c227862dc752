//! The K-quant super-block formats (ggml `block_q2_K` … `block_q6_K`) and
//! Q8_K, the activation format their dot products take.
//!
//! A super-block holds [`QK_K`] = 256 weights in sub-blocks of 16 or 32,
//! each with its own small integer scale (and, for Q2_K, Q4_K and Q5_K, a
//! minimum) under one or two binary16 super-scales. Layouts, in byte order:
//!
//! | format | bytes | fields |
//! |---|---|---|
//! | Q2_K | 84 | `scales[16]` (4-bit scale, 4-bit min), `qs[64]`, `d`, `dmin` |
//! | Q3_K | 110 | `hmask[32]`, `qs[64]`, `scales[12]` (6-bit, packed), `d` |
//! | Q4_K | 144 | `d`, `dmin`, `scales[12]` (6-bit scale and min, packed), `qs[128]` |
//! | Q5_K | 176 | `d`, `dmin`, `scales[12]`, `qh[32]`, `qs[128]` |
//! | Q6_K | 210 | `ql[128]`, `qh[64]`, `scales[16]` (`i8`), `d` |
//! | Q8_K | 292 | `d` (f32), `qs[256]` (`i8`), `bsums[16]` (`i16`) |
//!
//! The dequantisers compute what ggml's reference `dequantize_row_*` do,
//! in the same order, in f32. Where C writes `a * q - m` the product is
//! exact (the sub-scale times the super-scale has at most 17 significant
//! bits, the quant at most 6), so a compiler that contracts it into an FMA
//! gets the same bits. Q6_K's `d * sc * q` is two roundings, left to right,
//! here as in C.

use crate::q8_0::f16_to_f32;

/// Weights per super-block.
pub const QK_K: usize = 256;

/// Bytes per Q2_K super-block.
pub const Q2_K_BYTES: usize = 84;
/// Bytes per Q3_K super-block.
pub const Q3_K_BYTES: usize = 110;
/// Bytes per Q4_K super-block.
pub const Q4_K_BYTES: usize = 144;
/// Bytes per Q5_K super-block.
pub const Q5_K_BYTES: usize = 176;
/// Bytes per Q6_K super-block.
pub const Q6_K_BYTES: usize = 210;
/// Bytes per Q8_K super-block.
pub const Q8_K_BYTES: usize = 292;

fn half_at(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// Sub-block `j`'s 6-bit scale and minimum from Q4_K/Q5_K's 12 packed
/// bytes: for `j < 4` the low six bits of bytes `j` and `j + 4`; above,
/// a nibble of byte `j + 4` with the top two bits of bytes `j - 4` and `j`.
pub fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

fn scales12(b: &[u8], at: usize) -> [u8; 12] {
    b[at..at + 12].try_into().expect("12 bytes")
}

/// A Q2_K super-block's values, as ggml's `dequantize_row_q2_K`.
pub fn dequantize_q2_k(b: &[u8; Q2_K_BYTES], y: &mut [f32; QK_K]) {
    let (scales, qs) = (&b[..16], &b[16..80]);
    let d = half_at(b, 80);
    let min = half_at(b, 82);
    let mut out = y.iter_mut();
    let mut is = 0;
    for q in qs.chunks_exact(32) {
        for shift in [0, 2, 4, 6] {
            for half in [&q[..16], &q[16..]] {
                let sc = scales[is];
                is += 1;
                let dl = d * f32::from(sc & 0x0f);
                let ml = min * f32::from(sc >> 4);
                for &byte in half {
                    *out.next().expect("256 outputs") = dl * f32::from((byte >> shift) & 3) - ml;
                }
            }
        }
    }
}

/// A Q3_K super-block's values, as ggml's `dequantize_row_q3_K`.
pub fn dequantize_q3_k(b: &[u8; Q3_K_BYTES], y: &mut [f32; QK_K]) {
    let (hmask, qs) = (&b[..32], &b[32..96]);
    let d_all = half_at(b, 108);
    // Sixteen 6-bit scales: low nibbles from bytes 0..8, high pairs from 8..12.
    let word = |i: usize| u32::from_le_bytes(b[96 + 4 * i..100 + 4 * i].try_into().expect("4"));
    let (a0, a1, tmp) = (word(0), word(1), word(2));
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let aux = [
        (a0 & KMASK2) | ((tmp & KMASK1) << 4),
        (a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4),
        ((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4),
        ((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4),
    ];
    let scales: Vec<i8> = aux
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .map(|s| s as i8)
        .collect();
    let mut out = y.iter_mut();
    let mut is = 0;
    let mut m = 1u8;
    for q in qs.chunks_exact(32) {
        for shift in [0, 2, 4, 6] {
            for (lo, half) in [(0, &q[..16]), (16, &q[16..])] {
                let dl = d_all * f32::from(i16::from(scales[is]) - 32);
                is += 1;
                for (l, &byte) in half.iter().enumerate() {
                    let high = if hmask[lo + l] & m != 0 { 0 } else { 4 };
                    let v = i16::from((byte >> shift) & 3) - high;
                    *out.next().expect("256 outputs") = dl * f32::from(v);
                }
            }
            m <<= 1;
        }
    }
}

/// A Q4_K super-block's values, as ggml's `dequantize_row_q4_K`.
pub fn dequantize_q4_k(b: &[u8; Q4_K_BYTES], y: &mut [f32; QK_K]) {
    let d = half_at(b, 0);
    let min = half_at(b, 2);
    let scales = scales12(b, 4);
    for (pair, (q, y)) in b[16..]
        .chunks_exact(32)
        .zip(y.chunks_exact_mut(64))
        .enumerate()
    {
        let (sc1, m1) = scale_min_k4(2 * pair, &scales);
        let (sc2, m2) = scale_min_k4(2 * pair + 1, &scales);
        let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
        let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
        for (l, &byte) in q.iter().enumerate() {
            y[l] = d1 * f32::from(byte & 0x0f) - m1;
            y[l + 32] = d2 * f32::from(byte >> 4) - m2;
        }
    }
}

/// A Q5_K super-block's values, as ggml's `dequantize_row_q5_K`.
pub fn dequantize_q5_k(b: &[u8; Q5_K_BYTES], y: &mut [f32; QK_K]) {
    let d = half_at(b, 0);
    let min = half_at(b, 2);
    let scales = scales12(b, 4);
    let qh = &b[16..48];
    for (pair, (q, y)) in b[48..]
        .chunks_exact(32)
        .zip(y.chunks_exact_mut(64))
        .enumerate()
    {
        let (sc1, m1) = scale_min_k4(2 * pair, &scales);
        let (sc2, m2) = scale_min_k4(2 * pair + 1, &scales);
        let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
        let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
        let (u1, u2) = (1u8 << (2 * pair), 2u8 << (2 * pair));
        for (l, &byte) in q.iter().enumerate() {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            y[l] = d1 * f32::from((byte & 0x0f) + h1) - m1;
            y[l + 32] = d2 * f32::from((byte >> 4) + h2) - m2;
        }
    }
}

/// A Q6_K super-block's values, as ggml's `dequantize_row_q6_K`.
pub fn dequantize_q6_k(b: &[u8; Q6_K_BYTES], y: &mut [f32; QK_K]) {
    let d = half_at(b, 208);
    for half in 0..2 {
        let ql = &b[64 * half..64 * half + 64];
        let qh = &b[128 + 32 * half..160 + 32 * half];
        let sc = &b[192 + 8 * half..200 + 8 * half];
        let y = &mut y[128 * half..128 * half + 128];
        for l in 0..32 {
            let is = l / 16;
            let q = [
                (ql[l] & 0x0f) | ((qh[l] & 3) << 4),
                (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4),
                (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
            ];
            for (k, q) in q.into_iter().enumerate() {
                let scale = f32::from(sc[is + 2 * k] as i8);
                y[l + 32 * k] = d * scale * f32::from(q as i8 - 32);
            }
        }
    }
}

/// A Q8_K super-block's values: `d * q[i]`.
pub fn dequantize_q8_k(b: &[u8; Q8_K_BYTES], y: &mut [f32; QK_K]) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    for (y, &q) in y.iter_mut().zip(&b[4..4 + QK_K]) {
        *y = d * f32::from(q as i8);
    }
}

/// ggml's `nearest_int`: round to nearest, ties to even, by adding
/// 1.5 · 2^23 and reading the low mantissa bits. Exact for
/// `|v| <= 2^22 - 1`, the range ggml asserts.
fn nearest_int(v: f32) -> i32 {
    ((v + 12_582_912.0).to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// Quantise 256 finite values to one Q8_K super-block, bytes as ggml's
/// `quantize_row_q8_K_ref`:
///
/// ```text
/// max  = the first x of largest |x|  (strict >, so ties keep the first)
/// all zero: d = 0, q = 0, bsums = 0  (ggml leaves bsums unwritten here)
/// else: iscale = -127 / max;  q = MIN(127, nearest_int(iscale * x))
///       bsums[j] = sum of q[16j..16j+16];  d = 1 / iscale
/// ```
///
/// The quants are then in `-127..=127`, so products with any `i8` weight
/// quants and their sums over a super-block fit an `i32`.
pub fn quantize_q8_k(x: &[f32; QK_K]) -> [u8; Q8_K_BYTES] {
    let mut out = [0u8; Q8_K_BYTES];
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        return out;
    }
    let iscale = -127.0 / max;
    let mut q = [0i8; QK_K];
    for (q, &v) in q.iter_mut().zip(x) {
        *q = nearest_int(iscale * v).min(127) as i8;
    }
    out[..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    for (o, &q) in out[4..4 + QK_K].iter_mut().zip(&q) {
        *o = q as u8;
    }
    for (j, group) in q.chunks_exact(16).enumerate() {
        let sum: i16 = group.iter().map(|&q| i16::from(q)).sum();
        out[4 + QK_K + 2 * j..6 + QK_K + 2 * j].copy_from_slice(&sum.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_min_k4_unpacks_every_six_bit_pair() {
        // Pack 8 known (scale, min) pairs the way the format does, then read
        // them back.
        let pairs: [(u8, u8); 8] = [
            (1, 63),
            (62, 2),
            (3, 61),
            (60, 4),
            (33, 17),
            (5, 48),
            (63, 0),
            (0, 63),
        ];
        let mut q = [0u8; 12];
        for (j, &(s, m)) in pairs.iter().enumerate() {
            if j < 4 {
                q[j] |= s;
                q[j + 4] |= m;
            } else {
                q[j + 4] = (s & 0x0f) | ((m & 0x0f) << 4);
                q[j - 4] |= (s >> 4) << 6;
                q[j] |= (m >> 4) << 6;
            }
        }
        for (j, &want) in pairs.iter().enumerate() {
            assert_eq!(scale_min_k4(j, &q), want, "sub-block {j}");
        }
    }

    #[test]
    fn nearest_int_rounds_ties_to_even() {
        for (v, want) in [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (126.6, 127),
            (-127.0, -127),
        ] {
            assert_eq!(nearest_int(v), want, "{v}");
        }
    }

    #[test]
    fn q8_k_of_zeros_is_all_zero_bytes_and_bsums_sum_the_quants() {
        assert_eq!(quantize_q8_k(&[0.0; QK_K]), [0u8; Q8_K_BYTES]);
        let x: [f32; QK_K] = std::array::from_fn(|i| i as f32 - 100.0);
        let b = quantize_q8_k(&x);
        let q: Vec<i16> = b[4..4 + QK_K].iter().map(|&q| i16::from(q as i8)).collect();
        assert_eq!(q[255], -127, "the largest magnitude maps to -127");
        for j in 0..16 {
            let bsum = i16::from_le_bytes([b[4 + QK_K + 2 * j], b[5 + QK_K + 2 * j]]);
            assert_eq!(bsum, q[16 * j..16 * j + 16].iter().sum::<i16>());
        }
    }
}
