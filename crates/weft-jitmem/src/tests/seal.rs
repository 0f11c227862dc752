//! Sealing with mseal: off by default, reported truthfully, enforced when on.

use super::{call, errno, fork_child};
use crate::arch::return_u32;
use crate::{place, place_with, probe, Errno, PlaceError, PlaceOptions, SealSupport};

#[test]
fn seal_is_off_by_default() {
    assert!(!PlaceOptions::default().seal);
    let code = place(&return_u32(0x5EA1_0000)).unwrap();
    assert!(!code.is_sealed());
}

#[test]
fn probe_mseal_report_matches_a_direct_mseal_attempt() {
    let report = probe().unwrap();
    // Seal a scratch page in a child, so this process keeps no sealed page.
    let status = fork_child(|| {
        // SAFETY: a fresh anonymous page, then mseal(2) on exactly it.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                return 255;
            }
            if libc::syscall(462, p as usize, 4096usize, 0usize) == 0 {
                0
            } else {
                errno()
            }
        }
    });
    assert!(libc::WIFEXITED(status));
    let direct = match libc::WEXITSTATUS(status) {
        0 => SealSupport::Supported,
        255 => panic!("mmap failed in the child"),
        e => SealSupport::Unsupported { errno: Errno(e) },
    };
    assert_eq!(report.mseal, direct);
}

#[test]
fn seal_true_seals_code_against_mprotect_and_munmap_or_is_seal_unsupported() {
    let report = probe().unwrap();
    match place_with(&return_u32(0x5EA1_0001), &PlaceOptions { seal: true }) {
        Ok(code) => {
            assert_eq!(report.mseal, SealSupport::Supported);
            assert!(code.is_sealed());
            assert_eq!(call(&code), 0x5EA1_0001);
            let p = code.as_ptr() as *mut libc::c_void;
            // SAFETY: both calls must be refused on sealed memory; if one
            // succeeded the test fails before anything runs the code again.
            let (protect, protect_errno, unmap, unmap_errno) = unsafe {
                let a = libc::mprotect(p, code.mapped_len(), libc::PROT_READ | libc::PROT_WRITE);
                let ae = errno();
                let b = libc::munmap(p, code.mapped_len());
                let be = errno();
                (a, ae, b, be)
            };
            assert_eq!(
                (protect, protect_errno),
                (-1, libc::EPERM),
                "mprotect on sealed code"
            );
            assert_eq!(
                (unmap, unmap_errno),
                (-1, libc::EPERM),
                "munmap on sealed code"
            );
            assert_eq!(call(&code), 0x5EA1_0001);
            drop(code); // leaks by design: sealed memory cannot be unmapped
        }
        Err(PlaceError::SealUnsupported { support }) => {
            assert_eq!(support, report.mseal);
            assert_ne!(support, SealSupport::Supported);
            super::note(&format!(
                "seal_true_seals_code_against_mprotect_and_munmap_or_is_seal_unsupported: mseal unsupported here ({support}); checked the \
                 named PlaceError::SealUnsupported instead of sealing"
            ));
        }
        Err(other) => panic!("sealed placement failed: {other}"),
    }
}
