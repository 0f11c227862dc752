//! The stable host fingerprint.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Host, Isa, Os};

/// A 64-bit fingerprint of a [`Host`]: equal hosts give equal fingerprints
/// in every process and with every Rust version.
///
/// It is FNV-1a 64 (offset basis `0xcbf29ce484222325`, prime
/// `0x100000001b3`) over this byte encoding, in order:
///
/// 1. the tag `b"weft-host/1"`;
/// 2. the ISA as one byte: x86-64 0, arm64 1, other 2;
/// 3. the OS as one byte: Linux 0, macOS 1, Windows 2, other 3;
/// 4. the vendor, then the model: each its UTF-8 length as `u32`
///    little-endian, then its bytes;
/// 5. the feature bits as `u64` little-endian;
/// 6. the cache-line size as `u32` little-endian;
/// 7. L1d, L2, L3: each a byte 0 when unknown, else a byte 1 and the size
///    as `u32` little-endian.
///
/// `logical_cores` is left out on purpose: it changes with affinity masks
/// and container quotas while the code that suits the CPU does not.
/// Changing any of this changes every cached verdict, so the encoding is
/// versioned by its tag and pinned by a golden test.
///
/// `Display` prints 16 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fingerprint(pub u64);

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64 state (public in the crate for the test vectors).
pub(crate) struct Fnv1a64(pub(crate) u64);

impl Fnv1a64 {
    pub(crate) fn new() -> Fnv1a64 {
        Fnv1a64(FNV_OFFSET_BASIS)
    }

    pub(crate) fn bytes(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }

    fn str(&mut self, s: &str) {
        // Lengths beyond u32 cannot come from a CPU; saturate rather than panic.
        let len = u32::try_from(s.len()).unwrap_or(u32::MAX);
        self.bytes(&len.to_le_bytes());
        self.bytes(s.as_bytes());
    }

    fn opt_u32(&mut self, value: Option<u32>) {
        match value {
            None => self.bytes(&[0]),
            Some(v) => {
                self.bytes(&[1]);
                self.bytes(&v.to_le_bytes());
            }
        }
    }
}

impl Fingerprint {
    /// The fingerprint of `host` (the same as [`Host::fingerprint`]).
    pub fn of(host: &Host) -> Fingerprint {
        let mut h = Fnv1a64::new();
        h.bytes(b"weft-host/1");
        h.bytes(&[match host.isa {
            Isa::X86_64 => 0,
            Isa::Aarch64 => 1,
            Isa::Other => 2,
        }]);
        h.bytes(&[match host.os {
            Os::Linux => 0,
            Os::MacOs => 1,
            Os::Windows => 2,
            Os::Other => 3,
        }]);
        h.str(&host.vendor);
        h.str(&host.model);
        h.bytes(&host.features.bits().to_le_bytes());
        h.bytes(&host.caches.line.to_le_bytes());
        h.opt_u32(host.caches.l1d);
        h.opt_u32(host.caches.l2);
        h.opt_u32(host.caches.l3);
        Fingerprint(h.0)
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({:016x})", self.0)
    }
}
