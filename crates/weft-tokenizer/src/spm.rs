//! SentencePiece (`tokenizer.ggml.model = "llama"`), as llama.cpp's
//! `llm_tokenizer_spm` runs it.
//!
//! A text fragment left between special tokens is prefixed with a space
//! when the vocabulary asks for it (`add_space_prefix`, only at the start
//! and right after a special token), its spaces become `▁` (U+2581), and
//! it is cut into characters. Then, over and over, the adjacent pair whose
//! joined text is a token with the highest score is joined (the leftmost
//! among equal scores); a pair of any token kind counts, as in llama.cpp.
//! What is left is one token per piece, and a piece that is no token — a
//! single character the vocabulary lacks — is spelled in byte tokens
//! (`<0xE2>`, or the byte as a one-character token).
//!
//! llama.cpp also remembers which pair made each joined text, to split a
//! final piece that is not a token back into its parts. A joined piece is
//! always a token (it was only queued because it is one) and a single
//! character can never be the join of two pieces, so that path is never
//! taken for valid UTF-8, which is all a `&str` can hold; it is left out.

use crate::{
    checked_special, special_cut_order, Fragment, Model, Token, TokenId, TokenKind, Tokenizer,
    TokenizerError,
};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use weft_gguf::{Array, Gguf, GgufError, Value};

/// The character SentencePiece writes for a space.
pub const SPACE_MARKER: char = '\u{2581}';

/// What a SentencePiece vocabulary is made of, for [`Tokenizer::new_spm`]
/// ([`Tokenizer::from_gguf`] reads it from a `llama`-model file).
#[derive(Clone, Debug, Default)]
pub struct SpmVocabulary {
    /// Token strings, in id order (`▁` for a space in normal tokens,
    /// `<0x41>` for byte tokens).
    pub tokens: Vec<String>,
    /// Merge priority of each token, higher first (empty: all 0).
    pub scores: Vec<f32>,
    /// `llama_token_type` codes, one per token (empty: all normal).
    pub token_types: Vec<i32>,
    /// The beginning-of-sequence token.
    pub bos: Option<TokenId>,
    /// The end-of-sequence token.
    pub eos: Option<TokenId>,
    /// The unknown token: what a byte with no byte token encodes to.
    pub unknown: Option<TokenId>,
    /// The padding token.
    pub padding: Option<TokenId>,
    /// Whether a prompt starts with BOS (`tokenizer.ggml.add_bos_token`).
    pub add_bos: bool,
    /// Whether a prompt ends with EOS (`tokenizer.ggml.add_eos_token`).
    pub add_eos: bool,
    /// Whether a space is put before text at the start and after each
    /// special token (`tokenizer.ggml.add_space_prefix`).
    pub add_space_prefix: bool,
}

/// The SentencePiece half of a [`Tokenizer`].
#[derive(Clone, Debug)]
pub(crate) struct Spm {
    /// Each token's score, -0.0 read as 0.0 (llama.cpp compares with `<`).
    scores: Vec<f32>,
    /// The token each byte falls back to, if any.
    byte_tokens: [Option<TokenId>; 256],
    pub(crate) add_space_prefix: bool,
}

/// The scores' key (float32 or int32, as llama.cpp reads them).
const SCORES: &str = "tokenizer.ggml.scores";

/// Build the SentencePiece tokenizer of a `llama`-model file, with
/// llama.cpp's defaults for keys the file leaves out: BOS 1, EOS 2,
/// unknown 0 (each only if the vocabulary is that large), BOS added, EOS
/// not, space prefix on. `tokenizer.ggml.pre` means nothing to this model.
pub(crate) fn from_gguf(gguf: &Gguf) -> Result<Tokenizer, TokenizerError> {
    let tokens = gguf
        .metadata::<&[String]>("tokenizer.ggml.tokens")?
        .to_vec();
    let scores = match gguf.value(SCORES) {
        None => Vec::new(),
        Some(Value::Array(Array::F32(v))) => v.clone(),
        // llama.cpp also takes integer scores.
        Some(Value::Array(Array::I32(v))) => v.iter().map(|&s| s as f32).collect(),
        Some(v) => {
            return Err(GgufError::WrongType {
                key: SCORES.into(),
                expected: "array of float32 or int32",
                found: v.type_description(),
            }
            .into())
        }
    };
    let n = tokens.len();
    // A default id counts only if the vocabulary has it.
    let id = |key: &str, default: TokenId| -> Result<Option<TokenId>, TokenizerError> {
        Ok(match gguf.metadata_opt::<u32>(key)? {
            Some(id) => Some(id),
            None => ((default as usize) < n).then_some(default),
        })
    };
    let flag = |key: &str, default: bool| -> Result<bool, TokenizerError> {
        Ok(gguf.metadata_opt(key)?.unwrap_or(default))
    };
    Tokenizer::new_spm(SpmVocabulary {
        scores,
        token_types: gguf
            .metadata_opt::<&[i32]>("tokenizer.ggml.token_type")?
            .unwrap_or_default()
            .to_vec(),
        bos: id("tokenizer.ggml.bos_token_id", 1)?,
        eos: id("tokenizer.ggml.eos_token_id", 2)?,
        unknown: id("tokenizer.ggml.unknown_token_id", 0)?,
        padding: gguf.metadata_opt("tokenizer.ggml.padding_token_id")?,
        add_bos: flag("tokenizer.ggml.add_bos_token", true)?,
        add_eos: flag("tokenizer.ggml.add_eos_token", false)?,
        add_space_prefix: flag("tokenizer.ggml.add_space_prefix", true)?,
        tokens,
    })
}

impl Tokenizer {
    /// Build a SentencePiece tokenizer from its parts (checked as
    /// [`Tokenizer::from_gguf`] checks a file: lengths agree, scores are
    /// numbers, byte tokens spell a byte, special ids are in range).
    pub fn new_spm(vocab: SpmVocabulary) -> Result<Self, TokenizerError> {
        let n = vocab.tokens.len();
        if n == 0 || n > u32::MAX as usize {
            return Err(TokenizerError::BadVocabularySize { len: n });
        }
        if !vocab.token_types.is_empty() && vocab.token_types.len() != n {
            return Err(TokenizerError::TokenTypeCount {
                tokens: n,
                types: vocab.token_types.len(),
            });
        }
        if !vocab.scores.is_empty() && vocab.scores.len() != n {
            return Err(TokenizerError::ScoreCount {
                tokens: n,
                scores: vocab.scores.len(),
            });
        }
        let mut scores = vec![0.0f32; n];
        for (id, &score) in vocab.scores.iter().enumerate() {
            if score.is_nan() {
                return Err(TokenizerError::BadScore {
                    id: id as TokenId,
                    score,
                });
            }
            // -0.0 and 0.0 tie in llama.cpp's `<`; make them one value so a
            // total order agrees.
            scores[id] = if score == 0.0 { 0.0 } else { score };
        }

        let mut ids = HashMap::with_capacity(n);
        let mut tokens = Vec::with_capacity(n);
        for (i, text) in vocab.tokens.into_iter().enumerate() {
            let kind = vocab
                .token_types
                .get(i)
                .map_or(TokenKind::Normal, |&c| TokenKind::from_code(c));
            let bytes = match kind {
                TokenKind::Normal => text.replace(SPACE_MARKER, " ").into_bytes(),
                TokenKind::Byte => {
                    vec![byte_of(&text).ok_or_else(|| TokenizerError::BadByteToken {
                        id: i as TokenId,
                        text: text.clone(),
                    })?]
                }
                TokenKind::Control | TokenKind::UserDefined | TokenKind::Unknown => {
                    text.as_bytes().to_vec()
                }
                // llama.cpp shows nothing for these.
                TokenKind::Unused | TokenKind::Undefined => Vec::new(),
            };
            // A repeated string means its last id, as in llama.cpp's map.
            ids.insert(text.clone(), i as TokenId);
            tokens.push(Token { text, bytes, kind });
        }

        // llama.cpp's `byte_to_token`: `<0xE2>`, else the byte itself as a
        // one-character token (only ASCII can be one).
        let mut byte_tokens = [None; 256];
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            *slot = ids
                .get(format!("<0x{b:02X}>").as_str())
                .copied()
                .or_else(|| {
                    u8::try_from(b)
                        .ok()
                        .filter(u8::is_ascii)
                        .and_then(|b| ids.get(char::from(b).to_string().as_str()).copied())
                });
        }

        let bos = checked_special(n, "tokenizer.ggml.bos_token_id", vocab.bos)?;
        let eos = checked_special(n, "tokenizer.ggml.eos_token_id", vocab.eos)?;
        let unknown = checked_special(n, "tokenizer.ggml.unknown_token_id", vocab.unknown)?;
        let padding = checked_special(n, "tokenizer.ggml.padding_token_id", vocab.padding)?;
        let specials = special_cut_order(&tokens);

        Ok(Self {
            tokens,
            ids,
            specials,
            model: Model::Spm(Spm {
                scores,
                byte_tokens,
                add_space_prefix: vocab.add_space_prefix,
            }),
            bos,
            eos,
            unknown,
            padding,
            add_bos: vocab.add_bos,
            add_eos: vocab.add_eos,
        })
    }
}

/// The byte a byte token `<0xNN>` stands for.
fn byte_of(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

impl Spm {
    /// llama.cpp's SPM branch of `llama_vocab::tokenize` over the
    /// fragments special-token cutting left (no BOS or EOS).
    pub(crate) fn encode(
        &self,
        tok: &Tokenizer,
        fragments: &[Fragment<'_>],
        out: &mut Vec<TokenId>,
    ) {
        // The start counts as "after a special token".
        let mut after_special = true;
        let mut text = String::new();
        for fragment in fragments {
            match *fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                // llama.cpp has no empty fragments (an empty text has none).
                Fragment::Text("") => {}
                Fragment::Text(t) => {
                    text.clear();
                    if self.add_space_prefix && after_special {
                        text.push(SPACE_MARKER);
                    }
                    text.extend(t.chars().map(|c| if c == ' ' { SPACE_MARKER } else { c }));
                    self.segment(tok, &text, out);
                    after_special = false;
                }
            }
        }
    }

    /// One fragment, spaces already marked: characters joined pair by
    /// pair, highest score first, then each piece as a token or bytes.
    fn segment(&self, tok: &Tokenizer, text: &str, out: &mut Vec<TokenId>) {
        let mut syms: Vec<Symbol> = text
            .char_indices()
            .map(|(start, c)| Symbol {
                start,
                len: c.len_utf8(),
                prev: None,
                next: None,
            })
            .collect();
        let count = syms.len();
        for (i, s) in syms.iter_mut().enumerate() {
            s.prev = i.checked_sub(1);
            s.next = (i + 1 < count).then_some(i + 1);
        }
        let mut queue = BinaryHeap::new();
        let push = |queue: &mut BinaryHeap<Bigram>, syms: &[Symbol], left: usize, right: usize| {
            let start = syms[left].start;
            let len = syms[left].len + syms[right].len;
            if let Some(&id) = tok.ids.get(&text[start..start + len]) {
                queue.push(Bigram {
                    score: self.scores[id as usize],
                    left,
                    right,
                    len,
                });
            }
        };
        for i in 1..count {
            push(&mut queue, &syms, i - 1, i);
        }
        while let Some(b) = queue.pop() {
            let (l, r) = (syms[b.left], syms[b.right]);
            // Stale: a side was joined into something else since.
            if l.len == 0 || r.len == 0 || l.len + r.len != b.len {
                continue;
            }
            syms[b.left].len = b.len;
            syms[b.right].len = 0;
            syms[b.left].next = r.next;
            if let Some(after) = r.next {
                syms[after].prev = Some(b.left);
                push(&mut queue, &syms, b.left, after);
            }
            if let Some(before) = l.prev {
                push(&mut queue, &syms, before, b.left);
            }
        }
        let mut at = (count > 0).then_some(0);
        while let Some(i) = at {
            let s = syms[i];
            let piece = &text[s.start..s.start + s.len];
            match tok.ids.get(piece) {
                Some(&id) => out.push(id),
                None => {
                    // A byte with neither token: the unknown token, or
                    // nothing (llama.cpp fails on such a vocabulary).
                    out.extend(
                        piece
                            .bytes()
                            .filter_map(|b| self.byte_tokens[b as usize].or(tok.unknown)),
                    );
                }
            }
            at = s.next;
        }
    }
}

/// A run of characters of the fragment: `text[start..start + len]`, linked
/// to its neighbours; `len == 0` once joined into its left neighbour.
#[derive(Clone, Copy, Debug)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate join of `left` and `right` (`len` bytes together), ordered
/// for a max-heap: higher score first, then the leftmost.
#[derive(Clone, Copy, Debug)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        // Scores are never NaN and never -0.0 (see `Tokenizer::new_spm`),
        // so the total order is llama.cpp's `<`.
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Render, Special};
    use proptest::prelude::*;
    use weft_gguf::GgufWriter;

    const NORMAL: i32 = 1;
    const UNKNOWN: i32 = 2;
    const CONTROL: i32 = 3;
    const USER: i32 = 4;
    const BYTE: i32 = 6;

    /// Ids of the tiny vocabulary: `<unk>`, `<s>`, `</s>`, `<ctl>`, `<ud>`,
    /// then the 256 byte tokens from [`FIRST_BYTE`], then [`WORDS`].
    const CTL: TokenId = 3;
    const UD: TokenId = 4;
    const FIRST_BYTE: TokenId = 5;
    const WORDS: TokenId = FIRST_BYTE + 256;

    /// A `llama`-model GGUF file: the specials and byte tokens above, then
    /// `words` (text, score) as normal tokens, then `keys`.
    fn file(words: &[(&str, f32)], keys: &[(&str, Value)]) -> Gguf {
        let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>", "<ctl>", "<ud>"]
            .map(String::from)
            .into();
        let mut types = vec![UNKNOWN, CONTROL, CONTROL, CONTROL, USER];
        let mut scores = vec![0.0; 5];
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(BYTE);
            scores.push(0.0);
        }
        for &(w, s) in words {
            tokens.push(w.into());
            types.push(NORMAL);
            scores.push(s);
        }
        let mut w = GgufWriter::new();
        w.metadata("tokenizer.ggml.model", Value::String("llama".into()))
            .metadata("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
            .metadata("tokenizer.ggml.scores", Value::Array(Array::F32(scores)))
            .metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
        for (k, v) in keys {
            w.metadata(k, v.clone());
        }
        Gguf::from_bytes(w.to_bytes()).expect("parses")
    }

    /// The tiny vocabulary, without a space prefix unless `keys` says.
    fn tiny(words: &[(&str, f32)], keys: &[(&str, Value)]) -> Tokenizer {
        let prefix = "tokenizer.ggml.add_space_prefix";
        let mut all = keys.to_vec();
        if !keys.iter().any(|k| k.0 == prefix) {
            all.push((prefix, Value::Bool(false)));
        }
        Tokenizer::from_gguf(&file(words, &all)).expect("builds")
    }

    fn byte(b: u8) -> TokenId {
        FIRST_BYTE + TokenId::from(b)
    }

    const ABC: &[(&str, f32)] = &[
        ("\u{2581}", -1.0),
        ("a", -2.0),
        ("b", -3.0),
        ("c", -4.0),
        ("ab", -5.0),
        ("bc", -6.0),
        ("aa", -7.0),
        ("\u{2581}a", -8.0),
        ("\u{2581}b", -9.0),
    ];
    // Their ids.
    const SPACE: TokenId = WORDS;
    const A: TokenId = WORDS + 1;
    const B: TokenId = WORDS + 2;
    const C: TokenId = WORDS + 3;
    const AB: TokenId = WORDS + 4;
    const BC: TokenId = WORDS + 5;
    const AA: TokenId = WORDS + 6;
    const SPACE_A: TokenId = WORDS + 7;
    const SPACE_B: TokenId = WORDS + 8;

    fn with_scores(changes: &[(&str, f32)]) -> Vec<(&'static str, f32)> {
        ABC.iter()
            .map(|&(w, s)| {
                let s = changes.iter().find(|c| c.0 == w).map_or(s, |c| c.1);
                (w, s)
            })
            .collect()
    }

    #[test]
    fn the_highest_score_joins_first() {
        let tok = tiny(ABC, &[]);
        // "ab" (-5) outscores "bc" (-6).
        assert_eq!(tok.encode("abc", Special::AsText), [AB, C]);
        let tok = tiny(&with_scores(&[("bc", -4.5)]), &[]);
        assert_eq!(tok.encode("abc", Special::AsText), [A, BC]);
        // A join can join again: "ab" then "abc".
        let mut words = ABC.to_vec();
        words.push(("abc", -20.0));
        let tok = tiny(&words, &[]);
        assert_eq!(tok.encode("abc", Special::AsText), [WORDS + 9]);
        assert_eq!(tok.encode("abcab", Special::AsText), [WORDS + 9, AB]);
    }

    #[test]
    fn equal_scores_join_leftmost_first_and_minus_zero_ties_with_zero() {
        let tok = tiny(ABC, &[]);
        assert_eq!(tok.encode("aaa", Special::AsText), [AA, A]);
        assert_eq!(tok.encode("aaaa", Special::AsText), [AA, AA]);
        assert_eq!(tok.encode("aaaaa", Special::AsText), [AA, AA, A]);
        let tok = tiny(&with_scores(&[("ab", -6.0)]), &[]);
        assert_eq!(tok.encode("abc", Special::AsText), [AB, C]);
        // llama.cpp compares scores with `<`, for which -0.0 == 0.0: a tie,
        // so the leftmost pair wins, whichever zero it has.
        let tok = tiny(&with_scores(&[("ab", -0.0), ("bc", 0.0)]), &[]);
        assert_eq!(tok.encode("abc", Special::AsText), [AB, C]);
    }

    #[test]
    fn characters_without_tokens_fall_back_to_bytes_or_the_unknown_token() {
        let tok = tiny(ABC, &[]);
        assert_eq!(
            tok.encode("aé🦀", Special::AsText),
            [
                A,
                byte(0xc3),
                byte(0xa9),
                byte(0xf0),
                byte(0x9f),
                byte(0xa6),
                byte(0x80)
            ]
        );
        assert_eq!(
            tok.decode(&tok.encode("aé🦀", Special::AsText), Render::Special)
                .expect("in range"),
            "aé🦀".as_bytes()
        );
        // Without byte tokens, a byte is the unknown token: `z` and `é`'s
        // two bytes; a one-character token stands for an ASCII byte, as
        // llama.cpp's `byte_to_token` falls back to it.
        let tok = Tokenizer::new_spm(SpmVocabulary {
            tokens: ["<unk>", "a", "z"].map(String::from).into(),
            token_types: vec![UNKNOWN, NORMAL, NORMAL],
            unknown: Some(0),
            ..SpmVocabulary::default()
        })
        .expect("builds");
        assert_eq!(tok.encode("aéz", Special::AsText), [1, 0, 0, 2]);
        let tok = Tokenizer::new_spm(SpmVocabulary {
            tokens: ["a".into()].into(),
            ..SpmVocabulary::default()
        })
        .expect("builds");
        assert_eq!(tok.encode("aé", Special::AsText), [0]);
    }

    #[test]
    fn spaces_are_the_marker_and_the_prefix_comes_only_when_asked() {
        let tok = tiny(ABC, &[]);
        assert_eq!(tok.encode("a b", Special::AsText), [A, SPACE_B]);
        assert_eq!(tok.encode(" a", Special::AsText), [SPACE_A]);
        assert_eq!(tok.encode("a ", Special::AsText), [A, SPACE]);
        assert_eq!(tok.encode("", Special::Parse), []);
        assert_eq!(
            tok.decode(&[SPACE_A, SPACE_B], Render::Special)
                .expect("ok"),
            b" a b"
        );
        // A literal `▁` in the text is a space too (so it decodes as one).
        assert_eq!(tok.encode("\u{2581}a", Special::AsText), [SPACE_A]);

        let tok = tiny(
            ABC,
            &[("tokenizer.ggml.add_space_prefix", Value::Bool(true))],
        );
        assert_eq!(tok.encode("a", Special::AsText), [SPACE_A]);
        assert_eq!(tok.encode("", Special::AsText), []);
        // After each special token, and only at a fragment's start.
        assert_eq!(
            tok.encode("a<ctl>b a", Special::Parse),
            [SPACE_A, CTL, SPACE_B, SPACE_A]
        );
        assert_eq!(tok.encode("<ctl>", Special::Parse), [CTL]);
        // Decoding drops the prefix's space from the first token only.
        assert_eq!(
            tok.decode(&tok.encode("a b", Special::AsText), Render::Special)
                .expect("ok"),
            b"a b"
        );
        assert_eq!(
            tok.decode(&tok.encode("a<ctl>b", Special::Parse), Render::Special)
                .expect("ok"),
            b"a<ctl> b"
        );
        let mut stream = tok.stream_decoder(Render::Special);
        assert_eq!(stream.push(SPACE_A).expect("ok"), " a");

        // llama.cpp's default for a SentencePiece file is a prefix.
        let tok = Tokenizer::from_gguf(&file(ABC, &[])).expect("builds");
        assert_eq!(tok.encode("b", Special::AsText), [SPACE_B]);
    }

    #[test]
    fn bos_eos_and_unknown_default_as_llama_cpp_and_the_file_overrides() {
        let tok = tiny(ABC, &[]);
        assert!(tok.add_bos());
        assert!(!tok.add_eos());
        assert_eq!(
            (tok.bos(), tok.eos(), tok.unknown(), tok.padding()),
            (Some(1), Some(2), Some(0), None)
        );
        let tok = tiny(
            ABC,
            &[
                ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
                ("tokenizer.ggml.add_eos_token", Value::Bool(true)),
                ("tokenizer.ggml.bos_token_id", Value::U32(2)),
                ("tokenizer.ggml.eos_token_id", Value::U32(1)),
                ("tokenizer.ggml.unknown_token_id", Value::U32(3)),
                ("tokenizer.ggml.padding_token_id", Value::U32(0)),
            ],
        );
        assert!(!tok.add_bos());
        assert!(tok.add_eos());
        assert_eq!(
            (tok.bos(), tok.eos(), tok.unknown(), tok.padding()),
            (Some(2), Some(1), Some(3), Some(0))
        );
        // encode never adds them itself.
        assert_eq!(tok.encode("a", Special::Parse), [A]);
    }

    #[test]
    fn control_tokens_are_cut_only_when_asked_user_defined_always() {
        let tok = tiny(ABC, &[]);
        assert_eq!(tok.encode("a<ctl>b", Special::Parse), [A, CTL, B]);
        let as_text = tok.encode("a<ctl>b", Special::AsText);
        assert_eq!(
            as_text,
            [A, byte(b'<'), C, byte(b't'), byte(b'l'), byte(b'>'), B]
        );
        assert_eq!(tok.encode("a<ud>b", Special::AsText), [A, UD, B]);
        assert_eq!(tok.encode("<unk></s>", Special::Parse), [0, 2]);
        // Control and unknown tokens show only when rendered.
        let ids = [1, A, CTL, 0, UD, B, 2];
        assert_eq!(
            tok.decode(&ids, Render::Special).expect("ok"),
            b"<s>a<ctl><unk><ud>b</s>"
        );
        assert_eq!(
            tok.decode(&ids, Render::SkipSpecial).expect("ok"),
            b"a<ud>b"
        );
    }

    #[test]
    fn a_stream_shows_a_character_once_its_byte_tokens_complete_it() {
        let tok = tiny(ABC, &[]);
        let mut stream = tok.stream_decoder(Render::Special);
        assert_eq!(stream.push(SPACE_A).expect("ok"), " a");
        assert_eq!(stream.push(byte(0xc3)).expect("ok"), "");
        assert_eq!(stream.push(byte(0xa9)).expect("ok"), "é");
        assert_eq!(stream.finish(), "");
        assert!(matches!(
            tok.decode(&[u32::MAX], Render::Special),
            Err(TokenizerError::UnknownId { .. })
        ));
    }

    #[test]
    fn malformed_vocabularies_are_refused_by_name() {
        let vocab = |tokens: &[&str], types: &[i32], scores: &[f32]| SpmVocabulary {
            tokens: tokens.iter().map(|s| s.to_string()).collect(),
            token_types: types.to_vec(),
            scores: scores.to_vec(),
            ..SpmVocabulary::default()
        };
        let e = Tokenizer::new_spm(vocab(&["a", "b"], &[], &[0.0])).expect_err("one score");
        assert!(
            matches!(
                e,
                TokenizerError::ScoreCount {
                    tokens: 2,
                    scores: 1
                }
            ),
            "{e}"
        );
        let e = Tokenizer::new_spm(vocab(&["a", "b"], &[], &[0.0, f32::NAN])).expect_err("NaN");
        assert!(matches!(e, TokenizerError::BadScore { id: 1, .. }), "{e}");
        for bad in ["<0x4>", "<0xGG>", "<0x041>", "A", "<0X41>"] {
            let e = Tokenizer::new_spm(vocab(&["a", bad], &[NORMAL, BYTE], &[])).expect_err(bad);
            assert!(
                matches!(e, TokenizerError::BadByteToken { id: 1, ref text } if text == bad),
                "{e}"
            );
        }
        let e = Tokenizer::new_spm(vocab(&["a", "b"], &[NORMAL], &[])).expect_err("one type");
        assert!(
            matches!(
                e,
                TokenizerError::TokenTypeCount {
                    tokens: 2,
                    types: 1
                }
            ),
            "{e}"
        );
        let e = Tokenizer::new_spm(SpmVocabulary {
            eos: Some(2),
            ..vocab(&["a", "b"], &[], &[])
        })
        .expect_err("eos past the end");
        assert!(
            matches!(e, TokenizerError::SpecialIdOutOfRange { id: 2, .. }),
            "{e}"
        );
        let e = Tokenizer::new_spm(SpmVocabulary::default()).expect_err("empty");
        assert!(
            matches!(e, TokenizerError::BadVocabularySize { len: 0 }),
            "{e}"
        );

        let mut w = GgufWriter::new();
        w.metadata("tokenizer.ggml.model", Value::String("llama".into()))
            .metadata(
                "tokenizer.ggml.tokens",
                Value::Array(Array::String(vec!["a".into()])),
            )
            .metadata(
                "tokenizer.ggml.scores",
                Value::Array(Array::String(vec!["0".into()])),
            );
        let e = Tokenizer::from_gguf(&Gguf::from_bytes(w.to_bytes()).expect("parses"))
            .expect_err("string scores");
        assert!(
            matches!(e, TokenizerError::Gguf(GgufError::WrongType { .. })),
            "{e}"
        );
        // Integer scores are numbers too, as llama.cpp reads them.
        let mut w = GgufWriter::new();
        w.metadata("tokenizer.ggml.model", Value::String("llama".into()))
            .metadata(
                "tokenizer.ggml.tokens",
                Value::Array(Array::String(["a", "b", "ab"].map(String::from).into())),
            )
            .metadata(
                "tokenizer.ggml.scores",
                Value::Array(Array::I32(vec![0, 0, 1])),
            )
            .metadata("tokenizer.ggml.add_space_prefix", Value::Bool(false));
        let tok =
            Tokenizer::from_gguf(&Gguf::from_bytes(w.to_bytes()).expect("parses")).expect("builds");
        assert_eq!(tok.encode("ab", Special::AsText), [2]);
    }

    /// `text` as a prefixing vocabulary decodes it: a space after each
    /// special token that text follows (the one before the first text
    /// fragment is dropped when decoding, unless a special token came first).
    fn spaced_after_specials(text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        let mut after_special = false;
        while let Some(c) = rest.chars().next() {
            if let Some(t) = ["<ctl>", "<ud>"].into_iter().find(|t| rest.starts_with(t)) {
                out.push_str(t);
                rest = &rest[t.len()..];
                after_special = true;
            } else {
                if after_special {
                    out.push(' ');
                }
                out.push(c);
                rest = &rest[c.len_utf8()..];
                after_special = false;
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Law: decoding an encoding gives the text back (special tokens
        /// parsed and rendered); with the space prefix, plus the spaces
        /// put after special tokens, as llama.cpp gives.
        #[test]
        fn decode_inverts_encode(text in "(<ctl>|<ud>|[ abcé🦀<>\n])*", prefix in any::<bool>()) {
            let tok = tiny(ABC, &[("tokenizer.ggml.add_space_prefix", Value::Bool(prefix))]);
            let ids = tok.encode(&text, Special::Parse);
            let back = tok.decode(&ids, Render::Special).expect("ids in range");
            let want = if prefix { spaced_after_specials(&text) } else { text.clone() };
            prop_assert_eq!(String::from_utf8(back).expect("utf-8"), want);
            // Streaming shows the same bytes, the prefix's space included.
            let mut stream = tok.stream_decoder(Render::Special);
            let mut streamed = String::new();
            for &id in &ids {
                streamed.push_str(&stream.push(id).expect("in range"));
            }
            streamed.push_str(&stream.finish());
            let whole = tok.decode(&ids, Render::Special).expect("ids in range");
            let stripped = prefix && ids.first().is_some_and(|&id| tok.token_bytes(id).is_some_and(|b| b.starts_with(b" ")));
            prop_assert_eq!(streamed.len(), whole.len() + usize::from(stripped));
        }
    }
}
