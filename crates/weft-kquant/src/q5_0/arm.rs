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
use cranelift_codegen::ir::{types, ConstantData, Function, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use weft_kernel::{Family, Geometry, Host, Isa, NativeCode, Offer, Refusal, Site};
use weft_managed::arm_build::{build_native, host_isa};
use weft_managed::{ArmCode, ManagedError, Target};
use weft_quant::q8_0::BLOCK_BYTES as X_BYTES;
use weft_quant::Format;

use super::{contract, BLOCK_BYTES, FAMILY};
use crate::clif::{data_flags, dot_u8_i8, widen_f16};
use crate::{offsets, KMatvecKernel};

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

/// Build the arm's CLIF function for `target`.
pub fn build_function(target: &Target) -> Function {
    let mut func = target.leaf_function("q5_0_matvec_arm");
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
    let acc_vars: Vec<Variable> = (0..2).map(|_| b.declare_var(types::F32X4)).collect();

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
    let x_vec = b.ins().imul_imm_s(blocks, X_BYTES as i64);
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
    let acc = block(&mut b, pw, px, acc);
    for (v, x) in acc_vars.iter().zip(acc) {
        b.def_var(*v, x);
    }
    let pw = b.ins().iadd_imm_s(pw, BLOCK_BYTES as i64);
    let px = b.ins().iadd_imm_s(px, X_BYTES as i64);
    b.def_var(var_pw, pw);
    b.def_var(var_px, px);
    let k = b.use_var(var_k);
    let k1 = b.ins().iadd_imm_s(k, 1);
    b.def_var(var_k, k1);
    b.ins().jump(blk_head, &[]);

    // fin: the contract's fold, one store.
    b.switch_to_block(fin);
    let a: Vec<Value> = acc_vars.iter().map(|v| b.use_var(*v)).collect();
    let u = b.ins().fadd(a[0], a[1]);
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
