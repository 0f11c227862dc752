//! The family's arms: CLIF built here, compiled by Cranelift through
//! weft-managed for either ISA. They are the references their twins are
//! validated against, and all three round as the contract says.
//!
//! One builder walks every arm; an [`ArmKind`] says how B is addressed and
//! how tall a register tile is:
//!
//! ```text
//! for kb in (0..k).step_by(KC)            // k blocks (a do-while: k = 0 still writes β⊗C)
//!   for i in m_start.. step MR            // full row tiles, then single rows
//!     for j in n_start.. step 4·NV        // f32x4 column tiles, then single columns
//!       acc = kb > 0 ? C : β ≠ 0 ? β⊗C : +0
//!       for kk in kb..kb+kc: acc[r][v] = fma(splat(α⊗A[i+r,kk]), B[kk, j+4v..], acc[r][v])
//!       C = acc
//! ```
//!
//! With B in panels, a rectangle whose columns start off a tile boundary
//! begins with single columns, so a vector tile never straddles panels
//! (member views start on [`N_GRANULE`] boundaries).
//!
//! Storing the accumulators to C between `k` blocks is exact (module docs
//! of the crate), so every `KC` gives the same bits; `KC` only keeps a
//! tile's operands in L1.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, Endianness, Function, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use weft_kernel::{Family, Host, Isa, LoopTrip, MemberViews, NativeCode, Offer, Refusal, Site};
use weft_managed::arm_build::build_native;
use weft_managed::Target;

use crate::pack::PackedB;
use crate::{contract, dims, offsets, BLayout, MatRef, FAMILY, KC, M_GRANULE, N_GRANULE};

/// The arms of the family (crate docs say what each is for).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArmKind {
    /// B in rows (`ldb`), tiles of 4 × 8.
    Direct,
    /// B packed in panels at plan time, tiles of 4 × 8.
    Panels,
    /// B in panels, all `m ≤ 8` rows in one tile, B read once.
    SmallM,
}

impl ArmKind {
    /// Every arm, in registration (shipped) order.
    pub const ALL: [ArmKind; 3] = [ArmKind::Direct, ArmKind::Panels, ArmKind::SmallM];

    /// The arm's candidate name.
    pub fn name(self) -> &'static str {
        match self {
            ArmKind::Direct => "f32.gemm.arm.direct",
            ArmKind::Panels => "f32.gemm.arm.panels",
            ArmKind::SmallM => "f32.gemm.arm.small_m",
        }
    }

    /// Whether B reaches the body packed in panels.
    pub fn packs_b(self) -> bool {
        !matches!(self, ArmKind::Direct)
    }

    /// The arm's register tile at `m`: rows, and f32x4 vectors per row.
    pub fn tile(self, m: u64) -> (usize, usize) {
        match self {
            ArmKind::Direct | ArmKind::Panels => (4, 2),
            ArmKind::SmallM => {
                let m = m.clamp(1, SMALL_M_MAX) as usize;
                (
                    m,
                    if m <= 2 {
                        4
                    } else if m <= 4 {
                        2
                    } else {
                        1
                    },
                )
            }
        }
    }
}

/// Largest `m` the `small_m` arm serves.
pub const SMALL_M_MAX: u64 = 8;

/// The arm `ArmKind` as a [`weft_kernel::Arm`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmArm(pub ArmKind);

fn flags() -> MemFlagsData {
    let mut f = MemFlagsData::new().with_endianness(Endianness::Little);
    f.set_notrap();
    f
}

/// The member views of a site: `m` (each thread reads half of A and all
/// of B, which packing made contiguous) unless splitting it in two (the
/// executor's usual count on the machines Weft targets) leaves one part
/// far larger than splitting `n` would. `small_m` splits `n`: its tile
/// is every row.
pub fn views(kind: ArmKind, m: u64, n: u64) -> MemberViews {
    let along = |axis: &str, extent: u64, granule: u64| MemberViews {
        axis: axis.to_owned(),
        extent,
        granule,
    };
    let (by_m, by_n) = (along("m", m, M_GRANULE), along("n", n, N_GRANULE));
    if kind == ArmKind::SmallM {
        return by_n;
    }
    // The larger part's share of its axis. Splitting n makes both
    // threads copy every row of A (twice the packing, each copy amortised
    // over half the columns): measured 15% slower at 1024³, so m keeps
    // its split unless its larger part is over a tenth more of its axis.
    let share = |v: &MemberViews| {
        let largest = v
            .split(2)
            .iter()
            .map(|r| r.end - r.start)
            .max()
            .unwrap_or(0);
        largest as f64 / v.extent.max(1) as f64
    };
    if share(&by_m) <= share(&by_n) + 0.1 {
        by_m
    } else {
        by_n
    }
}

/// The loop nest of the arm `kind` with `mr × 4·nv` tiles at `m × n × k`,
/// in the order weft-cost finds loops in its bytes (outermost first, then
/// each loop's children in code order): the k blocks; the full row tiles,
/// whose column sweep is (for panels) a loop of single columns up to a
/// tile boundary, the vector tiles and the single-column tail, each with
/// its `k` loop; then the single rows with the same three sweeps. Trip
/// counts are per entry, for a call over the whole of C (which starts on
/// a tile boundary: the alignment loops run zero times).
pub fn nest(kind: ArmKind, m: u64, n: u64, k: u64, (mr, nv): (usize, usize)) -> Vec<LoopTrip> {
    let t = |name: &str, trips: u64, depth: u32| LoopTrip {
        name: name.to_owned(),
        trips,
        depth,
    };
    let (mr, nw) = (mr as u64, 4 * nv as u64);
    let blocks = k.div_ceil(KC).max(1);
    let kk = k / blocks;
    let mut out = vec![t("k_blocks", blocks, 0)];
    for (rows, row_trips) in [("row_tiles", m / mr), ("single_rows", m % mr)] {
        out.push(t(rows, row_trips, 1));
        if kind.packs_b() {
            out.push(t("align_columns", 0, 2));
            out.push(t("k", kk, 3));
        }
        out.push(t("column_tiles", n / nw, 2));
        out.push(t("k", kk, 3));
        out.push(t("single_columns", n % nw, 2));
        out.push(t("k", kk, 3));
    }
    out
}

/// The offer of `kind` at `site`, or why it cannot serve it.
pub fn offer(kind: ArmKind, site: &Site) -> Result<Offer, Refusal> {
    if site.family.name() != FAMILY {
        return Err(Refusal::UnsupportedGeometry {
            reason: format!("family {} is not {FAMILY}", site.family),
        });
    }
    let (m, n, k, layout) = dims(&site.geometry)?;
    let mut packed = Vec::new();
    match kind {
        ArmKind::Direct if layout == BLayout::Transposed => {
            return Err(Refusal::UnsupportedGeometry {
                reason: "B is n × k: only a packing arm reads it".to_owned(),
            })
        }
        // A constant B is the packing arms' to serve: packed once at plan
        // time, a panel gives a tile one cache line per k step where rows
        // give a line ldb·4 bytes from the last; so the arms' choice
        // follows what the site gives, and prices decide between the
        // packing arms only.
        ArmKind::Direct if site.operand("b").is_some() => {
            return Err(Refusal::UnsupportedGeometry {
                reason: "B is given at plan time: a packing arm serves it".to_owned(),
            })
        }
        ArmKind::Direct => {}
        ArmKind::Panels | ArmKind::SmallM => {
            if kind == ArmKind::SmallM && m > SMALL_M_MAX {
                return Err(Refusal::UnsupportedGeometry {
                    reason: format!("m = {m} > {SMALL_M_MAX} rows in one tile"),
                });
            }
            let op = site.operand("b").ok_or_else(|| Refusal::BadOperand {
                operand: "b".to_owned(),
                reason: "packing needs B at plan time; the site has none".to_owned(),
            })?;
            let (k, n) = (k as usize, n as usize);
            if op.bytes.len() != 4 * k * n {
                return Err(Refusal::BadOperand {
                    operand: "b".to_owned(),
                    reason: format!("{} bytes, a {k} × {n} B is {}", op.bytes.len(), 4 * k * n),
                });
            }
            let values: Vec<f32> = op
                .bytes
                .chunks_exact(4)
                .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect();
            let b = match layout {
                BLayout::Rows => MatRef::dense(&values, k, n),
                BLayout::Transposed => MatRef::dense(&values, n, k),
            };
            packed.push(PackedB::pack(b, layout)?.operand());
        }
    }
    let tile = kind.tile(m);
    Ok(Offer {
        contract: contract(&site.geometry),
        packed,
        views: Some(views(kind, m, n)),
        loops: nest(kind, m, n, k, tile),
        flops: 2 * m * n * k,
        bytes_moved: 4 * (m * k + k * n + m * n),
    })
}

// SAFETY: the body reads A's rows `m_start..m_end` (k elements at stride
// lda), B's k × n (rows at stride ldb, or panels), and C only inside the
// rectangle (when β ≠ 0 or after the first k block), writes C only inside
// it, and returns (module docs); validation checks it against the
// reference.
unsafe impl weft_kernel::Arm for GemmArm {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn family(&self) -> Family {
        Family(FAMILY)
    }

    fn offer(&self, site: &Site, _host: &Host) -> Result<Offer, Refusal> {
        offer(self.0, site)
    }

    fn build(&self, offer: &Offer, isa: Isa) -> Result<NativeCode, Refusal> {
        if offer.contract.family != FAMILY {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!("offer is for {}", offer.contract.family),
            });
        }
        let (m, _, _, _) = dims(&offer.contract.geometry)?;
        let tile = self.0.tile(m);
        let kind = self.0;
        build_native(isa, |t| t.compile(build_function(t, kind, tile)))
    }
}

/// Where a tile's B starts and how far one `k` step moves it.
fn b_start(
    b: &mut FunctionBuilder<'_>,
    kind: ArmKind,
    base: Value,
    (kb, j, k, ldb): (Value, Value, Value, Value),
) -> (Value, Value) {
    if kind.packs_b() {
        // ((j / 16) · k + kb) · 64 + (j % 16) · 4
        let p = b.ins().ushr_imm_u(j, 4);
        let pk = b.ins().imul(p, k);
        let line = b.ins().iadd(pk, kb);
        let off = b.ins().ishl_imm_u(line, 6);
        let c = b.ins().band_imm_s(j, 15);
        let c = b.ins().ishl_imm_u(c, 2);
        let off = b.ins().iadd(off, c);
        let step = b.ins().iconst(types::I64, 64);
        (b.ins().iadd(base, off), step)
    } else {
        // (kb · ldb + j) · 4
        let row = b.ins().imul(kb, ldb);
        let e = b.ins().iadd(row, j);
        let off = b.ins().ishl_imm_u(e, 2);
        let step = b.ins().ishl_imm_u(ldb, 2);
        (b.ins().iadd(base, off), step)
    }
}

/// Everything a tile needs from the entry block and the loop variables.
struct Env {
    kind: ArmKind,
    a: Value,
    bb: Value,
    c: Value,
    lda4: Value,
    ldb: Value,
    ldc4: Value,
    k: Value,
    alpha: Value,
    var_kb: Variable,
    var_kc: Variable,
    var_use_c: Variable,
    var_scale: Variable,
    var_i: Variable,
    var_j: Variable,
    var_t: Variable,
    var_pa: Variable,
    var_pb: Variable,
}

/// One register tile of `rows` rows × (`nv` f32x4 vectors, or one column
/// when `nv == 0`) at `(i, j)`: initialise, run the k block, store. Ends
/// in a fresh block the caller continues from.
fn tile(b: &mut FunctionBuilder<'_>, e: &Env, rows: usize, nv: usize) {
    let f = flags();
    let vec = nv > 0;
    let ty = if vec { types::F32X4 } else { types::F32 };
    let per_row = nv.max(1);
    let accs: Vec<Variable> = (0..rows * per_row).map(|_| b.declare_var(ty)).collect();

    let init_c = b.create_block();
    let init_zero = b.create_block();
    let k_pre = b.create_block();
    let k_head = b.create_block();
    let k_body = b.create_block();
    let k_done = b.create_block();

    let (i, j) = (b.use_var(e.var_i), b.use_var(e.var_j));
    // C's tile: (i · ldc + j) · 4, rows ldc · 4 apart.
    let ci = b.ins().imul(i, e.ldc4);
    let cj = b.ins().ishl_imm_u(j, 2);
    let pc = b.ins().iadd(e.c, ci);
    let pc = b.ins().iadd(pc, cj);
    let use_c = b.use_var(e.var_use_c);
    b.ins().brif(use_c, init_c, &[], init_zero, &[]);

    b.switch_to_block(init_c);
    let scale = b.use_var(e.var_scale);
    let scale = if vec { b.ins().splat(ty, scale) } else { scale };
    for r in 0..rows {
        for v in 0..per_row {
            let off = b.ins().imul_imm_s(e.ldc4, r as i64);
            let p = b.ins().iadd(pc, off);
            let x = b.ins().load(ty, f, p, 16 * v as i32);
            let x = b.ins().fmul(scale, x);
            b.def_var(accs[r * per_row + v], x);
        }
    }
    b.ins().jump(k_pre, &[]);

    b.switch_to_block(init_zero);
    let z = b.ins().f32const(0.0);
    let z = if vec { b.ins().splat(ty, z) } else { z };
    for v in &accs {
        b.def_var(*v, z);
    }
    b.ins().jump(k_pre, &[]);

    b.switch_to_block(k_pre);
    let (kb, i, j) = (b.use_var(e.var_kb), b.use_var(e.var_i), b.use_var(e.var_j));
    let ai = b.ins().imul(i, e.lda4);
    let ak = b.ins().ishl_imm_u(kb, 2);
    let pa = b.ins().iadd(e.a, ai);
    let pa = b.ins().iadd(pa, ak);
    let (pb, bstep) = b_start(b, e.kind, e.bb, (kb, j, e.k, e.ldb));
    let zero = b.ins().iconst(types::I64, 0);
    b.def_var(e.var_pa, pa);
    b.def_var(e.var_pb, pb);
    b.def_var(e.var_t, zero);
    let row_off: Vec<Value> = (0..rows)
        .map(|r| b.ins().imul_imm_s(e.lda4, r as i64))
        .collect();
    b.ins().jump(k_head, &[]);

    b.switch_to_block(k_head);
    let t = b.use_var(e.var_t);
    let kc = b.use_var(e.var_kc);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, t, kc);
    b.ins().brif(more, k_body, &[], k_done, &[]);

    b.switch_to_block(k_body);
    let (pa, pb) = (b.use_var(e.var_pa), b.use_var(e.var_pb));
    let bv: Vec<Value> = (0..per_row)
        .map(|v| b.ins().load(ty, f, pb, 16 * v as i32))
        .collect();
    for (r, off) in row_off.iter().enumerate() {
        let p = b.ins().iadd(pa, *off);
        let x = b.ins().load(types::F32, f, p, 0);
        let x = b.ins().fmul(e.alpha, x);
        let x = if vec { b.ins().splat(ty, x) } else { x };
        for (v, bvv) in bv.iter().enumerate() {
            let acc = b.use_var(accs[r * per_row + v]);
            let acc = b.ins().fma(x, *bvv, acc);
            b.def_var(accs[r * per_row + v], acc);
        }
    }
    let pa = b.ins().iadd_imm_s(pa, 4);
    let pb = b.ins().iadd(pb, bstep);
    let t = b.use_var(e.var_t);
    let t = b.ins().iadd_imm_s(t, 1);
    b.def_var(e.var_pa, pa);
    b.def_var(e.var_pb, pb);
    b.def_var(e.var_t, t);
    b.ins().jump(k_head, &[]);

    b.switch_to_block(k_done);
    for r in 0..rows {
        for v in 0..per_row {
            let off = b.ins().imul_imm_s(e.ldc4, r as i64);
            let p = b.ins().iadd(pc, off);
            let x = b.use_var(accs[r * per_row + v]);
            b.ins().store(f, x, p, 16 * v as i32);
        }
    }
}

/// A loop over columns `j` from `n_start`: `nv`-vector tiles while they
/// fit, then single columns. Leaves the builder in the block after it.
fn column_sweep(
    b: &mut FunctionBuilder<'_>,
    e: &Env,
    n_start: Value,
    n_end: Value,
    rows: usize,
    nv: usize,
) {
    let nw = 4 * nv as i64;
    let v_head = b.create_block();
    let v_body = b.create_block();
    let s_head = b.create_block();
    let s_body = b.create_block();
    let done = b.create_block();
    b.def_var(e.var_j, n_start);
    if e.kind.packs_b() {
        // A vector tile must not straddle two panels: single columns
        // until j is a multiple of the tile width (a view's start is).
        let a_head = b.create_block();
        let a_body = b.create_block();
        b.ins().jump(a_head, &[]);
        b.switch_to_block(a_head);
        let j = b.use_var(e.var_j);
        let off = b.ins().band_imm_s(j, nw - 1);
        let misaligned = b.ins().icmp_imm_u(IntCC::NotEqual, off, 0);
        let inside = b.ins().icmp(IntCC::UnsignedLessThan, j, n_end);
        let go = b.ins().band(misaligned, inside);
        b.ins().brif(go, a_body, &[], v_head, &[]);
        b.switch_to_block(a_body);
        tile(b, e, rows, 0);
        let j = b.use_var(e.var_j);
        let j = b.ins().iadd_imm_s(j, 1);
        b.def_var(e.var_j, j);
        b.ins().jump(a_head, &[]);
    } else {
        b.ins().jump(v_head, &[]);
    }

    b.switch_to_block(v_head);
    let j = b.use_var(e.var_j);
    let left = b.ins().isub(n_end, j);
    let fits = b
        .ins()
        .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, left, nw);
    b.ins().brif(fits, v_body, &[], s_head, &[]);

    b.switch_to_block(v_body);
    tile(b, e, rows, nv);
    let j = b.use_var(e.var_j);
    let j = b.ins().iadd_imm_s(j, nw);
    b.def_var(e.var_j, j);
    b.ins().jump(v_head, &[]);

    b.switch_to_block(s_head);
    let j = b.use_var(e.var_j);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, j, n_end);
    b.ins().brif(more, s_body, &[], done, &[]);

    b.switch_to_block(s_body);
    tile(b, e, rows, 0);
    let j = b.use_var(e.var_j);
    let j = b.ins().iadd_imm_s(j, 1);
    b.def_var(e.var_j, j);
    b.ins().jump(s_head, &[]);

    b.switch_to_block(done);
}

/// Build the CLIF of `kind` with `mr × 4·nv` tiles for `target`.
pub fn build_function(target: &Target, kind: ArmKind, (mr, nv): (usize, usize)) -> Function {
    let mut func = target.leaf_function("f32_gemm_arm");
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut fctx);
    let ptr = target.pointer_type();
    let trusted = MemFlagsData::trusted();

    let entry = b.create_block();
    let kb_body = b.create_block();
    let i_head = b.create_block();
    let i_body = b.create_block();
    let i1_head = b.create_block();
    let i1_body = b.create_block();
    let kb_next = b.create_block();
    let exit = b.create_block();

    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let args = b.block_params(entry)[0];
    let ld = |b: &mut FunctionBuilder<'_>, off| b.ins().load(ptr, trusted, args, off);
    let a = ld(&mut b, offsets::A);
    let bb = ld(&mut b, offsets::B);
    let c = ld(&mut b, offsets::C);
    let lda = ld(&mut b, offsets::LDA);
    let ldb = ld(&mut b, offsets::LDB);
    let ldc = ld(&mut b, offsets::LDC);
    let k = ld(&mut b, offsets::K);
    let m_start = ld(&mut b, offsets::M_START);
    let m_end = ld(&mut b, offsets::M_END);
    let n_start = ld(&mut b, offsets::N_START);
    let n_end = ld(&mut b, offsets::N_END);
    let alpha = b.ins().load(types::F32, trusted, args, offsets::ALPHA);
    let beta = b.ins().load(types::F32, trusted, args, offsets::BETA);
    let lda4 = b.ins().ishl_imm_u(lda, 2);
    let ldc4 = b.ins().ishl_imm_u(ldc, 2);
    let env = Env {
        kind,
        a,
        bb,
        c,
        lda4,
        ldb,
        ldc4,
        k,
        alpha,
        var_kb: b.declare_var(ptr),
        var_kc: b.declare_var(ptr),
        var_use_c: b.declare_var(types::I8),
        var_scale: b.declare_var(types::F32),
        var_i: b.declare_var(ptr),
        var_j: b.declare_var(ptr),
        var_t: b.declare_var(ptr),
        var_pa: b.declare_var(ptr),
        var_pb: b.declare_var(ptr),
    };
    let zero = b.ins().iconst(ptr, 0);
    b.def_var(env.var_kb, zero);
    // No early exit for an empty rectangle: its loops run zero times (a
    // branch here would only halve the cost model's estimate of how often
    // the body runs).
    b.ins().jump(kb_body, &[]);

    // One k block (at least one, so k = 0 still writes β⊗C or +0).
    b.switch_to_block(kb_body);
    let kb = b.use_var(env.var_kb);
    let rest = b.ins().isub(k, kb);
    let kcap = b.ins().iconst(ptr, KC as i64);
    let kc = b.ins().umin(rest, kcap);
    b.def_var(env.var_kc, kc);
    let later = b.ins().icmp_imm_u(IntCC::NotEqual, kb, 0);
    let fzero = b.ins().f32const(0.0);
    let beta_nz = b.ins().fcmp(FloatCC::NotEqual, beta, fzero);
    let use_c = b.ins().bor(later, beta_nz);
    b.def_var(env.var_use_c, use_c);
    let one = b.ins().f32const(1.0);
    let scale = b.ins().select(later, one, beta);
    b.def_var(env.var_scale, scale);
    b.def_var(env.var_i, m_start);
    b.ins().jump(i_head, &[]);

    b.switch_to_block(i_head);
    let i = b.use_var(env.var_i);
    let left = b.ins().isub(m_end, i);
    let fits = b
        .ins()
        .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, left, mr as i64);
    b.ins().brif(fits, i_body, &[], i1_head, &[]);

    b.switch_to_block(i_body);
    column_sweep(&mut b, &env, n_start, n_end, mr, nv);
    let i = b.use_var(env.var_i);
    let i = b.ins().iadd_imm_s(i, mr as i64);
    b.def_var(env.var_i, i);
    b.ins().jump(i_head, &[]);

    b.switch_to_block(i1_head);
    let i = b.use_var(env.var_i);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, i, m_end);
    b.ins().brif(more, i1_body, &[], kb_next, &[]);

    b.switch_to_block(i1_body);
    column_sweep(&mut b, &env, n_start, n_end, 1, nv);
    let i = b.use_var(env.var_i);
    let i = b.ins().iadd_imm_s(i, 1);
    b.def_var(env.var_i, i);
    b.ins().jump(i1_head, &[]);

    b.switch_to_block(kb_next);
    let kb = b.use_var(env.var_kb);
    let kb = b.ins().iadd_imm_s(kb, KC as i64);
    b.def_var(env.var_kb, kb);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, kb, k);
    b.ins().brif(more, kb_body, &[], exit, &[]);

    b.switch_to_block(exit);
    b.ins().return_(&[]);
    b.seal_all_blocks();
    b.finalize(target.frontend_config());
    func
}
