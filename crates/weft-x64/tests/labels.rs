//! Labels, label offsets, the counted-loop helper, and iced errors arriving
//! as typed EmitErrors.

#![cfg(target_arch = "x86_64")]

mod common;

use weft_x64::iced_x86::code_asm::*;
use weft_x64::{Abi, EmitError, Emitter};

#[repr(C)]
struct LoopArgs {
    n: u64,
    out: *mut u64,
}

/// `*out = n + (n-1) + ... + 1`, counting `rcx`/`r9` down with
/// `counted_loop`.
fn emit_triangle(abi: Abi) -> Result<weft_x64::Emitted, EmitError> {
    let mut e = Emitter::new(abi)?;
    e.load_arg(r9, 0)?;
    e.load_arg(r8, 8)?;
    e.asm().xor(eax, eax)?;
    e.counted_loop(r9, |e| {
        e.asm().add(rax, r9)?;
        Ok(())
    })?;
    e.asm().mov(qword_ptr(r8), rax)?;
    e.epilogue()?;
    e.finish()
}

#[test]
fn counted_loop_runs_the_body_count_times() {
    let emitted = emit_triangle(Abi::host()).expect("emit");
    insta::assert_snapshot!("counted_loop", emitted.listing.to_string());
    let code = common::place(&emitted.bytes);
    // SAFETY: a complete host-ABI function taking one *const LoopArgs that
    // writes one u64 through `out`.
    let f: extern "C" fn(*const LoopArgs) = unsafe { std::mem::transmute(code.as_ptr()) };
    for n in [0u64, 1, 2, 3, 10, 1000] {
        let mut out = u64::MAX;
        f(&LoopArgs { n, out: &mut out });
        assert_eq!(out, n * (n + 1) / 2, "n = {n}");
    }
}

#[test]
fn label_offsets_match_the_listing() {
    let mut e = Emitter::new(Abi::SysV).expect("emitter");
    let mut skip = e.create_label();
    let mut after_nops = e.create_label();
    let never_set = e.create_label();
    e.asm().xor(eax, eax).expect("xor");
    e.asm().jmp(skip).expect("jmp");
    e.asm().nops_with_size(7).expect("nops");
    e.set_label(&mut after_nops).expect("label");
    e.asm().inc(eax).expect("inc");
    e.set_label(&mut skip).expect("label");
    e.asm().ret().expect("ret");
    let emitted = e.finish().expect("finish");
    let offset_of = |text: &str| {
        emitted
            .listing
            .lines
            .iter()
            .find(|l| l.text == text)
            .map(|l| l.offset)
            .expect("instruction in listing")
    };
    assert_eq!(emitted.label_offset(&skip), Some(offset_of("ret")));
    assert_eq!(
        emitted.label_offset(&after_nops),
        Some(offset_of("inc eax"))
    );
    assert_eq!(emitted.label_offset(&never_set), None);
}

#[test]
fn iced_errors_arrive_as_emit_errors() {
    // A label set twice.
    let mut e = Emitter::new(Abi::SysV).expect("emitter");
    let mut l = e.create_label();
    e.set_label(&mut l).expect("first");
    e.asm().nop().expect("nop");
    let err = e.set_label(&mut l).expect_err("second set_label");
    assert!(matches!(err, EmitError::Iced { .. }), "{err:?}");
    assert!(err.to_string().contains("set_label"), "{err}");

    // A label left dangling at the end.
    let mut e = Emitter::new(Abi::SysV).expect("emitter");
    e.asm().ret().expect("ret");
    let mut l = e.create_label();
    e.set_label(&mut l).expect("set");
    let err = e.finish().expect_err("dangling label");
    assert!(matches!(err, EmitError::Iced { .. }), "{err:?}");

    // An instruction iced cannot encode: a pending prefix with nothing after it.
    let mut e = Emitter::new(Abi::SysV).expect("emitter");
    let _ = e.asm().lock();
    assert!(matches!(e.finish(), Err(EmitError::Iced { .. })));
}
