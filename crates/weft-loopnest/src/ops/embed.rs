//! `loopnest.embed_q8_0` and `loopnest.embed_f32`: token ids to rows of
//! an embedding table.
//!
//! # Contract
//!
//! Geometry: `vocab` (`1..=2^30`), `dim` (a multiple of 32 for Q8_0, any
//! `≥ 1` for F32), `rows` (tokens, default 1; pricing and views only).
//! For each row `t` in `row_start..row_end`, with `id = ids[t]`:
//!
//! - **Q8_0 table** (GGUF `Q8_0` tensor bytes, `vocab` rows of `dim/32`
//!   blocks of 34 bytes: binary16 scale `d`, 32 `i8` quants): element
//!   `32b + k` of the row is `f32(d_b) ⊗ f32(q_b[k])` — exactly the Q8_0
//!   dequantisation (binary16 widening is exact, NaN payloads kept and not
//!   quietened; one IEEE multiply).
//! - **F32 table** (`vocab · dim` f32s): the row, copied bit for bit.
//!
//! The constructors refuse an id `≥ vocab` by name; a body handed one
//! anyway (through raw arguments) leaves that output row untouched and
//! reads nothing for it. NaNs compare by class for Q8_0 (a NaN scale),
//! by bits for F32. Splits are along `rows`, granule 1.

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
    Unary, ValId, VarId,
};

/// The Q8_0 family's name.
pub const FAMILY_Q8_0: &str = "loopnest.embed_q8_0";
/// The F32 family's name.
pub const FAMILY_F32: &str = "loopnest.embed_f32";
/// The argument struct's name in contracts (both families).
pub const ARGS_NAME: &str = "EmbedArgs";
/// Values per Q8_0 block.
pub const Q8_0_BLOCK: usize = 32;
/// Bytes per Q8_0 block.
pub const Q8_0_BLOCK_BYTES: usize = 34;

/// The table's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableFormat {
    /// GGUF Q8_0 blocks.
    Q8_0,
    /// f32 values.
    F32,
}

/// The arguments of every embedding body (`table` points at bytes for
/// Q8_0, at f32s for F32).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EmbedArgs {
    /// The table: `vocab` rows.
    pub table: *const u8,
    /// `rows` token ids.
    pub ids: *const u32,
    /// `rows · dim` f32 outputs.
    pub out: *mut f32,
    /// Rows of the table (must equal the compiled shape's).
    pub vocab: usize,
    /// Row length (must equal the compiled shape's).
    pub dim: usize,
    /// Tokens in `ids` (rows of `out`).
    pub rows: usize,
    /// First token embedded.
    pub row_start: usize,
    /// One past the last token embedded.
    pub row_end: usize,
}

// SAFETY: the `#[repr(C)]` struct of every contract naming ARGS_NAME. A
// body reads the table and `ids` and writes `out[t·dim..(t+1)·dim]` only
// for `t` in `row_start..row_end`, so copies restricted to disjoint row
// ranges write disjoint memory.
unsafe impl KernelArgs for EmbedArgs {
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
unsafe impl Send for EmbedArgs {}
// SAFETY: as for `Send`: a shared reference only lets threads copy it.
unsafe impl Sync for EmbedArgs {}

/// The shape of an embedding site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Embed<const Q8: bool> {
    /// Rows of the table.
    pub vocab: usize,
    /// Row length.
    pub dim: usize,
    /// Tokens at the site (pricing and views).
    pub rows: usize,
}

/// Embedding from a Q8_0 table.
pub type EmbedQ8_0 = Embed<true>;
/// Embedding from an F32 table.
pub type EmbedF32 = Embed<false>;

/// A table of either format, borrowed: what the safe API takes.
#[derive(Clone, Copy, Debug)]
pub enum Table<'a> {
    /// GGUF Q8_0 tensor bytes.
    Q8_0(&'a [u8]),
    /// f32 values.
    F32(&'a [f32]),
}

impl<const Q8: bool> Embed<Q8> {
    /// The shape, checked as a site's geometry would be.
    pub fn new(vocab: usize, dim: usize, rows: usize) -> Result<Self, Refusal> {
        Self::from_geometry(
            &Geometry::new()
                .with("vocab", vocab as u64)
                .with("dim", dim as u64)
                .with("rows", rows as u64),
        )
    }

    /// The table format.
    pub fn format(&self) -> TableFormat {
        if Q8 {
            TableFormat::Q8_0
        } else {
            TableFormat::F32
        }
    }

    /// Bytes of one table row.
    pub fn row_bytes(&self) -> usize {
        if Q8 {
            self.dim / Q8_0_BLOCK * Q8_0_BLOCK_BYTES
        } else {
            self.dim * 4
        }
    }

    fn check(
        &self,
        table: Table<'_>,
        ids: &[u32],
        out: usize,
        range: &Range<usize>,
    ) -> Result<*const u8, Refusal> {
        let (ptr, bytes) = match (table, Q8) {
            (Table::Q8_0(t), true) => (t.as_ptr(), t.len()),
            (Table::F32(t), false) => (t.as_ptr().cast::<u8>(), t.len() * 4),
            _ => {
                return Err(bad("table", format!("not a {:?} table", self.format())));
            }
        };
        let want = self.vocab * self.row_bytes();
        if bytes != want {
            return Err(bad(
                "table",
                format!("{bytes} bytes, {} rows need {want}", self.vocab),
            ));
        }
        if out != ids.len() * self.dim {
            return Err(bad(
                "out",
                format!("{out} f32s, {} ids of {} need more", ids.len(), self.dim),
            ));
        }
        check_range("rows", range, ids.len())?;
        if let Some((t, id)) = ids
            .iter()
            .enumerate()
            .find(|(_, id)| **id as usize >= self.vocab)
        {
            return Err(bad(
                "ids",
                format!("id {id} at {t} is not below vocab {}", self.vocab),
            ));
        }
        Ok(ptr)
    }

    /// The reference: the nest run by the interpreter.
    pub fn reference(
        &self,
        table: Table<'_>,
        ids: &[u32],
        out: &mut [f32],
        range: Range<usize>,
    ) -> Result<(), Refusal> {
        self.check(table, ids, out.len(), &range)?;
        let t = match table {
            Table::Q8_0(b) => Buffer::Bytes(b.to_vec()),
            Table::F32(v) => Buffer::F32(v.to_vec()),
        };
        let ix = |v: usize| Arg::Index(v as u64);
        let mut args = vec![
            Arg::Buffer(t),
            Arg::Buffer(Buffer::U32(ids.to_vec())),
            Arg::Buffer(Buffer::F32(out.to_vec())),
            ix(self.vocab),
            ix(self.dim),
            ix(ids.len()),
            ix(range.start),
            ix(range.end),
        ];
        interpret(self, &mut args)?;
        if let Some(o) = args[2].f32s() {
            out.copy_from_slice(o);
        }
        Ok(())
    }
}

impl EmbedArgs {
    /// Arguments embedding tokens `range` of `ids` into `out`, every
    /// length and every id checked.
    pub fn new<const Q8: bool>(
        op: &Embed<Q8>,
        table: Table<'_>,
        ids: &[u32],
        out: &mut [f32],
        range: Range<usize>,
    ) -> Result<Self, Refusal> {
        let table = op.check(table, ids, out.len(), &range)?;
        Ok(Self {
            table,
            ids: ids.as_ptr(),
            out: out.as_mut_ptr(),
            vocab: op.vocab,
            dim: op.dim,
            rows: ids.len(),
            row_start: range.start,
            row_end: range.end,
        })
    }
}

const TABLE: ParamId = ParamId(0);
const IDS: ParamId = ParamId(1);
const OUT: ParamId = ParamId(2);
const VOCAB: ParamId = ParamId(3);
const DIM: ParamId = ParamId(4);
const ROWS: ParamId = ParamId(5);
const ROW_START: ParamId = ParamId(6);
const ROW_END: ParamId = ParamId(7);

fn params(q8: bool) -> Vec<Param> {
    let p = |name, off: usize, kind| Param {
        name,
        offset: off as u32,
        kind,
    };
    let table = ParamKind::Buffer {
        storage: if q8 { Storage::Bytes } else { Storage::F32 },
        written: false,
    };
    let ix = ParamKind::Index;
    vec![
        p("table", offset_of!(EmbedArgs, table), table),
        p(
            "ids",
            offset_of!(EmbedArgs, ids),
            ParamKind::Buffer {
                storage: Storage::U32,
                written: false,
            },
        ),
        p(
            "out",
            offset_of!(EmbedArgs, out),
            ParamKind::Buffer {
                storage: Storage::F32,
                written: true,
            },
        ),
        p("vocab", offset_of!(EmbedArgs, vocab), ix),
        p("dim", offset_of!(EmbedArgs, dim), ix),
        p("rows", offset_of!(EmbedArgs, rows), ix),
        p("row_start", offset_of!(EmbedArgs, row_start), ix),
        p("row_end", offset_of!(EmbedArgs, row_end), ix),
    ]
}

// SAFETY: the guards fix vocab and dim to the compiled ones and keep
// `row_start <= row_end <= rows`; the gather skips a row whose id is not
// below vocab, so table reads stay inside row `id < vocab` of the
// `vocab · row_bytes` bytes `EmbedArgs::new` checked (Q8_0: scale at
// `34(id·blocks + b)`, quants at `+ 2 + k`, `k < 32`; F32: `id·dim + j`),
// `ids[t]` and `out[t·dim + j]` stay inside `rows` and `rows · dim`.
unsafe impl<const Q8: bool> NestOp for Embed<Q8> {
    const FAMILY: &'static str = if Q8 { FAMILY_Q8_0 } else { FAMILY_F32 };
    const ARM: &'static str = if Q8 {
        "embed_q8_0.arm.nest"
    } else {
        "embed_f32.arm.nest"
    };
    type Args = EmbedArgs;

    fn from_geometry(g: &Geometry) -> Result<Self, Refusal> {
        let vocab = dim(g, "vocab", 1, MAX_EXTENT)?;
        let d = dim(g, "dim", 1, 1 << 24)?;
        let rows = dim_or(g, "rows", 1, 1, MAX_EXTENT)?;
        if Q8 && d % Q8_0_BLOCK != 0 {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!("dim {d} is not a multiple of {Q8_0_BLOCK} (Q8_0 blocks)"),
            });
        }
        if (vocab as u64) * (d as u64) > MAX_EXTENT * 64 {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!("a {vocab} × {d} table is too large"),
            });
        }
        Ok(Self {
            vocab,
            dim: d,
            rows,
        })
    }

    fn geometry(&self) -> Geometry {
        Geometry::new()
            .with("vocab", self.vocab as u64)
            .with("dim", self.dim as u64)
            .with("rows", self.rows as u64)
    }

    fn nest(&self) -> Kernel {
        let (t, id, b, k, j) = (VarId(0), VarId(1), VarId(2), VarId(3), VarId(4));
        let d = self.dim as i64;
        let out_at = |inner: Affine| inner.plus_var(d, t);
        let gather = Stmt::Gather {
            var: id,
            buf: IDS,
            at: Affine::var(t),
            below: Extent::Const(self.vocab as u64),
        };
        let copy = if Q8 {
            let blocks = (self.dim / Q8_0_BLOCK) as i64;
            let half_block = (Q8_0_BLOCK_BYTES / 2) as i64;
            let scale = ValId(0);
            // Block b of row id starts at byte 34·(id·blocks + b): in u16
            // units 17·(id·blocks + b), in bytes that plus 2 for the quants.
            Stmt::Loop(Loop {
                name: "blocks",
                var: b,
                start: Extent::Const(0),
                end: Extent::Const(blocks as u64),
                width: 1,
                granule: 1,
                body: vec![
                    Stmt::Let {
                        val: scale,
                        value: Expr::load(
                            TABLE,
                            Elem::U16,
                            Affine::default()
                                .plus_var(half_block * blocks, id)
                                .plus_var(half_block, b),
                        )
                        .unary(Unary::F16ToF32),
                    },
                    Stmt::Loop(Loop {
                        name: "quants",
                        var: k,
                        start: Extent::Const(0),
                        end: Extent::Const(Q8_0_BLOCK as u64),
                        width: 4,
                        granule: 1,
                        body: vec![Stmt::Store {
                            buf: OUT,
                            at: out_at(Affine::var(k).plus_var(Q8_0_BLOCK as i64, b)),
                            value: Expr::Val(scale).times(
                                Expr::load(
                                    TABLE,
                                    Elem::I8,
                                    Affine::var(k)
                                        .plus_var(2 * half_block * blocks, id)
                                        .plus_var(2 * half_block, b)
                                        .plus(2),
                                )
                                .unary(Unary::IntToF32),
                            ),
                        }],
                    }),
                ],
            })
        } else {
            Stmt::Loop(Loop {
                name: "elements",
                var: j,
                start: Extent::Const(0),
                end: Extent::Const(self.dim as u64),
                width: 4,
                granule: 1,
                body: vec![Stmt::Store {
                    buf: OUT,
                    at: out_at(Affine::var(j)),
                    value: Expr::load_f32(TABLE, Affine::var(j).plus_var(d, id)),
                }],
            })
        };
        let eq = |p, v: usize| Guard::Eq(Extent::Param(p), Extent::Const(v as u64));
        Kernel {
            name: format!(
                "loopnest_embed_{}_{}x{}",
                if Q8 { "q8_0" } else { "f32" },
                self.vocab,
                self.dim
            ),
            params: params(Q8),
            guards: vec![
                eq(VOCAB, self.vocab),
                eq(DIM, self.dim),
                Guard::SumLe(vec![Extent::Param(ROW_START)], Extent::Param(ROW_END)),
                Guard::SumLe(vec![Extent::Param(ROW_END)], Extent::Param(ROWS)),
            ],
            body: vec![Stmt::Loop(Loop {
                name: "rows",
                var: t,
                start: Extent::Param(ROW_START),
                end: Extent::Param(ROW_END),
                width: 1,
                granule: 1,
                body: vec![gather, copy],
            })],
        }
    }

    fn contract(&self) -> Contract {
        Contract {
            family: Self::FAMILY.to_owned(),
            geometry: self.geometry(),
            args: ARGS_NAME.to_owned(),
            arithmetic: ArithmeticContract {
                accumulator_lanes: 1,
                reduction: ReductionOrder::None,
                fma: FmaUse::Never,
                nan: if Q8 {
                    NanRule::ByClass
                } else {
                    NanRule::ByBits
                },
                notes: if Q8 {
                    "out = f32(d) * f32(q) per element (exact binary16 widening); \
                     ids >= vocab leave their row untouched"
                } else {
                    "out = table row, copied; ids >= vocab leave their row untouched"
                }
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
        let (r, d) = (self.rows as u64, self.dim as u64);
        let flops = if Q8 { r * d } else { 0 };
        (flops, r * (self.row_bytes() as u64 + 4 * d + 4))
    }

    fn index_at_geometry(&self, name: &str) -> u64 {
        match name {
            "vocab" => self.vocab as u64,
            "dim" => self.dim as u64,
            "row_start" => 0,
            _ => self.rows as u64,
        }
    }

    fn twins() -> Vec<Arc<dyn Twin>> {
        if Q8 {
            super::native::native_twins::<Self>(
                "loopnest.embed_q8_0.twin.avx512",
                "loopnest.embed_q8_0.twin.avx2",
                "loopnest.embed_q8_0.twin.neon",
            )
        } else {
            super::native::native_twins::<Self>(
                "loopnest.embed_f32.twin.avx512",
                "loopnest.embed_f32.twin.avx2",
                "loopnest.embed_f32.twin.neon",
            )
        }
    }

    fn twin_check() -> Arc<dyn TwinCheck> {
        if Q8 {
            Arc::new(validation::checker_q8_0())
        } else {
            Arc::new(validation::checker_f32())
        }
    }
}

/// A placed embedding kernel.
pub type EmbedKernel<const Q8: bool> = Placed<Embed<Q8>>;

impl<const Q8: bool> Placed<Embed<Q8>> {
    /// Embed every token of `ids` into `out` (`ids.len() · dim` f32s).
    pub fn run(&self, table: Table<'_>, ids: &[u32], out: &mut [f32]) -> Result<(), Refusal> {
        self.run_rows(table, ids, out, 0..ids.len())
    }

    /// Tokens `rows` only (a member view), lengths and ids checked.
    pub fn run_rows(
        &self,
        table: Table<'_>,
        ids: &[u32],
        out: &mut [f32],
        rows: Range<usize>,
    ) -> Result<(), Refusal> {
        let args = EmbedArgs::new(&self.op, table, ids, out, rows)?;
        // SAFETY: `new` checked the table, ids and out against the shape
        // and every id against vocab; the buffers outlive the call.
        unsafe { self.kernel.call(&args) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::{assert_same, hunting_f32s, Rng};

    /// A Q8_0 table of random bytes with special scales mixed in.
    fn q8_table(vocab: usize, dim: usize, rng: &mut Rng) -> Vec<u8> {
        let blocks = vocab * dim / 32;
        let mut t = Vec::with_capacity(blocks * 34);
        for n in 0..blocks {
            let d: u16 = match n % 11 {
                0 => 0x0001 + (rng.next_u64() % 0x3ff) as u16, // subnormal
                1 => 0x8000,                                   // -0
                2 => 0x7c00,                                   // inf
                3 => 0x7d01,                                   // signalling NaN
                4 => 0xfe00,                                   // quiet NaN
                _ => rng.next_u64() as u16 & 0x7bff | 0x0400,
            };
            t.extend_from_slice(&d.to_le_bytes());
            t.extend((0..32).map(|_| rng.next_u64() as u8));
        }
        t
    }

    #[test]
    fn q8_0_arm_equals_interpreter_and_dequantisation() {
        let mut rng = Rng::new(4);
        for (vocab, dim) in [(5, 32), (7, 64), (3, 576)] {
            let table = q8_table(vocab, dim, &mut rng);
            let ids: Vec<u32> = vec![0, (vocab - 1) as u32, 2, 2, 1];
            let op = EmbedQ8_0::new(vocab, dim, ids.len()).unwrap();
            let k = EmbedKernel::of_arm(op).unwrap();
            let mut got = vec![0f32; ids.len() * dim];
            let mut want = got.clone();
            k.run(Table::Q8_0(&table), &ids, &mut got).unwrap();
            op.reference(Table::Q8_0(&table), &ids, &mut want, 0..ids.len())
                .unwrap();
            assert_same(&got, &want, &format!("embed q8_0 {vocab}x{dim}"));
            // The dequantisation, written out: f32(d) * q per element.
            for (t, id) in ids.iter().enumerate() {
                let row = &table[*id as usize * op.row_bytes()..][..op.row_bytes()];
                for (b, block) in row.chunks_exact(34).enumerate() {
                    let d = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
                    for (q, o) in block[2..].iter().zip(&want[t * dim + 32 * b..]) {
                        let v = d * f32::from(*q as i8);
                        assert!(
                            v.to_bits() == o.to_bits() || (v.is_nan() && o.is_nan()),
                            "dequantisation"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn f32_arm_copies_rows_bit_for_bit() {
        let mut rng = Rng::new(8);
        for dim in (1..=9).chain([576]) {
            let vocab = 6;
            let table = hunting_f32s(&mut rng, vocab * dim);
            let ids = [5u32, 0, 3];
            let op = EmbedF32::new(vocab, dim, 3).unwrap();
            let k = EmbedKernel::of_arm(op).unwrap();
            let mut got = vec![0f32; 3 * dim];
            let mut want = got.clone();
            k.run(Table::F32(&table), &ids, &mut got).unwrap();
            op.reference(Table::F32(&table), &ids, &mut want, 0..3)
                .unwrap();
            for (t, id) in ids.iter().enumerate() {
                let row = &table[*id as usize * dim..][..dim];
                assert!(row
                    .iter()
                    .zip(&got[t * dim..])
                    .all(|(a, b)| a.to_bits() == b.to_bits()));
                assert!(row
                    .iter()
                    .zip(&want[t * dim..])
                    .all(|(a, b)| a.to_bits() == b.to_bits()));
            }
        }
    }

    #[test]
    fn out_of_range_ids_are_refused_and_a_raw_call_skips_their_row() {
        let (vocab, dim) = (4, 32);
        let mut rng = Rng::new(1);
        let table = q8_table(vocab, dim, &mut rng);
        let op = EmbedQ8_0::new(vocab, dim, 3).unwrap();
        let k = EmbedKernel::of_arm(op).unwrap();
        let ids = [1u32, 4, 2];
        let mut out = vec![-1f32; 3 * dim];
        let e = k.run(Table::Q8_0(&table), &ids, &mut out).unwrap_err();
        assert_eq!(e.name(), "bad-operand");
        let args = EmbedArgs {
            table: table.as_ptr(),
            ids: ids.as_ptr(),
            out: out.as_mut_ptr(),
            vocab,
            dim,
            rows: 3,
            row_start: 0,
            row_end: 3,
        };
        // SAFETY: every pointer is live for the extents named; the one bad
        // id is what this test hands the body on purpose.
        unsafe { k.kernel().call(&args) };
        let mut want = vec![-1f32; 3 * dim];
        op.reference(Table::Q8_0(&table), &[1], &mut want[..dim], 0..1)
            .unwrap();
        op.reference(Table::Q8_0(&table), &[2], &mut want[2 * dim..], 0..1)
            .unwrap();
        assert_same(&out, &want, "row 1 untouched");
    }

    #[test]
    fn row_splits_are_bit_identical() {
        let mut rng = Rng::new(3);
        let table = q8_table(9, 64, &mut rng);
        let ids = [8u32, 1, 1, 0, 7, 3, 2];
        let op = EmbedQ8_0::new(9, 64, ids.len()).unwrap();
        let k = EmbedKernel::of_arm(op).unwrap();
        let mut whole = vec![0f32; ids.len() * 64];
        k.run(Table::Q8_0(&table), &ids, &mut whole).unwrap();
        let mut parts = vec![0f32; ids.len() * 64];
        for r in op.views().unwrap().split(3) {
            k.run_rows(
                Table::Q8_0(&table),
                &ids,
                &mut parts,
                r.start as usize..r.end as usize,
            )
            .unwrap();
        }
        assert_same(&parts, &whole, "split");
    }

    #[test]
    fn bad_tables_and_geometries_are_refused_by_name() {
        let op = EmbedQ8_0::new(2, 32, 1).unwrap();
        let k = EmbedKernel::of_arm(op).unwrap();
        let mut out = [0f32; 32];
        let short = vec![0u8; 67];
        assert_eq!(
            k.run(Table::Q8_0(&short), &[0], &mut out)
                .unwrap_err()
                .name(),
            "bad-operand"
        );
        let f = vec![0f32; 64];
        assert_eq!(
            k.run(Table::F32(&f), &[0], &mut out).unwrap_err().name(),
            "bad-operand"
        );
        assert_eq!(
            EmbedQ8_0::new(2, 33, 1).unwrap_err().name(),
            "unsupported-geometry"
        );
        assert_eq!(
            EmbedF32::new(0, 3, 1).unwrap_err().name(),
            "unsupported-geometry"
        );
    }
}
