//! `cargo xtask bench attention`: the fused twins, the fused arm and the
//! unfused chain (seven arms in a row) side by side, one thread, at a
//! prefill shape (`lq = lk = 1024`, `d = 64`, causal) and at decode shapes
//! (`lq = 1`, `d = 64`, `lk` 512 and 4096, one head and SmolLM2's 9 query
//! heads over 3 KV heads, f32 and binary16 K/V), with two peers measured
//! in the same run: a register FMA loop (the prefill peak: independent
//! `vfmadd231ps` on zmm, or ymm without AVX-512) and the shared
//! streaming-read ceiling ([`crate::ceiling`]: every read loop it has, each
//! a candidate of its own, over the call's K and V bytes; the fastest is
//! the decode bound, and the table names it).
//!
//! Protocol, per shape: every candidate is warmed up and its calls per
//! sample calibrated (about [`SAMPLE_SECS`], at least one), then
//! [`ROUNDS`] rounds run in which every candidate takes one sample,
//! interleaved (the first candidate rotates each round); each reports its
//! median. GFLOP/s counts the multiply-adds of `Q·Kᵀ` and `P·V` over the
//! visible keys (`4·d` flops per (row, key) per head); KV GB/s counts the
//! K and V bytes a call must read once.
//!
//! The last line is the summary (see [`summarize`]):
//! `bench attention: fused_vs_chain=X fused_arm_vs_chain=A prefill_peak_fraction=Y
//! decode_ceiling_fraction=Z`. A fraction above 1.00 is printed as
//! `(above-ceiling)`: a defect of the ceiling, not a result.

use std::hint::black_box;
use std::time::Instant;

use weft_attention::arm::{offer_for, AttentionKernel};
use weft_attention::chain::{AttentionChain, ChainScratch};
use weft_attention::twin_x64::TWINS;
use weft_attention::{AttentionShape, KvSlice, KvType, Layout, SiteShape};
use weft_kernel::{Host, Kernel, Twin};

use crate::ceiling::{self, fmt_fraction, ReadLoop};
use crate::peaks::{self, PeakArgs, PEAK_ITERS};
use crate::results::{self, Arith, Point};

/// Interleaved rounds; the median is reported.
const ROUNDS: usize = 11;
/// Target duration of one sample.
const SAMPLE_SECS: f64 = 0.020;
/// Upper bound on calls per sample.
const MAX_REPS: usize = 100_000;

/// What a candidate is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Twin,
    Arm,
    Chain,
    Stream,
    Peak,
}

/// One shape of the bench.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Shape {
    name: &'static str,
    prefill: bool,
    /// Whether the decode target applies (the issue's binary32 shapes).
    target: bool,
    /// K/V as a token-major cache (`K[j][g][c]`, as the language model
    /// appends them) instead of head-major and dense.
    token_major: bool,
    shape: AttentionShape,
}

fn shapes() -> Vec<Shape> {
    let base = AttentionShape {
        d: 64,
        lq: 1,
        lk: 512,
        heads: 1,
        kv_heads: 1,
        q_offset: 511,
        causal: true,
        scale: 0.125,
        kv: KvType::F32,
    };
    let decode = |name, lk, heads, kv_heads, kv| Shape {
        name,
        prefill: false,
        target: kv == KvType::F32,
        token_major: false,
        shape: AttentionShape {
            lk,
            q_offset: lk - 1,
            heads,
            kv_heads,
            kv,
            ..base
        },
    };
    vec![
        Shape {
            name: "prefill 1024x1024 d64 causal",
            prefill: true,
            target: false,
            token_major: false,
            shape: AttentionShape {
                lq: 1024,
                lk: 1024,
                q_offset: 0,
                ..base
            },
        },
        decode("decode lk512 1 head f32", 512, 1, 1, KvType::F32),
        decode("decode lk4096 1 head f32", 4096, 1, 1, KvType::F32),
        decode("decode lk512 9/3 heads f32", 512, 9, 3, KvType::F32),
        decode("decode lk4096 9/3 heads f32", 4096, 9, 3, KvType::F32),
        decode("decode lk4096 9/3 heads f16", 4096, 9, 3, KvType::F16),
        // The language model's call: position 600, K/V appended token by
        // token (rows of the three KV heads side by side).
        Shape {
            token_major: true,
            ..decode("decode lk600 9/3 heads f32 cache", 600, 9, 3, KvType::F32)
        },
    ]
}

/// One candidate's result.
#[derive(Clone, Debug, PartialEq)]
struct Row {
    name: String,
    kind: Kind,
    median: f64,
}

/// All results at one shape.
#[derive(Clone, Debug, PartialEq)]
struct Measured {
    shape: Shape,
    flops: f64,
    kv_bytes: f64,
    peak_flops: f64,
    results: Vec<Row>,
}

impl Measured {
    fn best(&self, kind: Kind) -> Option<f64> {
        self.results
            .iter()
            .filter(|r| r.kind == kind)
            .map(|r| r.median)
            .min_by(f64::total_cmp)
    }

    /// The read loop that set the ceiling (the fastest of them).
    fn ceiling_loop(&self) -> Option<&str> {
        self.results
            .iter()
            .filter(|r| r.kind == Kind::Stream)
            .min_by(|a, b| a.median.total_cmp(&b.median))
            .map(|r| r.name.as_str())
    }

    /// Ceiling median / best twin median (decode shapes).
    fn ceiling_fraction(&self) -> Option<f64> {
        Some(self.best(Kind::Stream)? / self.best(Kind::Twin)?)
    }

    /// The FMA floor: the time the call's multiply-adds take at the
    /// register loop's rate measured in the same rounds.
    fn fma_floor(&self) -> Option<f64> {
        Some(self.flops * self.best(Kind::Peak)? / self.peak_flops)
    }

    /// max(stream, FMA floor) / best twin: the twin against the tighter
    /// of the two bounds a decode call has.
    fn bound_fraction(&self) -> Option<f64> {
        let bound = self.best(Kind::Stream)?.max(self.fma_floor()?);
        Some(bound / self.best(Kind::Twin)?)
    }
}

/// The summary figures (`None` when a candidate is absent).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Summary {
    fused_vs_chain: Option<f64>,
    fused_arm_vs_chain: Option<f64>,
    prefill_peak_fraction: Option<f64>,
    decode_ceiling_fraction: Option<f64>,
    decode_bound_fraction: Option<f64>,
}

/// The minimum of `f` over the decode shapes the target applies to
/// (`None` if any is absent).
fn min_over_targets(all: &[Measured], f: impl Fn(&Measured) -> Option<f64>) -> Option<f64> {
    all.iter()
        .filter(|m| !m.shape.prefill && m.shape.target)
        .map(f)
        .try_fold(None::<f64>, |acc, f| {
            let f = f?;
            Some(Some(acc.map_or(f, |a: f64| a.min(f))))
        })
        .flatten()
}

/// - `fused_vs_chain`: at the prefill shape, chain median / best twin median.
/// - `fused_arm_vs_chain`: at the prefill shape, chain median / the fused
///   arm's: the same compiler (Cranelift) at the same width on both sides,
///   so what fusion alone buys, without the twins' hand-written code.
/// - `prefill_peak_fraction`: the best twin's GFLOP/s at the prefill shape
///   over the register FMA loop's, measured in the same rounds.
/// - `decode_ceiling_fraction`: over the decode shapes the issue's target names
///   (binary32 K/V: `lk` 512 and 4096, one head and 9/3 heads, and the
///   language model's 9/3 heads at `lk` 600 from a token-major cache), the
///   **minimum** of the best twin's KV bytes per second over the ceiling's
///   over the same bytes (ceiling median / twin median), so a target
///   must hold at every such shape. The binary16 shape is printed beside
///   it, not in it: its multiply-adds take longer than streaming its
///   (halved) bytes, see `decode_bound_fraction`.
/// - `decode_bound_fraction`: the same minimum of max(stream, FMA floor) /
///   twin, the FMA floor being the call's multiply-adds at the register
///   loop's rate in the same rounds.
fn summarize(all: &[Measured]) -> Summary {
    let prefill = all.iter().find(|m| m.shape.prefill);
    let fused_vs_chain = prefill.and_then(|m| Some(m.best(Kind::Chain)? / m.best(Kind::Twin)?));
    let fused_arm_vs_chain = prefill.and_then(|m| Some(m.best(Kind::Chain)? / m.best(Kind::Arm)?));
    let prefill_peak_fraction = prefill.and_then(|m| {
        let twin = m.flops / m.best(Kind::Twin)?;
        let peak = m.peak_flops / m.best(Kind::Peak)?;
        Some(twin / peak)
    });
    Summary {
        fused_vs_chain,
        fused_arm_vs_chain,
        prefill_peak_fraction,
        decode_ceiling_fraction: min_over_targets(all, Measured::ceiling_fraction),
        decode_bound_fraction: min_over_targets(all, Measured::bound_fraction),
    }
}

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
    fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// The operands of one shape.
struct Operands {
    shape: AttentionShape,
    layout: Layout,
    q: Vec<f32>,
    k32: Vec<f32>,
    v32: Vec<f32>,
    k16: Vec<u16>,
    v16: Vec<u16>,
}

impl Operands {
    fn new(shape: AttentionShape, token_major: bool, seed: u64) -> Self {
        let layout = if token_major {
            Layout::token_major(&shape)
        } else {
            Layout::head_major(&shape, shape.lk)
        };
        let mut rng = Rng(seed | 1);
        let mut vec = |n: usize| (0..n).map(|_| rng.f32()).collect::<Vec<f32>>();
        let q = vec(layout.q_len(&shape).unwrap_or(0));
        let k32 = vec(layout.k_len(&shape).unwrap_or(0));
        let v32 = vec(layout.v_len(&shape).unwrap_or(0));
        let h = |x: &[f32]| {
            x.iter()
                .map(|v| half::f16::from_f32(*v).to_bits())
                .collect()
        };
        let (k16, v16) = (h(&k32), h(&v32));
        Self {
            shape,
            layout,
            q,
            k32,
            v32,
            k16,
            v16,
        }
    }
    fn k(&self) -> KvSlice<'_> {
        match self.shape.kv {
            KvType::F32 => KvSlice::F32(&self.k32),
            KvType::F16 => KvSlice::F16(&self.k16),
        }
    }
    fn v(&self) -> KvSlice<'_> {
        match self.shape.kv {
            KvType::F32 => KvSlice::F32(&self.v32),
            KvType::F16 => KvSlice::F16(&self.v16),
        }
    }
    /// The K and V bytes one call reads.
    fn kv_bytes(&self) -> &[u8] {
        match self.shape.kv {
            KvType::F32 => as_bytes_f32(&self.k32),
            KvType::F16 => as_bytes_u16(&self.k16),
        }
    }
    fn v_bytes(&self) -> &[u8] {
        match self.shape.kv {
            KvType::F32 => as_bytes_f32(&self.v32),
            KvType::F16 => as_bytes_u16(&self.v16),
        }
    }
}

fn as_bytes_f32(v: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding or invalid bit patterns as bytes; the
    // slice covers exactly the vector's initialised elements.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

fn as_bytes_u16(v: &[u16]) -> &[u8] {
    // SAFETY: as for `as_bytes_f32`.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

enum Runner<'a> {
    Fused(&'a AttentionKernel),
    Chain(&'a AttentionChain),
    Stream(ReadLoop),
    Peak(&'a Kernel<PeakArgs>),
}

struct Candidate<'a> {
    name: String,
    kind: Kind,
    runner: Runner<'a>,
}

fn call(
    c: &Candidate<'_>,
    ops: &Operands,
    o: &mut [f32],
    scratch: &mut ChainScratch,
) -> Result<(), String> {
    match &c.runner {
        Runner::Fused(k) => k
            .run(&ops.shape, &ops.layout, &ops.q, ops.k(), ops.v(), o)
            .map_err(|e| e.to_string())?,
        Runner::Chain(ch) => ch
            .run(
                &ops.shape,
                &ops.layout,
                &ops.q,
                ops.k(),
                ops.v(),
                o,
                scratch,
            )
            .map_err(|e| e.to_string())?,
        Runner::Stream(l) => {
            black_box(l.read(black_box(ops.kv_bytes())));
            black_box(l.read(black_box(ops.v_bytes())));
        }
        Runner::Peak(k) => {
            let args = PeakArgs { iters: PEAK_ITERS };
            // SAFETY: the peak body reads only `iters` and returns.
            unsafe { k.call(black_box(&args)) };
        }
    }
    black_box(&mut *o);
    Ok(())
}

fn sample(
    c: &Candidate<'_>,
    ops: &Operands,
    o: &mut [f32],
    scratch: &mut ChainScratch,
    reps: usize,
) -> Result<f64, String> {
    let t = Instant::now();
    for _ in 0..reps {
        call(c, ops, o, scratch)?;
    }
    Ok(t.elapsed().as_secs_f64() / reps as f64)
}

fn measure(host: &Host, sh: Shape, peak: &(Kernel<PeakArgs>, f64)) -> Result<Measured, String> {
    let ops = Operands::new(sh.shape, sh.token_major, 0x9e37_79b9 ^ sh.shape.lk as u64);
    let d = sh.shape.d;
    let kv = sh.shape.kv;
    let site = SiteShape::from_geometry(&sh.shape.geometry()).map_err(|e| e.to_string())?;
    let offer = offer_for(&site);
    let mut twins = Vec::new();
    for t in TWINS {
        if weft_kernel::require_features(host, t.requires()).is_err() {
            continue;
        }
        let code = t.emit(&offer).map_err(|e| format!("{}: {e}", t.name()))?;
        // SAFETY: the attention.fused twins are validated against the arm
        // (crates/weft-attention/src/tests.rs): they honour the leaf
        // ABI for AttentionArgs at this d and K/V type.
        let k = unsafe { AttentionKernel::from_native(&code, d, kv) }
            .map_err(|e| format!("{}: {e}", t.name()))?;
        twins.push((t.name(), k));
    }
    let arm = AttentionKernel::of_arm(d, kv).map_err(|e| e.to_string())?;
    let chain = AttentionChain::arms(d, kv).map_err(|e| e.to_string())?;
    let mut cands: Vec<Candidate<'_>> = twins
        .iter()
        .map(|(n, k)| Candidate {
            name: (*n).to_owned(),
            kind: Kind::Twin,
            runner: Runner::Fused(k),
        })
        .collect();
    cands.push(Candidate {
        name: "attention.fused.arm".to_owned(),
        kind: Kind::Arm,
        runner: Runner::Fused(&arm),
    });
    cands.push(Candidate {
        name: "unfused chain (7 arms)".to_owned(),
        kind: Kind::Chain,
        runner: Runner::Chain(&chain),
    });
    cands.push(Candidate {
        name: "register FMA loop (peak)".to_owned(),
        kind: Kind::Peak,
        runner: Runner::Peak(&peak.0),
    });
    if !sh.prefill {
        for l in ceiling::loops() {
            cands.push(Candidate {
                name: format!("{} K+V", l.name()),
                kind: Kind::Stream,
                runner: Runner::Stream(l),
            });
        }
    }
    let mut o = vec![0.0f32; ops.layout.o_len(&ops.shape).unwrap_or(0)];
    let mut scratch = ChainScratch::new(&ops.shape);
    let mut reps = Vec::with_capacity(cands.len());
    for c in &cands {
        call(c, &ops, &mut o, &mut scratch)?;
        let once = sample(c, &ops, &mut o, &mut scratch, 1)?;
        let r = ((SAMPLE_SECS / once.max(1e-9)).ceil() as usize).clamp(1, MAX_REPS);
        sample(c, &ops, &mut o, &mut scratch, r)?;
        reps.push(r);
    }
    let mut samples = vec![Vec::with_capacity(ROUNDS); cands.len()];
    for round in 0..ROUNDS {
        for i in 0..cands.len() {
            let j = (i + round) % cands.len();
            samples[j].push(sample(&cands[j], &ops, &mut o, &mut scratch, reps[j])?);
        }
    }
    let results = cands
        .iter()
        .zip(&samples)
        .map(|(c, s)| {
            Ok(Row {
                name: c.name.clone(),
                kind: c.kind,
                median: median(s).ok_or("no samples")?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Measured {
        shape: sh,
        flops: sh.shape.flops() as f64,
        kv_bytes: (ops.kv_bytes().len() + ops.v_bytes().len()) as f64,
        peak_flops: peak.1,
        results,
    })
}

fn print_table(m: &Measured) {
    println!();
    println!(
        "{}: {:.1} MFLOP, {:.0} KiB of K+V per call",
        m.shape.name,
        m.flops / 1e6,
        m.kv_bytes / 1024.0
    );
    println!(
        "  {:<30} {:>12} {:>9} {:>9} {:>9}",
        "candidate", "median µs", "GFLOP/s", "KV GB/s", "vs chain"
    );
    let chain = m.best(Kind::Chain).unwrap_or(f64::NAN);
    for r in &m.results {
        let (gflops, gbs) = match r.kind {
            Kind::Peak => (
                format!("{:.1}", m.peak_flops / r.median / 1e9),
                "-".to_owned(),
            ),
            Kind::Stream => (
                "-".to_owned(),
                format!("{:.1}", m.kv_bytes / r.median / 1e9),
            ),
            _ => (
                format!("{:.1}", m.flops / r.median / 1e9),
                format!("{:.1}", m.kv_bytes / r.median / 1e9),
            ),
        };
        let vs = match r.kind {
            Kind::Peak | Kind::Stream => "-".to_owned(),
            _ => format!("{:.2}", chain / r.median),
        };
        println!(
            "  {:<30} {:>12.1} {:>9} {:>9} {:>9}",
            r.name,
            r.median * 1e6,
            gflops,
            gbs,
            vs
        );
    }
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or_else(|| "absent".to_string(), |v| format!("{v:.2}"))
}

/// Entry point: `bench attention`.
pub fn run(args: &[String]) -> Result<(), String> {
    match args {
        [name] if name == "attention" => {}
        [name, extra, ..] if name == "attention" => {
            return Err(format!(
                "bench attention takes no arguments (got `{extra}`)"
            ))
        }
        _ => return Err(format!("bench attention: unexpected arguments {args:?}")),
    }
    if cfg!(debug_assertions) {
        println!("  (debug build: run `cargo run --release -p xtask -- bench attention` for real figures)");
    }
    let host = Host::detect();
    let peak = peaks::fma(&host)?;
    let present: Vec<&str> = TWINS
        .iter()
        .filter(|t| weft_kernel::require_features(&host, t.requires()).is_ok())
        .map(|t| t.name())
        .collect();
    println!(
        "bench attention: {} ({} logical cores), one thread; twins: {}",
        host.model,
        host.logical_cores,
        if present.is_empty() {
            "absent".to_string()
        } else {
            present.join(", ")
        }
    );
    println!(
        "  {ROUNDS} interleaved rounds, ~{} ms per sample, medians; `vs chain` is the chain's \
         median over the candidate's",
        SAMPLE_SECS * 1e3
    );
    let mut all = Vec::new();
    for sh in shapes() {
        let m = measure(&host, sh, &peak)?;
        print_table(&m);
        all.push(m);
    }
    let s = summarize(&all);
    let points: Vec<Point> = all
        .iter()
        .flat_map(|m| {
            m.results.iter().filter_map(|r| {
                let kind = match r.kind {
                    Kind::Twin => "twin",
                    Kind::Arm => "arm",
                    Kind::Chain => "chain",
                    Kind::Stream | Kind::Peak => return None,
                };
                Some(Point {
                    family: "attention".into(),
                    candidate: r.name.clone(),
                    kind: kind.into(),
                    shape: m.shape.name.to_owned(),
                    arith: Arith::F32,
                    work: m.flops,
                    bytes: m.kv_bytes,
                    secs: r.median,
                })
            })
        })
        .collect();
    let saved = results::save("attention", &host.model, &points)?;
    println!();
    println!(
        "one-thread points for `cargo xtask roofline`: {}",
        saved.display()
    );
    println!();
    println!(
        "decode, per shape: ceiling / twin, max(ceiling, FMA floor) / twin, the ceiling's loop"
    );
    for m in all.iter().filter(|m| !m.shape.prefill) {
        println!(
            "  {:<36} {:>6} {:>6} {:<24}{}",
            m.shape.name,
            fmt_fraction(m.ceiling_fraction()),
            fmt_fraction(m.bound_fraction()),
            m.ceiling_loop().unwrap_or("absent"),
            if m.shape.target {
                ""
            } else {
                "  (not a target)"
            }
        );
    }
    println!(
        "bench attention: decode_bound_fraction={}",
        fmt_fraction(s.decode_bound_fraction)
    );
    println!();
    println!(
        "bench attention: fused_vs_chain={} fused_arm_vs_chain={} prefill_peak_fraction={} decode_ceiling_fraction={}",
        fmt_opt(s.fused_vs_chain),
        fmt_opt(s.fused_arm_vs_chain),
        fmt_fraction(s.prefill_peak_fraction),
        fmt_fraction(s.decode_ceiling_fraction)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: Kind, median: f64) -> Row {
        Row {
            name: format!("{kind:?}"),
            kind,
            median,
        }
    }

    fn measured(prefill: bool, results: Vec<Row>) -> Measured {
        let mut shape = shapes()[0];
        shape.prefill = prefill;
        shape.target = !prefill;
        Measured {
            shape,
            flops: 100.0,
            kv_bytes: 10.0,
            peak_flops: 400.0,
            results,
        }
    }

    #[test]
    fn summary_takes_chain_over_best_twin_peak_fraction_and_the_worst_decode() {
        let all = vec![
            measured(
                true,
                vec![
                    row(Kind::Twin, 2.0),
                    row(Kind::Twin, 1.0),
                    row(Kind::Arm, 3.0),
                    row(Kind::Chain, 8.0),
                    // 400 flops in 2 s = 200/s; the twin 100 in 1 s = 100/s.
                    row(Kind::Peak, 2.0),
                ],
            ),
            measured(false, vec![row(Kind::Twin, 2.0), row(Kind::Stream, 1.8)]),
            measured(false, vec![row(Kind::Twin, 1.0), row(Kind::Stream, 0.5)]),
        ];
        let s = summarize(&all);
        assert_eq!(s.fused_vs_chain, Some(8.0));
        assert_eq!(s.fused_arm_vs_chain, Some(8.0 / 3.0));
        assert_eq!(s.prefill_peak_fraction, Some(0.5));
        assert_eq!(s.decode_ceiling_fraction, Some(0.5));
    }

    #[test]
    fn decode_bound_is_the_tighter_of_stream_and_fma_floor_over_targets_only() {
        // Peak: 400 flops in 2 s, so the floor of 100 flops is 0.5 s.
        let mut off_target = measured(
            false,
            vec![
                row(Kind::Twin, 10.0),
                row(Kind::Stream, 0.1),
                row(Kind::Peak, 2.0),
            ],
        );
        off_target.shape.target = false;
        let all = vec![
            measured(
                false,
                vec![
                    row(Kind::Twin, 1.0),
                    row(Kind::Stream, 0.25),
                    row(Kind::Peak, 2.0),
                ],
            ),
            measured(
                false,
                vec![
                    row(Kind::Twin, 1.0),
                    row(Kind::Stream, 0.8),
                    row(Kind::Peak, 2.0),
                ],
            ),
            off_target,
        ];
        let s = summarize(&all);
        assert_eq!(s.decode_ceiling_fraction, Some(0.25));
        assert_eq!(s.decode_bound_fraction, Some(0.5));
        assert_eq!(all[2].ceiling_fraction(), Some(0.01));
    }

    #[test]
    fn summary_without_twins_is_absent() {
        let all = vec![
            measured(
                true,
                vec![
                    row(Kind::Arm, 3.0),
                    row(Kind::Chain, 8.0),
                    row(Kind::Peak, 1.0),
                ],
            ),
            measured(false, vec![row(Kind::Arm, 2.0), row(Kind::Stream, 1.0)]),
        ];
        let s = summarize(&all);
        assert_eq!(
            s,
            Summary {
                fused_vs_chain: None,
                fused_arm_vs_chain: Some(8.0 / 3.0),
                prefill_peak_fraction: None,
                decode_ceiling_fraction: None,
                decode_bound_fraction: None
            }
        );
    }

    #[test]
    fn median_of_odd_even_and_none() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn shapes_are_the_issues() {
        let s = shapes();
        let p = s.iter().find(|x| x.prefill).expect("prefill");
        assert_eq!((p.shape.lq, p.shape.lk, p.shape.d), (1024, 1024, 64));
        assert!(p.shape.causal);
        for x in s.iter().filter(|x| !x.prefill) {
            assert_eq!(
                (x.shape.lq, x.shape.d, x.shape.q_offset),
                (1, 64, x.shape.lk - 1)
            );
        }
        assert!(s
            .iter()
            .any(|x| x.shape.heads == 9 && x.shape.kv_heads == 3));
    }
}
