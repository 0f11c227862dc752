//! `cargo xtask peer [quantize]`: build the llama.cpp peer that benches and
//! references are measured against, from the copy vendored in the
//! llama-cpp-python source package (pinned to [`LLAMA_CPP_PYTHON`]), into
//! `target/peer/` with CMake. Nothing here is committed; anyone can rebuild
//! the same peer.
//!
//! - `peer`: `pip download` the sdist (only that package from source; its
//!   build tools come as wheels), unpack it, configure llama.cpp for this
//!   host (`GGML_NATIVE`, Release, static, no network code) and build
//!   `llama-bench`, `llama-simple`, `llama-quantize` and `llama-tokenize`
//!   into `target/peer/bin/`. Idempotent: a finished step is not redone.
//! - `peer quantize`: the SmolLM2 file re-quantised to Q8_0 by llama.cpp's
//!   own `llama-quantize` (`target/peer/SmolLM2-135M-Instruct.Q8_0.gguf`),
//!   the model `bench decode --peer` times llama.cpp on.
//! - `peer references`: llama.cpp's own greedy continuations
//!   (`llama-simple -n 24`) of [`PROMPTS`] on the Q8_0 file and on the
//!   Gemma 3 270M file, printed as the constants `tests/real_model.rs` pins (and, for comparison, on the Q4_1
//!   file, whose arithmetic llama.cpp does in Q4_1). Weft's output plays no
//!   part in them.
//! - `peer quant-fixtures`: compile `xtask/peer/quant_fixtures.c` against
//!   the peer's `libggml-base` and run it, rewriting
//!   `crates/weft-quant/tests/data/ggml_blocks.bin`: ggml's own
//!   dequantisation of quantised and random blocks of every type Weft
//!   reads, and its Q8_K quantisation, which weft-quant's pinned tests
//!   compare against.
//! - `peer tokenizer-references`: llama.cpp's own token ids
//!   (`llama-tokenize`) of [`TOKENIZER_TEXTS`] on the Gemma 3 270M file
//!   (SentencePiece), printed as the constant `tests/spm_references.rs`
//!   pins. Weft's tokenizer plays no part in them.
//!
//! Needs python3 with pip, cmake (≥ 3.14) and a C++ compiler.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The llama-cpp-python release whose vendored llama.cpp is the peer.
pub const LLAMA_CPP_PYTHON: &str = "0.3.36";

/// The programs built.
const PROGRAMS: &[&str] = &[
    "llama-bench",
    "llama-simple",
    "llama-quantize",
    "llama-tokenize",
];

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
        Some("tokenizer-references") => tokenizer_references(),
        Some(other) => Err(format!(
            "peer: unknown step `{other}` (`quantize`, `references`, `quant-fixtures` or `tokenizer-references`)"
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
            let continuation = continue_greedily(&simple, model, prompt)?;
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
    // Gemma 3 270M in Q4_K_M, the file as downloaded: llama.cpp multiplies
    // its K-quant and Q5_0 weights natively, as Weft's Gemma 3 path does.
    let gemma = weft_fetch::fetch(&weft_fetch::GEMMA3_270M, &mut |line| {
        eprintln!("peer references: {line}")
    })
    .map_err(|e| e.to_string())?;
    println!("const LLAMA_CPP_GEMMA3: &[(&str, &str)] = &[");
    for prompt in PROMPTS {
        let continuation = continue_greedily(&simple, &gemma, prompt)?;
        println!("    ({prompt:?}, {continuation:?}),");
    }
    println!("];");
    Ok(())
}

/// llama-simple's greedy continuation of `prompt` on `model`, without the
/// echoed prompt and the newline it ends with.
fn continue_greedily(simple: &Path, model: &Path, prompt: &str) -> Result<String, String> {
    let out = Command::new(simple)
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
    // llama-simple echoes the prompt (Gemma's after `<bos>`), then the
    // continuation, then one newline of its own.
    let continuation = text
        .find(prompt)
        .map_or(text.as_ref(), |at| &text[at + prompt.len()..]);
    Ok(continuation
        .strip_suffix('\n')
        .unwrap_or(continuation)
        .to_owned())
}

/// The texts whose SentencePiece ids `tests/spm_references.rs` pins:
/// several scripts, whitespace runs (leading, trailing, tabs, newlines,
/// carriage returns), code, emoji, numbers, punctuation runs, Gemma's
/// chat-template control tokens and user-defined tokens, characters only
/// byte fallback can spell, and the empty string.
pub const TOKENIZER_TEXTS: &[&str] = &[
    "",
    "a",
    " ",
    "  ",
    "    ",
    "\n",
    "\r\n\r\n",
    "Hello, world!",
    "The capital of France is",
    " leading space",
    "trailing space ",
    "  two leading spaces and two trailing  ",
    "double  space and   triple   spaces",
    "\ttab\tseparated\tvalues\t",
    "line one\nline two\n",
    "\n\n\nthree newlines first",
    "mixed \t \n whitespace \r\n CRLF",
    "trailing newline\n",
    "no-break\u{a0}space and zero\u{200b}width\u{feff}marks",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "fn main() { println!(\"{}\", 1 + 2); }",
    "for (int i = 0; i < 10; ++i) {\n\tsum += a[i];\n}",
    "<div class=\"x\">&amp;</div>",
    "SELECT * FROM users WHERE id = 42;",
    "https://example.com/path?query=1&x=y#frag user@example.com",
    "Numbers: 0 1 12 123 1234 12345 3.14159 -2.5e10",
    "1,000,000.00 on 2024-12-07 at 23:59:59",
    "!!!???...,,,;;;:::",
    "----====____****~~~~",
    "\"quoted\" 'single' `backtick` (paren) [bracket] {brace}",
    "it's, don't, we'll, they're, I'd",
    "ALL CAPS and lowercase and MiXeD cAsE",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "naïve café — déjà vu",
    "Größe, Straße, Übermaß",
    "ÀÉÎÕÜ àéîõü ñ ç",
    "Привет, мир! Как дела?",
    "Καλημέρα κόσμε",
    "日本語のテキストを書きます。",
    "中文分词测试：你好，世界！",
    "한국어 문장입니다.",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "emoji 🦀🙂👍🏽 and 👨\u{200d}👩\u{200d}👧\u{200d}👦 family",
    "🏳\u{fe0f}\u{200d}🌈 flags 🇫🇷🇯🇵",
    "math ∑ ∫ √ ≤ ≥ ≠ ∞ π",
    "control bytes \u{1}\u{7}\u{1b}[0m and \u{7f}",
    "\u{2581}a literal lower one eighth block\u{2581}",
    "<start_of_turn>user\n",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>user\nHi<end_of_turn>",
    "text <end_of_turn> in the middle",
    "<start_of_turn",
    "<start_of_image>[multimodal]<end_of_image>",
    "<unused0> <mask> <pad> <eos>",
    "<|im_start|>user\nanother model's tokens<|im_end|>",
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs! How vexingly quick daft zebras jump; the five boxing wizards jump quickly.",
];

fn tokenizer_references() -> Result<(), String> {
    let tokenize = program("llama-tokenize");
    if !tokenize.exists() {
        return Err(format!(
            "peer tokenizer-references: llama-tokenize {} is missing; `cargo xtask peer` makes it",
            tokenize.display()
        ));
    }
    let gemma = weft_fetch::fetch(&weft_fetch::GEMMA3_270M, &mut |line| {
        eprintln!("peer tokenizer-references: {line}")
    })
    .map_err(|e| e.to_string())?;
    println!(
        "// `cargo xtask peer tokenizer-references`: llama.cpp (llama-cpp-python {LLAMA_CPP_PYTHON}'s vendored copy), llama-tokenize --ids on {}: BOS added as the model asks, special tokens parsed (the tool's default).",
        weft_fetch::GEMMA3_270M.file
    );
    println!("const LLAMA_CPP_GEMMA3_IDS: &[(&str, &[u32])] = &[");
    for text in TOKENIZER_TEXTS {
        let ids = llama_tokenize(&tokenize, &gemma, text)?;
        let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
        println!("    ({text:?}, &[{}]),", ids.join(", "));
    }
    println!("];");
    Ok(())
}

/// llama-tokenize's ids for `text`. The text goes in on stdin, byte for
/// byte (`--stdin`; `-p` would need quoting, and common's `-f` handling
/// drops a trailing newline), with escape processing off (`--no-escape`:
/// a backslash is a backslash). Special tokens are parsed: llama-tokenize
/// does so unless told `--no-parse-special`, so Weft's side encodes with
/// `Special::Parse`. The BOS token is added because the file's
/// `add_bos_token` is true (no `--no-bos`).
fn llama_tokenize(tool: &Path, model: &Path, text: &str) -> Result<Vec<u32>, String> {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(tool)
        .arg("-m")
        .arg(model)
        .args(["--stdin", "--ids", "--no-escape", "--log-disable"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "peer tokenizer-references: cannot run {}: {e}",
                tool.display()
            )
        })?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or("peer tokenizer-references: no stdin for llama-tokenize")?;
    stdin
        .write_all(text.as_bytes())
        .map_err(|e| format!("peer tokenizer-references: writing to llama-tokenize: {e}"))?;
    drop(stdin);
    let out = child
        .wait_with_output()
        .map_err(|e| format!("peer tokenizer-references: llama-tokenize: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "peer tokenizer-references: llama-tokenize failed on {text:?} ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    // `--ids` prints one line: `[2, 9259, 236764]`.
    let list = stdout
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix('[')?.strip_suffix(']'))
        .ok_or_else(|| {
            format!(
                "peer tokenizer-references: no id list from llama-tokenize on {text:?}: {stdout:?}"
            )
        })?;
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u32>().map_err(|e| {
                format!("peer tokenizer-references: id {s:?} from llama-tokenize on {text:?}: {e}")
            })
        })
        .collect()
}
