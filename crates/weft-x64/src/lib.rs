//! A narrow emitter façade over iced-x86's `CodeAssembler` for kernel
//! twins: SysV and Win64 entry and exit, labels and counted loops,
//! constants broadcast at the point of use, an explicit EVEX switch, and a
//! listing of the bytes produced.
//!
//! Invariants: every function is 64-bit code encoded at offset 0 and
//! entered with one pointer argument (the leaf ABI's argument struct) in
//! [`Abi::args_reg`]; a callee-saved register the body writes must be
//! declared in the [`Clobbers`] given to [`Emitter::prologue`], and
//! [`Emitter::finish`] refuses the function otherwise; constants never
//! come from memory; nothing here panics: every failure is an
//! [`EmitError`]; the [`Listing`] is decoded from the final bytes, never
//! from what was asked for. Everything the façade does not wrap is one
//! [`Emitter::asm`] away.
//!
//! iced-x86 is re-exported as [`iced_x86`] so that users name the same
//! version's registers and operands.

mod abi;
mod emitter;
mod error;
mod listing;

pub use abi::{Abi, Clobbers};
pub use emitter::{Emitted, Emitter, Encoding, VectorReg};
pub use error::EmitError;
pub use iced_x86;
pub use listing::{Listing, ListingLine};
