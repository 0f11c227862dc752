//! Gemma 3 (`general.architecture = "gemma3"`): its shape from a GGUF
//! file, and a plain-Rust reference of its forward pass — the yardstick
//! the planned Gemma 3 engine will be held to, as [`mod@crate::reference`]
//! is for the Llama one.
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
//! The numeric model is llama.cpp's CPU backend's wherever it rounds
//! coarsely enough to move a greedy choice: every matrix product
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
//! rounded once.

use half::f16;
use weft_gguf::block::Format;
use weft_gguf::{Gguf, TensorType};

use crate::ModelError;

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

/// A matrix dequantised to f32 (`rows × cols`, row-major), remembering
/// its stored format: the activation it multiplies is quantised as
/// llama.cpp pairs that format.
struct Matrix {
    format: Format,
    cols: usize,
    values: Vec<f32>,
}

/// The activation format llama.cpp quantises to before a product with
/// weights of `w` (its `vec_dot_type`), or `None` for f32 weights.
fn vec_dot_type(w: Format) -> Option<Format> {
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

impl Matrix {
    fn open(g: &Gguf, name: &str, rows: usize, cols: usize) -> Result<Matrix, ModelError> {
        let t = g.tensor(name)?;
        if t.dims() != [cols as u64, rows as u64] {
            return Err(ModelError::Shape {
                tensor: name.into(),
                reason: format!("dims {:?}, expected [{cols}, {rows}]", t.dims()),
            });
        }
        let format = weft_gguf_format(t.tensor_type()).ok_or_else(|| ModelError::Shape {
            tensor: name.into(),
            reason: format!("type {} is not one Weft reads", t.tensor_type()),
        })?;
        Ok(Matrix {
            format,
            cols,
            values: t.to_f32()?,
        })
    }

    /// `W · x`: `x` quantised as llama.cpp would, each dot summed in f64
    /// and rounded to f32.
    fn apply(&self, x: &[f32]) -> Vec<f32> {
        let xq = quantised(x, vec_dot_type(self.format));
        self.values
            .chunks_exact(self.cols)
            .map(|row| {
                row.iter()
                    .zip(&xq)
                    .map(|(&w, &v)| f64::from(w) * v)
                    .sum::<f64>() as f32
            })
            .collect()
    }
}

/// The tensor type's block format, when weft-quant decodes it.
fn weft_gguf_format(t: TensorType) -> Option<Format> {
    Format::ALL
        .iter()
        .copied()
        .find(|f| f.name().eq_ignore_ascii_case(t.name()))
}

/// `x` through `format`'s reference quantiser and back (Q8_0 or Q8_K), or
/// as it is.
fn quantised(x: &[f32], format: Option<Format>) -> Vec<f64> {
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

struct Layer {
    attn_norm: Vec<f32>,
    q: Matrix,
    k: Matrix,
    v: Matrix,
    q_norm: Vec<f32>,
    k_norm: Vec<f32>,
    o: Matrix,
    post_attn_norm: Vec<f32>,
    ffn_norm: Vec<f32>,
    gate: Matrix,
    up: Matrix,
    down: Matrix,
    post_ffw_norm: Vec<f32>,
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

/// Gemma 3's forward pass in plain loops: the weights dequantised once to
/// f32, a binary16 KV cache, one token at a time.
pub struct Gemma3Reference {
    config: Gemma3Config,
    token_embd: Matrix,
    output_norm: Vec<f32>,
    layers: Vec<Layer>,
    /// Per layer: keys and values of every position so far, `kv_dim` each.
    keys: Vec<Vec<f16>>,
    values: Vec<Vec<f16>>,
    pos: usize,
}

impl Gemma3Reference {
    /// Read `g`'s weights (every matrix dequantised to f32, about 4 bytes
    /// per weight) for a cache of `max_seq` positions.
    pub fn open(g: &Gguf, max_seq: usize) -> Result<Gemma3Reference, ModelError> {
        let c = Gemma3Config::from_gguf(g, max_seq)?;
        let (dim, hd) = (c.dim, c.head_dim);
        let (qd, kvd) = (c.heads * hd, c.kv_heads * hd);
        let mut layers = Vec::with_capacity(c.layers);
        for l in 0..c.layers {
            let n = |t: &str| format!("blk.{l}.{t}.weight");
            layers.push(Layer {
                attn_norm: vector(g, &n("attn_norm"), dim)?,
                q: Matrix::open(g, &n("attn_q"), qd, dim)?,
                k: Matrix::open(g, &n("attn_k"), kvd, dim)?,
                v: Matrix::open(g, &n("attn_v"), kvd, dim)?,
                q_norm: vector(g, &n("attn_q_norm"), hd)?,
                k_norm: vector(g, &n("attn_k_norm"), hd)?,
                o: Matrix::open(g, &n("attn_output"), dim, qd)?,
                post_attn_norm: vector(g, &n("post_attention_norm"), dim)?,
                ffn_norm: vector(g, &n("ffn_norm"), dim)?,
                gate: Matrix::open(g, &n("ffn_gate"), c.hidden, dim)?,
                up: Matrix::open(g, &n("ffn_up"), c.hidden, dim)?,
                down: Matrix::open(g, &n("ffn_down"), dim, c.hidden)?,
                post_ffw_norm: vector(g, &n("post_ffw_norm"), dim)?,
            });
        }
        let token_embd = Matrix::open(g, "token_embd.weight", c.vocab, dim)?;
        Ok(Gemma3Reference {
            output_norm: vector(g, "output_norm.weight", dim)?,
            token_embd,
            layers,
            keys: vec![Vec::new(); c.layers],
            values: vec![Vec::new(); c.layers],
            pos: 0,
            config: c,
        })
    }

    /// The model's shape.
    pub fn config(&self) -> &Gemma3Config {
        &self.config
    }

    /// Positions fed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Forget every position (an empty cache), keeping the weights.
    pub fn reset(&mut self) {
        self.keys.iter_mut().for_each(Vec::clear);
        self.values.iter_mut().for_each(Vec::clear);
        self.pos = 0;
    }

    /// Feed `token` at the next position; its logits.
    pub fn step(&mut self, token: u32) -> Result<Vec<f32>, ModelError> {
        let c = self.config.clone();
        if token as usize >= c.vocab {
            return Err(ModelError::Config {
                reason: format!("token {token} is outside the vocabulary of {}", c.vocab),
            });
        }
        if self.pos >= c.max_seq {
            return Err(ModelError::Config {
                reason: format!("the cache holds {} positions", c.max_seq),
            });
        }
        let (dim, hd, p) = (c.dim, c.head_dim, self.pos);
        let row = &self.token_embd.values[token as usize * dim..(token as usize + 1) * dim];
        // ggml_scale: an f32 multiply by sqrtf(dim).
        let scale = (dim as f32).sqrt();
        let mut x: Vec<f32> = row.iter().map(|&v| v * scale).collect();
        for (l, w) in self.layers.iter().enumerate() {
            let h = rmsnorm(&x, &w.attn_norm, c.rms_eps);
            let mut q = w.q.apply(&h);
            let mut k = w.k.apply(&h);
            let v = w.v.apply(&h);
            let base = if c.is_local(l) {
                c.rope_base_local
            } else {
                c.rope_base
            };
            // The attention scale 1/√head_dim (a power of two for Gemma's
            // 256, so exact).
            let q_scale = 1.0 / (hd as f32).sqrt();
            for head in q.chunks_exact_mut(hd) {
                let normed = rmsnorm(head, &w.q_norm, c.rms_eps);
                head.copy_from_slice(&normed);
                rope_neox(head, p, base);
                head.iter_mut().for_each(|v| *v *= q_scale);
            }
            for head in k.chunks_exact_mut(hd) {
                let normed = rmsnorm(head, &w.k_norm, c.rms_eps);
                head.copy_from_slice(&normed);
                rope_neox(head, p, base);
            }
            self.keys[l].extend(k.iter().map(|&v| f16::from_f32(v)));
            self.values[l].extend(v.iter().map(|&v| f16::from_f32(v)));
            let first = if c.is_local(l) {
                (p + 1).saturating_sub(c.window)
            } else {
                0
            };
            let att = attend(&c, &q, &self.keys[l], &self.values[l], first..p + 1);
            let o = w.o.apply(&att);
            let o = rmsnorm(&o, &w.post_attn_norm, c.rms_eps);
            x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);

            let h = rmsnorm(&x, &w.ffn_norm, c.rms_eps);
            let gate = w.gate.apply(&h);
            let up = w.up.apply(&h);
            let act: Vec<f32> = gate.iter().zip(&up).map(|(&g, &u)| geglu(g, u)).collect();
            let d = w.down.apply(&act);
            let d = rmsnorm(&d, &w.post_ffw_norm, c.rms_eps);
            x.iter_mut().zip(&d).for_each(|(x, d)| *x += d);
        }
        let out = rmsnorm(&x, &self.output_norm, c.rms_eps);
        self.pos += 1;
        Ok(self.token_embd.apply(&out))
    }
}

/// ggml's `rms_norm` then the weight: the sum of squares in f64, the mean
/// and `1/sqrtf(mean + eps)` in f32, `x · scale · w` in f32.
fn rmsnorm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let sum: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    x.iter().zip(w).map(|(&v, &g)| (v * scale) * g).collect()
}

/// NEOX RoPE as ggml computes it: element `i` of the first half rotates
/// with element `i + n/2` by `θ_i = pos · s^i`, `s = base^(-2/n)` (`powf`),
/// `θ` carried by repeated f32 multiplication, `cosf`/`sinf`.
fn rope_neox(head: &mut [f32], pos: usize, base: f32) {
    let half = head.len() / 2;
    let theta_scale = base.powf(-2.0 / head.len() as f32);
    let mut theta = pos as f32;
    for i in 0..half {
        let (s, cos) = (theta.sin(), theta.cos());
        let (a, b) = (head[i], head[i + half]);
        head[i] = a * cos - b * s;
        head[i + half] = a * s + b * cos;
        theta *= theta_scale;
    }
}

/// GELU, tanh form, in f32 (ggml's `ggml_gelu_f32`).
fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044_715 * x * x)).tanh())
}

/// `gelu(g) · u` as ggml's `geglu` computes it on f32 activations: outside
/// `(-10, 10)` exactly 0 or `g`, inside the binary16 table entry of
/// `f16(g)`.
fn geglu(g: f32, u: f32) -> f32 {
    if g <= -10.0 {
        0.0
    } else if g >= 10.0 {
        g * u
    } else {
        let t = f16::from_f32(g).to_f32();
        f16::from_f32(gelu_tanh(t)).to_f32() * u
    }
}

/// Every query head against the keys and values of `positions` (its KV
/// head's), as ggml's CPU flash attention computes it: the query rounded
/// to binary16, scores summed in f32, an online softmax in f32 whose value
/// accumulator is binary16 (rescaled and added into, rounding each time),
/// divided by the sum at the end. The heads' outputs concatenated.
fn attend(
    c: &Gemma3Config,
    q: &[f32],
    keys: &[f16],
    values: &[f16],
    positions: std::ops::Range<usize>,
) -> Vec<f32> {
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
                .map(|(&a, &b)| f64::from(a) * b.to_f64())
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
            for (a, v) in acc.iter_mut().zip(vj) {
                *a = f16::from_f32(v.to_f32().mul_add(vs, a.to_f32()));
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
