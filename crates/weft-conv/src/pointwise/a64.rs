//! The arm64 (NEON) twin of the epilogue arm, over the arm's offer.
//!
//! Stage 0 copies each pixel's biases four at a time, then one at a time;
//! stage 1 applies the conv NEON twins' epilogue (ReLU as `fcmgt` + `bic`,
//! the clamp as `fcmgt` + `bit`: a NaN or −0 passes unchanged) four lanes
//! at a time, then to one float in lane 0, and ends with the SiLU pass
//! ([`crate::silu`]).

use std::sync::Arc;

use weft_a64::{mem, q, s, x, Assembler, Cond, EncodeError, Gpr};
use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};

use super::{Stage, EPILOGUE};
use crate::offsets;
use crate::twin_a64::{epilogue, field, ARGS};

/// The NEON twin of the epilogue arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EpilogueA64;

/// The arm64 twins: NEON.
pub fn twins() -> Vec<Arc<dyn Twin>> {
    vec![Arc::new(EpilogueA64)]
}

const NEON: &[Feature] = &[Feature::Neon];

// x1–x8 are ours; the epilogue uses x14 (T1) and v4–v6, the SiLU pass
// x9–x12, v0–v6 and v16–v28.
const SRC: Gpr = x(1);
const AT: Gpr = x(2);
const END: Gpr = x(3);
const N: Gpr = x(4);
const ROW: Gpr = x(5);
const WHOLE: Gpr = x(6);
const TAIL: Gpr = x(7);
const DST: Gpr = x(8);

/// AT = the call's first element of y, END = one past its last, ROW =
/// the bytes of one output row.
fn span(a: &mut Assembler) -> Result<(), EncodeError> {
    field(a, ROW, offsets::OUT_W)?;
    field(a, N, offsets::COUT)?;
    a.mul(ROW, ROW, N)?;
    a.lsl(ROW, ROW, 2)?;
    field(a, DST, offsets::Y)?;
    field(a, AT, offsets::ROW_START)?;
    a.mul(AT, AT, ROW)?;
    a.add(AT, AT, DST)?;
    field(a, END, offsets::ROW_END)?;
    a.mul(END, END, ROW)?;
    a.add(END, END, DST)
}

fn bias(a: &mut Assembler) -> Result<(), EncodeError> {
    span(a)?;
    field(a, WHOLE, offsets::COUT)?;
    a.and(TAIL, WHOLE, 3)?;
    a.lsr(WHOLE, WHOLE, 2)?;
    let (pix, vecs, tail, next, done) = (
        a.new_label(),
        a.new_label(),
        a.new_label(),
        a.new_label(),
        a.new_label(),
    );
    a.bind(pix)?;
    a.cmp(AT, END)?;
    a.b_cond(Cond::Hs, done)?;
    field(a, SRC, offsets::FILT)?;
    a.mov(DST, AT)?;
    a.mov(N, WHOLE)?;
    a.bind(vecs)?;
    a.cbz(N, tail)?;
    a.ldr(q(0), mem(SRC).post(16))?;
    a.str(q(0), mem(DST).post(16))?;
    a.sub(N, N, 1)?;
    a.b(vecs)?;
    a.bind(tail)?;
    a.mov(N, TAIL)?;
    let one = a.new_label();
    a.bind(one)?;
    a.cbz(N, next)?;
    a.ldr(s(0), mem(SRC).post(4))?;
    a.str(s(0), mem(DST).post(4))?;
    a.sub(N, N, 1)?;
    a.b(one)?;
    a.bind(next)?;
    // DST is one pixel past AT now.
    a.mov(AT, DST)?;
    a.b(pix)?;
    a.bind(done)
}

fn act(a: &mut Assembler) -> Result<(), EncodeError> {
    let (skip, head, tail) = (a.new_label(), a.new_label(), a.new_label());
    // ReLU and ReLU6 (act 1, 2); SiLU is the pass after.
    field(a, N, offsets::ACT)?;
    a.sub(N, N, 1)?;
    a.cmp(N, 2)?;
    a.b_cond(Cond::Hs, skip)?;
    span(a)?;
    a.sub(N, END, AT)?;
    a.lsr(N, N, 2)?;
    a.bind(head)?;
    a.cmp(N, 4)?;
    a.b_cond(Cond::Lo, tail)?;
    a.ldr(q(0), mem(AT))?;
    epilogue(a, &[0])?;
    a.str(q(0), mem(AT).post(16))?;
    a.sub(N, N, 4)?;
    a.b(head)?;
    // One float a step, in lane 0 (`ldr s0` zeroes the others).
    a.bind(tail)?;
    a.cbz(N, skip)?;
    a.ldr(s(0), mem(AT))?;
    epilogue(a, &[0])?;
    a.str(s(0), mem(AT).post(4))?;
    a.sub(N, N, 1)?;
    a.b(tail)?;
    a.bind(skip)
}

fn emit(stage: Stage) -> Result<Vec<u32>, EncodeError> {
    let mut a = Assembler::new();
    match stage {
        Stage::Bias => bias(&mut a)?,
        Stage::Act => act(&mut a)?,
    }
    crate::silu::a64_pass(&mut a, ARGS)?;
    a.ret()?;
    a.finish()
}

// SAFETY: stage 0 reads the packed bias's `cout` floats and writes y only
// in the call's rows; stage 1 reads and writes only the call's elements
// of y; no callee-saved register is touched (v0–v6, v16–v28, x1–x14);
// the body returns. Validation checks it against the arm.
unsafe impl Twin for EpilogueA64 {
    fn name(&self) -> &'static str {
        "conv.epilogue.twin.neon"
    }

    fn isa(&self) -> Isa {
        Isa::Aarch64
    }

    fn requires(&self) -> &'static [Feature] {
        NEON
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        crate::check_offer(self.name(), offer, EPILOGUE, None)?;
        let stage = Stage::of(&offer.contract.geometry)?;
        crate::twin_a64::native(self.name(), emit(stage))
    }

    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        super::nest_of(offer, (4, false, false))
    }
}
