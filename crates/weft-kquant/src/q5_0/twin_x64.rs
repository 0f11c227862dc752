//! The x64 twin of `q5_0.matvec` (AVX2 + F16C): the arm's offer, the body
//! emitted through weft-x64 inside the frame every family of the crate
//! shares (one row at a time, each row one linear stream).
//!
//! Three tiers, one body each, bit-identical (the contract fixes every
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
//! - [`Tier::Avx512Vnni`]: the AVX-512 BW tier's quants; what depends on
//!   the activations alone is made once per call into a table below the
//!   stack (one 36-byte entry per activation block of every vector:
//!   `-16 · Σx` per dword by `vpdpbusd` of sixteens, and `f32(dx)`), so a
//!   block is one `vpdpbusd` of `q + 16` onto its entry's `-16 · Σx` (the
//!   exact lanes) and one multiply of `f32(dw)` by the entry's `f32(dx)`
//!   (`{1to8}`), then the float steps below. The table stays under a page
//!   (at most 108 activation blocks: 108 · 36 bytes and the frame's
//!   header), so offers beyond that are refused by name. 1.25× the BW
//!   tier at Gemma 3's shapes from L2 on Zen 4.
//!
//! Then, in the first two: `vpmaddubsw` against the activation quants (at most
//! 2 · 31 · 128: no saturation) minus `vpmaddubsw(16, x)` is `q · x` in
//! pairs, and `vpmaddwd` with ones gives the contract's eight exact dword
//! lanes. Scales: `vpbroadcastw` + `vcvtph2ps` of both (exact), `vmulps`;
//! then, in all three, `vcvtdq2ps`, `vmulps`, `vaddps` — never FMA — and
//! the contract's fold after the last block.

use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};
use weft_x64::iced_x86::code_asm::{
    dword_bcst, dword_ptr, k1, qword_ptr, r10, r11, rax, rsp, word_ptr, xmmword_ptr, ymmword_ptr,
    AsmRegister64,
};
use weft_x64::regs::{XMM, YMM};
use weft_x64::{Abi, EmitError, Emitter};

use super::FAMILY;
use crate::x64::{iced, Body, N, PW, PX, RESULT, TABLE_START, TABLE_STRIDE};
use weft_quant::Format;

/// Which instruction set a twin is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// AVX2 + F16C.
    Avx2,
    /// AVX-512 BW + VL on ymm registers: the fifth bits through a mask.
    Avx512Bw,
    /// The AVX-512 BW tier's quants, then AVX-512 VNNI: `vpdpbusd` onto a
    /// per-call table of each activation block's `-16 · Σx` and `f32(dx)`.
    Avx512Vnni,
}

/// An x64 twin of the `q5_0.matvec` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Q5_0MatvecX64 {
    tier: Tier,
    abi: Abi,
}

/// Every twin this module offers.
pub const TWINS: [Q5_0MatvecX64; 3] = [
    Q5_0MatvecX64::new(Tier::Avx2),
    Q5_0MatvecX64::new(Tier::Avx512Bw),
    Q5_0MatvecX64::new(Tier::Avx512Vnni),
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
/// The AVX-512 BW tier's, and `vpdpbusd` (AVX-512 VNNI).
const AVX512VNNI_FEATURES: &[Feature] = &[
    Feature::Avx,
    Feature::Avx2,
    Feature::F16c,
    Feature::Avx512f,
    Feature::Avx512bw,
    Feature::Avx512vl,
    Feature::Avx512vnni,
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
            Tier::Avx512Vnni => "q5_0.matvec.twin.avx512vnni",
        }
    }

    fn isa(&self) -> Isa {
        Isa::X86_64
    }

    fn requires(&self) -> &'static [Feature] {
        match self.tier {
            Tier::Avx2 => AVX2_FEATURES,
            Tier::Avx512Bw => AVX512BW_FEATURES,
            Tier::Avx512Vnni => AVX512VNNI_FEATURES,
        }
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        crate::x64::emit(&Q5_0(self.tier), self.abi, self.name(), FAMILY, offer)
    }

    /// Rows outermost, then the batch's vectors, then every block of the
    /// row; the VNNI tier first fills its table, one entry per activation
    /// block.
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        match self.tier {
            Tier::Avx512Vnni => crate::twin::nest_with_table(offer, Format::Q5_0),
            _ => crate::twin::nest(offer, Format::Q5_0),
        }
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
        let a = e.asm();
        a.vxorps(YMM[ACC], YMM[ACC], YMM[ACC]).map_err(iced)?;
        if self.0 == Tier::Avx512Vnni {
            // The table's entry for this vector's first block.
            a.mov(TP, N).map_err(iced)?;
            a.imul_2(TP, qword_ptr(rsp + TABLE_STRIDE)).map_err(iced)?;
            a.add(TP, qword_ptr(rsp + TABLE_START)).map_err(iced)?;
        }
        Ok(())
    }

    fn table_bytes(&self) -> i32 {
        match self.0 {
            Tier::Avx512Vnni => ENTRY,
            _ => 0,
        }
    }

    /// `-16 · Σ x` per dword of the block (the bias of `q + 16`, by
    /// `vpdpbusd` of sixteens), then `f32(dx)`.
    fn table_entry(&self, e: &mut Emitter) -> Result<(), EmitError> {
        let a = e.asm();
        let y = |r: usize| YMM[r];
        a.vpxor(y(C), y(C), y(C)).map_err(iced)?;
        a.evex()
            .vpdpbusd(y(C), y(M10), ymmword_ptr(r11 + 2))
            .map_err(iced)?;
        a.vpxor(y(P), y(P), y(P)).map_err(iced)?;
        a.vpsubd(y(C), y(P), y(C)).map_err(iced)?;
        a.vmovdqu(ymmword_ptr(TP), y(C)).map_err(iced)?;
        a.vpbroadcastw(XMM[T], word_ptr(r11)).map_err(iced)?;
        a.vcvtph2ps(XMM[T], XMM[T]).map_err(iced)?;
        a.vmovss(dword_ptr(TP + 32), XMM[T]).map_err(iced)?;
        Ok(())
    }

    fn super_block(&self, e: &mut Emitter) -> Result<(), EmitError> {
        let y = |r: usize| YMM[r];
        let a = e.asm();
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
            Tier::Avx512Bw | Tier::Avx512Vnni => {
                a.kmovd(k1, dword_ptr(PW + 2)).map_err(iced)?;
                // EVEX, or the assembler would pick VEX and drop the mask.
                a.evex().vpaddb(y(Q).k1(), y(Q), y(M10)).map_err(iced)?;
            }
        }
        if self.0 == Tier::Avx512Vnni {
            return vnni_rest(e);
        }
        let a = e.asm();
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

/// Bytes per activation block of the VNNI tier's table: eight dwords of
/// `-16 · Σx`, then `f32(dx)`.
const ENTRY: i32 = 36;

/// The VNNI tier's table pointer: the entry of the current block.
const TP: AsmRegister64 = r10;

/// The VNNI tier after its quants (`q + 16` in ymm `Q`): the exact lanes
/// by one `vpdpbusd` onto the table's `-16 · Σx`, the scale by one
/// multiply with the table's `f32(dx)`, then the contract's float steps.
fn vnni_rest(e: &mut Emitter) -> Result<(), EmitError> {
    let a = e.asm();
    let y = |r: usize| YMM[r];
    a.vmovdqu(y(P), ymmword_ptr(TP)).map_err(iced)?;
    a.evex()
        .vpdpbusd(y(P), y(Q), ymmword_ptr(PX + 2))
        .map_err(iced)?;
    // s = f32(dw) · f32(dx), in every lane.
    a.vpbroadcastw(XMM[S], word_ptr(PW)).map_err(iced)?;
    a.vcvtph2ps(y(S), XMM[S]).map_err(iced)?;
    a.vmulps(y(S), y(S), dword_bcst(TP + 32)).map_err(iced)?;
    a.vcvtdq2ps(y(P), y(P)).map_err(iced)?;
    a.vmulps(y(P), y(P), y(S)).map_err(iced)?;
    a.vaddps(y(ACC), y(ACC), y(P)).map_err(iced)?;
    a.add(TP, ENTRY).map_err(iced)?;
    Ok(())
}
