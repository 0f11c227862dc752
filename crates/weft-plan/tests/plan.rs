//! The planner end to end on the real Q8_0 family: tie rule, kill switch,
//! strict mode, caches, saved-only mode, races and threaded execution.

use std::sync::Arc;

use weft_cost::{CostError, Priced};
use weft_host::{Host, Isa};
use weft_kernel::{
    Arm, ArmEntry, Family, FamilyEntry, Feature, LoopTrip, NativeCode, Offer, Price, PriceModel,
    Refusal, Residency, Site, Twin,
};
use weft_plan::{
    CacheLocation, Catalogue, EmitMode, Executor, Kind, Options, PlanError, Planner, Pricer, Rule,
    VerdictReport,
};
use weft_q8::arm::Q8MatvecArm;
use weft_q8::validation::{random_activations, random_weights, Q8Bench, Q8Validation};
use weft_q8::Q8MatvecArgs;
use weft_validate::Checker;

/// A deterministic stand-in for the cost model: a body costs what its
/// bytes weigh, plus `bias` cycles for bodies whose length is odd (so a test
/// can push two bodies within or beyond the separation).
struct BytesPricer {
    odd_bias: f64,
}

impl Pricer for BytesPricer {
    fn price(
        &self,
        code: &NativeCode,
        _nest: &[LoopTrip],
        _offer: &Offer,
        _residency: Residency,
    ) -> Result<Priced, CostError> {
        let extra = if code.bytes.len() % 2 == 1 {
            self.odd_bias
        } else {
            0.0
        };
        Ok(Priced::total(Price {
            cycles: code.bytes.len() as f64 * 10.0 + extra,
            floor: 0.0,
            model: PriceModel::InstructionCount,
        }))
    }
}

/// A twin whose body is exactly its arm's bytes: valid, and priced exactly
/// like the arm by any deterministic model.
struct ArmCopy;

// SAFETY: the body is the arm's own, which honours the leaf ABI for
// `Q8MatvecArgs`.
unsafe impl Twin for ArmCopy {
    fn name(&self) -> &'static str {
        "q8_0.matvec.twin.arm-copy"
    }
    fn isa(&self) -> Isa {
        Isa::of_target()
    }
    fn requires(&self) -> &'static [Feature] {
        &[]
    }
    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        Q8MatvecArm.build(offer, Isa::of_target())
    }
}

/// A twin that returns at once: it honours the ABI (touches nothing) but
/// computes nothing, so validation must refuse it with `mismatch`.
struct Lazy;

// SAFETY: the body is a single return: it reads and writes nothing.
unsafe impl Twin for Lazy {
    fn name(&self) -> &'static str {
        "q8_0.matvec.twin.lazy"
    }
    fn isa(&self) -> Isa {
        Isa::of_target()
    }
    fn requires(&self) -> &'static [Feature] {
        &[]
    }
    fn emit(&self, _offer: &Offer) -> Result<NativeCode, Refusal> {
        Ok(NativeCode {
            isa: Isa::of_target(),
            bytes: lazy_body(),
            pool: None,
            loops: Vec::new(),
        })
    }
}

/// The lazy twin's body: one return instruction.
fn lazy_body() -> Vec<u8> {
    match Isa::of_target() {
        Isa::X86_64 => vec![0xc3],
        Isa::Aarch64 => 0xd65f_03c0u32.to_le_bytes().to_vec(),
        Isa::Other => Vec::new(),
    }
}

/// The family's twins of the f32x4 arm, the one arm these tests register
/// (the rows2 arm's twins need a site with weights to pack).
fn f32x4_twins() -> Vec<Arc<dyn Twin>> {
    // The family registers the f32x4 arm first.
    weft_q8::entry().arms[0].twins.clone()
}

fn entry_with(twins: Vec<Arc<dyn Twin>>) -> FamilyEntry {
    FamilyEntry {
        family: Family(weft_q8::FAMILY),
        arms: vec![ArmEntry::new(
            Arc::new(Q8MatvecArm),
            twins,
            Arc::new(Checker(Q8Validation)),
            Some(Arc::new(Q8Bench)),
        )],
    }
}

fn catalogue(twins: Vec<Arc<dyn Twin>>) -> Catalogue {
    let mut c = Catalogue::new();
    c.register(entry_with(twins)).expect("register");
    c
}

fn sites() -> Vec<Site> {
    [(64u64, 128u64, 1u64), (37, 96, 2), (576, 576, 1)]
        .into_iter()
        .map(|(r, c, b)| Site::new(Family(weft_q8::FAMILY), weft_q8::geometry(r, c, b)))
        .collect()
}

fn options(mode: EmitMode) -> Options {
    Options {
        mode,
        cache: CacheLocation::InMemory,
        racing: false,
        ..Options::default()
    }
}

/// Options that race, briefly (tests want the decision, not the figures).
fn racing_options() -> Options {
    Options {
        racing: true,
        race_budget: weft_plan::RaceBudget {
            max_time: std::time::Duration::from_millis(5),
            min_rounds: 3,
            ..Default::default()
        },
        ..options(EmitMode::On)
    }
}

fn planner(c: Catalogue, mode: EmitMode) -> Planner {
    Planner::new(
        c,
        Host::detect(),
        Arc::new(BytesPricer { odd_bias: 0.0 }),
        options(mode),
    )
}

#[test]
fn exact_tie_keeps_the_shipped_arm() {
    let mut p = planner(catalogue(vec![Arc::new(ArmCopy)]), EmitMode::On);
    let plan = p.compile(&sites()).expect("compile");
    for s in &plan.report().sites {
        let copy = s
            .candidates
            .iter()
            .find(|c| c.name == ArmCopy.name())
            .expect("listed");
        assert!(
            matches!(copy.verdict, VerdictReport::Validated { .. }),
            "{copy:?}"
        );
        assert_eq!(s.rule, Rule::ExactTie, "{}", plan.report());
        assert_eq!(s.chosen, weft_q8::arm::ARM_NAME);
    }
    assert!(plan.sites().iter().all(|s| s.kind == Kind::Arm));
}

#[test]
fn cheapest_validated_body_wins_when_prices_separate() {
    let twins = f32x4_twins();
    let mut p = planner(catalogue(twins), EmitMode::On);
    let plan = p.compile(&sites()).expect("compile");
    for s in &plan.report().sites {
        let priced: Vec<(f64, &str)> = s
            .candidates
            .iter()
            .filter(|c| {
                matches!(
                    c.verdict,
                    VerdictReport::Offered | VerdictReport::Validated { .. }
                )
            })
            .filter_map(|c| match &c.price {
                Some(weft_plan::PriceReport::Priced { cycles, .. }) => {
                    Some((*cycles, c.name.as_str()))
                }
                _ => None,
            })
            .collect();
        let min = priced.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
        let chosen = priced
            .iter()
            .find(|p| p.1 == s.chosen)
            .expect("chosen is priced");
        assert_eq!(chosen.0, min, "{}", plan.report());
        if priced.len() > 1 {
            assert!(
                matches!(s.rule, Rule::Cheapest | Rule::RaceTie | Rule::ExactTie),
                "{s:?}"
            );
        }
    }
}

#[test]
fn kill_switch_plan_is_byte_identical_to_a_plan_without_twins() {
    let host_twins: Vec<Arc<dyn Twin>> = f32x4_twins();
    let full = catalogue(host_twins);
    let off = planner(full.clone(), EmitMode::Off)
        .compile(&sites())
        .expect("off");
    let bare = planner(full.without_twins(), EmitMode::On)
        .compile(&sites())
        .expect("bare");
    assert_eq!(off.image(), bare.image());
    for s in &off.report().sites {
        for c in s.candidates.iter().filter(|c| c.arm.is_some()) {
            assert!(
                matches!(&c.verdict, VerdictReport::Refused { name, .. } if name == "native-emit-off"),
                "{c:?}"
            );
        }
    }
    // And the image does see twins when they are on and chosen (so the
    // equality above is not vacuous) on hosts that run a shorter twin.
    let on = planner(full, EmitMode::On).compile(&sites()).expect("on");
    if on
        .sites()
        .iter()
        .any(|s| matches!(s.kind, Kind::Twin { .. }))
    {
        assert_ne!(on.image(), bare.image());
    }
}

#[test]
fn strict_mode_stops_on_a_mismatch_and_on_mode_refuses_the_twin() {
    let err = planner(catalogue(vec![Arc::new(Lazy)]), EmitMode::Strict)
        .compile(&sites())
        .expect_err("strict must stop");
    match &err {
        PlanError::Strict { twin, refusal, .. } => {
            assert_eq!(twin, Lazy.name());
            assert_eq!(refusal.name(), "mismatch");
        }
        other => panic!("expected strict, got {other}"),
    }
    assert_eq!(err.name(), "strict");
    let plan = planner(catalogue(vec![Arc::new(Lazy)]), EmitMode::On)
        .compile(&sites())
        .expect("on mode compiles");
    for s in &plan.report().sites {
        assert_eq!(s.chosen, weft_q8::arm::ARM_NAME);
        let lazy = s
            .candidates
            .iter()
            .find(|c| c.name == Lazy.name())
            .expect("listed");
        assert!(
            matches!(&lazy.verdict, VerdictReport::Refused { name, .. } if name == "mismatch"),
            "{lazy:?}"
        );
    }
}

fn file_planner(path: &std::path::Path, saved_only: bool) -> Planner {
    Planner::new(
        catalogue(vec![Arc::new(ArmCopy), Arc::new(Lazy)]),
        Host::detect(),
        Arc::new(BytesPricer { odd_bias: 0.0 }),
        Options {
            cache: CacheLocation::File(path.to_owned()),
            saved_only,
            ..options(EmitMode::On)
        },
    )
}

#[test]
fn corrupt_cache_is_reported_once_ignored_and_rewritten() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("plan.bin");
    let first = file_planner(&path, false).compile(&sites()).expect("cold");
    assert_eq!(first.report().cache.problem, None);
    assert!(first.report().cache.validations > 0);
    let warm = file_planner(&path, false).compile(&sites()).expect("warm");
    assert_eq!(warm.report().cache.validations, 0);
    assert!(warm.report().cache.verdict_hits > 0);
    // Corrupt it: the next compile works, names the problem, validates
    // anew and rewrites the file.
    let mut bytes = std::fs::read(&path).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&path, &bytes).expect("write");
    let after = file_planner(&path, false)
        .compile(&sites())
        .expect("corrupt");
    let problem = after.report().cache.problem.clone().expect("reported");
    assert!(problem.starts_with("cache-corrupt"), "{problem}");
    assert!(after.report().cache.validations > 0);
    assert_eq!(after.image(), first.image());
    let again = file_planner(&path, false)
        .compile(&sites())
        .expect("rewritten");
    assert_eq!(again.report().cache.problem, None);
    // Truncated to nothing, then a foreign-host file: same story.
    std::fs::write(&path, b"WEFT").expect("write");
    let t = file_planner(&path, false)
        .compile(&sites())
        .expect("truncated");
    assert!(t
        .report()
        .cache
        .problem
        .as_deref()
        .is_some_and(|p| p.starts_with("cache-truncated")));
}

#[test]
fn saved_only_mode_refuses_what_it_lacks_and_uses_what_it_has() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("plan.bin");
    let cold = file_planner(&path, true)
        .compile(&sites())
        .expect("saved-only, empty");
    for s in &cold.report().sites {
        for c in s.candidates.iter().filter(|c| c.arm.is_some()) {
            assert!(
                matches!(&c.verdict, VerdictReport::Refused { name, .. } if name == "no-saved-verdict"),
                "{c:?}"
            );
        }
    }
    assert_eq!(cold.report().cache.validations, 0);
    file_planner(&path, false).compile(&sites()).expect("learn");
    let warm = file_planner(&path, true)
        .compile(&sites())
        .expect("saved-only, filled");
    assert_eq!(warm.report().cache.validations, 0);
    for s in &warm.report().sites {
        let copy = s
            .candidates
            .iter()
            .find(|c| c.name == ArmCopy.name())
            .expect("listed");
        assert!(
            matches!(copy.verdict, VerdictReport::Validated { cached: true, .. }),
            "{copy:?}"
        );
        // The lazy twin's mismatch is a saved fact too.
        let lazy = s
            .candidates
            .iter()
            .find(|c| c.name == Lazy.name())
            .expect("listed");
        assert!(
            matches!(&lazy.verdict, VerdictReport::Refused { name, cached: true, .. } if name == "mismatch"),
            "{lazy:?}"
        );
    }
}

#[test]
fn exact_tie_is_decided_before_any_race() {
    // Every host twin beside the arm, priced by size with a 1-cycle nudge
    // on odd lengths: bodies of similar size fall within the separation.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("plan.bin");
    let make = || {
        Planner::new(
            catalogue(vec![Arc::new(ArmCopy)]),
            Host::detect(),
            Arc::new(BytesPricer { odd_bias: 1.0 }),
            Options {
                cache: CacheLocation::File(path.clone()),
                racing: true,
                separation: 1.0, // everything is "too close": always race
                ..options(EmitMode::On)
            },
        )
    };
    // The arm and its copy have the same bytes: an exact tie is decided
    // before any race, so no race runs.
    let plan = make().compile(&sites()).expect("compile");
    assert_eq!(plan.report().cache.races, 0);
    assert!(plan.report().sites.iter().all(|s| s.rule == Rule::ExactTie));
}

#[test]
#[cfg_attr(
    all(
        target_arch = "x86_64",
        not(all(weft_host_has = "avx2", weft_host_has = "f16c"))
    ),
    ignore = "needs avx2 and f16c (the f32x4 twins)"
)]
#[cfg_attr(
    all(target_arch = "aarch64", not(weft_host_has = "dotprod")),
    ignore = "needs dotprod (the f32x4 twins)"
)]
fn real_twins_race_the_arm_when_the_model_cannot_separate_them() {
    let twins = f32x4_twins();
    assert!(runnable_twins(&twins) >= 1, "a twin runs here");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("plan.bin");
    let make = || {
        Planner::new(
            catalogue(twins.clone()),
            Host::detect(),
            Arc::new(BytesPricer { odd_bias: 0.0 }),
            Options {
                cache: CacheLocation::File(path.clone()),
                racing: true,
                separation: 1e9, // the model never separates: always race
                race_budget: weft_plan::RaceBudget {
                    max_time: std::time::Duration::from_millis(5),
                    min_rounds: 3,
                    ..Default::default()
                },
                ..options(EmitMode::On)
            },
        )
    };
    let site = vec![Site::new(
        Family(weft_q8::FAMILY),
        weft_q8::geometry(256, 512, 1),
    )];
    let first = make().compile(&site).expect("compile");
    assert_eq!(first.report().cache.races, 1, "{}", first.report());
    let s = &first.report().sites[0];
    assert!(matches!(s.rule, Rule::Race | Rule::RaceTie), "{s:?}");
    assert!(s.candidates.iter().any(|c| c.race.is_some()));
    let second = make().compile(&site).expect("compile");
    assert_eq!(second.report().cache.races, 0);
    assert_eq!(second.report().cache.race_hits, 1);
    assert_eq!(second.image(), first.image());
}

/// A cost model that can price nothing (as for code whose loops it cannot
/// match to the offer's nest).
struct NoPricer;

impl Pricer for NoPricer {
    fn price(
        &self,
        _: &NativeCode,
        _: &[LoopTrip],
        _: &Offer,
        _: Residency,
    ) -> Result<Priced, CostError> {
        Err(CostError::NestMismatch {
            found: "stand-in".to_owned(),
            stated: "none".to_owned(),
        })
    }
}

/// A cost model where every twin sits on one floor below the arm, as
/// memory-bound twins of a streamed site do; it records the residency it
/// was asked about. The planner prices a site's arm before its twins, and
/// each test site below has its own residency, so the first body priced at
/// a residency is that site's arm.
struct FloorPricer {
    asked: std::sync::Mutex<Vec<Residency>>,
}

impl Pricer for FloorPricer {
    fn price(
        &self,
        _: &NativeCode,
        _: &[LoopTrip],
        _: &Offer,
        residency: Residency,
    ) -> Result<Priced, CostError> {
        let mut asked = self.asked.lock().expect("lock");
        let arm = !asked.contains(&residency);
        asked.push(residency);
        let cycles = if arm { 1e9 } else { 1e6 };
        Ok(Priced::total(Price {
            cycles,
            floor: 1e6,
            model: PriceModel::Roofline,
        }))
    }
}

fn runnable_twins(twins: &[Arc<dyn Twin>]) -> usize {
    let host = Host::detect();
    twins
        .iter()
        .filter(|t| {
            t.isa() == host.isa && weft_kernel::require_features(&host, t.requires()).is_ok()
        })
        .count()
}

#[test]
#[cfg_attr(
    all(
        target_arch = "x86_64",
        not(all(weft_host_has = "avx2", weft_host_has = "f16c"))
    ),
    ignore = "needs avx2 and f16c (the f32x4 twins)"
)]
#[cfg_attr(
    all(target_arch = "aarch64", not(weft_host_has = "dotprod")),
    ignore = "needs dotprod (the f32x4 twins)"
)]
fn twins_tied_exactly_below_the_arm_race_and_streamed_races_are_kept_apart() {
    let twins = f32x4_twins();
    assert!(runnable_twins(&twins) >= 2, "two twins run here");
    let pricer = Arc::new(FloorPricer {
        asked: Default::default(),
    });
    let mut p = Planner::new(
        catalogue(twins),
        Host::detect(),
        pricer.clone(),
        racing_options(),
    );
    let g = weft_q8::geometry(64, 256, 1);
    let cached = Site::new(Family(weft_q8::FAMILY), g.clone());
    let streamed = cached.clone().with_residency(Residency::Streamed);
    let plan = p.compile(&[cached, streamed]).expect("compile");
    let report = plan.report();
    let n = runnable_twins(&f32x4_twins());
    // A knockout among the n tied twins per site: n - 1 races each, none
    // shared between the cached and the streamed site.
    assert_eq!(report.cache.races, 2 * (n - 1), "{report}");
    for s in &report.sites {
        assert!(matches!(s.rule, Rule::Race | Rule::ExactTie), "{report}");
        assert_ne!(s.chosen, weft_q8::arm::ARM_NAME, "{report}");
        assert!(s.candidates.iter().filter(|c| c.race.is_some()).count() >= 2);
    }
    assert_eq!(report.sites[1].residency, Residency::Streamed);
    assert_eq!(plan.sites()[1].residency, Residency::Streamed);
    let asked = pricer.asked.lock().expect("lock");
    assert!(asked.contains(&Residency::Cached) && asked.contains(&Residency::Streamed));
}

#[test]
fn candidates_race_when_the_arm_cannot_be_priced() {
    let twins = f32x4_twins();
    let host = Host::detect();
    let runnable = twins
        .iter()
        .any(|t| t.isa() == host.isa && weft_kernel::require_features(&host, t.requires()).is_ok());
    let mut p = Planner::new(
        catalogue(twins),
        Host::detect(),
        Arc::new(NoPricer),
        racing_options(),
    );
    let site = vec![Site::new(
        Family(weft_q8::FAMILY),
        weft_q8::geometry(256, 512, 1),
    )];
    let plan = p.compile(&site).expect("compile");
    let s = &plan.report().sites[0];
    if !runnable {
        assert_eq!(s.rule, Rule::Only, "{s:?}");
        return;
    }
    // The arm met every runnable twin in turn (or lost and its winner did).
    assert!(plan.report().cache.races >= 1, "{}", plan.report());
    assert!(
        matches!(s.rule, Rule::Race | Rule::Unpriced),
        "{}",
        plan.report()
    );
    assert!(s.candidates.iter().any(|c| c.race.is_some()));
}

#[test]
fn threaded_execution_is_bit_identical_to_one_thread() {
    let mut p = Planner::new(
        catalogue(f32x4_twins()),
        Host::detect(),
        Arc::new(BytesPricer { odd_bias: 0.0 }),
        Options {
            split_min_cycles: 0.0, // split every site
            part_min_cycles: 0.0,  // in as many parts as the executor cuts
            ..options(EmitMode::On)
        },
    );
    let (rows, blocks, batch) = (301usize, 13usize, 3usize);
    let site = Site::new(
        Family(weft_q8::FAMILY),
        weft_q8::geometry(rows as u64, blocks as u64 * 32, batch as u64),
    );
    let plan = p.compile(&[site]).expect("compile");
    let k = plan.kernel::<Q8MatvecArgs>(0).expect("kernel");
    assert!(k.splits());
    let w = random_weights(rows, blocks, 3, true);
    let x = random_activations(blocks, batch, 4);
    let mut one = vec![0.0f32; rows * batch];
    let args = Q8MatvecArgs::new(&w, &x, &mut one, 0..rows).expect("args");
    // SAFETY: `args` was checked against `w`, `x` and `one`, live here.
    unsafe { k.kernel().call(&args) };
    for threads in [1usize, 2, 3, 4] {
        let exec = Executor::new(threads);
        for _ in 0..20 {
            let mut y = vec![f32::NAN; rows * batch];
            let args = Q8MatvecArgs::new(&w, &x, &mut y, 0..rows).expect("args");
            // SAFETY: as above, with `y`.
            unsafe { k.run(&exec, &args) };
            let same = one
                .iter()
                .zip(&y)
                .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
            assert!(same, "{threads} threads");
        }
    }
}

/// A split site's parts follow its price: one per `part_min_cycles` of
/// the chosen body's price, never fewer than the threads, never more than
/// four per thread, a whole number per thread.
#[test]
fn a_split_site_is_cut_into_one_part_per_part_min_cycles_of_its_price() {
    let (rows, blocks, batch) = (301usize, 13usize, 3usize);
    let site = Site::new(
        Family(weft_q8::FAMILY),
        weft_q8::geometry(rows as u64, blocks as u64 * 32, batch as u64),
    );
    let compile = |part_min_cycles: f64| {
        let mut p = Planner::new(
            catalogue(f32x4_twins()),
            Host::detect(),
            Arc::new(BytesPricer { odd_bias: 0.0 }),
            Options {
                split_min_cycles: 0.0,
                part_min_cycles,
                ..options(EmitMode::On)
            },
        );
        p.compile(std::slice::from_ref(&site)).expect("compile")
    };
    let price = compile(0.0).sites()[0].price.expect("priced").cycles;
    assert!(price > 0.0);
    // Five parts' worth of price: four parts on two threads (a whole
    // number each, of at most eight) and on four (of at least four), five
    // on five.
    let plan = compile(price / 5.5);
    let k = plan.kernel::<Q8MatvecArgs>(0).expect("kernel");
    assert_eq!(
        (k.parts_on(1), k.parts_on(2), k.parts_on(4), k.parts_on(5)),
        (1, 4, 4, 5)
    );
    // Less than one part's worth: one part per thread.
    let plan = compile(price * 2.0);
    let k = plan.kernel::<Q8MatvecArgs>(0).expect("kernel");
    assert_eq!((k.parts_on(2), k.parts_on(3)), (2, 3));
    // No budget: four parts per thread.
    let plan = compile(0.0);
    let k = plan.kernel::<Q8MatvecArgs>(0).expect("kernel");
    assert_eq!(k.parts_on(2), 8);
}

#[test]
fn bad_requests_are_named_errors() {
    let mut p = planner(catalogue(Vec::new()), EmitMode::On);
    let e = p
        .compile(&[Site::new(Family("no.such"), weft_kernel::Geometry::new())])
        .expect_err("unknown");
    assert_eq!(e.name(), "unknown-family");
    let e = p
        .compile(&[Site::new(
            Family(weft_q8::FAMILY),
            weft_q8::geometry(4, 33, 1),
        )])
        .expect_err("bad geometry");
    assert_eq!(e.name(), "no-candidate");
    assert!(e.to_string().contains("unsupported-geometry"), "{e}");
    let plan = p.compile(&sites()).expect("compile");
    assert_eq!(
        plan.kernel::<weft_elementwise::ElementwiseArgs>(0)
            .expect_err("wrong args")
            .name(),
        "wrong-args"
    );
    assert_eq!(
        plan.kernel::<Q8MatvecArgs>(99).expect_err("no site").name(),
        "no-such-site"
    );
    let mut c = Catalogue::new();
    c.register(entry_with(Vec::new())).expect("first");
    assert_eq!(
        c.register(entry_with(Vec::new()))
            .expect_err("twice")
            .name(),
        "bad-registration"
    );
}

// ---- The real pricer: weft-cost's model of this host ----

fn real_options(cache: CacheLocation) -> Options {
    Options {
        cache,
        // Every site splits, so two threads really run two parts.
        split_min_cycles: 0.0,
        race_budget: weft_plan::RaceBudget {
            max_time: std::time::Duration::from_millis(10),
            min_rounds: 3,
            ..Default::default()
        },
        ..Options::default()
    }
}

/// SmolLM2-135M's q projection and FFN up projection, one token. (Each
/// twin is validated once per contract on the family's fixed cases, so
/// every site costs a full validation round in a debug build.)
fn real_sites() -> Vec<Site> {
    [(576u64, 576u64, 1u64), (1536, 576, 1)]
        .into_iter()
        .map(|(r, c, b)| Site::new(Family(weft_q8::FAMILY), weft_q8::geometry(r, c, b)))
        .collect()
}

/// `Y = W·X` through `exec`, from a fresh NaN-filled output.
fn run_matvec(
    k: &weft_plan::SiteKernel<Q8MatvecArgs>,
    exec: &Executor,
    w: &weft_q8::Q8Weights,
    x: &weft_q8::Q8Activations,
) -> Vec<u32> {
    let mut y = vec![f32::NAN; w.rows() * x.batch()];
    let args = Q8MatvecArgs::new(w, x, &mut y, 0..w.rows()).expect("args");
    // SAFETY: `args` was checked against `w`, `x` and `y`, live here.
    unsafe { k.run(exec, &args) };
    // NaNs compare by class (the contract's rule): one canonical pattern.
    y.iter()
        .map(|v| if v.is_nan() { 0x7fc0_0000 } else { v.to_bits() })
        .collect()
}

#[test]
fn real_pricer_prices_every_candidate_and_the_choice_runs_like_the_arm() {
    let host = Host::detect();
    let model = format!("{:?}", weft_cost::CostModel::for_host(&host).model());
    let full = {
        let mut c = Catalogue::new();
        c.register(weft_q8::entry()).expect("register");
        c
    };
    let sites = real_sites();
    let plan = Planner::for_host(
        full.clone(),
        host.clone(),
        real_options(CacheLocation::InMemory),
    )
    .compile(&sites)
    .expect("compile");
    let arms_only = Planner::for_host(
        full.without_twins(),
        host.clone(),
        real_options(CacheLocation::InMemory),
    )
    .compile(&sites)
    .expect("compile, arms only");
    let report = plan.report();
    for (i, s) in report.sites.iter().enumerate() {
        for c in &s.candidates {
            match (&c.verdict, &c.price) {
                // Everything that survived to pricing was priced by the
                // host's model.
                (
                    VerdictReport::Offered | VerdictReport::Validated { .. },
                    Some(weft_plan::PriceReport::Priced {
                        model: m, cycles, ..
                    }),
                ) => {
                    assert_eq!(m, &model, "{}: {report}", c.name);
                    assert!(cycles.is_finite() && *cycles > 0.0, "{}: {cycles}", c.name);
                }
                (VerdictReport::Refused { name, .. }, None) => {
                    // The rows2 arm needs the site's weights to repack; twins
                    // of other ISAs or features are refused by name.
                    assert!(
                        matches!(
                            name.as_str(),
                            "bad-operand" | "wrong-isa" | "missing-feature"
                        ),
                        "{}: {name}",
                        c.name
                    );
                }
                (VerdictReport::NotConsidered { .. }, None) => {}
                other => panic!("{} at site {i}: {other:?}\n{report}", c.name),
            }
        }
        let site = &plan.sites()[i];
        let chosen = s
            .candidates
            .iter()
            .find(|c| c.name == s.chosen)
            .expect("listed");
        let price_of = |c: &weft_plan::CandidateReport| match &c.price {
            Some(weft_plan::PriceReport::Priced { cycles, .. }) => Some(*cycles),
            _ => None,
        };
        let cheapest = s
            .candidates
            .iter()
            .filter(|c| c.arm.as_deref().is_none_or(|a| a == weft_q8::arm::ARM_NAME))
            .filter_map(price_of)
            .fold(f64::INFINITY, f64::min);
        match &site.kind {
            Kind::Twin { arm } => {
                assert_eq!(arm, weft_q8::arm::ARM_NAME);
                assert!(
                    matches!(chosen.verdict, VerdictReport::Validated { .. }),
                    "{chosen:?}"
                );
            }
            Kind::Arm => assert_eq!(site.candidate, weft_q8::arm::ARM_NAME),
        }
        // The choice is the cheapest, unless a race (run now) overruled a
        // price too close to call.
        match s.rule {
            Rule::Cheapest | Rule::ExactTie | Rule::Only => {
                assert_eq!(price_of(chosen), Some(cheapest), "{s:?}");
            }
            Rule::Race | Rule::RaceTie => assert!(
                price_of(chosen).is_some_and(|p| p <= cheapest * (1.0 + 0.03)),
                "{s:?}"
            ),
            Rule::Unpriced => panic!("the real model priced nothing: {s:?}"),
        }
        assert!(!s.reason.is_empty());
        // The arm-only plan chose the same offer: numerics never depend
        // on the twins.
        assert_eq!(arms_only.sites()[i].contract, site.contract);
        assert_eq!(arms_only.sites()[i].candidate, weft_q8::arm::ARM_NAME);

        // Run: the chosen body on 1 and 2 threads, bit for bit the arm's.
        let g = &site.geometry;
        let (rows, cols, batch) = (
            g.get("rows").expect("rows") as usize,
            g.get("cols").expect("cols") as usize,
            g.get("batch").expect("batch") as usize,
        );
        let w = random_weights(rows, cols / 32, 11 + i as u64, true);
        let x = random_activations(cols / 32, batch, 12 + i as u64);
        let chosen_k = plan.kernel::<Q8MatvecArgs>(i).expect("kernel");
        let arm_k = arms_only.kernel::<Q8MatvecArgs>(i).expect("arm kernel");
        assert!(chosen_k.splits() && arm_k.splits());
        let want = run_matvec(&arm_k, &Executor::new(1), &w, &x);
        for threads in [1usize, 2] {
            let exec = Executor::new(threads);
            assert_eq!(run_matvec(&arm_k, &exec, &w, &x), want, "arm, {threads}");
            assert_eq!(
                run_matvec(&chosen_k, &exec, &w, &x),
                want,
                "{} at site {i}, {threads} threads",
                s.chosen
            );
        }
    }
}

#[test]
fn warm_plan_reads_every_body_and_equals_the_cold_plan() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("plan.bin");
    let make = |cache_bodies: bool| {
        let mut c = Catalogue::new();
        c.register(weft_q8::entry()).expect("register");
        c.register(weft_q8::quantize::entry()).expect("register");
        Planner::for_host(
            c,
            Host::detect(),
            Options {
                cache_bodies,
                ..real_options(CacheLocation::File(path.clone()))
            },
        )
    };
    let sites = vec![
        Site::new(Family(weft_q8::FAMILY), weft_q8::geometry(192, 576, 2)),
        Site::new(
            Family(weft_q8::quantize::FAMILY),
            weft_q8::quantize::geometry(576, 2),
        ),
    ];
    let cold = make(true).compile(&sites).expect("cold");
    let c = &cold.report().cache;
    assert_eq!(c.body_hits, 0);
    assert!(c.builds > 0);
    let warm = make(true).compile(&sites).expect("warm");
    let w = &warm.report().cache;
    assert_eq!(
        (w.builds, w.validations, w.races),
        (0, 0, 0),
        "{}",
        warm.report()
    );
    assert_eq!(w.body_hits, c.builds);
    assert_eq!(warm.image(), cold.image());
    for (a, b) in warm.sites().iter().zip(cold.sites()) {
        assert_eq!(*a.code, *b.code, "listing and loops too");
    }
    // Bodies off: everything is built again, and the plan is the same.
    let rebuilt = make(false).compile(&sites).expect("rebuilt");
    assert_eq!(rebuilt.report().cache.body_hits, 0);
    assert_eq!(rebuilt.report().cache.builds, c.builds);
    assert_eq!(rebuilt.image(), cold.image());
}

/// A twin whose emitter changes its mind: its first body is `first` (the
/// arm's bytes, or a bare return), every later one the other. A judge that
/// emitted again would see other bytes than the planner prices and places.
struct Fickle {
    right_first: bool,
    calls: std::sync::atomic::AtomicUsize,
}

// SAFETY: every body it returns is ArmCopy's or Lazy's, both leaf bodies
// for `Q8MatvecArgs`.
unsafe impl Twin for Fickle {
    fn name(&self) -> &'static str {
        "q8_0.matvec.twin.fickle"
    }
    fn isa(&self) -> Isa {
        Isa::of_target()
    }
    fn requires(&self) -> &'static [Feature] {
        &[]
    }
    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        let first = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
        if first == self.right_first {
            ArmCopy.emit(offer)
        } else {
            Lazy.emit(offer)
        }
    }
}

#[test]
fn a_twin_is_judged_on_the_bytes_that_run() {
    let site = vec![Site::new(
        Family(weft_q8::FAMILY),
        weft_q8::geometry(64, 128, 1),
    )];
    for right_first in [false, true] {
        let fickle = Arc::new(Fickle {
            right_first,
            calls: Default::default(),
        });
        let plan = planner(
            catalogue(vec![Arc::clone(&fickle) as Arc<dyn Twin>]),
            EmitMode::On,
        )
        .compile(&site)
        .expect("compile");
        // Emitted once: the same bytes are judged, hashed, priced, placed.
        assert_eq!(
            fickle.calls.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "right_first {right_first}"
        );
        let c = plan.report().sites[0]
            .candidates
            .iter()
            .find(|c| c.name == fickle.name())
            .expect("listed");
        match (&c.verdict, right_first) {
            (VerdictReport::Validated { .. }, true) => {}
            (VerdictReport::Refused { name, .. }, false) if name == "mismatch" => {}
            (v, _) => panic!("right_first {right_first}: {v:?}"),
        }
    }
}

/// The real check, under a case-generator label a test can change.
struct Relabelled(&'static str);

impl weft_kernel::TwinCheck for Relabelled {
    fn check(
        &self,
        arm: weft_kernel::Judged<'_>,
        twin: weft_kernel::Judged<'_>,
        offer: &Offer,
        host: &Host,
        seed: u64,
    ) -> Result<weft_kernel::Checked, Refusal> {
        Checker(Q8Validation).check(arm, twin, offer, host, seed)
    }

    fn cases_id(&self, offer: &Offer, seed: u64) -> String {
        format!(
            "{}; {}",
            self.0,
            Checker(Q8Validation).cases_id(offer, seed)
        )
    }
}

#[test]
fn a_stronger_case_set_judges_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("plan.bin");
    let compile = |label: &'static str| {
        let mut entry = entry_with(vec![Arc::new(ArmCopy)]);
        entry.arms[0].check = Arc::new(Relabelled(label));
        let mut c = Catalogue::new();
        c.register(entry).expect("register");
        Planner::new(
            c,
            Host::detect(),
            Arc::new(BytesPricer { odd_bias: 0.0 }),
            Options {
                cache: CacheLocation::File(path.clone()),
                ..options(EmitMode::On)
            },
        )
        .compile(&sites())
        .expect("compile")
    };
    let first = compile("cases v1");
    assert!(first.report().cache.validations > 0);
    let same = compile("cases v1");
    assert_eq!(same.report().cache.validations, 0, "a saved verdict serves");
    assert!(same.report().cache.verdict_hits > 0);
    let stronger = compile("cases v2");
    assert_eq!(
        stronger.report().cache.validations,
        first.report().cache.validations,
        "every twin is judged again by the new cases"
    );
}

/// A twin whose emitter panics, and one that needs a feature no host has
/// named here (the planner gates and contains; the judge never sees them).
struct Unemittable {
    requires: &'static [Feature],
}

// SAFETY: it never produces a body.
unsafe impl Twin for Unemittable {
    fn name(&self) -> &'static str {
        if self.requires.is_empty() {
            "q8_0.matvec.twin.panics"
        } else {
            "q8_0.matvec.twin.needs-features"
        }
    }
    fn isa(&self) -> Isa {
        Isa::of_target()
    }
    fn requires(&self) -> &'static [Feature] {
        self.requires
    }
    fn emit(&self, _offer: &Offer) -> Result<NativeCode, Refusal> {
        panic!("this twin cannot emit")
    }
}

#[test]
fn the_planner_contains_a_panicking_emit_and_gates_features_before_emitting() {
    let host = Host::detect();
    // A feature this host lacks (every host lacks one of these two).
    let missing: &'static [Feature] = if host.has(Feature::Avx512f) {
        &[Feature::Dotprod]
    } else {
        &[Feature::Avx512f]
    };
    let twins: Vec<Arc<dyn Twin>> = vec![
        Arc::new(Unemittable { requires: &[] }),
        Arc::new(Unemittable { requires: missing }),
    ];
    let plan = planner(catalogue(twins.clone()), EmitMode::On)
        .compile(&sites()[..1])
        .expect("on mode compiles");
    let names: Vec<(&str, String)> = plan.report().sites[0]
        .candidates
        .iter()
        .filter_map(|c| match &c.verdict {
            VerdictReport::Refused { name, .. } => Some((c.name.as_str(), name.clone())),
            _ => None,
        })
        .collect();
    assert!(
        names.contains(&("q8_0.matvec.twin.panics", "emit-error".to_owned())),
        "{names:?}"
    );
    assert!(
        names.contains(&(
            "q8_0.matvec.twin.needs-features",
            "missing-feature".to_owned()
        )),
        "{names:?}"
    );
    // Strict mode stops on the emit error (a fault of the twin), not on the
    // missing feature (a fact about the host).
    let err = planner(catalogue(twins), EmitMode::Strict)
        .compile(&sites()[..1])
        .expect_err("strict stops");
    assert!(err.to_string().contains("emit-error"), "{err}");
}

#[test]
fn the_plan_remembers_every_candidates_bytes_price_and_label() {
    let twins = f32x4_twins();
    let mut p = planner(catalogue(twins), EmitMode::On);
    let sites: Vec<Site> = sites()
        .into_iter()
        .enumerate()
        .map(|(i, s)| s.with_label(format!("matvec.{i}")))
        .collect();
    let plan = p.compile(&sites).expect("compile");
    for (s, r) in plan.sites().iter().zip(&plan.report().sites) {
        assert_eq!(s.label, r.label);
        assert!(s.label.starts_with("matvec."), "{}", s.label);
        assert_eq!(s.rule, r.rule);
        // The candidates are the report's, in its order.
        let names: Vec<&str> = s.candidates.iter().map(|c| c.name.as_str()).collect();
        let reported: Vec<&str> = r.candidates.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, reported);
        for (c, cr) in s.candidates.iter().zip(&r.candidates) {
            let judged = matches!(
                cr.verdict,
                VerdictReport::Offered | VerdictReport::Validated { .. }
            );
            // Whatever was judged kept its bytes and its price breakdown,
            // and the report's cycles are the breakdown's.
            assert_eq!(c.code.is_some(), judged, "{}: {cr:?}", c.name);
            match (&c.priced, &cr.price) {
                (Some(Ok(p)), Some(weft_plan::PriceReport::Priced { cycles, .. })) => {
                    assert_eq!(p.price.cycles, *cycles)
                }
                (None, None) => assert!(!judged),
                other => panic!("{}: {other:?}", c.name),
            }
        }
        // The chosen body is the judged body of the chosen candidate.
        let chosen = s.candidate(s.candidate).expect("the choice is a candidate");
        assert_eq!(chosen.code.as_deref(), Some(&*s.code));
    }
    // A site given no label is labelled by its family.
    let plan = p.compile(&self::sites()[..1]).expect("compile");
    assert_eq!(plan.sites()[0].label, weft_q8::FAMILY);
}

/// [`Planner::estimate`] weighs geometries, not bodies: it is the cheapest
/// price among the arm and the twins the host runs, whether or not
/// validation would accept them (the lazy twin's one instruction is the
/// cheapest here, though the plan refuses it), and the arm's own price
/// with emission off.
#[test]
fn an_estimate_is_the_cheapest_priced_body_validated_or_not_and_the_arm_alone_when_off() {
    let mut twins = f32x4_twins();
    twins.push(Arc::new(Lazy));
    for site in sites() {
        let mut on = planner(catalogue(twins.clone()), EmitMode::On);
        let estimate = on.estimate(&site).expect("estimate").expect("priced");
        // BytesPricer: ten cycles a byte; the lazy body is one instruction.
        let lazy = lazy_body().len() as f64 * 10.0;
        assert_eq!(estimate.cycles, lazy, "the lazy twin's one instruction");
        let plan = on.compile(std::slice::from_ref(&site)).expect("compile");
        let chosen = plan.sites()[0].price.expect("priced");
        assert!(chosen.cycles > estimate.cycles, "{}", plan.report());

        let mut off = planner(catalogue(twins.clone()), EmitMode::Off);
        let estimate = off.estimate(&site).expect("estimate").expect("priced");
        let plan = off.compile(std::slice::from_ref(&site)).expect("compile");
        assert_eq!(plan.sites()[0].kind, Kind::Arm);
        assert_eq!(Some(estimate), plan.sites()[0].price);
    }
    let mut p = planner(Catalogue::new(), EmitMode::On);
    assert!(matches!(
        p.estimate(&sites()[0]),
        Err(PlanError::UnknownFamily { .. })
    ));
}

/// A token's `q8_0.matmul` streams its weights, so the real model prices
/// the arm and every twin at one roofline floor; the arm is kept on that
/// tie only when no tied body's own cycles under the floor are fewer than
/// its own (else they race, the arm among them). Checked on what the real
/// pricer says at the model's shapes, on any host.
#[test]
fn a_floor_tie_keeps_the_arm_only_when_no_tied_body_is_cheaper_under_it() {
    let mut c = Catalogue::new();
    c.register(weft_q8::matmul::entry()).expect("register");
    let sites: Vec<Site> = [(576u64, 576u64), (1536, 576), (576, 1536)]
        .into_iter()
        .map(|(r, k)| {
            Site::new(
                Family(weft_q8::matmul::FAMILY),
                weft_q8::matmul::geometry(r, k, 1),
            )
            .with_residency(Residency::Streamed)
        })
        .collect();
    let plan = Planner::for_host(c, Host::detect(), racing_options())
        .compile(&sites)
        .expect("compile");
    for (site, report) in plan.sites().iter().zip(&plan.report().sites) {
        let priced: Vec<(&str, Priced)> = site
            .candidates
            .iter()
            .filter_map(|c| match &c.priced {
                Some(Ok(p)) => Some((c.name.as_str(), p.clone())),
                _ => None,
            })
            .collect();
        let low = priced
            .iter()
            .map(|(_, p)| p.price.cycles)
            .fold(f64::INFINITY, f64::min);
        let tied: Vec<&(&str, Priced)> = priced
            .iter()
            .filter(|(_, p)| p.price.cycles == low)
            .collect();
        let arm = &priced[0];
        assert_eq!(arm.0, weft_q8::matmul::ARM_NAME);
        let hidden = tied.len() > 1
            && arm.1.price.cycles == low
            && tied
                .iter()
                .any(|(_, p)| p.model_cycles < arm.1.model_cycles);
        if hidden {
            assert!(
                report.reason.contains("not the cheapest under it"),
                "{}: {}",
                report.label,
                report.reason
            );
        } else if report.rule == Rule::ExactTie {
            assert!(
                tied.iter()
                    .all(|(_, p)| p.model_cycles >= arm.1.model_cycles),
                "{report:?}"
            );
        }
    }
}
