//! The arm64 twins of `f32.gemm` (module `weft_gemm::twin_a64`).
//!
//! On any host: every twin emits for its arm's offers at several
//! geometries, every word decodes, only NEON is used, the loops the body
//! has are the nest it states (the cost model finds them), the tile is
//! what the name says, offers it cannot serve are refused by name, and
//! the listings are snapshots. On aarch64 (CI runs this file under
//! `qemu-aarch64 -cpu max`): every twin is judged against its arm on the
//! family's validation cases as the planner judges it, and must be
//! accepted; a body with one `fmla` turned into an `fmul` must be refused;
//! split calls give the unsplit bits.

use weft_a64::decode;
use weft_gemm::arm::{ArmKind, GemmArm};
use weft_gemm::twin_a64::{twins, GemmA64, TileRule, TWINS};
use weft_gemm::{site, BLayout};
use weft_kernel::{Arm, Feature, Host, Isa, NativeCode, Offer, Twin};

/// The offer of `kind`'s arm at `m × n × k` (B in rows, given when the
/// arm packs it).
fn offer(kind: ArmKind, m: usize, n: usize, k: usize) -> Offer {
    let b: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 - 3.0).collect();
    let s = site(m, n, k, BLayout::Rows, kind.packs_b().then_some(&b[..]));
    GemmArm(kind)
        .offer(&s, &Host::detect())
        .unwrap_or_else(|e| panic!("{kind:?} {m}×{n}×{k}: {e}"))
}

/// Geometries each twin is emitted at (small_m clamps `m` to 8).
const GEOMETRIES: [(usize, usize, usize); 5] = [
    (1, 1, 1),
    (7, 37, 19),
    (64, 48, 40),
    (200, 100, 300),
    (3, 5, 0),
];

fn geometry_for(kind: ArmKind, (m, n, k): (usize, usize, usize)) -> (usize, usize, usize) {
    if kind == ArmKind::SmallM {
        (m.min(8), n, k)
    } else {
        (m, n, k)
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

fn count(texts: &[String], prefix: &str) -> usize {
    texts.iter().filter(|t| t.starts_with(prefix)).count()
}

#[test]
fn every_arm_has_a64_twins_registered_under_it_with_unique_names() {
    let entry = weft_gemm::entry();
    let mut names = Vec::new();
    for kind in ArmKind::ALL {
        let mine: Vec<&str> = twins(kind).iter().map(|t| t.name()).collect();
        assert!(mine.len() >= 2, "{kind:?}: {mine:?}");
        let arm = entry
            .arms
            .iter()
            .find(|a| a.arm.name() == kind.name())
            .expect("arm registered");
        let registered: Vec<&str> = arm.twins.iter().map(|t| t.name()).collect();
        for n in &mine {
            assert!(registered.contains(n), "{n} not under {}", kind.name());
            assert!(n.starts_with("f32.gemm.twin.a64."), "{n}");
        }
        names.extend(mine);
    }
    assert_eq!(names.len(), TWINS.len());
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "twin names are unique");
}

#[test]
fn every_twin_emits_at_every_geometry_and_every_word_decodes() {
    for twin in TWINS {
        assert_eq!(twin.isa(), Isa::Aarch64);
        assert_eq!(twin.requires(), &[Feature::Neon]);
        for g in GEOMETRIES {
            let (m, n, k) = geometry_for(twin.kind(), g);
            let offer = offer(twin.kind(), m, n, k);
            let code = twin
                .emit(&offer)
                .unwrap_or_else(|e| panic!("{} at {m}×{n}×{k}: {e}", twin.name()));
            let name = format!("{} at {m}×{n}×{k}", twin.name());
            let texts = texts(&code, &name);
            assert_eq!(texts.last().map(String::as_str), Some("ret"), "{name}");
            let listing = weft_managed::listing(&code);
            assert!(!listing.contains(".word"), "{name}");
            assert_eq!(listing.lines().count(), texts.len(), "{name}");
            // Only base A64 and Advanced SIMD (what `Feature::Neon` names).
            for c in code.bytes.chunks_exact(4) {
                let inst = decode(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).expect("decodes");
                assert_eq!(inst.feature(), weft_a64::Feature::Base, "{name}: {inst}");
            }
            // Never x18 (the platform register).
            for t in &texts {
                assert!(!t.contains("x18") && !t.contains("w18"), "{name}: {t}");
            }
            // Each annotated loop: head before its backward branch, and the
            // nest lists the same loops in the same order.
            let nest = twin.nest(&offer);
            assert_eq!(nest.len(), code.loops.len(), "{name}");
            for (l, t) in code.loops.iter().zip(&nest) {
                assert_eq!(l.name, t.name, "{name}");
                assert!(l.head < l.back_edge && l.back_edge < code.bytes.len());
                assert!(texts[l.back_edge / 4].starts_with('b'), "{name}");
            }
            // The body does not depend on n or k, only on the tile.
            let other = offer_like(&offer, twin.kind(), m);
            assert_eq!(
                twin.emit(&other).expect("emits").bytes,
                code.bytes,
                "{name}"
            );
        }
    }
}

/// An offer of the same arm at the same `m` and another `n`, `k`.
fn offer_like(_: &Offer, kind: ArmKind, m: usize) -> Offer {
    offer(kind, m, 21, 9)
}

/// The loops the bytes have are the nest the twin states: the cost model
/// matches them (same count, same depths) and prices the body.
#[test]
fn the_cost_model_finds_the_stated_nest_in_every_body() {
    let model = weft_cost::CostModel::with_table(weft_cost::TableId::NeoverseV2);
    for twin in TWINS {
        for g in GEOMETRIES {
            let (m, n, k) = geometry_for(twin.kind(), g);
            let offer = offer(twin.kind(), m, n, k);
            let code = twin.emit(&offer).expect("emits");
            let nest = twin.nest(&offer);
            let priced = model
                .price(&code, &nest, &offer)
                .unwrap_or_else(|e| panic!("{} at {m}×{n}×{k}: {e}", twin.name()));
            assert_eq!(priced.unknown_instructions, 0, "{}", twin.name());
        }
        // The nest's trips at one geometry, by name.
        let offer = offer(twin.kind(), 8, 37, 300);
        let nest = twin.nest(&offer);
        let (mr, nv) = twin.tile(8);
        let w = 4 * nv as u64;
        let trips = |name: &str| -> Vec<u64> {
            nest.iter()
                .filter(|l| l.name == name)
                .map(|l| l.trips)
                .collect()
        };
        assert_eq!(trips("k_blocks"), [2], "{}", twin.name());
        assert_eq!(trips("row_tiles"), [8 / mr as u64]);
        assert_eq!(trips("rows"), [8 % mr as u64]);
        assert_eq!(trips("col_tiles"), [37 / w, 37 / w]);
        assert!(trips("k4").iter().all(|&t| t == 64));
        assert!(trips("k_tail").iter().all(|&t| t == 0));
        assert!(trips("k").iter().all(|&t| t == 256));
        assert_eq!(nest[0].depth, 0);
        assert_eq!(nest.iter().filter(|l| l.depth == 1).count(), 2);
    }
}

/// The tile is what the name says: every `fmla` of the body belongs to a
/// vector tile (`rows × nv` per `k` step, four unrolled steps and one
/// tail step), every `fmadd` to a single-column tile; `d8`–`d15` are
/// saved exactly when a tile needs them.
#[test]
fn tiles_are_what_the_names_say() {
    for twin in TWINS {
        for m in [1usize, 3, 6, 8] {
            if twin.kind() != ArmKind::SmallM && m != 8 {
                continue;
            }
            let code = twin.emit(&offer(twin.kind(), m, 40, 20)).expect("emits");
            let texts = texts(&code, twin.name());
            let (mr, nv) = twin.tile(m as u64);
            let sweeps = [mr, 1];
            let quads = usize::from(nv > 1);
            let fmla: usize = sweeps.iter().map(|r| 5 * r * (nv + quads)).sum();
            assert_eq!(count(&texts, "fmla"), fmla, "{} m {m}", twin.name());
            assert!(texts
                .iter()
                .filter(|t| t.starts_with("fmla"))
                .all(|t| t.ends_with(".s[0]")
                    || t.ends_with(".s[1]")
                    || t.ends_with(".s[2]")
                    || t.ends_with(".s[3]")));
            let singles = 1 + usize::from(twin.kind().packs_b());
            let fmadd: usize = sweeps.iter().map(|r| singles * r).sum();
            assert_eq!(count(&texts, "fmadd"), fmadd, "{} m {m}", twin.name());
            // Accumulators take v16 up, then v8–v15; A, B and α fit in what
            // is left of v0–v7 and v16–v31 when they can.
            let acc = mr * nv;
            let saves = acc > 16 || mr + nv.min(2) + 1 > 24 - acc;
            assert_eq!(
                count(&texts, "stp d8, d9"),
                usize::from(saves),
                "{} m {m}",
                twin.name()
            );
            assert_eq!(count(&texts, "ldp d8, d9"), usize::from(saves));
        }
    }
    assert_eq!(TWINS[0].tile(1000), (6, 4));
    assert_eq!(TWINS[2].tile(1000), (8, 2));
    let small: Vec<&GemmA64> = TWINS
        .iter()
        .filter(|t| matches!(t.rule(), TileRule::AllRows { .. }))
        .collect();
    assert_eq!(small.len(), 2);
    assert_eq!(small[0].tile(3), (3, 4));
    assert_eq!(small[0].tile(8), (6, 4));
    assert_eq!(small[1].tile(8), (8, 2));
}

#[test]
fn twins_refuse_offers_they_cannot_serve_by_name() {
    let direct = offer(ArmKind::Direct, 8, 40, 20);
    let panels = offer(ArmKind::Panels, 8, 40, 20);
    for twin in TWINS {
        let mut foreign = direct.clone();
        foreign.contract.family = "q8_0.matvec".into();
        assert_eq!(
            twin.emit(&foreign).unwrap_err().name(),
            "unsupported-geometry"
        );
        let mut other_args = panels.clone();
        other_args.contract.args = "Q8MatvecArgs".into();
        assert_eq!(
            twin.emit(&other_args).unwrap_err().name(),
            "unsupported-geometry"
        );
        if twin.kind().packs_b() {
            assert_eq!(twin.emit(&direct).unwrap_err().name(), "bad-operand");
            let mut other = panels.clone();
            other.packed[0].layout = "f32.gemm.panels8";
            assert_eq!(twin.emit(&other).unwrap_err().name(), "unknown-layout");
        } else {
            assert_eq!(twin.emit(&panels).unwrap_err().name(), "unknown-layout");
        }
    }
    // small_m twins serve at most eight rows.
    let mut tall = panels.clone();
    tall.contract.geometry.set("m", 9);
    for twin in twins(ArmKind::SmallM) {
        assert_eq!(twin.emit(&tall).unwrap_err().name(), "unsupported-geometry");
    }
}

/// One listing per twin at a small geometry: a change to any emitted
/// byte shows up in review as a diff of instructions.
#[test]
fn listings_of_every_twin() {
    for twin in TWINS {
        let m = if twin.kind() == ArmKind::SmallM { 3 } else { 7 };
        let code = twin.emit(&offer(twin.kind(), m, 37, 19)).expect("emits");
        insta::assert_snapshot!(twin.name().replace('.', "_"), weft_managed::listing(&code));
    }
}

// ------------------------------------------------- run on arm64 itself ---

/// Against their arms on this host: CI's `cargo test --target
/// aarch64-unknown-linux-gnu` runs these under `qemu-aarch64 -cpu max`.
#[cfg(target_arch = "aarch64")]
mod on_aarch64 {
    use super::*;
    use weft_gemm::{Axis, GemmArgs, MatRef, SiteOperands, M_GRANULE, N_GRANULE};
    use weft_kernel::{Kernel, KernelArgs, MemberViews};

    /// The planner's path: gate on the host, emit once, hand the bytes and
    /// the arm's to the family's check, which runs every validation case.
    #[test]
    fn every_a64_twin_matches_its_arm_bit_for_bit() {
        let host = Host::detect();
        assert!(host.has(Feature::Neon), "an aarch64 host has NEON");
        let entry = weft_gemm::entry();
        let mut accepted = Vec::new();
        for a in &entry.arms {
            let kind = ArmKind::ALL
                .into_iter()
                .find(|k| k.name() == a.arm.name())
                .expect("a known arm");
            let geometries: &[(usize, usize, usize)] = match kind {
                ArmKind::SmallM => &[(1, 48, 40), (3, 48, 40), (6, 48, 40), (8, 33, 19)],
                _ => &[(64, 48, 40), (7, 37, 300)],
            };
            for &(m, n, k) in geometries {
                let offer = offer(kind, m, n, k);
                // Each arm is built once per offer (Cranelift runs slowly
                // under qemu).
                let arm_code = a.arm.build(&offer, host.isa).expect("arm builds");
                for twin in a.twins.iter().filter(|t| t.isa() == Isa::Aarch64) {
                    match weft_validate::testing::judge_with(
                        &*a.check,
                        twin.as_ref(),
                        &arm_code,
                        &offer,
                        &host,
                        42,
                    ) {
                        Ok(checked) => {
                            assert!(checked.cases >= 100, "{}", twin.name());
                            println!(
                                "{} at {m}×{n}×{k}: {} cases, {} words",
                                twin.name(),
                                checked.cases,
                                checked.words
                            );
                            accepted.push(twin.name());
                        }
                        Err(e) => panic!("{} at {m}×{n}×{k}: {e}", twin.name()),
                    }
                }
            }
        }
        accepted.sort_unstable();
        accepted.dedup();
        assert_eq!(accepted.len(), TWINS.len(), "{accepted:?}");
    }

    /// The judge can refuse: the 6 × 16 body with its first `fmla` turned
    /// into an `fmul` (same operands) is a mismatch.
    #[test]
    fn a_twin_with_one_wrong_instruction_is_refused() {
        let host = Host::detect();
        let entry = weft_gemm::entry();
        for kind in [ArmKind::Direct, ArmKind::Panels] {
            let a = entry
                .arms
                .iter()
                .find(|a| a.arm.name() == kind.name())
                .expect("arm");
            let offer = offer(kind, 64, 48, 40);
            let arm_code = a.arm.build(&offer, host.isa).expect("arm builds");
            let twin = twins(kind).remove(0);
            let mut code = twin.emit(&offer).expect("emits");
            let at = code
                .bytes
                .chunks_exact(4)
                .position(|c| {
                    let word = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    decode(word).is_some_and(|i| i.op() == weft_a64::Op::FMLA_ELEM)
                })
                .expect("an fmla");
            let word = u32::from_le_bytes(code.bytes[4 * at..4 * at + 4].try_into().unwrap());
            let inst = decode(word).expect("decodes");
            let broken = weft_a64::Inst::new(weft_a64::Op::FMUL_ELEM, inst.operands())
                .expect("fmul by element takes fmla's operands")
                .encode()
                .expect("encodes");
            code.bytes[4 * at..4 * at + 4].copy_from_slice(&broken.to_le_bytes());
            let judged = |name, code| weft_kernel::Judged { name, code };
            let e = a
                .check
                .check(
                    judged("arm", &arm_code),
                    judged(twin.name(), &code),
                    &offer,
                    &host,
                    42,
                )
                .unwrap_err();
            assert_eq!(e.name(), "mismatch", "{kind:?}: {e}");
        }
    }

    /// Member views along either axis, at the site's granules and at
    /// odd cuts: the parts give the bits of one call.
    #[test]
    fn split_calls_give_the_unsplit_bits() {
        let (m, n, k) = (70usize, 90usize, 300usize);
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7919) % 1000) as f32 / 37.0 - 13.0)
            .collect();
        let b: Vec<f32> = (0..k * n)
            .map(|i| ((i * 104_729) % 997) as f32 / 91.0 - 5.0)
            .collect();
        for twin in TWINS {
            let mm = if twin.kind() == ArmKind::SmallM { 8 } else { m };
            let offer = GemmArm(twin.kind())
                .offer(
                    &site(
                        mm,
                        n,
                        k,
                        BLayout::Rows,
                        twin.kind().packs_b().then_some(&b[..]),
                    ),
                    &Host::detect(),
                )
                .expect("offer");
            let code = twin.emit(&offer).expect("emits");
            // SAFETY: an f32.gemm twin body honours the leaf ABI for
            // GemmArgs (module docs of weft_gemm::twin_a64).
            let kernel: Kernel<GemmArgs> = unsafe { Kernel::from_native(&code) }.expect("place");
            let ops = SiteOperands::new(offer.packed.first(), offer.views.as_ref(), k, n)
                .expect("operands");
            let run = |c: &mut Vec<f32>, axis: Axis, parts: Option<(u64, u64)>| {
                let mut args = ops
                    .args(
                        MatRef::dense(&a[..mm * k], mm, k),
                        Some(MatRef::dense(&b, k, n)),
                        c,
                        n,
                        (0.5, 0.0),
                    )
                    .expect("args");
                args.axis = axis as u64;
                match parts {
                    None => {
                        // SAFETY: checked against live buffers.
                        unsafe { kernel.call(&args) }
                    }
                    Some((granule, parts)) => {
                        let views = MemberViews {
                            axis: if axis == Axis::M { "m" } else { "n" }.to_owned(),
                            extent: if axis == Axis::M { mm } else { n } as u64,
                            granule,
                        };
                        for r in views.split(parts) {
                            // SAFETY: a restricted copy of checked arguments.
                            unsafe { kernel.call(&args.restrict(r)) };
                        }
                    }
                }
            };
            let mut whole = vec![f32::NAN; mm * n];
            run(&mut whole, Axis::M, None);
            for (axis, granule) in [
                (Axis::M, M_GRANULE),
                (Axis::M, 1),
                (Axis::N, N_GRANULE),
                (Axis::N, 1),
            ] {
                for parts in [2, 3, 7] {
                    let mut split = vec![f32::NAN; mm * n];
                    run(&mut split, axis, Some((granule, parts)));
                    let diff = whole
                        .iter()
                        .zip(&split)
                        .position(|(x, y)| x.to_bits() != y.to_bits());
                    assert_eq!(
                        diff,
                        None,
                        "{} {axis:?} granule {granule} parts {parts}",
                        twin.name()
                    );
                }
            }
        }
    }
}
