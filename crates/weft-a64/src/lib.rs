//! An A64 (AArch64) encoder and decoder driven by one table of forms.
//!
//! Its one job: turn typed A64 instructions into 32-bit words for Weft's
//! arm64 twins, and back. What it promises:
//!
//! - **Typed operands, no silent truncation.** X, W, SP and ZR are distinct
//!   ([`Gpr`]); vector registers carry their arrangement (`v(0).s4()`) or
//!   element (`v(3).s(1)`). An out-of-range immediate, an unallocated
//!   arrangement, a register of the wrong class, `ldp` with Rt == Rt2 or an
//!   out-of-range branch is an [`EncodeError`], never a masked field.
//! - **One table.** Every form is one row of [`FORMS`] (mnemonic, operand
//!   kinds with their bit positions, base bits, arrangement variants,
//!   [`Feature`]); the encoder, the decoder, the text printer and the
//!   checks all read it.
//! - **Every encodable form decodes and round-trips.** [`decode`] knows
//!   every form in the table: `decode(encode(i))` gives `i` back, unknown
//!   words give `None`, and no word panics.
//! - **LLVM is the referee.** `cargo xtask check-encodings` assembles
//!   tens of thousands of generated instructions with llvm-mc 14 and compares
//!   word for word, disassembles our words and compares the text (which is
//!   llvm's, preferred aliases included), and checks that what we reject
//!   llvm rejects too. Its agreed output is the golden file this crate's
//!   tests replay without LLVM.
//!
//! # Example
//!
//! A loop that adds two f32 arrays four lanes at a time:
//!
//! ```
//! use weft_a64::*;
//!
//! # fn main() -> Result<(), EncodeError> {
//! let mut a = Assembler::new();
//! let top = a.new_label();
//! a.bind(top)?;
//! a.ld1(v(0).list(1, Arr::S4), mem(x(0)).post(16))?;
//! a.ld1(v(1).list(1, Arr::S4), mem(x(1)).post(16))?;
//! a.fadd(v(2).s4(), v(0).s4(), v(1).s4())?;
//! a.st1(v(2).list(1, Arr::S4), mem(x(2)).post(16))?;
//! a.subs(x(3), x(3), 1)?;
//! a.b_cond(Cond::Ne, top)?;
//! a.ret()?;
//! let words = a.finish()?;
//! assert_eq!(words.len(), 7);
//! assert_eq!(decode(words[2]).unwrap().to_string(), "fadd v2.4s, v0.4s, v1.4s");
//! assert_eq!(decode(words[5]).unwrap().to_string(), "b.ne #-20");
//!
//! // Typed operands catch mistakes instead of truncating:
//! assert!(Inst::new(Op::ADD_IMM_X, (x(0), x(1), 4096)).is_err());
//! assert!(a64_err(Inst::new(Op::LDP_X_OFF, (x(1), x(1), mem(SP)))));
//! # Ok(()) }
//! # fn a64_err<T>(r: Result<T, EncodeError>) -> bool { r.is_err() }
//! ```

mod asm;
mod display;
mod form;
mod operand;
pub mod sample;
mod table;

pub use asm::Assembler;
pub use form::{
    decode_bitmask, encode_bitmask, kind_name, Alias, Feature, Form, Idx, Kind, MemKind, Shape,
    Variant, BARRIERS,
};
pub use operand::*;
pub use table::{Op, FORMS};

use core::fmt;

/// The most operands any form has.
pub const MAX_OPS: usize = 5;

/// Why an instruction could not be encoded. Names are stable: search for them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The form takes a different number of operands.
    OperandCount {
        /// The form.
        form: &'static str,
        /// Operands it takes.
        expected: usize,
        /// Operands given.
        got: usize,
    },
    /// An operand of the wrong class (W where X belongs, SP where ZR belongs, ...).
    RegisterClass {
        /// The form.
        form: &'static str,
        /// Operand slot (0-based).
        slot: usize,
        /// What the slot accepts.
        expected: &'static str,
    },
    /// No variant of the form has these arrangements (e.g. `fadd v0.8b`).
    Arrangement {
        /// The form.
        form: &'static str,
    },
    /// An immediate outside the encodable range.
    ImmOutOfRange {
        /// The form.
        form: &'static str,
        /// Operand slot.
        slot: usize,
        /// The value given.
        value: i64,
        /// Smallest encodable.
        min: i64,
        /// Largest encodable.
        max: i64,
    },
    /// An immediate that is not a multiple of the field's scale.
    Misaligned {
        /// The form.
        form: &'static str,
        /// Operand slot.
        slot: usize,
        /// The value given.
        value: i64,
        /// Required multiple.
        align: u32,
    },
    /// Not a logical (bitmask) immediate.
    NotABitmask {
        /// The form.
        form: &'static str,
        /// The value given.
        value: u64,
    },
    /// A MOVI .2d immediate whose bytes are not each 0x00 or 0xff.
    NotAByteMask {
        /// The form.
        form: &'static str,
        /// The value given.
        value: u64,
    },
    /// A shift or extension this form does not allow (ROR on add, LSL as an extend).
    BadShift {
        /// The form.
        form: &'static str,
    },
    /// An addressing mode (or index register) this form does not have.
    AddressingMode {
        /// The form.
        form: &'static str,
    },
    /// `ldp` with Rt == Rt2 (CONSTRAINED UNPREDICTABLE).
    LdpSameRegisters {
        /// The form.
        form: &'static str,
    },
    /// Pre/post-index writeback to a base that is also a transfer register.
    WritebackOverlap {
        /// The form.
        form: &'static str,
    },
    /// A label operand outside an [`Assembler`], or never bound at `finish`.
    UnresolvedLabel,
    /// A label bound twice.
    LabelRebound,
    /// A branch whose label is farther than its offset field reaches.
    BranchOutOfRange {
        /// The form.
        form: &'static str,
        /// The byte offset needed.
        offset: i64,
    },
    /// No form with this mnemonic takes these operands.
    NoMatchingForm {
        /// The mnemonic.
        mnemonic: &'static str,
    },
}

impl EncodeError {
    /// The error's stable name, as printed before the colon.
    pub fn name(&self) -> &'static str {
        match self {
            EncodeError::OperandCount { .. } => "operand-count",
            EncodeError::RegisterClass { .. } => "register-class",
            EncodeError::Arrangement { .. } => "arrangement",
            EncodeError::ImmOutOfRange { .. } => "imm-out-of-range",
            EncodeError::Misaligned { .. } => "misaligned",
            EncodeError::NotABitmask { .. } => "not-a-bitmask",
            EncodeError::NotAByteMask { .. } => "not-a-byte-mask",
            EncodeError::BadShift { .. } => "bad-shift",
            EncodeError::AddressingMode { .. } => "addressing-mode",
            EncodeError::LdpSameRegisters { .. } => "ldp-same-registers",
            EncodeError::WritebackOverlap { .. } => "writeback-overlap",
            EncodeError::UnresolvedLabel => "unresolved-label",
            EncodeError::LabelRebound => "label-rebound",
            EncodeError::BranchOutOfRange { .. } => "branch-out-of-range",
            EncodeError::NoMatchingForm { .. } => "no-matching-form",
        }
    }
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.name())?;
        match *self {
            EncodeError::OperandCount {
                form,
                expected,
                got,
            } => write!(f, "{form} takes {expected} operands, {got} given"),
            EncodeError::RegisterClass {
                form,
                slot,
                expected,
            } => write!(f, "{form} operand {slot} must be {expected}"),
            EncodeError::Arrangement { form } => {
                write!(f, "{form} has no variant with these arrangements")
            }
            EncodeError::ImmOutOfRange {
                form,
                slot,
                value,
                min,
                max,
            } => write!(f, "{form} operand {slot}: {value} is outside {min}..={max}"),
            EncodeError::Misaligned {
                form,
                slot,
                value,
                align,
            } => write!(
                f,
                "{form} operand {slot}: {value} is not a multiple of {align}"
            ),
            EncodeError::NotABitmask { form, value } => {
                write!(f, "{form}: {value:#x} is not a logical immediate")
            }
            EncodeError::NotAByteMask { form, value } => {
                write!(f, "{form}: {value:#x} has bytes other than 0x00 and 0xff")
            }
            EncodeError::BadShift { form } => {
                write!(f, "{form} does not take this shift or extension")
            }
            EncodeError::AddressingMode { form } => {
                write!(f, "{form} does not have this addressing mode")
            }
            EncodeError::LdpSameRegisters { form } => {
                write!(
                    f,
                    "{form} with both transfer registers equal is unpredictable"
                )
            }
            EncodeError::WritebackOverlap { form } => {
                write!(f, "{form} writes back to a base that is also transferred")
            }
            EncodeError::UnresolvedLabel => {
                write!(f, "a label used outside an assembler, or never bound")
            }
            EncodeError::LabelRebound => write!(f, "a label bound twice"),
            EncodeError::BranchOutOfRange { form, offset } => {
                write!(f, "{form} cannot reach {offset} bytes")
            }
            EncodeError::NoMatchingForm { mnemonic } => {
                write!(f, "no form of {mnemonic} takes these operands")
            }
        }
    }
}

impl std::error::Error for EncodeError {}

/// One instruction: a form and its operands (validated: it encodes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Inst {
    op: Op,
    ops: [Operand; MAX_OPS],
}

/// Things that can be an operand list: tuples of up to five `Into<Operand>`,
/// arrays and slices of [`Operand`].
pub trait IntoOperands {
    /// The operands, in order.
    fn into_operands(self) -> Vec<Operand>;
}

impl IntoOperands for () {
    fn into_operands(self) -> Vec<Operand> {
        Vec::new()
    }
}
impl IntoOperands for &[Operand] {
    fn into_operands(self) -> Vec<Operand> {
        self.to_vec()
    }
}
impl<const N: usize> IntoOperands for [Operand; N] {
    fn into_operands(self) -> Vec<Operand> {
        self.to_vec()
    }
}
macro_rules! tuple_ops {
    ($($t:ident),+) => {
        impl<$($t: Into<Operand>),+> IntoOperands for ($($t,)+) {
            #[allow(non_snake_case)]
            fn into_operands(self) -> Vec<Operand> {
                let ($($t,)+) = self;
                vec![$($t.into()),+]
            }
        }
    };
}
tuple_ops!(A);
tuple_ops!(A, B);
tuple_ops!(A, B, C);
tuple_ops!(A, B, C, D);
tuple_ops!(A, B, C, D, E);

fn resolve_for_check(ops: &mut [Operand]) {
    for o in ops {
        if let Operand::Target(Target::Label(_)) = o {
            *o = Operand::Target(Target::Offset(0));
        }
    }
}

impl Inst {
    /// An instruction of form `op`. Trailing optional operands (`lsl #0`
    /// shifts, `ret`'s x30) may be left out. Label targets are allowed (the
    /// [`Assembler`] resolves them); everything else must encode.
    pub fn new(op: Op, ops: impl IntoOperands) -> Result<Inst, EncodeError> {
        let form = &FORMS[op as usize];
        let ops = form.complete(&ops.into_operands())?;
        let mut check = ops;
        resolve_for_check(&mut check);
        form.encode(&check[..form.kinds.len()])?;
        Ok(Inst { op, ops })
    }

    /// An instruction without validation (for printing rejected inputs in
    /// tests); [`Inst::encode`] still reports its error.
    pub fn new_unchecked(op: Op, ops: &[Operand]) -> Inst {
        let mut a = [Operand::None; MAX_OPS];
        a[..ops.len()].copy_from_slice(ops);
        Inst { op, ops: a }
    }

    /// The first form with assembler mnemonic `mnemonic` that takes `ops`.
    /// On failure, the error of the first candidate with a matching count.
    pub fn with_mnemonic(
        mnemonic: &'static str,
        ops: impl IntoOperands,
    ) -> Result<Inst, EncodeError> {
        let ops = ops.into_operands();
        let mut first_err = None;
        for f in FORMS.iter().filter(|f| f.asm_mnemonic() == mnemonic) {
            match Inst::new(f.op, ops.as_slice()) {
                Ok(i) => return Ok(i),
                Err(e) => {
                    let count = matches!(e, EncodeError::OperandCount { .. });
                    if first_err.is_none() && !count {
                        first_err = Some(e);
                    }
                }
            }
        }
        Err(first_err.unwrap_or(EncodeError::NoMatchingForm { mnemonic }))
    }

    /// The form.
    pub fn op(&self) -> Op {
        self.op
    }

    /// The form's table row.
    pub fn form(&self) -> &'static Form {
        &FORMS[self.op as usize]
    }

    /// The operands (as many as the form has).
    pub fn operands(&self) -> &[Operand] {
        &self.ops[..self.form().kinds.len()]
    }

    /// The 32-bit word. Fails on unresolved labels and on unchecked operands.
    pub fn encode(&self) -> Result<u32, EncodeError> {
        self.form().encode(self.operands())
    }

    /// The text with no preferred alias applied (the form's own mnemonic and
    /// operands): what llvm is given when a rejected input is checked.
    pub fn text_without_alias(&self) -> String {
        display::raw_text(self)
    }

    /// The CPU feature this instruction needs.
    pub fn feature(&self) -> Feature {
        self.form().feature
    }
}

/// Decode one word into the form that encodes it. Unknown or unallocated
/// words give `None`; no word panics.
pub fn decode(word: u32) -> Option<Inst> {
    FORMS
        .iter()
        .find_map(|f| f.decode(word).map(|ops| Inst { op: f.op, ops }))
}

#[cfg(test)]
mod tests;
