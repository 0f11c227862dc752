//! The forward pass as a compiled plan: one site per operation of a
//! decoder block (shared by every layer), plus the embedding and the head.
//!
//! Every layer of a Llama model runs the same operations at the same
//! shapes; a site is (family, geometry, operands) and these sites carry no
//! per-layer operands (the weights are call arguments, not plan-time
//! operands), so the thirty layers' sites are identical and the plan holds
//! each once, named `blk.*.ROLE`. The planner still sees every role
//! separately, so the report says what each role runs.
//!
//! Data flow of one decode step at position `p`:
//!
//! ```text
//! x = embed(token)
//! per layer: h = rmsnorm(x)·attn_norm; hq = q8(h)
//!            q = Wq·hq; K[p] = Wk·hq; V[p] = Wv·hq      (K, V: the layer's cache rows)
//!            rope(q, K[p], p); a = attention(q, K[0..=p], V[0..=p]); x += Wo·q8(a)
//!            h = rmsnorm(x)·ffn_norm; hq = q8(h); m = silu(Wg·hq)·(Wu·hq); x += Wd·q8(m)
//! logits = Wout·q8(rmsnorm(x)·output_norm); next = argmax(logits)
//! ```
//!
//! The K/V cache is `[position][kv_heads · head_dim]` per layer, read by
//! attention with a position stride of `kv_dim`, in the element type
//! [`Config::kv`] names. binary16 (the default, as llama.cpp's) halves
//! the bytes attention reads at depth: K and V are computed in binary32
//! (the projections, then RoPE on K), and each is rounded once, to nearest
//! even, as it enters the cache; attention widens exactly. binary32 (`weft
//! run --kv f32`) lets the K and V projections write straight into the
//! rows for `p`. The real model follows llama.cpp's greedy continuations
//! with either, but for near ties (`tests/real_model.rs`).
//!
//! Every matrix product, a block's and the head's, is `q8_0.matmul` over
//! the matrix packed into panels when the engine is built (`Panels`, one
//! huge-page arena in the order a step reads it): at one token for a
//! step. (At one token it reads its weights faster than `q8_0.matvec`,
//! `docs/PERFORMANCE.md`, and it makes a step and a prompt chunk one
//! contract.) The head's panels are a second copy of the tied token
//! embeddings, which the embedding still looks up by row.
//!
//! A prompt runs the same flow over a chunk of `n` tokens (at most the
//! plan's chunk, which the planner chooses: [`choose_prefill_chunk`]) at
//! positions `p..p + n` with the prefill sites (see [`Engine`]): the
//! activations are `n` rows, the matrix products take the `n` vectors at
//! once, the K and V projections write the `n` cache rows at once, and
//! attention takes `n` queries causally; the head runs for the last token.
//!
//! # One table of roles
//!
//! Each site is declared once, in the `roles!` table below: its kernel
//! (a field of the engine's kernels), the argument struct that kernel
//! takes, its label, and the extents the model's [`Config`] gives it.
//! Everything else is derived from that line: the site list
//! ([`sites`], each [`Site`] labelled), [`SITE_NAMES`] and [`ROLES`], the
//! typed kernels, the clock's slot, and which weight tensor the step hands
//! the kernel (a role with weights reads the GGUF tensor named like its
//! label, `blk.*.attn_k` → `blk.*.attn_k.weight`). The argument struct
//! fixes the site's family, so a line cannot pair a matrix product's
//! arguments with a norm's site. The table lists the roles in the order a
//! step calls them, which is the plan's order.
//!
//! # The residual-and-norm region
//!
//! Each residual add is followed by an RMSNorm of the stream it updates
//! (the attention residual by the FFN norm, the FFN residual by the next
//! layer's attention norm). The plan declares that pair as a region
//! ([`regions`]): the chain of the two sites, or one `loopnest.add_rmsnorm`
//! site computing the chain's bits in one call and two passes over a row.
//! The planner chooses between them by price (racing when it cannot tell)
//! and the step runs the choice: with the fused site, a layer after the
//! first starts with its attention norm already in `h`, and the last
//! layer's FFN residual stays an add (the head's norm runs on the last
//! token only). Either choice gives the same logits.
//!
//! Numerics: the plan's contracts fix every rounding, and twins compute
//! their arms' bits, so the logits of a run do not depend on
//! `WEFT_NATIVE_EMIT` (tested through [`Engine::digest`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use weft_arena::PageBuf;
use weft_attention::{AttentionArgs, AttentionShape, KvSlice, KvType, Layout};
use weft_kernel::{Family, KernelArgs, Refusal, Residency, Site};
use weft_loopnest::ops::bench::{AddBench, RmsNormBench};
use weft_loopnest::{
    Add, AddArgs, AddRmsNorm, AddRmsNormArgs, Argmax, ArgmaxArgs, EmbedArgs, EmbedQ8_0, NestOp,
    RmsNorm, RmsNormArgs, Rope, RopeArgs, RopeTable, SiluMul, SiluMulArgs, Table,
};
use weft_plan::{
    Alternative, Catalogue, CompiledPlan, Executor, Member, Options, PlanError, Planner, Region,
    SiteKernel,
};
use weft_q8::matmul::{self, Q8MatmulArgs};
use weft_q8::quantize::{self, Q8QuantizeArgs};
use weft_q8::{BLOCK_BYTES, BLOCK_LEN};

use crate::weights::{Q8Matrix, Weights, BLOCK};
use crate::{Config, KvCache};

use Extent::{Dim, Hidden, KvDim, Vocab};

/// Why an engine could not be built or stepped.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The planner refused the model's plan (its own error and name).
    #[error(transparent)]
    Plan {
        /// The planner's error.
        #[from]
        source: PlanError,
    },
    /// A kernel refused its shape or its buffers (a bug in the engine's
    /// bookkeeping or an impossible configuration, never a fault).
    #[error("site-refused: {site}: {refusal}")]
    Refused {
        /// The site's label.
        site: &'static str,
        /// The refusal (it carries its own name).
        refusal: Refusal,
    },
    /// A site's weight tensor is not among the weights (a table line
    /// naming a tensor the model does not have).
    #[error("missing-tensor: {site} reads {tensor}, which the weights do not hold")]
    MissingTensor {
        /// The site's label.
        site: &'static str,
        /// The tensor's GGUF name (`blk.*.` for every block).
        tensor: &'static str,
    },
    /// The KV cache cannot hold the positions asked for.
    #[error("context-full: {needed} positions do not fit in the KV cache's {max_seq}")]
    ContextFull {
        /// Positions needed from the first.
        needed: usize,
        /// Positions the cache holds.
        max_seq: usize,
    },
    /// A token id outside the vocabulary.
    #[error("bad-token: id {id} is not below the vocabulary's {vocab}")]
    BadToken {
        /// The id.
        id: u32,
        /// Vocabulary size.
        vocab: usize,
    },
    /// A prompt of no tokens: there is nothing to feed and no logits.
    #[error("empty-prompt: the prompt has no tokens")]
    EmptyPrompt,
    /// A rewind past the positions fed.
    #[error("bad-rewind: position {to} is past the {fed} positions fed")]
    BadRewind {
        /// The position asked for.
        to: usize,
        /// Positions fed so far.
        fed: usize,
    },
    /// Memory for the engine's state could not be mapped.
    #[error("no-memory: {what}: {source}")]
    Memory {
        /// What the memory was for.
        what: &'static str,
        /// The mapping's error.
        source: weft_arena::ArenaError,
    },
    /// A prompt chunk the plan has no sites for.
    #[error("bad-chunk: {tokens} tokens per prompt chunk is not in 1..={most}")]
    BadChunk {
        /// Tokens asked for.
        tokens: usize,
        /// The prompt chunk the plan was compiled for.
        most: usize,
    },
}

impl EngineError {
    /// A stable name for each variant, as its message begins (the
    /// planner's own name for [`EngineError::Plan`]).
    pub fn name(&self) -> &'static str {
        match self {
            EngineError::Plan { source } => source.name(),
            EngineError::Refused { .. } => "site-refused",
            EngineError::MissingTensor { .. } => "missing-tensor",
            EngineError::ContextFull { .. } => "context-full",
            EngineError::BadToken { .. } => "bad-token",
            EngineError::EmptyPrompt => "empty-prompt",
            EngineError::BadChunk { .. } => "bad-chunk",
            EngineError::BadRewind { .. } => "bad-rewind",
            EngineError::Memory { .. } => "no-memory",
        }
    }
}

/// A site of the plan as the engine declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Role {
    /// What the plan and its report call the site: `blk.*.NAME` for a
    /// decoder block's (one site serves every layer), a bare name for the
    /// embedding and the head.
    pub label: &'static str,
    /// The GGUF tensor the site reads, for a role with weights: its label
    /// then `.weight` (`blk.*.attn_k.weight`).
    pub tensor: Option<&'static str>,
}

impl Role {
    /// The site runs once per decoder block (its label is `blk.*.NAME`).
    pub fn per_layer(&self) -> bool {
        self.label.starts_with(BLOCK)
    }

    /// The role runs once per prompt chunk, over all of its tokens: the
    /// embedding and every block's role. The head (output norm, its
    /// quantiser, the output projection, argmax) runs for the chunk's last
    /// token only, with the decode step's kernels.
    pub fn batched(&self) -> bool {
        self.per_layer() || self.label == SITE_NAMES[Slot::token_embd as usize]
    }
}

/// Which kernels a [`Kernels`] holds: the decode step's (every role at
/// one token) or the prefill's (batched roles at the plan's prompt chunk,
/// the head's from the decode set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KernelSet {
    Decode,
    Prefill,
}

impl KernelSet {
    /// The plan's site index of `role` in this set: the decode sites come
    /// first, in [`SITE_NAMES`] order, then the batched roles' prefill
    /// sites in the same order.
    fn index(self, role: usize) -> usize {
        match self {
            KernelSet::Prefill if ROLES[role].batched() => {
                SITES + ROLES[..role].iter().filter(|r| r.batched()).count()
            }
            _ => role,
        }
    }

    /// The label of that site.
    fn label(self, role: usize) -> &'static str {
        match self {
            KernelSet::Prefill if ROLES[role].batched() => PREFILL_NAMES[role],
            _ => SITE_NAMES[role],
        }
    }
}

/// The prompt chunk lengths the planner weighs ([`choose_prefill_chunk`]).
/// A chunk's matrix products (`q8_0.matmul`) read every weight panel once
/// for all of its tokens, so longer chunks amortise the weights; past
/// some length the chunk's activations leave the caches and the
/// elementwise sites between the products pay for it. Where that turns
/// depends on the host's caches, so the plan decides, from prices.
pub const PREFILL_CHUNKS: [usize; 5] = [32, 64, 128, 256, 512];

/// An extent of the model that sizes a site, as [`Config`] holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Extent {
    /// The model width.
    Dim,
    /// The width of the K and V projections.
    KvDim,
    /// The feed-forward width.
    Hidden,
    /// The vocabulary.
    Vocab,
}

impl Extent {
    fn of(self, c: &Config) -> usize {
        match self {
            Extent::Dim => c.dim,
            Extent::KvDim => c.kv_dim(),
            Extent::Hidden => c.hidden,
            Extent::Vocab => c.vocab,
        }
    }
}

/// Declare the plan's roles, one line each:
/// `kernel: Arguments = "label"` and, when the argument struct asks for
/// them, `, extents`. See the module docs for what is derived.
macro_rules! roles {
    ($( $kernel:ident : $args:ty = $label:literal $(, $extents:expr)? ;)*) => {
        /// Sites in the plan.
        pub const SITES: usize = [$($label),*].len();

        /// The labels of the plan's sites, in plan order.
        pub const SITE_NAMES: [&str; SITES] = [$($label),*];

        /// The labels of the prefill sites: each role at the plan's chunk
        /// (only the roles [`Role::batched`] says run batched are sites).
        pub const PREFILL_NAMES: [&str; SITES] = [$(concat!($label, "@prefill")),*];

        /// The plan's roles, in plan order (the order a step calls them).
        pub const ROLES: [Role; SITES] = [$(Role {
            label: $label,
            tensor: if <$args as Declared>::WEIGHTED {
                Some(concat!($label, ".weight"))
            } else {
                None
            },
        }),*];

        /// Each kernel's index in the plan (and in the clock).
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug)]
        enum Slot {
            $($kernel,)*
        }

        /// The typed kernels of the plan's sites.
        struct Kernels {
            $($kernel: Kernel<$args>,)*
        }

        impl Kernels {
            /// The kernels of `set`: each role's from the plan's site
            /// `set.index(role)`, labelled as that site is.
            fn new(plan: &CompiledPlan, set: KernelSet) -> Result<Kernels, PlanError> {
                Ok(Kernels {
                    $($kernel: Kernel {
                        code: plan.kernel(set.index(Slot::$kernel as usize))?,
                        slot: set.index(Slot::$kernel as usize),
                        role: Slot::$kernel as usize,
                        label: set.label(Slot::$kernel as usize),
                        tensor: concat!($label, ".weight"),
                        extents: roles!(@extents $($extents)?),
                    },)*
                })
            }
        }

        /// The declared sites at `s.rows` tokens, in plan order, each
        /// labelled from `names`.
        fn declared_sites(s: &Shapes<'_>, names: &[&'static str; SITES]) -> Vec<Site> {
            let mut i = 0;
            vec![$({
                i += 1;
                <$args as Declared>::site(roles!(@extents $($extents)?), s).with_label(names[i - 1])
            },)*]
        }

        /// Elements of the matrices one step multiplies by (every layer's).
        fn matrix_elements(c: &Config) -> u64 {
            let layers = |label: &str| if label.starts_with(BLOCK) { c.layers as u64 } else { 1 };
            let per_role: [u64; SITES] = [$(
                layers($label)
                    * <$args as Declared>::matrix_elements(roles!(@extents $($extents)?), c),
            )*];
            per_role.iter().sum()
        }

        /// Which roles multiply by a matrix packed into panels (a
        /// block's, or the head's; `q8_0.matmul`, [`Panels`]).
        const PRODUCTS: [bool; SITES] = [$(<$args as Declared>::PRODUCT),*];

        /// Each line's kernel field, for the test that it matches the label.
        #[cfg(test)]
        const KERNEL_FIELDS: [&str; SITES] = [$(stringify!($kernel)),*];
    };
    (@extents) => { () };
    (@extents $extents:expr) => { $extents };
}

// In the order a step calls them. Extents: a quantiser's width, a
// matrix product's (rows, cols); the argument struct says which it takes.
roles! {
    token_embd:      EmbedArgs      = "token_embd";
    attn_norm:       RmsNormArgs    = "blk.*.attn_norm";
    attn_norm_q8:    Q8QuantizeArgs = "blk.*.attn_norm.q8", Dim;
    attn_q:          Q8MatmulArgs   = "blk.*.attn_q", (Dim, Dim);
    attn_k:          Q8MatmulArgs   = "blk.*.attn_k", (KvDim, Dim);
    attn_v:          Q8MatmulArgs   = "blk.*.attn_v", (KvDim, Dim);
    rope:            RopeArgs       = "blk.*.rope";
    attention:       AttentionArgs  = "blk.*.attention";
    attention_q8:    Q8QuantizeArgs = "blk.*.attention.q8", Dim;
    attn_output:     Q8MatmulArgs   = "blk.*.attn_output", (Dim, Dim);
    attn_residual:   AddArgs        = "blk.*.attn_residual";
    ffn_norm:        RmsNormArgs    = "blk.*.ffn_norm";
    ffn_norm_q8:     Q8QuantizeArgs = "blk.*.ffn_norm.q8", Dim;
    ffn_gate:        Q8MatmulArgs   = "blk.*.ffn_gate", (Hidden, Dim);
    ffn_up:          Q8MatmulArgs   = "blk.*.ffn_up", (Hidden, Dim);
    ffn_silu_mul:    SiluMulArgs    = "blk.*.ffn_silu_mul";
    ffn_silu_mul_q8: Q8QuantizeArgs = "blk.*.ffn_silu_mul.q8", Hidden;
    ffn_down:        Q8MatmulArgs   = "blk.*.ffn_down", (Dim, Hidden);
    ffn_residual:    AddArgs        = "blk.*.ffn_residual";
    output_norm:     RmsNormArgs    = "output_norm";
    output_norm_q8:  Q8QuantizeArgs = "output_norm.q8", Dim;
    output:          Q8MatmulArgs   = "output", (Vocab, Dim);
    argmax:          ArgmaxArgs     = "argmax";
}

/// The label of the site in `slot`.
fn label(slot: Slot) -> &'static str {
    SITE_NAMES[slot as usize]
}

/// Keys the attention site is priced at (its body serves every `lk`).
const ATTENTION_PRICE_LK: usize = 256;

/// The shapes of the model's operations over `rows` tokens at once (1
/// for a decode step, a chunk's length for the prompt).
#[derive(Clone, Debug)]
struct Ops {
    rows: usize,
    embed: EmbedQ8_0,
    norm: RmsNorm,
    rope: Rope,
    silu: SiluMul,
    add: Add,
    /// The residual add and the RMSNorm after it, fused (the region's
    /// alternative to `add` then `norm`).
    add_norm: AddRmsNorm,
    argmax: Argmax,
}

impl Ops {
    fn new(c: &Config, rows: usize) -> Result<Ops, EngineError> {
        let at = |slot| {
            move |refusal| EngineError::Refused {
                site: label(slot),
                refusal,
            }
        };
        Ok(Ops {
            rows,
            embed: EmbedQ8_0::new(c.vocab, c.dim, rows).map_err(at(Slot::token_embd))?,
            norm: RmsNorm::new(c.dim, rows).map_err(at(Slot::attn_norm))?,
            rope: Rope::new(c.heads, c.kv_heads, c.head_dim(), c.rope_dims, rows)
                .map_err(at(Slot::rope))?,
            silu: SiluMul::new(c.hidden * rows).map_err(at(Slot::ffn_silu_mul))?,
            add: Add::new(c.dim * rows).map_err(at(Slot::attn_residual))?,
            add_norm: AddRmsNorm::new(c.dim, rows).map_err(|refusal| EngineError::Refused {
                site: RESIDUAL_NORM[0],
                refusal,
            })?,
            argmax: Argmax::new(c.vocab).map_err(at(Slot::argmax))?,
        })
    }
}

/// What building a site needs: the model's shape and operations, and
/// where the matrices' weights are.
struct Shapes<'a> {
    c: &'a Config,
    ops: &'a Ops,
    weights: Residency,
}

/// What the table's line says about a site whose kernel takes these
/// arguments: the extents the line gives, whether the role reads a weight
/// tensor, and the site itself. The argument struct fixes the family.
trait Declared: KernelArgs {
    /// The extents a line gives (`()` when the operation's shape is fixed
    /// by the config alone).
    type Extents: Copy;
    /// The role reads the GGUF tensor named like its label.
    const WEIGHTED: bool;
    /// The site of a role taking these arguments.
    fn site(extents: Self::Extents, s: &Shapes<'_>) -> Site;
    /// Elements of the matrix the role multiplies by each call.
    fn matrix_elements(_extents: Self::Extents, _c: &Config) -> u64 {
        0
    }
    /// The role multiplies by its matrix (a block's, or the head's)
    /// packed into panels (`q8_0.matmul`; [`Panels`] packs it when the
    /// engine is built).
    const PRODUCT: bool = false;
}

fn nest<O: NestOp>(op: &O) -> Site {
    Site::new(Family(O::FAMILY), op.geometry())
}

impl Declared for EmbedArgs {
    type Extents = ();
    const WEIGHTED: bool = true;
    fn site(_: (), s: &Shapes<'_>) -> Site {
        nest(&s.ops.embed)
    }
}

impl Declared for RmsNormArgs {
    type Extents = ();
    const WEIGHTED: bool = true;
    fn site(_: (), s: &Shapes<'_>) -> Site {
        nest(&s.ops.norm)
    }
}

/// A quantiser's extent: the width of the activation it quantises.
impl Declared for Q8QuantizeArgs {
    type Extents = Extent;
    const WEIGHTED: bool = false;
    fn site(cols: Extent, s: &Shapes<'_>) -> Site {
        let cols = cols.of(s.c) as u64;
        let batch = s.ops.rows as u64;
        Site::new(Family(quantize::FAMILY), quantize::geometry(cols, batch))
    }
}

/// A matrix product, a block's or the head's. Extents: the rows and
/// columns of its matrix. A step's site and a chunk's are both
/// `q8_0.matmul` (at one token and at the chunk), on the matrix packed
/// into panels by [`Panels`], so a prompt gives the same bits fed a token
/// at a time or in chunks of any length (the head runs at one token only).
impl Declared for Q8MatmulArgs {
    type Extents = (Extent, Extent);
    const WEIGHTED: bool = true;
    const PRODUCT: bool = true;
    fn site((rows, cols): (Extent, Extent), s: &Shapes<'_>) -> Site {
        let (rows, cols) = (rows.of(s.c) as u64, cols.of(s.c) as u64);
        let batch = s.ops.rows as u64;
        Site::new(Family(matmul::FAMILY), matmul::geometry(rows, cols, batch))
            .with_residency(s.weights)
    }
    fn matrix_elements((rows, cols): (Extent, Extent), c: &Config) -> u64 {
        rows.of(c) as u64 * cols.of(c) as u64
    }
}

impl Declared for RopeArgs {
    type Extents = ();
    const WEIGHTED: bool = false;
    fn site(_: (), s: &Shapes<'_>) -> Site {
        nest(&s.ops.rope)
    }
}

impl Declared for AttentionArgs {
    type Extents = ();
    const WEIGHTED: bool = false;
    fn site(_: (), s: &Shapes<'_>) -> Site {
        let lq = s.ops.rows;
        let lk = ATTENTION_PRICE_LK.min(s.c.max_seq).max(lq);
        Site::new(
            Family(weft_attention::FAMILY),
            attention_shape(s.c, lq, lk).geometry(),
        )
    }
}

impl Declared for AddArgs {
    type Extents = ();
    const WEIGHTED: bool = false;
    fn site(_: (), s: &Shapes<'_>) -> Site {
        nest(&s.ops.add)
    }
}

impl Declared for SiluMulArgs {
    type Extents = ();
    const WEIGHTED: bool = false;
    fn site(_: (), s: &Shapes<'_>) -> Site {
        nest(&s.ops.silu)
    }
}

impl Declared for ArgmaxArgs {
    type Extents = ();
    const WEIGHTED: bool = false;
    fn site(_: (), s: &Shapes<'_>) -> Site {
        nest(&s.ops.argmax)
    }
}

/// The attention shape of `lq` consecutive tokens, the last of which sees
/// `lk` keys (a decode step: `lq = 1`).
fn attention_shape(c: &Config, lq: usize, lk: usize) -> AttentionShape {
    AttentionShape {
        d: c.head_dim(),
        lq,
        lk,
        heads: c.heads,
        kv_heads: c.kv_heads,
        q_offset: lk - lq,
        causal: true,
        scale: 1.0 / (c.head_dim() as f32).sqrt(),
        kv: match c.kv {
            KvCache::F16 => KvType::F16,
            KvCache::F32 => KvType::F32,
        },
    }
}

/// Bytes of Q8_0 weights one decode step reads: every layer's matrices
/// and the output projection (the table's matrix products).
pub fn weight_bytes(c: &Config) -> u64 {
    matrix_elements(c) / BLOCK_LEN as u64 * BLOCK_BYTES as u64
}

/// Where the matrix-vector sites find their weights on `host`: streamed
/// from memory when one step's weights do not fit in the part of the
/// last-level cache this process's cores can hold
/// ([`weft_host::Caches::last_level_share`]: each matrix is then evicted
/// before the next step comes back to it), cached otherwise. A host that
/// does not say its last-level cache (or says 0) is taken to have
/// [`weft_host::Caches::ASSUMED_LAST_LEVEL`].
pub fn weight_residency(c: &Config, host: &weft_host::Host) -> Residency {
    let share = host.caches.last_level_share(host.logical_cores);
    if weight_bytes(c) > u64::from(share) {
        Residency::Streamed
    } else {
        Residency::Cached
    }
}

/// The prompt chunk lengths [`choose_prefill_chunk`] weighs for `c`: those
/// of [`PREFILL_CHUNKS`] the KV cache can hold, or the whole cache when
/// it is shorter than every one.
pub fn prefill_chunks(c: &Config) -> Vec<usize> {
    let fit: Vec<usize> = PREFILL_CHUNKS
        .into_iter()
        .filter(|&n| n <= c.max_seq)
        .collect();
    if fit.is_empty() {
        vec![c.max_seq.max(1)]
    } else {
        fit
    }
}

/// The prompt chunk a plan is compiled for, and the estimates it was
/// chosen by.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkChoice {
    /// Tokens per chunk: the prefill sites' batch and
    /// [`Engine::prefill_chunk`]'s default.
    pub chunk: usize,
    /// Each length weighed, with its estimated cycles per prompt token
    /// (`None`: no chunk-dependent site could be priced at every length).
    pub per_token: Vec<(usize, Option<f64>)>,
}

impl std::fmt::Display for ChunkChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "prompt chunk {}", self.chunk)?;
        if self.per_token.len() > 1 {
            let est: Vec<String> = self
                .per_token
                .iter()
                .map(|(n, c)| match c {
                    Some(c) => format!("{n}: {c:.0}"),
                    None => format!("{n}: unpriced"),
                })
                .collect();
            write!(
                f,
                " (estimated cycles per prompt token, {})",
                est.join(", ")
            )?;
        }
        Ok(())
    }
}

/// Choose the prompt chunk of `c`'s plan: for each length of
/// [`prefill_chunks`], `planner` estimates ([`Planner::estimate`]) every
/// batched site at that length, and the length with the fewest cycles
/// per prompt token wins (the shorter on a tie: less memory). A site's
/// cycles count once per call a chunk makes (per layer for a block's
/// role) over the chunk's tokens. Attention is left out: a prompt's
/// attention work is the same at every chunk length (each query attends
/// to the same keys), so it cannot separate them. So is any role some
/// length could not price, so that every length is weighed over the
/// same sites.
pub fn choose_prefill_chunk(planner: &mut Planner, c: &Config) -> Result<ChunkChoice, EngineError> {
    let lengths = prefill_chunks(c);
    if lengths.len() == 1 {
        return Ok(ChunkChoice {
            chunk: lengths[0],
            per_token: vec![(lengths[0], None)],
        });
    }
    let weights = weight_residency(c, weft_host::host());
    // prices[length][role]: cycles of one call, where priced.
    let mut prices: Vec<Vec<Option<f64>>> = Vec::with_capacity(lengths.len());
    for &n in &lengths {
        let ops = Ops::new(c, n)?;
        let sites = declared_sites(
            &Shapes {
                c,
                ops: &ops,
                weights,
            },
            &PREFILL_NAMES,
        );
        let mut row = vec![None; SITES];
        for (role, site) in sites.iter().enumerate() {
            if !ROLES[role].batched() || site.family == Family(weft_attention::FAMILY) {
                continue;
            }
            row[role] = planner.estimate(site)?.map(|p| p.cycles);
        }
        prices.push(row);
    }
    let counted: Vec<usize> = (0..SITES)
        .filter(|&r| prices.iter().all(|row| row[r].is_some()))
        .collect();
    let calls = |r: usize| {
        if ROLES[r].per_layer() {
            c.layers as f64
        } else {
            1.0
        }
    };
    let per_token: Vec<(usize, Option<f64>)> = lengths
        .iter()
        .zip(&prices)
        .map(|(&n, row)| {
            let cycles: f64 = counted
                .iter()
                .map(|&r| row[r].unwrap_or(0.0) * calls(r))
                .sum();
            (n, (!counted.is_empty()).then(|| cycles / n as f64))
        })
        .collect();
    // Only a strictly cheaper length displaces the best so far, so a tie
    // keeps the shorter.
    let chunk = per_token
        .iter()
        .fold(None::<(usize, f64)>, |best, &(n, c)| match (best, c) {
            (Some((_, b)), Some(c)) if c < b => Some((n, c)),
            (None, Some(c)) => Some((n, c)),
            (best, _) => best,
        })
        .map_or(lengths[0], |(n, _)| n);
    Ok(ChunkChoice { chunk, per_token })
}

/// The sites of `c`'s plan on this host, in plan order: every role at one
/// token, labelled as [`SITE_NAMES`] lists them, then each batched role
/// ([`Role::batched`]) at `chunk` tokens, labelled as [`PREFILL_NAMES`]
/// lists it.
pub fn sites(c: &Config, chunk: usize) -> Result<Vec<Site>, EngineError> {
    let weights = weight_residency(c, weft_host::host());
    let one = Ops::new(c, 1)?;
    let mut sites = declared_sites(
        &Shapes {
            c,
            ops: &one,
            weights,
        },
        &SITE_NAMES,
    );
    let chunk = Ops::new(c, chunk)?;
    let prefill = declared_sites(
        &Shapes {
            c,
            ops: &chunk,
            weights,
        },
        &PREFILL_NAMES,
    );
    sites.extend(
        prefill
            .into_iter()
            .zip(ROLES)
            .filter(|(_, role)| role.batched())
            .map(|(site, _)| site),
    );
    Ok(sites)
}

/// The labels of the residual-and-norm region's members at one token (a
/// decode step) and at the plan's chunk: the chain's add and norm, then
/// the fused site. The region's own label is the fused site's.
const RESIDUAL_NORM: [&str; 3] = [
    "blk.*.residual+norm",
    "blk.*.residual+norm.chain.add",
    "blk.*.residual+norm.chain.norm",
];
const RESIDUAL_NORM_PREFILL: [&str; 3] = [
    "blk.*.residual+norm@prefill",
    "blk.*.residual+norm.chain.add@prefill",
    "blk.*.residual+norm.chain.norm@prefill",
];

/// The plan's regions: a residual add followed by an RMSNorm (each
/// layer's attention residual and its FFN norm, and its FFN residual and
/// the next layer's attention norm) as the chain of the two sites or the
/// one fused `loopnest.add_rmsnorm` site, at one token and at `chunk`
/// tokens. Their member sites follow [`sites`] in the plan: per region,
/// the chain's add and norm, then the fused site.
pub fn regions(c: &Config, chunk: usize) -> Result<Vec<Region>, EngineError> {
    [(1, RESIDUAL_NORM), (chunk, RESIDUAL_NORM_PREFILL)]
        .into_iter()
        .map(|(rows, [fused, add, norm])| {
            let ops = Ops::new(c, rows)?;
            Ok(Region {
                label: fused.to_owned(),
                chain: vec![
                    Member::with_bench(nest(&ops.add).with_label(add), Arc::new(AddBench)),
                    Member::with_bench(nest(&ops.norm).with_label(norm), Arc::new(RmsNormBench)),
                ],
                fused: Member::new(nest(&ops.add_norm).with_label(fused)),
            })
        })
        .collect()
}

/// The labels of the plan's sites, in plan order: [`SITE_NAMES`], the
/// batched roles' [`PREFILL_NAMES`], then each region's members (its
/// chain's add and norm, then its fused site).
fn plan_labels() -> Vec<&'static str> {
    let region = |[fused, add, norm]: [&'static str; 3]| [add, norm, fused];
    SITE_NAMES
        .into_iter()
        .chain(
            (0..SITES)
                .filter(|&i| ROLES[i].batched())
                .map(|i| PREFILL_NAMES[i]),
        )
        .chain(region(RESIDUAL_NORM))
        .chain(region(RESIDUAL_NORM_PREFILL))
        .collect()
}

/// The catalogue the model's plan draws from: the Q8_0 matrix-vector and
/// activation-quantiser families, fused attention, the generated kernels.
pub fn catalogue() -> Result<Catalogue, PlanError> {
    let mut catalogue = Catalogue::new();
    catalogue.register(weft_q8::entry())?;
    catalogue.register(matmul::entry())?;
    catalogue.register(quantize::entry())?;
    catalogue.register(weft_attention::entry())?;
    for e in weft_loopnest::entries() {
        catalogue.register(e)?;
    }
    Ok(catalogue)
}

/// A model's compiled plan and the prompt chunk its prefill sites are
/// compiled for.
#[derive(Debug)]
pub struct ModelPlan {
    /// The plan.
    pub plan: CompiledPlan,
    /// The chunk and how it was chosen.
    pub chunk: ChunkChoice,
}

/// Compile the plan of a model shaped `c`: the prompt chunk chosen by
/// [`choose_prefill_chunk`], then [`sites`] and [`regions`] at that chunk
/// over [`catalogue`], priced by weft-cost for this host, with the planner's
/// `options`; `progress(done, total)` follows the compile. The cache is
/// saved after.
pub fn compile_plan(
    c: &Config,
    options: Options,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<ModelPlan, EngineError> {
    let mut planner = Planner::for_host(catalogue()?, weft_host::Host::detect(), options);
    let chunk = choose_prefill_chunk(&mut planner, c)?;
    let plan = planner.compile_regions_with_progress(
        &sites(c, chunk.chunk)?,
        &regions(c, chunk.chunk)?,
        progress,
    )?;
    // A cache that cannot be written only costs the next run its time.
    let _ = planner.save_cache();
    Ok(ModelPlan { plan, chunk })
}

/// One role's compiled kernel, with what its table line says.
struct Kernel<A: Declared> {
    code: SiteKernel<A>,
    /// Its index in the plan and in the clock.
    slot: usize,
    /// Its role's index in [`ROLES`].
    role: usize,
    label: &'static str,
    /// The tensor it reads, if its arguments take weights.
    tensor: &'static str,
    extents: A::Extents,
}

/// What every call of a step needs besides its buffers.
struct Call<'a> {
    exec: &'a Executor,
    clock: &'a mut Clock,
    weights: &'a Weights,
    ops: &'a Ops,
}

impl<A: Declared> Kernel<A> {
    /// Run the kernel on `args` (from the family's checked constructor),
    /// timing it when the clock runs.
    fn run(&self, call: &mut Call<'_>, args: Result<A, Refusal>) -> Result<(), EngineError> {
        timed_call(&self.code, self.slot, self.label, call, args)
    }

    fn missing(&self) -> EngineError {
        EngineError::MissingTensor {
            site: self.label,
            tensor: self.tensor,
        }
    }

    /// The role's matrix (of block `layer` for a block's role).
    fn matrix<'w>(&self, weights: &'w Weights, layer: usize) -> Result<&'w Q8Matrix, EngineError> {
        weights
            .matrix(self.tensor, layer)
            .ok_or_else(|| self.missing())
    }
}

/// Run `code` on `args` (from the family's checked constructor) as site
/// `slot`, timing it when the clock runs.
fn timed_call<A: KernelArgs>(
    code: &SiteKernel<A>,
    slot: usize,
    label: &'static str,
    call: &mut Call<'_>,
    args: Result<A, Refusal>,
) -> Result<(), EngineError> {
    let args = args.map_err(|refusal| EngineError::Refused {
        site: label,
        refusal,
    })?;
    let clock = &mut *call.clock;
    let t0 = clock.on.then(Instant::now);
    // SAFETY: `args` came from the family's checked constructor over
    // buffers the caller borrowed for this statement, so they stay valid
    // and unaliased for the whole call: all `SiteKernel::run` asks.
    unsafe { code.run(call.exec, &args) };
    if let Some(t0) = t0 {
        clock.time[slot] += t0.elapsed();
        clock.calls[slot] += 1;
    }
    #[cfg(test)]
    clock.trace.push(slot);
    Ok(())
}

/// The fused residual add and RMSNorm of a region that chose it.
struct Fused {
    code: SiteKernel<AddRmsNormArgs>,
    /// Its index in the plan and in the clock.
    slot: usize,
    label: &'static str,
}

impl Fused {
    /// The fused site's kernel if the region `label` of `plan` chose it,
    /// `None` if it kept the chain.
    fn of(plan: &CompiledPlan, label: &'static str) -> Result<Option<Fused>, EngineError> {
        let region = plan.region(label)?;
        if region.choice != Alternative::Fused {
            return Ok(None);
        }
        Ok(Some(Fused {
            code: plan.kernel(region.fused)?,
            slot: region.fused,
            label,
        }))
    }

    /// `x += y`, then `h = rmsnorm(x) · w` for each of the call's rows,
    /// `w` the norm weights `tensor` of block `layer`: the chain's bits.
    fn run(
        &self,
        call: &mut Call<'_>,
        (x, y): (&mut [f32], &[f32]),
        (tensor, layer): (&'static str, usize),
        h: &mut [f32],
    ) -> Result<(), EngineError> {
        let (weights, ops) = (call.weights, call.ops);
        let w = weights
            .vector(tensor, layer)
            .ok_or(EngineError::MissingTensor {
                site: self.label,
                tensor,
            })?;
        let eps = weights.config.rms_eps;
        let args = AddRmsNormArgs::new(&ops.add_norm, x, y, w, h, eps, 0..ops.rows);
        timed_call(&self.code, self.slot, self.label, call, args)
    }
}

/// Every block's matrices of the product roles ([`Declared::PRODUCT`]),
/// and the head's, packed into the `q8_0.panel16` layout once, when the
/// engine is built: the weights of every `q8_0.matmul` call, a step's and
/// a chunk's.
///
/// All of them share one huge-page arena, layer by layer in role order
/// and the head last (the order a step reads them), so a step's products
/// stream one run of memory: a call's last panel is followed by the next
/// call's first, and the TLB sees 2 MiB pages. Measured on a Zen 4 host
/// (family 25): the same panels, each in its own heap allocation on
/// 4 KiB pages, decoded at 0.65 of the streaming-read ceiling; here, 0.86
/// (docs/PERFORMANCE.md).
struct Panels {
    arena: weft_arena::Arena,
    /// Per layer, per role (`None` for a role that is not a product).
    panels: Vec<Vec<Option<Panel>>>,
}

/// One matrix's place in [`Panels`]' arena and its geometry.
struct Panel {
    range: std::ops::Range<usize>,
    rows: usize,
    blocks: usize,
}

impl Panels {
    fn new(w: &Weights) -> Result<Panels, EngineError> {
        // First every matrix's geometry, checked, then one arena sized
        // for them all: block roles layer by layer, then the head's (its
        // "layer" 0).
        let block = (0..w.config.layers).flat_map(|l| {
            (0..SITES)
                .filter(|&r| ROLES[r].per_layer())
                .map(move |r| (l, r))
        });
        let head = (0..SITES)
            .filter(|&r| !ROLES[r].per_layer())
            .map(|r| (0, r));
        let mut matrices = Vec::new();
        for (layer, slot) in block.chain(head) {
            let role = &ROLES[slot];
            let Some(tensor) = role.tensor.filter(|_| PRODUCTS[slot]) else {
                continue;
            };
            let m = w.matrix(tensor, layer).ok_or(EngineError::MissingTensor {
                site: role.label,
                tensor,
            })?;
            let blocks =
                matmul::canonical_blocks(m.bytes(), m.rows(), m.cols()).map_err(|refusal| {
                    EngineError::Refused {
                        site: role.label,
                        refusal,
                    }
                })?;
            matrices.push((layer, slot, m, blocks));
        }
        let lens: Vec<usize> = matrices
            .iter()
            .map(|&(_, _, m, blocks)| matmul::packed_len(m.rows(), blocks))
            .collect();
        let total = lens
            .iter()
            .map(|len| len.next_multiple_of(weft_arena::ALIGN))
            .sum();
        let mut builder = weft_arena::ArenaBuilder::new(total);
        let ranges = builder
            .push_many_with(&lens, |outs| {
                for (out, &(_, _, m, blocks)) in outs.iter_mut().zip(&matrices) {
                    matmul::pack_into(m.bytes(), m.rows(), blocks, out);
                }
                Ok::<(), std::convert::Infallible>(())
            })
            .unwrap_or_else(|never| match never {});
        let arena = builder.seal().map_err(|source| EngineError::Memory {
            what: "the packed weights",
            source,
        })?;
        let mut panels: Vec<Vec<Option<Panel>>> = (0..w.config.layers)
            .map(|_| (0..SITES).map(|_| None).collect())
            .collect();
        for ((layer, slot, m, blocks), range) in matrices.into_iter().zip(ranges) {
            panels[layer][slot] = Some(Panel {
                range,
                rows: m.rows(),
                blocks,
            });
        }
        Ok(Panels { arena, panels })
    }
}

/// Feed `logits`' little-endian bits to the digest a few KiB at a time:
/// 111 µs a step against 153 µs for one `update` per logit (a standalone
/// probe of SmolLM2's 49,152 logits on a Zen 4 host, family 25).
fn digest_logits(digest: &mut Sha256, logits: &[f32]) {
    let mut buf = [0u8; 4096];
    for chunk in logits.chunks(buf.len() / 4) {
        for (out, v) in buf.chunks_exact_mut(4).zip(chunk) {
            out.copy_from_slice(&v.to_bits().to_le_bytes());
        }
        digest.update(&buf[..4 * chunk.len()]);
    }
}

impl Kernel<Q8MatmulArgs> {
    /// `y = W · x` for each of the call's rows (`y[n · rows + r]`), `W`
    /// the role's matrix of block `layer`, packed.
    fn matmul(
        &self,
        call: &mut Call<'_>,
        panels: &Panels,
        layer: usize,
        x: &[u8],
        y: &mut [f32],
    ) -> Result<(), EngineError> {
        let Some(Some(w)) = panels.panels.get(layer).map(|p| &p[self.role]) else {
            return Err(self.missing());
        };
        let bytes = panels.arena.view(w.range.clone());
        let args = Q8MatmulArgs::from_slices(
            &bytes,
            x,
            y,
            (w.rows, BLOCK_LEN * w.blocks, call.ops.rows),
            0..w.rows,
        );
        self.run(call, args)
    }
}

impl Kernel<EmbedArgs> {
    /// `out` = the rows of the role's table for `ids`.
    fn embed(&self, call: &mut Call<'_>, ids: &[u32], out: &mut [f32]) -> Result<(), EngineError> {
        let (weights, ops) = (call.weights, call.ops);
        let table = Table::Q8_0(self.matrix(weights, 0)?.bytes());
        let args = EmbedArgs::new(&ops.embed, table, ids, out, 0..ids.len());
        self.run(call, args)
    }
}

impl Kernel<RmsNormArgs> {
    /// `y = rmsnorm(x) · w`, `w` the role's norm weights (of block `layer`).
    fn norm(
        &self,
        call: &mut Call<'_>,
        layer: usize,
        x: &[f32],
        y: &mut [f32],
    ) -> Result<(), EngineError> {
        let (weights, ops) = (call.weights, call.ops);
        let w = weights
            .vector(self.tensor, layer)
            .ok_or_else(|| self.missing())?;
        let eps = weights.config.rms_eps;
        let args = RmsNormArgs::new(&ops.norm, x, w, y, eps, 0..ops.rows);
        self.run(call, args)
    }
}

impl Kernel<Q8QuantizeArgs> {
    /// `out = q8(x)` for each of the call's rows, `x` as wide as the
    /// role's extent.
    fn quantize(&self, call: &mut Call<'_>, x: &[f32], out: &mut [u8]) -> Result<(), EngineError> {
        let cols = self.extents.of(&call.weights.config);
        let rows = call.ops.rows;
        let args = Q8QuantizeArgs::new(x, out, cols, rows, 0..rows * cols / BLOCK_LEN);
        self.run(call, args)
    }
}

/// The activations of up to a prompt chunk's tokens (a decode step uses
/// the first row of each) and the KV cache.
struct State {
    x: Vec<f32>,
    h: Vec<f32>,
    hq: Vec<u8>,
    q: Vec<f32>,
    att: Vec<f32>,
    proj: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    mq: Vec<u8>,
    logits: Vec<f32>,
    /// The keys and values of every layer.
    cache: KvStore,
    /// With a binary16 cache, a chunk's new keys and values in binary32
    /// (the projections' outputs, RoPE'd in place) before they are
    /// rounded into the cache; empty with a binary32 cache, whose
    /// projections write the cache's rows directly.
    new_keys: Vec<f32>,
    new_values: Vec<f32>,
    next: u32,
}

/// Every layer's `max_seq × kv_dim` keys and values, in the cache's
/// type, layer after layer in one buffer per kind: on huge pages, because
/// a step at depth streams them all (94 MB a token at 4096 positions in
/// binary16), and a 4 KiB page is a TLB miss each.
struct KvStore {
    /// Elements of one layer's keys (and of its values).
    layer: usize,
    rows: KvRows,
}

/// Every layer's rows, layer after layer.
enum KvRows {
    F32 {
        keys: PageBuf<f32>,
        values: PageBuf<f32>,
    },
    /// binary16 bit patterns, rounded to nearest even from binary32.
    F16 {
        keys: PageBuf<u16>,
        values: PageBuf<u16>,
    },
}

/// One layer of a [`KvStore`].
enum LayerCache<'a> {
    F32 {
        keys: &'a mut [f32],
        values: &'a mut [f32],
    },
    F16 {
        keys: &'a mut [u16],
        values: &'a mut [u16],
    },
}

fn kv_memory(source: weft_arena::ArenaError) -> EngineError {
    EngineError::Memory {
        what: "the KV cache",
        source,
    }
}

impl KvStore {
    fn new(c: &Config) -> Result<KvStore, EngineError> {
        let layer = c.max_seq * c.kv_dim();
        let n = c.layers * layer;
        let rows = match c.kv {
            KvCache::F32 => KvRows::F32 {
                keys: PageBuf::zeroed(n).map_err(kv_memory)?,
                values: PageBuf::zeroed(n).map_err(kv_memory)?,
            },
            KvCache::F16 => KvRows::F16 {
                keys: PageBuf::zeroed(n).map_err(kv_memory)?,
                values: PageBuf::zeroed(n).map_err(kv_memory)?,
            },
        };
        Ok(KvStore { layer, rows })
    }

    /// Layer `l`'s keys and values.
    fn layer(&mut self, l: usize) -> LayerCache<'_> {
        let r = l * self.layer..(l + 1) * self.layer;
        match &mut self.rows {
            KvRows::F32 { keys, values } => LayerCache::F32 {
                keys: &mut keys[r.clone()],
                values: &mut values[r],
            },
            KvRows::F16 { keys, values } => LayerCache::F16 {
                keys: &mut keys[r.clone()],
                values: &mut values[r],
            },
        }
    }
}

/// Round `from` to binary16, nearest even, into `to` (`half` uses F16C
/// where the host has it; both round the same way).
fn to_f16(from: &[f32], to: &mut [u16]) {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
    to.reinterpret_cast_mut::<half::f16>()
        .convert_from_f32_slice(from);
}

/// Bytes of `n` f32s as Q8_0 blocks.
fn q8_bytes(n: usize) -> usize {
    n / BLOCK_LEN * BLOCK_BYTES
}

impl State {
    fn new(c: &Config, rows: usize) -> Result<State, EngineError> {
        let f = |n: usize| vec![0.0f32; rows * n];
        let new = match c.kv {
            KvCache::F32 => 0,
            KvCache::F16 => rows * c.kv_dim(),
        };
        Ok(State {
            x: f(c.dim),
            h: f(c.dim),
            hq: vec![0; rows * q8_bytes(c.dim)],
            q: f(c.dim),
            att: f(c.dim),
            proj: f(c.dim),
            gate: f(c.hidden),
            up: f(c.hidden),
            mq: vec![0; rows * q8_bytes(c.hidden)],
            logits: vec![0.0; c.vocab],
            cache: KvStore::new(c)?,
            new_keys: vec![0.0; new],
            new_values: vec![0.0; new],
            next: 0,
        })
    }
}

/// A model compiled to a plan, with its KV cache: feed tokens, get logits.
///
/// # The prompt in chunks
///
/// [`Engine::prefill`] feeds a prompt in chunks of up to
/// [`Engine::prefill_chunk`] tokens (default: the plan's chunk,
/// [`choose_prefill_chunk`]): every
/// batched role ([`Role::batched`]) runs once per chunk over all of its
/// tokens, so each matrix product reads its weights once per chunk
/// instead of once per token, and attention takes the chunk's queries
/// causally (query `i` of a chunk at position `p` sees keys `0..=p + i`)
/// after the chunk's keys and values are in the cache. Only the prompt's
/// last token goes through the head.
///
/// Every site is bit-identical between a chunk and a token at a time. The
/// quantiser is per vector; the norms, RoPE (absolute positions),
/// SiLU·mul and the residual adds are per row or per element; attention
/// computes each (head, query) alone over the same keys in the same
/// blocks; the matrix products are `q8_0.matmul` at every batch (one FMA
/// per block and output, per vector). So every chunk length, 1 included
/// (the token-at-a-time path, the decode step's kernels), gives **the
/// same bits** (`tests/engine.rs` at every length on a small model,
/// `tests/real_model.rs` on SmolLM2's pinned prompts).
pub struct Engine {
    weights: Arc<Weights>,
    plan: CompiledPlan,
    kernels: Kernels,
    prefill_kernels: Kernels,
    /// The residual-and-norm region's fused kernel, at one token and at
    /// the chunk, where the region chose it over the chain.
    fused: Option<Fused>,
    prefill_fused: Option<Fused>,
    panels: Panels,
    /// `ops[n - 1]`: the operations over `n` tokens, `n` up to the
    /// plan's chunk.
    ops: Vec<Ops>,
    chunk: usize,
    /// The plan's chunk and the estimates that chose it.
    chunk_choice: ChunkChoice,
    labels: Vec<&'static str>,
    rope_table: RopeTable,
    exec: Executor,
    state: State,
    pos: usize,
    digest: Sha256,
    clock: Clock,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.weights.config)
            .field("threads", &self.exec.threads())
            .field("pos", &self.pos)
            .field("chunk", &self.chunk)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Compile the plan for `weights` with `options` (a planner over
    /// [`catalogue`] pricing with weft-cost for this host) and run it on
    /// `threads` threads. `progress(done, total)` follows the compile.
    pub fn new(
        weights: Arc<Weights>,
        options: Options,
        threads: usize,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Engine, EngineError> {
        let c = &weights.config;
        let ModelPlan { plan, chunk } = compile_plan(c, options, progress)?;
        let batch = chunk.chunk;
        let ops = (1..=batch)
            .map(|n| Ops::new(c, n))
            .collect::<Result<Vec<_>, _>>()?;
        let rope_table =
            RopeTable::new(f64::from(c.rope_base), c.rope_dims, c.max_seq).map_err(|refusal| {
                EngineError::Refused {
                    site: label(Slot::rope),
                    refusal,
                }
            })?;
        let kernels = Kernels::new(&plan, KernelSet::Decode)?;
        let prefill_kernels = Kernels::new(&plan, KernelSet::Prefill)?;
        let fused = Fused::of(&plan, RESIDUAL_NORM[0])?;
        let prefill_fused = Fused::of(&plan, RESIDUAL_NORM_PREFILL[0])?;
        let panels = Panels::new(&weights)?;
        let labels = plan_labels();
        Ok(Engine {
            state: State::new(c, batch)?,
            weights,
            plan,
            kernels,
            prefill_kernels,
            fused,
            prefill_fused,
            panels,
            ops,
            chunk: batch,
            chunk_choice: chunk,
            labels,
            rope_table,
            exec: Executor::new(threads),
            pos: 0,
            digest: Sha256::new(),
            clock: Clock::default(),
        })
    }

    /// The compiled plan (its report, sites and bodies).
    pub fn plan(&self) -> &CompiledPlan {
        &self.plan
    }

    /// The model's shape.
    pub fn config(&self) -> &Config {
        &self.weights.config
    }

    /// Positions fed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Threads the executor runs on.
    pub fn threads(&self) -> usize {
        self.exec.threads()
    }

    /// Tokens [`Engine::prefill`] feeds per chunk.
    pub fn prefill_chunk(&self) -> usize {
        self.chunk
    }

    /// The chunk the plan's prefill sites are compiled for (the most
    /// [`Engine::set_prefill_chunk`] accepts), and how the planner chose it.
    pub fn chunk_choice(&self) -> &ChunkChoice {
        &self.chunk_choice
    }

    /// Feed prompts in chunks of `tokens` (`1..=` the plan's chunk; 1
    /// feeds a token at a time through the decode step's kernels);
    /// [`EngineError::BadChunk`] otherwise. The logits are the same for
    /// every length of 2 or more (see the type's docs).
    pub fn set_prefill_chunk(&mut self, tokens: usize) -> Result<(), EngineError> {
        let most = self.ops.len();
        if !(1..=most).contains(&tokens) {
            return Err(EngineError::BadChunk { tokens, most });
        }
        self.chunk = tokens;
        Ok(())
    }

    /// How many times the executor has run calls on the caller alone
    /// because splitting lost time (`weft_plan::Executor::solo_stretches`).
    pub fn solo_stretches(&self) -> u64 {
        self.exec.solo_stretches()
    }

    /// SHA-256 of the bits of every logit the engine has returned so far
    /// (each step's, and each prompt's last token's), in hex.
    pub fn digest(&self) -> String {
        let d = self.digest.clone().finalize();
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Forget the context (the cache's contents are overwritten as
    /// positions are fed again) and the digest.
    pub fn reset(&mut self) {
        self.pos = 0;
        self.digest = Sha256::new();
    }

    /// Go back to position `to` (at most [`Engine::position`]): the cache
    /// keeps its rows below `to`, so the next token is fed at `to` exactly
    /// as if nothing had been fed after it ([`EngineError::BadRewind`]
    /// past the positions fed). The digest is kept. A benchmark decodes
    /// from one context depth again and again this way.
    pub fn rewind(&mut self, to: usize) -> Result<(), EngineError> {
        if to > self.pos {
            return Err(EngineError::BadRewind { to, fed: self.pos });
        }
        self.pos = to;
        Ok(())
    }

    /// Whether `more` positions past those fed so far fit in the KV cache
    /// ([`EngineError::ContextFull`] if not): check a prompt and the
    /// tokens to generate after it before feeding any.
    pub fn ensure_room(&self, more: usize) -> Result<(), EngineError> {
        let max_seq = self.weights.config.max_seq;
        let needed = self.pos.saturating_add(more);
        if needed > max_seq {
            return Err(EngineError::ContextFull { needed, max_seq });
        }
        Ok(())
    }

    /// Feed every token of `prompt` in chunks of [`Engine::prefill_chunk`]
    /// (see the type's docs; [`EngineError::EmptyPrompt`] if it has none,
    /// [`EngineError::ContextFull`] or [`EngineError::BadToken`] before any
    /// token is fed); returns the last token's logits, the only ones
    /// computed.
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<&[f32], EngineError> {
        if prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        self.ensure_room(prompt.len())?;
        let vocab = self.weights.config.vocab;
        if let Some(&id) = prompt.iter().find(|&&t| t as usize >= vocab) {
            return Err(EngineError::BadToken { id, vocab });
        }
        let chunks = prompt.len().div_ceil(self.chunk);
        let chunked = self.chunk > 1;
        for (i, chunk) in prompt.chunks(self.chunk).enumerate() {
            self.forward(chunk, i + 1 == chunks, chunked)?;
        }
        Ok(&self.state.logits)
    }

    /// Feed `token` at the next position; returns its logits.
    pub fn step(&mut self, token: u32) -> Result<&[f32], EngineError> {
        let vocab = self.weights.config.vocab;
        if token as usize >= vocab {
            return Err(EngineError::BadToken { id: token, vocab });
        }
        self.ensure_room(1)?;
        self.forward(&[token], true, false)?;
        Ok(&self.state.logits)
    }

    /// Feed `tokens` (checked ids, room checked) at the next positions,
    /// each batched role once over all of them (the prefill's kernels when
    /// `chunked`, the decode step's otherwise); then, if
    /// `head`, the last token's logits and greedy choice, hashed into the
    /// digest.
    fn forward(&mut self, tokens: &[u32], head: bool, chunked: bool) -> Result<(), EngineError> {
        let w = Arc::clone(&self.weights);
        let c = &w.config;
        let (n, p) = (tokens.len(), self.pos);
        let (dim, kvd, hd) = (c.dim, c.kv_dim(), c.head_dim());
        let Engine {
            kernels,
            prefill_kernels,
            fused,
            prefill_fused,
            panels,
            ops,
            rope_table,
            exec,
            state: s,
            clock,
            ..
        } = self;
        let (k, fused) = if chunked {
            (&*prefill_kernels, prefill_fused.as_ref())
        } else {
            (&*kernels, fused.as_ref())
        };
        let (one, ops) = (&ops[0], &ops[n - 1]);
        let call = &mut Call {
            exec,
            clock,
            weights: &w,
            ops,
        };
        let (x, h, q, att, proj) = (
            &mut s.x[..n * dim],
            &mut s.h[..n * dim],
            &mut s.q[..n * dim],
            &mut s.att[..n * dim],
            &mut s.proj[..n * dim],
        );
        let hq = &mut s.hq[..n * q8_bytes(dim)];
        let (gate, up) = (&mut s.gate[..n * c.hidden], &mut s.up[..n * c.hidden]);
        let mq = &mut s.mq[..n * q8_bytes(c.hidden)];

        // A block's matrix product: `q8_0.matmul` over the call's rows
        // (the step's site or the chunk's).
        macro_rules! product {
            ($role:ident, $layer:expr, $x:expr, $y:expr) => {
                k.$role.matmul(call, panels, $layer, $x, $y)?
            };
        }
        k.token_embd.embed(call, tokens, x)?;
        let shape = attention_shape(c, n, p + n);
        let layout = Layout {
            q_head: hd,
            q_row: dim,
            k_head: hd,
            k_pos: kvd,
            v_head: hd,
            v_pos: kvd,
            o_head: hd,
            o_row: dim,
        };
        for l in 0..c.layers {
            let slot = p * kvd..(p + n) * kvd;
            let seen = ..(p + n) * kvd;
            // After the first layer, the fused kernel that ended the layer
            // before has left this layer's attention norm in `h`.
            if l == 0 || fused.is_none() {
                k.attn_norm.norm(call, l, x, h)?;
            }
            k.attn_norm_q8.quantize(call, h, hq)?;
            product!(attn_q, l, hq, q);
            // The chunk's keys and values: straight into a binary32
            // cache's rows; through binary32 rows rounded once into a
            // binary16 cache, after RoPE.
            let (keys, values) = match s.cache.layer(l) {
                LayerCache::F32 { keys, values } => {
                    product!(attn_k, l, hq, &mut keys[slot.clone()]);
                    product!(attn_v, l, hq, &mut values[slot.clone()]);
                    let rope = RopeArgs::new(&ops.rope, q, &mut keys[slot], rope_table, p, 0..n);
                    k.rope.run(call, rope)?;
                    (KvSlice::F32(&keys[seen]), KvSlice::F32(&values[seen]))
                }
                LayerCache::F16 { keys, values } => {
                    let (kn, vn) = (&mut s.new_keys[..n * kvd], &mut s.new_values[..n * kvd]);
                    product!(attn_k, l, hq, kn);
                    product!(attn_v, l, hq, vn);
                    let rope = RopeArgs::new(&ops.rope, q, kn, rope_table, p, 0..n);
                    k.rope.run(call, rope)?;
                    to_f16(kn, &mut keys[slot.clone()]);
                    to_f16(vn, &mut values[slot]);
                    (KvSlice::F16(&keys[seen]), KvSlice::F16(&values[seen]))
                }
            };
            let attn = AttentionArgs::new(&shape, &layout, q, keys, values, att);
            k.attention.run(call, attn)?;
            k.attention_q8.quantize(call, att, hq)?;
            product!(attn_output, l, hq, proj);
            match fused {
                Some(f) => f.run(call, (x, proj), (k.ffn_norm.tensor, l), h)?,
                None => {
                    let residual = AddArgs::new(&ops.add, x, proj, 0..n * dim);
                    k.attn_residual.run(call, residual)?;
                    k.ffn_norm.norm(call, l, x, h)?;
                }
            }
            k.ffn_norm_q8.quantize(call, h, hq)?;
            product!(ffn_gate, l, hq, gate);
            product!(ffn_up, l, hq, up);
            let silu = SiluMulArgs::in_place(&ops.silu, gate, up, 0..n * c.hidden);
            k.ffn_silu_mul.run(call, silu)?;
            k.ffn_silu_mul_q8.quantize(call, gate, mq)?;
            product!(ffn_down, l, mq, proj);
            match fused {
                // The next layer's attention norm, fused with the residual.
                Some(f) if l + 1 < c.layers => {
                    f.run(call, (x, proj), (k.attn_norm.tensor, l + 1), h)?
                }
                _ => {
                    let residual = AddArgs::new(&ops.add, x, proj, 0..n * dim);
                    k.ffn_residual.run(call, residual)?;
                }
            }
        }
        self.pos += n;
        if !head {
            return Ok(());
        }
        // The head, for the last token only, with the one-token kernels.
        call.ops = one;
        let last = &x[(n - 1) * dim..];
        let (h, hq) = (&mut h[..dim], &mut hq[..q8_bytes(dim)]);
        let k = &*kernels;
        k.output_norm.norm(call, 0, last, h)?;
        k.output_norm_q8.quantize(call, h, hq)?;
        k.output.matmul(call, panels, 0, hq, &mut s.logits)?;
        let argmax = ArgmaxArgs::new(&one.argmax, &s.logits, &mut s.next);
        k.argmax.run(call, argmax)?;
        digest_logits(&mut self.digest, &s.logits);
        Ok(())
    }

    /// Time every kernel call from now on (or stop), from zero.
    pub fn set_profiling(&mut self, on: bool) {
        self.clock.on = on;
        self.clock.time = vec![Duration::ZERO; self.labels.len()];
        self.clock.calls = vec![0; self.labels.len()];
    }

    /// Per site, in plan order (the decode sites, then the prefill's):
    /// its name, calls and time spent since profiling was turned on (empty
    /// when it is off).
    pub fn profile(&self) -> Vec<(&'static str, u64, Duration)> {
        if !self.clock.on {
            return Vec::new();
        }
        self.labels
            .iter()
            .zip(self.clock.calls.iter().zip(&self.clock.time))
            .map(|(name, (calls, time))| (*name, *calls, *time))
            .collect()
    }

    /// The greedy choice after the last token that went through the head
    /// (the plan's argmax kernel: the first index of the largest logit).
    pub fn argmax(&self) -> u32 {
        self.state.next
    }
}

/// Time per site, when asked for ([`Engine::set_profiling`]).
#[derive(Debug, Default)]
struct Clock {
    on: bool,
    time: Vec<Duration>,
    calls: Vec<u64>,
    /// Every call's slot, in order (for the tests of the step's order).
    #[cfg(test)]
    trace: Vec<usize>,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use weft_kernel::{Family, Host};
    use weft_plan::{CacheLocation, EmitMode, Options, Planner};

    use super::{
        catalogue, choose_prefill_chunk, compile_plan, matmul, plan_labels, prefill_chunks, sites,
        Engine, LayerCache, Panels, Slot, KERNEL_FIELDS, PREFILL_CHUNKS, PREFILL_NAMES, PRODUCTS,
        ROLES, SITES, SITE_NAMES,
    };
    use crate::weights::BLOCK;
    use crate::{synthetic, Config, KvCache};

    /// A small model whose extents all differ (dim 128, kv_dim 64, hidden
    /// 320, vocab 400), so no two differently shaped matrices look alike.
    fn small() -> Config {
        Config {
            dim: 128,
            hidden: 320,
            layers: 3,
            heads: 4,
            kv_heads: 2,
            vocab: 400,
            rms_eps: 1e-5,
            rope_base: 10_000.0,
            rope_dims: 32,
            max_seq: 8,
            kv: KvCache::F16,
        }
    }

    /// A one-thread engine over `c`'s synthetic weights, arms only, no race.
    fn arm_engine(c: &Config) -> Engine {
        let options = Options {
            mode: EmitMode::Off,
            cache: CacheLocation::InMemory,
            racing: false,
            ..Options::default()
        };
        let w = Arc::new(synthetic::weights(c));
        Engine::new(w, options, 1, &mut |_, _| {}).expect("the plan compiles")
    }

    #[test]
    fn chunk_lengths_are_those_the_cache_holds_or_else_the_whole_cache() {
        let at = |max_seq| prefill_chunks(&Config { max_seq, ..small() });
        assert_eq!(at(8), [8]);
        assert_eq!(at(31), [31]);
        assert_eq!(at(200), [32, 64, 128]);
        assert_eq!(at(8192), PREFILL_CHUNKS);
    }

    /// The planner weighs every length the cache holds, takes the first
    /// with the fewest estimated cycles per token, and the plan's prefill
    /// sites are compiled at it.
    #[test]
    fn the_plan_is_compiled_for_the_chunk_with_the_fewest_estimated_cycles_a_token() {
        let c = Config {
            max_seq: 200,
            ..small()
        };
        let options = || Options {
            cache: CacheLocation::InMemory,
            racing: false,
            ..Options::default()
        };
        let mut planner =
            Planner::for_host(catalogue().expect("catalogue"), Host::detect(), options());
        let choice = choose_prefill_chunk(&mut planner, &c).expect("choice");
        let lengths: Vec<usize> = choice.per_token.iter().map(|p| p.0).collect();
        assert_eq!(lengths, prefill_chunks(&c));
        let cycles: Vec<f64> = choice
            .per_token
            .iter()
            .map(|p| p.1.expect("every length priced"))
            .collect();
        let least = cycles.iter().copied().fold(f64::INFINITY, f64::min);
        let first = cycles.iter().position(|&x| x == least).expect("a least");
        assert_eq!(choice.chunk, lengths[first], "{choice}");
        let plan = compile_plan(&c, options(), &mut |_, _| {}).expect("plan");
        assert_eq!(plan.chunk, choice);
        let batched = ROLES.iter().filter(|r| r.batched()).count();
        let at_rows = |site: &weft_plan::CompiledSite, n: u64| {
            let g = &site.geometry;
            let rows = ["batch", "rows", "lq"].iter().find_map(|k| g.get(k));
            let len = g.get("len");
            assert!(
                rows == Some(n) || len.is_some_and(|l| l % n == 0),
                "{}: {g:?}",
                site.label
            );
        };
        let sites = plan.plan.sites();
        for site in &sites[SITES..SITES + batched] {
            at_rows(site, choice.chunk as u64);
        }
        // Then the regions' members: the step's at one token, the chunk's.
        let regions = plan.plan.regions();
        assert_eq!(regions.len(), 2);
        for (region, n) in regions.iter().zip([1, choice.chunk as u64]) {
            for &i in region.chain.iter().chain([&region.fused]) {
                at_rows(&sites[i], n);
            }
        }
        let labels: Vec<&str> = sites.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, plan_labels(), "the clock's labels are the plan's");
    }

    /// The slots a prompt chunk or a step calls for every layer: each
    /// block role (`index` maps a role to its site), except that where the
    /// region chose the fused site (`fused`), it replaces each residual add
    /// and the norm after it (the next layer's attention norm, for the FFN
    /// residual of all but the last layer).
    fn block_trace(
        index: impl Fn(usize) -> usize,
        fused: Option<usize>,
        layers: usize,
    ) -> Vec<usize> {
        let block: Vec<usize> = (0..SITES).filter(|&i| ROLES[i].per_layer()).collect();
        let mut want = Vec::new();
        for l in 0..layers {
            for &role in &block {
                let slot = match (fused, role) {
                    (Some(_), r) if r == Slot::attn_norm as usize && l > 0 => None,
                    (Some(_), r) if r == Slot::ffn_norm as usize => None,
                    (Some(f), r) if r == Slot::attn_residual as usize => Some(f),
                    (Some(f), r) if r == Slot::ffn_residual as usize && l + 1 < layers => Some(f),
                    _ => Some(index(role)),
                };
                want.extend(slot);
            }
        }
        want
    }

    /// A binary16 cache holds each key and value rounded once from the
    /// binary32 the projections and RoPE computed: layer 0's, which depend
    /// only on the embeddings, are exactly the binary16 roundings of a
    /// binary32 cache's, chunked and a token at a time; and the logits
    /// differ (attention reads the rounded cache).
    #[test]
    fn a_binary16_cache_holds_the_binary32_keys_and_values_rounded_once() {
        let tokens = [3, 1, 4, 1, 5, 9, 2];
        let c16 = small();
        let c32 = Config {
            kv: KvCache::F32,
            ..small()
        };
        for chunk in [1, 3] {
            let (mut e16, mut e32) = (arm_engine(&c16), arm_engine(&c32));
            for e in [&mut e16, &mut e32] {
                e.set_prefill_chunk(chunk).expect("chunk");
                e.prefill(&tokens).expect("prompt");
            }
            let n = tokens.len() * c16.kv_dim();
            let (
                LayerCache::F16 {
                    keys: k16,
                    values: v16,
                },
                LayerCache::F32 { keys, values },
            ) = (e16.state.cache.layer(0), e32.state.cache.layer(0))
            else {
                panic!("the caches are not of their configs' types");
            };
            let rounded = |x: &[f32]| -> Vec<u16> {
                x.iter()
                    .map(|&v| half::f16::from_f32(v).to_bits())
                    .collect()
            };
            assert_eq!(k16[..n], rounded(&keys[..n])[..], "keys, chunk {chunk}");
            assert_eq!(v16[..n], rounded(&values[..n])[..], "values, chunk {chunk}");
            assert!(
                keys[..n].iter().any(|&v| v != 0.0),
                "empty keys prove nothing"
            );
            assert_ne!(e16.digest(), e32.digest(), "chunk {chunk}");
        }
    }

    #[test]
    fn every_site_carries_its_label_in_plan_order() {
        let sites = sites(&small(), 8).expect("sites");
        let labels: Vec<&str> = sites.iter().map(|s| s.label()).collect();
        let prefill = (0..SITES).filter(|&i| ROLES[i].batched());
        let want: Vec<&str> = SITE_NAMES
            .into_iter()
            .chain(prefill.map(|i| PREFILL_NAMES[i]))
            .collect();
        assert_eq!(labels, want);
        assert_eq!(ROLES.map(|r| r.label), SITE_NAMES);
        let mut unique = labels.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), labels.len(), "two sites share a label");
    }

    /// A table line whose label moved away from its kernel (the step's
    /// `k.attn_k` labelled `blk.*.attn_v`, reading `attn_v.weight`) fails
    /// here: the field is the label without `blk.*.`, dots as underscores.
    #[test]
    fn each_kernel_is_named_after_its_label() {
        for (field, label) in KERNEL_FIELDS.iter().zip(SITE_NAMES) {
            let want = label.strip_prefix(BLOCK).unwrap_or(label).replace('.', "_");
            assert_eq!(*field, want, "kernel `{field}` is labelled {label}");
        }
    }

    /// Each matrix product's site is compiled for the shape of the tensor
    /// its role names: a line giving `attn_k` the extents of `attn_q`, or
    /// `ffn_down` those of `ffn_up` (its transpose), fails here. The
    /// shapes come from the synthetic weights, built with their own
    /// explicit extents.
    #[test]
    fn every_matrix_site_is_shaped_like_the_tensor_its_role_names() {
        let c = small();
        let w = synthetic::weights(&c);
        let sites = sites(&c, 8).expect("sites");
        let mut matrices = 0;
        for (site, role) in sites.iter().zip(ROLES) {
            if site.family != Family(weft_q8::FAMILY) && site.family != Family(matmul::FAMILY) {
                continue;
            }
            matrices += 1;
            let tensor = role.tensor.expect("a matrix product reads a tensor");
            let m = w
                .matrix(tensor, 0)
                .unwrap_or_else(|| panic!("{}: no tensor {tensor}", role.label));
            let geometry = (site.geometry.get("rows"), site.geometry.get("cols"));
            let shape = (Some(m.rows() as u64), Some(m.cols() as u64));
            assert_eq!(geometry, shape, "{}: site against {tensor}", role.label);
        }
        assert_eq!(matrices, 8, "seven per block and the output");
    }

    /// The packed weights are one arena in the order a step reads them
    /// (every block's products in role order, then the head), each matrix
    /// exactly `q8_0.matmul`'s packing of its canonical bytes.
    #[test]
    fn panels_hold_every_product_packed_in_the_order_a_step_reads_them() {
        let c = small();
        let w = synthetic::weights(&c);
        let panels = Panels::new(&w).expect("panels");
        let mut order = Vec::new();
        for layer in 0..c.layers {
            order.extend(
                (0..SITES)
                    .filter(|&r| ROLES[r].per_layer())
                    .map(|r| (layer, r)),
            );
        }
        order.extend(
            (0..SITES)
                .filter(|&r| !ROLES[r].per_layer())
                .map(|r| (0, r)),
        );
        let mut end = 0;
        let mut seen = 0;
        for (layer, slot) in order {
            let panel = &panels.panels[layer][slot];
            let Some(tensor) = ROLES[slot].tensor.filter(|_| PRODUCTS[slot]) else {
                assert!(panel.is_none(), "{} is not a product", ROLES[slot].label);
                continue;
            };
            let p = panel.as_ref().expect("a product's panel");
            assert!(
                p.range.start >= end,
                "{} of block {layer} out of order",
                ROLES[slot].label
            );
            end = p.range.end;
            let m = w.matrix(tensor, layer).expect("tensor");
            let want =
                weft_q8::matmul::Q8PanelWeights::from_canonical(m.bytes(), m.rows(), m.cols())
                    .expect("packs");
            assert_eq!(
                &*panels.arena.view(p.range.clone()),
                want.bytes(),
                "{tensor} {layer}"
            );
            seen += 1;
        }
        assert_eq!(seen, 7 * c.layers + 1, "seven per block and the head");
        assert_eq!(end, panels.arena.len(), "the head is last");
    }

    /// Every role with weights names a tensor the weights hold, in every
    /// block, and no role without weights claims one.
    #[test]
    fn every_weighted_role_names_a_tensor_the_weights_hold() {
        let c = small();
        let w = synthetic::weights(&c);
        for role in ROLES {
            let Some(tensor) = role.tensor else { continue };
            assert_eq!(tensor, format!("{}.weight", role.label));
            for l in 0..c.layers {
                let held = w.matrix(tensor, l).is_some() || w.vector(tensor, l).is_some();
                assert!(held, "{}: no {tensor} in block {l}", role.label);
            }
        }
        let weighted = ROLES.iter().filter(|r| r.tensor.is_some()).count();
        assert_eq!(weighted, 12, "embeddings, 3 norms, 8 matrices");
    }

    /// An activation quantiser is as wide as the matrix product after it.
    #[test]
    fn every_quantiser_is_as_wide_as_the_matrix_it_feeds() {
        let sites = sites(&small(), 8).expect("sites");
        for (i, site) in sites.iter().enumerate() {
            if site.family != Family(weft_q8::quantize::FAMILY) {
                continue;
            }
            let next = sites[i..]
                .iter()
                .find(|s| {
                    s.family == Family(weft_q8::FAMILY)
                        || s.family == Family(weft_q8::matmul::FAMILY)
                })
                .expect("a matrix product follows");
            assert_eq!(
                site.geometry.get("cols"),
                next.geometry.get("cols"),
                "{} feeds {}",
                site.label(),
                next.label()
            );
        }
    }

    /// One step calls the embedding, then every block's sites once per
    /// layer, then the head, each in plan order. Two kernels of one type
    /// and shape swapped in the step (the residual adds, the quantisers,
    /// `attn_k` and `attn_v`) compute the same numbers, so the reference
    /// comparison cannot see it; the order of calls does. So does a swap
    /// of two lines of the table, which would list sites out of the order
    /// they run.
    #[test]
    fn one_step_calls_every_site_in_plan_order_once_per_layer() {
        let c = small();
        let mut e = arm_engine(&c);
        e.step(7).expect("step");
        let block: Vec<usize> = (0..ROLES.len()).filter(|&i| ROLES[i].per_layer()).collect();
        let (first, last) = (block[0], block[block.len() - 1]);
        assert_eq!(last - first + 1, block.len(), "block sites are contiguous");
        let mut want: Vec<usize> = (0..first).collect();
        want.extend(block_trace(
            |i| i,
            e.fused.as_ref().map(|f| f.slot),
            c.layers,
        ));
        want.extend(last + 1..ROLES.len());
        let labels = plan_labels();
        let name = |v: &[usize]| v.iter().map(|&i| labels[i]).collect::<Vec<_>>();
        assert_eq!(name(&e.clock.trace), name(&want));
    }

    /// A prompt of two chunks runs the embedding and every block's role
    /// once per chunk with the prefill sites (batched at the chunk's
    /// length), and the head once, after the last chunk, with the decode
    /// sites; every prefill site is compiled for the plan's chunk.
    #[test]
    fn a_two_chunk_prompt_runs_the_prefill_sites_per_chunk_and_the_head_once() {
        let c = Config {
            max_seq: 16,
            ..small()
        };
        let mut e = arm_engine(&c);
        let batch = e.chunk_choice().chunk;
        assert_eq!(batch, 16, "the cache, shorter than every chunk length");
        let batched = ROLES.iter().filter(|r| r.batched()).count();
        for site in &e.plan().sites()[SITES..SITES + batched] {
            let g = &site.geometry;
            let rows = ["batch", "rows", "lq"].iter().find_map(|k| g.get(k));
            let len = g.get("len");
            assert!(
                rows == Some(batch as u64) || len.is_some_and(|l| l % batch as u64 == 0),
                "{}: {g:?}",
                site.label
            );
        }
        e.set_prefill_chunk(8).expect("chunk");
        e.prefill(&[3, 1, 4, 1, 5, 9, 2, 6, 5, 3]).expect("prefill");
        let index = |i: usize| SITES + (0..i).filter(|&j| ROLES[j].batched()).count();
        let block: Vec<usize> = (0..SITES).filter(|&i| ROLES[i].per_layer()).collect();
        let fused = e.prefill_fused.as_ref().map(|f| f.slot);
        let mut want = Vec::new();
        for _ in 0..2 {
            want.push(index(0));
            want.extend(block_trace(index, fused, c.layers));
        }
        want.extend(block[block.len() - 1] + 1..SITES);
        assert_eq!(e.clock.trace, want);
    }
}
