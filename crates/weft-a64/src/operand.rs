//! Typed operands: general registers that keep X, W, SP and ZR apart, SIMD&FP
//! registers with their arrangement, elements, lists, memory operands,
//! immediates and branch targets.

use core::fmt;

/// A general-purpose register. `X(n)`/`W(n)` hold 0..=30; register number 31
/// is spelled [`Gpr::Sp`]/[`Gpr::Wsp`] or [`Gpr::Xzr`]/[`Gpr::Wzr`], and a form
/// says which of the two it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Gpr {
    /// 64-bit `x0`..`x30`.
    X(u8),
    /// 32-bit `w0`..`w30`.
    W(u8),
    /// The 64-bit stack pointer `sp`.
    Sp,
    /// The 32-bit stack pointer `wsp`.
    Wsp,
    /// The 64-bit zero register `xzr`.
    Xzr,
    /// The 32-bit zero register `wzr`.
    Wzr,
}

impl Gpr {
    /// The 5-bit register number (31 for SP and ZR).
    pub fn num(self) -> u8 {
        match self {
            Gpr::X(n) | Gpr::W(n) => n,
            _ => 31,
        }
    }
    /// True for the 64-bit views (`x`, `sp`, `xzr`).
    pub fn is_64(self) -> bool {
        matches!(self, Gpr::X(_) | Gpr::Sp | Gpr::Xzr)
    }
    /// True for `sp` and `wsp`.
    pub fn is_sp(self) -> bool {
        matches!(self, Gpr::Sp | Gpr::Wsp)
    }
    /// True for `xzr` and `wzr`.
    pub fn is_zr(self) -> bool {
        matches!(self, Gpr::Xzr | Gpr::Wzr)
    }
}

impl fmt::Display for Gpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Gpr::X(n) => write!(f, "x{n}"),
            Gpr::W(n) => write!(f, "w{n}"),
            Gpr::Sp => f.write_str("sp"),
            Gpr::Wsp => f.write_str("wsp"),
            Gpr::Xzr => f.write_str("xzr"),
            Gpr::Wzr => f.write_str("wzr"),
        }
    }
}

/// `x0`..`x30`. Panics on 31 or more: spell register 31 as [`SP`] or [`XZR`].
pub const fn x(n: u8) -> Gpr {
    assert!(n < 31, "x31 does not exist: use SP or XZR");
    Gpr::X(n)
}
/// `w0`..`w30`. Panics on 31 or more: spell register 31 as [`WSP`] or [`WZR`].
pub const fn w(n: u8) -> Gpr {
    assert!(n < 31, "w31 does not exist: use WSP or WZR");
    Gpr::W(n)
}
/// The stack pointer `sp`.
pub const SP: Gpr = Gpr::Sp;
/// The 32-bit stack pointer `wsp`.
pub const WSP: Gpr = Gpr::Wsp;
/// The zero register `xzr`.
pub const XZR: Gpr = Gpr::Xzr;
/// The 32-bit zero register `wzr`.
pub const WZR: Gpr = Gpr::Wzr;
/// The link register `x30`.
pub const LR: Gpr = Gpr::X(30);

/// The width of a scalar SIMD&FP register view (`b0`, `h0`, `s0`, `d0`, `q0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FpWidth {
    /// 8-bit `b`.
    B,
    /// 16-bit `h`.
    H,
    /// 32-bit `s`.
    S,
    /// 64-bit `d`.
    D,
    /// 128-bit `q`.
    Q,
}

impl FpWidth {
    fn letter(self) -> char {
        match self {
            FpWidth::B => 'b',
            FpWidth::H => 'h',
            FpWidth::S => 's',
            FpWidth::D => 'd',
            FpWidth::Q => 'q',
        }
    }
}

/// A vector arrangement (`v0.4s` is register 0 with [`Arr::S4`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arr {
    /// Eight bytes, `.8b`.
    B8,
    /// Sixteen bytes, `.16b`.
    B16,
    /// Four halfwords, `.4h`.
    H4,
    /// Eight halfwords, `.8h`.
    H8,
    /// Two words, `.2s`.
    S2,
    /// Four words, `.4s`.
    S4,
    /// One doubleword, `.1d`.
    D1,
    /// Two doublewords, `.2d`.
    D2,
}

/// Every arrangement, for generators and tests.
pub const ALL_ARRS: [Arr; 8] = [
    Arr::B8,
    Arr::B16,
    Arr::H4,
    Arr::H8,
    Arr::S2,
    Arr::S4,
    Arr::D1,
    Arr::D2,
];

impl Arr {
    /// The element size in bits.
    pub fn esize(self) -> u32 {
        match self {
            Arr::B8 | Arr::B16 => 8,
            Arr::H4 | Arr::H8 => 16,
            Arr::S2 | Arr::S4 => 32,
            Arr::D1 | Arr::D2 => 64,
        }
    }
    /// The vector size in bytes (8 or 16).
    pub fn bytes(self) -> u32 {
        match self {
            Arr::B16 | Arr::H8 | Arr::S4 | Arr::D2 => 16,
            _ => 8,
        }
    }
    fn suffix(self) -> &'static str {
        match self {
            Arr::B8 => "8b",
            Arr::B16 => "16b",
            Arr::H4 => "4h",
            Arr::H8 => "8h",
            Arr::S2 => "2s",
            Arr::S4 => "4s",
            Arr::D1 => "1d",
            Arr::D2 => "2d",
        }
    }
}

/// The element shape of an indexed vector operand (`v3.s[1]`, `v2.4b[3]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    /// A byte, `.b[i]`.
    B,
    /// A halfword, `.h[i]`.
    H,
    /// A word, `.s[i]`.
    S,
    /// A doubleword, `.d[i]`.
    D,
    /// A group of four bytes (dot products), `.4b[i]`.
    B4,
    /// A pair of halfwords (BFDOT), `.2h[i]`.
    H2,
}

impl Elem {
    /// log2 of the element size in bytes.
    pub fn log2_bytes(self) -> u32 {
        match self {
            Elem::B => 0,
            Elem::H => 1,
            Elem::S | Elem::B4 | Elem::H2 => 2,
            Elem::D => 3,
        }
    }
    fn suffix(self) -> &'static str {
        match self {
            Elem::B => "b",
            Elem::H => "h",
            Elem::S => "s",
            Elem::D => "d",
            Elem::B4 => "4b",
            Elem::H2 => "2h",
        }
    }
}

/// A SIMD&FP register number, to be given a view: `v(3).s4()`, `v(3).s(1)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct V(pub u8);

/// SIMD&FP register `n` (0..=31); pick a view with the methods of [`V`].
pub const fn v(n: u8) -> V {
    assert!(n < 32, "v registers are v0..v31");
    V(n)
}

macro_rules! views {
    ($($name:ident => $arr:ident, $doc:literal;)*) => {
        impl V {
            $( #[doc = $doc] pub const fn $name(self) -> Operand { Operand::V(self.0, Arr::$arr) } )*
        }
    };
}
views! {
    b8 => B8, "This register as `.8b`.";
    b16 => B16, "This register as `.16b`.";
    h4 => H4, "This register as `.4h`.";
    h8 => H8, "This register as `.8h`.";
    s2 => S2, "This register as `.2s`.";
    s4 => S4, "This register as `.4s`.";
    d1 => D1, "This register as `.1d`.";
    d2 => D2, "This register as `.2d`.";
}

impl V {
    /// This register with arrangement `arr`.
    pub const fn arr(self, arr: Arr) -> Operand {
        Operand::V(self.0, arr)
    }
    /// Byte element `vN.b[i]`.
    pub const fn b(self, i: u8) -> Operand {
        Operand::Elem(self.0, Elem::B, i)
    }
    /// Halfword element `vN.h[i]`.
    pub const fn h(self, i: u8) -> Operand {
        Operand::Elem(self.0, Elem::H, i)
    }
    /// Word element `vN.s[i]`.
    pub const fn s(self, i: u8) -> Operand {
        Operand::Elem(self.0, Elem::S, i)
    }
    /// Doubleword element `vN.d[i]`.
    pub const fn d(self, i: u8) -> Operand {
        Operand::Elem(self.0, Elem::D, i)
    }
    /// Four-byte group `vN.4b[i]` (SDOT/UDOT/USDOT by element).
    pub const fn b4(self, i: u8) -> Operand {
        Operand::Elem(self.0, Elem::B4, i)
    }
    /// Halfword pair `vN.2h[i]` (BFDOT by element).
    pub const fn h2(self, i: u8) -> Operand {
        Operand::Elem(self.0, Elem::H2, i)
    }
    /// A list of `count` (1..=4) consecutive registers starting here, wrapping at 31.
    pub const fn list(self, count: u8, arr: Arr) -> Operand {
        Operand::List(self.0, count, arr)
    }
}

macro_rules! scalars {
    ($($f:ident => $w:ident, $doc:literal;)*) => {
        $( #[doc = $doc] pub const fn $f(n: u8) -> Operand { assert!(n < 32); Operand::Fp(FpWidth::$w, n) } )*
    };
}
scalars! {
    b => B, "Scalar SIMD&FP register `bN`.";
    h => H, "Scalar SIMD&FP register `hN`.";
    s => S, "Scalar SIMD&FP register `sN`.";
    d => D, "Scalar SIMD&FP register `dN`.";
    q => Q, "Scalar SIMD&FP register `qN`.";
}

/// A condition code (`eq`, `ne`, ...), in encoding order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Cond {
    Eq,
    Ne,
    Hs,
    Lo,
    Mi,
    Pl,
    Vs,
    Vc,
    Hi,
    Ls,
    Ge,
    Lt,
    Gt,
    Le,
    Al,
    Nv,
}

impl Cond {
    /// The condition with encoding `bits & 15`.
    pub fn from_bits(bits: u32) -> Cond {
        use Cond::*;
        [
            Eq, Ne, Hs, Lo, Mi, Pl, Vs, Vc, Hi, Ls, Ge, Lt, Gt, Le, Al, Nv,
        ][(bits & 15) as usize]
    }
    /// The 4-bit encoding.
    pub fn bits(self) -> u32 {
        self as u32
    }
    /// The opposite condition (flips the low bit).
    pub fn invert(self) -> Cond {
        Cond::from_bits(self.bits() ^ 1)
    }
    /// The lowercase name llvm prints.
    pub fn name(self) -> &'static str {
        [
            "eq", "ne", "hs", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le",
            "al", "nv",
        ][self as usize]
    }
}

/// A shift applied to a register operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShiftKind {
    /// Logical shift left.
    Lsl,
    /// Logical shift right.
    Lsr,
    /// Arithmetic shift right.
    Asr,
    /// Rotate right (logical instructions only).
    Ror,
}

/// An extension applied to a register operand (extended-register ADD/SUB and
/// register-offset addressing; `Lsl` is the memory-operand spelling of UXTX).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Extend {
    Uxtb,
    Uxth,
    Uxtw,
    Uxtx,
    Sxtb,
    Sxth,
    Sxtw,
    Sxtx,
    Lsl,
}

impl Extend {
    /// The 3-bit `option` field (Lsl encodes as UXTX).
    pub fn bits(self) -> u32 {
        match self {
            Extend::Lsl => 3,
            e => e as u32,
        }
    }
    /// The extension with `option` field `bits & 7`.
    pub fn from_bits(bits: u32) -> Extend {
        use crate::operand::Extend::*;
        [Uxtb, Uxth, Uxtw, Uxtx, Sxtb, Sxth, Sxtw, Sxtx][(bits & 7) as usize]
    }
    /// The lowercase name.
    pub fn name(self) -> &'static str {
        [
            "uxtb", "uxth", "uxtw", "uxtx", "sxtb", "sxth", "sxtw", "sxtx", "lsl",
        ][self as usize]
    }
}

/// A branch target: a label (resolved by the [`crate::Assembler`]) or a byte
/// offset from the branch itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// A label from [`crate::Assembler::new_label`].
    Label(Label),
    /// A byte offset relative to the instruction.
    Offset(i64),
}

/// A position in an [`crate::Assembler`]'s code, bound once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Label(pub(crate) u32);

/// How a memory operand forms its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Addr {
    /// `[base, #off]` (written `[base]` when 0).
    Offset(i64),
    /// `[base, #off]!`: add first, write back.
    PreIndex(i64),
    /// `[base], #off`: access, then add.
    PostIndex(i64),
    /// `[base], xm`: access, then add a register (LD1/ST1).
    PostReg(Gpr),
    /// `[base, xm{, lsl #s}]` / `[base, wm, uxtw|sxtw {#s}]`; `shifted` says
    /// whether the index is scaled by the access size.
    Reg(Gpr, Extend, bool),
}

/// A memory operand: a base register (X or SP) and an addressing mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mem {
    /// The base register: `x0`..`x30` or `sp`.
    pub base: Gpr,
    /// How the address is formed.
    pub addr: Addr,
}

/// `[base]`; refine it with [`Mem::off`], [`Mem::pre`], [`Mem::post`] and friends.
pub const fn mem(base: Gpr) -> Mem {
    Mem {
        base,
        addr: Addr::Offset(0),
    }
}

impl Mem {
    /// `[base, #off]`.
    pub const fn off(self, off: i64) -> Mem {
        Mem {
            base: self.base,
            addr: Addr::Offset(off),
        }
    }
    /// `[base, #off]!`.
    pub const fn pre(self, off: i64) -> Mem {
        Mem {
            base: self.base,
            addr: Addr::PreIndex(off),
        }
    }
    /// `[base], #off`.
    pub const fn post(self, off: i64) -> Mem {
        Mem {
            base: self.base,
            addr: Addr::PostIndex(off),
        }
    }
    /// `[base], xm`.
    pub const fn post_reg(self, xm: Gpr) -> Mem {
        Mem {
            base: self.base,
            addr: Addr::PostReg(xm),
        }
    }
    /// `[base, xm]` (unscaled register index).
    pub const fn idx(self, xm: Gpr) -> Mem {
        Mem {
            base: self.base,
            addr: Addr::Reg(xm, Extend::Lsl, false),
        }
    }
    /// `[base, xm, lsl #log2(size)]` (index scaled by the access size).
    pub const fn idx_scaled(self, xm: Gpr) -> Mem {
        Mem {
            base: self.base,
            addr: Addr::Reg(xm, Extend::Lsl, true),
        }
    }
    /// `[base, wm|xm, ext {#log2(size)}]`.
    pub const fn idx_ext(self, rm: Gpr, ext: Extend, scaled: bool) -> Mem {
        Mem {
            base: self.base,
            addr: Addr::Reg(rm, ext, scaled),
        }
    }
}

/// One operand of an instruction. Build them with [`x`], [`w`], [`v`], [`s`],
/// [`mem`], [`imm`], ..., or from `i64`/`Gpr`/`Mem`/`Cond`/`Label` via `From`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    /// No operand (padding in [`crate::Inst`]).
    None,
    /// A general-purpose register.
    Gpr(Gpr),
    /// A scalar SIMD&FP register view (`s3`).
    Fp(FpWidth, u8),
    /// A vector register with its arrangement (`v3.4s`).
    V(u8, Arr),
    /// A vector element (`v3.s[1]`): register, element shape, index.
    Elem(u8, Elem, u8),
    /// A register list (`{ v0.4s, v1.4s }`): first register, count, arrangement.
    List(u8, u8, Arr),
    /// An integer immediate (also shift amounts, lanes, bit numbers, bitmasks as `u64 as i64`).
    Imm(i64),
    /// An 8-bit encoded floating-point immediate (see [`fimm`]).
    FImm(u8),
    /// A condition code.
    Cond(Cond),
    /// A register shift (`lsl #3`).
    Shift(ShiftKind, u8),
    /// A register extension (`uxtw #2`).
    Extend(Extend, u8),
    /// A memory operand.
    Mem(Mem),
    /// A branch target.
    Target(Target),
}

/// An integer immediate operand.
pub const fn imm(v: i64) -> Operand {
    Operand::Imm(v)
}
/// `lsl #n` as a shift operand (shifted-register forms).
pub const fn lsl(n: u8) -> Operand {
    Operand::Shift(ShiftKind::Lsl, n)
}
/// `lsr #n` as a shift operand.
pub const fn lsr(n: u8) -> Operand {
    Operand::Shift(ShiftKind::Lsr, n)
}
/// `asr #n` as a shift operand.
pub const fn asr(n: u8) -> Operand {
    Operand::Shift(ShiftKind::Asr, n)
}
/// `ror #n` as a shift operand.
pub const fn ror(n: u8) -> Operand {
    Operand::Shift(ShiftKind::Ror, n)
}
/// An extension operand (`uxtw #2` is `ext(Extend::Uxtw, 2)`).
pub const fn ext(e: Extend, amount: u8) -> Operand {
    Operand::Extend(e, amount)
}
/// A byte-offset branch target.
pub const fn offset(bytes: i64) -> Operand {
    Operand::Target(Target::Offset(bytes))
}

/// The 8-bit A64 floating-point immediate for `value`, if `value` is
/// ±(16..=31)/16 × 2^(-3..=4); `None` otherwise.
pub fn fimm8(value: f64) -> Option<u8> {
    (0u16..256)
        .map(|i| i as u8)
        .find(|&i| fimm8_value(i) == value)
}

/// A floating-point immediate operand (`fimm(1.0)`), or `None` when `value`
/// has no 8-bit A64 encoding.
pub fn fimm(value: f64) -> Option<Operand> {
    fimm8(value).map(Operand::FImm)
}

/// The value an 8-bit floating-point immediate stands for.
pub fn fimm8_value(imm8: u8) -> f64 {
    let sign = if imm8 & 0x80 != 0 { -1.0 } else { 1.0 };
    let b = (imm8 >> 6) & 1;
    let e3 = ((imm8 >> 4) & 3) as i32; // low two exponent bits
    let exp = if b == 1 { e3 - 3 } else { e3 + 1 }; // -3..=0 or 1..=4
    let frac = 16.0 + (imm8 & 15) as f64;
    sign * frac / 16.0 * 2f64.powi(exp)
}

impl From<Gpr> for Operand {
    fn from(g: Gpr) -> Operand {
        Operand::Gpr(g)
    }
}
impl From<i64> for Operand {
    fn from(v: i64) -> Operand {
        Operand::Imm(v)
    }
}
impl From<i32> for Operand {
    fn from(v: i32) -> Operand {
        Operand::Imm(v as i64)
    }
}
impl From<u32> for Operand {
    fn from(v: u32) -> Operand {
        Operand::Imm(v as i64)
    }
}
impl From<u64> for Operand {
    fn from(v: u64) -> Operand {
        Operand::Imm(v as i64)
    }
}
impl From<Mem> for Operand {
    fn from(m: Mem) -> Operand {
        Operand::Mem(m)
    }
}
impl From<Cond> for Operand {
    fn from(c: Cond) -> Operand {
        Operand::Cond(c)
    }
}
impl From<Label> for Operand {
    fn from(l: Label) -> Operand {
        Operand::Target(Target::Label(l))
    }
}
impl From<Target> for Operand {
    fn from(t: Target) -> Operand {
        Operand::Target(t)
    }
}

pub(crate) fn fmt_fimm(imm8: u8) -> String {
    format!("#{:.8}", fimm8_value(imm8))
}

impl fmt::Display for Operand {
    /// The operand in llvm syntax, without form context (memory operands print
    /// their scaled index as `lsl #?` only inside an instruction).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Operand::None => Ok(()),
            Operand::Gpr(g) => write!(f, "{g}"),
            Operand::Fp(w, n) => write!(f, "{}{n}", w.letter()),
            Operand::V(n, a) => write!(f, "v{n}.{}", a.suffix()),
            Operand::Elem(n, e, i) => write!(f, "v{n}.{}[{i}]", e.suffix()),
            Operand::List(first, count, a) => {
                f.write_str("{ ")?;
                for k in 0..count {
                    if k > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "v{}.{}", (first + k) % 32, a.suffix())?;
                }
                f.write_str(" }")
            }
            Operand::Imm(v) => write!(f, "#{v}"),
            Operand::FImm(i) => f.write_str(&fmt_fimm(i)),
            Operand::Cond(c) => f.write_str(c.name()),
            Operand::Shift(k, n) => {
                let name = ["lsl", "lsr", "asr", "ror"][k as usize];
                write!(f, "{name} #{n}")
            }
            Operand::Extend(e, n) => write!(f, "{} #{n}", e.name()),
            Operand::Mem(m) => write!(f, "{}", crate::display::MemFmt(m, 0)),
            Operand::Target(Target::Offset(o)) => write!(f, "#{o}"),
            Operand::Target(Target::Label(l)) => write!(f, ".L{}", l.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fimm8_round_trips_every_encoding() {
        for i in 0..=255u8 {
            assert_eq!(fimm8(fimm8_value(i)), Some(i));
        }
        assert_eq!(fimm8(1.0), Some(0x70));
        assert_eq!(fimm8(0.0), None);
    }

    #[test]
    fn register_31_is_spelled_as_sp_or_zr() {
        assert_eq!(SP.num(), 31);
        assert_eq!(XZR.num(), 31);
        assert_ne!(Operand::from(SP), Operand::from(XZR));
    }

    #[test]
    fn lists_wrap_at_v31() {
        assert_eq!(v(31).list(2, Arr::S4).to_string(), "{ v31.4s, v0.4s }");
    }
}
