//! W^X executable memory for weft's JIT: turns bytes of machine code into
//! memory the CPU runs, and nothing else.
//!
//! Invariants:
//! - **W^X: never `rwx`.** Code is copied into a read-write mapping, made
//!   coherent for instruction fetch, then flipped to read-execute. No mapping
//!   this crate makes is ever writable and executable at once. (macOS arm64 is
//!   the platform exception in form only: a `MAP_JIT` mapping carries all three
//!   permissions, and the hardware enforces W^X per thread; this crate lifts a
//!   thread's write permission only inside one C shim call that copies.)
//! - **Placed code is never writable again.** Nothing here turns write
//!   permission back on; with [`PlaceOptions::seal`] the kernel enforces it.
//!   Dropping a [`PlacedCode`] unmaps it (except sealed code: see below).
//! - **Probe before first placement.** [`place`] calls [`probe`] first. The
//!   probe places a tiny function that returns a per-process random nonce and
//!   calls it in a forked child, so a host that kills on execution (hardened
//!   macOS, noexec policies, `PR_SET_MDWE`) yields a named [`ProbeError`]
//!   instead of a dead process. The same child then tries `mseal` on a
//!   scratch page and (arm64 Linux) queries membarrier, so a policy that kills
//!   on those syscalls costs the feature, not placement. Its verdict is
//!   cached for the process.
//!
//! Platforms: Linux/Android x86-64 and arm64 (mmap/mprotect; arm64 cache
//! maintenance through the C shim, driven by CTR_EL0, plus
//! `membarrier(PRIVATE_EXPEDITED_SYNC_CORE)` for other threads), macOS arm64
//! (`MAP_JIT`, `pthread_jit_write_protect_np` and `sys_icache_invalidate` in one
//! shim call), macOS x86-64 (mmap/mprotect), Windows (VirtualAlloc /
//! VirtualProtect / FlushInstructionCache; the probe runs in-process there,
//! having no fork). Anything else is refused with
//! [`ProbeError::UnsupportedHost`].
//!
//! Sealing (`mseal`, Linux 6.10+) is off by default. Sealed code can never be
//! unmapped: dropping a sealed [`PlacedCode`] leaks its pages for the life of
//! the process, by design. Use it for long-lived code only.

mod arch;
mod error;
#[cfg(target_arch = "aarch64")]
mod shim;
mod sys;
#[cfg(test)]
mod tests;

use std::fmt;
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::time::Duration;

pub use error::{signal_name, Errno, PlaceError, ProbeError, ProbeStage};

/// What build.rs said about the C shim.
pub(crate) const SHIM_NOTE: &str = env!("WEFT_JITMEM_SHIM_NOTE");

/// How to place code.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PlaceOptions {
    /// Seal the placed code with `mseal` (Linux 6.10+) so that no one, this
    /// process included, can unmap, remap or re-protect it. Off by default.
    /// Sealed memory is never unmapped, even on drop. On a host without
    /// `mseal`, placing with `seal: true` fails with
    /// [`PlaceError::SealUnsupported`].
    pub seal: bool,
}

/// Machine code placed in read-execute memory. Dropping it unmaps the pages,
/// unless they are sealed: sealed memory cannot be unmapped and stays
/// reserved (leaked) until the process exits.
pub struct PlacedCode {
    ptr: NonNull<u8>,
    len: usize,
    map_len: usize,
    sealed: bool,
}

// SAFETY: the pages are read-execute and never written after placement; the
// handle owns them exclusively and only unmaps them on drop.
unsafe impl Send for PlacedCode {}
// SAFETY: as above: shared access only reads or executes immutable memory.
unsafe impl Sync for PlacedCode {}

impl PlacedCode {
    /// Start of the placed code (the first byte of `code` as given to [`place`]),
    /// page-aligned.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Length of the placed code in bytes (not rounded to pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: empty code is refused by [`place`].
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Length of the mapping, whole pages. Past `len`, the bytes trap if run
    /// (`int3` on x86-64, `udf #0` on arm64).
    pub fn mapped_len(&self) -> usize {
        self.map_len
    }

    /// Whether the code is sealed with `mseal` (and so never unmapped).
    pub fn is_sealed(&self) -> bool {
        self.sealed
    }

    /// The placed bytes, read back from the mapping (e.g. to price them).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is readable, at least `len` bytes long, and is
        // never written after placement nor unmapped before `self` drops.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl fmt::Debug for PlacedCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlacedCode")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("mapped_len", &self.map_len)
            .field("sealed", &self.sealed)
            .finish()
    }
}

impl Drop for PlacedCode {
    fn drop(&mut self) {
        if self.sealed {
            // mseal forbids munmap: the pages stay until the process exits.
            return;
        }
        // SAFETY: `ptr`/`map_len` are exactly the mapping this handle owns,
        // and no other handle refers to it.
        unsafe { sys::unmap(self.ptr.as_ptr(), self.map_len) };
    }
}

/// How code is placed on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlacementMethod {
    /// `mmap` read-write, copy, `mprotect` read-execute (Linux, Android, macOS x86-64).
    MmapMprotect,
    /// `mmap(MAP_JIT)` with per-thread write protection toggled inside the C
    /// shim (macOS arm64).
    MapJit,
    /// `VirtualAlloc` read-write, copy, `VirtualProtect` execute-read (Windows).
    VirtualAlloc,
}

/// Where the probe ran the nonce function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeIsolation {
    /// In a forked child: a host that kills on execution kills only the child.
    ForkedChild,
    /// In this process (Windows has no fork; its refusals are error returns).
    InProcess,
}

/// How written code is made visible to instruction fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IcacheMaintenance {
    /// The CPU keeps instruction fetch coherent with stores (x86-64).
    Coherent,
    /// arm64 Linux: `dc cvau` / `ic ivau` loops over CTR_EL0's line sizes,
    /// `dsb ish`, `isb`, in the C shim.
    CtrEl0 {
        /// The raw CTR_EL0 value.
        ctr_el0: u64,
        /// Smallest data cache line, bytes (DminLine).
        dcache_line: usize,
        /// Smallest instruction cache line, bytes (IminLine).
        icache_line: usize,
        /// IDC: the data cache clean is not needed.
        idc: bool,
        /// DIC: the instruction cache invalidation is not needed.
        dic: bool,
    },
    /// macOS: `sys_icache_invalidate`.
    SysIcacheInvalidate,
    /// Windows: `FlushInstructionCache`.
    FlushInstructionCache,
}

/// How other threads are made to see newly placed code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoreSync {
    /// Not needed: x86-64 keeps instruction fetch coherent with stores across
    /// cores, and a reused address was unmapped first, whose TLB-shootdown
    /// interrupt serialises every core that ran the old code.
    NotNeeded,
    /// The OS's cache call covers every core (macOS, Windows).
    ByIcacheCall,
    /// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)` after each
    /// placement (registered by the probe).
    Membarrier,
    /// membarrier SYNC_CORE is unavailable (old kernel, emulator): placement
    /// still issues `isb` on the placing thread; other threads must first
    /// synchronise with it (e.g. through the lock or channel that hands them
    /// the pointer) and take an exception or `isb` of their own.
    Unavailable {
        /// What the kernel said (ENOSYS, or EINVAL when the command is not offered).
        errno: Errno,
    },
    /// The probe child was killed while querying membarrier (a seccomp
    /// policy that kills on the syscall); treated as [`CoreSync::Unavailable`].
    ProbeKilled {
        /// The signal that killed the child.
        signal: i32,
        /// The stage it was in.
        stage: ProbeStage,
    },
}

/// Whether `mseal` works here, as found by sealing a scratch page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SealSupport {
    /// `mseal` sealed the scratch page.
    Supported,
    /// `mseal` failed on the scratch page (ENOSYS: kernel before 6.10 or an
    /// emulator; EINVAL; EPERM from a seccomp policy).
    Unsupported {
        /// What the kernel said.
        errno: Errno,
    },
    /// `mseal` is Linux-only.
    NotLinux,
    /// The probe child was killed while trying `mseal` (a seccomp policy that
    /// kills on unknown syscalls): treated as unsupported.
    ProbeKilled {
        /// The signal that killed the child.
        signal: i32,
        /// The stage it was in.
        stage: ProbeStage,
    },
}

impl fmt::Display for SealSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SealSupport::Supported => f.write_str("supported"),
            SealSupport::Unsupported { errno } => write!(f, "mseal failed: {errno}"),
            SealSupport::NotLinux => f.write_str("mseal exists only on Linux"),
            SealSupport::ProbeKilled { signal, stage } => write!(
                f,
                "the probe child was killed by {} ({signal}) while {stage}",
                signal_name(*signal)
            ),
        }
    }
}

/// What the probe found. Obtained from [`probe`] (cached) or [`probe_with`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProbeReport {
    /// How code is placed here.
    pub method: PlacementMethod,
    /// Where the nonce function ran.
    pub isolation: ProbeIsolation,
    /// How the instruction cache is kept coherent.
    pub icache: IcacheMaintenance,
    /// How other threads are synchronised after a placement.
    pub core_sync: CoreSync,
    /// Whether `mseal` works (reported, not assumed).
    pub mseal: SealSupport,
    /// The page size placements are rounded to.
    pub page_size: usize,
    /// The nonce the probe function returned (random per process).
    pub nonce: u32,
    /// `std::env::consts::OS`.
    pub os: &'static str,
    /// `std::env::consts::ARCH`.
    pub arch: &'static str,
    /// What build.rs said about the C shim ("compiled ...", "not needed ...").
    pub shim: &'static str,
}

/// A fault to inject into [`probe_with`], to exercise each refusal path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProbeFault {
    /// The placed function traps (`ud2` / `brk #0`): [`ProbeError::ExecutionKilled`].
    Trap,
    /// The placed function returns the wrong value: [`ProbeError::WrongNonce`].
    WrongNonce,
    /// The child exits with this status before doing anything: [`ProbeError::ChildExited`].
    ChildExit(i32),
    /// The child turns on `prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN)` first,
    /// so the flip to read-execute is refused: [`ProbeError::ProtectRefused`]
    /// (or [`ProbeError::MdweUnavailable`] where the kernel lacks it).
    RefuseExecGain,
    /// The child's mmap is given a zero length, which the kernel refuses with
    /// EINVAL: [`ProbeError::MapRefused`].
    MapRefused,
    /// The placed function never returns: [`ProbeError::TimedOut`].
    Hang,
    /// After a successful call, the child kills itself with SIGSYS where it
    /// would try `mseal`, as a seccomp policy that kills on unknown syscalls
    /// would: the probe still succeeds, reporting
    /// [`SealSupport::ProbeKilled`].
    SealCheckKilled,
}

impl ProbeFault {
    /// The variant's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            ProbeFault::Trap => "Trap",
            ProbeFault::WrongNonce => "WrongNonce",
            ProbeFault::ChildExit(_) => "ChildExit",
            ProbeFault::RefuseExecGain => "RefuseExecGain",
            ProbeFault::MapRefused => "MapRefused",
            ProbeFault::Hang => "Hang",
            ProbeFault::SealCheckKilled => "SealCheckKilled",
        }
    }
}

/// Settings of one probe run ([`probe_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeConfig {
    /// A fault to inject (tests); `None` for a real probe.
    pub fault: Option<ProbeFault>,
    /// How long the child may take before it is killed ([`ProbeError::TimedOut`]).
    pub timeout: Duration,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        // Generous: a loaded 2-core CI box running the child under qemu-user
        // still answers in milliseconds; only a hang should ever hit this.
        ProbeConfig {
            fault: None,
            timeout: Duration::from_secs(20),
        }
    }
}

/// The process's nonce: random per process (std's `RandomState` is seeded
/// from the OS), never zero so that a zeroed return register cannot pass.
fn process_nonce() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    static NONCE: OnceLock<u32> = OnceLock::new();
    *NONCE.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        let v = h.finish();
        match (v ^ (v >> 32)) as u32 {
            0 => 0x5EED_0001,
            n => n,
        }
    })
}

/// Probes this host once per process and returns the cached verdict: places a
/// nonce function, calls it in a forked child, checks what it returned, and
/// finds out whether `mseal` and membarrier SYNC_CORE work. [`place`] calls
/// this first.
pub fn probe() -> Result<&'static ProbeReport, ProbeError> {
    static PROBE: OnceLock<Result<ProbeReport, ProbeError>> = OnceLock::new();
    PROBE
        .get_or_init(|| probe_with(&ProbeConfig::default()))
        .as_ref()
        .map_err(Clone::clone)
}

/// Runs the probe afresh with `config` (not cached). With a
/// [`ProbeConfig::fault`], it exercises one refusal path; see [`ProbeFault`].
pub fn probe_with(config: &ProbeConfig) -> Result<ProbeReport, ProbeError> {
    sys::probe(config, process_nonce())
}

/// Places `code` in read-execute memory with default options (not sealed).
/// The first placement in a process runs [`probe`] (one fork) and fails with
/// [`PlaceError::Probe`] if the host refuses.
pub fn place(code: &[u8]) -> Result<PlacedCode, PlaceError> {
    place_with(code, &PlaceOptions::default())
}

/// Places `code` in read-execute memory: probe (once), map read-write, copy,
/// make the instruction cache coherent, flip to read-execute, optionally seal.
pub fn place_with(code: &[u8], opts: &PlaceOptions) -> Result<PlacedCode, PlaceError> {
    place_at(code, opts, std::ptr::null_mut())
}

/// [`place_with`] with an address hint for the mapping (never `MAP_FIXED`):
/// lets tests ask for an address that was just freed.
pub(crate) fn place_at(
    code: &[u8],
    opts: &PlaceOptions,
    hint: *mut u8,
) -> Result<PlacedCode, PlaceError> {
    if code.is_empty() {
        return Err(PlaceError::Empty);
    }
    let report = probe()?;
    let map_len = round_to_pages(code.len(), report.page_size)?;
    let ptr = sys::place(code, map_len, opts.seal, report, hint)?;
    Ok(PlacedCode {
        ptr,
        len: code.len(),
        map_len,
        sealed: opts.seal,
    })
}

/// `len` rounded up to whole pages, or [`PlaceError::TooLarge`] when that
/// leaves the address space (over `isize::MAX`, the most any mapping or slice
/// may span).
pub(crate) fn round_to_pages(len: usize, page_size: usize) -> Result<usize, PlaceError> {
    let too_large = PlaceError::TooLarge { len, page_size };
    let rounded = len
        .checked_add(page_size - 1)
        .ok_or_else(|| too_large.clone())?
        & !(page_size - 1);
    if rounded > isize::MAX as usize {
        return Err(too_large);
    }
    Ok(rounded)
}
