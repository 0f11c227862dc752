//! A twin's body versus its arm's, bit for bit, on inputs built to find
//! differences.
//!
//! One job: place two bodies the planner produced, run both on every case a
//! family's [`Validation`] builds, and compare the outputs bit for bit
//! (NaNs by class where the contract's [`NanRule`] says so). [`validate`]
//! never emits, gates on CPU features or applies a mode: the planner does
//! that, once, and hands over the very bytes it hashes, prices, caches and
//! places. The answer is an [`Outcome`]: accepted with a [`Verdict`], or
//! refused with a named [`Refusal`] (`mismatch` with the first differing
//! index, its input and both bit patterns; `in-place-mismatch` when an arm
//! or twin called in place gives other bits than with separate buffers;
//! `wrong-isa` for a body of another ISA; `probe-failed`/`place-failed`).
//!
//! Invariants:
//!
//! - **Judged bytes are given bytes.** Nothing here builds code; what is
//!   run is exactly the [`Judged`] bodies passed in.
//! - **Nothing panics on bad input.** Empty bodies and foreign ISAs are
//!   refused by name before any code runs.
//! - **The arm is the truth.** Outputs are compared element by element in
//!   the order the family returns them; the first difference is reported,
//!   with the arm's bits and the twin's bits, never a tolerance.
//! - **Deterministic, and named.** Cases come from the family and a seed
//!   (the crate's [`SplitMix64`] generator); the same seed gives the same
//!   cases, so a refusal can be reproduced. [`Validation::generator`] and
//!   [`VALIDATOR_VERSION`] name what judged, and a saved verdict is keyed by
//!   them ([`TwinCheck::cases_id`]).
//! - **Aliasing is declared, never assumed.** Operands run in one buffer
//!   only when the contract's [`weft_kernel::Aliasing`] lets them be equal,
//!   and then always: a kernel is never called in place on a contract that
//!   did not promise it, and never trusted in place without being run so.
//! - **Family-agnostic.** This crate knows no family: a family implements
//!   [`Validation`] (or uses the ready-made [`UnaryF32`] for `f32 -> f32`
//!   elementwise functions) and says which argument struct its kernels take.
//!
//! The one promise `unsafe` rests on is the leaf ABI: a [`Validation`]
//! implementation says which `#[repr(C)]` struct its kernels take, the
//! offer's contract must name that same struct (checked), and Weft's arms and
//! twins for a contract honour the leaf ABI for its struct.

mod inputs;
pub mod testing;
mod unary;

use weft_kernel::{Checked, Host, Judged, Kernel, NanRule, NativeCode, Offer, Refusal, TwinCheck};

/// The version of the validation procedure itself (how cases are run and
/// compared: in place since version 2). Part of every [`TwinCheck::cases_id`],
/// so verdicts given by an older procedure are not trusted by a newer one.
pub const VALIDATOR_VERSION: u32 = 2;

pub use inputs::{
    align_up_elements, f32_neighbours, f32_special_values, f32_step, f32_subnormals, SplitMix64,
    CANARY_F32, GUARD_ELEMENTS,
};
pub use unary::{UnaryCase, UnaryF32, UnaryF32Inputs};

/// The element type of a kernel's outputs, which decides what "a NaN" is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Element {
    /// IEEE binary16, in the low 16 bits.
    F16,
    /// bfloat16, in the low 16 bits.
    Bf16,
    /// IEEE binary32, in the low 32 bits.
    F32,
    /// IEEE binary64.
    F64,
    /// An integer (or any non-float word): always compared by bits.
    Int,
}

impl Element {
    /// Whether `bits` encode a NaN of this element type (never, for [`Element::Int`]).
    pub fn is_nan(self, bits: u64) -> bool {
        match self {
            Element::F16 => bits & 0x7c00 == 0x7c00 && bits & 0x03ff != 0,
            Element::Bf16 => bits & 0x7f80 == 0x7f80 && bits & 0x007f != 0,
            Element::F32 => f32::from_bits(bits as u32).is_nan(),
            Element::F64 => f64::from_bits(bits).is_nan(),
            Element::Int => false,
        }
    }

    /// Whether `arm` and `twin` count as the same output under `rule`.
    pub fn same(self, rule: NanRule, arm: u64, twin: u64) -> bool {
        arm == twin || (rule == NanRule::ByClass && self.is_nan(arm) && self.is_nan(twin))
    }
}

/// What one run of a kernel on one case produced, as raw words.
///
/// A family decides what belongs here (the output elements, and for example
/// guard words around them that must stay untouched) and explains any index
/// through [`Validation::describe_input`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outputs {
    /// The element type of every word.
    pub element: Element,
    /// The words, zero-extended to 64 bits.
    pub bits: Vec<u64>,
}

impl Outputs {
    /// Outputs from `f32` words.
    pub fn from_f32(values: impl IntoIterator<Item = f32>) -> Self {
        Self {
            element: Element::F32,
            bits: values.into_iter().map(|v| u64::from(v.to_bits())).collect(),
        }
    }

    /// The first index at which `twin` differs from `self` (the arm) under
    /// `rule`; a length difference counts as a difference at the shorter
    /// length (the missing side's bits are reported as 0).
    pub fn first_difference(&self, twin: &Outputs, rule: NanRule) -> Option<(usize, u64, u64)> {
        let common = self.bits.len().min(twin.bits.len());
        for i in 0..common {
            let (a, t) = (self.bits[i], twin.bits[i]);
            if !self.element.same(rule, a, t) {
                return Some((i, a, t));
            }
        }
        if self.bits.len() != twin.bits.len() {
            let a = self.bits.get(common).copied().unwrap_or(0);
            let t = twin.bits.get(common).copied().unwrap_or(0);
            return Some((common, a, t));
        }
        None
    }
}

/// How a family validates its twins: which argument struct its kernels
/// take, which cases hunt for differences, how one case runs.
///
/// # Safety
///
/// Implementing this trait promises that [`Validation::Args`] is the
/// `#[repr(C)]` argument struct of contracts whose `args` field equals
/// [`Validation::args_name`], and that [`Validation::run`] only calls a
/// kernel with an `Args` whose pointers are valid for the extents it names
/// (for as long as the call lasts). [`validate`] relies on this, together
/// with the leaf-ABI promise of Weft's arms and twins, to wrap their placed
/// bytes as [`Kernel<Self::Args>`].
pub unsafe trait Validation {
    /// The `#[repr(C)]` argument struct the family's kernels take.
    type Args;
    /// One test case (inputs plus whatever layout it exercises).
    type Case;

    /// The name the offer's [`weft_kernel::Contract::args`] must carry.
    fn args_name(&self) -> &str;

    /// What builds the cases, with a version the family bumps whenever its
    /// cases change and any parameters they depend on ("q8_0.matvec cases
    /// v3", or a rendering of [`UnaryF32Inputs`]). Verdicts are keyed by it.
    fn generator(&self) -> String;

    /// The cases for `offer`, deterministic in `seed`.
    fn cases(&self, offer: &Offer, seed: u64) -> Vec<Self::Case>;

    /// Run `kernel` once on `case` and collect what it produced.
    fn run(&self, kernel: &Kernel<Self::Args>, case: &Self::Case) -> Result<Outputs, Refusal>;

    /// The input behind output word `index` of `case`, rendered for a
    /// [`Refusal::Mismatch`].
    fn describe_input(&self, case: &Self::Case, index: usize) -> String;

    /// The operand pairs, by the names contracts use, that
    /// [`Validation::run_aliased`] can lay in one buffer. None by default.
    fn aliasable(&self) -> &[(&'static str, &'static str)] {
        &[]
    }

    /// Run `kernel` once on `case` with operands `a` and `b` (a pair of
    /// [`Validation::aliasable`]) in the same memory, returning outputs laid
    /// out as [`Validation::run`] lays them, so the two compare word by word.
    /// [`validate`] calls it only for pairs the offer's contract declares
    /// ([`weft_kernel::Aliasing`]); a contract that declares nothing is
    /// never called in place.
    fn run_aliased(
        &self,
        kernel: &Kernel<Self::Args>,
        case: &Self::Case,
        a: &str,
        b: &str,
    ) -> Result<Outputs, Refusal> {
        let _ = (kernel, case);
        Err(Refusal::AliasingUnvalidated {
            a: a.to_owned(),
            b: b.to_owned(),
        })
    }
}

/// What an accepted twin was checked on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The twin's candidate name.
    pub twin: String,
    /// The arm it mirrors.
    pub arm: String,
    /// Cases run: each case once with separate buffers, and once more in
    /// place for every operand pair the contract lets be equal.
    pub cases: usize,
    /// Output words compared, over every case.
    pub words: usize,
    /// The seed the cases were built from.
    pub seed: u64,
}

/// The result of validating one twin: accepted, or refused with a name.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub enum Outcome {
    /// The twin matched its arm on every case.
    Accepted(Verdict),
    /// The twin must not be offered, and why.
    Refused(Refusal),
}

impl Outcome {
    /// Whether the twin was accepted.
    pub fn is_accepted(&self) -> bool {
        matches!(self, Outcome::Accepted(_))
    }

    /// The verdict, if accepted.
    pub fn verdict(&self) -> Option<&Verdict> {
        match self {
            Outcome::Accepted(v) => Some(v),
            Outcome::Refused(_) => None,
        }
    }

    /// The refusal, if refused.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Outcome::Accepted(_) => None,
            Outcome::Refused(r) => Some(r),
        }
    }

    /// The verdict, or the refusal as an error (whatever its kind).
    pub fn into_result(self) -> Result<Verdict, Refusal> {
        match self {
            Outcome::Accepted(v) => Ok(v),
            Outcome::Refused(r) => Err(r),
        }
    }
}

/// Validate `twin`'s bytes against `arm`'s (the body of the arm it mirrors,
/// built for `offer`) on `host`, with the cases `v` builds from `seed`.
///
/// In order: both bodies must be for the host's ISA (`wrong-isa`) and
/// non-empty (`emit-error` for the twin, `compile-error` for the arm); the
/// offer's contract must name `v`'s argument struct (`bad-operand`); every
/// pair of operands the contract lets be equal must be one `v` can run so
/// (`aliasing-unvalidated`); the executable-memory probe must pass
/// (`probe-failed`) and both bodies must place (`place-failed`). Then every
/// case runs on the arm and on the twin, and the first differing word is a
/// `mismatch`. For every operand pair the contract lets be equal
/// ([`weft_kernel::Aliasing`]) each case also runs in place, arm and twin,
/// and must give the arm's separate-buffer bits (`in-place-mismatch`,
/// naming the kernel that broke the promise).
///
/// CPU features are not checked here: the planner offers a twin only on a
/// host with every feature it requires, and a caller outside the planner
/// must do the same before handing over its bytes.
pub fn validate<V: Validation>(
    arm: Judged<'_>,
    twin: Judged<'_>,
    offer: &Offer,
    host: &Host,
    v: &V,
    seed: u64,
) -> Outcome {
    match run_validation(arm, twin, offer, host, v, seed) {
        Ok(verdict) => Outcome::Accepted(verdict),
        Err(refusal) => Outcome::Refused(refusal),
    }
}

fn run_validation<V: Validation>(
    arm: Judged<'_>,
    twin: Judged<'_>,
    offer: &Offer,
    host: &Host,
    v: &V,
    seed: u64,
) -> Result<Verdict, Refusal> {
    for code in [arm.code, twin.code] {
        if code.isa != host.isa {
            return Err(Refusal::WrongIsa {
                wanted: code.isa,
                host: host.isa,
            });
        }
    }
    if arm.code.bytes.is_empty() {
        return Err(Refusal::CompileError {
            message: format!("the body of arm {} is empty", arm.name),
        });
    }
    if twin.code.bytes.is_empty() {
        return Err(Refusal::EmitError {
            message: format!("{} emitted an empty body", twin.name),
        });
    }
    if offer.contract.args != v.args_name() {
        return Err(Refusal::BadOperand {
            operand: "args".to_owned(),
            reason: format!(
                "the contract takes `{}`, the validation runs `{}`",
                offer.contract.args,
                v.args_name()
            ),
        });
    }
    // Every pair the contract lets be equal is run in place; a pair the
    // validation cannot lay in one buffer would be a promise nobody checks.
    let aliased: Vec<(&str, &str)> = offer.contract.aliasing.equal_pairs().collect();
    for &(a, b) in &aliased {
        let runnable = v
            .aliasable()
            .iter()
            .any(|&(x, y)| (x == a && y == b) || (x == b && y == a));
        if !runnable {
            return Err(Refusal::AliasingUnvalidated {
                a: a.to_owned(),
                b: b.to_owned(),
            });
        }
    }
    // Probe first so that a host without executable memory is named as such.
    weft_jitmem::probe().map_err(|e| Refusal::ProbeFailed {
        cause: e.to_string(),
    })?;
    let arm_kernel = place::<V::Args>(arm.code)?;
    let twin_kernel = place::<V::Args>(twin.code)?;

    let cases = v.cases(offer, seed);
    let rule = offer.contract.arithmetic.nan;
    let mut words = 0usize;
    for case in &cases {
        let want = v.run(&arm_kernel, case)?;
        let got = v.run(&twin_kernel, case)?;
        if let Some((index, arm_bits, twin_bits)) = want.first_difference(&got, rule) {
            return Err(Refusal::Mismatch {
                index,
                input: v.describe_input(case, index),
                arm_bits,
                twin_bits,
            });
        }
        words += want.bits.len();
        // In place, arm and twin alike must give the arm's bits with
        // separate buffers: the arm is checked too, because it is the truth
        // every twin is held to.
        for &(a, b) in &aliased {
            for (name, kernel) in [(arm.name, &arm_kernel), (twin.name, &twin_kernel)] {
                let got = v.run_aliased(kernel, case, a, b)?;
                if let Some((index, separate_bits, in_place_bits)) =
                    want.first_difference(&got, rule)
                {
                    return Err(Refusal::InPlaceMismatch {
                        kernel: name.to_owned(),
                        operands: format!("{a} = {b}"),
                        index,
                        input: v.describe_input(case, index),
                        separate_bits,
                        in_place_bits,
                    });
                }
                words += got.bits.len();
            }
        }
    }
    Ok(Verdict {
        twin: twin.name.to_owned(),
        arm: arm.name.to_owned(),
        cases: cases.len() * (1 + aliased.len()),
        words,
        seed,
    })
}

/// A family's [`Validation`] as the planner's type-erased
/// [`TwinCheck`]: what a family puts in its
/// [`weft_kernel::ArmEntry::check`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Checker<V>(pub V);

impl<V: Validation + Send + Sync> TwinCheck for Checker<V> {
    fn check(
        &self,
        arm: Judged<'_>,
        twin: Judged<'_>,
        offer: &Offer,
        host: &Host,
        seed: u64,
    ) -> Result<Checked, Refusal> {
        validate(arm, twin, offer, host, &self.0, seed)
            .into_result()
            .map(|v| Checked {
                cases: v.cases,
                words: v.words,
            })
    }

    fn cases_id(&self, _offer: &Offer, seed: u64) -> String {
        format!(
            "weft-validate v{VALIDATOR_VERSION}; {}; seed {seed:#x}",
            self.0.generator()
        )
    }
}

/// Place `code` and wrap it as a kernel taking `A`.
fn place<A>(code: &NativeCode) -> Result<Kernel<A>, Refusal> {
    let placed = code.place()?;
    // SAFETY: `A` is the argument struct the offer's contract names (checked
    // by the caller against `Validation::args_name`, whose implementation
    // promises the match), and Weft's arm and twin bodies for that contract
    // honour the leaf ABI for it; the entry is offset 0 of a body.
    unsafe { Kernel::from_placed(placed, 0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_rule_by_class_ignores_payload_and_sign() {
        let q = u64::from(0x7fc0_0000u32);
        let s = u64::from(0xff80_0001u32);
        assert!(Element::F32.same(NanRule::ByClass, q, s));
        assert!(!Element::F32.same(NanRule::ByBits, q, s));
        assert!(!Element::F32.same(NanRule::ByClass, q, 0x7f80_0000));
        assert!(!Element::Int.same(NanRule::ByClass, q, s));
        assert!(Element::F16.is_nan(0x7e00) && !Element::F16.is_nan(0x7c00));
        assert!(Element::Bf16.is_nan(0xffc1) && !Element::Bf16.is_nan(0xff80));
    }

    #[test]
    fn first_difference_reports_index_and_both_words() {
        let arm = Outputs::from_f32([1.0, 2.0, 3.0]);
        let twin = Outputs::from_f32([1.0, 2.5, 3.5]);
        assert_eq!(
            arm.first_difference(&twin, NanRule::ByBits),
            Some((1, 0x4000_0000, 0x4020_0000))
        );
        let short = Outputs::from_f32([1.0, 2.0]);
        assert_eq!(
            arm.first_difference(&short, NanRule::ByBits),
            Some((2, 0x4040_0000, 0))
        );
        assert_eq!(arm.first_difference(&arm.clone(), NanRule::ByBits), None);
    }
}
