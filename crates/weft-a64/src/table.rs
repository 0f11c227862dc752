//! The table of forms: one row per encoding class at one register width or
//! arrangement family. Each row is `OP = "mnemonic", [operand kinds], base
//! bits, arrangement variants, feature, alias;`. The encoder, decoder, text
//! printer, `cargo xtask check-encodings` and the golden test all read this
//! table and nothing else; adding a form is adding a row
//! (docs/adding-an-a64-form.md).
//!
//! Sources: the Arm A64 ISA (DDI 0602) encoding diagrams; base bits were
//! taken from `llvm-mc -show-encoding` with all fields zero and are proven
//! against llvm-mc 14 by `cargo xtask check-encodings`.

use crate::form::Alias;
use crate::form::Kind::*;
use crate::form::{Feature, Form, Idx, MemKind, Shape, Variant, NOV};
use crate::operand::{Arr, Elem, FpWidth};

use Arr::*;
use Shape::{A, E, F};

const Q: u32 = 1 << 30;
const SZ: u32 = 1 << 22; // size<0> / sz at 22
const S1: u32 = 1 << 23; // size<1> at 23

macro_rules! v {
    ($bits:expr; $($s:expr),+) => { Variant { bits: $bits, shape: &[$($s),+] } };
}

/// 8B 16B 4H 8H 2S 4S, size at 22..=23.
const V_BHS: &[Variant] = &[
    v!(0; A(B8)),
    v!(Q; A(B16)),
    v!(SZ; A(H4)),
    v!(Q | SZ; A(H8)),
    v!(S1; A(S2)),
    v!(Q | S1; A(S4)),
];
/// 8B 16B 4H 8H 2S 4S 2D, size at 22..=23.
const V_BHSD: &[Variant] = &[
    v!(0; A(B8)),
    v!(Q; A(B16)),
    v!(SZ; A(H4)),
    v!(Q | SZ; A(H8)),
    v!(S1; A(S2)),
    v!(Q | S1; A(S4)),
    v!(Q | S1 | SZ; A(D2)),
];
/// 8B 16B.
const V_B: &[Variant] = &[v!(0; A(B8)), v!(Q; A(B16))];
/// Floating point 2S 4S 2D, sz at 22.
const V_F: &[Variant] = &[v!(0; A(S2)), v!(Q; A(S4)), v!(Q | SZ; A(D2))];
/// Half precision 4H 8H.
const V_FH: &[Variant] = &[v!(0; A(H4)), v!(Q; A(H8))];
/// Load/store multiple structures: size at 10..=11.
const V_LS: &[Variant] = &[
    v!(0; A(B8)),
    v!(Q; A(B16)),
    v!(1 << 10; A(H4)),
    v!(Q | 1 << 10; A(H8)),
    v!(2 << 10; A(S2)),
    v!(Q | 2 << 10; A(S4)),
    v!(3 << 10; A(D1)),
    v!(Q | 3 << 10; A(D2)),
];
/// Shift by immediate: the size lives in immh, only Q varies.
const V_SHQ: &[Variant] = &[
    v!(0; A(B8)),
    v!(Q; A(B16)),
    v!(0; A(H4)),
    v!(Q; A(H8)),
    v!(0; A(S2)),
    v!(Q; A(S4)),
    v!(Q; A(D2)),
];
/// By element, single/double: Vd, Vn, Vm.T[i].
const V_FE: &[Variant] = &[
    v!(0; A(S2), A(S2), E(Elem::S)),
    v!(Q; A(S4), A(S4), E(Elem::S)),
    v!(Q | SZ; A(D2), A(D2), E(Elem::D)),
];
/// DUP element: Vd.T, Vn.Ts[i] (imm5 holds the size).
const V_DUPE: &[Variant] = &[
    v!(0; A(B8), E(Elem::B)),
    v!(Q; A(B16), E(Elem::B)),
    v!(0; A(H4), E(Elem::H)),
    v!(Q; A(H8), E(Elem::H)),
    v!(0; A(S2), E(Elem::S)),
    v!(Q; A(S4), E(Elem::S)),
    v!(Q; A(D2), E(Elem::D)),
];
/// DUP general from W: imm5 size marker is part of the variant.
const V_DUPW: &[Variant] = &[
    v!(1 << 16; A(B8)),
    v!(Q | 1 << 16; A(B16)),
    v!(2 << 16; A(H4)),
    v!(Q | 2 << 16; A(H8)),
    v!(4 << 16; A(S2)),
    v!(Q | 4 << 16; A(S4)),
];
const V_EBHS: &[Variant] = &[v!(0; E(Elem::B)), v!(0; E(Elem::H)), v!(0; E(Elem::S))];
const V_EBHSD: &[Variant] = &[
    v!(0; E(Elem::B)),
    v!(0; E(Elem::H)),
    v!(0; E(Elem::S)),
    v!(0; E(Elem::D)),
];
const V_DUPS: &[Variant] = &[
    v!(0; F(FpWidth::B), E(Elem::B)),
    v!(0; F(FpWidth::H), E(Elem::H)),
    v!(0; F(FpWidth::S), E(Elem::S)),
    v!(0; F(FpWidth::D), E(Elem::D)),
];
/// Widening long: 8H<-8B, 4S<-4H, 2D<-2S (and the "2" halves).
const V_LONG: &[Variant] = &[
    v!(0; A(H8), A(B8), A(B8)),
    v!(SZ; A(S4), A(H4), A(H4)),
    v!(S1; A(D2), A(S2), A(S2)),
];
const V_LONG2: &[Variant] = &[
    v!(0; A(H8), A(B16), A(B16)),
    v!(SZ; A(S4), A(H8), A(H8)),
    v!(S1; A(D2), A(S4), A(S4)),
];
/// Shift-long by immediate (size in immh).
const V_SHLL: &[Variant] = &[
    v!(0; A(H8), A(B8)),
    v!(0; A(S4), A(H4)),
    v!(0; A(D2), A(S2)),
];
const V_SHLL2: &[Variant] = &[
    v!(0; A(H8), A(B16)),
    v!(0; A(S4), A(H8)),
    v!(0; A(D2), A(S4)),
];
/// Narrowing: 8B<-8H, 4H<-4S, 2S<-2D.
const V_NARROW: &[Variant] = &[
    v!(0; A(B8), A(H8)),
    v!(SZ; A(H4), A(S4)),
    v!(S1; A(S2), A(D2)),
];
const V_NARROW2: &[Variant] = &[
    v!(0; A(B16), A(H8)),
    v!(SZ; A(H8), A(S4)),
    v!(S1; A(S4), A(D2)),
];
const V_SHRN: &[Variant] = &[
    v!(0; A(B8), A(H8)),
    v!(0; A(H4), A(S4)),
    v!(0; A(S2), A(D2)),
];
/// Pairwise long: 4H<-8B ... 2D<-4S.
const V_ADDLP: &[Variant] = &[
    v!(0; A(H4), A(B8)),
    v!(Q; A(H8), A(B16)),
    v!(SZ; A(S2), A(H4)),
    v!(Q | SZ; A(S4), A(H8)),
    v!(S1; A(D1), A(S2)),
    v!(Q | S1; A(D2), A(S4)),
];
/// Across lanes.
const V_ADDV: &[Variant] = &[
    v!(0; F(FpWidth::B), A(B8)),
    v!(Q; F(FpWidth::B), A(B16)),
    v!(SZ; F(FpWidth::H), A(H4)),
    v!(Q | SZ; F(FpWidth::H), A(H8)),
    v!(Q | S1; F(FpWidth::S), A(S4)),
];
const V_ADDLV: &[Variant] = &[
    v!(0; F(FpWidth::H), A(B8)),
    v!(Q; F(FpWidth::H), A(B16)),
    v!(SZ; F(FpWidth::S), A(H4)),
    v!(Q | SZ; F(FpWidth::S), A(H8)),
    v!(Q | S1; F(FpWidth::D), A(S4)),
];
const V_FCVTL: &[Variant] = &[v!(0; A(S4), A(H4)), v!(SZ; A(D2), A(S2))];
const V_FCVTL2: &[Variant] = &[v!(0; A(S4), A(H8)), v!(SZ; A(D2), A(S4))];
const V_FCVTN: &[Variant] = &[v!(0; A(H4), A(S4)), v!(SZ; A(S2), A(D2))];
const V_FCVTN2: &[Variant] = &[v!(0; A(H8), A(S4)), v!(SZ; A(S4), A(D2))];
const V_DOT: &[Variant] = &[v!(0; A(S2), A(B8), A(B8)), v!(Q; A(S4), A(B16), A(B16))];
const V_DOTE: &[Variant] = &[
    v!(0; A(S2), A(B8), E(Elem::B4)),
    v!(Q; A(S4), A(B16), E(Elem::B4)),
];
const V_BFDOT: &[Variant] = &[v!(0; A(S2), A(H4), A(H4)), v!(Q; A(S4), A(H8), A(H8))];
const V_BFDOTE: &[Variant] = &[
    v!(0; A(S2), A(H4), E(Elem::H2)),
    v!(Q; A(S4), A(H8), E(Elem::H2)),
];
const V_MMLA: &[Variant] = &[v!(0; A(S4), A(B16), A(B16))];
const V_BFMMLA: &[Variant] = &[v!(0; A(S4), A(H8), A(H8))];
const V_TBL: &[Variant] = &[v!(0; A(B8), A(B16), A(B8)), v!(Q; A(B16), A(B16), A(B16))];
const V_SD: &[Variant] = &[v!(0; F(FpWidth::S)), v!(SZ; F(FpWidth::D))];
const V_4S: &[Variant] = &[v!(0; A(S4))];
const V_2D: &[Variant] = &[v!(0; A(D2))];
const V_FIMM: &[Variant] = &[v!(0; A(S2)), v!(Q; A(S4)), v!(Q | 1 << 29; A(D2))];
/// Single-structure lanes: opcode bits per element size.
const V_LANE: &[Variant] = &[
    v!(0; E(Elem::B)),
    v!(0x4000; E(Elem::H)),
    v!(0x8000; E(Elem::S)),
    v!(0x8000; E(Elem::D)),
];
const V_EBH: &[Variant] = &[v!(0; E(Elem::B)), v!(0; E(Elem::H))];
/// Pairwise scalar: S <- 2S, D <- 2D.
const V_FADDP_S: &[Variant] = &[v!(0; F(FpWidth::S), A(S2)), v!(SZ; F(FpWidth::D), A(D2))];
const V_HS: &[Variant] = &[v!(0; A(S2)), v!(Q; A(S4))];

macro_rules! forms {
    ($( $op:ident = $mn:literal, [$($k:expr),* $(,)?], $base:literal, $vars:expr, $feat:ident, $alias:ident; )*) => {
        /// Every form in the table. `Op as usize` indexes [`FORMS`].
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Op {
            $( #[doc = concat!("`", $mn, "`: row `", stringify!($op), "` of the table.")] $op, )*
        }
        /// The table: one [`Form`] per [`Op`], in `Op` order.
        pub static FORMS: &[Form] = &[
            $( Form {
                op: Op::$op,
                name: stringify!($op),
                mnemonic: $mn,
                kinds: &[$($k),*],
                base: $base,
                variants: $vars,
                feature: Feature::$feat,
                alias: Alias::$alias,
            }, )*
        ];
    };
}

forms! {
    // ---- Add/subtract (immediate) ----
    ADD_IMM_X = "add", [XSp(0), XSp(5), UImm(10, 12), OptLsl(22, 1, 12)], 0x91000000, NOV, Base, MovSp;
    ADD_IMM_W = "add", [WSp(0), WSp(5), UImm(10, 12), OptLsl(22, 1, 12)], 0x11000000, NOV, Base, MovSp;
    SUB_IMM_X = "sub", [XSp(0), XSp(5), UImm(10, 12), OptLsl(22, 1, 12)], 0xd1000000, NOV, Base, None;
    SUB_IMM_W = "sub", [WSp(0), WSp(5), UImm(10, 12), OptLsl(22, 1, 12)], 0x51000000, NOV, Base, None;
    ADDS_IMM_X = "adds", [X(0), XSp(5), UImm(10, 12), OptLsl(22, 1, 12)], 0xb1000000, NOV, Base, Cmn;
    ADDS_IMM_W = "adds", [W(0), WSp(5), UImm(10, 12), OptLsl(22, 1, 12)], 0x31000000, NOV, Base, Cmn;
    SUBS_IMM_X = "subs", [X(0), XSp(5), UImm(10, 12), OptLsl(22, 1, 12)], 0xf1000000, NOV, Base, Cmp;
    SUBS_IMM_W = "subs", [W(0), WSp(5), UImm(10, 12), OptLsl(22, 1, 12)], 0x71000000, NOV, Base, Cmp;
    // ---- Add/subtract (shifted register) ----
    ADD_SREG_X = "add", [X(0), X(5), X(16), Shift(true, false)], 0x8b000000, NOV, Base, None;
    ADD_SREG_W = "add", [W(0), W(5), W(16), Shift(false, false)], 0x0b000000, NOV, Base, None;
    SUB_SREG_X = "sub", [X(0), X(5), X(16), Shift(true, false)], 0xcb000000, NOV, Base, Neg;
    SUB_SREG_W = "sub", [W(0), W(5), W(16), Shift(false, false)], 0x4b000000, NOV, Base, Neg;
    ADDS_SREG_X = "adds", [X(0), X(5), X(16), Shift(true, false)], 0xab000000, NOV, Base, Cmn;
    ADDS_SREG_W = "adds", [W(0), W(5), W(16), Shift(false, false)], 0x2b000000, NOV, Base, Cmn;
    SUBS_SREG_X = "subs", [X(0), X(5), X(16), Shift(true, false)], 0xeb000000, NOV, Base, Cmp;
    SUBS_SREG_W = "subs", [W(0), W(5), W(16), Shift(false, false)], 0x6b000000, NOV, Base, Cmp;
    // ---- Add/subtract (extended register) ----
    ADD_EXT_X = "add", [XSp(0), XSp(5), ExtRm(true), Ext(true)], 0x8b200000, NOV, Base, None;
    ADD_EXT_W = "add", [WSp(0), WSp(5), ExtRm(false), Ext(false)], 0x0b200000, NOV, Base, None;
    SUB_EXT_X = "sub", [XSp(0), XSp(5), ExtRm(true), Ext(true)], 0xcb200000, NOV, Base, None;
    SUB_EXT_W = "sub", [WSp(0), WSp(5), ExtRm(false), Ext(false)], 0x4b200000, NOV, Base, None;
    ADDS_EXT_X = "adds", [X(0), XSp(5), ExtRm(true), Ext(true)], 0xab200000, NOV, Base, Cmn;
    ADDS_EXT_W = "adds", [W(0), WSp(5), ExtRm(false), Ext(false)], 0x2b200000, NOV, Base, Cmn;
    SUBS_EXT_X = "subs", [X(0), XSp(5), ExtRm(true), Ext(true)], 0xeb200000, NOV, Base, Cmp;
    SUBS_EXT_W = "subs", [W(0), WSp(5), ExtRm(false), Ext(false)], 0x6b200000, NOV, Base, Cmp;
    // ---- Move wide ----
    MOVZ_X = "movz", [X(0), UImm(5, 16), OptLsl(21, 2, 16)], 0xd2800000, NOV, Base, MovZ;
    MOVZ_W = "movz", [W(0), UImm(5, 16), OptLsl(21, 1, 16)], 0x52800000, NOV, Base, MovZ;
    MOVN_X = "movn", [X(0), UImm(5, 16), OptLsl(21, 2, 16)], 0x92800000, NOV, Base, MovN;
    MOVN_W = "movn", [W(0), UImm(5, 16), OptLsl(21, 1, 16)], 0x12800000, NOV, Base, MovN;
    MOVK_X = "movk", [X(0), UImm(5, 16), OptLsl(21, 2, 16)], 0xf2800000, NOV, Base, None;
    MOVK_W = "movk", [W(0), UImm(5, 16), OptLsl(21, 1, 16)], 0x72800000, NOV, Base, None;
    // ---- Logical (immediate) ----
    AND_IMM_X = "and", [XSp(0), X(5), Bitmask(true)], 0x92000000, NOV, Base, None;
    AND_IMM_W = "and", [WSp(0), W(5), Bitmask(false)], 0x12000000, NOV, Base, None;
    ORR_IMM_X = "orr", [XSp(0), X(5), Bitmask(true)], 0xb2000000, NOV, Base, MovBitmask;
    ORR_IMM_W = "orr", [WSp(0), W(5), Bitmask(false)], 0x32000000, NOV, Base, MovBitmask;
    EOR_IMM_X = "eor", [XSp(0), X(5), Bitmask(true)], 0xd2000000, NOV, Base, None;
    EOR_IMM_W = "eor", [WSp(0), W(5), Bitmask(false)], 0x52000000, NOV, Base, None;
    ANDS_IMM_X = "ands", [X(0), X(5), Bitmask(true)], 0xf2000000, NOV, Base, Tst;
    ANDS_IMM_W = "ands", [W(0), W(5), Bitmask(false)], 0x72000000, NOV, Base, Tst;
    // ---- Logical (shifted register) ----
    AND_SREG_X = "and", [X(0), X(5), X(16), Shift(true, true)], 0x8a000000, NOV, Base, None;
    AND_SREG_W = "and", [W(0), W(5), W(16), Shift(false, true)], 0x0a000000, NOV, Base, None;
    ORR_SREG_X = "orr", [X(0), X(5), X(16), Shift(true, true)], 0xaa000000, NOV, Base, MovReg;
    ORR_SREG_W = "orr", [W(0), W(5), W(16), Shift(false, true)], 0x2a000000, NOV, Base, MovReg;
    EOR_SREG_X = "eor", [X(0), X(5), X(16), Shift(true, true)], 0xca000000, NOV, Base, None;
    EOR_SREG_W = "eor", [W(0), W(5), W(16), Shift(false, true)], 0x4a000000, NOV, Base, None;
    ANDS_SREG_X = "ands", [X(0), X(5), X(16), Shift(true, true)], 0xea000000, NOV, Base, Tst;
    ANDS_SREG_W = "ands", [W(0), W(5), W(16), Shift(false, true)], 0x6a000000, NOV, Base, Tst;
    BIC_SREG_X = "bic", [X(0), X(5), X(16), Shift(true, true)], 0x8a200000, NOV, Base, None;
    BIC_SREG_W = "bic", [W(0), W(5), W(16), Shift(false, true)], 0x0a200000, NOV, Base, None;
    ORN_SREG_X = "orn", [X(0), X(5), X(16), Shift(true, true)], 0xaa200000, NOV, Base, Mvn;
    ORN_SREG_W = "orn", [W(0), W(5), W(16), Shift(false, true)], 0x2a200000, NOV, Base, Mvn;
    // ---- Shifts (UBFM/SBFM aliases and the variable forms) ----
    LSL_IMM_X = "lsl", [X(0), X(5), LslImm(true)], 0xd3400000, NOV, Base, None;
    LSL_IMM_W = "lsl", [W(0), W(5), LslImm(false)], 0x53000000, NOV, Base, None;
    LSR_IMM_X = "lsr", [X(0), X(5), UImm(16, 6)], 0xd340fc00, NOV, Base, None;
    LSR_IMM_W = "lsr", [W(0), W(5), UImm(16, 5)], 0x53007c00, NOV, Base, None;
    ASR_IMM_X = "asr", [X(0), X(5), UImm(16, 6)], 0x9340fc00, NOV, Base, None;
    ASR_IMM_W = "asr", [W(0), W(5), UImm(16, 5)], 0x13007c00, NOV, Base, None;
    LSLV_X = "lsl", [X(0), X(5), X(16)], 0x9ac02000, NOV, Base, None;
    LSLV_W = "lsl", [W(0), W(5), W(16)], 0x1ac02000, NOV, Base, None;
    LSRV_X = "lsr", [X(0), X(5), X(16)], 0x9ac02400, NOV, Base, None;
    LSRV_W = "lsr", [W(0), W(5), W(16)], 0x1ac02400, NOV, Base, None;
    ASRV_X = "asr", [X(0), X(5), X(16)], 0x9ac02800, NOV, Base, None;
    ASRV_W = "asr", [W(0), W(5), W(16)], 0x1ac02800, NOV, Base, None;
    // ---- Multiply, divide ----
    MADD_X = "madd", [X(0), X(5), X(16), X(10)], 0x9b000000, NOV, Base, Mul;
    MADD_W = "madd", [W(0), W(5), W(16), W(10)], 0x1b000000, NOV, Base, Mul;
    MSUB_X = "msub", [X(0), X(5), X(16), X(10)], 0x9b008000, NOV, Base, Mneg;
    MSUB_W = "msub", [W(0), W(5), W(16), W(10)], 0x1b008000, NOV, Base, Mneg;
    UMULH = "umulh", [X(0), X(5), X(16)], 0x9bc07c00, NOV, Base, None;
    SMULH = "smulh", [X(0), X(5), X(16)], 0x9b407c00, NOV, Base, None;
    UDIV_X = "udiv", [X(0), X(5), X(16)], 0x9ac00800, NOV, Base, None;
    UDIV_W = "udiv", [W(0), W(5), W(16)], 0x1ac00800, NOV, Base, None;
    SDIV_X = "sdiv", [X(0), X(5), X(16)], 0x9ac00c00, NOV, Base, None;
    SDIV_W = "sdiv", [W(0), W(5), W(16)], 0x1ac00c00, NOV, Base, None;
    // ---- Conditional select ----
    CSEL_X = "csel", [X(0), X(5), X(16), Cond(12)], 0x9a800000, NOV, Base, None;
    CSEL_W = "csel", [W(0), W(5), W(16), Cond(12)], 0x1a800000, NOV, Base, None;
    CSINC_X = "csinc", [X(0), X(5), X(16), Cond(12)], 0x9a800400, NOV, Base, Cinc;
    CSINC_W = "csinc", [W(0), W(5), W(16), Cond(12)], 0x1a800400, NOV, Base, Cinc;
    CSINV_X = "csinv", [X(0), X(5), X(16), Cond(12)], 0xda800000, NOV, Base, Cinv;
    CSINV_W = "csinv", [W(0), W(5), W(16), Cond(12)], 0x5a800000, NOV, Base, Cinv;
    CSNEG_X = "csneg", [X(0), X(5), X(16), Cond(12)], 0xda800400, NOV, Base, Cneg;
    CSNEG_W = "csneg", [W(0), W(5), W(16), Cond(12)], 0x5a800400, NOV, Base, Cneg;
    // ---- Sign and zero extension (SBFM/UBFM aliases) ----
    SXTW = "sxtw", [X(0), W(5)], 0x93407c00, NOV, Base, None;
    SXTH_X = "sxth", [X(0), W(5)], 0x93403c00, NOV, Base, None;
    SXTB_X = "sxtb", [X(0), W(5)], 0x93401c00, NOV, Base, None;
    SXTH_W = "sxth", [W(0), W(5)], 0x13003c00, NOV, Base, None;
    SXTB_W = "sxtb", [W(0), W(5)], 0x13001c00, NOV, Base, None;
    UXTH = "uxth", [W(0), W(5)], 0x53003c00, NOV, Base, None;
    UXTB = "uxtb", [W(0), W(5)], 0x53001c00, NOV, Base, None;
    // ---- Branches ----
    B = "b", [Br(0, 26)], 0x14000000, NOV, Base, None;
    BL = "bl", [Br(0, 26)], 0x94000000, NOV, Base, None;
    B_COND = "b.{0} {1}", [Cond(0), Br(5, 19)], 0x54000000, NOV, Base, None;
    CBZ_X = "cbz", [X(0), Br(5, 19)], 0xb4000000, NOV, Base, None;
    CBZ_W = "cbz", [W(0), Br(5, 19)], 0x34000000, NOV, Base, None;
    CBNZ_X = "cbnz", [X(0), Br(5, 19)], 0xb5000000, NOV, Base, None;
    CBNZ_W = "cbnz", [W(0), Br(5, 19)], 0x35000000, NOV, Base, None;
    TBZ_X = "tbz", [X(0), TbBit(true), Br(5, 14)], 0xb6000000, NOV, Base, None;
    TBZ_W = "tbz", [W(0), TbBit(false), Br(5, 14)], 0x36000000, NOV, Base, None;
    TBNZ_X = "tbnz", [X(0), TbBit(true), Br(5, 14)], 0xb7000000, NOV, Base, None;
    TBNZ_W = "tbnz", [W(0), TbBit(false), Br(5, 14)], 0x37000000, NOV, Base, None;
    BR = "br", [X(5)], 0xd61f0000, NOV, Base, None;
    BLR = "blr", [X(5)], 0xd63f0000, NOV, Base, None;
    RET = "ret", [XLr(5)], 0xd65f0000, NOV, Base, None;
    ADR = "adr", [X(0), Adr], 0x10000000, NOV, Base, None;
    // ---- System ----
    NOP = "nop", [], 0xd503201f, NOV, Base, None;
    BRK = "brk", [UHex(5, 16)], 0xd4200000, NOV, Base, None;
    DSB = "dsb", [Barrier], 0xd503309f, NOV, Base, None;
    ISB = "isb", [], 0xd5033fdf, NOV, Base, None;
    DC_CVAU = "dc cvau, {0}", [X(0)], 0xd50b7b20, NOV, Base, None;
    IC_IVAU = "ic ivau, {0}", [X(0)], 0xd50b7520, NOV, Base, None;
    MRS_CTR_EL0 = "mrs {0}, CTR_EL0", [X(0)], 0xd53b0020, NOV, Base, None;
    MRS_CNTVCT_EL0 = "mrs {0}, CNTVCT_EL0", [X(0)], 0xd53be040, NOV, Base, None;
    // ---- Loads and stores (generated family: unsigned offset, unscaled, pre, post, register) ----
    LDR_X_UOFF = "ldr", [X(0), Mem(MemKind::Uoff(3))], 0xf9400000, NOV, Base, None;
    LDUR_X = "ldur", [X(0), Mem(MemKind::Simm9)], 0xf8400000, NOV, Base, None;
    LDR_X_PRE = "ldr", [X(0), Mem(MemKind::Pre9)], 0xf8400c00, NOV, Base, None;
    LDR_X_POST = "ldr", [X(0), Mem(MemKind::Post9)], 0xf8400400, NOV, Base, None;
    LDR_X_REG = "ldr", [X(0), Mem(MemKind::RegOff(3))], 0xf8600800, NOV, Base, None;
    STR_X_UOFF = "str", [X(0), Mem(MemKind::Uoff(3))], 0xf9000000, NOV, Base, None;
    STUR_X = "stur", [X(0), Mem(MemKind::Simm9)], 0xf8000000, NOV, Base, None;
    STR_X_PRE = "str", [X(0), Mem(MemKind::Pre9)], 0xf8000c00, NOV, Base, None;
    STR_X_POST = "str", [X(0), Mem(MemKind::Post9)], 0xf8000400, NOV, Base, None;
    STR_X_REG = "str", [X(0), Mem(MemKind::RegOff(3))], 0xf8200800, NOV, Base, None;
    LDR_W_UOFF = "ldr", [W(0), Mem(MemKind::Uoff(2))], 0xb9400000, NOV, Base, None;
    LDUR_W = "ldur", [W(0), Mem(MemKind::Simm9)], 0xb8400000, NOV, Base, None;
    LDR_W_PRE = "ldr", [W(0), Mem(MemKind::Pre9)], 0xb8400c00, NOV, Base, None;
    LDR_W_POST = "ldr", [W(0), Mem(MemKind::Post9)], 0xb8400400, NOV, Base, None;
    LDR_W_REG = "ldr", [W(0), Mem(MemKind::RegOff(2))], 0xb8600800, NOV, Base, None;
    STR_W_UOFF = "str", [W(0), Mem(MemKind::Uoff(2))], 0xb9000000, NOV, Base, None;
    STUR_W = "stur", [W(0), Mem(MemKind::Simm9)], 0xb8000000, NOV, Base, None;
    STR_W_PRE = "str", [W(0), Mem(MemKind::Pre9)], 0xb8000c00, NOV, Base, None;
    STR_W_POST = "str", [W(0), Mem(MemKind::Post9)], 0xb8000400, NOV, Base, None;
    STR_W_REG = "str", [W(0), Mem(MemKind::RegOff(2))], 0xb8200800, NOV, Base, None;
    LDR_B_UOFF = "ldr", [Fp(FpWidth::B, 0), Mem(MemKind::Uoff(0))], 0x3d400000, NOV, Base, None;
    LDUR_B = "ldur", [Fp(FpWidth::B, 0), Mem(MemKind::Simm9)], 0x3c400000, NOV, Base, None;
    LDR_B_PRE = "ldr", [Fp(FpWidth::B, 0), Mem(MemKind::Pre9)], 0x3c400c00, NOV, Base, None;
    LDR_B_POST = "ldr", [Fp(FpWidth::B, 0), Mem(MemKind::Post9)], 0x3c400400, NOV, Base, None;
    LDR_B_REG = "ldr", [Fp(FpWidth::B, 0), Mem(MemKind::RegOff(0))], 0x3c600800, NOV, Base, None;
    STR_B_UOFF = "str", [Fp(FpWidth::B, 0), Mem(MemKind::Uoff(0))], 0x3d000000, NOV, Base, None;
    STUR_B = "stur", [Fp(FpWidth::B, 0), Mem(MemKind::Simm9)], 0x3c000000, NOV, Base, None;
    STR_B_PRE = "str", [Fp(FpWidth::B, 0), Mem(MemKind::Pre9)], 0x3c000c00, NOV, Base, None;
    STR_B_POST = "str", [Fp(FpWidth::B, 0), Mem(MemKind::Post9)], 0x3c000400, NOV, Base, None;
    STR_B_REG = "str", [Fp(FpWidth::B, 0), Mem(MemKind::RegOff(0))], 0x3c200800, NOV, Base, None;
    LDR_H_UOFF = "ldr", [Fp(FpWidth::H, 0), Mem(MemKind::Uoff(1))], 0x7d400000, NOV, Base, None;
    LDUR_H = "ldur", [Fp(FpWidth::H, 0), Mem(MemKind::Simm9)], 0x7c400000, NOV, Base, None;
    LDR_H_PRE = "ldr", [Fp(FpWidth::H, 0), Mem(MemKind::Pre9)], 0x7c400c00, NOV, Base, None;
    LDR_H_POST = "ldr", [Fp(FpWidth::H, 0), Mem(MemKind::Post9)], 0x7c400400, NOV, Base, None;
    LDR_H_REG = "ldr", [Fp(FpWidth::H, 0), Mem(MemKind::RegOff(1))], 0x7c600800, NOV, Base, None;
    STR_H_UOFF = "str", [Fp(FpWidth::H, 0), Mem(MemKind::Uoff(1))], 0x7d000000, NOV, Base, None;
    STUR_H = "stur", [Fp(FpWidth::H, 0), Mem(MemKind::Simm9)], 0x7c000000, NOV, Base, None;
    STR_H_PRE = "str", [Fp(FpWidth::H, 0), Mem(MemKind::Pre9)], 0x7c000c00, NOV, Base, None;
    STR_H_POST = "str", [Fp(FpWidth::H, 0), Mem(MemKind::Post9)], 0x7c000400, NOV, Base, None;
    STR_H_REG = "str", [Fp(FpWidth::H, 0), Mem(MemKind::RegOff(1))], 0x7c200800, NOV, Base, None;
    LDR_S_UOFF = "ldr", [Fp(FpWidth::S, 0), Mem(MemKind::Uoff(2))], 0xbd400000, NOV, Base, None;
    LDUR_S = "ldur", [Fp(FpWidth::S, 0), Mem(MemKind::Simm9)], 0xbc400000, NOV, Base, None;
    LDR_S_PRE = "ldr", [Fp(FpWidth::S, 0), Mem(MemKind::Pre9)], 0xbc400c00, NOV, Base, None;
    LDR_S_POST = "ldr", [Fp(FpWidth::S, 0), Mem(MemKind::Post9)], 0xbc400400, NOV, Base, None;
    LDR_S_REG = "ldr", [Fp(FpWidth::S, 0), Mem(MemKind::RegOff(2))], 0xbc600800, NOV, Base, None;
    STR_S_UOFF = "str", [Fp(FpWidth::S, 0), Mem(MemKind::Uoff(2))], 0xbd000000, NOV, Base, None;
    STUR_S = "stur", [Fp(FpWidth::S, 0), Mem(MemKind::Simm9)], 0xbc000000, NOV, Base, None;
    STR_S_PRE = "str", [Fp(FpWidth::S, 0), Mem(MemKind::Pre9)], 0xbc000c00, NOV, Base, None;
    STR_S_POST = "str", [Fp(FpWidth::S, 0), Mem(MemKind::Post9)], 0xbc000400, NOV, Base, None;
    STR_S_REG = "str", [Fp(FpWidth::S, 0), Mem(MemKind::RegOff(2))], 0xbc200800, NOV, Base, None;
    LDR_D_UOFF = "ldr", [Fp(FpWidth::D, 0), Mem(MemKind::Uoff(3))], 0xfd400000, NOV, Base, None;
    LDUR_D = "ldur", [Fp(FpWidth::D, 0), Mem(MemKind::Simm9)], 0xfc400000, NOV, Base, None;
    LDR_D_PRE = "ldr", [Fp(FpWidth::D, 0), Mem(MemKind::Pre9)], 0xfc400c00, NOV, Base, None;
    LDR_D_POST = "ldr", [Fp(FpWidth::D, 0), Mem(MemKind::Post9)], 0xfc400400, NOV, Base, None;
    LDR_D_REG = "ldr", [Fp(FpWidth::D, 0), Mem(MemKind::RegOff(3))], 0xfc600800, NOV, Base, None;
    STR_D_UOFF = "str", [Fp(FpWidth::D, 0), Mem(MemKind::Uoff(3))], 0xfd000000, NOV, Base, None;
    STUR_D = "stur", [Fp(FpWidth::D, 0), Mem(MemKind::Simm9)], 0xfc000000, NOV, Base, None;
    STR_D_PRE = "str", [Fp(FpWidth::D, 0), Mem(MemKind::Pre9)], 0xfc000c00, NOV, Base, None;
    STR_D_POST = "str", [Fp(FpWidth::D, 0), Mem(MemKind::Post9)], 0xfc000400, NOV, Base, None;
    STR_D_REG = "str", [Fp(FpWidth::D, 0), Mem(MemKind::RegOff(3))], 0xfc200800, NOV, Base, None;
    LDR_Q_UOFF = "ldr", [Fp(FpWidth::Q, 0), Mem(MemKind::Uoff(4))], 0x3dc00000, NOV, Base, None;
    LDUR_Q = "ldur", [Fp(FpWidth::Q, 0), Mem(MemKind::Simm9)], 0x3cc00000, NOV, Base, None;
    LDR_Q_PRE = "ldr", [Fp(FpWidth::Q, 0), Mem(MemKind::Pre9)], 0x3cc00c00, NOV, Base, None;
    LDR_Q_POST = "ldr", [Fp(FpWidth::Q, 0), Mem(MemKind::Post9)], 0x3cc00400, NOV, Base, None;
    LDR_Q_REG = "ldr", [Fp(FpWidth::Q, 0), Mem(MemKind::RegOff(4))], 0x3ce00800, NOV, Base, None;
    STR_Q_UOFF = "str", [Fp(FpWidth::Q, 0), Mem(MemKind::Uoff(4))], 0x3d800000, NOV, Base, None;
    STUR_Q = "stur", [Fp(FpWidth::Q, 0), Mem(MemKind::Simm9)], 0x3c800000, NOV, Base, None;
    STR_Q_PRE = "str", [Fp(FpWidth::Q, 0), Mem(MemKind::Pre9)], 0x3c800c00, NOV, Base, None;
    STR_Q_POST = "str", [Fp(FpWidth::Q, 0), Mem(MemKind::Post9)], 0x3c800400, NOV, Base, None;
    STR_Q_REG = "str", [Fp(FpWidth::Q, 0), Mem(MemKind::RegOff(4))], 0x3ca00800, NOV, Base, None;
    LDRB_W_UOFF = "ldrb", [W(0), Mem(MemKind::Uoff(0))], 0x39400000, NOV, Base, None;
    LDURB_W = "ldurb", [W(0), Mem(MemKind::Simm9)], 0x38400000, NOV, Base, None;
    LDRB_W_PRE = "ldrb", [W(0), Mem(MemKind::Pre9)], 0x38400c00, NOV, Base, None;
    LDRB_W_POST = "ldrb", [W(0), Mem(MemKind::Post9)], 0x38400400, NOV, Base, None;
    LDRB_W_REG = "ldrb", [W(0), Mem(MemKind::RegOff(0))], 0x38600800, NOV, Base, None;
    STRB_W_UOFF = "strb", [W(0), Mem(MemKind::Uoff(0))], 0x39000000, NOV, Base, None;
    STURB_W = "sturb", [W(0), Mem(MemKind::Simm9)], 0x38000000, NOV, Base, None;
    STRB_W_PRE = "strb", [W(0), Mem(MemKind::Pre9)], 0x38000c00, NOV, Base, None;
    STRB_W_POST = "strb", [W(0), Mem(MemKind::Post9)], 0x38000400, NOV, Base, None;
    STRB_W_REG = "strb", [W(0), Mem(MemKind::RegOff(0))], 0x38200800, NOV, Base, None;
    LDRH_W_UOFF = "ldrh", [W(0), Mem(MemKind::Uoff(1))], 0x79400000, NOV, Base, None;
    LDURH_W = "ldurh", [W(0), Mem(MemKind::Simm9)], 0x78400000, NOV, Base, None;
    LDRH_W_PRE = "ldrh", [W(0), Mem(MemKind::Pre9)], 0x78400c00, NOV, Base, None;
    LDRH_W_POST = "ldrh", [W(0), Mem(MemKind::Post9)], 0x78400400, NOV, Base, None;
    LDRH_W_REG = "ldrh", [W(0), Mem(MemKind::RegOff(1))], 0x78600800, NOV, Base, None;
    STRH_W_UOFF = "strh", [W(0), Mem(MemKind::Uoff(1))], 0x79000000, NOV, Base, None;
    STURH_W = "sturh", [W(0), Mem(MemKind::Simm9)], 0x78000000, NOV, Base, None;
    STRH_W_PRE = "strh", [W(0), Mem(MemKind::Pre9)], 0x78000c00, NOV, Base, None;
    STRH_W_POST = "strh", [W(0), Mem(MemKind::Post9)], 0x78000400, NOV, Base, None;
    STRH_W_REG = "strh", [W(0), Mem(MemKind::RegOff(1))], 0x78200800, NOV, Base, None;
    LDP_X_OFF = "ldp", [X(0), X(10), Mem(MemKind::PairOff(3))], 0xa9400000, NOV, Base, None;
    LDP_X_PRE = "ldp", [X(0), X(10), Mem(MemKind::PairPre(3))], 0xa9c00000, NOV, Base, None;
    LDP_X_POST = "ldp", [X(0), X(10), Mem(MemKind::PairPost(3))], 0xa8c00000, NOV, Base, None;
    STP_X_OFF = "stp", [X(0), X(10), Mem(MemKind::PairOff(3))], 0xa9000000, NOV, Base, None;
    STP_X_PRE = "stp", [X(0), X(10), Mem(MemKind::PairPre(3))], 0xa9800000, NOV, Base, None;
    STP_X_POST = "stp", [X(0), X(10), Mem(MemKind::PairPost(3))], 0xa8800000, NOV, Base, None;
    LDP_W_OFF = "ldp", [W(0), W(10), Mem(MemKind::PairOff(2))], 0x29400000, NOV, Base, None;
    LDP_W_PRE = "ldp", [W(0), W(10), Mem(MemKind::PairPre(2))], 0x29c00000, NOV, Base, None;
    LDP_W_POST = "ldp", [W(0), W(10), Mem(MemKind::PairPost(2))], 0x28c00000, NOV, Base, None;
    STP_W_OFF = "stp", [W(0), W(10), Mem(MemKind::PairOff(2))], 0x29000000, NOV, Base, None;
    STP_W_PRE = "stp", [W(0), W(10), Mem(MemKind::PairPre(2))], 0x29800000, NOV, Base, None;
    STP_W_POST = "stp", [W(0), W(10), Mem(MemKind::PairPost(2))], 0x28800000, NOV, Base, None;
    LDP_S_OFF = "ldp", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 10), Mem(MemKind::PairOff(2))], 0x2d400000, NOV, Base, None;
    LDP_S_PRE = "ldp", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 10), Mem(MemKind::PairPre(2))], 0x2dc00000, NOV, Base, None;
    LDP_S_POST = "ldp", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 10), Mem(MemKind::PairPost(2))], 0x2cc00000, NOV, Base, None;
    STP_S_OFF = "stp", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 10), Mem(MemKind::PairOff(2))], 0x2d000000, NOV, Base, None;
    STP_S_PRE = "stp", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 10), Mem(MemKind::PairPre(2))], 0x2d800000, NOV, Base, None;
    STP_S_POST = "stp", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 10), Mem(MemKind::PairPost(2))], 0x2c800000, NOV, Base, None;
    LDP_D_OFF = "ldp", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 10), Mem(MemKind::PairOff(3))], 0x6d400000, NOV, Base, None;
    LDP_D_PRE = "ldp", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 10), Mem(MemKind::PairPre(3))], 0x6dc00000, NOV, Base, None;
    LDP_D_POST = "ldp", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 10), Mem(MemKind::PairPost(3))], 0x6cc00000, NOV, Base, None;
    STP_D_OFF = "stp", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 10), Mem(MemKind::PairOff(3))], 0x6d000000, NOV, Base, None;
    STP_D_PRE = "stp", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 10), Mem(MemKind::PairPre(3))], 0x6d800000, NOV, Base, None;
    STP_D_POST = "stp", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 10), Mem(MemKind::PairPost(3))], 0x6c800000, NOV, Base, None;
    LDP_Q_OFF = "ldp", [Fp(FpWidth::Q, 0), Fp(FpWidth::Q, 10), Mem(MemKind::PairOff(4))], 0xad400000, NOV, Base, None;
    LDP_Q_PRE = "ldp", [Fp(FpWidth::Q, 0), Fp(FpWidth::Q, 10), Mem(MemKind::PairPre(4))], 0xadc00000, NOV, Base, None;
    LDP_Q_POST = "ldp", [Fp(FpWidth::Q, 0), Fp(FpWidth::Q, 10), Mem(MemKind::PairPost(4))], 0xacc00000, NOV, Base, None;
    STP_Q_OFF = "stp", [Fp(FpWidth::Q, 0), Fp(FpWidth::Q, 10), Mem(MemKind::PairOff(4))], 0xad000000, NOV, Base, None;
    STP_Q_PRE = "stp", [Fp(FpWidth::Q, 0), Fp(FpWidth::Q, 10), Mem(MemKind::PairPre(4))], 0xad800000, NOV, Base, None;
    STP_Q_POST = "stp", [Fp(FpWidth::Q, 0), Fp(FpWidth::Q, 10), Mem(MemKind::PairPost(4))], 0xac800000, NOV, Base, None;
    LD1_1 = "ld1", [List(1, 0), Mem(MemKind::Base)], 0x0c407000, V_LS, Base, None;
    LD1_1_POST = "ld1", [List(1, 0), Mem(MemKind::PostImm(true))], 0x0cdf7000, V_LS, Base, None;
    LD1_1_POSTREG = "ld1", [List(1, 0), Mem(MemKind::PostReg)], 0x0cc07000, V_LS, Base, None;
    LD1_2 = "ld1", [List(2, 0), Mem(MemKind::Base)], 0x0c40a000, V_LS, Base, None;
    LD1_2_POST = "ld1", [List(2, 0), Mem(MemKind::PostImm(true))], 0x0cdfa000, V_LS, Base, None;
    LD1_2_POSTREG = "ld1", [List(2, 0), Mem(MemKind::PostReg)], 0x0cc0a000, V_LS, Base, None;
    LD1_3 = "ld1", [List(3, 0), Mem(MemKind::Base)], 0x0c406000, V_LS, Base, None;
    LD1_3_POST = "ld1", [List(3, 0), Mem(MemKind::PostImm(true))], 0x0cdf6000, V_LS, Base, None;
    LD1_3_POSTREG = "ld1", [List(3, 0), Mem(MemKind::PostReg)], 0x0cc06000, V_LS, Base, None;
    LD1_4 = "ld1", [List(4, 0), Mem(MemKind::Base)], 0x0c402000, V_LS, Base, None;
    LD1_4_POST = "ld1", [List(4, 0), Mem(MemKind::PostImm(true))], 0x0cdf2000, V_LS, Base, None;
    LD1_4_POSTREG = "ld1", [List(4, 0), Mem(MemKind::PostReg)], 0x0cc02000, V_LS, Base, None;
    ST1_1 = "st1", [List(1, 0), Mem(MemKind::Base)], 0x0c007000, V_LS, Base, None;
    ST1_1_POST = "st1", [List(1, 0), Mem(MemKind::PostImm(true))], 0x0c9f7000, V_LS, Base, None;
    ST1_1_POSTREG = "st1", [List(1, 0), Mem(MemKind::PostReg)], 0x0c807000, V_LS, Base, None;
    ST1_2 = "st1", [List(2, 0), Mem(MemKind::Base)], 0x0c00a000, V_LS, Base, None;
    ST1_2_POST = "st1", [List(2, 0), Mem(MemKind::PostImm(true))], 0x0c9fa000, V_LS, Base, None;
    ST1_2_POSTREG = "st1", [List(2, 0), Mem(MemKind::PostReg)], 0x0c80a000, V_LS, Base, None;
    ST1_3 = "st1", [List(3, 0), Mem(MemKind::Base)], 0x0c006000, V_LS, Base, None;
    ST1_3_POST = "st1", [List(3, 0), Mem(MemKind::PostImm(true))], 0x0c9f6000, V_LS, Base, None;
    ST1_3_POSTREG = "st1", [List(3, 0), Mem(MemKind::PostReg)], 0x0c806000, V_LS, Base, None;
    ST1_4 = "st1", [List(4, 0), Mem(MemKind::Base)], 0x0c002000, V_LS, Base, None;
    ST1_4_POST = "st1", [List(4, 0), Mem(MemKind::PostImm(true))], 0x0c9f2000, V_LS, Base, None;
    ST1_4_POSTREG = "st1", [List(4, 0), Mem(MemKind::PostReg)], 0x0c802000, V_LS, Base, None;
    PRFM_UOFF = "prfm", [Prfop, Mem(MemKind::Uoff(3))], 0xf9800000, NOV, Base, None;
    PRFM_REG = "prfm", [Prfop, Mem(MemKind::RegOff(3))], 0xf8a00800, NOV, Base, None;
    LD1R = "ld1r", [List(1, 0), Mem(MemKind::Base)], 0x0d40c000, V_LS, Base, None;
    LD1R_POST = "ld1r", [List(1, 0), Mem(MemKind::PostImm(false))], 0x0ddfc000, V_LS, Base, None;
    LD1R_POSTREG = "ld1r", [List(1, 0), Mem(MemKind::PostReg)], 0x0dc0c000, V_LS, Base, None;
    LD1_LANE = "ld1", [LaneList(0), Mem(MemKind::Base)], 0x0d400000, V_LANE, Base, None;
    LD1_LANE_POST = "ld1", [LaneList(0), Mem(MemKind::PostImm(false))], 0x0ddf0000, V_LANE, Base, None;
    LD1_LANE_POSTREG = "ld1", [LaneList(0), Mem(MemKind::PostReg)], 0x0dc00000, V_LANE, Base, None;
    ST1_LANE = "st1", [LaneList(0), Mem(MemKind::Base)], 0x0d000000, V_LANE, Base, None;
    ST1_LANE_POST = "st1", [LaneList(0), Mem(MemKind::PostImm(false))], 0x0d9f0000, V_LANE, Base, None;
    ST1_LANE_POSTREG = "st1", [LaneList(0), Mem(MemKind::PostReg)], 0x0d800000, V_LANE, Base, None;
    LDR_X_LIT = "ldr", [X(0), Br(5, 19)], 0x58000000, NOV, Base, None;
    LDR_W_LIT = "ldr", [W(0), Br(5, 19)], 0x18000000, NOV, Base, None;
    LDR_S_LIT = "ldr", [Fp(FpWidth::S, 0), Br(5, 19)], 0x1c000000, NOV, Base, None;
    LDR_D_LIT = "ldr", [Fp(FpWidth::D, 0), Br(5, 19)], 0x5c000000, NOV, Base, None;
    LDR_Q_LIT = "ldr", [Fp(FpWidth::Q, 0), Br(5, 19)], 0x9c000000, NOV, Base, None;
    // ---- Moves between registers and lanes ----
    SMOV_W = "smov", [W(0), Elem(5, Idx::Imm5)], 0x0e002c00, V_EBH, Base, None;
    SMOV_X = "smov", [X(0), Elem(5, Idx::Imm5)], 0x4e002c00, V_EBHS, Base, None;
    DUP_ELEM = "dup", [V(0), Elem(5, Idx::Imm5)], 0x0e000400, V_DUPE, Base, None;
    DUP_GEN_W = "dup", [V(0), W(5)], 0x0e000c00, V_DUPW, Base, None;
    DUP_GEN_X = "dup", [V(0), X(5)], 0x4e080c00, V_2D, Base, None;
    DUP_SCALAR = "mov", [VFp(0), Elem(5, Idx::Imm5)], 0x5e000400, V_DUPS, Base, None;
    INS_GEN_W = "mov", [Elem(0, Idx::Imm5), W(5)], 0x4e001c00, V_EBHS, Base, None;
    INS_GEN_X = "mov", [Elem(0, Idx::Imm5), X(5)], 0x4e001c00, &[v!(0; E(Elem::D))], Base, None;
    INS_ELEM = "mov", [Elem(0, Idx::Imm5), Elem(5, Idx::Imm4)], 0x6e000400, V_EBHSD, Base, None;
    UMOV_BH = "umov", [W(0), Elem(5, Idx::Imm5)], 0x0e003c00, &[v!(0; E(Elem::B)), v!(0; E(Elem::H))], Base, None;
    UMOV_S = "mov", [W(0), Elem(5, Idx::Imm5)], 0x0e003c00, &[v!(0; E(Elem::S))], Base, None;
    UMOV_D = "mov", [X(0), Elem(5, Idx::Imm5)], 0x4e003c00, &[v!(0; E(Elem::D))], Base, None;
    MOVI_B = "movi", [V(0), Imm8Split], 0x0f00e400, V_B, Base, None;
    MOVI_S = "movi", [V(0), Imm8Split, OptLsl(13, 2, 8)], 0x0f000400, V_HS, Base, None;
    MOVI_H = "movi", [V(0), Imm8Split, OptLsl(13, 1, 8)], 0x0f008400, V_FH, Base, None;
    MVNI_S = "mvni", [V(0), Imm8Split, OptLsl(13, 2, 8)], 0x2f000400, V_HS, Base, None;
    MVNI_H = "mvni", [V(0), Imm8Split, OptLsl(13, 1, 8)], 0x2f008400, V_FH, Base, None;
    MOVI_2D = "movi", [V(0), Imm64Bytes], 0x6f00e400, V_2D, Base, None;
    FMOV_V_IMM = "fmov", [V(0), VFImm], 0x0f00f400, V_FIMM, Base, None;
    FMOV_V_IMM_H = "fmov", [V(0), VFImm], 0x0f00fc00, V_FH, Fp16, None;
    FMOV_S = "fmov", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5)], 0x1e204000, NOV, Base, None;
    FMOV_D = "fmov", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 5)], 0x1e604000, NOV, Base, None;
    FMOV_H = "fmov", [Fp(FpWidth::H, 0), Fp(FpWidth::H, 5)], 0x1ee04000, NOV, Fp16, None;
    FMOV_S_W = "fmov", [Fp(FpWidth::S, 0), W(5)], 0x1e270000, NOV, Base, None;
    FMOV_W_S = "fmov", [W(0), Fp(FpWidth::S, 5)], 0x1e260000, NOV, Base, None;
    FMOV_D_X = "fmov", [Fp(FpWidth::D, 0), X(5)], 0x9e670000, NOV, Base, None;
    FMOV_X_D = "fmov", [X(0), Fp(FpWidth::D, 5)], 0x9e660000, NOV, Base, None;
    FMOV_S_IMM = "fmov", [Fp(FpWidth::S, 0), FImm(13)], 0x1e201000, NOV, Base, None;
    FMOV_D_IMM = "fmov", [Fp(FpWidth::D, 0), FImm(13)], 0x1e601000, NOV, Base, None;
    FMOV_H_IMM = "fmov", [Fp(FpWidth::H, 0), FImm(13)], 0x1ee01000, NOV, Fp16, None;
    // ---- Floating-point vector, three registers (2S 4S 2D) ----
    FADD_V = "fadd", [V(0), V(5), V(16)], 0x0e20d400, V_F, Base, None;
    FSUB_V = "fsub", [V(0), V(5), V(16)], 0x0ea0d400, V_F, Base, None;
    FMUL_V = "fmul", [V(0), V(5), V(16)], 0x2e20dc00, V_F, Base, None;
    FDIV_V = "fdiv", [V(0), V(5), V(16)], 0x2e20fc00, V_F, Base, None;
    FMAX_V = "fmax", [V(0), V(5), V(16)], 0x0e20f400, V_F, Base, None;
    FMIN_V = "fmin", [V(0), V(5), V(16)], 0x0ea0f400, V_F, Base, None;
    FMAXNM_V = "fmaxnm", [V(0), V(5), V(16)], 0x0e20c400, V_F, Base, None;
    FMINNM_V = "fminnm", [V(0), V(5), V(16)], 0x0ea0c400, V_F, Base, None;
    FMLA_V = "fmla", [V(0), V(5), V(16)], 0x0e20cc00, V_F, Base, None;
    FMLS_V = "fmls", [V(0), V(5), V(16)], 0x0ea0cc00, V_F, Base, None;
    FADDP_V = "faddp", [V(0), V(5), V(16)], 0x2e20d400, V_F, Base, None;
    FMAXP_V = "fmaxp", [V(0), V(5), V(16)], 0x2e20f400, V_F, Base, None;
    FMINP_V = "fminp", [V(0), V(5), V(16)], 0x2ea0f400, V_F, Base, None;
    FCMEQ_V = "fcmeq", [V(0), V(5), V(16)], 0x0e20e400, V_F, Base, None;
    FCMGE_V = "fcmge", [V(0), V(5), V(16)], 0x2e20e400, V_F, Base, None;
    FCMGT_V = "fcmgt", [V(0), V(5), V(16)], 0x2ea0e400, V_F, Base, None;
    FCMEQ_Z = "fcmeq {0}, {1}, #0.0", [V(0), V(5)], 0x0ea0d800, V_F, Base, None;
    FCMGE_Z = "fcmge {0}, {1}, #0.0", [V(0), V(5)], 0x2ea0c800, V_F, Base, None;
    FCMGT_Z = "fcmgt {0}, {1}, #0.0", [V(0), V(5)], 0x0ea0c800, V_F, Base, None;
    // ---- Half-precision vector (4H 8H) ----
    FADD_VH = "fadd", [V(0), V(5), V(16)], 0x0e401400, V_FH, Fp16, None;
    FSUB_VH = "fsub", [V(0), V(5), V(16)], 0x0ec01400, V_FH, Fp16, None;
    FMUL_VH = "fmul", [V(0), V(5), V(16)], 0x2e401c00, V_FH, Fp16, None;
    FMLA_VH = "fmla", [V(0), V(5), V(16)], 0x0e400c00, V_FH, Fp16, None;
    // ---- Floating-point vector, two registers ----
    FABS_V = "fabs", [V(0), V(5)], 0x0ea0f800, V_F, Base, None;
    FNEG_V = "fneg", [V(0), V(5)], 0x2ea0f800, V_F, Base, None;
    FSQRT_V = "fsqrt", [V(0), V(5)], 0x2ea1f800, V_F, Base, None;
    FRINTN_V = "frintn", [V(0), V(5)], 0x0e218800, V_F, Base, None;
    FRINTM_V = "frintm", [V(0), V(5)], 0x0e219800, V_F, Base, None;
    FRINTZ_V = "frintz", [V(0), V(5)], 0x0ea19800, V_F, Base, None;
    FRINTP_V = "frintp", [V(0), V(5)], 0x0ea18800, V_F, Base, None;
    FRINTA_V = "frinta", [V(0), V(5)], 0x2e218800, V_F, Base, None;
    FCVTZS_V = "fcvtzs", [V(0), V(5)], 0x0ea1b800, V_F, Base, None;
    FCVTZU_V = "fcvtzu", [V(0), V(5)], 0x2ea1b800, V_F, Base, None;
    FCVTNS_V = "fcvtns", [V(0), V(5)], 0x0e21a800, V_F, Base, None;
    FCVTMS_V = "fcvtms", [V(0), V(5)], 0x0e21b800, V_F, Base, None;
    FCVTAS_V = "fcvtas", [V(0), V(5)], 0x0e21c800, V_F, Base, None;
    SCVTF_V = "scvtf", [V(0), V(5)], 0x0e21d800, V_F, Base, None;
    UCVTF_V = "ucvtf", [V(0), V(5)], 0x2e21d800, V_F, Base, None;
    FCVTL = "fcvtl", [V(0), V(5)], 0x0e217800, V_FCVTL, Base, None;
    FCVTL2 = "fcvtl2", [V(0), V(5)], 0x4e217800, V_FCVTL2, Base, None;
    FCVTN = "fcvtn", [V(0), V(5)], 0x0e216800, V_FCVTN, Base, None;
    FCVTN2 = "fcvtn2", [V(0), V(5)], 0x4e216800, V_FCVTN2, Base, None;
    // ---- Floating-point by element and across lanes ----
    FMLA_ELEM = "fmla", [V(0), V(5), Elem(16, Idx::Hl)], 0x0f801000, V_FE, Base, None;
    FMLS_ELEM = "fmls", [V(0), V(5), Elem(16, Idx::Hl)], 0x0f805000, V_FE, Base, None;
    FMUL_ELEM = "fmul", [V(0), V(5), Elem(16, Idx::Hl)], 0x0f809000, V_FE, Base, None;
    FMAXV = "fmaxv", [Fp(FpWidth::S, 0), V(5)], 0x6e30f800, V_4S, Base, None;
    FMINV = "fminv", [Fp(FpWidth::S, 0), V(5)], 0x6eb0f800, V_4S, Base, None;
    FMAXNMV = "fmaxnmv", [Fp(FpWidth::S, 0), V(5)], 0x6e30c800, V_4S, Base, None;
    FMINNMV = "fminnmv", [Fp(FpWidth::S, 0), V(5)], 0x6eb0c800, V_4S, Base, None;
    // ---- Floating-point scalar ----
    FADD_S = "fadd", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5), Fp(FpWidth::S, 16)], 0x1e202800, NOV, Base, None;
    FADD_D = "fadd", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 5), Fp(FpWidth::D, 16)], 0x1e602800, NOV, Base, None;
    FADD_H = "fadd", [Fp(FpWidth::H, 0), Fp(FpWidth::H, 5), Fp(FpWidth::H, 16)], 0x1ee02800, NOV, Fp16, None;
    FSUB_S = "fsub", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5), Fp(FpWidth::S, 16)], 0x1e203800, NOV, Base, None;
    FSUB_D = "fsub", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 5), Fp(FpWidth::D, 16)], 0x1e603800, NOV, Base, None;
    FMUL_S = "fmul", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5), Fp(FpWidth::S, 16)], 0x1e200800, NOV, Base, None;
    FMUL_D = "fmul", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 5), Fp(FpWidth::D, 16)], 0x1e600800, NOV, Base, None;
    FMUL_H = "fmul", [Fp(FpWidth::H, 0), Fp(FpWidth::H, 5), Fp(FpWidth::H, 16)], 0x1ee00800, NOV, Fp16, None;
    FDIV_S = "fdiv", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5), Fp(FpWidth::S, 16)], 0x1e201800, NOV, Base, None;
    FDIV_D = "fdiv", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 5), Fp(FpWidth::D, 16)], 0x1e601800, NOV, Base, None;
    FMAX_S = "fmax", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5), Fp(FpWidth::S, 16)], 0x1e204800, NOV, Base, None;
    FMAX_D = "fmax", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 5), Fp(FpWidth::D, 16)], 0x1e604800, NOV, Base, None;
    FMIN_S = "fmin", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5), Fp(FpWidth::S, 16)], 0x1e205800, NOV, Base, None;
    FMIN_D = "fmin", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 5), Fp(FpWidth::D, 16)], 0x1e605800, NOV, Base, None;
    FMAXNM_S = "fmaxnm", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5), Fp(FpWidth::S, 16)], 0x1e206800, NOV, Base, None;
    FMAXNM_D = "fmaxnm", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 5), Fp(FpWidth::D, 16)], 0x1e606800, NOV, Base, None;
    FMINNM_S = "fminnm", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5), Fp(FpWidth::S, 16)], 0x1e207800, NOV, Base, None;
    FMINNM_D = "fminnm", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 5), Fp(FpWidth::D, 16)], 0x1e607800, NOV, Base, None;
    FNMUL_S = "fnmul", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5), Fp(FpWidth::S, 16)], 0x1e208800, NOV, Base, None;
    FABS_S = "fabs", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5)], 0x1e20c000, NOV, Base, None;
    FABS_D = "fabs", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 5)], 0x1e60c000, NOV, Base, None;
    FNEG_S = "fneg", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5)], 0x1e214000, NOV, Base, None;
    FNEG_D = "fneg", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 5)], 0x1e614000, NOV, Base, None;
    FSQRT_S = "fsqrt", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5)], 0x1e21c000, NOV, Base, None;
    FSQRT_D = "fsqrt", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 5)], 0x1e61c000, NOV, Base, None;
    FRINTN_S = "frintn", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5)], 0x1e244000, NOV, Base, None;
    FRINTM_S = "frintm", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5)], 0x1e254000, NOV, Base, None;
    FRINTZ_S = "frintz", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5)], 0x1e25c000, NOV, Base, None;
    FRINTP_S = "frintp", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5)], 0x1e24c000, NOV, Base, None;
    FRINTN_D = "frintn", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 5)], 0x1e644000, NOV, Base, None;
    FRINTM_D = "frintm", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 5)], 0x1e654000, NOV, Base, None;
    FMADD_S = "fmadd", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5), Fp(FpWidth::S, 16), Fp(FpWidth::S, 10)], 0x1f000000, NOV, Base, None;
    FMADD_D = "fmadd", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 5), Fp(FpWidth::D, 16), Fp(FpWidth::D, 10)], 0x1f400000, NOV, Base, None;
    FMSUB_S = "fmsub", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5), Fp(FpWidth::S, 16), Fp(FpWidth::S, 10)], 0x1f008000, NOV, Base, None;
    FMSUB_D = "fmsub", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 5), Fp(FpWidth::D, 16), Fp(FpWidth::D, 10)], 0x1f408000, NOV, Base, None;
    FCVT_D_S = "fcvt", [Fp(FpWidth::D, 0), Fp(FpWidth::S, 5)], 0x1e22c000, NOV, Base, None;
    FCVT_S_D = "fcvt", [Fp(FpWidth::S, 0), Fp(FpWidth::D, 5)], 0x1e624000, NOV, Base, None;
    FCVT_S_H = "fcvt", [Fp(FpWidth::S, 0), Fp(FpWidth::H, 5)], 0x1ee24000, NOV, Base, None;
    FCVT_H_S = "fcvt", [Fp(FpWidth::H, 0), Fp(FpWidth::S, 5)], 0x1e23c000, NOV, Base, None;
    FCMP_S = "fcmp", [Fp(FpWidth::S, 5), Fp(FpWidth::S, 16)], 0x1e202000, NOV, Base, None;
    FCMP_D = "fcmp", [Fp(FpWidth::D, 5), Fp(FpWidth::D, 16)], 0x1e602000, NOV, Base, None;
    FCMP_S_Z = "fcmp {0}, #0.0", [Fp(FpWidth::S, 5)], 0x1e202008, NOV, Base, None;
    FCSEL_S = "fcsel", [Fp(FpWidth::S, 0), Fp(FpWidth::S, 5), Fp(FpWidth::S, 16), Cond(12)], 0x1e200c00, NOV, Base, None;
    FCSEL_D = "fcsel", [Fp(FpWidth::D, 0), Fp(FpWidth::D, 5), Fp(FpWidth::D, 16), Cond(12)], 0x1e600c00, NOV, Base, None;
    // ---- Conversions between FP and general registers ----
    FCVTZS_W_S = "fcvtzs", [W(0), Fp(FpWidth::S, 5)], 0x1e380000, NOV, Base, None;
    FCVTZS_X_S = "fcvtzs", [X(0), Fp(FpWidth::S, 5)], 0x9e380000, NOV, Base, None;
    FCVTZS_W_D = "fcvtzs", [W(0), Fp(FpWidth::D, 5)], 0x1e780000, NOV, Base, None;
    FCVTZS_X_D = "fcvtzs", [X(0), Fp(FpWidth::D, 5)], 0x9e780000, NOV, Base, None;
    FCVTZU_W_S = "fcvtzu", [W(0), Fp(FpWidth::S, 5)], 0x1e390000, NOV, Base, None;
    FCVTZU_X_S = "fcvtzu", [X(0), Fp(FpWidth::S, 5)], 0x9e390000, NOV, Base, None;
    FCVTZU_W_D = "fcvtzu", [W(0), Fp(FpWidth::D, 5)], 0x1e790000, NOV, Base, None;
    FCVTZU_X_D = "fcvtzu", [X(0), Fp(FpWidth::D, 5)], 0x9e790000, NOV, Base, None;
    FCVTNS_W_S = "fcvtns", [W(0), Fp(FpWidth::S, 5)], 0x1e200000, NOV, Base, None;
    FCVTNS_X_S = "fcvtns", [X(0), Fp(FpWidth::S, 5)], 0x9e200000, NOV, Base, None;
    FCVTNS_W_D = "fcvtns", [W(0), Fp(FpWidth::D, 5)], 0x1e600000, NOV, Base, None;
    FCVTNS_X_D = "fcvtns", [X(0), Fp(FpWidth::D, 5)], 0x9e600000, NOV, Base, None;
    FCVTMS_W_S = "fcvtms", [W(0), Fp(FpWidth::S, 5)], 0x1e300000, NOV, Base, None;
    FCVTMS_X_S = "fcvtms", [X(0), Fp(FpWidth::S, 5)], 0x9e300000, NOV, Base, None;
    FCVTMS_W_D = "fcvtms", [W(0), Fp(FpWidth::D, 5)], 0x1e700000, NOV, Base, None;
    FCVTMS_X_D = "fcvtms", [X(0), Fp(FpWidth::D, 5)], 0x9e700000, NOV, Base, None;
    SCVTF_S_W = "scvtf", [Fp(FpWidth::S, 0), W(5)], 0x1e220000, NOV, Base, None;
    SCVTF_S_X = "scvtf", [Fp(FpWidth::S, 0), X(5)], 0x9e220000, NOV, Base, None;
    SCVTF_D_W = "scvtf", [Fp(FpWidth::D, 0), W(5)], 0x1e620000, NOV, Base, None;
    SCVTF_D_X = "scvtf", [Fp(FpWidth::D, 0), X(5)], 0x9e620000, NOV, Base, None;
    UCVTF_S_W = "ucvtf", [Fp(FpWidth::S, 0), W(5)], 0x1e230000, NOV, Base, None;
    UCVTF_S_X = "ucvtf", [Fp(FpWidth::S, 0), X(5)], 0x9e230000, NOV, Base, None;
    UCVTF_D_W = "ucvtf", [Fp(FpWidth::D, 0), W(5)], 0x1e630000, NOV, Base, None;
    UCVTF_D_X = "ucvtf", [Fp(FpWidth::D, 0), X(5)], 0x9e630000, NOV, Base, None;
    SCVTF_SCALAR = "scvtf", [VFp(0), VFp(5)], 0x5e21d800, V_SD, Base, None;
    UCVTF_SCALAR = "ucvtf", [VFp(0), VFp(5)], 0x7e21d800, V_SD, Base, None;
    FCVTZS_SCALAR = "fcvtzs", [VFp(0), VFp(5)], 0x5ea1b800, V_SD, Base, None;
    // ---- Integer vector, three registers ----
    ADD_V = "add", [V(0), V(5), V(16)], 0x0e208400, V_BHSD, Base, None;
    SUB_V = "sub", [V(0), V(5), V(16)], 0x2e208400, V_BHSD, Base, None;
    MUL_V = "mul", [V(0), V(5), V(16)], 0x0e209c00, V_BHS, Base, None;
    MLA_V = "mla", [V(0), V(5), V(16)], 0x0e209400, V_BHS, Base, None;
    MLS_V = "mls", [V(0), V(5), V(16)], 0x2e209400, V_BHS, Base, None;
    ADDP_V = "addp", [V(0), V(5), V(16)], 0x0e20bc00, V_BHSD, Base, None;
    CMEQ_V = "cmeq", [V(0), V(5), V(16)], 0x2e208c00, V_BHSD, Base, None;
    CMGT_V = "cmgt", [V(0), V(5), V(16)], 0x0e203400, V_BHSD, Base, None;
    CMGE_V = "cmge", [V(0), V(5), V(16)], 0x0e203c00, V_BHSD, Base, None;
    CMHI_V = "cmhi", [V(0), V(5), V(16)], 0x2e203400, V_BHSD, Base, None;
    CMHS_V = "cmhs", [V(0), V(5), V(16)], 0x2e203c00, V_BHSD, Base, None;
    CMTST_V = "cmtst", [V(0), V(5), V(16)], 0x0e208c00, V_BHSD, Base, None;
    CMEQ_Z = "cmeq {0}, {1}, #0", [V(0), V(5)], 0x0e209800, V_BHSD, Base, None;
    SMAX_V = "smax", [V(0), V(5), V(16)], 0x0e206400, V_BHS, Base, None;
    SMIN_V = "smin", [V(0), V(5), V(16)], 0x0e206c00, V_BHS, Base, None;
    UMAX_V = "umax", [V(0), V(5), V(16)], 0x2e206400, V_BHS, Base, None;
    UMIN_V = "umin", [V(0), V(5), V(16)], 0x2e206c00, V_BHS, Base, None;
    SSHL_V = "sshl", [V(0), V(5), V(16)], 0x0e204400, V_BHSD, Base, None;
    USHL_V = "ushl", [V(0), V(5), V(16)], 0x2e204400, V_BHSD, Base, None;
    ZIP1 = "zip1", [V(0), V(5), V(16)], 0x0e003800, V_BHSD, Base, None;
    ZIP2 = "zip2", [V(0), V(5), V(16)], 0x0e007800, V_BHSD, Base, None;
    UZP1 = "uzp1", [V(0), V(5), V(16)], 0x0e001800, V_BHSD, Base, None;
    UZP2 = "uzp2", [V(0), V(5), V(16)], 0x0e005800, V_BHSD, Base, None;
    TRN1 = "trn1", [V(0), V(5), V(16)], 0x0e002800, V_BHSD, Base, None;
    TRN2 = "trn2", [V(0), V(5), V(16)], 0x0e006800, V_BHSD, Base, None;
    // ---- Integer vector, two registers and across lanes ----
    ABS_V = "abs", [V(0), V(5)], 0x0e20b800, V_BHSD, Base, None;
    NEG_V = "neg", [V(0), V(5)], 0x2e20b800, V_BHSD, Base, None;
    CNT_V = "cnt", [V(0), V(5)], 0x0e205800, V_B, Base, None;
    NOT_V = "mvn", [V(0), V(5)], 0x2e205800, V_B, Base, None;
    ADDV = "addv", [VFp(0), V(5)], 0x0e31b800, V_ADDV, Base, None;
    SADDLV = "saddlv", [VFp(0), V(5)], 0x0e303800, V_ADDLV, Base, None;
    UADDLV = "uaddlv", [VFp(0), V(5)], 0x2e303800, V_ADDLV, Base, None;
    SADDLP = "saddlp", [V(0), V(5)], 0x0e202800, V_ADDLP, Base, None;
    UADDLP = "uaddlp", [V(0), V(5)], 0x2e202800, V_ADDLP, Base, None;
    SMAXV = "smaxv", [VFp(0), V(5)], 0x0e30a800, V_ADDV, Base, None;
    SMINV = "sminv", [VFp(0), V(5)], 0x0e31a800, V_ADDV, Base, None;
    UMAXV = "umaxv", [VFp(0), V(5)], 0x2e30a800, V_ADDV, Base, None;
    UMINV = "uminv", [VFp(0), V(5)], 0x2e31a800, V_ADDV, Base, None;
    FADDP_SCALAR = "faddp", [VFp(0), V(5)], 0x7e30d800, V_FADDP_S, Base, None;
    ADDP_SCALAR = "addp", [Fp(FpWidth::D, 0), V(5)], 0x5ef1b800, V_2D, Base, None;
    // ---- Widening and narrowing ----
    SMULL = "smull", [V(0), V(5), V(16)], 0x0e20c000, V_LONG, Base, None;
    SMULL2 = "smull2", [V(0), V(5), V(16)], 0x4e20c000, V_LONG2, Base, None;
    UMULL = "umull", [V(0), V(5), V(16)], 0x2e20c000, V_LONG, Base, None;
    UMULL2 = "umull2", [V(0), V(5), V(16)], 0x6e20c000, V_LONG2, Base, None;
    SMLAL = "smlal", [V(0), V(5), V(16)], 0x0e208000, V_LONG, Base, None;
    SMLAL2 = "smlal2", [V(0), V(5), V(16)], 0x4e208000, V_LONG2, Base, None;
    UMLAL = "umlal", [V(0), V(5), V(16)], 0x2e208000, V_LONG, Base, None;
    UMLAL2 = "umlal2", [V(0), V(5), V(16)], 0x6e208000, V_LONG2, Base, None;
    SSHLL = "sshll", [V(0), V(5), ShlImm(1)], 0x0f00a400, V_SHLL, Base, None;
    SSHLL2 = "sshll2", [V(0), V(5), ShlImm(1)], 0x4f00a400, V_SHLL2, Base, None;
    USHLL = "ushll", [V(0), V(5), ShlImm(1)], 0x2f00a400, V_SHLL, Base, None;
    USHLL2 = "ushll2", [V(0), V(5), ShlImm(1)], 0x6f00a400, V_SHLL2, Base, None;
    XTN = "xtn", [V(0), V(5)], 0x0e212800, V_NARROW, Base, None;
    XTN2 = "xtn2", [V(0), V(5)], 0x4e212800, V_NARROW2, Base, None;
    SQXTN = "sqxtn", [V(0), V(5)], 0x0e214800, V_NARROW, Base, None;
    SQXTN2 = "sqxtn2", [V(0), V(5)], 0x4e214800, V_NARROW2, Base, None;
    SQXTUN = "sqxtun", [V(0), V(5)], 0x2e212800, V_NARROW, Base, None;
    SQXTUN2 = "sqxtun2", [V(0), V(5)], 0x6e212800, V_NARROW2, Base, None;
    UQXTN = "uqxtn", [V(0), V(5)], 0x2e214800, V_NARROW, Base, None;
    UQXTN2 = "uqxtn2", [V(0), V(5)], 0x6e214800, V_NARROW2, Base, None;
    SHRN = "shrn", [V(0), V(5), ShrImm(0)], 0x0f008400, V_SHRN, Base, None;
    // ---- Shift by immediate ----
    SHL_V = "shl", [V(0), V(5), ShlImm(0)], 0x0f005400, V_SHQ, Base, None;
    USHR_V = "ushr", [V(0), V(5), ShrImm(0)], 0x2f000400, V_SHQ, Base, None;
    SSHR_V = "sshr", [V(0), V(5), ShrImm(0)], 0x0f000400, V_SHQ, Base, None;
    SRSHR_V = "srshr", [V(0), V(5), ShrImm(0)], 0x0f002400, V_SHQ, Base, None;
    URSHR_V = "urshr", [V(0), V(5), ShrImm(0)], 0x2f002400, V_SHQ, Base, None;
    // ---- Bitwise vector ----
    AND_V = "and", [V(0), V(5), V(16)], 0x0e201c00, V_B, Base, None;
    ORR_V = "orr", [V(0), V(5), V(16)], 0x0ea01c00, V_B, Base, MovV;
    EOR_V = "eor", [V(0), V(5), V(16)], 0x2e201c00, V_B, Base, None;
    BIC_V = "bic", [V(0), V(5), V(16)], 0x0e601c00, V_B, Base, None;
    ORN_V = "orn", [V(0), V(5), V(16)], 0x0ee01c00, V_B, Base, None;
    BSL_V = "bsl", [V(0), V(5), V(16)], 0x2e601c00, V_B, Base, None;
    BIT_V = "bit", [V(0), V(5), V(16)], 0x2ea01c00, V_B, Base, None;
    BIF_V = "bif", [V(0), V(5), V(16)], 0x2ee01c00, V_B, Base, None;
    // ---- Permutes and tables ----
    EXT_V = "ext", [V(0), V(5), V(16), ExtIdx], 0x2e000000, V_B, Base, None;
    TBL_1 = "tbl", [V(0), List(1, 5), V(16)], 0x0e000000, V_TBL, Base, None;
    TBL_2 = "tbl", [V(0), List(2, 5), V(16)], 0x0e002000, V_TBL, Base, None;
    TBL_3 = "tbl", [V(0), List(3, 5), V(16)], 0x0e004000, V_TBL, Base, None;
    TBL_4 = "tbl", [V(0), List(4, 5), V(16)], 0x0e006000, V_TBL, Base, None;
    TBX_1 = "tbx", [V(0), List(1, 5), V(16)], 0x0e001000, V_TBL, Base, None;
    // ---- Dot products and matrix multiplies ----
    SDOT_V = "sdot", [V(0), V(5), V(16)], 0x0e809400, V_DOT, Dotprod, None;
    UDOT_V = "udot", [V(0), V(5), V(16)], 0x2e809400, V_DOT, Dotprod, None;
    USDOT_V = "usdot", [V(0), V(5), V(16)], 0x0e809c00, V_DOT, I8mm, None;
    SDOT_ELEM = "sdot", [V(0), V(5), Elem(16, Idx::Hl)], 0x0f80e000, V_DOTE, Dotprod, None;
    UDOT_ELEM = "udot", [V(0), V(5), Elem(16, Idx::Hl)], 0x2f80e000, V_DOTE, Dotprod, None;
    USDOT_ELEM = "usdot", [V(0), V(5), Elem(16, Idx::Hl)], 0x0f80f000, V_DOTE, I8mm, None;
    SUDOT_ELEM = "sudot", [V(0), V(5), Elem(16, Idx::Hl)], 0x0f00f000, V_DOTE, I8mm, None;
    SMMLA = "smmla", [V(0), V(5), V(16)], 0x4e80a400, V_MMLA, I8mm, None;
    UMMLA = "ummla", [V(0), V(5), V(16)], 0x6e80a400, V_MMLA, I8mm, None;
    USMMLA = "usmmla", [V(0), V(5), V(16)], 0x4e80ac00, V_MMLA, I8mm, None;
    BFDOT_V = "bfdot", [V(0), V(5), V(16)], 0x2e40fc00, V_BFDOT, Bf16, None;
    BFDOT_ELEM = "bfdot", [V(0), V(5), Elem(16, Idx::Hl)], 0x0f40f000, V_BFDOTE, Bf16, None;
    BFMMLA = "bfmmla", [V(0), V(5), V(16)], 0x6e40ec00, V_BFMMLA, Bf16, None;
    BFCVTN = "bfcvtn", [V(0), V(5)], 0x0ea16800, &[v!(0; A(H4), A(S4))], Bf16, None;
}
