//! The planner's races: when prices cannot order candidates, a cached
//! micro-race on the family's workbench does (a knockout among many, or a
//! pair too close to call).

use std::sync::Arc;

use weft_kernel::{FamilyEntry, Refusal, Residency, Site, Workbench};

use super::{Cand, Planner};
use crate::cache::{GeometryClass, RaceKey, SavedRace};
use crate::race::{race, Evictor, Side};
use crate::report::{CandidateReport, RaceReport, Rule};

impl Planner {
    /// When prices cannot order `among` (the reference unpriced, or several
    /// priced exactly alike), they race instead: the first against the next
    /// in registration order, the winner going on (a knockout of short
    /// races, each cached). Without racing (or a bench), or when no race
    /// tells, the first of `among` is kept for the reason `kept` gives.
    pub(super) fn knockout(
        &mut self,
        entry: &FamilyEntry,
        cands: &[Cand],
        among: &[usize],
        site: &Site,
        reports: &mut [CandidateReport],
        kept: impl FnOnce() -> String,
    ) -> (usize, Rule, String) {
        let first = among[0];
        let keep = |why: String| {
            let rule = if cands[first].price().is_none() {
                Rule::Unpriced
            } else {
                Rule::ExactTie
            };
            (first, rule, why)
        };
        if !self.options.racing || entry.arms[cands[first].arm].bench.is_none() {
            return keep(kept());
        }
        let mut champion = first;
        let mut last = None;
        for &challenger in &among[1..] {
            let (a, b) = (champion.min(challenger), champion.max(challenger));
            let (i, rule, why) = self.race_pair(entry, cands, a, b, site, reports);
            if rule == Rule::Race {
                champion = i;
                last = Some(why);
            }
        }
        match last {
            Some(why) if cands[first].price().is_none() => (
                champion,
                Rule::Race,
                format!(
                    "{} cannot be priced, so they raced: {why}",
                    cands[first].name
                ),
            ),
            Some(why) => (champion, Rule::Race, why),
            None => keep(kept()),
        }
    }

    /// Race `cands[first]` against `cands[second]` (`first` the earlier),
    /// from the cache when it holds the result; the earlier is kept when
    /// the race cannot run or cannot tell them apart.
    pub(super) fn race_pair(
        &mut self,
        entry: &FamilyEntry,
        cands: &[Cand],
        first: usize,
        second: usize,
        site: &Site,
        reports: &mut [CandidateReport],
    ) -> (usize, Rule, String) {
        let keep = |why: String| (first, Rule::RaceTie, why);
        let key = RaceKey::new(
            cands[first].hash,
            cands[second].hash,
            GeometryClass::of(&site.geometry),
            site.residency,
        );
        let (saved, cached) = match self.cache.race(&key) {
            Some(s) => {
                self.stats.race_hits += 1;
                (s.clone(), true)
            }
            None if self.options.saved_only => {
                return keep("too close to call and no saved race; the earlier is kept".into())
            }
            None => match self.run_race(entry, &cands[first], &cands[second], site.residency) {
                Ok(s) => {
                    self.stats.races += 1;
                    self.cache.put_race(key.clone(), s.clone());
                    (s, false)
                }
                Err(r) => {
                    return keep(format!("too close to call and the race could not run: {r}"))
                }
            },
        };
        let ns_of = |c: &Cand| {
            if c.hash == key.a {
                saved.a_ns
            } else {
                saved.b_ns
            }
        };
        for (me, other) in [(first, second), (second, first)] {
            reports[cands[me].report].race = Some(RaceReport {
                against: cands[other].name.to_owned(),
                ns: ns_of(&cands[me]),
                against_ns: ns_of(&cands[other]),
                rounds: saved.rounds,
                cached,
            });
        }
        match saved.winner {
            Some(w) if w == cands[second].hash && w != cands[first].hash => (
                second,
                Rule::Race,
                format!(
                    "{} won a race against {}",
                    cands[second].name, cands[first].name
                ),
            ),
            Some(_) => (
                first,
                Rule::Race,
                format!(
                    "{} won a race against {}",
                    cands[first].name, cands[second].name
                ),
            ),
            None => keep(format!(
                "a race against {} could not tell them apart; the earlier is kept",
                cands[second].name
            )),
        }
    }

    fn run_race(
        &mut self,
        entry: &FamilyEntry,
        a: &Cand,
        b: &Cand,
        residency: Residency,
    ) -> Result<SavedRace, Refusal> {
        // Both bodies must run on one bench: same argument struct, same
        // packed layouts (always so for an arm and its twins).
        if a.offer.contract.args != b.offer.contract.args
            || a.offer
                .packed
                .iter()
                .map(|p| p.layout)
                .ne(b.offer.packed.iter().map(|p| p.layout))
        {
            return Err(Refusal::RaceOperandsDiffer {
                a: a.name.to_owned(),
                b: b.name.to_owned(),
            });
        }
        let bench: &Arc<dyn Workbench> =
            entry.arms[a.arm]
                .bench
                .as_ref()
                .ok_or_else(|| Refusal::NoBench {
                    arm: entry.arms[a.arm].arm.name().to_owned(),
                })?;
        let mut prepared = bench.prepare(&a.offer, self.options.seed)?;
        let pa = self.placed_code(&a.code, a.hash)?;
        let pb = self.placed_code(&b.code, b.hash)?;
        let evictor = match residency {
            Residency::Cached => None,
            Residency::Streamed => Some(
                &*self
                    .evictor
                    .get_or_insert_with(|| Evictor::for_host(&self.host)),
            ),
        };
        // SAFETY: both bodies were built by an `Arm` or `Twin` for an offer
        // of this site taking the same argument struct and operand layouts
        // (checked above) as the offer `prepared` was made for.
        let out = unsafe {
            race(
                prepared.as_mut(),
                &pa,
                &pb,
                &self.options.race_budget,
                evictor,
            )?
        };
        let (ha, hb) = (a.hash, b.hash);
        let winner = out.winner.map(|s| match s {
            Side::A => ha,
            Side::B => hb,
        });
        let (a_ns, b_ns) = if ha <= hb {
            (out.a_ns, out.b_ns)
        } else {
            (out.b_ns, out.a_ns)
        };
        Ok(SavedRace {
            winner,
            a_ns,
            b_ns,
            rounds: out.rounds,
        })
    }
}
