//! The embedded model: SmolLM2-135M's shapes with deterministic synthetic
//! weights, so `weft run --offline` works without a download.
//!
//! The weights come from a counter-based generator (SplitMix64 of the
//! tensor's name hash and the element index), so every tensor is the same
//! on every machine and can be made in parallel. Quants are uniform in
//! `-127..=127`; each block's scale is chosen so a row's dot product with
//! a unit-RMS activation has unit-order magnitude (`1 / (127 · sqrt(cols))`
//! times a per-block factor in `[0.5, 1.5)`); norm weights are near 1.

use weft_q8::block::f32_to_f16;
use weft_q8::{BLOCK_BYTES, BLOCK_LEN};

use crate::weights::{Layer, Q8Matrix, Weights};
use crate::Config;

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn name_seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// A synthetic `rows × cols` Q8_0 matrix named `name`.
pub fn matrix(name: &str, rows: usize, cols: usize, gain: f32) -> Q8Matrix {
    let blocks = rows * cols / BLOCK_LEN;
    let seed = name_seed(name);
    let base = gain / (127.0 * (cols as f32).sqrt());
    let mut bytes = vec![0u8; blocks * BLOCK_BYTES];
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    let chunk = blocks.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (t, part) in bytes.chunks_mut(chunk * BLOCK_BYTES).enumerate() {
            s.spawn(move || {
                for (i, block) in part.chunks_exact_mut(BLOCK_BYTES).enumerate() {
                    let b = (t * chunk + i) as u64;
                    let r = splitmix(seed ^ b.wrapping_mul(0x2545_f491_4f6c_dd1d));
                    let factor = 0.5 + (r >> 40) as f32 / (1u64 << 24) as f32;
                    block[..2].copy_from_slice(&f32_to_f16(base * factor).to_le_bytes());
                    for (k, q) in block[2..].iter_mut().enumerate() {
                        let v = splitmix(r ^ k as u64) % 255;
                        *q = (v as i64 - 127) as i8 as u8;
                    }
                }
            });
        }
    });
    // The synthetic model is small: failing to map it is out of memory,
    // as failing to allocate the Vec above would be.
    let bytes = weft_arena::Bytes::copy_from(&bytes).unwrap_or_else(|e| panic!("{e}"));
    // The shape is right by construction.
    Q8Matrix::new(name, rows, cols, bytes).unwrap_or_else(|e| unreachable!("{e}"))
}

fn norm(name: &str, n: usize) -> Vec<f32> {
    let seed = name_seed(name);
    (0..n)
        .map(|i| 0.75 + (splitmix(seed ^ i as u64) >> 40) as f32 / (1u64 << 24) as f32 * 0.5)
        .collect()
}

/// The embedded model with `config`'s shapes (tied output embeddings).
pub fn weights(config: &Config) -> Weights {
    let c = config;
    let embed = matrix("token_embd", c.vocab, c.dim, 2.0);
    let layers = (0..c.layers)
        .map(|i| {
            let n = |t: &str| format!("blk.{i}.{t}");
            Layer {
                attn_norm: norm(&n("attn_norm"), c.dim),
                wq: matrix(&n("attn_q"), c.dim, c.dim, 1.0),
                wk: matrix(&n("attn_k"), c.kv_dim(), c.dim, 1.0),
                wv: matrix(&n("attn_v"), c.kv_dim(), c.dim, 1.0),
                wo: matrix(&n("attn_output"), c.dim, c.dim, 2.0),
                ffn_norm: norm(&n("ffn_norm"), c.dim),
                w_gate: matrix(&n("ffn_gate"), c.hidden, c.dim, 1.0),
                w_up: matrix(&n("ffn_up"), c.hidden, c.dim, 1.0),
                w_down: matrix(&n("ffn_down"), c.dim, c.hidden, 2.0),
            }
        })
        .collect();
    Weights {
        config: c.clone(),
        output: embed.clone(),
        embed,
        layers,
        output_norm: norm("output_norm", c.dim),
    }
}
