//! Placement: the bytes given are the bytes that run.

use std::sync::Arc;

use super::{call, fork_child};
use crate::arch::{nop, return_u32};
use crate::{place, probe, PlacedCode};

#[test]
fn placed_code_runs_and_returns_its_value() {
    let code = place(&return_u32(0xC0DE_0001)).unwrap();
    assert_eq!(call(&code), 0xC0DE_0001);
    assert!(!code.is_sealed());
    assert!(!code.is_empty());
}

#[test]
fn placed_bytes_read_back_identical_and_tail_traps() {
    let bytes = return_u32(0x0BAD_F00D);
    let code = place(&bytes).unwrap();
    assert_eq!(code.bytes(), &bytes[..]);
    assert_eq!(code.len(), bytes.len());
    let page = probe().unwrap().page_size;
    assert_eq!(code.mapped_len(), page);
    assert_eq!(
        code.as_ptr() as usize % page,
        0,
        "placements are page-aligned"
    );
    // SAFETY: the whole mapping (mapped_len bytes) is readable.
    let tail = unsafe {
        std::slice::from_raw_parts(
            code.as_ptr().add(code.len()),
            code.mapped_len() - code.len(),
        )
    };
    // x86-64: int3; arm64: zero words are `udf #0`.
    let filler = if cfg!(target_arch = "x86_64") {
        0xCC
    } else {
        0x00
    };
    assert!(
        tail.iter().all(|&b| b == filler),
        "tail past the code must trap if run"
    );
}

#[test]
fn code_spanning_several_pages_runs_to_its_last_instruction() {
    let page = probe().unwrap().page_size;
    let ret = return_u32(0x5EC0_0003);
    let nops = (3 * page + 5) / nop().len();
    let mut bytes: Vec<u8> = nop()
        .iter()
        .copied()
        .cycle()
        .take(nops * nop().len())
        .collect();
    bytes.extend_from_slice(&ret);
    let code = place(&bytes).unwrap();
    assert_eq!(code.mapped_len(), 4 * page);
    assert_eq!(call(&code), 0x5EC0_0003);
    // The last page is sealed like the first: a write to its last byte faults.
    let last = code.as_ptr().wrapping_add(code.len() - 1) as *mut u8;
    let status = fork_child(|| {
        // SAFETY: deliberately writes to read-execute memory; the SIGSEGV
        // kills this forked child only, which is what is tested.
        unsafe { std::ptr::write_volatile(last, 0) };
        0 // reached only if the write succeeded
    });
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV,
        "a write to the last page did not fault (wait status {status:#x})"
    );
    assert_eq!(call(&code), 0x5EC0_0003);
}

#[test]
fn many_placements_each_keep_their_own_bytes() {
    let codes: Vec<(u32, PlacedCode)> = (0..64u32)
        .map(|i| {
            (
                0xA11C_0000 + i,
                place(&return_u32(0xA11C_0000 + i)).unwrap(),
            )
        })
        .collect();
    for (want, code) in &codes {
        assert_eq!(call(code), *want);
    }
}

#[test]
fn placed_code_is_send_and_sync_and_runs_on_another_thread() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<PlacedCode>();
    let code = Arc::new(place(&return_u32(0x7777_0004)).unwrap());
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let code = Arc::clone(&code);
            std::thread::spawn(move || call(&code))
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), 0x7777_0004);
    }
    // Placed on another thread, run here.
    let moved = std::thread::spawn(|| place(&return_u32(0x7777_0005)).unwrap())
        .join()
        .unwrap();
    assert_eq!(call(&moved), 0x7777_0005);
}
