//! A Llama-architecture decoder (SmolLM2-135M and kin) expressed as a Weft
//! plan.
//!
//! One job: turn a model — weights and tokenizer from a GGUF file
//! ([`Model::open`], Q4_1 re-quantised to Q8_0 as llama.cpp does), or the
//! embedded synthetic model of the same shape ([`Model::embedded`]) — into
//! an [`Engine`] that feeds tokens through a compiled plan and returns
//! logits.
//!
//! Invariants:
//!
//! - **Every operation runs through the planner.** Matrix products
//!   (`q8_0.matvec`), activation quantisation (`q8_0.quantize`), attention
//!   (`attention.fused`) and the small operations (`loopnest.*`) are sites
//!   of one plan ([`engine::sites`]); the engine calls nothing else.
//! - **Numerics do not depend on native emission.** Contracts fix every
//!   rounding and twins match their arms bit for bit, so
//!   [`Engine::digest`] (SHA-256 of every step's logits) is the same with
//!   `WEFT_NATIVE_EMIT=off` and `on`, on any number of threads.
//! - **The reference is independent.** [`mod@reference`] evaluates the same
//!   model in f64 plain loops; the plan differs from it only by rounding.
//! - **Bad input is a named error** ([`ModelError`], [`EngineError`]):
//!   malformed files, shapes the forward pass does not serve, unknown
//!   tokens, a full context; nothing panics on input.

mod config;
pub mod engine;
pub mod load;
mod model;
pub mod reference;
pub mod synthetic;
pub mod weights;

pub use config::Config;
pub use engine::{Engine, EngineError};
pub use model::{Model, Source};
pub use weights::{Layer, Q8Matrix, Weights};

/// Why a model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A tensor has the wrong shape or size.
    #[error("bad-shape: {tensor}: {reason}")]
    Shape {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// The model file could not be read.
    #[error("{}: {source}", source.name())]
    Gguf {
        /// The reader's error.
        #[from]
        source: weft_gguf::GgufError,
    },
    /// The tokenizer could not be built.
    #[error("bad-tokenizer: {reason}")]
    Tokenizer {
        /// The tokenizer's error.
        reason: String,
    },
    /// The model's configuration is not one the forward pass serves.
    #[error("bad-config: {reason}")]
    Config {
        /// What is wrong.
        reason: String,
    },
}
