use super::arm::{compile, offer_for, split, QuantizeArm, QuantizeKernel, ARM_NAME};
use super::validation::{geometries, QuantizeValidation};
use super::*;
use crate::block::{f32_to_f16, quantize_block, quantize_row};
use weft_kernel::{Arm, Family, Host, Site, Twin};
use weft_validate::{Outcome, Validation};

/// The reference bytes of every block of `x`.
fn reference_bytes(x: &[f32]) -> Vec<u8> {
    quantize_row(x).expect("multiple of 32")
}

/// Run `k` over all of `x` and return the bytes.
fn run_all(k: &QuantizeKernel, x: &[f32], cols: usize, batch: usize) -> Vec<u8> {
    let blocks = x.len() / BLOCK_LEN;
    let mut out = vec![0u8; blocks * BLOCK_BYTES];
    k.run(x, &mut out, cols, batch, 0..blocks).expect("run");
    out
}

fn first_block_difference(want: &[u8], got: &[u8]) -> Option<usize> {
    want.iter()
        .zip(got)
        .position(|(a, b)| a != b)
        .map(|i| i / BLOCK_BYTES)
}

#[test]
fn arm_matches_the_reference_on_every_validation_case() {
    let k = QuantizeKernel::of_arm().expect("arm");
    let offer = offer_for(32, 1).expect("offer");
    for case in QuantizeValidation.cases(&offer, 7) {
        let x = case.input();
        let got = run_all(&k, x, case.cols, case.batch);
        let want = reference_bytes(x);
        if let Some(b) = first_block_difference(&want, &got) {
            let r = b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES;
            panic!(
                "cols {} batch {} block {b}: inputs {:x?}\n arm {:02x?}\n ref {:02x?}",
                case.cols,
                case.batch,
                x[b * 32..b * 32 + 32]
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>(),
                &got[r.clone()],
                &want[r]
            );
        }
    }
}

/// The arm's integer f32 → binary16 conversion against `half`'s, through
/// the stored scale: block `i` holds `amax_i` and zeros, so its scale is
/// `fp16(amax_i / 127)`. The sweep takes every 2^11-th positive f32 bit
/// pattern plus ±4 ulps around every binary16 boundary of `d`.
#[test]
fn arm_scale_is_the_binary16_of_d_across_the_whole_range() {
    let stride: u32 = if cfg!(target_arch = "aarch64") {
        1 << 14
    } else {
        1 << 11
    };
    let mut amax: Vec<f32> = (0..0x7f80_0000u32 / stride)
        .map(|i| f32::from_bits(i * stride))
        .collect();
    // d boundaries: for each binary16 value h and each midpoint between
    // neighbours, the amax whose d lands there, and neighbours.
    for h in (0u16..0x7c00)
        .step_by(97)
        .chain([0x03ff, 0x0400, 0x7bff, 0x0001])
    {
        let lo = crate::block::f16_to_f32(h);
        let hi = crate::block::f16_to_f32(h + 1);
        for d in [lo, (lo + hi) / 2.0] {
            let a = d * 127.0;
            for step in -4i32..=4 {
                amax.push(f32::from_bits((a.to_bits() as i32 + step).max(0) as u32));
            }
        }
    }
    amax.extend([65520.0 * 127.0, f32::MAX, f32::INFINITY, f32::NAN]);
    let blocks = amax.len().div_ceil(8) * 8;
    let mut x = vec![0f32; blocks * BLOCK_LEN];
    for (i, a) in amax.iter().enumerate() {
        x[i * BLOCK_LEN + BLOCK_LEN - 1] = *a;
    }
    let k = QuantizeKernel::of_arm().expect("arm");
    let got = run_all(&k, &x, x.len(), 1);
    for (i, a) in amax.iter().enumerate() {
        let want = f32_to_f16(*a / 127.0);
        let have = u16::from_le_bytes([got[i * BLOCK_BYTES], got[i * BLOCK_BYTES + 1]]);
        assert_eq!(
            have,
            want,
            "amax {:#010x}: arm {have:#06x}, half {want:#06x}",
            a.to_bits()
        );
    }
}

#[test]
fn reference_ties_and_nan_rules_hold_on_crafted_blocks() {
    // d = 1: 2.5 → 3, -2.5 → -3, 0.49999997 → 0.
    let mut b = [0f32; 32];
    b[..4].copy_from_slice(&[127.0, 2.5, -2.5, 0.499_999_97]);
    let q = quantize_block(&b);
    assert_eq!(&q.qs[..4], &[127, 3, -3, 0]);
    // A NaN last makes the scale a quiet NaN and every quant 0.
    b[31] = f32::from_bits(0x7f80_0001);
    let q = quantize_block(&b);
    assert_eq!(q.d & 0x7e00, 0x7e00);
    assert!(q.qs.iter().all(|v| *v == 0));
    // A NaN before larger values... is forgotten with them: amax = 2.5.
    let mut c = [0f32; 32];
    c[0] = 100.0;
    c[1] = f32::NAN;
    c[2] = 2.5;
    assert_eq!(quantize_block(&c).d, f32_to_f16(2.5 / 127.0));
}

#[test]
fn every_x64_twin_the_host_runs_matches_the_arm_bit_for_bit() {
    let host = Host::detect();
    let offer = offer_for(4096, 2).expect("offer");
    let arm = QuantizeArm.build(&offer, host.isa).expect("arm builds");
    let mut accepted = 0;
    for twin in twin_x64::TWINS {
        match weft_validate::testing::judge_twin(
            &twin,
            &arm,
            &offer,
            &host,
            &QuantizeValidation,
            0x5eed,
        ) {
            Outcome::Accepted(v) => {
                assert!(v.words > 0);
                accepted += 1;
            }
            Outcome::Refused(
                weft_kernel::Refusal::MissingFeature { .. } | weft_kernel::Refusal::WrongIsa { .. },
            ) => {}
            Outcome::Refused(r) => panic!("{}: {r}", twin.name()),
        }
    }
    if host.has(weft_kernel::Feature::Avx512vl) && host.has(weft_kernel::Feature::F16c) {
        assert_eq!(accepted, twin_x64::TWINS.len());
    }
}

#[test]
fn x64_twins_need_only_the_features_they_declare() {
    for twin in twin_x64::TWINS {
        let (emitted, (head, back)) = twin.emit_body().expect("emits");
        assert!(head < back && back < emitted.bytes.len());
        let allowed: &[&str] = match twin.tier() {
            twin_x64::Tier::Avx2 => &[
                "X64",
                "AVX",
                "AVX2",
                "F16C",
                "SSE",
                "SSE2",
                "INTEL386",
                "INTEL8086",
            ],
            twin_x64::Tier::Avx512 => &[
                "X64",
                "AVX",
                "AVX2",
                "F16C",
                "SSE",
                "SSE2",
                "INTEL386",
                "INTEL8086",
                "AVX512F",
                "AVX512VL",
            ],
        };
        for f in emitted.cpuid_features() {
            let f = format!("{f:?}");
            assert!(allowed.contains(&f.as_str()), "{}: uses {f}", twin.name());
        }
        let text = emitted.listing.to_string();
        assert!(
            !text.contains("vfmadd"),
            "{}: no FMA in the contract",
            twin.name()
        );
        assert!(text.contains("vcvtps2ph"), "{}", twin.name());
    }
}

// `extern "win64"` exists only on x86-64 targets.
#[cfg(target_arch = "x86_64")]
#[test]
fn win64_x64_twins_match_the_arm_when_called_as_win64() {
    let host = Host::detect();
    let offer = offer_for(32, 1).expect("offer");
    let case = QuantizeValidation
        .cases(&offer, 3)
        .into_iter()
        .find(|c| c.batch == 8)
        .expect("a batch-8 case");
    let x = case.input();
    let want = run_all(
        &QuantizeKernel::of_arm().expect("arm"),
        x,
        case.cols,
        case.batch,
    );
    for twin in twin_x64::TWINS {
        if weft_kernel::require_features(&host, twin.requires()).is_err() {
            continue;
        }
        let (code, _) = twin
            .with_abi(weft_x64::Abi::Win64)
            .emit_body()
            .expect("emit");
        let placed = weft_jitmem::place(&code.bytes).expect("place");
        let mut got = vec![0u8; want.len()];
        let blocks = want.len() / BLOCK_BYTES;
        let args =
            Q8QuantizeArgs::new(x, &mut got, case.cols, case.batch, 0..blocks).expect("args");
        // SAFETY: the body was emitted for Win64 with the leaf ABI for
        // Q8QuantizeArgs; `args` was checked against the buffers, which
        // outlive the call; `placed` stays mapped.
        unsafe {
            let f: unsafe extern "win64" fn(*const Q8QuantizeArgs) =
                std::mem::transmute(placed.as_ptr());
            f(&args);
        }
        assert_eq!(first_block_difference(&want, &got), None, "{}", twin.name());
    }
}

#[test]
fn splits_are_bit_identical_to_one_call_and_touch_only_their_blocks() {
    let offer = offer_for(32, 1).expect("offer");
    let case = &QuantizeValidation.cases(&offer, 11)[20];
    let x = case.input();
    let k = QuantizeKernel::of_arm().expect("arm");
    let whole = run_all(&k, x, case.cols, case.batch);
    let blocks = whole.len() / BLOCK_BYTES;
    let mut out = vec![0x5au8; whole.len()];
    let args = Q8QuantizeArgs::new(x, &mut out, case.cols, case.batch, 0..blocks).expect("args");
    for parts in [1u64, 2, 3, 7] {
        out.fill(0x5a);
        let pieces = split(&args, parts);
        assert!(pieces.len() as u64 <= parts);
        for (i, piece) in pieces.iter().enumerate() {
            // SAFETY: `piece` is `args` restricted to a sub-range; `args`
            // was checked against `x` and `out`, both alive here.
            unsafe { k.kernel().call(piece) };
            let done = piece.block_end * BLOCK_BYTES;
            assert!(
                out[done..].iter().all(|b| *b == 0x5a),
                "part {i} wrote past its end"
            );
        }
        assert_eq!(out, whole, "{parts} parts");
    }
}

/// A range whose start lies past its end (built at run time, as bad input
/// would be).
fn backwards() -> std::ops::Range<usize> {
    let (start, end) = (3, 2);
    start..end
}

#[test]
fn bad_input_is_refused_by_name() {
    let host = Host::detect();
    for (cols, batch) in [(0u64, 1u64), (33, 1), (64, 0), (64, 513)] {
        let site = Site::new(Family(FAMILY), geometry(cols, batch));
        let e = QuantizeArm.offer(&site, &host).unwrap_err();
        assert_eq!(
            e.name(),
            "unsupported-geometry",
            "cols {cols} batch {batch}"
        );
    }
    let site = Site::new(
        Family(FAMILY),
        weft_kernel::Geometry::new().with("batch", 2),
    );
    assert_eq!(
        QuantizeArm.offer(&site, &host).unwrap_err().name(),
        "missing-dimension"
    );
    let site = Site::new(Family("q8_0.matvec"), geometry(64, 1));
    assert_eq!(
        QuantizeArm.offer(&site, &host).unwrap_err().name(),
        "unsupported-geometry"
    );

    let x = vec![1.0f32; 128];
    let mut out = vec![0u8; 4 * 34];
    assert!(Q8QuantizeArgs::new(&x, &mut out, 64, 2, 0..4).is_ok());
    let name = |r: Result<Q8QuantizeArgs, weft_kernel::Refusal>| r.unwrap_err().name();
    assert_eq!(
        name(Q8QuantizeArgs::new(&x[..127], &mut out, 64, 2, 0..4)),
        "bad-operand"
    );
    assert_eq!(
        name(Q8QuantizeArgs::new(&x, &mut out[..135], 64, 2, 0..4)),
        "bad-operand"
    );
    assert_eq!(
        name(Q8QuantizeArgs::new(&x, &mut out, 64, 2, 0..5)),
        "bad-operand"
    );
    assert_eq!(
        name(Q8QuantizeArgs::new(&x, &mut out, 64, 2, backwards())),
        "bad-operand"
    );
    assert_eq!(
        name(Q8QuantizeArgs::new(&x, &mut out, 48, 2, 0..3)),
        "unsupported-geometry"
    );
    assert_eq!(
        name(Q8QuantizeArgs::new(&x, &mut out, 128, 0, 0..0)),
        "unsupported-geometry"
    );

    let mut wrong = offer_for(64, 1).expect("offer");
    wrong.contract.family = "q8_0.matvec".into();
    for twin in twin_x64::TWINS {
        assert_eq!(
            twin.emit(&wrong).unwrap_err().name(),
            "unsupported-geometry"
        );
    }
    assert_eq!(
        twin_a64::QuantizeNeon.emit(&wrong).unwrap_err().name(),
        "unsupported-geometry"
    );
}

#[test]
fn arm_compiles_for_both_isas_at_baseline() {
    for arch in [weft_managed::Arch::X86_64, weft_managed::Arch::Aarch64] {
        let target = weft_managed::Target::baseline(arch).expect("target");
        let code = compile(&target).unwrap_or_else(|e| panic!("{arch:?}: {e}"));
        assert!(!code.bytes.is_empty());
    }
}

#[test]
fn entry_registers_the_arm_and_every_twin() {
    let e = entry();
    assert_eq!(e.family.name(), FAMILY);
    assert_eq!(e.arms[0].arm.name(), ARM_NAME);
    let names: Vec<_> = e.arms[0].twins.iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        [
            "q8_0.quantize.twin.avx2",
            "q8_0.quantize.twin.avx512",
            "q8_0.quantize.twin.neon"
        ]
    );
    for t in &e.arms[0].twins {
        let offer = offer_for(96, 3).expect("offer");
        assert_eq!(t.nest(&offer), offer.loops);
        let code = t.emit(&offer).expect("emits on any host");
        assert_eq!(code.loops.len(), 1);
        assert_eq!(code.loops[0].name, offer.loops[0].name);
    }
    // The workbench runs the arm on prepared inputs at the offer.
    let bench = e.arms[0].bench.as_ref().expect("a workbench");
    let offer = offer_for(96, 3).expect("offer");
    let arm_code = QuantizeArm.build(&offer, Host::detect().isa).expect("arm");
    let placed = arm_code.place().expect("place");
    let mut prepared = bench.prepare(&offer, 9).expect("prepare");
    // SAFETY: the arm's body for this offer.
    unsafe { prepared.run(&placed) }.expect("run");
    let mut other = offer.clone();
    other.contract.args = "Q8MatvecArgs".into();
    assert_eq!(
        bench.prepare(&other, 9).err().map(|r| r.name()),
        Some("bad-operand")
    );
    // The planner's check runs the validation (refuses by name off-host).
    let host = Host::detect();
    let offer = offer_for(64, 1).expect("offer");
    let arm = QuantizeArm.build(&offer, host.isa).expect("arm");
    for t in &e.arms[0].twins {
        match weft_validate::testing::judge_with(
            &*e.arms[0].check,
            t.as_ref(),
            &arm,
            &offer,
            &host,
            1,
        ) {
            Ok(c) => assert!(c.cases == geometries().len()),
            Err(r) => assert!(
                matches!(r.name(), "missing-feature" | "wrong-isa"),
                "{}: {r}",
                t.name()
            ),
        }
    }
}

#[test]
fn quantised_activations_feed_the_matvec_unchanged() {
    let k = QuantizeKernel::of_arm().expect("arm");
    let offer = offer_for(32, 1).expect("offer");
    let case = &QuantizeValidation.cases(&offer, 5)[10];
    // Finite inputs only: the reference quantiser's own output.
    let x: Vec<f32> = case
        .input()
        .iter()
        .map(|v| if v.is_finite() { *v } else { 0.5 })
        .collect();
    let a = k.quantize(&x, case.cols, case.batch).expect("quantise");
    assert_eq!(
        a.bytes(),
        reference(&x, case.cols, case.batch).expect("ref").bytes()
    );
}

#[test]
fn neon_twin_emits_on_any_host_and_every_word_decodes() {
    let code = twin_a64::QuantizeNeon.body().expect("emits");
    assert_eq!(code.isa, weft_kernel::Isa::Aarch64);
    assert!(
        !weft_managed::listing(&code).contains(".word"),
        "{}",
        weft_managed::listing(&code)
    );
    for needed in ["fcvtn", "fcvtas", "fcsel", "xtn2", "ret"] {
        assert!(
            weft_managed::listing(&code).contains(needed),
            "{needed}: {}",
            weft_managed::listing(&code)
        );
    }
    // v8–v15 are callee-saved under AAPCS64: never written.
    for line in weft_managed::listing(&code).lines() {
        let dest = line.split_whitespace().nth(3).unwrap_or("");
        for r in 8..16 {
            for p in ["v", "s", "d", "q", "h"] {
                assert!(
                    !dest.starts_with(&format!("{p}{r},"))
                        && !dest.starts_with(&format!("{p}{r}.")),
                    "writes a callee-saved register: {line}"
                );
            }
        }
    }
}

/// Against the arm64 arm, under qemu in CI (`cargo test -p weft-q8
/// --target aarch64-unknown-linux-gnu`).
#[cfg(target_arch = "aarch64")]
#[test]
fn neon_twin_matches_the_arm_bit_for_bit() {
    let host = Host::detect();
    let offer = offer_for(4096, 2).expect("offer");
    let arm = QuantizeArm.build(&offer, host.isa).expect("arm builds");
    match weft_validate::testing::judge_twin(
        &twin_a64::QuantizeNeon,
        &arm,
        &offer,
        &host,
        &QuantizeValidation,
        0x5eed,
    ) {
        Outcome::Accepted(v) => eprintln!("neon: {} cases, {} words", v.cases, v.words),
        Outcome::Refused(r) => panic!("{r}"),
    }
}
