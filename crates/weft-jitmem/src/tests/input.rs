//! Bad input gets typed errors, never a panic.

use crate::arch::{self, Body};
use crate::{place, place_with, round_to_pages, PlaceError, PlaceOptions};

#[test]
fn empty_code_is_refused_with_empty_error() {
    assert_eq!(place(&[]).unwrap_err(), PlaceError::Empty);
    assert_eq!(
        place_with(&[], &PlaceOptions { seal: true }).unwrap_err(),
        PlaceError::Empty
    );
}

#[test]
fn too_large_when_rounding_to_pages_overflows_usize() {
    for len in [usize::MAX, usize::MAX - 4094] {
        assert_eq!(
            round_to_pages(len, 4096),
            Err(PlaceError::TooLarge {
                len,
                page_size: 4096
            })
        );
    }
}

#[test]
fn too_large_when_rounded_length_exceeds_isize_max() {
    // isize::MAX itself is a legal slice length, but rounding it up to pages
    // leaves the address space a mapping may span.
    let len = isize::MAX as usize;
    assert_eq!(
        round_to_pages(len, 16384),
        Err(PlaceError::TooLarge {
            len,
            page_size: 16384
        })
    );
    let msg = round_to_pages(len, 4096).unwrap_err().to_string();
    assert!(msg.starts_with("place-too-large"), "{msg}");
}

#[test]
fn rounding_to_pages_rounds_up_and_keeps_exact_multiples() {
    assert_eq!(round_to_pages(1, 4096), Ok(4096));
    assert_eq!(round_to_pages(4096, 4096), Ok(4096));
    assert_eq!(round_to_pages(4097, 4096), Ok(8192));
    assert_eq!(
        round_to_pages(isize::MAX as usize - 4095, 4096),
        Ok(isize::MAX as usize - 4095)
    );
}

#[test]
fn nonce_function_encodings_match_llvm_mc() {
    // Expected bytes from `llvm-mc -show-encoding` (x86-64 and AArch64).
    let (buf, len) = arch::encode(Body::Return(0x1234_5678)).expect("x86-64 or arm64 host");
    let (trap, trap_len) = arch::encode(Body::Trap).unwrap();
    let (hang, hang_len) = arch::encode(Body::Hang).unwrap();
    if cfg!(target_arch = "x86_64") {
        assert_eq!(&buf[..len], &[0xB8, 0x78, 0x56, 0x34, 0x12, 0xC3]); // mov eax, imm32; ret
        assert_eq!(&trap[..trap_len], &[0x0F, 0x0B]); // ud2
        assert_eq!(&hang[..hang_len], &[0xEB, 0xFE]); // jmp .
    } else {
        assert_eq!(
            &buf[..len],
            &[0x00, 0xCF, 0x8A, 0x52, 0x80, 0x46, 0xA2, 0x72, 0xC0, 0x03, 0x5F, 0xD6] // movz; movk; ret
        );
        assert_eq!(&trap[..trap_len], &[0x00, 0x00, 0x20, 0xD4]); // brk #0
        assert_eq!(&hang[..hang_len], &[0x00, 0x00, 0x00, 0x14]); // b .
    }
}
