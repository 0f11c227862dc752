//! `cargo xtask bench conv`: f32 NHWC convolutions through Weft next to
//! the FMA peak, at ResNet-50 and MobileNetV2 shapes:
//!
//! - 3×3, stride 1, pad 1: 56×56×64→64, 28×28×128→128, 14×14×256→256,
//!   7×7×512→512 (`conv.direct`);
//! - depthwise 3×3: 112×112×32 stride 1, 56×56×144 stride 2
//!   (`conv.depthwise`);
//! - the 7×7 stride-2 stem, 224×224×3→64, pad 3 (`conv.direct`);
//! - 1×1: 56×56×64→256, 28×28×512→128, 14×14×256→1024 (ResNet-50),
//!   56×56×24→144, 112×112×32→16 (MobileNetV2); ResNet-50 v1.5's strided
//!   3×3, 56×56×128→128 stride 2; depthwise 3×3 28×28×192 and 14×14×384
//!   (MobileNetV2).
//!
//! All with a bias and ReLU fused, batch 1.
//!
//! Candidates, in the same interleaved rounds:
//!
//! - **the planner's pick**: a plan compiled by `weft_plan::Planner` (this
//!   host, a catalogue of `weft_conv::entries()` with
//!   `weft_conv::pointwise::entry()` and `weft_gemm::entry()`, an
//!   in-memory cache, so it validates and races anew) for
//!   `weft_conv::site(g, w, bias)`: the filter is a plan-time constant,
//!   packed once at plan time. Run by `SiteKernel::run` on a one-thread
//!   and a two-thread executor. At a 1 × 1, stride-1 shape the pick is
//!   the region of `weft_conv::pointwise` instead (the convolution, or
//!   bias → the planner's `f32.gemm` → ReLU, as the planner chooses),
//!   run by its `Pointwise`, as a user runs it;
//! - **the 1 × 1 region's chain** (at those shapes), forced, 1 and 2
//!   threads: what the GEMM over pixels costs beside the convolution;
//! - **every twin** of each arm that offers the site (`conv.direct`'s
//!   direct arm and, at 3×3 stride 1, its Winograd arm) that the host
//!   runs, emitted for that arm's offer and checked against the arm by its
//!   `TwinCheck` (a refused twin is not timed), called directly, one
//!   thread;
//! - **the arms**, built by Cranelift, called directly, one thread;
//! - **the FMA loop** of [`crate::peaks`] (one thread; two threads' peak
//!   is taken as twice it);
//! - **the unfused chain** (`Im2col`), for the shapes of one group: im2col,
//!   the planner's `f32.gemm` with the filter packed at plan time, then
//!   bias and ReLU; 1 and 2 threads (the GEMM's; im2col runs on the
//!   caller);
//! - **the planner's pick with the SiLU epilogue** (the same site, act =
//!   SiLU, planned on its own), one thread;
//! - with `--peer`, **onnxruntime** (module [`peer`]), 1 and 2 threads, in
//!   its own process and rounds; its output must be within 1e-4 of
//!   `Σ|x·w| + |bias|` of Weft's at every output, or it is left out.
//!
//! Before timing, per shape: every body (the plan at 1 and 2 threads, each
//! twin, each arm) is checked bit for bit over the whole output against
//! the reference of its own contract: `weft_conv::reference` for the
//! direct arm's bodies, `weft_conv::winograd::reference` for the Winograd
//! arm's (a plan whose pick is a Winograd body included).
//!
//! Protocol (as `bench gemm`'s): every candidate is warmed up and its calls
//! per sample calibrated (about [`SAMPLE_SECS`], at least one call), then
//! [`ROUNDS`] rounds run, each candidate taking one sample per round, the
//! first candidate rotating; each reports its median. GFLOP/s counts
//! `2 · batch · out_h · out_w · cout · k_h · k_w · cin / groups` flops (the
//! padding's taps included, as convolution benchmarks count them); `of
//! peak` counts only the flops performed — taps in the padding are
//! skipped, not multiplied — over the FMA loop's rate × threads (counting
//! them put a 7 × 7 body above the peak). A Winograd body (and a pick that
//! is one) performs other flops: its `of peak` counts its products' FMAs
//! alone, `2 · 16 · tiles · cin · cout` with `tiles = ⌈out_h/2⌉ ·
//! ⌈out_w/2⌉`, the transforms' adds left out (so it is a lower bound of
//! the work done).
//!
//! The last line is the summary: `bench conv: vs_onnxruntime_1t=…
//! vs_onnxruntime_2t=… peak_fraction_3x3=… vs_im2col=…
//! worst_vs_onnxruntime_1t=… worst_vs_onnxruntime_2t=…
//! planner_vs_best_twin=… depthwise_gflops_1t=… winograd_vs_direct=…
//! silu_vs_relu_1t=… gemm_1x1_vs_direct_1t=…` —
//! onnxruntime's median
//! over the planner's pick's, the geometric mean over the shapes at 1 and
//! 2 threads (above 1: Weft is faster; `absent` without `--peer`); the
//! geometric mean of the planner's pick's fraction of the FMA peak at the
//! 3×3 stride-1 shapes (every one has ≥ 64 channels; the pick's own body,
//! counting the flops that body performs: a Winograd pick's products'
//! FMAs, as above); `vs_im2col`, the
//! unfused chain's one-thread median over the pick's, geometric mean over
//! the shapes a GEMM can compute (one group; see `Im2col`); the worst shape's
//! ratio to onnxruntime; the planner's median over the best twin's of the
//! pick's own contract (one thread, worst shape); the smallest GFLOP/s at
//! the depthwise shapes (9 flops per loaded float: far from the FMA peak
//! by construction); and `winograd_vs_direct`, the best direct twin's
//! median over the best Winograd twin's, geometric mean over the 3×3
//! stride-1 shapes (one thread; above 1: Winograd is faster); and
//! `silu_vs_relu_1t`, the SiLU pick's median over the ReLU pick's,
//! geometric mean over every shape (one thread: what the SiLU pass costs);
//! `gemm_1x1_vs_direct_1t`, the best direct twin's median over the 1 × 1
//! region's chain's, geometric mean over the 1 × 1 shapes (one thread;
//! above 1: the GEMM over pixels is faster).

use std::hint::black_box;
use std::time::Instant;

use weft_conv::{reference, Activation, ConvArgs, ConvGeometry, PackedFilter};
use weft_kernel::{Host, Isa, Judged, Kernel};
use weft_plan::{Alternative, CacheLocation, Catalogue, Executor, Options, Planner, SiteKernel};

use crate::ceiling::fmt_fraction;
use crate::peaks::{self, PeakArgs, PEAK_ITERS};

/// Interleaved rounds; the median is reported.
const ROUNDS: usize = 7;
/// Target duration of one sample.
const SAMPLE_SECS: f64 = 0.040;
/// Upper bound on calls per sample.
const MAX_REPS: usize = 20_000;

/// One shape of the bench.
struct Shape {
    what: &'static str,
    g: ConvGeometry,
}

fn shapes() -> Vec<Shape> {
    let resnet = |size, c| ConvGeometry::square(1, size, c, c, 3, 1, 1);
    let mut v: Vec<Shape> = [(56, 64), (28, 128), (14, 256), (7, 512)]
        .into_iter()
        .map(|(s, c)| Shape {
            what: "resnet 3x3",
            g: resnet(s, c),
        })
        .collect();
    v.push(Shape {
        what: "mobilenet dw s1",
        g: ConvGeometry::square(1, 112, 1, 1, 3, 1, 1).depthwise(32),
    });
    v.push(Shape {
        what: "mobilenet dw s2",
        g: ConvGeometry::square(1, 56, 1, 1, 3, 2, 1).depthwise(144),
    });
    v.push(Shape {
        what: "resnet stem 7x7 s2",
        g: ConvGeometry::square(1, 224, 3, 64, 7, 2, 3),
    });
    // ResNet-50's bottleneck 1×1s and its strided 3×3 (v1.5), MobileNetV2's
    // expansions, projections and deeper depthwise layers.
    for (what, g) in [
        ("resnet 1x1", ConvGeometry::square(1, 56, 64, 256, 1, 1, 0)),
        ("resnet 1x1", ConvGeometry::square(1, 28, 512, 128, 1, 1, 0)),
        (
            "resnet 1x1",
            ConvGeometry::square(1, 14, 256, 1024, 1, 1, 0),
        ),
        (
            "resnet 3x3 s2",
            ConvGeometry::square(1, 56, 128, 128, 3, 2, 1),
        ),
        (
            "mobilenet 1x1",
            ConvGeometry::square(1, 56, 24, 144, 1, 1, 0),
        ),
        (
            "mobilenet 1x1",
            ConvGeometry::square(1, 112, 32, 16, 1, 1, 0),
        ),
        (
            "mobilenet dw s1",
            ConvGeometry::square(1, 28, 1, 1, 3, 1, 1).depthwise(192),
        ),
        (
            "mobilenet dw s1",
            ConvGeometry::square(1, 14, 1, 1, 3, 1, 1).depthwise(384),
        ),
        // ResNeXt-50 (32×4d)'s first grouped 3×3: 32 groups of 4 → 4.
        (
            "resnext 3x3 g32",
            ConvGeometry {
                groups: 32,
                ..ConvGeometry::square(1, 56, 128, 128, 3, 1, 1)
            },
        ),
    ] {
        v.push(Shape { what, g });
    }
    for s in &mut v {
        s.g = s.g.with_act(Activation::Relu);
    }
    v
}

impl Shape {
    fn label(&self) -> String {
        let g = &self.g;
        format!(
            "{} {}x{}x{}->{} k{} s{}",
            self.what, g.in_h, g.in_w, g.cin, g.cout, g.k_h, g.stride
        )
    }

    fn flops(&self) -> f64 {
        let s = self.g.check().expect("bench shapes are valid");
        2.0 * self.g.macs(&s) as f64
    }

    /// The flops the contract performs: [`Shape::flops`] without the taps
    /// that fall in the padding (skipped, never multiplied). What a
    /// fraction of the FMA peak counts: counting the skipped taps put a
    /// 7 × 7 body above the peak.
    fn useful_flops(&self) -> f64 {
        let g = &self.g;
        let s = g.check().expect("bench shapes are valid");
        // Taps inside the input along one axis, summed over the outputs.
        let inside = |out: u64, k: u64, size: u64| -> u64 {
            (0..out)
                .map(|o| {
                    (0..k)
                        .filter(|&t| {
                            let i = (o * g.stride + t * g.dil) as i64 - g.pad as i64;
                            (0..size as i64).contains(&i)
                        })
                        .count() as u64
                })
                .sum()
        };
        let taps = inside(s.out_h, g.k_h, g.in_h) * inside(s.out_w, g.k_w, g.in_w);
        2.0 * (g.batch * taps * g.cout * (g.cin / g.groups)) as f64
    }
}

/// What a candidate is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Planner,
    Twin,
    Arm,
    /// A twin of `conv.direct`'s Winograd arm (its own contract).
    WinoTwin,
    /// The Winograd arm.
    WinoArm,
    Peak,
    /// onnxruntime, in its own process (`--peer`).
    Peer,
    /// im2col, then the planner's `f32.gemm`, then bias and ReLU.
    Chain,
    /// The planner's pick for the same site with the SiLU epilogue.
    PlannerSilu,
    /// A 1 × 1 region's chain: bias, the planner's `f32.gemm`, ReLU.
    PwChain,
}

/// How a candidate runs.
enum Runner<'a> {
    Planner(&'a SiteKernel<ConvArgs>, &'a Executor),
    Body(Kernel<ConvArgs>),
    Peak(&'a Kernel<PeakArgs>),
    Chain(&'a Im2col, &'a Executor),
    /// A 1 × 1 region: the planner's choice (`None`) or one alternative.
    Region(
        &'a weft_conv::pointwise::Pointwise,
        &'a weft_plan::CompiledPlan,
        &'a Executor,
        Option<Alternative>,
    ),
}

/// The unfused chain a convolution replaces: the input unrolled into a
/// `pixels × (k_h·k_w·cin)` matrix A (columns in the contract's tap order,
/// kh, kw, ci; a tap outside the input a zero), `y = A · Wᵀ` by the
/// planner's `f32.gemm` for a site whose B (the OHWI filter, `n × k`) is
/// given at plan time, so it is packed then; then bias and ReLU in one
/// pass. Rounds otherwise than the contract (the bias is added after the
/// sum, padding taps are products with zero), so it is held to the same
/// tolerance as onnxruntime. im2col runs on the calling thread.
struct Im2col {
    kernel: SiteKernel<weft_gemm::GemmArgs>,
    ops: weft_gemm::SiteOperands,
    bias: Vec<f32>,
    a: std::cell::RefCell<Vec<f32>>,
    /// `(pixels, k)`.
    mk: (usize, usize),
    /// The output's `(out_h, out_w)`.
    out: (u64, u64),
}

impl Im2col {
    /// A's rows of `x` for `g` (groups 1).
    fn unroll(&self, g: &ConvGeometry, x: &[f32]) {
        let (out_h, out_w) = self.out;
        let mut a = self.a.borrow_mut();
        let (cin, k) = (g.cin as usize, self.mk.1);
        let (in_h, in_w) = (g.in_h as isize, g.in_w as isize);
        let mut row = 0;
        for b in 0..g.batch as usize {
            for oh in 0..out_h as isize {
                for ow in 0..out_w as isize {
                    let dst = &mut a[row * k..(row + 1) * k];
                    let mut at = 0;
                    for kh in 0..g.k_h as isize {
                        let ih = oh * g.stride as isize - g.pad as isize + kh * g.dil as isize;
                        for kw in 0..g.k_w as isize {
                            let iw = ow * g.stride as isize - g.pad as isize + kw * g.dil as isize;
                            let out = &mut dst[at..at + cin];
                            if (0..in_h).contains(&ih) && (0..in_w).contains(&iw) {
                                let from = ((b as isize * in_h + ih) * in_w + iw) as usize * cin;
                                out.copy_from_slice(&x[from..from + cin]);
                            } else {
                                out.fill(0.0);
                            }
                            at += cin;
                        }
                    }
                    row += 1;
                }
            }
        }
    }

    /// One call: unroll, multiply into `y`, then bias and ReLU.
    fn run(
        &self,
        g: &ConvGeometry,
        x: &[f32],
        y: &mut [f32],
        exec: &Executor,
    ) -> Result<(), String> {
        self.unroll(g, x);
        let a = self.a.borrow();
        let (m, k) = self.mk;
        let n = g.cout as usize;
        let args = self
            .ops
            .args(weft_gemm::MatRef::dense(&a, m, k), None, y, n, (1.0, 0.0))
            .map_err(|e| e.to_string())?;
        // SAFETY: `args` was checked against A, the packed filter and y,
        // which live and are not otherwise touched until the call returns.
        unsafe { self.kernel.run(exec, black_box(&args)) };
        for row in y.chunks_exact_mut(n) {
            for (v, b) in row.iter_mut().zip(&self.bias) {
                let acc = *v + b;
                *v = if 0.0 > acc { 0.0 } else { acc };
            }
        }
        Ok(())
    }
}

struct Candidate<'a> {
    name: String,
    kind: Kind,
    threads: u64,
    runner: Runner<'a>,
    /// Which of the shape's packed filters it reads (`Operands::filters`).
    filter: usize,
    /// Its epilogue (the shape's own, or SiLU for [`Kind::PlannerSilu`]).
    act: Activation,
}

/// x, the packed filters and y of one shape: the plan's, then each arm's
/// offer's (the direct layout, the Winograd layout).
struct Operands {
    g: ConvGeometry,
    x: Vec<f32>,
    filters: Vec<PackedFilter>,
    y: Vec<f32>,
}

/// xorshift64, uniform in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// `reps` calls of `c`; seconds per call.
fn sample(c: &Candidate<'_>, x: &mut Operands, reps: usize) -> Result<f64, String> {
    let t = Instant::now();
    match &c.runner {
        Runner::Chain(chain, exec) => {
            for _ in 0..reps {
                chain.run(&x.g, &x.x, &mut x.y, exec)?;
            }
        }
        Runner::Region(layer, plan, exec, alt) => {
            for _ in 0..reps {
                let alt = alt.unwrap_or(layer.choice());
                layer
                    .run_as(alt, plan, exec, black_box(&x.x), &mut x.y)
                    .map_err(|e| e.to_string())?;
            }
        }
        Runner::Peak(k) => {
            let p = PeakArgs { iters: PEAK_ITERS };
            for _ in 0..reps {
                // SAFETY: a peak body reads only `iters` and returns.
                unsafe { k.call(black_box(&p)) }
            }
        }
        conv => {
            let g = x.g.with_act(c.act);
            let args = ConvArgs::new(&g, &x.x, &x.filters[c.filter], &mut x.y)
                .map_err(|e| e.to_string())?;
            for _ in 0..reps {
                match conv {
                    // SAFETY: `args` was checked against x, the packed
                    // filter and y, which live and are not otherwise
                    // touched until the loop ends; the executor splits it
                    // into disjoint rows.
                    Runner::Planner(k, exec) => unsafe { k.run(exec, black_box(&args)) },
                    // SAFETY: as above.
                    Runner::Body(k) => unsafe { k.call(black_box(&args)) },
                    Runner::Peak(_) | Runner::Chain(..) | Runner::Region(..) => {}
                }
            }
        }
    }
    Ok(t.elapsed().as_secs_f64() / reps as f64)
}

fn calibrate(c: &Candidate<'_>, x: &mut Operands) -> Result<usize, String> {
    sample(c, x, 1)?;
    let once = sample(c, x, 1)?;
    let reps = ((SAMPLE_SECS / once.max(1e-9)).ceil() as usize).clamp(1, MAX_REPS);
    if reps > 1 {
        sample(c, x, reps)?;
    }
    Ok(reps)
}

/// The median of `v`.
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

/// One shape's medians: (name, kind, threads, seconds); the pick.
struct Measured {
    flops: f64,
    /// The flops performed ([`Shape::useful_flops`]): the peak fractions'.
    useful: f64,
    /// The flops a Winograd body performs: its products' FMAs only
    /// (`2 · 16 · tiles · cin · cout`), the transforms' adds left out.
    wino_useful: f64,
    /// Whether the planner's pick is a Winograd body.
    pick_winograd: bool,
    /// Whether the SiLU site's pick is one.
    silu_winograd: bool,
    rows: Vec<(String, Kind, u64, f64)>,
}

impl Measured {
    /// The flops the bodies of `kind` perform (the pick's: its body's).
    fn performed(&self, kind: Kind) -> f64 {
        let wino = match kind {
            Kind::WinoTwin | Kind::WinoArm => true,
            Kind::Planner => self.pick_winograd,
            Kind::PlannerSilu => self.silu_winograd,
            _ => false,
        };
        if wino {
            self.wino_useful
        } else {
            self.useful
        }
    }

    fn best(&self, kind: Kind, threads: u64) -> Option<f64> {
        self.rows
            .iter()
            .filter(|r| r.1 == kind && r.2 == threads)
            .map(|r| r.3)
            .min_by(f64::total_cmp)
    }
}

struct Bench {
    host: Host,
    planner: Planner,
    /// A planner over `weft_gemm::entry()`, for the im2col chain.
    gemm: Planner,
    one: Executor,
    two: Executor,
    peak: Option<(Kernel<PeakArgs>, f64)>,
    /// Whether the onnxruntime peer runs (its version).
    peer: Option<String>,
}

fn measure(b: &mut Bench, shape: &Shape, seed: u64) -> Result<Measured, String> {
    let g = shape.g;
    let s = g.check().map_err(|e| e.to_string())?;
    let w = values(g.w_len(), seed);
    let bias = values(g.cout as usize, seed + 1);
    let site = weft_conv::site(&g, &w, Some(&bias)).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let plan = b
        .planner
        .compile(std::slice::from_ref(&site))
        .map_err(|e| e.to_string())?;
    let cs = &plan.sites()[0];
    println!();
    println!(
        "{}: {:.1} MFLOP per call; the planner picked {} ({:?}, {:.0} ms to plan)",
        shape.label(),
        shape.flops() / 1e6,
        cs.candidate,
        cs.rule,
        t.elapsed().as_secs_f64() * 1e3
    );
    let kernel = plan
        .kernel::<ConvArgs>(0)
        .map_err(|e| format!("the plan's kernel: {e}"))?;
    let filter = PackedFilter::from_site(cs.packed("w"), &g).map_err(|e| e.to_string())?;
    let pick_winograd = filter.is_winograd();
    let mut x = Operands {
        g,
        x: values(g.x_len(), seed + 2),
        filters: vec![filter],
        y: vec![0.0; g.y_len(&s)],
    };
    // The arms that offer the site (the direct one, and the Winograd one
    // where it serves), their bodies and their twins' (checked).
    let entry = weft_conv::entries()
        .into_iter()
        .find(|e| e.family.name() == site.family.name())
        .ok_or("no family for the site")?;
    let place = |code: &weft_kernel::NativeCode| -> Result<Kernel<ConvArgs>, String> {
        // SAFETY: arms and twins of the conv families promise (their
        // unsafe traits) a leaf-ABI body for `ConvArgs`.
        unsafe { Kernel::<ConvArgs>::from_native(code) }.map_err(|e| e.to_string())
    };
    let mut cands = Vec::new();
    if let Some((p, _)) = &b.peak {
        cands.push(Candidate {
            name: "FMA peak loop".to_owned(),
            kind: Kind::Peak,
            threads: 1,
            runner: Runner::Peak(p),
            filter: 0,
            act: g.act,
        });
    }
    // A 1 × 1 convolution a GEMM over pixels computes: the region of
    // `weft_conv::pointwise` (bias → the planner's f32.gemm → act, or the
    // convolution), as a user plans it; its choice is the pick.
    let region = match weft_conv::pointwise::region("pw", &g, &w, Some(&bias)) {
        Ok(r) => {
            let rplan = b
                .planner
                .compile_with_regions(&[], &[r])
                .map_err(|e| e.to_string())?;
            let layer = weft_conv::pointwise::Pointwise::new(&rplan, "pw", &g)
                .map_err(|e| e.to_string())?;
            let cr = rplan.region("pw").map_err(|e| e.to_string())?;
            let name = |i: usize| rplan.sites()[i].candidate.to_string();
            println!(
                "  1 × 1 region: {:?} by {:?} (chain {} = {:.0} cycles, fused {} = {:.0})",
                cr.choice,
                cr.rule,
                cr.chain
                    .iter()
                    .map(|&i| name(i))
                    .collect::<Vec<_>>()
                    .join(" → "),
                cr.chain_cycles.unwrap_or(f64::NAN),
                name(cr.fused),
                cr.fused_cycles.unwrap_or(f64::NAN),
            );
            Some((rplan, layer))
        }
        Err(_) => None,
    };
    for (threads, exec) in [(1, &b.one), (2, &b.two)] {
        cands.push(match &region {
            Some((rplan, layer)) => Candidate {
                name: format!("planner: 1 × 1 region, {:?}", layer.choice()),
                kind: Kind::Planner,
                threads,
                runner: Runner::Region(layer, rplan, exec, None),
                filter: 0,
                act: g.act,
            },
            None => Candidate {
                name: format!("planner: {}", cs.candidate),
                kind: Kind::Planner,
                threads,
                runner: Runner::Planner(&kernel, exec),
                filter: 0,
                act: g.act,
            },
        });
        if let Some((rplan, layer)) = &region {
            cands.push(Candidate {
                name: "1 × 1 region's chain (bias, gemm, act)".to_owned(),
                kind: Kind::PwChain,
                threads,
                runner: Runner::Region(layer, rplan, exec, Some(Alternative::Chain)),
                filter: 0,
                act: g.act,
            });
        }
    }
    // The same site with the SiLU epilogue (its bodies' pass over the
    // rows after the tiles), the planner's pick at one thread.
    let gs = g.with_act(Activation::Silu);
    let silu_site = weft_conv::site(&gs, &w, Some(&bias)).map_err(|e| e.to_string())?;
    let silu_plan = b
        .planner
        .compile(std::slice::from_ref(&silu_site))
        .map_err(|e| e.to_string())?;
    let silu_kernel = silu_plan
        .kernel::<ConvArgs>(0)
        .map_err(|e| format!("the SiLU plan's kernel: {e}"))?;
    let ss = &silu_plan.sites()[0];
    x.filters
        .push(PackedFilter::from_site(ss.packed("w"), &gs).map_err(|e| e.to_string())?);
    let silu_winograd = x.filters[x.filters.len() - 1].is_winograd();
    println!(
        "  with SiLU: the planner picked {} ({:?})",
        ss.candidate, ss.rule
    );
    cands.push(Candidate {
        name: format!("planner, SiLU: {}", ss.candidate),
        kind: Kind::PlannerSilu,
        threads: 1,
        runner: Runner::Planner(&silu_kernel, &b.one),
        filter: x.filters.len() - 1,
        act: Activation::Silu,
    });
    for arm in &entry.arms {
        let offer = match arm.arm.offer(&site, &b.host) {
            Ok(o) => o,
            Err(e) => {
                println!("  {}: does not serve the site: {e}", arm.arm.name());
                continue;
            }
        };
        let arm_code = arm
            .arm
            .build(&offer, Isa::of_target())
            .map_err(|e| e.to_string())?;
        x.filters.push(
            PackedFilter::from_site(offer.packed.iter().find(|p| p.name == "w"), &g)
                .map_err(|e| e.to_string())?,
        );
        let filter = x.filters.len() - 1;
        let wino = x.filters[filter].is_winograd();
        let (twin_kind, arm_kind) = if wino {
            (Kind::WinoTwin, Kind::WinoArm)
        } else {
            (Kind::Twin, Kind::Arm)
        };
        for twin in &arm.twins {
            if twin.isa() != Isa::of_target()
                || weft_kernel::require_features(&b.host, twin.requires()).is_err()
            {
                continue;
            }
            let code = twin.emit(&offer).map_err(|e| e.to_string())?;
            let judged = arm.check.check(
                Judged {
                    name: arm.arm.name(),
                    code: &arm_code,
                },
                Judged {
                    name: twin.name(),
                    code: &code,
                },
                &offer,
                &b.host,
                0x5eed_c0de,
            );
            match judged {
                Ok(_) => cands.push(Candidate {
                    name: twin.name().to_owned(),
                    kind: twin_kind,
                    threads: 1,
                    runner: Runner::Body(place(&code)?),
                    filter,
                    act: g.act,
                }),
                Err(e) => println!("  {}: REFUSED by the check: {e}", twin.name()),
            }
        }
        cands.push(Candidate {
            name: arm.arm.name().to_owned(),
            kind: arm_kind,
            threads: 1,
            runner: Runner::Body(place(&arm_code)?),
            filter,
            act: g.act,
        });
    }
    // The unfused chain, where a GEMM can compute the convolution (one
    // group).
    let chain = if g.groups == 1 {
        let (m, n) = ((g.batch * s.out_h * s.out_w) as usize, g.cout as usize);
        let k = g.w_len() / n;
        let gsite = weft_gemm::site(m, n, k, weft_gemm::BLayout::Transposed, Some(&w));
        let gplan = b
            .gemm
            .compile(std::slice::from_ref(&gsite))
            .map_err(|e| e.to_string())?;
        let gs = &gplan.sites()[0];
        println!(
            "  im2col + f32.gemm: the planner picked {} ({:?})",
            gs.candidate, gs.rule
        );
        Some(Im2col {
            kernel: gplan
                .kernel::<weft_gemm::GemmArgs>(0)
                .map_err(|e| format!("the GEMM plan's kernel: {e}"))?,
            ops: weft_gemm::SiteOperands::new(gs.packed("b"), gs.views.as_ref(), k, n)
                .map_err(|e| e.to_string())?,
            bias: bias.clone(),
            a: std::cell::RefCell::new(vec![0.0; m * k]),
            mk: (m, k),
            out: (s.out_h, s.out_w),
        })
    } else {
        None
    };
    if let Some(c) = &chain {
        for (threads, exec) in [(1, &b.one), (2, &b.two)] {
            cands.push(Candidate {
                name: "im2col + f32.gemm (planner's)".to_owned(),
                kind: Kind::Chain,
                threads,
                runner: Runner::Chain(c, exec),
                filter: 0,
                act: g.act,
            });
        }
    }
    // Correctness: every body against its contract's reference, bit for
    // bit (the direct one, or the Winograd arm's own).
    let mut want = vec![0.0f32; g.y_len(&s)];
    reference::conv2d(&g, &x.x, &w, Some(&bias), &mut want, 0..g.batch * s.out_h);
    // The SiLU pick against its own contract's reference.
    let mut want_silu = vec![0.0f32; g.y_len(&s)];
    if silu_winograd {
        weft_conv::winograd::reference::conv2d(
            &gs,
            &x.x,
            &w,
            Some(&bias),
            &mut want_silu,
            0..g.batch * s.out_h,
        );
    } else {
        reference::conv2d(
            &gs,
            &x.x,
            &w,
            Some(&bias),
            &mut want_silu,
            0..g.batch * s.out_h,
        );
    }
    let mut want_wino = vec![0.0f32; g.y_len(&s)];
    if weft_conv::winograd::serves(&g).is_ok() {
        weft_conv::winograd::reference::conv2d(
            &g,
            &x.x,
            &w,
            Some(&bias),
            &mut want_wino,
            0..g.batch * s.out_h,
        );
    }
    // Σ|x·w| + |bias| at every output: the tolerance of the candidates
    // that round otherwise (the chain, onnxruntime).
    let abs = |v: &[f32]| v.iter().map(|e| e.abs()).collect::<Vec<f32>>();
    let mut mags = vec![0.0f32; g.y_len(&s)];
    reference::conv2d(
        &g.with_act(Activation::None),
        &abs(&x.x),
        &abs(&w),
        Some(&abs(&bias)),
        &mut mags,
        0..g.batch * s.out_h,
    );
    let off = |got: &[f32]| {
        (0..want.len()).find(|&i| {
            let v = f64::from(got.get(i).copied().unwrap_or(f32::NAN));
            let diff = (v - f64::from(want[i])).abs();
            diff.is_nan() || diff > 1e-4 * f64::from(mags[i]) + f64::from(f32::MIN_POSITIVE)
        })
    };
    for c in cands.iter().filter(|c| c.kind == Kind::Chain) {
        x.y.fill(f32::NAN);
        sample(c, &mut x, 1)?;
        if let Some(i) = off(&x.y) {
            return Err(format!(
                "{} at {} thread(s) gives y[{i}] = {}, the reference {}",
                c.name, c.threads, x.y[i], want[i]
            ));
        }
    }
    for c in cands
        .iter()
        .filter(|c| c.kind != Kind::Peak && c.kind != Kind::Chain)
    {
        x.y.fill(f32::NAN);
        sample(c, &mut x, 1)?;
        let want = if c.kind == Kind::PlannerSilu {
            &want_silu
        } else if x.filters[c.filter].is_winograd() {
            &want_wino
        } else {
            &want
        };
        if let Some(i) = (0..want.len()).find(|&i| x.y[i].to_bits() != want[i].to_bits()) {
            return Err(format!(
                "{} at {} thread(s) gives y[{i}] = {}, the reference {}",
                c.name, c.threads, x.y[i], want[i]
            ));
        }
    }
    let reps = cands
        .iter()
        .map(|c| calibrate(c, &mut x))
        .collect::<Result<Vec<_>, _>>()?;
    let mut samples = vec![Vec::with_capacity(ROUNDS); cands.len()];
    for round in 0..ROUNDS {
        for i in 0..cands.len() {
            let j = (i + round) % cands.len();
            samples[j].push(sample(&cands[j], &mut x, reps[j])?);
        }
    }
    let mut rows = cands
        .iter()
        .zip(&samples)
        .map(|(c, s)| {
            Ok((
                c.name.clone(),
                c.kind,
                c.threads,
                median(s).ok_or("no samples")?,
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    if let Some(version) = &b.peer {
        let (t1, t2, got) = peer::time(&g, (&x.x, &w, &bias), (ROUNDS, SAMPLE_SECS))?;
        // Within 1e-4 of Σ|x·w| + |bias| of Weft's at every output (it
        // sums in another order), or it is left out.
        match off(&got) {
            None => {
                for (t, secs) in [(1, t1), (2, t2)] {
                    rows.push((format!("onnxruntime {version} (NCHW)"), Kind::Peer, t, secs));
                }
            }
            Some(i) => println!(
                "  onnxruntime: REFUSED, wrong output: y[{i}] = {:?}, Weft's {}",
                got.get(i),
                want[i]
            ),
        }
    }
    let (th, tw) = (s.out_h.div_ceil(2), s.out_w.div_ceil(2));
    let m = Measured {
        flops: shape.flops(),
        useful: shape.useful_flops(),
        wino_useful: 2.0 * (16 * g.batch * th * tw * g.cin * g.cout) as f64,
        pick_winograd,
        silu_winograd,
        rows,
    };
    let peak = |threads: u64| -> Option<f64> {
        let (_, flops) = b.peak.as_ref()?;
        Some(flops / m.best(Kind::Peak, 1)? * threads as f64)
    };
    println!(
        "  {:<42} {:>3} {:>11} {:>8} {:>8}",
        "candidate", "thr", "median ms", "GFLOP/s", "of peak"
    );
    for (name, kind, threads, secs) in &m.rows {
        let rate = if *kind == Kind::Peak {
            peak(1).unwrap_or(0.0)
        } else {
            m.flops / secs
        };
        // Of the peak: the flops performed, padding taps left out (a
        // Winograd body's: its products' FMAs).
        let of = peak(*threads).map(|p| rate * m.performed(*kind) / m.flops / p);
        println!(
            "  {:<42} {:>3} {:>11.4} {:>8.1} {:>8}",
            name,
            threads,
            secs * 1e3,
            rate / 1e9,
            fmt_fraction(of)
        );
    }
    Ok(m)
}

/// Entry point: `bench conv`.
pub fn run(args: &[String]) -> Result<(), String> {
    let with_peer = match args {
        [name] if name == "conv" => false,
        [name, p] if name == "conv" && p == "--peer" => true,
        _ => {
            return Err(format!(
                "bench conv takes no arguments but --peer (got {args:?})"
            ))
        }
    };
    let host = Host::detect();
    let peak = match peaks::fma(&host) {
        Ok(p) => Some(p),
        Err(e) => {
            println!("  FMA peak loop: absent ({e})");
            None
        }
    };
    println!(
        "bench conv: {} ({} logical cores); {ROUNDS} interleaved rounds, ~{} ms per sample, \
         medians; NHWC, batch 1, bias + ReLU fused, the filter packed at plan time",
        host.model,
        host.logical_cores,
        SAMPLE_SECS * 1e3
    );
    let mut catalogue = Catalogue::new();
    // The 1 × 1 regions' chains need the epilogue and GEMM families.
    for e in weft_conv::entries()
        .into_iter()
        .chain([weft_conv::pointwise::entry(), weft_gemm::entry()])
    {
        catalogue.register(e).map_err(|e| e.to_string())?;
    }
    let options = Options {
        cache: CacheLocation::InMemory,
        ..Options::from_env().map_err(|e| e.to_string())?
    };
    let peer = if with_peer {
        let v = peer::setup()?;
        println!(
            "  onnxruntime {v}: its own process, its own rounds (not interleaved with Weft's)"
        );
        Some(v)
    } else {
        None
    };
    let mut gemm = Catalogue::new();
    gemm.register(weft_gemm::entry())
        .map_err(|e| e.to_string())?;
    let mut bench = Bench {
        planner: Planner::for_host(catalogue, host.clone(), options.clone()),
        gemm: Planner::for_host(gemm, host.clone(), options),
        host,
        one: Executor::new(1),
        two: Executor::new(2),
        peak,
        peer,
    };
    let mut worst_pick: Option<f64> = None;
    // Per shape: onnxruntime's median over the planner's pick's, at 1 and
    // 2 threads; the 3×3 stride-1 pick's fraction of the FMA peak.
    let mut vs_ort: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut peak_3x3 = Vec::new();
    let mut vs_chain = Vec::new();
    let mut dw_gflops: Option<f64> = None;
    let mut wino_vs_direct = Vec::new();
    let mut silu_cost = Vec::new();
    let mut gemm_1x1 = Vec::new();
    for (i, shape) in shapes().iter().enumerate() {
        let m = measure(&mut bench, shape, 0x2545_F491 + 17 * i as u64)?;
        let pick = m.best(Kind::Planner, 1);
        // The best body of the pick's own contract.
        let best = if m.pick_winograd {
            m.best(Kind::WinoTwin, 1).or(m.best(Kind::WinoArm, 1))
        } else {
            m.best(Kind::Twin, 1).or(m.best(Kind::Arm, 1))
        };
        if let (Some(p), Some(b)) = (pick, best) {
            worst_pick = Some(worst_pick.map_or(p / b, |w: f64| w.max(p / b)));
        }
        if let (Some(p), Some(sp)) = (pick, m.best(Kind::PlannerSilu, 1)) {
            println!("  SiLU instead of ReLU: {:.2}x the time", sp / p);
            silu_cost.push(sp / p);
        }
        if let (Some(p), Some(c)) = (pick, m.best(Kind::Chain, 1)) {
            vs_chain.push(c / p);
        }
        if let (Some(d), Some(c)) = (m.best(Kind::Twin, 1), m.best(Kind::PwChain, 1)) {
            println!(
                "  1 × 1 as a GEMM over pixels: best direct twin {:.4} ms, the region's chain {:.4} ms: {:.2}x",
                d * 1e3,
                c * 1e3,
                d / c
            );
            gemm_1x1.push(d / c);
        }
        for (t, ratios) in vs_ort.iter_mut().enumerate() {
            let t = t as u64 + 1;
            if let (Some(p), Some(o)) = (m.best(Kind::Planner, t), m.best(Kind::Peer, t)) {
                ratios.push(o / p);
            }
        }
        if let (Some(p), Some((_, pf))) = (pick, bench.peak.as_ref()) {
            let rate = m.flops / p;
            if shape.g.is_depthwise() {
                dw_gflops = Some(dw_gflops.map_or(rate / 1e9, |d: f64| d.min(rate / 1e9)));
            } else if shape.what == "resnet 3x3" {
                if let Some(pt) = m.best(Kind::Peak, 1) {
                    peak_3x3.push(m.performed(Kind::Planner) / p / (pf / pt));
                }
            }
        }
        if shape.what == "resnet 3x3" {
            if let (Some(d), Some(wt)) = (m.best(Kind::Twin, 1), m.best(Kind::WinoTwin, 1)) {
                println!(
                    "  winograd vs direct: best direct twin {:.4} ms, best Winograd twin {:.4} ms: {:.2}x",
                    d * 1e3,
                    wt * 1e3,
                    d / wt
                );
                wino_vs_direct.push(d / wt);
            }
        }
    }
    println!();
    let opt = |v: Option<f64>| v.map_or_else(|| "absent".to_owned(), |v| format!("{v:.2}"));
    let geomean = |v: &[f64]| {
        (!v.is_empty()).then(|| (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp())
    };
    let worst = |v: &[f64]| v.iter().copied().reduce(f64::min);
    println!(
        "bench conv: vs_onnxruntime_1t={} vs_onnxruntime_2t={} peak_fraction_3x3={} vs_im2col={} worst_vs_onnxruntime_1t={} worst_vs_onnxruntime_2t={} planner_vs_best_twin={} depthwise_gflops_1t={} winograd_vs_direct={} silu_vs_relu_1t={} gemm_1x1_vs_direct_1t={}",
        opt(geomean(&vs_ort[0])),
        opt(geomean(&vs_ort[1])),
        fmt_fraction(geomean(&peak_3x3)),
        opt(geomean(&vs_chain)),
        opt(worst(&vs_ort[0])),
        opt(worst(&vs_ort[1])),
        opt(worst_pick),
        opt(dw_gflops),
        opt(geomean(&wino_vs_direct)),
        opt(geomean(&silu_cost)),
        opt(geomean(&gemm_1x1)),
    );
    Ok(())
}

/// The onnxruntime peer (`--peer`): a Python process in a virtual
/// environment under `target/conv-peer/` (created, and `onnxruntime`,
/// `onnx` and `numpy` installed into it by pip, on first use; nothing
/// downloaded is kept outside `target/`). The script, written there by
/// this module, builds a one-node ONNX model (`Conv` with its bias, then
/// `Relu`, which onnxruntime fuses) in NCHW — the layout its CPU
/// convolutions take — reads x (transposed from NHWC outside the timing),
/// the filter (OHWI → OIHW) and the bias from files this module writes,
/// times `InferenceSession::run` at 1 and 2 intra-op threads (graph
/// optimisations on, the same calibration and rounds as the bench, but in
/// its own process: its rounds are not interleaved with Weft's) and
/// writes its 1-thread output back in NHWC for the check.
mod peer {
    use std::path::PathBuf;
    use std::process::Command;

    use weft_conv::ConvGeometry;

    const SCRIPT: &str = r#"
import json, sys, time
import numpy as np
import onnx
from onnx import helper, TensorProto
import onnxruntime as ort

a = json.loads(sys.argv[1])
d = a["dir"]
n, h, w, cin, cout = a["batch"], a["in_h"], a["in_w"], a["cin"], a["cout"]
kh, kw, s, p, dil, g = a["k_h"], a["k_w"], a["stride"], a["pad"], a["dil"], a["groups"]
oh, ow = a["out_h"], a["out_w"]
x = np.fromfile(d + "/x.bin", dtype=np.float32).reshape(n, h, w, cin).transpose(0, 3, 1, 2).copy()
wt = np.fromfile(d + "/w.bin", dtype=np.float32).reshape(cout, kh, kw, cin // g).transpose(0, 3, 1, 2).copy()
b = np.fromfile(d + "/b.bin", dtype=np.float32)
nodes = [
    helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[kh, kw], strides=[s, s],
                     pads=[p, p, p, p], dilations=[dil, dil], group=g),
    helper.make_node("Relu", ["c"], ["y"]),
]
graph = helper.make_graph(
    nodes, "conv",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, cin, h, w])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, cout, oh, ow])],
    [helper.make_tensor("w", TensorProto.FLOAT, wt.shape, wt.flatten().tolist()),
     helper.make_tensor("b", TensorProto.FLOAT, b.shape, b.tolist())])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
out = {}
for threads in (1, 2):
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), o, providers=["CPUExecutionProvider"])
    feed = {"x": x}
    y = sess.run(None, feed)[0]
    if threads == 1:
        y.transpose(0, 2, 3, 1).astype(np.float32).tofile(d + "/y.bin")
    t = time.perf_counter(); sess.run(None, feed); once = time.perf_counter() - t
    reps = max(1, min(20000, int(a["sample_secs"] / max(once, 1e-9)) + 1))
    samples = []
    for _ in range(a["rounds"]):
        t = time.perf_counter()
        for _ in range(reps):
            sess.run(None, feed)
        samples.append((time.perf_counter() - t) / reps)
    samples.sort()
    out[str(threads)] = samples[len(samples) // 2]
out["version"] = ort.__version__
print(json.dumps(out))
"#;

    /// The peer's directory under the workspace's `target/`.
    fn dir() -> PathBuf {
        std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| crate::workspace_root().join("target"))
            .join("conv-peer")
    }

    fn python() -> PathBuf {
        dir().join("venv").join("bin").join("python")
    }

    fn run(cmd: &mut Command, what: &str) -> Result<String, String> {
        let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{what}: {}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The virtual environment (made on first use) and the script; the
    /// onnxruntime version.
    pub fn setup() -> Result<String, String> {
        let d = dir();
        std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        if !python().exists() {
            println!(
                "  onnxruntime peer: creating {}/venv (pip install onnxruntime onnx numpy)",
                d.display()
            );
            run(
                Command::new("python3")
                    .arg("-m")
                    .arg("venv")
                    .arg(d.join("venv")),
                "python3 -m venv",
            )?;
        }
        let probe = "import onnxruntime, onnx, numpy; print(onnxruntime.__version__)";
        let version = match run(Command::new(python()).arg("-c").arg(probe), "probe") {
            Ok(v) => v,
            Err(_) => {
                run(
                    Command::new(python()).args([
                        "-m",
                        "pip",
                        "install",
                        "--quiet",
                        "onnxruntime",
                        "onnx",
                        "numpy",
                    ]),
                    "pip install onnxruntime onnx numpy",
                )?;
                run(
                    Command::new(python()).arg("-c").arg(probe),
                    "onnxruntime import",
                )?
            }
        };
        std::fs::write(d.join("peer.py"), SCRIPT).map_err(|e| e.to_string())?;
        Ok(version.trim().to_owned())
    }

    fn write(name: &str, v: &[f32]) -> Result<(), String> {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let p = dir().join(name);
        std::fs::write(&p, bytes).map_err(|e| format!("{}: {e}", p.display()))
    }

    /// Median seconds per call at 1 and 2 threads, and the 1-thread
    /// output (NHWC).
    pub fn time(
        g: &ConvGeometry,
        (x, w, b): (&[f32], &[f32], &[f32]),
        (rounds, sample_secs): (usize, f64),
    ) -> Result<(f64, f64, Vec<f32>), String> {
        let s = g.check().map_err(|e| e.to_string())?;
        write("x.bin", x)?;
        write("w.bin", w)?;
        write("b.bin", b)?;
        let args = format!(
            "{{\"dir\":{:?},\"batch\":{},\"in_h\":{},\"in_w\":{},\"cin\":{},\"cout\":{},\"k_h\":{},\"k_w\":{},\"stride\":{},\"pad\":{},\"dil\":{},\"groups\":{},\"out_h\":{},\"out_w\":{},\"rounds\":{},\"sample_secs\":{}}}",
            dir().display().to_string(),
            g.batch, g.in_h, g.in_w, g.cin, g.cout, g.k_h, g.k_w, g.stride, g.pad, g.dil, g.groups,
            s.out_h, s.out_w, rounds, sample_secs
        );
        let out = run(
            Command::new(python()).arg(dir().join("peer.py")).arg(args),
            "the onnxruntime peer",
        )?;
        let v: serde_json::Value =
            serde_json::from_str(out.trim()).map_err(|e| format!("peer output `{out}`: {e}"))?;
        let secs = |k: &str| {
            v[k].as_f64()
                .ok_or_else(|| format!("peer output `{out}` has no `{k}`"))
        };
        let bytes = std::fs::read(dir().join("y.bin")).map_err(|e| e.to_string())?;
        let y = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok((secs("1")?, secs("2")?, y))
    }
}
