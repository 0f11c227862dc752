//! The epilogue arm against its definition, its twins before the judge,
//! its nests against its bytes, and the region: both alternatives give the
//! convolution reference's bits through the planner.

use weft_kernel::{Arm, Host, Kernel, Twin};
use weft_plan::Alternative;

use super::validation::{cases, EpilogueCase, EpilogueValidation};
use super::*;
use crate::tests::{same, values};
use crate::{reference, Activation, ConvArgs, ConvGeometry};

/// The definition (module docs) over a case's whole y buffer.
fn definition(case: &EpilogueCase) -> Vec<f32> {
    let mut y = case.y.0.clone();
    let g = &case.g;
    let per_row = (g.in_w * g.cout) as usize;
    let span =
        case.y.1 + case.rows.start as usize * per_row..case.y.1 + case.rows.end as usize * per_row;
    for (i, v) in y[span].iter_mut().enumerate() {
        *v = match case.stage {
            Stage::Bias => case
                .bias
                .as_ref()
                .expect("stage 0 has a bias")
                .get(i % g.cout as usize),
            Stage::Act => g.act.apply(*v),
        };
    }
    y
}

fn offer_at(stage: Stage) -> weft_kernel::Offer {
    let g = ConvGeometry::square(2, 9, 8, 37, 1, 1, 0).with_act(Activation::Relu6);
    let bias: Vec<f32> = (0..37).map(|i| i as f32 - 18.5).collect();
    offer(&epilogue_site(&g, stage, Some(&bias)).unwrap()).unwrap()
}

fn arm_code(stage: Stage) -> weft_kernel::NativeCode {
    arm::EpilogueArm
        .build(&offer_at(stage), weft_managed::arm_build::host_isa())
        .unwrap()
}

fn check_body(name: &str, stage: Stage, kernel: &Kernel<ConvArgs>) {
    let all = cases(stage, 11);
    assert!(all.len() > 40, "{} cases", all.len());
    for (ci, case) in all.iter().enumerate() {
        let want = definition(case);
        let mut y = case.y.0.clone();
        let args = case.args(&mut y).unwrap();
        // SAFETY: checked by `pointwise::args` against live buffers.
        unsafe { kernel.call(&args) };
        if let Some(i) = (0..y.len()).find(|&i| !same(y[i], want[i])) {
            panic!(
                "{name} {stage:?} case {ci} ({:?} rows {:?}): y[{i}] = {:e}, definition {:e} (was {:e})",
                case.g, case.rows, y[i], want[i], case.y.0[i]
            );
        }
    }
}

/// The arm, at both stages, on every case: the bias copied bit for bit
/// into the call's rows, or each element replaced by `act` as the conv
/// family defines it, nothing outside the rows touched.
#[test]
fn the_arm_meets_the_definition_at_both_stages() {
    for stage in [Stage::Bias, Stage::Act] {
        // SAFETY: the arm's body honours the leaf ABI for ConvArgs.
        let kernel: Kernel<ConvArgs> = unsafe { Kernel::from_native(&arm_code(stage)) }.unwrap();
        check_body("arm", stage, &kernel);
    }
}

/// The activation cases reach every activation and the hunting values.
#[test]
fn the_act_cases_hunt_every_activation_and_edge() {
    let all = cases(Stage::Act, 3);
    for act in Activation::ALL {
        assert!(all.iter().any(|c| c.g.act == act), "{act:?}");
    }
    let ys: Vec<f32> = all.iter().flat_map(|c| c.y.0.iter().copied()).collect();
    for probe in [6.0f32, 6.0f32.next_up(), -87.0, -110.0, f32::INFINITY, -0.0] {
        assert!(ys.iter().any(|v| v.to_bits() == probe.to_bits()), "{probe}");
    }
    assert!(ys.iter().any(|v| v.is_subnormal()));
}

fn judge(twin: &dyn Twin) {
    use weft_validate::testing::judge_twin;
    for stage in [Stage::Bias, Stage::Act] {
        let offer = offer_at(stage);
        let body = twin.emit(&offer).unwrap();
        // SAFETY: the twin's body honours the leaf ABI for ConvArgs.
        let kernel: Kernel<ConvArgs> = unsafe { Kernel::from_native(&body) }.unwrap();
        check_body(twin.name(), stage, &kernel);
        let outcome = judge_twin(
            twin,
            &arm_code(stage),
            &offer,
            &Host::detect(),
            &EpilogueValidation,
            7,
        );
        assert!(
            outcome.is_accepted(),
            "{} {stage:?}: {}",
            twin.name(),
            outcome.refusal().map(|r| r.to_string()).unwrap_or_default()
        );
        let words: usize = cases(stage, 7).iter().map(|c| c.y.0.len() + 16).sum();
        assert_eq!(outcome.verdict().unwrap().words, words);
    }
}

/// The AVX-512 twin meets the definition and the judge accepts it.
#[cfg(target_arch = "x86_64")]
#[test]
#[cfg_attr(
    not(weft_host_has = "avx512f"),
    ignore = "needs an AVX-512F host to run the AVX-512 twin"
)]
fn the_avx512_twin_matches_the_arm_bit_for_bit() {
    judge(&x64::EpilogueX64::new(crate::twin_x64::Tier::Avx512));
}

/// The AVX2 twin likewise.
#[cfg(target_arch = "x86_64")]
#[test]
#[cfg_attr(
    not(all(weft_host_has = "avx2", weft_host_has = "fma")),
    ignore = "needs an AVX2 + FMA host to run the AVX2 twin"
)]
fn the_avx2_twin_matches_the_arm_bit_for_bit() {
    judge(&x64::EpilogueX64::new(crate::twin_x64::Tier::Avx2));
}

/// The NEON twin likewise (under qemu in CI).
#[cfg(target_arch = "aarch64")]
#[test]
fn the_neon_twin_matches_the_arm_bit_for_bit() {
    judge(&a64::EpilogueA64);
}

/// Every body's bytes have the loops its nest states, at both stages (the
/// arm for the host, the twins of both ISAs); another family's offer is refused by name.
#[test]
fn every_body_states_its_loops_and_refuses_other_offers() {
    for stage in [Stage::Bias, Stage::Act] {
        let offer = offer_at(stage);
        let mut bodies: Vec<(String, weft_kernel::NativeCode, Vec<weft_kernel::LoopTrip>)> =
            Vec::new();
        // The arm for the host (a baseline target of the other ISA may
        // lack the SiLU pass's rounding instruction and call out).
        let isa = weft_managed::arm_build::host_isa();
        let code = arm::EpilogueArm.build(&offer, isa).unwrap();
        bodies.push((format!("arm {isa:?}"), code, arm::EpilogueArm.nest(&offer)));
        let mut twins = x64::twins();
        twins.extend(a64::twins());
        twins.push(Arc::new(
            x64::EpilogueX64::new(crate::twin_x64::Tier::Avx512).with_abi(weft_x64::Abi::Win64),
        ));
        for t in &twins {
            bodies.push((t.name().to_owned(), t.emit(&offer).unwrap(), t.nest(&offer)));
        }
        for (name, code, nest) in bodies {
            let model = weft_cost::CostModel::instruction_count(code.isa);
            model
                .price(&code, &nest, &offer)
                .unwrap_or_else(|e| panic!("{name} {stage:?}: {e}"));
        }
        let conv = crate::arm::ConvArm(crate::arm::ArmKind::Direct)
            .offer(
                &crate::site(&ConvGeometry::square(1, 4, 3, 5, 1, 1, 0), &[0.5; 15], None).unwrap(),
                &Host::detect(),
            )
            .unwrap();
        for t in &twins {
            assert_eq!(t.emit(&conv).unwrap_err().name(), "unsupported-geometry");
        }
    }
}

/// The region refuses what is not a 1 × 1, stride-1, unpadded, ungrouped
/// convolution, and filters or biases of the wrong length, by name.
#[test]
fn the_region_refuses_other_geometries_and_operands_by_name() {
    let w = |g: &ConvGeometry| vec![0.5f32; g.w_len()];
    for g in [
        ConvGeometry::square(1, 8, 4, 4, 3, 1, 1),
        ConvGeometry::square(1, 8, 4, 4, 1, 2, 0),
        ConvGeometry::square(1, 8, 4, 4, 1, 1, 1),
        ConvGeometry {
            groups: 2,
            ..ConvGeometry::square(1, 8, 4, 4, 1, 1, 0)
        },
    ] {
        let err = region("r", &g, &w(&g), None).unwrap_err();
        assert_eq!(err.name(), "unsupported-geometry", "{g:?}");
    }
    let g = ConvGeometry::square(1, 8, 4, 6, 1, 1, 0);
    assert_eq!(
        region("r", &g, &[1.0; 5], None).unwrap_err().name(),
        "bad-operand"
    );
    assert_eq!(
        region("r", &g, &w(&g), Some(&[1.0; 5])).unwrap_err().name(),
        "bad-operand"
    );
    // The chain has what the site needs: no bias, no act, the GEMM alone.
    let r = region("r", &g, &w(&g), None).unwrap();
    assert_eq!(r.chain.len(), 1);
    let r = region("r", &g.with_act(Activation::Silu), &w(&g), Some(&[0.0; 6])).unwrap();
    assert_eq!(r.chain.len(), 3);
}

fn planner(mode: &str) -> weft_plan::Planner {
    let mut catalogue = weft_plan::Catalogue::new();
    for e in crate::entries()
        .into_iter()
        .chain([entry(), weft_gemm::entry()])
    {
        catalogue.register(e).unwrap();
    }
    let options = weft_plan::Options {
        cache: weft_plan::CacheLocation::InMemory,
        mode: mode.parse().unwrap(),
        ..weft_plan::Options::default()
    };
    weft_plan::Planner::for_host(catalogue, Host::detect(), options)
}

/// Through the planner, with native emission on and off: at ragged and
/// ResNet-like 1 × 1 geometries (with and without bias, every activation,
/// batch 1 and 3), the chain (bias, the planner's GEMM, act) and the fused
/// convolution both give the reference's bits, on one thread and two, and
/// the planner's choice runs.
#[test]
fn both_alternatives_give_the_reference_bits_through_the_planner() {
    for mode in ["on", "off"] {
        for (gi, (g, has_bias)) in [
            (
                ConvGeometry::square(1, 7, 5, 17, 1, 1, 0).with_act(Activation::Relu),
                true,
            ),
            (ConvGeometry::square(3, 5, 33, 3, 1, 1, 0), false),
            (
                ConvGeometry::square(1, 13, 17, 40, 1, 1, 0).with_act(Activation::Silu),
                false,
            ),
            (
                ConvGeometry::square(2, 6, 64, 100, 1, 1, 0).with_act(Activation::Relu6),
                true,
            ),
            (
                ConvGeometry::square(1, 14, 256, 64, 1, 1, 0).with_act(Activation::Relu),
                true,
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let s = g.check().unwrap();
            let w = values(g.w_len(), 3 + gi as u64);
            let mut bias = values(g.cout as usize, 4);
            bias[0] = -0.0;
            let bias = has_bias.then_some(bias);
            let mut x = values(g.x_len(), 21);
            x[1] = f32::NAN;
            x[2] = -0.0;
            let mut want = vec![0.0f32; g.y_len(&s)];
            reference::conv2d(&g, &x, &w, bias.as_deref(), &mut want, 0..g.batch * s.out_h);
            let label = format!("pw{gi}");
            let r = region(&label, &g, &w, bias.as_deref()).unwrap();
            let plan = planner(mode).compile_with_regions(&[], &[r]).unwrap();
            let layer = Pointwise::new(&plan, &label, &g).unwrap();
            for threads in [1, 2] {
                let exec = weft_plan::Executor::new(threads);
                for alt in [Some(Alternative::Chain), Some(Alternative::Fused), None] {
                    let mut y = vec![f32::NAN; g.y_len(&s)];
                    match alt {
                        Some(a) => layer.run_as(a, &plan, &exec, &x, &mut y).unwrap(),
                        None => layer.run(&plan, &exec, &x, &mut y).unwrap(),
                    }
                    if let Some(i) = (0..y.len()).find(|&i| !same(y[i], want[i])) {
                        panic!(
                            "{mode} {g:?} bias {has_bias} {alt:?} {threads}t: y[{i}] = {:e}, reference {:e}\n{}",
                            y[i],
                            want[i],
                            plan.report()
                        );
                    }
                }
            }
        }
    }
}

/// A plan without the region, or a region for another geometry, is
/// refused by name.
#[test]
fn a_runner_for_a_missing_or_mismatched_region_is_refused() {
    let g = ConvGeometry::square(1, 6, 8, 16, 1, 1, 0).with_act(Activation::Relu);
    let r = region("a", &g, &values(g.w_len(), 1), None).unwrap();
    let plan = planner("on").compile_with_regions(&[], &[r]).unwrap();
    let err = Pointwise::new(&plan, "b", &g).unwrap_err();
    assert!(err.to_string().starts_with("unknown-region"), "{err}");
    let err = Pointwise::new(&plan, "a", &g.with_act(Activation::None)).unwrap_err();
    assert!(err.to_string().starts_with("bad-operand"), "{err}");
    let err = Pointwise::new(
        &plan,
        "a",
        &ConvGeometry::square(1, 6, 8, 24, 1, 1, 0).with_act(Activation::Relu),
    )
    .unwrap_err();
    assert!(err.to_string().starts_with("bad-operand"), "{err}");
}

/// Short x or y buffers are refused by name on either alternative (the
/// chain without a bias stage slices y for the GEMM: it checks first).
#[test]
fn short_operands_are_refused_by_name_on_both_alternatives() {
    let g = ConvGeometry::square(1, 6, 8, 16, 1, 1, 0);
    let r = region("s", &g, &values(g.w_len(), 1), None).unwrap();
    let plan = planner("on").compile_with_regions(&[], &[r]).unwrap();
    let layer = Pointwise::new(&plan, "s", &g).unwrap();
    let exec = weft_plan::Executor::new(1);
    let s = g.check().unwrap();
    for alt in [Alternative::Chain, Alternative::Fused] {
        let mut y = vec![0.0f32; g.y_len(&s) - 1];
        let err = layer
            .run_as(alt, &plan, &exec, &values(g.x_len(), 2), &mut y)
            .unwrap_err();
        assert!(
            err.to_string().starts_with("bad-operand: y"),
            "{alt:?}: {err}"
        );
        let mut y = vec![0.0f32; g.y_len(&s)];
        let err = layer
            .run_as(alt, &plan, &exec, &values(g.x_len() - 1, 2), &mut y)
            .unwrap_err();
        assert!(
            err.to_string().starts_with("bad-operand: x"),
            "{alt:?}: {err}"
        );
    }
}
