//! Test helpers: place emitted bytes with weft-jitmem and turn them into
//! callable function pointers.

#![allow(dead_code)]

use weft_jitmem::PlacedCode;

/// Places `bytes` read-execute, failing the test with the reason if the
/// host refuses.
pub fn place(bytes: &[u8]) -> PlacedCode {
    match weft_jitmem::place(bytes) {
        Ok(code) => code,
        Err(e) => panic!("weft_jitmem::place refused {} bytes: {e}", bytes.len()),
    }
}

/// Whether std reports every one of the named x86 features.
#[macro_export]
macro_rules! has_all {
    ($($name:tt),+) => { true $(&& std::arch::is_x86_feature_detected!($name))+ };
}
