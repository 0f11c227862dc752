//! `cargo xtask check-encodings`: prove every form of weft-a64's table
//! against LLVM.
//!
//! For every form, [`weft_a64::sample::cases`] builds instructions that hunt
//! for bugs (every register in every register slot, every value of small
//! fields, the ends and steps of immediates, seeded random picks). Then:
//!
//! 1. **Forward**: our text is assembled by clang (or llvm-mc 14 when clang is
//!    absent) and the words are compared with ours, word for word.
//! 2. **Reverse**: our words are disassembled by llvm-mc and its text is
//!    compared with our `Display` of `decode(word)`.
//! 3. **Negative**: inputs our encoder rejects must also be rejected by llvm.
//!
//! The last line of output is always
//! `check-encodings: forms=F instructions=N mismatches=M reverse-mismatches=R negatives-agree=A/B`.
//! `--write-golden` then writes `crates/weft-a64/tests/golden/encodings.txt`
//! (only when forward and reverse agree completely).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use weft_a64::sample::{cases, negatives, SplitMix64};
use weft_a64::{decode, Inst, FORMS};

const MATTR: &str = "+neon,+dotprod,+i8mm,+fullfp16,+bf16";
const SEED: u64 = 0x05ee_da64;
const RANDOM_PER_VARIANT: usize = 16;

/// Entry point: `args` may hold `--write-golden` and `--verbose`.
pub fn run(args: &[String]) -> Result<(), String> {
    let write_golden = args.iter().any(|a| a == "--write-golden");
    let verbose = args.iter().any(|a| a == "--verbose");
    let tmp = std::env::temp_dir().join(format!("weft-check-encodings-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| format!("creating {}: {e}", tmp.display()))?;
    let result = check(&tmp, write_golden, verbose);
    let _ = std::fs::remove_dir_all(&tmp);
    let summary = result?;
    println!("{}", summary.line());
    if summary.mismatches + summary.reverse > 0 {
        return Err("encodings disagree with llvm".into());
    }
    Ok(())
}

struct Summary {
    forms: usize,
    insts: usize,
    mismatches: usize,
    reverse: usize,
    neg_agree: usize,
    neg_total: usize,
}

impl Summary {
    fn line(&self) -> String {
        format!(
            "check-encodings: forms={} instructions={} mismatches={} reverse-mismatches={} negatives-agree={}/{}",
            self.forms, self.insts, self.mismatches, self.reverse, self.neg_agree, self.neg_total
        )
    }
}

fn check(tmp: &Path, write_golden: bool, verbose: bool) -> Result<Summary, String> {
    let mut rng = SplitMix64(SEED);
    let mut insts: Vec<(Inst, String, u32)> = Vec::new();
    for form in FORMS {
        let samples = cases(form, &mut rng, RANDOM_PER_VARIANT);
        if samples.is_empty() {
            return Err(format!(
                "{}: no valid samples: the generator or the row is wrong",
                form.name
            ));
        }
        for inst in samples {
            let word = inst
                .encode()
                .map_err(|e| format!("{}: sample does not encode: {e}", form.name))?;
            insts.push((inst, inst.to_string(), word));
        }
    }
    let mut mismatches = 0;

    // Forward: assemble our text, compare words. Lines llvm rejects are mismatches.
    let texts: Vec<&str> = insts.iter().map(|i| i.1.as_str()).collect();
    let (rejected, words) = assemble(tmp, &texts)?;
    for (line, msg) in &rejected {
        mismatches += 1;
        let (inst, text, word) = &insts[*line];
        println!(
            "REJECTED {:<16} {text:<48} ours={word:#010x} llvm: {msg}",
            inst.form().name
        );
    }
    let kept: Vec<usize> = (0..insts.len())
        .filter(|i| !rejected.iter().any(|r| r.0 == *i))
        .collect();
    if words.len() != kept.len() {
        return Err(format!(
            "llvm produced {} words for {} lines",
            words.len(),
            kept.len()
        ));
    }
    for (k, &i) in kept.iter().enumerate() {
        let (inst, text, ours) = &insts[i];
        if words[k] != *ours {
            mismatches += 1;
            println!(
                "MISMATCH {:<16} {text:<48} ours={ours:#010x} llvm={:#010x} xor={:#010x}",
                inst.form().name,
                words[k],
                ours ^ words[k]
            );
        }
    }

    // Reverse: disassemble our words, compare with our decode + Display.
    let mut reverse = 0;
    let ours: Vec<u32> = insts.iter().map(|i| i.2).collect();
    let llvm_text = disassemble(tmp, &ours)?;
    for ((inst, _, word), theirs) in insts.iter().zip(&llvm_text) {
        let decoded = decode(*word);
        let our_text = decoded
            .map(|d| d.to_string())
            .unwrap_or_else(|| "<decode: None>".into());
        let same_inst = decoded.map(|d| d.encode() == Ok(*word)).unwrap_or(false);
        match theirs {
            Some(t) if *t == our_text && same_inst => {}
            _ => {
                reverse += 1;
                println!(
                    "REVERSE  {:<16} {word:#010x} ours=`{our_text}` llvm=`{}`",
                    inst.form().name,
                    theirs.as_deref().unwrap_or("<invalid encoding>")
                );
            }
        }
    }

    // Negative: what we reject, llvm must reject.
    let mut neg: Vec<(Inst, String)> = Vec::new();
    let mut nrng = SplitMix64(SEED ^ 0xbad);
    for form in FORMS {
        for inst in negatives(form, &mut nrng) {
            let t = inst.text_without_alias();
            neg.push((inst, t));
        }
    }
    let neg_texts: Vec<&str> = neg.iter().map(|n| n.1.as_str()).collect();
    let errors = assemble_errors(tmp, &neg_texts)?;
    let neg_agree = errors.len();
    if verbose {
        for (i, (inst, t)) in neg.iter().enumerate() {
            if !errors.contains(&i) {
                println!(
                    "NEG-ACCEPTED {:<16} {t}  ours: {:?}",
                    inst.form().name,
                    inst.encode().err()
                );
            }
        }
    }

    if write_golden {
        if mismatches + reverse > 0 {
            return Err("not writing the golden file: llvm disagrees".into());
        }
        let path = crate::workspace_root().join("crates/weft-a64/tests/golden/encodings.txt");
        let mut out = String::new();
        out.push_str("# (form, word, text) agreed with llvm-mc 14 by `cargo xtask check-encodings --write-golden`.\n");
        out.push_str("# Do not edit: regenerate. Replayed by crates/weft-a64/tests/golden.rs without LLVM.\n");
        for (i, (inst, text, word)) in insts.iter().enumerate() {
            // Every sweep value is kept for small forms; big ones are thinned deterministically.
            if i % 4 == 0 || inst.form().kinds.is_empty() {
                let _ = writeln!(out, "{} {word:#010x} {text}", inst.form().name);
            }
        }
        std::fs::write(&path, out).map_err(|e| format!("writing {}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }

    Ok(Summary {
        forms: FORMS.len(),
        insts: insts.len(),
        mismatches,
        reverse,
        neg_agree,
        neg_total: neg.len(),
    })
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn write_source(path: &Path, lines: &[&str]) -> Result<(), String> {
    let mut s = String::with_capacity(lines.len() * 40);
    for l in lines {
        s.push_str(l);
        s.push('\n');
    }
    std::fs::write(path, s).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// `path:LINE:COL: error: msg` lines of an assembler's stderr, as (0-based line, msg).
fn error_lines(stderr: &str, file: &Path, what: &str) -> Vec<(usize, String)> {
    let name = file.to_string_lossy();
    let mut out = Vec::new();
    for l in stderr.lines() {
        let Some(rest) = l.strip_prefix(&*name).and_then(|r| r.strip_prefix(':')) else {
            continue;
        };
        let mut parts = rest.splitn(3, ':');
        let (Some(line), Some(_col), Some(msg)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let msg = msg.trim();
        if let (Ok(n), true) = (line.parse::<usize>(), msg.starts_with(what)) {
            out.push((n - 1, msg.to_string()));
        }
    }
    out
}

fn run_tool(cmd: &mut Command) -> Result<std::process::Output, String> {
    cmd.output().map_err(|e| format!("running {cmd:?}: {e}"))
}

fn assemble_cmd(src: &Path, obj: &Path) -> Command {
    if have("clang") {
        let mut c = Command::new("clang");
        c.args([
            "--target=aarch64-linux-gnu",
            "-march=armv8.6-a+i8mm+dotprod+fp16+bf16",
            "-c",
        ])
        .arg(src)
        .arg("-o")
        .arg(obj);
        c
    } else {
        let mut c = Command::new("llvm-mc");
        c.args([
            "-triple=aarch64",
            &format!("-mattr={MATTR}"),
            "-filetype=obj",
        ])
        .arg(src)
        .arg("-o")
        .arg(obj);
        c
    }
}

/// Lines the assembler rejected (0-based, with its message), and the words of the rest.
type Assembled = (Vec<(usize, String)>, Vec<u32>);

/// Assemble `lines`; returns the rejected lines and the words of the rest.
fn assemble(tmp: &Path, lines: &[&str]) -> Result<Assembled, String> {
    let src = tmp.join("forward.s");
    let obj = tmp.join("forward.o");
    let bin = tmp.join("forward.bin");
    write_source(&src, lines)?;
    let out = run_tool(&mut assemble_cmd(&src, &obj))?;
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let rejected = error_lines(&stderr, &src, "error");
    if !out.status.success() {
        if rejected.is_empty() {
            return Err(format!("assembler failed:\n{stderr}"));
        }
        let bad: BTreeSet<usize> = rejected.iter().map(|r| r.0).collect();
        let rest: Vec<&str> = lines
            .iter()
            .enumerate()
            .filter(|(i, _)| !bad.contains(i))
            .map(|(_, l)| *l)
            .collect();
        write_source(&src, &rest)?;
        let out = run_tool(&mut assemble_cmd(&src, &obj))?;
        if !out.status.success() {
            return Err(format!(
                "assembler failed twice:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    let out = run_tool(
        Command::new("llvm-objcopy")
            .args(["-O", "binary", "--only-section=.text"])
            .arg(&obj)
            .arg(&bin),
    )?;
    if !out.status.success() {
        return Err(format!(
            "llvm-objcopy failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let bytes = std::fs::read(&bin).map_err(|e| format!("reading {}: {e}", bin.display()))?;
    let words = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok((rejected, words))
}

/// The 0-based lines llvm-mc rejects with an error.
fn assemble_errors(tmp: &Path, lines: &[&str]) -> Result<BTreeSet<usize>, String> {
    let src = tmp.join("negative.s");
    write_source(&src, lines)?;
    let out = run_tool(
        Command::new("llvm-mc")
            .args([
                "-triple=aarch64",
                &format!("-mattr={MATTR}"),
                "-filetype=null",
            ])
            .arg(&src),
    )?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    Ok(error_lines(&stderr, &src, "error")
        .into_iter()
        .map(|e| e.0)
        .collect())
}

/// llvm-mc's text for each word (`None` where it reports an invalid encoding).
fn disassemble(tmp: &Path, words: &[u32]) -> Result<Vec<Option<String>>, String> {
    let src = tmp.join("reverse.txt");
    let mut s = String::with_capacity(words.len() * 20);
    for w in words {
        let b = w.to_le_bytes();
        let _ = writeln!(s, "{:#04x} {:#04x} {:#04x} {:#04x}", b[0], b[1], b[2], b[3]);
    }
    std::fs::write(&src, s).map_err(|e| format!("writing {}: {e}", src.display()))?;
    let out = run_tool(
        Command::new("llvm-mc")
            .args([
                "--disassemble",
                "-triple=aarch64",
                &format!("-mattr={MATTR}"),
            ])
            .arg(&src),
    )?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let invalid: BTreeSet<usize> = error_lines(&stderr, &src, "warning")
        .into_iter()
        .map(|e| e.0)
        .collect();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut texts = stdout
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('.'))
        .map(normalize);
    let mut result = Vec::with_capacity(words.len());
    for i in 0..words.len() {
        if invalid.contains(&i) {
            result.push(None);
        } else {
            result.push(texts.next());
        }
    }
    Ok(result)
}

/// llvm's tab-separated text with comments dropped and whitespace collapsed.
fn normalize(line: &str) -> String {
    let code = line.split("//").next().unwrap_or("");
    code.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_drops_tabs_and_comments() {
        assert_eq!(
            normalize("\tadd\tx0, x1, #1, lsl #12 // =4096"),
            "add x0, x1, #1, lsl #12"
        );
    }

    #[test]
    fn error_lines_reads_line_numbers() {
        let p = Path::new("/tmp/a.s");
        let e = error_lines(
            "/tmp/a.s:3:5: error: invalid operand\n/tmp/a.s:4:1: warning: x\n",
            p,
            "error",
        );
        assert_eq!(e, vec![(2, "error: invalid operand".to_string())]);
    }
}
