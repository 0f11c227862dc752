//! The family's one [`TwinCheck`]: `q8_0.matvec` has two contracts (the
//! f32x4 arm's, args [`Q8MatvecArgs`](super::Q8MatvecArgs), and the rows2
//! arm's, args [`Q8Rows2Args`](super::rows2::Q8Rows2Args)), and a
//! [`FamilyEntry`](weft_kernel::FamilyEntry) holds one check, so this one
//! dispatches on the offer's `contract.args` to the validation of that
//! contract. An args name it does not know is `bad-operand`.

use weft_kernel::{Checked, Host, NativeCode, Offer, Refusal, Twin, TwinCheck};
use weft_validate::Checker;

use super::rows2::validation::Rows2Validation;
use super::validation::Q8Validation;

/// Validation of every `q8_0.matvec` twin, by the contract of its offer.
#[derive(Clone, Copy, Debug, Default)]
pub struct Q8Check;

impl TwinCheck for Q8Check {
    fn check(
        &self,
        twin: &dyn Twin,
        arm_code: &NativeCode,
        offer: &Offer,
        host: &Host,
        seed: u64,
    ) -> Result<Checked, Refusal> {
        match offer.contract.args.as_str() {
            super::ARGS_NAME => Checker(Q8Validation).check(twin, arm_code, offer, host, seed),
            super::rows2::ARGS_NAME => {
                Checker(Rows2Validation).check(twin, arm_code, offer, host, seed)
            }
            other => Err(Refusal::BadOperand {
                operand: "args".to_owned(),
                reason: format!("no {} validation takes `{other}`", super::FAMILY),
            }),
        }
    }
}
