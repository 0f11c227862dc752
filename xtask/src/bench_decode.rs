//! `cargo xtask bench decode`: tokens per second of greedy decoding of the
//! real SmolLM2-135M (or the embedded model with `--offline`, or when the
//! model cannot be fetched) through the planned forward pass, on 1 and 2
//! threads.
//!
//! Protocol: one engine per thread count (each compiles its plan once; the
//! plan cache makes the second compile warm). Each round resets an engine,
//! feeds a fixed 8-token prompt, then times [`TOKENS`] decode steps (each
//! step feeds the previous argmax). Rounds alternate the thread counts and
//! which goes first; each count reports the median of its rounds. A last,
//! untimed-for-the-summary round at 1 thread records time per site.
//!
//! The last line is the summary: `bench decode: tok_s_1t=A tok_s_2t=B`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_llm::{Config, Engine, Model};

/// Decode steps timed per round.
const TOKENS: usize = 64;

/// Rounds per thread count (interleaved).
const ROUNDS: usize = 7;

/// The prompt fed before each round's decode ("The capital of France is"
/// in SmolLM2's vocabulary when the real model runs; any ids otherwise).
fn prompt(model: &Model) -> Vec<u32> {
    let mut ids = model
        .tokenizer
        .encode("The capital of France is", weft_tokenizer::Special::Parse);
    ids.truncate(8);
    while ids.len() < 8 {
        ids.push(1 + ids.len() as u32);
    }
    ids
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One round: reset, prompt, then [`TOKENS`] timed decode steps; tokens/s.
fn round(e: &mut Engine, prompt: &[u32]) -> Result<f64, String> {
    e.reset();
    for &t in prompt {
        e.step(t).map_err(|x| x.to_string())?;
    }
    let t0 = Instant::now();
    for _ in 0..TOKENS {
        let next = e.argmax();
        e.step(next).map_err(|x| x.to_string())?;
    }
    Ok(TOKENS as f64 / t0.elapsed().as_secs_f64())
}

/// Run the benchmark.
pub fn run(args: &[String]) -> Result<(), String> {
    let offline = args.iter().any(|a| a == "--offline");
    let max_seq = 256;
    let model = if offline {
        None
    } else {
        match weft_fetch::fetch_model(&mut |line| eprintln!("bench decode: {line}")) {
            Ok(path) => Some(Model::open(&path, max_seq).map_err(|e| e.to_string())?),
            Err(e) => {
                eprintln!("bench decode: no model file ({e}); timing the embedded model");
                None
            }
        }
    };
    let model = match model {
        Some(m) => m,
        None => Model::embedded(&Config {
            max_seq,
            ..Config::smollm2_135m()
        })
        .map_err(|e| e.to_string())?,
    };
    let what = match &model.source {
        weft_llm::Source::File(p) => p.display().to_string(),
        weft_llm::Source::Embedded => "the embedded model".to_owned(),
    };
    let options = weft_plan::Options::from_env().map_err(|e| e.to_string())?;
    let prompt = prompt(&model);
    let mut engines = Vec::new();
    for threads in [1usize, 2] {
        let t0 = Instant::now();
        let e = Engine::new(
            Arc::clone(&model.weights),
            options.clone(),
            threads,
            &mut |_, _| {},
        )
        .map_err(|e| e.to_string())?;
        eprintln!(
            "bench decode: {what}, {threads} thread(s): plan compiled in {:.0} ms",
            t0.elapsed().as_secs_f64() * 1e3
        );
        engines.push(e);
    }
    let streamed = model.weights.streamed_bytes() as f64;
    // One warm-up round each (page faults, caches, the pool's threads).
    for e in &mut engines {
        round(e, &prompt)?;
    }
    let mut rates = vec![Vec::new(), Vec::new()];
    for r in 0..ROUNDS {
        let order: [usize; 2] = if r % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            rates[i].push(round(&mut engines[i], &prompt)?);
        }
    }
    let tok_s: Vec<f64> = rates.into_iter().map(median).collect();
    println!(
        "decode of {TOKENS} tokens after an 8-token prompt, {ROUNDS} interleaved rounds, medians:"
    );
    println!("| threads | tok/s | ms/token | Q8_0 weight GB/s |");
    println!("|---|---|---|---|");
    for (i, t) in tok_s.iter().enumerate() {
        println!(
            "| {} | {t:.1} | {:.2} | {:.1} |",
            i + 1,
            1e3 / t,
            streamed * t / 1e9
        );
    }

    // Where one thread's time goes.
    let e = &mut engines[0];
    e.set_profiling(true);
    round(e, &prompt)?;
    let profile = e.profile();
    let total: Duration = profile.iter().map(|(_, _, d)| *d).sum();
    println!();
    println!(
        "time per site, 1 thread, one round ({} steps):",
        TOKENS + prompt.len()
    );
    println!("| site | calls | µs/token | share |");
    println!("|---|---|---|---|");
    let steps = (TOKENS + prompt.len()) as f64;
    for (name, calls, d) in profile {
        println!(
            "| {name} | {calls} | {:.1} | {:.1}% |",
            d.as_secs_f64() * 1e6 / steps,
            100.0 * d.as_secs_f64() / total.as_secs_f64().max(1e-12)
        );
    }
    println!();
    println!(
        "bench decode: tok_s_1t={:.1} tok_s_2t={:.1}",
        tok_s[0], tok_s[1]
    );
    Ok(())
}
