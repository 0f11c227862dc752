//! `cargo xtask <command>`: the contributor commands of the Weft workspace.
//!
//! Each command lives in its own module, whose `run(&[String])` reads the
//! command's arguments; `main` parses the command line with clap ([`Cli`]),
//! hands each module the arguments it reads ([`Command::module_args`]) and
//! re-runs itself from a release build where a debug one would measure
//! nothing.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod bench_attention;
mod bench_conv;
mod bench_decode;
mod bench_elementwise;
mod bench_gemm;
mod bench_gemma;
mod bench_gguf_load;
mod bench_kquant;
mod bench_loopnest;
mod bench_plan;
mod bench_prefill;
mod bench_q8;
mod ceiling;
mod check_encodings;
#[cfg(target_arch = "x86_64")]
mod cost_accuracy;
#[cfg(target_arch = "x86_64")]
mod cost_calibrate;
#[cfg(target_arch = "x86_64")]
mod cpu;
#[cfg(target_arch = "x86_64")]
mod cycles;
#[cfg(feature = "mpfr")]
mod exhaustive;
mod fetch_model;
mod peaks;
mod peer;
mod results;
#[cfg(target_arch = "x86_64")]
mod roofline;

/// The workspace's root directory (this crate's parent).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Contributor commands of the Weft workspace.
#[derive(Parser, Debug, PartialEq, Eq)]
#[command(
    name = "xtask",
    bin_name = "cargo xtask",
    arg_required_else_help = true,
    flatten_help = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// One command; its modules' `run` reads [`Command::module_args`].
#[derive(Subcommand, Debug, PartialEq, Eq)]
enum Command {
    /// Prove weft-a64's table of forms against llvm-mc and clang.
    CheckEncodings {
        /// Rewrite weft-a64's golden table from what llvm-mc says.
        #[arg(long)]
        write_golden: bool,
        /// Also print every negative case that llvm-mc accepts.
        #[arg(long)]
        verbose: bool,
    },
    /// All 2^32 inputs: reference vs MPFR, candidates vs reference, glibc's count (needs libgmp-dev, libmpfr-dev).
    Exhaustive {
        /// The function swept.
        #[arg(value_enum)]
        func: Func,
        /// First input's bits, in hex.
        #[arg(long, value_name = "HEX", value_parser = parse_hex, default_value = "0")]
        start: u64,
        /// How many inputs from --start (the sweep stops at 2^32).
        #[arg(long, value_name = "N", default_value_t = 1 << 32)]
        count: u64,
    },
    /// Benchmarks, interleaved rounds, medians (always a release build).
    #[command(flatten_help = true)]
    Bench {
        #[command(subcommand)]
        bench: Bench,
    },
    /// Fetch a model into the cache (default SmolLM2-135M-Instruct, Q4_1 GGUF); print its path and metadata.
    FetchModel {
        /// The model, by name (weft-fetch's list).
        #[arg(value_parser = clap::builder::PossibleValuesParser::new(weft_fetch::MODELS.map(|m| m.name)))]
        model: Option<String>,
    },
    /// Build the llama.cpp peer (vendored in llama-cpp-python's source package) into target/peer with CMake.
    Peer {
        /// `quantize`: the SmolLM2 file in Q8_0, Q4_K_M and Q5_0 by llama-quantize; `references`: llama.cpp's greedy continuations for the real-model tests (SmolLM2 in each of those, and Gemma 3); `quant-fixtures`: ggml's dequantisations weft-quant's tests pin; `tokenizer-references`: llama-tokenize's ids for the SentencePiece tests.
        #[arg(value_enum)]
        step: Option<PeerStep>,
    },
    /// Time each instruction class on this host next to its port-table row (x86-64).
    CostCalibrate {
        /// A port table being drafted, used whatever its match line says.
        #[arg(long, value_name = "FILE")]
        table: Option<String>,
        /// Only the probes whose text contains WORD.
        word: Option<String>,
    },
    /// The cost model's prices against measured cycles of every arm and twin, next to the roofline and llvm-mca (x86-64).
    CostAccuracy {
        /// Fewer rounds.
        #[arg(long)]
        quick: bool,
        /// Only the geometries whose family or shape contains WORD.
        #[arg(long, value_name = "WORD")]
        only: Option<String>,
    },
    /// One SVG of every family on this host's roofline: peaks and read ceilings measured now, points from the latest benches (x86-64).
    Roofline,
}

/// `cargo xtask bench NAME`.
#[derive(Subcommand, Debug, PartialEq, Eq)]
enum Bench {
    /// Fused attention twins, arm and unfused chain, next to an FMA loop and a streaming read of K and V.
    Attention,
    /// GFLOP/s of f32 NHWC convolutions at ResNet-50 and MobileNetV2 shapes: the planner's pick, every twin, the arm and the FMA peak (--peer: onnxruntime too).
    Conv {
        /// onnxruntime in a virtual environment under target/ (pip-installed on first use).
        #[arg(long)]
        peer: bool,
    },
    /// Tokens/s of greedy decoding of SmolLM2-135M through the plan, 1 and 2 threads; time per site.
    Decode(DecodeArgs),
    /// Elements/ns of the exp/erf arms, twins and glibc.
    Elementwise,
    /// GFLOP/s of f32 C = A·B: the planner's pick, every twin and arm, the gemm crate, matrixmultiply, OpenBLAS and the FMA peak, 1 and 2 threads.
    Gemm {
        /// A subset of the shapes (512³, 1024³, some projections, one convolution), fewer rounds.
        #[arg(long)]
        quick: bool,
        /// Only the shapes whose label contains one of these comma-separated pieces (`square m1024`, `llm m1 `, `conv`).
        #[arg(long)]
        only: Option<String>,
    },
    /// ms to open SmolLM2-135M and re-quantise its Q4_1 tensors to Q8_0, 1 and all threads.
    GgufLoad,
    /// µs/call of the q4_k.matvec arm and twins at Gemma 3's shapes, and a DRAM sweep against the streaming-read ceiling.
    #[command(name = "kquant-matvec")]
    KquantMatvec,
    /// ns/call of the weft-loopnest kernels at SmolLM2 shapes next to plain Rust loops.
    Loopnest,
    /// ms to compile a SmolLM2-135M plan, cold (empty cache) and warm.
    Plan(PlanArgs),
    /// Tokens/s and time to first token of 64- and 512-token prompts to SmolLM2-135M, chunked and a token at a time, 1 and 2 threads; int8 peak; time per site.
    Prefill(PrefillArgs),
    /// µs/call, GB/s, GFLOP/s of the q8_0.matvec arm and twins next to a streaming read of the weights.
    #[command(name = "q8-matvec")]
    Q8Matvec {
        /// Only the token section: one decode step's matvecs.
        #[arg(value_enum)]
        section: Option<Q8Section>,
    },
}

/// The options of `bench decode`.
#[derive(Args, Debug, PartialEq, Eq)]
struct DecodeArgs {
    /// The model, by name: SmolLM2-135M (the default) or Gemma 3 270M in Q4_K_M (its own engine; the peer times the same file).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(["smollm2-135m", "gemma3-270m"]))]
    model: Option<String>,
    /// Time the embedded model; do not fetch the real one.
    #[arg(long)]
    offline: bool,
    /// Every timed round beside a process spinning on one core.
    #[arg(long)]
    neighbour: bool,
    /// llama.cpp's llama-bench, run in the same rounds (default: the one `cargo xtask peer` built).
    #[arg(long, value_name = "LLAMA_BENCH", num_args = 0..=1)]
    peer: Option<Option<String>>,
    /// The Q8_0 model llama.cpp times (default: the one `cargo xtask peer quantize` wrote).
    #[arg(long, value_name = "Q8_0.gguf", requires = "peer")]
    peer_model: Option<String>,
}

/// The options of `bench prefill`.
#[derive(Args, Debug, PartialEq, Eq)]
struct PrefillArgs {
    /// Time the embedded model; do not fetch the real one.
    #[arg(long)]
    offline: bool,
    /// llama.cpp's llama-bench, run in the same rounds (default: the one `cargo xtask peer` built).
    #[arg(long, value_name = "LLAMA_BENCH", num_args = 0..=1)]
    peer: Option<Option<String>>,
    /// The Q8_0 model llama.cpp times (default: the one `cargo xtask peer quantize` wrote).
    #[arg(long, value_name = "Q8_0.gguf", requires = "peer")]
    peer_model: Option<String>,
}

/// The options of `bench plan`.
#[derive(Args, Debug, PartialEq, Eq)]
struct PlanArgs {
    /// Sites in the plan.
    #[arg(long, value_name = "N", default_value_t = 200)]
    sites: usize,
    /// Rounds, each one cold compile and the warm ones.
    #[arg(long, value_name = "N", default_value_t = 3)]
    rounds: usize,
    /// Warm compiles per round.
    #[arg(long, value_name = "N", default_value_t = 3)]
    warm: usize,
    /// 0: skip the warm compiles that build every body again (for profiling).
    #[arg(long, value_name = "0|1", default_value_t = 1)]
    rebuilt: usize,
}

/// The functions `exhaustive` sweeps.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Func {
    /// expf.
    Exp,
    /// erff.
    Erf,
}

/// The steps of `cargo xtask peer` that run alone.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum PeerStep {
    /// Re-quantise the SmolLM2 file to Q8_0, Q4_K_M and Q5_0 with the peer's llama-quantize.
    Quantize,
    /// Print llama.cpp's greedy continuations that tests/real_model.rs pins.
    References,
    /// Rewrite weft-quant's pinned fixtures: ggml's own dequantisation of every block type Weft reads, and its Q8_K quantisation.
    QuantFixtures,
    /// Print llama-tokenize's ids of the Gemma 3 270M file (SentencePiece) that tests/spm_references.rs pins.
    TokenizerReferences,
}

/// The sections of `bench q8-matvec` that can run alone.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Q8Section {
    /// The matvecs of one SmolLM2-135M decode step, per token.
    Token,
}

/// `--start`: hex, with or without `0x`.
fn parse_hex(s: &str) -> Result<u64, String> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(|e| e.to_string())
}

/// Every command line stem `cargo xtask` accepts, each bench by name.
/// README.md lists each one (tests/tidy.rs reads this list's text); a test
/// below checks it against the clap definition.
#[cfg(test)]
const COMMANDS: &[&str] = &[
    "check-encodings",
    "exhaustive",
    "bench attention",
    "bench conv",
    "bench decode",
    "bench elementwise",
    "bench gemm",
    "bench gguf-load",
    "bench kquant-matvec",
    "bench loopnest",
    "bench plan",
    "bench prefill",
    "bench q8-matvec",
    "fetch-model",
    "peer",
    "cost-calibrate",
    "cost-accuracy",
    "roofline",
];

impl Command {
    /// The command's name after `cargo xtask`.
    #[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
    fn name(&self) -> &'static str {
        match self {
            Command::CheckEncodings { .. } => "check-encodings",
            Command::Exhaustive { .. } => "exhaustive",
            Command::Bench { .. } => "bench",
            Command::FetchModel { .. } => "fetch-model",
            Command::Peer { .. } => "peer",
            Command::CostCalibrate { .. } => "cost-calibrate",
            Command::CostAccuracy { .. } => "cost-accuracy",
            Command::Roofline => "roofline",
        }
    }

    /// The arguments the command's module reads, in the form it reads them
    /// (`bench` modules see the bench's name first). After [`Command::name`]
    /// they parse back to `self`.
    fn module_args(&self) -> Vec<String> {
        let flag = |on: bool, name: &str| on.then(|| format!("--{name}"));
        let value = |v: &Option<String>, name: &str| v.as_ref().map(|v| format!("--{name}={v}"));
        let peer = |p: &Option<Option<String>>| match p {
            Some(Some(p)) => Some(format!("--peer={p}")),
            Some(None) => Some("--peer".into()),
            None => None,
        };
        let args: Vec<Option<String>> = match self {
            Command::CheckEncodings {
                write_golden,
                verbose,
            } => vec![
                flag(*write_golden, "write-golden"),
                flag(*verbose, "verbose"),
            ],
            Command::Exhaustive { func, start, count } => vec![
                Some(value_name(func)),
                Some("--start".into()),
                Some(format!("0x{start:x}")),
                Some("--count".into()),
                Some(count.to_string()),
            ],
            Command::Bench { bench } => {
                let mut v = vec![Some(bench.name().to_owned())];
                match bench {
                    Bench::Attention
                    | Bench::Elementwise
                    | Bench::GgufLoad
                    | Bench::KquantMatvec
                    | Bench::Loopnest => {}
                    Bench::Decode(d) => v.extend([
                        value(&d.model, "model"),
                        flag(d.offline, "offline"),
                        flag(d.neighbour, "neighbour"),
                        peer(&d.peer),
                        value(&d.peer_model, "peer-model"),
                    ]),
                    Bench::Gemm { quick, only } => {
                        v.extend([flag(*quick, "quick"), value(only, "only")])
                    }
                    Bench::Conv { peer } => v.push(flag(*peer, "peer")),
                    Bench::Plan(p) => v.extend([
                        Some(format!("--sites={}", p.sites)),
                        Some(format!("--rounds={}", p.rounds)),
                        Some(format!("--warm={}", p.warm)),
                        Some(format!("--rebuilt={}", p.rebuilt)),
                    ]),
                    Bench::Prefill(p) => v.extend([
                        flag(p.offline, "offline"),
                        peer(&p.peer),
                        value(&p.peer_model, "peer-model"),
                    ]),
                    Bench::Q8Matvec { section } => v.push(section.as_ref().map(value_name)),
                }
                v
            }
            Command::FetchModel { model } => vec![model.clone()],
            Command::Roofline => vec![],
            Command::Peer { step } => vec![step.as_ref().map(value_name)],
            Command::CostCalibrate { table, word } => vec![value(table, "table"), word.clone()],
            Command::CostAccuracy { quick, only } => {
                vec![flag(*quick, "quick"), value(only, "only")]
            }
        };
        args.into_iter().flatten().collect()
    }

    /// Measurements and whole-domain sweeps mean nothing in a debug build.
    fn wants_release(&self) -> bool {
        match self {
            Command::Exhaustive { .. } | Command::Bench { .. } => true,
            Command::CostCalibrate { .. } | Command::CostAccuracy { .. } | Command::Roofline => {
                cfg!(target_arch = "x86_64")
            }
            Command::CheckEncodings { .. } | Command::FetchModel { .. } | Command::Peer { .. } => {
                false
            }
        }
    }
}

impl Bench {
    /// The bench's name after `cargo xtask bench`.
    fn name(&self) -> &'static str {
        match self {
            Bench::Attention => "attention",
            Bench::Conv { .. } => "conv",
            Bench::Decode(_) => "decode",
            Bench::Elementwise => "elementwise",
            Bench::Gemm { .. } => "gemm",
            Bench::GgufLoad => "gguf-load",
            Bench::KquantMatvec => "kquant-matvec",
            Bench::Loopnest => "loopnest",
            Bench::Plan(_) => "plan",
            Bench::Prefill(_) => "prefill",
            Bench::Q8Matvec { .. } => "q8-matvec",
        }
    }
}

/// A value enum's name on the command line.
fn value_name(v: &impl ValueEnum) -> String {
    v.to_possible_value()
        .expect("no value is skipped")
        .get_name()
        .to_owned()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = &cli.command;
    // Measurements and sweeps run from a release build of this same binary.
    // The whole-domain sweep also needs the MPFR oracle, which links the
    // system's GMP and MPFR: only a build asked for with `--features mpfr`
    // has it, so that `cargo test` needs no C library beyond libc.
    let exhaustive = matches!(command, Command::Exhaustive { .. });
    let needs_mpfr = exhaustive && !cfg!(feature = "mpfr");
    if needs_mpfr || (command.wants_release() && cfg!(debug_assertions)) {
        return rerun_in_release(exhaustive);
    }
    match run(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Run `command`'s module.
fn run(command: &Command) -> Result<(), String> {
    let args = command.module_args();
    match command {
        Command::CheckEncodings { .. } => check_encodings::run(&args),
        #[cfg(feature = "mpfr")]
        Command::Exhaustive { .. } => exhaustive::run(&args),
        #[cfg(not(feature = "mpfr"))]
        Command::Exhaustive { .. } => Err("exhaustive needs the `mpfr` feature".into()),
        Command::Bench { bench } => match bench {
            Bench::Attention => bench_attention::run(&args),
            Bench::Conv { .. } => bench_conv::run(&args),
            Bench::Decode(_) => bench_decode::run(&args),
            Bench::Elementwise => bench_elementwise::run(&args),
            Bench::Gemm { .. } => bench_gemm::run(&args),
            Bench::GgufLoad => bench_gguf_load::run(&args),
            Bench::KquantMatvec => bench_kquant::run(&args),
            Bench::Loopnest => bench_loopnest::run(&args),
            Bench::Plan(_) => bench_plan::run(&args),
            Bench::Prefill(_) => bench_prefill::run(&args),
            Bench::Q8Matvec { .. } => bench_q8::run(&args),
        },
        Command::FetchModel { .. } => fetch_model::run(&args),
        Command::Peer { .. } => peer::run(&args),
        #[cfg(target_arch = "x86_64")]
        Command::CostCalibrate { .. } => cost_calibrate::run(&args),
        #[cfg(target_arch = "x86_64")]
        Command::CostAccuracy { .. } => cost_accuracy::run(&args),
        #[cfg(target_arch = "x86_64")]
        Command::Roofline => roofline::run(&args),
        #[cfg(not(target_arch = "x86_64"))]
        Command::CostCalibrate { .. } | Command::CostAccuracy { .. } | Command::Roofline => {
            Err(format!(
                "{} measures with x86-64 code: this host is not x86-64",
                command.name()
            ))
        }
    }
}

/// Re-run `cargo xtask ARGS` as `cargo run --release -p xtask -- ARGS`
/// (with `--features mpfr` if asked), ARGS exactly as given.
fn rerun_in_release(mpfr: bool) -> ExitCode {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.args(["run", "--quiet", "--release", "--package", "xtask"]);
    if mpfr {
        cmd.args(["--features", "mpfr"]);
    }
    let status = cmd.arg("--").args(std::env::args_os().skip(1)).status();
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => ExitCode::from(u8::try_from(s.code().unwrap_or(1)).unwrap_or(1)),
        Err(e) => {
            eprintln!("xtask: cannot start a release build of xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(line: &str) -> Result<Command, clap::Error> {
        Cli::try_parse_from(std::iter::once("xtask").chain(line.split_whitespace()))
            .map(|cli| cli.command)
    }

    #[test]
    fn the_clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_documented_invocation_parses() {
        // Every `cargo xtask …` quoted in README.md, docs/ and .ci/run, and
        // each module's doc, as of this writing.
        for line in [
            "check-encodings",
            "check-encodings --write-golden",
            "check-encodings --verbose",
            "exhaustive exp",
            "exhaustive erf",
            "exhaustive exp --start 0x3f800000 --count 1000",
            "bench attention",
            "bench conv",
            "bench conv --peer",
            "bench decode",
            "bench decode --offline",
            "bench decode --neighbour",
            "bench decode --peer=PATH/llama-bench --peer-model=smol-q8_0.gguf",
            "bench decode --model gemma3-270m --peer",
            "bench elementwise",
            "bench gemm",
            "bench gemm --quick",
            "bench gemm --quick --only=square,conv",
            "bench gguf-load",
            "bench kquant-matvec",
            "bench loopnest",
            "bench plan",
            "bench plan --sites=20 --rounds=1 --warm=1 --rebuilt=0",
            "bench prefill",
            "bench prefill --offline",
            "bench prefill --peer",
            "bench prefill --peer=PATH/llama-bench --peer-model=smol-q8_0.gguf",
            "bench q8-matvec",
            "bench q8-matvec token",
            "fetch-model",
            "cost-calibrate",
            "cost-calibrate vfmadd",
            "cost-calibrate --table=crates/weft-cost/src/tables/zen5.table",
            "cost-accuracy",
            "cost-accuracy --quick",
            "cost-accuracy --quick --only=q8_0",
            "roofline",
        ] {
            let command = parse(line).unwrap_or_else(|e| panic!("`cargo xtask {line}`: {e}"));
            // What the module is handed names the same command.
            let again = std::iter::once(command.name().to_owned()).chain(command.module_args());
            let again = Cli::try_parse_from(std::iter::once("xtask".to_owned()).chain(again))
                .unwrap_or_else(|e| panic!("`cargo xtask {line}`, as handed on: {e}"));
            assert_eq!(again.command, command, "`cargo xtask {line}`");
        }
    }

    #[test]
    fn defaults_are_those_the_modules_had() {
        assert_eq!(
            parse("bench plan").unwrap().module_args(),
            [
                "plan",
                "--sites=200",
                "--rounds=3",
                "--warm=3",
                "--rebuilt=1"
            ]
        );
        assert_eq!(
            parse("exhaustive erf").unwrap().module_args(),
            ["erf", "--start", "0x0", "--count", "4294967296"]
        );
        assert_eq!(
            parse("bench decode --neighbour --peer X --peer-model Y")
                .unwrap()
                .module_args(),
            ["decode", "--neighbour", "--peer=X", "--peer-model=Y"]
        );
        assert_eq!(parse("bench prefill").unwrap().module_args(), ["prefill"]);
        assert_eq!(
            parse("bench prefill --peer").unwrap().module_args(),
            ["prefill", "--peer"]
        );
        assert_eq!(
            parse("bench prefill --offline --peer X --peer-model Y")
                .unwrap()
                .module_args(),
            ["prefill", "--offline", "--peer=X", "--peer-model=Y"]
        );
        assert_eq!(
            parse("cost-calibrate --table t.table vfmadd")
                .unwrap()
                .module_args(),
            ["--table=t.table", "vfmadd"]
        );
        assert!(parse("fetch-model").unwrap().module_args().is_empty());
        assert_eq!(
            parse("fetch-model gemma3-270m").unwrap().module_args(),
            ["gemma3-270m"]
        );
        for m in weft_fetch::MODELS {
            let line = format!("fetch-model {}", m.name);
            assert!(parse(&line).is_ok(), "`cargo xtask {line}` does not parse");
        }
    }

    #[test]
    fn wrong_arguments_are_refused() {
        for line in [
            "",
            "frobnicate",
            "bench",
            "bench nonesuch",
            "bench attention extra",
            "bench gemm --slow",
            "bench q8-matvec prefill",
            "bench decode --peer-model=x.gguf",
            "bench prefill --peer-model=x.gguf",
            "bench prefill --neighbour",
            "bench prefill --quick",
            "bench prefill 512",
            "peer frobnicate",
            "bench plan --sites=many",
            "exhaustive",
            "exhaustive sin",
            "exhaustive exp --start xyz",
            "fetch-model extra",
        ] {
            assert!(parse(line).is_err(), "`cargo xtask {line}` parsed");
        }
    }

    #[test]
    fn commands_lists_every_command_and_bench() {
        let mut defined = Vec::new();
        for c in Cli::command().get_subcommands() {
            match c.get_name() {
                "bench" => defined.extend(
                    c.get_subcommands()
                        .map(|b| format!("bench {}", b.get_name()))
                        .filter(|b| b != "bench help"),
                ),
                "help" => {}
                name => defined.push(name.to_owned()),
            }
        }
        let mut listed: Vec<String> = COMMANDS.iter().map(|&c| c.to_owned()).collect();
        defined.sort();
        listed.sort();
        assert_eq!(listed, defined);
    }

    #[test]
    fn help_names_every_command_and_option() {
        let help = Cli::command().render_long_help().to_string();
        for word in COMMANDS.iter().flat_map(|c| c.split(' ')) {
            assert!(help.contains(word), "`cargo xtask --help` lacks {word}");
        }
        let mut bench = Cli::command();
        let bench = bench.find_subcommand_mut("bench").unwrap();
        let help = bench.render_long_help().to_string();
        for option in [
            "--offline",
            "--neighbour",
            "--peer",
            "--peer-model",
            "--sites",
            "--rounds",
            "--warm",
            "--rebuilt",
            "--quick",
            "token",
        ] {
            assert!(
                help.contains(option),
                "`cargo xtask bench --help` lacks {option}"
            );
        }
    }
}
