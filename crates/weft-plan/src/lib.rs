//! The planner: from sites to a compiled plan of placed, validated,
//! priced and chosen kernels, and the executor that runs it on threads.
//!
//! Its one job: for each site (family, geometry, plan-time operands) of a
//! plan, choose one body and place it. A [`Catalogue`] holds every
//! family's arms and twins. Selection has two stages:
//!
//! 1. **The offer**: every arm that can serve the site builds its body
//!    (Cranelift) and is priced by a [`Pricer`] (weft-cost's model of the
//!    host, through [`Planner::for_host`]); the cheapest arm's offer fixes
//!    the site's contract, packed operands and member views.
//! 2. **The body**: that arm's twins the host can run are emitted for the
//!    same offer, validated bit for bit against the arm (verdicts cached
//!    per host), priced, and compete with the arm.
//!
//! In each stage the exact-tie rule comes first (the first registered, the
//! shipped arm, is kept), then price, then a cached micro-race when prices
//! are too close to call (or when candidates other than the arm tie
//! exactly, as memory-bound twins do on one roofline floor, or when such a
//! floor ties the arm with bodies whose own cycles under it are fewer:
//! then the arm races with them). A site's
//! [`Residency`](weft_kernel::Residency) moves its floor to main memory
//! and makes its races start every call with the caches evicted. A
//! [`CompiledPlan`] hands out typed
//! [`SiteKernel`]s that an [`Executor`] (a persistent thread pool) runs,
//! splitting each call over the offer's member views. The per-host
//! [`PlanCache`] keeps verdicts, races and (for the same executable)
//! built bodies, so a warm compile validates, races and compiles nothing.
//!
//! **Regions** ([`Region`], [`Planner::compile_with_regions`]): a chain of
//! sites and the one fused site that replaces it are planned as sites and
//! then compete as two alternatives of one choice, by the same rule: the
//! chain's price is the sum of its sites' chosen prices; the chain is the
//! reference (kept on an exact tie: it is what ships); a gap wider than the
//! separation chooses; otherwise the chain's bodies, called in order on
//! their members' workbenches, race the fused body ([`race_sides`]), the
//! result cached by the bytes raced. The report lists each region, both
//! alternatives with their prices, and the rule.
//!
//! `examples/matvec.rs` builds a plan from scratch, runs it and checks it
//! against the scalar references (`tests/example.rs` runs it in CI):
//!
//! ```no_run
//! use weft_plan::{Catalogue, Executor, Options, Planner};
//! # fn main() -> Result<(), weft_plan::PlanError> {
//! let mut catalogue = Catalogue::new();
//! catalogue.register(weft_q8::entry())?;
//! let mut planner = Planner::for_host(catalogue, weft_host::Host::detect(), Options::from_env()?);
//! let site = weft_kernel::Site::new(
//!     weft_kernel::Family("q8_0.matvec"),
//!     weft_q8::geometry(576, 576, 1),
//! );
//! let plan = planner.compile(&[site])?;
//! println!("{}", plan.report());
//! let matvec = plan.kernel::<weft_q8::Q8MatvecArgs>(0)?;
//! let exec = Executor::new(2);
//! # let _ = (matvec, exec);
//! # Ok(()) }
//! ```
//!
//! Invariants:
//!
//! - **Numerics never depend on native emission.** The offer (and so the
//!   contract) of a site is chosen among arms alone; twins compete only to
//!   be its body, and a twin rounds exactly as its arm. So
//!   `WEFT_NATIVE_EMIT=off` gives a plan whose [`CompiledPlan::image`] is
//!   byte-identical to one from a catalogue without twins, and on/off plans
//!   compute the same bits.
//! - **An exact tie keeps the shipped arm**, decided before selection. A
//!   tie only in the floor, the model's own cycles putting another below
//!   the arm, is not exact: it is raced ([`Unordered::Floor`]).
//! - **Caches change speed, never the plan**: a warm compile's image equals
//!   the cold one's. A saved body is used only by the build that saved it
//!   ([`BuildId`]); verdicts and races are keyed by the bytes they judge.
//! - **Caches are never trusted blindly**: a corrupt, truncated or foreign
//!   file is reported once ([`CacheProblem`]), ignored and rewritten.
//! - **Strict mode** (`WEFT_NATIVE_EMIT=strict`) turns a twin's mismatch or
//!   emit error into [`PlanError::Strict`]; on mode merely refuses the twin.
//! - **A region chooses bodies, never bits**: its fused family promises
//!   the chain's bits; with `WEFT_NATIVE_EMIT=off` a plan with regions is
//!   still byte-identical to one from a catalogue without twins (every
//!   member's body is its arm; the choice is made from those bodies).
//! - **Bad input is an error with a name** ([`PlanError::name`]), never a panic.

mod cache;
mod catalogue;
mod compile;
mod exec;
mod hash;
mod mode;
mod options;
mod plan;
mod race;
mod region;
mod report;
mod select;

pub use cache::{
    BodyKey, BuildId, CacheProblem, CacheSaveError, GeometryClass, PlanCache, RaceKey, SavedRace,
    SavedVerdict, VerdictKey, CACHE_FORMAT, CRATE_VERSION, MAX_BUILDS,
};
pub use catalogue::Catalogue;
pub use compile::Planner;
pub use exec::{parts_for, split_range, Executor, PARTS_PER_THREAD};
pub use hash::ContentHash;
pub use mode::{EmitMode, EmitModeError, EMIT_MODE_VAR};
pub use options::{CacheLocation, Options, Pricer};
pub use plan::{Candidate, CompiledPlan, CompiledSite, Kind, SiteKernel};
pub use race::{race, race_sides, RaceBudget, RaceOutcome, Side};
pub use region::{Alternative, CompiledRegion, Member, Region};
pub use report::{
    AlternativeReport, CacheReport, CandidateReport, PriceReport, RaceReport, RegionReport, Rule,
    SelectionReport, SiteReport, VerdictReport,
};
pub use select::{decide, Decision, Quote, Unordered};

use weft_kernel::Refusal;

/// Why a plan could not be compiled (or a compiled plan not used).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A site names a family the catalogue does not have.
    #[error("unknown-family: site {index} names {family}, which is not registered")]
    UnknownFamily {
        /// The site.
        index: usize,
        /// The family named.
        family: String,
    },
    /// No arm of the family could serve the site.
    #[error("no-candidate: site {index} ({family}): {}", list(refusals))]
    NoCandidate {
        /// The site.
        index: usize,
        /// Its family.
        family: String,
        /// Each arm's refusal.
        refusals: Vec<(String, Refusal)>,
    },
    /// Strict mode: a twin's bytes are at fault.
    #[error("strict: site {index}: twin {twin} refused: {refusal}")]
    Strict {
        /// The site.
        index: usize,
        /// The twin.
        twin: String,
        /// Its refusal (`mismatch`, `emit-error`).
        refusal: Box<Refusal>,
    },
    /// A family's registration is inconsistent.
    #[error("bad-registration: family {family}: {reason}")]
    BadRegistration {
        /// The family.
        family: String,
        /// What is wrong.
        reason: String,
    },
    /// `WEFT_NATIVE_EMIT` holds no mode.
    #[error("{message}")]
    BadMode {
        /// The mode error.
        message: String,
    },
    /// A site index past the plan's end.
    #[error("no-such-site: site {index} of a plan of {len}")]
    NoSuchSite {
        /// The index asked for.
        index: usize,
        /// The plan's length.
        len: usize,
    },
    /// A site name that labels no site of the plan.
    #[error("unknown-site: {name:?} names no site; the sites are {sites}")]
    UnknownSite {
        /// The name asked for.
        name: String,
        /// The plan's labels.
        sites: String,
    },
    /// A site name that is a suffix of several labels.
    #[error("ambiguous-site: {name:?} matches {matches}")]
    AmbiguousSite {
        /// The name asked for.
        name: String,
        /// The labels it matches.
        matches: String,
    },
    /// A kernel asked for with an argument struct its contract does not take.
    #[error("wrong-args: site {index} takes {contract}, not {asked}")]
    WrongArgs {
        /// The site.
        index: usize,
        /// The contract's struct.
        contract: String,
        /// The struct asked for.
        asked: &'static str,
    },
    /// The chosen body could not be placed.
    #[error("place-failed: site {index}: {refusal}")]
    Place {
        /// The site.
        index: usize,
        /// Why.
        refusal: Refusal,
    },
    /// A region that cannot be planned (an empty chain).
    #[error("bad-region: region {label}: {reason}")]
    BadRegion {
        /// The region's label.
        label: String,
        /// What is wrong.
        reason: String,
    },
    /// A region label that names no region of the plan.
    #[error("unknown-region: {label:?} names no region; the regions are {regions}")]
    UnknownRegion {
        /// The label asked for.
        label: String,
        /// The plan's region labels.
        regions: String,
    },
    /// A broken invariant inside the planner (a bug, reported rather than a panic).
    #[error("internal: {what}")]
    Internal {
        /// What broke.
        what: &'static str,
    },
}

impl PlanError {
    /// The error's stable name, as printed before the colon.
    pub fn name(&self) -> &'static str {
        match self {
            PlanError::UnknownFamily { .. } => "unknown-family",
            PlanError::NoCandidate { .. } => "no-candidate",
            PlanError::Strict { .. } => "strict",
            PlanError::BadRegistration { .. } => "bad-registration",
            PlanError::BadMode { .. } => "bad-mode",
            PlanError::NoSuchSite { .. } => "no-such-site",
            PlanError::UnknownSite { .. } => "unknown-site",
            PlanError::AmbiguousSite { .. } => "ambiguous-site",
            PlanError::WrongArgs { .. } => "wrong-args",
            PlanError::Place { .. } => "place-failed",
            PlanError::BadRegion { .. } => "bad-region",
            PlanError::UnknownRegion { .. } => "unknown-region",
            PlanError::Internal { .. } => "internal",
        }
    }
}

fn list(refusals: &[(String, Refusal)]) -> String {
    refusals
        .iter()
        .map(|(n, r)| format!("{n}: {r}"))
        .collect::<Vec<_>>()
        .join("; ")
}
