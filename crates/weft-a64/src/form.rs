//! The machinery behind the table: operand kinds (what an operand slot
//! accepts and which bits it owns), arrangement variants, and the generic
//! encoder and decoder that interpret a [`Form`].

use crate::operand::*;
use crate::EncodeError;

/// The CPU feature a form needs beyond base ARMv8.0-A with FP/AdvSIMD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Feature {
    /// ARMv8.0-A integer, FP and AdvSIMD.
    Base,
    /// FEAT_FP16 (half-precision arithmetic).
    Fp16,
    /// FEAT_DotProd (SDOT/UDOT).
    Dotprod,
    /// FEAT_I8MM (SMMLA/UMMLA/USMMLA/USDOT/SUDOT).
    I8mm,
    /// FEAT_BF16 (BFDOT/BFMMLA/BFCVTN).
    Bf16,
}

/// How a vector element's index is placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Idx {
    /// By-element arithmetic: H (bit 11), L (bit 21); register in 16..=20.
    Hl,
    /// `imm5` at 16..=20 (DUP/INS/UMOV destination or source).
    Imm5,
    /// `imm4` at 11..=14 (INS element source).
    Imm4,
}

/// Addressing modes a memory slot accepts; the base register is always bits 5..=9.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemKind {
    /// `[xn|sp]` only.
    Base,
    /// `[xn|sp, #imm12 << scale]`.
    Uoff(u8),
    /// `[xn|sp, #simm9]` (LDUR/STUR).
    Simm9,
    /// `[xn|sp, #simm9]!`.
    Pre9,
    /// `[xn|sp], #simm9`.
    Post9,
    /// `[xn|sp, #simm7 << scale]` (pairs).
    PairOff(u8),
    /// `[xn|sp, #simm7 << scale]!`.
    PairPre(u8),
    /// `[xn|sp], #simm7 << scale`.
    PairPost(u8),
    /// `[xn|sp, rm, ext {#scale}]`: rm 16..=20, option 13..=15, S bit 12.
    RegOff(u8),
    /// `[xn|sp], #bytes` where bytes is the whole list (`true`) or one element
    /// per register (`false`, LD1R); Rm = 31.
    PostImm(bool),
    /// `[xn|sp], xm` with xm in 16..=20.
    PostReg,
}

/// What one operand slot of a form accepts, and where its bits go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// X register at lsb; 31 is XZR.
    X(u8),
    /// X register at lsb; 31 is SP.
    XSp(u8),
    /// W register at lsb; 31 is WZR.
    W(u8),
    /// W register at lsb; 31 is WSP.
    WSp(u8),
    /// X register at lsb, defaulting to (and hidden when) x30 (RET).
    XLr(u8),
    /// Scalar SIMD&FP register of a fixed width at lsb.
    Fp(FpWidth, u8),
    /// Scalar SIMD&FP register at lsb whose width the variant gives.
    VFp(u8),
    /// Vector register at lsb whose arrangement the variant gives.
    V(u8),
    /// Vector element: register at lsb, index placed as [`Idx`] says.
    Elem(u8, Idx),
    /// List of `count` registers starting at lsb.
    List(u8, u8),
    /// One-element list with a lane, `{ vT.s }[i]` (LD1/ST1 single structure):
    /// Rt at lsb, index in Q:S:size (bits 30, 12, 10..=11).
    LaneList(u8),
    /// Unsigned immediate field (lsb, width), printed in decimal.
    UImm(u8, u8),
    /// Unsigned immediate field (lsb, width), printed in hex.
    UHex(u8, u8),
    /// Optional `lsl #n` (lsb, width, step): field = n / step. Defaults to 0.
    OptLsl(u8, u8, u8),
    /// Logical (bitmask) immediate N:immr:imms at 10..=22; `true` = 64-bit.
    Bitmask(bool),
    /// Register shift (type 22..=23, amount 10..=15): (64-bit, ROR allowed). Defaults to `lsl #0`.
    Shift(bool, bool),
    /// Extended-register Rm at 16: W or X as the extension says; `true` = 64-bit form.
    ExtRm(bool),
    /// Extension (option 13..=15, amount 10..=12); `true` = 64-bit form.
    Ext(bool),
    /// Condition at lsb.
    Cond(u8),
    /// PC-relative target scaled by 4 (lsb, width).
    Br(u8, u8),
    /// ADR's 21-bit byte offset (immlo 29..=30, immhi 5..=23).
    Adr,
    /// TBZ/TBNZ bit number: `true` = X form (32..=63), `false` = W form (0..=31).
    TbBit(bool),
    /// `lsl #n` as UBFM (immr 16..=21, imms 10..=15); `true` = 64-bit.
    LslImm(bool),
    /// A memory operand.
    Mem(MemKind),
    /// Left-shift immediate immh:immb at 16..=22; element size from shape index.
    ShlImm(u8),
    /// Right-shift immediate immh:immb at 16..=22; element size from shape index.
    ShrImm(u8),
    /// Scalar 8-bit FP immediate at lsb.
    FImm(u8),
    /// Vector 8-bit FP immediate split a:b:c at 16..=18, d:e:f:g:h at 5..=9.
    VFImm,
    /// 8-bit integer immediate split like [`Kind::VFImm`] (MOVI).
    Imm8Split,
    /// 64-bit immediate whose bytes are each 0x00 or 0xff (MOVI .2d).
    Imm64Bytes,
    /// DSB option in CRm (8..=11).
    Barrier,
    /// PRFM operation in Rt (0..=4).
    Prfop,
    /// EXT byte index at 11..=14 (0..=7 for .8b).
    ExtIdx,
}

/// The arrangement (or scalar width, or element) of one vector-ish operand in a variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// A vector arrangement (for [`Kind::V`] and [`Kind::List`]).
    A(Arr),
    /// An element shape (for [`Kind::Elem`]).
    E(Elem),
    /// A scalar width (for [`Kind::VFp`]).
    F(FpWidth),
}

/// One arrangement variant of a form: the bits it adds and the shape of each
/// vector-ish operand in order (one shape applies to all of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    /// Bits this variant ORs into the base (Q, size, ...).
    pub bits: u32,
    /// Shapes of the vector-ish operands, in operand order.
    pub shape: &'static [Shape],
}

/// How the text of a form is printed when llvm prefers an alias.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Alias {
    /// No alias: mnemonic and operands.
    None,
    /// ADD #0 with SP: `mov`.
    MovSp,
    /// ORR with ZR: `mov` register.
    MovReg,
    /// ORN with ZR: `mvn`.
    Mvn,
    /// ORR immediate with ZR: `mov` when no MOVZ/MOVN can do it.
    MovBitmask,
    /// MOVZ: `mov`.
    MovZ,
    /// MOVN: `mov`.
    MovN,
    /// SUBS with ZR destination: `cmp`; SUBS/SUB with ZR first source: `negs`/`neg`.
    Cmp,
    /// ADDS with ZR destination: `cmn`.
    Cmn,
    /// SUB with ZR first source: `neg`.
    Neg,
    /// ANDS with ZR destination: `tst`.
    Tst,
    /// MADD with ZR addend: `mul`.
    Mul,
    /// MSUB with ZR addend: `mneg`.
    Mneg,
    /// CSINC with equal sources: `cinc`/`cset`.
    Cinc,
    /// CSINV with equal sources: `cinv`/`csetm`.
    Cinv,
    /// CSNEG with equal sources: `cneg`.
    Cneg,
    /// ORR vector with equal sources: `mov`.
    MovV,
}

/// One row of the table: one encoding class at one register width or
/// arrangement family.
#[derive(Clone, Copy, Debug)]
pub struct Form {
    /// Which form this is.
    pub op: crate::Op,
    /// The `Op` name, e.g. `ADD_IMM_X`.
    pub name: &'static str,
    /// The assembler mnemonic, or a template with `{i}` placeholders.
    pub mnemonic: &'static str,
    /// The operand slots.
    pub kinds: &'static [Kind],
    /// The fixed bits (all fields zero, first-variant bits excluded).
    pub base: u32,
    /// The arrangement variants (one with no shapes for scalar forms).
    pub variants: &'static [Variant],
    /// The CPU feature the form needs.
    pub feature: Feature,
    /// The preferred-alias printing rule.
    pub alias: Alias,
}

pub(crate) const NOV: &[Variant] = &[Variant {
    bits: 0,
    shape: &[],
}];

fn bits_of(kind: Kind) -> u32 {
    let r = |l: u8| 31u32 << l;
    match kind {
        Kind::X(l)
        | Kind::XSp(l)
        | Kind::W(l)
        | Kind::WSp(l)
        | Kind::XLr(l)
        | Kind::Fp(_, l)
        | Kind::VFp(l)
        | Kind::V(l) => r(l),
        Kind::List(_, l) => r(l),
        Kind::LaneList(l) => r(l) | (1 << 30) | (1 << 12) | (3 << 10),
        Kind::Elem(l, Idx::Hl) => r(l) | (1 << 11) | (1 << 21) | (31 << 16),
        Kind::Elem(l, Idx::Imm5) => r(l) | (31 << 16),
        Kind::Elem(l, Idx::Imm4) => r(l) | (15 << 11),
        Kind::UImm(l, w) | Kind::UHex(l, w) | Kind::OptLsl(l, w, _) => ((1u32 << w) - 1) << l,
        Kind::Bitmask(_) => 0x1fff << 10,
        Kind::Shift(..) => (3 << 22) | (63 << 10),
        Kind::ExtRm(_) => 31 << 16,
        Kind::Ext(_) => 63 << 10,
        Kind::Cond(l) => 15 << l,
        Kind::Br(l, w) => ((1u32 << w) - 1) << l,
        Kind::Adr => (3 << 29) | (0x7ffff << 5),
        Kind::TbBit(_) => 31 << 19,
        Kind::LslImm(_) => 0xfff << 10,
        Kind::Mem(m) => {
            31 << 5
                | match m {
                    MemKind::Base => 0,
                    MemKind::Uoff(_) => 0xfff << 10,
                    MemKind::Simm9 | MemKind::Pre9 | MemKind::Post9 => 0x1ff << 12,
                    MemKind::PairOff(_) | MemKind::PairPre(_) | MemKind::PairPost(_) => 0x7f << 15,
                    MemKind::RegOff(_) => (31 << 16) | (15 << 12),
                    MemKind::PostImm(_) => 0,
                    MemKind::PostReg => 31 << 16,
                }
        }
        Kind::ShlImm(_) | Kind::ShrImm(_) => 0x7f << 16,
        Kind::FImm(l) => 0xff << l,
        Kind::VFImm | Kind::Imm8Split | Kind::Imm64Bytes => (7 << 16) | (31 << 5),
        Kind::Barrier => 15 << 8,
        Kind::Prfop => 31,
        Kind::ExtIdx => 15 << 11,
    }
}

fn is_vectorish(k: Kind) -> bool {
    matches!(
        k,
        Kind::V(_) | Kind::VFp(_) | Kind::Elem(..) | Kind::List(..) | Kind::LaneList(_)
    )
}

/// True for slots whose shape comes from the variant (vectors, variant-width
/// scalars, elements, lists).
pub fn is_shaped(k: Kind) -> bool {
    is_vectorish(k)
}

impl Form {
    /// The bits no operand owns: `word & fixed_mask() == base | variant.bits` for a match.
    pub fn fixed_mask(&self) -> u32 {
        !self.kinds.iter().fold(0, |m, &k| m | bits_of(k))
    }

    /// The assembler mnemonic (the first word of the template).
    pub fn asm_mnemonic(&self) -> &'static str {
        let m = self.mnemonic.split(' ').next().unwrap_or(self.mnemonic);
        m.split('{').next().unwrap_or(m)
    }

    /// The shape of vector-ish operand number `vi` in `var`.
    pub(crate) fn shape(var: &Variant, vi: usize) -> Option<Shape> {
        if var.shape.len() == 1 {
            Some(var.shape[0])
        } else {
            var.shape.get(vi).copied()
        }
    }

    fn variant_matches(&self, var: &Variant, ops: &[Operand]) -> bool {
        let mut vi = 0;
        for (k, o) in self.kinds.iter().zip(ops) {
            if !is_vectorish(*k) {
                continue;
            }
            let sh = Self::shape(var, vi);
            vi += 1;
            let ok = match (sh, o) {
                (Some(Shape::A(a)), Operand::V(_, b))
                | (Some(Shape::A(a)), Operand::List(_, _, b)) => a == *b,
                (Some(Shape::E(e)), Operand::Elem(_, f, _)) => e == *f,
                (Some(Shape::F(e)), Operand::Fp(f, _)) => e == *f,
                _ => false,
            };
            if !ok {
                return false;
            }
        }
        true
    }

    /// Fill trailing defaults and normalize operands; errors on a wrong count.
    pub(crate) fn complete(
        &self,
        given: &[Operand],
    ) -> Result<[Operand; crate::MAX_OPS], EncodeError> {
        let mut out = [Operand::None; crate::MAX_OPS];
        if given.len() > self.kinds.len() {
            return Err(EncodeError::OperandCount {
                form: self.name,
                expected: self.kinds.len(),
                got: given.len(),
            });
        }
        for (i, k) in self.kinds.iter().enumerate() {
            out[i] = match (given.get(i), k) {
                (Some(o), _) => *o,
                (None, Kind::OptLsl(..)) => Operand::Imm(0),
                (None, Kind::Shift(..)) => Operand::Shift(ShiftKind::Lsl, 0),
                (None, Kind::XLr(_)) => Operand::Gpr(Gpr::X(30)),
                (None, Kind::Ext(true)) => Operand::Extend(Extend::Uxtx, 0),
                (None, Kind::Ext(false)) => Operand::Extend(Extend::Uxtw, 0),
                (None, _) => {
                    return Err(EncodeError::OperandCount {
                        form: self.name,
                        expected: self.kinds.len(),
                        got: given.len(),
                    })
                }
            };
        }
        Ok(out)
    }

    /// Encode operands (already completed) into a word. Labels must have been
    /// resolved to offsets.
    pub fn encode(&self, ops: &[Operand]) -> Result<u32, EncodeError> {
        let ops = &ops[..self.kinds.len().min(ops.len())];
        if ops.len() != self.kinds.len() {
            return Err(EncodeError::OperandCount {
                form: self.name,
                expected: self.kinds.len(),
                got: ops.len(),
            });
        }
        // Class errors first, so a W where an X belongs is named as such.
        for (i, (k, o)) in self.kinds.iter().zip(ops).enumerate() {
            class_check(self, i, *k, o)?;
        }
        let var = self
            .variants
            .iter()
            .find(|v| self.variant_matches(v, ops))
            .ok_or(EncodeError::Arrangement { form: self.name })?;
        let mut word = self.base | var.bits;
        let mut vi = 0;
        for (i, (k, o)) in self.kinds.iter().zip(ops).enumerate() {
            let sh = if is_vectorish(*k) {
                vi += 1;
                Self::shape(var, vi - 1)
            } else {
                None
            };
            word |= enc(self, i, *k, o, ops, var, sh)?;
        }
        row_checks(self, ops)?;
        Ok(word)
    }

    /// Decode `word` as this form, if it is one (re-encoding must give `word`).
    pub fn decode(&self, word: u32) -> Option<[Operand; crate::MAX_OPS]> {
        let fm = self.fixed_mask();
        for var in self.variants {
            if word & fm != (self.base | var.bits) & fm {
                continue;
            }
            let mut ops = [Operand::None; crate::MAX_OPS];
            let mut vi = 0;
            let mut ok = true;
            for (i, k) in self.kinds.iter().enumerate() {
                let sh = if is_vectorish(*k) {
                    vi += 1;
                    Self::shape(var, vi - 1)
                } else {
                    None
                };
                match dec(*k, word, sh, &ops[..i]) {
                    Some(o) => ops[i] = o,
                    None => {
                        ok = false;
                        break;
                    }
                }
            }
            if ok && self.encode(&ops[..self.kinds.len()]) == Ok(word) {
                return Some(ops);
            }
        }
        None
    }
}

fn class_err(form: &Form, slot: usize, want: &'static str) -> EncodeError {
    EncodeError::RegisterClass {
        form: form.name,
        slot,
        expected: want,
    }
}

fn class_check(form: &Form, slot: usize, k: Kind, o: &Operand) -> Result<(), EncodeError> {
    let ok = match (k, o) {
        (Kind::X(_), Operand::Gpr(g)) => matches!(g, Gpr::X(_) | Gpr::Xzr),
        (Kind::XLr(_), Operand::Gpr(g)) => matches!(g, Gpr::X(_) | Gpr::Xzr),
        (Kind::XSp(_), Operand::Gpr(g)) => matches!(g, Gpr::X(_) | Gpr::Sp),
        (Kind::W(_), Operand::Gpr(g)) => matches!(g, Gpr::W(_) | Gpr::Wzr),
        (Kind::WSp(_), Operand::Gpr(g)) => matches!(g, Gpr::W(_) | Gpr::Wsp),
        (Kind::Fp(w, _), Operand::Fp(v, _)) => w == *v,
        (Kind::VFp(_), Operand::Fp(..)) => true,
        (Kind::V(_), Operand::V(..)) => true,
        (Kind::Elem(..) | Kind::LaneList(_), Operand::Elem(..)) => true,
        (Kind::List(c, _), Operand::List(_, n, _)) => c == *n,
        (Kind::ExtRm(sf), Operand::Gpr(g)) => {
            matches!(g, Gpr::X(_) | Gpr::Xzr | Gpr::W(_) | Gpr::Wzr) && (sf || !g.is_64())
        }
        (Kind::Shift(..), Operand::Shift(..)) => true,
        (Kind::Ext(_), Operand::Extend(..)) => true,
        (Kind::Cond(_), Operand::Cond(_)) => true,
        (Kind::Br(..) | Kind::Adr, Operand::Target(_)) => true,
        (Kind::Mem(_), Operand::Mem(m)) => matches!(m.base, Gpr::X(_) | Gpr::Sp),
        (Kind::FImm(_) | Kind::VFImm, Operand::FImm(_)) => true,
        (
            Kind::UImm(..)
            | Kind::UHex(..)
            | Kind::OptLsl(..)
            | Kind::Bitmask(_)
            | Kind::TbBit(_)
            | Kind::LslImm(_)
            | Kind::ShlImm(_)
            | Kind::ShrImm(_)
            | Kind::Imm8Split
            | Kind::Imm64Bytes
            | Kind::Barrier
            | Kind::Prfop
            | Kind::ExtIdx,
            Operand::Imm(_),
        ) => true,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(class_err(form, slot, kind_name(k)))
    }
}

/// A short human name for what a slot accepts (used in errors).
pub fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::X(_) | Kind::XLr(_) => "x register or xzr",
        Kind::XSp(_) => "x register or sp",
        Kind::W(_) => "w register or wzr",
        Kind::WSp(_) => "w register or wsp",
        Kind::Fp(FpWidth::B, _) => "b register",
        Kind::Fp(FpWidth::H, _) => "h register",
        Kind::Fp(FpWidth::S, _) => "s register",
        Kind::Fp(FpWidth::D, _) => "d register",
        Kind::Fp(FpWidth::Q, _) => "q register",
        Kind::VFp(_) => "scalar SIMD&FP register",
        Kind::V(_) => "vector register with arrangement",
        Kind::Elem(..) => "vector element",
        Kind::LaneList(_) => "one-register lane list",
        Kind::List(..) => "register list of the right length",
        Kind::ExtRm(_) => "w or x register",
        Kind::Shift(..) => "shift",
        Kind::Ext(_) => "extend",
        Kind::Cond(_) => "condition",
        Kind::Br(..) | Kind::Adr => "branch target",
        Kind::Mem(_) => "memory operand with x or sp base",
        Kind::FImm(_) | Kind::VFImm => "floating-point immediate",
        _ => "immediate",
    }
}

fn range(form: &Form, slot: usize, v: i64, lo: i64, hi: i64) -> Result<u32, EncodeError> {
    if v < lo || v > hi {
        Err(EncodeError::ImmOutOfRange {
            form: form.name,
            slot,
            value: v,
            min: lo,
            max: hi,
        })
    } else {
        Ok(v as u32)
    }
}

fn misaligned(form: &Form, slot: usize, v: i64, scale: u32) -> Result<(), EncodeError> {
    if v & ((1i64 << scale) - 1) != 0 {
        Err(EncodeError::Misaligned {
            form: form.name,
            slot,
            value: v,
            align: 1 << scale,
        })
    } else {
        Ok(())
    }
}

fn simm(form: &Form, slot: usize, v: i64, width: u32, scale: u32) -> Result<u32, EncodeError> {
    misaligned(form, slot, v, scale)?;
    let lim = 1i64 << (width - 1);
    range(form, slot, v, -lim << scale, (lim - 1) << scale)?;
    Ok(((v >> scale) as u32) & ((1u32 << width) - 1))
}

fn sext(v: u32, width: u32) -> i64 {
    ((v as i64) << (64 - width)) >> (64 - width)
}

fn lane_max(e: Elem) -> i64 {
    match e {
        Elem::B => 15,
        Elem::H => 7,
        Elem::S | Elem::B4 | Elem::H2 => 3,
        Elem::D => 1,
    }
}

/// The element size in bits of vector operand `vi` in `var` (8 if not a vector).
fn esize_of(var: &Variant, vi: u8) -> u32 {
    match Form::shape(var, vi as usize) {
        Some(Shape::A(a)) => a.esize(),
        _ => 8,
    }
}

/// Encode a logical immediate (N:immr:imms, 13 bits) or `None`.
pub fn encode_bitmask(v: u64, is64: bool) -> Option<u32> {
    let v = if is64 {
        v
    } else {
        if v >> 32 != 0 {
            return None;
        }
        v | (v << 32)
    };
    if v == 0 || v == !0 {
        return None;
    }
    let mut size = 64u32;
    while size > 2 {
        let half = size / 2;
        let m = (1u64 << half) - 1;
        if v & m != (v >> half) & m {
            break;
        }
        size = half;
    }
    let mask = if size == 64 { !0 } else { (1u64 << size) - 1 };
    let elt = v & mask;
    let ones = elt.count_ones();
    let low = if ones == 64 { !0 } else { (1u64 << ones) - 1 };
    let rotl = |x: u64, r: u32| {
        if r == 0 {
            x
        } else {
            ((x << r) | (x >> (size - r))) & mask
        }
    };
    let r = (0..size).find(|&r| rotl(elt, r) == low)?;
    let n = (size == 64) as u32;
    let imms = ((!(size - 1) << 1) & 0x3f) | (ones - 1);
    Some(n << 12 | r << 6 | imms)
}

/// Decode a logical immediate field (N:immr:imms) into its value.
pub fn decode_bitmask(field: u32, is64: bool) -> Option<u64> {
    let n = (field >> 12) & 1;
    let immr = (field >> 6) & 63;
    let imms = field & 63;
    let comb = (n << 6) | (!imms & 63);
    if comb == 0 {
        return None;
    }
    let len = 31 - comb.leading_zeros();
    if len < 1 || (!is64 && n == 1) {
        return None;
    }
    let size = 1u32 << len;
    let levels = size - 1;
    let s = imms & levels;
    let r = immr & levels;
    if s == levels {
        return None;
    }
    let mask = if size == 64 {
        !0u64
    } else {
        (1u64 << size) - 1
    };
    let low = (1u64 << (s + 1)) - 1;
    let elt = if r == 0 {
        low
    } else {
        ((low >> r) | (low << (size - r))) & mask
    };
    let mut v = 0u64;
    let mut i = 0;
    while i < 64 {
        v |= elt << i;
        i += size;
    }
    Some(if is64 { v } else { v & 0xffff_ffff })
}

fn split8(v: u32) -> u32 {
    ((v >> 5) & 7) << 16 | (v & 31) << 5
}
fn unsplit8(word: u32) -> u32 {
    ((word >> 16) & 7) << 5 | ((word >> 5) & 31)
}

fn enc(
    form: &Form,
    slot: usize,
    k: Kind,
    o: &Operand,
    ops: &[Operand],
    var: &Variant,
    sh: Option<Shape>,
) -> Result<u32, EncodeError> {
    let reg = |n: u8, l: u8| (n as u32 & 31) << l;
    Ok(match (k, *o) {
        (Kind::X(l) | Kind::XSp(l) | Kind::W(l) | Kind::WSp(l) | Kind::XLr(l), Operand::Gpr(g)) => {
            reg(g.num(), l)
        }
        (Kind::ExtRm(_), Operand::Gpr(g)) => {
            if let Operand::Extend(e, _) = ops[slot + 1] {
                let want64 = matches!(e, Extend::Uxtx | Extend::Sxtx);
                if form.kinds[slot] == Kind::ExtRm(true) && want64 != g.is_64() {
                    return Err(class_err(
                        form,
                        slot,
                        if want64 {
                            "x register for uxtx/sxtx"
                        } else {
                            "w register"
                        },
                    ));
                }
            }
            reg(g.num(), 16)
        }
        (Kind::Fp(_, l) | Kind::VFp(l), Operand::Fp(_, n)) => reg(n, l),
        (Kind::V(l), Operand::V(n, _)) => reg(range(form, slot, n as i64, 0, 31)? as u8, l),
        (Kind::List(_, l), Operand::List(n, _, _)) => {
            reg(range(form, slot, n as i64, 0, 31)? as u8, l)
        }
        (Kind::Elem(l, idx), Operand::Elem(n, e, i)) => {
            let _ = sh;
            let i = range(form, slot, i as i64, 0, lane_max(e))?;
            let r = reg(n, l);
            match idx {
                Idx::Hl => match e {
                    Elem::D => r | (i << 11),
                    Elem::S | Elem::B4 | Elem::H2 => r | ((i >> 1) << 11) | ((i & 1) << 21),
                    _ => return Err(EncodeError::Arrangement { form: form.name }),
                },
                Idx::Imm5 => {
                    let lg = e.log2_bytes();
                    r | (((i << 1 | 1) << lg) << 16)
                }
                Idx::Imm4 => r | ((i << e.log2_bytes()) << 11),
            }
        }
        (Kind::LaneList(l), Operand::Elem(n, e, i)) => {
            let i = range(form, slot, i as i64, 0, lane_max(e))?;
            let (q, s, size) = match e {
                Elem::B => (i >> 3, (i >> 2) & 1, i & 3),
                Elem::H => (i >> 2, (i >> 1) & 1, (i & 1) << 1),
                Elem::S => (i >> 1, i & 1, 0),
                Elem::D => (i, 0, 1),
                _ => return Err(EncodeError::Arrangement { form: form.name }),
            };
            reg(n, l) | q << 30 | s << 12 | size << 10
        }
        (Kind::UImm(l, w) | Kind::UHex(l, w), Operand::Imm(v)) => {
            range(form, slot, v, 0, (1i64 << w) - 1)? << l
        }
        (Kind::OptLsl(l, w, step), Operand::Imm(v)) => {
            misaligned_step(form, slot, v, step as i64)?;
            range(form, slot, v / step as i64, 0, (1i64 << w) - 1)? << l
        }
        (Kind::Bitmask(is64), Operand::Imm(v)) => {
            let f = encode_bitmask(v as u64, is64).ok_or(EncodeError::NotABitmask {
                form: form.name,
                value: v as u64,
            })?;
            f << 10
        }
        (Kind::Shift(sf, rorok), Operand::Shift(t, n)) => {
            if t == ShiftKind::Ror && !rorok {
                return Err(EncodeError::BadShift { form: form.name });
            }
            let n = range(form, slot, n as i64, 0, if sf { 63 } else { 31 })?;
            (t as u32) << 22 | n << 10
        }
        (Kind::Ext(_), Operand::Extend(e, n)) => {
            if e == Extend::Lsl {
                return Err(EncodeError::BadShift { form: form.name });
            }
            let n = range(form, slot, n as i64, 0, 4)?;
            e.bits() << 13 | n << 10
        }
        (Kind::Cond(l), Operand::Cond(c)) => c.bits() << l,
        (Kind::Br(l, w), Operand::Target(t)) => match t {
            Target::Offset(v) => simm(form, slot, v, w as u32, 2)? << l,
            Target::Label(_) => return Err(EncodeError::UnresolvedLabel),
        },
        (Kind::Adr, Operand::Target(t)) => match t {
            Target::Offset(v) => {
                let f = simm(form, slot, v, 21, 0)?;
                (f & 3) << 29 | (f >> 2) << 5
            }
            Target::Label(_) => return Err(EncodeError::UnresolvedLabel),
        },
        (Kind::TbBit(x), Operand::Imm(v)) => {
            if x {
                (range(form, slot, v, 32, 63)? - 32) << 19
            } else {
                range(form, slot, v, 0, 31)? << 19
            }
        }
        (Kind::LslImm(x), Operand::Imm(v)) => {
            let w = if x { 64 } else { 32 };
            let s = range(form, slot, v, 1, w - 1)?;
            let w = w as u32;
            ((w - s) % w) << 16 | (w - 1 - s) << 10
        }
        (Kind::ShlImm(vi), Operand::Imm(v)) => {
            let es = esize_of(var, vi);
            let s = range(form, slot, v, 0, es as i64 - 1)?;
            (es + s) << 16
        }
        (Kind::ShrImm(vi), Operand::Imm(v)) => {
            let es = esize_of(var, vi);
            let s = range(form, slot, v, 1, es as i64)?;
            (2 * es - s) << 16
        }
        (Kind::FImm(l), Operand::FImm(i)) => (i as u32) << l,
        (Kind::VFImm, Operand::FImm(i)) => split8(i as u32),
        (Kind::Imm8Split, Operand::Imm(v)) => split8(range(form, slot, v, 0, 255)?),
        (Kind::Imm64Bytes, Operand::Imm(v)) => {
            let mut f = 0;
            for b in 0..8 {
                match (v as u64 >> (8 * b)) & 0xff {
                    0 => {}
                    0xff => f |= 1 << b,
                    _ => {
                        return Err(EncodeError::NotAByteMask {
                            form: form.name,
                            value: v as u64,
                        })
                    }
                }
            }
            split8(f)
        }
        (Kind::Barrier, Operand::Imm(v)) => {
            if !BARRIERS.iter().any(|b| b.0 as i64 == v) {
                return Err(EncodeError::ImmOutOfRange {
                    form: form.name,
                    slot,
                    value: v,
                    min: 1,
                    max: 15,
                });
            }
            (v as u32) << 8
        }
        (Kind::Prfop, Operand::Imm(v)) => range(form, slot, v, 0, 31)?,
        (Kind::ExtIdx, Operand::Imm(v)) => {
            let max = match sh_of_first(var) {
                Some(Shape::A(Arr::B8)) => 7,
                _ => 15,
            };
            range(form, slot, v, 0, max)? << 11
        }
        (Kind::Mem(mk), Operand::Mem(m)) => enc_mem(form, slot, mk, m, ops, var)?,
        _ => return Err(class_err(form, slot, kind_name(k))),
    })
}

fn sh_of_first(var: &Variant) -> Option<Shape> {
    Form::shape(var, 0)
}

fn misaligned_step(form: &Form, slot: usize, v: i64, step: i64) -> Result<(), EncodeError> {
    if step > 1 && v % step != 0 {
        return Err(EncodeError::Misaligned {
            form: form.name,
            slot,
            value: v,
            align: step as u32,
        });
    }
    Ok(())
}

fn enc_mem(
    form: &Form,
    slot: usize,
    mk: MemKind,
    m: Mem,
    ops: &[Operand],
    var: &Variant,
) -> Result<u32, EncodeError> {
    let base = (m.base.num() as u32) << 5;
    let mode_err = || EncodeError::AddressingMode { form: form.name };
    let f = match (mk, m.addr) {
        (MemKind::Base, Addr::Offset(0)) => 0,
        (MemKind::Uoff(s), Addr::Offset(v)) => {
            misaligned(form, slot, v, s as u32)?;
            range(form, slot, v, 0, 4095 << s)? >> s << 10
        }
        (MemKind::Simm9, Addr::Offset(v))
        | (MemKind::Pre9, Addr::PreIndex(v))
        | (MemKind::Post9, Addr::PostIndex(v)) => simm(form, slot, v, 9, 0)? << 12,
        (MemKind::PairOff(s), Addr::Offset(v))
        | (MemKind::PairPre(s), Addr::PreIndex(v))
        | (MemKind::PairPost(s), Addr::PostIndex(v)) => simm(form, slot, v, 7, s as u32)? << 15,
        (MemKind::RegOff(_), Addr::Reg(rm, e, shifted)) => {
            let ok = match e {
                Extend::Lsl | Extend::Sxtx => matches!(rm, Gpr::X(_) | Gpr::Xzr),
                Extend::Uxtw | Extend::Sxtw => matches!(rm, Gpr::W(_) | Gpr::Wzr),
                _ => false,
            };
            if !ok {
                return Err(mode_err());
            }
            (rm.num() as u32) << 16 | e.bits() << 13 | (shifted as u32) << 12
        }
        (MemKind::PostImm(list), Addr::PostIndex(v)) => {
            let want = match ops[0] {
                Operand::List(_, n, a) if list => n as i64 * a.bytes() as i64,
                Operand::List(_, n, a) => n as i64 * (a.esize() / 8) as i64,
                Operand::Elem(_, e, _) => 1i64 << e.log2_bytes(),
                _ => 0,
            };
            let _ = var;
            range(form, slot, v, want, want)?;
            31 << 16
        }
        (MemKind::PostReg, Addr::PostReg(rm)) => match rm {
            Gpr::X(n) => (n as u32) << 16,
            _ => return Err(class_err(form, slot, "x register (not xzr) as post-index")),
        },
        _ => return Err(mode_err()),
    };
    Ok(base | f)
}

/// The DSB options with names, in CRm order (llvm prints the names).
pub const BARRIERS: [(u8, &str); 12] = [
    (1, "oshld"),
    (2, "oshst"),
    (3, "osh"),
    (5, "nshld"),
    (6, "nshst"),
    (7, "nsh"),
    (9, "ishld"),
    (10, "ishst"),
    (11, "ish"),
    (13, "ld"),
    (14, "st"),
    (15, "sy"),
];

fn row_checks(form: &Form, ops: &[Operand]) -> Result<(), EncodeError> {
    let m = form.asm_mnemonic();
    // LDP with Rt == Rt2 is CONSTRAINED UNPREDICTABLE.
    if m == "ldp" && ops[0] == ops[1] {
        return Err(EncodeError::LdpSameRegisters { form: form.name });
    }
    // Writeback to a base that is also a general-register transfer register.
    if let Some(Operand::Mem(mem)) = ops.iter().find(|o| matches!(o, Operand::Mem(_))) {
        let wb = matches!(mem.addr, Addr::PreIndex(_) | Addr::PostIndex(_));
        if wb && mem.base != Gpr::Sp {
            for o in &ops[..ops.len() - 1] {
                if let Operand::Gpr(g) = o {
                    if g.num() == mem.base.num() && !g.is_zr() {
                        return Err(EncodeError::WritebackOverlap { form: form.name });
                    }
                }
            }
        }
    }
    Ok(())
}

/// Register `n` in the class of `r31` (the spelling register 31 takes).
fn gx(n: u32, r31: Gpr) -> Gpr {
    let zr = r31;
    if n == 31 {
        zr
    } else if zr.is_64() {
        Gpr::X(n as u8)
    } else {
        Gpr::W(n as u8)
    }
}

fn dec(k: Kind, word: u32, sh: Option<Shape>, prev: &[Operand]) -> Option<Operand> {
    let f = |l: u8, w: u8| (word >> l) & ((1u32 << w) - 1);
    let r = |l: u8| f(l, 5);
    Some(match k {
        Kind::X(l) | Kind::XLr(l) => Operand::Gpr(gx(r(l), Gpr::Xzr)),
        Kind::XSp(l) => Operand::Gpr(gx(r(l), Gpr::Sp)),
        Kind::W(l) => Operand::Gpr(gx(r(l), Gpr::Wzr)),
        Kind::WSp(l) => Operand::Gpr(gx(r(l), Gpr::Wsp)),
        Kind::ExtRm(_) => {
            let opt = f(13, 3);
            let x64 = matches!(opt, 3 | 7) && matches!(k, Kind::ExtRm(true));
            Operand::Gpr(gx(r(16), if x64 { Gpr::Xzr } else { Gpr::Wzr }))
        }
        Kind::Fp(w, l) => Operand::Fp(w, r(l) as u8),
        Kind::VFp(l) => match sh? {
            Shape::F(w) => Operand::Fp(w, r(l) as u8),
            _ => return None,
        },
        Kind::V(l) => match sh? {
            Shape::A(a) => Operand::V(r(l) as u8, a),
            _ => return None,
        },
        Kind::List(c, l) => match sh? {
            Shape::A(a) => Operand::List(r(l) as u8, c, a),
            _ => return None,
        },
        Kind::Elem(l, idx) => {
            let e = match sh? {
                Shape::E(e) => e,
                _ => return None,
            };
            let n = r(l) as u8;
            let i = match idx {
                Idx::Hl => match e {
                    Elem::D => f(11, 1),
                    _ => f(11, 1) << 1 | f(21, 1),
                },
                Idx::Imm5 => f(16, 5) >> (e.log2_bytes() + 1),
                Idx::Imm4 => f(11, 4) >> e.log2_bytes(),
            };
            Operand::Elem(n, e, i as u8)
        }
        Kind::LaneList(l) => {
            let e = match sh? {
                Shape::E(e) => e,
                _ => return None,
            };
            let (q, s, size) = (f(30, 1), f(12, 1), f(10, 2));
            let i = match e {
                Elem::B => q << 3 | s << 2 | size,
                Elem::H => q << 2 | s << 1 | size >> 1,
                Elem::S => q << 1 | s,
                _ => q,
            };
            Operand::Elem(r(l) as u8, e, i as u8)
        }
        Kind::UImm(l, w) | Kind::UHex(l, w) => Operand::Imm(f(l, w) as i64),
        Kind::OptLsl(l, w, s) => Operand::Imm(f(l, w) as i64 * s as i64),
        Kind::Bitmask(x) => Operand::Imm(decode_bitmask(f(10, 13), x)? as i64),
        Kind::Shift(..) => Operand::Shift(
            [
                ShiftKind::Lsl,
                ShiftKind::Lsr,
                ShiftKind::Asr,
                ShiftKind::Ror,
            ][f(22, 2) as usize],
            f(10, 6) as u8,
        ),
        Kind::Ext(_) => Operand::Extend(Extend::from_bits(f(13, 3)), f(10, 3) as u8),
        Kind::Cond(l) => Operand::Cond(Cond::from_bits(f(l, 4))),
        Kind::Br(l, w) => Operand::Target(Target::Offset(sext(f(l, w), w as u32) * 4)),
        Kind::Adr => Operand::Target(Target::Offset(sext(f(5, 19) << 2 | f(29, 2), 21))),
        Kind::TbBit(x) => Operand::Imm(f(19, 5) as i64 + if x { 32 } else { 0 }),
        Kind::LslImm(x) => {
            let w = if x { 64 } else { 32 };
            let imms = f(10, 6) as i64;
            Operand::Imm(w - 1 - imms)
        }
        Kind::ShlImm(_) | Kind::ShrImm(_) => {
            let es = match sh_from_prev(k, prev)? {
                Shape::A(a) => a.esize() as i64,
                _ => return None,
            };
            let v = f(16, 7) as i64;
            Operand::Imm(if matches!(k, Kind::ShlImm(_)) {
                v - es
            } else {
                2 * es - v
            })
        }
        Kind::FImm(l) => Operand::FImm(f(l, 8) as u8),
        Kind::VFImm => Operand::FImm(unsplit8(word) as u8),
        Kind::Imm8Split => Operand::Imm(unsplit8(word) as i64),
        Kind::Imm64Bytes => {
            let b = unsplit8(word);
            let mut v = 0u64;
            for i in 0..8 {
                if b >> i & 1 == 1 {
                    v |= 0xff << (8 * i);
                }
            }
            Operand::Imm(v as i64)
        }
        Kind::Barrier => Operand::Imm(f(8, 4) as i64),
        Kind::Prfop => Operand::Imm(f(0, 5) as i64),
        Kind::ExtIdx => Operand::Imm(f(11, 4) as i64),
        Kind::Mem(mk) => {
            let base = gx(r(5), Gpr::Sp);
            let addr = match mk {
                MemKind::Base => Addr::Offset(0),
                MemKind::Uoff(s) => Addr::Offset((f(10, 12) as i64) << s),
                MemKind::Simm9 => Addr::Offset(sext(f(12, 9), 9)),
                MemKind::Pre9 => Addr::PreIndex(sext(f(12, 9), 9)),
                MemKind::Post9 => Addr::PostIndex(sext(f(12, 9), 9)),
                MemKind::PairOff(s) => Addr::Offset(sext(f(15, 7), 7) << s),
                MemKind::PairPre(s) => Addr::PreIndex(sext(f(15, 7), 7) << s),
                MemKind::PairPost(s) => Addr::PostIndex(sext(f(15, 7), 7) << s),
                MemKind::RegOff(_) => {
                    let opt = f(13, 3);
                    let e = match opt {
                        2 => Extend::Uxtw,
                        3 => Extend::Lsl,
                        6 => Extend::Sxtw,
                        7 => Extend::Sxtx,
                        _ => return None,
                    };
                    let rm = if opt & 1 == 1 {
                        gx(r(16), Gpr::Xzr)
                    } else {
                        gx(r(16), Gpr::Wzr)
                    };
                    Addr::Reg(rm, e, f(12, 1) == 1)
                }
                MemKind::PostImm(list) => match prev.first()? {
                    Operand::List(_, n, a) if list => Addr::PostIndex(*n as i64 * a.bytes() as i64),
                    Operand::List(_, n, a) => Addr::PostIndex(*n as i64 * (a.esize() / 8) as i64),
                    Operand::Elem(_, e, _) => Addr::PostIndex(1i64 << e.log2_bytes()),
                    _ => return None,
                },
                MemKind::PostReg => {
                    if r(16) == 31 {
                        return None;
                    }
                    Addr::PostReg(Gpr::X(r(16) as u8))
                }
            };
            Operand::Mem(Mem { base, addr })
        }
    })
}

/// The shape a shift-immediate slot refers to, recovered from the decoded
/// vector operands before it.
fn sh_from_prev(k: Kind, prev: &[Operand]) -> Option<Shape> {
    let vi = match k {
        Kind::ShlImm(v) | Kind::ShrImm(v) => v as usize,
        _ => return None,
    };
    match prev
        .iter()
        .filter(|o| matches!(o, Operand::V(..)))
        .nth(vi)?
    {
        Operand::V(_, a) => Some(Shape::A(*a)),
        _ => None,
    }
}
