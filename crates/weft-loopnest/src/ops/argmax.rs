//! `loopnest.argmax`: the index of the largest logit.
//!
//! # Contract
//!
//! Geometry: `len` (`1..=2^30`). The result is the **first** index of the
//! highest-ranked value, where NaN (either sign, any payload) ranks above
//! every number and numbers rank by IEEE order (`-0 == +0`, so of the two
//! the first wins). So: the first NaN if there is one, otherwise the first
//! maximum; all `-inf` gives 0. This answer does not depend on how the
//! scan is split, so the reduction order below fixes nothing but speed.
//!
//! Order (for the record, [`crate::ir::ReduceOp::ArgMax`]): 16 lanes,
//! element `i` into lane `i mod 16`, lanes from `(-inf, lane)`, the
//! halving fold. Output: one `u32`. The call does not split (`views:
//! None`): a 49152-logit scan is a few microseconds.

pub mod validation;

use std::mem::offset_of;
use std::sync::Arc;

use weft_kernel::{
    Aliasing, ArithmeticContract, Contract, FmaUse, Geometry, KernelArgs, MemberViews, NanRule,
    ReductionOrder, Refusal, Twin, TwinCheck,
};

use super::{bad, dim, interpret, NestOp, Placed, MAX_EXTENT};
use crate::interp::{Arg, Buffer};
use crate::ir::{
    Affine, Expr, Extent, Fold, Guard, Kernel, Param, ParamId, ParamKind, Reduce, ReduceOp, Stmt,
    Storage, ValId, VarId,
};

/// The family's name.
pub const FAMILY: &str = "loopnest.argmax";
/// The argument struct's name in contracts.
pub const ARGS_NAME: &str = "ArgmaxArgs";
/// Lanes of the scan.
pub const LANES: u32 = 16;

/// The shape of an argmax site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Argmax {
    /// Logits.
    pub len: usize,
}

/// The arguments of every `loopnest.argmax` body.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ArgmaxArgs {
    /// `len` f32 logits.
    pub logits: *const f32,
    /// One `u32`: the index.
    pub out: *mut u32,
    /// Logits (must equal the compiled shape's).
    pub len: usize,
}

// SAFETY: the `#[repr(C)]` struct of every contract naming ARGS_NAME. The
// call does not split: its range is the single unit `0..1`, and a
// restricted copy is the same call.
unsafe impl KernelArgs for ArgmaxArgs {
    const NAME: &'static str = ARGS_NAME;

    fn range(&self) -> std::ops::Range<u64> {
        0..1
    }

    fn restrict(&self, _range: std::ops::Range<u64>) -> Self {
        *self
    }
}

// SAFETY: plain data; the pointers are dereferenced only by a body called
// through `Kernel::call`, whose caller keeps them valid.
unsafe impl Send for ArgmaxArgs {}
// SAFETY: as for `Send`: a shared reference only lets threads copy it.
unsafe impl Sync for ArgmaxArgs {}

impl ArgmaxArgs {
    /// Arguments for the argmax of `logits` into `out`.
    pub fn new(op: &Argmax, logits: &[f32], out: &mut u32) -> Result<Self, Refusal> {
        if logits.len() != op.len {
            return Err(bad(
                "logits",
                format!("{} f32s, len is {}", logits.len(), op.len),
            ));
        }
        Ok(Self {
            logits: logits.as_ptr(),
            out,
            len: op.len,
        })
    }
}

const LOGITS: ParamId = ParamId(0);
const OUT: ParamId = ParamId(1);
const LEN: ParamId = ParamId(2);

fn params() -> Vec<Param> {
    let p = |name, off: usize, kind| Param {
        name,
        offset: off as u32,
        kind,
    };
    vec![
        p(
            "logits",
            offset_of!(ArgmaxArgs, logits),
            ParamKind::Buffer {
                storage: Storage::F32,
                written: false,
            },
        ),
        p(
            "out",
            offset_of!(ArgmaxArgs, out),
            ParamKind::Buffer {
                storage: Storage::U32,
                written: true,
            },
        ),
        p("len", offset_of!(ArgmaxArgs, len), ParamKind::Index),
    ]
}

impl Argmax {
    /// The shape for `len` logits.
    pub fn new(len: usize) -> Result<Self, Refusal> {
        Self::from_geometry(&Geometry::new().with("len", len as u64))
    }

    /// The reference: the nest run by the interpreter.
    pub fn reference(&self, logits: &[f32]) -> Result<u32, Refusal> {
        if logits.len() != self.len {
            return Err(bad(
                "logits",
                format!("{} f32s, len is {}", logits.len(), self.len),
            ));
        }
        let mut args = vec![
            Arg::Buffer(Buffer::F32(logits.to_vec())),
            Arg::Buffer(Buffer::U32(vec![u32::MAX])),
            Arg::Index(self.len as u64),
        ];
        interpret(self, &mut args)?;
        Ok(args[1].u32s().map_or(u32::MAX, |o| o[0]))
    }
}

// SAFETY: the guard fixes `len` to the compiled one; the body loads
// `logits[i]` for `i < len` and stores `out[0]`, inside what
// `ArgmaxArgs::new` checked.
unsafe impl NestOp for Argmax {
    const FAMILY: &'static str = FAMILY;
    const ARM: &'static str = "argmax.arm.nest";
    type Args = ArgmaxArgs;

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
        let best = ValId(0);
        Kernel {
            name: format!("loopnest_argmax_{}", self.len),
            params: params(),
            guards: vec![Guard::Eq(
                Extent::Param(LEN),
                Extent::Const(self.len as u64),
            )],
            body: vec![
                Stmt::Reduce(Reduce {
                    result: best,
                    op: ReduceOp::ArgMax,
                    name: "logits",
                    var: i,
                    start: 0,
                    end: self.len as u64,
                    width: 4,
                    lanes: LANES,
                    fold: Fold::Halving,
                    body: Vec::new(),
                    value: Expr::load_f32(LOGITS, Affine::var(i)),
                }),
                Stmt::Store {
                    buf: OUT,
                    at: Affine::constant(0),
                    value: Expr::Val(best),
                },
            ],
        }
    }

    fn contract(&self) -> Contract {
        Contract {
            family: FAMILY.to_owned(),
            geometry: self.geometry(),
            args: ARGS_NAME.to_owned(),
            arithmetic: ArithmeticContract {
                accumulator_lanes: LANES,
                reduction: ReductionOrder::Described(
                    "first index of the highest rank (NaN above numbers, -0 == +0); \
                     order-independent"
                        .to_owned(),
                ),
                fma: FmaUse::Never,
                nan: NanRule::ByBits,
                notes: "output is a u32 index".to_owned(),
            },
            aliasing: Aliasing::disjoint(),
        }
    }

    fn views(&self) -> Option<MemberViews> {
        None
    }

    fn work(&self) -> (u64, u64) {
        let n = self.len as u64;
        (n, 4 * n + 4)
    }

    fn index_at_geometry(&self, _name: &str) -> u64 {
        self.len as u64
    }

    fn twins() -> Vec<Arc<dyn Twin>> {
        super::native::native_twins::<Self>(
            "loopnest.argmax.twin.avx512",
            "loopnest.argmax.twin.avx2",
            "loopnest.argmax.twin.neon",
        )
    }

    fn twin_check() -> Arc<dyn TwinCheck> {
        Arc::new(validation::checker())
    }
}

/// A placed `loopnest.argmax` kernel.
pub type ArgmaxKernel = Placed<Argmax>;

impl Placed<Argmax> {
    /// The first index of the largest logit (the first NaN, if any).
    pub fn run(&self, logits: &[f32]) -> Result<u32, Refusal> {
        let mut out = u32::MAX;
        let args = ArgmaxArgs::new(&self.op, logits, &mut out)?;
        // SAFETY: `new` checked the length; `logits` and `out` outlive
        // the call.
        unsafe { self.kernel.call(&args) };
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::{hunting_f32s, Rng};

    /// The contract in plain Rust.
    fn first_max(x: &[f32]) -> u32 {
        if let Some(i) = x.iter().position(|v| v.is_nan()) {
            return i as u32;
        }
        let mut best = 0;
        for (i, v) in x.iter().enumerate() {
            if *v > x[best] {
                best = i;
            }
        }
        best as u32
    }

    fn check(k: &ArgmaxKernel, x: &[f32]) {
        let got = k.run(x).unwrap();
        let want = k.op().reference(x).unwrap();
        assert_eq!(got, want, "arm vs interpreter, len {}", x.len());
        assert_eq!(
            want,
            first_max(x),
            "interpreter vs contract, len {}",
            x.len()
        );
    }

    #[test]
    fn every_tail_length_and_special_values() {
        let mut rng = Rng::new(12);
        // The model's vocabulary once (natively: the interpreter is slow
        // under qemu), then every tail around the 16 lanes.
        let big: &[usize] = if cfg!(target_arch = "x86_64") {
            &[49152]
        } else {
            &[]
        };
        for &len in (1..=40).collect::<Vec<_>>().iter().chain(big) {
            let k = ArgmaxKernel::of_arm(Argmax::new(len).unwrap()).unwrap();
            let mut x: Vec<f32> = (0..len).map(|_| rng.normal()).collect();
            check(&k, &x);
            // Ties: the maximum twice, the later one first in its lane.
            x[len / 2] = 100.0;
            x[len - 1] = 100.0;
            check(&k, &x);
            // -0 and +0 as the maximum: the first wins.
            let z: Vec<f32> = (0..len)
                .map(|i| if i % 3 == 0 { -0.0 } else { -1.0 })
                .collect();
            check(&k, &z);
            // All -inf, and a NaN somewhere.
            check(&k, &vec![f32::NEG_INFINITY; len]);
            let mut n = vec![1.0; len];
            n[len - 1] = -f32::NAN;
            check(&k, &n);
            check(&k, &hunting_f32s(&mut rng, len));
        }
    }

    #[test]
    fn the_first_nan_wins_over_infinity() {
        let x = [f32::INFINITY, 1.0, f32::NAN, f32::NAN, f32::INFINITY];
        check(&ArgmaxKernel::of_arm(Argmax::new(5).unwrap()).unwrap(), &x);
        assert_eq!(Argmax::new(5).unwrap().reference(&x).unwrap(), 2);
    }

    #[test]
    fn bad_lengths_are_refused_by_name() {
        let k = ArgmaxKernel::of_arm(Argmax::new(4).unwrap()).unwrap();
        assert_eq!(k.run(&[0.0; 3]).unwrap_err().name(), "bad-operand");
        assert_eq!(Argmax::new(0).unwrap_err().name(), "unsupported-geometry");
    }
}
