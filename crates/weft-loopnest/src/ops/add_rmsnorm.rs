//! `loopnest.add_rmsnorm`: the residual add and the RMSNorm after it, fused
//! into one kernel — `x ← x ⊕ y`, then `out = rmsnorm(x) · w` — row by row.
//!
//! # Contract
//!
//! Geometry: `dim` (`1..=2^24`, the row length) and `rows` (`≥ 1`, default
//! 1; pricing and views only). For each row `r` in `row_start..row_end`,
//! with `h_r[i] = x_r[i] ⊕ y_r[i]` (`x` the left operand):
//!
//! 1. `ss = Σ h_r[i] ⊗ h_r[i]` over 16 lanes and the halving fold, exactly
//!    as `loopnest.rmsnorm`'s step 1 on `h_r`;
//! 2. `mean = ss ⊘ f32(dim)`; `scale = 1 ⊘ sqrt(mean ⊕ eps)`;
//! 3. `out_r[i] = (h_r[i] ⊗ scale) ⊗ w[i]` and `x_r[i] ← h_r[i]`.
//!
//! Every step is one IEEE binary32 operation, round to nearest even, no
//! FMA: `loopnest.add` on the row's elements followed by `loopnest.rmsnorm`
//! of the row, so the fused kernel's `x` and `out` are bit for bit the
//! chain's (the `region` tests hold it to that). NaNs compare by class.
//! `x`, `y` and `out` must not overlap. A call updates only rows
//! `row_start..row_end` of `x` and `out`; splits are along `rows`, granule 1.
//!
//! # The nest
//!
//! Built by fusion, not written out: `loopnest.rmsnorm`'s nest as the one
//! part of an [`ir::sequence`] over this struct's fields, with the add
//! materialised in its sum of squares ([`ir::materialise`]): each element's
//! `h = x ⊕ y` is bound once, squared into its lane and stored to `x` in
//! the reduction's own pass (which waits on its accumulators' chain, so
//! the loads and the store ride along); the normalising loop then reads
//! `x` as the chain's does. Two passes over a row instead of the chain's
//! three, one call instead of two.

pub mod validation;

use std::mem::offset_of;
use std::ops::Range;
use std::sync::Arc;

use weft_kernel::{
    Aliasing, ArithmeticContract, Contract, FmaUse, Geometry, KernelArgs, MemberViews, NanRule,
    ReductionOrder, Refusal, Twin, TwinCheck,
};

use super::rmsnorm::{self, RmsNorm};
use super::{bad, check_range, dim, dim_or, interpret, NestOp, Placed, MAX_EXTENT};
use crate::interp::{Arg, Buffer};
use crate::ir::{self, Affine, Expr, Kernel, Param, ParamId, ParamKind, Storage, ValId};

/// The family's name.
pub const FAMILY: &str = "loopnest.add_rmsnorm";
/// The argument struct's name in contracts.
pub const ARGS_NAME: &str = "AddRmsNormArgs";

/// The shape of a fused residual-add and RMSNorm site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddRmsNorm {
    /// Row length.
    pub dim: usize,
    /// Rows at the site (pricing and views).
    pub rows: usize,
}

/// The arguments of every `loopnest.add_rmsnorm` body.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AddRmsNormArgs {
    /// `rows · dim` f32s: the residual stream, updated in place.
    pub x: *mut f32,
    /// `rows · dim` f32s added to it.
    pub y: *const f32,
    /// `dim` f32 weights.
    pub w: *const f32,
    /// `rows · dim` f32 outputs: the normalised rows.
    pub out: *mut f32,
    /// Rows in `x`, `y` and `out`.
    pub rows: usize,
    /// Row length (must equal the compiled shape's).
    pub dim: usize,
    /// First row computed.
    pub row_start: usize,
    /// One past the last row computed.
    pub row_end: usize,
    /// Added to the mean of squares.
    pub eps: f32,
}

// SAFETY: the `#[repr(C)]` struct of every contract naming ARGS_NAME. A
// body reads `y` and `w` and reads and writes `x[r·dim..(r+1)·dim]` and
// writes `out[r·dim..(r+1)·dim]` only for `r` in `row_start..row_end`, each
// row depending on its own elements only, so copies restricted to disjoint
// row ranges touch disjoint memory of `x` and `out`.
unsafe impl KernelArgs for AddRmsNormArgs {
    const NAME: &'static str = ARGS_NAME;

    fn range(&self) -> Range<u64> {
        self.row_start as u64..self.row_end as u64
    }

    fn restrict(&self, range: Range<u64>) -> Self {
        Self {
            row_start: range.start as usize,
            row_end: range.end as usize,
            ..*self
        }
    }
}

// SAFETY: plain data; the pointers are dereferenced only by a body called
// through `Kernel::call`, whose caller keeps them valid.
unsafe impl Send for AddRmsNormArgs {}
// SAFETY: as for `Send`: a shared reference only lets threads copy it.
unsafe impl Sync for AddRmsNormArgs {}

fn check_lengths(
    op: &AddRmsNorm,
    x: &[f32],
    y: &[f32],
    w: &[f32],
    out: &[f32],
) -> Result<usize, Refusal> {
    if w.len() != op.dim {
        return Err(bad("w", format!("{} f32s, dim is {}", w.len(), op.dim)));
    }
    if !x.len().is_multiple_of(op.dim) {
        return Err(bad(
            "x",
            format!("{} f32s is not rows of {}", x.len(), op.dim),
        ));
    }
    for (name, n) in [("y", y.len()), ("out", out.len())] {
        if n != x.len() {
            return Err(bad(name, format!("{n} f32s, x has {}", x.len())));
        }
    }
    Ok(x.len() / op.dim)
}

impl AddRmsNormArgs {
    /// Arguments for rows `rows`: `x += y`, then `out = rmsnorm(x) · w`,
    /// every length checked (`w` holds `dim` f32s; `x`, `y` and `out` the
    /// same whole number of rows).
    pub fn new(
        op: &AddRmsNorm,
        x: &mut [f32],
        y: &[f32],
        w: &[f32],
        out: &mut [f32],
        eps: f32,
        rows: Range<usize>,
    ) -> Result<Self, Refusal> {
        let total = check_lengths(op, x, y, w, out)?;
        check_range("rows", &rows, total)?;
        Ok(Self {
            x: x.as_mut_ptr(),
            y: y.as_ptr(),
            w: w.as_ptr(),
            out: out.as_mut_ptr(),
            rows: total,
            dim: op.dim,
            row_start: rows.start,
            row_end: rows.end,
            eps,
        })
    }
}

const X: ParamId = ParamId(0);
const Y: ParamId = ParamId(1);
const W: ParamId = ParamId(2);
const OUT: ParamId = ParamId(3);
const ROWS: ParamId = ParamId(4);
const DIM: ParamId = ParamId(5);
const ROW_START: ParamId = ParamId(6);
const ROW_END: ParamId = ParamId(7);
const EPS: ParamId = ParamId(8);

fn params() -> Vec<Param> {
    let buf = |written| ParamKind::Buffer {
        storage: Storage::F32,
        written,
    };
    let p = |name, off: usize, kind| Param {
        name,
        offset: off as u32,
        kind,
    };
    vec![
        p("x", offset_of!(AddRmsNormArgs, x), buf(true)),
        p("y", offset_of!(AddRmsNormArgs, y), buf(false)),
        p("w", offset_of!(AddRmsNormArgs, w), buf(false)),
        p("out", offset_of!(AddRmsNormArgs, out), buf(true)),
        p("rows", offset_of!(AddRmsNormArgs, rows), ParamKind::Index),
        p("dim", offset_of!(AddRmsNormArgs, dim), ParamKind::Index),
        p(
            "row_start",
            offset_of!(AddRmsNormArgs, row_start),
            ParamKind::Index,
        ),
        p(
            "row_end",
            offset_of!(AddRmsNormArgs, row_end),
            ParamKind::Index,
        ),
        p("eps", offset_of!(AddRmsNormArgs, eps), ParamKind::F32),
    ]
}

impl AddRmsNorm {
    /// The shape for rows of `dim` (refused outside `1..=2^24`).
    pub fn new(dim: usize, rows: usize) -> Result<Self, Refusal> {
        Self::from_geometry(
            &Geometry::new()
                .with("dim", dim as u64)
                .with("rows", rows as u64),
        )
    }

    /// The RMSNorm this fuses (the chain's second site).
    pub fn norm(&self) -> RmsNorm {
        RmsNorm {
            dim: self.dim,
            rows: self.rows,
        }
    }

    /// The fused nest, or the IR's refusal (never for a shape
    /// `from_geometry` admits; `nest` maps it to an empty kernel that the
    /// checker refuses, so no body is built from it).
    pub fn fused_nest(&self) -> Result<Kernel, ir::IrError> {
        let norm = self.norm().nest();
        // loopnest.rmsnorm's fields: x, w, y, rows, dim, row_start, row_end, eps.
        let binds = [X, W, OUT, ROWS, DIM, ROW_START, ROW_END, EPS];
        let mut k = ir::sequence(
            format!("loopnest_add_rmsnorm_{}", self.dim),
            params(),
            &[ir::Part {
                nest: &norm,
                binds: &binds,
            }],
        )?;
        // The add, computed where the sum of squares reads `x`, bound once
        // per element, squared there and written back to `x` in the same
        // pass; the normalising loop then reads `x` as the chain's does.
        let at = Affine::var(rmsnorm::SQUARES_VAR).plus_var(self.dim as i64, rmsnorm::ROW_VAR);
        let add = Expr::load_f32(X, at.clone()).plus(Expr::load_f32(Y, at.clone()));
        ir::materialise(
            &mut k.body,
            rmsnorm::SQUARES,
            ValId(rmsnorm::VALS),
            &add,
            X,
            &at,
        )?;
        k.check()?;
        Ok(k)
    }

    /// The reference: the nest run by the interpreter, on the same checks
    /// as [`AddRmsNormArgs::new`]; `x` and `out` are updated.
    pub fn reference(
        &self,
        x: &mut [f32],
        y: &[f32],
        w: &[f32],
        out: &mut [f32],
        eps: f32,
        rows: Range<usize>,
    ) -> Result<(), Refusal> {
        let total = check_lengths(self, x, y, w, out)?;
        check_range("rows", &rows, total)?;
        let f = |v: &[f32]| Arg::Buffer(Buffer::F32(v.to_vec()));
        let mut args = vec![
            f(x),
            f(y),
            f(w),
            f(out),
            Arg::Index(total as u64),
            Arg::Index(self.dim as u64),
            Arg::Index(rows.start as u64),
            Arg::Index(rows.end as u64),
            Arg::F32(eps),
        ];
        interpret(self, &mut args)?;
        if let (Some(nx), Some(no)) = (args[0].f32s(), args[3].f32s()) {
            x.copy_from_slice(nx);
            out.copy_from_slice(no);
        }
        Ok(())
    }
}

// SAFETY: the nest is loopnest.rmsnorm's with its fields renamed: its
// guards fix `dim` and keep `row_start <= row_end <= rows`; every load is
// `x[r·dim + i]`, `y[r·dim + i]` or `w[i]` and every store `x[r·dim + i]`
// or `out[r·dim + i]`, `r < rows`, `i < dim`, inside the `rows · dim` and
// `dim` elements `AddRmsNormArgs::new` checked.
unsafe impl NestOp for AddRmsNorm {
    const FAMILY: &'static str = FAMILY;
    const ARM: &'static str = "add_rmsnorm.arm.nest";
    type Args = AddRmsNormArgs;

    fn from_geometry(g: &Geometry) -> Result<Self, Refusal> {
        Ok(Self {
            dim: dim(g, "dim", 1, 1 << 24)?,
            rows: dim_or(g, "rows", 1, 1, MAX_EXTENT)?,
        })
    }

    fn geometry(&self) -> Geometry {
        Geometry::new()
            .with("dim", self.dim as u64)
            .with("rows", self.rows as u64)
    }

    fn nest(&self) -> Kernel {
        // An IR fault here is a bug; an empty-bodied kernel with no
        // parameters fails no check, so refuse through a bad guard instead:
        // `build_nest` checks and names it.
        self.fused_nest().unwrap_or_else(|e| Kernel {
            name: format!("loopnest_add_rmsnorm_unbuildable: {e}"),
            params: Vec::new(),
            guards: vec![ir::Guard::Eq(
                ir::Extent::Param(ParamId(0)),
                ir::Extent::Const(0),
            )],
            body: Vec::new(),
        })
    }

    fn contract(&self) -> Contract {
        Contract {
            family: FAMILY.to_owned(),
            geometry: self.geometry(),
            args: ARGS_NAME.to_owned(),
            arithmetic: ArithmeticContract {
                accumulator_lanes: rmsnorm::LANES,
                reduction: ReductionOrder::Strided {
                    lanes: rmsnorm::LANES,
                    fold: "halving: (a0+a2)+(a1+a3) over f32x4 ak = lanes 4k..4k+3, \
                           then (l0+l2)+(l1+l3)"
                        .to_owned(),
                },
                fma: FmaUse::Never,
                nan: NanRule::ByClass,
                notes: "h = x + y; ss = sum of h*h (lane i mod 16); mean = ss/f32(dim); \
                        scale = 1/sqrt(mean+eps); out = (h*scale)*w; x = h"
                    .to_owned(),
            },
            aliasing: Aliasing::disjoint(),
        }
    }

    fn views(&self) -> Option<MemberViews> {
        Some(MemberViews {
            axis: "rows".to_owned(),
            extent: self.rows as u64,
            granule: 1,
        })
    }

    fn work(&self) -> (u64, u64) {
        let (d, r) = (self.dim as u64, self.rows as u64);
        (r * (5 * d + 3), 4 * (4 * r * d + d))
    }

    fn index_at_geometry(&self, name: &str) -> u64 {
        match name {
            "dim" => self.dim as u64,
            "row_start" => 0,
            _ => self.rows as u64,
        }
    }

    fn twins() -> Vec<Arc<dyn Twin>> {
        super::native::native_twins::<Self>(
            "loopnest.add_rmsnorm.twin.avx512",
            "loopnest.add_rmsnorm.twin.avx2",
            "loopnest.add_rmsnorm.twin.neon",
        )
    }

    fn twin_check() -> Arc<dyn TwinCheck> {
        Arc::new(validation::checker())
    }

    fn bench() -> Option<Arc<dyn weft_kernel::Workbench>> {
        Some(Arc::new(validation::AddRmsNormBench))
    }
}

/// A placed `loopnest.add_rmsnorm` kernel.
pub type AddRmsNormKernel = Placed<AddRmsNorm>;

impl Placed<AddRmsNorm> {
    /// `x += y`, then `out = rmsnorm(x) · w`, for every row.
    pub fn run(
        &self,
        x: &mut [f32],
        y: &[f32],
        w: &[f32],
        out: &mut [f32],
        eps: f32,
    ) -> Result<(), Refusal> {
        let rows = x.len() / self.op.dim.max(1);
        self.run_rows(x, y, w, out, eps, 0..rows)
    }

    /// Rows `rows` only (a member view), lengths checked.
    pub fn run_rows(
        &self,
        x: &mut [f32],
        y: &[f32],
        w: &[f32],
        out: &mut [f32],
        eps: f32,
        rows: Range<usize>,
    ) -> Result<(), Refusal> {
        let args = AddRmsNormArgs::new(&self.op, x, y, w, out, eps, rows)?;
        // SAFETY: `new` checked every extent against the borrowed buffers,
        // which outlive the call.
        unsafe { self.kernel.call(&args) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::{assert_same, hunting_f32s, Rng};
    use crate::Add;

    /// The chain, through the two families' own interpreters: `x += y`
    /// over the rows' elements, then RMSNorm of those rows.
    fn chain(
        dim: usize,
        x: &mut [f32],
        y: &[f32],
        w: &[f32],
        out: &mut [f32],
        eps: f32,
        rows: Range<usize>,
    ) {
        let add = Add::new(x.len()).unwrap();
        add.reference(x, y, rows.start * dim..rows.end * dim)
            .unwrap();
        let norm = RmsNorm::new(dim, x.len() / dim).unwrap();
        norm.reference(x, w, out, eps, rows).unwrap();
    }

    fn check(dim: usize, total: usize, rows: Range<usize>, eps: f32, seed: u64) {
        let op = AddRmsNorm::new(dim, total).unwrap();
        let k = AddRmsNormKernel::of_arm(op).unwrap();
        let mut rng = Rng::new(seed);
        let x0 = hunting_f32s(&mut rng, total * dim);
        let y = hunting_f32s(&mut rng, total * dim);
        let w = hunting_f32s(&mut rng, dim);
        let out0 = vec![f32::from_bits(0x7fc0_dead); total * dim];
        let (mut xa, mut oa) = (x0.clone(), out0.clone());
        k.run_rows(&mut xa, &y, &w, &mut oa, eps, rows.clone())
            .unwrap();
        let (mut xi, mut oi) = (x0.clone(), out0.clone());
        op.reference(&mut xi, &y, &w, &mut oi, eps, rows.clone())
            .unwrap();
        let (mut xc, mut oc) = (x0, out0);
        chain(dim, &mut xc, &y, &w, &mut oc, eps, rows);
        let what = format!("add_rmsnorm dim {dim}");
        assert_same(&xi, &xc, &format!("{what}: fused interp x vs chain"));
        assert_same(&oi, &oc, &format!("{what}: fused interp out vs chain"));
        assert_same(&xa, &xi, &format!("{what}: arm x vs interp"));
        assert_same(&oa, &oi, &format!("{what}: arm out vs interp"));
    }

    #[test]
    fn fused_equals_the_chain_and_the_arm_equals_both() {
        for dim in (1..=20).chain([31, 32, 33, 47, 48, 49, 64, 65, 576]) {
            check(dim, 3, 0..3, 1e-5, dim as u64);
            check(dim, 4, 1..3, 1e-6, 100 + dim as u64);
        }
    }

    #[test]
    fn the_nest_is_two_passes_and_one_call() {
        let k = AddRmsNorm::new(576, 1).unwrap().fused_nest().unwrap();
        let trips = k.loop_trips(&|_| 1);
        let names: Vec<&str> = trips.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["rows", "squares", "scale", "scale.tail"]);
    }

    #[test]
    fn bad_lengths_are_refused_by_name() {
        let op = AddRmsNorm::new(8, 1).unwrap();
        let k = AddRmsNormKernel::of_arm(op).unwrap();
        let (mut x, mut out) = ([0f32; 8], [0f32; 8]);
        let e = k
            .run(&mut x, &[0.0; 7], &[0.0; 8], &mut out, 0.0)
            .unwrap_err();
        assert_eq!(e.name(), "bad-operand");
        let e = k
            .run(&mut x, &[0.0; 8], &[0.0; 8], &mut [0.0; 9], 0.0)
            .unwrap_err();
        assert_eq!(e.name(), "bad-operand");
        assert_eq!(
            AddRmsNorm::new(0, 1).unwrap_err().name(),
            "unsupported-geometry"
        );
    }
}
