//! Windows: VirtualAlloc read-write, copy, VirtualProtect execute-read,
//! FlushInstructionCache. There is no fork, so the probe runs in-process: a
//! policy that refuses executable memory (Arbitrary Code Guard) shows up as a
//! VirtualProtect error, which is returned, not fatal. Injected faults that
//! would kill the process are refused with `ProbeError::InjectionUnsupported`.

use std::ffi::c_void;
use std::mem;
use std::ptr::{self, NonNull};

use crate::arch::{self, Body};
use crate::{
    CoreSync, Errno, IcacheMaintenance, PlaceError, PlacementMethod, ProbeConfig, ProbeError,
    ProbeFault, ProbeIsolation, ProbeReport, SealSupport,
};

const MEM_COMMIT: u32 = 0x1000;
const MEM_RESERVE: u32 = 0x2000;
const MEM_RELEASE: u32 = 0x8000;
const PAGE_READWRITE: u32 = 0x04;
const PAGE_EXECUTE_READ: u32 = 0x20;

/// `SYSTEM_INFO` (sysinfoapi.h), only for the page size.
#[repr(C)]
struct SystemInfo {
    processor_architecture: u16,
    reserved: u16,
    page_size: u32,
    minimum_application_address: *mut c_void,
    maximum_application_address: *mut c_void,
    active_processor_mask: usize,
    number_of_processors: u32,
    processor_type: u32,
    allocation_granularity: u32,
    processor_level: u16,
    processor_revision: u16,
}

#[link(name = "kernel32")]
extern "system" {
    fn VirtualAlloc(
        address: *mut c_void,
        size: usize,
        allocation_type: u32,
        protect: u32,
    ) -> *mut c_void;
    fn VirtualProtect(
        address: *mut c_void,
        size: usize,
        new_protect: u32,
        old_protect: *mut u32,
    ) -> i32;
    fn VirtualFree(address: *mut c_void, size: usize, free_type: u32) -> i32;
    fn FlushInstructionCache(process: *mut c_void, base: *const c_void, size: usize) -> i32;
    fn GetCurrentProcess() -> *mut c_void;
    fn GetSystemInfo(info: *mut SystemInfo);
}

/// The system page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: SystemInfo is plain data; all-zero is a valid value.
    let mut info: SystemInfo = unsafe { mem::zeroed() };
    // SAFETY: GetSystemInfo fills the struct we pass.
    unsafe { GetSystemInfo(&mut info) };
    match info.page_size as usize {
        p if p.is_power_of_two() => p,
        _ => 4096,
    }
}

/// Unmaps a placement.
///
/// # Safety
/// `ptr` is the base of an allocation this crate made, no longer used.
pub(crate) unsafe fn unmap(ptr: *mut u8, _len: usize) {
    // SAFETY: guaranteed by the caller; MEM_RELEASE takes size 0.
    unsafe { VirtualFree(ptr.cast(), 0, MEM_RELEASE) };
}

/// Maps, copies, protects and flushes; returns the base.
fn place_raw(code: &[u8], map_len: usize) -> Result<NonNull<u8>, PlaceError> {
    // SAFETY: a fresh allocation at an address of the system's choosing.
    let p = unsafe {
        VirtualAlloc(
            ptr::null_mut(),
            map_len,
            MEM_COMMIT | MEM_RESERVE,
            PAGE_READWRITE,
        )
    };
    let Some(base) = NonNull::new(p.cast::<u8>()) else {
        return Err(PlaceError::Map {
            len: map_len,
            source: Errno::last(),
        });
    };
    let fail = |e: PlaceError| {
        // SAFETY: the allocation was made above and never handed out.
        unsafe { unmap(base.as_ptr(), map_len) };
        Err(e)
    };
    // SAFETY: the allocation is writable for map_len >= code.len() bytes and
    // cannot overlap `code`.
    unsafe {
        ptr::copy_nonoverlapping(code.as_ptr(), base.as_ptr(), code.len());
        if cfg!(target_arch = "x86_64") {
            ptr::write_bytes(base.as_ptr().add(code.len()), 0xCC, map_len - code.len());
        }
    }
    let mut old = 0u32;
    // SAFETY: the range is exactly our allocation.
    if unsafe { VirtualProtect(p, map_len, PAGE_EXECUTE_READ, &mut old) } == 0 {
        return fail(PlaceError::Protect {
            len: map_len,
            source: Errno::last(),
        });
    }
    // SAFETY: flushing our own range in our own process.
    if unsafe { FlushInstructionCache(GetCurrentProcess(), p, map_len) } == 0 {
        return fail(PlaceError::Write {
            source: Errno::last(),
        });
    }
    Ok(base)
}

pub(crate) fn place(
    code: &[u8],
    map_len: usize,
    seal: bool,
    report: &ProbeReport,
    _hint: *mut u8,
) -> Result<NonNull<u8>, PlaceError> {
    if seal {
        return Err(PlaceError::SealUnsupported {
            support: report.mseal,
        });
    }
    place_raw(code, map_len)
}

/// Runs the probe in-process (no fork on Windows).
pub(crate) fn probe(config: &ProbeConfig, nonce: u32) -> Result<ProbeReport, ProbeError> {
    let body = match config.fault {
        None | Some(ProbeFault::MapRefused) => Body::Return(nonce),
        Some(ProbeFault::WrongNonce) => Body::Return(!nonce),
        Some(fault) => {
            return Err(ProbeError::InjectionUnsupported {
                fault: fault.name(),
            })
        }
    };
    let Some((code, code_len)) = arch::encode(body) else {
        return Err(ProbeError::UnsupportedHost {
            os: std::env::consts::OS,
            arch: std::env::consts::ARCH,
        });
    };
    let page = page_size();
    // A zero-size VirtualAlloc is refused (ERROR_INVALID_PARAMETER).
    let map_len = if config.fault == Some(ProbeFault::MapRefused) {
        0
    } else {
        page
    };
    let base = place_raw(&code[..code_len], map_len).map_err(|e| match e {
        PlaceError::Map { source, .. } => ProbeError::MapRefused { source },
        PlaceError::Protect { source, .. } => ProbeError::ProtectRefused { source },
        PlaceError::Write { source } => ProbeError::WriteFailed { source },
        _ => ProbeError::MapRefused { source: Errno(0) },
    })?;
    // SAFETY: the page is execute-read and holds a whole `extern "C" fn() -> u32`.
    let f = unsafe { mem::transmute::<*mut u8, extern "C" fn() -> u32>(base.as_ptr()) };
    let got = f();
    // SAFETY: our allocation, no longer used.
    unsafe { unmap(base.as_ptr(), map_len) };
    if got != nonce {
        return Err(ProbeError::WrongNonce {
            expected: nonce,
            got,
        });
    }
    Ok(ProbeReport {
        method: PlacementMethod::VirtualAlloc,
        isolation: ProbeIsolation::InProcess,
        icache: IcacheMaintenance::FlushInstructionCache,
        core_sync: CoreSync::ByIcacheCall,
        mseal: SealSupport::NotLinux,
        page_size: page,
        nonce,
        os: std::env::consts::OS,
        arch: std::env::consts::ARCH,
        shim: crate::SHIM_NOTE,
    })
}
