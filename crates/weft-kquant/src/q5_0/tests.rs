use super::arm::{offer_for, place_arm, Q5_0MatvecArm};
use super::reference::{block_lanes, dot_row, dot_row_f64, matvec};
use super::twin_x64::TWINS;
use super::*;
use crate::cases::{random_activations, Y_GUARD};
use crate::validation::{random_weights, Case, KValidation};
use weft_kernel::{Arm, Host, Refusal, Twin};
use weft_validate::{Outcome, Validation};

const W: Format = Format::Q5_0;
const X: Format = Format::Q8_0;

#[test]
fn the_integer_lanes_are_the_dequantised_products_exactly() {
    // With dw = dx = 1 the lanes sum to Σ w·x over ggml's dequantised
    // values, in exact integers.
    for seed in 0..8 {
        let w = random_weights(W, 1, 1, seed, false);
        let mut wb = w.bytes().to_vec();
        wb[..2].copy_from_slice(&0x3c00u16.to_le_bytes());
        let x = random_activations(X, 1, 1, seed + 8);
        let mut xb = x.bytes().to_vec();
        xb[..2].copy_from_slice(&0x3c00u16.to_le_bytes());
        let (mut wf, mut xf) = ([0.0f32; 32], [0.0f32; 32]);
        W.dequantize(&wb, &mut wf).unwrap();
        X.dequantize(&xb, &mut xf).unwrap();
        let want: f64 = wf
            .iter()
            .zip(&xf)
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum();
        let got: i32 = block_lanes(&wb, &xb).iter().sum();
        assert_eq!(f64::from(got), want, "seed {seed}");
    }
}

#[test]
fn reference_is_within_the_rounding_bound_of_the_exact_dot() {
    for seed in 0..20 {
        let w = random_weights(W, 3, 20, seed, false);
        let x = random_activations(X, 20, 1, seed + 100);
        for r in 0..3 {
            let row = &w.bytes()[r * 20 * BLOCK_BYTES..(r + 1) * 20 * BLOCK_BYTES];
            let got = f64::from(dot_row(row, x.bytes()));
            let want = dot_row_f64(row, x.bytes());
            let cols = 640;
            let (mut wf, mut xf) = (vec![0.0f32; cols], vec![0.0f32; cols]);
            W.dequantize(row, &mut wf).unwrap();
            X.dequantize(x.bytes(), &mut xf).unwrap();
            let abs: f64 = wf
                .iter()
                .zip(&xf)
                .map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs())
                .sum();
            // Per lane and block: s, the product and the sum round once;
            // 20 blocks, then the fold's three levels.
            let bound = abs * 64.0 * f64::from(f32::EPSILON);
            assert!(
                (got - want).abs() <= bound,
                "seed {seed} row {r}: {got} vs {want}"
            );
        }
    }
}

#[test]
fn arm_matches_the_reference_bit_for_bit_on_every_validation_case() {
    let offer = offer_for(2048, 640, 1).expect("offer");
    let kernel = place_arm().expect("arm");
    let cases = KValidation(W).cases(&offer, 11);
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
    let offer = offer_for(2048, 640, 1).expect("offer");
    let cases = KValidation(W).cases(&offer, 11);
    let kernel = place_arm().expect("arm");
    let (mut nan, mut inf, mut untouched) = (0, 0, 0);
    for case in &cases {
        let out = KValidation(W).run(kernel.kernel(), case).expect("runs");
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
    let site = weft_kernel::Site::new(weft_kernel::Family(FAMILY), geometry(640, 48, 1));
    assert!(matches!(
        Q5_0MatvecArm.offer(&site, &host),
        Err(Refusal::UnsupportedGeometry { .. })
    ));
    let site = weft_kernel::Site::new(weft_kernel::Family("q4_k.matvec"), geometry(640, 640, 1));
    assert!(Q5_0MatvecArm.offer(&site, &host).is_err());
    let site = weft_kernel::Site::new(weft_kernel::Family(FAMILY), geometry(2048, 640, 2));
    assert!(Q5_0MatvecArm.offer(&site, &host).is_ok());
}

#[test]
fn every_twin_the_host_can_run_matches_the_arm_bit_for_bit() {
    let host = Host::detect();
    let offer = offer_for(2048, 640, 1).expect("offer");
    let arm = Q5_0MatvecArm.build(&offer, host.isa).expect("arm builds");
    let mut accepted = 0;
    for twin in TWINS {
        match weft_validate::testing::judge_twin(&twin, &arm, &offer, &host, &KValidation(W), 42) {
            Outcome::Accepted(v) => {
                assert!(v.words > 0);
                accepted += 1;
            }
            Outcome::Refused(Refusal::MissingFeature { .. } | Refusal::WrongIsa { .. }) => {}
            Outcome::Refused(r) => panic!("{}: {r}", twin.name()),
        }
    }
    if host.has(weft_kernel::Feature::Avx512vnni) && host.has(weft_kernel::Feature::Avx512vl) {
        assert_eq!(accepted, TWINS.len());
    } else if host.has(weft_kernel::Feature::Avx2) && host.has(weft_kernel::Feature::F16c) {
        assert!(accepted >= 1);
    }
}

#[test]
fn win64_entry_emits_the_same_loops_with_another_frame() {
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
    let offer = offer_for(641, 640, 3).expect("offer");
    for twin in TWINS {
        let nest = twin.nest(&offer);
        let code = twin.emit(&offer).expect("emits");
        let annotated: Vec<&str> = code.loops.iter().map(|l| l.name.as_str()).collect();
        let stated: Vec<&str> = nest.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(annotated, stated, "{}", twin.name());
        let trips: Vec<(u32, u64)> = nest.iter().map(|l| (l.depth, l.trips)).collect();
        if twin.tier() == super::twin_x64::Tier::Avx512Vnni {
            // The table first: every activation block of the batch.
            assert_eq!(trips, [(0, 60), (0, 641), (1, 3), (2, 20)]);
        } else {
            assert_eq!(trips, [(0, 641), (1, 3), (2, 20)]);
        }
    }
}

#[test]
fn twins_refuse_other_families_and_ragged_geometries() {
    let mut offer = offer_for(4, 64, 1).expect("offer");
    offer.contract.family = "q8_0.matvec".to_owned();
    assert!(TWINS[0].emit(&offer).is_err());
    let mut offer = offer_for(4, 64, 1).expect("offer");
    offer.contract.geometry = geometry(4, 63, 1);
    for twin in TWINS {
        assert!(matches!(
            twin.emit(&offer),
            Err(Refusal::UnsupportedGeometry { .. })
        ));
    }
}

#[test]
fn the_avx512_twin_adds_the_fifth_bits_under_their_mask() {
    // iced's assembler encodes `vpaddb` as VEX, silently dropping the
    // opmask, unless EVEX is asked for: the listing must show the mask.
    let offer = offer_for(4, 64, 1).expect("offer");
    let twin = TWINS
        .iter()
        .find(|t| t.tier() == super::twin_x64::Tier::Avx512Bw)
        .unwrap();
    let code = twin.emit(&offer).expect("emits");
    let listing = weft_x64::Listing::decode(&code.bytes);
    let texts = listing.texts();
    assert!(
        texts.iter().any(|l| l.starts_with("kmovd k1,")),
        "{texts:#?}"
    );
    assert!(
        texts
            .iter()
            .any(|l| l.starts_with("vpaddb") && l.contains("{k1}")),
        "{texts:#?}"
    );
}

#[test]
fn the_vnni_twin_keeps_its_table_under_a_page_and_refuses_geometries_that_would_not() {
    use super::twin_x64::Tier;
    let twin = TWINS
        .into_iter()
        .find(|t| t.tier() == Tier::Avx512Vnni)
        .unwrap();
    // 36 bytes per activation block: 108 blocks fit, 109 do not.
    assert!(twin.emit(&offer_for(8, 108 * 32, 1).unwrap()).is_ok());
    assert!(twin.emit(&offer_for(8, 27 * 32, 4).unwrap()).is_ok());
    for (cols, batch) in [(109 * 32, 1), (28 * 32, 4), (2048, 8)] {
        assert!(
            matches!(
                twin.emit(&offer_for(8, cols, batch).unwrap()),
                Err(Refusal::UnsupportedGeometry { .. })
            ),
            "{cols} {batch}"
        );
    }
}
