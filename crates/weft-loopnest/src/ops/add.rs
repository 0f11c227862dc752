//! `loopnest.add`: the residual add `x[i] = x[i] ⊕ y[i]`, in place.
//!
//! # Contract
//!
//! Geometry: `len` (`1..=2^30`). For each `i` in `start..end`, one IEEE
//! binary32 addition, round to nearest even (`x` the left operand). NaNs
//! compare by class. `y` must not overlap `x`. Splits are along `len` with
//! granule 16 (a cache line of f32).

pub mod validation;

use std::mem::offset_of;
use std::ops::Range;
use std::sync::Arc;

use weft_kernel::{
    Aliasing, ArithmeticContract, Contract, FmaUse, Geometry, KernelArgs, MemberViews, NanRule,
    ReductionOrder, Refusal, Twin, TwinCheck,
};

use super::{bad, check_range, dim, interpret, NestOp, Placed, MAX_EXTENT};
use crate::interp::{Arg, Buffer};
use crate::ir::{
    Affine, Expr, Extent, Guard, Kernel, Loop, Param, ParamId, ParamKind, Stmt, Storage, VarId,
};

/// The family's name.
pub const FAMILY: &str = "loopnest.add";
/// The argument struct's name in contracts.
pub const ARGS_NAME: &str = "AddArgs";

/// The shape of a residual-add site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Add {
    /// Elements.
    pub len: usize,
}

/// The arguments of every `loopnest.add` body.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AddArgs {
    /// `len` f32s, updated in place.
    pub x: *mut f32,
    /// `len` f32s added.
    pub y: *const f32,
    /// Elements in each buffer.
    pub len: usize,
    /// First element updated.
    pub start: usize,
    /// One past the last element updated.
    pub end: usize,
}

// SAFETY: the `#[repr(C)]` struct of every contract naming ARGS_NAME.
// Element `i` of `x` depends only on `x[i]` and `y[i]` and a body writes
// only `x[start..end]`, so copies over disjoint ranges touch disjoint
// elements of `x` (and `y` is never written).
unsafe impl KernelArgs for AddArgs {
    const NAME: &'static str = ARGS_NAME;

    fn range(&self) -> Range<u64> {
        self.start as u64..self.end as u64
    }

    fn restrict(&self, range: Range<u64>) -> Self {
        Self {
            start: range.start as usize,
            end: range.end as usize,
            ..*self
        }
    }
}

// SAFETY: plain data; the pointers are dereferenced only by a body called
// through `Kernel::call`, whose caller keeps them valid.
unsafe impl Send for AddArgs {}
// SAFETY: as for `Send`: a shared reference only lets threads copy it.
unsafe impl Sync for AddArgs {}

fn check(op: &Add, x: usize, y: usize, range: &Range<usize>) -> Result<(), Refusal> {
    for (name, n) in [("x", x), ("y", y)] {
        if n != op.len {
            return Err(bad(name, format!("{n} f32s, len is {}", op.len)));
        }
    }
    check_range("range", range, op.len)
}

impl AddArgs {
    /// Arguments for `x[i] += y[i]`, `i` in `range`.
    pub fn new(op: &Add, x: &mut [f32], y: &[f32], range: Range<usize>) -> Result<Self, Refusal> {
        check(op, x.len(), y.len(), &range)?;
        Ok(Self {
            x: x.as_mut_ptr(),
            y: y.as_ptr(),
            len: op.len,
            start: range.start,
            end: range.end,
        })
    }
}

const X: ParamId = ParamId(0);
const Y: ParamId = ParamId(1);
const LEN: ParamId = ParamId(2);
const START: ParamId = ParamId(3);
const END: ParamId = ParamId(4);

fn params() -> Vec<Param> {
    let f32_buf = |written| ParamKind::Buffer {
        storage: Storage::F32,
        written,
    };
    let p = |name, off: usize, kind| Param {
        name,
        offset: off as u32,
        kind,
    };
    vec![
        p("x", offset_of!(AddArgs, x), f32_buf(true)),
        p("y", offset_of!(AddArgs, y), f32_buf(false)),
        p("len", offset_of!(AddArgs, len), ParamKind::Index),
        p("start", offset_of!(AddArgs, start), ParamKind::Index),
        p("end", offset_of!(AddArgs, end), ParamKind::Index),
    ]
}

impl Add {
    /// The shape for `len` elements.
    pub fn new(len: usize) -> Result<Self, Refusal> {
        Self::from_geometry(&Geometry::new().with("len", len as u64))
    }

    /// The reference: the nest run by the interpreter.
    pub fn reference(&self, x: &mut [f32], y: &[f32], range: Range<usize>) -> Result<(), Refusal> {
        check(self, x.len(), y.len(), &range)?;
        let mut args = vec![
            Arg::Buffer(Buffer::F32(x.to_vec())),
            Arg::Buffer(Buffer::F32(y.to_vec())),
            Arg::Index(self.len as u64),
            Arg::Index(range.start as u64),
            Arg::Index(range.end as u64),
        ];
        interpret(self, &mut args)?;
        if let Some(out) = args[0].f32s() {
            x.copy_from_slice(out);
        }
        Ok(())
    }
}

// SAFETY: the guards keep `start <= end <= len`; the body loads `x[i]`,
// `y[i]` and stores `x[i]` for `i` in `start..end`, inside the `len`
// elements `AddArgs::new` checked.
unsafe impl NestOp for Add {
    const FAMILY: &'static str = FAMILY;
    const ARM: &'static str = "add.arm.nest";
    type Args = AddArgs;

    fn from_geometry(g: &Geometry) -> Result<Self, Refusal> {
        Ok(Self {
            len: dim(g, "len", 1, MAX_EXTENT)?,
        })
    }

    fn geometry(&self) -> Geometry {
        Geometry::new().with("len", self.len as u64)
    }

    fn nest(&self) -> Kernel {
        let i = VarId(0);
        Kernel {
            name: "loopnest_add".to_owned(),
            params: params(),
            guards: vec![
                Guard::SumLe(vec![Extent::Param(START)], Extent::Param(END)),
                Guard::SumLe(vec![Extent::Param(END)], Extent::Param(LEN)),
            ],
            body: vec![Stmt::Loop(Loop {
                name: "elements",
                var: i,
                start: Extent::Param(START),
                end: Extent::Param(END),
                width: 4,
                granule: 1,
                body: vec![Stmt::Store {
                    buf: X,
                    at: Affine::var(i),
                    value: Expr::load_f32(X, Affine::var(i))
                        .plus(Expr::load_f32(Y, Affine::var(i))),
                }],
            })],
        }
    }

    fn contract(&self) -> Contract {
        Contract {
            family: FAMILY.to_owned(),
            geometry: self.geometry(),
            args: ARGS_NAME.to_owned(),
            arithmetic: ArithmeticContract {
                accumulator_lanes: 1,
                reduction: ReductionOrder::None,
                fma: FmaUse::Never,
                nan: NanRule::ByClass,
                notes: "x = x + y".to_owned(),
            },
            aliasing: Aliasing::disjoint(),
        }
    }

    fn views(&self) -> Option<MemberViews> {
        Some(MemberViews {
            axis: "len".to_owned(),
            extent: self.len as u64,
            granule: 16,
        })
    }

    fn work(&self) -> (u64, u64) {
        let n = self.len as u64;
        (n, 12 * n)
    }

    fn index_at_geometry(&self, name: &str) -> u64 {
        match name {
            "start" => 0,
            _ => self.len as u64,
        }
    }

    fn twins() -> Vec<Arc<dyn Twin>> {
        super::native::native_twins::<Self>(
            "loopnest.add.twin.avx512",
            "loopnest.add.twin.avx2",
            "loopnest.add.twin.neon",
        )
    }

    fn twin_check() -> Arc<dyn TwinCheck> {
        Arc::new(validation::checker())
    }
}

/// A placed `loopnest.add` kernel.
pub type AddKernel = Placed<Add>;

impl Placed<Add> {
    /// `x[i] += y[i]` for every element.
    pub fn run(&self, x: &mut [f32], y: &[f32]) -> Result<(), Refusal> {
        self.run_range(x, y, 0..self.op.len)
    }

    /// Elements `range` only (a member view).
    pub fn run_range(&self, x: &mut [f32], y: &[f32], range: Range<usize>) -> Result<(), Refusal> {
        let args = AddArgs::new(&self.op, x, y, range)?;
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

    #[test]
    fn arm_equals_interpreter_on_every_tail_and_unaligned_start() {
        let mut rng = Rng::new(1);
        for len in (1..=21).chain([576, 1536]) {
            let op = Add::new(len).unwrap();
            let k = AddKernel::of_arm(op).unwrap();
            let x0 = hunting_f32s(&mut rng, len);
            let y = hunting_f32s(&mut rng, len);
            for start in 0..len.min(5) {
                let (mut a, mut b) = (x0.clone(), x0.clone());
                k.run_range(&mut a, &y, start..len).unwrap();
                op.reference(&mut b, &y, start..len).unwrap();
                assert_same(&a, &b, &format!("add len {len} from {start}"));
                assert!(a[..start]
                    .iter()
                    .zip(&x0)
                    .all(|(p, q)| p.to_bits() == q.to_bits()));
            }
        }
    }

    #[test]
    fn interpreter_is_plain_addition() {
        let x0 = [1.0f32, -0.0, f32::MAX, 1e-45, f32::INFINITY];
        let y = [2.0f32, 0.0, f32::MAX, -1e-45, f32::NEG_INFINITY];
        let mut x = x0;
        Add::new(5).unwrap().reference(&mut x, &y, 0..5).unwrap();
        let want: Vec<f32> = x0.iter().zip(&y).map(|(a, b)| a + b).collect();
        assert_same(&x, &want, "x + y");
    }

    #[test]
    fn element_splits_are_bit_identical() {
        let len = 70;
        let op = Add::new(len).unwrap();
        let k = AddKernel::of_arm(op).unwrap();
        let mut rng = Rng::new(2);
        let x0 = hunting_f32s(&mut rng, len);
        let y = hunting_f32s(&mut rng, len);
        let mut whole = x0.clone();
        k.run(&mut whole, &y).unwrap();
        let mut parts = x0;
        for r in op.views().unwrap().split(4) {
            k.run_range(&mut parts, &y, r.start as usize..r.end as usize)
                .unwrap();
        }
        assert_same(&parts, &whole, "split");
    }

    #[test]
    fn bad_lengths_are_refused_by_name() {
        let k = AddKernel::of_arm(Add::new(4).unwrap()).unwrap();
        assert_eq!(
            k.run(&mut [0.0; 4], &[0.0; 3]).unwrap_err().name(),
            "bad-operand"
        );
        assert_eq!(
            k.run_range(&mut [0.0; 4], &[0.0; 4], Range { start: 2, end: 1 })
                .unwrap_err()
                .name(),
            "bad-operand"
        );
    }
}
