//! The `q6_k.matvec` arm: CLIF compiled through weft-managed.
//!
//! Shape (`extern "C" fn(*const KMatvecArgs)`): for each vector, each row
//! in `row_start..row_end`, each super-block in order:
//!
//! - **Integer part**: per half (128 weights) and 16-byte slice, the four
//!   quant vectors of 16 are assembled from their nibbles and bit pairs
//!   as unsigned `q + 32` (`0..=63`); each against its 16 activation
//!   quants as `dot(q + 32, x) + 0` — the tree Cranelift's x64 backend
//!   folds into `vpdpbusd` on VNNI hosts — times the sub-block's splatted
//!   scale, summed in an i32x4. The bias comes back out exactly:
//!   `32 · Σ_j sc[j] · bsums[j]` (the activation's sums are its quants'
//!   sums, checked when it was wrapped), then the four lanes are added:
//!   `S`, exact.
//! - **Float part**: `f32(S) · (f32(d) · dx)` then `+` into one f32 (never
//!   FMA); after the last super-block one store.

use cranelift_codegen::ir::{types, Function, InstBuilder, Type, Value};
use cranelift_frontend::FunctionBuilder;
use weft_kernel::{Family, Geometry, Host, Isa, NativeCode, Offer, Refusal, Site};
use weft_managed::arm_build::host_isa;
use weft_managed::{ArmCode, ManagedError, Target};
use weft_quant::kquant::QK_K;
use weft_quant::Format;

use super::{contract, FAMILY};
use crate::clif::{data_flags, dot_u8_i8, widen_f16, ArmBody};
use crate::KMatvecKernel;

/// The arm's candidate name.
pub const ARM_NAME: &str = "q6_k.matvec.arm.scalar";

/// One super-block at `pw`/`px` added into the f32 `acc`.
fn super_block(b: &mut FunctionBuilder<'_>, pw: Value, px: Value, acc: Value) -> Value {
    let f = data_flags();
    let hd = b.ins().uload16(types::I32, f, pw, 208);
    let d = widen_f16(b, hd);
    let dx = b.ins().load(types::F32, f, px, 0);
    let s = b.ins().fmul(d, dx);

    let z = b.ins().iconst(types::I32, 0);
    let zero = b.ins().splat(types::I32X4, z);
    let low4 = b.ins().iconst(types::I8, 0x0f);
    let low4 = b.ins().splat(types::I8X16, low4);
    let low2 = b.ins().iconst(types::I8, 0x03);
    let low2 = b.ins().splat(types::I8X16, low2);
    let mut isum = zero;
    for h in 0..2i32 {
        for i in 0..2i32 {
            let ql_a = b.ins().load(types::I8X16, f, pw, 64 * h + 16 * i);
            let ql_b = b.ins().load(types::I8X16, f, pw, 64 * h + 32 + 16 * i);
            let qh = b.ins().load(types::I8X16, f, pw, 128 + 32 * h + 16 * i);
            for k in 0..4i32 {
                let ql = if k % 2 == 0 { ql_a } else { ql_b };
                let low = if k < 2 {
                    b.ins().band(ql, low4)
                } else {
                    b.ins().ushr_imm_u(ql, 4)
                };
                let high = if k == 0 {
                    qh
                } else {
                    b.ins().ushr_imm_u(qh, 2 * k as i64)
                };
                let high = b.ins().band(high, low2);
                let high = b.ins().ishl_imm_u(high, 4);
                let q = b.ins().bor(low, high);
                let e = 128 * h + 32 * k + 16 * i;
                let x = b.ins().load(types::I8X16, f, px, 4 + e);
                let dot = dot_u8_i8(b, q, x, zero);
                let j = 8 * h + 2 * k + i;
                let sc = b.ins().sload8(types::I32, f, pw, 192 + j);
                let sc = b.ins().splat(types::I32X4, sc);
                let scaled = b.ins().imul(dot, sc);
                isum = b.ins().iadd(isum, scaled);
            }
        }
    }
    // The bias: 32 · Σ_j sc[j] · bsums[j], sixteen products in four lanes.
    let scs = b.ins().load(types::I8X16, f, pw, 192);
    let sc_lo = b.ins().swiden_low(scs);
    let sc_hi = b.ins().swiden_high(scs);
    for (half, sc16) in [sc_lo, sc_hi].into_iter().enumerate() {
        let bs = b
            .ins()
            .load(types::I16X8, f, px, 4 + QK_K as i32 + 16 * half as i32);
        for (sc32, bs32) in [
            (b.ins().swiden_low(sc16), b.ins().swiden_low(bs)),
            (b.ins().swiden_high(sc16), b.ins().swiden_high(bs)),
        ] {
            let p = b.ins().imul(sc32, bs32);
            let p = b.ins().ishl_imm_u(p, 5);
            isum = b.ins().isub(isum, p);
        }
    }
    let l0 = b.ins().extractlane(isum, 0);
    let l1 = b.ins().extractlane(isum, 1);
    let l2 = b.ins().extractlane(isum, 2);
    let l3 = b.ins().extractlane(isum, 3);
    let s01 = b.ins().iadd(l0, l1);
    let s23 = b.ins().iadd(l2, l3);
    let total = b.ins().iadd(s01, s23);
    let tf = b.ins().fcvt_from_sint(types::F32, total);
    let p = b.ins().fmul(tf, s);
    b.ins().fadd(acc, p)
}

/// The arm's block and fold inside the frame every arm shares.
struct Body;

impl ArmBody for Body {
    fn name(&self) -> &'static str {
        "q6_k_matvec_arm"
    }

    fn format(&self) -> Format {
        Format::Q6_K
    }

    fn accumulators(&self) -> &'static [Type] {
        &[types::F32]
    }

    fn block(
        &self,
        b: &mut FunctionBuilder<'_>,
        pw: Value,
        px: Value,
        acc: &[Value],
    ) -> Vec<Value> {
        vec![super_block(b, pw, px, acc[0])]
    }

    fn fold(&self, _b: &mut FunctionBuilder<'_>, acc: &[Value]) -> Value {
        acc[0]
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

/// The `q6_k.matvec` arm as a [`weft_kernel::Arm`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Q6KMatvecArm;

/// The `(rows, cols, batch)` of a geometry, checked against the contract.
pub fn site_dims(geometry: &Geometry) -> Result<(u64, u64, u64), Refusal> {
    crate::site_dims(geometry, Format::Q6_K)
}

/// The offer every `q6_k.matvec` candidate of this arm shares.
pub fn offer_for(rows: u64, cols: u64, batch: u64) -> Result<Offer, Refusal> {
    crate::offer(contract(rows, cols, batch), Format::Q6_K)
}

/// Compile the host arm and place it.
pub fn place_arm() -> Result<KMatvecKernel, Refusal> {
    let offer = offer_for(1, QK_K as u64, 1)?;
    let code = weft_kernel::Arm::build(&Q6KMatvecArm, &offer, host_isa())?;
    // SAFETY: the arm's CLIF (above) reads the super-blocks of rows
    // row_start..row_end and of the `batch` vectors, writes only their
    // outputs, and returns.
    unsafe { KMatvecKernel::from_native(&code, Format::Q6_K) }
}

// SAFETY: the body reads and writes only what the arguments' extents name
// and returns normally (module docs); validation checks its results.
unsafe impl weft_kernel::Arm for Q6KMatvecArm {
    fn name(&self) -> &'static str {
        ARM_NAME
    }

    fn family(&self) -> Family {
        Family(FAMILY)
    }

    fn offer(&self, site: &Site, _host: &Host) -> Result<Offer, Refusal> {
        crate::clif::offer(FAMILY, Format::Q6_K, site, contract)
    }

    fn build(&self, offer: &Offer, isa: Isa) -> Result<NativeCode, Refusal> {
        crate::clif::build_arm(FAMILY, offer, isa, compile)
    }
}
