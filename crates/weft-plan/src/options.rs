//! How a planner compiles: its options, where its cache lives, and the
//! pricer it asks.

use weft_cost::{CostError, Priced};
use weft_kernel::{LoopTrip, NativeCode, Offer, Residency};

use crate::mode::EmitMode;
use crate::race::RaceBudget;
use crate::PlanError;

/// Prices a body from its bytes at an offer's geometry (weft-cost's
/// `CostModel` is the engine's; tests may bring their own, and
/// [`Priced::total`] wraps a bare price). The breakdown is kept in the plan.
pub trait Pricer: Send + Sync {
    /// The price of `code`, whose loops are `nest`, at `offer`'s geometry
    /// with the site's data at `residency`; deterministic (same inputs,
    /// same price), so exact ties are well defined.
    fn price(
        &self,
        code: &NativeCode,
        nest: &[LoopTrip],
        offer: &Offer,
        residency: Residency,
    ) -> Result<Priced, CostError>;
}

/// weft-cost's model is the planner's pricer: decode, loops matched to the
/// nest, port table (or instruction counts where the host has none), and the
/// roofline floor. Its refusals are typed ([`CostError`]).
impl Pricer for weft_cost::CostModel {
    fn price(
        &self,
        code: &NativeCode,
        nest: &[LoopTrip],
        offer: &Offer,
        residency: Residency,
    ) -> Result<Priced, CostError> {
        weft_cost::CostModel::price_at(self, code, nest, offer, residency)
    }
}

/// Where verdicts and races are kept between processes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CacheLocation {
    /// The user's cache directory ([`crate::PlanCache::default_path`]).
    #[default]
    Default,
    /// This file.
    File(std::path::PathBuf),
    /// Nowhere: every process validates and races anew.
    InMemory,
}

/// How a planner compiles.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// `WEFT_NATIVE_EMIT`: on, off (kill switch) or strict.
    pub mode: EmitMode,
    /// Compile only from saved verdicts and races: validate and race
    /// nothing new; a twin without a saved verdict is refused
    /// (`no-saved-verdict`), a race without a saved result keeps the tie rule.
    pub saved_only: bool,
    /// Where the cache lives.
    pub cache: CacheLocation,
    /// Whether prices too close to call are raced (else the tie rule keeps
    /// the earlier candidate).
    pub racing: bool,
    /// How long a race may run.
    pub race_budget: RaceBudget,
    /// Relative price gap below which the model cannot separate two
    /// candidates.
    pub separation: f64,
    /// Seed of the validation cases and race inputs.
    pub seed: u64,
    /// Sites whose chosen body is priced below this many cycles run on the
    /// calling thread: splitting them costs more than it saves. The
    /// default, 15,000, splits a decode step's 576- and 192-row matrix
    /// products (priced 59,238 and 19,814 cycles at the DRAM floor, and
    /// slower than that: one core reads less than half the memory two
    /// do); at 60,000 they ran on one thread and a 2-thread step was 11%
    /// slower (SmolLM2-135M, family 6 model 167, 8 interleaved runs).
    pub split_min_cycles: f64,
    /// A split call is cut into at most one part per this many cycles of
    /// its chosen body's price (never fewer parts than threads, never more
    /// than [`PARTS_PER_THREAD`](crate::exec::PARTS_PER_THREAD) per
    /// thread, a whole number per thread; an unpriced body one part per
    /// thread): a part pays a claim,
    /// a call, the body's own per-call setup (`q8_0.matmul` builds its
    /// vectors' scratch table in every part, attention its frame and
    /// constants) and the cache lines another core wrote. The default,
    /// 1,000,000 cycles, cuts a 64-token prompt chunk's matrix products
    /// and attention into one part per thread at 2 threads instead of
    /// four (their 2-thread speedups 1.30 → 1.7 for the K/V products, 1.66
    /// → 1.86 for attention, SmolLM2-135M, family 6 model 167, `cargo
    /// xtask bench prefill`); decode's split sites are priced below it and
    /// run one part per thread too, with no loss beside a busy neighbour
    /// (`cargo xtask bench decode --neighbour`: 1.00 either way, the
    /// executor's straggle score covers what smaller parts used to).
    pub part_min_cycles: f64,
    /// Whether built bodies are saved in (and read from) the cache, for
    /// this same program only: a warm compile then skips Cranelift and the
    /// emitters. Verdicts and races are cached either way.
    pub cache_bodies: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            mode: EmitMode::On,
            saved_only: false,
            cache: CacheLocation::Default,
            racing: true,
            race_budget: RaceBudget::default(),
            separation: 0.03,
            seed: 0x5eed_c0de,
            split_min_cycles: 15_000.0,
            part_min_cycles: 1_000_000.0,
            cache_bodies: true,
        }
    }
}

impl Options {
    /// Defaults, with the mode read from `WEFT_NATIVE_EMIT` (a bad value is
    /// an error naming it).
    pub fn from_env() -> Result<Options, PlanError> {
        let mode = EmitMode::from_env().map_err(|e| PlanError::BadMode {
            message: e.to_string(),
        })?;
        Ok(Options {
            mode,
            ..Options::default()
        })
    }
}
