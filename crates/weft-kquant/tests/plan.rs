//! The crate's families through the planner, as a downstream user meets
//! them: Gemma 3 270M's Q4_K, Q6_K and Q5_0 shapes (and ragged ones with
//! a batch) compiled with weft-cost's model of this host, run on two
//! threads, checked bit for bit against each family's scalar reference;
//! and the kill switch: `off` plans exactly what a catalogue without twins
//! plans and computes the same bits as `on`.

use weft_kernel::{Family, Site};
use weft_kquant::cases::random_activations;
use weft_kquant::validation::random_weights;
use weft_kquant::{q4_k, q5_0, q6_k, x_format, Activations, KMatvecArgs, KWeights};
use weft_plan::{CacheLocation, Catalogue, CompiledPlan, EmitMode, Executor, Options, Planner};
use weft_quant::Format;

/// (format, rows, cols, batch).
const SITES: [(Format, usize, usize, usize); 8] = [
    (Format::Q4_K, 640, 1024, 1),
    (Format::Q4_K, 640, 2048, 1),
    (Format::Q4_K, 17, 512, 3),
    (Format::Q6_K, 640, 2048, 1),
    (Format::Q6_K, 5, 768, 2),
    (Format::Q5_0, 2048, 640, 1),
    (Format::Q5_0, 256, 640, 1),
    (Format::Q5_0, 7, 96, 4),
];

fn family(f: Format) -> &'static str {
    match f {
        Format::Q4_K => q4_k::FAMILY,
        Format::Q5_0 => q5_0::FAMILY,
        _ => q6_k::FAMILY,
    }
}

fn reference(w: &KWeights, x: &Activations, y: &mut [f32]) {
    match w.format() {
        Format::Q4_K => q4_k::reference::matvec(w, x, y, 0..w.rows()),
        Format::Q5_0 => q5_0::reference::matvec(w, x, y, 0..w.rows()),
        _ => q6_k::reference::matvec(w, x, y, 0..w.rows()),
    }
}

fn compile(catalogue: Catalogue, mode: EmitMode) -> CompiledPlan {
    let sites: Vec<Site> = SITES
        .iter()
        .map(|&(f, r, c, b)| {
            Site::new(
                Family(family(f)),
                q4_k::geometry(r as u64, c as u64, b as u64),
            )
        })
        .collect();
    let host = weft_host::Host::detect();
    let options = Options {
        mode,
        cache: CacheLocation::InMemory,
        racing: false,
        ..Options::default()
    };
    Planner::new(
        catalogue,
        host.clone(),
        std::sync::Arc::new(weft_cost::CostModel::for_host(&host)),
        options,
    )
    .compile(&sites)
    .expect("every site has an arm")
}

fn catalogue() -> Catalogue {
    let mut c = Catalogue::new();
    c.register(q4_k::entry()).unwrap();
    c.register(q5_0::entry()).unwrap();
    c.register(q6_k::entry()).unwrap();
    c
}

fn run(plan: &CompiledPlan) -> Vec<Vec<f32>> {
    let exec = Executor::new(2);
    SITES
        .iter()
        .enumerate()
        .map(|(i, &(format, rows, cols, batch))| {
            let w = random_weights(
                format,
                rows,
                cols / format.block_len(),
                10 + i as u64,
                false,
            );
            let xf = x_format(format).unwrap();
            let x = random_activations(xf, cols / format.block_len(), batch, 20 + i as u64);
            let mut y = vec![0.0f32; rows * batch];
            let args = w.args(&x, &mut y, 0..rows).unwrap();
            let kernel = plan.kernel::<KMatvecArgs>(i).unwrap();
            // SAFETY: `args` was checked against `w`, `x` and `y`, live
            // until the call returns.
            unsafe { kernel.run(&exec, &args) };
            let mut want = vec![0.0f32; rows * batch];
            reference(&w, &x, &mut want);
            let s = &plan.sites()[i];
            if let Some(e) = (0..y.len()).find(|&e| y[e].to_bits() != want[e].to_bits()) {
                panic!(
                    "site {i} ({}): y[{e}] = {:e}, reference {:e}",
                    s.candidate, y[e], want[e]
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

#[test]
fn the_kill_switch_plans_what_a_catalogue_without_twins_plans_and_computes_the_same_bits() {
    let off = compile(catalogue(), EmitMode::Off);
    let bare = compile(catalogue().without_twins(), EmitMode::On);
    assert_eq!(off.image(), bare.image());
    let on = compile(catalogue(), EmitMode::On);
    assert_eq!(run(&on), run(&off));
}
