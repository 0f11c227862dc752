//! Pricing the real arms and twins: every candidate of every family, for
//! both ISAs, with the nest it states, at geometries with and without
//! tails. The bytes are built on any host (arms for the other ISA with
//! Cranelift's baseline features).

use weft_cost::{CostModel, Priced, TableId};
use weft_elementwise::arm::ElementwiseArm;
use weft_elementwise::Func;
use weft_kernel::{Arm, Family, Geometry, Host, Isa, NativeCode, Site, Twin};
use weft_q8::arm::Q8MatvecArm;
use weft_q8::twin_x64::TWINS;

fn model(isa: Isa) -> CostModel {
    match isa {
        Isa::X86_64 => CostModel::with_table(TableId::Zen4),
        _ => CostModel::with_table(TableId::NeoverseV2),
    }
}

fn host() -> Host {
    Host::detect()
}

fn q8_site(rows: u64, cols: u64, batch: u64) -> Site {
    Site::new(
        Family("q8_0.matvec"),
        Geometry::new()
            .with("rows", rows)
            .with("cols", cols)
            .with("batch", batch),
    )
}

// The bodies do not depend on the geometry (only the nest and the offer
// do), so each is built once and priced at every shape: Cranelift builds
// are what makes these tests slow under qemu.

#[test]
fn every_q8_0_candidate_prices_at_shapes_with_and_without_tails() {
    let arm = Q8MatvecArm;
    let h = host();
    let first = arm.offer(&q8_site(16, 1024, 1), &h).unwrap();
    let arms: Vec<(Isa, NativeCode)> = [Isa::X86_64, Isa::Aarch64]
        .into_iter()
        .map(|isa| (isa, arm.build(&first, isa).unwrap()))
        .collect();
    let twins: Vec<(&dyn Twin, NativeCode)> = TWINS
        .iter()
        .map(|t| (t as &dyn Twin, t.emit(&first).unwrap()))
        .collect();
    for (rows, cols, batch) in [(16, 1024, 1), (7, 480, 3), (1, 32, 1), (4096, 4096, 1)] {
        let offer = arm.offer(&q8_site(rows, cols, batch), &h).unwrap();
        for (isa, code) in &arms {
            let p = model(*isa).price(code, &arm.nest(&offer), &offer);
            let p = p.unwrap_or_else(|e| panic!("arm {isa:?} {rows}x{cols}x{batch}: {e}"));
            assert!(p.price.cycles > 0.0 && p.price.cycles.is_finite());
            assert_eq!(p.loops.len(), 3);
        }
        for (twin, code) in &twins {
            let nest = twin.nest(&offer);
            let p = model(Isa::X86_64)
                .price(code, &nest, &offer)
                .unwrap_or_else(|e| panic!("{} {rows}x{cols}x{batch}: {e}", twin.name()));
            assert!(p.price.cycles >= p.price.floor);
            assert_eq!(p.unknown_instructions, 0, "{}", twin.name());
        }
    }
}

#[test]
fn every_elementwise_candidate_prices_at_lengths_with_and_without_tails() {
    let h = host();
    for func in Func::ALL {
        let arm = ElementwiseArm::new(func);
        let site = |len: u64| Site::new(arm.family(), Geometry::new().with("len", len));
        let first = arm.offer(&site(64), &h).unwrap();
        // Built for the other ISA, an arm targets that ISA's baseline, where
        // Cranelift may need a libcall: refused by name, nothing to price.
        let arms: Vec<(Isa, NativeCode)> = [Isa::X86_64, Isa::Aarch64]
            .into_iter()
            .filter_map(|isa| match arm.build(&first, isa) {
                Ok(code) => Some((isa, code)),
                Err(e) if isa != h.isa && e.name() == "compile-error" => None,
                Err(e) => panic!("{} {isa:?}: {e}", arm.name()),
            })
            .collect();
        let twins: Vec<(Box<dyn Twin>, NativeCode)> = weft_elementwise::twins_of(func)
            .into_iter()
            .map(|t| {
                let code = t.emit(&first).unwrap();
                (t, code)
            })
            .collect();
        for len in [0u64, 1, 7, 64, 1001, 100_000] {
            let offer = arm.offer(&site(len), &h).unwrap();
            for (isa, code) in &arms {
                model(*isa)
                    .price(code, &arm.nest(&offer), &offer)
                    .unwrap_or_else(|e| panic!("{} {isa:?} len {len}: {e}", arm.name()));
            }
            for (twin, code) in &twins {
                let p = model(twin.isa())
                    .price(code, &twin.nest(&offer), &offer)
                    .unwrap_or_else(|e| panic!("{} len {len}: {e}", twin.name()));
                assert!(p.price.cycles.is_finite());
            }
        }
    }
}

fn price_x64(
    code: &weft_kernel::NativeCode,
    nest: &[weft_kernel::LoopTrip],
    offer: &weft_kernel::Offer,
) -> Priced {
    model(Isa::X86_64).price(code, nest, offer).unwrap()
}

#[test]
fn exp_twins_skip_their_slow_path_and_price_below_the_arm() {
    let h = host();
    let arm = ElementwiseArm::new(Func::Exp);
    let site = Site::new(arm.family(), Geometry::new().with("len", 4096));
    let offer = arm.offer(&site, &h).unwrap();
    let arm_code = arm.build(&offer, Isa::X86_64).unwrap();
    let arm_price = price_x64(&arm_code, &arm.nest(&offer), &offer);
    // The arm's "any lane failed" branch is a rare-lanes test too.
    assert!(arm_price.rare_blocks >= 1);
    for twin in weft_elementwise::twins_of(Func::Exp) {
        if twin.isa() != Isa::X86_64 {
            continue;
        }
        let p = price_x64(&twin.emit(&offer).unwrap(), &twin.nest(&offer), &offer);
        // Both halves' slow blocks sit behind kortest/vptest branches.
        assert!(p.rare_blocks >= 2, "{}: {p:?}", twin.name());
        assert!(p.price.cycles < arm_price.price.cycles, "{}", twin.name());
    }
}

#[test]
fn the_vnni_twins_price_below_the_arm_when_weights_sit_in_l1() {
    let h = host();
    let arm = Q8MatvecArm;
    let offer = arm.offer(&q8_site(16, 1024, 1), &h).unwrap();
    let arm_price = price_x64(
        &arm.build(&offer, Isa::X86_64).unwrap(),
        &arm.nest(&offer),
        &offer,
    );
    for twin in TWINS {
        let p = price_x64(&twin.emit(&offer).unwrap(), &twin.nest(&offer), &offer);
        assert!(
            p.price.cycles < arm_price.price.cycles,
            "{} {} vs arm {}",
            twin.name(),
            p.price.cycles,
            arm_price.price.cycles
        );
    }
}

#[test]
fn a_dram_resident_matvec_is_priced_at_least_at_the_bandwidth_floor() {
    let h = host();
    let arm = Q8MatvecArm;
    let offer = arm.offer(&q8_site(8192, 4096, 1), &h).unwrap();
    let twin = TWINS[TWINS.len() - 1];
    let p = price_x64(&twin.emit(&offer).unwrap(), &twin.nest(&offer), &offer);
    assert_eq!(p.level, weft_cost::MemoryLevel::Dram);
    assert!(p.price.cycles >= p.price.floor);
    assert!(p.price.floor > 0.0);
}

/// Everything the `q8_0.matvec` family registers with a planner — every
/// arm, for both ISAs, and every twin, with the nest it states — prices at
/// shapes with and without ragged blocks and odd rows.
#[test]
fn every_candidate_the_q8_0_family_registers_prices_with_its_nest() {
    let h = host();
    let entry = weft_q8::entry();
    for (rows, cols, batch) in [(16u64, 1024u64, 1u64), (7, 480, 3)] {
        // Any bytes are valid Q8_0 weights; a fixed pattern keeps the test
        // deterministic.
        let blocks = (rows * cols / 32) as usize;
        let weights: Vec<u8> = (0..blocks * 34).map(|i| (i * 37 % 251) as u8).collect();
        let site =
            q8_site(rows, cols, batch).with_operand("weights", std::sync::Arc::from(weights));
        for a in &entry.arms {
            let arm = &a.arm;
            let offer = arm.offer(&site, &h).unwrap();
            for isa in [Isa::X86_64, Isa::Aarch64] {
                let code = arm.build(&offer, isa).unwrap();
                model(isa)
                    .price(&code, &arm.nest(&offer), &offer)
                    .unwrap_or_else(|e| {
                        panic!("{} {isa:?} {rows}x{cols}x{batch}: {e}", arm.name())
                    });
            }
            for twin in &a.twins {
                let code = twin.emit(&offer).unwrap();
                model(twin.isa())
                    .price(&code, &twin.nest(&offer), &offer)
                    .unwrap_or_else(|e| panic!("{} {rows}x{cols}x{batch}: {e}", twin.name()));
            }
        }
    }
}
