//! Planning a region: its members as sites, then the choice between the
//! chain and the fused site by [`decide`], racing them when it asks (see
//! [`crate::Region`]).

use std::sync::Arc;

use weft_kernel::{Bench, PlacedCode, Refusal, Residency, Workbench};

use super::Planner;
use crate::cache::{GeometryClass, RaceKey, SavedRace};
use crate::hash::ContentHash;
use crate::plan::{CompiledSite, Kind};
use crate::race::{race_sides, Evictor, Side};
use crate::region::{Alternative, CompiledRegion, Member, Region};
use crate::report::{AlternativeReport, RaceReport, RegionReport, Rule, SiteReport};
use crate::select::{decide, Decision, Quote};
use crate::PlanError;

/// A chosen alternative, the rule, the reason and the race if one ran.
type Chosen = (Alternative, Rule, String, Option<RaceReport>);

/// The price the rule reads for a compiled site.
fn quote(s: &CompiledSite) -> Option<Quote> {
    let p = s.price?;
    Some(Quote {
        cycles: p.cycles,
        model_cycles: s.model_cycles.unwrap_or(p.cycles),
    })
}

fn hash_of(s: &CompiledSite) -> ContentHash {
    ContentHash::of(&s.code.bytes)
}

impl Planner {
    /// Plan `region`'s members as sites (appended to `compiled` and
    /// `reports`) and choose between its chain and its fused site.
    pub(super) fn plan_region(
        &mut self,
        region: &Region,
        compiled: &mut Vec<CompiledSite>,
        reports: &mut Vec<SiteReport>,
    ) -> Result<(CompiledRegion, RegionReport), PlanError> {
        if region.chain.is_empty() {
            return Err(PlanError::BadRegion {
                label: region.label.clone(),
                reason: "its chain has no site".to_owned(),
            });
        }
        let mut chain = Vec::with_capacity(region.chain.len());
        for m in region.chain.iter().chain([&region.fused]) {
            let index = compiled.len();
            let (c, r) = self.plan_site(index, &m.site)?;
            compiled.push(c);
            reports.push(r);
            chain.push(index);
        }
        let fused = chain.pop().unwrap_or_default();
        let chain_quotes: Option<Vec<Quote>> = chain.iter().map(|&i| quote(&compiled[i])).collect();
        let chain_quote = chain_quotes.map(|qs| Quote {
            cycles: qs.iter().map(|q| q.cycles).sum(),
            model_cycles: qs.iter().map(|q| q.model_cycles).sum(),
        });
        let fused_quote = quote(&compiled[fused]);
        let (choice, rule, reason, race) =
            match decide(&[chain_quote, fused_quote], self.options.separation) {
                // Two candidates: `Only` cannot happen; kept as the chain.
                Decision::Only => (
                    Alternative::Chain,
                    Rule::Only,
                    "the chain alone".to_owned(),
                    None,
                ),
                Decision::OnlyPriced { .. } => (
                    Alternative::Chain,
                    Rule::Only,
                    "the fused site cannot be priced; the chain is kept".to_owned(),
                    None,
                ),
                Decision::ExactTie { cycles, .. } => (
                    Alternative::Chain,
                    Rule::ExactTie,
                    format!("chain and fused priced exactly {cycles:.0} cycles; the chain is kept"),
                    None,
                ),
                Decision::Cheapest {
                    best, cycles, gap, ..
                } => {
                    let (alt, other) = if best == 0 {
                        (Alternative::Chain, "the fused site")
                    } else {
                        (Alternative::Fused, "the chain")
                    };
                    (
                        alt,
                        Rule::Cheapest,
                        format!(
                            "cheapest at {cycles:.0} cycles, {:.1}% below {other}",
                            100.0 * gap / (1.0 + gap)
                        ),
                        None,
                    )
                }
                Decision::TooClose { .. } | Decision::Knockout { .. } if !self.options.racing => (
                    Alternative::Chain,
                    Rule::RaceTie,
                    "prices cannot choose and racing is off; the chain is kept".to_owned(),
                    None,
                ),
                Decision::TooClose { .. } | Decision::Knockout { .. } => {
                    let why = if chain_quote.is_none() {
                        "the chain cannot be priced"
                    } else {
                        "prices too close to call"
                    };
                    let (alt, rule, reason, race) =
                        self.race_region(region, compiled, &chain, fused);
                    (alt, rule, format!("{why}: {reason}"), race)
                }
            };
        let alternative = |sites: &[usize], q: Option<Quote>| AlternativeReport {
            sites: sites
                .iter()
                .map(|&i| (i, compiled[i].candidate.to_owned()))
                .collect(),
            cycles: q.map(|q| q.cycles),
        };
        let report = RegionReport {
            label: region.label.clone(),
            chain: alternative(&chain, chain_quote),
            fused: alternative(&[fused], fused_quote),
            chosen: choice,
            rule,
            reason,
            race,
        };
        let compiled_region = CompiledRegion {
            label: region.label.clone(),
            chain,
            fused,
            choice,
            rule,
            chain_cycles: chain_quote.map(|q| q.cycles),
            fused_cycles: fused_quote.map(|q| q.cycles),
        };
        Ok((compiled_region, report))
    }

    /// Race the chain's bodies, called in order, against the fused body:
    /// from the cache when it holds the race, else on the members'
    /// workbenches. The chain is kept when the race cannot run or tell.
    fn race_region(
        &mut self,
        region: &Region,
        compiled: &[CompiledSite],
        chain: &[usize],
        fused: usize,
    ) -> Chosen {
        let keep = |why: String| (Alternative::Chain, Rule::RaceTie, why, None);
        let chain_hash = ContentHash::of_value(
            &chain
                .iter()
                .map(|&i| hash_of(&compiled[i]))
                .collect::<Vec<_>>(),
        );
        let fused_hash = hash_of(&compiled[fused]);
        let residency = if chain
            .iter()
            .chain([&fused])
            .any(|&i| compiled[i].residency == Residency::Streamed)
        {
            Residency::Streamed
        } else {
            Residency::Cached
        };
        let key = RaceKey::new(
            chain_hash,
            fused_hash,
            GeometryClass::of(&compiled[fused].geometry),
            residency,
        );
        let (saved, cached) = match self.cache.race(&key) {
            Some(s) => {
                self.stats.race_hits += 1;
                (s.clone(), true)
            }
            None if self.options.saved_only => {
                return keep("no saved race; the chain is kept".to_owned())
            }
            None => {
                let members: Vec<(&Member, &CompiledSite)> = region
                    .chain
                    .iter()
                    .zip(chain)
                    .chain([(&region.fused, &fused)])
                    .map(|(m, &i)| (m, &compiled[i]))
                    .collect();
                match self.run_region_race(&members, residency) {
                    Ok((chain_ns, fused_ns, rounds, winner)) => {
                        self.stats.races += 1;
                        let winner = winner.map(|s| match s {
                            Side::A => chain_hash,
                            Side::B => fused_hash,
                        });
                        let (a_ns, b_ns) = if chain_hash <= fused_hash {
                            (chain_ns, fused_ns)
                        } else {
                            (fused_ns, chain_ns)
                        };
                        let s = SavedRace {
                            winner,
                            a_ns,
                            b_ns,
                            rounds,
                        };
                        self.cache.put_race(key.clone(), s.clone());
                        (s, false)
                    }
                    Err(r) => {
                        return keep(format!("the race could not run: {r}; the chain is kept"))
                    }
                }
            }
        };
        let ns = |h: ContentHash| if h == key.a { saved.a_ns } else { saved.b_ns };
        let race = Some(RaceReport {
            against: "fused".to_owned(),
            ns: ns(chain_hash),
            against_ns: ns(fused_hash),
            rounds: saved.rounds,
            cached,
        });
        match saved.winner {
            Some(w) if w == fused_hash && w != chain_hash => (
                Alternative::Fused,
                Rule::Race,
                "the fused site won a race against the chain".to_owned(),
                race,
            ),
            Some(_) => (
                Alternative::Chain,
                Rule::Race,
                "the chain won a race against the fused site".to_owned(),
                race,
            ),
            None => (
                Alternative::Chain,
                Rule::RaceTie,
                "a race could not tell chain and fused apart; the chain is kept".to_owned(),
                race,
            ),
        }
    }

    /// The workbench `member`'s bodies run on: its own, else the one its
    /// chosen arm registered.
    fn member_bench(&self, member: &Member, site: &CompiledSite) -> Option<Arc<dyn Workbench>> {
        if let Some(b) = &member.bench {
            return Some(Arc::clone(b));
        }
        let arm = match &site.kind {
            Kind::Arm => site.candidate,
            Kind::Twin { arm } => arm.as_str(),
        };
        self.catalogue
            .family(member.site.family)?
            .arms
            .iter()
            .find(|a| a.arm.name() == arm)?
            .bench
            .clone()
    }

    /// Time the chain (side A: its bodies one after another, each on its
    /// member's bench) against the fused body (side B).
    fn run_region_race(
        &mut self,
        members: &[(&Member, &CompiledSite)],
        residency: Residency,
    ) -> Result<(f64, f64, u32, Option<Side>), Refusal> {
        let mut prepared: Vec<(Box<dyn Bench>, Arc<PlacedCode>)> = Vec::new();
        for (m, site) in members {
            let bench = self.member_bench(m, site).ok_or_else(|| Refusal::NoBench {
                arm: site.candidate.to_owned(),
            })?;
            prepared.push((
                bench.prepare(&site.offer, self.options.seed)?,
                Arc::clone(&site.placed),
            ));
        }
        let evictor = match residency {
            Residency::Cached => None,
            Residency::Streamed => Some(
                &*self
                    .evictor
                    .get_or_insert_with(|| Evictor::for_host(&self.host)),
            ),
        };
        let fused_at = prepared.len() - 1;
        let out = race_sides(
            &mut |side| {
                let range = match side {
                    Side::A => 0..fused_at,
                    Side::B => fused_at..fused_at + 1,
                };
                for (bench, code) in &mut prepared[range] {
                    // SAFETY: each bench was prepared for the offer its
                    // site's chosen body was built (or emitted) for.
                    unsafe { bench.run(code)? };
                }
                Ok(())
            },
            &self.options.race_budget,
            evictor,
        )?;
        Ok((out.a_ns, out.b_ns, out.rounds, out.winner))
    }
}
