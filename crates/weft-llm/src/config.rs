//! The shape of a Llama-architecture model.

use serde::{Deserialize, Serialize};

/// Every extent and constant the forward pass needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Model width (`llama.embedding_length`).
    pub dim: usize,
    /// Feed-forward width (`llama.feed_forward_length`).
    pub hidden: usize,
    /// Decoder blocks (`llama.block_count`).
    pub layers: usize,
    /// Query heads (`llama.attention.head_count`).
    pub heads: usize,
    /// Key/value heads (`llama.attention.head_count_kv`).
    pub kv_heads: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// RMSNorm epsilon (`llama.attention.layer_norm_rms_epsilon`).
    pub rms_eps: f32,
    /// RoPE base frequency (`llama.rope.freq_base`).
    pub rope_base: f32,
    /// Dimensions of each head RoPE rotates (`llama.rope.dimension_count`).
    pub rope_dims: usize,
    /// Longest sequence the KV cache holds.
    pub max_seq: usize,
    /// The element type the KV cache stores keys and values in (a choice
    /// of the run, like `max_seq`, not of the file).
    #[serde(default)]
    pub kv: KvCache,
}

/// The element type of the KV cache.
///
/// binary16 halves the bytes attention reads at depth (what llama.cpp
/// keeps by default); keys and values are computed in binary32 and rounded
/// to nearest even once, when they enter the cache, and attention widens
/// them exactly. binary32 keeps them as computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KvCache {
    /// IEEE binary16.
    #[default]
    F16,
    /// IEEE binary32.
    F32,
}

impl KvCache {
    /// Bytes per element.
    pub fn bytes(self) -> usize {
        match self {
            KvCache::F16 => 2,
            KvCache::F32 => 4,
        }
    }

    /// The name `--kv` takes (`f16`, `f32`).
    pub fn name(self) -> &'static str {
        match self {
            KvCache::F16 => "f16",
            KvCache::F32 => "f32",
        }
    }
}

impl std::str::FromStr for KvCache {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f16" => Ok(KvCache::F16),
            "f32" => Ok(KvCache::F32),
            _ => Err(format!("unknown KV cache type {s:?} (f16 or f32)")),
        }
    }
}

impl Config {
    /// SmolLM2-135M's shape (what `--offline` builds and the real file has).
    pub fn smollm2_135m() -> Config {
        Config {
            dim: 576,
            hidden: 1536,
            layers: 30,
            heads: 9,
            kv_heads: 3,
            vocab: 49152,
            rms_eps: 1e-5,
            rope_base: 100_000.0,
            rope_dims: 64,
            max_seq: 2048,
            kv: KvCache::F16,
        }
    }

    /// Per-head width.
    pub fn head_dim(&self) -> usize {
        self.dim / self.heads
    }

    /// Width of the K and V projections.
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim()
    }

    /// Check the shape is one the forward pass serves, naming what is not.
    pub fn check(&self) -> Result<(), String> {
        let pos = [
            ("dim", self.dim),
            ("hidden", self.hidden),
            ("layers", self.layers),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("vocab", self.vocab),
            ("max_seq", self.max_seq),
        ];
        if let Some((n, _)) = pos.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{n} is 0"));
        }
        if !self.dim.is_multiple_of(self.heads) {
            return Err(format!(
                "dim {} is not a multiple of heads {}",
                self.dim, self.heads
            ));
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(format!(
                "heads {} is not a multiple of kv_heads {}",
                self.heads, self.kv_heads
            ));
        }
        for (n, v) in [("dim", self.dim), ("hidden", self.hidden)] {
            if !v.is_multiple_of(32) {
                return Err(format!("{n} {v} is not a multiple of 32 (Q8_0 blocks)"));
            }
        }
        if self.rope_dims > self.head_dim() || !self.rope_dims.is_multiple_of(2) {
            return Err(format!(
                "rope dimension count {} does not fit head dim {}",
                self.rope_dims,
                self.head_dim()
            ));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps >= 0.0) {
            return Err(format!(
                "rms epsilon {} is not a finite non-negative number",
                self.rms_eps
            ));
        }
        if !(self.rope_base.is_finite() && self.rope_base > 0.0) {
            return Err(format!(
                "rope base {} is not a finite positive number",
                self.rope_base
            ));
        }
        Ok(())
    }
}
