//! Building [`Weights`] from a GGUF file of the `llama` architecture.
//!
//! Matrices of any type weft-gguf converts (Q8_0, Q4_1, F16, F32) become
//! Q8_0 — Q4_1 re-quantised exactly as llama.cpp re-quantises it — on all
//! cores; norm vectors are read as f32. A file without `output.weight`
//! ties the output projection to the token embeddings (SmolLM2 does).

use weft_gguf::Gguf;

use crate::weights::{Layer, Q8Matrix, Weights};
use crate::{Config, KvCache, ModelError};

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
        kv: KvCache::default(),
    };
    config
        .check()
        .map_err(|reason| ModelError::Config { reason })?;
    check_against_tensors(g, &config)?;
    Ok(config)
}

/// A tensor's extent for a message: the number, or `no` if the tensor
/// has no such dimension.
fn extent(d: Option<&u64>) -> String {
    d.map_or_else(|| "no".to_owned(), u64::to_string)
}

/// The metadata that sizes allocations (blocks, width, feed-forward width,
/// heads, vocabulary) must agree with the tensors the file actually holds,
/// checked before anything is allocated from it: a file claiming 2^31
/// blocks is a named error at once, not an allocation failure a minute on.
fn check_against_tensors(g: &Gguf, c: &Config) -> Result<(), ModelError> {
    let claim = |what: &str, meta: usize, file: String| ModelError::Config {
        reason: format!("the metadata says {what} {meta}, but {file}"),
    };
    // Blocks: the highest `blk.N.` index present, plus one.
    let blocks = g
        .tensor_infos()
        .iter()
        .filter_map(|t| {
            t.name()
                .strip_prefix("blk.")?
                .split('.')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .max()
        .map_or(0, |m| m + 1);
    if c.layers as u64 != blocks {
        return Err(claim(
            "llama.block_count",
            c.layers,
            format!("the file has tensors for {blocks} blocks"),
        ));
    }
    let dims = |name: &str| -> Result<Vec<u64>, ModelError> {
        g.tensor_info(name)
            .map(|t| t.dims().to_vec())
            .ok_or_else(|| ModelError::Shape {
                tensor: name.to_owned(),
                reason: "missing from the file".to_owned(),
            })
    };
    // ggml order: dims[0] is the row length.
    let embd = dims("token_embd.weight")?;
    if embd.first() != Some(&(c.dim as u64)) {
        return Err(claim(
            "llama.embedding_length",
            c.dim,
            format!(
                "token_embd.weight has rows of {} values",
                extent(embd.first())
            ),
        ));
    }
    if embd.get(1) != Some(&(c.vocab as u64)) {
        return Err(claim(
            "a vocabulary of",
            c.vocab,
            format!("token_embd.weight has {} rows", extent(embd.get(1))),
        ));
    }
    let up = dims("blk.0.ffn_up.weight")?;
    if up.get(1) != Some(&(c.hidden as u64)) {
        return Err(claim(
            "llama.feed_forward_length",
            c.hidden,
            format!("blk.0.ffn_up.weight has {} rows", extent(up.get(1))),
        ));
    }
    let q = dims("blk.0.attn_q.weight")?;
    let k = dims("blk.0.attn_k.weight")?;
    let kv_rows = (c.kv_heads * c.head_dim()) as u64;
    if q.get(1) != Some(&(c.dim as u64)) || k.get(1) != Some(&kv_rows) {
        return Err(claim(
            "heads/kv_heads",
            c.heads,
            format!(
                "attn_q has {} rows and attn_k {} (want {} and {kv_rows} for {} kv heads)",
                extent(q.get(1)),
                extent(k.get(1)),
                c.dim,
                c.kv_heads
            ),
        ));
    }
    Ok(())
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
    // One arena for every matrix (a token streams all of them), converted
    // straight into it.
    let lens = weft_gguf::q8_0_lens(&tensors)?;
    let total = lens
        .iter()
        .map(|len| len.next_multiple_of(weft_arena::ALIGN))
        .sum();
    let mut arena = weft_arena::ArenaBuilder::new(total);
    let ranges = arena.push_many_with(&lens, |outs| {
        weft_gguf::to_q8_0_into(&tensors, outs, threads)
    })?;
    let arena = arena.seal()?;
    let mut mats = names
        .iter()
        .zip(shapes)
        .zip(ranges)
        .map(|((n, (rows, cols)), r)| Q8Matrix::new(n, rows, cols, arena.view(r)));
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

#[cfg(test)]
mod tests {
    use weft_gguf::{Array, Gguf, GgufWriter, TensorType, Value};

    use super::config;
    use crate::{Model, ModelError};

    /// A one-block llama file with only the tensors `config` reads the
    /// shapes of (and a token list, for the reader's counts); `edit`
    /// changes the metadata before it is written.
    fn tiny_bytes(edit: impl FnOnce(&mut Vec<(&'static str, Value)>)) -> Vec<u8> {
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
        w.to_bytes()
    }

    fn tiny(edit: impl FnOnce(&mut Vec<(&'static str, Value)>)) -> Gguf {
        Gguf::from_bytes(tiny_bytes(edit)).expect("the tiny file parses")
    }

    fn set(meta: &mut [(&'static str, Value)], key: &str, v: Value) {
        meta.iter_mut().find(|(k, _)| *k == key).expect(key).1 = v;
    }

    fn refusal(g: &Gguf) -> String {
        match config(g, 64) {
            Err(e @ ModelError::Config { .. }) => e.to_string(),
            other => panic!("expected a bad-config error, got {other:?}"),
        }
    }

    #[test]
    fn metadata_that_matches_the_tensors_is_accepted() {
        let c = config(&tiny(|_| {}), 64).expect("accepted");
        assert_eq!(
            (c.layers, c.dim, c.hidden, c.vocab, c.max_seq),
            (1, 32, 64, 8, 64)
        );
    }

    #[test]
    fn a_block_count_of_2_pow_31_is_refused_before_anything_is_allocated() {
        let g = tiny(|m| set(m, "llama.block_count", Value::U32(1 << 31)));
        let e = refusal(&g);
        assert!(e.contains("llama.block_count 2147483648"), "{e}");
        assert!(e.contains("tensors for 1 blocks"), "{e}");
    }

    #[test]
    fn a_vocabulary_larger_than_the_embeddings_is_refused() {
        let g = tiny(|m| set(m, "llama.vocab_size", Value::U32(1 << 31)));
        let e = refusal(&g);
        assert!(e.contains("vocabulary of 2147483648"), "{e}");
    }

    #[test]
    fn widths_and_heads_that_disagree_with_the_tensors_are_refused() {
        let g = tiny(|m| set(m, "llama.feed_forward_length", Value::U32(1 << 30)));
        assert!(refusal(&g).contains("llama.feed_forward_length"));
        let g = tiny(|m| set(m, "llama.attention.head_count_kv", Value::U32(2)));
        assert!(refusal(&g).contains("kv heads"));
    }

    #[test]
    fn a_context_length_of_2_pow_40_is_a_named_type_error() {
        // The key is a u32 in llama.cpp's files; a u64 is refused by name
        // (and the KV cache is sized by the caller's max_seq anyway).
        let g = tiny(|m| set(m, "llama.context_length", Value::U64(1 << 40)));
        let e = config(&g, 64).expect_err("refused");
        assert!(matches!(e, ModelError::Gguf { .. }), "{e}");
    }

    // Hostile files through `Model::open`, the path a user's file takes:
    // each must be refused by name at once, before anything is sized from
    // its metadata. (The fuzz target `model` keeps looking for more.)

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
    fn open_refusal(case: &str, bytes: &[u8]) -> (String, String) {
        let path =
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
        let f = tiny_bytes(|m| set(m, "llama.block_count", Value::U32(1 << 31)));
        let (name, text) = open_refusal("blocks", &f);
        assert_eq!(name, "bad-config", "{text}");
        assert!(text.contains("llama.block_count 2147483648"), "{text}");
    }

    #[test]
    fn a_file_with_a_vocabulary_of_2_pow_40_is_refused_by_the_keys_type() {
        // llama.cpp writes the key as uint32; a u32 vocabulary larger than
        // the embeddings is `a_vocabulary_larger_than_the_embeddings_is_refused`.
        let f = tiny_bytes(|m| set(m, "llama.vocab_size", Value::U64(1 << 40)));
        let (name, text) = open_refusal("vocab", &f);
        assert_eq!(name, "wrong-type", "{text}");
        assert!(text.contains("llama.vocab_size"), "{text}");
    }

    #[test]
    fn a_file_with_a_context_length_of_2_pow_40_is_refused_by_name() {
        let f = tiny_bytes(|m| set(m, "llama.context_length", Value::U64(1 << 40)));
        let (name, text) = open_refusal("context", &f);
        assert_eq!(name, "wrong-type", "{text}");
        assert!(text.contains("llama.context_length"), "{text}");
    }

    #[test]
    fn a_file_with_zero_kv_heads_is_a_bad_config_not_a_division_by_zero() {
        let f = tiny_bytes(|m| set(m, "llama.attention.head_count_kv", Value::U32(0)));
        let (name, text) = open_refusal("kv0", &f);
        assert_eq!(name, "bad-config", "{text}");
        assert!(text.contains("kv_heads is 0"), "{text}");
    }

    #[test]
    fn a_token_array_claiming_2_pow_40_entries_is_refused_before_it_is_allocated() {
        let mut f = tiny_bytes(|_| {});
        // the key, then u32 value type 9 (array), u32 element type 8
        // (string), then the u64 count
        let key = b"tokenizer.ggml.tokens";
        let count = find(&f, key) + key.len() + 8;
        assert_eq!(
            f[count..count + 8],
            8u64.to_le_bytes(),
            "the count is where the format puts it"
        );
        f[count..count + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let (name, text) = open_refusal("tokens", &f);
        assert_eq!(name, "count-too-large", "{text}");
        assert!(text.contains("1099511627776"), "{text}");
    }

    #[test]
    fn a_tensor_of_2_pow_80_elements_is_refused_by_the_reader() {
        let mut f = tiny_bytes(|_| {});
        // the name, then u32 n_dims (2), then the dims as u64
        let key = b"blk.0.ffn_up.weight";
        let dims = find(&f, key) + key.len() + 4;
        assert_eq!(f[dims - 4..dims], 2u32.to_le_bytes());
        assert_eq!(f[dims..dims + 8], 32u64.to_le_bytes());
        f[dims..dims + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        f[dims + 8..dims + 16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let (name, text) = open_refusal("dims", &f);
        assert_eq!(name, "shape-overflow", "{text}");
        assert!(text.contains("blk.0.ffn_up.weight"), "{text}");
    }
}
