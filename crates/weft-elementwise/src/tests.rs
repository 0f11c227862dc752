use super::reference::{erf_f32, exp_f32, exp_f32_path, Path};
use super::*;

/// A cheap oracle for tests: f64 libm result, trusted only where the
/// ±2^-48 interval around it rounds to one f32 (otherwise skipped).
fn oracle(f: fn(f64) -> f64, x: f32) -> Option<f32> {
    let y = f(f64::from(x));
    if y.is_nan() {
        return Some(f32::NAN);
    }
    let e = y.abs() * 2f64.powi(-48);
    let (a, b) = ((y - e) as f32, (y + e) as f32);
    (a.to_bits() == b.to_bits()).then_some(a)
}

fn same(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

/// Inputs that hunt for differences: specials, boundaries, subnormals, and
/// a deterministic spread over all bit patterns.
pub(crate) fn hunting_inputs() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x8000_0001),
        f32::MAX,
        f32::MIN,
        1.0,
        -1.0,
        88.72283,
        88.722_84,
        88.7228,
        -87.33654,
        -103.972_08,
        -103.972_09,
        -104.0,
        -149.0,
        -150.5,
        100.5,
        0.4375,
        -0.4375,
        3.919_205_7,
        3.919_206,
        0.5,
        2.0,
    ];
    for b in [
        0x42b1_7217u32,
        0x42b1_7218,
        0xc2cf_f1b4,
        0xc2cf_f1b5,
        0x407a_d444,
        0x407a_d445,
        0x3ee0_0000,
        0x3edf_ffff,
    ] {
        for d in 0..3u32 {
            v.push(f32::from_bits(b.wrapping_add(d)));
            v.push(f32::from_bits(b.wrapping_sub(d)));
            v.push(-f32::from_bits(b.wrapping_add(d)));
        }
    }
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..4000 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.push(f32::from_bits((s >> 32) as u32));
        // and dense in the interesting ranges
        v.push(((s & 0xffff) as f32 / 65536.0 - 0.5) * 220.0);
        v.push(((s >> 16 & 0xffff) as f32 / 65536.0 - 0.5) * 9.0);
    }
    v
}

#[test]
fn exp_specials() {
    assert_eq!(exp_f32(0.0).to_bits(), 1f32.to_bits());
    assert_eq!(exp_f32(-0.0).to_bits(), 1f32.to_bits());
    assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
    assert_eq!(exp_f32(f32::NEG_INFINITY).to_bits(), 0);
    assert!(exp_f32(f32::NAN).is_nan());
    assert_eq!(exp_f32(89.0), f32::INFINITY);
    assert_eq!(exp_f32(-104.0).to_bits(), 0);
    assert_eq!(exp_f32(f32::from_bits(0x42b1_7217)).to_bits(), 0x7f7f_ff84);
    // smallest subnormal region
    assert_eq!(exp_f32(-103.0).to_bits(), 1);
}

#[test]
fn exp_matches_oracle_on_samples() {
    let mut slow = 0;
    for x in hunting_inputs() {
        let (y, path) = exp_f32_path(x);
        assert_ne!(path, Path::Undecided, "x={x:e}");
        slow += usize::from(path == Path::Slow);
        if let Some(o) = oracle(f64::exp, x) {
            assert!(
                same(y, o),
                "exp({x:e} = {:#x}) = {y:e}, oracle {o:e}",
                x.to_bits()
            );
        }
    }
    assert!(slow < 20, "slow path taken {slow} times");
}

#[test]
fn erf_specials() {
    assert_eq!(erf_f32(0.0).to_bits(), 0);
    assert_eq!(erf_f32(-0.0).to_bits(), 0x8000_0000);
    assert_eq!(erf_f32(f32::INFINITY), 1.0);
    assert_eq!(erf_f32(f32::NEG_INFINITY), -1.0);
    assert!(erf_f32(f32::NAN).is_nan());
    assert_eq!(erf_f32(4.0), 1.0);
    assert!(erf_f32(3.9) < 1.0);
    // tiny: erf(x) ≈ 2x/sqrt(pi)
    assert_eq!(erf_f32(f32::from_bits(1)).to_bits(), 1);
}

#[test]
fn erf_matches_oracle_on_samples() {
    extern "C" {
        fn erf(x: f64) -> f64;
    }
    fn libm_erf(x: f64) -> f64 {
        // SAFETY: libm's erf is a pure function of its argument.
        unsafe { erf(x) }
    }
    for x in hunting_inputs() {
        if let Some(o) = oracle(libm_erf, x) {
            let y = erf_f32(x);
            assert!(
                same(y, o),
                "erf({x:e} = {:#x}) = {y:e}, oracle {o:e}",
                x.to_bits()
            );
        }
    }
}

#[test]
fn table_is_consistent() {
    for j in 0..64 {
        let t = f64::from_bits(table::EXP_T_HI[j]);
        let want = (j as f64 / 64.0).exp2();
        assert!((t - want).abs() <= want * 2f64.powi(-52), "j={j}");
        let adj = ELEMENTWISE_TABLE[table::EXP_TAB_HI_ADJ + j];
        assert_eq!(adj.wrapping_add((j as u64) << 46), table::EXP_T_HI[j]);
    }
    let l = f64::from_bits(table::EXP_L_HI);
    assert_eq!(l.to_bits().trailing_zeros(), 14);
    assert!((l + f64::from_bits(table::EXP_L_LO) - std::f64::consts::LN_2 / 64.0).abs() < 1e-30);
    assert_eq!(table::ERF_Z_MAX as f32, f32::from_bits(0x407a_d444));
    assert_eq!(table::EXP_FAST_ERR, 2f64.powi(-51));
    assert_eq!(table::EXP_SLOW_ERR, 2f64.powi(-90));
}

/// The f32 inputs (bits) of exp that take the slow path, all of them.
const SLOW_EXP_INPUTS: [u32; 3] = [0xbae0_e25c, 0xbbf0_edf1, 0xc169_12cd];

mod arm_tests {
    use super::super::arm::{compile, ElementwiseKernel};
    use super::*;
    use weft_managed::{Arch, Target};

    fn check(k: &ElementwiseKernel, f: Func, xs: &[f32]) {
        let mut out = vec![0f32; xs.len()];
        k.run(xs, &mut out).expect("run");
        for (x, y) in xs.iter().zip(&out) {
            let r = f.reference()(*x);
            assert!(
                same(*y, r),
                "{}({x:e} = {:#010x}): arm {:#010x}, reference {:#010x}",
                f.name(),
                x.to_bits(),
                y.to_bits(),
                r.to_bits()
            );
        }
    }

    #[test]
    fn arms_match_reference_on_hunting_inputs() {
        let xs = hunting_inputs();
        for f in Func::ALL {
            let k = ElementwiseKernel::of_arm(f).expect("arm");
            check(&k, f, &xs);
        }
    }

    #[test]
    fn arm_exp_slow_path_lanes() {
        // The only three f32 inputs whose fast-path rounding test fails
        // (found by `cargo xtask exhaustive exp`), in every lane position.
        let hard = SLOW_EXP_INPUTS.map(f32::from_bits);
        for h in hard {
            assert_eq!(reference::exp_f32_path(h).1, reference::Path::Slow);
        }
        let k = ElementwiseKernel::of_arm(Func::Exp).expect("arm");
        for &h in &hard {
            for pos in 0..8 {
                let mut xs: Vec<f32> = (0..8).map(|i| i as f32 * 0.37 - 1.0).collect();
                xs[pos] = h;
                check(&k, Func::Exp, &xs);
            }
        }
    }

    #[test]
    fn arms_every_length_and_alignment() {
        let pool: Vec<f32> = hunting_inputs().into_iter().take(64).collect();
        for f in Func::ALL {
            let k = ElementwiseKernel::of_arm(f).expect("arm");
            for start in 0..4 {
                for n in 0..=16 {
                    let xs = &pool[start..start + n];
                    let mut out = vec![-7.0f32; n + 6];
                    k.run(xs, &mut out[start + 1..start + 1 + n]).expect("run");
                    for (i, x) in xs.iter().enumerate() {
                        assert!(same(out[start + 1 + i], f.reference()(*x)));
                    }
                    // nothing written outside
                    assert!(out[..start + 1].iter().all(|v| *v == -7.0));
                    assert!(out[start + 1 + n..].iter().all(|v| *v == -7.0));
                    // and the same window in place
                    let mut data = pool[..start + n + 1].to_vec();
                    k.run_in_place(&mut data[start..start + n]);
                    for (i, x) in xs.iter().enumerate() {
                        assert!(same(data[start + i], f.reference()(*x)), "in place");
                    }
                    assert_eq!(data[start + n].to_bits(), pool[start + n].to_bits());
                }
            }
        }
    }

    /// Every exp or erf body this host can run, by name: the arm, then each
    /// twin of the host's ISA whose CPU features the host has; and the
    /// names of this ISA's twins the host cannot run.
    fn host_bodies(f: Func) -> (Vec<(&'static str, ElementwiseKernel)>, Vec<&'static str>) {
        use weft_kernel::{Arm, Geometry, Host, Site};
        let host = Host::detect();
        let arm = super::super::arm::ElementwiseArm::new(f);
        let site = Site::new(arm.family(), Geometry::new().with("len", 64));
        let offer = arm.offer(&site, &host).expect("offer");
        let mut bodies = vec![(arm.name(), ElementwiseKernel::of_arm(f).expect("arm"))];
        let mut not_run = Vec::new();
        let twins = super::super::twins_of(f);
        for t in twins.iter().filter(|t| t.isa() == host.isa) {
            let code = match weft_validate::testing::emit_for_host(t.as_ref(), &offer, &host) {
                Ok(code) => code,
                Err(weft_kernel::Refusal::MissingFeature { .. }) => {
                    not_run.push(t.name());
                    continue;
                }
                Err(r) => panic!("{} does not emit: {r}", t.name()),
            };
            // SAFETY: an elementwise twin's body honours the elementwise
            // leaf ABI (its module's invariants).
            let k = unsafe { ElementwiseKernel::from_native(&code) }.expect("twin places");
            bodies.push((t.name(), k));
        }
        (bodies, not_run)
    }

    #[test]
    fn exp_in_place_with_slow_path_lanes_is_correctly_rounded() {
        // Each slow-path input at every position of every length 1..=40,
        // the window starting 0..=3 elements past a 64-byte boundary, run in
        // place; every element must be the reference's correctly rounded
        // exp of what it held, and the words either side must stay put.
        let (bodies, not_run) = host_bodies(Func::Exp);
        assert!(
            bodies.len() >= 2,
            "the arm and at least one twin: {not_run:?}"
        );
        if !not_run.is_empty() {
            eprintln!("this host lacks the features of {not_run:?}");
        }
        const GUARD: f32 = -7.0;
        for (name, k) in &bodies {
            for h in SLOW_EXP_INPUTS.map(f32::from_bits) {
                for len in 1..=40usize {
                    for offset in 0..=3usize {
                        for pos in 0..len {
                            let xs: Vec<f32> = (0..len)
                                .map(|i| if i == pos { h } else { i as f32 * 0.37 - 7.0 })
                                .collect();
                            let mut buf = vec![GUARD; len + 16 + offset + 1];
                            let s = weft_validate::align_up_elements(buf.as_ptr(), 64) + offset;
                            buf[s..s + len].copy_from_slice(&xs);
                            k.run_in_place(&mut buf[s..s + len]);
                            for (i, x) in xs.iter().enumerate() {
                                let want = exp_f32(*x);
                                assert!(
                                    same(buf[s + i], want),
                                    "{name} in place, len {len}, start +{offset}, \
                                     exp({:#010x}) at {i} (slow input at {pos}): \
                                     got {:#010x}, want {:#010x}",
                                    x.to_bits(),
                                    buf[s + i].to_bits(),
                                    want.to_bits()
                                );
                            }
                            assert!(buf[..s].iter().all(|v| *v == GUARD), "{name}");
                            assert!(buf[s + len..].iter().all(|v| *v == GUARD), "{name}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_elementwise_body_in_place_equals_separate_buffers() {
        let mut pool = hunting_inputs();
        for (k, h) in SLOW_EXP_INPUTS.map(f32::from_bits).into_iter().enumerate() {
            pool.insert(3 + 7 * k, h);
        }
        for f in Func::ALL {
            let (bodies, _) = host_bodies(f);
            for (name, k) in &bodies {
                for start in 0..4 {
                    for n in 0..=40 {
                        let xs = &pool[start..start + n];
                        let mut apart = vec![0f32; n];
                        k.run(xs, &mut apart).expect("run");
                        let mut data = xs.to_vec();
                        k.run_in_place(&mut data);
                        for i in 0..n {
                            assert_eq!(
                                data[i].to_bits(),
                                apart[i].to_bits(),
                                "{name}: {}({:#010x}) len {n} at {i}",
                                f.name(),
                                xs[i].to_bits()
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn arms_cross_compile_for_the_other_isa() {
        let host = Arch::host().expect("supported host");
        let target = Target::baseline(host.other()).expect("target");
        for f in Func::ALL {
            match compile(&target, f) {
                Ok(code) => assert!(!code.bytes.is_empty()),
                // x64 baseline (no SSE4.1) has no vector floor for erf:
                // a named error, not a crash.
                Err(e) => assert!(host.other() == Arch::X86_64 && f == Func::Erf, "{f:?}: {e}"),
            }
        }
    }

    /// An elementwise-ABI exp body built only from the public emitters:
    /// `emit_exp_f32x4` over whole vectors, `emit_exp_f32` for the tail.
    fn helper_exp_kernel() -> ElementwiseKernel {
        use cranelift_codegen::ir::condcodes::IntCC;
        use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData};
        use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
        use weft_libm::clif::{emit_exp_f32, emit_exp_f32x4};
        let target = Target::host().expect("host");
        let ptr = target.pointer_type();
        let mut func = target.leaf_function("exp_helpers");
        let mut fctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut fctx);
        let (entry, vhead, vbody, shead, sbody, exit) = (
            b.create_block(),
            b.create_block(),
            b.create_block(),
            b.create_block(),
            b.create_block(),
            b.create_block(),
        );
        let i = b.declare_var(ptr);
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let args = b.block_params(entry)[0];
        let t = MemFlagsData::trusted();
        let input = b.ins().load(ptr, t, args, 0);
        let output = b.ins().load(ptr, t, args, 8);
        let len = b.ins().load(ptr, t, args, 16);
        let table = b.ins().load(ptr, t, args, 24);
        let zero = b.ins().iconst(ptr, 0);
        b.def_var(i, zero);
        b.ins().jump(vhead, &[]);
        b.switch_to_block(vhead);
        let iv = b.use_var(i);
        let i4 = b.ins().iadd_imm_s(iv, 4);
        let fits = b.ins().icmp(IntCC::UnsignedLessThanOrEqual, i4, len);
        b.ins().brif(fits, vbody, &[], shead, &[]);
        b.switch_to_block(vbody);
        let iv = b.use_var(i);
        let off = b.ins().ishl_imm_u(iv, 2);
        let src = b.ins().iadd(input, off);
        let dst = b.ins().iadd(output, off);
        let x = b.ins().load(types::F32X4, MemFlagsData::new(), src, 0);
        let y = emit_exp_f32x4(&mut b, ptr, table, x);
        b.ins().store(MemFlagsData::new(), y, dst, 0);
        let next = b.ins().iadd_imm_s(iv, 4);
        b.def_var(i, next);
        b.ins().jump(vhead, &[]);
        b.switch_to_block(shead);
        let iv = b.use_var(i);
        let more = b.ins().icmp(IntCC::UnsignedLessThan, iv, len);
        b.ins().brif(more, sbody, &[], exit, &[]);
        b.switch_to_block(sbody);
        let iv = b.use_var(i);
        let off = b.ins().ishl_imm_u(iv, 2);
        let src = b.ins().iadd(input, off);
        let dst = b.ins().iadd(output, off);
        let x = b.ins().load(types::F32, MemFlagsData::new(), src, 0);
        let y = emit_exp_f32(&mut b, table, x);
        b.ins().store(MemFlagsData::new(), y, dst, 0);
        let next = b.ins().iadd_imm_s(iv, 1);
        b.def_var(i, next);
        b.ins().jump(shead, &[]);
        b.switch_to_block(exit);
        b.ins().return_(&[]);
        b.seal_all_blocks();
        b.finalize(target.frontend_config());
        let code = target.compile(func).expect("compiles");
        let native = weft_kernel::NativeCode {
            isa: weft_managed::arm_build::host_isa(),
            bytes: code.bytes,
            pool: None,
            loops: Vec::new(),
        };
        // SAFETY: the body above reads `len` f32s at `input`, writes `len`
        // f32s at `output`, reads the table through `table`, and returns.
        unsafe { ElementwiseKernel::from_native(&native) }.expect("placed")
    }

    #[test]
    fn public_exp_emitters_match_reference_in_every_lane() {
        let k = helper_exp_kernel();
        check(&k, Func::Exp, &hunting_inputs());
        // Slow-path inputs in every lane of a vector and in the tail.
        for h in SLOW_EXP_INPUTS.map(f32::from_bits) {
            for pos in 0..7 {
                let mut xs: Vec<f32> = (0..7).map(|i| i as f32 * 0.37 - 1.0).collect();
                xs[pos] = h;
                check(&k, Func::Exp, &xs);
            }
        }
    }

    #[test]
    fn mismatched_lengths_are_refused() {
        let k = ElementwiseKernel::of_arm(Func::Exp).expect("arm");
        let mut out = [0f32; 3];
        let e = k.run(&[1.0, 2.0], &mut out).unwrap_err();
        assert_eq!(e.name(), "bad-operand");
    }
}

#[test]
#[ignore = "prints the exp arm's listing"]
fn print_exp_listing() {
    let t = weft_managed::Target::host().expect("host");
    let c = arm::compile(&t, Func::Exp).expect("compiles");
    println!("{}", c.listing);
}
