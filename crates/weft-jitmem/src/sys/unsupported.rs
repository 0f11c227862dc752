//! Hosts without a placement method: the probe refuses, so nothing is placed.

use std::ptr::NonNull;

use crate::{PlaceError, ProbeConfig, ProbeError, ProbeReport};

pub(crate) fn probe(_config: &ProbeConfig, _nonce: u32) -> Result<ProbeReport, ProbeError> {
    Err(ProbeError::UnsupportedHost {
        os: std::env::consts::OS,
        arch: std::env::consts::ARCH,
    })
}

pub(crate) fn place(
    _code: &[u8],
    _map_len: usize,
    _seal: bool,
    _report: &ProbeReport,
    _hint: *mut u8,
) -> Result<NonNull<u8>, PlaceError> {
    Err(ProbeError::UnsupportedHost {
        os: std::env::consts::OS,
        arch: std::env::consts::ARCH,
    }
    .into())
}

/// # Safety
/// Never called: nothing is ever placed here.
pub(crate) unsafe fn unmap(_ptr: *mut u8, _len: usize) {}
