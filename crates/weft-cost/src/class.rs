//! What an instruction is, for pricing: its [`Class`] (the kind of work,
//! which a port table maps to µops, latency and ports) and its [`Width`].
//!
//! Classes are ISA-neutral: both decoders map their instructions onto this
//! one list, and every port table has a row for each class and width it can
//! meet. The names are those the tables use.

use std::fmt;

/// The kind of work an instruction does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// Integer add, sub, logic, compare, test, inc/dec, extend, setcc, cmov.
    IntAlu,
    /// Integer shift, rotate, bit-field extract.
    IntShift,
    /// Integer multiply (and multiply-add).
    IntMul,
    /// Integer divide.
    IntDiv,
    /// Address arithmetic that takes the slow path (three operands or a scale).
    LeaSlow,
    /// A register-to-register general move (renamed away where the core can).
    Move,
    /// A general register set from an immediate.
    MovImm,
    /// A general-register load (also `pop`).
    Load,
    /// A general-register store (also `push`).
    Store,
    /// A software prefetch.
    Prefetch,
    /// A direct jump, conditional branch or return.
    Branch,
    /// No operation.
    Nop,
    /// A register cleared by a dependency-breaking idiom (`xor r, r`).
    ZeroIdiom,
    /// A vector register-to-register move.
    VecMove,
    /// A vector load.
    VecLoad,
    /// A vector store (also a single element stored from a vector).
    VecStore,
    /// A load that broadcasts one element to every lane.
    VecBroadcastLoad,
    /// Vector and, or, xor, and-not, bit select.
    VecLogic,
    /// Vector integer add, sub, compare, min/max.
    VecIntAlu,
    /// Vector integer ops with fewer pipes (abs, sign, saturating).
    VecIntAluSlow,
    /// Vector integer multiply, multiply-add of pairs, widening multiplies.
    VecIntMul,
    /// Vector integer shift.
    VecShift,
    /// A shuffle within 128-bit lanes (unpack, shuffle, movshdup, zip, ext).
    VecShuffle,
    /// A horizontal add of adjacent pairs (`phaddd`, `haddps`): decoded as
    /// shuffles feeding an add, so several macro-ops.
    VecHorizontalAdd,
    /// A shuffle across 128-bit lanes (extract, permute).
    VecShuffleCross,
    /// A 128- or 256-bit insert, or a broadcast from a vector register.
    VecInsert,
    /// A blend selected by an immediate or a mask register.
    VecBlend,
    /// A blend selected by a vector of sign bits.
    VecBlendVar,
    /// Floating-point add or subtract.
    FpAdd,
    /// Floating-point multiply.
    FpMul,
    /// Fused multiply-add.
    Fma,
    /// Floating-point min or max.
    FpMinMax,
    /// Floating-point compare into a vector or mask.
    FpCmp,
    /// Scalar floating-point compare into the flags.
    FpCmpFlags,
    /// Conversions between integer and floating point of the same lane width.
    FpCvt,
    /// Conversions that widen the lanes (`vcvtps2pd`, `vcvtph2ps`, `fcvtl`).
    FpCvtWiden,
    /// Conversions that narrow the lanes (`vcvtpd2ps`, `vcvtps2ph`, `fcvtn`).
    FpCvtNarrow,
    /// Floating-point rounding to an integral value.
    FpRound,
    /// Floating-point divide.
    FpDiv,
    /// Floating-point square root.
    FpSqrt,
    /// Dot product of 8-bit integers into 32-bit lanes (`vpdpbusd`, `sdot`).
    DotI8,
    /// Mask-register logic (AVX-512 `k` registers).
    MaskOp,
    /// A vector test into the flags (`vptest`, `kortest`).
    VecTest,
    /// A value moved from a vector (or mask) register to a general register.
    VecToGpr,
    /// A value moved from a general register to a vector register.
    GprToVec,
    /// A gather load.
    Gather,
    /// An instruction the decoder knows but no class covers: priced as the
    /// table's conservative `unknown` row and counted.
    Unknown,
}

impl Class {
    /// Every class, in table order.
    pub const ALL: [Class; 46] = [
        Class::IntAlu,
        Class::IntShift,
        Class::IntMul,
        Class::IntDiv,
        Class::LeaSlow,
        Class::Move,
        Class::MovImm,
        Class::Load,
        Class::Store,
        Class::Prefetch,
        Class::Branch,
        Class::Nop,
        Class::ZeroIdiom,
        Class::VecMove,
        Class::VecLoad,
        Class::VecStore,
        Class::VecBroadcastLoad,
        Class::VecLogic,
        Class::VecIntAlu,
        Class::VecIntAluSlow,
        Class::VecIntMul,
        Class::VecShift,
        Class::VecShuffle,
        Class::VecHorizontalAdd,
        Class::VecShuffleCross,
        Class::VecInsert,
        Class::VecBlend,
        Class::VecBlendVar,
        Class::FpAdd,
        Class::FpMul,
        Class::Fma,
        Class::FpMinMax,
        Class::FpCmp,
        Class::FpCmpFlags,
        Class::FpCvt,
        Class::FpCvtWiden,
        Class::FpCvtNarrow,
        Class::FpRound,
        Class::FpDiv,
        Class::FpSqrt,
        Class::DotI8,
        Class::MaskOp,
        Class::VecTest,
        Class::VecToGpr,
        Class::GprToVec,
        Class::Gather,
    ];

    /// The name port tables use for this class (`fp.add`, `vec.load`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Class::IntAlu => "int.alu",
            Class::IntShift => "int.shift",
            Class::IntMul => "int.mul",
            Class::IntDiv => "int.div",
            Class::LeaSlow => "int.lea-slow",
            Class::Move => "int.move",
            Class::MovImm => "int.mov-imm",
            Class::Load => "int.load",
            Class::Store => "int.store",
            Class::Prefetch => "prefetch",
            Class::Branch => "branch",
            Class::Nop => "nop",
            Class::ZeroIdiom => "zero-idiom",
            Class::VecMove => "vec.move",
            Class::VecLoad => "vec.load",
            Class::VecStore => "vec.store",
            Class::VecBroadcastLoad => "vec.broadcast-load",
            Class::VecLogic => "vec.logic",
            Class::VecIntAlu => "vec.int-alu",
            Class::VecIntAluSlow => "vec.int-alu-slow",
            Class::VecIntMul => "vec.int-mul",
            Class::VecShift => "vec.shift",
            Class::VecShuffle => "vec.shuffle",
            Class::VecHorizontalAdd => "vec.hadd",
            Class::VecShuffleCross => "vec.shuffle-cross",
            Class::VecInsert => "vec.insert",
            Class::VecBlend => "vec.blend",
            Class::VecBlendVar => "vec.blend-var",
            Class::FpAdd => "fp.add",
            Class::FpMul => "fp.mul",
            Class::Fma => "fp.fma",
            Class::FpMinMax => "fp.minmax",
            Class::FpCmp => "fp.cmp",
            Class::FpCmpFlags => "fp.cmp-flags",
            Class::FpCvt => "fp.cvt",
            Class::FpCvtWiden => "fp.cvt-widen",
            Class::FpCvtNarrow => "fp.cvt-narrow",
            Class::FpRound => "fp.round",
            Class::FpDiv => "fp.div",
            Class::FpSqrt => "fp.sqrt",
            Class::DotI8 => "dot.i8",
            Class::MaskOp => "mask.op",
            Class::VecTest => "vec.test",
            Class::VecToGpr => "vec.to-gpr",
            Class::GprToVec => "gpr.to-vec",
            Class::Gather => "vec.gather",
            Class::Unknown => "unknown",
        }
    }

    /// The class a table calls `name`, if any (`unknown` included).
    pub fn from_name(name: &str) -> Option<Class> {
        if name == Class::Unknown.name() {
            return Some(Class::Unknown);
        }
        Class::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Whether the class itself is a memory access (so a memory operand
    /// adds no separate load or store µop).
    pub const fn is_memory(self) -> bool {
        matches!(
            self,
            Class::Load
                | Class::Store
                | Class::Prefetch
                | Class::VecLoad
                | Class::VecStore
                | Class::VecBroadcastLoad
                | Class::Gather
        )
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The data width an instruction works on: a general register or scalar,
/// or a vector of 128, 256 or 512 bits (arm64 64-bit vectors count as 128).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Width {
    /// General registers and scalar floating point.
    Scalar,
    /// 128-bit vectors (xmm, arm64 `v` registers).
    V128,
    /// 256-bit vectors (ymm).
    V256,
    /// 512-bit vectors (zmm).
    V512,
}

impl Width {
    /// Every width, narrowest first.
    pub const ALL: [Width; 4] = [Width::Scalar, Width::V128, Width::V256, Width::V512];

    /// The name port tables use (`s`, `x`, `y`, `z`).
    pub const fn name(self) -> &'static str {
        match self {
            Width::Scalar => "s",
            Width::V128 => "x",
            Width::V256 => "y",
            Width::V512 => "z",
        }
    }

    /// The width a table calls `name`, if any.
    pub fn from_name(name: &str) -> Option<Width> {
        Width::ALL.into_iter().find(|w| w.name() == name)
    }

    /// Bytes a full-width access of this width moves (8 for scalars).
    pub const fn bytes(self) -> u32 {
        match self {
            Width::Scalar => 8,
            Width::V128 => 16,
            Width::V256 => 32,
            Width::V512 => 64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_and_width_names_round_trip() {
        for c in Class::ALL {
            assert_eq!(Class::from_name(c.name()), Some(c));
        }
        assert_eq!(Class::from_name("unknown"), Some(Class::Unknown));
        assert_eq!(Class::from_name("no.such"), None);
        for w in Width::ALL {
            assert_eq!(Width::from_name(w.name()), Some(w));
        }
    }
}
