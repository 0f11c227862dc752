use super::*;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};

/// args: [a: i64, b: i64, out: *mut i64]; out[0] = a * b + 3.
fn mul_add_fn(target: &Target) -> Function {
    let mut func = target.leaf_function("mul_add");
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let args = b.block_params(entry)[0];
    let flags = MemFlagsData::trusted();
    let a = b.ins().load(types::I64, flags, args, 0);
    let bb = b.ins().load(types::I64, flags, args, 8);
    let out = b.ins().load(target.pointer_type(), flags, args, 16);
    let p = b.ins().imul(a, bb);
    let r = b.ins().iadd_imm_s(p, 3);
    b.ins().store(flags, r, out, 0);
    b.ins().return_(&[]);
    b.finalize(target.frontend_config());
    func
}

#[repr(C)]
struct MulAddArgs {
    a: i64,
    b: i64,
    out: *mut i64,
}

#[test]
fn compile_place_call() {
    let target = Target::host().expect("host target");
    let code = target.compile(mul_add_fn(&target)).expect("compiles");
    assert!(!code.bytes.is_empty());
    assert!(!code.listing.is_empty());
    let placed = code.place().expect("places");
    let mut out = 0i64;
    let args = MulAddArgs {
        a: 6,
        b: -7,
        out: &mut out,
    };
    // SAFETY: the placed code is the leaf `extern "C" fn(*const MulAddArgs)`
    // built above; it reads three fields and writes one i64 through `out`.
    let f: extern "C" fn(*const MulAddArgs) = unsafe { std::mem::transmute(placed.entry()) };
    f(&args);
    assert_eq!(out, -39);
}

#[test]
fn cross_compile_other_isa() {
    let host = Arch::host().expect("supported host");
    let target = Target::baseline(host.other()).expect("other target");
    let code = target.compile(mul_add_fn(&target)).expect("compiles");
    assert_eq!(code.arch, host.other());
    assert!(code.bytes.len() >= 8);
    if code.arch == Arch::Aarch64 {
        // Every A64 instruction is one 32-bit word, ending in `ret`.
        assert_eq!(code.bytes.len() % 4, 0);
        assert!(code.listing.contains("c0 03 5f d6  "), "{}", code.listing);
        assert!(code.listing.contains(" ret"), "{}", code.listing);
    } else {
        assert!(code.listing.contains("ret"), "{}", code.listing);
    }
    assert!(matches!(
        code.place(),
        Err(ManagedError::ForeignCode { .. })
    ));
}

/// f16 arithmetic on aarch64 (and x64 without the right features) makes
/// Cranelift panic or error; either way we get a named error, not a crash.
#[test]
fn contained_panic_is_named() {
    let target = Target::baseline(Arch::Aarch64).expect("aarch64 target");
    let mut func = target.leaf_function("f16_add");
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let args = b.block_params(entry)[0];
    let flags = MemFlagsData::trusted();
    let x = b.ins().load(types::F16, flags, args, 0);
    let y = b.ins().fadd(x, x);
    b.ins().store(flags, y, args, 2);
    b.ins().return_(&[]);
    b.finalize(target.frontend_config());
    match target.compile(func) {
        Err(ManagedError::CodegenPanicked { function, message }) => {
            assert!(function.contains("f16_add"));
            assert!(!message.is_empty());
        }
        other => panic!("expected CodegenPanicked, got {other:?}"),
    }
}

#[test]
fn quietly_contains_and_passes_through() {
    assert_eq!(quietly(|| 5), Ok(5));
    let e = quietly(|| -> i32 { panic!("boom {}", 1) }).unwrap_err();
    assert!(e.starts_with("boom 1"), "{e}");
}
