use super::arm::{offer_for, place_arm, Q4KMatvecArm};
use super::reference::{block_lanes, dot_row, dot_row_f64, matvec};
use super::twin_x64::{Q4KMatvecX64, TWINS};
use super::*;

use crate::cases::Y_GUARD;
use crate::validation::random_weights;
use crate::validation::{Case, KValidation};
use weft_kernel::{Arm, Host, Refusal, Twin};
use weft_quant::kquant::{dequantize_q4_k, dequantize_q8_k, Q8_K_BYTES, QK_K};
use weft_validate::{Outcome, Validation};

#[test]
fn integer_lanes_sum_to_the_dequantised_products_exactly() {
    // With d = dmin = 1 and dx = 1, Σ L - Σ N is Σ (s·q - m)·x over the
    // super-block: the dequantised dot product, in exact integers.
    let w = random_weights(weft_quant::Format::Q4_K, 1, 1, 7, false);
    let mut wb = w.bytes().to_vec();
    wb[..4].copy_from_slice(&[0x00, 0x3c, 0x00, 0x3c]);
    let x = crate::cases::random_activations(weft_quant::Format::Q8_K, 1, 1, 8);
    let mut xb = x.bytes().to_vec();
    xb[..4].copy_from_slice(&1.0f32.to_le_bytes());
    let (l, n) = block_lanes(&wb, &xb);
    let mut wf = [0.0f32; QK_K];
    let mut xf = [0.0f32; QK_K];
    dequantize_q4_k(wb[..BLOCK_BYTES].try_into().unwrap(), &mut wf);
    dequantize_q8_k(xb[..Q8_K_BYTES].try_into().unwrap(), &mut xf);
    let want: f64 = wf
        .iter()
        .zip(&xf)
        .map(|(&a, &b)| f64::from(a) * f64::from(b))
        .sum();
    let got =
        l.iter().map(|&v| i64::from(v)).sum::<i64>() - n.iter().map(|&v| i64::from(v)).sum::<i64>();
    assert_eq!(got as f64, want);
}

#[test]
fn reference_is_within_the_rounding_bound_of_the_exact_dot() {
    for seed in 0..20 {
        let w = random_weights(weft_quant::Format::Q4_K, 3, 8, seed, false);
        let x = crate::cases::random_activations(weft_quant::Format::Q8_K, 8, 1, seed + 100);
        for r in 0..3 {
            let row = &w.bytes()[r * 8 * BLOCK_BYTES..(r + 1) * 8 * BLOCK_BYTES];
            let got = f64::from(dot_row(row, x.bytes()));
            let want = dot_row_f64(row, x.bytes());
            // Per lane and super-block: dd, the product and the sum round
            // once (the integers are exact in f32); 8 super-blocks, then
            // the fold's four levels.
            let bound = abs_dot_f64(row, x.bytes()) * 32.0 * f64::from(f32::EPSILON);
            assert!(
                (got - want).abs() <= bound,
                "seed {seed} row {r}: {got} vs {want}"
            );
        }
    }
}

/// Σ |w·x| over ggml's dequantised values.
fn abs_dot_f64(w_row: &[u8], x_vec: &[u8]) -> f64 {
    let cols = w_row.len() / BLOCK_BYTES * QK_K;
    let (mut wf, mut xf) = (vec![0.0f32; cols], vec![0.0f32; cols]);
    weft_quant::Format::Q4_K.dequantize(w_row, &mut wf).unwrap();
    weft_quant::Format::Q8_K.dequantize(x_vec, &mut xf).unwrap();
    wf.iter()
        .zip(&xf)
        .map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs())
        .sum()
}

#[test]
fn arm_matches_the_reference_bit_for_bit_on_every_validation_case() {
    let offer = offer_for(640, 2048, 1).expect("offer");
    let kernel = place_arm().expect("arm");
    let cases = KValidation(weft_quant::Format::Q4_K).cases(&offer, 11);
    assert!(cases.len() > 60, "{} cases", cases.len());
    for (c, case) in cases.iter().enumerate() {
        let Case { w, x, rows, .. } = case;
        let mut got = vec![f32::from_bits(0x7fa0_0000); x.batch() * w.rows()];
        let mut want = got.clone();
        kernel.run(w, x, &mut got, rows.clone()).expect("lengths");
        matvec(w, x, &mut want, rows.clone());
        for (i, (g, e)) in got.iter().zip(&want).enumerate() {
            let same = g.to_bits() == e.to_bits() || (g.is_nan() && e.is_nan());
            assert!(same, "case {c} output {i}: arm {g:e} reference {e:e}");
        }
    }
}

#[test]
fn the_validation_cases_reach_nan_infinite_and_skipped_outputs() {
    // The cases must exercise what they claim: non-finite outputs from
    // special scales, and outputs a member view leaves untouched.
    let offer = offer_for(640, 2048, 1).expect("offer");
    let cases = KValidation(weft_quant::Format::Q4_K).cases(&offer, 11);
    let kernel = place_arm().expect("arm");
    let (mut nan, mut inf, mut untouched) = (0, 0, 0);
    for case in &cases {
        let out = KValidation(weft_quant::Format::Q4_K)
            .run(kernel.kernel(), case)
            .expect("runs");
        let y: Vec<f32> = out.bits.iter().map(|&b| f32::from_bits(b as u32)).collect();
        nan += y
            .iter()
            .filter(|v| v.is_nan() && v.to_bits() != weft_validate::CANARY_F32)
            .count();
        inf += y.iter().filter(|v| v.is_infinite()).count();
        untouched += y[Y_GUARD..y.len() - Y_GUARD]
            .iter()
            .filter(|v| v.to_bits() == weft_validate::CANARY_F32)
            .count();
    }
    assert!(
        nan > 0 && inf > 0 && untouched > 0,
        "{nan} {inf} {untouched}"
    );
}

#[test]
fn geometry_and_family_are_checked_by_the_arm() {
    let host = Host::detect();
    let site = weft_kernel::Site::new(weft_kernel::Family(FAMILY), geometry(640, 640, 1));
    assert!(matches!(
        Q4KMatvecArm.offer(&site, &host),
        Err(Refusal::UnsupportedGeometry { .. })
    ));
    let site = weft_kernel::Site::new(weft_kernel::Family("q8_0.matvec"), geometry(640, 2048, 1));
    assert!(Q4KMatvecArm.offer(&site, &host).is_err());
    let site = weft_kernel::Site::new(weft_kernel::Family(FAMILY), geometry(640, 2048, 2));
    assert!(Q4KMatvecArm.offer(&site, &host).is_ok());
}

#[test]
fn every_twin_the_host_can_run_matches_the_arm_bit_for_bit() {
    let host = Host::detect();
    let offer = offer_for(640, 2048, 1).expect("offer");
    let arm = Q4KMatvecArm.build(&offer, host.isa).expect("arm builds");
    let mut accepted = 0;
    for twin in TWINS {
        match weft_validate::testing::judge_twin(
            &twin,
            &arm,
            &offer,
            &host,
            &KValidation(weft_quant::Format::Q4_K),
            42,
        ) {
            Outcome::Accepted(v) => {
                assert!(v.words > 0);
                accepted += 1;
            }
            Outcome::Refused(Refusal::MissingFeature { .. } | Refusal::WrongIsa { .. }) => {}
            Outcome::Refused(r) => panic!("{}: {r}", twin.name()),
        }
    }
    if host.has(weft_kernel::Feature::Avx2) && host.has(weft_kernel::Feature::F16c) {
        assert_eq!(accepted, TWINS.len());
    }
}

#[test]
fn win64_entry_gives_the_same_bytes_apart_from_the_frame() {
    // The Win64 body is the SysV body with its frame and argument register
    // changed: it must still emit and annotate the same loops.
    let offer = offer_for(5, 512, 2).expect("offer");
    for twin in TWINS {
        let sysv = twin
            .with_abi(weft_x64::Abi::SysV)
            .emit(&offer)
            .expect("sysv");
        let win = twin
            .with_abi(weft_x64::Abi::Win64)
            .emit(&offer)
            .expect("win64");
        let names = |c: &weft_kernel::NativeCode| {
            c.loops.iter().map(|l| l.name.clone()).collect::<Vec<_>>()
        };
        assert_eq!(names(&sysv), names(&win), "{}", twin.name());
        assert_ne!(sysv.bytes, win.bytes);
    }
}

#[test]
fn the_twin_states_its_nest_and_annotates_those_loops() {
    let offer = offer_for(641, 2048, 3).expect("offer");
    for twin in TWINS {
        let nest = twin.nest(&offer);
        let code = twin.emit(&offer).expect("emits");
        let annotated: Vec<&str> = code.loops.iter().map(|l| l.name.as_str()).collect();
        let stated: Vec<&str> = nest.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(annotated, stated, "{}", twin.name());
        let trips: Vec<(u32, u64)> = nest.iter().map(|l| (l.depth, l.trips)).collect();
        assert_eq!(trips, [(0, 641), (1, 3), (2, 8)]);
    }
}

#[test]
fn twins_refuse_other_families_and_packed_operands() {
    let mut offer = offer_for(4, 256, 1).expect("offer");
    offer.contract.family = "q8_0.matvec".to_owned();
    assert!(TWINS[0].emit(&offer).is_err());
    let mut offer = offer_for(4, 256, 1).expect("offer");
    offer.contract.geometry = geometry(4, 255, 1);
    assert!(matches!(
        Q4KMatvecX64::new().emit(&offer),
        Err(Refusal::UnsupportedGeometry { .. })
    ));
}
