//! Gemma 3 270M's SentencePiece tokenizer against llama.cpp's own ids.
//!
//! The constant below is llama.cpp's output, not Weft's: `cargo xtask peer`
//! builds the peer's `llama-tokenize` (llama.cpp as vendored in
//! llama-cpp-python 0.3.36), and `cargo xtask peer tokenizer-references`
//! runs it once per text on the Gemma file (`--stdin --ids --no-escape
//! --log-disable`) and prints the constant, pasted here unchanged but for
//! `cargo fmt`. llama-tokenize adds BOS (the file's `add_bos_token` is
//! true) and parses special tokens (its default), so Weft's side is BOS
//! then `encode(text, Special::Parse)`.
//!
//! The test needs the model in the cache (`cargo xtask fetch-model
//! gemma3-270m`), so `cargo test` reports it as ignored; `.ci/run` runs it
//! with `--include-ignored` after fetching, and a missing model is then a
//! failure that says how to fetch it.

use weft_gguf::Gguf;
use weft_tokenizer::{Render, Special, Tokenizer, TokenizerError};

const NO_GEMMA: &str =
    "the Gemma 3 270M model is not in the cache: run `cargo xtask fetch-model gemma3-270m` first";

#[test]
#[ignore = "needs the Gemma 3 270M model (cargo xtask fetch-model gemma3-270m)"]
fn gemma3_encodes_as_llama_cpp_and_decodes_back() {
    let path = weft_fetch::cached(&weft_fetch::GEMMA3_270M).expect(NO_GEMMA);
    let g = Gguf::open(&path).expect("the cached Gemma file parses");
    let started = std::time::Instant::now();
    let tok = Tokenizer::from_gguf(&g).expect("Gemma's SentencePiece tokenizer builds");
    eprintln!("built the Gemma tokenizer in {:?}", started.elapsed());
    assert_eq!(tok.vocab_size(), 262_144);
    assert_eq!(
        (tok.bos(), tok.eos(), tok.unknown(), tok.padding()),
        (Some(2), Some(1), Some(3), Some(0))
    );
    assert!(tok.add_bos());
    assert!(!tok.add_eos());
    assert_eq!(tok.token_id("<start_of_turn>"), Some(105));
    assert_eq!(tok.token_id("<end_of_turn>"), Some(106));
    assert!(LLAMA_CPP_GEMMA3_IDS.len() >= 50);

    let mut wrong = Vec::new();
    for &(text, want) in LLAMA_CPP_GEMMA3_IDS {
        let mut ids = vec![tok.bos().expect("Gemma has a BOS token")];
        ids.extend(tok.encode(text, Special::Parse));
        if ids != want {
            wrong.push(format!(
                "{text:?}\n  llama.cpp {want:?}\n  weft      {ids:?}"
            ));
            continue;
        }
        // Without the BOS, the ids decode to the text, control tokens
        // shown; Gemma has no space prefix to drop. Only a literal `▁`
        // (U+2581) does not come back: SentencePiece reads it as a space.
        let back = tok
            .decode(&ids[1..], Render::Special)
            .expect("ids in range");
        let back = String::from_utf8(back).expect("the text was UTF-8");
        if back != text.replace('\u{2581}', " ") {
            wrong.push(format!("{text:?} decodes to {back:?}"));
        }
        // Streaming, token by token, gives the same text.
        let mut stream = tok.stream_decoder(Render::Special);
        let mut streamed = String::new();
        for &id in &ids[1..] {
            streamed.push_str(&stream.push(id).expect("in range"));
        }
        streamed.push_str(&stream.finish());
        if streamed != back {
            wrong.push(format!("{text:?} streams as {streamed:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} texts differ from llama.cpp:\n{}",
        wrong.len(),
        LLAMA_CPP_GEMMA3_IDS.len(),
        wrong.join("\n")
    );

    // A 1000-character prompt (every script above, repeated) encodes in
    // time linear in its length, not in the vocabulary.
    let long: String = LLAMA_CPP_GEMMA3_IDS
        .iter()
        .flat_map(|(t, _)| t.chars())
        .cycle()
        .take(1000)
        .collect();
    let started = std::time::Instant::now();
    let ids = tok.encode(&long, Special::Parse);
    eprintln!(
        "encoded 1000 characters to {} tokens in {:?}",
        ids.len(),
        started.elapsed()
    );
    let back = tok.decode(&ids, Render::Special).expect("in range");
    assert_eq!(
        String::from_utf8(back).expect("utf-8"),
        long.replace('\u{2581}', " ")
    );

    // Rendering without specials hides control tokens only. (The ids are
    // the pinned `<bos><start_of_turn>user\nHi<end_of_turn>` case's,
    // without its two BOS tokens.)
    let ids = tok.encode("<start_of_turn>user\nHi<end_of_turn>", Special::Parse);
    assert_eq!(ids, [105, 2364, 107, 10979, 106]);
    assert_eq!(
        tok.decode(&ids, Render::SkipSpecial).expect("ok"),
        b"user\nHi"
    );
    assert!(matches!(
        tok.decode(&[262_144], Render::Special),
        Err(TokenizerError::UnknownId {
            id: 262_144,
            vocab: 262_144
        })
    ));
}

// `cargo xtask peer tokenizer-references`: llama.cpp (llama-cpp-python 0.3.36's vendored copy), llama-tokenize --ids on gemma-3-270m-q4_k_m.gguf: BOS added as the model asks, special tokens parsed (the tool's default).
const LLAMA_CPP_GEMMA3_IDS: &[(&str, &[u32])] = &[
    ("", &[2]),
    ("a", &[2, 236746]),
    (" ", &[2, 236743]),
    ("  ", &[2, 138]),
    ("    ", &[2, 140]),
    ("\n", &[2, 107]),
    ("\r\n\r\n", &[2, 251, 107, 251, 107]),
    ("Hello, world!", &[2, 9259, 236764, 1902, 236888]),
    ("The capital of France is", &[2, 818, 5279, 529, 7001, 563]),
    (" leading space", &[2, 5830, 2557]),
    ("trailing space ", &[2, 136697, 2557, 236743]),
    ("  two leading spaces and two trailing  ", &[2, 138, 13498, 5830, 9952, 532, 1156, 45330, 138]),
    ("double  space and   triple   spaces", &[2, 7902, 138, 5780, 532, 139, 153460, 139, 35220]),
    ("\ttab\tseparated\tvalues\t", &[2, 255968, 4823, 255968, 74010, 255968, 7558, 255968]),
    ("line one\nline two\n", &[2, 1257, 886, 107, 1257, 1156, 107]),
    ("\n\n\nthree newlines first", &[2, 109, 19891, 861, 8721, 1171]),
    ("mixed \t \n whitespace \r\n CRLF", &[2, 63258, 236743, 255968, 236743, 107, 118364, 236743, 251, 107, 174055, 236811]),
    ("trailing newline\n", &[2, 136697, 100837, 107]),
    ("no-break\u{a0}space and zero\u{200b}width\u{feff}marks", &[2, 1904, 236772, 7284, 432, 398, 5780, 532, 5743, 237141, 2690, 237922, 16151]),
    ("def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n", &[2, 2063, 10779, 78113, 236769, 236749, 1473, 107, 140, 584, 538, 655, 236743, 236778, 236787, 107, 144, 2060, 538, 107, 140, 2060, 10779, 78113, 236769, 236749, 753, 236743, 236770, 236768, 900, 10779, 78113, 236769, 236749, 753, 236743, 236778, 236768, 107]),
    ("fn main() { println!(\"{}\", 1 + 2); }", &[2, 15059, 1689, 825, 642, 32374, 183228, 236743, 236770, 900, 236743, 236778, 626, 682]),
    ("for (int i = 0; i < 10; ++i) {\n\tsum += a[i];\n}", &[2, 1708, 568, 720, 858, 578, 236743, 236771, 236793, 858, 655, 236743, 236770, 236771, 236793, 12215, 236747, 236768, 642, 107, 255968, 2330, 3323, 496, 236840, 236747, 2312, 107, 236783]),
    ("<div class=\"x\">&amp;</div>", &[2, 236820, 1928, 1012, 718, 236781, 40697, 1414, 236793, 235]),
    ("SELECT * FROM users WHERE id = 42;", &[2, 12874, 808, 10912, 5089, 17347, 1846, 578, 236743, 236812, 236778, 236793]),
    ("https://example.com/path?query=1&x=y#frag user@example.com", &[2, 2574, 1411, 8358, 236761, 854, 236786, 2337, 236881, 3278, 236784, 236770, 236880, 236781, 236784, 236762, 236865, 45265, 2430, 236940, 8358, 236761, 854]),
    ("Numbers: 0 1 12 123 1234 12345 3.14159 -2.5e10", &[2, 37091, 236787, 236743, 236771, 236743, 236770, 236743, 236770, 236778, 236743, 236770, 236778, 236800, 236743, 236770, 236778, 236800, 236812, 236743, 236770, 236778, 236800, 236812, 236810, 236743, 236800, 236761, 236770, 236812, 236770, 236810, 236819, 753, 236778, 236761, 236810, 236744, 236770, 236771]),
    ("1,000,000.00 on 2024-12-07 at 23:59:59", &[2, 236770, 236764, 236771, 236771, 236771, 236764, 236771, 236771, 236771, 236761, 236771, 236771, 580, 236743, 236778, 236771, 236778, 236812, 236772, 236770, 236778, 236772, 236771, 236832, 657, 236743, 236778, 236800, 236787, 236810, 236819, 236787, 236810, 236819]),
    ("!!!???...,,,;;;:::", &[2, 11145, 31237, 30270, 17930, 42914, 236793, 51203]),
    ("----====____****~~~~", &[2, 1040, 2119, 3557, 1892, 40100]),
    ("\"quoted\" 'single' `backtick` (paren) [bracket] {brace}", &[2, 236775, 148758, 236775, 756, 18999, 236789, 2165, 1942, 37268, 236929, 568, 18919, 236768, 870, 47536, 236842, 642, 31765, 236783]),
    ("it's, don't, we'll, they're, I'd", &[2, 509, 236789, 236751, 236764, 1537, 236789, 236745, 236764, 692, 236789, 859, 236764, 901, 236789, 500, 236764, 564, 236789, 236753]),
    ("ALL CAPS and lowercase and MiXeD cAsE", &[2, 7602, 182027, 532, 67505, 532, 14402, 109299, 236796, 505, 2205, 236788]),
    ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", &[2, 128820, 128820, 128820, 128820, 128820]),
    ("naïve café — déjà vu", &[2, 1789, 238527, 560, 33443, 2192, 29234, 11042]),
    ("Größe, Straße, Übermaß", &[2, 9322, 237001, 16756, 236764, 80176, 236764, 30668, 126987]),
    ("ÀÉÎÕÜ àéîõü ñ ç", &[2, 238974, 237642, 239259, 241985, 238194, 1608, 236859, 237411, 237391, 236959, 131079, 5436]),
    ("Привет, мир! Как дела?", &[2, 116130, 236764, 58562, 236888, 30478, 22633, 236881]),
    ("Καλημέρα κόσμε", &[2, 190295, 23962, 20961, 9719, 150665, 16115]),
    ("日本語のテキストを書きます。", &[2, 94951, 236945, 95830, 167787, 29871, 236924]),
    ("中文分词测试：你好，世界！", &[2, 55041, 237237, 239275, 30203, 237184, 144626, 236900, 12811, 237354]),
    ("한국어 문장입니다.", &[2, 114216, 237430, 16950, 237851, 15245, 236761]),
    ("مرحبا بالعالم", &[2, 236873, 150345, 107602, 17193]),
    ("שלום עולם", &[2, 82110, 42737, 11173, 87859]),
    ("नमस\u{94d}त\u{947} द\u{941}निया", &[2, 226767, 19975]),
    ("สว\u{e31}สด\u{e35}ชาวโลก", &[2, 49366, 138863, 95266]),
    ("emoji 🦀🙂👍🏽 and 👨\u{200d}👩\u{200d}👧\u{200d}👦 family", &[2, 67906, 236743, 248714, 240731, 240493, 242713, 532, 236743, 243874, 237243, 243767, 237243, 244814, 237243, 244990, 2523]),
    ("🏳\u{fe0f}\u{200d}🌈 flags 🇫🇷🇯🇵", &[2, 248177, 238178, 237243, 243712, 22680, 236743, 246598, 242644, 247994, 245707]),
    ("math ∑ ∫ √ ≤ ≥ ≠ ∞ π", &[2, 747, 76689, 71999, 40370, 38010, 57846, 193600, 95713, 4609]),
    ("control bytes \u{1}\u{7}\u{1b}[0m and \u{7f}", &[2, 8607, 17234, 236743, 249732, 245, 27648, 236771, 236757, 532, 236743, 251541]),
    ("▁a literal lower one eighth block▁", &[2, 496, 37087, 3718, 886, 35186, 3355, 236743]),
    ("<start_of_turn>user\n", &[2, 105, 2364, 107]),
    ("<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n", &[2, 105, 2364, 107, 3689, 563, 236743, 236778, 236862, 236778, 236881, 106, 107, 105, 4368, 107]),
    ("<bos><start_of_turn>user\nHi<end_of_turn>", &[2, 2, 105, 2364, 107, 10979, 106]),
    ("text <end_of_turn> in the middle", &[2, 1005, 236743, 106, 528, 506, 6029]),
    ("<start_of_turn", &[2, 236820, 3041, 236779, 1340, 236779, 887]),
    ("<start_of_image>[multimodal]<end_of_image>", &[2, 255999, 5, 256000]),
    ("<unused0> <mask> <pad> <eos>", &[2, 6, 236743, 4, 236743, 0, 236743, 1]),
    ("<|im_start|>user\nanother model's tokens<|im_end|>", &[2, 236820, 236909, 548, 236779, 3041, 111038, 2364, 107, 51208, 2028, 236789, 236751, 21739, 236820, 236909, 548, 236779, 643, 111038]),
    ("The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs! How vexingly quick daft zebras jump; the five boxing wizards jump quickly.", &[2, 818, 3823, 8864, 37423, 38167, 1024, 506, 31770, 4799, 236761, 13079, 1041, 3673, 607, 3493, 25400, 37059, 192776, 236888, 2088, 105819, 11542, 3823, 1776, 765, 8191, 17443, 9212, 236793, 506, 3493, 45009, 193384, 9212, 6077, 236761]),
];
