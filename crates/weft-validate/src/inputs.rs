//! Input values that hunt for differences: special values, neighbours of
//! boundaries, subnormals, seeded random bit patterns.

/// Words after (and before) an output slice that must stay untouched.
pub const GUARD_ELEMENTS: usize = 16;

/// The bit pattern guard words hold: a normal, negative `f32`
/// (-6.3e18, not a NaN, so `NanRule::ByClass` never hides an overwrite).
pub const CANARY_F32: u32 = 0xdead_beef;

/// SplitMix64: a tiny, fast, seedable generator (Steele, Lea and Flood),
/// fixed here so that cases never change with a dependency's version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The next 32 random bits (the high half of [`SplitMix64::next_u64`]).
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// A value in `0..n` (0 when `n` is 0), by multiply-shift.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A uniform `f64` in `[0, 1)` with 53 random bits.
    pub fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The special `f32` values every unary function is run on, as bits:
/// ±0, ±inf, quiet and signalling NaNs with payloads (both signs), ±min and
/// ±max subnormal, ±min normal, ±max finite, 1 and -1.
pub fn f32_special_values() -> Vec<u32> {
    vec![
        0x0000_0000, // +0
        0x8000_0000, // -0
        0x7f80_0000, // +inf
        0xff80_0000, // -inf
        0x7fc0_0000, // quiet NaN
        0xffc0_0000, // -quiet NaN
        0x7fc1_2345, // quiet NaN with payload
        0xffd5_5555, // -quiet NaN with payload
        0x7f80_0001, // signalling NaN, smallest payload
        0x7fa5_a5a5, // signalling NaN with payload
        0xff80_0001, // -signalling NaN
        0x0000_0001, // min subnormal
        0x8000_0001, // -min subnormal
        0x007f_ffff, // max subnormal
        0x807f_ffff, // -max subnormal
        0x0080_0000, // min normal
        0x8080_0000, // -min normal
        0x7f7f_ffff, // max finite
        0xff7f_ffff, // -max finite
        0x3f80_0000, // 1
        0xbf80_0000, // -1
    ]
}

/// `x` moved `steps` representable `f32`s up (positive) or down (negative),
/// through zero (+0 and -0 count as one point) and stopping at ±inf; `None`
/// for a NaN.
pub fn f32_step(x: f32, steps: i32) -> Option<f32> {
    if x.is_nan() {
        return None;
    }
    const INF: i64 = 0x7f80_0000;
    let bits = x.to_bits();
    let magnitude = i64::from(bits & 0x7fff_ffff);
    let ordered = if bits >> 31 == 1 {
        -magnitude
    } else {
        magnitude
    };
    let moved = (ordered + i64::from(steps)).clamp(-INF, INF);
    let out = if moved < 0 {
        0x8000_0000 | (-moved) as u32
    } else {
        moved as u32
    };
    Some(f32::from_bits(out))
}

/// Every boundary and its neighbours `1..=ulps` steps either side
/// ([`f32_step`]), as bits, in order, without duplicates next to each other.
pub fn f32_neighbours(boundaries: &[f32], ulps: u32) -> Vec<u32> {
    let ulps = ulps.min(1 << 20) as i32;
    let mut out = Vec::with_capacity(boundaries.len() * (2 * ulps as usize + 1));
    for &b in boundaries {
        if b.is_nan() {
            out.push(b.to_bits());
            continue;
        }
        for k in -ulps..=ulps {
            if let Some(v) = f32_step(b, k) {
                if out.last() != Some(&v.to_bits()) {
                    out.push(v.to_bits());
                }
            }
        }
    }
    out
}

/// `count` random subnormal `f32`s (both signs, mantissa never 0), as bits.
pub fn f32_subnormals(rng: &mut SplitMix64, count: usize) -> Vec<u32> {
    (0..count)
        .map(|_| {
            let r = rng.next_u32();
            let mantissa = (r & 0x007f_ffff).max(1);
            (r & 0x8000_0000) | mantissa
        })
        .collect()
}

/// How many elements of type `T` to skip from `ptr` to reach a multiple of
/// `align` bytes (0 when already aligned, or when it cannot be reached).
pub fn align_up_elements<T>(ptr: *const T, align: usize) -> usize {
    match ptr.align_offset(align) {
        usize::MAX => 0,
        n => n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // First outputs for seed 1234567 of the published C implementation.
        let mut r = SplitMix64::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
        assert_eq!(r.next_u64(), 9_817_491_932_198_370_423);
        let mut s = SplitMix64::new(7);
        assert!((0..1000).all(|_| s.below(10) < 10));
        assert_eq!(s.below(0), 0);
        assert!((0..1000).all(|_| (0.0..1.0).contains(&s.unit_f64())));
    }

    #[test]
    fn steps_cross_zero_and_stop_at_infinity() {
        assert_eq!(f32_step(1.0, 1), Some(f32::from_bits(0x3f80_0001)));
        assert_eq!(f32_step(1.0, -1), Some(f32::from_bits(0x3f7f_ffff)));
        assert_eq!(f32_step(0.0, -1), Some(f32::from_bits(0x8000_0001)));
        assert_eq!(f32_step(-0.0, 1), Some(f32::from_bits(0x0000_0001)));
        assert_eq!(f32_step(f32::MAX, 3), Some(f32::INFINITY));
        assert_eq!(f32_step(f32::NEG_INFINITY, -1), Some(f32::NEG_INFINITY));
        assert_eq!(f32_step(f32::NAN, 1), None);
    }

    #[test]
    fn neighbours_surround_each_boundary() {
        let n = f32_neighbours(&[88.72284], 3);
        assert_eq!(n.len(), 7);
        assert_eq!(n[3], 88.72284f32.to_bits());
        assert_eq!(n[0] + 3, n[3]);
        assert_eq!(n[6], n[3] + 3);
        let z = f32_neighbours(&[0.0], 1);
        assert_eq!(z, vec![0x8000_0001, 0, 1]);
    }

    #[test]
    fn specials_and_subnormals_are_what_they_say() {
        let s = f32_special_values();
        assert_eq!(s.iter().filter(|b| f32::from_bits(**b).is_nan()).count(), 7);
        let mut r = SplitMix64::new(3);
        for b in f32_subnormals(&mut r, 100) {
            assert!(f32::from_bits(b).is_subnormal());
        }
    }
}
