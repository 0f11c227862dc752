//! The `q8_0.matvec` arm: CLIF compiled through weft-managed.
//!
//! Shape (`extern "C" fn(*const Q8MatvecArgs)`): for each vector `n`, for
//! each row in `row_start..row_end`, a loop over groups of four blocks
//! (block `b` of the group feeds accumulator group `b mod 4`), then up to
//! three tail blocks into groups 0, 1, 2, then the contract's fold and one
//! f32 store. Each block is two 16-byte halves:
//!
//! - **Integer part**, exact, written as the tree each backend folds
//!   ("use what Cranelift offers"; both trees give the same i32s):
//!   - **x64: the bias method**, exact for every `i8` weight and every
//!     activation: `u = w ^ 0x80` (= `w + 128` as `u8`),
//!     `dot(u, x) + c = Σ w·x` per dword with `c = -128 · Σ x` (pairwise
//!     widening sums of `x`). `dot(u, s) + c` is written as the
//!     widen–multiply–pairwise-add tree that Cranelift's x64 backend folds
//!     into one `vpdpbusd` on VNNI hosts (rule in cranelift-codegen 0.135.8
//!     `isa/x64/lower.isle`: `a` sign-extended, `b` zero-extended,
//!     `iadd(tree, c)`); elsewhere the tree lowers to ordinary widening
//!     multiplies and adds with the same exact result.
//!   - **aarch64: the signed tree** `dot(w, x) + 0`, both operands
//!     sign-extended, which the aarch64 backend folds into one `sdot` when
//!     the target has FEAT_DotProd (`has_dotprod`, set by cranelift-native
//!     on such hosts; rule in `isa/aarch64/lower.isle`). The bias tree is
//!     not folded there: its `usdot` rule (FEAT_I8MM) wants the unsigned
//!     operand first, the opposite of the x64 rule, and would still pay
//!     for `c`. Without FEAT_DotProd (the baseline target used to list
//!     aarch64 code on other hosts) the signed tree lowers to
//!     `smull`/`smull2`/`saddlp`/`addp` (snapshot `q8_0_arm_aarch64_*`
//!     in `tests/q8_0_a64.rs`).
//! - **Scales** widened from binary16 with integer operations (Cranelift
//!   has no vector f16 widening): `em = h & 0x7fff`; normal:
//!   `(em << 13) + (112 << 23)`; inf/NaN (`em ≥ 0x7c00`): another
//!   `112 << 23`; subnormal/zero (`em < 0x400`): `f32(em) · 2^-24` (an
//!   exact product with normal operands and result, so MXCSR's DAZ/FTZ
//!   cannot matter); then the sign bit `(h & 0x8000) << 16`.
//! - **Float part**: `f32(q) · s` then `+` into the lane (no FMA).

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Endianness, Function, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use weft_kernel::{
    Family, Geometry, Host, Isa, Kernel, KernelArgs, LoopTrip, MemberViews, NativeCode, Offer,
    Refusal, Site,
};
use weft_managed::{Arch, ArmCode, ManagedError, Target};

use weft_managed::arm_build::{build_native, host_isa};

use super::{check_geometry, contract, offsets, Q8MatvecArgs, BLOCK_BYTES, FAMILY};

/// The arm's candidate name.
pub const ARM_NAME: &str = "q8_0.matvec.arm.f32x4";

pub(super) fn le() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

/// Data loads: in bounds by the contract (checked by the args' constructor).
pub(super) fn data_flags() -> MemFlagsData {
    let mut f = MemFlagsData::new().with_endianness(Endianness::Little);
    f.set_notrap();
    f
}

/// Constants the block body uses, built once in the entry block.
pub(super) struct Consts {
    pub(crate) bias: Value,
    pub(super) zero_i32: Value,
    mask_em: Value,
    mask_sign: Value,
    exp_adjust: Value,
    inf_threshold: Value,
    sub_threshold: Value,
    two_m24: Value,
}

impl Consts {
    /// Build the constants in the current block.
    pub(super) fn new(b: &mut FunctionBuilder<'_>) -> Self {
        let bias8 = b.ins().iconst(types::I8, 0x80);
        let z = b.ins().iconst(types::I32, 0);
        let em = b.ins().iconst(types::I32, 0x7fff);
        let sg = b.ins().iconst(types::I32, 0x8000);
        let adj = b.ins().iconst(types::I32, 112 << 23);
        let inf = b.ins().iconst(types::I32, 0x7c00);
        let sub = b.ins().iconst(types::I32, 0x400);
        let two = b.ins().f32const(2f32.powi(-24));
        Consts {
            bias: b.ins().splat(types::I8X16, bias8),
            zero_i32: b.ins().splat(types::I32X4, z),
            mask_em: b.ins().splat(types::I32X4, em),
            mask_sign: b.ins().splat(types::I32X4, sg),
            exp_adjust: b.ins().splat(types::I32X4, adj),
            inf_threshold: b.ins().splat(types::I32X4, inf),
            sub_threshold: b.ins().splat(types::I32X4, sub),
            two_m24: b.ins().splat(types::F32X4, two),
        }
    }
}

/// `dot(u, s) + c`: per dword `i`, `Σ_{k<4} u8(u[4i+k]) · i8(s[4i+k]) + c[i]`,
/// as the tree Cranelift folds into `vpdpbusd c, u, s`.
pub(crate) fn dot_u8_i8(b: &mut FunctionBuilder<'_>, u: Value, s: Value, c: Value) -> Value {
    let sl = b.ins().swiden_low(s);
    let ul = b.ins().uwiden_low(u);
    let lo = b.ins().imul(sl, ul);
    let sh = b.ins().swiden_high(s);
    let uh = b.ins().uwiden_high(u);
    let hi = b.ins().imul(sh, uh);
    let lo_l = b.ins().swiden_low(lo);
    let lo_h = b.ins().swiden_high(lo);
    let lo_p = b.ins().iadd_pairwise(lo_l, lo_h);
    let hi_l = b.ins().swiden_low(hi);
    let hi_h = b.ins().swiden_high(hi);
    let hi_p = b.ins().iadd_pairwise(hi_l, hi_h);
    let tree = b.ins().iadd_pairwise(lo_p, hi_p);
    b.ins().iadd(tree, c)
}

/// `dot(a, s) + c`: per dword `i`, `Σ_{k<4} i8(a[4i+k]) · i8(s[4i+k]) + c[i]`,
/// as the tree Cranelift's aarch64 backend folds into `sdot c, a, s` when
/// the target has FEAT_DotProd (`has_dotprod`, rule in cranelift-codegen
/// 0.135.8 `isa/aarch64/lower.isle`: both operands sign-extended, `a`
/// first, `iadd(tree, c)`); without it the tree lowers to widening
/// multiplies and pairwise adds with the same exact result.
pub(super) fn dot_i8_i8(b: &mut FunctionBuilder<'_>, a: Value, s: Value, c: Value) -> Value {
    let al = b.ins().swiden_low(a);
    let sl = b.ins().swiden_low(s);
    let lo = b.ins().imul(al, sl);
    let ah = b.ins().swiden_high(a);
    let sh = b.ins().swiden_high(s);
    let hi = b.ins().imul(ah, sh);
    let lo_l = b.ins().swiden_low(lo);
    let lo_h = b.ins().swiden_high(lo);
    let lo_p = b.ins().iadd_pairwise(lo_l, lo_h);
    let hi_l = b.ins().swiden_low(hi);
    let hi_h = b.ins().swiden_high(hi);
    let hi_p = b.ins().iadd_pairwise(hi_l, hi_h);
    let tree = b.ins().iadd_pairwise(lo_p, hi_p);
    b.ins().iadd(tree, c)
}

/// binary16 bits in every i32 lane of `h` (0..=0xffff) → f32x4, exact.
pub(super) fn widen_f16(b: &mut FunctionBuilder<'_>, k: &Consts, h: Value) -> Value {
    let em = b.ins().band(h, k.mask_em);
    let sign = b.ins().band(h, k.mask_sign);
    let sign = b.ins().ishl_imm_u(sign, 16);
    let shifted = b.ins().ishl_imm_u(em, 13);
    let normal = b.ins().iadd(shifted, k.exp_adjust);
    let special = b.ins().iadd(normal, k.exp_adjust);
    let is_special = b
        .ins()
        .icmp(IntCC::SignedGreaterThanOrEqual, em, k.inf_threshold);
    let v = b.ins().bitselect(is_special, special, normal);
    let emf = b.ins().fcvt_from_sint(types::F32X4, em);
    let subf = b.ins().fmul(emf, k.two_m24);
    let sub = b.ins().bitcast(types::I32X4, le(), subf);
    let is_sub = b.ins().icmp(IntCC::SignedLessThan, em, k.sub_threshold);
    let v = b.ins().bitselect(is_sub, sub, v);
    let v = b.ins().bor(v, sign);
    b.ins().bitcast(types::F32X4, le(), v)
}

/// Which exact method computes the integer part (both give the same i32s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DotTree {
    /// `dot(w ^ 0x80, x) - 128 · Σx`: the shape x64 folds into `vpdpbusd`.
    Bias,
    /// `dot(w, x) + 0`, both signed: the shape aarch64 folds into `sdot`.
    Signed,
}

impl DotTree {
    /// What each backend offers: the tree it folds into one instruction.
    fn for_target(target: &Target) -> Self {
        match target.arch() {
            Arch::X86_64 => DotTree::Bias,
            Arch::Aarch64 => DotTree::Signed,
        }
    }
}

/// One block at `pw`/`px` added into `acc` (its two f32x4 halves).
fn block(
    b: &mut FunctionBuilder<'_>,
    k: &Consts,
    tree: DotTree,
    pw: Value,
    px: Value,
    acc: [Value; 2],
) -> [Value; 2] {
    let f = data_flags();
    let hw = b.ins().uload16(types::I32, f, pw, 0);
    let hx = b.ins().uload16(types::I32, f, px, 0);
    let hw = b.ins().splat(types::I32X4, hw);
    let hx = b.ins().splat(types::I32X4, hx);
    let dw = widen_f16(b, k, hw);
    let dx = widen_f16(b, k, hx);
    let s = b.ins().fmul(dw, dx);
    let mut out = acc;
    for (half, slot) in out.iter_mut().enumerate() {
        let off = 2 + 16 * half as i32;
        let w = b.ins().load(types::I8X16, f, pw, off);
        let x = b.ins().load(types::I8X16, f, px, off);
        let q = match tree {
            DotTree::Bias => {
                let u = b.ins().bxor(w, k.bias);
                // -128 · Σ x per dword, as pairwise widening adds (pmaddubsw
                // and pmaddwd with ones on x64); a non-zero accumulator, so
                // the mid-end cannot drop the `iadd` the vpdpbusd rule needs.
                let xl = b.ins().swiden_low(x);
                let xh = b.ins().swiden_high(x);
                let pairs = b.ins().iadd_pairwise(xl, xh);
                let pl = b.ins().swiden_low(pairs);
                let ph = b.ins().swiden_high(pairs);
                let sums = b.ins().iadd_pairwise(pl, ph);
                let scaled = b.ins().ishl_imm_u(sums, 7);
                let negcorr = b.ins().isub(k.zero_i32, scaled);
                dot_u8_i8(b, u, x, negcorr)
            }
            // The mid-end keeps `iadd(tree, vconst 0)` (its `x + 0` rule
            // matches scalar constants only), so the sdot rule still sees it.
            DotTree::Signed => dot_i8_i8(b, w, x, k.zero_i32),
        };
        let qf = b.ins().fcvt_from_sint(types::F32X4, q);
        let p = b.ins().fmul(qf, s);
        *slot = b.ins().fadd(*slot, p);
    }
    out
}

/// Build the arm's CLIF function for `target`.
pub fn build_function(target: &Target) -> Function {
    let mut func = target.leaf_function("q8_0_matvec_arm");
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut fctx);
    let ptr = target.pointer_type();
    let trusted = MemFlagsData::trusted();

    let entry = b.create_block();
    let n_head = b.create_block();
    let row_init = b.create_block();
    let row_head = b.create_block();
    let row_body = b.create_block();
    let quad_head = b.create_block();
    let quad_body = b.create_block();
    let tails: Vec<_> = (0..3)
        .map(|_| (b.create_block(), b.create_block()))
        .collect();
    let fin = b.create_block();
    let n_next = b.create_block();
    let exit = b.create_block();

    let var_n = b.declare_var(ptr);
    let var_r = b.declare_var(ptr);
    let var_q = b.declare_var(ptr);
    let var_pw = b.declare_var(ptr);
    let var_px = b.declare_var(ptr);
    let acc_vars: Vec<Variable> = (0..8).map(|_| b.declare_var(types::F32X4)).collect();

    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let args = b.block_params(entry)[0];
    let weights = b.ins().load(ptr, trusted, args, offsets::WEIGHTS);
    let xs = b.ins().load(ptr, trusted, args, offsets::X);
    let ys = b.ins().load(ptr, trusted, args, offsets::Y);
    let rows = b.ins().load(ptr, trusted, args, offsets::ROWS);
    let blocks = b.ins().load(ptr, trusted, args, offsets::BLOCKS);
    let batch = b.ins().load(ptr, trusted, args, offsets::BATCH);
    let row_start = b.ins().load(ptr, trusted, args, offsets::ROW_START);
    let row_end = b.ins().load(ptr, trusted, args, offsets::ROW_END);
    let row_bytes = b.ins().imul_imm_s(blocks, BLOCK_BYTES as i64);
    let quads = b.ins().ushr_imm_u(blocks, 2);
    let rem = b.ins().band_imm_s(blocks, 3);
    let consts = Consts::new(&mut b);
    let tree = DotTree::for_target(target);
    let fzero = b.ins().f32const(0.0);
    let zero_acc = b.ins().splat(types::F32X4, fzero);
    let zero = b.ins().iconst(ptr, 0);
    b.def_var(var_n, zero);
    b.ins().jump(n_head, &[]);

    // n_head: another vector?
    b.switch_to_block(n_head);
    let n = b.use_var(var_n);
    let more_n = b.ins().icmp(IntCC::UnsignedLessThan, n, batch);
    b.ins().brif(more_n, row_init, &[], exit, &[]);

    b.switch_to_block(row_init);
    b.def_var(var_r, row_start);
    b.ins().jump(row_head, &[]);

    // row_head: another row?
    b.switch_to_block(row_head);
    let r = b.use_var(var_r);
    let more_r = b.ins().icmp(IntCC::UnsignedLessThan, r, row_end);
    b.ins().brif(more_r, row_body, &[], n_next, &[]);

    b.switch_to_block(row_body);
    let r = b.use_var(var_r);
    let n = b.use_var(var_n);
    let w_off = b.ins().imul(r, row_bytes);
    let pw = b.ins().iadd(weights, w_off);
    let x_off = b.ins().imul(n, row_bytes);
    let px = b.ins().iadd(xs, x_off);
    b.def_var(var_pw, pw);
    b.def_var(var_px, px);
    b.def_var(var_q, zero);
    for v in &acc_vars {
        b.def_var(*v, zero_acc);
    }
    b.ins().jump(quad_head, &[]);

    // quad_head: four more blocks?
    b.switch_to_block(quad_head);
    let q = b.use_var(var_q);
    let more_q = b.ins().icmp(IntCC::UnsignedLessThan, q, quads);
    b.ins().brif(more_q, quad_body, &[], tails[0].0, &[]);

    b.switch_to_block(quad_body);
    let mut pw = b.use_var(var_pw);
    let mut px = b.use_var(var_px);
    for g in 0..4 {
        let acc = [b.use_var(acc_vars[2 * g]), b.use_var(acc_vars[2 * g + 1])];
        let acc = block(&mut b, &consts, tree, pw, px, acc);
        b.def_var(acc_vars[2 * g], acc[0]);
        b.def_var(acc_vars[2 * g + 1], acc[1]);
        pw = b.ins().iadd_imm_s(pw, BLOCK_BYTES as i64);
        px = b.ins().iadd_imm_s(px, BLOCK_BYTES as i64);
    }
    b.def_var(var_pw, pw);
    b.def_var(var_px, px);
    let q = b.use_var(var_q);
    let q1 = b.ins().iadd_imm_s(q, 1);
    b.def_var(var_q, q1);
    b.ins().jump(quad_head, &[]);

    // Tail block g (0..3) goes to group g when rem > g.
    for (g, &(test, body)) in tails.iter().enumerate() {
        let next = tails.get(g + 1).map(|t| t.0).unwrap_or(fin);
        b.switch_to_block(test);
        let has = b
            .ins()
            .icmp_imm_u(IntCC::UnsignedGreaterThan, rem, g as i64);
        b.ins().brif(has, body, &[], fin, &[]);
        b.switch_to_block(body);
        let pw = b.use_var(var_pw);
        let px = b.use_var(var_px);
        let acc = [b.use_var(acc_vars[2 * g]), b.use_var(acc_vars[2 * g + 1])];
        let acc = block(&mut b, &consts, tree, pw, px, acc);
        b.def_var(acc_vars[2 * g], acc[0]);
        b.def_var(acc_vars[2 * g + 1], acc[1]);
        let pw = b.ins().iadd_imm_s(pw, BLOCK_BYTES as i64);
        let px = b.ins().iadd_imm_s(px, BLOCK_BYTES as i64);
        b.def_var(var_pw, pw);
        b.def_var(var_px, px);
        b.ins().jump(next, &[]);
    }

    // fin: the contract's fold, one store.
    b.switch_to_block(fin);
    let a: Vec<Value> = acc_vars.iter().map(|v| b.use_var(*v)).collect();
    let mut t = [zero_acc; 2];
    for (h, th) in t.iter_mut().enumerate() {
        let s02 = b.ins().fadd(a[h], a[4 + h]);
        let s13 = b.ins().fadd(a[2 + h], a[6 + h]);
        *th = b.ins().fadd(s02, s13);
    }
    let u = b.ins().fadd(t[0], t[1]);
    let u0 = b.ins().extractlane(u, 0);
    let u1 = b.ins().extractlane(u, 1);
    let u2 = b.ins().extractlane(u, 2);
    let u3 = b.ins().extractlane(u, 3);
    let v0 = b.ins().fadd(u0, u2);
    let v1 = b.ins().fadd(u1, u3);
    let y = b.ins().fadd(v0, v1);
    let n = b.use_var(var_n);
    let r = b.use_var(var_r);
    let base = b.ins().imul(n, rows);
    let idx = b.ins().iadd(base, r);
    let off = b.ins().ishl_imm_u(idx, 2);
    let py = b.ins().iadd(ys, off);
    b.ins().store(data_flags(), y, py, 0);
    let r1 = b.ins().iadd_imm_s(r, 1);
    b.def_var(var_r, r1);
    b.ins().jump(row_head, &[]);

    b.switch_to_block(n_next);
    let n = b.use_var(var_n);
    let n1 = b.ins().iadd_imm_s(n, 1);
    b.def_var(var_n, n1);
    b.ins().jump(n_head, &[]);

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

/// The `q8_0.matvec` arm as a [`weft_kernel::Arm`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Q8MatvecArm;

/// The `(rows, cols, batch)` of a site, checked against the contract
/// (`batch` defaults to 1).
pub fn site_geometry(site: &Site) -> Result<(u64, u64, u64), Refusal> {
    site_dims(&site.geometry)
}

/// The `(rows, cols, batch)` of a geometry, checked against the contract
/// (`batch` defaults to 1); twins check the offer they are handed with it.
pub fn site_dims(geometry: &Geometry) -> Result<(u64, u64, u64), Refusal> {
    let rows = geometry.require("rows")?;
    let cols = geometry.require("cols")?;
    let batch = geometry.get("batch").unwrap_or(1);
    check_geometry(rows, cols, batch)?;
    Ok((rows, cols, batch))
}

/// The offer every `q8_0.matvec` candidate of this arm shares.
pub fn offer_for(rows: u64, cols: u64, batch: u64) -> Result<Offer, Refusal> {
    let (_, blocks, _) = check_geometry(rows, cols, batch)?;
    let blocks = blocks as u64;
    let block_bytes = BLOCK_BYTES as u64;
    Ok(Offer {
        contract: contract(rows, cols, batch),
        packed: Vec::new(),
        views: Some(MemberViews {
            axis: "rows".to_owned(),
            extent: rows,
            granule: 1,
        }),
        loops: vec![
            LoopTrip {
                name: "batch".to_owned(),
                trips: batch,
                depth: 0,
            },
            LoopTrip {
                name: "rows".to_owned(),
                trips: rows,
                depth: 1,
            },
            // The `blocks % 4` tail blocks are guarded straight-line code
            // after this loop, not a loop.
            LoopTrip {
                name: "blocks4".to_owned(),
                trips: blocks / 4,
                depth: 2,
            },
        ],
        flops: 2 * rows * cols * batch,
        bytes_moved: rows * blocks * block_bytes * batch.min(2)
            + batch * blocks * block_bytes
            + 4 * rows * batch,
    })
}

// SAFETY: the body reads and writes only what the arguments' extents name
// and returns normally (module docs); validation checks its results.
unsafe impl weft_kernel::Arm for Q8MatvecArm {
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
        let (rows, cols, batch) = site_geometry(site)?;
        offer_for(rows, cols, batch)
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

/// A placed `q8_0.matvec` kernel (arm or twin) with a checked interface.
pub struct Q8MatvecKernel {
    kernel: Kernel<Q8MatvecArgs>,
}

impl std::fmt::Debug for Q8MatvecKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.kernel.fmt(f)
    }
}

impl Q8MatvecKernel {
    /// Place `code`.
    ///
    /// # Safety
    ///
    /// `code` must be a `q8_0.matvec` body for the host honouring the leaf
    /// ABI for [`Q8MatvecArgs`]: it reads only the blocks of `weights` and
    /// `x` the arguments name, writes only `y[n · rows + r]` for rows in
    /// `row_start..row_end`, and returns normally.
    pub unsafe fn from_native(code: &NativeCode) -> Result<Self, Refusal> {
        // SAFETY: the caller promises a q8_0.matvec leaf body.
        let kernel = unsafe { Kernel::from_native(code)? };
        Ok(Self { kernel })
    }

    /// Compile the host arm and place it.
    pub fn of_arm() -> Result<Self, Refusal> {
        let offer = offer_for(1, 32, 1)?;
        let code = weft_kernel::Arm::build(&Q8MatvecArm, &offer, host_isa())?;
        // SAFETY: the arm's CLIF (above) reads the blocks of rows
        // row_start..row_end and of the `batch` vectors, writes only their
        // outputs, and returns.
        unsafe { Self::from_native(&code) }
    }

    /// `Y = W·X` for every row, the rows split by `views` into at most
    /// `threads` ranges run on scoped threads; bit-identical to one call
    /// (every output is computed by exactly one range, in the contract's
    /// order). Lengths are checked once, for the whole call.
    pub fn run_threaded(
        &self,
        weights: &super::Q8Weights,
        x: &super::Q8Activations,
        y: &mut [f32],
        views: &MemberViews,
        threads: u64,
    ) -> Result<(), Refusal> {
        let whole = Q8MatvecArgs::new(weights, x, y, 0..weights.rows())?;
        if views.axis != "rows" || views.extent != weights.rows() as u64 {
            return Err(Refusal::BadOperand {
                operand: "views".to_owned(),
                reason: format!(
                    "{} of extent {} does not split these {} rows",
                    views.axis,
                    views.extent,
                    weights.rows()
                ),
            });
        }
        std::thread::scope(|scope| {
            for r in views.split(threads) {
                let part = whole.restrict(r);
                let kernel = &self.kernel;
                // SAFETY: `whole` was checked against `weights`, `x` and `y`,
                // which outlive the scope; the parts' row ranges are disjoint
                // and a body writes only its own rows' outputs
                // (`KernelArgs`' promise), so the calls may overlap in time.
                scope.spawn(move || unsafe { kernel.call(&part) });
            }
        });
        Ok(())
    }

    /// The placed kernel, for callers that split calls themselves (a
    /// thread pool handing [`KernelArgs::restrict`]ed copies to workers).
    pub fn kernel(&self) -> &Kernel<Q8MatvecArgs> {
        &self.kernel
    }

    /// `Y = W·X` for rows `rows`, lengths checked.
    pub fn run(
        &self,
        weights: &super::Q8Weights,
        x: &super::Q8Activations,
        y: &mut [f32],
        rows: std::ops::Range<usize>,
    ) -> Result<(), Refusal> {
        let args = Q8MatvecArgs::new(weights, x, y, rows)?;
        // SAFETY: `new` checked every extent against the borrowed buffers,
        // which outlive the call.
        unsafe { self.kernel.call(&args) };
        Ok(())
    }
}
