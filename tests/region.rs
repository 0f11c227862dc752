//! The region race end to end: residual add → RMSNorm planned as a region
//! (the chain `loopnest.add`, `loopnest.rmsnorm` against the fused
//! `loopnest.add_rmsnorm`), every member's body chosen by the planner
//! (generated twins where the host runs them), and the fused kernel's
//! outputs — the residual stream `x` and the normalised rows — equal to
//! the chain's bit for bit at ragged row lengths, on inputs that hunt for
//! differences, with the kill switch on and off. The chain and a plain
//! Rust transcription of the contracts (written here, not taken from the
//! code under test) are the references.

use std::sync::Arc;

use weft_kernel::{Family, Geometry, Host, Site};
use weft_loopnest::ops::bench::{AddBench, RmsNormBench};
use weft_loopnest::{Add, AddArgs, AddRmsNorm, AddRmsNormArgs, NestOp, RmsNorm, RmsNormArgs};
use weft_plan::{
    Alternative, CacheLocation, Catalogue, CompiledPlan, EmitMode, Member, Options, Planner,
    Region, Rule,
};

fn catalogue() -> Catalogue {
    let mut c = Catalogue::new();
    for e in weft_loopnest::entries() {
        c.register(e).expect("register");
    }
    c
}

fn region(dim: usize, rows: usize) -> Region {
    let geometry = Geometry::new()
        .with("dim", dim as u64)
        .with("rows", rows as u64);
    let label = |what: &str| format!("d{dim}r{rows}.{what}");
    Region {
        label: format!("d{dim}r{rows}"),
        chain: vec![
            Member::with_bench(
                Site::new(
                    Family(Add::FAMILY),
                    Geometry::new().with("len", (dim * rows) as u64),
                )
                .with_label(label("residual")),
                Arc::new(AddBench),
            ),
            Member::with_bench(
                Site::new(Family(RmsNorm::FAMILY), geometry.clone()).with_label(label("norm")),
                Arc::new(RmsNormBench),
            ),
        ],
        fused: Member::new(
            Site::new(Family(AddRmsNorm::FAMILY), geometry).with_label(label("fused")),
        ),
    }
}

const SHAPES: [(usize, usize); 9] = [
    (1, 1),
    (7, 3),
    (15, 2),
    (17, 3),
    (33, 2),
    (100, 3),
    (576, 1),
    (576, 3),
    (577, 2),
];

fn plan(mode: EmitMode) -> CompiledPlan {
    let options = Options {
        mode,
        cache: CacheLocation::InMemory,
        race_budget: weft_plan::RaceBudget {
            max_time: std::time::Duration::from_millis(5),
            min_rounds: 3,
            ..Default::default()
        },
        ..Options::default()
    };
    let regions: Vec<Region> = SHAPES.iter().map(|&(d, r)| region(d, r)).collect();
    Planner::for_host(catalogue(), Host::detect(), options)
        .compile_with_regions(&[], &regions)
        .expect("compile")
}

/// Deterministic values that hunt for differences: ordinary values over
/// many binades, with specials, subnormals and random bit patterns.
fn hunting(seed: u64, n: usize) -> Vec<f32> {
    let specials = [
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-45,
        3.0e38,
        -1.5,
    ];
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let unit = ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0;
            match s % 32 {
                0 => specials[(s >> 8) as usize % specials.len()],
                1 => f32::from_bits((s >> 8) as u32 & 0x807f_ffff),
                2 => f32::from_bits((s >> 16) as u32),
                3..=8 => unit * f32::from_bits(((127 - 20 + (s >> 32) % 41) as u32) << 23),
                _ => unit,
            }
        })
        .collect()
}

/// The contracts in plain Rust: `x += y`, then per row a 16-lane sum of
/// squares, the halving fold, `1/sqrt(ss/dim + eps)`, `(x·scale)·w`.
fn contract(dim: usize, x: &mut [f32], y: &[f32], w: &[f32], out: &mut [f32], eps: f32) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
    for (xr, or) in x.chunks(dim).zip(out.chunks_mut(dim)) {
        let mut lanes = [0f32; 16];
        for (i, v) in xr.iter().enumerate() {
            lanes[i % 16] += v * v;
        }
        let mut n = 16;
        while n > 1 {
            for l in 0..n / 2 {
                lanes[l] += lanes[l + n / 2];
            }
            n /= 2;
        }
        let scale = 1.0 / (lanes[0] / dim as f32 + eps).sqrt();
        for ((o, v), wv) in or.iter_mut().zip(xr).zip(w) {
            *o = (v * scale) * wv;
        }
    }
}

fn same(a: &[f32], b: &[f32]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(p, q)| p.to_bits() != q.to_bits() && !(p.is_nan() && q.is_nan()))
}

/// Run the region's fused kernel and its chain on the same inputs and
/// compare both outputs with each other and with the contract.
fn check(plan: &CompiledPlan, dim: usize, rows: usize) {
    let r = plan.region(&format!("d{dim}r{rows}")).expect("region");
    let (add, norm) = (
        Add::new(dim * rows).unwrap(),
        RmsNorm::new(dim, rows).unwrap(),
    );
    let fused_op = AddRmsNorm::new(dim, rows).unwrap();
    let add_k = plan.kernel::<AddArgs>(r.chain[0]).expect("add kernel");
    let norm_k = plan.kernel::<RmsNormArgs>(r.chain[1]).expect("norm kernel");
    let fused_k = plan
        .kernel::<AddRmsNormArgs>(r.fused)
        .expect("fused kernel");
    for (seed, eps) in [(1u64, 1e-5f32), (2, 1e-6), (3, 0.0)] {
        let n = dim * rows;
        let seed = seed * 1000 + (dim * 10 + rows) as u64;
        let x0 = hunting(seed, n);
        let y = hunting(seed ^ 0xa5, n);
        let w = hunting(seed ^ 0x5a, dim);
        let (mut xc, mut oc) = (x0.clone(), vec![-7.0f32; n]);
        let (mut xf, mut of) = (x0.clone(), vec![-7.0f32; n]);
        let (mut xr, mut or) = (x0, vec![-7.0f32; n]);
        // SAFETY: each argument struct is built by its checked constructor
        // from buffers that outlive the call.
        unsafe {
            add_k
                .kernel()
                .call(&AddArgs::new(&add, &mut xc, &y, 0..n).unwrap());
            norm_k
                .kernel()
                .call(&RmsNormArgs::new(&norm, &xc, &w, &mut oc, eps, 0..rows).unwrap());
            fused_k.kernel().call(
                &AddRmsNormArgs::new(&fused_op, &mut xf, &y, &w, &mut of, eps, 0..rows).unwrap(),
            );
        }
        contract(dim, &mut xr, &y, &w, &mut or, eps);
        let at = format!("dim {dim} rows {rows} seed {seed}");
        assert_eq!(same(&xf, &xc), None, "{at}: fused x vs chain");
        assert_eq!(same(&of, &oc), None, "{at}: fused out vs chain");
        assert_eq!(same(&xc, &xr), None, "{at}: chain x vs the contract");
        assert_eq!(same(&oc, &or), None, "{at}: chain out vs the contract");
    }
}

#[test]
fn the_fused_region_equals_its_chain_bit_for_bit_at_ragged_lengths() {
    for mode in [EmitMode::On, EmitMode::Off] {
        let plan = plan(mode);
        assert_eq!(plan.regions().len(), SHAPES.len());
        for &(dim, rows) in &SHAPES {
            check(&plan, dim, rows);
        }
        let text = plan.report().to_string();
        assert!(text.contains("region d576r1"), "{text}");
        for r in plan.regions() {
            assert!(
                matches!(
                    r.rule,
                    Rule::Cheapest | Rule::Race | Rule::RaceTie | Rule::ExactTie
                ),
                "{text}"
            );
            assert!(
                r.chain_cycles.is_some() && r.fused_cycles.is_some(),
                "{text}"
            );
        }
    }
}

#[test]
fn the_model_shape_region_prefers_the_fused_kernel() {
    // One pass fewer over a row and one call instead of two: at SmolLM2's
    // width the fused body is priced (or raced) below the chain.
    let plan = plan(EmitMode::On);
    let r = plan.region("d576r1").expect("region");
    assert_eq!(r.choice, Alternative::Fused, "{}", plan.report());
}
