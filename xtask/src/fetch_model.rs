//! `cargo xtask fetch-model [NAME]`: fetch a model Weft knows
//! (`weft_fetch::MODELS`; SmolLM2-135M-Instruct in Q4_1 by default, or
//! `gemma3-270m`) into the user's cache with `weft_fetch::fetch`
//! (idempotent), check that weft-gguf reads it (and weft-tokenizer, where
//! it reads that tokenizer yet), print its path and what the model builder
//! needs to know about it.

use std::collections::BTreeMap;
use weft_gguf::{Gguf, Value};
use weft_tokenizer::Tokenizer;

/// Keys printed when present, in this order.
const KEYS: &[&str] = &[
    "general.architecture",
    "general.name",
    "general.file_type",
    "general.quantization_version",
    "general.alignment",
    "llama.context_length",
    "llama.embedding_length",
    "llama.block_count",
    "llama.feed_forward_length",
    "llama.attention.head_count",
    "llama.attention.head_count_kv",
    "llama.attention.layer_norm_rms_epsilon",
    "llama.rope.dimension_count",
    "llama.rope.freq_base",
    "llama.rope.scaling.type",
    "llama.rope.scaling.factor",
    "llama.vocab_size",
    "gemma3.context_length",
    "gemma3.embedding_length",
    "gemma3.block_count",
    "gemma3.feed_forward_length",
    "gemma3.attention.head_count",
    "gemma3.attention.head_count_kv",
    "gemma3.attention.key_length",
    "gemma3.attention.sliding_window",
    "gemma3.rope.freq_base",
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_space_prefix",
];

/// Run the command (no arguments).
pub fn run(args: &[String]) -> Result<(), String> {
    let spec = match args {
        [] => &weft_fetch::SMOLLM2_135M,
        [name] => weft_fetch::spec(name).ok_or_else(|| {
            let known: Vec<&str> = weft_fetch::MODELS.iter().map(|m| m.name).collect();
            format!(
                "fetch-model: no model `{name}`; known: {}",
                known.join(", ")
            )
        })?,
        [_, extra, ..] => {
            return Err(format!(
                "fetch-model takes one model name, got `{extra}` too"
            ))
        }
    };
    let path = weft_fetch::fetch(spec, &mut |line| eprintln!("fetch-model: {line}"))
        .map_err(|e| e.to_string())?;
    let gguf = Gguf::open(&path).map_err(|e| e.to_string())?;
    // A tokenizer Weft cannot build is said, not an error: the file is
    // fetched and verified.
    let tok = Tokenizer::from_gguf(&gguf);
    println!("{}", path.display());
    println!(
        "  GGUF v{}, {} metadata entries, {} tensors, data at byte {}",
        gguf.version(),
        gguf.metadata_entries().count(),
        gguf.tensor_infos().len(),
        gguf.data_offset()
    );
    for key in KEYS {
        if let Some(v) = gguf.value(key) {
            println!("  {key} = {}", show(v));
        }
    }
    let mut types: BTreeMap<String, usize> = BTreeMap::new();
    for t in gguf.tensor_infos() {
        let name = t.tensor_type().map_or_else(
            || format!("type {}", t.type_id()),
            |ty| ty.name().to_string(),
        );
        *types.entry(name).or_default() += 1;
    }
    println!("  tensor types: {types:?}");
    for name in [
        "token_embd.weight",
        "output.weight",
        "blk.0.attn_q.weight",
        "blk.0.attn_k.weight",
        "blk.0.ffn_down.weight",
        "output_norm.weight",
    ] {
        match gguf.tensor_info(name) {
            Some(t) => println!(
                "  {name}: {:?} {}",
                t.dims(),
                t.tensor_type().map_or("?", |ty| ty.name())
            ),
            None => println!("  {name}: absent"),
        }
    }
    match tok {
        Ok(tok) => {
            let special = |s: &str| tok.token_id(s).map_or("absent".into(), |id| id.to_string());
            println!(
                "  tokenizer: {} tokens; <|im_start|> = {}, <|im_end|> = {}, <|endoftext|> = {}",
                tok.vocab_size(),
                special("<|im_start|>"),
                special("<|im_end|>"),
                special("<|endoftext|>")
            );
        }
        Err(e) => println!("  tokenizer: not read by Weft yet: {e}"),
    }
    Ok(())
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) => format!("[{} × {}]", a.len(), a.element_type()),
        Value::U32(x) => x.to_string(),
        Value::F32(x) => format!("{x:e}"),
        other => format!("{other:?}"),
    }
}
