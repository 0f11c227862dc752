//! The panel arm (`q8_0.matmul.arm.panel16`): CLIF reading the
//! `q8_0.panel16` layout, compiled through weft-managed for either ISA. It
//! is the reference its twins are validated against.
//!
//! Shape (`extern "C" fn(*const Q8MatmulArgs)`): for each panel meeting
//! `row_start..row_end`, for each vector `n`, one loop over the blocks
//! holding the panel's 16 outputs as four f32x4 (rows `4i..4i+4` of the
//! panel), then a store of each output whose row is in the range. One
//! block:
//!
//! - **Integer part**: for each quarter `i` of the panel and each group
//!   `g`, the 16 packed bytes (four rows × four biased quants) against the
//!   vector's four quants `4g..4g+4` splat across the lanes, each group
//!   accumulating onto the last (exact). On x64 the tree is the bias tree
//!   ([`dot_u8_i8`](super::super::arm)) started from `-128 · Σx` (the
//!   block's quants summed by pairwise widening adds), which Cranelift
//!   folds into `vpdpbusd` on VNNI hosts; on aarch64 the bias is flipped
//!   back (`eor 0x80`) and the signed tree folds into `sdot` with
//!   FEAT_DotProd.
//! - **Scales**: the four rows' f32 scales straight from the panel, the
//!   vector's binary16 scale widened with the f32x4 arm's exact integer
//!   method, one `fmul`.
//! - **Float part**: `fma(f32(q), s, acc)` (the contract's one rounding).

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Function, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use weft_kernel::{
    Family, Host, Isa, Kernel, KernelArgs, LoopTrip, MemberViews, NativeCode, Offer, Refusal, Site,
};
use weft_managed::arm_build::{build_native, host_isa};
use weft_managed::{Arch, ArmCode, ManagedError, Target};

use super::super::arm::{data_flags, dot_i8_i8, dot_u8_i8, le, widen_f16, Consts};
use super::super::{offsets, Q8Activations, Q8Weights, BLOCK_BYTES};
use super::{
    contract, dims, panels, Q8MatmulArgs, Q8PanelWeights, ARGS_NAME, ARM_NAME, FAMILY, GROUPS,
    GROUP_BYTES, LAYOUT, PANEL_BLOCK_BYTES, PANEL_ROWS, QUANTS_AT,
};

/// Quarters of a panel: one f32x4 of outputs each.
const QUARTERS: usize = PANEL_ROWS / 4;

/// One block of the panel at `pw` against the vector's block at `px`,
/// added into the four quarters' lanes.
fn block(
    b: &mut FunctionBuilder<'_>,
    k: &Consts,
    arch: Arch,
    pw: Value,
    px: Value,
    acc: [Value; QUARTERS],
) -> [Value; QUARTERS] {
    let f = data_flags();
    let hx = b.ins().uload16(types::I32, f, px, 0);
    let hx = b.ins().splat(types::I32X4, hx);
    let dx = widen_f16(b, k, hx);
    // The start of every quarter's integer sum: -128 · Σx on x64 (the
    // bias tree's correction), zero on aarch64.
    let start = match arch {
        Arch::X86_64 => {
            let mut halves = [k.zero_i32; 2];
            for (h, slot) in halves.iter_mut().enumerate() {
                let x = b.ins().load(types::I8X16, f, px, 2 + 16 * h as i32);
                let xl = b.ins().swiden_low(x);
                let xh = b.ins().swiden_high(x);
                let pairs = b.ins().iadd_pairwise(xl, xh);
                let pl = b.ins().swiden_low(pairs);
                let ph = b.ins().swiden_high(pairs);
                *slot = b.ins().iadd_pairwise(pl, ph);
            }
            let v = b.ins().iadd(halves[0], halves[1]);
            let v = b.ins().iadd_pairwise(v, v);
            let total = b.ins().iadd_pairwise(v, v);
            let scaled = b.ins().ishl_imm_u(total, 7);
            b.ins().isub(k.zero_i32, scaled)
        }
        Arch::Aarch64 => k.zero_i32,
    };
    let xs: Vec<Value> = (0..GROUPS)
        .map(|g| {
            let x4 = b.ins().load(types::I32, f, px, 2 + 4 * g as i32);
            let x4 = b.ins().splat(types::I32X4, x4);
            b.ins().bitcast(types::I8X16, le(), x4)
        })
        .collect();
    let mut out = acc;
    for (i, slot) in out.iter_mut().enumerate() {
        let mut q = start;
        for (g, &x) in xs.iter().enumerate() {
            let off = (QUANTS_AT + GROUP_BYTES * g + 16 * i) as i32;
            let u = b.ins().load(types::I8X16, f, pw, off);
            q = match arch {
                Arch::X86_64 => dot_u8_i8(b, u, x, q),
                Arch::Aarch64 => {
                    let w = b.ins().bxor(u, k.bias);
                    dot_i8_i8(b, w, x, q)
                }
            };
        }
        let dw = b.ins().load(types::F32X4, f, pw, 16 * i as i32);
        let s = b.ins().fmul(dw, dx);
        let qf = b.ins().fcvt_from_sint(types::F32X4, q);
        *slot = b.ins().fma(qf, s, *slot);
    }
    out
}

/// Build the arm's CLIF function for `target`.
pub fn build_function(target: &Target) -> Function {
    let mut func = target.leaf_function("q8_0_matmul_panel16_arm");
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut fctx);
    let ptr = target.pointer_type();
    let trusted = MemFlagsData::trusted();
    let arch = target.arch();

    let entry = b.create_block();
    let panel_head = b.create_block();
    let n_init = b.create_block();
    let n_head = b.create_block();
    let n_body = b.create_block();
    let block_head = b.create_block();
    let block_body = b.create_block();
    let fin = b.create_block();
    let n_next = b.create_block();
    let panel_next = b.create_block();
    let exit = b.create_block();

    let var_p = b.declare_var(ptr);
    let var_n = b.declare_var(ptr);
    let var_left = b.declare_var(ptr);
    let var_pw = b.declare_var(ptr);
    let var_px = b.declare_var(ptr);
    let acc_vars: Vec<Variable> = (0..QUARTERS).map(|_| b.declare_var(types::F32X4)).collect();

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
    let panel_bytes = b.ins().imul_imm_s(blocks, PANEL_BLOCK_BYTES as i64);
    let vec_bytes = b.ins().imul_imm_s(blocks, BLOCK_BYTES as i64);
    let first_p = b
        .ins()
        .ushr_imm_u(row_start, PANEL_ROWS.trailing_zeros() as i64);
    let consts = Consts::new(&mut b);
    let fzero = b.ins().f32const(0.0);
    let zero_acc = b.ins().splat(types::F32X4, fzero);
    b.def_var(var_p, first_p);
    for v in &acc_vars {
        b.def_var(*v, zero_acc);
    }
    // An empty range writes nothing (and reads nothing).
    let any = b.ins().icmp(IntCC::UnsignedLessThan, row_start, row_end);
    b.ins().brif(any, panel_head, &[], exit, &[]);

    // Panels meeting the range: 16p < row_end.
    b.switch_to_block(panel_head);
    let p = b.use_var(var_p);
    let r0 = b.ins().ishl_imm_u(p, PANEL_ROWS.trailing_zeros() as i64);
    let more_p = b.ins().icmp(IntCC::UnsignedLessThan, r0, row_end);
    b.ins().brif(more_p, n_init, &[], exit, &[]);

    b.switch_to_block(n_init);
    let zero = b.ins().iconst(ptr, 0);
    b.def_var(var_n, zero);
    b.ins().jump(n_head, &[]);

    b.switch_to_block(n_head);
    let n = b.use_var(var_n);
    let more_n = b.ins().icmp(IntCC::UnsignedLessThan, n, batch);
    b.ins().brif(more_n, n_body, &[], panel_next, &[]);

    b.switch_to_block(n_body);
    let (p, n) = (b.use_var(var_p), b.use_var(var_n));
    let w_off = b.ins().imul(p, panel_bytes);
    let pw = b.ins().iadd(weights, w_off);
    let x_off = b.ins().imul(n, vec_bytes);
    let px = b.ins().iadd(xs, x_off);
    b.def_var(var_pw, pw);
    b.def_var(var_px, px);
    b.def_var(var_left, blocks);
    for v in &acc_vars {
        b.def_var(*v, zero_acc);
    }
    b.ins().jump(block_head, &[]);

    b.switch_to_block(block_head);
    let left = b.use_var(var_left);
    let more_b = b.ins().icmp_imm_u(IntCC::NotEqual, left, 0);
    b.ins().brif(more_b, block_body, &[], fin, &[]);

    b.switch_to_block(block_body);
    let (pw, px) = (b.use_var(var_pw), b.use_var(var_px));
    let acc: Vec<Value> = acc_vars.iter().map(|v| b.use_var(*v)).collect();
    let acc = block(
        &mut b,
        &consts,
        arch,
        pw,
        px,
        acc.try_into().expect("four quarters"),
    );
    for (v, a) in acc_vars.iter().zip(acc) {
        b.def_var(*v, a);
    }
    let pw = b.ins().iadd_imm_s(pw, PANEL_BLOCK_BYTES as i64);
    let px = b.ins().iadd_imm_s(px, BLOCK_BYTES as i64);
    b.def_var(var_pw, pw);
    b.def_var(var_px, px);
    let left = b.use_var(var_left);
    let left = b.ins().iadd_imm_s(left, -1);
    b.def_var(var_left, left);
    b.ins().jump(block_head, &[]);

    // fin: each of the 16 outputs whose row lies in the range.
    b.switch_to_block(fin);
    let (p, n) = (b.use_var(var_p), b.use_var(var_n));
    let r0 = b.ins().ishl_imm_u(p, PANEL_ROWS.trailing_zeros() as i64);
    let base = b.ins().imul(n, rows);
    let base = b.ins().iadd(base, r0);
    let base = b.ins().ishl_imm_u(base, 2);
    let py = b.ins().iadd(ys, base);
    let acc: Vec<Value> = acc_vars.iter().map(|v| b.use_var(*v)).collect();
    for j in 0..PANEL_ROWS {
        let store = b.create_block();
        let next = b.create_block();
        let r = b.ins().iadd_imm_s(r0, j as i64);
        let ge = b
            .ins()
            .icmp(IntCC::UnsignedGreaterThanOrEqual, r, row_start);
        let lt = b.ins().icmp(IntCC::UnsignedLessThan, r, row_end);
        let inside = b.ins().band(ge, lt);
        b.ins().brif(inside, store, &[], next, &[]);
        b.switch_to_block(store);
        let v = b.ins().extractlane(acc[j / 4], (j % 4) as u8);
        b.ins().store(data_flags(), v, py, 4 * j as i32);
        b.ins().jump(next, &[]);
        b.switch_to_block(next);
    }
    b.ins().jump(n_next, &[]);

    b.switch_to_block(n_next);
    let n = b.use_var(var_n);
    let n1 = b.ins().iadd_imm_s(n, 1);
    b.def_var(var_n, n1);
    b.ins().jump(n_head, &[]);

    b.switch_to_block(panel_next);
    let p = b.use_var(var_p);
    let p1 = b.ins().iadd_imm_s(p, 1);
    b.def_var(var_p, p1);
    b.ins().jump(panel_head, &[]);

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

/// The panel arm as a [`weft_kernel::Arm`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Q8MatmulArm;

/// The offer for `w` at `batch`: W repacked into the `q8_0.panel16` layout.
pub fn offer_for(packed: &Q8PanelWeights, batch: u64) -> Result<Offer, Refusal> {
    let (rows, blocks) = (packed.rows() as u64, packed.blocks() as u64);
    let mut offer = offer_at(rows, 32 * blocks, batch)?;
    offer.packed = vec![packed.operand()];
    Ok(offer)
}

/// The offer at a geometry whose weights are call arguments (already in
/// the `q8_0.panel16` layout): no packed operand.
pub fn offer_at(rows: u64, cols: u64, batch: u64) -> Result<Offer, Refusal> {
    let (nrows, blocks, _) = super::check_geometry(rows, cols, batch)?;
    let blocks = blocks as u64;
    let npanels = panels(nrows) as u64;
    Ok(Offer {
        contract: contract(rows, cols, batch),
        packed: Vec::new(),
        views: Some(MemberViews {
            axis: "rows".to_owned(),
            extent: rows,
            granule: PANEL_ROWS as u64,
        }),
        loops: vec![
            LoopTrip {
                name: "panels".to_owned(),
                trips: npanels,
                depth: 0,
            },
            LoopTrip {
                name: "batch".to_owned(),
                trips: batch,
                depth: 1,
            },
            LoopTrip {
                name: "blocks".to_owned(),
                trips: blocks,
                depth: 2,
            },
        ],
        // The roofline's floating-point work: per block and output, the
        // convert, the scale's multiply and the FMA (four flops). The
        // integer products (2 · rows · cols · batch int8 ops) are not
        // f32 FMA-port work: counted as flops they made a floor above
        // the twins' measured times.
        flops: 4 * rows * blocks * batch,
        bytes_moved: npanels * blocks * PANEL_BLOCK_BYTES as u64
            + batch * blocks * BLOCK_BYTES as u64
            + 4 * rows * batch,
    })
}

// SAFETY: the body reads only the panel blocks of the panels meeting
// row_start..row_end and the blocks of the `batch` vectors, writes only
// the outputs of rows in the range, and returns (module docs); validation
// checks its results against the reference.
unsafe impl weft_kernel::Arm for Q8MatmulArm {
    fn name(&self) -> &'static str {
        ARM_NAME
    }

    fn family(&self) -> Family {
        Family(FAMILY)
    }

    /// With the site's `weights` operand (canonical Q8_0 bytes of the
    /// geometry; the wrong length is `bad-operand`), the offer carries them
    /// packed. Without it (weights that are call arguments, as a model's
    /// layers are: one site serves every layer), the offer carries none
    /// and the caller passes weights it packed itself ([`Q8PanelWeights`]).
    fn offer(&self, site: &Site, _host: &Host) -> Result<Offer, Refusal> {
        if site.family.name() != FAMILY {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!("family {} is not {FAMILY}", site.family),
            });
        }
        let (rows, cols, batch) = dims(&site.geometry)?;
        match site.operand("weights") {
            Some(op) => {
                let w = Q8Weights::from_bytes(op.bytes.to_vec(), rows as usize, cols as usize)?;
                offer_for(&Q8PanelWeights::from_weights(&w), batch)
            }
            None => offer_at(rows, cols, batch),
        }
    }

    fn build(&self, offer: &Offer, isa: Isa) -> Result<NativeCode, Refusal> {
        check_offer(offer, ARM_NAME)?;
        build_native(isa, compile)
    }
}

/// Refuse an offer that is not this family's, or whose packed operand
/// (if it has one) is in another layout.
pub fn check_offer(offer: &Offer, who: &str) -> Result<(), Refusal> {
    if offer.contract.family != FAMILY || offer.contract.args != ARGS_NAME {
        return Err(Refusal::UnsupportedGeometry {
            reason: format!(
                "{who} builds {FAMILY} with {ARGS_NAME}, not {} with {}",
                offer.contract.family, offer.contract.args
            ),
        });
    }
    match offer.packed.first() {
        Some(p) if p.layout == LAYOUT => Ok(()),
        Some(p) => Err(Refusal::UnknownLayout {
            layout: p.layout.to_owned(),
        }),
        None => Ok(()),
    }
}

/// A placed `q8_0.matmul` kernel (arm or twin) with a checked interface.
pub struct Q8MatmulKernel {
    kernel: Kernel<Q8MatmulArgs>,
}

impl std::fmt::Debug for Q8MatmulKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.kernel.fmt(f)
    }
}

impl Q8MatmulKernel {
    /// Place `code`.
    ///
    /// # Safety
    ///
    /// `code` must be a `q8_0.matmul` body for the host honouring the leaf
    /// ABI for [`Q8MatmulArgs`]: it reads only the panel blocks and
    /// activation blocks the arguments name, writes only `y[n · rows + r]`
    /// for rows in `row_start..row_end`, and returns normally.
    pub unsafe fn from_native(code: &NativeCode) -> Result<Self, Refusal> {
        // SAFETY: the caller promises a q8_0.matmul leaf body.
        let kernel = unsafe { Kernel::from_native(code)? };
        Ok(Self { kernel })
    }

    /// Compile the host arm and place it.
    pub fn of_arm() -> Result<Self, Refusal> {
        let code = build_native(host_isa(), compile)?;
        // SAFETY: the arm's CLIF (above) reads the panel blocks of the
        // panels meeting row_start..row_end and the `batch` vectors, writes
        // only outputs of rows in the range, and returns.
        unsafe { Self::from_native(&code) }
    }

    /// The placed kernel.
    pub fn kernel(&self) -> &Kernel<Q8MatmulArgs> {
        &self.kernel
    }

    /// `Y = W·X` for rows `rows`, lengths checked.
    pub fn run(
        &self,
        weights: &Q8PanelWeights,
        x: &Q8Activations,
        y: &mut [f32],
        rows: std::ops::Range<usize>,
    ) -> Result<(), Refusal> {
        let args = Q8MatmulArgs::new(weights, x, y, rows)?;
        // SAFETY: `new` checked every extent against the borrowed buffers,
        // which outlive the call.
        unsafe { self.kernel.call(&args) };
        Ok(())
    }

    /// `Y = W·X` for every row, split by `views` into at most `parts`
    /// ranges ([`KernelArgs::restrict`]) run one after another: the same
    /// bits as one call, which is what a threaded executor relies on.
    pub fn run_split(
        &self,
        weights: &Q8PanelWeights,
        x: &Q8Activations,
        y: &mut [f32],
        views: &MemberViews,
        parts: u64,
    ) -> Result<(), Refusal> {
        let whole = Q8MatmulArgs::new(weights, x, y, 0..weights.rows())?;
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
