//! weft-loopnest: the model's small operations as generated kernels.
//!
//! One job: describe RMSNorm, RoPE, the SiLU-gated product, the residual
//! add, the embedding gather and argmax as loop nests in a small IR
//! ([`ir`]), fuse neighbouring nests into one kernel ([`ir::sequence`],
//! [`ir::inline_producer`], [`ir::materialise`]: the residual add fused
//! into the RMSNorm after it, written out by the norm's sum of squares, is
//! `loopnest.add_rmsnorm`, [`AddRmsNorm`]),
//! run them in a scalar interpreter ([`interp`], the reference),
//! lower them to CLIF ([`lower`]) and offer the compiled bodies as ordinary
//! arms, one family each ([`entries`]); lower the same nests straight to
//! x64 ([`native_x64`]) and arm64 ([`native_a64`]) machine code and offer
//! those bodies as the arms' twins ([`ops::native`]), validated against
//! the arms. A nest that takes `exp` and is an elementwise map (the
//! SiLU-gated product) reaches native code by the map route
//! ([`map_route`]): read back as weft-elementwise's map language and
//! emitted by its map lowerings, the correctly rounded exp inlined.
//!
//! Invariants:
//!
//! - **The interpreter is the definition.** Every lowering computes the
//!   interpreter's bits (NaNs by class where a contract says so); the IR
//!   fixes every rounding: loop order, vector width, reduction lanes and
//!   fold, no fused multiply-add. Tests hold each lowering to it on inputs
//!   that hunt for differences, on both ISAs.
//! - **The IR has no backend in it.** Loops, widths, granules, lanes and
//!   affine indices are explicit and there are no Cranelift types, so the
//!   CLIF lowering and the native ones read the same nest; a native one
//!   may run more iterations a step (the IR's tile rule makes that exact)
//!   but keeps every reduction's lanes and fold.
//! - **A twin is judged before it is chosen.** RMSNorm, RoPE, the residual
//!   add, the fused add→RMSNorm, both embedding gathers, argmax and the
//!   SiLU-gated product have generated AVX-512, AVX2 and NEON twins (one
//!   lowering per ISA for all nests; SiLU·mul's through the map route),
//!   each family's [`FamilyEntry`] judging them bit for bit against the
//!   arm on its own cases (`ops::*::validation`), on whichever ISA the
//!   host has (arm64 under qemu on the CI's aarch64 leg). A family without
//!   twins would keep [`NoTwins`], which refuses every twin as
//!   `no-checker`.
//! - **Bodies are leaves.** `extern "C" fn(*const Args)`, no calls, no
//!   relocations (exp reads its constants through an argument), no
//!   allocation, no per-call setup beyond loading the arguments (and, on
//!   arm64, saving the callee-saved registers a body uses). Entry
//!   guards tie each argument struct to the shape compiled in, so a body
//!   never touches memory for arguments of another shape.
//! - **Fusion changes no numerics.** A fused nest is built from its
//!   members' nests by the IR's fusion functions, which keep every
//!   element's operations in the same order (a sequence runs its parts'
//!   statements unchanged; an inlined producer computes exactly the
//!   expression whose rounded value it stored), so a fused kernel's bits
//!   are its chain's; its family's tests hold it to the chain, and it goes
//!   through the same two lowerings and the same judge as any nest. The
//!   chain's members' workbenches ([`ops::bench`]) let a planner race a
//!   fused region against its chain.
//! - **Bad input is a named refusal.** Geometries, lengths, ids and
//!   positions are checked by the shapes and the argument constructors;
//!   a malformed nest is an [`ir::IrError`]; nothing panics on input.
//! - **Tables are portable.** The RoPE table's cos/sin come from
//!   [`portable`] binary64 arithmetic, the same bits on every host.

pub mod interp;
pub mod ir;
pub mod lower;
pub mod map_route;
pub mod native_a64;
mod native_shared;
pub mod native_x64;
pub mod ops;
pub mod portable;

use weft_kernel::{Checked, FamilyEntry, Host, Judged, Offer, Refusal, TwinCheck};

pub use ops::add::{Add, AddArgs, AddKernel};
pub use ops::add_rmsnorm::{AddRmsNorm, AddRmsNormArgs, AddRmsNormKernel};
pub use ops::argmax::{Argmax, ArgmaxArgs, ArgmaxKernel};
pub use ops::embed::{EmbedArgs, EmbedF32, EmbedKernel, EmbedQ8_0, Table};
pub use ops::rmsnorm::{RmsNorm, RmsNormArgs, RmsNormKernel};
pub use ops::rope::{Rope, RopeArgs, RopeKernel, RopeTable};
pub use ops::silu_mul::{SiluMul, SiluMulArgs, SiluMulKernel};
pub use ops::{family_entry, NestArm, NestOp, Placed};

/// The twin check of families that have no twins yet: every twin is
/// refused as [`Refusal::NoChecker`], so none can stand in for an arm
/// whose bits it was never compared with.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTwins;

impl TwinCheck for NoTwins {
    fn check(
        &self,
        _arm: Judged<'_>,
        _twin: Judged<'_>,
        offer: &Offer,
        _host: &Host,
        _seed: u64,
    ) -> Result<Checked, Refusal> {
        Err(Refusal::NoChecker {
            family: offer.contract.family.clone(),
        })
    }

    fn cases_id(&self, _offer: &Offer, _seed: u64) -> String {
        "no twins: nothing is judged".to_owned()
    }
}

/// Every family of this crate as a planner registers it.
pub fn entries() -> Vec<FamilyEntry> {
    vec![
        family_entry::<RmsNorm>(),
        family_entry::<Rope>(),
        family_entry::<SiluMul>(),
        family_entry::<Add>(),
        family_entry::<AddRmsNorm>(),
        family_entry::<EmbedQ8_0>(),
        family_entry::<EmbedF32>(),
        family_entry::<Argmax>(),
    ]
}
