//! The `q4_k.matvec` arm: CLIF compiled through weft-managed.
//!
//! Shape (`extern "C" fn(*const KMatvecArgs)`): for each vector `n`, each
//! row in `row_start..row_end`, each super-block in order:
//!
//! - **Scales**: `d`, `dmin` widened from binary16 with integer
//!   operations (exact; Cranelift has no f16 conversion) and multiplied by
//!   the activation's f32 scale; the eight 6-bit scales and minimums
//!   unpacked from their 12 bytes with scalar shifts and masks.
//! - **Integer lanes**: per sub-block `j`, its 32 nibbles (low or high
//!   halves of 32 bytes) against 32 activation quants as two 16-byte
//!   halves, each `dot(q, x) + 0` — the widen–multiply–pairwise-add tree
//!   Cranelift's x64 backend folds into `vpdpbusd` on VNNI hosts (the
//!   nibbles are zero-extended, the quants sign-extended) — times the
//!   splatted scale, added into `L` (two i32x4). `N` is the pairwise sums
//!   of the 16 `bsums` times the minimums.
//! - **Float lanes**: `f32(L) · dd` then `+` into `acc`, `f32(N) · dm`
//!   then `+` into `mac` (two f32x4 each, never FMA); after the last
//!   super-block the contract's fold and one f32 store.

use cranelift_codegen::ir::{types, Function, InstBuilder, Type, Value};
use cranelift_frontend::FunctionBuilder;
use weft_kernel::{Family, Geometry, Host, Isa, NativeCode, Offer, Refusal, Site};
use weft_managed::arm_build::host_isa;
use weft_managed::{ArmCode, ManagedError, Target};
use weft_quant::kquant::QK_K;
use weft_quant::Format;

use super::{contract, FAMILY};
use crate::clif::{data_flags, dot_u8_i8, fold8, widen_f16, ArmBody};
use crate::KMatvecKernel;

/// The arm's candidate name.
pub const ARM_NAME: &str = "q4_k.matvec.arm.lanes8";

/// The eight (scale, minimum) pairs of the 12 packed bytes at `p`, as
/// i32 scalars (weft-quant's `scale_min_k4`).
fn scales_mins(b: &mut FunctionBuilder<'_>, p: Value) -> ([Value; 8], [Value; 8]) {
    let f = data_flags();
    let q: Vec<Value> = (0..12)
        .map(|i| b.ins().uload8(types::I32, f, p, i))
        .collect();
    let mut s = [q[0]; 8];
    let mut m = [q[0]; 8];
    for j in 0..8 {
        if j < 4 {
            s[j] = b.ins().band_imm_s(q[j], 63);
            m[j] = b.ins().band_imm_s(q[j + 4], 63);
        } else {
            let lo = b.ins().band_imm_s(q[j + 4], 0x0f);
            let hi = b.ins().ushr_imm_u(q[j - 4], 6);
            let hi = b.ins().ishl_imm_u(hi, 4);
            s[j] = b.ins().bor(lo, hi);
            let lo = b.ins().ushr_imm_u(q[j + 4], 4);
            let hi = b.ins().ushr_imm_u(q[j], 6);
            let hi = b.ins().ishl_imm_u(hi, 4);
            m[j] = b.ins().bor(lo, hi);
        }
    }
    (s, m)
}

fn i32x4(b: &mut FunctionBuilder<'_>, v: [Value; 4]) -> Value {
    let mut out = b.ins().splat(types::I32X4, v[0]);
    for (lane, &x) in v.iter().enumerate().skip(1) {
        out = b.ins().insertlane(out, x, lane as u8);
    }
    out
}

/// One super-block at `pw`/`px` added into `acc` and `mac` (two f32x4 each).
fn super_block(
    b: &mut FunctionBuilder<'_>,
    pw: Value,
    px: Value,
    acc: [Value; 2],
    mac: [Value; 2],
) -> ([Value; 2], [Value; 2]) {
    let f = data_flags();
    let hd = b.ins().uload16(types::I32, f, pw, 0);
    let hm = b.ins().uload16(types::I32, f, pw, 2);
    let d = widen_f16(b, hd);
    let dmin = widen_f16(b, hm);
    let dx = b.ins().load(types::F32, f, px, 0);
    let dd = b.ins().fmul(d, dx);
    let dm = b.ins().fmul(dmin, dx);
    let dd = b.ins().splat(types::F32X4, dd);
    let dm = b.ins().splat(types::F32X4, dm);
    let pscales = b.ins().iadd_imm_s(pw, 4);
    let (s, m) = scales_mins(b, pscales);

    let z = b.ins().iconst(types::I32, 0);
    let zero = b.ins().splat(types::I32X4, z);
    let low4 = b.ins().iconst(types::I8, 0x0f);
    let low4 = b.ins().splat(types::I8X16, low4);
    let mut l = [zero, zero];
    for pair in 0..4 {
        for (half, lane) in l.iter_mut().enumerate() {
            let off = 16 + 32 * pair + 16 * half as i32;
            let bytes = b.ins().load(types::I8X16, f, pw, off);
            let lo = b.ins().band(bytes, low4);
            let hi = b.ins().ushr_imm_u(bytes, 4);
            for (sub, q) in [(2 * pair, lo), (2 * pair + 1, hi)] {
                let xoff = 4 + 32 * sub + 16 * half as i32;
                let x = b.ins().load(types::I8X16, f, px, xoff);
                let dot = dot_u8_i8(b, q, x, zero);
                let sj = b.ins().splat(types::I32X4, s[sub as usize]);
                let scaled = b.ins().imul(dot, sj);
                *lane = b.ins().iadd(*lane, scaled);
            }
        }
    }
    // N[l] = m[l] · (bs[2l] + bs[2l+1]).
    let mut n = [zero, zero];
    for (half, out) in n.iter_mut().enumerate() {
        let bs = b
            .ins()
            .load(types::I16X8, f, px, 4 + QK_K as i32 + 16 * half as i32);
        let lo = b.ins().swiden_low(bs);
        let hi = b.ins().swiden_high(bs);
        let sums = b.ins().iadd_pairwise(lo, hi);
        let mins = i32x4(
            b,
            [
                m[4 * half],
                m[4 * half + 1],
                m[4 * half + 2],
                m[4 * half + 3],
            ],
        );
        *out = b.ins().imul(sums, mins);
    }
    let mut acc = acc;
    let mut mac = mac;
    for h in 0..2 {
        let lf = b.ins().fcvt_from_sint(types::F32X4, l[h]);
        let p = b.ins().fmul(lf, dd);
        acc[h] = b.ins().fadd(acc[h], p);
        let nf = b.ins().fcvt_from_sint(types::F32X4, n[h]);
        let p = b.ins().fmul(nf, dm);
        mac[h] = b.ins().fadd(mac[h], p);
    }
    (acc, mac)
}

/// The arm's block and fold inside the frame every arm shares.
struct Body;

impl ArmBody for Body {
    fn name(&self) -> &'static str {
        "q4_k_matvec_arm"
    }

    fn format(&self) -> Format {
        Format::Q4_K
    }

    fn accumulators(&self) -> &'static [Type] {
        &[types::F32X4; 4]
    }

    fn block(
        &self,
        b: &mut FunctionBuilder<'_>,
        pw: Value,
        px: Value,
        acc: &[Value],
    ) -> Vec<Value> {
        let (acc, mac) = super_block(b, pw, px, [acc[0], acc[1]], [acc[2], acc[3]]);
        acc.into_iter().chain(mac).collect()
    }

    fn fold(&self, b: &mut FunctionBuilder<'_>, acc: &[Value]) -> Value {
        let t0 = b.ins().fsub(acc[0], acc[2]);
        let t1 = b.ins().fsub(acc[1], acc[3]);
        fold8(b, t0, t1)
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

/// The `q4_k.matvec` arm as a [`weft_kernel::Arm`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Q4KMatvecArm;

/// The `(rows, cols, batch)` of a geometry, checked against the contract
/// (`batch` defaults to 1); twins check the offer they are handed with it.
pub fn site_dims(geometry: &Geometry) -> Result<(u64, u64, u64), Refusal> {
    crate::site_dims(geometry, Format::Q4_K)
}

/// The offer every `q4_k.matvec` candidate of this arm shares.
pub fn offer_for(rows: u64, cols: u64, batch: u64) -> Result<Offer, Refusal> {
    crate::offer(contract(rows, cols, batch), Format::Q4_K)
}

/// Compile the host arm and place it.
pub fn place_arm() -> Result<KMatvecKernel, Refusal> {
    let offer = offer_for(1, QK_K as u64, 1)?;
    let code = weft_kernel::Arm::build(&Q4KMatvecArm, &offer, host_isa())?;
    // SAFETY: the arm's CLIF (above) reads the super-blocks of rows
    // row_start..row_end and of the `batch` vectors, writes only their
    // outputs, and returns.
    unsafe { KMatvecKernel::from_native(&code, Format::Q4_K) }
}

// SAFETY: the body reads and writes only what the arguments' extents name
// and returns normally (module docs); validation checks its results.
unsafe impl weft_kernel::Arm for Q4KMatvecArm {
    fn name(&self) -> &'static str {
        ARM_NAME
    }

    fn family(&self) -> Family {
        Family(FAMILY)
    }

    fn offer(&self, site: &Site, _host: &Host) -> Result<Offer, Refusal> {
        crate::clif::offer(FAMILY, Format::Q4_K, site, contract)
    }

    fn build(&self, offer: &Offer, isa: Isa) -> Result<NativeCode, Refusal> {
        crate::clif::build_arm(FAMILY, offer, isa, compile)
    }
}
