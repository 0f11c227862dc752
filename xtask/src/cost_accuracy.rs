//! `cargo xtask cost-accuracy`: how right are weft-cost's prices?
//!
//! Every candidate of the families that exist — the `q8_0.matvec` arm and
//! its x64 twins, the `q8_0.matmul` arm and its x64 twins (at a prompt
//! chunk's products), the exp and erf arms and their x64 twins, the three
//! `f32.gemm` arms and their x64 twins, the convolution arms and their x64
//! twins — is priced by
//! `CostModel::for_host` with the nest it states (`Arm::nest`,
//! `Twin::nest`) and measured, at geometries from L1-resident to
//! DRAM-resident (ragged ones included).
//!
//! # GEMM rows
//!
//! `f32.gemm` (`C ← A·B`, α = 1, β = 0) at an LLM layer's projection
//! (`k = 576`, `n = 1536`) for `m` = 1, 4, 16 and 64 tokens, square 128,
//! 256 and 512, and an im2col convolution (`m = 784`, `k = 1152`,
//! `n = 128`); B is given at plan time at every one, so the packing arms
//! (`panels`, and `small_m` up to 8 rows) compete with `direct`. Every arm
//! and every x64 twin the host runs (`Twin::requires`) is a candidate at
//! the same site: they share one contract, bit for bit, so the planner may
//! take any of them, and the rows score which tile and which packing the
//! prices prefer. Each body is run once on the site's operands and must
//! give the first arm's bits before it is measured. The GEMM rows take
//! under 10 s of the run (all rounds) on a 2-core host.
//!
//! # Convolution rows
//!
//! `conv.direct` and `conv.depthwise` (NHWC, bias and ReLU fused, batch 1)
//! at eight geometries: 3×3 stride 1 at 28×28×64, 14×14×128 and 7×7×256
//! (the short rows), a 1×1 at 28×28×64→128, a 7×7 stride-2 stem of three
//! channels, a ragged 13×13×17→33 stride 2, and two depthwise 3×3 (stride
//! 1 and 2). Every arm the site's family registers that serves the
//! geometry (`conv.direct`'s direct and Winograd arms at the 3×3 stride-1
//! shapes) and every x64 twin of it the host runs is a candidate; arms may
//! carry contracts of their own, so each body must give its own arm's
//! bits. The rows score which tile, and where a family has several arms,
//! which arithmetic, the prices prefer. Residency is priced as for the GEMM rows.
//!
//! Residency differs from the other families: a GEMM reuses its operands
//! many times within a call, and the shapes here are a layer's weights
//! met by a few tokens or a compute-bound block, not a model streamed
//! through. A GEMM geometry is priced `Residency::Cached` and measured hot
//! (its operands in L2 or the last-level cache from the call before)
//! whenever its working set fits the last-level cache — every geometry
//! here does on a host with 5 MiB of it. One that does not is priced
//! `Residency::Streamed` and, larger than every cache, measured on its one
//! copy (each call finds most of it evicted by the one before).
//!
//! # Protocol
//!
//! The thread is pinned (`sched_setaffinity`). Per geometry every
//! candidate is warmed up and its calls per sample calibrated (about
//! [`SAMPLE_CYCLES`] cycles, at least one call); then [`ROUNDS`] rounds run
//! in which the TSC is calibrated to core cycles by a dependent-add chain
//! ([`crate::cycles`]) and every candidate takes one sample, interleaved
//! (the first candidate rotates each round). A candidate's cycles per call
//! are the **minimum** over rounds when the working set is L1-resident
//! (noise only ever adds) and the **median** otherwise.
//!
//! A geometry whose working set (the offer's bytes moved) is larger than
//! the L2 cache is a **streamed** site: it is priced at
//! `Residency::Streamed` (floor from DRAM) and measured **cold**. Each
//! call reads the next of enough copies of its weights (q8_0.matvec) or of
//! its input and output (elementwise) that a copy has left every cache by
//! the time its turn comes again: copies summing to twice the host's L2
//! and last-level cache, at most [`COLD_POOL`] bytes. Smaller geometries
//! are priced `Residency::Cached` and measured hot, as before.
//!
//! # Figures
//!
//! The planner decides between bodies of one family at one site, so the
//! first figures score those decisions, per geometry:
//!
//! - `twin_pairs`: pairs of two x64 *twins* (not an arm) of one family
//!   at one geometry whose measured gap exceeds [`TWIN_GAP`] (5%: below
//!   it a wrong pick costs little and the measurement may not tell); for
//!   `f32.gemm` twins of different arms pair too (which packing, which
//!   tile).
//! - `twin_decision`: the share of those pairs where the twin priced
//!   cheaper is the one measured faster. An exact price tie counts as
//!   wrong (the model did not separate them); a line before the last says
//!   how many were ties and gives the share over the pairs priced apart.
//!   `n/a` with no such pairs.
//! - `regret`: per geometry, the body picked among all its candidates
//!   against the measured fastest: `(measured(picked) −
//!   measured(fastest)) / measured(fastest)`, the mean over geometries
//!   with at least two candidates. The pick is the planner's rule
//!   (`weft_plan::select`), in its two stages: first the cheapest arm
//!   (with several, as `f32.gemm` has; on an exact tie the shipped arm,
//!   the first listed, if it is among the tied), then the cheapest body
//!   among that arm and its twins; on an exact tie the arm if it is among
//!   the tied and none of them is cheaper under the floor (the planner
//!   keeps it), else the tied candidates race and
//!   the one measured fastest counts. A line before the last says at how
//!   many geometries such a race decided, and the regret if the first
//!   listed of the tied were taken instead.
//! - `spearman_within`: Spearman's rank correlation of predicted and
//!   measured cycles over one geometry's candidates, the mean over
//!   geometries with at least three candidates (a geometry whose prices
//!   or measurements are all equal scores 0).
//!
//! A line before the last scores the arm-vs-arm decisions the same way
//! (`arm_pairs`, `arm_decision`: pairs of two arms at one geometry, only
//! `f32.gemm` has several), and one line per `f32.gemm` and convolution
//! geometry gives the arm and the body picked against the measured fastest.
//!
//! Then the earlier figures, over every candidate:
//!
//! - `l1_error`: mean `|predicted − measured| / measured` over the
//!   L1-resident (candidate, geometry).
//! - `pairs`: the (candidate, geometry) measured.
//! - `decision`: over twin-vs-arm pairs whose measured gap exceeds
//!   [`NOISE`] and whose predicted gap does too, the share where the
//!   cheaper-priced candidate is the faster one.
//! - `unseparated`: over twin-vs-arm pairs whose measured gap exceeds
//!   [`NOISE`], the share whose predicted gap does not (the planner would
//!   race them).
//! - `spearman`: rank correlation of predicted and measured cycles over
//!   every (candidate, geometry), across all problem sizes.
//! - `closer_than_roofline`: geometric mean over every (candidate,
//!   geometry) of the roofline floor's relative error over the model's
//!   (the model's floored at 1%, the noise).
//! - `mca_l1_error`: `l1_error` with each loop's cycles per iteration from
//!   llvm-mca instead of the port model; everything else (trip counts,
//!   code outside loops, floor) the same. Over the L1-resident candidates
//!   llvm-mca could read; `n/a` without llvm-mca.
//! - `mcpu`: the CPU model llvm-mca scheduled for (`none` without it).
//! - `calibrated_here`: `yes` when this host's CPUID vendor, family and
//!   model are those the pricing table was calibrated on
//!   (`weft_cost::TableId::calibrated_on`), `no` otherwise (a table no
//!   machine of ours measured, another CPU, or no table).
//!
//! # llvm-mca
//!
//! The newest llvm-mca on `PATH` is used (`llvm-mca-19` down to
//! `llvm-mca-15`, then `llvm-mca`), with the loop bodies as Intel syntax
//! from iced's formatter. `-mcpu` is this host's core: on AMD from the
//! CPUID family and model (family 23: `znver1`/`znver2`; 25: `znver3` or
//! `znver4`; 26: `znver5`), on Intel the CPU LLVM itself detects (the
//! `Host CPU` of `llvm-mca --version`) unless it lacks the host's AVX-512
//! FP16 (a guest may show an older model number), else the nearest by
//! features (`sapphirerapids` with AVX-512 FP16, `icelake-server` with
//! AVX-512 VNNI, `skylake-avx512`, `haswell`). When that llvm-mca does not know
//! the core it falls back to the newest older core of the same line it
//! knows and says so. `znver4` needs LLVM 16 or newer: on Debian 12,
//! `apt-get install llvm-16` (`.ci/run` installs it).
//!
//! `--quick` runs fewer rounds; `--only=WORD` measures only the geometries
//! (`16x1024x1`, `elementwise.exp len=1000`, `f32.gemm m=4 n=1536 k=576`,
//! `conv.direct 28x28x64->64 k3 s1`) containing WORD (`--only=gemm`: the
//! GEMM rows alone; `--only=conv`: the convolution rows).
//!
//! The last line is
//! `cost-accuracy: twin_pairs=N twin_decision=D regret=G spearman_within=S l1_error=E pairs=N decision=D unseparated=U spearman=R closer_than_roofline=K mca_l1_error=M mcpu=NAME calibrated_here=yes|no`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};

use weft_cost::{CalibrationHost, CostModel, MemoryLevel, Priced, TableId};
use weft_elementwise::arm::{ElementwiseArm, ElementwiseKernel};
use weft_elementwise::Func;
use weft_gemm::arm::{ArmKind, GemmArm, SMALL_M_MAX};
use weft_gemm::{BLayout, GemmArgs, MatRef, SiteOperands};
use weft_kernel::{
    Arm, Family, Feature, Geometry, Host, Isa, Kernel, NativeCode, Offer, Residency, Site, Twin,
};
use weft_q8::arm::{Q8MatvecArm, Q8MatvecKernel};
use weft_q8::twin_x64::TWINS;
use weft_q8::{quantize_activations, Q8Activations, Q8Weights, BLOCK_BYTES, BLOCK_LEN};
use weft_x64::iced_x86::{
    Decoder, DecoderOptions, FlowControl, Formatter, FormatterOutput, FormatterTextKind,
    IntelFormatter,
};

use crate::cycles::{median, minimum, pin_current_thread, ticks, Calibration};

/// Relative gap below which two measurements (or two prices) are not told apart.
const NOISE: f64 = 0.03;
/// Measured gap above which a twin-vs-twin decision is scored.
const TWIN_GAP: f64 = 0.05;
/// Most bytes of copies a streamed geometry rotates over.
const COLD_POOL: u64 = 1 << 30;
/// Interleaved rounds per geometry.
const ROUNDS: usize = 11;
/// Rounds with `--quick`.
const QUICK_ROUNDS: usize = 5;
/// Target length of one sample, in core cycles.
const SAMPLE_CYCLES: f64 = 2.0e6;
/// Most calls in one sample.
const MAX_REPS: usize = 100_000;

/// `q8_0.matvec` geometries `(rows, cols, batch)`: L1-resident first (20
/// and 16 rows of ragged blocks among them), then L2, L3 and DRAM.
const Q8_SHAPES: &[(usize, usize, usize)] = &[
    (16, 1024, 1),
    (8, 2048, 1),
    (32, 512, 1),
    (16, 512, 4),
    (12, 1536, 2),
    (20, 800, 1),
    (16, 480, 1),
    (64, 256, 1),
    (128, 2048, 1),
    (576, 576, 1),
    (256, 1024, 4),
    (96, 4096, 1),
    (1024, 4096, 1),
    (2048, 2048, 2),
    (8192, 4096, 1),
    (4096, 14336, 1),
];

/// `q8_0.matmul` geometries `(rows, cols, batch)`: SmolLM2's prompt-chunk
/// products (64 tokens: K/V, Q/O, gate/up, down) and two ragged ones (a
/// partial panel group and vector tile).
const Q8_MATMUL_SHAPES: &[(usize, usize, usize)] = &[
    (192, 576, 64),
    (576, 576, 64),
    (1536, 576, 64),
    (576, 1536, 64),
    (100, 576, 7),
    (48, 1024, 13),
];

/// Elementwise lengths: L1-resident (odd ones among them), L2, L3, DRAM.
const LENGTHS: &[usize] = &[64, 256, 1000, 2999, 16_384, 300_000, 6_000_000];

/// `f32.gemm` geometries `(m, n, k)` (module docs).
const GEMM_SHAPES: &[(usize, usize, usize)] = &[
    (1, 1536, 576),
    (4, 1536, 576),
    (16, 1536, 576),
    (64, 1536, 576),
    (128, 128, 128),
    (256, 256, 256),
    (512, 512, 512),
    (784, 128, 1152),
];

/// A convolution geometry of the rows: `(batch, size, cin, cout, k,
/// stride, pad, depthwise)`.
type ConvShape = (u64, u64, u64, u64, u64, u64, u64, bool);

/// Convolution geometries, NHWC, bias and ReLU fused (module docs).
const CONV_SHAPES: &[ConvShape] = &[
    (1, 28, 64, 64, 3, 1, 1, false),
    (1, 14, 128, 128, 3, 1, 1, false),
    (1, 7, 256, 256, 3, 1, 1, false),
    (1, 28, 64, 128, 1, 1, 0, false),
    (1, 56, 3, 32, 7, 2, 3, false),
    (1, 13, 17, 33, 3, 2, 1, false),
    (1, 56, 32, 32, 3, 1, 1, true),
    (1, 28, 144, 144, 3, 2, 1, true),
];

/// The `--only=WORD` filter (a geometry or family substring), if given.
static ONLY: OnceLock<Option<String>> = OnceLock::new();

/// Whether the geometry described by `what` is measured this run.
fn selected(what: &str) -> bool {
    ONLY.get()
        .and_then(|o| o.as_ref())
        .is_none_or(|w| what.contains(w.as_str()))
}

/// One measured and priced (candidate, geometry).
#[derive(Clone, Debug)]
struct Row {
    family: &'static str,
    candidate: &'static str,
    arm: &'static str,
    geometry: String,
    level: MemoryLevel,
    /// Priced `Residency::Streamed` and measured cold.
    streamed: bool,
    measured: f64,
    predicted: f64,
    /// The model's own cycles, before the floor.
    model: f64,
    floor: f64,
    mca: Option<f64>,
    /// Predicted without the table's `scheduler` statement.
    unscheduled: Option<f64>,
}

/// A placed candidate and how to price it.
struct Candidate<K> {
    name: &'static str,
    arm: &'static str,
    kernel: K,
    priced: Priced,
    /// The price without the table's `scheduler` statement, when it has one.
    unscheduled: Option<f64>,
    code: NativeCode,
}

/// Per-loop llvm-mca cycles per iteration, by candidate, loop head and a
/// hash of the body's bytes (an arm's body may differ between geometries
/// under one name: `small_m`'s tile is as tall as `m`).
type McaCache = BTreeMap<(&'static str, usize, u64), Option<f64>>;

/// Measure candidates with `call` in interleaved rounds; cycles per call.
fn measure_interleaved<K>(
    cands: &[Candidate<K>],
    rounds: usize,
    l1: bool,
    mut call: impl FnMut(&K),
) -> Vec<f64> {
    // Warm up and size each candidate's sample.
    let cal = Calibration::measure(1_000_000);
    let reps: Vec<usize> = cands
        .iter()
        .map(|c| {
            call(&c.kernel);
            let t0 = ticks();
            call(&c.kernel);
            let once = cal.cycles((ticks() - t0) as f64).max(1.0);
            let r = ((SAMPLE_CYCLES / once).ceil() as usize).clamp(1, MAX_REPS);
            for _ in 0..r {
                call(&c.kernel);
            }
            r
        })
        .collect();
    let mut samples = vec![Vec::with_capacity(rounds); cands.len()];
    for round in 0..rounds {
        let cal = Calibration::measure(200_000);
        for k in 0..cands.len() {
            let i = (k + round) % cands.len();
            let c = &cands[i];
            let t0 = ticks();
            for _ in 0..reps[i] {
                call(&c.kernel);
            }
            let t = (ticks() - t0) as f64 / reps[i] as f64;
            samples[i].push(cal.cycles(t));
        }
    }
    samples
        .iter()
        .map(|s| if l1 { minimum(s) } else { median(s) })
        .collect()
}

/// xorshift64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut s = self.0;
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        self.0 = s;
        s
    }

    /// Uniform in `[lo, hi)`.
    fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
    }
}

fn random_weights(rows: usize, cols: usize, seed: u64) -> Result<Q8Weights, String> {
    let mut rng = Rng(seed);
    let blocks = rows * (cols / BLOCK_LEN);
    let mut bytes = Vec::with_capacity(blocks * BLOCK_BYTES);
    for _ in 0..blocks {
        let r = rng.next();
        let d = (0x1800 + (r % 0x1000) as u16) | (((r >> 32) & 1) as u16) << 15;
        bytes.extend_from_slice(&d.to_le_bytes());
        for _ in 0..BLOCK_LEN / 8 {
            bytes.extend_from_slice(&rng.next().to_le_bytes());
        }
    }
    Q8Weights::from_bytes(bytes, rows, cols).map_err(|e| e.to_string())
}

fn random_activations(cols: usize, batch: usize, seed: u64) -> Result<Q8Activations, String> {
    let mut rng = Rng(seed);
    let x: Vec<f32> = (0..cols * batch).map(|_| rng.uniform(-1.0, 1.0)).collect();
    quantize_activations(&x, cols, batch).map_err(|e| e.to_string())
}

/// Seconds spent in `CostModel::price`, and calls, for the timing line.
static PRICING: std::sync::Mutex<(f64, f64, usize)> = std::sync::Mutex::new((0.0, 0.0, 0));

/// The host's model, and the same without its table's `scheduler`
/// statement (`None` when the table has none): the same rows priced both
/// ways show what the statement is worth on the same measurements.
struct Models {
    host: CostModel,
    unscheduled: Option<CostModel>,
}

impl Models {
    fn for_host(host: &Host) -> Models {
        let model = CostModel::for_host(host);
        let unscheduled = model.table().filter(|t| t.scheduler > 0.0).map(|t| {
            let mut table = t.clone();
            table.scheduler = 0.0;
            crate::cost_calibrate::model_of(table, host)
        });
        Models {
            host: model,
            unscheduled,
        }
    }
}

/// Price `code` for `nest` at `offer` with its data at `residency`
/// (timing the call: the planner prices hundreds of candidates per plan),
/// and without the scheduler statement.
fn price(
    models: &Models,
    name: &str,
    code: &NativeCode,
    nest: &[weft_kernel::LoopTrip],
    offer: &Offer,
    residency: Residency,
) -> Result<(Priced, Option<f64>), String> {
    let t = std::time::Instant::now();
    let p = models
        .host
        .price_at(code, nest, offer, residency)
        .map_err(|e| format!("{name}: {e}"))?;
    let dt = t.elapsed().as_secs_f64();
    if let Ok(mut g) = PRICING.lock() {
        g.0 += dt;
        g.1 = g.1.max(dt);
        g.2 += 1;
    }
    let unscheduled = models
        .unscheduled
        .as_ref()
        .map(|m| {
            m.price_at(code, nest, offer, residency)
                .map(|q| q.price.cycles)
        })
        .transpose()
        .map_err(|e| format!("{name}: {e}"))?;
    Ok((p, unscheduled))
}

/// Where a geometry moving `bytes` finds its data: streamed when they do
/// not fit the L2 cache (the call then reads them from beyond the core's
/// own caches), cached otherwise.
fn residency_of(model: &CostModel, bytes: u64) -> Residency {
    if model.roofline().level(bytes) > MemoryLevel::L2 {
        Residency::Streamed
    } else {
        Residency::Cached
    }
}

/// How many copies of a working set of `set` bytes a cold measurement
/// rotates over: enough to fill twice the host's L2 and last-level caches
/// together (so a copy is evicted before its turn comes again), at most
/// [`COLD_POOL`] bytes, at least one.
fn cold_copies(host: &Host, set: u64) -> usize {
    let c = &host.caches;
    let caches = u64::from(c.last_level_or_assumed()) + u64::from(c.l2.unwrap_or(0));
    let pool = (2 * caches).min(COLD_POOL);
    pool.div_ceil(set.max(1)).max(1) as usize
}

fn q8_rows(
    host: &Host,
    models: &Models,
    rounds: usize,
    rows_out: &mut Vec<Row>,
    mca: &mut McaCache,
) -> Result<(), String> {
    let arm = Q8MatvecArm;
    for &(rows, cols, batch) in Q8_SHAPES {
        if !selected(&format!("{rows}x{cols}x{batch}")) {
            continue;
        }
        let geometry = Geometry::new()
            .with("rows", rows as u64)
            .with("cols", cols as u64)
            .with("batch", batch as u64);
        let site = Site::new(Family("q8_0.matvec"), geometry);
        let offer = arm.offer(&site, host).map_err(|e| e.to_string())?;
        let residency = residency_of(&models.host, offer.bytes_moved);
        let mut cands = Vec::new();
        let code = arm.build(&offer, Isa::X86_64).map_err(|e| e.to_string())?;
        // SAFETY: the arm's body honours the Q8MatvecArgs leaf ABI (its
        // CLIF reads the blocks and writes the outputs the arguments name).
        let kernel = unsafe { Q8MatvecKernel::from_native(&code) }.map_err(|e| e.to_string())?;
        let (priced, unscheduled) = price(
            models,
            arm.name(),
            &code,
            &arm.nest(&offer),
            &offer,
            residency,
        )?;
        cands.push(Candidate {
            name: arm.name(),
            arm: arm.name(),
            kernel,
            priced,
            unscheduled,
            code,
        });
        for twin in TWINS {
            if weft_kernel::require_features(host, twin.requires()).is_err() {
                continue;
            }
            let code = twin.emit(&offer).map_err(|e| e.to_string())?;
            // SAFETY: the q8_0.matvec twins are validated against the
            // reference and honour the leaf ABI (weft-q8's tests).
            let kernel =
                unsafe { Q8MatvecKernel::from_native(&code) }.map_err(|e| e.to_string())?;
            let (priced, unscheduled) = price(
                models,
                twin.name(),
                &code,
                &twin.nest(&offer),
                &offer,
                residency,
            )?;
            cands.push(Candidate {
                name: twin.name(),
                arm: arm.name(),
                kernel,
                priced,
                unscheduled,
                code,
            });
        }
        let w = random_weights(rows, cols, 0x5eed ^ (rows * 31 + cols) as u64)?;
        let streamed = residency == Residency::Streamed;
        // Streamed: each call reads the next copy of the weights, cold.
        let copies = if streamed {
            cold_copies(host, (rows * (cols / BLOCK_LEN) * BLOCK_BYTES) as u64)
        } else {
            1
        };
        let ws = vec![w; copies];
        let x = random_activations(cols, batch, 0xac7 ^ cols as u64)?;
        let mut y = vec![0f32; rows * batch];
        let l1 = cands[0].priced.level == MemoryLevel::L1;
        let mut next = 0;
        let measured = measure_interleaved(&cands, rounds, l1, |k: &Q8MatvecKernel| {
            // Lengths were checked when the buffers were made; a failure
            // here cannot happen and would only skip the call.
            let _ = k.run(&ws[next], &x, &mut y, 0..rows);
            next = (next + 1) % ws.len();
            black_box(&mut y);
        });
        drop(ws);
        for (c, m) in cands.iter().zip(measured) {
            rows_out.push(row(
                "q8_0.matvec",
                c,
                format!("{rows}x{cols}x{batch}"),
                streamed,
                m,
                mca,
            ));
        }
    }
    Ok(())
}

/// The `q8_0.matmul` rows: the arm and the x64 twins at
/// [`Q8_MATMUL_SHAPES`], weights packed as the engine packs them (a site
/// without a `weights` operand: the caller packs).
fn q8_matmul_rows(
    host: &Host,
    models: &Models,
    rounds: usize,
    rows_out: &mut Vec<Row>,
    mca: &mut McaCache,
) -> Result<(), String> {
    use weft_q8::matmul::arm::{offer_at, Q8MatmulArm};
    use weft_q8::matmul::{twin_avx2, twin_x64, Q8MatmulArgs, Q8PanelWeights, FAMILY};
    let arm = Q8MatmulArm;
    for &(rows, cols, batch) in Q8_MATMUL_SHAPES {
        let what = format!("{rows}x{cols}x{batch}");
        if !selected(&format!("{FAMILY} {what}")) {
            continue;
        }
        let offer = offer_at(rows as u64, cols as u64, batch as u64).map_err(|e| e.to_string())?;
        let residency = residency_of(&models.host, offer.bytes_moved);
        let mut cands = Vec::new();
        let code = arm.build(&offer, Isa::X86_64).map_err(|e| e.to_string())?;
        // SAFETY: the arm's body honours the Q8MatmulArgs leaf ABI (its
        // CLIF reads the panels and vectors the arguments name and writes
        // their rows of `y`).
        let kernel =
            unsafe { Kernel::<Q8MatmulArgs>::from_native(&code) }.map_err(|e| e.to_string())?;
        let (priced, unscheduled) = price(
            models,
            arm.name(),
            &code,
            &arm.nest(&offer),
            &offer,
            residency,
        )?;
        cands.push(Candidate {
            name: arm.name(),
            arm: arm.name(),
            kernel,
            priced,
            unscheduled,
            code,
        });
        let twins = twin_x64::TWINS
            .iter()
            .map(|t| t as &dyn Twin)
            .chain(twin_avx2::TWINS.iter().map(|t| t as &dyn Twin));
        for twin in twins {
            if weft_kernel::require_features(host, twin.requires()).is_err() {
                continue;
            }
            let code = twin.emit(&offer).map_err(|e| e.to_string())?;
            // SAFETY: the q8_0.matmul twins are validated bit for bit
            // against the arm and honour the leaf ABI (weft-q8's tests).
            let kernel =
                unsafe { Kernel::<Q8MatmulArgs>::from_native(&code) }.map_err(|e| e.to_string())?;
            let (priced, unscheduled) = price(
                models,
                twin.name(),
                &code,
                &twin.nest(&offer),
                &offer,
                residency,
            )?;
            cands.push(Candidate {
                name: twin.name(),
                arm: arm.name(),
                kernel,
                priced,
                unscheduled,
                code,
            });
        }
        let w = random_weights(rows, cols, 0x3a7 ^ (rows * 31 + cols) as u64)?;
        let panels = Q8PanelWeights::from_weights(&w);
        let streamed = residency == Residency::Streamed;
        let copies = if streamed {
            cold_copies(host, panels.bytes().len() as u64)
        } else {
            1
        };
        let ws = vec![panels; copies];
        // Past the quantiser's batch limit: its vectors one at a time.
        let mut bytes = Vec::new();
        for n in 0..batch {
            let v = random_activations(cols, 1, 0x3ac7 ^ (cols * 131 + n) as u64)?;
            bytes.extend_from_slice(v.bytes());
        }
        let x = weft_q8::matmul::activations(bytes, cols, batch).map_err(|e| e.to_string())?;
        let mut y = vec![0f32; rows * batch];
        let l1 = cands[0].priced.level == MemoryLevel::L1;
        let mut next = 0;
        let measured = measure_interleaved(&cands, rounds, l1, |k: &Kernel<Q8MatmulArgs>| {
            // Lengths were checked when the buffers were made; a refusal
            // here cannot happen and would only skip the call.
            if let Ok(args) = Q8MatmulArgs::new(&ws[next], &x, &mut y, 0..rows) {
                // SAFETY: `args` come from the checked constructor over
                // live buffers borrowed for this statement.
                unsafe { k.call(&args) };
            }
            next = (next + 1) % ws.len();
            black_box(&mut y);
        });
        drop(ws);
        for (c, m) in cands.iter().zip(measured) {
            rows_out.push(row(FAMILY, c, what.clone(), streamed, m, mca));
        }
    }
    Ok(())
}

fn elementwise_rows(
    host: &Host,
    models: &Models,
    rounds: usize,
    rows_out: &mut Vec<Row>,
    mca: &mut McaCache,
) -> Result<(), String> {
    for func in Func::ALL {
        let arm = ElementwiseArm::new(func);
        let family: &'static str = match func {
            Func::Exp => "elementwise.exp",
            Func::Erf => "elementwise.erf",
        };
        for &len in LENGTHS {
            if !selected(&format!("{family} len={len}")) {
                continue;
            }
            let site = Site::new(arm.family(), Geometry::new().with("len", len as u64));
            let offer = arm.offer(&site, host).map_err(|e| e.to_string())?;
            let residency = residency_of(&models.host, offer.bytes_moved);
            let mut cands = Vec::new();
            let code = arm.build(&offer, Isa::X86_64).map_err(|e| e.to_string())?;
            // SAFETY: the arm's body honours the ElementwiseArgs leaf ABI.
            let kernel =
                unsafe { ElementwiseKernel::from_native(&code) }.map_err(|e| e.to_string())?;
            let (priced, unscheduled) = price(
                models,
                arm.name(),
                &code,
                &arm.nest(&offer),
                &offer,
                residency,
            )?;
            cands.push(Candidate {
                name: arm.name(),
                arm: arm.name(),
                kernel,
                priced,
                unscheduled,
                code,
            });
            for twin in weft_elementwise::twins_of(arm.func()) {
                if twin.isa() != Isa::X86_64
                    || weft_kernel::require_features(host, twin.requires()).is_err()
                {
                    continue;
                }
                let code = twin.emit(&offer).map_err(|e| e.to_string())?;
                // SAFETY: the elementwise twins are validated bit for bit
                // against the arm and honour the leaf ABI (their tests).
                let kernel =
                    unsafe { ElementwiseKernel::from_native(&code) }.map_err(|e| e.to_string())?;
                let (priced, unscheduled) = price(
                    models,
                    twin.name(),
                    &code,
                    &twin.nest(&offer),
                    &offer,
                    residency,
                )?;
                cands.push(Candidate {
                    name: twin.name(),
                    arm: arm.name(),
                    kernel,
                    priced,
                    unscheduled,
                    code,
                });
            }
            let mut rng = Rng(0xe1e ^ len as u64);
            let (lo, hi) = match func {
                Func::Exp => (-20.0, 20.0),
                Func::Erf => (-4.0, 4.0),
            };
            let input: Vec<f32> = (0..len).map(|_| rng.uniform(lo, hi)).collect();
            let streamed = residency == Residency::Streamed;
            // Streamed: each call reads and writes the next copy, cold.
            let copies = if streamed {
                cold_copies(host, 2 * 4 * len as u64)
            } else {
                1
            };
            let inputs = vec![input; copies];
            // Written now (not zero pages), so no call takes a page fault.
            let mut outputs = vec![vec![1f32; len]; copies];
            let l1 = cands[0].priced.level == MemoryLevel::L1;
            let mut next = 0;
            let measured = measure_interleaved(&cands, rounds, l1, |k: &ElementwiseKernel| {
                let _ = k.run(&inputs[next], &mut outputs[next]);
                black_box(&mut outputs[next]);
                next = (next + 1) % copies;
            });
            drop((inputs, outputs));
            for (c, m) in cands.iter().zip(measured) {
                rows_out.push(row(family, c, format!("len={len}"), streamed, m, mca));
            }
        }
    }
    Ok(())
}

/// Every body of `arm` at `offer` this host runs — the arm's, then each
/// x64 twin's — placed, priced at `residency` and made a candidate by
/// `call` (which binds the kernel to its arguments).
fn bodies<A: weft_kernel::KernelArgs, K>(
    host: &Host,
    models: &Models,
    (arm, twins): (&dyn Arm, &[Arc<dyn Twin>]),
    offer: &Offer,
    residency: Residency,
    call: impl Fn(Kernel<A>) -> K,
    out: &mut Vec<Candidate<K>>,
) -> Result<(), String> {
    let err = |e: weft_kernel::Refusal| e.to_string();
    let runnable = twins.iter().filter(|t| {
        t.isa() == Isa::X86_64 && weft_kernel::require_features(host, t.requires()).is_ok()
    });
    let arm_body = (arm.name(), arm.build(offer, Isa::X86_64), arm.nest(offer));
    let twin_bodies = runnable.map(|t| (t.name(), t.emit(offer), t.nest(offer)));
    for (name, code, nest) in std::iter::once(arm_body).chain(twin_bodies) {
        let code = code.map_err(err)?;
        // SAFETY: an arm's body and its twins honour the leaf ABI of their
        // argument struct `A` (the twins are validated bit for bit against
        // their arm by the family's tests); the callers run each once and
        // compare its bits before measuring it.
        let kernel = unsafe { Kernel::<A>::from_native(&code) }.map_err(err)?;
        let (priced, unscheduled) = price(models, name, &code, &nest, offer, residency)?;
        out.push(Candidate {
            name,
            arm: arm.name(),
            kernel: call(kernel),
            priced,
            unscheduled,
            code,
        });
    }
    Ok(())
}

/// A placed `f32.gemm` body and the arguments it is measured with.
struct GemmCall {
    kernel: Kernel<GemmArgs>,
    args: GemmArgs,
}

impl GemmCall {
    fn call(&self) {
        // SAFETY: `args` was built by `SiteOperands::args`, which checked
        // every extent against A, B (or its packed copy) and C; the
        // caller keeps those buffers alive and untouched while it runs,
        // and the body honours the GemmArgs leaf ABI (weft-gemm's tests
        // validate every arm and twin against the reference).
        unsafe { self.kernel.call(&self.args) };
    }
}

/// Where a GEMM geometry moving `bytes` finds its data (module docs):
/// cached when they fit the last-level cache, streamed otherwise.
fn gemm_residency(model: &CostModel, bytes: u64) -> Residency {
    if model.roofline().level(bytes) > MemoryLevel::L3 {
        Residency::Streamed
    } else {
        Residency::Cached
    }
}

fn gemm_rows(
    host: &Host,
    models: &Models,
    rounds: usize,
    rows_out: &mut Vec<Row>,
    mca: &mut McaCache,
) -> Result<(), String> {
    const FAMILY: &str = weft_gemm::FAMILY;
    let err = |e: weft_kernel::Refusal| e.to_string();
    for &(m, n, k) in GEMM_SHAPES {
        let geometry = format!("m={m} n={n} k={k}");
        if !selected(&format!("{FAMILY} {geometry}")) {
            continue;
        }
        let mut rng = Rng(0x6e33 ^ (m * 131 + n * 7 + k) as u64);
        let a: Vec<f32> = (0..m * k).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.uniform(-1.0, 1.0)).collect();
        // Written now (not zero pages), so no call takes a page fault.
        let mut c = vec![1f32; m * n];
        let site = weft_gemm::site(m, n, k, BLayout::Rows, Some(&b));
        // Each arm's operands (B packed or not), alive while its bodies run.
        let mut operands = Vec::new();
        let mut cands: Vec<Candidate<GemmCall>> = Vec::new();
        let mut residency = Residency::Cached;
        for kind in ArmKind::ALL {
            if kind == ArmKind::SmallM && m as u64 > SMALL_M_MAX {
                continue;
            }
            let arm = GemmArm(kind);
            // The direct arm leaves a site whose B is given at plan time to
            // the packing arms, as the planner would see it.
            let offer = match weft_gemm::arm::offer(kind, &site) {
                Err(r) if kind == ArmKind::Direct && r.name() == "unsupported-geometry" => continue,
                other => other.map_err(err)?,
            };
            residency = gemm_residency(&models.host, offer.bytes_moved);
            let ops =
                SiteOperands::new(offer.packed.first(), offer.views.as_ref(), k, n).map_err(err)?;
            let args = ops
                .args(
                    MatRef::dense(&a, m, k),
                    Some(MatRef::dense(&b, k, n)),
                    &mut c,
                    n,
                    (1.0, 0.0),
                )
                .map_err(err)?;
            // The packed copy lives on the heap: moving `ops` keeps it put.
            operands.push(ops);
            let twins = weft_gemm::twin_x64::twins(kind);
            let call = |kernel| GemmCall { kernel, args };
            bodies(
                host,
                models,
                (&arm, &twins),
                &offer,
                residency,
                call,
                &mut cands,
            )?;
        }
        // One contract, one set of bits: a body that disagrees with the
        // first arm would be measured doing other work.
        let mut want: Option<Vec<u32>> = None;
        for cand in &cands {
            cand.kernel.call();
            let got: Vec<u32> = c.iter().map(|v| v.to_bits()).collect();
            match &want {
                None => want = Some(got),
                Some(w) if *w != got => {
                    return Err(format!(
                        "{FAMILY} {geometry}: {} does not give {}'s bits",
                        cand.name, cands[0].name
                    ))
                }
                Some(_) => {}
            }
        }
        let streamed = residency == Residency::Streamed;
        let l1 = cands[0].priced.level == MemoryLevel::L1;
        let measured = measure_interleaved(&cands, rounds, l1, |g: &GemmCall| {
            g.call();
            black_box(g.args.c);
        });
        for (cand, t) in cands.iter().zip(measured) {
            rows_out.push(row(FAMILY, cand, geometry.clone(), streamed, t, mca));
        }
        // The bodies read these until here.
        drop((operands, a, b, c));
    }
    Ok(())
}

/// A placed convolution body and the arguments it is measured with.
struct ConvCall {
    kernel: Kernel<weft_conv::ConvArgs>,
    args: weft_conv::ConvArgs,
}

impl ConvCall {
    fn call(&self) {
        // SAFETY: `args` was built by `ConvArgs::new`, which checked every
        // extent against x, the packed filter and y; the caller keeps those
        // buffers alive and untouched while it runs, and the body honours
        // the ConvArgs leaf ABI (weft-conv's tests validate every arm and
        // twin against the reference).
        unsafe { self.kernel.call(&self.args) };
    }
}

/// Convolution rows: every arm of the site's family that serves the
/// geometry and each x64 twin of it the host runs, priced and measured at
/// one site. Arms may have contracts of their own, so each body is checked
/// against its own arm's bits.
fn conv_rows(
    host: &Host,
    models: &Models,
    rounds: usize,
    rows_out: &mut Vec<Row>,
    mca: &mut McaCache,
) -> Result<(), String> {
    use weft_conv::{Activation, ConvArgs, ConvGeometry, PackedFilter};
    let err = |e: weft_kernel::Refusal| e.to_string();
    for &(batch, size, cin, cout, k, stride, pad, dw) in CONV_SHAPES {
        let mut g =
            ConvGeometry::square(batch, size, cin, cout, k, stride, pad).with_act(Activation::Relu);
        if dw {
            g = g.depthwise(cin);
        }
        let family = weft_conv::family_of(&g);
        let geometry = format!(
            "{}{size}x{size}x{cin}->{cout} k{k} s{stride}",
            if dw { "dw " } else { "" }
        );
        if !selected(&format!("{family} {geometry}")) {
            continue;
        }
        let shape = g.check().map_err(|e| e.to_string())?;
        let mut rng = Rng(0xc0ffee ^ (size * 131 + cin * 7 + cout));
        let x: Vec<f32> = (0..g.x_len()).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let w: Vec<f32> = (0..g.w_len()).map(|_| rng.uniform(-0.5, 0.5)).collect();
        let bias: Vec<f32> = (0..cout).map(|_| rng.uniform(-0.1, 0.1)).collect();
        // Written now (not zero pages), so no call takes a page fault.
        let mut y = vec![1f32; g.y_len(&shape)];
        let site = weft_conv::site(&g, &w, Some(&bias)).map_err(|e| e.to_string())?;
        // Each arm's packed filter, alive while its bodies run.
        let mut filters = Vec::new();
        let mut cands: Vec<Candidate<ConvCall>> = Vec::new();
        let mut residency = Residency::Cached;
        // Every arm the family registers, as the planner sees them.
        let entry = weft_conv::entries()
            .into_iter()
            .find(|e| e.family.name() == family)
            .ok_or_else(|| format!("{family} is not registered"))?;
        for a in &entry.arms {
            let arm = a.arm.as_ref();
            let offer = match arm.offer(&site, host) {
                Err(r) if r.name() == "unsupported-geometry" => continue,
                other => other.map_err(err)?,
            };
            residency = gemm_residency(&models.host, offer.bytes_moved);
            let filter = PackedFilter::from_site(offer.packed.first(), &g).map_err(err)?;
            let args = ConvArgs::new(&g, &x, &filter, &mut y).map_err(err)?;
            // The packed lines live on the heap: moving `filter` keeps them put.
            filters.push(filter);
            let call = |kernel| ConvCall { kernel, args };
            bodies(
                host,
                models,
                (arm, &a.twins),
                &offer,
                residency,
                call,
                &mut cands,
            )?;
        }
        if cands.is_empty() {
            return Err(format!("{family} {geometry}: no arm serves it"));
        }
        // A body that disagrees with its arm would be measured doing other
        // work; arms of other contracts give other bits.
        let mut want: BTreeMap<&'static str, Vec<u32>> = BTreeMap::new();
        for cand in &cands {
            cand.kernel.call();
            let got: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
            let w = want.entry(cand.arm).or_insert_with(|| got.clone());
            if *w != got {
                return Err(format!(
                    "{family} {geometry}: {} does not give {}'s bits",
                    cand.name, cand.arm
                ));
            }
        }
        let streamed = residency == Residency::Streamed;
        let l1 = cands[0].priced.level == MemoryLevel::L1;
        let measured = measure_interleaved(&cands, rounds, l1, |c: &ConvCall| {
            c.call();
            black_box(c.args.y);
        });
        for (cand, t) in cands.iter().zip(measured) {
            rows_out.push(row(family, cand, geometry.clone(), streamed, t, mca));
        }
        // The bodies read these until here.
        drop((filters, x, w, y));
    }
    Ok(())
}

fn row<K>(
    family: &'static str,
    c: &Candidate<K>,
    geometry: String,
    streamed: bool,
    measured: f64,
    mca: &mut McaCache,
) -> Row {
    Row {
        family,
        candidate: c.name,
        arm: c.arm,
        geometry,
        level: c.priced.level,
        streamed,
        measured,
        predicted: c.priced.price.cycles,
        model: c.priced.model_cycles,
        floor: c.priced.price.floor,
        mca: mca_price(c, mca),
        unscheduled: c.unscheduled,
    }
}

/// The price with llvm-mca's cycles per iteration for every loop, or
/// `None` when llvm-mca is missing or cannot read a loop body.
fn mca_price<K>(c: &Candidate<K>, cache: &mut McaCache) -> Option<f64> {
    let p = &c.priced;
    let mut total = p.model_cycles;
    let bytes = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        c.code.bytes.hash(&mut h);
        h.finish()
    };
    for l in &p.loops {
        let cpi = *cache
            .entry((c.name, l.head, bytes))
            .or_insert_with(|| mca_cycles_per_iteration(&c.code, &l.body));
        let cpi = cpi?;
        total += l.iterations * (cpi - l.cycles_per_iteration);
    }
    Some(total.max(p.price.floor))
}

/// Collects formatter output as plain text, branch targets replaced by a
/// label at the top of the body.
struct Text(String);

impl FormatterOutput for Text {
    fn write(&mut self, text: &str, _kind: FormatterTextKind) {
        self.0.push_str(text);
    }
}

/// Intel-syntax text of the instructions at `offsets`, for llvm-mca.
fn intel_body(code: &NativeCode, offsets: &[usize]) -> String {
    let mut f = IntelFormatter::new();
    let o = f.options_mut();
    o.set_hex_prefix("0x");
    o.set_hex_suffix("");
    o.set_uppercase_hex(false);
    o.set_rip_relative_addresses(true);
    o.set_space_after_operand_separator(true);
    let mut out = String::from(".intel_syntax noprefix\n.Ltop:\n");
    for &at in offsets {
        let mut d = Decoder::with_ip(64, &code.bytes[at..], at as u64, DecoderOptions::NONE);
        let instr = d.decode();
        match instr.flow_control() {
            FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch => {
                let mut t = Text(String::new());
                f.format_mnemonic(&instr, &mut t);
                out.push_str(&format!("{} .Ltop\n", t.0));
            }
            _ => {
                let mut t = Text(String::new());
                f.format(&instr, &mut t);
                out.push_str(&t.0);
                out.push('\n');
            }
        }
    }
    out
}

/// The llvm-mca this run prices with (see the module docs).
#[derive(Clone, Debug, PartialEq)]
struct Mca {
    /// The binary (`llvm-mca-16`).
    binary: String,
    /// Its `--version` line.
    version: String,
    /// The `-mcpu` used.
    mcpu: String,
    /// The core this host is, when `mcpu` is a fallback from it.
    wanted: String,
}

/// Found once per run by [`Mca::find`]; `None` without llvm-mca.
static MCA: OnceLock<Option<Mca>> = OnceLock::new();

/// llvm-mca binaries, newest first.
const MCA_BINARIES: &[&str] = &[
    "llvm-mca-19",
    "llvm-mca-18",
    "llvm-mca-17",
    "llvm-mca-16",
    "llvm-mca-15",
    "llvm-mca",
];

/// LLVM's x86 cores by line, newest first: where a core falls back to
/// when an llvm-mca does not know it.
const MCPU_LINES: &[&[&str]] = &[
    &["znver5", "znver4", "znver3", "znver2", "znver1"],
    &[
        "graniterapids",
        "sapphirerapids",
        "icelake-server",
        "cascadelake",
        "skylake-avx512",
        "skylake",
        "haswell",
    ],
];

/// LLVM's name for an AMD core from its CPUID display family and model.
fn amd_mcpu(family: u32, model: u32) -> Option<&'static str> {
    match (family, model) {
        (0x17, 0x00..=0x2f) => Some("znver1"),
        (0x17, _) => Some("znver2"),
        (0x19, 0x10..=0x1f | 0x60..=0x7f | 0xa0..=0xaf) => Some("znver4"),
        (0x19, _) => Some("znver3"),
        (0x1a, _) => Some("znver5"),
        _ => None,
    }
}

/// Intel cores LLVM knows that have AVX-512 FP16.
const FP16_CORES: &[&str] = &[
    "sapphirerapids",
    "emeraldrapids",
    "graniterapids",
    "graniterapids-d",
];

/// LLVM's name for an Intel core: the one LLVM detects (`llvm_host`),
/// unless generic or without the host's AVX-512 FP16 (a guest may show an
/// older model number than its features: LLVM names a family 6 model 167
/// guest with AVX-512 FP16 `rocketlake`), else the nearest by AVX-512
/// features.
fn intel_mcpu(
    llvm_host: Option<&str>,
    avx512fp16: bool,
    avx512vnni: bool,
    avx512f: bool,
) -> String {
    match llvm_host {
        Some(h)
            if !h.is_empty()
                && !matches!(h, "generic" | "x86-64")
                && (!avx512fp16 || FP16_CORES.contains(&h)) =>
        {
            h.to_owned()
        }
        _ if avx512fp16 => "sapphirerapids".into(),
        _ if avx512vnni => "icelake-server".into(),
        _ if avx512f => "skylake-avx512".into(),
        _ => "haswell".into(),
    }
}

/// The first of `wanted` and the older cores of its line that `knows`
/// accepts, or `None`.
fn choose_mcpu(wanted: &str, knows: impl Fn(&str) -> bool) -> Option<String> {
    let older: &[&str] = MCPU_LINES
        .iter()
        .find_map(|line| {
            line.iter()
                .position(|n| *n == wanted)
                .map(|i| &line[i + 1..])
        })
        .unwrap_or(&[]);
    std::iter::once(wanted)
        .chain(older.iter().copied())
        .find(|n| knows(n))
        .map(str::to_owned)
}

/// Whether the table calibrated on `table` was calibrated on this CPU.
fn calibrated_here(table: Option<CalibrationHost>, vendor: &str, family: u32, model: u32) -> bool {
    table.is_some_and(|t| t.vendor == vendor && t.family == family && t.model == model)
}

impl Mca {
    /// The newest llvm-mca on `PATH` and the `-mcpu` for this host.
    fn find(host: &Host, vendor: &str, family: u32, model: u32) -> Option<Mca> {
        let (binary, version) = MCA_BINARIES.iter().find_map(|b| {
            let out = Command::new(b).arg("--version").output().ok()?;
            out.status.success().then(|| {
                (
                    b.to_string(),
                    String::from_utf8_lossy(&out.stdout).into_owned(),
                )
            })
        })?;
        let wanted = if vendor == "AuthenticAMD" {
            amd_mcpu(family, model).unwrap_or("x86-64").to_owned()
        } else {
            let llvm_host = version
                .lines()
                .find_map(|l| l.trim().strip_prefix("Host CPU:"))
                .map(str::trim);
            intel_mcpu(
                llvm_host,
                host.has(Feature::Avx512fp16),
                host.has(Feature::Avx512vnni),
                host.has(Feature::Avx512f),
            )
        };
        let mcpu =
            choose_mcpu(&wanted, |n| mca_knows(&binary, n)).unwrap_or_else(|| "x86-64".into());
        let version = version
            .lines()
            .find(|l| l.contains("LLVM version"))
            .unwrap_or("")
            .trim()
            .to_owned();
        Some(Mca {
            binary,
            version,
            mcpu,
            wanted,
        })
    }
}

/// Whether llvm-mca `binary` knows the CPU `name` (it warns "not a
/// recognized processor" and schedules for a generic one otherwise).
fn mca_knows(binary: &str, name: &str) -> bool {
    let run = || -> Option<bool> {
        let mut child = Command::new(binary)
            .args([
                "-mtriple=x86_64-unknown-linux-gnu",
                &format!("-mcpu={name}"),
                "-",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        {
            use std::io::Write;
            let mut stdin = child.stdin.take()?;
            stdin.write_all(b"nop\n").ok()?;
        }
        let out = child.wait_with_output().ok()?;
        let err = String::from_utf8_lossy(&out.stderr);
        Some(out.status.success() && !err.contains("not a recognized processor"))
    };
    run().unwrap_or(false)
}

/// llvm-mca's cycles per iteration of a loop body at this host's `-mcpu`.
fn mca_cycles_per_iteration(code: &NativeCode, body: &[usize]) -> Option<f64> {
    let mca = MCA.get()?.as_ref()?;
    if body.is_empty() {
        return Some(0.0);
    }
    let text = intel_body(code, body);
    let iterations = 200;
    let mut child = Command::new(&mca.binary)
        .args([
            "-mtriple=x86_64-unknown-linux-gnu",
            &format!("-mcpu={}", mca.mcpu),
            "-mattr=+avx512f,+avx512bw,+avx512vl,+avx512dq,+avx512vnni,+f16c,+fma",
            &format!("-iterations={iterations}"),
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take()?;
        stdin.write_all(text.as_bytes()).ok()?;
    }
    let out = child.wait_with_output().ok()?;
    if !out.status.success() {
        return None;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let total: f64 = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("Total Cycles:"))?
        .trim()
        .parse()
        .ok()?;
    Some(total / f64::from(iterations))
}

/// Spearman's rank correlation (ties get their mean rank).
fn spearman(a: &[f64], b: &[f64]) -> f64 {
    fn ranks(v: &[f64]) -> Vec<f64> {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&i, &j| v[i].total_cmp(&v[j]));
        let mut r = vec![0.0; v.len()];
        let mut i = 0;
        while i < idx.len() {
            let mut j = i;
            while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
                j += 1;
            }
            let mean = (i + j) as f64 / 2.0 + 1.0;
            for &k in &idx[i..=j] {
                r[k] = mean;
            }
            i = j + 1;
        }
        r
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let n = a.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let cov: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = ra.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = rb.iter().map(|y| (y - mb).powi(2)).sum();
    cov / (va * vb).sqrt()
}

/// The rows of each (family, geometry), in the order first seen.
fn by_geometry(rows: &[Row]) -> Vec<Vec<&Row>> {
    let mut groups: Vec<Vec<&Row>> = Vec::new();
    for r in rows {
        match groups
            .iter_mut()
            .find(|g| g[0].family == r.family && g[0].geometry == r.geometry)
        {
            Some(g) => g.push(r),
            None => groups.push(vec![r]),
        }
    }
    groups
}

/// Twin-vs-twin pairs at one geometry whose measured gap exceeds
/// [`TWIN_GAP`], how many of them the cheaper-priced twin is the faster one
/// in (an exact price tie is wrong), and how many are priced exactly alike.
fn twin_decisions(group: &[&Row]) -> (usize, usize, usize) {
    let twins: Vec<&Row> = group
        .iter()
        .copied()
        .filter(|r| r.candidate != r.arm)
        .collect();
    gapped_pairs(&twins)
}

/// [`twin_decisions`] over the arms at one geometry (the planner's first
/// stage; only a family with several arms has such pairs).
fn arm_decisions(group: &[&Row]) -> (usize, usize, usize) {
    let arms: Vec<&Row> = group
        .iter()
        .copied()
        .filter(|r| r.candidate == r.arm)
        .collect();
    gapped_pairs(&arms)
}

/// Pairs of `cands` whose measured gap exceeds [`TWIN_GAP`], those the
/// cheaper-priced one wins, and those priced exactly alike.
fn gapped_pairs(cands: &[&Row]) -> (usize, usize, usize) {
    let (mut pairs, mut right, mut tied) = (0, 0, 0);
    for (i, a) in cands.iter().enumerate() {
        for b in &cands[i + 1..] {
            let (fast, slow) = if a.measured <= b.measured {
                (a, b)
            } else {
                (b, a)
            };
            if slow.measured / fast.measured - 1.0 <= TWIN_GAP {
                continue;
            }
            pairs += 1;
            right += usize::from(fast.predicted < slow.predicted);
            tied += usize::from(fast.predicted == slow.predicted);
        }
    }
    (pairs, right, tied)
}

/// How [`pick`] settles an exact tie at the lowest price that leaves the
/// arm out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tie {
    /// As the planner does (`weft_plan::select`, rule 3): the tied
    /// candidates race, and the race keeps the one measured fastest.
    Race,
    /// The first listed: what the prices alone would give.
    First,
}

/// The candidates sharing the lowest price at one geometry.
fn cheapest<'a>(group: &[&'a Row]) -> Vec<&'a Row> {
    let low = group
        .iter()
        .map(|r| r.predicted)
        .fold(f64::INFINITY, f64::min);
    group
        .iter()
        .copied()
        .filter(|r| r.predicted == low)
        .collect()
}

/// One stage of the planner's choice among `cands`: the cheapest; on an
/// exact tie `reference` (the shipped arm, or the chosen arm) if it is
/// among the tied and no tied one's own cycles under the floor are fewer
/// than its own, else as `tie` says. Whether the tied raced, too.
fn stage<'a>(cands: &[&'a Row], reference: Option<&Row>, tie: Tie) -> (&'a Row, bool) {
    let tied = cheapest(cands);
    if let Some(r) = reference.and_then(|r| tied.iter().copied().find(|t| std::ptr::eq(*t, r))) {
        if tied.iter().all(|t| t.model >= r.model) {
            return (r, false);
        }
    }
    let first = tied.first().copied().unwrap_or(cands[0]);
    if tied.len() < 2 {
        return (first, false);
    }
    let picked = match tie {
        Tie::Race => fastest(&tied),
        Tie::First => first,
    };
    (picked, true)
}

/// The planner's two stages at one geometry: the arm chosen among the
/// arms (the first listed is the shipped one), the body chosen among that
/// arm and its twins, and whether either stage raced. `None` for the arm
/// when the group has none (every body then competes at once).
fn stages<'a>(group: &[&'a Row], tie: Tie) -> (Option<&'a Row>, &'a Row, bool) {
    let arms: Vec<&Row> = group
        .iter()
        .copied()
        .filter(|r| r.candidate == r.arm)
        .collect();
    let Some(&shipped) = arms.first() else {
        let (body, raced) = stage(group, None, tie);
        return (None, body, raced);
    };
    let (arm, raced_arms) = stage(&arms, Some(shipped), tie);
    let bodies: Vec<&Row> = group
        .iter()
        .copied()
        .filter(|r| r.arm == arm.candidate)
        .collect();
    let (body, raced_bodies) = stage(&bodies, Some(arm), tie);
    (Some(arm), body, raced_arms || raced_bodies)
}

/// Whether the planner races at one geometry: a stage's lowest price is
/// shared without its reference (twins on one roofline floor).
fn raced(group: &[&Row]) -> bool {
    stages(group, Tie::Race).2
}

/// The candidate picked at one geometry (module docs: the planner's two
/// stages), an exact tie without the stage's reference settled as `tie`
/// says.
fn pick<'a>(group: &[&'a Row], tie: Tie) -> &'a Row {
    stages(group, tie).1
}

/// The measured fastest candidate at one geometry.
fn fastest<'a>(group: &[&'a Row]) -> &'a Row {
    group
        .iter()
        .copied()
        .min_by(|a, b| a.measured.total_cmp(&b.measured))
        .unwrap_or(group[0])
}

/// Extra time of the picked body over the fastest at one geometry, as a
/// fraction of the fastest.
fn regret(group: &[&Row], tie: Tie) -> f64 {
    let best = fastest(group).measured;
    (pick(group, tie).measured - best) / best
}

/// Spearman's rank correlation within one geometry's candidates (0 when
/// the prices or the measurements are all equal).
fn spearman_within(group: &[&Row]) -> f64 {
    let predicted: Vec<f64> = group.iter().map(|r| r.predicted).collect();
    let measured: Vec<f64> = group.iter().map(|r| r.measured).collect();
    let rho = spearman(&predicted, &measured);
    if rho.is_nan() {
        0.0
    } else {
        rho
    }
}

/// The summary figures (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Summary {
    twin_pairs: usize,
    twin_decision: Option<f64>,
    /// Of `twin_pairs`, those priced exactly alike (counted wrong).
    twin_tied: usize,
    /// Of `twin_pairs`, those the cheaper-priced twin wins.
    twin_right: usize,
    /// Arm-vs-arm pairs at one geometry past [`TWIN_GAP`].
    arm_pairs: usize,
    /// Of `arm_pairs`, those the cheaper-priced arm wins.
    arm_right: usize,
    /// Of `arm_pairs`, those priced exactly alike (counted wrong).
    arm_tied: usize,
    regret: Option<f64>,
    /// Geometries where a stage's lowest price is shared without its
    /// reference (raced).
    raced: usize,
    /// `regret` with such ties taken by the first listed instead.
    regret_first: Option<f64>,
    spearman_within: Option<f64>,
    pairs: usize,
    decisions: usize,
    decision: f64,
    unseparated: f64,
    spearman: f64,
    l1_error: f64,
    closer_than_roofline: f64,
    mca_l1_error: Option<f64>,
    mca_l1_n: usize,
    /// The model's own L1 error over the rows llvm-mca priced (like for like).
    l1_error_on_mca_rows: Option<f64>,
}

fn summarize(rows: &[Row]) -> Summary {
    let rel = |p: f64, m: f64| (p - m).abs() / m;
    // Twin-vs-arm pairs at the same geometry.
    let mut separated = 0usize;
    let mut right = 0usize;
    let mut gapped = 0usize;
    let mut unseparated = 0usize;
    for t in rows.iter().filter(|r| r.candidate != r.arm) {
        let Some(a) = rows
            .iter()
            .find(|r| r.candidate == t.arm && r.geometry == t.geometry && r.family == t.family)
        else {
            continue;
        };
        let measured_gap = t.measured / a.measured - 1.0;
        if measured_gap.abs() <= NOISE {
            continue;
        }
        gapped += 1;
        let predicted_gap = t.predicted / a.predicted - 1.0;
        if predicted_gap.abs() <= NOISE {
            unseparated += 1;
            continue;
        }
        separated += 1;
        right += usize::from(measured_gap.signum() == predicted_gap.signum());
    }
    let measured: Vec<f64> = rows.iter().map(|r| r.measured).collect();
    let predicted: Vec<f64> = rows.iter().map(|r| r.predicted).collect();
    let l1: Vec<&Row> = rows.iter().filter(|r| r.level == MemoryLevel::L1).collect();
    let l1_error = l1.iter().map(|r| rel(r.predicted, r.measured)).sum::<f64>() / l1.len() as f64;
    let log_ratio: f64 = rows
        .iter()
        .map(|r| {
            let model = rel(r.predicted, r.measured).max(0.01);
            let roof = rel(r.floor, r.measured).max(0.01);
            (roof / model).ln()
        })
        .sum::<f64>()
        / rows.len() as f64;
    let mca: Vec<f64> = l1
        .iter()
        .filter_map(|r| r.mca.map(|p| rel(p, r.measured)))
        .collect();
    let same: Vec<f64> = l1
        .iter()
        .filter(|r| r.mca.is_some())
        .map(|r| rel(r.predicted, r.measured))
        .collect();
    let groups = by_geometry(rows);
    let (twin_pairs, twin_right, twin_tied) = groups
        .iter()
        .map(|g| twin_decisions(g))
        .fold((0, 0, 0), |(p, r, t), (gp, gr, gt)| {
            (p + gp, r + gr, t + gt)
        });
    let (arm_pairs, arm_right, arm_tied) = groups
        .iter()
        .map(|g| arm_decisions(g))
        .fold((0, 0, 0), |(p, r, t), (gp, gr, gt)| {
            (p + gp, r + gr, t + gt)
        });
    let decided: Vec<&Vec<&Row>> = groups.iter().filter(|g| g.len() >= 2).collect();
    let regrets: Vec<f64> = decided.iter().map(|g| regret(g, Tie::Race)).collect();
    let regrets_first: Vec<f64> = decided.iter().map(|g| regret(g, Tie::First)).collect();
    let within: Vec<f64> = groups
        .iter()
        .filter(|g| g.len() >= 3)
        .map(|g| spearman_within(g))
        .collect();
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    Summary {
        twin_pairs,
        twin_decision: (twin_pairs > 0).then(|| twin_right as f64 / twin_pairs as f64),
        twin_tied,
        twin_right,
        arm_pairs,
        arm_right,
        arm_tied,
        regret: mean(&regrets),
        raced: decided.iter().filter(|g| raced(g)).count(),
        regret_first: mean(&regrets_first),
        spearman_within: mean(&within),
        pairs: rows.len(),
        decisions: gapped,
        decision: right as f64 / separated.max(1) as f64,
        unseparated: unseparated as f64 / gapped.max(1) as f64,
        spearman: spearman(&predicted, &measured),
        l1_error,
        closer_than_roofline: log_ratio.exp(),
        mca_l1_error: (!mca.is_empty()).then(|| mca.iter().sum::<f64>() / mca.len() as f64),
        mca_l1_n: mca.len(),
        l1_error_on_mca_rows: (!same.is_empty())
            .then(|| same.iter().sum::<f64>() / same.len() as f64),
    }
}

/// One line per geometry of the families `label` names (`gemm`: `f32.gemm`;
/// `conv`: both convolution families): the arm and the body the planner's
/// two stages pick against the measured fastest, and the regret; then
/// those rows' own decision figures.
fn print_decisions(label: &str, families: &[&str], rows: &[Row], seconds: f64) {
    let short = |r: &Row| {
        families
            .iter()
            .fold(r.candidate, |c, f| {
                c.strip_prefix(*f)
                    .and_then(|c| c.strip_prefix('.'))
                    .unwrap_or(c)
            })
            .to_owned()
    };
    let ours: Vec<Row> = rows
        .iter()
        .filter(|r| families.contains(&r.family))
        .cloned()
        .collect();
    if ours.is_empty() {
        return;
    }
    for g in by_geometry(&ours) {
        let (arm, body, raced) = stages(&g, Tie::Race);
        let arms: Vec<&Row> = g.iter().copied().filter(|r| r.candidate == r.arm).collect();
        let fast_arm = fastest(&arms);
        let best = fastest(&g);
        println!(
            "{label} {}: arm {} (fastest arm {}{}); body {} {:.0}/{:.0} (fastest {} {:.0}/{:.0}){}; \
             regret {:.1}%",
            g[0].geometry,
            arm.map_or("-".to_owned(), short),
            short(fast_arm),
            if arm.is_some_and(|a| std::ptr::eq(a, fast_arm)) {
                ""
            } else {
                ", wrong"
            },
            short(body),
            body.predicted,
            body.measured,
            short(best),
            best.predicted,
            best.measured,
            if raced { ", raced" } else { "" },
            100.0 * regret(&g, Tie::Race)
        );
    }
    let s = summarize(&ours);
    let opt = |v: Option<f64>| v.map_or("n/a".into(), |e| format!("{e:.3}"));
    println!(
        "{label} rows ({seconds:.0} s; priced/measured cycles above): twin_pairs={} ({} tied) \
         twin_decision={} arm_pairs={} ({} tied) arm_decision={} regret={} (raced at {}; the \
         first listed of the tied instead: {}) spearman_within={} spearman={:.3}",
        s.twin_pairs,
        s.twin_tied,
        opt(s.twin_decision),
        s.arm_pairs,
        s.arm_tied,
        opt((s.arm_pairs > 0).then(|| s.arm_right as f64 / s.arm_pairs as f64)),
        opt(s.regret),
        s.raced,
        opt(s.regret_first),
        opt(s.spearman_within),
        s.spearman,
    );
}

/// Run the comparison and print every row, the figures and the summary.
pub fn run(args: &[String]) -> Result<(), String> {
    let quick = args.iter().any(|a| a == "--quick");
    let _ = ONLY.set(
        args.iter()
            .find_map(|a| a.strip_prefix("--only=").map(str::to_owned)),
    );
    let rounds = if quick { QUICK_ROUNDS } else { ROUNDS };
    let host = Host::detect();
    let models = Models::for_host(&host);
    let model = &models.host;
    let cpu = pin_current_thread()?;
    println!(
        "cost-accuracy: model {:?} (table {}), {} {}, cpu {cpu}, load {}, {rounds} rounds",
        model.model(),
        model.table().map_or("none", |t| t.id.as_str()),
        host.vendor,
        host.model,
        crate::cost_calibrate::load_average(),
    );
    let (vendor, family, cpu_model) = crate::cpu::identity();
    let table = model
        .table()
        .and_then(|t| TableId::ALL.into_iter().find(|id| id.table().id == t.id));
    let calibration = table.and_then(TableId::calibrated_on);
    let here = calibrated_here(calibration, &vendor, family, cpu_model);
    println!(
        "calibrated_here={} (table: {}; host: {vendor} family {family} model {cpu_model})",
        if here { "yes" } else { "no" },
        match (model.table(), calibration) {
            (None, _) => "none, instruction counts".to_owned(),
            (Some(t), None) => format!("{}, calibrated on no machine of ours", t.id),
            (Some(t), Some(c)) => format!(
                "{}, calibrated on {} family {} model {}",
                t.id, c.vendor, c.family, c.model
            ),
        }
    );
    let mca_setup = MCA.get_or_init(|| Mca::find(&host, &vendor, family, cpu_model));
    match mca_setup {
        None => println!(
            "llvm-mca: none on PATH (mca_l1_error=n/a; on Debian 12: apt-get install llvm-16)"
        ),
        Some(m) if m.mcpu == m.wanted => {
            println!("llvm-mca: {} ({}), -mcpu={}", m.binary, m.version, m.mcpu)
        }
        Some(m) => println!(
            "llvm-mca: {} ({}), -mcpu={}: it does not know this host's {} \
             (znver4 needs LLVM 16 or newer: apt-get install llvm-16)",
            m.binary, m.version, m.mcpu, m.wanted
        ),
    }
    let issue_before = crate::cost_calibrate::issue_rate()?;
    let mut rows = Vec::new();
    let mut mca = McaCache::new();
    q8_rows(&host, &models, rounds, &mut rows, &mut mca)?;
    q8_matmul_rows(&host, &models, rounds, &mut rows, &mut mca)?;
    elementwise_rows(&host, &models, rounds, &mut rows, &mut mca)?;
    let t = std::time::Instant::now();
    gemm_rows(&host, &models, rounds, &mut rows, &mut mca)?;
    let gemm_seconds = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    conv_rows(&host, &models, rounds, &mut rows, &mut mca)?;
    let conv_seconds = t.elapsed().as_secs_f64();
    println!(
        "{:<17} {:<34} {:<16} {:<9} {:>13} {:>13} {:>7} {:>13} {:>7}",
        "family",
        "candidate",
        "geometry",
        "level",
        "measured",
        "predicted",
        "err",
        "roofline",
        "mca"
    );
    for r in &rows {
        println!(
            "{:<17} {:<34} {:<16} {:<9} {:>13.0} {:>13.0} {:>+6.1}% {:>13.0} {:>7}",
            r.family,
            r.candidate,
            r.geometry,
            format!("{:?}{}", r.level, if r.streamed { " cold" } else { "" }),
            r.measured,
            r.predicted,
            100.0 * (r.predicted / r.measured - 1.0),
            r.floor,
            r.mca.map_or("-".into(), |m| format!(
                "{:+.0}%",
                100.0 * (m / r.measured - 1.0)
            )),
        );
    }
    let s = summarize(&rows);
    for g in by_geometry(&rows) {
        let (p, f) = (pick(&g, Tie::Race), fastest(&g));
        if p.candidate != f.candidate {
            println!(
                "pick {} {}: {} (priced {:.0}, measured {:.0}); fastest {} (priced {:.0}, measured {:.0}); regret {:.1}%",
                g[0].family,
                g[0].geometry,
                p.candidate,
                p.predicted,
                p.measured,
                f.candidate,
                f.predicted,
                f.measured,
                100.0 * regret(&g, Tie::Race)
            );
        }
    }
    print_decisions("gemm", &[weft_gemm::FAMILY], &rows, gemm_seconds);
    print_decisions(
        "conv",
        &[weft_conv::DIRECT, weft_conv::DEPTHWISE],
        &rows,
        conv_seconds,
    );
    println!(
        "issue rate of an add/vector-add mix: {issue_before:.1} per cycle before, {:.1} after \
         (6 when the core is not shared with a busy sibling)",
        crate::cost_calibrate::issue_rate()?
    );
    if let Ok(g) = PRICING.lock() {
        println!(
            "pricing: {} calls, mean {:.1} µs, max {:.1} µs per candidate",
            g.2,
            1e6 * g.0 / g.2.max(1) as f64,
            1e6 * g.1
        );
    }
    println!(
        "twin-vs-arm pairs with a measured gap over {:.0}%: {} (mca priced {} L1 rows); load now {}",
        NOISE * 100.0,
        s.decisions,
        s.mca_l1_n,
        crate::cost_calibrate::load_average()
    );
    let l1: Vec<&Row> = rows.iter().filter(|r| r.level == MemoryLevel::L1).collect();
    if let Some(u) = l1
        .iter()
        .map(|r| r.unscheduled.map(|u| (u - r.measured).abs() / r.measured))
        .sum::<Option<f64>>()
        .filter(|_| !l1.is_empty())
    {
        println!(
            "the same L1 rows priced without the table's scheduler statement: l1_error={:.3}",
            u / l1.len() as f64
        );
    }
    if let (Some(m), Some(o)) = (s.mca_l1_error, s.l1_error_on_mca_rows) {
        println!(
            "on the {} L1 rows llvm-mca priced: model l1_error={o:.3}, llvm-mca {m:.3}",
            s.mca_l1_n
        );
    }
    let opt = |v: Option<f64>| v.map_or("n/a".into(), |e| format!("{e:.3}"));
    println!(
        "twin pairs with a measured gap over {:.0}%: {}, {} priced exactly alike (a shared \
         roofline floor; counted wrong); over the {} priced apart: twin_decision={}",
        TWIN_GAP * 100.0,
        s.twin_pairs,
        s.twin_tied,
        s.twin_pairs - s.twin_tied,
        opt((s.twin_pairs > s.twin_tied)
            .then(|| s.twin_right as f64 / (s.twin_pairs - s.twin_tied) as f64))
    );
    println!(
        "arm pairs with a measured gap over {:.0}%: arm_pairs={}, {} priced exactly alike \
         (counted wrong): arm_decision={}",
        TWIN_GAP * 100.0,
        s.arm_pairs,
        s.arm_tied,
        opt((s.arm_pairs > 0).then(|| s.arm_right as f64 / s.arm_pairs as f64))
    );
    println!(
        "regret: at {} geometries candidates share the lowest price without the arm (a shared \
         roofline floor) and the planner races them (counted as the fastest of the tied); \
         taking the first listed instead: regret={}",
        s.raced,
        opt(s.regret_first)
    );
    println!(
        "cost-accuracy: twin_pairs={} twin_decision={} regret={} spearman_within={} l1_error={:.3} \
         pairs={} decision={:.3} unseparated={:.3} spearman={:.3} closer_than_roofline={:.2} \
         mca_l1_error={} mcpu={} calibrated_here={}",
        s.twin_pairs,
        opt(s.twin_decision),
        opt(s.regret),
        opt(s.spearman_within),
        s.l1_error,
        s.pairs,
        s.decision,
        s.unseparated,
        s.spearman,
        s.closer_than_roofline,
        opt(s.mca_l1_error),
        mca_setup.as_ref().map_or("none", |m| m.mcpu.as_str()),
        if here { "yes" } else { "no" },
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(candidate: &'static str, arm: &'static str, measured: f64, predicted: f64) -> Row {
        Row {
            family: "f",
            candidate,
            arm,
            geometry: "g".into(),
            level: MemoryLevel::L1,
            streamed: false,
            measured,
            predicted,
            model: predicted,
            floor: measured / 10.0,
            mca: None,
            unscheduled: None,
        }
    }

    /// A row of `candidate` (a twin of "arm" unless it is "arm") at `geometry`.
    fn at(geometry: &str, candidate: &'static str, measured: f64, predicted: f64) -> Row {
        Row {
            geometry: geometry.into(),
            ..r(candidate, "arm", measured, predicted)
        }
    }

    #[test]
    fn twin_decision_scores_twin_pairs_past_five_percent_and_a_price_tie_is_wrong() {
        let g = [
            at("g", "arm", 10.0, 1000.0), // the arm: in no twin pair
            at("g", "a", 100.0, 50.0),
            at("g", "b", 200.0, 90.0),
            at("g", "c", 103.0, 10.0), // 3% from a: not scored against it
            at("g", "d", 300.0, 90.0), // priced as b: b-d is wrong
        ];
        let group: Vec<&Row> = g.iter().collect();
        // a-b right, a-d right, b-c right, b-d tie (wrong), c-d right.
        assert_eq!(twin_decisions(&group), (5, 4, 1));
        let s = summarize(&g);
        assert_eq!((s.twin_pairs, s.twin_right, s.twin_tied), (5, 4, 1));
        assert_eq!(s.twin_decision, Some(0.8));
    }

    #[test]
    fn regret_is_the_cheapest_priced_body_against_the_measured_fastest() {
        let g = [
            at("g", "arm", 100.0, 100.0),
            at("g", "t1", 80.0, 90.0), // picked
            at("g", "t2", 60.0, 95.0), // fastest
        ];
        let group: Vec<&Row> = g.iter().collect();
        assert_eq!(pick(&group, Tie::Race).candidate, "t1");
        assert!((regret(&group, Tie::Race) - 20.0 / 60.0).abs() < 1e-12);
    }

    #[test]
    fn a_price_tie_with_the_arm_keeps_the_arm() {
        let g = [at("g", "arm", 100.0, 50.0), at("g", "t1", 50.0, 50.0)];
        let group: Vec<&Row> = g.iter().collect();
        assert_eq!(pick(&group, Tie::Race).candidate, "arm");
        assert!((regret(&group, Tie::Race) - 1.0).abs() < 1e-12);
        assert!(!raced(&group));
    }

    #[test]
    fn a_price_tie_without_the_arm_is_raced_or_else_takes_the_first_listed() {
        let g = [
            at("g", "arm", 40.0, 60.0), // fastest, priced dearer
            at("g", "t1", 70.0, 40.0),
            at("g", "t2", 50.0, 40.0), // wins the race of the tied
        ];
        let group: Vec<&Row> = g.iter().collect();
        assert!(raced(&group));
        assert_eq!(pick(&group, Tie::Race).candidate, "t2");
        assert!((regret(&group, Tie::Race) - 0.25).abs() < 1e-12);
        assert_eq!(pick(&group, Tie::First).candidate, "t1");
        assert!((regret(&group, Tie::First) - 0.75).abs() < 1e-12);
    }

    #[test]
    fn with_several_arms_the_pick_takes_the_cheapest_arm_then_its_cheapest_body() {
        let g = [
            r("a1", "a1", 100.0, 70.0), // the shipped arm, cheapest arm
            r("t1", "a1", 40.0, 50.0),  // picked, and the fastest
            r("a2", "a2", 90.0, 80.0),
            r("t2", "a2", 60.0, 30.0), // cheapest of all, but a2 loses stage one
        ];
        let group: Vec<&Row> = g.iter().collect();
        assert_eq!(pick(&group, Tie::Race).candidate, "t1");
        assert_eq!(regret(&group, Tie::Race), 0.0);
        assert!(!raced(&group));
        // a2 is 10% faster than a1 and priced dearer; t1 is faster than t2
        // and priced dearer: one wrong pair each.
        assert_eq!(arm_decisions(&group), (1, 0, 0));
        assert_eq!(twin_decisions(&group), (1, 0, 0));
        let s = summarize(&g);
        assert_eq!((s.arm_pairs, s.arm_right, s.arm_tied), (1, 0, 0));
        // Arms tied with the shipped one: it is kept, no race.
        let tie = [r("a1", "a1", 100.0, 70.0), r("a2", "a2", 50.0, 70.0)];
        let group: Vec<&Row> = tie.iter().collect();
        assert_eq!(pick(&group, Tie::Race).candidate, "a1");
        assert!(!raced(&group));
        // Arms tied without it race; the first listed otherwise.
        let tie = [
            r("a1", "a1", 100.0, 90.0),
            r("a2", "a2", 80.0, 70.0),
            r("a3", "a3", 50.0, 70.0),
        ];
        let group: Vec<&Row> = tie.iter().collect();
        assert!(raced(&group));
        assert_eq!(pick(&group, Tie::Race).candidate, "a3");
        assert_eq!(pick(&group, Tie::First).candidate, "a2");
    }

    #[test]
    fn summary_regret_is_the_mean_over_geometries_with_two_candidates_or_more() {
        let rows = [
            // regret (80 − 60) / 60 = 1/3
            at("g1", "arm", 100.0, 100.0),
            at("g1", "t1", 80.0, 90.0),
            at("g1", "t2", 60.0, 95.0),
            // picks the fastest: 0
            at("g2", "arm", 100.0, 100.0),
            at("g2", "t1", 50.0, 10.0),
            // one candidate: not a decision
            at("g3", "arm", 100.0, 1.0),
        ];
        let s = summarize(&rows);
        assert!((s.regret.unwrap() - 1.0 / 6.0).abs() < 1e-12);
        assert_eq!(s.raced, 0);
    }

    #[test]
    fn spearman_within_ranks_inside_each_geometry_of_three_or_more_and_averages() {
        let rows = [
            // ranks 1 2 3 against 1 3 2: 1 − 6·2 / (3·8) = 0.5
            at("g1", "arm", 10.0, 1.0),
            at("g1", "t1", 30.0, 2.0),
            at("g1", "t2", 20.0, 3.0),
            // reversed: −1
            at("g2", "arm", 3e6, 1e6),
            at("g2", "t1", 2e6, 2e6),
            at("g2", "t2", 1e6, 3e6),
            // two candidates: left out
            at("g3", "arm", 1.0, 2.0),
            at("g3", "t1", 2.0, 1.0),
        ];
        let s = summarize(&rows);
        assert!((s.spearman_within.unwrap() + 0.25).abs() < 1e-12);
        let tied = [
            at("g", "arm", 1.0, 5.0),
            at("g", "t1", 2.0, 5.0),
            at("g", "t2", 3.0, 5.0),
        ];
        assert_eq!(spearman_within(&tied.iter().collect::<Vec<_>>()), 0.0);
    }

    #[test]
    fn amd_family_and_model_name_llvms_zen_cores() {
        assert_eq!(amd_mcpu(23, 0x01), Some("znver1")); // Naples
        assert_eq!(amd_mcpu(23, 0x31), Some("znver2")); // Rome
        assert_eq!(amd_mcpu(25, 0x01), Some("znver3")); // Milan
        assert_eq!(amd_mcpu(25, 0x21), Some("znver3")); // Vermeer
        assert_eq!(amd_mcpu(25, 0x11), Some("znver4")); // Genoa
        assert_eq!(amd_mcpu(25, 0x61), Some("znver4")); // Raphael
        assert_eq!(amd_mcpu(25, 0xa0), Some("znver4")); // Bergamo
        assert_eq!(amd_mcpu(26, 0x02), Some("znver5")); // Turin
        assert_eq!(amd_mcpu(6, 0xa7), None);
    }

    #[test]
    fn intel_takes_llvms_own_host_cpu_else_the_nearest_by_avx512_features() {
        assert_eq!(
            intel_mcpu(Some("rocketlake"), false, true, true),
            "rocketlake"
        );
        assert_eq!(
            intel_mcpu(Some("graniterapids"), true, true, true),
            "graniterapids"
        );
        // A guest with AVX-512 FP16 that LLVM names by an older model number.
        assert_eq!(
            intel_mcpu(Some("rocketlake"), true, true, true),
            "sapphirerapids"
        );
        assert_eq!(
            intel_mcpu(Some("x86-64"), true, true, true),
            "sapphirerapids"
        );
        assert_eq!(intel_mcpu(None, false, true, true), "icelake-server");
        assert_eq!(
            intel_mcpu(Some("generic"), false, false, true),
            "skylake-avx512"
        );
        assert_eq!(intel_mcpu(None, false, false, false), "haswell");
    }

    #[test]
    fn an_unknown_core_falls_back_to_the_newest_older_one_of_its_line() {
        let llvm14 = |n: &str| ["znver1", "znver2", "znver3", "skylake-avx512"].contains(&n);
        assert_eq!(choose_mcpu("znver4", llvm14).as_deref(), Some("znver3"));
        assert_eq!(choose_mcpu("znver3", llvm14).as_deref(), Some("znver3"));
        assert_eq!(
            choose_mcpu("sapphirerapids", llvm14).as_deref(),
            Some("skylake-avx512")
        );
        assert_eq!(choose_mcpu("rocketlake", llvm14), None);
    }

    #[test]
    fn calibrated_here_only_on_the_tables_own_vendor_family_and_model() {
        let genoa = Some(CalibrationHost {
            vendor: "AuthenticAMD",
            family: 25,
            model: 17,
        });
        assert!(calibrated_here(genoa, "AuthenticAMD", 25, 17));
        assert!(!calibrated_here(genoa, "AuthenticAMD", 25, 1));
        assert!(!calibrated_here(genoa, "GenuineIntel", 6, 167));
        assert!(!calibrated_here(None, "GenuineIntel", 6, 167));
    }

    #[test]
    fn spearman_is_one_for_a_monotone_relation_and_minus_one_reversed() {
        let a = [1.0, 2.0, 3.0, 10.0];
        assert!((spearman(&a, &[5.0, 6.0, 70.0, 80.0]) - 1.0).abs() < 1e-12);
        assert!((spearman(&a, &[4.0, 3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
    }

    #[test]
    fn summary_counts_right_wrong_and_unseparated_decisions() {
        let rows = [
            r("arm", "arm", 100.0, 100.0),
            r("fast", "arm", 50.0, 60.0),    // right
            r("slow", "arm", 150.0, 90.0),   // wrong
            r("close", "arm", 120.0, 101.0), // unseparated
            r("noise", "arm", 101.0, 200.0), // inside the noise: not counted
        ];
        let s = summarize(&rows);
        assert_eq!(s.decisions, 3);
        assert!((s.decision - 0.5).abs() < 1e-12);
        assert!((s.unseparated - 1.0 / 3.0).abs() < 1e-12);
    }
}
