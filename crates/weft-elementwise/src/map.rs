//! Exp-based elementwise maps: `out[i] = f(a[i], b[i])` where `f` is a
//! small expression of binary32 IEEE operations around one correctly
//! rounded `exp` (this family's), emitted as twin bodies by the same
//! recorder and lowerings as the exp twins, so the exp is never re-typed.
//!
//! One job: let a kernel family outside this crate (the loop-nest SiLU·mul,
//! `silu(g)·u = g / (1 + exp(−g)) · u`) describe its element as a
//! [`MapExpr`] and get x64 ([`twin_x64::emit_map`](super::twin_x64::emit_map))
//! and arm64 ([`twin_a64::emit_map`](super::twin_a64::emit_map)) bodies for
//! the [`MapArgs`] ABI. Which twins exist, their names, and how they are
//! validated against an arm is that family's business.
//!
//! # Contract of a body
//!
//! - Arguments: a `#[repr(C)]` struct laid out as [`MapArgs`] (`a`, `b`,
//!   `out`, `table`, `len`, `start`, `end`; `table` must be
//!   [`ELEMENTWISE_TABLE`](super::ELEMENTWISE_TABLE)). When
//!   `start <= end <= len` the body computes elements `start..end` and
//!   touches (reads or writes) nothing outside `[start, end)` of any buffer:
//!   a short last step is staged through the body's own stack. Otherwise it
//!   does nothing. A stream the expression never reads is never touched
//!   ([`ExpMap::reads`]), so a one-stream map's other pointer may be any
//!   value.
//! - Arithmetic: each node of the expression is one IEEE binary32
//!   operation rounded to nearest (no FMA, no reassociation, operands in the
//!   written order), [`MapExpr::Neg`] is an exact sign flip and
//!   [`MapExpr::Exp`] is this family's correctly rounded `exp`
//!   ([`reference::exp_f32`](super::reference::exp_f32)). [`ExpMap::eval`]
//!   is the scalar definition. NaNs compare by class.
//! - Aliasing: every load of an iteration precedes its stores, so `out` may
//!   equal `a` or `b` (in place); no other overlap is allowed.

use std::fmt;

use super::reference::exp_f32;

/// An input stream of a map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stream {
    /// [`MapArgs::a`].
    A,
    /// [`MapArgs::b`].
    B,
}

impl Stream {
    /// 0 for `a`, 1 for `b`.
    pub(crate) fn index(self) -> u8 {
        match self {
            Stream::A => 0,
            Stream::B => 1,
        }
    }
}

/// One element's value, as a tree of binary32 operations.
#[derive(Clone, Debug, PartialEq)]
pub enum MapExpr {
    /// The element of an input stream (every occurrence is a load).
    Input(Stream),
    /// A binary32 constant.
    Const(f32),
    /// `−x`, exactly (the sign bit flipped, NaNs included).
    Neg(Box<MapExpr>),
    /// `exp(x)`, correctly rounded.
    Exp(Box<MapExpr>),
    /// `x ⊕ y`.
    Add(Box<MapExpr>, Box<MapExpr>),
    /// `x ⊗ y`.
    Mul(Box<MapExpr>, Box<MapExpr>),
    /// `x ⊘ y`.
    Div(Box<MapExpr>, Box<MapExpr>),
}

impl MapExpr {
    /// The element of stream `a`.
    pub fn a() -> MapExpr {
        MapExpr::Input(Stream::A)
    }
    /// The element of stream `b`.
    pub fn b() -> MapExpr {
        MapExpr::Input(Stream::B)
    }
    /// A constant.
    pub fn c(v: f32) -> MapExpr {
        MapExpr::Const(v)
    }
    /// `exp(self)`.
    pub fn exp(self) -> MapExpr {
        MapExpr::Exp(Box::new(self))
    }
    /// `self ⊕ y`.
    pub fn plus(self, y: MapExpr) -> MapExpr {
        MapExpr::Add(Box::new(self), Box::new(y))
    }
    /// `self ⊗ y`.
    pub fn times(self, y: MapExpr) -> MapExpr {
        MapExpr::Mul(Box::new(self), Box::new(y))
    }
    /// `self ⊘ y`.
    pub fn over(self, y: MapExpr) -> MapExpr {
        MapExpr::Div(Box::new(self), Box::new(y))
    }

    fn exps(&self) -> usize {
        match self {
            MapExpr::Input(_) | MapExpr::Const(_) => 0,
            MapExpr::Neg(x) => x.exps(),
            MapExpr::Exp(x) => 1 + x.exps(),
            MapExpr::Add(x, y) | MapExpr::Mul(x, y) | MapExpr::Div(x, y) => x.exps() + y.exps(),
        }
    }

    fn exp_argument(&self) -> Option<&MapExpr> {
        match self {
            MapExpr::Input(_) | MapExpr::Const(_) => None,
            MapExpr::Exp(x) => Some(x),
            MapExpr::Neg(x) => x.exp_argument(),
            MapExpr::Add(x, y) | MapExpr::Mul(x, y) | MapExpr::Div(x, y) => {
                x.exp_argument().or_else(|| y.exp_argument())
            }
        }
    }

    fn eval(&self, a: f32, b: f32) -> f32 {
        match self {
            MapExpr::Input(Stream::A) => a,
            MapExpr::Input(Stream::B) => b,
            MapExpr::Const(c) => *c,
            MapExpr::Neg(x) => f32::from_bits(x.eval(a, b).to_bits() ^ 0x8000_0000),
            MapExpr::Exp(x) => exp_f32(x.eval(a, b)),
            MapExpr::Add(x, y) => x.eval(a, b) + y.eval(a, b),
            MapExpr::Mul(x, y) => x.eval(a, b) * y.eval(a, b),
            MapExpr::Div(x, y) => x.eval(a, b) / y.eval(a, b),
        }
    }
}

/// `−x`: [`MapExpr::Neg`].
impl std::ops::Neg for MapExpr {
    type Output = MapExpr;
    fn neg(self) -> MapExpr {
        MapExpr::Neg(Box::new(self))
    }
}

/// Why an expression is not an exp-based map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapError {
    /// It has no `exp` (not this crate's business).
    NoExp,
    /// It has more than one `exp` (the lowering interleaves one).
    SeveralExps(usize),
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapError::NoExp => f.write_str("no-exp: the map has no exp"),
            MapError::SeveralExps(n) => {
                write!(
                    f,
                    "several-exps: the map has {n} exps, at most one is lowered"
                )
            }
        }
    }
}

impl std::error::Error for MapError {}

/// A checked exp-based map: an expression with exactly one `exp`.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpMap {
    expr: MapExpr,
}

impl ExpMap {
    /// `expr` as a map, or why it is not one.
    pub fn new(expr: MapExpr) -> Result<ExpMap, MapError> {
        match expr.exps() {
            0 => Err(MapError::NoExp),
            1 => Ok(ExpMap { expr }),
            n => Err(MapError::SeveralExps(n)),
        }
    }

    /// The expression.
    pub fn expr(&self) -> &MapExpr {
        &self.expr
    }

    /// The argument of the one `exp` (no `exp` inside: checked by `new`).
    pub(crate) fn exp_argument(&self) -> &MapExpr {
        match self.expr.exp_argument() {
            Some(x) => x,
            None => unreachable!("ExpMap::new checked that there is one exp"),
        }
    }

    /// Whether the expression reads `stream` (a body touches a stream only
    /// if so).
    pub fn reads(&self, stream: Stream) -> bool {
        fn walk(e: &MapExpr, s: Stream) -> bool {
            match e {
                MapExpr::Input(t) => *t == s,
                MapExpr::Const(_) => false,
                MapExpr::Neg(x) | MapExpr::Exp(x) => walk(x, s),
                MapExpr::Add(x, y) | MapExpr::Mul(x, y) | MapExpr::Div(x, y) => {
                    walk(x, s) || walk(y, s)
                }
            }
        }
        walk(&self.expr, stream)
    }

    /// The scalar definition: the map of one element.
    pub fn eval(&self, a: f32, b: f32) -> f32 {
        self.expr.eval(a, b)
    }
}

/// The argument layout of every map body (`extern "C" fn(*const
/// MapArgs)`); a family may use its own `#[repr(C)]` struct with the same
/// field offsets.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MapArgs {
    /// `len` f32s of stream `a`.
    pub a: *const f32,
    /// `len` f32s of stream `b`.
    pub b: *const f32,
    /// `len` f32 outputs (may equal `a` or `b`).
    pub out: *mut f32,
    /// Must be `ELEMENTWISE_TABLE.as_ptr()`.
    pub table: *const u64,
    /// Elements in each buffer.
    pub len: usize,
    /// First element computed.
    pub start: usize,
    /// One past the last element computed.
    pub end: usize,
}

/// Byte offsets of [`MapArgs`]' fields, in declaration order (what the
/// bodies read; a family's own struct must match them).
pub const MAP_ARGS_OFFSETS: [usize; 7] = [0, 8, 16, 24, 32, 40, 48];

const _: () = {
    use std::mem::offset_of;
    assert!(offset_of!(MapArgs, a) == MAP_ARGS_OFFSETS[0]);
    assert!(offset_of!(MapArgs, b) == MAP_ARGS_OFFSETS[1]);
    assert!(offset_of!(MapArgs, out) == MAP_ARGS_OFFSETS[2]);
    assert!(offset_of!(MapArgs, table) == MAP_ARGS_OFFSETS[3]);
    assert!(offset_of!(MapArgs, len) == MAP_ARGS_OFFSETS[4]);
    assert!(offset_of!(MapArgs, start) == MAP_ARGS_OFFSETS[5]);
    assert!(offset_of!(MapArgs, end) == MAP_ARGS_OFFSETS[6]);
};

#[cfg(test)]
mod tests {
    use super::*;
    use weft_kernel::{Kernel, NativeCode};

    /// `silu(a) · b`, the map the loop-nest SiLU·mul family lowers.
    fn silu_mul() -> ExpMap {
        let a = MapExpr::a;
        ExpMap::new(
            a().over(MapExpr::c(1.0).plus((-a()).exp()))
                .times(MapExpr::b()),
        )
        .expect("one exp")
    }

    /// `exp(a)`: a map of one stream.
    fn exp_only() -> ExpMap {
        ExpMap::new(MapExpr::a().exp()).expect("one exp")
    }

    #[test]
    fn a_map_reads_the_streams_its_expression_names() {
        assert!(silu_mul().reads(Stream::A) && silu_mul().reads(Stream::B));
        assert!(exp_only().reads(Stream::A) && !exp_only().reads(Stream::B));
    }

    fn same(x: f32, y: f32) -> bool {
        x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
    }

    #[test]
    fn maps_need_exactly_one_exp() {
        let a = MapExpr::a;
        assert_eq!(ExpMap::new(a().plus(a())), Err(MapError::NoExp));
        assert_eq!(
            ExpMap::new(a().exp().plus(a().exp().exp())),
            Err(MapError::SeveralExps(3))
        );
        assert_eq!(
            MapError::SeveralExps(2).to_string(),
            "several-exps: the map has 2 exps, at most one is lowered"
        );
        assert_eq!(silu_mul().exp_argument(), &-a());
    }

    #[test]
    fn eval_is_the_written_formula() {
        let m = silu_mul();
        for (g, u) in [(1.5f32, 2.0f32), (-100.0, 3.0), (0.25, -7.0), (-0.0, 1.0)] {
            let e = exp_f32(-g);
            let want = (g / (1.0 + e)) * u;
            assert_eq!(m.eval(g, u).to_bits(), want.to_bits(), "{g} {u}");
        }
        // exp(-g) overflows: silu is -0; -inf gives -inf/inf = NaN.
        assert_eq!(m.eval(-100.0, 1.0).to_bits(), (-0.0f32).to_bits());
        assert!(m.eval(f32::NEG_INFINITY, 1.0).is_nan());
        // Neg is a sign flip, NaNs included.
        let n = -MapExpr::a();
        assert_eq!(
            n.eval(f32::from_bits(0x7fa0_0001), 0.0).to_bits(),
            0xffa0_0001
        );
    }

    /// Values that hunt: specials, exp's slow-path inputs negated, the
    /// overflow and underflow boundaries of exp(-g), and a spread.
    fn pool(n: usize, seed: u64) -> Vec<f32> {
        let mut v: Vec<f32> = [
            0.0f32,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::from_bits(0x7fa0_0000),
            f32::from_bits(1),
            -f32::MIN_POSITIVE,
            f32::MAX,
            -88.72284,
            -88.72283,
            88.7,
            104.0,
        ]
        .to_vec();
        v.extend([0xbae0_e25cu32, 0xbbf0_edf1, 0xc169_12cd].map(|b| -f32::from_bits(b)));
        let mut s = seed | 1;
        while v.len() < n {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            v.push(((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 24.0);
        }
        v.truncate(n);
        v
    }

    /// Runs `code` on `a`, `b` over `range`, with guards around every
    /// buffer; checks every element against `eval` and every other word
    /// untouched, separate and in place (`out == a`). A map that does not
    /// read `b` gets a null `b`, which it must never touch.
    fn check_body(code: &NativeCode, m: &ExpMap, what: &str) {
        let b_ptr = |b: &[f32]| {
            if m.reads(Stream::B) {
                b.as_ptr()
            } else {
                std::ptr::null()
            }
        };
        // SAFETY: a map body honours the leaf ABI for `MapArgs` (module
        // contract); every call below passes buffers holding `len` f32s.
        let k = unsafe { Kernel::<MapArgs>::from_native(code) }.expect("places");
        const G: usize = 16;
        let a = pool(64 + 2 * G, 3);
        let b = pool(64 + 2 * G, 11);
        for len in [0usize, 1, 7, 33, 64] {
            for start in [0usize, 1, 3] {
                for n in 0..=(len.saturating_sub(start)).min(33) {
                    let range = start..start + n;
                    let mut out = vec![-7.0f32; len + 2 * G];
                    let call = |out: *mut f32, a: *const f32| MapArgs {
                        a,
                        b: b_ptr(&b[G..]),
                        out,
                        table: super::super::ELEMENTWISE_TABLE.as_ptr(),
                        len,
                        start: range.start,
                        end: range.end,
                    };
                    let args = call(out[G..].as_mut_ptr(), a[G..].as_ptr());
                    // SAFETY: each buffer holds `len` f32s from index G.
                    unsafe { k.call(&args) };
                    let mut inplace = a.clone();
                    let args = call(inplace[G..].as_mut_ptr(), inplace[G..].as_ptr());
                    // SAFETY: as above; `out == a` is allowed.
                    unsafe { k.call(&args) };
                    for i in 0..len + 2 * G {
                        let inside = i >= G + range.start && i < G + range.end;
                        let (want, want_in_place) = if inside {
                            let y = m.eval(a[i], b[i]);
                            (y, y)
                        } else {
                            (-7.0, a[i])
                        };
                        assert!(
                            same(out[i], want) && same(inplace[i], want_in_place),
                            "{what}: len {len} range {range:?} word {i}: a {:#010x} b {:#010x}: \
                             got {:#010x} / in place {:#010x}, want {:#010x}",
                            a[i].to_bits(),
                            b[i].to_bits(),
                            out[i].to_bits(),
                            inplace[i].to_bits(),
                            want.to_bits()
                        );
                    }
                }
            }
        }
        // Arguments that break `start <= end <= len` do nothing.
        let mut out = vec![-7.0f32; 8];
        for (start, end) in [(5usize, 4usize), (0, 9)] {
            let args = MapArgs {
                a: a.as_ptr(),
                b: b_ptr(&b),
                out: out.as_mut_ptr(),
                table: super::super::ELEMENTWISE_TABLE.as_ptr(),
                len: 8,
                start,
                end,
            };
            // SAFETY: the body reads nothing when the guards fail, and the
            // buffers hold 8 f32s anyway.
            unsafe { k.call(&args) };
            assert!(out.iter().all(|v| *v == -7.0), "{what}: {start}..{end}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x64_map_bodies_compute_eval_in_every_tail_and_in_place() {
        use super::super::twin_x64::{emit_map, Tier};
        use weft_kernel::Feature::{Avx, Avx2, Avx512dq, Avx512f, Avx512vl};
        let host = weft_kernel::Host::detect();
        let mut ran = 0;
        for (tier, needs) in [
            (Tier::Avx512, &[Avx512f, Avx512dq, Avx512vl][..]),
            (Tier::Avx2, &[Avx, Avx2][..]),
        ] {
            for m in [silu_mul(), exp_only()] {
                let code = emit_map(&m, tier, weft_x64::Abi::host()).expect("emits");
                if weft_kernel::require_features(&host, needs).is_ok() {
                    check_body(&code, &m, &format!("{tier:?} {:?}", m.expr()));
                    ran += 1;
                }
            }
        }
        eprintln!("ran {ran} x64 tiers");
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_map_body_computes_eval_in_every_tail_and_in_place() {
        for m in [silu_mul(), exp_only()] {
            let code = super::super::twin_a64::emit_map(&m).expect("emits");
            check_body(&code, &m, &format!("neon {:?}", m.expr()));
        }
    }

    #[test]
    fn map_bodies_emit_for_both_isas_on_any_host() {
        use super::super::twin_x64::{emit_map, Tier};
        for tier in [Tier::Avx512, Tier::Avx2] {
            for abi in [weft_x64::Abi::SysV, weft_x64::Abi::Win64] {
                let code = emit_map(&silu_mul(), tier, abi).expect("emits");
                assert!(!code.bytes.is_empty());
            }
        }
        let code = super::super::twin_a64::emit_map(&silu_mul()).expect("emits");
        let listing = weft_managed::listing(&code);
        for line in listing.lines().filter(|l| !l.ends_with("// pool")) {
            assert!(!line.contains(".word"), "undecodable: {line}");
        }
    }
}
