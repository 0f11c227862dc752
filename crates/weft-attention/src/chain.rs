//! The unfused chain the fused kernel replaces, as seven ordinary arms a
//! plan may run one after another (families `attention.scores`,
//! `attention.scale`, `attention.rowmax`, `attention.exp`,
//! `attention.rowsum`, `attention.normalise`, `attention.pv`), each with
//! its scalar reference in [`super::reference`] (`chain_*`).
//!
//! Every stage takes [`ChainArgs`]: the fused arguments (same offsets,
//! same units) plus the score matrix `S` (row `r = h·lq + i`, `s_row`
//! elements apart, only the first `n_i` entries of a row used), the row
//! shifts `M` and the row sums `L`. A stage touches only the rows of the
//! units in its range, so every stage splits like the fused kernel.
//!
//! Stage by stage (binary32, round to nearest even):
//!
//! - **scores**: `S[r][j] = dot(q, k_j)`, the fused contract's dot (16
//!   `fma` lanes, same fold), unscaled.
//! - **scale**: `S[r][j] = S[r][j] · scale`.
//! - **rowmax**: `M[r] = max_j S[r][j]` (any order), `+0` if that is `-inf`.
//! - **exp**: `S[r][j] = E(S[r][j] - M[r])`, the family's exp.
//! - **rowsum**: 16 lanes `a[j mod 16] = a[j mod 16] + S[r][j]` (adds, no
//!   FMA, `j` in order; a zero pads a ragged last group, exact because the
//!   lanes are never `-0`), folded as in the fused contract, into `L[r]`.
//! - **normalise**: `S[r][j] = S[r][j] / L[r]`.
//! - **pv**: `O[h][i][c]`: from `+0`, `fma(S[r][j], v_j[c], ·)` for `j` in order.
//!
//! So the chain's scores are bit for bit the fused kernel's, and the two
//! differ only in how softmax and the weighted sum round: the chain
//! subtracts the final maximum once, sums with adds, normalises the
//! weights before the product with V; the fused kernel rescales running
//! sums by `α` and divides at the end.

use std::sync::Arc;

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, Function, InstBuilder, StackSlotData, StackSlotKind, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use weft_kernel::{
    Aliasing, ArithmeticContract, ArmEntry, Checked, Contract, Family, FamilyEntry, FmaUse, Host,
    Isa, Judged, Kernel, KernelArgs, LoopTrip, MemberViews, NanRule, NativeCode, Offer,
    ReductionOrder, Refusal, Site, TwinCheck,
};
use weft_managed::{ArmCode, ManagedError, Target};

use weft_managed::arm_build::{build_native, host_isa};

use super::arm::{data_flags, dot, fold16, load4, load_args, unit_rows, visible, ArgVals, ClifF32};
use super::reference::{self, Scores};
use super::{AttentionArgs, AttentionShape, KvSlice, KvType, Layout, SiteShape, BLOCK};

/// The name of the chain's argument struct in contracts.
pub const ARGS_NAME: &str = "ChainArgs";

/// The stages of the chain, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// `S = Q·Kᵀ`.
    Scores,
    /// `S = S · scale`.
    Scale,
    /// `M = rowmax(S)` (with the `-inf → +0` shift rule).
    RowMax,
    /// `S = E(S - M)`.
    Exp,
    /// `L = rowsum(S)`.
    RowSum,
    /// `S = S / L`.
    Normalise,
    /// `O = S·V`.
    Pv,
}

impl Stage {
    /// Every stage, in the chain's order.
    pub const ALL: [Stage; 7] = [
        Stage::Scores,
        Stage::Scale,
        Stage::RowMax,
        Stage::Exp,
        Stage::RowSum,
        Stage::Normalise,
        Stage::Pv,
    ];

    /// The stage's family name.
    pub fn family(self) -> &'static str {
        match self {
            Stage::Scores => "attention.scores",
            Stage::Scale => "attention.scale",
            Stage::RowMax => "attention.rowmax",
            Stage::Exp => "attention.exp",
            Stage::RowSum => "attention.rowsum",
            Stage::Normalise => "attention.normalise",
            Stage::Pv => "attention.pv",
        }
    }

    /// The arm's candidate name.
    pub fn arm_name(self) -> &'static str {
        match self {
            Stage::Scores => "attention.scores.arm.f32x4",
            Stage::Scale => "attention.scale.arm.f32x4",
            Stage::RowMax => "attention.rowmax.arm.f32x4",
            Stage::Exp => "attention.exp.arm.f32x4",
            Stage::RowSum => "attention.rowsum.arm.f32x4",
            Stage::Normalise => "attention.normalise.arm.f32x4",
            Stage::Pv => "attention.pv.arm.f32x4",
        }
    }

    fn notes(self) -> &'static str {
        match self {
            Stage::Scores => "S[r][j] = dot(q, k_j): a[c mod 16] = fma(q[c], k[c], a), fused fold",
            Stage::Scale => "S[r][j] = S[r][j] * scale",
            Stage::RowMax => "M[r] = max_j S[r][j] (any order), +0 if -inf",
            Stage::Exp => "S[r][j] = E(S[r][j] - M[r]), the family's exp",
            Stage::RowSum => "L[r] = fold(a), a[j mod 16] += S[r][j] in j order (no FMA)",
            Stage::Normalise => "S[r][j] = S[r][j] / L[r]",
            Stage::Pv => "O[h][i][c] = fma(S[r][j], v_j[c], .) for j in order from +0",
        }
    }
}

/// The arguments of every chain stage: the fused arguments (the same
/// units) plus the scratch rows. Build them with [`ChainArgs::new`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ChainArgs {
    /// Q, K, V, O, sizes and the unit range, as for the fused kernel.
    pub attn: AttentionArgs,
    /// The score matrix, `heads · lq` rows.
    pub s: *mut f32,
    /// Elements between rows of `s` (at least `lk`).
    pub s_row: usize,
    /// Row shifts, `heads · lq`.
    pub m: *mut f32,
    /// Row sums, `heads · lq`.
    pub l: *mut f32,
}

/// Byte offsets of [`ChainArgs`]' own fields (after the fused ones).
pub mod chain_offsets {
    /// `s`.
    pub const S: i32 = super::super::offsets::SIZE as i32;
    /// `s_row`.
    pub const S_ROW: i32 = S + 8;
    /// `m`.
    pub const M: i32 = S + 16;
    /// `l`.
    pub const L: i32 = S + 24;
}

// SAFETY: `ChainArgs` is the `#[repr(C)]` struct of every contract naming
// ARGS_NAME. A stage writes only the S rows, M and L entries and O rows of
// the (head, row) pairs of its units, and reads only those S rows besides
// Q, K, V (never written): restricted copies over disjoint unit ranges
// write disjoint memory and read nothing another writes.
unsafe impl KernelArgs for ChainArgs {
    const NAME: &'static str = ARGS_NAME;

    fn range(&self) -> std::ops::Range<u64> {
        self.attn.range()
    }

    fn restrict(&self, range: std::ops::Range<u64>) -> Self {
        Self {
            attn: self.attn.restrict(range),
            ..*self
        }
    }
}

// SAFETY: plain data; pointers are only dereferenced by a body called
// through `Kernel::call`, whose caller keeps them valid.
unsafe impl Send for ChainArgs {}
// SAFETY: as for `Send`.
unsafe impl Sync for ChainArgs {}

/// Scratch buffers of the chain for one shape.
#[derive(Clone, Debug, Default)]
pub struct ChainScratch {
    /// Scores, `heads · lq · lk`.
    pub s: Vec<f32>,
    /// Row shifts.
    pub m: Vec<f32>,
    /// Row sums.
    pub l: Vec<f32>,
}

impl ChainScratch {
    /// Buffers for `shape` (row stride `lk`).
    pub fn new(shape: &AttentionShape) -> Self {
        let rows = shape.heads * shape.lq;
        Self {
            s: vec![0.0; rows * shape.lk],
            m: vec![0.0; rows],
            l: vec![0.0; rows],
        }
    }
}

impl ChainArgs {
    /// Arguments for every unit of `shape`, extents checked as for the
    /// fused kernel plus the scratch: `heads · lq` rows of `lk` scores.
    pub fn new(
        shape: &AttentionShape,
        layout: &Layout,
        q: &[f32],
        k: KvSlice<'_>,
        v: KvSlice<'_>,
        o: &mut [f32],
        scratch: &mut ChainScratch,
    ) -> Result<Self, Refusal> {
        let attn = AttentionArgs::new(shape, layout, q, k, v, o)?;
        let rows = shape.heads * shape.lq;
        let short = |what: &str, have: usize, want: usize| Refusal::BadOperand {
            operand: what.to_owned(),
            reason: format!("{have} elements, the chain needs {want}"),
        };
        let s_len = rows
            .checked_mul(shape.lk)
            .ok_or_else(|| short("s", scratch.s.len(), usize::MAX))?;
        if scratch.s.len() < s_len {
            return Err(short("s", scratch.s.len(), s_len));
        }
        if scratch.m.len() < rows {
            return Err(short("m", scratch.m.len(), rows));
        }
        if scratch.l.len() < rows {
            return Err(short("l", scratch.l.len(), rows));
        }
        Ok(Self {
            attn,
            s: scratch.s.as_mut_ptr(),
            s_row: shape.lk,
            m: scratch.m.as_mut_ptr(),
            l: scratch.l.as_mut_ptr(),
        })
    }
}

/// The contract of `stage` at `site`.
pub fn contract(stage: Stage, site: &SiteShape) -> Contract {
    let reduction = match stage {
        Stage::Scores => ReductionOrder::Strided {
            lanes: BLOCK as u32,
            fold: "((a0+a8)+(a4+a12)) pairs, then (h0+h1)+(h2+h3)".to_owned(),
        },
        Stage::RowSum => ReductionOrder::Strided {
            lanes: BLOCK as u32,
            fold: "((a0+a8)+(a4+a12)) pairs, then (h0+h1)+(h2+h3)".to_owned(),
        },
        Stage::RowMax => ReductionOrder::Described("max in any order (exact)".to_owned()),
        Stage::Pv => ReductionOrder::Sequential,
        _ => ReductionOrder::None,
    };
    let fma = match stage {
        Stage::Scores | Stage::Exp | Stage::Pv => FmaUse::AsSpecified,
        _ => FmaUse::Never,
    };
    Contract {
        family: stage.family().to_owned(),
        geometry: site.geometry(),
        args: ARGS_NAME.to_owned(),
        arithmetic: ArithmeticContract {
            accumulator_lanes: match stage {
                Stage::Scores | Stage::RowSum => BLOCK as u32,
                _ => 1,
            },
            reduction,
            fma,
            nan: NanRule::ByClass,
            notes: stage.notes().to_owned(),
        },
        aliasing: Aliasing::disjoint(),
    }
}

/// What a row body is given.
struct RowCtx {
    /// Keys the row sees.
    n: Value,
    /// Pointer to the row's Q.
    qrow: Value,
    /// Pointer to the row's O.
    orow: Value,
    /// Pointer to the row of S.
    srow: Value,
    /// Pointer to the row's M entry.
    mp: Value,
    /// Pointer to the row's L entry.
    lp: Value,
}

/// A counted loop `j = 0, step, 2·step, … < end` around `body(j)`.
fn counted(
    b: &mut FunctionBuilder<'_>,
    ptr: types::Type,
    end: Value,
    step: i64,
    body: impl FnOnce(&mut FunctionBuilder<'_>, Value),
) {
    let head = b.create_block();
    let inner = b.create_block();
    let done = b.create_block();
    let var = b.declare_var(ptr);
    let zero = b.ins().iconst(ptr, 0);
    b.def_var(var, zero);
    b.ins().jump(head, &[]);
    b.switch_to_block(head);
    let j = b.use_var(var);
    let jn = b.ins().iadd_imm_s(j, step);
    let more = b.ins().icmp(IntCC::UnsignedLessThanOrEqual, jn, end);
    b.ins().brif(more, inner, &[], done, &[]);
    b.switch_to_block(inner);
    let j = b.use_var(var);
    body(b, j);
    let j = b.use_var(var);
    let jn = b.ins().iadd_imm_s(j, step);
    b.def_var(var, jn);
    b.ins().jump(head, &[]);
    b.switch_to_block(done);
}

/// The first multiple of `step` at or above which `counted(end, step)`
/// stopped: `end & !(step-1)`.
fn rounded(b: &mut FunctionBuilder<'_>, end: Value, step: i64) -> Value {
    b.ins().band_imm_s(end, !(step - 1))
}

/// A loop `j = start..end` by ones.
fn each(
    b: &mut FunctionBuilder<'_>,
    ptr: types::Type,
    start: Value,
    end: Value,
    body: impl FnOnce(&mut FunctionBuilder<'_>, Value),
) {
    let head = b.create_block();
    let inner = b.create_block();
    let done = b.create_block();
    let var = b.declare_var(ptr);
    b.def_var(var, start);
    b.ins().jump(head, &[]);
    b.switch_to_block(head);
    let j = b.use_var(var);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, j, end);
    b.ins().brif(more, inner, &[], done, &[]);
    b.switch_to_block(inner);
    let j = b.use_var(var);
    body(b, j);
    let j = b.use_var(var);
    let jn = b.ins().iadd_imm_s(j, 1);
    b.def_var(var, jn);
    b.ins().jump(head, &[]);
    b.switch_to_block(done);
}

/// An elementwise stage over the row's `n` scores: `f` on f32x4 (a
/// scalar tail goes through lane 0 of a splat).
fn map_row(
    b: &mut FunctionBuilder<'_>,
    ptr: types::Type,
    srow: Value,
    n: Value,
    f: &dyn Fn(&mut FunctionBuilder<'_>, Value) -> Value,
) {
    let df = data_flags();
    counted(b, ptr, n, 4, |b, j| {
        let off = b.ins().ishl_imm_u(j, 2);
        let p = b.ins().iadd(srow, off);
        let x = b.ins().load(types::F32X4, df, p, 0);
        let y = f(b, x);
        b.ins().store(df, y, p, 0);
    });
    let start = rounded(b, n, 4);
    each(b, ptr, start, n, |b, j| {
        let off = b.ins().ishl_imm_u(j, 2);
        let p = b.ins().iadd(srow, off);
        let x = b.ins().load(types::F32, df, p, 0);
        let x = b.ins().splat(types::F32X4, x);
        let y = f(b, x);
        let y = b.ins().extractlane(y, 0);
        b.ins().store(df, y, p, 0);
    });
}

// The row's context, the stage and the loaded arguments are what a stage
// body is; bundling them would only rename the parameters.
#[allow(clippy::too_many_arguments)]
fn row_body(
    b: &mut FunctionBuilder<'_>,
    ptr: types::Type,
    stage: Stage,
    d: usize,
    kv: KvType,
    a: &ArgVals,
    ctx: &RowCtx,
    kh: Value,
    vh: Value,
    tail_slot: cranelift_codegen::ir::StackSlot,
) {
    let df = data_flags();
    let nq = d / 4;
    match stage {
        Stage::Scores => {
            let q: Vec<Value> = (0..nq)
                .map(|t| b.ins().load(types::F32X4, df, ctx.qrow, (16 * t) as i32))
                .collect();
            let z0 = zero(b, ptr);
            each(b, ptr, z0, ctx.n, |b, j| {
                let off = b.ins().imul(j, a.k_pos);
                let kp = b.ins().iadd(kh, off);
                let s = dot(b, kv, &q, kp);
                let off = b.ins().ishl_imm_u(j, 2);
                let sp = b.ins().iadd(ctx.srow, off);
                b.ins().store(df, s, sp, 0);
            });
        }
        Stage::Scale => {
            let sc = b.ins().splat(types::F32X4, a.scale);
            map_row(b, ptr, ctx.srow, ctx.n, &|b, x| b.ins().fmul(x, sc));
        }
        Stage::Exp => {
            let m = b.ins().load(types::F32, df, ctx.mp, 0);
            let m = b.ins().splat(types::F32X4, m);
            map_row(b, ptr, ctx.srow, ctx.n, &|b, x| {
                let x = b.ins().fsub(x, m);
                reference::exp(&mut ClifF32 { b }, x)
            });
        }
        Stage::Normalise => {
            let l = b.ins().load(types::F32, df, ctx.lp, 0);
            let l = b.ins().splat(types::F32X4, l);
            map_row(b, ptr, ctx.srow, ctx.n, &|b, x| b.ins().fdiv(x, l));
        }
        Stage::RowMax => {
            let ninf = b.ins().f32const(f32::NEG_INFINITY);
            let vninf = b.ins().splat(types::F32X4, ninf);
            let acc = b.declare_var(types::F32X4);
            b.def_var(acc, vninf);
            counted(b, ptr, ctx.n, 4, |b, j| {
                let off = b.ins().ishl_imm_u(j, 2);
                let p = b.ins().iadd(ctx.srow, off);
                let x = b.ins().load(types::F32X4, df, p, 0);
                let m = b.use_var(acc);
                let m = b.ins().fmax(m, x);
                b.def_var(acc, m);
            });
            let start = rounded(b, ctx.n, 4);
            each(b, ptr, start, ctx.n, |b, j| {
                let off = b.ins().ishl_imm_u(j, 2);
                let p = b.ins().iadd(ctx.srow, off);
                let x = b.ins().load(types::F32, df, p, 0);
                let x = b.ins().splat(types::F32X4, x);
                let m = b.use_var(acc);
                let m = b.ins().fmax(m, x);
                b.def_var(acc, m);
            });
            let m = b.use_var(acc);
            let l0 = b.ins().extractlane(m, 0);
            let l1 = b.ins().extractlane(m, 1);
            let l2 = b.ins().extractlane(m, 2);
            let l3 = b.ins().extractlane(m, 3);
            let x = b.ins().fmax(l0, l1);
            let y = b.ins().fmax(l2, l3);
            let mx = b.ins().fmax(x, y);
            let is_ninf = b.ins().fcmp(FloatCC::Equal, mx, ninf);
            let z = b.ins().f32const(0.0);
            let u = b.ins().select(is_ninf, z, mx);
            b.ins().store(df, u, ctx.mp, 0);
        }
        Stage::RowSum => {
            let z = b.ins().f32const(0.0);
            let vz = b.ins().splat(types::F32X4, z);
            let acc: Vec<Variable> = (0..4).map(|_| b.declare_var(types::F32X4)).collect();
            for v in &acc {
                b.def_var(*v, vz);
            }
            let add16 = |b: &mut FunctionBuilder<'_>, p: Value| {
                for (t, v) in acc.iter().enumerate() {
                    let x = b.ins().load(types::F32X4, df, p, (16 * t) as i32);
                    let s = b.use_var(*v);
                    let s = b.ins().fadd(s, x);
                    b.def_var(*v, s);
                }
            };
            counted(b, ptr, ctx.n, BLOCK as i64, |b, j| {
                let off = b.ins().ishl_imm_u(j, 2);
                let p = b.ins().iadd(ctx.srow, off);
                add16(b, p);
            });
            // A ragged last group: copied behind zeros into a 16-slot buffer.
            let start = rounded(b, ctx.n, BLOCK as i64);
            let has_tail = b.ins().icmp(IntCC::UnsignedLessThan, start, ctx.n);
            let tail = b.create_block();
            let fin = b.create_block();
            b.ins().brif(has_tail, tail, &[], fin, &[]);
            b.switch_to_block(tail);
            for t in 0..4 {
                b.ins().stack_store(ptr, vz, tail_slot, 16 * t);
            }
            let buf = b.ins().stack_addr(ptr, tail_slot, 0);
            each(b, ptr, start, ctx.n, |b, j| {
                let off = b.ins().ishl_imm_u(j, 2);
                let p = b.ins().iadd(ctx.srow, off);
                let x = b.ins().load(types::F32, df, p, 0);
                let k = b.ins().isub(j, start);
                let off = b.ins().ishl_imm_u(k, 2);
                let q = b.ins().iadd(buf, off);
                b.ins().store(df, x, q, 0);
            });
            add16(b, buf);
            b.ins().jump(fin, &[]);
            b.switch_to_block(fin);
            let v: Vec<Value> = acc.iter().map(|v| b.use_var(*v)).collect();
            let total = fold16(b, [v[0], v[1], v[2], v[3]]);
            b.ins().store(df, total, ctx.lp, 0);
        }
        Stage::Pv => {
            let z = b.ins().f32const(0.0);
            let vz = b.ins().splat(types::F32X4, z);
            let acc: Vec<Variable> = (0..nq).map(|_| b.declare_var(types::F32X4)).collect();
            for v in &acc {
                b.def_var(*v, vz);
            }
            let z0 = zero(b, ptr);
            each(b, ptr, z0, ctx.n, |b, j| {
                let off = b.ins().ishl_imm_u(j, 2);
                let sp = b.ins().iadd(ctx.srow, off);
                let pj = b.ins().load(types::F32, df, sp, 0);
                let pj = b.ins().splat(types::F32X4, pj);
                let off = b.ins().imul(j, a.v_pos);
                let vp = b.ins().iadd(vh, off);
                for (t, v) in acc.iter().enumerate() {
                    let vv = load4(b, kv, vp, 4 * t);
                    let o = b.use_var(*v);
                    let o = b.ins().fma(pj, vv, o);
                    b.def_var(*v, o);
                }
            });
            for (t, v) in acc.iter().enumerate() {
                let o = b.use_var(*v);
                b.ins().store(df, o, ctx.orow, (16 * t) as i32);
            }
        }
    }
}

fn zero(b: &mut FunctionBuilder<'_>, ptr: types::Type) -> Value {
    b.ins().iconst(ptr, 0)
}

/// Build the CLIF function of `stage` for `d` and `kv`.
pub fn build_function(target: &Target, stage: Stage, d: usize, kv: KvType) -> Function {
    let name = format!("{}_d{d}_{}", stage.family().replace('.', "_"), kv.name());
    let mut func = target.leaf_function(&name);
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut fctx);
    let ptr = target.pointer_type();
    let trusted = cranelift_codegen::ir::MemFlagsData::trusted();
    let tail_slot = b.create_sized_stack_slot(StackSlotData::new(
        StackSlotKind::ExplicitSlot,
        4 * BLOCK as u32,
        4,
    ));

    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let args = b.block_params(entry)[0];
    let a = load_args(&mut b, ptr, args, kv);
    let s = b.ins().load(ptr, trusted, args, chain_offsets::S);
    let s_row = b.ins().load(ptr, trusted, args, chain_offsets::S_ROW);
    let s_row = b.ins().ishl_imm_u(s_row, 2);
    let m = b.ins().load(ptr, trusted, args, chain_offsets::M);
    let l = b.ins().load(ptr, trusted, args, chain_offsets::L);
    let lq15 = b.ins().iadd_imm_s(a.lq, 15);
    let row_blocks = b.ins().ushr_imm_u(lq15, 4);

    each(&mut b, ptr, a.unit_start, a.unit_end, |b, u| {
        let (h, i0, i1) = unit_rows(b, &a, row_blocks, u);
        let g = b.ins().udiv(h, a.group);
        let off = b.ins().imul(g, a.k_head);
        let kh = b.ins().iadd(a.k, off);
        let off = b.ins().imul(g, a.v_head);
        let vh = b.ins().iadd(a.v, off);
        each(b, ptr, i0, i1, |b, i| {
            let n = visible(b, &a, i);
            let off = b.ins().imul(h, a.q_head);
            let qrow = b.ins().iadd(a.q, off);
            let off = b.ins().imul(i, a.q_row);
            let qrow = b.ins().iadd(qrow, off);
            let off = b.ins().imul(h, a.o_head);
            let orow = b.ins().iadd(a.o, off);
            let off = b.ins().imul(i, a.o_row);
            let orow = b.ins().iadd(orow, off);
            let r = b.ins().imul(h, a.lq);
            let r = b.ins().iadd(r, i);
            let off = b.ins().imul(r, s_row);
            let srow = b.ins().iadd(s, off);
            let off = b.ins().ishl_imm_u(r, 2);
            let mp = b.ins().iadd(m, off);
            let lp = b.ins().iadd(l, off);
            let ctx = RowCtx {
                n,
                qrow,
                orow,
                srow,
                mp,
                lp,
            };
            row_body(b, ptr, stage, d, kv, &a, &ctx, kh, vh, tail_slot);
        });
    });
    b.ins().return_(&[]);
    b.seal_all_blocks();
    b.finalize(target.frontend_config());
    func
}

/// Compile `stage` for `target`.
pub fn compile(
    target: &Target,
    stage: Stage,
    d: usize,
    kv: KvType,
) -> Result<ArmCode, ManagedError> {
    target.compile(build_function(target, stage, d, kv))
}

/// One stage of the chain as a [`weft_kernel::Arm`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainArm(pub Stage);

/// The offer of `stage` at `site`.
pub fn offer_for(stage: Stage, site: &SiteShape) -> Offer {
    let rows = site.heads * site.lq;
    let pairs = site.pairs() * site.heads;
    let d = site.d as u64;
    let kv = site.kv.bytes() as u64;
    let (flops, bytes) = match stage {
        Stage::Scores => (2 * pairs * d, site.kv_heads * site.lk * d * kv + 4 * pairs),
        Stage::Pv => (2 * pairs * d, site.kv_heads * site.lk * d * kv + 4 * pairs),
        Stage::Exp => (20 * pairs, 8 * pairs),
        _ => (pairs, 8 * pairs),
    };
    Offer {
        contract: contract(stage, site),
        packed: Vec::new(),
        views: Some(MemberViews {
            axis: "units".to_owned(),
            extent: site.units(),
            granule: 1,
        }),
        loops: vec![
            LoopTrip {
                name: "units".to_owned(),
                trips: site.units(),
                depth: 0,
            },
            LoopTrip {
                name: "rows".to_owned(),
                trips: rows.min(16),
                depth: 1,
            },
            LoopTrip {
                name: "keys".to_owned(),
                trips: site.lk,
                depth: 2,
            },
        ],
        flops,
        bytes_moved: bytes,
    }
}

// SAFETY: each stage's body reads and writes only what ChainArgs' extents
// name for the units in its range, and returns normally (module docs).
unsafe impl weft_kernel::Arm for ChainArm {
    fn name(&self) -> &'static str {
        self.0.arm_name()
    }

    fn family(&self) -> Family {
        Family(self.0.family())
    }

    fn offer(&self, site: &Site, _host: &Host) -> Result<Offer, Refusal> {
        if site.family.name() != self.0.family() {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!("family {} is not {}", site.family, self.0.family()),
            });
        }
        let s = SiteShape::from_geometry(&site.geometry)?;
        Ok(offer_for(self.0, &s))
    }

    fn build(&self, offer: &Offer, isa: Isa) -> Result<NativeCode, Refusal> {
        if offer.contract.family != self.0.family() {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!("offer is for {}", offer.contract.family),
            });
        }
        let s = SiteShape::from_geometry(&offer.contract.geometry)?;
        build_native(isa, |t| compile(t, self.0, s.d, s.kv))
    }
}

/// The chain's stages have no twins: any twin handed to their check is
/// refused by name.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTwins;

impl TwinCheck for NoTwins {
    fn check(
        &self,
        _arm: Judged<'_>,
        twin: Judged<'_>,
        offer: &Offer,
        _host: &Host,
        _seed: u64,
    ) -> Result<Checked, Refusal> {
        Err(Refusal::UnsupportedGeometry {
            reason: format!(
                "{} has no twins; {} cannot be checked against it",
                offer.contract.family, twin.name
            ),
        })
    }

    fn cases_id(&self, _offer: &Offer, _seed: u64) -> String {
        "no twins: nothing is judged".to_owned()
    }
}

/// The seven stages as a planner registers them: one family each, one
/// arm, no twins.
pub fn entries() -> Vec<FamilyEntry> {
    Stage::ALL
        .iter()
        .map(|&s| FamilyEntry {
            family: Family(s.family()),
            // Nothing to race: one arm, no twins.
            arms: vec![ArmEntry::new(
                Arc::new(ChainArm(s)),
                Vec::new(),
                Arc::new(NoTwins),
                None,
            )],
        })
        .collect()
}

/// The seven placed stages for one `d` and [`KvType`], run in order.
pub struct AttentionChain {
    stages: Vec<Kernel<ChainArgs>>,
    d: usize,
    kv: KvType,
}

impl std::fmt::Debug for AttentionChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttentionChain")
            .field("d", &self.d)
            .field("kv", &self.kv)
            .finish()
    }
}

impl AttentionChain {
    /// Compile and place the host arms of every stage.
    pub fn arms(d: usize, kv: KvType) -> Result<Self, Refusal> {
        super::check_d(d as u64)?;
        let site = super::arm::body_site(d, kv);
        let mut stages = Vec::with_capacity(Stage::ALL.len());
        for s in Stage::ALL {
            let code = weft_kernel::Arm::build(&ChainArm(s), &offer_for(s, &site), host_isa())?;
            // SAFETY: each stage's CLIF (above) reads and writes only what
            // ChainArgs names for its units, and returns.
            stages.push(unsafe { Kernel::from_native(&code)? });
        }
        Ok(Self { stages, d, kv })
    }

    /// Every output of `shape` through the seven stages, lengths checked.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        shape: &AttentionShape,
        layout: &Layout,
        q: &[f32],
        k: KvSlice<'_>,
        v: KvSlice<'_>,
        o: &mut [f32],
        scratch: &mut ChainScratch,
    ) -> Result<(), Refusal> {
        if shape.d != self.d || shape.kv != self.kv {
            return Err(Refusal::BadOperand {
                operand: "shape".to_owned(),
                reason: format!(
                    "d {} {:?}, the chain is for d {} {:?}",
                    shape.d, shape.kv, self.d, self.kv
                ),
            });
        }
        let args = ChainArgs::new(shape, layout, q, k, v, o, scratch)?;
        for stage in &self.stages {
            // SAFETY: `new` checked every extent against the borrowed
            // buffers, which outlive the calls; the stages run one after
            // another on this thread.
            unsafe { stage.call(&args) };
        }
        Ok(())
    }

    /// The scratch layout the stages use for `shape`.
    pub fn scores_layout(shape: &AttentionShape) -> Scores {
        Scores {
            rows: shape.heads * shape.lq,
            s_row: shape.lk,
        }
    }
}
