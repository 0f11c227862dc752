//! arm64 (A64, NEON) twins of the three `f32.gemm` arms: one emitter,
//! parameterised by how B is addressed (rows or panels) and by the
//! register tile, written with weft-a64.
//!
//! # The tiles
//!
//! | twin | arm | tile (rows × columns) |
//! |---|---|---|
//! | `f32.gemm.twin.a64.direct.6x16` | direct | 6 × 16 |
//! | `f32.gemm.twin.a64.direct.4x16` | direct | 4 × 16 |
//! | `f32.gemm.twin.a64.direct.8x8` | direct | 8 × 8 |
//! | `f32.gemm.twin.a64.panels.6x16` | panels | 6 × 16 |
//! | `f32.gemm.twin.a64.panels.4x16` | panels | 4 × 16 |
//! | `f32.gemm.twin.a64.panels.8x8` | panels | 8 × 8 |
//! | `f32.gemm.twin.a64.small_m.w16` | small_m | min(m, 6) × 16 |
//! | `f32.gemm.twin.a64.small_m.w8` | small_m | min(m, 8) × 8 |
//!
//! A tile of `mr` rows × `4·nv` columns holds `mr·nv` `.4s` accumulators
//! (6 × 16: 24 of the 32 q registers). Its `k` loop runs four steps at a
//! time: one `ldr q` per row brings `A[i+r, kk..kk+4]`, one `fmul` by
//! element scales it by α (`α ⊗ A`, as the contract says; α = 1 is
//! multiplied too, which only quietens a signalling NaN: NaNs compare by
//! class), then for each step `l` and each column vector one `ldr q` of
//! B and one `fmla acc.4s, b.4s, a.s[l]` per row — `b·a + acc` fused,
//! which is `fma(α⊗A, B, acc)` bit for bit (the product commutes
//! exactly). The `k % 4` steps after it load A by `ldr s` and use lane 0.
//! Columns left over after the wide tiles go four at a time (a one-vector
//! tile), then one at a time with scalar `fmadd`; rows left over after
//! the tall tiles go one at a time. With B in panels a vector tile never
//! straddles two panels: a rectangle whose first column is not a multiple
//! of the tile width starts with single columns (as the arm does), and
//! 16, 8 and 4 divide the panel width.
//!
//! `k` is blocked by [`KC`] exactly as in the arms: the first
//! block starts each output from `β ⊗ C` (β ≠ 0, skipped multiply when
//! β = 1) or `+0` (C unread), later blocks from the C the previous block
//! stored, which is exact (crate docs). So every twin performs, per
//! output, the contract's operations in the contract's order; validation
//! checks the lowering.
//!
//! # ABI
//!
//! AAPCS64 leaf: the argument pointer ([`GemmArgs`](crate::GemmArgs))
//! arrives in `x0` and stays there (fields are re-read from it: extents at
//! loop heads, α and β at tile starts); only `x0`–`x17` (never `x18`) and
//! `v0`–`v31` are written. A body whose tiles use `v8`–`v15` (6 × 16,
//! 8 × 8 and the tall small_m tiles) saves `d8`–`d15` on the stack first
//! and restores them before `ret`. It reads A's rows `m_start..m_end`,
//! B's `k` rows (or panels), C only inside the rectangle (when β ≠ 0 or
//! after the first `k` block), writes C only inside it, and touches
//! nothing for an empty rectangle.
//!
//! # Why
//!
//! The arms' 4 × 8 tiles (8 accumulators) leave most of NEON's 32
//! registers idle and load one A element per row per step; the twins keep
//! three times the accumulators live, load A four steps at a time, and
//! read each B vector once per tile row group, so the `fmla` pipes, not
//! the loads, bound the inner loop.

use std::sync::Arc;

use weft_a64::{d, mem, q, s, v, w, x, Assembler, Cond, EncodeError, Gpr, Inst, Label, SP, XZR};
use weft_kernel::{Feature, Isa, LoopAnnotation, LoopTrip, NativeCode, Offer, Refusal, Twin};

use crate::arm::{ArmKind, SMALL_M_MAX};
use crate::{dims, offsets, ARGS_NAME, FAMILY, KC, PANELS_LAYOUT};

/// What every twin of the family needs: Advanced SIMD.
const NEON: &[Feature] = &[Feature::Neon];

/// How a twin chooses its register tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TileRule {
    /// Always `rows × 4·nv`.
    Fixed {
        /// Rows.
        rows: u8,
        /// `.4s` vectors per row.
        nv: u8,
    },
    /// `min(m, max_rows) × 4·nv` from the offer's `m` (small_m: every
    /// row of A in one tile, so B is read once).
    AllRows {
        /// Most rows in one tile.
        max_rows: u8,
        /// `.4s` vectors per row.
        nv: u8,
    },
}

/// An A64 twin of one `f32.gemm` arm with one tile rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmA64 {
    kind: ArmKind,
    rule: TileRule,
    name: &'static str,
}

/// Every A64 twin, with its arm.
pub const TWINS: [GemmA64; 8] = [
    GemmA64::fixed(ArmKind::Direct, 6, 4, "f32.gemm.twin.a64.direct.6x16"),
    GemmA64::fixed(ArmKind::Direct, 4, 4, "f32.gemm.twin.a64.direct.4x16"),
    GemmA64::fixed(ArmKind::Direct, 8, 2, "f32.gemm.twin.a64.direct.8x8"),
    GemmA64::fixed(ArmKind::Panels, 6, 4, "f32.gemm.twin.a64.panels.6x16"),
    GemmA64::fixed(ArmKind::Panels, 4, 4, "f32.gemm.twin.a64.panels.4x16"),
    GemmA64::fixed(ArmKind::Panels, 8, 2, "f32.gemm.twin.a64.panels.8x8"),
    GemmA64::all_rows(6, 4, "f32.gemm.twin.a64.small_m.w16"),
    GemmA64::all_rows(8, 2, "f32.gemm.twin.a64.small_m.w8"),
];

/// The a64 twins of `kind`'s offer.
pub fn twins(kind: ArmKind) -> Vec<Arc<dyn Twin>> {
    TWINS
        .into_iter()
        .filter(|t| t.kind == kind)
        .map(|t| Arc::new(t) as Arc<dyn Twin>)
        .collect()
}

impl GemmA64 {
    /// A twin of `kind` with fixed `rows × 4·nv` tiles.
    pub const fn fixed(kind: ArmKind, rows: u8, nv: u8, name: &'static str) -> Self {
        Self {
            kind,
            rule: TileRule::Fixed { rows, nv },
            name,
        }
    }

    /// A twin of the small_m arm: all rows (up to `max_rows`) in one tile.
    pub const fn all_rows(max_rows: u8, nv: u8, name: &'static str) -> Self {
        Self {
            kind: ArmKind::SmallM,
            rule: TileRule::AllRows { max_rows, nv },
            name,
        }
    }

    /// The arm whose offers it takes.
    pub fn kind(&self) -> ArmKind {
        self.kind
    }

    /// Its tile rule.
    pub fn rule(&self) -> TileRule {
        self.rule
    }

    /// The tile (rows, `.4s` vectors per row) at `m` rows.
    pub fn tile(&self, m: u64) -> (usize, usize) {
        match self.rule {
            TileRule::Fixed { rows, nv } => (rows as usize, nv as usize),
            TileRule::AllRows { max_rows, nv } => {
                (m.clamp(1, u64::from(max_rows)) as usize, nv as usize)
            }
        }
    }

    /// Check that `offer` is one this twin serves; its `m`, `n`, `k`.
    fn check(&self, offer: &Offer) -> Result<(u64, u64, u64), Refusal> {
        if offer.contract.family != FAMILY || offer.contract.args != ARGS_NAME {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!(
                    "{} serves {FAMILY} with {ARGS_NAME}, not {} with {}",
                    self.name, offer.contract.family, offer.contract.args
                ),
            });
        }
        let (m, n, k, _) = dims(&offer.contract.geometry)?;
        match (
            self.kind.packs_b(),
            offer.packed.iter().find(|p| p.name == "b"),
        ) {
            (false, Some(p)) => {
                return Err(Refusal::UnknownLayout {
                    layout: p.layout.to_owned(),
                })
            }
            (false, None) => {}
            (true, None) => {
                return Err(Refusal::BadOperand {
                    operand: "b".to_owned(),
                    reason: format!("{} reads B in panels; the offer packs none", self.name),
                })
            }
            (true, Some(p)) if p.layout != PANELS_LAYOUT => {
                return Err(Refusal::UnknownLayout {
                    layout: p.layout.to_owned(),
                })
            }
            (true, Some(_)) => {}
        }
        if self.kind == ArmKind::SmallM && m > SMALL_M_MAX {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!("m = {m} > {SMALL_M_MAX} rows in one tile"),
            });
        }
        Ok((m, n, k))
    }

    /// The body for a site of `m × n × k` and its loop nest there.
    pub fn body_at(&self, m: u64, n: u64, k: u64) -> Result<(NativeCode, Vec<LoopTrip>), Refusal> {
        let tile = self.tile(m);
        emit(self.kind.packs_b(), tile, (m, n, k)).map_err(|e| Refusal::EmitError {
            message: format!("{}: {e}", self.name),
        })
    }
}

// SAFETY: the body reads A's rows m_start..m_end, B's k × n (rows at
// stride ldb or panels) and C only inside the rectangle, writes C only
// inside it, keeps the AAPCS64 callee-saved registers and returns
// (module docs); validation checks its results against the arm.
unsafe impl Twin for GemmA64 {
    fn name(&self) -> &'static str {
        self.name
    }

    fn isa(&self) -> Isa {
        Isa::Aarch64
    }

    fn requires(&self) -> &'static [Feature] {
        NEON
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        let (m, n, k) = self.check(offer)?;
        Ok(self.body_at(m, n, k)?.0)
    }

    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        match self
            .check(offer)
            .and_then(|(m, n, k)| self.body_at(m, n, k))
        {
            Ok((_, nest)) => nest,
            Err(_) => offer.loops.clone(),
        }
    }
}

// ------------------------------------------------------------ registers ---

/// The argument struct's pointer (kept for the whole call).
const ARGS: Gpr = x(0);
const A_BASE: Gpr = x(1);
const B_BASE: Gpr = x(2);
const C_BASE: Gpr = x(3);
/// A's row stride in bytes.
const LDA4: Gpr = x(4);
/// B's row stride in bytes (rows), or a panel's size `k · 64` (panels).
const BSTRIDE: Gpr = x(5);
/// C's row stride in bytes.
const LDC4: Gpr = x(6);
/// How a tile starts: 0 from +0, 1 from C, 2 from β ⊗ C.
const MODE: Gpr = x(7);
const KB: Gpr = x(8);
const KCUR: Gpr = x(9);
const I: Gpr = x(10);
const J: Gpr = x(11);
const PA: Gpr = x(12);
const PB: Gpr = x(14);
const PC: Gpr = x(15);
const T: Gpr = x(16);
const TMP: Gpr = x(17);
const TMP2: Gpr = x(13);

/// A tile's vector registers.
struct Regs {
    /// Row `r`'s A (four `k` steps, or one in lane 0).
    a: Vec<u8>,
    /// B vectors, used round robin.
    b: Vec<u8>,
    /// α in lane 0, or `None`: reloaded into `b[0]` before each use.
    alpha: Option<u8>,
    /// Accumulator of row `r`, vector `v` at `r · per_row + v`.
    acc: Vec<u8>,
    per_row: usize,
}

impl Regs {
    /// Registers of a `rows × nv` tile (`nv = 0`: one column, scalar):
    /// accumulators from v16 up then v8–v15, the rest from v0 up, as
    /// few callee-saved registers as fit.
    fn of(rows: usize, nv: usize) -> Result<Regs, EncodeError> {
        let per_row = nv.max(1);
        let order_acc = (16..32).chain(8..16).chain(0..8);
        let acc: Vec<u8> = order_acc.take(rows * per_row).collect();
        let free: Vec<u8> = (0..32u8).filter(|r| !acc.contains(r)).collect();
        let low: Vec<u8> = free
            .iter()
            .copied()
            .filter(|r| !(8..16).contains(r))
            .collect();
        // (B registers, α dedicated) in order of preference, first within
        // the caller-saved registers, then anywhere.
        let options = [
            (per_row, true),
            (per_row.min(2), true),
            (per_row.min(2), false),
        ];
        let pick = |pool: &[u8]| {
            options
                .iter()
                .find(|(nb, ded)| rows + nb + usize::from(*ded) <= pool.len())
                .map(|&(nb, ded)| {
                    let a = pool[..rows].to_vec();
                    let b = pool[rows..rows + nb].to_vec();
                    let alpha = ded.then(|| pool[rows + nb]);
                    Regs {
                        a,
                        b,
                        alpha,
                        acc: acc.clone(),
                        per_row,
                    }
                })
        };
        pick(&low)
            .or_else(|| pick(&free))
            .ok_or(EncodeError::NoMatchingForm {
                mnemonic: "a register tile that fits in v0-v31",
            })
    }

    fn callee_saved(&self) -> bool {
        self.a
            .iter()
            .chain(&self.b)
            .chain(&self.acc)
            .chain(self.alpha.as_ref())
            .any(|r| (8..16).contains(r))
    }
}

// ------------------------------------------------------------ emission ---

/// The emitter's state: the assembler, the loops it has written (with
/// their depth) and the geometry the nest's trip counts are stated at.
struct Emitter {
    a: Assembler,
    panels: bool,
    depth: u32,
    loops: Vec<LoopAnnotation>,
    nest: Vec<LoopTrip>,
    geometry: (u64, u64, u64),
    tile: (usize, usize),
}

/// An open loop: its annotation's name and head.
struct Open {
    name: &'static str,
    head: usize,
}

impl Emitter {
    /// Bind `label` as the head of a loop called `name`, one deeper.
    fn open(&mut self, label: Label, name: &'static str, trips: u64) -> Result<Open, EncodeError> {
        self.a.bind(label)?;
        self.nest.push(LoopTrip {
            name: name.to_owned(),
            trips,
            depth: self.depth,
        });
        self.depth += 1;
        Ok(Open {
            name,
            head: 4 * self.a.len(),
        })
    }

    /// The back edge of `open`: `b.<cond> label`, or `b label` (`None`).
    fn close(&mut self, open: Open, cond: Option<Cond>, label: Label) -> Result<(), EncodeError> {
        let back_edge = 4 * self.a.len();
        match cond {
            Some(c) => self.a.b_cond(c, label)?,
            None => self.a.b(label)?,
        }
        self.depth -= 1;
        self.loops.push(LoopAnnotation {
            name: open.name.to_owned(),
            head: open.head,
            back_edge,
        });
        Ok(())
    }

    fn add_lsl(&mut self, dst: Gpr, n: Gpr, m: Gpr, shift: u8) -> Result<(), EncodeError> {
        self.a.emit(Inst::with_mnemonic(
            "add",
            [dst.into(), n.into(), m.into(), weft_a64::lsl(shift)],
        )?)
    }

    /// `TMP ← field` of the arguments.
    fn field(&mut self, reg: Gpr, off: i32) -> Result<(), EncodeError> {
        self.a.ldr(reg, mem(ARGS).off(i64::from(off)))
    }

    /// Trips of the `k` loops in the first block.
    fn kc(&self) -> u64 {
        self.geometry.2.min(KC)
    }

    /// One tile of `rows × nv` vectors (`nv = 0`: one column) at `(I, J)`.
    fn tile(&mut self, rows: usize, nv: usize) -> Result<(), EncodeError> {
        let r = Regs::of(rows, nv)?;
        let vector = nv > 0;
        // C: I · ldc + J; A: I · lda + KB; B at (KB, J).
        self.a.madd(PC, I, LDC4, C_BASE)?;
        self.add_lsl(PC, PC, J, 2)?;
        self.a.madd(PA, I, LDA4, A_BASE)?;
        self.add_lsl(PA, PA, KB, 2)?;
        if self.panels {
            // B + (J / 16) · k · 64 + KB · 64 + (J % 16) · 4.
            self.a.lsr(TMP, J, 4)?;
            self.a.madd(PB, TMP, BSTRIDE, B_BASE)?;
            self.add_lsl(PB, PB, KB, 6)?;
            self.a.and(TMP, J, 15)?;
            self.add_lsl(PB, PB, TMP, 2)?;
        } else {
            // B + KB · ldb + J.
            self.a.madd(PB, KB, BSTRIDE, B_BASE)?;
            self.add_lsl(PB, PB, J, 2)?;
        }
        if let Some(al) = r.alpha {
            self.a
                .ldr(s(al), mem(ARGS).off(i64::from(offsets::ALPHA)))?;
        }

        // Start: +0, C, or β ⊗ C.
        let (zero, started) = (self.a.new_label(), self.a.new_label());
        self.a.cbz(MODE, zero)?;
        self.a.mov(TMP, PC)?;
        for row in 0..rows {
            for vi in 0..r.per_row {
                let acc = r.acc[row * r.per_row + vi];
                if vector {
                    self.a.ldr(q(acc), mem(TMP).off(16 * vi as i64))?;
                } else {
                    self.a.ldr(s(acc), mem(TMP).off(0))?;
                }
            }
            if row + 1 < rows {
                self.a.add(TMP, TMP, LDC4)?;
            }
        }
        self.a.tbz(w(7), 1, started)?; // MODE bit 1: scale by β
        let beta = r.b[0];
        self.a
            .ldr(s(beta), mem(ARGS).off(i64::from(offsets::BETA)))?;
        for &acc in &r.acc {
            if vector {
                self.a.fmul(v(acc).s4(), v(acc).s4(), v(beta).s(0))?;
            } else {
                self.a.fmul(s(acc), s(acc), s(beta))?;
            }
        }
        self.a.b(started)?;
        self.a.bind(zero)?;
        for &acc in &r.acc {
            self.a.movi(v(acc).d2(), 0)?;
        }
        self.a.bind(started)?;

        let step_b = |e: &mut Emitter| -> Result<(), EncodeError> {
            if e.panels {
                e.a.add(PB, PB, 64)
            } else {
                e.a.add(PB, PB, BSTRIDE)
            }
        };
        // A of every row (q: four steps; s: one), times α.
        let load_a = |e: &mut Emitter, quad: bool| -> Result<(), EncodeError> {
            for (row, &ar) in r.a.iter().enumerate() {
                let dst = if quad { q(ar) } else { s(ar) };
                match row {
                    0 => e.a.ldr(dst, mem(PA).off(0))?,
                    1 => {
                        e.a.add(TMP, PA, LDA4)?;
                        e.a.ldr(dst, mem(TMP).off(0))?;
                    }
                    _ => {
                        e.a.add(TMP, TMP, LDA4)?;
                        e.a.ldr(dst, mem(TMP).off(0))?;
                    }
                }
            }
            e.a.add(PA, PA, if quad { 16 } else { 4 })?;
            let al = match r.alpha {
                Some(al) => al,
                None => {
                    e.a.ldr(s(r.b[0]), mem(ARGS).off(i64::from(offsets::ALPHA)))?;
                    r.b[0]
                }
            };
            for &ar in &r.a {
                if quad {
                    e.a.fmul(v(ar).s4(), v(ar).s4(), v(al).s(0))?;
                } else {
                    e.a.fmul(s(ar), s(ar), s(al))?;
                }
            }
            Ok(())
        };
        // One k step with A in lane `lane`.
        let step = |e: &mut Emitter, lane: u8| -> Result<(), EncodeError> {
            if vector {
                for vi in 0..nv {
                    let b = r.b[vi % r.b.len()];
                    e.a.ldr(q(b), mem(PB).off(16 * vi as i64))?;
                    for (row, &ar) in r.a.iter().enumerate() {
                        let acc = r.acc[row * r.per_row + vi];
                        e.a.fmla(v(acc).s4(), v(b).s4(), v(ar).s(lane))?;
                    }
                }
            } else {
                let b = r.b[0];
                e.a.ldr(s(b), mem(PB).off(0))?;
                for (row, &ar) in r.a.iter().enumerate() {
                    let acc = r.acc[row];
                    e.a.fmadd(s(acc), s(ar), s(b), s(acc))?;
                }
            }
            step_b(e)
        };

        let kc = self.kc();
        let store = self.a.new_label();
        if vector {
            let (quad, tail, tail_top) =
                (self.a.new_label(), self.a.new_label(), self.a.new_label());
            self.a.lsr(T, KCUR, 2)?;
            self.a.cbz(T, tail)?;
            let open = self.open(quad, "k4", kc / 4)?;
            load_a(self, true)?;
            for lane in 0..4 {
                step(self, lane)?;
            }
            self.a.subs(T, T, 1)?;
            self.close(open, Some(Cond::Ne), quad)?;
            self.a.bind(tail)?;
            self.a.and(T, KCUR, 3)?;
            self.a.cbz(T, store)?;
            let open = self.open(tail_top, "k_tail", kc % 4)?;
            load_a(self, false)?;
            step(self, 0)?;
            self.a.subs(T, T, 1)?;
            self.close(open, Some(Cond::Ne), tail_top)?;
        } else {
            let top = self.a.new_label();
            self.a.mov(T, KCUR)?;
            self.a.cbz(T, store)?;
            let open = self.open(top, "k", kc)?;
            load_a(self, false)?;
            step(self, 0)?;
            self.a.subs(T, T, 1)?;
            self.close(open, Some(Cond::Ne), top)?;
        }

        self.a.bind(store)?;
        self.a.mov(TMP, PC)?;
        for row in 0..rows {
            for vi in 0..r.per_row {
                let acc = r.acc[row * r.per_row + vi];
                if vector {
                    self.a.str(q(acc), mem(TMP).off(16 * vi as i64))?;
                } else {
                    self.a.str(s(acc), mem(TMP).off(0))?;
                }
            }
            if row + 1 < rows {
                self.a.add(TMP, TMP, LDC4)?;
            }
        }
        Ok(())
    }

    /// `while J < n_end`-style loop of tiles `width` columns wide
    /// (`nv = 0`: single columns), `name` in the nest.
    fn column_loop(
        &mut self,
        rows: usize,
        nv: usize,
        name: &'static str,
        trips: u64,
    ) -> Result<(), EncodeError> {
        let width = (4 * nv).max(1) as i64;
        let (head, done) = (self.a.new_label(), self.a.new_label());
        let open = self.open(head, name, trips)?;
        self.field(TMP2, offsets::N_END)?;
        self.a.sub(TMP2, TMP2, J)?;
        self.a.cmp(TMP2, width)?;
        self.a.b_cond(Cond::Lo, done)?;
        self.tile(rows, nv)?;
        self.a.add(J, J, width)?;
        self.close(open, None, head)?;
        self.a.bind(done)
    }

    /// Every column of the rectangle for the rows at `I` (`rows` of them).
    fn column_sweep(&mut self, rows: usize) -> Result<(), EncodeError> {
        let (_, n, _) = self.geometry;
        let nv = self.tile.1;
        let width = 4 * nv as u64;
        self.field(J, offsets::N_START)?;
        if self.panels {
            // Single columns until J is a multiple of the tile width.
            let (head, done) = (self.a.new_label(), self.a.new_label());
            let open = self.open(head, "col_align", 0)?;
            self.a.tst(J, width as i64 - 1)?;
            self.a.b_cond(Cond::Eq, done)?;
            self.field(TMP2, offsets::N_END)?;
            self.a.cmp(J, TMP2)?;
            self.a.b_cond(Cond::Hs, done)?;
            self.tile(rows, 0)?;
            self.a.add(J, J, 1)?;
            self.close(open, None, head)?;
            self.a.bind(done)?;
        }
        self.column_loop(rows, nv, "col_tiles", n / width)?;
        if nv > 1 {
            self.column_loop(rows, 1, "col_quads", (n % width) / 4)?;
        }
        self.column_loop(rows, 0, "cols", n % 4)
    }

    /// Rows from `I` in tiles of `rows` while that many are left.
    fn row_loop(&mut self, rows: usize, name: &'static str, trips: u64) -> Result<(), EncodeError> {
        let (head, done) = (self.a.new_label(), self.a.new_label());
        let open = self.open(head, name, trips)?;
        self.field(TMP2, offsets::M_END)?;
        self.a.sub(TMP2, TMP2, I)?;
        self.a.cmp(TMP2, rows as i64)?;
        self.a.b_cond(Cond::Lo, done)?;
        self.column_sweep(rows)?;
        self.a.add(I, I, rows as i64)?;
        self.close(open, None, head)?;
        self.a.bind(done)
    }
}

/// Save (`save`) or restore the callee-saved `d8`–`d15` in a 64-byte frame.
fn callee_saved(a: &mut Assembler, save: bool) -> Result<(), EncodeError> {
    if save {
        a.stp(d(8), d(9), mem(SP).pre(-64))?;
        a.stp(d(10), d(11), mem(SP).off(16))?;
        a.stp(d(12), d(13), mem(SP).off(32))?;
        a.stp(d(14), d(15), mem(SP).off(48))
    } else {
        a.ldp(d(14), d(15), mem(SP).off(48))?;
        a.ldp(d(12), d(13), mem(SP).off(32))?;
        a.ldp(d(10), d(11), mem(SP).off(16))?;
        a.ldp(d(8), d(9), mem(SP).post(64))
    }
}

/// The whole body: B in panels or rows, `tile = (mr, nv)`, the nest's
/// trips stated at `geometry = (m, n, k)`.
fn emit(
    panels: bool,
    tile: (usize, usize),
    geometry: (u64, u64, u64),
) -> Result<(NativeCode, Vec<LoopTrip>), EncodeError> {
    let (mr, nv) = tile;
    if mr == 0 || !matches!(nv, 1 | 2 | 4) {
        return Err(EncodeError::NoMatchingForm {
            mnemonic: "a tile of 1.. rows and 4, 8 or 16 columns",
        });
    }
    // Every tile shape the body uses (main, row tail, column tails).
    let mut saves = false;
    for rows in [mr, 1] {
        for w in [nv, 1, 0] {
            saves |= Regs::of(rows, w)?.callee_saved();
        }
    }
    let (m, _, k) = geometry;
    let mut e = Emitter {
        a: Assembler::new(),
        panels,
        depth: 0,
        loops: Vec::new(),
        nest: Vec::new(),
        geometry,
        tile,
    };
    let ret = e.a.new_label();
    // No early exit for an empty rectangle: its row and column loops run
    // zero times; a branch here would only make weft-cost price the body
    // as entered a quarter of the time (its half-and-half rule).
    if saves {
        callee_saved(&mut e.a, true)?;
    }
    e.field(A_BASE, offsets::A)?;
    e.field(B_BASE, offsets::B)?;
    e.field(C_BASE, offsets::C)?;
    e.field(LDA4, offsets::LDA)?;
    e.a.lsl(LDA4, LDA4, 2)?;
    if panels {
        e.field(BSTRIDE, offsets::K)?;
        e.a.lsl(BSTRIDE, BSTRIDE, 6)?;
    } else {
        e.field(BSTRIDE, offsets::LDB)?;
        e.a.lsl(BSTRIDE, BSTRIDE, 2)?;
    }
    e.field(LDC4, offsets::LDC)?;
    e.a.lsl(LDC4, LDC4, 2)?;
    e.a.mov(KB, XZR)?;

    // k blocks: a do-while, so k = 0 still writes β ⊗ C or +0.
    let kb_top = e.a.new_label();
    let open = e.open(kb_top, "k_blocks", k.div_ceil(KC).max(1))?;
    e.field(TMP, offsets::K)?;
    e.a.sub(KCUR, TMP, KB)?;
    e.a.mov(TMP2, KC as i64)?;
    e.a.cmp(KCUR, TMP2)?;
    e.a.csel(KCUR, KCUR, TMP2, Cond::Lo)?;
    // MODE: 1 after the first block or when β = 1 (bits 0x3f800000),
    // 0 when β = ±0, else 2.
    let mode_done = e.a.new_label();
    let beta_nonzero = e.a.new_label();
    e.a.mov(MODE, 1)?;
    e.a.cbnz(KB, mode_done)?;
    e.a.ldr(w(17), mem(ARGS).off(i64::from(offsets::BETA)))?;
    e.a.tst(w(17), 0x7fff_ffff)?;
    e.a.b_cond(Cond::Ne, beta_nonzero)?;
    e.a.mov(MODE, XZR)?;
    e.a.b(mode_done)?;
    e.a.bind(beta_nonzero)?;
    e.a.movz(w(13), 0x3f80, 16)?;
    e.a.cmp(w(17), w(13))?;
    e.a.b_cond(Cond::Eq, mode_done)?;
    e.a.mov(MODE, 2)?;
    e.a.bind(mode_done)?;

    e.field(I, offsets::M_START)?;
    e.row_loop(mr, "row_tiles", m / mr as u64)?;
    e.row_loop(1, "rows", m % mr as u64)?;
    e.a.add(KB, KB, KC as i64)?;
    e.field(TMP, offsets::K)?;
    e.a.cmp(KB, TMP)?;
    e.close(open, Some(Cond::Lo), kb_top)?;
    if saves {
        callee_saved(&mut e.a, false)?;
    }
    e.a.bind(ret)?;
    e.a.ret()?;
    let bytes = e.a.finish()?.iter().flat_map(|w| w.to_le_bytes()).collect();
    // Annotations in head order (the nest's order).
    let mut loops = e.loops;
    loops.sort_by_key(|l| l.head);
    Ok((
        NativeCode {
            isa: Isa::Aarch64,
            bytes,
            pool: None,
            loops,
        },
        e.nest,
    ))
}
