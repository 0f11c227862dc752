//! The compute peaks the benches and the roofline measure kernels against:
//! register loops that do nothing but the one instruction a family's inner
//! loop is made of, with enough independent accumulators to fill the
//! pipes, so their rate is what this core can issue.
//!
//! - [`fma`]: `vfmadd231ps` (zmm with AVX-512F, else ymm), 2 flops per
//!   lane: the f32 peak (attention, matmul).
//! - [`int8`]: `vpdpbusd` (zmm with AVX-512 VNNI) or `vpmaddubsw` (ymm,
//!   AVX2), 2 ops per byte pair: the int8 peak (the Q8_0 families). On
//!   AVX2 a real kernel also needs `vpmaddwd` to widen, so this peak is an
//!   upper bound no Q8_0 body reaches — as a ceiling should be.

use weft_kernel::{Feature, Host, Isa, Kernel, NativeCode};
use weft_x64::iced_x86::code_asm::registers::{ymm, zmm};
use weft_x64::iced_x86::code_asm::{qword_ptr, rcx, AsmRegisterYmm, AsmRegisterZmm};
use weft_x64::{Abi, Clobbers, EmitError, Emitter};

/// Independent accumulators of a peak loop (2 pipes × latency 4-5, with
/// room).
const PEAK_ACCS: usize = 12;
/// Iterations of a peak loop per call.
pub const PEAK_ITERS: u64 = 1 << 16;

/// The argument of a peak loop: its iteration count.
#[repr(C)]
pub struct PeakArgs {
    pub iters: u64,
}

const ZS: [AsmRegisterZmm; 16] = [
    zmm::zmm0,
    zmm::zmm1,
    zmm::zmm2,
    zmm::zmm3,
    zmm::zmm4,
    zmm::zmm5,
    zmm::zmm6,
    zmm::zmm7,
    zmm::zmm8,
    zmm::zmm9,
    zmm::zmm10,
    zmm::zmm11,
    zmm::zmm12,
    zmm::zmm13,
    zmm::zmm14,
    zmm::zmm15,
];
const YS: [AsmRegisterYmm; 16] = [
    ymm::ymm0,
    ymm::ymm1,
    ymm::ymm2,
    ymm::ymm3,
    ymm::ymm4,
    ymm::ymm5,
    ymm::ymm6,
    ymm::ymm7,
    ymm::ymm8,
    ymm::ymm9,
    ymm::ymm10,
    ymm::ymm11,
    ymm::ymm12,
    ymm::ymm13,
    ymm::ymm14,
    ymm::ymm15,
];

/// A peak loop: `body(e, i)` emits accumulator `i`'s instruction of one
/// step, with operands in registers 14 and 15 (set to small values so no
/// sum overflows or turns subnormal), [`PeakArgs::iters`] steps.
fn peak_loop(
    body: impl Fn(&mut Emitter, usize) -> Result<(), EmitError>,
) -> Result<Kernel<PeakArgs>, String> {
    let err = |e: EmitError| e.to_string();
    let mut e = Emitter::new(Abi::host()).map_err(err)?;
    let mut clobbers = Clobbers::none();
    for z in ZS {
        clobbers = clobbers.with(z);
    }
    e.prologue(clobbers).map_err(err)?;
    let args = e.args_reg();
    e.asm()
        .mov(rcx, qword_ptr(args))
        .map_err(|x| err(x.into()))?;
    // Small operands: f32 sums grow by 1e-12 a step; as int8 bytes,
    // 1e-6's bit pattern gives products far from saturating in 2^16 steps.
    e.broadcast_f32(YS[14], 1.0e-6).map_err(err)?;
    e.broadcast_f32(YS[15], 1.0e-6).map_err(err)?;
    for y in &YS[..PEAK_ACCS] {
        e.broadcast_f32(*y, 1.0).map_err(err)?;
    }
    e.counted_loop(rcx, |e| {
        for i in 0..PEAK_ACCS {
            body(e, i)?;
        }
        Ok(())
    })
    .map_err(err)?;
    e.epilogue().map_err(err)?;
    let emitted = e.finish().map_err(err)?;
    let code = NativeCode {
        isa: Isa::X86_64,
        bytes: emitted.bytes,
        pool: None,
        loops: Vec::new(),
    };
    // SAFETY: the body above reads only `iters` through the pointer,
    // touches only volatile or saved registers and returns.
    unsafe { Kernel::from_native(&code) }.map_err(|e| e.to_string())
}

/// The f32 FMA peak loop and the flops one call does.
pub fn fma(host: &Host) -> Result<(Kernel<PeakArgs>, f64), String> {
    let wide = host.has(Feature::Avx512f);
    let k = peak_loop(|e, i| {
        if wide {
            e.asm().vfmadd231ps(ZS[i], ZS[14], ZS[15])?;
        } else {
            e.asm().vfmadd231ps(YS[i], YS[14], YS[15])?;
        }
        Ok(())
    })?;
    let lanes = if wide { 16.0 } else { 8.0 };
    Ok((k, PEAK_ITERS as f64 * PEAK_ACCS as f64 * lanes * 2.0))
}

/// The int8 multiply-add peak loop, the ops one call does (2 per byte
/// pair), and the instruction it runs.
pub fn int8(host: &Host) -> Result<(Kernel<PeakArgs>, f64, &'static str), String> {
    let vnni = host.has(Feature::Avx512f) && host.has(Feature::Avx512vnni);
    let k = peak_loop(|e, i| {
        if vnni {
            e.asm().vpdpbusd(ZS[i], ZS[14], ZS[15])?;
        } else {
            e.asm().vpmaddubsw(YS[i], YS[14], YS[15])?;
        }
        Ok(())
    })?;
    let pairs = if vnni { 64.0 } else { 32.0 };
    let what = if vnni {
        "vpdpbusd zmm"
    } else {
        "vpmaddubsw ymm"
    };
    Ok((k, PEAK_ITERS as f64 * PEAK_ACCS as f64 * pairs * 2.0, what))
}

/// Seconds per call of a peak loop: the median of `samples` calls after a
/// warm-up call.
pub fn time(k: &Kernel<PeakArgs>, samples: usize) -> f64 {
    let args = PeakArgs { iters: PEAK_ITERS };
    let once = || {
        let t = std::time::Instant::now();
        // SAFETY: a peak body reads only `iters` and returns.
        unsafe { k.call(std::hint::black_box(&args)) };
        t.elapsed().as_secs_f64()
    };
    once();
    let mut v: Vec<f64> = (0..samples.max(1)).map(|_| once()).collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
