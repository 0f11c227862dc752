//! The seam between kernel families, the planner and the emitters.
//!
//! Everything a kernel is, in words both sides agree on: a [`Family`] and a
//! [`Geometry`] name a site; a [`Contract`] fixes what the kernel computes
//! and how it rounds; an [`Offer`] is one candidate's whole proposal
//! (contract, packed operands, member views, loop nest); [`NativeCode`] is
//! the body as bytes; a [`Refusal`] is a typed, named "no". An [`Arm`] makes
//! offers and bodies through Cranelift; a [`Twin`] takes its arm's offer and
//! replaces only the body. A family registers a [`FamilyEntry`]: its arms,
//! each an [`ArmEntry`] holding that arm's twins, its [`TwinCheck`] and its
//! [`Workbench`], so a twin belongs to its arm by registration, not by name.
//!
//! Invariants this crate states and the rest of the engine keeps:
//!
//! - **The leaf ABI.** Every body, arm or twin, is `extern "C" fn(*const A)`
//!   where `A` is the `#[repr(C)]` argument struct its contract names. A body
//!   never allocates, never unwinds, never calls back.
//! - **A twin never changes the offer.** It is handed the arm's offer and
//!   must round exactly as the arm's [`ArithmeticContract`] says.
//! - **Calling placed code happens in one place:** [`Kernel::call`]. The
//!   unsafe promise (these bytes honour the leaf ABI for `A`) is made once,
//!   when the [`Kernel`] is built.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use weft_host::{Feature, Features, Host, Isa};
pub use weft_jitmem::PlacedCode;

/// A kernel family: the name every arm and twin of one computation shares
/// ("q8_0.matvec", "elementwise.exp", "attention.fused").
///
/// Families are open: a new one joins by using a new name, the planner never
/// enumerates them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Family(pub &'static str);

impl Family {
    /// The family's name.
    pub fn name(self) -> &'static str {
        self.0
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// The shape of one site: named extents such as `rows`, `cols`, `len`.
///
/// Dimensions are kept sorted by name, so two geometries with the same
/// extents compare, hash and serialise identically whatever order they were
/// built in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Geometry {
    dims: Vec<(String, u64)>,
}

impl Geometry {
    /// An empty geometry.
    pub fn new() -> Self {
        Self::default()
    }

    /// This geometry with `name` set to `extent` (replacing an earlier value).
    pub fn with(mut self, name: &str, extent: u64) -> Self {
        self.set(name, extent);
        self
    }

    /// Set `name` to `extent`, replacing an earlier value.
    pub fn set(&mut self, name: &str, extent: u64) {
        match self.dims.binary_search_by(|(n, _)| n.as_str().cmp(name)) {
            Ok(i) => self.dims[i].1 = extent,
            Err(i) => self.dims.insert(i, (name.to_owned(), extent)),
        }
    }

    /// The extent called `name`, if the geometry has it.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.dims
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| self.dims[i].1)
    }

    /// The extent called `name`, or a [`Refusal::MissingDimension`].
    pub fn require(&self, name: &'static str) -> Result<u64, Refusal> {
        self.get(name).ok_or_else(|| Refusal::MissingDimension {
            dimension: name.to_owned(),
        })
    }

    /// Every `(name, extent)` pair, sorted by name.
    pub fn dims(&self) -> impl Iterator<Item = (&str, u64)> {
        self.dims.iter().map(|(n, e)| (n.as_str(), *e))
    }
}

impl fmt::Display for Geometry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (n, e)) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{n}={e}")?;
        }
        Ok(())
    }
}

/// How the values of a reduction are combined, which fixes its rounding.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReductionOrder {
    /// No floating-point reduction happens (elementwise work, exact integer sums).
    None,
    /// Left to right, one accumulator.
    Sequential,
    /// `lanes` accumulators, element `i` going to lane `i % lanes`, lanes then
    /// combined in the order the text describes.
    Strided {
        /// Number of accumulator lanes.
        lanes: u32,
        /// How the lanes are folded at the end, in words (e.g. "pairwise: (0+1)+(2+3)").
        fold: String,
    },
    /// Any other order, spelt out.
    Described(String),
}

/// Where fused multiply-add is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FmaUse {
    /// Never: every multiply and add rounds separately.
    Never,
    /// Exactly where the contract's text says; a twin must fuse the same operations.
    AsSpecified,
}

/// How outputs are compared when a twin is validated against its arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NanRule {
    /// NaNs compare by class (any NaN equals any NaN); everything else by bits.
    ByClass,
    /// Every output compares by bits, NaN payloads included.
    ByBits,
}

/// The arithmetic half of a contract: everything that decides rounding.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ArithmeticContract {
    /// Number of f32 accumulator lanes the arm uses (1 for elementwise kernels).
    pub accumulator_lanes: u32,
    /// The order of every floating-point reduction.
    pub reduction: ReductionOrder,
    /// Where FMA is used.
    pub fma: FmaUse,
    /// How NaN outputs compare.
    pub nan: NanRule,
    /// Anything else a twin must follow to round as the arm does, in words.
    pub notes: String,
}

/// What a kernel computes at one site, and how.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Contract {
    /// The family's name.
    pub family: String,
    /// The site's geometry.
    pub geometry: Geometry,
    /// The name of the `#[repr(C)]` argument struct the body takes.
    pub args: String,
    /// How it rounds.
    pub arithmetic: ArithmeticContract,
    /// Which operands may share memory; every other pair is disjoint.
    pub aliasing: Aliasing,
}

/// Which operands of a kernel may be the same memory.
///
/// Each declared pair may be *equal* (same start, same extent: the kernel
/// runs in place); any other overlap stays forbidden. A contract that
/// declares nothing means every operand is disjoint from every other, and
/// the validator never calls such a kernel in place. A declared pair is a
/// promise the validator checks: an in-place call must give the bits of a
/// call with separate buffers, for the arm and for every twin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Aliasing {
    equal: Vec<(String, String)>,
}

impl Aliasing {
    /// Every operand disjoint from every other (the default).
    pub fn disjoint() -> Self {
        Self::default()
    }

    /// These rules, and `a` may equal `b` (order does not matter).
    pub fn may_equal(mut self, a: &str, b: &str) -> Self {
        if !self.allows_equal(a, b) {
            let pair = if a <= b { (a, b) } else { (b, a) };
            self.equal.push((pair.0.to_owned(), pair.1.to_owned()));
            self.equal.sort();
        }
        self
    }

    /// Whether `a` and `b` may be the same memory.
    pub fn allows_equal(&self, a: &str, b: &str) -> bool {
        self.equal
            .iter()
            .any(|(x, y)| (x == a && y == b) || (x == b && y == a))
    }

    /// The pairs that may be equal, each with its names in order.
    pub fn equal_pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.equal.iter().map(|(a, b)| (a.as_str(), b.as_str()))
    }

    /// Whether no pair may be equal.
    pub fn is_disjoint(&self) -> bool {
        self.equal.is_empty()
    }
}

/// An operand repacked at plan time into the layout an arm wants; shared by
/// its twins, who read the same bytes.
#[derive(Clone, Debug)]
pub struct PackedOperand {
    /// Which argument this replaces ("weights").
    pub name: &'static str,
    /// The layout, named so that a twin can check it knows it ("q8_0.rows2-interleaved").
    pub layout: &'static str,
    /// The repacked bytes.
    pub bytes: Arc<[u8]>,
}

/// How a site's work splits across threads: `extent` units along `axis`,
/// cut only at multiples of `granule`. Every split must give results
/// bit-identical to the unsplit call.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MemberViews {
    /// The geometry dimension that is split ("rows").
    pub axis: String,
    /// Its extent at this site.
    pub extent: u64,
    /// Cuts fall on multiples of this.
    pub granule: u64,
}

impl MemberViews {
    /// Split the axis into at most `parts` contiguous ranges, each a multiple
    /// of the granule except possibly the last; empty ranges are dropped.
    pub fn split(&self, parts: u64) -> Vec<std::ops::Range<u64>> {
        let granule = self.granule.max(1);
        let units = self.extent.div_ceil(granule);
        let parts = parts.clamp(1, units.max(1));
        let (base, extra) = (units / parts, units % parts);
        let mut out = Vec::with_capacity(parts as usize);
        let mut start = 0u64;
        for p in 0..parts {
            let n = base + u64::from(p < extra);
            let end = (start + n * granule).min(self.extent);
            if end > start {
                out.push(start..end);
            }
            start = end;
        }
        out
    }
}

/// One loop of a candidate's loop nest, outermost first: its name and its
/// trip count at the offer's geometry. The cost model matches these against
/// the loops it finds in the bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LoopTrip {
    /// What the loop walks ("rows", "blocks", "tail").
    pub name: String,
    /// Iterations per entry of the loop at this geometry.
    pub trips: u64,
    /// Nesting depth, 0 for outermost.
    pub depth: u32,
}

/// A candidate's whole proposal for one site.
///
/// An arm makes it; a twin receives it unchanged and replaces only the body.
#[derive(Clone, Debug)]
pub struct Offer {
    /// What is computed and how it rounds.
    pub contract: Contract,
    /// Operands repacked for this candidate (and its twins).
    pub packed: Vec<PackedOperand>,
    /// How the site splits across threads.
    pub views: Option<MemberViews>,
    /// The loop nest the body implements, with trip counts at the geometry.
    pub loops: Vec<LoopTrip>,
    /// Work done, for the roofline: floating-point operations.
    pub flops: u64,
    /// Work done, for the roofline: bytes read and written.
    pub bytes_moved: u64,
}

/// Which model produced a [`Price`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PriceModel {
    /// Per-port pressure from a host table, dependency chains and issue width.
    PortTable,
    /// Instruction counts (no table for this host).
    InstructionCount,
    /// The roofline floor alone.
    Roofline,
}

/// A candidate's cost in core cycles at its site's geometry.
///
/// Prices are deterministic: the same bytes at the same geometry always give
/// the same price, so an exact tie is well defined.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// Predicted core cycles.
    pub cycles: f64,
    /// The roofline floor in cycles, included in `cycles`' max.
    pub floor: f64,
    /// The model that made it.
    pub model: PriceModel,
}

/// A loop the emitter knows it wrote: byte offsets of its head and of its
/// back edge, and which [`LoopTrip`] of the offer it implements.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopAnnotation {
    /// Name matching a [`LoopTrip::name`].
    pub name: String,
    /// Offset of the loop's first instruction.
    pub head: usize,
    /// Offset of the backward branch.
    pub back_edge: usize,
}

/// A body as machine code, before it is placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeCode {
    /// The ISA the bytes are for.
    pub isa: Isa,
    /// The bytes; the entry point is offset 0.
    pub bytes: Vec<u8>,
    /// Where constant data begins, if the body carries a pool after its
    /// instructions (the bytes from here on are data, never executed). The
    /// listing of any body is derived from its bytes, in one format, by
    /// `weft_managed::listing`.
    pub pool: Option<usize>,
    /// Loops the emitter annotated (may be empty; the cost model finds loops itself).
    pub loops: Vec<LoopAnnotation>,
}

impl NativeCode {
    /// Place these bytes as executable memory through weft-jitmem.
    pub fn place(&self) -> Result<Arc<PlacedCode>, Refusal> {
        weft_jitmem::place(&self.bytes)
            .map(Arc::new)
            .map_err(|e| match e {
                // A host that cannot run placed code at all is a probe failure.
                weft_jitmem::PlaceError::Probe(p) => Refusal::ProbeFailed {
                    cause: p.to_string(),
                },
                e => Refusal::PlaceFailed {
                    cause: e.to_string(),
                },
            })
    }
}

/// A typed, named "no": why a candidate cannot run at a site.
///
/// [`Refusal::name`] gives a stable identifier to search for.
#[derive(Clone, Debug, PartialEq, thiserror::Error, Serialize, Deserialize)]
pub enum Refusal {
    /// The host lacks a CPU feature the candidate needs.
    #[error("missing-feature: the host lacks {feature}")]
    MissingFeature {
        /// The feature's name.
        feature: String,
    },
    /// The candidate is for another ISA.
    #[error("wrong-isa: candidate is for {wanted:?}, host is {host:?}")]
    WrongIsa {
        /// The ISA the candidate emits.
        wanted: Isa,
        /// The host's ISA.
        host: Isa,
    },
    /// The geometry is outside what the contract or this candidate supports.
    #[error("unsupported-geometry: {reason}")]
    UnsupportedGeometry {
        /// What does not fit.
        reason: String,
    },
    /// A dimension the family needs is absent from the geometry.
    #[error("missing-dimension: the geometry has no `{dimension}`")]
    MissingDimension {
        /// The dimension's name.
        dimension: String,
    },
    /// An operand buffer is too short, misaligned or of the wrong layout.
    #[error("bad-operand: {operand}: {reason}")]
    BadOperand {
        /// Which operand.
        operand: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The twin's output differs from its arm's.
    #[error(
        "mismatch: at index {index}, input {input}: arm {arm_bits:#010x}, twin {twin_bits:#010x}"
    )]
    Mismatch {
        /// First differing output index.
        index: usize,
        /// The input(s) that produced it, rendered.
        input: String,
        /// The arm's output bits.
        arm_bits: u64,
        /// The twin's output bits.
        twin_bits: u64,
    },
    /// A kernel called in place (operands the contract lets be equal) gave
    /// other bits than the same call with separate buffers.
    #[error(
        "in-place-mismatch: {kernel} with {operands} equal, at index {index}, input {input}: \
         separate buffers {separate_bits:#010x}, in place {in_place_bits:#010x}"
    )]
    InPlaceMismatch {
        /// The candidate that broke the aliasing promise (arm or twin).
        kernel: String,
        /// The operands that shared memory, as `a = b`.
        operands: String,
        /// First differing output index.
        index: usize,
        /// The input(s) that produced it, rendered.
        input: String,
        /// The word with separate buffers (the arm's, which is the truth).
        separate_bits: u64,
        /// The word in place.
        in_place_bits: u64,
    },
    /// The contract lets two operands be equal, but the family's validation
    /// cannot run them so: the promise would go unchecked.
    #[error("aliasing-unvalidated: the contract lets `{a}` equal `{b}`, the validation cannot run them in place")]
    AliasingUnvalidated {
        /// One operand.
        a: String,
        /// The other.
        b: String,
    },
    /// The executable-memory probe failed on this host.
    #[error("probe-failed: {cause}")]
    ProbeFailed {
        /// The probe's named error.
        cause: String,
    },
    /// Placing code failed.
    #[error("place-failed: {cause}")]
    PlaceFailed {
        /// The placement error.
        cause: String,
    },
    /// The emitter could not produce the body.
    #[error("emit-error: {message}")]
    EmitError {
        /// What went wrong.
        message: String,
    },
    /// Cranelift could not compile the arm (including a contained panic).
    #[error("compile-error: {message}")]
    CompileError {
        /// What went wrong.
        message: String,
    },
    /// The packed operand layout is not one this candidate reads.
    #[error("unknown-layout: {layout}")]
    UnknownLayout {
        /// The layout's name.
        layout: String,
    },
    /// Native emission is switched off (`WEFT_NATIVE_EMIT=off`).
    #[error("native-emit-off: twins are switched off")]
    NativeEmitOff,
    /// A saved-results-only compile found no saved verdict for this twin,
    /// and may not validate anything new.
    #[error("no-saved-verdict: {candidate} has no saved validation verdict for this host")]
    NoSavedVerdict {
        /// The twin's candidate name.
        candidate: String,
    },
    /// The family registered no twin checker, so no twin of it can be validated.
    #[error("no-checker: family {family} cannot validate twins")]
    NoChecker {
        /// The family's name.
        family: String,
    },
    /// Two bodies were to race, but the arm they serve registered no bench.
    #[error("no-bench: {arm} registered no bench, so its bodies cannot race")]
    NoBench {
        /// The arm.
        arm: String,
    },
    /// Two bodies were to race that take different operands (argument
    /// struct or packed layouts), so no one bench can run both.
    #[error("race-operands-differ: {a} and {b} take different operands")]
    RaceOperandsDiffer {
        /// One body.
        a: String,
        /// The other.
        b: String,
    },
}

impl Refusal {
    /// The refusal's stable name, as printed before the colon.
    pub fn name(&self) -> &'static str {
        match self {
            Refusal::MissingFeature { .. } => "missing-feature",
            Refusal::WrongIsa { .. } => "wrong-isa",
            Refusal::UnsupportedGeometry { .. } => "unsupported-geometry",
            Refusal::MissingDimension { .. } => "missing-dimension",
            Refusal::BadOperand { .. } => "bad-operand",
            Refusal::Mismatch { .. } => "mismatch",
            Refusal::InPlaceMismatch { .. } => "in-place-mismatch",
            Refusal::AliasingUnvalidated { .. } => "aliasing-unvalidated",
            Refusal::ProbeFailed { .. } => "probe-failed",
            Refusal::PlaceFailed { .. } => "place-failed",
            Refusal::EmitError { .. } => "emit-error",
            Refusal::CompileError { .. } => "compile-error",
            Refusal::UnknownLayout { .. } => "unknown-layout",
            Refusal::NativeEmitOff => "native-emit-off",
            Refusal::NoSavedVerdict { .. } => "no-saved-verdict",
            Refusal::NoChecker { .. } => "no-checker",
            Refusal::NoBench { .. } => "no-bench",
            Refusal::RaceOperandsDiffer { .. } => "race-operands-differ",
        }
    }
}

impl Refusal {
    /// Whether this refusal is a fact about a body's bytes (its outputs
    /// differ from the arm's, in place or not, or it could not be emitted)
    /// rather than about this host or mode. Only these are saved as
    /// verdicts, and strict mode stops on exactly these.
    pub fn is_fault_of_the_bytes(&self) -> bool {
        matches!(
            self,
            Refusal::Mismatch { .. } | Refusal::InPlaceMismatch { .. } | Refusal::EmitError { .. }
        )
    }
}

/// Check that `host` has every feature in `needed`, naming the first one missing.
pub fn require_features(host: &Host, needed: &[Feature]) -> Result<(), Refusal> {
    match needed.iter().find(|f| !host.has(**f)) {
        Some(f) => Err(Refusal::MissingFeature {
            feature: f.name().to_owned(),
        }),
        None => Ok(()),
    }
}

/// The leaf ABI: one pointer to the argument struct.
pub type LeafFn<A> = unsafe extern "C" fn(*const A);

/// A placed body callable through the leaf ABI with arguments of type `A`.
///
/// Holding the placed region alive for as long as the kernel exists is what
/// keeps the function pointer valid.
pub struct Kernel<A> {
    code: Arc<PlacedCode>,
    entry: LeafFn<A>,
    _args: PhantomData<fn(&A)>,
}

impl<A> Kernel<A> {
    /// Wrap placed code whose entry is at `entry_offset`.
    ///
    /// # Safety
    ///
    /// The bytes at `entry_offset` must be a function for this host that
    /// honours the leaf ABI for `A`: it reads through the pointer only what
    /// `A`'s contract allows (and the memory `A` points to), writes only the
    /// outputs `A` names, returns normally, and never unwinds. Bodies emitted
    /// by Weft's arms and twins for `A`'s contract promise exactly this.
    pub unsafe fn from_placed(code: Arc<PlacedCode>, entry_offset: usize) -> Result<Self, Refusal> {
        if entry_offset >= code.len() {
            return Err(Refusal::EmitError {
                message: format!(
                    "entry offset {entry_offset} outside placed code of {} bytes",
                    code.len()
                ),
            });
        }
        // SAFETY: the offset is inside the placed region (checked above) and
        // the caller promises a leaf-ABI function for `A` starts there.
        let entry =
            unsafe { std::mem::transmute::<*const u8, LeafFn<A>>(code.as_ptr().add(entry_offset)) };
        Ok(Self {
            code,
            entry,
            _args: PhantomData,
        })
    }

    /// Place `code` and wrap its entry at offset 0, refusing code for
    /// another ISA by name.
    ///
    /// # Safety
    ///
    /// As for [`Kernel::from_placed`]: `code` must be a leaf-ABI body for `A`.
    pub unsafe fn from_native(code: &NativeCode) -> Result<Self, Refusal> {
        let host = Isa::of_target();
        if code.isa != host {
            return Err(Refusal::WrongIsa {
                wanted: code.isa,
                host,
            });
        }
        let placed = code.place()?;
        // SAFETY: the caller promises a leaf-ABI body for `A` at offset 0.
        unsafe { Self::from_placed(placed, 0) }
    }

    /// Call the body.
    ///
    /// # Safety
    ///
    /// Every pointer in `args` must be valid, for the whole call, for the
    /// extents `args` names (reads of inputs, writes of outputs), and no
    /// other thread may write what the call reads or touch what it writes.
    /// Weft's argument structs have checked constructors (`…Args::new`)
    /// that establish the extents from live buffers; calling right after
    /// one, while its borrows last, is what keeps this promise.
    pub unsafe fn call(&self, args: &A) {
        // SAFETY: `from_placed`'s caller promised a leaf-ABI function for `A`,
        // and `self.code` keeps the region mapped while we hold `entry`.
        unsafe { (self.entry)(args) }
    }

    /// The placed region this kernel runs from.
    pub fn code(&self) -> &Arc<PlacedCode> {
        &self.code
    }
}

impl<A> fmt::Debug for Kernel<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("entry", &(self.entry as *const u8))
            .field("len", &self.code.len())
            .finish()
    }
}

/// A constant operand a site hands its candidates at plan time (weights),
/// so an arm can repack it into the layout it wants ([`PackedOperand`]).
#[derive(Clone)]
pub struct Operand {
    /// The argument it feeds ("weights").
    pub name: &'static str,
    /// Its bytes, in the family's canonical layout.
    pub bytes: Arc<[u8]>,
}

impl fmt::Debug for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Operand({}, {} bytes)", self.name, self.bytes.len())
    }
}

/// Where a site's data is when the site is called: what the roofline floor
/// assumes and what a micro-race reproduces.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub enum Residency {
    /// In the cache level its size fits: the plan comes back to the site's
    /// data before other work evicts it (the default).
    #[default]
    Cached,
    /// In main memory at every call: between two calls the plan touches
    /// more data than the last-level cache holds (a language model's
    /// weights), so each call streams its operands in anew.
    Streamed,
}

/// A site: where a kernel of `family` runs at `geometry`, with the constant
/// operands (if any) that candidates may repack at plan time.
#[derive(Clone, Debug)]
pub struct Site {
    /// The family.
    pub family: Family,
    /// The geometry.
    pub geometry: Geometry,
    /// Constant operands known at plan time, by name.
    pub operands: Vec<Operand>,
    /// Where the site's data is when it is called.
    pub residency: Residency,
    /// What the caller calls this site (`blk.*.attn_q`); empty if unnamed.
    /// The plan keeps it beside the site's choice, so reports and
    /// explanations name sites without a table of their own.
    pub label: String,
}

impl Site {
    /// A site with no plan-time operands.
    pub fn new(family: Family, geometry: Geometry) -> Self {
        Self {
            family,
            geometry,
            operands: Vec::new(),
            residency: Residency::Cached,
            label: String::new(),
        }
    }

    /// This site called `label` by its caller.
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    /// The site's label, or its family's name if it has none.
    pub fn label(&self) -> &str {
        if self.label.is_empty() {
            self.family.name()
        } else {
            &self.label
        }
    }

    /// This site with its data at `residency` when it is called.
    pub fn with_residency(mut self, residency: Residency) -> Self {
        self.residency = residency;
        self
    }

    /// This site with the constant operand `name` set to `bytes`.
    pub fn with_operand(mut self, name: &'static str, bytes: Arc<[u8]>) -> Self {
        self.operands.retain(|o| o.name != name);
        self.operands.push(Operand { name, bytes });
        self
    }

    /// The constant operand called `name`, if the site has it.
    pub fn operand(&self, name: &str) -> Option<&Operand> {
        self.operands.iter().find(|o| o.name == name)
    }
}

/// A `#[repr(C)]` argument struct of a contract, as the planner's executor
/// sees it: the name contracts give it and how one call splits along the
/// offer's [`MemberViews`] axis.
///
/// # Safety
///
/// Implementing this promises that `Self` is the argument struct of every
/// contract whose [`Contract::args`] equals [`KernelArgs::NAME`] (so a body
/// placed for such a contract may be wrapped as `Kernel<Self>`), and that
/// calls made with [`KernelArgs::restrict`]ed copies of one value over
/// disjoint ranges write disjoint memory and read nothing another writes
/// (so they may run on different threads at once, which is what `Send` and
/// `Sync` on a struct of raw pointers are implemented for).
pub unsafe trait KernelArgs: Copy + Send + Sync + 'static {
    /// The name contracts use for this struct.
    const NAME: &'static str;
    /// The range along the member-view axis this value covers.
    fn range(&self) -> std::ops::Range<u64>;
    /// A copy covering only `range` (a sub-range of [`KernelArgs::range`]).
    fn restrict(&self, range: std::ops::Range<u64>) -> Self;
}

/// How many cases and output words a twin was checked on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checked {
    /// Cases run.
    pub cases: usize,
    /// Output words compared, over every case.
    pub words: usize,
}

/// One body put before a judge: the candidate's name and the bytes the
/// planner produced for it (the bytes that are hashed, priced, cached and
/// placed; a judge never builds its own).
#[derive(Clone, Copy, Debug)]
pub struct Judged<'a> {
    /// The candidate's name (an arm's or a twin's).
    pub name: &'a str,
    /// Its body.
    pub code: &'a NativeCode,
}

/// A family's way of validating a twin's body against its arm's, type-erased
/// so the planner can hold one per family (weft-validate's `Checker`
/// implements it for any `Validation`).
pub trait TwinCheck: Send + Sync {
    /// Run `twin`'s bytes beside `arm`'s on the family's cases for `offer`
    /// from `seed`: `Ok` if every output word agrees, otherwise the named
    /// refusal (`mismatch`, `in-place-mismatch`, …). Never emits anything.
    fn check(
        &self,
        arm: Judged<'_>,
        twin: Judged<'_>,
        offer: &Offer,
        host: &Host,
        seed: u64,
    ) -> Result<Checked, Refusal>;

    /// What judges: a description of the validator and its case generator
    /// (with its version and parameters) for `offer` and `seed`, stable
    /// across runs. A saved verdict is keyed by it, so a stronger case set
    /// judges again instead of inheriting a weaker one's verdicts.
    fn cases_id(&self, offer: &Offer, seed: u64) -> String;
}

/// A family's way to run its bodies on realistic inputs at a site's
/// geometry, for the planner's micro-race.
pub trait Workbench: Send + Sync {
    /// Inputs (deterministic in `seed`) at `offer`'s geometry, laid out as
    /// the offer says (packed operands included), ready to run any body
    /// built for that offer.
    fn prepare(&self, offer: &Offer, seed: u64) -> Result<Box<dyn Bench>, Refusal>;
}

/// Prepared inputs that run one body at a time (see [`Workbench`]).
pub trait Bench {
    /// Run `code` once over the prepared inputs (the whole site, one thread).
    ///
    /// # Safety
    ///
    /// `code` must be a body an [`Arm`] or [`Twin`] built for the offer
    /// these inputs were prepared for (so it honours the leaf ABI for the
    /// argument struct the bench calls it with).
    unsafe fn run(&mut self, code: &Arc<PlacedCode>) -> Result<(), Refusal>;
}

/// One arm as a family registers it, with everything that belongs to that
/// arm's contract: the twins that take its offer, how they are judged
/// against it, and how its bodies run in a micro-race. A family with two
/// contracts registers two of these; nothing dispatches on a contract's name.
#[derive(Clone)]
pub struct ArmEntry {
    /// The arm.
    pub arm: Arc<dyn Arm>,
    /// The twins that take its offer, for every ISA (the planner skips
    /// those the host cannot run).
    pub twins: Vec<Arc<dyn Twin>>,
    /// How a twin's body is judged against this arm's.
    pub check: Arc<dyn TwinCheck>,
    /// How bodies for this arm's offers run in a micro-race (`None`: they
    /// cannot be raced, and prices too close to call keep the tie rule's
    /// choice).
    pub bench: Option<Arc<dyn Workbench>>,
}

impl ArmEntry {
    /// `arm` with its twins, check and bench.
    pub fn new(
        arm: Arc<dyn Arm>,
        twins: Vec<Arc<dyn Twin>>,
        check: Arc<dyn TwinCheck>,
        bench: Option<Arc<dyn Workbench>>,
    ) -> ArmEntry {
        ArmEntry {
            arm,
            twins,
            check,
            bench,
        }
    }
}

impl fmt::Debug for ArmEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArmEntry")
            .field("arm", &self.arm.name())
            .field(
                "twins",
                &self.twins.iter().map(|t| t.name()).collect::<Vec<_>>(),
            )
            .field("bench", &self.bench.is_some())
            .finish()
    }
}

/// Everything a family registers with a planner's catalogue: its arms, each
/// with its own twins, check and bench. New families join by building one
/// of these.
#[derive(Clone, Debug)]
pub struct FamilyEntry {
    /// The family.
    pub family: Family,
    /// Its arms, shipped order first (the first arm is the family's default).
    pub arms: Vec<ArmEntry>,
}

impl FamilyEntry {
    /// Every twin of every arm, with the arm whose offer it takes.
    pub fn twins(&self) -> impl Iterator<Item = (&ArmEntry, &Arc<dyn Twin>)> {
        self.arms
            .iter()
            .flat_map(|a| a.twins.iter().map(move |t| (a, t)))
    }
}

/// A managed arm: makes offers and compiles bodies through Cranelift.
///
/// # Safety
///
/// Implementing this promises that every body [`Arm::build`] returns for an
/// offer honours the leaf ABI for the argument struct the offer's contract
/// names: it reads and writes only what that struct's extents allow,
/// returns normally and never unwinds. The planner wraps such bodies as
/// [`Kernel`]s on this promise.
pub unsafe trait Arm: Send + Sync {
    /// Unique candidate name ("exp.arm.f32x4").
    fn name(&self) -> &'static str;
    /// The family it belongs to.
    fn family(&self) -> Family;
    /// The offer at `site`, or why this arm cannot serve it.
    fn offer(&self, site: &Site, host: &Host) -> Result<Offer, Refusal>;
    /// The body for `offer`, compiled for `isa`.
    fn build(&self, offer: &Offer, isa: Isa) -> Result<NativeCode, Refusal>;
    /// The loop nest of this arm's body at `offer`'s geometry, outermost
    /// first (what the cost model matches the loops in the bytes against).
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        offer.loops.clone()
    }
}

/// A twin: the same kernel as its arm, body emitted directly as machine code.
/// Which arm is the registration's business ([`ArmEntry::twins`]), not the
/// twin's: no name links them.
///
/// # Safety
///
/// As for [`Arm`]: every body [`Twin::emit`] returns for an offer honours
/// the leaf ABI for the argument struct the offer's contract names.
pub unsafe trait Twin: Send + Sync {
    /// Unique candidate name ("exp.twin.avx512").
    fn name(&self) -> &'static str;
    /// The ISA it emits.
    fn isa(&self) -> Isa;
    /// Features the host must have to run it.
    fn requires(&self) -> &'static [Feature];
    /// The body for the arm's `offer`.
    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal>;
    /// The loop nest of this twin's body at `offer`'s geometry, outermost
    /// first. A twin that restructures its arm's loops (several rows a
    /// pass, say) states its own nest; the offer is otherwise unchanged.
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        offer.loops.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_faults_of_the_bytes_are_faults_of_the_bytes() {
        let faults = [
            Refusal::Mismatch {
                index: 1,
                input: "x".into(),
                arm_bits: 0,
                twin_bits: 1,
            },
            Refusal::InPlaceMismatch {
                kernel: "exp.arm.f32x4".into(),
                operands: "input = output".into(),
                index: 0,
                input: "x".into(),
                separate_bits: 0,
                in_place_bits: 1,
            },
            Refusal::EmitError {
                message: "no".into(),
            },
        ];
        for r in &faults {
            assert!(r.is_fault_of_the_bytes(), "{r}");
        }
        let not = [
            Refusal::MissingFeature {
                feature: "avx2".into(),
            },
            Refusal::ProbeFailed { cause: "x".into() },
            Refusal::NativeEmitOff,
            Refusal::AliasingUnvalidated {
                a: "input".into(),
                b: "len".into(),
            },
        ];
        for r in &not {
            assert!(!r.is_fault_of_the_bytes(), "{r}");
        }
    }

    #[test]
    fn geometry_is_order_independent() {
        let a = Geometry::new().with("rows", 4).with("cols", 32);
        let b = Geometry::new().with("cols", 32).with("rows", 4);
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "cols=32 rows=4");
        assert_eq!(a.get("rows"), Some(4));
        assert_eq!(
            a.require("len"),
            Err(Refusal::MissingDimension {
                dimension: "len".into()
            })
        );
    }

    #[test]
    fn member_views_split_covers_extent_on_granule_boundaries() {
        for extent in [0u64, 1, 3, 4, 5, 17, 4096] {
            for granule in [1u64, 2, 4] {
                for parts in [1u64, 2, 3, 8] {
                    let v = MemberViews {
                        axis: "rows".into(),
                        extent,
                        granule,
                    };
                    let ranges = v.split(parts);
                    let mut next = 0;
                    for r in &ranges {
                        assert_eq!(r.start, next);
                        assert!(r.end > r.start);
                        assert!(r.start % granule == 0);
                        next = r.end;
                    }
                    assert_eq!(next, extent);
                    assert!(ranges.len() as u64 <= parts);
                }
            }
        }
    }

    #[test]
    fn refusal_names_match_their_display_prefix() {
        let all = [
            Refusal::MissingFeature {
                feature: "avx2".into(),
            },
            Refusal::UnsupportedGeometry { reason: "x".into() },
            Refusal::Mismatch {
                index: 3,
                input: "1.0".into(),
                arm_bits: 1,
                twin_bits: 2,
            },
            Refusal::NativeEmitOff,
            Refusal::NoSavedVerdict {
                candidate: "t".into(),
            },
            Refusal::NoChecker { family: "f".into() },
            Refusal::NoBench { arm: "a".into() },
            Refusal::RaceOperandsDiffer {
                a: "a".into(),
                b: "b".into(),
            },
        ];
        for r in all {
            assert!(r.to_string().starts_with(r.name()), "{r}");
        }
    }
}
