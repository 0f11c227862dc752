//! Regions: a chain of sites against the fused site that replaces it,
//! priced from their bodies, chosen by the selection rule (the chain kept
//! on an exact tie), raced and cached when prices cannot choose, shown in
//! the report, and no different with the kill switch than without twins.
//!
//! The members are Q8_0 matrix-vector sites (the planner never looks at
//! what a region computes: a fused family's own tests hold it to its
//! chain's bits; `tests/region.rs` in the workspace does for add→RMSNorm),
//! priced by a stand-in whose price is a function of the geometry, so each
//! test sets the chain's and the fused site's prices.

use std::sync::Arc;

use weft_cost::{CostError, Priced};
use weft_host::Host;
use weft_kernel::{
    ArmEntry, Family, FamilyEntry, LoopTrip, NativeCode, Offer, Price, PriceModel, Residency, Site,
    Twin,
};
use weft_plan::{
    Alternative, CacheLocation, Catalogue, EmitMode, Member, Options, PlanError, Planner, Pricer,
    Region, Rule,
};
use weft_q8::arm::Q8MatvecArm;
use weft_q8::validation::{Q8Bench, Q8Validation};
use weft_validate::Checker;

/// Prices a body by its offer's geometry: `rows · cycles_per_row`, with
/// the rows chosen by each test. Every body of an offer costs the same.
struct RowsPricer {
    per_row: f64,
}

impl Pricer for RowsPricer {
    fn price(
        &self,
        _code: &NativeCode,
        _nest: &[LoopTrip],
        offer: &Offer,
        _residency: Residency,
    ) -> Result<Priced, CostError> {
        let rows = offer.contract.geometry.get("rows").unwrap_or(0) as f64;
        Ok(Priced::total(Price {
            cycles: rows * self.per_row,
            floor: 0.0,
            model: PriceModel::InstructionCount,
        }))
    }
}

fn entry(twins: Vec<Arc<dyn Twin>>, bench: bool) -> FamilyEntry {
    FamilyEntry {
        family: Family(weft_q8::FAMILY),
        arms: vec![ArmEntry::new(
            Arc::new(Q8MatvecArm),
            twins,
            Arc::new(Checker(Q8Validation)),
            if bench { Some(Arc::new(Q8Bench)) } else { None },
        )],
    }
}

fn catalogue(twins: Vec<Arc<dyn Twin>>, bench: bool) -> Catalogue {
    let mut c = Catalogue::new();
    c.register(entry(twins, bench)).expect("register");
    c
}

fn options(mode: EmitMode, racing: bool) -> Options {
    Options {
        mode,
        cache: CacheLocation::InMemory,
        racing,
        race_budget: weft_plan::RaceBudget {
            max_time: std::time::Duration::from_millis(5),
            min_rounds: 3,
            ..Default::default()
        },
        ..Options::default()
    }
}

fn planner(c: Catalogue, mode: EmitMode, racing: bool) -> Planner {
    Planner::new(
        c,
        Host::detect(),
        Arc::new(RowsPricer { per_row: 100.0 }),
        options(mode, racing),
    )
}

fn site(rows: u64, label: &str) -> Site {
    Site::new(Family(weft_q8::FAMILY), weft_q8::geometry(rows, 64, 1)).with_label(label)
}

/// A region whose chain has sites of `chain` rows and whose fused site has
/// `fused` rows (so prices are `100 ·` those).
fn region(chain: &[u64], fused: u64) -> Region {
    Region {
        label: "r".to_owned(),
        chain: chain
            .iter()
            .enumerate()
            .map(|(i, &rows)| Member::new(site(rows, &format!("r.chain{i}"))))
            .collect(),
        fused: Member::new(site(fused, "r.fused")),
    }
}

#[test]
fn the_cheaper_alternative_wins_by_price_and_the_chain_sums_its_sites() {
    let mut p = planner(catalogue(Vec::new(), false), EmitMode::Off, false);
    let plan = p
        .compile_with_regions(&[site(8, "plain")], &[region(&[16, 32], 32)])
        .expect("compile");
    let r = plan.region("r").expect("region");
    assert_eq!(r.choice, Alternative::Fused);
    assert_eq!(r.rule, Rule::Cheapest);
    assert_eq!(r.chain_cycles, Some(4800.0));
    assert_eq!(r.fused_cycles, Some(3200.0));
    // Members follow the caller's sites, chain first.
    assert_eq!((r.chain.as_slice(), r.fused), ([1, 2].as_slice(), 3));
    assert_eq!(plan.sites()[3].label, "r.fused");
    assert_eq!(plan.sites().len(), 4);
    // A chain cheaper than the fused site is kept.
    let plan = p
        .compile_with_regions(&[], &[region(&[16, 16], 64)])
        .expect("compile");
    assert_eq!(plan.regions()[0].choice, Alternative::Chain);
    assert_eq!(plan.regions()[0].rule, Rule::Cheapest);
}

#[test]
fn an_exact_tie_keeps_the_chain_before_any_race() {
    let mut p = planner(catalogue(Vec::new(), true), EmitMode::Off, true);
    let plan = p
        .compile_with_regions(&[], &[region(&[16, 16], 32)])
        .expect("compile");
    let r = &plan.regions()[0];
    assert_eq!((r.choice, r.rule), (Alternative::Chain, Rule::ExactTie));
    assert_eq!(plan.report().cache.races, 0);
}

#[test]
fn prices_too_close_to_call_race_once_and_the_race_is_cached() {
    // 6400 cycles against 6500: within the 3% separation.
    let regions = [region(&[32, 32], 65)];
    let mut p = planner(catalogue(Vec::new(), true), EmitMode::Off, true);
    let first = p.compile_with_regions(&[], &regions).expect("compile");
    let report = first.report();
    assert_eq!(report.cache.races, 1, "{report}");
    let r = &report.regions[0];
    assert!(matches!(r.rule, Rule::Race | Rule::RaceTie), "{report}");
    let race = r.race.as_ref().expect("a race is reported");
    assert!(!race.cached && race.ns > 0.0 && race.against_ns > 0.0);
    assert!(r.reason.starts_with("prices too close to call"), "{report}");
    // Again: the race is read, not run, and chooses the same.
    let second = p.compile_with_regions(&[], &regions).expect("compile");
    let report2 = second.report();
    assert_eq!((report2.cache.races, report2.cache.race_hits), (0, 1));
    assert!(report2.regions[0].race.as_ref().expect("race").cached);
    assert_eq!(second.regions()[0].choice, first.regions()[0].choice);
    assert_eq!(second.image(), first.image());
}

#[test]
fn without_a_workbench_or_racing_the_chain_is_kept() {
    let regions = [region(&[32, 32], 65)];
    let mut p = planner(catalogue(Vec::new(), false), EmitMode::Off, true);
    let plan = p.compile_with_regions(&[], &regions).expect("compile");
    let r = &plan.report().regions[0];
    assert_eq!((r.chosen, r.rule), (Alternative::Chain, Rule::RaceTie));
    assert!(r.reason.contains("no-bench"), "{}", r.reason);
    // A member may bring its own bench.
    let mut with_bench = regions[0].clone();
    for m in with_bench.chain.iter_mut().chain([&mut with_bench.fused]) {
        *m = Member::with_bench(m.site.clone(), Arc::new(Q8Bench));
    }
    let plan = p.compile_with_regions(&[], &[with_bench]).expect("compile");
    assert!(plan.report().regions[0].race.is_some());
    let mut p = planner(catalogue(Vec::new(), true), EmitMode::Off, false);
    let plan = p.compile_with_regions(&[], &regions).expect("compile");
    assert_eq!(plan.regions()[0].rule, Rule::RaceTie);
    assert_eq!(plan.report().cache.races, 0);
}

#[test]
fn the_report_lists_the_region_its_two_candidates_and_the_rule() {
    let mut p = planner(catalogue(Vec::new(), false), EmitMode::Off, false);
    let plan = p
        .compile_with_regions(&[], &[region(&[16, 32], 32)])
        .expect("compile");
    let text = plan.report().to_string();
    assert!(text.contains("region r"), "{text}");
    assert!(text.contains(" * fused"), "{text}");
    assert!(
        text.contains("site 0 (") && text.contains("site 2 ("),
        "{text}"
    );
    assert!(
        text.contains("4800 cyc") && text.contains("3200 cyc"),
        "{text}"
    );
    assert!(text.contains("chose fused (Cheapest)"), "{text}");
    let r = &plan.report().regions[0];
    assert_eq!(r.chain.sites.len(), 2);
    assert_eq!(r.fused.sites, [(2, weft_q8::arm::ARM_NAME.to_owned())]);
}

#[test]
fn the_kill_switch_plan_with_regions_equals_one_without_twins() {
    let twins = weft_q8::entry().arms[0].twins.clone();
    let sites = [site(8, "plain")];
    let regions = [region(&[16, 32], 32), region(&[32, 32], 65)];
    let off = planner(catalogue(twins, true), EmitMode::Off, false)
        .compile_with_regions(&sites, &regions)
        .expect("off");
    let none = planner(catalogue(Vec::new(), true), EmitMode::On, false)
        .compile_with_regions(&sites, &regions)
        .expect("no twins");
    assert_eq!(off.image(), none.image());
    // Regions are part of the image: the same sites without them differ.
    let bare = planner(catalogue(Vec::new(), true), EmitMode::On, false)
        .compile(&sites)
        .expect("bare");
    assert_ne!(bare.image(), none.image());
}

#[test]
fn bad_regions_are_named_errors() {
    let mut p = planner(catalogue(Vec::new(), false), EmitMode::Off, false);
    let empty = Region {
        label: "empty".to_owned(),
        chain: Vec::new(),
        fused: Member::new(site(16, "f")),
    };
    let e = p.compile_with_regions(&[], &[empty]).expect_err("empty");
    assert_eq!(e.name(), "bad-region");
    let plan = p
        .compile_with_regions(&[], &[region(&[16], 16)])
        .expect("compile");
    let e: PlanError = plan.region("nope").expect_err("unknown");
    assert_eq!(e.name(), "unknown-region");
    assert!(e.to_string().contains("the regions are r"), "{e}");
    let mut bad = region(&[16], 16);
    bad.fused.site.family = Family("no.such");
    let e = p
        .compile_with_regions(&[], &[bad])
        .expect_err("unknown family");
    assert_eq!(e.name(), "unknown-family");
}
