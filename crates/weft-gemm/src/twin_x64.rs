//! x64 twins of the `f32.gemm` arms: the same offer (layout, views), the
//! body emitted through weft-x64, in two tiers: AVX-512 (below) and, for
//! hosts without it, AVX2 with FMA (6 × 16 tiles in 12 ymm accumulators; an
//! edge that a whole tile does not fit is a 6 × 8 tile under a lane mask,
//! `vmaskmovps` loads and stores, which suppress faults like opmasks; α
//! and the scale come from 32-byte stack copies, there being no registers
//! left).
//!
//! One emitter serves every arm; a twin is an arm kind, a register tile of
//! `rows × 16·vectors` and the host's calling convention:
//!
//! - **Tile**: `rows · vectors ≤ 24` zmm accumulators (12 × 32 for
//!   `direct` and `panels`, 8 × 32 and 4 × 64 for `small_m`),
//!   `vectors` zmm of B per `k` step, and each row's A element broadcast
//!   by its own `vbroadcastss` into a rotating register, then FMAs from
//!   registers. Folding the broadcast into the FMA (`dword_bcst`) was
//!   measured 17% slower on a Golden Cove-class host: rows past the first
//!   of each group of four address A with an index register, and an
//!   indexed three-operand FMA is un-laminated into two uops.
//! - **α**: when `α = 1` (bit pattern `0x3f800000`) the multiply is
//!   skipped (exact: `1 ⊗ a = a` for every non-NaN `a`); otherwise each
//!   broadcast is multiplied by α first, in a second copy of the body.
//! - **Edges by masks**: column tiles start at `n_start` (rows layout) or
//!   at its panel boundary (panels, so a zmm is one panel line); each
//!   vector's opmask keeps the columns inside `n_start..n_end`. Masked
//!   loads of B and C suppress faults and give `+0.0` in masked lanes,
//!   whose accumulators are never stored. Rows left over after full tiles
//!   run as tiles of 8, 4, 2 and 1 rows (each at most once).
//! - **k blocks** ([`k_blocks`]: of up to [`KC_SHORT`] while three
//!   suffice, else up to [`KC_X64`]): the first block starts the accumulators
//!   from `β ⊗ C` (`+0.0`, C unread, when `β = 0`), later ones from C
//!   itself (`1.0 ⊗ C`, exact), as the arm does.
//!
//! Loop order: `k` blocks, column blocks of [`NC_X64`], row tiles, column
//! tiles, `k` (when B is packed, [`K_UNROLL`] steps a trip and then the
//! rest). A tile's A rows (at most `rows × KC_X64` floats) stay in L1
//! while its column tiles walk B's block of at most `KC_X64 × NC_X64`
//! (1 MiB), which stays in L2.
//!
//! Frame: SysV or Win64 ([`GemmX64::with_abi`]); the argument pointer is
//! kept in `rdi`; `rbx`, `rbp`, `r12`–`r15` (and on Win64 `rdi`, `rsi`,
//! `xmm6`–`xmm15`) are saved; 192 bytes of stack hold the loop state, and
//! (AVX-512) about 25 KiB above them the copy of A's rows.

use std::sync::Arc;

use weft_kernel::{Feature, Isa, LoopAnnotation, LoopTrip, NativeCode, Offer, Refusal, Twin};
use weft_x64::iced_x86::code_asm::{
    byte_ptr, cl, dword_ptr, eax, ecx, edx, k1, k2, k3, k4, k5, qword_ptr, r10, r11, r12, r13, r14,
    r15, r8, r9, rax, rbp, rbx, rcx, rdi, rdx, rsi, rsp, ymmword_ptr, zmmword_ptr,
    AsmMemoryOperand, AsmRegister64, AsmRegisterZmm, CodeLabel,
};
use weft_x64::regs::{XMM, YMM, ZMM};
use weft_x64::{Abi, Clobbers, EmitError, Emitter};

use crate::arm::ArmKind;
use crate::{dims, offsets, ARGS_NAME, FAMILY};

/// The twins' largest `k` block (the packed copy of A holds this many
/// floats a row).
pub const KC_X64: u64 = 512;

/// The twins' `k` block while it takes at most three of them (`k ≤ 768`).
///
/// Deeper products take blocks of up to [`KC_X64`]: half the passes over C
/// (its tile loads, stores and the tile starts around them) at the cost of
/// a packed A twice as long. At 1024³ on a Zen 4 host six `bench gemm
/// --quick` runs gave the AVX-512 twin 0.89–0.92 of the FMA peak with
/// blocks of 512 against 0.88–0.91 with 256; at `k = 576` two blocks of
/// 288 were 5–15% slower than three of 192 (ResNet's 3×3 56×56×64 as
/// im2col), so shallow products keep the short block.
pub const KC_SHORT: u64 = 256;

/// `⌈k / block⌉` blocks of equal depth (the last up to one less): blocks of
/// [`KC_SHORT`] while there are at most three, otherwise of [`KC_X64`].
pub fn k_blocks(k: u64) -> u64 {
    let short = k.div_ceil(KC_SHORT);
    if short <= 3 {
        short.max(1)
    } else {
        k.div_ceil(KC_X64)
    }
}

/// The twins' column block: a block of B is at most `KC_X64 × NC_X64`
/// floats, 1 MiB (512 KiB at the short k block), which stays in L2 while
/// every row tile walks it (a multiple of every tile's width).
pub const NC_X64: u64 = 512;

/// Features every twin here needs: AVX-512F (zmm, opmasks, embedded
/// broadcasts, FMA on zmm) and AVX (the frame's `vzeroupper`).
const FEATURES: &[Feature] = &[Feature::Avx, Feature::Fma, Feature::Avx512f];

/// The AVX2 tier: ymm FMA, `vpcmpgtd` on ymm for its masks.
const AVX2_FEATURES: &[Feature] = &[Feature::Avx, Feature::Avx2, Feature::Fma];

/// Which instruction set a twin is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// AVX2 + FMA: 16 ymm, tiles of 6 × 16 (ragged edges as masked 6 × 8
    /// tiles with `vmaskmovps`).
    Avx2,
    /// AVX-512F: 32 zmm and opmasks.
    Avx512,
}

/// One x64 twin: an instruction set, an arm kind, a tile and a calling
/// convention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmX64 {
    tier: Tier,
    kind: ArmKind,
    rows: u8,
    vectors: u8,
    abi: Abi,
}

impl GemmX64 {
    /// The twin of `kind` with `rows × 16·vectors` tiles (refused at emit
    /// time unless `1 ≤ vectors ≤ 4`, `1 ≤ rows ≤ 12` and
    /// `rows · vectors ≤ 24`), for the host's calling convention.
    pub const fn new(kind: ArmKind, rows: u8, vectors: u8) -> GemmX64 {
        GemmX64 {
            tier: Tier::Avx512,
            kind,
            rows,
            vectors,
            abi: Abi::host(),
        }
    }

    /// The AVX2 twin of `kind`: 6 × 16 tiles (two ymm per row).
    pub const fn avx2(kind: ArmKind) -> GemmX64 {
        GemmX64 {
            tier: Tier::Avx2,
            kind,
            rows: 6,
            vectors: 2,
            abi: Abi::host(),
        }
    }

    /// The same twin for another calling convention (tests call a Win64
    /// body on Linux through `extern "win64"`).
    pub const fn with_abi(self, abi: Abi) -> GemmX64 {
        GemmX64 { abi, ..self }
    }

    /// Its register tile: rows, and zmm vectors per row.
    pub fn tile(&self) -> (usize, usize) {
        (self.rows as usize, self.vectors as usize)
    }

    fn check(&self) -> Result<(), Refusal> {
        let (r, v) = self.tile();
        if self.tier == Tier::Avx2 && (r, v) != (6, 2) {
            return Err(Refusal::EmitError {
                message: format!("{}: the AVX2 tier has 6 × 16 tiles only", self.name()),
            });
        }
        if !(1..=4).contains(&v) || !(1..=12).contains(&r) || r * v > 24 {
            return Err(Refusal::EmitError {
                message: format!("{}: no {r} × {v}-vector tile", self.name()),
            });
        }
        Ok(())
    }
}

/// The x64 twins of `kind`'s offer.
pub fn twins(kind: ArmKind) -> Vec<Arc<dyn Twin>> {
    let tiles: &[(u8, u8)] = match kind {
        // 6 × 64 was measured 5–15% behind 12 × 32 at every direct and
        // panels shape on a Golden Cove-class host (four B streams from
        // L2 a k step against two), which weft-cost, modelling ports and
        // not L2 streams, priced the other way round; it stays for
        // small_m, where a tile has at most 8 rows anyway.
        ArmKind::Direct | ArmKind::Panels => &[(12, 2)],
        ArmKind::SmallM => &[(8, 2), (4, 4)],
    };
    tiles
        .iter()
        .map(|&(r, v)| GemmX64::new(kind, r, v))
        .chain([GemmX64::avx2(kind)])
        .map(|t| Arc::new(t) as Arc<dyn Twin>)
        .collect()
}

// SAFETY: the body reads A's rows of the rectangle (k elements each), B's
// columns of the rectangle (masked past n), C inside the rectangle, and
// writes only C inside the rectangle (masked stores); it returns
// normally (module docs). Validation checks its results against the arm.
unsafe impl Twin for GemmX64 {
    fn name(&self) -> &'static str {
        use ArmKind::*;
        if self.tier == Tier::Avx2 {
            return match self.kind {
                Direct => "f32.gemm.twin.avx2.direct.6x16",
                Panels => "f32.gemm.twin.avx2.panels.6x16",
                SmallM => "f32.gemm.twin.avx2.small_m.6x16",
            };
        }
        match (self.kind, self.rows, self.vectors) {
            (Direct, 12, 2) => "f32.gemm.twin.avx512.direct.12x32",
            (Panels, 12, 2) => "f32.gemm.twin.avx512.panels.12x32",
            (SmallM, 8, 2) => "f32.gemm.twin.avx512.small_m.8x32",
            (SmallM, 4, 4) => "f32.gemm.twin.avx512.small_m.4x64",
            _ => "f32.gemm.twin.avx512.custom",
        }
    }

    fn isa(&self) -> Isa {
        Isa::X86_64
    }

    fn requires(&self) -> &'static [Feature] {
        match self.tier {
            Tier::Avx512 => FEATURES,
            Tier::Avx2 => AVX2_FEATURES,
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
        if self.kind.packs_b() != offer.packed.iter().any(|p| p.name == "b") {
            return Err(Refusal::UnknownLayout {
                layout: format!("{}: the offer's B is not what this twin reads", self.name()),
            });
        }
        self.check()?;
        let (emitted, head, back) =
            emit(self.tier, self.kind, self.tile(), self.abi).map_err(|e| Refusal::EmitError {
                message: format!("{}: {e}", self.name()),
            })?;
        let mut loops = Vec::new();
        if let (Some(head), Some(back_edge)) =
            (emitted.label_offset(&head), emitted.label_offset(&back))
        {
            loops.push(LoopAnnotation {
                name: "k".to_owned(),
                head,
                back_edge,
            });
        }
        Ok(NativeCode {
            isa: Isa::X86_64,
            bytes: emitted.bytes,
            pool: None,
            loops,
        })
    }

    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        match dims(&offer.contract.geometry) {
            Ok((m, n, k, _)) => nest(self.tier, self.kind, self.tile(), m, n, k),
            Err(_) => offer.loops.clone(),
        }
    }
}

/// The loop nest of a twin with `rows × 16·vectors` tiles at `m × n × k`,
/// in the order the emitter writes the loops (the `α = 1` body, then the
/// general one, priced half and half): k blocks, column blocks, full row
/// tiles, column tiles, `k` (AVX-512 with B packed: trips of
/// [`K_UNROLL`] steps, then `k_rest`); then for each leftover height (8,
/// 4, 2, 1 below `rows`) its column tiles and `k`. Per-entry trip counts.
pub fn nest(
    tier: Tier,
    kind: ArmKind,
    (rows, vectors): (usize, usize),
    m: u64,
    n: u64,
    k: u64,
) -> Vec<LoopTrip> {
    let t = |name: &str, trips: u64, depth: u32| LoopTrip {
        name: name.to_owned(),
        trips,
        depth,
    };
    let blocks = k_blocks(k);
    let kk = k / blocks;
    let col_blocks = n.div_ceil(NC_X64);
    let cols = n.min(NC_X64).div_ceil(16 * vectors as u64);
    // AVX-512 sweeps first copy A's rows (16 floats a step); AVX2 sweeps
    // hold two tiles, full and masked: a second k loop.
    let (packs, masked) = (tier == Tier::Avx512, tier == Tier::Avx2);
    let mut one = vec![
        t("k_blocks", blocks, 0),
        t("column_blocks", col_blocks, 1),
        t("row_tiles", m / rows as u64, 2),
    ];
    if packs {
        one.push(t("pack_a", kk / 16, 3));
    }
    let tail = (n.min(NC_X64) % 16).div_ceil(8);
    let sweep = |depth: u32| -> Vec<LoopTrip> {
        let (full, k) = (t("column_tiles", cols, depth), t("k", kk, depth + 1));
        if masked {
            // The AVX2 sweep: masked head (none for a whole call), whole
            // 16-column tiles, masked tail.
            let (full, k) = (t("column_tiles", n.min(NC_X64) / 16, depth), k);
            vec![
                t("masked_head", 0, depth),
                t("k", kk, depth + 1),
                full,
                k,
                t("masked_tail", tail, depth),
                t("k", kk, depth + 1),
            ]
        } else if kind.packs_b() {
            // AVX-512, B packed: whole tiles' k loop in trips of
            // K_UNROLL steps and its rest, then the edge tiles' (masked).
            vec![
                full,
                t("k", kk / K_UNROLL, depth + 1),
                t("k_rest", kk % K_UNROLL, depth + 1),
                t("k_edge", kk, depth + 1),
            ]
        } else {
            // AVX-512: whole tiles' k loop, then the edge tiles' (masked).
            vec![full, k, t("k_edge", kk, depth + 1)]
        }
    };
    one.extend(sweep(3));
    // A leftover height runs at this geometry when m's remainder holds it
    // (8, 4, 2, 1 in turn); otherwise its sweep runs zero tiles.
    let mut rem = m % rows as u64;
    for h in [8usize, 4, 2, 1] {
        if h < rows {
            let used = rem >= h as u64;
            if used {
                rem -= h as u64;
            }
            if packs {
                one.push(t("leftover_pack_a", if used { kk / 16 } else { 0 }, 2));
            }
            if used {
                one.extend(sweep(2));
            } else {
                one.extend(sweep(2).into_iter().map(|l| LoopTrip {
                    trips: if l.depth == 2 { 0 } else { l.trips },
                    ..l
                }));
            }
        }
    }
    let mut out = one.clone();
    out.extend(one);
    out
}

// Registers held across the body.
const ARGS: AsmRegister64 = rdi;
const PB: AsmRegister64 = rsi;
const PA: [AsmRegister64; 3] = [r8, r9, r10];
const LDA4: AsmRegister64 = r11;
const LDA12: AsmRegister64 = r12;
const VSTRIDE: AsmRegister64 = r13;
const VSTRIDE3: AsmRegister64 = r14;
const BSTEP: AsmRegister64 = r15;
const ROW: AsmRegister64 = rbx;
const COL: AsmRegister64 = rbp;

// Stack slots (qwords from rsp).
const S_KB: i32 = 0;
const S_KC: i32 = 8;
const S_USE_C: i32 = 16;
const S_SCALE: i32 = 24;
const S_COL0: i32 = 32;
const S_JB: i32 = 40;
const S_JEND: i32 = 48;
// AVX2: α, the scale and the lane indices 0..8 as ymm-wide vectors.
const S_ALPHA8: i32 = 64;
const S_SCALE8: i32 = 96;
const S_IOTA8: i32 = 128;
const S_BUF: i32 = 160;
const S_KSTEP: i32 = 168;
const S_FULL: i32 = 176;
const FRAME: i32 = 192;

/// Bytes between two rows of the packed copy of A: a k block of floats
/// and one cache line more, so rows do not alias in L1 sets.
const PACKED_ROW: i32 = 4 * KC_X64 as i32 + 64;

/// The packed copy of A: 12 rows, and 64 bytes to align it.
const PACKED_BYTES: i32 = 12 * PACKED_ROW + 64;

/// A zmm with vector `v`'s opmask (k1..k4), zeroing.
fn masked_z(z: AsmRegisterZmm, v: usize) -> AsmRegisterZmm {
    [z.k1(), z.k2(), z.k3(), z.k4()][v].z()
}

/// A memory operand with vector `v`'s opmask (a masked store).
fn masked_m(m: AsmMemoryOperand, v: usize) -> AsmMemoryOperand {
    [m.k1(), m.k2(), m.k3(), m.k4()][v]
}

/// Registers of a tile: accumulators `0..rows·vectors` (≤ 24), B's
/// vectors from 24, the broadcasts of A in the rest below 30 (rotating, so
/// consecutive rows' loads do not wait on one register), α in 30 and the
/// first k block's scale in 31.
struct Zregs {
    vectors: usize,
}

impl Zregs {
    fn acc(&self, r: usize, v: usize) -> AsmRegisterZmm {
        ZMM[r * self.vectors + v]
    }
    fn b(&self, v: usize) -> AsmRegisterZmm {
        ZMM[24 + v]
    }
    fn t(&self, r: usize) -> AsmRegisterZmm {
        ZMM[24 + self.vectors + r % (6 - self.vectors)]
    }
    fn alpha(&self) -> AsmRegisterZmm {
        ZMM[30]
    }
    fn scale(&self) -> AsmRegisterZmm {
        ZMM[31]
    }
}

/// C's tile at (`ROW`, `COL`): its address in rax, C's row stride in
/// bytes in rdx.
fn c_tile(e: &mut Emitter) -> Result<(), EmitError> {
    let a = e.asm();
    a.mov(rax, qword_ptr(ARGS + offsets::LDC))?;
    a.imul_2(rax, ROW)?;
    a.add(rax, COL)?;
    a.shl(rax, 2)?;
    a.add(rax, qword_ptr(ARGS + offsets::C))?;
    a.mov(rdx, qword_ptr(ARGS + offsets::LDC))?;
    a.shl(rdx, 2)?;
    Ok(())
}

/// PB = B's vector at (kb, `COL`), kb from its slot: rows layout
/// `(kb · ldb + COL) · 4`; panels `((COL / 16) · k + kb) · 64 + (COL % 16)
/// · 4` (the last term is zero for a zmm tile, which starts on a panel;
/// a ymm tile may start half-way). Clobbers rax, rdx.
fn b_start(e: &mut Emitter, kind: ArmKind) -> Result<(), EmitError> {
    let a = e.asm();
    a.mov(rax, qword_ptr(rsp + S_KB))?;
    if kind.packs_b() {
        a.mov(PB, COL)?;
        a.shr(PB, 4)?;
        a.imul_2(PB, qword_ptr(ARGS + offsets::K))?;
        a.add(PB, rax)?;
        a.shl(PB, 6)?;
        a.mov(rdx, COL)?;
        a.and(rdx, 15)?;
        a.lea(PB, qword_ptr(PB + rdx * 4))?;
    } else {
        a.mov(PB, rax)?;
        a.imul_2(PB, qword_ptr(ARGS + offsets::LDB))?;
        a.add(PB, COL)?;
        a.shl(PB, 2)?;
    }
    a.add(PB, qword_ptr(ARGS + offsets::B))?;
    Ok(())
}

/// A's element `kk` of tile row `r` (the row pointers advance with `kk`).
fn a_elem(r: usize) -> AsmMemoryOperand {
    let base = PA[r / 4];
    match r % 4 {
        0 => dword_ptr(base),
        1 => dword_ptr(base + LDA4),
        2 => dword_ptr(base + LDA4 * 2),
        _ => dword_ptr(base + LDA12),
    }
}

/// B's vector `v` at the current `k` step.
fn b_vec(v: usize) -> AsmMemoryOperand {
    match v {
        0 => zmmword_ptr(PB),
        1 => zmmword_ptr(PB + VSTRIDE),
        2 => zmmword_ptr(PB + VSTRIDE * 2),
        _ => zmmword_ptr(PB + VSTRIDE3),
    }
}

/// Opmasks k1..k`vectors` for the column tile at `COL`: vector `v` keeps
/// columns `c` of `COL + 16v ..+16` with `n_start ≤ c < n_end`.
fn masks(e: &mut Emitter, vectors: usize) -> Result<(), EmitError> {
    let a = e.asm();
    for v in 0..vectors {
        // hi = clamp(n_end - c0, 0, 16), lo = clamp(n_start - c0, 0, 16)
        for (reg, field) in [(rax, offsets::N_END), (rdx, offsets::N_START)] {
            a.mov(reg, qword_ptr(ARGS + field))?;
            a.sub(reg, COL)?;
            a.sub(reg, 16 * v as i32)?;
            a.xor(ecx, ecx)?;
            a.test(reg, reg)?;
            a.cmovl(reg, rcx)?;
            a.mov(ecx, 16)?;
            a.cmp(reg, rcx)?;
            a.cmovg(reg, rcx)?;
        }
        // mask = ((1 << hi) - 1) & !((1 << lo) - 1)
        a.mov(ecx, eax)?;
        a.mov(eax, 1)?;
        a.shl(rax, cl)?;
        a.dec(rax)?;
        a.mov(ecx, edx)?;
        a.mov(edx, 1)?;
        a.shl(rdx, cl)?;
        a.dec(rdx)?;
        a.not(rdx)?;
        a.and(rax, rdx)?;
        let k = [k1, k2, k3, k4][v];
        a.kmovw(k, eax)?;
        // S_FULL: the AND of every vector's mask (0xffff: a whole tile).
        if v == 0 {
            a.mov(dword_ptr(rsp + S_FULL), eax)?;
        } else {
            a.and(dword_ptr(rsp + S_FULL), eax)?;
        }
    }
    Ok(())
}

/// One tile of `rows` rows at (`ROW`, `COL`): initialise, run the k block,
/// store. Returns the k loop's head and back-edge labels.
fn tile(
    e: &mut Emitter,
    kind: ArmKind,
    rows: usize,
    vectors: usize,
    alpha_one: bool,
) -> Result<(CodeLabel, CodeLabel), EmitError> {
    let z = Zregs { vectors };
    let mut zero_init = e.create_label();
    let mut loaded = e.create_label();
    e.asm().cmp(qword_ptr(rsp + S_USE_C), 0)?;
    e.asm().je(zero_init)?;
    c_tile(e)?;
    for r in 0..rows {
        for v in 0..vectors {
            e.asm().vmulps(
                masked_z(z.acc(r, v), v),
                z.scale(),
                zmmword_ptr(rax + 64 * v as i32),
            )?;
        }
        if r + 1 < rows {
            e.asm().add(rax, rdx)?;
        }
    }
    e.asm().jmp(loaded)?;
    e.set_label(&mut zero_init)?;
    for r in 0..rows {
        for v in 0..vectors {
            let acc = z.acc(r, v);
            e.asm().vpxord(acc, acc, acc)?;
        }
    }
    e.set_label(&mut loaded)?;

    // A's rows come from the sweep's packed copy (`pack_a`).
    e.asm().mov(PA[0], qword_ptr(rsp + S_BUF))?;
    b_start(e, kind)?;
    // The next column tile's C lines, fetched while this tile runs: its
    // rows are ldc apart (4 KiB in a 1024-wide C), which the hardware
    // prefetchers do not follow, and after the first k block they come
    // from L3 or DRAM, where waiting for them at the tile's start cost
    // about a tenth of a 1024³ call. A prefetch never faults, so one past
    // the last tile is harmless.
    c_tile(e)?;
    e.asm().add(rax, 64 * vectors as i32)?;
    for r in 0..rows {
        for v in 0..vectors {
            e.asm().prefetcht0(byte_ptr(rax + 64 * v as i32))?;
        }
        if r + 1 < rows {
            e.asm().add(rax, rdx)?;
        }
    }
    // Two copies of the k loop: B loaded whole when every column of the
    // tile is inside the rectangle, under the opmasks otherwise. A
    // zeroing-masked zmm load costs a uop on the FMA ports (p05) besides
    // the load, measured 6–9% of a 512³ or 1024³ call.
    let mut stored = e.create_label();
    let mut edge = e.create_label();
    e.asm().cmp(dword_ptr(rsp + S_FULL), 0xffff)?;
    e.asm().jne(edge)?;
    let labels = k_loop(e, &z, (kind, rows, vectors), alpha_one, false, None)?;
    e.asm().jmp(stored)?;
    e.set_label(&mut edge)?;
    k_loop(
        e,
        &z,
        (kind, rows, vectors),
        alpha_one,
        true,
        Some(&mut stored),
    )?;

    c_tile(e)?;
    for r in 0..rows {
        for v in 0..vectors {
            e.asm()
                .vmovups(masked_m(zmmword_ptr(rax + 64 * v as i32), v), z.acc(r, v))?;
        }
        if r + 1 < rows {
            e.asm().add(rax, rdx)?;
        }
    }
    Ok(labels)
}

/// `k` steps one trip of a tile's unmasked k loop takes when B is packed
/// (its step is then the constant 64 bytes of a panel line, so the steps
/// of one trip address B and A by displacement). Four steps a trip were
/// 2–4% faster than one at 512³ and 1024³ on a Golden Cove-class host
/// (fewer scalar uops beside the FMAs); a loop of single steps does the
/// `kc % 4` left, and the masked loop keeps single steps.
pub const K_UNROLL: u64 = 4;

/// The k loop of a tile: `kc` steps of B's vectors (whole, or under the
/// opmasks when `masked`) against each row's broadcast of packed A, in
/// trips of [`K_UNROLL`] steps when B is packed and the loop is unmasked,
/// then single steps. Ends at `done` if given (set here), else at a label
/// of its own. Returns the (first) loop's head and back edge.
fn k_loop(
    e: &mut Emitter,
    z: &Zregs,
    (kind, rows, vectors): (ArmKind, usize, usize),
    alpha_one: bool,
    masked: bool,
    done: Option<&mut CodeLabel>,
) -> Result<(CodeLabel, CodeLabel), EmitError> {
    let mut own = e.create_label();
    let done = match done {
        Some(d) => d,
        None => &mut own,
    };
    // One k step at `u` steps past the pointers.
    let step = |e: &mut Emitter, u: i32| -> Result<(), EmitError> {
        let a = e.asm();
        for v in 0..vectors {
            let b = b_vec(v) + 64 * u;
            if masked {
                a.vmovups(masked_z(z.b(v), v), b)?;
            } else {
                a.vmovups(z.b(v), b)?;
            }
        }
        for r in 0..rows {
            let t = z.t(r);
            a.vbroadcastss(t, dword_ptr(PA[0] + PACKED_ROW * r as i32 + 4 * u))?;
            if !alpha_one {
                a.vmulps(t, t, z.alpha())?;
            }
            for v in 0..vectors {
                a.vfmadd231ps(z.acc(r, v), z.b(v), t)?;
            }
        }
        Ok(())
    };
    // A counted loop of `steps` steps a trip over `rcx` trips.
    let counted = |e: &mut Emitter, steps: i32| -> Result<(CodeLabel, CodeLabel), EmitError> {
        let (mut head, mut back) = (e.create_label(), e.create_label());
        e.set_label(&mut head)?;
        for u in 0..steps {
            step(e, u)?;
        }
        e.asm().add(PA[0], 4 * steps)?;
        if steps == 1 {
            e.asm().add(PB, BSTEP)?;
        } else {
            e.asm().add(PB, 64 * steps)?;
        }
        e.asm().dec(rcx)?;
        e.set_label(&mut back)?;
        e.asm().jne(head)?;
        Ok((head, back))
    };
    e.asm().mov(rcx, qword_ptr(rsp + S_KC))?;
    if masked || !kind.packs_b() {
        e.asm().test(rcx, rcx)?;
        e.asm().je(*done)?;
        let labels = counted(e, 1)?;
        e.set_label(done)?;
        return Ok(labels);
    }
    let mut rest = e.create_label();
    e.asm().shr(rcx, K_UNROLL.trailing_zeros())?;
    e.asm().je(rest)?;
    let labels = counted(e, K_UNROLL as i32)?;
    e.set_label(&mut rest)?;
    e.asm().mov(rcx, qword_ptr(rsp + S_KC))?;
    e.asm().and(rcx, K_UNROLL as i32 - 1)?;
    e.asm().je(*done)?;
    counted(e, 1)?;
    e.set_label(done)?;
    Ok(labels)
}

/// Copy the k block of A's rows `ROW .. ROW + rows` into the stack
/// buffer, row `r` at `r · PACKED_ROW` bytes: 16 floats a step for every
/// row, then the `kc % 16` rest under k5. The tiles then broadcast A from
/// one pointer with constant displacements (no index register, so the
/// loads stay micro-fused) and from rows whose stride is not a multiple
/// of 4 KiB (rows of a 1024-wide A all fall in one L1 set otherwise).
fn pack_a(e: &mut Emitter, rows: usize) -> Result<(), EmitError> {
    let tmp = ZMM[29];
    let a = e.asm();
    a.mov(PA[0], ROW)?;
    a.imul_2(PA[0], LDA4)?;
    a.mov(rax, qword_ptr(rsp + S_KB))?;
    a.lea(PA[0], qword_ptr(PA[0] + rax * 4))?;
    a.add(PA[0], qword_ptr(ARGS + offsets::A))?;
    if rows > 4 {
        a.lea(PA[1], qword_ptr(PA[0] + LDA4 * 4))?;
    }
    if rows > 8 {
        a.lea(PA[2], qword_ptr(PA[1] + LDA4 * 4))?;
    }
    a.mov(rdx, qword_ptr(rsp + S_BUF))?;
    a.mov(rcx, qword_ptr(rsp + S_KC))?;
    a.shr(rcx, 4)?;
    let mut top = e.create_label();
    let mut done = e.create_label();
    e.asm().test(rcx, rcx)?;
    e.asm().je(done)?;
    e.set_label(&mut top)?;
    let a = e.asm();
    for r in 0..rows {
        let src = a_elem(r);
        a.vmovups(tmp, zmmword_ptr(src))?;
        a.vmovups(zmmword_ptr(rdx + PACKED_ROW * r as i32), tmp)?;
    }
    for pa in PA.iter().take(rows.div_ceil(4)) {
        a.add(*pa, 64)?;
    }
    a.add(rdx, 64)?;
    a.dec(rcx)?;
    a.jne(top)?;
    e.set_label(&mut done)?;
    // The rest: k5 = (1 << (kc % 16)) - 1.
    let a = e.asm();
    a.mov(rcx, qword_ptr(rsp + S_KC))?;
    a.and(ecx, 15)?;
    a.mov(eax, 1)?;
    a.shl(eax, cl)?;
    a.dec(eax)?;
    a.kmovw(k5, eax)?;
    for r in 0..rows {
        a.vmovups(tmp.k5().z(), zmmword_ptr(a_elem(r)))?;
        a.vmovups(zmmword_ptr(rdx + PACKED_ROW * r as i32).k5(), tmp)?;
    }
    Ok(())
}

/// The column tiles of one row tile of `rows` rows at `ROW`.
fn column_sweep(
    e: &mut Emitter,
    tier: Tier,
    kind: ArmKind,
    rows: usize,
    vectors: usize,
    alpha_one: bool,
) -> Result<(CodeLabel, CodeLabel), EmitError> {
    if tier == Tier::Avx2 {
        return avx2::column_sweep(e, kind, rows, alpha_one);
    }
    pack_a(e, rows)?;
    let mut top = e.create_label();
    let mut done = e.create_label();
    e.asm().mov(COL, qword_ptr(rsp + S_JB))?;
    e.set_label(&mut top)?;
    e.asm().cmp(COL, qword_ptr(rsp + S_JEND))?;
    e.asm().jae(done)?;
    masks(e, vectors)?;
    let labels = tile(e, kind, rows, vectors, alpha_one)?;
    e.asm().add(COL, 16 * vectors as i32)?;
    e.asm().jmp(top)?;
    e.set_label(&mut done)?;
    Ok(labels)
}

/// The body for one α mode: k blocks, row tiles (full, then 8/4/2/1),
/// column sweeps.
fn body(
    e: &mut Emitter,
    tier: Tier,
    kind: ArmKind,
    (rows, vectors): (usize, usize),
    alpha_one: bool,
    exit: CodeLabel,
) -> Result<(CodeLabel, CodeLabel), EmitError> {
    let z = Zregs { vectors };
    let mut kb_top = e.create_label();
    let mut later = e.create_label();
    let mut scaled = e.create_label();
    e.asm().mov(qword_ptr(rsp + S_KB), 0)?;
    e.set_label(&mut kb_top)?;
    {
        let a = e.asm();
        // kc = min(k - kb, the balanced step)
        a.mov(rax, qword_ptr(ARGS + offsets::K))?;
        a.sub(rax, qword_ptr(rsp + S_KB))?;
        a.mov(rcx, qword_ptr(rsp + S_KSTEP))?;
        a.cmp(rax, rcx)?;
        a.cmova(rax, rcx)?;
        a.mov(qword_ptr(rsp + S_KC), rax)?;
        // First block: scale β, use C iff β ≠ 0. Later: scale 1, use C.
        a.cmp(qword_ptr(rsp + S_KB), 0)?;
        a.jne(later)?;
        a.mov(eax, dword_ptr(ARGS + offsets::BETA))?;
        a.mov(dword_ptr(rsp + S_SCALE), eax)?;
        a.and(eax, 0x7fff_ffff)?;
        a.mov(qword_ptr(rsp + S_USE_C), rax)?;
        a.jmp(scaled)?;
    }
    e.set_label(&mut later)?;
    e.asm().mov(dword_ptr(rsp + S_SCALE), 0x3f80_0000)?;
    e.asm().mov(qword_ptr(rsp + S_USE_C), 1)?;
    e.set_label(&mut scaled)?;
    match tier {
        Tier::Avx512 => e.asm().vbroadcastss(z.scale(), dword_ptr(rsp + S_SCALE))?,
        Tier::Avx2 => {
            e.asm().vbroadcastss(YMM[15], dword_ptr(rsp + S_SCALE))?;
            e.asm().vmovups(ymmword_ptr(rsp + S_SCALE8), YMM[15])?;
        }
    }
    // Column blocks of NC_X64 from the first tile's column.
    let mut jb_top = e.create_label();
    e.asm().mov(rax, qword_ptr(rsp + S_COL0))?;
    e.asm().mov(qword_ptr(rsp + S_JB), rax)?;
    e.set_label(&mut jb_top)?;
    {
        let a = e.asm();
        a.mov(rax, qword_ptr(rsp + S_JB))?;
        a.add(rax, NC_X64 as i32)?;
        a.mov(rcx, qword_ptr(ARGS + offsets::N_END))?;
        a.cmp(rax, rcx)?;
        a.cmova(rax, rcx)?;
        a.mov(qword_ptr(rsp + S_JEND), rax)?;
        a.mov(ROW, qword_ptr(ARGS + offsets::M_START))?;
    }

    // Full row tiles.
    let mut rtop = e.create_label();
    let mut rdone = e.create_label();
    e.set_label(&mut rtop)?;
    e.asm().mov(rax, qword_ptr(ARGS + offsets::M_END))?;
    e.asm().sub(rax, ROW)?;
    e.asm().cmp(rax, rows as i32)?;
    e.asm().jb(rdone)?;
    let labels = column_sweep(e, tier, kind, rows, vectors, alpha_one)?;
    e.asm().add(ROW, rows as i32)?;
    e.asm().jmp(rtop)?;
    e.set_label(&mut rdone)?;
    // Leftover rows: 8, 4, 2, 1 (each at most once: fewer than `rows` ≤ 12 remain).
    for h in [8usize, 4, 2, 1] {
        if h >= rows {
            continue;
        }
        let mut skip = e.create_label();
        e.asm().mov(rax, qword_ptr(ARGS + offsets::M_END))?;
        e.asm().sub(rax, ROW)?;
        e.asm().cmp(rax, h as i32)?;
        e.asm().jb(skip)?;
        column_sweep(e, tier, kind, h, vectors, alpha_one)?;
        e.asm().add(ROW, h as i32)?;
        e.set_label(&mut skip)?;
    }
    // Next column block.
    let a = e.asm();
    a.mov(rax, qword_ptr(rsp + S_JEND))?;
    a.mov(qword_ptr(rsp + S_JB), rax)?;
    a.cmp(rax, qword_ptr(ARGS + offsets::N_END))?;
    a.jb(jb_top)?;
    // Next k block (a do-while: k = 0 runs one block of depth 0).
    a.mov(rax, qword_ptr(rsp + S_KB))?;
    a.add(rax, qword_ptr(rsp + S_KSTEP))?;
    a.mov(qword_ptr(rsp + S_KB), rax)?;
    a.cmp(rax, qword_ptr(ARGS + offsets::K))?;
    a.jb(kb_top)?;
    a.jmp(exit)?;
    Ok(labels)
}

fn emit(
    tier: Tier,
    kind: ArmKind,
    tile: (usize, usize),
    abi: Abi,
) -> Result<(weft_x64::Emitted, CodeLabel, CodeLabel), EmitError> {
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
    match tier {
        Tier::Avx512 => ZMM.iter().for_each(|z| clobbers = clobbers.with(*z)),
        Tier::Avx2 => YMM[..16].iter().for_each(|y| clobbers = clobbers.with(*y)),
    }
    e.prologue(clobbers)?;
    if e.args_reg() != ARGS {
        let from = e.args_reg();
        e.asm().mov(ARGS, from)?;
    }
    // The frame, and (AVX-512) the packed copy of A above it, probed a
    // page at a time downwards so a guard page below the stack is hit
    // in order, never jumped over.
    let frame = FRAME
        + if tier == Tier::Avx512 {
            PACKED_BYTES
        } else {
            0
        };
    e.asm().sub(rsp, frame)?;
    for off in (0..frame).step_by(4096).rev() {
        e.asm().or(qword_ptr(rsp + off), 0)?;
    }
    if tier == Tier::Avx512 {
        e.asm().lea(rax, qword_ptr(rsp + FRAME + 63))?;
        e.asm().and(rax, -64)?;
        e.asm().mov(qword_ptr(rsp + S_BUF), rax)?;
    }
    let mut exit = e.create_label();
    let mut general = e.create_label();
    let mut kstep_done = e.create_label();
    let (_, vectors) = tile;
    {
        let a = e.asm();
        // No early exit for an empty rectangle: its row loops run zero
        // times, or its column tiles are masked to nothing (nothing of C
        // is read or written either way); a branch here would only halve
        // the cost model's estimate of how often the body runs.
        a.mov(rax, qword_ptr(ARGS + offsets::N_START))?;
        // Column tiles start at n_start, or (panels) where the vector
        // that holds it starts: its panel (zmm) or half panel (ymm).
        if kind.packs_b() {
            a.and(rax, if tier == Tier::Avx2 { -8 } else { -16 })?;
        }
        a.mov(qword_ptr(rsp + S_COL0), rax)?;
        // The k step: k split into `k_blocks(k)` blocks of equal depth (the
        // last up to one less), so no block is a short tail whose tiles pay
        // their C loads and stores for a few steps (k = 576: three of 192,
        // not 256 + 256 + 64). k = 0 takes KC_SHORT (one empty block).
        let mut counted = e.create_label();
        let a = e.asm();
        a.mov(rax, qword_ptr(ARGS + offsets::K))?;
        a.lea(rcx, qword_ptr(rax + (KC_SHORT as i32 - 1)))?;
        a.shr(rcx, KC_SHORT.trailing_zeros())?;
        a.cmp(rcx, 3)?;
        a.jbe(counted)?;
        a.lea(rcx, qword_ptr(rax + (KC_X64 as i32 - 1)))?;
        a.shr(rcx, KC_X64.trailing_zeros())?;
        e.set_label(&mut counted)?;
        let a = e.asm();
        a.mov(qword_ptr(rsp + S_KSTEP), KC_SHORT as i32)?;
        a.test(rcx, rcx)?;
        a.je(kstep_done)?;
        a.lea(rax, qword_ptr(rax + rcx - 1))?;
        a.xor(edx, edx)?;
        a.div(rcx)?;
        a.mov(qword_ptr(rsp + S_KSTEP), rax)?;
        e.set_label(&mut kstep_done)?;
        let a = e.asm();
        a.mov(LDA4, qword_ptr(ARGS + offsets::LDA))?;
        a.shl(LDA4, 2)?;
        a.lea(LDA12, qword_ptr(LDA4 + LDA4 * 2))?;
        if kind.packs_b() {
            // A zmm is one panel line: vectors are panels, k · 64 bytes apart.
            a.mov(VSTRIDE, qword_ptr(ARGS + offsets::K))?;
            a.shl(VSTRIDE, 6)?;
            a.mov(BSTEP, 64u64)?;
        } else {
            a.mov(VSTRIDE, 64u64)?;
            a.mov(BSTEP, qword_ptr(ARGS + offsets::LDB))?;
            a.shl(BSTEP, 2)?;
        }
        a.lea(VSTRIDE3, qword_ptr(VSTRIDE + VSTRIDE * 2))?;
        match tier {
            Tier::Avx512 => {
                a.vbroadcastss(Zregs { vectors }.alpha(), dword_ptr(ARGS + offsets::ALPHA))?
            }
            Tier::Avx2 => {
                a.vbroadcastss(YMM[15], dword_ptr(ARGS + offsets::ALPHA))?;
                a.vmovups(ymmword_ptr(rsp + S_ALPHA8), YMM[15])?;
                for l in 0..8 {
                    a.mov(dword_ptr(rsp + S_IOTA8 + 4 * l), l as u32)?;
                }
            }
        }
        a.cmp(dword_ptr(ARGS + offsets::ALPHA), 0x3f80_0000)?;
        a.jne(general)?;
    }
    let (head, back) = body(&mut e, tier, kind, tile, true, exit)?;
    e.set_label(&mut general)?;
    body(&mut e, tier, kind, tile, false, exit)?;
    e.set_label(&mut exit)?;
    e.asm().add(rsp, frame)?;
    e.epilogue()?;
    Ok((e.finish()?, head, back))
}

/// The AVX2 tier's column sweep and tiles (module docs of the tier above).
mod avx2 {
    use super::*;

    /// Three loops, so each has its own trip count: masked `rows × 8`
    /// tiles until a whole tile may start (at `n_start`, and for panels
    /// on a panel's first column: at most one tile), whole `rows × 16`
    /// tiles while one fits, masked tiles for the rest (at most two).
    pub(super) fn column_sweep(
        e: &mut Emitter,
        kind: ArmKind,
        rows: usize,
        alpha_one: bool,
    ) -> Result<(CodeLabel, CodeLabel), EmitError> {
        e.asm().mov(COL, qword_ptr(rsp + S_JB))?;
        // The head: masked tiles while COL < n_start or (panels) COL is
        // in a panel's second half, inside the block.
        let mut head_top = e.create_label();
        // `top` (whole tiles) and `tail_top` follow the loops before them
        // directly: those loops exit by jumping there.
        let mut top = e.create_label();
        let mut tail_top = e.create_label();
        e.set_label(&mut head_top)?;
        {
            let a = e.asm();
            a.cmp(COL, qword_ptr(rsp + S_JEND))?;
            a.jae(top)?;
            a.xor(eax, eax)?;
            a.cmp(COL, qword_ptr(ARGS + offsets::N_START))?;
            a.setb(weft_x64::iced_x86::code_asm::al)?;
            if kind.packs_b() {
                a.mov(rdx, COL)?;
                a.and(edx, 8)?;
                a.or(rax, rdx)?;
            }
            a.test(rax, rax)?;
            a.je(top)?;
        }
        mask(e)?;
        tile(e, kind, rows, alpha_one, true)?;
        e.asm().add(COL, 8)?;
        e.asm().jmp(head_top)?;
        // Whole tiles.
        e.set_label(&mut top)?;
        {
            let a = e.asm();
            a.mov(rax, qword_ptr(rsp + S_JEND))?;
            a.sub(rax, COL)?;
            a.cmp(rax, 16)?;
            a.jl(tail_top)?;
        }
        let labels = tile(e, kind, rows, alpha_one, false)?;
        e.asm().add(COL, 16)?;
        e.asm().jmp(top)?;
        // The tail.
        let mut tail_done = e.create_label();
        e.set_label(&mut tail_top)?;
        e.asm().cmp(COL, qword_ptr(rsp + S_JEND))?;
        e.asm().jae(tail_done)?;
        mask(e)?;
        tile(e, kind, rows, alpha_one, true)?;
        e.asm().add(COL, 8)?;
        e.asm().jmp(tail_top)?;
        e.set_label(&mut tail_done)?;
        Ok(labels)
    }

    /// ymm15 = lanes `l` of the 8 columns at `COL` with
    /// `n_start ≤ COL + l < n_end` (all ones), others zero.
    fn mask(e: &mut Emitter) -> Result<(), EmitError> {
        let a = e.asm();
        a.mov(rax, qword_ptr(ARGS + offsets::N_END))?;
        a.sub(rax, COL)?;
        a.mov(rdx, qword_ptr(ARGS + offsets::N_START))?;
        a.sub(rdx, COL)?;
        // Clamp both to [-1, 8] so they fit a dword compare.
        for r in [rax, rdx] {
            a.mov(rcx, -1i64)?;
            a.cmp(r, rcx)?;
            a.cmovl(r, rcx)?;
            a.mov(ecx, 8)?;
            a.cmp(r, rcx)?;
            a.cmovg(r, rcx)?;
        }
        a.vmovd(XMM[12], eax)?;
        a.vpbroadcastd(YMM[12], XMM[12])?;
        a.vmovd(XMM[13], edx)?;
        a.vpbroadcastd(YMM[13], XMM[13])?;
        a.vmovups(YMM[14], ymmword_ptr(rsp + S_IOTA8))?;
        a.vpcmpgtd(YMM[12], YMM[12], YMM[14])?; // hi > l
        a.vpcmpgtd(YMM[13], YMM[13], YMM[14])?; // lo > l
        a.vpandn(YMM[15], YMM[13], YMM[12])?;
        Ok(())
    }

    /// One tile at (`ROW`, `COL`): `rows × 16` from registers, or (masked)
    /// `rows × 8` under the mask in ymm15. Accumulators ymm0..12, B in
    /// ymm12/13, the broadcast in ymm14.
    fn tile(
        e: &mut Emitter,
        kind: ArmKind,
        rows: usize,
        alpha_one: bool,
        masked: bool,
    ) -> Result<(CodeLabel, CodeLabel), EmitError> {
        let vectors = if masked { 1 } else { 2 };
        let acc = |r: usize, v: usize| YMM[r * vectors + v];
        let (t, msk) = (YMM[14], YMM[15]);
        let mut zero_init = e.create_label();
        let mut loaded = e.create_label();
        e.asm().cmp(qword_ptr(rsp + S_USE_C), 0)?;
        e.asm().je(zero_init)?;
        c_tile(e)?;
        e.asm().vmovups(t, ymmword_ptr(rsp + S_SCALE8))?;
        for r in 0..rows {
            for v in 0..vectors {
                let a = e.asm();
                if masked {
                    a.vmaskmovps(acc(r, v), msk, ymmword_ptr(rax))?;
                    a.vmulps(acc(r, v), t, acc(r, v))?;
                } else {
                    a.vmulps(acc(r, v), t, ymmword_ptr(rax + 32 * v as i32))?;
                }
            }
            if r + 1 < rows {
                e.asm().add(rax, rdx)?;
            }
        }
        e.asm().jmp(loaded)?;
        e.set_label(&mut zero_init)?;
        for r in 0..rows {
            for v in 0..vectors {
                e.asm().vxorps(acc(r, v), acc(r, v), acc(r, v))?;
            }
        }
        e.set_label(&mut loaded)?;
        {
            let a = e.asm();
            a.mov(PA[0], ROW)?;
            a.imul_2(PA[0], LDA4)?;
            a.mov(rax, qword_ptr(rsp + S_KB))?;
            a.lea(PA[0], qword_ptr(PA[0] + rax * 4))?;
            a.add(PA[0], qword_ptr(ARGS + offsets::A))?;
            if rows > 4 {
                a.lea(PA[1], qword_ptr(PA[0] + LDA4 * 4))?;
            }
        }
        b_start(e, kind)?;
        e.asm().mov(rcx, qword_ptr(rsp + S_KC))?;
        let mut head = e.create_label();
        let mut back = e.create_label();
        let mut done = e.create_label();
        e.asm().test(rcx, rcx)?;
        e.asm().je(done)?;
        e.set_label(&mut head)?;
        {
            let a = e.asm();
            if masked {
                a.vmaskmovps(YMM[12], msk, ymmword_ptr(PB))?;
            } else {
                a.vmovups(YMM[12], ymmword_ptr(PB))?;
                a.vmovups(YMM[13], ymmword_ptr(PB + 32))?;
            }
            for r in 0..rows {
                a.vbroadcastss(t, a_elem(r))?;
                if !alpha_one {
                    a.vmulps(t, t, ymmword_ptr(rsp + S_ALPHA8))?;
                }
                for v in 0..vectors {
                    a.vfmadd231ps(acc(r, v), YMM[12 + v], t)?;
                }
            }
            for pa in PA.iter().take(rows.div_ceil(4)) {
                a.add(*pa, 4)?;
            }
            a.add(PB, BSTEP)?;
            a.dec(rcx)?;
        }
        e.set_label(&mut back)?;
        e.asm().jne(head)?;
        e.set_label(&mut done)?;
        c_tile(e)?;
        for r in 0..rows {
            for v in 0..vectors {
                let a = e.asm();
                if masked {
                    a.vmaskmovps(ymmword_ptr(rax), msk, acc(r, v))?;
                } else {
                    a.vmovups(ymmword_ptr(rax + 32 * v as i32), acc(r, v))?;
                }
            }
            if r + 1 < rows {
                e.asm().add(rax, rdx)?;
            }
        }
        Ok((head, back))
    }
}
