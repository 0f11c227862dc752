//! The arm64 NEON twin of `q8_0.quantize`, emitted with weft-a64.
//!
//! Per block (one loop over flat blocks `block_start..block_end`):
//!
//! - **amax**: two `ld1` of four `.4s`, `fabs`, a `fmax` tree and `fmaxv`.
//!   NEON's `fmax` propagates NaN, so a NaN anywhere makes the result NaN
//!   (`fcmp` unordered, `b.vs`), and such a block takes an out-of-line
//!   path: the contract's fold, 32 scalar steps `fcmp amax, a; fcsel amax,
//!   amax, a, gt` (`gt` is false when unordered: C's `MAX`). Without NaN
//!   the maximum is order-free.
//! - **scale**: `fdiv` by 127; `id = 1/d`, replaced by 0 when `d == 0`
//!   (`fcsel …, ne`: `ne` holds for unordered too); the binary16 scale is
//!   `fcvtn .4h` (round to nearest even under the default FPCR, NaN
//!   quieted with its top payload bits), stored with `str h`.
//! - **quants**: `fmul` by `id`, `fmin`/`fmax` with ±127 (NaN stays NaN),
//!   `fcvtas` (round to nearest, ties away from zero, NaN → 0: exactly
//!   `roundf` and the contract's NaN rule), then `xtn` twice down to bytes.
//!
//! AAPCS64 leaf: only x0–x9 and v0–v7, v16–v31 are written (v8–v15 are
//! callee-saved and untouched). Loads and stores have no alignment
//! requirement; only the blocks in range are read and written.

use weft_a64::{h, mem, s, v, w, x, Arr, Assembler, Cond, EncodeError, Op, WZR};
use weft_kernel::{Feature, Isa, LoopAnnotation, NativeCode, Offer, Refusal, Twin};

use super::super::{BLOCK_BYTES, BLOCK_LEN};
use super::{dims, offsets, ARGS_NAME, FAMILY};

/// The NEON twin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct QuantizeNeon;

const NEON: &[Feature] = &[Feature::Neon];

// General registers.
const ARGS: u8 = 0;
const PX: u8 = 1;
const PO: u8 = 2;
const COUNT: u8 = 3;
const START: u8 = 4;
const END: u8 = 5;
const T0: u8 = 6;
const T1: u8 = 9;

// Vector registers (v8–v15 are never touched).
const C127: u8 = 28;
const CM127: u8 = 29;
const ONE: u8 = 30;
const ZERO: u8 = 31;

/// The body and the word offsets of its loop head and back edge.
fn body() -> Result<(Vec<u32>, usize, usize), EncodeError> {
    let mut a = Assembler::new();
    let (top, merge, slow, done) = (a.new_label(), a.new_label(), a.new_label(), a.new_label());
    a.ldr(x(PX), mem(x(ARGS)).off(i64::from(offsets::X)))?;
    a.ldr(x(PO), mem(x(ARGS)).off(i64::from(offsets::OUT)))?;
    a.ldr(x(START), mem(x(ARGS)).off(i64::from(offsets::BLOCK_START)))?;
    a.ldr(x(END), mem(x(ARGS)).off(i64::from(offsets::BLOCK_END)))?;
    a.cmp(x(END), x(START))?;
    a.b_cond(Cond::Ls, done)?;
    a.sub(x(COUNT), x(END), x(START))?;
    // px = x + 128·start, po = out + 34·start.
    a.lsl(x(T0), x(START), 7)?;
    a.add(x(PX), x(PX), x(T0))?;
    a.mov(x(T0), BLOCK_BYTES as i64)?;
    a.madd(x(PO), x(START), x(T0), x(PO))?;
    a.mov(w(T1), 127f32.to_bits() as i64)?;
    a.dup(v(C127).s4(), w(T1))?;
    a.mov(w(T1), (-127f32).to_bits() as i64)?;
    a.dup(v(CM127).s4(), w(T1))?;
    a.mov(w(T1), 1f32.to_bits() as i64)?;
    a.fmov(s(ONE), w(T1))?;
    a.fmov(s(ZERO), WZR)?;

    a.bind(top)?;
    let head = a.len();
    a.ld1(v(0).list(4, Arr::S4), mem(x(PX)).post(64))?;
    a.ld1(v(4).list(4, Arr::S4), mem(x(PX)).post(64))?;
    for i in 0..8u8 {
        a.fabs(v(16 + i).s4(), v(i).s4())?;
    }
    for i in [16u8, 18, 20, 22] {
        a.fmax(v(i).s4(), v(i).s4(), v(i + 1).s4())?;
    }
    a.fmax(v(16).s4(), v(16).s4(), v(18).s4())?;
    a.fmax(v(20).s4(), v(20).s4(), v(22).s4())?;
    a.fmax(v(16).s4(), v(16).s4(), v(20).s4())?;
    a.fmaxv(s(16), v(16).s4())?;
    a.op(Op::FCMP_S, (s(16), s(16)))?;
    a.b_cond(Cond::Vs, slow)?;

    // merge: amax in s16.
    a.bind(merge)?;
    a.fdiv(s(17), s(16), s(C127))?;
    a.fcvtn(v(18).h4(), v(17).s4())?;
    a.str(h(18), mem(x(PO)))?;
    a.fdiv(s(19), s(ONE), s(17))?;
    a.op(Op::FCMP_S_Z, (s(17),))?;
    a.op(Op::FCSEL_S, (s(19), s(19), s(ZERO), Cond::Ne))?;
    for i in 0..8u8 {
        let vi = v(i).s4();
        a.fmul(vi, vi, v(19).s(0))?;
        a.fmin(vi, vi, v(C127).s4())?;
        a.fmax(vi, vi, v(CM127).s4())?;
        a.op(Op::FCVTAS_V, (vi, vi))?;
    }
    for k in 0..4u8 {
        a.xtn(v(16 + k).h4(), v(2 * k).s4())?;
        a.xtn2(v(16 + k).h8(), v(2 * k + 1).s4())?;
    }
    for k in 0..2u8 {
        a.xtn(v(20 + k).b8(), v(16 + 2 * k).h8())?;
        a.xtn2(v(20 + k).b16(), v(17 + 2 * k).h8())?;
    }
    a.add(x(T1), x(PO), 2)?;
    a.st1(v(20).list(2, Arr::B16), mem(x(T1)))?;
    a.add(x(PO), x(PO), BLOCK_BYTES as i64)?;
    a.subs(x(COUNT), x(COUNT), 1)?;
    let back = a.len();
    a.b_cond(Cond::Ne, top)?;
    a.bind(done)?;
    a.ret()?;

    // slow: a NaN in the block; C's MAX fold, left to right.
    a.bind(slow)?;
    a.sub(x(T1), x(PX), (BLOCK_LEN * 4) as i64)?;
    a.fmov(s(16), WZR)?;
    for i in 0..BLOCK_LEN as i64 {
        a.ldr(s(17), mem(x(T1)).off(4 * i))?;
        a.fabs(s(17), s(17))?;
        a.op(Op::FCMP_S, (s(16), s(17)))?;
        a.op(Op::FCSEL_S, (s(16), s(16), s(17), Cond::Gt))?;
    }
    a.b(merge)?;
    let words = a.finish()?;
    Ok((words, head, back))
}

impl QuantizeNeon {
    /// The body (independent of the offer's geometry).
    pub fn body(&self) -> Result<NativeCode, Refusal> {
        let (words, head, back) = body().map_err(|e| Refusal::EmitError {
            message: format!("{}: {e}", Twin::name(self)),
        })?;
        Ok(NativeCode {
            isa: Isa::Aarch64,
            bytes: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
            pool: None,
            loops: vec![LoopAnnotation {
                name: "blocks".to_owned(),
                head: 4 * head,
                back_edge: 4 * back,
            }],
        })
    }
}

// SAFETY: the body reads and writes only what the arguments' extents name
// and returns normally (module docs); validation checks its results.
unsafe impl Twin for QuantizeNeon {
    fn name(&self) -> &'static str {
        "q8_0.quantize.twin.neon"
    }

    fn isa(&self) -> Isa {
        Isa::Aarch64
    }

    fn requires(&self) -> &'static [Feature] {
        NEON
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        if offer.contract.family != FAMILY || offer.contract.args != ARGS_NAME {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!(
                    "{} serves {FAMILY} with {ARGS_NAME}, not {} with {}",
                    Twin::name(self),
                    offer.contract.family,
                    offer.contract.args
                ),
            });
        }
        dims(&offer.contract.geometry)?;
        self.body()
    }
}
