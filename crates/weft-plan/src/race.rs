//! The micro-race: when the cost model cannot separate two candidates,
//! run both on the family's workbench at the site's geometry and keep the
//! faster, if the difference is real.
//!
//! Protocol: one warm-up call each; a per-sample call count chosen so a
//! sample lasts at least [`RaceBudget::min_sample`] (so short kernels are
//! not timed at the clock's resolution); then interleaved rounds, the
//! order alternating each round (A B, B A, …), until
//! [`RaceBudget::max_rounds`] or the time budget, but never fewer than
//! [`RaceBudget::min_rounds`]. The statistic is the median nanoseconds per
//! call of each side; a side wins only if its median is lower by more than
//! [`RaceBudget::margin`], otherwise the race is a tie and the planner's
//! tie rule stands.
//!
//! A site whose data is streamed (see `weft_kernel::Residency`) is raced
//! cold: before every timed call an [`Evictor`] reads a buffer twice the
//! size of all cache levels together, and each sample is that one call, so both sides meet
//! their operands in main memory as the plan will.

use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_kernel::{Bench, Host, PlacedCode, Refusal};

/// The largest evictor made, whatever the host says (a reported cache of
/// gigabytes would otherwise cost that much memory and time per call).
const MAX_EVICTOR: usize = 512 << 20;

/// A buffer that, read end to end, leaves none of a race's operands in any
/// cache level.
pub struct Evictor {
    lines: Vec<u64>,
}

impl std::fmt::Debug for Evictor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Evictor({} bytes)", self.lines.len() * 8)
    }
}

impl Evictor {
    /// Twice `host`'s last-level cache (levels may be exclusive of each
    /// other, so the sum is what has to be displaced).
    pub fn for_host(host: &Host) -> Evictor {
        let c = &host.caches;
        // Where the host does not say, the assumed size is larger than most:
        // an evictor too large only costs time.
        let llc = c.last_level_or_assumed() as usize;
        let bytes = 2 * (llc + c.l2.unwrap_or(0) as usize + c.l1d.unwrap_or(0) as usize);
        Evictor::with_bytes(bytes.min(MAX_EVICTOR))
    }

    /// An evictor of `bytes` (rounded up to 8).
    pub fn with_bytes(bytes: usize) -> Evictor {
        // Written, not zeroed: untouched zero pages all map one physical
        // page and would evict nothing.
        Evictor {
            lines: (0..bytes.div_ceil(8) as u64).collect(),
        }
    }

    /// Read the buffer, one load per cache line.
    pub fn evict(&self) {
        let mut sum = 0u64;
        for line in self.lines.iter().step_by(8) {
            sum = sum.wrapping_add(*line);
        }
        std::hint::black_box(sum);
    }
}

/// How long and how hard a race may run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RaceBudget {
    /// Rounds at least (each round times both sides once).
    pub min_rounds: u32,
    /// Rounds at most.
    pub max_rounds: u32,
    /// Stop starting new rounds after this long (min_rounds still run).
    pub max_time: Duration,
    /// The shortest sample: calls are repeated until a sample lasts this long.
    pub min_sample: Duration,
    /// Relative gap of the medians below which the race is a tie.
    pub margin: f64,
}

impl Default for RaceBudget {
    fn default() -> Self {
        RaceBudget {
            min_rounds: 7,
            max_rounds: 31,
            max_time: Duration::from_millis(60),
            min_sample: Duration::from_micros(50),
            margin: 0.02,
        }
    }
}

/// Which side of a race.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The first body given.
    A,
    /// The second body given.
    B,
}

/// What a race measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RaceOutcome {
    /// Median nanoseconds per call of A.
    pub a_ns: f64,
    /// Median nanoseconds per call of B.
    pub b_ns: f64,
    /// Rounds run.
    pub rounds: u32,
    /// The faster side, if faster by more than the margin.
    pub winner: Option<Side>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Race `a` against `b` on `bench`; with an `evictor`, every timed call
/// starts from caches it has emptied (one call per sample).
///
/// # Safety
///
/// `a` and `b` must be bodies built (by an `Arm` or `Twin`) for the offer
/// `bench` was prepared for.
pub unsafe fn race(
    bench: &mut dyn Bench,
    a: &Arc<PlacedCode>,
    b: &Arc<PlacedCode>,
    budget: &RaceBudget,
    evictor: Option<&Evictor>,
) -> Result<RaceOutcome, Refusal> {
    race_sides(
        &mut |side| {
            let code = match side {
                Side::A => a,
                Side::B => b,
            };
            // SAFETY: the caller promises both bodies were built for the
            // offer `bench` was prepared for.
            unsafe { bench.run(code) }
        },
        budget,
        evictor,
    )
}

/// The race protocol (module docs) over two sides that `run` runs once
/// each call: a body on a bench ([`race`]), or a whole chain of bodies
/// against the fused body that replaces it (a region's race).
pub fn race_sides(
    run: &mut dyn FnMut(Side) -> Result<(), Refusal>,
    budget: &RaceBudget,
    evictor: Option<&Evictor>,
) -> Result<RaceOutcome, Refusal> {
    let start = Instant::now();
    let mut time = |side: Side, calls: u32| -> Result<f64, Refusal> {
        if let Some(e) = evictor {
            e.evict();
        }
        let t = Instant::now();
        for _ in 0..calls {
            run(side)?;
        }
        Ok(t.elapsed().as_nanos() as f64 / f64::from(calls))
    };
    // Warm up and size the samples from the slower side.
    let once = time(Side::A, 1)?.max(time(Side::B, 1)?).max(1.0);
    let calls = match evictor {
        // A second call would find the first one's data in cache.
        Some(_) => 1,
        None => ((budget.min_sample.as_nanos() as f64 / once).ceil() as u32).clamp(1, 1 << 16),
    };
    let mut sa = Vec::new();
    let mut sb = Vec::new();
    let mut rounds = 0u32;
    while rounds < budget.max_rounds
        && (rounds < budget.min_rounds || start.elapsed() < budget.max_time)
    {
        if rounds.is_multiple_of(2) {
            sa.push(time(Side::A, calls)?);
            sb.push(time(Side::B, calls)?);
        } else {
            sb.push(time(Side::B, calls)?);
            sa.push(time(Side::A, calls)?);
        }
        rounds += 1;
    }
    let (a_ns, b_ns) = (median(&mut sa), median(&mut sb));
    let winner = if a_ns * (1.0 + budget.margin) < b_ns {
        Some(Side::A)
    } else if b_ns * (1.0 + budget.margin) < a_ns {
        Some(Side::B)
    } else {
        None
    };
    Ok(RaceOutcome {
        a_ns,
        b_ns,
        rounds,
        winner,
    })
}

#[cfg(test)]
mod tests {
    use super::{median, race_sides, Evictor, RaceBudget, Side};

    #[test]
    fn race_sides_times_both_sides_interleaved_and_names_the_faster() {
        let spin = |n: u64| {
            let mut x = 0u64;
            for i in 0..n {
                x = std::hint::black_box(x.wrapping_add(i));
            }
            x
        };
        let mut calls = [0u32; 2];
        let budget = RaceBudget {
            max_time: std::time::Duration::from_millis(5),
            min_rounds: 3,
            ..RaceBudget::default()
        };
        let out = race_sides(
            &mut |side| {
                match side {
                    Side::A => {
                        calls[0] += 1;
                        spin(20_000);
                    }
                    Side::B => {
                        calls[1] += 1;
                        spin(200);
                    }
                }
                Ok(())
            },
            &budget,
            None,
        )
        .expect("race");
        assert_eq!(out.winner, Some(Side::B), "{out:?}");
        assert!(out.rounds >= 3 && calls[0] > 3 && calls[1] > 3);
        let fail = race_sides(
            &mut |_| {
                Err(weft_kernel::Refusal::NoBench {
                    arm: "x".to_owned(),
                })
            },
            &budget,
            None,
        );
        assert_eq!(fail.expect_err("refused").name(), "no-bench");
    }

    #[test]
    fn an_evictor_covers_twice_the_caches_and_is_capped() {
        let mut host = weft_kernel::Host::detect();
        host.caches.l1d = Some(32 << 10);
        host.caches.l2 = Some(1 << 20);
        host.caches.l3 = Some(32 << 20);
        let e = Evictor::for_host(&host);
        assert_eq!(e.lines.len() * 8, 2 * ((32 << 20) + (1 << 20) + (32 << 10)));
        host.caches.l3 = Some(2 << 30);
        assert_eq!(Evictor::for_host(&host).lines.len() * 8, super::MAX_EVICTOR);
    }

    #[test]
    fn an_evictor_is_written_so_its_pages_are_real() {
        let e = Evictor::with_bytes(1 << 20);
        assert_eq!(e.lines.len(), 1 << 17);
        // Distinct values: no page of it can be the shared zero page.
        assert!(e.lines.iter().enumerate().all(|(i, &v)| v == i as u64));
        e.evict();
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }
}
