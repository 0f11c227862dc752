//! x64 twins of the epilogue arm: AVX-512 (zmm, masked tails) and AVX2
//! (ymm, one float at a time in the tails), over the arm's offer.
//!
//! Stage 0 copies each pixel's `cout` biases from the packed lines (whole
//! vectors, then the tail); stage 1 runs ReLU as `vmaxps a, zero, a` (`0 >
//! a ? 0 : a`: a NaN or −0 in `a` passes unchanged) and ReLU6's clamp as
//! `vminps a, six, a`, the conv twins' epilogue instructions, then the
//! SiLU pass every conv body ends with ([`crate::silu`]).

use std::sync::Arc;

use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};
use weft_x64::iced_x86::code_asm::{
    cl, dword_ptr, edx, k1, qword_ptr, r10, r11, r8, r9, rax, rcx, rdx, rsi, ymmword_ptr,
    zmmword_ptr, CodeLabel,
};
use weft_x64::regs::{XMM, YMM, ZMM};
use weft_x64::{Abi, EmitError, Emitter};

use super::{Stage, EPILOGUE};
use crate::twin_x64::{land, Tier, ARGS};
use crate::{offsets, Activation};

/// One x64 twin of the epilogue arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EpilogueX64 {
    tier: Tier,
    abi: Abi,
}

impl EpilogueX64 {
    /// The twin in `tier`, for the host's calling convention.
    pub const fn new(tier: Tier) -> EpilogueX64 {
        EpilogueX64 {
            tier,
            abi: Abi::host(),
        }
    }

    /// The same twin for another calling convention.
    pub const fn with_abi(self, abi: Abi) -> EpilogueX64 {
        EpilogueX64 { abi, ..self }
    }
}

/// The x64 twins: AVX-512, then AVX2.
pub fn twins() -> Vec<Arc<dyn Twin>> {
    [Tier::Avx512, Tier::Avx2]
        .into_iter()
        .map(|t| Arc::new(EpilogueX64::new(t)) as Arc<dyn Twin>)
        .collect()
}

const AVX512_FEATURES: &[Feature] = &[Feature::Avx, Feature::Fma, Feature::Avx512f];
const AVX2_FEATURES: &[Feature] = &[Feature::Avx, Feature::Avx2, Feature::Fma];

/// rax = the call's first element of y, rcx = one past its last (bytes).
fn span(e: &mut Emitter) -> Result<(), EmitError> {
    let a = e.asm();
    a.mov(rdx, qword_ptr(ARGS + offsets::OUT_W))?;
    a.imul_2(rdx, qword_ptr(ARGS + offsets::COUT))?;
    a.shl(rdx, 2)?;
    a.mov(rax, qword_ptr(ARGS + offsets::ROW_START))?;
    a.imul_2(rax, rdx)?;
    a.add(rax, qword_ptr(ARGS + offsets::Y))?;
    a.mov(rcx, qword_ptr(ARGS + offsets::ROW_END))?;
    a.imul_2(rcx, rdx)?;
    a.add(rcx, qword_ptr(ARGS + offsets::Y))?;
    Ok(())
}

fn bias(e: &mut Emitter, tier: Tier) -> Result<(), EmitError> {
    let lanes = tier.lanes() as i32;
    {
        // rsi = the bias lines, r9 = whole vectors a pixel, r8 = the
        // tail's floats (AVX-512: k1 = their lanes).
        let a = e.asm();
        a.mov(rsi, qword_ptr(ARGS + offsets::FILT))?;
        a.mov(r8, qword_ptr(ARGS + offsets::COUT))?;
        a.mov(r9, r8)?;
        a.shr(r9, lanes.trailing_zeros())?;
        a.and(r8, lanes - 1)?;
        if tier == Tier::Avx512 {
            a.mov(rcx, r8)?;
            a.mov(edx, 1)?;
            a.shl(edx, cl)?;
            a.dec(edx)?;
            a.kmovw(k1, edx)?;
        }
    }
    span(e)?;
    let (mut pix, mut vecs, mut tail, mut next, mut done) = (
        e.create_label(),
        e.create_label(),
        e.create_label(),
        e.create_label(),
        e.create_label(),
    );
    land(e, &mut pix)?;
    e.asm().cmp(rax, rcx)?;
    e.asm().jae(done)?;
    e.asm().xor(r10, r10)?;
    e.asm().mov(r11, r9)?;
    land(e, &mut vecs)?;
    e.asm().test(r11, r11)?;
    e.asm().jz(tail)?;
    match tier {
        Tier::Avx512 => {
            e.asm().vmovups(ZMM[0], zmmword_ptr(rsi + r10))?;
            e.asm().vmovups(zmmword_ptr(rax + r10), ZMM[0])?;
        }
        Tier::Avx2 => {
            e.asm().vmovups(YMM[0], ymmword_ptr(rsi + r10))?;
            e.asm().vmovups(ymmword_ptr(rax + r10), YMM[0])?;
        }
    }
    e.asm().add(r10, 4 * lanes)?;
    e.asm().dec(r11)?;
    e.asm().jmp(vecs)?;
    land(e, &mut tail)?;
    match tier {
        Tier::Avx512 => {
            e.asm().test(r8, r8)?;
            e.asm().jz(next)?;
            e.asm().vmovups(ZMM[0].k1().z(), zmmword_ptr(rsi + r10))?;
            e.asm().vmovups(zmmword_ptr(rax + r10).k1(), ZMM[0])?;
        }
        Tier::Avx2 => {
            // One float a step: r11 counts the tail down.
            let mut one = e.create_label();
            e.asm().mov(r11, r8)?;
            land(e, &mut one)?;
            e.asm().test(r11, r11)?;
            e.asm().jz(next)?;
            e.asm().mov(edx, dword_ptr(rsi + r10))?;
            e.asm().mov(dword_ptr(rax + r10), edx)?;
            e.asm().add(r10, 4)?;
            e.asm().dec(r11)?;
            e.asm().jmp(one)?;
        }
    }
    land(e, &mut next)?;
    // The next pixel: rax += cout · 4.
    e.asm().mov(rdx, qword_ptr(ARGS + offsets::COUT))?;
    e.asm().lea(rax, rax + rdx * 4)?;
    e.asm().jmp(pix)?;
    land(e, &mut done)
}

fn act(e: &mut Emitter, tier: Tier) -> Result<(), EmitError> {
    let mut skip = e.create_label();
    {
        let a = e.asm();
        a.mov(rdx, qword_ptr(ARGS + offsets::ACT))?;
        a.dec(rdx)?;
        a.cmp(rdx, 2)?; // act 1 or 2: ReLU, ReLU6
        a.jae(skip)?;
    }
    {
        // Zero and six in vector registers 1 and 2.
        let a = e.asm();
        a.mov(edx, 6.0f32.to_bits())?;
        match tier {
            Tier::Avx512 => {
                a.vpxord(ZMM[1], ZMM[1], ZMM[1])?;
                a.vpbroadcastd(ZMM[2], edx)?;
            }
            Tier::Avx2 => {
                a.vxorps(YMM[1], YMM[1], YMM[1])?;
                a.vmovd(XMM[2], edx)?;
                a.vbroadcastss(YMM[2], XMM[2])?;
            }
        }
    }
    // rax = the first element, rcx = the element count.
    span(e)?;
    e.asm().sub(rcx, rax)?;
    e.asm().shr(rcx, 2)?;
    let lanes = tier.lanes() as i32;
    // Two loops: ReLU alone, or ReLU then the clamp (act read once).
    let relu6 = Activation::Relu6 as i32;
    let mut six_loop = e.create_label();
    e.asm().cmp(qword_ptr(ARGS + offsets::ACT), relu6)?;
    e.asm().je(six_loop)?;
    act_loop(e, tier, lanes, false, &mut skip)?;
    land(e, &mut six_loop)?;
    act_loop(e, tier, lanes, true, &mut skip)?;
    land(e, &mut skip)
}

/// The activation over rcx elements from rax (vector 1 zero, vector 2
/// six), then a jump to `out`.
fn act_loop(
    e: &mut Emitter,
    tier: Tier,
    lanes: i32,
    clamp: bool,
    out: &mut CodeLabel,
) -> Result<(), EmitError> {
    let (mut head, mut tail) = (e.create_label(), e.create_label());
    land(e, &mut head)?;
    e.asm().cmp(rcx, lanes)?;
    e.asm().jb(tail)?;
    match tier {
        Tier::Avx512 => {
            let a = e.asm();
            a.vmovups(ZMM[0], zmmword_ptr(rax))?;
            a.vmaxps(ZMM[0], ZMM[1], ZMM[0])?;
            if clamp {
                a.vminps(ZMM[0], ZMM[2], ZMM[0])?;
            }
            a.vmovups(zmmword_ptr(rax), ZMM[0])?;
        }
        Tier::Avx2 => {
            let a = e.asm();
            a.vmovups(YMM[0], ymmword_ptr(rax))?;
            a.vmaxps(YMM[0], YMM[1], YMM[0])?;
            if clamp {
                a.vminps(YMM[0], YMM[2], YMM[0])?;
            }
            a.vmovups(ymmword_ptr(rax), YMM[0])?;
        }
    }
    e.asm().add(rax, 4 * lanes)?;
    e.asm().sub(rcx, lanes)?;
    e.asm().jmp(head)?;
    land(e, &mut tail)?;
    match tier {
        Tier::Avx512 => {
            let a = e.asm();
            a.test(rcx, rcx)?;
            a.jz(*out)?;
            a.mov(edx, 1)?;
            a.shl(edx, cl)?;
            a.dec(edx)?;
            a.kmovw(k1, edx)?;
            a.vmovups(ZMM[0].k1().z(), zmmword_ptr(rax))?;
            a.vmaxps(ZMM[0], ZMM[1], ZMM[0])?;
            if clamp {
                a.vminps(ZMM[0], ZMM[2], ZMM[0])?;
            }
            a.vmovups(zmmword_ptr(rax).k1(), ZMM[0])?;
            a.jmp(*out)?;
        }
        Tier::Avx2 => {
            let a = e.asm();
            a.test(rcx, rcx)?;
            a.jz(*out)?;
            a.vmovss(XMM[0], dword_ptr(rax))?;
            a.vmaxss(XMM[0], XMM[1], XMM[0])?;
            if clamp {
                a.vminss(XMM[0], XMM[2], XMM[0])?;
            }
            a.vmovss(dword_ptr(rax), XMM[0])?;
            a.add(rax, 4)?;
            a.dec(rcx)?;
            a.jmp(tail)?;
        }
    }
    Ok(())
}

fn emit(stage: Stage, tier: Tier, abi: Abi) -> Result<weft_x64::Emitted, EmitError> {
    // The SiLU pass after the stage uses vector registers 0–4 and 16–28.
    let mut e = crate::twin_x64::open(abi, tier == Tier::Avx512)?;
    match stage {
        Stage::Bias => bias(&mut e, tier)?,
        Stage::Act => act(&mut e, tier)?,
    }
    crate::silu::x64_pass(&mut e, tier == Tier::Avx512, ARGS)?;
    e.epilogue()?;
    e.finish()
}

// SAFETY: stage 0 reads the packed bias's lines (whole vectors, then the
// tail under a mask or one float at a time) and writes y only in the
// call's rows and channels below cout; stage 1 reads and writes only the
// call's elements of y (the tail masked or one at a time); the body
// returns normally. Validation checks it against the arm.
unsafe impl Twin for EpilogueX64 {
    fn name(&self) -> &'static str {
        match self.tier {
            Tier::Avx512 => "conv.epilogue.twin.avx512",
            Tier::Avx2 => "conv.epilogue.twin.avx2",
        }
    }

    fn isa(&self) -> Isa {
        Isa::X86_64
    }

    fn requires(&self) -> &'static [Feature] {
        match self.tier {
            Tier::Avx512 => AVX512_FEATURES,
            Tier::Avx2 => AVX2_FEATURES,
        }
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        crate::check_offer(self.name(), offer, EPILOGUE, None)?;
        let stage = Stage::of(&offer.contract.geometry)?;
        crate::twin_x64::native(self.name(), emit(stage, self.tier, self.abi))
    }

    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        let wide = self.tier == Tier::Avx512;
        super::nest_of(offer, (self.tier.lanes() as u64, wide, true))
    }
}
