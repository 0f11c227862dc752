//! The arm64 side of `q8_0.matmul`: the SDOT twin of the panel arm.
//!
//! On any host: every arm64 body emits, every word decodes, only the
//! declared features are used, the tile's instruction counts are what the
//! module docs say, the listing is a snapshot. On aarch64 (CI runs this
//! file under `qemu-aarch64 -cpu max`): every twin is validated bit for
//! bit against the arm through the family's check, row splits give the
//! bits of one call, and every binary16 activation scale widens as the
//! arm widens it.

use std::sync::Arc;

use weft_a64::decode;
use weft_kernel::{Family, Feature, Host, Isa, LoopTrip, NativeCode, Offer, Site, Twin};
use weft_q8::matmul::twin_a64::{Q8MatmulSdot, TWINS};
use weft_q8::matmul::{self, arm, FAMILY};
use weft_q8::validation::random_weights;

/// Every arm64 twin of the family, as the planner sees them.
fn a64_twins() -> Vec<Arc<dyn Twin>> {
    matmul::entry()
        .twins()
        .filter(|(_, t)| t.isa() == Isa::Aarch64)
        .map(|(_, t)| t.clone())
        .collect()
}

/// The panel arm's offer at `rows × blocks`, batch `batch`.
fn offer(rows: usize, blocks: usize, batch: u64) -> Offer {
    let w = random_weights(rows, blocks, 3, true);
    let site = Site::new(
        Family(FAMILY),
        matmul::geometry(rows as u64, 32 * blocks as u64, batch),
    )
    .with_operand("weights", Arc::from(w.bytes().to_vec()));
    let entry = matmul::entry();
    entry.arms[0]
        .arm
        .offer(&site, &Host::detect())
        .expect("offer")
}

/// The body of a twin for the arm's offer at a small geometry.
fn body_of(twin: &dyn Twin) -> NativeCode {
    twin.emit(&offer(20, 3, 5))
        .unwrap_or_else(|e| panic!("{}: {e}", twin.name()))
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

fn count(texts: &[String], prefix: &str) -> usize {
    texts.iter().filter(|t| t.starts_with(prefix)).count()
}

#[test]
fn entry_registers_the_arm64_twins_with_the_panel_arm() {
    let entry = matmul::entry();
    assert_eq!(entry.arms.len(), 1);
    assert_eq!(entry.arms[0].arm.name(), matmul::ARM_NAME);
    let names: Vec<_> = a64_twins().iter().map(|t| t.name()).collect();
    for t in TWINS {
        assert!(names.contains(&t.name()), "{} not registered", t.name());
    }
    let mut all: Vec<_> = entry.twins().map(|(_, t)| t.name()).collect();
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "twin names are unique");
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
        let listing = weft_managed::listing(&code);
        assert!(!listing.contains(".word"), "{}", twin.name());
        assert_eq!(listing.lines().count(), texts.len());
        // The three block loops (4-, 2- and 1-vector tiles) are annotated.
        assert_eq!(code.loops.len(), 3, "{}", twin.name());
        for l in &code.loops {
            assert!(l.head < l.back_edge && l.back_edge < code.bytes.len());
            assert!(
                texts[l.back_edge / 4].starts_with("b.ne"),
                "{}",
                twin.name()
            );
        }
        // The body does not depend on the geometry.
        assert_eq!(twin.emit(&offer(1, 1, 1)).expect("emits").bytes, code.bytes);
    }
}

#[test]
fn arm64_twins_use_only_the_features_they_declare() {
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
        }
        for f in twin.requires() {
            assert!(used.contains(f), "{} declares {f:?} unused", twin.name());
        }
    }
}

/// Per block of a `v`-vector tile: 8 groups × 2 quarters × `v` `sdot`,
/// 2 × `v` `fmla` (the contract's FMA; no separate `fadd`), 2 `eor` per
/// group whatever `v`. Tiles of 4, 2 and 1 vectors are each emitted once.
#[test]
fn sdot_twin_shares_each_weight_register_across_the_tile() {
    let twin = Q8MatmulSdot;
    let texts = texts(&twin.body().expect("emits"), twin.name());
    let tiles = [4usize, 2, 1];
    let sum = |f: fn(usize) -> usize| tiles.iter().map(|&v| f(v)).sum::<usize>();
    assert_eq!(count(&texts, "sdot"), sum(|v| 8 * 2 * v));
    assert_eq!(count(&texts, "fmla"), sum(|v| 2 * v));
    assert_eq!(count(&texts, "scvtf"), sum(|v| 2 * v));
    assert_eq!(count(&texts, "eor"), 3 * 8 * 2);
    assert_eq!(count(&texts, "fcvtl"), 3);
    assert_eq!(count(&texts, "fadd"), 0);
    // Every sdot takes the activation quants by element (a broadcast group).
    assert!(texts
        .iter()
        .filter(|t| t.starts_with("sdot"))
        .all(|t| t.contains(".4b[")));
    // Whole quarters by `str q`, edges lane by lane.
    assert_eq!(count(&texts, "str q"), sum(|v| 2 * v));
    assert_eq!(count(&texts, "st1"), sum(|v| 2 * 4 * v));
}

#[test]
fn listing_of_the_sdot_twin() {
    let code = Q8MatmulSdot.body().expect("emits");
    insta::assert_snapshot!("q8_0_matmul_twin_sdot_8x4", weft_managed::listing(&code));
}

#[test]
fn twins_refuse_offers_of_other_contracts_and_layouts() {
    let packed = offer(4, 2, 1);
    let matvec = weft_q8::arm::offer_for(4, 64, 1).expect("offer");
    for t in a64_twins() {
        assert_eq!(t.emit(&matvec).unwrap_err().name(), "unsupported-geometry");
        // Without the operand a twin refuses exactly when the arm does
        // (the body never depends on it).
        let mut no_operand = packed.clone();
        no_operand.packed.clear();
        assert_eq!(
            t.emit(&no_operand).err().map(|e| e.name()),
            arm::check_offer(&no_operand, t.name())
                .err()
                .map(|e| e.name())
        );
        let mut other = packed.clone();
        other.packed[0].layout = "q8_0.rows2";
        assert_eq!(t.emit(&other).unwrap_err().name(), "unknown-layout");
    }
}

#[test]
fn sdot_twin_nest_covers_every_half_panel_and_vector() {
    let trips = |nest: &[LoopTrip]| -> Vec<(String, u64, u32)> {
        nest.iter()
            .map(|l| (l.name.clone(), l.trips, l.depth))
            .collect()
    };
    let at = |rows, blocks, batch| trips(&Q8MatmulSdot.nest(&offer(rows, blocks, batch)));
    let t = |name: &str, trips, depth| (name.to_owned(), trips, depth);
    assert_eq!(
        at(20, 3, 7),
        [
            t("halves", 3, 0),
            t("vectors4", 1, 1),
            t("blocks", 3, 2),
            t("blocks-2-vectors", 3, 1),
            t("blocks-1-vector", 3, 1),
        ]
    );
    // Remainder tiles that a batch does not need have no trips.
    assert_eq!(
        at(16, 5, 8),
        [
            t("halves", 2, 0),
            t("vectors4", 2, 1),
            t("blocks", 5, 2),
            t("blocks-2-vectors", 0, 1),
            t("blocks-1-vector", 0, 1),
        ]
    );
    assert_eq!(at(1, 1, 1)[4], t("blocks-1-vector", 1, 1));
    assert_eq!(at(1, 1, 1)[1], t("vectors4", 0, 1));
}

// ------------------------------------------------- run on arm64 itself ---

/// Against the arm on this host: CI's `cargo test -p weft-q8 --target
/// aarch64-unknown-linux-gnu` under `qemu-aarch64 -cpu max`.
#[cfg(target_arch = "aarch64")]
mod on_aarch64 {
    use super::*;
    use weft_q8::matmul::arm::Q8MatmulKernel;
    use weft_q8::matmul::validation::batch_activations;
    use weft_q8::matmul::{activations, Q8PanelWeights};
    use weft_q8::Q8Weights;

    fn same_bits(a: &[f32], b: &[f32]) -> Option<usize> {
        a.iter()
            .zip(b)
            .position(|(x, y)| !(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())))
    }

    fn placed(twin: &Q8MatmulSdot) -> Q8MatmulKernel {
        let code = twin.body().expect("emit");
        // SAFETY: the twin's body honours the leaf ABI for Q8MatmulArgs
        // (module docs of weft_q8::matmul::twin_a64).
        unsafe { Q8MatmulKernel::from_native(&code) }.expect("place")
    }

    /// The planner's path: the family's check runs every case on arm and
    /// twin.
    #[test]
    fn every_arm64_twin_matches_the_arm_bit_for_bit() {
        let host = Host::detect();
        let entry = matmul::entry();
        let a = &entry.arms[0];
        // The arm is built once (Cranelift itself runs slowly under qemu);
        // the offer's own shape is one more small case.
        let offer = offer(40, 3, 9);
        let arm_code = a.arm.build(&offer, host.isa).expect("arm builds");
        let mut accepted = 0;
        for twin in a64_twins() {
            if weft_kernel::require_features(&host, twin.requires()).is_err() {
                continue;
            }
            match weft_validate::testing::judge_with(
                &*a.check,
                twin.as_ref(),
                &arm_code,
                &offer,
                &host,
                42,
            ) {
                Ok(checked) => {
                    assert!(checked.cases > 100 && checked.words > 100_000);
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
        if host.has(Feature::Dotprod) {
            assert_eq!(accepted, a64_twins().len());
        }
    }

    /// Every binary16 activation scale, against the arm (`fcvtl` widening
    /// versus the arm's integer widening): 65536 vectors of one block in
    /// calls of 512, against 17 rows (a whole panel and an edge one).
    #[test]
    #[cfg_attr(
        not(weft_host_has = "dotprod"),
        ignore = "needs dotprod, which this host lacks"
    )]
    fn sdot_twin_widens_every_fp16_activation_scale_like_the_arm() {
        let rows = 17;
        let w = Q8PanelWeights::from_weights(&random_weights(rows, 1, 5, false));
        let arm = Q8MatmulKernel::of_arm().expect("arm");
        for twin in TWINS {
            let k = placed(&twin);
            for chunk in 0..128u32 {
                let mut xb = Vec::with_capacity(512 * 34);
                for i in 0..512u32 {
                    let h = (chunk * 512 + i) as u16;
                    xb.extend_from_slice(&h.to_le_bytes());
                    xb.extend((0..32).map(|j| (((i + j) % 255) as i32 - 127) as i8 as u8));
                }
                let x = activations(xb, 32, 512).expect("x");
                let mut want = vec![0.0f32; rows * 512];
                let mut got = vec![1.0f32; rows * 512];
                arm.run(&w, &x, &mut want, 0..rows).expect("run");
                k.run(&w, &x, &mut got, 0..rows).expect("run");
                assert_eq!(
                    same_bits(&want, &got),
                    None,
                    "{} chunk {chunk}",
                    twin.name()
                );
            }
        }
    }

    /// Row splits (`KernelArgs::restrict`) give the bits of one call, at
    /// panel cuts (the offer's granule) and at any row; untouched outputs
    /// stay untouched.
    #[test]
    #[cfg_attr(
        not(weft_host_has = "dotprod"),
        ignore = "needs dotprod, which this host lacks"
    )]
    fn twin_row_splits_are_bit_identical_to_one_call() {
        let (rows, blocks, batch) = (45usize, 5usize, 7usize);
        let w: Q8Weights = random_weights(rows, blocks, 31, true);
        let packed = Q8PanelWeights::from_weights(&w);
        let x = batch_activations(blocks, batch, 32);
        let views = offer(rows, blocks, batch as u64).views.expect("views");
        for twin in TWINS {
            let k = placed(&twin);
            let mut whole = vec![0.0f32; rows * batch];
            k.run(&packed, &x, &mut whole, 0..rows).expect("run");
            for granule in [16u64, 1, 3] {
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
            // One row range alone writes exactly its rows.
            let canary = f32::from_bits(0x7fc0_dead);
            for range in [3..10, 9..9, 15..17, 40..45, 0..45] {
                let mut part = vec![canary; rows * batch];
                k.run(&packed, &x, &mut part, range.clone()).expect("run");
                for (i, (p, wv)) in part.iter().zip(&whole).enumerate() {
                    let want = if range.contains(&(i % rows)) {
                        *wv
                    } else {
                        canary
                    };
                    assert_eq!(p.to_bits(), want.to_bits(), "{range:?} output {i}");
                }
            }
        }
    }
}
