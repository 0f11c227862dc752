//! Portable binary64 `ln`, `exp` and `sin`/`cos` for plan-time tables.
//!
//! The RoPE table must hold the same bits on every host, and libm's
//! functions differ between C libraries (and between builds of one, with
//! and without fused multiply-add). These use only IEEE binary64 `+ − × ÷`,
//! `round` and bit manipulation, all exactly specified (Rust never fuses
//! them), so they give identical bits everywhere. Accuracy, measured in
//! this module's tests against the host's libm: a few ulp of binary64,
//! far below the f32 the tables are rounded to.

/// `ln 2` split: the high part has 32 significant bits, so `k · LN2_HI`
/// is exact for `|k| < 2^21` (fdlibm's split).
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
/// `ln 2 - LN2_HI`, rounded.
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
/// `1 / ln 2`, rounded (only chooses `k`; any nearby value is as good).
const INV_LN2: f64 = f64::from_bits(0x3ff7_1547_652b_82fe);
/// `π/2` high part with 33 significant bits: `k · PIO2_HI` is exact for
/// `|k| < 2^20` (fdlibm's `pio2_1`).
const PIO2_HI: f64 = f64::from_bits(0x3ff9_21fb_5440_0000);
/// `π/2 - PIO2_HI`, rounded (fdlibm's `pio2_1t`).
const PIO2_LO: f64 = f64::from_bits(0x3dd0_b461_1a62_6331);
/// `2/π`, rounded (only chooses the quadrant).
const TWO_OVER_PI: f64 = f64::from_bits(0x3fe4_5f30_6dc9_c883);

/// Largest argument [`sin_cos`] reduces accurately.
pub const SIN_COS_MAX: f64 = 1_000_000.0;

/// `ln x` for finite normal `x > 0` (others give NaN).
pub fn ln(x: f64) -> f64 {
    if !(x.is_finite() && x >= f64::MIN_POSITIVE) {
        return f64::NAN;
    }
    let bits = x.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    // m in [1, 2), then in [sqrt(1/2), sqrt(2)] (halving is exact).
    let mut m = f64::from_bits((bits & ((1 << 52) - 1)) | (1023 << 52));
    if m > std::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    // ln m = 2 atanh(s), s = (m - 1)/(m + 1), |s| < 0.1716:
    // 2s (1 + s²/3 + s⁴/5 + …), 20 terms (s^40/41 < 2^-100).
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut p = 0.0;
    for k in (1..20).rev() {
        p = p * s2 + 1.0 / (2 * k + 1) as f64;
    }
    let lnm = 2.0 * s + 2.0 * s * (s2 * p);
    let e = e as f64;
    e * LN2_HI + (e * LN2_LO + lnm)
}

/// `e^y` for `|y| < 700` (others give NaN).
pub fn exp(y: f64) -> f64 {
    if y.is_nan() || y.abs() >= 700.0 {
        return f64::NAN;
    }
    let k = (y * INV_LN2).round();
    let r = (y - k * LN2_HI) - k * LN2_LO;
    // Taylor to r^20/20! (|r| < 0.35: the next term is below 2^-100).
    let mut p = 1.0;
    for n in (1..=20).rev() {
        p = 1.0 + p * r / n as f64;
    }
    p * f64::from_bits(((k as i64 + 1023) as u64) << 52)
}

/// `(sin θ, cos θ)` for `0 <= θ <= SIN_COS_MAX` (others give NaN).
pub fn sin_cos(theta: f64) -> (f64, f64) {
    if !(0.0..=SIN_COS_MAX).contains(&theta) {
        return (f64::NAN, f64::NAN);
    }
    let k = (theta * TWO_OVER_PI).round();
    // θ - k·PIO2_HI is exact (the product is exact and the two are within
    // a factor of two of each other, or k = 0).
    let r = (theta - k * PIO2_HI) - k * PIO2_LO;
    let r2 = r * r;
    // |r| <= π/4 + tiny: Taylor to r^27 / r^26 (next terms below 2^-90).
    let mut s = 0.0;
    let mut c = 0.0;
    for n in (1..=13).rev() {
        // sin: Σ (-1)^n r^(2n+1)/(2n+1)!, cos: Σ (-1)^n r^(2n)/(2n)!.
        s = 1.0 - s * r2 / ((2 * n) * (2 * n + 1)) as f64;
        c = 1.0 - c * r2 / ((2 * n - 1) * (2 * n)) as f64;
    }
    let s = r * s;
    match (k as i64) & 3 {
        0 => (s, c),
        1 => (c, -s),
        2 => (-s, -c),
        _ => (-c, s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f64, b: f64) -> u64 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs()
    }

    fn close(a: f64, b: f64, abs: f64) -> bool {
        (a - b).abs() <= abs
    }

    #[test]
    fn ln_and_exp_agree_with_libm_to_a_few_ulp() {
        for x in [1.5f64, 2.0, 10.0, 1e4, 1e5, 5e5, 1e6, 0.3, 123.456, 7.0e-3] {
            assert!(ulps(ln(x), x.ln()) <= 4, "ln {x}: {} vs {}", ln(x), x.ln());
        }
        let mut y = -30.0;
        while y < 30.0 {
            assert!(
                ulps(exp(y), y.exp()) <= 4,
                "exp {y}: {} vs {}",
                exp(y),
                y.exp()
            );
            y += 0.0137;
        }
        assert_eq!(exp(0.0), 1.0);
        assert!(ln(-1.0).is_nan() && exp(1e4).is_nan());
    }

    #[test]
    fn sin_cos_agree_with_libm() {
        let mut t = 0.0;
        while t < SIN_COS_MAX {
            let (s, c) = sin_cos(t);
            // Absolute error: the reduction's, a few 1e-16 near π/2 k.
            assert!(close(s, t.sin(), 4e-16 + t * 1e-26), "sin {t}");
            assert!(close(c, t.cos(), 4e-16 + t * 1e-26), "cos {t}");
            t = t * 1.01 + 0.001;
        }
        assert_eq!(sin_cos(0.0), (0.0, 1.0));
        assert!(sin_cos(-1.0).0.is_nan());
    }

    #[test]
    fn f32_rounding_matches_libm_on_a_rope_grid() {
        // The table's values: θ = p · base^(-2i/64). Count f32 roundings
        // that differ from libm's (possible only within ~2^-50 of a tie).
        let mut differ = 0;
        let mut total = 0;
        for p in (0..4096).step_by(7) {
            for i in 0..32 {
                let inv = exp(-(2.0 * i as f64 / 64.0) * ln(10000.0));
                let t = p as f64 * inv;
                let (s, c) = sin_cos(t);
                let want = 10000f64.powf(-(2.0 * i as f64) / 64.0) * p as f64;
                total += 2;
                differ += usize::from(s as f32 != want.sin() as f32);
                differ += usize::from(c as f32 != want.cos() as f32);
            }
        }
        assert!(differ * 100_000 <= total, "{differ} of {total} differ");
    }
}
