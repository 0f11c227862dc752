//! macOS: `sysctlbyname` for cache geometry and the brand string.

use std::ffi::{c_void, CStr};
use std::ptr;

use super::PartialCaches;

fn sysctl_u64(name: &CStr) -> Option<u64> {
    let mut value: u64 = 0;
    let mut len = std::mem::size_of::<u64>();
    // SAFETY: `name` is NUL-terminated; `oldp` points to `len` writable bytes
    // that outlive the call; a null `newp` with `newlen` 0 makes it a read.
    let rc = unsafe {
        libc::sysctlbyname(
            name.as_ptr(),
            (&mut value as *mut u64).cast::<c_void>(),
            &mut len,
            ptr::null_mut(),
            0,
        )
    };
    // A 4-byte answer fills the low half of the zeroed u64 (little-endian).
    (rc == 0 && (len == 4 || len == 8)).then_some(value)
}

fn sysctl_u32(name: &CStr) -> Option<u32> {
    sysctl_u64(name)
        .and_then(|v| u32::try_from(v).ok())
        .filter(|v| *v > 0)
}

/// A string-valued sysctl such as `machdep.cpu.brand_string`.
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
pub(crate) fn sysctl_string(name: &CStr) -> Option<String> {
    let mut len: usize = 0;
    // SAFETY: a null `oldp` asks only for the size, written to `len`.
    let rc =
        unsafe { libc::sysctlbyname(name.as_ptr(), ptr::null_mut(), &mut len, ptr::null_mut(), 0) };
    if rc != 0 || len == 0 {
        return None;
    }
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` has `len` writable bytes and outlives the call.
    let rc = unsafe {
        libc::sysctlbyname(
            name.as_ptr(),
            buf.as_mut_ptr().cast::<c_void>(),
            &mut len,
            ptr::null_mut(),
            0,
        )
    };
    if rc != 0 {
        return None;
    }
    buf.truncate(len);
    let text = String::from_utf8_lossy(&buf);
    Some(text.trim_end_matches('\0').trim().to_string())
}

/// The CPU brand string, e.g. `Apple M2`.
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
pub(crate) fn brand_string() -> Option<String> {
    sysctl_string(c"machdep.cpu.brand_string")
}

/// Cache geometry; on Apple silicon the performance cores' (perflevel0).
pub(crate) fn caches() -> PartialCaches {
    let pick = |perf: &CStr, plain: &CStr| sysctl_u32(perf).or_else(|| sysctl_u32(plain));
    PartialCaches {
        line: sysctl_u32(c"hw.cachelinesize"),
        l1d: pick(c"hw.perflevel0.l1dcachesize", c"hw.l1dcachesize"),
        l2: pick(c"hw.perflevel0.l2cachesize", c"hw.l2cachesize"),
        l3: sysctl_u32(c"hw.l3cachesize"),
    }
}
