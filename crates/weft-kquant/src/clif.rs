//! What the K-quant arms share: the CLIF frame around a family's block
//! ([`ArmBody`], [`build`]: vectors, rows, blocks, the store), memory
//! flags, exact binary16 widening, the dot-product tree Cranelift folds
//! into one instruction, the eight-lane fold, and the offer and build
//! steps of `weft_kernel::Arm`.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Endianness, Function, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use weft_kernel::{Contract, Isa, NativeCode, Offer, Refusal, Site};
use weft_managed::arm_build::build_native;
use weft_managed::{ArmCode, ManagedError, Target};
use weft_quant::Format;

use crate::offsets;

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

/// What an arm supplies inside the frame every arm shares ([`build`]).
pub(crate) trait ArmBody {
    /// The CLIF function's name.
    fn name(&self) -> &'static str;
    /// The weights' block format (the activations' is its pairing).
    fn format(&self) -> Format;
    /// The accumulators' types; each starts at zero for every (vector, row).
    fn accumulators(&self) -> &'static [Type];
    /// The block at `pw` against the one at `px`: the new accumulators.
    fn block(&self, b: &mut FunctionBuilder<'_>, pw: Value, px: Value, acc: &[Value])
        -> Vec<Value>;
    /// After the last block: the contract's fold to the output.
    fn fold(&self, b: &mut FunctionBuilder<'_>, acc: &[Value]) -> Value;
}

/// The arm's whole function for `target` (`extern "C" fn(*const
/// KMatvecArgs)`): for each vector, each row in `row_start..row_end`, the
/// accumulators cleared, `body`'s block over every block of the row in
/// order, its fold, one f32 store.
pub(crate) fn build(target: &Target, body: &dyn ArmBody) -> Function {
    let mut func = target.leaf_function(body.name());
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut fctx);
    let ptr = target.pointer_type();
    let trusted = MemFlagsData::trusted();
    let w_bytes = body.format().block_bytes() as i64;
    let x_bytes = crate::x_format(body.format()).map_or(0, |f| f.block_bytes()) as i64;

    let [entry, n_head, row_init, row_head, row_body, blk_head, blk_body, fin, n_next, exit] =
        [(); 10].map(|()| b.create_block());
    let [var_n, var_r, var_k, var_pw, var_px] = [(); 5].map(|()| b.declare_var(ptr));
    let acc_vars: Vec<Variable> = body
        .accumulators()
        .iter()
        .map(|&t| b.declare_var(t))
        .collect();

    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let args = b.block_params(entry)[0];
    let load = |b: &mut FunctionBuilder<'_>, off| b.ins().load(ptr, trusted, args, off);
    let weights = load(&mut b, offsets::WEIGHTS);
    let xs = load(&mut b, offsets::X);
    let ys = load(&mut b, offsets::Y);
    let rows = load(&mut b, offsets::ROWS);
    let blocks = load(&mut b, offsets::BLOCKS);
    let batch = load(&mut b, offsets::BATCH);
    let row_start = load(&mut b, offsets::ROW_START);
    let row_end = load(&mut b, offsets::ROW_END);
    let w_row = b.ins().imul_imm_s(blocks, w_bytes);
    let x_vec = b.ins().imul_imm_s(blocks, x_bytes);
    let zeros: Vec<Value> = body
        .accumulators()
        .iter()
        .map(|&t| {
            let z = b.ins().f32const(0.0);
            if t == types::F32 {
                z
            } else {
                b.ins().splat(t, z)
            }
        })
        .collect();
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
    for (v, z) in acc_vars.iter().zip(&zeros) {
        b.def_var(*v, *z);
    }
    b.ins().jump(blk_head, &[]);

    b.switch_to_block(blk_head);
    let k = b.use_var(var_k);
    let more_k = b.ins().icmp(IntCC::UnsignedLessThan, k, blocks);
    b.ins().brif(more_k, blk_body, &[], fin, &[]);

    b.switch_to_block(blk_body);
    let pw = b.use_var(var_pw);
    let px = b.use_var(var_px);
    let acc: Vec<Value> = acc_vars.iter().map(|v| b.use_var(*v)).collect();
    let acc = body.block(&mut b, pw, px, &acc);
    for (v, x) in acc_vars.iter().zip(acc) {
        b.def_var(*v, x);
    }
    let pw = b.ins().iadd_imm_s(pw, w_bytes);
    let px = b.ins().iadd_imm_s(px, x_bytes);
    b.def_var(var_pw, pw);
    b.def_var(var_px, px);
    let k = b.use_var(var_k);
    let k1 = b.ins().iadd_imm_s(k, 1);
    b.def_var(var_k, k1);
    b.ins().jump(blk_head, &[]);

    b.switch_to_block(fin);
    let acc: Vec<Value> = acc_vars.iter().map(|v| b.use_var(*v)).collect();
    let y = body.fold(&mut b, &acc);
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

/// The contract's eight-lane fold of `lo` (lanes 0–3) and `hi` (4–7):
/// `u[l] = lo[l] + hi[l]`, then `(u0 + u2) + (u1 + u3)`.
pub(crate) fn fold8(b: &mut FunctionBuilder<'_>, lo: Value, hi: Value) -> Value {
    let u = b.ins().fadd(lo, hi);
    let [u0, u1, u2, u3] = [0u8, 1, 2, 3].map(|l| b.ins().extractlane(u, l));
    let v0 = b.ins().fadd(u0, u2);
    let v1 = b.ins().fadd(u1, u3);
    b.ins().fadd(v0, v1)
}

/// An arm's offer at `site`: the family's, at a geometry the contract
/// admits for weights of `w`.
pub(crate) fn offer(
    family: &str,
    w: Format,
    site: &Site,
    contract: fn(u64, u64, u64) -> Contract,
) -> Result<Offer, Refusal> {
    if site.family.name() != family {
        return Err(Refusal::UnsupportedGeometry {
            reason: format!("family {} is not {family}", site.family),
        });
    }
    let (rows, cols, batch) = crate::site_dims(&site.geometry, w)?;
    crate::offer(contract(rows, cols, batch), w)
}

/// An arm's code for `offer` of `family` on `isa`, compiled by `compile`.
pub(crate) fn build_arm(
    family: &str,
    offer: &Offer,
    isa: Isa,
    compile: fn(&Target) -> Result<ArmCode, ManagedError>,
) -> Result<NativeCode, Refusal> {
    if offer.contract.family != family {
        return Err(Refusal::UnsupportedGeometry {
            reason: format!("offer is for {}", offer.contract.family),
        });
    }
    build_native(isa, compile)
}
