//! The family through the planner, as a downstream user meets it: sites
//! of every arm's kind compiled with weft-cost's model of this host, run
//! on two threads, checked bit for bit against the scalar reference; and
//! the kill switch: `off` plans exactly what a catalogue without twins
//! plans, and computes the same bits as `on` (every body shares one
//! contract).

use weft_gemm::{reference, site, BLayout, GemmArgs, MatRef, SiteOperands};
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

/// (m, n, k, B's layout, whether B is given at plan time)
const SITES: [(usize, usize, usize, BLayout, bool); 5] = [
    (64, 1536, 576, BLayout::Rows, true),
    (5, 200, 576, BLayout::Rows, true),
    (100, 70, 33, BLayout::Rows, false),
    (61, 96, 130, BLayout::Transposed, true),
    (3, 33, 7, BLayout::Rows, true),
];

fn options(mode: EmitMode) -> Options {
    Options {
        mode,
        cache: CacheLocation::InMemory,
        racing: false,
        ..Options::default()
    }
}

fn compile(catalogue: Catalogue, mode: EmitMode) -> CompiledPlan {
    let sites: Vec<_> = SITES
        .iter()
        .enumerate()
        .map(|(i, &(m, n, k, layout, given))| {
            let b = values(k * n, 100 + i as u64);
            site(m, n, k, layout, given.then_some(&b[..]))
        })
        .collect();
    Planner::new(
        catalogue,
        weft_host::Host::detect(),
        std::sync::Arc::new(weft_cost::CostModel::for_host(&weft_host::Host::detect())),
        options(mode),
    )
    .compile(&sites)
    .expect("every site has an arm")
}

/// Run every site of `plan` on two threads with β = 0.75 over a C full of
/// values; return the outputs.
fn run(plan: &CompiledPlan) -> Vec<Vec<f32>> {
    let exec = Executor::new(2);
    SITES
        .iter()
        .enumerate()
        .map(|(i, &(m, n, k, layout, _))| {
            let given = values(k * n, 100 + i as u64);
            // B as k × n rows, whatever layout the site was given.
            let b: Vec<f32> = match layout {
                BLayout::Rows => given,
                BLayout::Transposed => (0..k * n).map(|e| given[(e % n) * k + e / n]).collect(),
            };
            let a = values(m * k, 7 + i as u64);
            let s = &plan.sites()[i];
            let ops = SiteOperands::new(s.packed("b"), s.views.as_ref(), k, n).unwrap();
            let mut c = values(m * n, 50 + i as u64);
            let args = ops
                .args(
                    MatRef::dense(&a, m, k),
                    Some(MatRef::dense(&b, k, n)),
                    &mut c,
                    n,
                    (1.0, 0.75),
                )
                .unwrap();
            let kernel = plan.kernel::<GemmArgs>(i).unwrap();
            // SAFETY: `args` was checked against `a`, `b` and `c`, live
            // until the call returns.
            unsafe { kernel.run(&exec, &args) };
            let mut want = values(m * n, 50 + i as u64);
            reference::gemm(
                MatRef::dense(&a, m, k),
                |kk, j| b[kk * n + j],
                &mut want,
                n,
                (1.0, 0.75),
                0..m,
                0..n,
            );
            if let Some(e) = (0..c.len()).find(|&e| c[e].to_bits() != want[e].to_bits()) {
                panic!(
                    "site {i} ({}): C[{e}] = {:e}, reference {:e}",
                    s.candidate, c[e], want[e]
                );
            }
            c
        })
        .collect()
}

fn catalogue() -> Catalogue {
    let mut c = Catalogue::new();
    c.register(weft_gemm::entry()).unwrap();
    c
}

#[test]
fn planned_sites_run_on_two_threads_and_equal_the_reference() {
    let plan = compile(catalogue(), EmitMode::On);
    println!("{}", plan.report());
    run(&plan);
}

#[test]
fn the_kill_switch_plans_what_a_catalogue_without_twins_plans_and_computes_the_same_bits() {
    let off = compile(catalogue(), EmitMode::Off);
    let bare = compile(catalogue().without_twins(), EmitMode::On);
    assert_eq!(off.image(), bare.image());
    let on = compile(catalogue(), EmitMode::On);
    assert_eq!(run(&on), run(&off));
}
