//! A plain-Rust scalar reference of the forward pass, the yardstick the
//! planned model is compared against.
//!
//! It follows the same numeric model as the plan — activations quantised
//! to Q8_0 by the reference quantiser before every matrix product, exactly
//! as llama.cpp does for Q8_0 weights — but evaluates every product, sum,
//! norm, rotation and softmax in f64, in plain loops. So the plan differs
//! from it only by f32 rounding (and by rounding that crosses a Q8_0
//! quantisation step, which the tolerance of the comparison test covers).

use weft_q8::block::{f16_to_f32, quantize_row};
use weft_q8::BLOCK_BYTES;

use crate::weights::{Q8Matrix, Weights};

/// `W · q8(x)` in f64, one output per row.
fn matvec(w: &Q8Matrix, x: &[f32]) -> Vec<f32> {
    // Lengths are the model's (checked by `Weights::check`), multiples of 32.
    let xq = quantize_row(x).unwrap_or_default();
    (0..w.rows())
        .map(|r| {
            let mut sum = 0.0f64;
            for (wb, xb) in w
                .row(r)
                .chunks_exact(BLOCK_BYTES)
                .zip(xq.chunks_exact(BLOCK_BYTES))
            {
                let dw = f64::from(f16_to_f32(u16::from_le_bytes([wb[0], wb[1]])));
                let dx = f64::from(f16_to_f32(u16::from_le_bytes([xb[0], xb[1]])));
                let q: i64 = wb[2..]
                    .iter()
                    .zip(&xb[2..])
                    .map(|(a, b)| i64::from(*a as i8) * i64::from(*b as i8))
                    .sum();
                sum += dw * dx * q as f64;
            }
            sum as f32
        })
        .collect()
}

fn rmsnorm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let ms = x.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + f64::from(eps)).sqrt();
    x.iter()
        .zip(w)
        .map(|(v, g)| (f64::from(*v) * inv * f64::from(*g)) as f32)
        .collect()
}

/// Rotate adjacent pairs of each head's first `dims` values by
/// `pos · base^(-2i/dims)` (llama.cpp's "normal" RoPE).
fn rope(x: &mut [f32], head_dim: usize, dims: usize, pos: usize, base: f32) {
    for head in x.chunks_exact_mut(head_dim) {
        for i in 0..dims / 2 {
            let theta = pos as f64 * f64::from(base).powf(-2.0 * i as f64 / dims as f64);
            let (s, c) = theta.sin_cos();
            let (a, b) = (f64::from(head[2 * i]), f64::from(head[2 * i + 1]));
            head[2 * i] = (a * c - b * s) as f32;
            head[2 * i + 1] = (a * s + b * c) as f32;
        }
    }
}

/// The reference model with its KV cache.
#[derive(Debug)]
pub struct Reference<'w> {
    w: &'w Weights,
    /// Per layer: positions × kv_dim keys, then values.
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    pos: usize,
}

impl<'w> Reference<'w> {
    /// A fresh reference over `w` (an empty cache).
    pub fn new(w: &'w Weights) -> Reference<'w> {
        Reference {
            w,
            keys: vec![Vec::new(); w.config.layers],
            values: vec![Vec::new(); w.config.layers],
            pos: 0,
        }
    }

    /// Feed `token` at the next position and return the logits.
    pub fn step(&mut self, token: u32) -> Vec<f32> {
        let c = &self.w.config;
        let (hd, kvd) = (c.head_dim(), c.kv_dim());
        let group = c.heads / c.kv_heads;
        let row = self.w.embed.row(token as usize);
        let mut x: Vec<f32> = row
            .chunks_exact(BLOCK_BYTES)
            .flat_map(|b| {
                let d = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
                b[2..].iter().map(move |q| d * f32::from(*q as i8))
            })
            .collect();
        let pos = self.pos;
        for (li, l) in self.w.layers.iter().enumerate() {
            let h = rmsnorm(&x, &l.attn_norm, c.rms_eps);
            let mut q = matvec(&l.wq, &h);
            let mut k = matvec(&l.wk, &h);
            let v = matvec(&l.wv, &h);
            rope(&mut q, hd, c.rope_dims, pos, c.rope_base);
            rope(&mut k, hd, c.rope_dims, pos, c.rope_base);
            self.keys[li].extend_from_slice(&k);
            self.values[li].extend_from_slice(&v);
            let (keys, values) = (&self.keys[li], &self.values[li]);
            let scale = 1.0 / (hd as f64).sqrt();
            let mut att = vec![0.0f32; c.dim];
            for h in 0..c.heads {
                let kv = h / group;
                let qh = &q[h * hd..(h + 1) * hd];
                let scores: Vec<f64> = (0..=pos)
                    .map(|t| {
                        let kt = &keys[t * kvd + kv * hd..t * kvd + (kv + 1) * hd];
                        qh.iter()
                            .zip(kt)
                            .map(|(a, b)| f64::from(*a) * f64::from(*b))
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for d in 0..hd {
                    let o: f64 = (0..=pos)
                        .map(|t| e[t] * f64::from(values[t * kvd + kv * hd + d]))
                        .sum();
                    att[h * hd + d] = (o / sum) as f32;
                }
            }
            let o = matvec(&l.wo, &att);
            for (a, b) in x.iter_mut().zip(&o) {
                *a = (f64::from(*a) + f64::from(*b)) as f32;
            }
            let h = rmsnorm(&x, &l.ffn_norm, c.rms_eps);
            let g = matvec(&l.w_gate, &h);
            let u = matvec(&l.w_up, &h);
            let m: Vec<f32> = g
                .iter()
                .zip(&u)
                .map(|(g, u)| {
                    let g = f64::from(*g);
                    (g / (1.0 + (-g).exp()) * f64::from(*u)) as f32
                })
                .collect();
            let d = matvec(&l.w_down, &m);
            for (a, b) in x.iter_mut().zip(&d) {
                *a = (f64::from(*a) + f64::from(*b)) as f32;
            }
        }
        let h = rmsnorm(&x, &self.w.output_norm, c.rms_eps);
        self.pos += 1;
        matvec(&self.w.output, &h)
    }
}
