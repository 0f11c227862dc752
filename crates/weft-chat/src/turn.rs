//! [`ChatTurn`]: what a model wraps a user's prompt in — its file's
//! template or a [`BuiltinTurn`] — and that turn as token ids.

use std::fmt;

use weft_gguf::Gguf;
use weft_tokenizer::{Special, TokenId, Tokenizer};

use crate::{ChatTemplate, ChatTemplateError, Message};

/// The metadata key of a GGUF file's chat template (a Jinja string).
pub const CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// The prompt [`ChatTurn::from_gguf`] renders to check a file's template
/// before anything else is done with the model.
const PROBE: &str = "Hello";

/// The chat turn Weft hard-coded for an architecture before it read
/// templates, kept for files that carry none (and the embedded model).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuiltinTurn {
    /// ChatML with SmolLM2-Instruct's default system message (every
    /// `llama` file without a template, and the embedded model, whose
    /// vocabulary has SmolLM2's control tokens).
    SmolLm2,
    /// Gemma 3's turn, BOS first (llama.cpp's built-in `gemma` template,
    /// without its trimming).
    Gemma3,
}

impl BuiltinTurn {
    /// The turn for a file whose `general.architecture` is `arch`: Gemma
    /// 3's for `gemma3`, SmolLM2's ChatML for anything else (what `weft
    /// run` gave every `llama` file).
    pub fn for_architecture(arch: &str) -> BuiltinTurn {
        match arch {
            "gemma3" => BuiltinTurn::Gemma3,
            _ => BuiltinTurn::SmolLm2,
        }
    }

    /// The turn around one user `prompt`, opening the model's answer;
    /// `bos_token` is the model's BOS token text.
    pub fn text(self, prompt: &str, bos_token: &str) -> String {
        match self {
            BuiltinTurn::SmolLm2 => format!(
                "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by \
                 Hugging Face<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
            ),
            BuiltinTurn::Gemma3 => format!(
                "{bos_token}<start_of_turn>user\n{prompt}<end_of_turn>\n<start_of_turn>model\n"
            ),
        }
    }

    /// [`BuiltinTurn::text`] as token ids, BOS once.
    pub fn tokens(self, tokenizer: &Tokenizer, prompt: &str) -> Vec<TokenId> {
        bos_once(tokenizer, &self.text(prompt, &bos_text(tokenizer)))
    }

    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            BuiltinTurn::SmolLm2 => "SmolLM2 ChatML turn",
            BuiltinTurn::Gemma3 => "Gemma 3 turn",
        }
    }
}

/// What a model wraps a user's prompt in.
#[derive(Clone, Debug)]
pub enum ChatTurn {
    /// The chat template its file carries.
    File(ChatTemplate),
    /// Weft's own turn for the architecture: the file has no template.
    Builtin(BuiltinTurn),
}

impl ChatTurn {
    /// The file's template (`tokenizer.chat_template`), compiled and
    /// rendered once for one user message to check it; `fallback` if the
    /// file has none. A template that does not compile or cannot wrap a
    /// prompt is an error, as llama.cpp refuses to start with one.
    pub fn from_gguf(
        gguf: &Gguf,
        tokenizer: &Tokenizer,
        fallback: BuiltinTurn,
    ) -> Result<ChatTurn, ChatTemplateError> {
        match gguf.metadata_opt::<&str>(CHAT_TEMPLATE_KEY)? {
            None => Ok(ChatTurn::Builtin(fallback)),
            Some(source) => {
                let turn = ChatTurn::File(ChatTemplate::new(source)?);
                turn.text(tokenizer, PROBE)?;
                Ok(turn)
            }
        }
    }

    /// The turn around one user `prompt`, opening the model's answer
    /// (`add_generation_prompt`), as text.
    pub fn text(&self, tokenizer: &Tokenizer, prompt: &str) -> Result<String, ChatTemplateError> {
        let bos = bos_text(tokenizer);
        match self {
            ChatTurn::File(template) => {
                let eos = token_text(tokenizer, tokenizer.eos());
                template.render(&[Message::user(prompt)], true, &bos, &eos)
            }
            ChatTurn::Builtin(builtin) => Ok(builtin.text(prompt, &bos)),
        }
    }

    /// [`ChatTurn::text`] as token ids: special tokens parsed, BOS once
    /// (see the crate's invariants).
    pub fn tokens(
        &self,
        tokenizer: &Tokenizer,
        prompt: &str,
    ) -> Result<Vec<TokenId>, ChatTemplateError> {
        Ok(bos_once(tokenizer, &self.text(tokenizer, prompt)?))
    }
}

impl fmt::Display for ChatTurn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChatTurn::File(_) => write!(f, "the file's chat template ({CHAT_TEMPLATE_KEY})"),
            ChatTurn::Builtin(b) => write!(f, "Weft's built-in {}", b.name()),
        }
    }
}

/// The text of token `id` (`""` if there is none), as a template sees
/// `bos_token` and `eos_token`.
fn token_text(tokenizer: &Tokenizer, id: Option<TokenId>) -> String {
    id.and_then(|id| tokenizer.token_text(id))
        .unwrap_or_default()
        .to_owned()
}

fn bos_text(tokenizer: &Tokenizer) -> String {
    token_text(tokenizer, tokenizer.bos())
}

/// `text` as token ids, special tokens parsed; if the tokenizer adds BOS,
/// the BOS token first and a leading BOS text dropped (llama.cpp's rule).
fn bos_once(tokenizer: &Tokenizer, text: &str) -> Vec<TokenId> {
    let mut ids = Vec::new();
    let mut rest = text;
    if tokenizer.add_bos() {
        ids.extend(tokenizer.bos());
        let bos = bos_text(tokenizer);
        if !bos.is_empty() {
            rest = rest.strip_prefix(bos.as_str()).unwrap_or(rest);
        }
    }
    ids.extend(tokenizer.encode(rest, Special::Parse));
    ids
}

#[cfg(test)]
mod tests {
    use weft_gguf::{Gguf, GgufWriter, Value};
    use weft_tokenizer::{PreTokenizer, Tokenizer, Vocabulary};

    use super::{BuiltinTurn, ChatTurn, CHAT_TEMPLATE_KEY};
    use crate::{ChatTemplate, ChatTemplateError};

    /// A template in Gemma 3's turn format, written for these tests.
    const GEMMA3: &str = include_str!("../tests/data/gemma-turns.jinja");
    const SMOLLM2: &str = include_str!("../tests/data/smollm2-135m-instruct.jinja");

    /// Control tokens, then the 256 byte tokens (no merges: text encodes
    /// a byte a token).
    fn tokenizer(controls: &[&str], bos: u32, add_bos: bool) -> Tokenizer {
        let mut tokens: Vec<String> = controls.iter().map(|s| (*s).to_owned()).collect();
        let mut types = vec![3i32; tokens.len()];
        tokens.extend(weft_tokenizer::byte_to_char().iter().map(|c| c.to_string()));
        types.resize(tokens.len(), 1);
        Tokenizer::new(Vocabulary {
            tokens,
            token_types: types,
            merges: Vec::new(),
            pre: PreTokenizer::from_name("smollm"),
            bos: Some(bos),
            eos: Some(1),
            unknown: None,
            padding: None,
            add_bos,
        })
        .expect("a valid vocabulary")
    }

    const GEMMA_CONTROLS: [&str; 4] = ["<pad>", "<eos>", "<bos>", "<start_of_turn>"];
    const BOS: u32 = 2;

    fn gemma_tokenizer(add_bos: bool) -> Tokenizer {
        let mut controls = GEMMA_CONTROLS.to_vec();
        controls.push("<end_of_turn>");
        tokenizer(&controls, BOS, add_bos)
    }

    fn count(ids: &[u32], id: u32) -> usize {
        ids.iter().filter(|&&t| t == id).count()
    }

    /// Gemma's template writes `<bos>` and its tokenizer adds BOS: one
    /// BOS, first, and the rest the same tokens as the built-in turn.
    #[test]
    fn a_template_that_writes_bos_for_a_tokenizer_that_adds_it_gives_one_bos() {
        let tok = gemma_tokenizer(true);
        let file = ChatTurn::File(ChatTemplate::new(GEMMA3).expect("compiles"));
        assert!(file
            .text(&tok, "Hello")
            .expect("renders")
            .starts_with("<bos><start_of_turn>"));
        let ids = file.tokens(&tok, "Hello").expect("renders");
        assert_eq!(ids[0], BOS);
        assert_eq!(count(&ids, BOS), 1, "{ids:?}");
        assert_eq!(ids, BuiltinTurn::Gemma3.tokens(&tok, "Hello"));
        // A prompt that spells the BOS text inside keeps it as a token
        // there (special tokens are parsed), as llama.cpp does.
        let ids = file.tokens(&tok, "a<bos>b").expect("renders");
        assert_eq!(count(&ids, BOS), 2, "{ids:?}");
    }

    /// A tokenizer that does not add BOS: the template's `<bos>` text is
    /// parsed into the BOS token, once.
    #[test]
    fn a_template_that_writes_bos_for_a_tokenizer_that_does_not_add_it_gives_one_bos() {
        let tok = gemma_tokenizer(false);
        let file = ChatTurn::File(ChatTemplate::new(GEMMA3).expect("compiles"));
        let ids = file.tokens(&tok, "Hello").expect("renders");
        assert_eq!(ids[0], BOS);
        assert_eq!(count(&ids, BOS), 1, "{ids:?}");
    }

    /// A template without `{{ bos_token }}`: BOS comes from the tokenizer
    /// if it adds one, else there is none.
    #[test]
    fn a_template_without_bos_gets_it_from_the_tokenizer_only_if_it_adds_it() {
        let turn = ChatTurn::File(
            ChatTemplate::new("{% for m in messages %}{{ m.content }}{% endfor %}")
                .expect("compiles"),
        );
        let with = turn.tokens(&gemma_tokenizer(true), "Hi").expect("renders");
        let without = turn.tokens(&gemma_tokenizer(false), "Hi").expect("renders");
        assert_eq!(with[0], BOS);
        assert_eq!(&with[1..], &without[..]);
        assert_eq!(count(&without, BOS), 0);
    }

    #[test]
    fn the_builtin_turn_follows_the_architecture() {
        assert_eq!(BuiltinTurn::for_architecture("gemma3"), BuiltinTurn::Gemma3);
        assert_eq!(BuiltinTurn::for_architecture("llama"), BuiltinTurn::SmolLm2);
    }

    /// The built-in turns are the text `weft run` hard-coded before.
    #[test]
    fn the_builtin_turns_are_the_hard_coded_text() {
        assert_eq!(
            BuiltinTurn::SmolLm2.text("Hello", "<|im_start|>"),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by \
             Hugging Face<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            BuiltinTurn::Gemma3.text("Hello", "<bos>"),
            "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n"
        );
    }

    /// SmolLM2's file template gives the built-in turn's tokens.
    #[test]
    fn smollm2s_file_template_and_builtin_turn_give_the_same_tokens() {
        let tok = tokenizer(&["<|endoftext|>", "<|im_start|>", "<|im_end|>"], 1, false);
        let file = ChatTurn::File(ChatTemplate::new(SMOLLM2).expect("compiles"));
        let ids = file.tokens(&tok, "Hello").expect("renders");
        assert_eq!(ids, BuiltinTurn::SmolLm2.tokens(&tok, "Hello"));
        assert_eq!(ids[0], 1, "<|im_start|> parsed as the control token");
    }

    fn gguf_with(template: Option<Value>) -> Gguf {
        let mut w = GgufWriter::new();
        w.metadata("general.architecture", Value::String("llama".into()));
        if let Some(t) = template {
            w.metadata(CHAT_TEMPLATE_KEY, t);
        }
        Gguf::from_bytes(w.to_bytes()).expect("parses")
    }

    #[test]
    fn a_file_without_a_template_gets_the_fallback_and_one_with_it_gets_its_own() {
        let tok = gemma_tokenizer(true);
        let turn = ChatTurn::from_gguf(&gguf_with(None), &tok, BuiltinTurn::Gemma3).expect("ok");
        assert!(
            matches!(turn, ChatTurn::Builtin(BuiltinTurn::Gemma3)),
            "{turn:?}"
        );
        assert_eq!(turn.to_string(), "Weft's built-in Gemma 3 turn");
        let turn = ChatTurn::from_gguf(
            &gguf_with(Some(Value::String(GEMMA3.into()))),
            &tok,
            BuiltinTurn::SmolLm2,
        )
        .expect("ok");
        match &turn {
            ChatTurn::File(t) => assert_eq!(t.source(), GEMMA3),
            other => panic!("not the file's: {other:?}"),
        }
        assert_eq!(
            turn.text(&tok, "Hello").expect("renders"),
            "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n"
        );
    }

    #[test]
    fn a_files_template_that_cannot_wrap_a_prompt_is_refused_when_read() {
        let tok = gemma_tokenizer(true);
        let e = ChatTurn::from_gguf(
            &gguf_with(Some(Value::String("{% if messages %}".into()))),
            &tok,
            BuiltinTurn::Gemma3,
        )
        .expect_err("unclosed");
        assert!(matches!(e, ChatTemplateError::Syntax { .. }), "{e}");
        let e = ChatTurn::from_gguf(
            &gguf_with(Some(Value::String(
                "{{ raise_exception('System role not supported') }}".into(),
            ))),
            &tok,
            BuiltinTurn::Gemma3,
        )
        .expect_err("raises");
        assert_eq!(
            e.to_string(),
            "chat-template-raised: System role not supported"
        );
        let e = ChatTurn::from_gguf(&gguf_with(Some(Value::U32(7))), &tok, BuiltinTurn::Gemma3)
            .expect_err("not a string");
        assert!(matches!(e, ChatTemplateError::Metadata { .. }), "{e}");
        assert!(e.to_string().starts_with("chat-template-metadata: "), "{e}");
    }
}
