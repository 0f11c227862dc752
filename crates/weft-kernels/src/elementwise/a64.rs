//! arm64 twins of the elementwise family: `exp` and `erf` in base NEON
//! (`v` registers as `.2d`: 2 binary64 lanes, 2 f32 per step), emitted with
//! weft-a64.
//!
//! One job: emit, for the arm's offer, a body that computes exactly the
//! binary64 operations of the contract (parent module), in the same order,
//! so the fast-path rate and the proof are the arm's.
//!
//! How: the algorithm is not re-typed here. The reference's generic steps
//! ([`reference::exp_fast`], [`reference::exp_fast_interval`],
//! [`reference::exp_slow`], [`reference::erf_eval`]) run once over a
//! [`Recorder`] that implements [`Lanes`] by writing every operation down
//! (a straight-line SSA list); the few steps the reference writes as scalar
//! Rust (f32 narrowing, the rounding test, [`reference::round_dd_to_f32`],
//! erf's exception list) are spelt out in the same list. A linear-scan pass
//! gives each value a `v` register, and each operation becomes one NEON
//! instruction (one IEEE operation is one instruction), so the twin is
//! right by construction and validated bit for bit anyway.
//!
//! Invariants:
//!
//! - **Leaf ABI (AAPCS64).** Only x0–x5, x9–x11 and caller-saved vector
//!   registers are written (v0–v7, v16–v31; `d8`–`d15` are saved and
//!   restored if the allocator ever needs v8–v15). No call leaves the body.
//! - **Table from the arguments**: lookups read [`ElementwiseArgs::table`]
//!   (two scalar loads per `.2d` lookup, NEON having no gather).
//! - **Constants from a literal pool after the code**, addressed with `adr`
//!   (position-independent, no relocation); the pool follows the final
//!   `ret`, 16-byte aligned, and is never executed.
//! - **Any length and alignment**: steps of 2 read with `ldr d`/write with
//!   `str d`; an odd last element is read with `ldr s` (the other lane is
//!   +0.0) and written with `str s`, so nothing outside
//!   `input[..len]`/`output[..len]` is touched. In place works: a step reads
//!   before it writes.
//! - **Slow path inside the body**: when either lane of a step fails the
//!   rounding test, the step runs the double-double slow path on both lanes
//!   and the failing lanes take its result.
//!
//! [`ElementwiseArgs::table`]: super::ElementwiseArgs

use std::collections::HashMap;
use std::fmt::Write as _;

use weft_a64::{d, decode, mem, q, s, v, w, x, Assembler, Cond, EncodeError, XZR};
use weft_kernel::{Feature, Isa, NativeCode, Offer, Refusal, Twin};

use super::reference::{self, Dd, Lanes};
use super::{table, Func};

// ------------------------------------------------------------ recorder ---

/// One recorded value: the index of the operation that defines it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Val(u32);

/// Comparisons (ordered ones are false when either side is NaN).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pred {
    Eq,
    Lt,
    /// Not less than: true when `a >= b` or either is NaN.
    Nlt,
    Ge,
    Gt,
}

/// One operation of a step. "Full" values are two binary64 (or 64-bit
/// integer) lanes (`.2d`); "half" values are two binary32 (or 32-bit
/// integer) lanes in the low 64 bits (`.2s`); masks are all-ones or zero
/// per lane, of either width.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    /// A 64-bit pattern in both full lanes.
    Const(u64),
    /// A 32-bit pattern in both half lanes.
    Const32(u32),
    /// The step's f32 inputs widened to binary64 (exact).
    Input,
    Add(Val, Val),
    Sub(Val, Val),
    Mul(Val, Val),
    /// NaN-propagating min/max (the contract's `fmin`/`fmax`; NEON FMIN/FMAX).
    Min(Val, Val),
    Max(Val, Val),
    And(Val, Val),
    IAdd(Val, Val),
    Shl(Val, u8),
    Ushr(Val, u8),
    Floor(Val),
    /// `table[base + j]` per lane.
    Tab(usize, Val),
    /// A full mask.
    Cmp(Pred, Val, Val),
    /// `!a & b` on full masks.
    MaskAndNot(Val, Val),
    MaskAnd(Val, Val),
    /// `mask ? t : f` on full lanes.
    Select(Val, Val, Val),
    /// Binary64 → binary32, IEEE narrowing (full → half).
    Narrow(Val),
    /// Binary32 → binary64, exact (half → full).
    Widen(Val),
    IAdd32(Val, Val),
    And32(Val, Val),
    Or32(Val, Val),
    /// 32-bit integer equality → half mask.
    Eq32(Val, Val),
    /// `mask ? t : f` on half lanes.
    Select32(Val, Val, Val),
    /// Jump to the next `Join` when every lane of the half mask is set.
    SkipIfAll(Val),
    Join,
    /// `dst <- src` (both half): `dst`'s register is overwritten.
    Assign(Val, Val),
    /// Store the half value to the step's outputs.
    Store(Val),
}

impl Step {
    fn operands(&self) -> Vec<Val> {
        use Step::*;
        match *self {
            Const(_) | Const32(_) | Input | Join => vec![],
            Add(a, b)
            | Sub(a, b)
            | Mul(a, b)
            | Min(a, b)
            | Max(a, b)
            | And(a, b)
            | IAdd(a, b)
            | Cmp(_, a, b)
            | MaskAndNot(a, b)
            | MaskAnd(a, b)
            | IAdd32(a, b)
            | And32(a, b)
            | Or32(a, b)
            | Eq32(a, b)
            | Assign(a, b) => vec![a, b],
            Shl(a, _)
            | Ushr(a, _)
            | Floor(a)
            | Tab(_, a)
            | Narrow(a)
            | Widen(a)
            | SkipIfAll(a)
            | Store(a) => vec![a],
            Select(m, t, f) | Select32(m, t, f) => vec![m, t, f],
        }
    }

    /// Whether the operation defines a value (and so needs a register).
    fn defines(&self) -> bool {
        !matches!(
            self,
            Step::SkipIfAll(_) | Step::Join | Step::Assign(..) | Step::Store(_)
        )
    }

    /// Whether the destination must differ from every operand's register
    /// (the selects build the result in place with BSL).
    fn needs_fresh_dest(&self) -> bool {
        matches!(self, Step::Select(..) | Step::Select32(..))
    }
}

/// Records the operations of one step as a straight-line list; implements
/// the reference's [`Lanes`] so the reference's own functions fill it.
#[derive(Debug, Default)]
pub struct Recorder {
    steps: Vec<Step>,
}

impl Recorder {
    fn push(&mut self, step: Step) -> Val {
        self.steps.push(step);
        Val((self.steps.len() - 1) as u32)
    }
    fn cmp(&mut self, p: Pred, a: Val, b: Val) -> Val {
        self.push(Step::Cmp(p, a, b))
    }
    fn c32(&mut self, bits: u32) -> Val {
        self.push(Step::Const32(bits))
    }

    /// The number of recorded operations.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

impl Lanes for Recorder {
    type F = Val;
    type I = Val;
    fn c(&mut self, v: f64) -> Val {
        self.push(Step::Const(v.to_bits()))
    }
    fn ic(&mut self, v: i64) -> Val {
        self.push(Step::Const(v as u64))
    }
    fn add(&mut self, a: Val, b: Val) -> Val {
        self.push(Step::Add(a, b))
    }
    fn sub(&mut self, a: Val, b: Val) -> Val {
        self.push(Step::Sub(a, b))
    }
    fn mul(&mut self, a: Val, b: Val) -> Val {
        self.push(Step::Mul(a, b))
    }
    fn fmin(&mut self, a: Val, b: Val) -> Val {
        self.push(Step::Min(a, b))
    }
    fn fmax(&mut self, a: Val, b: Val) -> Val {
        self.push(Step::Max(a, b))
    }
    fn abs(&mut self, a: Val) -> Val {
        let m = self.ic(i64::MAX);
        self.push(Step::And(a, m))
    }
    fn bits(&mut self, a: Val) -> Val {
        a
    }
    fn from_bits(&mut self, a: Val) -> Val {
        a
    }
    fn iadd(&mut self, a: Val, b: Val) -> Val {
        self.push(Step::IAdd(a, b))
    }
    fn band(&mut self, a: Val, m: i64) -> Val {
        let m = self.ic(m);
        self.push(Step::And(a, m))
    }
    fn shl(&mut self, a: Val, s: u8) -> Val {
        self.push(Step::Shl(a, s))
    }
    fn ushr(&mut self, a: Val, s: u8) -> Val {
        self.push(Step::Ushr(a, s))
    }
    fn floor(&mut self, a: Val) -> Val {
        self.push(Step::Floor(a))
    }
    fn select_lt(&mut self, a: Val, b: Val, t: Val, e: Val) -> Val {
        let m = self.cmp(Pred::Lt, a, b);
        self.push(Step::Select(m, t, e))
    }
    fn tab(&mut self, base: usize, j: Val) -> Val {
        self.push(Step::Tab(base, j))
    }
}

/// [`reference::round_dd_to_f32`] in vector form: the f32 nearest
/// `hi + lo`, decided with exact midpoints, or `f32(hi)` where undecided.
fn round_dd(r: &mut Recorder, hi: Val, lo: Val, rel: f64) -> Val {
    let f = r.push(Step::Narrow(hi));
    let one = r.c32(1);
    let minus_one = r.c32(u32::MAX);
    let bp = r.push(Step::IAdd32(f, one));
    let bm = r.push(Step::IAdd32(f, minus_one));
    let fv = r.push(Step::Widen(f));
    let upv = r.push(Step::Widen(bp));
    let dnv = r.push(Step::Widen(bm));
    // `up` of f32::MAX is 2^128 (its successor's bits are +inf).
    let max = r.c(f64::from(f32::MAX));
    let is_max = r.cmp(Pred::Eq, fv, max);
    let two128 = r.c(2f64.powi(128));
    let up = r.push(Step::Select(is_max, two128, upv));
    let half = r.c(0.5);
    let su = r.add(fv, up);
    let mu = r.mul(su, half);
    let sd = r.add(fv, dnv);
    let md = r.mul(sd, half);
    let relc = r.c(rel);
    let err = r.mul(relc, hi);
    let zero = r.c(0.0);
    let neg_err = r.sub(zero, err);
    let hu = r.sub(hi, mu);
    let bu = r.add(hu, lo);
    let hd = r.sub(hi, md);
    let bd = r.add(hd, lo);
    // bu > err → up; bu >= -err → f (undecided); bd < -err → down; else f.
    let go_up = r.cmp(Pred::Gt, bu, err);
    let undecided_up = r.cmp(Pred::Ge, bu, neg_err);
    let go_down = r.cmp(Pred::Lt, bd, neg_err);
    let down = r.push(Step::MaskAndNot(undecided_up, go_down));
    let t = r.push(Step::Select(down, dnv, fv));
    let res = r.push(Step::Select(go_up, upv, t));
    // `!f.is_finite() && !hi.is_finite()` keeps `f`.
    let absf = r.abs(fv);
    let absh = r.abs(hi);
    let inf = r.c(f64::INFINITY);
    let nf_f = r.cmp(Pred::Nlt, absf, inf);
    let nf_h = r.cmp(Pred::Nlt, absh, inf);
    let nf = r.push(Step::MaskAnd(nf_f, nf_h));
    let res = r.push(Step::Select(nf, fv, res));
    r.push(Step::Narrow(res))
}

/// The step of `exp`: fast path, rounding test, slow path for the step
/// when either lane fails, store.
fn record_exp() -> Recorder {
    let mut r = Recorder::default();
    let x = r.push(Step::Input);
    let y = reference::exp_fast(&mut r, x);
    let (lo, hi) = reference::exp_fast_interval(&mut r, y);
    let flo = r.push(Step::Narrow(lo));
    let fhi = r.push(Step::Narrow(hi));
    let ok = r.push(Step::Eq32(flo, fhi));
    r.push(Step::SkipIfAll(ok));
    let dd: Dd<Val> = reference::exp_slow(&mut r, x);
    let slow = round_dd(&mut r, dd.hi, dd.lo, table::EXP_SLOW_ERR);
    let merged = r.push(Step::Select32(ok, flo, slow));
    r.push(Step::Assign(flo, merged));
    r.push(Step::Join);
    r.push(Step::Store(flo));
    r
}

/// The step of `erf`: one binary64 evaluation, one narrowing, then the
/// contract's exception list (by `|x|` bits, sign applied after).
fn record_erf() -> Recorder {
    let mut r = Recorder::default();
    let x = r.push(Step::Input);
    let y = reference::erf_eval(&mut r, x);
    let mut out = r.push(Step::Narrow(y));
    if !table::ERF_EXCEPTIONS.is_empty() {
        let xf = r.push(Step::Narrow(x));
        let abs_mask = r.c32(0x7fff_ffff);
        let ax = r.push(Step::And32(xf, abs_mask));
        let sign_mask = r.c32(0x8000_0000);
        let sign = r.push(Step::And32(xf, sign_mask));
        for &(input, output) in table::ERF_EXCEPTIONS.iter() {
            let want = r.c32(input);
            let hit = r.push(Step::Eq32(ax, want));
            let o = r.c32(output);
            let signed = r.push(Step::Or32(o, sign));
            out = r.push(Step::Select32(hit, signed, out));
        }
    }
    r.push(Step::Store(out));
    r
}

// ----------------------------------------------------------- allocation ---

/// Vector registers handed out first: caller-saved under AAPCS64.
const VOLATILE: [u8; 24] = [
    0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
];
/// Used only when the volatile ones run out; their low halves (`d8`–`d15`)
/// are saved in the prologue and restored before `ret`.
const CALLEE_SAVED: [u8; 8] = [8, 9, 10, 11, 12, 13, 14, 15];

/// A register for every value, and which callee-saved ones were needed.
#[derive(Debug)]
struct Allocation {
    reg: Vec<Option<u8>>,
    callee_saved_used: Vec<u8>,
    max_live: usize,
}

fn allocate(rec: &Recorder) -> Result<Allocation, String> {
    let n = rec.steps.len();
    let mut last_use = vec![None::<usize>; n];
    for (i, s) in rec.steps.iter().enumerate() {
        for Val(o) in s.operands() {
            last_use[o as usize] = Some(i);
        }
    }
    // Free registers, popped from the end: volatile ones first.
    let mut free: Vec<u8> = CALLEE_SAVED
        .iter()
        .rev()
        .chain(VOLATILE.iter().rev())
        .copied()
        .collect();
    let mut reg = vec![None; n];
    let mut callee_saved_used = Vec::new();
    let mut live = 0usize;
    let mut max_live = 0usize;
    for (i, s) in rec.steps.iter().enumerate() {
        let mut dying: Vec<u8> = Vec::new();
        for Val(o) in s.operands() {
            let o = o as usize;
            if last_use[o] == Some(i) {
                let r = reg[o].ok_or_else(|| format!("value {o} used before it has a register"))?;
                if !dying.contains(&r) {
                    dying.push(r);
                }
            }
        }
        let fresh_first = s.needs_fresh_dest();
        if !fresh_first {
            live -= dying.len();
            free.extend(dying.iter().copied());
        }
        if s.defines() && last_use[i].is_some() {
            let r = free
                .pop()
                .ok_or_else(|| format!("out of vector registers at step {i} ({s:?})"))?;
            if CALLEE_SAVED.contains(&r) && !callee_saved_used.contains(&r) {
                callee_saved_used.push(r);
            }
            reg[i] = Some(r);
            live += 1;
            max_live = max_live.max(live);
        }
        if fresh_first {
            live -= dying.len();
            free.extend(dying.iter().copied());
        }
    }
    callee_saved_used.sort_unstable();
    Ok(Allocation {
        reg,
        callee_saved_used,
        max_live,
    })
}

// ------------------------------------------------------------- lowering ---

/// General registers of the body.
const ARGS: u8 = 0;
const IN: u8 = 1;
const OUT: u8 = 2;
const LEN: u8 = 3;
const TAB: u8 = 4;
const POOL: u8 = 5;
const T0: u8 = 9;
const T1: u8 = 10;
const T2: u8 = 11;

/// The literal pool: 16-byte entries, deduplicated.
#[derive(Debug, Default)]
struct Pool {
    entries: Vec<[u8; 16]>,
    index: HashMap<[u8; 16], usize>,
}

impl Pool {
    fn offset(&mut self, entry: [u8; 16]) -> i64 {
        let n = self.entries.len();
        let i = *self.index.entry(entry).or_insert(n);
        if i == n {
            self.entries.push(entry);
        }
        (i * 16) as i64
    }
    fn full(&mut self, bits: u64) -> i64 {
        let mut e = [0u8; 16];
        e[..8].copy_from_slice(&bits.to_le_bytes());
        e[8..].copy_from_slice(&bits.to_le_bytes());
        self.offset(e)
    }
    fn half(&mut self, bits: u32) -> i64 {
        let mut e = [0u8; 16];
        for k in 0..4 {
            e[4 * k..4 * k + 4].copy_from_slice(&bits.to_le_bytes());
        }
        self.offset(e)
    }
}

/// Whether a step's code handles two elements (the loop) or one (the odd
/// last element: lane 1 computes on +0.0 and is neither stored nor tested).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Width {
    Two,
    One,
}

fn lower_step(
    a: &mut Assembler,
    rec: &Recorder,
    alloc: &Allocation,
    pool: &mut Pool,
    width: Width,
) -> Result<(), EncodeError> {
    let r = |val: Val| -> u8 { alloc.reg[val.0 as usize].expect("an operand has a register") };
    let mut join = None;
    for (i, step) in rec.steps.iter().enumerate() {
        let dst = alloc.reg[i];
        if step.defines() && dst.is_none() {
            continue; // never used
        }
        let dn = dst.unwrap_or(0);
        let vd = v(dn);
        match *step {
            Step::Const(bits) => a.ldr(q(dn), mem(x(POOL)).off(pool.full(bits)))?,
            Step::Const32(bits) => a.ldr(q(dn), mem(x(POOL)).off(pool.half(bits)))?,
            Step::Input => {
                match width {
                    Width::Two => a.ldr(d(dn), mem(x(IN)).post(8))?,
                    Width::One => a.ldr(s(dn), mem(x(IN)))?,
                }
                a.fcvtl(vd.d2(), vd.s2())?;
            }
            Step::Add(p, q_) => a.fadd(vd.d2(), v(r(p)).d2(), v(r(q_)).d2())?,
            Step::Sub(p, q_) => a.fsub(vd.d2(), v(r(p)).d2(), v(r(q_)).d2())?,
            Step::Mul(p, q_) => a.fmul(vd.d2(), v(r(p)).d2(), v(r(q_)).d2())?,
            Step::Min(p, q_) => a.fmin(vd.d2(), v(r(p)).d2(), v(r(q_)).d2())?,
            Step::Max(p, q_) => a.fmax(vd.d2(), v(r(p)).d2(), v(r(q_)).d2())?,
            Step::And(p, q_) | Step::MaskAnd(p, q_) => {
                a.and(vd.b16(), v(r(p)).b16(), v(r(q_)).b16())?
            }
            Step::IAdd(p, q_) => a.add(vd.d2(), v(r(p)).d2(), v(r(q_)).d2())?,
            Step::Shl(p, sh) => a.shl(vd.d2(), v(r(p)).d2(), i64::from(sh))?,
            Step::Ushr(p, sh) => a.ushr(vd.d2(), v(r(p)).d2(), i64::from(sh))?,
            Step::Floor(p) => a.frintm(vd.d2(), v(r(p)).d2())?,
            Step::Tab(base, j) => {
                let vj = v(r(j));
                a.mov(x(T0), vj.d(0))?;
                a.mov(x(T1), vj.d(1))?;
                let tb = if base == 0 {
                    TAB
                } else {
                    a.add(x(T2), x(TAB), (base * 8) as i64)?;
                    T2
                };
                a.ldr(x(T0), mem(x(tb)).idx_scaled(x(T0)))?;
                a.ldr(x(T1), mem(x(tb)).idx_scaled(x(T1)))?;
                a.fmov(d(dn), x(T0))?;
                a.mov(vd.d(1), x(T1))?;
            }
            Step::Cmp(pred, p, q_) => {
                let (vp, vq) = (v(r(p)).d2(), v(r(q_)).d2());
                match pred {
                    Pred::Eq => a.fcmeq(vd.d2(), vp, vq)?,
                    Pred::Lt => a.fcmgt(vd.d2(), vq, vp)?,
                    Pred::Gt => a.fcmgt(vd.d2(), vp, vq)?,
                    Pred::Ge => a.fcmge(vd.d2(), vp, vq)?,
                    Pred::Nlt => {
                        a.fcmgt(vd.d2(), vq, vp)?;
                        a.op(weft_a64::Op::NOT_V, (vd.b16(), vd.b16()))?;
                    }
                }
            }
            Step::MaskAndNot(p, q_) => a.bic(vd.b16(), v(r(q_)).b16(), v(r(p)).b16())?,
            Step::Select(m, t, f) => {
                a.mov(vd.b16(), v(r(m)).b16())?;
                a.bsl(vd.b16(), v(r(t)).b16(), v(r(f)).b16())?;
            }
            Step::Narrow(p) => a.fcvtn(vd.s2(), v(r(p)).d2())?,
            Step::Widen(p) => a.fcvtl(vd.d2(), v(r(p)).s2())?,
            Step::IAdd32(p, q_) => a.add(vd.s2(), v(r(p)).s2(), v(r(q_)).s2())?,
            Step::And32(p, q_) => a.and(vd.b8(), v(r(p)).b8(), v(r(q_)).b8())?,
            Step::Or32(p, q_) => a.orr(vd.b8(), v(r(p)).b8(), v(r(q_)).b8())?,
            Step::Eq32(p, q_) => a.cmeq(vd.s2(), v(r(p)).s2(), v(r(q_)).s2())?,
            Step::Select32(m, t, f) => {
                a.mov(vd.b8(), v(r(m)).b8())?;
                a.bsl(vd.b8(), v(r(t)).b8(), v(r(f)).b8())?;
            }
            Step::SkipIfAll(m) => {
                let label = a.new_label();
                join = Some(label);
                match width {
                    Width::Two => {
                        a.fmov(x(T0), d(r(m)))?;
                        a.adds(XZR, x(T0), 1)?;
                    }
                    Width::One => {
                        a.fmov(w(T0), s(r(m)))?;
                        a.adds(weft_a64::WZR, w(T0), 1)?;
                    }
                }
                a.b_cond(Cond::Eq, label)?;
            }
            Step::Join => {
                let label = join.take().ok_or(EncodeError::UnresolvedLabel)?;
                a.bind(label)?;
            }
            Step::Assign(dv, sv) => a.mov(v(r(dv)).b16(), v(r(sv)).b16())?,
            Step::Store(p) => match width {
                Width::Two => a.str(d(r(p)), mem(x(OUT)).post(8))?,
                Width::One => a.str(s(r(p)), mem(x(OUT)))?,
            },
        }
    }
    Ok(())
}

/// Save (or restore) the low halves of the callee-saved registers in
/// `used`, in pairs, in a frame of `16 * ceil(len/2)` bytes.
fn callee_saved_frame(a: &mut Assembler, used: &[u8], save: bool) -> Result<(), EncodeError> {
    if used.is_empty() {
        return Ok(());
    }
    let frame = used.len().div_ceil(2) * 16;
    if save {
        a.sub(weft_a64::SP, weft_a64::SP, frame as i64)?;
    }
    for (k, pair) in used.chunks(2).enumerate() {
        let at = mem(weft_a64::SP).off((16 * k) as i64);
        match (pair, save) {
            ([p, q_], true) => a.stp(d(*p), d(*q_), at)?,
            ([p, q_], false) => a.ldp(d(*p), d(*q_), at)?,
            ([p], true) => a.str(d(*p), at)?,
            ([p], false) => a.ldr(d(*p), at)?,
            _ => unreachable!("chunks of two"),
        }
    }
    if !save {
        a.add(weft_a64::SP, weft_a64::SP, frame as i64)?;
    }
    Ok(())
}

/// The whole body: prologue, loop of 2-element steps, the odd element, the
/// pool.
fn emit_body(rec: &Recorder) -> Result<NativeCode, String> {
    let alloc = allocate(rec)?;
    let mut pool = Pool::default();
    let mut a = Assembler::new();
    let e = |e: EncodeError| e.to_string();
    let (top, last, done, pool_label) =
        (a.new_label(), a.new_label(), a.new_label(), a.new_label());
    a.ldr(x(IN), mem(x(ARGS))).map_err(e)?;
    a.ldr(x(OUT), mem(x(ARGS)).off(8)).map_err(e)?;
    a.ldr(x(LEN), mem(x(ARGS)).off(16)).map_err(e)?;
    a.ldr(x(TAB), mem(x(ARGS)).off(24)).map_err(e)?;
    a.adr(x(POOL), pool_label).map_err(e)?;
    callee_saved_frame(&mut a, &alloc.callee_saved_used, true).map_err(e)?;
    a.cmp(x(LEN), 2).map_err(e)?;
    a.b_cond(Cond::Lo, last).map_err(e)?;
    a.bind(top).map_err(e)?;
    lower_step(&mut a, rec, &alloc, &mut pool, Width::Two).map_err(e)?;
    a.sub(x(LEN), x(LEN), 2).map_err(e)?;
    a.cmp(x(LEN), 2).map_err(e)?;
    a.b_cond(Cond::Hs, top).map_err(e)?;
    a.bind(last).map_err(e)?;
    a.cbz(x(LEN), done).map_err(e)?;
    lower_step(&mut a, rec, &alloc, &mut pool, Width::One).map_err(e)?;
    a.bind(done).map_err(e)?;
    callee_saved_frame(&mut a, &alloc.callee_saved_used, false).map_err(e)?;
    a.ret().map_err(e)?;
    while !a.len().is_multiple_of(4) {
        a.brk(0).map_err(e)?;
    }
    a.bind(pool_label).map_err(e)?;
    let code_words = a.len();
    let mut words = a.finish().map_err(e)?;
    for entry in &pool.entries {
        for c in entry.chunks_exact(4) {
            words.push(u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        }
    }
    let mut listing = String::new();
    for (i, wd) in words.iter().enumerate() {
        let text = if i < code_words {
            decode(*wd).map_or_else(|| format!(".word {wd:#010x}"), |inst| inst.to_string())
        } else {
            format!(".word {wd:#010x} // pool")
        };
        let _ = writeln!(listing, "{:5x}: {wd:08x}  {text}", 4 * i);
    }
    let _ = writeln!(
        listing,
        "// {} steps, {} values live at most, {} pool entries",
        rec.len(),
        alloc.max_live,
        pool.entries.len()
    );
    Ok(NativeCode {
        isa: Isa::Aarch64,
        bytes: words.iter().flat_map(|wd| wd.to_le_bytes()).collect(),
        listing,
        // The loop runs len/2 times, which matches none of the offer's
        // LoopTrips (vector: len/4, tail: len%4): no annotation rather than
        // a wrong one; the cost model finds the loop in the bytes.
        loops: Vec::new(),
    })
}

// ----------------------------------------------------------------- twins ---

/// An arm64 NEON twin of an elementwise arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct A64Twin {
    /// The function.
    pub func: Func,
}

const NEON: &[Feature] = &[Feature::Neon];

/// The name of the arm the exp twin mirrors.
pub const ARM_EXP: &str = "exp.arm.f32x4";
/// The name of the arm the erf twin mirrors.
pub const ARM_ERF: &str = "erf.arm.f32x4";

impl A64Twin {
    /// The twin of `func`.
    pub const fn new(func: Func) -> Self {
        Self { func }
    }

    fn record(self) -> Recorder {
        match self.func {
            Func::Exp => record_exp(),
            Func::Erf => record_erf(),
        }
    }

    /// The body (what [`Twin::emit`] gives; independent of the offer, whose
    /// contract is the same at every length).
    pub fn body(self) -> Result<NativeCode, Refusal> {
        emit_body(&self.record()).map_err(|e| Refusal::EmitError {
            message: format!("{}: {e}", Twin::name(&self)),
        })
    }
}

impl Twin for A64Twin {
    fn name(&self) -> &'static str {
        match self.func {
            Func::Exp => "exp.twin.neon",
            Func::Erf => "erf.twin.neon",
        }
    }

    fn arm(&self) -> &'static str {
        match self.func {
            Func::Exp => ARM_EXP,
            Func::Erf => ARM_ERF,
        }
    }

    fn isa(&self) -> Isa {
        Isa::Aarch64
    }

    fn requires(&self) -> &'static [Feature] {
        NEON
    }

    fn emit(&self, _offer: &Offer) -> Result<NativeCode, Refusal> {
        self.body()
    }
}

/// Every arm64 twin of the elementwise family.
pub fn a64_twins() -> Vec<Box<dyn Twin>> {
    Func::ALL
        .iter()
        .map(|&f| Box::new(A64Twin::new(f)) as Box<dyn Twin>)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neon_twins_emit_on_any_host_and_every_code_word_decodes() {
        for f in Func::ALL {
            let twin = A64Twin::new(f);
            let code = twin.body().unwrap_or_else(|e| panic!("{f:?}: {e}"));
            assert_eq!(code.isa, Isa::Aarch64);
            assert_eq!(
                code.bytes.len() % 16,
                0,
                "code and pool are 16-byte aligned"
            );
            // Every word before the pool is an instruction weft-a64 decodes.
            for line in code.listing.lines().filter(|l| !l.starts_with("//")) {
                if line.ends_with("// pool") {
                    continue;
                }
                assert!(!line.contains(".word"), "{f:?}: undecodable word: {line}");
            }
            assert!(code.listing.contains("ret"), "{f:?}");
        }
    }

    #[test]
    fn neon_twins_fit_in_caller_saved_vector_registers() {
        for (f, rec) in [(Func::Exp, record_exp()), (Func::Erf, record_erf())] {
            let alloc = allocate(&rec).expect("allocates");
            assert!(
                alloc.callee_saved_used.is_empty(),
                "{f:?}: needs {:?} (max live {})",
                alloc.callee_saved_used,
                alloc.max_live
            );
        }
    }

    #[test]
    fn neon_twins_name_their_arms_and_require_only_neon() {
        let twins = a64_twins();
        let names: Vec<_> = twins.iter().map(|t| (t.name(), t.arm())).collect();
        assert_eq!(
            names,
            [("exp.twin.neon", ARM_EXP), ("erf.twin.neon", ARM_ERF)]
        );
        for t in &twins {
            assert_eq!(t.isa(), Isa::Aarch64);
            assert_eq!(t.requires(), &[Feature::Neon]);
        }
    }

    /// Against the arm64 arm, under qemu in CI (`cargo test -p weft-kernels
    /// --target aarch64-unknown-linux-gnu`).
    #[cfg(target_arch = "aarch64")]
    mod on_aarch64 {
        use super::super::super::arm::{ElementwiseArm, ElementwiseKernel};
        use super::super::super::{reference, ElementwiseArgs, Func};
        use super::A64Twin;
        use weft_kernel::{Arm, Geometry, Host, Site};
        use weft_validate::{validate, UnaryF32, UnaryF32Inputs};

        fn same(a: f32, b: f32) -> bool {
            (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
        }

        fn twin_kernel(f: Func) -> ElementwiseKernel {
            let code = A64Twin::new(f).body().expect("emits");
            // SAFETY: the twin's body reads `len` f32s at `input`, writes
            // `len` f32s at `output`, reads the table, and returns (module
            // invariants; the ELF tests of weft-tests check the same ABI).
            unsafe { ElementwiseKernel::from_native(&code) }.expect("places")
        }

        /// The three f32 inputs whose fast-path rounding test fails (found
        /// by scanning every f32 of magnitude 2^-31..104 with the reference).
        const EXP_SLOW_INPUTS: [u32; 3] = [0xbae0_e25c, 0xbbf0_edf1, 0xc169_12cd];

        /// The validation inputs: weft-validate's 21 specials (±0, ±inf,
        /// quiet and signalling NaNs with payloads, subnormal and normal
        /// extremes, ±max, ±1), 3 ulps either side of each boundary (for exp
        /// the boundaries include the slow-path inputs), 256 subnormals, 4096
        /// random bit patterns and 4096 uniform samples in each of two
        /// ranges: 12,635 values for exp and 12,600 for erf at seeds below.
        /// The whole pool runs at start offsets 0..=3 elements, then every
        /// length 0..=16 at each offset: 72 cases, about 53,000 output words
        /// (guards included) per function.
        fn inputs(f: Func) -> UnaryF32Inputs {
            match f {
                Func::Exp => UnaryF32Inputs::new(8)
                    .with_boundaries(&[
                        88.722_83,
                        -87.336_54,
                        -103.972_08,
                        -149.0,
                        -150.0,
                        100.0,
                        0.0,
                    ])
                    .with_boundaries(&EXP_SLOW_INPUTS.map(f32::from_bits))
                    .with_range(-104.0, 89.0)
                    .with_range(-1.0, 1.0),
                Func::Erf => UnaryF32Inputs::new(8)
                    .with_boundaries(&[0.4375, 3.919_205_7, 0.0625, 1.0, 2.0])
                    .with_range(-4.0, 4.0)
                    .with_range(-0.5, 0.5),
            }
        }

        fn validate_against_arm(f: Func, seed: u64) {
            let host = Host::detect();
            let arm = ElementwiseArm::new(f);
            let site = Site {
                family: arm.family(),
                geometry: Geometry::new().with("len", 1024),
            };
            let offer = arm.offer(&site, &host).expect("offer");
            let arm_code = arm.build(&offer, host.isa).expect("arm builds");
            // SAFETY: ElementwiseArgs is the struct the elementwise contract
            // names, and `ElementwiseArgs::new` describes exactly the two
            // slices (plus the static table).
            let v = unsafe {
                UnaryF32::new("ElementwiseArgs", inputs(f), |i: &[f32], o: &mut [f32]| {
                    ElementwiseArgs::new(i, o).expect("equal lengths")
                })
            };
            let pool = v.inputs().values(seed).len();
            let outcome = validate(&A64Twin::new(f), &arm_code, &offer, &host, &v, seed);
            match outcome.verdict() {
                Some(verdict) => {
                    eprintln!(
                        "{f:?}: {pool} values, {} cases, {} words",
                        verdict.cases, verdict.words
                    )
                }
                None => panic!("{f:?}: {:?}", outcome.refusal()),
            }
        }

        #[test]
        fn exp_neon_twin_matches_the_arm_bit_for_bit_on_sampled_inputs() {
            validate_against_arm(Func::Exp, 0x5eed_e4b0);
        }

        #[test]
        fn erf_neon_twin_matches_the_arm_bit_for_bit_on_sampled_inputs() {
            validate_against_arm(Func::Erf, 0x5eed_e4f0);
        }

        #[test]
        fn exp_neon_twin_takes_the_slow_path_in_either_lane_and_in_the_odd_element() {
            let hard = EXP_SLOW_INPUTS.map(f32::from_bits);
            for h in hard {
                assert_eq!(reference::exp_f32_path(h).1, reference::Path::Slow, "{h:e}");
            }
            let k = twin_kernel(Func::Exp);
            for &h in &hard {
                for n in 1..=5 {
                    for pos in 0..n {
                        let mut xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.37 - 1.0).collect();
                        xs[pos] = h;
                        let mut out = vec![0f32; n];
                        k.run(&xs, &mut out).expect("run");
                        for (x, y) in xs.iter().zip(&out) {
                            let r = reference::exp_f32(*x);
                            assert!(
                                same(*y, r),
                                "exp({x:e}) len {n} pos {pos}: twin {:#010x}, reference {:#010x}",
                                y.to_bits(),
                                r.to_bits()
                            );
                        }
                    }
                }
            }
        }

        #[test]
        fn neon_twins_work_in_place_and_write_nothing_outside_the_output() {
            let pool: Vec<f32> = (0..40).map(|i| (i as f32 - 20.0) * 0.77).collect();
            for f in Func::ALL {
                let k = twin_kernel(f);
                for start in 0..4 {
                    for n in 0..=16 {
                        let xs = &pool[start..start + n];
                        let mut out = vec![-7.0f32; n + 6];
                        k.run(xs, &mut out[start + 1..start + 1 + n]).expect("run");
                        for (i, x) in xs.iter().enumerate() {
                            assert!(same(out[start + 1 + i], f.reference()(*x)), "{f:?} n {n}");
                        }
                        assert!(out[..start + 1].iter().all(|v| *v == -7.0));
                        assert!(out[start + 1 + n..].iter().all(|v| *v == -7.0));
                    }
                }
                let mut data = pool.clone();
                k.run_in_place(&mut data);
                for (x, y) in pool.iter().zip(&data) {
                    assert!(same(*y, f.reference()(*x)), "{f:?} in place");
                }
            }
        }
    }
}
