//! Both families through the planner, as a downstream user meets them:
//! sites of each family (grouped convolutions of the direct family
//! included) compiled with weft-cost's model of this host, run
//! on two threads, checked bit for bit against the scalar reference; on
//! an x64 host with AVX2 + FMA or on arm64 the planner picks a validated
//! twin; and the
//! kill switch: `off` plans exactly what a catalogue without twins plans,
//! and computes the same bits as `on`.

use weft_conv::{reference, site, Activation, ConvArgs, ConvGeometry, PackedFilter};
use weft_plan::{CacheLocation, Catalogue, CompiledPlan, EmitMode, Executor, Options, Planner};

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 20) as f32 - 8.0
        })
        .collect()
}

fn geometries() -> Vec<ConvGeometry> {
    vec![
        ConvGeometry::square(1, 28, 64, 64, 3, 1, 1).with_act(Activation::Relu),
        ConvGeometry::square(2, 15, 3, 40, 7, 2, 3),
        ConvGeometry::square(1, 28, 1, 1, 3, 2, 1)
            .depthwise(48)
            .with_act(Activation::Relu6),
        ConvGeometry::square(1, 14, 1, 1, 3, 1, 1)
            .depthwise(144)
            .with_act(Activation::Silu),
        // Grouped (ResNeXt-like: 4 groups of 16 → 24 channels) and a
        // channel multiplier of 2 (groups = cin = 8, cout = 16): the
        // direct family.
        ConvGeometry {
            groups: 4,
            ..ConvGeometry::square(1, 14, 64, 96, 3, 1, 1).with_act(Activation::Relu)
        },
        ConvGeometry {
            groups: 8,
            ..ConvGeometry::square(2, 12, 8, 16, 3, 2, 1).with_act(Activation::Silu)
        },
    ]
}

fn options(mode: EmitMode) -> Options {
    Options {
        mode,
        cache: CacheLocation::InMemory,
        racing: false,
        ..Options::default()
    }
}

fn catalogue() -> Catalogue {
    let mut c = Catalogue::new();
    for e in weft_conv::entries() {
        c.register(e).unwrap();
    }
    c
}

fn compile(catalogue: Catalogue, mode: EmitMode) -> CompiledPlan {
    let host = weft_host::Host::detect();
    let sites: Vec<_> = geometries()
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let w = values(g.w_len(), 100 + i as u64);
            let b = values(g.cout as usize, 200 + i as u64);
            site(g, &w, Some(&b)).unwrap()
        })
        .collect();
    Planner::new(
        catalogue,
        host.clone(),
        std::sync::Arc::new(weft_cost::CostModel::for_host(&host)),
        options(mode),
    )
    .compile(&sites)
    .expect("every site has an arm")
}

/// Run every site of `plan` on two threads; check each output against
/// the reference; return the outputs.
fn run(plan: &CompiledPlan) -> Vec<Vec<f32>> {
    let exec = Executor::new(2);
    geometries()
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let s = g.check().unwrap();
            let w = values(g.w_len(), 100 + i as u64);
            let b = values(g.cout as usize, 200 + i as u64);
            let x = values(g.x_len(), 7 + i as u64);
            let site = &plan.sites()[i];
            let filter = PackedFilter::from_site(site.packed("w"), g).unwrap();
            let mut y = vec![0.0f32; g.y_len(&s)];
            let args = ConvArgs::new(g, &x, &filter, &mut y).unwrap();
            let kernel = plan.kernel::<ConvArgs>(i).unwrap();
            // SAFETY: `args` was checked against `x`, `filter` and `y`,
            // live until the call returns.
            unsafe { kernel.run(&exec, &args) };
            let mut want = vec![0.0f32; g.y_len(&s)];
            // The reference of the chosen arm's contract: the direct
            // arm's, or the Winograd arm's own.
            if filter.is_winograd() {
                weft_conv::winograd::reference::conv2d(
                    g,
                    &x,
                    &w,
                    Some(&b),
                    &mut want,
                    0..g.batch * s.out_h,
                );
            } else {
                reference::conv2d(g, &x, &w, Some(&b), &mut want, 0..g.batch * s.out_h);
            }
            if let Some(e) = (0..y.len()).find(|&e| y[e].to_bits() != want[e].to_bits()) {
                panic!(
                    "site {i} ({}): y[{e}] = {:e}, reference {:e}",
                    site.candidate, y[e], want[e]
                );
            }
            y
        })
        .collect()
}

#[test]
fn planned_sites_run_on_two_threads_and_equal_the_reference() {
    let plan = compile(catalogue(), EmitMode::On);
    println!("{}", plan.report());
    run(&plan);
}

/// On an x64 host with AVX2 and FMA, or on arm64 (NEON), the twins are
/// validated and priced below their arm: the planner picks a twin at
/// every site.
#[test]
#[cfg_attr(
    all(
        target_arch = "x86_64",
        not(all(weft_host_has = "avx2", weft_host_has = "fma"))
    ),
    ignore = "needs an AVX2 + FMA host to run the twins"
)]
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    ignore = "no twins for this ISA"
)]
fn the_planner_picks_a_validated_twin_on_this_host() {
    let plan = compile(catalogue(), EmitMode::On);
    for s in plan.sites() {
        assert!(
            s.candidate.contains(".twin."),
            "{}: the planner chose {}\n{}",
            s.family,
            s.candidate,
            plan.report()
        );
    }
}

#[test]
fn the_kill_switch_plans_what_a_catalogue_without_twins_plans_and_computes_the_same_bits() {
    let off = compile(catalogue(), EmitMode::Off);
    let bare = compile(catalogue().without_twins(), EmitMode::On);
    assert_eq!(off.image(), bare.image());
    let on = compile(catalogue(), EmitMode::On);
    assert_eq!(run(&on), run(&off));
}
