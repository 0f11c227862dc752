//! `loopnest.silu_mul`: the SiLU-gated product `h[i] = silu(g[i]) · u[i]`.
//!
//! # Contract
//!
//! Geometry: `len` (`1..=2^30`). For each `i` in `start..end`, one IEEE
//! binary32 operation a step, no FMA:
//!
//! `e = exp(−g[i])` (correctly rounded: the elementwise family's exp,
//! the same bits on every ISA), `s = g[i] ⊘ (1 ⊕ e)`, `h[i] = s ⊗ u[i]`.
//!
//! So `silu(−inf) = NaN` (`−inf/inf`, as `x/(1+exp(−x))` gives in C), and
//! `silu(x) = −0` for `x` below about `−88.7` (`exp` overflows to inf).
//! NaNs compare by class. `h` may be `g` itself (in place); no other
//! overlap is allowed. Splits are along `len` with granule 16 (one cache
//! line of f32, so threads never share a line of `h`).
//!
//! # Family layout
//!
//! This file is the contract, the shape, the nest (the arm and, through
//! the interpreter, the reference) and the arguments; [`twins`] names the
//! bodies Weft emits itself (x64 AVX-512 and AVX2, arm64 NEON, from
//! weft-elementwise's exp-based maps) and [`validation`] the cases that
//! judge them against the arm ([`NestOp::twin_check`]) and race them
//! ([`NestOp::bench`]).

pub mod twins;
pub mod validation;

use std::mem::offset_of;
use std::ops::Range;

use weft_kernel::{
    Aliasing, ArithmeticContract, Contract, FmaUse, Geometry, KernelArgs, MemberViews, NanRule,
    ReductionOrder, Refusal,
};
use weft_libm::ELEMENTWISE_TABLE;

use std::sync::Arc;

use weft_kernel::{Twin, TwinCheck, Workbench};

use super::{bad, check_range, dim, interpret, NestOp, Placed, MAX_EXTENT};
use crate::interp::{Arg, Buffer};
use crate::ir::{
    Affine, Expr, Extent, Guard, Kernel, Loop, Param, ParamId, ParamKind, Stmt, Storage, Unary,
    ValId, VarId,
};

/// The family's name.
pub const FAMILY: &str = "loopnest.silu_mul";
/// The argument struct's name in contracts.
pub const ARGS_NAME: &str = "SiluMulArgs";

/// The shape of a SiLU-gated product site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiluMul {
    /// Elements.
    pub len: usize,
}

/// The arguments of every `loopnest.silu_mul` body.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SiluMulArgs {
    /// `len` f32 gates.
    pub g: *const f32,
    /// `len` f32 values.
    pub u: *const f32,
    /// `len` f32 outputs (may equal `g`).
    pub h: *mut f32,
    /// Must be `ELEMENTWISE_TABLE.as_ptr()` (exp's constants).
    pub table: *const u64,
    /// Elements in each buffer.
    pub len: usize,
    /// First element computed.
    pub start: usize,
    /// One past the last element computed.
    pub end: usize,
}

// SAFETY: the `#[repr(C)]` struct of every contract naming ARGS_NAME.
// Element `i`'s output depends only on `g[i]` and `u[i]` and a body writes
// only `h[start..end]`, so copies over disjoint ranges write disjoint
// memory and read nothing another writes (also in place, `h == g`).
unsafe impl KernelArgs for SiluMulArgs {
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
unsafe impl Send for SiluMulArgs {}
// SAFETY: as for `Send`: a shared reference only lets threads copy it.
unsafe impl Sync for SiluMulArgs {}

fn check(op: &SiluMul, g: usize, u: usize, h: usize, range: &Range<usize>) -> Result<(), Refusal> {
    for (name, n) in [("g", g), ("u", u), ("h", h)] {
        if n != op.len {
            return Err(bad(name, format!("{n} f32s, len is {}", op.len)));
        }
    }
    check_range("range", range, op.len)
}

impl SiluMulArgs {
    /// Arguments for `h[i] = silu(g[i]) · u[i]`, `i` in `range`.
    pub fn new(
        op: &SiluMul,
        g: &[f32],
        u: &[f32],
        h: &mut [f32],
        range: Range<usize>,
    ) -> Result<Self, Refusal> {
        check(op, g.len(), u.len(), h.len(), &range)?;
        Ok(Self {
            g: g.as_ptr(),
            u: u.as_ptr(),
            h: h.as_mut_ptr(),
            table: ELEMENTWISE_TABLE.as_ptr(),
            len: op.len,
            start: range.start,
            end: range.end,
        })
    }

    /// In place: `gh[i] = silu(gh[i]) · u[i]`.
    pub fn in_place(
        op: &SiluMul,
        gh: &mut [f32],
        u: &[f32],
        range: Range<usize>,
    ) -> Result<Self, Refusal> {
        check(op, gh.len(), u.len(), gh.len(), &range)?;
        Ok(Self {
            g: gh.as_ptr(),
            u: u.as_ptr(),
            h: gh.as_mut_ptr(),
            table: ELEMENTWISE_TABLE.as_ptr(),
            len: op.len,
            start: range.start,
            end: range.end,
        })
    }
}

const G: ParamId = ParamId(0);
const U: ParamId = ParamId(1);
const H: ParamId = ParamId(2);
const LEN: ParamId = ParamId(4);
const START: ParamId = ParamId(5);
const END: ParamId = ParamId(6);

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
        p("g", offset_of!(SiluMulArgs, g), f32_buf(false)),
        p("u", offset_of!(SiluMulArgs, u), f32_buf(false)),
        p("h", offset_of!(SiluMulArgs, h), f32_buf(true)),
        p("table", offset_of!(SiluMulArgs, table), ParamKind::ExpTable),
        p("len", offset_of!(SiluMulArgs, len), ParamKind::Index),
        p("start", offset_of!(SiluMulArgs, start), ParamKind::Index),
        p("end", offset_of!(SiluMulArgs, end), ParamKind::Index),
    ]
}

impl SiluMul {
    /// The shape for `len` elements.
    pub fn new(len: usize) -> Result<Self, Refusal> {
        Self::from_geometry(&Geometry::new().with("len", len as u64))
    }

    /// The reference: the nest run by the interpreter.
    pub fn reference(
        &self,
        g: &[f32],
        u: &[f32],
        h: &mut [f32],
        range: Range<usize>,
    ) -> Result<(), Refusal> {
        check(self, g.len(), u.len(), h.len(), &range)?;
        let mut args = vec![
            Arg::Buffer(Buffer::F32(g.to_vec())),
            Arg::Buffer(Buffer::F32(u.to_vec())),
            Arg::Buffer(Buffer::F32(h.to_vec())),
            Arg::ExpTable,
            Arg::Index(self.len as u64),
            Arg::Index(range.start as u64),
            Arg::Index(range.end as u64),
        ];
        interpret(self, &mut args)?;
        if let Some(out) = args[2].f32s() {
            h.copy_from_slice(out);
        }
        Ok(())
    }
}

// SAFETY: the guards keep `start <= end <= len`; the body loads `g[i]`,
// `u[i]` and stores `h[i]` for `i` in `start..end`, inside the `len`
// elements `SiluMulArgs::new` checked, and reads exp's constants through
// `table`, which the constructor sets to ELEMENTWISE_TABLE.
unsafe impl NestOp for SiluMul {
    const FAMILY: &'static str = FAMILY;
    const ARM: &'static str = "silu_mul.arm.nest";
    type Args = SiluMulArgs;

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
        let gv = ValId(0);
        let one_plus_e = Expr::f32(1.0).plus(Expr::Val(gv).unary(Unary::Neg).unary(Unary::Exp));
        Kernel {
            name: "loopnest_silu_mul".to_owned(),
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
                body: vec![
                    Stmt::Let {
                        val: gv,
                        value: Expr::load_f32(G, Affine::var(i)),
                    },
                    Stmt::Store {
                        buf: H,
                        at: Affine::var(i),
                        value: Expr::Val(gv)
                            .over(one_plus_e)
                            .times(Expr::load_f32(U, Affine::var(i))),
                    },
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
                accumulator_lanes: 1,
                reduction: ReductionOrder::None,
                fma: FmaUse::Never,
                nan: NanRule::ByClass,
                notes: "h = (g / (1 + exp(-g))) * u; exp correctly rounded \
                        (weft_elementwise)"
                    .to_owned(),
            },
            aliasing: Aliasing::disjoint().may_equal("g", "h"),
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
        (n * 34, 12 * n)
    }

    fn index_at_geometry(&self, name: &str) -> u64 {
        match name {
            "start" => 0,
            _ => self.len as u64,
        }
    }

    fn twins() -> Vec<Arc<dyn Twin>> {
        twins::twins()
    }

    fn twin_check() -> Arc<dyn TwinCheck> {
        Arc::new(validation::checker())
    }

    fn bench() -> Option<Arc<dyn Workbench>> {
        Some(Arc::new(validation::SiluMulBench))
    }
}

/// A placed `loopnest.silu_mul` kernel.
pub type SiluMulKernel = Placed<SiluMul>;

impl Placed<SiluMul> {
    /// `h[i] = silu(g[i]) · u[i]` for every element.
    pub fn run(&self, g: &[f32], u: &[f32], h: &mut [f32]) -> Result<(), Refusal> {
        self.run_range(g, u, h, 0..self.op.len)
    }

    /// Elements `range` only (a member view).
    pub fn run_range(
        &self,
        g: &[f32],
        u: &[f32],
        h: &mut [f32],
        range: Range<usize>,
    ) -> Result<(), Refusal> {
        let args = SiluMulArgs::new(&self.op, g, u, h, range)?;
        // SAFETY: `new` checked every extent against the borrowed buffers,
        // which outlive the call.
        unsafe { self.kernel.call(&args) };
        Ok(())
    }

    /// In place: `gh[i] = silu(gh[i]) · u[i]`.
    pub fn run_in_place(&self, gh: &mut [f32], u: &[f32]) -> Result<(), Refusal> {
        let args = SiluMulArgs::in_place(&self.op, gh, u, 0..self.op.len)?;
        // SAFETY: as in `run_range`; `h == g` is the one overlap the
        // contract allows (each element is read before it is written).
        unsafe { self.kernel.call(&args) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::{assert_same, hunting_f32s, Rng};

    use super::validation::EXP_SLOW_INPUTS as SLOW_EXP;

    /// `k` (built for `k.op().len` elements) against the interpreter on
    /// elements `range`, out of place and in place.
    fn check(k: &SiluMulKernel, g: &[f32], u: &[f32], range: Range<usize>) {
        let op = *k.op();
        let mut got = vec![-1f32; op.len];
        let mut want = got.clone();
        k.run_range(g, u, &mut got, range.clone()).unwrap();
        op.reference(g, u, &mut want, range.clone()).unwrap();
        assert_same(&got, &want, &format!("silu_mul {range:?}"));
        if range == (0..op.len) {
            let mut inplace = g.to_vec();
            k.run_in_place(&mut inplace, u).unwrap();
            assert_same(&inplace, &want, "silu_mul in place");
        }
    }

    #[test]
    fn arm_equals_interpreter_on_every_tail_and_hunting_input() {
        // One body serves every range: lengths 0..=19 from starts 0..=4
        // cover every tail after whole vectors, and unaligned starts.
        let mut rng = Rng::new(21);
        let len = 24;
        let k = SiluMulKernel::of_arm(SiluMul::new(len).unwrap()).unwrap();
        for n in 0..=19 {
            for start in 0..=4 {
                let g = hunting_f32s(&mut rng, len);
                let u = hunting_f32s(&mut rng, len);
                check(&k, &g, &u, start..start + n);
            }
        }
        for len in [1usize, 7, 1536] {
            let k = SiluMulKernel::of_arm(SiluMul::new(len).unwrap()).unwrap();
            let g = hunting_f32s(&mut rng, len);
            let u = hunting_f32s(&mut rng, len);
            check(&k, &g, &u, 0..len);
        }
    }

    #[test]
    fn exp_slow_path_inputs_in_every_lane() {
        // silu evaluates exp(-g): negate the slow-path inputs of exp.
        let k = SiluMulKernel::of_arm(SiluMul::new(9).unwrap()).unwrap();
        for bits in SLOW_EXP {
            for pos in 0..9 {
                let mut g: Vec<f32> = (0..9).map(|i| i as f32 * 0.7 - 3.0).collect();
                g[pos] = -f32::from_bits(bits);
                check(&k, &g, &[1.5; 9], 0..9);
            }
        }
    }

    #[test]
    fn interpreter_follows_the_written_contract() {
        use weft_libm::reference::exp_f32;
        let g = [
            0.0f32,
            -0.0,
            1.0,
            -1.0,
            20.0,
            -20.0,
            -100.0,
            f32::NEG_INFINITY,
            3.5,
        ];
        let u = [2.0f32; 9];
        let op = SiluMul::new(9).unwrap();
        let mut h = [0f32; 9];
        op.reference(&g, &u, &mut h, 0..9).unwrap();
        let want: Vec<f32> = g.iter().map(|x| (x / (1.0 + exp_f32(-x))) * 2.0).collect();
        assert_same(&h, &want, "contract by hand");
        assert!(h[7].is_nan());
        assert_eq!(h[6].to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn element_splits_are_bit_identical() {
        let len = 100;
        let op = SiluMul::new(len).unwrap();
        let k = SiluMulKernel::of_arm(op).unwrap();
        let mut rng = Rng::new(5);
        let g = hunting_f32s(&mut rng, len);
        let u = hunting_f32s(&mut rng, len);
        let mut whole = vec![0f32; len];
        k.run(&g, &u, &mut whole).unwrap();
        let mut parts = vec![-1f32; len];
        for r in op.views().unwrap().split(3) {
            assert_eq!(r.start % 16, 0);
            k.run_range(&g, &u, &mut parts, r.start as usize..r.end as usize)
                .unwrap();
        }
        assert_same(&parts, &whole, "split");
    }

    #[test]
    fn bad_lengths_are_refused_by_name() {
        let op = SiluMul::new(8).unwrap();
        let k = SiluMulKernel::of_arm(op).unwrap();
        let mut h = [0f32; 8];
        assert_eq!(
            k.run(&[0.0; 7], &[0.0; 8], &mut h).unwrap_err().name(),
            "bad-operand"
        );
        let e = k.run_range(&[0.0; 8], &[0.0; 8], &mut h, 3..9).unwrap_err();
        assert_eq!(e.name(), "bad-operand");
        assert_eq!(SiluMul::new(0).unwrap_err().name(), "unsupported-geometry");
    }
}
