//! The probe: succeeds here, is cached, and names every way it can fail.

use std::time::{Duration, Instant};

use crate::arch::return_u32;
use crate::{
    probe, probe_with, process_nonce, CoreSync, IcacheMaintenance, PlaceError, PlacementMethod,
    ProbeConfig, ProbeError, ProbeFault, ProbeIsolation, ProbeStage, SealSupport,
};

fn with_fault(fault: ProbeFault) -> Result<crate::ProbeReport, ProbeError> {
    probe_with(&ProbeConfig {
        fault: Some(fault),
        ..ProbeConfig::default()
    })
}

#[test]
fn probe_succeeds_in_a_forked_child_and_reports_this_host() {
    let report = probe_with(&ProbeConfig::default()).unwrap();
    assert_eq!(report.nonce, process_nonce());
    assert_eq!(report.isolation, ProbeIsolation::ForkedChild);
    assert_eq!(report.method, PlacementMethod::MmapMprotect);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    assert_eq!(report.page_size, page);
    assert_eq!(report.os, "linux");
    eprintln!("probe report: {report:#?}");
}

#[test]
fn probe_runs_once_per_process_and_is_shared() {
    let a = probe().unwrap();
    let b = probe().unwrap();
    assert!(
        std::ptr::eq(a, b),
        "probe() must hand out the one cached report"
    );
    assert_eq!(a.nonce, process_nonce());
    assert_ne!(a.nonce, 0);
}

#[test]
fn probe_reports_icache_maintenance_and_core_sync_for_this_cpu() {
    let report = probe().unwrap();
    if cfg!(target_arch = "x86_64") {
        assert_eq!(report.icache, IcacheMaintenance::Coherent);
        assert_eq!(report.core_sync, CoreSync::NotNeeded);
    } else {
        let IcacheMaintenance::CtrEl0 {
            dcache_line,
            icache_line,
            ..
        } = report.icache
        else {
            panic!(
                "arm64 Linux must use the CTR_EL0 shim, got {:?}",
                report.icache
            );
        };
        assert!((16..=2048).contains(&dcache_line), "DminLine {dcache_line}");
        assert!((16..=2048).contains(&icache_line), "IminLine {icache_line}");
        match report.core_sync {
            CoreSync::Membarrier => {}
            CoreSync::Unavailable { errno } => {
                // qemu-user does not implement membarrier: the fallback is reported.
                super::note(&format!(
                    "membarrier SYNC_CORE unavailable here ({errno}): reported as \
                     CoreSync::Unavailable; cross-thread sync relies on the fallback"
                ));
            }
            other => panic!("arm64 Linux core sync: {other:?}"),
        }
    }
}

#[test]
fn probe_trapping_function_is_execution_killed_with_its_signal() {
    let err = with_fault(ProbeFault::Trap).unwrap_err();
    let expected = if cfg!(target_arch = "x86_64") {
        libc::SIGILL
    } else {
        libc::SIGTRAP
    };
    assert_eq!(err, ProbeError::ExecutionKilled { signal: expected });
    let msg = err.to_string();
    assert!(msg.starts_with("probe-execution-killed"), "{msg}");
    assert!(
        msg.contains(if expected == libc::SIGILL {
            "SIGILL"
        } else {
            "SIGTRAP"
        }),
        "{msg}"
    );
}

#[test]
fn probe_wrong_return_value_is_wrong_nonce() {
    let err = with_fault(ProbeFault::WrongNonce).unwrap_err();
    let nonce = process_nonce();
    assert_eq!(
        err,
        ProbeError::WrongNonce {
            expected: nonce,
            got: !nonce
        }
    );
    assert!(err.to_string().starts_with("probe-wrong-nonce"));
}

#[test]
fn probe_child_exiting_nonzero_is_child_exited() {
    let err = with_fault(ProbeFault::ChildExit(42)).unwrap_err();
    assert_eq!(
        err,
        ProbeError::ChildExited {
            code: 42,
            stage: ProbeStage::Setup
        }
    );
    assert!(err.to_string().starts_with("probe-child-exited"));
}

#[test]
fn probe_refused_mmap_is_map_refused_with_errno() {
    let err = with_fault(ProbeFault::MapRefused).unwrap_err();
    assert_eq!(
        err,
        ProbeError::MapRefused {
            source: crate::Errno(libc::EINVAL)
        }
    );
    assert!(err.to_string().starts_with("probe-map-refused"));
}

#[test]
fn probe_under_pr_set_mdwe_is_protect_refused() {
    match with_fault(ProbeFault::RefuseExecGain) {
        Err(ProbeError::ProtectRefused { source }) => {
            assert_eq!(
                source.raw(),
                libc::EACCES,
                "MDWE refuses exec gain with EACCES"
            );
        }
        Err(ProbeError::MdweUnavailable { source }) => {
            // Kernels before 6.3 (and qemu-user, which rejects unknown prctls)
            // answer EINVAL: the mprotect-refusal path cannot be provoked here.
            assert_eq!(
                source.raw(),
                libc::EINVAL,
                "unexpected prctl error: {source}"
            );
            super::note(&format!(
                "probe_under_pr_set_mdwe_is_protect_refused: PR_SET_MDWE unavailable here \
                 ({source}); got the named ProbeError::MdweUnavailable instead; the other \
                 probe failure paths are checked by their own tests"
            ));
        }
        other => panic!("expected ProtectRefused (or MdweUnavailable), got {other:?}"),
    }
}

#[test]
fn probe_hanging_function_is_timed_out_and_the_child_killed() {
    // Long enough for a loaded machine (or qemu) to reach the call, short for a test.
    let timeout = Duration::from_secs(2);
    let start = Instant::now();
    let err = probe_with(&ProbeConfig {
        fault: Some(ProbeFault::Hang),
        timeout,
    })
    .unwrap_err();
    assert_eq!(
        err,
        ProbeError::TimedOut {
            timeout,
            stage: ProbeStage::Call
        }
    );
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "the timeout was not enforced"
    );
    assert!(err.to_string().starts_with("probe-timed-out"));
}

#[test]
fn probe_child_killed_during_the_seal_check_still_allows_placement_without_seal() {
    // A seccomp policy that kills on mseal must cost sealing, not placement.
    let report = with_fault(ProbeFault::SealCheckKilled).unwrap();
    assert_eq!(
        report.mseal,
        SealSupport::ProbeKilled {
            signal: libc::SIGSYS,
            stage: ProbeStage::SealCheck
        }
    );
    assert!(!matches!(report.core_sync, CoreSync::ProbeKilled { .. }));
    let code = return_u32(0x5EA1_0002);
    let err = crate::sys::place(&code, report.page_size, true, &report, std::ptr::null_mut())
        .unwrap_err();
    assert_eq!(
        err,
        PlaceError::SealUnsupported {
            support: report.mseal
        }
    );
    assert!(err.to_string().contains("SIGSYS"), "{err}");
    let placed = crate::sys::place(
        &code,
        report.page_size,
        false,
        &report,
        std::ptr::null_mut(),
    )
    .unwrap();
    // SAFETY: a fresh placement of a whole `extern "C" fn() -> u32`, unmapped below.
    let got = unsafe { std::mem::transmute::<*mut u8, extern "C" fn() -> u32>(placed.as_ptr())() };
    assert_eq!(got, 0x5EA1_0002);
    // SAFETY: the placement made just above, no longer used.
    unsafe { crate::sys::unmap(placed.as_ptr(), report.page_size) };
}

#[test]
fn probe_failures_after_the_first_success_do_not_change_the_cached_report() {
    let before = probe().unwrap().clone();
    let _ = with_fault(ProbeFault::Trap);
    assert_eq!(probe().unwrap(), &before);
}

#[test]
fn probe_error_messages_start_with_their_searchable_name() {
    use crate::Errno;
    let cases = [
        (
            ProbeError::UnsupportedHost {
                os: "plan9",
                arch: "mips",
            },
            "probe-unsupported-host",
        ),
        (
            ProbeError::ShimMissing { note: "skipped" },
            "probe-shim-missing",
        ),
        (
            ProbeError::InjectionUnsupported { fault: "Trap" },
            "probe-injection-unsupported",
        ),
        (
            ProbeError::Pipe {
                source: Errno(libc::EMFILE),
            },
            "probe-pipe",
        ),
        (
            ProbeError::Fork {
                source: Errno(libc::EAGAIN),
            },
            "probe-fork",
        ),
        (
            ProbeError::Wait {
                source: Errno(libc::ECHILD),
            },
            "probe-wait",
        ),
        (
            ProbeError::MdweUnavailable {
                source: Errno(libc::EINVAL),
            },
            "probe-mdwe-unavailable",
        ),
        (
            ProbeError::WriteFailed {
                source: Errno(libc::EFAULT),
            },
            "probe-write-failed",
        ),
        (
            ProbeError::ProtectRefused {
                source: Errno(libc::EACCES),
            },
            "probe-protect-refused",
        ),
        (
            ProbeError::ChildKilled {
                signal: libc::SIGSYS,
                stage: ProbeStage::Protect,
            },
            "probe-child-killed",
        ),
        (
            ProbeError::ChildProtocol {
                bytes: 3,
                stage: ProbeStage::Call,
            },
            "probe-child-protocol",
        ),
    ];
    for (err, name) in cases {
        let msg = err.to_string();
        assert!(msg.starts_with(name), "{msg}");
    }
    let killed = ProbeError::ChildKilled {
        signal: libc::SIGSYS,
        stage: ProbeStage::Protect,
    }
    .to_string();
    assert!(
        killed.contains("SIGSYS") && killed.contains("read-execute"),
        "{killed}"
    );
    let refused = ProbeError::ProtectRefused {
        source: Errno(libc::EACCES),
    }
    .to_string();
    assert!(refused.contains("os error 13"), "{refused}");
}
