//! The Q8_0 block format and its quantiser now live in `weft-gguf`, beside
//! the other GGUF block formats; this module re-exports them so paths under
//! `weft_q8::block` keep working.

pub use weft_quant::q8_0::*;
