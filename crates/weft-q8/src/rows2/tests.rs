use std::sync::Arc;

use weft_kernel::{Arm, Family, Host, MemberViews, Site};

use super::super::validation::{
    random_activations, random_weights, shapes, special_activations, special_weights,
};
use super::super::{geometry, Q8Weights, BLOCK_BYTES, FAMILY};
use super::arm::{offer_for, Q8Rows2Arm, Q8Rows2Kernel};
use super::reference::matvec;
use super::validation::{rows2_cases, Rows2Bench};
use super::*;

fn same_bits(a: &[f32], b: &[f32]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| !(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())))
}

#[test]
fn packing_interleaves_8_byte_chunks_and_round_trips() {
    for rows in [1usize, 2, 3, 6, 7] {
        let w = random_weights(rows, 3, rows as u64, true);
        let packed = pack(&w);
        assert_eq!(packed.len(), pairs(rows) * 3 * PAIR_BLOCK_BYTES);
        let row_bytes = 3 * BLOCK_BYTES;
        for r in 0..rows {
            assert_eq!(
                unpack_row(&packed, 3, r),
                &w.bytes()[r * row_bytes..(r + 1) * row_bytes],
                "rows {rows} row {r}"
            );
        }
        if rows % 2 == 1 {
            // The padding row: scale +0 and zero quants.
            assert!(unpack_row(&packed, 3, rows).iter().all(|b| *b == 0));
        } else {
            assert_eq!(packed.len(), w.bytes().len());
        }
    }
    // Block 0 of pair 0, spelt out: d0 d1, then chunk c of row 0, of row 1.
    let w = random_weights(2, 1, 5, false);
    let (r0, r1) = (&w.bytes()[..34], &w.bytes()[34..]);
    let p = pack(&w);
    assert_eq!(&p[0..2], &r0[0..2]);
    assert_eq!(&p[2..4], &r1[0..2]);
    for c in 0..4 {
        assert_eq!(&p[4 + 16 * c..12 + 16 * c], &r0[2 + 8 * c..10 + 8 * c]);
        assert_eq!(&p[12 + 16 * c..20 + 16 * c], &r1[2 + 8 * c..10 + 8 * c]);
    }
}

fn site_with(rows: u64, cols: u64, batch: u64, weights: Option<Vec<u8>>) -> Site {
    let site = Site::new(Family(FAMILY), geometry(rows, cols, batch));
    match weights {
        Some(w) => site.with_operand("weights", Arc::from(w)),
        None => site,
    }
}

#[test]
fn offer_packs_the_site_operand_and_refuses_a_missing_or_short_one() {
    let host = Host::detect();
    let w = random_weights(5, 2, 3, true);
    let offer = Q8Rows2Arm
        .offer(&site_with(5, 64, 3, Some(w.bytes().to_vec())), &host)
        .expect("offer");
    assert_eq!(offer.contract.args, ARGS_NAME);
    assert_eq!(offer.contract.arithmetic.accumulator_lanes, 4);
    assert_eq!(offer.packed.len(), 1);
    assert_eq!(offer.packed[0].layout, LAYOUT);
    assert_eq!(&*offer.packed[0].bytes, pack(&w).as_slice());
    assert_eq!(offer.views.as_ref().map(|v| v.granule), Some(2));
    let missing = Q8Rows2Arm.offer(&site_with(5, 64, 1, None), &host);
    assert_eq!(missing.unwrap_err().name(), "bad-operand");
    let short = Q8Rows2Arm.offer(&site_with(5, 64, 1, Some(vec![0; 339])), &host);
    assert_eq!(short.unwrap_err().name(), "bad-operand");
    let odd_cols = Q8Rows2Arm.offer(&site_with(5, 63, 1, Some(vec![0; 340])), &host);
    assert_eq!(odd_cols.unwrap_err().name(), "unsupported-geometry");
    let mut foreign = site_with(5, 64, 1, Some(w.bytes().to_vec()));
    foreign.family = Family("elementwise.exp");
    assert_eq!(
        Q8Rows2Arm.offer(&foreign, &host).unwrap_err().name(),
        "unsupported-geometry"
    );
}

#[test]
fn packed_operands_are_checked_by_layout_and_length() {
    let w = Q8Rows2Weights::from_weights(&random_weights(3, 2, 1, false));
    let mut op = w.operand();
    assert!(Q8Rows2Weights::from_operand(&op, 3, 64).is_ok());
    assert_eq!(
        Q8Rows2Weights::from_operand(&op, 5, 64).unwrap_err().name(),
        "bad-operand"
    );
    op.layout = "q8_0.rows4";
    assert_eq!(
        Q8Rows2Weights::from_operand(&op, 3, 64).unwrap_err().name(),
        "unknown-layout"
    );
    let mut offer = offer_for(&w, 1).expect("offer");
    offer.packed.clear();
    assert_eq!(
        Q8Rows2Arm
            .build(&offer, weft_kernel::Isa::X86_64)
            .unwrap_err()
            .name(),
        "bad-operand"
    );
}

#[test]
fn args_refuse_mismatched_buffers() {
    let w = Q8Rows2Weights::from_weights(&random_weights(3, 2, 9, false));
    let x = random_activations(2, 2, 10);
    let mut y = vec![0.0f32; 6];
    assert!(Q8Rows2Args::new(&w, &x, &mut y, 1..3).is_ok());
    let names = [
        Q8Rows2Args::new(&w, &random_activations(3, 2, 1), &mut y, 0..3),
        Q8Rows2Args::new(&w, &x, &mut y[..5], 0..3),
        Q8Rows2Args::new(&w, &x, &mut y, 2..4),
    ]
    .map(|r| r.unwrap_err().name());
    assert_eq!(names, ["bad-operand"; 3]);
}

#[test]
fn reference_matches_the_f64_dot_within_its_rounding_bound() {
    use super::super::reference::{abs_dot_row_f64, dot_row_f64};
    for (blocks, seed) in [(1usize, 1u64), (3, 2), (448, 3), (17, 4)] {
        let w = random_weights(2, blocks, seed, false);
        let x = random_activations(blocks, 1, seed + 100);
        let row = blocks * BLOCK_BYTES;
        for r in 0..2 {
            let wr = &w.bytes()[r * row..(r + 1) * row];
            let got = f64::from(reference::dot_row(wr, x.bytes()));
            let exact = dot_row_f64(wr, x.bytes());
            let steps = (blocks / 4 + 4) as f64;
            let bound = abs_dot_row_f64(wr, x.bytes()) * steps * 2f64.powi(-23);
            assert!((got - exact).abs() <= bound, "{got} vs {exact}");
        }
    }
}

/// The rows2 arm on this host against the scalar reference, on the
/// validation cases (all shapes, batches, views, special scales).
#[test]
fn arm_matches_reference_bit_for_bit() {
    let k = Q8Rows2Kernel::of_arm().expect("arm");
    for case in rows2_cases(7) {
        let (rows, batch) = (case.w.rows(), case.x.batch());
        let canonical = unpacked(&case.w);
        let mut want = vec![-9.0f32; rows * batch];
        matvec(&canonical, &case.x, &mut want, case.rows.clone());
        let mut got = vec![-9.0f32; rows * batch];
        k.run(&case.w, &case.x, &mut got, case.rows.clone())
            .expect("run");
        if let Some(at) = same_bits(&want, &got) {
            panic!(
                "rows {rows} blocks {} batch {batch} range {:?}: y[{at}] arm {:#010x} reference {:#010x}",
                case.w.blocks(),
                case.rows,
                got[at].to_bits(),
                want[at].to_bits()
            );
        }
    }
}

fn unpacked(w: &Q8Rows2Weights) -> Q8Weights {
    let bytes = (0..w.rows())
        .flat_map(|r| unpack_row(w.bytes(), w.blocks(), r))
        .collect();
    Q8Weights::from_bytes(bytes, w.rows(), 32 * w.blocks()).expect("unpack")
}

#[test]
fn arm_row_splits_are_bit_identical_and_touch_only_their_rows() {
    let k = Q8Rows2Kernel::of_arm().expect("arm");
    let (rows, blocks, batch) = (37usize, 9usize, 3usize);
    let w = Q8Rows2Weights::from_weights(&random_weights(rows, blocks, 5, true));
    let x = random_activations(blocks, batch, 6);
    let mut whole = vec![0.0f32; rows * batch];
    k.run(&w, &x, &mut whole, 0..rows).expect("run");
    let views = offer_for(&w, batch as u64)
        .expect("offer")
        .views
        .expect("views");
    for parts in [2u64, 3, 5, 8] {
        let mut split = vec![f32::NAN; rows * batch];
        k.run_split(&w, &x, &mut split, &views, parts).expect("run");
        assert_eq!(same_bits(&whole, &split), None, "{parts} parts");
    }
    // Granule 1 (odd cuts, which the offer never makes but the contract
    // allows): each call writes exactly its rows.
    let odd = MemberViews {
        granule: 1,
        ..views.clone()
    };
    for parts in [3u64, 7] {
        let mut split = vec![f32::from_bits(0xdead_beef); rows * batch];
        for r in odd.split(parts) {
            let r = r.start as usize..r.end as usize;
            let before = split.clone();
            k.run(&w, &x, &mut split, r.clone()).expect("run");
            for n in 0..batch {
                for row in (0..rows).filter(|row| !r.contains(row)) {
                    assert_eq!(
                        split[n * rows + row].to_bits(),
                        before[n * rows + row].to_bits()
                    );
                }
            }
        }
        assert_eq!(same_bits(&whole, &split), None, "odd {parts} parts");
    }
}

/// Every binary16 weight scale through the arm: `y` is the widened scale
/// (NaN for inf, as `0 · inf` lanes make it), like the f32x4 arm's test.
#[test]
fn arm_widens_every_fp16_scale_exactly() {
    let mut bytes = Vec::with_capacity(65536 * 34);
    for h in 0..=u16::MAX {
        bytes.extend_from_slice(&h.to_le_bytes());
        bytes.push(1);
        bytes.extend_from_slice(&[0; 31]);
    }
    let w = Q8Weights::from_bytes(bytes, 65536, 32).expect("weights");
    let w = Q8Rows2Weights::from_weights(&w);
    let mut xb = vec![0u8; 34];
    xb[..2].copy_from_slice(&0x3c00u16.to_le_bytes());
    xb[2] = 1;
    let x = super::super::Q8Activations::from_bytes(xb, 32, 1).expect("x");
    let mut got = vec![0.0f32; 65536];
    Q8Rows2Kernel::of_arm()
        .expect("arm")
        .run(&w, &x, &mut got, 0..65536)
        .expect("run");
    for (h, y) in got.iter().enumerate() {
        let d = super::super::block::f16_to_f32(h as u16);
        // Here the block's whole dot is one lane: 1 · d, no 0 · inf lanes,
        // so inf stays inf; -0 becomes +0 through the +0 accumulators.
        let want = d + 0.0;
        assert!(
            y.to_bits() == want.to_bits() || (y.is_nan() && want.is_nan()),
            "scale {h:#06x}: arm {:#010x}, want {:#010x}",
            y.to_bits(),
            want.to_bits()
        );
    }
}

#[test]
fn special_scale_cases_hold_every_special_value() {
    use super::super::validation::SPECIAL_SCALES;
    let w = special_weights(5, 7, 1);
    let x = special_activations(7, 3, 2, 0);
    for bytes in [w.bytes(), x.bytes()] {
        let seen: Vec<u16> = bytes
            .chunks_exact(34)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        for s in SPECIAL_SCALES {
            assert!(seen.contains(&s), "{s:#06x} missing");
        }
    }
    assert!(w.bytes().chunks_exact(34).all(|b| b[5] == 0x80));
}

#[test]
fn shapes_cover_the_briefs_rows_and_blocks() {
    let s = shapes();
    for rows in [1usize, 2, 3, 5, 4096] {
        for blocks in [1usize, 2, 3] {
            assert!(s.contains(&(rows, blocks)));
        }
    }
    assert!(s.contains(&(5, 448)));
}

#[test]
fn each_arm_races_on_its_own_bench_and_a_foreign_offer_is_refused() {
    use super::super::validation::Q8Bench;
    use weft_kernel::Workbench;
    let host = Host::detect();
    let w = random_weights(5, 3, 1, true);
    let site = site_with(5, 96, 2, Some(w.bytes().to_vec()));
    for a in &super::super::entry().arms {
        let offer = a.arm.offer(&site, &host).expect("offer");
        let code = a.arm.build(&offer, host.isa).expect("build");
        let placed = code.place().expect("place");
        let workbench = a.bench.as_ref().expect("every q8_0 arm can be raced");
        let mut bench = workbench.prepare(&offer, 3).expect("prepare");
        // SAFETY: `code` is the body `a.arm` built for `offer`, which the
        // bench was prepared for.
        unsafe { bench.run(&placed) }.expect("run");
    }
    let mut rows2 = Q8Rows2Arm.offer(&site, &host).expect("offer");
    // The f32x4 bench would call a rows2 body with unpacked weights.
    assert_eq!(
        Q8Bench.prepare(&rows2, 1).err().map(|e| e.name()),
        Some("bad-operand")
    );
    rows2.contract.args = "Q8Other".into();
    assert_eq!(
        Rows2Bench.prepare(&rows2, 1).err().map(|e| e.name()),
        Some("bad-operand")
    );
}
