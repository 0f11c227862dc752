//! For tests and tools outside the planner: judge a twin the way the
//! planner does — gate it on the host, emit its body once, and hand those
//! bytes to the judge — without a catalogue or a plan.
//!
//! The planner never uses this (it gates, emits and caches bodies itself);
//! it exists so the families' own tests exercise the same order.

use crate::{validate, Outcome, Validation};
use weft_kernel::{
    require_features, Checked, Host, Judged, NativeCode, Offer, Refusal, Twin, TwinCheck,
};

/// `twin` gated on `host` (ISA, features) and emitted for `offer`, or the
/// refusal that stops it first.
pub fn emit_for_host(twin: &dyn Twin, offer: &Offer, host: &Host) -> Result<NativeCode, Refusal> {
    if twin.isa() != host.isa {
        return Err(Refusal::WrongIsa {
            wanted: twin.isa(),
            host: host.isa,
        });
    }
    require_features(host, twin.requires())?;
    twin.emit(offer)
}

/// Validate `twin`'s emitted body against `arm_code` with `v`.
pub fn judge_twin<V: Validation>(
    twin: &dyn Twin,
    arm_code: &NativeCode,
    offer: &Offer,
    host: &Host,
    v: &V,
    seed: u64,
) -> Outcome {
    match emit_for_host(twin, offer, host) {
        Ok(code) => {
            let (arm, twin) = judged(arm_code, twin, &code);
            validate(arm, twin, offer, host, v, seed)
        }
        Err(r) => Outcome::Refused(r),
    }
}

/// Check `twin`'s emitted body against `arm_code` through a family's
/// [`TwinCheck`].
pub fn judge_with(
    check: &dyn TwinCheck,
    twin: &dyn Twin,
    arm_code: &NativeCode,
    offer: &Offer,
    host: &Host,
    seed: u64,
) -> Result<Checked, Refusal> {
    let code = emit_for_host(twin, offer, host)?;
    let (arm, twin) = judged(arm_code, twin, &code);
    check.check(arm, twin, offer, host, seed)
}

/// The two bodies put before a judge: the arm's and `twin`'s `code`.
fn judged<'a>(
    arm_code: &'a NativeCode,
    twin: &dyn Twin,
    code: &'a NativeCode,
) -> (Judged<'a>, Judged<'a>) {
    (
        Judged {
            name: "arm",
            code: arm_code,
        },
        Judged {
            name: twin.name(),
            code,
        },
    )
}
