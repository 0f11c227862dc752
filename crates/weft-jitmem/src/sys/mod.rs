//! One backend per OS family; each provides `probe`, `place` and `unmap`.

#[cfg(any(target_os = "linux", target_os = "android", target_os = "macos"))]
mod unix;
#[cfg(any(target_os = "linux", target_os = "android", target_os = "macos"))]
pub(crate) use unix::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub(crate) use windows::*;

#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "macos",
    windows
)))]
mod unsupported;
#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "macos",
    windows
)))]
pub(crate) use unsupported::*;
