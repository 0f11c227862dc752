//! Linux, Android and macOS: mmap / mprotect / munmap, and the probe in a
//! forked child.
//!
//! The child runs only async-signal-safe work (raw syscalls such as mmap,
//! mprotect, prctl, membarrier, mseal and write; the call; `_exit`): the
//! parent may have other threads holding locks, so it must not allocate.

use std::mem;
use std::ptr::{self, NonNull};
use std::time::{Duration, Instant};

use libc::c_int;

use crate::arch::{self, Body, MAX_BODY};
use crate::{
    CoreSync, Errno, IcacheMaintenance, PlaceError, PlacementMethod, ProbeConfig, ProbeError,
    ProbeFault, ProbeIsolation, ProbeReport, ProbeStage, SealSupport,
};

/// macOS arm64 places through MAP_JIT and the shim; everything else flips
/// permissions with mprotect.
const MAP_JIT_HOST: bool = cfg!(all(target_os = "macos", target_arch = "aarch64"));

#[cfg(all(target_os = "macos", target_arch = "aarch64"))]
const MAP_JIT: c_int = libc::MAP_JIT;
#[cfg(not(all(target_os = "macos", target_arch = "aarch64")))]
const MAP_JIT: c_int = 0;

#[cfg(any(target_os = "linux", target_os = "android"))]
mod linux {
    use libc::{c_int, c_long, c_ulong};

    use crate::Errno;

    pub(super) const PR_SET_MDWE: c_int = 65;
    pub(super) const PR_MDWE_REFUSE_EXEC_GAIN: c_ulong = 1;
    /// mseal(2): the same number on x86-64 and arm64 (Linux 6.10+).
    const SYS_MSEAL: c_long = 462;
    // Only arm64 needs membarrier SYNC_CORE (see `CoreSync::NotNeeded`).
    #[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
    pub(super) const MEMBARRIER_CMD_QUERY: c_int = 0;
    pub(super) const MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE: c_int = 1 << 5;
    #[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
    pub(super) const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE: c_int = 1 << 6;

    pub(super) fn mseal(ptr: *mut u8, len: usize) -> Result<(), Errno> {
        // SAFETY: mseal reads and writes no memory; it only forbids later
        // changes to the range, and fails cleanly on a bad one.
        let r = unsafe { libc::syscall(SYS_MSEAL, ptr as usize, len, 0usize) };
        if r == 0 {
            Ok(())
        } else {
            Err(Errno::last())
        }
    }

    pub(super) fn membarrier(cmd: c_int) -> Result<c_long, Errno> {
        // SAFETY: membarrier takes no pointers.
        let r = unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as c_int, 0 as c_int) };
        if r < 0 {
            Err(Errno::last())
        } else {
            Ok(r)
        }
    }

    pub(super) fn refuse_exec_gain() -> Result<(), Errno> {
        // SAFETY: prctl(PR_SET_MDWE) takes no pointers; it only restricts
        // this (child) process's future mappings.
        let r = unsafe {
            libc::prctl(
                PR_SET_MDWE,
                PR_MDWE_REFUSE_EXEC_GAIN,
                0 as c_ulong,
                0 as c_ulong,
                0 as c_ulong,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(Errno::last())
        }
    }
}

/// The system page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    match usize::try_from(p) {
        Ok(p) if p.is_power_of_two() => p,
        _ => 4096,
    }
}

/// A fresh private anonymous mapping to write code into (read-write; on
/// macOS arm64 MAP_JIT, whose writability is per thread). `hint` is only a
/// hint: never MAP_FIXED, so nothing existing can be replaced.
fn map_for_write(hint: *mut u8, len: usize) -> Result<*mut u8, Errno> {
    let prot = if MAP_JIT_HOST {
        libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC
    } else {
        libc::PROT_READ | libc::PROT_WRITE
    };
    let flags = libc::MAP_PRIVATE | libc::MAP_ANON | MAP_JIT;
    // SAFETY: without MAP_FIXED, mmap only ever creates a new mapping.
    let p = unsafe { libc::mmap(hint.cast(), len, prot, flags, -1, 0) };
    if p == libc::MAP_FAILED {
        Err(Errno::last())
    } else {
        Ok(p.cast())
    }
}

/// Copies `code` to `dst`, fills the rest of the mapping with trapping
/// bytes, and makes the range coherent for instruction fetch on this thread.
/// Async-signal-safe.
///
/// # Safety
/// `dst` is a mapping from [`map_for_write`] of `map_len >= code.len()`
/// bytes that nothing else uses yet.
unsafe fn write_code(dst: *mut u8, code: &[u8], map_len: usize) -> Result<(), Errno> {
    #[cfg(all(target_os = "macos", target_arch = "aarch64"))]
    {
        // SAFETY: `dst` is a MAP_JIT mapping of `map_len` bytes; the shim
        // writes only inside it, with JIT write access lifted just for that.
        let r = unsafe {
            crate::shim::weft_jitmem_macos_write(dst, code.as_ptr(), code.len(), map_len)
        };
        if r == 0 {
            Ok(())
        } else {
            Err(Errno(libc::ENOSYS))
        }
    }
    #[cfg(not(all(target_os = "macos", target_arch = "aarch64")))]
    {
        // SAFETY: the caller guarantees `dst` is writable for `map_len >=
        // code.len()` bytes; a fresh mapping cannot overlap `code`.
        unsafe { ptr::copy_nonoverlapping(code.as_ptr(), dst, code.len()) };
        if cfg!(target_arch = "x86_64") {
            // int3 past the end, so running off the code traps (on arm64 the
            // zeroed tail already is `udf #0`).
            // SAFETY: the tail lies inside the same mapping.
            unsafe { ptr::write_bytes(dst.add(code.len()), 0xCC, map_len - code.len()) };
        }
        #[cfg(target_arch = "aarch64")]
        {
            // SAFETY: cache maintenance by address over our own readable mapping.
            unsafe { crate::shim::weft_jitmem_sync_icache(dst, map_len) };
        }
        Ok(())
    }
}

/// Flips the mapping to read-execute: it is never writable again.
///
/// # Safety
/// `ptr`/`len` is exactly a mapping this crate owns.
unsafe fn protect_rx(ptr: *mut u8, len: usize) -> Result<(), Errno> {
    if MAP_JIT_HOST {
        // XNU refuses mprotect on MAP_JIT regions; there the per-thread
        // write protection (restored by the shim) is what enforces W^X.
        return Ok(());
    }
    // SAFETY: the caller guarantees the range is ours; dropping write access
    // cannot invalidate any Rust reference (none point into it mutably).
    let r = unsafe { libc::mprotect(ptr.cast(), len, libc::PROT_READ | libc::PROT_EXEC) };
    if r == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// Unmaps a placement.
///
/// # Safety
/// `ptr`/`len` is exactly a mapping this crate made, and nothing uses it any more.
pub(crate) unsafe fn unmap(ptr: *mut u8, len: usize) {
    // SAFETY: guaranteed by the caller. A failure (impossible for a range we
    // mapped) would only leak the pages.
    unsafe { libc::munmap(ptr.cast(), len) };
}

/// Unmaps on drop unless released: cleans up a half-done placement.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn release(self) -> *mut u8 {
        let ptr = self.ptr;
        mem::forget(self);
        ptr
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `map_for_write` and never handed out.
        unsafe { unmap(self.ptr, self.len) };
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn seal_mapping(ptr: *mut u8, len: usize) -> Result<(), Errno> {
    linux::mseal(ptr, len)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn seal_mapping(_ptr: *mut u8, _len: usize) -> Result<(), Errno> {
    Err(Errno(libc::ENOSYS))
}

/// After the flip to read-execute: make every other thread's instruction
/// stream see the new code (arm64 Linux, when the probe registered membarrier).
fn sync_other_cores(report: &ProbeReport) -> Result<(), PlaceError> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if report.core_sync == CoreSync::Membarrier {
        linux::membarrier(linux::MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)
            .map_err(|source| PlaceError::CoreSync { source })?;
    }
    let _ = report;
    Ok(())
}

/// Places `code` (already checked non-empty, `map_len` whole pages).
pub(crate) fn place(
    code: &[u8],
    map_len: usize,
    seal: bool,
    report: &ProbeReport,
    hint: *mut u8,
) -> Result<NonNull<u8>, PlaceError> {
    if seal && report.mseal != SealSupport::Supported {
        return Err(PlaceError::SealUnsupported {
            support: report.mseal,
        });
    }
    let map_err = |source| PlaceError::Map {
        len: map_len,
        source,
    };
    let ptr = map_for_write(hint, map_len).map_err(map_err)?;
    let mapping = Mapping { ptr, len: map_len };
    let Some(nonnull) = NonNull::new(ptr) else {
        return Err(map_err(Errno(libc::EINVAL)));
    };
    // SAFETY: a fresh mapping of `map_len >= code.len()` bytes, owned here.
    unsafe { write_code(ptr, code, map_len) }.map_err(|source| PlaceError::Write { source })?;
    // SAFETY: the range is exactly the mapping made above.
    unsafe { protect_rx(ptr, map_len) }.map_err(|source| PlaceError::Protect {
        len: map_len,
        source,
    })?;
    sync_other_cores(report)?;
    if seal {
        seal_mapping(ptr, map_len).map_err(|source| PlaceError::Seal {
            len: map_len,
            source,
        })?;
    }
    mapping.release();
    Ok(nonnull)
}

// ---- the probe -------------------------------------------------------------

/// Everything the child needs, prepared before fork (the child allocates nothing).
struct ChildPlan {
    code: [u8; MAX_BODY],
    code_len: usize,
    page: usize,
    fault: Option<ProbeFault>,
}

/// Child-to-parent records: a tag byte and a little-endian u32.
const TAG_STAGE: u8 = 1;
const TAG_FAIL: u8 = 2;
const TAG_SEAL: u8 = 3;
const TAG_RETURN: u8 = 4;
const TAG_MEMBARRIER_MASK: u8 = 5;
const TAG_MEMBARRIER_ERR: u8 = 6;
const RECORD: usize = 5;

/// Wire numbering of stages (index into this table).
const STAGES: [ProbeStage; 8] = [
    ProbeStage::Setup,
    ProbeStage::Mdwe,
    ProbeStage::Map,
    ProbeStage::Write,
    ProbeStage::Protect,
    ProbeStage::Call,
    ProbeStage::CoreSyncCheck,
    ProbeStage::SealCheck,
];

fn send(fd: c_int, tag: u8, value: u32) {
    let v = value.to_le_bytes();
    let rec = [tag, v[0], v[1], v[2], v[3]];
    // SAFETY: writes 5 bytes from a live stack array. Pipe writes this small
    // are atomic and never block (the parent reads after the child exits,
    // and the whole report is far below the pipe's capacity).
    let _ = unsafe { libc::write(fd, rec.as_ptr().cast(), RECORD) };
}

fn stage(fd: c_int, s: ProbeStage) {
    let index = STAGES.iter().position(|&x| x == s).unwrap_or(0);
    send(fd, TAG_STAGE, index as u32);
}

fn child_exit(code: c_int) -> ! {
    // SAFETY: _exit ends the child at once, running no atexit handlers or
    // destructors that belong to the parent's state.
    unsafe { libc::_exit(code) }
}

fn child_fail(fd: c_int, errno: Errno) -> ! {
    send(fd, TAG_FAIL, errno.0 as u32);
    child_exit(0)
}

/// The forked child: async-signal-safe work only, always ends in `_exit`.
fn child_main(plan: &ChildPlan, fd: c_int) -> ! {
    stage(fd, ProbeStage::Setup);
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit reads a local struct; signal() only resets this
    // process's dispositions so a parent's crash handler cannot run here.
    unsafe {
        // No core file when the host (or an injected fault) kills the child.
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        for sig in [
            libc::SIGILL,
            libc::SIGTRAP,
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGSYS,
        ] {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
    if let Some(ProbeFault::ChildExit(code)) = plan.fault {
        child_exit(code);
    }
    if plan.fault == Some(ProbeFault::RefuseExecGain) {
        stage(fd, ProbeStage::Mdwe);
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Err(e) = linux::refuse_exec_gain() {
            child_fail(fd, e);
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        child_fail(fd, Errno(libc::ENOSYS));
    }
    stage(fd, ProbeStage::Map);
    let len = if plan.fault == Some(ProbeFault::MapRefused) {
        0
    } else {
        plan.page
    };
    let page = match map_for_write(ptr::null_mut(), len) {
        Ok(p) => p,
        Err(e) => child_fail(fd, e),
    };
    stage(fd, ProbeStage::Write);
    // SAFETY: a fresh mapping of one page; the body (<= MAX_BODY bytes) fits.
    if let Err(e) = unsafe { write_code(page, &plan.code[..plan.code_len], plan.page) } {
        child_fail(fd, e);
    }
    stage(fd, ProbeStage::Protect);
    // SAFETY: exactly the page mapped above.
    if let Err(e) = unsafe { protect_rx(page, plan.page) } {
        child_fail(fd, e);
    }
    stage(fd, ProbeStage::Call);
    // SAFETY: the page is read-execute and holds a whole `extern "C" fn() ->
    // u32` (or an injected trap/hang, whose effect on the child is the point).
    let f = unsafe { mem::transmute::<*mut u8, extern "C" fn() -> u32>(page) };
    let returned = f();
    send(fd, TAG_RETURN, returned);

    // Feature checks come after the verdict on placement, and run here
    // rather than in the parent: a seccomp policy that kills on an unknown
    // syscall (systemd's SystemCallFilter= default) then kills only the
    // child, and costs the feature, not placement.
    #[cfg(all(
        target_arch = "aarch64",
        any(target_os = "linux", target_os = "android")
    ))]
    {
        stage(fd, ProbeStage::CoreSyncCheck);
        match linux::membarrier(linux::MEMBARRIER_CMD_QUERY) {
            Ok(mask) => send(fd, TAG_MEMBARRIER_MASK, mask as u32),
            Err(e) => send(fd, TAG_MEMBARRIER_ERR, e.0 as u32),
        }
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // A sealed page can never be unmapped: seal a scratch page here,
        // where it dies with the child.
        stage(fd, ProbeStage::SealCheck);
        if plan.fault == Some(ProbeFault::SealCheckKilled) {
            // SAFETY: raise() is async-signal-safe; SIGSYS has its default
            // (terminating) disposition, set above.
            unsafe { libc::raise(libc::SIGSYS) };
        }
        let errno = match map_for_write(ptr::null_mut(), plan.page) {
            Ok(p) => match linux::mseal(p, plan.page) {
                Ok(()) => 0,
                Err(e) => e.0,
            },
            Err(e) => e.0,
        };
        send(fd, TAG_SEAL, errno as u32);
    }
    child_exit(0)
}

/// What the child reported, parsed by the parent.
struct ChildReport {
    stage: ProbeStage,
    fail: Option<Errno>,
    seal: Option<Errno>,
    membarrier: Option<Result<u32, Errno>>,
    returned: Option<u32>,
    bytes: usize,
}

impl ChildReport {
    fn parse(bytes: &[u8]) -> Self {
        let mut r = ChildReport {
            stage: ProbeStage::Setup,
            fail: None,
            seal: None,
            membarrier: None,
            returned: None,
            bytes: bytes.len(),
        };
        for rec in bytes.chunks_exact(RECORD) {
            let value = u32::from_le_bytes([rec[1], rec[2], rec[3], rec[4]]);
            match rec[0] {
                TAG_STAGE => {
                    r.stage = STAGES
                        .get(value as usize)
                        .copied()
                        .unwrap_or(ProbeStage::Setup)
                }
                TAG_FAIL => r.fail = Some(Errno(value as i32)),
                TAG_SEAL => r.seal = Some(Errno(value as i32)),
                TAG_RETURN => r.returned = Some(value),
                TAG_MEMBARRIER_MASK => r.membarrier = Some(Ok(value)),
                TAG_MEMBARRIER_ERR => r.membarrier = Some(Err(Errno(value as i32))),
                _ => {}
            }
        }
        r
    }
}

enum Waited {
    Status(c_int),
    TimedOut,
}

fn wait_with_timeout(pid: libc::pid_t, timeout: Duration) -> Result<Waited, ProbeError> {
    let start = Instant::now();
    let mut pause = Duration::from_micros(50);
    loop {
        let mut status: c_int = 0;
        // SAFETY: waitpid writes the status into a local.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return Ok(Waited::Status(status));
        }
        if r < 0 {
            let e = Errno::last();
            if e.0 == libc::EINTR {
                continue;
            }
            return Err(ProbeError::Wait { source: e });
        }
        if start.elapsed() >= timeout {
            // SAFETY: `pid` is our own unreaped child, so it cannot name
            // another process; then reap it.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return Ok(Waited::TimedOut);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(5));
    }
}

fn read_report(fd: c_int, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        // SAFETY: reads into the unused tail of `buf`; the fd is non-blocking.
        let r = unsafe { libc::read(fd, buf[n..].as_mut_ptr().cast(), buf.len() - n) };
        match usize::try_from(r) {
            Ok(0) | Err(_) => break, // EOF, or EAGAIN: the (dead) child wrote all it will
            Ok(k) => n += k,
        }
    }
    n
}

fn close(fd: c_int) {
    // SAFETY: closes an fd this module opened and still owns.
    unsafe { libc::close(fd) };
}

/// A pipe with both ends close-on-exec (so no concurrently exec'd program
/// keeps them) and a non-blocking read end.
fn probe_pipe() -> Result<(c_int, c_int), ProbeError> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe writes two fds into the array.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(ProbeError::Pipe {
            source: Errno::last(),
        });
    }
    for (fd, extra) in [(fds[0], libc::O_NONBLOCK), (fds[1], 0)] {
        // SAFETY: fcntl on fds just created here.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            let fl = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, fl | extra);
        }
    }
    Ok((fds[0], fds[1]))
}

/// What a successful child found.
struct ChildOutcome {
    returned: u32,
    seal: Option<Errno>,
    // Only arm64 Linux asks.
    #[cfg_attr(
        not(all(
            target_arch = "aarch64",
            any(target_os = "linux", target_os = "android")
        )),
        allow(dead_code)
    )]
    membarrier: Option<Result<u32, Errno>>,
    /// A kill during a feature check after the call: (signal, stage).
    killed: Option<(i32, ProbeStage)>,
}

fn run_child(plan: &ChildPlan, timeout: Duration) -> Result<ChildOutcome, ProbeError> {
    let (rd, wr) = probe_pipe()?;
    // SAFETY: the child runs only `child_main`, which does async-signal-safe
    // work on data prepared before the fork and ends in `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let source = Errno::last();
        close(rd);
        close(wr);
        return Err(ProbeError::Fork { source });
    }
    if pid == 0 {
        close(rd);
        child_main(plan, wr);
    }
    close(wr);
    let waited = wait_with_timeout(pid, timeout);
    let mut buf = [0u8; 256];
    let n = read_report(rd, &mut buf);
    close(rd);
    let report = ChildReport::parse(&buf[..n]);
    let stage = report.stage;
    let status = match waited? {
        Waited::TimedOut => return Err(ProbeError::TimedOut { timeout, stage }),
        Waited::Status(status) => status,
    };
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        let feature_check = matches!(stage, ProbeStage::CoreSyncCheck | ProbeStage::SealCheck);
        if let (true, Some(returned)) = (feature_check, report.returned) {
            // Placement worked; only the feature being checked is lost.
            return Ok(ChildOutcome {
                returned,
                seal: report.seal,
                membarrier: report.membarrier,
                killed: Some((signal, stage)),
            });
        }
        return Err(if stage == ProbeStage::Call {
            ProbeError::ExecutionKilled { signal }
        } else {
            ProbeError::ChildKilled { signal, stage }
        });
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    if code != 0 {
        return Err(ProbeError::ChildExited { code, stage });
    }
    if let Some(source) = report.fail {
        return Err(match stage {
            ProbeStage::Mdwe => ProbeError::MdweUnavailable { source },
            ProbeStage::Map => ProbeError::MapRefused { source },
            ProbeStage::Write => ProbeError::WriteFailed { source },
            ProbeStage::Protect => ProbeError::ProtectRefused { source },
            _ => ProbeError::ChildProtocol {
                bytes: report.bytes,
                stage,
            },
        });
    }
    match report.returned {
        Some(returned) => Ok(ChildOutcome {
            returned,
            seal: report.seal,
            membarrier: report.membarrier,
            killed: None,
        }),
        None => Err(ProbeError::ChildProtocol {
            bytes: report.bytes,
            stage,
        }),
    }
}

fn icache() -> IcacheMaintenance {
    #[cfg(all(target_arch = "aarch64", not(target_os = "macos")))]
    {
        // SAFETY: reading CTR_EL0 has no side effects (Linux allows or emulates it at EL0).
        let ctr = unsafe { crate::shim::weft_jitmem_ctr_el0() };
        IcacheMaintenance::CtrEl0 {
            ctr_el0: ctr,
            dcache_line: 4 << ((ctr >> 16) & 15),
            icache_line: 4 << (ctr & 15),
            idc: (ctr >> 28) & 1 == 1,
            dic: (ctr >> 29) & 1 == 1,
        }
    }
    #[cfg(all(target_arch = "aarch64", target_os = "macos"))]
    {
        IcacheMaintenance::SysIcacheInvalidate
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        IcacheMaintenance::Coherent
    }
}

/// Registers for membarrier SYNC_CORE where arm64 Linux needs it, if the
/// child's query showed the kernel offers it; reports what
/// happened (an unsupporting kernel is a reported fallback, not an error).
fn register_core_sync(outcome: &ChildOutcome) -> Result<CoreSync, ProbeError> {
    #[cfg(all(
        target_arch = "aarch64",
        any(target_os = "linux", target_os = "android")
    ))]
    {
        let sync = linux::MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE as u32;
        let register = linux::MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE;
        Ok(match (outcome.membarrier, outcome.killed) {
            (Some(Err(errno)), _) => CoreSync::Unavailable { errno },
            (Some(Ok(mask)), _) if mask & sync == 0 || mask & register as u32 == 0 => {
                CoreSync::Unavailable {
                    errno: Errno(libc::EINVAL),
                }
            }
            (Some(Ok(_)), _) => match linux::membarrier(register) {
                Ok(_) => CoreSync::Membarrier,
                Err(errno) => CoreSync::Unavailable { errno },
            },
            (None, Some((signal, stage))) => CoreSync::ProbeKilled { signal, stage },
            (None, None) => {
                return Err(ProbeError::ChildProtocol {
                    bytes: 0,
                    stage: ProbeStage::CoreSyncCheck,
                })
            }
        })
    }
    #[cfg(all(target_arch = "aarch64", target_os = "macos"))]
    {
        let _ = outcome;
        Ok(CoreSync::ByIcacheCall)
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        let _ = outcome;
        Ok(CoreSync::NotNeeded)
    }
}

/// What the child found out about mseal.
fn seal_support(outcome: &ChildOutcome) -> Result<SealSupport, ProbeError> {
    if !cfg!(any(target_os = "linux", target_os = "android")) {
        return Ok(SealSupport::NotLinux);
    }
    Ok(match (outcome.seal, outcome.killed) {
        (Some(Errno(0)), _) => SealSupport::Supported,
        (Some(errno), _) => SealSupport::Unsupported { errno },
        (None, Some((signal, stage))) => SealSupport::ProbeKilled { signal, stage },
        (None, None) => {
            return Err(ProbeError::ChildProtocol {
                bytes: 0,
                stage: ProbeStage::SealCheck,
            })
        }
    })
}

/// Runs the probe: the nonce function in a forked child, then host facts.
pub(crate) fn probe(config: &ProbeConfig, nonce: u32) -> Result<ProbeReport, ProbeError> {
    let body = match config.fault {
        Some(ProbeFault::Trap) => Body::Trap,
        Some(ProbeFault::Hang) => Body::Hang,
        Some(ProbeFault::WrongNonce) => Body::Return(!nonce),
        _ => Body::Return(nonce),
    };
    let Some((code, code_len)) = arch::encode(body) else {
        return Err(ProbeError::UnsupportedHost {
            os: std::env::consts::OS,
            arch: std::env::consts::ARCH,
        });
    };
    #[cfg(target_arch = "aarch64")]
    if !crate::shim::PRESENT {
        return Err(ProbeError::ShimMissing {
            note: crate::SHIM_NOTE,
        });
    }
    let plan = ChildPlan {
        code,
        code_len,
        page: page_size(),
        fault: config.fault,
    };
    let outcome = run_child(&plan, config.timeout)?;
    if outcome.returned != nonce {
        return Err(ProbeError::WrongNonce {
            expected: nonce,
            got: outcome.returned,
        });
    }
    let mseal = seal_support(&outcome)?;
    let core_sync = register_core_sync(&outcome)?;
    Ok(ProbeReport {
        method: if MAP_JIT_HOST {
            PlacementMethod::MapJit
        } else {
            PlacementMethod::MmapMprotect
        },
        isolation: ProbeIsolation::ForkedChild,
        icache: icache(),
        core_sync,
        mseal,
        page_size: plan.page,
        nonce,
        os: std::env::consts::OS,
        arch: std::env::consts::ARCH,
        shim: crate::SHIM_NOTE,
    })
}
