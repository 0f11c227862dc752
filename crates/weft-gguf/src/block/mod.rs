//! Block formats: how a tensor type's bytes encode numbers, and the
//! conversions a loader needs (Q4_1 → Q8_0, F16 → F32, F32 passthrough).
//!
//! All functions here are pure and total on bytes: any bit pattern
//! decodes; lengths are checked and a wrong one is a typed error.

pub mod f16;
pub mod q4_1;
pub mod q8_0;
