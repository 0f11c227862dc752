//! Errors of the probe and of placement; each variant names what refused and why.

use std::fmt;
use std::time::Duration;

/// An OS error number (`errno` on Unix, `GetLastError` on Windows), kept as a
/// plain number so that errors stay `Clone` and comparable: the probe's result
/// is cached for the whole process and handed out again on every call.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// The raw OS error number.
    pub fn raw(self) -> i32 {
        self.0
    }

    /// The calling thread's last OS error.
    pub(crate) fn last() -> Self {
        // `last_os_error` only reads errno / GetLastError: no allocation, so it
        // is also fine in the probe's forked child.
        Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // io::Error's text already ends in "(os error N)".
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Errno({}: {})",
            self.0,
            std::io::Error::from_raw_os_error(self.0)
        )
    }
}

impl std::error::Error for Errno {}

/// How far the probe got before it stopped; named in probe errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeStage {
    /// Preparing the child (core-dump limit, signal dispositions).
    Setup,
    /// Turning on `PR_SET_MDWE` in the child (only when a test injects it).
    Mdwe,
    /// Mapping the page read-write.
    Map,
    /// Copying the nonce function and making the icache see it.
    Write,
    /// Flipping the page to read-execute.
    Protect,
    /// Calling the placed nonce function.
    Call,
    /// After the call: asking the kernel which membarrier commands it offers.
    CoreSyncCheck,
    /// After the call: trying `mseal` on a scratch mapping.
    SealCheck,
}

impl fmt::Display for ProbeStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProbeStage::Setup => "setting up the probe child",
            ProbeStage::Mdwe => "enabling PR_SET_MDWE",
            ProbeStage::Map => "mapping the page read-write",
            ProbeStage::Write => "writing the nonce function",
            ProbeStage::Protect => "making the page read-execute",
            ProbeStage::Call => "calling the placed nonce function",
            ProbeStage::CoreSyncCheck => "querying membarrier",
            ProbeStage::SealCheck => "trying mseal on a scratch page",
        })
    }
}

/// The name of a Unix signal number, for error messages.
pub fn signal_name(signal: i32) -> &'static str {
    #[cfg(unix)]
    {
        match signal {
            libc::SIGILL => "SIGILL",
            libc::SIGTRAP => "SIGTRAP",
            libc::SIGSEGV => "SIGSEGV",
            libc::SIGBUS => "SIGBUS",
            libc::SIGKILL => "SIGKILL",
            libc::SIGSYS => "SIGSYS",
            libc::SIGABRT => "SIGABRT",
            libc::SIGFPE => "SIGFPE",
            _ => "signal",
        }
    }
    #[cfg(not(unix))]
    {
        let _ = signal;
        "signal"
    }
}

/// Why the probe refused: this host cannot (or will not) run placed code.
///
/// Every variant is one distinct way of failing, named so that a log line can
/// be searched for; each carries its cause.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum ProbeError {
    /// No placement method exists for this OS/CPU pair in this crate.
    #[error("probe-unsupported-host: no W^X placement method for {arch}-{os}")]
    UnsupportedHost {
        /// `std::env::consts::OS`.
        os: &'static str,
        /// `std::env::consts::ARCH`.
        arch: &'static str,
    },
    /// The C shim this target needs was not compiled in (a check-only cross build).
    #[error("probe-shim-missing: the C shim was not built: {note}")]
    ShimMissing {
        /// What build.rs said about the shim.
        note: &'static str,
    },
    /// A fault injected through [`ProbeConfig`](crate::ProbeConfig) that cannot
    /// be exercised on this host (no process isolation to contain it).
    #[error("probe-injection-unsupported: fault {fault} cannot be contained on this host")]
    InjectionUnsupported {
        /// The injected fault.
        fault: &'static str,
    },
    /// Creating the pipe to the probe child failed.
    #[error("probe-pipe: creating the probe pipe failed: {source}")]
    Pipe {
        /// The OS error.
        source: Errno,
    },
    /// `fork` failed.
    #[error("probe-fork: forking the probe child failed: {source}")]
    Fork {
        /// The OS error.
        source: Errno,
    },
    /// `waitpid` on the probe child failed (ECHILD when the process ignores
    /// SIGCHLD or another handler reaps every child).
    #[error("probe-wait: waiting for the probe child failed: {source}")]
    Wait {
        /// The OS error.
        source: Errno,
    },
    /// `PR_SET_MDWE` was requested (test injection) and the kernel refused it:
    /// the kernel predates Linux 6.3 or an emulator does not pass it through.
    #[error("probe-mdwe-unavailable: prctl(PR_SET_MDWE) refused: {source}")]
    MdweUnavailable {
        /// The OS error.
        source: Errno,
    },
    /// Mapping a read-write page was refused.
    #[error("probe-map-refused: mapping a read-write page was refused: {source}")]
    MapRefused {
        /// The OS error.
        source: Errno,
    },
    /// Writing the nonce function failed (the macOS JIT write shim reported an error).
    #[error("probe-write-failed: writing the nonce function failed: {source}")]
    WriteFailed {
        /// The OS error.
        source: Errno,
    },
    /// Making the written page executable was refused (`PR_SET_MDWE`, SELinux
    /// `execmem`, PaX, Windows ACG, ...).
    #[error("probe-protect-refused: making the page read-execute was refused: {source}")]
    ProtectRefused {
        /// The OS error.
        source: Errno,
    },
    /// The child died from a signal while running the placed nonce function:
    /// the host kills on execution (hardened runtime, noexec policy) or the
    /// bytes trapped.
    #[error(
        "probe-execution-killed: the probe child was killed by {} ({signal}) \
         while calling placed code",
        signal_name(*signal)
    )]
    ExecutionKilled {
        /// The signal number.
        signal: i32,
    },
    /// The child died from a signal before it reached the call.
    #[error(
        "probe-child-killed: the probe child was killed by {} ({signal}) while {stage}",
        signal_name(*signal)
    )]
    ChildKilled {
        /// The signal number.
        signal: i32,
        /// The last stage the child started.
        stage: ProbeStage,
    },
    /// The child exited with a non-zero status without reporting a result.
    #[error("probe-child-exited: the probe child exited with status {code} while {stage}")]
    ChildExited {
        /// The exit status.
        code: i32,
        /// The last stage the child started.
        stage: ProbeStage,
    },
    /// The child did not finish within the timeout and was killed.
    #[error(
        "probe-timed-out: the probe child did not finish within {timeout:?} (stuck while {stage})"
    )]
    TimedOut {
        /// The timeout that ran out.
        timeout: Duration,
        /// The last stage the child started.
        stage: ProbeStage,
    },
    /// The placed function ran but returned something other than the nonce.
    #[error("probe-wrong-nonce: placed code returned {got:#010x}, expected {expected:#010x}")]
    WrongNonce {
        /// The nonce the function was built to return.
        expected: u32,
        /// What it returned.
        got: u32,
    },
    /// The child exited cleanly but its report was incomplete or garbled.
    #[error("probe-child-protocol: the probe child's report was incomplete ({bytes} bytes, last stage: {stage})")]
    ChildProtocol {
        /// How many report bytes arrived.
        bytes: usize,
        /// The last stage the child started.
        stage: ProbeStage,
    },
}

/// Why [`place`](crate::place) refused or failed.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum PlaceError {
    /// There is no code to place.
    #[error("place-empty: no code to place")]
    Empty,
    /// The code length cannot be rounded up to whole pages within the address space.
    #[error("place-too-large: {len} bytes do not fit in the address space when rounded to {page_size}-byte pages")]
    TooLarge {
        /// The code length asked for.
        len: usize,
        /// The page size it must be rounded to.
        page_size: usize,
    },
    /// The probe refused this host; nothing can be placed.
    #[error("place-probe: {0}")]
    Probe(#[from] ProbeError),
    /// Mapping read-write memory failed.
    #[error("place-map: mapping {len} bytes read-write failed: {source}")]
    Map {
        /// The mapped length (whole pages).
        len: usize,
        /// The OS error.
        source: Errno,
    },
    /// Writing the code (macOS JIT shim) or making the icache coherent failed.
    #[error("place-write: writing code or flushing the icache failed: {source}")]
    Write {
        /// The OS error.
        source: Errno,
    },
    /// Flipping the mapping to read-execute failed.
    #[error("place-protect: making {len} bytes read-execute failed: {source}")]
    Protect {
        /// The mapped length (whole pages).
        len: usize,
        /// The OS error.
        source: Errno,
    },
    /// Synchronising the other threads' instruction streams (membarrier) failed.
    #[error("place-core-sync: membarrier(PRIVATE_EXPEDITED_SYNC_CORE) failed: {source}")]
    CoreSync {
        /// The OS error.
        source: Errno,
    },
    /// Sealing was asked for but this host does not support `mseal`.
    #[error("place-seal-unsupported: sealing asked for but mseal is unavailable here ({support})")]
    SealUnsupported {
        /// What the probe found.
        support: crate::SealSupport,
    },
    /// `mseal` itself failed on a host whose probe said it works.
    #[error("place-seal: mseal of {len} bytes failed: {source}")]
    Seal {
        /// The mapped length (whole pages).
        len: usize,
        /// The OS error.
        source: Errno,
    },
}
