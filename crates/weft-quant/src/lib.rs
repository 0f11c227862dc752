//! weft-quant: the block formats of quantized tensors.
//!
//! One job: how a tensor type's bytes encode numbers (Q8_0, Q4_1, binary16)
//! and the conversions a loader needs (Q4_1 → Q8_0, F16 → F32). The file
//! reader (`weft-gguf`, which re-exports this crate as `weft_gguf::block`)
//! and the kernel families (`weft-q8`) share these numerics without either
//! depending on the other.
//!
//! All functions here are pure and total on bytes: any bit pattern
//! decodes; lengths are checked and a wrong one is a typed error.

pub mod f16;
pub mod q4_1;
pub mod q8_0;
