//! The mixed-format path: a decoder-only transformer run from its GGUF
//! file's own block formats — Q4_K, Q6_K, Q5_0 and Q8_0 matrices, mixed as
//! llama.cpp's `llama-quantize` mixes them — never converted to another
//! format when the file opens. One forward pass (`advance` and `logits`,
//! llama.cpp's graph for the file's architecture), run two ways: by
//! [`Reference`],
//! whose products are plain f64 loops over weights dequantised once (the
//! yardstick, as [`mod@crate::reference`] is for the Q8_0 [`crate::Engine`]),
//! and by [`Engine`], whose products are kernels of a compiled plan over
//! the weights' file bytes.
//!
//! # Architectures
//!
//! [`Arch`] names the architectures served (`general.architecture`), and
//! its methods are everything that differs between them:
//!
//! | | `gemma3` (Gemma 3) | `llama` (SmolLM2 and kin) |
//! |---|---|---|
//! | embeddings | scaled by `√dim` | as stored |
//! | Q and K | a per-head RMSNorm, then RoPE | RoPE |
//! | RoPE | NEOX (element `i` with `i + n/2`); base 10 000 on sliding-window layers, the file's on global ones | adjacent pairs; the file's base |
//! | attention scale `1/√head_dim` | on Q, before attention | on the scores, inside it |
//! | positions attended | the last `window` on sliding-window layers (five in six: layer `l` is global when `l mod 6 = 5`), all on global ones | all |
//! | attention and FFN outputs | RMSNorm'd before the residual | added to the residual |
//! | FFN | `gelu(gate) · up` (GELU in its tanh form) | `silu(gate) · up` |
//!
//! Shared: per layer an RMSNorm, Q/K/V, RoPE, causal grouped-query
//! attention over a binary16 KV cache, the output projection, the
//! residual; an RMSNorm, the gated FFN, the down projection, the residual;
//! then the output RMSNorm and the head, tied to the token embeddings.
//! Norm weights are used as stored (Gemma's converter has already added
//! the 1 its checkpoints leave out).
//!
//! # Numeric model
//!
//! The reference's numeric model is llama.cpp's CPU backend's wherever it
//! rounds coarsely enough to move a greedy choice: every matrix product
//! quantises its activation first — to Q8_K for K-quant weights, to Q8_0
//! otherwise, by ggml's reference quantisers; keys and values are rounded
//! to binary16 when they enter the cache; attention is flash attention's
//! (the query rounded to binary16, an online softmax whose value
//! accumulator is binary16, rounded after every key); and `gelu(gate)` is
//! looked up at the binary16 rounding of `gate` and rounded to binary16
//! (ggml's `GGML_GELU_FP16` table). Activations are f32 between
//! operations, as llama.cpp keeps them; RMSNorm, RoPE and SiLU round as
//! ggml's do (module `ops`: squares in f32 summed in f64, an f32 scale;
//! angles by repeated f32 multiplication, `cosf`/`sinf`; `expf`); a
//! product's dot is summed in f64 and rounded once. The engine shares all
//! of it but the products' fold orders and attention (the
//! `attention.fused` contract's, which accumulates in f32).

mod engine;
mod ops;
mod reference;
#[cfg(test)]
mod synthetic;

pub use engine::{Engine, OpenError};
pub use ops::{Activation, RopeStyle};
pub use reference::Reference;

use half::f16;
use weft_gguf::Gguf;

use crate::{EngineError, ModelError};
use ops::{rmsnorm, Angles};

/// Whether `g` is this path's file rather than the Q8_0 [`crate::Engine`]'s:
/// a Gemma 3 file, or one with a matrix in a block format that engine
/// would have to convert at load time (Q4_K, Q5_0, Q6_K — converting them
/// to Q8_0 would add to the bytes every token reads). A file this path
/// cannot run after all is refused by [`Config::from_gguf`], by name.
pub fn serves(g: &Gguf) -> bool {
    use weft_gguf::TensorType as T;
    g.architecture().ok() == Some(Arch::Gemma3.name())
        || g.tensor_infos()
            .iter()
            .any(|t| matches!(t.tensor_type(), Some(T::Q4_K | T::Q5_0 | T::Q6_K)))
}

/// The greedy choice among `logits`: the first index of the largest under
/// IEEE total order (`f32::total_cmp`, so a positive NaN outranks +∞), 0
/// for none. Two passes over keys that order as the floats do — a
/// vectorisable maximum, then the first index holding it — where a
/// comparator over 262,144 logits took about 2% of a Gemma 3 token.
pub fn greedy(logits: &[f32]) -> u32 {
    // total_cmp's key: the bits, with the magnitude flipped for negatives.
    let key = |v: f32| {
        let b = v.to_bits() as i32;
        b ^ (((b >> 31) as u32) >> 1) as i32
    };
    let Some(best) = logits.iter().map(|&v| key(v)).max() else {
        return 0;
    };
    logits.iter().position(|&v| key(v) == best).unwrap_or(0) as u32
}

/// An architecture the mixed-format path runs (`general.architecture`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// `gemma3`: Gemma 3.
    Gemma3,
    /// `llama`: Llama and its kin (SmolLM2).
    Llama,
}

impl Arch {
    /// Every architecture served.
    pub const ALL: [Arch; 2] = [Arch::Gemma3, Arch::Llama];

    /// Its `general.architecture` name, the prefix of its metadata keys.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Gemma3 => "gemma3",
            Arch::Llama => "llama",
        }
    }

    /// The architecture named `name`, if served.
    pub fn from_name(name: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.name() == name)
    }

    /// Whether the token embeddings are multiplied by `√dim`.
    pub fn scales_embeddings(self) -> bool {
        self == Arch::Gemma3
    }

    /// Whether each head of Q and K is RMSNorm'd (`attn_q_norm`,
    /// `attn_k_norm`) before RoPE.
    pub fn norms_qk(self) -> bool {
        self == Arch::Gemma3
    }

    /// Which elements RoPE rotates together.
    pub fn rope(self) -> RopeStyle {
        match self {
            Arch::Gemma3 => RopeStyle::Neox,
            Arch::Llama => RopeStyle::Adjacent,
        }
    }

    /// Whether the attention scale multiplies Q before attention (Gemma's
    /// graph) rather than the scores inside it (Llama's).
    pub fn scales_queries(self) -> bool {
        self == Arch::Gemma3
    }

    /// Whether the attention and FFN outputs are RMSNorm'd
    /// (`post_attention_norm`, `post_ffw_norm`) before the residual.
    pub fn post_norms(self) -> bool {
        self == Arch::Gemma3
    }

    /// The gated FFN's activation.
    pub fn activation(self) -> Activation {
        match self {
            Arch::Gemma3 => Activation::GeluTanh,
            Arch::Llama => Activation::Silu,
        }
    }
}

/// Every extent and constant of a forward pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The architecture.
    pub arch: Arch,
    /// Model width (`ARCH.embedding_length`).
    pub dim: usize,
    /// Feed-forward width (`ARCH.feed_forward_length`).
    pub hidden: usize,
    /// Decoder blocks (`ARCH.block_count`).
    pub layers: usize,
    /// Query heads (`ARCH.attention.head_count`).
    pub heads: usize,
    /// Key/value heads (`ARCH.attention.head_count_kv`).
    pub kv_heads: usize,
    /// Per-head width of queries and keys (`ARCH.attention.key_length`,
    /// else `dim / heads`).
    pub head_dim: usize,
    /// Vocabulary size (the token embeddings' rows).
    pub vocab: usize,
    /// RMSNorm epsilon (`ARCH.attention.layer_norm_rms_epsilon`).
    pub rms_eps: f32,
    /// RoPE base of the global layers (`ARCH.rope.freq_base`, else
    /// 10 000).
    pub rope_base: f32,
    /// RoPE base of the sliding-window layers (Gemma 3's
    /// `gemma3.rope.freq_base_swa`, llama.cpp's default 10 000).
    pub rope_base_local: f32,
    /// Dimensions of each head RoPE rotates (`ARCH.rope.dimension_count`,
    /// else `head_dim`).
    pub rope_dims: usize,
    /// Positions a sliding-window layer attends to
    /// (`gemma3.attention.sliding_window`; 0: no layer slides).
    pub window: usize,
    /// Every `pattern`-th layer is global (llama.cpp's default 6).
    pub pattern: usize,
    /// Longest sequence the cache holds.
    pub max_seq: usize,
}

impl Config {
    /// The shape from `g`'s metadata (an architecture of [`Arch`]); the
    /// cache holds at most `max_seq` positions.
    pub fn from_gguf(g: &Gguf, max_seq: usize) -> Result<Config, ModelError> {
        let name = g.architecture()?;
        let arch = Arch::from_name(name).ok_or_else(|| ModelError::Config {
            reason: format!(
                "architecture `{name}` is not one the mixed-format path runs ({})",
                Arch::ALL.map(Arch::name).join(", ")
            ),
        })?;
        let key = |k: &str| format!("{name}.{k}");
        let u = |k: &str| -> Result<usize, ModelError> { Ok(g.metadata::<u32>(&key(k))? as usize) };
        let opt = |k: &str| -> Result<Option<usize>, ModelError> {
            Ok(g.metadata_opt::<u32>(&key(k))?.map(|v| v as usize))
        };
        let heads = u("attention.head_count")?;
        let dim = u("embedding_length")?;
        let head_dim = opt("attention.key_length")?.unwrap_or(dim.checked_div(heads).unwrap_or(0));
        let vocab = g
            .tensor_info("token_embd.weight")
            .and_then(|t| t.dims().get(1).copied())
            .unwrap_or(0) as usize;
        if g.tensor_info("output.weight").is_some() {
            return Err(ModelError::Config {
                reason: "an untied head (output.weight): the mixed-format path ties the head to the token embeddings".into(),
            });
        }
        if let Some(scaling) = g.metadata_opt::<&str>(&key("rope.scaling.type"))? {
            if scaling != "none" {
                return Err(ModelError::Config {
                    reason: format!("RoPE scaling `{scaling}` is not served"),
                });
            }
        }
        let rope_base = g.metadata_opt(&key("rope.freq_base"))?.unwrap_or(10_000.0);
        let gemma = arch == Arch::Gemma3;
        let c = Config {
            arch,
            dim,
            hidden: u("feed_forward_length")?,
            layers: u("block_count")?,
            heads,
            kv_heads: opt("attention.head_count_kv")?.unwrap_or(heads),
            head_dim,
            vocab,
            rms_eps: g.metadata(&key("attention.layer_norm_rms_epsilon"))?,
            rope_base,
            rope_base_local: if gemma {
                g.metadata_opt(&key("rope.freq_base_swa"))?
                    .unwrap_or(10_000.0)
            } else {
                rope_base
            },
            rope_dims: opt("rope.dimension_count")?.unwrap_or(head_dim),
            window: if gemma {
                opt("attention.sliding_window")?.unwrap_or(0)
            } else {
                0
            },
            pattern: if gemma {
                opt("attention.sliding_window_pattern")?.unwrap_or(6)
            } else {
                0
            },
            max_seq: max_seq
                .min(opt("context_length")?.unwrap_or(max_seq))
                .max(1),
        };
        c.check().map_err(|reason| ModelError::Config { reason })?;
        Ok(c)
    }

    /// Whether layer `l` attends through a sliding window.
    pub fn is_local(&self, l: usize) -> bool {
        self.window > 0 && (self.pattern == 0 || l % self.pattern < self.pattern - 1)
    }

    /// The attention scale, `1/√head_dim` in f32 (llama.cpp's for both
    /// architectures; where it applies is [`Arch::scales_queries`]).
    pub fn attention_scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }

    /// Check the shape is one the forward pass serves.
    pub fn check(&self) -> Result<(), String> {
        for (n, v) in [
            ("dim", self.dim),
            ("hidden", self.hidden),
            ("layers", self.layers),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("head_dim", self.head_dim),
            ("vocab", self.vocab),
        ] {
            if v == 0 {
                return Err(format!("{n} is 0"));
            }
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(format!(
                "heads {} is not a multiple of kv_heads {}",
                self.heads, self.kv_heads
            ));
        }
        if self.rope_dims == 0
            || !self.rope_dims.is_multiple_of(2)
            || self.rope_dims > self.head_dim
        {
            return Err(format!(
                "rope dimension count {} is not an even number in 2..={} (RoPE rotates pairs of a head)",
                self.rope_dims, self.head_dim
            ));
        }
        Ok(())
    }
}

fn vector(g: &Gguf, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
    let v = g.tensor(name)?.to_f32()?;
    if v.len() != len {
        return Err(ModelError::Shape {
            tensor: name.into(),
            reason: format!("{} values, expected {len}", v.len()),
        });
    }
    Ok(v)
}

/// A matrix of the model: one of a layer's seven, or the head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mat {
    /// `attn_q`.
    Q,
    /// `attn_k`.
    K,
    /// `attn_v`.
    V,
    /// `attn_output`.
    O,
    /// `ffn_gate`.
    Gate,
    /// `ffn_up`.
    Up,
    /// `ffn_down`.
    Down,
    /// The output projection: the token embeddings, tied.
    Head,
}

impl Mat {
    /// A layer's seven, in the order a step multiplies by them.
    pub const LAYER: [Mat; 7] = [
        Mat::Q,
        Mat::K,
        Mat::V,
        Mat::O,
        Mat::Gate,
        Mat::Up,
        Mat::Down,
    ];

    /// Its place in [`Mat::LAYER`] (the head, not a layer's: 0).
    pub(crate) fn index(self) -> usize {
        Mat::LAYER.iter().position(|&k| k == self).unwrap_or(0)
    }

    /// The plan's label for its site.
    pub fn label(self) -> &'static str {
        match self {
            Mat::Q => "blk.*.attn_q",
            Mat::K => "blk.*.attn_k",
            Mat::V => "blk.*.attn_v",
            Mat::O => "blk.*.attn_output",
            Mat::Gate => "blk.*.ffn_gate",
            Mat::Up => "blk.*.ffn_up",
            Mat::Down => "blk.*.ffn_down",
            Mat::Head => "output",
        }
    }

    /// The GGUF tensor's name in layer `l`.
    pub fn tensor(self, l: usize) -> String {
        let name = match self {
            Mat::Q => "attn_q",
            Mat::K => "attn_k",
            Mat::V => "attn_v",
            Mat::O => "attn_output",
            Mat::Gate => "ffn_gate",
            Mat::Up => "ffn_up",
            Mat::Down => "ffn_down",
            Mat::Head => return "token_embd.weight".to_owned(),
        };
        format!("blk.{l}.{name}.weight")
    }

    /// `(rows, cols)` in model `c`.
    pub fn shape(self, c: &Config) -> (usize, usize) {
        let (qd, kvd) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
        match self {
            Mat::Q => (qd, c.dim),
            Mat::K | Mat::V => (kvd, c.dim),
            Mat::O => (c.dim, qd),
            Mat::Gate | Mat::Up => (c.hidden, c.dim),
            Mat::Down => (c.dim, c.hidden),
            Mat::Head => (c.vocab, c.dim),
        }
    }
}

/// What the forward pass delegates — its products and its attention — so
/// that the two ways of running it share everything else.
pub(crate) trait Kernels {
    /// Row `token` of the token embeddings, as f32.
    fn embed(&mut self, token: u32) -> Vec<f32>;
    /// `W · x` for matrix `m` of layer `layer` (0 for the head), with `x`
    /// quantised as llama.cpp pairs the weights' format.
    fn apply(&mut self, m: Mat, layer: usize, x: &[f32]) -> Result<Vec<f32>, EngineError>;
    /// Every query head of `q` against the `lk` cached keys and values of
    /// `keys`/`values` (binary16 bits, `kv_dim` a position), the last of
    /// them the query's own position, each score multiplied by `scale`;
    /// the heads' outputs concatenated.
    fn attend(
        &mut self,
        c: &Config,
        q: &[f32],
        keys: &[u16],
        values: &[u16],
        lk: usize,
        scale: f32,
    ) -> Result<Vec<f32>, EngineError>;
}

/// The f32 vectors of a layer: its norms' weights (those of Q and K and
/// the post-norms only where [`Arch::norms_qk`] and [`Arch::post_norms`]
/// say).
pub(crate) struct LayerNorms {
    attn_norm: Vec<f32>,
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    post_attn_norm: Option<Vec<f32>>,
    ffn_norm: Vec<f32>,
    post_ffw_norm: Option<Vec<f32>>,
}

/// Every norm weight of the model.
pub(crate) struct Norms {
    layers: Vec<LayerNorms>,
    output: Vec<f32>,
}

impl Norms {
    pub(crate) fn open(g: &Gguf, c: &Config) -> Result<Norms, ModelError> {
        let (dim, hd) = (c.dim, c.head_dim);
        let layers = (0..c.layers)
            .map(|l| {
                let n = |t: &str| format!("blk.{l}.{t}.weight");
                let when = |on: bool, t: &str, len| on.then(|| vector(g, &n(t), len)).transpose();
                let (qk, post) = (c.arch.norms_qk(), c.arch.post_norms());
                Ok(LayerNorms {
                    attn_norm: vector(g, &n("attn_norm"), dim)?,
                    q_norm: when(qk, "attn_q_norm", hd)?,
                    k_norm: when(qk, "attn_k_norm", hd)?,
                    post_attn_norm: when(post, "post_attention_norm", dim)?,
                    ffn_norm: vector(g, &n("ffn_norm"), dim)?,
                    post_ffw_norm: when(post, "post_ffw_norm", dim)?,
                })
            })
            .collect::<Result<_, ModelError>>()?;
        Ok(Norms {
            layers,
            output: vector(g, "output_norm.weight", dim)?,
        })
    }
}

/// The binary16 KV cache and the position.
pub(crate) struct Cache {
    /// Per layer: keys and values of every position so far, `kv_dim` each,
    /// as binary16 bits.
    keys: Vec<Vec<u16>>,
    values: Vec<Vec<u16>>,
    pos: usize,
}

impl Cache {
    pub(crate) fn new(c: &Config) -> Cache {
        let kvd = c.kv_heads * c.head_dim;
        Cache {
            keys: vec![Vec::with_capacity(c.max_seq * kvd); c.layers],
            values: vec![Vec::with_capacity(c.max_seq * kvd); c.layers],
            pos: 0,
        }
    }

    pub(crate) fn reset(&mut self) {
        self.keys.iter_mut().for_each(Vec::clear);
        self.values.iter_mut().for_each(Vec::clear);
        self.pos = 0;
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }
}

/// `x` RMSNorm'd by `w` when there is a `w`; else `x` as it is.
fn maybe_norm(x: Vec<f32>, w: Option<&Vec<f32>>, eps: f32) -> Vec<f32> {
    match w {
        Some(w) => rmsnorm(&x, w, eps),
        None => x,
    }
}

/// One token through the model's layers at the cache's next position: the
/// residual stream after the last layer (the head's input before the
/// output norm). Everything but the products and attention is here, once,
/// for both ways of running it and every [`Arch`]; those are `p`'s.
fn advance(
    c: &Config,
    norms: &Norms,
    p: &mut impl Kernels,
    cache: &mut Cache,
    token: u32,
) -> Result<Vec<f32>, EngineError> {
    if token as usize >= c.vocab {
        return Err(EngineError::BadToken {
            id: token,
            vocab: c.vocab,
        });
    }
    if cache.pos >= c.max_seq {
        return Err(EngineError::ContextFull {
            needed: cache.pos + 1,
            max_seq: c.max_seq,
        });
    }
    let (arch, eps, hd, pos) = (c.arch, c.rms_eps, c.head_dim, cache.pos);
    let mut x = p.embed(token);
    if arch.scales_embeddings() {
        // ggml_scale: an f32 multiply by sqrtf(dim).
        let scale = (c.dim as f32).sqrt();
        x.iter_mut().for_each(|v| *v *= scale);
    }
    // The position's rotation angles, once per base (every head and layer
    // of a kind shares them).
    let local = Angles::new(pos, c.rope_base_local, c.rope_dims, arch.rope());
    let global = Angles::new(pos, c.rope_base, c.rope_dims, arch.rope());
    // 1/√head_dim: on Q (an f32 multiply, after RoPE) or on the scores.
    let (q_scale, kq_scale) = if arch.scales_queries() {
        (Some(c.attention_scale()), 1.0)
    } else {
        (None, c.attention_scale())
    };
    for (l, w) in norms.layers.iter().enumerate() {
        let h = rmsnorm(&x, &w.attn_norm, eps);
        let mut q = p.apply(Mat::Q, l, &h)?;
        let mut k = p.apply(Mat::K, l, &h)?;
        let v = p.apply(Mat::V, l, &h)?;
        let angles = if c.is_local(l) { &local } else { &global };
        for head in q.chunks_exact_mut(hd) {
            if let Some(n) = &w.q_norm {
                let normed = rmsnorm(head, n, eps);
                head.copy_from_slice(&normed);
            }
            angles.rotate(head);
            if let Some(s) = q_scale {
                head.iter_mut().for_each(|v| *v *= s);
            }
        }
        for head in k.chunks_exact_mut(hd) {
            if let Some(n) = &w.k_norm {
                let normed = rmsnorm(head, n, eps);
                head.copy_from_slice(&normed);
            }
            angles.rotate(head);
        }
        cache.keys[l].extend(k.iter().map(|&v| f16::from_f32(v).to_bits()));
        cache.values[l].extend(v.iter().map(|&v| f16::from_f32(v).to_bits()));
        // A sliding-window layer sees the last `window` positions.
        let first = if c.is_local(l) {
            (pos + 1).saturating_sub(c.window)
        } else {
            0
        };
        let kvd = c.kv_heads * hd;
        let (keys, values) = (
            &cache.keys[l][first * kvd..],
            &cache.values[l][first * kvd..],
        );
        let att = p.attend(c, &q, keys, values, pos + 1 - first, kq_scale)?;
        let o = p.apply(Mat::O, l, &att)?;
        let o = maybe_norm(o, w.post_attn_norm.as_ref(), eps);
        x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);

        let h = rmsnorm(&x, &w.ffn_norm, eps);
        let gate = p.apply(Mat::Gate, l, &h)?;
        let up = p.apply(Mat::Up, l, &h)?;
        let act = arch.activation();
        let gated: Vec<f32> = gate
            .iter()
            .zip(&up)
            .map(|(&g, &u)| act.gated(g, u))
            .collect();
        let d = p.apply(Mat::Down, l, &gated)?;
        let d = maybe_norm(d, w.post_ffw_norm.as_ref(), eps);
        x.iter_mut().zip(&d).for_each(|(x, d)| *x += d);
    }
    cache.pos += 1;
    Ok(x)
}

/// The logits of the residual stream `x`: the output norm, then the head.
fn logits(
    c: &Config,
    norms: &Norms,
    p: &mut impl Kernels,
    x: &[f32],
) -> Result<Vec<f32>, EngineError> {
    let out = rmsnorm(x, &norms.output, c.rms_eps);
    p.apply(Mat::Head, 0, &out)
}

/// Feed `token` at the cache's next position: its logits.
pub(crate) fn step(
    c: &Config,
    norms: &Norms,
    p: &mut impl Kernels,
    cache: &mut Cache,
    token: u32,
) -> Result<Vec<f32>, EngineError> {
    let x = advance(c, norms, p, cache, token)?;
    logits(c, norms, p, &x)
}

/// Feed `prompt` a token at a time, the output norm and head on the last
/// alone (a prompt token's next-token choice is never read; on Gemma 3
/// the head is half a token's bytes): its logits. Checked first, so an
/// error feeds nothing: [`EngineError::EmptyPrompt`],
/// [`EngineError::ContextFull`], [`EngineError::BadToken`].
pub(crate) fn prefill(
    c: &Config,
    norms: &Norms,
    p: &mut impl Kernels,
    cache: &mut Cache,
    prompt: &[u32],
) -> Result<Vec<f32>, EngineError> {
    if prompt.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    if cache.pos + prompt.len() > c.max_seq {
        return Err(EngineError::ContextFull {
            needed: cache.pos + prompt.len(),
            max_seq: c.max_seq,
        });
    }
    if let Some(&id) = prompt.iter().find(|&&t| t as usize >= c.vocab) {
        return Err(EngineError::BadToken { id, vocab: c.vocab });
    }
    let mut x = Vec::new();
    for &t in prompt {
        x = advance(c, norms, p, cache, t)?;
    }
    logits(c, norms, p, &x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sixth_layer_is_global() {
        let c = Config {
            arch: Arch::Gemma3,
            dim: 640,
            hidden: 2048,
            layers: 18,
            heads: 4,
            kv_heads: 1,
            head_dim: 256,
            vocab: 262_144,
            rms_eps: 1e-6,
            rope_base: 1e6,
            rope_base_local: 1e4,
            rope_dims: 256,
            window: 512,
            pattern: 6,
            max_seq: 64,
        };
        let global: Vec<usize> = (0..18).filter(|&l| !c.is_local(l)).collect();
        assert_eq!(global, [5, 11, 17]);
        let llama = Config {
            arch: Arch::Llama,
            window: 0,
            pattern: 0,
            ..c
        };
        assert!((0..18).all(|l| !llama.is_local(l)), "no Llama layer slides");
    }

    #[test]
    fn greedy_is_the_first_largest_under_total_order() {
        let naive = |l: &[f32]| {
            (0..l.len())
                .max_by(|&a, &b| l[a].total_cmp(&l[b]).then(b.cmp(&a)))
                .unwrap_or(0) as u32
        };
        let cases: [&[f32]; 8] = [
            &[],
            &[1.0],
            &[0.5, 2.0, 2.0, -1.0],
            &[-0.0, 0.0, -0.0],
            &[-3.0, -1.0, -2.0],
            &[f32::NEG_INFINITY, f32::MIN, -f32::MIN_POSITIVE],
            &[1.0, f32::INFINITY, f32::NAN, 2.0],
            &[-f32::NAN, f32::NEG_INFINITY, -1e-45],
        ];
        for c in cases {
            assert_eq!(greedy(c), naive(c), "{c:?}");
        }
        // Many values, with ties at the top far apart.
        let mut v: Vec<f32> = (0..262_144u32)
            .map(|i| ((i.wrapping_mul(2_654_435_761) >> 8) as f32) * 1e-6 - 4.0)
            .collect();
        v[70_000] = 1e9;
        v[200_000] = 1e9;
        assert_eq!(greedy(&v), naive(&v));
        assert_eq!(greedy(&v), 70_000);
    }

    #[test]
    fn architectures_are_named_as_gguf_files_name_them() {
        for a in Arch::ALL {
            assert_eq!(Arch::from_name(a.name()), Some(a));
        }
        assert_eq!(Arch::from_name("gpt2"), None);
    }
}
