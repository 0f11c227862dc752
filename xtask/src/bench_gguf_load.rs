//! `cargo xtask bench gguf-load`: how long the 135M model takes to load —
//! open and check the file, then re-quantise every Q4_1 tensor to Q8_0 —
//! on 1 thread and on all threads.
//!
//! Protocol: the model is fetched first (`weft_fetch::fetch_model`), one
//! untimed load warms the page cache, then [`ROUNDS`] rounds each time both
//! thread counts, interleaved (the order alternates each round), and each
//! reports its median. The output bytes are hashed once per thread count
//! to show both give the same weights.
//!
//! The last line is the summary:
//! `bench gguf-load: open_ms=A requant_1t_ms=B requant_nt_ms=C threads=N speedup=S`.

use std::time::Instant;
use weft_gguf::{to_q8_0_many, Gguf, TensorType};

/// Interleaved rounds; the median is reported.
const ROUNDS: usize = 7;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Open the file and convert its Q4_1 tensors; (open ms, convert ms, bytes out, FNV-1a of the output).
fn load(path: &std::path::Path, threads: usize) -> Result<(f64, f64, usize, u64), String> {
    let t0 = Instant::now();
    let gguf = Gguf::open(path).map_err(|e| e.to_string())?;
    let tensors: Vec<_> = gguf
        .tensors()
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|t| t.tensor_type() == TensorType::Q4_1)
        .collect();
    let t1 = Instant::now();
    let out = to_q8_0_many(&tensors, threads).map_err(|e| e.to_string())?;
    let t2 = Instant::now();
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let mut bytes = 0;
    for v in &out {
        bytes += v.len();
        // Sample every 4096th byte: a cheap check that both runs agree.
        for b in v.iter().step_by(4096) {
            hash = (hash ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    Ok((
        (t1 - t0).as_secs_f64() * 1e3,
        (t2 - t1).as_secs_f64() * 1e3,
        bytes,
        hash,
    ))
}

/// Run the benchmark.
pub fn run(_args: &[String]) -> Result<(), String> {
    let path = weft_fetch::fetch_model(&mut |line| eprintln!("bench gguf-load: {line}"))
        .map_err(|e| e.to_string())?;
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (_, _, bytes, h1) = load(&path, 1)?;
    let (_, _, _, hn) = load(&path, all)?;
    if h1 != hn {
        return Err("1-thread and all-thread conversions differ".into());
    }
    let (mut open, mut one, mut many) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let order = if round % 2 == 0 { [1, all] } else { [all, 1] };
        for threads in order {
            let (o, c, _, _) = load(&path, threads)?;
            open.push(o);
            if threads == 1 {
                one.push(c);
            } else {
                many.push(c);
            }
        }
    }
    let (open, one, many) = (median(open), median(one), median(many));
    println!("model: {}", path.display());
    println!(
        "Q4_1 → Q8_0 output: {:.1} MB; medians of {ROUNDS} interleaved rounds",
        bytes as f64 / 1e6
    );
    println!("  open + check      {open:8.2} ms");
    println!(
        "  requant 1 thread  {one:8.2} ms  ({:.0} MB/s out)",
        bytes as f64 / 1e3 / one
    );
    println!(
        "  requant {all} threads {many:8.2} ms  ({:.0} MB/s out)",
        bytes as f64 / 1e3 / many
    );
    println!(
        "bench gguf-load: open_ms={open:.2} requant_1t_ms={one:.1} requant_nt_ms={many:.1} threads={all} speedup={:.2}",
        one / many
    );
    Ok(())
}
