//! Small NEON kernels for the cross-crate tests, emitted with weft-a64.
//!
//! Each takes the leaf ABI's one pointer to `TernaryArgs`
//! `{ a, b, c, out: *f32, len: u64 }` (five 64-bit fields) and computes
//! `out[i] = op(a[i], b[i], c[i])` for `i < len`: a loop over four lanes
//! (`ld1`/`st1` of `.4s`, post-indexed), then a scalar tail. No pointer
//! needs any alignment; only x0–x5 and v0–v2 are used, so nothing
//! callee-saved is touched.

// Each test binary uses the part of this helper it needs.
#![allow(dead_code)]

use weft_a64::{mem, s, v, x, Arr, Assembler, Cond, EncodeError};

/// The vector and scalar operation of a ternary kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TernaryOp {
    /// `out = fma(a, b, c)`: `fmla v2.4s, v0.4s, v1.4s` and `fmadd s2, s0, s1, s2`.
    Fma,
    /// `out = a + b` (c is loaded and ignored): `fadd`, vector and scalar.
    Add,
}

/// Emit the kernel for `op`.
pub fn emit_ternary(op: TernaryOp) -> Result<Vec<u8>, EncodeError> {
    let mut a = Assembler::new();
    let (vec_loop, tail, done) = (a.new_label(), a.new_label(), a.new_label());
    a.ldp(x(1), x(2), mem(x(0)))?; // a, b
    a.ldp(x(3), x(4), mem(x(0)).off(16))?; // c, out
    a.ldr(x(5), mem(x(0)).off(32))?; // len
    a.bind(vec_loop)?;
    a.cmp(x(5), 4)?;
    a.b_cond(Cond::Lo, tail)?;
    a.ld1(v(0).list(1, Arr::S4), mem(x(1)).post(16))?;
    a.ld1(v(1).list(1, Arr::S4), mem(x(2)).post(16))?;
    a.ld1(v(2).list(1, Arr::S4), mem(x(3)).post(16))?;
    match op {
        TernaryOp::Fma => a.fmla(v(2).s4(), v(0).s4(), v(1).s4())?,
        TernaryOp::Add => a.fadd(v(2).s4(), v(0).s4(), v(1).s4())?,
    }
    a.st1(v(2).list(1, Arr::S4), mem(x(4)).post(16))?;
    a.sub(x(5), x(5), 4)?;
    a.b(vec_loop)?;
    a.bind(tail)?;
    a.cbz(x(5), done)?;
    a.ldr(s(0), mem(x(1)).post(4))?;
    a.ldr(s(1), mem(x(2)).post(4))?;
    a.ldr(s(2), mem(x(3)).post(4))?;
    match op {
        TernaryOp::Fma => a.fmadd(s(2), s(0), s(1), s(2))?,
        TernaryOp::Add => a.fadd(s(2), s(0), s(1))?,
    }
    a.str(s(2), mem(x(4)).post(4))?;
    a.subs(x(5), x(5), 1)?;
    a.b_cond(Cond::Ne, tail)?;
    a.bind(done)?;
    a.ret()?;
    a.finish_bytes()
}

/// `out[i] = fma(a[i], b[i], c[i])`.
pub fn fma_kernel() -> Vec<u8> {
    emit_ternary(TernaryOp::Fma).expect("the fma kernel encodes")
}

/// `out[i] = a[i] + b[i]`; the same size as [`fma_kernel`].
pub fn add_kernel() -> Vec<u8> {
    emit_ternary(TernaryOp::Add).expect("the add kernel encodes")
}

/// Deterministic inputs: a xorshift stream of finite values of every
/// magnitude, with specials (±0, ±inf, subnormals, max) sprinkled in.
pub fn inputs(n: usize, seed: u64) -> Vec<f32> {
    const SPECIAL: [f32; 8] = [
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1.0e-40,
        -f32::MIN_POSITIVE,
        f32::MAX,
        1.0,
    ];
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            if s.is_multiple_of(7) {
                SPECIAL[i % SPECIAL.len()]
            } else {
                // Sign, an exponent near 1.0 (so products and sums round
                // for real), a full mantissa.
                let bits = ((s >> 32) as u32 & 0x807f_ffff) | ((120 + (s % 16) as u32) << 23);
                f32::from_bits(bits)
            }
        })
        .collect()
}

/// Equal as the elementwise contracts compare: by bits, NaNs by class.
pub fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}
