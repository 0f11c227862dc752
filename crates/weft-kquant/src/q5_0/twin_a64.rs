//! The arm64 twin of `q5_0.matvec` (NEON + FEAT_DotProd): the arm's
//! offer, the body emitted with weft-a64 inside the frame every K-quant
//! arm64 twin shares.
//!
//! Per block of one row:
//!
//! - **Quants**: the 16 nibble bytes split into elements 0–15 (`and
//!   0x0f`) and 16–31 (`ushr #4`). The fifth bits: `tbl` spreads byte `i`
//!   of `qh` over the eight lanes of the elements it covers, `cmtst`
//!   against `1, 2, 4, …, 128` makes each lane all ones where its bit is
//!   set, and `bic` of sixteen by that mask is the 16 to take away where
//!   it is not: `q = nibble − (bit ? 0 : 16)`, in `-16..=15`.
//! - **Integer lanes**: `sdot` of each sixteen quants with their sixteen
//!   activation quants into a zeroed `.4s`: dword `l` is the contract's
//!   `I[l]` (elements `4l..4l+4`) — the low half lanes 0–3, the high half
//!   lanes 4–7. Exact.
//! - **Float lanes**: `fcvt` widens `dw` and `dx` exactly, one scalar
//!   `fmul` makes `s`; `scvtf`, `fmul` by `s`, `fadd` into the lanes —
//!   never `fmla`. After the last block, the contract's fold.
//!
//! Rows outermost, vectors next, blocks innermost (the frame's order, so
//! each row is one linear stream). No load assumes alignment.

use weft_a64::{h, mem, q, s, v, Assembler, EncodeError, Op};
use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};
use weft_quant::Format;

use super::FAMILY;
use crate::a64::{fold8, set_u64x2, splat_u64, Body, PW, PX};

/// The arm64 twin of the `q5_0.matvec` arm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Q5_0MatvecSdot;

/// Every arm64 twin this module offers.
pub const TWINS: [Q5_0MatvecSdot; 1] = [Q5_0MatvecSdot];

/// `sdot` (FEAT_DotProd) on Advanced SIMD.
const FEATURES: &[Feature] = &[Feature::Neon, Feature::Dotprod];

// SAFETY: the body reads only the blocks of rows row_start..row_end and of
// the `batch` vectors, writes only their outputs, keeps the AAPCS64
// callee-saved registers and returns (crate::a64's docs); validation
// checks its results against the arm.
unsafe impl Twin for Q5_0MatvecSdot {
    fn name(&self) -> &'static str {
        "q5_0.matvec.twin.sdot"
    }

    fn isa(&self) -> Isa {
        Isa::Aarch64
    }

    fn requires(&self) -> &'static [Feature] {
        FEATURES
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        crate::a64::emit(&Q5_0, self.name(), FAMILY, offer)
    }

    /// Rows outermost, then the batch's vectors, then every block of the
    /// row.
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        crate::twin::nest(offer, Format::Q5_0)
    }
}

// Vector registers: constants, accumulators, then scratch.
const MASK: u8 = 0;
const SIXTEEN: u8 = 1;
const BITS: u8 = 2;
const SPREAD_LO: u8 = 3;
const SPREAD_HI: u8 = 4;
const ACC: [u8; 2] = [16, 17];
const NIB: u8 = 5;
const QH: u8 = 6;
const QV: [u8; 2] = [7, 20];
const FIFTH: [u8; 2] = [21, 22];
const XV: [u8; 2] = [23, 24];
const DOT: [u8; 2] = [25, 26];
const DW: u8 = 27;
const DX: u8 = 28;

/// The Q5_0 body inside the shared frame.
struct Q5_0;

impl Body for Q5_0 {
    fn format(&self) -> Format {
        Format::Q5_0
    }

    fn setup(&self, a: &mut Assembler) -> Result<(), EncodeError> {
        a.movi(v(MASK).b16(), 0x0f)?;
        a.movi(v(SIXTEEN).b16(), 0x10)?;
        splat_u64(a, BITS, 0x8040_2010_0804_0201)?;
        // `tbl` indices: qh bytes 0, 1 over elements 0–15; 2, 3 over 16–31.
        set_u64x2(a, SPREAD_LO, 0, 0x0101_0101_0101_0101)?;
        set_u64x2(a, SPREAD_HI, 0x0202_0202_0202_0202, 0x0303_0303_0303_0303)
    }

    fn clear(&self, a: &mut Assembler) -> Result<(), EncodeError> {
        for reg in ACC {
            a.movi(v(reg).d2(), 0)?;
        }
        Ok(())
    }

    fn block(&self, a: &mut Assembler) -> Result<(), EncodeError> {
        a.ldr(q(NIB), mem(PW).off(6))?;
        a.ldr(s(QH), mem(PW).off(2))?;
        a.ldr(q(XV[0]), mem(PX).off(2))?;
        a.ldr(q(XV[1]), mem(PX).off(18))?;
        a.and(v(QV[0]).b16(), v(NIB).b16(), v(MASK).b16())?;
        a.ushr(v(QV[1]).b16(), v(NIB).b16(), 4)?;
        for (fifth, spread) in FIFTH.into_iter().zip([SPREAD_LO, SPREAD_HI]) {
            a.tbl(
                v(fifth).b16(),
                v(QH).list(1, weft_a64::Arr::B16),
                v(spread).b16(),
            )?;
            a.op(Op::CMTST_V, (v(fifth).b16(), v(fifth).b16(), v(BITS).b16()))?;
            a.bic(v(fifth).b16(), v(SIXTEEN).b16(), v(fifth).b16())?;
        }
        for k in 0..2 {
            a.sub(v(QV[k]).b16(), v(QV[k]).b16(), v(FIFTH[k]).b16())?;
            a.movi(v(DOT[k]).d2(), 0)?;
            a.sdot(v(DOT[k]).s4(), v(QV[k]).b16(), v(XV[k]).b16())?;
        }
        // s = f32(dw) · f32(dx).
        a.ldr(h(DW), mem(PW).off(0))?;
        a.ldr(h(DX), mem(PX).off(0))?;
        a.fcvt(s(DW), h(DW))?;
        a.fcvt(s(DX), h(DX))?;
        a.fmul(s(DW), s(DW), s(DX))?;
        for k in 0..2 {
            a.scvtf(v(DOT[k]).s4(), v(DOT[k]).s4())?;
            a.fmul(v(DOT[k]).s4(), v(DOT[k]).s4(), v(DW).s(0))?;
            a.fadd(v(ACC[k]).s4(), v(ACC[k]).s4(), v(DOT[k]).s4())?;
        }
        Ok(())
    }

    fn fold(&self, a: &mut Assembler) -> Result<(), EncodeError> {
        fold8(a, ACC[0], ACC[1])
    }
}
