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

/// Vector registers by number (0–31), for emitters that allocate them by
/// index; numbers 16–31 need EVEX.
pub mod regs {
    use iced_x86::code_asm::{AsmRegisterXmm, AsmRegisterYmm, AsmRegisterZmm};

    /// xmm0..=xmm31.
    pub const XMM: [AsmRegisterXmm; 32] = {
        use iced_x86::code_asm::registers::xmm::*;
        [
            xmm0, xmm1, xmm2, xmm3, xmm4, xmm5, xmm6, xmm7, xmm8, xmm9, xmm10, xmm11, xmm12, xmm13,
            xmm14, xmm15, xmm16, xmm17, xmm18, xmm19, xmm20, xmm21, xmm22, xmm23, xmm24, xmm25,
            xmm26, xmm27, xmm28, xmm29, xmm30, xmm31,
        ]
    };
    /// ymm0..=ymm31.
    pub const YMM: [AsmRegisterYmm; 32] = {
        use iced_x86::code_asm::registers::ymm::*;
        [
            ymm0, ymm1, ymm2, ymm3, ymm4, ymm5, ymm6, ymm7, ymm8, ymm9, ymm10, ymm11, ymm12, ymm13,
            ymm14, ymm15, ymm16, ymm17, ymm18, ymm19, ymm20, ymm21, ymm22, ymm23, ymm24, ymm25,
            ymm26, ymm27, ymm28, ymm29, ymm30, ymm31,
        ]
    };
    /// zmm0..=zmm31.
    pub const ZMM: [AsmRegisterZmm; 32] = {
        use iced_x86::code_asm::registers::zmm::*;
        [
            zmm0, zmm1, zmm2, zmm3, zmm4, zmm5, zmm6, zmm7, zmm8, zmm9, zmm10, zmm11, zmm12, zmm13,
            zmm14, zmm15, zmm16, zmm17, zmm18, zmm19, zmm20, zmm21, zmm22, zmm23, zmm24, zmm25,
            zmm26, zmm27, zmm28, zmm29, zmm30, zmm31,
        ]
    };
}
pub use emitter::{Emitted, Emitter, Encoding, VectorReg};
pub use error::EmitError;
pub use iced_x86;
pub use listing::{Listing, ListingLine};
