//! Price a candidate — arm or twin — from its own bytes.
//!
//! One job: turn a body ([`NativeCode`]), the loop nest it implements at a
//! site ([`LoopTrip`]s) and its [`Offer`] into a [`Price`] in core cycles,
//! comparable across candidates. How:
//!
//! 1. **Decode** the bytes reachable from the entry (x64 through iced-x86's
//!    decoder and `InstructionInfoFactory`, arm64 through weft-a64's table)
//!    into ISA-neutral facts: class, width, registers, memory, flow.
//! 2. **Structure**: basic blocks, dominators, natural loops from back
//!    edges and their nesting; irreducible flow is refused by name.
//! 3. **Trip counts**: the loops found are matched to the nest (same count,
//!    same depths, in nest order) and every block's executions per call are
//!    estimated with the rules stated in [`freq`](crate#execution-estimate).
//! 4. **Per loop**: the bound of one iteration from a port table — port
//!    pressure, issue width, loop-carried dependency chain — times its
//!    iterations ([`PriceModel::PortTable`]); a host without a table gets
//!    instructions over a fixed rate ([`PriceModel::InstructionCount`]).
//! 5. **Roofline floor**: `max(flops / peak, bytes / bandwidth)` with the
//!    bandwidth of the cache level the working set fits in; the price is
//!    the larger of the two.
//!
//! # Invariants
//!
//! - **Deterministic.** The same bytes, nest and offer give the same price,
//!   bit for bit: no clocks, no hashing with random state, every sum in a
//!   fixed order.
//! - **Conservative on what it does not know.** An instruction no decoder
//!   knows, or no class covers, is priced by the table's `unknown` row (the
//!   cost of a microcoded sequence) and counted in
//!   [`Priced::unknown_instructions`]; it is never silently free.
//! - **Named refusals.** Code whose loops do not match the nest, or that
//!   cannot be priced as a CFG (indirect jumps, calls, irreducible loops,
//!   undecodable bytes), is a [`CostError`] whose [`CostError::name`] is
//!   stable.
//! - **Data with sources.** Port tables are text files under `src/tables/`
//!   ([`table`]); every row cites its source.
//!
//! # Execution estimate
//!
//! Each entry of a loop runs the nest's `trips` iterations. Inside one
//! iteration, a two-way branch splits by the first rule that applies:
//! loop structure (exits happen once per entry), a guard around an inner
//! loop (taken as the inner trip count says), an early out before a loop
//! that runs (not taken), an all-lanes vector test
//! (its exceptional side never runs: rare lanes), a loop's way out (a tail
//! pass runs once per entry), else half and half. A chain of `k` guarded
//! remainder blocks is therefore priced at `1/2 + … + 1/2^k` per
//! iteration.
//!
//! ```
//! use weft_cost::{CostModel, TableId};
//! use weft_kernel::{Isa, NativeCode};
//!
//! // A counted loop: rcx iterations of one 256-bit add, then return.
//! let bytes = vec![
//!     0xc5, 0xf4, 0x58, 0xc0, // vaddps ymm0, ymm1, ymm0
//!     0x48, 0xff, 0xc9,       // dec rcx
//!     0x75, 0xf7,             // jne 0
//!     0xc3,                   // ret
//! ];
//! let code = NativeCode { isa: Isa::X86_64, bytes, pool: None, loops: vec![] };
//! let nest = [weft_kernel::LoopTrip { name: "i".into(), trips: 1000, depth: 0 }];
//! let model = CostModel::with_table(TableId::Zen4);
//! let offer = weft_cost::bare_offer(0, 0);
//! let priced = model.price(&code, &nest, &offer).unwrap();
//! // The add's 3-cycle chain through ymm0 bounds each iteration.
//! assert!((priced.loops[0].cycles_per_iteration - 3.0).abs() < 1e-9);
//! ```

mod cfg;
mod class;
mod decode;
mod freq;
mod model;
pub mod table;

use weft_kernel::{Host, Isa, LoopTrip, NativeCode, Offer, Price, PriceModel, Residency};

pub use class::{Class, Width};
pub use model::Bound;
pub use table::{CacheSizes, CalibrationHost, PortTable, TableId};

/// Why code could not be priced. [`CostError::name`] is stable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CostError {
    /// The loops in the bytes do not match the nest the candidate states.
    #[error("nest-mismatch: the bytes have loops {found}, the nest states {stated}")]
    NestMismatch {
        /// The loops found, as `@header:depth`.
        found: String,
        /// The nest, as `name:depth`.
        stated: String,
    },
    /// Bytes no decoder can read where an instruction must start.
    #[error("undecodable: no instruction at offset {offset:#x}")]
    Undecodable {
        /// Byte offset.
        offset: usize,
    },
    /// A jump through a register: its targets are unknown.
    #[error("indirect-branch: at offset {offset:#x}")]
    IndirectBranch {
        /// Byte offset.
        offset: usize,
    },
    /// A call: leaf bodies never call.
    #[error("call: at offset {offset:#x}")]
    Call {
        /// Byte offset.
        offset: usize,
    },
    /// A branch to outside the code.
    #[error("branch-outside-code: at offset {offset:#x} to {target:#x}")]
    BranchOutsideCode {
        /// Byte offset of the branch.
        offset: usize,
        /// Its target.
        target: usize,
    },
    /// A branch into the middle of another instruction.
    #[error("branch-into-instruction: at offset {offset:#x} to {target:#x}")]
    BranchIntoInstruction {
        /// Byte offset of the branch.
        offset: usize,
        /// Its target.
        target: usize,
    },
    /// Two decoded instructions overlap.
    #[error("overlapping-instructions: at offset {offset:#x}")]
    OverlappingInstructions {
        /// Byte offset of the second.
        offset: usize,
    },
    /// Execution runs past the last byte.
    #[error("falls-off-end: at offset {offset:#x}")]
    FallsOffEnd {
        /// The offset reached.
        offset: usize,
    },
    /// A loop with more than one entry.
    #[error("irreducible: the edge {offset:#x} -> {target:#x} enters a loop that its target does not head")]
    Irreducible {
        /// Start of the block the edge leaves.
        offset: usize,
        /// Start of the block it enters.
        target: usize,
    },
    /// No bytes.
    #[error("empty-code: nothing to price")]
    EmptyCode,
    /// Code for an ISA no decoder reads.
    #[error("unsupported-isa: no decoder for this instruction set")]
    UnsupportedIsa,
    /// Code for another ISA than the model's table.
    #[error("wrong-isa: code for {code:?}, model for {model:?}")]
    WrongIsa {
        /// The code's ISA.
        code: Isa,
        /// The model's.
        model: Isa,
    },
}

impl CostError {
    /// The error's stable name, as printed before the colon.
    pub fn name(&self) -> &'static str {
        match self {
            CostError::NestMismatch { .. } => "nest-mismatch",
            CostError::Undecodable { .. } => "undecodable",
            CostError::IndirectBranch { .. } => "indirect-branch",
            CostError::Call { .. } => "call",
            CostError::BranchOutsideCode { .. } => "branch-outside-code",
            CostError::BranchIntoInstruction { .. } => "branch-into-instruction",
            CostError::OverlappingInstructions { .. } => "overlapping-instructions",
            CostError::FallsOffEnd { .. } => "falls-off-end",
            CostError::Irreducible { .. } => "irreducible",
            CostError::EmptyCode => "empty-code",
            CostError::UnsupportedIsa => "unsupported-isa",
            CostError::WrongIsa { .. } => "wrong-isa",
        }
    }
}

/// Where a working set lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemoryLevel {
    /// Level-1 data cache.
    L1,
    /// Level 2.
    L2,
    /// Level 3.
    L3,
    /// Main memory.
    Dram,
}

/// One loop's share of a price.
#[derive(Clone, Debug, PartialEq)]
pub struct LoopPrice {
    /// The nest's name for it.
    pub name: String,
    /// Its depth.
    pub depth: u32,
    /// Byte offset of its header.
    pub head: usize,
    /// Trips per entry (from the nest).
    pub trips: u64,
    /// Entries per call.
    pub entries: f64,
    /// Iterations per call.
    pub iterations: f64,
    /// Cycles one iteration takes (its own blocks; inner loops are priced
    /// on their own).
    pub cycles_per_iteration: f64,
    /// What bounds an iteration.
    pub bound: Bound,
    /// Cycles per entry for work done once per entry (a tail pass).
    pub cycles_per_entry: f64,
    /// This loop's cycles per call: iterations × per iteration + entries ×
    /// per entry.
    pub cycles: f64,
    /// Offsets of the instructions that run every iteration, in order (for
    /// tools that price the same body another way).
    pub body: Vec<usize>,
}

/// A price and how it was made.
#[derive(Clone, Debug, PartialEq)]
pub struct Priced {
    /// The price: cycles (model or floor, whichever is larger), the floor,
    /// and the model that made it.
    pub price: Price,
    /// The model's cycles before the floor.
    pub model_cycles: f64,
    /// Every loop, in nest order.
    pub loops: Vec<LoopPrice>,
    /// Cycles of the code outside every loop.
    pub outside_loops: f64,
    /// Instructions executed per call (estimated).
    pub instructions: f64,
    /// Reachable instructions no decoder or class knows (priced by the
    /// table's conservative row).
    pub unknown_instructions: u32,
    /// Blocks priced as never run by the rare-lanes rule.
    pub rare_blocks: u32,
    /// The level the working set lives in (for the floor).
    pub level: MemoryLevel,
    /// The table used, if any.
    pub table: Option<String>,
}

impl Priced {
    /// A bare `price` with no breakdown (no loops, no instruction counts),
    /// for pricers that know only a total.
    pub fn total(price: Price) -> Priced {
        Priced {
            price,
            model_cycles: price.cycles,
            loops: Vec::new(),
            outside_loops: price.cycles,
            instructions: 0.0,
            unknown_instructions: 0,
            rare_blocks: 0,
            level: MemoryLevel::L1,
            table: None,
        }
    }
}

/// The roofline of one host: peak arithmetic and bandwidth per level.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Roofline {
    /// Floating-point operations per cycle (f32 FMA peak of one core).
    pub peak_flops: f64,
    /// Bytes per cycle from L1, L2, L3, DRAM.
    pub bandwidth: [f64; 4],
    /// Cache sizes deciding the level.
    pub caches: CacheSizes,
}

impl Roofline {
    /// The level a working set of `bytes` fits in.
    pub fn level(&self, bytes: u64) -> MemoryLevel {
        if bytes <= self.caches.l1d {
            MemoryLevel::L1
        } else if bytes <= self.caches.l2 {
            MemoryLevel::L2
        } else if bytes <= self.caches.l3 {
            MemoryLevel::L3
        } else {
            MemoryLevel::Dram
        }
    }

    /// `max(flops / peak, bytes / bandwidth)` in cycles, with the working
    /// set taken as the bytes the offer moves.
    pub fn floor(&self, flops: u64, bytes: u64) -> (f64, MemoryLevel) {
        self.floor_at(flops, bytes, Residency::Cached)
    }

    /// [`Roofline::floor`] for data at `residency`: streamed data comes
    /// from main memory whatever its size.
    pub fn floor_at(&self, flops: u64, bytes: u64, residency: Residency) -> (f64, MemoryLevel) {
        let level = match residency {
            Residency::Cached => self.level(bytes),
            Residency::Streamed => MemoryLevel::Dram,
        };
        let bw = self.bandwidth[level as usize];
        let compute = flops as f64 / self.peak_flops;
        let memory = bytes as f64 / bw;
        (compute.max(memory), level)
    }
}

/// The rate the instruction-count model assumes when no table exists:
/// two instructions per cycle, a typical sustained rate of out-of-order
/// cores on vector code. Only the ranking of candidates on one host rests
/// on it.
pub const FALLBACK_INSTRUCTIONS_PER_CYCLE: f64 = 2.0;

/// The decoded body, its CFG and its instructions' costs under the
/// model's table: all that depends only on the bytes.
#[derive(Debug)]
struct Analysis {
    decoded: decode::Decoded,
    cfg: cfg::Cfg,
    shape: freq::Shape,
    costs: Vec<model::Cost>,
    chains: model::ChainMemo,
}

/// Bodies recently analysed, by their bytes. A planner prices the same
/// bytes at many sites (a body does not depend on the geometry), so only
/// the first price of a body decodes it. Holding at most
/// [`ANALYSIS_CACHE`] entries; a hit compares the bytes, not just a hash.
#[derive(Debug, Default)]
struct AnalysisCache {
    entries: std::sync::Mutex<Vec<CacheEntry>>,
}

/// One cached body: its ISA and bytes (compared on a hit) and analysis.
type CacheEntry = (Isa, Vec<u8>, std::sync::Arc<Analysis>);

/// Bodies an analysis cache holds.
const ANALYSIS_CACHE: usize = 64;

/// A cost model for one host: a port table (or the instruction-count
/// fallback) and a roofline.
#[derive(Clone, Debug)]
pub struct CostModel {
    isa: Isa,
    table: Option<&'static PortTable>,
    roofline: Roofline,
    cache: std::sync::Arc<AnalysisCache>,
}

impl CostModel {
    /// The model for `host`: the shipped table whose `match` line fits it,
    /// with the host's own cache sizes where it reports them; without a
    /// table, instruction counts and a generic roofline.
    pub fn for_host(host: &Host) -> CostModel {
        let mut model = match TableId::for_host(host) {
            Some(id) => CostModel::with_table(id),
            None => CostModel::instruction_count(host.isa),
        };
        model.set_caches_from(host);
        model
    }

    /// Take the cache sizes `host` reports over the table's (a level it
    /// does not report keeps the table's size).
    pub fn set_caches_from(&mut self, host: &Host) {
        let c = &mut self.roofline.caches;
        if let Some(l1) = host.caches.l1d {
            c.l1d = u64::from(l1);
        }
        if let Some(l2) = host.caches.l2 {
            c.l2 = u64::from(l2);
        }
        if let Some(l3) = host.caches.l3 {
            c.l3 = u64::from(l3);
        }
    }

    /// The model of a shipped table, with the table's cache sizes (for
    /// tests, and for pricing for another host).
    pub fn with_table(id: TableId) -> CostModel {
        CostModel::with_port_table(id.table())
    }

    /// The model of any parsed table.
    pub fn with_port_table(table: &'static PortTable) -> CostModel {
        CostModel {
            isa: table.isa,
            table: Some(table),
            roofline: Roofline {
                peak_flops: table.peak_flops_f32,
                bandwidth: table.bandwidth,
                caches: table.caches,
            },
            cache: Default::default(),
        }
    }

    /// The fallback for hosts without a table: instructions executed over
    /// [`FALLBACK_INSTRUCTIONS_PER_CYCLE`], and a generic roofline (16 f32
    /// flops per cycle; 32, 16, 8, 4 bytes per cycle from L1 to DRAM;
    /// 32 KiB, 1 MiB, 8 MiB caches) — assumptions, stated, not measured.
    pub fn instruction_count(isa: Isa) -> CostModel {
        CostModel {
            isa,
            table: None,
            roofline: Roofline {
                peak_flops: 16.0,
                bandwidth: [32.0, 16.0, 8.0, 4.0],
                caches: CacheSizes {
                    l1d: 32 << 10,
                    l2: 1 << 20,
                    l3: 8 << 20,
                },
            },
            cache: Default::default(),
        }
    }

    /// This model with other cache sizes.
    pub fn with_caches(mut self, caches: CacheSizes) -> CostModel {
        self.roofline.caches = caches;
        self
    }

    /// The model's port table, if it has one.
    pub fn table(&self) -> Option<&'static PortTable> {
        self.table
    }

    /// The roofline.
    pub fn roofline(&self) -> &Roofline {
        &self.roofline
    }

    /// Which model prices.
    pub fn model(&self) -> PriceModel {
        if self.table.is_some() {
            PriceModel::PortTable
        } else {
            PriceModel::InstructionCount
        }
    }

    /// Price `code` at the geometry `nest` and `offer` describe, its data
    /// cached. Deterministic; refuses by name when the code cannot be
    /// priced or its loops do not match `nest`.
    pub fn price(
        &self,
        code: &NativeCode,
        nest: &[LoopTrip],
        offer: &Offer,
    ) -> Result<Priced, CostError> {
        self.price_at(code, nest, offer, Residency::Cached)
    }

    /// [`CostModel::price`] with the site's data at `residency` (which
    /// moves only the roofline floor: the loops cost what they cost).
    pub fn price_at(
        &self,
        code: &NativeCode,
        nest: &[LoopTrip],
        offer: &Offer,
        residency: Residency,
    ) -> Result<Priced, CostError> {
        if code.isa != self.isa {
            return Err(CostError::WrongIsa {
                code: code.isa,
                model: self.isa,
            });
        }
        let analysis = self.analyse(code)?;
        let (decoded, cfg) = (&analysis.decoded, &analysis.cfg);
        let trips = freq::match_nest(cfg, nest)?;
        let est = freq::estimate(&analysis.shape, cfg, &trips);
        let region = |r: Option<usize>| match self.table {
            Some(t) => model::region_cost(
                code.isa,
                t,
                decoded,
                &analysis.costs,
                &analysis.chains,
                cfg,
                &est,
                r,
            ),
            None => model::region_count(decoded, cfg, &est, r, FALLBACK_INSTRUCTIONS_PER_CYCLE),
        };
        let outside = region(None);
        let mut total = outside.per_iteration;
        let mut instructions = outside.insts_per_iteration;
        let mut loops = Vec::with_capacity(cfg.loops.len());
        for (l, lp) in cfg.loops.iter().enumerate() {
            let c = region(Some(l));
            let cycles = est.iterations[l] * c.per_iteration + est.entries[l] * c.per_entry;
            total += cycles;
            instructions +=
                est.iterations[l] * c.insts_per_iteration + est.entries[l] * c.insts_per_entry;
            loops.push(LoopPrice {
                name: nest[l].name.clone(),
                depth: lp.depth,
                head: cfg.blocks[lp.header].offset as usize,
                trips: trips[l],
                entries: est.entries[l],
                iterations: est.iterations[l],
                cycles_per_iteration: c.per_iteration,
                bound: c.bound,
                cycles_per_entry: c.per_entry,
                cycles,
                body: c.body,
            });
        }
        let (floor, level) = self
            .roofline
            .floor_at(offer.flops, offer.bytes_moved, residency);
        Ok(Priced {
            price: Price {
                cycles: total.max(floor),
                floor,
                model: self.model(),
            },
            model_cycles: total,
            loops,
            outside_loops: outside.per_iteration,
            instructions,
            unknown_instructions: decoded.unknown
                + decoded
                    .insts
                    .iter()
                    .filter(|i| i.known && i.class == Class::Unknown)
                    .count() as u32,
            rare_blocks: est.rare_blocks,
            level,
            table: self.table.map(|t| t.id.clone()),
        })
    }
}

impl CostModel {
    /// The analysis of `code`'s bytes, from the cache or made now.
    fn analyse(&self, code: &NativeCode) -> Result<std::sync::Arc<Analysis>, CostError> {
        let lookup = |entries: &Vec<CacheEntry>| {
            entries
                .iter()
                .find(|(isa, bytes, _)| *isa == code.isa && *bytes == code.bytes)
                .map(|(_, _, a)| std::sync::Arc::clone(a))
        };
        if let Ok(entries) = self.cache.entries.lock() {
            if let Some(a) = lookup(&entries) {
                return Ok(a);
            }
        }
        let decoded = decode::decode(code.isa, &code.bytes)?;
        let cfg = cfg::Cfg::build(&decoded)?;
        let shape = freq::Shape::of(&decoded, &cfg);
        let costs = match self.table {
            Some(t) => model::costs(t, &decoded),
            None => Vec::new(),
        };
        let a = std::sync::Arc::new(Analysis {
            decoded,
            cfg,
            shape,
            costs,
            chains: Default::default(),
        });
        if let Ok(mut entries) = self.cache.entries.lock() {
            if entries.len() >= ANALYSIS_CACHE {
                entries.remove(0);
            }
            entries.push((code.isa, code.bytes.clone(), std::sync::Arc::clone(&a)));
        }
        Ok(a)
    }
}

/// One reachable instruction as the cost model sees it (for tools and
/// tests: which class and width each instruction of a body was given).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassifiedInstruction {
    /// Byte offset.
    pub offset: usize,
    /// Its class ([`Class::Unknown`] when no class covers it).
    pub class: Class,
    /// Its width.
    pub width: Width,
    /// Whether a decoder knew it.
    pub known: bool,
}

/// The class and width of every instruction reachable in `code`, in
/// address order.
pub fn classify(code: &NativeCode) -> Result<Vec<ClassifiedInstruction>, CostError> {
    let decoded = decode::decode(code.isa, &code.bytes)?;
    Ok(decoded
        .insts
        .iter()
        .map(|i| ClassifiedInstruction {
            offset: i.offset as usize,
            class: i.class,
            width: i.width,
            known: i.known,
        })
        .collect())
}

/// An offer that carries only the roofline's work figures (for tests and
/// tools pricing code outside a family).
pub fn bare_offer(flops: u64, bytes_moved: u64) -> Offer {
    Offer {
        contract: weft_kernel::Contract {
            family: String::new(),
            geometry: weft_kernel::Geometry::new(),
            args: String::new(),
            arithmetic: weft_kernel::ArithmeticContract {
                accumulator_lanes: 1,
                reduction: weft_kernel::ReductionOrder::None,
                fma: weft_kernel::FmaUse::Never,
                nan: weft_kernel::NanRule::ByBits,
                notes: String::new(),
            },
            aliasing: weft_kernel::Aliasing::disjoint(),
        },
        packed: Vec::new(),
        views: None,
        loops: Vec::new(),
        flops,
        bytes_moved,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_data_is_floored_at_main_memory_whatever_its_size() {
        let r = *CostModel::instruction_count(Isa::X86_64).roofline();
        let small = 4 << 10;
        assert_eq!(r.floor(0, small).1, MemoryLevel::L1);
        let (cached, _) = r.floor_at(0, small, Residency::Cached);
        let (streamed, level) = r.floor_at(0, small, Residency::Streamed);
        assert_eq!(level, MemoryLevel::Dram);
        assert_eq!(
            streamed,
            small as f64 / r.bandwidth[MemoryLevel::Dram as usize]
        );
        assert!(streamed > cached);
    }
}
