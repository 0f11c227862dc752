//! `cargo xtask cost-accuracy`: how right are weft-cost's prices?
//!
//! Every candidate of the families that exist — the `q8_0.matvec` arm and
//! its x64 twins, the exp and erf arms and their x64 twins — is priced by
//! `CostModel::for_host` with the nest it states (`Arm::nest`,
//! `Twin::nest`) and measured, at geometries from L1-resident to
//! DRAM-resident (ragged ones included).
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
//! # Figures
//!
//! - `decision`: over twin-vs-arm pairs whose measured gap exceeds
//!   [`NOISE`] and whose predicted gap does too, the share where the
//!   cheaper-priced candidate is the faster one.
//! - `unseparated`: over pairs whose measured gap exceeds [`NOISE`], the
//!   share whose predicted gap does not (the planner would race them).
//! - `spearman`: rank correlation of predicted and measured cycles over
//!   every (candidate, geometry).
//! - `l1_error`: mean `|predicted − measured| / measured` over the
//!   L1-resident ones.
//! - `closer_than_roofline`: geometric mean over every (candidate,
//!   geometry) of the roofline floor's relative error over the model's
//!   (the model's floored at 1%, the noise).
//! - `mca_l1_error`: `l1_error` with each loop's cycles per iteration from
//!   llvm-mca (`-mcpu=znver3`, the loop bodies as Intel syntax from iced's
//!   formatter) instead of the port model; everything else (trip counts,
//!   code outside loops, floor) the same. Over the L1-resident candidates
//!   llvm-mca could read (it fails on some AVX-512 forms); `n/a` without
//!   llvm-mca.
//!
//! `--quick` runs fewer rounds; `--only=WORD` measures only the geometries
//! (`16x1024x1`, `elementwise.exp len=1000`) containing WORD.
//!
//! The last line is
//! `cost-accuracy: pairs=N decision=D unseparated=U spearman=R l1_error=E closer_than_roofline=K mca_l1_error=M`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::process::{Command, Stdio};

use weft_cost::{CostModel, MemoryLevel, Priced};
use weft_elementwise::arm::{ElementwiseArm, ElementwiseKernel};
use weft_elementwise::Func;
use weft_kernel::{Arm, Family, Geometry, Host, Isa, NativeCode, Offer, Site, Twin};
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

/// Elementwise lengths: L1-resident (odd ones among them), L2, L3, DRAM.
const LENGTHS: &[usize] = &[64, 256, 1000, 2999, 16_384, 300_000, 6_000_000];

/// The `--only=WORD` filter (a geometry or family substring), if given.
static ONLY: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

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
    measured: f64,
    predicted: f64,
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

/// Per-loop llvm-mca cycles per iteration, by candidate and loop head.
type McaCache = BTreeMap<(&'static str, usize), Option<f64>>;

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

/// Price `code` for `nest` at `offer` (timing the call: the planner
/// prices hundreds of candidates per plan), and without the scheduler
/// statement.
fn price(
    models: &Models,
    name: &str,
    code: &NativeCode,
    nest: &[weft_kernel::LoopTrip],
    offer: &Offer,
) -> Result<(Priced, Option<f64>), String> {
    let t = std::time::Instant::now();
    let p = models
        .host
        .price(code, nest, offer)
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
        .map(|m| m.price(code, nest, offer).map(|q| q.price.cycles))
        .transpose()
        .map_err(|e| format!("{name}: {e}"))?;
    Ok((p, unscheduled))
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
        let mut cands = Vec::new();
        let code = arm.build(&offer, Isa::X86_64).map_err(|e| e.to_string())?;
        // SAFETY: the arm's body honours the Q8MatvecArgs leaf ABI (its
        // CLIF reads the blocks and writes the outputs the arguments name).
        let kernel = unsafe { Q8MatvecKernel::from_native(&code) }.map_err(|e| e.to_string())?;
        let (priced, unscheduled) = price(models, arm.name(), &code, &arm.nest(&offer), &offer)?;
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
            let (priced, unscheduled) =
                price(models, twin.name(), &code, &twin.nest(&offer), &offer)?;
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
        let x = random_activations(cols, batch, 0xac7 ^ cols as u64)?;
        let mut y = vec![0f32; rows * batch];
        let l1 = cands[0].priced.level == MemoryLevel::L1;
        let measured = measure_interleaved(&cands, rounds, l1, |k: &Q8MatvecKernel| {
            // Lengths were checked when the buffers were made; a failure
            // here cannot happen and would only skip the call.
            let _ = k.run(&w, &x, &mut y, 0..rows);
            black_box(&mut y);
        });
        for (c, m) in cands.iter().zip(measured) {
            rows_out.push(row(
                "q8_0.matvec",
                c,
                format!("{rows}x{cols}x{batch}"),
                m,
                mca,
            ));
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
            let mut cands = Vec::new();
            let code = arm.build(&offer, Isa::X86_64).map_err(|e| e.to_string())?;
            // SAFETY: the arm's body honours the ElementwiseArgs leaf ABI.
            let kernel =
                unsafe { ElementwiseKernel::from_native(&code) }.map_err(|e| e.to_string())?;
            let (priced, unscheduled) =
                price(models, arm.name(), &code, &arm.nest(&offer), &offer)?;
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
                let (priced, unscheduled) =
                    price(models, twin.name(), &code, &twin.nest(&offer), &offer)?;
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
            let mut output = vec![0f32; len];
            let l1 = cands[0].priced.level == MemoryLevel::L1;
            let measured = measure_interleaved(&cands, rounds, l1, |k: &ElementwiseKernel| {
                let _ = k.run(&input, &mut output);
                black_box(&mut output);
            });
            for (c, m) in cands.iter().zip(measured) {
                rows_out.push(row(family, c, format!("len={len}"), m, mca));
            }
        }
    }
    Ok(())
}

fn row<K>(
    family: &'static str,
    c: &Candidate<K>,
    geometry: String,
    measured: f64,
    mca: &mut McaCache,
) -> Row {
    Row {
        family,
        candidate: c.name,
        arm: c.arm,
        geometry,
        level: c.priced.level,
        measured,
        predicted: c.priced.price.cycles,
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
    for l in &p.loops {
        let cpi = *cache
            .entry((c.name, l.head))
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

/// llvm-mca's cycles per iteration of a loop body at `-mcpu=znver3`.
fn mca_cycles_per_iteration(code: &NativeCode, body: &[usize]) -> Option<f64> {
    if body.is_empty() {
        return Some(0.0);
    }
    let text = intel_body(code, body);
    let iterations = 200;
    let mut child = Command::new("llvm-mca")
        .args([
            "-mtriple=x86_64-unknown-linux-gnu",
            "-mcpu=znver3",
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

/// The summary figures (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Summary {
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
    Summary {
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
    let issue_before = crate::cost_calibrate::issue_rate()?;
    let mut rows = Vec::new();
    let mut mca = McaCache::new();
    q8_rows(&host, &models, rounds, &mut rows, &mut mca)?;
    elementwise_rows(&host, &models, rounds, &mut rows, &mut mca)?;
    println!(
        "{:<17} {:<32} {:<16} {:<5} {:>13} {:>13} {:>7} {:>13} {:>7}",
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
            "{:<17} {:<32} {:<16} {:<5} {:>13.0} {:>13.0} {:>+6.1}% {:>13.0} {:>7}",
            r.family,
            r.candidate,
            r.geometry,
            format!("{:?}", r.level),
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
    println!(
        "cost-accuracy: pairs={} decision={:.3} unseparated={:.3} spearman={:.3} l1_error={:.3} closer_than_roofline={:.2} mca_l1_error={}",
        s.pairs,
        s.decision,
        s.unseparated,
        s.spearman,
        s.l1_error,
        s.closer_than_roofline,
        s.mca_l1_error.map_or("n/a".into(), |e| format!("{e:.3}")),
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
            measured,
            predicted,
            floor: measured / 10.0,
            mca: None,
            unscheduled: None,
        }
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
