//! W^X: no mapping is ever rwx, and placed code is never writable.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{call, fork_child, mapping_holding, mapping_of, read_maps};
use crate::arch::return_u32;
use crate::{place, PlacedCode};

#[test]
fn rwx_scan_finds_no_rwx_mapping_while_a_second_thread_places_code() {
    let held: Vec<PlacedCode> = (0..16u32)
        .map(|i| place(&return_u32(0x5CA0_0000 + i)).unwrap())
        .collect();
    let stop = AtomicBool::new(false);
    let placed = AtomicUsize::new(0);
    let mut scans = 0usize;
    std::thread::scope(|s| {
        let placer = s.spawn(|| {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                n = n.wrapping_add(1);
                let code = place(&return_u32(n)).unwrap();
                assert_eq!(call(&code), n);
                placed.fetch_add(1, Ordering::Relaxed);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        // Scan until both sides did real work: many scans, many concurrent placements.
        while scans < 300 || placed.load(Ordering::Relaxed) < 300 {
            let maps = read_maps();
            let rwx: Vec<&str> = maps
                .iter()
                .filter(|m| m.perms.starts_with("rwx"))
                .map(|m| m.line.as_str())
                .collect();
            if !rwx.is_empty() {
                stop.store(true, Ordering::Relaxed);
                panic!("rwx mapping(s) while code is placed (scan {scans}): {rwx:#?}");
            }
            for code in &held {
                let m = mapping_of(&maps, code.as_ptr())
                    .cloned()
                    .unwrap_or_else(|| mapping_holding(code.as_ptr()));
                assert!(
                    m.perms.starts_with("r-x"),
                    "placed code not r-x: {}",
                    m.line
                );
            }
            scans += 1;
            if Instant::now() > deadline || placer.is_finished() {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let placed = placed.load(Ordering::Relaxed);
    assert!(
        scans >= 300 && placed >= 300,
        "too little concurrency: {scans} scans, {placed} placements"
    );
    for (i, code) in held.iter().enumerate() {
        assert_eq!(call(code), 0x5CA0_0000 + i as u32);
    }
}

#[test]
fn placed_code_shows_as_read_execute_private_in_proc_maps() {
    let code = place(&return_u32(1)).unwrap();
    let m = mapping_holding(code.as_ptr());
    assert_eq!(m.perms, "r-xp", "{}", m.line);
}

#[test]
fn write_fault_kills_forked_child_with_sigsegv() {
    let code = place(&return_u32(0x0000_BEEF)).unwrap();
    let target = code.as_ptr() as *mut u8;
    let status = fork_child(|| {
        // SAFETY: deliberately writes to read-execute memory; the resulting
        // SIGSEGV kills this forked child only, which is what is tested.
        unsafe { std::ptr::write_volatile(target, 0xC3) };
        0 // reached only if the write succeeded
    });
    assert!(
        libc::WIFSIGNALED(status),
        "the write did not fault: child exited with status {}",
        libc::WEXITSTATUS(status)
    );
    assert_eq!(libc::WTERMSIG(status), libc::SIGSEGV, "expected SIGSEGV");
    // The parent's copy is untouched.
    assert_eq!(call(&code), 0x0000_BEEF);
}

#[test]
fn placed_code_is_read_execute_by_the_os_protection_query() {
    let code = place(&return_u32(7)).unwrap();
    // region reads /proc/self/maps on Linux: reread as `mapping_holding` does.
    let r = (0..1000)
        .find_map(|_| region::query(code.as_ptr()).ok())
        .expect("placed code is mapped");
    assert_eq!(
        r.protection(),
        region::Protection::READ_EXECUTE,
        "placed code must be r-x, never writable: {r:?}"
    );
    drop(code);
}
