//! A Llama-architecture decoder expressed as a Weft plan.

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
