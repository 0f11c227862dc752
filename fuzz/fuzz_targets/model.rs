//! Any bytes a GGUF reader accepts: the llama loader either builds the
//! model's configuration and weights or refuses by name, at once — no
//! panic, no allocation sized by metadata the tensors do not back. The
//! hostile files of weft-llm's `load` tests are the cases it must keep
//! refusing. Run with `cargo +nightly fuzz run model` from the repo root.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(gguf) = weft_gguf::Gguf::from_bytes(data.to_vec()) else {
        return;
    };
    if weft_llm::load::config(&gguf, 64).is_ok() {
        let _ = weft_llm::load::weights(&gguf, 64, 1);
    }
});
