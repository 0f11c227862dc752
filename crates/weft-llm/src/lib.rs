//! A Llama-architecture decoder (SmolLM2-135M and kin) expressed as a Weft
//! plan.
//!
//! One job: turn a model — weights and tokenizer from a GGUF file
//! ([`Model::open`], Q4_1 re-quantised to Q8_0 as llama.cpp does), or the
//! embedded synthetic model of the same shape ([`Model::embedded`]) — into
//! an [`Engine`] that feeds tokens through a compiled plan and returns
//! logits. [`source`] finds the model a user asks for ([`Choice`]): a
//! file, SmolLM2-135M-Instruct in the user's cache (fetched once), or the
//! embedded one. [`mixed`] runs models from their file's own K-quant,
//! Q5_0 and Q8_0 bytes, as `llama-quantize` mixes them — Gemma 3, and Llama
//! files such as SmolLM2 in Q4_K_M or Q5_0 ([`mixed::Arch`]): a plain-loop
//! reference, and an engine whose products, activation quantiser and
//! attention are plan sites — its small operations are not yet, so the
//! invariants below are the Q8_0 [`Engine`]'s.
//!
//! Invariants:
//!
//! - **Every operation runs through the planner.** Matrix products
//!   (`q8_0.matmul`), activation quantisation (`q8_0.quantize`), attention
//!   (`attention.fused`) and the small operations (`loopnest.*`) are sites
//!   of one plan ([`engine::sites`]); the engine calls nothing else.
//! - **Numerics do not depend on native emission, threads or chunking.**
//!   Contracts fix every rounding and twins match their arms bit for bit,
//!   so [`Engine::digest`] (SHA-256 of every logit the engine returned) is
//!   the same with `WEFT_NATIVE_EMIT=off` and `on`, on any number of
//!   threads, and whether a prompt is fed in chunks or a token at a time
//!   ([`Engine::prefill`]).
//! - **The reference is independent.** [`mod@reference`] evaluates the same
//!   model in f64 plain loops; the plan differs from it only by rounding.
//! - **Bad input is a named error** ([`ModelError`], [`EngineError`],
//!   [`SourceError`]): a missing or malformed file, shapes the forward
//!   pass does not serve, unknown tokens, a full context; nothing panics
//!   on input. Every message begins with its error's stable kebab-case
//!   name (`name()`), then `: ` and a sentence.

mod config;
pub mod engine;
pub mod load;
pub mod mixed;
mod model;
pub mod reference;
pub mod source;
pub mod synthetic;
pub mod weights;

pub use config::{Config, KvCache};
pub use engine::{Engine, EngineError};
pub use model::{Model, Source};
pub use source::{Choice, SourceError};
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
    /// The file's chat template (`tokenizer.chat_template`) cannot wrap a
    /// prompt: it does not compile, or it fails for one user message.
    #[error("bad-chat-template: {source}")]
    ChatTemplate {
        /// Why (its message begins with its own name).
        #[from]
        source: weft_chat::ChatTemplateError,
    },
    /// The model's configuration is not one the forward pass serves.
    #[error("bad-config: {reason}")]
    Config {
        /// What is wrong.
        reason: String,
    },
    /// The weights' memory could not be mapped.
    #[error("no-memory: {source}")]
    Memory {
        /// The mapping's error.
        #[from]
        source: weft_arena::ArenaError,
    },
}

impl ModelError {
    /// A stable name for each variant, as its message begins (the GGUF
    /// reader's own name for [`ModelError::Gguf`]).
    pub fn name(&self) -> &'static str {
        match self {
            ModelError::Shape { .. } => "bad-shape",
            ModelError::Gguf { source } => source.name(),
            ModelError::Tokenizer { .. } => "bad-tokenizer",
            ModelError::ChatTemplate { .. } => "bad-chat-template",
            ModelError::Config { .. } => "bad-config",
            ModelError::Memory { .. } => "no-memory",
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::PathBuf;

    use weft_kernel::Refusal;
    use weft_plan::PlanError;

    use crate::{EngineError, ModelError, SourceError};

    /// Lowercase ASCII letters, digits and inner single hyphens.
    fn kebab(name: &str) -> bool {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !name.starts_with('-')
            && !name.ends_with('-')
            && !name.contains("--")
    }

    fn speaks_the_dialect(name: &str, message: &str) {
        assert!(kebab(name), "{name:?} is not a kebab-case name");
        let sentence = message
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(": "))
            .unwrap_or_else(|| panic!("{message:?} does not begin with `{name}: `"));
        assert!(!sentence.trim().is_empty(), "{message:?} says nothing");
    }

    fn model_errors() -> Vec<ModelError> {
        vec![
            ModelError::Shape {
                tensor: "blk.0.attn_k.weight".into(),
                reason: "64×128, expected 128×128".into(),
            },
            ModelError::Gguf {
                source: weft_gguf::GgufError::MissingKey {
                    key: "llama.block_count".into(),
                },
            },
            ModelError::Tokenizer {
                reason: "vocabulary of 0 tokens is empty or too large".into(),
            },
            ModelError::ChatTemplate {
                source: weft_chat::ChatTemplateError::Syntax {
                    detail: "syntax error: unexpected end of input (in chat_template:1)".into(),
                },
            },
            ModelError::Config {
                reason: "dim is 0".into(),
            },
            ModelError::Memory {
                source: no_memory(),
            },
        ]
    }

    fn no_memory() -> weft_arena::ArenaError {
        weft_arena::ArenaError {
            bytes: 1 << 40,
            source: std::io::Error::from(std::io::ErrorKind::OutOfMemory),
        }
    }

    /// One value of every variant of every error enum of the crate: each
    /// message is its stable name, `: `, then a sentence. The matches are
    /// exhaustive, so a new variant does not compile until it is listed.
    #[test]
    fn every_error_message_begins_with_its_kebab_case_name() {
        let models = model_errors();
        let seen: BTreeSet<_> = models
            .iter()
            .map(|e| match e {
                ModelError::Shape { .. } => 0,
                ModelError::Gguf { .. } => 1,
                ModelError::Tokenizer { .. } => 2,
                ModelError::Config { .. } => 3,
                ModelError::Memory { .. } => 4,
                ModelError::ChatTemplate { .. } => 5,
            })
            .collect();
        assert_eq!(seen.len(), 6, "every ModelError variant");

        let engines = vec![
            EngineError::Plan {
                source: PlanError::Internal {
                    what: "a site without a body",
                },
            },
            EngineError::Refused {
                site: "blk.*.rope",
                refusal: Refusal::UnsupportedGeometry {
                    reason: "rope dims 70 exceed head dim 64".into(),
                },
            },
            EngineError::MissingTensor {
                site: "blk.*.attn_k",
                tensor: "blk.*.attn_k.weight",
            },
            EngineError::ContextFull {
                needed: 3,
                max_seq: 2,
            },
            EngineError::BadToken { id: 9, vocab: 8 },
            EngineError::EmptyPrompt,
            EngineError::BadChunk { tokens: 9, most: 8 },
            EngineError::BadRewind { to: 5, fed: 4 },
            EngineError::Memory {
                what: "the KV cache",
                source: no_memory(),
            },
        ];
        let seen: BTreeSet<_> = engines
            .iter()
            .map(|e| match e {
                EngineError::Plan { .. } => 0,
                EngineError::Refused { .. } => 1,
                EngineError::MissingTensor { .. } => 2,
                EngineError::ContextFull { .. } => 3,
                EngineError::BadToken { .. } => 4,
                EngineError::EmptyPrompt => 5,
                EngineError::BadChunk { .. } => 6,
                EngineError::BadRewind { .. } => 7,
                EngineError::Memory { .. } => 8,
            })
            .collect();
        assert_eq!(seen.len(), 9, "every EngineError variant");

        let path = PathBuf::from("models/smol.gguf");
        let sources = vec![
            SourceError::NotFound { path: path.clone() },
            SourceError::Unreadable {
                path,
                source: ModelError::Config {
                    reason: "architecture `gpt2` is not `llama`".into(),
                },
            },
            SourceError::Embedded {
                source: ModelError::Config {
                    reason: "max_seq is 0".into(),
                },
            },
            SourceError::Fetch {
                source: weft_fetch::FetchError::NoCacheDir,
            },
        ];
        let seen: BTreeSet<_> = sources
            .iter()
            .map(|e| match e {
                SourceError::NotFound { .. } => 0,
                SourceError::Unreadable { .. } => 1,
                SourceError::Embedded { .. } => 2,
                SourceError::Fetch { .. } => 3,
            })
            .collect();
        assert_eq!(seen.len(), 4, "every SourceError variant");

        for e in &models {
            speaks_the_dialect(e.name(), &e.to_string());
        }
        for e in &engines {
            speaks_the_dialect(e.name(), &e.to_string());
        }
        for e in &sources {
            speaks_the_dialect(e.name(), &e.to_string());
        }
    }

    /// A wrapping error names itself once and keeps its cause's name in
    /// the sentence, never the same name twice.
    #[test]
    fn wrapped_errors_name_themselves_once_and_keep_the_cause_named() {
        let e = EngineError::Plan {
            source: PlanError::Internal { what: "x" },
        };
        assert_eq!(e.to_string(), "internal: x");
        let e = EngineError::Refused {
            site: "blk.*.rope",
            refusal: Refusal::UnsupportedGeometry { reason: "r".into() },
        };
        assert_eq!(
            e.to_string(),
            "site-refused: blk.*.rope: unsupported-geometry: r"
        );
    }
}
