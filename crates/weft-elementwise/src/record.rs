//! The twins' shared operation list: a loop iteration of `exp`, `erf` or an
//! exp-based map ([`super::map`]) as a straight-line SSA list of lane
//! operations, recorded from the reference's own steps and lowered by
//! [`twin_x64`](super::twin_x64) and [`twin_a64`](super::twin_a64).
//!
//! One job: write down, once for both back-ends, exactly the binary64
//! operations of the contract (parent module), in the same order. The
//! reference's generic steps ([`reference::exp_fast`],
//! [`reference::exp_fast_interval`], [`reference::exp_slow`],
//! [`reference::erf_eval`]) run over a [`Recorder`], which implements
//! [`Lanes`] by appending every operation; the few steps the reference
//! writes as scalar Rust (f32 narrowing, the rounding test,
//! [`reference::round_dd_to_f32`], erf's exception list) are spelt out here
//! in the same vocabulary. A map records its exp argument, the same exp
//! steps, and its binary32 operations around the result (`FAdd32`,
//! `FMul32`, `FDiv32`, sign flips as `Xor`/`Xor32`), reading its two
//! input streams with `Load32`.
//!
//! What is *not* here is back-end specific: register classes and widths,
//! comparison encodings, allocation and lowering. "Full" values are binary64
//! (or 64-bit integer) lanes, "half" values binary32 (or 32-bit integer)
//! lanes, one per binary64 lane; masks are all-ones or zero per lane, of
//! either width. An iteration is one or two register-wide halves (`n` in
//! [`Op::Input`] and [`Op::Store`]); a back-end that records one half sees
//! only half 0.

use super::map::{ExpMap, MapExpr};
use super::reference::{self, Dd, Lanes};
use super::table;

/// The argument struct a body reads (each back-end lays its loop out by it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layout {
    /// [`ElementwiseArgs`](super::ElementwiseArgs): `input`, `output`,
    /// `len`, `table`; elements `0..len`.
    Unary,
    /// [`MapArgs`](super::map::MapArgs): `a`, `b`, `out`, `table`, `len`,
    /// `start`, `end`; elements `start..end`.
    Map,
}

/// One recorded value: the index of the operation that defines it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Val(pub(super) u32);

/// Comparisons of full lanes (ordered ones are false when either side is
/// NaN).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pred {
    Eq,
    Lt,
    /// Not less than: true when `a >= b` or either is NaN.
    Nlt,
    Ge,
    Gt,
}

/// One operation of the list.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Op {
    /// A 64-bit pattern in every full lane.
    Const(u64),
    /// A 32-bit pattern in every half lane.
    Const32(u32),
    /// The f32 inputs of half `n` of the iteration, widened to binary64 (exact).
    Input(u8),
    /// The f32 lanes of input stream `s` (0: the first, 1: the second) of
    /// half `n` of the iteration, as loaded (half): `Load32(s, n)`.
    Load32(u8, u8),
    Add(Val, Val),
    Sub(Val, Val),
    Mul(Val, Val),
    /// NaN-propagating min/max (the contract's `fmin`/`fmax`).
    Min(Val, Val),
    Max(Val, Val),
    And(Val, Val),
    /// Bitwise exclusive or of full lanes (a sign flip with `Const(1 << 63)`).
    Xor(Val, Val),
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
    /// Bitwise exclusive or of half lanes (a sign flip with
    /// `Const32(0x8000_0000)`).
    Xor32(Val, Val),
    /// Binary32 IEEE addition, multiplication and division of half lanes.
    FAdd32(Val, Val),
    FMul32(Val, Val),
    FDiv32(Val, Val),
    /// 32-bit integer equality → half mask.
    Eq32(Val, Val),
    /// `mask ? t : f` on half lanes.
    Select32(Val, Val, Val),
    /// Jump to the next `Join` when every lane of the half mask is set.
    SkipIfAll(Val),
    Join,
    /// `dst <- src` (both half): `dst`'s register is overwritten.
    Assign(Val, Val),
    /// Store the half value to the outputs of half `n` of the iteration.
    Store(Val, u8),
}

impl Op {
    /// The same operation reading `f(v)` for every operand `v`.
    pub(super) fn map(self, f: impl Fn(Val) -> Val) -> Op {
        use Op::*;
        match self {
            Const(_) | Const32(_) | Input(_) | Load32(..) | Join => self,
            Add(a, b) => Add(f(a), f(b)),
            Sub(a, b) => Sub(f(a), f(b)),
            Mul(a, b) => Mul(f(a), f(b)),
            Min(a, b) => Min(f(a), f(b)),
            Max(a, b) => Max(f(a), f(b)),
            And(a, b) => And(f(a), f(b)),
            Xor(a, b) => Xor(f(a), f(b)),
            IAdd(a, b) => IAdd(f(a), f(b)),
            Cmp(p, a, b) => Cmp(p, f(a), f(b)),
            MaskAndNot(a, b) => MaskAndNot(f(a), f(b)),
            MaskAnd(a, b) => MaskAnd(f(a), f(b)),
            IAdd32(a, b) => IAdd32(f(a), f(b)),
            And32(a, b) => And32(f(a), f(b)),
            Or32(a, b) => Or32(f(a), f(b)),
            Xor32(a, b) => Xor32(f(a), f(b)),
            FAdd32(a, b) => FAdd32(f(a), f(b)),
            FMul32(a, b) => FMul32(f(a), f(b)),
            FDiv32(a, b) => FDiv32(f(a), f(b)),
            Eq32(a, b) => Eq32(f(a), f(b)),
            Assign(a, b) => Assign(f(a), f(b)),
            Shl(a, n) => Shl(f(a), n),
            Ushr(a, n) => Ushr(f(a), n),
            Floor(a) => Floor(f(a)),
            Tab(base, a) => Tab(base, f(a)),
            Narrow(a) => Narrow(f(a)),
            Widen(a) => Widen(f(a)),
            SkipIfAll(a) => SkipIfAll(f(a)),
            Store(a, n) => Store(f(a), n),
            Select(m, t, e) => Select(f(m), f(t), f(e)),
            Select32(m, t, e) => Select32(f(m), f(t), f(e)),
        }
    }

    /// The values the operation reads, in operand order.
    pub(super) fn operands(&self) -> Vec<Val> {
        use Op::*;
        match *self {
            Const(_) | Const32(_) | Input(_) | Load32(..) | Join => vec![],
            Add(a, b)
            | Sub(a, b)
            | Mul(a, b)
            | Min(a, b)
            | Max(a, b)
            | And(a, b)
            | Xor(a, b)
            | IAdd(a, b)
            | Cmp(_, a, b)
            | MaskAndNot(a, b)
            | MaskAnd(a, b)
            | IAdd32(a, b)
            | And32(a, b)
            | Or32(a, b)
            | Xor32(a, b)
            | FAdd32(a, b)
            | FMul32(a, b)
            | FDiv32(a, b)
            | Eq32(a, b)
            | Assign(a, b) => vec![a, b],
            Shl(a, _)
            | Ushr(a, _)
            | Floor(a)
            | Tab(_, a)
            | Narrow(a)
            | Widen(a)
            | SkipIfAll(a)
            | Store(a, _) => vec![a],
            Select(m, t, f) | Select32(m, t, f) => vec![m, t, f],
        }
    }
}

/// Records the operations of one iteration as a straight-line list;
/// implements the reference's [`Lanes`] so the reference's own functions
/// fill it.
#[derive(Debug, Default)]
pub(super) struct Recorder {
    /// The list: operation `i` defines `Val(i)` (if it defines a value).
    pub(super) ops: Vec<Op>,
}

impl Recorder {
    pub(super) fn push(&mut self, op: Op) -> Val {
        self.ops.push(op);
        Val((self.ops.len() - 1) as u32)
    }
    fn cmp(&mut self, p: Pred, a: Val, b: Val) -> Val {
        self.push(Op::Cmp(p, a, b))
    }
    fn c32(&mut self, bits: u32) -> Val {
        self.push(Op::Const32(bits))
    }
}

impl Lanes for Recorder {
    type F = Val;
    type I = Val;
    fn c(&mut self, v: f64) -> Val {
        self.push(Op::Const(v.to_bits()))
    }
    fn ic(&mut self, v: i64) -> Val {
        self.push(Op::Const(v as u64))
    }
    fn add(&mut self, a: Val, b: Val) -> Val {
        self.push(Op::Add(a, b))
    }
    fn sub(&mut self, a: Val, b: Val) -> Val {
        self.push(Op::Sub(a, b))
    }
    fn mul(&mut self, a: Val, b: Val) -> Val {
        self.push(Op::Mul(a, b))
    }
    fn fmin(&mut self, a: Val, b: Val) -> Val {
        self.push(Op::Min(a, b))
    }
    fn fmax(&mut self, a: Val, b: Val) -> Val {
        self.push(Op::Max(a, b))
    }
    fn abs(&mut self, a: Val) -> Val {
        let m = self.ic(i64::MAX);
        self.push(Op::And(a, m))
    }
    fn bits(&mut self, a: Val) -> Val {
        a
    }
    fn from_bits(&mut self, a: Val) -> Val {
        a
    }
    fn iadd(&mut self, a: Val, b: Val) -> Val {
        self.push(Op::IAdd(a, b))
    }
    fn band(&mut self, a: Val, m: i64) -> Val {
        let m = self.ic(m);
        self.push(Op::And(a, m))
    }
    fn shl(&mut self, a: Val, s: u8) -> Val {
        self.push(Op::Shl(a, s))
    }
    fn ushr(&mut self, a: Val, s: u8) -> Val {
        self.push(Op::Ushr(a, s))
    }
    fn floor(&mut self, a: Val) -> Val {
        self.push(Op::Floor(a))
    }
    fn select_lt(&mut self, a: Val, b: Val, t: Val, e: Val) -> Val {
        let m = self.cmp(Pred::Lt, a, b);
        self.push(Op::Select(m, t, e))
    }
    fn tab(&mut self, base: usize, j: Val) -> Val {
        self.push(Op::Tab(base, j))
    }
}

/// [`reference::round_dd_to_f32`] in vector form: the f32 nearest
/// `hi + lo`, decided with exact midpoints, or `f32(hi)` where undecided.
fn round_dd(r: &mut Recorder, hi: Val, lo: Val, rel: f64) -> Val {
    let f = r.push(Op::Narrow(hi));
    let one = r.c32(1);
    let minus_one = r.c32(u32::MAX);
    let bp = r.push(Op::IAdd32(f, one));
    let bm = r.push(Op::IAdd32(f, minus_one));
    let fv = r.push(Op::Widen(f));
    let upv = r.push(Op::Widen(bp));
    let dnv = r.push(Op::Widen(bm));
    // `up` of f32::MAX is 2^128 (its successor's bits are +inf).
    let max = r.c(f64::from(f32::MAX));
    let is_max = r.cmp(Pred::Eq, fv, max);
    let two128 = r.c(2f64.powi(128));
    let up = r.push(Op::Select(is_max, two128, upv));
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
    let down = r.push(Op::MaskAndNot(undecided_up, go_down));
    let t = r.push(Op::Select(down, dnv, fv));
    let res = r.push(Op::Select(go_up, upv, t));
    // `!f.is_finite() && !hi.is_finite()` keeps `f`.
    let absf = r.abs(fv);
    let absh = r.abs(hi);
    let inf = r.c(f64::INFINITY);
    let nf_f = r.cmp(Pred::Nlt, absf, inf);
    let nf_h = r.cmp(Pred::Nlt, absh, inf);
    let nf = r.push(Op::MaskAnd(nf_f, nf_h));
    let res = r.push(Op::Select(nf, fv, res));
    r.push(Op::Narrow(res))
}

/// Two halves of one iteration recorded in lockstep: every operation is
/// recorded for half 0, then for half 1, so the two independent chains
/// interleave in the body. Constants are shared.
struct Pair<'r>(&'r mut Recorder);

macro_rules! pair_ops {
    ($($name:ident($($arg:ident),*);)*) => {
        $(fn $name(&mut self, $($arg: (Val, Val)),*) -> (Val, Val) {
            let a = self.0.$name($($arg.0),*);
            let b = self.0.$name($($arg.1),*);
            (a, b)
        })*
    };
}

impl Lanes for Pair<'_> {
    type F = (Val, Val);
    type I = (Val, Val);
    fn c(&mut self, v: f64) -> (Val, Val) {
        let c = self.0.c(v);
        (c, c)
    }
    fn ic(&mut self, v: i64) -> (Val, Val) {
        let c = self.0.ic(v);
        (c, c)
    }
    pair_ops! {
        add(a, b); sub(a, b); mul(a, b); fmin(a, b); fmax(a, b); abs(a);
        bits(a); from_bits(a); iadd(a, b); floor(a); select_lt(a, b, t, e);
    }
    fn band(&mut self, a: (Val, Val), m: i64) -> (Val, Val) {
        let m = self.0.ic(m);
        (self.0.push(Op::And(a.0, m)), self.0.push(Op::And(a.1, m)))
    }
    fn shl(&mut self, a: (Val, Val), n: u8) -> (Val, Val) {
        (self.0.shl(a.0, n), self.0.shl(a.1, n))
    }
    fn ushr(&mut self, a: (Val, Val), n: u8) -> (Val, Val) {
        (self.0.ushr(a.0, n), self.0.ushr(a.1, n))
    }
    fn tab(&mut self, base: usize, j: (Val, Val)) -> (Val, Val) {
        (self.0.tab(base, j.0), self.0.tab(base, j.1))
    }
}

fn inputs(r: &mut Recorder) -> (Val, Val) {
    (r.push(Op::Input(0)), r.push(Op::Input(1)))
}

/// One iteration of `exp` (one or two halves): the fast path and its
/// rounding test for each; then, per half, the slow path when any of its
/// lanes fails; the stores.
pub(super) fn record_exp(two_halves: bool) -> Recorder {
    let mut r = Recorder::default();
    let xs = if two_halves {
        let (a, b) = inputs(&mut r);
        vec![a, b]
    } else {
        vec![r.push(Op::Input(0))]
    };
    let ys = exp_steps(&mut r, &xs);
    for (n, &y) in ys.iter().enumerate() {
        r.push(Op::Store(y, n as u8));
    }
    r
}

/// `exp` of the full values `xs` (one per half, already recorded): the
/// fast path of every half (in lockstep when there are two), each half's
/// rounding test, then each half's slow block. Returns each half's f32
/// result (a half value).
fn exp_steps(r: &mut Recorder, xs: &[Val]) -> Vec<Val> {
    let mut fast = Vec::with_capacity(2);
    if let [x0, x1] = *xs {
        let (lo, hi) = {
            let mut p = Pair(r);
            let y = reference::exp_fast(&mut p, (x0, x1));
            reference::exp_fast_interval(&mut p, y)
        };
        fast.push((x0, lo.0, hi.0));
        fast.push((x1, lo.1, hi.1));
    } else {
        for &x in xs {
            let y = reference::exp_fast(r, x);
            let (lo, hi) = reference::exp_fast_interval(r, y);
            fast.push((x, lo, hi));
        }
    }
    let mut halves = Vec::with_capacity(2);
    for (xh, l, h) in fast {
        let flo = r.push(Op::Narrow(l));
        let fhi = r.push(Op::Narrow(h));
        let ok = r.push(Op::Eq32(flo, fhi));
        halves.push((xh, flo, ok));
    }
    for &(xh, flo, ok) in &halves {
        r.push(Op::SkipIfAll(ok));
        let d: Dd<Val> = reference::exp_slow(r, xh);
        let slow = round_dd(r, d.hi, d.lo, table::EXP_SLOW_ERR);
        let merged = r.push(Op::Select32(ok, flo, slow));
        r.push(Op::Assign(flo, merged));
        r.push(Op::Join);
    }
    halves.iter().map(|&(_, flo, _)| flo).collect()
}

/// One iteration of the exp-based map `map` (one or two halves): the
/// exp argument of each half as a full value, [`exp_steps`] on them, then
/// each half's f32 expression around its exp result, and the stores (every
/// load of the iteration comes before its first store, so the output may
/// be an input).
pub(super) fn record_map(map: &ExpMap, two_halves: bool) -> Recorder {
    let mut r = Recorder::default();
    let halves: u8 = if two_halves { 2 } else { 1 };
    let xs: Vec<Val> = (0..halves)
        .map(|n| map_full(&mut r, map.exp_argument(), n))
        .collect();
    let ys = exp_steps(&mut r, &xs);
    let outs: Vec<Val> = (0..halves)
        .map(|n| map_half(&mut r, map.expr(), n, ys[usize::from(n)]))
        .collect();
    for (n, &o) in outs.iter().enumerate() {
        r.push(Op::Store(o, n as u8));
    }
    r
}

/// `e` of half `n` as binary64 lanes (exact: every f32 widens exactly and
/// a sign flip commutes with widening).
fn map_full(r: &mut Recorder, e: &MapExpr, n: u8) -> Val {
    match e {
        MapExpr::Input(s) => {
            let v = r.push(Op::Load32(s.index(), n));
            r.push(Op::Widen(v))
        }
        MapExpr::Neg(x) => {
            let v = map_full(r, x, n);
            let sign = r.ic(i64::MIN);
            r.push(Op::Xor(v, sign))
        }
        MapExpr::Const(c) => r.c(f64::from(*c)),
        _ => {
            // Never the exp (checked by `ExpMap::new`).
            let v = map_half(r, e, n, Val(u32::MAX));
            r.push(Op::Widen(v))
        }
    }
}

/// `e` of half `n` as f32 lanes, one IEEE binary32 operation per node,
/// with `exp` standing for the (only) exp node's result.
fn map_half(r: &mut Recorder, e: &MapExpr, n: u8, exp: Val) -> Val {
    match e {
        MapExpr::Input(s) => r.push(Op::Load32(s.index(), n)),
        MapExpr::Const(c) => r.c32(c.to_bits()),
        MapExpr::Neg(x) => {
            let v = map_half(r, x, n, exp);
            let sign = r.c32(0x8000_0000);
            r.push(Op::Xor32(v, sign))
        }
        MapExpr::Exp(_) => exp,
        MapExpr::Add(a, b) | MapExpr::Mul(a, b) | MapExpr::Div(a, b) => {
            let a = map_half(r, a, n, exp);
            let b = map_half(r, b, n, exp);
            r.push(match e {
                MapExpr::Add(..) => Op::FAdd32(a, b),
                MapExpr::Mul(..) => Op::FMul32(a, b),
                _ => Op::FDiv32(a, b),
            })
        }
    }
}

/// One iteration of `erf` (one or two halves): one binary64 evaluation,
/// one narrowing, then the contract's exception list (by `|x|` bits, sign
/// applied after).
pub(super) fn record_erf(two_halves: bool) -> Recorder {
    let mut r = Recorder::default();
    let mut evaluated = Vec::with_capacity(2);
    if two_halves {
        let x = inputs(&mut r);
        let y = reference::erf_eval(&mut Pair(&mut r), x);
        evaluated.push((x.0, y.0));
        evaluated.push((x.1, y.1));
    } else {
        let x = r.push(Op::Input(0));
        let y = reference::erf_eval(&mut r, x);
        evaluated.push((x, y));
    }
    for (n, (xh, yh)) in evaluated.into_iter().enumerate() {
        let mut out = r.push(Op::Narrow(yh));
        if !table::ERF_EXCEPTIONS.is_empty() {
            let xf = r.push(Op::Narrow(xh));
            let abs_mask = r.c32(0x7fff_ffff);
            let ax = r.push(Op::And32(xf, abs_mask));
            let sign_mask = r.c32(0x8000_0000);
            let sign = r.push(Op::And32(xf, sign_mask));
            for &(input, output) in table::ERF_EXCEPTIONS.iter() {
                let want = r.c32(input);
                let hit = r.push(Op::Eq32(ax, want));
                let o = r.c32(output);
                let signed = r.push(Op::Or32(o, sign));
                out = r.push(Op::Select32(hit, signed, out));
            }
        }
        r.push(Op::Store(out, n as u8));
    }
    r
}
