//! Compiling a plan: for each site, collect the candidates the host can
//! run, validate twins, price every survivor from its bytes, and select.
//!
//! Selection happens in two stages, and that is what makes a plan's
//! numerics independent of native emission:
//!
//! 1. **The offer.** Among the family's arms (each with its own contract),
//!    the cheapest arm body is chosen. Twins play no part here, so the
//!    contract a site computes by is the same with `WEFT_NATIVE_EMIT=off`,
//!    on, or in a build without twins.
//! 2. **The body.** Among the chosen arm and its validated twins (which
//!    round exactly as the arm does), the cheapest body is chosen.
//!
//! In each stage the **exact-tie rule comes first**: when the reference —
//! the shipped arm in stage 1, the chosen arm in stage 2 — is among the
//! candidates priced exactly alike and lowest, it is kept. Only then is the
//! gap to the runner-up looked at: more than the separation and the
//! cheapest wins; less, and a cached micro-race decides (a race that cannot
//! tell keeps the earlier one). Other candidates tied exactly (twins that
//! all sit on one roofline floor) cannot be told apart by price either, so
//! they race in a knockout.
//!
//! A site's [`Residency`] goes into both: a streamed site is priced with
//! its floor at main memory, and races it runs start every call with the
//! caches evicted.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use weft_cost::{CostError, Priced};
use weft_host::Host;
use weft_kernel::{
    require_features, Arm, ArmEntry, FamilyEntry, Judged, LoopTrip, NativeCode, Offer, PlacedCode,
    Price, Refusal, Residency, Site, Twin,
};

use crate::cache::{PlanCache, SavedVerdict, VerdictKey};
use crate::hash::ContentHash;
use crate::mode::EmitMode;
use crate::options::{CacheLocation, Options, Pricer};
use crate::plan::{Candidate, CompiledPlan, CompiledSite, Kind};
use crate::race::Evictor;
use crate::report::{
    CacheReport, CandidateReport, PriceReport, Rule, SelectionReport, SiteReport, VerdictReport,
};
use crate::select::{decide, Decision, Quote, Unordered};

mod races;
mod regions;
use crate::region::Region;
use crate::{Catalogue, PlanError};

/// A candidate that survived to pricing.
struct Cand {
    name: &'static str,
    /// Index of the arm entry whose offer it serves (its own, for an arm).
    arm: usize,
    offer: Arc<Offer>,
    code: Arc<NativeCode>,
    hash: ContentHash,
    priced: Result<Priced, CostError>,
    /// Index into the site's candidate reports.
    report: usize,
}

impl Cand {
    fn price(&self) -> Option<&Price> {
        self.priced.as_ref().ok().map(|p| &p.price)
    }
}

/// A body and the hash of its bytes, or why it could not be made.
type Built = Result<(Arc<NativeCode>, ContentHash), Refusal>;

/// The planner: a catalogue, a host, a pricer, a cache and options.
pub struct Planner {
    catalogue: Catalogue,
    host: Host,
    pricer: Arc<dyn Pricer>,
    cache: PlanCache,
    options: Options,
    /// Every body built or read, with the hash of its bytes, by candidate
    /// name (unique in a catalogue) and offer hash; refusals included.
    bodies: HashMap<(&'static str, ContentHash), Built>,
    /// Prices by (bytes, offer, nest) hashes and residency.
    prices: HashMap<PriceKey, Result<Priced, CostError>>,
    placed: HashMap<ContentHash, Arc<PlacedCode>>,
    /// The buffer streamed sites' races evict the caches with, made on
    /// first use.
    evictor: Option<Evictor>,
    stats: CacheReport,
}

type PriceKey = (ContentHash, ContentHash, ContentHash, Residency);

impl std::fmt::Debug for Planner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planner")
            .field("host", &self.host.model)
            .field("options", &self.options)
            .field("cache", &self.cache)
            .finish()
    }
}

impl Planner {
    /// A planner for `host` pricing with weft-cost's model of that host
    /// (its port table where one exists, instruction counts otherwise).
    pub fn for_host(catalogue: Catalogue, host: Host, options: Options) -> Planner {
        let pricer = Arc::new(weft_cost::CostModel::for_host(&host));
        Planner::new(catalogue, host, pricer, options)
    }

    /// A planner for `host` (whose cache file, per `options.cache`, is read now).
    pub fn new(
        catalogue: Catalogue,
        host: Host,
        pricer: Arc<dyn Pricer>,
        options: Options,
    ) -> Planner {
        let fp = host.fingerprint();
        let cache = match &options.cache {
            CacheLocation::Default => match PlanCache::default_path(fp) {
                Some(p) => PlanCache::open(&p, fp),
                None => PlanCache::in_memory(fp),
            },
            CacheLocation::File(p) => PlanCache::open(p, fp),
            CacheLocation::InMemory => PlanCache::in_memory(fp),
        };
        Planner {
            catalogue,
            host,
            pricer,
            cache,
            options,
            bodies: HashMap::new(),
            prices: HashMap::new(),
            evictor: None,
            placed: HashMap::new(),
            stats: CacheReport::default(),
        }
    }

    /// The cache (to inspect or save).
    pub fn cache(&self) -> &PlanCache {
        &self.cache
    }

    /// Write new verdicts and races to the cache file.
    pub fn save_cache(&mut self) -> Result<(), crate::CacheSaveError> {
        self.cache.save()
    }

    /// The host planned for.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The options.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Compile `sites` into a plan. Strict mode stops at the first twin
    /// fault; a site no candidate can serve is an error naming every
    /// refusal. The cache is saved before returning (a save failure is
    /// reported in the report's cache problem, not fatal).
    pub fn compile(&mut self, sites: &[Site]) -> Result<CompiledPlan, PlanError> {
        self.compile_with_progress(sites, &mut |_, _| {})
    }

    /// [`Planner::compile`] with `regions` too: every member of every
    /// region is planned as a site (after `sites`, in order: each region's
    /// chain, then its fused site), then each region chooses between its
    /// chain and its fused site ([`crate::Region`]). A region with an empty
    /// chain is `bad-region`.
    pub fn compile_with_regions(
        &mut self,
        sites: &[Site],
        regions: &[Region],
    ) -> Result<CompiledPlan, PlanError> {
        self.compile_all(sites, regions, &mut |_, _| {})
    }

    /// [`Planner::compile_with_regions`], calling `progress(done, total)`
    /// after each of `sites` (for a progress bar; the regions' members,
    /// planned after them, are not counted).
    pub fn compile_regions_with_progress(
        &mut self,
        sites: &[Site],
        regions: &[Region],
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<CompiledPlan, PlanError> {
        self.compile_all(sites, regions, progress)
    }

    /// [`Planner::compile`], calling `progress(done, total)` after each site
    /// (for a progress bar).
    pub fn compile_with_progress(
        &mut self,
        sites: &[Site],
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<CompiledPlan, PlanError> {
        self.compile_all(sites, &[], progress)
    }

    fn compile_all(
        &mut self,
        sites: &[Site],
        regions: &[Region],
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<CompiledPlan, PlanError> {
        let t0 = Instant::now();
        self.stats = CacheReport {
            path: self.cache.path().map(|p| p.display().to_string()),
            problem: self.cache.problem().map(|p| p.to_string()),
            ..CacheReport::default()
        };
        let mut compiled = Vec::with_capacity(sites.len());
        let mut reports = Vec::with_capacity(sites.len());
        for (index, site) in sites.iter().enumerate() {
            let (c, r) = self.plan_site(index, site)?;
            compiled.push(c);
            reports.push(r);
            progress(index + 1, sites.len());
        }
        let mut compiled_regions = Vec::with_capacity(regions.len());
        let mut region_reports = Vec::with_capacity(regions.len());
        for region in regions {
            let (c, r) = self.plan_region(region, &mut compiled, &mut reports)?;
            compiled_regions.push(c);
            region_reports.push(r);
        }
        if let Err(e) = self.cache.save() {
            let msg = e.to_string();
            self.stats.problem = Some(match self.stats.problem.take() {
                Some(p) => format!("{p}; {msg}"),
                None => msg,
            });
        }
        let report = SelectionReport {
            host: format!("{} ({})", self.host.model, self.host.fingerprint()),
            mode: self.options.mode.name().to_owned(),
            saved_only: self.options.saved_only,
            cache: self.stats.clone(),
            compile_ms: t0.elapsed().as_secs_f64() * 1e3,
            sites: reports,
            regions: region_reports,
        };
        Ok(CompiledPlan {
            sites: compiled,
            regions: compiled_regions,
            report,
        })
    }

    /// What `site` would cost, from bytes alone: the cheapest arm by price
    /// (the first registered on a tie), then the cheapest of it and its
    /// twins the host can run. Nothing is validated, raced or placed, so
    /// this is an estimate for choosing between *sites* (a caller weighing
    /// geometries, such as a prompt's chunk length), not a plan: a twin
    /// that validation would refuse still counts. `None` when no body
    /// could be priced; an unknown family is an error.
    pub fn estimate(&mut self, site: &Site) -> Result<Option<Price>, PlanError> {
        let entry = self.catalogue.family(site.family).cloned().ok_or_else(|| {
            PlanError::UnknownFamily {
                index: 0,
                family: site.family.name().to_owned(),
            }
        })?;
        let mut best: Option<(usize, Arc<Offer>, Price)> = None;
        for (k, a) in entry.arms.iter().enumerate() {
            let Ok(c) = self.arm_candidate(a.arm.as_ref(), k, site, 0) else {
                continue;
            };
            if let Some(p) = c.price() {
                if best.as_ref().is_none_or(|(_, _, b)| p.cycles < b.cycles) {
                    best = Some((k, Arc::clone(&c.offer), *p));
                }
            }
        }
        let Some((arm, offer, mut price)) = best else {
            return Ok(None);
        };
        if self.options.mode == EmitMode::Off {
            return Ok(Some(price));
        }
        for twin in &entry.arms[arm].twins {
            if twin.isa() != self.host.isa || require_features(&self.host, twin.requires()).is_err()
            {
                continue;
            }
            let Ok((code, hash)) = self.body(twin.name(), &offer, || {
                emit_contained(twin.as_ref(), &offer)
            }) else {
                continue;
            };
            let nest = twin.nest(&offer);
            if let Ok(p) = self.price(&code, hash, &nest, &offer, site.residency) {
                if p.price.cycles < price.cycles {
                    price = p.price;
                }
            }
        }
        Ok(Some(price))
    }

    fn plan_site(
        &mut self,
        index: usize,
        site: &Site,
    ) -> Result<(CompiledSite, SiteReport), PlanError> {
        let entry = self.catalogue.family(site.family).cloned().ok_or_else(|| {
            PlanError::UnknownFamily {
                index,
                family: site.family.name().to_owned(),
            }
        })?;
        let mut reports: Vec<CandidateReport> = Vec::new();
        // Stage 1: the arms.
        let mut arms: Vec<Cand> = Vec::new();
        let mut refusals: Vec<(String, Refusal)> = Vec::new();
        for (k, a) in entry.arms.iter().enumerate() {
            let arm = &a.arm;
            let report = reports.len();
            reports.push(CandidateReport {
                name: arm.name().to_owned(),
                arm: None,
                verdict: VerdictReport::Offered,
                price: None,
                race: None,
            });
            match self.arm_candidate(arm.as_ref(), k, site, report) {
                Ok(c) => {
                    reports[report].price = Some(price_report(&c.priced));
                    arms.push(c);
                }
                Err(r) => {
                    reports[report].verdict = refused(&r, false);
                    refusals.push((arm.name().to_owned(), r));
                }
            }
        }
        if arms.is_empty() {
            return Err(PlanError::NoCandidate {
                index,
                family: site.family.name().to_owned(),
                refusals,
            });
        }
        let mut arm_cands: Vec<Cand> = arms;
        let (ai, rule1, why1) = self.select(&entry, &arm_cands, site, &mut reports)?;
        let arm_name = arm_cands[ai].name;
        let arm_index = arm_cands[ai].arm;
        // Twins of arms not chosen are listed, not emitted.
        for (k, a) in entry.arms.iter().enumerate() {
            if k == arm_index {
                continue;
            }
            for t in &a.twins {
                reports.push(CandidateReport {
                    name: t.name().to_owned(),
                    arm: Some(a.arm.name().to_owned()),
                    verdict: VerdictReport::NotConsidered {
                        reason: format!("its arm {} was not chosen", a.arm.name()),
                    },
                    price: None,
                    race: None,
                });
            }
        }
        // Stage 2: the chosen arm and its twins.
        if ai >= arm_cands.len() {
            return Err(PlanError::Internal {
                what: "chosen arm index out of range",
            });
        }
        let arm_cand = arm_cands.remove(ai);
        let mut bodies = vec![arm_cand];
        let arm_entry = &entry.arms[arm_index];
        for twin in &arm_entry.twins {
            let report = reports.len();
            reports.push(CandidateReport {
                name: twin.name().to_owned(),
                arm: Some(arm_name.to_owned()),
                verdict: VerdictReport::Offered,
                price: None,
                race: None,
            });
            let arm_code = (Arc::clone(&bodies[0].code), bodies[0].hash);
            let offer = Arc::clone(&bodies[0].offer);
            match self.twin_candidate(
                (arm_entry, arm_index),
                twin.as_ref(),
                &offer,
                &arm_code,
                site.residency,
                report,
            ) {
                Ok((c, verdict)) => {
                    reports[report].verdict = verdict;
                    reports[report].price = Some(price_report(&c.priced));
                    bodies.push(c);
                }
                Err((r, cached)) => {
                    if self.options.mode == EmitMode::Strict && r.is_fault_of_the_bytes() {
                        return Err(PlanError::Strict {
                            index,
                            twin: twin.name().to_owned(),
                            refusal: Box::new(r),
                        });
                    }
                    reports[report].verdict = refused(&r, cached);
                }
            }
        }
        let (bi, rule2, why2) = if bodies.len() == 1 {
            (0, rule1, why1)
        } else {
            let (bi, rule, why) = self.select(&entry, &bodies, site, &mut reports)?;
            (
                bi,
                rule,
                format!("offer of {arm_name} ({why1}); body: {why}"),
            )
        };
        let chosen = &bodies[bi];
        let placed = self.place(chosen, index)?;
        let split = match chosen.price() {
            Some(p) => p.cycles >= self.options.split_min_cycles,
            // Unpriced: split only what moves at least 256 KiB.
            None => chosen.offer.bytes_moved >= 256 << 10,
        };
        let max_parts = match chosen.price() {
            Some(p) => (p.cycles / self.options.part_min_cycles).max(0.0) as u64,
            // Unpriced: nothing shows a part is worth its fixed cost.
            None => 0,
        };
        let mut compiled = CompiledSite {
            label: site.label().to_owned(),
            family: entry.family.name(),
            geometry: site.geometry.clone(),
            residency: site.residency,
            candidate: chosen.name,
            kind: if bi == 0 {
                Kind::Arm
            } else {
                Kind::Twin {
                    arm: arm_name.to_owned(),
                }
            },
            contract: chosen.offer.contract.clone(),
            packed: chosen.offer.packed.clone(),
            views: chosen.offer.views.clone(),
            price: chosen.price().copied(),
            code: Arc::clone(&chosen.code),
            rule: rule2,
            candidates: Vec::new(),
            offer: Arc::clone(&chosen.offer),
            model_cycles: chosen.priced.as_ref().ok().map(|p| p.model_cycles),
            placed,
            split,
            max_parts,
        };
        // What was judged, beside the report's words: each candidate's
        // bytes and price breakdown, in the report's order.
        let mut judged: Vec<Candidate> = reports
            .iter()
            .map(|r| Candidate {
                name: r.name.clone(),
                arm: r.arm.clone(),
                code: None,
                priced: None,
            })
            .collect();
        for c in arm_cands.iter().chain(&bodies) {
            judged[c.report].code = Some(Arc::clone(&c.code));
            judged[c.report].priced = Some(c.priced.clone());
        }
        compiled.candidates = judged;
        let report = SiteReport {
            index,
            label: site.label().to_owned(),
            family: entry.family.name().to_owned(),
            geometry: site.geometry.to_string(),
            residency: site.residency,
            candidates: reports,
            chosen: chosen.name.to_owned(),
            rule: rule2,
            reason: why2,
        };
        Ok((compiled, report))
    }

    fn arm_candidate(
        &mut self,
        arm: &dyn Arm,
        arm_index: usize,
        site: &Site,
        report: usize,
    ) -> Result<Cand, Refusal> {
        let offer = Arc::new(arm.offer(site, &self.host)?);
        let isa = self.host.isa;
        let (code, hash) = self.body(arm.name(), &offer, || arm.build(&offer, isa))?;
        let nest = arm.nest(&offer);
        let priced = self.price(&code, hash, &nest, &offer, site.residency);
        Ok(Cand {
            name: arm.name(),
            arm: arm_index,
            hash,
            offer,
            code,
            priced,
            report,
        })
    }

    /// `candidate`'s body for `offer`: built once per planner (refusals
    /// too), read from the cache when this program saved it before, else
    /// made by `make` and saved.
    fn body(
        &mut self,
        candidate: &'static str,
        offer: &Offer,
        make: impl FnOnce() -> Result<NativeCode, Refusal>,
    ) -> Built {
        let key = offer_hash(offer);
        if let Some(done) = self.bodies.get(&(candidate, key)) {
            return done.clone();
        }
        let saved = if self.options.cache_bodies {
            self.cache.body(candidate, key)
        } else {
            None
        };
        let made = match saved {
            Some(code) => {
                self.stats.body_hits += 1;
                let hash = ContentHash::of(&code.bytes);
                Ok((code, hash))
            }
            None => {
                self.stats.builds += 1;
                let made = make().map(Arc::new);
                if let (Ok(code), true) = (&made, self.options.cache_bodies) {
                    self.cache.put_body(candidate, key, code);
                }
                made.map(|code| {
                    let hash = ContentHash::of(&code.bytes);
                    (code, hash)
                })
            }
        };
        self.bodies.insert((candidate, key), made.clone());
        made
    }

    /// The pricer's price of `code` (whose bytes hash to `hash`), once per
    /// planner for the same bytes, nest, offer and residency (prices are
    /// deterministic).
    fn price(
        &mut self,
        code: &NativeCode,
        hash: ContentHash,
        nest: &[LoopTrip],
        offer: &Offer,
        residency: Residency,
    ) -> Result<Priced, CostError> {
        let key = (
            hash,
            offer_hash(offer),
            ContentHash::of_value(&nest),
            residency,
        );
        if let Some(p) = self.prices.get(&key) {
            return p.clone();
        }
        let p = self.pricer.price(code, nest, offer, residency);
        self.prices.insert(key, p.clone());
        p
    }

    /// A validated twin, or its refusal (and whether that came from the cache).
    fn twin_candidate(
        &mut self,
        (entry, arm_index): (&ArmEntry, usize),
        twin: &dyn Twin,
        offer: &Arc<Offer>,
        (arm_code, arm_hash): &(Arc<NativeCode>, ContentHash),
        residency: Residency,
        report: usize,
    ) -> Result<(Cand, VerdictReport), (Refusal, bool)> {
        if self.options.mode == EmitMode::Off {
            return Err((Refusal::NativeEmitOff, false));
        }
        if twin.isa() != self.host.isa {
            return Err((
                Refusal::WrongIsa {
                    wanted: twin.isa(),
                    host: self.host.isa,
                },
                false,
            ));
        }
        require_features(&self.host, twin.requires()).map_err(|r| (r, false))?;
        let contract = ContentHash::of_value(&offer.contract);
        let (code, twin_hash) = self
            .body(twin.name(), offer, || emit_contained(twin, offer))
            .map_err(|r| (r, false))?;
        let key = VerdictKey {
            twin: twin.name().to_owned(),
            twin_code: twin_hash,
            arm_code: *arm_hash,
            contract,
            cases: ContentHash::of_value(&entry.check.cases_id(offer, self.options.seed)),
        };
        let verdict = match self.cache.verdict(&key) {
            Some(SavedVerdict::Accepted(c)) => {
                self.stats.verdict_hits += 1;
                VerdictReport::Validated {
                    cases: c.cases,
                    words: c.words,
                    cached: true,
                }
            }
            Some(SavedVerdict::Refused(r)) => {
                self.stats.verdict_hits += 1;
                return Err((r.clone(), true));
            }
            None if self.options.saved_only => {
                return Err((
                    Refusal::NoSavedVerdict {
                        candidate: twin.name().to_owned(),
                    },
                    false,
                ))
            }
            None => {
                self.stats.validations += 1;
                // The judge gets the bytes emitted (or taken from the body
                // cache) above: the ones that are hashed, priced and placed.
                let arm = Judged {
                    name: entry.arm.name(),
                    code: arm_code,
                };
                let judged = Judged {
                    name: twin.name(),
                    code: &code,
                };
                match entry
                    .check
                    .check(arm, judged, offer, &self.host, self.options.seed)
                {
                    Ok(c) => {
                        self.cache
                            .put_verdict(key.clone(), SavedVerdict::Accepted(c));
                        VerdictReport::Validated {
                            cases: c.cases,
                            words: c.words,
                            cached: false,
                        }
                    }
                    Err(r) => {
                        // Only faults of the bytes are facts about them;
                        // a host's refusal (probe, placement) is not saved.
                        if r.is_fault_of_the_bytes() {
                            self.cache
                                .put_verdict(key, SavedVerdict::Refused(r.clone()));
                        }
                        return Err((r, false));
                    }
                }
            }
        };
        let nest = twin.nest(offer);
        let priced = self.price(&code, twin_hash, &nest, offer, residency);
        Ok((
            Cand {
                name: twin.name(),
                arm: arm_index,
                hash: key.twin_code,
                offer: Arc::clone(offer),
                code,
                priced,
                report,
            },
            verdict,
        ))
    }

    /// Choose among `cands` (the first is the reference: the shipped arm in
    /// stage 1, the chosen arm in stage 2) by [`decide`], running the races
    /// it asks for.
    fn select(
        &mut self,
        entry: &FamilyEntry,
        cands: &[Cand],
        site: &Site,
        reports: &mut [CandidateReport],
    ) -> Result<(usize, Rule, String), PlanError> {
        let quotes: Vec<Option<Quote>> = cands
            .iter()
            .map(|c| {
                c.priced.as_ref().ok().map(|p| Quote {
                    cycles: p.price.cycles,
                    model_cycles: p.model_cycles,
                })
            })
            .collect();
        Ok(match decide(&quotes, self.options.separation) {
            Decision::Only => (0, Rule::Only, "the only candidate".to_owned()),
            Decision::OnlyPriced { best } => {
                (best, Rule::Only, "the only priced candidate".to_owned())
            }
            Decision::ExactTie { count, cycles } => (
                0,
                Rule::ExactTie,
                format!(
                    "{count} candidates priced exactly {cycles:.0} cycles; the first registered is kept"
                ),
            ),
            Decision::Cheapest {
                best,
                runner,
                cycles,
                gap,
            } => (
                best,
                Rule::Cheapest,
                format!(
                    "cheapest at {cycles:.0} cycles, {:.1}% below {}",
                    100.0 * gap / (1.0 + gap),
                    cands[runner].name
                ),
            ),
            Decision::TooClose { first, second } if !self.options.racing => (
                first,
                Rule::RaceTie,
                format!(
                    "within {:.0}% of {} and racing is off; the earlier is kept",
                    100.0 * self.options.separation,
                    cands[second].name
                ),
            ),
            Decision::TooClose { first, second } => {
                self.race_pair(entry, cands, first, second, site, reports)
            }
            Decision::Knockout {
                among,
                why: Unordered::ReferenceUnpriced,
            } => self.knockout(entry, cands, &among, site, reports, || {
                format!(
                    "{} cannot be priced and no race could run, so it is kept",
                    cands[0].name
                )
            }),
            Decision::Knockout {
                among,
                why: Unordered::Tied { cycles },
            } => {
                let n = among.len();
                let why = || {
                    format!(
                        "{n} candidates priced exactly {cycles:.0} cycles; the first registered is kept"
                    )
                };
                let (i, rule, why) = self.knockout(entry, cands, &among, site, reports, why);
                match rule {
                    Rule::Race => (
                        i,
                        rule,
                        format!("{n} candidates priced exactly {cycles:.0} cycles raced: {why}"),
                    ),
                    _ => (i, rule, why),
                }
            }
            Decision::Knockout {
                among,
                why: Unordered::Floor { cycles },
            } => {
                let n = among.len();
                let reference = cands[0].name;
                let why = || {
                    format!(
                        "{n} candidates at the roofline floor of {cycles:.0} cycles, {reference} not the cheapest under it, and no race could run; {reference} is kept"
                    )
                };
                let (i, rule, why) = self.knockout(entry, cands, &among, site, reports, why);
                match rule {
                    Rule::Race => (
                        i,
                        rule,
                        format!(
                            "{n} candidates at the roofline floor of {cycles:.0} cycles, {reference} not the cheapest under it, raced: {why}"
                        ),
                    ),
                    _ => (i, rule, why),
                }
            }
        })
    }

    /// `code` (whose bytes hash to `hash`) placed, once per planner.
    fn placed_code(
        &mut self,
        code: &NativeCode,
        hash: ContentHash,
    ) -> Result<Arc<PlacedCode>, Refusal> {
        if let Some(p) = self.placed.get(&hash) {
            return Ok(Arc::clone(p));
        }
        let p = code.place()?;
        self.placed.insert(hash, Arc::clone(&p));
        Ok(p)
    }

    fn place(&mut self, c: &Cand, index: usize) -> Result<Arc<PlacedCode>, PlanError> {
        self.placed_code(&c.code, c.hash)
            .map_err(|refusal| PlanError::Place { index, refusal })
    }
}

/// What a body may depend on in its offer: everything but the packed
/// operands' bytes (their names, layouts and lengths are in), which are
/// data the body reads at run time, not code.
fn offer_hash(offer: &Offer) -> ContentHash {
    let packed: Vec<(&str, &str, usize)> = offer
        .packed
        .iter()
        .map(|p| (p.name, p.layout, p.bytes.len()))
        .collect();
    ContentHash::of_value(&(
        &offer.contract,
        &offer.views,
        &offer.loops,
        offer.flops,
        offer.bytes_moved,
        packed,
    ))
}

fn refused(r: &Refusal, cached: bool) -> VerdictReport {
    VerdictReport::Refused {
        name: r.name().to_owned(),
        message: r.to_string(),
        cached,
    }
}

fn price_report(p: &Result<Priced, CostError>) -> PriceReport {
    match p {
        Ok(p) => PriceReport::Priced {
            cycles: p.price.cycles,
            floor: p.price.floor,
            model: format!("{:?}", p.price.model),
        },
        Err(e) => PriceReport::Failed {
            reason: e.to_string(),
        },
    }
}

/// `twin.emit(offer)`, a panic turned into `emit-error`, an empty body refused.
fn emit_contained(twin: &dyn Twin, offer: &Offer) -> Result<NativeCode, Refusal> {
    let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| twin.emit(offer)))
        .map_err(|_| Refusal::EmitError {
            message: format!("{} panicked while emitting", twin.name()),
        })??;
    if code.bytes.is_empty() {
        return Err(Refusal::EmitError {
            message: format!("{} emitted an empty body", twin.name()),
        });
    }
    Ok(code)
}
