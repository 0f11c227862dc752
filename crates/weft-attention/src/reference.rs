//! The scalar references of the attention family: the contract's
//! arithmetic, literally, for the fused kernel and for each stage of the
//! chain. They define the results; arms and twins must match them bit for
//! bit (NaNs by class).
//!
//! The exp is written once, generic over [`F32Ops`] (a tiny vocabulary of
//! binary32 operations): plain `f32` here, Cranelift `f32x4` values in the
//! arms (`arm.rs`, `chain.rs`). The twins spell the same steps in their
//! own instructions, one IEEE operation for one operation of [`exp`].

use std::ops::Range;

use super::exp_consts as k;
use super::{AttentionShape, KvSlice, Layout, BLOCK};

/// binary16 bits widened to f32, exactly (NaNs stay NaNs).
pub fn f16_to_f32(h: u16) -> f32 {
    half::f16::from_bits(h).to_f32()
}

/// The binary32 operations the family's exp is written in. Every float
/// operation is one IEEE operation, round to nearest even.
pub trait F32Ops {
    /// One or more f32 lanes.
    type V: Copy;
    /// A constant (bit pattern) in every lane.
    fn c(&mut self, bits: u32) -> Self::V;
    /// `a - b`.
    fn sub(&mut self, a: Self::V, b: Self::V) -> Self::V;
    /// `a · b`.
    fn mul(&mut self, a: Self::V, b: Self::V) -> Self::V;
    /// `fma(a, b, c)`: `a·b + c`, one rounding.
    fn fma(&mut self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `from_bits((bits(t) << 23) + ONE_BITS)`, integer arithmetic
    /// wrapping in 32 bits: `2^n` when `t = 1.5·2^23 + n`.
    fn pow2(&mut self, t: Self::V) -> Self::V;
    /// `x < lo ? +0 : y` per lane (false for NaN `x`).
    fn zero_below(&mut self, x: Self::V, lo: Self::V, y: Self::V) -> Self::V;
}

/// Plain `f32`: the reference instantiation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scalar;

impl F32Ops for Scalar {
    type V = f32;
    fn c(&mut self, bits: u32) -> f32 {
        f32::from_bits(bits)
    }
    fn sub(&mut self, a: f32, b: f32) -> f32 {
        a - b
    }
    fn mul(&mut self, a: f32, b: f32) -> f32 {
        a * b
    }
    fn fma(&mut self, a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
    fn pow2(&mut self, t: f32) -> f32 {
        f32::from_bits((t.to_bits() << 23).wrapping_add(k::ONE_BITS))
    }
    fn zero_below(&mut self, x: f32, lo: f32, y: f32) -> f32 {
        if x < lo {
            0.0
        } else {
            y
        }
    }
}

/// The family's exp `E(x)` (module docs of the parent), step by step.
pub fn exp<L: F32Ops>(l: &mut L, x: L::V) -> L::V {
    let log2e = l.c(k::LOG2E);
    let magic = l.c(k::MAGIC);
    let t = l.fma(x, log2e, magic);
    let n = l.sub(t, magic);
    let hi = l.c(k::NEG_LN2_HI);
    let r = l.fma(n, hi, x);
    let lo = l.c(k::NEG_LN2_LO);
    let r = l.fma(n, lo, r);
    let mut p = l.c(k::C[7]);
    for ck in k::C[..7].iter().rev() {
        let c = l.c(*ck);
        p = l.fma(p, r, c);
    }
    let s = l.pow2(t);
    let y = l.mul(p, s);
    let lo = l.c(k::LO);
    l.zero_below(x, lo, y)
}

/// `E(x)` on one f32.
pub fn exp_f32(x: f32) -> f32 {
    exp(&mut Scalar, x)
}

/// The contract's fold of 16 lanes:
/// `((a0+a8)+(a4+a12)) + …` pairs, then `(h0+h1)+(h2+h3)`.
pub fn fold16(a: &[f32; BLOCK]) -> f32 {
    let h: [f32; 4] = std::array::from_fn(|t| (a[t] + a[t + 8]) + (a[t + 4] + a[t + 12]));
    (h[0] + h[1]) + (h[2] + h[3])
}

/// The contract's dot product of `q` (d values) with `key(c)`.
pub fn dot(q: &[f32], key: impl Fn(usize) -> f32) -> f32 {
    let mut a = [0.0f32; BLOCK];
    for (c, qc) in q.iter().enumerate() {
        a[c % BLOCK] = qc.mul_add(key(c), a[c % BLOCK]);
    }
    fold16(&a)
}

/// The maximum of the contract (here: left to right, NaN-propagating;
/// any other order gives the same outputs).
fn max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if b > a {
        b
    } else {
        a
    }
}

/// Where one (head, row) pair's operands are.
struct PairView<'a> {
    q: &'a [f32],
    k: KvSlice<'a>,
    v: KvSlice<'a>,
    k_base: usize,
    v_base: usize,
    k_pos: usize,
    v_pos: usize,
}

impl PairView<'_> {
    fn key(&self, j: usize, c: usize) -> f32 {
        self.k
            .get(self.k_base + j * self.k_pos + c)
            .unwrap_or(f32::NAN)
    }
    fn value(&self, j: usize, c: usize) -> f32 {
        self.v
            .get(self.v_base + j * self.v_pos + c)
            .unwrap_or(f32::NAN)
    }
}

/// One (head, row) of the fused contract over `n` keys, into `out`.
fn fused_row(p: &PairView<'_>, n: usize, scale: f32, out: &mut [f32]) {
    let d = out.len();
    let mut m = f32::NEG_INFINITY;
    let mut l = [0.0f32; BLOCK];
    let mut o = vec![0.0f32; d];
    let mut b0 = 0;
    while b0 < n {
        let nb = BLOCK.min(n - b0);
        let s: Vec<f32> = (0..nb)
            .map(|kk| dot(p.q, |c| p.key(b0 + kk, c)) * scale)
            .collect();
        let bm = s.iter().fold(f32::NEG_INFINITY, |a, &x| max(a, x));
        let m_new = max(m, bm);
        let u = if m_new == f32::NEG_INFINITY {
            0.0
        } else {
            m_new
        };
        let alpha = exp_f32(m - u);
        let mut pk = [0.0f32; BLOCK];
        for (kk, sk) in s.iter().enumerate() {
            pk[kk] = exp_f32(sk - u);
        }
        for (lk, pk) in l.iter_mut().zip(pk) {
            *lk = lk.mul_add(alpha, pk);
        }
        for (c, oc) in o.iter_mut().enumerate() {
            let mut acc = *oc * alpha;
            for (kk, pk) in pk.iter().enumerate().take(nb) {
                acc = pk.mul_add(p.value(b0 + kk, c), acc);
            }
            *oc = acc;
        }
        m = m_new;
        b0 += BLOCK;
    }
    let total = fold16(&l);
    for (dst, oc) in out.iter_mut().zip(&o) {
        *dst = oc / total;
    }
}

fn pair_view<'a>(
    shape: &AttentionShape,
    layout: &Layout,
    q: &'a [f32],
    k: KvSlice<'a>,
    v: KvSlice<'a>,
    h: usize,
    i: usize,
) -> PairView<'a> {
    let g = h / shape.group().max(1);
    let q0 = h * layout.q_head + i * layout.q_row;
    PairView {
        q: &q[q0..q0 + shape.d],
        k,
        v,
        k_base: g * layout.k_head,
        v_base: g * layout.v_head,
        k_pos: layout.k_pos,
        v_pos: layout.v_pos,
    }
}

/// The fused contract for the units `units`: writes the outputs of their
/// (head, row) pairs, nothing else. The caller has checked the operands
/// (as [`super::AttentionArgs::new`] does); out-of-range reads give NaN.
pub fn attention(
    shape: &AttentionShape,
    layout: &Layout,
    q: &[f32],
    k: KvSlice<'_>,
    v: KvSlice<'_>,
    o: &mut [f32],
    units: Range<usize>,
) {
    for u in units {
        for (h, i) in shape.unit_pairs(u) {
            let p = pair_view(shape, layout, q, k, v, h, i);
            let o0 = h * layout.o_head + i * layout.o_row;
            fused_row(&p, shape.keys(i), shape.scale, &mut o[o0..o0 + shape.d]);
        }
    }
}

/// The chain's score matrix: row `r = h·lq + i` of `heads·lq` rows, `lk`
/// columns, `s_row` elements apart; only the first `keys(i)` entries of a
/// row are defined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scores {
    /// Rows (`heads · lq`).
    pub rows: usize,
    /// Elements between rows (at least `lk`).
    pub s_row: usize,
}

/// Stage `attention.scores`: `S[r][j] = dot(q_{h,i}, k_{g,j})` (the
/// contract's dot, unscaled) for `j < keys(i)`.
pub fn chain_scores(
    shape: &AttentionShape,
    layout: &Layout,
    q: &[f32],
    k: KvSlice<'_>,
    s: &mut [f32],
    sc: Scores,
) {
    for h in 0..shape.heads {
        for i in 0..shape.lq {
            let p = pair_view(shape, layout, q, k, k, h, i);
            let row = (h * shape.lq + i) * sc.s_row;
            for j in 0..shape.keys(i) {
                s[row + j] = dot(p.q, |c| p.key(j, c));
            }
        }
    }
}

/// The rows' visible counts as the row stages see them.
pub fn row_keys(shape: &AttentionShape, r: usize) -> usize {
    shape.keys(r % shape.lq.max(1))
}

/// Stage `attention.scale`: `S[r][j] = S[r][j] · scale`.
pub fn chain_scale(shape: &AttentionShape, s: &mut [f32], sc: Scores) {
    for r in 0..sc.rows {
        for x in &mut s[r * sc.s_row..r * sc.s_row + row_keys(shape, r)] {
            *x *= shape.scale;
        }
    }
}

/// Stage `attention.rowmax`: `M[r]` = the row's maximum, or `+0` when it
/// is `-inf` (the contract's shift `u`).
pub fn chain_rowmax(shape: &AttentionShape, s: &[f32], sc: Scores, m: &mut [f32]) {
    for r in 0..sc.rows {
        let row = &s[r * sc.s_row..r * sc.s_row + row_keys(shape, r)];
        let mx = row.iter().fold(f32::NEG_INFINITY, |a, &x| max(a, x));
        m[r] = if mx == f32::NEG_INFINITY { 0.0 } else { mx };
    }
}

/// Stage `attention.exp`: `S[r][j] = E(S[r][j] - M[r])`.
pub fn chain_exp(shape: &AttentionShape, s: &mut [f32], sc: Scores, m: &[f32]) {
    for r in 0..sc.rows {
        for x in &mut s[r * sc.s_row..r * sc.s_row + row_keys(shape, r)] {
            *x = exp_f32(*x - m[r]);
        }
    }
}

/// Stage `attention.rowsum`: `L[r]` = 16 lanes `a[j mod 16] += S[r][j]`
/// (plain adds, in `j` order), folded by [`fold16`].
pub fn chain_rowsum(shape: &AttentionShape, s: &[f32], sc: Scores, l: &mut [f32]) {
    for r in 0..sc.rows {
        let mut a = [0.0f32; BLOCK];
        for (j, x) in s[r * sc.s_row..r * sc.s_row + row_keys(shape, r)]
            .iter()
            .enumerate()
        {
            a[j % BLOCK] += x;
        }
        l[r] = fold16(&a);
    }
}

/// Stage `attention.normalise`: `S[r][j] = S[r][j] / L[r]`.
pub fn chain_normalise(shape: &AttentionShape, s: &mut [f32], sc: Scores, l: &[f32]) {
    for r in 0..sc.rows {
        for x in &mut s[r * sc.s_row..r * sc.s_row + row_keys(shape, r)] {
            *x /= l[r];
        }
    }
}

/// Stage `attention.pv`: `O[h][i][c] = fma(P[r][j], v_{g,j}[c], ·)` over
/// `j < keys(i)` in order, from `+0`.
pub fn chain_pv(
    shape: &AttentionShape,
    layout: &Layout,
    s: &[f32],
    sc: Scores,
    v: KvSlice<'_>,
    o: &mut [f32],
) {
    for h in 0..shape.heads {
        let g = h / shape.group().max(1);
        for i in 0..shape.lq {
            let row = (h * shape.lq + i) * sc.s_row;
            let o0 = h * layout.o_head + i * layout.o_row;
            for c in 0..shape.d {
                let mut acc = 0.0f32;
                for j in 0..shape.keys(i) {
                    let vj = v
                        .get(g * layout.v_head + j * layout.v_pos + c)
                        .unwrap_or(f32::NAN);
                    acc = s[row + j].mul_add(vj, acc);
                }
                o[o0 + c] = acc;
            }
        }
    }
}

/// The whole chain, stage after stage, into `o` (scratch allocated here).
pub fn chain(
    shape: &AttentionShape,
    layout: &Layout,
    q: &[f32],
    k: KvSlice<'_>,
    v: KvSlice<'_>,
    o: &mut [f32],
) {
    let sc = Scores {
        rows: shape.heads * shape.lq,
        s_row: shape.lk,
    };
    let mut s = vec![0.0f32; sc.rows * sc.s_row];
    let mut m = vec![0.0f32; sc.rows];
    let mut l = vec![0.0f32; sc.rows];
    chain_scores(shape, layout, q, k, &mut s, sc);
    chain_scale(shape, &mut s, sc);
    chain_rowmax(shape, &s, sc, &mut m);
    chain_exp(shape, &mut s, sc, &m);
    chain_rowsum(shape, &s, sc, &mut l);
    chain_normalise(shape, &mut s, sc, &l);
    chain_pv(shape, layout, &s, sc, v, o);
}

/// Exact softmax attention in f64 for one output element, from the
/// f32 scores `s` (already scaled): `(Σ e^{s_j - M} v_j, Σ e^{s_j - M} |v_j|) / Σ e^{s_j - M}`.
/// The second value scales error bounds.
pub fn exact_f64(s: &[f32], v: impl Fn(usize) -> f32) -> (f64, f64) {
    let mx = s
        .iter()
        .fold(f64::NEG_INFINITY, |a, &x| a.max(f64::from(x)));
    let mut num = 0.0f64;
    let mut abs = 0.0f64;
    let mut den = 0.0f64;
    for (j, &x) in s.iter().enumerate() {
        let w = (f64::from(x) - mx).exp();
        num += w * f64::from(v(j));
        abs += w * f64::from(v(j)).abs();
        den += w;
    }
    (num / den, abs / den)
}
