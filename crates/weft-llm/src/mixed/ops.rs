//! The small operations of the forward pass, rounded as llama.cpp's CPU
//! backend (ggml) rounds them, and the pieces of its numeric model both
//! ways of running the pass share: which format a product's activation is
//! quantised to, and that quantisation.

use half::f16;
use weft_gguf::block::Format;
use weft_gguf::TensorType;

use super::Config;

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

/// ggml's `rms_norm` then the weight: each square in f32, summed in f64;
/// the mean and `1/sqrtf(mean + eps)` in f32; `x · scale · w` in f32.
pub(crate) fn rmsnorm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    x.iter().zip(w).map(|(&v, &g)| (v * scale) * g).collect()
}

/// Which elements of a head RoPE rotates together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// GPT-NeoX's: element `i` with element `i + n/2` (Gemma).
    Neox,
    /// ggml's "normal" one: adjacent pairs `(2i, 2i + 1)` (Llama).
    Adjacent,
}

/// The angles of RoPE at one position, as ggml computes them: `θ_i = pos ·
/// s^i`, `s = base^(-2/n)` (`powf`) for the `n` rotated dimensions, `θ`
/// carried by repeated f32 multiplication, then `cosf`/`sinf`.
pub(crate) struct Angles {
    cos: Vec<f32>,
    sin: Vec<f32>,
    style: RopeStyle,
}

impl Angles {
    pub(crate) fn new(pos: usize, base: f32, dims: usize, style: RopeStyle) -> Angles {
        let theta_scale = base.powf(-2.0 / dims as f32);
        let mut theta = pos as f32;
        let (mut cos, mut sin) = (Vec::with_capacity(dims / 2), Vec::with_capacity(dims / 2));
        for _ in 0..dims / 2 {
            cos.push(theta.cos());
            sin.push(theta.sin());
            theta *= theta_scale;
        }
        Angles { cos, sin, style }
    }

    /// Rotate the first `n` elements of `head` (`n` the dimensions the
    /// angles were made for; the rest stay as they are): pair `i` by `θ_i`,
    /// `(a, b) → (a·cos − b·sin, a·sin + b·cos)` in f32.
    pub(crate) fn rotate(&self, head: &mut [f32]) {
        let half = self.cos.len();
        for i in 0..half {
            let (s, c) = (self.sin[i], self.cos[i]);
            let (ia, ib) = match self.style {
                RopeStyle::Neox => (i, i + half),
                RopeStyle::Adjacent => (2 * i, 2 * i + 1),
            };
            let (a, b) = (head[ia], head[ib]);
            head[ia] = a * c - b * s;
            head[ib] = a * s + b * c;
        }
    }
}

/// The gated feed-forward activation: `act(gate) · up`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// GELU in its tanh form, through ggml's binary16 table (Gemma).
    GeluTanh,
    /// SiLU, `g / (1 + e^-g)` (Llama).
    Silu,
}

impl Activation {
    /// `act(g) · u` as ggml computes it on f32 activations.
    pub(crate) fn gated(self, g: f32, u: f32) -> f32 {
        match self {
            Activation::GeluTanh => geglu(g, u),
            Activation::Silu => swiglu(g, u),
        }
    }
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

/// `silu(g) · u` as ggml's `swiglu` computes it on f32 activations:
/// `g / (1 + expf(-g))`, then the product, each in f32 (its scalar
/// `ggml_silu_f32`; the vectorised loops' `expf` approximations agree with
/// it to a few units in the last place).
fn swiglu(g: f32, u: f32) -> f32 {
    g / (1.0 + (-g).exp()) * u
}

/// Every query head against the first `lk` keys and values (its KV
/// head's), as ggml's CPU flash attention computes it: the query rounded
/// to binary16, scores summed in f32 and multiplied by `scale`, an online
/// softmax in f32 whose value accumulator is binary16 (rescaled and added
/// into, rounding each time), divided by the sum at the end. The heads'
/// outputs concatenated.
pub(crate) fn attend_flash_f16(
    c: &Config,
    q: &[f32],
    keys: &[u16],
    values: &[u16],
    lk: usize,
    scale: f32,
) -> Vec<f32> {
    let (heads, kv_heads, hd) = (c.heads, c.kv_heads, c.head_dim);
    let kvd = kv_heads * hd;
    let group = heads / kv_heads;
    let mut out = vec![0.0f32; heads * hd];
    for h in 0..heads {
        let kvh = h / group;
        let qh: Vec<f32> = q[h * hd..(h + 1) * hd]
            .iter()
            .map(|&v| f16::from_f32(v).to_f32())
            .collect();
        let (mut m, mut sum) = (f32::NEG_INFINITY, 0.0f32);
        let mut acc = vec![f16::ZERO; hd];
        for j in 0..lk {
            let kj = &keys[j * kvd + kvh * hd..j * kvd + (kvh + 1) * hd];
            let s = qh
                .iter()
                .zip(kj)
                .map(|(&a, &b)| f64::from(a) * f16::from_bits(b).to_f64())
                .sum::<f64>() as f32;
            let s = s * scale;
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

    fn rope(head: &mut [f32], pos: usize, base: f32, style: RopeStyle) {
        Angles::new(pos, base, head.len(), style).rotate(head);
    }

    #[test]
    fn neox_rope_rotates_the_halves_together_and_keeps_the_norm() {
        let mut h: Vec<f32> = (0..8).map(|i| i as f32 + 1.0).collect();
        let before: f32 = h.iter().map(|v| v * v).sum();
        rope(&mut h, 0, 10_000.0, RopeStyle::Neox);
        assert_eq!(
            h,
            (0..8).map(|i| i as f32 + 1.0).collect::<Vec<_>>(),
            "position 0 is the identity"
        );
        rope(&mut h, 3, 10_000.0, RopeStyle::Neox);
        let after: f32 = h.iter().map(|v| v * v).sum();
        assert!((before - after).abs() < 1e-4);
        // Element 0 pairs with element 4: a rotation by 3 radians.
        let (s, c) = 3f32.sin_cos();
        assert!((h[0] - (1.0 * c - 5.0 * s)).abs() < 1e-6);
    }

    #[test]
    fn adjacent_rope_rotates_neighbours_together_and_leaves_the_unrotated_tail() {
        let mut h: Vec<f32> = (0..8).map(|i| i as f32 + 1.0).collect();
        // Four of the eight dimensions rotated.
        Angles::new(3, 10_000.0, 4, RopeStyle::Adjacent).rotate(&mut h);
        // Element 0 pairs with element 1: a rotation by 3 radians.
        let (s, c) = 3f32.sin_cos();
        assert!((h[0] - (1.0 * c - 2.0 * s)).abs() < 1e-6);
        assert!((h[1] - (1.0 * s + 2.0 * c)).abs() < 1e-6);
        // Pair 1 turns by 3 · 10000^(-1/2) = 0.03 radians.
        let (s, c) = 0.03f32.sin_cos();
        assert!((h[2] - (3.0 * c - 4.0 * s)).abs() < 1e-5);
        assert_eq!(
            h[4..],
            [5.0, 6.0, 7.0, 8.0],
            "beyond the rotated dimensions"
        );
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

    #[test]
    fn silu_matches_known_values() {
        assert_eq!(swiglu(0.0, 5.0), 0.0);
        assert!((swiglu(1.0, 1.0) - 0.731_058_6).abs() < 1e-6);
        assert!((swiglu(-2.0, 2.0) + 0.476_811_4).abs() < 1e-6);
        // Large negative gates underflow to -0, large positive pass through.
        assert_eq!(swiglu(-200.0, 1.0), 0.0);
        assert_eq!(swiglu(100.0, 0.5), 50.0);
    }
}
