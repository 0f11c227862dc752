//! `cargo xtask bench q8-matvec`: time per call of the `q8_0.matvec` arm and
//! of every x64 twin the host runs, at 1 and 2 threads, next to a peer that
//! only streams the same weight bytes, at the shapes rows×cols 576×576,
//! 1536×576, 576×1536, 4096×4096 and 4096×14336, each with batch 1 and
//! batch 4.
//!
//! Protocol, per shape and batch: every candidate is warmed up and its
//! repetitions per sample are calibrated (enough calls for about
//! [`SAMPLE_SECS`], at least one), then [`ROUNDS`] rounds run in which every
//! candidate takes one sample, interleaved (the starting candidate rotates
//! each round), and each candidate reports its median. Drifting clocks and
//! noisy neighbours so hit every candidate alike.
//!
//! The yardstick is the shared streaming-read ceiling ([`crate::ceiling`]):
//! every read loop it has (widest loads, software prefetch at three
//! distances, non-temporal prefetch) runs as its own candidate over the
//! same weight bytes, in the same rounds, split the same way; the ceiling
//! at `t` threads is the fastest of them at ≤ `t` threads, and the tables
//! name the loop that set it.
//!
//! Two-thread runs (kernels and peer alike) go through the planner's
//! persistent executor, `weft_plan::Executor` (see [`executor`]): kernels
//! by `Executor::run`, split along the offer's member views in four parts
//! per thread (a compiled plan cuts fewer: one part per
//! `Options::part_min_cycles` of the site's price, so one per thread for
//! decode's layer matrices and five for the 49152-row output at 2
//! threads); the peer's bytes in two 64-byte aligned halves by
//! `Executor::for_each_part`. No call pays for creating a thread.
//!
//! First, the token section ([`measure_token`]): the matvecs of one
//! SmolLM2-135M decode step at batch 1 (30 layers of q, k, v, o, gate,
//! up, down and the output projection, each with its own weights, 143 MB:
//! more than L3, so every token streams them from DRAM), per token, for
//! every candidate and every read loop, interleaved rounds, medians; it
//! ends with `bench q8-matvec token: best_twin_ms_1t=… best_twin_ms_2t=…
//! ceiling_ms_1t=… ceiling_ms_2t=… ceiling_fraction_1t=…
//! ceiling_fraction_2t=… ceiling_1t=LOOP ceiling_2t=LOOP`.
//! `cargo xtask bench q8-matvec token` runs only that section.
//!
//! The last line is the summary (see [`summarize`]):
//! `bench q8-matvec: best_twin_vs_arm_l2=X ceiling_fraction_1t=Y
//! ceiling_fraction_2t=Z ceiling_1t=LOOP ceiling_2t=LOOP`. A fraction
//! above 1.00 is printed as `(above-ceiling)`: a defect of the ceiling to
//! investigate, not a result.
//! `cargo xtask bench` always runs from a release build (see `main.rs`).

use std::hint::black_box;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use weft_kernel::{Host, MemberViews, Twin};

use crate::ceiling::{self, fmt_fraction, Ceiling, Read, ReadLoop};
use crate::results::{self, Arith, Point};
use weft_plan::Executor;
use weft_q8::arm::{offer_for, Q8MatvecKernel, ARM_NAME};
use weft_q8::twin_x64::TWINS;
use weft_q8::{
    quantize_activations, Q8Activations, Q8MatvecArgs, Q8Weights, BLOCK_BYTES, BLOCK_LEN,
};

/// The shapes, `(rows, cols)`.
const SHAPES: [(usize, usize); 5] = [
    (576, 576),
    (1536, 576),
    (576, 1536),
    (4096, 4096),
    (4096, 14336),
];
/// Activation vectors per call.
const BATCHES: [usize; 2] = [1, 4];
/// Thread counts of every candidate.
const THREADS: [u64; 2] = [1, 2];
/// The shape (at batch 1) whose weights come from DRAM, for the
/// ceiling fractions of the summary.
const DRAM_SHAPE: (usize, usize) = (4096, 14336);
/// Interleaved rounds; the median is reported.
const ROUNDS: usize = 11;
/// Target duration of one sample (the calls per sample are calibrated to
/// it, so the big shapes take fewer calls per round).
const SAMPLE_SECS: f64 = 0.010;
/// Upper bound on calls per sample.
const MAX_REPS: usize = 4096;
/// The L2 size assumed when the host does not report one.
const L2_FALLBACK: u64 = 1 << 20;

/// What a candidate is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// The arm.
    Arm,
    /// An x64 twin.
    Twin,
    /// A read loop of the streaming-read ceiling.
    Stream,
}

/// How a candidate runs.
enum Runner {
    /// A placed `q8_0.matvec` kernel.
    Kernel(Arc<Q8MatvecKernel>),
    /// One of the streaming-read ceiling's loops over the weight bytes.
    Stream(ReadLoop),
}

/// One candidate at one thread count.
struct Candidate {
    name: String,
    kind: Kind,
    threads: u64,
    runner: Runner,
}

/// The operands of one shape and batch.
struct Operands<'a> {
    w: &'a Q8Weights,
    x: &'a Q8Activations,
    views: &'a MemberViews,
}

/// One candidate's result.
#[derive(Clone, Debug, PartialEq)]
struct Row {
    name: String,
    kind: Kind,
    threads: u64,
    /// Median seconds per call.
    median: f64,
}

/// All candidates' results at one shape and batch.
#[derive(Clone, Debug, PartialEq)]
struct Measured {
    rows: usize,
    cols: usize,
    batch: usize,
    results: Vec<Row>,
}

impl Measured {
    /// Bytes of W read per call.
    fn weight_bytes(&self) -> u64 {
        (self.rows * (self.cols / BLOCK_LEN) * BLOCK_BYTES) as u64
    }

    /// The smallest median of the candidates of `kind` at `threads`.
    fn best(&self, kind: Kind, threads: u64) -> Option<f64> {
        self.results
            .iter()
            .filter(|r| r.kind == kind && r.threads == threads)
            .map(|r| r.median)
            .min_by(f64::total_cmp)
    }

    /// The streaming-read ceiling for kernels on `threads` threads.
    fn ceiling(&self, threads: u64) -> Option<Ceiling> {
        ceiling_of(&self.results, threads)
    }
}

/// The ceiling among the read loops of `rows` (see [`crate::ceiling`]).
fn ceiling_of(rows: &[Row], threads: u64) -> Option<Ceiling> {
    let reads: Vec<Read> = rows
        .iter()
        .filter(|r| r.kind == Kind::Stream)
        .map(|r| Read {
            name: r.name.clone(),
            threads: r.threads,
            secs: r.median,
        })
        .collect();
    Ceiling::best(&reads, threads)
}

/// The summary figures; `None` when the host has no twin (or, for the
/// first, no shape fits in L2).
#[derive(Clone, Debug, PartialEq)]
struct Summary {
    best_twin_vs_arm_l2: Option<f64>,
    /// At [`DRAM_SHAPE`], batch 1: the best twin's fraction of the ceiling
    /// and the ceiling's loop, at 1 and 2 threads.
    ceiling_1t: Option<(f64, String)>,
    ceiling_2t: Option<(f64, String)>,
}

/// The median of `v` (the mean of the middle two for an even count);
/// `None` for no samples.
fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The summary of `all`, with `l2` bytes of L2:
///
/// - `best_twin_vs_arm_l2`: over the L2-resident shapes (weight bytes ≤
///   `l2`), batch 1 and 4, 1 thread, the **minimum** of arm median / best
///   twin median. The minimum, not a mean, so a target on it must hold at
///   every such shape and batch.
/// - `ceiling_fraction_1t` / `_2t`: at [`DRAM_SHAPE`] batch 1, the best
///   twin's weight bytes per second over the ceiling's, at 1 and 2 threads
///   (the same bytes per call, so ceiling median / twin median), with the
///   loop that set the ceiling.
fn summarize(all: &[Measured], l2: u64) -> Summary {
    let best_twin_vs_arm_l2 = all
        .iter()
        .filter(|m| m.weight_bytes() <= l2)
        .filter_map(|m| Some(m.best(Kind::Arm, 1)? / m.best(Kind::Twin, 1)?))
        .min_by(f64::total_cmp);
    let dram = all
        .iter()
        .find(|m| (m.rows, m.cols) == DRAM_SHAPE && m.batch == 1);
    let fraction = |t: u64| {
        dram.and_then(|m| {
            let c = m.ceiling(t)?;
            Some((c.fraction(m.best(Kind::Twin, t)?), c.label()))
        })
    };
    Summary {
        best_twin_vs_arm_l2,
        ceiling_1t: fraction(1),
        ceiling_2t: fraction(2),
    }
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
}

/// Random W: quants any byte, scales normal binary16 in 2^-9..2^-5 of
/// either sign.
fn random_weights(rows: usize, cols: usize, seed: u64) -> Result<Q8Weights, String> {
    // On huge pages, as a model's weights are (`weft_llm::Q8Matrix`).
    let bytes = weft_arena::Bytes::copy_from(&random_q8_bytes(rows, cols, seed))
        .map_err(|e| e.to_string())?;
    Q8Weights::from_shared(bytes, rows, cols).map_err(|e| e.to_string())
}

/// [`random_weights`]'s bytes.
fn random_q8_bytes(rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed);
    let blocks = rows * (cols / BLOCK_LEN);
    let mut bytes = Vec::with_capacity(blocks * BLOCK_BYTES);
    for _ in 0..blocks {
        let r = rng.next();
        // biased exponent 6..=9 (2^-9 ..< 2^-5), any mantissa, either sign
        let d = (0x1800 + (r % 0x1000) as u16) | (((r >> 32) & 1) as u16) << 15;
        bytes.extend_from_slice(&d.to_le_bytes());
        for _ in 0..BLOCK_LEN / 8 {
            bytes.extend_from_slice(&rng.next().to_le_bytes());
        }
    }
    bytes
}

/// Random activations in [-1, 1), quantised by the family's quantiser.
fn random_activations(cols: usize, batch: usize, seed: u64) -> Result<Q8Activations, String> {
    let mut rng = Rng(seed);
    let x: Vec<f32> = (0..cols * batch)
        .map(|_| (rng.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        .collect();
    quantize_activations(&x, cols, batch).map_err(|e| e.to_string())
}

// --------------------------------------------------------- the executor ---

/// The persistent executor every 2-thread run uses: the planner's
/// (`weft_plan::Executor`, spin-then-park workers), two threads, started
/// on first use and kept for the process, so no call creates a thread.
fn executor() -> &'static Executor {
    static EXEC: OnceLock<Executor> = OnceLock::new();
    EXEC.get_or_init(|| Executor::new(2))
}

/// One call of `c`.
fn call(c: &Candidate, ops: &Operands<'_>, y: &mut [f32]) -> Result<(), String> {
    match (&c.runner, c.threads) {
        (Runner::Kernel(k), 1) => k
            .run(ops.w, ops.x, y, 0..ops.w.rows())
            .map_err(|e| e.to_string())?,
        (Runner::Kernel(k), _) => {
            let whole =
                Q8MatvecArgs::new(ops.w, ops.x, y, 0..ops.w.rows()).map_err(|e| e.to_string())?;
            // SAFETY: `whole` was checked against W, X and Y, which outlive
            // the call (`run` waits for every part); the executor splits it
            // along the offer's member views into disjoint row ranges, and a
            // body writes only its own rows' outputs (`KernelArgs`).
            unsafe { executor().run(k.kernel(), &whole, ops.views) }
        }
        (Runner::Stream(l), t) => {
            let parts = usize::try_from(t).map_err(|e| e.to_string())?;
            black_box(l.read_parts(executor(), black_box(ops.w.bytes()), parts));
        }
    }
    black_box(&mut *y);
    Ok(())
}

/// Seconds per call over `reps` calls.
fn sample(c: &Candidate, ops: &Operands<'_>, y: &mut [f32], reps: usize) -> Result<f64, String> {
    let t = Instant::now();
    for _ in 0..reps {
        call(c, ops, y)?;
    }
    Ok(t.elapsed().as_secs_f64() / reps as f64)
}

/// Warm-up and calibration: calls per sample for `c`.
fn calibrate(c: &Candidate, ops: &Operands<'_>, y: &mut [f32]) -> Result<usize, String> {
    call(c, ops, y)?;
    let once = sample(c, ops, y, 1)?;
    let reps = ((SAMPLE_SECS / once.max(1e-9)).ceil() as usize).clamp(1, MAX_REPS);
    // a warm-up sample at the calibrated length
    sample(c, ops, y, reps)?;
    Ok(reps)
}

/// The placed twins the host runs, for the offer of this geometry.
fn twins(
    host: &Host,
    rows: usize,
    cols: usize,
    batch: usize,
) -> Result<Vec<(&'static str, Arc<Q8MatvecKernel>)>, String> {
    let offer = offer_for(rows as u64, cols as u64, batch as u64).map_err(|e| e.to_string())?;
    let mut v = Vec::new();
    for twin in TWINS {
        if weft_kernel::require_features(host, twin.requires()).is_err() {
            continue;
        }
        let code = twin
            .emit(&offer)
            .map_err(|e| format!("{}: {e}", twin.name()))?;
        // SAFETY: the q8_0.matvec twins are validated against the reference
        // (crates/weft-q8/src/tests.rs): they honour the leaf ABI,
        // read only the blocks the arguments name and write only their rows'
        // outputs.
        let k = unsafe { Q8MatvecKernel::from_native(&code) }
            .map_err(|e| format!("{}: {e}", twin.name()))?;
        v.push((twin.name(), Arc::new(k)));
    }
    Ok(v)
}

/// Per thread count: the arm, every twin, then every read loop of the
/// streaming-read ceiling.
fn candidates(
    arm: &Arc<Q8MatvecKernel>,
    twins: &[(&'static str, Arc<Q8MatvecKernel>)],
) -> Vec<Candidate> {
    let mut cands = Vec::new();
    for threads in THREADS {
        cands.push(Candidate {
            name: ARM_NAME.to_owned(),
            kind: Kind::Arm,
            threads,
            runner: Runner::Kernel(Arc::clone(arm)),
        });
        for (name, k) in twins {
            cands.push(Candidate {
                name: (*name).to_owned(),
                kind: Kind::Twin,
                threads,
                runner: Runner::Kernel(Arc::clone(k)),
            });
        }
        for l in ceiling::loops() {
            cands.push(Candidate {
                name: l.name().to_owned(),
                kind: Kind::Stream,
                threads,
                runner: Runner::Stream(l),
            });
        }
    }
    cands
}

/// Measure every candidate at one shape and batch.
fn measure(
    host: &Host,
    arm: &Arc<Q8MatvecKernel>,
    w: &Q8Weights,
    cols: usize,
    batch: usize,
) -> Result<Measured, String> {
    let rows = w.rows();
    let x = random_activations(
        cols,
        batch,
        0x9E37_79B9_7F4A_7C15 ^ (cols * 8 + batch) as u64,
    )?;
    let offer = offer_for(rows as u64, cols as u64, batch as u64).map_err(|e| e.to_string())?;
    let views = offer
        .views
        .ok_or_else(|| format!("the {rows}×{cols} offer has no member views"))?;
    let twins = twins(host, rows, cols, batch)?;
    let cands = candidates(arm, &twins);
    let ops = Operands {
        w,
        x: &x,
        views: &views,
    };
    let mut y = vec![0f32; rows * batch];
    let reps = cands
        .iter()
        .map(|c| calibrate(c, &ops, &mut y))
        .collect::<Result<Vec<_>, _>>()?;
    let mut samples = vec![Vec::with_capacity(ROUNDS); cands.len()];
    for round in 0..ROUNDS {
        for i in 0..cands.len() {
            let j = (i + round) % cands.len();
            samples[j].push(sample(&cands[j], &ops, &mut y, reps[j])?);
        }
    }
    let results = cands
        .iter()
        .zip(&samples)
        .map(|(c, s)| {
            Ok(Row {
                name: c.name.clone(),
                kind: c.kind,
                threads: c.threads,
                median: median(s).ok_or("no samples")?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Measured {
        rows,
        cols,
        batch,
        results,
    })
}

/// Print one shape and batch's table.
fn print_table(m: &Measured, l2: u64) {
    let bytes = m.weight_bytes() as f64;
    let flops = (2 * m.rows * m.cols * m.batch) as f64;
    println!();
    println!(
        "{}×{} batch {}: {} weight bytes per call{}",
        m.rows,
        m.cols,
        m.batch,
        m.weight_bytes(),
        if m.weight_bytes() <= l2 {
            " (L2-resident)"
        } else {
            ""
        }
    );
    println!(
        "  {:<32} {:>3} {:>12} {:>8} {:>8} {:>7} {:>8}",
        "candidate", "thr", "median µs", "GB/s", "GFLOP/s", "vs arm", "ceiling"
    );
    for r in &m.results {
        let arm = m.best(Kind::Arm, r.threads).unwrap_or(f64::NAN);
        let of_ceiling = m
            .ceiling(r.threads)
            .map_or(f64::NAN, |c| c.fraction(r.median));
        let gflops = match r.kind {
            Kind::Stream => "-".to_string(),
            _ => format!("{:.1}", flops / r.median / 1e9),
        };
        println!(
            "  {:<32} {:>3} {:>12.1} {:>8.1} {:>8} {:>7.2} {:>8.2}",
            r.name,
            r.threads,
            r.median * 1e6,
            bytes / r.median / 1e9,
            gflops,
            arm / r.median,
            of_ceiling
        );
    }
    for t in THREADS {
        if let Some(c) = m.ceiling(t) {
            println!("  ceiling at {t} thread(s): {}", c.label());
        }
    }
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or_else(|| "absent".to_string(), |v| format!("{v:.2}"))
}

// ------------------------------------------------------------ the token ---

/// One decoder layer of SmolLM2-135M at batch 1, `(rows, cols)`: q, k, v,
/// o, gate, up, down.
const TOKEN_LAYER: [(usize, usize); 7] = [
    (576, 576),
    (192, 576),
    (192, 576),
    (576, 576),
    (1536, 576),
    (1536, 576),
    (576, 1536),
];
/// Decoder layers per token.
const TOKEN_LAYERS: usize = 30;
/// The output projection (vocabulary × hidden).
const TOKEN_OUTPUT: (usize, usize) = (49152, 576);
/// Tokens per sample of the token section.
const TOKEN_REPS: usize = 2;

/// One matrix of the token sequence: its weights and the offer's views.
struct TokenMatrix {
    w: Q8Weights,
    views: MemberViews,
}

/// One token's matvecs, in decode order, each with its own weights (about
/// 143 MB in all: more than L3, so every token streams them from DRAM, as
/// decoding does), and an activation vector per width.
struct TokenSequence {
    mats: Vec<TokenMatrix>,
    x576: Q8Activations,
    x1536: Q8Activations,
}

impl TokenSequence {
    fn new() -> Result<TokenSequence, String> {
        let mut mats = Vec::new();
        let shapes: Vec<_> = (0..TOKEN_LAYERS)
            .flat_map(|_| TOKEN_LAYER)
            .chain([TOKEN_OUTPUT])
            .collect();
        // One arena for the token, as a model's weights are placed.
        let bytes = |(rows, cols): (usize, usize)| rows * cols / BLOCK_LEN * BLOCK_BYTES;
        let total = shapes
            .iter()
            .map(|&s| bytes(s).next_multiple_of(weft_arena::ALIGN))
            .sum();
        let mut arena = weft_arena::ArenaBuilder::new(total);
        let ranges: Vec<_> = shapes
            .iter()
            .enumerate()
            .map(|(i, &(rows, cols))| {
                arena.push(&random_q8_bytes(
                    rows,
                    cols,
                    0x5851_F42D_4C95_7F2D ^ i as u64,
                ))
            })
            .collect();
        let arena = arena.seal().map_err(|e| e.to_string())?;
        for (&(rows, cols), r) in shapes.iter().zip(ranges) {
            let w = Q8Weights::from_shared(arena.view(r), rows, cols).map_err(|e| e.to_string())?;
            let offer = offer_for(rows as u64, cols as u64, 1).map_err(|e| e.to_string())?;
            let views = offer
                .views
                .ok_or_else(|| format!("the {rows}×{cols} offer has no member views"))?;
            mats.push(TokenMatrix { w, views });
        }
        Ok(TokenSequence {
            mats,
            x576: random_activations(576, 1, 7)?,
            x1536: random_activations(1536, 1, 8)?,
        })
    }

    /// Weight bytes per token.
    fn bytes(&self) -> u64 {
        self.mats.iter().map(|m| m.w.bytes().len() as u64).sum()
    }

    /// One token: every matvec in order with `c`'s runner.
    fn run(&self, c: &Candidate, y: &mut [f32]) -> Result<(), String> {
        for m in &self.mats {
            let x = if m.w.blocks() * BLOCK_LEN == 576 {
                &self.x576
            } else {
                &self.x1536
            };
            let ops = Operands {
                w: &m.w,
                x,
                views: &m.views,
            };
            call(c, &ops, &mut y[..m.w.rows()])?;
        }
        Ok(())
    }
}

/// The token section: per-token time of the matvecs of SmolLM2-135M's
/// decode for the arm, every twin and the peer (reading the same matrices
/// in the same order, per call split the same way), at 1 and 2 threads;
/// interleaved rounds, medians. Returns the rows (median = s per token).
fn measure_token(host: &Host, arm: &Arc<Q8MatvecKernel>) -> Result<(u64, Vec<Row>), String> {
    let seq = TokenSequence::new()?;
    // The twins' bodies do not depend on the geometry: emit them once.
    let twins = twins(host, 576, 576, 1)?;
    let cands = candidates(arm, &twins);
    let mut y = vec![0f32; TOKEN_OUTPUT.0];
    for c in &cands {
        seq.run(c, &mut y)?;
    }
    let mut samples = vec![Vec::with_capacity(ROUNDS); cands.len()];
    for round in 0..ROUNDS {
        for i in 0..cands.len() {
            let j = (i + round) % cands.len();
            let t = Instant::now();
            for _ in 0..TOKEN_REPS {
                seq.run(&cands[j], &mut y)?;
            }
            samples[j].push(t.elapsed().as_secs_f64() / TOKEN_REPS as f64);
        }
    }
    let rows = cands
        .iter()
        .zip(&samples)
        .map(|(c, s)| {
            Ok(Row {
                name: c.name.clone(),
                kind: c.kind,
                threads: c.threads,
                median: median(s).ok_or("no samples")?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok((seq.bytes(), rows))
}

/// Print the token section and its summary line.
fn print_token(bytes: u64, rows: &[Row]) {
    println!();
    println!(
        "SmolLM2-135M decode matvecs, batch 1: {TOKEN_LAYERS} layers × {} + output {}×{}, \
         {:.1} MB of weights per token (from DRAM: more than L3)",
        TOKEN_LAYER.len(),
        TOKEN_OUTPUT.0,
        TOKEN_OUTPUT.1,
        bytes as f64 / 1e6
    );
    println!(
        "  {:<32} {:>3} {:>10} {:>8} {:>8}",
        "candidate", "thr", "ms/token", "GB/s", "ceiling"
    );
    for r in rows {
        let of_ceiling = ceiling_of(rows, r.threads).map_or(f64::NAN, |c| c.fraction(r.median));
        println!(
            "  {:<32} {:>3} {:>10.2} {:>8.1} {:>8.2}",
            r.name,
            r.threads,
            r.median * 1e3,
            bytes as f64 / r.median / 1e9,
            of_ceiling
        );
    }
    let best = |kind: Kind, t: u64| {
        rows.iter()
            .filter(|r| r.kind == kind && r.threads == t)
            .map(|r| r.median)
            .min_by(f64::total_cmp)
    };
    let ms = |v: Option<f64>| fmt_opt(v.map(|s| s * 1e3));
    let (c1, c2) = (ceiling_of(rows, 1), ceiling_of(rows, 2));
    let fraction = |c: &Option<Ceiling>, t: u64| {
        fmt_fraction(
            c.as_ref()
                .zip(best(Kind::Twin, t))
                .map(|(c, s)| c.fraction(s)),
        )
    };
    let label = |c: &Option<Ceiling>| c.as_ref().map_or("absent".to_owned(), Ceiling::label);
    println!(
        "bench q8-matvec token: best_twin_ms_1t={} best_twin_ms_2t={} ceiling_ms_1t={} ceiling_ms_2t={} \
         ceiling_fraction_1t={} ceiling_fraction_2t={} ceiling_1t={} ceiling_2t={}",
        ms(best(Kind::Twin, 1)),
        ms(best(Kind::Twin, 2)),
        ms(c1.as_ref().map(|c| c.secs)),
        ms(c2.as_ref().map(|c| c.secs)),
        fraction(&c1, 1),
        fraction(&c2, 2),
        label(&c1),
        label(&c2),
    );
}

/// Entry point: `bench q8-matvec`.
pub fn run(args: &[String]) -> Result<(), String> {
    let token_only = match args {
        [name] if name == "q8-matvec" => false,
        [name, only] if name == "q8-matvec" && only == "token" => true,
        [name, extra, ..] if name == "q8-matvec" => {
            return Err(format!(
                "bench q8-matvec takes no arguments but `token` (got `{extra}`)"
            ))
        }
        _ => return Err(format!("bench q8-matvec: unexpected arguments {args:?}")),
    };
    if cfg!(debug_assertions) {
        println!("  (debug build: run `cargo run --release -p xtask -- bench q8-matvec` for real figures)");
    }
    let host = Host::detect();
    let (l2, l2_source) = match host.caches.l2 {
        Some(b) if b > 0 => (u64::from(b), "detected"),
        _ => (L2_FALLBACK, "unknown, assumed"),
    };
    let arm = Arc::new(Q8MatvecKernel::of_arm().map_err(|e| format!("{ARM_NAME}: {e}"))?);
    let present: Vec<&str> = TWINS
        .iter()
        .filter(|t| weft_kernel::require_features(&host, t.requires()).is_ok())
        .map(|t| t.name())
        .collect();
    println!(
        "bench q8-matvec: {} ({} logical cores), L2 {} KiB ({l2_source}); twins: {}",
        host.model,
        host.logical_cores,
        l2 / 1024,
        if present.is_empty() {
            "absent".to_string()
        } else {
            present.join(", ")
        }
    );
    println!(
        "  {ROUNDS} interleaved rounds, ~{} ms per sample, medians; \
         GB/s counts W's bytes, `vs arm` is arm median / candidate median at the same threads",
        SAMPLE_SECS * 1e3
    );
    let (token_bytes, token_rows) = measure_token(&host, &arm)?;
    print_token(token_bytes, &token_rows);
    if token_only {
        return Ok(());
    }
    let mut all = Vec::new();
    for (i, &(rows, cols)) in SHAPES.iter().enumerate() {
        let w = random_weights(rows, cols, 0x2545_F491_4F6C_DD1D + i as u64)?;
        for batch in BATCHES {
            let m = measure(&host, &arm, &w, cols, batch)?;
            print_table(&m, l2);
            all.push(m);
        }
    }
    let s = summarize(&all, l2);
    let points: Vec<Point> = all
        .iter()
        .flat_map(|m| {
            m.results
                .iter()
                .filter(|r| r.threads == 1 && r.kind != Kind::Stream)
                .map(|r| Point {
                    family: "q8_0.matvec".into(),
                    candidate: r.name.clone(),
                    kind: if r.kind == Kind::Arm { "arm" } else { "twin" }.into(),
                    shape: format!("{}×{} batch {}", m.rows, m.cols, m.batch),
                    arith: Arith::Int8,
                    work: (2 * m.rows * m.cols * m.batch) as f64,
                    bytes: m.weight_bytes() as f64,
                    secs: r.median,
                })
        })
        .collect();
    let saved = results::save("q8-matvec", &host.model, &points)?;
    println!();
    println!(
        "  one-thread points for `cargo xtask roofline`: {}",
        saved.display()
    );
    let fraction = |c: &Option<(f64, String)>| fmt_fraction(c.as_ref().map(|c| c.0));
    let label = |c: &Option<(f64, String)>| c.as_ref().map_or("absent".to_owned(), |c| c.1.clone());
    println!(
        "bench q8-matvec: best_twin_vs_arm_l2={} ceiling_fraction_1t={} ceiling_fraction_2t={} ceiling_1t={} ceiling_2t={}",
        fmt_opt(s.best_twin_vs_arm_l2),
        fraction(&s.ceiling_1t),
        fraction(&s.ceiling_2t),
        label(&s.ceiling_1t),
        label(&s.ceiling_2t),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: Kind, threads: u64, median: f64) -> Row {
        Row {
            name: format!("{kind:?}"),
            kind,
            threads,
            median,
        }
    }

    fn shape(rows: usize, cols: usize, batch: usize, results: Vec<Row>) -> Measured {
        Measured {
            rows,
            cols,
            batch,
            results,
        }
    }

    #[test]
    fn median_of_odd_even_and_none() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[5.0]), Some(5.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn summary_takes_the_minimum_over_l2_shapes_and_the_ceiling_fractions_at_the_dram_shape() {
        let l2 = 1 << 20;
        let all = vec![
            // 576×576: 352512 bytes, in L2; arm/best twin = 4/2 = 2.0
            shape(
                576,
                576,
                1,
                vec![
                    row(Kind::Arm, 1, 4.0),
                    row(Kind::Twin, 1, 3.0),
                    row(Kind::Twin, 1, 2.0),
                    row(Kind::Twin, 2, 0.1), // 2 threads: ignored
                ],
            ),
            // batch 4: 3/2 = 1.5, the minimum
            shape(
                576,
                576,
                4,
                vec![row(Kind::Arm, 1, 3.0), row(Kind::Twin, 1, 2.0)],
            ),
            // 4096×4096 is not in a 1 MiB L2: its 0.5 is ignored
            shape(
                4096,
                4096,
                1,
                vec![row(Kind::Arm, 1, 1.0), row(Kind::Twin, 1, 2.0)],
            ),
            shape(
                4096,
                14336,
                1,
                vec![
                    row(Kind::Arm, 1, 9.0),
                    row(Kind::Twin, 1, 5.0),
                    row(Kind::Twin, 1, 4.0),
                    row(Kind::Stream, 1, 3.0),
                    row(Kind::Twin, 2, 2.5),
                    row(Kind::Stream, 2, 2.0),
                ],
            ),
            // batch 4 of the DRAM shape does not count
            shape(
                4096,
                14336,
                4,
                vec![row(Kind::Twin, 1, 100.0), row(Kind::Stream, 1, 1.0)],
            ),
        ];
        let s = summarize(&all, l2);
        assert_eq!(s.best_twin_vs_arm_l2, Some(1.5));
        assert_eq!(s.ceiling_1t, Some((0.75, "Stream/1t".to_owned())));
        assert_eq!(s.ceiling_2t, Some((0.8, "Stream/2t".to_owned())));
        // a 64 MiB L2 takes every shape in: 4096×4096 (17 MiB) gives 0.5
        assert_eq!(summarize(&all, 64 << 20).best_twin_vs_arm_l2, Some(0.5));
    }

    #[test]
    fn summary_without_twins_is_absent() {
        let all = vec![
            shape(
                576,
                576,
                1,
                vec![row(Kind::Arm, 1, 4.0), row(Kind::Stream, 1, 1.0)],
            ),
            shape(
                4096,
                14336,
                1,
                vec![row(Kind::Arm, 1, 4.0), row(Kind::Stream, 1, 1.0)],
            ),
        ];
        let s = summarize(&all, 1 << 20);
        assert_eq!(
            s,
            Summary {
                best_twin_vs_arm_l2: None,
                ceiling_1t: None,
                ceiling_2t: None,
            }
        );
        assert_eq!(fmt_opt(None), "absent");
        assert_eq!(fmt_opt(Some(0.456)), "0.46");
    }

    #[test]
    fn weight_bytes_and_scales() {
        let m = shape(576, 576, 1, Vec::new());
        assert_eq!(m.weight_bytes(), 576 * 18 * 34);
        let w = random_weights(2, 64, 1).expect("weights");
        for b in w.bytes().chunks_exact(BLOCK_BYTES) {
            let e = (u16::from_le_bytes([b[0], b[1]]) >> 10) & 0x1f;
            assert!((6..=9).contains(&e), "exponent {e}");
        }
    }
}
