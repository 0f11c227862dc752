//! weft-tokenizer: the tokenizer of a GGUF model, as llama.cpp runs it —
//! GPT-2-style byte-level BPE (`tokenizer.ggml.model = "gpt2"`, SmolLM2)
//! or SentencePiece (`"llama"`, Gemma 3).
//!
//! One job: text ↔ token ids for the model a GGUF file describes, through
//! one API whichever model the file uses: [`Tokenizer::from_gguf`],
//! [`Tokenizer::encode`], [`Tokenizer::decode`], [`StreamDecoder`]. It is
//! built from `tokenizer.ggml.tokens`, `.token_type` and the
//! bos/eos/unknown/padding ids, with `.merges` and `.pre` (gpt2) or
//! `.scores` and `.add_space_prefix` (llama).
//!
//! ```no_run
//! use weft_tokenizer::{Render, Special, Tokenizer};
//! let gguf = weft_gguf::Gguf::open("gemma-3-270m-q4_k_m.gguf")?;
//! let tok = Tokenizer::from_gguf(&gguf)?;
//! let mut ids = Vec::new();
//! if tok.add_bos() {
//!     ids.extend(tok.bos());
//! }
//! ids.extend(tok.encode("<start_of_turn>user\nHello", Special::Parse));
//! // Control tokens (BOS, `<start_of_turn>`) shown or not, as asked.
//! assert_eq!(tok.decode(&ids, Render::SkipSpecial)?, b"user\nHello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Invariants:
//! - Encoding is llama.cpp's. Special tokens are cut out first, by the
//!   same code for both models (control tokens only when asked,
//!   user-defined tokens always, longest first). For gpt2 the rest is
//!   pre-tokenised ([`PreTokenizer`]), each piece is spelled in GPT-2's
//!   byte characters and merged by rank, lowest first, leftmost first
//!   among equals. For llama each text fragment gets a leading space if
//!   the file asks (at the start and after each special token), spaces
//!   become `▁`, and characters are joined pairwise into tokens by score,
//!   highest first, leftmost first among equals; a character with no token
//!   is spelled in byte tokens `<0xNN>`.
//! - [`Tokenizer::encode`] never adds BOS or EOS; [`Tokenizer::add_bos`]
//!   and [`Tokenizer::add_eos`] say whether the model wants them.
//! - Decoding maps tokens back to bytes exactly (`▁` back to a space,
//!   byte tokens to their byte); [`StreamDecoder`] yields text only once
//!   its UTF-8 is complete, so a character split across tokens is never
//!   shown in halves.
//! - Building from a file checks it: lengths agree, every merge names two
//!   tokens and a merged token that exist, scores are numbers, byte tokens
//!   spell a byte, special ids are in range. A problem is a
//!   [`TokenizerError`]; nothing panics on a bad file or on any input.
//!
//! Bytes that have no token (SmolLM2's vocabulary lacks 21 bytes that never
//! occur in its training text, such as 0x04 and 0xff) are dropped when
//! encoding, as Hugging Face's tokenizer (no `unk_token`) does; llama.cpp
//! fails on them instead. A SentencePiece vocabulary without a byte's
//! token gives the unknown token for it (dropped if there is none).

mod bytes;
mod pretokenize;
mod spm;

pub use bytes::byte_to_char;
pub use pretokenize::PreTokenizer;
pub use spm::{SpmVocabulary, SPACE_MARKER};

use pretokenize::Splitter;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use weft_gguf::{Gguf, GgufError};

/// A token id.
pub type TokenId = u32;

/// What a token is, from `tokenizer.ggml.token_type` (llama.cpp's
/// `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// 1: text, spelled in GPT-2 byte characters (gpt2) or with `▁` for
    /// a space (llama).
    Normal,
    /// 2: the unknown token.
    Unknown,
    /// 3: a control token such as `<|im_start|>` or `<start_of_turn>`:
    /// matched in text only when special tokens are parsed; decodes to its
    /// text only when special tokens are rendered.
    Control,
    /// 4: a user-defined token: always matched whole, decodes to its text.
    UserDefined,
    /// 5: unused (decodes to nothing in a SentencePiece vocabulary).
    Unused,
    /// 6: a byte token (`<0x41>`, SentencePiece vocabularies).
    Byte,
    /// 0 or anything else: undefined.
    Undefined,
}

impl TokenKind {
    fn from_code(code: i32) -> Self {
        match code {
            1 => Self::Normal,
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => Self::Undefined,
        }
    }
}

/// Whether special (control) tokens written in the text are tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    /// `<|im_start|>` in the text is token 1 (for prompts Weft builds).
    Parse,
    /// `<|im_start|>` in the text is ordinary text (for user input).
    AsText,
}

/// Why a tokenizer could not be built, or ids not decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// A metadata key is missing or has the wrong type.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// `tokenizer.ggml.model` is neither `gpt2` nor `llama`.
    #[error("unsupported-model: tokenizer model {model:?} is not supported (only \"gpt2\", byte-level BPE, and \"llama\", SentencePiece)")]
    UnsupportedModel {
        /// The model named.
        model: String,
    },
    /// `tokenizer.ggml.pre` names a pre-tokenizer this crate lacks.
    #[error("unsupported-pre-tokenizer: pre-tokenizer {pre:?} is not supported (smollm, gpt2 and their aliases are)")]
    UnsupportedPreTokenizer {
        /// The name in the file.
        pre: String,
    },
    /// The vocabulary is empty or larger than token ids can count.
    #[error("bad-vocabulary-size: vocabulary of {len} tokens is empty or too large")]
    BadVocabularySize {
        /// Its length.
        len: usize,
    },
    /// `token_type` does not have one entry per token.
    #[error("token-type-count: {types} token types for {tokens} tokens")]
    TokenTypeCount {
        /// Tokens.
        tokens: usize,
        /// Token types.
        types: usize,
    },
    /// `scores` does not have one entry per token (SentencePiece).
    #[error("score-count: {scores} scores for {tokens} tokens")]
    ScoreCount {
        /// Tokens.
        tokens: usize,
        /// Scores.
        scores: usize,
    },
    /// A token's score is NaN, which orders nothing (SentencePiece).
    #[error("bad-score: token {id} has score {score}, not a number")]
    BadScore {
        /// The token.
        id: TokenId,
        /// Its score.
        score: f32,
    },
    /// A byte token's text is not `<0xNN>` (SentencePiece).
    #[error("bad-byte-token: token {id} {text:?} is a byte token but not <0xNN>")]
    BadByteToken {
        /// The token.
        id: TokenId,
        /// Its text.
        text: String,
    },
    /// A merge is not two tokens separated by one space.
    #[error("malformed-merge: merge {index} {merge:?} is not \"left right\"")]
    MalformedMerge {
        /// Its rank.
        index: usize,
        /// Its text.
        merge: String,
    },
    /// A merge names a token (or makes one) the vocabulary lacks.
    #[error("merge-not-in-vocabulary: merge {index} {merge:?} uses or makes {token:?}, which is not in the vocabulary")]
    MergeNotInVocabulary {
        /// Its rank.
        index: usize,
        /// Its text.
        merge: String,
        /// The missing token.
        token: String,
    },
    /// A special-token id key points past the vocabulary.
    #[error("special-id-out-of-range: {key} = {id} is not a token (vocabulary of {vocab})")]
    SpecialIdOutOfRange {
        /// The metadata key.
        key: &'static str,
        /// The id.
        id: u32,
        /// The vocabulary size.
        vocab: usize,
    },
    /// An id to decode is not a token.
    #[error("unknown-id: token id {id} is not in the vocabulary of {vocab}")]
    UnknownId {
        /// The id.
        id: TokenId,
        /// The vocabulary size.
        vocab: usize,
    },
}

/// What a byte-level BPE vocabulary is made of, for [`Tokenizer::new`] (a
/// `gpt2`-model GGUF file's metadata gives it to [`Tokenizer::from_gguf`];
/// a SentencePiece one is an [`SpmVocabulary`]).
#[derive(Clone, Debug, Default)]
pub struct Vocabulary {
    /// Token strings, in id order (GPT-2 byte characters for normal tokens).
    pub tokens: Vec<String>,
    /// `llama_token_type` codes, one per token (empty: all normal).
    pub token_types: Vec<i32>,
    /// Merges `"left right"`, highest priority first.
    pub merges: Vec<String>,
    /// The pre-tokenizer.
    pub pre: Option<PreTokenizer>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<TokenId>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<TokenId>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unknown: Option<TokenId>,
    /// `tokenizer.ggml.padding_token_id`.
    pub padding: Option<TokenId>,
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos: bool,
}

#[derive(Clone, Debug)]
struct Token {
    text: String,
    bytes: Vec<u8>,
    kind: TokenKind,
}

/// A GGUF model's tokenizer: byte-level BPE or SentencePiece.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    tokens: Vec<Token>,
    ids: HashMap<String, TokenId>,
    /// Tokens cut out of text before BPE or SentencePiece, longest text
    /// first.
    specials: Vec<TokenId>,
    model: Model,
    bos: Option<TokenId>,
    eos: Option<TokenId>,
    unknown: Option<TokenId>,
    padding: Option<TokenId>,
    add_bos: bool,
    add_eos: bool,
}

/// What a [`Tokenizer`] runs on the text between special tokens.
#[derive(Clone, Debug)]
enum Model {
    /// `gpt2`.
    Bpe(Bpe),
    /// `llama`.
    Spm(spm::Spm),
}

/// The byte-level BPE half of a [`Tokenizer`].
#[derive(Clone, Debug)]
struct Bpe {
    /// (left, right) → (rank, merged).
    merges: HashMap<(TokenId, TokenId), (u32, TokenId)>,
    /// The token of each byte's GPT-2 character, if the vocabulary has it.
    byte_tokens: [Option<TokenId>; 256],
    splitter: Splitter,
}

impl Tokenizer {
    /// Build the tokenizer a GGUF file describes: byte-level BPE for
    /// `tokenizer.ggml.model = "gpt2"`, SentencePiece for `"llama"`.
    pub fn from_gguf(gguf: &Gguf) -> Result<Self, TokenizerError> {
        let model: &str = gguf.metadata("tokenizer.ggml.model")?;
        match model {
            "gpt2" => Self::bpe_from_gguf(gguf),
            "llama" => spm::from_gguf(gguf),
            _ => Err(TokenizerError::UnsupportedModel {
                model: model.into(),
            }),
        }
    }

    fn bpe_from_gguf(gguf: &Gguf) -> Result<Self, TokenizerError> {
        let pre_name: &str = gguf
            .metadata_opt("tokenizer.ggml.pre")?
            .unwrap_or("default");
        let pre = PreTokenizer::from_name(pre_name).ok_or_else(|| {
            TokenizerError::UnsupportedPreTokenizer {
                pre: pre_name.into(),
            }
        })?;
        let vocab = Vocabulary {
            tokens: gguf
                .metadata::<&[String]>("tokenizer.ggml.tokens")?
                .to_vec(),
            token_types: gguf
                .metadata_opt::<&[i32]>("tokenizer.ggml.token_type")?
                .unwrap_or_default()
                .to_vec(),
            merges: gguf
                .metadata::<&[String]>("tokenizer.ggml.merges")?
                .to_vec(),
            pre: Some(pre),
            bos: gguf.metadata_opt("tokenizer.ggml.bos_token_id")?,
            eos: gguf.metadata_opt("tokenizer.ggml.eos_token_id")?,
            unknown: gguf.metadata_opt("tokenizer.ggml.unknown_token_id")?,
            padding: gguf.metadata_opt("tokenizer.ggml.padding_token_id")?,
            add_bos: gguf
                .metadata_opt("tokenizer.ggml.add_bos_token")?
                .unwrap_or(false),
        };
        let mut tok = Self::new(vocab)?;
        tok.add_eos = gguf
            .metadata_opt("tokenizer.ggml.add_eos_token")?
            .unwrap_or(false);
        Ok(tok)
    }

    /// Build a byte-level BPE tokenizer from its parts (checked as
    /// [`Tokenizer::from_gguf`] checks a file; [`Tokenizer::new_spm`] is
    /// the SentencePiece one).
    pub fn new(vocab: Vocabulary) -> Result<Self, TokenizerError> {
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
        let byte_chars = bytes::byte_to_char();
        let mut ids = HashMap::with_capacity(n);
        let mut tokens = Vec::with_capacity(n);
        for (i, text) in vocab.tokens.into_iter().enumerate() {
            let kind = vocab
                .token_types
                .get(i)
                .map_or(TokenKind::Normal, |&c| TokenKind::from_code(c));
            let bytes = match kind {
                // Special and user text is stored as itself.
                TokenKind::Control | TokenKind::UserDefined | TokenKind::Unknown => {
                    text.as_bytes().to_vec()
                }
                _ => spelled_bytes(&text),
            };
            // A repeated string keeps its first id, as a lookup would.
            ids.entry(text.clone()).or_insert(i as TokenId);
            tokens.push(Token { text, bytes, kind });
        }
        let mut byte_tokens = [None; 256];
        for (b, c) in byte_chars.iter().enumerate() {
            byte_tokens[b] = ids.get(c.to_string().as_str()).copied();
        }

        let mut merges = HashMap::with_capacity(vocab.merges.len());
        for (index, merge) in vocab.merges.iter().enumerate() {
            let malformed = || TokenizerError::MalformedMerge {
                index,
                merge: merge.clone(),
            };
            let (left, right) = merge.split_once(' ').ok_or_else(malformed)?;
            if left.is_empty() || right.is_empty() || right.contains(' ') {
                return Err(malformed());
            }
            let lookup = |token: &str| {
                ids.get(token)
                    .copied()
                    .ok_or_else(|| TokenizerError::MergeNotInVocabulary {
                        index,
                        merge: merge.clone(),
                        token: token.into(),
                    })
            };
            let pair = (lookup(left)?, lookup(right)?);
            let merged = lookup(&format!("{left}{right}"))?;
            // The first (highest-priority) rank of a repeated pair wins.
            merges.entry(pair).or_insert((index as u32, merged));
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
            model: Model::Bpe(Bpe {
                merges,
                byte_tokens,
                splitter: Splitter::new(vocab.pre.unwrap_or(PreTokenizer::Gpt2)),
            }),
            bos,
            eos,
            unknown,
            padding,
            add_bos: vocab.add_bos,
            add_eos: false,
        })
    }

    /// Number of tokens.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// Beginning-of-sequence token, if the file names one.
    pub fn bos(&self) -> Option<TokenId> {
        self.bos
    }

    /// End-of-sequence token, if the file names one.
    pub fn eos(&self) -> Option<TokenId> {
        self.eos
    }

    /// Unknown token, if the file names one.
    pub fn unknown(&self) -> Option<TokenId> {
        self.unknown
    }

    /// Padding token, if the file names one.
    pub fn padding(&self) -> Option<TokenId> {
        self.padding
    }

    /// Whether the model expects a BOS token before a prompt
    /// (`tokenizer.ggml.add_bos_token`; false for SmolLM2, true for Gemma
    /// 3, true when a SentencePiece file does not say). [`Tokenizer::encode`]
    /// never adds one itself.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether the model expects an EOS token after a prompt
    /// (`tokenizer.ggml.add_eos_token`, false when the file does not say).
    /// [`Tokenizer::encode`] never adds one itself.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// The id of a token string (`token_id("<|im_end|>")`).
    pub fn token_id(&self, text: &str) -> Option<TokenId> {
        self.ids.get(text).copied()
    }

    /// A token's string as stored in the vocabulary.
    pub fn token_text(&self, id: TokenId) -> Option<&str> {
        self.tokens.get(id as usize).map(|t| t.text.as_str())
    }

    /// The bytes a token stands for (a control token: its text; a
    /// SentencePiece byte token: its byte).
    pub fn token_bytes(&self, id: TokenId) -> Option<&[u8]> {
        self.tokens.get(id as usize).map(|t| t.bytes.as_slice())
    }

    /// A token's kind.
    pub fn token_kind(&self, id: TokenId) -> Option<TokenKind> {
        self.tokens.get(id as usize).map(|t| t.kind)
    }

    /// Encode text to token ids (no BOS is added; see [`Tokenizer::add_bos`]).
    pub fn encode(&self, text: &str, special: Special) -> Vec<TokenId> {
        let mut out = Vec::new();
        let fragments = self.cut_specials(text, special);
        match &self.model {
            Model::Bpe(bpe) => {
                for fragment in fragments {
                    match fragment {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(t) => bpe
                            .splitter
                            .split(t, |piece| self.encode_piece(bpe, piece, &mut out)),
                    }
                }
            }
            Model::Spm(spm) => spm.encode(self, &fragments, &mut out),
        }
        out
    }

    /// llama.cpp's `tokenizer_st_partition`: for each special token,
    /// longest first, cut its occurrences out of the text fragments left.
    fn cut_specials<'t>(&self, text: &'t str, special: Special) -> Vec<Fragment<'t>> {
        let mut fragments = vec![Fragment::Text(text)];
        for &id in &self.specials {
            let token = &self.tokens[id as usize];
            let parse = match token.kind {
                TokenKind::UserDefined => true,
                _ => special == Special::Parse,
            };
            if !parse {
                continue;
            }
            let needle = token.text.as_str();
            let mut next = Vec::with_capacity(fragments.len());
            for fragment in fragments {
                let Fragment::Text(t) = fragment else {
                    next.push(fragment);
                    continue;
                };
                let mut rest = 0;
                for (at, _) in t.match_indices(needle) {
                    if at > rest {
                        next.push(Fragment::Text(&t[rest..at]));
                    }
                    next.push(Fragment::Token(id));
                    rest = at + needle.len();
                }
                if rest < t.len() {
                    next.push(Fragment::Text(&t[rest..]));
                }
            }
            fragments = next;
        }
        fragments
    }

    /// BPE on one piece: its bytes as GPT-2 characters, then merges by
    /// rank (lowest first; leftmost first among equal ranks), as
    /// llama.cpp's `llm_tokenizer_bpe_session` and Hugging Face's BPE do.
    fn encode_piece(&self, bpe: &Bpe, piece: &str, out: &mut Vec<TokenId>) {
        // The whole piece may be one token already.
        if let Some(&id) = self.ids.get(spell(piece).as_str()) {
            if self.tokens[id as usize].kind == TokenKind::Normal {
                out.push(id);
                return;
            }
        }
        let mut syms: Vec<Sym> = piece
            .bytes()
            .filter_map(|b| bpe.byte_tokens[b as usize])
            .map(|id| Sym {
                id,
                prev: None,
                next: None,
                alive: true,
            })
            .collect();
        let len = syms.len();
        for (i, s) in syms.iter_mut().enumerate() {
            s.prev = i.checked_sub(1);
            s.next = (i + 1 < len).then_some(i + 1);
        }
        let mut queue = BinaryHeap::new();
        let push = |queue: &mut BinaryHeap<_>, syms: &[Sym], left: usize, right: usize| {
            if let Some(&(rank, merged)) = bpe.merges.get(&(syms[left].id, syms[right].id)) {
                queue.push(Reverse(Candidate {
                    rank,
                    left,
                    right,
                    left_id: syms[left].id,
                    right_id: syms[right].id,
                    merged,
                }));
            }
        };
        for i in 1..len {
            push(&mut queue, &syms, i - 1, i);
        }
        while let Some(Reverse(c)) = queue.pop() {
            let (l, r) = (&syms[c.left], &syms[c.right]);
            // Stale: a side was merged away or changed since this was queued.
            if !l.alive
                || !r.alive
                || l.next != Some(c.right)
                || l.id != c.left_id
                || r.id != c.right_id
            {
                continue;
            }
            let after = syms[c.right].next;
            syms[c.right].alive = false;
            syms[c.left].id = c.merged;
            syms[c.left].next = after;
            if let Some(a) = after {
                syms[a].prev = Some(c.left);
                push(&mut queue, &syms, c.left, a);
            }
            if let Some(p) = syms[c.left].prev {
                push(&mut queue, &syms, p, c.left);
            }
        }
        out.extend(syms.iter().filter(|s| s.alive).map(|s| s.id));
    }

    /// Decode ids to bytes; `render` says whether control tokens show as
    /// their text. The bytes need not be UTF-8 (a cut can fall inside a
    /// character); see [`StreamDecoder`] for text.
    ///
    /// A SentencePiece vocabulary with `add_space_prefix` drops one leading
    /// space from the first token's text, the space encoding put there, as
    /// llama.cpp's `llama_detokenize` does. Only from the first token: after
    /// a leading BOS or other special token nothing is dropped, and the
    /// space encoding puts after each special token stays.
    /// [`StreamDecoder`] drops nothing: it shows continuations.
    pub fn decode(&self, ids: &[TokenId], render: Render) -> Result<Vec<u8>, TokenizerError> {
        let mut out = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            let piece = self.piece(id, render)?;
            let strip = i == 0 && matches!(&self.model, Model::Spm(s) if s.add_space_prefix);
            out.extend_from_slice(match piece {
                [b' ', rest @ ..] if strip => rest,
                _ => piece,
            });
        }
        Ok(out)
    }

    fn piece(&self, id: TokenId, render: Render) -> Result<&[u8], TokenizerError> {
        let t = self
            .tokens
            .get(id as usize)
            .ok_or(TokenizerError::UnknownId {
                id,
                vocab: self.tokens.len(),
            })?;
        // llama.cpp hides the unknown token too, but the gpt2 path has
        // always shown it; SentencePiece follows llama.cpp.
        let hidden = match t.kind {
            TokenKind::Control => true,
            TokenKind::Unknown => matches!(self.model, Model::Spm(_)),
            _ => false,
        };
        Ok(if hidden && render == Render::SkipSpecial {
            &[]
        } else {
            &t.bytes
        })
    }

    /// A decoder that turns ids into text as they come (for generation).
    pub fn stream_decoder(&self, render: Render) -> StreamDecoder<'_> {
        StreamDecoder {
            tokenizer: self,
            render,
            pending: Vec::new(),
        }
    }
}

/// Check a special-token id against a vocabulary of `n`.
fn checked_special(
    n: usize,
    key: &'static str,
    id: Option<TokenId>,
) -> Result<Option<TokenId>, TokenizerError> {
    match id {
        Some(id) if id as usize >= n => {
            Err(TokenizerError::SpecialIdOutOfRange { key, id, vocab: n })
        }
        _ => Ok(id),
    }
}

/// The tokens cut out of text before BPE or SentencePiece (control,
/// user-defined and unknown tokens with text), longest text first, then by
/// id: llama.cpp's `cache_special_tokens`.
fn special_cut_order(tokens: &[Token]) -> Vec<TokenId> {
    let mut specials: Vec<TokenId> = (0..tokens.len() as TokenId)
        .filter(|&i| {
            let t = &tokens[i as usize];
            !t.text.is_empty()
                && matches!(
                    t.kind,
                    TokenKind::Control | TokenKind::UserDefined | TokenKind::Unknown
                )
        })
        .collect();
    specials.sort_by_key(|&i| (Reverse(tokens[i as usize].text.len()), i));
    specials
}

/// How [`Tokenizer::decode`] shows control tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Render {
    /// As their text (`<|im_end|>`), like llama.cpp's `special = true`.
    Special,
    /// Not at all, like llama.cpp's `special = false` (for SentencePiece,
    /// the unknown token too).
    SkipSpecial,
}

enum Fragment<'t> {
    Text(&'t str),
    Token(TokenId),
}

struct Sym {
    id: TokenId,
    prev: Option<usize>,
    next: Option<usize>,
    alive: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    rank: u32,
    left: usize,
    right: usize,
    left_id: TokenId,
    right_id: TokenId,
    merged: TokenId,
}

/// A piece's bytes spelled in GPT-2 byte characters.
fn spell(piece: &str) -> String {
    let table = bytes::byte_to_char();
    piece.bytes().map(|b| table[b as usize]).collect()
}

/// The bytes a GPT-2-spelled token stands for; a character outside the
/// byte table (possible only in a malformed vocabulary) stands for its own
/// UTF-8, as llama.cpp decodes it.
fn spelled_bytes(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match bytes::char_to_byte(c) {
            Some(b) => out.push(b),
            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out
}

/// Turns token ids into text as they arrive, holding back an incomplete
/// UTF-8 sequence until the tokens that finish it come.
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    render: Render,
    pending: Vec<u8>,
}

impl StreamDecoder<'_> {
    /// Add one token; returns the text it completes (maybe empty). Bytes
    /// that can never become valid UTF-8 come out as U+FFFD.
    pub fn push(&mut self, id: TokenId) -> Result<String, TokenizerError> {
        self.pending
            .extend_from_slice(self.tokenizer.piece(id, self.render)?);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(
                        std::str::from_utf8(&self.pending[..valid]).expect("valid prefix"),
                    );
                    match e.error_len() {
                        // Incomplete at the end: wait for more.
                        None => {
                            self.pending.drain(..valid);
                            break;
                        }
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// End of stream: whatever is still held, lossily.
    pub fn finish(self) -> String {
        String::from_utf8_lossy(&self.pending).into_owned()
    }
}
