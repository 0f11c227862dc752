//! The fast route for emitted A64 bytes on any host: each test wraps a kernel
//! in a tiny static AArch64 ELF (fixed hand-written entry stub + kernel +
//! data, see `support/a64_elf.rs`) and runs it under `qemu-aarch64 -cpu max`,
//! then compares what the kernel wrote with values computed in Rust.
//!
//! Needs qemu-user (`apt-get install qemu-user`); without it every test here
//! fails with a message saying so, unless `WEFT_SKIP_QEMU=1` is set. On an
//! AArch64 Linux host without qemu the images run natively.
//!
//! The first tests prove the runner itself with hand-written words (so a bug
//! in weft-a64 cannot hide a bug in the harness, nor the other way round);
//! the kernel tests then run code emitted by weft-a64.
// Runs a child process and sets Unix file modes: Unix hosts only.
#![cfg(unix)]

#[path = "support/a64_elf.rs"]
mod a64_elf;
#[path = "support/a64_kernels.rs"]
mod a64_kernels;

use a64_kernels::{inputs, same};

use std::time::Duration;

use a64_elf::{choose_runner, runner, words, Image, RunError, MISSING_QEMU};

// Hand-written kernels, as words (encodings checked with llvm-mc 14).
const RET: u32 = 0xd65f_03c0; // ret

/// out[i] = fma(a[i], b[i], c[i]) for `FmaArgs`: fmla over 4S, then a
/// scalar fmadd tail.
const HAND_FMA: [u32; 21] = [
    0xa940_0801, // ldp  x1, x2, [x0]        ; a, b
    0xa941_1003, // ldp  x3, x4, [x0, #16]   ; c, out
    0xf940_1005, // ldr  x5, [x0, #32]       ; len
    0xf100_10bf, // vec: cmp x5, #4
    0x5400_0103, // b.lo tail                ; +0x20
    0x4cdf_7820, // ld1  {v0.4s}, [x1], #16
    0x4cdf_7841, // ld1  {v1.4s}, [x2], #16
    0x4cdf_7862, // ld1  {v2.4s}, [x3], #16
    0x4e21_cc02, // fmla v2.4s, v0.4s, v1.4s
    0x4c9f_7882, // st1  {v2.4s}, [x4], #16
    0xd100_10a5, // sub  x5, x5, #4
    0x17ff_fff8, // b    vec                 ; -0x20
    0xb400_0105, // tail: cbz x5, done       ; +0x20
    0xbc40_4420, // ldr  s0, [x1], #4
    0xbc40_4441, // ldr  s1, [x2], #4
    0xbc40_4462, // ldr  s2, [x3], #4
    0x1f01_0802, // fmadd s2, s0, s1, s2
    0xbc00_4482, // str  s2, [x4], #4
    0xf100_04a5, // subs x5, x5, #1
    0x54ff_ff21, // b.ne tail                ; -0x1c
    0xd65f_03c0, // done: ret
];

/// Run an `FmaArgs { a, b, c, out, len }` kernel on `n` elements, each
/// array starting at its own offset from a 64-byte boundary, and compare
/// every output with Rust's `f32::mul_add` (fused, correctly rounded).
fn check_fma(runner: &a64_elf::Runner, kernel: &[u8], n: usize, skews: [usize; 4]) {
    let (a, b, c) = (
        inputs(n, 1 + n as u64),
        inputs(n, 100 + n as u64),
        inputs(n, 200 + n as u64),
    );
    let mut img = Image::new(kernel);
    let ra = img.input_f32(&a, skews[0]);
    let rb = img.input_f32(&b, skews[1]);
    let rc = img.input_f32(&c, skews[2]);
    let ro = img.output(4 * n, 0xee, skews[3]);
    img.set_args(&[ra.addr, rb.addr, rc.addr, ro.addr, n as u64]);
    let out = img
        .run(runner)
        .unwrap_or_else(|e| panic!("len {n}, skews {skews:?}: {e}"));
    let got = out.f32s(ro);
    for i in 0..n {
        let want = a[i].mul_add(b[i], c[i]);
        assert!(
            same(got[i], want),
            "len {n}, skews {skews:?}, index {i}: fma({:e}, {:e}, {:e}) = {:e} ({:#010x}), kernel gave {:e} ({:#010x})",
            a[i],
            b[i],
            c[i],
            want,
            want.to_bits(),
            got[i],
            got[i].to_bits()
        );
    }
}

/// Four different byte offsets from a 64-byte boundary, varying with `n`.
fn skews(n: usize) -> [usize; 4] {
    [0, 1, 2, 3].map(|k| 4 * ((n + k) % 4))
}

#[test]
fn runner_rule_fails_loudly_without_qemu_off_aarch64() {
    let on_aarch64 = cfg!(all(target_arch = "aarch64", target_os = "linux"));
    let none = choose_runner(Some("/nonexistent-dir"));
    if on_aarch64 {
        // No qemu needed: the image runs natively.
        assert_eq!(none, Ok(a64_elf::Runner::Native));
    } else {
        assert_eq!(none, Err(MISSING_QEMU.to_owned()));
        assert!(MISSING_QEMU.contains("apt-get install qemu-user"));
        assert_eq!(choose_runner(None), Err(MISSING_QEMU.to_owned()));
    }
}

#[test]
#[cfg_attr(
    not(all(target_arch = "aarch64", target_os = "linux")),
    ignore = "needs qemu-aarch64 (apt: qemu-user)"
)]
fn stub_runs_a_bare_ret_kernel_and_hands_back_the_data_segment_unchanged() {
    let runner = runner();
    let mut img = Image::new(&words(&[RET]));
    let input = img.input(&[1, 2, 3, 4, 5, 6, 7], 3);
    let output = img.output(9, 0x5c, 1);
    let out = img.run(&runner).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.bytes(input), &[1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(out.bytes(output), &[0x5c; 9]);
}

#[test]
fn elf_has_no_segment_both_writable_and_executable() {
    let elf = Image::new(&words(&[RET])).elf();
    let phnum = u16::from_le_bytes([elf[56], elf[57]]) as usize;
    assert_eq!(&elf[0..4], b"\x7fELF");
    assert_eq!(u16::from_le_bytes([elf[18], elf[19]]), 183, "EM_AARCH64");
    let mut loads = 0;
    for i in 0..phnum {
        let p = 64 + 56 * i;
        let ty = u32::from_le_bytes(elf[p..p + 4].try_into().unwrap());
        let flags = u32::from_le_bytes(elf[p + 4..p + 8].try_into().unwrap());
        assert_ne!(flags & 3, 3, "program header {i} is W+X");
        loads += usize::from(ty == 1);
    }
    assert_eq!(loads, 2);
}

#[test]
#[cfg_attr(
    not(all(target_arch = "aarch64", target_os = "linux")),
    ignore = "needs qemu-aarch64 (apt: qemu-user)"
)]
fn hand_written_fmla_kernel_matches_rust_mul_add_for_lengths_0_to_33() {
    let runner = runner();
    let kernel = words(&HAND_FMA);
    for n in 0..=33 {
        check_fma(&runner, &kernel, n, skews(n));
    }
}

#[test]
#[cfg_attr(
    not(all(target_arch = "aarch64", target_os = "linux")),
    ignore = "needs qemu-aarch64 (apt: qemu-user)"
)]
fn runner_reports_a_faulting_kernel_as_failed_not_passed() {
    let runner = runner();
    // mov x1, #0 ; ldr x1, [x1] ; ret
    let img = Image::new(&words(&[0xd280_0001, 0xf940_0021, RET]));
    match img.run(&runner) {
        Err(RunError::Failed { .. }) => {}
        other => panic!("a load from address 0 must fail the run, got {other:?}"),
    }
}

#[test]
#[cfg_attr(
    not(all(target_arch = "aarch64", target_os = "linux")),
    ignore = "needs qemu-aarch64 (apt: qemu-user)"
)]
fn runner_kills_a_kernel_that_never_returns() {
    let runner = runner();
    // b .
    let img = Image::new(&words(&[0x1400_0000]));
    let t = Duration::from_secs(2);
    let started = std::time::Instant::now();
    match img.run_with_timeout(&runner, t) {
        Err(RunError::Timeout(_)) => {}
        other => panic!("an endless loop must time out, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
#[cfg_attr(
    not(all(target_arch = "aarch64", target_os = "linux")),
    ignore = "needs qemu-aarch64 (apt: qemu-user)"
)]
fn runner_refuses_kernels_that_clobber_x20_d8_or_sp() {
    let runner = runner();
    let cases: [(&str, u32); 3] = [
        ("x20", 0xd280_0014), // mov x20, #0
        ("d8", 0x9e67_03e8),  // fmov d8, xzr
        ("sp", 0x9100_43ff),  // add sp, sp, #16
    ];
    for (reg, insn) in cases {
        let img = Image::new(&words(&[insn, RET]));
        match img.run(&runner) {
            Err(RunError::CalleeSaved { register, .. }) => assert_eq!(register, reg),
            other => panic!("clobbering {reg} must be caught, got {other:?}"),
        }
    }
}

#[test]
#[cfg_attr(
    not(all(target_arch = "aarch64", target_os = "linux")),
    ignore = "needs qemu-aarch64 (apt: qemu-user)"
)]
fn runner_refuses_a_kernel_that_stores_below_its_output() {
    let runner = runner();
    // ldr x1, [x0] ; stur wzr, [x1, #-4] ; ret
    let mut img = Image::new(&words(&[0xf940_0001, 0xb81f_c03f, RET]));
    let out = img.output(16, 0, 0);
    img.set_args(&[out.addr]);
    match img.run(&runner) {
        Err(RunError::WroteOutside { what: "guard", .. }) => {}
        other => panic!("a store before the output must be caught, got {other:?}"),
    }
}

#[test]
#[cfg_attr(
    not(all(target_arch = "aarch64", target_os = "linux")),
    ignore = "needs qemu-aarch64 (apt: qemu-user)"
)]
fn weft_a64_fma_kernel_matches_rust_mul_add_for_lengths_0_to_33_at_unaligned_starts() {
    let runner = runner();
    let kernel = a64_kernels::fma_kernel();
    for n in 0..=33 {
        check_fma(&runner, &kernel, n, skews(n));
        // Byte offsets that are not even word-aligned.
        check_fma(&runner, &kernel, n, [1, 2, 3, 5]);
    }
}

#[test]
#[cfg_attr(
    not(all(target_arch = "aarch64", target_os = "linux")),
    ignore = "needs qemu-aarch64 (apt: qemu-user)"
)]
fn weft_a64_add_kernel_matches_rust_addition_for_lengths_0_to_17() {
    let runner = runner();
    let kernel = a64_kernels::add_kernel();
    for n in 0..=17 {
        let (a, b, c) = (
            inputs(n, 7 + n as u64),
            inputs(n, 70 + n as u64),
            inputs(n, 700 + n as u64),
        );
        let mut img = Image::new(&kernel);
        let ra = img.input_f32(&a, 4 * (n % 4));
        let rb = img.input_f32(&b, 3);
        let rc = img.input_f32(&c, 0);
        let ro = img.output(4 * n, 0xee, 8);
        img.set_args(&[ra.addr, rb.addr, rc.addr, ro.addr, n as u64]);
        let out = img.run(&runner).unwrap_or_else(|e| panic!("len {n}: {e}"));
        for (i, got) in out.f32s(ro).into_iter().enumerate() {
            let want = a[i] + b[i];
            assert!(
                same(got, want),
                "len {n}, index {i}: want {want:e}, got {got:e}"
            );
        }
    }
}

#[test]
fn weft_a64_fma_kernel_encodes_to_the_hand_written_words() {
    // The same instruction sequence, spelt twice: once as words checked
    // with llvm-mc, once through weft-a64's assembler and labels.
    assert_eq!(a64_kernels::fma_kernel(), words(&HAND_FMA));
}
