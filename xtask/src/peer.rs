//! `cargo xtask peer [quantize]`: build the llama.cpp peer that benches and
//! references are measured against, from the copy vendored in the
//! llama-cpp-python source package (pinned to [`LLAMA_CPP_PYTHON`]), into
//! `target/peer/` with CMake. Nothing here is committed; anyone can rebuild
//! the same peer.
//!
//! - `peer`: `pip download` the sdist (only that package from source; its
//!   build tools come as wheels), unpack it, configure llama.cpp for this
//!   host (`GGML_NATIVE`, Release, static, no network code) and build
//!   `llama-bench`, `llama-simple` and `llama-quantize` into
//!   `target/peer/bin/`. Idempotent: a finished step is not redone.
//! - `peer quantize`: the SmolLM2 file re-quantised to Q8_0 by llama.cpp's
//!   own `llama-quantize` (`target/peer/SmolLM2-135M-Instruct.Q8_0.gguf`),
//!   the model `bench decode --peer` times llama.cpp on.
//! - `peer references`: llama.cpp's own greedy continuations
//!   (`llama-simple -n 24`) of [`PROMPTS`] on the Q8_0 file, printed as the
//!   constants `tests/real_model.rs` pins (and, for comparison, on the Q4_1
//!   file, whose arithmetic llama.cpp does in Q4_1). Weft's output plays no
//!   part in them.
//! - `peer quant-fixtures`: compile `xtask/peer/quant_fixtures.c` against
//!   the peer's `libggml-base` and run it, rewriting
//!   `crates/weft-quant/tests/data/ggml_blocks.bin`: ggml's own
//!   dequantisation of quantised and random blocks of every type Weft
//!   reads, and its Q8_K quantisation, which weft-quant's pinned tests
//!   compare against.
//!
//! Needs python3 with pip, cmake (≥ 3.14) and a C++ compiler.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The llama-cpp-python release whose vendored llama.cpp is the peer.
pub const LLAMA_CPP_PYTHON: &str = "0.3.36";

/// The programs built.
const PROGRAMS: &[&str] = &["llama-bench", "llama-simple", "llama-quantize"];

/// `target/peer/` of this workspace.
pub fn dir() -> PathBuf {
    crate::workspace_root().join("target/peer")
}

/// The peer's `program` (built by `cargo xtask peer`).
pub fn program(program: &str) -> PathBuf {
    dir().join("bin").join(program)
}

/// The Q8_0 model `peer quantize` writes.
pub fn q8_0_model() -> PathBuf {
    dir().join("SmolLM2-135M-Instruct.Q8_0.gguf")
}

/// Run the command.
pub fn run(args: &[String]) -> Result<(), String> {
    match args.first().map(String::as_str) {
        None => build(),
        Some("quantize") => quantize(),
        Some("references") => references(),
        Some("quant-fixtures") => quant_fixtures(),
        Some(other) => Err(format!(
            "peer: unknown step `{other}` (`quantize`, `references` or `quant-fixtures`)"
        )),
    }
}

fn run_step(what: &str, cmd: &mut Command) -> Result<(), String> {
    eprintln!("peer: {what}");
    let status = cmd
        .status()
        .map_err(|e| format!("peer: cannot start {what}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("peer: {what} failed ({status})"))
    }
}

fn build() -> Result<(), String> {
    let dir = dir();
    let dl = dir.join("dl");
    let sdist = dl.join(format!("llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"));
    if !sdist.exists() {
        std::fs::create_dir_all(&dl).map_err(|e| format!("peer: {}: {e}", dl.display()))?;
        run_step(
            &format!("pip download llama-cpp-python=={LLAMA_CPP_PYTHON} (source package)"),
            Command::new("python3")
                .args(["-m", "pip", "download", "--no-deps"])
                .args(["--no-binary", "llama-cpp-python"])
                .arg(format!("llama-cpp-python=={LLAMA_CPP_PYTHON}"))
                .arg("-d")
                .arg(&dl),
        )?;
    }
    let src = dir.join(format!("llama_cpp_python-{LLAMA_CPP_PYTHON}"));
    let llama = src.join("vendor/llama.cpp");
    if !llama.join("CMakeLists.txt").exists() {
        run_step(
            "unpack the source package",
            Command::new("tar")
                .arg("xzf")
                .arg(&sdist)
                .arg("-C")
                .arg(&dir),
        )?;
    }
    let build = dir.join("build");
    run_step(
        "cmake configure llama.cpp",
        Command::new("cmake")
            .arg("-S")
            .arg(&llama)
            .arg("-B")
            .arg(&build)
            .args([
                "-DCMAKE_BUILD_TYPE=Release",
                "-DGGML_NATIVE=ON",
                "-DBUILD_SHARED_LIBS=OFF",
                "-DLLAMA_CURL=OFF",
                "-DLLAMA_BUILD_TESTS=OFF",
                "-DLLAMA_BUILD_SERVER=OFF",
            ]),
    )?;
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    run_step(
        &format!("cmake build {}", PROGRAMS.join(", ")),
        Command::new("cmake")
            .arg("--build")
            .arg(&build)
            .args(["-j", &jobs.to_string(), "--target"])
            .args(PROGRAMS),
    )?;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).map_err(|e| format!("peer: {}: {e}", bin.display()))?;
    for p in PROGRAMS {
        let from = build.join("bin").join(p);
        std::fs::copy(&from, bin.join(p))
            .map_err(|e| format!("peer: copy {}: {e}", from.display()))?;
    }
    println!("peer: llama.cpp as vendored in llama-cpp-python {LLAMA_CPP_PYTHON}");
    println!("peer: {}", vendored_version(&llama));
    for p in PROGRAMS {
        println!("peer: {}", bin.join(p).display());
    }
    Ok(())
}

/// What the source package says about the llama.cpp it vendors. The sdist
/// carries no git metadata (its `vendor/llama.cpp/.git` points into a
/// repository that is not shipped), so the commit is said to be unknown
/// rather than guessed; the ggml version is in the sources.
fn vendored_version(llama: &Path) -> String {
    let commit = std::fs::read_to_string(llama.join(".git"))
        .ok()
        .and_then(|g| {
            let dir = llama.join(g.trim().strip_prefix("gitdir: ")?);
            std::fs::read_to_string(dir.join("HEAD")).ok()
        })
        .map_or_else(
            || "vendored commit: not recorded in the source package".to_owned(),
            |h| format!("vendored commit: {}", h.trim()),
        );
    let cmake = std::fs::read_to_string(llama.join("ggml/CMakeLists.txt")).unwrap_or_default();
    let part = |name: &str| {
        cmake
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix(&format!("set({name} "))?
                    .strip_suffix(')')
            })
            .unwrap_or("?")
            .to_owned()
    };
    format!(
        "{commit}; ggml {}.{}.{}",
        part("GGML_VERSION_MAJOR"),
        part("GGML_VERSION_MINOR"),
        part("GGML_VERSION_PATCH")
    )
}

fn quantize() -> Result<(), String> {
    let tool = program("llama-quantize");
    if !tool.exists() {
        return Err(format!(
            "peer quantize: {} is missing; run `cargo xtask peer` first",
            tool.display()
        ));
    }
    let source = weft_fetch::fetch_model(&mut |line| eprintln!("peer quantize: {line}"))
        .map_err(|e| e.to_string())?;
    let out = q8_0_model();
    run_step(
        "llama-quantize Q4_1 → Q8_0",
        Command::new(&tool)
            .arg("--allow-requantize")
            .arg(&source)
            .arg(&out)
            .arg("Q8_0"),
    )?;
    println!("{}", out.display());
    Ok(())
}

fn quant_fixtures() -> Result<(), String> {
    let dir = dir();
    let ggml = dir
        .join(format!("llama_cpp_python-{LLAMA_CPP_PYTHON}"))
        .join("vendor/llama.cpp/ggml");
    let lib = dir.join("build/ggml/src/libggml-base.a");
    if !lib.exists() {
        return Err(format!(
            "peer quant-fixtures: {} is missing; run `cargo xtask peer` first",
            lib.display()
        ));
    }
    let root = crate::workspace_root();
    let exe = dir.join("quant_fixtures");
    run_step(
        "cc quant_fixtures.c against libggml-base",
        Command::new("cc")
            .args(["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-I"])
            .arg(ggml.join("include"))
            .arg("-I")
            .arg(ggml.join("src"))
            .arg("-o")
            .arg(&exe)
            .arg(root.join("xtask/peer/quant_fixtures.c"))
            .arg(&lib)
            // libggml-base holds C++ objects and was built with OpenMP.
            .args(["-lstdc++", "-lm", "-lpthread", "-fopenmp"]),
    )?;
    let out = root.join("crates/weft-quant/tests/data/ggml_blocks.bin");
    run_step("write the fixtures", Command::new(&exe).arg(&out))?;
    println!("{}", out.display());
    Ok(())
}

/// The prompts whose greedy continuations the real-model tests pin.
pub const PROMPTS: &[&str] = &[
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
];

/// Tokens each reference continues for.
const TOKENS: usize = 24;

fn references() -> Result<(), String> {
    let simple = program("llama-simple");
    let q8 = q8_0_model();
    for (what, path, how) in [
        ("llama-simple", &simple, "cargo xtask peer"),
        ("the Q8_0 model", &q8, "cargo xtask peer quantize"),
    ] {
        if !path.exists() {
            return Err(format!(
                "peer references: {what} {} is missing; `{how}` makes it",
                path.display()
            ));
        }
    }
    let q4 = weft_fetch::fetch_model(&mut |line| eprintln!("peer references: {line}"))
        .map_err(|e| e.to_string())?;
    println!(
        "// `cargo xtask peer references`: llama.cpp (llama-cpp-python {LLAMA_CPP_PYTHON}'s vendored copy), llama-simple -n {TOKENS}, greedy."
    );
    println!("const REFERENCE_TOKENS: usize = {TOKENS};");
    // The Q8_0 file holds the bytes Weft's loader makes of the Q4_1 file
    // (llama-quantize re-quantises exactly as the loader does), so its
    // continuations are the reference for both. llama.cpp on the Q4_1 file
    // multiplies Q4_1 weights directly, other arithmetic: printed for
    // comparison only.
    for (name, model) in [("LLAMA_CPP_Q8_0", &q8), ("llama.cpp on the Q4_1 file", &q4)] {
        let pinned = name.starts_with("LLAMA");
        if pinned {
            println!("const {name}: &[(&str, &str)] = &[");
        } else {
            eprintln!("peer references: {name} (not pinned):");
        }
        for prompt in PROMPTS {
            let out = Command::new(&simple)
                .arg("-m")
                .arg(model)
                .args(["-n", &TOKENS.to_string()])
                .arg(prompt)
                .output()
                .map_err(|e| format!("peer references: cannot run {}: {e}", simple.display()))?;
            if !out.status.success() {
                return Err(format!(
                    "peer references: llama-simple failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            let text = String::from_utf8_lossy(&out.stdout);
            // llama-simple echoes the prompt, then the continuation, then
            // one newline of its own.
            let continuation = text
                .find(prompt)
                .map_or(text.as_ref(), |at| &text[at + prompt.len()..]);
            let continuation = continuation.strip_suffix('\n').unwrap_or(continuation);
            if pinned {
                println!("    ({prompt:?}, {continuation:?}),");
            } else {
                eprintln!("    {prompt:?} → {continuation:?}");
            }
        }
        if pinned {
            println!("];");
        }
    }
    Ok(())
}
