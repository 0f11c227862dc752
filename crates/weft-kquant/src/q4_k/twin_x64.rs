//! The x64 twin of `q4_k.matvec` (AVX2 + F16C): the arm's offer, the body
//! emitted through weft-x64.
//!
//! Per super-block of one row:
//!
//! - **Scales and minimums** are unpacked in general registers with masks
//!   and shifts over the three little-endian dwords of the packed bytes
//!   (scales 0–3 are `a0 & 0x3f3f3f3f`, scales 4–7 are
//!   `(a2 & 0x0f0f0f0f) | ((a0 >> 6) & 0x03030303) << 4`, the minimums
//!   likewise from `a1`); the eight scales are widened to words
//!   (`vpmovzxbw`) into a stack slot, from which each sub-block's scale is
//!   broadcast (`vpbroadcastw`); the minimums are doubled per byte
//!   (`vpunpcklbw`) and widened to sixteen words.
//! - **Integer lanes**: each 32 bytes of nibbles are split into low
//!   (`vpand 0x0f`) and high (`vpsrlw 4`, `vpand`) halves — sub-blocks
//!   `2p` and `2p + 1` — and multiplied with the sub-block's 32 activation
//!   quants by `vpmaddubsw` (nibble × quant pairs: at most 2 · 15 · 128,
//!   never saturating); `vpmaddwd` with the broadcast scale gives dword
//!   `l` = `s[j] · Σ_{k<4} q · x`, the contract's lane `l`, added into `L`
//!   with `vpaddd`. `N` is `vpmaddwd(bsums, doubled minimums)`.
//! - **Float lanes**: `dd`, `dm` are `vcvtph2ps` of the binary16 (exact)
//!   times the f32 `dx` (`vmulss`), broadcast; then `vcvtdq2ps`, `vmulps`,
//!   `vaddps` — never FMA — and after the last super-block the contract's
//!   fold (`vsubps`, high half onto low, `vmovhlps`, `vmovshdup`).
//!
//! Rows are the outer loop, vectors the next, super-blocks the inner one,
//! so each row is one linear stream. A two-row pass (two rows'
//! super-blocks interleaved, sharing the activation's loads) was 3–4%
//! faster from L2 but 1.8–3.7× slower from DRAM on Zen 4 (family 25 model
//! 17), with or without a software prefetch of the next pass's rows:
//! interleaved streams defeat the hardware prefetchers there. It is not
//! offered. No load assumes alignment. The frame (loops, registers, the
//! store, SysV or Win64 by [`Q4KMatvecX64::with_abi`]) is the one every
//! K-quant twin shares; the stack slot holds the scale words.

use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};
use weft_x64::iced_x86::code_asm::{
    dword_ptr, eax, edx, r10, r10d, r11, rax, rdx, rsp, word_ptr, xmmword_ptr, ymmword_ptr,
    AsmMemoryOperand,
};
use weft_x64::regs::{XMM, YMM};
use weft_x64::{Abi, EmitError, Emitter};

use super::FAMILY;
use crate::x64::{iced, Body, PW, PX, RESULT};
use weft_quant::kquant::QK_K;
use weft_quant::Format;

/// The x64 twin of the `q4_k.matvec` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Q4KMatvecX64 {
    abi: Abi,
}

/// Every twin this module offers.
pub const TWINS: [Q4KMatvecX64; 1] = [Q4KMatvecX64::new()];

/// `vpmaddubsw`, `vpmaddwd`, `vpbroadcastw`, `vpmovzxbw` (AVX2),
/// `vcvtph2ps` (F16C). The contract forbids FMA, so FMA is not required.
const FEATURES: &[Feature] = &[Feature::Avx, Feature::Avx2, Feature::F16c];

impl Q4KMatvecX64 {
    /// The twin for the host's calling convention.
    pub const fn new() -> Self {
        Self { abi: Abi::host() }
    }

    /// The same twin entered with `abi` (to test Win64 on Linux).
    pub const fn with_abi(self, abi: Abi) -> Self {
        Self { abi }
    }
}

impl Default for Q4KMatvecX64 {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the body reads and writes only what the arguments' extents name
// and returns normally (module docs); validation checks its results.
unsafe impl Twin for Q4KMatvecX64 {
    fn name(&self) -> &'static str {
        "q4_k.matvec.twin.avx2"
    }

    fn isa(&self) -> Isa {
        Isa::X86_64
    }

    fn requires(&self) -> &'static [Feature] {
        FEATURES
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        crate::x64::emit(&Q4K, self.abi, self.name(), FAMILY, offer)
    }

    /// Rows outermost, then the batch's vectors, then every super-block of
    /// the row. Trips are at the offer's whole geometry.
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        crate::twin::nest(offer, Format::Q4_K)
    }
}

// ---------------------------------------------------------------- body ---

// Vector registers: the nibble mask, `L`, `acc`, `mac`, then scratch.
const MASK: usize = 0;
const L: usize = 1;
const ACC: usize = 2;
const MAC: usize = 3;
const Q: usize = 7;
const LO: usize = 8;
const HI: usize = 9;
const P: usize = 10;
const S: usize = 11;
const MINS: usize = 12;
const DD: usize = 13;
const DM: usize = 14;
const T: usize = RESULT;

/// The Q4_K body inside the shared frame.
struct Q4K;

impl Body for Q4K {
    fn format(&self) -> Format {
        Format::Q4_K
    }

    fn setup(&self, e: &mut Emitter) -> Result<(), EmitError> {
        e.broadcast_u16(YMM[MASK], 0x0f0f)
    }

    fn clear(&self, e: &mut Emitter) -> Result<(), EmitError> {
        for reg in [ACC, MAC] {
            e.asm().vpxor(YMM[reg], YMM[reg], YMM[reg]).map_err(iced)?;
        }
        Ok(())
    }

    fn super_block(&self, e: &mut Emitter) -> Result<(), EmitError> {
        super_block(e)
    }

    /// The contract's fold: `t = acc - mac`, high half onto low, then
    /// `(u0+u2) + (u1+u3)`.
    fn fold(&self, e: &mut Emitter) -> Result<(), EmitError> {
        let a = e.asm();
        a.vsubps(YMM[T], YMM[ACC], YMM[MAC]).map_err(iced)?;
        a.vextractf128(XMM[P], YMM[T], 1).map_err(iced)?;
        a.vaddps(XMM[T], XMM[T], XMM[P]).map_err(iced)?; // u[l] = t[l] + t[l+4]
        a.vmovhlps(XMM[P], XMM[T], XMM[T]).map_err(iced)?;
        a.vaddps(XMM[T], XMM[T], XMM[P]).map_err(iced)?; // u0+u2, u1+u3
        a.vmovshdup(XMM[P], XMM[T]).map_err(iced)?;
        a.vaddss(XMM[T], XMM[T], XMM[P]).map_err(iced)?;
        Ok(())
    }
}

/// The weight bytes at `disp` past the current super-block.
fn wmem(disp: i32) -> AsmMemoryOperand {
    PW + disp
}

/// The current super-block into `acc` and `mac`.
fn super_block(e: &mut Emitter) -> Result<(), EmitError> {
    let (l, acc, mac) = (YMM[L], YMM[ACC], YMM[MAC]);
    let a = e.asm();
    // Scales: a0 (eax), a2 (edx) → scales 0..8 as bytes in rax.
    a.mov(eax, dword_ptr(wmem(4))).map_err(iced)?;
    a.mov(edx, dword_ptr(wmem(12))).map_err(iced)?;
    a.mov(r10d, eax).map_err(iced)?;
    a.shr(r10d, 6).map_err(iced)?;
    a.and(r10d, 0x0303_0303).map_err(iced)?;
    a.shl(r10d, 4).map_err(iced)?;
    a.mov(r11, rdx).map_err(iced)?;
    a.and(r11, 0x0f0f_0f0f).map_err(iced)?;
    a.or(r11, r10).map_err(iced)?;
    a.and(eax, 0x3f3f_3f3f).map_err(iced)?;
    a.shl(r11, 32).map_err(iced)?;
    a.or(rax, r11).map_err(iced)?;
    a.vmovq(XMM[S], rax).map_err(iced)?;
    a.vpmovzxbw(XMM[S], XMM[S]).map_err(iced)?;
    a.vmovdqu(xmmword_ptr(rsp), XMM[S]).map_err(iced)?;
    // Minimums: a1 (eax) and a2 >> 4 (edx) → bytes in rax, doubled, words.
    a.mov(eax, dword_ptr(wmem(8))).map_err(iced)?;
    a.mov(r10d, eax).map_err(iced)?;
    a.shr(r10d, 6).map_err(iced)?;
    a.and(r10d, 0x0303_0303).map_err(iced)?;
    a.shl(r10d, 4).map_err(iced)?;
    a.shr(edx, 4).map_err(iced)?;
    a.and(edx, 0x0f0f_0f0f).map_err(iced)?;
    a.or(rdx, r10).map_err(iced)?;
    a.and(eax, 0x3f3f_3f3f).map_err(iced)?;
    a.shl(rdx, 32).map_err(iced)?;
    a.or(rax, rdx).map_err(iced)?;
    a.vmovq(XMM[MINS], rax).map_err(iced)?;
    a.vpunpcklbw(XMM[MINS], XMM[MINS], XMM[MINS])
        .map_err(iced)?;
    a.vpmovzxbw(YMM[MINS], XMM[MINS]).map_err(iced)?;
    // Integer lanes.
    a.vpxor(l, l, l).map_err(iced)?;
    for pair in 0..4i32 {
        a.vmovdqu(YMM[Q], ymmword_ptr(wmem(16 + 32 * pair)))
            .map_err(iced)?;
        a.vpand(YMM[LO], YMM[Q], YMM[MASK]).map_err(iced)?;
        a.vpsrlw(YMM[HI], YMM[Q], 4).map_err(iced)?;
        a.vpand(YMM[HI], YMM[HI], YMM[MASK]).map_err(iced)?;
        for (sub, q) in [(2 * pair, LO), (2 * pair + 1, HI)] {
            a.vpmaddubsw(YMM[P], YMM[q], ymmword_ptr(PX + 4 + 32 * sub))
                .map_err(iced)?;
            a.vpbroadcastw(YMM[S], word_ptr(rsp + 2 * sub))
                .map_err(iced)?;
            a.vpmaddwd(YMM[P], YMM[P], YMM[S]).map_err(iced)?;
            a.vpaddd(l, l, YMM[P]).map_err(iced)?;
        }
    }
    // N = m · (bs[2l] + bs[2l+1]).
    a.vpmaddwd(YMM[MINS], YMM[MINS], ymmword_ptr(PX + 4 + QK_K as i32))
        .map_err(iced)?;
    // dd = f32(d) · dx, dm = f32(dmin) · dx, broadcast.
    for (reg, at) in [(DD, 0), (DM, 2)] {
        a.movzx(eax, word_ptr(wmem(at))).map_err(iced)?;
        a.vmovd(XMM[reg], eax).map_err(iced)?;
        a.vcvtph2ps(XMM[reg], XMM[reg]).map_err(iced)?;
        a.vmulss(XMM[reg], XMM[reg], dword_ptr(PX)).map_err(iced)?;
        a.vbroadcastss(YMM[reg], XMM[reg]).map_err(iced)?;
    }
    a.vcvtdq2ps(YMM[T], l).map_err(iced)?;
    a.vmulps(YMM[T], YMM[T], YMM[DD]).map_err(iced)?;
    a.vaddps(acc, acc, YMM[T]).map_err(iced)?;
    a.vcvtdq2ps(YMM[T], YMM[MINS]).map_err(iced)?;
    a.vmulps(YMM[T], YMM[T], YMM[DM]).map_err(iced)?;
    a.vaddps(mac, mac, YMM[T]).map_err(iced)?;
    Ok(())
}
