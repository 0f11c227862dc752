//! The x64 twin of `q5_0.matvec` (AVX2 + F16C): the arm's offer, the body
//! emitted through weft-x64 inside the frame every family of the crate
//! shares (one row at a time, each row one linear stream).
//!
//! Two tiers, one body each, bit-identical (the contract fixes every
//! rounding):
//!
//! - [`Tier::Avx2`]: per block, the sixteen nibble bytes fill both halves
//!   of a ymm (`vbroadcasti128`), the upper half shifted right by four
//!   (`vpsrlvd` by 0 and 4), masked to nibbles: elements 0–31 in order.
//!   The fifth bits: `qh` broadcast to every dword, `vpshufb` gives byte
//!   `i` `qh`'s byte `i / 8`, `vpor` with `!(1 << (i mod 8))` and
//!   `vpcmpeqb` with all-ones leave `0xff` exactly where the bit is set,
//!   `vpand 0x10` makes it 16, `vpor` puts it in: each byte is the
//!   unsigned `q + 16`.
//! - [`Tier::Avx512Bw`]: the same, but the fifth bits are a mask register
//!   (`kmovd k1, qh`) and one masked `vpaddb` adds 16 where they are set:
//!   two instructions for the AVX2 tier's six.
//!
//! Then, in both: `vpmaddubsw` against the activation quants (at most
//! 2 · 31 · 128: no saturation) minus `vpmaddubsw(16, x)` is `q · x` in
//! pairs, and `vpmaddwd` with ones gives the contract's eight exact dword
//! lanes. Scales: `vpbroadcastw` + `vcvtph2ps` of both (exact), `vmulps`;
//! then `vcvtdq2ps`, `vmulps`, `vaddps` — never FMA — and the contract's
//! fold after the last block.

use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};
use weft_x64::iced_x86::code_asm::{
    dword_ptr, k1, qword_ptr, rax, rsp, word_ptr, xmmword_ptr, ymmword_ptr,
};
use weft_x64::regs::{XMM, YMM};
use weft_x64::{Abi, EmitError, Emitter};

use super::FAMILY;
use crate::x64::{iced, Body, PW, PX, RESULT};
use weft_quant::Format;

/// Which instruction set a twin is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// AVX2 + F16C.
    Avx2,
    /// AVX-512 BW + VL on ymm registers: the fifth bits through a mask.
    Avx512Bw,
}

/// An x64 twin of the `q5_0.matvec` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Q5_0MatvecX64 {
    tier: Tier,
    abi: Abi,
}

/// Every twin this module offers.
pub const TWINS: [Q5_0MatvecX64; 2] = [
    Q5_0MatvecX64::new(Tier::Avx2),
    Q5_0MatvecX64::new(Tier::Avx512Bw),
];

/// `vpshufb`, `vpcmpeqb`, `vpsrlvd`, `vpmaddubsw`, `vpmaddwd`,
/// `vbroadcasti128` (AVX2), `vcvtph2ps` (F16C). The contract forbids FMA,
/// so FMA is not required.
const AVX2_FEATURES: &[Feature] = &[Feature::Avx, Feature::Avx2, Feature::F16c];
/// The AVX2 tier's, and `kmovd`, masked `vpaddb` on ymm (AVX-512 BW, VL).
const AVX512BW_FEATURES: &[Feature] = &[
    Feature::Avx,
    Feature::Avx2,
    Feature::F16c,
    Feature::Avx512f,
    Feature::Avx512bw,
    Feature::Avx512vl,
];

impl Q5_0MatvecX64 {
    /// The twin of `tier` for the host's calling convention.
    pub const fn new(tier: Tier) -> Self {
        Self {
            tier,
            abi: Abi::host(),
        }
    }

    /// The same twin entered with `abi` (to test Win64 on Linux).
    pub const fn with_abi(self, abi: Abi) -> Self {
        Self { abi, ..self }
    }

    /// The tier.
    pub fn tier(&self) -> Tier {
        self.tier
    }
}

// SAFETY: the body reads and writes only what the arguments' extents name
// and returns normally (module docs); validation checks its results.
unsafe impl Twin for Q5_0MatvecX64 {
    fn name(&self) -> &'static str {
        match self.tier {
            Tier::Avx2 => "q5_0.matvec.twin.avx2",
            Tier::Avx512Bw => "q5_0.matvec.twin.avx512bw",
        }
    }

    fn isa(&self) -> Isa {
        Isa::X86_64
    }

    fn requires(&self) -> &'static [Feature] {
        match self.tier {
            Tier::Avx2 => AVX2_FEATURES,
            Tier::Avx512Bw => AVX512BW_FEATURES,
        }
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        crate::x64::emit(&Q5_0(self.tier), self.abi, self.name(), FAMILY, offer)
    }

    /// Rows outermost, then the batch's vectors, then every block of the
    /// row.
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        crate::twin::nest(offer, Format::Q5_0)
    }
}

// ---------------------------------------------------------------- body ---

const M0F: usize = 0; // 0x0f bytes
const M10: usize = 1; // 0x10 bytes: the fifth bit, and the bias's 16s
const ONES16: usize = 2; // words of 1
const ALL: usize = 3; // all ones
const SHUF: usize = 4; // byte i ← qh byte i / 8
const BITSEL: usize = 5; // byte i: !(1 << (i mod 8))
const ACC: usize = 6;
const Q: usize = 7;
const H: usize = 8;
const P: usize = 9;
const C: usize = 10;
const S: usize = 11;
const T: usize = 12;
const SHIFT: usize = 13; // dwords 0, 0, 0, 0, 4, 4, 4, 4

/// The Q5_0 body of a tier inside the shared frame.
struct Q5_0(Tier);

impl Body for Q5_0 {
    fn format(&self) -> Format {
        Format::Q5_0
    }

    fn setup(&self, e: &mut Emitter) -> Result<(), EmitError> {
        e.broadcast_u16(YMM[M0F], 0x0f0f)?;
        e.broadcast_u16(YMM[M10], 0x1010)?;
        e.broadcast_u16(YMM[ONES16], 1)?;
        let a = e.asm();
        a.vpcmpeqd(YMM[ALL], YMM[ALL], YMM[ALL]).map_err(iced)?;
        // SHUF through the frame's stack slot: qwords of 0s, 1s, 2s, 3s.
        for (i, v) in [
            0u64,
            0x0101_0101_0101_0101,
            0x0202_0202_0202_0202,
            0x0303_0303_0303_0303,
        ]
        .into_iter()
        .enumerate()
        {
            a.mov(rax, v).map_err(iced)?;
            a.mov(qword_ptr(rsp + 8 * i as i32), rax).map_err(iced)?;
        }
        a.vmovdqu(YMM[SHUF], ymmword_ptr(rsp)).map_err(iced)?;
        // SHIFT through the slot: four dwords of 0, four of 4.
        a.mov(rax, 0u64).map_err(iced)?;
        a.mov(qword_ptr(rsp), rax).map_err(iced)?;
        a.mov(qword_ptr(rsp + 8), rax).map_err(iced)?;
        a.mov(rax, 0x0000_0004_0000_0004_u64).map_err(iced)?;
        a.mov(qword_ptr(rsp + 16), rax).map_err(iced)?;
        a.mov(qword_ptr(rsp + 24), rax).map_err(iced)?;
        a.vmovdqu(YMM[SHIFT], ymmword_ptr(rsp)).map_err(iced)?;
        a.mov(rax, 0x7fbf_dfef_f7fb_fdfe_u64).map_err(iced)?;
        a.vmovq(XMM[BITSEL], rax).map_err(iced)?;
        a.vpbroadcastq(YMM[BITSEL], XMM[BITSEL]).map_err(iced)?;
        Ok(())
    }

    fn clear(&self, e: &mut Emitter) -> Result<(), EmitError> {
        e.asm().vxorps(YMM[ACC], YMM[ACC], YMM[ACC]).map_err(iced)
    }

    fn super_block(&self, e: &mut Emitter) -> Result<(), EmitError> {
        let a = e.asm();
        let y = |r: usize| YMM[r];
        let x = |r: usize| XMM[r];
        // Nibbles: elements 0–15 low, 16–31 high.
        a.vbroadcasti128(y(Q), xmmword_ptr(PW + 6)).map_err(iced)?;
        a.vpsrlvd(y(Q), y(Q), y(SHIFT)).map_err(iced)?;
        a.vpand(y(Q), y(Q), y(M0F)).map_err(iced)?;
        // Fifth bits: + 16 where set.
        match self.0 {
            Tier::Avx2 => {
                a.vpbroadcastd(y(H), dword_ptr(PW + 2)).map_err(iced)?;
                a.vpshufb(y(H), y(H), y(SHUF)).map_err(iced)?;
                a.vpor(y(H), y(H), y(BITSEL)).map_err(iced)?;
                a.vpcmpeqb(y(H), y(H), y(ALL)).map_err(iced)?;
                a.vpand(y(H), y(H), y(M10)).map_err(iced)?;
                a.vpor(y(Q), y(Q), y(H)).map_err(iced)?;
            }
            Tier::Avx512Bw => {
                a.kmovd(k1, dword_ptr(PW + 2)).map_err(iced)?;
                // EVEX, or the assembler would pick VEX and drop the mask.
                a.evex().vpaddb(y(Q).k1(), y(Q), y(M10)).map_err(iced)?;
            }
        }
        // I = (q + 16)·x − 16·x in pairs, then quads.
        a.vpmaddubsw(y(P), y(Q), ymmword_ptr(PX + 2))
            .map_err(iced)?;
        a.vpmaddubsw(y(C), y(M10), ymmword_ptr(PX + 2))
            .map_err(iced)?;
        a.vpsubw(y(P), y(P), y(C)).map_err(iced)?;
        a.vpmaddwd(y(P), y(P), y(ONES16)).map_err(iced)?;
        // s = f32(dw) · f32(dx), in every lane.
        a.vpbroadcastw(x(S), word_ptr(PW)).map_err(iced)?;
        a.vcvtph2ps(y(S), x(S)).map_err(iced)?;
        a.vpbroadcastw(x(T), word_ptr(PX)).map_err(iced)?;
        a.vcvtph2ps(y(T), x(T)).map_err(iced)?;
        a.vmulps(y(S), y(S), y(T)).map_err(iced)?;
        a.vcvtdq2ps(y(P), y(P)).map_err(iced)?;
        a.vmulps(y(P), y(P), y(S)).map_err(iced)?;
        a.vaddps(y(ACC), y(ACC), y(P)).map_err(iced)?;
        Ok(())
    }

    /// `u[l] = acc[l] + acc[l+4]`, then `(u0+u2) + (u1+u3)`.
    fn fold(&self, e: &mut Emitter) -> Result<(), EmitError> {
        let a = e.asm();
        let r = XMM[RESULT];
        a.vextractf128(XMM[T], YMM[ACC], 1).map_err(iced)?;
        a.vaddps(r, XMM[ACC], XMM[T]).map_err(iced)?;
        a.vmovhlps(XMM[T], r, r).map_err(iced)?;
        a.vaddps(r, r, XMM[T]).map_err(iced)?;
        a.vmovshdup(XMM[T], r).map_err(iced)?;
        a.vaddss(r, r, XMM[T]).map_err(iced)?;
        Ok(())
    }
}
