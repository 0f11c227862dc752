//! `cargo xtask exhaustive exp|erf`: every one of the 2^32 f32 inputs
//! through the scalar reference and every candidate kernel (the arm, and
//! the twins once they exist), compared bit for bit (NaN by class), and the
//! reference compared with a correct oracle. glibc's `expf`/`erff` are
//! scored against the same oracle.
//!
//! The oracle: glibc's binary64 `exp`/`erf` (documented error below 1 ulp
//! of binary64, i.e. relative `2^-52`), trusted only when the interval
//! `y·(1 ± 2^-48)` — 16 times that bound — rounds to a single f32 (IEEE
//! narrowing handles subnormals and overflow; rounding is monotonic, so the
//! correctly rounded value is then that f32). Otherwise MPFR (through rug)
//! evaluates the function with 256 bits, rounds to 24 bits and then
//! subnormalizes as IEEE binary32 does (`subnormalize_ieee_round`, which
//! corrects the double rounding); the 256-bit value being within `2^-256`
//! of an f32 rounding boundary would be needed for that to be wrong, and
//! exp/erf of a nonzero f32 never are (they are transcendental there).
//!
//! `cargo xtask exhaustive exp` re-runs itself from a release build of
//! xtask (see `main.rs`): a debug sweep of 2^32 inputs would take hours.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use rug::float::Round;
use rug::Float;
use weft_elementwise::arm::ElementwiseKernel;
use weft_elementwise::reference::{exp_f32_path, Path};
use weft_elementwise::Func;

extern "C" {
    fn expf(x: f32) -> f32;
    fn erff(x: f32) -> f32;
    fn exp(x: f64) -> f64;
    fn erf(x: f64) -> f64;
}

/// A kernel under test: its name and the placed code.
struct Candidate {
    name: &'static str,
    kernel: ElementwiseKernel,
}

/// Every candidate for `f`: the arm, then every twin of it this host can
/// run (a new twin family is one line in `bench_elementwise::twins`).
fn candidates(f: Func) -> Result<Vec<Candidate>, String> {
    let arm = ElementwiseKernel::of_arm(f).map_err(|e| e.to_string())?;
    let mut v = vec![Candidate {
        name: "arm",
        kernel: arm,
    }];
    for (name, kernel) in crate::bench_elementwise::twin_kernels(f) {
        v.push(Candidate { name, kernel });
    }
    Ok(v)
}

fn glibc(f: Func, x: f32) -> f32 {
    // SAFETY: expf/erff are pure libm functions.
    unsafe {
        match f {
            Func::Exp => expf(x),
            Func::Erf => erff(x),
        }
    }
}

fn libm64(f: Func, x: f64) -> f64 {
    // SAFETY: exp/erf are pure libm functions.
    unsafe {
        match f {
            Func::Exp => exp(x),
            Func::Erf => erf(x),
        }
    }
}

/// The correctly rounded f32 of `f(x)`, and whether MPFR was needed.
fn oracle(f: Func, x: f32) -> (f32, bool) {
    if x.is_nan() {
        return (f32::NAN, false);
    }
    let y = libm64(f, f64::from(x));
    if y.is_infinite() {
        // exp(x) above binary64's range is far above f32::MAX.
        return (y as f32, false);
    }
    let e = y.abs() * 2f64.powi(-48);
    let (a, b) = ((y - e) as f32, (y + e) as f32);
    if a.to_bits() == b.to_bits() {
        return (a, false);
    }
    (mpfr(f, x), true)
}

/// MPFR: 256-bit evaluation, then round to binary32 with subnormals.
pub fn mpfr(f: Func, x: f32) -> f32 {
    let mut v = Float::with_val(256, x);
    match f {
        Func::Exp => v.exp_mut(),
        Func::Erf => v.erf_mut(),
    }
    let (mut r, ord) = Float::with_val_round(24, &v, Round::Nearest);
    r.subnormalize_ieee_round(ord, Round::Nearest);
    r.to_f32()
}

fn same(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

#[derive(Default)]
struct Tally {
    misrounded: u64,
    glibc_misrounded: u64,
    mpfr_calls: u64,
    slow: u64,
    undecided: u64,
    mismatches: Vec<u64>,
    examples: Vec<String>,
}

impl Tally {
    fn merge(&mut self, o: &Tally) {
        self.misrounded += o.misrounded;
        self.glibc_misrounded += o.glibc_misrounded;
        self.mpfr_calls += o.mpfr_calls;
        self.slow += o.slow;
        self.undecided += o.undecided;
        for (a, b) in self.mismatches.iter_mut().zip(&o.mismatches) {
            *a += b;
        }
        for e in &o.examples {
            if self.examples.len() < 40 {
                self.examples.push(e.clone());
            }
        }
    }
}

/// Entry point: `exhaustive exp|erf [--start HEX --count N]`.
pub fn run(args: &[String]) -> Result<(), String> {
    let name = args.first().map(String::as_str).unwrap_or("");
    let f = match name {
        "exp" => Func::Exp,
        "erf" => Func::Erf,
        other => return Err(format!("exhaustive: unknown function `{other}` (exp, erf)")),
    };
    let mut start: u64 = 0;
    let mut count: u64 = 1 << 32;
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        let v = it.next().ok_or(format!("{a} needs a value"))?;
        match a.as_str() {
            "--start" => {
                start = u64::from_str_radix(v.trim_start_matches("0x"), 16)
                    .map_err(|e| format!("--start: {e}"))?
            }
            "--count" => count = v.parse().map_err(|e| format!("--count: {e}"))?,
            _ => return Err(format!("unknown option {a}")),
        }
    }
    let end = (start + count).min(1 << 32);
    let cands = candidates(f)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    const BLOCK: u64 = 1 << 16;
    let next = AtomicU64::new(start);
    let total = Mutex::new(Tally {
        mismatches: vec![0; cands.len()],
        ..Tally::default()
    });
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut t = Tally {
                    mismatches: vec![0; cands.len()],
                    ..Tally::default()
                };
                let mut xs = vec![0f32; BLOCK as usize];
                let mut outs = vec![vec![0f32; BLOCK as usize]; cands.len()];
                loop {
                    let b = next.fetch_add(BLOCK, Ordering::Relaxed);
                    if b >= end {
                        break;
                    }
                    let n = BLOCK.min(end - b) as usize;
                    for (k, x) in xs[..n].iter_mut().enumerate() {
                        *x = f32::from_bits((b + k as u64) as u32);
                    }
                    for (c, out) in cands.iter().zip(outs.iter_mut()) {
                        if let Err(e) = c.kernel.run(&xs[..n], &mut out[..n]) {
                            t.examples.push(format!("{}: {e}", c.name));
                        }
                    }
                    for k in 0..n {
                        let x = xs[k];
                        let r = match f {
                            Func::Exp => {
                                let (r, p) = exp_f32_path(x);
                                if p == Path::Slow {
                                    t.slow += 1;
                                    t.examples.push(format!(
                                        "slow path: x={:#010x} ({x:e})",
                                        x.to_bits()
                                    ));
                                }
                                t.undecided += u64::from(p == Path::Undecided);
                                r
                            }
                            Func::Erf => f.reference()(x),
                        };
                        for (ci, out) in outs.iter().enumerate() {
                            if !same(out[k], r) {
                                t.mismatches[ci] += 1;
                                if t.examples.len() < 20 {
                                    t.examples.push(format!(
                                        "{} mismatch: x={:#010x} candidate={:#010x} reference={:#010x}",
                                        cands[ci].name,
                                        x.to_bits(),
                                        out[k].to_bits(),
                                        r.to_bits()
                                    ));
                                }
                            }
                        }
                        let (o, used) = oracle(f, x);
                        t.mpfr_calls += u64::from(used);
                        if !same(r, o) {
                            t.misrounded += 1;
                            if t.examples.len() < 20 {
                                t.examples.push(format!(
                                    "reference misrounds: x={:#010x} ({x:e}) reference={:#010x} oracle={:#010x}",
                                    x.to_bits(),
                                    r.to_bits(),
                                    o.to_bits()
                                ));
                            }
                        }
                        if !same(glibc(f, x), o) {
                            t.glibc_misrounded += 1;
                        }
                    }
                }
                if let Ok(mut g) = total.lock() {
                    g.merge(&t);
                }
            });
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    let t = total
        .into_inner()
        .map_err(|_| "a worker panicked".to_string())?;
    for e in &t.examples {
        println!("  {e}");
    }
    for (c, m) in cands.iter().zip(&t.mismatches) {
        println!("  candidate {}: mismatches={m}", c.name);
    }
    if f == Func::Exp {
        println!(
            "  reference exp: slow-path={} undecided={}",
            t.slow, t.undecided
        );
    }
    println!("  oracle: mpfr-calls={}", t.mpfr_calls);
    let glibc_name = match f {
        Func::Exp => "expf",
        Func::Erf => "erff",
    };
    println!(
        "exhaustive {name}: glibc {glibc_name} misrounded={}",
        t.glibc_misrounded
    );
    let twin_mismatches: u64 = t.mismatches.iter().sum();
    println!(
        "exhaustive {name}: inputs={} misrounded={} twin-mismatches={} seconds={:.1}",
        end - start,
        t.misrounded,
        twin_mismatches,
        secs
    );
    if t.misrounded > 0 || twin_mismatches > 0 || t.undecided > 0 {
        return Err(format!("exhaustive {name}: FAILED"));
    }
    Ok(())
}
