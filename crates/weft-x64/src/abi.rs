//! Calling conventions and the registers a body declares it clobbers.

use iced_x86::code_asm::{rcx, rdi, AsmRegister64};
use iced_x86::Register;

/// The x86-64 calling convention a function is entered with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Abi {
    /// System V AMD64 (Linux, macOS): first argument in `rdi`; callee-saved
    /// `rbx`, `rbp`, `r12`–`r15`; every vector register is volatile.
    SysV,
    /// Microsoft x64 (Windows): first argument in `rcx`; callee-saved `rbx`,
    /// `rbp`, `rdi`, `rsi`, `r12`–`r15` and the low 128 bits of
    /// `xmm6`–`xmm15`.
    Win64,
}

/// Callee-saved GPRs of SysV, in the order the prologue pushes them.
const SYSV_GPRS: [Register; 6] = [
    Register::RBX,
    Register::RBP,
    Register::R12,
    Register::R13,
    Register::R14,
    Register::R15,
];

/// Callee-saved GPRs of Win64, in the order the prologue pushes them.
const WIN64_GPRS: [Register; 8] = [
    Register::RBX,
    Register::RBP,
    Register::RDI,
    Register::RSI,
    Register::R12,
    Register::R13,
    Register::R14,
    Register::R15,
];

impl Abi {
    /// The convention of the target this crate was compiled for: Win64 on
    /// Windows, SysV elsewhere.
    pub const fn host() -> Abi {
        if cfg!(target_os = "windows") {
            Abi::Win64
        } else {
            Abi::SysV
        }
    }

    /// The register the first argument (the argument-struct pointer of the
    /// leaf ABI) arrives in: `rdi` (SysV) or `rcx` (Win64).
    pub fn args_reg(self) -> AsmRegister64 {
        match self {
            Abi::SysV => rdi,
            Abi::Win64 => rcx,
        }
    }

    /// The callee-saved general-purpose registers, in push order.
    pub fn callee_saved_gprs(self) -> &'static [Register] {
        match self {
            Abi::SysV => &SYSV_GPRS,
            Abi::Win64 => &WIN64_GPRS,
        }
    }

    /// The callee-saved vector registers by number (`xmm6`–`xmm15` on Win64,
    /// none on SysV).
    pub fn callee_saved_vectors(self) -> std::ops::Range<u8> {
        match self {
            Abi::SysV => 0..0,
            Abi::Win64 => 6..16,
        }
    }

    /// Whether writing `register` (any width: `bl`, `ebx`, `xmm7`, `zmm7`)
    /// destroys a value the caller expects back.
    pub fn is_callee_saved(self, register: Register) -> bool {
        let full = register.full_register();
        if full.is_gpr64() {
            return self.callee_saved_gprs().contains(&full);
        }
        if full.is_zmm() {
            let number = full.number();
            let range = self.callee_saved_vectors();
            return (usize::from(range.start)..usize::from(range.end)).contains(&number);
        }
        false
    }
}

/// The registers a body writes, declared before it is emitted so that
/// [`Emitter::prologue`](crate::Emitter::prologue) saves (and
/// [`epilogue`](crate::Emitter::epilogue) restores) the callee-saved ones
/// among them.
///
/// Declare registers of any kind and width: `Clobbers::none().with(rbx)
/// .with(ymm7)`; volatile ones are ignored by the frame, so a body may
/// declare everything it touches. [`Clobbers::all`] saves every callee-saved
/// register of the ABI (conservative, costs a few pushes).
/// [`Emitter::finish`](crate::Emitter::finish) checks the declaration: a
/// write to an undeclared callee-saved register is an
/// [`EmitError::UndeclaredClobber`](crate::EmitError::UndeclaredClobber).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Clobbers {
    /// Bit `n`: GPR number `n` (rax 0, rcx 1, ..., r15 15).
    gprs: u16,
    /// Bit `n`: vector register number `n` (xmm/ymm/zmm).
    vectors: u32,
}

impl Clobbers {
    /// Declares nothing: the body uses only volatile registers.
    pub const fn none() -> Clobbers {
        Clobbers {
            gprs: 0,
            vectors: 0,
        }
    }

    /// Declares every register (so every callee-saved one is saved).
    pub const fn all() -> Clobbers {
        Clobbers {
            gprs: u16::MAX,
            vectors: u32::MAX,
        }
    }

    /// Adds `register` (a GPR of any width, or an xmm/ymm/zmm register;
    /// other kinds are never callee-saved and are ignored).
    pub fn with(mut self, register: impl Into<Register>) -> Clobbers {
        let full = register.into().full_register();
        if full.is_gpr64() {
            self.gprs |= 1 << full.number();
        } else if full.is_zmm() {
            self.vectors |= 1 << full.number();
        }
        self
    }

    /// Whether `register` (any width) is declared.
    pub fn contains(self, register: Register) -> bool {
        let full = register.full_register();
        if full.is_gpr64() {
            self.gprs & (1 << full.number()) != 0
        } else if full.is_zmm() {
            self.vectors & (1 << full.number()) != 0
        } else {
            false
        }
    }
}
