//! `loopnest.rope`: rotary position embedding, in place on Q and K.
//!
//! # Contract
//!
//! The GGUF llama convention (ggml's "normal" rope): pairs of adjacent
//! elements `(x[2i], x[2i+1])` of each head, `i < rope_dims/2`, rotated by
//! `θ = p · base^(-2i/rope_dims)` at position `p`; elements from
//! `rope_dims` to `head_dim` are left as they are.
//!
//! Geometry: `heads`, `kv_heads` (`≥ 1`), `head_dim` (even), `rope_dims`
//! (even, `2..=head_dim`, default `head_dim`), `rows` (tokens, default 1;
//! pricing and views only). Row `r` of Q (`heads · head_dim` f32s) and of
//! K (`kv_heads · head_dim`) is at position `pos + r`.
//!
//! cos and sin come from a [`RopeTable`] built at plan time: for position
//! `p` and pair `i`, `c = f32(cos θ)`, `s = f32(sin θ)` with θ computed in
//! binary64 by [`crate::portable`] (only `+ − × ÷`, so the same bits on
//! every host; generated code calls no libm). Its row for `p` holds
//! `rope_dims` values `C[j] = c_(j/2)` then `rope_dims` values
//! `S[j] = ∓s_(j/2)` (`-` for even `j`). Each element, one IEEE binary32
//! operation a step, no FMA:
//!
//! `x'[j] = (x[j] ⊗ C[j]) ⊕ (x[j^1] ⊗ S[j])`
//!
//! which is `x0·c − x1·s` and `x1·c + x0·s` exactly (negating `s` is
//! exact, `⊕` commutes). Both elements of a pair are read before either is
//! written (the IR's granule of 2). NaNs compare by class. Splits are
//! along `rows`, granule 1 (a row's position is absolute, so any split
//! gives the same bits). θ beyond [`crate::portable::SIN_COS_MAX`] is
//! refused: tables hold at most 2^20 positions.
//!
//! The table is more accurate than llama.cpp's own (which steps θ in f32),
//! so results differ from llama.cpp in the last bits, growing with `p`.

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
    Affine, Elem, Expr, Extent, Guard, Kernel, Loop, Param, ParamId, ParamKind, Stmt, Storage,
    VarId,
};
use crate::portable;

/// The family's name.
pub const FAMILY: &str = "loopnest.rope";
/// The argument struct's name in contracts.
pub const ARGS_NAME: &str = "RopeArgs";
/// Most positions a table may hold.
pub const MAX_POSITIONS: usize = 1 << 20;

/// cos and sin per (position, pair), laid out for the kernel (module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct RopeTable {
    data: Vec<f32>,
    freq_base: f64,
    rope_dims: usize,
    positions: usize,
}

impl RopeTable {
    /// The table for `positions` positions of `rope_dims` rotated
    /// dimensions at frequency base `freq_base` (GGUF
    /// `llama.rope.freq_base`; `rope_dims` is the rope dimension count).
    pub fn new(freq_base: f64, rope_dims: usize, positions: usize) -> Result<Self, Refusal> {
        if !(freq_base.is_finite() && freq_base > 1.0 && freq_base < 1e30) {
            return Err(bad("freq_base", format!("{freq_base} is not in (1, 1e30)")));
        }
        if rope_dims < 2 || !rope_dims.is_multiple_of(2) || rope_dims > 1 << 16 {
            return Err(bad(
                "rope_dims",
                format!("{rope_dims} is not even in 2..=65536"),
            ));
        }
        if positions == 0 || positions > MAX_POSITIONS {
            return Err(bad(
                "positions",
                format!("{positions} is outside 1..={MAX_POSITIONS}"),
            ));
        }
        let ln_base = portable::ln(freq_base);
        let inv: Vec<f64> = (0..rope_dims / 2)
            .map(|i| portable::exp(-((2 * i) as f64 / rope_dims as f64) * ln_base))
            .collect();
        let mut data = Vec::with_capacity(positions * 2 * rope_dims);
        let mut sin = vec![0f32; rope_dims];
        for p in 0..positions {
            for (i, f) in inv.iter().enumerate() {
                let (s, c) = portable::sin_cos(p as f64 * f);
                data.push(c as f32);
                data.push(c as f32);
                sin[2 * i] = -(s as f32);
                sin[2 * i + 1] = s as f32;
            }
            data.extend_from_slice(&sin);
        }
        Ok(Self {
            data,
            freq_base,
            rope_dims,
            positions,
        })
    }

    /// The values, row by row.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// Rotated dimensions.
    pub fn rope_dims(&self) -> usize {
        self.rope_dims
    }

    /// Positions held.
    pub fn positions(&self) -> usize {
        self.positions
    }

    /// The frequency base.
    pub fn freq_base(&self) -> f64 {
        self.freq_base
    }

    /// `(cos θ, sin θ)` of pair `i` at position `p`, as stored.
    pub fn cos_sin(&self, p: usize, i: usize) -> Option<(f32, f32)> {
        if p >= self.positions || i >= self.rope_dims / 2 {
            return None;
        }
        let row = &self.data[p * 2 * self.rope_dims..(p + 1) * 2 * self.rope_dims];
        Some((row[2 * i], row[self.rope_dims + 2 * i + 1]))
    }
}

/// The shape of a RoPE site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rope {
    /// Query heads.
    pub heads: usize,
    /// Key heads.
    pub kv_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// Rotated elements per head (even, at most `head_dim`).
    pub rope_dims: usize,
    /// Tokens at the site (pricing and views).
    pub rows: usize,
}

/// The arguments of every `loopnest.rope` body.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RopeArgs {
    /// `rows · heads · head_dim` f32s, rotated in place.
    pub q: *mut f32,
    /// `rows · kv_heads · head_dim` f32s, rotated in place.
    pub k: *mut f32,
    /// The [`RopeTable`]'s values.
    pub table: *const f32,
    /// Rows (tokens) in `q` and `k`.
    pub rows: usize,
    /// First row rotated.
    pub row_start: usize,
    /// One past the last row rotated.
    pub row_end: usize,
    /// Position of row 0.
    pub pos: usize,
    /// Positions in the table.
    pub positions: usize,
    /// Must equal the compiled shape's.
    pub heads: usize,
    /// Must equal the compiled shape's.
    pub kv_heads: usize,
    /// Must equal the compiled shape's.
    pub head_dim: usize,
    /// Must equal the compiled shape's and the table's.
    pub rope_dims: usize,
}

// SAFETY: the `#[repr(C)]` struct of every contract naming ARGS_NAME. A
// body reads the table and reads and writes rows `row_start..row_end` of
// `q` and `k` only, so copies restricted to disjoint row ranges touch
// disjoint memory (the table is never written).
unsafe impl KernelArgs for RopeArgs {
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
unsafe impl Send for RopeArgs {}
// SAFETY: as for `Send`: a shared reference only lets threads copy it.
unsafe impl Sync for RopeArgs {}

fn check_lengths(
    op: &Rope,
    q: &[f32],
    k: &[f32],
    table: &RopeTable,
    pos: usize,
    rows: &Range<usize>,
) -> Result<usize, Refusal> {
    let q_row = op.heads * op.head_dim;
    let k_row = op.kv_heads * op.head_dim;
    if !q.len().is_multiple_of(q_row) {
        return Err(bad("q", format!("{} f32s is not rows of {q_row}", q.len())));
    }
    let total = q.len() / q_row;
    if k.len() != total * k_row {
        return Err(bad(
            "k",
            format!(
                "{} f32s, {total} rows of {k_row} need {}",
                k.len(),
                total * k_row
            ),
        ));
    }
    if table.rope_dims() != op.rope_dims {
        return Err(bad(
            "table",
            format!(
                "{} rotated dims, the site has {}",
                table.rope_dims(),
                op.rope_dims
            ),
        ));
    }
    check_range("rows", rows, total)?;
    if pos > table.positions() || rows.end > table.positions() - pos {
        return Err(bad(
            "pos",
            format!(
                "rows {rows:?} at {pos} pass the table's {} positions",
                table.positions()
            ),
        ));
    }
    Ok(total)
}

impl RopeArgs {
    /// Arguments rotating rows `rows` of `q` and `k` (row `r` at position
    /// `pos + r`), every length checked against the shape and the table.
    pub fn new(
        op: &Rope,
        q: &mut [f32],
        k: &mut [f32],
        table: &RopeTable,
        pos: usize,
        rows: Range<usize>,
    ) -> Result<Self, Refusal> {
        let total = check_lengths(op, q, k, table, pos, &rows)?;
        Ok(Self {
            q: q.as_mut_ptr(),
            k: k.as_mut_ptr(),
            table: table.as_slice().as_ptr(),
            rows: total,
            row_start: rows.start,
            row_end: rows.end,
            pos,
            positions: table.positions(),
            heads: op.heads,
            kv_heads: op.kv_heads,
            head_dim: op.head_dim,
            rope_dims: op.rope_dims,
        })
    }
}

const Q: ParamId = ParamId(0);
const K: ParamId = ParamId(1);
const TABLE: ParamId = ParamId(2);
const ROWS: ParamId = ParamId(3);
const ROW_START: ParamId = ParamId(4);
const ROW_END: ParamId = ParamId(5);
const POS: ParamId = ParamId(6);
const POSITIONS: ParamId = ParamId(7);
const HEADS: ParamId = ParamId(8);
const KV_HEADS: ParamId = ParamId(9);
const HEAD_DIM: ParamId = ParamId(10);
const ROPE_DIMS: ParamId = ParamId(11);

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
    let ix = ParamKind::Index;
    vec![
        p("q", offset_of!(RopeArgs, q), f32_buf(true)),
        p("k", offset_of!(RopeArgs, k), f32_buf(true)),
        p("table", offset_of!(RopeArgs, table), f32_buf(false)),
        p("rows", offset_of!(RopeArgs, rows), ix),
        p("row_start", offset_of!(RopeArgs, row_start), ix),
        p("row_end", offset_of!(RopeArgs, row_end), ix),
        p("pos", offset_of!(RopeArgs, pos), ix),
        p("positions", offset_of!(RopeArgs, positions), ix),
        p("heads", offset_of!(RopeArgs, heads), ix),
        p("kv_heads", offset_of!(RopeArgs, kv_heads), ix),
        p("head_dim", offset_of!(RopeArgs, head_dim), ix),
        p("rope_dims", offset_of!(RopeArgs, rope_dims), ix),
    ]
}

impl Rope {
    /// The shape, checked as a site's geometry would be.
    pub fn new(
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
        rope_dims: usize,
        rows: usize,
    ) -> Result<Self, Refusal> {
        Self::from_geometry(
            &Geometry::new()
                .with("heads", heads as u64)
                .with("kv_heads", kv_heads as u64)
                .with("head_dim", head_dim as u64)
                .with("rope_dims", rope_dims as u64)
                .with("rows", rows as u64),
        )
    }

    /// One head's rotation loop over buffer `buf` with `n_heads` heads.
    fn heads_loop(
        &self,
        names: [&'static str; 2],
        buf: ParamId,
        n_heads: usize,
        vars: [VarId; 2],
    ) -> Stmt {
        let ([name, pairs], [h, j]) = (names, vars);
        let (d, rd) = (self.head_dim as i64, self.rope_dims as i64);
        let r = VarId(0);
        let x_at = Affine::var(j)
            .plus_var(d, h)
            .plus_var(n_heads as i64 * d, r);
        let t_row = Affine::var(j).plus_var(2 * rd, r).plus_param(2 * rd, POS);
        let x = Expr::load_f32(buf, x_at.clone());
        let partner = Expr::Load {
            buf,
            elem: Elem::F32,
            at: x_at.clone(),
            swap_pairs: true,
        };
        let c = Expr::load_f32(TABLE, t_row.clone());
        let s = Expr::load_f32(TABLE, t_row.plus(rd));
        Stmt::Loop(Loop {
            name,
            var: h,
            start: Extent::Const(0),
            end: Extent::Const(n_heads as u64),
            width: 1,
            granule: 1,
            body: vec![Stmt::Loop(Loop {
                name: pairs,
                var: j,
                start: Extent::Const(0),
                end: Extent::Const(self.rope_dims as u64),
                width: 4,
                granule: 2,
                body: vec![Stmt::Store {
                    buf,
                    at: x_at,
                    value: x.times(c).plus(partner.times(s)),
                }],
            })],
        })
    }

    /// The reference: the nest run by the interpreter, on the same checks
    /// as [`RopeArgs::new`].
    pub fn reference(
        &self,
        q: &mut [f32],
        k: &mut [f32],
        table: &RopeTable,
        pos: usize,
        rows: Range<usize>,
    ) -> Result<(), Refusal> {
        let total = check_lengths(self, q, k, table, pos, &rows)?;
        let ix = |v: usize| Arg::Index(v as u64);
        let mut args = vec![
            Arg::Buffer(Buffer::F32(q.to_vec())),
            Arg::Buffer(Buffer::F32(k.to_vec())),
            Arg::Buffer(Buffer::F32(table.as_slice().to_vec())),
            ix(total),
            ix(rows.start),
            ix(rows.end),
            ix(pos),
            ix(table.positions()),
            ix(self.heads),
            ix(self.kv_heads),
            ix(self.head_dim),
            ix(self.rope_dims),
        ];
        interpret(self, &mut args)?;
        if let (Some(nq), Some(nk)) = (args[0].f32s(), args[1].f32s()) {
            q.copy_from_slice(nq);
            k.copy_from_slice(nk);
        }
        Ok(())
    }
}

// SAFETY: the guards fix heads, kv_heads, head_dim and rope_dims to the
// compiled ones and keep `row_start <= row_end <= rows` and
// `pos + row_end <= positions`. Loads and stores of q (k) are at
// `r·heads·head_dim + h·head_dim + j` (with `j ^ 1` for the partner, still
// below rope_dims <= head_dim) for `r < rows`, inside what
// `RopeArgs::new` checked; table loads are at
// `(pos + r)·2·rope_dims + j (+ rope_dims)` below `positions · 2 · rope_dims`,
// the table's length.
unsafe impl NestOp for Rope {
    const FAMILY: &'static str = FAMILY;
    const ARM: &'static str = "rope.arm.nest";
    type Args = RopeArgs;

    fn from_geometry(g: &Geometry) -> Result<Self, Refusal> {
        let heads = dim(g, "heads", 1, 1 << 12)?;
        let kv_heads = dim(g, "kv_heads", 1, 1 << 12)?;
        let head_dim = dim(g, "head_dim", 2, 1 << 14)?;
        let rope_dims = dim_or(g, "rope_dims", head_dim as u64, 2, head_dim as u64)?;
        let rows = dim_or(g, "rows", 1, 1, MAX_EXTENT)?;
        if head_dim % 2 != 0 || rope_dims % 2 != 0 {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!("head_dim {head_dim} and rope_dims {rope_dims} must be even"),
            });
        }
        Ok(Self {
            heads,
            kv_heads,
            head_dim,
            rope_dims,
            rows,
        })
    }

    fn geometry(&self) -> Geometry {
        Geometry::new()
            .with("heads", self.heads as u64)
            .with("kv_heads", self.kv_heads as u64)
            .with("head_dim", self.head_dim as u64)
            .with("rope_dims", self.rope_dims as u64)
            .with("rows", self.rows as u64)
    }

    fn nest(&self) -> Kernel {
        let eq = |p, v: usize| Guard::Eq(Extent::Param(p), Extent::Const(v as u64));
        Kernel {
            name: format!(
                "loopnest_rope_{}x{}x{}r{}",
                self.heads, self.kv_heads, self.head_dim, self.rope_dims
            ),
            params: params(),
            guards: vec![
                eq(HEADS, self.heads),
                eq(KV_HEADS, self.kv_heads),
                eq(HEAD_DIM, self.head_dim),
                eq(ROPE_DIMS, self.rope_dims),
                Guard::SumLe(vec![Extent::Param(ROW_START)], Extent::Param(ROW_END)),
                Guard::SumLe(vec![Extent::Param(ROW_END)], Extent::Param(ROWS)),
                Guard::SumLe(
                    vec![Extent::Param(POS), Extent::Param(ROW_END)],
                    Extent::Param(POSITIONS),
                ),
            ],
            body: vec![Stmt::Loop(Loop {
                name: "rows",
                var: VarId(0),
                start: Extent::Param(ROW_START),
                end: Extent::Param(ROW_END),
                width: 1,
                granule: 1,
                body: vec![
                    self.heads_loop(["q_heads", "q_pairs"], Q, self.heads, [VarId(1), VarId(2)]),
                    self.heads_loop(
                        ["k_heads", "k_pairs"],
                        K,
                        self.kv_heads,
                        [VarId(3), VarId(4)],
                    ),
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
                notes: "x'[j] = x[j]*C[j] + x[j^1]*S[j], C/S from the RopeTable \
                        (cos, cos | -sin, sin per pair); pairs read before written"
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
        let per_row = ((self.heads + self.kv_heads) * self.rope_dims) as u64;
        let rows = self.rows as u64;
        (
            3 * per_row * rows,
            4 * rows * (2 * per_row + 2 * self.rope_dims as u64),
        )
    }

    fn index_at_geometry(&self, name: &str) -> u64 {
        match name {
            "row_start" | "pos" => 0,
            "heads" => self.heads as u64,
            "kv_heads" => self.kv_heads as u64,
            "head_dim" => self.head_dim as u64,
            "rope_dims" => self.rope_dims as u64,
            _ => self.rows as u64,
        }
    }

    fn twins() -> Vec<Arc<dyn Twin>> {
        super::native::native_twins::<Self>(
            "loopnest.rope.twin.avx512",
            "loopnest.rope.twin.avx2",
            "loopnest.rope.twin.neon",
        )
    }

    fn twin_check() -> Arc<dyn TwinCheck> {
        Arc::new(validation::checker())
    }
}

/// A placed `loopnest.rope` kernel.
pub type RopeKernel = Placed<Rope>;

impl Placed<Rope> {
    /// Rotate every row of `q` and `k` in place, row `r` at position `pos + r`.
    pub fn run(
        &self,
        q: &mut [f32],
        k: &mut [f32],
        table: &RopeTable,
        pos: usize,
    ) -> Result<(), Refusal> {
        let rows = q.len() / (self.op.heads * self.op.head_dim);
        self.run_rows(q, k, table, pos, 0..rows)
    }

    /// Rows `rows` only (a member view), lengths checked.
    pub fn run_rows(
        &self,
        q: &mut [f32],
        k: &mut [f32],
        table: &RopeTable,
        pos: usize,
        rows: Range<usize>,
    ) -> Result<(), Refusal> {
        let args = RopeArgs::new(&self.op, q, k, table, pos, rows)?;
        // SAFETY: `new` checked every extent against the borrowed buffers
        // and the table, which outlive the call.
        unsafe { self.kernel.call(&args) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::{assert_same, hunting_f32s, Rng};

    /// RoPE on Q alone and on K alone (the nest with one of its two head
    /// loops), fused by `ir::sequence` into one kernel over `RopeArgs`:
    /// the chain of the two nests as one body, lowered by both lowerings.
    fn q_then_k(op: &Rope) -> Kernel {
        let full = op.nest();
        let part = |keep: usize| {
            let mut k = full.clone();
            if let Some(Stmt::Loop(rows)) = k.body.first_mut() {
                let one = rows.body.swap_remove(keep);
                rows.body = vec![one];
            }
            k
        };
        let (q, k) = (part(0), part(1));
        let binds: Vec<ParamId> = (0..full.params.len() as u16).map(ParamId).collect();
        crate::ir::sequence(
            "rope_q_then_k".to_owned(),
            params(),
            &[
                crate::ir::Part {
                    nest: &q,
                    binds: &binds,
                },
                crate::ir::Part {
                    nest: &k,
                    binds: &binds,
                },
            ],
        )
        .expect("a well-formed sequence")
    }

    #[test]
    fn rope_on_q_then_k_as_a_sequence_gives_the_fused_nest_bits() {
        let op = Rope::new(3, 2, 10, 8, 3).unwrap();
        let seq = q_then_k(&op);
        assert_eq!(seq.body.len(), 2, "two row loops: Q's pass, then K's");
        let table = RopeTable::new(10_000.0, 8, 16).unwrap();
        let mut rng = Rng::new(31);
        let q0 = hunting_f32s(&mut rng, 3 * 3 * 10);
        let k0 = hunting_f32s(&mut rng, 3 * 2 * 10);
        // The reference: the family's nest in the interpreter.
        let (mut qr, mut kr) = (q0.clone(), k0.clone());
        op.reference(&mut qr, &mut kr, &table, 5, 0..3).unwrap();
        // The sequence in the interpreter.
        let ix = |v: usize| Arg::Index(v as u64);
        let mut args = vec![
            Arg::Buffer(Buffer::F32(q0.clone())),
            Arg::Buffer(Buffer::F32(k0.clone())),
            Arg::Buffer(Buffer::F32(table.as_slice().to_vec())),
            ix(3),
            ix(0),
            ix(3),
            ix(5),
            ix(16),
            ix(3),
            ix(2),
            ix(10),
            ix(8),
        ];
        crate::interp::run(&seq, &mut args).unwrap();
        assert_same(args[0].f32s().unwrap(), &qr, "sequence q (interp)");
        assert_same(args[1].f32s().unwrap(), &kr, "sequence k (interp)");
        // The sequence through the CLIF lowering (an arm).
        let code = super::super::build_nest(&seq, weft_managed::arm_build::host_isa()).unwrap();
        // SAFETY: the sequence reads and writes exactly what the family's
        // nest does (its statements, renamed), inside RopeArgs' buffers.
        let kernel = unsafe { weft_kernel::Kernel::<RopeArgs>::from_native(&code) }.unwrap();
        let (mut qa, mut ka) = (q0.clone(), k0.clone());
        let a = RopeArgs::new(&op, &mut qa, &mut ka, &table, 5, 0..3).unwrap();
        // SAFETY: `new` checked the extents against live buffers.
        unsafe { kernel.call(&a) };
        assert_same(&qa, &qr, "sequence q (arm)");
        assert_same(&ka, &kr, "sequence k (arm)");
        // And through the native lowering, where the host runs it.
        #[cfg(target_arch = "x86_64")]
        for tier in [
            crate::native_x64::Tier::Avx512,
            crate::native_x64::Tier::Avx2,
        ] {
            let host = weft_kernel::Host::detect();
            if weft_kernel::require_features(&host, tier.requires()).is_err() {
                continue;
            }
            let code = crate::native_x64::emit(&seq, tier, weft_x64::Abi::host()).unwrap();
            // SAFETY: as for the arm: the same nest, lowered natively.
            let kernel = unsafe { weft_kernel::Kernel::<RopeArgs>::from_native(&code) }.unwrap();
            let (mut qt, mut kt) = (q0.clone(), k0.clone());
            let a = RopeArgs::new(&op, &mut qt, &mut kt, &table, 5, 0..3).unwrap();
            // SAFETY: `new` checked the extents against live buffers.
            unsafe { kernel.call(&a) };
            assert_same(&qt, &qr, &format!("sequence q ({tier:?})"));
            assert_same(&kt, &kr, &format!("sequence k ({tier:?})"));
        }
    }

    fn case(op: Rope, rows: usize, pos: usize, table: &RopeTable, seed: u64) {
        let k = RopeKernel::of_arm(op).expect("arm");
        let mut rng = Rng::new(seed);
        let q0 = hunting_f32s(&mut rng, rows * op.heads * op.head_dim);
        let k0 = hunting_f32s(&mut rng, rows * op.kv_heads * op.head_dim);
        let (mut q1, mut k1) = (q0.clone(), k0.clone());
        let (mut q2, mut k2) = (q0.clone(), k0.clone());
        k.run(&mut q1, &mut k1, table, pos).expect("run");
        op.reference(&mut q2, &mut k2, table, pos, 0..rows)
            .expect("reference");
        let what = format!("{op:?} rows {rows} pos {pos}");
        assert_same(&q1, &q2, &what);
        assert_same(&k1, &k2, &what);
    }

    #[test]
    fn arm_equals_interpreter_on_every_pair_tail() {
        // rope_dims 2..=18 covers every tail of 0..=3 pairs after whole
        // vectors; head_dim above rope_dims leaves a pass-through part.
        for rope_dims in (2..=18).step_by(2) {
            let table = RopeTable::new(10000.0, rope_dims, 40).unwrap();
            for head_dim in [rope_dims, rope_dims + 2, rope_dims + 6] {
                let op = Rope::new(3, 1, head_dim, rope_dims, 2).unwrap();
                case(op, 2, 5, &table, (rope_dims * 100 + head_dim) as u64);
            }
        }
    }

    #[test]
    fn arm_equals_interpreter_at_smollm2_shape() {
        let table = RopeTable::new(100000.0, 64, 300).unwrap();
        let op = Rope::new(9, 3, 64, 64, 3).unwrap();
        case(op, 3, 0, &table, 1);
        case(op, 3, 297, &table, 2);
    }

    #[test]
    fn rotation_is_llama_normal_mode() {
        // Plain formulas on the table's own cos/sin: x0 c - x1 s, x0 s + x1 c.
        let table = RopeTable::new(10000.0, 8, 16).unwrap();
        let op = Rope::new(1, 1, 10, 8, 1).unwrap();
        let mut rng = Rng::new(3);
        let q0: Vec<f32> = (0..10).map(|_| rng.normal()).collect();
        let (mut q, mut k) = (q0.clone(), q0.clone());
        op.reference(&mut q, &mut k, &table, 7, 0..1).unwrap();
        let mut want = q0.clone();
        for i in 0..4 {
            let (c, s) = table.cos_sin(7, i).unwrap();
            let (x0, x1) = (q0[2 * i], q0[2 * i + 1]);
            want[2 * i] = x0 * c - x1 * s;
            want[2 * i + 1] = x0 * s + x1 * c;
        }
        assert_same(&q, &want, "normal-mode rope");
        // θ for pair i at p: p · base^(-2i/8).
        let (c, s) = table.cos_sin(7, 1).unwrap();
        let theta = 7.0 * 10000f64.powf(-2.0 / 8.0);
        assert!((f64::from(c) - theta.cos()).abs() < 1e-7);
        assert!((f64::from(s) - theta.sin()).abs() < 1e-7);
    }

    #[test]
    fn row_splits_are_bit_identical() {
        let table = RopeTable::new(10000.0, 6, 20).unwrap();
        let op = Rope::new(2, 1, 8, 6, 5).unwrap();
        let k = RopeKernel::of_arm(op).unwrap();
        let mut rng = Rng::new(9);
        let q0 = hunting_f32s(&mut rng, 5 * 16);
        let k0 = hunting_f32s(&mut rng, 5 * 8);
        let (mut qa, mut ka) = (q0.clone(), k0.clone());
        k.run(&mut qa, &mut ka, &table, 3).unwrap();
        let (mut qb, mut kb) = (q0, k0);
        for r in op.views().unwrap().split(3) {
            k.run_rows(
                &mut qb,
                &mut kb,
                &table,
                3,
                r.start as usize..r.end as usize,
            )
            .unwrap();
        }
        assert_same(&qa, &qb, "q split");
        assert_same(&ka, &kb, "k split");
    }

    #[test]
    fn bad_inputs_are_refused_by_name() {
        let table = RopeTable::new(10000.0, 8, 4).unwrap();
        let op = Rope::new(2, 1, 8, 8, 1).unwrap();
        let k = RopeKernel::of_arm(op).unwrap();
        let (mut q, mut kk) = (vec![0f32; 16], vec![0f32; 8]);
        assert_eq!(
            k.run(&mut q, &mut kk, &table, 4).unwrap_err().name(),
            "bad-operand"
        );
        assert_eq!(
            k.run(&mut q, &mut kk[..7], &table, 0).unwrap_err().name(),
            "bad-operand"
        );
        let other = RopeTable::new(10000.0, 6, 4).unwrap();
        assert_eq!(
            k.run(&mut q, &mut kk, &other, 0).unwrap_err().name(),
            "bad-operand"
        );
        assert_eq!(
            k.run(&mut q, &mut kk, &table, usize::MAX)
                .unwrap_err()
                .name(),
            "bad-operand"
        );
        assert_eq!(
            Rope::new(2, 1, 7, 6, 1).unwrap_err().name(),
            "unsupported-geometry"
        );
        assert_eq!(
            Rope::new(2, 1, 8, 10, 1).unwrap_err().name(),
            "unsupported-geometry"
        );
        assert_eq!(RopeTable::new(1.0, 8, 4).unwrap_err().name(), "bad-operand");
        assert_eq!(RopeTable::new(1e4, 7, 4).unwrap_err().name(), "bad-operand");
    }
}
