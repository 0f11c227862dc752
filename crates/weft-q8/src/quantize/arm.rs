//! The `q8_0.quantize` arm: CLIF compiled through weft-managed, for x64 and
//! aarch64 alike (only operations both backends lower at their baseline).
//!
//! Per block (`extern "C" fn(*const Q8QuantizeArgs)`, one loop over flat
//! blocks `block_start..block_end`):
//!
//! - **amax.** Eight f32x4 loads, `fabs`; if no lane is NaN (`fcmp uno`
//!   masks or-ed, `vhigh_bits`), a tree of `a > b ? a : b` selects (the
//!   maximum of non-NaN values is order-free); otherwise the contract's
//!   literal fold, 32 scalar `amax > a ? amax : a` steps left to right.
//! - **Scale.** `d = amax / 127`, `id = d != 0 ? 1/d : 0` (`!=` is
//!   unordered-or-unequal, so a NaN `d` gives `1/d`, a NaN), and `d` to
//!   binary16 by integer arithmetic (Cranelift has no f32 → f16 vector
//!   conversion on either baseline): NaN → `0x7e00 | mantissa >> 13`;
//!   `|d| ≥ 65520` → `0x7c00`; normal → the rebias with round-half-even
//!   (`+0xfff + lsb`); below `2^-14`, `bits(|d| + 0.5) - bits(0.5)` (the
//!   f32 addition rounds to the binary16 subnormal grid, to nearest even).
//! - **Quants.** `y = x · id`; NaN lanes → 0 (`fcmp ord` mask); clamp to
//!   `±127` (`roundf` is monotone, so clamping first gives
//!   `clamp(roundf(y))`); truncate (`fcvt_to_sint_sat`, exact here), and
//!   add `±1` where `|y - trunc(y)| ≥ 0.5` (all exact: ties away from
//!   zero); two saturating narrowings to bytes.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, Endianness, Function, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use weft_kernel::{
    Family, Host, Isa, Kernel, KernelArgs, LoopTrip, MemberViews, NativeCode, Offer, Refusal, Site,
};
use weft_managed::{ArmCode, ManagedError, Target};

use weft_managed::arm_build::{build_native, host_isa};

use super::super::{Q8Activations, BLOCK_BYTES, BLOCK_LEN};
use super::{contract, dims, offsets, Q8QuantizeArgs, FAMILY};

/// The arm's candidate name.
pub const ARM_NAME: &str = "q8_0.quantize.arm.f32x4";

fn le() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

/// Data accesses: in bounds by the contract (checked by the args'
/// constructor), any alignment.
fn data_flags() -> MemFlagsData {
    let mut f = le();
    f.set_notrap();
    f
}

/// `mask ? a : b` lane-wise for f32x4 `a`, `b` and an i32x4 `mask`.
fn select_f(b: &mut FunctionBuilder<'_>, mask: Value, x: Value, y: Value) -> Value {
    let xi = b.ins().bitcast(types::I32X4, le(), x);
    let yi = b.ins().bitcast(types::I32X4, le(), y);
    let r = b.ins().bitselect(mask, xi, yi);
    b.ins().bitcast(types::F32X4, le(), r)
}

/// C's `MAX(a, b) = a > b ? a : b`, lane-wise.
fn c_max_v(b: &mut FunctionBuilder<'_>, x: Value, y: Value) -> Value {
    let gt = b.ins().fcmp(FloatCC::GreaterThan, x, y);
    select_f(b, gt, x, y)
}

/// C's `MAX(a, b)` on scalars.
fn c_max_s(b: &mut FunctionBuilder<'_>, x: Value, y: Value) -> Value {
    let gt = b.ins().fcmp(FloatCC::GreaterThan, x, y);
    b.ins().select(gt, x, y)
}

/// binary16 bits (in an i32) of the f32 `d`, rounded to nearest even.
fn f32_to_f16_bits(b: &mut FunctionBuilder<'_>, d: Value) -> Value {
    let bits = b.ins().bitcast(types::I32, le(), d);
    let abs = b.ins().band_imm_u(bits, 0x7fff_ffff);
    let sign = b.ins().ushr_imm_u(bits, 16);
    let sign = b.ins().band_imm_u(sign, 0x8000);
    // NaN: quiet, top ten mantissa bits.
    let man = b.ins().band_imm_u(abs, 0x007f_ffff);
    let man = b.ins().ushr_imm_u(man, 13);
    let nan_h = b.ins().bor_imm_u(man, 0x7e00);
    let inf_h = b.ins().iconst(types::I32, 0x7c00);
    // Normal: rebias the exponent (127 → 15) and round to nearest even on
    // the 13 dropped bits; a carry moves into the exponent as it should.
    let lsb = b.ins().ushr_imm_u(abs, 13);
    let lsb = b.ins().band_imm_u(lsb, 1);
    let rounded = b.ins().iadd(abs, lsb);
    let rounded = b.ins().iadd_imm_s(rounded, 0x0fff - 0x3800_0000);
    let norm_h = b.ins().ushr_imm_u(rounded, 13);
    // Below 2^-14: |d| + 0.5 puts |d| / 2^-24, rounded to even, in the low
    // mantissa bits.
    let absf = b.ins().bitcast(types::F32, le(), abs);
    let half = b.ins().f32const(0.5);
    let sum = b.ins().fadd(absf, half);
    let sum = b.ins().bitcast(types::I32, le(), sum);
    let sub_h = b.ins().iadd_imm_s(sum, -0x3f00_0000);
    let is_normal = b
        .ins()
        .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, abs, 0x3880_0000);
    let h = b.ins().select(is_normal, norm_h, sub_h);
    let is_inf = b
        .ins()
        .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, abs, 0x477f_f000);
    let h = b.ins().select(is_inf, inf_h, h);
    let is_nan = b
        .ins()
        .icmp_imm_u(IntCC::UnsignedGreaterThan, abs, 0x7f80_0000);
    let h = b.ins().select(is_nan, nan_h, h);
    b.ins().bor(h, sign)
}

/// Constants of the quant step, built once in the entry block.
struct Consts {
    c127: Value,
    cm127: Value,
    half: Value,
    zero: Value,
    one_i: Value,
    minus_one_i: Value,
}

/// `clamp(roundf(y), -127, 127)` with NaN → 0, as i32x4.
fn quant(b: &mut FunctionBuilder<'_>, k: &Consts, y: Value) -> Value {
    let ord = b.ins().fcmp(FloatCC::Ordered, y, y);
    let y = select_f(b, ord, y, k.zero);
    let hi = b.ins().fcmp(FloatCC::GreaterThan, y, k.c127);
    let y = select_f(b, hi, k.c127, y);
    let lo = b.ins().fcmp(FloatCC::LessThan, y, k.cm127);
    let y = select_f(b, lo, k.cm127, y);
    let i = b.ins().fcvt_to_sint_sat(types::I32X4, y);
    let t = b.ins().fcvt_from_sint(types::F32X4, i);
    let r = b.ins().fsub(y, t);
    let r = b.ins().fabs(r);
    let up = b.ins().fcmp(FloatCC::GreaterThanOrEqual, r, k.half);
    let neg = b.ins().fcmp(FloatCC::LessThan, y, k.zero);
    let step = b.ins().bitselect(neg, k.minus_one_i, k.one_i);
    let inc = b.ins().band(up, step);
    b.ins().iadd(i, inc)
}

/// Build the arm's CLIF function for `target`.
pub fn build_function(target: &Target) -> Function {
    let mut func = target.leaf_function("q8_0_quantize_arm");
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut fctx);
    let ptr = target.pointer_type();
    let trusted = MemFlagsData::trusted();
    let f = data_flags();

    let entry = b.create_block();
    let head = b.create_block();
    let body = b.create_block();
    let fast = b.create_block();
    let slow = b.create_block();
    let merge = b.create_block();
    let exit = b.create_block();
    b.append_block_param(merge, types::F32);

    let var_k = b.declare_var(ptr);
    let var_px = b.declare_var(ptr);
    let var_po = b.declare_var(ptr);

    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let args = b.block_params(entry)[0];
    let xs = b.ins().load(ptr, trusted, args, offsets::X);
    let out = b.ins().load(ptr, trusted, args, offsets::OUT);
    let start = b.ins().load(ptr, trusted, args, offsets::BLOCK_START);
    let end = b.ins().load(ptr, trusted, args, offsets::BLOCK_END);
    let x_off = b.ins().imul_imm_s(start, (BLOCK_LEN * 4) as i64);
    let px0 = b.ins().iadd(xs, x_off);
    let o_off = b.ins().imul_imm_s(start, BLOCK_BYTES as i64);
    let po0 = b.ins().iadd(out, o_off);
    b.def_var(var_k, start);
    b.def_var(var_px, px0);
    b.def_var(var_po, po0);
    let k = {
        let c127 = b.ins().f32const(127.0);
        let cm127 = b.ins().f32const(-127.0);
        let half = b.ins().f32const(0.5);
        let zero = b.ins().f32const(0.0);
        let one = b.ins().iconst(types::I32, 1);
        let minus_one = b.ins().iconst(types::I32, -1);
        Consts {
            c127: b.ins().splat(types::F32X4, c127),
            cm127: b.ins().splat(types::F32X4, cm127),
            half: b.ins().splat(types::F32X4, half),
            zero: b.ins().splat(types::F32X4, zero),
            one_i: b.ins().splat(types::I32X4, one),
            minus_one_i: b.ins().splat(types::I32X4, minus_one),
        }
    };
    b.ins().jump(head, &[]);

    // head: another block?
    b.switch_to_block(head);
    let kk = b.use_var(var_k);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, kk, end);
    b.ins().brif(more, body, &[], exit, &[]);

    // body: load, |x|, any NaN?
    b.switch_to_block(body);
    let px = b.use_var(var_px);
    let v: Vec<Value> = (0..8)
        .map(|i| b.ins().load(types::F32X4, f, px, 16 * i))
        .collect();
    let mut any_nan = None;
    for &vi in &v {
        let u = b.ins().fcmp(FloatCC::Unordered, vi, vi);
        any_nan = Some(match any_nan {
            None => u,
            Some(acc) => b.ins().bor(acc, u),
        });
    }
    let nan_bits = b.ins().vhigh_bits(types::I32, any_nan.unwrap_or(k.one_i));
    b.ins().brif(nan_bits, slow, &[], fast, &[]);

    // fast: no NaN, the maximum in any order.
    b.switch_to_block(fast);
    let mut level: Vec<Value> = v.iter().map(|&vi| b.ins().fabs(vi)).collect();
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|p| c_max_v(&mut b, p[0], p[1]))
            .collect();
    }
    let m = level[0];
    let lanes: Vec<Value> = (0..4).map(|i| b.ins().extractlane(m, i)).collect();
    let m01 = c_max_s(&mut b, lanes[0], lanes[1]);
    let m23 = c_max_s(&mut b, lanes[2], lanes[3]);
    let amax = c_max_s(&mut b, m01, m23);
    b.ins().jump(merge, &[amax.into()]);

    // slow: a NaN somewhere; the contract's fold, literally.
    b.switch_to_block(slow);
    let mut amax = b.ins().f32const(0.0);
    for i in 0..BLOCK_LEN as i32 {
        let xi = b.ins().load(types::F32, f, px, 4 * i);
        let ai = b.ins().fabs(xi);
        amax = c_max_s(&mut b, amax, ai);
    }
    b.ins().jump(merge, &[amax.into()]);

    // merge: scale, quants, store.
    b.switch_to_block(merge);
    let amax = b.block_params(merge)[0];
    let c127s = b.ins().f32const(127.0);
    let d = b.ins().fdiv(amax, c127s);
    let zero_s = b.ins().f32const(0.0);
    let one_s = b.ins().f32const(1.0);
    let nz = b.ins().fcmp(FloatCC::NotEqual, d, zero_s);
    let recip = b.ins().fdiv(one_s, d);
    let id = b.ins().select(nz, recip, zero_s);
    let h = f32_to_f16_bits(&mut b, d);
    let po = b.use_var(var_po);
    b.ins().istore16(f, h, po, 0);
    let vid = b.ins().splat(types::F32X4, id);
    let q: Vec<Value> = v
        .iter()
        .map(|&vi| {
            let y = b.ins().fmul(vi, vid);
            quant(&mut b, &k, y)
        })
        .collect();
    let w: Vec<Value> = q.chunks(2).map(|p| b.ins().snarrow(p[0], p[1])).collect();
    for (half, pair) in w.chunks(2).enumerate() {
        let bytes = b.ins().snarrow(pair[0], pair[1]);
        b.ins().store(f, bytes, po, 2 + 16 * half as i32);
    }
    let kk = b.use_var(var_k);
    let k1 = b.ins().iadd_imm_s(kk, 1);
    b.def_var(var_k, k1);
    let px1 = b.ins().iadd_imm_s(px, (BLOCK_LEN * 4) as i64);
    b.def_var(var_px, px1);
    let po1 = b.ins().iadd_imm_s(po, BLOCK_BYTES as i64);
    b.def_var(var_po, po1);
    b.ins().jump(head, &[]);

    b.switch_to_block(exit);
    b.ins().return_(&[]);
    b.seal_all_blocks();
    b.finalize(target.frontend_config());
    func
}

/// Compile the arm for `target`.
pub fn compile(target: &Target) -> Result<ArmCode, ManagedError> {
    target.compile(build_function(target))
}

/// The offer every `q8_0.quantize` candidate shares: one loop over the
/// flat blocks, split across threads along `blocks`.
pub fn offer_for(cols: u64, batch: u64) -> Result<Offer, Refusal> {
    let (_, _, blocks) = dims(&super::geometry(cols, batch))?;
    let values = blocks * BLOCK_LEN as u64;
    Ok(Offer {
        contract: contract(cols, batch),
        packed: Vec::new(),
        views: Some(MemberViews {
            axis: "blocks".to_owned(),
            extent: blocks,
            granule: 1,
        }),
        loops: vec![LoopTrip {
            name: "blocks".to_owned(),
            trips: blocks,
            depth: 0,
        }],
        // |x|, max, multiply, and the rounding steps: about six per value.
        flops: 6 * values,
        bytes_moved: 4 * values + blocks * BLOCK_BYTES as u64,
    })
}

/// The `q8_0.quantize` arm as a [`weft_kernel::Arm`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuantizeArm;

// SAFETY: the body reads `x[32k..32k+32]` and writes `out[34k..34k+34]`
// only for `k` in `block_start..block_end`, and returns normally (module
// docs); validation checks its results.
unsafe impl weft_kernel::Arm for QuantizeArm {
    fn name(&self) -> &'static str {
        ARM_NAME
    }

    fn family(&self) -> Family {
        Family(FAMILY)
    }

    fn offer(&self, site: &Site, _host: &Host) -> Result<Offer, Refusal> {
        if site.family.name() != FAMILY {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!("family {} is not {FAMILY}", site.family),
            });
        }
        let (cols, batch, _) = dims(&site.geometry)?;
        offer_for(cols, batch)
    }

    fn build(&self, offer: &Offer, isa: Isa) -> Result<NativeCode, Refusal> {
        if offer.contract.family != FAMILY {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!("offer is for {}", offer.contract.family),
            });
        }
        build_native(isa, compile)
    }
}

/// A placed `q8_0.quantize` kernel (arm or twin) with a checked interface.
pub struct QuantizeKernel {
    kernel: Kernel<Q8QuantizeArgs>,
}

impl std::fmt::Debug for QuantizeKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.kernel.fmt(f)
    }
}

impl QuantizeKernel {
    /// Place `code`.
    ///
    /// # Safety
    ///
    /// `code` must be a `q8_0.quantize` body for the host honouring the
    /// leaf ABI for [`Q8QuantizeArgs`]: it reads only the f32s of blocks
    /// `block_start..block_end`, writes only their output bytes, and
    /// returns normally.
    pub unsafe fn from_native(code: &NativeCode) -> Result<Self, Refusal> {
        // SAFETY: the caller promises a q8_0.quantize leaf body.
        let kernel = unsafe { Kernel::from_native(code)? };
        Ok(Self { kernel })
    }

    /// Compile the host arm and place it.
    pub fn of_arm() -> Result<Self, Refusal> {
        let offer = offer_for(32, 1)?;
        let code = weft_kernel::Arm::build(&QuantizeArm, &offer, host_isa())?;
        // SAFETY: the arm's CLIF (above) reads and writes only the blocks
        // its arguments name, and returns.
        unsafe { Self::from_native(&code) }
    }

    /// Quantise flat blocks `blocks` of `batch` vectors of `cols` values
    /// into `out`, lengths checked.
    pub fn run(
        &self,
        x: &[f32],
        out: &mut [u8],
        cols: usize,
        batch: usize,
        blocks: std::ops::Range<usize>,
    ) -> Result<(), Refusal> {
        let args = Q8QuantizeArgs::new(x, out, cols, batch, blocks)?;
        // SAFETY: `new` checked every extent against the borrowed buffers,
        // which outlive the call.
        unsafe { self.kernel.call(&args) };
        Ok(())
    }

    /// Quantise all of `x` (`batch` vectors of `cols`) into activations
    /// for `q8_0.matvec`.
    pub fn quantize(&self, x: &[f32], cols: usize, batch: usize) -> Result<Q8Activations, Refusal> {
        let blocks = x.len() / BLOCK_LEN;
        let mut out = vec![0u8; blocks * BLOCK_BYTES];
        self.run(x, &mut out, cols, batch, 0..blocks)?;
        Q8Activations::from_bytes(out, cols, batch)
    }

    /// The placed kernel (for callers that split calls themselves).
    pub fn kernel(&self) -> &Kernel<Q8QuantizeArgs> {
        &self.kernel
    }
}

/// Split `args` along its block range into at most `parts` copies (what a
/// threaded executor hands its workers).
pub fn split(args: &Q8QuantizeArgs, parts: u64) -> Vec<Q8QuantizeArgs> {
    let r = args.range();
    let views = MemberViews {
        axis: "blocks".to_owned(),
        extent: r.end - r.start,
        granule: 1,
    };
    views
        .split(parts)
        .into_iter()
        .map(|s| args.restrict(r.start + s.start..r.start + s.end))
        .collect()
}
