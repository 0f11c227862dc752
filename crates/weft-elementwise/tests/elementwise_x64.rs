//! The x64 twins of exp and erf: validated bit for bit against their arms
//! with weft-validate, checked against the scalar reference (including
//! inputs that take exp's slow path and the Win64 entry), their listings
//! snapshotted, and (ignored by default) timed against glibc and the arm.

#![cfg(target_arch = "x86_64")]

use weft_elementwise::arm::{ElementwiseArm, ElementwiseKernel};
use weft_elementwise::reference::{self, Path};
use weft_elementwise::twin_x64::{x64_twins, Tier, TwinFunc, X64Twin};
use weft_elementwise::{ElementwiseArgs, Func};
use weft_kernel::{require_features, Arm, Geometry, Host, Isa, Site, Twin};
use weft_validate::testing::judge_twin;
use weft_validate::{Outcome, Validation};
use weft_x64::Abi;

const TWINS: [X64Twin; 4] = [
    X64Twin {
        func: TwinFunc::Exp,
        tier: Tier::Avx2,
    },
    X64Twin {
        func: TwinFunc::Exp,
        tier: Tier::Avx512,
    },
    X64Twin {
        func: TwinFunc::Erf,
        tier: Tier::Avx2,
    },
    X64Twin {
        func: TwinFunc::Erf,
        tier: Tier::Avx512,
    },
];

/// Inputs where exp's binary64 fast path fails the rounding test (each is
/// checked below to still take the slow path).
const EXP_SLOW_INPUTS: [u32; 3] = weft_elementwise::validation::EXP_SLOW_INPUTS;

fn func(t: X64Twin) -> Func {
    match t.func {
        TwinFunc::Exp => Func::Exp,
        TwinFunc::Erf => Func::Erf,
    }
}

fn host() -> Host {
    Host::detect()
}

/// `None` (with the reason printed) when this host cannot run `twin`.
fn runnable(twin: &X64Twin, host: &Host) -> bool {
    match require_features(host, twin.requires()) {
        Ok(()) => true,
        Err(r) => {
            eprintln!("skipped {}: {r}", twin.name());
            false
        }
    }
}

/// The family's own validation (the planner's check) at `t`'s width.
fn validation(t: X64Twin) -> impl Validation<Args = ElementwiseArgs> {
    weft_elementwise::validation::validation(func(t), t.per_iteration())
}

fn check_against_arm(t: X64Twin) {
    let host = host();
    assert!(runnable(&t, &host), "{} needs {:?}", t.name(), t.requires());
    let arm = ElementwiseArm::new(func(t));
    let site = Site::new(arm.family(), Geometry::new().with("len", 4096));
    let offer = arm.offer(&site, &host).expect("offer");
    let arm_code = arm.build(&offer, Isa::X86_64).expect("arm builds");
    let outcome = judge_twin(&t, &arm_code, &offer, &host, &validation(t), 0x5eed);
    match outcome {
        Outcome::Accepted(v) => {
            eprintln!(
                "{}: accepted on {} cases, {} words",
                v.twin, v.cases, v.words
            );
        }
        Outcome::Refused(r) => panic!("{} refused: {r}", t.name()),
    }
}

#[test]
#[cfg_attr(
    not(all(weft_host_has = "avx", weft_host_has = "avx2")),
    ignore = "needs avx2, which this host lacks"
)]
fn exp_avx2_twin_matches_its_arm() {
    check_against_arm(TWINS[0]);
}

#[test]
#[cfg_attr(
    not(all(
        weft_host_has = "avx512f",
        weft_host_has = "avx512dq",
        weft_host_has = "avx512vl"
    )),
    ignore = "needs avx512f, avx512dq and avx512vl, which this host lacks"
)]
fn exp_avx512_twin_matches_its_arm() {
    check_against_arm(TWINS[1]);
}

#[test]
#[cfg_attr(
    not(all(weft_host_has = "avx", weft_host_has = "avx2")),
    ignore = "needs avx2, which this host lacks"
)]
fn erf_avx2_twin_matches_its_arm() {
    check_against_arm(TWINS[2]);
}

#[test]
#[cfg_attr(
    not(all(
        weft_host_has = "avx512f",
        weft_host_has = "avx512dq",
        weft_host_has = "avx512vl"
    )),
    ignore = "needs avx512f, avx512dq and avx512vl, which this host lacks"
)]
fn erf_avx512_twin_matches_its_arm() {
    check_against_arm(TWINS[3]);
}

fn place(t: X64Twin, abi: Abi) -> ElementwiseKernel {
    let code = t.emit_for(abi).expect("emits");
    // SAFETY: the twin's body is an elementwise leaf body (reads `len`
    // inputs, writes `len` outputs, reads the table, returns).
    unsafe { ElementwiseKernel::from_native(&code).expect("places") }
}

/// Every input of a strided sweep, plus the slow-path inputs, against the
/// reference directly (not through the arm).
#[test]
fn twins_match_the_reference_on_a_sweep_and_the_slow_path() {
    let host = host();
    let mut xs: Vec<f32> = (0..200_000u32)
        .map(|i| f32::from_bits(i.wrapping_mul(21_475)))
        .collect();
    xs.extend(EXP_SLOW_INPUTS.iter().map(|&u| f32::from_bits(u)));
    for &u in &EXP_SLOW_INPUTS {
        let (_, path) = reference::exp_f32_path(f32::from_bits(u));
        assert_eq!(path, Path::Slow, "{u:#010x} no longer takes the slow path");
    }
    for t in TWINS {
        if !runnable(&t, &host) {
            continue;
        }
        let k = place(t, Abi::host());
        let mut out = vec![0f32; xs.len()];
        k.run(&xs, &mut out).expect("runs");
        let f = func(t).reference();
        for (x, y) in xs.iter().zip(&out) {
            let want = f(*x);
            assert!(
                want.to_bits() == y.to_bits() || (want.is_nan() && y.is_nan()),
                "{}: f({x:e} = {:#010x}) = {:#010x}, twin {:#010x}",
                t.name(),
                x.to_bits(),
                want.to_bits(),
                y.to_bits()
            );
        }
    }
}

/// Each slow-path input at every position of two iterations, so that both
/// halves' slow blocks (and what is parked around them) run.
#[test]
fn exp_slow_path_in_every_lane() {
    let host = host();
    for t in TWINS.iter().filter(|t| t.func == TwinFunc::Exp) {
        if !runnable(t, &host) {
            continue;
        }
        let k = place(*t, Abi::host());
        let n = 2 * t.per_iteration();
        for &u in &EXP_SLOW_INPUTS {
            for pos in 0..n {
                let mut xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.37 - 3.0).collect();
                xs[pos] = f32::from_bits(u);
                let mut out = vec![0f32; n];
                k.run(&xs, &mut out).expect("runs");
                for (x, y) in xs.iter().zip(&out) {
                    let want = reference::exp_f32(*x);
                    assert_eq!(
                        want.to_bits(),
                        y.to_bits(),
                        "{} pos {pos} x {x:e}",
                        t.name()
                    );
                }
            }
        }
    }
}

/// In place (`input == output`), at every length up to three iterations.
#[test]
fn twins_work_in_place() {
    let host = host();
    for t in TWINS {
        if !runnable(&t, &host) {
            continue;
        }
        let k = place(t, Abi::host());
        let f = func(t).reference();
        for len in 0..=3 * t.per_iteration() {
            let xs: Vec<f32> = (0..len).map(|i| i as f32 * 0.37 - 2.0).collect();
            let mut data = xs.clone();
            k.run_in_place(&mut data);
            for (x, y) in xs.iter().zip(&data) {
                assert_eq!(f(*x).to_bits(), y.to_bits(), "{} len {len} x {x}", t.name());
            }
        }
    }
}

#[test]
fn a_foreign_offer_is_refused() {
    let arm = ElementwiseArm::new(Func::Erf);
    let site = Site::new(arm.family(), Geometry::new().with("len", 16));
    let offer = arm.offer(&site, &host()).expect("offer");
    let exp = TWINS[0];
    assert_eq!(exp.emit(&offer).unwrap_err().name(), "unsupported-geometry");
    let mut other = offer.clone();
    other.contract.args = "OtherArgs".into();
    assert_eq!(TWINS[2].emit(&other).unwrap_err().name(), "bad-operand");
    assert!(TWINS[2].emit(&offer).is_ok());
}

/// The Win64 body, called through `extern "win64"` on this SysV host.
#[test]
fn win64_bodies_compute_the_same() {
    let host = host();
    let xs: Vec<f32> = (0..1000u32)
        .map(|i| f32::from_bits(0x3f00_0000u32.wrapping_add(i.wrapping_mul(7_777_777))))
        .collect();
    for t in TWINS {
        if !runnable(&t, &host) {
            continue;
        }
        let code = t.emit_for(Abi::Win64).expect("emits");
        let placed = code.place().expect("places");
        let mut out = vec![0f32; xs.len()];
        let args = ElementwiseArgs::new(&xs, &mut out).expect("args");
        // SAFETY: the bytes are the twin's Win64 elementwise leaf body at
        // offset 0, called with a valid ElementwiseArgs; `placed` outlives
        // the call.
        unsafe {
            let f: extern "win64" fn(*const ElementwiseArgs) = std::mem::transmute(placed.as_ptr());
            f(&args);
        }
        let r = func(t).reference();
        for (x, y) in xs.iter().zip(&out) {
            let want = r(*x);
            assert!(
                want.to_bits() == y.to_bits() || (want.is_nan() && y.is_nan()),
                "{} (win64): {x:e}",
                t.name()
            );
        }
    }
}

#[test]
fn every_twin_is_exported_and_emits() {
    let names: Vec<&str> = x64_twins().iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        [
            "exp.twin.avx512",
            "exp.twin.avx2",
            "erf.twin.avx512",
            "erf.twin.avx2"
        ]
    );
    for t in TWINS {
        for abi in [Abi::SysV, Abi::Win64] {
            let code = t.emit_for(abi).expect("emits");
            assert_eq!(code.isa, Isa::X86_64);
            assert!(!code.bytes.is_empty());
        }
    }
}

#[test]
fn listings_are_snapshotted() {
    for t in TWINS {
        let code = t.emit_for(Abi::SysV).expect("emits");
        insta::assert_snapshot!(t.name().replace('.', "_"), weft_managed::listing(&code));
    }
}

// ------------------------------------------------------------- timing ---

extern "C" {
    fn erff(x: f32) -> f32;
}

fn time<F: FnMut()>(mut f: F) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..7 {
        let t = std::time::Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    best
}

/// `cargo test --release -p weft-elementwise --test elementwise_x64 -- --ignored --nocapture`
#[test]
#[ignore = "timing: run in release with --ignored --nocapture"]
fn twins_are_fast() {
    let host = host();
    let n = 1 << 16;
    let xs: Vec<f32> = (0..n)
        .map(|i| -80.0 + 160.0 * (i as f32) / n as f32)
        .collect();
    let xe: Vec<f32> = (0..n).map(|i| -4.0 + 8.0 * (i as f32) / n as f32).collect();
    let mut out = vec![0f32; n];
    let glibc_exp = time(|| {
        for (o, x) in out.iter_mut().zip(&xs) {
            *o = std::hint::black_box(*x).exp();
        }
    });
    let glibc_erf = time(|| {
        for (o, x) in out.iter_mut().zip(&xe) {
            // SAFETY: glibc's erff is a pure function of one f32.
            *o = unsafe { erff(std::hint::black_box(*x)) };
        }
    });
    for (f, xin, glibc) in [(Func::Exp, &xs, glibc_exp), (Func::Erf, &xe, glibc_erf)] {
        let arm = ElementwiseKernel::of_arm(f).expect("arm");
        let t_arm = time(|| arm.run(xin, &mut out).expect("runs"));
        println!(
            "{}: glibc {:.2} ns/elem, arm {:.2} ns/elem",
            f.name(),
            glibc * 1e9 / n as f64,
            t_arm * 1e9 / n as f64
        );
        for t in TWINS.iter().filter(|t| func(**t) == f) {
            if !runnable(t, &host) {
                continue;
            }
            let k = place(*t, Abi::host());
            let tt = time(|| k.run(xin, &mut out).expect("runs"));
            println!(
                "  {}: {:.2} ns/elem = {:.1}x glibc, {:.1}x arm",
                t.name(),
                tt * 1e9 / n as f64,
                glibc / tt,
                t_arm / tt
            );
        }
    }
}

/// Prints inputs that take exp's slow path (to refresh `EXP_SLOW_INPUTS`):
/// `cargo test --release -p weft-elementwise --test elementwise_x64 find_exp_slow -- --ignored --nocapture`
#[test]
#[ignore = "a scan: run in release with --ignored --nocapture"]
fn find_exp_slow_inputs() {
    let mut found = Vec::new();
    // Positive and negative finite inputs up to the overflow threshold.
    for bits in (0u32..0x42b2_0000)
        .step_by(3)
        .chain((0x8000_0000u32..0xc2d0_0000).step_by(3))
    {
        let (_, path) = reference::exp_f32_path(f32::from_bits(bits));
        if path != Path::Fast {
            found.push(bits);
            if found.len() >= 24 {
                break;
            }
        }
    }
    println!("{found:#010x?}");
}
