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
//! - `peer quantize`: the SmolLM2 file re-quantised by llama.cpp's own
//!   `llama-quantize` to each of [`REQUANTISED`]
//!   (`target/peer/SmolLM2-135M-Instruct.{Q8_0,Q4_K_M,Q5_0}.gguf`): Q8_0,
//!   the model `bench decode --peer` times llama.cpp on, and Q4_K_M and
//!   Q5_0, which Weft's mixed-format path runs in their own formats.
//! - `peer references`: llama.cpp's own greedy continuations
//!   (`llama-simple -n 24`) of [`PROMPTS`] on each re-quantised file and
//!   on the Gemma 3 270M file, printed as the constants
//!   `tests/real_model.rs` pins, headed by the host they were made on
//!   (and, for comparison, on the Q4_1 file, whose arithmetic llama.cpp
//!   does in Q4_1). Weft's output plays no part in them.
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

/// The files `peer quantize` writes: the SmolLM2 file re-quantised to
/// each llama-quantize type named here, and the constant `peer references`
/// prints its continuations as. Column widths of 576 are not whole K-quant
/// super-blocks, so llama-quantize's Q4_K_M falls back to Q5_0 (for Q4_K)
/// and Q8_0 (for Q6_K) on those matrices: only `ffn_down` (1536 columns)
/// is a K-quant.
pub const REQUANTISED: &[(&str, &str)] = &[
    ("Q8_0", "LLAMA_CPP_Q8_0"),
    ("Q4_K_M", "LLAMA_CPP_Q4_K_M"),
    ("Q5_0", "LLAMA_CPP_Q5_0"),
];

/// The SmolLM2 file `peer quantize` writes in llama-quantize's `ftype`.
pub fn requantised_model(ftype: &str) -> PathBuf {
    dir().join(format!("SmolLM2-135M-Instruct.{ftype}.gguf"))
}

/// The Q8_0 model `peer quantize` writes.
pub fn q8_0_model() -> PathBuf {
    requantised_model("Q8_0")
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
    for (ftype, _) in REQUANTISED {
        let out = requantised_model(ftype);
        run_step(
            &format!("llama-quantize Q4_1 → {ftype}"),
            Command::new(&tool)
                .arg("--allow-requantize")
                .arg(&source)
                .arg(&out)
                .arg(ftype),
        )?;
        println!("{}", out.display());
    }
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
    if !simple.exists() {
        return Err(format!(
            "peer references: llama-simple {} is missing; `cargo xtask peer` makes it",
            simple.display()
        ));
    }
    for (ftype, _) in REQUANTISED {
        let path = requantised_model(ftype);
        if !path.exists() {
            return Err(format!(
                "peer references: the {ftype} model {} is missing; `cargo xtask peer quantize` makes it",
                path.display()
            ));
        }
    }
    let q4 = weft_fetch::fetch_model(&mut |line| eprintln!("peer references: {line}"))
        .map_err(|e| e.to_string())?;
    let gemma = weft_fetch::fetch(&weft_fetch::GEMMA3_270M, &mut |line| {
        eprintln!("peer references: {line}")
    })
    .map_err(|e| e.to_string())?;
    println!(
        "// `cargo xtask peer references`: llama.cpp (llama-cpp-python {LLAMA_CPP_PYTHON}'s vendored copy), llama-simple -n {TOKENS}, greedy."
    );
    // llama.cpp's greedy choices near ties depend on the SIMD paths it was
    // built with (GGML_NATIVE), so the host is part of the reference.
    println!("// Host: {}.", host());
    println!(
        "// A row: the prompt, llama.cpp's greedy continuation, and the tokens it decoded — fewer than REFERENCE_TOKENS when its next greedy choice was an end-of-generation token."
    );
    println!("const REFERENCE_TOKENS: usize = {TOKENS};");
    // The Q8_0 file holds the bytes Weft's loader makes of the Q4_1 file
    // (llama-quantize re-quantises exactly as the loader does), so its
    // continuations are the reference for both. The Q4_K_M and Q5_0 files
    // are multiplied in their own formats, by llama.cpp and by Weft's
    // mixed-format path; so is Gemma 3 270M in Q4_K_M, the file as
    // downloaded.
    let mut pinned: Vec<(String, PathBuf)> = REQUANTISED
        .iter()
        .map(|(ftype, constant)| ((*constant).to_owned(), requantised_model(ftype)))
        .collect();
    pinned.push(("LLAMA_CPP_GEMMA3".to_owned(), gemma));
    for (constant, model) in &pinned {
        println!("const {constant}: &[(&str, &str, usize)] = &[");
        for prompt in PROMPTS {
            let (continuation, tokens) = continue_greedily(&simple, model, prompt)?;
            println!("    ({prompt:?}, {continuation:?}, {tokens}),");
        }
        println!("];");
    }
    // llama.cpp on the Q4_1 file multiplies Q4_1 weights directly, other
    // arithmetic: printed for comparison only.
    eprintln!("peer references: llama.cpp on the Q4_1 file (not pinned):");
    for prompt in PROMPTS {
        let (continuation, _) = continue_greedily(&simple, &q4, prompt)?;
        eprintln!("    {prompt:?} → {continuation:?}");
    }
    Ok(())
}

/// This host's CPU: its model name, display family and model
/// ([`crate::cpu`]).
fn host() -> String {
    let (_, family, model) = crate::cpu::identity();
    format!(
        "{}, family {family} model {model}",
        weft_host::Host::detect().model
    )
}

/// llama-simple's greedy continuation of `prompt` on `model`, without the
/// echoed prompt and the newline it ends with, and the tokens it decoded
/// (it stops early, without printing it, at an end-of-generation token).
fn continue_greedily(simple: &Path, model: &Path, prompt: &str) -> Result<(String, usize), String> {
    let out = Command::new(simple)
        .arg("-m")
        .arg(model)
        .args(["-n", &TOKENS.to_string()])
        .arg(prompt)
        .output()
        .map_err(|e| format!("peer references: cannot run {}: {e}", simple.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "peer references: llama-simple failed ({}): {stderr}",
            out.status
        ));
    }
    // `main: decoded 24 tokens in 0.19 s, speed: …`
    let tokens = stderr
        .lines()
        .find_map(|l| {
            let rest = l.split_once("decoded ")?.1;
            rest.split_once(" tokens")?.0.parse::<usize>().ok()
        })
        .ok_or_else(|| {
            format!(
                "peer references: llama-simple did not say how many tokens it decoded: {stderr}"
            )
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    // llama-simple echoes the prompt (Gemma's after `<bos>`), then the
    // continuation, then one newline of its own.
    let continuation = text
        .find(prompt)
        .map_or(text.as_ref(), |at| &text[at + prompt.len()..]);
    Ok((
        continuation
            .strip_suffix('\n')
            .unwrap_or(continuation)
            .to_owned(),
        tokens,
    ))
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
