//! `cargo xtask bench elementwise`: elements per nanosecond of the exp and
//! erf arms, each twin (when present) and glibc's `expf`/`erff` in a scalar
//! loop, side by side. Candidates run interleaved (one timed batch each per
//! round, rounds repeated) and each reports its median, so drifting clocks
//! and neighbours hit every candidate alike. `cargo xtask bench` always runs
//! from a release build (see `main.rs`).

use std::hint::black_box;
use std::time::Instant;

use weft_elementwise::arm::{ElementwiseArm, ElementwiseKernel};
use weft_elementwise::Func;
use weft_kernel::{require_features, Arm, Geometry, Host, Site};

extern "C" {
    fn expf(x: f32) -> f32;
    fn erff(x: f32) -> f32;
}

/// Elements per call (input + output stay in L1/L2).
const N: usize = 4096;
/// Calls per timed batch.
const CALLS: usize = 64;
/// Interleaved rounds; the median is reported.
const ROUNDS: usize = 21;

enum Runner {
    Kernel(ElementwiseKernel),
    Glibc(Func),
}

struct Candidate {
    name: String,
    twin: bool,
    runner: Runner,
}

/// The candidates for `f`: the arm, glibc, then every twin the host runs
/// (from [`twin_kernels`]).
fn candidates(f: Func) -> Result<Vec<Candidate>, String> {
    let arm = ElementwiseKernel::of_arm(f).map_err(|e| e.to_string())?;
    let mut v = vec![
        Candidate {
            name: format!("{}.arm", f.name()),
            twin: false,
            runner: Runner::Kernel(arm),
        },
        Candidate {
            name: format!("glibc {}f", f.name()),
            twin: false,
            runner: Runner::Glibc(f),
        },
    ];
    for (name, k) in twin_kernels(f) {
        v.push(Candidate {
            name: name.to_string(),
            twin: true,
            runner: Runner::Kernel(k),
        });
    }
    Ok(v)
}

fn inputs(f: Func) -> Vec<f32> {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let span = match f {
        Func::Exp => 170.0,
        Func::Erf => 8.0,
    };
    (0..N)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * span
        })
        .collect()
}

fn batch(c: &Candidate, xs: &[f32], out: &mut [f32]) -> Result<f64, String> {
    let t = Instant::now();
    for _ in 0..CALLS {
        match &c.runner {
            Runner::Kernel(k) => k.run(black_box(xs), out).map_err(|e| e.to_string())?,
            Runner::Glibc(f) => {
                for (o, &x) in out.iter_mut().zip(black_box(xs)) {
                    // SAFETY: expf/erff are pure libm functions.
                    *o = unsafe {
                        match f {
                            Func::Exp => expf(x),
                            Func::Erf => erff(x),
                        }
                    };
                }
            }
        }
        black_box(&mut *out);
    }
    let ns = t.elapsed().as_nanos().max(1) as f64;
    Ok((CALLS * xs.len()) as f64 / ns)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Per function: (arm, best twin if any, glibc) medians in elements/ns.
fn bench(f: Func) -> Result<(f64, Option<f64>, f64), String> {
    let cands = candidates(f)?;
    let xs = inputs(f);
    let mut out = vec![0f32; N];
    let mut samples = vec![Vec::with_capacity(ROUNDS); cands.len()];
    // one warm-up round
    for c in &cands {
        batch(c, &xs, &mut out)?;
    }
    for _ in 0..ROUNDS {
        for (c, s) in cands.iter().zip(samples.iter_mut()) {
            s.push(batch(c, &xs, &mut out)?);
        }
    }
    let mut arm = 0.0;
    let mut twin: Option<f64> = None;
    let mut glibc = 0.0;
    for (c, s) in cands.iter().zip(samples) {
        let m = median(s);
        println!("  {:<24} {m:>8.4} elements/ns", c.name);
        match c.runner {
            Runner::Glibc(_) => glibc = m,
            Runner::Kernel(_) if c.twin => twin = Some(twin.map_or(m, |t: f64| t.max(m))),
            Runner::Kernel(_) => arm = m,
        }
    }
    Ok((arm, twin, glibc))
}

/// Entry point: `bench elementwise`.
pub fn run(args: &[String]) -> Result<(), String> {
    match args.first().map(String::as_str) {
        Some("elementwise") => {}
        other => return Err(format!("bench: unknown benchmark {other:?} (elementwise)")),
    }
    if cfg!(debug_assertions) {
        println!("  (debug build: run `cargo run --release -p xtask -- bench elementwise` for real figures)");
    }
    let (ea, et, eg) = bench(Func::Exp)?;
    let (fa, ft, fg) = bench(Func::Erf)?;
    println!(
        "bench elementwise: exp_arm_vs_glibc={:.2} erf_arm_vs_glibc={:.2}",
        ea / eg,
        fa / fg
    );
    let ratio =
        |t: Option<f64>, d: f64| t.map_or("absent".to_string(), |t| format!("{:.2}", t / d));
    if et.is_none() && ft.is_none() {
        println!("  twins are absent: no twin figures");
    }
    println!(
        "bench elementwise: exp_twin_vs_arm={} exp_twin_vs_glibc={} erf_twin_vs_arm={} erf_twin_vs_glibc={}",
        ratio(et, ea),
        ratio(et, eg),
        ratio(ft, fa),
        ratio(ft, fg)
    );
    Ok(())
}

/// The placed twins of `f`'s arm that this host can run; a twin that
/// refuses is reported on stdout and left out.
pub fn twin_kernels(f: Func) -> Vec<(&'static str, ElementwiseKernel)> {
    let arm = ElementwiseArm::new(f);
    let host = Host::detect();
    let site = Site::new(arm.family(), Geometry::new().with("len", 1 << 16));
    let offer = match arm.offer(&site, &host) {
        Ok(o) => o,
        Err(e) => {
            println!("  {}: no offer: {e}", arm.name());
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for t in weft_elementwise::twins_of(f) {
        if t.isa() != host.isa {
            continue;
        }
        if let Err(e) = require_features(&host, t.requires()) {
            println!("  {}: skipped: {e}", t.name());
            continue;
        }
        let placed = t.emit(&offer).and_then(|code| {
            // SAFETY: a twin's body honours its arm's leaf ABI (the
            // elementwise contract); that is what a twin promises.
            unsafe { ElementwiseKernel::from_native(&code) }
        });
        match placed {
            Ok(k) => out.push((t.name(), k)),
            Err(e) => println!("  {}: refused: {e}", t.name()),
        }
    }
    out
}
