//! What CPU this is: instruction set, features, caches, and a stable
//! fingerprint.
//!
//! Invariants: detection runs once per process ([`host`]) and never panics;
//! a feature is reported only when both the CPU and the OS support it (std's
//! `is_x86_feature_detected!` checks XCR0 for AVX and AVX-512 state,
//! `is_aarch64_feature_detected!` asks the OS: HWCAP on Linux, sysctl on
//! macOS); the [`Fingerprint`] is a fixed, documented hash (FNV-1a 64 over a
//! canonical encoding) that never depends on the Rust version, the process,
//! or the order in which things were detected.
//!
//! ```
//! let host = weft_host::host();
//! println!("{} {} {:?} fingerprint {}", host.vendor, host.model, host.features, host.fingerprint());
//! ```

mod detect;
mod feature;
mod fingerprint;

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

pub use feature::{Feature, Features};
pub use fingerprint::Fingerprint;

/// The instruction-set architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Isa {
    /// x86-64.
    X86_64,
    /// arm64 (AArch64).
    Aarch64,
    /// Anything else: no twins, arms only.
    Other,
}

impl Isa {
    /// The ISA this crate was compiled for.
    pub const fn of_target() -> Isa {
        if cfg!(target_arch = "x86_64") {
            Isa::X86_64
        } else if cfg!(target_arch = "aarch64") {
            Isa::Aarch64
        } else {
            Isa::Other
        }
    }
}

/// The operating system (it decides the calling convention and how
/// executable memory is had).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Os {
    /// Linux.
    Linux,
    /// macOS.
    MacOs,
    /// Windows.
    Windows,
    /// Anything else.
    Other,
}

impl Os {
    /// The OS this crate was compiled for.
    pub const fn of_target() -> Os {
        if cfg!(target_os = "linux") {
            Os::Linux
        } else if cfg!(target_os = "macos") {
            Os::MacOs
        } else if cfg!(target_os = "windows") {
            Os::Windows
        } else {
            Os::Other
        }
    }
}

/// Data-cache geometry of one core, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Caches {
    /// Cache-line size (always known: 64 when the system does not say,
    /// 128 on Apple arm64).
    pub line: u32,
    /// Level-1 data cache, if known.
    pub l1d: Option<u32>,
    /// Level-2 cache (data or unified), if known.
    pub l2: Option<u32>,
    /// Level-3 cache (data or unified), if known; usually shared by several
    /// cores.
    pub l3: Option<u32>,
}

impl Caches {
    /// The last-level cache assumed where the host does not say: larger
    /// than most, so data taken to overflow it surely does.
    pub const ASSUMED_LAST_LEVEL: u32 = 32 << 20;

    /// The last level this core's data reaches before memory: L3, else L2
    /// (a reported 0 counts as not said); `None` when neither is known.
    pub fn last_level(&self) -> Option<u32> {
        let known = |b: Option<u32>| b.filter(|&b| b > 0);
        known(self.l3).or(known(self.l2))
    }

    /// [`Caches::last_level`], or [`Caches::ASSUMED_LAST_LEVEL`] when the
    /// host does not say.
    pub fn last_level_or_assumed(&self) -> u32 {
        self.last_level().unwrap_or(Self::ASSUMED_LAST_LEVEL)
    }

    /// Last-level bytes per logical core a process can count on holding
    /// its data in: the most any current x86 or arm64 server part gives a
    /// core (Zen 4 and Zen 5: 32 MiB per 8-core CCD).
    pub const SHARE_PER_CORE: u32 = 4 << 20;

    /// The part of the last level that `logical_cores` cores can keep
    /// data in: [`Caches::last_level_or_assumed`], but at most
    /// [`Caches::SHARE_PER_CORE`] per core. A large L3 is shared with
    /// cores this process does not run on (in a virtual machine, other
    /// tenants'): a 2-vCPU KVM guest measured here (family 6 model 167)
    /// reports the socket's 480 MiB, yet reads 143 MB at DRAM speed.
    pub fn last_level_share(&self, logical_cores: u32) -> u32 {
        self.last_level_or_assumed()
            .min(Self::SHARE_PER_CORE.saturating_mul(logical_cores.max(1)))
    }
}

/// What this machine is, as detected once per process by [`host`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Host {
    /// Instruction set.
    pub isa: Isa,
    /// Operating system.
    pub os: Os,
    /// CPU vendor: the CPUID vendor string on x86 (`"AuthenticAMD"`,
    /// `"GenuineIntel"`), the MIDR implementer on arm64 (`"ARM"`, `"Apple"`),
    /// `"unknown"` when nothing says.
    pub vendor: String,
    /// CPU model: the CPUID brand string on x86, `machdep.cpu.brand_string`
    /// on macOS, `"part 0x..."` from `/proc/cpuinfo` on arm64 Linux,
    /// `"unknown"` when nothing says.
    pub model: String,
    /// Features supported by both the CPU and the OS.
    pub features: Features,
    /// Cache geometry.
    pub caches: Caches,
    /// Logical cores this process may run on (`available_parallelism`, which
    /// respects affinity masks and cgroup quotas); at least 1.
    pub logical_cores: u32,
}

impl Host {
    /// Whether `feature` is usable here.
    pub fn has(&self, feature: Feature) -> bool {
        self.features.contains(feature)
    }

    /// The stable fingerprint of this host: see [`Fingerprint`] for what it
    /// covers and how it is computed.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(self)
    }

    /// Detects the host now (uncached; [`host`] caches it).
    pub fn detect() -> Host {
        detect::detect()
    }
}

/// The host this process runs on, detected on first use.
pub fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(Host::detect)
}

#[cfg(test)]
mod tests;
