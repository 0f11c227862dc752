//! The one error type of the façade.

use iced_x86::IcedError;

/// Why emitting failed. Nothing in this crate panics on bad input; every
/// failure arrives as one of these.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmitError {
    /// iced-x86 refused an instruction, a label, or the final encoding.
    #[error("iced-rejected: iced-x86 rejected {what}: {source}")]
    Iced {
        /// What was being emitted or encoded.
        what: String,
        /// iced's own error.
        #[source]
        source: IcedError,
    },
    /// The body writes a register the ABI says is callee-saved, but the
    /// register was not declared in the [`Clobbers`](crate::Clobbers) given
    /// to [`prologue`](crate::Emitter::prologue), so it would not be
    /// restored.
    #[error(
        "undeclared-clobber: the body writes callee-saved {register} ({abi:?}) without declaring it in the \
         prologue's clobbers: `{instruction}` (instruction #{index})"
    )]
    UndeclaredClobber {
        /// The register written (its full width, e.g. `rbx`, `zmm7`).
        register: String,
        /// The ABI that makes it callee-saved.
        abi: crate::Abi,
        /// The offending instruction, Intel syntax.
        instruction: String,
        /// Its index among the emitted instructions.
        index: usize,
    },
    /// [`prologue`](crate::Emitter::prologue) was called twice, or after an
    /// [`epilogue`](crate::Emitter::epilogue) (whose restores would then
    /// not match the saves).
    #[error("frame-order: {problem}")]
    FrameOrder {
        /// What was out of order.
        problem: &'static str,
    },
}

impl From<IcedError> for EmitError {
    fn from(source: IcedError) -> Self {
        EmitError::Iced {
            what: "an instruction".to_string(),
            source,
        }
    }
}

/// Attaches `what` to an iced error.
pub(crate) fn iced(what: impl Into<String>) -> impl FnOnce(IcedError) -> EmitError {
    let what = what.into();
    move |source| EmitError::Iced { what, source }
}
