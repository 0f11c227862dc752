//! The arm64 twin of `q4_k.matvec` (NEON + FEAT_DotProd): the arm's
//! offer, the body emitted with weft-a64 inside the frame every K-quant
//! arm64 twin shares.
//!
//! Per super-block of one row:
//!
//! - **Scales and minimums** are unpacked in general registers from the
//!   three little-endian words of the packed bytes, as the x64 twin does
//!   (scales 0–3 are `a0 & 0x3f3f3f3f`, scales 4–7
//!   `(a2 & 0x0f0f0f0f) | ((a0 >> 6) & 0x03030303) << 4`, the minimums
//!   likewise from `a1` and `a2 >> 4`); `fmov` moves each set of eight
//!   bytes into a vector, `ushll` widens the scales to two `.4s` and the
//!   minimums to one `.8h`.
//! - **Integer lanes**: each 32 bytes of nibbles split into low (`and
//!   0x0f`, sub-block `2p`) and high (`ushr #4`, sub-block `2p + 1`)
//!   halves; `sdot` of a sub-block's two sixteen-quant halves with its
//!   activation quants into zeroed `.4s` gives dword `l` =
//!   `Σ_{k<4} q · x` of the contract's lane `l` (low half lanes 0–3, high
//!   half 4–7); `mla` by the sub-block's scale (`dup` from its lane) adds
//!   `s[j] ·` that into `L`. `N` is `addp` of the sixteen `bsums` (the
//!   pairs `bs[2l] + bs[2l+1]`) times the minimums by `smull`/`smull2`.
//!   All exact.
//! - **Float lanes**: `fcvt` widens `d` and `dmin`, one scalar `fmul` by
//!   `dx` each; `scvtf`, `fmul` by element, `fadd` — never `fmla` — and
//!   after the last super-block the contract's fold.
//!
//! Rows outermost, vectors next, super-blocks innermost (the frame's
//! order, so each row is one linear stream). No load assumes alignment.

use weft_a64::{h, lsl, mem, q, s, v, w, x, Assembler, EncodeError, Inst};
use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};
use weft_quant::kquant::QK_K;
use weft_quant::Format;

use super::FAMILY;
use crate::a64::{fold8, Body, GP_SCRATCH, PW, PX};

/// The arm64 twin of the `q4_k.matvec` arm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Q4KMatvecSdot;

/// Every arm64 twin this module offers.
pub const TWINS: [Q4KMatvecSdot; 1] = [Q4KMatvecSdot];

/// `sdot` (FEAT_DotProd) on Advanced SIMD.
const FEATURES: &[Feature] = &[Feature::Neon, Feature::Dotprod];

// SAFETY: the body reads only the super-blocks of rows row_start..row_end
// and of the `batch` vectors, writes only their outputs, keeps the AAPCS64
// callee-saved registers and returns (crate::a64's docs); validation
// checks its results against the arm.
unsafe impl Twin for Q4KMatvecSdot {
    fn name(&self) -> &'static str {
        "q4_k.matvec.twin.sdot"
    }

    fn isa(&self) -> Isa {
        Isa::Aarch64
    }

    fn requires(&self) -> &'static [Feature] {
        FEATURES
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        crate::a64::emit(&Q4K, self.name(), FAMILY, offer)
    }

    /// Rows outermost, then the batch's vectors, then every super-block of
    /// the row.
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        crate::twin::nest(offer, Format::Q4_K)
    }
}

// Vector registers: the nibble mask, accumulators, then scratch.
const MASK: u8 = 0;
const ACC: [u8; 2] = [16, 17];
const MAC: [u8; 2] = [18, 19];
const NIB: [u8; 2] = [1, 2];
const LO: [u8; 2] = [3, 4];
const HI: [u8; 2] = [5, 6];
const XV: [u8; 2] = [7, 20];
const DOT: [u8; 2] = [21, 22];
const SCALE: u8 = 23;
const SC: [u8; 2] = [24, 25];
const MINS: u8 = 26;
const BS: [u8; 2] = [27, 28];
const N: [u8; 2] = [29, 30];
const L: [u8; 2] = [8, 9];
const DD: u8 = 10;
const DM: u8 = 11;
const DX: u8 = 12;

/// The Q4_K body inside the shared frame.
struct Q4K;

impl Body for Q4K {
    fn format(&self) -> Format {
        Format::Q4_K
    }

    fn setup(&self, a: &mut Assembler) -> Result<(), EncodeError> {
        a.movi(v(MASK).b16(), 0x0f)
    }

    fn clear(&self, a: &mut Assembler) -> Result<(), EncodeError> {
        for reg in ACC.into_iter().chain(MAC) {
            a.movi(v(reg).d2(), 0)?;
        }
        Ok(())
    }

    fn block(&self, a: &mut Assembler) -> Result<(), EncodeError> {
        scales_and_mins(a)?;
        // N = m · (bs[2l] + bs[2l+1]).
        // (At 260 bytes, past what an unaligned `ldur` reaches.)
        let at = GP_SCRATCH[0];
        a.add(at, PX, 4 + QK_K as i64)?;
        a.ldp(q(BS[0]), q(BS[1]), mem(at))?;
        a.addp(v(BS[0]).h8(), v(BS[0]).h8(), v(BS[1]).h8())?;
        a.smull(v(N[0]).s4(), v(BS[0]).h4(), v(MINS).h4())?;
        a.smull2(v(N[1]).s4(), v(BS[0]).h8(), v(MINS).h8())?;
        // Integer lanes L.
        for reg in L {
            a.movi(v(reg).d2(), 0)?;
        }
        for pair in 0..4i64 {
            for k in 0..2 {
                a.ldr(q(NIB[k]), mem(PW).off(16 + 32 * pair + 16 * k as i64))?;
                a.and(v(LO[k]).b16(), v(NIB[k]).b16(), v(MASK).b16())?;
                a.ushr(v(HI[k]).b16(), v(NIB[k]).b16(), 4)?;
            }
            for (sub, quants) in [(2 * pair, LO), (2 * pair + 1, HI)] {
                for k in 0..2 {
                    a.ldr(q(XV[k]), mem(PX).off(4 + 32 * sub + 16 * k as i64))?;
                    a.movi(v(DOT[k]).d2(), 0)?;
                    a.sdot(v(DOT[k]).s4(), v(quants[k]).b16(), v(XV[k]).b16())?;
                }
                let j = sub as usize;
                a.dup(v(SCALE).s4(), v(SC[j / 4]).s((j % 4) as u8))?;
                for k in 0..2 {
                    a.mla(v(L[k]).s4(), v(DOT[k]).s4(), v(SCALE).s4())?;
                }
            }
        }
        // dd = f32(d) · dx, dm = f32(dmin) · dx.
        a.ldr(h(DD), mem(PW).off(0))?;
        a.ldr(h(DM), mem(PW).off(2))?;
        a.ldr(s(DX), mem(PX).off(0))?;
        for reg in [DD, DM] {
            a.fcvt(s(reg), h(reg))?;
            a.fmul(s(reg), s(reg), s(DX))?;
        }
        for k in 0..2 {
            for (ints, scale, into) in [(L[k], DD, ACC[k]), (N[k], DM, MAC[k])] {
                a.scvtf(v(ints).s4(), v(ints).s4())?;
                a.fmul(v(ints).s4(), v(ints).s4(), v(scale).s(0))?;
                a.fadd(v(into).s4(), v(into).s4(), v(ints).s4())?;
            }
        }
        Ok(())
    }

    /// `t = acc − mac`, then the eight-lane fold.
    fn fold(&self, a: &mut Assembler) -> Result<(), EncodeError> {
        for k in 0..2 {
            a.fsub(v(ACC[k]).s4(), v(ACC[k]).s4(), v(MAC[k]).s4())?;
        }
        fold8(a, ACC[0], ACC[1])
    }
}

/// `orr d, n, m, lsl #shift` (the shifted-register form).
fn orr_lsl(
    a: &mut Assembler,
    d: weft_a64::Gpr,
    n: weft_a64::Gpr,
    m: weft_a64::Gpr,
    shift: u8,
) -> Result<(), EncodeError> {
    a.emit(Inst::with_mnemonic(
        "orr",
        [d.into(), n.into(), m.into(), lsl(shift)],
    )?)
}

/// The eight scales as `.4s` in [`SC`], the eight minimums as `.8h` in
/// [`MINS`] (`scale_min_k4`'s unpacking, a word at a time).
fn scales_and_mins(a: &mut Assembler) -> Result<(), EncodeError> {
    let [g0, g1, g2, g3, g4, ..] = GP_SCRATCH.map(|r| r.num());
    let (a0, a1, a2, t, hi) = (w(g0), w(g1), w(g2), w(g3), w(g4));
    a.ldr(a0, mem(PW).off(4))?;
    a.ldr(a1, mem(PW).off(8))?;
    a.ldr(a2, mem(PW).off(12))?;
    // Scales 4–7: (a2 & 0x0f0f0f0f) | ((a0 >> 6) & 0x03030303) << 4.
    a.lsr(t, a0, 6)?;
    a.and(t, t, 0x0303_0303i64)?;
    a.and(hi, a2, 0x0f0f_0f0fi64)?;
    orr_lsl(a, hi, hi, t, 4)?;
    a.and(a0, a0, 0x3f3f_3f3fi64)?;
    orr_lsl(a, x(g0), x(g0), x(g4), 32)?;
    // Minimums 4–7: ((a2 >> 4) & 0x0f0f0f0f) | ((a1 >> 6) & 0x03030303) << 4.
    a.lsr(t, a1, 6)?;
    a.and(t, t, 0x0303_0303i64)?;
    a.lsr(hi, a2, 4)?;
    a.and(hi, hi, 0x0f0f_0f0fi64)?;
    orr_lsl(a, hi, hi, t, 4)?;
    a.and(a1, a1, 0x3f3f_3f3fi64)?;
    orr_lsl(a, x(g1), x(g1), x(g4), 32)?;
    // Into vectors, widened.
    a.fmov(weft_a64::d(SC[0]), x(g0))?;
    a.ushll(v(SC[0]).h8(), v(SC[0]).b8(), 0)?;
    a.ushll2(v(SC[1]).s4(), v(SC[0]).h8(), 0)?;
    a.ushll(v(SC[0]).s4(), v(SC[0]).h4(), 0)?;
    a.fmov(weft_a64::d(MINS), x(g1))?;
    a.ushll(v(MINS).h8(), v(MINS).b8(), 0)
}
