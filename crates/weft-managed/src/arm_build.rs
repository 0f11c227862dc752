//! What every family's arm shares: choosing the Cranelift target for an
//! ISA and turning Cranelift's output into [`NativeCode`].
//!
//! The host is compiled with its own features; the other ISA (for
//! inspection and pricing) with baseline features.

use crate::{Arch, ArmCode, ManagedError, Target};
use weft_kernel::{Isa, NativeCode, Refusal};

/// The ISA this process runs on, as far as Cranelift serves it.
pub fn host_isa() -> Isa {
    match Arch::host() {
        Some(Arch::X86_64) => Isa::X86_64,
        Some(Arch::Aarch64) => Isa::Aarch64,
        None => Isa::Other,
    }
}

/// A Cranelift failure as the seam's named refusal.
pub fn compile_refusal(e: ManagedError) -> Refusal {
    Refusal::CompileError {
        message: e.to_string(),
    }
}

/// Compile an arm for `isa` with `compile` and wrap its bytes and listing
/// (public for generated kernels: `weft-loopnest` builds its arms here too).
pub fn build_native(
    isa: Isa,
    compile: impl FnOnce(&Target) -> Result<ArmCode, ManagedError>,
) -> Result<NativeCode, Refusal> {
    let arch = match isa {
        Isa::X86_64 => Arch::X86_64,
        Isa::Aarch64 => Arch::Aarch64,
        Isa::Other => {
            return Err(Refusal::CompileError {
                message: "no Cranelift backend for this ISA".to_owned(),
            })
        }
    };
    let target = if Arch::host() == Some(arch) {
        Target::host()
    } else {
        Target::baseline(arch)
    }
    .map_err(compile_refusal)?;
    let code = compile(&target).map_err(compile_refusal)?;
    Ok(NativeCode {
        isa,
        bytes: code.bytes,
        pool: None,
        loops: Vec::new(),
    })
}
