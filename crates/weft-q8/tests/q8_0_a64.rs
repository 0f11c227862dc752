//! The arm64 side of `q8_0.matvec`: the SDOT twins of the f32x4 arm, the
//! rows2 arm and its SMMLA/SDOT twins, and what Cranelift's aarch64
//! backend makes of the arms.
//!
//! On any host: every arm64 body emits, every word decodes, only the
//! declared features are used, listings are snapshots. On aarch64 (CI runs
//! this file under `qemu-aarch64 -cpu max`): every twin is validated bit
//! for bit against its arm through the family's check.

use std::sync::Arc;

use weft_a64::decode;
use weft_kernel::{Arm, Family, Feature, Host, Isa, NativeCode, Offer, Site, Twin};
use weft_managed::{Arch, Target};
use weft_q8::rows2;
use weft_q8::rows2::twin_a64::{Dot, Q8Rows2A64, ROWS2_TWINS};
use weft_q8::twin_a64::{Q8MatvecSdot, SDOT_TWINS};
use weft_q8::validation::random_weights;
use weft_q8::{arm, geometry, FAMILY};

/// Every arm64 twin of the family, as the planner sees them.
fn a64_twins() -> Vec<Box<dyn Twin>> {
    let mut v: Vec<Box<dyn Twin>> = Vec::new();
    for t in SDOT_TWINS {
        v.push(Box::new(t));
    }
    for t in ROWS2_TWINS {
        v.push(Box::new(t));
    }
    v
}

/// The name of the arm `twin` is registered under in the family's entry.
fn arm_of(twin: &dyn Twin) -> &'static str {
    weft_q8::entry()
        .arms
        .iter()
        .find(|a| a.twins.iter().any(|t| t.name() == twin.name()))
        .map(|a| a.arm.name())
        .unwrap_or_else(|| panic!("{} is not registered", twin.name()))
}

/// The body of a twin for its own arm's offer at a small geometry.
fn body_of(twin: &dyn Twin) -> NativeCode {
    let offer = offer_for_arm(arm_of(twin), 5, 3, 2);
    twin.emit(&offer)
        .unwrap_or_else(|e| panic!("{}: {e}", twin.name()))
}

/// The offer of the arm called `arm` at `rows × blocks`, batch `batch`.
fn offer_for_arm(arm_name: &str, rows: usize, blocks: usize, batch: u64) -> Offer {
    let w = random_weights(rows, blocks, 3, true);
    let site = Site::new(
        Family(FAMILY),
        geometry(rows as u64, 32 * blocks as u64, batch),
    )
    .with_operand("weights", Arc::from(w.bytes().to_vec()));
    let entry = weft_q8::entry();
    let arm = entry
        .arms
        .iter()
        .find(|a| a.arm.name() == arm_name)
        .unwrap_or_else(|| panic!("no arm {arm_name}"));
    arm.arm.offer(&site, &Host::detect()).expect("offer")
}

/// The text of every instruction (all words decode, or the test fails).
fn texts(code: &NativeCode, name: &str) -> Vec<String> {
    assert_eq!(code.isa, Isa::Aarch64, "{name}");
    assert_eq!(code.bytes.len() % 4, 0, "{name}");
    code.bytes
        .chunks_exact(4)
        .enumerate()
        .map(|(i, c)| {
            let word = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            decode(word)
                .unwrap_or_else(|| panic!("{name}: word {i} ({word:#010x}) does not decode"))
                .to_string()
        })
        .collect()
}

#[test]
fn every_arm64_twin_emits_and_every_word_decodes() {
    for twin in a64_twins() {
        let code = body_of(twin.as_ref());
        let texts = texts(&code, twin.name());
        assert_eq!(
            texts.last().map(String::as_str),
            Some("ret"),
            "{}",
            twin.name()
        );
        assert!(
            !weft_managed::listing(&code).contains(".word"),
            "{}",
            twin.name()
        );
        assert_eq!(weft_managed::listing(&code).lines().count(), texts.len());
        // The block loops are annotated: head before back edge, in the body.
        assert!(!code.loops.is_empty(), "{}", twin.name());
        for l in &code.loops {
            assert!(l.head < l.back_edge && l.back_edge < code.bytes.len());
            assert!(
                texts[l.back_edge / 4].starts_with("b.ne"),
                "{}",
                twin.name()
            );
        }
    }
}

#[test]
fn arm64_twins_use_only_the_features_they_declare_and_never_fuse() {
    for twin in a64_twins() {
        let code = body_of(twin.as_ref());
        let mut used = Vec::new();
        for c in code.bytes.chunks_exact(4) {
            let inst = decode(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).expect("decodes");
            let feature = match inst.feature() {
                weft_a64::Feature::Base => Feature::Neon,
                weft_a64::Feature::Dotprod => Feature::Dotprod,
                weft_a64::Feature::I8mm => Feature::I8mm,
                weft_a64::Feature::Fp16 => Feature::Fp16,
                weft_a64::Feature::Bf16 => Feature::Bf16,
            };
            assert!(
                twin.requires().contains(&feature),
                "{}: {inst} needs {feature:?}",
                twin.name()
            );
            if !used.contains(&feature) {
                used.push(feature);
            }
            let text = inst.to_string();
            for fused in ["fmla", "fmls", "fmadd", "fmsub", "fnmadd", "fnmsub"] {
                assert!(
                    !text.starts_with(fused),
                    "{}: the contract has no FMA: {text}",
                    twin.name()
                );
            }
        }
        // Each declared feature is really used (no over-asking either).
        for f in twin.requires() {
            assert!(used.contains(f), "{} declares {f:?} unused", twin.name());
        }
    }
}

fn count(texts: &[String], prefix: &str) -> usize {
    texts.iter().filter(|t| t.starts_with(prefix)).count()
}

#[test]
fn rows2_smmla_twins_zip_only_activations_once_per_block() {
    for twin in ROWS2_TWINS {
        let texts = texts(&body_of(&twin), twin.name());
        // Emitted pair blocks in vector-pair mode: 4 in the loop + 3 tail
        // blocks, once per pass kind (a 2-pair pass and a 1-pair pass, or
        // just the 1-pair pass).
        let passes = usize::from(twin.pairs());
        let pair_mode_blocks = 7 * passes;
        let zips_2d = texts
            .iter()
            .filter(|t| t.starts_with("zip") && t.contains(".2d"))
            .count();
        match twin.dot() {
            Dot::Smmla => {
                // Four activation zips per vector-pair block, whatever the
                // number of row pairs sharing them: W needs none.
                assert_eq!(zips_2d, 4 * pair_mode_blocks, "{}", twin.name());
                let smmla = count(&texts, "smmla");
                let per_pass: usize = (1..=passes).map(|p| 4 * p * 14).sum();
                assert_eq!(smmla, per_pass, "{}", twin.name());
                assert_eq!(count(&texts, "sdot"), 0);
            }
            Dot::Sdot => {
                assert_eq!(zips_2d, 0, "{}", twin.name());
                assert_eq!(count(&texts, "smmla"), 0);
                assert!(count(&texts, "addp") > 0);
            }
        }
    }
}

#[test]
fn sdot_twins_compute_every_block_with_two_sdot_per_row() {
    for twin in SDOT_TWINS {
        let texts = texts(&body_of(&twin), twin.name());
        // Passes of 2 rows (r2 only) then of 1 row; each emits 7 blocks
        // (4 in the loop, 3 tail), each block 2 sdot and 1 + rows `fcvt`
        // (the activation scale once, each row's scale) per pass row.
        let passes: &[usize] = if twin.rows_per_pass() == 2 {
            &[2, 1]
        } else {
            &[1]
        };
        let sdot: usize = passes.iter().map(|r| 7 * 2 * r).sum();
        let fcvt: usize = passes.iter().map(|r| 7 * (1 + r)).sum();
        assert_eq!(count(&texts, "sdot"), sdot, "{}", twin.name());
        assert_eq!(count(&texts, "fcvt s"), fcvt, "{}", twin.name());
        assert_eq!(count(&texts, "faddp s"), passes.iter().sum::<usize>());
    }
}

#[test]
fn listing_of_the_one_row_sdot_twin() {
    let code = Q8MatvecSdot::new(1).body().expect("emits");
    insta::assert_snapshot!("q8_0_matvec_twin_sdot_r1", weft_managed::listing(&code));
}

#[test]
fn listing_of_the_one_pair_smmla_twin() {
    let code = Q8Rows2A64::new(Dot::Smmla, 1).body().expect("emits");
    insta::assert_snapshot!(
        "q8_0_matvec_twin_rows2_smmla_r2",
        weft_managed::listing(&code)
    );
}

#[test]
fn twins_refuse_offers_of_the_other_contract_and_bad_passes() {
    let f32x4 = offer_for_arm(arm::ARM_NAME, 4, 2, 1);
    let packed = offer_for_arm(rows2::ARM_NAME, 4, 2, 1);
    for t in SDOT_TWINS {
        assert_eq!(t.emit(&packed).unwrap_err().name(), "unsupported-geometry");
        let mut with_packed = f32x4.clone();
        with_packed.packed = packed.packed.clone();
        assert_eq!(t.emit(&with_packed).unwrap_err().name(), "unknown-layout");
    }
    for t in ROWS2_TWINS {
        assert_eq!(t.emit(&f32x4).unwrap_err().name(), "unsupported-geometry");
        let mut no_operand = packed.clone();
        no_operand.packed.clear();
        assert_eq!(t.emit(&no_operand).unwrap_err().name(), "bad-operand");
        let mut other = packed.clone();
        other.packed[0].layout = "q8_0.rows4";
        assert_eq!(t.emit(&other).unwrap_err().name(), "unknown-layout");
    }
    assert_eq!(
        Q8MatvecSdot::new(3).body().unwrap_err().name(),
        "emit-error"
    );
    assert_eq!(
        Q8Rows2A64::new(Dot::Sdot, 0).body().unwrap_err().name(),
        "emit-error"
    );
}

#[test]
fn twin_nests_cover_every_row_pair_and_vector() {
    let offer = offer_for_arm(arm::ARM_NAME, 5, 9, 3);
    let trips = |nest: &[weft_kernel::LoopTrip], name: &str| -> Vec<u64> {
        nest.iter()
            .filter(|l| l.name == name)
            .map(|l| l.trips)
            .collect()
    };
    let two = Q8MatvecSdot::new(2).nest(&offer);
    assert_eq!(trips(&two, "row-pairs"), [2]);
    assert_eq!(trips(&two, "rows"), [1]);
    assert_eq!(trips(&two, "blocks4"), [2, 2]);
    // The blocks % 4 tail is guarded straight-line code, not a loop.
    assert_eq!(trips(&two, "tail"), Vec::<u64>::new());
    assert_eq!(trips(&Q8MatvecSdot::new(1).nest(&offer), "rows"), [5]);
    let offer = offer_for_arm(rows2::ARM_NAME, 7, 9, 3);
    let r4 = Q8Rows2A64::new(Dot::Smmla, 2).nest(&offer);
    assert_eq!(trips(&r4, "pairs2"), [2]);
    assert_eq!(trips(&r4, "pairs"), [0]);
    assert_eq!(trips(&r4, "vector-pairs"), [1, 1]);
    // The odd batch's last vector is guarded code around its own block loop.
    assert_eq!(trips(&r4, "blocks4-last-vector"), [2, 2]);
}

#[test]
fn entry_registers_both_arms_and_every_arm64_twin_with_its_arm() {
    let entry = weft_q8::entry();
    let arms: Vec<_> = entry.arms.iter().map(|a| a.arm.name()).collect();
    assert_eq!(arms, [arm::ARM_NAME, rows2::ARM_NAME]);
    let names: Vec<_> = entry.twins().map(|(_, t)| t.name()).collect();
    for t in a64_twins() {
        assert!(names.contains(&t.name()), "{} not registered", t.name());
    }
    // Each arm holds exactly its own contract's twins.
    let under = |k: usize| -> Vec<&str> { entry.arms[k].twins.iter().map(|t| t.name()).collect() };
    for t in SDOT_TWINS {
        assert!(under(0).contains(&t.name()), "{}", t.name());
    }
    for t in ROWS2_TWINS {
        assert!(under(1).contains(&t.name()), "{}", t.name());
    }
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "twin names are unique");
}

#[test]
fn an_arms_check_refuses_an_offer_for_another_argument_struct() {
    let entry = weft_q8::entry();
    let host = Host::detect();
    let mut offer = offer_for_arm(arm::ARM_NAME, 3, 2, 1);
    let arm_code = arm::Q8MatvecArm.build(&offer, host.isa).expect("arm");
    offer.contract.args = "Q8SomethingElse".into();
    // The judge alone, on the arm's own bytes as both bodies: the contract
    // names another struct than this arm's validation runs, so it refuses
    // by name before anything is placed (on any host: the bytes are the
    // host's).
    let body = |name| weft_kernel::Judged {
        name,
        code: &arm_code,
    };
    let e = entry.arms[0]
        .check
        .check(body("arm"), body("copy"), &offer, &host, 1)
        .unwrap_err();
    assert_eq!(e.name(), "bad-operand", "{e}");
    // Through emission, a twin's own emitter may refuse the foreign offer
    // first; either way it is a named refusal, never a run.
    let e = weft_validate::testing::judge_with(
        &*entry.arms[0].check,
        &SDOT_TWINS[0],
        &arm_code,
        &offer,
        &host,
        1,
    )
    .unwrap_err();
    assert!(
        matches!(
            e.name(),
            "bad-operand" | "unsupported-geometry" | "wrong-isa"
        ),
        "{e}"
    );
}

// ------------------------------------------ what Cranelift makes of it ---

fn aarch64_listing(
    compile: fn(&Target) -> Result<weft_managed::ArmCode, weft_managed::ManagedError>,
    flags: &[&str],
) -> String {
    let target = Target::baseline_with(Arch::Aarch64, flags).expect("target");
    compile(&target).expect("compiles").listing
}

/// With FEAT_DotProd the aarch64 backend folds the f32x4 arm's signed dot
/// tree into `sdot` (two per block); at baseline it widens with `smull`.
#[test]
fn f32x4_arm_gets_sdot_from_cranelift_with_dotprod() {
    let with = aarch64_listing(arm::compile, &["has_dotprod"]);
    let base = aarch64_listing(arm::compile, &[]);
    let sdot = with.lines().filter(|l| l.contains(" sdot ")).count();
    assert_eq!(
        sdot,
        2 * 7,
        "two per block, 4 loop + 3 tail blocks:\n{with}"
    );
    assert!(!base.contains(" sdot "), "{base}");
    assert!(base.contains(" smull "), "{base}");
    assert!(!with.contains(".word 0x"), "every word decodes:\n{with}");
    insta::assert_snapshot!("q8_0_arm_f32x4_aarch64_dotprod", with);
}

/// The rows2 arm's chunk chain folds the same way (four per block).
#[test]
fn rows2_arm_gets_sdot_from_cranelift_with_dotprod() {
    let with = aarch64_listing(rows2::arm::compile, &["has_dotprod"]);
    let sdot = with.lines().filter(|l| l.contains(" sdot ")).count();
    assert_eq!(
        sdot,
        4 * 7,
        "four per block, 4 loop + 3 tail blocks:\n{with}"
    );
    insta::assert_snapshot!("q8_0_arm_rows2_aarch64_dotprod", with);
}

// ------------------------------------------------- run on arm64 itself ---

/// Against their arms on this host: CI's `cargo test -p weft-q8
/// --target aarch64-unknown-linux-gnu` under `qemu-aarch64 -cpu max`.
#[cfg(target_arch = "aarch64")]
mod on_aarch64 {
    use super::*;
    use weft_q8::arm::{offer_for, Q8MatvecKernel};
    use weft_q8::rows2::arm::Q8Rows2Kernel;
    use weft_q8::rows2::Q8Rows2Weights;
    use weft_q8::validation::random_activations;
    use weft_q8::{Q8Activations, Q8Weights};

    fn same_bits(a: &[f32], b: &[f32]) -> Option<usize> {
        a.iter()
            .zip(b)
            .position(|(x, y)| !(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())))
    }

    #[test]
    fn host_arm_uses_sdot_when_the_host_has_dotprod() {
        let host = Host::detect();
        let offer = offer_for(1, 32, 1).expect("offer");
        let code = arm::Q8MatvecArm.build(&offer, host.isa).expect("build");
        if host.has(Feature::Dotprod) {
            assert!(
                weft_managed::listing(&code).contains(" sdot "),
                "{}",
                weft_managed::listing(&code)
            );
        }
    }

    /// The planner's path: the family's check (which dispatches on the
    /// contract) runs every case of the twin's contract on arm and twin.
    #[test]
    fn every_arm64_twin_matches_its_arm_bit_for_bit() {
        let host = Host::detect();
        let entry = weft_q8::entry();
        let mut accepted = 0;
        // Each arm is built once (Cranelift itself runs slowly under qemu).
        for (a, twin) in entry.twins() {
            if twin.isa() != Isa::Aarch64
                || weft_kernel::require_features(&host, twin.requires()).is_err()
            {
                continue;
            }
            // The geometry of the offer does not change the body; the
            // cases bring their own shapes (rows 1..4096, blocks 1..448).
            let offer = offer_for_arm(a.arm.name(), 4096, 2, 1);
            let arm_code = a.arm.build(&offer, host.isa).expect("arm builds");
            match weft_validate::testing::judge_with(
                &*a.check,
                twin.as_ref(),
                &arm_code,
                &offer,
                &host,
                42,
            ) {
                Ok(checked) => {
                    assert!(checked.cases > 40 && checked.words > 20_000);
                    println!(
                        "{}: {} cases, {} words",
                        twin.name(),
                        checked.cases,
                        checked.words
                    );
                    accepted += 1;
                }
                Err(e) => panic!("{}: {e}", twin.name()),
            }
        }
        if host.has(Feature::Dotprod) && host.has(Feature::I8mm) {
            assert_eq!(accepted, a64_twins().len());
        }
    }

    /// One row per binary16 weight scale, against the arm (`fcvt` widening
    /// versus the arm's integer widening).
    #[test]
    #[cfg_attr(
        not(weft_host_has = "dotprod"),
        ignore = "needs dotprod, which this host lacks"
    )]
    fn sdot_twins_widen_every_fp16_scale_like_the_arm() {
        let host = Host::detect();
        let mut bytes = Vec::with_capacity(65536 * 34);
        for h in 0..=u16::MAX {
            bytes.extend_from_slice(&h.to_le_bytes());
            bytes.push(1);
            bytes.extend_from_slice(&[0xff; 31]);
        }
        let w = Q8Weights::from_bytes(bytes, 65536, 32).expect("weights");
        let mut xb = vec![3u8; 34];
        xb[..2].copy_from_slice(&0x3c00u16.to_le_bytes());
        let x = Q8Activations::from_bytes(xb, 32, 1).expect("x");
        let mut want = vec![0.0f32; 65536];
        Q8MatvecKernel::of_arm()
            .expect("arm")
            .run(&w, &x, &mut want, 0..65536)
            .expect("run");
        for twin in SDOT_TWINS {
            let code = twin.body().expect("emit");
            // SAFETY: a q8_0.matvec twin body honours the leaf ABI for
            // Q8MatvecArgs (module docs of weft_q8::twin_a64).
            let k = unsafe { Q8MatvecKernel::from_native(&code) }.expect("place");
            let mut got = vec![0.0f32; 65536];
            k.run(&w, &x, &mut got, 0..65536).expect("run");
            assert_eq!(same_bits(&want, &got), None, "{}", twin.name());
        }
        let packed = Q8Rows2Weights::from_weights(&w);
        let mut want = vec![0.0f32; 65536];
        Q8Rows2Kernel::of_arm()
            .expect("arm")
            .run(&packed, &x, &mut want, 0..65536)
            .expect("run");
        for twin in ROWS2_TWINS {
            if weft_kernel::require_features(&host, twin.requires()).is_err() {
                continue;
            }
            let code = twin.body().expect("emit");
            // SAFETY: a rows2 twin body honours the leaf ABI for
            // Q8Rows2Args (module docs of weft_q8::rows2::twin_a64).
            let k = unsafe { Q8Rows2Kernel::from_native(&code) }.expect("place");
            let mut got = vec![0.0f32; 65536];
            k.run(&packed, &x, &mut got, 0..65536).expect("run");
            assert_eq!(same_bits(&want, &got), None, "{}", twin.name());
        }
    }

    /// Row splits (`KernelArgs::restrict`) give the bits of one call, at
    /// even cuts (the offers' granule) and at odd ones.
    #[test]
    fn twin_row_splits_are_bit_identical_to_one_call() {
        let host = Host::detect();
        let (rows, blocks, batch) = (23usize, 7usize, 5usize);
        let w = random_weights(rows, blocks, 31, true);
        let packed = Q8Rows2Weights::from_weights(&w);
        let x = random_activations(blocks, batch, 32);
        let views = offer_for(rows as u64, 32 * blocks as u64, batch as u64)
            .expect("offer")
            .views
            .expect("views");
        for twin in SDOT_TWINS {
            if weft_kernel::require_features(&host, twin.requires()).is_err() {
                continue;
            }
            let code = twin.body().expect("emit");
            // SAFETY: as above.
            let k = unsafe { Q8MatvecKernel::from_native(&code) }.expect("place");
            let mut whole = vec![0.0f32; rows * batch];
            k.run(&w, &x, &mut whole, 0..rows).expect("run");
            for parts in [2u64, 3, 4, 7] {
                let mut split = vec![f32::NAN; rows * batch];
                for r in views.split(parts) {
                    k.run(&w, &x, &mut split, r.start as usize..r.end as usize)
                        .expect("run");
                }
                assert_eq!(same_bits(&whole, &split), None, "{} {parts}", twin.name());
            }
        }
        for twin in ROWS2_TWINS {
            if weft_kernel::require_features(&host, twin.requires()).is_err() {
                continue;
            }
            let code = twin.body().expect("emit");
            // SAFETY: as above.
            let k = unsafe { Q8Rows2Kernel::from_native(&code) }.expect("place");
            let mut whole = vec![0.0f32; rows * batch];
            k.run(&packed, &x, &mut whole, 0..rows).expect("run");
            for granule in [1u64, 2] {
                let views = weft_kernel::MemberViews {
                    granule,
                    ..views.clone()
                };
                for parts in [2u64, 3, 4, 7] {
                    let mut split = vec![f32::NAN; rows * batch];
                    k.run_split(&packed, &x, &mut split, &views, parts)
                        .expect("run");
                    assert_eq!(
                        same_bits(&whole, &split),
                        None,
                        "{} granule {granule} {parts}",
                        twin.name()
                    );
                }
            }
        }
    }
}
