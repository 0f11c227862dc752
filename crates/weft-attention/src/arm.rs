//! The fused `attention.fused` arm in CLIF, and the placed-kernel wrapper
//! [`AttentionKernel`].
//!
//! Shape of the body (`extern "C" fn(*const AttentionArgs)`, built for one
//! `d` and one [`KvType`]): for each unit, for each of its rows, the
//! contract's blocks of 16 keys. A block computes each present key's dot
//! product with four f32x4 accumulators (lanes `4t..4t+4` of the contract's
//! 16 in accumulator `t`; `fma` lowers to `vfmadd` on FMA hosts and `fmla`
//! on arm64), folds it, and stores the scaled score in a 16-slot stack
//! buffer pre-filled with `-inf`; then the softmax update runs on the four
//! score vectors (an absent key's `-inf` gives `p = E(-inf - u) = +0`, the
//! contract's padding), the weights go to a second stack buffer, and the
//! output accumulators (`d/4` f32x4 values) take `o·α` and one `fma` per
//! present key. binary16 K/V are widened with integer operations
//! (Cranelift has no vector f16 conversion); the widening is exact.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, Endianness, Function, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind, Value,
};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use weft_kernel::{
    Family, Host, Isa, Kernel, KernelArgs, LoopTrip, MemberViews, NativeCode, Offer, Refusal, Site,
};
use weft_managed::{ArmCode, ManagedError, Target};

use weft_managed::arm_build::{build_native, host_isa};

use super::reference::{self, F32Ops};
use super::{
    contract, exp_consts, offsets, AttentionArgs, AttentionShape, KvSlice, KvType, Layout,
    SiteShape, BLOCK, FAMILY,
};

/// The fused arm's candidate name.
pub const ARM_NAME: &str = "attention.fused.arm.f32x4";

/// Little-endian flags (bit casts).
pub(crate) fn le() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

/// Data accesses: in bounds by the arguments' constructor.
pub(crate) fn data_flags() -> MemFlagsData {
    let mut f = le();
    f.set_notrap();
    f
}

/// [`F32Ops`] over Cranelift `f32x4` values.
pub(crate) struct ClifF32<'a, 'b> {
    pub(crate) b: &'a mut FunctionBuilder<'b>,
}

impl F32Ops for ClifF32<'_, '_> {
    type V = Value;
    fn c(&mut self, bits: u32) -> Value {
        let s = self.b.ins().f32const(f32::from_bits(bits));
        self.b.ins().splat(types::F32X4, s)
    }
    fn sub(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fsub(a, b)
    }
    fn mul(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fmul(a, b)
    }
    fn fma(&mut self, a: Value, b: Value, c: Value) -> Value {
        self.b.ins().fma(a, b, c)
    }
    fn pow2(&mut self, t: Value) -> Value {
        let bits = self.b.ins().bitcast(types::I32X4, le(), t);
        let sh = self.b.ins().ishl_imm_u(bits, 23);
        let one = self
            .b
            .ins()
            .iconst(types::I32, i64::from(exp_consts::ONE_BITS));
        let one = self.b.ins().splat(types::I32X4, one);
        let s = self.b.ins().iadd(sh, one);
        self.b.ins().bitcast(types::F32X4, le(), s)
    }
    fn zero_below(&mut self, x: Value, lo: Value, y: Value) -> Value {
        let m = self.b.ins().fcmp(FloatCC::LessThan, x, lo);
        let m = self.b.ins().bitcast(types::F32X4, le(), m);
        let z = self.b.ins().f32const(0.0);
        let z = self.b.ins().splat(types::F32X4, z);
        self.b.ins().bitselect(m, z, y)
    }
}

/// binary16 bits, zero-extended in each i32 lane of `h`, to f32x4 exactly:
/// normal `(em << 13) + (112 << 23)`; inf/NaN (`em ≥ 0x7c00`) another
/// `112 << 23`; subnormal/zero (`em < 0x400`) `f32(em) · 2^-24` (exact);
/// then the sign `(h & 0x8000) << 16`.
pub(crate) fn widen_f16(b: &mut FunctionBuilder<'_>, h: Value) -> Value {
    let splat = |b: &mut FunctionBuilder<'_>, v: i64| {
        let c = b.ins().iconst(types::I32, v);
        b.ins().splat(types::I32X4, c)
    };
    let mask_em = splat(b, 0x7fff);
    let mask_sign = splat(b, 0x8000);
    let adj = splat(b, 112 << 23);
    let inf = splat(b, 0x7c00);
    let subn = splat(b, 0x400);
    let em = b.ins().band(h, mask_em);
    let sign = b.ins().band(h, mask_sign);
    let sign = b.ins().ishl_imm_u(sign, 16);
    let shifted = b.ins().ishl_imm_u(em, 13);
    let normal = b.ins().iadd(shifted, adj);
    let special = b.ins().iadd(normal, adj);
    let is_special = b.ins().icmp(IntCC::SignedGreaterThanOrEqual, em, inf);
    let v = b.ins().bitselect(is_special, special, normal);
    let emf = b.ins().fcvt_from_sint(types::F32X4, em);
    let scale = b.ins().f32const(2f32.powi(-24));
    let scale = b.ins().splat(types::F32X4, scale);
    let subf = b.ins().fmul(emf, scale);
    let sub = b.ins().bitcast(types::I32X4, le(), subf);
    let is_sub = b.ins().icmp(IntCC::SignedLessThan, em, subn);
    let v = b.ins().bitselect(is_sub, sub, v);
    let v = b.ins().bor(v, sign);
    b.ins().bitcast(types::F32X4, le(), v)
}

/// Four K or V elements (f32x4) at `p + 4·elem` for `kv`'s element type.
pub(crate) fn load4(b: &mut FunctionBuilder<'_>, kv: KvType, p: Value, elem: usize) -> Value {
    match kv {
        KvType::F32 => b
            .ins()
            .load(types::F32X4, data_flags(), p, (4 * elem) as i32),
        KvType::F16 => {
            let h = b.ins().uload16x4(data_flags(), p, (2 * elem) as i32);
            widen_f16(b, h)
        }
    }
}

/// The contract's fold of 16 lanes held as four f32x4 (`a[t]` = lanes
/// `4t..4t+4`): `(a0 + a2) + (a1 + a3)`, then `(h0 + h1) + (h2 + h3)`.
pub(crate) fn fold16(b: &mut FunctionBuilder<'_>, a: [Value; 4]) -> Value {
    let x = b.ins().fadd(a[0], a[2]);
    let y = b.ins().fadd(a[1], a[3]);
    let h = b.ins().fadd(x, y);
    let h0 = b.ins().extractlane(h, 0);
    let h1 = b.ins().extractlane(h, 1);
    let h2 = b.ins().extractlane(h, 2);
    let h3 = b.ins().extractlane(h, 3);
    let p = b.ins().fadd(h0, h1);
    let q = b.ins().fadd(h2, h3);
    b.ins().fadd(p, q)
}

/// The contract's dot product of the q row (`d/4` f32x4 values) with the
/// K row at `kp`, as the f32 scalar.
pub(crate) fn dot(b: &mut FunctionBuilder<'_>, kv: KvType, q: &[Value], kp: Value) -> Value {
    let z = b.ins().f32const(0.0);
    let z = b.ins().splat(types::F32X4, z);
    let mut a = [z; 4];
    for (n, qv) in q.iter().enumerate() {
        let kvec = load4(b, kv, kp, 4 * n);
        let t = n % 4;
        a[t] = b.ins().fma(*qv, kvec, a[t]);
    }
    fold16(b, a)
}

/// Everything the arguments give, loaded once in the entry block.
pub(crate) struct ArgVals {
    pub(crate) q: Value,
    pub(crate) k: Value,
    pub(crate) v: Value,
    pub(crate) o: Value,
    pub(crate) q_head: Value,
    pub(crate) q_row: Value,
    pub(crate) k_head: Value,
    pub(crate) k_pos: Value,
    pub(crate) v_head: Value,
    pub(crate) v_pos: Value,
    pub(crate) o_head: Value,
    pub(crate) o_row: Value,
    pub(crate) lq: Value,
    pub(crate) lk: Value,
    pub(crate) group: Value,
    pub(crate) q_offset: Value,
    pub(crate) causal: Value,
    pub(crate) scale: Value,
    pub(crate) unit_start: Value,
    pub(crate) unit_end: Value,
}

/// Load the fields of [`AttentionArgs`] (byte strides for the element sizes).
pub(crate) fn load_args(
    b: &mut FunctionBuilder<'_>,
    ptr: types::Type,
    args: Value,
    kv: KvType,
) -> ArgVals {
    let t = MemFlagsData::trusted();
    let mut ld = |off: i32| b.ins().load(ptr, t, args, off);
    let q = ld(offsets::Q);
    let k = ld(offsets::K);
    let v = ld(offsets::V);
    let o = ld(offsets::O);
    let q_head = ld(offsets::Q_HEAD);
    let q_row = ld(offsets::Q_ROW);
    let k_head = ld(offsets::K_HEAD);
    let k_pos = ld(offsets::K_POS);
    let v_head = ld(offsets::V_HEAD);
    let v_pos = ld(offsets::V_POS);
    let o_head = ld(offsets::O_HEAD);
    let o_row = ld(offsets::O_ROW);
    let lq = ld(offsets::LQ);
    let lk = ld(offsets::LK);
    let group = ld(offsets::GROUP);
    let q_offset = ld(offsets::Q_OFFSET);
    let causal = ld(offsets::CAUSAL);
    let unit_start = ld(offsets::UNIT_START);
    let unit_end = ld(offsets::UNIT_END);
    let scale = b.ins().load(types::F32, t, args, offsets::SCALE);
    let es = kv.bytes().trailing_zeros() as i64;
    let mut bytes = |x: Value, sh: i64| b.ins().ishl_imm_u(x, sh);
    ArgVals {
        q,
        k,
        v,
        o,
        q_head: bytes(q_head, 2),
        q_row: bytes(q_row, 2),
        k_head: bytes(k_head, es),
        k_pos: bytes(k_pos, es),
        v_head: bytes(v_head, es),
        v_pos: bytes(v_pos, es),
        o_head: bytes(o_head, 2),
        o_row: bytes(o_row, 2),
        lq,
        lk,
        group,
        q_offset,
        causal,
        scale,
        unit_start,
        unit_end,
    }
}

/// `n_i`: `causal ? min(lk, q_offset + i + 1) : lk`.
pub(crate) fn visible(b: &mut FunctionBuilder<'_>, a: &ArgVals, i: Value) -> Value {
    let lim = b.ins().iadd(a.q_offset, i);
    let lim = b.ins().iadd_imm_s(lim, 1);
    let lim = b.ins().umin(lim, a.lk);
    let is_causal = b.ins().icmp_imm_u(IntCC::NotEqual, a.causal, 0);
    b.ins().select(is_causal, lim, a.lk)
}

/// A unit's head, first row and one-past-last row.
pub(crate) fn unit_rows(
    b: &mut FunctionBuilder<'_>,
    a: &ArgVals,
    row_blocks: Value,
    u: Value,
) -> (Value, Value, Value) {
    let h = b.ins().udiv(u, row_blocks);
    let hb = b.ins().imul(h, row_blocks);
    let rb = b.ins().isub(u, hb);
    let i0 = b.ins().ishl_imm_u(rb, 4);
    let i1 = b.ins().iadd_imm_s(i0, 16);
    let i1 = b.ins().umin(i1, a.lq);
    (h, i0, i1)
}

/// Build the fused arm's CLIF function for `d` and `kv`.
pub fn build_function(target: &Target, d: usize, kv: KvType) -> Function {
    let mut func = target.leaf_function(&format!("attention_fused_d{d}_{}", kv.name()));
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut fctx);
    let ptr = target.pointer_type();
    let df = data_flags();
    let nq = d / 4;

    let s_slot = b.create_sized_stack_slot(StackSlotData::new(
        StackSlotKind::ExplicitSlot,
        4 * BLOCK as u32,
        4,
    ));
    let p_slot = b.create_sized_stack_slot(StackSlotData::new(
        StackSlotKind::ExplicitSlot,
        4 * BLOCK as u32,
        4,
    ));

    let entry = b.create_block();
    let unit_head = b.create_block();
    let unit_body = b.create_block();
    let row_head = b.create_block();
    let row_body = b.create_block();
    let blk_head = b.create_block();
    let blk_body = b.create_block();
    let key_head = b.create_block();
    let key_body = b.create_block();
    let soft = b.create_block();
    let pv_head = b.create_block();
    let pv_body = b.create_block();
    let blk_next = b.create_block();
    let row_fin = b.create_block();
    let exit = b.create_block();

    let var_u = b.declare_var(ptr);
    let var_i = b.declare_var(ptr);
    let var_i1 = b.declare_var(ptr);
    let var_qh = b.declare_var(ptr);
    let var_oh = b.declare_var(ptr);
    let var_kh = b.declare_var(ptr);
    let var_vh = b.declare_var(ptr);
    let var_b0 = b.declare_var(ptr);
    let var_kk = b.declare_var(ptr);
    let var_m = b.declare_var(types::F32);
    let var_o: Vec<Variable> = (0..nq).map(|_| b.declare_var(types::F32X4)).collect();
    let var_l: Vec<Variable> = (0..4).map(|_| b.declare_var(types::F32X4)).collect();

    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let args = b.block_params(entry)[0];
    let a = load_args(&mut b, ptr, args, kv);
    let lq15 = b.ins().iadd_imm_s(a.lq, 15);
    let row_blocks = b.ins().ushr_imm_u(lq15, 4);
    let fzero = b.ins().f32const(0.0);
    let vzero = b.ins().splat(types::F32X4, fzero);
    let neg_inf = b.ins().f32const(f32::NEG_INFINITY);
    let vneg_inf = b.ins().splat(types::F32X4, neg_inf);
    b.def_var(var_u, a.unit_start);
    b.ins().jump(unit_head, &[]);

    b.switch_to_block(unit_head);
    let u = b.use_var(var_u);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, u, a.unit_end);
    b.ins().brif(more, unit_body, &[], exit, &[]);

    b.switch_to_block(unit_body);
    let u = b.use_var(var_u);
    let (h, i0, i1) = unit_rows(&mut b, &a, row_blocks, u);
    let g = b.ins().udiv(h, a.group);
    let off = b.ins().imul(h, a.q_head);
    let qh = b.ins().iadd(a.q, off);
    let off = b.ins().imul(h, a.o_head);
    let oh = b.ins().iadd(a.o, off);
    let off = b.ins().imul(g, a.k_head);
    let kh = b.ins().iadd(a.k, off);
    let off = b.ins().imul(g, a.v_head);
    let vh = b.ins().iadd(a.v, off);
    b.def_var(var_qh, qh);
    b.def_var(var_oh, oh);
    b.def_var(var_kh, kh);
    b.def_var(var_vh, vh);
    b.def_var(var_i, i0);
    b.def_var(var_i1, i1);
    b.ins().jump(row_head, &[]);

    b.switch_to_block(row_head);
    let i = b.use_var(var_i);
    let i1 = b.use_var(var_i1);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, i, i1);
    let u_next = b.create_block();
    b.ins().brif(more, row_body, &[], u_next, &[]);

    b.switch_to_block(u_next);
    let u = b.use_var(var_u);
    let u1 = b.ins().iadd_imm_s(u, 1);
    b.def_var(var_u, u1);
    b.ins().jump(unit_head, &[]);

    // row_body: q row, visible keys, fresh state.
    b.switch_to_block(row_body);
    let i = b.use_var(var_i);
    let qh = b.use_var(var_qh);
    let off = b.ins().imul(i, a.q_row);
    let qrow = b.ins().iadd(qh, off);
    let q: Vec<Value> = (0..nq)
        .map(|n| b.ins().load(types::F32X4, df, qrow, (16 * n) as i32))
        .collect();
    let n = visible(&mut b, &a, i);
    for v in &var_o {
        b.def_var(*v, vzero);
    }
    for v in &var_l {
        b.def_var(*v, vzero);
    }
    b.def_var(var_m, neg_inf);
    let zero = b.ins().iconst(ptr, 0);
    b.def_var(var_b0, zero);
    b.ins().jump(blk_head, &[]);

    b.switch_to_block(blk_head);
    let b0 = b.use_var(var_b0);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, b0, n);
    b.ins().brif(more, blk_body, &[], row_fin, &[]);

    // blk_body: scores of the present keys into s_slot (-inf elsewhere).
    b.switch_to_block(blk_body);
    for t in 0..4 {
        b.ins().stack_store(ptr, vneg_inf, s_slot, 16 * t);
    }
    let zero = b.ins().iconst(ptr, 0);
    b.def_var(var_kk, zero);
    b.ins().jump(key_head, &[]);

    b.switch_to_block(key_head);
    let b0 = b.use_var(var_b0);
    let left = b.ins().isub(n, b0);
    let blk = b.ins().iconst(ptr, BLOCK as i64);
    let nb = b.ins().umin(left, blk);
    let kk = b.use_var(var_kk);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, kk, nb);
    b.ins().brif(more, key_body, &[], soft, &[]);

    b.switch_to_block(key_body);
    let kk = b.use_var(var_kk);
    let b0 = b.use_var(var_b0);
    let kh = b.use_var(var_kh);
    let j = b.ins().iadd(b0, kk);
    let off = b.ins().imul(j, a.k_pos);
    let kp = b.ins().iadd(kh, off);
    let s = dot(&mut b, kv, &q, kp);
    let s = b.ins().fmul(s, a.scale);
    let off = b.ins().ishl_imm_u(kk, 2);
    let sp = b.ins().stack_addr(ptr, s_slot, 0);
    let sp = b.ins().iadd(sp, off);
    b.ins().store(df, s, sp, 0);
    let kk1 = b.ins().iadd_imm_s(kk, 1);
    b.def_var(var_kk, kk1);
    b.ins().jump(key_head, &[]);

    // soft: the softmax update on the four score vectors.
    b.switch_to_block(soft);
    let sv: Vec<Value> = (0..4)
        .map(|t| b.ins().stack_load(ptr, types::F32X4, s_slot, 16 * t))
        .collect();
    let x = b.ins().fmax(sv[0], sv[1]);
    let y = b.ins().fmax(sv[2], sv[3]);
    let mx = b.ins().fmax(x, y);
    let m0 = b.ins().extractlane(mx, 0);
    let m1 = b.ins().extractlane(mx, 1);
    let m2 = b.ins().extractlane(mx, 2);
    let m3 = b.ins().extractlane(mx, 3);
    let x = b.ins().fmax(m0, m1);
    let y = b.ins().fmax(m2, m3);
    let bm = b.ins().fmax(x, y);
    let m_old = b.use_var(var_m);
    let m_new = b.ins().fmax(m_old, bm);
    let is_neg_inf = b.ins().fcmp(FloatCC::Equal, m_new, neg_inf);
    let u = b.ins().select(is_neg_inf, fzero, m_new);
    let da = b.ins().fsub(m_old, u);
    let da = b.ins().splat(types::F32X4, da);
    let uv = b.ins().splat(types::F32X4, u);
    let (alpha, p) = {
        let mut l = ClifF32 { b: &mut b };
        let alpha = reference::exp(&mut l, da);
        let p: Vec<Value> = sv
            .iter()
            .map(|s| {
                let x = l.b.ins().fsub(*s, uv);
                reference::exp(&mut l, x)
            })
            .collect();
        (alpha, p)
    };
    for (t, v) in var_l.iter().enumerate() {
        let lt = b.use_var(*v);
        let lt = b.ins().fma(lt, alpha, p[t]);
        b.def_var(*v, lt);
        b.ins().stack_store(ptr, p[t], p_slot, 16 * t as i32);
    }
    for v in &var_o {
        let ot = b.use_var(*v);
        let ot = b.ins().fmul(ot, alpha);
        b.def_var(*v, ot);
    }
    b.def_var(var_m, m_new);
    let zero = b.ins().iconst(ptr, 0);
    b.def_var(var_kk, zero);
    b.ins().jump(pv_head, &[]);

    b.switch_to_block(pv_head);
    let b0 = b.use_var(var_b0);
    let left = b.ins().isub(n, b0);
    let blk = b.ins().iconst(ptr, BLOCK as i64);
    let nb = b.ins().umin(left, blk);
    let kk = b.use_var(var_kk);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, kk, nb);
    b.ins().brif(more, pv_body, &[], blk_next, &[]);

    b.switch_to_block(pv_body);
    let kk = b.use_var(var_kk);
    let b0 = b.use_var(var_b0);
    let vh = b.use_var(var_vh);
    let off = b.ins().ishl_imm_u(kk, 2);
    let pp = b.ins().stack_addr(ptr, p_slot, 0);
    let pp = b.ins().iadd(pp, off);
    let pk = b.ins().load(types::F32, df, pp, 0);
    let pk = b.ins().splat(types::F32X4, pk);
    let j = b.ins().iadd(b0, kk);
    let off = b.ins().imul(j, a.v_pos);
    let vp = b.ins().iadd(vh, off);
    for (t, v) in var_o.iter().enumerate() {
        let vv = load4(&mut b, kv, vp, 4 * t);
        let ot = b.use_var(*v);
        let ot = b.ins().fma(pk, vv, ot);
        b.def_var(*v, ot);
    }
    let kk1 = b.ins().iadd_imm_s(kk, 1);
    b.def_var(var_kk, kk1);
    b.ins().jump(pv_head, &[]);

    b.switch_to_block(blk_next);
    let b0 = b.use_var(var_b0);
    let b1 = b.ins().iadd_imm_s(b0, BLOCK as i64);
    b.def_var(var_b0, b1);
    b.ins().jump(blk_head, &[]);

    // row_fin: O = o / fold(l).
    b.switch_to_block(row_fin);
    let l: Vec<Value> = var_l.iter().map(|v| b.use_var(*v)).collect();
    let total = fold16(&mut b, [l[0], l[1], l[2], l[3]]);
    let total = b.ins().splat(types::F32X4, total);
    let i = b.use_var(var_i);
    let oh = b.use_var(var_oh);
    let off = b.ins().imul(i, a.o_row);
    let orow = b.ins().iadd(oh, off);
    for (t, v) in var_o.iter().enumerate() {
        let ot = b.use_var(*v);
        let out = b.ins().fdiv(ot, total);
        b.ins().store(df, out, orow, (16 * t) as i32);
    }
    let i1 = b.ins().iadd_imm_s(i, 1);
    b.def_var(var_i, i1);
    b.ins().jump(row_head, &[]);

    b.switch_to_block(exit);
    b.ins().return_(&[]);
    b.seal_all_blocks();
    b.finalize(target.frontend_config());
    func
}

/// Compile the fused arm for `target`.
pub fn compile(target: &Target, d: usize, kv: KvType) -> Result<ArmCode, ManagedError> {
    target.compile(build_function(target, d, kv))
}

/// The fused arm as a [`weft_kernel::Arm`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AttentionArm;

/// The offer every candidate of the fused family shares at `site`.
pub fn offer_for(site: &SiteShape) -> Offer {
    let units = site.units();
    let blocks = site.lk.div_ceil(BLOCK as u64);
    let kv_bytes = 2 * site.kv_heads * site.lk * site.d as u64 * site.kv.bytes() as u64;
    let q_bytes = 2 * 4 * site.heads * site.lq * site.d as u64;
    Offer {
        contract: contract(site),
        packed: Vec::new(),
        views: Some(MemberViews {
            axis: "units".to_owned(),
            extent: units,
            granule: 1,
        }),
        loops: vec![
            LoopTrip {
                name: "units".to_owned(),
                trips: units,
                depth: 0,
            },
            LoopTrip {
                name: "rows".to_owned(),
                trips: site.lq.min(16),
                depth: 1,
            },
            LoopTrip {
                name: "blocks".to_owned(),
                trips: blocks,
                depth: 2,
            },
            LoopTrip {
                name: "keys".to_owned(),
                trips: BLOCK as u64,
                depth: 3,
            },
        ],
        flops: 4 * site.pairs() * site.d as u64 * site.heads,
        bytes_moved: kv_bytes + q_bytes,
    }
}

fn family_check(site: &Site) -> Result<(), Refusal> {
    if site.family.name() != FAMILY {
        return Err(Refusal::UnsupportedGeometry {
            reason: format!("family {} is not {FAMILY}", site.family),
        });
    }
    Ok(())
}

// SAFETY: the body reads q, k, v and writes the outputs of the units in
// its range only, inside the extents AttentionArgs::new checks, and
// returns normally (module docs); validation checks its results.
unsafe impl weft_kernel::Arm for AttentionArm {
    fn name(&self) -> &'static str {
        ARM_NAME
    }

    fn family(&self) -> Family {
        Family(FAMILY)
    }

    fn offer(&self, site: &Site, _host: &Host) -> Result<Offer, Refusal> {
        family_check(site)?;
        let s = SiteShape::from_geometry(&site.geometry)?;
        Ok(offer_for(&s))
    }

    fn build(&self, offer: &Offer, isa: Isa) -> Result<NativeCode, Refusal> {
        if offer.contract.family != FAMILY {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!("offer is for {}", offer.contract.family),
            });
        }
        let s = SiteShape::from_geometry(&offer.contract.geometry)?;
        build_native(isa, |t| compile(t, s.d, s.kv))
    }
}

/// A site geometry for a body of `d` and `kv` (the other sizes only price).
pub fn body_site(d: usize, kv: KvType) -> SiteShape {
    SiteShape {
        d,
        kv,
        lq: 1,
        lk: 1,
        heads: 1,
        kv_heads: 1,
        causal: false,
    }
}

/// A placed `attention.fused` kernel (arm or twin) for one `d` and one
/// [`KvType`], with a checked interface.
pub struct AttentionKernel {
    kernel: Kernel<AttentionArgs>,
    d: usize,
    kv: KvType,
}

impl std::fmt::Debug for AttentionKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttentionKernel")
            .field("d", &self.d)
            .field("kv", &self.kv)
            .field("kernel", &self.kernel)
            .finish()
    }
}

impl AttentionKernel {
    /// Place `code`, a body for head dimension `d` and `kv`.
    ///
    /// # Safety
    ///
    /// `code` must be an `attention.fused` body for the host built for `d`
    /// and `kv`, honouring the leaf ABI for [`AttentionArgs`]: it reads
    /// only the Q, K, V elements the arguments' extents name, writes only
    /// the output rows of the units in `unit_start..unit_end`, and returns.
    pub unsafe fn from_native(code: &NativeCode, d: usize, kv: KvType) -> Result<Self, Refusal> {
        // SAFETY: the caller promises an attention.fused leaf body.
        let kernel = unsafe { Kernel::from_native(code)? };
        Ok(Self { kernel, d, kv })
    }

    /// Compile the host arm for `d` and `kv` and place it.
    pub fn of_arm(d: usize, kv: KvType) -> Result<Self, Refusal> {
        let offer = offer_for(&SiteShape {
            d: super::check_d(d as u64)?,
            ..body_site(d, kv)
        });
        let code = weft_kernel::Arm::build(&AttentionArm, &offer, host_isa())?;
        // SAFETY: the arm's CLIF (above) reads and writes only what the
        // arguments name and returns.
        unsafe { Self::from_native(&code, d, kv) }
    }

    /// The head dimension the body was built for.
    pub fn d(&self) -> usize {
        self.d
    }

    /// The K/V element type the body was built for.
    pub fn kv(&self) -> KvType {
        self.kv
    }

    fn check(&self, shape: &AttentionShape) -> Result<(), Refusal> {
        if shape.d != self.d || shape.kv != self.kv {
            return Err(Refusal::BadOperand {
                operand: "shape".to_owned(),
                reason: format!(
                    "d {} {:?}, the body is for d {} {:?}",
                    shape.d, shape.kv, self.d, self.kv
                ),
            });
        }
        Ok(())
    }

    /// Every output of `shape`, lengths checked.
    pub fn run(
        &self,
        shape: &AttentionShape,
        layout: &Layout,
        q: &[f32],
        k: KvSlice<'_>,
        v: KvSlice<'_>,
        o: &mut [f32],
    ) -> Result<(), Refusal> {
        let args = AttentionArgs::new(shape, layout, q, k, v, o)?;
        self.check(shape)?;
        // SAFETY: `new` checked every extent against the borrowed buffers,
        // which outlive the call.
        unsafe { self.kernel.call(&args) };
        Ok(())
    }

    /// The outputs of units `units` only.
    #[allow(clippy::too_many_arguments)]
    pub fn run_units(
        &self,
        shape: &AttentionShape,
        layout: &Layout,
        q: &[f32],
        k: KvSlice<'_>,
        v: KvSlice<'_>,
        o: &mut [f32],
        units: std::ops::Range<usize>,
    ) -> Result<(), Refusal> {
        let whole = AttentionArgs::new(shape, layout, q, k, v, o)?;
        self.check(shape)?;
        if units.start > units.end || units.end > whole.unit_end {
            return Err(Refusal::BadOperand {
                operand: "units".to_owned(),
                reason: format!("{units:?} is not inside 0..{}", whole.unit_end),
            });
        }
        let part = whole.restrict(units.start as u64..units.end as u64);
        // SAFETY: as in `run`; the part covers a sub-range of the units.
        unsafe { self.kernel.call(&part) };
        Ok(())
    }

    /// Every output, the units split by `views` into at most `threads`
    /// ranges on scoped threads; bit-identical to one call.
    #[allow(clippy::too_many_arguments)]
    pub fn run_threaded(
        &self,
        shape: &AttentionShape,
        layout: &Layout,
        q: &[f32],
        k: KvSlice<'_>,
        v: KvSlice<'_>,
        o: &mut [f32],
        views: &MemberViews,
        threads: u64,
    ) -> Result<(), Refusal> {
        let whole = AttentionArgs::new(shape, layout, q, k, v, o)?;
        self.check(shape)?;
        if views.axis != "units" || views.extent != whole.unit_end as u64 {
            return Err(Refusal::BadOperand {
                operand: "views".to_owned(),
                reason: format!(
                    "{} of extent {} does not split these {} units",
                    views.axis, views.extent, whole.unit_end
                ),
            });
        }
        std::thread::scope(|scope| {
            for r in views.split(threads) {
                let part = whole.restrict(r);
                let kernel = &self.kernel;
                // SAFETY: `whole` was checked against the buffers, which
                // outlive the scope; the parts' unit ranges are disjoint
                // and a body writes only its units' output rows, which
                // `new` checked are disjoint (KernelArgs' promise).
                scope.spawn(move || unsafe { kernel.call(&part) });
            }
        });
        Ok(())
    }
}
