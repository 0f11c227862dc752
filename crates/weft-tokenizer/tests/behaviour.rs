//! Streaming decode, round trips, and refusals of malformed vocabularies.

use proptest::prelude::*;
use weft_gguf::{Array, Gguf, GgufWriter, Value};
use weft_tokenizer::{PreTokenizer, Render, Special, Tokenizer, TokenizerError, Vocabulary};

fn fixture() -> Tokenizer {
    let bytes = include_bytes!("fixtures/smollm2_vocab_subset.gguf");
    Tokenizer::from_gguf(&Gguf::from_bytes(bytes.to_vec()).expect("parses")).expect("builds")
}

/// A tiny vocabulary: the byte characters for a, b, c, space, and merges.
fn tiny(merges: &[&str], extra: &[&str]) -> Vocabulary {
    let mut tokens: Vec<String> = ["a", "b", "c", "Ġ"].iter().map(|s| s.to_string()).collect();
    tokens.extend(extra.iter().map(|s| s.to_string()));
    Vocabulary {
        tokens,
        merges: merges.iter().map(|s| s.to_string()).collect(),
        pre: Some(PreTokenizer::Gpt2),
        ..Vocabulary::default()
    }
}

#[test]
fn lower_rank_merges_first_and_equal_ranks_merge_leftmost_first() {
    // "ab" outranks "bc": "abc" → ab + c. In "aaa", both "aa" pairs have
    // one rank: the leftmost merges, leaving "aa" + "a".
    let tok = Tokenizer::new(tiny(&["a b", "b c", "a a"], &["ab", "bc", "aa"])).expect("builds");
    assert_eq!(tok.encode("abc", Special::AsText), [4, 2]);
    let tok = Tokenizer::new(tiny(&["b c", "a b", "a a"], &["ab", "bc", "aa"])).expect("builds");
    assert_eq!(tok.encode("abc", Special::AsText), [0, 5]);
    assert_eq!(tok.encode("aaa", Special::AsText), [6, 0]);
    assert_eq!(tok.encode("aaaa", Special::AsText), [6, 6]);
}

#[test]
fn stream_decoder_holds_split_utf8_until_complete() {
    let tok = fixture();
    // "é" (C3 A9) and "🦀" (F0 9F A6 80) are byte tokens in the fixture.
    let ids = tok.encode("é🦀!", Special::AsText);
    assert!(ids.len() >= 4, "{ids:?}");
    let mut dec = tok.stream_decoder(Render::Special);
    let mut shown = Vec::new();
    for &id in &ids {
        shown.push(dec.push(id).expect("in range"));
    }
    assert_eq!(shown.concat(), "é🦀!");
    assert!(shown.iter().all(|s| !s.contains('\u{fffd}')), "{shown:?}");
    assert!(
        shown.iter().any(String::is_empty),
        "some token ends inside a character: {shown:?}"
    );
    assert_eq!(dec.finish(), "");
}

#[test]
fn stream_decoder_replaces_impossible_bytes_and_flushes_the_rest() {
    let tok = fixture();
    let lone_continuation = tok
        .token_id("\u{a9}")
        .expect("byte 0xA9 is in the vocabulary");
    let lead = tok
        .token_id("\u{c3}")
        .expect("byte 0xC3 is in the vocabulary");
    let mut dec = tok.stream_decoder(Render::Special);
    assert_eq!(dec.push(lone_continuation).expect("in range"), "\u{fffd}");
    assert_eq!(dec.push(lead).expect("in range"), "");
    assert_eq!(dec.finish(), "\u{fffd}");
}

#[test]
fn control_tokens_render_only_when_asked_and_bad_ids_are_errors() {
    let tok = fixture();
    let ids = tok.encode("<|im_start|>hi<|im_end|>", Special::Parse);
    assert_eq!(ids.first(), Some(&1));
    assert_eq!(ids.last(), Some(&2));
    assert_eq!(
        tok.decode(&ids, Render::Special).expect("ok"),
        b"<|im_start|>hi<|im_end|>"
    );
    assert_eq!(tok.decode(&ids, Render::SkipSpecial).expect("ok"), b"hi");
    let e = tok
        .decode(&[5000], Render::Special)
        .expect_err("past the vocabulary");
    assert!(
        matches!(
            e,
            TokenizerError::UnknownId {
                id: 5000,
                vocab: 1052
            }
        ),
        "{e}"
    );
    let mut dec = tok.stream_decoder(Render::SkipSpecial);
    assert!(dec.push(u32::MAX).is_err());
}

#[test]
fn malformed_vocabularies_are_refused_by_name() {
    let e = Tokenizer::new(tiny(&["a"], &[])).expect_err("no space");
    assert!(
        matches!(e, TokenizerError::MalformedMerge { index: 0, .. }),
        "{e}"
    );
    let e = Tokenizer::new(tiny(&["a b c"], &[])).expect_err("two spaces");
    assert!(matches!(e, TokenizerError::MalformedMerge { .. }), "{e}");
    let e = Tokenizer::new(tiny(&["a b"], &[])).expect_err("ab missing");
    assert!(
        matches!(e, TokenizerError::MergeNotInVocabulary { ref token, .. } if token == "ab"),
        "{e}"
    );
    let e = Tokenizer::new(tiny(&["a z"], &["az"])).expect_err("z missing");
    assert!(
        matches!(e, TokenizerError::MergeNotInVocabulary { ref token, .. } if token == "z"),
        "{e}"
    );
    let mut v = tiny(&[], &[]);
    v.token_types = vec![1, 1];
    assert!(matches!(
        Tokenizer::new(v),
        Err(TokenizerError::TokenTypeCount {
            tokens: 4,
            types: 2
        })
    ));
    let mut v = tiny(&[], &[]);
    v.eos = Some(4);
    assert!(matches!(
        Tokenizer::new(v),
        Err(TokenizerError::SpecialIdOutOfRange { id: 4, .. })
    ));
    assert!(matches!(
        Tokenizer::new(Vocabulary::default()),
        Err(TokenizerError::BadVocabularySize { len: 0 })
    ));
}

#[test]
fn files_with_other_models_or_pre_tokenizers_are_refused() {
    let file = |model: &str, pre: &str| {
        let mut w = GgufWriter::new();
        w.metadata("tokenizer.ggml.model", Value::String(model.into()))
            .metadata("tokenizer.ggml.pre", Value::String(pre.into()))
            .metadata(
                "tokenizer.ggml.tokens",
                Value::Array(Array::String(vec!["a".into()])),
            )
            .metadata("tokenizer.ggml.merges", Value::Array(Array::String(vec![])));
        Gguf::from_bytes(w.to_bytes()).expect("parses")
    };
    assert!(Tokenizer::from_gguf(&file("gpt2", "smollm")).is_ok());
    // SentencePiece reads no merges and ignores `pre`.
    assert!(Tokenizer::from_gguf(&file("llama", "default")).is_ok());
    let e = Tokenizer::from_gguf(&file("bert", "default")).expect_err("WordPiece");
    assert!(matches!(e, TokenizerError::UnsupportedModel { .. }), "{e}");
    let e = Tokenizer::from_gguf(&file("gpt2", "qwen2")).expect_err("other regex");
    assert!(
        matches!(e, TokenizerError::UnsupportedPreTokenizer { .. }),
        "{e}"
    );
    let mut w = GgufWriter::new();
    w.metadata("tokenizer.ggml.model", Value::String("gpt2".into()))
        .metadata("tokenizer.ggml.tokens", Value::U32(3));
    let e = Tokenizer::from_gguf(&Gguf::from_bytes(w.to_bytes()).expect("parses"))
        .expect_err("wrong type");
    assert!(
        matches!(
            e,
            TokenizerError::Gguf(weft_gguf::GgufError::WrongType { .. })
        ),
        "{e}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Law: decoding an encoding gives the text back, for any text whose
    /// bytes all have tokens (control tokens as text, so no cut is lost).
    #[test]
    fn decode_inverts_encode(text in "[ -~\u{a0}-\u{17f}\u{3040}-\u{30ff}\n\t🦀0-9]{0,40}") {
        let tok = fixture();
        let ids = tok.encode(&text, Special::AsText);
        let back = tok.decode(&ids, Render::Special).expect("ids in range");
        prop_assert_eq!(String::from_utf8(back).expect("utf-8"), text.clone());
        // Streaming gives the same text, token by token.
        let mut dec = tok.stream_decoder(Render::Special);
        let mut streamed = String::new();
        for id in ids {
            streamed.push_str(&dec.push(id).expect("in range"));
        }
        streamed.push_str(&dec.finish());
        prop_assert_eq!(streamed, text);
    }
}
