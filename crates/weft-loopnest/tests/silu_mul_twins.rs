//! The twins of `loopnest.silu_mul`: accepted bit for bit by the family's
//! own check at the FFN and prompt-chunk lengths, mutants with one
//! operation changed refused by it, listings snapshotted, validated and
//! choosable by the planner, and (ignored by default) timed against the
//! arm.

use weft_elementwise::map::{ExpMap, MapExpr};
use weft_kernel::{
    Arm, Family, Feature, Geometry, Host, Isa, NativeCode, Offer, Refusal, Site, Twin,
};
use weft_loopnest::map_route::exp_map;
use weft_loopnest::native_x64::Tier;
use weft_loopnest::ops::silu_mul::twins::{neon_twin, twins, x64_twin};
use weft_loopnest::ops::silu_mul::FAMILY;
use weft_loopnest::ops::NestOp;
use weft_loopnest::{family_entry, NestArm, SiluMul};
use weft_validate::testing::judge_with;

fn host() -> Host {
    Host::detect()
}

/// The arm's offer at `len` and the arm's body for the host.
fn arm_offer(len: u64) -> (Offer, NativeCode) {
    let arm = NestArm::<SiluMul>::new();
    let site = Site::new(Family(FAMILY), Geometry::new().with("len", len));
    let offer = arm.offer(&site, &host()).expect("offer");
    let code = arm.build(&offer, host().isa).expect("arm builds");
    (offer, code)
}

/// `twin` judged by the family's registered check at `len`.
fn judge(twin: &dyn Twin, len: u64) -> Result<weft_kernel::Checked, Refusal> {
    let (offer, arm_code) = arm_offer(len);
    let entry = family_entry::<SiluMul>();
    judge_with(
        entry.arms[0].check.as_ref(),
        twin,
        &arm_code,
        &offer,
        &host(),
        0x5eed,
    )
}

#[test]
fn the_family_registers_three_twins_under_its_one_arm() {
    let entry = family_entry::<SiluMul>();
    assert_eq!(entry.arms.len(), 1);
    let names: Vec<_> = entry.arms[0].twins.iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        [
            "loopnest.silu_mul.twin.avx512",
            "loopnest.silu_mul.twin.avx2",
            "loopnest.silu_mul.twin.neon"
        ]
    );
    let features: Vec<_> = twins().iter().map(|t| (t.isa(), t.requires())).collect();
    assert_eq!(
        features,
        [
            (
                Isa::X86_64,
                &[
                    Feature::Avx,
                    Feature::Avx2,
                    Feature::Avx512f,
                    Feature::Avx512dq,
                    Feature::Avx512vl,
                    Feature::Bmi2
                ][..]
            ),
            (Isa::X86_64, &[Feature::Avx, Feature::Avx2][..]),
            (Isa::Aarch64, &[Feature::Neon][..]),
        ]
    );
    let id = entry.arms[0].check.cases_id(&arm_offer(64).0, 1);
    assert!(id.contains("loopnest.silu_mul cases v1"), "{id}");
}

#[test]
fn a_foreign_offer_is_refused_by_name() {
    let (mut offer, _) = arm_offer(64);
    offer.contract.args = "AddArgs".into();
    for t in twins() {
        assert_eq!(t.emit(&offer).unwrap_err().name(), "bad-operand");
    }
    let (mut offer, _) = arm_offer(64);
    offer.contract.family = "loopnest.add".into();
    for t in twins() {
        assert_eq!(t.emit(&offer).unwrap_err().name(), "unsupported-geometry");
    }
}

#[test]
fn listings_are_snapshotted() {
    let offer = arm_offer(1536).0;
    for tier in [Tier::Avx512, Tier::Avx2] {
        let t = x64_twin(tier);
        let code = t
            .emit_for(&offer, weft_elementwise::twin_x64::Abi::SysV)
            .expect("emits");
        insta::assert_snapshot!(t.name().replace('.', "_"), weft_managed::listing(&code));
    }
    let t = neon_twin();
    let code = t.emit(&offer).expect("emits");
    insta::assert_snapshot!(t.name().replace('.', "_"), weft_managed::listing(&code));
}

#[test]
fn a_body_that_does_nothing_is_refused_as_a_mismatch() {
    let ret = match host().isa {
        Isa::X86_64 => vec![0xc3],
        _ => 0xd65f_03c0u32.to_le_bytes().to_vec(),
    };
    let code = NativeCode {
        isa: host().isa,
        bytes: ret,
        pool: None,
        loops: Vec::new(),
    };
    let (offer, arm_code) = arm_offer(64);
    let entry = family_entry::<SiluMul>();
    let judged = |name, code| weft_kernel::Judged { name, code };
    let r = entry.arms[0]
        .check
        .check(
            judged("arm", &arm_code),
            judged("ret", &code),
            &offer,
            &host(),
            1,
        )
        .unwrap_err();
    assert_eq!(r.name(), "mismatch", "{r}");
}

/// A twin whose body is another map: what one changed operation makes.
struct Mutant {
    name: &'static str,
    map: ExpMap,
}

// SAFETY: the body is weft-elementwise's map body (its `map` contract:
// reads and writes only `[start, end)`), for another expression.
unsafe impl Twin for Mutant {
    fn name(&self) -> &'static str {
        self.name
    }
    fn isa(&self) -> Isa {
        host().isa
    }
    fn requires(&self) -> &'static [Feature] {
        &[]
    }
    fn emit(&self, _offer: &Offer) -> Result<NativeCode, Refusal> {
        if host().isa == Isa::Aarch64 {
            return weft_elementwise::twin_a64::emit_map(&self.map);
        }
        let tier = if host().has(Feature::Avx512f) && host().has(Feature::Avx512dq) {
            weft_elementwise::twin_x64::Tier::Avx512
        } else {
            weft_elementwise::twin_x64::Tier::Avx2
        };
        weft_elementwise::twin_x64::emit_map(
            &self.map,
            tier,
            weft_elementwise::twin_x64::Abi::host(),
        )
    }
}

fn mutant(name: &'static str, e: MapExpr) -> Mutant {
    Mutant {
        name,
        map: ExpMap::new(e).expect("one exp"),
    }
}

#[test]
#[cfg_attr(
    all(
        target_arch = "x86_64",
        not(all(weft_host_has = "avx", weft_host_has = "avx2"))
    ),
    ignore = "needs avx2, which this host lacks"
)]
fn one_changed_operation_is_refused_as_a_mismatch() {
    let (g, u, c) = (MapExpr::a, MapExpr::b, MapExpr::c);
    let e = || (-g()).exp();
    let mutants = [
        // (g ⊗ u) ⊘ (1 ⊕ e): the product first.
        mutant(
            "mutant.product-first",
            g().times(u()).over(c(1.0).plus(e())),
        ),
        // g ⊗ (1 ⊘ (1 ⊕ e)) ⊗ u: a reciprocal instead of the division.
        mutant(
            "mutant.reciprocal",
            g().times(c(1.0).over(c(1.0).plus(e()))).times(u()),
        ),
        // 1 ⊕ e with e = 1 ⊘ exp(g): exp(−g) computed another way.
        mutant(
            "mutant.one-over-exp",
            g().over(c(1.0).plus(c(1.0).over(g().exp()))).times(u()),
        ),
        // (g ⊕ 0) ⊘ (1 ⊕ e): only g = −0 tells (silu(−0) is −0, not +0).
        mutant(
            "mutant.signed-zero",
            g().plus(c(0.0)).over(c(1.0).plus(e())).times(u()),
        ),
    ];
    for m in &mutants {
        match judge(m, 1536) {
            Err(r) => {
                assert_eq!(r.name(), "mismatch", "{}: {r}", m.name);
                eprintln!("{}: {r}", m.name);
            }
            Ok(c) => panic!("{} was accepted on {} cases", m.name, c.cases),
        }
    }
    // The control: `e ⊕ 1` is the same IEEE operation as `1 ⊕ e` (NaNs by
    // class), so the same check accepts it.
    let control = mutant(
        "control.commuted-add",
        g().over(e().plus(c(1.0))).times(u()),
    );
    judge(&control, 1536).unwrap_or_else(|r| panic!("the control: {r}"));
}

#[cfg(target_arch = "x86_64")]
mod x64 {
    use super::*;

    fn accepted_at_ffn_and_prompt_lengths(twin: &dyn Twin) {
        // 1536: one token's FFN; 98304 = 64 × 1536: a prompt chunk's.
        for len in [1536, 98_304] {
            match judge(twin, len) {
                Ok(c) => eprintln!(
                    "{} at len {len}: accepted on {} cases, {} words",
                    twin.name(),
                    c.cases,
                    c.words
                ),
                Err(r) => panic!("{} at len {len}: {r}", twin.name()),
            }
        }
    }

    #[test]
    #[cfg_attr(
        not(all(
            weft_host_has = "avx512f",
            weft_host_has = "avx512dq",
            weft_host_has = "avx512vl"
        )),
        ignore = "needs avx512f, avx512dq and avx512vl, which this host lacks"
    )]
    fn avx512_twin_is_accepted_by_the_family_check() {
        accepted_at_ffn_and_prompt_lengths(&x64_twin(Tier::Avx512));
    }

    #[test]
    #[cfg_attr(
        not(all(weft_host_has = "avx", weft_host_has = "avx2")),
        ignore = "needs avx2, which this host lacks"
    )]
    fn avx2_twin_is_accepted_by_the_family_check() {
        accepted_at_ffn_and_prompt_lengths(&x64_twin(Tier::Avx2));
    }

    #[test]
    fn the_twins_emit_for_win64_too() {
        let offer = arm_offer(1536).0;
        for tier in [Tier::Avx512, Tier::Avx2] {
            let code = x64_twin(tier)
                .emit_for(&offer, weft_elementwise::twin_x64::Abi::Win64)
                .expect("emits");
            let listing = weft_managed::listing(&code);
            assert!(listing.contains("push rsi"), "{tier:?}: rsi is saved");
        }
    }
}

#[cfg(target_arch = "aarch64")]
#[test]
fn neon_twin_is_accepted_by_the_family_check() {
    // Under qemu the prompt-chunk length is slow to generate in a debug
    // build; the FFN length and the family's own cases suffice here.
    match judge(&neon_twin(), 1536) {
        Ok(c) => eprintln!("neon: accepted on {} cases, {} words", c.cases, c.words),
        Err(r) => panic!("neon: {r}"),
    }
}

/// The planner validates the host's twins with the family's check and
/// may choose one; whatever it chooses computes the interpreter's bits.
#[test]
fn the_planner_validates_the_twins_and_its_choice_computes_the_reference() {
    use weft_plan::{CacheLocation, Catalogue, Executor, Options, Planner, VerdictReport};
    let mut catalogue = Catalogue::new();
    catalogue
        .register_all(weft_loopnest::entries())
        .expect("registers");
    let len = 1536usize;
    let site = Site::new(Family(FAMILY), Geometry::new().with("len", len as u64));
    let options = Options {
        cache: CacheLocation::InMemory,
        ..Options::default()
    };
    let mut planner = Planner::for_host(catalogue, host(), options);
    let plan = planner.compile(&[site]).expect("plans");
    let report = &plan.report().sites[0];
    eprintln!("{}", plan.report());
    for t in twins().iter().filter(|t| t.isa() == host().isa) {
        let c = report
            .candidates
            .iter()
            .find(|c| c.name == t.name())
            .unwrap_or_else(|| panic!("{} is not a candidate", t.name()));
        let runnable = weft_kernel::require_features(&host(), t.requires()).is_ok();
        match &c.verdict {
            VerdictReport::Validated { cases, .. } => {
                assert!(runnable && *cases > 300, "{}: {cases}", t.name())
            }
            VerdictReport::Refused { name, .. } => {
                assert!(
                    !runnable && name == "missing-feature",
                    "{}: {name}",
                    t.name()
                )
            }
            other => panic!("{}: {other:?}", t.name()),
        }
    }
    let k = plan
        .kernel::<weft_loopnest::SiluMulArgs>(0)
        .expect("kernel");
    let g: Vec<f32> = (0..len).map(|i| (i as f32 - 700.0) * 0.13).collect();
    let u: Vec<f32> = (0..len).map(|i| 1.0 + (i % 7) as f32 * 0.25).collect();
    let mut h = vec![0f32; len];
    let op = SiluMul::new(len).expect("shape");
    let args = weft_loopnest::SiluMulArgs::new(&op, &g, &u, &mut h, 0..len).expect("args");
    // SAFETY: `new` checked the extents against live buffers that outlive
    // the call.
    unsafe { k.run(&Executor::new(2), &args) };
    let mut want = vec![0f32; len];
    op.reference(&g, &u, &mut want, 0..len).expect("reference");
    for i in 0..len {
        assert_eq!(h[i].to_bits(), want[i].to_bits(), "h[{i}]");
    }
    let map = exp_map(&op.nest()).expect("a map").expect("with exp");
    assert_eq!(map.eval(g[3], u[3]).to_bits(), want[3].to_bits());
}

// ------------------------------------------------------------- timing ---

/// `cargo test --release -p weft-loopnest --test silu_mul_twins -- --ignored --nocapture`
#[cfg(target_arch = "x86_64")]
#[test]
#[ignore = "timing: run in release with --ignored --nocapture"]
fn twins_against_the_arm_in_elements_per_ns() {
    use weft_loopnest::{SiluMulArgs, SiluMulKernel};
    let host = host();
    for len in [98_304usize, 1536] {
        // Calls per timed sample: about 2^20 elements each.
        let reps = (1 << 20) / len;
        let op = SiluMul::new(len).expect("shape");
        let g: Vec<f32> = (0..len)
            .map(|i| ((i * 7919) % 2000) as f32 * 0.006 - 6.0)
            .collect();
        let u: Vec<f32> = (0..len).map(|i| 1.0 - (i % 13) as f32 * 0.1).collect();
        let mut kernels: Vec<(String, SiluMulKernel)> =
            vec![("arm".to_owned(), SiluMulKernel::of_arm(op).expect("arm"))];
        let offer = arm_offer(len as u64).0;
        for tier in [Tier::Avx512, Tier::Avx2] {
            let t = x64_twin(tier);
            if weft_kernel::require_features(&host, t.requires()).is_err() {
                continue;
            }
            let code = t
                .emit_for(&offer, weft_elementwise::twin_x64::Abi::host())
                .expect("emits");
            // SAFETY: a validated twin body for SiluMulArgs (the tests above
            // accept it against the arm).
            let k = unsafe { SiluMulKernel::from_native(&code, op) }.expect("places");
            kernels.push((t.name().to_owned(), k));
        }
        let mut outs: Vec<Vec<f32>> = kernels.iter().map(|_| vec![0f32; len]).collect();
        // One warm-up round, then 9 rounds, the bodies interleaved within
        // each round so drift hits them alike; the median of each.
        let mut samples = vec![Vec::new(); kernels.len()];
        for round in 0..10 {
            for ((_, k), (h, t)) in kernels.iter().zip(outs.iter_mut().zip(&mut samples)) {
                let start = std::time::Instant::now();
                for _ in 0..reps {
                    let args = SiluMulArgs::new(&op, &g, &u, h, 0..len).expect("args");
                    // SAFETY: `new` checked the extents; the buffers live.
                    unsafe { k.kernel().call(std::hint::black_box(&args)) };
                }
                if round > 0 {
                    t.push(start.elapsed().as_secs_f64());
                }
            }
        }
        let medians: Vec<f64> = samples
            .into_iter()
            .map(|mut v| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            })
            .collect();
        let elems = (reps * len) as f64;
        for ((name, _), t) in kernels.iter().zip(&medians) {
            println!(
                "len {len:6}: {name:32} {:6.3} elements/ns ({:5.2} ns/element, {:4.2}x the arm)",
                elems / (t * 1e9),
                t * 1e9 / elems,
                medians[0] / t
            );
        }
        for (o, (name, _)) in outs.iter().zip(&kernels).skip(1) {
            for i in 0..len {
                assert_eq!(o[i].to_bits(), outs[0][i].to_bits(), "{name} h[{i}]");
            }
        }
    }
}
