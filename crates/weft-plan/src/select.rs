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
//!    the reference among them is kept — unless the tie is only a shared
//!    roofline floor that hides the reference's own cycles: when the
//!    model's cycles under the floor ([`Quote::model_cycles`]) put
//!    another tied candidate below the reference, the tied ones race in a
//!    knockout, the reference with them (it is kept if no race tells). If
//!    the reference is dearer, the tied ones race in a knockout.
//! 4. The cheapest wins when the runner-up is dearer by more than the
//!    separation (relative gap); otherwise the two race.

/// A candidate's price as the rule reads it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quote {
    /// The price: the model's cycles or the roofline floor, the larger.
    pub cycles: f64,
    /// The model's own cycles, before the floor: what still tells two
    /// bodies apart when the floor prices both.
    pub model_cycles: f64,
}

impl Quote {
    /// A price with no floor under it (`model_cycles == cycles`).
    pub fn bare(cycles: f64) -> Quote {
        Quote {
            cycles,
            model_cycles: cycles,
        }
    }
}

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
    /// These candidates, the reference among them, are priced exactly
    /// alike by a roofline floor, under which another's own cycles are
    /// lower than the reference's.
    Floor {
        /// The price, cycles.
        cycles: f64,
    },
}

/// Decide among candidates priced `quotes` (`None`: unpriced; index 0 is
/// the reference) with the model's `separation`.
pub fn decide(quotes: &[Option<Quote>], separation: f64) -> Decision {
    let cycles: Vec<Option<f64>> = quotes.iter().map(|q| q.map(|q| q.cycles)).collect();
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
        let own = |i: usize| quotes[i].map_or(f64::INFINITY, |q| q.model_cycles);
        let hidden = best == 0 && cheapest.iter().any(|&i| own(i) < own(0));
        return if hidden {
            Decision::Knockout {
                among: cheapest,
                why: Unordered::Floor { cycles: min },
            }
        } else if best == 0 {
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
    use super::{decide, Decision, Quote, Unordered};

    /// Prices with no floor under them.
    fn bare(cycles: &[Option<f64>]) -> Vec<Option<Quote>> {
        cycles.iter().map(|c| c.map(Quote::bare)).collect()
    }

    /// A price at a roofline floor of `floor` over `model` cycles.
    fn floored(floor: f64, model: f64) -> Option<Quote> {
        Some(Quote {
            cycles: floor.max(model),
            model_cycles: model,
        })
    }

    #[test]
    fn a_floor_that_hides_the_reference_s_own_cycles_sends_the_tied_to_a_knockout() {
        // Everyone at the floor, the reference's own cycles the highest.
        let d = decide(
            &[
                floored(100.0, 80.0),
                floored(100.0, 10.0),
                floored(100.0, 20.0),
            ],
            0.03,
        );
        assert_eq!(
            d,
            Decision::Knockout {
                among: vec![0, 1, 2],
                why: Unordered::Floor { cycles: 100.0 }
            }
        );
        // The reference the lowest under the floor: kept, as on any tie.
        let d = decide(&[floored(100.0, 10.0), floored(100.0, 80.0)], 0.03);
        assert_eq!(
            d,
            Decision::ExactTie {
                count: 2,
                cycles: 100.0
            }
        );
        // Alike under the floor too: an exact tie.
        let d = decide(&[floored(100.0, 50.0), floored(100.0, 50.0)], 0.03);
        assert_eq!(
            d,
            Decision::ExactTie {
                count: 2,
                cycles: 100.0
            }
        );
    }

    #[test]
    fn one_candidate_is_chosen_without_looking_at_prices() {
        assert_eq!(decide(&bare(&[None]), 0.03), Decision::Only);
        assert_eq!(decide(&bare(&[Some(5.0)]), 0.03), Decision::Only);
    }

    #[test]
    fn an_exact_tie_keeps_the_reference_even_when_within_separation_of_nothing() {
        let d = decide(&bare(&[Some(100.0), Some(100.0), Some(500.0)]), 0.03);
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
        let d = decide(&bare(&[Some(900.0), Some(100.0), Some(100.0)]), 0.03);
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
        let d = decide(&bare(&[None, Some(1.0)]), 0.03);
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
        match decide(&bare(&[Some(100.0), Some(90.0)]), 0.03) {
            Decision::Cheapest { best, runner, .. } => assert_eq!((best, runner), (1, 0)),
            d => panic!("{d:?}"),
        }
        assert_eq!(
            decide(&bare(&[Some(100.0), Some(98.0)]), 0.03),
            Decision::TooClose {
                first: 0,
                second: 1
            }
        );
    }

    #[test]
    fn unpriced_others_leave_the_priced_reference_alone() {
        assert_eq!(
            decide(&bare(&[Some(100.0), None]), 0.03),
            Decision::OnlyPriced { best: 0 }
        );
    }
}
