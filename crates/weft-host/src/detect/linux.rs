//! Linux: cache geometry from sysfs; arm64 identity from `/proc/cpuinfo`.

use std::fs;
use std::path::Path;

use super::PartialCaches;

const CACHE_DIR: &str = "/sys/devices/system/cpu/cpu0/cache";

fn read_trimmed(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// Parses sysfs sizes such as `48K`, `1024K`, `32M`, `512`.
pub(crate) fn parse_size(text: &str) -> Option<u32> {
    let text = text.trim();
    let (digits, scale) = match text.as_bytes().last()? {
        b'K' | b'k' => (&text[..text.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&text[..text.len() - 1], 1u64 << 20),
        b'G' | b'g' => (&text[..text.len() - 1], 1u64 << 30),
        _ => (text, 1u64),
    };
    let value: u64 = digits.trim().parse().ok()?;
    u32::try_from(value.checked_mul(scale)?).ok()
}

/// Data and unified caches of cpu0 from
/// `/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size,coherency_line_size}`.
pub(crate) fn sysfs_caches() -> PartialCaches {
    let mut found = PartialCaches::default();
    let Ok(entries) = fs::read_dir(CACHE_DIR) else {
        return found;
    };
    let mut dirs: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("index"))
        })
        .collect();
    dirs.sort();
    for dir in dirs {
        let kind = read_trimmed(&dir.join("type"));
        if !matches!(kind.as_deref(), Some("Data" | "Unified")) {
            continue;
        }
        let level = read_trimmed(&dir.join("level")).and_then(|s| s.parse().ok());
        let size = read_trimmed(&dir.join("size")).and_then(|s| parse_size(&s));
        let line = read_trimmed(&dir.join("coherency_line_size")).and_then(|s| s.parse().ok());
        if let (Some(level), Some(size)) = (level, size) {
            found.record(level, size, line);
        }
    }
    found
}

/// The vendor name of an arm64 MIDR implementer code.
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
pub(crate) fn implementer_name(code: u32) -> Option<&'static str> {
    Some(match code {
        0x41 => "ARM",
        0x42 => "Broadcom",
        0x43 => "Cavium",
        0x46 => "Fujitsu",
        0x48 => "HiSilicon",
        0x4e => "NVIDIA",
        0x50 => "APM",
        0x51 => "Qualcomm",
        0x61 => "Apple",
        0x6d => "Microsoft",
        0xc0 => "Ampere",
        _ => return None,
    })
}

/// (vendor, model) from the first `CPU implementer` and `CPU part` lines of
/// `/proc/cpuinfo` text.
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
pub(crate) fn parse_arm_cpuinfo(text: &str) -> (Option<String>, Option<String>) {
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == name).then(|| value.trim().to_string())
        })
    };
    let parse_hex = |s: &str| u32::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    let vendor =
        field("CPU implementer").map(|raw| match parse_hex(&raw).and_then(implementer_name) {
            Some(name) => name.to_string(),
            None => format!("implementer {raw}"),
        });
    let model = field("CPU part").map(|part| format!("part {part}"));
    (vendor, model)
}

/// (vendor, model) from a MIDR_EL1 value as sysfs prints it (`0x...`):
/// implementer in bits 31..24, part number in bits 15..4.
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
pub(crate) fn parse_midr(text: &str) -> (Option<String>, Option<String>) {
    let Ok(midr) = u64::from_str_radix(text.trim().trim_start_matches("0x"), 16) else {
        return (None, None);
    };
    let implementer = ((midr >> 24) & 0xff) as u32;
    let part = (midr >> 4) & 0xfff;
    let vendor = match implementer_name(implementer) {
        Some(name) => name.to_string(),
        None => format!("implementer {implementer:#x}"),
    };
    (Some(vendor), Some(format!("part {part:#05x}")))
}

/// (vendor, model) of this arm64 Linux machine: `/proc/cpuinfo`, else
/// cpu0's MIDR_EL1 from sysfs.
#[cfg(target_arch = "aarch64")]
pub(crate) fn arm_identity() -> (Option<String>, Option<String>) {
    let (vendor, model) = match fs::read_to_string("/proc/cpuinfo") {
        Ok(text) => parse_arm_cpuinfo(&text),
        Err(_) => (None, None),
    };
    if vendor.is_some() && model.is_some() {
        return (vendor, model);
    }
    let midr = read_trimmed(Path::new(
        "/sys/devices/system/cpu/cpu0/regs/identification/midr_el1",
    ));
    let (midr_vendor, midr_model) = midr.as_deref().map(parse_midr).unwrap_or((None, None));
    (vendor.or(midr_vendor), model.or(midr_model))
}
