//! What a compile hands out: per site the placed body, its offer's
//! operands and views, and what the planner judged on the way — every
//! candidate's bytes, price breakdown and verdict, and the rule that chose.
//! Reports and explanations read this; nothing is built or priced again.

use std::sync::Arc;

use weft_cost::{CostError, Priced};
use weft_kernel::{
    Contract, Geometry, Kernel, KernelArgs, MemberViews, NativeCode, Offer, PackedOperand,
    PlacedCode, Price, Residency,
};

use crate::hash::ContentHash;
use crate::region::{Alternative, CompiledRegion};
use crate::report::{Rule, SelectionReport};
use crate::{Executor, PlanError};

/// Whether a chosen candidate is an arm or a twin.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Kind {
    /// A managed arm.
    Arm,
    /// A twin of the named arm.
    Twin {
        /// Its arm.
        arm: String,
    },
}

/// One compiled site: the chosen body, placed, with the offer's operands
/// and views.
#[derive(Clone, Debug)]
pub struct CompiledSite {
    /// The caller's label for the site ([`weft_kernel::Site::label`]).
    pub label: String,
    /// The family's name.
    pub family: &'static str,
    /// The geometry.
    pub geometry: Geometry,
    /// Where the site's data is when it is called.
    pub residency: Residency,
    /// The chosen candidate.
    pub candidate: &'static str,
    /// Arm or twin.
    pub kind: Kind,
    /// The offer's contract (the twin's is its arm's).
    pub contract: Contract,
    /// Operands repacked at plan time for the chosen offer.
    pub packed: Vec<PackedOperand>,
    /// How the site splits over threads.
    pub views: Option<MemberViews>,
    /// The chosen body's price, if it has one.
    pub price: Option<Price>,
    /// The chosen body's bytes.
    pub code: Arc<NativeCode>,
    /// The rule that chose it.
    pub rule: Rule,
    /// Every candidate the family had for the site, in the report's order,
    /// with what the planner made of it.
    pub candidates: Vec<Candidate>,
    /// The chosen offer (what a region's race prepares its bench for).
    pub(crate) offer: Arc<Offer>,
    /// The chosen body's own cycles under its floor, if priced.
    pub(crate) model_cycles: Option<f64>,
    pub(crate) placed: Arc<PlacedCode>,
    pub(crate) split: bool,
    /// Most parts a split call is cut into (see
    /// [`Options::part_min_cycles`](crate::Options::part_min_cycles)).
    pub(crate) max_parts: u64,
}

/// One candidate as the planner left it: the bytes it judged and placed
/// (none for a candidate refused before it had a body) and the price it
/// chose by, at the site's residency.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The candidate's name.
    pub name: String,
    /// For a twin, the arm whose offer it takes.
    pub arm: Option<String>,
    /// Its body, if it got one.
    pub code: Option<Arc<NativeCode>>,
    /// Its price breakdown (or why it has none), if it got that far.
    pub priced: Option<Result<Priced, CostError>>,
}

impl CompiledSite {
    /// The candidate called `name`.
    pub fn candidate(&self, name: &str) -> Option<&Candidate> {
        self.candidates.iter().find(|c| c.name == name)
    }

    /// The packed operand `name`, if the chosen offer repacked it.
    pub fn packed(&self, name: &str) -> Option<&PackedOperand> {
        self.packed.iter().find(|p| p.name == name)
    }
}

/// A compiled plan: placed code per site, and the report of how it was chosen.
#[derive(Debug)]
pub struct CompiledPlan {
    pub(crate) sites: Vec<CompiledSite>,
    pub(crate) regions: Vec<CompiledRegion>,
    pub(crate) report: SelectionReport,
}

/// What [`CompiledPlan::image`] adds per region: its members and choice.
#[derive(serde::Serialize)]
struct RegionImage<'a> {
    label: &'a str,
    chain: &'a [usize],
    fused: usize,
    choice: Alternative,
}

/// What [`CompiledPlan::image`] serialises: everything that decides what
/// runs, nothing about how it was chosen.
#[derive(serde::Serialize)]
struct SiteImage<'a> {
    family: &'a str,
    geometry: &'a Geometry,
    residency: Residency,
    candidate: &'a str,
    kind: &'a Kind,
    contract: &'a Contract,
    code: &'a [u8],
    packed: Vec<(&'a str, &'a str, ContentHash)>,
    views: &'a Option<MemberViews>,
    split: bool,
    max_parts: u64,
}

impl CompiledPlan {
    /// The sites, in the order they were given.
    pub fn sites(&self) -> &[CompiledSite] {
        &self.sites
    }

    /// The selection report.
    pub fn report(&self) -> &SelectionReport {
        &self.report
    }

    /// The regions, in the order they were given.
    pub fn regions(&self) -> &[CompiledRegion] {
        &self.regions
    }

    /// The region labelled `label`, refused by name (`unknown-region`).
    pub fn region(&self, label: &str) -> Result<&CompiledRegion, PlanError> {
        self.regions
            .iter()
            .find(|r| r.label == label)
            .ok_or_else(|| PlanError::UnknownRegion {
                label: label.to_owned(),
                regions: self
                    .regions
                    .iter()
                    .map(|r| r.label.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The index of the site `name` names: its index, its whole label, or
    /// a suffix of exactly one label (`attn_q` for `blk.*.attn_q`).
    pub fn resolve(&self, name: &str) -> Result<usize, PlanError> {
        if let Ok(index) = name.parse::<usize>() {
            return if index < self.sites.len() {
                Ok(index)
            } else {
                Err(PlanError::NoSuchSite {
                    index,
                    len: self.sites.len(),
                })
            };
        }
        if let Some(i) = self.sites.iter().position(|s| s.label == name) {
            return Ok(i);
        }
        let hits: Vec<usize> = (0..self.sites.len())
            .filter(|&i| self.sites[i].label.ends_with(name))
            .collect();
        let labels = |among: &[usize]| {
            among
                .iter()
                .map(|&i| self.sites[i].label.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match hits.as_slice() {
            [one] => Ok(*one),
            [] => Err(PlanError::UnknownSite {
                name: name.to_owned(),
                sites: labels(&(0..self.sites.len()).collect::<Vec<_>>()),
            }),
            many => Err(PlanError::AmbiguousSite {
                name: name.to_owned(),
                matches: labels(many),
            }),
        }
    }

    /// The plan as bytes: per site the family, geometry, chosen candidate,
    /// contract, body bytes, packed operands (by hash) and views. Two plans
    /// with equal images run the same code on the same operands; the kill
    /// switch's promise is stated in these bytes.
    pub fn image(&self) -> Vec<u8> {
        let images: Vec<SiteImage<'_>> = self
            .sites
            .iter()
            .map(|s| SiteImage {
                family: s.family,
                geometry: &s.geometry,
                residency: s.residency,
                candidate: s.candidate,
                kind: &s.kind,
                contract: &s.contract,
                code: &s.code.bytes,
                packed: s
                    .packed
                    .iter()
                    .map(|p| (p.name, p.layout, ContentHash::of(&p.bytes)))
                    .collect(),
                views: &s.views,
                split: s.split,
                max_parts: s.max_parts,
            })
            .collect();
        // Plain data throughout; serialising it cannot fail. A plan without
        // regions has the image it had before regions existed.
        if self.regions.is_empty() {
            return bincode::serialize(&images).unwrap_or_default();
        }
        let regions: Vec<RegionImage<'_>> = self
            .regions
            .iter()
            .map(|r| RegionImage {
                label: &r.label,
                chain: &r.chain,
                fused: r.fused,
                choice: r.choice,
            })
            .collect();
        bincode::serialize(&(images, regions)).unwrap_or_default()
    }

    /// Site `index`'s body as a kernel taking `A`, refused by name when the
    /// site's contract takes another argument struct.
    pub fn kernel<A: KernelArgs>(&self, index: usize) -> Result<SiteKernel<A>, PlanError> {
        let site = self.sites.get(index).ok_or(PlanError::NoSuchSite {
            index,
            len: self.sites.len(),
        })?;
        if site.contract.args != A::NAME {
            return Err(PlanError::WrongArgs {
                index,
                contract: site.contract.args.clone(),
                asked: A::NAME,
            });
        }
        // SAFETY: the body was built by an `Arm` or emitted by a `Twin` for
        // an offer whose contract names `A::NAME`; those unsafe traits
        // promise a leaf-ABI body for that struct, and `KernelArgs`
        // promises `A` is that struct.
        let kernel = unsafe { Kernel::from_placed(Arc::clone(&site.placed), 0) }
            .map_err(|r| PlanError::Place { index, refusal: r })?;
        Ok(SiteKernel {
            kernel,
            views: site.views.clone(),
            split: site.split,
            max_parts: site.max_parts,
        })
    }
}

/// A site's kernel, typed by its argument struct.
#[derive(Debug)]
pub struct SiteKernel<A> {
    kernel: Kernel<A>,
    views: Option<MemberViews>,
    split: bool,
    max_parts: u64,
}

impl<A: KernelArgs> SiteKernel<A> {
    /// Run one call, its member views spread over `exec`'s threads when
    /// the site is large enough to gain from it.
    ///
    /// # Safety
    ///
    /// `args` must be valid for [`Kernel::call`] for the whole call
    /// (build it with the family's checked constructor from live buffers).
    pub unsafe fn run(&self, exec: &Executor, args: &A) {
        match &self.views {
            // SAFETY: the caller's promise.
            Some(v) if self.split && exec.threads() > 1 => unsafe {
                exec.run_at_most(&self.kernel, args, v, self.max_parts)
            },
            // SAFETY: the caller's promise.
            _ => unsafe { self.kernel.call(args) },
        }
    }

    /// Whether [`SiteKernel::run`] splits this site over threads.
    pub fn splits(&self) -> bool {
        self.split && self.views.is_some()
    }

    /// Parts [`SiteKernel::run`] cuts a call into on an executor of
    /// `threads` threads (1: the call runs whole on the caller).
    pub fn parts_on(&self, threads: usize) -> u64 {
        if self.splits() && threads > 1 {
            crate::exec::parts_for(threads as u64, self.max_parts)
        } else {
            1
        }
    }

    /// The kernel itself (one thread).
    pub fn kernel(&self) -> &Kernel<A> {
        &self.kernel
    }
}
