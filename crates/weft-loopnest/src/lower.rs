//! Lowering a checked [`Kernel`] to CLIF, and compiling it through
//! weft-managed for either ISA.
//!
//! Shape of the code, per IR construct:
//!
//! - **Entry**: every parameter is loaded from the argument struct at its
//!   offset; the guards are evaluated and, if one fails, the function
//!   returns at once.
//! - **Loops of width 1** are counted loops on a pointer-width variable
//!   (`head: i < end`, body, `latch: i += 1`). Extents are constants or
//!   parameters read on entry.
//! - **Innermost loops of width 4** run a vector loop while `i + 4 <= end`
//!   (loads of stride 1 as one f32x4/i32x4 load, or a narrower load and a
//!   widening; loads of stride 0 as one scalar load and a splat; pair swaps
//!   as a lane shuffle), then a scalar loop of one granule a step whose
//!   stores wait until the whole granule is computed. Both run the tile
//!   semantics of [`crate::ir`].
//! - **Reductions** (static extents) keep `lanes / width` accumulators in
//!   variables, run a loop of `lanes` elements a step, then the remainder
//!   unrolled (whole vectors into their accumulators, single elements into
//!   their lane by extract/insert), then the halving fold: accumulators
//!   pairwise as vectors, then the four lanes of the last one as scalars.
//! - **Gather**: a `u32` load, zero-extended; out of range jumps to the
//!   enclosing loop's latch (or the return).
//! - **exp** is the elementwise family's CLIF ([`emit_exp_f32x4`],
//!   [`emit_exp_f32`]), reading its constants through the `ExpTable`
//!   parameter, so the code has no relocations and no calls.
//!
//! Vectors are 128-bit (f32x4 / i32x4), which both ISAs' Cranelift
//! backends have; nothing here depends on the target but the pointer type.

use std::collections::HashMap;

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, Block, ConstantData, Endianness, Function, InstBuilder, MemFlagsData, Type, Value,
};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use weft_libm::clif::{emit_exp_f32, emit_exp_f32x4};
use weft_managed::{ArmCode, ManagedError, Target};

use crate::ir::{
    Affine, Binary, Elem, Expr, Extent, Guard, IrError, Kernel, Loop, ParamId, ParamKind, Reduce,
    ReduceOp, Stmt, Term, Unary, ValId, VarId, F16_REBIAS, F16_SUBNORMAL_SCALE,
};

/// The vector width the CLIF lowering uses (f32x4).
pub const VECTOR_WIDTH: u32 = 4;

/// Why a kernel could not become machine code.
#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    /// The kernel is not well formed, or uses what this lowering lacks.
    #[error("{0}")]
    Ir(#[from] IrError),
    /// Cranelift refused or failed.
    #[error("{0}")]
    Managed(#[from] ManagedError),
}

/// Build the CLIF function of `kernel` for `target`.
pub fn build_function(kernel: &Kernel, target: &Target) -> Result<Function, IrError> {
    let facts = kernel.check()?;
    check_widths(&kernel.body)?;
    let mut func = target.leaf_function(&kernel.name);
    let mut fctx = FunctionBuilderContext::new();
    let b = FunctionBuilder::new(&mut func, &mut fctx);
    let mut l = Lower {
        k: kernel,
        b,
        ptr: target.pointer_type(),
        params: Vec::new(),
        vars: HashMap::new(),
        vals: HashMap::new(),
        exp_table: None,
        pin_slot: None,
    };
    l.entry(facts.exp_table)?;
    l.b.seal_all_blocks();
    l.b.finalize(target.frontend_config());
    Ok(func)
}

/// The CLIF text of `kernel` for `target` (what a listing snapshot shows).
pub fn clif_text(kernel: &Kernel, target: &Target) -> Result<String, IrError> {
    Ok(build_function(kernel, target)?.display().to_string())
}

/// Lower and compile `kernel` for `target`.
pub fn compile(kernel: &Kernel, target: &Target) -> Result<ArmCode, LowerError> {
    let func = build_function(kernel, target)?;
    Ok(target.compile(func)?)
}

/// This lowering vectorises by 4 or not at all.
fn check_widths(body: &[Stmt]) -> Result<(), IrError> {
    for s in body {
        match s {
            Stmt::Loop(l) => {
                if l.width != 1 && l.width != VECTOR_WIDTH {
                    return Err(IrError::NotVectorisable(format!(
                        "loop `{}`: width {} (the CLIF lowering has 1 and 4)",
                        l.name, l.width
                    )));
                }
                check_widths(&l.body)?;
            }
            Stmt::Reduce(r) if r.width != 1 && r.width != VECTOR_WIDTH => {
                return Err(IrError::NotVectorisable(format!(
                    "reduce `{}`: width {} (the CLIF lowering has 1 and 4)",
                    r.name, r.width
                )));
            }
            _ => {}
        }
    }
    Ok(())
}

fn data_flags() -> MemFlagsData {
    let mut f = MemFlagsData::new().with_endianness(Endianness::Little);
    f.set_notrap();
    f
}

fn le() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

/// Whether an expression is evaluated for one element or four.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Scalar,
    /// Four consecutive values of the variable, the first in it.
    Vector(VarId),
}

fn vector_of(t: Type) -> Type {
    if t == types::F32 {
        types::F32X4
    } else {
        types::I32X4
    }
}

/// An ArgMax accumulator: values and their indices.
#[derive(Clone, Copy)]
struct ArgAcc {
    value: Value,
    index: Value,
}

struct Lower<'k, 'f> {
    k: &'k Kernel,
    b: FunctionBuilder<'f>,
    ptr: Type,
    params: Vec<Value>,
    vars: HashMap<VarId, Variable>,
    vals: HashMap<ValId, Value>,
    exp_table: Option<Value>,
    pin_slot: Option<cranelift_codegen::ir::StackSlot>,
}

impl Lower<'_, '_> {
    fn entry(&mut self, exp_table: Option<ParamId>) -> Result<(), IrError> {
        let entry = self.b.create_block();
        let body = self.b.create_block();
        let exit = self.b.create_block();
        self.b.append_block_params_for_function_params(entry);
        self.b.switch_to_block(entry);
        let args = self.b.block_params(entry)[0];
        let trusted = MemFlagsData::trusted();
        for p in &self.k.params {
            let ty = match p.kind {
                ParamKind::F32 => types::F32,
                _ => self.ptr,
            };
            let v = self.b.ins().load(ty, trusted, args, p.offset as i32);
            self.params.push(v);
        }
        self.exp_table = exp_table.map(|p| self.params[usize::from(p.0)]);
        let mut ok: Option<Value> = None;
        for g in &self.k.guards {
            let c = self.guard(g);
            ok = Some(match ok {
                Some(ok) => self.b.ins().band(ok, c),
                None => c,
            });
        }
        match ok {
            Some(ok) => self.b.ins().brif(ok, body, &[], exit, &[]),
            None => self.b.ins().jump(body, &[]),
        };

        self.b.switch_to_block(body);
        let stmts = &self.k.body;
        self.body(stmts, exit)?;
        self.b.ins().jump(exit, &[]);

        self.b.switch_to_block(exit);
        self.b.ins().return_(&[]);
        Ok(())
    }

    /// Compute `v` here, not inside a later loop: Cranelift places pure
    /// instructions where they are first used and does not always hoist
    /// them back out of the loop that uses them (measured: RMSNorm's fold,
    /// sqrt and division ran once per element). A store to a stack slot
    /// is a use with a side effect, so `v` is computed in this block.
    fn pin(&mut self, v: Value) {
        use cranelift_codegen::ir::{StackSlotData, StackSlotKind};
        let slot = *self.pin_slot.get_or_insert_with(|| {
            self.b
                .create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 4, 2))
        });
        self.b.ins().stack_store(self.ptr, v, slot, 0);
    }

    fn extent(&mut self, e: Extent) -> Value {
        match e {
            Extent::Const(c) => self.b.ins().iconst(self.ptr, c as i64),
            Extent::Param(p) => self.params[usize::from(p.0)],
        }
    }

    fn guard(&mut self, g: &Guard) -> Value {
        match g {
            Guard::SumLe(terms, limit) => {
                // t0 <= rem, rem -= t0, t1 <= rem, …: no sum ever overflows.
                let mut rem = self.extent(*limit);
                let mut ok: Option<Value> = None;
                for (n, t) in terms.iter().enumerate() {
                    let t = self.extent(*t);
                    let c = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, t, rem);
                    ok = Some(match ok {
                        Some(ok) => self.b.ins().band(ok, c),
                        None => c,
                    });
                    if n + 1 < terms.len() {
                        rem = self.b.ins().isub(rem, t);
                    }
                }
                ok.unwrap_or_else(|| self.b.ins().iconst(types::I8, 1))
            }
            Guard::Eq(a, b) => {
                let (a, b) = (self.extent(*a), self.extent(*b));
                self.b.ins().icmp(IntCC::Equal, a, b)
            }
        }
    }

    fn var(&mut self, v: VarId) -> Variable {
        if let Some(x) = self.vars.get(&v) {
            return *x;
        }
        let x = self.b.declare_var(self.ptr);
        self.vars.insert(v, x);
        x
    }

    fn affine(&mut self, a: &Affine) -> Value {
        let mut s: Option<Value> = None;
        for (c, t) in &a.terms {
            let v = match t {
                Term::Var(v) => {
                    let x = self.var(*v);
                    self.b.use_var(x)
                }
                Term::Param(p) => self.params[usize::from(p.0)],
            };
            let m = if *c == 1 {
                v
            } else {
                self.b.ins().imul_imm_s(v, *c)
            };
            s = Some(match s {
                Some(s) => self.b.ins().iadd(s, m),
                None => m,
            });
        }
        match s {
            Some(s) if a.constant == 0 => s,
            Some(s) => self.b.ins().iadd_imm_s(s, a.constant),
            None => self.b.ins().iconst(self.ptr, a.constant),
        }
    }

    /// The address of element `index` of `buf`, elements of `size` bytes.
    fn address(&mut self, buf: ParamId, index: Value, size: u64) -> Value {
        let off = if size == 1 {
            index
        } else {
            self.b.ins().ishl_imm_u(index, size.trailing_zeros() as i64)
        };
        self.b.ins().iadd(self.params[usize::from(buf.0)], off)
    }

    fn body(&mut self, body: &[Stmt], skip: Block) -> Result<(), IrError> {
        for s in body {
            match s {
                Stmt::Loop(l) => self.lower_loop(l)?,
                Stmt::Let { val, value } => {
                    let v = self.expr(value, Mode::Scalar)?;
                    self.pin(v);
                    self.vals.insert(*val, v);
                }
                Stmt::Store { buf, at, value } => {
                    let v = self.expr(value, Mode::Scalar)?;
                    let i = self.affine(at);
                    let a = self.address(*buf, i, 4);
                    self.b.ins().store(data_flags(), v, a, 0);
                }
                Stmt::Reduce(r) => self.lower_reduce(r)?,
                Stmt::Gather {
                    var,
                    buf,
                    at,
                    below,
                } => {
                    let i = self.affine(at);
                    let a = self.address(*buf, i, 4);
                    let id = self.b.ins().uload32(data_flags(), a, 0);
                    let below = self.extent(*below);
                    let ok = self.b.ins().icmp(IntCC::UnsignedLessThan, id, below);
                    let cont = self.b.create_block();
                    self.b.ins().brif(ok, cont, &[], skip, &[]);
                    self.b.switch_to_block(cont);
                    let x = self.var(*var);
                    self.b.def_var(x, id);
                }
            }
        }
        Ok(())
    }

    fn lower_loop(&mut self, l: &Loop) -> Result<(), IrError> {
        let innermost = l
            .body
            .iter()
            .all(|s| matches!(s, Stmt::Let { .. } | Stmt::Store { .. }));
        let var = self.var(l.var);
        let start = self.extent(l.start);
        let end = self.extent(l.end);
        self.b.def_var(var, start);
        let exit = self.b.create_block();
        if !innermost {
            let (head, body, latch) = (
                self.b.create_block(),
                self.b.create_block(),
                self.b.create_block(),
            );
            self.b.ins().jump(head, &[]);
            self.b.switch_to_block(head);
            let i = self.b.use_var(var);
            let more = self.b.ins().icmp(IntCC::UnsignedLessThan, i, end);
            self.b.ins().brif(more, body, &[], exit, &[]);
            self.b.switch_to_block(body);
            self.body(&l.body, latch)?;
            self.b.ins().jump(latch, &[]);
            self.b.switch_to_block(latch);
            let i = self.b.use_var(var);
            let next = self.b.ins().iadd_imm_s(i, 1);
            self.b.def_var(var, next);
            self.b.ins().jump(head, &[]);
            self.b.switch_to_block(exit);
            return Ok(());
        }
        let (thead, tbody) = (self.b.create_block(), self.b.create_block());
        if l.width > 1 {
            let (vhead, vbody) = (self.b.create_block(), self.b.create_block());
            self.b.ins().jump(vhead, &[]);
            self.b.switch_to_block(vhead);
            let i = self.b.use_var(var);
            let step_end = self.b.ins().iadd_imm_s(i, i64::from(l.width));
            let fits = self
                .b
                .ins()
                .icmp(IntCC::UnsignedLessThanOrEqual, step_end, end);
            self.b.ins().brif(fits, vbody, &[], thead, &[]);
            self.b.switch_to_block(vbody);
            self.vector_step(l)?;
            let i = self.b.use_var(var);
            let next = self.b.ins().iadd_imm_s(i, i64::from(l.width));
            self.b.def_var(var, next);
            self.b.ins().jump(vhead, &[]);
        } else {
            self.b.ins().jump(thead, &[]);
        }
        // Scalar tiles: one granule a step (`end - start` is a whole number
        // of granules, so `i < end` means a whole granule is left).
        self.b.switch_to_block(thead);
        let i = self.b.use_var(var);
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, i, end);
        self.b.ins().brif(more, tbody, &[], exit, &[]);
        self.b.switch_to_block(tbody);
        let base = self.b.use_var(var);
        let mut pending = Vec::new();
        for g in 0..l.granule {
            let i = if g == 0 {
                base
            } else {
                self.b.ins().iadd_imm_s(base, i64::from(g))
            };
            self.b.def_var(var, i);
            for s in &l.body {
                match s {
                    Stmt::Let { val, value } => {
                        let v = self.expr(value, Mode::Scalar)?;
                        self.vals.insert(*val, v);
                    }
                    Stmt::Store { buf, at, value } => {
                        let v = self.expr(value, Mode::Scalar)?;
                        let i = self.affine(at);
                        let a = self.address(*buf, i, 4);
                        pending.push((v, a));
                    }
                    _ => unreachable!("innermost bodies hold only Let and Store"),
                }
            }
        }
        for (v, a) in pending {
            self.b.ins().store(data_flags(), v, a, 0);
        }
        let next = self.b.ins().iadd_imm_s(base, i64::from(l.granule));
        self.b.def_var(var, next);
        self.b.ins().jump(thead, &[]);
        self.b.switch_to_block(exit);
        Ok(())
    }

    /// A reduction's body for the element(s) its variable holds now, in
    /// `mode` (its statements in order: each store after the loads that
    /// feed it, as in a vector step).
    fn element_body(&mut self, body: &[Stmt], mode: Mode) -> Result<(), IrError> {
        for s in body {
            match s {
                Stmt::Let { val, value } => {
                    let v = self.expr(value, mode)?;
                    self.vals.insert(*val, v);
                }
                Stmt::Store { buf, at, value } => {
                    let v = self.expr(value, mode)?;
                    let i = self.affine(at);
                    let a = self.address(*buf, i, 4);
                    self.b.ins().store(data_flags(), v, a, 0);
                }
                _ => unreachable!("a reduction's body holds only Let and Store"),
            }
        }
        Ok(())
    }

    /// One vector step of an innermost loop: every statement on four
    /// iterations at once (loads before the stores they feed).
    fn vector_step(&mut self, l: &Loop) -> Result<(), IrError> {
        let mode = Mode::Vector(l.var);
        for s in &l.body {
            match s {
                Stmt::Let { val, value } => {
                    let v = self.expr(value, mode)?;
                    self.vals.insert(*val, v);
                }
                Stmt::Store { buf, at, value } => {
                    let v = self.expr(value, mode)?;
                    let i = self.affine(at);
                    let a = self.address(*buf, i, 4);
                    self.b.ins().store(data_flags(), v, a, 0);
                }
                _ => unreachable!("innermost bodies hold only Let and Store"),
            }
        }
        Ok(())
    }

    fn splat_if(&mut self, v: Value, mode: Mode) -> Value {
        let t = self.b.func.dfg.value_type(v);
        match mode {
            Mode::Vector(_) if t.lane_count() == 1 => self.b.ins().splat(vector_of(t), v),
            _ => v,
        }
    }

    fn expr(&mut self, e: &Expr, mode: Mode) -> Result<Value, IrError> {
        Ok(match e {
            Expr::Load {
                buf,
                elem,
                at,
                swap_pairs,
            } => self.load(*buf, *elem, at, *swap_pairs, mode),
            Expr::Const(bits) => {
                let c = self.b.ins().f32const(f32::from_bits(*bits));
                self.splat_if(c, mode)
            }
            Expr::Param(p) => {
                let v = self.params[usize::from(p.0)];
                self.splat_if(v, mode)
            }
            Expr::Val(v) => {
                let x = *self.vals.get(v).ok_or(IrError::ValScope(*v))?;
                self.splat_if(x, mode)
            }
            Expr::Unary(op, x) => {
                let x = self.expr(x, mode)?;
                let vector = matches!(mode, Mode::Vector(_));
                let fty = if vector { types::F32X4 } else { types::F32 };
                match op {
                    Unary::Neg => self.b.ins().fneg(x),
                    Unary::Sqrt => self.b.ins().sqrt(x),
                    Unary::IntToF32 => self.b.ins().fcvt_from_sint(fty, x),
                    Unary::F16ToF32 => self.widen_f16(x, vector),
                    Unary::Exp => {
                        let table = self.exp_table.ok_or(IrError::ParamKind {
                            name: "exp",
                            wanted: "paired with an ExpTable parameter",
                        })?;
                        if vector {
                            emit_exp_f32x4(&mut self.b, self.ptr, table, x)
                        } else {
                            emit_exp_f32(&mut self.b, table, x)
                        }
                    }
                }
            }
            Expr::Binary(op, a, b) => {
                let a = self.expr(a, mode)?;
                let b = self.expr(b, mode)?;
                match op {
                    Binary::Add => self.b.ins().fadd(a, b),
                    Binary::Sub => self.b.ins().fsub(a, b),
                    Binary::Mul => self.b.ins().fmul(a, b),
                    Binary::Div => self.b.ins().fdiv(a, b),
                }
            }
        })
    }

    fn load(&mut self, buf: ParamId, elem: Elem, at: &Affine, swap: bool, mode: Mode) -> Value {
        let f = data_flags();
        let index = self.affine(at);
        let stride = match mode {
            Mode::Vector(v) => at.coefficient(v),
            Mode::Scalar => 0,
        };
        if mode == Mode::Scalar || stride == 0 {
            let index = if swap {
                self.b.ins().bxor_imm_u(index, 1)
            } else {
                index
            };
            let a = self.address(buf, index, elem.size());
            let v = match elem {
                Elem::F32 => self.b.ins().load(types::F32, f, a, 0),
                Elem::U32 => self.b.ins().load(types::I32, f, a, 0),
                Elem::I8 => self.b.ins().sload8(types::I32, f, a, 0),
                Elem::U16 => self.b.ins().uload16(types::I32, f, a, 0),
            };
            return self.splat_if(v, mode);
        }
        // Stride 1: four consecutive elements (checked by `Kernel::check`).
        let a = self.address(buf, index, elem.size());
        let v = match elem {
            Elem::F32 => self.b.ins().load(types::F32X4, f, a, 0),
            Elem::U32 => self.b.ins().load(types::I32X4, f, a, 0),
            Elem::I8 => {
                let w = self.b.ins().load(types::I32, f, a, 0);
                let v = self.b.ins().scalar_to_vector(types::I32X4, w);
                let v = self.b.ins().bitcast(types::I8X16, le(), v);
                let v = self.b.ins().swiden_low(v);
                self.b.ins().swiden_low(v)
            }
            Elem::U16 => {
                let w = self.b.ins().load(types::I64, f, a, 0);
                let v = self.b.ins().scalar_to_vector(types::I64X2, w);
                let v = self.b.ins().bitcast(types::I16X8, le(), v);
                self.b.ins().uwiden_low(v)
            }
        };
        if swap {
            // Lanes (1, 0, 3, 2): the pair partner of every lane.
            let t = self.b.func.dfg.value_type(v);
            let bytes = self.b.ins().bitcast(types::I8X16, le(), v);
            let mask: Vec<u8> = [1u8, 0, 3, 2]
                .iter()
                .flat_map(|l| (0..4).map(move |k| 4 * l + k))
                .collect();
            let mask = self.b.func.dfg.immediates.push(ConstantData::from(mask));
            let s = self.b.ins().shuffle(bytes, bytes, mask);
            self.b.ins().bitcast(t, le(), s)
        } else {
            v
        }
    }

    /// [`crate::ir::f16_bits_to_f32`] on one i32 or four.
    fn widen_f16(&mut self, h: Value, vector: bool) -> Value {
        let (ity, fty) = if vector {
            (types::I32X4, types::F32X4)
        } else {
            (types::I32, types::F32)
        };
        let c = |l: &mut Self, v: i64| {
            let s = l.b.ins().iconst(types::I32, v);
            if vector {
                l.b.ins().splat(types::I32X4, s)
            } else {
                s
            }
        };
        let (m_em, m_sign, rebias) = (c(self, 0x7fff), c(self, 0x8000), c(self, F16_REBIAS as i64));
        let (inf, sub_lim) = (c(self, 0x7c00), c(self, 0x400));
        let em = self.b.ins().band(h, m_em);
        let sign = self.b.ins().band(h, m_sign);
        let sign = self.b.ins().ishl_imm_u(sign, 16);
        let shifted = self.b.ins().ishl_imm_u(em, 13);
        let normal = self.b.ins().iadd(shifted, rebias);
        let special = self.b.ins().iadd(normal, rebias);
        let emf = self.b.ins().fcvt_from_sint(fty, em);
        let scale = self.b.ins().f32const(F16_SUBNORMAL_SCALE);
        let scale = if vector {
            self.b.ins().splat(types::F32X4, scale)
        } else {
            scale
        };
        let subf = self.b.ins().fmul(emf, scale);
        let sub = self.b.ins().bitcast(ity, le(), subf);
        let is_special = self.b.ins().icmp(IntCC::SignedGreaterThanOrEqual, em, inf);
        let is_sub = self.b.ins().icmp(IntCC::SignedLessThan, em, sub_lim);
        let v = self.pick(is_special, special, normal, vector);
        let v = self.pick(is_sub, sub, v, vector);
        let v = self.b.ins().bor(v, sign);
        self.b.ins().bitcast(fty, le(), v)
    }

    /// `c ? a : b` per lane; `c` is an icmp/fcmp result.
    fn pick(&mut self, c: Value, a: Value, b: Value, vector: bool) -> Value {
        if vector {
            let t = self.b.func.dfg.value_type(a);
            let m = if self.b.func.dfg.value_type(c) == t {
                c
            } else {
                self.b.ins().bitcast(t, le(), c)
            };
            self.b.ins().bitselect(m, a, b)
        } else {
            self.b.ins().select(c, a, b)
        }
    }

    fn lower_reduce(&mut self, r: &Reduce) -> Result<(), IrError> {
        let w = u64::from(r.width);
        let lanes = u64::from(r.lanes);
        let n = r.end - r.start;
        let (groups, rem) = (n / lanes, n % lanes);
        let accs = (lanes / w) as usize;
        let vector = w > 1;
        let (fty, ity) = if vector {
            (types::F32X4, types::I32X4)
        } else {
            (types::F32, types::I32)
        };
        let rvar = self.var(r.var);

        // Accumulators, at their identity.
        let val_vars: Vec<Variable> = (0..accs).map(|_| self.b.declare_var(fty)).collect();
        let idx_vars: Vec<Variable> = if r.op == ReduceOp::ArgMax {
            (0..accs).map(|_| self.b.declare_var(ity)).collect()
        } else {
            Vec::new()
        };
        let init = match r.op {
            ReduceOp::Sum => self.b.ins().f32const(0.0),
            ReduceOp::ArgMax => self.b.ins().f32const(f32::NEG_INFINITY),
        };
        let init = if vector {
            self.b.ins().splat(fty, init)
        } else {
            init
        };
        for (a, v) in val_vars.iter().enumerate() {
            self.b.def_var(*v, init);
            if let Some(iv) = idx_vars.get(a) {
                let first = r.start + a as u64 * w;
                let idx = self.index_lanes(first, vector);
                self.b.def_var(*iv, idx);
            }
        }

        // Whole groups of `lanes` elements.
        if groups > 0 {
            let g = self.b.declare_var(self.ptr);
            let start = self.b.ins().iconst(self.ptr, r.start as i64);
            let stop = self
                .b
                .ins()
                .iconst(self.ptr, (r.start + groups * lanes) as i64);
            self.b.def_var(g, start);
            let (head, body, exit) = (
                self.b.create_block(),
                self.b.create_block(),
                self.b.create_block(),
            );
            self.b.ins().jump(head, &[]);
            self.b.switch_to_block(head);
            let i = self.b.use_var(g);
            let more = self.b.ins().icmp(IntCC::UnsignedLessThan, i, stop);
            // The accumulators leave the loop as the exit block's
            // parameters: values computed from them after the loop then
            // live outside it, and Cranelift's loop-invariant motion
            // hoists them above a following loop (without this it sees
            // them at the loop's depth and recomputes them per iteration).
            let carried: Vec<Variable> = val_vars.iter().chain(&idx_vars).copied().collect();
            let mut out_args = Vec::new();
            for v in &carried {
                let ty = if val_vars.contains(v) { fty } else { ity };
                self.b.append_block_param(exit, ty);
                out_args.push(self.b.use_var(*v).into());
            }
            self.b.ins().brif(more, body, &[], exit, &out_args);
            self.b.switch_to_block(body);
            let i = self.b.use_var(g);
            for a in 0..accs {
                let at = self.b.ins().iadd_imm_s(i, (a as u64 * w) as i64);
                self.step(r, rvar, at, a, &val_vars, &idx_vars, vector)?;
            }
            let i = self.b.use_var(g);
            let next = self.b.ins().iadd_imm_s(i, lanes as i64);
            self.b.def_var(g, next);
            self.b.ins().jump(head, &[]);
            self.b.switch_to_block(exit);
            for (n, v) in carried.iter().enumerate() {
                let p = self.b.block_params(exit)[n];
                self.b.def_var(*v, p);
            }
        }

        // The remainder: whole vectors into their accumulators, then single
        // elements into their lanes.
        let base = r.start + groups * lanes;
        for a in 0..(rem / w) as usize {
            let at = self.b.ins().iconst(self.ptr, (base + a as u64 * w) as i64);
            self.step(r, rvar, at, a, &val_vars, &idx_vars, vector)?;
        }
        for e in (rem / w) * w..rem {
            let at = self.b.ins().iconst(self.ptr, (base + e) as i64);
            self.b.def_var(rvar, at);
            self.element_body(&r.body, Mode::Scalar)?;
            let v = self.expr(&r.value, Mode::Scalar)?;
            let (a, lane) = ((e / w) as usize, (e % w) as u8);
            let acc_v = self.b.use_var(val_vars[a]);
            let old_v = if vector {
                self.b.ins().extractlane(acc_v, lane)
            } else {
                acc_v
            };
            let (new_v, new_i) = match r.op {
                ReduceOp::Sum => (self.b.ins().fadd(old_v, v), None),
                ReduceOp::ArgMax => {
                    let acc_i = self.b.use_var(idx_vars[a]);
                    let old_i = if vector {
                        self.b.ins().extractlane(acc_i, lane)
                    } else {
                        acc_i
                    };
                    let vi = self.b.ins().iconst(types::I32, (base + e) as i64);
                    let c = self.argmax_step(
                        ArgAcc {
                            value: old_v,
                            index: old_i,
                        },
                        ArgAcc {
                            value: v,
                            index: vi,
                        },
                        false,
                    );
                    (c.value, Some(c.index))
                }
            };
            let put = |l: &mut Self, acc: Value, x: Value| {
                if vector {
                    l.b.ins().insertlane(acc, x, lane)
                } else {
                    x
                }
            };
            let nv = put(self, acc_v, new_v);
            self.b.def_var(val_vars[a], nv);
            if let Some(ni) = new_i {
                let acc_i = self.b.use_var(idx_vars[a]);
                let ni = put(self, acc_i, ni);
                self.b.def_var(idx_vars[a], ni);
            }
        }

        // The halving fold.
        let mut vs: Vec<Value> = val_vars.iter().map(|v| self.b.use_var(*v)).collect();
        let mut is: Vec<Value> = idx_vars.iter().map(|v| self.b.use_var(*v)).collect();
        while vs.len() > 1 {
            let h = vs.len() / 2;
            for a in 0..h {
                self.fold_pair(r.op, &mut vs, &mut is, a, a + h, vector);
            }
            vs.truncate(h);
            is.truncate(h);
        }
        let result = if vector {
            let mut lv: Vec<Value> = (0..4).map(|l| self.b.ins().extractlane(vs[0], l)).collect();
            let mut li: Vec<Value> = if r.op == ReduceOp::ArgMax {
                (0..4).map(|l| self.b.ins().extractlane(is[0], l)).collect()
            } else {
                Vec::new()
            };
            for h in [2, 1] {
                for a in 0..h {
                    self.fold_pair(r.op, &mut lv, &mut li, a, a + h, false);
                }
            }
            match r.op {
                ReduceOp::Sum => lv[0],
                ReduceOp::ArgMax => li[0],
            }
        } else {
            match r.op {
                ReduceOp::Sum => vs[0],
                ReduceOp::ArgMax => is[0],
            }
        };
        self.vals.insert(r.result, result);
        Ok(())
    }

    /// `first, first+1, …` as one i32 or four.
    fn index_lanes(&mut self, first: u64, vector: bool) -> Value {
        let s = self.b.ins().iconst(types::I32, first as i64);
        if !vector {
            return s;
        }
        let s = self.b.ins().splat(types::I32X4, s);
        let iota: Vec<u8> = (0u32..4).flat_map(|l| l.to_le_bytes()).collect();
        let c = self.b.func.dfg.constants.insert(ConstantData::from(iota));
        let iota = self.b.ins().vconst(types::I32X4, c);
        self.b.ins().iadd(s, iota)
    }

    /// Combine element(s) at `at` into accumulator `a` (main loop and
    /// whole remainder vectors).
    #[allow(clippy::too_many_arguments)] // one step's whole state, named
    fn step(
        &mut self,
        r: &Reduce,
        rvar: Variable,
        at: Value,
        a: usize,
        val_vars: &[Variable],
        idx_vars: &[Variable],
        vector: bool,
    ) -> Result<(), IrError> {
        self.b.def_var(rvar, at);
        let mode = if vector {
            Mode::Vector(r.var)
        } else {
            Mode::Scalar
        };
        self.element_body(&r.body, mode)?;
        let v = self.expr(&r.value, mode)?;
        let acc = self.b.use_var(val_vars[a]);
        match r.op {
            ReduceOp::Sum => {
                let s = self.b.ins().fadd(acc, v);
                self.b.def_var(val_vars[a], s);
            }
            ReduceOp::ArgMax => {
                let at32 = self.b.ins().ireduce(types::I32, at);
                let vi = if vector {
                    let s = self.b.ins().splat(types::I32X4, at32);
                    let iota: Vec<u8> = (0u32..4).flat_map(|l| l.to_le_bytes()).collect();
                    let c = self.b.func.dfg.constants.insert(ConstantData::from(iota));
                    let iota = self.b.ins().vconst(types::I32X4, c);
                    self.b.ins().iadd(s, iota)
                } else {
                    at32
                };
                let acc_i = self.b.use_var(idx_vars[a]);
                let c = self.argmax_step(
                    ArgAcc {
                        value: acc,
                        index: acc_i,
                    },
                    ArgAcc {
                        value: v,
                        index: vi,
                    },
                    vector,
                );
                self.b.def_var(val_vars[a], c.value);
                self.b.def_var(idx_vars[a], c.index);
            }
        }
        Ok(())
    }

    /// Element `new` (a later index than anything in `acc`) into `acc`:
    /// it wins if it ranks higher (NaN above numbers). Equal ranks keep
    /// `acc`, which holds the smaller index.
    fn argmax_step(&mut self, acc: ArgAcc, new: ArgAcc, vector: bool) -> ArgAcc {
        // `!(new <= acc)` is "greater, or either is NaN"; `acc == acc`
        // removes the case where `acc` already holds a NaN (it stays).
        // (aarch64 has no vector `ugt` compare: `le` then `band_not`.)
        let not_above = self
            .b
            .ins()
            .fcmp(FloatCC::LessThanOrEqual, new.value, acc.value);
        let acc_number = self.b.ins().fcmp(FloatCC::Ordered, acc.value, acc.value);
        let take = self.b.ins().band_not(acc_number, not_above);
        ArgAcc {
            value: self.pick(take, new.value, acc.value, vector),
            index: self.pick(take, new.index, acc.index, vector),
        }
    }

    /// The general combine of two accumulators (the fold): `b` wins if it
    /// ranks higher, or ranks the same with a smaller index.
    fn argmax_merge(&mut self, a: ArgAcc, b: ArgAcc, vector: bool) -> ArgAcc {
        let step = self.argmax_step(a, b, vector);
        let eq = self.b.ins().fcmp(FloatCC::Equal, b.value, a.value);
        let b_nan = self.b.ins().fcmp(FloatCC::Unordered, b.value, b.value);
        let a_nan = self.b.ins().fcmp(FloatCC::Unordered, a.value, a.value);
        let both_nan = self.b.ins().band(b_nan, a_nan);
        let same = self.b.ins().bor(eq, both_nan);
        let smaller = self.b.ins().icmp(IntCC::SignedLessThan, b.index, a.index);
        // Both masks are i32x4 (vectors) or i8 (scalars).
        let same = self.b.ins().band(same, smaller);
        ArgAcc {
            value: self.pick(same, b.value, step.value, vector),
            index: self.pick(same, b.index, step.index, vector),
        }
    }

    fn fold_pair(
        &mut self,
        op: ReduceOp,
        vs: &mut [Value],
        is: &mut [Value],
        a: usize,
        b: usize,
        vector: bool,
    ) {
        match op {
            ReduceOp::Sum => vs[a] = self.b.ins().fadd(vs[a], vs[b]),
            ReduceOp::ArgMax => {
                let m = self.argmax_merge(
                    ArgAcc {
                        value: vs[a],
                        index: is[a],
                    },
                    ArgAcc {
                        value: vs[b],
                        index: is[b],
                    },
                    vector,
                );
                vs[a] = m.value;
                is[a] = m.index;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::{self, Arg, Buffer};
    use crate::ir::{Fold, Param, Storage};
    use weft_kernel::{Kernel as Placed, NativeCode};
    use weft_managed::arm_build::host_isa;

    /// The argument struct of the test kernels below.
    #[repr(C)]
    struct XOut {
        x: *const f32,
        out: *mut f32,
    }

    /// `out[0] = reduce(x[0..n])` with the given op, width and lanes.
    fn reduce_kernel(op: ReduceOp, n: u64, width: u32, lanes: u32) -> Kernel {
        let buf = |storage, written| ParamKind::Buffer { storage, written };
        let out_storage = match op {
            ReduceOp::Sum => Storage::F32,
            ReduceOp::ArgMax => Storage::U32,
        };
        Kernel {
            name: "reduce".into(),
            params: vec![
                Param {
                    name: "x",
                    offset: 0,
                    kind: buf(Storage::F32, false),
                },
                Param {
                    name: "out",
                    offset: 8,
                    kind: buf(out_storage, true),
                },
            ],
            guards: vec![],
            body: vec![
                Stmt::Reduce(Reduce {
                    result: ValId(0),
                    op,
                    name: "i",
                    var: VarId(0),
                    start: 0,
                    end: n,
                    width,
                    lanes,
                    fold: Fold::Halving,
                    body: Vec::new(),
                    value: Expr::load_f32(ParamId(0), Affine::var(VarId(0))),
                }),
                Stmt::Store {
                    buf: ParamId(1),
                    at: Affine::constant(0),
                    value: Expr::Val(ValId(0)),
                },
            ],
        }
    }

    fn run_both(k: &Kernel, x: &[f32]) -> (u32, u32) {
        let target = Target::host().expect("host");
        let code = compile(k, &target).expect("compiles");
        let native = NativeCode {
            isa: host_isa(),
            bytes: code.bytes,
            pool: None,
            loops: Vec::new(),
        };
        // SAFETY: the kernel reads x[0..n] and writes out[0], which the
        // buffers below hold.
        let placed = unsafe { Placed::<XOut>::from_native(&native) }.expect("placed");
        let mut out = [0u32; 1];
        let args = XOut {
            x: x.as_ptr(),
            out: out.as_mut_ptr().cast(),
        };
        // SAFETY: as above; both buffers outlive the call.
        unsafe { placed.call(&args) };
        let out_buf = match k.params[1].kind {
            ParamKind::Buffer {
                storage: Storage::U32,
                ..
            } => Buffer::U32(vec![0]),
            _ => Buffer::F32(vec![0.0]),
        };
        let mut a = vec![Arg::Buffer(Buffer::F32(x.to_vec())), Arg::Buffer(out_buf)];
        interp::run(k, &mut a).expect("interprets");
        let want = match &a[1] {
            Arg::Buffer(Buffer::U32(v)) => v[0],
            Arg::Buffer(Buffer::F32(v)) => v[0].to_bits(),
            _ => unreachable!(),
        };
        (out[0], want)
    }

    #[test]
    fn scalar_and_vector_reductions_equal_the_interpreter() {
        // Values whose sums depend on the order (large and small mixed).
        let x: Vec<f32> = (0..45)
            .map(|i| {
                if i % 5 == 0 {
                    1e7 + i as f32
                } else {
                    0.3 * i as f32 - 5.0
                }
            })
            .collect();
        for n in [1u64, 7, 16, 45] {
            for (width, lanes) in [(1, 1), (1, 4), (4, 4), (4, 8), (1, 16), (4, 16)] {
                for op in [ReduceOp::Sum, ReduceOp::ArgMax] {
                    let k = reduce_kernel(op, n, width, lanes);
                    let (got, want) = run_both(&k, &x[..n as usize]);
                    assert_eq!(got, want, "{op:?} n {n} width {width} lanes {lanes}");
                }
            }
        }
    }

    #[test]
    fn widths_other_than_1_and_4_are_refused_by_name() {
        let k = reduce_kernel(ReduceOp::Sum, 16, 8, 16);
        let target = Target::host().expect("host");
        assert!(matches!(
            build_function(&k, &target),
            Err(IrError::NotVectorisable(_))
        ));
    }
}
