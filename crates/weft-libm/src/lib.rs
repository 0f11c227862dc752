//! weft-libm: binary32 exp and erf, correctly rounded, as one set of steps.
//!
//! One job: define the algorithms (generic over [`reference::Lanes`], so
//! the scalar reference, the Cranelift arm and generated kernels run the
//! same binary64 operations in the same order), hold their constants as
//! bit patterns ([`table`], read by kernels through [`ELEMENTWISE_TABLE`]),
//! and emit them into Cranelift functions ([`clif`]).
//!
//! Invariants: every step is one IEEE binary64 operation rounded to
//! nearest, no FMA; whatever instantiates the steps gets the reference's
//! bits. The elementwise family (`weft-elementwise`) and the loop-nest
//! generator (`weft-loopnest`) both build on this crate; neither depends on
//! the other.
//!
//! # exp algorithm (binary64 arithmetic, round to nearest, **no FMA**)
//!
//! All constants are bit patterns in [`table`]. Steps, per lane, `x` the
//! input widened to binary64 (exact):
//!
//! 1. `xd = min(max(x, -150), 100)` (NaN propagates). Outside the clamp the
//!    correctly rounded result is `+0` resp. `+inf` anyway; inside it
//!    `|k| < 2^14`.
//! 2. `z = xd * INVLN2N` (`64/ln2`), `t = z + SHIFT` (`SHIFT = 1.5*2^52`),
//!    `kd = t - SHIFT` (= `round(z)`, ties to even), `ki = bits(t)`.
//! 3. `r_hi = xd - kd*L_HI`: exact (`L_HI` has 39 significant bits so the
//!    product is exact; the difference is exact because both operands are
//!    multiples of `2^-60` and `|r_hi| < 2^-7.5`).
//!    `r = r_hi - kd*L_LO` (`L_HI + L_LO ≈ ln2/64`); `|r| <= 0.00542`.
//! 4. `j = ki & 63`; `s = from_bits(TAB_HI_ADJ[j] + (ki << 46))` where
//!    `TAB_HI_ADJ[j] = bits(EXP_T_HI[j]) - (j << 46)`: `s = 2^(k>>6) *
//!    EXP_T_HI[j]` exactly, with no shift of a signed value.
//! 5. Horner: `q = C5*r; q += C4; q *= r; q += C3; q *= r; q += C2;
//!    p = r + (r*r)*q` (each step one rounded operation, in this order).
//! 6. `y = s + s*p`.
//! 7. Rounding test: `d = y * 2^-51`, `lo = y - d`, `hi = y + d`; if
//!    `f32(lo) == f32(hi)` (bits) the result is `f32(lo)`; otherwise the lane
//!    takes the slow path. (`f32(·)` is IEEE narrowing, which handles the
//!    subnormal range — where the f32 ulp is larger — and overflow to inf.)
//!
//! Error bound of `y` (relative): table rounding `2^-53`; `r` error below
//! `2^-60.4` (absolute, becomes relative through `exp`); Taylor truncation
//! `|r|^6/720 * e^|r| < 2^-54.6`; evaluation of `p` below `2^-60.4`;
//! `s*p` below `2^-60.4`; final addition `2^-53`. Sum below `2^-51.76`. The
//! computed `lo`/`hi` are within `2^-53*y` of `y -/+ 2^-51*y`, so
//! `[lo, hi]` contains `exp(x)` and the test is sound; an f32-rounding
//! boundary closer than about `2^-51` (relative) sends the lane to the slow
//! path — about 1 input in 2^25.
//!
//! Slow path (scalar, double-double, still no FMA; products by Dekker's
//! splitting with `2^27+1`): steps 1–3 as above; `r = r_hi - kd*(L_LO +
//! L_LO2)` as a double-double (`two_prod(kd, L_LO)`, `two_sum`);
//! `h = C6 + r*(C7 + r*(C8 + r*(C9 + r*C10)))` in binary64 on `r.hi`;
//! then `acc = h`, and for `n = 5, 4, …, 0`: `acc = dd_add(dd_mul(acc, r),
//! C_n)` with `C_n` as double-doubles; `y = dd_mul(T_hi[j] + T_lo[j], acc)`,
//! times `2^(k>>6)` (exact). Relative error below `2^-95` (truncation
//! `2^-107.7`, each dd operation below `2^-102`); the test uses `2^-90`.
//! Rounding: [`reference::round_dd_to_f32`] (exact midpoints). Inputs the
//! slow path does not decide would be counted by `cargo xtask exhaustive
//! exp`; none exist.
//!
//! Measured over all 2^32 inputs (`cargo xtask exhaustive exp`): exactly
//! three take the slow path (bits `0xbae0e25c`, `0xbbf0edf1`,
//! `0xc16912cd`), none is undecided, and every result equals MPFR's
//! correctly rounded value.
//!
//! # erf algorithm
//!
//! After CORE-MATH's `cr_erff` (Alexei Sibidanov, 2022, MIT licence; the
//! polynomial coefficients are reproduced as bit patterns in
//! [`table::ERF_C`]): binary64, no FMA, `z = |x|`:
//!
//! - `z > 0x1.f5a888p+1` (largest f32 whose erf does not round to 1) →
//!   `copysign(1, x)`; NaN → NaN.
//! - `z < 0.4375` → `x * P(x^2)`, `P` of degree 7 in `x^2` (coefficients
//!   [`table::ERF_SMALL`]), Estrin: `c0 = P0 + z2*P1`, `c2 = P2 + z2*P3`,
//!   `c4 = P4 + z2*P5`, `c6 = P6 + z2*P7`, `c0 += z4*c2`, `c4 += z4*c6`,
//!   `c0 += z8*c4` with `z2 = x*x`, `z4 = z2*z2`, `z8 = z4*z4`.
//! - otherwise `v = floor(16*z)`, `i = v - 7` (0..56), `w = (z - 1/32) -
//!   v/16`, the same Estrin shape in `w` (not `w^2`) with the eight
//!   coefficients `ERF_C[i]`, result `copysign(c0, x)`.
//! - Then narrow to f32 once. Exhaustive checking (`cargo xtask exhaustive
//!   erf`) is the proof of correct rounding; inputs it finds misrounded are
//!   listed in [`table::ERF_EXCEPTIONS`]. With this evaluation order and no
//!   FMA it finds none over all 2^32 inputs, so the list is empty and
//!   erf has no slow path and no per-lane mask.

pub mod clif;
pub mod reference;

/// The table every elementwise kernel reads (through `ElementwiseArgs::table`).
pub static ELEMENTWISE_TABLE: [u64; table::LEN] = table::build();

/// Constants and tables of the algorithms, as bit patterns.
pub mod table {
    /// Clamp of exp's argument, low end.
    pub const EXP_X_MIN: f64 = -150.0;
    /// Clamp of exp's argument, high end.
    pub const EXP_X_MAX: f64 = 100.0;
    /// `1.5 * 2^52`: adding it rounds to an integer kept in the low bits.
    pub const EXP_SHIFT: f64 = 6_755_399_441_055_744.0;
    /// `64/ln2` rounded (92.33248261689366).
    pub const EXP_INVLN2N: u64 = 0x40571547652b82fe;
    /// `ln2/64` rounded to 39 significant bits.
    pub const EXP_L_HI: u64 = 0x3f862e42fefa4000;
    /// `ln2/64 - L_HI` rounded.
    pub const EXP_L_LO: u64 = 0xbce8432a1b0e2634;
    /// `ln2/64 - L_HI - L_LO` rounded.
    pub const EXP_L_LO2: u64 = 0x392f97b57a079a19;
    /// The fast path's error bound used by the rounding test (`2^-51`).
    pub const EXP_FAST_ERR: f64 = 4.440_892_098_500_626e-16;
    /// The slow path's error bound used by its rounding test (`2^-90`).
    pub const EXP_SLOW_ERR: f64 = 8.077_935_669_463_161e-28;
    /// Taylor coefficients `1/n!` as double-doubles `(hi, lo)` bit
    /// patterns (MPFR-generated); the fast path uses the `hi` of C3–C5.
    pub const EXP_C: [(u64, u64); 11] = [
        (0x3ff0000000000000, 0),                  // C0 = 1
        (0x3ff0000000000000, 0),                  // C1 = 1
        (0x3fe0000000000000, 0),                  // C2 = 1/2
        (0x3fc5555555555555, 0x3c65555555555555), // C3 = 1/3!
        (0x3fa5555555555555, 0x3c45555555555555), // C4 = 1/4!
        (0x3f81111111111111, 0x3c01111111111111), // C5 = 1/5!
        (0x3f56c16c16c16c17, 0xbbef49f49f49f49f), // C6 = 1/6!
        (0x3f2a01a01a01a01a, 0x3b6a01a01a01a01a), // C7 = 1/7!
        (0x3efa01a01a01a01a, 0x3b3a01a01a01a01a), // C8 = 1/8!
        (0x3ec71de3a556c734, 0xbb6c154f8ddc6c00), // C9 = 1/9!
        (0x3e927e4fb7789f5c, 0x3b3cbbc05b4fa99a), // C10 = 1/10!
    ];
    /// `2^(j/64)` rounded to binary64 (bit patterns), j = 0..64 (MPFR-generated).
    pub const EXP_T_HI: [u64; 64] = [
        0x3ff0000000000000,
        0x3ff02c9a3e778061,
        0x3ff059b0d3158574,
        0x3ff0874518759bc8,
        0x3ff0b5586cf9890f,
        0x3ff0e3ec32d3d1a2,
        0x3ff11301d0125b51,
        0x3ff1429aaea92de0,
        0x3ff172b83c7d517b,
        0x3ff1a35beb6fcb75,
        0x3ff1d4873168b9aa,
        0x3ff2063b88628cd6,
        0x3ff2387a6e756238,
        0x3ff26b4565e27cdd,
        0x3ff29e9df51fdee1,
        0x3ff2d285a6e4030b,
        0x3ff306fe0a31b715,
        0x3ff33c08b26416ff,
        0x3ff371a7373aa9cb,
        0x3ff3a7db34e59ff7,
        0x3ff3dea64c123422,
        0x3ff4160a21f72e2a,
        0x3ff44e086061892d,
        0x3ff486a2b5c13cd0,
        0x3ff4bfdad5362a27,
        0x3ff4f9b2769d2ca7,
        0x3ff5342b569d4f82,
        0x3ff56f4736b527da,
        0x3ff5ab07dd485429,
        0x3ff5e76f15ad2148,
        0x3ff6247eb03a5585,
        0x3ff6623882552225,
        0x3ff6a09e667f3bcd,
        0x3ff6dfb23c651a2f,
        0x3ff71f75e8ec5f74,
        0x3ff75feb564267c9,
        0x3ff7a11473eb0187,
        0x3ff7e2f336cf4e62,
        0x3ff82589994cce13,
        0x3ff868d99b4492ed,
        0x3ff8ace5422aa0db,
        0x3ff8f1ae99157736,
        0x3ff93737b0cdc5e5,
        0x3ff97d829fde4e50,
        0x3ff9c49182a3f090,
        0x3ffa0c667b5de565,
        0x3ffa5503b23e255d,
        0x3ffa9e6b5579fdbf,
        0x3ffae89f995ad3ad,
        0x3ffb33a2b84f15fb,
        0x3ffb7f76f2fb5e47,
        0x3ffbcc1e904bc1d2,
        0x3ffc199bdd85529c,
        0x3ffc67f12e57d14b,
        0x3ffcb720dcef9069,
        0x3ffd072d4a07897c,
        0x3ffd5818dcfba487,
        0x3ffda9e603db3285,
        0x3ffdfc97337b9b5f,
        0x3ffe502ee78b3ff6,
        0x3ffea4afa2a490da,
        0x3ffefa1bee615a27,
        0x3fff50765b6e4540,
        0x3fffa7c1819e90d8,
    ];
    /// `2^(j/64) - EXP_T_HI[j]` rounded to binary64 (bit patterns).
    pub const EXP_T_LO: [u64; 64] = [
        0x0000000000000000,
        0xbc719083535b085d,
        0x3c8d73e2a475b465,
        0x3c6186be4bb284ff,
        0x3c98a62e4adc610b,
        0x3c403a1727c57b53,
        0xbc96c51039449b3a,
        0xbc932fbf9af1369e,
        0xbc819041b9d78a76,
        0x3c8e5b4c7b4968e4,
        0x3c9e016e00a2643c,
        0x3c8dc775814a8495,
        0x3c99b07eb6c70573,
        0x3c82bd339940e9d9,
        0x3c8612e8afad1255,
        0x3c90024754db41d5,
        0x3c86f46ad23182e4,
        0x3c932721843659a6,
        0xbc963aeabf42eae2,
        0xbc75e436d661f5e3,
        0x3c8ada0911f09ebc,
        0xbc5ef3691c309278,
        0x3c489b7a04ef80d0,
        0x3c73c1a3b69062f0,
        0x3c7d4397afec42e2,
        0xbc94b309d25957e3,
        0xbc807abe1db13cad,
        0x3c99bb2c011d93ad,
        0x3c96324c054647ad,
        0x3c9ba6f93080e65e,
        0xbc9383c17e40b497,
        0xbc9bb60987591c34,
        0xbc9bdd3413b26456,
        0xbc6bbe3a683c88ab,
        0xbc816e4786887a99,
        0xbc90245957316dd3,
        0xbc841577ee04992f,
        0x3c705d02ba15797e,
        0xbc9d4c1dd41532d8,
        0xbc9fc6f89bd4f6ba,
        0x3c96e9f156864b27,
        0x3c85cc13a2e3976c,
        0xbc675fc781b57ebc,
        0xbc9d185b7c1b85d1,
        0x3c7c7c46b071f2be,
        0xbc9359495d1cd533,
        0xbc9d2f6edb8d41e1,
        0x3c90fac90ef7fd31,
        0x3c97a1cd345dcc81,
        0xbc62805e3084d708,
        0xbc75584f7e54ac3b,
        0x3c823dd07a2d9e84,
        0x3c811065895048dd,
        0x3c92884dff483cad,
        0x3c7503cbd1e949db,
        0xbc9cbc3743797a9c,
        0x3c82ed02d75b3707,
        0x3c9c2300696db532,
        0xbc91a5cd4f184b5c,
        0x3c839e8980a9cc8f,
        0xbc9e9c23179c2893,
        0x3c9dc7f486a4b6b0,
        0x3c99d3e12dd8a18b,
        0x3c874853f3a5931e,
    ];
    /// Offset of `TAB_HI_ADJ` (`bits(EXP_T_HI[j]) - (j << 46)`) in the table.
    pub const EXP_TAB_HI_ADJ: usize = 0;
    /// Offset of `EXP_T_LO` in the table.
    pub const EXP_TAB_LO: usize = 64;
    /// Offset of `ERF_C` (row `i` at `ERF_TAB + 8*i`) in the table.
    pub const ERF_TAB: usize = 128;
    /// Total length of the table.
    pub const LEN: usize = ERF_TAB + 8 * 64;

    pub use super::erf_tables::{ERF_C, ERF_EXCEPTIONS, ERF_SMALL, ERF_Z_MAX, ERF_Z_SMALL};

    /// Build the table: `TAB_HI_ADJ`, `EXP_T_LO`, then `ERF_C` padded to 64
    /// rows of zeros (an index is masked to 6 bits before it is used).
    pub const fn build() -> [u64; LEN] {
        let mut t = [0u64; LEN];
        let mut j = 0;
        while j < 64 {
            t[EXP_TAB_HI_ADJ + j] = EXP_T_HI[j].wrapping_sub((j as u64) << 46);
            t[EXP_TAB_LO + j] = EXP_T_LO[j];
            j += 1;
        }
        let mut i = 0;
        while i < ERF_C.len() {
            let mut k = 0;
            while k < 8 {
                t[ERF_TAB + 8 * i + k] = ERF_C[i][k];
                k += 1;
            }
            i += 1;
        }
        t
    }
}

mod erf_tables;
