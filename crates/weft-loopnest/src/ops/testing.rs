//! Test inputs that hunt for differences, and bit comparison.

/// Deterministic xorshift.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Roughly normal-sized values in [-4, 4).
    pub(crate) fn normal(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0
    }
}

/// Values that trip rounding and special cases.
pub(crate) const SPECIALS: [f32; 18] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    f32::MAX,
    f32::MIN,
    f32::MIN_POSITIVE,
    -f32::MIN_POSITIVE,
    1e-45,
    -1e-45,
    1e-40,
    3.0e38,
    1e-20,
    88.72284,
    -103.97209,
];

/// `n` values: mostly ordinary (spread over many binades), with specials,
/// subnormals, zeros and huge/tiny values mixed in at random places.
pub(crate) fn hunting_f32s(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let r = rng.next_u64();
            match r % 16 {
                0 => SPECIALS[(r >> 8) as usize % SPECIALS.len()],
                1 => f32::from_bits((r >> 8) as u32 & 0x807f_ffff), // ±subnormal
                2 => f32::from_bits((r >> 16) as u32),              // any pattern
                3 => rng.normal() * 1e30,
                4 => rng.normal() * 1e-30,
                _ => rng.normal(),
            }
        })
        .collect()
}

/// Whether two f32 are the same output: equal bits, or both NaN.
pub(crate) fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Panic at the first index where `got` and `want` differ (NaN by class).
pub(crate) fn assert_same(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            same(*g, *w),
            "{what}: index {i}: got {g:e} ({:#010x}), want {w:e} ({:#010x})",
            g.to_bits(),
            w.to_bits()
        );
    }
}
