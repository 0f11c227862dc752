//! Validation of `loopnest.embed_f32` and `loopnest.embed_q8_0` twins
//! against the arm: the cases that hunt for differences and how one case
//! runs.
//!
//! A body is compiled for one `vocab` and `dim` (its guards refuse others),
//! so every case has a table of the offer's `vocab` rows; it is one zeroed
//! allocation shared by the cases (the pages of rows no id names are never
//! touched), with the rows the ids name filled: F32 rows with hunting
//! values ([`cases::hunting`]: every special class, NaNs with payloads of
//! both signs — the F32 contract compares by bits — subnormals, random
//! bits); Q8_0 rows with binary16 scales of every class, each in some
//! block of every table (±0, subnormals from the smallest to the largest,
//! the smallest normal, ±max, ±inf, quiet and signalling NaNs with
//! payloads), then ordinary scales and random bits,
//! and quants over all of `i8` (−128 and 127 included). Ids: 0,
//! `vocab − 1`, random ids and repeats, and ids at and above `vocab`
//! (`vocab`, `vocab + 1`, `u32::MAX`), whose output rows a body must leave
//! untouched (the checked constructor refuses them, so these cases build
//! the arguments themselves, over buffers they check); row ranges whole,
//! inner, single and empty. `out` and the table start at several offsets
//! past a 64-byte boundary; `out` starts as a pattern of its own, and its
//! guards must come back untouched.

use std::ops::Range;
use std::sync::Arc;

use weft_kernel::{Kernel, Offer, Refusal};
use weft_validate::{align_up_elements, Checker, Outputs, SplitMix64, Validation};

use super::{Embed, EmbedArgs, ARGS_NAME, Q8_0_BLOCK, Q8_0_BLOCK_BYTES};
use crate::ops::cases::{self, guarded, hunting, place, show, GUARD};
use crate::ops::NestOp;

/// A table's bytes, starting `misalign` bytes past a 64-byte boundary.
pub struct PlacedTable {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl std::fmt::Debug for PlacedTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlacedTable")
            .field("len", &self.len)
            .field("start", &self.start)
            .finish()
    }
}

impl PlacedTable {
    fn new(len: usize, misalign: usize) -> Self {
        // Zeroed, so untouched rows cost no memory.
        let buf = vec![0u8; len + 64 + misalign];
        let start = align_up_elements(buf.as_ptr(), 64) + misalign;
        Self { buf, start, len }
    }

    /// The table's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }

    fn row_mut(&mut self, id: usize, row_bytes: usize) -> &mut [u8] {
        let at = self.start + id * row_bytes;
        &mut self.buf[at..at + row_bytes]
    }
}

/// One case: the table, the ids, the rows computed, and how far past a
/// 64-byte boundary `out` starts.
#[derive(Clone, Debug)]
pub struct Case<const Q8: bool> {
    /// The shape (the offer's).
    pub op: Embed<Q8>,
    /// The table.
    pub table: Arc<PlacedTable>,
    /// Token ids, some possibly not below `vocab`.
    pub ids: Vec<u32>,
    /// The rows computed.
    pub rows: Range<usize>,
    /// Elements past a 64-byte boundary of `out`.
    pub misalign: usize,
}

/// Validation of the embedding families' twins (`Q8`: the Q8_0 table).
#[derive(Clone, Copy, Debug, Default)]
pub struct EmbedValidation<const Q8: bool>;

/// The F32 family's twin check: [`EmbedValidation`] through weft-validate.
pub fn checker_f32() -> Checker<EmbedValidation<false>> {
    Checker(EmbedValidation)
}

/// The Q8_0 family's twin check: [`EmbedValidation`] through weft-validate.
pub fn checker_q8_0() -> Checker<EmbedValidation<true>> {
    Checker(EmbedValidation)
}

/// binary16 scales of every class, as bits.
const SPECIAL_SCALES: [u16; 16] = [
    0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0200, 0x0400, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00,
    0xfe00, 0x7d01, 0x7c01, 0x3c00,
];

/// Row `id`'s contents: hunting f32s, or Q8_0 blocks (`blocks` counts the
/// blocks filled so far: the first ones take every special scale in turn,
/// twice).
fn fill_row<const Q8: bool>(
    row: &mut [u8],
    rng: &mut SplitMix64,
    specials: &[f32],
    blocks: &mut usize,
) {
    if Q8 {
        for block in row.chunks_exact_mut(Q8_0_BLOCK_BYTES) {
            let r = rng.next_u64();
            *blocks += 1;
            let scale: u16 = match r % 4 {
                _ if *blocks <= 2 * SPECIAL_SCALES.len() => {
                    SPECIAL_SCALES[*blocks % SPECIAL_SCALES.len()]
                }
                0 => SPECIAL_SCALES[(r >> 8) as usize % SPECIAL_SCALES.len()],
                1 => (r >> 16) as u16,
                // Ordinary scales: 2^-14 .. 2^-2.
                _ => 0x0400 + ((r >> 16) as u16 % 0x3000),
            };
            block[..2].copy_from_slice(&scale.to_le_bytes());
            for (k, q) in block[2..].iter_mut().enumerate() {
                *q = match (r >> 32) as usize % 8 {
                    0 if k == 0 => 0x80,
                    1 if k == 31 => 0x7f,
                    _ => rng.next_u32() as u8,
                };
            }
        }
    } else {
        for v in row.chunks_exact_mut(4) {
            v.copy_from_slice(&hunting(rng, specials).to_le_bytes());
        }
    }
}

// SAFETY: `Args` is the `#[repr(C)]` struct of contracts naming ARGS_NAME.
// `run` builds it over a table of exactly `vocab · row_bytes` bytes, `n`
// ids and an `out` of `n · dim` f32s, with `row_start <= row_end <= n`,
// all living across the call: the extents the nest's guards and gather
// rely on (an id not below `vocab` is skipped).
unsafe impl<const Q8: bool> Validation for EmbedValidation<Q8> {
    type Args = EmbedArgs;
    type Case = Case<Q8>;

    fn args_name(&self) -> &str {
        ARGS_NAME
    }

    fn generator(&self) -> String {
        if Q8 {
            "loopnest.embed_q8_0 cases v1".to_owned()
        } else {
            "loopnest.embed_f32 cases v1".to_owned()
        }
    }

    fn cases(&self, offer: &Offer, seed: u64) -> Vec<Case<Q8>> {
        let Ok(op) = Embed::<Q8>::from_geometry(&offer.contract.geometry) else {
            return Vec::new();
        };
        let (vocab, row_bytes) = (op.vocab, op.row_bytes());
        let mut rng = SplitMix64::new(seed);
        let s = cases::specials();
        let last = (vocab - 1) as u32;
        let mut ids: Vec<u32> = vec![0, last, 0];
        // Enough distinct rows that every special scale has a block.
        let more = (2 * SPECIAL_SCALES.len())
            .div_ceil(op.dim.div_ceil(Q8_0_BLOCK))
            .max(6);
        ids.extend((0..more).map(|_| rng.below(vocab as u64) as u32));
        let beyond = [vocab as u32, (vocab as u32).saturating_add(1), u32::MAX];
        let mut out = Vec::new();
        // F32 tables stay f32-aligned; Q8_0 blocks fall anywhere.
        let unit = if Q8 { 1 } else { 4 };
        for misalign in 0..2usize {
            let mut table = PlacedTable::new(vocab * row_bytes, misalign * 3 * unit);
            let mut blocks = 0;
            for &id in &ids {
                let row = table.row_mut(id as usize, row_bytes);
                fill_row::<Q8>(row, &mut rng, &s, &mut blocks);
            }
            let table = Arc::new(table);
            let mut with_beyond = ids.clone();
            for (i, b) in beyond.iter().enumerate() {
                with_beyond.insert(2 * i + 1, *b);
            }
            let n = with_beyond.len();
            for (ids, rows) in [
                (ids.clone(), 0..ids.len()),
                (ids.clone(), 2..ids.len() - 1),
                (with_beyond.clone(), 0..n),
                (with_beyond, 1..2),
                (ids.clone(), 3..3),
            ] {
                out.push(Case {
                    op,
                    table: table.clone(),
                    ids,
                    rows,
                    misalign: (out.len() + misalign) % 4,
                });
            }
        }
        out
    }

    fn run(&self, kernel: &Kernel<EmbedArgs>, case: &Case<Q8>) -> Result<Outputs, Refusal> {
        let (op, n) = (case.op, case.ids.len());
        let table = case.table.bytes();
        let bad = |what: &str| Refusal::BadOperand {
            operand: what.to_owned(),
            reason: "the case does not fit its shape".to_owned(),
        };
        if table.len() != op.vocab * op.row_bytes() {
            return Err(bad("table"));
        }
        if case.rows.start > case.rows.end || case.rows.end > n {
            return Err(bad("rows"));
        }
        let pattern: Vec<f32> = (0..n * op.dim)
            .map(|i| f32::from_bits(0x4b00_0000 | i as u32 & 0x7f_ffff))
            .collect();
        let (mut obuf, os) = place(&pattern, case.misalign);
        let args = EmbedArgs {
            table: table.as_ptr(),
            ids: case.ids.as_ptr(),
            out: obuf[os..os + n * op.dim].as_mut_ptr(),
            vocab: op.vocab,
            dim: op.dim,
            rows: n,
            row_start: case.rows.start,
            row_end: case.rows.end,
        };
        // SAFETY: the table holds `vocab · row_bytes` bytes, `ids` `n` ids
        // and `out` `n · dim` f32s, and the row range is inside `0..n`
        // (checked above); all live across the call.
        unsafe { kernel.call(&args) };
        Ok(Outputs::from_f32(guarded(&obuf, os, n * op.dim)))
    }

    fn describe_input(&self, case: &Case<Q8>, index: usize) -> String {
        let (dim, row_bytes) = (case.op.dim, case.op.row_bytes());
        let head = format!(
            "vocab {} dim {dim} ids {:?} rows {:?} misalign {}",
            case.op.vocab, case.ids, case.rows, case.misalign
        );
        match index.checked_sub(GUARD) {
            Some(i) if i < case.ids.len() * dim => {
                let (t, j) = (i / dim, i % dim);
                let id = case.ids[t] as usize;
                let row = case.table.bytes().get(id * row_bytes..(id + 1) * row_bytes);
                let what = match row {
                    None => "none (the id is not below vocab)".to_owned(),
                    Some(row) if Q8 => {
                        let b = &row[(j / Q8_0_BLOCK) * Q8_0_BLOCK_BYTES..];
                        format!(
                            "scale {:#06x}, quant {}",
                            u16::from_le_bytes([b[0], b[1]]),
                            b[2 + j % Q8_0_BLOCK] as i8
                        )
                    }
                    Some(row) => {
                        let v = &row[4 * j..4 * j + 4];
                        show(f32::from_le_bytes([v[0], v[1], v[2], v[3]]))
                    }
                };
                format!("{head}: out[{t}][{j}] of id {id}: {what}")
            }
            _ => format!("{head}: guard f32 {index} around out"),
        }
    }
}
