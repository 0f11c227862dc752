//! weft-chat: the chat turn a model was trained to see around a user's
//! prompt — the Jinja template its GGUF file carries
//! (`tokenizer.chat_template`), rendered as Hugging Face's
//! `apply_chat_template` and llama.cpp render it, or Weft's built-in turn
//! for the architecture when the file has none — and that turn as token
//! ids, with BOS once.
//!
//! One job: a prompt → the text and tokens that open the model's answer.
//! [`ChatTemplate`] compiles and renders any template; [`ChatTurn`] is what
//! a model wraps a prompt in ([`ChatTurn::from_gguf`]: the file's
//! template, else a [`BuiltinTurn`]) and tokenises it
//! ([`ChatTurn::tokens`]).
//!
//! ```
//! use weft_chat::{ChatTemplate, Message};
//! let template = ChatTemplate::new(
//!     "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }}\n\
//!      {{ m.content | trim }}<end_of_turn>\n{% endfor %}\
//!      {% if add_generation_prompt %}<start_of_turn>model\n{% endif %}",
//! )?;
//! let text = template.render(&[Message::user(" Hello ")], true, "<bos>", "<eos>")?;
//! assert_eq!(text, "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n");
//! # Ok::<(), weft_chat::ChatTemplateError>(())
//! ```
//!
//! A crate of its own, not a module of weft-tokenizer: the template engine
//! (minijinja, and minijinja-contrib for Python's string methods) is needed
//! only to build a chat turn, and the tokenizer's one job stays text ↔
//! token ids. This crate sits above it: it renders text, then tokenises it.
//!
//! Invariants:
//! - Rendering is Hugging Face's: `trim_blocks` and `lstrip_blocks` on, a
//!   final newline dropped, undefined values lenient (`x is defined`),
//!   loop controls (`{% break %}`), `tojson`, Python's str and dict
//!   methods (`.strip()`, `.startswith()`, `.items()`), and
//!   `raise_exception(message)`. The template sees `messages` (a list of
//!   `{role, content}`), `add_generation_prompt`, `bos_token` and
//!   `eos_token`.
//! - BOS once, as llama.cpp's `common_chat_template_direct_apply` does:
//!   when the tokenizer adds BOS (`tokenizer.ggml.add_bos_token`) and the
//!   rendered text begins with the BOS token's text, that text is dropped
//!   and the BOS token put first, once. Otherwise the text is tokenised as
//!   it is, special tokens parsed, so a `{{ bos_token }}` the template
//!   writes becomes the BOS token there. No EOS is appended.
//! - A template that does not compile, that calls `raise_exception`, or
//!   that fails while rendering is a [`ChatTemplateError`] naming what
//!   failed; nothing panics on any template or message.
//! - A [`BuiltinTurn`] is the text Weft hard-coded before it read
//!   templates, unchanged: ChatML with SmolLM2's default system message,
//!   or Gemma 3's turn.

mod template;
mod turn;

pub use template::{ChatTemplate, Message};
pub use turn::{BuiltinTurn, ChatTurn, CHAT_TEMPLATE_KEY};

/// Why a chat template could not be read, compiled or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    /// `tokenizer.chat_template` is in the file but is not a string.
    #[error("chat-template-metadata: {source}")]
    Metadata {
        /// The reader's error (its message begins with its own name).
        #[from]
        source: weft_gguf::GgufError,
    },
    /// The template is not valid Jinja (an unclosed tag, an unknown
    /// filter, …).
    #[error("chat-template-syntax: {detail}")]
    Syntax {
        /// The template engine's message, with the line.
        detail: String,
    },
    /// The template called `raise_exception(message)`: it refuses these
    /// messages (roles out of order, an unsupported role, …).
    #[error("chat-template-raised: {message}")]
    Raised {
        /// The template's own message.
        message: String,
    },
    /// Rendering failed otherwise (an unknown function or method, a type
    /// error, too deep a recursion, …).
    #[error("chat-template-render: {detail}")]
    Render {
        /// The template engine's message, with the line.
        detail: String,
    },
}

impl ChatTemplateError {
    /// A stable name for each variant, as its message begins.
    pub fn name(&self) -> &'static str {
        match self {
            ChatTemplateError::Metadata { .. } => "chat-template-metadata",
            ChatTemplateError::Syntax { .. } => "chat-template-syntax",
            ChatTemplateError::Raised { .. } => "chat-template-raised",
            ChatTemplateError::Render { .. } => "chat-template-render",
        }
    }
}
