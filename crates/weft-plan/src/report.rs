//! The selection report: per site, every candidate with its verdict, its
//! price (and which model made it), its race if any, and the choice with
//! its reason — as serde data for tools and as a table for people.

use std::fmt;

use serde::{Deserialize, Serialize};
use weft_kernel::Residency;

/// The whole report of one compile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SelectionReport {
    /// The host's model string and fingerprint.
    pub host: String,
    /// `WEFT_NATIVE_EMIT` as the compile saw it.
    pub mode: String,
    /// Whether new validations and races were allowed.
    pub saved_only: bool,
    /// The cache file, if any, and its problem when it was not used.
    pub cache: CacheReport,
    /// Wall time of the compile, milliseconds.
    pub compile_ms: f64,
    /// One entry per site, in the plan's order (regions' members last).
    pub sites: Vec<SiteReport>,
    /// One entry per region: its two alternatives and the choice.
    #[serde(default)]
    pub regions: Vec<RegionReport>,
}

/// One region's alternatives and choice (see [`crate::Region`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegionReport {
    /// The caller's label.
    pub label: String,
    /// The chain: its sites and the sum of their chosen prices.
    pub chain: AlternativeReport,
    /// The fused site and its chosen price.
    pub fused: AlternativeReport,
    /// The alternative chosen.
    pub chosen: crate::Alternative,
    /// Which rule chose it.
    pub rule: Rule,
    /// The choice in words.
    pub reason: String,
    /// The race between them, if one was run or read from the cache
    /// (`ns` the chain's, `against_ns` the fused site's).
    pub race: Option<RaceReport>,
}

/// One alternative of a region.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlternativeReport {
    /// Its sites (indices into the report's sites) with the body each chose.
    pub sites: Vec<(usize, String)>,
    /// Its price, cycles (a chain's: the sum of its sites'), if every site
    /// has one.
    pub cycles: Option<f64>,
}

/// The cache as this compile found and left it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheReport {
    /// The file, if the cache has one.
    pub path: Option<String>,
    /// Why the file was ignored (`cache-corrupt: …`), once.
    pub problem: Option<String>,
    /// Verdicts read from the cache during this compile.
    pub verdict_hits: usize,
    /// Twins validated anew.
    pub validations: usize,
    /// Races read from the cache.
    pub race_hits: usize,
    /// Races run anew.
    pub races: usize,
    /// Bodies (arms' and twins') read from the cache instead of built.
    pub body_hits: usize,
    /// Bodies built (compiled or emitted) anew.
    pub builds: usize,
}

/// One site's candidates and choice.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SiteReport {
    /// Position in the plan.
    pub index: usize,
    /// The caller's label for the site (the family's name if it gave none).
    pub label: String,
    /// The family.
    pub family: String,
    /// The geometry, as `name=extent` pairs.
    pub geometry: String,
    /// Where the site's data is when it is called.
    pub residency: Residency,
    /// Every candidate the catalogue has for the family.
    pub candidates: Vec<CandidateReport>,
    /// The chosen candidate's name.
    pub chosen: String,
    /// Which rule chose it.
    pub rule: Rule,
    /// The choice in words.
    pub reason: String,
}

/// The rule that made a choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rule {
    /// No other candidate survived.
    Only,
    /// Cheapest by price, by more than the model's separation.
    Cheapest,
    /// Two or more cheapest candidates priced exactly alike: the shipped
    /// (first registered) one is kept.
    ExactTie,
    /// Prices too close to call; a micro-race (run now or cached) chose.
    Race,
    /// Prices too close to call and the race could not tell either (or
    /// could not run): the shipped one is kept.
    RaceTie,
    /// The reference could not be priced, so nothing can be shown cheaper.
    Unpriced,
}

/// One candidate at one site.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CandidateReport {
    /// Its name.
    pub name: String,
    /// For a twin, the arm whose offer it takes.
    pub arm: Option<String>,
    /// What happened to it before pricing.
    pub verdict: VerdictReport,
    /// Its price, or why it has none.
    pub price: Option<PriceReport>,
    /// The race it ran against the cheapest other candidate, if any.
    pub race: Option<RaceReport>,
}

/// What happened to a candidate before pricing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum VerdictReport {
    /// An arm that made an offer and built its body.
    Offered,
    /// A twin validated bit for bit against its arm.
    Validated {
        /// Cases run.
        cases: usize,
        /// Output words compared.
        words: usize,
        /// Whether the verdict came from the cache.
        cached: bool,
    },
    /// Refused, with the refusal's name and text.
    Refused {
        /// The refusal's stable name (`mismatch`, `missing-feature`, …).
        name: String,
        /// The refusal in full.
        message: String,
        /// Whether the verdict came from the cache.
        cached: bool,
    },
    /// A twin of an arm that was not chosen: not emitted or validated.
    NotConsidered {
        /// Why.
        reason: String,
    },
}

/// A price as reported.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PriceReport {
    /// Priced.
    Priced {
        /// Predicted core cycles at the site's geometry.
        cycles: f64,
        /// The roofline floor in cycles.
        floor: f64,
        /// The model that made it (`PortTable`, `InstructionCount`, `Roofline`).
        model: String,
    },
    /// The cost model refused to price it.
    Failed {
        /// Why.
        reason: String,
    },
}

/// A race as reported.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RaceReport {
    /// The other candidate.
    pub against: String,
    /// This candidate's median nanoseconds per call.
    pub ns: f64,
    /// The other's.
    pub against_ns: f64,
    /// Interleaved rounds.
    pub rounds: u32,
    /// Whether the result came from the cache.
    pub cached: bool,
}

impl fmt::Display for SelectionReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "host {} | WEFT_NATIVE_EMIT={} | {} | compile {:.1} ms",
            self.host,
            self.mode,
            if self.saved_only {
                "saved results only"
            } else {
                "validating and racing"
            },
            self.compile_ms
        )?;
        let c = &self.cache;
        writeln!(
            f,
            "cache {}: {} verdicts cached, {} validated; {} races cached, {} run; \
             {} bodies cached, {} built{}",
            c.path.as_deref().unwrap_or("(in memory)"),
            c.verdict_hits,
            c.validations,
            c.race_hits,
            c.races,
            c.body_hits,
            c.builds,
            c.problem
                .as_deref()
                .map(|p| format!("; ignored: {p}"))
                .unwrap_or_default()
        )?;
        for s in &self.sites {
            writeln!(f)?;
            let streamed = match s.residency {
                Residency::Cached => "",
                Residency::Streamed => " streamed",
            };
            if s.label == s.family {
                writeln!(
                    f,
                    "site {} {} [{}]{streamed}",
                    s.index, s.family, s.geometry
                )?;
            } else {
                writeln!(
                    f,
                    "site {} {}: {} [{}]{streamed}",
                    s.index, s.label, s.family, s.geometry
                )?;
            }
            for c in &s.candidates {
                let mark = if c.name == s.chosen { "*" } else { " " };
                let verdict = match &c.verdict {
                    VerdictReport::Offered => "arm".to_owned(),
                    VerdictReport::Validated { cases, cached, .. } => {
                        format!(
                            "valid ({cases} cases{})",
                            if *cached { ", cached" } else { "" }
                        )
                    }
                    VerdictReport::Refused { message, .. } => message.clone(),
                    VerdictReport::NotConsidered { reason } => reason.clone(),
                };
                let price = match &c.price {
                    Some(PriceReport::Priced {
                        cycles,
                        floor,
                        model,
                    }) => format!("{cycles:>12.0} cyc (floor {floor:.0}, {model})"),
                    Some(PriceReport::Failed { reason }) => format!("unpriced: {reason}"),
                    None => String::new(),
                };
                writeln!(f, " {mark} {:<36} {:<40} {price}", c.name, verdict)?;
                if let Some(r) = &c.race {
                    writeln!(
                        f,
                        "     race vs {}: {:.0} ns vs {:.0} ns, {} rounds{}",
                        r.against,
                        r.ns,
                        r.against_ns,
                        r.rounds,
                        if r.cached { " (cached)" } else { "" }
                    )?;
                }
            }
            writeln!(f, "   chose {}: {}", s.chosen, s.reason)?;
        }
        for r in &self.regions {
            writeln!(f)?;
            writeln!(f, "region {}", r.label)?;
            for (name, alt, side) in [
                ("chain", &r.chain, crate::Alternative::Chain),
                ("fused", &r.fused, crate::Alternative::Fused),
            ] {
                let mark = if r.chosen == side { "*" } else { " " };
                let sites = alt
                    .sites
                    .iter()
                    .map(|(i, body)| format!("site {i} ({body})"))
                    .collect::<Vec<_>>()
                    .join(" + ");
                let price = match alt.cycles {
                    Some(c) => format!("{c:>12.0} cyc"),
                    None => "unpriced".to_owned(),
                };
                writeln!(f, " {mark} {name:<6} {sites:<70} {price}")?;
            }
            if let Some(race) = &r.race {
                writeln!(
                    f,
                    "     race chain vs fused: {:.0} ns vs {:.0} ns, {} rounds{}",
                    race.ns,
                    race.against_ns,
                    race.rounds,
                    if race.cached { " (cached)" } else { "" }
                )?;
            }
            let chosen = match r.chosen {
                crate::Alternative::Chain => "chain",
                crate::Alternative::Fused => "fused",
            };
            writeln!(f, "   chose {chosen} ({:?}): {}", r.rule, r.reason)?;
        }
        Ok(())
    }
}
