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

use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_kernel::{Bench, PlacedCode, Refusal};

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

/// Race `a` against `b` on `bench`.
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
) -> Result<RaceOutcome, Refusal> {
    let start = Instant::now();
    let mut time = |code: &Arc<PlacedCode>, calls: u32| -> Result<f64, Refusal> {
        let t = Instant::now();
        for _ in 0..calls {
            // SAFETY: the caller promises both bodies were built for the
            // offer `bench` was prepared for.
            unsafe { bench.run(code)? };
        }
        Ok(t.elapsed().as_nanos() as f64 / f64::from(calls))
    };
    // Warm up and size the samples from the slower side.
    let once = time(a, 1)?.max(time(b, 1)?).max(1.0);
    let calls = ((budget.min_sample.as_nanos() as f64 / once).ceil() as u32).clamp(1, 1 << 16);
    let mut sa = Vec::new();
    let mut sb = Vec::new();
    let mut rounds = 0u32;
    while rounds < budget.max_rounds
        && (rounds < budget.min_rounds || start.elapsed() < budget.max_time)
    {
        if rounds.is_multiple_of(2) {
            sa.push(time(a, calls)?);
            sb.push(time(b, calls)?);
        } else {
            sb.push(time(b, calls)?);
            sa.push(time(a, calls)?);
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
    use super::median;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }
}
