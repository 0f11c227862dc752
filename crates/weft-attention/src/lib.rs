//! The attention family: fused online-softmax attention
//! (`attention.fused`) and the unfused chain it replaces
//! (`attention.scores`, `.scale`, `.rowmax`, `.exp`, `.rowsum`,
//! `.normalise`, `.pv`, see [`chain`]).
//!
//! # Family layout
//!
//! As every family crate: this file is the contract and [`entry`], which
//! registers each arm with its own twins, check and bench; [`reference`](mod@reference)
//! is the scalar definition; [`arm`] the fused Cranelift body; [`chain`]
//! the seven unfused arms it replaces; [`twin_x64`] and [`twin_a64`] the
//! bodies Weft emits itself; [`validation`] the cases a twin is judged on.
//!
//! # What is computed
//!
//! Per query head `h` (`0..heads`) and query row `i` (`0..lq`), with
//! `g = h / (heads / kv_heads)` its KV head (grouped-query attention):
//!
//! ```text
//! O[h][i] = Σ_{j < n_i} softmax_j(scale · Q[h][i]·K[g][j]) · V[g][j]
//! n_i     = causal ? min(lk, q_offset + i + 1) : lk      (≥ 1: lk ≥ 1)
//! ```
//!
//! Q and O are f32; K and V are f32 or IEEE binary16 ([`KvType`]), widened
//! exactly to f32. Every operand has element strides ([`Layout`]): per
//! head and per row for Q and O; per KV head and per position for K and V
//! (a KV cache's capacity may exceed `lk`). Decode against a cache is
//! `lq = 1, q_offset = lk - 1`.
//!
//! # Contract (how every fused arm and twin rounds)
//!
//! All arithmetic is IEEE binary32, round to nearest even, no flush to
//! zero; `fma(a, b, c)` is one rounding of `a·b + c`. For one `(h, i)`:
//!
//! 1. **State**: `m = -inf`; `l[0..16] = +0`; `o[0..d] = +0`.
//! 2. **Blocks** of [`BLOCK`] = 16 keys: block `b` holds keys
//!    `j = 16b + k`, `k < nb = min(16, n_i - 16b)`; keys at or past `n_i`
//!    are *absent* (never read).
//! 3. **Score** of a present key: 16 lane accumulators `a[t] = +0`; for
//!    `c = 0, 1, …, d-1` in order, `a[c mod 16] = fma(q[c], k_j[c],
//!    a[c mod 16])`; fold `h[t] = (a[t] + a[t+8]) + (a[t+4] + a[t+12])`
//!    for `t < 4`, `dot = (h[0] + h[1]) + (h[2] + h[3])`; `s_k = dot ·
//!    scale`. ([`reference::fold16`].)
//! 4. **Running maximum**: `m' = max(m, max_k s_k)` over present keys;
//!    `u = (m' == -inf) ? +0 : m'` (the shift; it keeps a row whose
//!    scores so far are all `-inf` at weight 0 instead of NaN).
//! 5. **Weights**: `α = E(m - u)`; `p_k = E(s_k - u)` for present keys,
//!    `p_k = +0` for absent ones; `m = m'`.
//! 6. **Sum lanes**: `l[k] = fma(l[k], α, p_k)` for all 16 `k` (lane `k`
//!    is the key's position in its block).
//! 7. **Output**: `o[c] = o[c] · α` for every `c`; then for each present
//!    key in order `k = 0, 1, …`: `o[c] = fma(p_k, v_j[c], o[c])`.
//! 8. After the last block: `L = fold16(l)` (step 3's fold) and
//!    `O[h][i][c] = o[c] / L`.
//!
//! `E` is the family's exp ([`reference::exp`]): for `x < -87` it is `+0`;
//! otherwise `t = fma(x, LOG2E, 1.5·2^23)`, `n = t - 1.5·2^23` (an integer),
//! `r = fma(n, -LN2_HI, x)`, `r = fma(n, -LN2_LO, r)`, `p = C7`, then
//! `p = fma(p, r, C_k)` for `k = 6, 5, …, 0` (`C_k = f32(1/k!)`), and
//! `E = p · 2^n` (one rounding; `2^n` is normal because `n ≥ -126`).
//! Its arguments are never positive (step 4), where it is within 2 ulp of
//! `e^x` (tested); NaN gives NaN. The constants are bit patterns in
//! [`exp_consts`].
//!
//! **The maximum may be taken in any order, by any max that returns one
//! of its operands or a NaN.** The results do not depend on it: without
//! NaNs the maximum is exact and unique up to the sign of a zero, and
//! `E(±0) = 1`, `x - (±0) = x` for `x ≠ 0`; a NaN or `+inf` score makes
//! every output of its row NaN whatever the max does (it reaches `u`, `α`
//! or a `p_k`, then `l` or `o`). NaN outputs compare by class
//! ([`NanRule::ByClass`]): F16C quietens signalling NaNs, integer
//! widening does not, and ISAs differ in NaN payloads.
//!
//! A twin may pad an absent key's score with `-inf` and process a block
//! that has no present key for a row as long as it does not touch `o` for
//! absent keys (step 7; `fma(0, inf, o)` would be NaN): with scores
//! `-inf`, `m' = m`, and `α = E(0) = 1` leaves `l` and `o` exactly as they
//! were, or (`m = -inf`) `α = 0` scales zeros.
//!
//! # Arguments and member views
//!
//! [`AttentionArgs`] (`#[repr(C)]`, built by [`AttentionArgs::new`], which
//! checks every extent). The work is cut into **units**: unit `u` is head
//! `u / row_blocks`, rows `16·rb .. min(16·rb + 16, lq)` with `rb = u %
//! row_blocks` and `row_blocks = ceil(lq / 16)` (head-major, so a decode
//! call's units are its heads and a GQA group is consecutive). A call
//! computes the units `unit_start..unit_end` and writes only their outputs;
//! every `(h, i)` is computed alone, so any split is bit-identical to one
//! call. The member-view axis is `units`, granule 1.
//!
//! # Bodies
//!
//! A body is built for one head dimension `d` and one [`KvType`] (the
//! offer's geometry: `d`, `kv_f16`, plus `lq`, `lk`, `heads`, `kv_heads`,
//! `causal` for pricing); everything else is read from the arguments at
//! run time, so one body serves every `lk` of a decode loop. The contract
//! admits `d` a multiple of 16 in `16..=256`; the x64 twins serve all of
//! it ([`MAX_TWIN_D_X64`]: Gemma's heads are 256 wide), the arm64 twin
//! `d ≤ 128` ([`MAX_TWIN_D_A64`]), refusing more by name.

pub mod arm;
pub mod chain;
pub mod reference;
pub mod twin_a64;
pub mod twin_x64;
pub mod validation;

#[cfg(test)]
mod tests;

use std::ops::Range;
use std::sync::Arc;

use weft_kernel::{
    Aliasing, ArithmeticContract, Contract, FmaUse, Geometry, KernelArgs, NanRule, ReductionOrder,
    Refusal,
};

/// The fused family's name.
pub const FAMILY: &str = "attention.fused";

/// The name of the fused argument struct in contracts.
pub const ARGS_NAME: &str = "AttentionArgs";

/// Keys per block, and lanes of the dot product and of the sum.
pub const BLOCK: usize = 16;

/// Query rows per member-view unit.
pub const ROW_BLOCK: usize = 16;

/// Largest head dimension the contract admits.
pub const MAX_D: usize = 256;

/// Largest head dimension the x64 twins serve: every one the contract
/// admits.
pub const MAX_TWIN_D_X64: usize = MAX_D;

/// Largest head dimension the arm64 twin serves (its q row and output
/// chunks are NEON registers).
pub const MAX_TWIN_D_A64: usize = 128;

/// The bit patterns of the exp's constants (see the module docs).
pub mod exp_consts {
    /// Below this `E(x)` is `+0` (-87.0).
    pub const LO: u32 = 0xc2ae_0000;
    /// `f32(1/ln 2)`.
    pub const LOG2E: u32 = 0x3fb8_aa3b;
    /// `1.5 · 2^23`: adding it rounds to an integer.
    pub const MAGIC: u32 = 0x4b40_0000;
    /// `-f32(ln 2)`.
    pub const NEG_LN2_HI: u32 = 0xbf31_7218;
    /// `-f32(ln 2 - f32(ln 2))` (a positive number: `f32(ln 2)` is above `ln 2`).
    pub const NEG_LN2_LO: u32 = 0x3102_e308;
    /// `C_k = f32(1/k!)`, `k = 0..=7`.
    pub const C: [u32; 8] = [
        0x3f80_0000,
        0x3f80_0000,
        0x3f00_0000,
        0x3e2a_aaab,
        0x3d2a_aaab,
        0x3c08_8889,
        0x3ab6_0b61,
        0x3950_0d01,
    ];
    /// The bits of `1.0`, added to `n << 23` to make `2^n`.
    pub const ONE_BITS: u32 = 0x3f80_0000;
}

/// The element type of K and V.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16 (bits as `u16`), widened exactly.
    F16,
}

impl KvType {
    /// Bytes per element.
    pub fn bytes(self) -> usize {
        match self {
            KvType::F32 => 4,
            KvType::F16 => 2,
        }
    }

    /// The geometry's `kv_f16` value (0 or 1).
    pub fn flag(self) -> u64 {
        match self {
            KvType::F32 => 0,
            KvType::F16 => 1,
        }
    }

    /// The name used in twin and bench labels.
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
        }
    }
}

/// K or V elements as a slice.
#[derive(Clone, Copy, Debug)]
pub enum KvSlice<'a> {
    /// binary32 values.
    F32(&'a [f32]),
    /// binary16 bit patterns.
    F16(&'a [u16]),
}

impl KvSlice<'_> {
    /// The element type.
    pub fn kind(&self) -> KvType {
        match self {
            KvSlice::F32(_) => KvType::F32,
            KvSlice::F16(_) => KvType::F16,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            KvSlice::F32(s) => s.len(),
            KvSlice::F16(s) => s.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` widened to f32 (exact), or `None` past the end.
    pub fn get(&self, i: usize) -> Option<f32> {
        match self {
            KvSlice::F32(s) => s.get(i).copied(),
            KvSlice::F16(s) => s.get(i).map(|h| reference::f16_to_f32(*h)),
        }
    }

    fn as_ptr(&self) -> *const u8 {
        match self {
            KvSlice::F32(s) => s.as_ptr().cast(),
            KvSlice::F16(s) => s.as_ptr().cast(),
        }
    }
}

/// The sizes of one attention call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionShape {
    /// Head dimension: a multiple of 16 in `16..=256`.
    pub d: usize,
    /// Query rows per head.
    pub lq: usize,
    /// Keys (and values) per KV head, at least 1.
    pub lk: usize,
    /// Query heads.
    pub heads: usize,
    /// KV heads; `heads` must be a multiple of it.
    pub kv_heads: usize,
    /// The position of query row 0 for the causal mask.
    pub q_offset: usize,
    /// Whether row `i` sees only keys `0..=q_offset + i`.
    pub causal: bool,
    /// The factor applied to every dot product.
    pub scale: f32,
    /// The element type of K and V.
    pub kv: KvType,
}

fn unsupported(reason: String) -> Refusal {
    Refusal::UnsupportedGeometry { reason }
}

fn bad(operand: &str, reason: String) -> Refusal {
    Refusal::BadOperand {
        operand: operand.to_owned(),
        reason,
    }
}

/// Check a head dimension against the contract.
pub fn check_d(d: u64) -> Result<usize, Refusal> {
    if d == 0 || !d.is_multiple_of(BLOCK as u64) || d > MAX_D as u64 {
        return Err(unsupported(format!(
            "head dimension {d} is not a multiple of {BLOCK} in {BLOCK}..={MAX_D}"
        )));
    }
    Ok(d as usize)
}

/// Check head counts: both at least 1, `heads` a multiple of `kv_heads`.
pub fn check_heads(heads: u64, kv_heads: u64) -> Result<(), Refusal> {
    if heads == 0 || kv_heads == 0 {
        return Err(unsupported(format!(
            "{heads} query heads over {kv_heads} KV heads: both must be at least 1"
        )));
    }
    if !heads.is_multiple_of(kv_heads) {
        return Err(unsupported(format!(
            "{heads} query heads are not a multiple of {kv_heads} KV heads"
        )));
    }
    Ok(())
}

impl AttentionShape {
    /// Check the shape against the contract: `d`, head counts, `lq ≥ 1`,
    /// `lk ≥ 1`, and no overflow of `q_offset + lq`.
    pub fn check(&self) -> Result<(), Refusal> {
        check_d(self.d as u64)?;
        check_heads(self.heads as u64, self.kv_heads as u64)?;
        if self.lk == 0 {
            return Err(unsupported(
                "lk is 0: attention needs at least one key".into(),
            ));
        }
        if self.lq == 0 {
            return Err(unsupported("lq is 0".into()));
        }
        self.q_offset
            .checked_add(self.lq)
            .ok_or_else(|| unsupported("q_offset + lq overflows".into()))?;
        self.units()
            .ok_or_else(|| unsupported("heads × row blocks overflows".into()))?;
        Ok(())
    }

    /// Query heads per KV head.
    pub fn group(&self) -> usize {
        self.heads / self.kv_heads.max(1)
    }

    /// `ceil(lq / 16)`.
    pub fn row_blocks(&self) -> usize {
        self.lq.div_ceil(ROW_BLOCK)
    }

    /// Member-view units: `heads · row_blocks` (`None` on overflow).
    pub fn units(&self) -> Option<usize> {
        self.heads.checked_mul(self.row_blocks())
    }

    /// Keys row `i` sees (`n_i` of the contract).
    pub fn keys(&self, i: usize) -> usize {
        if self.causal {
            self.lk
                .min(self.q_offset.saturating_add(i).saturating_add(1))
        } else {
            self.lk
        }
    }

    /// The geometry of a site of this shape.
    pub fn geometry(&self) -> Geometry {
        geometry(
            self.d as u64,
            self.lq as u64,
            self.lk as u64,
            self.heads as u64,
            self.kv_heads as u64,
            self.causal,
            self.kv,
        )
    }

    /// The (head, row) pairs of unit `u`.
    pub fn unit_pairs(&self, u: usize) -> impl Iterator<Item = (usize, usize)> {
        let rb_count = self.row_blocks().max(1);
        let h = u / rb_count;
        let rb = u % rb_count;
        let start = rb * ROW_BLOCK;
        let end = (start + ROW_BLOCK).min(self.lq);
        (start..end).map(move |i| (h, i))
    }

    /// Scalar multiply-adds of one full call (`2 · Σ_i n_i · d` per head),
    /// for GFLOP/s figures: `2` flops each.
    pub fn flops(&self) -> u64 {
        let keys: u64 = (0..self.lq).map(|i| self.keys(i) as u64).sum();
        4 * keys * self.d as u64 * self.heads as u64
    }
}

/// Element strides of the four operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Q: between heads.
    pub q_head: usize,
    /// Q: between rows.
    pub q_row: usize,
    /// K: between KV heads.
    pub k_head: usize,
    /// K: between positions.
    pub k_pos: usize,
    /// V: between KV heads.
    pub v_head: usize,
    /// V: between positions.
    pub v_pos: usize,
    /// O: between heads.
    pub o_head: usize,
    /// O: between rows.
    pub o_row: usize,
}

impl Layout {
    /// Head-major and dense: `Q[h][i][c]`, `K[g][j][c]` with room for
    /// `capacity ≥ lk` positions per KV head (a cache), `O[h][i][c]`.
    pub fn head_major(shape: &AttentionShape, capacity: usize) -> Layout {
        let d = shape.d;
        Layout {
            q_head: shape.lq * d,
            q_row: d,
            k_head: capacity * d,
            k_pos: d,
            v_head: capacity * d,
            v_pos: d,
            o_head: shape.lq * d,
            o_row: d,
        }
    }

    /// Token-major, as a transformer's projections lay them out:
    /// `Q[i][h][c]`, `K[j][g][c]`, `O[i][h][c]`.
    pub fn token_major(shape: &AttentionShape) -> Layout {
        let d = shape.d;
        Layout {
            q_head: d,
            q_row: shape.heads * d,
            k_head: d,
            k_pos: shape.kv_heads * d,
            v_head: d,
            v_pos: shape.kv_heads * d,
            o_head: d,
            o_row: shape.heads * d,
        }
    }

    /// Elements Q must hold.
    pub fn q_len(&self, s: &AttentionShape) -> Option<usize> {
        extent(s.heads, self.q_head, s.lq, self.q_row, s.d)
    }

    /// Elements K must hold.
    pub fn k_len(&self, s: &AttentionShape) -> Option<usize> {
        extent(s.kv_heads, self.k_head, s.lk, self.k_pos, s.d)
    }

    /// Elements V must hold.
    pub fn v_len(&self, s: &AttentionShape) -> Option<usize> {
        extent(s.kv_heads, self.v_head, s.lk, self.v_pos, s.d)
    }

    /// Elements O must hold.
    pub fn o_len(&self, s: &AttentionShape) -> Option<usize> {
        extent(s.heads, self.o_head, s.lq, self.o_row, s.d)
    }

    /// Whether O's rows (d elements each) are pairwise disjoint: the rows
    /// of a head must not overlap and heads must not interleave, in either
    /// nesting order.
    pub fn o_rows_disjoint(&self, s: &AttentionShape) -> bool {
        let d = s.d;
        let fits = |inner: usize, n_inner: usize, outer: usize, n_outer: usize| {
            (n_inner <= 1 || inner >= d)
                && (n_outer <= 1
                    || (n_inner - 1)
                        .checked_mul(inner)
                        .and_then(|x| x.checked_add(d))
                        .is_some_and(|span| outer >= span))
        };
        fits(self.o_row, s.lq, self.o_head, s.heads) || fits(self.o_head, s.heads, self.o_row, s.lq)
    }
}

/// `(n1 - 1)·s1 + (n2 - 1)·s2 + d`, the elements a strided operand spans.
fn extent(n1: usize, s1: usize, n2: usize, s2: usize, d: usize) -> Option<usize> {
    let a = n1.checked_sub(1)?.checked_mul(s1)?;
    let b = n2.checked_sub(1)?.checked_mul(s2)?;
    a.checked_add(b)?.checked_add(d)
}

/// The arguments of every `attention.fused` kernel (`extern "C" fn(*const
/// AttentionArgs)`). Strides are in elements. Build them with
/// [`AttentionArgs::new`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AttentionArgs {
    /// Q, f32.
    pub q: *const f32,
    /// K, f32 or binary16 as the body's [`KvType`].
    pub k: *const u8,
    /// V, like K.
    pub v: *const u8,
    /// O, f32.
    pub o: *mut f32,
    /// Q between heads.
    pub q_head: usize,
    /// Q between rows.
    pub q_row: usize,
    /// K between KV heads.
    pub k_head: usize,
    /// K between positions.
    pub k_pos: usize,
    /// V between KV heads.
    pub v_head: usize,
    /// V between positions.
    pub v_pos: usize,
    /// O between heads.
    pub o_head: usize,
    /// O between rows.
    pub o_row: usize,
    /// Head dimension (must be the body's).
    pub d: usize,
    /// Query rows.
    pub lq: usize,
    /// Keys.
    pub lk: usize,
    /// Query heads.
    pub heads: usize,
    /// Query heads per KV head.
    pub group: usize,
    /// Position of query row 0.
    pub q_offset: usize,
    /// 1 for the causal mask, 0 without.
    pub causal: usize,
    /// The scale.
    pub scale: f32,
    /// 1 when K and V are binary16 (must be the body's).
    pub kv_f16: u32,
    /// First unit computed.
    pub unit_start: usize,
    /// One past the last unit computed.
    pub unit_end: usize,
}

/// Byte offsets of the fields of [`AttentionArgs`] (the emitters' view).
pub mod offsets {
    /// `q`.
    pub const Q: i32 = 0;
    /// `k`.
    pub const K: i32 = 8;
    /// `v`.
    pub const V: i32 = 16;
    /// `o`.
    pub const O: i32 = 24;
    /// `q_head`.
    pub const Q_HEAD: i32 = 32;
    /// `q_row`.
    pub const Q_ROW: i32 = 40;
    /// `k_head`.
    pub const K_HEAD: i32 = 48;
    /// `k_pos`.
    pub const K_POS: i32 = 56;
    /// `v_head`.
    pub const V_HEAD: i32 = 64;
    /// `v_pos`.
    pub const V_POS: i32 = 72;
    /// `o_head`.
    pub const O_HEAD: i32 = 80;
    /// `o_row`.
    pub const O_ROW: i32 = 88;
    /// `d`.
    pub const D: i32 = 96;
    /// `lq`.
    pub const LQ: i32 = 104;
    /// `lk`.
    pub const LK: i32 = 112;
    /// `heads`.
    pub const HEADS: i32 = 120;
    /// `group`.
    pub const GROUP: i32 = 128;
    /// `q_offset`.
    pub const Q_OFFSET: i32 = 136;
    /// `causal`.
    pub const CAUSAL: i32 = 144;
    /// `scale` (f32).
    pub const SCALE: i32 = 152;
    /// `kv_f16` (u32).
    pub const KV_F16: i32 = 156;
    /// `unit_start`.
    pub const UNIT_START: i32 = 160;
    /// `unit_end`.
    pub const UNIT_END: i32 = 168;
    /// The struct's size.
    pub const SIZE: usize = 176;
}

// SAFETY: `AttentionArgs` is the `#[repr(C)]` struct of every contract
// naming ARGS_NAME. A body reads q, k, v (never written by any body) and
// writes only the d outputs of each (head, row) pair of the units in
// `unit_start..unit_end` (it may keep partial sums there before the final
// division); `AttentionArgs::new` checks that distinct pairs' output rows
// are disjoint, so copies restricted to disjoint unit ranges write
// disjoint memory and may run at once.
unsafe impl KernelArgs for AttentionArgs {
    const NAME: &'static str = ARGS_NAME;

    fn range(&self) -> Range<u64> {
        self.unit_start as u64..self.unit_end as u64
    }

    fn restrict(&self, range: Range<u64>) -> Self {
        let end = (range.end as usize).min(self.unit_end);
        let start = (range.start as usize).clamp(self.unit_start, end);
        Self {
            unit_start: start,
            unit_end: end,
            ..*self
        }
    }
}

// SAFETY: plain data; the pointers are only dereferenced by a body called
// through `Kernel::call`, whose caller keeps them valid (see KernelArgs).
unsafe impl Send for AttentionArgs {}
// SAFETY: as for `Send`; a shared reference only lets threads copy it.
unsafe impl Sync for AttentionArgs {}

impl AttentionArgs {
    /// Arguments for every unit of `shape`, every extent checked: the
    /// shape against the contract, K and V of `shape.kv`'s type, each
    /// slice long enough for the strides, O's rows pairwise disjoint.
    pub fn new(
        shape: &AttentionShape,
        layout: &Layout,
        q: &[f32],
        k: KvSlice<'_>,
        v: KvSlice<'_>,
        o: &mut [f32],
    ) -> Result<Self, Refusal> {
        shape.check()?;
        for (name, s) in [("k", &k), ("v", &v)] {
            if s.kind() != shape.kv {
                return Err(bad(
                    name,
                    format!("{:?} elements, the shape says {:?}", s.kind(), shape.kv),
                ));
            }
        }
        let need = |name: &str, want: Option<usize>, have: usize| match want {
            Some(w) if w <= have => Ok(()),
            Some(w) => Err(bad(name, format!("{have} elements, the strides need {w}"))),
            None => Err(bad(name, "the strides overflow".into())),
        };
        need("q", layout.q_len(shape), q.len())?;
        need("k", layout.k_len(shape), k.len())?;
        need("v", layout.v_len(shape), v.len())?;
        need("o", layout.o_len(shape), o.len())?;
        // Every offset a body forms for a named element lies inside a
        // slice checked here, so no byte offset overflows isize.
        if !layout.o_rows_disjoint(shape) {
            return Err(bad(
                "o",
                format!(
                    "rows of {} elements with strides head {} row {} overlap",
                    shape.d, layout.o_head, layout.o_row
                ),
            ));
        }
        Ok(Self {
            q: q.as_ptr(),
            k: k.as_ptr(),
            v: v.as_ptr(),
            o: o.as_mut_ptr(),
            q_head: layout.q_head,
            q_row: layout.q_row,
            k_head: layout.k_head,
            k_pos: layout.k_pos,
            v_head: layout.v_head,
            v_pos: layout.v_pos,
            o_head: layout.o_head,
            o_row: layout.o_row,
            d: shape.d,
            lq: shape.lq,
            lk: shape.lk,
            heads: shape.heads,
            group: shape.group(),
            q_offset: shape.q_offset,
            causal: usize::from(shape.causal),
            scale: shape.scale,
            kv_f16: u32::from(shape.kv == KvType::F16),
            unit_start: 0,
            unit_end: shape.units().unwrap_or(0),
        })
    }

    /// The shape these arguments describe.
    pub fn shape(&self) -> AttentionShape {
        AttentionShape {
            d: self.d,
            lq: self.lq,
            lk: self.lk,
            heads: self.heads,
            kv_heads: self.heads / self.group.max(1),
            q_offset: self.q_offset,
            causal: self.causal != 0,
            scale: self.scale,
            kv: if self.kv_f16 != 0 {
                KvType::F16
            } else {
                KvType::F32
            },
        }
    }
}

/// The geometry of a fused (or chain) site.
pub fn geometry(
    d: u64,
    lq: u64,
    lk: u64,
    heads: u64,
    kv_heads: u64,
    causal: bool,
    kv: KvType,
) -> Geometry {
    Geometry::new()
        .with("d", d)
        .with("lq", lq)
        .with("lk", lk)
        .with("heads", heads)
        .with("kv_heads", kv_heads)
        .with("causal", u64::from(causal))
        .with("kv_f16", kv.flag())
}

/// What a body is specialised for, and the site's sizes for pricing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteShape {
    /// Head dimension.
    pub d: usize,
    /// K/V element type.
    pub kv: KvType,
    /// Query rows (pricing).
    pub lq: u64,
    /// Keys (pricing).
    pub lk: u64,
    /// Query heads.
    pub heads: u64,
    /// KV heads.
    pub kv_heads: u64,
    /// Causal mask.
    pub causal: bool,
}

impl SiteShape {
    /// Read and check a site's (or an offer's) geometry: `d`, `lq`, `lk`,
    /// `heads`, `kv_heads` required; `causal` and `kv_f16` default to 0.
    pub fn from_geometry(g: &Geometry) -> Result<SiteShape, Refusal> {
        let d = check_d(g.require("d")?)?;
        let lq = g.require("lq")?;
        let lk = g.require("lk")?;
        let heads = g.require("heads")?;
        let kv_heads = g.require("kv_heads")?;
        check_heads(heads, kv_heads)?;
        if lk == 0 {
            return Err(unsupported(
                "lk is 0: attention needs at least one key".into(),
            ));
        }
        if lq == 0 {
            return Err(unsupported("lq is 0".into()));
        }
        let flag = |name: &'static str| match g.get(name).unwrap_or(0) {
            0 => Ok(false),
            1 => Ok(true),
            x => Err(unsupported(format!("{name} is {x}, not 0 or 1"))),
        };
        let causal = flag("causal")?;
        let kv = if flag("kv_f16")? {
            KvType::F16
        } else {
            KvType::F32
        };
        Ok(SiteShape {
            d,
            kv,
            lq,
            lk,
            heads,
            kv_heads,
            causal,
        })
    }

    /// The geometry back.
    pub fn geometry(&self) -> Geometry {
        geometry(
            self.d as u64,
            self.lq,
            self.lk,
            self.heads,
            self.kv_heads,
            self.causal,
            self.kv,
        )
    }

    /// Member-view units at this site.
    pub fn units(&self) -> u64 {
        self.heads
            .saturating_mul(self.lq.div_ceil(ROW_BLOCK as u64))
    }

    /// Visible (row, key) pairs per head.
    pub fn pairs(&self) -> u64 {
        if self.causal {
            // Rows see 1..=lq keys when q_offset = lk - lq (prefill) or 0.
            let full = self.lq.min(self.lk);
            full * (full + 1) / 2 + (self.lq - full) * self.lk
        } else {
            self.lq.saturating_mul(self.lk)
        }
    }
}

/// The contract of the fused family at `site` (see the module docs).
pub fn contract(site: &SiteShape) -> Contract {
    Contract {
        family: FAMILY.to_owned(),
        geometry: site.geometry(),
        args: ARGS_NAME.to_owned(),
        arithmetic: ArithmeticContract {
            accumulator_lanes: BLOCK as u32,
            reduction: ReductionOrder::Strided {
                lanes: BLOCK as u32,
                fold: "dot: a[c mod 16] = fma(q[c], k[c], a) in c order; sum: l[k] = \
                       fma(l[k], alpha, p_k) per block position; both folded \
                       ((a0+a8)+(a4+a12)) pairs then (h0+h1)+(h2+h3)"
                    .to_owned(),
            },
            fma: FmaUse::AsSpecified,
            nan: NanRule::ByClass,
            notes: "online softmax over blocks of 16 keys: m' = max (any order), u = m' or +0 \
                    if -inf, alpha = E(m - u), p = E(s - u), o = o*alpha then \
                    o = fma(p_k, v_k, o) in key order, out = o / fold(l); E: the family's \
                    exp (fma Cody-Waite, degree-7 Horner, times 2^n, +0 below -87)"
                .to_owned(),
        },
        aliasing: Aliasing::disjoint(),
    }
}

/// The fused family as a planner registers it: the fused arm, every twin
/// (all ISAs) and their validation. The chain's stages are registered
/// separately by [`chain::entries`].
pub fn entry() -> weft_kernel::FamilyEntry {
    let mut twins: Vec<Arc<dyn weft_kernel::Twin>> = twin_x64::TWINS
        .iter()
        .map(|t| Arc::new(*t) as Arc<dyn weft_kernel::Twin>)
        .collect();
    twins.push(Arc::new(twin_a64::AttentionNeon));
    weft_kernel::FamilyEntry {
        family: weft_kernel::Family(FAMILY),
        arms: vec![weft_kernel::ArmEntry::new(
            Arc::new(arm::AttentionArm),
            twins,
            Arc::new(weft_validate::Checker(validation::AttentionValidation)),
            Some(Arc::new(validation::AttentionWorkbench)),
        )],
    }
}

/// Every attention family: the fused one ([`entry`]) and the chain's
/// seven stages ([`chain::entries`]).
pub fn entries() -> Vec<weft_kernel::FamilyEntry> {
    let mut v = vec![entry()];
    v.extend(chain::entries());
    v
}
