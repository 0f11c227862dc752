//! Any word: `decode` never panics, and a word it claims re-encodes to itself
//! and prints. Run with `cargo +nightly fuzz run decode` from the repo root.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for chunk in data.chunks_exact(4) {
        let word = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        if let Some(inst) = weft_a64::decode(word) {
            assert_eq!(inst.encode(), Ok(word), "{inst}");
            let _ = inst.to_string();
        }
    }
});
