use weft_kernel::{Arm, Family, Geometry, Host, Site};

use super::arm::{AttentionArm, AttentionKernel};
use super::chain::{AttentionChain, ChainScratch, Stage};
use super::reference::{self, exp_f32, fold16};
use super::validation::{build_case, cases_for, spec, Case, Data, LayoutKind};
use super::*;

/// Bits equal, or both NaN.
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn first_difference(want: &[f32], got: &[f32]) -> Option<(usize, f32, f32)> {
    assert_eq!(want.len(), got.len());
    want.iter()
        .zip(got)
        .enumerate()
        .find(|(_, (w, g))| !same(**w, **g))
        .map(|(i, (w, g))| (i, *w, *g))
}

/// The reference's outputs for a case, canaries where it writes nothing.
fn reference_outputs(case: &Case) -> Vec<f32> {
    let mut o = vec![f32::from_bits(weft_validate::CANARY_F32); case.o_len];
    reference::attention(
        &case.shape,
        &case.layout,
        &case.q,
        case.k.slice(),
        case.v.slice(),
        &mut o,
        case.units.clone(),
    );
    o
}

fn kernel_outputs(k: &AttentionKernel, case: &Case) -> Vec<f32> {
    let mut o = vec![f32::from_bits(weft_validate::CANARY_F32); case.o_len];
    k.run_units(
        &case.shape,
        &case.layout,
        &case.q,
        case.k.slice(),
        case.v.slice(),
        &mut o,
        case.units.clone(),
    )
    .expect("run");
    o
}

// ---------------------------------------------------------------- exp ---

fn ulps(a: f32, b: f64) -> f64 {
    let b32 = b as f32;
    let ulp = (f32::from_bits(b32.to_bits() + 1) - b32).abs() as f64;
    (f64::from(a) - b).abs() / ulp
}

#[test]
fn exp_is_within_two_ulp_of_e_to_the_x_on_its_domain() {
    let mut worst = 0.0f64;
    let mut rng = weft_validate::SplitMix64::new(11);
    let mut check = |x: f32| {
        let want = f64::from(x).exp();
        let got = exp_f32(x);
        if want >= f64::from(f32::MIN_POSITIVE) {
            let e = ulps(got, want);
            worst = worst.max(e);
            assert!(e <= 2.0, "E({x:e}) = {got:e}, e^x = {want:e}: {e} ulp");
        }
    };
    for _ in 0..200_000 {
        check(-(rng.unit_f64() * 87.0) as f32);
    }
    for _ in 0..20_000 {
        check(-(rng.unit_f64() * 1e-3) as f32);
    }
    assert!(worst > 0.0, "a bound that is never approached says nothing");
}

#[test]
fn exp_special_values_follow_the_contract() {
    assert_eq!(exp_f32(0.0).to_bits(), 1.0f32.to_bits());
    assert_eq!(exp_f32(-0.0).to_bits(), 1.0f32.to_bits());
    assert_eq!(exp_f32(f32::NEG_INFINITY).to_bits(), 0);
    assert_eq!(exp_f32(-87.0001).to_bits(), 0);
    assert_eq!(exp_f32(-1.0e30).to_bits(), 0);
    assert!(exp_f32(f32::NAN).is_nan());
    // -87 is inside: e^-87 ≈ 1.65e-38, a normal number.
    let y = exp_f32(-87.0);
    assert!(y > 1.6e-38 && y < 1.7e-38, "{y:e}");
}

#[test]
fn fold16_pairs_lanes_eight_apart_then_four_apart_then_neighbours() {
    // Only the contract's tree keeps the 2^25 and the 1s apart.
    let mut a = [0.0f32; 16];
    a[0] = 33_554_432.0; // 2^25
    a[8] = -33_554_432.0;
    a[4] = 1.0;
    a[1] = 1.0;
    a[12] = 1.0;
    assert_eq!(fold16(&a), 3.0);
    // A left-to-right sum of the same lanes loses the 1s.
    let naive = a.iter().fold(0.0f32, |s, x| s + x);
    assert_ne!(naive, 3.0);
}

// -------------------------------------------------------- references ---

#[test]
fn reference_is_within_its_bound_of_exact_softmax_attention() {
    for (n, data) in [Data::Random, Data::Large, Data::Equal].iter().enumerate() {
        let s = spec(300, 5, true, 295, 2, 1, LayoutKind::HeadMajor, *data);
        let case = build_case(&s, 64, KvType::F32, 40 + n as u64);
        let o = reference_outputs(&case);
        check_against_exact(&case, &o, "fused reference");
    }
}

/// `|o - exact| ≤ (keys + 4·blocks + 100) · 2^-23 · Σ w_j |v_j|` per
/// output; see `fused_matches_chain_within_the_stated_bound` for why.
fn check_against_exact(case: &Case, o: &[f32], what: &str) {
    let s = &case.shape;
    let l = &case.layout;
    let g = s.group();
    for h in 0..s.heads {
        for i in 0..s.lq {
            let n = s.keys(i);
            let q0 = h * l.q_head + i * l.q_row;
            let kb = (h / g) * l.k_head;
            let vb = (h / g) * l.v_head;
            let scores: Vec<f32> = (0..n)
                .map(|j| {
                    reference::dot(&case.q[q0..q0 + s.d], |c| {
                        case.k.slice().get(kb + j * l.k_pos + c).unwrap_or(f32::NAN)
                    }) * s.scale
                })
                .collect();
            for c in 0..s.d {
                let (exact, mag) = reference::exact_f64(&scores, |j| {
                    case.v.slice().get(vb + j * l.v_pos + c).unwrap_or(f32::NAN)
                });
                let got = f64::from(o[h * l.o_head + i * l.o_row + c]);
                let bound = bound(n, mag);
                assert!(
                    (got - exact).abs() <= bound,
                    "{what}: head {h} row {i} col {c}: {got} vs exact {exact} (bound {bound:e})"
                );
            }
        }
    }
}

fn bound(n: usize, mag: f64) -> f64 {
    let blocks = n.div_ceil(BLOCK);
    (n + 4 * blocks + 100) as f64 * 2f64.powi(-23) * mag
}

// --------------------------------------------------------------- arms ---

/// Multiply-adds of a case's computed units: the scalar reference runs
/// unoptimised in debug builds (and emulated under qemu), so the arm is
/// compared with it on the cases below a budget; the arm's twins are
/// validated on every case anyway. At `d = 32` the budget keeps the
/// 4096-key decode and a 512-key prefill in.
fn work(case: &Case) -> usize {
    let s = &case.shape;
    case.units
        .clone()
        .flat_map(|u| s.unit_pairs(u))
        .map(|(_, i)| s.keys(i) * s.d)
        .sum()
}

const REFERENCE_BUDGET: usize = if cfg!(target_arch = "aarch64") {
    75_000
} else {
    600_000
};

fn arm_matches_reference(d: usize, kv: KvType) {
    let arm = AttentionKernel::of_arm(d, kv).expect("arm");
    for case in cases_for(d, kv, 5) {
        if work(&case) > REFERENCE_BUDGET {
            continue;
        }
        let want = reference_outputs(&case);
        let got = kernel_outputs(&arm, &case);
        if let Some((i, w, g)) = first_difference(&want, &got) {
            panic!(
                "d {d} {kv:?} {:?}: output {i}: reference {w:e} ({:#x}), arm {g:e} ({:#x})",
                case.spec,
                w.to_bits(),
                g.to_bits()
            );
        }
    }
}

/// Head dimensions the arm is compared with the reference at (under qemu
/// two: the twins' validation covers the others against the arm).
const ARM_DS: &[usize] = if cfg!(target_arch = "aarch64") {
    &[32, 80]
} else {
    &[32, 64, 80, 128]
};

#[test]
fn fused_arm_matches_the_reference_bit_for_bit_f32() {
    for &d in ARM_DS {
        arm_matches_reference(d, KvType::F32);
    }
}

#[test]
fn fused_arm_matches_the_reference_bit_for_bit_f16() {
    for &d in ARM_DS {
        arm_matches_reference(d, KvType::F16);
    }
}

#[test]
fn chain_arms_match_the_chain_reference_bit_for_bit() {
    for (d, kv) in [(64, KvType::F32), (80, KvType::F16), (16, KvType::F32)] {
        let chain = AttentionChain::arms(d, kv).expect("chain");
        for case in cases_for(d, kv, 9) {
            if case.units != (0..case.shape.units().unwrap_or(0)) || work(&case) > REFERENCE_BUDGET
            {
                continue;
            }
            let mut want = vec![f32::from_bits(weft_validate::CANARY_F32); case.o_len];
            reference::chain(
                &case.shape,
                &case.layout,
                &case.q,
                case.k.slice(),
                case.v.slice(),
                &mut want,
            );
            let mut got = vec![f32::from_bits(weft_validate::CANARY_F32); case.o_len];
            let mut scratch = ChainScratch::new(&case.shape);
            chain
                .run(
                    &case.shape,
                    &case.layout,
                    &case.q,
                    case.k.slice(),
                    case.v.slice(),
                    &mut got,
                    &mut scratch,
                )
                .expect("chain run");
            if let Some((i, w, g)) = first_difference(&want, &got) {
                panic!("d {d} {kv:?} {:?}: output {i}: {w:e} vs {g:e}", case.spec);
            }
        }
    }
}

#[test]
fn fused_matches_chain_within_the_stated_bound() {
    // Both evaluate the same f32 scores (the chain's scores stage is the
    // fused dot). Against exact softmax attention of those scores, each
    // output term j carries: the rounding of its exp argument (relative
    // u·|x_j| to e^{x_j}, and |x_j|·e^{x_j} ≤ 1/e, so at most 87u over the
    // terms that matter: x ≥ -87, smaller ones are 0 in both and weigh
    // below e^-87), E's own 2 ulp (4u), for the fused kernel one α
    // multiplication and one E(α) per later block (≤ 2u + 4u each... but α
    // only rescales when the maximum moves, bounded by 4u·blocks), the
    // sequential fma chain over n keys (n·u), the 16-lane sums (n/16 + 4
    // levels, below n·u) and the final division or normalisation (u). So
    // each is within (n + 4·blocks + 100)·u·Σ w_j|v_j| of exact, with u =
    // 2^-23 covering the half-ulp factor, and the two within twice that of
    // each other.
    let chain = AttentionChain::arms(64, KvType::F32).expect("chain");
    let fused = AttentionKernel::of_arm(64, KvType::F32).expect("arm");
    let mut worst = 0.0f64;
    for (n, data) in [Data::Random, Data::Large, Data::Equal, Data::Subnormal]
        .iter()
        .enumerate()
    {
        let sizes: &[(usize, usize, bool, usize)] = if cfg!(target_arch = "aarch64") {
            &[(90, 3, true, 87), (33, 4, false, 0)]
        } else {
            &[
                (700, 9, true, 691),
                (33, 20, false, 0),
                (1024, 3, true, 1021),
            ]
        };
        for &(lk, lq, causal, off) in sizes {
            let s = spec(lk, lq, causal, off, 3, 1, LayoutKind::TokenMajor, *data);
            let case = build_case(&s, 64, KvType::F32, 70 + n as u64);
            let f = kernel_outputs(&fused, &case);
            let mut c = vec![0.0f32; case.o_len];
            let mut scratch = ChainScratch::new(&case.shape);
            chain
                .run(
                    &case.shape,
                    &case.layout,
                    &case.q,
                    case.k.slice(),
                    case.v.slice(),
                    &mut c,
                    &mut scratch,
                )
                .expect("chain");
            check_against_exact(&case, &f, "fused arm");
            check_against_exact(&case, &c, "chain");
            let sh = &case.shape;
            let l = &case.layout;
            for h in 0..sh.heads {
                for i in 0..sh.lq {
                    let nk = sh.keys(i);
                    for col in 0..sh.d {
                        let at = h * l.o_head + i * l.o_row + col;
                        let vb = (h / sh.group()) * l.v_head;
                        let mag = (0..nk)
                            .map(|j| {
                                f64::from(case.v.slice().get(vb + j * l.v_pos + col).unwrap_or(0.0))
                                    .abs()
                            })
                            .fold(0.0, f64::max);
                        let diff = (f64::from(f[at]) - f64::from(c[at])).abs();
                        let b = 2.0 * bound(nk, mag);
                        assert!(
                            diff <= b,
                            "{s:?} h {h} i {i} c {col}: {} vs {}",
                            f[at],
                            c[at]
                        );
                        if b > 0.0 {
                            worst = worst.max(diff / b);
                        }
                    }
                }
            }
        }
    }
    // The bound must not be vacuous: the two do differ somewhere.
    assert!(
        worst > 0.0,
        "fused and chain never differed: the test shows nothing"
    );
}

// ------------------------------------------------------------ refusals ---

fn site(g: Geometry) -> Site {
    Site::new(Family(FAMILY), g)
}

#[test]
fn bad_sites_are_refused_by_name_at_plan_time() {
    let host = Host::detect();
    let arm = AttentionArm;
    let ok = geometry(64, 1, 512, 9, 3, true, KvType::F32);
    assert!(arm.offer(&site(ok), &host).is_ok());
    for (g, name) in [
        (
            geometry(64, 1, 512, 9, 2, true, KvType::F32),
            "unsupported-geometry",
        ),
        (
            geometry(64, 1, 512, 0, 1, true, KvType::F32),
            "unsupported-geometry",
        ),
        (
            geometry(72, 1, 512, 9, 3, true, KvType::F32),
            "unsupported-geometry",
        ),
        (
            geometry(272, 1, 512, 1, 1, true, KvType::F32),
            "unsupported-geometry",
        ),
        (
            geometry(64, 1, 0, 1, 1, true, KvType::F32),
            "unsupported-geometry",
        ),
        (
            geometry(64, 0, 4, 1, 1, true, KvType::F32),
            "unsupported-geometry",
        ),
        (
            geometry(64, 1, 4, 1, 1, true, KvType::F32).with("causal", 2),
            "unsupported-geometry",
        ),
        (Geometry::new().with("d", 64), "missing-dimension"),
    ] {
        let e = arm.offer(&site(g.clone()), &host).unwrap_err();
        assert_eq!(e.name(), name, "{g}: {e}");
    }
    let wrong = Site::new(
        Family("attention.other"),
        geometry(64, 1, 4, 1, 1, false, KvType::F32),
    );
    assert_eq!(
        arm.offer(&wrong, &host).unwrap_err().name(),
        "unsupported-geometry"
    );
}

fn small_shape() -> AttentionShape {
    AttentionShape {
        d: 32,
        lq: 3,
        lk: 5,
        heads: 2,
        kv_heads: 1,
        q_offset: 2,
        causal: true,
        scale: 0.25,
        kv: KvType::F32,
    }
}

#[test]
fn bad_arguments_are_refused_by_the_constructor() {
    let s = small_shape();
    let l = Layout::head_major(&s, 5);
    let q = vec![0.0f32; 2 * 3 * 32];
    let k = vec![0.0f32; 5 * 32];
    let mut o = vec![0.0f32; 2 * 3 * 32];
    assert!(AttentionArgs::new(&s, &l, &q, KvSlice::F32(&k), KvSlice::F32(&k), &mut o).is_ok());
    let e = AttentionArgs::new(&s, &l, &q[1..], KvSlice::F32(&k), KvSlice::F32(&k), &mut o)
        .unwrap_err();
    assert_eq!(e.name(), "bad-operand");
    let e = AttentionArgs::new(&s, &l, &q, KvSlice::F32(&k[1..]), KvSlice::F32(&k), &mut o)
        .unwrap_err();
    assert_eq!(e.name(), "bad-operand");
    let h = vec![0u16; 5 * 32];
    let e = AttentionArgs::new(&s, &l, &q, KvSlice::F16(&h), KvSlice::F16(&h), &mut o).unwrap_err();
    assert_eq!(e.name(), "bad-operand", "f16 data for an f32 shape");
    let mut overlap = l;
    overlap.o_row = 16;
    let e = AttentionArgs::new(&s, &overlap, &q, KvSlice::F32(&k), KvSlice::F32(&k), &mut o)
        .unwrap_err();
    assert_eq!(e.name(), "bad-operand", "overlapping output rows");
    for bad_shape in [
        AttentionShape { lk: 0, ..s },
        AttentionShape {
            heads: 3,
            kv_heads: 2,
            ..s
        },
        AttentionShape { d: 40, ..s },
    ] {
        let e = AttentionArgs::new(
            &bad_shape,
            &l,
            &q,
            KvSlice::F32(&k),
            KvSlice::F32(&k),
            &mut o,
        )
        .unwrap_err();
        assert_eq!(e.name(), "unsupported-geometry", "{bad_shape:?}");
    }
    // A kernel built for another d or K/V type refuses the call.
    let arm = AttentionKernel::of_arm(64, KvType::F32).expect("arm");
    let e = arm
        .run(&s, &l, &q, KvSlice::F32(&k), KvSlice::F32(&k), &mut o)
        .unwrap_err();
    assert_eq!(e.name(), "bad-operand");
}

// -------------------------------------------------------- member views ---

#[test]
fn threaded_splits_are_bit_identical_to_one_call() {
    let s = spec(77, 40, true, 37, 4, 2, LayoutKind::TokenMajor, Data::Random);
    let case = build_case(&s, 64, KvType::F16, 3);
    let arm = AttentionKernel::of_arm(64, KvType::F16).expect("arm");
    let one = kernel_outputs(&arm, &case);
    let offer = arm::offer_for(&SiteShape::from_geometry(&case.shape.geometry()).expect("site"));
    let views = offer.views.expect("views");
    assert_eq!(views.extent, case.shape.units().expect("units") as u64);
    for threads in [2, 3, 5] {
        let mut o = vec![f32::from_bits(weft_validate::CANARY_F32); case.o_len];
        arm.run_threaded(
            &case.shape,
            &case.layout,
            &case.q,
            case.k.slice(),
            case.v.slice(),
            &mut o,
            &views,
            threads,
        )
        .expect("threaded");
        assert_eq!(first_difference(&one, &o), None, "{threads} threads");
    }
}

#[test]
fn chain_stages_are_registered_with_their_own_families() {
    let all = entries();
    assert_eq!(all.len(), 8);
    assert_eq!(all[0].family.name(), FAMILY);
    for (e, s) in all[1..].iter().zip(Stage::ALL) {
        assert_eq!(e.family.name(), s.family());
        assert_eq!(e.arms.len(), 1);
        assert_eq!(e.arms[0].arm.name(), s.arm_name());
        assert!(e.arms.iter().all(|a| a.twins.is_empty()));
    }
}

// --------------------------------------------------------------- twins ---

/// Every twin of the family the host can run, validated against the arm
/// on every case at `d` and `kv` through the family's own check (what the
/// planner runs).
fn twins_validate(d: usize, kv: KvType) -> usize {
    let host = Host::detect();
    let e = entry();
    let offer = arm::offer_for(&arm::body_site(d, kv));
    let arm_code = e.arms[0]
        .arm
        .build(&offer, weft_managed::arm_build::host_isa())
        .expect("arm builds");
    let mut ran = 0;
    for twin in &e.arms[0].twins {
        if twin.isa() != host.isa || weft_kernel::require_features(&host, twin.requires()).is_err()
        {
            continue;
        }
        match weft_validate::testing::judge_with(
            &*e.arms[0].check,
            twin.as_ref(),
            &arm_code,
            &offer,
            &host,
            17,
        ) {
            Ok(c) => assert!(
                c.cases == validation::specs().len() && c.words > 0,
                "{}: {c:?}",
                twin.name()
            ),
            Err(r) => panic!("{} at d {d} {kv:?}: {r}", twin.name()),
        }
        ran += 1;
    }
    ran
}

/// Head dimensions the twins are validated at: every path of the x64
/// bodies (two pairs at once up to 64, the group step up to 128, q rows
/// in halves above it; Gemma 3's 256) and the arm64 twin's largest.
const TWIN_DS: &[usize] = if cfg!(target_arch = "aarch64") {
    &[32, 64, 80, 128]
} else {
    &[32, 64, 80, 128, 144, 256]
};

#[test]
fn every_twin_matches_the_arm_bit_for_bit_f32() {
    let mut ran = 0;
    for &d in TWIN_DS {
        ran += twins_validate(d, KvType::F32);
    }
    assert!(ran > 0, "no twin runs on this host");
}

#[test]
fn every_twin_matches_the_arm_bit_for_bit_f16() {
    let mut ran = 0;
    for &d in TWIN_DS {
        ran += twins_validate(d, KvType::F16);
    }
    assert!(ran > 0, "no twin runs on this host");
}

#[test]
fn the_arm64_twin_refuses_head_dimensions_above_128_by_name_and_x64_serves_256() {
    let offer = arm::offer_for(&arm::body_site(192, KvType::F32));
    for twin in entry().arms[0].twins.clone() {
        let emitted = twin.emit(&offer);
        match twin.isa() {
            weft_kernel::Isa::Aarch64 => {
                assert_eq!(emitted.unwrap_err().name(), "unsupported-geometry")
            }
            _ => assert!(emitted.is_ok(), "{}", twin.name()),
        }
    }
    // The arm serves it.
    let arm_code = AttentionArm.build(&offer, weft_managed::arm_build::host_isa());
    assert!(arm_code.is_ok());
}

#[test]
fn every_twin_names_the_fused_arm_and_emits_for_any_host() {
    let e = entry();
    assert_eq!(e.arms.len(), 1);
    assert_eq!(e.arms[0].arm.name(), arm::ARM_NAME);
    assert_eq!(e.arms[0].twins.len(), 3);
    let offer = arm::offer_for(&arm::body_site(64, KvType::F16));
    for t in &e.arms[0].twins {
        let code = t.emit(&offer).expect("emits");
        assert_eq!(code.isa, t.isa());
        assert!(!code.bytes.is_empty());
    }
}

// `extern "win64"` exists only on x86-64 targets.
#[cfg(target_arch = "x86_64")]
#[test]
fn x64_twins_match_the_arm_when_called_as_win64() {
    use weft_kernel::Twin;
    let host = Host::detect();
    let case = build_case(
        &spec(45, 20, true, 25, 4, 2, LayoutKind::TokenMajor, Data::Random),
        48,
        KvType::F16,
        23,
    );
    let arm = AttentionKernel::of_arm(48, KvType::F16).expect("arm");
    let want = kernel_outputs(&arm, &case);
    for twin in twin_x64::TWINS {
        if weft_kernel::require_features(&host, twin.requires()).is_err() {
            continue;
        }
        let body = twin
            .with_abi(weft_x64::Abi::Win64)
            .body(48, KvType::F16)
            .expect("emit");
        let placed = weft_jitmem::place(&body.bytes).expect("place");
        let mut got = vec![f32::from_bits(weft_validate::CANARY_F32); case.o_len];
        let args = AttentionArgs::new(
            &case.shape,
            &case.layout,
            &case.q,
            case.k.slice(),
            case.v.slice(),
            &mut got,
        )
        .expect("args");
        // SAFETY: the body was emitted for the Win64 convention with the
        // leaf ABI for AttentionArgs; `args` was checked against the
        // buffers, which outlive the call; `placed` stays mapped.
        unsafe {
            let f: unsafe extern "win64" fn(*const AttentionArgs) =
                std::mem::transmute(placed.as_ptr());
            f(&args);
        }
        assert_eq!(first_difference(&want, &got), None, "{}", twin.name());
    }
}

#[test]
fn workbench_runs_the_arm_and_every_host_twin_at_the_offer_site() {
    let host = Host::detect();
    let e = entry();
    let site = Site::new(
        Family(FAMILY),
        geometry(64, 1, 300, 9, 3, true, KvType::F16),
    );
    let offer = e.arms[0].arm.offer(&site, &host).expect("offer");
    let wb = e.arms[0]
        .bench
        .as_ref()
        .expect("the fused family can be raced");
    let mut bench = wb.prepare(&offer, 3).expect("prepare");
    let arm = e.arms[0]
        .arm
        .build(&offer, weft_managed::arm_build::host_isa())
        .and_then(|c| c.place())
        .expect("arm");
    // SAFETY: the arm's body was built for this offer.
    unsafe { bench.run(&arm) }.expect("arm runs");
    for twin in &e.arms[0].twins {
        if twin.isa() != host.isa || weft_kernel::require_features(&host, twin.requires()).is_err()
        {
            continue;
        }
        let code = twin.emit(&offer).and_then(|c| c.place()).expect("twin");
        // SAFETY: the twin's body was emitted for this offer.
        unsafe { bench.run(&code) }.expect("twin runs");
    }
    let mut other = offer.clone();
    other.contract.args = "ChainArgs".to_owned();
    assert_eq!(
        wb.prepare(&other, 3).err().map(|r| r.name()),
        Some("bad-operand")
    );
}
