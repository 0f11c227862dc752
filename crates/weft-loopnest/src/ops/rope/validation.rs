//! Validation of `loopnest.rope` twins against the arm: the cases that hunt
//! for differences and how one case runs.
//!
//! A body is compiled for one shape (its guards refuse others), so the
//! cases are rows of the offer's heads, kv_heads, head_dim and rope_dims;
//! tests judge several shapes (rope_dims below, at and above a register's
//! lanes, partial rotations) to reach every partial step. Cases: rows of
//! hunting values ([`cases::hunting`]: specials, subnormals, random bits,
//! magnitudes over 2^-20..2^20) in `q` and `k`; each special value at
//! every position of a row; positions 0, 1 and near the end of tables of
//! 64 and 4096 positions at frequency bases 10^4 and 10^6 (large angles);
//! row ranges whole, inner, single and empty. `q` and `k` start 0–3
//! elements past a 64-byte boundary; the guards around both, the rows
//! outside the range and the elements past `rope_dims` must come back
//! untouched.

use std::ops::Range;
use std::sync::Arc;

use weft_kernel::{Kernel, Offer, Refusal};
use weft_validate::{Checker, Outputs, SplitMix64, Validation};

use super::{Rope, RopeArgs, RopeTable, ARGS_NAME};
use crate::ops::cases::{self, guarded, hunting, place, show, GUARD};
use crate::ops::NestOp;

/// One case: the rows of `q` and `k`, the table, the first row's position,
/// the rows computed, and how far past a 64-byte boundary `q` and `k`
/// start.
#[derive(Clone, Debug)]
pub struct Case {
    /// The shape (the offer's).
    pub rope: Rope,
    /// `rows · heads · head_dim` values.
    pub q: Vec<f32>,
    /// `rows · kv_heads · head_dim` values.
    pub k: Vec<f32>,
    /// cos and sin.
    pub table: Arc<RopeTable>,
    /// Position of row 0.
    pub pos: usize,
    /// The rows computed.
    pub rows: Range<usize>,
    /// Elements past a 64-byte boundary of `q` and `k`.
    pub misalign: [usize; 2],
}

/// Validation of `loopnest.rope` twins.
#[derive(Clone, Copy, Debug, Default)]
pub struct RopeValidation;

/// The family's twin check: [`RopeValidation`] through weft-validate.
pub fn checker() -> Checker<RopeValidation> {
    Checker(RopeValidation)
}

// SAFETY: `Args` is the `#[repr(C)]` struct of contracts naming ARGS_NAME,
// and `run` calls a kernel only with args built by `RopeArgs::new`, which
// checks every extent against buffers and a table that live across the
// call.
unsafe impl Validation for RopeValidation {
    type Args = RopeArgs;
    type Case = Case;

    fn args_name(&self) -> &str {
        ARGS_NAME
    }

    fn generator(&self) -> String {
        "loopnest.rope cases v1".to_owned()
    }

    fn cases(&self, offer: &Offer, seed: u64) -> Vec<Case> {
        let Ok(rope) = Rope::from_geometry(&offer.contract.geometry) else {
            return Vec::new();
        };
        let (q_row, k_row) = (rope.heads * rope.head_dim, rope.kv_heads * rope.head_dim);
        let tables: Vec<Arc<RopeTable>> = [(1.0e4, 64usize), (1.0e6, 4096)]
            .iter()
            .filter_map(|&(base, n)| RopeTable::new(base, rope.rope_dims, n).ok())
            .map(Arc::new)
            .collect();
        let mut rng = SplitMix64::new(seed);
        let s = cases::specials();
        let mut out = Vec::new();
        let mut n = 0usize;
        let mut push = |out: &mut Vec<Case>, q, k, table: &Arc<RopeTable>, pos, rows| {
            n += 1;
            out.push(Case {
                rope,
                q,
                k,
                table: table.clone(),
                pos,
                rows,
                misalign: [n % 4, (n + 2) % 4],
            });
        };
        for table in &tables {
            let end = table.positions();
            for (total, rows, pos) in [
                (3usize, 0..3, 0usize),
                (3, 0..3, 1),
                (4, 1..3, end - 4),
                (2, 1..2, 7),
                (2, 1..1, 0),
            ] {
                let q = (0..total * q_row).map(|_| hunting(&mut rng, &s)).collect();
                let k = (0..total * k_row).map(|_| hunting(&mut rng, &s)).collect();
                push(&mut out, q, k, table, pos, rows);
            }
        }
        // Each special at every position of a row (a row per special).
        if let Some(table) = tables.first() {
            let ordinary = |rng: &mut SplitMix64, n: usize| -> Vec<f32> {
                (0..n)
                    .map(|_| ((rng.next_u32() >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 4.0)
                    .collect()
            };
            let rows = s.len().min(table.positions());
            let mut q = ordinary(&mut rng, rows * q_row);
            let mut k = ordinary(&mut rng, rows * k_row);
            for (r, v) in s.iter().take(rows).enumerate() {
                for i in (r % 3..q_row).step_by(3) {
                    q[r * q_row + i] = *v;
                }
                for i in (r % 2..k_row).step_by(2) {
                    k[r * k_row + i] = *v;
                }
            }
            push(&mut out, q, k, table, 0, 0..rows);
        }
        out
    }

    fn run(&self, kernel: &Kernel<RopeArgs>, case: &Case) -> Result<Outputs, Refusal> {
        let (nq, nk) = (case.q.len(), case.k.len());
        let (mut qbuf, qs) = place(&case.q, case.misalign[0]);
        let (mut kbuf, ks) = place(&case.k, case.misalign[1]);
        let args = RopeArgs::new(
            &case.rope,
            &mut qbuf[qs..qs + nq],
            &mut kbuf[ks..ks + nk],
            &case.table,
            case.pos,
            case.rows.clone(),
        )?;
        // SAFETY: `new` checked the extents against the buffers and the
        // table, which outlive the call.
        unsafe { kernel.call(&args) };
        let mut words = guarded(&qbuf, qs, nq);
        words.extend(guarded(&kbuf, ks, nk));
        Ok(Outputs::from_f32(words))
    }

    fn describe_input(&self, case: &Case, index: usize) -> String {
        let (nq, nk) = (case.q.len(), case.k.len());
        let head = format!(
            "{:?} pos {} rows {:?} table of {} positions (base {}) misalign {:?}",
            case.rope,
            case.pos,
            case.rows,
            case.table.positions(),
            case.table.freq_base(),
            case.misalign
        );
        let (name, values, i) = if index < nq + 2 * GUARD {
            ("q", &case.q, index.checked_sub(GUARD))
        } else {
            ("k", &case.k, (index - nq - 2 * GUARD).checked_sub(GUARD))
        };
        match i {
            Some(i) if i < values.len() => {
                let row = if name == "q" {
                    case.rope.heads
                } else {
                    case.rope.kv_heads
                } * case.rope.head_dim;
                format!(
                    "{head}: {name}[{}][{}] of {} and its partner {}",
                    i / row,
                    i % row,
                    show(values[i]),
                    show(values[i ^ 1])
                )
            }
            _ => format!("{head}: a guard f32 around {name} (of {nq} and {nk})"),
        }
    }
}
