//! The family's one [`TwinCheck`] and one [`Workbench`]: `q8_0.matvec`
//! has two contracts (the f32x4 arm's, args
//! [`Q8MatvecArgs`](super::Q8MatvecArgs), and the rows2 arm's, args
//! [`Q8Rows2Args`](super::rows2::Q8Rows2Args), whose weights are packed),
//! and a [`FamilyEntry`](weft_kernel::FamilyEntry) holds one of each, so
//! these dispatch on the offer's `contract.args` to the validation and the
//! bench of that contract. An args name they do not know is `bad-operand`.

use weft_kernel::{Bench, Checked, Host, Judged, Offer, Refusal, TwinCheck, Workbench};
use weft_validate::Checker;

use super::rows2::validation::{Rows2Bench, Rows2Validation};
use super::validation::{Q8Bench, Q8Validation};

fn unknown_args(offer: &Offer) -> Refusal {
    Refusal::BadOperand {
        operand: "args".to_owned(),
        reason: format!(
            "no {} contract takes `{}`",
            super::FAMILY,
            offer.contract.args
        ),
    }
}

/// Validation of every `q8_0.matvec` twin, by the contract of its offer.
#[derive(Clone, Copy, Debug, Default)]
pub struct Q8Check;

impl TwinCheck for Q8Check {
    fn check(
        &self,
        arm: Judged<'_>,
        twin: Judged<'_>,
        offer: &Offer,
        host: &Host,
        seed: u64,
    ) -> Result<Checked, Refusal> {
        match offer.contract.args.as_str() {
            super::ARGS_NAME => Checker(Q8Validation).check(arm, twin, offer, host, seed),
            super::rows2::ARGS_NAME => Checker(Rows2Validation).check(arm, twin, offer, host, seed),
            _ => Err(unknown_args(offer)),
        }
    }

    fn cases_id(&self, offer: &Offer, seed: u64) -> String {
        match offer.contract.args.as_str() {
            super::ARGS_NAME => Checker(Q8Validation).cases_id(offer, seed),
            super::rows2::ARGS_NAME => Checker(Rows2Validation).cases_id(offer, seed),
            other => format!("no {} contract takes `{other}`", super::FAMILY),
        }
    }
}

/// Inputs for a micro-race of any `q8_0.matvec` body, by the contract of
/// its offer (a rows2 offer races on its own packed weights).
#[derive(Clone, Copy, Debug, Default)]
pub struct Q8Workbench;

impl Workbench for Q8Workbench {
    fn prepare(&self, offer: &Offer, seed: u64) -> Result<Box<dyn Bench>, Refusal> {
        match offer.contract.args.as_str() {
            super::ARGS_NAME => Q8Bench.prepare(offer, seed),
            super::rows2::ARGS_NAME => Rows2Bench.prepare(offer, seed),
            _ => Err(unknown_args(offer)),
        }
    }
}
