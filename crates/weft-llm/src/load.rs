//! Building [`Weights`] from a GGUF file of the `llama` architecture.
//!
//! Matrices of any type weft-gguf converts (Q8_0, Q4_1, F16, F32) become
//! Q8_0 — Q4_1 re-quantised exactly as llama.cpp re-quantises it — on all
//! cores; norm vectors are read as f32. A file without `output.weight`
//! ties the output projection to the token embeddings (SmolLM2 does).

use std::sync::Arc;

use weft_gguf::Gguf;

use crate::weights::{Layer, Q8Matrix, Weights};
use crate::{Config, ModelError};

fn meta_usize(g: &Gguf, key: &str) -> Result<usize, ModelError> {
    let v: u32 = g.metadata(key)?;
    Ok(v as usize)
}

/// The model's shape from the file's metadata; the KV cache holds at most
/// `max_seq` positions (the smaller of that and the file's context length).
pub fn config(g: &Gguf, max_seq: usize) -> Result<Config, ModelError> {
    let arch = g.architecture()?;
    if arch != "llama" {
        return Err(ModelError::Config {
            reason: format!("architecture `{arch}` is not `llama`"),
        });
    }
    let dim = meta_usize(g, "llama.embedding_length")?;
    let heads = meta_usize(g, "llama.attention.head_count")?;
    let kv_heads = match g.metadata_opt::<u32>("llama.attention.head_count_kv")? {
        Some(v) => v as usize,
        None => heads,
    };
    let vocab = match g.metadata_opt::<u32>("llama.vocab_size")? {
        Some(v) => v as usize,
        None => g
            .tensor_info("token_embd.weight")
            .and_then(|t| t.dims().get(1).copied())
            .unwrap_or(0) as usize,
    };
    let context = g
        .metadata_opt::<u32>("llama.context_length")?
        .map_or(max_seq, |c| c as usize);
    let head_dim = dim.checked_div(heads).unwrap_or(0);
    let config = Config {
        dim,
        hidden: meta_usize(g, "llama.feed_forward_length")?,
        layers: meta_usize(g, "llama.block_count")?,
        heads,
        kv_heads,
        vocab,
        rms_eps: g.metadata("llama.attention.layer_norm_rms_epsilon")?,
        rope_base: g.metadata_opt("llama.rope.freq_base")?.unwrap_or(10_000.0),
        rope_dims: g
            .metadata_opt::<u32>("llama.rope.dimension_count")?
            .map_or(head_dim, |d| d as usize),
        max_seq: max_seq.min(context).max(1),
    };
    config
        .check()
        .map_err(|reason| ModelError::Config { reason })?;
    Ok(config)
}

/// Every weight of a `llama` GGUF file, converted on `threads` threads
/// (0: all the host has).
pub fn weights(g: &Gguf, max_seq: usize, threads: usize) -> Result<Weights, ModelError> {
    let c = config(g, max_seq)?;
    let tied = g.tensor_info("output.weight").is_none();
    let mut names: Vec<String> = vec!["token_embd.weight".to_owned()];
    if !tied {
        names.push("output.weight".to_owned());
    }
    const MATS: [&str; 7] = [
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
    ];
    for i in 0..c.layers {
        names.extend(MATS.iter().map(|m| format!("blk.{i}.{m}.weight")));
    }
    let tensors = names
        .iter()
        .map(|n| g.tensor(n))
        .collect::<Result<Vec<_>, _>>()?;
    let mut shapes = Vec::with_capacity(tensors.len());
    for t in &tensors {
        let d = t.dims();
        if d.len() != 2 {
            return Err(ModelError::Shape {
                tensor: t.name().to_owned(),
                reason: format!("{} dimensions, a matrix has 2", d.len()),
            });
        }
        // ggml order: d[0] is the row length.
        shapes.push((d[1] as usize, d[0] as usize));
    }
    let converted = weft_gguf::to_q8_0_many(&tensors, threads)?;
    let mut mats = names
        .iter()
        .zip(shapes)
        .zip(converted)
        .map(|((n, (rows, cols)), bytes)| Q8Matrix::new(n, rows, cols, Arc::from(bytes)));
    let mut next = || -> Result<Q8Matrix, ModelError> {
        mats.next().unwrap_or_else(|| {
            Err(ModelError::Config {
                reason: "fewer converted tensors than requested".to_owned(),
            })
        })
    };
    let embed = next()?;
    let output = if tied { embed.clone() } else { next()? };
    let vector = |name: String| -> Result<Vec<f32>, ModelError> { Ok(g.tensor(&name)?.to_f32()?) };
    let mut layers = Vec::with_capacity(c.layers);
    for i in 0..c.layers {
        layers.push(Layer {
            wq: next()?,
            wk: next()?,
            wv: next()?,
            wo: next()?,
            w_gate: next()?,
            w_up: next()?,
            w_down: next()?,
            attn_norm: vector(format!("blk.{i}.attn_norm.weight"))?,
            ffn_norm: vector(format!("blk.{i}.ffn_norm.weight"))?,
        });
    }
    let w = Weights {
        config: c,
        embed,
        layers,
        output_norm: vector("output_norm.weight".to_owned())?,
        output,
    };
    w.check()?;
    Ok(w)
}
