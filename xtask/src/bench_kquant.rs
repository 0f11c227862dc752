//! `cargo xtask bench kquant-matvec`: the weft-kquant matrix-vector
//! families (`q4_k.matvec`, `q6_k.matvec`, `q5_0.matvec`) at Gemma 3
//! 270M's shapes, next to the shared streaming-read ceiling.
//!
//! Per family, two sections, each in interleaved rounds (every candidate
//! one sample per round, the starting candidate rotating), medians:
//!
//! - **L2**: the model's shapes of that format at batch 1 (Q4_K:
//!   `attn_output` 640×1024 and `ffn_down` 640×2048; Q6_K: `ffn_down`
//!   640×2048; Q5_0: `attn_q` 1024×640, `attn_k`/`attn_v` 256×640,
//!   `ffn_gate`/`ffn_up` 2048×640): the arm and every x64 twin the host
//!   runs, one thread, µs per call and the twin's speed-up over the arm.
//! - **DRAM**: a sweep over distinct matrices of the family's largest
//!   shape in one huge-page arena, about [`SWEEP_BYTES`] in all (more than
//!   twice a 32 MiB L3, so every call streams its weights from DRAM, as
//!   decoding does), the same activation for each, at 1 and 2 threads
//!   (2 through the planner's executor, split along the offer's member
//!   views); beside them every read loop of the streaming-read ceiling
//!   ([`crate::ceiling`]) over the same bytes, at 1 and 2 threads.
//!
//! Summary: `bench kquant-matvec: twin_vs_arm_l2=… (the minimum over every
//! family and L2 shape) q4_k_ceiling_fraction_1t=… _2t=… q6_k_… q5_0_…`
//! (the best twin from DRAM against the ceiling at that thread count). A
//! fraction above 1.00 is a defect of the ceiling, printed as such.

use std::hint::black_box;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use weft_gguf::block::Format;
use weft_kernel::{Host, KernelArgs, MemberViews, Offer, Refusal, Twin};
use weft_kquant::cases::random_activations;
use weft_kquant::validation::random_weights;
use weft_kquant::{q4_k, q5_0, q6_k, x_format, Activations, KMatvecKernel, KWeights};
use weft_plan::Executor;

use crate::ceiling::{self, fmt_fraction, Ceiling, Read, ReadLoop};

/// Bytes of weights each DRAM sweep reads.
pub const SWEEP_BYTES: usize = 80 << 20;
/// Interleaved rounds.
const ROUNDS: usize = 9;
/// Target seconds per sample of the L2 section.
const SAMPLE_SECS: f64 = 0.010;

/// One family: its weight format, arm, twins and the model's shapes.
struct Family {
    name: &'static str,
    format: Format,
    arm: fn() -> Result<KMatvecKernel, Refusal>,
    arm_name: &'static str,
    offer: fn(u64, u64, u64) -> Result<Offer, Refusal>,
    twins: Vec<Box<dyn Twin>>,
    shapes: &'static [(usize, usize)],
}

fn families() -> Vec<Family> {
    fn boxed<T: Twin + 'static>(t: T) -> Box<dyn Twin> {
        Box::new(t)
    }
    vec![
        Family {
            name: "q4_k",
            format: Format::Q4_K,
            arm: q4_k::arm::place_arm,
            arm_name: q4_k::arm::ARM_NAME,
            offer: q4_k::arm::offer_for,
            twins: q4_k::twin_x64::TWINS.into_iter().map(boxed).collect(),
            shapes: &[(640, 1024), (640, 2048)],
        },
        Family {
            name: "q6_k",
            format: Format::Q6_K,
            arm: q6_k::arm::place_arm,
            arm_name: q6_k::arm::ARM_NAME,
            offer: q6_k::arm::offer_for,
            twins: q6_k::twin_x64::TWINS.into_iter().map(boxed).collect(),
            shapes: &[(640, 2048)],
        },
        Family {
            name: "q5_0",
            format: Format::Q5_0,
            arm: q5_0::arm::place_arm,
            arm_name: q5_0::arm::ARM_NAME,
            offer: q5_0::arm::offer_for,
            twins: q5_0::twin_x64::TWINS.into_iter().map(boxed).collect(),
            shapes: &[(1024, 640), (256, 640), (2048, 640)],
        },
    ]
}

fn executor() -> &'static Executor {
    static EXEC: OnceLock<Executor> = OnceLock::new();
    EXEC.get_or_init(|| Executor::new(2))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The placed arm and the placed twins the host runs, with names.
fn kernels(f: &Family, host: &Host) -> Result<Vec<(String, Arc<KMatvecKernel>)>, String> {
    let mut v = vec![(
        f.arm_name.to_owned(),
        Arc::new((f.arm)().map_err(|e| e.to_string())?),
    )];
    let (rows, cols) = f.shapes[0];
    let offer = (f.offer)(rows as u64, cols as u64, 1).map_err(|e| e.to_string())?;
    for twin in &f.twins {
        if weft_kernel::require_features(host, twin.requires()).is_err() {
            continue;
        }
        let code = twin
            .emit(&offer)
            .map_err(|e| format!("{}: {e}", twin.name()))?;
        // SAFETY: weft-kquant's twins are validated bit for bit against
        // their arms (its tests, and the planner's judge before any
        // choice): they honour the leaf ABI, read only the blocks the
        // arguments name and write only their rows' outputs.
        let k = unsafe { KMatvecKernel::from_native(&code, f.format) }
            .map_err(|e| format!("{}: {e}", twin.name()))?;
        v.push((twin.name().to_owned(), Arc::new(k)));
    }
    Ok(v)
}

/// Seconds per call of `k` over `reps` calls on one thread.
fn sample_l2(
    k: &KMatvecKernel,
    w: &KWeights,
    x: &Activations,
    y: &mut [f32],
    reps: usize,
) -> Result<f64, String> {
    let t = Instant::now();
    for _ in 0..reps {
        k.run(w, x, y, 0..w.rows()).map_err(|e| e.to_string())?;
        black_box(&mut *y);
    }
    Ok(t.elapsed().as_secs_f64() / reps as f64)
}

/// The L2 section of one family: per shape, `(candidate, median µs)`.
type L2Rows = Vec<((usize, usize), Vec<(String, f64)>)>;

fn l2_section(f: &Family, kernels: &[(String, Arc<KMatvecKernel>)]) -> Result<L2Rows, String> {
    let xf = x_format(f.format).ok_or("no activation format")?;
    let mut out = Vec::new();
    for (i, &(rows, cols)) in f.shapes.iter().enumerate() {
        let blocks = cols / f.format.block_len();
        let w = random_weights(f.format, rows, blocks, 0x51 + i as u64, false);
        let x = random_activations(xf, blocks, 1, 0x61 + i as u64);
        let mut y = vec![0.0f32; rows];
        let mut reps = Vec::new();
        for (_, k) in kernels {
            let once = sample_l2(k, &w, &x, &mut y, 1)?;
            let r = ((SAMPLE_SECS / once.max(1e-9)) as usize).clamp(1, 100_000);
            sample_l2(k, &w, &x, &mut y, r)?;
            reps.push(r);
        }
        let mut samples = vec![Vec::new(); kernels.len()];
        for round in 0..ROUNDS {
            for j in 0..kernels.len() {
                let c = (j + round) % kernels.len();
                samples[c].push(sample_l2(&kernels[c].1, &w, &x, &mut y, reps[c])?);
            }
        }
        let rows_out = kernels
            .iter()
            .zip(&mut samples)
            .map(|((name, _), s)| (name.clone(), median(s) * 1e6))
            .collect();
        out.push(((rows, cols), rows_out));
    }
    Ok(out)
}

/// A DRAM sweep's operands: the matrices' bytes in one arena, the shared
/// activation, the offer's member views.
struct Sweep {
    format: Format,
    rows: usize,
    cols: usize,
    matrices: usize,
    bytes: weft_arena::Bytes,
    x: Activations,
    views: MemberViews,
}

impl Sweep {
    fn new(f: &Family) -> Result<Sweep, String> {
        let &(rows, cols) = f
            .shapes
            .iter()
            .max_by_key(|(r, c)| r * c)
            .ok_or("no shapes")?;
        let blocks = cols / f.format.block_len();
        let one = rows * blocks * f.format.block_bytes();
        let matrices = SWEEP_BYTES.div_ceil(one);
        let mut arena = weft_arena::ArenaBuilder::new(one * matrices);
        let range = arena.push_with(one * matrices, |s| {
            for (i, chunk) in s.chunks_mut(one).enumerate() {
                let w = random_weights(f.format, rows, blocks, 0x71 + i as u64, false);
                chunk.copy_from_slice(w.bytes());
            }
        });
        let bytes = arena.seal().map_err(|e| e.to_string())?.view(range);
        let views = (f.offer)(rows as u64, cols as u64, 1)
            .map_err(|e| e.to_string())?
            .views
            .ok_or("the offer has no member views")?;
        let xf = x_format(f.format).ok_or("no activation format")?;
        Ok(Sweep {
            format: f.format,
            rows,
            cols,
            matrices,
            bytes,
            x: random_activations(xf, blocks, 1, 0x81),
            views,
        })
    }

    fn matrix(&self, i: usize) -> &[u8] {
        let one = self.bytes.len() / self.matrices;
        &self.bytes[i * one..(i + 1) * one]
    }
}

enum Runner<'a> {
    Kernel(&'a KMatvecKernel),
    Stream(ReadLoop),
}

/// Seconds for one sweep (every matrix once) by `runner` on `threads`.
fn sweep_once(s: &Sweep, runner: &Runner<'_>, threads: u64, y: &mut [f32]) -> Result<f64, String> {
    let t = Instant::now();
    match runner {
        Runner::Kernel(k) => {
            for i in 0..s.matrices {
                let args = weft_kquant::KMatvecArgs::from_slices(
                    s.matrix(i),
                    s.format,
                    s.x.bytes(),
                    y,
                    (s.rows, s.cols, 1),
                    0..s.rows,
                )
                .map_err(|e| e.to_string())?;
                if threads == 1 {
                    // SAFETY: `args` was checked against the sweep's bytes,
                    // the activation and `y`, which outlive the call.
                    unsafe { k.kernel().call(&args) };
                } else {
                    // SAFETY: as above; the executor splits `args` along
                    // the offer's member views into disjoint row ranges,
                    // and a body writes only its own rows' outputs.
                    unsafe { executor().run(k.kernel(), &args, &s.views) };
                }
                black_box(args.range());
            }
        }
        Runner::Stream(l) => {
            black_box(l.read_parts(executor(), black_box(&s.bytes), threads as usize));
        }
    }
    black_box(&mut *y);
    Ok(t.elapsed().as_secs_f64())
}

/// The DRAM section: the best twin's fraction of the ceiling at 1 and 2
/// threads.
fn dram_section(
    f: &Family,
    kernels: &[(String, Arc<KMatvecKernel>)],
) -> Result<[Option<f64>; 2], String> {
    let sweep = Sweep::new(f)?;
    println!(
        "  DRAM: {} distinct {}×{} matrices ({:.1} MB), batch 1, per sweep",
        sweep.matrices,
        sweep.rows,
        sweep.cols,
        sweep.bytes.len() as f64 / 1e6
    );
    let loops = ceiling::loops();
    let mut cands: Vec<(String, bool, u64, Runner<'_>)> = Vec::new();
    for threads in [1u64, 2] {
        for (name, k) in kernels {
            cands.push((name.clone(), true, threads, Runner::Kernel(k)));
        }
        for l in &loops {
            cands.push((
                l.name().to_owned(),
                false,
                threads,
                Runner::Stream(l.clone()),
            ));
        }
    }
    let mut y = vec![0.0f32; sweep.rows];
    for c in &cands {
        sweep_once(&sweep, &c.3, c.2, &mut y)?;
    }
    let mut samples = vec![Vec::new(); cands.len()];
    for round in 0..ROUNDS {
        for j in 0..cands.len() {
            let c = (j + round) % cands.len();
            samples[c].push(sweep_once(&sweep, &cands[c].3, cands[c].2, &mut y)?);
        }
    }
    let medians: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
    let reads: Vec<Read> = cands
        .iter()
        .zip(&medians)
        .filter(|(c, _)| !c.1)
        .map(|(c, &secs)| Read {
            name: c.0.clone(),
            threads: c.2,
            secs,
        })
        .collect();
    let mut fraction = [None, None];
    for (t, frac) in [1u64, 2].into_iter().zip(fraction.iter_mut()) {
        let Some(ceil): Option<Ceiling> = Ceiling::best(&reads, t) else {
            continue;
        };
        for (c, &secs) in cands.iter().zip(&medians).filter(|(c, _)| c.1 && c.2 == t) {
            println!(
                "    {:<28} {t}t {:>9.3} ms {:>7.1} GB/s {:>6.2} of ceiling",
                c.0,
                secs * 1e3,
                sweep.bytes.len() as f64 / secs / 1e9,
                ceil.fraction(secs)
            );
        }
        println!(
            "    ceiling at {t} thread(s): {} ({:.1} GB/s)",
            ceil.label(),
            sweep.bytes.len() as f64 / ceil.secs / 1e9
        );
        let best_twin = cands
            .iter()
            .zip(&medians)
            .filter(|(c, _)| c.1 && c.2 == t && c.0 != f.arm_name)
            .map(|(_, &s)| s)
            .min_by(f64::total_cmp);
        *frac = best_twin.map(|s| ceil.fraction(s));
    }
    Ok(fraction)
}

/// Run the bench.
pub fn run(args: &[String]) -> Result<(), String> {
    // The bench's own name comes first; it takes nothing else.
    if args.len() > 1 {
        return Err(format!(
            "bench kquant-matvec takes no arguments, not {:?}",
            &args[1..]
        ));
    }
    let host = Host::detect();
    println!(
        "bench kquant-matvec on {} ({ROUNDS} interleaved rounds, medians)",
        crate::cpu::slug()
    );
    let mut twin_vs_arm: Option<f64> = None;
    let mut summary = Vec::new();
    for f in families() {
        let kernels = kernels(&f, &host)?;
        println!("\n{}.matvec", f.name);
        for ((rows, cols), results) in l2_section(&f, &kernels)? {
            let bytes = (rows * cols / f.format.block_len() * f.format.block_bytes()) as f64;
            println!(
                "  L2 {rows}×{cols} ({} weight bytes), 1 thread",
                bytes as u64
            );
            let arm = results[0].1;
            for (name, us) in &results {
                println!(
                    "    {name:<28} {us:>9.2} µs {:>7.1} GB/s {:>6.2}× arm",
                    bytes / us / 1e3,
                    arm / us
                );
            }
            if let Some(best) = results[1..].iter().map(|r| r.1).min_by(f64::total_cmp) {
                let r = arm / best;
                twin_vs_arm = Some(twin_vs_arm.map_or(r, |v: f64| v.min(r)));
            }
        }
        let [one, two] = dram_section(&f, &kernels)?;
        summary.push(format!(
            "{0}_ceiling_fraction_1t={1} {0}_ceiling_fraction_2t={2}",
            f.name,
            fmt_fraction(one),
            fmt_fraction(two)
        ));
    }
    println!();
    println!(
        "bench kquant-matvec: twin_vs_arm_l2={} {}",
        twin_vs_arm.map_or("absent".to_owned(), |v| format!("{v:.2}")),
        summary.join(" ")
    );
    Ok(())
}
