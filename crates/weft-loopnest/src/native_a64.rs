//! Lowering a checked [`Kernel`] straight to arm64 machine code (NEON,
//! `.4s` vectors), through weft-a64's encoder: the same one lowering for
//! every nest as [`crate::native_x64`], so every family whose nest it can
//! express gets an arm64 twin of its arm.
//!
//! One job: turn the IR into an AAPCS64 leaf body that computes the arm's
//! bits. It mirrors [`crate::native_x64`] construct by construct (the
//! functions have the same names: `entry`, `guard`, `body`,
//! `lower_loop`, `vector_step`, `expr`, `load`, `lower_reduce`, `step`,
//! `argmax_step`, `argmax_merge`, `fold_pair`); what differs is the
//! vector width (four f32 lanes, [`LANES`]) and how a partial step stays
//! inside the buffers:
//!
//! - **Entry**: the guards are evaluated on the argument struct (`x0`);
//!   if one fails the body returns having touched nothing.
//! - **Loops with inner loops** are counted loops on a general register
//!   (`head: i < end`, body, `latch: i += 1`), as in the arm.
//! - **Innermost loops** run four iterations a step while `i + 4 <= end`,
//!   then one partial step of the `end - i` iterations left (a whole
//!   number of granules below four; known when the extents are constants,
//!   otherwise dispatched on at run time to one partial step per possible
//!   count). A partial step loads exactly its elements (`ldr` of the
//!   largest power-of-two piece into lane 0, which clears the rest, then
//!   one `ld1` lane load for a third element), computes every lane (the
//!   lanes past the count hold stale values whose results are never
//!   written) and stores exactly its elements (`str` and an `st1` lane
//!   store): nothing outside the range is read or written. The IR's tile
//!   rule (a stored buffer is read only at the stored element or its pair
//!   partner, never after the store) makes four iterations at once give
//!   the bits of one at a time; each element sees the arm's operations in
//!   the arm's order.
//! - **Reductions** keep their lanes (a sum's are the IR's; an argmax's,
//!   below) in `lanes / 4` registers (global lane `L` is lane `L mod 4` of
//!   register `L / 4`), run a loop of `lanes` elements a step, then the
//!   remainder: whole registers, then one register of which only the
//!   lanes the remainder reaches change (a sum's new lanes inserted with
//!   `mov` lane moves, an argmax's take-mask cleared past them), then
//!   [`Fold::Halving`] over the global lanes: registers pairwise, then the
//!   halves of the last register (`ext`) down to one lane. That is the
//!   arm's fold. `a ⊕ b` always has the lower lane as the first operand,
//!   as the arm has.
//! - **Gather**: a `u32` load; out of range branches to the enclosing
//!   loop's latch (or the return).
//!
//! Statements outside innermost loops compute every lane alike (loads by
//! `ld1r`, parameters and constants by `dup`), so a value bound there is a
//! broadcast register that vector steps use as it is.
//!
//! [`ReduceOp::ArgMax`] keeps its values and their indices (i32 lanes) in
//! register pairs, sixteen lanes at least (its answer does not depend on
//! the lanes), and takes the arm's two combines as they are: the step
//! (`!(new <= acc)` and `acc` not a NaN: `fcmge`, `fcmeq`, `bic`) and the
//! fold's merge (also: the same rank, equal or both NaN, with a smaller
//! index: `cmgt` on the indices), applied with `bit`.
//!
//! Narrower loads widen as the arm's do (`i8` by `sxtl` twice, `u16` by
//! `uxtl`), `IntToF32` is `scvtf`, `Neg` is `fneg` (the sign bit flipped,
//! NaN included), and `F16ToF32` is the arm's integer sequence (rebias,
//! `m ⊗ 2^-24` for subnormals, rebias twice for infinities and NaNs, the
//! sign), so NaN payloads are kept as the arm keeps them. Every arithmetic
//! operation is one `.4s` instruction (`fadd`, `fsub`, `fmul`, `fdiv`,
//! `fsqrt`): never `fmla` (the IR has no fused multiply-add).
//!
//! Not yet expressed, and refused by name ([`NativeError::Unsupported`],
//! an `unsupported-geometry` refusal) rather than approximated, as the x64
//! lowering refuses them: `exp` outside an exp-based map (a map takes the
//! map route, [`map_route`], to weft-elementwise's NEON map body, one loop
//! of two-element steps), innermost loops of width 1,
//! reductions with fewer lanes than one register holds, and `u16` loads
//! in a partial step (no family's nest has one to judge it by). `i8` loads
//! in a partial step, which the x64 lowering refuses, are expressed (a
//! test holds a Q8_0 gather cut to a ragged block to the interpreter).
//!
//! Invariants: AAPCS64 leaf: arguments in `x0`; general registers
//! `x1`–`x8`, `x12`–`x15` first, `x19`–`x28` saved and restored only if
//! used (scratch `x9`–`x11`, `x16`, `x17`); vector registers `v0`–`v7`,
//! `v16`–`v31` first, `d8`–`d15` saved and restored only if used (a first
//! pass finds them, the second emits with them saved: the allocation is
//! deterministic); no call, no literal pool, no stack beyond the saves;
//! the loops in the bytes are the loops [`loop_trips`] states, in the
//! same order, and are annotated with their names.

use std::collections::{BTreeSet, HashMap};

use weft_a64::{lsl, mem, v, w, x, Assembler, Cond, EncodeError, Label, Op, SP, WZR, XZR};
use weft_kernel::{Feature, Isa, LoopAnnotation, LoopTrip, NativeCode, Refusal};

use crate::ir::{
    Affine, Binary, Elem, Expr, Extent, Fold, Guard, IrError, Kernel, Loop, ParamId, Reduce,
    ReduceOp, Stmt, Term, Unary, ValId, VarId, F16_REBIAS, F16_SUBNORMAL_SCALE,
};
use crate::map_route;
use crate::native_shared::{base_key, innermost, map_elements, reduce_lanes, trips, BaseKey};

/// f32 lanes in one register: iterations per vector step.
pub const LANES: u32 = 4;

/// What a host must have to run a body: Advanced SIMD.
pub const REQUIRES: &[Feature] = &[Feature::Neon];

/// Why a nest has no arm64 body.
#[derive(Debug, thiserror::Error)]
pub enum NativeError {
    /// The kernel is not well formed.
    #[error("{0}")]
    Ir(#[from] IrError),
    /// The nest uses something this lowering does not express yet.
    #[error("not lowered natively: {0}")]
    Unsupported(String),
    /// More values live at once than there are registers.
    #[error("out of registers: {0}")]
    Registers(String),
    /// The encoder refused an instruction.
    #[error("a64 encoding: {0}")]
    Encode(EncodeError),
    /// The exp-based map emitter refused the nest's map.
    #[error("exp map: {0}")]
    Map(String),
}

impl From<EncodeError> for NativeError {
    fn from(e: EncodeError) -> Self {
        NativeError::Encode(e)
    }
}

impl NativeError {
    /// The refusal a twin gives: a nest the lowering cannot express is
    /// `unsupported-geometry`, anything else `emit-error`.
    pub fn refusal(&self, nest: &str) -> Refusal {
        match self {
            NativeError::Unsupported(_) | NativeError::Registers(_) => {
                Refusal::UnsupportedGeometry {
                    reason: format!("loop nest `{nest}`: {self}"),
                }
            }
            NativeError::Ir(_) | NativeError::Encode(_) | NativeError::Map(_) => {
                Refusal::EmitError {
                    message: format!("loop nest `{nest}`: {self}"),
                }
            }
        }
    }
}

fn unsupported(what: impl Into<String>) -> NativeError {
    NativeError::Unsupported(what.into())
}

/// The arm64 body of `kernel`.
pub fn emit(kernel: &Kernel) -> Result<NativeCode, NativeError> {
    kernel.check()?;
    let map = map_route::exp_map(kernel)
        .map_err(|why| unsupported(format!("exp outside an exp-based map ({why})")))?;
    if let Some(map) = map {
        return weft_elementwise::twin_a64::emit_map(&map)
            .map_err(|r| NativeError::Map(r.to_string()));
    }
    // First pass: which callee-saved registers the body writes; the second
    // emits with them saved.
    let first = Native::run(kernel, &[], &[])?;
    let gprs: Vec<u8> = first
        .gprs
        .iter()
        .copied()
        .filter(|r| CALLEE_SAVED_GPRS.contains(r))
        .collect();
    let vectors: Vec<u8> = first
        .vectors
        .iter()
        .copied()
        .filter(|r| CALLEE_SAVED_VECTORS.contains(r))
        .collect();
    let second = Native::run(kernel, &gprs, &vectors)?;
    if second.gprs != first.gprs || second.vectors != first.vectors {
        return Err(unsupported("an allocation that differs between passes"));
    }
    Ok(second.code)
}

/// The loops of `kernel`'s arm64 body, outermost first, with trip counts
/// (`value` gives each `Index` parameter at the geometry): a loop with
/// inner loops has `end - start` trips; an innermost loop `(end - start)
/// / 4` (its partial step is straight-line code); a reduction `(end -
/// start) / lanes` when that is at least one, no loop otherwise (an
/// argmax's lanes: sixteen at least). The names are the IR's.
pub fn loop_trips(kernel: &Kernel, value: &dyn Fn(ParamId) -> u64) -> Vec<LoopTrip> {
    if let Ok(Some(_)) = map_route::exp_map(kernel) {
        return weft_elementwise::twin_a64::map_loops(map_elements(kernel, value));
    }
    let mut out = Vec::new();
    trips(&kernel.body, 0, LANES, value, &mut out);
    out
}

/// The argument struct's register.
const ARGS: u8 = 0;
/// Scratch general registers (never allocated).
const T0: u8 = 9;
const T1: u8 = 10;
const T2: u8 = 11;
const T3: u8 = 16;
/// General registers handed out, volatile first.
const GPR_ORDER: [u8; 22] = [
    1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 14, 15, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28,
];
const CALLEE_SAVED_GPRS: [u8; 10] = [19, 20, 21, 22, 23, 24, 25, 26, 27, 28];
/// Vector registers handed out, volatile first.
const VECTOR_ORDER: [u8; 32] = [
    0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 8, 9,
    10, 11, 12, 13, 14, 15,
];
const CALLEE_SAVED_VECTORS: [u8; 8] = [8, 9, 10, 11, 12, 13, 14, 15];

/// What one pass produced.
struct Pass {
    code: NativeCode,
    gprs: BTreeSet<u8>,
    vectors: BTreeSet<u8>,
}

/// A vector value: a temporary the consumer frees, or a register bound to
/// a `Let`, a reduction or a hoisted invariant (never freed by a use).
#[derive(Clone, Copy, Debug)]
enum V {
    Temp(u8),
    Bound(u8),
}

impl V {
    fn reg(self) -> u8 {
        match self {
            V::Temp(n) | V::Bound(n) => n,
        }
    }
}

/// A reduction's accumulator register: the values, and for
/// [`ReduceOp::ArgMax`] their indices (i32 lanes).
#[derive(Clone, Copy, Debug)]
struct Acc {
    value: u8,
    index: Option<u8>,
}

/// How an expression is evaluated.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// Outside innermost loops: one value, in every lane.
    Broadcast,
    /// Four consecutive values of `var`, the first at `var + offset`; in a
    /// partial step only the first `part` are loaded.
    Vector {
        var: VarId,
        offset: i64,
        part: Option<u32>,
    },
}

/// A loop-invariant leaf held in a register for the length of a loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Leaf {
    Const(u32),
    Param(ParamId),
}

struct Native<'k> {
    k: &'k Kernel,
    a: Assembler,
    free_gprs: Vec<u8>,
    free_vectors: Vec<u8>,
    used_gprs: BTreeSet<u8>,
    used_vectors: BTreeSet<u8>,
    vars: HashMap<VarId, u8>,
    vals: HashMap<ValId, u8>,
    /// Bases of the accesses of the innermost loop or reduction being
    /// emitted.
    bases: HashMap<BaseKey, u8>,
    /// Invariant leaves of the innermost loop or reduction being emitted.
    leaves: HashMap<Leaf, u8>,
    /// Each loop's name, head and back-edge instruction indices.
    loops: Vec<(String, usize, usize)>,
}

impl<'k> Native<'k> {
    fn run(k: &'k Kernel, save_gprs: &[u8], save_vectors: &[u8]) -> Result<Pass, NativeError> {
        let mut free_gprs: Vec<u8> = GPR_ORDER.to_vec();
        free_gprs.reverse();
        let mut free_vectors: Vec<u8> = VECTOR_ORDER.to_vec();
        free_vectors.reverse();
        let mut n = Native {
            k,
            a: Assembler::new(),
            free_gprs,
            free_vectors,
            used_gprs: BTreeSet::new(),
            used_vectors: BTreeSet::new(),
            vars: HashMap::new(),
            vals: HashMap::new(),
            bases: HashMap::new(),
            leaves: HashMap::new(),
            loops: Vec::new(),
        };
        n.entry(save_gprs, save_vectors)?;
        let Native {
            a,
            loops,
            used_gprs,
            used_vectors,
            ..
        } = n;
        let bytes = a.finish_bytes()?;
        let loops = loops
            .into_iter()
            .map(|(name, head, back)| LoopAnnotation {
                name,
                head: head * 4,
                back_edge: back * 4,
            })
            .collect();
        Ok(Pass {
            code: NativeCode {
                isa: Isa::Aarch64,
                bytes,
                pool: None,
                loops,
            },
            gprs: used_gprs,
            vectors: used_vectors,
        })
    }

    // ---- registers ------------------------------------------------------

    fn gpr(&mut self, what: &str) -> Result<u8, NativeError> {
        let r = self.free_gprs.pop().ok_or_else(|| {
            NativeError::Registers(format!("no general register left for {what}"))
        })?;
        self.used_gprs.insert(r);
        Ok(r)
    }

    fn free_gpr(&mut self, r: u8) {
        self.free_gprs.push(r);
    }

    fn vector(&mut self) -> Result<u8, NativeError> {
        let n = self.free_vectors.pop().ok_or_else(|| {
            NativeError::Registers("more than 32 vector values live at once".into())
        })?;
        self.used_vectors.insert(n);
        Ok(n)
    }

    fn free(&mut self, v: V) {
        if let V::Temp(n) = v {
            self.free_vectors.push(n);
        }
    }

    fn free_vector(&mut self, n: u8) {
        self.free_vectors.push(n);
    }

    // ---- entry, frame and guards ----------------------------------------

    fn entry(&mut self, save_gprs: &[u8], save_vectors: &[u8]) -> Result<(), NativeError> {
        // Callee-saved registers the body writes: pairs, 16 bytes a push.
        for pair in save_gprs.chunks(2) {
            match pair {
                [a, b] => self.a.stp(x(*a), x(*b), mem(SP).pre(-16))?,
                [a] => self.a.str(x(*a), mem(SP).pre(-16))?,
                _ => {}
            }
        }
        for pair in save_vectors.chunks(2) {
            match pair {
                [a, b] => self
                    .a
                    .stp(weft_a64::d(*a), weft_a64::d(*b), mem(SP).pre(-16))?,
                [a] => self.a.str(weft_a64::d(*a), mem(SP).pre(-16))?,
                _ => {}
            }
        }
        let exit = self.a.new_label();
        for g in &self.k.guards {
            self.guard(g, exit)?;
        }
        let body = &self.k.body;
        self.body(body, exit)?;
        self.a.bind(exit)?;
        for pair in save_vectors.chunks(2).rev() {
            match pair {
                [a, b] => self
                    .a
                    .ldp(weft_a64::d(*a), weft_a64::d(*b), mem(SP).post(16))?,
                [a] => self.a.ldr(weft_a64::d(*a), mem(SP).post(16))?,
                _ => {}
            }
        }
        for pair in save_gprs.chunks(2).rev() {
            match pair {
                [a, b] => self.a.ldp(x(*a), x(*b), mem(SP).post(16))?,
                [a] => self.a.ldr(x(*a), mem(SP).post(16))?,
                _ => {}
            }
        }
        self.a.ret()?;
        Ok(())
    }

    /// `dst = value` (any 64-bit pattern).
    fn mov_imm(&mut self, dst: u8, value: u64) -> Result<(), NativeError> {
        if self.a.mov(x(dst), value as i64).is_ok() {
            return Ok(());
        }
        self.a.movz(x(dst), (value & 0xffff) as i64, 0)?;
        for sh in [16u32, 32, 48] {
            let part = (value >> sh) & 0xffff;
            if part != 0 {
                self.a.movk(x(dst), part as i64, i64::from(sh))?;
            }
        }
        Ok(())
    }

    /// `wdst = bits`.
    fn mov_imm32(&mut self, dst: u8, bits: u32) -> Result<(), NativeError> {
        if self.a.mov(w(dst), i64::from(bits)).is_ok() {
            return Ok(());
        }
        self.a.movz(w(dst), i64::from(bits & 0xffff), 0)?;
        self.a.movk(w(dst), i64::from(bits >> 16), 16)?;
        Ok(())
    }

    /// `dst = e` (a constant or an `Index` parameter).
    fn extent(&mut self, dst: u8, e: Extent) -> Result<(), NativeError> {
        match e {
            Extent::Const(c) => self.mov_imm(dst, c),
            Extent::Param(p) => {
                let off = self.offset(p)?;
                self.a.ldr(x(dst), mem(x(ARGS)).off(off))?;
                Ok(())
            }
        }
    }

    fn offset(&self, p: ParamId) -> Result<i64, NativeError> {
        Ok(i64::from(self.k.param(p)?.offset))
    }

    /// Branch to `fail` unless `g` holds (unsigned, as the arm compares).
    fn guard(&mut self, g: &Guard, fail: Label) -> Result<(), NativeError> {
        match g {
            Guard::SumLe(terms, limit) => {
                // t0 <= rem, rem -= t0, t1 <= rem, …: no sum ever overflows.
                self.extent(T0, *limit)?;
                for (n, t) in terms.iter().enumerate() {
                    self.extent(T1, *t)?;
                    self.a.cmp(x(T1), x(T0))?;
                    self.a.b_cond(Cond::Hi, fail)?;
                    if n + 1 < terms.len() {
                        self.a.sub(x(T0), x(T0), x(T1))?;
                    }
                }
            }
            Guard::Eq(a, b) => {
                self.extent(T0, *a)?;
                self.extent(T1, *b)?;
                self.a.cmp(x(T0), x(T1))?;
                self.a.b_cond(Cond::Ne, fail)?;
            }
        }
        Ok(())
    }

    // ---- addresses ------------------------------------------------------

    /// `dst = buf + size · (at without the terms of `skip`)` (`^ 1` on the
    /// index when `swap`); uses `x9`, `x10`, `x16`.
    fn address(
        &mut self,
        dst: u8,
        buf: ParamId,
        at: &Affine,
        skip: Option<VarId>,
        size: u64,
        swap: bool,
    ) -> Result<(), NativeError> {
        let off = self.offset(buf)?;
        let shift = match size {
            1 => 0,
            2 => 1,
            4 => 2,
            8 => 3,
            _ => return Err(unsupported(format!("elements of {size} bytes"))),
        };
        if at
            .terms
            .iter()
            .all(|(_, t)| Some(*t) == skip.map(Term::Var))
            && at.constant == 0
            && !swap
        {
            // Index 0: the buffer's own pointer.
            self.a.ldr(x(dst), mem(x(ARGS)).off(off))?;
            return Ok(());
        }
        // The index in x10, then scaled into dst.
        self.a.mov(x(T1), XZR)?;
        for (c, t) in &at.terms {
            let src = match t {
                Term::Var(v) if Some(*v) == skip => continue,
                Term::Var(v) => *self
                    .vars
                    .get(v)
                    .ok_or(NativeError::Ir(IrError::VarScope(*v)))?,
                Term::Param(p) => {
                    let o = self.offset(*p)?;
                    self.a.ldr(x(T0), mem(x(ARGS)).off(o))?;
                    T0
                }
            };
            if *c == 1 {
                self.a.add(x(T1), x(T1), x(src))?;
            } else {
                self.mov_imm(T3, *c as u64)?;
                self.a.madd(x(T1), x(src), x(T3), x(T1))?;
            }
        }
        if at.constant != 0 {
            self.mov_imm(T3, at.constant as u64)?;
            self.a.add(x(T1), x(T1), x(T3))?;
        }
        if swap {
            self.a.eor(x(T1), x(T1), 1)?;
        }
        self.a.ldr(x(dst), mem(x(ARGS)).off(off))?;
        self.a
            .op(Op::ADD_SREG_X, (x(dst), x(dst), x(T1), lsl(shift)))?;
        Ok(())
    }

    /// The bases of every access of `exprs` (and the stores `stores`) along
    /// `var`, in fresh registers, and the invariant leaves in vector
    /// registers; both for the length of one loop.
    fn prepare_loop(
        &mut self,
        var: VarId,
        exprs: &[&Expr],
        stores: &[(ParamId, &Affine)],
    ) -> Result<(), NativeError> {
        let mut keys: Vec<BaseKey> = Vec::new();
        let mut leaves: Vec<Leaf> = Vec::new();
        for e in exprs {
            collect(e, var, &mut keys, &mut leaves)?;
        }
        for (buf, at) in stores {
            keys.push(base_key(*buf, at, var, 4));
        }
        for key in keys {
            if self.bases.contains_key(&key) {
                continue;
            }
            let r = self.gpr("an access's base")?;
            let at = key.rest.clone();
            self.address(r, key.buf, &at, None, key.size, false)?;
            self.bases.insert(key, r);
        }
        for leaf in leaves {
            if self.leaves.contains_key(&leaf) {
                continue;
            }
            let n = self.vector()?;
            self.leaf(n, leaf)?;
            self.leaves.insert(leaf, n);
        }
        Ok(())
    }

    /// Frees the loop's bases and leaves in register order, so the
    /// registers allocated next, and so the bytes, are the same in every
    /// pass and every run.
    fn release_loop(&mut self) {
        let mut bases: Vec<_> = self.bases.drain().map(|(_, r)| r).collect();
        bases.sort_unstable();
        for r in bases {
            self.free_gpr(r);
        }
        let mut leaves: Vec<_> = self.leaves.drain().map(|(_, n)| n).collect();
        leaves.sort_unstable();
        for n in leaves {
            self.free_vector(n);
        }
    }

    fn leaf(&mut self, n: u8, leaf: Leaf) -> Result<(), NativeError> {
        match leaf {
            Leaf::Const(0) => self.a.movi(v(n).d2(), 0)?,
            Leaf::Const(bits) => {
                self.mov_imm32(T0, bits)?;
                self.a.dup(v(n).s4(), w(T0))?;
            }
            Leaf::Param(p) => {
                let off = self.offset(p)?;
                self.a.add(x(T0), x(ARGS), off)?;
                self.a.ld1r(v(n).list(1, weft_a64::Arr::S4), mem(x(T0)))?;
            }
        }
        Ok(())
    }

    // ---- statements -----------------------------------------------------

    fn body(&mut self, body: &[Stmt], skip: Label) -> Result<(), NativeError> {
        let mut bound_vals = Vec::new();
        let mut bound_vars = Vec::new();
        for s in body {
            match s {
                Stmt::Loop(l) => self.lower_loop(l)?,
                Stmt::Let { val, value } => {
                    let v = self.expr(value, Mode::Broadcast)?;
                    let n = self.own(v)?;
                    self.vals.insert(*val, n);
                    bound_vals.push(*val);
                }
                Stmt::Store { buf, at, value } => {
                    // f32 or i32 (an argmax's index): lane 0's bits.
                    let v = self.expr(value, Mode::Broadcast)?;
                    self.address(T2, *buf, at, None, 4, false)?;
                    self.a.str(weft_a64::s(v.reg()), mem(x(T2)))?;
                    self.free(v);
                }
                Stmt::Reduce(r) => {
                    self.lower_reduce(r)?;
                    bound_vals.push(r.result);
                }
                Stmt::Gather {
                    var,
                    buf,
                    at,
                    below,
                } => {
                    self.address(T2, *buf, at, None, 4, false)?;
                    let r = self.gpr("a gathered index")?;
                    // A 32-bit load zero-extends into the register.
                    self.a.ldr(w(r), mem(x(T2)))?;
                    self.extent(T0, *below)?;
                    self.a.cmp(x(r), x(T0))?;
                    self.a.b_cond(Cond::Hs, skip)?;
                    self.vars.insert(*var, r);
                    bound_vars.push(*var);
                }
            }
        }
        for v in bound_vals {
            if let Some(n) = self.vals.remove(&v) {
                self.free_vector(n);
            }
        }
        for v in bound_vars {
            if let Some(r) = self.vars.remove(&v) {
                self.free_gpr(r);
            }
        }
        Ok(())
    }

    /// `v` as a register this scope owns (a copy if it is bound elsewhere).
    fn own(&mut self, v: V) -> Result<u8, NativeError> {
        match v {
            V::Temp(n) => Ok(n),
            V::Bound(src) => {
                let n = self.vector()?;
                self.a.mov(v16(n), v16(src))?;
                Ok(n)
            }
        }
    }

    fn lower_loop(&mut self, l: &Loop) -> Result<(), NativeError> {
        if innermost(l) {
            return self.lower_innermost(l);
        }
        let slot = self.loops.len();
        let var = self.gpr("a loop variable")?;
        self.vars.insert(l.var, var);
        self.extent(var, l.start)?;
        let (head, latch, exit) = (self.a.new_label(), self.a.new_label(), self.a.new_label());
        self.a.bind(head)?;
        let head_at = self.a.len();
        self.extent(T0, l.end)?;
        self.a.cmp(x(var), x(T0))?;
        self.a.b_cond(Cond::Hs, exit)?;
        self.body(&l.body, latch)?;
        self.a.bind(latch)?;
        self.a.add(x(var), x(var), 1)?;
        let back_at = self.a.len();
        self.a.b(head)?;
        self.a.bind(exit)?;
        // Outermost first: the loop goes before those nested in it.
        self.loops
            .insert(slot, (l.name.to_owned(), head_at, back_at));
        self.vars.remove(&l.var);
        self.free_gpr(var);
        Ok(())
    }

    /// An innermost loop: whole vector steps, then one partial step.
    fn lower_innermost(&mut self, l: &Loop) -> Result<(), NativeError> {
        if l.width == 1 {
            return Err(unsupported(format!(
                "loop `{}`: an innermost loop of width 1",
                l.name
            )));
        }
        let w = u64::from(LANES);
        let mut exprs = Vec::new();
        let mut stores = Vec::new();
        for s in &l.body {
            match s {
                Stmt::Let { value, .. } => exprs.push(value),
                Stmt::Store { buf, at, value } => {
                    exprs.push(value);
                    stores.push((*buf, at));
                }
                _ => unreachable!("innermost bodies hold only Let and Store"),
            }
        }
        let var = self.gpr("a loop variable")?;
        self.vars.insert(l.var, var);
        self.prepare_loop(l.var, &exprs, &stores)?;
        self.extent(var, l.start)?;
        let end = self.gpr("a loop bound")?;
        self.extent(end, l.end)?;
        let (head, tail) = (self.a.new_label(), self.a.new_label());
        // Whole steps while `i + 4 <= end`.
        self.a.bind(head)?;
        let head_at = self.a.len();
        self.a.add(x(T0), x(var), w as i64)?;
        self.a.cmp(x(T0), x(end))?;
        self.a.b_cond(Cond::Hi, tail)?;
        self.vector_step(l, None)?;
        self.a.add(x(var), x(var), w as i64)?;
        let back_at = self.a.len();
        self.a.b(head)?;
        self.a.bind(tail)?;
        // The partial step: `end - i` (a whole number of granules, below
        // four) iterations, each loaded and stored alone.
        match (l.start, l.end) {
            (Extent::Const(s), Extent::Const(e)) => {
                let rem = ((e - s) % w) as u32;
                if rem > 0 {
                    self.vector_step(l, Some(rem))?;
                }
            }
            _ => {
                let done = self.a.new_label();
                self.a.sub(x(T0), x(end), x(var))?;
                let g = l.granule.max(1);
                let mut part = g;
                while part < LANES {
                    let next = self.a.new_label();
                    self.a.cmp(x(T0), i64::from(part))?;
                    self.a.b_cond(Cond::Ne, next)?;
                    self.vector_step(l, Some(part))?;
                    self.a.b(done)?;
                    self.a.bind(next)?;
                    part += g;
                }
                self.a.bind(done)?;
            }
        }
        self.loops.push((l.name.to_owned(), head_at, back_at));
        self.free_gpr(end);
        self.release_loop();
        self.vars.remove(&l.var);
        self.free_gpr(var);
        Ok(())
    }

    /// One step of an innermost loop: every statement on four iterations
    /// at once (loads before the stores they feed), as the arm's
    /// `vector_step`; a partial step loads and stores only `part`.
    fn vector_step(&mut self, l: &Loop, part: Option<u32>) -> Result<(), NativeError> {
        let mode = Mode::Vector {
            var: l.var,
            offset: 0,
            part,
        };
        let mut bound = Vec::new();
        for s in &l.body {
            match s {
                Stmt::Let { val, value } => {
                    let v = self.expr(value, mode)?;
                    let n = self.own(v)?;
                    self.vals.insert(*val, n);
                    bound.push(*val);
                }
                Stmt::Store { buf, at, value } => {
                    let v = self.expr(value, mode)?;
                    self.store(*buf, at, l.var, 0, v.reg(), part)?;
                    self.free(v);
                }
                _ => unreachable!("innermost bodies hold only Let and Store"),
            }
        }
        for v in bound {
            if let Some(n) = self.vals.remove(&v) {
                self.free_vector(n);
            }
        }
        Ok(())
    }

    /// `x9 = base + (var + offset)·size` of an access along `var` (its
    /// base alone when the access does not move with `var`).
    fn vector_address(
        &mut self,
        buf: ParamId,
        at: &Affine,
        var: VarId,
        size: u64,
        offset: i64,
    ) -> Result<(), NativeError> {
        let key = base_key(buf, at, var, size);
        let base = *self
            .bases
            .get(&key)
            .ok_or_else(|| unsupported("an access without a base"))?;
        if at.coefficient(var) == 0 {
            self.a.mov(x(T0), x(base))?;
            return Ok(());
        }
        let index = *self
            .vars
            .get(&var)
            .ok_or(NativeError::Ir(IrError::VarScope(var)))?;
        let shift = size.trailing_zeros() as u8;
        self.a
            .op(Op::ADD_SREG_X, (x(T0), x(base), x(index), lsl(shift)))?;
        let bytes = offset * size as i64;
        if bytes > 0 {
            self.a.add(x(T0), x(T0), bytes)?;
        } else if bytes < 0 {
            self.a.sub(x(T0), x(T0), -bytes)?;
        }
        Ok(())
    }

    /// Four lanes of `n` (or the first `part`) to `buf[at]` along `var`.
    fn store(
        &mut self,
        buf: ParamId,
        at: &Affine,
        var: VarId,
        offset: i64,
        n: u8,
        part: Option<u32>,
    ) -> Result<(), NativeError> {
        self.vector_address(buf, at, var, 4, offset)?;
        match part.unwrap_or(LANES) {
            4 => self.a.str(weft_a64::q(n), mem(x(T0)))?,
            3 => {
                self.a.str(weft_a64::d(n), mem(x(T0)))?;
                self.a.add(x(T0), x(T0), 8)?;
                self.a.st1(v(n).s(2), mem(x(T0)))?;
            }
            2 => self.a.str(weft_a64::d(n), mem(x(T0)))?,
            1 => self.a.str(weft_a64::s(n), mem(x(T0)))?,
            p => return Err(unsupported(format!("a partial step of {p} lanes"))),
        }
        Ok(())
    }

    // ---- expressions ----------------------------------------------------

    /// A destination for an operation on `a` (and `b`): a temporary operand
    /// is reused, the other freed.
    fn dest(&mut self, a: V, b: Option<V>) -> Result<u8, NativeError> {
        Ok(match (a, b) {
            (V::Temp(n), Some(other)) => {
                self.free(other);
                n
            }
            (V::Temp(n), None) => n,
            (V::Bound(_), Some(V::Temp(n))) => n,
            (V::Bound(_), _) => self.vector()?,
        })
    }

    fn expr(&mut self, e: &Expr, mode: Mode) -> Result<V, NativeError> {
        Ok(match e {
            Expr::Load {
                buf,
                elem,
                at,
                swap_pairs,
            } => self.load(*buf, *elem, at, *swap_pairs, mode)?,
            Expr::Const(bits) => match self.leaves.get(&Leaf::Const(*bits)) {
                Some(n) if matches!(mode, Mode::Vector { .. }) => V::Bound(*n),
                _ => {
                    let n = self.vector()?;
                    self.leaf(n, Leaf::Const(*bits))?;
                    V::Temp(n)
                }
            },
            Expr::Param(p) => match self.leaves.get(&Leaf::Param(*p)) {
                Some(n) if matches!(mode, Mode::Vector { .. }) => V::Bound(*n),
                _ => {
                    let n = self.vector()?;
                    self.leaf(n, Leaf::Param(*p))?;
                    V::Temp(n)
                }
            },
            Expr::Val(v) => V::Bound(
                *self
                    .vals
                    .get(v)
                    .ok_or(NativeError::Ir(IrError::ValScope(*v)))?,
            ),
            Expr::Unary(op, x) => {
                let x = self.expr(x, mode)?;
                match op {
                    Unary::Neg => {
                        // The sign bit flipped, NaN included (the arm's fneg).
                        let d = self.dest(x, None)?;
                        self.a.fneg(v(d).s4(), v(x.reg()).s4())?;
                        V::Temp(d)
                    }
                    Unary::Sqrt => {
                        let d = self.dest(x, None)?;
                        self.a.fsqrt(v(d).s4(), v(x.reg()).s4())?;
                        V::Temp(d)
                    }
                    Unary::Exp => {
                        return Err(unsupported(
                            "exp (its correctly rounded steps are weft-libm's CLIF; \
                             SiLU·mul's twins are weft-elementwise's exp maps)",
                        ))
                    }
                    Unary::IntToF32 => {
                        let d = self.dest(x, None)?;
                        self.a.scvtf(v(d).s4(), v(x.reg()).s4())?;
                        V::Temp(d)
                    }
                    Unary::F16ToF32 => self.widen_f16(x)?,
                }
            }
            // Both operands the same expression (`x ⊗ x`): evaluated once.
            // An expression has no stores inside it, so its two
            // evaluations would read the same memory and give the same
            // value.
            Expr::Binary(op, a, b) if a == b => {
                let x = self.expr(a, mode)?;
                let d = self.dest(x, None)?;
                self.binary(*op, d, x.reg(), x.reg())?;
                V::Temp(d)
            }
            Expr::Binary(op, a, b) => {
                let a = self.expr(a, mode)?;
                let b = self.expr(b, mode)?;
                let d = self.dest(a, Some(b))?;
                self.binary(*op, d, a.reg(), b.reg())?;
                V::Temp(d)
            }
        })
    }

    /// `d = a op b` on four f32 lanes: one IEEE operation, no fusion.
    fn binary(&mut self, op: Binary, d: u8, a: u8, b: u8) -> Result<(), NativeError> {
        let (d, a, b) = (v(d).s4(), v(a).s4(), v(b).s4());
        match op {
            Binary::Add => self.a.fadd(d, a, b)?,
            Binary::Sub => self.a.fsub(d, a, b)?,
            Binary::Mul => self.a.fmul(d, a, b)?,
            Binary::Div => self.a.fdiv(d, a, b)?,
        }
        Ok(())
    }

    fn load(
        &mut self,
        buf: ParamId,
        elem: Elem,
        at: &Affine,
        swap: bool,
        mode: Mode,
    ) -> Result<V, NativeError> {
        let size = elem.size();
        let (whole, part) = match mode {
            Mode::Broadcast => {
                self.address(T2, buf, at, None, size, swap)?;
                self.a.mov(x(T0), x(T2))?;
                (false, None)
            }
            Mode::Vector { var, offset, part } => {
                self.vector_address(buf, at, var, size, offset)?;
                (at.coefficient(var) != 0, part)
            }
        };
        // The address is in x9.
        let n = self.vector()?;
        if !whole {
            // One element for every lane; it exists whenever a step runs.
            self.broadcast_element(n, elem)?;
            return Ok(V::Temp(n));
        }
        if elem == Elem::U16 && part.is_some() {
            return Err(unsupported(
                "a partial step of U16 loads (no family's nest has one, so none is judged)",
            ));
        }
        let bytes = size * u64::from(part.unwrap_or(LANES));
        self.load_bytes(n, bytes)?;
        match elem {
            Elem::F32 | Elem::U32 => {}
            // Widened as they are loaded: sign-extended bytes, zero-extended
            // halfwords.
            Elem::I8 => {
                self.a.sxtl(v(n).h8(), v(n).b8())?;
                self.a.sxtl(v(n).s4(), v(n).h4())?;
            }
            Elem::U16 => self.a.uxtl(v(n).s4(), v(n).h4())?,
        }
        if swap {
            // Lanes (1, 0, 3, 2): every lane's pair partner (pairs never
            // straddle a step: even start, even granule). `ext` rotates
            // lane 1 to lane 0 and lane 3 to lane 2; `trn1` interleaves.
            let t = self.vector()?;
            self.a.ext(v(t).b16(), v(n).b16(), v(n).b16(), 4)?;
            self.a.trn1(v(n).s4(), v(t).s4(), v(n).s4())?;
            self.free_vector(t);
        }
        Ok(V::Temp(n))
    }

    /// Exactly `bytes` bytes from `[x9]` into the low bytes of `n`: the
    /// largest power-of-two piece by `ldr` (which clears the rest), a
    /// remaining half-size piece by an `ld1` lane load.
    fn load_bytes(&mut self, n: u8, bytes: u64) -> Result<(), NativeError> {
        let first = 1u64 << (63 - bytes.leading_zeros());
        let reg = |b: u64| match b {
            1 => Ok(weft_a64::b(n)),
            2 => Ok(weft_a64::h(n)),
            4 => Ok(weft_a64::s(n)),
            8 => Ok(weft_a64::d(n)),
            16 => Ok(weft_a64::q(n)),
            _ => Err(unsupported(format!("a load of {b} bytes"))),
        };
        self.a.ldr(reg(first)?, mem(x(T0)))?;
        let rest = bytes - first;
        if rest > 0 {
            if rest * 2 != first {
                return Err(unsupported(format!("a load of {bytes} bytes")));
            }
            let lane = 2u8;
            let elem = match rest {
                1 => v(n).b(lane),
                2 => v(n).h(lane),
                4 => v(n).s(lane),
                _ => return Err(unsupported(format!("a load of {bytes} bytes"))),
            };
            self.a.add(x(T0), x(T0), first as i64)?;
            self.a.ld1(elem, mem(x(T0)))?;
        }
        Ok(())
    }

    /// The element at `[x9]` in every lane of `n`: 32-bit elements by
    /// `ld1r`, narrower ones widened through `w9` (`i8` sign-extended,
    /// `u16` zero-extended, as the arm's `sload8`/`uload16`).
    fn broadcast_element(&mut self, n: u8, elem: Elem) -> Result<(), NativeError> {
        match elem {
            Elem::F32 | Elem::U32 => {
                self.a.ld1r(v(n).list(1, weft_a64::Arr::S4), mem(x(T0)))?;
            }
            Elem::I8 => {
                self.a.ldrb(w(T0), mem(x(T0)))?;
                self.a.sxtb(w(T0), w(T0))?;
                self.a.dup(v(n).s4(), w(T0))?;
            }
            Elem::U16 => {
                self.a.ldrh(w(T0), mem(x(T0)))?;
                self.a.dup(v(n).s4(), w(T0))?;
            }
        }
        Ok(())
    }

    /// A fresh register holding the 32-bit pattern `bits` in every lane.
    fn constant(&mut self, bits: u32) -> Result<u8, NativeError> {
        let n = self.vector()?;
        self.leaf(n, Leaf::Const(bits))?;
        Ok(n)
    }

    /// [`crate::ir::f16_bits_to_f32`] on every lane, the arm's
    /// `widen_f16` step for step: normals by rebiasing the exponent,
    /// subnormals as `m ⊗ 2^-24` (exact), infinities and NaNs by rebiasing
    /// twice (payload kept, not quietened), then the sign.
    fn widen_f16(&mut self, h: V) -> Result<V, NativeError> {
        let c = self.constant(0x7fff)?;
        let em = self.vector()?;
        self.a.and(v16(em), v16(h.reg()), v16(c))?;
        self.leaf(c, Leaf::Const(0x8000))?;
        let sign = self.vector()?;
        self.a.and(v16(sign), v16(h.reg()), v16(c))?;
        self.free(h);
        self.a.shl(v(sign).s4(), v(sign).s4(), 16)?;
        let normal = self.vector()?;
        self.a.shl(v(normal).s4(), v(em).s4(), 13)?;
        self.leaf(c, Leaf::Const(F16_REBIAS))?;
        self.a.add(v(normal).s4(), v(normal).s4(), v(c).s4())?;
        let special = self.vector()?;
        self.a.add(v(special).s4(), v(normal).s4(), v(c).s4())?;
        let sub = self.vector()?;
        self.a.scvtf(v(sub).s4(), v(em).s4())?;
        self.leaf(c, Leaf::Const(F16_SUBNORMAL_SCALE.to_bits()))?;
        self.binary(Binary::Mul, sub, sub, c)?;
        // em >= 0x7c00 (signed) is em > 0x7bff; em < 0x400 is 0x400 > em.
        let is_special = self.vector()?;
        self.leaf(c, Leaf::Const(0x7bff))?;
        self.a.cmgt(v(is_special).s4(), v(em).s4(), v(c).s4())?;
        let is_sub = self.vector()?;
        self.leaf(c, Leaf::Const(0x400))?;
        self.a.cmgt(v(is_sub).s4(), v(c).s4(), v(em).s4())?;
        self.a.bit(v16(normal), v16(special), v16(is_special))?;
        self.a.bit(v16(normal), v16(sub), v16(is_sub))?;
        self.a.orr(v16(normal), v16(normal), v16(sign))?;
        for t in [c, em, sign, special, sub, is_special, is_sub] {
            self.free_vector(t);
        }
        Ok(V::Temp(normal))
    }

    // ---- reductions -----------------------------------------------------

    fn lower_reduce(&mut self, r: &Reduce) -> Result<(), NativeError> {
        if r.fold != Fold::Halving {
            return Err(unsupported(format!(
                "reduce `{}`: fold {:?}",
                r.name, r.fold
            )));
        }
        let w = u64::from(LANES);
        let lanes = u64::from(reduce_lanes(r, LANES));
        if lanes < w {
            return Err(unsupported(format!(
                "reduce `{}`: {lanes} lanes, fewer than a register's {w}",
                r.name
            )));
        }
        // Every load along the reduction must be of stride 0 or 1, unswapped
        // (the checker asks this only of vector reductions).
        let mut loads = Vec::new();
        crate::ir::collect_loads(&r.value, &mut loads);
        for (_, at, swap) in loads {
            let c = at.coefficient(r.var);
            if swap || (c != 0 && c != 1) {
                return Err(unsupported(format!(
                    "reduce `{}`: a load of stride {c} or a pair swap",
                    r.name
                )));
            }
        }
        let n = r.end - r.start;
        let (groups, rem) = (n / lanes, n % lanes);
        let regs = (lanes / w) as usize;

        // Accumulators, at the identity: +0, or (-inf, their own index).
        let iota = match r.op {
            ReduceOp::Sum => None,
            ReduceOp::ArgMax => Some(self.iota()?),
        };
        let mut accs = Vec::with_capacity(regs);
        for a in 0..regs {
            let value = self.vector()?;
            let acc = match (r.op, iota) {
                (ReduceOp::ArgMax, Some(iota)) => {
                    self.leaf(value, Leaf::Const(f32::NEG_INFINITY.to_bits()))?;
                    let index = self.vector()?;
                    self.index_lanes(index, iota, None, r.start + a as u64 * w)?;
                    Acc {
                        value,
                        index: Some(index),
                    }
                }
                _ => {
                    self.leaf(value, Leaf::Const(0))?;
                    Acc { value, index: None }
                }
            };
            accs.push(acc);
        }
        let g = self.gpr("a reduction variable")?;
        self.vars.insert(r.var, g);
        let mut exprs = vec![&r.value];
        let mut stores = Vec::new();
        for s in &r.body {
            match s {
                Stmt::Let { value, .. } => exprs.push(value),
                Stmt::Store { buf, at, value } => {
                    exprs.push(value);
                    stores.push((*buf, at));
                }
                _ => {
                    return Err(unsupported(format!(
                        "reduce `{}`: a nested statement",
                        r.name
                    )))
                }
            }
        }
        self.prepare_loop(r.var, &exprs, &stores)?;
        self.extent(g, Extent::Const(r.start))?;

        // Whole groups of `lanes` elements.
        if groups > 0 {
            let stop = r.start + groups * lanes;
            let (head, exit) = (self.a.new_label(), self.a.new_label());
            self.a.bind(head)?;
            let head_at = self.a.len();
            self.mov_imm(T1, stop)?;
            self.a.cmp(x(g), x(T1))?;
            self.a.b_cond(Cond::Hs, exit)?;
            for (a, acc) in accs.iter().enumerate() {
                self.step(r, *acc, iota, g, (a as u64 * w) as i64, None)?;
            }
            self.mov_imm(T1, lanes)?;
            self.a.add(x(g), x(g), x(T1))?;
            let back_at = self.a.len();
            self.a.b(head)?;
            self.a.bind(exit)?;
            self.loops.push((r.name.to_owned(), head_at, back_at));
        }

        // The remainder: whole registers into their accumulators, then the
        // last elements into their lanes only.
        for (a, acc) in accs.iter().enumerate().take((rem / w) as usize) {
            self.step(r, *acc, iota, g, (a as u64 * w) as i64, None)?;
        }
        if rem % w != 0 {
            let a = (rem / w) as usize;
            let part = (rem % w) as u32;
            self.step(r, accs[a], iota, g, (a as u64 * w) as i64, Some(part))?;
        }
        self.release_loop();
        self.vars.remove(&r.var);
        self.free_gpr(g);
        if let Some(iota) = iota {
            self.free_vector(iota);
        }

        // The halving fold: registers pairwise, then within the last one.
        let mut live = accs;
        while live.len() > 1 {
            let h = live.len() / 2;
            for a in 0..h {
                self.fold_pair(r.op, live[a], live[a + h])?;
            }
            for dead in live.split_off(h) {
                self.free_vector(dead.value);
                if let Some(i) = dead.index {
                    self.free_vector(i);
                }
            }
        }
        let acc = live[0];
        self.fold_register(r.op, acc)?;
        // The result: the sum, or the index (the values are done with).
        let result = match acc.index {
            Some(index) => {
                self.free_vector(acc.value);
                index
            }
            None => acc.value,
        };
        self.vals.insert(r.result, result);
        Ok(())
    }

    /// Element(s) at `offset` past the reduction variable `g`: the
    /// reduction's body (its stores of `part` lanes in a partial step),
    /// then the value into `acc` (the arm's `step`); in a partial step
    /// only the first `part` lanes change.
    fn step(
        &mut self,
        r: &Reduce,
        acc: Acc,
        iota: Option<u8>,
        g: u8,
        offset: i64,
        part: Option<u32>,
    ) -> Result<(), NativeError> {
        let mode = Mode::Vector {
            var: r.var,
            offset,
            part,
        };
        let mut bound = Vec::new();
        for s in &r.body {
            match s {
                Stmt::Let { val, value } => {
                    let v = self.expr(value, mode)?;
                    let n = self.own(v)?;
                    self.vals.insert(*val, n);
                    bound.push(*val);
                }
                Stmt::Store { buf, at, value } => {
                    let v = self.expr(value, mode)?;
                    self.store(*buf, at, r.var, offset, v.reg(), part)?;
                    self.free(v);
                }
                _ => {
                    return Err(unsupported(format!(
                        "reduce `{}`: a nested statement",
                        r.name
                    )))
                }
            }
        }
        match (acc.index, iota) {
            (Some(index), Some(iota)) => {
                let v = self.expr(&r.value, mode)?;
                let vi = self.vector()?;
                // The elements' indices: g + offset + lane.
                self.a.add(x(T0), x(g), offset)?;
                self.index_lanes(vi, iota, Some(T0), 0)?;
                let new = Acc {
                    value: v.reg(),
                    index: Some(vi),
                };
                self.argmax_step(
                    Acc {
                        value: acc.value,
                        index: Some(index),
                    },
                    new,
                    part,
                )?;
                self.free(v);
                self.free_vector(vi);
            }
            _ => {
                let v = self.expr(&r.value, mode)?;
                match part {
                    None => self.binary(Binary::Add, acc.value, acc.value, v.reg())?,
                    Some(p) => {
                        // The sum in every lane, then only the first `p`
                        // lanes moved into the accumulator.
                        let t = self.vector()?;
                        self.binary(Binary::Add, t, acc.value, v.reg())?;
                        self.merge_lanes(acc.value, t, p)?;
                        self.free_vector(t);
                    }
                }
                self.free(v);
            }
        }
        for v in bound {
            if let Some(n) = self.vals.remove(&v) {
                self.free_vector(n);
            }
        }
        Ok(())
    }

    /// Lanes `0..part` of `src` into `dst`; the other lanes of `dst` kept.
    fn merge_lanes(&mut self, dst: u8, src: u8, part: u32) -> Result<(), NativeError> {
        match part {
            1 => self.a.mov(v(dst).s(0), v(src).s(0))?,
            2 => self.a.mov(v(dst).d(0), v(src).d(0))?,
            3 => {
                self.a.mov(v(dst).d(0), v(src).d(0))?;
                self.a.mov(v(dst).s(2), v(src).s(2))?;
            }
            p => return Err(unsupported(format!("a partial step of {p} lanes"))),
        }
        Ok(())
    }

    /// `t`'s lanes `0..h` = `a`'s lanes `h..2h` (the other lanes of `t`:
    /// whatever; only the low ones are read).
    fn halve(&mut self, t: u8, a: u8, h: u32) -> Result<(), NativeError> {
        self.a
            .ext(v(t).b16(), v(a).b16(), v(a).b16(), i64::from(4 * h))?;
        Ok(())
    }

    /// The last register's lanes folded by halves down to lane 0, which
    /// is then broadcast (the arm's fold after its accumulators are one).
    fn fold_register(&mut self, op: ReduceOp, acc: Acc) -> Result<(), NativeError> {
        let mut h = LANES / 2;
        let tv = self.vector()?;
        let ti = match acc.index {
            Some(_) => Some(self.vector()?),
            None => None,
        };
        while h >= 1 {
            self.halve(tv, acc.value, h)?;
            if let (Some(ti), Some(ai)) = (ti, acc.index) {
                self.halve(ti, ai, h)?;
            }
            self.fold_pair(
                op,
                acc,
                Acc {
                    value: tv,
                    index: ti,
                },
            )?;
            h /= 2;
        }
        self.free_vector(tv);
        if let Some(ti) = ti {
            self.free_vector(ti);
        }
        let r = acc.index.unwrap_or(acc.value);
        self.a.dup(v(r).s4(), v(r).s(0))?;
        Ok(())
    }

    /// `a = a ⊕ b` lane by lane, `a` holding the lower lanes.
    fn fold_pair(&mut self, op: ReduceOp, a: Acc, b: Acc) -> Result<(), NativeError> {
        match (op, a.index, b.index) {
            (ReduceOp::Sum, _, _) => self.binary(Binary::Add, a.value, a.value, b.value),
            (ReduceOp::ArgMax, Some(_), Some(_)) => self.argmax_merge(a, b),
            (ReduceOp::ArgMax, _, _) => Err(unsupported("an argmax without indices")),
        }
    }

    /// `[0, 1, 2, 3]` as i32 lanes, built without memory.
    fn iota(&mut self) -> Result<u8, NativeError> {
        let n = self.vector()?;
        self.a.movi(v(n).d2(), 0)?;
        for lane in 1..LANES as u8 {
            self.a.mov(w(T0), i64::from(lane))?;
            self.a.mov(v(n).s(lane), w(T0))?;
        }
        Ok(n)
    }

    /// `dst = iota + (gpr or base)` in every lane.
    fn index_lanes(
        &mut self,
        dst: u8,
        iota: u8,
        gpr: Option<u8>,
        base: u64,
    ) -> Result<(), NativeError> {
        let base = u32::try_from(base)
            .ok()
            .filter(|b| *b <= i32::MAX as u32)
            .ok_or_else(|| unsupported("an index beyond i32"))?;
        match gpr {
            Some(r) => {
                if base != 0 {
                    return Err(unsupported("an index from a register and a constant"));
                }
                self.a.dup(v(dst).s4(), w(r))?;
            }
            None => self.leaf(dst, Leaf::Const(base))?,
        }
        self.a.add(v(dst).s4(), v(dst).s4(), v(iota).s4())?;
        Ok(())
    }

    /// Element(s) `new` (later indices than anything in `acc`) into `acc`
    /// (the arm's `argmax_step`): it wins if `!(new <= acc)` and `acc` is
    /// not a NaN, i.e. it ranks higher (a NaN above numbers); equal ranks
    /// keep `acc`. In a partial step only the first `part` lanes may change.
    fn argmax_step(&mut self, acc: Acc, new: Acc, part: Option<u32>) -> Result<(), NativeError> {
        let (Some(ai), Some(ni)) = (acc.index, new.index) else {
            return Err(unsupported("an argmax without indices"));
        };
        let not_above = self.vector()?;
        let acc_number = self.vector()?;
        // new <= acc is acc >= new (false when either is a NaN).
        self.a
            .fcmge(v(not_above).s4(), v(acc.value).s4(), v(new.value).s4())?;
        self.a
            .fcmeq(v(acc_number).s4(), v(acc.value).s4(), v(acc.value).s4())?;
        // take = acc_number & !not_above, into `not_above`.
        self.a
            .bic(v16(not_above), v16(acc_number), v16(not_above))?;
        if let Some(p) = part {
            for lane in p..LANES {
                self.a.mov(v(not_above).s(lane as u8), WZR)?;
            }
        }
        self.a.bit(v16(acc.value), v16(new.value), v16(not_above))?;
        self.a.bit(v16(ai), v16(ni), v16(not_above))?;
        self.free_vector(acc_number);
        self.free_vector(not_above);
        Ok(())
    }

    /// The general combine (the arm's `argmax_merge`, the fold): `b` wins
    /// if it ranks higher, or ranks the same (equal, or both NaN) with a
    /// smaller index. `a` holds the result.
    fn argmax_merge(&mut self, a: Acc, b: Acc) -> Result<(), NativeError> {
        let (Some(ai), Some(bi)) = (a.index, b.index) else {
            return Err(unsupported("an argmax without indices"));
        };
        // `same` from the operands as they are, before the step changes `a`.
        let same = self.vector()?;
        let t = self.vector()?;
        let u = self.vector()?;
        self.a
            .fcmeq(v(same).s4(), v(b.value).s4(), v(a.value).s4())?;
        // Both NaN: neither equals itself.
        self.a.fcmeq(v(t).s4(), v(b.value).s4(), v(b.value).s4())?;
        self.a.fcmeq(v(u).s4(), v(a.value).s4(), v(a.value).s4())?;
        self.a.orr(v16(t), v16(t), v16(u))?;
        self.a.op(Op::NOT_V, (v16(t), v16(t)))?;
        self.a.orr(v16(same), v16(same), v16(t))?;
        // ... with a smaller index: bi < ai.
        self.a.cmgt(v(t).s4(), v(ai).s4(), v(bi).s4())?;
        self.a.and(v16(same), v16(same), v16(t))?;
        self.free_vector(u);
        self.free_vector(t);
        self.argmax_step(a, b, None)?;
        self.a.bit(v16(a.value), v16(b.value), v16(same))?;
        self.a.bit(v16(ai), v16(bi), v16(same))?;
        self.free_vector(same);
        Ok(())
    }
}

/// Register `n` as `.16b` (bitwise operations and moves).
fn v16(n: u8) -> weft_a64::Operand {
    v(n).b16()
}

/// The bases and invariant leaves of `e` along `var`.
fn collect(
    e: &Expr,
    var: VarId,
    keys: &mut Vec<BaseKey>,
    leaves: &mut Vec<Leaf>,
) -> Result<(), NativeError> {
    match e {
        Expr::Load { buf, elem, at, .. } => {
            let c = at.coefficient(var);
            if c != 0 && c != 1 {
                return Err(unsupported(format!(
                    "a load of stride {c} in a vector step"
                )));
            }
            keys.push(base_key(*buf, at, var, elem.size()));
        }
        Expr::Const(bits) => leaves.push(Leaf::Const(*bits)),
        Expr::Param(p) => leaves.push(Leaf::Param(*p)),
        Expr::Val(_) => {}
        Expr::Unary(_, x) => collect(x, var, keys, leaves)?,
        Expr::Binary(_, a, b) => {
            collect(a, var, keys, leaves)?;
            collect(b, var, keys, leaves)?;
        }
    }
    Ok(())
}
