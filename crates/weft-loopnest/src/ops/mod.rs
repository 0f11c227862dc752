//! The operations: one family each, built from a loop nest.
//!
//! Each module holds one family: its contract (module docs), its shape
//! (the geometry, checked), its nest (the IR, which *is* the reference
//! through [`crate::interp`]), its `#[repr(C)]` argument struct with a
//! checked constructor and [`weft_kernel::KernelArgs`], and a `run` on the
//! placed kernel; a family with generated twins also has a `validation`
//! submodule (the cases that judge them). What they share lives here: the
//! [`NestOp`] trait, the generic arm [`NestArm`], the placed wrapper
//! [`Placed`] and [`family_entry`]; the generated twins ([`native`]), the
//! validations' inputs ([`cases`]) and the workbenches regions race chains
//! on ([`mod@bench`]). [`add_rmsnorm`] is a fused family: its nest is built
//! from [`rmsnorm`]'s by the IR's fusion functions.

pub mod add;
pub mod add_rmsnorm;
pub mod argmax;
pub mod bench;
pub mod cases;
pub mod embed;
pub mod native;
pub mod rmsnorm;
pub mod rope;
pub mod silu_mul;

#[cfg(test)]
pub(crate) mod testing;

use std::marker::PhantomData;
use std::sync::Arc;

use weft_kernel::{
    Arm, Contract, Family, FamilyEntry, Geometry, Host, Isa, Kernel, KernelArgs, MemberViews,
    NativeCode, Offer, Refusal, Site, Twin, TwinCheck, Workbench,
};
use weft_managed::arm_build::{build_native, host_isa};
use weft_managed::ManagedError;

use crate::interp::Arg;
use crate::ir::{self, ParamId};
use crate::{lower, NoTwins};

/// One operation at one shape: everything the generic arm needs.
///
/// # Safety
///
/// Implementing this promises that the body lowered from
/// [`NestOp::nest`] reads and writes only inside the buffers an `Args`
/// value names, for every `Args` value built by the operation's checked
/// constructor for a shape with the same nest, and for every `Args` value
/// that passes the nest's guards and whose buffers hold the extents its
/// fields name (what [`Kernel::call`]'s caller promises). The guards tie
/// the arguments to the shape compiled into the nest; the constructor
/// checks the buffers against the arguments.
pub unsafe trait NestOp: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The family's name.
    const FAMILY: &'static str;
    /// The arm's candidate name.
    const ARM: &'static str;
    /// The argument struct.
    type Args: KernelArgs;

    /// The shape at `geometry`, or why the family cannot serve it.
    fn from_geometry(geometry: &Geometry) -> Result<Self, Refusal>;
    /// The geometry this shape stands for.
    fn geometry(&self) -> Geometry;
    /// The loop nest.
    fn nest(&self) -> ir::Kernel;
    /// What is computed and how it rounds.
    fn contract(&self) -> Contract;
    /// How a call splits across threads (`None`: it does not).
    fn views(&self) -> Option<MemberViews>;
    /// Floating-point operations and bytes moved at the geometry.
    fn work(&self) -> (u64, u64);
    /// The value of `Index` parameter `name` for a whole call at the
    /// geometry (for trip counts).
    fn index_at_geometry(&self, name: &str) -> u64;

    /// The twins that take the arm's offers, for every ISA (none by
    /// default; [`native::native_twins`] for a nest the native lowerings
    /// express).
    fn twins() -> Vec<Arc<dyn Twin>> {
        Vec::new()
    }

    /// How a twin's body is judged against the arm's: by default
    /// [`NoTwins`], which refuses every twin as `no-checker`.
    fn twin_check() -> Arc<dyn TwinCheck> {
        Arc::new(NoTwins)
    }

    /// How bodies run in the planner's micro-race (none by default: the
    /// planner then chooses by price alone, and prices too close to call
    /// keep its tie rule's choice).
    fn bench() -> Option<Arc<dyn Workbench>> {
        None
    }
}

/// The offer of `op`: its contract, views, loop nest with trip counts at
/// the geometry, and work.
pub fn offer_for<O: NestOp>(op: &O) -> Offer {
    let nest = op.nest();
    let loops = nest.loop_trips(&|p: ParamId| {
        let name = nest.params[usize::from(p.0)].name;
        op.index_at_geometry(name)
    });
    let (flops, bytes_moved) = op.work();
    Offer {
        contract: op.contract(),
        packed: Vec::new(),
        views: op.views(),
        loops,
        flops,
        bytes_moved,
    }
}

/// The arm of operation `O`: offers from the site's geometry, bodies
/// lowered from `O`'s nest.
pub struct NestArm<O>(PhantomData<fn() -> O>);

impl<O> NestArm<O> {
    /// The arm.
    pub const fn new() -> Self {
        Self(PhantomData)
    }
}

impl<O> Default for NestArm<O> {
    fn default() -> Self {
        Self::new()
    }
}

impl<O> std::fmt::Debug for NestArm<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(std::any::type_name::<O>())
    }
}

fn wrong_family(found: &str, want: &str) -> Refusal {
    Refusal::UnsupportedGeometry {
        reason: format!("family {found} is not {want}"),
    }
}

/// Compile `nest` for `isa`: checked first, so an IR fault is a named
/// `compile-error` before Cranelift sees anything.
pub fn build_nest(nest: &ir::Kernel, isa: Isa) -> Result<NativeCode, Refusal> {
    let refuse = |e: ir::IrError| Refusal::CompileError {
        message: format!("loop nest `{}`: {e}", nest.name),
    };
    nest.check().map_err(refuse)?;
    build_native(isa, |target| match lower::build_function(nest, target) {
        Ok(func) => target.compile(func),
        // Unreachable after `check`; kept as a named error, not a panic.
        Err(e) => Err(ManagedError::Codegen(e.to_string())),
    })
}

// SAFETY: the body is `O::nest()` lowered by `crate::lower`, which reads
// and writes only the elements its affine indices name after the guards
// hold; `NestOp`'s promise is that those stay inside `O::Args`' buffers.
unsafe impl<O: NestOp> Arm for NestArm<O> {
    fn name(&self) -> &'static str {
        O::ARM
    }

    fn family(&self) -> Family {
        Family(O::FAMILY)
    }

    fn offer(&self, site: &Site, _host: &Host) -> Result<Offer, Refusal> {
        if site.family.name() != O::FAMILY {
            return Err(wrong_family(site.family.name(), O::FAMILY));
        }
        Ok(offer_for(&O::from_geometry(&site.geometry)?))
    }

    fn build(&self, offer: &Offer, isa: Isa) -> Result<NativeCode, Refusal> {
        if offer.contract.family != O::FAMILY {
            return Err(wrong_family(&offer.contract.family, O::FAMILY));
        }
        let op = O::from_geometry(&offer.contract.geometry)?;
        build_nest(&op.nest(), isa)
    }
}

/// A placed kernel of operation `O` (each operation adds its checked `run`).
pub struct Placed<O: NestOp> {
    pub(crate) kernel: Kernel<O::Args>,
    pub(crate) op: O,
}

impl<O: NestOp> std::fmt::Debug for Placed<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Placed")
            .field("op", &self.op)
            .field("kernel", &self.kernel)
            .finish()
    }
}

impl<O: NestOp> Placed<O> {
    /// Compile the host arm for `op` and place it.
    pub fn of_arm(op: O) -> Result<Self, Refusal> {
        let code = build_nest(&op.nest(), host_isa())?;
        // SAFETY: the code is `op`'s nest lowered by this crate (NestArm's
        // promise, through NestOp's).
        unsafe { Self::from_native(&code, op) }
    }

    /// Place `code` as the body of `op`.
    ///
    /// # Safety
    ///
    /// `code` must be a body for the host honouring the leaf ABI for
    /// `O::Args` at `op`'s shape: what [`NestArm`]'s `build` returns for
    /// `op`'s offer, or a twin validated against it.
    pub unsafe fn from_native(code: &NativeCode, op: O) -> Result<Self, Refusal> {
        // SAFETY: the caller promises a leaf body for `O::Args`.
        let kernel = unsafe { Kernel::from_native(code)? };
        Ok(Self { kernel, op })
    }

    /// The shape it was built for.
    pub fn op(&self) -> &O {
        &self.op
    }

    /// The placed kernel, for a planner that builds `O::Args` itself.
    pub fn kernel(&self) -> &Kernel<O::Args> {
        &self.kernel
    }
}

/// `O`'s family as a planner registers it: its one arm with
/// [`NestOp::twins`], [`NestOp::twin_check`] and [`NestOp::bench`] (no
/// twins, [`NoTwins`] and no workbench unless the operation has some).
pub fn family_entry<O: NestOp>() -> FamilyEntry {
    FamilyEntry {
        family: Family(O::FAMILY),
        arms: vec![weft_kernel::ArmEntry::new(
            Arc::new(NestArm::<O>::new()),
            O::twins(),
            O::twin_check(),
            O::bench(),
        )],
    }
}

/// A geometry dimension, required, within `min..=max`.
pub(crate) fn dim(g: &Geometry, name: &'static str, min: u64, max: u64) -> Result<usize, Refusal> {
    let v = g.require(name)?;
    check_dim(name, v, min, max)
}

/// An optional geometry dimension (`default` if absent), within `min..=max`.
pub(crate) fn dim_or(
    g: &Geometry,
    name: &'static str,
    default: u64,
    min: u64,
    max: u64,
) -> Result<usize, Refusal> {
    check_dim(name, g.get(name).unwrap_or(default), min, max)
}

fn check_dim(name: &str, v: u64, min: u64, max: u64) -> Result<usize, Refusal> {
    if v < min || v > max {
        return Err(Refusal::UnsupportedGeometry {
            reason: format!("{name} = {v} is outside {min}..={max}"),
        });
    }
    Ok(v as usize)
}

/// Largest extent of any dimension: keeps every byte offset far inside
/// `isize` and every element index inside `i32` (argmax indices).
pub(crate) const MAX_EXTENT: u64 = 1 << 30;

pub(crate) fn bad(operand: &str, reason: String) -> Refusal {
    Refusal::BadOperand {
        operand: operand.to_owned(),
        reason,
    }
}

/// A row range inside `0..rows`, or a named refusal.
pub(crate) fn check_range(
    name: &str,
    r: &std::ops::Range<usize>,
    total: usize,
) -> Result<(), Refusal> {
    if r.start > r.end || r.end > total {
        return Err(bad(name, format!("{r:?} is not inside 0..{total}")));
    }
    Ok(())
}

/// Run `op`'s nest in the interpreter on `args` and map its errors to
/// refusals (the reference path of every family).
pub(crate) fn interpret<O: NestOp>(op: &O, args: &mut [Arg]) -> Result<(), Refusal> {
    crate::interp::run(&op.nest(), args).map_err(|e| Refusal::CompileError {
        message: format!("interpreting `{}`: {e}", O::FAMILY),
    })
}
