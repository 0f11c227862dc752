//! Encodings and constants: the explicit EVEX switch (VEX `vpdpbusd` is
//! AVX-VNNI, a different feature from AVX-512 VNNI), broadcasts built at
//! the point of use, and the listing format.

#![cfg(target_arch = "x86_64")]

mod common;

use weft_x64::iced_x86::code_asm::*;
use weft_x64::iced_x86::{Code, CpuidFeature, Decoder, DecoderOptions, EncodingKind};
use weft_x64::{Abi, EmitError, Emitter, Encoding, Listing, VectorReg};

fn decode_all(bytes: &[u8]) -> Vec<weft_x64::iced_x86::Instruction> {
    Decoder::with_ip(64, bytes, 0, DecoderOptions::NONE)
        .into_iter()
        .collect()
}

#[test]
fn vpdpbusd_in_an_evex_scope_decodes_as_evex() {
    let mut e = Emitter::new(Abi::SysV).expect("emitter");
    e.asm().vpdpbusd(xmm0, xmm1, xmm2).expect("vex form");
    e.evex(|e| {
        e.asm().vpdpbusd(xmm0, xmm1, xmm2)?;
        e.asm().vpdpbusd(ymm3, ymm4, ymmword_ptr(rdi))?;
        Ok(())
    })
    .expect("evex scope");
    assert_eq!(e.encoding(), Encoding::Vex, "scope restores the preference");
    e.asm().vpdpbusd(xmm0, xmm1, xmm2).expect("vex again");
    e.set_encoding(Encoding::Evex);
    e.asm()
        .vpdpbusd(zmm5, zmm6, zmm7)
        .expect("zmm is EVEX anyway");
    e.asm()
        .vpdpbusd(xmm0, xmm1, xmm2)
        .expect("evex, persistent");
    e.asm().ret().expect("ret");
    let emitted = e.finish().expect("finish");
    let decoded = decode_all(&emitted.bytes);
    let kinds: Vec<EncodingKind> = decoded.iter().map(|i| i.encoding()).collect();
    use EncodingKind::{Legacy, EVEX, VEX};
    assert_eq!(kinds, [VEX, EVEX, EVEX, VEX, EVEX, EVEX, Legacy]);
    assert_eq!(
        decoded[1].code(),
        Code::EVEX_Vpdpbusd_xmm_k1z_xmm_xmmm128b32
    );
    assert_eq!(decoded[0].code(), Code::VEX_Vpdpbusd_xmm_xmm_xmmm128);
    let features = emitted.cpuid_features();
    assert!(features.contains(&CpuidFeature::AVX_VNNI), "{features:?}");
    assert!(
        features.contains(&CpuidFeature::AVX512_VNNI),
        "{features:?}"
    );
    assert!(features.contains(&CpuidFeature::AVX512VL), "{features:?}");
    insta::assert_snapshot!("vpdpbusd_vex_and_evex", emitted.listing.to_string());
}

#[test]
fn evex_only_code_needs_no_avx_vnni() {
    let mut e = Emitter::new(Abi::SysV).expect("emitter");
    e.evex(|e| Ok(e.asm().vpdpbusd(ymm0, ymm1, ymm2)?))
        .expect("evex");
    e.epilogue().expect("epilogue");
    let emitted = e.finish().expect("finish");
    let features = emitted.cpuid_features();
    assert!(!features.contains(&CpuidFeature::AVX_VNNI), "{features:?}");
    assert!(
        features.contains(&CpuidFeature::AVX512_VNNI),
        "{features:?}"
    );
}

#[repr(C)]
struct DotArgs {
    a: *const u8,
    b: *const i8,
    acc: *mut i32,
}

/// Runs the EVEX form on hardware: acc[i] += sum over 4 bytes of u8 * i8.
#[test]
#[cfg_attr(
    not(all(weft_host_has = "avx512vnni", weft_host_has = "avx512vl")),
    ignore = "needs avx512vnni and avx512vl, which this host lacks"
)]
fn evex_vpdpbusd_computes_u8_by_i8_dot_products() {
    let mut e = Emitter::new(Abi::host()).expect("emitter");
    e.load_arg(rax, 0).expect("a");
    e.load_arg(rdx, 8).expect("b");
    e.load_arg(r8, 16).expect("acc");
    e.evex(|e| {
        let a = e.asm();
        a.vmovdqu32(ymm1, ymmword_ptr(rax))?;
        a.vmovdqu32(ymm2, ymmword_ptr(rdx))?;
        a.vmovdqu32(ymm0, ymmword_ptr(r8))?;
        a.vpdpbusd(ymm0, ymm1, ymm2)?;
        a.vmovdqu32(ymmword_ptr(r8), ymm0)?;
        Ok(())
    })
    .expect("body");
    e.epilogue().expect("epilogue");
    let emitted = e.finish().expect("finish");
    assert!(decode_all(&emitted.bytes)
        .iter()
        .any(|i| i.code() == Code::EVEX_Vpdpbusd_ymm_k1z_ymm_ymmm256b32));
    let code = common::place(&emitted.bytes);
    // SAFETY: a complete host-ABI function taking one *const DotArgs; the
    // pointers it reads and writes are 32 bytes each, valid below.
    let f: extern "C" fn(*const DotArgs) = unsafe { std::mem::transmute(code.as_ptr()) };
    let a: Vec<u8> = (0..32).map(|i| (i * 37 + 200) as u8).collect();
    let b: Vec<i8> = (0..32).map(|i| (i * 53 - 128) as i8).collect();
    let mut acc: Vec<i32> = (0..8).map(|i| i * 1000 - 3000).collect();
    let expected: Vec<i32> = (0..8)
        .map(|lane| {
            acc[lane]
                + (0..4)
                    .map(|k| i32::from(a[4 * lane + k]) * i32::from(b[4 * lane + k]))
                    .sum::<i32>()
        })
        .collect();
    f(&DotArgs {
        a: a.as_ptr(),
        b: b.as_ptr(),
        acc: acc.as_mut_ptr(),
    });
    assert_eq!(acc, expected);
}

/// A function `f(&out)` that runs `setup` (the broadcast) and stores all of
/// `dst` to `out`.
fn emit_broadcast(
    dst: VectorReg,
    setup: impl FnOnce(&mut Emitter) -> Result<(), EmitError>,
) -> Result<weft_x64::Emitted, EmitError> {
    let mut e = Emitter::new(Abi::host())?;
    e.load_arg(rdx, 0)?;
    // Fill dst with ones first, so a broadcast that writes too little shows.
    match dst {
        VectorReg::Zmm(z) => e.asm().vpternlogd(z, z, z, 0xff)?,
        VectorReg::Ymm(y) if dst.number() >= 16 => e.asm().vpternlogd(y, y, y, 0xff)?,
        VectorReg::Xmm(x) if dst.number() >= 16 => e.asm().vpternlogd(x, x, x, 0xff)?,
        VectorReg::Ymm(y) => e.asm().vpcmpeqd(y, y, y)?,
        VectorReg::Xmm(x) => e.asm().vpcmpeqd(x, x, x)?,
    }
    setup(&mut e)?;
    match dst {
        VectorReg::Zmm(z) => e.asm().vmovdqu32(zmmword_ptr(rdx), z)?,
        VectorReg::Ymm(y) => e.asm().evex().vmovdqu32(ymmword_ptr(rdx), y)?,
        VectorReg::Xmm(x) => e.asm().evex().vmovdqu32(xmmword_ptr(rdx), x)?,
    }
    e.epilogue()?;
    e.finish()
}

#[repr(C)]
struct OutArgs {
    out: *mut u8,
}

fn run_broadcast(emitted: &weft_x64::Emitted, width: usize) -> Vec<u8> {
    let code = common::place(&emitted.bytes);
    // SAFETY: a complete host-ABI function taking one *const OutArgs that
    // writes `width` (at most 64) bytes through `out`.
    let f: extern "C" fn(*const OutArgs) = unsafe { std::mem::transmute(code.as_ptr()) };
    let mut out = vec![0xa5u8; 64];
    f(&OutArgs {
        out: out.as_mut_ptr(),
    });
    assert!(
        out[width..].iter().all(|b| *b == 0xa5),
        "wrote past {width} bytes"
    );
    out.truncate(width);
    out
}

fn width(dst: VectorReg) -> usize {
    match dst {
        VectorReg::Xmm(_) => 16,
        VectorReg::Ymm(_) => 32,
        VectorReg::Zmm(_) => 64,
    }
}

#[derive(Clone, Copy, Debug)]
enum Constant {
    F32(f32),
    I32(i32),
    U16(u16),
}

impl Constant {
    fn pattern(self) -> Vec<u8> {
        match self {
            Constant::F32(v) => v.to_le_bytes().to_vec(),
            Constant::I32(v) => v.to_le_bytes().to_vec(),
            Constant::U16(v) => v.to_le_bytes().to_vec(),
        }
    }

    fn emit(self, e: &mut Emitter, dst: VectorReg) -> Result<(), EmitError> {
        match self {
            Constant::F32(v) => e.broadcast_f32(dst, v),
            Constant::I32(v) => e.broadcast_i32(dst, v),
            Constant::U16(v) => e.broadcast_u16(dst, v),
        }
    }
}

fn broadcast_cases() -> Vec<(Constant, VectorReg, Encoding)> {
    use Constant::*;
    use Encoding::{Evex, Vex};
    vec![
        (F32(1.5), xmm3.into(), Vex),
        (F32(1.5), ymm3.into(), Vex),
        (F32(-0.0), ymm3.into(), Vex),
        (F32(0.0), ymm4.into(), Vex),
        (F32(1.5), ymm3.into(), Evex),
        (F32(1.5), zmm3.into(), Vex),
        (F32(1.5), ymm17.into(), Vex),
        (F32(0.0), zmm20.into(), Vex),
        (F32(0.0), zmm9.into(), Vex),
        (I32(-7), xmm5.into(), Vex),
        (I32(-7), ymm5.into(), Vex),
        (I32(-7), zmm5.into(), Vex),
        (U16(0xbeef), ymm2.into(), Vex),
        (U16(0xbeef), zmm2.into(), Vex),
        (U16(0xbeef), xmm18.into(), Evex),
        (U16(0), ymm2.into(), Vex),
    ]
}

fn needs_evex(dst: VectorReg, encoding: Encoding) -> bool {
    matches!(dst, VectorReg::Zmm(_)) || dst.number() >= 16 || encoding == Encoding::Evex
}

// The harness stores with EVEX vmovdqu32, so even VEX cases need AVX-512
// here; the VEX broadcast bytes themselves are AVX2.
#[test]
#[cfg_attr(
    not(all(
        weft_host_has = "avx512f",
        weft_host_has = "avx512vl",
        weft_host_has = "avx512bw"
    )),
    ignore = "needs avx512f, avx512vl and avx512bw (the store harness), which this host lacks"
)]
fn broadcasts_fill_every_lane() {
    for (constant, dst, encoding) in broadcast_cases() {
        let emitted = emit_broadcast(dst, |e| {
            e.with_encoding(encoding, |e| constant.emit(e, dst))
        })
        .expect("emit");
        let w = width(dst);
        let got = run_broadcast(&emitted, w);
        let expected: Vec<u8> = constant.pattern().into_iter().cycle().take(w).collect();
        assert_eq!(
            got, expected,
            "{constant:?} into {dst:?} ({encoding:?})\n{}",
            emitted.listing
        );
    }
}

#[test]
fn broadcasts_load_nothing_from_memory_and_pick_the_encoding() {
    let mut all = String::new();
    for (constant, dst, encoding) in broadcast_cases() {
        let mut e = Emitter::new(Abi::SysV).expect("emitter");
        e.with_encoding(encoding, |e| constant.emit(e, dst))
            .expect("broadcast");
        e.asm().ret().expect("ret");
        let emitted = e.finish().expect("finish");
        let decoded = decode_all(&emitted.bytes);
        for i in &decoded {
            for op in 0..i.op_count() {
                assert_ne!(
                    i.op_kind(op),
                    weft_x64::iced_x86::OpKind::Memory,
                    "{constant:?} into {dst:?} loads from memory:\n{}",
                    emitted.listing
                );
            }
        }
        let vector_writes: Vec<EncodingKind> = decoded
            .iter()
            .filter(|i| i.encoding() != EncodingKind::Legacy)
            .map(|i| i.encoding())
            .collect();
        let is_zero = constant.pattern().iter().all(|b| *b == 0);
        if needs_evex(dst, encoding) && !(is_zero && dst.number() < 16) {
            assert!(
                vector_writes.iter().all(|k| *k == EncodingKind::EVEX),
                "{constant:?} {dst:?}"
            );
        } else {
            assert!(
                vector_writes.iter().all(|k| *k == EncodingKind::VEX),
                "{constant:?} {dst:?}"
            );
        }
        all.push_str(&format!(
            "; {constant:?} -> {:?} ({encoding:?})\n",
            dst.register()
        ));
        all.push_str(&emitted.listing.to_string());
    }
    insta::assert_snapshot!("broadcasts", all);
}

#[test]
fn listing_format_is_offset_bytes_text() {
    let mut e = Emitter::new(Abi::SysV).expect("emitter");
    e.prologue(weft_x64::Clobbers::none().with(rbp))
        .expect("prologue");
    e.asm().mov(rax, 0x1122_3344_5566_7788u64).expect("mov");
    e.asm()
        .vfmadd231ps(ymm0, ymm1, ymmword_ptr(rdi + rax * 4 + 0x20))
        .expect("fma");
    e.asm().mov(rbp, rax).expect("mov");
    e.epilogue().expect("epilogue");
    let emitted = e.finish().expect("finish");
    let text = emitted.listing.to_string();
    let first = text.lines().next().expect("a line");
    assert_eq!(first, format!("000000  55{}push rbp", " ".repeat(31)));
    assert_eq!(emitted.listing.lines[1].offset, 1);
    assert_eq!(emitted.listing.lines[1].bytes.len(), 10);
    assert_eq!(
        emitted
            .listing
            .lines
            .iter()
            .map(|l| l.bytes.len())
            .sum::<usize>(),
        emitted.bytes.len()
    );
    insta::assert_snapshot!("listing_format", text);
}

#[test]
fn undecodable_bytes_list_as_bad() {
    // 0x06 (push es) does not exist in 64-bit mode.
    let listing = Listing::decode(&[0x06, 0xc3]);
    assert_eq!(listing.texts(), ["(bad)", "ret"]);
    assert_eq!(listing.lines[1].offset, 1);
}
