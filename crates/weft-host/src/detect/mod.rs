//! Detection: one submodule per source of truth, each compiled only where
//! that source exists.

#[cfg(target_arch = "aarch64")]
mod arm;
#[cfg(target_os = "linux")]
pub(crate) mod linux;
#[cfg(target_os = "macos")]
mod macos;
#[cfg(target_arch = "x86_64")]
mod x86;

use crate::{Caches, Features, Host, Isa, Os};

/// Says "unknown" for a vendor or model nothing reported.
pub(crate) const UNKNOWN: &str = "unknown";

/// Detects everything about the host, never panicking.
pub(crate) fn detect() -> Host {
    let (vendor, model) = identity();
    Host {
        isa: Isa::of_target(),
        os: Os::of_target(),
        vendor,
        model,
        features: features(),
        caches: caches(),
        logical_cores: std::thread::available_parallelism()
            .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
            .unwrap_or(1),
    }
}

fn features() -> Features {
    #[cfg(target_arch = "x86_64")]
    {
        x86::features()
    }
    #[cfg(target_arch = "aarch64")]
    {
        arm::features()
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        Features::EMPTY
    }
}

/// (vendor, model), each non-empty.
fn identity() -> (String, String) {
    #[cfg(target_arch = "x86_64")]
    let (vendor, model) = x86::identity();
    #[cfg(all(target_arch = "aarch64", target_os = "macos"))]
    let (vendor, model) = (Some("Apple".to_string()), macos::brand_string());
    #[cfg(all(target_arch = "aarch64", target_os = "linux"))]
    let (vendor, model) = linux::arm_identity();
    #[cfg(not(any(
        target_arch = "x86_64",
        all(target_arch = "aarch64", any(target_os = "linux", target_os = "macos"))
    )))]
    let (vendor, model): (Option<String>, Option<String>) = (None, None);
    let or_unknown = |s: Option<String>| {
        s.map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| UNKNOWN.to_string())
    };
    (or_unknown(vendor), or_unknown(model))
}

/// What one source knows about the caches; `None` fields are filled from
/// the next source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PartialCaches {
    pub(crate) line: Option<u32>,
    pub(crate) l1d: Option<u32>,
    pub(crate) l2: Option<u32>,
    pub(crate) l3: Option<u32>,
}

impl PartialCaches {
    fn or(self, other: PartialCaches) -> PartialCaches {
        PartialCaches {
            line: self.line.or(other.line),
            l1d: self.l1d.or(other.l1d),
            l2: self.l2.or(other.l2),
            l3: self.l3.or(other.l3),
        }
    }

    /// Records a data or unified cache of `level` (1-3) with `size` bytes and
    /// `line` bytes per line; the first one seen at a level wins.
    #[cfg_attr(
        not(any(target_os = "linux", target_arch = "x86_64")),
        allow(dead_code)
    )]
    pub(crate) fn record(&mut self, level: u32, size: u32, line: Option<u32>) {
        let slot = match level {
            1 => &mut self.l1d,
            2 => &mut self.l2,
            3 => &mut self.l3,
            _ => return,
        };
        if slot.is_none() && size > 0 {
            *slot = Some(size);
        }
        if level == 1 && self.line.is_none() {
            self.line = line.filter(|l| *l > 0);
        }
    }
}

fn caches() -> Caches {
    let mut found = PartialCaches::default();
    #[cfg(target_os = "linux")]
    {
        found = found.or(linux::sysfs_caches());
    }
    #[cfg(target_os = "macos")]
    {
        found = found.or(macos::caches());
    }
    #[cfg(target_arch = "x86_64")]
    {
        found = found.or(x86::cpuid_caches());
    }
    let default_line = if cfg!(all(target_arch = "aarch64", target_os = "macos")) {
        128
    } else {
        64
    };
    Caches {
        line: found.line.unwrap_or(default_line),
        l1d: found.l1d,
        l2: found.l2,
        l3: found.l3,
    }
}
