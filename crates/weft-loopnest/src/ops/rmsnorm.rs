//! `loopnest.rmsnorm`: `y = x · (1/√(mean(x²) + eps)) · w`, row by row.
//!
//! # Contract
//!
//! Geometry: `dim` (`1..=2^24`, the row length) and `rows` (`≥ 1`, default
//! 1; for pricing and views only: one body serves any row count). For each
//! row `r` in `row_start..row_end`, with `x_r = x[r·dim .. (r+1)·dim]`,
//! every step one IEEE binary32 operation, round to nearest even, no FMA:
//!
//! 1. `ss = Σ x_r[i] ⊗ x_r[i]` over 16 lanes: element `i` into lane
//!    `i mod 16` (`lane ← lane ⊕ x²`), lanes from `+0`; then the halving
//!    fold: with lanes as four f32x4 `a0..a3` (lanes `4k..4k+3` in `ak`),
//!    `t = (a0 ⊕ a2) ⊕ (a1 ⊕ a3)`, `ss = (t0 ⊕ t2) ⊕ (t1 ⊕ t3)`.
//! 2. `mean = ss ⊘ f32(dim)` (`dim` is exact in f32).
//! 3. `scale = 1 ⊘ sqrt(mean ⊕ eps)` (sqrt correctly rounded).
//! 4. `y_r[i] = (x_r[i] ⊗ scale) ⊗ w[i]`.
//!
//! NaN outputs compare by class. `x` and `y` must not overlap. A call
//! computes rows `row_start..row_end` and writes only their outputs; splits
//! are along `rows`, granule 1.

pub mod validation;

use std::mem::offset_of;
use std::ops::Range;
use std::sync::Arc;

use weft_kernel::{
    Aliasing, ArithmeticContract, Contract, FmaUse, Geometry, KernelArgs, MemberViews, NanRule,
    ReductionOrder, Refusal, Twin, TwinCheck,
};

use super::{bad, check_range, dim, dim_or, interpret, NestOp, Placed, MAX_EXTENT};
use crate::interp::{Arg, Buffer};
use crate::ir::{
    Affine, Expr, Extent, Fold, Guard, Kernel, Loop, Param, ParamId, ParamKind, Reduce, ReduceOp,
    Stmt, Storage, Unary, ValId, VarId,
};

/// The family's name.
pub const FAMILY: &str = "loopnest.rmsnorm";
/// The argument struct's name in contracts.
pub const ARGS_NAME: &str = "RmsNormArgs";
/// Accumulator lanes of the sum of squares.
pub const LANES: u32 = 16;
/// The nest's row variable (fusions that build on this nest index by it).
pub const ROW_VAR: VarId = VarId(0);
/// The sum of squares' variable.
pub const SQUARES_VAR: VarId = VarId(1);
/// The sum of squares' name.
pub const SQUARES: &str = "squares";
/// The normalising loop's variable.
pub const SCALE_VAR: VarId = VarId(2);
/// The normalising loop's name.
pub const SCALE_LOOP: &str = "scale";
/// Values the nest binds (`ValId(0)..ValId(VALS)`): a fusion's own start here.
pub const VALS: u16 = 3;

/// The shape of an RMSNorm site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmsNorm {
    /// Row length.
    pub dim: usize,
    /// Rows at the site (pricing and views).
    pub rows: usize,
}

/// The arguments of every `loopnest.rmsnorm` body.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RmsNormArgs {
    /// `rows · dim` f32 inputs.
    pub x: *const f32,
    /// `dim` f32 weights.
    pub w: *const f32,
    /// `rows · dim` f32 outputs.
    pub y: *mut f32,
    /// Rows in `x` and `y`.
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
// body reads `x` and `w` and writes `y[r·dim..(r+1)·dim]` only for `r` in
// `row_start..row_end`, so copies restricted to disjoint row ranges write
// disjoint memory (and `x`, `w` are never written).
unsafe impl KernelArgs for RmsNormArgs {
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
unsafe impl Send for RmsNormArgs {}
// SAFETY: as for `Send`: a shared reference only lets threads copy it.
unsafe impl Sync for RmsNormArgs {}

impl RmsNormArgs {
    /// Arguments for rows `rows` of `y = rmsnorm(x) · w`, every length
    /// checked: `w` holds `dim` f32s, `x` and `y` the same whole number of
    /// rows.
    pub fn new(
        op: &RmsNorm,
        x: &[f32],
        w: &[f32],
        y: &mut [f32],
        eps: f32,
        rows: Range<usize>,
    ) -> Result<Self, Refusal> {
        let total = check_lengths(op, x, w, y)?;
        check_range("rows", &rows, total)?;
        Ok(Self {
            x: x.as_ptr(),
            w: w.as_ptr(),
            y: y.as_mut_ptr(),
            rows: total,
            dim: op.dim,
            row_start: rows.start,
            row_end: rows.end,
            eps,
        })
    }
}

fn check_lengths(op: &RmsNorm, x: &[f32], w: &[f32], y: &[f32]) -> Result<usize, Refusal> {
    if w.len() != op.dim {
        return Err(bad("w", format!("{} f32s, dim is {}", w.len(), op.dim)));
    }
    if !x.len().is_multiple_of(op.dim) {
        return Err(bad(
            "x",
            format!("{} f32s is not rows of {}", x.len(), op.dim),
        ));
    }
    if y.len() != x.len() {
        return Err(bad("y", format!("{} f32s, x has {}", y.len(), x.len())));
    }
    Ok(x.len() / op.dim)
}

const X: ParamId = ParamId(0);
const W: ParamId = ParamId(1);
const Y: ParamId = ParamId(2);
const ROWS: ParamId = ParamId(3);
const DIM: ParamId = ParamId(4);
const ROW_START: ParamId = ParamId(5);
const ROW_END: ParamId = ParamId(6);
const EPS: ParamId = ParamId(7);

fn params() -> Vec<Param> {
    let buf = |written| ParamKind::Buffer {
        storage: Storage::F32,
        written,
    };
    let o = |off: usize| off as u32;
    vec![
        Param {
            name: "x",
            offset: o(offset_of!(RmsNormArgs, x)),
            kind: buf(false),
        },
        Param {
            name: "w",
            offset: o(offset_of!(RmsNormArgs, w)),
            kind: buf(false),
        },
        Param {
            name: "y",
            offset: o(offset_of!(RmsNormArgs, y)),
            kind: buf(true),
        },
        Param {
            name: "rows",
            offset: o(offset_of!(RmsNormArgs, rows)),
            kind: ParamKind::Index,
        },
        Param {
            name: "dim",
            offset: o(offset_of!(RmsNormArgs, dim)),
            kind: ParamKind::Index,
        },
        Param {
            name: "row_start",
            offset: o(offset_of!(RmsNormArgs, row_start)),
            kind: ParamKind::Index,
        },
        Param {
            name: "row_end",
            offset: o(offset_of!(RmsNormArgs, row_end)),
            kind: ParamKind::Index,
        },
        Param {
            name: "eps",
            offset: o(offset_of!(RmsNormArgs, eps)),
            kind: ParamKind::F32,
        },
    ]
}

impl RmsNorm {
    /// The shape for rows of `dim` (refused outside `1..=2^24`).
    pub fn new(dim: usize, rows: usize) -> Result<Self, Refusal> {
        Self::from_geometry(
            &Geometry::new()
                .with("dim", dim as u64)
                .with("rows", rows as u64),
        )
    }

    /// The reference: the nest run by the interpreter, on the same checks
    /// as [`RmsNormArgs::new`].
    pub fn reference(
        &self,
        x: &[f32],
        w: &[f32],
        y: &mut [f32],
        eps: f32,
        rows: Range<usize>,
    ) -> Result<(), Refusal> {
        let total = check_lengths(self, x, w, y)?;
        check_range("rows", &rows, total)?;
        let mut args = vec![
            Arg::Buffer(Buffer::F32(x.to_vec())),
            Arg::Buffer(Buffer::F32(w.to_vec())),
            Arg::Buffer(Buffer::F32(y.to_vec())),
            Arg::Index(total as u64),
            Arg::Index(self.dim as u64),
            Arg::Index(rows.start as u64),
            Arg::Index(rows.end as u64),
            Arg::F32(eps),
        ];
        interpret(self, &mut args)?;
        if let Some(out) = args[2].f32s() {
            y.copy_from_slice(out);
        }
        Ok(())
    }
}

// SAFETY: the guards fix `dim` to the compiled one and keep
// `row_start <= row_end <= rows`; every load is `x[r·dim + i]` or `w[i]`
// and every store `y[r·dim + i]` with `r < rows`, `i < dim`, inside the
// `rows · dim` and `dim` elements `RmsNormArgs::new` checked.
unsafe impl NestOp for RmsNorm {
    const FAMILY: &'static str = FAMILY;
    const ARM: &'static str = "rmsnorm.arm.nest";
    type Args = RmsNormArgs;

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
        let d = self.dim as i64;
        let (r, i, j) = (ROW_VAR, SQUARES_VAR, SCALE_VAR);
        let (ss, mean, scale) = (ValId(0), ValId(1), ValId(2));
        let x_at = |v: VarId| Expr::load_f32(X, Affine::var(v).plus_var(d, r));
        Kernel {
            name: format!("loopnest_rmsnorm_{}", self.dim),
            params: params(),
            guards: vec![
                Guard::Eq(Extent::Param(DIM), Extent::Const(self.dim as u64)),
                Guard::SumLe(vec![Extent::Param(ROW_START)], Extent::Param(ROW_END)),
                Guard::SumLe(vec![Extent::Param(ROW_END)], Extent::Param(ROWS)),
            ],
            body: vec![Stmt::Loop(Loop {
                name: "rows",
                var: r,
                start: Extent::Param(ROW_START),
                end: Extent::Param(ROW_END),
                width: 1,
                granule: 1,
                body: vec![
                    Stmt::Reduce(Reduce {
                        result: ss,
                        op: ReduceOp::Sum,
                        name: SQUARES,
                        var: i,
                        start: 0,
                        end: self.dim as u64,
                        width: 4,
                        lanes: LANES,
                        fold: Fold::Halving,
                        body: Vec::new(),
                        value: x_at(i).times(x_at(i)),
                    }),
                    Stmt::Let {
                        val: mean,
                        value: Expr::Val(ss).over(Expr::f32(self.dim as f32)),
                    },
                    Stmt::Let {
                        val: scale,
                        value: Expr::f32(1.0)
                            .over(Expr::Val(mean).plus(Expr::Param(EPS)).unary(Unary::Sqrt)),
                    },
                    Stmt::Loop(Loop {
                        name: SCALE_LOOP,
                        var: j,
                        start: Extent::Const(0),
                        end: Extent::Const(self.dim as u64),
                        width: 4,
                        granule: 1,
                        body: vec![Stmt::Store {
                            buf: Y,
                            at: Affine::var(j).plus_var(d, r),
                            value: x_at(j)
                                .times(Expr::Val(scale))
                                .times(Expr::load_f32(W, Affine::var(j))),
                        }],
                    }),
                ],
            })],
        }
    }

    fn contract(&self) -> Contract {
        Contract {
            family: FAMILY.to_owned(),
            geometry: self.geometry(),
            args: ARGS_NAME.to_owned(),
            arithmetic: ArithmeticContract {
                accumulator_lanes: LANES,
                reduction: ReductionOrder::Strided {
                    lanes: LANES,
                    fold: "halving: (a0+a2)+(a1+a3) over f32x4 ak = lanes 4k..4k+3, \
                           then (l0+l2)+(l1+l3)"
                        .to_owned(),
                },
                fma: FmaUse::Never,
                nan: NanRule::ByClass,
                notes: "ss = sum of x*x (lane i mod 16); mean = ss/f32(dim); \
                        scale = 1/sqrt(mean+eps); y = (x*scale)*w"
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
        (r * (4 * d + 3), 4 * (2 * r * d + d))
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
            "loopnest.rmsnorm.twin.avx512",
            "loopnest.rmsnorm.twin.avx2",
            "loopnest.rmsnorm.twin.neon",
        )
    }

    fn twin_check() -> Arc<dyn TwinCheck> {
        Arc::new(validation::checker())
    }
}

/// A placed `loopnest.rmsnorm` kernel.
pub type RmsNormKernel = Placed<RmsNorm>;

impl Placed<RmsNorm> {
    /// `y = rmsnorm(x) · w` for every row.
    pub fn run(&self, x: &[f32], w: &[f32], y: &mut [f32], eps: f32) -> Result<(), Refusal> {
        let rows = x.len() / self.op.dim.max(1);
        self.run_rows(x, w, y, eps, 0..rows)
    }

    /// Rows `rows` only (a member view), lengths checked.
    pub fn run_rows(
        &self,
        x: &[f32],
        w: &[f32],
        y: &mut [f32],
        eps: f32,
        rows: Range<usize>,
    ) -> Result<(), Refusal> {
        let args = RmsNormArgs::new(&self.op, x, w, y, eps, rows)?;
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

    fn check(dim: usize, rows: usize, eps: f32, seed: u64) {
        let op = RmsNorm::new(dim, rows).expect("shape");
        let k = RmsNormKernel::of_arm(op).expect("arm");
        let mut rng = Rng::new(seed);
        let x = hunting_f32s(&mut rng, rows * dim);
        let w = hunting_f32s(&mut rng, dim);
        let mut got = vec![f32::from_bits(0x7fc0_dead); rows * dim];
        let mut want = got.clone();
        k.run(&x, &w, &mut got, eps).expect("run");
        op.reference(&x, &w, &mut want, eps, 0..rows)
            .expect("reference");
        assert_same(&got, &want, &format!("rmsnorm dim {dim} rows {rows}"));
    }

    #[test]
    fn arm_equals_interpreter_on_every_tail_around_the_lanes() {
        for dim in (1..=20).chain([31, 32, 33, 47, 48, 49, 63, 64, 65, 576]) {
            check(dim, 2, 1e-5, dim as u64);
        }
    }

    #[test]
    fn arm_equals_interpreter_with_special_eps() {
        for eps in [
            0.0,
            -0.0,
            1e-5,
            f32::MIN_POSITIVE,
            1e-45,
            f32::INFINITY,
            f32::NAN,
        ] {
            check(24, 3, eps, eps.to_bits() as u64);
        }
    }

    #[test]
    fn interpreter_follows_the_written_contract() {
        // The contract's steps in plain Rust, for one row.
        let dim = 37;
        let op = RmsNorm::new(dim, 1).unwrap();
        let mut rng = Rng::new(5);
        let x: Vec<f32> = (0..dim).map(|_| rng.normal()).collect();
        let w: Vec<f32> = (0..dim).map(|_| rng.normal()).collect();
        let mut lanes = [0f32; 16];
        for (i, v) in x.iter().enumerate() {
            lanes[i % 16] += v * v;
        }
        let a: Vec<[f32; 4]> = (0..4)
            .map(|k| [0, 1, 2, 3].map(|l| lanes[4 * k + l]))
            .collect();
        let t: Vec<f32> = (0..4)
            .map(|l| (a[0][l] + a[2][l]) + (a[1][l] + a[3][l]))
            .collect();
        let ss = (t[0] + t[2]) + (t[1] + t[3]);
        let scale = 1.0 / (ss / dim as f32 + 1e-5).sqrt();
        let want: Vec<f32> = x.iter().zip(&w).map(|(x, w)| (x * scale) * w).collect();
        let mut got = vec![0f32; dim];
        op.reference(&x, &w, &mut got, 1e-5, 0..1).unwrap();
        assert_same(&got, &want, "contract by hand");
    }

    #[test]
    fn row_splits_are_bit_identical_and_touch_only_their_rows() {
        let (dim, rows) = (20, 7);
        let op = RmsNorm::new(dim, rows).unwrap();
        let k = RmsNormKernel::of_arm(op).unwrap();
        let mut rng = Rng::new(11);
        let x = hunting_f32s(&mut rng, rows * dim);
        let w = hunting_f32s(&mut rng, dim);
        let mut whole = vec![0f32; rows * dim];
        k.run(&x, &w, &mut whole, 1e-6).unwrap();
        let views = op.views().expect("rows split");
        let mut parts = vec![f32::from_bits(0x7fc0_beef); rows * dim];
        for r in views.split(3) {
            k.run_rows(&x, &w, &mut parts, 1e-6, r.start as usize..r.end as usize)
                .unwrap();
        }
        assert_same(&parts, &whole, "split");
        let mut one = vec![-1f32; rows * dim];
        k.run_rows(&x, &w, &mut one, 1e-6, 2..4).unwrap();
        assert!(one[..2 * dim]
            .iter()
            .chain(&one[4 * dim..])
            .all(|v| *v == -1.0));
    }

    #[test]
    fn bad_lengths_and_geometries_are_refused_by_name() {
        let op = RmsNorm::new(8, 1).unwrap();
        let k = RmsNormKernel::of_arm(op).unwrap();
        let mut y = [0f32; 8];
        assert_eq!(
            k.run(&[0.0; 8], &[0.0; 7], &mut y, 0.0).unwrap_err().name(),
            "bad-operand"
        );
        assert_eq!(
            k.run(&[0.0; 9], &[0.0; 8], &mut y, 0.0).unwrap_err().name(),
            "bad-operand"
        );
        let e = k
            .run_rows(&[0.0; 8], &[0.0; 8], &mut y, 0.0, 0..2)
            .unwrap_err();
        assert_eq!(e.name(), "bad-operand");
        assert_eq!(
            RmsNorm::new(0, 1).unwrap_err().name(),
            "unsupported-geometry"
        );
        let e = RmsNorm::from_geometry(&Geometry::new()).unwrap_err();
        assert_eq!(e.name(), "missing-dimension");
    }
}
