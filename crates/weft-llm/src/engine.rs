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
//! The K/V cache is f32, `[position][kv_heads · head_dim]` per layer, so the
//! K and V projections write straight into the row for `p` and attention
//! reads it with a position stride of `kv_dim`.
//!
//! Numerics: the plan's contracts fix every rounding, and twins compute
//! their arms' bits, so the logits of a run do not depend on
//! `WEFT_NATIVE_EMIT` (tested through [`Engine::digest`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use weft_attention::{AttentionArgs, AttentionShape, KvSlice, KvType, Layout};
use weft_kernel::{Family, KernelArgs, Refusal, Residency, Site};
use weft_loopnest::{
    Add, AddArgs, Argmax, ArgmaxArgs, EmbedArgs, EmbedQ8_0, NestOp, RmsNorm, RmsNormArgs, Rope,
    RopeArgs, RopeTable, SiluMul, SiluMulArgs, Table,
};
use weft_plan::{Catalogue, CompiledPlan, Executor, Options, PlanError, Planner, SiteKernel};
use weft_q8::quantize::{self, Q8QuantizeArgs};
use weft_q8::{Q8MatvecArgs, BLOCK_BYTES, BLOCK_LEN};

use crate::weights::{Q8Matrix, Weights};
use crate::Config;

/// Why an engine could not be built or stepped.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The planner refused the model's plan.
    #[error("{}: {source}", source.name())]
    Plan {
        /// The planner's error.
        #[from]
        source: PlanError,
    },
    /// A kernel refused its shape or its buffers (a bug in the engine's
    /// bookkeeping or an impossible configuration, never a fault).
    #[error("{}: at {site}: {refusal}", refusal.name())]
    Refused {
        /// The site.
        site: &'static str,
        /// The refusal.
        refusal: Refusal,
    },
    /// The KV cache is full.
    #[error("context-full: position {pos} is past the cache's {max_seq} positions")]
    ContextFull {
        /// The position asked for.
        pos: usize,
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
}

impl EngineError {
    /// A stable name for each variant (the planner's or the kernel's name
    /// for theirs).
    pub fn name(&self) -> &'static str {
        match self {
            EngineError::Plan { source } => source.name(),
            EngineError::Refused { refusal, .. } => refusal.name(),
            EngineError::ContextFull { .. } => "context-full",
            EngineError::BadToken { .. } => "bad-token",
        }
    }
}

/// The roles of the plan's sites, in plan order.
pub const SITE_NAMES: [&str; 23] = [
    "token_embd",
    "blk.*.attn_norm",
    "blk.*.attn_norm.q8",
    "blk.*.attn_q",
    "blk.*.attn_k",
    "blk.*.attn_v",
    "blk.*.rope",
    "blk.*.attention",
    "blk.*.attention.q8",
    "blk.*.attn_output",
    "blk.*.attn_residual",
    "blk.*.ffn_norm",
    "blk.*.ffn_norm.q8",
    "blk.*.ffn_gate",
    "blk.*.ffn_up",
    "blk.*.ffn_silu_mul",
    "blk.*.ffn_silu_mul.q8",
    "blk.*.ffn_down",
    "blk.*.ffn_residual",
    "output_norm",
    "output_norm.q8",
    "output",
    "argmax",
];

const EMBED: usize = 0;
const ARGMAX: usize = 22;
const ARGMAX_NAME: &str = SITE_NAMES[ARGMAX];

/// Keys the attention site is priced at (its body serves every `lk`).
const ATTENTION_PRICE_LK: usize = 256;

/// The shapes of the model's operations.
#[derive(Clone, Debug)]
struct Ops {
    embed: EmbedQ8_0,
    norm: RmsNorm,
    rope: Rope,
    silu: SiluMul,
    add: Add,
    argmax: Argmax,
}

impl Ops {
    fn new(c: &Config) -> Result<Ops, (&'static str, Refusal)> {
        Ok(Ops {
            embed: EmbedQ8_0::new(c.vocab, c.dim, 1).map_err(|r| ("token_embd", r))?,
            norm: RmsNorm::new(c.dim, 1).map_err(|r| ("blk.*.attn_norm", r))?,
            rope: Rope::new(c.heads, c.kv_heads, c.head_dim(), c.rope_dims, 1)
                .map_err(|r| ("blk.*.rope", r))?,
            silu: SiluMul::new(c.hidden).map_err(|r| ("blk.*.ffn_silu_mul", r))?,
            add: Add::new(c.dim).map_err(|r| ("blk.*.attn_residual", r))?,
            argmax: Argmax::new(c.vocab).map_err(|r| (ARGMAX_NAME, r))?,
        })
    }
}

/// The attention shape of a decode step with `lk` keys.
fn attention_shape(c: &Config, lk: usize) -> AttentionShape {
    AttentionShape {
        d: c.head_dim(),
        lq: 1,
        lk,
        heads: c.heads,
        kv_heads: c.kv_heads,
        q_offset: lk.saturating_sub(1),
        causal: true,
        scale: 1.0 / (c.head_dim() as f32).sqrt(),
        kv: KvType::F32,
    }
}

/// Bytes of Q8_0 weights one decode step reads: every layer's seven
/// matrices and the output projection.
pub fn weight_bytes(c: &Config) -> u64 {
    let (d, kvd, f) = (c.dim as u64, c.kv_dim() as u64, c.hidden as u64);
    let per_layer = 2 * d * d + 2 * kvd * d + 3 * f * d;
    let weights = c.layers as u64 * per_layer + c.vocab as u64 * d;
    weights / BLOCK_LEN as u64 * BLOCK_BYTES as u64
}

/// Where the matrix-vector sites find their weights on `host`: streamed
/// from memory when one step's weights do not fit in the last-level cache
/// (each matrix is then evicted before the next step comes back to it),
/// cached otherwise. A host that does not say its last-level cache (or
/// says 0) is taken to have [`weft_host::Caches::ASSUMED_LAST_LEVEL`].
pub fn weight_residency(c: &Config, host: &weft_host::Host) -> Residency {
    if weight_bytes(c) > u64::from(host.caches.last_level_or_assumed()) {
        Residency::Streamed
    } else {
        Residency::Cached
    }
}

/// The sites of `c`'s plan on this host, named by [`SITE_NAMES`].
pub fn sites(c: &Config) -> Result<Vec<Site>, EngineError> {
    let ops = Ops::new(c).map_err(|(site, refusal)| EngineError::Refused { site, refusal })?;
    fn nest<O: NestOp>(op: &O) -> Site {
        Site::new(Family(O::FAMILY), op.geometry())
    }
    let weights = weight_residency(c, weft_host::host());
    let matvec = |rows: usize, cols: usize| {
        Site::new(
            Family(weft_q8::FAMILY),
            weft_q8::geometry(rows as u64, cols as u64, 1),
        )
        .with_residency(weights)
    };
    let quant =
        |cols: usize| Site::new(Family(quantize::FAMILY), quantize::geometry(cols as u64, 1));
    let lk = ATTENTION_PRICE_LK.min(c.max_seq).max(1);
    let (d, kvd, f) = (c.dim, c.kv_dim(), c.hidden);
    Ok(vec![
        nest(&ops.embed),
        nest(&ops.norm),
        quant(d),
        matvec(d, d),
        matvec(kvd, d),
        matvec(kvd, d),
        nest(&ops.rope),
        Site::new(
            Family(weft_attention::FAMILY),
            attention_shape(c, lk).geometry(),
        ),
        quant(d),
        matvec(d, d),
        nest(&ops.add),
        nest(&ops.norm),
        quant(d),
        matvec(f, d),
        matvec(f, d),
        nest(&ops.silu),
        quant(f),
        matvec(d, f),
        nest(&ops.add),
        nest(&ops.norm),
        quant(d),
        matvec(c.vocab, d),
        nest(&ops.argmax),
    ])
}

/// The catalogue the model's plan draws from: the Q8_0 matrix-vector and
/// activation-quantiser families, fused attention, the generated kernels.
pub fn catalogue() -> Result<Catalogue, PlanError> {
    let mut catalogue = Catalogue::new();
    catalogue.register(weft_q8::entry())?;
    catalogue.register(quantize::entry())?;
    catalogue.register(weft_attention::entry())?;
    for e in weft_loopnest::entries() {
        catalogue.register(e)?;
    }
    Ok(catalogue)
}

/// Compile the plan of a model shaped `c`: [`sites`] over [`catalogue`],
/// priced by weft-cost for this host, with the planner's `options`;
/// `progress(done, total)` follows the compile. The cache is saved after.
pub fn compile_plan(
    c: &Config,
    options: Options,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<CompiledPlan, EngineError> {
    let mut planner = Planner::for_host(catalogue()?, weft_host::Host::detect(), options);
    let plan = planner.compile_with_progress(&sites(c)?, progress)?;
    // A cache that cannot be written only costs the next run its time.
    let _ = planner.save_cache();
    Ok(plan)
}

/// The typed kernels of the plan's sites.
struct Kernels {
    embed: SiteKernel<EmbedArgs>,
    attn_norm: SiteKernel<RmsNormArgs>,
    attn_q8: SiteKernel<Q8QuantizeArgs>,
    wq: SiteKernel<Q8MatvecArgs>,
    wk: SiteKernel<Q8MatvecArgs>,
    wv: SiteKernel<Q8MatvecArgs>,
    rope: SiteKernel<RopeArgs>,
    attention: SiteKernel<AttentionArgs>,
    att_q8: SiteKernel<Q8QuantizeArgs>,
    wo: SiteKernel<Q8MatvecArgs>,
    attn_residual: SiteKernel<AddArgs>,
    ffn_norm: SiteKernel<RmsNormArgs>,
    ffn_q8: SiteKernel<Q8QuantizeArgs>,
    gate: SiteKernel<Q8MatvecArgs>,
    up: SiteKernel<Q8MatvecArgs>,
    silu: SiteKernel<SiluMulArgs>,
    silu_q8: SiteKernel<Q8QuantizeArgs>,
    down: SiteKernel<Q8MatvecArgs>,
    ffn_residual: SiteKernel<AddArgs>,
    out_norm: SiteKernel<RmsNormArgs>,
    out_q8: SiteKernel<Q8QuantizeArgs>,
    output: SiteKernel<Q8MatvecArgs>,
    argmax: SiteKernel<ArgmaxArgs>,
}

impl Kernels {
    fn new(plan: &CompiledPlan) -> Result<Kernels, PlanError> {
        let mut i = 0usize;
        let mut next = || {
            i += 1;
            i - 1
        };
        Ok(Kernels {
            embed: plan.kernel(next())?,
            attn_norm: plan.kernel(next())?,
            attn_q8: plan.kernel(next())?,
            wq: plan.kernel(next())?,
            wk: plan.kernel(next())?,
            wv: plan.kernel(next())?,
            rope: plan.kernel(next())?,
            attention: plan.kernel(next())?,
            att_q8: plan.kernel(next())?,
            wo: plan.kernel(next())?,
            attn_residual: plan.kernel(next())?,
            ffn_norm: plan.kernel(next())?,
            ffn_q8: plan.kernel(next())?,
            gate: plan.kernel(next())?,
            up: plan.kernel(next())?,
            silu: plan.kernel(next())?,
            silu_q8: plan.kernel(next())?,
            down: plan.kernel(next())?,
            ffn_residual: plan.kernel(next())?,
            out_norm: plan.kernel(next())?,
            out_q8: plan.kernel(next())?,
            output: plan.kernel(next())?,
            argmax: plan.kernel(next())?,
        })
    }
}

/// The activations of one step and the KV cache.
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
    /// Per layer, `max_seq × kv_dim` keys and values.
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    next: u32,
}

impl State {
    fn new(c: &Config) -> State {
        let q8 = |n: usize| vec![0u8; n / BLOCK_LEN * BLOCK_BYTES];
        let cache = || vec![vec![0.0f32; c.max_seq * c.kv_dim()]; c.layers];
        State {
            x: vec![0.0; c.dim],
            h: vec![0.0; c.dim],
            hq: q8(c.dim),
            q: vec![0.0; c.dim],
            att: vec![0.0; c.dim],
            proj: vec![0.0; c.dim],
            gate: vec![0.0; c.hidden],
            up: vec![0.0; c.hidden],
            mq: q8(c.hidden),
            logits: vec![0.0; c.vocab],
            keys: cache(),
            values: cache(),
            next: 0,
        }
    }
}

/// A model compiled to a plan, with its KV cache: feed tokens, get logits.
pub struct Engine {
    weights: Arc<Weights>,
    plan: CompiledPlan,
    kernels: Kernels,
    ops: Ops,
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
            .finish_non_exhaustive()
    }
}

/// A kernel call's argument constructor failed: name the site.
fn at(site: &'static str) -> impl Fn(Refusal) -> EngineError {
    move |refusal| EngineError::Refused { site, refusal }
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
        let ops = Ops::new(c).map_err(|(site, refusal)| EngineError::Refused { site, refusal })?;
        let rope_table = RopeTable::new(f64::from(c.rope_base), c.rope_dims, c.max_seq)
            .map_err(at("blk.*.rope"))?;
        let plan = compile_plan(c, options, progress)?;
        let kernels = Kernels::new(&plan)?;
        Ok(Engine {
            state: State::new(c),
            weights,
            plan,
            kernels,
            ops,
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

    /// SHA-256 of the bits of every logit of every step so far, in hex.
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

    /// Feed `token` at the next position; returns its logits.
    pub fn step(&mut self, token: u32) -> Result<&[f32], EngineError> {
        let c = self.weights.config.clone();
        if token as usize >= c.vocab {
            return Err(EngineError::BadToken {
                id: token,
                vocab: c.vocab,
            });
        }
        if self.pos >= c.max_seq {
            return Err(EngineError::ContextFull {
                pos: self.pos,
                max_seq: c.max_seq,
            });
        }
        let p = self.pos;
        let (kvd, hd) = (c.kv_dim(), c.head_dim());
        let w = Arc::clone(&self.weights);
        let Engine {
            kernels: k,
            ops,
            rope_table,
            exec,
            state: s,
            ..
        } = self;
        let ids = [token];
        let clock = &mut self.clock;
        let q8 = |v: &[f32], out: &mut [u8]| {
            let n = v.len();
            Q8QuantizeArgs::new(v, out, n, 1, 0..n / BLOCK_LEN)
        };
        let mv = |m: &Q8Matrix, x: &[u8], y: &mut [f32]| {
            Q8MatvecArgs::from_slices(m.bytes(), x, y, (m.rows(), m.cols(), 1), 0..m.rows())
        };
        let norm = |x: &[f32], w: &[f32], y: &mut [f32]| {
            RmsNormArgs::new(&ops.norm, x, w, y, c.rms_eps, 0..1)
        };

        let table = Table::Q8_0(w.embed.bytes());
        call(
            &k.embed,
            exec,
            clock,
            EMBED,
            EmbedArgs::new(&ops.embed, table, &ids, &mut s.x, 0..1),
        )?;
        let shape = attention_shape(&c, p + 1);
        let layout = Layout {
            q_head: hd,
            q_row: c.dim,
            k_head: hd,
            k_pos: kvd,
            v_head: hd,
            v_pos: kvd,
            o_head: hd,
            o_row: c.dim,
        };
        for (l, layer) in w.layers.iter().enumerate() {
            let slot = p * kvd..(p + 1) * kvd;
            let seen = ..(p + 1) * kvd;
            let (kc, vc) = (&mut s.keys[l], &mut s.values[l]);
            call(
                &k.attn_norm,
                exec,
                clock,
                1,
                norm(&s.x, &layer.attn_norm, &mut s.h),
            )?;
            call(&k.attn_q8, exec, clock, 2, q8(&s.h, &mut s.hq))?;
            call(&k.wq, exec, clock, 3, mv(&layer.wq, &s.hq, &mut s.q))?;
            call(
                &k.wk,
                exec,
                clock,
                4,
                mv(&layer.wk, &s.hq, &mut kc[slot.clone()]),
            )?;
            call(
                &k.wv,
                exec,
                clock,
                5,
                mv(&layer.wv, &s.hq, &mut vc[slot.clone()]),
            )?;
            let rope = RopeArgs::new(&ops.rope, &mut s.q, &mut kc[slot], rope_table, p, 0..1);
            call(&k.rope, exec, clock, 6, rope)?;
            let (keys, values) = (KvSlice::F32(&kc[seen]), KvSlice::F32(&vc[seen]));
            let att = AttentionArgs::new(&shape, &layout, &s.q, keys, values, &mut s.att);
            call(&k.attention, exec, clock, 7, att)?;
            call(&k.att_q8, exec, clock, 8, q8(&s.att, &mut s.hq))?;
            call(&k.wo, exec, clock, 9, mv(&layer.wo, &s.hq, &mut s.proj))?;
            let residual = AddArgs::new(&ops.add, &mut s.x, &s.proj, 0..c.dim);
            call(&k.attn_residual, exec, clock, 10, residual)?;

            call(
                &k.ffn_norm,
                exec,
                clock,
                11,
                norm(&s.x, &layer.ffn_norm, &mut s.h),
            )?;
            call(&k.ffn_q8, exec, clock, 12, q8(&s.h, &mut s.hq))?;
            call(
                &k.gate,
                exec,
                clock,
                13,
                mv(&layer.w_gate, &s.hq, &mut s.gate),
            )?;
            call(&k.up, exec, clock, 14, mv(&layer.w_up, &s.hq, &mut s.up))?;
            let silu = SiluMulArgs::in_place(&ops.silu, &mut s.gate, &s.up, 0..c.hidden);
            call(&k.silu, exec, clock, 15, silu)?;
            call(&k.silu_q8, exec, clock, 16, q8(&s.gate, &mut s.mq))?;
            call(
                &k.down,
                exec,
                clock,
                17,
                mv(&layer.w_down, &s.mq, &mut s.proj),
            )?;
            let residual = AddArgs::new(&ops.add, &mut s.x, &s.proj, 0..c.dim);
            call(&k.ffn_residual, exec, clock, 18, residual)?;
        }
        call(
            &k.out_norm,
            exec,
            clock,
            19,
            norm(&s.x, &w.output_norm, &mut s.h),
        )?;
        call(&k.out_q8, exec, clock, 20, q8(&s.h, &mut s.hq))?;
        call(
            &k.output,
            exec,
            clock,
            21,
            mv(&w.output, &s.hq, &mut s.logits),
        )?;
        let argmax = ArgmaxArgs::new(&ops.argmax, &s.logits, &mut s.next);
        call(&k.argmax, exec, clock, ARGMAX, argmax)?;

        for v in &s.logits {
            self.digest.update(v.to_bits().to_le_bytes());
        }
        self.pos += 1;
        Ok(&self.state.logits)
    }

    /// Time every kernel call from now on (or stop), from zero.
    pub fn set_profiling(&mut self, on: bool) {
        self.clock = Clock {
            on,
            time: vec![Duration::ZERO; SITE_NAMES.len()],
            calls: vec![0; SITE_NAMES.len()],
        };
    }

    /// Per site: its name, calls and time spent since profiling was turned
    /// on (empty when it is off).
    pub fn profile(&self) -> Vec<(&'static str, u64, Duration)> {
        if !self.clock.on {
            return Vec::new();
        }
        (0..SITE_NAMES.len())
            .map(|i| (SITE_NAMES[i], self.clock.calls[i], self.clock.time[i]))
            .collect()
    }

    /// The greedy choice after the last step (the plan's argmax kernel:
    /// the first index of the largest logit).
    pub fn argmax(&self) -> u32 {
        self.state.next
    }
}

/// Run site `site`'s kernel on `args` (from the family's checked
/// constructor), timing it when the clock runs.
fn call<A: KernelArgs>(
    k: &SiteKernel<A>,
    exec: &Executor,
    clock: &mut Clock,
    site: usize,
    args: Result<A, Refusal>,
) -> Result<(), EngineError> {
    let args = args.map_err(|refusal| EngineError::Refused {
        site: SITE_NAMES[site],
        refusal,
    })?;
    let t0 = clock.on.then(Instant::now);
    // SAFETY: `args` came from the family's checked constructor over
    // buffers the caller borrowed for this statement, so they stay valid
    // and unaliased for the whole call: all `SiteKernel::run` asks.
    unsafe { k.run(exec, &args) };
    if let Some(t0) = t0 {
        clock.time[site] += t0.elapsed();
        clock.calls[site] += 1;
    }
    Ok(())
}

/// Time per site, when asked for ([`Engine::set_profiling`]).
#[derive(Debug, Default)]
struct Clock {
    on: bool,
    time: Vec<Duration>,
    calls: Vec<u64>,
}
