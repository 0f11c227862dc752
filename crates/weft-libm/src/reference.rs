//! The scalar references: `exp_f32` and `erf_f32`, correctly rounded.
//!
//! The steps are written once, generic over [`Lanes`] (a tiny arithmetic
//! vocabulary: f64 add/sub/mul/min/max, 64-bit integer add/and/shift, bit
//! casts, table loads). The reference instantiates them with plain `f64`
//! ([`Scalar`]); the arm (`arm.rs`) instantiates the very same functions with
//! Cranelift values, scalar `f64` or `f64x2` lanes. So the reference and the
//! arm perform the same IEEE operations in the same order; the algorithm
//! contract is in the parent module's documentation.

use super::table;
use super::ELEMENTWISE_TABLE;

/// The arithmetic vocabulary the elementwise algorithms are written in.
///
/// `F` is one or more binary64 lanes, `I` the same lanes as 64-bit
/// integers. Every float operation is one IEEE binary64 operation with
/// round-to-nearest-even; `fmin`/`fmax` propagate NaN.
pub trait Lanes {
    /// Binary64 lane(s).
    type F: Copy;
    /// 64-bit integer lane(s).
    type I: Copy;
    /// A binary64 constant in every lane.
    fn c(&mut self, v: f64) -> Self::F;
    /// An integer constant in every lane.
    fn ic(&mut self, v: i64) -> Self::I;
    /// `a + b`.
    fn add(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// `a - b`.
    fn sub(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// `a * b`.
    fn mul(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// `min(a, b)`, NaN if either is NaN.
    fn fmin(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// `max(a, b)`, NaN if either is NaN.
    fn fmax(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// `|a|`.
    fn abs(&mut self, a: Self::F) -> Self::F;
    /// Reinterpret binary64 bits as an integer.
    fn bits(&mut self, a: Self::F) -> Self::I;
    /// Reinterpret an integer as binary64 bits.
    #[allow(clippy::wrong_self_convention)] // named after `f64::from_bits`
    fn from_bits(&mut self, a: Self::I) -> Self::F;
    /// Wrapping `a + b`.
    fn iadd(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// `a & m`.
    fn band(&mut self, a: Self::I, m: i64) -> Self::I;
    /// `a << s` (logical, `s < 64`).
    fn shl(&mut self, a: Self::I, s: u8) -> Self::I;
    /// `a >> s` (logical, `s < 64`).
    fn ushr(&mut self, a: Self::I, s: u8) -> Self::I;
    /// `floor(a)`.
    fn floor(&mut self, a: Self::F) -> Self::F;
    /// Per lane: `if a < b { t } else { e }` (false when either is NaN).
    fn select_lt(&mut self, a: Self::F, b: Self::F, t: Self::F, e: Self::F) -> Self::F;
    /// `ELEMENTWISE_TABLE[base + j]` per lane (`j` in range by construction).
    fn tab(&mut self, base: usize, j: Self::I) -> Self::I;
}

/// Plain scalar binary64: the reference instantiation of [`Lanes`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Scalar;

impl Lanes for Scalar {
    type F = f64;
    type I = u64;
    #[inline(always)]
    fn c(&mut self, v: f64) -> f64 {
        v
    }
    #[inline(always)]
    fn ic(&mut self, v: i64) -> u64 {
        v as u64
    }
    #[inline(always)]
    fn add(&mut self, a: f64, b: f64) -> f64 {
        a + b
    }
    #[inline(always)]
    fn sub(&mut self, a: f64, b: f64) -> f64 {
        a - b
    }
    #[inline(always)]
    fn mul(&mut self, a: f64, b: f64) -> f64 {
        a * b
    }
    #[inline(always)]
    fn fmin(&mut self, a: f64, b: f64) -> f64 {
        if a.is_nan() || b.is_nan() {
            a + b
        } else {
            a.min(b)
        }
    }
    #[inline(always)]
    fn fmax(&mut self, a: f64, b: f64) -> f64 {
        if a.is_nan() || b.is_nan() {
            a + b
        } else {
            a.max(b)
        }
    }
    #[inline(always)]
    fn abs(&mut self, a: f64) -> f64 {
        a.abs()
    }
    #[inline(always)]
    fn bits(&mut self, a: f64) -> u64 {
        a.to_bits()
    }
    #[inline(always)]
    fn from_bits(&mut self, a: u64) -> f64 {
        f64::from_bits(a)
    }
    #[inline(always)]
    fn iadd(&mut self, a: u64, b: u64) -> u64 {
        a.wrapping_add(b)
    }
    #[inline(always)]
    fn band(&mut self, a: u64, m: i64) -> u64 {
        a & (m as u64)
    }
    #[inline(always)]
    fn shl(&mut self, a: u64, s: u8) -> u64 {
        a << s
    }
    #[inline(always)]
    fn ushr(&mut self, a: u64, s: u8) -> u64 {
        a >> s
    }
    #[inline(always)]
    fn floor(&mut self, a: f64) -> f64 {
        a.floor()
    }
    #[inline(always)]
    fn select_lt(&mut self, a: f64, b: f64, t: f64, e: f64) -> f64 {
        if a < b {
            t
        } else {
            e
        }
    }
    #[inline(always)]
    fn tab(&mut self, base: usize, j: u64) -> u64 {
        // `j` is masked to the table's size by every caller; `get` keeps a
        // broken caller from panicking (it would read NaN instead).
        ELEMENTWISE_TABLE
            .get(base + j as usize)
            .copied()
            .unwrap_or(u64::MAX)
    }
}

/// A double-double: `hi + lo` with `|lo| <= ulp(hi)/2`.
#[derive(Clone, Copy, Debug)]
pub struct Dd<F> {
    /// Leading part.
    pub hi: F,
    /// Trailing part.
    pub lo: F,
}

/// Knuth's two-sum: `s + e == a + b` exactly.
#[inline(always)]
pub fn two_sum<L: Lanes>(l: &mut L, a: L::F, b: L::F) -> Dd<L::F> {
    let s = l.add(a, b);
    let bb = l.sub(s, a);
    let t1 = l.sub(s, bb);
    let t2 = l.sub(a, t1);
    let t3 = l.sub(b, bb);
    let e = l.add(t2, t3);
    Dd { hi: s, lo: e }
}

/// Dekker's fast two-sum (`|a| >= |b|` or `a == 0`): `s + e == a + b`.
#[inline(always)]
pub fn fast_two_sum<L: Lanes>(l: &mut L, a: L::F, b: L::F) -> Dd<L::F> {
    let s = l.add(a, b);
    let t = l.sub(s, a);
    let e = l.sub(b, t);
    Dd { hi: s, lo: e }
}

/// Veltkamp split: `a == hi + lo`, each with at most 26 significant bits.
#[inline(always)]
fn split<L: Lanes>(l: &mut L, a: L::F) -> Dd<L::F> {
    let k = l.c(134_217_729.0); // 2^27 + 1
    let c = l.mul(k, a);
    let t = l.sub(c, a);
    let hi = l.sub(c, t);
    let lo = l.sub(a, hi);
    Dd { hi, lo }
}

/// Dekker's two-product without FMA: `p + e == a * b` exactly (no
/// overflow or underflow in the ranges used here).
#[inline(always)]
pub fn two_prod<L: Lanes>(l: &mut L, a: L::F, b: L::F) -> Dd<L::F> {
    let p = l.mul(a, b);
    let sa = split(l, a);
    let sb = split(l, b);
    let hh = l.mul(sa.hi, sb.hi);
    let t = l.sub(hh, p);
    let hl = l.mul(sa.hi, sb.lo);
    let t = l.add(t, hl);
    let lh = l.mul(sa.lo, sb.hi);
    let t = l.add(t, lh);
    let ll = l.mul(sa.lo, sb.lo);
    let e = l.add(t, ll);
    Dd { hi: p, lo: e }
}

/// Double-double product (relative error below 2^-102).
#[inline(always)]
pub fn dd_mul<L: Lanes>(l: &mut L, a: Dd<L::F>, b: Dd<L::F>) -> Dd<L::F> {
    let p = two_prod(l, a.hi, b.hi);
    let x = l.mul(a.hi, b.lo);
    let y = l.mul(a.lo, b.hi);
    let xy = l.add(x, y);
    let e = l.add(p.lo, xy);
    fast_two_sum(l, p.hi, e)
}

/// Double-double sum (relative error below 2^-102 when no cancellation).
#[inline(always)]
pub fn dd_add<L: Lanes>(l: &mut L, a: Dd<L::F>, b: Dd<L::F>) -> Dd<L::F> {
    let s = two_sum(l, a.hi, b.hi);
    let t = l.add(a.lo, b.lo);
    let e = l.add(s.lo, t);
    fast_two_sum(l, s.hi, e)
}

// ---------------------------------------------------------------- exp ---

/// The shared first steps of exp: clamp, `k = round(x*64/ln2)`, the scale
/// `2^(k/64)` rounded to binary64 and `r_hi = x - k*L_HI` (exact).
pub struct ExpReduced<L: Lanes> {
    /// `round(x * 64/ln2)` as binary64.
    pub kd: L::F,
    /// The bits of `kd + SHIFT`: `k` in the low bits.
    pub ki: L::I,
    /// `x - kd * L_HI`, exact.
    pub r_hi: L::F,
}

/// Steps 1–4 of the exp contract.
#[inline(always)]
pub fn exp_reduce<L: Lanes>(l: &mut L, x: L::F) -> ExpReduced<L> {
    let lo = l.c(table::EXP_X_MIN);
    let hi = l.c(table::EXP_X_MAX);
    let xd = l.fmax(x, lo);
    let xd = l.fmin(xd, hi);
    let inv = l.c(f64::from_bits(table::EXP_INVLN2N));
    let z = l.mul(xd, inv);
    let shift = l.c(table::EXP_SHIFT);
    let t = l.add(z, shift);
    let kd = l.sub(t, shift);
    let ki = l.bits(t);
    let lhi = l.c(f64::from_bits(table::EXP_L_HI));
    let kl = l.mul(kd, lhi);
    let r_hi = l.sub(xd, kl);
    ExpReduced { kd, ki, r_hi }
}

/// The exp fast path: `y ≈ exp(x)` with `|y - exp(x)| <= 2^-51.7 * y`
/// (proof in the module contract); `x` NaN gives NaN.
#[inline(always)]
pub fn exp_fast<L: Lanes>(l: &mut L, x: L::F) -> L::F {
    let ExpReduced { kd, ki, r_hi } = exp_reduce(l, x);
    let llo = l.c(f64::from_bits(table::EXP_L_LO));
    let kl = l.mul(kd, llo);
    let r = l.sub(r_hi, kl);
    // s = 2^(k/64): table bits (pre-biased by -(j << 46)) + (k << 46).
    let j = l.band(ki, 63);
    let tb = l.tab(table::EXP_TAB_HI_ADJ, j);
    let top = l.shl(ki, 46);
    let sb = l.iadd(tb, top);
    let s = l.from_bits(sb);
    // p = r + r^2 * (C2 + r*(C3 + r*(C4 + r*C5)))   (Horner, no FMA)
    let c5 = l.c(f64::from_bits(table::EXP_C[5].0));
    let c4 = l.c(f64::from_bits(table::EXP_C[4].0));
    let c3 = l.c(f64::from_bits(table::EXP_C[3].0));
    let c2 = l.c(0.5);
    let q = l.mul(c5, r);
    let q = l.add(q, c4);
    let q = l.mul(q, r);
    let q = l.add(q, c3);
    let q = l.mul(q, r);
    let q = l.add(q, c2);
    let rr = l.mul(r, r);
    let q = l.mul(rr, q);
    let p = l.add(r, q);
    // y = s + s*p
    let sp = l.mul(s, p);
    l.add(s, sp)
}

/// The rounding-test interval of the fast path: `(y - y*E, y + y*E)` with
/// `E = 2^-51`. Both ends round to the same f32 ⇔ the fast result is the
/// correctly rounded one.
#[inline(always)]
pub fn exp_fast_interval<L: Lanes>(l: &mut L, y: L::F) -> (L::F, L::F) {
    let e = l.c(table::EXP_FAST_ERR);
    let d = l.mul(y, e);
    (l.sub(y, d), l.add(y, d))
}

/// The exp slow path, double-double: `exp(x)` as `hi + lo` with relative
/// error below `2^-95`, for finite `x` (clamped as in the fast path).
#[inline(always)]
pub fn exp_slow<L: Lanes>(l: &mut L, x: L::F) -> Dd<L::F> {
    let ExpReduced { kd, ki, r_hi } = exp_reduce(l, x);
    // r = r_hi - kd*(L_LO + L_LO2) as a double-double.
    let llo = l.c(f64::from_bits(table::EXP_L_LO));
    let a = two_prod(l, kd, llo);
    let na = l.c(0.0);
    let neg_hi = l.sub(na, a.hi);
    let r1 = two_sum(l, r_hi, neg_hi);
    let llo2 = l.c(f64::from_bits(table::EXP_L_LO2));
    let k2 = l.mul(kd, llo2);
    let t = l.add(a.lo, k2);
    let e = l.sub(r1.lo, t);
    let r = fast_two_sum(l, r1.hi, e);
    // h = C6 + r*(C7 + r*(C8 + r*(C9 + r*C10))) in binary64 on r.hi.
    let mut h = l.c(f64::from_bits(table::EXP_C[10].0));
    for n in (6..=9).rev() {
        h = l.mul(h, r.hi);
        let c = l.c(f64::from_bits(table::EXP_C[n].0));
        h = l.add(h, c);
    }
    // acc = ((((h*r + C5)*r + C4)*r + C3)*r + C2)*r + C1)*r + C0 in dd.
    let zero = l.c(0.0);
    let mut acc = Dd { hi: h, lo: zero };
    for n in (0..=5).rev() {
        acc = dd_mul(l, acc, r);
        let (chi, clo) = table::EXP_C[n];
        let c = Dd {
            hi: l.c(f64::from_bits(chi)),
            lo: l.c(f64::from_bits(clo)),
        };
        acc = dd_add(l, acc, c);
    }
    // T = 2^(j/64) as dd; scale 2^e with e = k >> 6, built from bits.
    let j = l.band(ki, 63);
    let tadj = l.tab(table::EXP_TAB_HI_ADJ, j);
    let jsh = l.shl(j, 46);
    let thi = l.iadd(tadj, jsh);
    let tlo = l.tab(table::EXP_TAB_LO, j);
    let tdd = Dd {
        hi: l.from_bits(thi),
        lo: l.from_bits(tlo),
    };
    let y = dd_mul(l, tdd, acc);
    let kk = l.band(ki, !63);
    let kk = l.shl(kk, 46);
    let one = l.ic(0x3ff0_0000_0000_0000);
    let scb = l.iadd(kk, one);
    let sc = l.from_bits(scb);
    Dd {
        hi: l.mul(y.hi, sc),
        lo: l.mul(y.lo, sc),
    }
}

/// The outcome of rounding a double-double to f32 with an error bound.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rounded {
    /// The f32 nearest the true value is proven.
    Proven(f32),
    /// The bound does not decide; the value is the nearest f32 to `hi`.
    Undecided(f32),
}

/// Round `v = hi + lo` (true value within `rel * |hi|` of it, `hi > 0` or
/// NaN) to the nearest f32, deciding with midpoints computed exactly.
///
/// Steps (the arm follows them): `f = f32(hi)`; the midpoints with the
/// f32 neighbours, `mu = (f + up)/2`, `md = (f + down)/2`, in binary64
/// (exact; `up` of `f32::MAX` is `2^128`); `bu = (hi - mu) + lo`,
/// `bd = (hi - md) + lo`; `err = rel * hi`. `bu > err` → up; `bu >= -err`
/// → undecided; `bd < -err` → down; `bd <= err` → undecided; else `f`.
pub fn round_dd_to_f32(hi: f64, lo: f64, rel: f64) -> Rounded {
    let f = hi as f32;
    if !f.is_finite() && !hi.is_finite() {
        return Rounded::Proven(f);
    }
    let b = f.to_bits();
    let up = if b == 0x7f7f_ffff {
        2f64.powi(128)
    } else {
        f64::from(f32::from_bits(b.wrapping_add(1)))
    };
    let down = f64::from(f32::from_bits(b.wrapping_sub(1)));
    let f64v = f64::from(f);
    let mu = (f64v + up) * 0.5;
    let md = (f64v + down) * 0.5;
    let err = rel * hi;
    let bu = (hi - mu) + lo;
    let bd = (hi - md) + lo;
    if bu > err {
        Rounded::Proven(f32::from_bits(b.wrapping_add(1)))
    } else if bu >= -err {
        Rounded::Undecided(f)
    } else if bd < -err {
        Rounded::Proven(f32::from_bits(b.wrapping_sub(1)))
    } else if bd <= err {
        Rounded::Undecided(f)
    } else {
        Rounded::Proven(f)
    }
}

/// How an input was decided (for the exhaustive statistics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// The binary64 fast path's rounding test passed.
    Fast,
    /// The double-double slow path decided.
    Slow,
    /// Neither decided (never observed for exp; the result is the slow
    /// path's nearest f32 to its leading part).
    Undecided,
}

/// `exp(x)` correctly rounded to nearest, with the path that decided.
pub fn exp_f32_path(x: f32) -> (f32, Path) {
    let mut l = Scalar;
    let xd = f64::from(x);
    let y = exp_fast(&mut l, xd);
    let (lo, hi) = exp_fast_interval(&mut l, y);
    let (flo, fhi) = (lo as f32, hi as f32);
    if flo.to_bits() == fhi.to_bits() {
        return (flo, Path::Fast);
    }
    if x.is_nan() {
        return (x + x, Path::Fast);
    }
    let d = exp_slow(&mut l, xd);
    match round_dd_to_f32(d.hi, d.lo, table::EXP_SLOW_ERR) {
        Rounded::Proven(v) => (v, Path::Slow),
        Rounded::Undecided(v) => (v, Path::Undecided),
    }
}

/// `exp(x)` correctly rounded to nearest for every f32 `x`: subnormal
/// results, overflow to `+inf`, underflow to `+0`, `exp(±0) = 1`,
/// `exp(-inf) = +0`, `exp(+inf) = +inf`, NaN in → quiet NaN out.
pub fn exp_f32(x: f32) -> f32 {
    exp_f32_path(x).0
}

// ---------------------------------------------------------------- erf ---

/// Estrin evaluation of `c[0] + c[1] t + … + c[7] t^7` in the fixed order of
/// the contract (`t2 = t*t`, `t4 = t2*t2`).
#[inline(always)]
fn estrin8<L: Lanes>(l: &mut L, c: [L::F; 8], t: L::F, t2: L::F, t4: L::F) -> L::F {
    let m1 = l.mul(t, c[1]);
    let c0 = l.add(c[0], m1);
    let m3 = l.mul(t, c[3]);
    let c2 = l.add(c[2], m3);
    let m5 = l.mul(t, c[5]);
    let c4 = l.add(c[4], m5);
    let m7 = l.mul(t, c[7]);
    let c6 = l.add(c[6], m7);
    let a = l.mul(t2, c2);
    let c0 = l.add(c0, a);
    let b = l.mul(t2, c6);
    let c4 = l.add(c4, b);
    let d = l.mul(t4, c4);
    l.add(c0, d)
}

/// erf in binary64 per the contract (after CORE-MATH's `cr_erff`); the
/// caller narrows to f32 once.
#[inline(always)]
pub fn erf_eval<L: Lanes>(l: &mut L, x: L::F) -> L::F {
    let z = l.abs(x);
    let xb = l.bits(x);
    let sign = l.band(xb, i64::MIN);
    // |x| < 0.4375: x * P(x^2).
    let z2 = l.mul(x, x);
    let z4 = l.mul(z2, z2);
    let z8 = l.mul(z4, z4);
    let p = table::ERF_SMALL.map(f64::from_bits);
    let pc = [
        l.c(p[0]),
        l.c(p[1]),
        l.c(p[2]),
        l.c(p[3]),
        l.c(p[4]),
        l.c(p[5]),
        l.c(p[6]),
        l.c(p[7]),
    ];
    let c0 = estrin8(l, pc, z2, z4, z8);
    let small = l.mul(x, c0);
    // 0.4375 <= |x| <= ERF_Z_MAX: row i = floor(16|x|) - 7.
    let sixteen = l.c(16.0);
    let w16 = l.mul(z, sixteen);
    let v = l.floor(w16);
    let two52 = l.c(4_503_599_627_370_496.0);
    let vt = l.add(v, two52);
    let vb = l.bits(vt);
    let off = l.ic(-(0x4330_0000_0000_0000_i64 + 7));
    let i = l.iadd(vb, off);
    let i = l.band(i, 63);
    let i8 = l.shl(i, 3);
    let mut c = [z; 8];
    for (k, ck) in c.iter_mut().enumerate() {
        let b = l.tab(table::ERF_TAB + k, i8);
        *ck = l.from_bits(b);
    }
    let h = l.c(0.03125);
    let g = l.c(0.0625);
    let w = l.sub(z, h);
    let gv = l.mul(g, v);
    let w = l.sub(w, gv);
    let w2 = l.mul(w, w);
    let w4 = l.mul(w2, w2);
    let c0 = estrin8(l, c, w, w2, w4);
    let cb = l.bits(c0);
    let mb = l.iadd(cb, sign);
    let mid = l.from_bits(mb);
    // Select: small, interval, or ±1 beyond ERF_Z_MAX.
    let zs = l.c(table::ERF_Z_SMALL);
    let r = l.select_lt(z, zs, small, mid);
    let one = l.ic(0x3ff0_0000_0000_0000);
    let ob = l.iadd(one, sign);
    let one = l.from_bits(ob);
    let zm = l.c(table::ERF_Z_MAX);
    l.select_lt(zm, z, one, r)
}

/// `erf(x)` rounded to nearest f32: `erf(±0) = ±0`, `erf(±inf) = ±1`, NaN
/// in → NaN out. Correct rounding for every input is established by
/// `cargo xtask exhaustive erf` (with [`table::ERF_EXCEPTIONS`] applied).
pub fn erf_f32(x: f32) -> f32 {
    let y = erf_eval(&mut Scalar, f64::from(x)) as f32;
    if x.is_nan() {
        return x + x;
    }
    let ax = x.to_bits() & 0x7fff_ffff;
    for &(inp, out) in table::ERF_EXCEPTIONS.iter() {
        if inp == ax {
            return f32::from_bits(out | (x.to_bits() & 0x8000_0000));
        }
    }
    y
}
