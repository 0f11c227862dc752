//! `cargo xtask bench prefill`: tokens per second and time to first token
//! of feeding a prompt to the real SmolLM2-135M (or the embedded model with
//! `--offline`, or when the model cannot be fetched) through the planned
//! forward pass, on 1 and 2 threads, chunked and a token at a time.
//!
//! Prompts: [`LENGTHS`] tokens each, the tokenizer's ids of a fixed English
//! text ([`TEXT`]) repeated until long enough, cut to exactly that many
//! (with the embedded model, whose vocabulary means nothing, the ids
//! `(i·37 + 5) mod vocab`). The KV cache holds [`MAX_SEQ`] positions.
//!
//! Protocol: one engine per thread count (each compiles its plan once; the
//! plan cache makes the second compile warm). A sample of Weft is the time
//! of `reset()` and `prefill(prompt)` from an empty context, which returns
//! the last token's logits: the time to the first token. Two ways are
//! timed: chunked (the plan's chunk, which the planner chose from prices,
//! [`weft_llm::engine::choose_prefill_chunk`], tokens through the
//! prefill's kernels) and a token at a time (`set_prefill_chunk(1)`: the decode
//! step's kernels, the baseline of the TTFT speedup). Before anything is
//! timed, one warm-up of every candidate checks what makes the comparison
//! fair: on every prompt and thread count the chunked prefill's last
//! logits are the token-at-a-time one's, bit for bit (both paths' matrix
//! products are `q8_0.matmul`, and every other site computes each token
//! alone; the bench fails otherwise). Then [`ROUNDS`] rounds each take one sample of every
//! candidate in rotating order; each reports its median.
//!
//! With `--peer`, llama.cpp's `llama-bench` (built by `cargo xtask peer`
//! into `target/peer/`) runs in the same rounds: `-p N -n 0 -r 1` at 1 and
//! 2 threads on the same model in Q8_0 (`cargo xtask peer quantize`);
//! `--peer=LLAMA_BENCH --peer-model=FILE` name others, and the peer is
//! never compared with the embedded model. Its rate is its own `avg_ts`.
//! On some hosts (seen: an Intel with AMX in a virtual machine) its default
//! CPU weight repacking (the AMX extra buffer) kills it with SIGSEGV on
//! prompts; so the warm-up runs it with its defaults first, and if that
//! fails (a signal or a non-zero exit) runs it with `--repack 0` for every
//! round, says so, and the summary says `peer_repack=0` (else
//! `peer_repack=default`).
//!
//! The int8 peak ([`crate::peaks::int8`]: `vpdpbusd` zmm with AVX-512
//! VNNI, else `vpmaddubsw` ymm; one thread) runs in the same rounds, a
//! sample being [`crate::peaks::time`] of [`PEAK_SAMPLES`] calls.
//! `int8_peak_fraction` is Weft's int8 operations per second on the
//! 512-token prompt at 1 thread over the peak's: a token's operations are
//! 2 × the multiply-adds of the decoder blocks' matrices (per layer
//! `attn_q` and `attn_output` dim², `attn_k` and `attn_v` kv_dim·dim each,
//! `ffn_gate`, `ffn_up` and `ffn_down` hidden·dim each). The output head
//! is left out: a prompt computes the logits of its last token only.
//!
//! A last round, not in the medians, times each site of the chunked
//! 512-token prefill at 1 thread.
//!
//! The last line is the summary: `bench prefill: pp512_tok_s_1t=A
//! pp512_tok_s_2t=B ratio_1t=C ratio_2t=D int8_peak_fraction=E
//! ttft512_speedup_1t=F ttft512_speedup_2t=G peer_repack=0|default` (the
//! ratios, Weft chunked over llama.cpp, are `-` and `peer_repack` absent
//! without a peer; a TTFT speedup is the token-at-a-time time over the
//! chunked one).

use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_kernel::Host;
use weft_llm::{Config, Engine, Model};

use crate::bench_decode::{bench_model, model_label, Peer};
use crate::peaks;

/// The name messages begin with.
const WHO: &str = "bench prefill";

/// Prompt lengths, tokens.
const LENGTHS: [usize; 2] = [64, 512];

/// Thread counts, one engine each.
const THREADS: [usize; 2] = [1, 2];

/// Rounds (interleaved), after one warm-up of everything.
const ROUNDS: usize = 5;

/// Calls of the int8 peak loop in one of its samples.
const PEAK_SAMPLES: usize = 5;

/// Positions of the KV cache: room for the longest prompt.
const MAX_SEQ: usize = 576;

/// The text the real model's prompts repeat.
const TEXT: &str = "The river runs past the old mill, where the miller's daughter keeps the \
    accounts of every sack of grain that comes down from the hills. In spring the water \
    rises and the wheel turns faster; in autumn the farmers bring their harvest to the \
    yard and wait their turn, talking about the weather, the prices at the market and \
    the new bridge the council has been promising them for years.";

/// The prompt of `n` tokens for `model` (see the module's docs; `bench
/// decode` fills its depth contexts with it too).
pub(crate) fn prompt(model: &Model, n: usize) -> Vec<u32> {
    let vocab = model.weights.config.vocab;
    if model.source == weft_llm::Source::Embedded {
        return (0..n).map(|i| ((i * 37 + 5) % vocab) as u32).collect();
    }
    let mut text = TEXT.to_owned();
    loop {
        let mut ids = model
            .tokenizer
            .encode(&text, weft_tokenizer::Special::Parse);
        if ids.len() >= n {
            ids.truncate(n);
            return ids;
        }
        text.push(' ');
        text.push_str(TEXT);
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// How Weft feeds a prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Feed {
    /// In chunks of the engine's default length.
    Chunked,
    /// One token at a time (`set_prefill_chunk(1)`).
    TokenAtATime,
}

/// One sample of Weft: seconds of `reset()` and `prefill(prompt)` fed as
/// `feed` says (`chunk`: the engine's default, restored after), and the
/// bits of the last logits.
fn feed(
    e: &mut Engine,
    prompt: &[u32],
    how: Feed,
    chunk: usize,
) -> Result<(f64, Vec<u32>), String> {
    let err = |x: weft_llm::EngineError| format!("{WHO}: {x}");
    if how == Feed::TokenAtATime {
        e.set_prefill_chunk(1).map_err(err)?;
    }
    let t0 = Instant::now();
    e.reset();
    let result = e.prefill(prompt).map(|logits| {
        let secs = t0.elapsed().as_secs_f64();
        (
            secs,
            logits.iter().map(|v| v.to_bits()).collect::<Vec<u32>>(),
        )
    });
    e.set_prefill_chunk(chunk).map_err(err)?;
    result.map_err(err)
}

/// A candidate of the rounds; `n` and `t` index [`LENGTHS`] and
/// [`THREADS`].
#[derive(Clone, Copy, Debug)]
enum Slot {
    Weft { n: usize, t: usize, how: Feed },
    Peer { n: usize, t: usize },
    Peak,
}

/// `llama-bench`'s arguments for a prompt of `n` tokens (after `-m`).
fn peer_args(n: usize, repack_off: bool) -> Vec<String> {
    let mut v: Vec<String> = vec!["-p".into(), n.to_string(), "-n".into(), "0".into()];
    if repack_off {
        v.extend(["--repack".into(), "0".into()]);
    }
    v
}

/// One sample of the peer: its tokens/s on a prompt of `n` tokens.
fn peer_rate(p: &Peer, n: usize, threads: usize, repack_off: bool) -> Result<f64, String> {
    let args = peer_args(n, repack_off);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    p.avg_ts(&args, threads)
}

/// The warm-up of the peer, which also picks its options: every prompt
/// and thread count ([`Peer::repack_fallback`]). Whether repacking is
/// off, and why.
fn peer_setup(p: &Peer) -> Result<Option<String>, String> {
    let runs: Vec<(Vec<String>, usize)> = LENGTHS
        .iter()
        .flat_map(|&n| THREADS.iter().map(move |&t| (peer_args(n, false), t)))
        .collect();
    p.repack_fallback(&runs)
}

/// int8 operations of one prompt token: 2 × the multiply-adds of the
/// decoder blocks' matrices (the head is not run per prompt token).
fn int8_ops_per_token(c: &Config) -> f64 {
    let (dim, kv, hidden) = (c.dim as f64, c.kv_dim() as f64, c.hidden as f64);
    let per_layer = 2.0 * dim * dim + 2.0 * kv * dim + 3.0 * hidden * dim;
    2.0 * per_layer * c.layers as f64
}

/// Run the benchmark.
pub fn run(args: &[String]) -> Result<(), String> {
    let offline = args.iter().any(|a| a == "--offline");
    let peer = Peer::from_args(args, WHO)?;
    let model = bench_model(WHO, offline, peer.is_some(), MAX_SEQ)?;
    let what = model_label(&model);
    let options = weft_plan::Options::from_env().map_err(|e| e.to_string())?;
    let prompts: Vec<Vec<u32>> = LENGTHS.iter().map(|&n| prompt(&model, n)).collect();
    let mut engines = Vec::new();
    for threads in THREADS {
        let t0 = Instant::now();
        let e = Engine::new(
            Arc::clone(&model.weights),
            options.clone(),
            threads,
            &mut |_, _| {},
        )
        .map_err(|e| e.to_string())?;
        eprintln!(
            "{WHO}: {what}, {threads} thread(s): plan compiled in {:.0} ms, prefill chunk {}",
            t0.elapsed().as_secs_f64() * 1e3,
            e.prefill_chunk()
        );
        engines.push(e);
    }
    let chunks: Vec<usize> = engines.iter().map(Engine::prefill_chunk).collect();
    let host = Host::detect();
    let (peak, peak_ops, peak_what) = peaks::int8(&host)?;

    // The warm-up of everything, and the invariant that makes chunked and
    // token-at-a-time comparable.
    for (t, e) in engines.iter_mut().enumerate() {
        for (n, p) in prompts.iter().enumerate() {
            let (_, chunked) = feed(e, p, Feed::Chunked, chunks[t])?;
            let (_, single) = feed(e, p, Feed::TokenAtATime, chunks[t])?;
            if chunked != single {
                let apart = chunked.iter().zip(&single).filter(|(a, b)| a != b).count();
                return Err(format!(
                    "{WHO}: the chunked prefill (chunk {}) of the {}-token prompt on {} thread(s) is not the token-at-a-time one: {apart} of {} logits differ; the comparison would not be fair",
                    chunks[t],
                    LENGTHS[n],
                    THREADS[t],
                    single.len(),
                ));
            }
        }
    }
    let repack_off = match &peer {
        Some(p) => peer_setup(p)?,
        None => None,
    };
    if let Some(why) = &repack_off {
        println!("llama.cpp runs with `--repack 0` in every round: {why}");
    }
    peaks::time(&peak, PEAK_SAMPLES);

    let mut slots = Vec::new();
    for n in 0..LENGTHS.len() {
        for t in 0..THREADS.len() {
            slots.push(Slot::Weft {
                n,
                t,
                how: Feed::Chunked,
            });
            slots.push(Slot::Weft {
                n,
                t,
                how: Feed::TokenAtATime,
            });
            if peer.is_some() {
                slots.push(Slot::Peer { n, t });
            }
        }
    }
    slots.push(Slot::Peak);
    // Per slot: Weft's seconds, the peer's tokens/s, the peak's seconds
    // per call.
    let mut figures = vec![Vec::new(); slots.len()];
    for r in 0..ROUNDS {
        for k in 0..slots.len() {
            let i = (r + k) % slots.len();
            let figure = match slots[i] {
                Slot::Weft { n, t, how } => feed(&mut engines[t], &prompts[n], how, chunks[t])?.0,
                Slot::Peer { n, t } => match &peer {
                    Some(p) => peer_rate(p, LENGTHS[n], THREADS[t], repack_off.is_some())?,
                    None => unreachable!("no peer slot without a peer"),
                },
                Slot::Peak => peaks::time(&peak, PEAK_SAMPLES),
            };
            figures[i].push(figure);
        }
    }
    let medians: Vec<f64> = figures.into_iter().map(median).collect();
    let find = |want: &dyn Fn(&Slot) -> bool| -> Option<f64> {
        slots.iter().position(want).map(|i| medians[i])
    };
    let weft_secs = |n: usize, t: usize, how: Feed| {
        find(&|s| matches!(*s, Slot::Weft { n: a, t: b, how: h } if a == n && b == t && h == how))
            .expect("every Weft slot is timed")
    };
    let peer_tok_s =
        |n: usize, t: usize| find(&|s| matches!(*s, Slot::Peer { n: a, t: b } if a == n && b == t));
    let peak_secs = find(&|s| matches!(s, Slot::Peak)).expect("the peak is timed");

    println!(
        "prefill of {}- and {}-token prompts from an empty context, {ROUNDS} interleaved rounds, medians (time to first token: the prefill's):",
        LENGTHS[0], LENGTHS[1]
    );
    if peer.is_some() {
        println!("| prompt | threads | chunked tok/s | chunked ms to first token | token-at-a-time tok/s | token-at-a-time ms | TTFT speedup | llama.cpp tok/s | ratio |");
        println!("|---|---|---|---|---|---|---|---|---|");
    } else {
        println!("| prompt | threads | chunked tok/s | chunked ms to first token | token-at-a-time tok/s | token-at-a-time ms | TTFT speedup |");
        println!("|---|---|---|---|---|---|---|");
    }
    for (n, &len) in LENGTHS.iter().enumerate() {
        for (t, &threads) in THREADS.iter().enumerate() {
            let chunked = weft_secs(n, t, Feed::Chunked);
            let single = weft_secs(n, t, Feed::TokenAtATime);
            let rate = len as f64 / chunked;
            let peer_cols = match peer_tok_s(n, t) {
                Some(p) => format!(" {p:.1} | {:.2} |", rate / p),
                None => String::new(),
            };
            println!(
                "| {len} | {threads} | {rate:.1} | {:.1} | {:.1} | {:.1} | {:.2} |{peer_cols}",
                chunked * 1e3,
                len as f64 / single,
                single * 1e3,
                single / chunked
            );
        }
    }
    let long = LENGTHS.len() - 1;
    let pp512_tok_s = |t: usize| LENGTHS[long] as f64 / weft_secs(long, t, Feed::Chunked);
    let ops_per_token = int8_ops_per_token(&model.weights.config);
    let peak_ops_s = peak_ops / peak_secs;
    let weft_ops_s = ops_per_token * pp512_tok_s(0);
    let peak_fraction = weft_ops_s / peak_ops_s;
    println!();
    println!(
        "int8 peak ({peak_what}, 1 thread): {:.1} GOPS; Weft's {}-token prefill at 1 thread: {:.1} GOPS ({:.1} M int8 ops a token, the blocks' matrices without the head): {peak_fraction:.3} of the peak",
        peak_ops_s / 1e9,
        LENGTHS[long],
        weft_ops_s / 1e9,
        ops_per_token / 1e6
    );

    // Where each thread count's time goes in the long prompt.
    let mut profiles = Vec::new();
    for (e, &chunk) in engines.iter_mut().zip(&chunks) {
        e.set_profiling(true);
        feed(e, &prompts[long], Feed::Chunked, chunk)?;
        profiles.push(e.profile());
        e.set_profiling(false);
    }
    let total: Duration = profiles[0].iter().map(|(_, _, d)| *d).sum();
    let per_token = |d: Duration| d.as_secs_f64() * 1e6 / LENGTHS[long] as f64;
    println!();
    println!(
        "time per site, one chunked round of the {}-token prompt on 1 and on 2 threads (share: of the 1-thread total):",
        LENGTHS[long]
    );
    println!("| site | calls | µs/prompt token, 1 thread | share | µs/prompt token, 2 threads | 2 threads' speedup |");
    println!("|---|---|---|---|---|---|");
    for (i, (name, calls, d)) in profiles[0].iter().enumerate().filter(|(_, p)| p.1 > 0) {
        let two = profiles[1][i].2;
        println!(
            "| {name} | {calls} | {:.2} | {:.1}% | {:.2} | {:.2} |",
            per_token(*d),
            100.0 * d.as_secs_f64() / total.as_secs_f64().max(1e-12),
            per_token(two),
            d.as_secs_f64() / two.as_secs_f64().max(1e-12)
        );
    }
    println!();
    let ratio = |t: usize| {
        peer_tok_s(long, t).map_or("-".to_owned(), |p| format!("{:.2}", pp512_tok_s(t) / p))
    };
    let speedup =
        |t: usize| weft_secs(long, t, Feed::TokenAtATime) / weft_secs(long, t, Feed::Chunked);
    let repack = match (&peer, &repack_off) {
        (None, _) => String::new(),
        (Some(_), Some(_)) => " peer_repack=0".to_owned(),
        (Some(_), None) => " peer_repack=default".to_owned(),
    };
    println!(
        "{WHO}: pp512_tok_s_1t={:.1} pp512_tok_s_2t={:.1} ratio_1t={} ratio_2t={} int8_peak_fraction={peak_fraction:.3} ttft512_speedup_1t={:.2} ttft512_speedup_2t={:.2}{repack}",
        pp512_tok_s(0),
        pp512_tok_s(1),
        ratio(0),
        ratio(1),
        speedup(0),
        speedup(1),
    );
    Ok(())
}
