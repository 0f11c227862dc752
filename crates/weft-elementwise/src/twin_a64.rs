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
//! recorder that implements [`Lanes`] by writing every operation down
//! (a straight-line SSA list); the few steps the reference writes as scalar
//! Rust (f32 narrowing, the rounding test, [`reference::round_dd_to_f32`],
//! erf's exception list) are spelt out in the same list. The recorder and
//! the list are shared with the x64 twins (`record.rs`); a step here is one
//! half of their iteration. A linear-scan pass gives each value a `v`
//! register, and each operation becomes one NEON instruction (one IEEE
//! operation is one instruction), so the twin is right by construction and
//! validated bit for bit anyway.
//!
//! Invariants:
//!
//! - **Leaf ABI (AAPCS64).** Only x0–x6, x9–x11 and caller-saved vector
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
//! - **Maps** ([`emit_map`]): the same loop over [`MapArgs`]
//!   (`start..end`, second stream in x6); loads and stores use plain
//!   offsets and the loop advances the three pointers.
//! - **Slow path inside the body**: when either lane of a step fails the
//!   rounding test, the step runs the double-double slow path on both lanes
//!   and the failing lanes take its result.
//!
//! [`ElementwiseArgs::table`]: super::ElementwiseArgs
//! [`MapArgs`]: super::map::MapArgs
//! [`reference::exp_fast`]: super::reference::exp_fast
//! [`reference::exp_fast_interval`]: super::reference::exp_fast_interval
//! [`reference::exp_slow`]: super::reference::exp_slow
//! [`reference::erf_eval`]: super::reference::erf_eval
//! [`reference::round_dd_to_f32`]: super::reference::round_dd_to_f32
//! [`Lanes`]: super::reference::Lanes

use std::collections::HashMap;

use weft_a64::{d, mem, q, s, v, w, x, Assembler, Cond, EncodeError, XZR};
use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};

use super::map::ExpMap;
use super::record::{record_erf, record_exp, record_map, Layout, Op, Pred, Recorder, Val};
use super::Func;

// ----------------------------------------------------------- operations ---

/// Whether the operation defines a value (and so needs a register).
fn defines(op: &Op) -> bool {
    !matches!(
        op,
        Op::SkipIfAll(_) | Op::Join | Op::Assign(..) | Op::Store(..)
    )
}

/// Whether the destination must differ from every operand's register
/// (the selects build the result in place with BSL).
fn needs_fresh_dest(op: &Op) -> bool {
    matches!(op, Op::Select(..) | Op::Select32(..))
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
    /// Most values live at once (the tests bound it).
    #[cfg_attr(not(test), allow(dead_code))]
    max_live: usize,
}

fn allocate(rec: &Recorder) -> Result<Allocation, String> {
    let n = rec.ops.len();
    let mut last_use = vec![None::<usize>; n];
    for (i, s) in rec.ops.iter().enumerate() {
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
    for (i, s) in rec.ops.iter().enumerate() {
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
        let fresh_first = needs_fresh_dest(s);
        if !fresh_first {
            live -= dying.len();
            free.extend(dying.iter().copied());
        }
        if defines(s) && last_use[i].is_some() {
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
/// A map's second stream.
const IN_B: u8 = 6;
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
    layout: Layout,
) -> Result<(), EncodeError> {
    let r = |val: Val| -> u8 { alloc.reg[val.0 as usize].expect("an operand has a register") };
    let mut join = None;
    for (i, step) in rec.ops.iter().enumerate() {
        let dst = alloc.reg[i];
        if defines(step) && dst.is_none() {
            continue; // never used
        }
        let dn = dst.unwrap_or(0);
        let vd = v(dn);
        match *step {
            Op::Const(bits) => a.ldr(q(dn), mem(x(POOL)).off(pool.full(bits)))?,
            Op::Const32(bits) => a.ldr(q(dn), mem(x(POOL)).off(pool.half(bits)))?,
            // One half per step (recorded with `two_halves: false`): half 0.
            Op::Input(_) => {
                match width {
                    Width::Two => a.ldr(d(dn), mem(x(IN)).post(8))?,
                    Width::One => a.ldr(s(dn), mem(x(IN)))?,
                }
                a.fcvtl(vd.d2(), vd.s2())?;
            }
            // A map's loads and stores do not advance the pointers (a
            // stream may be loaded twice); the loop does.
            Op::Load32(stream, _) => {
                let base = if stream == 0 { IN } else { IN_B };
                match width {
                    Width::Two => a.ldr(d(dn), mem(x(base)))?,
                    Width::One => a.ldr(s(dn), mem(x(base)))?,
                }
            }
            Op::Xor(p, q_) => a.eor(vd.b16(), v(r(p)).b16(), v(r(q_)).b16())?,
            Op::Xor32(p, q_) => a.eor(vd.b8(), v(r(p)).b8(), v(r(q_)).b8())?,
            Op::FAdd32(p, q_) => a.fadd(vd.s2(), v(r(p)).s2(), v(r(q_)).s2())?,
            Op::FMul32(p, q_) => a.fmul(vd.s2(), v(r(p)).s2(), v(r(q_)).s2())?,
            Op::FDiv32(p, q_) => a.fdiv(vd.s2(), v(r(p)).s2(), v(r(q_)).s2())?,
            Op::Add(p, q_) => a.fadd(vd.d2(), v(r(p)).d2(), v(r(q_)).d2())?,
            Op::Sub(p, q_) => a.fsub(vd.d2(), v(r(p)).d2(), v(r(q_)).d2())?,
            Op::Mul(p, q_) => a.fmul(vd.d2(), v(r(p)).d2(), v(r(q_)).d2())?,
            Op::Min(p, q_) => a.fmin(vd.d2(), v(r(p)).d2(), v(r(q_)).d2())?,
            Op::Max(p, q_) => a.fmax(vd.d2(), v(r(p)).d2(), v(r(q_)).d2())?,
            Op::And(p, q_) | Op::MaskAnd(p, q_) => {
                a.and(vd.b16(), v(r(p)).b16(), v(r(q_)).b16())?
            }
            Op::IAdd(p, q_) => a.add(vd.d2(), v(r(p)).d2(), v(r(q_)).d2())?,
            Op::Shl(p, sh) => a.shl(vd.d2(), v(r(p)).d2(), i64::from(sh))?,
            Op::Ushr(p, sh) => a.ushr(vd.d2(), v(r(p)).d2(), i64::from(sh))?,
            Op::Floor(p) => a.frintm(vd.d2(), v(r(p)).d2())?,
            Op::Tab(base, j) => {
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
            Op::Cmp(pred, p, q_) => {
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
            Op::MaskAndNot(p, q_) => a.bic(vd.b16(), v(r(q_)).b16(), v(r(p)).b16())?,
            Op::Select(m, t, f) => {
                a.mov(vd.b16(), v(r(m)).b16())?;
                a.bsl(vd.b16(), v(r(t)).b16(), v(r(f)).b16())?;
            }
            Op::Narrow(p) => a.fcvtn(vd.s2(), v(r(p)).d2())?,
            Op::Widen(p) => a.fcvtl(vd.d2(), v(r(p)).s2())?,
            Op::IAdd32(p, q_) => a.add(vd.s2(), v(r(p)).s2(), v(r(q_)).s2())?,
            Op::And32(p, q_) => a.and(vd.b8(), v(r(p)).b8(), v(r(q_)).b8())?,
            Op::Or32(p, q_) => a.orr(vd.b8(), v(r(p)).b8(), v(r(q_)).b8())?,
            Op::Eq32(p, q_) => a.cmeq(vd.s2(), v(r(p)).s2(), v(r(q_)).s2())?,
            Op::Select32(m, t, f) => {
                a.mov(vd.b8(), v(r(m)).b8())?;
                a.bsl(vd.b8(), v(r(t)).b8(), v(r(f)).b8())?;
            }
            Op::SkipIfAll(m) => {
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
            Op::Join => {
                let label = join.take().ok_or(EncodeError::UnresolvedLabel)?;
                a.bind(label)?;
            }
            Op::Assign(dv, sv) => a.mov(v(r(dv)).b16(), v(r(sv)).b16())?,
            Op::Store(p, _) => match (width, layout) {
                (Width::Two, Layout::Unary) => a.str(d(r(p)), mem(x(OUT)).post(8))?,
                (Width::Two, Layout::Map) => a.str(d(r(p)), mem(x(OUT)))?,
                (Width::One, _) => a.str(s(r(p)), mem(x(OUT)))?,
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
fn emit_body(rec: &Recorder, layout: Layout) -> Result<NativeCode, String> {
    let alloc = allocate(rec)?;
    let mut pool = Pool::default();
    let mut a = Assembler::new();
    let e = |e: EncodeError| e.to_string();
    let (top, last, done, pool_label) =
        (a.new_label(), a.new_label(), a.new_label(), a.new_label());
    match layout {
        Layout::Unary => {
            a.ldr(x(IN), mem(x(ARGS))).map_err(e)?;
            a.ldr(x(OUT), mem(x(ARGS)).off(8)).map_err(e)?;
            a.ldr(x(LEN), mem(x(ARGS)).off(16)).map_err(e)?;
            a.ldr(x(TAB), mem(x(ARGS)).off(24)).map_err(e)?;
        }
        Layout::Map => {
            // LEN = end - start elements from `start` on, or none unless
            // start <= end <= len.
            let (bad, good) = (a.new_label(), a.new_label());
            a.ldr(x(IN), mem(x(ARGS))).map_err(e)?;
            a.ldr(x(IN_B), mem(x(ARGS)).off(8)).map_err(e)?;
            a.ldr(x(OUT), mem(x(ARGS)).off(16)).map_err(e)?;
            a.ldr(x(TAB), mem(x(ARGS)).off(24)).map_err(e)?;
            a.ldr(x(T1), mem(x(ARGS)).off(32)).map_err(e)?;
            a.ldr(x(T0), mem(x(ARGS)).off(40)).map_err(e)?;
            a.ldr(x(LEN), mem(x(ARGS)).off(48)).map_err(e)?;
            a.cmp(x(T0), x(LEN)).map_err(e)?;
            a.b_cond(Cond::Hi, bad).map_err(e)?;
            a.cmp(x(LEN), x(T1)).map_err(e)?;
            a.b_cond(Cond::Hi, bad).map_err(e)?;
            a.sub(x(LEN), x(LEN), x(T0)).map_err(e)?;
            a.lsl(x(T0), x(T0), 2).map_err(e)?;
            a.add(x(IN), x(IN), x(T0)).map_err(e)?;
            a.add(x(IN_B), x(IN_B), x(T0)).map_err(e)?;
            a.add(x(OUT), x(OUT), x(T0)).map_err(e)?;
            a.b(good).map_err(e)?;
            a.bind(bad).map_err(e)?;
            a.mov(x(LEN), XZR).map_err(e)?;
            a.bind(good).map_err(e)?;
        }
    }
    a.adr(x(POOL), pool_label).map_err(e)?;
    callee_saved_frame(&mut a, &alloc.callee_saved_used, true).map_err(e)?;
    a.cmp(x(LEN), 2).map_err(e)?;
    a.b_cond(Cond::Lo, last).map_err(e)?;
    a.bind(top).map_err(e)?;
    lower_step(&mut a, rec, &alloc, &mut pool, Width::Two, layout).map_err(e)?;
    if layout == Layout::Map {
        for p in [IN, IN_B, OUT] {
            a.add(x(p), x(p), 8).map_err(e)?;
        }
    }
    a.sub(x(LEN), x(LEN), 2).map_err(e)?;
    a.cmp(x(LEN), 2).map_err(e)?;
    a.b_cond(Cond::Hs, top).map_err(e)?;
    a.bind(last).map_err(e)?;
    a.cbz(x(LEN), done).map_err(e)?;
    lower_step(&mut a, rec, &alloc, &mut pool, Width::One, layout).map_err(e)?;
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
    Ok(NativeCode {
        isa: Isa::Aarch64,
        bytes: words.iter().flat_map(|wd| wd.to_le_bytes()).collect(),
        pool: Some(4 * code_words),
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
            Func::Exp => record_exp(false),
            Func::Erf => record_erf(false),
        }
    }

    /// The body (what [`Twin::emit`] gives; independent of the offer, whose
    /// contract is the same at every length).
    pub fn body(self) -> Result<NativeCode, Refusal> {
        emit_body(&self.record(), Layout::Unary).map_err(|e| Refusal::EmitError {
            message: format!("{}: {e}", Twin::name(&self)),
        })
    }
}

// SAFETY: the body reads and writes only what the arguments' extents name
// and returns normally (module docs); validation checks its results.
unsafe impl Twin for A64Twin {
    fn name(&self) -> &'static str {
        match self.func {
            Func::Exp => "exp.twin.neon",
            Func::Erf => "erf.twin.neon",
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

    /// One loop of two-element steps; the odd element is straight-line
    /// code after it.
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        match offer.contract.geometry.get("len") {
            Some(len) => body_loops(len),
            None => offer.loops.clone(),
        }
    }
}

/// Every arm64 twin of the elementwise family.
pub fn a64_twins() -> Vec<Box<dyn Twin>> {
    Func::ALL
        .iter()
        .map(|&f| Box::new(A64Twin::new(f)) as Box<dyn Twin>)
        .collect()
}

/// The loops of a body over `len` elements: one loop of two-element
/// steps (an odd last element is straight-line code after it).
fn body_loops(len: u64) -> Vec<LoopTrip> {
    vec![LoopTrip {
        name: "pairs".to_owned(),
        trips: len / 2,
        depth: 0,
    }]
}

/// The loops of [`emit_map`]'s body over `elements` elements (`end -
/// start`), with their trip counts.
pub fn map_loops(elements: u64) -> Vec<LoopTrip> {
    body_loops(elements)
}

/// The body of the exp-based map `map`: the [`map`](super::map) module's
/// contract, [`MapArgs`](super::map::MapArgs) layout. Steps of two
/// elements; an odd last element is read with `ldr s` from each stream
/// (the other lane is +0.0) and written with `str s`.
pub fn emit_map(map: &ExpMap) -> Result<NativeCode, Refusal> {
    emit_body(&record_map(map, false), Layout::Map).map_err(|e| Refusal::EmitError {
        message: format!("exp map (neon): {e}"),
    })
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
            for line in weft_managed::listing(&code)
                .lines()
                .filter(|l| !l.starts_with("//"))
            {
                if line.ends_with("// pool") {
                    continue;
                }
                assert!(!line.contains(".word"), "{f:?}: undecodable word: {line}");
            }
            assert!(weft_managed::listing(&code).contains("ret"), "{f:?}");
        }
    }

    #[test]
    fn neon_twins_fit_in_caller_saved_vector_registers() {
        for (f, rec) in [
            (Func::Exp, record_exp(false)),
            (Func::Erf, record_erf(false)),
        ] {
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
        let names: Vec<_> = twins.iter().map(|t| t.name()).collect();
        assert_eq!(names, ["exp.twin.neon", "erf.twin.neon"]);
        for t in &twins {
            assert_eq!(t.isa(), Isa::Aarch64);
            assert_eq!(t.requires(), &[Feature::Neon]);
        }
    }

    /// Against the arm64 arm, under qemu in CI (`cargo test -p weft-elementwise
    /// --target aarch64-unknown-linux-gnu`).
    #[cfg(target_arch = "aarch64")]
    mod on_aarch64 {
        use super::super::super::arm::{ElementwiseArm, ElementwiseKernel};
        use super::super::super::{reference, Func};
        use super::A64Twin;
        use weft_kernel::{Arm, Geometry, Host, Site};

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

        const EXP_SLOW_INPUTS: [u32; 3] = super::super::super::validation::EXP_SLOW_INPUTS;

        fn validate_against_arm(f: Func, seed: u64) {
            let host = Host::detect();
            let arm = ElementwiseArm::new(f);
            let site = Site::new(arm.family(), Geometry::new().with("len", 1024));
            let offer = arm.offer(&site, &host).expect("offer");
            let arm_code = arm.build(&offer, host.isa).expect("arm builds");
            // The family's own check (the planner's), at the NEON body's
            // eight lanes.
            let v = super::super::super::validation::validation(f, 8);
            let pool = v.inputs().values(seed).len();
            let outcome = weft_validate::testing::judge_twin(
                &A64Twin::new(f),
                &arm_code,
                &offer,
                &host,
                &v,
                seed,
            );
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
