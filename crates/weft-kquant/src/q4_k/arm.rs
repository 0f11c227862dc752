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

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Function, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use weft_kernel::{Family, Geometry, Host, Isa, NativeCode, Offer, Refusal, Site};
use weft_managed::arm_build::{build_native, host_isa};
use weft_managed::{ArmCode, ManagedError, Target};
use weft_quant::kquant::{Q8_K_BYTES, QK_K};
use weft_quant::Format;

use super::{contract, BLOCK_BYTES, FAMILY};
use crate::clif::{data_flags, dot_u8_i8, widen_f16};
use crate::{offsets, KMatvecKernel};

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

/// Build the arm's CLIF function for `target`.
pub fn build_function(target: &Target) -> Function {
    let mut func = target.leaf_function("q4_k_matvec_arm");
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut fctx);
    let ptr = target.pointer_type();
    let trusted = MemFlagsData::trusted();

    let entry = b.create_block();
    let n_head = b.create_block();
    let row_init = b.create_block();
    let row_head = b.create_block();
    let row_body = b.create_block();
    let blk_head = b.create_block();
    let blk_body = b.create_block();
    let fin = b.create_block();
    let n_next = b.create_block();
    let exit = b.create_block();

    let var_n = b.declare_var(ptr);
    let var_r = b.declare_var(ptr);
    let var_k = b.declare_var(ptr);
    let var_pw = b.declare_var(ptr);
    let var_px = b.declare_var(ptr);
    let acc_vars: Vec<Variable> = (0..4).map(|_| b.declare_var(types::F32X4)).collect();

    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let args = b.block_params(entry)[0];
    let weights = b.ins().load(ptr, trusted, args, offsets::WEIGHTS);
    let xs = b.ins().load(ptr, trusted, args, offsets::X);
    let ys = b.ins().load(ptr, trusted, args, offsets::Y);
    let rows = b.ins().load(ptr, trusted, args, offsets::ROWS);
    let blocks = b.ins().load(ptr, trusted, args, offsets::BLOCKS);
    let batch = b.ins().load(ptr, trusted, args, offsets::BATCH);
    let row_start = b.ins().load(ptr, trusted, args, offsets::ROW_START);
    let row_end = b.ins().load(ptr, trusted, args, offsets::ROW_END);
    let w_row = b.ins().imul_imm_s(blocks, BLOCK_BYTES as i64);
    let x_vec = b.ins().imul_imm_s(blocks, Q8_K_BYTES as i64);
    let fzero = b.ins().f32const(0.0);
    let zero_acc = b.ins().splat(types::F32X4, fzero);
    let zero = b.ins().iconst(ptr, 0);
    b.def_var(var_n, zero);
    b.ins().jump(n_head, &[]);

    b.switch_to_block(n_head);
    let n = b.use_var(var_n);
    let more_n = b.ins().icmp(IntCC::UnsignedLessThan, n, batch);
    b.ins().brif(more_n, row_init, &[], exit, &[]);

    b.switch_to_block(row_init);
    b.def_var(var_r, row_start);
    b.ins().jump(row_head, &[]);

    b.switch_to_block(row_head);
    let r = b.use_var(var_r);
    let more_r = b.ins().icmp(IntCC::UnsignedLessThan, r, row_end);
    b.ins().brif(more_r, row_body, &[], n_next, &[]);

    b.switch_to_block(row_body);
    let r = b.use_var(var_r);
    let n = b.use_var(var_n);
    let w_off = b.ins().imul(r, w_row);
    let pw = b.ins().iadd(weights, w_off);
    let x_off = b.ins().imul(n, x_vec);
    let px = b.ins().iadd(xs, x_off);
    b.def_var(var_pw, pw);
    b.def_var(var_px, px);
    b.def_var(var_k, zero);
    for v in &acc_vars {
        b.def_var(*v, zero_acc);
    }
    b.ins().jump(blk_head, &[]);

    b.switch_to_block(blk_head);
    let k = b.use_var(var_k);
    let more_k = b.ins().icmp(IntCC::UnsignedLessThan, k, blocks);
    b.ins().brif(more_k, blk_body, &[], fin, &[]);

    b.switch_to_block(blk_body);
    let pw = b.use_var(var_pw);
    let px = b.use_var(var_px);
    let acc = [b.use_var(acc_vars[0]), b.use_var(acc_vars[1])];
    let mac = [b.use_var(acc_vars[2]), b.use_var(acc_vars[3])];
    let (acc, mac) = super_block(&mut b, pw, px, acc, mac);
    for (v, x) in acc_vars.iter().zip(acc.into_iter().chain(mac)) {
        b.def_var(*v, x);
    }
    let pw = b.ins().iadd_imm_s(pw, BLOCK_BYTES as i64);
    let px = b.ins().iadd_imm_s(px, Q8_K_BYTES as i64);
    b.def_var(var_pw, pw);
    b.def_var(var_px, px);
    let k = b.use_var(var_k);
    let k1 = b.ins().iadd_imm_s(k, 1);
    b.def_var(var_k, k1);
    b.ins().jump(blk_head, &[]);

    // fin: the contract's fold, one store.
    b.switch_to_block(fin);
    let a: Vec<Value> = acc_vars.iter().map(|v| b.use_var(*v)).collect();
    let t0 = b.ins().fsub(a[0], a[2]);
    let t1 = b.ins().fsub(a[1], a[3]);
    let u = b.ins().fadd(t0, t1);
    let u0 = b.ins().extractlane(u, 0);
    let u1 = b.ins().extractlane(u, 1);
    let u2 = b.ins().extractlane(u, 2);
    let u3 = b.ins().extractlane(u, 3);
    let v0 = b.ins().fadd(u0, u2);
    let v1 = b.ins().fadd(u1, u3);
    let y = b.ins().fadd(v0, v1);
    let n = b.use_var(var_n);
    let r = b.use_var(var_r);
    let base = b.ins().imul(n, rows);
    let idx = b.ins().iadd(base, r);
    let off = b.ins().ishl_imm_u(idx, 2);
    let py = b.ins().iadd(ys, off);
    b.ins().store(data_flags(), y, py, 0);
    let r1 = b.ins().iadd_imm_s(r, 1);
    b.def_var(var_r, r1);
    b.ins().jump(row_head, &[]);

    b.switch_to_block(n_next);
    let n = b.use_var(var_n);
    let n1 = b.ins().iadd_imm_s(n, 1);
    b.def_var(var_n, n1);
    b.ins().jump(n_head, &[]);

    b.switch_to_block(exit);
    b.ins().return_(&[]);
    b.seal_all_blocks();
    b.finalize(target.frontend_config());
    func
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
        if site.family.name() != FAMILY {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!("family {} is not {FAMILY}", site.family),
            });
        }
        let (rows, cols, batch) = site_dims(&site.geometry)?;
        offer_for(rows, cols, batch)
    }

    fn build(&self, offer: &Offer, isa: Isa) -> Result<NativeCode, Refusal> {
        if offer.contract.family != FAMILY {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!("offer is for {}", offer.contract.family),
            });
        }
        build_native(isa, compile)
    }
}
