//! [`Reference`]: the forward pass with plain f64 loops for its products,
//! over every matrix dequantised once to f32.

use weft_gguf::block::Format;
use weft_gguf::Gguf;

use super::ops::{attend_flash_f16, quantised, vec_dot_type, weft_gguf_format};
use super::{prefill, step, Cache, Config, Kernels, Mat, Norms};
use crate::{EngineError, ModelError};

/// A matrix dequantised to f32 (`rows × cols`, row-major), remembering
/// its stored format: the activation it multiplies is quantised as
/// llama.cpp pairs that format.
struct Matrix {
    format: Format,
    cols: usize,
    values: Vec<f32>,
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

/// Every matrix of the model, dequantised.
struct Dense {
    token_embd: Matrix,
    dim: usize,
    /// Per layer, in [`Mat::LAYER`] order.
    layers: Vec<Vec<Matrix>>,
}

impl Kernels for Dense {
    fn attend(
        &mut self,
        c: &Config,
        q: &[f32],
        keys: &[u16],
        values: &[u16],
        lk: usize,
        scale: f32,
    ) -> Result<Vec<f32>, EngineError> {
        Ok(attend_flash_f16(c, q, keys, values, lk, scale))
    }

    fn embed(&mut self, token: u32) -> Vec<f32> {
        let t = token as usize;
        self.token_embd.values[t * self.dim..(t + 1) * self.dim].to_vec()
    }

    fn apply(&mut self, m: Mat, layer: usize, x: &[f32]) -> Result<Vec<f32>, EngineError> {
        Ok(match m {
            Mat::Head => self.token_embd.apply(x),
            _ => self.layers[layer][m.index()].apply(x),
        })
    }
}

/// The forward pass in plain loops (any [`super::Arch`]): the weights
/// dequantised once to f32, a binary16 KV cache, one token at a time.
pub struct Reference {
    config: Config,
    norms: Norms,
    dense: Dense,
    cache: Cache,
}

impl Reference {
    /// Read `g`'s weights (every matrix dequantised to f32, about 4 bytes
    /// per weight) for a cache of `max_seq` positions.
    pub fn open(g: &Gguf, max_seq: usize) -> Result<Reference, ModelError> {
        let c = Config::from_gguf(g, max_seq)?;
        let open = |m: Mat, l: usize| {
            let (rows, cols) = m.shape(&c);
            Matrix::open(g, &m.tensor(l), rows, cols)
        };
        let layers = (0..c.layers)
            .map(|l| Mat::LAYER.iter().map(|&m| open(m, l)).collect())
            .collect::<Result<_, ModelError>>()?;
        Ok(Reference {
            norms: Norms::open(g, &c)?,
            dense: Dense {
                token_embd: open(Mat::Head, 0)?,
                dim: c.dim,
                layers,
            },
            cache: Cache::new(&c),
            config: c,
        })
    }

    /// The model's shape.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Positions fed so far.
    pub fn position(&self) -> usize {
        self.cache.position()
    }

    /// Forget every position (an empty cache), keeping the weights.
    pub fn reset(&mut self) {
        self.cache.reset();
    }

    /// Feed `token` at the next position; its logits.
    pub fn step(&mut self, token: u32) -> Result<Vec<f32>, EngineError> {
        step(
            &self.config,
            &self.norms,
            &mut self.dense,
            &mut self.cache,
            token,
        )
    }

    /// Feed every token of `prompt`, a token at a time; the last one's
    /// logits, the only ones computed (the head is skipped before). The
    /// same bits as [`Self::step`] over `prompt` would end on. Checked
    /// before any token is fed: an empty prompt, one that does not fit
    /// the cache, or a token outside the vocabulary is an error and feeds
    /// nothing.
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<Vec<f32>, EngineError> {
        prefill(
            &self.config,
            &self.norms,
            &mut self.dense,
            &mut self.cache,
            prompt,
        )
    }
}
