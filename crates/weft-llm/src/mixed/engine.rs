//! [`Engine`]: the forward pass with its matrix products planned.
//!
//! Every matrix stays in its GGUF format — Q5_0, Q4_K, Q6_K or Q8_0, as the
//! file has it — and is multiplied by a kernel of one compiled plan: one
//! site per distinct (family, rows, cols) among the model's matrices and
//! its tied head (`q5_0.matvec`, `q4_k.matvec`, `q6_k.matvec` from
//! weft-kquant over the file's bytes; `q8_0.matmul` for the Q8_0 ones,
//! packed into its 16-row panels when the engine is built — the tied
//! embedding rows are read back from those panels, so the head is held
//! once), one `q8_0.quantize` site per width for the
//! activations the Q5_0 and Q8_0 products take, and one `attention.fused`
//! site (binary16 keys and values; a sliding-window layer passes only its
//! window's keys). The planner validates every twin against its arm and
//! chooses by price, as for the Q8_0 [`crate::Engine`]; kernels run on the
//! plan's executor, products split by rows.
//!
//! Not yet planned (so this engine is not yet held to the Q8_0 engine's
//! invariant that every operation is a site): the Q8_K quantisation of
//! the K-quants' activations (weft-quant's reference quantiser, in Rust),
//! and the small operations between the kernels — norms, RoPE, the gated
//! activation, residuals — which are `super::advance`'s, shared with
//! the reference. The logits differ from the reference's by the products'
//! f32 fold orders and by attention: the reference models llama.cpp's
//! binary16 value accumulator, the `attention.fused` contract accumulates
//! in f32.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use weft_attention::{AttentionArgs, AttentionShape, KvSlice, KvType, Layout};
use weft_gguf::block::Format;
use weft_gguf::Gguf;
use weft_kernel::{Family, Site};
use weft_kquant::{quantize_activations, Activations, KMatvecArgs, KWeights};
use weft_plan::{Catalogue, CompiledPlan, Executor, Options, Planner};
use weft_q8::matmul::{self, Q8MatmulArgs};
use weft_q8::quantize::Q8QuantizeArgs;

use super::ops::weft_gguf_format;
use super::{prefill, step, Cache, Config, Kernels, Mat, Norms};
use crate::{EngineError, ModelError};

/// The label of the activation quantiser's site.
const QUANTIZE: &str = "blk.*.q8_0.quantize";

/// The label of whole steps in a profile.
const STEP: &str = "step";

/// The label of the attention site.
const ATTENTION: &str = "blk.*.attention";

/// Keys the attention site is priced at (its body serves every count).
const ATTENTION_PRICE_LK: usize = 256;

/// One decode step's attention: a query row per head, `lk` keys, the
/// query at the last position, scores multiplied by `scale` (1 where Q
/// comes scaled, [`super::Arch::scales_queries`]).
fn attention_shape(c: &Config, lk: usize, scale: f32) -> AttentionShape {
    AttentionShape {
        d: c.head_dim,
        lq: 1,
        lk,
        heads: c.heads,
        kv_heads: c.kv_heads,
        q_offset: lk - 1,
        causal: true,
        scale,
        kv: KvType::F16,
    }
}

/// A matrix's weights, in the file's bytes.
enum Weights {
    /// Q4_K, Q6_K or Q5_0, through weft-kquant.
    K(KWeights),
    /// Q8_0, packed into `q8_0.matmul`'s 16-row panels when the engine
    /// is built (its `q8_0.panel16` layout), through that family.
    Q8 {
        bytes: weft_arena::Bytes,
        rows: usize,
        cols: usize,
    },
}

/// A matrix and the plan's site that multiplies by it.
struct Product {
    site: usize,
    label: &'static str,
    weights: Weights,
}

/// The label of the K-quants' Q8_K activation quantiser (Rust, not yet a
/// site).
const QUANTIZE_Q8_K: &str = "blk.*.q8_k.quantize (Rust)";

/// Where a step's time goes, when asked ([`Engine::set_profiling`]): per
/// label, in first-call order, its calls and time.
#[derive(Default)]
struct Clock {
    on: bool,
    spent: Vec<(&'static str, u64, Duration)>,
}

impl Clock {
    /// Run `f`, charging its time to `label` when the clock is on.
    fn time<T>(&mut self, label: &'static str, f: impl FnOnce() -> T) -> T {
        if !self.on {
            return f();
        }
        let t0 = Instant::now();
        let out = f();
        self.charge(label, t0.elapsed());
        out
    }

    /// One call of `label` that took `d`.
    fn charge(&mut self, label: &'static str, d: Duration) {
        match self.spent.iter_mut().find(|e| e.0 == label) {
            Some(e) => {
                e.1 += 1;
                e.2 += d;
            }
            None => self.spent.push((label, 1, d)),
        }
    }
}

/// The planned products.
struct Planned {
    clock: Clock,
    plan: CompiledPlan,
    exec: Executor,
    dim: usize,
    /// Per layer, in [`Mat::LAYER`] order.
    layers: Vec<Vec<Product>>,
    head: Product,
    /// The `q8_0.quantize` site of each width.
    quantize: HashMap<usize, usize>,
    /// The `attention.fused` site.
    attention: usize,
}

fn refused(site: &'static str) -> impl Fn(weft_kernel::Refusal) -> EngineError {
    move |refusal| EngineError::Refused { site, refusal }
}

impl Planned {
    /// `x` as the Q8_0 activation of a product, by the plan's quantiser.
    fn q8_0(&self, x: &[f32]) -> Result<Vec<u8>, EngineError> {
        let cols = x.len();
        let site = *self.quantize.get(&cols).ok_or(EngineError::Refused {
            site: QUANTIZE,
            refusal: weft_kernel::Refusal::UnsupportedGeometry {
                reason: format!("no quantiser site of width {cols}"),
            },
        })?;
        let blocks = cols / 32;
        let mut out = vec![0u8; blocks * 34];
        let kernel = self.plan.kernel::<Q8QuantizeArgs>(site)?;
        let args =
            Q8QuantizeArgs::new(x, &mut out, cols, 1, 0..blocks).map_err(refused(QUANTIZE))?;
        // SAFETY: `args` was checked against `x` and `out`, live until the
        // call returns.
        unsafe { kernel.run(&self.exec, &args) };
        Ok(out)
    }

    /// `W · x` for `p`, its activation quantised first; timed by `clock`.
    fn run(&self, clock: &mut Clock, p: &Product, x: &[f32]) -> Result<Vec<f32>, EngineError> {
        match &p.weights {
            Weights::K(w) => {
                let xf = weft_kquant::x_format(w.format()).unwrap_or(Format::Q8_K);
                let act = match xf {
                    Format::Q8_0 => {
                        let xq = clock.time(QUANTIZE, || self.q8_0(x))?;
                        Activations::from_bytes(xq, Format::Q8_0, x.len(), 1)
                    }
                    _ => clock.time(QUANTIZE_Q8_K, || quantize_activations(x, xf, x.len(), 1)),
                }
                .map_err(refused(p.label))?;
                let mut y = vec![0.0f32; w.rows()];
                let args = w
                    .args(&act, &mut y, 0..w.rows())
                    .map_err(refused(p.label))?;
                let kernel = self.plan.kernel::<KMatvecArgs>(p.site)?;
                // SAFETY: `args` was checked against the weights, `act` and
                // `y`, all live until the call returns.
                clock.time(p.label, || unsafe { kernel.run(&self.exec, &args) });
                Ok(y)
            }
            Weights::Q8 { bytes, rows, cols } => {
                let xq = clock.time(QUANTIZE, || self.q8_0(x))?;
                let mut y = vec![0.0f32; *rows];
                let args =
                    Q8MatmulArgs::from_slices(bytes, &xq, &mut y, (*rows, *cols, 1), 0..*rows)
                        .map_err(refused(p.label))?;
                let kernel = self.plan.kernel::<Q8MatmulArgs>(p.site)?;
                // SAFETY: `args` was checked against the weights, `xq` and
                // `y`, all live until the call returns.
                clock.time(p.label, || unsafe { kernel.run(&self.exec, &args) });
                Ok(y)
            }
        }
    }
}

impl Kernels for Planned {
    fn embed(&mut self, token: u32) -> Vec<f32> {
        // The tied head's row, in whatever format the file stores it.
        let t = token as usize;
        let mut out = vec![0.0f32; self.dim];
        match &self.head.weights {
            Weights::Q8 { bytes, cols, .. } => {
                // Read back from the panels: `f32(dw) · q`, the bits
                // dequantising the file's block gives.
                let blocks = cols / Format::Q8_0.block_len();
                let row = matmul::unpack_row(bytes, blocks, t);
                for ((d, q), out) in row
                    .iter()
                    .zip(out.chunks_exact_mut(Format::Q8_0.block_len()))
                {
                    for (o, &q) in out.iter_mut().zip(q) {
                        *o = f32::from(q) * d;
                    }
                }
            }
            Weights::K(w) => {
                let format = w.format();
                let row = self.dim / format.block_len() * format.block_bytes();
                // The row is whole blocks of a checked matrix, and
                // `advance` checks the token against the vocabulary first.
                let _ = format.dequantize(&w.bytes()[t * row..(t + 1) * row], &mut out);
            }
        }
        out
    }

    fn attend(
        &mut self,
        c: &Config,
        q: &[f32],
        keys: &[u16],
        values: &[u16],
        lk: usize,
        scale: f32,
    ) -> Result<Vec<f32>, EngineError> {
        let shape = attention_shape(c, lk, scale);
        let (hd, kvd) = (c.head_dim, c.kv_heads * c.head_dim);
        let layout = Layout {
            q_head: hd,
            q_row: c.heads * hd,
            k_head: hd,
            k_pos: kvd,
            v_head: hd,
            v_pos: kvd,
            o_head: hd,
            o_row: c.heads * hd,
        };
        let mut out = vec![0.0f32; c.heads * hd];
        let args = AttentionArgs::new(
            &shape,
            &layout,
            q,
            KvSlice::F16(keys),
            KvSlice::F16(values),
            &mut out,
        )
        .map_err(refused(ATTENTION))?;
        let kernel = self.plan.kernel::<AttentionArgs>(self.attention)?;
        // SAFETY: `args` was checked against `q`, the keys, the values and
        // `out`, all live until the call returns.
        self.clock
            .time(ATTENTION, || unsafe { kernel.run(&self.exec, &args) });
        Ok(out)
    }

    fn apply(&mut self, m: Mat, layer: usize, x: &[f32]) -> Result<Vec<f32>, EngineError> {
        let p = match m {
            Mat::Head => &self.head,
            _ => &self.layers[layer][m.index()],
        };
        let mut clock = std::mem::take(&mut self.clock);
        let y = self.run(&mut clock, p, x);
        self.clock = clock;
        y
    }
}

/// The family that multiplies weights of `format`.
fn family(format: Format) -> Option<&'static str> {
    Some(match format {
        Format::Q4_K => weft_kquant::q4_k::FAMILY,
        Format::Q6_K => weft_kquant::q6_k::FAMILY,
        Format::Q5_0 => weft_kquant::q5_0::FAMILY,
        Format::Q8_0 => matmul::FAMILY,
        _ => return None,
    })
}

/// The catalogue the engine's plan chooses from.
fn catalogue() -> Result<Catalogue, weft_plan::PlanError> {
    let mut c = Catalogue::new();
    c.register(weft_kquant::q4_k::entry())?;
    c.register(weft_kquant::q6_k::entry())?;
    c.register(weft_kquant::q5_0::entry())?;
    // Q8_0 weights go through `q8_0.matmul`'s panels: on a Zen 4 host
    // (family 25) its panels streamed from DRAM at 34 GB/s where
    // `q8_0.matvec` read canonical rows at 27 (docs/PERFORMANCE.md).
    c.register(matmul::entry())?;
    c.register(weft_q8::quantize::entry())?;
    c.register(weft_attention::entry())?;
    Ok(c)
}

/// The forward pass (any [`super::Arch`]) with its products planned
/// (module docs).
pub struct Engine {
    config: Config,
    norms: Norms,
    planned: Planned,
    cache: Cache,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("mixed::Engine")
            .field("config", &self.config)
            .field("position", &self.cache.position())
            .finish()
    }
}

impl Engine {
    /// Read `g`'s weights (copied in their file bytes) for a cache of
    /// `max_seq` positions and compile the plan with `options`; products
    /// run on `threads` threads.
    pub fn open(
        g: &Gguf,
        max_seq: usize,
        options: Options,
        threads: usize,
    ) -> Result<Engine, OpenError> {
        let c = Config::from_gguf(g, max_seq)?;
        let norms = Norms::open(g, &c)?;
        let mut sites: Vec<Site> = Vec::new();
        let mut site_of: HashMap<(&'static str, usize, usize), usize> = HashMap::new();
        // Every matrix in the order a step reads them (a layer's seven,
        // then the head), checked, with its site.
        let order: Vec<(Mat, usize)> = (0..c.layers)
            .flat_map(|l| Mat::LAYER.into_iter().map(move |m| (m, l)))
            .chain([(Mat::Head, 0)])
            .collect();
        let mut found = Vec::with_capacity(order.len());
        for &(m, l) in &order {
            let name = m.tensor(l);
            let t = g.tensor(&name).map_err(ModelError::from)?;
            let (rows, cols) = m.shape(&c);
            let shape_error = |reason: String| ModelError::Shape {
                tensor: name.clone(),
                reason,
            };
            if t.dims() != [cols as u64, rows as u64] {
                return Err(
                    shape_error(format!("dims {:?}, expected [{cols}, {rows}]", t.dims())).into(),
                );
            }
            let format = weft_gguf_format(t.tensor_type())
                .filter(|f| family(*f).is_some())
                .ok_or_else(|| {
                    shape_error(format!("no family multiplies {} weights", t.tensor_type()))
                })?;
            let fam = family(format).unwrap_or_default();
            let site = *site_of.entry((fam, rows, cols)).or_insert_with(|| {
                let geometry = match format {
                    Format::Q8_0 => matmul::geometry(rows as u64, cols as u64, 1),
                    _ => weft_q8::geometry(rows as u64, cols as u64, 1),
                };
                sites.push(Site::new(Family(fam), geometry).with_label(m.label()));
                sites.len() - 1
            });
            found.push((m, t, format, rows, cols, site));
        }
        // One huge-page arena, in that order: each product streams from
        // 2 MiB pages and runs on into the next one's bytes. Q8_0 matrices
        // are packed into panels on the way in; the others are copied.
        let mut lens = Vec::with_capacity(found.len());
        for &(_, t, format, rows, cols, _) in &found {
            lens.push(match format {
                Format::Q8_0 => {
                    let blocks = matmul::canonical_blocks(t.bytes(), rows, cols).map_err(|r| {
                        ModelError::Shape {
                            tensor: t.name().to_owned(),
                            reason: r.to_string(),
                        }
                    })?;
                    matmul::packed_len(rows, blocks)
                }
                _ => t.bytes().len(),
            });
        }
        let capacity = lens
            .iter()
            .map(|len| len.next_multiple_of(weft_arena::ALIGN))
            .sum();
        let mut arena = weft_arena::ArenaBuilder::new(capacity);
        let ranges: Vec<_> = found
            .iter()
            .zip(&lens)
            .map(|(&(_, t, format, rows, cols, _), &len)| match format {
                Format::Q8_0 => arena.push_with(len, |out| {
                    matmul::pack_into(t.bytes(), rows, cols / Format::Q8_0.block_len(), out)
                }),
                _ => arena.push(t.bytes()),
            })
            .collect();
        let arena = arena.seal().map_err(|source| EngineError::Memory {
            what: "the model's weights",
            source,
        })?;
        let mut products = Vec::with_capacity(found.len());
        for ((m, t, format, rows, cols, site), range) in found.into_iter().zip(ranges) {
            let bytes = arena.view(range);
            let weights =
                match format {
                    Format::Q8_0 => Weights::Q8 { bytes, rows, cols },
                    _ => Weights::K(KWeights::from_shared(bytes, format, rows, cols).map_err(
                        |r| ModelError::Shape {
                            tensor: t.name().to_owned(),
                            reason: r.to_string(),
                        },
                    )?),
                };
            products.push(Product {
                site,
                label: m.label(),
                weights,
            });
        }
        let head = products.pop().ok_or(ModelError::Config {
            reason: "no head".into(),
        })?;
        let mut layers = Vec::with_capacity(c.layers);
        let mut rest = products.into_iter();
        for _ in 0..c.layers {
            layers.push(rest.by_ref().take(Mat::LAYER.len()).collect::<Vec<_>>());
        }
        // A `q8_0.quantize` site for every width a Q8_0-paired product
        // (Q5_0, Q8_0) multiplies.
        let mut quantize = HashMap::new();
        let q8_widths: std::collections::BTreeSet<usize> = layers
            .iter()
            .flatten()
            .chain([&head])
            .filter_map(|p| match &p.weights {
                Weights::Q8 { cols, .. } => Some(*cols),
                Weights::K(w) => {
                    (weft_kquant::x_format(w.format()) == Some(Format::Q8_0)).then(|| w.cols())
                }
            })
            .collect();
        for cols in q8_widths {
            quantize.insert(cols, sites.len());
            sites.push(
                Site::new(
                    Family(weft_q8::quantize::FAMILY),
                    weft_q8::quantize::geometry(cols as u64, 1),
                )
                .with_label(QUANTIZE),
            );
        }
        let attention = sites.len();
        let priced = attention_shape(&c, ATTENTION_PRICE_LK.min(c.max_seq).max(1), 1.0);
        sites.push(
            Site::new(Family(weft_attention::FAMILY), priced.geometry()).with_label(ATTENTION),
        );
        let mut planner = Planner::for_host(
            catalogue().map_err(EngineError::from)?,
            weft_host::Host::detect(),
            options,
        );
        let plan = planner.compile(&sites).map_err(EngineError::from)?;
        Ok(Engine {
            norms,
            planned: Planned {
                clock: Clock::default(),
                plan,
                exec: Executor::new(threads.max(1)),
                dim: c.dim,
                layers,
                head,
                quantize,
                attention,
            },
            cache: Cache::new(&c),
            config: c,
        })
    }

    /// The model's shape.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The compiled plan (its report names every site's choice).
    pub fn plan(&self) -> &CompiledPlan {
        &self.planned.plan
    }

    /// Positions fed so far.
    pub fn position(&self) -> usize {
        self.cache.position()
    }

    /// Weight bytes of the file one token reads: every matrix once (the
    /// head's rows too; the embedding's one row is not counted). Q8_0
    /// matrices count as the file stores them, 34 bytes a block, though
    /// their panels hold 36 (an f32 scale): a yardstick over these bytes
    /// does not credit the engine for reading more.
    pub fn streamed_bytes(&self) -> usize {
        let bytes = |p: &Product| match &p.weights {
            Weights::K(w) => w.bytes().len(),
            Weights::Q8 { rows, cols, .. } => {
                rows * cols / Format::Q8_0.block_len() * Format::Q8_0.block_bytes()
            }
        };
        let layers: usize = self.planned.layers.iter().flatten().map(bytes).sum();
        layers + bytes(&self.planned.head)
    }

    /// Forget every position (an empty cache), keeping weights and plan.
    pub fn reset(&mut self) {
        self.cache.reset();
    }

    /// Time every kernel call and every step from now on (or stop), from
    /// zero.
    pub fn set_profiling(&mut self, on: bool) {
        self.planned.clock = Clock {
            on,
            spent: Vec::new(),
        };
    }

    /// Per label, in first-call order: its calls and time since profiling
    /// was turned on (empty when off). A product's time is its kernel
    /// call's; its activation's quantisation is the quantiser's label;
    /// `step` is whole steps, so what the others leave of it is the small
    /// operations between kernels (norms, RoPE, the gated activation,
    /// residuals) and their allocations.
    pub fn profile(&self) -> Vec<(&'static str, u64, Duration)> {
        self.planned.clock.spent.clone()
    }

    /// Feed `token` at the next position; its logits.
    pub fn step(&mut self, token: u32) -> Result<Vec<f32>, EngineError> {
        if self.planned.clock.on {
            let t0 = Instant::now();
            let out = self.step_untimed(token);
            self.planned.clock.charge(STEP, t0.elapsed());
            return out;
        }
        self.step_untimed(token)
    }

    fn step_untimed(&mut self, token: u32) -> Result<Vec<f32>, EngineError> {
        step(
            &self.config,
            &self.norms,
            &mut self.planned,
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
            &mut self.planned,
            &mut self.cache,
            prompt,
        )
    }
}

/// Why an [`Engine`] could not be built: the file, or the plan.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The file's shape or tensors.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The plan.
    #[error(transparent)]
    Engine(#[from] EngineError),
}
