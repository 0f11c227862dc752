use super::arm::{offer_for, Q8MatvecArm, Q8MatvecKernel, ARM_NAME};
use super::block::{block_at, f16_to_f32, quantize_block, quantize_row, BlockQ8_0};
use super::reference::{abs_dot_row_f64, dot_row, dot_row_f64, matvec};
use super::validation::{random_activations, random_weights, shapes};
use super::*;
use weft_kernel::{Arm, Family, Site};

fn block_of(prefix: &[f32]) -> [f32; 32] {
    let mut x = [0.0f32; 32];
    x[..prefix.len()].copy_from_slice(prefix);
    x
}

fn bytes_of(d: u16, prefix: &[i8]) -> [u8; 34] {
    let mut qs = [0i8; 32];
    qs[..prefix.len()].copy_from_slice(prefix);
    BlockQ8_0 { d, qs }.to_bytes()
}

#[test]
fn all_zero_block_is_all_zero_bytes() {
    assert_eq!(quantize_block(&[0.0; 32]).to_bytes(), [0u8; 34]);
}

#[test]
fn ties_round_half_away_from_zero() {
    // d = 1 exactly (fp16 0x3c00): q = roundf(x); -2.5 → -3 (not -2 as ties-to-even would).
    let b = quantize_block(&block_of(&[127.0, -63.5, 0.5, -0.5, 2.5, -2.5, 1.49]));
    let mut want = [0u8; 34];
    want[..9].copy_from_slice(&[0x00, 0x3c, 127, 0xc0, 0x01, 0xff, 0x03, 0xfd, 0x01]);
    assert_eq!(b.to_bytes(), want);
}

#[test]
fn negative_max_sets_the_scale() {
    // amax = 254 from a negative value: d = 2 (0x4000), id = 0.5.
    let b = quantize_block(&block_of(&[127.0, 1.0, -3.0, 0.0, 0.0, 0.0, 0.0, -254.0]));
    assert_eq!(
        b.to_bytes(),
        bytes_of(0x4000, &[64, 1, -2, 0, 0, 0, 0, -127])
    );
}

#[test]
fn scale_rounds_in_fp16_but_quants_use_the_f32_scale() {
    // d = 1/127 rounds to fp16 0x2008; id = 1/f32(1/127) = 127.
    let b = quantize_block(&block_of(&[1.0, 0.5, -0.25, 0.75, 1.0 / 3.0]));
    assert_eq!(b.to_bytes(), bytes_of(0x2008, &[127, 64, -32, 95, 42]));
    assert_ne!(f16_to_f32(0x2008), 1.0f32 / 127.0);
    // d = 1 + 2^-11 is an fp16 tie: to even gives 1.0 (0x3c00); id comes
    // from the f32 d, so 0.5001 · id = 0.49986 → 0 (the fp16 d would give 1).
    let b = quantize_block(&block_of(&[127.0 * (1.0 + 2f32.powi(-11)), 0.5001]));
    assert_eq!(b.to_bytes(), bytes_of(0x3c00, &[127, 0]));
    // d = 1 + 3·2^-11: tie between 0x3c01 and 0x3c02, to even gives 0x3c02.
    let b = quantize_block(&block_of(&[-127.0 * (1.0 + 3.0 * 2f32.powi(-11)), 1.0]));
    assert_eq!(b.to_bytes(), bytes_of(0x3c02, &[-127, 1]));
}

#[test]
fn quantiser_never_emits_minus_128_even_on_pathological_inputs() {
    let tiny = f32::from_bits(0x0000_0100); // 1/d overflows to inf
    for x in [
        block_of(&[tiny, -tiny]),
        block_of(&[f32::INFINITY, -1.0]),
        block_of(&[f32::NAN, -5.0, 3.0]),
        block_of(&[f32::MAX, f32::MIN]),
    ] {
        let b = quantize_block(&x);
        assert!(b.qs.iter().all(|q| *q != -128), "{x:?} → {b:?}");
    }
}

#[test]
fn block_bytes_round_trip_and_rows_need_multiples_of_32() {
    let x: Vec<f32> = (0..64).map(|i| (i as f32 - 30.0) * 0.37).collect();
    let bytes = quantize_row(&x).expect("64 values");
    assert_eq!(bytes.len(), 68);
    let b1 = block_at(&bytes, 1).expect("block 1");
    assert_eq!(BlockQ8_0::from_bytes(&b1.to_bytes()), b1);
    for (v, d) in x[32..].iter().zip(b1.dequantize()) {
        assert!((v - d).abs() <= b1.scale() * 0.5 + 1e-6);
    }
    assert!(block_at(&bytes, 2).is_none());
    assert!(quantize_row(&x[..33]).is_err());
}

#[test]
fn activation_quantiser_is_the_weight_quantiser() {
    let x: Vec<f32> = (0..96)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
        .collect();
    let a = quantize_activations(&x, 96, 1).expect("quantise");
    assert_eq!(a.bytes(), quantize_row(&x).expect("row").as_slice());
    let two = quantize_activations(&[x.clone(), x].concat(), 96, 2).expect("batch 2");
    assert_eq!(two.batch(), 2);
    assert_eq!(&two.bytes()[..a.bytes().len()], a.bytes());
}

#[test]
fn activations_with_minus_128_are_refused() {
    let mut bytes = vec![0u8; 34];
    bytes[5] = 0x80;
    let e = Q8Activations::from_bytes(bytes, 32, 1).unwrap_err();
    assert_eq!(e.name(), "bad-operand");
}

#[test]
fn reference_is_within_f32_bound_of_f64_dot() {
    for (blocks, seed) in [(1usize, 1u64), (3, 2), (448, 3), (17, 4)] {
        let w = random_weights(4, blocks, seed, false);
        let x = random_activations(blocks, 1, seed + 100);
        let row = blocks * 34;
        for r in 0..4 {
            let wr = &w.bytes()[r * row..(r + 1) * row];
            let got = f64::from(dot_row(wr, x.bytes()));
            let exact = dot_row_f64(wr, x.bytes());
            // Per term: scale product and term product (2 roundings), then
            // at most blocks/4 + 4 additions: relative 2^-24 each.
            let steps = (blocks / 4 + 6) as f64;
            let bound = abs_dot_row_f64(wr, x.bytes()) * steps * 2f64.powi(-23);
            assert!(
                (got - exact).abs() <= bound,
                "blocks {blocks} row {r}: {got} vs {exact} (bound {bound})"
            );
        }
    }
}

#[test]
fn bad_geometry_is_refused_by_name() {
    let arm = Q8MatvecArm;
    let host = weft_kernel::Host::detect();
    for (rows, cols, batch) in [
        (0u64, 32u64, 1u64),
        (4, 33, 1),
        (4, 0, 1),
        (4, 64, 0),
        (4, 64, 9),
    ] {
        let site = Site::new(Family(FAMILY), geometry(rows, cols, batch));
        let e = arm.offer(&site, &host).unwrap_err();
        assert_eq!(
            e.name(),
            "unsupported-geometry",
            "{rows}×{cols} batch {batch}"
        );
    }
    let site = Site::new(Family(FAMILY), weft_kernel::Geometry::new().with("rows", 4));
    assert_eq!(
        arm.offer(&site, &host).unwrap_err().name(),
        "missing-dimension"
    );
    let ok = Site::new(Family(FAMILY), geometry(4096, 14336, 1));
    let offer = arm.offer(&ok, &host).expect("offer");
    assert_eq!(offer.views.as_ref().map(|v| v.axis.as_str()), Some("rows"));
    assert_eq!(offer.loops[2].trips, 448 / 4);
    assert_eq!(arm.name(), ARM_NAME);
}

#[test]
fn short_buffers_are_refused_at_construction() {
    assert_eq!(
        Q8Weights::from_bytes(vec![0; 67], 2, 32)
            .unwrap_err()
            .name(),
        "bad-operand"
    );
    let w = random_weights(3, 2, 9, false);
    let x = random_activations(2, 1, 10);
    let x_wrong = random_activations(3, 1, 10);
    let mut y = vec![0.0f32; 3];
    assert!(Q8MatvecArgs::new(&w, &x, &mut y, 0..3).is_ok());
    assert_eq!(
        Q8MatvecArgs::new(&w, &x_wrong, &mut y, 0..3)
            .unwrap_err()
            .name(),
        "bad-operand"
    );
    assert_eq!(
        Q8MatvecArgs::new(&w, &x, &mut y[..2], 0..3)
            .unwrap_err()
            .name(),
        "bad-operand"
    );
    assert_eq!(
        Q8MatvecArgs::new(&w, &x, &mut y, 1..4).unwrap_err().name(),
        "bad-operand"
    );
}

#[test]
fn slice_arguments_check_every_extent() {
    let w = random_weights(3, 2, 9, false);
    let x = random_activations(2, 2, 10);
    let mut y = vec![0.0f32; 6];
    let dims = (3, 64, 2);
    let name = |r: Result<Q8MatvecArgs, weft_kernel::Refusal>| r.map(|_| ()).map_err(|e| e.name());
    assert_eq!(
        name(Q8MatvecArgs::from_slices(
            w.bytes(),
            x.bytes(),
            &mut y,
            dims,
            0..3
        )),
        Ok(())
    );
    let wb = w.bytes();
    let xb = x.bytes();
    assert_eq!(
        name(Q8MatvecArgs::from_slices(&wb[1..], xb, &mut y, dims, 0..3)),
        Err("bad-operand")
    );
    assert_eq!(
        name(Q8MatvecArgs::from_slices(wb, &xb[..67], &mut y, dims, 0..3)),
        Err("bad-operand")
    );
    assert_eq!(
        name(Q8MatvecArgs::from_slices(wb, xb, &mut y[..5], dims, 0..3)),
        Err("bad-operand")
    );
    assert_eq!(
        name(Q8MatvecArgs::from_slices(wb, xb, &mut y, dims, 2..4)),
        Err("bad-operand")
    );
    assert_eq!(
        name(Q8MatvecArgs::from_slices(wb, xb, &mut y, (3, 63, 2), 0..3)),
        Err("unsupported-geometry")
    );
    assert_eq!(
        name(Q8MatvecArgs::from_slices(wb, xb, &mut y, (3, 64, 9), 0..3)),
        Err("unsupported-geometry")
    );
    let mut bad_x = xb.to_vec();
    bad_x[40] = 0x80;
    assert_eq!(
        name(Q8MatvecArgs::from_slices(wb, &bad_x, &mut y, dims, 0..3)),
        Err("bad-operand")
    );
}

fn same_bits(a: &[f32], b: &[f32]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| !(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())))
}

#[test]
fn arm_matches_reference_bit_for_bit() {
    let k = Q8MatvecKernel::of_arm().expect("arm");
    for (i, (rows, blocks)) in shapes().into_iter().enumerate() {
        for batch in [1usize, 3] {
            // The scalar reference in a debug build: keep it to ~1e6 blocks.
            if rows * blocks * batch > 20_000 && batch > 1 || rows * blocks > 100_000 {
                continue;
            }
            let w = random_weights(rows, blocks, 11 + i as u64, true);
            let x = random_activations(blocks, batch, 77 + i as u64);
            let mut want = vec![-9.0f32; rows * batch];
            matvec(&w, &x, &mut want, 0..rows);
            let mut got = vec![-9.0f32; rows * batch];
            k.run(&w, &x, &mut got, 0..rows).expect("run");
            if let Some(at) = same_bits(&want, &got) {
                panic!(
                    "rows {rows} blocks {blocks} batch {batch}: y[{at}] arm {:#010x} reference {:#010x}",
                    got[at].to_bits(),
                    want[at].to_bits()
                );
            }
        }
    }
}

/// One row per binary16 pattern: W row `h` is scale `h`, quants `[1, 0, …]`;
/// X is scale 1.0, quants `[1, 0, …]`; so `y[h]` is `f32(h)` (with `-0`
/// becoming `+0`; NaN for NaN and, through `0 · inf` in the lanes with
/// `q = 0`, for ±inf): the arm's integer widening, exhaustively.
pub(super) fn every_scale_case() -> (Q8Weights, Q8Activations) {
    let mut bytes = Vec::with_capacity(65536 * 34);
    for h in 0..=u16::MAX {
        bytes.extend_from_slice(&bytes_of(h, &[1]));
    }
    let w = Q8Weights::from_bytes(bytes, 65536, 32).expect("weights");
    let x = Q8Activations::from_bytes(bytes_of(0x3c00, &[1]).to_vec(), 32, 1).expect("x");
    (w, x)
}

#[test]
fn arm_widens_every_fp16_scale_exactly() {
    let (w, x) = every_scale_case();
    let mut got = vec![0.0f32; 65536];
    Q8MatvecKernel::of_arm()
        .expect("arm")
        .run(&w, &x, &mut got, 0..65536)
        .expect("run");
    for (h, y) in got.iter().enumerate() {
        let d = f16_to_f32(h as u16);
        // Lanes with q = 0 give 0 · inf = NaN for infinite scales.
        let want = if d.is_infinite() { f32::NAN } else { d + 0.0 };
        assert!(
            y.to_bits() == want.to_bits() || (y.is_nan() && want.is_nan()),
            "scale {h:#06x}: arm {:#010x}, want {:#010x}",
            y.to_bits(),
            want.to_bits()
        );
    }
}

#[test]
fn arm_row_splits_are_bit_identical_and_touch_only_their_rows() {
    let k = Q8MatvecKernel::of_arm().expect("arm");
    let (rows, blocks, batch) = (37usize, 9usize, 2usize);
    let w = random_weights(rows, blocks, 5, true);
    let x = random_activations(blocks, batch, 6);
    let mut whole = vec![0.0f32; rows * batch];
    k.run(&w, &x, &mut whole, 0..rows).expect("run");
    let views = offer_for(rows as u64, blocks as u64 * 32, batch as u64)
        .expect("offer")
        .views
        .expect("views");
    for parts in [2u64, 3, 5] {
        let mut split = vec![f32::from_bits(0xdead_beef); rows * batch];
        for range in views.split(parts) {
            let r = range.start as usize..range.end as usize;
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
        assert_eq!(same_bits(&whole, &split), None, "{parts} parts");
    }
}

#[test]
fn threaded_row_splits_are_bit_identical_to_one_call() {
    let k = Q8MatvecKernel::of_arm().expect("arm");
    let (rows, blocks, batch) = (301usize, 13usize, 3usize);
    let w = random_weights(rows, blocks, 61, true);
    let x = random_activations(blocks, batch, 62);
    let mut whole = vec![0.0f32; rows * batch];
    k.run(&w, &x, &mut whole, 0..rows).expect("run");
    let views = offer_for(rows as u64, blocks as u64 * 32, batch as u64)
        .expect("offer")
        .views
        .expect("views");
    for threads in [2u64, 3, 8] {
        let mut split = vec![f32::NAN; rows * batch];
        k.run_threaded(&w, &x, &mut split, &views, threads)
            .expect("run");
        assert_eq!(same_bits(&whole, &split), None, "{threads} threads");
    }
    let mut wrong = views.clone();
    wrong.extent += 1;
    let mut y = vec![0.0f32; rows * batch];
    assert_eq!(
        k.run_threaded(&w, &x, &mut y, &wrong, 2)
            .unwrap_err()
            .name(),
        "bad-operand"
    );
}

#[test]
fn arm_uses_vnni_dot_on_vnni_hosts() {
    let host = weft_kernel::Host::detect();
    let offer = offer_for(1, 32, 1).expect("offer");
    let code = Q8MatvecArm.build(&offer, host.isa).expect("build");
    if host.has(weft_kernel::Feature::AvxVnni) || host.has(weft_kernel::Feature::Avx512vnni) {
        assert!(
            weft_managed::listing(&code).contains("vpdpbusd"),
            "{}",
            weft_managed::listing(&code)
        );
    }
}

#[test]
fn arm_cross_compiles_for_the_other_isa() {
    let host = weft_managed::Arch::host().expect("supported host");
    let isa = match host.other() {
        weft_managed::Arch::X86_64 => weft_kernel::Isa::X86_64,
        weft_managed::Arch::Aarch64 => weft_kernel::Isa::Aarch64,
    };
    let offer = offer_for(1, 32, 1).expect("offer");
    match Q8MatvecArm.build(&offer, isa) {
        Ok(code) => assert!(!code.bytes.is_empty()),
        // Baseline x64 (SSE2 only) may lack lowerings; a named refusal, not a crash.
        Err(e) => assert_eq!(e.name(), "compile-error"),
    }
}

/// Validation of `q8_0.matvec` twins of the f32x4 arm, shared by the x64
/// and arm64 twin tests.
pub(super) mod twin_tests {
    use super::super::twin_x64::{self, Q8MatvecX64, Tier, TWINS};
    use super::super::validation::Q8Validation;
    use super::*;
    use weft_kernel::{Offer, Refusal, Twin};
    use weft_validate::Outcome;

    fn arm_code(offer: &Offer) -> weft_kernel::NativeCode {
        Q8MatvecArm
            .build(offer, weft_kernel::Host::detect().isa)
            .expect("arm builds")
    }

    #[test]
    fn every_twin_the_host_can_run_matches_the_arm_bit_for_bit() {
        let host = weft_kernel::Host::detect();
        let offer = offer_for(4096, 448 * 32, 1).expect("offer");
        let arm = arm_code(&offer);
        let mut accepted = 0;
        for twin in TWINS {
            match weft_validate::testing::judge_twin(&twin, &arm, &offer, &host, &Q8Validation, 42)
            {
                Outcome::Accepted(v) => {
                    assert!(v.words > 0);
                    accepted += 1;
                }
                // x64 twins on another host are refused by name, not run.
                Outcome::Refused(Refusal::MissingFeature { .. } | Refusal::WrongIsa { .. }) => {}
                Outcome::Refused(r) => panic!("{}: {r}", twin.name()),
            }
        }
        if host.has(weft_kernel::Feature::Avx512vnni) {
            assert_eq!(accepted, TWINS.len());
        }
    }

    #[test]
    fn every_twin_states_its_nest_and_annotates_those_loops() {
        // 450 blocks at batch 3: too large a copy of x for the packed-x
        // path (its loops run 0 times), so the other path runs.
        let offer = offer_for(4099, 448 * 32 + 64, 3).expect("offer");
        assert!(!twin_x64::takes_packed_x(450, 3));
        for twin in TWINS {
            let nest = twin.nest(&offer);
            let r = u64::from(twin.rows_per_pass());
            let (packed, other): (Vec<_>, Vec<_>) =
                nest.iter().partition(|l| l.name.starts_with("xp."));
            for l in packed.iter().filter(|l| l.depth == 0) {
                assert_eq!(l.trips, 0, "{} {}", twin.name(), l.name);
            }
            let rows: Vec<u64> = other
                .iter()
                .filter(|l| l.depth == 0)
                .map(|l| l.trips)
                .collect();
            if r > 1 {
                assert_eq!(rows, [4099 / r, 4099 % r], "{}", twin.name());
            } else {
                assert_eq!(rows, [4099], "{}", twin.name());
            }
            // Batch 3: an AVX-512 multi-row pass takes one pair of
            // vectors, then one vector; other passes take three singly.
            let pairs = twin.tier() != Tier::Avx2 && r > 1;
            for l in other.iter().filter(|l| l.depth == 1) {
                let want = match (pairs, l.name.ends_with(".batch2")) {
                    (true, true) => 1,
                    (true, false) if !l.name.starts_with("r1.") => 1,
                    _ => 3,
                };
                assert_eq!(l.trips, want, "{} {}", twin.name(), l.name);
            }
            for l in other.iter().filter(|l| l.depth == 2) {
                assert_eq!(l.trips, 450 / 4, "{} {}", twin.name(), l.name);
            }
            // Every loop of the nest is annotated in the bytes, in order.
            let code = twin.emit(&offer).expect("emit");
            let names: Vec<&str> = code.loops.iter().map(|l| l.name.as_str()).collect();
            let want: Vec<&str> = nest.iter().map(|l| l.name.as_str()).collect();
            assert_eq!(names, want, "{}", twin.name());
            for l in &code.loops {
                assert!(
                    l.head < l.back_edge && l.back_edge < code.bytes.len(),
                    "{l:?}"
                );
            }
        }
    }

    /// At a prompt chunk's shape (1536 × 576, batch 8) the multi-row VNNI
    /// twins take the packed-x path: its loops carry the trips (8 vectors
    /// packed, two groups of three then one of two), the other path's
    /// rows loops none.
    #[test]
    fn a_prompt_chunk_takes_the_packed_x_path_and_its_nest_says_so() {
        let offer = offer_for(1536, 576, 8).expect("offer");
        assert!(twin_x64::takes_packed_x(18, 8));
        for twin in TWINS {
            let nest = twin.nest(&offer);
            let trips = |name: &str| nest.iter().find(|l| l.name == name).map(|l| l.trips);
            let r = twin.rows_per_pass();
            if twin.tier() == Tier::Avx512Vnni && r > 1 {
                assert_eq!(trips("xp.pack.batch"), Some(8), "{}", twin.name());
                assert_eq!(trips("xp.pack.pairs"), Some(9));
                assert_eq!(trips(&format!("xp.r{r}.rows")), Some(1536 / u64::from(r)));
                assert_eq!(trips(&format!("xp.r{r}.batch3")), Some(2));
                assert_eq!(trips(&format!("xp.r{r}.batch2")), Some(1));
                assert_eq!(trips(&format!("xp.r{r}.batch")), Some(0));
                assert_eq!(trips(&format!("r{r}.rows")), Some(0), "{}", twin.name());
            } else {
                assert!(nest.iter().all(|l| !l.name.starts_with("xp.")));
            }
        }
    }

    #[test]
    fn twins_need_only_the_features_they_declare() {
        for twin in TWINS {
            let emitted = twin.emit_body().expect("emits");
            let used: Vec<String> = emitted
                .cpuid_features()
                .iter()
                .map(|f| format!("{f:?}"))
                .collect();
            // Baseline x86-64 (SSE/SSE2: prefetcht0, the GPR code) plus the
            // tier's own features.
            let allowed: &[&str] = match twin.tier() {
                Tier::Avx2 => &[
                    "X64",
                    "CMOV",
                    "AVX",
                    "AVX2",
                    "F16C",
                    "SSE",
                    "SSE2",
                    "INTEL386",
                    "INTEL8086",
                ],
                Tier::Avx512Bw => &[
                    "X64",
                    "CMOV",
                    "AVX",
                    "AVX2",
                    "F16C",
                    "SSE",
                    "SSE2",
                    "INTEL386",
                    "INTEL8086",
                    "AVX512F",
                    "AVX512VL",
                    "AVX512BW",
                ],
                Tier::Avx512Vnni => &[
                    "X64",
                    "CMOV",
                    "AVX",
                    "AVX2",
                    "F16C",
                    "SSE",
                    "SSE2",
                    "INTEL386",
                    "INTEL8086",
                    "AVX512F",
                    "AVX512VL",
                    "AVX512BW",
                    "AVX512_VNNI",
                ],
            };
            for u in &used {
                assert!(allowed.contains(&u.as_str()), "{}: uses {u}", twin.name());
            }
            assert!(
                !emitted.listing.to_string().contains("vfmadd"),
                "{}: the contract has no FMA",
                twin.name()
            );
            let text = emitted.listing.to_string();
            match twin.tier() {
                Tier::Avx512Vnni => assert!(text.contains("vpdpbusd zmm"), "{text}"),
                Tier::Avx512Bw => {
                    assert!(text.contains("vpmaddubsw zmm"), "{text}");
                    assert!(!text.contains("vpdpbusd"), "{text}");
                }
                Tier::Avx2 => assert!(text.contains("vcvtph2ps ymm"), "{text}"),
            }
        }
    }

    #[test]
    fn twin_row_splits_are_bit_identical_to_one_call() {
        let host = weft_kernel::Host::detect();
        let (rows, blocks, batch) = (23usize, 7usize, 2usize);
        let w = random_weights(rows, blocks, 31, true);
        let x = random_activations(blocks, batch, 32);
        let offer = offer_for(rows as u64, blocks as u64 * 32, batch as u64).expect("offer");
        let views = offer.views.clone().expect("views");
        for twin in TWINS {
            if weft_kernel::require_features(&host, twin.requires()).is_err() {
                continue;
            }
            let code = twin.emit(&offer).expect("emit");
            // SAFETY: a q8_0.matvec twin body honours the leaf ABI for
            // Q8MatvecArgs (validated against the arm above).
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
    }

    // `extern "win64"` exists only on x86-64 targets.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn win64_twins_match_the_arm_when_called_as_win64() {
        let host = weft_kernel::Host::detect();
        let (rows, blocks, batch) = (9usize, 7usize, 2usize);
        let w = random_weights(rows, blocks, 51, true);
        let x = random_activations(blocks, batch, 52);
        let mut want = vec![0.0f32; rows * batch];
        Q8MatvecKernel::of_arm()
            .expect("arm")
            .run(&w, &x, &mut want, 0..rows)
            .expect("run");
        for twin in TWINS {
            if weft_kernel::require_features(&host, twin.requires()).is_err() {
                continue;
            }
            let twin = twin.with_abi(weft_x64::Abi::Win64);
            let code = twin.emit_body().expect("emit");
            let placed = weft_jitmem::place(&code.bytes).expect("place");
            let mut got = vec![0.0f32; rows * batch];
            let args = Q8MatvecArgs::new(&w, &x, &mut got, 0..rows).expect("args");
            // SAFETY: the body was emitted for the Win64 convention with the
            // leaf ABI for Q8MatvecArgs; `args` was checked against the
            // buffers, which outlive the call; `placed` stays mapped.
            unsafe {
                let f: unsafe extern "win64" fn(*const Q8MatvecArgs) =
                    std::mem::transmute(placed.as_ptr());
                f(&args);
            }
            assert_eq!(same_bits(&want, &got), None, "{}", twin.name());
        }
    }

    #[test]
    fn twins_widen_every_fp16_scale_like_the_arm() {
        let host = weft_kernel::Host::detect();
        let (w, x) = every_scale_case();
        let offer = offer_for(65536, 32, 1).expect("offer");
        let mut want = vec![0.0f32; 65536];
        Q8MatvecKernel::of_arm()
            .expect("arm")
            .run(&w, &x, &mut want, 0..65536)
            .expect("run");
        for twin in TWINS {
            if weft_kernel::require_features(&host, twin.requires()).is_err() {
                continue;
            }
            let code = twin.emit(&offer).expect("emit");
            // SAFETY: a q8_0.matvec twin body honours the leaf ABI for
            // Q8MatvecArgs.
            let k = unsafe { Q8MatvecKernel::from_native(&code) }.expect("place");
            let mut got = vec![0.0f32; 65536];
            k.run(&w, &x, &mut got, 0..65536).expect("run");
            assert_eq!(same_bits(&want, &got), None, "{}", twin.name());
        }
    }

    #[test]
    fn twins_refuse_other_offers_and_passes() {
        let mut offer = offer_for(4, 64, 1).expect("offer");
        offer.contract.family = "elementwise.exp".into();
        let e = Q8MatvecX64::new(Tier::Avx2, 1).emit(&offer).unwrap_err();
        assert_eq!(e.name(), "unsupported-geometry");
        let e = Q8MatvecX64::new(Tier::Avx2, 4).emit_body().unwrap_err();
        assert_eq!(e.name(), "emit-error");
        // An offer whose geometry the contract does not admit is refused
        // at plan time by every twin, before any code exists.
        for (rows, cols, batch, name) in [
            (4u64, 33u64, 1u64, "unsupported-geometry"),
            (0, 64, 1, "unsupported-geometry"),
            (4, 64, 9, "unsupported-geometry"),
        ] {
            let mut bad = offer_for(4, 64, 1).expect("offer");
            bad.contract.geometry = geometry(rows, cols, batch);
            for twin in TWINS {
                assert_eq!(twin.emit(&bad).unwrap_err().name(), name, "{}", twin.name());
            }
        }
        let mut missing = offer_for(4, 64, 1).expect("offer");
        missing.contract.geometry = weft_kernel::Geometry::new().with("rows", 4);
        assert_eq!(
            Q8MatvecX64::new(Tier::Avx512Vnni, 4)
                .emit(&missing)
                .unwrap_err()
                .name(),
            "missing-dimension"
        );
    }
}

/// A speed look for tuning, not a test of correctness: `cargo test
/// --release -p weft-q8 q8_0_speed_look -- --ignored --nocapture`.
/// Every candidate (the arm, each twin, the multi-row twins at several
/// prefetch distances) is sampled in interleaved rounds; the minimum and
/// the median per call are printed, in this thread's CPU time (on a
/// loaded machine, time spent descheduled would swamp the differences). `WEFT_Q8_LOOK=rows,blocks,batch` picks one shape.
#[test]
#[ignore]
fn q8_0_speed_look() {
    let host = weft_kernel::Host::detect();
    let shapes = match std::env::var("WEFT_Q8_LOOK") {
        Ok(v) => {
            let n: Vec<usize> = v
                .split(',')
                .map(|t| t.trim().parse().expect("number"))
                .collect();
            vec![(n[0], n[1], n[2])]
        }
        Err(_) => vec![(4096usize, 448usize, 1usize), (1536, 18, 1), (576, 48, 4)],
    };
    for (rows, blocks, batch) in shapes {
        speed_at(&host, rows, blocks, batch);
    }
}

fn speed_at(host: &weft_kernel::Host, rows: usize, blocks: usize, batch: usize) {
    use super::twin_x64::TWINS;
    use weft_kernel::Twin;
    let w = random_weights(rows, blocks, 1, false);
    let x = random_activations(blocks, batch, 2);
    let offer = offer_for(rows as u64, blocks as u64 * 32, batch as u64).expect("offer");
    let mut kernels = vec![(ARM_NAME.to_string(), Q8MatvecKernel::of_arm().expect("arm"))];
    for twin in TWINS {
        if weft_kernel::require_features(host, twin.requires()).is_err() {
            continue;
        }
        let distances: Vec<i32> = match std::env::var("WEFT_PF") {
            Ok(v) => v.split(',').map(|t| t.parse().expect("n")).collect(),
            Err(_) if twin.rows_per_pass() > 1 => vec![0, 1024, 2048, 4096],
            Err(_) => vec![0],
        };
        if let Ok(only) = std::env::var("WEFT_ONLY") {
            if !twin.name().contains(&only) {
                continue;
            }
        }
        for &p in distances.iter() {
            let code = twin.with_prefetch(p).emit(&offer).expect("emit");
            // SAFETY: validated q8_0.matvec twin bodies honour the leaf ABI.
            let k = unsafe { Q8MatvecKernel::from_native(&code) }.expect("place");
            kernels.push((format!("{} pf{p}", twin.name()), k));
        }
    }
    let mut y = vec![0.0f32; rows * batch];
    let mut stream_samples = Vec::new();
    let once = {
        let t = std::time::Instant::now();
        kernels[0].1.run(&w, &x, &mut y, 0..rows).expect("warm");
        t.elapsed().as_secs_f64()
    };
    let reps = ((0.001 / once.max(1e-7)) as usize).clamp(1, 1000);
    let mut samples = vec![Vec::new(); kernels.len()];
    for round in 0..31 {
        for i in 0..=kernels.len() {
            let j = (i + round) % (kernels.len() + 1);
            let t = cpu_seconds();
            for _ in 0..reps {
                match kernels.get(j) {
                    Some((_, k)) => k.run(&w, &x, &mut y, 0..rows).expect("run"),
                    None => {
                        std::hint::black_box(stream_read(std::hint::black_box(w.bytes())));
                    }
                }
            }
            let per = (cpu_seconds() - t) / reps as f64;
            match samples.get_mut(j) {
                Some(s) => s.push(per),
                None => stream_samples.push(per),
            }
        }
    }
    kernels.push((
        "stream read (AVX-512 loads, 4 accumulators)".into(),
        Q8MatvecKernel::of_arm().expect("arm"),
    ));
    samples.push(stream_samples);
    let bytes = (rows * blocks * 34) as f64;
    for ((name, _), s) in kernels.iter().zip(&mut samples) {
        s.sort_by(f64::total_cmp);
        let (min, med) = (s[0], s[s.len() / 2]);
        println!(
            "{rows}x{blocks} b{batch} {name:40} min {:9.1} us {:6.1} GB/s   median {:9.1} us",
            min * 1e6,
            bytes / min / 1e9,
            med * 1e6
        );
    }
}

/// This thread's CPU time in seconds (`CLOCK_THREAD_CPUTIME_ID`): on a
/// shared machine, time spent descheduled does not count.
#[cfg(unix)]
fn cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Wall time in seconds where there is no per-thread CPU clock.
#[cfg(not(unix))]
fn cpu_seconds() -> f64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64()
}

/// The speed look's peer: every byte of `bytes` through 64-byte loads into
/// four accumulators (the bench's streaming read, on AVX-512 hosts).
fn stream_read(bytes: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the host has AVX-512F (checked just above).
        return unsafe { stream_read_avx512(bytes) };
    }
    bytes.iter().map(|b| u64::from(*b)).sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn stream_read_avx512(bytes: &[u8]) -> u64 {
    use std::arch::x86_64::*;
    let (blocks, _) = bytes.as_chunks::<256>();
    let mut acc = [_mm512_setzero_si512(); 4];
    for b in blocks {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: bytes 64k..64k+64 lie in the 256-byte chunk `b`.
            let v = unsafe { _mm512_loadu_si512(b.as_ptr().add(64 * k).cast()) };
            *a = _mm512_add_epi64(*a, v);
        }
    }
    let s = _mm512_add_epi64(
        _mm512_add_epi64(acc[0], acc[1]),
        _mm512_add_epi64(acc[2], acc[3]),
    );
    _mm512_reduce_add_epi64(s) as u64
}

/// Prints the arm's listing: `cargo test -p weft-q8 q8_0_arm_listing
/// -- --ignored --nocapture`.
#[test]
#[ignore]
fn q8_0_arm_listing() {
    let offer = offer_for(1, 32, 1).expect("offer");
    let code = Q8MatvecArm
        .build(&offer, weft_kernel::Host::detect().isa)
        .expect("build");
    println!("{}", weft_managed::listing(&code));
}
