//! weft-validate end to end: tiny hand-emitted x64 bodies for a toy family
//! (`out[i] = in[i] * in[i]`), placed and run for real.
//!
//! The arm is a scalar `mulss` loop; the right twin is an AVX `vmulps` loop
//! with a scalar tail; the wrong twins copy the input, or write one element
//! past the end.

#![cfg(target_arch = "x86_64")]

use iced_x86::code_asm::*;
use weft_kernel::{
    Aliasing, ArithmeticContract, Contract, Feature, FmaUse, Geometry, Host, Isa, Judged, NanRule,
    NativeCode, Offer, ReductionOrder, Refusal, Twin,
};
use weft_validate::{validate, Outcome, UnaryF32, UnaryF32Inputs, Validation};

/// The toy family's argument struct.
#[repr(C)]
struct UnaryArgs {
    input: *const f32,
    output: *mut f32,
    len: usize,
}

const ARGS: &str = "test.UnaryArgs";

fn offer() -> Offer {
    Offer {
        contract: Contract {
            family: "test.square".into(),
            geometry: Geometry::new(),
            args: ARGS.into(),
            arithmetic: ArithmeticContract {
                accumulator_lanes: 1,
                reduction: ReductionOrder::None,
                fma: FmaUse::Never,
                nan: NanRule::ByClass,
                notes: "out[i] = in[i] * in[i], one rounding".into(),
            },
            aliasing: Aliasing::disjoint(),
        },
        packed: Vec::new(),
        views: None,
        loops: Vec::new(),
        flops: 0,
        bytes_moved: 0,
    }
}

fn validation() -> impl Validation<Args = UnaryArgs> {
    let inputs = UnaryF32Inputs::new(8)
        .with_boundaries(&[1.0, 1.844_674_4e19])
        .with_range(-4.0, 4.0);
    // SAFETY: `UnaryArgs` is the struct `test.UnaryArgs` and describes
    // exactly the two slices it is built from.
    unsafe {
        UnaryF32::new(ARGS, inputs, |input, output, len| UnaryArgs {
            input,
            output,
            len,
        })
    }
}

/// The register the leaf ABI's one argument arrives in.
fn arg_reg() -> AsmRegister64 {
    if cfg!(windows) {
        rcx
    } else {
        rdi
    }
}

/// How a toy body computes each element.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Body {
    /// Scalar `mulss` loop (the arm).
    ScalarSquare,
    /// AVX `vmulps` over 8 lanes, then a scalar tail (the right twin).
    VectorSquare,
    /// Copies the input: `in[i] * 1` (a wrong twin).
    Copy,
    /// Scalar square, but one element too many (a wrong twin).
    Overrun,
    /// Scalar square, then the same loop again over the input: right with
    /// separate buffers, `in^4` in place (wrong only in place, as the exp
    /// arm once was).
    SquareTwice,
}

fn emit(body: Body) -> Result<Vec<u8>, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    let p = arg_reg();
    a.mov(rax, qword_ptr(p))?;
    a.mov(rdx, qword_ptr(p + 8))?;
    a.mov(r8, qword_ptr(p + 16))?;
    if body == Body::Overrun {
        a.inc(r8)?;
    }
    let mut done = a.create_label();
    if body == Body::VectorSquare {
        let mut tail = a.create_label();
        let mut vec = a.create_label();
        a.cmp(r8, 8)?;
        a.jb(tail)?;
        a.set_label(&mut vec)?;
        a.vmovups(ymm0, ymmword_ptr(rax))?;
        a.vmulps(ymm0, ymm0, ymm0)?;
        a.vmovups(ymmword_ptr(rdx), ymm0)?;
        a.add(rax, 32)?;
        a.add(rdx, 32)?;
        a.sub(r8, 8)?;
        a.cmp(r8, 8)?;
        a.jae(vec)?;
        a.set_label(&mut tail)?;
    }
    let passes = if body == Body::SquareTwice { 2 } else { 1 };
    for pass in 0..passes {
        if pass > 0 {
            a.mov(rax, qword_ptr(p))?;
            a.mov(rdx, qword_ptr(p + 8))?;
            a.mov(r8, qword_ptr(p + 16))?;
        }
        let mut scalar = a.create_label();
        a.test(r8, r8)?;
        a.jz(done)?;
        a.set_label(&mut scalar)?;
        a.movss(xmm0, dword_ptr(rax))?;
        if body != Body::Copy {
            a.mulss(xmm0, xmm0)?;
        }
        a.movss(dword_ptr(rdx), xmm0)?;
        a.add(rax, 4)?;
        a.add(rdx, 4)?;
        a.dec(r8)?;
        a.jnz(scalar)?;
    }
    a.set_label(&mut done)?;
    if body == Body::VectorSquare {
        a.vzeroupper()?;
    }
    a.ret()?;
    a.assemble(0)
}

fn code(body: Body) -> NativeCode {
    NativeCode {
        isa: Isa::X86_64,
        bytes: emit(body).expect("toy body assembles"),
        pool: None,
        loops: Vec::new(),
    }
}

struct ToyTwin {
    name: &'static str,
    body: Option<Body>,
    requires: &'static [Feature],
}

// SAFETY: the toy bodies are leaf functions over `ToyArgs` (see their
// listings in this file); only their results may differ from the arm's.
unsafe impl Twin for ToyTwin {
    fn name(&self) -> &'static str {
        self.name
    }
    fn isa(&self) -> Isa {
        Isa::X86_64
    }
    fn requires(&self) -> &'static [Feature] {
        self.requires
    }
    fn emit(&self, _offer: &Offer) -> Result<NativeCode, Refusal> {
        match self.body {
            Some(b) => Ok(code(b)),
            None => panic!("this twin cannot emit"),
        }
    }
}

const RIGHT: ToyTwin = ToyTwin {
    name: "square.twin.avx",
    body: Some(Body::VectorSquare),
    requires: &[Feature::Avx],
};
const COPY: ToyTwin = ToyTwin {
    name: "square.twin.copy",
    body: Some(Body::Copy),
    requires: &[],
};
const OVERRUN: ToyTwin = ToyTwin {
    name: "square.twin.overrun",
    body: Some(Body::Overrun),
    requires: &[],
};

/// A right scalar twin, for pairing with a wrong arm.
const SCALAR: ToyTwin = ToyTwin {
    name: "square.twin.scalar",
    body: Some(Body::ScalarSquare),
    requires: &[],
};
const TWICE: ToyTwin = ToyTwin {
    name: "square.twin.twice",
    body: Some(Body::SquareTwice),
    requires: &[],
};

/// The toy offer with `input` and `output` allowed to be equal.
fn in_place_offer() -> Offer {
    let mut o = offer();
    o.contract.aliasing = Aliasing::disjoint().may_equal("input", "output");
    o
}

/// [`validate`] on the bytes the toy twin `t` emits for `offer`, beside
/// the toy arm `arm`'s: the judge is handed bytes, never a twin.
fn judge(t: &ToyTwin, arm: Body, offer: &Offer, host: &Host) -> Outcome {
    judge_code(t, &code(arm), offer, host)
}

fn judge_code(t: &ToyTwin, arm: &NativeCode, offer: &Offer, host: &Host) -> Outcome {
    let twin = t.emit(offer).expect("toy twins emit");
    validate(
        Judged {
            name: "square.arm.scalar",
            code: arm,
        },
        Judged {
            name: t.name,
            code: &twin,
        },
        offer,
        host,
        &validation(),
        1,
    )
}

fn host() -> Host {
    weft_kernel::Host::detect()
}

#[test]
#[cfg_attr(
    not(weft_host_has = "avx"),
    ignore = "needs avx, which this host lacks"
)]
fn a_right_twin_is_accepted() {
    let host = host();
    let outcome = judge(&RIGHT, Body::ScalarSquare, &offer(), &host);
    let verdict = outcome.into_result().expect("accepted");
    assert_eq!(verdict.twin, "square.twin.avx");
    assert_eq!(verdict.arm, "square.arm.scalar");
    assert_eq!(verdict.cases, 4 + 17 * 4);
    assert!(verdict.words > 4 * 8000, "{verdict:?}");
}

#[test]
fn a_wrong_twin_is_refused_with_the_first_mismatch() {
    let outcome = judge(&COPY, Body::ScalarSquare, &offer(), &host());
    // The pool starts with +0 (0*0 = +0 = the copy), then -0: the arm squares
    // it to +0, the copy keeps -0.
    match outcome {
        Outcome::Refused(Refusal::Mismatch {
            index,
            input,
            arm_bits,
            twin_bits,
        }) => {
            assert_eq!(index, 1);
            assert_eq!(arm_bits, 0x0000_0000);
            assert_eq!(twin_bits, 0x8000_0000);
            assert!(input.starts_with("in[1] = 0x80000000"), "{input}");
            assert!(input.contains("start +0"), "{input}");
        }
        other => panic!("expected a mismatch, got {other:?}"),
    }
}

#[test]
fn a_twin_writing_past_the_end_is_refused() {
    let outcome = judge(&OVERRUN, Body::ScalarSquare, &offer(), &host());
    let refusal = outcome.refusal().expect("refused").clone();
    assert_eq!(refusal.name(), "mismatch");
    let Refusal::Mismatch {
        input, twin_bits, ..
    } = refusal
    else {
        unreachable!()
    };
    assert!(input.starts_with("guard word 1 after the end"), "{input}");
    assert_ne!(twin_bits, u64::from(weft_validate::CANARY_F32));
}

#[test]
fn a_contract_for_another_struct_is_refused_before_running() {
    let mut offer = offer();
    offer.contract.args = "other.Args".into();
    let outcome = judge(&RIGHT, Body::ScalarSquare, &offer, &host());
    assert_eq!(outcome.refusal().map(Refusal::name), Some("bad-operand"));
}

#[test]
fn an_arm_for_another_isa_is_refused() {
    let mut arm = code(Body::ScalarSquare);
    arm.isa = Isa::Aarch64;
    let outcome = judge_code(&COPY, &arm, &offer(), &host());
    assert_eq!(outcome.refusal().map(Refusal::name), Some("wrong-isa"));
}

#[test]
fn an_arm_wrong_only_in_place_is_refused_naming_the_arm() {
    // The twin is right; the arm squares twice, which only shows in place.
    let outcome = judge(&SCALAR, Body::SquareTwice, &in_place_offer(), &host());
    match outcome {
        Outcome::Refused(Refusal::InPlaceMismatch {
            kernel,
            operands,
            index,
            input,
            separate_bits,
            in_place_bits,
        }) => {
            assert_eq!(kernel, "square.arm.scalar");
            assert_eq!(operands, "input = output");
            // Pool: +0, -0, +1, -1, ...: +1 and -1 square to 1 either way,
            // so the first word to differ is a value other than 0 and ±1.
            assert!(input.starts_with(&format!("in[{index}]")), "{input}");
            let hex = input.split("= 0x").nth(1).expect("input bits");
            let x = f32::from_bits(u32::from_str_radix(&hex[..8], 16).expect("hex"));
            assert_eq!(separate_bits, u64::from((x * x).to_bits()), "{input}");
            assert_eq!(
                in_place_bits,
                u64::from((x * x * (x * x)).to_bits()),
                "{input}"
            );
        }
        other => panic!("expected an in-place mismatch, got {other:?}"),
    }
}

#[test]
fn a_twin_wrong_only_in_place_is_refused_naming_the_twin() {
    let outcome = judge(&TWICE, Body::ScalarSquare, &in_place_offer(), &host());
    let refusal = outcome.refusal().expect("refused");
    assert_eq!(refusal.name(), "in-place-mismatch", "{refusal}");
    let Refusal::InPlaceMismatch { kernel, .. } = refusal else {
        unreachable!()
    };
    assert_eq!(kernel, "square.twin.twice");
    assert!(refusal.is_fault_of_the_bytes());
}

#[test]
fn a_contract_that_declares_no_aliasing_is_never_called_in_place() {
    // Both wrong only in place; a disjoint contract never runs them so.
    let outcome = judge(&TWICE, Body::SquareTwice, &offer(), &host());
    let verdict = outcome.into_result().expect("accepted");
    assert_eq!(verdict.cases, 4 + 17 * 4, "no in-place cases");
    // Declared, the same pair doubles the cases and passes with right bodies.
    let verdict = judge(&SCALAR, Body::ScalarSquare, &in_place_offer(), &host())
        .into_result()
        .expect("accepted in place");
    assert_eq!(verdict.cases, 2 * (4 + 17 * 4));
}

#[test]
fn a_declared_pair_the_validation_cannot_run_is_refused_before_running() {
    let mut o = offer();
    o.contract.aliasing = Aliasing::disjoint().may_equal("input", "len");
    let outcome = judge(&SCALAR, Body::ScalarSquare, &o, &host());
    assert_eq!(
        outcome.refusal(),
        Some(&Refusal::AliasingUnvalidated {
            a: "input".into(),
            b: "len".into()
        })
    );
}
