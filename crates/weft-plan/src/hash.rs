//! Content hashes: what cache keys and plan images name code by.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The first 128 bits of SHA-256 over some bytes (machine code, a
/// serialised contract). Wide enough that two different bodies never share
/// a cached verdict by accident.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ContentHash(pub [u8; 16]);

impl ContentHash {
    /// The hash of `bytes`.
    pub fn of(bytes: &[u8]) -> ContentHash {
        let digest = Sha256::digest(bytes);
        let mut out = [0u8; 16];
        out.copy_from_slice(&digest[..16]);
        ContentHash(out)
    }

    /// The hash of `value`'s bincode encoding (fixed-width integers, so the
    /// same value always gives the same bytes).
    pub fn of_value<T: Serialize>(value: &T) -> ContentHash {
        // Serialising plain data (no maps with random order, no floats that
        // are NaN-dependent) cannot fail; an error would be a bug in a
        // Serialize impl, and hashing its message still gives a stable key.
        match bincode::serialize(value) {
            Ok(bytes) => ContentHash::of(&bytes),
            Err(e) => ContentHash::of(e.to_string().as_bytes()),
        }
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_sha256_prefix_and_stable() {
        // SHA-256("abc") begins ba7816bf 8f01cfea 414140de 5dae2223.
        let h = ContentHash::of(b"abc");
        assert_eq!(h.to_string(), "ba7816bf8f01cfea");
        assert_eq!(h.0[8..12], [0x41, 0x41, 0x40, 0xde]);
        assert_ne!(ContentHash::of(b"abd"), h);
    }
}
