//! The arm64 twin of `q6_k.matvec` (NEON + FEAT_DotProd): the arm's
//! offer, the body emitted with weft-a64 inside the frame every K-quant
//! arm64 twin shares.
//!
//! Per half super-block (128 weights), four loads of `ql` and two of `qh`
//! give the four runs of 32 quants (`k = 0..4`) sixteen at a time: a
//! nibble (`and 0x0f` for `k < 2`, `ushr #4` otherwise) or-ed with the bit
//! pair (`ushr #2k`, `and 0x03`, `shl #4`), less 32 — the signed quant,
//! `-32..=31`. `sdot` of each sixteen quants (one sub-block) with their
//! activation quants into a zeroed `.4s`; three `addp` reduce four
//! sub-blocks' dot products to one lane each, in sub-block order, and
//! `mla` by those four sub-blocks' scales (sign-extended once per
//! super-block by `sshll`/`sshll2`) adds them into the integer sum; `addv`
//! leaves the contract's `S`, exact. Float: `scvtf` (rounding to nearest,
//! as the contract says), `fmul` by `f32(d) ⊗ dx`, `fadd` into the scalar
//! accumulator — never `fmadd`.
//!
//! Rows outermost, vectors next, super-blocks innermost (the frame's
//! order, so each row is one linear stream). No load assumes alignment.

use weft_a64::{h, mem, q, s, v, Assembler, EncodeError};
use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};
use weft_quant::Format;

use super::FAMILY;
use crate::a64::{Body, PW, PX, RESULT};

/// The arm64 twin of the `q6_k.matvec` arm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Q6KMatvecSdot;

/// Every arm64 twin this module offers.
pub const TWINS: [Q6KMatvecSdot; 1] = [Q6KMatvecSdot];

/// `sdot` (FEAT_DotProd) on Advanced SIMD.
const FEATURES: &[Feature] = &[Feature::Neon, Feature::Dotprod];

// SAFETY: the body reads only the super-blocks of rows row_start..row_end
// and of the `batch` vectors, writes only their outputs, keeps the AAPCS64
// callee-saved registers and returns (crate::a64's docs); validation
// checks its results against the arm.
unsafe impl Twin for Q6KMatvecSdot {
    fn name(&self) -> &'static str {
        "q6_k.matvec.twin.sdot"
    }

    fn isa(&self) -> Isa {
        Isa::Aarch64
    }

    fn requires(&self) -> &'static [Feature] {
        FEATURES
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        crate::a64::emit(&Q6K, self.name(), FAMILY, offer)
    }

    /// Rows outermost, then the batch's vectors, then every super-block of
    /// the row.
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        crate::twin::nest(offer, Format::Q6_K)
    }
}

// Vector registers: constants, the accumulator, then scratch.
const MASK: u8 = 0;
const THREE: u8 = 1;
const BIAS: u8 = 2;
const ACC: u8 = 16;
const QL: [u8; 4] = [3, 4, 5, 6];
const QH: [u8; 2] = [7, 20];
const LOW: u8 = 21;
const PAIR: u8 = 22;
const QV: u8 = 23;
const XV: u8 = 24;
/// `DOT[2r + m]`: run `k0 + r`, half `m` of a pair of runs.
const DOT: [u8; 4] = [25, 26, 27, 28];
const P: [u8; 3] = [29, 30, 31];
const SUM: u8 = 8;
const SC: [u8; 4] = [9, 10, 11, 12];
const SC8: u8 = 13;
const SC16: [u8; 2] = [14, 15];
const D: u8 = 17;
const DX: u8 = 18;

/// The Q6_K body inside the shared frame.
struct Q6K;

impl Body for Q6K {
    fn format(&self) -> Format {
        Format::Q6_K
    }

    fn setup(&self, a: &mut Assembler) -> Result<(), EncodeError> {
        a.movi(v(MASK).b16(), 0x0f)?;
        a.movi(v(THREE).b16(), 0x03)?;
        a.movi(v(BIAS).b16(), 0x20)
    }

    fn clear(&self, a: &mut Assembler) -> Result<(), EncodeError> {
        a.movi(v(ACC).d2(), 0)
    }

    fn block(&self, a: &mut Assembler) -> Result<(), EncodeError> {
        // The sixteen scales as four `.4s`, sub-blocks 4g..4g+4 in SC[g].
        a.ldr(q(SC8), mem(PW).off(192))?;
        a.sshll(v(SC16[0]).h8(), v(SC8).b8(), 0)?;
        a.sshll2(v(SC16[1]).h8(), v(SC8).b16(), 0)?;
        for (g, half) in [(0, 0), (1, 0), (2, 1), (3, 1)] {
            if g % 2 == 0 {
                a.sshll(v(SC[g]).s4(), v(SC16[half]).h4(), 0)?;
            } else {
                a.sshll2(v(SC[g]).s4(), v(SC16[half]).h8(), 0)?;
            }
        }
        a.movi(v(SUM).d2(), 0)?;
        for half in 0..2i64 {
            for (i, reg) in QL.into_iter().enumerate() {
                a.ldr(q(reg), mem(PW).off(64 * half + 16 * i as i64))?;
            }
            for (m, reg) in QH.into_iter().enumerate() {
                a.ldr(q(reg), mem(PW).off(128 + 32 * half + 16 * m as i64))?;
            }
            for k0 in [0usize, 2] {
                for r in 0..2 {
                    let k = k0 + r;
                    for m in 0..2 {
                        run_half(a, half, k, m, DOT[2 * r + m])?;
                    }
                }
                // [ΣD(j), ΣD(j+1), ΣD(j+2), ΣD(j+3)], j = 8·half + 2·k0.
                a.addp(v(P[0]).s4(), v(DOT[0]).s4(), v(DOT[1]).s4())?;
                a.addp(v(P[1]).s4(), v(DOT[2]).s4(), v(DOT[3]).s4())?;
                a.addp(v(P[2]).s4(), v(P[0]).s4(), v(P[1]).s4())?;
                let g = 2 * half as usize + k0 / 2;
                a.mla(v(SUM).s4(), v(P[2]).s4(), v(SC[g]).s4())?;
            }
        }
        a.addv(s(SUM), v(SUM).s4())?;
        a.scvtf(s(SUM), s(SUM))?;
        // acc ⊕ (f32(S) ⊗ (f32(d) ⊗ dx)).
        a.ldr(h(D), mem(PW).off(208))?;
        a.ldr(s(DX), mem(PX).off(0))?;
        a.fcvt(s(D), h(D))?;
        a.fmul(s(D), s(D), s(DX))?;
        a.fmul(s(SUM), s(SUM), s(D))?;
        a.fadd(s(ACC), s(ACC), s(SUM))
    }

    fn fold(&self, a: &mut Assembler) -> Result<(), EncodeError> {
        a.fmov(s(RESULT), s(ACC))
    }
}

/// Sixteen quants of run `k` of half super-block `half` (elements
/// `128·half + 32k + 16m ..`, one sub-block) dotted with their activation
/// quants into `dot`, zeroed first.
fn run_half(a: &mut Assembler, half: i64, k: usize, m: usize, dot: u8) -> Result<(), EncodeError> {
    // ql byte 64·half + 32·(k mod 2) + l: loads QL[2·(k mod 2) + m].
    let ql = QL[2 * (k % 2) + m];
    if k < 2 {
        a.and(v(LOW).b16(), v(ql).b16(), v(MASK).b16())?;
    } else {
        a.ushr(v(LOW).b16(), v(ql).b16(), 4)?;
    }
    if k == 0 {
        a.and(v(PAIR).b16(), v(QH[m]).b16(), v(THREE).b16())?;
    } else {
        a.ushr(v(PAIR).b16(), v(QH[m]).b16(), 2 * k as i64)?;
        a.and(v(PAIR).b16(), v(PAIR).b16(), v(THREE).b16())?;
    }
    a.shl(v(PAIR).b16(), v(PAIR).b16(), 4)?;
    a.orr(v(QV).b16(), v(LOW).b16(), v(PAIR).b16())?;
    a.sub(v(QV).b16(), v(QV).b16(), v(BIAS).b16())?;
    let x_at = 4 + 128 * half + 32 * k as i64 + 16 * m as i64;
    a.ldr(q(XV), mem(PX).off(x_at))?;
    a.movi(v(dot).d2(), 0)?;
    a.sdot(v(dot).s4(), v(QV).b16(), v(XV).b16())
}
