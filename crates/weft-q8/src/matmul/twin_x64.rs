//! x64 twins of `q8_0.matmul`: AVX-512 VNNI outer-product tiles over the
//! `q8_0.panel16` layout, emitted through weft-x64.
//!
//! A **tile** is `R` panels (16 rows each, one zmm of i32 or f32 lanes)
//! × `T` vectors. Per block and group `g` of four quants, each panel's 64
//! packed bytes are loaded once and each vector's four quants are
//! broadcast once (`vpbroadcastd`), then `R · T` `vpdpbusd` multiply the
//! biased weights by the broadcast: the whole of a register's 64 byte
//! products is useful work, and nothing is reduced across lanes. Per block
//! each (panel, vector) then costs the contract's float part and nothing
//! else: `vcvtdq2ps`, `vmulps` (panel scales × the vector's scale,
//! broadcast from memory) and one `vfmadd231ps` — three operations per
//! eight `vpdpbusd`.
//!
//! The integer accumulators start each block at `-128 · Σx` (the bias
//! correction: `Σ (w + 128) · x − 128 · Σx = Σ w · x`), broadcast from a
//! **scratch** table the call builds first: for each vector and block, the
//! correction (i32) and the scale widened to f32 (`vcvtph2ps`, exact; it
//! quietens a signalling NaN, which the contract's NaN class rule allows).
//! The table lives in the body's stack frame ([`SCRATCH_BYTES`], probed a
//! page at a time); when a batch's table would not fit, the vectors are
//! taken in chunks that do.
//!
//! Loop order: per chunk of vectors, panel groups outside, vector tiles
//! inside, blocks innermost: a group's panels (`R · 576` bytes a block)
//! stay in L1/L2 while every tile of the chunk reads them. Panel groups of
//! `R` while at least `R` panels remain, then one group of the rest; tiles
//! of `T` vectors, then one tile of the rest. Every tile shape is its own
//! straight-line block loop. Stores are masked (`k1..kR`) to the rows in
//! `row_start..row_end`, so any range is served, padding rows included.
//!
//! Frame: SysV or Win64 ([`Q8MatmulX64::with_abi`]); the argument pointer
//! is moved to `rdi`; the façade saves the callee-saved registers the body
//! uses.

use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};
use weft_x64::iced_x86::code_asm::{
    dword_ptr, eax, ecx, k1, k2, k3, qword_ptr, r10, r11, r12, r13, r14, r15, r8, r8d, r9, rax,
    rbp, rbx, rcx, rdi, rdx, rsi, rsp, word_ptr, zmmword_ptr, AsmMemoryOperand, AsmRegister64,
    AsmRegisterK, CodeLabel,
};
use weft_x64::regs::{XMM, YMM, ZMM};
use weft_x64::{Abi, Clobbers, EmitError, Emitter};

use super::super::{offsets, BLOCK_BYTES};
use crate::twin_x64::{loop_back, loop_head, native_code, Mark};

use super::{dims, GROUPS, GROUP_BYTES, PANEL_BLOCK_BYTES, QUANTS_AT};

/// One x64 twin of the panel arm: tiles of `panels` panels × `vecs`
/// vectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Q8MatmulX64 {
    panels: u8,
    vecs: u8,
    abi: Abi,
}

/// Every twin this module offers: 48 rows × 4 vectors and 32 rows × 6
/// vectors (both fill the 32 zmm: `2 · R · T` accumulators, `R` panel
/// registers, a broadcast and a temporary).
pub const TWINS: [Q8MatmulX64; 2] = [Q8MatmulX64::new(3, 4), Q8MatmulX64::new(2, 6)];

const FEATURES: &[Feature] = &[
    Feature::Avx,
    Feature::Avx2,
    Feature::Fma,
    Feature::F16c,
    Feature::Avx512f,
    Feature::Avx512bw,
    Feature::Avx512vl,
    Feature::Avx512vnni,
];

/// Bytes of the scratch table in the frame: 8 per vector and block.
pub const SCRATCH_BYTES: i32 = 64 * 1024;

/// Bytes of one scratch entry: the correction (i32), the scale (f32).
const ENTRY: i32 = 8;

impl Q8MatmulX64 {
    /// The twin with tiles of `panels` × `vecs` (refused at emit time
    /// unless `1 ≤ panels ≤ 3`, `1 ≤ vecs ≤ 6` and the tile's registers
    /// fit the 32 zmm), for the host's calling convention.
    pub const fn new(panels: u8, vecs: u8) -> Self {
        Self {
            panels,
            vecs,
            abi: Abi::host(),
        }
    }

    /// The same twin entered with `abi` (to test Win64 on Linux).
    pub const fn with_abi(self, abi: Abi) -> Self {
        Self { abi, ..self }
    }

    fn shape(&self) -> Result<(usize, usize), Refusal> {
        let (r, t) = (usize::from(self.panels), usize::from(self.vecs));
        if (1..=3).contains(&r) && (1..=6).contains(&t) && 2 * r * t + r + 2 <= 32 {
            Ok((r, t))
        } else {
            Err(Refusal::EmitError {
                message: format!("no {r} × {t} tile fits the 32 zmm registers"),
            })
        }
    }

    /// Emit the body (independent of the geometry: any rows, blocks and
    /// batch the arguments name whose blocks fit the scratch table).
    pub fn emit_body(&self) -> Result<weft_x64::Emitted, Refusal> {
        Ok(self.emit_marked()?.0)
    }

    fn emit_marked(&self) -> Result<(weft_x64::Emitted, Vec<Mark>), Refusal> {
        let (r, t) = self.shape()?;
        let (emitted, mut marks) = emit(r, t, self.abi).map_err(|e| Refusal::EmitError {
            message: e.to_string(),
        })?;
        let names = self.loop_names();
        marks.sort_by_key(|m| names.iter().position(|(n, _)| *n == m.name));
        Ok((emitted, marks))
    }

    /// This twin's loops, outermost first: name, depth and what it walks.
    fn loops(&self) -> Vec<(String, u32, Walk)> {
        let (r, t) = (self.panels, self.vecs);
        let mut v = vec![
            ("chunks".to_owned(), 0, Walk::Chunks),
            ("scratch.vectors".to_owned(), 1, Walk::ChunkVectors),
            ("scratch.blocks".to_owned(), 2, Walk::Blocks),
        ];
        for p in (1..=r).rev() {
            // The full-R groups loop; a last group of fewer panels runs once.
            let d = if p == r {
                v.push((format!("p{p}.groups"), 1, Walk::Groups));
                1
            } else {
                0
            };
            v.push((format!("p{p}.tiles"), 1 + d, Walk::Tiles(p)));
            v.push((format!("p{p}v{t}.blocks"), 2 + d, Walk::TileBlocks(p, t)));
            for u in (1..t).rev() {
                v.push((format!("p{p}v{u}.blocks"), 1 + d, Walk::TileBlocks(p, u)));
            }
        }
        v
    }

    /// The loops' names, outermost first, with their depths.
    fn loop_names(&self) -> Vec<(String, u32)> {
        self.loops().into_iter().map(|(n, d, _)| (n, d)).collect()
    }
}

/// What one of the body's loops walks (its trips follow from the geometry).
#[derive(Clone, Copy, Debug)]
enum Walk {
    /// Chunks of vectors.
    Chunks,
    /// The vectors of a chunk.
    ChunkVectors,
    /// Blocks (of a row or of a vector).
    Blocks,
    /// Groups of `R` panels.
    Groups,
    /// Full tiles of a group of `p` panels.
    Tiles(u8),
    /// The blocks of a `p`-panel × `u`-vector tile.
    TileBlocks(u8, u8),
}

/// Vectors per chunk for `blocks` blocks: as many as the scratch table
/// holds (0 when one vector's entries do not fit).
pub fn chunk_vectors(blocks: u64) -> u64 {
    (SCRATCH_BYTES as u64 / ENTRY as u64)
        .checked_div(blocks)
        .unwrap_or(0)
}

fn name_of(p: u8, t: u8) -> &'static str {
    match (p, t) {
        (3, 4) => "q8_0.matmul.twin.avx512vnni.p3v4",
        (2, 6) => "q8_0.matmul.twin.avx512vnni.p2v6",
        _ => "q8_0.matmul.twin.avx512vnni",
    }
}

// SAFETY: the body reads only the panels meeting row_start..row_end, the
// `batch` vectors' blocks and its own frame, writes only its frame and the
// outputs of rows in the range (masked stores), and returns (module
// docs); validation checks its results against the arm.
unsafe impl Twin for Q8MatmulX64 {
    fn name(&self) -> &'static str {
        name_of(self.panels, self.vecs)
    }

    fn isa(&self) -> Isa {
        Isa::X86_64
    }

    fn requires(&self) -> &'static [Feature] {
        FEATURES
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        super::arm::check_offer(offer, self.name())?;
        let (_, cols, _) = dims(&offer.contract.geometry)?;
        if chunk_vectors(cols / 32) == 0 {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!(
                    "{}: one vector's {} scratch entries exceed {SCRATCH_BYTES} bytes",
                    self.name(),
                    cols / 32
                ),
            });
        }
        let (emitted, marks) = self.emit_marked()?;
        native_code(emitted, &marks, self.name())
    }

    /// Chunks of vectors outermost ([`chunk_vectors`] a chunk, the last
    /// the rest), each building its scratch (`vectors × blocks`), then
    /// groups of `R` panels (`pR.groups`), each with the chunk's full
    /// tiles of `T` (`pR.tiles`, each a `pRvT.blocks` loop) and at most
    /// one tile of its rest (`pRvU.blocks`); then one group of the
    /// `panels % R` rest with the same tiles. Per-chunk trips are the
    /// chunks' means. Trips are at the offer's whole geometry (a member
    /// view runs a sub-range of the panels).
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        let g = &offer.contract.geometry;
        let rows = g.get("rows").unwrap_or(0);
        let blocks = g.get("cols").unwrap_or(0) / 32;
        let batch = g.get("batch").unwrap_or(1);
        let (r, t) = (u64::from(self.panels), u64::from(self.vecs));
        let chunk = chunk_vectors(blocks).clamp(1, batch.max(1));
        let chunks = batch.max(1).div_ceil(chunk);
        // Chunks are full but the last: a loop's trips are per entry, so
        // a chunk's vectors and full tiles are the chunks' mean (rounded),
        // which keeps the call's totals right when the last is short.
        let last = batch.max(1) - (chunks - 1) * chunk;
        let mean = |total: u64| (total + chunks / 2) / chunks;
        let tiles = mean((chunks - 1) * (chunk / t) + last / t);
        let panels = rows.div_ceil(16);
        // Whether the group of `p` panels runs: the full groups while
        // `R` remain, a last one of the `panels % R` rest.
        let runs = |p: u8| {
            let p = u64::from(p);
            if p == r {
                panels >= r
            } else {
                panels % r == p
            }
        };
        self.loops()
            .into_iter()
            .map(|(name, depth, walk)| {
                let trips = match walk {
                    Walk::Chunks => chunks,
                    Walk::ChunkVectors => mean(batch.max(1)),
                    Walk::Blocks => blocks,
                    Walk::Groups => panels / r,
                    Walk::Tiles(p) if runs(p) => tiles,
                    Walk::TileBlocks(p, u)
                        if runs(p)
                            && (u64::from(u) == t
                                || (chunks > 1 && chunk % t == u64::from(u))
                                || last % t == u64::from(u)) =>
                    {
                        blocks
                    }
                    Walk::Tiles(_) | Walk::TileBlocks(..) => 0,
                };
                LoopTrip { name, trips, depth }
            })
            .collect()
    }
}

// ---------------------------------------------------------------- body ---

const ARGS: AsmRegister64 = rdi;
const BLOCKS: AsmRegister64 = rsi;
/// Bytes between two panels: `blocks · 576`.
const PSTR: AsmRegister64 = rbx;
/// Bytes between two vectors of x: `blocks · 34`.
const VB: AsmRegister64 = rbp;
/// `3 · VB`.
const VB3: AsmRegister64 = r11;
/// Bytes between two blocks' rows of the scratch table: `chunk · 8`.
const SSTR: AsmRegister64 = rdx;
/// Bytes between two vectors of y: `rows · 4`.
const R4: AsmRegister64 = r10;
/// `3 · R4`.
const R43: AsmRegister64 = r9;
const YT: AsmRegister64 = r12;
const PS: AsmRegister64 = r13;
const PW: AsmRegister64 = r14;
const PX: AsmRegister64 = r15;
/// x of the tile's fourth vector on (`PX + 3 · VB`).
const PX2: AsmRegister64 = r8;
const COUNT: AsmRegister64 = rcx;

// Frame slots, from rsp.
const S_N0: i32 = 0; // first vector of the chunk
const S_NC: i32 = 8; // vectors in the chunk
const S_P: i32 = 16; // first panel of the group
const S_PEND: i32 = 24; // one past the last panel meeting the range
const S_T: i32 = 32; // first vector of the tile, within the chunk
const S_C: i32 = 40; // vectors per chunk
const S_BUF: i32 = 48; // the scratch table's address
const FRAME: i32 = 64 + SCRATCH_BYTES + 64;

fn slot(off: i32) -> AsmMemoryOperand {
    qword_ptr(rsp + off)
}

fn arg(off: i32) -> AsmMemoryOperand {
    qword_ptr(ARGS + off)
}

fn mask(r: usize) -> AsmRegisterK {
    [k1, k2, k3][r]
}

fn emit(r: usize, t: usize, abi: Abi) -> Result<(weft_x64::Emitted, Vec<Mark>), EmitError> {
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
    if e.args_reg() != ARGS {
        let from = e.args_reg();
        e.asm().mov(ARGS, from)?;
    }
    let mut marks = Vec::new();
    e.evex(|e| body(e, &mut marks, r, t))?;
    e.epilogue()?;
    Ok((e.finish()?, marks))
}

fn body(e: &mut Emitter, marks: &mut Vec<Mark>, r: usize, t: usize) -> Result<(), EmitError> {
    let mut exit = e.create_label();
    let mut done = e.create_label();
    let a = e.asm();
    // An empty range reads and writes nothing.
    a.mov(rax, arg(offsets::ROW_START))?;
    a.cmp(rax, arg(offsets::ROW_END))?;
    a.jae(exit)?;
    a.mov(BLOCKS, arg(offsets::BLOCKS))?;
    // Vectors per chunk; none fit: nothing is computed (emit refuses such
    // geometries, so a planned call never gets here).
    a.mov(eax, SCRATCH_BYTES / ENTRY)?;
    a.xor(ecx, ecx)?;
    a.mov(rdx, rcx)?;
    a.div(BLOCKS)?;
    a.test(rax, rax)?;
    a.je(exit)?;
    // The frame, probed a page at a time downwards.
    a.sub(rsp, FRAME)?;
    for off in (0..FRAME).step_by(4096).rev() {
        e.asm().or(qword_ptr(rsp + off), 0)?;
    }
    let a = e.asm();
    a.mov(slot(S_C), rax)?;
    a.lea(rax, qword_ptr(rsp + 64 + 63))?;
    a.and(rax, -64)?;
    a.mov(slot(S_BUF), rax)?;
    a.imul_3(PSTR, BLOCKS, PANEL_BLOCK_BYTES as i32)?;
    a.imul_3(VB, BLOCKS, BLOCK_BYTES as i32)?;
    a.lea(VB3, VB + VB * 2)?;
    a.mov(R4, arg(offsets::ROWS))?;
    a.shl(R4, 2)?;
    a.lea(R43, R4 + R4 * 2)?;
    a.mov(rax, arg(offsets::ROW_END))?;
    a.add(rax, 15)?;
    a.shr(rax, 4)?;
    a.mov(slot(S_PEND), rax)?;
    a.mov(qword_ptr(rsp + S_N0), 0)?;

    let chunks = loop_head(e, "chunks".to_owned())?;
    let top = chunks.head;
    let a = e.asm();
    a.mov(rax, arg(offsets::BATCH))?;
    a.sub(rax, slot(S_N0))?;
    a.jbe(done)?;
    a.cmp(rax, slot(S_C))?;
    a.cmova(rax, slot(S_C))?;
    a.mov(slot(S_NC), rax)?;
    a.lea(SSTR, qword_ptr(rax * 8))?;
    scratch(e, marks)?;

    // Panel groups of r, then one of the rest.
    let a = e.asm();
    a.mov(rax, arg(offsets::ROW_START))?;
    a.shr(rax, 4)?;
    a.mov(slot(S_P), rax)?;
    // Labels that would fall on one instruction are one label.
    let mut next_chunk = e.create_label();
    let mut rest = if r > 1 { e.create_label() } else { next_chunk };
    let groups = loop_head(e, format!("p{r}.groups"))?;
    let gtop = groups.head;
    let a = e.asm();
    a.mov(rax, slot(S_PEND))?;
    a.sub(rax, slot(S_P))?;
    a.cmp(rax, r as i32)?;
    a.jb(rest)?;
    let mut after = e.create_label();
    section(e, marks, r, t, after)?;
    e.set_label(&mut after)?;
    e.asm().add(qword_ptr(rsp + S_P), r as i32)?;
    loop_back(e, groups, marks)?;
    e.asm().jmp(gtop)?;
    if r > 1 {
        e.set_label(&mut rest)?;
    }
    for p in (1..r).rev() {
        let mut other = if p > 1 { e.create_label() } else { next_chunk };
        let a = e.asm();
        a.mov(rax, slot(S_PEND))?;
        a.sub(rax, slot(S_P))?;
        a.cmp(rax, p as i32)?;
        a.jne(other)?;
        section(e, marks, p, t, next_chunk)?;
        if p > 1 {
            e.set_label(&mut other)?;
        }
    }
    e.set_label(&mut next_chunk)?;
    let a = e.asm();
    a.mov(rax, slot(S_NC))?;
    a.add(slot(S_N0), rax)?;
    loop_back(e, chunks, marks)?;
    e.asm().jmp(top)?;

    e.set_label(&mut done)?;
    e.asm().add(rsp, FRAME)?;
    e.set_label(&mut exit)?;
    Ok(())
}

/// The chunk's scratch table: entry `(b, v)` at `BUF + (b · chunk + v) ·
/// 8` holds `-128 · Σx` of vector `n0 + v`, block `b`, then its scale as
/// f32.
fn scratch(e: &mut Emitter, marks: &mut Vec<Mark>) -> Result<(), EmitError> {
    let (bias, x, s, t) = (3usize, 0usize, 1usize, 2usize);
    let mut out = e.create_label();
    e.broadcast_i32(YMM[bias], 0x8080_8080u32 as i32)?;
    let a = e.asm();
    a.mov(PX, slot(S_N0))?;
    a.imul_2(PX, VB)?;
    a.add(PX, arg(offsets::X))?;
    a.mov(PS, slot(S_BUF))?;
    a.mov(qword_ptr(rsp + S_T), 0)?;
    let vectors = loop_head(e, "scratch.vectors".to_owned())?;
    let top = vectors.head;
    let a = e.asm();
    a.mov(rax, slot(S_T))?;
    a.cmp(rax, slot(S_NC))?;
    a.jae(out)?;
    a.mov(PW, PX)?;
    a.mov(YT, PS)?;
    a.mov(COUNT, BLOCKS)?;
    let blocks = loop_head(e, "scratch.blocks".to_owned())?;
    let btop = blocks.head;
    let a = e.asm();
    a.vmovdqu8(YMM[x], e_ymm(PW + 2))?;
    a.vpxord(YMM[s], YMM[s], YMM[s])?;
    a.vpdpbusd(YMM[s], YMM[bias], YMM[x])?;
    a.vextracti32x4(XMM[t], YMM[s], 1)?;
    a.vpaddd(XMM[s], XMM[s], XMM[t])?;
    a.vpshufd(XMM[t], XMM[s], 0x4e)?;
    a.vpaddd(XMM[s], XMM[s], XMM[t])?;
    a.vpshufd(XMM[t], XMM[s], 0xb1)?;
    a.vpaddd(XMM[s], XMM[s], XMM[t])?;
    a.vmovd(eax, XMM[s])?;
    a.neg(eax)?;
    a.mov(dword_ptr(YT), eax)?;
    a.movzx(eax, word_ptr(PW))?;
    a.vmovd(XMM[s], eax)?;
    a.vcvtph2ps(XMM[s], XMM[s])?;
    a.vmovss(dword_ptr(YT + 4), XMM[s])?;
    a.add(PW, BLOCK_BYTES as i32)?;
    a.add(YT, SSTR)?;
    a.dec(COUNT)?;
    loop_back(e, blocks, marks)?;
    let a = e.asm();
    a.jne(btop)?;
    a.add(PX, VB)?;
    a.add(PS, ENTRY)?;
    a.inc(qword_ptr(rsp + S_T))?;
    loop_back(e, vectors, marks)?;
    e.asm().jmp(top)?;
    e.set_label(&mut out)?;
    Ok(())
}

fn e_ymm(m: AsmMemoryOperand) -> AsmMemoryOperand {
    weft_x64::iced_x86::code_asm::ymmword_ptr(m)
}

/// One group of `p` panels from `S_P`: the masks, then tiles of `t`
/// vectors over the chunk and one tile of the rest; leaves through
/// `out`, which the caller places.
fn section(
    e: &mut Emitter,
    marks: &mut Vec<Mark>,
    p: usize,
    t: usize,
    out: CodeLabel,
) -> Result<(), EmitError> {
    // k(i) = the rows of panel S_P + i inside row_start..row_end.
    for i in 0..p {
        let mut lo_ok = e.create_label();
        let mut hi_ok = e.create_label();
        let a = e.asm();
        a.mov(rax, slot(S_P))?;
        a.add(rax, i as i32)?;
        a.shl(rax, 4)?;
        a.mov(r8, arg(offsets::ROW_START))?;
        a.sub(r8, rax)?;
        a.jns(lo_ok)?;
        a.xor(r8d, r8d)?;
        e.set_label(&mut lo_ok)?;
        let a = e.asm();
        a.mov(rcx, arg(offsets::ROW_END))?;
        a.sub(rcx, rax)?;
        a.cmp(rcx, 16)?;
        a.jbe(hi_ok)?;
        a.mov(ecx, 16)?;
        e.set_label(&mut hi_ok)?;
        let a = e.asm();
        a.mov(eax, 1)?;
        a.shl(eax, weft_x64::iced_x86::code_asm::cl)?;
        a.dec(eax)?;
        a.mov(ecx, r8d)?;
        a.mov(r8d, 1)?;
        a.shl(r8d, weft_x64::iced_x86::code_asm::cl)?;
        a.dec(r8d)?;
        a.not(r8d)?;
        a.and(eax, r8d)?;
        a.kmovw(mask(i), eax)?;
    }
    let mut rest = if t > 1 { e.create_label() } else { out };
    e.asm().mov(qword_ptr(rsp + S_T), 0)?;
    let tiles = loop_head(e, format!("p{p}.tiles"))?;
    let top = tiles.head;
    let a = e.asm();
    a.mov(rax, slot(S_T))?;
    a.add(rax, t as i32)?;
    a.cmp(rax, slot(S_NC))?;
    a.ja(rest)?;
    tile(e, marks, p, t)?;
    e.asm().add(qword_ptr(rsp + S_T), t as i32)?;
    loop_back(e, tiles, marks)?;
    e.asm().jmp(top)?;
    if t > 1 {
        e.set_label(&mut rest)?;
    }
    for u in (1..t).rev() {
        let mut other = if u > 1 { e.create_label() } else { out };
        let a = e.asm();
        a.mov(rax, slot(S_NC))?;
        a.sub(rax, slot(S_T))?;
        a.cmp(rax, u as i32)?;
        a.jne(other)?;
        tile(e, marks, p, u)?;
        e.asm().jmp(out)?;
        if u > 1 {
            e.set_label(&mut other)?;
        }
    }
    Ok(())
}

/// `[PX + v · VB + disp]`: vector `v` of the tile.
fn xmem(v: usize, disp: i32) -> AsmMemoryOperand {
    match v {
        0 => PX + disp,
        1 => PX + VB + disp,
        2 => PX + VB * 2 + disp,
        3 => PX2 + disp,
        4 => PX2 + VB + disp,
        _ => PX2 + VB * 2 + disp,
    }
}

/// `[PW + i · PSTR + disp]`: panel `i` of the group.
fn wmem(i: usize, disp: i32) -> AsmMemoryOperand {
    match i {
        0 => PW + disp,
        1 => PW + PSTR + disp,
        _ => PW + PSTR * 2 + disp,
    }
}

/// One tile: panels `S_P .. + p` × vectors `n0 + S_T .. + t`, all blocks.
fn tile(e: &mut Emitter, marks: &mut Vec<Mark>, p: usize, t: usize) -> Result<(), EmitError> {
    let facc = |i: usize, v: usize| i * t + v;
    let iacc = |i: usize, v: usize| p * t + i * t + v;
    let w = |i: usize| 2 * p * t + i;
    let xb = 2 * p * t + p;
    let tmp = xb + 1;
    let a = e.asm();
    // PW: panel S_P's first block; PX, PX2: the tile's vectors; PS: their
    // scratch entries; YT: y of (n0 + S_T, row 16 · S_P).
    a.mov(PW, slot(S_P))?;
    a.imul_2(PW, PSTR)?;
    a.add(PW, arg(offsets::WEIGHTS))?;
    a.mov(PX, slot(S_N0))?;
    a.add(PX, slot(S_T))?;
    a.mov(YT, PX)?;
    a.imul_2(PX, VB)?;
    a.add(PX, arg(offsets::X))?;
    a.lea(PX2, PX + VB3)?;
    a.imul_2(YT, R4)?;
    a.mov(rax, slot(S_P))?;
    a.shl(rax, 6)?;
    a.add(YT, rax)?;
    a.add(YT, arg(offsets::Y))?;
    a.mov(PS, slot(S_T))?;
    a.shl(PS, 3)?;
    a.add(PS, slot(S_BUF))?;
    for i in 0..p {
        for v in 0..t {
            let z = ZMM[facc(i, v)];
            a.vpxord(z, z, z)?;
        }
    }
    a.mov(COUNT, BLOCKS)?;
    let blocks = loop_head(e, format!("p{p}v{t}.blocks"))?;
    let top = blocks.head;
    let a = e.asm();
    for v in 0..t {
        for i in 0..p {
            a.vpbroadcastd(ZMM[iacc(i, v)], dword_ptr(PS + ENTRY * v as i32))?;
        }
    }
    for g in 0..GROUPS {
        let wd = (QUANTS_AT + GROUP_BYTES * g) as i32;
        for i in 0..p {
            a.vmovdqu32(ZMM[w(i)], zmmword_ptr(wmem(i, wd)))?;
        }
        for v in 0..t {
            a.vpbroadcastd(ZMM[xb], dword_ptr(xmem(v, 2 + 4 * g as i32)))?;
            for i in 0..p {
                a.vpdpbusd(ZMM[iacc(i, v)], ZMM[w(i)], ZMM[xb])?;
            }
        }
    }
    for i in 0..p {
        a.vmovups(ZMM[w(i)], zmmword_ptr(wmem(i, 0)))?;
    }
    for v in 0..t {
        for i in 0..p {
            let q = ZMM[iacc(i, v)];
            a.vcvtdq2ps(q, q)?;
            a.vmulps(
                ZMM[tmp],
                ZMM[w(i)],
                weft_x64::iced_x86::code_asm::dword_bcst(PS + ENTRY * v as i32 + 4),
            )?;
            a.vfmadd231ps(ZMM[facc(i, v)], q, ZMM[tmp])?;
        }
    }
    a.add(PW, PANEL_BLOCK_BYTES as i32)?;
    a.add(PX, BLOCK_BYTES as i32)?;
    a.add(PX2, BLOCK_BYTES as i32)?;
    a.add(PS, SSTR)?;
    a.dec(COUNT)?;
    loop_back(e, blocks, marks)?;
    let a = e.asm();
    a.jne(top)?;
    // Stores, masked to the range: vector v at YT + v · R4, panel i 64
    // bytes further per panel.
    if t > 3 {
        a.lea(rax, YT + R43)?;
    }
    for v in 0..t {
        let base = match v {
            0 => YT + 0,
            1 => YT + R4,
            2 => YT + R4 * 2,
            3 => rax + 0,
            4 => rax + R4,
            _ => rax + R4 * 2,
        };
        for i in 0..p {
            let m = zmmword_ptr(base + 64 * i as i32);
            let m = [m.k1(), m.k2(), m.k3()][i];
            a.vmovups(m, ZMM[facc(i, v)])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul::arm::{offer_for, Q8MatmulArm};
    use crate::matmul::validation::MatmulValidation;
    use crate::matmul::Q8PanelWeights;
    use weft_kernel::Arm;
    use weft_validate::Outcome;

    #[test]
    fn every_twin_the_host_can_run_matches_the_arm_bit_for_bit() {
        let host = weft_kernel::Host::detect();
        let w = crate::validation::random_weights(100, 18, 1, true);
        let offer = offer_for(&Q8PanelWeights::from_weights(&w), 64).expect("offer");
        let arm = Q8MatmulArm.build(&offer, host.isa).expect("arm builds");
        let mut accepted = 0;
        for twin in TWINS {
            match weft_validate::testing::judge_twin(
                &twin,
                &arm,
                &offer,
                &host,
                &MatmulValidation,
                42,
            ) {
                Outcome::Accepted(v) => {
                    assert!(v.words > 0);
                    accepted += 1;
                }
                Outcome::Refused(Refusal::MissingFeature { .. } | Refusal::WrongIsa { .. }) => {}
                Outcome::Refused(r) => panic!("{}: {r}", twin.name()),
            }
        }
        if host.has(Feature::Avx512vnni) {
            assert_eq!(accepted, TWINS.len());
        }
    }
}
