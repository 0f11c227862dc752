//! The algorithms of [`crate::reference`] in CLIF: a [`Lanes`] over
//! Cranelift values, and exp emitted into a caller's function (scalar and
//! f32x4), the way the elementwise arm and generated kernels inline it.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;

use crate::reference::{self, Lanes};
use crate::table;

/// [`Lanes`] over Cranelift values: scalar `f64`/`i64` or `f64x2`/`i64x2`.
pub struct Clif<'a, 'b> {
    /// The function being built, at the block where values go.
    pub b: &'a mut FunctionBuilder<'b>,
    /// `f64x2`/`i64x2` lanes (true) or scalars.
    pub vector: bool,
    /// The address of [`crate::ELEMENTWISE_TABLE`].
    pub table: Value,
}

impl Clif<'_, '_> {
    fn fty(&self) -> Type {
        if self.vector {
            types::F64X2
        } else {
            types::F64
        }
    }
    fn ity(&self) -> Type {
        if self.vector {
            types::I64X2
        } else {
            types::I64
        }
    }
    fn le() -> MemFlagsData {
        MemFlagsData::new().with_endianness(Endianness::Little)
    }
    fn load_entry(&mut self, base: usize, j: Value) -> Value {
        let off = self.b.ins().ishl_imm_u(j, 3);
        let addr = self.b.ins().iadd(self.table, off);
        let disp = i32::try_from(base * 8).unwrap_or(i32::MAX);
        self.b
            .ins()
            .load(types::I64, MemFlagsData::trusted(), addr, disp)
    }
}

impl Lanes for Clif<'_, '_> {
    type F = Value;
    type I = Value;
    fn c(&mut self, v: f64) -> Value {
        let s = self.b.ins().f64const(v);
        if self.vector {
            self.b.ins().splat(types::F64X2, s)
        } else {
            s
        }
    }
    fn ic(&mut self, v: i64) -> Value {
        let s = self.b.ins().iconst(types::I64, v);
        if self.vector {
            self.b.ins().splat(types::I64X2, s)
        } else {
            s
        }
    }
    fn add(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fadd(a, b)
    }
    fn sub(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fsub(a, b)
    }
    fn mul(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fmul(a, b)
    }
    fn fmin(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fmin(a, b)
    }
    fn fmax(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fmax(a, b)
    }
    fn abs(&mut self, a: Value) -> Value {
        self.b.ins().fabs(a)
    }
    fn bits(&mut self, a: Value) -> Value {
        let t = self.ity();
        self.b.ins().bitcast(t, Self::le(), a)
    }
    fn from_bits(&mut self, a: Value) -> Value {
        let t = self.fty();
        self.b.ins().bitcast(t, Self::le(), a)
    }
    fn iadd(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().iadd(a, b)
    }
    fn band(&mut self, a: Value, m: i64) -> Value {
        let m = self.ic(m);
        self.b.ins().band(a, m)
    }
    fn shl(&mut self, a: Value, s: u8) -> Value {
        self.b.ins().ishl_imm_u(a, i64::from(s))
    }
    fn ushr(&mut self, a: Value, s: u8) -> Value {
        self.b.ins().ushr_imm_u(a, i64::from(s))
    }
    fn floor(&mut self, a: Value) -> Value {
        self.b.ins().floor(a)
    }
    fn select_lt(&mut self, a: Value, b: Value, t: Value, e: Value) -> Value {
        let m = self.b.ins().fcmp(FloatCC::LessThan, a, b);
        if self.vector {
            let m = self.b.ins().bitcast(types::F64X2, Self::le(), m);
            self.b.ins().bitselect(m, t, e)
        } else {
            self.b.ins().select(m, t, e)
        }
    }
    fn tab(&mut self, base: usize, j: Value) -> Value {
        if self.vector {
            let j0 = self.b.ins().extractlane(j, 0);
            let j1 = self.b.ins().extractlane(j, 1);
            let v0 = self.load_entry(base, j0);
            let v1 = self.load_entry(base, j1);
            let v = self.b.ins().splat(types::I64X2, v0);
            self.b.ins().insertlane(v, v1, 1)
        } else {
            self.load_entry(base, j)
        }
    }
}

/// Per-element memory flags: little-endian, f32-aligned at most, may not
/// trap (the contract guarantees `len` readable/writable elements).
pub fn elem_flags() -> MemFlagsData {
    let mut f = MemFlagsData::new();
    f.set_notrap();
    f
}

/// The scalar rounding decision of [`reference::round_dd_to_f32`] in CLIF.
pub fn round_dd_clif(b: &mut FunctionBuilder<'_>, hi: Value, lo: Value, rel: f64) -> Value {
    let le = MemFlagsData::new().with_endianness(Endianness::Little);
    let f = b.ins().fdemote(types::F32, hi);
    let fb = b.ins().bitcast(types::I32, le, f);
    let upb = b.ins().iadd_imm_s(fb, 1);
    let downb = b.ins().iadd_imm_s(fb, -1);
    let upf = b.ins().bitcast(types::F32, le, upb);
    let downf = b.ins().bitcast(types::F32, le, downb);
    let up = b.ins().fpromote(types::F64, upf);
    let two128 = b.ins().f64const(2f64.powi(128));
    let is_max = b.ins().icmp_imm_s(IntCC::Equal, fb, 0x7f7f_ffff);
    let up = b.ins().select(is_max, two128, up);
    let down = b.ins().fpromote(types::F64, downf);
    let fv = b.ins().fpromote(types::F64, f);
    let half = b.ins().f64const(0.5);
    let mu = b.ins().fadd(fv, up);
    let mu = b.ins().fmul(mu, half);
    let md = b.ins().fadd(fv, down);
    let md = b.ins().fmul(md, half);
    let relc = b.ins().f64const(rel);
    let err = b.ins().fmul(relc, hi);
    let nerr = b.ins().fneg(err);
    let bu = b.ins().fsub(hi, mu);
    let bu = b.ins().fadd(bu, lo);
    let bd = b.ins().fsub(hi, md);
    let bd = b.ins().fadd(bd, lo);
    let c_down = b.ins().fcmp(FloatCC::LessThan, bd, nerr);
    let r = b.ins().select(c_down, downf, f);
    let c_und = b.ins().fcmp(FloatCC::GreaterThanOrEqual, bu, nerr);
    let r = b.ins().select(c_und, f, r);
    let c_up = b.ins().fcmp(FloatCC::GreaterThan, bu, err);
    b.ins().select(c_up, upf, r)
}

/// `exp(x)` for one f32 `x`, correctly rounded, emitted into `b` at its
/// current block: the arm's scalar path (fast path, rounding test,
/// double-double slow path, exact rounding decision), the same steps as
/// [`reference::exp_f32`]. `table` must hold `ELEMENTWISE_TABLE.as_ptr()`.
///
/// For generated kernels that need exp inside a larger body (the
/// `weft-loopnest` SiLU). The builder ends in a new block where the
/// returned f32 is defined; the blocks it creates are left for the
/// caller's `seal_all_blocks`.
pub fn emit_exp_f32(b: &mut FunctionBuilder<'_>, table: Value, x: Value) -> Value {
    let le = MemFlagsData::new().with_endianness(Endianness::Little);
    let slow = b.create_block();
    let join = b.create_block();
    let out = b.append_block_param(join, types::F32);
    let xd = b.ins().fpromote(types::F64, x);
    let mut l = Clif {
        b: &mut *b,
        vector: false,
        table,
    };
    let y = reference::exp_fast(&mut l, xd);
    let (lo, hi) = reference::exp_fast_interval(&mut l, y);
    let flo = b.ins().fdemote(types::F32, lo);
    let fhi = b.ins().fdemote(types::F32, hi);
    let blo = b.ins().bitcast(types::I32, le, flo);
    let bhi = b.ins().bitcast(types::I32, le, fhi);
    let same = b.ins().icmp(IntCC::Equal, blo, bhi);
    b.ins().brif(same, join, &[flo.into()], slow, &[]);

    b.switch_to_block(slow);
    let mut l = Clif {
        b: &mut *b,
        vector: false,
        table,
    };
    let d = reference::exp_slow(&mut l, xd);
    let r = round_dd_clif(b, d.hi, d.lo, table::EXP_SLOW_ERR);
    b.ins().jump(join, &[r.into()]);

    b.switch_to_block(join);
    out
}

/// `exp` of each lane of an f32x4 `x`, correctly rounded, emitted into `b`
/// at its current block: the arm's vector step (two f64x2 halves, fast
/// path, rounding test); if any lane fails the test, all four lanes are
/// recomputed one by one by [`emit_exp_f32`] through a 16-byte stack
/// slot (one copy of the scalar path, taken for about 1 input in 2^25).
/// `table` must hold `ELEMENTWISE_TABLE.as_ptr()`; `ptr` is the target's
/// pointer type. Blocks are left for the caller's `seal_all_blocks`.
pub fn emit_exp_f32x4(b: &mut FunctionBuilder<'_>, ptr: Type, table: Value, x: Value) -> Value {
    use cranelift_codegen::ir::{StackSlotData, StackSlotKind};
    let le = MemFlagsData::new().with_endianness(Endianness::Little);
    // Lanes 0,1 and 2,3 as two f64x2.
    let xi = b.ins().bitcast(types::I64X2, le, x);
    let upper = b.ins().extractlane(xi, 1);
    let upper = b.ins().scalar_to_vector(types::I64X2, upper);
    let upper = b.ins().bitcast(types::F32X4, le, upper);
    let halves = [b.ins().fvpromote_low(x), b.ins().fvpromote_low(upper)];
    let mut words = [xi; 2];
    let mut fails = [xi; 2];
    for ((h, word), fail) in halves.into_iter().zip(&mut words).zip(&mut fails) {
        let mut l = Clif {
            b: &mut *b,
            vector: true,
            table,
        };
        let y = reference::exp_fast(&mut l, h);
        let (lo, hi) = reference::exp_fast_interval(&mut l, y);
        let dlo = b.ins().fvdemote(lo);
        let dhi = b.ins().fvdemote(hi);
        let ilo = b.ins().bitcast(types::I64X2, le, dlo);
        let ihi = b.ins().bitcast(types::I64X2, le, dhi);
        *fail = b.ins().bxor(ilo, ihi);
        *word = b.ins().extractlane(ilo, 0);
    }
    let joined = b.ins().insertlane(xi, words[0], 0);
    let joined = b.ins().insertlane(joined, words[1], 1);
    let fast = b.ins().bitcast(types::F32X4, le, joined);

    let slow = b.create_block();
    let lane_head = b.create_block();
    let lane_body = b.create_block();
    let lane_done = b.create_block();
    let join = b.create_block();
    let out = b.append_block_param(join, types::F32X4);
    let lane = b.append_block_param(lane_head, ptr);
    let bad = b.ins().bor(fails[0], fails[1]);
    let any = b.ins().vany_true(bad);
    b.ins().brif(any, slow, &[], join, &[fast.into()]);

    // slow: every lane through the scalar path, via a stack slot.
    b.switch_to_block(slow);
    let slot = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 16, 4));
    b.ins().stack_store(ptr, x, slot, 0);
    let zero = b.ins().iconst(ptr, 0);
    b.ins().jump(lane_head, &[zero.into()]);

    b.switch_to_block(lane_head);
    let more = b.ins().icmp_imm_u(IntCC::UnsignedLessThan, lane, 4);
    b.ins().brif(more, lane_body, &[], lane_done, &[]);

    b.switch_to_block(lane_body);
    let base = b.ins().stack_addr(ptr, slot, 0);
    let off = b.ins().ishl_imm_u(lane, 2);
    let addr = b.ins().iadd(base, off);
    let v = b.ins().load(types::F32, elem_flags(), addr, 0);
    let r = emit_exp_f32(b, table, v);
    b.ins().store(elem_flags(), r, addr, 0);
    let next = b.ins().iadd_imm_s(lane, 1);
    b.ins().jump(lane_head, &[next.into()]);

    b.switch_to_block(lane_done);
    let all = b.ins().stack_load(ptr, types::F32X4, slot, 0);
    b.ins().jump(join, &[all.into()]);

    b.switch_to_block(join);
    out
}
