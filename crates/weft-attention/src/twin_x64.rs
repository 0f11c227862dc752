//! x64 twins of `attention.fused`: the arm's offer, the body emitted
//! through weft-x64 for one head dimension `d ≤ 256` and one K/V type.
//!
//! # Tiles
//!
//! Units are gathered into **tiles**: consecutive units of the call's range
//! with the same row block and the same KV head, at most [`MAX_PAIRS`]
//! (head, row) pairs. A prefill tile is 16 rows of one head; a decode tile
//! is a GQA group's heads. The tile walks its KV head's keys block by
//! block; for each block it builds a table of the 16 key and value row
//! pointers (binary16 rows are first widened into a stack buffer with
//! `vcvtph2ps`), then runs every pair of the tile on that block, so the
//! block's K and V bytes come from memory once per tile and from L1 for
//! the other pairs; the table pass also prefetches the rows 32 positions
//! ahead. Each pair's state (`m`, the 16 `l` lanes) and its `o`
//! accumulator live in 64-byte aligned stack slots; the output row is
//! written once, by the final division.
//! Absent keys point at the block's first row: their scores are replaced
//! by `-inf` and their values are never read.
//!
//! # The group step (AVX-512, decode)
//!
//! A tile whose pairs all see the same keys (a decode tile: one GQA
//! group's heads, or one head) and whose outputs fit zmm0–11 (at most
//! `GROUP_MAX_PAIRS` (4) pairs, `pairs · d/16 ≤ 12`) takes its full blocks
//! through `group_block_512` instead of the pair loop: binary32 K rows
//! addressed in place (no pointer tables, no masks, no software
//! prefetch), every pair's scores, then the pairs' softmaxes interleaved
//! step by step (their latency chains overlap; one exp serves all their
//! `α`, packed one pair per lane), then one pass over the value rows in
//! which each V chunk is loaded once for all pairs (`pairs · d/16`
//! independent FMA chains). For binary32 the step is software-pipelined:
//! block `b+1`'s scores and softmax come before block `b`'s output update
//! (its `p` and `α` wait in `FR_PIPE`), so the update's FMA chains run
//! while the next block's fold, maximum and exp resolve; a pending update
//! is flushed before any other kind of block and before the division.
//! The tail block (fewer than 16 keys) and every other tile take the
//! general path below. Why decode was slow before (measured, one core):
//! the per-block pointer tables with masks and prefetches were about half
//! the instructions of a one-head block, the `o` accumulators went through
//! possibly misaligned output rows each block (now aligned stack slots),
//! each pair's softmax ran alone (a chain of about 120 cycles: fold, max
//! butterfly, exp), and a GQA group's heads each loaded V again.
//!
//! # One pair, one block
//!
//! - [`Tier::Avx512`]: the q row in `d/16` zmm; 16 zmm accumulators, one
//!   per key (a zmm's 16 lanes are the contract's 16 lanes), `vfmadd231ps`
//!   with the K row as memory operand; the 16 folds at once by a
//!   transposing tree (`vshuff64x2` pairs lanes 8 apart, `vshuff32x4` 4
//!   apart, two rounds of `vshufps` neighbours: 30 shuffles and 15 adds,
//!   each add the contract's), accumulator `s` holding key
//!   `4·(s mod 4) + s/4` so the scores come out in key order; the masks,
//!   maximum (a butterfly of `vmaxps`), exp (`vscalefps` multiplies by
//!   `2^n` with one rounding, as the contract's `p · 2^n`), the `l` lanes
//!   and `o·α` on zmm; `p_k` broadcast by `vpermps` and `d/16` FMAs per
//!   key. Two pairs with full blocks go together: for `d ≤ 64` both q rows
//!   sit in registers and each K chunk is loaded once for both (eight keys
//!   at a time, each half folded to its level-3 vector), and both outputs
//!   take each V chunk from one load (twice the independent FMA chains).
//!   Measured on the prefill shape this step took the twin from 0.37 to
//!   about 0.5 of the register FMA peak.
//! - [`Tier::Avx2`]: the same on ymm pairs: four keys at a time (8
//!   accumulators, lanes 0–7 and 8–15), `vperm2f128` and two `vhaddps`
//!   rounds for the fold, key order again by placement, `2^n` by integer
//!   shift and add as in the reference, `vblendvps` for the absent-key mask.
//!
//! Every floating-point operation is one the contract names, in its order;
//! the maximum's order is free (module docs of the parent).
//!
//! Frame: SysV or Win64 ([`AttentionX64::with_abi`]); the argument pointer
//! lives in `rdi`; callee-saved registers are declared and saved by the
//! façade; the body aligns a stack frame of a few KiB (up to 23 KiB for
//! binary16 at `d = 128`) to 64 bytes and touches its pages top-down
//! first, as Windows' guard page requires.

use weft_kernel::{Feature, Isa, NativeCode, Offer, Refusal, Twin};
use weft_x64::iced_x86::code_asm::registers::{xmm, ymm, zmm};
use weft_x64::iced_x86::code_asm::{
    byte_ptr, dword_bcst, dword_ptr, eax, ecx, edx, k1, k2, k3, k4, k5, k6, k7, qword_ptr, r10,
    r10d, r11, r12, r13, r14, r15, r8, r9, r9d, rax, rbp, rbx, rcx, rdi, rdx, rsi, rsp,
    xmmword_ptr, ymmword_ptr, zmmword_ptr, AsmRegisterZmm, CodeLabel,
};
use weft_x64::regs::{XMM, YMM, ZMM};
use weft_x64::{Abi, Clobbers, EmitError, Emitter};

use super::{exp_consts, offsets, KvType, SiteShape, ARGS_NAME, FAMILY, MAX_TWIN_D_X64};

/// Which instruction set a twin is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// AVX2 + FMA + F16C, ymm registers.
    Avx2,
    /// AVX-512 F, zmm registers.
    Avx512,
}

/// One x64 twin of the fused arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttentionX64 {
    tier: Tier,
    abi: Abi,
}

/// Every x64 twin.
pub const TWINS: [AttentionX64; 2] = [
    AttentionX64::new(Tier::Avx2),
    AttentionX64::new(Tier::Avx512),
];

/// Rows ahead (log2) that the block's table pass prefetches K and V: the
/// hardware prefetchers alone left decode from L3 and DRAM waiting.
const PF_ROWS_LOG2: u32 = 5;

/// Most (head, row) pairs in one tile.
pub const MAX_PAIRS: usize = 32;

const AVX2_FEATURES: &[Feature] = &[Feature::Avx, Feature::Avx2, Feature::Fma, Feature::F16c];
const AVX512_FEATURES: &[Feature] = &[
    Feature::Avx,
    Feature::Avx2,
    Feature::Fma,
    Feature::F16c,
    Feature::Avx512f,
];

impl AttentionX64 {
    /// The twin of `tier` for the host's calling convention.
    pub const fn new(tier: Tier) -> Self {
        Self {
            tier,
            abi: Abi::host(),
        }
    }

    /// The same twin entered with `abi` (to test Win64 on Linux).
    pub const fn with_abi(self, abi: Abi) -> Self {
        Self { abi, ..self }
    }

    /// The tier.
    pub fn tier(&self) -> Tier {
        self.tier
    }

    /// The body for head dimension `d` and `kv`.
    pub fn body(&self, d: usize, kv: KvType) -> Result<weft_x64::Emitted, Refusal> {
        if d == 0 || !d.is_multiple_of(16) || d > MAX_TWIN_D_X64 {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!(
                    "{} serves head dimensions that are multiples of 16 up to {MAX_TWIN_D_X64}, not {d}",
                    self.name()
                ),
            });
        }
        emit(self.tier, d, kv, self.abi).map_err(|e| Refusal::EmitError {
            message: format!("{}: {e}", self.name()),
        })
    }
}

// SAFETY: the body reads Q, K, V and writes the output rows of the units
// in its range only, inside the extents AttentionArgs::new checks, uses
// its own stack frame, and returns normally (module docs); validation
// checks its results.
unsafe impl Twin for AttentionX64 {
    fn name(&self) -> &'static str {
        match self.tier {
            Tier::Avx2 => "attention.fused.twin.avx2",
            Tier::Avx512 => "attention.fused.twin.avx512",
        }
    }

    fn isa(&self) -> Isa {
        Isa::X86_64
    }

    fn requires(&self) -> &'static [Feature] {
        match self.tier {
            Tier::Avx2 => AVX2_FEATURES,
            Tier::Avx512 => AVX512_FEATURES,
        }
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        if offer.contract.family != FAMILY || offer.contract.args != ARGS_NAME {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!(
                    "{} serves {FAMILY} with {ARGS_NAME}, not {} with {}",
                    self.name(),
                    offer.contract.family,
                    offer.contract.args
                ),
            });
        }
        if let Some(p) = offer.packed.first() {
            return Err(Refusal::UnknownLayout {
                layout: p.layout.to_owned(),
            });
        }
        let s = SiteShape::from_geometry(&offer.contract.geometry)?;
        let emitted = self.body(s.d, s.kv)?;
        Ok(NativeCode {
            isa: Isa::X86_64,
            pool: None,
            bytes: emitted.bytes,
            loops: Vec::new(),
        })
    }
}

// ---------------------------------------------------------------- frame ---

/// Constant slots (32 bytes each: eight copies, or the first dword for
/// AVX-512 `{1to16}` broadcasts), by index.
mod c {
    pub const LO: usize = 0;
    pub const LOG2E: usize = 1;
    pub const MAGIC: usize = 2;
    pub const NEG_LN2_HI: usize = 3;
    pub const NEG_LN2_LO: usize = 4;
    /// `C_0` … `C_7` at `C0 + k`.
    pub const C0: usize = 5;
    pub const ONE_BITS: usize = 13;
    pub const NEG_INF: usize = 14;
    pub const SCALE: usize = 15;
    /// Lane indices 0..8 and 8..16 as i32 (AVX2's absent-key mask).
    pub const IDX_LO: usize = 16;
    pub const IDX_HI: usize = 17;
    pub const COUNT: usize = 18;
}

// Frame offsets from the 64-byte aligned rsp.
const FR_CONST: i32 = 0;
/// Lane-index vectors for `vpermps` broadcasts of `p_k` (AVX-512: 16
/// zmm of `k`; AVX2: 8 ymm of `k`). Broadcasting from registers, not
/// from a store of `p`: a 4-byte load from a vector store just made does
/// not forward and stalls (measured: 3× slower blocks).
const FR_IDX: i32 = 1024;
const FR_KPTR: i32 = FR_IDX + 1024;
const FR_VPTR: i32 = FR_KPTR + 128;
/// p and α of the first pair of a two-pair step (AVX-512).
const FR_SAVE: i32 = FR_VPTR + 128;
/// The group step's pending block (binary32 K/V): each pair's `p` and
/// `α` (128 bytes per pair, [`GROUP_MAX_PAIRS`] pairs).
const FR_PIPE: i32 = FR_SAVE + 128;
const FR_LOCAL: i32 = FR_PIPE + 128 * GROUP_MAX_PAIRS as i32;
const FR_PAIRS: i32 = FR_LOCAL + 128;
const FR_STATE: i32 = FR_PAIRS + 32 * MAX_PAIRS as i32;
/// Each pair's `o` accumulator (`4·d` bytes, 64-byte aligned): kept
/// here, not in the output row, so its per-block stores and loads are
/// aligned and forward (an output row need not be 64-byte aligned, and a
/// zmm store split across two lines does not forward to the next block's
/// load). The binary16 scratch follows ([`Body::kv_base`]).
const FR_OACC: i32 = FR_STATE + 128 * MAX_PAIRS as i32;

/// Locals (8 bytes each) at `FR_LOCAL + 8·index`.
mod local {
    pub const SAVED_RSP: i32 = 0;
    pub const ROW_BLOCKS: i32 = 1;
    pub const U: i32 = 2;
    pub const KH: i32 = 3;
    pub const VH: i32 = 4;
    pub const NMAX: i32 = 5;
    pub const NPAIRS: i32 = 6;
    pub const RB: i32 = 7;
    pub const G: i32 = 8;
    pub const I0: i32 = 9;
    pub const I1: i32 = 10;
    /// Pairs of a tile the AVX-512 group step serves, or 0.
    pub const FAST: i32 = 11;
    /// 1 when the group step left a block's output update pending.
    pub const PENDING: i32 = 12;
    /// The first V row of the pending block.
    pub const PEND_V: i32 = 13;
}

fn cslot(i: usize) -> i32 {
    FR_CONST + 32 * i as i32
}

fn loc(i: i32) -> weft_x64::iced_x86::code_asm::AsmMemoryOperand {
    qword_ptr(rsp + FR_LOCAL + 8 * i)
}

struct Body {
    tier: Tier,
    d: usize,
    kv: KvType,
}

impl Body {
    fn frame_bytes(&self) -> i32 {
        match self.kv {
            KvType::F32 => self.kv_base(),
            KvType::F16 => self.kv_base() + 2 * 16 * 4 * self.d as i32,
        }
    }
    /// The binary16 scratch, after the pairs' accumulators.
    fn kv_base(&self) -> i32 {
        FR_OACC + MAX_PAIRS as i32 * self.row_bytes()
    }
    /// Bytes of a widened K or V row in the f16 scratch.
    fn row_bytes(&self) -> i32 {
        4 * self.d as i32
    }
}

type R = Result<(), EmitError>;

fn emit(tier: Tier, d: usize, kv: KvType, abi: Abi) -> Result<weft_x64::Emitted, EmitError> {
    let body = Body { tier, d, kv };
    let mut e = Emitter::new(abi)?;
    let mut clobbers = Clobbers::none()
        .with(rdi)
        .with(rsi)
        .with(rbx)
        .with(rbp)
        .with(r12)
        .with(r13)
        .with(r14)
        .with(r15);
    for z in ZMM {
        clobbers = clobbers.with(z);
    }
    e.prologue(clobbers)?;
    if e.args_reg() != rdi {
        let from = e.args_reg();
        e.asm().mov(rdi, from)?;
    }
    frame_enter(&mut e, &body)?;
    constants(&mut e)?;
    tiles(&mut e, &body)?;
    e.asm().mov(rsp, loc(local::SAVED_RSP))?;
    e.epilogue()?;
    e.finish()
}

/// Reserve and align the frame, touching its pages top-down.
fn frame_enter(e: &mut Emitter, b: &Body) -> R {
    let bytes = b.frame_bytes() + 64;
    let a = e.asm();
    a.mov(rax, rsp)?;
    a.sub(rsp, bytes)?;
    let mut page = 4096;
    while page < bytes {
        a.mov(byte_ptr(rax - page), 0)?;
        page += 4096;
    }
    a.and(rsp, -64)?;
    a.mov(byte_ptr(rsp), 0)?;
    a.mov(loc(local::SAVED_RSP), rax)?;
    Ok(())
}

/// The constant slots, eight copies each.
fn constants(e: &mut Emitter) -> R {
    let mut vals = [0u32; c::COUNT];
    vals[c::LO] = exp_consts::LO;
    vals[c::LOG2E] = exp_consts::LOG2E;
    vals[c::MAGIC] = exp_consts::MAGIC;
    vals[c::NEG_LN2_HI] = exp_consts::NEG_LN2_HI;
    vals[c::NEG_LN2_LO] = exp_consts::NEG_LN2_LO;
    for (k, v) in exp_consts::C.iter().enumerate() {
        vals[c::C0 + k] = *v;
    }
    vals[c::ONE_BITS] = exp_consts::ONE_BITS;
    vals[c::NEG_INF] = f32::NEG_INFINITY.to_bits();
    for (i, v) in vals.iter().enumerate() {
        if i == c::SCALE || i == c::IDX_LO || i == c::IDX_HI {
            continue;
        }
        e.broadcast_i32(ymm::ymm0, *v as i32)?;
        e.asm().vmovaps(ymmword_ptr(rsp + cslot(i)), ymm::ymm0)?;
    }
    for k in 0..16 {
        e.broadcast_i32(ymm::ymm0, k)?;
        let a = e.asm();
        a.vmovaps(ymmword_ptr(rsp + FR_IDX + 64 * k), ymm::ymm0)?;
        a.vmovaps(ymmword_ptr(rsp + FR_IDX + 64 * k + 32), ymm::ymm0)?;
    }
    let a = e.asm();
    a.vbroadcastss(ymm::ymm0, dword_ptr(rdi + offsets::SCALE))?;
    a.vmovaps(ymmword_ptr(rsp + cslot(c::SCALE)), ymm::ymm0)?;
    for k in 0..8 {
        a.mov(dword_ptr(rsp + cslot(c::IDX_LO) + 4 * k), k)?;
        a.mov(dword_ptr(rsp + cslot(c::IDX_HI) + 4 * k), k + 8)?;
    }
    Ok(())
}

fn label(e: &mut Emitter) -> CodeLabel {
    e.create_label()
}

/// The unit → tile → block → pair loops.
fn tiles(e: &mut Emitter, b: &Body) -> R {
    let mut tile_top = label(e);
    let mut add_unit = label(e);
    let mut row_loop = label(e);
    let mut unit_done = label(e);
    let mut process = label(e);
    let mut done = label(e);
    let mut init_loop = label(e);
    let mut init_done = label(e);
    let mut block_loop = label(e);
    let mut pair_loop = label(e);
    let mut pair_next = label(e);
    let mut block_next = label(e);
    let mut finalize = label(e);
    let mut fin_loop = label(e);
    let mut causal_done = label(e);
    let mut end_blocks = label(e);
    let mut flush = label(e);
    // The group step defers binary32 blocks' output updates.
    let pipelined = b.kv == KvType::F32 && group_pairs_512(b).is_some();
    let es = b.kv.bytes().trailing_zeros();

    let a = e.asm();
    a.mov(rax, qword_ptr(rdi + offsets::LQ))?;
    a.add(rax, 15)?;
    a.shr(rax, 4)?;
    a.mov(loc(local::ROW_BLOCKS), rax)?;
    a.mov(rax, qword_ptr(rdi + offsets::UNIT_START))?;
    a.mov(loc(local::U), rax)?;

    // tile_top: start a tile at unit U.
    e.set_label(&mut tile_top)?;
    let a = e.asm();
    a.mov(rax, loc(local::U))?;
    a.cmp(rax, qword_ptr(rdi + offsets::UNIT_END))?;
    a.jae(done)?;
    a.xor(edx, edx)?;
    a.div(loc(local::ROW_BLOCKS))?;
    a.mov(loc(local::RB), rdx)?;
    a.mov(r8, rax)?;
    a.xor(edx, edx)?;
    a.div(qword_ptr(rdi + offsets::GROUP))?;
    a.mov(loc(local::G), rax)?;
    a.mov(rcx, loc(local::RB))?;
    a.shl(rcx, 4)?;
    a.mov(loc(local::I0), rcx)?;
    a.lea(rdx, rcx + 16)?;
    a.cmp(rdx, qword_ptr(rdi + offsets::LQ))?;
    a.cmova(rdx, qword_ptr(rdi + offsets::LQ))?;
    a.mov(loc(local::I1), rdx)?;
    a.xor(r12, r12)?;
    a.xor(r13, r13)?;
    // r15: the fewest keys a pair of the tile sees (starts at u64::MAX).
    a.xor(r15, r15)?;
    a.not(r15)?;

    // add_unit: the pairs of unit U (head r8).
    e.set_label(&mut add_unit)?;
    let a = e.asm();
    a.mov(rax, r8)?;
    a.imul_2(rax, qword_ptr(rdi + offsets::Q_HEAD))?;
    a.shl(rax, 2)?;
    a.add(rax, qword_ptr(rdi + offsets::Q))?;
    a.mov(r9, rax)?;
    a.mov(rax, r8)?;
    a.imul_2(rax, qword_ptr(rdi + offsets::O_HEAD))?;
    a.shl(rax, 2)?;
    a.add(rax, qword_ptr(rdi + offsets::O))?;
    a.mov(r10, rax)?;
    a.mov(rcx, loc(local::I0))?;
    e.set_label(&mut row_loop)?;
    let a = e.asm();
    a.cmp(rcx, loc(local::I1))?;
    a.jae(unit_done)?;
    a.mov(rsi, r12)?;
    a.shl(rsi, 5)?;
    a.lea(rsi, rsp + rsi + FR_PAIRS)?;
    a.mov(rax, rcx)?;
    a.imul_2(rax, qword_ptr(rdi + offsets::Q_ROW))?;
    a.lea(rax, r9 + rax * 4)?;
    a.mov(qword_ptr(rsi), rax)?;
    a.mov(rax, rcx)?;
    a.imul_2(rax, qword_ptr(rdi + offsets::O_ROW))?;
    a.lea(rax, r10 + rax * 4)?;
    a.mov(qword_ptr(rsi + 24), rax)?;
    a.imul_3(rax, r12, b.row_bytes())?;
    a.lea(rax, rsp + rax + FR_OACC)?;
    a.mov(qword_ptr(rsi + 8), rax)?;
    a.mov(rax, qword_ptr(rdi + offsets::LK))?;
    a.cmp(qword_ptr(rdi + offsets::CAUSAL), 0)?;
    a.je(causal_done)?;
    a.mov(rdx, qword_ptr(rdi + offsets::Q_OFFSET))?;
    a.lea(rdx, rdx + rcx + 1)?;
    a.cmp(rdx, rax)?;
    a.cmovb(rax, rdx)?;
    e.set_label(&mut causal_done)?;
    let a = e.asm();
    a.mov(qword_ptr(rsi + 16), rax)?;
    a.cmp(rax, r13)?;
    a.cmova(r13, rax)?;
    a.cmp(rax, r15)?;
    a.cmovb(r15, rax)?;
    a.inc(r12)?;
    a.inc(rcx)?;
    a.jmp(row_loop)?;

    // unit_done: does the next unit join this tile?
    e.set_label(&mut unit_done)?;
    let a = e.asm();
    a.mov(rax, loc(local::U))?;
    a.inc(rax)?;
    a.mov(loc(local::U), rax)?;
    a.cmp(rax, qword_ptr(rdi + offsets::UNIT_END))?;
    a.jae(process)?;
    a.xor(edx, edx)?;
    a.div(loc(local::ROW_BLOCKS))?;
    a.cmp(rdx, loc(local::RB))?;
    a.jne(process)?;
    a.mov(r8, rax)?;
    a.xor(edx, edx)?;
    a.div(qword_ptr(rdi + offsets::GROUP))?;
    a.cmp(rax, loc(local::G))?;
    a.jne(process)?;
    a.mov(rax, loc(local::I1))?;
    a.sub(rax, loc(local::I0))?;
    a.add(rax, r12)?;
    a.cmp(rax, MAX_PAIRS as i32)?;
    a.ja(process)?;
    a.jmp(add_unit)?;

    // process: the tile's KV head, fresh states, then the blocks.
    e.set_label(&mut process)?;
    let a = e.asm();
    a.mov(loc(local::NPAIRS), r12)?;
    a.mov(loc(local::NMAX), r13)?;
    // FAST = pairs when every pair sees the same keys and the group step
    // holds them (AVX-512), else 0.
    a.xor(eax, eax)?;
    if let Some(pmax) = group_pairs_512(b) {
        a.cmp(r15, r13)?;
        a.cmove(rax, r12)?;
        a.xor(ecx, ecx)?;
        a.cmp(r12, pmax as i32)?;
        a.cmova(rax, rcx)?;
    }
    a.mov(loc(local::FAST), rax)?;
    a.mov(loc(local::PENDING), 0)?;
    a.mov(rax, loc(local::G))?;
    a.imul_2(rax, qword_ptr(rdi + offsets::K_HEAD))?;
    a.shl(rax, es)?;
    a.add(rax, qword_ptr(rdi + offsets::K))?;
    a.mov(loc(local::KH), rax)?;
    a.mov(rax, loc(local::G))?;
    a.imul_2(rax, qword_ptr(rdi + offsets::V_HEAD))?;
    a.shl(rax, es)?;
    a.add(rax, qword_ptr(rdi + offsets::V))?;
    a.mov(loc(local::VH), rax)?;
    a.vxorps(ymm::ymm0, ymm::ymm0, ymm::ymm0)?;
    a.xor(ebx_(), ebx_())?;
    e.set_label(&mut init_loop)?;
    let a = e.asm();
    a.cmp(rbx, loc(local::NPAIRS))?;
    a.jae(init_done)?;
    a.mov(rsi, rbx)?;
    a.shl(rsi, 7)?;
    a.lea(rsi, rsp + rsi + FR_STATE)?;
    // Zeros in the widths the blocks load them with (a wide load from two
    // narrower stores does not forward).
    match b.tier {
        Tier::Avx512 => a.vmovaps(zmmword_ptr(rsi), zmm::zmm0)?,
        Tier::Avx2 => {
            a.vmovaps(ymmword_ptr(rsi), ymm::ymm0)?;
            a.vmovaps(ymmword_ptr(rsi + 32), ymm::ymm0)?;
        }
    }
    a.mov(dword_ptr(rsi + 64), f32::NEG_INFINITY.to_bits())?;
    a.mov(rsi, rbx)?;
    a.shl(rsi, 5)?;
    a.mov(rax, qword_ptr(rsp + rsi + FR_PAIRS + 8))?;
    match b.tier {
        Tier::Avx512 => {
            for m in 0..b.d / 16 {
                a.vmovups(zmmword_ptr(rax + 64 * m as i32), zmm::zmm0)?;
            }
        }
        Tier::Avx2 => {
            for m in 0..b.d / 8 {
                a.vmovups(ymmword_ptr(rax + 32 * m as i32), ymm::ymm0)?;
            }
        }
    }
    a.inc(rbx)?;
    a.jmp(init_loop)?;
    e.set_label(&mut init_done)?;
    e.asm().xor(r14, r14)?;

    // block_loop: keys r14 .. r14 + 16.
    e.set_label(&mut block_loop)?;
    let a = e.asm();
    a.cmp(r14, loc(local::NMAX))?;
    a.jae(if pipelined { end_blocks } else { finalize })?;
    a.mov(r15, loc(local::NMAX))?;
    a.sub(r15, r14)?;
    a.mov(eax, 16)?;
    a.cmp(r15, rax)?;
    a.cmova(r15, rax)?;
    if let Some(pmax) = group_pairs_512(b) {
        // A full block of a tile whose pairs all see it whole: the group step.
        let mut slow = label(e);
        let mut entries: Vec<CodeLabel> = (0..pmax).map(|_| label(e)).collect();
        let a = e.asm();
        a.cmp(r15, 16)?;
        a.jne(slow)?;
        a.mov(rax, loc(local::FAST))?;
        for (p, l) in entries.iter().enumerate() {
            a.cmp(rax, p as i32 + 1)?;
            a.je(*l)?;
        }
        a.jmp(slow)?;
        for (p, l) in entries.iter_mut().enumerate() {
            e.set_label(l)?;
            group_block_512(e, b, p + 1)?;
            e.asm().jmp(block_next)?;
        }
        e.set_label(&mut slow)?;
        if pipelined {
            // Another kind of block: the pending update first.
            let a = e.asm();
            a.cmp(loc(local::PENDING), 0)?;
            a.jne(flush)?;
        }
    }
    row_tables(e, b)?;
    e.asm().xor(ebx_(), ebx_())?;
    e.set_label(&mut pair_loop)?;
    let a = e.asm();
    a.cmp(rbx, loc(local::NPAIRS))?;
    a.jae(block_next)?;
    a.mov(rsi, rbx)?;
    a.shl(rsi, 5)?;
    a.lea(rsi, rsp + rsi + FR_PAIRS)?;
    if b.tier == Tier::Avx512 && b.d / 16 <= Q_REGS {
        // (Two pairs' outputs are 2 · d/16 zmm: at most 16.)
        two_pairs_512(e, b, pair_loop)?;
    }
    let a = e.asm();
    a.mov(rdx, qword_ptr(rsi + 16))?;
    a.sub(rdx, r14)?;
    a.jbe(pair_next)?;
    a.mov(eax, 16)?;
    a.cmp(rdx, rax)?;
    a.cmova(rdx, rax)?;
    a.mov(rax, qword_ptr(rsi))?;
    a.mov(r11, qword_ptr(rsi + 8))?;
    a.mov(r8, rbx)?;
    a.shl(r8, 7)?;
    a.lea(r8, rsp + r8 + FR_STATE)?;
    match b.tier {
        Tier::Avx512 => pair_block_512(e, b)?,
        Tier::Avx2 => pair_block_256(e, b, pair_next)?,
    }
    e.set_label(&mut pair_next)?;
    let a = e.asm();
    a.inc(rbx)?;
    a.jmp(pair_loop)?;
    e.set_label(&mut block_next)?;
    let a = e.asm();
    a.add(r14, 16)?;
    a.jmp(block_loop)?;

    if pipelined {
        e.set_label(&mut end_blocks)?;
        let a = e.asm();
        a.cmp(loc(local::PENDING), 0)?;
        a.jne(flush)?;
    }
    // finalize: every pair's O = o / fold(l).
    e.set_label(&mut finalize)?;
    e.asm().xor(ebx_(), ebx_())?;
    e.set_label(&mut fin_loop)?;
    let a = e.asm();
    a.cmp(rbx, loc(local::NPAIRS))?;
    a.jae(tile_top)?;
    a.mov(r8, rbx)?;
    a.shl(r8, 7)?;
    a.lea(r8, rsp + r8 + FR_STATE)?;
    a.mov(rsi, rbx)?;
    a.shl(rsi, 5)?;
    a.mov(r11, qword_ptr(rsp + rsi + FR_PAIRS + 8))?;
    a.mov(rdx, qword_ptr(rsp + rsi + FR_PAIRS + 24))?;
    // t8 = l[0..8] + l[8..16]; t4 = t8 lo + hi; two neighbour rounds.
    a.vmovaps(ymm::ymm0, ymmword_ptr(r8))?;
    a.vaddps(ymm::ymm0, ymm::ymm0, ymmword_ptr(r8 + 32))?;
    a.vextractf128(xmm::xmm1, ymm::ymm0, 1)?;
    a.vaddps(xmm::xmm0, xmm::xmm0, xmm::xmm1)?;
    a.vhaddps(xmm::xmm0, xmm::xmm0, xmm::xmm0)?;
    a.vhaddps(xmm::xmm0, xmm::xmm0, xmm::xmm0)?;
    a.vbroadcastss(ymm::ymm0, xmm::xmm0)?;
    for m in 0..b.d / 8 {
        let at = 32 * m as i32;
        a.vmovups(ymm::ymm1, ymmword_ptr(r11 + at))?;
        a.vdivps(ymm::ymm1, ymm::ymm1, ymm::ymm0)?;
        a.vmovups(ymmword_ptr(rdx + at), ymm::ymm1)?;
    }
    a.inc(rbx)?;
    a.jmp(fin_loop)?;

    if let (true, Some(pmax)) = (pipelined, group_pairs_512(b)) {
        // flush: the pending block's output update, then back to the loop.
        e.set_label(&mut flush)?;
        let mut entries: Vec<CodeLabel> = (0..pmax).map(|_| label(e)).collect();
        let a = e.asm();
        a.mov(rax, loc(local::FAST))?;
        for (p, l) in entries.iter().enumerate() {
            a.cmp(rax, p as i32 + 1)?;
            a.je(*l)?;
        }
        a.ud2()?; // FAST is 1..=pmax whenever a block is pending
        for (p, l) in entries.iter_mut().enumerate() {
            e.set_label(l)?;
            group_pv_512(e, b, p + 1, PvFrom::Pipe)?;
            let a = e.asm();
            a.mov(loc(local::PENDING), 0)?;
            a.jmp(block_loop)?;
        }
    }
    e.set_label(&mut done)?;
    Ok(())
}

fn ebx_() -> weft_x64::iced_x86::code_asm::AsmRegister32 {
    weft_x64::iced_x86::code_asm::ebx
}

/// The block's key and value row pointers (r15 = present rows of the
/// tile, r14 = first key); binary16 rows widened into the scratch first.
fn row_tables(e: &mut Emitter, b: &Body) -> R {
    match b.kv {
        KvType::F32 => {
            let a = e.asm();
            a.mov(rax, qword_ptr(rdi + offsets::K_POS))?;
            a.shl(rax, 2)?;
            a.mov(r11, rax)?;
            a.imul_2(rax, r14)?;
            a.add(rax, loc(local::KH))?;
            a.mov(r9, rax)?;
            a.mov(rax, qword_ptr(rdi + offsets::V_POS))?;
            a.shl(rax, 2)?;
            a.mov(rcx, rax)?;
            a.imul_2(rax, r14)?;
            a.add(rax, loc(local::VH))?;
            a.mov(r10, rax)?;
            a.mov(rdx, r9)?;
            a.mov(rsi, r10)?;
            a.mov(r12, r11)?;
            a.shl(r12, PF_ROWS_LOG2)?;
            a.mov(r13, rcx)?;
            a.shl(r13, PF_ROWS_LOG2)?;
            for k in 0..16 {
                a.mov(rax, r9)?;
                a.cmp(r15, k)?;
                a.cmova(rax, rdx)?;
                a.mov(qword_ptr(rsp + FR_KPTR + 8 * k), rax)?;
                a.mov(rax, r10)?;
                a.cmova(rax, rsi)?;
                a.mov(qword_ptr(rsp + FR_VPTR + 8 * k), rax)?;
                for line in (0..4 * b.d as i32).step_by(64) {
                    a.prefetcht0(byte_ptr(rdx + r12 + line))?;
                    a.prefetcht0(byte_ptr(rsi + r13 + line))?;
                }
                a.add(rdx, r11)?;
                a.add(rsi, rcx)?;
            }
        }
        KvType::F16 => {
            let rows = b.row_bytes();
            let fr_kv = b.kv_base();
            let vbase = fr_kv + 16 * rows;
            let a = e.asm();
            for k in 0..16 {
                // Absent rows point at row 0 (present whenever the block is).
                a.lea(rax, rsp + fr_kv)?;
                a.lea(rdx, rsp + fr_kv + k * rows)?;
                a.cmp(r15, k)?;
                a.cmova(rax, rdx)?;
                a.mov(qword_ptr(rsp + FR_KPTR + 8 * k), rax)?;
                a.lea(rax, rsp + vbase)?;
                a.lea(rdx, rsp + vbase + k * rows)?;
                a.cmova(rax, rdx)?;
                a.mov(qword_ptr(rsp + FR_VPTR + 8 * k), rax)?;
            }
            // Widen rows 0..r15 of K and V into the scratch.
            a.mov(rax, qword_ptr(rdi + offsets::K_POS))?;
            a.add(rax, rax)?;
            a.mov(r11, rax)?;
            a.imul_2(rax, r14)?;
            a.add(rax, loc(local::KH))?;
            a.mov(r9, rax)?;
            a.mov(rax, qword_ptr(rdi + offsets::V_POS))?;
            a.add(rax, rax)?;
            a.mov(rcx, rax)?;
            a.imul_2(rax, r14)?;
            a.add(rax, loc(local::VH))?;
            a.mov(r10, rax)?;
            a.lea(rdx, rsp + fr_kv)?;
            a.mov(rsi, r15)?;
            a.mov(r12, r11)?;
            a.shl(r12, PF_ROWS_LOG2)?;
            a.mov(r13, rcx)?;
            a.shl(r13, PF_ROWS_LOG2)?;
            let mut top = e.create_label();
            e.set_label(&mut top)?;
            for (src, dst_off, stride, pf) in [(r9, 0, r11, r12), (r10, 16 * rows, rcx, r13)] {
                let a = e.asm();
                for line in (0..2 * b.d as i32).step_by(64) {
                    a.prefetcht0(byte_ptr(src + pf + line))?;
                }
                match b.tier {
                    Tier::Avx512 => {
                        for m in 0..b.d / 16 {
                            let m = m as i32;
                            a.vcvtph2ps(zmm::zmm0, ymmword_ptr(src + 32 * m))?;
                            a.vmovaps(zmmword_ptr(rdx + dst_off + 64 * m), zmm::zmm0)?;
                        }
                    }
                    Tier::Avx2 => {
                        for m in 0..b.d / 8 {
                            let m = m as i32;
                            a.vcvtph2ps(ymm::ymm0, xmmword_ptr(src + 16 * m))?;
                            a.vmovaps(ymmword_ptr(rdx + dst_off + 32 * m), ymm::ymm0)?;
                        }
                    }
                }
                a.add(src, stride)?;
            }
            let a = e.asm();
            a.add(rdx, rows)?;
            a.dec(rsi)?;
            a.jne(top)?;
        }
    }
    Ok(())
}

// -------------------------------------------------------------- AVX-512 ---

/// Slot `s` of the 16-key fold holds key `4·(s mod 4) + s/4`.
fn key_of_slot_512(s: usize) -> usize {
    4 * (s % 4) + s / 4
}

/// `E(x)` in place on zmm `x`; `t1`, `t2`, `t3` scratch, zmm31 = MAGIC.
fn exp_512(e: &mut Emitter, x: usize, t1: usize, t2: usize, t3: usize) -> R {
    exp_multi_512(e, &[[x, t1, t2, t3]], &[k4])
}

/// `z{k}` (merge masking) for opmask `k` in k1–k7.
fn masked(z: AsmRegisterZmm, k: weft_x64::iced_x86::code_asm::AsmRegisterK) -> AsmRegisterZmm {
    [z.k1(), z.k2(), z.k3(), z.k4(), z.k5(), z.k6(), z.k7()]
        .into_iter()
        .zip([k1, k2, k3, k4, k5, k6, k7])
        .find(|(_, m)| *m == k)
        .map_or(z, |(zk, _)| zk)
}

/// `E` in place on several zmm at once, step by step across them so their
/// latency chains overlap: `regs[i] = [x, t1, t2, t3]` (zmm indices, `t`
/// scratch), `masks[i]` scratch; zmm31 = MAGIC.
fn exp_multi_512(
    e: &mut Emitter,
    regs: &[[usize; 4]],
    masks: &[weft_x64::iced_x86::code_asm::AsmRegisterK],
) -> R {
    let magic = ZMM[31];
    let bc = |i: usize| dword_bcst(rsp + cslot(i));
    let a = e.asm();
    let z = |i: usize, j: usize| ZMM[regs[i][j]];
    let n = regs.len();
    for (i, mk) in masks.iter().enumerate().take(n) {
        a.vcmpps(*mk, z(i, 0), bc(c::LO), 1)?; // x < LO (ordered)
    }
    for i in 0..n {
        a.vmovaps(z(i, 1), z(i, 0))?;
        a.vfmadd132ps(z(i, 1), magic, bc(c::LOG2E))?; // t = x·LOG2E + MAGIC
    }
    for i in 0..n {
        a.vsubps(z(i, 2), z(i, 1), magic)?; // n
        a.vmovaps(z(i, 3), z(i, 0))?;
    }
    for i in 0..n {
        a.vfmadd231ps(z(i, 3), z(i, 2), bc(c::NEG_LN2_HI))?; // r = n·(-ln2_hi) + x
    }
    for i in 0..n {
        a.vfmadd231ps(z(i, 3), z(i, 2), bc(c::NEG_LN2_LO))?; // r = n·(-ln2_lo) + r
        a.vbroadcastss(z(i, 0), dword_ptr(rsp + cslot(c::C0 + 7)))?;
    }
    for k in (0..7).rev() {
        for i in 0..n {
            a.vfmadd213ps(z(i, 0), z(i, 3), bc(c::C0 + k))?; // p = p·r + C_k
        }
    }
    for i in 0..n {
        a.vscalefps(z(i, 0), z(i, 0), z(i, 2))?; // p · 2^n, one rounding
    }
    for (i, mk) in masks.iter().enumerate().take(n) {
        a.vpxord(masked(z(i, 0), *mk), z(i, 0), z(i, 0))?; // +0 where x < LO
    }
    Ok(())
}

/// The softmax of a full block for every pair of a group step at once,
/// each step emitted for all pairs in turn so their latency chains overlap
/// (the operations per pair are [`softmax_512`]'s without the absent-key
/// mask). Scores in zmm20+ become `p`; `α` lands in zmm16+; the pairs'
/// `m` and `l` slots are updated. The `α` arguments, equal across lanes,
/// are packed one pair per lane so one exp serves them all. Uses zmm0–15
/// and zmm24–31 as scratch.
fn softmax_group_512(e: &mut Emitter, pairs: usize) -> R {
    let s = |p: usize| ZMM[20 + p];
    let t = |p: usize, i: usize| ZMM[4 * p + i];
    let st = |p: usize| FR_STATE + 128 * p as i32;
    let masks = [k1, k2, k3, k4, k5];
    let packed = 24;
    let a = e.asm();
    a.vbroadcastss(ZMM[31], dword_ptr(rsp + cslot(c::MAGIC)))?;
    for p in 0..pairs {
        a.vmulps(s(p), s(p), dword_bcst(rsp + cslot(c::SCALE)))?;
    }
    // Block maximum in every lane (butterfly).
    for p in 0..pairs {
        a.vshuff64x2(t(p, 0), s(p), s(p), 0x4e)?;
        a.vmaxps(t(p, 0), s(p), t(p, 0))?;
    }
    for p in 0..pairs {
        a.vshuff32x4(t(p, 1), t(p, 0), t(p, 0), 0xb1)?;
        a.vmaxps(t(p, 0), t(p, 0), t(p, 1))?;
    }
    for p in 0..pairs {
        a.vpermilps(t(p, 1), t(p, 0), 0x4e)?;
        a.vmaxps(t(p, 0), t(p, 0), t(p, 1))?;
    }
    for p in 0..pairs {
        a.vpermilps(t(p, 1), t(p, 0), 0xb1)?;
        a.vmaxps(t(p, 0), t(p, 0), t(p, 1))?;
    }
    // m' = max(m, bm); u = m' or +0 when -inf.
    for p in 0..pairs {
        a.vbroadcastss(t(p, 1), dword_ptr(rsp + st(p) + 64))?;
        a.vmaxps(t(p, 2), t(p, 1), t(p, 0))?;
    }
    for p in 0..pairs {
        a.evex()
            .vmovss(dword_ptr(rsp + st(p) + 64), XMM[4 * p + 2])?;
        a.vcmpps(masks[p], t(p, 2), dword_bcst(rsp + cslot(c::NEG_INF)), 0)?;
    }
    for (p, mk) in masks.iter().enumerate().take(pairs) {
        a.vpxord(masked(t(p, 2), *mk), t(p, 2), t(p, 2))?;
    }
    // α arguments m - u (packed, lane p), p arguments s - u.
    for p in 0..pairs {
        a.vsubps(t(p, 1), t(p, 1), t(p, 2))?;
        a.vsubps(s(p), s(p), t(p, 2))?;
    }
    a.vmovaps(ZMM[packed], t(0, 1))?;
    for p in 1..pairs {
        a.mov(eax, 1 << p)?;
        a.kmovw(k6, eax)?;
        a.vmovaps(ZMM[packed].k6(), t(p, 1))?;
    }
    let mut regs: Vec<[usize; 4]> = (0..pairs)
        .map(|p| [20 + p, 4 * p, 4 * p + 1, 4 * p + 3])
        .collect();
    regs.push([packed, 25, 26, 27]);
    exp_multi_512(e, &regs, &masks[..=pairs])?;
    let a = e.asm();
    // α_p = lane p of the packed exp; l = l·α + p.
    for p in 0..pairs {
        a.vmovaps(t(p, 0), zmmword_ptr(rsp + FR_IDX + 64 * p as i32))?;
        a.vpermps(ZMM[16 + p], t(p, 0), ZMM[packed])?;
    }
    for p in 0..pairs {
        a.vmovaps(t(p, 1), zmmword_ptr(rsp + st(p)))?;
        a.vfmadd213ps(t(p, 1), ZMM[16 + p], s(p))?;
        a.vmovaps(zmmword_ptr(rsp + st(p)), t(p, 1))?;
    }
    Ok(())
}

/// Most pairs the AVX-512 group step serves at head dimension `d` (their
/// outputs, `pairs · d/16` zmm, live in zmm0–11 through a block, and a q
/// row in zmm0–7 while the scores are made), or `None`: for AVX2, and for
/// `d > 128`, which takes the pair path.
fn group_pairs_512(b: &Body) -> Option<usize> {
    (b.tier == Tier::Avx512 && b.d / 16 <= Q_REGS)
        .then(|| (12 / (b.d / 16)).clamp(1, GROUP_MAX_PAIRS))
}

/// zmm registers a q row may hold while the scores are made (zmm0–7;
/// the 16 score accumulators are zmm8–23). A wider row is taken in
/// halves of this many chunks.
const Q_REGS: usize = 8;

/// Most pairs of the group step (a GQA group of SmolLM2 is 3).
const GROUP_MAX_PAIRS: usize = 4;

/// Key `key` of the block, byte `at` of its row, as [`group_scores_512`]
/// addresses it in place.
fn k_row(key: usize, at: i32) -> weft_x64::iced_x86::code_asm::AsmMemoryOperand {
    let base = [r9, r10, r12, r13][key % 4];
    match key / 4 {
        0 => qword_ptr(base + at),
        1 => qword_ptr(base + r11 * 4 + at),
        2 => qword_ptr(base + r11 * 8 + at),
        _ => qword_ptr(base + rcx * 4 + at),
    }
}

/// Where the group step's output update finds `p`, `α` and the V rows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PvFrom {
    /// `p` in zmm20+, `α` in zmm16+, V rows from the pointer table.
    Regs,
    /// The pending block: `p` and `α` in the `FR_PIPE` slots, V rows
    /// from `PEND_V` by the position stride (binary32 only).
    Pipe,
}

/// A full block for the `pairs` pairs of a tile that all see it whole (a
/// decode tile: one GQA group's heads). Binary16: scores and softmax
/// ([`group_scores_512`]) then the output update ([`group_pv_512`]).
/// Binary32 is software-pipelined: this block's scores and softmax, then
/// the *previous* full block's output update (its `p` and `α` saved in
/// `FR_PIPE`), then this block's `p` and `α` saved in its place; the
/// update's FMA chains run while this block's fold, maximum and exp
/// latencies resolve. The pending update is flushed before any other block
/// and before the final division (see [`tiles`]). Per output element the
/// operations and their order are the contract's either way.
fn group_block_512(e: &mut Emitter, b: &Body, pairs: usize) -> R {
    group_scores_512(e, b, pairs)?;
    if b.kv == KvType::F16 {
        return group_pv_512(e, b, pairs, PvFrom::Regs);
    }
    // α out of the PV registers' way (zmm12–17 hold V chunks for pairs ≥ 2).
    let alpha_keep = [ZMM[18], ZMM[19], ZMM[29], ZMM[30]];
    let mut no_pending = e.create_label();
    let a = e.asm();
    // Last first: alpha_keep[p] may be zmm16+q for a later q.
    for p in (0..pairs).rev() {
        a.vmovaps(alpha_keep[p], ZMM[16 + p])?;
    }
    a.cmp(loc(local::PENDING), 0)?;
    a.je(no_pending)?;
    group_pv_512(e, b, pairs, PvFrom::Pipe)?;
    e.set_label(&mut no_pending)?;
    let a = e.asm();
    for p in 0..pairs {
        let slot = FR_PIPE + 128 * p as i32;
        a.vmovaps(zmmword_ptr(rsp + slot), ZMM[20 + p])?;
        a.vmovaps(zmmword_ptr(rsp + slot + 64), alpha_keep[p])?;
    }
    a.mov(loc(local::PENDING), 1)?;
    a.mov(rax, qword_ptr(rdi + offsets::V_POS))?;
    a.shl(rax, 2)?;
    a.imul_2(rax, r14)?;
    a.add(rax, loc(local::VH))?;
    a.mov(loc(local::PEND_V), rax)?;
    Ok(())
}

/// The row tables and, per pair, the 16 scores (K rows as memory
/// operands, eight keys at a time, folded as in [`qk_fold2_512`]) and the
/// softmax: `p` in zmm20+, `α` in zmm16+.
fn group_scores_512(e: &mut Emitter, b: &Body, pairs: usize) -> R {
    let nq = b.d / 16;
    let direct = b.kv == KvType::F32;
    if direct {
        // K rows addressed in place: key 4a + c at base_c + 4a·stride, the
        // four bases rows 0..4 of the block (r9, r10, r12, r13), r11 the
        // stride, rcx three strides.
        let a = e.asm();
        a.mov(r11, qword_ptr(rdi + offsets::K_POS))?;
        a.shl(r11, 2)?;
        a.mov(r9, r11)?;
        a.imul_2(r9, r14)?;
        a.add(r9, loc(local::KH))?;
        a.lea(r10, r9 + r11)?;
        a.lea(r12, r9 + r11 * 2)?;
        a.lea(rcx, r11 + r11 * 2)?;
        a.lea(r13, r9 + rcx)?;
    } else {
        // Binary16: widened into the scratch (all 16 rows present).
        row_tables(e, b)?;
    }
    let (t0, t1) = (ZMM[24], ZMM[25]);
    let acc = |j: usize| ZMM[8 + j];
    for p in 0..pairs {
        let a = e.asm();
        a.mov(rax, qword_ptr(rsp + FR_PAIRS + 32 * p as i32))?;
        let q = &ZMM[..nq];
        for (m, z) in q.iter().enumerate() {
            a.vmovups(*z, zmmword_ptr(rax + 64 * m as i32))?;
        }
        for half in 0..2 {
            for j in 0..8 {
                let key = key_of_slot_512(8 * half + j);
                if !direct {
                    a.mov(r9, qword_ptr(rsp + FR_KPTR + 8 * key as i32))?;
                }
                a.vpxord(acc(j), acc(j), acc(j))?;
                for (m, z) in q.iter().enumerate() {
                    let at = 64 * m as i32;
                    if direct {
                        a.vfmadd231ps(acc(j), *z, zmmword_ptr(k_row(key, at)))?;
                    } else {
                        a.vfmadd231ps(acc(j), *z, zmmword_ptr(r9 + at))?;
                    }
                }
            }
            // Levels 1–3 of the fold tree over this half's eight slots.
            for i in 0..4 {
                let (x, y) = (acc(2 * i), acc(2 * i + 1));
                a.vshuff64x2(t0, x, y, 0x44)?;
                a.vshuff64x2(t1, x, y, 0xee)?;
                a.vaddps(acc(i), t0, t1)?;
            }
            for i in 0..2 {
                let (x, y) = (acc(2 * i), acc(2 * i + 1));
                a.vshuff32x4(t0, x, y, 0x88)?;
                a.vshuff32x4(t1, x, y, 0xdd)?;
                a.vaddps(acc(i), t0, t1)?;
            }
            a.vshufps(t0, acc(0), acc(1), 0x88)?;
            a.vshufps(t1, acc(0), acc(1), 0xdd)?;
            a.vaddps(ZMM[26 + half], t0, t1)?;
        }
        // Level 4: (first half, second half).
        a.vshufps(t0, ZMM[26], ZMM[27], 0x88)?;
        a.vshufps(t1, ZMM[26], ZMM[27], 0xdd)?;
        a.vaddps(ZMM[20 + p], t0, t1)?;
    }
    softmax_group_512(e, pairs)
}

/// The output update of a full block for `pairs` pairs: every `o` scaled
/// by its `α`, then key by key one pass over the value rows, each V chunk
/// loaded once for all pairs (`pairs · d/16` independent FMA chains in
/// zmm0–11). Touches zmm0–17, zmm24–28.
fn group_pv_512(e: &mut Emitter, b: &Body, pairs: usize, from: PvFrom) -> R {
    let nq = b.d / 16;
    let outs = [r11, r12, r13, r10];
    let o = |p: usize, m: usize| ZMM[p * nq + m];
    let slot = |p: usize| FR_PIPE + 128 * p as i32;
    let a = e.asm();
    for (p, out) in outs.iter().enumerate().take(pairs) {
        a.mov(*out, qword_ptr(rsp + FR_PAIRS + 32 * p as i32 + 8))?;
        for m in 0..nq {
            a.vmovaps(o(p, m), zmmword_ptr(*out + 64 * m as i32))?;
            match from {
                PvFrom::Regs => a.vmulps(o(p, m), o(p, m), ZMM[16 + p])?,
                PvFrom::Pipe => a.vmulps(o(p, m), o(p, m), zmmword_ptr(rsp + slot(p) + 64))?,
            }
        }
    }
    if from == PvFrom::Pipe {
        a.mov(rcx, qword_ptr(rdi + offsets::V_POS))?;
        a.shl(rcx, 2)?;
        a.mov(r9, loc(local::PEND_V))?;
    }
    let idx = ZMM[28];
    for k in 0..16 {
        if from == PvFrom::Regs {
            a.vmovaps(idx, zmmword_ptr(rsp + FR_IDX + 64 * k))?;
        }
        for p in 0..pairs {
            match from {
                PvFrom::Regs => a.vpermps(ZMM[24 + p], idx, ZMM[20 + p])?,
                // A load-port broadcast, no shuffle: the slot was stored a
                // whole block earlier, so the narrow load reads committed
                // data (it would not forward from a store in flight).
                PvFrom::Pipe => a.vbroadcastss(ZMM[24 + p], dword_ptr(rsp + slot(p) + 4 * k))?,
            }
        }
        match from {
            PvFrom::Regs => a.mov(r9, qword_ptr(rsp + FR_VPTR + 8 * k))?,
            PvFrom::Pipe if k > 0 => a.add(r9, rcx)?,
            PvFrom::Pipe => {}
        }
        for m in 0..nq {
            if pairs == 1 {
                a.vfmadd231ps(o(0, m), ZMM[24], zmmword_ptr(r9 + 64 * m as i32))?;
            } else {
                let vc = ZMM[12 + m];
                a.vmovups(vc, zmmword_ptr(r9 + 64 * m as i32))?;
                for p in 0..pairs {
                    a.vfmadd231ps(o(p, m), ZMM[24 + p], vc)?;
                }
            }
        }
    }
    for (p, out) in outs.iter().enumerate().take(pairs) {
        for m in 0..nq {
            a.vmovaps(zmmword_ptr(*out + 64 * m as i32), o(p, m))?;
        }
    }
    Ok(())
}

/// When this pair and the next both have a full block: the scores and
/// softmax of each, then both outputs' updates in one pass over the 16
/// value rows (twice the independent FMA chains, for d = 64 eight), then
/// back to `pair_loop`. Otherwise falls through to the one-pair block.
fn two_pairs_512(e: &mut Emitter, b: &Body, pair_loop: CodeLabel) -> R {
    let mut single = e.create_label();
    let a = e.asm();
    a.lea(rcx, rbx + 1)?;
    a.cmp(rcx, loc(local::NPAIRS))?;
    a.jae(single)?;
    for rec in [0, 32] {
        a.mov(rdx, qword_ptr(rsi + rec + 16))?;
        a.sub(rdx, r14)?;
        a.cmp(rdx, 16)?;
        a.jl(single)?;
    }
    let nq = b.d / 16;
    if nq <= 4 {
        // Both q rows in registers, each K chunk loaded once for both.
        let a = e.asm();
        a.mov(rax, qword_ptr(rsi))?;
        a.mov(r10, qword_ptr(rsi + 32))?;
        qk_fold2_512(e, b)?;
    }
    for (rec, save) in [(0, true), (32, false)] {
        let a = e.asm();
        a.mov(edx, 16)?;
        a.mov(r8, rbx)?;
        a.shl(r8, 7)?;
        a.lea(r8, rsp + r8 + FR_STATE + 4 * rec)?;
        if nq <= 4 {
            if !save {
                a.vmovaps(ZMM[8], ZMM[16])?;
            }
        } else {
            a.mov(rax, qword_ptr(rsi + rec))?;
            qk_fold_512(e, b)?;
        }
        softmax_512(e)?;
        if save {
            let a = e.asm();
            a.vmovaps(zmmword_ptr(rsp + FR_SAVE), ZMM[8])?;
            a.vmovaps(zmmword_ptr(rsp + FR_SAVE + 64), ZMM[29])?;
        }
    }
    let (p0, a0, p1, a1) = (ZMM[30], ZMM[31], ZMM[28], ZMM[29]);
    let o0 = |m: usize| ZMM[m];
    let o1 = |m: usize| ZMM[8 + m];
    let a = e.asm();
    a.vmovaps(p1, ZMM[8])?;
    a.vmovaps(p0, zmmword_ptr(rsp + FR_SAVE))?;
    a.vmovaps(a0, zmmword_ptr(rsp + FR_SAVE + 64))?;
    a.mov(r11, qword_ptr(rsi + 8))?;
    a.mov(r13, qword_ptr(rsi + 40))?;
    for m in 0..nq {
        let at = 64 * m as i32;
        a.vmovups(o0(m), zmmword_ptr(r11 + at))?;
        a.vmulps(o0(m), o0(m), a0)?;
        a.vmovups(o1(m), zmmword_ptr(r13 + at))?;
        a.vmulps(o1(m), o1(m), a1)?;
    }
    for k in 0..16 {
        let idx = ZMM[26 + k % 2];
        let (pb0, pb1) = (ZMM[24], ZMM[25]);
        a.vmovaps(idx, zmmword_ptr(rsp + FR_IDX + 64 * k))?;
        a.vpermps(pb0, idx, p0)?;
        a.vpermps(pb1, idx, p1)?;
        a.mov(r9, qword_ptr(rsp + FR_VPTR + 8 * k))?;
        for m in 0..nq {
            let vc = ZMM[16 + m % 2];
            a.vmovups(vc, zmmword_ptr(r9 + 64 * m as i32))?;
            a.vfmadd231ps(o0(m), pb0, vc)?;
            a.vfmadd231ps(o1(m), pb1, vc)?;
        }
    }
    for m in 0..nq {
        let at = 64 * m as i32;
        a.vmovups(zmmword_ptr(r11 + at), o0(m))?;
        a.vmovups(zmmword_ptr(r13 + at), o1(m))?;
    }
    a.add(rbx, 2)?;
    a.jmp(pair_loop)?;
    e.set_label(&mut single)
}

/// Scores of two pairs at once (`d ≤ 64`): q rows at `rax` and `r10` in
/// zmm0–3 and zmm4–7, each K chunk loaded once into a register for both,
/// eight keys at a time (16 accumulators); each half is folded to its
/// level-3 vector, the halves combined by level 4. Scores of the first
/// pair in zmm8, of the second in zmm16.
fn qk_fold2_512(e: &mut Emitter, b: &Body) -> R {
    let nq = b.d / 16;
    let (t0, t1) = (ZMM[26], ZMM[27]);
    // acc(p, j): pair p, slot j of the half.
    let acc = |p: usize, j: usize| ZMM[8 + 8 * p + j];
    let a = e.asm();
    for m in 0..nq {
        a.vmovups(ZMM[m], zmmword_ptr(rax + 64 * m as i32))?;
        a.vmovups(ZMM[4 + m], zmmword_ptr(r10 + 64 * m as i32))?;
    }
    for half in 0..2 {
        for j in 0..8 {
            let key = key_of_slot_512(8 * half + j);
            a.mov(r9, qword_ptr(rsp + FR_KPTR + 8 * key as i32))?;
            for p in 0..2 {
                a.vpxord(acc(p, j), acc(p, j), acc(p, j))?;
            }
            for m in 0..nq {
                let kc = ZMM[24 + m % 2];
                a.vmovups(kc, zmmword_ptr(r9 + 64 * m as i32))?;
                a.vfmadd231ps(acc(0, j), ZMM[m], kc)?;
                a.vfmadd231ps(acc(1, j), ZMM[4 + m], kc)?;
            }
        }
        for p in 0..2 {
            // Levels 1–3 of the fold tree over this half's eight slots.
            for i in 0..4 {
                let (x, y) = (acc(p, 2 * i), acc(p, 2 * i + 1));
                a.vshuff64x2(t0, x, y, 0x44)?;
                a.vshuff64x2(t1, x, y, 0xee)?;
                a.vaddps(acc(p, i), t0, t1)?;
            }
            for i in 0..2 {
                let (x, y) = (acc(p, 2 * i), acc(p, 2 * i + 1));
                a.vshuff32x4(t0, x, y, 0x88)?;
                a.vshuff32x4(t1, x, y, 0xdd)?;
                a.vaddps(acc(p, i), t0, t1)?;
            }
            let u = ZMM[28 + 2 * half + p];
            a.vshufps(t0, acc(p, 0), acc(p, 1), 0x88)?;
            a.vshufps(t1, acc(p, 0), acc(p, 1), 0xdd)?;
            a.vaddps(u, t0, t1)?;
        }
    }
    // Level 4: (first half, second half) for each pair.
    for (p, dst) in [(0, ZMM[8]), (1, ZMM[16])] {
        let (u1, u2) = (ZMM[28 + p], ZMM[30 + p]);
        a.vshufps(t0, u1, u2, 0x88)?;
        a.vshufps(t1, u1, u2, 0xdd)?;
        a.vaddps(dst, t0, t1)?;
    }
    Ok(())
}

/// One pair's block: scores and softmax, then its output update.
fn pair_block_512(e: &mut Emitter, b: &Body) -> R {
    phase_a_512(e, b)?;
    phase_b_512(e, b)
}

/// Scores, fold, mask, maximum, `α` (zmm29), `p` (zmm8) and the `l`
/// update of the pair at `rax` (q row), `r8` (state), `rdx` (nb).
fn phase_a_512(e: &mut Emitter, b: &Body) -> R {
    qk_fold_512(e, b)?;
    softmax_512(e)
}

/// The block's 16 unscaled scores of the q row at `rax`, in key order,
/// into zmm8 (K rows from the pointer table, as memory operands).
fn qk_fold_512(e: &mut Emitter, b: &Body) -> R {
    let nq = b.d / 16;
    let acc = |s: usize| ZMM[8 + s];
    let a = e.asm();
    // Scores: accumulator s ← key key_of_slot_512(s). A row of more than
    // `Q_REGS` chunks goes in halves: every lane still sums its chunks in
    // order, the first half's then the second's.
    for first in (0..nq).step_by(Q_REGS) {
        let chunks = first..(first + Q_REGS).min(nq);
        for m in chunks.clone() {
            a.vmovups(ZMM[m - first], zmmword_ptr(rax + 64 * m as i32))?;
        }
        for s in 0..16 {
            a.mov(r9, qword_ptr(rsp + FR_KPTR + 8 * key_of_slot_512(s) as i32))?;
            if first == 0 {
                a.vpxord(acc(s), acc(s), acc(s))?;
            }
            for m in chunks.clone() {
                a.vfmadd231ps(acc(s), ZMM[m - first], zmmword_ptr(r9 + 64 * m as i32))?;
            }
        }
    }
    // Fold, level 1: lanes i + i+8 (256-bit halves of a and b side by side).
    let (t0, t1) = (ZMM[24], ZMM[25]);
    for i in 0..8 {
        let (x, y) = (acc(2 * i), acc(2 * i + 1));
        a.vshuff64x2(t0, x, y, 0x44)?;
        a.vshuff64x2(t1, x, y, 0xee)?;
        a.vaddps(acc(i), t0, t1)?;
    }
    // Level 2: lanes i + i+4 (128-bit blocks).
    for i in 0..4 {
        let (x, y) = (acc(2 * i), acc(2 * i + 1));
        a.vshuff32x4(t0, x, y, 0x88)?;
        a.vshuff32x4(t1, x, y, 0xdd)?;
        a.vaddps(acc(i), t0, t1)?;
    }
    // Levels 3 and 4: neighbours, twice.
    for i in 0..2 {
        let (x, y) = (acc(2 * i), acc(2 * i + 1));
        a.vshufps(t0, x, y, 0x88)?;
        a.vshufps(t1, x, y, 0xdd)?;
        a.vaddps(acc(i), t0, t1)?;
    }
    a.vshufps(t0, acc(0), acc(1), 0x88)?;
    a.vshufps(t1, acc(0), acc(1), 0xdd)?;
    a.vaddps(acc(0), t0, t1)?;
    Ok(())
}

/// From the scores in zmm8: scale, mask, maximum, `α` (zmm29), `p`
/// (zmm8) and the `l` update of the pair at `r8` (state), `rdx` (nb).
/// Touches zmm8 and zmm24–zmm31 only.
fn softmax_512(e: &mut Emitter) -> R {
    let (t0, t1) = (ZMM[24], ZMM[25]);
    let s = ZMM[8];
    let a = e.asm();
    a.vbroadcastss(ZMM[31], dword_ptr(rsp + cslot(c::MAGIC)))?;
    a.vmulps(s, s, dword_bcst(rsp + cslot(c::SCALE)))?;
    // Absent keys (lanes ≥ nb, rdx) score -inf.
    a.mov(ecx, edx)?;
    a.mov(r9d, 1)?;
    a.shl(r9d, weft_x64::iced_x86::code_asm::cl)?;
    a.dec(r9d)?;
    a.kmovw(k1, r9d)?;
    a.knotw(k2, k1)?;
    a.vbroadcastss(s.k2(), dword_ptr(rsp + cslot(c::NEG_INF)))?;
    // Block maximum in every lane (butterfly).
    a.vshuff64x2(t0, s, s, 0x4e)?;
    a.vmaxps(t0, s, t0)?;
    a.vshuff32x4(t1, t0, t0, 0xb1)?;
    a.vmaxps(t0, t0, t1)?;
    a.vpermilps(t1, t0, 0x4e)?;
    a.vmaxps(t0, t0, t1)?;
    a.vpermilps(t1, t0, 0xb1)?;
    a.vmaxps(t0, t0, t1)?;
    // m' = max(m, bm); u = m' or +0 when -inf; alpha = E(m - u); p = E(s - u).
    let (m_old, m_new, u, alpha) = (ZMM[26], ZMM[27], ZMM[28], ZMM[29]);
    a.vbroadcastss(m_old, dword_ptr(r8 + 64))?;
    a.vmaxps(m_new, m_old, t0)?;
    a.evex().vmovss(dword_ptr(r8 + 64), XMM[27])?;
    a.vcmpps(k3, m_new, dword_bcst(rsp + cslot(c::NEG_INF)), 0)?;
    a.vmovaps(u, m_new)?;
    a.vpxord(u.k3(), u, u)?;
    a.vsubps(alpha, m_old, u)?;
    a.vsubps(s, s, u)?;
    exp_512(e, 29, 24, 25, 30)?;
    exp_512(e, 8, 24, 25, 30)?;
    let a = e.asm();
    // l = l·alpha + p.
    a.vmovaps(t0, zmmword_ptr(r8))?;
    a.vfmadd213ps(t0, alpha, s)?;
    a.vmovaps(zmmword_ptr(r8), t0)?;
    Ok(())
}

/// `o = o·α`, then one fma per present key (`rdx` of them) into the row
/// at `r11`; `p` in zmm8, `α` in zmm29.
fn phase_b_512(e: &mut Emitter, b: &Body) -> R {
    let nq = b.d / 16;
    let (mut s, alpha) = (ZMM[8], ZMM[29]);
    let a = e.asm();
    if nq > 8 {
        // The outputs take zmm0–15: `p` moves out of their way.
        a.vmovaps(ZMM[28], s)?;
        s = ZMM[28];
    }
    // o = o·alpha, then one fma per present key.
    let o = |m: usize| ZMM[m];
    for m in 0..nq {
        a.vmovups(o(m), zmmword_ptr(r11 + 64 * m as i32))?;
        a.vmulps(o(m), o(m), alpha)?;
    }
    let mut partial = e.create_label();
    let mut stored = e.create_label();
    let mut top = e.create_label();
    let a = e.asm();
    a.cmp(rdx, 16)?;
    a.jne(partial)?;
    for k in 0..16 {
        let (pb, idx) = (ZMM[24 + k % 2], ZMM[26 + k % 2]);
        a.vmovaps(idx, zmmword_ptr(rsp + FR_IDX + 64 * k))?;
        a.vpermps(pb, idx, s)?;
        a.mov(r9, qword_ptr(rsp + FR_VPTR + 8 * k))?;
        for m in 0..nq {
            a.vfmadd231ps(o(m), pb, zmmword_ptr(r9 + 64 * m as i32))?;
        }
    }
    a.jmp(stored)?;
    e.set_label(&mut partial)?;
    let a = e.asm();
    a.xor(r10d, r10d)?;
    a.lea(r12, rsp + FR_IDX)?;
    e.set_label(&mut top)?;
    let a = e.asm();
    a.vmovaps(ZMM[26], zmmword_ptr(r12))?;
    a.vpermps(ZMM[24], ZMM[26], s)?;
    a.mov(r9, qword_ptr(rsp + r10 * 8 + FR_VPTR))?;
    for m in 0..nq {
        a.vfmadd231ps(o(m), ZMM[24], zmmword_ptr(r9 + 64 * m as i32))?;
    }
    a.add(r12, 64)?;
    a.inc(r10)?;
    a.cmp(r10, rdx)?;
    a.jb(top)?;
    e.set_label(&mut stored)?;
    let a = e.asm();
    for m in 0..nq {
        a.vmovups(zmmword_ptr(r11 + 64 * m as i32), o(m))?;
    }
    Ok(())
}

// ----------------------------------------------------------------- AVX2 ---

/// Keys of the four slots of each group: a half's two groups give
/// `[k0..k8]` in order after the two `vhaddps` rounds.
const GROUP_KEYS_256: [[usize; 4]; 2] = [[0, 4, 1, 5], [2, 6, 3, 7]];

/// `E(x)` in place on ymm `x`; `t1`, `t2`, `t3`, `mk` scratch.
fn exp_256(e: &mut Emitter, x: usize, t1: usize, t2: usize, t3: usize, mk: usize) -> R {
    let (x, t1, t2, t3, mk) = (YMM[x], YMM[t1], YMM[t2], YMM[t3], YMM[mk]);
    let cv = |i: usize| ymmword_ptr(rsp + cslot(i));
    let a = e.asm();
    a.vcmpps(mk, x, cv(c::LO), 1)?; // x < LO (ordered)
    a.vmovaps(t1, cv(c::MAGIC))?;
    a.vfmadd231ps(t1, x, cv(c::LOG2E))?; // t = x·LOG2E + MAGIC
    a.vsubps(t2, t1, cv(c::MAGIC))?; // n
    a.vmovaps(t3, x)?;
    a.vfmadd231ps(t3, t2, cv(c::NEG_LN2_HI))?;
    a.vfmadd231ps(t3, t2, cv(c::NEG_LN2_LO))?;
    a.vmovaps(x, cv(c::C0 + 7))?;
    for k in (0..7).rev() {
        a.vfmadd213ps(x, t3, cv(c::C0 + k))?;
    }
    a.vpslld(t1, t1, 23)?;
    a.vpaddd(t1, t1, cv(c::ONE_BITS))?; // 2^n
    a.vmulps(x, x, t1)?;
    a.vandnps(x, mk, x)?; // +0 where x < LO
    Ok(())
}

/// Ends by jumping to (or falling into) `next`.
fn pair_block_256(e: &mut Emitter, b: &Body, next: CodeLabel) -> R {
    let nq = b.d / 8;
    let ptrs = [r9, r10, r12, r13];
    let a = e.asm();
    for half in 0..2 {
        for (grp, keys) in GROUP_KEYS_256.iter().enumerate() {
            for (j, key) in keys.iter().enumerate() {
                a.mov(
                    ptrs[j],
                    qword_ptr(rsp + FR_KPTR + 8 * (8 * half + key) as i32),
                )?;
            }
            for y in &YMM[..8] {
                a.vxorps(*y, *y, *y)?;
            }
            for m in 0..nq {
                let at = 32 * m as i32;
                a.vmovups(YMM[8], ymmword_ptr(rax + at))?;
                for (j, p) in ptrs.iter().enumerate() {
                    a.vfmadd231ps(YMM[2 * j + m % 2], YMM[8], ymmword_ptr(*p + at))?;
                }
            }
            for j in 0..4 {
                a.vaddps(YMM[2 * j], YMM[2 * j], YMM[2 * j + 1])?;
            }
            a.vperm2f128(YMM[9], YMM[0], YMM[2], 0x20)?;
            a.vperm2f128(YMM[10], YMM[0], YMM[2], 0x31)?;
            a.vaddps(YMM[0], YMM[9], YMM[10])?;
            a.vperm2f128(YMM[9], YMM[4], YMM[6], 0x20)?;
            a.vperm2f128(YMM[10], YMM[4], YMM[6], 0x31)?;
            a.vaddps(YMM[4], YMM[9], YMM[10])?;
            a.vhaddps(YMM[11 + grp], YMM[0], YMM[4])?;
        }
        a.vhaddps(YMM[13 + half], YMM[11], YMM[12])?;
    }
    let (s0, s1) = (13, 14);
    for s in [s0, s1] {
        a.vmulps(YMM[s], YMM[s], ymmword_ptr(rsp + cslot(c::SCALE)))?;
    }
    // Absent keys score -inf: lane index < nb keeps the score.
    a.vmovd(XMM[15], edx)?;
    a.vpbroadcastd(YMM[15], XMM[15])?;
    a.vmovaps(YMM[10], ymmword_ptr(rsp + cslot(c::NEG_INF)))?;
    for (s, idx) in [(s0, c::IDX_LO), (s1, c::IDX_HI)] {
        a.vpcmpgtd(YMM[9], YMM[15], ymmword_ptr(rsp + cslot(idx)))?;
        a.vblendvps(YMM[s], YMM[10], YMM[s], YMM[9])?;
    }
    // Block maximum in every lane.
    a.vmaxps(YMM[9], YMM[s0], YMM[s1])?;
    a.vperm2f128(YMM[10], YMM[9], YMM[9], 0x01)?;
    a.vmaxps(YMM[9], YMM[9], YMM[10])?;
    a.vpermilps(YMM[10], YMM[9], 0x4e)?;
    a.vmaxps(YMM[9], YMM[9], YMM[10])?;
    a.vpermilps(YMM[10], YMM[9], 0xb1)?;
    a.vmaxps(YMM[9], YMM[9], YMM[10])?;
    // m', u, alpha (ymm10), p (ymm13, ymm14).
    a.vbroadcastss(YMM[10], dword_ptr(r8 + 64))?;
    a.vmaxps(YMM[11], YMM[10], YMM[9])?;
    a.vmovss(dword_ptr(r8 + 64), XMM[11])?;
    a.vcmpps(YMM[12], YMM[11], ymmword_ptr(rsp + cslot(c::NEG_INF)), 0)?;
    a.vandnps(YMM[12], YMM[12], YMM[11])?;
    a.vsubps(YMM[10], YMM[10], YMM[12])?;
    a.vsubps(YMM[s0], YMM[s0], YMM[12])?;
    a.vsubps(YMM[s1], YMM[s1], YMM[12])?;
    exp_256(e, 10, 0, 1, 2, 3)?;
    exp_256(e, s0, 0, 1, 2, 3)?;
    exp_256(e, s1, 0, 1, 2, 3)?;
    let a = e.asm();
    for (h, s) in [s0, s1].iter().enumerate() {
        let at = 32 * h as i32;
        a.vmovaps(YMM[0], ymmword_ptr(r8 + at))?;
        a.vfmadd213ps(YMM[0], YMM[10], YMM[*s])?;
        a.vmovaps(ymmword_ptr(r8 + at), YMM[0])?;
    }
    // o = o·alpha, then one fma per present key, eight chunks at a time.
    let mut partial = e.create_label();
    e.asm().cmp(rdx, 16)?;
    e.asm().jne(partial)?;
    for grp in (0..nq).step_by(8) {
        let chunks = grp..(grp + 8).min(nq);
        let a = e.asm();
        for m in chunks.clone() {
            a.vmovups(YMM[m - grp], ymmword_ptr(r11 + 32 * m as i32))?;
            a.vmulps(YMM[m - grp], YMM[m - grp], YMM[10])?;
        }
        for k in 0..16 {
            let (pb, idx) = (YMM[8 + k % 2], YMM[11 + k % 2]);
            a.vmovaps(idx, ymmword_ptr(rsp + FR_IDX + 64 * (k % 8)))?;
            a.vpermps(pb, idx, YMM[s0 + k / 8])?;
            a.mov(r9, qword_ptr(rsp + FR_VPTR + 8 * k))?;
            for m in chunks.clone() {
                a.vfmadd231ps(YMM[m - grp], pb, ymmword_ptr(r9 + 32 * m as i32))?;
            }
        }
        for m in chunks {
            a.vmovups(ymmword_ptr(r11 + 32 * m as i32), YMM[m - grp])?;
        }
    }
    e.asm().jmp(next)?;
    e.set_label(&mut partial)?;
    for grp in (0..nq).step_by(8) {
        let chunks = grp..(grp + 8).min(nq);
        let mut top = e.create_label();
        let a = e.asm();
        for m in chunks.clone() {
            a.vmovups(YMM[m - grp], ymmword_ptr(r11 + 32 * m as i32))?;
            a.vmulps(YMM[m - grp], YMM[m - grp], YMM[10])?;
        }
        // Keys 0..8 broadcast from p's low half, 8..16 from its high half.
        a.xor(r10d, r10d)?;
        a.lea(r12, rsp + FR_IDX)?;
        a.vmovaps(YMM[15], YMM[s0])?;
        e.set_label(&mut top)?;
        let mut low = e.create_label();
        let a = e.asm();
        a.cmp(r10, 8)?;
        a.jne(low)?;
        a.vmovaps(YMM[15], YMM[s1])?;
        a.lea(r12, rsp + FR_IDX)?;
        e.set_label(&mut low)?;
        let a = e.asm();
        a.vmovaps(YMM[11], ymmword_ptr(r12))?;
        a.vpermps(YMM[8], YMM[11], YMM[15])?;
        a.mov(r9, qword_ptr(rsp + r10 * 8 + FR_VPTR))?;
        for m in chunks.clone() {
            a.vfmadd231ps(YMM[m - grp], YMM[8], ymmword_ptr(r9 + 32 * m as i32))?;
        }
        a.add(r12, 64)?;
        a.inc(r10)?;
        a.cmp(r10, rdx)?;
        a.jb(top)?;
        for m in chunks {
            a.vmovups(ymmword_ptr(r11 + 32 * m as i32), YMM[m - grp])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_order_puts_every_key_in_exactly_one_slot() {
        let mut seen = [false; 16];
        for s in 0..16 {
            seen[key_of_slot_512(s)] = true;
        }
        assert!(seen.iter().all(|x| *x));
        let mut seen = [false; 8];
        for g in GROUP_KEYS_256 {
            for k in g {
                seen[k] = true;
            }
        }
        assert!(seen.iter().all(|x| *x));
    }

    #[test]
    fn both_tiers_emit_for_every_supported_d_and_refuse_the_rest() {
        for t in TWINS {
            for d in (16..=MAX_TWIN_D_X64).step_by(16) {
                for kv in [KvType::F32, KvType::F16] {
                    let body = t.body(d, kv).expect("emits");
                    assert!(!body.bytes.is_empty());
                }
            }
            for d in [0, 8, 40, 264, 512] {
                let e = t.body(d, KvType::F32).unwrap_err();
                assert_eq!(e.name(), "unsupported-geometry", "{d}");
            }
        }
    }

    #[test]
    fn avx2_twin_needs_no_avx512_and_the_avx512_twin_no_vnni() {
        use weft_x64::iced_x86::CpuidFeature;
        let avx2 = AttentionX64::new(Tier::Avx2)
            .body(64, KvType::F16)
            .expect("avx2");
        for f in avx2.cpuid_features() {
            assert!(
                !matches!(f, CpuidFeature::AVX512F | CpuidFeature::AVX512VL),
                "{f:?}"
            );
        }
        let avx512 = AttentionX64::new(Tier::Avx512)
            .body(64, KvType::F16)
            .expect("avx512");
        assert!(avx512.cpuid_features().contains(&CpuidFeature::AVX512F));
        for f in avx512.cpuid_features() {
            assert!(
                !matches!(
                    f,
                    CpuidFeature::AVX512_VNNI
                        | CpuidFeature::AVX_VNNI
                        | CpuidFeature::AVX512DQ
                        | CpuidFeature::AVX512BW
                ),
                "{f:?}"
            );
        }
    }
}
