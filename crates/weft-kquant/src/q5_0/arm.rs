//! The `q5_0.matvec` arm: CLIF compiled through weft-managed.
//!
//! Shape (`extern "C" fn(*const KMatvecArgs)`): for each vector, each row
//! in `row_start..row_end`, each block in order: the sixteen nibble bytes
//! split into elements 0–15 (`& 0x0f`) and 16–31 (`>> 4`); the fifth bits
//! spread to bytes by a `swizzle` of the `qh` word (byte `i` gets `qh`'s
//! byte `i / 8`), a per-byte bit mask and a compare, giving `0x10` where
//! the bit is set — so each byte is the unsigned `q + 16`. Each half
//! meets its sixteen activation quants as `dot(q + 16, x) + 0` (the tree
//! Cranelift's x64 backend folds into `vpdpbusd` on VNNI hosts) minus
//! `dot(16, x)`: the contract's exact lanes. Then `f32(I) · s` and `+`
//! into two f32x4 (never FMA), the contract's fold after the last block,
//! and one store.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, ConstantData, Function, InstBuilder, Type, Value};
use cranelift_frontend::FunctionBuilder;
use weft_kernel::{Family, Geometry, Host, Isa, NativeCode, Offer, Refusal, Site};
use weft_managed::arm_build::host_isa;
use weft_managed::{ArmCode, ManagedError, Target};
use weft_quant::Format;

use super::{contract, FAMILY};
use crate::clif::{data_flags, dot_u8_i8, fold8, widen_f16, ArmBody};
use crate::KMatvecKernel;

/// The arm's candidate name.
pub const ARM_NAME: &str = "q5_0.matvec.arm.lanes8";

fn vconst8(b: &mut FunctionBuilder<'_>, bytes: [u8; 16]) -> Value {
    let c = b
        .func
        .dfg
        .constants
        .insert(ConstantData::from(bytes.to_vec()));
    b.ins().vconst(types::I8X16, c)
}

fn splat8(b: &mut FunctionBuilder<'_>, v: i64) -> Value {
    let s = b.ins().iconst(types::I8, v);
    b.ins().splat(types::I8X16, s)
}

/// One block at `pw`/`px` added into `acc` (two f32x4).
fn block(b: &mut FunctionBuilder<'_>, pw: Value, px: Value, acc: [Value; 2]) -> [Value; 2] {
    let f = data_flags();
    let hw = b.ins().uload16(types::I32, f, pw, 0);
    let hx = b.ins().uload16(types::I32, f, px, 0);
    let dw = widen_f16(b, hw);
    let dx = widen_f16(b, hx);
    let s = b.ins().fmul(dw, dx);
    let s = b.ins().splat(types::F32X4, s);

    let qh = b.ins().load(types::I32, f, pw, 2);
    let qh = b.ins().splat(types::I32X4, qh);
    let qh = b.ins().bitcast(types::I8X16, crate::clif::le(), qh);
    let bits = vconst8(
        b,
        [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128],
    );
    let zero8 = splat8(b, 0);
    let sixteen = splat8(b, 16);
    let low4 = splat8(b, 0x0f);
    let qs = b.ins().load(types::I8X16, f, pw, 6);
    let z = b.ins().iconst(types::I32, 0);
    let zero = b.ins().splat(types::I32X4, z);
    let mut out = acc;
    for (half, slot) in out.iter_mut().enumerate() {
        let pick = if half == 0 { [0u8, 1] } else { [2, 3] };
        let mut idx = [0u8; 16];
        for (i, v) in idx.iter_mut().enumerate() {
            *v = pick[i / 8];
        }
        let idx = vconst8(b, idx);
        let spread = b.ins().swizzle(qh, idx);
        let sel = b.ins().band(spread, bits);
        let set = b.ins().icmp(IntCC::NotEqual, sel, zero8);
        let fifth = b.ins().band(set, sixteen);
        let nibbles = if half == 0 {
            b.ins().band(qs, low4)
        } else {
            b.ins().ushr_imm_u(qs, 4)
        };
        let q = b.ins().bor(nibbles, fifth);
        let x = b.ins().load(types::I8X16, f, px, 2 + 16 * half as i32);
        let dot = dot_u8_i8(b, q, x, zero);
        let bias = dot_u8_i8(b, sixteen, x, zero);
        let lanes = b.ins().isub(dot, bias);
        let lf = b.ins().fcvt_from_sint(types::F32X4, lanes);
        let p = b.ins().fmul(lf, s);
        *slot = b.ins().fadd(*slot, p);
    }
    out
}

/// The arm's block and fold inside the frame every arm shares.
struct Body;

impl ArmBody for Body {
    fn name(&self) -> &'static str {
        "q5_0_matvec_arm"
    }

    fn format(&self) -> Format {
        Format::Q5_0
    }

    fn accumulators(&self) -> &'static [Type] {
        &[types::F32X4; 2]
    }

    fn block(
        &self,
        b: &mut FunctionBuilder<'_>,
        pw: Value,
        px: Value,
        acc: &[Value],
    ) -> Vec<Value> {
        block(b, pw, px, [acc[0], acc[1]]).to_vec()
    }

    fn fold(&self, b: &mut FunctionBuilder<'_>, acc: &[Value]) -> Value {
        fold8(b, acc[0], acc[1])
    }
}

/// Build the arm's CLIF function for `target`.
pub fn build_function(target: &Target) -> Function {
    crate::clif::build(target, &Body)
}

/// Compile the arm for `target`.
pub fn compile(target: &Target) -> Result<ArmCode, ManagedError> {
    target.compile(build_function(target))
}

/// The `q5_0.matvec` arm as a [`weft_kernel::Arm`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Q5_0MatvecArm;

/// The `(rows, cols, batch)` of a geometry, checked against the contract
/// (`batch` defaults to 1); twins check the offer they are handed with it.
pub fn site_dims(geometry: &Geometry) -> Result<(u64, u64, u64), Refusal> {
    crate::site_dims(geometry, Format::Q5_0)
}

/// The offer every `q5_0.matvec` candidate of this arm shares.
pub fn offer_for(rows: u64, cols: u64, batch: u64) -> Result<Offer, Refusal> {
    crate::offer(contract(rows, cols, batch), Format::Q5_0)
}

/// Compile the host arm and place it.
pub fn place_arm() -> Result<KMatvecKernel, Refusal> {
    let offer = offer_for(1, 32, 1)?;
    let code = weft_kernel::Arm::build(&Q5_0MatvecArm, &offer, host_isa())?;
    // SAFETY: the arm's CLIF (above) reads the super-blocks of rows
    // row_start..row_end and of the `batch` vectors, writes only their
    // outputs, and returns.
    unsafe { KMatvecKernel::from_native(&code, Format::Q5_0) }
}

// SAFETY: the body reads and writes only what the arguments' extents name
// and returns normally (module docs); validation checks its results.
unsafe impl weft_kernel::Arm for Q5_0MatvecArm {
    fn name(&self) -> &'static str {
        ARM_NAME
    }

    fn family(&self) -> Family {
        Family(FAMILY)
    }

    fn offer(&self, site: &Site, _host: &Host) -> Result<Offer, Refusal> {
        crate::clif::offer(FAMILY, Format::Q5_0, site, contract)
    }

    fn build(&self, offer: &Offer, isa: Isa) -> Result<NativeCode, Refusal> {
        crate::clif::build_arm(FAMILY, offer, isa, compile)
    }
}
