//! Hostile model files: metadata that claims sizes the tensors do not back
//! must give a named error from `Model::open` (the path a user's file
//! takes) at once, before anything is sized from it. Each file is a small,
//! well-formed one-block llama file written here with `GgufWriter`, with one
//! lie put in: a metadata value, or (for what the writer cannot say) a
//! count patched in the bytes.

use std::path::PathBuf;

use weft_gguf::{Array, Gguf, GgufWriter, TensorType, Value};
use weft_llm::Model;

/// The file's metadata, with `edit` applied, and its tensors.
fn tiny(edit: impl FnOnce(&mut Vec<(&'static str, Value)>)) -> Vec<u8> {
    let mut meta = vec![
        ("general.architecture", Value::String("llama".into())),
        ("llama.embedding_length", Value::U32(32)),
        ("llama.feed_forward_length", Value::U32(64)),
        ("llama.block_count", Value::U32(1)),
        ("llama.attention.head_count", Value::U32(2)),
        ("llama.attention.head_count_kv", Value::U32(1)),
        ("llama.vocab_size", Value::U32(8)),
        ("llama.context_length", Value::U32(128)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        (
            "tokenizer.ggml.tokens",
            Value::Array(Array::String((0..8).map(|i| format!("tok{i}")).collect())),
        ),
    ];
    edit(&mut meta);
    let mut w = GgufWriter::new();
    for (k, v) in meta {
        w.metadata(k, v);
    }
    let f32s = |n: usize| vec![0u8; 4 * n];
    w.tensor("token_embd.weight", &[32, 8], TensorType::F32, &f32s(256));
    w.tensor(
        "blk.0.attn_q.weight",
        &[32, 32],
        TensorType::F32,
        &f32s(1024),
    );
    w.tensor(
        "blk.0.attn_k.weight",
        &[32, 16],
        TensorType::F32,
        &f32s(512),
    );
    w.tensor(
        "blk.0.ffn_up.weight",
        &[32, 64],
        TensorType::F32,
        &f32s(2048),
    );
    let bytes = w.to_bytes();
    Gguf::from_bytes(bytes.clone()).expect("the written file parses");
    bytes
}

fn set(meta: &mut [(&'static str, Value)], key: &str, v: Value) {
    meta.iter_mut().find(|(k, _)| *k == key).expect(key).1 = v;
}

/// Where `needle` starts in `bytes` (it must occur exactly once).
fn find(bytes: &[u8], needle: &[u8]) -> usize {
    let hits: Vec<usize> = bytes
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(hits.len(), 1, "{:?}", String::from_utf8_lossy(needle));
    hits[0]
}

/// `bytes` written to a file of its own; `Model::open`'s error as
/// `(name, message)`.
fn refusal(case: &str, bytes: &[u8]) -> (String, String) {
    let path: PathBuf =
        std::env::temp_dir().join(format!("weft-hostile-{}-{case}.gguf", std::process::id()));
    std::fs::write(&path, bytes).expect("write the hostile file");
    let r = Model::open(&path, 64);
    let _ = std::fs::remove_file(&path);
    match r {
        Ok(_) => panic!("{case}: a hostile file was accepted"),
        Err(e) => (e.name().to_owned(), e.to_string()),
    }
}

#[test]
fn a_file_claiming_2_pow_31_blocks_is_a_bad_config_naming_the_key() {
    let f = tiny(|m| set(m, "llama.block_count", Value::U32(1 << 31)));
    let (name, text) = refusal("blocks", &f);
    assert_eq!(name, "bad-config", "{text}");
    assert!(text.contains("llama.block_count 2147483648"), "{text}");
}

#[test]
fn a_vocabulary_of_2_pow_40_is_refused_by_name() {
    // llama.cpp writes the key as uint32: a u64 is refused by its type
    // (a u32 vocabulary larger than the embeddings is weft-llm's unit test).
    let f = tiny(|m| set(m, "llama.vocab_size", Value::U64(1 << 40)));
    let (name, text) = refusal("vocab", &f);
    assert_eq!(name, "wrong-type", "{text}");
    assert!(text.contains("llama.vocab_size"), "{text}");
}

#[test]
fn a_context_length_of_2_pow_40_is_refused_by_name() {
    let f = tiny(|m| set(m, "llama.context_length", Value::U64(1 << 40)));
    let (name, text) = refusal("context", &f);
    assert_eq!(name, "wrong-type", "{text}");
    assert!(text.contains("llama.context_length"), "{text}");
}

#[test]
fn zero_kv_heads_is_a_bad_config_not_a_division_by_zero() {
    let f = tiny(|m| set(m, "llama.attention.head_count_kv", Value::U32(0)));
    let (name, text) = refusal("kv0", &f);
    assert_eq!(name, "bad-config", "{text}");
    assert!(text.contains("kv_heads is 0"), "{text}");
}

#[test]
fn a_token_array_claiming_2_pow_40_entries_is_refused_before_it_is_allocated() {
    let mut f = tiny(|_| {});
    // the key, then u32 value type 9 (array), u32 element type 8 (string),
    // then the u64 count
    let key = b"tokenizer.ggml.tokens";
    let count = find(&f, key) + key.len() + 8;
    assert_eq!(
        f[count..count + 8],
        8u64.to_le_bytes(),
        "the count is where the format puts it"
    );
    f[count..count + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let (name, text) = refusal("tokens", &f);
    assert_eq!(name, "count-too-large", "{text}");
    assert!(text.contains("1099511627776"), "{text}");
}

#[test]
fn a_tensor_of_2_pow_80_elements_is_refused_by_the_reader() {
    let mut f = tiny(|_| {});
    // the name, then u32 n_dims (2), then the dims as u64
    let key = b"blk.0.ffn_up.weight";
    let dims = find(&f, key) + key.len() + 4;
    assert_eq!(f[dims - 4..dims], 2u32.to_le_bytes());
    assert_eq!(f[dims..dims + 8], 32u64.to_le_bytes());
    f[dims..dims + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    f[dims + 8..dims + 16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let (name, text) = refusal("dims", &f);
    assert_eq!(name, "shape-overflow", "{text}");
    assert!(text.contains("blk.0.ffn_up.weight"), "{text}");
}
