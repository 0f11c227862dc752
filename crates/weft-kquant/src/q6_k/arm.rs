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

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Function, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use weft_kernel::{Family, Geometry, Host, Isa, NativeCode, Offer, Refusal, Site};
use weft_managed::arm_build::{build_native, host_isa};
use weft_managed::{ArmCode, ManagedError, Target};
use weft_quant::kquant::{Q8_K_BYTES, QK_K};
use weft_quant::Format;

use super::{contract, BLOCK_BYTES, FAMILY};
use crate::clif::{data_flags, dot_u8_i8, widen_f16};
use crate::{offsets, KMatvecKernel};

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

/// Build the arm's CLIF function for `target`.
pub fn build_function(target: &Target) -> Function {
    let mut func = target.leaf_function("q6_k_matvec_arm");
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
    let var_acc = b.declare_var(types::F32);

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
    b.def_var(var_acc, fzero);
    b.ins().jump(blk_head, &[]);

    b.switch_to_block(blk_head);
    let k = b.use_var(var_k);
    let more_k = b.ins().icmp(IntCC::UnsignedLessThan, k, blocks);
    b.ins().brif(more_k, blk_body, &[], fin, &[]);

    b.switch_to_block(blk_body);
    let pw = b.use_var(var_pw);
    let px = b.use_var(var_px);
    let acc = b.use_var(var_acc);
    let acc = super_block(&mut b, pw, px, acc);
    b.def_var(var_acc, acc);
    let pw = b.ins().iadd_imm_s(pw, BLOCK_BYTES as i64);
    let px = b.ins().iadd_imm_s(px, Q8_K_BYTES as i64);
    b.def_var(var_pw, pw);
    b.def_var(var_px, px);
    let k = b.use_var(var_k);
    let k1 = b.ins().iadd_imm_s(k, 1);
    b.def_var(var_k, k1);
    b.ins().jump(blk_head, &[]);

    b.switch_to_block(fin);
    let y = b.use_var(var_acc);
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
