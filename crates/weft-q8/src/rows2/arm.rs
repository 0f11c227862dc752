//! The rows2 arm (`q8_0.matvec.arm.rows2`): CLIF reading the `q8_0.rows2`
//! layout, compiled through weft-managed for either ISA. It is the
//! reference its twins are validated against.
//!
//! Shape (`extern "C" fn(*const Q8Rows2Args)`): for each vector `n`, for
//! each row pair meeting `row_start..row_end`, groups of four pair blocks
//! (block `b` feeds lane group `b mod 4`), up to three tail blocks into
//! groups 0, 1, 2, the fold, and a store of each of the pair's two rows
//! that lies in the range. One pair block:
//!
//! - **Integer part**: for each 8-byte chunk `c`, the 16 packed bytes
//!   `[row 2p chunk c | row 2p+1 chunk c]` against the activation chunk
//!   loaded twice (`splat` of an `i64`), as the signed dot tree Cranelift's
//!   aarch64 backend folds into `sdot` with FEAT_DotProd (see
//!   [`dot_i8_i8`](super::super::arm)), each chunk accumulating onto the
//!   last (exact). The four dwords are then `[2p: lo, 2p: hi, 2p+1: lo,
//!   2p+1: hi]`; one `iadd_pairwise` gives `q` of both rows in lanes 0, 1
//!   (lanes 2, 3 repeat them).
//! - **Scales**: the two row scales `[d0, d1, d0, d1]` and the activation
//!   scale widened with the f32x4 arm's exact integer method, one `fmul`.
//! - **Float part**: `f32(q) · s` then `+` into the group's lanes (no FMA).

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Function, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use weft_kernel::{
    Family, Host, Isa, Kernel, KernelArgs, LoopTrip, MemberViews, NativeCode, Offer, Refusal, Site,
};
use weft_managed::{ArmCode, ManagedError, Target};

use super::super::arm::{data_flags, dot_i8_i8, le, site_geometry, widen_f16, Consts};
use super::super::{offsets, Q8Activations, Q8Weights, BLOCK_BYTES, FAMILY};
use super::{
    contract, pairs, Q8Rows2Args, Q8Rows2Weights, ARM_NAME, GROUPS, LAYOUT, PAIR_BLOCK_BYTES,
};
use weft_managed::arm_build::{build_native, host_isa};

/// One pair block at `pw` against the activation block at `px`, added
/// into the group's lanes.
fn pair_block(b: &mut FunctionBuilder<'_>, k: &Consts, pw: Value, px: Value, acc: Value) -> Value {
    let f = data_flags();
    // Scales: [d0, d1, d0, d1] for the rows, dx everywhere.
    let hw = b.ins().load(types::I32, f, pw, 0);
    let d0 = b.ins().band_imm_u(hw, 0xffff);
    let d1 = b.ins().ushr_imm_u(hw, 16);
    let hw = b.ins().splat(types::I32X4, d0);
    let hw = b.ins().insertlane(hw, d1, 1);
    let hw = b.ins().insertlane(hw, d1, 3);
    let hx = b.ins().uload16(types::I32, f, px, 0);
    let hx = b.ins().splat(types::I32X4, hx);
    let dw = widen_f16(b, k, hw);
    let dx = widen_f16(b, k, hx);
    let s = b.ins().fmul(dw, dx);
    // Integer part, chunk by chunk, each accumulating onto the last.
    let mut q = k.zero_i32;
    for c in 0..4 {
        let w = b.ins().load(types::I8X16, f, pw, 4 + 16 * c);
        let xc = b.ins().load(types::I64, f, px, 2 + 8 * c);
        let xc = b.ins().splat(types::I64X2, xc);
        let xc = b.ins().bitcast(types::I8X16, le(), xc);
        q = dot_i8_i8(b, w, xc, q);
    }
    let q = b.ins().iadd_pairwise(q, q);
    let qf = b.ins().fcvt_from_sint(types::F32X4, q);
    let p = b.ins().fmul(qf, s);
    b.ins().fadd(acc, p)
}

/// Build the arm's CLIF function for `target`.
pub fn build_function(target: &Target) -> Function {
    let mut func = target.leaf_function("q8_0_matvec_rows2_arm");
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut fctx);
    let ptr = target.pointer_type();
    let trusted = MemFlagsData::trusted();

    let entry = b.create_block();
    let n_head = b.create_block();
    let pair_init = b.create_block();
    let pair_head = b.create_block();
    let pair_body = b.create_block();
    let quad_head = b.create_block();
    let quad_body = b.create_block();
    let tails: Vec<_> = (0..3)
        .map(|_| (b.create_block(), b.create_block()))
        .collect();
    let fin = b.create_block();
    let store_lo = b.create_block();
    let test_hi = b.create_block();
    let store_hi = b.create_block();
    let pair_next = b.create_block();
    let n_next = b.create_block();
    let exit = b.create_block();

    let var_n = b.declare_var(ptr);
    let var_r0 = b.declare_var(ptr);
    let var_q = b.declare_var(ptr);
    let var_pw = b.declare_var(ptr);
    let var_px = b.declare_var(ptr);
    let var_y = b.declare_var(types::F32X4);
    let acc_vars: Vec<Variable> = (0..GROUPS).map(|_| b.declare_var(types::F32X4)).collect();

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
    // A pair of rows is 2 · blocks · 34 bytes packed: r0 · row_bytes for
    // the pair whose first row is r0.
    let row_bytes = b.ins().imul_imm_s(blocks, BLOCK_BYTES as i64);
    let quads = b.ins().ushr_imm_u(blocks, 2);
    let rem = b.ins().band_imm_s(blocks, 3);
    let first_r0 = b.ins().band_imm_s(row_start, -2);
    let consts = Consts::new(&mut b);
    let fzero = b.ins().f32const(0.0);
    let zero_acc = b.ins().splat(types::F32X4, fzero);
    let zero = b.ins().iconst(ptr, 0);
    b.def_var(var_n, zero);
    b.def_var(var_y, zero_acc);
    // An empty range writes nothing (and reads nothing).
    let any = b.ins().icmp(IntCC::UnsignedLessThan, row_start, row_end);
    b.ins().brif(any, n_head, &[], exit, &[]);

    b.switch_to_block(n_head);
    let n = b.use_var(var_n);
    let more_n = b.ins().icmp(IntCC::UnsignedLessThan, n, batch);
    b.ins().brif(more_n, pair_init, &[], exit, &[]);

    b.switch_to_block(pair_init);
    b.def_var(var_r0, first_r0);
    b.ins().jump(pair_head, &[]);

    b.switch_to_block(pair_head);
    let r0 = b.use_var(var_r0);
    let more_p = b.ins().icmp(IntCC::UnsignedLessThan, r0, row_end);
    b.ins().brif(more_p, pair_body, &[], n_next, &[]);

    b.switch_to_block(pair_body);
    let r0 = b.use_var(var_r0);
    let n = b.use_var(var_n);
    let w_off = b.ins().imul(r0, row_bytes);
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

    b.switch_to_block(quad_head);
    let q = b.use_var(var_q);
    let more_q = b.ins().icmp(IntCC::UnsignedLessThan, q, quads);
    b.ins().brif(more_q, quad_body, &[], tails[0].0, &[]);

    b.switch_to_block(quad_body);
    let mut pw = b.use_var(var_pw);
    let mut px = b.use_var(var_px);
    for v in &acc_vars {
        let acc = b.use_var(*v);
        let acc = pair_block(&mut b, &consts, pw, px, acc);
        b.def_var(*v, acc);
        pw = b.ins().iadd_imm_s(pw, PAIR_BLOCK_BYTES as i64);
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
        let acc = b.use_var(acc_vars[g]);
        let acc = pair_block(&mut b, &consts, pw, px, acc);
        b.def_var(acc_vars[g], acc);
        let pw = b.ins().iadd_imm_s(pw, PAIR_BLOCK_BYTES as i64);
        let px = b.ins().iadd_imm_s(px, BLOCK_BYTES as i64);
        b.def_var(var_pw, pw);
        b.def_var(var_px, px);
        b.ins().jump(next, &[]);
    }

    // fin: the contract's fold; then each row of the pair that is in range.
    b.switch_to_block(fin);
    let a: Vec<Value> = acc_vars.iter().map(|v| b.use_var(*v)).collect();
    let s02 = b.ins().fadd(a[0], a[2]);
    let s13 = b.ins().fadd(a[1], a[3]);
    let y = b.ins().fadd(s02, s13);
    b.def_var(var_y, y);
    let r0 = b.use_var(var_r0);
    let lo_in = b
        .ins()
        .icmp(IntCC::UnsignedGreaterThanOrEqual, r0, row_start);
    b.ins().brif(lo_in, store_lo, &[], test_hi, &[]);

    b.switch_to_block(store_lo);
    let (n, r0, y) = (b.use_var(var_n), b.use_var(var_r0), b.use_var(var_y));
    let base = b.ins().imul(n, rows);
    let idx = b.ins().iadd(base, r0);
    let off = b.ins().ishl_imm_u(idx, 2);
    let py = b.ins().iadd(ys, off);
    let y0 = b.ins().extractlane(y, 0);
    b.ins().store(data_flags(), y0, py, 0);
    b.ins().jump(test_hi, &[]);

    b.switch_to_block(test_hi);
    let r0 = b.use_var(var_r0);
    let r1 = b.ins().iadd_imm_s(r0, 1);
    let hi_in = b.ins().icmp(IntCC::UnsignedLessThan, r1, row_end);
    b.ins().brif(hi_in, store_hi, &[], pair_next, &[]);

    b.switch_to_block(store_hi);
    let (n, r0, y) = (b.use_var(var_n), b.use_var(var_r0), b.use_var(var_y));
    let base = b.ins().imul(n, rows);
    let idx = b.ins().iadd(base, r0);
    let off = b.ins().ishl_imm_u(idx, 2);
    let py = b.ins().iadd(ys, off);
    let y1 = b.ins().extractlane(y, 1);
    b.ins().store(data_flags(), y1, py, 4);
    b.ins().jump(pair_next, &[]);

    b.switch_to_block(pair_next);
    let r0 = b.use_var(var_r0);
    let r2 = b.ins().iadd_imm_s(r0, 2);
    b.def_var(var_r0, r2);
    b.ins().jump(pair_head, &[]);

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

/// The rows2 arm as a [`weft_kernel::Arm`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Q8Rows2Arm;

/// The offer for `w` at `batch`: W repacked into the `q8_0.rows2` layout.
pub fn offer_for(packed: &Q8Rows2Weights, batch: u64) -> Result<Offer, Refusal> {
    let (rows, blocks) = (packed.rows() as u64, packed.blocks() as u64);
    let cols = 32 * blocks;
    super::super::check_geometry(rows, cols, batch)?;
    let pair_bytes = (PAIR_BLOCK_BYTES as u64) * blocks;
    let npairs = pairs(packed.rows()) as u64;
    Ok(Offer {
        contract: contract(rows, cols, batch),
        packed: vec![packed.operand()],
        views: Some(MemberViews {
            axis: "rows".to_owned(),
            extent: rows,
            granule: 2,
        }),
        loops: vec![
            LoopTrip {
                name: "batch".to_owned(),
                trips: batch,
                depth: 0,
            },
            LoopTrip {
                name: "pairs".to_owned(),
                trips: npairs,
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
        bytes_moved: npairs * pair_bytes * batch.min(2)
            + batch * blocks * BLOCK_BYTES as u64
            + 4 * rows * batch,
    })
}

// SAFETY: the body reads only the pair blocks of the pairs meeting
// row_start..row_end and the blocks of the `batch` vectors, writes only
// the outputs of rows in the range, and returns (module docs); validation
// checks its results against the reference.
unsafe impl weft_kernel::Arm for Q8Rows2Arm {
    fn name(&self) -> &'static str {
        ARM_NAME
    }

    fn family(&self) -> Family {
        Family(FAMILY)
    }

    /// Needs the site's `weights` operand (canonical Q8_0 bytes of the
    /// geometry): missing or of the wrong length is `bad-operand`.
    fn offer(&self, site: &Site, _host: &Host) -> Result<Offer, Refusal> {
        if site.family.name() != FAMILY {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!("family {} is not {FAMILY}", site.family),
            });
        }
        let (rows, cols, batch) = site_geometry(site)?;
        let op = site.operand("weights").ok_or_else(|| Refusal::BadOperand {
            operand: "weights".to_owned(),
            reason: format!("{ARM_NAME} repacks the site's weights, and the site has none"),
        })?;
        let w = Q8Weights::from_bytes(op.bytes.to_vec(), rows as usize, cols as usize)?;
        offer_for(&Q8Rows2Weights::from_weights(&w), batch)
    }

    fn build(&self, offer: &Offer, isa: Isa) -> Result<NativeCode, Refusal> {
        if offer.contract.family != FAMILY || offer.contract.args != super::ARGS_NAME {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!(
                    "{ARM_NAME} builds {FAMILY} with {}, not {} with {}",
                    super::ARGS_NAME,
                    offer.contract.family,
                    offer.contract.args
                ),
            });
        }
        match offer.packed.first() {
            Some(p) if p.layout == LAYOUT => {}
            Some(p) => {
                return Err(Refusal::UnknownLayout {
                    layout: p.layout.to_owned(),
                })
            }
            None => {
                return Err(Refusal::BadOperand {
                    operand: "weights".to_owned(),
                    reason: format!("the offer carries no {LAYOUT} operand"),
                })
            }
        }
        build_native(isa, compile)
    }
}

/// A placed rows2 kernel (arm or twin) with a checked interface.
pub struct Q8Rows2Kernel {
    kernel: Kernel<Q8Rows2Args>,
}

impl std::fmt::Debug for Q8Rows2Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.kernel.fmt(f)
    }
}

impl Q8Rows2Kernel {
    /// Place `code`.
    ///
    /// # Safety
    ///
    /// `code` must be a rows2 body for the host honouring the leaf ABI for
    /// [`Q8Rows2Args`]: it reads only the pair blocks and activation blocks
    /// the arguments name, writes only `y[n · rows + r]` for rows in
    /// `row_start..row_end`, and returns normally.
    pub unsafe fn from_native(code: &NativeCode) -> Result<Self, Refusal> {
        // SAFETY: the caller promises a rows2 leaf body.
        let kernel = unsafe { Kernel::from_native(code)? };
        Ok(Self { kernel })
    }

    /// Compile the host arm and place it.
    pub fn of_arm() -> Result<Self, Refusal> {
        let code = build_native(host_isa(), compile)?;
        // SAFETY: the arm's CLIF (above) reads the pair blocks of the pairs
        // meeting row_start..row_end and the `batch` vectors, writes only
        // outputs of rows in the range, and returns.
        unsafe { Self::from_native(&code) }
    }

    /// `Y = W·X` for rows `rows`, lengths checked.
    pub fn run(
        &self,
        weights: &Q8Rows2Weights,
        x: &Q8Activations,
        y: &mut [f32],
        rows: std::ops::Range<usize>,
    ) -> Result<(), Refusal> {
        let args = Q8Rows2Args::new(weights, x, y, rows)?;
        // SAFETY: `new` checked every extent against the borrowed buffers,
        // which outlive the call.
        unsafe { self.kernel.call(&args) };
        Ok(())
    }

    /// `Y = W·X` for every row, split by `views` into at most `threads`
    /// ranges ([`KernelArgs::restrict`]) run one after another: the same
    /// bits as one call, which is what a threaded executor relies on.
    pub fn run_split(
        &self,
        weights: &Q8Rows2Weights,
        x: &Q8Activations,
        y: &mut [f32],
        views: &MemberViews,
        parts: u64,
    ) -> Result<(), Refusal> {
        let whole = Q8Rows2Args::new(weights, x, y, 0..weights.rows())?;
        for r in views.split(parts) {
            if r.end > weights.rows() as u64 {
                return Err(Refusal::BadOperand {
                    operand: "views".to_owned(),
                    reason: format!("{r:?} is outside 0..{}", weights.rows()),
                });
            }
            let part = whole.restrict(r);
            // SAFETY: `whole` was checked against the buffers, which outlive
            // the call, and `part` covers a sub-range of its rows.
            unsafe { self.kernel.call(&part) };
        }
        Ok(())
    }
}
