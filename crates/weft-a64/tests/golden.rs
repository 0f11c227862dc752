//! Replays the golden table that `cargo xtask check-encodings --write-golden`
//! wrote after llvm-mc 14 agreed with every line: no LLVM needed here.

use weft_a64::{decode, Inst};

const GOLDEN: &str = include_str!("golden/encodings.txt");

fn lines() -> impl Iterator<Item = (&'static str, u32, &'static str)> {
    GOLDEN
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let mut p = l.splitn(3, ' ');
            let name = p.next().unwrap();
            let word = u32::from_str_radix(p.next().unwrap().trim_start_matches("0x"), 16).unwrap();
            (name, word, p.next().unwrap())
        })
}

#[test]
fn golden_file_is_not_empty_and_covers_every_form() {
    let names: std::collections::BTreeSet<&str> = lines().map(|l| l.0).collect();
    let missing: Vec<&str> = weft_a64::FORMS
        .iter()
        .map(|f| f.name)
        .filter(|n| !names.contains(n))
        .collect();
    assert!(
        missing.is_empty(),
        "forms without golden lines (regenerate the file): {missing:?}"
    );
}

#[test]
fn every_golden_word_decodes_to_its_form_and_text() {
    let mut bad = Vec::new();
    for (name, word, text) in lines() {
        match decode(word) {
            Some(i) if i.form().name == name && i.to_string() == text => {}
            other => bad.push(format!(
                "{word:#010x} `{text}` ({name}) decoded as {:?}",
                other.map(|i| (i.form().name, i.to_string()))
            )),
        }
    }
    assert!(
        bad.is_empty(),
        "{} lines differ, first: {:?}",
        bad.len(),
        &bad[..bad.len().min(10)]
    );
}

#[test]
fn every_golden_line_re_encodes_through_the_constructor() {
    for (name, word, text) in lines() {
        let d = decode(word).unwrap_or_else(|| panic!("{text}"));
        let rebuilt =
            Inst::new(d.op(), d.operands()).unwrap_or_else(|e| panic!("{name} `{text}`: {e}"));
        assert_eq!(rebuilt.encode(), Ok(word), "{name} `{text}`");
        assert_eq!(rebuilt, d, "{name} `{text}`");
    }
}
