//! The epilogue family's CLIF, compiled by Cranelift for either ISA: the
//! body its twins are judged against.
//!
//! ```text
//! stage 0 (bias):  for p in the call's pixels:
//!                    for c in 0..cout step 4 (whole f32x4): y[p, c..c+4] = bias[c..c+4]
//!                    for c in ..cout:                       y[p, c] = bias[c]
//! stage 1 (act):   when act is ReLU or ReLU6, over the call's elements:
//!                    f32x4 steps, then one at a time: y = epilogue(y)
//!                  then the SiLU pass (act 3), as every conv body ends
//! ```

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Function, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;
use weft_kernel::{Family, Host, Isa, LoopTrip, NativeCode, Offer, Refusal, Site};
use weft_managed::arm_build::build_native;
use weft_managed::Target;

use super::{offer, Stage, EPILOGUE};
use crate::arm::{build_with, epilogue, flags, looped, BiasLines, Env};

/// The epilogue family's arm.
#[derive(Clone, Copy, Debug)]
pub struct EpilogueArm;

/// The call's part of y: its first element's address and one past its
/// last (`rows · out_w · cout` elements from `row_start`'s first).
fn span(b: &mut FunctionBuilder<'_>, e: &Env) -> (Value, Value) {
    let row_bytes = b.ins().imul(e.out_w, e.pix_out);
    let first = b.ins().imul(e.row_start, row_bytes);
    let start = b.ins().iadd(e.y, first);
    let last = b.ins().imul(e.row_end, row_bytes);
    let end = b.ins().iadd(e.y, last);
    (start, end)
}

fn build_bias(b: &mut FunctionBuilder<'_>, e: &Env) {
    let f = flags();
    let (start, end) = span(b, e);
    let whole = b.ins().band_imm_s(e.pix_out, -16);
    let p = b.declare_var(types::I64);
    let c = b.declare_var(types::I64);
    let zero = b.ins().iconst(types::I64, 0);
    looped(
        b,
        p,
        start,
        |b, at| b.ins().icmp(IntCC::UnsignedLessThan, at, end),
        0,
        |b| {
            looped(
                b,
                c,
                zero,
                |b, at| b.ins().icmp(IntCC::UnsignedLessThan, at, whole),
                16,
                |b| {
                    let (pv, cv) = (b.use_var(p), b.use_var(c));
                    let from = b.ins().iadd(e.filt, cv);
                    let to = b.ins().iadd(pv, cv);
                    let v = b.ins().load(types::F32X4, f, from, 0);
                    b.ins().store(f, v, to, 0);
                },
            );
            let cv = b.use_var(c);
            looped(
                b,
                c,
                cv,
                |b, at| b.ins().icmp(IntCC::UnsignedLessThan, at, e.pix_out),
                4,
                |b| {
                    let (pv, cv) = (b.use_var(p), b.use_var(c));
                    let from = b.ins().iadd(e.filt, cv);
                    let to = b.ins().iadd(pv, cv);
                    let v = b.ins().load(types::F32, f, from, 0);
                    b.ins().store(f, v, to, 0);
                },
            );
            // The pixel loop's step is one pixel's bytes.
            let pv = b.use_var(p);
            let next = b.ins().iadd(pv, e.pix_out);
            b.def_var(p, next);
        },
    );
}

fn build_act(b: &mut FunctionBuilder<'_>, e: &Env) {
    let f = flags();
    let run = b.create_block();
    let done = b.create_block();
    // ReLU and ReLU6 (act 1, 2) here; SiLU is the pass `build_with` ends with.
    let a1 = b.ins().iadd_imm_s(e.act, -1);
    let clamps = b.ins().icmp_imm_u(IntCC::UnsignedLessThan, a1, 2);
    b.ins().brif(clamps, run, &[], done, &[]);
    b.switch_to_block(run);
    let (start, end) = span(b, e);
    let n = b.ins().isub(end, start);
    let whole = b.ins().band_imm_s(n, -16);
    let vend = b.ins().iadd(start, whole);
    let p = b.declare_var(types::I64);
    let val = b.declare_var(types::F32X4);
    let one = b.declare_var(types::F32);
    looped(
        b,
        p,
        start,
        |b, at| b.ins().icmp(IntCC::UnsignedLessThan, at, vend),
        16,
        |b| {
            let at = b.use_var(p);
            let v = b.ins().load(types::F32X4, f, at, 0);
            b.def_var(val, v);
            epilogue(b, e, &[val], true);
            let (at, v) = (b.use_var(p), b.use_var(val));
            b.ins().store(f, v, at, 0);
        },
    );
    let pv = b.use_var(p);
    looped(
        b,
        p,
        pv,
        |b, at| b.ins().icmp(IntCC::UnsignedLessThan, at, end),
        4,
        |b| {
            let at = b.use_var(p);
            let v = b.ins().load(types::F32, f, at, 0);
            b.def_var(one, v);
            epilogue(b, e, &[one], false);
            let (at, v) = (b.use_var(p), b.use_var(one));
            b.ins().store(f, v, at, 0);
        },
    );
    b.ins().jump(done, &[]);
    b.switch_to_block(done);
}

/// Build the arm's CLIF of `stage` for `target`.
pub fn build_function(target: &Target, stage: Stage) -> Function {
    match stage {
        Stage::Bias => build_with(
            target,
            "conv_epilogue_bias",
            BiasLines::CoutLanes,
            build_bias,
        ),
        Stage::Act => build_with(target, "conv_epilogue_act", BiasLines::CoutLanes, build_act),
    }
}

// SAFETY: stage 0 reads the packed bias's `cout` floats and writes y's
// rows `row_start..row_end`; stage 1 reads and writes only those rows; x
// is never read; the body returns. Validation checks it against the
// definition (module docs).
unsafe impl weft_kernel::Arm for EpilogueArm {
    fn name(&self) -> &'static str {
        "conv.epilogue.arm"
    }

    fn family(&self) -> Family {
        Family(EPILOGUE)
    }

    fn offer(&self, site: &Site, _host: &Host) -> Result<Offer, Refusal> {
        offer(site)
    }

    fn build(&self, offer: &Offer, isa: Isa) -> Result<NativeCode, Refusal> {
        if offer.contract.family != EPILOGUE {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!("offer is for {}", offer.contract.family),
            });
        }
        let stage = Stage::of(&offer.contract.geometry)?;
        build_native(isa, |t| t.compile(build_function(t, stage)))
    }

    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        super::nest_of(offer, (4, false, false))
    }
}
