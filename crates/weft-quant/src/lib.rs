//! weft-quant: the block formats of quantized tensors.
//!
//! One job: how a tensor type's bytes encode numbers (F32, F16, BF16, Q4_0,
//! Q4_1, Q5_0, Q5_1, Q8_0, the K-quants Q2_K…Q6_K, and Q8_K) and the
//! conversions a loader and the kernel families need. The file reader
//! (`weft-gguf`, which re-exports this crate as `weft_gguf::block`) and the
//! kernel families (`weft-q8`) share these numerics without either
//! depending on the other.
//!
//! Invariants:
//! - Every function here is pure and total on bytes: any bit pattern
//!   decodes; lengths are checked and a wrong one is a typed error.
//! - Every dequantiser gives the bits ggml's reference `to_float` gives,
//!   NaN payloads included — but for the NaN that arithmetic makes of
//!   `0 · ∞`, the host's default NaN (its sign differs between x86-64 and
//!   aarch64, in ggml as here); `tests/ggml_pinned.rs` checks each against
//!   values ggml computed (`cargo xtask peer quant-fixtures` regenerates
//!   them).

pub mod f16;
pub mod format;
pub mod kquant;
pub mod q4_0;
pub mod q4_1;
pub mod q5;
pub mod q8_0;

pub use format::{BlockLengthError, Format};
