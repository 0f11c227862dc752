//! The elementwise family: `out[i] = f(in[i])` for `f` in {exp, erf}.
//!
//! # Contract
//!
//! - Arguments: [`ElementwiseArgs`] (`#[repr(C)]`): `input`, `output`, `len`
//!   and `table`, which must point at [`ELEMENTWISE_TABLE`] (the arms load
//!   table entries through it, so the code has no relocations). Any `len`
//!   (0 included) and any alignment of `input`/`output` (f32-aligned);
//!   `input` and `output` may be equal (in place) but must not otherwise
//!   overlap.
//! - Result: `output[i]` is `f(input[i])` **correctly rounded** to nearest
//!   binary32 for every input, so every correct implementation gives the same
//!   bits. NaN in → NaN out: NaNs compare by class (payloads follow each
//!   ISA's rules), everything else by bits.
//! - The arm processes 4 lanes at a time (f32x4, widened to two f64x2), then
//!   a scalar tail; an input whose vector rounding test fails is recomputed
//!   on the scalar path, which has the slow path. Twins may use wider
//!   vectors; the steps below fix every binary64 operation, so the fast-path
//!   rate and the proof are the same in every implementation.
//!
//! # Family layout
//!
//! As every family crate: this file is the contract, [`twins_of`] (the
//! twins that stand beside each arm) and [`entry`] (the family as a
//! planner registers it); [`validation`] judges twins against the arm;
//! [`arm`] is the Cranelift body,
//! [`twin_x64`] and [`twin_a64`] the bodies Weft emits itself; the scalar
//! definition ([`reference`](mod@reference)) and the constants ([`table`])
//! are `weft-libm`'s, re-exported here.
//!
//! The same machinery serves kernels of other families built around this
//! exp: [`map`] describes an exp-based elementwise map (`out[i] =
//! f(a[i], b[i])`, binary32 operations around one correctly rounded exp)
//! and its contract; [`twin_x64::emit_map`] and [`twin_a64::emit_map`]
//! emit its bodies. Which twins such a family registers, and how it
//! validates them, is that family's business (the loop-nest SiLU·mul).
//!
//! # Algorithms
//!
//! The steps every implementation follows (binary64, no FMA) are
//! `weft-libm`'s; its crate documentation gives them and their error
//! bounds.

pub mod arm;
pub mod map;
mod record;
pub mod twin_x64;
// Twins, added by their authors:
pub mod twin_a64;
pub mod validation;

/// `func`'s family (`elementwise.exp`, `elementwise.erf`) as a planner
/// registers it: the arm, every twin of every ISA ([`twins_of`]; the
/// planner keeps what the host runs) and the check that judges them bit
/// for bit against the arm ([`validation::checker`]). No race bench: the
/// bodies are priced by weft-cost from their bytes, and prices too close
/// to call keep the tie rule's choice.
pub fn entry(func: Func) -> weft_kernel::FamilyEntry {
    use std::sync::Arc;
    let arm = arm::ElementwiseArm::new(func);
    let family = weft_kernel::Arm::family(&arm);
    let twins = twins_of(func).into_iter().map(Arc::from).collect();
    weft_kernel::FamilyEntry {
        family,
        arms: vec![weft_kernel::ArmEntry::new(
            Arc::new(arm),
            twins,
            Arc::new(validation::checker(func)),
            None,
        )],
    }
}

/// Every twin of `func`'s arm, for every ISA: x64 (widest tier first), then
/// arm64. The arm is [`arm::ElementwiseArm`] of the same `func`; this list
/// is what registers a twin under it.
pub fn twins_of(func: Func) -> Vec<Box<dyn weft_kernel::Twin>> {
    let tf = match func {
        Func::Exp => twin_x64::TwinFunc::Exp,
        Func::Erf => twin_x64::TwinFunc::Erf,
    };
    let mut v: Vec<Box<dyn weft_kernel::Twin>> = [twin_x64::Tier::Avx512, twin_x64::Tier::Avx2]
        .into_iter()
        .map(|tier| Box::new(twin_x64::X64Twin { func: tf, tier }) as Box<dyn weft_kernel::Twin>)
        .collect();
    v.push(Box::new(twin_a64::A64Twin::new(func)));
    v
}

/// The name of the argument struct in elementwise contracts.
pub const ARGS_NAME: &str = "ElementwiseArgs";

/// The arguments of every elementwise kernel (`extern "C" fn(*const
/// ElementwiseArgs)`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ElementwiseArgs {
    /// `len` readable f32s.
    pub input: *const f32,
    /// `len` writable f32s.
    pub output: *mut f32,
    /// The number of elements.
    pub len: usize,
    /// Must be `ELEMENTWISE_TABLE.as_ptr()`.
    pub table: *const u64,
}

// SAFETY: `ElementwiseArgs` is the `#[repr(C)]` struct of every
// elementwise contract. A restricted copy covers elements `range` of the
// original by offsetting both pointers (in bounds: `range` lies in
// `0..len`); element `i`'s output depends only on element `i`'s input, so
// copies over disjoint ranges touch disjoint outputs (also in place).
unsafe impl weft_kernel::KernelArgs for ElementwiseArgs {
    const NAME: &'static str = ARGS_NAME;

    fn range(&self) -> std::ops::Range<u64> {
        0..self.len as u64
    }

    fn restrict(&self, range: std::ops::Range<u64>) -> Self {
        let end = (range.end as usize).min(self.len);
        let start = (range.start as usize).min(end);
        Self {
            input: self.input.wrapping_add(start),
            output: self.output.wrapping_add(start),
            len: end - start,
            table: self.table,
        }
    }
}

// SAFETY: plain data; the pointers are dereferenced only by a body called
// through `Kernel::call`, whose caller keeps them valid.
unsafe impl Send for ElementwiseArgs {}
// SAFETY: as for `Send`: a shared reference only lets threads copy it.
unsafe impl Sync for ElementwiseArgs {}

impl ElementwiseArgs {
    /// Arguments for `output[i] = f(input[i])` over two slices of equal
    /// length (the safe constructor `Kernel::call` relies on).
    pub fn new(input: &[f32], output: &mut [f32]) -> Result<Self, weft_kernel::Refusal> {
        if input.len() != output.len() {
            return Err(weft_kernel::Refusal::BadOperand {
                operand: "output".to_string(),
                reason: format!(
                    "length {} differs from the input's {}",
                    output.len(),
                    input.len()
                ),
            });
        }
        Ok(Self {
            input: input.as_ptr(),
            output: output.as_mut_ptr(),
            len: input.len(),
            table: ELEMENTWISE_TABLE.as_ptr(),
        })
    }
}

/// The elementwise functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Func {
    /// `exp(x)`.
    Exp,
    /// `erf(x)`.
    Erf,
}

impl Func {
    /// Every function.
    pub const ALL: [Func; 2] = [Func::Exp, Func::Erf];

    /// The name used by kernels and commands (`exp`, `erf`).
    pub fn name(self) -> &'static str {
        match self {
            Func::Exp => "exp",
            Func::Erf => "erf",
        }
    }

    /// The scalar reference.
    pub fn reference(self) -> fn(f32) -> f32 {
        match self {
            Func::Exp => reference::exp_f32,
            Func::Erf => reference::erf_f32,
        }
    }
}

pub use weft_libm::{reference, table, ELEMENTWISE_TABLE};

#[cfg(test)]
mod tests;
