//! Pre-tokenisation: cut text into pieces that BPE encodes one by one.
//!
//! llama.cpp's `smollm` pre-tokenizer (`LLAMA_VOCAB_PRE_TYPE_SMOLLM`, the
//! same as StarCoder's) applies two expressions in turn:
//!
//! 1. `\p{N}` — every number character becomes a piece of its own;
//! 2. GPT-2's `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`,
//!    with text no alternative matches kept as a piece of its own.
//!
//! (Hugging Face's SmolLM2 tokenizer is `Digits(individual_digits)` then
//! `ByteLevel(use_regex)`, the same cuts.) The `regex` crate has no
//! look-ahead, so `\s+(?!\S)` is run as `\s+` and then corrected: a
//! whitespace run followed by a non-space character gives back its last
//! character, which then leads the next piece (`"  a"` → `" "`, `" a"`), or,
//! when the run is one character, stays a piece of its own — exactly what
//! backtracking into the look-ahead gives.

use regex::Regex;

/// Which pre-tokenizer a vocabulary uses (`tokenizer.ggml.pre`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// `smollm` (also `starcoder`, `refact`, `command-r`, `codeshell`,
    /// `exaone`, `minerva` in llama.cpp): numbers split into single
    /// characters, then the GPT-2 expression.
    Smollm,
    /// `gpt2` (and `default` for a `gpt2` model): the GPT-2 expression alone.
    Gpt2,
}

impl PreTokenizer {
    /// The pre-tokenizer for a `tokenizer.ggml.pre` name, if supported.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone"
            | "minerva" => Some(Self::Smollm),
            "gpt2" | "default" | "gpt-2" | "mpt" | "olmo" | "jais" => Some(Self::Gpt2),
            _ => None,
        }
    }
}

/// GPT-2's expression with `\s+(?!\S)|\s+` run as `\s+` (see the module doc).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+";

/// Compiled expressions for one pre-tokenizer.
#[derive(Clone, Debug)]
pub(crate) struct Splitter {
    kind: PreTokenizer,
    gpt2: Regex,
}

impl Splitter {
    pub(crate) fn new(kind: PreTokenizer) -> Self {
        Self {
            kind,
            gpt2: Regex::new(GPT2).expect("the GPT-2 expression compiles"),
        }
    }

    /// Call `f` on each piece of `text`, in order; the pieces concatenate
    /// to `text`.
    pub(crate) fn split<'t>(&self, text: &'t str, mut f: impl FnMut(&'t str)) {
        match self.kind {
            PreTokenizer::Gpt2 => self.split_gpt2(text, &mut f),
            PreTokenizer::Smollm => {
                let mut start = 0;
                for (i, c) in text.char_indices() {
                    if is_number(c) {
                        self.split_gpt2(&text[start..i], &mut f);
                        f(&text[i..i + c.len_utf8()]);
                        start = i + c.len_utf8();
                    }
                }
                self.split_gpt2(&text[start..], &mut f);
            }
        }
    }

    fn split_gpt2<'t>(&self, text: &'t str, f: &mut impl FnMut(&'t str)) {
        let mut pos = 0;
        while pos < text.len() {
            let Some(m) = self.gpt2.find_at(text, pos) else {
                f(&text[pos..]);
                return;
            };
            if m.start() > pos {
                f(&text[pos..m.start()]);
            }
            let mut end = m.end();
            let piece = m.as_str();
            // Only the `\s+` alternative matches all-whitespace text.
            if end < text.len() && piece.chars().all(char::is_whitespace) {
                if let Some((last, _)) = piece.char_indices().next_back().filter(|&(i, _)| i > 0) {
                    end = m.start() + last;
                }
            }
            f(&text[m.start()..end]);
            pos = end;
        }
    }
}

/// `\p{N}`: Unicode general categories Nd, Nl and No — Rust's `is_numeric`.
fn is_number(c: char) -> bool {
    c.is_numeric()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(kind: PreTokenizer, text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        Splitter::new(kind).split(text, |p| out.push(p));
        out
    }

    #[test]
    fn whitespace_runs_give_back_their_last_character_to_the_next_word() {
        let p = pieces(PreTokenizer::Gpt2, "a  b   \n\tc \n");
        assert_eq!(p, ["a", " ", " b", "   \n", "\t", "c", " \n"]);
    }

    #[test]
    fn contractions_letters_numbers_and_symbols_split_as_gpt2() {
        let p = pieces(PreTokenizer::Gpt2, "I'm 42 ok?! it's");
        assert_eq!(p, ["I", "'m", " 42", " ok", "?!", " it", "'s"]);
    }

    #[test]
    fn smollm_splits_every_number_character() {
        let p = pieces(PreTokenizer::Smollm, "year 2024, ½ Ⅻ٣x");
        assert_eq!(
            p,
            ["year", " ", "2", "0", "2", "4", ",", " ", "½", " ", "Ⅻ", "٣", "x"]
        );
    }

    #[test]
    fn pieces_always_concatenate_to_the_text() {
        for text in [
            "",
            " ",
            "\n\n",
            "a\u{301}b",
            "  x  ",
            "\u{a0}\u{a0}y",
            "日本語 テキスト",
        ] {
            for kind in [PreTokenizer::Gpt2, PreTokenizer::Smollm] {
                assert_eq!(pieces(kind, text).concat(), text, "{kind:?} {text:?}");
            }
        }
    }

    #[test]
    fn pre_tokenizer_names_follow_llama_cpp() {
        assert_eq!(
            PreTokenizer::from_name("smollm"),
            Some(PreTokenizer::Smollm)
        );
        assert_eq!(PreTokenizer::from_name("gpt2"), Some(PreTokenizer::Gpt2));
        assert_eq!(PreTokenizer::from_name("llama-bpe"), None);
    }
}
