//! `cargo xtask bench gemm`: f32 `C = A·B` (`α = 1`, `β = 0`) through
//! Weft next to three peer libraries and the FMA peak, at 1 and 2
//! threads, per shape:
//!
//! - square 256³, 512³, 1024³, 2048³;
//! - a language model's projections: `m` = 1, 4, 16, 64, 512 tokens ×
//!   `k` = 576 → `n` = 1536, and the transpose (`k` = 1536 → `n` = 576);
//! - ResNet-like convolutions as im2col products: 3136 × 576 → 64,
//!   784 × 1152 → 128, 196 × 2304 → 256.
//!
//! `cargo xtask bench gemm --quick` runs a subset ([`Shape::quick`]:
//! 512³, 1024³, two token counts of each projection and one convolution)
//! with fewer rounds; `--only=LABEL,…` keeps the shapes whose label
//! (`square m1024 n1024 k1024`) contains one of the given pieces.
//!
//! Candidates, in the same interleaved rounds:
//!
//! - **the planner's pick**: a plan compiled by `weft_plan::Planner` (this
//!   host, a catalogue with `weft_gemm::entry()`, an in-memory cache, so
//!   it validates and races anew) for `weft_gemm::site(m, n, k,
//!   BLayout::Rows, Some(&b))`: B is a plan-time constant, like a layer's
//!   weights, so a packing arm packs it **once, at plan time**, and the
//!   timed calls read the packed copy (the peers pack B inside every
//!   call, as their APIs do). Run by `SiteKernel::run` with a one-thread
//!   executor and with a two-thread one;
//! - **every twin** of every arm that the host runs (its `requires()`
//!   against the host's features) and whose arm offers the site, emitted
//!   for that offer, checked against the arm by the family's `TwinCheck`
//!   (a twin it refuses is not timed), called directly at 1 thread and
//!   split over the offer's member views by `weft_plan::Executor::run` at
//!   2;
//! - **every arm** that offers the site, built by Cranelift, likewise;
//! - **the peers** (module [`peers`]): the `gemm` crate, `matrixmultiply`
//!   (1 thread) and OpenBLAS (`dlopen` of `libopenblas.so.0`);
//! - **the FMA loop** of [`crate::peaks`] (1 thread; the 2-thread peak is
//!   taken as twice it).
//!
//! Before timing, per shape: the planner's output is checked bit for bit
//! against the family's contract (`f32::mul_add` in `k` order) at
//! [`SPOT_CHECKS`] outputs, every other Weft body (twins, arms, the plan
//! at 2 threads) must give exactly its bits, and every peer at every
//! thread count must be within [`PEER_TOLERANCE`] × Σₖ|a·b| of it at
//! every output (peers sum in another order), so a broken peer cannot
//! look fast: one that is not is reported and left out.
//!
//! Protocol: every candidate is warmed up and its calls per sample
//! calibrated (about [`SAMPLE_SECS`], at least one call), then the rounds
//! run, each candidate taking one sample per round, the first candidate
//! rotating; each reports its median. Tables give GFLOP/s (`2·m·n·k`
//! flops), the fraction of the FMA peak (× threads) and the ratio to the
//! fastest peer at the same thread count (peer median / candidate median:
//! above 1, the candidate is faster).
//!
//! The last line is the summary (see [`summarize`]):
//! `bench gemm: peak_fraction_1t=… peak_fraction_2t=… vs_best_peer_1t=…
//! vs_best_peer_2t=… planner_vs_best_twin=…`. The one-thread points of
//! every arm and twin are saved for `cargo xtask roofline`.
//! `cargo xtask bench` always runs from a release build (see `main.rs`).

mod peers;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use weft_gemm::{BLayout, GemmArgs, MatRef, SiteOperands};
use weft_kernel::{ArmEntry, Host, Isa, Judged, Kernel, MemberViews, Offer};
use weft_plan::{CacheLocation, Catalogue, CompiledPlan, Executor, Options, Planner, SiteKernel};

use crate::ceiling::fmt_fraction;
use crate::peaks::{self, PeakArgs, PEAK_ITERS};
use crate::results::{self, Arith, Point};
use peers::Peer;

/// Interleaved rounds (full run); the median is reported.
const ROUNDS: usize = 7;
/// Interleaved rounds with `--quick`.
const QUICK_ROUNDS: usize = 5;
/// Target duration of one sample.
const SAMPLE_SECS: f64 = 0.040;
/// Upper bound on calls per sample.
const MAX_REPS: usize = 20_000;
/// Thread counts of every candidate but the peak.
const THREADS: [u64; 2] = [1, 2];
/// Outputs of the planner's result checked against the contract.
const SPOT_CHECKS: usize = 256;
/// A peer's output may differ from Weft's by this much of Σₖ|a·b| (the
/// sum of the products' magnitudes): far above the rounding of any order
/// of summation at these `k`, far below any wrong product.
const PEER_TOLERANCE: f64 = 1e-4;
/// The square sizes the summary's peak and peer figures are taken at.
const HEADLINE: [usize; 2] = [512, 1024];

/// One shape of the bench.
#[derive(Clone, Debug, PartialEq)]
struct Shape {
    /// What it stands for (`square`, `llm`, `conv`).
    what: &'static str,
    m: usize,
    n: usize,
    k: usize,
    /// Whether `--quick` runs it.
    quick: bool,
}

impl Shape {
    fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }

    /// Bytes every body must read or write once: A, B and C.
    fn bytes(&self) -> f64 {
        4.0 * (self.m * self.k + self.k * self.n + self.m * self.n) as f64
    }

    /// `512×512×512` style: m×n×k.
    fn label(&self) -> String {
        format!("{} m{} n{} k{}", self.what, self.m, self.n, self.k)
    }

    /// Whether the summary's peak and peer figures are taken here.
    fn headline(&self) -> bool {
        self.what == "square" && HEADLINE.contains(&self.m)
    }
}

/// Every shape of the full run, in order.
fn shapes() -> Vec<Shape> {
    let mut v = Vec::new();
    for s in [256, 512, 1024, 2048] {
        v.push(Shape {
            what: "square",
            m: s,
            n: s,
            k: s,
            quick: HEADLINE.contains(&s),
        });
    }
    for (k, n) in [(576, 1536), (1536, 576)] {
        for m in [1, 4, 16, 64, 512] {
            v.push(Shape {
                what: "llm",
                m,
                n,
                k,
                quick: m == 1 || m == 64,
            });
        }
    }
    for (m, k, n, quick) in [
        (3136, 576, 64, true),
        (784, 1152, 128, false),
        (196, 2304, 256, false),
    ] {
        v.push(Shape {
            what: "conv",
            m,
            n,
            k,
            quick,
        });
    }
    v
}

/// What a candidate is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// The plan's body, run as a plan runs it.
    Planner,
    /// A twin, called directly.
    Twin,
    /// An arm, called directly.
    Arm,
    /// A peer library.
    Peer,
    /// The FMA register loop.
    Peak,
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

/// All results at one shape.
#[derive(Clone, Debug, PartialEq)]
struct Measured {
    shape: Shape,
    /// The planner's chosen candidate.
    pick: String,
    /// Flops of one call of the peak loop (`None`: no peak on this host).
    peak_flops: Option<f64>,
    results: Vec<Row>,
}

impl Measured {
    /// The smallest median of the candidates of `kind` at `threads`.
    fn best(&self, kind: Kind, threads: u64) -> Option<f64> {
        self.results
            .iter()
            .filter(|r| r.kind == kind && r.threads == threads)
            .map(|r| r.median)
            .min_by(f64::total_cmp)
    }

    /// The FMA peak on `threads` threads, flops per second (the one-thread
    /// loop's rate × threads).
    fn peak(&self, threads: u64) -> Option<f64> {
        Some(self.peak_flops? / self.best(Kind::Peak, 1)? * threads as f64)
    }

    /// The fraction of the FMA peak a median of `secs` at `threads` is.
    fn of_peak(&self, secs: f64, threads: u64) -> Option<f64> {
        Some(self.shape.flops() / secs / self.peak(threads)?)
    }

    /// Best peer's median / `secs` at `threads` (above 1: faster than
    /// every peer).
    fn vs_best_peer(&self, secs: f64, threads: u64) -> Option<f64> {
        Some(self.best(Kind::Peer, threads)? / secs)
    }

    /// The best twin at 1 thread, else (no twin offers here) the best arm,
    /// with which it is.
    fn best_body(&self) -> Option<(f64, Kind)> {
        self.best(Kind::Twin, 1)
            .map(|s| (s, Kind::Twin))
            .or_else(|| self.best(Kind::Arm, 1).map(|s| (s, Kind::Arm)))
    }
}

/// The summary figures (`None` when a candidate is absent).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Summary {
    peak_fraction_1t: Option<f64>,
    peak_fraction_2t: Option<f64>,
    vs_best_peer_1t: Option<f64>,
    vs_best_peer_2t: Option<f64>,
    planner_vs_best_twin: Option<f64>,
    /// Whether some shape had no twin, so its best arm stood in.
    arm_stood_in: bool,
}

/// The minimum of `f` over the headline shapes (`None` if none was
/// measured or any is absent).
fn min_over_headline(all: &[Measured], f: impl Fn(&Measured) -> Option<f64>) -> Option<f64> {
    let mut out: Option<f64> = None;
    let mut any = false;
    for m in all.iter().filter(|m| m.shape.headline()) {
        any = true;
        let v = f(m)?;
        out = Some(out.map_or(v, |o| o.min(v)));
    }
    out.filter(|_| any)
}

/// Weft's body in the summary is the planner's pick, run as a plan runs
/// it:
///
/// - `peak_fraction_1t` / `_2t`: its GFLOP/s over the FMA peak (× 2 at
///   two threads), the minimum of 512³ and 1024³;
/// - `vs_best_peer_1t` / `_2t`: the fastest peer's median over its median
///   at the same thread count (above 1: Weft is faster), the minimum of
///   512³ and 1024³;
/// - `planner_vs_best_twin`: its median over the best twin's, one thread,
///   the worst (largest) over every shape measured; where no twin offers
///   (none written for this host yet), the best arm stands in.
fn summarize(all: &[Measured]) -> Summary {
    let planner = |m: &Measured, t: u64| m.best(Kind::Planner, t);
    Summary {
        peak_fraction_1t: min_over_headline(all, |m| m.of_peak(planner(m, 1)?, 1)),
        peak_fraction_2t: min_over_headline(all, |m| m.of_peak(planner(m, 2)?, 2)),
        vs_best_peer_1t: min_over_headline(all, |m| m.vs_best_peer(planner(m, 1)?, 1)),
        vs_best_peer_2t: min_over_headline(all, |m| m.vs_best_peer(planner(m, 2)?, 2)),
        planner_vs_best_twin: all
            .iter()
            .filter_map(|m| Some(planner(m, 1)? / m.best_body()?.0))
            .max_by(f64::total_cmp),
        arm_stood_in: all
            .iter()
            .any(|m| matches!(m.best_body(), Some((_, Kind::Arm)))),
    }
}

/// The median of `v` (the mean of the middle two for an even count).
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

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or_else(|| "absent".to_owned(), |v| format!("{v:.2}"))
}

// ------------------------------------------------------------ operands ---

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

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// A, B (dense, row-major) and C of one shape.
struct Operands {
    m: usize,
    n: usize,
    k: usize,
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

impl Operands {
    fn new(s: &Shape, seed: u64) -> Operands {
        let mut rng = Rng(seed | 1);
        Operands {
            m: s.m,
            n: s.n,
            k: s.k,
            a: (0..s.m * s.k).map(|_| rng.unit()).collect(),
            b: (0..s.k * s.n).map(|_| rng.unit()).collect(),
            c: vec![0.0; s.m * s.n],
        }
    }

    /// Arguments for the whole of C (α = 1, β = 0) for a body whose
    /// offer packed `ops` (or reads B in rows).
    fn args(&mut self, ops: &SiteOperands) -> Result<GemmArgs, String> {
        ops.args(
            MatRef::dense(&self.a, self.m, self.k),
            Some(MatRef::dense(&self.b, self.k, self.n)),
            &mut self.c,
            self.n,
            (1.0, 0.0),
        )
        .map_err(|e| e.to_string())
    }
}

// ---------------------------------------------------------- candidates ---

/// A Weft body called directly: an arm's or a twin's, with its offer's
/// operands (B packed if the offer packs it) and member views.
struct Body {
    kernel: Kernel<GemmArgs>,
    ops: SiteOperands,
    views: Option<MemberViews>,
}

/// How a candidate runs.
enum Runner<'a> {
    Planner(&'a SiteKernel<GemmArgs>, &'a SiteOperands),
    Body(Arc<Body>),
    Peer(Peer),
    Peak(&'a Kernel<PeakArgs>),
}

/// One candidate at one thread count.
struct Candidate<'a> {
    name: String,
    kind: Kind,
    threads: u64,
    runner: Runner<'a>,
}

/// The executors: one thread (calls on the caller) and two.
struct Executors {
    one: Executor,
    two: Executor,
}

impl Executors {
    fn on(&self, threads: u64) -> &Executor {
        if threads == 1 {
            &self.one
        } else {
            &self.two
        }
    }
}

/// `reps` calls of `c`; seconds per call.
fn sample(c: &Candidate<'_>, x: &mut Operands, ex: &Executors, reps: usize) -> Result<f64, String> {
    let (m, n, k) = (x.m, x.n, x.k);
    let t = match &c.runner {
        Runner::Planner(kernel, ops) => {
            let args = x.args(ops)?;
            let exec = ex.on(c.threads);
            let t = Instant::now();
            for _ in 0..reps {
                // SAFETY: `args` was checked against A, B (or the site's
                // packed B, owned by `ops`) and C, which live and are not
                // otherwise touched until the loop ends.
                unsafe { kernel.run(exec, black_box(&args)) };
            }
            t.elapsed()
        }
        Runner::Body(b) => {
            let args = x.args(&b.ops)?;
            let t = Instant::now();
            for _ in 0..reps {
                match (&b.views, c.threads) {
                    // SAFETY: as above; the executor splits `args` along the
                    // offer's member views into disjoint rectangles of C
                    // (`KernelArgs`) and returns when every part is done.
                    (Some(v), 2) => unsafe { ex.two.run(&b.kernel, black_box(&args), v) },
                    // SAFETY: as above.
                    _ => unsafe { b.kernel.call(black_box(&args)) },
                }
            }
            t.elapsed()
        }
        Runner::Peer(p) => {
            let t = Instant::now();
            for _ in 0..reps {
                p.sgemm(c.threads, (m, n, k), &x.a, &x.b, &mut x.c)?;
                black_box(&mut x.c);
            }
            t.elapsed()
        }
        Runner::Peak(kernel) => {
            let args = PeakArgs { iters: PEAK_ITERS };
            let t = Instant::now();
            for _ in 0..reps {
                // SAFETY: a peak body reads only `iters` and returns.
                unsafe { kernel.call(black_box(&args)) };
            }
            t.elapsed()
        }
    };
    Ok(t.as_secs_f64() / reps as f64)
}

/// Warm-up and calibration: calls per sample for `c`.
fn calibrate(c: &Candidate<'_>, x: &mut Operands, ex: &Executors) -> Result<usize, String> {
    sample(c, x, ex, 1)?;
    let once = sample(c, x, ex, 1)?;
    let reps = ((SAMPLE_SECS / once.max(1e-9)).ceil() as usize).clamp(1, MAX_REPS);
    if reps > 1 {
        sample(c, x, ex, reps)?;
    }
    Ok(reps)
}

/// The arm's body for `offer` and every twin of it the host runs, each
/// checked against the arm (a refused twin is printed and left out).
fn bodies(
    host: &Host,
    entry: &ArmEntry,
    offer: &Offer,
    (k, n): (usize, usize),
) -> Result<Vec<(String, Kind, Arc<Body>)>, String> {
    let arm = entry.arm.name();
    let body = |code: &weft_kernel::NativeCode, name: &str| -> Result<Arc<Body>, String> {
        // SAFETY: arms and twins of `f32.gemm` promise (their unsafe
        // traits) a leaf-ABI body for `GemmArgs` for this offer.
        let kernel =
            unsafe { Kernel::<GemmArgs>::from_native(code) }.map_err(|e| format!("{name}: {e}"))?;
        let ops = SiteOperands::new(
            offer.packed.iter().find(|p| p.name == "b"),
            offer.views.as_ref(),
            k,
            n,
        )
        .map_err(|e| format!("{name}: {e}"))?;
        Ok(Arc::new(Body {
            kernel,
            ops,
            views: offer.views.clone(),
        }))
    };
    let arm_code = entry
        .arm
        .build(offer, Isa::of_target())
        .map_err(|e| format!("{arm}: {e}"))?;
    let mut out = vec![(arm.to_owned(), Kind::Arm, body(&arm_code, arm)?)];
    for twin in &entry.twins {
        if twin.isa() != Isa::of_target()
            || weft_kernel::require_features(host, twin.requires()).is_err()
        {
            continue;
        }
        let name = twin.name();
        let code = match twin.emit(offer) {
            Ok(c) => c,
            Err(e) => {
                println!("  {name}: not emitted for {arm}'s offer: {e}");
                continue;
            }
        };
        let judged = entry.check.check(
            Judged {
                name: arm,
                code: &arm_code,
            },
            Judged { name, code: &code },
            offer,
            host,
            0x5eed_9e44,
        );
        match judged {
            Ok(_) => out.push((name.to_owned(), Kind::Twin, body(&code, name)?)),
            Err(e) => println!("  {name}: REFUSED by the check against {arm}: {e}"),
        }
    }
    Ok(out)
}

/// The twins the host runs, by name, over every arm of the family.
fn host_twins(host: &Host) -> Vec<&'static str> {
    let entry = weft_gemm::entry();
    let mut v: Vec<&'static str> = entry
        .twins()
        .map(|(_, t)| t)
        .filter(|t| {
            t.isa() == Isa::of_target() && weft_kernel::require_features(host, t.requires()).is_ok()
        })
        .map(|t| t.name())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

// ---------------------------------------------------------- correctness ---

/// The contract's value of `C[i, j]` (α = 1, β = 0): `fma` in `k` order.
fn contract_output(x: &Operands, i: usize, j: usize) -> f32 {
    let mut acc = 0.0f32;
    for kk in 0..x.k {
        acc = x.a[i * x.k + kk].mul_add(x.b[kk * x.n + j], acc);
    }
    acc
}

/// Σₖ|a·b| for every output, by the planner's own body on |A| and |B|
/// (checked against the contract first, so it is right).
fn magnitudes(
    x: &Operands,
    plan: &CompiledPlan,
    kernel: &SiteKernel<GemmArgs>,
    ex: &Executors,
) -> Result<Vec<f32>, String> {
    let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<f32>>();
    let (a, b) = (abs(&x.a), abs(&x.b));
    let site = &plan.sites()[0];
    let packed = site
        .packed("b")
        .map(|_| weft_gemm::PackedB::pack(MatRef::dense(&b, x.k, x.n), BLayout::Rows))
        .transpose()
        .map_err(|e| e.to_string())?;
    let axis = site
        .views
        .as_ref()
        .and_then(|v| weft_gemm::Axis::of_view(&v.axis))
        .unwrap_or(weft_gemm::Axis::M);
    let bref = match &packed {
        Some(p) => weft_gemm::BRef::Panels(p),
        None => weft_gemm::BRef::Rows(MatRef::dense(&b, x.k, x.n)),
    };
    let mut s = vec![0.0f32; x.m * x.n];
    let args = GemmArgs::new(
        MatRef::dense(&a, x.m, x.k),
        bref,
        &mut s,
        x.n,
        (1.0, 0.0),
        0..x.m,
        0..x.n,
        axis,
    )
    .map_err(|e| e.to_string())?;
    // SAFETY: `args` was checked against |A|, |B| (or its panels) and `s`,
    // all alive until the call returns.
    unsafe { kernel.run(&ex.two, &args) };
    Ok(s)
}

/// The first output of `got` farther from `want` than the tolerance.
fn peer_mismatch(got: &[f32], want: &[f32], mags: &[f32], n: usize) -> Option<String> {
    got.iter()
        .zip(want)
        .zip(mags)
        .enumerate()
        .find(|(_, ((g, w), s))| {
            let diff = (f64::from(**g) - f64::from(**w)).abs();
            let bound = PEER_TOLERANCE * f64::from(**s) + f64::from(f32::MIN_POSITIVE);
            // A NaN difference is no closer than the bound either.
            diff.is_nan() || diff > bound
        })
        .map(|(i, ((g, w), s))| {
            format!(
                "C[{}, {}] = {g}, Weft's is {w} (Σ|a·b| = {s})",
                i / n,
                i % n
            )
        })
}

/// Run every candidate once and check it (module docs); returns the
/// candidates that may be timed.
fn checked<'a>(
    cands: Vec<Candidate<'a>>,
    x: &mut Operands,
    ex: &Executors,
    plan: &CompiledPlan,
    kernel: &SiteKernel<GemmArgs>,
) -> Result<Vec<Candidate<'a>>, String> {
    // The planner's output at 1 thread, against the contract.
    let first = cands
        .iter()
        .find(|c| c.kind == Kind::Planner && c.threads == 1)
        .ok_or("no planner candidate")?;
    x.c.fill(f32::NAN);
    sample(first, x, ex, 1)?;
    let want = x.c.clone();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for s in 0..SPOT_CHECKS {
        // the corners, then random outputs
        let (i, j) = match s {
            0 => (0, 0),
            1 => (x.m - 1, x.n - 1),
            _ => (
                (rng.next() % x.m as u64) as usize,
                (rng.next() % x.n as u64) as usize,
            ),
        };
        let c = contract_output(x, i, j);
        if c.to_bits() != want[i * x.n + j].to_bits() {
            return Err(format!(
                "the planner's body ({}) gives C[{i}, {j}] = {}, the contract {c}",
                first.name,
                want[i * x.n + j]
            ));
        }
    }
    let mags = magnitudes(x, plan, kernel, ex)?;
    let mut out = Vec::new();
    for c in cands {
        if c.kind == Kind::Peak {
            out.push(c);
            continue;
        }
        x.c.fill(f32::NAN);
        sample(&c, x, ex, 1)?;
        if c.kind == Kind::Peer {
            if let Some(why) = peer_mismatch(&x.c, &want, &mags, x.n) {
                println!(
                    "  {} at {} thread(s): REFUSED, wrong product: {why}",
                    c.name, c.threads
                );
                continue;
            }
        } else if let Some(i) = (0..want.len()).find(|&i| x.c[i].to_bits() != want[i].to_bits()) {
            return Err(format!(
                "{} at {} thread(s) gives C[{}, {}] = {}, the planner's body {}: \
                 the family's bodies must agree bit for bit",
                c.name,
                c.threads,
                i / x.n,
                i % x.n,
                x.c[i],
                want[i]
            ));
        }
        out.push(c);
    }
    Ok(out)
}

// ------------------------------------------------------------- measure ---

/// Everything one run shares across shapes.
struct Bench {
    host: Host,
    planner: Planner,
    ex: Executors,
    peers: Vec<Peer>,
    peak: Option<(Kernel<PeakArgs>, f64)>,
    rounds: usize,
}

/// Compile the shape's plan, check every candidate and time them.
fn measure(bench: &mut Bench, shape: &Shape, seed: u64) -> Result<Measured, String> {
    let mut x = Operands::new(shape, seed);
    let (m, n, k) = (shape.m, shape.n, shape.k);
    let site = weft_gemm::site(m, n, k, BLayout::Rows, Some(&x.b));
    let t = Instant::now();
    let plan = bench
        .planner
        .compile(std::slice::from_ref(&site))
        .map_err(|e| e.to_string())?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let cs = &plan.sites()[0];
    let pick = cs.candidate.to_owned();
    println!();
    println!(
        "{}: {:.1} MFLOP per call; the planner picked {} ({:?}, {:.0} ms to plan, B {})",
        shape.label(),
        shape.flops() / 1e6,
        pick,
        cs.rule,
        compile_ms,
        if cs.packed("b").is_some() {
            "packed at plan time"
        } else {
            "read in rows"
        }
    );
    let kernel = plan
        .kernel::<GemmArgs>(0)
        .map_err(|e| format!("the plan's kernel: {e}"))?;
    let plan_ops = SiteOperands::new(cs.packed("b"), cs.views.as_ref(), k, n)
        .map_err(|e| format!("the plan's operands: {e}"))?;
    // Every arm that offers the site, with its twins.
    let entry = weft_gemm::entry();
    let mut bodies_all = Vec::new();
    for arm in &entry.arms {
        match arm.arm.offer(&site, &bench.host) {
            Ok(offer) => bodies_all.extend(bodies(&bench.host, arm, &offer, (k, n))?),
            Err(e) => println!("  {}: no offer ({e})", arm.arm.name()),
        }
    }
    // Twins first, then arms, each at both thread counts.
    bodies_all.sort_by_key(|(_, kind, _)| *kind != Kind::Twin);
    let mut cands = Vec::new();
    if let Some((p, _)) = &bench.peak {
        cands.push(Candidate {
            name: "FMA peak loop".to_owned(),
            kind: Kind::Peak,
            threads: 1,
            runner: Runner::Peak(p),
        });
    }
    for threads in THREADS {
        cands.push(Candidate {
            name: format!("planner: {pick}"),
            kind: Kind::Planner,
            threads,
            runner: Runner::Planner(&kernel, &plan_ops),
        });
        for (name, kind, body) in &bodies_all {
            cands.push(Candidate {
                name: name.clone(),
                kind: *kind,
                threads,
                runner: Runner::Body(Arc::clone(body)),
            });
        }
        for p in bench.peers.iter().filter(|p| p.runs_on(threads)) {
            cands.push(Candidate {
                name: p.name().to_owned(),
                kind: Kind::Peer,
                threads,
                runner: Runner::Peer(*p),
            });
        }
    }
    let cands = checked(cands, &mut x, &bench.ex, &plan, &kernel)?;
    let reps = cands
        .iter()
        .map(|c| calibrate(c, &mut x, &bench.ex))
        .collect::<Result<Vec<_>, _>>()?;
    let mut samples = vec![Vec::with_capacity(bench.rounds); cands.len()];
    for round in 0..bench.rounds {
        for i in 0..cands.len() {
            let j = (i + round) % cands.len();
            samples[j].push(sample(&cands[j], &mut x, &bench.ex, reps[j])?);
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
        shape: shape.clone(),
        pick,
        peak_flops: bench.peak.as_ref().map(|p| p.1),
        results,
    })
}

/// Print one shape's table.
fn print_table(m: &Measured) {
    println!(
        "  {:<46} {:>3} {:>11} {:>8} {:>8} {:>9}",
        "candidate", "thr", "median ms", "GFLOP/s", "of peak", "vs peer"
    );
    for r in &m.results {
        let (gflops, of_peak, vs_peer) = match r.kind {
            Kind::Peak => (
                m.peak(1)
                    .map_or("-".to_owned(), |p| format!("{:.1}", p / 1e9)),
                "1.00".to_owned(),
                "-".to_owned(),
            ),
            _ => (
                format!("{:.1}", m.shape.flops() / r.median / 1e9),
                fmt_opt(m.of_peak(r.median, r.threads)),
                fmt_opt(m.vs_best_peer(r.median, r.threads)),
            ),
        };
        println!(
            "  {:<46} {:>3} {:>11.4} {:>8} {:>8} {:>9}",
            r.name,
            r.threads,
            r.median * 1e3,
            gflops,
            of_peak,
            vs_peer
        );
    }
    let best = match m.best_body() {
        Some((s, Kind::Twin)) => format!("best twin {:.4} ms", s * 1e3),
        Some((s, _)) => format!("best twin none (best arm {:.4} ms)", s * 1e3),
        None => "best twin none".to_owned(),
    };
    println!(
        "  planner's pick {} at 1 thread: {}; planner / best = {}",
        m.pick,
        best,
        fmt_opt(
            m.best(Kind::Planner, 1)
                .zip(m.best_body())
                .map(|(p, (b, _))| p / b)
        )
    );
}

/// What the command line asks for.
#[derive(Debug, Default, PartialEq)]
struct Args {
    /// `--quick`: the quick shapes and rounds.
    quick: bool,
    /// `--only=a,b`: only shapes whose label contains one of these
    /// (`square m1024`, `llm m1 `, `conv`); empty: every shape.
    only: Vec<String>,
}

impl Args {
    fn wants(&self, shape: &Shape) -> bool {
        let label = format!("{} ", shape.label());
        (!self.quick || shape.quick)
            && (self.only.is_empty() || self.only.iter().any(|o| label.contains(o.as_str())))
    }
}

/// `[--quick] [--only=LABEL,…]`.
fn parse(args: &[String]) -> Result<Args, String> {
    let Some((_, rest)) = args.split_first().filter(|(n, _)| *n == "gemm") else {
        return Err(format!("bench gemm: unexpected arguments {args:?}"));
    };
    let mut out = Args::default();
    for a in rest {
        if a == "--quick" {
            out.quick = true;
        } else if let Some(list) = a.strip_prefix("--only=") {
            out.only = list
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
        } else {
            return Err(format!(
                "bench gemm takes --quick and --only=LABEL,… (got `{a}`)"
            ));
        }
    }
    Ok(out)
}

/// Entry point: `bench gemm [--quick] [--only=LABEL,…]`.
pub fn run(args: &[String]) -> Result<(), String> {
    let args = parse(args)?;
    let quick = args.quick;
    if cfg!(debug_assertions) {
        println!(
            "  (debug build: run `cargo run --release -p xtask -- bench gemm` for real figures)"
        );
    }
    let host = Host::detect();
    let (peers, no_openblas) = Peer::all();
    let peak = match peaks::fma(&host) {
        Ok(p) => Some(p),
        Err(e) => {
            println!("  FMA peak loop: absent ({e})");
            None
        }
    };
    let twins = host_twins(&host);
    println!(
        "bench gemm: {} ({} logical cores); twins this host runs: {}",
        host.model,
        host.logical_cores,
        if twins.is_empty() {
            "none (the arms stand in for the best twin)".to_owned()
        } else {
            twins.join(", ")
        }
    );
    match &no_openblas {
        None => {
            let o = peers::openblas()?;
            println!(
                "  OpenBLAS: {} by dlopen, {} (OPENBLAS_THREAD_TIMEOUT={})",
                peers::OPENBLAS_SONAME,
                o.describe,
                std::env::var("OPENBLAS_THREAD_TIMEOUT").unwrap_or_default()
            );
        }
        Some(why) => println!("  OpenBLAS: absent ({why})"),
    }
    let rounds = if quick { QUICK_ROUNDS } else { ROUNDS };
    println!(
        "  {rounds} interleaved rounds, ~{} ms per sample, medians; C = A·B (α = 1, β = 0); \
         B is the site's plan-time operand: packing arms pack it once at plan time, \
         peers pack inside every call",
        SAMPLE_SECS * 1e3
    );
    println!(
        "  `of peak`: GFLOP/s over the FMA loop's × threads; `vs peer`: fastest peer's \
         median / the candidate's at the same threads (above 1: faster)"
    );
    let mut catalogue = Catalogue::new();
    catalogue
        .register(weft_gemm::entry())
        .map_err(|e| e.to_string())?;
    let options = Options {
        cache: CacheLocation::InMemory,
        ..Options::from_env().map_err(|e| e.to_string())?
    };
    let mut bench = Bench {
        planner: Planner::for_host(catalogue, host.clone(), options),
        host,
        ex: Executors {
            one: Executor::new(1),
            two: Executor::new(2),
        },
        peers,
        peak,
        rounds,
    };
    let mut all = Vec::new();
    for (i, shape) in shapes().iter().enumerate() {
        if !args.wants(shape) {
            continue;
        }
        let m = measure(&mut bench, shape, 0x2545_F491_4F6C_DD1D + i as u64)?;
        print_table(&m);
        all.push(m);
    }
    let points: Vec<Point> = all
        .iter()
        .flat_map(|m| {
            m.results
                .iter()
                .filter(|r| r.threads == 1 && matches!(r.kind, Kind::Arm | Kind::Twin))
                .map(|r| Point {
                    family: weft_gemm::FAMILY.into(),
                    candidate: r.name.clone(),
                    kind: if r.kind == Kind::Arm { "arm" } else { "twin" }.into(),
                    shape: m.shape.label(),
                    arith: Arith::F32,
                    work: m.shape.flops(),
                    bytes: m.shape.bytes(),
                    secs: r.median,
                })
        })
        .collect();
    let saved = results::save("gemm", &bench.host.model, &points)?;
    println!();
    println!(
        "  one-thread points for `cargo xtask roofline`: {}",
        saved.display()
    );
    let s = summarize(&all);
    println!(
        "  summary: Weft's body is the planner's pick (B packed at plan time when it packs); \
         peak and peer figures are the minimum of 512³ and 1024³{}",
        if s.arm_stood_in {
            "; no twin offered at some shape: planner_vs_best_twin uses the best arm there"
        } else {
            ""
        }
    );
    println!(
        "bench gemm: peak_fraction_1t={} peak_fraction_2t={} vs_best_peer_1t={} vs_best_peer_2t={} planner_vs_best_twin={}",
        fmt_fraction(s.peak_fraction_1t),
        fmt_fraction(s.peak_fraction_2t),
        fmt_opt(s.vs_best_peer_1t),
        fmt_opt(s.vs_best_peer_2t),
        fmt_opt(s.planner_vs_best_twin),
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

    fn at(m: usize, what: &'static str, results: Vec<Row>) -> Measured {
        Measured {
            shape: Shape {
                what,
                m,
                n: m,
                k: m,
                quick: true,
            },
            pick: "p".into(),
            // the peak loop does 2^30 flops a call
            peak_flops: Some((1u64 << 30) as f64),
            results,
        }
    }

    #[test]
    fn median_of_odd_even_and_none() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn shapes_are_the_issues_and_quick_keeps_the_headline_ones() {
        let all = shapes();
        assert_eq!(all.len(), 4 + 10 + 3);
        let has = |m, n, k| all.iter().any(|s| (s.m, s.n, s.k) == (m, n, k));
        for s in [256, 512, 1024, 2048] {
            assert!(has(s, s, s));
        }
        for m in [1, 4, 16, 64, 512] {
            assert!(has(m, 1536, 576) && has(m, 576, 1536));
        }
        assert!(has(3136, 64, 576) && has(784, 128, 1152) && has(196, 256, 2304));
        let headline: Vec<usize> = all
            .iter()
            .filter(|s| s.headline())
            .inspect(|s| assert!(s.quick))
            .map(|s| s.m)
            .collect();
        assert_eq!(headline, HEADLINE);
        assert_eq!(all[1].flops(), 2.0 * 512f64.powi(3));
        assert_eq!(all[1].bytes(), 3.0 * 4.0 * 512.0 * 512.0);
    }

    #[test]
    fn summary_takes_the_planner_at_the_headline_shapes_and_the_worst_shape_for_twins() {
        // The peak loop does 2^30 flops in 1 s. 512³ is 2^28 flops: 0.25 s
        // at the peak, 0.125 s at twice it.
        let s512 = at(
            512,
            "square",
            vec![
                row(Kind::Peak, 1, 1.0),
                row(Kind::Planner, 1, 0.5),  // half the peak
                row(Kind::Planner, 2, 0.25), // half of twice the peak
                row(Kind::Twin, 1, 0.4),
                row(Kind::Twin, 1, 0.45),
                row(Kind::Peer, 1, 1.0),
                row(Kind::Peer, 1, 0.6), // best peer: 0.6 / 0.5 = 1.2
                row(Kind::Peer, 2, 0.2), // 0.2 / 0.25 = 0.8
            ],
        );
        // 1024³ is 2^31 flops: 2 s at the peak, 1 s at twice it.
        let s1024 = at(
            1024,
            "square",
            vec![
                row(Kind::Peak, 1, 1.0),
                row(Kind::Planner, 1, 2.5), // 0.8 of the peak
                row(Kind::Planner, 2, 4.0), // 0.25 of twice the peak
                row(Kind::Arm, 1, 1.0),     // no twin: the arm stands in
                row(Kind::Peer, 1, 2.0),    // 2 / 2.5 = 0.8
                row(Kind::Peer, 2, 1.0),    // 1 / 4 = 0.25
            ],
        );
        // 256³ is not a headline shape: only the twin ratio counts there.
        let s256 = at(
            256,
            "square",
            vec![
                row(Kind::Peak, 1, 1.0),
                row(Kind::Planner, 1, 0.75),
                row(Kind::Twin, 1, 0.25), // planner / twin = 3, the worst
                row(Kind::Peer, 1, 0.001),
            ],
        );
        let s = summarize(&[s512, s1024, s256]);
        assert_eq!(s.peak_fraction_1t, Some(0.5));
        assert_eq!(s.peak_fraction_2t, Some(0.25));
        assert_eq!(s.vs_best_peer_1t, Some(0.8));
        assert_eq!(s.vs_best_peer_2t, Some(0.25));
        assert_eq!(s.planner_vs_best_twin, Some(3.0));
        assert!(s.arm_stood_in);
    }

    #[test]
    fn summary_without_peak_or_peers_is_absent() {
        let mut m = at(
            512,
            "square",
            vec![row(Kind::Planner, 1, 1.0), row(Kind::Twin, 1, 1.0)],
        );
        m.peak_flops = None;
        let s = summarize(&[m]);
        assert_eq!(s.peak_fraction_1t, None);
        assert_eq!(s.vs_best_peer_1t, None);
        assert_eq!(s.planner_vs_best_twin, Some(1.0));
        assert!(!s.arm_stood_in);
        assert_eq!(summarize(&[]).peak_fraction_1t, None);
        assert_eq!(fmt_opt(None), "absent");
    }

    #[test]
    fn a_peer_off_by_more_than_the_tolerance_or_nan_is_refused() {
        let want = [1.0f32, 2.0];
        let mags = [100.0f32, 100.0];
        assert_eq!(peer_mismatch(&[1.005, 2.0], &want, &mags, 2), None);
        assert!(peer_mismatch(&[1.02, 2.0], &want, &mags, 2).is_some());
        assert!(
            peer_mismatch(&[1.0, f32::NAN], &want, &mags, 2).is_some_and(|w| w.contains("C[0, 1]"))
        );
    }

    #[test]
    fn the_arguments_are_quick_and_a_label_filter() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(parse(&a(&["gemm"])), Ok(Args::default()));
        let quick = parse(&a(&["gemm", "--quick"])).unwrap();
        assert!(quick.quick && quick.only.is_empty());
        assert!(parse(&a(&["gemm", "--slow"])).is_err());
        assert!(parse(&a(&["q8-matvec"])).is_err());
        let only = parse(&a(&["gemm", "--only=square m1024,llm m1 "])).unwrap();
        let picked: Vec<String> = shapes()
            .iter()
            .filter(|s| only.wants(s))
            .map(Shape::label)
            .collect();
        assert_eq!(
            picked,
            [
                "square m1024 n1024 k1024",
                "llm m1 n1536 k576",
                "llm m1 n576 k1536"
            ]
        );
        // `--quick` and `--only` narrow together.
        let both = parse(&a(&["gemm", "--quick", "--only=square"])).unwrap();
        assert_eq!(shapes().iter().filter(|s| both.wants(s)).count(), 2);
    }
}
