//! Regions: a chain of sites and the one fused site that computes the same
//! thing, planned as two alternatives of one choice.
//!
//! A caller that can run a stretch of its program either as a chain of
//! kernels (residual add, then RMSNorm) or as one fused kernel (the add
//! inlined into the norm) gives the planner a [`Region`]. Each member site
//! is planned as any site is (its arms, then its twins), and then the
//! region chooses between the **chain** (its price: the sum of its sites'
//! chosen prices) and the **fused** site by the same rule as any choice
//! ([`crate::decide`]): the chain is the reference, so an exact tie keeps
//! it (the chain is what ships); a gap wider than the separation chooses
//! the cheaper; a gap too close to call, a tie only in the roofline floor
//! or an unpriced chain is settled by a micro-race — the chain's bodies
//! called one after another against the fused body, each on its member's
//! [`Workbench`] — cached like any race, keyed by the bytes raced (a hash
//! of the chain's bodies' hashes, the fused body's hash), the geometry
//! class and the residency.
//!
//! Invariants:
//!
//! - **A region changes no numerics.** A fused family's contract promises
//!   the chain's bits (its family's tests hold it to the chain bit for
//!   bit); the region only chooses which bodies run.
//! - **Both alternatives are in the plan.** Every member is a site of the
//!   compiled plan (after the caller's own sites), so a caller can run
//!   either and the report shows both; [`CompiledRegion::choice`] says
//!   which the planner chose.
//! - **The kill switch still holds.** With `WEFT_NATIVE_EMIT=off` every
//!   member's body is its arm, exactly as in a catalogue without twins, and
//!   the region's choice is made from those bodies' prices (and races keyed
//!   by their bytes), so the plan's image is the same.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use weft_kernel::{Site, Workbench};

use crate::report::Rule;

/// One site of a region and how its bodies run in the region's race.
#[derive(Clone)]
pub struct Member {
    /// The site.
    pub site: Site,
    /// Its bodies' workbench in a region race (`None`: the family's own,
    /// if it registered one; without either the region cannot race and
    /// keeps the chain when prices cannot choose).
    pub bench: Option<Arc<dyn Workbench>>,
}

impl Member {
    /// `site`, raced on its family's own workbench.
    pub fn new(site: Site) -> Member {
        Member { site, bench: None }
    }

    /// `site`, raced on `bench`.
    pub fn with_bench(site: Site, bench: Arc<dyn Workbench>) -> Member {
        Member {
            site,
            bench: Some(bench),
        }
    }
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("site", &self.site)
            .field("bench", &self.bench.is_some())
            .finish()
    }
}

/// A chain of sites and the fused site that replaces it.
#[derive(Clone, Debug)]
pub struct Region {
    /// What the caller calls the region (`blk.*.ffn_residual+ffn_norm`).
    pub label: String,
    /// The chain, in call order (at least one site).
    pub chain: Vec<Member>,
    /// The fused site.
    pub fused: Member,
}

/// Which alternative of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Alternative {
    /// The chain of sites, one call each.
    Chain,
    /// The fused site, one call.
    Fused,
}

/// A compiled region: where its members are in the plan, and the choice.
#[derive(Clone, Debug, PartialEq)]
pub struct CompiledRegion {
    /// The caller's label.
    pub label: String,
    /// The chain's sites, as indices into [`crate::CompiledPlan::sites`].
    pub chain: Vec<usize>,
    /// The fused site's index.
    pub fused: usize,
    /// The alternative chosen.
    pub choice: Alternative,
    /// The rule that chose it.
    pub rule: Rule,
    /// The chain's price: its sites' chosen prices summed, cycles (`None`
    /// if one of them has none).
    pub chain_cycles: Option<f64>,
    /// The fused site's chosen price, cycles.
    pub fused_cycles: Option<f64>,
}
