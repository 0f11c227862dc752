//! Token ids pinned against an independent implementation, on a vocabulary
//! fixture that ships with the crate (so these always run).
//!
//! The fixture `fixtures/smollm2_vocab_subset.gguf` holds SmolLM2-135M's 17
//! control tokens, every byte character its vocabulary has, and the tokens
//! its first 800 merges make (1052 tokens, in their original order), with
//! the first 800 merges and the real file's tokenizer keys; it was written
//! by the `gguf` Python package 0.19's `GGUFWriter` (so it also checks this
//! reader against another writer).
//!
//! The pinned ids were computed once with Hugging Face `tokenizers` 0.23.3
//! (PyPI) built from the same tokens and merges with SmolLM2's pipeline:
//! `BPE(vocab, merges)`, pre-tokenizer `Sequence[Digits(individual_digits=True),
//! ByteLevel(add_prefix_space=False, use_regex=True)]`, the control tokens as
//! special added tokens. The third column encodes the text with the control
//! tokens left out of the tokenizer (they are then ordinary text). The tool
//! is not committed; the same table for the full vocabulary is in the
//! workspace's `tests/real_model.rs`.

use weft_gguf::Gguf;
use weft_tokenizer::{Render, Special, Tokenizer};

const FIXTURE: &[(&str, &[u32], &[u32])] = &[
    (
        "Hello, world!",
        &[56, 478, 95, 28, 905, 17],
        &[56, 478, 95, 28, 905, 17],
    ),
    (
        "The capital of France is Paris.",
        &[
            504, 265, 512, 269, 272, 282, 426, 98, 524, 314, 377, 280, 271, 30,
        ],
        &[
            504, 265, 512, 269, 272, 282, 426, 98, 524, 314, 377, 280, 271, 30,
        ],
    ),
    (
        " leading space and  double  spaces   \n\n trailing  ",
        &[
            1022, 274, 574, 590, 284, 216, 287, 279, 854, 216, 574, 387, 266, 333, 198, 198, 635,
            301, 274, 256,
        ],
        &[
            1022, 274, 574, 590, 284, 216, 287, 279, 854, 216, 574, 387, 266, 333, 198, 198, 635,
            301, 274, 256,
        ],
    ),
    (
        "Numbers: 1234567 and 3.14159, year 2024.",
        &[
            62, 382, 82, 366, 42, 216, 33, 34, 35, 36, 37, 38, 39, 284, 216, 35, 30, 33, 36, 33,
            37, 41, 28, 713, 216, 34, 32, 34, 36, 30,
        ],
        &[
            62, 382, 82, 366, 42, 216, 33, 34, 35, 36, 37, 38, 39, 284, 216, 35, 30, 33, 36, 33,
            37, 41, 28, 713, 216, 34, 32, 34, 36, 30,
        ],
    ),
    (
        "naïve café — déjà vu; emoji 🦀🙂; 日本語のテキスト",
        &[
            94, 81, 142, 124, 307, 1020, 86, 142, 119, 459, 238, 287, 142, 119, 90, 142, 250, 386,
            101, 43, 649, 95, 90, 89, 216, 187, 249, 116, 218, 187, 249, 243, 220, 43, 216, 177,
            241, 115, 177, 246, 122, 179, 120, 248, 174, 219, 123, 174, 221, 224, 174, 220, 251,
            174, 220, 134, 174, 221, 226,
        ],
        &[
            94, 81, 142, 124, 307, 1020, 86, 142, 119, 459, 238, 287, 142, 119, 90, 142, 250, 386,
            101, 43, 649, 95, 90, 89, 216, 187, 249, 116, 218, 187, 249, 243, 220, 43, 216, 177,
            241, 115, 177, 246, 122, 179, 120, 248, 174, 219, 123, 174, 221, 224, 174, 220, 251,
            174, 220, 134, 174, 221, 226,
        ],
    ),
    (
        "I'm sure they'll say it's what we've done, don't you'd?",
        &[
            57, 23, 93, 393, 257, 502, 23, 764, 262, 341, 357, 506, 732, 392, 23, 307, 287, 537,
            28, 287, 258, 982, 346, 23, 84, 47,
        ],
        &[
            57, 23, 93, 393, 257, 502, 23, 764, 262, 341, 357, 506, 732, 392, 23, 307, 287, 537,
            28, 287, 258, 982, 346, 23, 84, 47,
        ],
    ),
    (
        "tabs\tand\r\nwindows newlines\n\n\n",
        &[
            100, 369, 99, 197, 397, 201, 198, 103, 526, 323, 99, 725, 92, 884, 198, 198, 198,
        ],
        &[
            100, 369, 99, 197, 397, 201, 198, 103, 526, 323, 99, 725, 92, 884, 198, 198, 198,
        ],
    ),
    (
        "fn main() {\n    println!(\"{}\", x);\n}",
        &[
            86, 94, 283, 402, 1000, 216, 107, 472, 694, 591, 92, 94, 17, 24, 18, 107, 109, 1002,
            216, 104, 25, 43, 198, 109,
        ],
        &[
            86, 94, 283, 402, 1000, 216, 107, 472, 694, 591, 92, 94, 17, 24, 18, 107, 109, 1002,
            216, 104, 25, 43, 198, 109,
        ],
    ),
    (
        "a\u{301} ½ Ⅻ ٣ \u{a0}nbsp\u{a0}\u{a0}x",
        &[
            81, 151, 219, 216, 141, 138, 216, 173, 223, 121, 216, 164, 113, 216, 141, 250, 94, 82,
            99, 96, 141, 250, 141, 250, 104,
        ],
        &[
            81, 151, 219, 216, 141, 138, 216, 173, 223, 121, 216, 164, 113, 216, 141, 250, 94, 82,
            99, 96, 141, 250, 141, 250, 104,
        ],
    ),
    ("   ", &[333], &[333]),
    ("", &[], &[]),
    (
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        &[
            1, 376, 259, 198, 71, 962, 314, 216, 34, 27, 34, 47, 2, 198, 1, 520, 363, 403, 198,
        ],
        &[
            44, 108, 306, 79, 302, 434, 108, 46, 376, 259, 198, 71, 962, 314, 216, 34, 27, 34, 47,
            44, 108, 306, 79, 486, 108, 46, 198, 44, 108, 306, 79, 302, 434, 108, 46, 520, 363,
            403, 198,
        ],
    ),
    (
        "ctrl\u{4}byte and ÿ",
        &[296, 98, 92, 82, 105, 676, 284, 216, 142, 140],
        &[296, 98, 92, 82, 105, 676, 284, 216, 142, 140],
    ),
];

fn fixture() -> Tokenizer {
    let bytes = include_bytes!("fixtures/smollm2_vocab_subset.gguf");
    let gguf = Gguf::from_bytes(bytes.to_vec()).expect("fixture parses");
    Tokenizer::from_gguf(&gguf).expect("fixture builds a tokenizer")
}

#[test]
fn fixture_vocabulary_encodes_as_hugging_face_tokenizers_does() {
    let tok = fixture();
    assert_eq!(tok.vocab_size(), 1052);
    for (text, with_special, as_text) in FIXTURE {
        assert_eq!(
            tok.encode(text, Special::Parse),
            *with_special,
            "{text:?} parsing specials"
        );
        assert_eq!(
            tok.encode(text, Special::AsText),
            *as_text,
            "{text:?} specials as text"
        );
    }
}

#[test]
fn fixture_ids_decode_back_to_the_text_less_untokenisable_bytes() {
    let tok = fixture();
    for (text, with_special, as_text) in FIXTURE {
        // Byte 0x04 has no token in SmolLM2's vocabulary and is dropped.
        let want = text.replace('\u{4}', "");
        let got = tok
            .decode(with_special, Render::Special)
            .expect("ids in range");
        assert_eq!(String::from_utf8(got).expect("utf-8"), want);
        let got = tok
            .decode(as_text, Render::SkipSpecial)
            .expect("ids in range");
        assert_eq!(String::from_utf8(got).expect("utf-8"), want);
    }
}

#[test]
fn fixture_special_ids_come_from_the_file() {
    let tok = fixture();
    assert_eq!(
        (tok.bos(), tok.eos(), tok.unknown(), tok.padding()),
        (Some(1), Some(2), Some(0), Some(2))
    );
    assert!(!tok.add_bos());
    assert_eq!(tok.token_id("<|im_end|>"), Some(2));
    assert_eq!(
        tok.decode(&[1, 2], Render::SkipSpecial).expect("in range"),
        b""
    );
}
