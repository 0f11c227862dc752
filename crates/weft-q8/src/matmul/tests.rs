use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use weft_kernel::{Arm, Family, FmaUse, Host, MemberViews, NanRule, ReductionOrder, Refusal, Site};
use weft_managed::arm_build::host_isa;
use weft_validate::CANARY_F32;

use super::super::block::{f16_to_f32, BLOCK_BYTES, BLOCK_LEN};
use super::super::validation::{random_weights, Rng};
use super::super::Q8Weights;
use super::arm::{check_offer, offer_at, offer_for, Q8MatmulArm, Q8MatmulKernel};
use super::validation::{batch_activations, matmul_cases, MatmulBench};
use super::*;

/// The first output whose bits differ (NaNs compare by class).
fn same_bits(a: &[f32], b: &[f32]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| !(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())))
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// The refusal's name and, for `bad-operand`, the operand it names.
fn named(r: Refusal) -> (&'static str, String) {
    let operand = match &r {
        Refusal::BadOperand { operand, .. } => operand.clone(),
        _ => String::new(),
    };
    (r.name(), operand)
}

fn site_with(rows: u64, cols: u64, batch: u64, weights: Option<Vec<u8>>) -> Site {
    let site = Site::new(Family(FAMILY), geometry(rows, cols, batch));
    match weights {
        Some(w) => site.with_operand("weights", Arc::from(w)),
        None => site,
    }
}

/// Canonical W back from its panels: each f32 scale mapped to a binary16
/// that widens to the same bits, the quants as they are. Checked by
/// re-packing to the very bytes it came from.
fn canonical(w: &Q8PanelWeights, widened: &HashMap<u32, u16>) -> Q8Weights {
    let mut bytes = Vec::with_capacity(w.rows() * w.blocks() * BLOCK_BYTES);
    for r in 0..w.rows() {
        for (d, q) in unpack_row(w.bytes(), w.blocks(), r) {
            let h = widened[&d.to_bits()];
            bytes.extend_from_slice(&h.to_le_bytes());
            bytes.extend(q.iter().map(|v| *v as u8));
        }
    }
    let c = Q8Weights::from_bytes(bytes, w.rows(), BLOCK_LEN * w.blocks()).expect("canonical");
    assert_eq!(pack(&c), w.bytes(), "canonical W must re-pack to the case");
    c
}

/// Every binary16 by its exact f32 widening (the first of any that widen
/// alike, should a NaN be quietened).
fn widenings() -> HashMap<u32, u16> {
    let mut m = HashMap::with_capacity(1 << 16);
    for h in 0..=u16::MAX {
        m.entry(f16_to_f32(h).to_bits()).or_insert(h);
    }
    m
}

/// Shapes of the packing laws: the ragged counts around a panel, then
/// random ones.
fn pack_shapes() -> Vec<(usize, usize, u64)> {
    let mut v: Vec<(usize, usize, u64)> = [1usize, 15, 16, 17, 33, 47]
        .iter()
        .zip([1usize, 3, 2, 5, 7, 4])
        .map(|(&r, b)| (r, b, r as u64 * 31 + b as u64))
        .collect();
    let mut rng = Rng::new(0x9a11e);
    for i in 0..12 {
        let rows = 1 + (rng.next_u64() % 70) as usize;
        let blocks = 1 + (rng.next_u64() % 9) as usize;
        v.push((rows, blocks, 500 + i));
    }
    v
}

#[test]
fn unpack_row_of_pack_gives_back_every_rows_widened_scales_and_signed_quants() {
    for (rows, blocks, seed) in pack_shapes() {
        // Specials: subnormal, ±0, inf and NaN scales; quants of -128.
        let w = random_weights(rows, blocks, seed, true);
        let packed = pack(&w);
        assert_eq!(packed.len(), panels(rows) * blocks * PANEL_BLOCK_BYTES);
        let row_bytes = blocks * BLOCK_BYTES;
        for r in 0..rows {
            let got = unpack_row(&packed, blocks, r);
            assert_eq!(got.len(), blocks);
            let src = &w.bytes()[r * row_bytes..(r + 1) * row_bytes];
            for (b, ((d, q), blk)) in got.iter().zip(src.chunks_exact(BLOCK_BYTES)).enumerate() {
                let want = f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
                assert_eq!(
                    d.to_bits(),
                    want.to_bits(),
                    "rows {rows} blocks {blocks}: scale of row {r} block {b}"
                );
                let want_q: Vec<i8> = blk[2..].iter().map(|v| *v as i8).collect();
                assert_eq!(
                    &q[..],
                    &want_q[..],
                    "rows {rows}: quants of row {r} block {b}"
                );
            }
        }
        // Padding rows read back as w = 0 with a +0.0 scale, and their
        // bytes are scale 00 00 00 00 and quants 0x80.
        let last = (panels(rows) - 1) * blocks * PANEL_BLOCK_BYTES;
        for r in rows..panels(rows) * PANEL_ROWS {
            for (d, q) in unpack_row(&packed, blocks, r) {
                assert_eq!(d.to_bits(), 0, "rows {rows}: padding row {r} scale");
                assert_eq!(q, [0i8; BLOCK_LEN], "rows {rows}: padding row {r} quants");
            }
            let j = r % PANEL_ROWS;
            for blk in packed[last..].chunks_exact(PANEL_BLOCK_BYTES) {
                assert_eq!(
                    blk[4 * j..4 * j + 4],
                    [0u8; 4],
                    "padding row {r} scale bytes"
                );
                for g in 0..GROUPS {
                    let at = QUANTS_AT + GROUP_BYTES * g + 4 * j;
                    assert_eq!(blk[at..at + 4], [0x80u8; 4], "padding row {r} group {g}");
                }
            }
        }
        // The wrapper holds exactly these bytes.
        let p = Q8PanelWeights::from_weights(&w);
        assert_eq!(
            (p.bytes(), p.rows(), p.blocks()),
            (&packed[..], rows, blocks)
        );
        let again = Q8PanelWeights::from_packed(packed.into(), rows, BLOCK_LEN * blocks);
        assert_eq!(again.expect("from_packed"), p);
    }
}

/// The engine packs into an arena it places itself: whatever the buffer
/// held before, `pack_into` leaves exactly `pack`'s bytes (padding rows'
/// scales included), and `canonical_blocks` refuses what
/// `from_canonical` refuses.
#[test]
fn pack_into_a_dirty_buffer_gives_packs_bytes_and_checks_like_from_canonical() {
    for (rows, blocks, seed) in pack_shapes() {
        let w = random_weights(rows, blocks, seed, true);
        let mut out = vec![0xa5u8; packed_len(rows, blocks)];
        assert_eq!(
            canonical_blocks(w.bytes(), rows, BLOCK_LEN * blocks).map_err(named),
            Ok(blocks)
        );
        pack_into(w.bytes(), rows, blocks, &mut out);
        assert_eq!(out, pack(&w), "rows {rows} blocks {blocks}");
    }
    let w = random_weights(3, 2, 7, false);
    for (bytes, rows, cols) in [
        (&w.bytes()[1..], 3, 64),
        (w.bytes(), 3, 65),
        (w.bytes(), 0, 64),
    ] {
        let got = canonical_blocks(bytes, rows, cols).map_err(named);
        let want = Q8PanelWeights::from_canonical(bytes, rows, cols).map_err(named);
        assert!(got.is_err(), "{rows}×{cols} from {} bytes", bytes.len());
        assert_eq!(got.err(), want.err());
    }
}

/// The layout table, byte by byte, without going through `unpack_row`.
#[test]
fn pack_places_f32_scales_and_biased_quants_at_the_documented_offsets() {
    let (rows, blocks) = (21usize, 3usize);
    let w = random_weights(rows, blocks, 42, true);
    let packed = pack(&w);
    for r in 0..rows {
        let (p, j) = (r / 16, r % 16);
        for b in 0..blocks {
            let src = &w.bytes()[(r * blocks + b) * 34..][..34];
            let dst = &packed[(p * blocks + b) * 576..][..576];
            let d = f16_to_f32(u16::from_le_bytes([src[0], src[1]]));
            assert_eq!(dst[4 * j..4 * j + 4], d.to_bits().to_le_bytes());
            for g in 0..8 {
                for k in 0..4 {
                    let stored = dst[64 + 64 * g + 4 * j + k];
                    let wq = src[2 + 4 * g + k] as i8;
                    assert_eq!(
                        i32::from(stored),
                        i32::from(wq) + 128,
                        "row {r} b {b} g {g}"
                    );
                }
            }
        }
    }
}

/// The arm on this host against `reference::matmul`, bit for bit (NaN by
/// class), on every validation case, the member views included; y starts
/// as a canary, which rows outside the case's range must keep.
#[test]
fn arm_matches_reference_on_every_validation_case_and_leaves_other_rows_alone() {
    let k = Q8MatmulKernel::of_arm().expect("arm");
    let widened = widenings();
    let canary = f32::from_bits(CANARY_F32);
    for seed in [7u64, 0x5eed_0123] {
        let cases = matmul_cases(None, seed);
        // The cases hold views inside W (an empty one too) and batch 512.
        assert!(cases.iter().any(|c| c.rows.is_empty()));
        assert!(cases
            .iter()
            .any(|c| c.rows.start % 16 != 0 && c.rows.end < c.w.rows()));
        assert!(cases.iter().any(|c| c.x.batch() == MAX_BATCH));
        for case in &cases {
            let (rows, blocks, batch) = (case.w.rows(), case.w.blocks(), case.x.batch());
            let what = format!(
                "seed {seed:#x} rows {rows} blocks {blocks} batch {batch} range {:?}",
                case.rows
            );
            let mut want = vec![canary; rows * batch];
            reference::matmul(
                &canonical(&case.w, &widened),
                &case.x,
                &mut want,
                case.rows.clone(),
            );
            let mut got = vec![canary; rows * batch];
            k.run(&case.w, &case.x, &mut got, case.rows.clone())
                .expect("run");
            if let Some(at) = same_bits(&want, &got) {
                panic!(
                    "{what}: y[{at}] arm {:#010x} reference {:#010x}",
                    got[at].to_bits(),
                    want[at].to_bits()
                );
            }
            for n in 0..batch {
                for r in (0..rows).filter(|r| !case.rows.contains(r)) {
                    assert_eq!(
                        got[n * rows + r].to_bits(),
                        CANARY_F32,
                        "{what}: wrote y[{n}][{r}]"
                    );
                }
            }
        }
    }
}

#[test]
fn run_split_by_the_offers_views_of_16_rows_gives_the_bits_of_one_call() {
    let k = Q8MatmulKernel::of_arm().expect("arm");
    for (rows, blocks, batch) in [
        (100usize, 5usize, 3usize),
        (50, 6, 4),
        (33, 7, 9),
        (16, 2, 2),
        (1, 3, 5),
    ] {
        let w = Q8PanelWeights::from_weights(&random_weights(rows, blocks, rows as u64, true));
        let x = batch_activations(blocks, batch, 3 + rows as u64);
        let views = offer_for(&w, batch as u64)
            .expect("offer")
            .views
            .expect("views");
        assert_eq!(
            views,
            MemberViews {
                axis: "rows".to_owned(),
                extent: rows as u64,
                granule: 16,
            }
        );
        let mut whole = vec![f32::from_bits(CANARY_F32); rows * batch];
        k.run(&w, &x, &mut whole, 0..rows).expect("run");
        for parts in [1u64, 2, 3, 7] {
            let ranges = views.split(parts);
            // Contiguous, covering 0..rows, cut only at panel edges.
            assert_eq!(ranges.first().map(|r| r.start), Some(0));
            assert_eq!(ranges.last().map(|r| r.end), Some(rows as u64));
            for pair in ranges.windows(2) {
                assert_eq!(pair[0].end, pair[1].start);
                assert_eq!(pair[0].end % 16, 0, "rows {rows} parts {parts}: {ranges:?}");
            }
            // Another canary than `whole`'s: equal bits mean every output
            // was written by both.
            let mut split = vec![-1.5e30f32; rows * batch];
            k.run_split(&w, &x, &mut split, &views, parts)
                .expect("run_split");
            assert_eq!(bits(&whole), bits(&split), "rows {rows} parts {parts}");
        }
    }
}

/// `q8_0.matmul` fuses: a case where `fma(q, s, acc)` and `q * s + acc`
/// differ by one in the last bit, and the arm gives the fused bits.
#[test]
fn arm_fuses_like_the_reference_where_mul_then_add_differs_in_the_last_bit() {
    // Block 0: dw = dx = 1.0, q0 = -127 · 100 → acc = -12700.
    // Block 1: dw = dx = 1 + 2^-10, q1 = 127 · 127 = 16129, so
    //          s1 = 1 + 2^-9 + 2^-20 (exact) and q1 · s1 needs 35 bits.
    let (one, one_ulp) = (0x3c00u16, 0x3c01u16);
    let (q0, q1) = (-127i32 * 100, 127i32 * 127);
    let s1 = f16_to_f32(one_ulp) * f16_to_f32(one_ulp);
    assert_eq!(s1, 1.0 + 2f32.powi(-9) + 2f32.powi(-20));
    let acc0 = (q0 as f32).mul_add(1.0, 0.0);
    let fused = (q1 as f32).mul_add(s1, acc0);
    let unfused = (q1 as f32) * s1 + acc0;
    assert_eq!(
        fused.to_bits().abs_diff(unfused.to_bits()),
        1,
        "{fused} {unfused}"
    );

    // 17 rows (a ragged second panel), each with its one non-zero quant
    // of a block at its own position, so every lane and group is used.
    let (rows, blocks) = (17usize, 2usize);
    let mut wb = Vec::new();
    for r in 0..rows {
        for (b, (h, q)) in [(one, -127i8), (one_ulp, 127)].into_iter().enumerate() {
            let mut quants = [0u8; 32];
            quants[(5 * r + 11 * b) % 32] = q as u8;
            wb.extend_from_slice(&h.to_le_bytes());
            wb.extend_from_slice(&quants);
        }
    }
    let w = Q8Weights::from_bytes(wb, rows, 32 * blocks).expect("w");
    // Vector 0: x = 100 in block 0, 127 in block 1; vector 1 its negation
    // (the result negates exactly).
    let mut xb = Vec::new();
    for sign in [1i8, -1] {
        for (h, v) in [(one, 100i8), (one_ulp, 127)] {
            xb.extend_from_slice(&h.to_le_bytes());
            xb.extend_from_slice(&[(sign * v) as u8; 32]);
        }
    }
    let x = activations(xb, 32 * blocks, 2).expect("x");
    let expected: Vec<u32> = [fused, -fused]
        .iter()
        .flat_map(|v| std::iter::repeat_n(v.to_bits(), rows))
        .collect();
    let mut want = vec![0.0f32; rows * 2];
    reference::matmul(&w, &x, &mut want, 0..rows);
    assert_eq!(bits(&want), expected, "the reference fuses");
    let mut got = vec![0.0f32; rows * 2];
    Q8MatmulKernel::of_arm()
        .expect("arm")
        .run(&Q8PanelWeights::from_weights(&w), &x, &mut got, 0..rows)
        .expect("run");
    assert_eq!(bits(&got), expected, "arm (unfused would be {unfused})");
}

#[test]
fn geometry_refuses_batch_0_and_513_cols_off_32_and_rows_0() {
    assert!(check_geometry(17, 64, 1).is_ok());
    assert_eq!(check_geometry(17, 64, 512).expect("512"), (17, 2, 512));
    for (rows, cols, batch) in [
        (17u64, 64u64, 0u64),
        (17, 64, 513),
        (17, 48, 1),
        (17, 0, 1),
        (0, 64, 1),
    ] {
        assert_eq!(
            check_geometry(rows, cols, batch).map(|_| ()).map_err(named),
            Err(("unsupported-geometry", String::new())),
            "{rows}×{cols} batch {batch}"
        );
    }
    // The same through every door: activations, panel weights, offers.
    let x = batch_activations(1, 1, 1);
    assert_eq!(
        activations(vec![], 32, 0).unwrap_err().name(),
        "unsupported-geometry"
    );
    let x513 = x.bytes().repeat(513);
    assert_eq!(
        activations(x513, 32, 513).unwrap_err().name(),
        "unsupported-geometry"
    );
    assert!(activations(x.bytes().repeat(512), 32, 512).is_ok());
    assert_eq!(
        Q8PanelWeights::from_packed(vec![0x80; 576].into(), 1, 48)
            .unwrap_err()
            .name(),
        "unsupported-geometry"
    );
    assert_eq!(
        Q8PanelWeights::from_packed(Arc::from(Vec::new()), 0, 32)
            .unwrap_err()
            .name(),
        "unsupported-geometry"
    );
    let w = Q8PanelWeights::from_weights(&random_weights(5, 2, 1, false));
    for batch in [0u64, 513] {
        assert_eq!(
            offer_for(&w, batch).unwrap_err().name(),
            "unsupported-geometry"
        );
    }
    let host = Host::detect();
    let bytes = random_weights(5, 2, 1, false).bytes().to_vec();
    for (cols, batch) in [(64u64, 0u64), (64, 513), (63, 1)] {
        let site = site_with(5, cols, batch, Some(bytes.clone()));
        assert_eq!(
            Q8MatmulArm.offer(&site, &host).unwrap_err().name(),
            "unsupported-geometry",
            "cols {cols} batch {batch}"
        );
    }
}

#[test]
fn x_holding_a_minus_128_quant_is_a_bad_operand() {
    let (rows, blocks, batch) = (3usize, 2usize, 2usize);
    let w = Q8PanelWeights::from_weights(&random_weights(rows, blocks, 2, false));
    let good = batch_activations(blocks, batch, 3).bytes().to_vec();
    let mut y = vec![0.0f32; rows * batch];
    let dims = (rows, 32 * blocks, batch);
    assert!(Q8MatmulArgs::from_slices(w.bytes(), &good, &mut y, dims, 0..rows).is_ok());
    // The last quant of the last block: every block is looked at.
    let mut bad_x = good.clone();
    *bad_x.last_mut().expect("bytes") = 0x80;
    assert_eq!(
        activations(bad_x.clone(), 32 * blocks, batch)
            .map(|_| ())
            .map_err(named),
        Err(("bad-operand", "x".to_owned()))
    );
    assert_eq!(
        Q8MatmulArgs::from_slices(w.bytes(), &bad_x, &mut y, dims, 0..rows)
            .map(|_| ())
            .map_err(named),
        Err(("bad-operand", "x".to_owned()))
    );
}

#[test]
fn args_refuse_wrong_lengths_of_weights_x_y_and_ranges_outside_w() {
    let (rows, blocks, batch) = (19usize, 3usize, 2usize);
    let w = Q8PanelWeights::from_weights(&random_weights(rows, blocks, 4, true));
    let x = batch_activations(blocks, batch, 5);
    let dims = (rows, 32 * blocks, batch);
    let mut y = vec![0.0f32; rows * batch];
    assert!(Q8MatmulArgs::new(&w, &x, &mut y, 0..rows).is_ok());
    assert!(Q8MatmulArgs::new(&w, &x, &mut y, rows..rows).is_ok());
    let (wb, xb) = (w.bytes(), x.bytes());
    let mut long_w = wb.to_vec();
    long_w.push(0x80);
    let long_x = [xb, &xb[..BLOCK_BYTES]].concat();
    let mut long_y = vec![0.0f32; rows * batch + 1];
    let cases: Vec<(&str, Result<Q8MatmulArgs, Refusal>, &str)> = vec![
        (
            "short weights",
            Q8MatmulArgs::from_slices(&wb[..wb.len() - 1], xb, &mut y, dims, 0..rows),
            "weights",
        ),
        (
            "long weights",
            Q8MatmulArgs::from_slices(&long_w, xb, &mut y, dims, 0..rows),
            "weights",
        ),
        // Canonical (unpacked) bytes are not the packed operand.
        (
            "canonical weights",
            Q8MatmulArgs::from_slices(
                random_weights(rows, blocks, 4, true).bytes(),
                xb,
                &mut y,
                dims,
                0..rows,
            ),
            "weights",
        ),
        (
            "short x",
            Q8MatmulArgs::from_slices(wb, &xb[..xb.len() - BLOCK_BYTES], &mut y, dims, 0..rows),
            "x",
        ),
        (
            "long x",
            Q8MatmulArgs::from_slices(wb, &long_x, &mut y, dims, 0..rows),
            "x",
        ),
        (
            "x of other blocks",
            Q8MatmulArgs::new(
                &w,
                &batch_activations(blocks + 1, batch, 6),
                &mut y,
                0..rows,
            ),
            "x",
        ),
        (
            "short y",
            Q8MatmulArgs::new(&w, &x, &mut y[..rows * batch - 1], 0..rows),
            "y",
        ),
        (
            "long y",
            Q8MatmulArgs::new(&w, &x, &mut long_y, 0..rows),
            "y",
        ),
        (
            "range past W",
            Q8MatmulArgs::new(&w, &x, &mut y, 0..rows + 1),
            "rows",
        ),
        (
            "range after W",
            Q8MatmulArgs::new(&w, &x, &mut y, rows + 1..rows + 3),
            "rows",
        ),
    ];
    for (what, got, operand) in cases {
        assert_eq!(
            got.map(|_| ()).map_err(named),
            Err(("bad-operand", operand.to_owned())),
            "{what}"
        );
    }
    let (start, end) = (5usize, 3usize);
    let reversed: Range<usize> = start..end;
    assert_eq!(
        Q8MatmulArgs::new(&w, &x, &mut y, reversed)
            .map(|_| ())
            .map_err(named),
        Err(("bad-operand", "rows".to_owned()))
    );
    // A refused run writes nothing; so does a split whose views leave W.
    let k = Q8MatmulKernel::of_arm().expect("arm");
    let mut y = vec![f32::from_bits(CANARY_F32); rows * batch];
    assert_eq!(
        k.run(&w, &x, &mut y, 2..rows + 1).map_err(named),
        Err(("bad-operand", "rows".to_owned()))
    );
    let views = MemberViews {
        axis: "rows".to_owned(),
        extent: rows as u64 + 16,
        granule: 16,
    };
    assert_eq!(
        k.run_split(&w, &x, &mut y, &views, 1).map_err(named),
        Err(("bad-operand", "views".to_owned()))
    );
    assert!(y.iter().all(|v| v.to_bits() == CANARY_F32));
    // Packed weights of the wrong length for their geometry.
    assert_eq!(
        Q8PanelWeights::from_packed(wb[..wb.len() - 576].into(), rows, 32 * blocks)
            .map(|_| ())
            .map_err(named),
        Err(("bad-operand", "weights".to_owned()))
    );
}

#[test]
fn a_packed_operand_of_another_layout_is_unknown_layout() {
    let w = Q8PanelWeights::from_weights(&random_weights(5, 2, 7, false));
    let mut op = w.operand();
    assert_eq!((op.name, op.layout), ("weights", "q8_0.panel16"));
    assert!(Q8PanelWeights::from_operand(&op, 5, 64).is_ok());
    assert_eq!(
        Q8PanelWeights::from_operand(&op, 17, 64)
            .unwrap_err()
            .name(),
        "bad-operand"
    );
    op.layout = "q8_0.rows2-interleaved";
    let refused = Q8PanelWeights::from_operand(&op, 5, 64).unwrap_err();
    assert!(
        matches!(&refused, Refusal::UnknownLayout { layout } if layout == "q8_0.rows2-interleaved")
    );
    assert_eq!(refused.name(), "unknown-layout");
    // The offer's own operand relabelled: the arm, its offer check and
    // the bench all refuse it by name.
    let mut offer = offer_for(&w, 2).expect("offer");
    assert!(check_offer(&offer, "test").is_ok());
    offer.packed[0].layout = "q8_0.rows2-interleaved";
    assert_eq!(
        check_offer(&offer, "test").unwrap_err().name(),
        "unknown-layout"
    );
    assert_eq!(
        Q8MatmulArm.build(&offer, host_isa()).unwrap_err().name(),
        "unknown-layout"
    );
    use weft_kernel::Workbench;
    assert_eq!(
        MatmulBench.prepare(&offer, 1).err().map(|e| e.name()),
        Some("unknown-layout")
    );
}

/// Site weights of the wrong length are `bad-operand`; a site without
/// them (weights passed at call time, one site for every layer) gets the
/// offer with no packed operand, which builds.
#[test]
fn site_weights_of_the_wrong_length_are_bad_operand_and_a_site_without_them_is_offered_unpacked() {
    let host = Host::detect();
    let w = random_weights(5, 2, 8, true);
    let with = Q8MatmulArm
        .offer(&site_with(5, 64, 3, Some(w.bytes().to_vec())), &host)
        .expect("offer");
    assert_eq!(with.packed.len(), 1);
    let short = w.bytes()[..w.bytes().len() - BLOCK_BYTES].to_vec();
    let long = [w.bytes(), &w.bytes()[..BLOCK_BYTES]].concat();
    for bytes in [short.clone(), long] {
        let len = bytes.len();
        assert_eq!(
            Q8MatmulArm
                .offer(&site_with(5, 64, 3, Some(bytes)), &host)
                .map(|_| ())
                .map_err(named),
            Err(("bad-operand", "weights".to_owned())),
            "{len} bytes"
        );
    }
    assert_eq!(
        Q8PanelWeights::from_canonical(&short, 5, 64)
            .map(|_| ())
            .map_err(named),
        Err(("bad-operand", "weights".to_owned()))
    );
    assert_eq!(
        Q8PanelWeights::from_canonical(w.bytes(), 5, 64).expect("canonical"),
        Q8PanelWeights::from_weights(&w)
    );
    // Without weights: the same contract and views, nothing packed.
    let bare = Q8MatmulArm
        .offer(&site_with(5, 64, 3, None), &host)
        .expect("offer without weights");
    assert!(bare.packed.is_empty());
    let at = offer_at(5, 64, 3).expect("offer_at");
    assert_eq!(
        (&bare.contract, &bare.views, &bare.loops),
        (&at.contract, &at.views, &at.loops)
    );
    assert_eq!((&bare.contract, &bare.views), (&with.contract, &with.views));
    assert!(Q8MatmulArm.build(&bare, host_isa()).is_ok());
    // Another family's site is not this arm's.
    let mut foreign = site_with(5, 64, 3, Some(w.bytes().to_vec()));
    foreign.family = Family("q8_0.matvec");
    assert_eq!(
        Q8MatmulArm.offer(&foreign, &host).unwrap_err().name(),
        "unsupported-geometry"
    );
}

/// The offer of a site: its contract (one lane, sequential, FMA as
/// specified), W packed, views of 16 rows; the body built from it runs
/// like the reference.
#[test]
fn the_arms_offer_packs_the_site_weights_and_its_body_matches_the_reference() {
    let host = Host::detect();
    let (rows, blocks, batch) = (37usize, 4usize, 3usize);
    let w = random_weights(rows, blocks, 9, true);
    let site = site_with(rows as u64, 128, batch as u64, Some(w.bytes().to_vec()));
    let offer = Q8MatmulArm.offer(&site, &host).expect("offer");
    assert_eq!(offer.contract, contract(rows as u64, 128, batch as u64));
    assert_eq!(offer.contract.family, "q8_0.matmul");
    assert_eq!(offer.contract.args, "Q8MatmulArgs");
    let a = &offer.contract.arithmetic;
    assert_eq!(a.accumulator_lanes, 1);
    assert_eq!(a.reduction, ReductionOrder::Sequential);
    assert_eq!(a.fma, FmaUse::AsSpecified);
    assert_eq!(a.nan, NanRule::ByClass);
    assert_eq!(offer.packed.len(), 1);
    assert_eq!(offer.packed[0].layout, LAYOUT);
    assert_eq!(&*offer.packed[0].bytes, pack(&w).as_slice());
    assert_eq!(
        offer.views.as_ref().map(|v| (v.extent, v.granule)),
        Some((37, 16))
    );
    let loops: Vec<(&str, u64)> = offer
        .loops
        .iter()
        .map(|l| (l.name.as_str(), l.trips))
        .collect();
    assert_eq!(loops, [("panels", 3), ("batch", 3), ("blocks", 4)]);

    let code = Q8MatmulArm.build(&offer, host_isa()).expect("build");
    // SAFETY: `code` is the panel arm's body, a q8_0.matmul leaf body.
    let k = unsafe { Q8MatmulKernel::from_native(&code) }.expect("place");
    let packed = Q8PanelWeights::from_operand(&offer.packed[0], rows, 128).expect("operand");
    let x = batch_activations(blocks, batch, 10);
    let mut got = vec![0.0f32; rows * batch];
    k.run(&packed, &x, &mut got, 0..rows).expect("run");
    let mut want = vec![0.0f32; rows * batch];
    reference::matmul(&w, &x, &mut want, 0..rows);
    assert_eq!(same_bits(&want, &got), None);
}

#[test]
fn entry_registers_q8_0_matmul_with_the_panel_arm_first() {
    let e = entry();
    assert_eq!(e.family, Family("q8_0.matmul"));
    let first = e.arms.first().expect("an arm");
    assert_eq!(first.arm.name(), "q8_0.matmul.arm.panel16");
    assert_eq!(first.arm.family(), Family("q8_0.matmul"));
    assert!(e.arms.iter().all(|a| a.arm.family() == e.family));
    // Its check is this family's validation, its bench runs its own body.
    let host = Host::detect();
    let w = random_weights(5, 3, 11, true);
    let offer = first
        .arm
        .offer(&site_with(5, 96, 4, Some(w.bytes().to_vec())), &host)
        .expect("offer");
    assert!(first
        .check
        .cases_id(&offer, 1)
        .contains("q8_0.matmul panel16 cases"));
    let code = first.arm.build(&offer, host.isa).expect("build");
    let placed = code.place().expect("place");
    let mut bench = first
        .bench
        .as_ref()
        .expect("the panel arm can be raced")
        .prepare(&offer, 3)
        .expect("prepare");
    // SAFETY: `code` is the body `first.arm` built for `offer`, which the
    // bench was prepared for.
    unsafe { bench.run(&placed) }.expect("bench run");
}
