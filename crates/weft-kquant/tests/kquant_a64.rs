//! The arm64 twins of `q4_k.matvec`, `q6_k.matvec` and `q5_0.matvec`
//! (each family's `twin_a64`).
//!
//! On any host: every twin is registered under its family's arm, emits at
//! several geometries with every word decoding to base A64, Advanced SIMD
//! or FEAT_DotProd, never touches `x18`, has exactly the loops it states
//! (and the cost model prices them with no unknown instruction), does not
//! depend on the geometry, refuses offers it cannot serve by name, and has
//! its listing as a snapshot. On aarch64 (CI runs this file under
//! `qemu-aarch64 -cpu max`): every twin is judged against its arm on its
//! family's validation cases as the planner judges it and must be
//! accepted, and a body with one instruction changed must be refused.

use weft_a64::decode;
use weft_kernel::{Arm, Feature, Isa, NativeCode, Offer, Twin};
use weft_kquant::{q4_k, q5_0, q6_k};

/// A family's arm64 twin, its arm and how to make the arm's offers.
struct Family {
    name: &'static str,
    twin: &'static dyn Twin,
    arm: &'static dyn Arm,
    offer: fn(u64, u64, u64) -> Result<Offer, weft_kernel::Refusal>,
    /// Columns per block.
    block: u64,
}

const FAMILIES: [Family; 3] = [
    Family {
        name: q4_k::FAMILY,
        twin: &q4_k::twin_a64::Q4KMatvecSdot,
        arm: &q4_k::arm::Q4KMatvecArm,
        offer: q4_k::arm::offer_for,
        block: 256,
    },
    Family {
        name: q6_k::FAMILY,
        twin: &q6_k::twin_a64::Q6KMatvecSdot,
        arm: &q6_k::arm::Q6KMatvecArm,
        offer: q6_k::arm::offer_for,
        block: 256,
    },
    Family {
        name: q5_0::FAMILY,
        twin: &q5_0::twin_a64::Q5_0MatvecSdot,
        arm: &q5_0::arm::Q5_0MatvecArm,
        offer: q5_0::arm::offer_for,
        block: 32,
    },
];

/// (rows, blocks per row, batch) each twin is emitted at.
const GEOMETRIES: [(u64, u64, u64); 4] = [(1, 1, 1), (7, 3, 2), (640, 8, 1), (5, 2, 8)];

impl Family {
    fn offer_at(&self, rows: u64, blocks: u64, batch: u64) -> Offer {
        (self.offer)(rows, blocks * self.block, batch)
            .unwrap_or_else(|e| panic!("{} {rows}×{blocks}×{batch}: {e}", self.name))
    }
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
fn every_family_registers_its_arm64_twin_under_its_arm() {
    let entries = [q4_k::entry(), q6_k::entry(), q5_0::entry()];
    for (f, entry) in FAMILIES.iter().zip(entries) {
        assert_eq!(entry.family.0, f.name);
        let [arm] = &entry.arms[..] else {
            panic!("{}: one arm", f.name)
        };
        assert_eq!(arm.arm.name(), f.arm.name());
        let a64: Vec<&str> = arm
            .twins
            .iter()
            .filter(|t| t.isa() == Isa::Aarch64)
            .map(|t| t.name())
            .collect();
        assert_eq!(a64, [f.twin.name()], "{}", f.name);
        assert!(f.twin.name().starts_with(f.name), "{}", f.twin.name());
    }
}

#[test]
fn every_twin_emits_at_every_geometry_and_every_word_decodes() {
    for f in &FAMILIES {
        let twin = f.twin;
        assert_eq!(twin.isa(), Isa::Aarch64);
        assert_eq!(twin.requires(), &[Feature::Neon, Feature::Dotprod]);
        let mut first: Option<Vec<u8>> = None;
        for (rows, blocks, batch) in GEOMETRIES {
            let name = format!("{} at {rows}×{blocks}×{batch}", twin.name());
            let offer = f.offer_at(rows, blocks, batch);
            let code = twin.emit(&offer).unwrap_or_else(|e| panic!("{name}: {e}"));
            let texts = texts(&code, &name);
            assert_eq!(texts.last().map(String::as_str), Some("ret"), "{name}");
            assert!(texts.iter().any(|t| t.starts_with("sdot")), "{name}");
            for c in code.bytes.chunks_exact(4) {
                let inst = decode(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).expect("decodes");
                assert!(
                    matches!(
                        inst.feature(),
                        weft_a64::Feature::Base | weft_a64::Feature::Dotprod
                    ),
                    "{name}: {inst}"
                );
            }
            for t in &texts {
                assert!(!t.contains("x18") && !t.contains("w18"), "{name}: {t}");
                // The contract forbids fused multiply-adds.
                assert!(
                    !t.starts_with("fmla") && !t.starts_with("fmadd"),
                    "{name}: {t}"
                );
            }
            let nest = twin.nest(&offer);
            assert_eq!(nest.len(), code.loops.len(), "{name}");
            for (l, t) in code.loops.iter().zip(&nest) {
                assert_eq!(l.name, t.name, "{name}");
                assert!(l.head < l.back_edge && l.back_edge < code.bytes.len());
                assert!(texts[l.back_edge / 4].starts_with('b'), "{name}");
            }
            let trips: Vec<u64> = nest.iter().map(|l| l.trips).collect();
            assert_eq!(trips, [rows, batch, blocks], "{name}");
            // The body does not depend on the geometry.
            match &first {
                None => first = Some(code.bytes),
                Some(b) => assert_eq!(b, &code.bytes, "{name}"),
            }
        }
    }
}

#[test]
fn the_cost_model_prices_every_body_with_no_unknown_instruction() {
    let model = weft_cost::CostModel::with_table(weft_cost::TableId::NeoverseV2);
    for f in &FAMILIES {
        let offer = f.offer_at(640, 8, 1);
        let code = f.twin.emit(&offer).expect("emits");
        let priced = model
            .price(&code, &f.twin.nest(&offer), &offer)
            .unwrap_or_else(|e| panic!("{}: {e}", f.twin.name()));
        assert_eq!(priced.unknown_instructions, 0, "{}", f.twin.name());
    }
}

#[test]
fn twins_refuse_offers_they_cannot_serve_by_name() {
    for f in &FAMILIES {
        let offer = f.offer_at(8, 2, 1);
        let mut foreign = offer.clone();
        foreign.contract.family = "q8_0.matvec".into();
        assert_eq!(
            f.twin.emit(&foreign).unwrap_err().name(),
            "unsupported-geometry"
        );
        let mut other_args = offer.clone();
        other_args.contract.args = "Q8MatvecArgs".into();
        assert_eq!(
            f.twin.emit(&other_args).unwrap_err().name(),
            "unsupported-geometry"
        );
        let mut ragged = offer.clone();
        ragged.contract.geometry.set("cols", f.block + 1);
        assert!(f.twin.emit(&ragged).is_err(), "{}", f.twin.name());
        // Another family's offer.
        for g in FAMILIES.iter().filter(|g| g.name != f.name) {
            assert!(f.twin.emit(&g.offer_at(8, 2, 1)).is_err());
        }
    }
}

/// One listing per twin: a change to any emitted byte shows up in review
/// as a diff of instructions.
#[test]
fn listings_of_every_twin() {
    for f in &FAMILIES {
        let code = f.twin.emit(&f.offer_at(7, 3, 2)).expect("emits");
        insta::assert_snapshot!(
            f.twin.name().replace('.', "_"),
            weft_managed::listing(&code)
        );
    }
}

// ------------------------------------------------- run on arm64 itself ---

/// Against their arms on this host: CI's `cargo test --target
/// aarch64-unknown-linux-gnu` runs these under `qemu-aarch64 -cpu max`.
#[cfg(target_arch = "aarch64")]
mod on_aarch64 {
    use super::*;
    use weft_kernel::Host;

    /// The planner's path: gate on the host, emit, hand the bytes and the
    /// arm's to the family's check, which runs every validation case
    /// (special values, ragged row ranges, every batch size).
    #[test]
    fn every_a64_twin_matches_its_arm_bit_for_bit() {
        let host = Host::detect();
        assert!(host.has(Feature::Dotprod), "qemu -cpu max has FEAT_DotProd");
        let entries = [q4_k::entry(), q6_k::entry(), q5_0::entry()];
        for (f, entry) in FAMILIES.iter().zip(&entries) {
            let a = &entry.arms[0];
            for (rows, blocks, batch) in [(33, 3, 1), (5, 1, 3)] {
                let offer = f.offer_at(rows, blocks, batch);
                let arm_code = a.arm.build(&offer, host.isa).expect("arm builds");
                let twin = a
                    .twins
                    .iter()
                    .find(|t| t.isa() == Isa::Aarch64)
                    .expect("an arm64 twin");
                match weft_validate::testing::judge_with(
                    &*a.check,
                    twin.as_ref(),
                    &arm_code,
                    &offer,
                    &host,
                    42,
                ) {
                    Ok(checked) => assert!(checked.cases >= 50, "{}", twin.name()),
                    Err(e) => panic!("{} at {rows}×{blocks}×{batch}: {e}", twin.name()),
                }
            }
        }
    }

    /// The judge can refuse: each body with its first `fadd` of lanes
    /// turned into an `fsub` is a mismatch.
    #[test]
    fn a_twin_with_one_wrong_instruction_is_refused() {
        let host = Host::detect();
        let entries = [q4_k::entry(), q6_k::entry(), q5_0::entry()];
        for (f, entry) in FAMILIES.iter().zip(&entries) {
            let a = &entry.arms[0];
            let offer = f.offer_at(9, 2, 1);
            let arm_code = a.arm.build(&offer, host.isa).expect("arm builds");
            let mut code = f.twin.emit(&offer).expect("emits");
            let at = code
                .bytes
                .chunks_exact(4)
                .position(|c| {
                    decode(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .is_some_and(|i| i.to_string().starts_with("fadd"))
                })
                .expect("an fadd");
            let word = u32::from_le_bytes(code.bytes[4 * at..4 * at + 4].try_into().unwrap());
            let inst = decode(word).expect("decodes");
            let broken = weft_a64::Inst::with_mnemonic("fsub", inst.operands())
                .expect("fsub takes fadd's operands")
                .encode()
                .expect("encodes");
            code.bytes[4 * at..4 * at + 4].copy_from_slice(&broken.to_le_bytes());
            let judged = |name, code| weft_kernel::Judged { name, code };
            let e = a
                .check
                .check(
                    judged("arm", &arm_code),
                    judged(f.twin.name(), &code),
                    &offer,
                    &host,
                    42,
                )
                .unwrap_err();
            assert_eq!(e.name(), "mismatch", "{}: {e}", f.twin.name());
        }
    }
}
