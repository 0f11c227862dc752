//! The model's weights as the forward pass reads them: Q8_0 matrices
//! (shared, read-only bytes) and f32 norm vectors.

use weft_arena::Bytes;
use weft_q8::{BLOCK_BYTES, BLOCK_LEN};

use crate::{Config, ModelError};

/// How a block's tensor names begin when they stand for every block:
/// `blk.*.attn_k.weight` is `blk.N.attn_k.weight` of each block `N`.
pub const BLOCK: &str = "blk.*.";

/// A `rows × cols` Q8_0 matrix: GGUF's row-major blocks, a view into the
/// weights' arena (huge pages: decode streams every byte of it).
#[derive(Clone)]
pub struct Q8Matrix {
    rows: usize,
    cols: usize,
    bytes: Bytes,
}

impl std::fmt::Debug for Q8Matrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Q8Matrix({}×{})", self.rows, self.cols)
    }
}

impl Q8Matrix {
    /// Wrap `bytes` as a `rows × cols` matrix, checking the length.
    pub fn new(name: &str, rows: usize, cols: usize, bytes: Bytes) -> Result<Q8Matrix, ModelError> {
        if rows == 0 || cols == 0 || !cols.is_multiple_of(BLOCK_LEN) {
            return Err(ModelError::Shape {
                tensor: name.to_owned(),
                reason: format!(
                    "{rows}×{cols} is not a Q8_0 matrix (cols a positive multiple of 32)"
                ),
            });
        }
        let want = rows
            .checked_mul(cols / BLOCK_LEN)
            .and_then(|b| b.checked_mul(BLOCK_BYTES));
        if want != Some(bytes.len()) {
            return Err(ModelError::Shape {
                tensor: name.to_owned(),
                reason: format!("{} bytes for {rows}×{cols} Q8_0", bytes.len()),
            });
        }
        Ok(Q8Matrix { rows, cols, bytes })
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Row `r`'s blocks.
    pub fn row(&self, r: usize) -> &[u8] {
        let n = self.cols / BLOCK_LEN * BLOCK_BYTES;
        &self.bytes[r * n..(r + 1) * n]
    }
}

/// One decoder block's weights.
#[derive(Clone, Debug)]
pub struct Layer {
    /// RMSNorm weight before attention (`dim`).
    pub attn_norm: Vec<f32>,
    /// Query projection, `dim × dim`.
    pub wq: Q8Matrix,
    /// Key projection, `kv_dim × dim`.
    pub wk: Q8Matrix,
    /// Value projection, `kv_dim × dim`.
    pub wv: Q8Matrix,
    /// Output projection, `dim × dim`.
    pub wo: Q8Matrix,
    /// RMSNorm weight before the feed-forward (`dim`).
    pub ffn_norm: Vec<f32>,
    /// Gate projection, `hidden × dim`.
    pub w_gate: Q8Matrix,
    /// Up projection, `hidden × dim`.
    pub w_up: Q8Matrix,
    /// Down projection, `dim × hidden`.
    pub w_down: Q8Matrix,
}

/// Every weight of the model.
#[derive(Clone, Debug)]
pub struct Weights {
    /// The shape.
    pub config: Config,
    /// Token embeddings, `vocab × dim`.
    pub embed: Q8Matrix,
    /// The decoder blocks.
    pub layers: Vec<Layer>,
    /// Final RMSNorm weight (`dim`).
    pub output_norm: Vec<f32>,
    /// Output projection, `vocab × dim` (the embeddings' bytes when tied).
    pub output: Q8Matrix,
}

impl Weights {
    /// Check every tensor against the config, naming the first that does not fit.
    pub fn check(&self) -> Result<(), ModelError> {
        let c = &self.config;
        c.check().map_err(|reason| ModelError::Config { reason })?;
        let shape = |name: &str, m: &Q8Matrix, rows: usize, cols: usize| {
            if m.rows() == rows && m.cols() == cols {
                Ok(())
            } else {
                Err(ModelError::Shape {
                    tensor: name.to_owned(),
                    reason: format!("{}×{}, expected {rows}×{cols}", m.rows(), m.cols()),
                })
            }
        };
        let vector = |name: &str, v: &[f32], n: usize| {
            if v.len() == n {
                Ok(())
            } else {
                Err(ModelError::Shape {
                    tensor: name.to_owned(),
                    reason: format!("{} values, expected {n}", v.len()),
                })
            }
        };
        shape("token_embd", &self.embed, c.vocab, c.dim)?;
        shape("output", &self.output, c.vocab, c.dim)?;
        vector("output_norm", &self.output_norm, c.dim)?;
        if self.layers.len() != c.layers {
            return Err(ModelError::Config {
                reason: format!(
                    "{} layers of weights, config says {}",
                    self.layers.len(),
                    c.layers
                ),
            });
        }
        for (i, l) in self.layers.iter().enumerate() {
            let n = |t: &str| format!("blk.{i}.{t}");
            vector(&n("attn_norm"), &l.attn_norm, c.dim)?;
            vector(&n("ffn_norm"), &l.ffn_norm, c.dim)?;
            shape(&n("attn_q"), &l.wq, c.dim, c.dim)?;
            shape(&n("attn_k"), &l.wk, c.kv_dim(), c.dim)?;
            shape(&n("attn_v"), &l.wv, c.kv_dim(), c.dim)?;
            shape(&n("attn_output"), &l.wo, c.dim, c.dim)?;
            shape(&n("ffn_gate"), &l.w_gate, c.hidden, c.dim)?;
            shape(&n("ffn_up"), &l.w_up, c.hidden, c.dim)?;
            shape(&n("ffn_down"), &l.w_down, c.dim, c.hidden)?;
        }
        Ok(())
    }

    /// The matrix GGUF names `tensor`: a model-wide one
    /// (`token_embd.weight`, `output.weight`) or, with `blk.*.` standing
    /// for block `layer`, one of a block's (`blk.*.attn_k.weight`). None
    /// for any other name, or a block past the last.
    pub fn matrix(&self, tensor: &str, layer: usize) -> Option<&Q8Matrix> {
        match tensor {
            "token_embd.weight" => return Some(&self.embed),
            "output.weight" => return Some(&self.output),
            _ => {}
        }
        let l = self.layers.get(layer)?;
        match tensor.strip_prefix(BLOCK)? {
            "attn_q.weight" => Some(&l.wq),
            "attn_k.weight" => Some(&l.wk),
            "attn_v.weight" => Some(&l.wv),
            "attn_output.weight" => Some(&l.wo),
            "ffn_gate.weight" => Some(&l.w_gate),
            "ffn_up.weight" => Some(&l.w_up),
            "ffn_down.weight" => Some(&l.w_down),
            _ => None,
        }
    }

    /// The norm vector GGUF names `tensor` (`output_norm.weight`, or
    /// `blk.*.attn_norm.weight` and `blk.*.ffn_norm.weight` of block
    /// `layer`), as [`Weights::matrix`] names matrices.
    pub fn vector(&self, tensor: &str, layer: usize) -> Option<&[f32]> {
        if tensor == "output_norm.weight" {
            return Some(&self.output_norm);
        }
        let l = self.layers.get(layer)?;
        match tensor.strip_prefix(BLOCK)? {
            "attn_norm.weight" => Some(&l.attn_norm),
            "ffn_norm.weight" => Some(&l.ffn_norm),
            _ => None,
        }
    }

    /// Bytes of Q8_0 weights one decode step streams.
    pub fn streamed_bytes(&self) -> usize {
        let per_layer: usize = self
            .layers
            .iter()
            .map(|l| {
                [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]
                    .iter()
                    .map(|m| m.bytes().len())
                    .sum::<usize>()
            })
            .sum();
        per_layer + self.output.bytes().len()
    }
}
