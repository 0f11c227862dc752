//! The generated twins: every nest family's x64 and arm64 bodies, emitted
//! from the family's own nest by [`crate::native_x64`] and
//! [`crate::native_a64`], one lowering per ISA for all nests.
//!
//! One job: make a nest's native body a [`Twin`] of the nest's arm. The
//! twin takes the arm's offer unchanged (contract, views, argument
//! struct), rebuilds the same nest from the offer's geometry, and lowers
//! it (x64 at its [`Tier`], arm64 in NEON); its [`Twin::nest`] states the
//! loops that lowering emits ([`native_x64::loop_trips`],
//! [`native_a64::loop_trips`]), so weft-cost prices the bytes the planner
//! validated. A family registers them through [`NestOp::twins`] with
//! [`native_twins`] (or [`x64_twins`] and [`a64_twin`]), and judges them
//! with its own validation cases ([`NestOp::twin_check`]), on whichever
//! ISA the host has; a nest a lowering cannot express is refused at
//! emission by name (`unsupported-geometry`).

use std::marker::PhantomData;
use std::sync::Arc;

use weft_kernel::{Feature, Isa, KernelArgs, LoopTrip, NativeCode, Offer, Refusal, Twin};
use weft_x64::Abi;

use super::NestOp;
use crate::ir::ParamId;
use crate::native_a64;
use crate::native_x64::{self, Tier};

/// The x64 twin of `O`'s arm at one [`Tier`].
pub struct NestX64Twin<O> {
    tier: Tier,
    name: &'static str,
    op: PhantomData<fn() -> O>,
}

impl<O> std::fmt::Debug for NestX64Twin<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NestX64Twin")
            .field("name", &self.name)
            .field("tier", &self.tier)
            .finish()
    }
}

impl<O: NestOp> NestX64Twin<O> {
    /// The twin named `name` at `tier`.
    pub const fn new(tier: Tier, name: &'static str) -> Self {
        Self {
            tier,
            name,
            op: PhantomData,
        }
    }

    /// Its tier.
    pub fn tier(&self) -> Tier {
        self.tier
    }

    /// The shape of `offer`, which must be `O`'s family with `O`'s argument
    /// struct.
    fn op(&self, offer: &Offer) -> Result<O, Refusal> {
        shape_of::<O>(self.name, offer)
    }

    /// The body for `offer` entered with `abi` (the host's is what
    /// [`Twin::emit`] gives; the other is for tests and listings).
    pub fn emit_for(&self, offer: &Offer, abi: Abi) -> Result<NativeCode, Refusal> {
        let nest = self.op(offer)?.nest();
        native_x64::emit(&nest, self.tier, abi).map_err(|e| e.refusal(&nest.name))
    }
}

/// The shape of `offer` for twin `name`: `O`'s family with `O`'s argument
/// struct, or a named refusal.
fn shape_of<O: NestOp>(name: &str, offer: &Offer) -> Result<O, Refusal> {
    let c = &offer.contract;
    if c.args != <O::Args as KernelArgs>::NAME {
        return Err(Refusal::BadOperand {
            operand: "args".into(),
            reason: format!(
                "{name} takes {}, the offer names {}",
                <O::Args as KernelArgs>::NAME,
                c.args
            ),
        });
    }
    if c.family != O::FAMILY {
        return Err(Refusal::UnsupportedGeometry {
            reason: format!(
                "{name} computes {}, the offer is for {}",
                O::FAMILY,
                c.family
            ),
        });
    }
    O::from_geometry(&c.geometry)
}

// SAFETY: the body is `O::nest()` for the offer's geometry lowered by
// `native_x64`, which evaluates the nest's guards first and then reads and
// writes only the elements the nest's affine indices name (partial steps
// masked, so no lane outside the range is touched) — the same elements as
// the arm, which `NestOp`'s promise keeps inside `O::Args`' buffers. It
// returns normally through the emitter's epilogue, restoring every
// callee-saved register it writes. Validation checks its results.
unsafe impl<O: NestOp> Twin for NestX64Twin<O> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn isa(&self) -> Isa {
        Isa::X86_64
    }

    fn requires(&self) -> &'static [Feature] {
        self.tier.requires()
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        self.emit_for(offer, Abi::host())
    }

    /// The nest's loops as the native lowering emits them: innermost loops
    /// in steps of the tier's lanes with a straight-line partial step,
    /// reductions in groups of their lanes.
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        let Ok(op) = self.op(offer) else {
            return offer.loops.clone();
        };
        let nest = op.nest();
        native_x64::loop_trips(&nest, self.tier, &|p: ParamId| {
            op.index_at_geometry(nest.params[usize::from(p.0)].name)
        })
    }
}

/// `O`'s generated twins, widest tier first: AVX-512 named `avx512`, AVX2
/// named `avx2`.
pub fn x64_twins<O: NestOp>(avx512: &'static str, avx2: &'static str) -> Vec<Arc<dyn Twin>> {
    vec![
        Arc::new(NestX64Twin::<O>::new(Tier::Avx512, avx512)),
        Arc::new(NestX64Twin::<O>::new(Tier::Avx2, avx2)),
    ]
}

/// The arm64 (NEON) twin of `O`'s arm.
pub struct NestA64Twin<O> {
    name: &'static str,
    op: PhantomData<fn() -> O>,
}

impl<O> std::fmt::Debug for NestA64Twin<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NestA64Twin")
            .field("name", &self.name)
            .finish()
    }
}

impl<O: NestOp> NestA64Twin<O> {
    /// The twin named `name`.
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            op: PhantomData,
        }
    }

    fn op(&self, offer: &Offer) -> Result<O, Refusal> {
        shape_of::<O>(self.name, offer)
    }
}

// SAFETY: the body is `O::nest()` for the offer's geometry lowered by
// `native_a64`, which evaluates the nest's guards first and then reads and
// writes only the elements the nest's affine indices name (a partial step
// loads and stores exactly its elements, lane by lane past the first
// power-of-two piece, so nothing outside the range is touched) — the same
// elements as the arm, which `NestOp`'s promise keeps inside `O::Args`'
// buffers. It is an AAPCS64 leaf: it restores every callee-saved register
// it writes (x19–x28, d8–d15) and the stack pointer before `ret`.
// Validation checks its results.
unsafe impl<O: NestOp> Twin for NestA64Twin<O> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn isa(&self) -> Isa {
        Isa::Aarch64
    }

    fn requires(&self) -> &'static [Feature] {
        native_a64::REQUIRES
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        let nest = self.op(offer)?.nest();
        native_a64::emit(&nest).map_err(|e| e.refusal(&nest.name))
    }

    /// The nest's loops as the arm64 lowering emits them: innermost loops
    /// in steps of four with a straight-line partial step, reductions in
    /// groups of their lanes.
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        let Ok(op) = self.op(offer) else {
            return offer.loops.clone();
        };
        let nest = op.nest();
        native_a64::loop_trips(&nest, &|p: ParamId| {
            op.index_at_geometry(nest.params[usize::from(p.0)].name)
        })
    }
}

/// `O`'s arm64 twin, named `name`.
pub fn a64_twin<O: NestOp>(name: &'static str) -> Arc<dyn Twin> {
    Arc::new(NestA64Twin::<O>::new(name))
}

/// Every generated twin of `O`: x64 AVX-512 named `avx512`, AVX2 named
/// `avx2` (widest first), then arm64 NEON named `neon`.
pub fn native_twins<O: NestOp>(
    avx512: &'static str,
    avx2: &'static str,
    neon: &'static str,
) -> Vec<Arc<dyn Twin>> {
    let mut twins = x64_twins::<O>(avx512, avx2);
    twins.push(a64_twin::<O>(neon));
    twins
}
