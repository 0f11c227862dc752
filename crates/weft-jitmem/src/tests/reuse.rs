//! Icache coherence: new bytes at a just-freed address run as the new bytes,
//! on the placing thread and on another thread that ran the old ones.

use std::sync::{mpsc, Arc};

use super::{call, emulated_arm64, note};
use crate::arch::{nop, return_u32};
use crate::{place, place_at, PlaceOptions, PlacedCode};

/// Function `i` of a sequence: returns `base + i`, sometimes after a few nops,
/// so the instruction at a given offset keeps changing kind, not just value.
/// Says what an emulated run does not prove.
fn note_if_emulated(test: &str) {
    if emulated_arm64() {
        note(&format!(
            "{test}: arm64 under an emulator (x86 /proc/cpuinfo seen by an arm64 process): \
             the emulator keeps instruction fetch coherent by itself, so this run proves \
             address reuse and that the dc/ic/membarrier path runs cleanly, not that it is needed"
        ));
    }
}

fn variant(base: u32, i: u32) -> (u32, Vec<u8>) {
    let want = base.wrapping_add(i);
    let mut bytes: Vec<u8> = nop().repeat((i % 5) as usize);
    bytes.extend_from_slice(&return_u32(want));
    (want, bytes)
}

#[test]
fn reused_address_runs_the_new_bytes_after_drop() {
    note_if_emulated("reused_address_runs_the_new_bytes_after_drop");
    let first = place(&return_u32(0xAD00_0000)).unwrap();
    assert_eq!(call(&first), 0xAD00_0000);
    let addr = first.as_ptr() as *mut u8;
    drop(first);

    let rounds = 200;
    let mut reused = 0;
    for i in 1..=rounds {
        let (want, bytes) = variant(0xAD00_0000, i);
        // A hint, not MAP_FIXED: the address comes back only if drop really unmapped it.
        let code = place_at(&bytes, &PlaceOptions::default(), addr).unwrap();
        if code.as_ptr() == addr.cast_const() {
            reused += 1;
        }
        assert_eq!(
            call(&code),
            want,
            "round {i} at {:p} ran stale bytes",
            code.as_ptr()
        );
    }
    // Other tests map concurrently and may take the address now and then.
    assert!(
        reused >= rounds / 2,
        "address reused only {reused} of {rounds} times"
    );
}

#[test]
fn reused_address_runs_the_new_bytes_on_another_thread() {
    note_if_emulated("reused_address_runs_the_new_bytes_on_another_thread");
    let (to_runner, jobs) = mpsc::channel::<Arc<PlacedCode>>();
    let (to_main, results) = mpsc::channel::<u32>();
    let runner = std::thread::spawn(move || {
        for code in jobs {
            let got = call(&code);
            drop(code); // before answering, so main's drop frees the address
            to_main.send(got).unwrap();
        }
    });

    let mut addr = std::ptr::null_mut();
    let rounds = 100;
    let mut reused = 0;
    for i in 0..rounds {
        let (want, bytes) = variant(0xCAFE_0000, i);
        let code = Arc::new(place_at(&bytes, &PlaceOptions::default(), addr).unwrap());
        if code.as_ptr() == addr.cast_const() {
            reused += 1;
        }
        addr = code.as_ptr() as *mut u8;
        to_runner.send(Arc::clone(&code)).unwrap();
        assert_eq!(
            results.recv().unwrap(),
            want,
            "round {i}: the other thread ran stale bytes"
        );
        // The runner dropped its clone before answering: this unmaps.
        drop(code);
    }
    drop(to_runner);
    runner.join().unwrap();
    assert!(
        reused >= rounds / 2,
        "address reused only {reused} of {rounds} times"
    );
}
