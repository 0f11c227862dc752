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
//! untimed-for-the-summary round per thread count records time per site.
//!
//! With `--peer`, llama.cpp's `llama-bench` (built by `cargo xtask peer`
//! into `target/peer/`; nothing of llama.cpp is in this repository) runs in
//! the same rounds, interleaved with ours: `-p 0 -n 64 -r 1` at 1 and 2
//! threads on the same model in Q8_0 (`cargo xtask peer quantize`: the
//! peer's own `llama-quantize --allow-requantize … Q8_0`, the weights our
//! loader gives). `--peer=LLAMA_BENCH --peer-model=FILE` name others. The
//! peer is never compared with the embedded model (`--offline`). Its rate is its own `avg_ts`; the line
//! `bench decode peer: …` gives the peer's medians and our ratios to them.
//!
//! With `--neighbour`, a busy neighbour (`sh -c 'while :; do :; done'`,
//! one core's worth of spinning) runs through every timed round, started
//! after the plans compile and stopped before the per-site profile; the
//! summary adds `neighbour_2t_vs_1t` (2-thread over 1-thread rate, target
//! ≥ 1.0: a second thread must never cost more than it brings).
//!
//! The shared streaming-read ceiling ([`crate::ceiling`]) runs in the same
//! rounds: every read loop, at 1 and 2 threads, over a buffer as large as
//! the weight bytes one token streams ([`weft_llm::Weights::streamed_bytes`]),
//! [`CEILING_PASSES`] passes a sample. `ceiling_fraction_Nt` is weight bytes
//! per token × tok/s over the ceiling's bytes per second (equivalently the
//! ceiling's time per pass over the time per token); above 1.00 it is
//! printed as `(above-ceiling)`, a defect of the ceiling to investigate.
//!
//! The depth section ([`depth_section`]) then decodes on one thread after
//! contexts of [`DEPTHS`] positions, with the default binary16 KV cache
//! and a binary32 one, beside `llama-bench -d DEPTH` with a peer, in
//! rounds of its own.
//!
//! The last line is the summary: `bench decode: model=NAME tok_s_1t=A
//! tok_s_2t=B ceiling_fraction_1t=C ceiling_fraction_2t=D ceiling_1t=LOOP
//! ceiling_2t=LOOP depth1024_ratio_1t=E depth4096_ratio_1t=F` (without a
//! peer `depth1024_tok_s_1t=…` and so on).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Instant;

use weft_llm::{Config, Engine, KvCache, Model, Weights};
use weft_plan::Executor;

use crate::ceiling::{self, fmt_fraction, Ceiling, Read, ReadLoop};

/// Decode steps timed per round.
const TOKENS: usize = 64;

/// Rounds per thread count (interleaved).
const ROUNDS: usize = 7;

/// Context depths of the depth section: decode after this many positions.
const DEPTHS: [usize; 2] = [1024, 4096];

/// Rounds of the depth section (interleaved).
const DEPTH_ROUNDS: usize = 5;

/// Passes over the token's weight bytes in one sample of a read loop.
const CEILING_PASSES: usize = 8;

/// One sample of a read loop: seconds per pass over `bytes`.
pub(crate) fn read_round(l: &ReadLoop, exec: &Executor, bytes: &[u8], threads: usize) -> f64 {
    let t0 = Instant::now();
    for _ in 0..CEILING_PASSES {
        std::hint::black_box(l.read_parts(exec, std::hint::black_box(bytes), threads));
    }
    t0.elapsed().as_secs_f64() / CEILING_PASSES as f64
}

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

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The model a bench times: the real SmolLM2-135M with a cache of
/// `max_seq` positions, or the embedded one of its shape when `offline`
/// or when it cannot be fetched — unless a peer is to be compared, which
/// needs the real one. `who` begins the messages.
pub(crate) fn bench_model(
    who: &str,
    offline: bool,
    peer: bool,
    max_seq: usize,
) -> Result<Model, String> {
    if offline && peer {
        return Err(format!(
            "{who}: --peer times llama.cpp on SmolLM2; it cannot be compared with the embedded synthetic model (--offline)"
        ));
    }
    let model = if offline {
        None
    } else {
        match weft_fetch::fetch_model(&mut |line| eprintln!("{who}: {line}")) {
            Ok(path) => Some(Model::open(&path, max_seq).map_err(|e| e.to_string())?),
            Err(e) => {
                eprintln!("{who}: no model file ({e}); timing the embedded model");
                None
            }
        }
    };
    match model {
        Some(m) => Ok(m),
        None if peer => Err(format!(
            "{who}: --peer needs the real model (llama.cpp cannot run the embedded synthetic one), and it could not be fetched"
        )),
        None => Model::embedded(&Config {
            max_seq,
            ..Config::smollm2_135m()
        })
        .map_err(|e| e.to_string()),
    }
}

/// What the messages call `model`: its file, or the embedded model.
pub(crate) fn model_label(model: &Model) -> String {
    match &model.source {
        weft_llm::Source::File(p) => p.display().to_string(),
        weft_llm::Source::Embedded => "the embedded model".to_owned(),
    }
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

/// llama.cpp's `llama-bench` and the Q8_0 model it times (shared with
/// `bench prefill`).
pub(crate) struct Peer {
    pub(crate) bench: PathBuf,
    pub(crate) model: PathBuf,
    /// The command whose messages these are (`bench decode`, …).
    who: &'static str,
}

impl Peer {
    /// The peer the arguments name, if any; `who` begins its messages.
    pub(crate) fn from_args(args: &[String], who: &'static str) -> Result<Option<Peer>, String> {
        let value = |key: &str| {
            args.iter()
                .find_map(|a| a.strip_prefix(key).map(PathBuf::from))
        };
        let bench = match (value("--peer="), args.iter().any(|a| a == "--peer")) {
            (Some(bench), _) => bench,
            (None, true) => crate::peer::program("llama-bench"),
            (None, false) if value("--peer-model=").is_some() => {
                return Err(format!("{who}: --peer-model needs --peer"))
            }
            (None, false) => return Ok(None),
        };
        let model = value("--peer-model=").unwrap_or_else(crate::peer::q8_0_model);
        for (what, path, how) in [
            ("llama-bench", &bench, "cargo xtask peer"),
            ("the Q8_0 model", &model, "cargo xtask peer quantize"),
        ] {
            if !path.exists() {
                return Err(format!(
                    "{who}: {what} {} is missing; `{how}` makes it",
                    path.display()
                ));
            }
        }
        Ok(Some(Peer { bench, model, who }))
    }

    /// Run `llama-bench -m MODEL EXTRA -r 1 -o jsonl -t THREADS` to its
    /// end, whatever its exit status (an error only if it cannot start).
    pub(crate) fn run(&self, extra: &[&str], threads: usize) -> Result<Output, String> {
        Command::new(&self.bench)
            .arg("-m")
            .arg(&self.model)
            .args(extra)
            .args(["-r", "1", "-o", "jsonl"])
            .args(["-t", &threads.to_string()])
            .output()
            .map_err(|e| format!("{}: cannot run {}: {e}", self.who, self.bench.display()))
    }

    /// The same llama-bench timing `model` instead.
    pub(crate) fn with_model(self, model: PathBuf) -> Peer {
        Peer { model, ..self }
    }

    /// The rate (`avg_ts`, tokens/s) a run of [`Peer::run`] reported; an
    /// error if it failed or printed none.
    pub(crate) fn avg_ts_of(&self, out: &Output) -> Result<f64, String> {
        let who = self.who;
        if !out.status.success() {
            return Err(format!(
                "{who}: {} failed ({}): {}",
                self.bench.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with('{'))
            .ok_or_else(|| format!("{who}: {} printed no JSON line", self.bench.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("{who}: the peer's JSON line: {e}"))?;
        v.get("avg_ts")
            .and_then(serde_json::Value::as_f64)
            .ok_or_else(|| format!("{who}: the peer's JSON line has no avg_ts"))
    }

    /// One run of `llama-bench` with `extra` (see [`Peer::run`]) on
    /// `threads` threads; its `avg_ts`, tokens/s.
    pub(crate) fn avg_ts(&self, extra: &[&str], threads: usize) -> Result<f64, String> {
        self.avg_ts_of(&self.run(extra, threads)?)
    }

    /// Which options the peer runs with on this host: every run of
    /// `runs` (llama-bench arguments after `-m`, threads) with its
    /// defaults, stopping at the first that fails; if one did, all of them
    /// again with `--repack 0` (on some hosts its default CPU repacking —
    /// the AMX extra buffer in a virtual machine — dies with SIGSEGV on
    /// prompt processing). `None` when the defaults work, else why
    /// repacking is off; an error if `--repack 0` fails too.
    pub(crate) fn repack_fallback(
        &self,
        runs: &[(Vec<String>, usize)],
    ) -> Result<Option<String>, String> {
        let mut crash = None;
        for (args, t) in runs {
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = self.run(&argv, *t)?;
            if !out.status.success() {
                crash = Some(format!(
                    "`llama-bench {} -t {t}` with its default options failed ({})",
                    args.join(" "),
                    out.status
                ));
                break;
            }
            self.avg_ts_of(&out)?;
        }
        let Some(crash) = crash else {
            return Ok(None);
        };
        for (args, t) in runs {
            let mut argv: Vec<&str> = args.iter().map(String::as_str).collect();
            argv.extend(["--repack", "0"]);
            self.avg_ts(&argv, *t)
                .map_err(|e| format!("{e}; with --repack 0 too ({crash})"))?;
        }
        Ok(Some(crash))
    }

    /// One generation of [`TOKENS`] tokens on `threads` threads; tokens/s.
    fn round(&self, threads: usize) -> Result<f64, String> {
        self.avg_ts(&["-p", "0", "-n", &TOKENS.to_string()], threads)
    }
}

/// A process spinning on one core for as long as this lives.
struct Neighbour(std::process::Child);

impl Neighbour {
    fn start() -> Result<Neighbour, String> {
        Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .map(Neighbour)
            .map_err(|e| format!("bench decode: cannot start the busy neighbour: {e}"))
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Run the benchmark.
pub fn run(args: &[String]) -> Result<(), String> {
    match args.iter().find_map(|a| a.strip_prefix("--model=")) {
        Some("gemma3-270m") => return crate::bench_gemma::run(args),
        Some("smollm2-135m") | None => {}
        Some(other) => return Err(format!("bench decode: no model {other:?}")),
    }
    let offline = args.iter().any(|a| a == "--offline");
    let with_neighbour = args.iter().any(|a| a == "--neighbour");
    let peer = Peer::from_args(args, "bench decode")?;
    // Room for the deepest context and a round's tokens after it.
    let max_seq = DEPTHS[DEPTHS.len() - 1] + TOKENS + 8;
    let model = bench_model("bench decode", offline, peer.is_some(), max_seq)?;
    let what = model_label(&model);
    // For the summary line: the file's name, or `embedded`.
    let model_name = match &model.source {
        weft_llm::Source::File(p) => p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        ),
        weft_llm::Source::Embedded => "embedded".to_owned(),
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
    let buffer = ceiling::buffer(model.weights.streamed_bytes());
    let reader = Executor::new(2);
    // The read loops at 1 and 2 threads, each a slot of its own.
    let reads: Vec<(ReadLoop, usize)> = [1usize, 2]
        .into_iter()
        .flat_map(|t| ceiling::loops().into_iter().map(move |l| (l, t)))
        .collect();
    for (l, t) in &reads {
        read_round(l, &reader, &buffer, *t);
    }
    let neighbour = if with_neighbour {
        Some(Neighbour::start()?)
    } else {
        None
    };
    // One warm-up round each (page faults, caches, the pool's threads).
    for e in &mut engines {
        round(e, &prompt)?;
    }
    // Per round, in rotating order: ours on 1 and 2 threads, the peer's,
    // then the read loops (0, 1: ours; 2, 3: the peer's when there is one;
    // the rest: `reads`, their figure seconds per pass, not a rate).
    let ours = if peer.is_some() { 4 } else { 2 };
    let slots = ours + reads.len();
    let mut rates = vec![Vec::new(); slots];
    for r in 0..ROUNDS {
        for k in 0..slots {
            let i = (r + k) % slots;
            let rate = match (&peer, i) {
                (_, 0 | 1) => round(&mut engines[i], &prompt)?,
                (Some(p), 2 | 3) => p.round(i - 1)?,
                _ => {
                    let (l, t) = &reads[i - ours];
                    read_round(l, &reader, &buffer, *t)
                }
            };
            rates[i].push(rate);
        }
    }
    drop(neighbour);
    let mut medians: Vec<f64> = rates.into_iter().map(median).collect();
    let read_secs = medians.split_off(ours);
    let tok_s = medians;
    let measured_reads: Vec<Read> = reads
        .iter()
        .zip(&read_secs)
        .map(|((l, t), &secs)| Read {
            name: l.name().to_owned(),
            threads: *t as u64,
            secs,
        })
        .collect();
    let ceilings = [
        Ceiling::best(&measured_reads, 1),
        Ceiling::best(&measured_reads, 2),
    ];
    let beside = if with_neighbour {
        ", beside a process spinning on one core"
    } else {
        ""
    };
    println!(
        "decode of {TOKENS} tokens after an 8-token prompt, {ROUNDS} interleaved rounds{beside}, medians:"
    );
    if peer.is_some() {
        println!("| threads | tok/s | ms/token | Q8_0 weight GB/s | ceiling GB/s | of ceiling | llama.cpp tok/s | ratio |");
        println!("|---|---|---|---|---|---|---|---|");
    } else {
        println!("| threads | tok/s | ms/token | Q8_0 weight GB/s | ceiling GB/s | of ceiling |");
        println!("|---|---|---|---|---|---|");
    }
    for (i, t) in tok_s.iter().take(2).enumerate() {
        let peer_cols = match tok_s.get(i + 2) {
            Some(p) => format!(" {p:.1} | {:.2} |", t / p),
            None => String::new(),
        };
        let (ceiling_gbs, of_ceiling) = match &ceilings[i] {
            Some(c) => (
                format!("{:.1}", streamed / c.secs / 1e9),
                fmt_fraction(Some(c.fraction(1.0 / t))),
            ),
            None => ("-".to_owned(), "-".to_owned()),
        };
        println!(
            "| {} | {t:.1} | {:.2} | {:.1} | {ceiling_gbs} | {of_ceiling} |{peer_cols}",
            i + 1,
            1e3 / t,
            streamed * t / 1e9
        );
    }
    println!();
    println!(
        "read loops over {:.1} MB (the weight bytes of one token), median ms per pass:",
        streamed / 1e6
    );
    for (r, secs) in measured_reads.iter().zip(&read_secs) {
        println!("  {:<24} {}t {:>8.2}", r.name, r.threads, secs * 1e3);
    }

    // Where a token's time goes, on one thread and on two (a site's time
    // on two includes publishing its parts and waiting for the other
    // thread's). Sites a decode step does not call are left out.
    let mut profiles = Vec::new();
    for e in engines.iter_mut() {
        e.set_profiling(true);
        round(e, &prompt)?;
        profiles.push(e.profile());
        e.set_profiling(false);
    }
    let steps = (TOKENS + prompt.len()) as f64;
    let totals: Vec<f64> = profiles
        .iter()
        .map(|p| p.iter().map(|(_, _, d)| d.as_secs_f64()).sum::<f64>())
        .collect();
    println!();
    println!(
        "time per site, one round ({} steps) per thread count, µs per token (share):",
        TOKENS + prompt.len()
    );
    println!("| site | calls | 1 thread | 2 threads |");
    println!("|---|---|---|---|");
    for (i, (name, calls, _)) in profiles[0].iter().enumerate() {
        if *calls == 0 {
            continue;
        }
        let cell = |t: usize| {
            let d = profiles[t][i].2.as_secs_f64();
            format!(
                "{:.1} ({:.1}%)",
                d * 1e6 / steps,
                100.0 * d / totals[t].max(1e-12)
            )
        };
        println!("| {name} | {calls} | {} | {} |", cell(0), cell(1));
    }
    println!(
        "| all sites | | {:.1} | {:.1} |",
        totals[0] * 1e6 / steps,
        totals[1] * 1e6 / steps
    );
    println!();
    println!(
        "  solo stretches of the 2-thread engine (splitting lost a window, calls ran on the caller alone): {}",
        engines[1].solo_stretches()
    );
    if let [ours1, ours2, peer1, peer2] = tok_s[..] {
        println!(
            "bench decode peer: llama_cpp_tok_s_1t={peer1:.1} llama_cpp_tok_s_2t={peer2:.1} ratio_1t={:.2} ratio_2t={:.2}",
            ours1 / peer1,
            ours2 / peer2
        );
    }
    let depth_col = depth_section(&model, &options, peer.as_ref())?;
    let neighbour_col = if with_neighbour {
        format!(" neighbour_2t_vs_1t={:.2}", tok_s[1] / tok_s[0])
    } else {
        String::new()
    };
    let fraction =
        |i: usize| fmt_fraction(ceilings[i].as_ref().map(|c| c.fraction(1.0 / tok_s[i])));
    let label = |i: usize| {
        ceilings[i]
            .as_ref()
            .map_or("absent".to_owned(), Ceiling::label)
    };
    println!(
        "bench decode: model={model_name} tok_s_1t={:.1} tok_s_2t={:.1} ceiling_fraction_1t={} ceiling_fraction_2t={} ceiling_1t={} ceiling_2t={}{depth_col}{neighbour_col}",
        tok_s[0],
        tok_s[1],
        fraction(0),
        fraction(1),
        label(0),
        label(1),
    );
    Ok(())
}

/// One depth round: back to the context's end, then [`TOKENS`] timed
/// greedy steps from the context's own next token; tokens/s.
fn depth_round(e: &mut Engine, depth: usize, first: u32) -> Result<f64, String> {
    e.rewind(depth).map_err(|x| x.to_string())?;
    let t0 = Instant::now();
    let mut t = first;
    for _ in 0..TOKENS {
        e.step(t).map_err(|x| x.to_string())?;
        t = e.argmax();
    }
    Ok(TOKENS as f64 / t0.elapsed().as_secs_f64())
}

/// Decode at each of [`DEPTHS`] on one thread, with the default binary16
/// KV cache and with a binary32 one, beside llama.cpp's `llama-bench -d
/// DEPTH -p 0 -n TOKENS` (binary16 cache) when there is a peer, in
/// [`DEPTH_ROUNDS`] interleaved rounds (medians). Each depth and cache
/// type has its own engine, whose context is filled once (a chunked
/// prefill) and rewound to before every round, so every round decodes the
/// same tokens from the same cache. llama-bench fills its context by
/// prompt processing, which dies on some hosts with its default repacking
/// (see `bench prefill`): then it runs with `--repack 0`, and the table
/// says so. Prints the table and returns the summary's columns (the
/// ratios are the default cache's).
fn depth_section(
    model: &Model,
    options: &weft_plan::Options,
    peer: Option<&Peer>,
) -> Result<String, String> {
    let caches = [KvCache::F16, KvCache::F32];
    let weights: Vec<Arc<Weights>> = caches
        .iter()
        .map(|&kv| {
            if model.weights.config.kv == kv {
                Arc::clone(&model.weights)
            } else {
                let mut w = Weights::clone(&model.weights);
                w.config.kv = kv;
                Arc::new(w)
            }
        })
        .collect();
    // Engines in slot order: every depth with the first cache type, then
    // every depth with the second.
    let mut engines = Vec::new();
    for w in &weights {
        for &d in &DEPTHS {
            let mut e = Engine::new(Arc::clone(w), options.clone(), 1, &mut |_, _| {})
                .map_err(|e| e.to_string())?;
            e.prefill(&crate::bench_prefill::prompt(model, d))
                .map_err(|x| x.to_string())?;
            let first = e.argmax();
            engines.push((e, d, first));
        }
    }
    // llama-bench's arguments at depth `d`.
    let depth_args = |d: usize| -> Vec<String> {
        ["-p", "0", "-n", &TOKENS.to_string(), "-d", &d.to_string()]
            .map(str::to_owned)
            .to_vec()
    };
    // Whether the peer needs `--repack 0`, and why.
    let repack_off = match peer {
        None => None,
        Some(p) => p.repack_fallback(&[(depth_args(DEPTHS[0]), 1)])?,
    };
    // Warm-up: every engine once.
    for (e, d, first) in &mut engines {
        depth_round(e, *d, *first)?;
    }
    let ours = engines.len();
    let slots = ours + if peer.is_some() { DEPTHS.len() } else { 0 };
    let mut rates = vec![Vec::new(); slots];
    for r in 0..DEPTH_ROUNDS {
        for k in 0..slots {
            let i = (r + k) % slots;
            let rate = if i < ours {
                let (e, d, first) = &mut engines[i];
                depth_round(e, *d, *first)?
            } else {
                let p = peer.expect("peer slots exist only with a peer");
                let mut args = depth_args(DEPTHS[i - ours]);
                if repack_off.is_some() {
                    args.extend(["--repack".to_owned(), "0".to_owned()]);
                }
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                p.avg_ts(&args, 1)?
            };
            rates[i].push(rate);
        }
    }
    let medians: Vec<f64> = rates.into_iter().map(median).collect();
    let (f16, f32) = (&medians[..DEPTHS.len()], &medians[DEPTHS.len()..ours]);
    println!();
    println!(
        "decode of {TOKENS} tokens after a context of each depth, 1 thread, {DEPTH_ROUNDS} interleaved rounds, medians; Weft's KV cache in f16 (the default) and f32, llama.cpp's in f16:"
    );
    if let Some(why) = &repack_off {
        println!("llama.cpp runs with `--repack 0` here: {why}");
    }
    let mut col = String::new();
    if peer.is_some() {
        println!("| depth | Weft f16 tok/s | Weft f32 tok/s | llama.cpp tok/s | ratio (f16) |");
        println!("|---|---|---|---|---|");
        for (i, d) in DEPTHS.iter().enumerate() {
            let theirs = medians[ours + i];
            println!(
                "| {d} | {:.1} | {:.1} | {theirs:.1} | {:.2} |",
                f16[i],
                f32[i],
                f16[i] / theirs
            );
            col.push_str(&format!(" depth{d}_ratio_1t={:.2}", f16[i] / theirs));
        }
    } else {
        println!("| depth | Weft f16 tok/s | Weft f32 tok/s |");
        println!("|---|---|---|");
        for (i, d) in DEPTHS.iter().enumerate() {
            println!("| {d} | {:.1} | {:.1} |", f16[i], f32[i]);
            col.push_str(&format!(" depth{d}_tok_s_1t={:.1}", f16[i]));
        }
    }
    Ok(col)
}
