//! The x64 twin of `q6_k.matvec` (AVX2 + F16C): the arm's offer, the body
//! emitted through weft-x64 inside the frame every K-quant twin shares
//! (one row at a time, each row one linear stream).
//!
//! Per half super-block (128 weights), three 32-byte loads (`ql` twice,
//! `qh`) give the four quant vectors of 32 as unsigned `q + 32`: a nibble
//! (`vpand 0x0f`, or `vpsrlw 4` then `vpand`) or-ed with a bit pair
//! (`vpsrlw 2k`, `vpand 0x03`, `vpsllw 4`; word shifts are exact here
//! because the masks keep each byte's own bits). Each vector meets its 32
//! activation quants in `vpmaddubsw` (at most 2 · 63 · 128: no
//! saturation); `vpmaddwd` with the two sub-blocks' scales (each
//! `vpbroadcastb`, joined by `vpunpcklqdq`, sign-extended by `vpmovsxbw`)
//! gives eight exact dwords, summed with `vpaddd`. The bias leaves with one
//! `vpmaddwd` of the sixteen `bsums` and the sixteen scales, `vpslld 5`,
//! `vpsubd`; a horizontal add gives `S`. Float: `vcvtdq2ps`, `vmulss` by
//! `vcvtph2ps(d) · dx`, `vaddss` — the contract's order, never FMA.

use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};
use weft_x64::iced_x86::code_asm::{byte_ptr, dword_ptr, eax, word_ptr, xmmword_ptr, ymmword_ptr};
use weft_x64::regs::{XMM, YMM};
use weft_x64::{Abi, EmitError, Emitter};

use super::FAMILY;
use crate::x64::{iced, Body, PW, PX, RESULT};
use weft_quant::kquant::QK_K;
use weft_quant::Format;

/// The x64 twin of the `q6_k.matvec` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Q6KMatvecX64 {
    abi: Abi,
}

/// Every twin this module offers.
pub const TWINS: [Q6KMatvecX64; 1] = [Q6KMatvecX64::new()];

/// `vpmaddubsw`, `vpmaddwd`, `vpbroadcastb`, `vpmovsxbw` (AVX2),
/// `vcvtph2ps` (F16C). The contract forbids FMA, so FMA is not required.
const FEATURES: &[Feature] = &[Feature::Avx, Feature::Avx2, Feature::F16c];

impl Q6KMatvecX64 {
    /// The twin for the host's calling convention.
    pub const fn new() -> Self {
        Self { abi: Abi::host() }
    }

    /// The same twin entered with `abi` (to test Win64 on Linux).
    pub const fn with_abi(self, abi: Abi) -> Self {
        Self { abi }
    }
}

impl Default for Q6KMatvecX64 {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the body reads and writes only what the arguments' extents name
// and returns normally (module docs); validation checks its results.
unsafe impl Twin for Q6KMatvecX64 {
    fn name(&self) -> &'static str {
        "q6_k.matvec.twin.avx2"
    }

    fn isa(&self) -> Isa {
        Isa::X86_64
    }

    fn requires(&self) -> &'static [Feature] {
        FEATURES
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        crate::x64::emit(&Q6K, self.abi, self.name(), FAMILY, offer)
    }

    /// Rows outermost, then the batch's vectors, then every super-block of
    /// the row.
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        crate::twin::nest(offer, Format::Q6_K)
    }
}

// ---------------------------------------------------------------- body ---

const M0F: usize = 0; // 0x0f bytes
const M03: usize = 1; // 0x03 bytes
const ISUM: usize = 2;
const ACC: usize = 3; // f32 in lane 0
const QLA: usize = 4;
const QLB: usize = 5;
const QH: usize = 6;
const Q: usize = 7;
const T: usize = 8;
const P: usize = 9;
const SA: usize = 10;
const SB: usize = 11;
const D: usize = 12;

/// The Q6_K body inside the shared frame.
struct Q6K;

impl Body for Q6K {
    fn format(&self) -> Format {
        Format::Q6_K
    }

    fn setup(&self, e: &mut Emitter) -> Result<(), EmitError> {
        e.broadcast_u16(YMM[M0F], 0x0f0f)?;
        e.broadcast_u16(YMM[M03], 0x0303)
    }

    fn clear(&self, e: &mut Emitter) -> Result<(), EmitError> {
        e.asm().vxorps(XMM[ACC], XMM[ACC], XMM[ACC]).map_err(iced)
    }

    fn super_block(&self, e: &mut Emitter) -> Result<(), EmitError> {
        let a = e.asm();
        let y = |r: usize| YMM[r];
        let x = |r: usize| XMM[r];
        a.vpxor(y(ISUM), y(ISUM), y(ISUM)).map_err(iced)?;
        for h in 0..2i32 {
            a.vmovdqu(y(QLA), ymmword_ptr(PW + 64 * h)).map_err(iced)?;
            a.vmovdqu(y(QLB), ymmword_ptr(PW + 64 * h + 32))
                .map_err(iced)?;
            a.vmovdqu(y(QH), ymmword_ptr(PW + 128 + 32 * h))
                .map_err(iced)?;
            for k in 0..4i32 {
                let ql = if k % 2 == 0 { QLA } else { QLB };
                // The bit pair above the nibble.
                if k == 0 {
                    a.vpand(y(T), y(QH), y(M03)).map_err(iced)?;
                } else {
                    a.vpsrlw(y(T), y(QH), 2 * k).map_err(iced)?;
                    a.vpand(y(T), y(T), y(M03)).map_err(iced)?;
                }
                a.vpsllw(y(T), y(T), 4).map_err(iced)?;
                // The nibble.
                if k < 2 {
                    a.vpand(y(Q), y(ql), y(M0F)).map_err(iced)?;
                } else {
                    a.vpsrlw(y(Q), y(ql), 4).map_err(iced)?;
                    a.vpand(y(Q), y(Q), y(M0F)).map_err(iced)?;
                }
                a.vpor(y(Q), y(Q), y(T)).map_err(iced)?;
                a.vpmaddubsw(y(P), y(Q), ymmword_ptr(PX + 4 + 128 * h + 32 * k))
                    .map_err(iced)?;
                // Scales of sub-blocks j and j + 1, eight words each.
                let j = 8 * h + 2 * k;
                a.vpbroadcastb(x(SA), byte_ptr(PW + 192 + j))
                    .map_err(iced)?;
                a.vpbroadcastb(x(SB), byte_ptr(PW + 192 + j + 1))
                    .map_err(iced)?;
                a.vpunpcklqdq(x(SA), x(SA), x(SB)).map_err(iced)?;
                a.vpmovsxbw(y(SA), x(SA)).map_err(iced)?;
                a.vpmaddwd(y(P), y(P), y(SA)).map_err(iced)?;
                a.vpaddd(y(ISUM), y(ISUM), y(P)).map_err(iced)?;
            }
        }
        // The bias: 32 · Σ_j sc[j] · bsums[j].
        a.vpmovsxbw(y(SA), xmmword_ptr(PW + 192)).map_err(iced)?;
        a.vpmaddwd(y(P), y(SA), ymmword_ptr(PX + 4 + QK_K as i32))
            .map_err(iced)?;
        a.vpslld(y(P), y(P), 5).map_err(iced)?;
        a.vpsubd(y(ISUM), y(ISUM), y(P)).map_err(iced)?;
        // S: the eight dwords added (exact).
        a.vextracti128(x(T), y(ISUM), 1).map_err(iced)?;
        a.vpaddd(x(ISUM), x(ISUM), x(T)).map_err(iced)?;
        a.vpshufd(x(T), x(ISUM), 0x4e).map_err(iced)?;
        a.vpaddd(x(ISUM), x(ISUM), x(T)).map_err(iced)?;
        a.vpshufd(x(T), x(ISUM), 0xb1).map_err(iced)?;
        a.vpaddd(x(ISUM), x(ISUM), x(T)).map_err(iced)?;
        a.vcvtdq2ps(x(ISUM), x(ISUM)).map_err(iced)?;
        // s = f32(d) · dx; acc += f32(S) · s.
        a.movzx(eax, word_ptr(PW + 208)).map_err(iced)?;
        a.vmovd(x(D), eax).map_err(iced)?;
        a.vcvtph2ps(x(D), x(D)).map_err(iced)?;
        a.vmulss(x(D), x(D), dword_ptr(PX)).map_err(iced)?;
        a.vmulss(x(ISUM), x(ISUM), x(D)).map_err(iced)?;
        a.vaddss(x(ACC), x(ACC), x(ISUM)).map_err(iced)?;
        Ok(())
    }

    fn fold(&self, e: &mut Emitter) -> Result<(), EmitError> {
        e.asm().vmovaps(XMM[RESULT], XMM[ACC]).map_err(iced)
    }
}
