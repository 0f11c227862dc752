//! The chat turn `weft run` wraps a prompt in, read from the real model
//! files Weft fetches: SmolLM2-135M-Instruct's own template, and Gemma 3
//! 270M's built-in turn (that file carries no template). They need the
//! models in the cache (`cargo xtask fetch-model`, `cargo xtask
//! fetch-model gemma3-270m`), so `cargo test` reports them as ignored;
//! `cargo test -- --include-ignored` (what `.ci/run` does after fetching)
//! runs them, and a missing model is then a failure that says how to fetch
//! it. weft-chat's own tests render the same templates from its
//! `tests/data`, with no model.

use weft_chat::{BuiltinTurn, ChatTemplate, ChatTurn, CHAT_TEMPLATE_KEY};
use weft_gguf::Gguf;
use weft_tokenizer::{Special, Tokenizer};

const NO_MODEL: &str =
    "the SmolLM2-135M model is not in the cache: run `cargo xtask fetch-model` first";
const NO_GEMMA: &str =
    "the Gemma 3 270M model is not in the cache: run `cargo xtask fetch-model gemma3-270m` first";

/// SmolLM2-135M-Instruct.Q4_1.gguf's `tokenizer.chat_template`, as pinned.
const SMOLLM2_TEMPLATE: &str =
    include_str!("../crates/weft-chat/tests/data/smollm2-135m-instruct.jinja");
/// A template written for these tests in Gemma 3's turn format (BOS, no
/// system role, trimmed contents, alternating user and model turns).
const GEMMA_TURNS_TEMPLATE: &str = include_str!("../crates/weft-chat/tests/data/gemma-turns.jinja");

/// The turn `weft run` gave SmolLM2 before it read templates.
const SMOLLM2_TURN: &str = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, \
                            trained by Hugging Face<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n\
                            <|im_start|>assistant\n";

/// The file's template is the one weft-chat's tests pin, the model opens
/// with it, and one user message renders to the ChatML turn `weft run`
/// hard-coded before, with the same tokens (SmolLM2 adds no BOS).
#[test]
#[ignore = "needs the SmolLM2-135M model (cargo xtask fetch-model)"]
fn smollm2s_file_template_wraps_a_prompt_in_the_chatml_turn_it_had() {
    let path = weft_fetch::cached_model().expect(NO_MODEL);
    let g = Gguf::open(&path).expect("the cached model parses");
    let source: &str = g.metadata(CHAT_TEMPLATE_KEY).expect("a template string");
    assert_eq!(source, SMOLLM2_TEMPLATE);

    let model = weft_llm::Model::open(&path, 64).expect("the model opens");
    assert!(matches!(model.chat, ChatTurn::File(_)), "{}", model.chat);
    let tok = &model.tokenizer;
    assert!(!tok.add_bos());
    assert_eq!(
        model.chat.text(tok, "Hello").expect("renders"),
        SMOLLM2_TURN
    );
    let ids = model.prompt_tokens("Hello", false);
    assert_eq!(ids, tok.encode(SMOLLM2_TURN, Special::Parse));
    assert_eq!(ids, BuiltinTurn::SmolLm2.tokens(tok, "Hello"));
    assert_eq!(ids, model.chat_tokens("Hello").expect("renders"));
    // <|im_start|> (1) and <|im_end|> (2) are parsed as control tokens.
    assert_eq!(
        ids,
        [
            1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411,
            407, 19712, 8182, 2, 198, 1, 4093, 198, 19556, 2, 198, 1, 520, 9531, 198
        ]
    );
}

/// The pinned Gemma 3 270M file carries no template, so its prompt is
/// Weft's built-in Gemma 3 turn: one BOS (the tokenizer adds it), then the
/// turn `weft run` hard-coded before. A template in Gemma 3's turn format
/// gives the very same tokens with this file's tokenizer: its
/// `{{ bos_token }}` and the tokenizer's BOS make one BOS, not two.
#[test]
#[ignore = "needs the Gemma 3 270M model (cargo xtask fetch-model gemma3-270m)"]
fn gemma3s_file_gets_the_builtin_turn_which_a_gemma_template_gives_with_one_bos() {
    let path = weft_fetch::cached(&weft_fetch::GEMMA3_270M).expect(NO_GEMMA);
    let g = Gguf::open(&path).expect("the Gemma file parses");
    let tok = Tokenizer::from_gguf(&g).expect("its tokenizer builds");
    assert_eq!(
        g.metadata_opt::<&str>(CHAT_TEMPLATE_KEY)
            .expect("no other type"),
        None,
        "the pinned Gemma 3 file now carries a chat template: check that it \
         renders the built-in turn and update this test"
    );
    let chat = ChatTurn::from_gguf(&g, &tok, BuiltinTurn::Gemma3).expect("no template to refuse");
    assert!(
        matches!(chat, ChatTurn::Builtin(BuiltinTurn::Gemma3)),
        "{chat}"
    );

    let bos = tok.bos().expect("Gemma has a BOS token");
    assert!(tok.add_bos());
    assert_eq!(tok.token_text(bos), Some("<bos>"));
    let ids = chat.tokens(&tok, "Hello").expect("the built-in turn");
    let mut before = vec![bos];
    before.extend(tok.encode(
        "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
        Special::Parse,
    ));
    assert_eq!(ids, before);
    assert_eq!(ids, [2, 105, 2364, 107, 9259, 106, 107, 105, 4368, 107]);

    let template = ChatTurn::File(ChatTemplate::new(GEMMA_TURNS_TEMPLATE).expect("compiles"));
    assert_eq!(
        template.text(&tok, "Hello").expect("renders"),
        "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n"
    );
    assert_eq!(template.tokens(&tok, "Hello").expect("renders"), ids);
}
