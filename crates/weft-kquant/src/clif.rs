//! CLIF building blocks the K-quant arms share: memory flags, exact
//! binary16 widening, and the dot-product tree Cranelift folds into one
//! instruction.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::FunctionBuilder;

pub(crate) fn le() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

/// Data loads: in bounds by the contract (checked by the args' constructor).
pub(crate) fn data_flags() -> MemFlagsData {
    let mut f = le();
    f.set_notrap();
    f
}

/// binary16 bits `h` (an i32 in `0..=0xffff`) → f32, exact: normal
/// `(em << 13) + (112 << 23)`, inf/NaN another `112 << 23`, subnormal or
/// zero `f32(em) · 2^-24` (exact products of normal numbers, so DAZ/FTZ
/// cannot matter), then the sign.
pub(crate) fn widen_f16(b: &mut FunctionBuilder<'_>, h: Value) -> Value {
    let em = b.ins().band_imm_s(h, 0x7fff);
    let sign = b.ins().band_imm_s(h, 0x8000);
    let sign = b.ins().ishl_imm_u(sign, 16);
    let shifted = b.ins().ishl_imm_u(em, 13);
    let normal = b.ins().iadd_imm_s(shifted, 112 << 23);
    let special = b.ins().iadd_imm_s(normal, 112 << 23);
    let is_special = b
        .ins()
        .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, em, 0x7c00);
    let v = b.ins().select(is_special, special, normal);
    let emf = b.ins().fcvt_from_sint(types::F32, em);
    let two_m24 = b.ins().f32const(2f32.powi(-24));
    let subf = b.ins().fmul(emf, two_m24);
    let sub = b.ins().bitcast(types::I32, le(), subf);
    let is_sub = b.ins().icmp_imm_s(IntCC::SignedLessThan, em, 0x400);
    let v = b.ins().select(is_sub, sub, v);
    let v = b.ins().bor(v, sign);
    b.ins().bitcast(types::F32, le(), v)
}

/// `dot(u, s) + c`: per dword `i`, `Σ_{k<4} u8(u[4i+k]) · i8(s[4i+k]) + c[i]`,
/// as the tree Cranelift folds into `vpdpbusd c, u, s` on VNNI hosts.
pub(crate) fn dot_u8_i8(b: &mut FunctionBuilder<'_>, u: Value, s: Value, c: Value) -> Value {
    let sl = b.ins().swiden_low(s);
    let ul = b.ins().uwiden_low(u);
    let lo = b.ins().imul(sl, ul);
    let sh = b.ins().swiden_high(s);
    let uh = b.ins().uwiden_high(u);
    let hi = b.ins().imul(sh, uh);
    let lo_l = b.ins().swiden_low(lo);
    let lo_h = b.ins().swiden_high(lo);
    let lo_p = b.ins().iadd_pairwise(lo_l, lo_h);
    let hi_l = b.ins().swiden_low(hi);
    let hi_h = b.ins().swiden_high(hi);
    let hi_p = b.ins().iadd_pairwise(hi_l, hi_h);
    let tree = b.ins().iadd_pairwise(lo_p, hi_p);
    b.ins().iadd(tree, c)
}
