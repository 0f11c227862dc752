//! Hostile model files: metadata that claims sizes the tensors do not back
//! must give a named error from `Model::open` before anything is sized
//! from it. The inputs are the committed seeds of `cargo fuzz run model`
//! (fuzz/corpus/model, written by fuzz/corpus/make_model_seeds.py), so the
//! fuzzer starts from exactly the files this test pins.

use std::path::PathBuf;

use weft_llm::Model;

fn seed(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus/model")
        .join(format!("{name}.gguf"))
}

/// The error `Model::open` gives for the seed `name`, as `name: sentence`.
fn refusal(name: &str) -> (String, String) {
    match Model::open(&seed(name), 64) {
        Ok(_) => panic!("{name}: a hostile file was accepted"),
        Err(e) => (e.name().to_owned(), e.to_string()),
    }
}

#[test]
fn a_file_claiming_2_pow_31_blocks_is_a_bad_config_naming_the_key() {
    let (name, text) = refusal("block_count_2pow31");
    assert_eq!(name, "bad-config", "{text}");
    assert!(text.contains("llama.block_count 2147483648"), "{text}");
}

#[test]
fn a_vocabulary_of_2_pow_40_is_refused_by_name() {
    let (name, text) = refusal("vocab_size_2pow40");
    assert!(text.starts_with(&format!("{name}: ")), "{text}");
    assert!(text.contains("llama.vocab_size"), "{text}");
}

#[test]
fn a_context_length_of_2_pow_40_is_refused_by_name() {
    let (name, text) = refusal("context_length_2pow40");
    assert!(text.starts_with(&format!("{name}: ")), "{text}");
    assert!(text.contains("llama.context_length"), "{text}");
}

#[test]
fn zero_kv_heads_is_a_bad_config_not_a_division_by_zero() {
    let (name, text) = refusal("head_count_kv_0");
    assert_eq!(name, "bad-config", "{text}");
}

#[test]
fn a_token_array_claiming_2_pow_40_entries_is_refused_before_it_is_allocated() {
    let (name, text) = refusal("token_array_2pow40");
    assert!(text.starts_with(&format!("{name}: ")), "{text}");
    assert_ne!(
        name, "bad-config",
        "the reader refuses it, not the model: {text}"
    );
}

#[test]
fn a_tensor_of_2_pow_80_elements_is_refused_by_the_reader() {
    let (name, text) = refusal("tensor_dims_overflow");
    assert!(text.starts_with(&format!("{name}: ")), "{text}");
    assert_ne!(name, "bad-config", "{text}");
}

#[test]
fn every_seed_of_the_model_corpus_is_pinned_here() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/model");
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .expect("fuzz/corpus/model")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            "block_count_2pow31.gguf",
            "context_length_2pow40.gguf",
            "head_count_kv_0.gguf",
            "tensor_dims_overflow.gguf",
            "token_array_2pow40.gguf",
            "vocab_size_2pow40.gguf",
        ]
    );
}
