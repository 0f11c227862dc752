//! The SiLU epilogue (`act = 3`): its contract, its scalar definition and
//! the one pass every body of every arm runs to apply it.
//!
//! SiLU needs `exp`. The correctly rounded exp lives in weft-libm's
//! binary64 steps and weft-elementwise's twins, whose register plans own a
//! whole body; a convolution tile holds its accumulators in nearly every
//! register. So this family fixes **its own** f32 algorithm (below), short
//! enough to emit in four instruction sets, and applies it after the tiles,
//! as one pass over the call's output rows (contiguous in NHWC, written by
//! this call moments before, so in L1/L2). The tiles' epilogue leaves the
//! accumulator unchanged for `act = 3`; the pass then replaces every
//! element of rows `row_start..row_end` by its SiLU. Each output is still
//! one fixed sequence of operations, so the pass adds nothing to the
//! family's promise: every body gives the reference's bits, in any split.
//!
//! # Contract
//!
//! Every step rounds to nearest even in binary32; `fma` is one fused
//! multiply–add; the constants are the f32 values of [`K`]:
//!
//! 1. `z = −|acc|` (the sign bit set, exact);
//! 2. `z = max(z, −110)` (below, `exp(z)` rounds to zero anyway);
//! 3. `n = roundeven(z ⊗ LOG2E)` (`−159 … 0`);
//! 4. `r = fma(n, −LN2_HI, z)`; `r = fma(n, −LN2_LO, r)` (Cody–Waite);
//! 5. `p = fma(P0, r, P1)`; then `p = fma(p, r, Pi)` for `i = 2 … 5`;
//! 6. `q = fma(p, r ⊗ r, r) ⊕ 1` (Cephes' `expf` polynomial);
//! 7. `h = n >> 1` (as an integer, rounding down), `e = (q ⊗ 2ʰ) ⊗
//!    2ⁿ⁻ʰ`, each power from the bits `(k + 127) << 23`: the first
//!    product is exact, the second rounds once, to a subnormal or zero
//!    where `exp(z)` is that small;
//! 8. `y = (sign(acc) ? acc ⊗ e : acc) ⊘ (1 ⊕ e)` — `acc · σ(acc)` with
//!    `σ(acc) = e / (1 + e)` below zero and `1 / (1 + e)` above, so
//!    nothing overflows; `sign` is the sign bit.
//!
//! A NaN `acc` gives a NaN `y` whatever step 2 does with it (x64's `maxps`
//! and arm64's `fmax` differ there), and NaNs compare by class. `+∞`
//! gives `+∞`, `−∞` gives NaN (`−∞ · 0`, as `x · sigmoid(x)` does in
//! PyTorch), `±0` gives `±0`, and `acc ≤ −110` gives `−0`. Against `x /
//! (1 + exp(−x))` in binary64 the result is within [`MAX_ULPS`] ulps for
//! `acc ≥ −87` (where `exp(acc)` is a normal f32); below, `|y| < 2^−119`
//! and off by less than [`SUBNORMAL_ABS`] (`e` has lost bits to the
//! subnormal range) — `silu_is_within_its_stated_bounds_of_the_binary64_value`
//! sweeps both.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;
use weft_a64::{mem, q, s, v, w, x, Assembler, Cond, EncodeError, Gpr};
use weft_kernel::LoopTrip;
use weft_x64::iced_x86::code_asm::{
    dword_ptr, edx, k1, k2, qword_ptr, rax, rcx, rdx, rsp, xmmword_ptr, ymmword_ptr, zmmword_ptr,
    AsmRegister64,
};
use weft_x64::regs::{XMM, YMM, ZMM};
use weft_x64::{EmitError, Emitter};

use crate::arm::{flags, le};
use crate::{offsets, Activation, ConvGeometry, Shape};

/// The activation code of SiLU.
pub const CODE: u64 = Activation::Silu as u64;

/// Largest distance, in ulps of the result, from `x / (1 + exp(−x))`
/// computed in binary64, where that value is a normal f32.
pub const MAX_ULPS: u32 = 4;

/// Largest absolute error below `acc = −87`, where `e` is subnormal.
pub const SUBNORMAL_ABS: f32 = 2e-43;

/// The constants, in the order the bodies keep them: `[SIGN, LO, LOG2E,
/// −LN2_HI, −LN2_LO, P0, P1, P2, P3, P4, P5, ONE, 127]` as bit patterns
/// (`SIGN` and `127` are integers).
pub const K: [u32; 13] = [
    0x8000_0000,
    (-110.0f32).to_bits(),
    std::f32::consts::LOG2_E.to_bits(),
    // LN2_HI has 9 significant bits: n · LN2_HI is exact for |n| < 2^15.
    (-0.693_359_4_f32).to_bits(),
    2.121_944_4e-4_f32.to_bits(),
    1.987_569_1e-4_f32.to_bits(),
    1.398_199_9e-3_f32.to_bits(),
    8.333_452e-3_f32.to_bits(),
    4.166_579_6e-2_f32.to_bits(),
    1.666_666_5e-1_f32.to_bits(),
    0.5f32.to_bits(), // Cephes: 5.0000001201e-1, which rounds to 0.5
    1.0f32.to_bits(),
    127,
];

const SIGN: usize = 0;
const LO: usize = 1;
const LOG2E: usize = 2;
const NLN2_HI: usize = 3;
const NLN2_LO: usize = 4;
const P0: usize = 5;
const ONE: usize = 11;
const BIAS: usize = 12;

fn kf(i: usize) -> f32 {
    f32::from_bits(K[i])
}

/// `2^k` for `−126 ≤ k ≤ 127`, from its bits.
fn pow2(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

/// SiLU of one accumulator, exactly as every body computes it (module
/// docs).
pub fn silu(acc: f32) -> f32 {
    let z = f32::from_bits(acc.to_bits() | K[SIGN]);
    let z = if z < kf(LO) { kf(LO) } else { z };
    let n = (z * kf(LOG2E)).round_ties_even();
    let r = n.mul_add(kf(NLN2_HI), z);
    let r = n.mul_add(kf(NLN2_LO), r);
    let mut p = kf(P0).mul_add(r, kf(P0 + 1));
    for i in 2..6 {
        p = p.mul_add(r, kf(P0 + i));
    }
    let q = p.mul_add(r * r, r) + 1.0;
    // A NaN `n` (only from a NaN acc) saturates to 0; y is NaN anyway.
    let ni = n as i32;
    let h = ni >> 1;
    let e = q * pow2(h) * pow2(ni - h);
    let num = if acc.is_sign_negative() { acc * e } else { acc };
    num / (1.0 + e)
}

/// Lanes of the x64 pass's main loop.
pub fn x64_lanes(avx512: bool) -> u64 {
    if avx512 {
        16
    } else {
        8
    }
}

/// Elements the pass runs over for a call over every row of `g`: all of
/// y when the site's activation is SiLU, none otherwise.
fn elements(g: &ConvGeometry, s: &Shape) -> u64 {
    if g.act == Activation::Silu {
        g.batch * s.out_h * s.out_w * g.cout
    } else {
        0
    }
}

/// `body`'s loop nest followed by the pass's loops at `g`, as a body of
/// `lanes` lanes a step emits them (and then one element a step, unless
/// `masked_tail`): the pass runs last, at depth 0.
pub fn after(
    mut body: Vec<LoopTrip>,
    g: &ConvGeometry,
    s: &Shape,
    lanes: u64,
    masked_tail: bool,
) -> Vec<LoopTrip> {
    let n = elements(g, s);
    body.push(LoopTrip {
        name: "silu".to_owned(),
        trips: n / lanes,
        depth: 0,
    });
    if !masked_tail {
        body.push(LoopTrip {
            name: "silu_tail".to_owned(),
            trips: n % lanes,
            depth: 0,
        });
    }
    body
}

// ---- Cranelift ----------------------------------------------------------

/// The SiLU steps on `x` (f32x4 or f32), in the contract's order.
fn clif_steps(b: &mut FunctionBuilder<'_>, x: Value, vector: bool) -> Value {
    let (ft, it) = if vector {
        (types::F32X4, types::I32X4)
    } else {
        (types::F32, types::I32)
    };
    let splat = |b: &mut FunctionBuilder<'_>, v: Value, t| {
        if vector {
            b.ins().splat(t, v)
        } else {
            v
        }
    };
    let k = |b: &mut FunctionBuilder<'_>, i: usize| {
        let c = b.ins().f32const(kf(i));
        splat(b, c, ft)
    };
    let ki = |b: &mut FunctionBuilder<'_>, i: usize| {
        let c = b.ins().iconst(types::I32, i64::from(K[i] as i32));
        splat(b, c, it)
    };
    let xi = b.ins().bitcast(it, le(), x);
    let sign = ki(b, SIGN);
    let zi = b.ins().bor(xi, sign);
    let z = b.ins().bitcast(ft, le(), zi);
    let lo = k(b, LO);
    let z = b.ins().fmax(z, lo);
    let l2e = k(b, LOG2E);
    let n = b.ins().fmul(z, l2e);
    let n = b.ins().nearest(n);
    let c = k(b, NLN2_HI);
    let r = b.ins().fma(n, c, z);
    let c = k(b, NLN2_LO);
    let r = b.ins().fma(n, c, r);
    let mut p = k(b, P0);
    for i in 1..6 {
        let c = k(b, P0 + i);
        p = b.ins().fma(p, r, c);
    }
    let t = b.ins().fmul(r, r);
    let qv = b.ins().fma(p, t, r);
    let one = k(b, ONE);
    let qv = b.ins().fadd(qv, one);
    let ni = b.ins().fcvt_to_sint_sat(it, n);
    let h = b.ins().sshr_imm_u(ni, 1);
    let rest = b.ins().isub(ni, h);
    let bias = ki(b, BIAS);
    let mut e = qv;
    for part in [h, rest] {
        let bits = b.ins().iadd(part, bias);
        let bits = b.ins().ishl_imm_u(bits, 23);
        let scale = b.ins().bitcast(ft, le(), bits);
        e = b.ins().fmul(e, scale);
    }
    let xe = b.ins().fmul(x, e);
    let num = if vector {
        let m = b.ins().sshr_imm_u(xi, 31);
        let m = b.ins().bitcast(ft, le(), m);
        b.ins().bitselect(m, xe, x)
    } else {
        let neg = b.ins().icmp_imm_s(IntCC::SignedLessThan, xi, 0);
        b.ins().select(neg, xe, x)
    };
    let d = b.ins().fadd(one, e);
    b.ins().fdiv(num, d)
}

/// The pass in CLIF: when `act` is SiLU, every element of y's rows
/// `row_start..row_end` replaced by its SiLU, four at a time, then one at
/// a time.
#[allow(clippy::too_many_arguments)]
pub(crate) fn clif_pass(
    b: &mut FunctionBuilder<'_>,
    act: Value,
    y: Value,
    row_start: Value,
    row_end: Value,
    out_w: Value,
    cout: Value,
) {
    let run = b.create_block();
    let done = b.create_block();
    let is = b.ins().icmp_imm_u(IntCC::Equal, act, CODE as i64);
    b.ins().brif(is, run, &[], done, &[]);
    b.switch_to_block(run);
    let per_row = b.ins().imul(out_w, cout);
    let first = b.ins().imul(row_start, per_row);
    let first = b.ins().ishl_imm_u(first, 2);
    let start = b.ins().iadd(y, first);
    let rows = b.ins().isub(row_end, row_start);
    let n = b.ins().imul(rows, per_row);
    let bytes = b.ins().ishl_imm_u(n, 2);
    let end = b.ins().iadd(start, bytes);
    let whole = b.ins().band_imm_s(n, -4);
    let whole = b.ins().ishl_imm_u(whole, 2);
    let vend = b.ins().iadd(start, whole);
    let f = flags();
    let p = b.declare_var(types::I64);
    crate::arm::looped(
        b,
        p,
        start,
        |b, at| b.ins().icmp(IntCC::UnsignedLessThan, at, vend),
        16,
        |b| {
            let at = b.use_var(p);
            let x = b.ins().load(types::F32X4, f, at, 0);
            let y = clif_steps(b, x, true);
            b.ins().store(f, y, at, 0);
        },
    );
    let tail = b.declare_var(types::I64);
    crate::arm::looped(
        b,
        tail,
        vend,
        |b, at| b.ins().icmp(IntCC::UnsignedLessThan, at, end),
        4,
        |b| {
            let at = b.use_var(tail);
            let x = b.ins().load(types::F32, f, at, 0);
            let y = clif_steps(b, x, false);
            b.ins().store(f, y, at, 0);
        },
    );
    b.ins().jump(done, &[]);
    b.switch_to_block(done);
}

// ---- x64 ----------------------------------------------------------------

/// The contract's steps 1–6 on one register: `$x` in (kept), `q` out in
/// `$p` and `n` (a float) in `$n`, `$z $t` scratch; `$k(i)` the operand
/// holding constant `i` (a register or a full-width stack copy); `$round`
/// and `$or` the width's instructions.
macro_rules! x64_poly {
    ($a:expr, $x:expr, $z:expr, $n:expr, $p:expr, $t:expr, $k:expr, $round:ident, $or:ident) => {{
        let a = $a;
        a.$or($z, $x, $k(SIGN))?;
        a.vmaxps($z, $z, $k(LO))?;
        a.vmulps($n, $z, $k(LOG2E))?;
        a.$round($n, $n, 0)?;
        a.vfmadd231ps($z, $n, $k(NLN2_HI))?;
        a.vfmadd231ps($z, $n, $k(NLN2_LO))?;
        a.vmovups($p, $k(P0))?;
        for i in 1..6 {
            a.vfmadd213ps($p, $z, $k(P0 + i))?;
        }
        a.vmulps($t, $z, $z)?;
        a.vfmadd213ps($p, $t, $z)?;
        a.vaddps($p, $p, $k(ONE))?;
    }};
}

/// Step 7 from integer bits (ymm, xmm): `$p ← ($p ⊗ 2ʰ) ⊗ 2ⁿ⁻ʰ`.
macro_rules! x64_scale_vex {
    ($a:expr, $n:expr, $p:expr, $t:expr, $k:expr) => {{
        let a = $a;
        a.vcvtps2dq($n, $n)?;
        a.vpsrad($t, $n, 1)?;
        a.vpsubd($n, $n, $t)?;
        a.vpaddd($t, $t, $k(BIAS))?;
        a.vpslld($t, $t, 23)?;
        a.vmulps($p, $p, $t)?;
        a.vpaddd($n, $n, $k(BIAS))?;
        a.vpslld($n, $n, 23)?;
        a.vmulps($p, $p, $n)?;
    }};
}

/// Step 8 for ymm/xmm: `$x ← (sign($x) ? $x·e : $x) / (1 + e)`, `e` in
/// `$p` (`vblendvps` picks by the mask's sign bit: `$x`'s own).
macro_rules! x64_finish_vex {
    ($a:expr, $x:expr, $p:expr, $t:expr, $k:expr) => {{
        let a = $a;
        a.vmulps($t, $x, $p)?;
        a.vblendvps($x, $x, $t, $x)?;
        a.vaddps($p, $p, $k(ONE))?;
        a.vdivps($x, $x, $p)?;
    }};
}

/// Steps 7 and 8 for zmm: `e = vscalefps(q, n)`, `q · 2ⁿ` rounded once —
/// the same bits as the other widths' exact product then rounded one;
/// then k2 ← lanes whose sign bit is set (`0 > x` as integers), `x ⊗ e`
/// under it.
fn x64_finish_zmm(
    e: &mut Emitter,
    kz: impl Fn(usize) -> weft_x64::iced_x86::code_asm::AsmRegisterZmm,
) -> Result<(), EmitError> {
    let a = e.asm();
    a.vscalefps(ZMM[4], ZMM[4], ZMM[2])?;
    a.vpxord(ZMM[3], ZMM[3], ZMM[3])?;
    a.vpcmpgtd(k2, ZMM[3], ZMM[0])?;
    a.vmulps(ZMM[0].k2(), ZMM[0], ZMM[4])?;
    a.vaddps(ZMM[4], ZMM[4], kz(ONE))?;
    a.vdivps(ZMM[0], ZMM[0], ZMM[4])?;
    Ok(())
}

/// Steps 1–8 on zmm0, the constants in zmm16–28.
fn x64_zmm_steps(e: &mut Emitter) -> Result<(), EmitError> {
    let kz = |i: usize| ZMM[16 + i];
    x64_poly!(
        e.asm(),
        ZMM[0],
        ZMM[1],
        ZMM[2],
        ZMM[4],
        ZMM[3],
        kz,
        vrndscaleps,
        vpord
    );
    x64_finish_zmm(e, kz)
}

/// Bytes of the AVX2 pass's stack copies of [`K`] (one ymm each).
const AVX2_KBYTES: i32 = 32 * K.len() as i32;

/// The pass on x64 (`avx512`: zmm, constants in zmm16–28, a masked
/// tail; otherwise ymm, constants in a stack copy below `rsp`'s current
/// value, then one element at a time in xmm). `args` holds the
/// [`ConvArgs`](crate::ConvArgs) pointer; rax, rcx, rdx, k1, k2 and vector
/// registers 0–4 (and 16–28) are clobbered, nothing else.
pub(crate) fn x64_pass(
    e: &mut Emitter,
    avx512: bool,
    args: AsmRegister64,
) -> Result<(), EmitError> {
    let mut skip = e.create_label();
    {
        let a = e.asm();
        a.cmp(qword_ptr(args + offsets::ACT), CODE as i32)?;
        a.jne(skip)?;
        // rdx = elements of a row, rax = the call's first element's
        // address, rcx = its element count.
        a.mov(rdx, qword_ptr(args + offsets::OUT_W))?;
        a.imul_2(rdx, qword_ptr(args + offsets::COUT))?;
        a.mov(rax, qword_ptr(args + offsets::ROW_START))?;
        a.mov(rcx, qword_ptr(args + offsets::ROW_END))?;
        a.sub(rcx, rax)?;
        a.imul_2(rcx, rdx)?;
        a.imul_2(rax, rdx)?;
        a.shl(rax, 2)?;
        a.add(rax, qword_ptr(args + offsets::Y))?;
    }
    let lanes = x64_lanes(avx512) as i32;
    let (mut head, mut tail, mut done) = (e.create_label(), e.create_label(), e.create_label());
    if avx512 {
        for (i, bits) in K.iter().enumerate() {
            e.asm().mov(edx, *bits)?;
            e.asm().vpbroadcastd(ZMM[16 + i], edx)?;
        }
        e.set_label(&mut head)?;
        e.asm().cmp(rcx, lanes)?;
        e.asm().jb(tail)?;
        e.asm().vmovups(ZMM[0], zmmword_ptr(rax))?;
        x64_zmm_steps(e)?;
        e.asm().vmovups(zmmword_ptr(rax), ZMM[0])?;
        e.asm().add(rax, 4 * lanes)?;
        e.asm().sub(rcx, lanes)?;
        e.asm().jmp(head)?;
        e.set_label(&mut tail)?;
        {
            let a = e.asm();
            a.test(rcx, rcx)?;
            a.jz(done)?;
            // k1 = the low rcx (< 16) lanes.
            a.mov(edx, 1)?;
            a.shl(edx, weft_x64::iced_x86::code_asm::cl)?;
            a.dec(edx)?;
            a.kmovw(k1, edx)?;
            a.vmovups(ZMM[0].k1().z(), zmmword_ptr(rax))?;
        }
        x64_zmm_steps(e)?;
        e.asm().vmovups(zmmword_ptr(rax).k1(), ZMM[0])?;
        e.set_label(&mut done)?;
        e.asm().zero_bytes()?;
    } else {
        e.asm().sub(rsp, AVX2_KBYTES)?;
        for (i, bits) in K.iter().enumerate() {
            e.asm().mov(edx, *bits)?;
            e.asm().vmovd(XMM[0], edx)?;
            e.asm().vpbroadcastd(YMM[0], XMM[0])?;
            e.asm().vmovups(ymmword_ptr(rsp + 32 * i as i32), YMM[0])?;
        }
        let ky = |i: usize| ymmword_ptr(rsp + 32 * i as i32);
        let kx = |i: usize| xmmword_ptr(rsp + 32 * i as i32);
        e.set_label(&mut head)?;
        e.asm().cmp(rcx, lanes)?;
        e.asm().jb(tail)?;
        e.asm().vmovups(YMM[0], ymmword_ptr(rax))?;
        x64_poly!(
            e.asm(),
            YMM[0],
            YMM[1],
            YMM[2],
            YMM[4],
            YMM[3],
            ky,
            vroundps,
            vorps
        );
        x64_scale_vex!(e.asm(), YMM[2], YMM[4], YMM[3], ky);
        x64_finish_vex!(e.asm(), YMM[0], YMM[4], YMM[3], ky);
        e.asm().vmovups(ymmword_ptr(rax), YMM[0])?;
        e.asm().add(rax, 4 * lanes)?;
        e.asm().sub(rcx, lanes)?;
        e.asm().jmp(head)?;
        // One element a step, in lane 0 of an xmm (the other lanes zero).
        e.set_label(&mut tail)?;
        e.asm().test(rcx, rcx)?;
        e.asm().jz(done)?;
        e.asm().vmovss(XMM[0], dword_ptr(rax))?;
        x64_poly!(
            e.asm(),
            XMM[0],
            XMM[1],
            XMM[2],
            XMM[4],
            XMM[3],
            kx,
            vroundps,
            vorps
        );
        x64_scale_vex!(e.asm(), XMM[2], XMM[4], XMM[3], kx);
        x64_finish_vex!(e.asm(), XMM[0], XMM[4], XMM[3], kx);
        e.asm().vmovss(dword_ptr(rax), XMM[0])?;
        e.asm().add(rax, 4)?;
        e.asm().dec(rcx)?;
        e.asm().jmp(tail)?;
        e.set_label(&mut done)?;
        e.asm().add(rsp, AVX2_KBYTES)?;
    }
    e.set_label(&mut skip)?;
    e.asm().zero_bytes()?;
    Ok(())
}

// ---- arm64 --------------------------------------------------------------

/// The contract's steps on `v0.4s` (in and out), scratch v1–v6, the
/// constants in v16–v28.
fn a64_steps(a: &mut Assembler) -> Result<(), EncodeError> {
    let k = |i: usize| v(16 + i as u8).s4();
    let (x0, z, n, t, m) = (v(0).s4(), v(1).s4(), v(2).s4(), v(5).s4(), v(6));
    a.orr(v(1).b16(), v(0).b16(), v(16 + SIGN as u8).b16())?;
    a.fmax(z, z, k(LO))?;
    a.fmul(n, z, k(LOG2E))?;
    a.frintn(n, n)?;
    a.fmla(z, n, k(NLN2_HI))?;
    a.fmla(z, n, k(NLN2_LO))?;
    // p = fma(p, r, c) is `c + p·r`: FMLA into a copy of c, alternating.
    let mut p = v(16 + P0 as u8);
    for i in 1..6 {
        let dst = if i % 2 == 1 { v(3) } else { v(4) };
        a.mov(dst.b16(), v(16 + (P0 + i) as u8).b16())?;
        a.fmla(dst.s4(), p.s4(), z)?;
        p = dst;
    }
    a.fmul(t, z, z)?;
    a.fmla(z, p.s4(), t)?;
    a.fadd(z, z, k(ONE))?;
    a.fcvtzs(n, n)?;
    a.sshr(t, n, 1)?;
    a.sub(n, n, t)?;
    a.add(t, t, k(BIAS))?;
    a.shl(t, t, 23)?;
    a.fmul(z, z, t)?;
    a.add(n, n, k(BIAS))?;
    a.shl(n, n, 23)?;
    a.fmul(z, z, n)?;
    // z = e: x·e where x's sign bit is set.
    a.fmul(t, x0, z)?;
    a.sshr(m.s4(), x0, 31)?;
    a.bit(v(0).b16(), v(5).b16(), m.b16())?;
    a.fadd(z, z, k(ONE))?;
    a.fdiv(x0, x0, z)
}

/// The pass on arm64. `args` holds the [`ConvArgs`](crate::ConvArgs)
/// pointer; x9–x12, v0–v6 and v16–v28 are clobbered (the callee-saved
/// d8–d15 are not touched).
pub(crate) fn a64_pass(a: &mut Assembler, args: Gpr) -> Result<(), EncodeError> {
    let (cnt, ptr, t1, t2) = (x(9), x(10), x(11), x(12));
    let (skip, head, tail, done) = (a.new_label(), a.new_label(), a.new_label(), a.new_label());
    a.ldr(t1, mem(args).off(i64::from(offsets::ACT)))?;
    a.cmp(t1, CODE as i64)?;
    a.b_cond(Cond::Ne, skip)?;
    a.ldr(t1, mem(args).off(i64::from(offsets::OUT_W)))?;
    a.ldr(t2, mem(args).off(i64::from(offsets::COUT)))?;
    a.mul(t1, t1, t2)?;
    a.ldr(ptr, mem(args).off(i64::from(offsets::ROW_START)))?;
    a.ldr(cnt, mem(args).off(i64::from(offsets::ROW_END)))?;
    a.sub(cnt, cnt, ptr)?;
    a.mul(cnt, cnt, t1)?;
    a.mul(ptr, ptr, t1)?;
    a.ldr(t2, mem(args).off(i64::from(offsets::Y)))?;
    a.lsl(ptr, ptr, 2)?;
    a.add(ptr, t2, ptr)?;
    for (i, bits) in K.iter().enumerate() {
        a.movz(w(11), i64::from(bits & 0xffff), 0)?;
        a.movk(w(11), i64::from(bits >> 16), 16)?;
        a.dup(v(16 + i as u8).s4(), w(11))?;
    }
    a.bind(head)?;
    a.cmp(cnt, 4)?;
    a.b_cond(Cond::Lo, tail)?;
    a.ldr(q(0), mem(ptr))?;
    a64_steps(a)?;
    a.str(q(0), mem(ptr).post(16))?;
    a.sub(cnt, cnt, 4)?;
    a.b(head)?;
    // One element a step, in lane 0 (`ldr s0` zeroes the others).
    a.bind(tail)?;
    a.cbz(cnt, done)?;
    a.ldr(s(0), mem(ptr))?;
    a64_steps(a)?;
    a.str(s(0), mem(ptr).post(4))?;
    a.sub(cnt, cnt, 1)?;
    a.b(tail)?;
    a.bind(done)?;
    a.bind(skip)
}

#[cfg(test)]
mod tests {
    use super::{silu, K, MAX_ULPS, SUBNORMAL_ABS};
    #[cfg(target_arch = "x86_64")]
    use super::{YMM, ZMM};

    /// Distance in ulps between two finite f32 of the same sign.
    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    #[test]
    fn the_cody_waite_high_part_has_nine_significant_bits() {
        // So n · LN2_HI is exact for every n the clamp allows (|n| ≤ 159).
        assert_eq!(K[3] & 0x7fff, 0);
        assert_eq!(f32::from_bits(K[3]), -0.693_359_4);
    }

    #[test]
    fn silu_is_within_its_stated_bounds_of_the_binary64_value() {
        let mut worst = (0u32, 0.0f32);
        let mut worst_abs = (0.0f64, 0.0f32);
        // Every 61st f32 of both signs (a prime stride meets every
        // exponent and many mantissas), and every f32 from -95 to -80.
        let stride = (0u32..0x7f80_0000).step_by(61);
        let near = (0x42a0_0000u32..=0x42be_0000).map(|b| b | 0x8000_0000);
        for x in stride
            .flat_map(|b| [f32::from_bits(b), -f32::from_bits(b)])
            .chain(near.map(f32::from_bits))
        {
            let want = (x as f64) / (1.0 + (-(x as f64)).exp());
            let got = silu(x);
            if x >= -87.0 {
                let u = ulps(got, want as f32);
                if u > worst.0 {
                    worst = (u, x);
                }
            } else {
                let d = (got as f64 - want).abs();
                if d > worst_abs.0 {
                    worst_abs = (d, x);
                }
            }
        }
        assert!(
            worst.0 <= MAX_ULPS,
            "{} ulps at {:e} ({:#x})",
            worst.0,
            worst.1,
            worst.1.to_bits()
        );
        assert!(
            worst_abs.0 <= SUBNORMAL_ABS as f64,
            "{:e} off at {:e}",
            worst_abs.0,
            worst_abs.1
        );
    }

    #[test]
    fn silu_keeps_signed_zeros_and_nan_and_sends_infinities_where_stated() {
        assert_eq!(silu(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(silu(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(silu(f32::INFINITY), f32::INFINITY);
        assert!(silu(f32::NEG_INFINITY).is_nan());
        assert!(silu(f32::NAN).is_nan());
        assert_eq!(silu(100.0), 100.0);
        assert_eq!(silu(-110.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(silu(-1e30).to_bits(), (-0.0f32).to_bits());
        let tiny = silu(-100.0);
        assert!(tiny <= 0.0 && tiny > -1e-40, "{tiny:e}");
    }

    /// Inputs that hunt for differences: a dense sweep of −130 … 130 (both
    /// clamps, the subnormal `e` below −87, the `n` halving), the special
    /// values, subnormals, and a ragged length (13 past a multiple of 16).
    fn hunting_inputs() -> Vec<f32> {
        let mut v: Vec<f32> = (0..4000).map(|i| -130.0 + i as f32 * 0.065).collect();
        v.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            f32::from_bits(1),
            f32::from_bits(0x8000_0001),
            -87.0,
            -87.336_54,
            -103.972_08,
            -110.0,
            -110.000_01,
            88.0,
            88.722_83,
        ]);
        let mut bits = 0x9e37_79b9u32;
        while v.len() % 16 != 13 || v.len() < 4100 {
            bits = bits.wrapping_mul(0x0019_660d).wrapping_add(0x3c6e_f35f);
            v.push(f32::from_bits(bits));
        }
        v
    }

    /// `code` run over `input` as a one-row, one-channel output with the
    /// SiLU epilogue (the pass reads nothing but y and the row fields).
    fn run_pass(code: &weft_kernel::NativeCode, input: &[f32]) -> Vec<f32> {
        let mut y = input.to_vec();
        let args = crate::ConvArgs {
            x: std::ptr::null(),
            filt: std::ptr::null(),
            y: y.as_mut_ptr(),
            batch: 1,
            in_h: 1,
            in_w: 1,
            cin: 1,
            cout: 1,
            k_h: 1,
            k_w: 1,
            stride: 1,
            pad: 0,
            dil: 1,
            out_h: 1,
            out_w: y.len() as u64,
            ow_lo: 0,
            ow_hi: 0,
            panels: 0,
            act: super::CODE,
            row_start: 0,
            row_end: 1,
            img_start: 0,
            oh_start: 0,
            groups: 1,
            cin_g: 1,
            cout_g: 1,
            group_panels: 0,
        };
        // SAFETY: every body here is a leaf function over ConvArgs whose
        // SiLU pass reads and writes y's `out_w` floats only (the row
        // range 0..1 of a 1-channel output), live until it returns.
        let kernel: weft_kernel::Kernel<crate::ConvArgs> =
            unsafe { weft_kernel::Kernel::from_native(code) }.expect("placed");
        // SAFETY: as above.
        unsafe { kernel.call(&args) };
        y
    }

    fn assert_reference_bits(name: &str, input: &[f32], got: &[f32]) {
        for (i, (&x, &g)) in input.iter().zip(got).enumerate() {
            let want = silu(x);
            let same = if want.is_nan() {
                g.is_nan()
            } else {
                g.to_bits() == want.to_bits()
            };
            assert!(
                same,
                "{name}: y[{i}] = silu({x:e} = {:#x}) = {g:e}, the reference {want:e}",
                x.to_bits()
            );
        }
    }

    /// The CLIF pass (an arm with an empty body is nothing but the pass)
    /// gives the reference's bits on this host's ISA.
    #[test]
    fn the_clif_pass_gives_the_reference_bits_on_hunting_inputs() {
        let input = hunting_inputs();
        let code = weft_managed::arm_build::build_native(weft_kernel::Isa::of_target(), |t| {
            t.compile(crate::arm::build_with(
                t,
                "silu_pass",
                crate::arm::BiasLines::Panels,
                |_, _| {},
            ))
        })
        .expect("built");
        assert_reference_bits("clif", &input, &run_pass(&code, &input));
    }

    /// The x64 passes (AVX-512: zmm, a masked tail and `vscalefps`; AVX2:
    /// ymm, then one element at a time) give the reference's bits.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_x64_passes_give_the_reference_bits_on_hunting_inputs() {
        use weft_kernel::Feature;
        use weft_x64::{Abi, Clobbers, Emitter};
        let host = weft_host::Host::detect();
        let input = hunting_inputs();
        let mut ran = 0;
        for (avx512, needs) in [
            (true, &[Feature::Avx512f][..]),
            (false, &[Feature::Avx2, Feature::Fma][..]),
        ] {
            if weft_kernel::require_features(&host, needs).is_err() {
                continue;
            }
            let mut e = Emitter::new(Abi::host()).expect("emitter");
            let mut clobbers = Clobbers::none();
            if avx512 {
                ZMM.iter().for_each(|z| clobbers = clobbers.with(*z));
            } else {
                YMM[..16].iter().for_each(|y| clobbers = clobbers.with(*y));
            }
            e.prologue(clobbers).expect("prologue");
            let args = e.args_reg();
            super::x64_pass(&mut e, avx512, args).expect("pass");
            e.epilogue().expect("epilogue");
            let code = weft_kernel::NativeCode {
                isa: weft_kernel::Isa::X86_64,
                bytes: e.finish().expect("encoded").bytes,
                pool: None,
                loops: Vec::new(),
            };
            let name = if avx512 { "avx512" } else { "avx2" };
            assert_reference_bits(name, &input, &run_pass(&code, &input));
            ran += 1;
        }
        assert!(ran > 0 || !cfg!(weft_host_has = "avx2"), "no x64 pass ran");
    }

    /// The NEON pass gives the reference's bits (under qemu on CI).
    #[cfg(target_arch = "aarch64")]
    #[test]
    fn the_neon_pass_gives_the_reference_bits_on_hunting_inputs() {
        let input = hunting_inputs();
        let mut a = weft_a64::Assembler::new();
        super::a64_pass(&mut a, weft_a64::x(0)).expect("pass");
        a.ret().expect("ret");
        let code = weft_kernel::NativeCode {
            isa: weft_kernel::Isa::Aarch64,
            bytes: a.finish_bytes().expect("encoded"),
            pool: None,
            loops: Vec::new(),
        };
        assert_reference_bits("neon", &input, &run_pass(&code, &input));
    }
}
