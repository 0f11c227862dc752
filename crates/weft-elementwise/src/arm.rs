//! The elementwise arms: exp and erf in CLIF, compiled through weft-managed.
//!
//! Shape of every arm (`extern "C" fn(*const ElementwiseArgs)`):
//!
//! - vector loop, 4 elements a step: two 64-bit loads, each widened
//!   (`fvpromote_low`) to f64x2; the algorithm of `reference.rs`
//!   instantiated on f64x2 lanes; narrowed (`fvdemote`) and stored as two
//!   64-bit stores. For exp, the rounding test's two ends are narrowed too;
//!   if any lane of the 4 fails it, the step stores nothing and the scalar
//!   loop computes those 4 elements. Storing first and recomputing after
//!   would read back outputs as inputs when the call is in place.
//! - scalar loop: one element a step, the same algorithm on scalar f64, and
//!   for exp the double-double slow path and the exact rounding decision
//!   inline (no calls). It serves the tail and the failing vector steps.
//!
//! The table is read through `ElementwiseArgs::table`, so the code has no
//! relocations.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Endianness, Function, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use weft_kernel::{
    Aliasing, ArithmeticContract, Contract, Family, FmaUse, Geometry, Host, Isa, Kernel, LoopTrip,
    MemberViews, NanRule, NativeCode, Offer, ReductionOrder, Refusal, Site,
};
use weft_libm::clif::{elem_flags, round_dd_clif, Clif};
use weft_managed::arm_build::{build_native, host_isa};
use weft_managed::{ArmCode, ManagedError, Target};

use crate::reference;
use crate::{table, ElementwiseArgs, Func, ELEMENTWISE_TABLE};

/// Build the CLIF function of the `func` arm for `target`.
pub fn build_function(target: &Target, func: Func) -> Function {
    let mut f = target.leaf_function(&format!("elementwise_{}_arm", func.name()));
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut f, &mut fctx);
    let ptr = target.pointer_type();
    let trusted = MemFlagsData::trusted();
    let ef = elem_flags();
    let le = MemFlagsData::new().with_endianness(Endianness::Little);

    let entry = b.create_block();
    let vhead = b.create_block();
    let vbody = b.create_block();
    let shead = b.create_block();
    let sbody = b.create_block();
    let sdone = b.create_block();
    let exit = b.create_block();
    b.append_block_param(vhead, ptr);
    b.append_block_param(vbody, ptr);
    b.append_block_param(shead, ptr);
    b.append_block_param(shead, ptr);
    b.append_block_param(sbody, ptr);
    b.append_block_param(sbody, ptr);
    b.append_block_param(sdone, ptr);

    // entry: read the args.
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let args = b.block_params(entry)[0];
    let input = b.ins().load(ptr, trusted, args, 0);
    let output = b.ins().load(ptr, trusted, args, 8);
    let len = b.ins().load(ptr, trusted, args, 16);
    let tablep = b.ins().load(ptr, trusted, args, 24);
    let zero = b.ins().iconst(ptr, 0);
    b.ins().jump(vhead, &[zero.into()]);

    // vhead(i): a whole vector step left?
    b.switch_to_block(vhead);
    let i = b.block_params(vhead)[0];
    let i4 = b.ins().iadd_imm_s(i, 4);
    let fits = b.ins().icmp(IntCC::UnsignedLessThanOrEqual, i4, len);
    b.ins()
        .brif(fits, vbody, &[i.into()], shead, &[i.into(), len.into()]);

    // vbody(i): 4 elements as two f64x2 halves.
    b.switch_to_block(vbody);
    let i = b.block_params(vbody)[0];
    let off = b.ins().ishl_imm_u(i, 2);
    let src = b.ins().iadd(input, off);
    let dst = b.ins().iadd(output, off);
    let mut bad: Option<Value> = None;
    let mut outs = [zero; 2];
    for (h, out) in outs.iter_mut().enumerate() {
        let disp = (h * 8) as i32;
        let w = b.ins().load(types::I64, ef, src, disp);
        let w = b.ins().scalar_to_vector(types::I64X2, w);
        let x4 = b.ins().bitcast(types::F32X4, le, w);
        let x = b.ins().fvpromote_low(x4);
        let mut l = Clif {
            b: &mut b,
            vector: true,
            table: tablep,
        };
        let y = match func {
            Func::Exp => {
                let y = reference::exp_fast(&mut l, x);
                let (lo, hi) = reference::exp_fast_interval(&mut l, y);
                let dlo = l.b.ins().fvdemote(lo);
                let dhi = l.b.ins().fvdemote(hi);
                let ilo = l.b.ins().bitcast(types::I64X2, le, dlo);
                let ihi = l.b.ins().bitcast(types::I64X2, le, dhi);
                let d = l.b.ins().bxor(ilo, ihi);
                bad = Some(match bad {
                    None => d,
                    Some(p) => l.b.ins().bor(p, d),
                });
                dlo
            }
            Func::Erf => {
                let y = reference::erf_eval(&mut l, x);
                l.b.ins().fvdemote(y)
            }
        };
        let yi = b.ins().bitcast(types::I64X2, le, y);
        *out = b.ins().extractlane(yi, 0);
    }
    let next = b.ins().iadd_imm_s(i, 4);
    match bad {
        Some(bad) => {
            // A step with a slow lane stores nothing: the scalar path
            // recomputes all four from the input, which in place is still
            // the input only until this step's results are stored over it.
            let store = b.create_block();
            let any = b.ins().vany_true(bad);
            b.ins()
                .brif(any, shead, &[i.into(), next.into()], store, &[]);
            b.switch_to_block(store);
            b.ins().store(ef, outs[0], dst, 0);
            b.ins().store(ef, outs[1], dst, 8);
            b.ins().jump(vhead, &[next.into()]);
        }
        None => {
            b.ins().store(ef, outs[0], dst, 0);
            b.ins().store(ef, outs[1], dst, 8);
            b.ins().jump(vhead, &[next.into()]);
        }
    }

    // shead(j, end): scalar elements j..end.
    b.switch_to_block(shead);
    let j = b.block_params(shead)[0];
    let end = b.block_params(shead)[1];
    let more = b.ins().icmp(IntCC::UnsignedLessThan, j, end);
    b.ins()
        .brif(more, sbody, &[j.into(), end.into()], sdone, &[end.into()]);

    // sdone(end): finished, or back to the vector loop.
    b.switch_to_block(sdone);
    let end = b.block_params(sdone)[0];
    let all = b.ins().icmp(IntCC::Equal, end, len);
    b.ins().brif(all, exit, &[], vhead, &[end.into()]);

    // sbody(j, end): one element, full algorithm.
    b.switch_to_block(sbody);
    let j = b.block_params(sbody)[0];
    let end = b.block_params(sbody)[1];
    let off = b.ins().ishl_imm_u(j, 2);
    let src = b.ins().iadd(input, off);
    let dst = b.ins().iadd(output, off);
    let x32 = b.ins().load(types::F32, ef, src, 0);
    let x = b.ins().fpromote(types::F64, x32);
    let j1 = b.ins().iadd_imm_s(j, 1);
    match func {
        Func::Exp => {
            let slow = b.create_block();
            let fast_ok = b.create_block();
            let mut l = Clif {
                b: &mut b,
                vector: false,
                table: tablep,
            };
            let y = reference::exp_fast(&mut l, x);
            let (lo, hi) = reference::exp_fast_interval(&mut l, y);
            let flo = b.ins().fdemote(types::F32, lo);
            let fhi = b.ins().fdemote(types::F32, hi);
            let blo = b.ins().bitcast(types::I32, le, flo);
            let bhi = b.ins().bitcast(types::I32, le, fhi);
            let same = b.ins().icmp(IntCC::Equal, blo, bhi);
            b.ins().brif(same, fast_ok, &[], slow, &[]);

            b.switch_to_block(fast_ok);
            b.ins().store(ef, flo, dst, 0);
            b.ins().jump(shead, &[j1.into(), end.into()]);
            b.seal_block(fast_ok);

            b.switch_to_block(slow);
            let mut l = Clif {
                b: &mut b,
                vector: false,
                table: tablep,
            };
            let d = reference::exp_slow(&mut l, x);
            let r = round_dd_clif(&mut b, d.hi, d.lo, table::EXP_SLOW_ERR);
            b.ins().store(ef, r, dst, 0);
            b.ins().jump(shead, &[j1.into(), end.into()]);
            b.seal_block(slow);
        }
        Func::Erf => {
            let mut l = Clif {
                b: &mut b,
                vector: false,
                table: tablep,
            };
            let y = reference::erf_eval(&mut l, x);
            let r = b.ins().fdemote(types::F32, y);
            b.ins().store(ef, r, dst, 0);
            b.ins().jump(shead, &[j1.into(), end.into()]);
        }
    }

    b.switch_to_block(exit);
    b.ins().return_(&[]);
    b.seal_all_blocks();
    b.finalize(target.frontend_config());
    f
}

/// Compile the `func` arm for `target` (host or, for inspection, the other ISA).
pub fn compile(target: &Target, func: Func) -> Result<ArmCode, ManagedError> {
    target.compile(build_function(target, func))
}

/// The exp and erf arms as weft-kernel [`weft_kernel::Arm`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElementwiseArm {
    func: Func,
}

impl ElementwiseArm {
    /// The arm of `func`.
    pub const fn new(func: Func) -> Self {
        Self { func }
    }

    /// The function it computes.
    pub fn func(&self) -> Func {
        self.func
    }
}

/// The contract every elementwise offer carries.
pub fn contract(func: Func, len: u64) -> Contract {
    Contract {
        family: format!("elementwise.{}", func.name()),
        geometry: Geometry::new().with("len", len),
        args: super::ARGS_NAME.to_string(),
        arithmetic: ArithmeticContract {
            accumulator_lanes: 1,
            reduction: ReductionOrder::None,
            fma: FmaUse::Never,
            nan: NanRule::ByClass,
            notes: "correctly rounded f32 results; steps in weft_elementwise".to_string(),
        },
        aliasing: Aliasing::disjoint().may_equal("input", "output"),
    }
}

// SAFETY: the body reads and writes only what the arguments' extents name
// and returns normally (module docs); validation checks its results.
unsafe impl weft_kernel::Arm for ElementwiseArm {
    fn name(&self) -> &'static str {
        match self.func {
            Func::Exp => "exp.arm.f32x4",
            Func::Erf => "erf.arm.f32x4",
        }
    }

    fn family(&self) -> Family {
        match self.func {
            Func::Exp => Family("elementwise.exp"),
            Func::Erf => Family("elementwise.erf"),
        }
    }

    fn offer(&self, site: &Site, _host: &Host) -> Result<Offer, Refusal> {
        let len = site.geometry.require("len")?;
        Ok(Offer {
            contract: contract(self.func, len),
            packed: Vec::new(),
            views: Some(MemberViews {
                axis: "len".to_string(),
                extent: len,
                granule: 4,
            }),
            // exp: the scalar loop is inside the vector loop (a step whose
            // rounding test fails is redone through it and the vector loop
            // resumes). erf has no such step: Cranelift sees the scalar
            // loop only runs the tail, and it follows the vector loop.
            loops: vec![
                LoopTrip {
                    name: "vector".to_string(),
                    trips: len / 4,
                    depth: 0,
                },
                LoopTrip {
                    name: "scalar".to_string(),
                    trips: len % 4,
                    depth: match self.func {
                        Func::Exp => 1,
                        Func::Erf => 0,
                    },
                },
            ],
            flops: len * 30,
            bytes_moved: len * 8,
        })
    }

    fn build(&self, _offer: &Offer, isa: Isa) -> Result<NativeCode, Refusal> {
        build_native(isa, |target| compile(target, self.func))
    }
}

/// A placed elementwise kernel (arm or twin) with a safe slice interface.
pub struct ElementwiseKernel {
    kernel: Kernel<ElementwiseArgs>,
}

impl std::fmt::Debug for ElementwiseKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.kernel.fmt(f)
    }
}

impl ElementwiseKernel {
    /// Place `code` (which must be an elementwise body for the host).
    ///
    /// # Safety
    ///
    /// `code` must honour the elementwise leaf ABI: read `len` f32s at
    /// `input`, write `len` f32s at `output`, read only `ELEMENTWISE_TABLE`
    /// through `table`, return normally.
    pub unsafe fn from_native(code: &NativeCode) -> Result<Self, Refusal> {
        // SAFETY: the caller promises an elementwise leaf body.
        let kernel = unsafe { Kernel::from_native(code)? };
        Ok(Self { kernel })
    }

    /// Compile the host arm of `func` and place it.
    pub fn of_arm(func: Func) -> Result<Self, Refusal> {
        let host = host_isa();
        let code = weft_kernel::Arm::build(&ElementwiseArm::new(func), &dummy_offer(func), host)?;
        // SAFETY: the arm's CLIF (above) reads `len` f32s from `input`,
        // writes `len` f32s to `output`, reads the table, and returns.
        unsafe { Self::from_native(&code) }
    }

    /// `output[i] = f(input[i])`; the slices must have equal lengths.
    pub fn run(&self, input: &[f32], output: &mut [f32]) -> Result<(), Refusal> {
        let args = ElementwiseArgs::new(input, output)?;
        // SAFETY: `new` checked that both slices hold `len` f32s; they
        // outlive the call.
        unsafe { self.kernel.call(&args) };
        Ok(())
    }

    /// In place: `data[i] = f(data[i])`.
    pub fn run_in_place(&self, data: &mut [f32]) {
        let args = ElementwiseArgs {
            input: data.as_ptr(),
            output: data.as_mut_ptr(),
            len: data.len(),
            table: ELEMENTWISE_TABLE.as_ptr(),
        };
        // SAFETY: input and output are the same live slice of `len` f32s
        // (a body reads each element before writing it), the table is static.
        unsafe { self.kernel.call(&args) };
    }
}

fn dummy_offer(func: Func) -> Offer {
    Offer {
        contract: contract(func, 0),
        packed: Vec::new(),
        views: None,
        loops: Vec::new(),
        flops: 0,
        bytes_moved: 0,
    }
}
