//! Entry and exit: the frames for SysV and Win64, checked three ways: the
//! listing (snapshot), running the function (through `extern "win64"` for
//! Win64, on any host), and a machine-code caller thunk that plants
//! sentinels in every callee-saved register, calls the function, and dumps
//! the registers afterwards.

#![cfg(target_arch = "x86_64")]

mod common;

use weft_x64::iced_x86::code_asm::registers::xmm::get_xmm;
use weft_x64::iced_x86::code_asm::*;
use weft_x64::iced_x86::Register;
use weft_x64::{Abi, Clobbers, EmitError, Emitter};

/// The argument struct of the summing function.
#[repr(C)]
struct SumArgs {
    ints: [u64; 8],
    floats: [f64; 10],
    float_sum: *mut f64,
}

const FLOATS_OFFSET: i32 = 64;
const FLOAT_SUM_OFFSET: i32 = 64 + 80;

fn xmm(n: u32) -> AsmRegisterXmm {
    get_xmm(Register::XMM0 + n).expect("xmm register")
}

/// The GPRs the summing body overwrites: every callee-saved GPR of `abi`.
fn sum_gprs(abi: Abi) -> Vec<AsmRegister64> {
    abi.callee_saved_gprs()
        .iter()
        .map(|r| weft_x64::iced_x86::code_asm::registers::gpr64::get_gpr64(*r).expect("gpr"))
        .collect()
}

/// A function that loads each int field into a callee-saved GPR and each
/// float into xmm6..xmm15, returns the int sum in rax and stores the float
/// sum (added in field order) through `float_sum`.
fn emit_sum(abi: Abi, clobbers: Clobbers) -> Result<weft_x64::Emitted, EmitError> {
    let mut e = Emitter::new(abi)?;
    e.prologue(clobbers)?;
    let args = e.args_reg();
    let gprs = sum_gprs(abi);
    for (i, r) in gprs.iter().enumerate() {
        e.asm().mov(*r, qword_ptr(args + 8 * i as i32))?;
    }
    e.asm().xor(eax, eax)?;
    for r in &gprs {
        e.asm().add(rax, *r)?;
    }
    for j in 0..10 {
        e.asm()
            .vmovsd(xmm(6 + j), qword_ptr(args + FLOATS_OFFSET + 8 * j as i32))?;
    }
    e.asm().vxorpd(xmm0, xmm0, xmm0)?;
    for j in 0..10 {
        e.asm().vaddsd(xmm0, xmm0, xmm(6 + j))?;
    }
    e.load_arg(rdx, FLOAT_SUM_OFFSET)?;
    e.asm().vmovsd(qword_ptr(rdx), xmm0)?;
    e.epilogue()?;
    e.finish()
}

fn declare_sum_clobbers(abi: Abi) -> Clobbers {
    let mut c = Clobbers::none().with(rax).with(rdx).with(xmm0);
    for r in sum_gprs(abi) {
        c = c.with(r);
    }
    for j in 6..16 {
        c = c.with(xmm(j));
    }
    c
}

fn sum_args(float_sum: &mut f64) -> SumArgs {
    SumArgs {
        ints: [1, 20, 300, 4_000, 50_000, 600_000, 7_000_000, 80_000_000],
        floats: [0.5, 1.25, -2.0, 3.5, 1e10, -1e10, 0.125, 7.0, 8.0, 9.75],
        float_sum,
    }
}

fn expected_sums(abi: Abi, args: &SumArgs) -> (u64, f64) {
    let n = sum_gprs(abi).len();
    let ints = args.ints[..n].iter().sum();
    let floats = args.floats.iter().fold(0.0, |acc, x| acc + x);
    (ints, floats)
}

#[test]
fn win64_frame_saves_rdi_rsi_and_xmm6_to_xmm15_listing() {
    let emitted = emit_sum(Abi::Win64, declare_sum_clobbers(Abi::Win64)).expect("emit");
    insta::assert_snapshot!("win64_sum", emitted.listing.to_string());
    // Conservative declaration gives the same frame.
    let all = emit_sum(Abi::Win64, Clobbers::all()).expect("emit");
    assert_eq!(all.bytes, emitted.bytes);
    let text = emitted.listing.texts();
    for r in ["rbx", "rbp", "rdi", "rsi", "r12", "r13", "r14", "r15"] {
        assert!(text.contains(&format!("push {r}").as_str()), "push {r}");
        assert!(text.contains(&format!("pop {r}").as_str()), "pop {r}");
    }
    for j in 6..16 {
        let slot = if j == 6 {
            "[rsp]".to_string()
        } else {
            format!("[rsp+0x{:x}]", 16 * (j - 6))
        };
        assert!(
            text.contains(&format!("vmovaps {slot}, xmm{j}").as_str()),
            "spill xmm{j}"
        );
        assert!(
            text.contains(&format!("vmovaps xmm{j}, {slot}").as_str()),
            "restore xmm{j}"
        );
    }
    // 8 pushes keep rsp = 8 (mod 16): the spill area is 10*16 + 8.
    assert!(text.contains(&"sub rsp, 0xa8"));
}

#[test]
fn sysv_frame_saves_only_rbx_rbp_r12_to_r15_listing() {
    let emitted = emit_sum(Abi::SysV, declare_sum_clobbers(Abi::SysV)).expect("emit");
    insta::assert_snapshot!("sysv_sum", emitted.listing.to_string());
    let all = emit_sum(Abi::SysV, Clobbers::all()).expect("emit");
    assert_eq!(all.bytes, emitted.bytes);
    let text = emitted.listing.to_string();
    assert!(!text.contains("vmovaps"), "SysV spills no xmm");
    assert!(!text.contains("push rdi") && !text.contains("push rsi"));
}

#[test]
fn frame_pushes_only_what_is_declared() {
    let mut e = Emitter::new(Abi::Win64).expect("emitter");
    e.prologue(Clobbers::none().with(r12d).with(ymm9).with(xmm2))
        .expect("prologue");
    e.asm().mov(r12d, 1).expect("mov");
    e.asm().vxorps(ymm9, ymm9, ymm9).expect("vxorps");
    e.epilogue().expect("epilogue");
    let emitted = e.finish().expect("finish");
    insta::assert_snapshot!("win64_minimal_frame", emitted.listing.to_string());
    // One push (rsp = 0 mod 16) so the single spill slot needs no padding.
    assert!(emitted.listing.texts().contains(&"sub rsp, 0x10"));
}

#[test]
fn win64_sum_runs_through_extern_win64() {
    let emitted = emit_sum(Abi::Win64, declare_sum_clobbers(Abi::Win64)).expect("emit");
    let code = common::place(&emitted.bytes);
    // SAFETY: the bytes are a complete Win64 function taking one pointer to
    // a SumArgs and returning u64; `code` stays mapped for the calls.
    let f: extern "win64" fn(*const SumArgs) -> u64 = unsafe { std::mem::transmute(code.as_ptr()) };
    for round in 0..1000u64 {
        let mut float_sum = f64::NAN;
        let mut args = sum_args(&mut float_sum);
        args.ints[0] = round;
        let (ints, floats) = expected_sums(Abi::Win64, &args);
        assert_eq!(f(&args), ints);
        assert_eq!(float_sum.to_bits(), floats.to_bits());
    }
}

#[test]
fn sysv_sum_runs_through_extern_sysv64() {
    let emitted = emit_sum(Abi::SysV, declare_sum_clobbers(Abi::SysV)).expect("emit");
    let code = common::place(&emitted.bytes);
    // SAFETY: a complete SysV function taking one pointer to a SumArgs and
    // returning u64; `code` stays mapped for the call.
    let f: extern "sysv64" fn(*const SumArgs) -> u64 =
        unsafe { std::mem::transmute(code.as_ptr()) };
    let mut float_sum = f64::NAN;
    let args = sum_args(&mut float_sum);
    let (ints, floats) = expected_sums(Abi::SysV, &args);
    assert_eq!(f(&args), ints);
    assert_eq!(float_sum.to_bits(), floats.to_bits());
}

/// Registers after the call, as the thunk dumps them.
#[repr(C)]
#[derive(Debug, Default)]
struct RegisterDump {
    /// rbx, rbp, rdi, rsi, r12, r13, r14, r15.
    gprs: [u64; 8],
    /// xmm6..xmm15, low 128 bits, as (low, high) quadwords.
    xmms: [[u64; 2]; 10],
}

const DUMP_GPRS: [AsmRegister64; 8] = [rbx, rbp, rdi, rsi, r12, r13, r14, r15];
const DUMP_GPR_NAMES: [&str; 8] = ["rbx", "rbp", "rdi", "rsi", "r12", "r13", "r14", "r15"];

fn gpr_sentinel(i: usize) -> u64 {
    0x5e47_1e00_0000_0000 | (i as u64 * 0x0101_0101)
}

fn xmm_sentinel(j: usize) -> [u64; 2] {
    [
        0xa11c_e000_0000_0000 | j as u64,
        0xb0b0_0000_0000_0000 | (j as u64) << 8,
    ]
}

/// A SysV function `thunk(callee, args, dump) -> u64` that sets every
/// register of [`RegisterDump`] to its sentinel, calls `callee(args)` with
/// `callee_abi` (32-byte shadow space, rsp 16-byte aligned at the call),
/// dumps the registers and returns the callee's rax.
fn emit_thunk(callee_abi: Abi) -> Result<weft_x64::Emitted, EmitError> {
    let mut e = Emitter::new(Abi::SysV)?;
    let mut clobbers = Clobbers::none();
    for r in DUMP_GPRS {
        clobbers = clobbers.with(r);
    }
    e.prologue(clobbers)?; // 6 pushes: rsp = 8 (mod 16)
    let a = e.asm();
    a.sub(rsp, 56)?; // rsp = 0 (mod 16); [rsp+0..32) shadow, [rsp+32] dump, [rsp+40] result
    a.mov(qword_ptr(rsp + 32), rdx)?;
    a.mov(rax, rdi)?;
    a.mov(r11, rsi)?;
    for (i, r) in DUMP_GPRS.iter().enumerate() {
        a.mov(*r, gpr_sentinel(i))?;
    }
    for j in 0..10 {
        let [lo, hi] = xmm_sentinel(j);
        let x = xmm(6 + j as u32);
        a.mov(r10, lo)?;
        a.vmovq(x, r10)?;
        a.mov(r10, hi)?;
        a.vpinsrq(x, x, r10, 1)?;
    }
    a.mov(callee_abi.args_reg(), r11)?;
    a.call(rax)?;
    a.mov(qword_ptr(rsp + 40), rax)?;
    a.mov(rax, qword_ptr(rsp + 32))?;
    for (i, r) in DUMP_GPRS.iter().enumerate() {
        a.mov(qword_ptr(rax + 8 * i as i32), *r)?;
    }
    for j in 0..10 {
        a.vmovdqu(xmmword_ptr(rax + 64 + 16 * j), xmm(6 + j as u32))?;
    }
    a.mov(rax, qword_ptr(rsp + 40))?;
    a.add(rsp, 56)?;
    e.epilogue()?;
    e.finish()
}

type Thunk = extern "sysv64" fn(*const u8, *const SumArgs, *mut RegisterDump) -> u64;

fn run_through_thunk(callee_abi: Abi, callee: &[u8], args: &SumArgs) -> (u64, RegisterDump) {
    let thunk = emit_thunk(callee_abi).expect("thunk");
    let thunk_code = common::place(&thunk.bytes);
    let callee_code = common::place(callee);
    // SAFETY: the thunk is a complete SysV function with this signature; it
    // calls `callee` (a complete function of `callee_abi` taking a
    // *const SumArgs) and writes one RegisterDump through the third pointer.
    let thunk: Thunk = unsafe { std::mem::transmute(thunk_code.as_ptr()) };
    let mut dump = RegisterDump::default();
    let result = thunk(callee_code.as_ptr(), args, &mut dump);
    (result, dump)
}

#[test]
fn win64_callee_preserves_every_callee_saved_register() {
    let callee = emit_sum(Abi::Win64, declare_sum_clobbers(Abi::Win64)).expect("emit");
    let mut float_sum = 0.0;
    let args = sum_args(&mut float_sum);
    let (result, dump) = run_through_thunk(Abi::Win64, &callee.bytes, &args);
    let (ints, floats) = expected_sums(Abi::Win64, &args);
    assert_eq!(result, ints);
    assert_eq!(float_sum.to_bits(), floats.to_bits());
    for (i, name) in DUMP_GPR_NAMES.iter().enumerate() {
        assert_eq!(dump.gprs[i], gpr_sentinel(i), "{name} not preserved");
    }
    for j in 0..10 {
        assert_eq!(dump.xmms[j], xmm_sentinel(j), "xmm{} not preserved", j + 6);
    }
}

#[test]
fn sysv_callee_preserves_rbx_rbp_r12_to_r15() {
    let callee = emit_sum(Abi::SysV, declare_sum_clobbers(Abi::SysV)).expect("emit");
    let mut float_sum = 0.0;
    let args = sum_args(&mut float_sum);
    let (result, dump) = run_through_thunk(Abi::SysV, &callee.bytes, &args);
    assert_eq!(result, expected_sums(Abi::SysV, &args).0);
    for (i, name) in DUMP_GPR_NAMES.iter().enumerate() {
        if !matches!(*name, "rdi" | "rsi") {
            assert_eq!(dump.gprs[i], gpr_sentinel(i), "{name} not preserved");
        }
    }
}

/// Negative control: the thunk does notice a callee that trashes rbx and
/// xmm9 (built with the raw CodeAssembler, since the façade refuses it).
#[test]
fn thunk_detects_a_callee_that_trashes_registers() {
    let mut a = CodeAssembler::new(64).expect("asm");
    a.xor(ebx, ebx).expect("xor");
    a.vpxor(xmm9, xmm9, xmm9).expect("vpxor");
    a.ret().expect("ret");
    let bad = a.assemble(0).expect("assemble");
    let mut float_sum = 0.0;
    let args = sum_args(&mut float_sum);
    let (_, dump) = run_through_thunk(Abi::Win64, &bad, &args);
    assert_eq!(dump.gprs[0], 0, "rbx trashed");
    assert_eq!(dump.xmms[3], [0, 0], "xmm9 trashed");
    assert_eq!(dump.gprs[1], gpr_sentinel(1), "rbp untouched");
    // The thunk's own SysV frame hands Rust back its rbx; xmm9 is volatile
    // for the SysV caller (this test), so nothing leaks out.
}

#[test]
fn undeclared_callee_saved_writes_are_refused() {
    // SysV: rbx written, not declared.
    let mut e = Emitter::new(Abi::SysV).expect("emitter");
    e.prologue(Clobbers::none().with(r12)).expect("prologue");
    e.asm().mov(bl, 1).expect("mov");
    e.epilogue().expect("epilogue");
    match e.finish() {
        Err(EmitError::UndeclaredClobber {
            register,
            abi,
            instruction,
            ..
        }) => {
            assert_eq!(register, "rbx");
            assert_eq!(abi, Abi::SysV);
            assert_eq!(instruction, "mov bl,1");
        }
        other => panic!("expected UndeclaredClobber, got {other:?}"),
    }
    // Win64: xmm7 (via ymm7) written, not declared; no prologue at all.
    let mut e = Emitter::new(Abi::Win64).expect("emitter");
    e.asm().vaddps(ymm7, ymm0, ymm1).expect("vaddps");
    e.epilogue().expect("epilogue");
    let err = e.finish().expect_err("must refuse");
    assert!(err.to_string().contains("zmm7"), "{err}");
    // Win64: rsi is callee-saved there.
    let mut e = Emitter::new(Abi::Win64).expect("emitter");
    e.asm().mov(rsi, rcx).expect("mov");
    e.epilogue().expect("epilogue");
    assert!(matches!(
        e.finish(),
        Err(EmitError::UndeclaredClobber { .. })
    ));
}

#[test]
fn volatile_writes_and_vzeroupper_need_no_declaration() {
    // SysV: every vector register and rdi/rsi are volatile.
    let mut e = Emitter::new(Abi::SysV).expect("emitter");
    e.asm().vaddps(zmm7, zmm0, zmm1).expect("vaddps");
    e.asm().mov(rsi, rdi).expect("mov");
    e.epilogue().expect("epilogue");
    e.finish().expect("SysV body is fine");
    // Win64: xmm0-5, zmm16-31, rax/rcx/rdx/r8-r11 are volatile; vzeroupper
    // touches only upper halves, which Win64 does not preserve.
    let mut e = Emitter::new(Abi::Win64).expect("emitter");
    e.asm().vaddps(zmm16, zmm0, zmm5).expect("vaddps");
    e.asm().mov(r11, rcx).expect("mov");
    e.asm().vzeroupper().expect("vzeroupper");
    e.epilogue().expect("epilogue");
    e.finish().expect("Win64 body is fine");
}

#[test]
fn prologue_twice_or_after_an_epilogue_is_an_error() {
    let mut e = Emitter::new(Abi::SysV).expect("emitter");
    e.prologue(Clobbers::none()).expect("first");
    assert!(matches!(
        e.prologue(Clobbers::none()),
        Err(EmitError::FrameOrder { .. })
    ));
    let mut e = Emitter::new(Abi::SysV).expect("emitter");
    e.epilogue().expect("bare exit");
    let err = e.prologue(Clobbers::all()).expect_err("after an exit");
    assert!(err.to_string().contains("after an epilogue"), "{err}");
}

#[test]
fn args_reg_follows_the_abi() {
    assert_eq!(Abi::SysV.args_reg(), rdi);
    assert_eq!(Abi::Win64.args_reg(), rcx);
    assert_eq!(
        Abi::host(),
        if cfg!(windows) { Abi::Win64 } else { Abi::SysV }
    );
    let mut e = Emitter::new(Abi::Win64).expect("emitter");
    e.load_arg(rax, 0x18).expect("load_arg");
    e.asm().ret().expect("ret");
    assert_eq!(
        e.finish().expect("finish").listing.texts(),
        ["mov rax, [rcx+0x18]", "ret"]
    );
}
