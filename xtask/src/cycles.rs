//! Core cycles from the time-stamp counter, on a pinned thread.
//!
//! The TSC ticks at a fixed rate while the core's clock moves (boost,
//! power states, a hypervisor), so a tick count alone is not cycles. Every
//! measurement here is paired with a [`Calibration`]: a chain of dependent
//! register-to-register `add`s, one cycle each on every x86-64 core, timed
//! with the same counter right beside it. Its ticks per cycle turn the
//! measurement's ticks into cycles. The added operand is a register, not
//! an immediate: Intel cores since Golden Cove fold `add reg, imm` chains
//! at rename and run them about five a cycle (measured on a family 6
//! model 167 guest: 0.14 ticks an `add reg, 1` against 0.73 an
//! `add reg, reg`, and 0.73 a third of an `imul`), which made every
//! cycle count five times too high.

#![cfg(target_arch = "x86_64")]

use std::arch::asm;
use std::arch::x86_64::_rdtsc;

/// Dependent adds per loop iteration of the calibration chain.
const CHAIN: u64 = 16;

/// Read the time-stamp counter.
pub fn ticks() -> u64 {
    // SAFETY: RDTSC exists on every x86-64 CPU and only reads a counter.
    unsafe { _rdtsc() }
}

/// Pin the calling thread to the CPU it runs on now, so a measurement is
/// not migrated half way. Returns the CPU, or an error naming the call.
pub fn pin_current_thread() -> Result<usize, String> {
    // SAFETY: sched_getcpu takes no arguments and only reads state.
    let cpu = unsafe { libc::sched_getcpu() };
    if cpu < 0 {
        return Err("sched_getcpu failed".into());
    }
    // SAFETY: `set` is a zeroed cpu_set_t on our stack; CPU_SET writes one
    // bit inside it; sched_setaffinity reads `size_of` bytes of it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        return Err(format!(
            "sched_setaffinity failed: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(cpu as usize)
}

/// Run `iterations × 16` dependent one-cycle adds (register operands: an
/// immediate may be folded at rename, see the module docs).
fn add_chain(iterations: u64) {
    // SAFETY: the block touches only the three registers it declares and no
    // memory; it ends with them in a defined state.
    unsafe {
        asm!(
            "2:",
            "add {acc}, {one}", "add {acc}, {one}", "add {acc}, {one}", "add {acc}, {one}",
            "add {acc}, {one}", "add {acc}, {one}", "add {acc}, {one}", "add {acc}, {one}",
            "add {acc}, {one}", "add {acc}, {one}", "add {acc}, {one}", "add {acc}, {one}",
            "add {acc}, {one}", "add {acc}, {one}", "add {acc}, {one}", "add {acc}, {one}",
            "dec {n}",
            "jnz 2b",
            n = inout(reg) iterations.max(1) => _,
            acc = inout(reg) 0u64 => _,
            one = in(reg) 1u64,
            options(nomem, nostack),
        );
    }
}

/// Ticks per core cycle, measured now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Calibration {
    /// TSC ticks per core cycle.
    pub ticks_per_cycle: f64,
}

impl Calibration {
    /// Time a chain of about `cycles` dependent adds (the least of three
    /// runs, so an interrupt in one does not count).
    pub fn measure(cycles: u64) -> Calibration {
        let iterations = (cycles / CHAIN).max(1);
        let best = (0..3)
            .map(|_| {
                let t0 = ticks();
                add_chain(iterations);
                ticks() - t0
            })
            .min()
            .unwrap_or(1);
        Calibration {
            ticks_per_cycle: best as f64 / (iterations * CHAIN) as f64,
        }
    }

    /// `ticks` as core cycles.
    pub fn cycles(&self, ticks: f64) -> f64 {
        ticks / self.ticks_per_cycle
    }
}

/// The median (the mean of the middle two for an even count).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The least value.
pub fn minimum(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_add_chain_calibrates_to_a_plausible_clock() {
        let c = Calibration::measure(2_000_000);
        // A TSC between 0.1 and 10 ticks per core cycle covers every
        // x86-64 machine there is.
        assert!(c.ticks_per_cycle > 0.1 && c.ticks_per_cycle < 10.0, "{c:?}");
    }

    #[test]
    fn median_and_minimum_of_small_sets() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(minimum(&[4.0, 1.5, 2.0]), 1.5);
    }
}
