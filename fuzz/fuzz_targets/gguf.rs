//! Any bytes: `Gguf::from_bytes` never panics or reads out of bounds, and
//! for a file it accepts, every tensor it lists can be fetched and
//! converted (or refused by name) without panicking. Run with
//! `cargo +nightly fuzz run gguf` from the repo root.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(gguf) = weft_gguf::Gguf::from_bytes(data.to_vec()) else {
        return;
    };
    for (_, v) in gguf.metadata_entries() {
        let _ = v.type_description();
    }
    for info in gguf.tensor_infos() {
        if let Ok(t) = gguf.tensor(info.name()) {
            assert_eq!(Some(t.bytes().len() as u64), info.n_bytes());
            let _ = t.to_f32();
            let _ = t.to_q8_0();
        }
    }
    if let Ok(tok) = weft_tokenizer::Tokenizer::from_gguf(&gguf) {
        let ids = tok.encode("Hello <|im_start|> 123", weft_tokenizer::Special::Parse);
        let _ = tok.decode(&ids, weft_tokenizer::Render::Special);
    }
});
