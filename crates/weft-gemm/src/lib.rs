//! The f32 matrix-multiply family (`f32.gemm`): `C ← α·A·B + β·C` with one
//! fixed rounding, so that every arm and every twin of the family gives the
//! same bits, and the planner may choose among them by speed alone.
//!
//! # Operands
//!
//! - **A** is `m × k`, row-major, row stride `lda ≥ k` elements.
//! - **B** is `k × n`. It reaches a body in one of two layouts:
//!   - *rows*: row-major, row stride `ldb ≥ n` (a runtime operand);
//!   - *panels* ([`PackedB`], layout [`PANELS_LAYOUT`]): repacked at plan
//!     time from the site's operand `b` (a constant, like a layer's
//!     weights) into `⌈n/16⌉` panels of 16 columns; element `(kk, j)` is
//!     at `((j / 16) · k + kk) · 16 + j % 16`, columns past `n` are zero.
//!     The site's `b` may be given `k × n` (`bt = 0`) or `n × k` (`bt = 1`,
//!     the layout of an LLM's weight matrices): packing reads either.
//! - **C** is `m × n`, row-major, row stride `ldc ≥ n`.
//!
//! A, B and C are disjoint (no aliasing is declared). A call computes the
//! rectangle `m_start..m_end × n_start..n_end` of C and touches no other
//! element of C.
//!
//! # Contract (how every body rounds)
//!
//! For each output `(i, j)` in the rectangle, with `⊗` one IEEE f32
//! multiply and `fma` one fused multiply-add, both rounding to nearest even:
//!
//! 1. `acc ← β ⊗ C[i,j]` if `β ≠ 0`, else `acc ← +0.0` and **C is not
//!    read** (a NaN in C does not leak through `β = 0`);
//! 2. for `kk = 0, 1, …, k − 1` in order:
//!    `acc ← fma(α ⊗ A[i,kk], B[kk,j], acc)`;
//! 3. `C[i,j] ← acc`.
//!
//! So the reduction is sequential over `k`, one accumulator per output,
//! FMA at every step, and `α` scales A's element before the product.
//! Three consequences every body relies on:
//!
//! - **Cache blocking over `k` is free.** `acc` is an f32, so storing it
//!   to C after some `k` steps and loading it back before the next is
//!   exact; any blocking (`kc`) gives the same bits.
//! - **`α = 1` and `β = 1` may skip their multiply**: `1 ⊗ x = x` for
//!   every `x` but a signalling NaN, which a multiply quietens; outputs
//!   that are NaN compare by class ([`NanRule::ByClass`]).
//! - **Every arm shares this contract**, so arms differ in layout,
//!   blocking and tiling only, never in numerics; the scalar
//!   [`reference`](mod@reference) is the definition all of them meet.
//!   A body that sums in another order (a `k` split, lanes along `k`)
//!   has another contract: it would join as an arm with its own
//!   contract, as `q8_0.matvec`'s rows2 does, and the planner choosing it
//!   would change the bits a plan computes.
//!
//! # Arms
//!
//! Each arm is a distinct way to walk the same arithmetic, chosen for a
//! kind of shape (module [`arm`]):
//!
//! - `f32.gemm.arm.direct`: B in rows, given at run time (a site whose B
//!   is given at plan time is left to the packing arms), register tiles
//!   of 4 rows × 8 columns, `k` blocked by [`KC`].
//! - `f32.gemm.arm.panels`: B packed into panels at plan time, the same
//!   tiles; the panel's 16 columns are contiguous per `k`, so one tile
//!   reads one cache line per step instead of strided rows.
//! - `f32.gemm.arm.small_m`: B in panels, every row of A (`m ≤ 8`) in one
//!   tile, so B — the large operand when a few tokens meet a weight
//!   matrix — is read exactly once.
//!
//! Twins ([`twin_x64`], [`twin_a64`]) take an arm's offer and emit wider
//! tiles (AVX-512 up to 12 × 32, AVX2 6 × 16, NEON 6 × 16) over the same
//! layout. Threads split C along `m` (granule [`M_GRANULE`]) or, when
//! splitting `m` in two would be far from even, along `n` (granule
//! [`N_GRANULE`]); each part is the same sequence of operations on its own
//! outputs, so any split gives the unsplit bits.
//!
//! Why three arms and not the seven an arm per textbook blocking would
//! give: an arm is a layout and a contract the planner chooses, while
//! tiles, cache blocking and the copying of A belong to the bodies. So a
//! register-blocked arm without packing is `direct`; GotoBLAS-style
//! packing of A is what the AVX-512 twins do inside every body (A's rows
//! copied per `k` block to a padded stack buffer) with B packed at plan
//! time by `panels`; B transposed (`n × k`, the GGUF weight layout) is a
//! packing source of `panels` and `small_m`, not a layout a body reads;
//! a tiny-matrix arm would be `direct` with its loops unrolled, which the
//! twins' leftover tiles already cover. Two arms are left for later, each
//! with a contract of its own: a `k` split with a reduction (another
//! summation order, for shapes with little `m × n` and much `k`, which
//! the LLM's projections are not) and a runtime B given transposed (a dot
//! product along `k`, lanes in the sum).
//!
//! # Example
//!
//! A user multiplies two matrices through the planner (the B operand is
//! given at plan time, so the planner may pack it):
//!
//! ```no_run
//! use weft_gemm::{BLayout, GemmArgs, MatRef, SiteOperands};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (m, n, k) = (64, 1536, 576);
//! let (a, b) = (vec![1.0f32; m * k], vec![0.5f32; k * n]);
//! let mut catalogue = weft_plan::Catalogue::new();
//! catalogue.register(weft_gemm::entry())?;
//! let host = weft_host::Host::detect();
//! let mut planner = weft_plan::Planner::for_host(catalogue, host, weft_plan::Options::from_env()?);
//! let plan = planner.compile(&[weft_gemm::site(m, n, k, BLayout::Rows, Some(&b))])?;
//! let s = &plan.sites()[0];
//! let ops = SiteOperands::new(s.packed("b"), s.views.as_ref(), k, n)?;
//! let mut c = vec![0.0f32; m * n];
//! let args = ops.args(MatRef::dense(&a, m, k), Some(MatRef::dense(&b, k, n)), &mut c, n, (1.0, 0.0))?;
//! // SAFETY: `args` was checked against `a`, `b` and `c`, live until it returns.
//! unsafe { plan.kernel::<GemmArgs>(0)?.run(&weft_plan::Executor::new(2), &args) };
//! # Ok(()) }
//! ```

pub mod arm;
pub mod pack;
pub mod reference;
pub mod twin_a64;
pub mod twin_x64;
pub mod validation;

#[cfg(test)]
mod tests;

use std::ops::Range;

use weft_kernel::{
    Aliasing, ArithmeticContract, Contract, FmaUse, Geometry, KernelArgs, NanRule, ReductionOrder,
    Refusal,
};

pub use pack::{PackedB, PANELS_LAYOUT, PANEL_WIDTH};

/// The family's name.
pub const FAMILY: &str = "f32.gemm";

/// The name of the argument struct in contracts.
pub const ARGS_NAME: &str = "GemmArgs";

/// Threads split `m` at multiples of this (a multiple of every body's
/// row tile: 1, 4, 6, 8, 12).
pub const M_GRANULE: u64 = 24;

/// Threads split `n` at multiples of this (two panels: a multiple of
/// every body's column tile: 4, 8, 16, 32).
pub const N_GRANULE: u64 = 32;

/// The arms' `k` block: a tile's B rows (`KC · 32` bytes at 8 columns)
/// and A rows stay in L1 while it runs.
pub const KC: u64 = 256;

/// Largest extent of any dimension: a product of two extents must fit
/// the address arithmetic of every body with room to spare.
pub const MAX_EXTENT: u64 = 1 << 24;

/// How a site's B operand is laid out in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BLayout {
    /// `k × n`, row-major (`bt = 0`).
    Rows,
    /// `n × k`, row-major: B transposed, the layout of GGUF weight
    /// matrices (`bt = 1`). Only a plan-time operand may be given so:
    /// packing turns it into panels.
    Transposed,
}

/// The geometry of a site: `m`, `n`, `k` and `bt` (B's layout).
pub fn geometry(m: u64, n: u64, k: u64, b: BLayout) -> Geometry {
    Geometry::new()
        .with("m", m)
        .with("n", n)
        .with("k", k)
        .with("bt", u64::from(b == BLayout::Transposed))
}

/// A site of this family; `b` (laid out as `layout` says) is the
/// plan-time B operand when the caller has it, so arms may pack it.
pub fn site(m: usize, n: usize, k: usize, layout: BLayout, b: Option<&[f32]>) -> weft_kernel::Site {
    let mut s = weft_kernel::Site::new(
        weft_kernel::Family(FAMILY),
        geometry(m as u64, n as u64, k as u64, layout),
    );
    if let Some(b) = b {
        let bytes: Vec<u8> = b.iter().flat_map(|v| v.to_le_bytes()).collect();
        s = s.with_operand("b", bytes.into());
    }
    s
}

/// `m`, `n`, `k` and B's layout of a geometry, checked.
pub fn dims(g: &Geometry) -> Result<(u64, u64, u64, BLayout), Refusal> {
    let (m, n, k) = (g.require("m")?, g.require("n")?, g.require("k")?);
    let layout = match g.get("bt").unwrap_or(0) {
        0 => BLayout::Rows,
        1 => BLayout::Transposed,
        other => {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!("bt = {other}: B is either k × n (0) or n × k (1)"),
            })
        }
    };
    for (name, v) in [("m", m), ("n", n), ("k", k)] {
        if v > MAX_EXTENT {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!("{name} = {v} exceeds {MAX_EXTENT}"),
            });
        }
    }
    if m == 0 || n == 0 {
        return Err(Refusal::UnsupportedGeometry {
            reason: format!("an empty C ({m} × {n}) has nothing to compute"),
        });
    }
    Ok((m, n, k, layout))
}

/// The contract every arm of the family offers at `g` (see the crate
/// docs: it is the same arithmetic for all of them).
pub fn contract(g: &Geometry) -> Contract {
    Contract {
        family: FAMILY.to_owned(),
        geometry: g.clone(),
        args: ARGS_NAME.to_owned(),
        arithmetic: ArithmeticContract {
            accumulator_lanes: 1,
            reduction: ReductionOrder::Sequential,
            fma: FmaUse::AsSpecified,
            nan: NanRule::ByClass,
            notes: "acc = β⊗C (C unread when β = 0: acc = +0); for k in order \
                    acc = fma(α⊗A[i,k], B[k,j], acc); C = acc"
                .to_owned(),
        },
        aliasing: Aliasing::disjoint(),
    }
}

/// Which dimension of C a call's range splits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u64)]
pub enum Axis {
    /// Rows of C (`m`).
    M = 0,
    /// Columns of C (`n`).
    N = 1,
}

impl Axis {
    /// The axis a member view names (`"m"` or `"n"`).
    pub fn of_view(axis: &str) -> Option<Axis> {
        match axis {
            "m" => Some(Axis::M),
            "n" => Some(Axis::N),
            _ => None,
        }
    }
}

/// The arguments of every `f32.gemm` body (`extern "C" fn(*const
/// GemmArgs)`). Build them with [`GemmArgs::new`], which checks every
/// extent against the buffers.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GemmArgs {
    /// A, `m × k`, row stride `lda`.
    pub a: *const f32,
    /// B: `k × n` with row stride `ldb`, or [`PackedB`] panels.
    pub b: *const f32,
    /// C, `m × n`, row stride `ldc`.
    pub c: *mut f32,
    /// A's row stride, elements.
    pub lda: usize,
    /// B's row stride, elements (rows layout only).
    pub ldb: usize,
    /// C's row stride, elements.
    pub ldc: usize,
    /// Rows of A and C.
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// Columns of A, rows of B.
    pub k: usize,
    /// α.
    pub alpha: f32,
    /// β (`0.0`: C is not read).
    pub beta: f32,
    /// First row of C computed.
    pub m_start: usize,
    /// One past the last row computed.
    pub m_end: usize,
    /// First column of C computed.
    pub n_start: usize,
    /// One past the last column computed.
    pub n_end: usize,
    /// Which range [`KernelArgs::range`] is: [`Axis`] as a word.
    pub axis: u64,
}

/// Byte offsets of the fields of [`GemmArgs`] (the emitters' view).
pub mod offsets {
    /// `a`.
    pub const A: i32 = 0;
    /// `b`.
    pub const B: i32 = 8;
    /// `c`.
    pub const C: i32 = 16;
    /// `lda`.
    pub const LDA: i32 = 24;
    /// `ldb`.
    pub const LDB: i32 = 32;
    /// `ldc`.
    pub const LDC: i32 = 40;
    /// `m`.
    pub const M: i32 = 48;
    /// `n`.
    pub const N: i32 = 56;
    /// `k`.
    pub const K: i32 = 64;
    /// `alpha`.
    pub const ALPHA: i32 = 72;
    /// `beta`.
    pub const BETA: i32 = 76;
    /// `m_start`.
    pub const M_START: i32 = 80;
    /// `m_end`.
    pub const M_END: i32 = 88;
    /// `n_start`.
    pub const N_START: i32 = 96;
    /// `n_end`.
    pub const N_END: i32 = 104;
    /// `axis`.
    pub const AXIS: i32 = 112;
}

// SAFETY: `GemmArgs` is the `#[repr(C)]` struct of every contract naming
// ARGS_NAME. A body reads A and B (never written) and C only inside the
// rectangle, and writes C only inside it; `restrict` narrows one side of
// the rectangle, so restricted copies of one value cover disjoint
// rectangles, write disjoint f32s and read nothing another writes.
unsafe impl KernelArgs for GemmArgs {
    const NAME: &'static str = ARGS_NAME;

    fn range(&self) -> Range<u64> {
        if self.axis == Axis::N as u64 {
            self.n_start as u64..self.n_end as u64
        } else {
            self.m_start as u64..self.m_end as u64
        }
    }

    fn restrict(&self, range: Range<u64>) -> Self {
        let mut out = *self;
        if self.axis == Axis::N as u64 {
            (out.n_start, out.n_end) = (range.start as usize, range.end as usize);
        } else {
            (out.m_start, out.m_end) = (range.start as usize, range.end as usize);
        }
        out
    }
}

// SAFETY: plain data whose pointers are only dereferenced by a body called
// through `Kernel::call`, whose caller keeps them valid.
unsafe impl Send for GemmArgs {}
// SAFETY: as for `Send`; a shared `&GemmArgs` only lets threads copy it.
unsafe impl Sync for GemmArgs {}

/// A read-only matrix: `rows × cols` elements, row stride `ld`.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    /// The elements; row `r` starts at `r · ld`.
    pub data: &'a [f32],
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Row stride, elements (`≥ cols`).
    pub ld: usize,
}

impl<'a> MatRef<'a> {
    /// A dense row-major matrix (`ld = cols`).
    pub fn dense(data: &'a [f32], rows: usize, cols: usize) -> MatRef<'a> {
        MatRef {
            data,
            rows,
            cols,
            ld: cols,
        }
    }

    fn check(&self, name: &str) -> Result<(), Refusal> {
        check_extent(name, self.data.len(), self.rows, self.cols, self.ld)
    }
}

fn bad(operand: &str, reason: String) -> Refusal {
    Refusal::BadOperand {
        operand: operand.to_owned(),
        reason,
    }
}

/// Whether `len` elements hold `rows × cols` at row stride `ld`.
fn check_extent(
    name: &str,
    len: usize,
    rows: usize,
    cols: usize,
    ld: usize,
) -> Result<(), Refusal> {
    if ld < cols {
        return Err(bad(name, format!("row stride {ld} < {cols} columns")));
    }
    if rows as u64 > MAX_EXTENT || cols as u64 > MAX_EXTENT || ld as u64 > MAX_EXTENT {
        return Err(bad(
            name,
            format!("{rows} × {cols} (stride {ld}) exceeds {MAX_EXTENT}"),
        ));
    }
    let need = if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * ld + cols
    };
    if len < need {
        return Err(bad(
            name,
            format!("{len} elements, {rows} × {cols} at stride {ld} needs {need}"),
        ));
    }
    Ok(())
}

/// B as a body reads it.
#[derive(Clone, Copy, Debug)]
pub enum BRef<'a> {
    /// `k × n` row-major with its stride.
    Rows(MatRef<'a>),
    /// Packed panels ([`PANELS_LAYOUT`]).
    Panels(&'a PackedB),
}

impl GemmArgs {
    /// Arguments computing `rows × cols` of `C ← α·A·B + β·C`, each extent
    /// checked against its buffer; `axis` is the dimension a split cuts
    /// (the site's member view). Refused by name (`bad-operand`) when a
    /// buffer is too short, a stride is below its row, the inner
    /// dimensions disagree or the rectangle leaves C.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        a: MatRef<'_>,
        b: BRef<'_>,
        c: &mut [f32],
        ldc: usize,
        (alpha, beta): (f32, f32),
        rows: Range<usize>,
        cols: Range<usize>,
        axis: Axis,
    ) -> Result<GemmArgs, Refusal> {
        a.check("a")?;
        let (m, k) = (a.rows, a.cols);
        let (bptr, ldb, n) = match b {
            BRef::Rows(b) => {
                b.check("b")?;
                if b.rows != k {
                    return Err(bad("b", format!("{} rows, A has {k} columns", b.rows)));
                }
                (b.data.as_ptr(), b.ld, b.cols)
            }
            BRef::Panels(p) => {
                if p.k() != k {
                    return Err(bad(
                        "b",
                        format!("panels of depth {}, A has {k} columns", p.k()),
                    ));
                }
                (p.as_ptr(), p.n(), p.n())
            }
        };
        check_extent("c", c.len(), m, n, ldc)?;
        if rows.start > rows.end || rows.end > m {
            return Err(bad("c", format!("rows {rows:?} outside 0..{m}")));
        }
        if cols.start > cols.end || cols.end > n {
            return Err(bad("c", format!("columns {cols:?} outside 0..{n}")));
        }
        Ok(GemmArgs {
            a: a.data.as_ptr(),
            b: bptr,
            c: c.as_mut_ptr(),
            lda: a.ld,
            ldb,
            ldc,
            m,
            n,
            k,
            alpha,
            beta,
            m_start: rows.start,
            m_end: rows.end,
            n_start: cols.start,
            n_end: cols.end,
            axis: axis as u64,
        })
    }
}

/// What a compiled site hands its caller besides the body: B packed at
/// plan time (if the chosen arm packs it) and the axis threads split.
#[derive(Clone, Debug)]
pub struct SiteOperands {
    packed: Option<PackedB>,
    axis: Axis,
}

impl SiteOperands {
    /// From a compiled site's packed operand `b` and member views, for a
    /// `k × n` B. A packed operand of another layout or size, or a view
    /// along another axis, is `bad-operand`.
    pub fn new(
        packed: Option<&weft_kernel::PackedOperand>,
        views: Option<&weft_kernel::MemberViews>,
        k: usize,
        n: usize,
    ) -> Result<SiteOperands, Refusal> {
        let packed = packed.map(|p| PackedB::from_operand(p, k, n)).transpose()?;
        let axis = match views {
            None => Axis::M,
            Some(v) => Axis::of_view(&v.axis)
                .ok_or_else(|| bad("views", format!("axis `{}` is neither m nor n", v.axis)))?,
        };
        Ok(SiteOperands { packed, axis })
    }

    /// Arguments for the whole of C. `b` is B in rows; it may be `None`
    /// when the site packed B at plan time (the packed copy is used).
    pub fn args(
        &self,
        a: MatRef<'_>,
        b: Option<MatRef<'_>>,
        c: &mut [f32],
        ldc: usize,
        scale: (f32, f32),
    ) -> Result<GemmArgs, Refusal> {
        let b = match (&self.packed, b) {
            (Some(p), _) => BRef::Panels(p),
            (None, Some(b)) => BRef::Rows(b),
            (None, None) => {
                return Err(bad(
                    "b",
                    "the site packed no B and none was given".to_owned(),
                ))
            }
        };
        let n = match b {
            BRef::Rows(b) => b.cols,
            BRef::Panels(p) => p.n(),
        };
        GemmArgs::new(a, b, c, ldc, scale, 0..a.rows, 0..n, self.axis)
    }
}

/// The family as a planner registers it: three arms sharing one contract,
/// each with its twins (all ISAs; the planner keeps what the host runs),
/// its check and its micro-race bench. `direct` is first: it serves every
/// site whose B comes at run time; the packing arms serve the others.
pub fn entry() -> weft_kernel::FamilyEntry {
    use std::sync::Arc;
    use weft_kernel::{ArmEntry, Twin};
    use weft_validate::Checker;
    let one = |kind: arm::ArmKind| {
        let mut twins: Vec<Arc<dyn Twin>> = twin_x64::twins(kind);
        twins.extend(twin_a64::twins(kind));
        ArmEntry::new(
            Arc::new(arm::GemmArm(kind)),
            twins,
            Arc::new(Checker(validation::GemmValidation)),
            Some(Arc::new(validation::GemmBench)),
        )
    };
    weft_kernel::FamilyEntry {
        family: weft_kernel::Family(FAMILY),
        arms: arm::ArmKind::ALL.into_iter().map(one).collect(),
    }
}
