//! First end-to-end smoke through the real x64 path: a small AVX2 twin
//! (`out[i] = a[i] * b[i] + c[i]`, fused) emitted by weft-x64, placed by
//! weft-jitmem, called through the leaf ABI via `weft_kernel::Kernel`, and
//! checked bit for bit against `f32::mul_add` for every `n` in 0..=40 and
//! unaligned starts. Skips (with the reason on stderr) on hosts without
//! x86-64 AVX2 + FMA.

use std::sync::Arc;

use weft_kernel::Kernel;
use weft_x64::iced_x86::code_asm::*;
use weft_x64::iced_x86::CpuidFeature;
use weft_x64::{Abi, Clobbers, EmitError, Emitted, Emitter};

/// The argument struct of the twin (the leaf ABI's one pointer points here).
#[repr(C)]
struct FmaArgs {
    a: *const f32,
    b: *const f32,
    c: *const f32,
    out: *mut f32,
    n: usize,
}

const A: i32 = 0;
const B: i32 = 8;
const C: i32 = 16;
const OUT: i32 = 24;
const N: i32 = 32;

/// The twin. Only registers volatile in both SysV and Win64 (rax, rdx,
/// r8-r11, ymm0-1), so no callee-saved register is touched:
///
/// * `n / 8` iterations of an 8-wide ymm body: `vmovups`, `vfmadd213ps`
///   with `c` from memory, `vmovups`, pointer bumps;
/// * `n % 8` iterations of the same in scalar `ss` form.
fn emit_fma_twin(abi: Abi) -> Result<Emitted, EmitError> {
    let mut e = Emitter::new(abi)?;
    e.prologue(Clobbers::none())?;
    e.load_arg(r8, A)?;
    e.load_arg(r9, B)?;
    e.load_arg(r10, C)?;
    e.load_arg(r11, OUT)?;
    e.load_arg(rdx, N)?;
    e.asm().mov(rax, rdx)?;
    e.asm().shr(rax, 3)?;
    e.counted_loop(rax, |e| {
        let a = e.asm();
        a.vmovups(ymm0, ymmword_ptr(r8))?;
        a.vmovups(ymm1, ymmword_ptr(r9))?;
        a.vfmadd213ps(ymm0, ymm1, ymmword_ptr(r10))?; // ymm0 = b*a + c, one rounding
        a.vmovups(ymmword_ptr(r11), ymm0)?;
        for p in [r8, r9, r10, r11] {
            a.add(p, 32)?;
        }
        Ok(())
    })?;
    e.asm().and(edx, 7)?;
    e.counted_loop(rdx, |e| {
        let a = e.asm();
        a.vmovss(xmm0, dword_ptr(r8))?;
        a.vmovss(xmm1, dword_ptr(r9))?;
        a.vfmadd213ss(xmm0, xmm1, dword_ptr(r10))?;
        a.vmovss(dword_ptr(r11), xmm0)?;
        for p in [r8, r9, r10, r11] {
            a.add(p, 4)?;
        }
        Ok(())
    })?;
    e.epilogue()?;
    e.finish()
}

/// Deterministic inputs, with values where fused and unfused differ.
fn inputs(len: usize, seed: u32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9e37_79b9) | 1;
    (0..len)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            match i % 5 {
                0 => 1.0 + f32::EPSILON * (state % 64) as f32,
                1 => -1.0 - f32::EPSILON * (state % 64) as f32,
                _ => (state as i32) as f32 / 1.0e6,
            }
        })
        .collect()
}

#[test]
fn fma_twin_listing() {
    let emitted = emit_fma_twin(Abi::SysV).expect("emit");
    insta::assert_snapshot!("fma_twin_sysv", emitted.listing.to_string());
    let features = emitted.cpuid_features();
    assert!(features.contains(&CpuidFeature::FMA), "{features:?}");
    assert!(features.contains(&CpuidFeature::AVX), "{features:?}");
    assert!(
        !features
            .iter()
            .any(|f| format!("{f:?}").starts_with("AVX512")),
        "an AVX2 twin must not need AVX-512: {features:?}"
    );
}

#[test]
#[cfg_attr(
    not(all(weft_host_has = "avx2", weft_host_has = "fma")),
    ignore = "needs avx2 and fma, which this host lacks"
)]
fn fma_twin_matches_mul_add_for_every_n_and_alignment() {
    let emitted = emit_fma_twin(Abi::host()).expect("emit");
    let placed = weft_jitmem::place(&emitted.bytes).expect("place");
    // SAFETY: the bytes are a complete function of the host's C calling
    // convention (`Abi::host()`), taking one *const FmaArgs; it reads `n`
    // f32 from each of a, b, c, writes `n` f32 to out, returns normally and
    // never unwinds. The calls below pass pointers valid for `n` elements.
    let kernel = unsafe { Kernel::<FmaArgs>::from_placed(Arc::new(placed), 0) }.expect("kernel");
    const GUARD: u32 = 0x7fc0_dead; // a quiet NaN nobody computes
    let mut checked = 0;
    for n in 0..=40usize {
        for start in 0..4usize {
            // Different misalignment per operand (in elements, so 4-byte
            // aligned, never 32-byte aligned together).
            let (sa, sb, sc, so) = (start, (start + 1) % 4, (start + 2) % 4, (start + 3) % 4);
            let a = inputs(n + 4, 1 + n as u32);
            let b = inputs(n + 4, 1000 + start as u32);
            let c = inputs(n + 4, 7 + (n * start) as u32);
            let mut out = vec![f32::from_bits(GUARD); n + 8];
            let args = FmaArgs {
                a: a[sa..].as_ptr(),
                b: b[sb..].as_ptr(),
                c: c[sc..].as_ptr(),
                out: out[so..].as_mut_ptr(),
                n,
            };
            // SAFETY: each pointer has at least `n` f32s after its start, and
            // the buffers outlive the call.
            unsafe { kernel.call(&args) };
            for i in 0..n {
                let want = a[sa + i].mul_add(b[sb + i], c[sc + i]);
                let got = out[so + i];
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "n={n} start={start} i={i}: {got} vs {want}"
                );
            }
            for (i, v) in out.iter().enumerate() {
                if i < so || i >= so + n {
                    assert_eq!(v.to_bits(), GUARD, "n={n} start={start}: wrote out[{i}]");
                }
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 41 * 4);
    // The data does exercise fusion: somewhere fused and unfused differ.
    let a = inputs(64, 3);
    let b = inputs(64, 4);
    let c = inputs(64, 5);
    assert!((0..64).any(|i| a[i].mul_add(b[i], c[i]) != a[i] * b[i] + c[i]));
}
