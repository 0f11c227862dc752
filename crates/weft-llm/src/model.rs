//! A model ready to plan: its weights, its tokenizer, and where it came from.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use weft_chat::{BuiltinTurn, ChatTurn};
use weft_tokenizer::{Special, TokenId, Tokenizer, Vocabulary};

use crate::weights::Weights;
use crate::{load, synthetic, Config, ModelError};

/// Where a model's weights came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A GGUF file.
    File(PathBuf),
    /// The embedded synthetic model (`--offline`).
    Embedded,
}

/// Weights and tokenizer of one model.
#[derive(Debug)]
pub struct Model {
    /// The weights.
    pub weights: Arc<Weights>,
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// What a prompt is wrapped in: the file's chat template, or SmolLM2's
    /// ChatML turn for a file without one and for the embedded model.
    pub chat: ChatTurn,
    /// Where it came from.
    pub source: Source,
}

/// The control tokens of SmolLM2's vocabulary (ids 0..17), which the
/// embedded model shares so chat markup means the same in both.
const CONTROL: [&str; 17] = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<repo_name>",
    "<reponame>",
    "<file_sep>",
    "<filename>",
    "<gh_stars>",
    "<issue_start>",
    "<issue_comment>",
    "<issue_closed>",
    "<jupyter_start>",
    "<jupyter_text>",
    "<jupyter_code>",
    "<jupyter_output>",
    "<jupyter_script>",
    "<empty_output>",
];

impl Model {
    /// Open a `llama` GGUF file: weights converted on all cores, the
    /// tokenizer and the chat turn from its metadata (the file's template,
    /// checked on one message; without one, Weft's built-in SmolLM2 ChatML
    /// turn, as before templates were read), a KV cache of `max_seq`
    /// positions.
    pub fn open(path: &Path, max_seq: usize) -> Result<Model, ModelError> {
        let g = weft_gguf::Gguf::open(path)?;
        let weights = load::weights(&g, max_seq, 0)?;
        let tokenizer = Tokenizer::from_gguf(&g).map_err(|e| ModelError::Tokenizer {
            reason: e.to_string(),
        })?;
        if tokenizer.vocab_size() != weights.config.vocab {
            return Err(ModelError::Config {
                reason: format!(
                    "the tokenizer has {} tokens, the embeddings {}",
                    tokenizer.vocab_size(),
                    weights.config.vocab
                ),
            });
        }
        let chat = ChatTurn::from_gguf(&g, &tokenizer, BuiltinTurn::SmolLm2)?;
        Ok(Model {
            weights: Arc::new(weights),
            tokenizer,
            chat,
            source: Source::File(path.to_owned()),
        })
    }

    /// The embedded model: `config`'s shapes, synthetic weights, and a
    /// vocabulary of SmolLM2's control tokens, the 256 byte tokens and
    /// made-up words (its text is fluent nonsense by design).
    pub fn embedded(config: &Config) -> Result<Model, ModelError> {
        config
            .check()
            .map_err(|reason| ModelError::Config { reason })?;
        let weights = synthetic::weights(config);
        let tokenizer = synthetic_tokenizer(config.vocab)?;
        Ok(Model {
            weights: Arc::new(weights),
            tokenizer,
            chat: ChatTurn::Builtin(BuiltinTurn::SmolLm2),
            source: Source::Embedded,
        })
    }

    /// The prompt as token ids: as it is if `raw` (BOS first if the model
    /// wants it, special tokens parsed), else wrapped in [`Model::chat`]
    /// ([`Model::chat_tokens`]). A prompt the file's template refuses
    /// (rare: it wrapped one message when the model opened) gets the
    /// built-in ChatML turn here; `weft run` reports the refusal instead.
    pub fn prompt_tokens(&self, prompt: &str, raw: bool) -> Vec<TokenId> {
        if raw {
            let mut ids = Vec::new();
            if self.tokenizer.add_bos() {
                ids.extend(self.tokenizer.bos());
            }
            ids.extend(self.tokenizer.encode(prompt, Special::Parse));
            return ids;
        }
        self.chat_tokens(prompt)
            .unwrap_or_else(|_| BuiltinTurn::SmolLm2.tokens(&self.tokenizer, prompt))
    }

    /// The prompt wrapped in [`Model::chat`] as token ids, BOS once.
    pub fn chat_tokens(&self, prompt: &str) -> Result<Vec<TokenId>, weft_chat::ChatTemplateError> {
        self.chat.tokens(&self.tokenizer, prompt)
    }

    /// Tokens that end generation (end of turn, end of text).
    pub fn stop_tokens(&self) -> Vec<TokenId> {
        let mut v: Vec<TokenId> = self.tokenizer.eos().into_iter().collect();
        v.extend(self.tokenizer.token_id("<|im_end|>"));
        v.extend(self.tokenizer.token_id("<|endoftext|>"));
        v.sort_unstable();
        v.dedup();
        v
    }
}

fn synthetic_tokenizer(vocab: usize) -> Result<Tokenizer, ModelError> {
    let byte_chars = weft_tokenizer::byte_to_char();
    let mut tokens: Vec<String> = CONTROL.iter().map(|s| (*s).to_owned()).collect();
    let mut types = vec![3i32; CONTROL.len()];
    tokens.extend(byte_chars.iter().map(|c| c.to_string()));
    types.resize(tokens.len(), 1);
    // Made-up words: a space then two or three syllables, each distinct.
    const ONSETS: [&str; 16] = [
        "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "th",
    ];
    const VOWELS: [&str; 8] = ["a", "e", "i", "o", "u", "ai", "ou", "ea"];
    let syllable = |i: usize| format!("{}{}", ONSETS[i % 16], VOWELS[(i / 16) % 8]);
    let mut n = 0usize;
    while tokens.len() < vocab {
        let word = if n < 128 * 128 {
            format!("Ġ{}{}", syllable(n / 128), syllable(n % 128))
        } else {
            let m = n - 128 * 128;
            format!(
                "Ġ{}{}{}",
                syllable(m / (128 * 128)),
                syllable((m / 128) % 128),
                syllable(m % 128)
            )
        };
        tokens.push(word);
        types.push(1);
        n += 1;
    }
    tokens.truncate(vocab);
    types.truncate(vocab);
    Tokenizer::new(Vocabulary {
        tokens,
        token_types: types,
        merges: Vec::new(),
        pre: weft_tokenizer::PreTokenizer::from_name("smollm"),
        bos: Some(1),
        eos: Some(2),
        unknown: Some(0),
        padding: Some(2),
        add_bos: false,
    })
    .map_err(|e| ModelError::Tokenizer {
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use weft_chat::{BuiltinTurn, ChatTurn};
    use weft_tokenizer::Special;

    use super::Model;
    use crate::{Config, KvCache};

    /// The embedded model at a small shape (its vocabulary is SmolLM2's
    /// control tokens, the byte tokens and made-up words).
    fn embedded() -> Model {
        Model::embedded(&Config {
            dim: 64,
            hidden: 128,
            layers: 1,
            heads: 2,
            kv_heads: 1,
            vocab: 400,
            rms_eps: 1e-5,
            rope_base: 10_000.0,
            rope_dims: 32,
            max_seq: 8,
            kv: KvCache::F16,
        })
        .expect("builds")
    }

    /// The embedded model has no file: its prompt is wrapped in the
    /// ChatML turn `weft run` always gave it, and `raw` is the text alone.
    #[test]
    fn the_embedded_models_prompt_is_the_chatml_turn_it_always_had() {
        let m = embedded();
        assert!(matches!(m.chat, ChatTurn::Builtin(BuiltinTurn::SmolLm2)));
        let chatml = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained \
                      by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
                      <|im_start|>assistant\n";
        let wrapped = m.prompt_tokens("Hi", false);
        assert_eq!(wrapped, m.tokenizer.encode(chatml, Special::Parse));
        assert_eq!(wrapped[0], 1, "<|im_start|> is a control token");
        assert_eq!(wrapped, m.chat_tokens("Hi").expect("renders"));
        assert_eq!(
            m.prompt_tokens("Hi", true),
            m.tokenizer.encode("Hi", Special::Parse)
        );
    }
}
