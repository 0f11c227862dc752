//! Gemma 3 (`general.architecture = "gemma3"`): its shape from a GGUF
//! file, and one forward pass run two ways — by
//! [`Gemma3Reference`], whose products are plain f64 loops over weights
//! dequantised once (the yardstick, as [`mod@crate::reference`] is for the
//! Llama model), and by [`Gemma3Engine`], whose products are kernels of a
//! compiled plan over the weights in their GGUF bytes.
//!
//! The order of operations is llama.cpp's Gemma 3 graph: embeddings scaled
//! by `√dim`; per layer RMSNorm, Q/K/V, per-head RMSNorm of Q and K, NEOX
//! RoPE (base 10 000 on sliding-window layers, the file's base on global
//! ones), Q scaled by `1/√head_dim`, causal attention — over the last
//! `window` positions on sliding-window layers (five in six: layer `l` is
//! global when `l mod 6 = 5`) — the output projection, a post-attention
//! RMSNorm, the residual; RMSNorm, `gelu(gate) · up` (GELU in its tanh
//! form), the down projection, a post-FFN RMSNorm, the residual; the
//! output RMSNorm and the tied output projection (the token embeddings).
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
//! operations, as llama.cpp keeps them; RMSNorm and RoPE round as ggml's
//! do (a double sum of squares, an f32 scale; angles by repeated f32
//! multiplication, `cosf`/`sinf`); a product's dot is summed in f64 and
//! rounded once. The engine shares all of it but the products' fold
//! orders and attention (the `attention.fused` contract's, which
//! accumulates in f32).

mod engine;
mod reference;
#[cfg(test)]
mod synthetic;

pub use engine::{Gemma3Engine, GemmaOpenError};
pub use reference::Gemma3Reference;

use half::f16;
use weft_gguf::block::Format;
use weft_gguf::{Gguf, TensorType};

use crate::{EngineError, ModelError};

/// Every extent and constant of a Gemma 3 forward pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemma3Config {
    /// Model width (`gemma3.embedding_length`).
    pub dim: usize,
    /// Feed-forward width (`gemma3.feed_forward_length`).
    pub hidden: usize,
    /// Decoder blocks (`gemma3.block_count`).
    pub layers: usize,
    /// Query heads (`gemma3.attention.head_count`).
    pub heads: usize,
    /// Key/value heads (`gemma3.attention.head_count_kv`).
    pub kv_heads: usize,
    /// Per-head width of queries and keys (`gemma3.attention.key_length`).
    pub head_dim: usize,
    /// Vocabulary size (the token embeddings' rows).
    pub vocab: usize,
    /// RMSNorm epsilon (`gemma3.attention.layer_norm_rms_epsilon`).
    pub rms_eps: f32,
    /// RoPE base of the global layers (`gemma3.rope.freq_base`).
    pub rope_base: f32,
    /// RoPE base of the sliding-window layers
    /// (`gemma3.rope.freq_base_swa`, llama.cpp's default 10 000).
    pub rope_base_local: f32,
    /// Positions a sliding-window layer attends to
    /// (`gemma3.attention.sliding_window`).
    pub window: usize,
    /// Every `pattern`-th layer is global (llama.cpp's default 6).
    pub pattern: usize,
    /// Longest sequence the cache holds.
    pub max_seq: usize,
}

impl Gemma3Config {
    /// The shape from `g`'s metadata (`gemma3` files only); the cache
    /// holds at most `max_seq` positions.
    pub fn from_gguf(g: &Gguf, max_seq: usize) -> Result<Gemma3Config, ModelError> {
        let arch = g.architecture()?;
        if arch != "gemma3" {
            return Err(ModelError::Config {
                reason: format!("architecture `{arch}` is not `gemma3`"),
            });
        }
        let u = |key: &str| -> Result<usize, ModelError> {
            Ok(g.metadata::<u32>(&format!("gemma3.{key}"))? as usize)
        };
        let heads = u("attention.head_count")?;
        let dim = u("embedding_length")?;
        let head_dim = match g.metadata_opt::<u32>("gemma3.attention.key_length")? {
            Some(d) => d as usize,
            None => dim.checked_div(heads).unwrap_or(0),
        };
        let vocab = g
            .tensor_info("token_embd.weight")
            .and_then(|t| t.dims().get(1).copied())
            .unwrap_or(0) as usize;
        let context = g
            .metadata_opt::<u32>("gemma3.context_length")?
            .map_or(max_seq, |c| c as usize);
        let c = Gemma3Config {
            dim,
            hidden: u("feed_forward_length")?,
            layers: u("block_count")?,
            heads,
            kv_heads: g
                .metadata_opt::<u32>("gemma3.attention.head_count_kv")?
                .map_or(heads, |v| v as usize),
            head_dim,
            vocab,
            rms_eps: g.metadata("gemma3.attention.layer_norm_rms_epsilon")?,
            rope_base: g.metadata_opt("gemma3.rope.freq_base")?.unwrap_or(10_000.0),
            rope_base_local: g
                .metadata_opt("gemma3.rope.freq_base_swa")?
                .unwrap_or(10_000.0),
            window: g
                .metadata_opt::<u32>("gemma3.attention.sliding_window")?
                .map_or(0, |w| w as usize),
            pattern: g
                .metadata_opt::<u32>("gemma3.attention.sliding_window_pattern")?
                .map_or(6, |p| p as usize),
            max_seq: max_seq.min(context).max(1),
        };
        c.check().map_err(|reason| ModelError::Config { reason })?;
        Ok(c)
    }

    /// Whether layer `l` attends through a sliding window.
    pub fn is_local(&self, l: usize) -> bool {
        self.window > 0 && (self.pattern == 0 || l % self.pattern < self.pattern - 1)
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
        if !self.head_dim.is_multiple_of(2) {
            return Err(format!(
                "head dim {} is odd (RoPE rotates pairs)",
                self.head_dim
            ));
        }
        Ok(())
    }
}

/// The activation format llama.cpp quantises to before a product with
/// weights of `w` (its `vec_dot_type`), or `None` for f32 weights.
pub(crate) fn vec_dot_type(w: Format) -> Option<Format> {
    match w {
        Format::Q2_K | Format::Q3_K | Format::Q4_K | Format::Q5_K | Format::Q6_K => {
            Some(Format::Q8_K)
        }
        Format::Q4_0 | Format::Q4_1 | Format::Q5_0 | Format::Q5_1 | Format::Q8_0 => {
            Some(Format::Q8_0)
        }
        _ => None,
    }
}

/// The tensor type's block format, when weft-quant decodes it.
pub(crate) fn weft_gguf_format(t: TensorType) -> Option<Format> {
    Format::ALL
        .iter()
        .copied()
        .find(|f| f.name().eq_ignore_ascii_case(t.name()))
}

/// `x` through `format`'s reference quantiser and back (Q8_0 or Q8_K), or
/// as it is.
pub(crate) fn quantised(x: &[f32], format: Option<Format>) -> Vec<f64> {
    let Some(format) = format else {
        return x.iter().map(|&v| f64::from(v)).collect();
    };
    let mut bytes = Vec::new();
    match format {
        Format::Q8_K => {
            for block in x.chunks_exact(256) {
                let block: &[f32; 256] = block.try_into().expect("256 values");
                bytes.extend_from_slice(&weft_gguf::block::kquant::quantize_q8_k(block));
            }
        }
        _ => {
            // Widths are whole blocks (checked when the weights open).
            let _ = weft_gguf::block::q8_0::quantize_row_into(x, &mut bytes);
        }
    }
    let mut out = vec![0.0f32; x.len()];
    let _ = format.dequantize(&bytes, &mut out);
    out.into_iter().map(f64::from).collect()
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
    pub fn shape(self, c: &Gemma3Config) -> (usize, usize) {
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
    /// Every query head of `q` (already scaled) against the `lk` cached
    /// keys and values of `keys`/`values` (binary16 bits, `kv_dim` a
    /// position), the last of them the query's own position; the heads'
    /// outputs concatenated.
    fn attend(
        &mut self,
        c: &Gemma3Config,
        q: &[f32],
        keys: &[u16],
        values: &[u16],
        lk: usize,
    ) -> Result<Vec<f32>, EngineError>;
}

/// The f32 vectors of a layer: its six norms' weights.
pub(crate) struct LayerNorms {
    attn_norm: Vec<f32>,
    q_norm: Vec<f32>,
    k_norm: Vec<f32>,
    post_attn_norm: Vec<f32>,
    ffn_norm: Vec<f32>,
    post_ffw_norm: Vec<f32>,
}

/// Every norm weight of the model.
pub(crate) struct Norms {
    layers: Vec<LayerNorms>,
    output: Vec<f32>,
}

impl Norms {
    pub(crate) fn open(g: &Gguf, c: &Gemma3Config) -> Result<Norms, ModelError> {
        let (dim, hd) = (c.dim, c.head_dim);
        let layers = (0..c.layers)
            .map(|l| {
                let n = |t: &str| format!("blk.{l}.{t}.weight");
                Ok(LayerNorms {
                    attn_norm: vector(g, &n("attn_norm"), dim)?,
                    q_norm: vector(g, &n("attn_q_norm"), hd)?,
                    k_norm: vector(g, &n("attn_k_norm"), hd)?,
                    post_attn_norm: vector(g, &n("post_attention_norm"), dim)?,
                    ffn_norm: vector(g, &n("ffn_norm"), dim)?,
                    post_ffw_norm: vector(g, &n("post_ffw_norm"), dim)?,
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
    pub(crate) fn new(c: &Gemma3Config) -> Cache {
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

/// One token through the model at the cache's next position: its logits.
/// Everything but the products is here, once, for both ways of running
/// it; the products are `p`'s.
pub(crate) fn forward(
    c: &Gemma3Config,
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
    let (hd, pos) = (c.head_dim, cache.pos);
    // ggml_scale: an f32 multiply by sqrtf(dim).
    let scale = (c.dim as f32).sqrt();
    let mut x: Vec<f32> = p.embed(token).iter().map(|&v| v * scale).collect();
    // The position's rotation angles, once per base (every head and layer
    // of a kind shares them).
    let local = Angles::new(pos, c.rope_base_local, hd);
    let global = Angles::new(pos, c.rope_base, hd);
    for (l, w) in norms.layers.iter().enumerate() {
        let h = rmsnorm(&x, &w.attn_norm, c.rms_eps);
        let mut q = p.apply(Mat::Q, l, &h)?;
        let mut k = p.apply(Mat::K, l, &h)?;
        let v = p.apply(Mat::V, l, &h)?;
        let angles = if c.is_local(l) { &local } else { &global };
        // The attention scale 1/√head_dim (a power of two for Gemma's 256,
        // so exact).
        let q_scale = 1.0 / (hd as f32).sqrt();
        for head in q.chunks_exact_mut(hd) {
            let normed = rmsnorm(head, &w.q_norm, c.rms_eps);
            head.copy_from_slice(&normed);
            angles.rotate(head);
            head.iter_mut().for_each(|v| *v *= q_scale);
        }
        for head in k.chunks_exact_mut(hd) {
            let normed = rmsnorm(head, &w.k_norm, c.rms_eps);
            head.copy_from_slice(&normed);
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
        let att = p.attend(c, &q, keys, values, pos + 1 - first)?;
        let o = p.apply(Mat::O, l, &att)?;
        let o = rmsnorm(&o, &w.post_attn_norm, c.rms_eps);
        x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);

        let h = rmsnorm(&x, &w.ffn_norm, c.rms_eps);
        let gate = p.apply(Mat::Gate, l, &h)?;
        let up = p.apply(Mat::Up, l, &h)?;
        let act: Vec<f32> = gate.iter().zip(&up).map(|(&g, &u)| geglu(g, u)).collect();
        let d = p.apply(Mat::Down, l, &act)?;
        let d = rmsnorm(&d, &w.post_ffw_norm, c.rms_eps);
        x.iter_mut().zip(&d).for_each(|(x, d)| *x += d);
    }
    let out = rmsnorm(&x, &norms.output, c.rms_eps);
    cache.pos += 1;
    p.apply(Mat::Head, 0, &out)
}

/// ggml's `rms_norm` then the weight: the sum of squares in f64, the mean
/// and `1/sqrtf(mean + eps)` in f32, `x · scale · w` in f32.
fn rmsnorm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let sum: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    x.iter().zip(w).map(|(&v, &g)| (v * scale) * g).collect()
}

/// The angles of NEOX RoPE at one position, as ggml computes them:
/// `θ_i = pos · s^i`, `s = base^(-2/n)` (`powf`), `θ` carried by repeated
/// f32 multiplication, then `cosf`/`sinf`.
struct Angles {
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Angles {
    fn new(pos: usize, base: f32, head_dim: usize) -> Angles {
        let theta_scale = base.powf(-2.0 / head_dim as f32);
        let mut theta = pos as f32;
        let (mut cos, mut sin) = (
            Vec::with_capacity(head_dim / 2),
            Vec::with_capacity(head_dim / 2),
        );
        for _ in 0..head_dim / 2 {
            cos.push(theta.cos());
            sin.push(theta.sin());
            theta *= theta_scale;
        }
        Angles { cos, sin }
    }

    /// NEOX RoPE: element `i` of the first half rotates with element
    /// `i + n/2` by `θ_i`.
    fn rotate(&self, head: &mut [f32]) {
        let half = head.len() / 2;
        for i in 0..half {
            let (s, cos) = (self.sin[i], self.cos[i]);
            let (a, b) = (head[i], head[i + half]);
            head[i] = a * cos - b * s;
            head[i + half] = a * s + b * cos;
        }
    }
}

/// NEOX RoPE of `head` at `pos` with `base` (tests).
#[cfg(test)]
fn rope_neox(head: &mut [f32], pos: usize, base: f32) {
    Angles::new(pos, base, head.len()).rotate(head);
}

/// GELU, tanh form, in f32 (ggml's `ggml_gelu_f32`).
fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044_715 * x * x)).tanh())
}

/// ggml's `ggml_table_gelu_f16`: for every binary16 `t`, the binary16 of
/// `gelu(t)`, built once.
fn gelu_table() -> &'static [f16] {
    static TABLE: std::sync::OnceLock<Vec<f16>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|t| f16::from_f32(gelu_tanh(f16::from_bits(t).to_f32())))
            .collect()
    })
}

/// `gelu(g) · u` as ggml's `geglu` computes it on f32 activations: outside
/// `(-10, 10)` exactly 0 or `g`, inside the table entry of `f16(g)`.
fn geglu(g: f32, u: f32) -> f32 {
    if g <= -10.0 {
        0.0
    } else if g >= 10.0 {
        g * u
    } else {
        gelu_table()[usize::from(f16::from_f32(g).to_bits())].to_f32() * u
    }
}

/// Every query head against the first `lk` keys and values (its KV
/// head's), as ggml's CPU flash attention computes it: the query rounded
/// to binary16, scores summed in f32, an online softmax in f32 whose value
/// accumulator is binary16 (rescaled and added into, rounding each time),
/// divided by the sum at the end. The heads' outputs concatenated.
pub(crate) fn attend_flash_f16(
    c: &Gemma3Config,
    q: &[f32],
    keys: &[u16],
    values: &[u16],
    lk: usize,
) -> Vec<f32> {
    let positions = 0..lk;
    let (hd, kvd) = (c.head_dim, c.kv_heads * c.head_dim);
    let group = c.heads / c.kv_heads;
    let mut out = vec![0.0f32; c.heads * hd];
    for h in 0..c.heads {
        let kvh = h / group;
        let qh: Vec<f32> = q[h * hd..(h + 1) * hd]
            .iter()
            .map(|&v| f16::from_f32(v).to_f32())
            .collect();
        let (mut m, mut sum) = (f32::NEG_INFINITY, 0.0f32);
        let mut acc = vec![f16::ZERO; hd];
        for j in positions.clone() {
            let kj = &keys[j * kvd + kvh * hd..j * kvd + (kvh + 1) * hd];
            let s = qh
                .iter()
                .zip(kj)
                .map(|(&a, &b)| f64::from(a) * f16::from_bits(b).to_f64())
                .sum::<f64>() as f32;
            let (mut ms, mut vs) = (1.0f32, 1.0f32);
            if s > m {
                let old = m;
                m = s;
                ms = (old - m).exp();
                acc.iter_mut()
                    .for_each(|a| *a = f16::from_f32(a.to_f32() * ms));
            } else {
                vs = (s - m).exp();
            }
            let vj = &values[j * kvd + kvh * hd..j * kvd + (kvh + 1) * hd];
            for (a, &v) in acc.iter_mut().zip(vj) {
                *a = f16::from_f32(f16::from_bits(v).to_f32().mul_add(vs, a.to_f32()));
            }
            sum = sum * ms + vs;
        }
        let inv = 1.0 / sum;
        for (o, a) in out[h * hd..(h + 1) * hd].iter_mut().zip(&acc) {
            *o = a.to_f32() * inv;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sixth_layer_is_global() {
        let c = Gemma3Config {
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
            window: 512,
            pattern: 6,
            max_seq: 64,
        };
        let global: Vec<usize> = (0..18).filter(|&l| !c.is_local(l)).collect();
        assert_eq!(global, [5, 11, 17]);
    }

    #[test]
    fn neox_rope_rotates_the_halves_together_and_keeps_the_norm() {
        let mut h: Vec<f32> = (0..8).map(|i| i as f32 + 1.0).collect();
        let before: f32 = h.iter().map(|v| v * v).sum();
        rope_neox(&mut h, 0, 10_000.0);
        assert_eq!(
            h,
            (0..8).map(|i| i as f32 + 1.0).collect::<Vec<_>>(),
            "position 0 is the identity"
        );
        rope_neox(&mut h, 3, 10_000.0);
        let after: f32 = h.iter().map(|v| v * v).sum();
        assert!((before - after).abs() < 1e-4);
        // Element 0 pairs with element 4: a rotation by 3 radians.
        let (s, c) = 3f32.sin_cos();
        assert!((h[0] - (1.0 * c - 5.0 * s)).abs() < 1e-6);
    }

    #[test]
    fn gelu_tanh_matches_known_values_and_the_table_saturates() {
        assert_eq!(gelu_tanh(0.0), 0.0);
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-6);
        assert!((gelu_tanh(-3.0) + 0.003_637_4).abs() < 1e-6);
        assert_eq!(geglu(-12.0, 3.0), 0.0);
        assert_eq!(geglu(12.0, 0.5), 6.0);
        // Inside the table: the gate is rounded to binary16 first.
        assert_eq!(geglu(1.000_1, 1.0), geglu(1.0, 1.0));
    }
}
