//! `cargo xtask bench decode --model gemma3-270m [--peer]`: tokens per
//! second of greedy decoding of Gemma 3 270M (Q4_K_M, the file as
//! downloaded) through weft-llm's planned Gemma 3 engine, on 1 and 2
//! threads.
//!
//! Protocol, as `bench decode`'s for SmolLM2: one engine per thread count;
//! each round resets it, feeds a fixed prompt (BOS and "The capital of
//! France is"), then times [`TOKENS`] decode steps, each feeding the
//! previous greedy choice. With `--peer`, llama.cpp's `llama-bench -p 0
//! -n 64 -r 1` on the same file runs in the same rounds, at 1 and 2
//! threads. The streaming-read ceiling ([`crate::ceiling`]) runs in the
//! same rounds over a buffer as large as the weight bytes one token reads
//! ([`weft_llm::mixed::Engine::streamed_bytes`]). Rounds rotate
//! which slot goes first; each slot reports its median.
//!
//! The last line: `bench decode: model=gemma3-270m tok_s_1t=… tok_s_2t=…
//! ceiling_fraction_1t=… ceiling_fraction_2t=… ratio_1t=… ratio_2t=…`
//! (the ratios only with a peer).

use std::time::Instant;

use weft_gguf::Gguf;
use weft_llm::mixed::{greedy, Engine};
use weft_plan::Executor;
use weft_tokenizer::{Special, Tokenizer};

use crate::bench_decode::{median, read_round, Peer};
use crate::ceiling::{self, fmt_fraction, Ceiling, Read, ReadLoop};

/// Decode steps timed per round.
const TOKENS: usize = 64;
/// Interleaved rounds.
const ROUNDS: usize = 7;

/// One round: reset, the prompt, then [`TOKENS`] timed steps; tokens/s.
fn round(e: &mut Engine, prompt: &[u32]) -> Result<f64, String> {
    e.reset();
    let mut logits = e.prefill(prompt).map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    for _ in 0..TOKENS {
        logits = e.step(greedy(&logits)).map_err(|e| e.to_string())?;
    }
    Ok(TOKENS as f64 / t0.elapsed().as_secs_f64())
}

/// Run the bench (`args` as `bench decode` is handed them).
pub fn run(args: &[String]) -> Result<(), String> {
    const WHO: &str = "bench decode";
    if args.iter().any(|a| a == "--offline" || a == "--neighbour") {
        return Err(format!(
            "{WHO}: --model gemma3-270m takes neither --offline nor --neighbour"
        ));
    }
    let path = weft_fetch::fetch(&weft_fetch::GEMMA3_270M, &mut |line| {
        eprintln!("{WHO}: {line}")
    })
    .map_err(|e| e.to_string())?;
    let peer = Peer::from_args(args, WHO)?.map(|p| p.with_model(path.clone()));
    let g = Gguf::open(&path).map_err(|e| e.to_string())?;
    let tokenizer = Tokenizer::from_gguf(&g).map_err(|e| e.to_string())?;
    let mut prompt: Vec<u32> = tokenizer.bos().into_iter().collect();
    prompt.extend(tokenizer.encode("The capital of France is", Special::AsText));
    let options = weft_plan::Options::from_env().map_err(|e| e.to_string())?;
    let mut engines = Vec::new();
    for threads in [1usize, 2] {
        let t0 = Instant::now();
        let e = Engine::open(&g, prompt.len() + TOKENS + 8, options.clone(), threads)
            .map_err(|e| e.to_string())?;
        eprintln!(
            "{WHO}: {}, {threads} thread(s): weights and plan in {:.0} ms",
            path.display(),
            t0.elapsed().as_secs_f64() * 1e3
        );
        engines.push(e);
    }
    let streamed = engines[0].streamed_bytes();
    let buffer = ceiling::buffer(streamed);
    let reader = Executor::new(2);
    let reads: Vec<(ReadLoop, usize)> = [1usize, 2]
        .into_iter()
        .flat_map(|t| ceiling::loops().into_iter().map(move |l| (l, t)))
        .collect();
    for e in &mut engines {
        round(e, &prompt)?;
    }
    for (l, t) in &reads {
        read_round(l, &reader, &buffer, *t);
    }
    // Slots: ours at 1 and 2 threads, the peer's when there is one, then
    // the read loops (seconds per pass, not a rate).
    let ours = if peer.is_some() { 4 } else { 2 };
    let slots = ours + reads.len();
    let mut samples = vec![Vec::new(); slots];
    for r in 0..ROUNDS {
        for k in 0..slots {
            let i = (r + k) % slots;
            let v = match (&peer, i) {
                (_, 0 | 1) => round(&mut engines[i], &prompt)?,
                (Some(p), 2 | 3) => {
                    let out = p.run(&["-p", "0", "-n", &TOKENS.to_string()], i - 1)?;
                    p.avg_ts_of(&out)?
                }
                _ => {
                    let (l, t) = &reads[i - ours];
                    read_round(l, &reader, &buffer, *t)
                }
            };
            samples[i].push(v);
        }
    }
    let mut medians: Vec<f64> = samples.into_iter().map(median).collect();
    let read_secs = medians.split_off(ours);
    let measured: Vec<Read> = reads
        .iter()
        .zip(&read_secs)
        .map(|((l, t), &secs)| Read {
            name: l.name().to_owned(),
            threads: *t as u64,
            secs,
        })
        .collect();
    println!(
        "Gemma 3 270M (Q4_K_M): decode of {TOKENS} tokens after a {}-token prompt, {ROUNDS} interleaved rounds, medians; {:.1} MB of weights a token",
        prompt.len(),
        streamed as f64 / 1e6
    );
    println!("| threads | tok/s | ms/token | weight GB/s | ceiling GB/s | of ceiling | llama.cpp tok/s | ratio |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut fraction = [None, None];
    let mut label = [String::new(), String::new()];
    let mut ratio = [None, None];
    for t in 0..2 {
        let tok_s = medians[t];
        let ceiling = Ceiling::best(&measured, t as u64 + 1);
        let (ceiling_gbs, of) = match &ceiling {
            Some(c) => (
                format!("{:.1}", streamed as f64 / c.secs / 1e9),
                Some(c.fraction(1.0 / tok_s)),
            ),
            None => ("-".to_owned(), None),
        };
        fraction[t] = of;
        label[t] = ceiling.map(|c| c.label()).unwrap_or_default();
        let peer_cols = match medians.get(t + 2).filter(|_| peer.is_some()) {
            Some(p) => {
                ratio[t] = Some(tok_s / p);
                format!("{p:.1} | {:.2}", tok_s / p)
            }
            None => "- | -".to_owned(),
        };
        println!(
            "| {} | {tok_s:.1} | {:.2} | {:.1} | {ceiling_gbs} | {} | {peer_cols} |",
            t + 1,
            1e3 / tok_s,
            streamed as f64 * tok_s / 1e9,
            fmt_fraction(of),
        );
    }
    profile_table(&mut engines, &prompt)?;
    let ratios = match ratio {
        [Some(a), Some(b)] => format!(" ratio_1t={a:.2} ratio_2t={b:.2}"),
        _ => String::new(),
    };
    println!(
        "bench decode: model=gemma3-270m tok_s_1t={:.1} tok_s_2t={:.1} ceiling_fraction_1t={} ceiling_fraction_2t={} ceiling_1t={} ceiling_2t={}{ratios}",
        medians[0],
        medians[1],
        fmt_fraction(fraction[0]),
        fmt_fraction(fraction[1]),
        label[0],
        label[1],
    );
    Ok(())
}

/// Where a decode step's time goes: one more round per thread count with
/// the engines' clocks on for its decode steps, per label µs a step and
/// its share of `step`
/// (whole steps; what the labels leave of it is the small operations
/// between kernels). A label's time on two threads includes publishing
/// its parts and waiting for the other thread's.
fn profile_table(engines: &mut [Engine], prompt: &[u32]) -> Result<(), String> {
    let mut profiles = Vec::new();
    for e in engines.iter_mut() {
        e.reset();
        let mut logits = e.prefill(prompt).map_err(|e| e.to_string())?;
        e.set_profiling(true);
        for _ in 0..TOKENS {
            logits = e.step(greedy(&logits)).map_err(|e| e.to_string())?;
        }
        profiles.push(e.profile());
        e.set_profiling(false);
    }
    let step = |p: &[(&str, u64, std::time::Duration)]| {
        p.iter()
            .find(|e| e.0 == "step")
            .map_or((1, 1e-12), |e| (e.1.max(1), e.2.as_secs_f64()))
    };
    println!();
    println!("time per label, one round per thread count, µs per step (share of a step):");
    println!("| label | calls | 1 thread | 2 threads |");
    println!("|---|---|---|---|");
    for (name, calls, _) in &profiles[0] {
        let cell = |t: usize| {
            let (steps, total) = step(&profiles[t]);
            let d = profiles[t]
                .iter()
                .find(|e| e.0 == *name)
                .map_or(0.0, |e| e.2.as_secs_f64());
            format!("{:.1} ({:.1}%)", d * 1e6 / steps as f64, 100.0 * d / total)
        };
        println!("| {name} | {calls} | {} | {} |", cell(0), cell(1));
    }
    let rest = |t: usize| {
        let (steps, total) = step(&profiles[t]);
        let labelled: f64 = profiles[t]
            .iter()
            .filter(|e| e.0 != "step")
            .map(|e| e.2.as_secs_f64())
            .sum();
        format!(
            "{:.1} ({:.1}%)",
            (total - labelled) * 1e6 / steps as f64,
            100.0 * (total - labelled) / total
        )
    };
    println!("| between kernels (Rust) | | {} | {} |", rest(0), rest(1));
    println!();
    Ok(())
}
