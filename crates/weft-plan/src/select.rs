//! The selection rule, as a pure function of prices: which candidate the
//! prices choose, or which candidates only a race can order. The planner
//! runs the races this asks for; nothing here measures, caches or builds.
//!
//! The rule, in order:
//!
//! 1. One candidate: it.
//! 2. The reference (index 0: the shipped arm in stage 1, the chosen arm in
//!    stage 2) cannot be priced: nothing can be shown cheaper than it, so
//!    every candidate races (a knockout) or the reference is kept.
//! 3. **Exact tie first**: when several candidates share the lowest price,
//!    the reference among them is kept; if the reference is dearer, the
//!    tied ones (a shared roofline floor) race in a knockout.
//! 4. The cheapest wins when the runner-up is dearer by more than the
//!    separation (relative gap); otherwise the two race.

/// What the prices decide among a site's candidates.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// One candidate: it.
    Only,
    /// One candidate is priced and the reference is among the priced:
    /// it (the others could not be priced).
    OnlyPriced {
        /// Its index.
        best: usize,
    },
    /// The reference shares the lowest price with others: it is kept.
    ExactTie {
        /// How many share the price.
        count: usize,
        /// The price, cycles.
        cycles: f64,
    },
    /// Cheapest by more than the separation.
    Cheapest {
        /// The cheapest.
        best: usize,
        /// The runner-up.
        runner: usize,
        /// The cheapest's cycles.
        cycles: f64,
        /// `(runner - best) / best`.
        gap: f64,
    },
    /// Within the separation: `first` (the earlier) races `second`.
    TooClose {
        /// The earlier of the two.
        first: usize,
        /// The later.
        second: usize,
    },
    /// Prices cannot order these: they race one after another (the first
    /// is kept if no race tells).
    Knockout {
        /// The candidates, in registration order.
        among: Vec<usize>,
        /// Why prices could not order them.
        why: Unordered,
    },
}

/// Why prices could not order a [`Decision::Knockout`].
#[derive(Clone, Debug, PartialEq)]
pub enum Unordered {
    /// The reference has no price.
    ReferenceUnpriced,
    /// These candidates are priced exactly alike below the reference.
    Tied {
        /// The price, cycles.
        cycles: f64,
    },
}

/// Decide among candidates priced `cycles` (`None`: unpriced; index 0 is
/// the reference) with the model's `separation`.
pub fn decide(cycles: &[Option<f64>], separation: f64) -> Decision {
    if cycles.len() <= 1 {
        return Decision::Only;
    }
    if cycles[0].is_none() {
        return Decision::Knockout {
            among: (0..cycles.len()).collect(),
            why: Unordered::ReferenceUnpriced,
        };
    }
    let priced: Vec<(usize, f64)> = cycles
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.map(|c| (i, c)))
        .collect();
    let min = priced.iter().map(|&(_, c)| c).fold(f64::INFINITY, f64::min);
    // Exact tie, before anything else: stable index order puts the
    // reference first among the cheapest.
    let cheapest: Vec<usize> = priced
        .iter()
        .filter(|&&(_, c)| c == min)
        .map(|&(i, _)| i)
        .collect();
    let best = cheapest[0];
    if cheapest.len() > 1 {
        return if best == 0 {
            Decision::ExactTie {
                count: cheapest.len(),
                cycles: min,
            }
        } else {
            Decision::Knockout {
                among: cheapest,
                why: Unordered::Tied { cycles: min },
            }
        };
    }
    let runner = priced
        .iter()
        .filter(|&&(i, _)| i != best)
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
        .copied();
    let Some((runner, rc)) = runner else {
        return Decision::OnlyPriced { best };
    };
    let gap = (rc - min) / min.max(f64::MIN_POSITIVE);
    if gap > separation {
        Decision::Cheapest {
            best,
            runner,
            cycles: min,
            gap,
        }
    } else {
        Decision::TooClose {
            first: best.min(runner),
            second: best.max(runner),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{decide, Decision, Unordered};

    #[test]
    fn one_candidate_is_chosen_without_looking_at_prices() {
        assert_eq!(decide(&[None], 0.03), Decision::Only);
        assert_eq!(decide(&[Some(5.0)], 0.03), Decision::Only);
    }

    #[test]
    fn an_exact_tie_keeps_the_reference_even_when_within_separation_of_nothing() {
        let d = decide(&[Some(100.0), Some(100.0), Some(500.0)], 0.03);
        assert_eq!(
            d,
            Decision::ExactTie {
                count: 2,
                cycles: 100.0
            }
        );
    }

    #[test]
    fn others_tied_below_the_reference_race_in_a_knockout() {
        let d = decide(&[Some(900.0), Some(100.0), Some(100.0)], 0.03);
        assert_eq!(
            d,
            Decision::Knockout {
                among: vec![1, 2],
                why: Unordered::Tied { cycles: 100.0 }
            }
        );
    }

    #[test]
    fn an_unpriced_reference_sends_everyone_to_a_knockout() {
        let d = decide(&[None, Some(1.0)], 0.03);
        assert_eq!(
            d,
            Decision::Knockout {
                among: vec![0, 1],
                why: Unordered::ReferenceUnpriced
            }
        );
    }

    #[test]
    fn the_cheapest_wins_only_beyond_the_separation() {
        match decide(&[Some(100.0), Some(90.0)], 0.03) {
            Decision::Cheapest { best, runner, .. } => assert_eq!((best, runner), (1, 0)),
            d => panic!("{d:?}"),
        }
        assert_eq!(
            decide(&[Some(100.0), Some(98.0)], 0.03),
            Decision::TooClose {
                first: 0,
                second: 1
            }
        );
    }

    #[test]
    fn unpriced_others_leave_the_priced_reference_alone() {
        assert_eq!(
            decide(&[Some(100.0), None], 0.03),
            Decision::OnlyPriced { best: 0 }
        );
    }
}
