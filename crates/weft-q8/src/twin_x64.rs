//! x64 twins of `q8_0.matvec`: the arm's offer, the body emitted through
//! weft-x64.
//!
//! Three tiers, each with a one-row pass and multi-row passes:
//!
//! - [`Tier::Avx512Vnni`]: zmm, two blocks per instruction. Quants of
//!   blocks `b, b+1` (34 bytes apart) are loaded as one zmm (a ymm load and
//!   `vinserti64x4`); the integer part is the bias method
//!   `vpdpbusd(c, w ^ 0x80, x)` with `c = -128 · Σx` (made once per pass
//!   with `vpdpbusd` on `0x80` bytes and shared by the pass's rows).
//! - [`Tier::Avx512Bw`]: the same zmm layout without VNNI: the sign method
//!   (`vpmovb2m` takes w's signs into a mask, `vpblendmb` picks `x` or
//!   `-x` (made once per pass), `vpabsb w`, then `vpmaddubsw` and
//!   `vpmaddwd` with ones: exact because `|w| ≤ 128` and activation quants
//!   are in `-127..=127`, so a pair sum is at most 32512 and never
//!   saturates).
//! - [`Tier::Avx2`]: ymm, one block per step, the sign method with
//!   `vpsignb`, four ymm accumulators per row.
//!
//! Scales: AVX-512 tiers broadcast block `b`'s binary16 scale into words
//! 0..8 and block `b+1`'s into words 8..16 of a ymm (the second a masked
//! `vpbroadcastw`), then one `vcvtph2ps zmm` (F16C-exact widening);
//! AVX2 uses `vpbroadcastw` + `vcvtph2ps ymm`. Accumulators: AVX-512 `A =
//! acc[0]|acc[1]`, `B = acc[2]|acc[3]`; a ragged last block is loaded alone
//! (upper half zero, scale zero, so its lanes add `+0.0`).
//!
//! A multi-row pass (`rows_per_pass` rows sharing the x loads and x
//! scales) is followed by a one-row pass for the remaining rows. On
//! AVX-512 a multi-row pass takes the batch's vectors two at a time
//! (16 accumulators for 4 rows × 2 vectors), so each row's quants, bias
//! and scales are loaded once for two vectors, then an odd last vector
//! alone.
//!
//! **Packed x** (multi-row VNNI twins, a batch of 2 or more whose copy
//! fits [`XP_LIMIT`]): the call first copies x once into a stack buffer
//! laid out for the row passes ([`XP_ENTRY`] bytes per vector and block
//! pair: quants, the bias correction, the scales as f32, each a whole
//! zmm), then runs passes of `rows_per_pass` rows × 3 vectors (24
//! accumulators; a last two or one vector take passes of their own) that
//! take every x operand from memory. A (row, vector,
//! block pair) then costs the contract's five vector operations and
//! loads; the row's quants, bias and scales serve three vectors. The
//! matrix products of a prompt's 8-token chunk ran at 29 GMAC/s with one
//! vector per pass, 36 with two, and see `docs/PERFORMANCE.md` for the
//! packed path (SmolLM2-135M, 1 thread, family 6 model 167). Every
//! multi-row pass runs one software-prefetch stream over the bytes of the
//! pass after it, [`PREFETCH`] bytes further on (rows are contiguous, so
//! that is one linear range; without it the multi-row passes ran at about
//! half speed from DRAM, and a per-row distance missed on short rows). A
//! one-row pass reads one linear stream, which the hardware prefetchers
//! follow alone. A prefetch may name bytes past W's end: it never faults
//! and is not a read of the program's state. Rows are the
//! outer loop and vectors the inner one (a batch re-reads a pass's W rows
//! from cache). Every operation of the float part is the contract's
//! (`vmulps` then `vaddps`, never FMA), and the fold is the contract's
//! order. No load assumes alignment.
//!
//! Frame: SysV or Win64 ([`Q8MatvecX64::with_abi`]); the argument pointer
//! is moved to `rdi` for the whole body (on Win64 it arrives in `rcx`,
//! which the block loops count with); `rbx`, `rbp`, `r12`–`r15` (and on
//! Win64 `rdi`, `rsi`, `xmm6`–`xmm15`) are saved by the façade's frame.
//! The body reads only the blocks of rows `row_start..row_end` and of the
//! `batch` vectors, and writes only their outputs.

use weft_kernel::{Feature, Isa, LoopAnnotation, LoopTrip, NativeCode, Offer, Refusal, Twin};
use weft_x64::iced_x86::code_asm::{
    byte_ptr, dword_ptr, eax, k1, k2, qword_ptr, r10, r11, r12, r13, r14, r15, r8, r9, rax, rbp,
    rbx, rcx, rdi, rdx, rsi, rsp, word_ptr, ymmword_ptr, zmmword_ptr, AsmMemoryOperand,
    AsmRegister64, CodeLabel,
};
use weft_x64::regs::{XMM, YMM, ZMM};
use weft_x64::{Abi, Clobbers, EmitError, Emitter};

use super::arm::site_dims;
use super::{offsets, ARGS_NAME, BLOCK_BYTES, FAMILY};

/// Which instruction set a twin is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// AVX2 + F16C, ymm registers, `vpsignb`/`vpmaddubsw`/`vpmaddwd`.
    Avx2,
    /// AVX-512 F/BW/VL without VNNI: zmm `vpmaddubsw`/`vpmaddwd`, two
    /// blocks per zmm.
    Avx512Bw,
    /// AVX-512 F/BW/VL + AVX-512 VNNI, zmm registers, EVEX `vpdpbusd`.
    Avx512Vnni,
}

impl Tier {
    fn is_avx512(self) -> bool {
        matches!(self, Tier::Avx512Bw | Tier::Avx512Vnni)
    }
}

/// One x64 twin of the `q8_0.matvec` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Q8MatvecX64 {
    tier: Tier,
    rows_per_pass: u8,
    abi: Abi,
    /// Software-prefetch distance past the pass's own rows, bytes (0: none).
    prefetch: i32,
}

/// Every twin this module offers.
pub const TWINS: [Q8MatvecX64; 8] = [
    Q8MatvecX64::new(Tier::Avx2, 1),
    Q8MatvecX64::new(Tier::Avx2, 2),
    Q8MatvecX64::new(Tier::Avx512Bw, 1),
    Q8MatvecX64::new(Tier::Avx512Bw, 2),
    Q8MatvecX64::new(Tier::Avx512Bw, 4),
    Q8MatvecX64::new(Tier::Avx512Vnni, 1),
    Q8MatvecX64::new(Tier::Avx512Vnni, 2),
    Q8MatvecX64::new(Tier::Avx512Vnni, 4),
];

/// AVX2 tier: `vpsignb`, `vpmaddubsw`, `vpmaddwd` (AVX2), `vcvtph2ps`
/// (F16C). The contract forbids FMA, so FMA is not required.
const AVX2_FEATURES: &[Feature] = &[Feature::Avx, Feature::Avx2, Feature::F16c];
const AVX512BW_FEATURES: &[Feature] = &[
    Feature::Avx,
    Feature::Avx2,
    Feature::F16c,
    Feature::Avx512f,
    Feature::Avx512bw,
    Feature::Avx512vl,
];
const AVX512VNNI_FEATURES: &[Feature] = &[
    Feature::Avx,
    Feature::Avx2,
    Feature::F16c,
    Feature::Avx512f,
    Feature::Avx512bw,
    Feature::Avx512vl,
    Feature::Avx512vnni,
];

impl Q8MatvecX64 {
    /// The twin of `tier` with `rows_per_pass` rows per pass (AVX2: 1 or 2;
    /// AVX-512: 1, 2 or 4; anything else is refused at emit time), for the
    /// host's calling convention.
    pub const fn new(tier: Tier, rows_per_pass: u8) -> Self {
        Self {
            tier,
            rows_per_pass,
            abi: Abi::host(),
            prefetch: PREFETCH,
        }
    }

    /// The same twin with its prefetch stream starting `bytes` past the end
    /// of each pass's rows (0: no software prefetch), for tuning; the bits
    /// it computes do not depend on it.
    pub const fn with_prefetch(self, bytes: i32) -> Self {
        Self {
            prefetch: bytes,
            ..self
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

    /// Rows per pass.
    pub fn rows_per_pass(&self) -> u8 {
        self.rows_per_pass
    }

    /// Whether the multi-row pass takes vectors two at a time (AVX-512).
    fn pairs_vectors(&self) -> bool {
        self.tier.is_avx512() && self.rows_per_pass > 1
    }

    fn check_pass(&self) -> Result<usize, Refusal> {
        let ok = match self.tier {
            Tier::Avx2 => matches!(self.rows_per_pass, 1 | 2),
            Tier::Avx512Bw | Tier::Avx512Vnni => matches!(self.rows_per_pass, 1 | 2 | 4),
        };
        if ok {
            Ok(usize::from(self.rows_per_pass))
        } else {
            Err(Refusal::EmitError {
                message: format!("{:?} has no {}-row pass", self.tier, self.rows_per_pass),
            })
        }
    }

    /// Emit the body (independent of the geometry: any rows, blocks, batch
    /// the arguments name).
    pub fn emit_body(&self) -> Result<weft_x64::Emitted, Refusal> {
        Ok(self.emit_marked()?.0)
    }

    fn emit_marked(&self) -> Result<(weft_x64::Emitted, Vec<Mark>), Refusal> {
        let rows = self.check_pass()?;
        let (emitted, mut marks) = emit(self.tier, rows, self.abi, self.prefetch, self.packs_x())
            .map_err(|e| Refusal::EmitError {
            message: e.to_string(),
        })?;
        // Outermost first, as the nest lists them.
        let names = self.loop_names();
        marks.sort_by_key(|m| names.iter().position(|(n, _)| *n == m.name));
        Ok((emitted, marks))
    }

    /// Whether this twin has the packed-x path (module docs).
    fn packs_x(&self) -> bool {
        self.tier == Tier::Avx512Vnni && self.rows_per_pass > 1
    }

    /// The names of this twin's loops, outermost first, with their depths,
    /// as [`Twin::nest`] and the annotations in [`NativeCode::loops`]
    /// call them (the packed-x path's first: it is emitted first).
    fn loop_names(&self) -> Vec<(String, u32)> {
        let r = self.rows_per_pass;
        let mut v = Vec::new();
        if self.packs_x() {
            v.push(("xp.pack.batch".to_owned(), 0));
            v.push(("xp.pack.pairs".to_owned(), 1));
            for p in [r, 1] {
                v.push((format!("xp.r{p}.rows"), 0));
                v.push((format!("xp.r{p}.batch3"), 1));
                v.push((format!("xp.r{p}v3.blocks4"), 2));
                v.push((format!("xp.r{p}.batch2"), 1));
                v.push((format!("xp.r{p}v2.blocks4"), 2));
                v.push((format!("xp.r{p}.batch"), 1));
                v.push((format!("xp.r{p}.blocks4"), 2));
            }
        }
        let passes: &[u8] = if r > 1 { &[r, 1] } else { &[1] };
        for &p in passes {
            v.push((format!("r{p}.rows"), 0));
            if self.pairs_vectors() && p > 1 {
                v.push((format!("r{p}.batch2"), 1));
                v.push((format!("r{p}v2.blocks4"), 2));
            }
            v.push((format!("r{p}.batch"), 1));
            v.push((format!("r{p}.blocks4"), 2));
        }
        v
    }
}

/// Bytes of the packed copy of x a call of `batch` vectors of `blocks`
/// blocks needs: 192 per vector and block pair.
pub fn packed_x_bytes(blocks: u64, batch: u64) -> u64 {
    blocks.div_ceil(2) * batch * XP_ENTRY as u64
}

/// Whether a call of this shape takes the packed-x path of a twin that
/// has one: two vectors or more, and their packed copy fits [`XP_LIMIT`].
pub fn takes_packed_x(blocks: u64, batch: u64) -> bool {
    batch >= 2 && packed_x_bytes(blocks, batch) <= XP_LIMIT as u64
}

/// A loop the emitter wrote: its name and the labels on its first
/// instruction and on its backward branch.
pub(crate) struct Mark {
    pub(crate) name: String,
    pub(crate) head: CodeLabel,
    pub(crate) back: CodeLabel,
}

/// Twin `who`'s x64 body: `emitted`'s bytes with the annotations of
/// `marks` (a mark without offsets is an emit error of `who`).
pub(crate) fn native_code(
    emitted: weft_x64::Emitted,
    marks: &[Mark],
    who: &str,
) -> Result<NativeCode, Refusal> {
    let loops = marks
        .iter()
        .map(
            |m| match (emitted.label_offset(&m.head), emitted.label_offset(&m.back)) {
                (Some(head), Some(back_edge)) => Ok(LoopAnnotation {
                    name: m.name.clone(),
                    head,
                    back_edge,
                }),
                _ => Err(Refusal::EmitError {
                    message: format!("{who}: loop {} has no offsets", m.name),
                }),
            },
        )
        .collect::<Result<Vec<LoopAnnotation>, Refusal>>()?;
    Ok(NativeCode {
        isa: Isa::X86_64,
        pool: None,
        bytes: emitted.bytes,
        loops,
    })
}

// SAFETY: the body reads and writes only what the arguments' extents name
// and returns normally (module docs); validation checks its results.
unsafe impl Twin for Q8MatvecX64 {
    fn name(&self) -> &'static str {
        match (self.tier, self.rows_per_pass) {
            (Tier::Avx2, 1) => "q8_0.matvec.twin.avx2.r1",
            (Tier::Avx2, 2) => "q8_0.matvec.twin.avx2.r2",
            (Tier::Avx2, _) => "q8_0.matvec.twin.avx2",
            (Tier::Avx512Bw, 1) => "q8_0.matvec.twin.avx512bw.r1",
            (Tier::Avx512Bw, 2) => "q8_0.matvec.twin.avx512bw.r2",
            (Tier::Avx512Bw, 4) => "q8_0.matvec.twin.avx512bw.r4",
            (Tier::Avx512Bw, _) => "q8_0.matvec.twin.avx512bw",
            (Tier::Avx512Vnni, 1) => "q8_0.matvec.twin.avx512vnni.r1",
            (Tier::Avx512Vnni, 2) => "q8_0.matvec.twin.avx512vnni.r2",
            (Tier::Avx512Vnni, 4) => "q8_0.matvec.twin.avx512vnni.r4",
            (Tier::Avx512Vnni, _) => "q8_0.matvec.twin.avx512vnni",
        }
    }

    fn isa(&self) -> Isa {
        Isa::X86_64
    }

    fn requires(&self) -> &'static [Feature] {
        match self.tier {
            Tier::Avx2 => AVX2_FEATURES,
            Tier::Avx512Bw => AVX512BW_FEATURES,
            Tier::Avx512Vnni => AVX512VNNI_FEATURES,
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
        // The geometry must be one the contract admits, as the arm checks.
        site_dims(&offer.contract.geometry)?;
        let (emitted, marks) = self.emit_marked()?;
        native_code(emitted, &marks, self.name())
    }

    /// The packed-x path's loops first (trips 0 unless the geometry takes
    /// it, [`takes_packed_x`]: packing walks `batch` vectors of `blocks /
    /// 2` pairs, then its row passes as below with vectors three at a
    /// time, then two, then one), then the other path's (trips 0 when the
    /// packed-x path runs).
    ///
    /// Rows per pass outermost, then vectors, then groups of four blocks:
    /// for `rows_per_pass = R > 1`, `rR.rows` runs `rows / R` times, then
    /// `r1.rows` runs `rows % R` times; each row pass walks `batch`
    /// vectors and `blocks / 4` groups of four blocks (the `blocks % 4`
    /// tail is straight-line code). An AVX-512 multi-row pass walks the
    /// vectors in pairs first (`rR.batch2`, `batch / 2` times, each over
    /// `rRv2.blocks4`), then the odd one (`rR.batch`, `batch % 2` times).
    /// Trips are at the offer's whole geometry (a member view runs a
    /// sub-range of the rows).
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        let g = &offer.contract.geometry;
        let rows = g.get("rows").unwrap_or(0);
        let blocks = g.get("cols").unwrap_or(0) / 32;
        let batch = g.get("batch").unwrap_or(1);
        let r = u64::from(self.rows_per_pass.max(1));
        let xp = self.packs_x() && takes_packed_x(blocks, batch);
        self.loop_names()
            .into_iter()
            .map(|(name, depth)| {
                // Which path the loop is on, and whether it takes it.
                let (local, runs) = match name.strip_prefix("xp.") {
                    Some(rest) => (rest, xp),
                    None => (name.as_str(), !xp),
                };
                let multi = r > 1 && !local.starts_with("r1.");
                let trips = match (depth, local) {
                    (_, _) if !runs && depth == 0 => 0,
                    (0, "pack.batch") => batch,
                    (1, "pack.pairs") => blocks / 2,
                    (0, _) if multi => rows / r,
                    (0, _) if r > 1 => rows % r,
                    (0, _) => rows,
                    (1, l) if l.ends_with(".batch3") => batch / 3,
                    (1, l) if l.ends_with(".batch2") && name.starts_with("xp.") => batch % 3 / 2,
                    (1, l) if l.ends_with(".batch2") => batch / 2,
                    (1, _) if name.starts_with("xp.") => batch % 3 % 2,
                    (1, _) if multi && self.pairs_vectors() => batch % 2,
                    (1, _) => batch,
                    _ => blocks / 4,
                };
                LoopTrip { name, trips, depth }
            })
            .collect()
    }
}

// ---------------------------------------------------------------- body ---

/// How far (bytes) past the end of its own rows a pass's prefetch stream
/// starts (module docs: one linear stream over the next pass).
pub const PREFETCH: i32 = 2048;

// GPRs of the body.
const ARGS: AsmRegister64 = rdi; // the argument struct
const W: AsmRegister64 = r8; // weights base
const X: AsmRegister64 = r9; // x base
const Y: AsmRegister64 = r10; // y base
const ROWS: AsmRegister64 = r11;
const BLOCKS: AsmRegister64 = rsi;
const ROW_BYTES: AsmRegister64 = rbx;
const ROW_BYTES3: AsmRegister64 = rbp;
const N: AsmRegister64 = r12;
const R: AsmRegister64 = r13;
const PW: AsmRegister64 = r14;
const PX: AsmRegister64 = r15;
const COUNT: AsmRegister64 = rcx;
const REM: AsmRegister64 = rdx;
/// The prefetch pointer, live only in the block loop (where REM is not).
const PF: AsmRegister64 = rdx;

/// Prefetches per four-block step of a `rows`-row pass: enough 64-byte
/// lines to cover the `rows · 136` bytes the stream advances.
fn prefetch_lines(rows: usize) -> i32 {
    (rows * 4 * BLOCK_BYTES).div_ceil(64) as i32
}

/// Vector register numbers (chosen outside xmm6–xmm15 where it is free to,
/// but every one is declared, so Win64 saves what it must).
struct Regs {
    /// Accumulators of row `i`, vector `n`: AVX-512 group pair `p` at
    /// `acc[(i · vecs + n) · 2 + p]`; AVX2 (one vector) group `g` at
    /// `acc[4i + g]`.
    acc: Vec<usize>,
    /// Vectors a pass takes at once.
    vecs: usize,
    /// Accumulators per row and vector (AVX-512: 2 group pairs; AVX2: 4).
    groups: usize,
    /// VNNI: `0x80` bytes.
    bias: usize,
    /// AVX2 and BW: `1` words, for `vpmaddwd`.
    ones: usize,
    /// The x quants of the step, per vector.
    xq: Vec<usize>,
    /// VNNI: `-128 · Σx` per dword; BW: `-x` bytes; per vector.
    corr: Vec<usize>,
    /// The x scales of the step, per vector.
    sx: Vec<usize>,
    /// A row's quants (VNNI: biased; BW: absolute) and scales.
    wq: usize,
    sw: usize,
    q: usize,
    s: usize,
    t: usize,
    t2: usize,
}

impl Regs {
    /// Registers of a pass over `rows` rows and `vecs` vectors (AVX-512:
    /// `2 · rows · vecs ≤ 16`; AVX2: `vecs = 1`).
    fn new(tier: Tier, rows: usize, vecs: usize) -> Regs {
        match tier {
            Tier::Avx512Vnni | Tier::Avx512Bw => Regs {
                acc: (16..16 + 2 * rows * vecs).collect(),
                vecs,
                groups: 2,
                bias: 0,
                ones: 1,
                xq: [2, 6][..vecs].to_vec(),
                corr: [3, 7][..vecs].to_vec(),
                sx: [4, 8][..vecs].to_vec(),
                wq: 5,
                // Temporaries above the accumulators when one vector
                // leaves room (16..24), below them when two fill 16..32.
                sw: if vecs == 1 { 28 } else { 9 },
                q: if vecs == 1 { 24 } else { 10 },
                s: if vecs == 1 { 25 } else { 11 },
                t: if vecs == 1 { 26 } else { 12 },
                t2: if vecs == 1 { 27 } else { 13 },
            },
            Tier::Avx2 => Regs {
                // 4 per row: ymm0..3 (row 0), ymm4..5 + 8..9 (row 1).
                acc: [0, 1, 2, 3, 4, 5, 8, 9][..4 * rows].to_vec(),
                vecs: 1,
                groups: 4,
                bias: 15, // unused
                ones: 6,
                xq: vec![7],
                corr: vec![15], // unused
                sx: vec![10],
                wq: 11,
                sw: 13,
                q: 12,
                s: 13,
                t: 14,
                t2: 15,
            },
        }
    }

    /// Accumulator `p` (AVX-512: group pair; AVX2: group) of row `i`,
    /// vector `n`.
    fn acc(&self, i: usize, n: usize, p: usize) -> usize {
        self.acc[(i * self.vecs + n) * self.groups + p]
    }
}

/// `[PW + row i stride + disp]`.
fn wmem(i: usize, disp: i32) -> AsmMemoryOperand {
    match i {
        0 => PW + disp,
        1 => PW + ROW_BYTES + disp,
        2 => PW + ROW_BYTES * 2 + disp,
        _ => PW + ROW_BYTES3 + disp,
    }
}

/// Open a marked loop: its head label is placed on the next instruction.
pub(crate) fn loop_head(e: &mut Emitter, name: String) -> Result<Mark, EmitError> {
    let mut head = e.create_label();
    e.set_label(&mut head)?;
    Ok(Mark {
        name,
        head,
        back: e.create_label(),
    })
}

/// Place `mark`'s back-edge label on the next instruction (the backward
/// branch) and keep the mark.
pub(crate) fn loop_back(
    e: &mut Emitter,
    mut mark: Mark,
    marks: &mut Vec<Mark>,
) -> Result<(), EmitError> {
    e.set_label(&mut mark.back)?;
    marks.push(mark);
    Ok(())
}

fn emit(
    tier: Tier,
    rows: usize,
    abi: Abi,
    prefetch: i32,
    packs_x: bool,
) -> Result<(weft_x64::Emitted, Vec<Mark>), EmitError> {
    let mut e = Emitter::new(abi)?;
    let regs_r = Regs::new(tier, rows, 1);
    let regs_1 = Regs::new(tier, 1, 1);
    // AVX-512 multi-row passes also take vectors two at a time: each row's
    // quants and scales are then loaded once for two vectors.
    let regs_rv = (tier.is_avx512() && rows > 1).then(|| Regs::new(tier, rows, 2));
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
    // The argument pointer lives in `ARGS` (rdi) for the whole body: on
    // Win64 it arrives in rcx, which the block loops count with.
    let args = ARGS;
    if e.args_reg() != ARGS {
        let from = e.args_reg();
        e.asm().mov(ARGS, from)?;
    }
    let mut marks = Vec::new();
    let body = |e: &mut Emitter, marks: &mut Vec<Mark>| -> Result<(), EmitError> {
        for (reg, offset) in [
            (W, offsets::WEIGHTS),
            (X, offsets::X),
            (Y, offsets::Y),
            (ROWS, offsets::ROWS),
            (BLOCKS, offsets::BLOCKS),
        ] {
            e.asm().mov(reg, qword_ptr(args + offset))?;
        }
        e.asm().imul_3(ROW_BYTES, BLOCKS, BLOCK_BYTES as i32)?;
        e.asm().lea(ROW_BYTES3, ROW_BYTES + ROW_BYTES * 2)?;
        match tier {
            Tier::Avx512Vnni => {
                e.broadcast_i32(ZMM[regs_r.bias], 0x8080_8080u32 as i32)?;
            }
            Tier::Avx512Bw => {
                e.broadcast_u16(ZMM[regs_r.ones], 1)?;
            }
            Tier::Avx2 => {
                e.broadcast_u16(YMM[regs_r.ones], 1)?;
            }
        }
        if tier.is_avx512() {
            // k2 selects words 8..16: the second block's scale.
            e.asm().mov(eax, 0xff00)?;
            e.asm().kmovw(k2, eax)?;
        }
        let mut done = e.create_label();
        if packs_x {
            packed_x_path(e, marks, rows, prefetch, done)?;
        }
        // Rows outside, vectors inside: a pass's W rows are read once per
        // vector while they are still in cache.
        let mut r_single = e.create_label();
        e.asm().mov(R, qword_ptr(args + offsets::ROW_START))?;
        if rows > 1 {
            let mark = loop_head(e, format!("r{rows}.rows"))?;
            let top = mark.head;
            e.asm().lea(rax, R + rows as i32)?;
            e.asm().cmp(rax, qword_ptr(args + offsets::ROW_END))?;
            e.asm().ja(r_single)?;
            e.asm().xor(N, N)?;
            let mut singles = None;
            if let Some(g) = &regs_rv {
                singles = Some(vector_pairs(e, marks, rows, |e, marks| {
                    pass(e, marks, tier, rows, g, prefetch, XSource::Rows)
                })?);
            }
            each_vector(e, marks, rows, singles, |e, marks| {
                pass(e, marks, tier, rows, &regs_r, prefetch, XSource::Rows)
            })?;
            e.asm().add(R, rows as i32)?;
            loop_back(e, mark, marks)?;
            e.asm().jmp(top)?;
        }
        e.set_label(&mut r_single)?;
        let mark = Mark {
            name: "r1.rows".to_owned(),
            head: r_single,
            back: e.create_label(),
        };
        e.asm().cmp(R, qword_ptr(args + offsets::ROW_END))?;
        e.asm().jae(done)?;
        e.asm().xor(N, N)?;
        each_vector(e, marks, 1, None, |e, marks| {
            pass(e, marks, tier, 1, &regs_1, prefetch, XSource::Rows)
        })?;
        e.asm().inc(R)?;
        loop_back(e, mark, marks)?;
        e.asm().jmp(r_single)?;
        e.set_label(&mut done)?;
        Ok(())
    };
    if tier.is_avx512() {
        e.evex(|e| body(e, &mut marks))?;
    } else {
        body(&mut e, &mut marks)?;
    }
    e.epilogue()?;
    Ok((e.finish()?, marks))
}

/// `body` for vectors `N, N + 1` while both are below `batch`, from the
/// `N` the caller set, marked `r{rows}.batch2`; the body's block loop is
/// `r{rows}v2.blocks4`. Returns the loop's exit, unplaced: the next
/// instruction emitted must carry it ([`each_vector`] takes it as its head).
fn vector_pairs(
    e: &mut Emitter,
    marks: &mut Vec<Mark>,
    rows: usize,
    body: impl FnOnce(&mut Emitter, &mut Vec<Mark>) -> Result<(), EmitError>,
) -> Result<CodeLabel, EmitError> {
    vector_groups(e, marks, format!("r{rows}.batch2"), 2, None, body)
}

/// `body` for vectors `N .. N + count` while all are below `batch`, from
/// the `N` the caller set, marked `name`, its head `head` when given (an
/// unplaced label another loop exits to). Returns the loop's exit,
/// unplaced (as [`vector_pairs`]).
fn vector_groups(
    e: &mut Emitter,
    marks: &mut Vec<Mark>,
    name: String,
    count: i32,
    head: Option<CodeLabel>,
    body: impl FnOnce(&mut Emitter, &mut Vec<Mark>) -> Result<(), EmitError>,
) -> Result<CodeLabel, EmitError> {
    let out = e.create_label();
    let mark = match head {
        Some(mut head) => {
            e.set_label(&mut head)?;
            Mark {
                name,
                head,
                back: e.create_label(),
            }
        }
        None => loop_head(e, name)?,
    };
    let top = mark.head;
    e.asm().lea(rax, N + count)?;
    e.asm().cmp(rax, qword_ptr(ARGS + offsets::BATCH))?;
    e.asm().ja(out)?;
    body(e, marks)?;
    e.asm().add(N, count)?;
    loop_back(e, mark, marks)?;
    e.asm().jmp(top)?;
    Ok(out)
}

/// `body` for `N` up to `batch` from the `N` the caller set (the loop
/// tests first), marked `r{rows}.batch`; its head is `head` when given
/// (an unplaced label another loop exits to).
fn each_vector(
    e: &mut Emitter,
    marks: &mut Vec<Mark>,
    rows: usize,
    head: Option<CodeLabel>,
    body: impl FnOnce(&mut Emitter, &mut Vec<Mark>) -> Result<(), EmitError>,
) -> Result<(), EmitError> {
    each_vector_named(e, marks, format!("r{rows}.batch"), head, body)
}

/// [`each_vector`] with the loop named `name`.
fn each_vector_named(
    e: &mut Emitter,
    marks: &mut Vec<Mark>,
    name: String,
    head: Option<CodeLabel>,
    body: impl FnOnce(&mut Emitter, &mut Vec<Mark>) -> Result<(), EmitError>,
) -> Result<(), EmitError> {
    let mut out = e.create_label();
    let mark = match head {
        Some(mut head) => {
            e.set_label(&mut head)?;
            Mark {
                name,
                head,
                back: e.create_label(),
            }
        }
        None => loop_head(e, name)?,
    };
    let top = mark.head;
    e.asm().cmp(N, qword_ptr(ARGS + offsets::BATCH))?;
    e.asm().jae(out)?;
    body(e, marks)?;
    e.asm().inc(N)?;
    loop_back(e, mark, marks)?;
    e.asm().jmp(top)?;
    e.set_label(&mut out)
}

/// Where a pass reads x.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum XSource {
    /// Its Q8_0 blocks (vector `N + 1` is `ROW_BYTES` after `N`: x rows
    /// have W's blocks).
    Rows,
    /// The packed copy ([`packed_x_path`]; VNNI only): vector `n`'s
    /// entries start `n · X` bytes after PX.
    Packed,
}

/// One pass over `rows` rows starting at row `R` of vectors `N..N +
/// g.vecs`, reading x from `x`.
fn pass(
    e: &mut Emitter,
    marks: &mut Vec<Mark>,
    tier: Tier,
    rows: usize,
    g: &Regs,
    prefetch: i32,
    x: XSource,
) -> Result<(), EmitError> {
    let a = e.asm();
    a.mov(PW, R)?;
    a.imul_2(PW, ROW_BYTES)?;
    a.add(PW, W)?;
    a.mov(PX, N)?;
    match x {
        XSource::Rows => {
            a.imul_2(PX, ROW_BYTES)?;
            a.add(PX, X)?;
        }
        XSource::Packed => {
            a.imul_2(PX, X)?;
            a.add(PX, qword_ptr(rsp + S_XBUF))?;
        }
    }
    // Blocks `2k, 2k + 1` (only `2k` when `!pair`) of the four-block group
    // at PW/PX into accumulator pair `k` (AVX-512).
    let step512 = |e: &mut Emitter, k: usize, pair: bool| {
        let wdisp = 2 * k as i32 * BLOCK_BYTES as i32;
        match x {
            XSource::Rows => blocks512(e, tier, rows, g, wdisp, k, pair),
            XSource::Packed => xp_step(e, rows, g, wdisp, k as i32 * XP_ENTRY, k, pair),
        }
    };
    for &acc in &g.acc {
        match tier {
            Tier::Avx512Vnni | Tier::Avx512Bw => a.vpxord(ZMM[acc], ZMM[acc], ZMM[acc])?,
            Tier::Avx2 => a.vpxor(YMM[acc], YMM[acc], YMM[acc])?,
        }
    }
    if rows > 1 && prefetch > 0 {
        let past = match rows {
            2 => PW + ROW_BYTES * 2 + prefetch,
            _ => PW + ROW_BYTES * 4 + prefetch,
        };
        a.lea(PF, past)?;
    }
    a.mov(COUNT, BLOCKS)?;
    a.shr(COUNT, 2)?;
    let mut skip = e.create_label();
    e.asm().je(skip)?;
    let path = if x == XSource::Packed { "xp." } else { "" };
    let v = match g.vecs {
        1 => String::new(),
        n => format!("v{n}"),
    };
    let mark = loop_head(e, format!("{path}r{rows}{v}.blocks4"))?;
    // Software prefetch, one linear stream over the next pass's bytes:
    // this pass's rows are the contiguous range [PW, PW + rows·row_bytes),
    // so PF = PW + rows·row_bytes + `prefetch`, advanced by rows·136 bytes
    // per four blocks, walks the next pass's range while this one runs.
    // A multi-row pass reads several rows at once, which the hardware
    // prefetchers follow poorly from DRAM; a per-row distance lands in
    // other rows when rows are short (576 columns: 612 bytes), and a
    // linear stream suits them all. One-row passes read one linear stream
    // already, which the hardware prefetchers follow (measured: a software
    // stream there cost 10-20 % from DRAM).
    if rows > 1 && prefetch > 0 {
        for line in 0..prefetch_lines(rows) {
            e.asm().prefetcht0(byte_ptr(PF + 64 * line))?;
        }
        e.asm().add(PF, (rows * 4 * BLOCK_BYTES) as i32)?;
    }
    match tier {
        Tier::Avx512Vnni | Tier::Avx512Bw => {
            step512(e, 0, true)?;
            step512(e, 1, true)?;
        }
        Tier::Avx2 => {
            for k in 0..4 {
                block256(e, rows, g, k * BLOCK_BYTES as i32, k as usize)?;
            }
        }
    }
    e.asm().add(PW, 4 * BLOCK_BYTES as i32)?;
    let x_step = match x {
        XSource::Rows => 4 * BLOCK_BYTES as i32,
        XSource::Packed => 2 * XP_ENTRY,
    };
    e.asm().add(PX, x_step)?;
    e.asm().dec(COUNT)?;
    let top = mark.head;
    loop_back(e, mark, marks)?;
    e.asm().jne(top)?;
    e.set_label(&mut skip)?;
    // The stream's share of the tail blocks (up to 3 per row, less than one
    // more step): without it the stream fell behind by the tail on every
    // pass, and each pass met a few lines straight from DRAM (576 columns,
    // 4-row pass: 4 lines in every 2448 bytes).
    if rows > 1 && prefetch > 0 {
        for line in 0..prefetch_lines(rows) {
            e.asm().prefetcht0(byte_ptr(PF + 64 * line))?;
        }
    }
    // Tail: blocks % 4 more blocks into groups 0, 1, 2 (the packed copy
    // pads a ragged pair like the ragged loads here).
    let mut fold = e.create_label();
    let a = e.asm();
    a.mov(REM, BLOCKS)?;
    a.and(REM, 3)?;
    match tier {
        Tier::Avx512Vnni | Tier::Avx512Bw => {
            let mut one = e.create_label();
            let mut two = e.create_label();
            e.asm().cmp(REM, 1)?;
            e.asm().je(one)?;
            e.asm().cmp(REM, 2)?;
            e.asm().je(two)?;
            e.asm().cmp(REM, 3)?;
            e.asm().jne(fold)?;
            step512(e, 0, true)?;
            step512(e, 1, false)?;
            e.asm().jmp(fold)?;
            e.set_label(&mut two)?;
            step512(e, 0, true)?;
            e.asm().jmp(fold)?;
            e.set_label(&mut one)?;
            step512(e, 0, false)?;
        }
        Tier::Avx2 => {
            for k in 0..3 {
                e.asm().cmp(REM, k)?;
                e.asm().jbe(fold)?;
                block256(e, rows, g, k * BLOCK_BYTES as i32, k as usize)?;
            }
        }
    }
    e.set_label(&mut fold)?;
    // The contract's fold and one store per row and vector: vector `n`'s
    // outputs start at `(N + n) · ROWS + R`, in rax (n = 0) and REM (n > 0,
    // free after the tail).
    let a = e.asm();
    a.mov(rax, N)?;
    a.imul_2(rax, ROWS)?;
    a.add(rax, R)?;
    for (n, i) in (0..g.vecs).flat_map(|n| (0..rows).map(move |i| (n, i))) {
        let (t, h) = (g.t, g.t2);
        let out = if n == 0 { rax } else { REM };
        match (n, i) {
            (1, 0) => a.lea(REM, rax + ROWS)?,
            (2, 0) => a.lea(REM, rax + ROWS * 2)?,
            _ => {}
        }
        match tier {
            Tier::Avx512Vnni | Tier::Avx512Bw => {
                // (g0+g2 | g1+g3), then low + high.
                a.vaddps(ZMM[t], ZMM[g.acc(i, n, 0)], ZMM[g.acc(i, n, 1)])?;
                a.vextractf64x4(YMM[h], ZMM[t], 1)?;
                a.vaddps(YMM[t], YMM[t], YMM[h])?;
            }
            Tier::Avx2 => {
                let acc = |k| g.acc(i, 0, k);
                a.vaddps(YMM[t], YMM[acc(0)], YMM[acc(2)])?;
                a.vaddps(YMM[h], YMM[acc(1)], YMM[acc(3)])?;
                a.vaddps(YMM[t], YMM[t], YMM[h])?;
            }
        }
        // u[j] = t[j] + t[j+4]; (u0+u2, u1+u3); v0 + v1.
        match tier {
            Tier::Avx512Vnni | Tier::Avx512Bw => a.vextractf32x4(XMM[h], YMM[t], 1)?,
            Tier::Avx2 => a.vextractf128(XMM[h], YMM[t], 1)?,
        }
        a.vaddps(XMM[t], XMM[t], XMM[h])?;
        a.vmovhlps(XMM[h], XMM[h], XMM[t])?;
        a.vaddps(XMM[t], XMM[t], XMM[h])?;
        a.vmovshdup(XMM[h], XMM[t])?;
        a.vaddss(XMM[t], XMM[t], XMM[h])?;
        a.vmovss(dword_ptr(Y + out * 4 + 4 * i as i32), XMM[t])?;
    }
    Ok(())
}

/// AVX-512: blocks `b, b+1` at `disp` from PW/PX (only `b` when `!pair`)
/// into accumulator pair `p` of each row and vector.
fn blocks512(
    e: &mut Emitter,
    tier: Tier,
    rows: usize,
    g: &Regs,
    disp: i32,
    p: usize,
    pair: bool,
) -> Result<(), EmitError> {
    let next = disp + BLOCK_BYTES as i32;
    // Vector `n`'s bytes are `n` rows of x after PX.
    let xmem = |n: usize, d: i32| if n == 0 { PX + d } else { PX + ROW_BYTES + d };
    // x quants, their correction term, x scales: shared by the rows.
    for n in 0..g.vecs {
        let (xq, corr) = (g.xq[n], g.corr[n]);
        let a = e.asm();
        a.vmovdqu32(YMM[xq], ymmword_ptr(xmem(n, disp + 2)))?;
        if pair {
            a.vinserti64x4(ZMM[xq], ZMM[xq], ymmword_ptr(xmem(n, next + 2)), 1)?;
        }
        a.vpxord(ZMM[g.t], ZMM[g.t], ZMM[g.t])?;
        match tier {
            Tier::Avx512Vnni => {
                // corr = 0 - dot(0x80, x) = -128 · Σx per dword.
                a.vpxord(ZMM[corr], ZMM[corr], ZMM[corr])?;
                a.vpdpbusd(ZMM[corr], ZMM[g.bias], ZMM[xq])?;
                a.vpsubd(ZMM[corr], ZMM[g.t], ZMM[corr])?;
            }
            _ => {
                // corr = -x (exact: x ≠ -128).
                a.vpsubb(ZMM[corr], ZMM[g.t], ZMM[xq])?;
            }
        }
        scales512(e, g.sx[n], g, xmem(n, disp), xmem(n, next), pair)?;
    }
    for i in 0..rows {
        let a = e.asm();
        a.vmovdqu32(YMM[g.wq], ymmword_ptr(wmem(i, disp + 2)))?;
        if pair {
            a.vinserti64x4(ZMM[g.wq], ZMM[g.wq], ymmword_ptr(wmem(i, next + 2)), 1)?;
        }
        match tier {
            Tier::Avx512Vnni => a.vpxorq(ZMM[g.wq], ZMM[g.wq], ZMM[g.bias])?,
            _ => {
                // Per row: w's signs in k1, u = |w| (128 for -128, as u8).
                a.vpmovb2m(k1, ZMM[g.wq])?;
                a.vpabsb(ZMM[g.wq], ZMM[g.wq])?;
            }
        }
        scales512(e, g.sw, g, wmem(i, disp), wmem(i, next), pair)?;
        for n in 0..g.vecs {
            let (xq, corr) = (g.xq[n], g.corr[n]);
            let a = e.asm();
            match tier {
                Tier::Avx512Vnni => {
                    a.vmovdqa64(ZMM[g.q], ZMM[corr])?;
                    a.vpdpbusd(ZMM[g.q], ZMM[g.wq], ZMM[xq])?;
                }
                _ => {
                    // x' = w < 0 ? -x : x.
                    a.vpblendmb(ZMM[g.q].k1(), ZMM[xq], ZMM[corr])?;
                    a.vpmaddubsw(ZMM[g.q], ZMM[g.wq], ZMM[g.q])?;
                    a.vpmaddwd(ZMM[g.q], ZMM[g.q], ZMM[g.ones])?;
                }
            }
            a.vcvtdq2ps(ZMM[g.q], ZMM[g.q])?;
            a.vmulps(ZMM[g.s], ZMM[g.sw], ZMM[g.sx[n]])?;
            a.vmulps(ZMM[g.q], ZMM[g.q], ZMM[g.s])?;
            let acc = g.acc(i, n, p);
            a.vaddps(ZMM[acc], ZMM[acc], ZMM[g.q])?;
        }
    }
    Ok(())
}

/// `dst` = f32 of the scale at `lo` in lanes 0..8 and at `hi` in lanes
/// 8..16 (zero there when `!pair`). `k2` selects words 8..16.
fn scales512(
    e: &mut Emitter,
    dst: usize,
    g: &Regs,
    lo: AsmMemoryOperand,
    hi: AsmMemoryOperand,
    pair: bool,
) -> Result<(), EmitError> {
    let a = e.asm();
    if pair {
        a.vpbroadcastw(YMM[g.t], word_ptr(lo))?;
        a.vpbroadcastw(YMM[g.t].k2(), word_ptr(hi))?;
    } else {
        // An xmm write zeroes words 8..16.
        a.vpbroadcastw(XMM[g.t], word_ptr(lo))?;
    }
    a.vcvtph2ps(ZMM[dst], YMM[g.t])?;
    Ok(())
}

/// AVX2: block at `disp` from PW/PX into group `k` of each row.
fn block256(e: &mut Emitter, rows: usize, g: &Regs, disp: i32, k: usize) -> Result<(), EmitError> {
    let a = e.asm();
    let (xq, sx) = (g.xq[0], g.sx[0]);
    a.vmovdqu(YMM[xq], ymmword_ptr(PX + disp + 2))?;
    a.vpbroadcastw(XMM[g.t], word_ptr(PX + disp))?;
    a.vcvtph2ps(YMM[sx], XMM[g.t])?;
    for i in 0..rows {
        a.vmovdqu(YMM[g.wq], ymmword_ptr(wmem(i, disp + 2)))?;
        // x' = sign(w)·x (exact: x ≠ -128), u = |w| (128 for -128, as u8).
        a.vpsignb(YMM[g.q], YMM[xq], YMM[g.wq])?;
        a.vpabsb(YMM[g.wq], YMM[g.wq])?;
        a.vpmaddubsw(YMM[g.q], YMM[g.wq], YMM[g.q])?;
        a.vpmaddwd(YMM[g.q], YMM[g.q], YMM[g.ones])?;
        a.vcvtdq2ps(YMM[g.q], YMM[g.q])?;
        a.vpbroadcastw(XMM[g.t], word_ptr(wmem(i, disp)))?;
        a.vcvtph2ps(YMM[g.s], XMM[g.t])?;
        a.vmulps(YMM[g.s], YMM[g.s], YMM[sx])?;
        a.vmulps(YMM[g.q], YMM[g.q], YMM[g.s])?;
        let acc = g.acc(i, 0, k);
        a.vaddps(YMM[acc], YMM[acc], YMM[g.q])?;
    }
    Ok(())
}

// ------------------------------------------------------- packed-x path ---

/// Bytes of one packed entry (one vector, one block pair): the quants
/// (64), the correction `-128 · Σx` per dword (64), the scales as f32 (64).
pub const XP_ENTRY: i32 = 192;

/// Largest packed copy of x, bytes (a call whose copy would be larger
/// takes the other path): 8 vectors of up to 5,440 columns.
pub const XP_LIMIT: i32 = 64 << 10;

/// The stack the packed-x path takes: a slot for the copy's address, the
/// copy, and room to align it to 64 bytes.
const XP_FRAME: i32 = 64 + XP_LIMIT + 64;

/// The slot holding the packed copy's address, from rsp.
const S_XBUF: i32 = 0;

/// Registers of the packed-x passes (`2 · rows · vecs ≤ 24` accumulators
/// from zmm8).
fn xp_regs(rows: usize, vecs: usize) -> Regs {
    Regs {
        acc: (8..8 + 2 * rows * vecs).collect(),
        vecs,
        groups: 2,
        bias: 0,
        ones: 7, // unused: VNNI only
        xq: Vec::new(),
        corr: Vec::new(),
        sx: Vec::new(),
        wq: 1,
        sw: 2,
        q: 3,
        s: 4,
        t: 5,
        t2: 6,
    }
}

/// The packed-x path (AVX-512 VNNI, multi-row twins), taken when the call
/// has two vectors or more and their copy fits [`XP_LIMIT`]; otherwise it
/// falls through to the code after it. x is first copied, once per call,
/// into a 64-byte aligned buffer on the stack, entry `(n, j)` (vector `n`,
/// block pair `j`, `XP_ENTRY` bytes) at `(n · pairs + j) · 192`: the pair's
/// quants, their correction and their scales widened to f32, each a whole
/// zmm (a ragged last block's upper half all zero). The row passes then
/// take every x operand from memory, so a pair of a row and a vector costs
/// the contract's five operations (`vpdpbusd`, convert, two multiplies,
/// add) and one load of the correction; each row's quants, bias and
/// scales serve three vectors. Ends by jumping to `done`.
fn packed_x_path(
    e: &mut Emitter,
    marks: &mut Vec<Mark>,
    rows: usize,
    prefetch: i32,
    done: CodeLabel,
) -> Result<(), EmitError> {
    let mut other = e.create_label();
    let g1 = xp_regs(1, 1);
    let a = e.asm();
    // Two vectors or more, and the copy fits: pairs · batch · 192.
    a.mov(rax, qword_ptr(ARGS + offsets::BATCH))?;
    a.cmp(rax, 2)?;
    a.jb(other)?;
    a.lea(rax, BLOCKS + 1)?;
    a.shr(rax, 1)?;
    a.imul_2(rax, qword_ptr(ARGS + offsets::BATCH))?;
    a.imul_3(rax, rax, XP_ENTRY)?;
    a.cmp(rax, XP_LIMIT)?;
    a.ja(other)?;
    // The frame, probed a page at a time downwards (a guard page below the
    // stack is hit in order, never jumped over).
    a.sub(rsp, XP_FRAME)?;
    for off in (0..XP_FRAME).step_by(4096).rev() {
        e.asm().or(qword_ptr(rsp + off), 0)?;
    }
    let a = e.asm();
    a.lea(rax, qword_ptr(rsp + 64 + 63))?;
    a.and(rax, -64)?;
    a.mov(qword_ptr(rsp + S_XBUF), rax)?;

    // Pack: vector by vector, pair by pair; PW walks x, PX the copy.
    a.mov(PX, rax)?;
    a.xor(N, N)?;
    let mut packed = e.create_label();
    let mark = loop_head(e, "xp.pack.batch".to_owned())?;
    let top = mark.head;
    let a = e.asm();
    a.cmp(N, qword_ptr(ARGS + offsets::BATCH))?;
    a.jae(packed)?;
    a.mov(PW, N)?;
    a.imul_2(PW, ROW_BYTES)?;
    a.add(PW, X)?;
    a.mov(COUNT, BLOCKS)?;
    a.shr(COUNT, 1)?;
    let mut odd = e.create_label();
    e.asm().je(odd)?;
    let pairs = loop_head(e, "xp.pack.pairs".to_owned())?;
    let pairs_top = pairs.head;
    pack_pair(e, &g1, true)?;
    let a = e.asm();
    a.add(PW, 2 * BLOCK_BYTES as i32)?;
    a.add(PX, XP_ENTRY)?;
    a.dec(COUNT)?;
    loop_back(e, pairs, marks)?;
    e.asm().jne(pairs_top)?;
    e.set_label(&mut odd)?;
    let mut next = e.create_label();
    e.asm().test(BLOCKS, 1)?;
    e.asm().je(next)?;
    pack_pair(e, &g1, false)?;
    e.asm().add(PX, XP_ENTRY)?;
    e.set_label(&mut next)?;
    e.asm().inc(N)?;
    loop_back(e, mark, marks)?;
    e.asm().jmp(top)?;
    e.set_label(&mut packed)?;
    // From here X holds the stride between two vectors' entries.
    let a = e.asm();
    a.lea(X, BLOCKS + 1)?;
    a.shr(X, 1)?;
    a.imul_3(X, X, XP_ENTRY)?;

    // Row passes as on the other path, vectors three at a time, then one.
    let mut leave = e.create_label();
    let mut r_single = e.create_label();
    e.asm().mov(R, qword_ptr(ARGS + offsets::ROW_START))?;
    let mark = loop_head(e, format!("xp.r{rows}.rows"))?;
    let top = mark.head;
    let a = e.asm();
    a.lea(rax, R + rows as i32)?;
    a.cmp(rax, qword_ptr(ARGS + offsets::ROW_END))?;
    a.ja(r_single)?;
    xp_vectors(e, marks, rows, prefetch)?;
    e.asm().add(R, rows as i32)?;
    loop_back(e, mark, marks)?;
    e.asm().jmp(top)?;
    e.set_label(&mut r_single)?;
    let mark = Mark {
        name: "xp.r1.rows".to_owned(),
        head: r_single,
        back: e.create_label(),
    };
    e.asm().cmp(R, qword_ptr(ARGS + offsets::ROW_END))?;
    e.asm().jae(leave)?;
    xp_vectors(e, marks, 1, prefetch)?;
    e.asm().inc(R)?;
    loop_back(e, mark, marks)?;
    e.asm().jmp(r_single)?;
    e.set_label(&mut leave)?;
    e.asm().add(rsp, XP_FRAME)?;
    e.asm().jmp(done)?;
    e.set_label(&mut other)
}

/// The vector loops of a packed-x row pass over `rows` rows at `R`.
fn xp_vectors(
    e: &mut Emitter,
    marks: &mut Vec<Mark>,
    rows: usize,
    prefetch: i32,
) -> Result<(), EmitError> {
    // A pass of `vecs` vectors over the packed copy.
    let packed = |vecs: usize| {
        let g = xp_regs(rows, vecs);
        move |e: &mut Emitter, marks: &mut Vec<Mark>| {
            pass(
                e,
                marks,
                Tier::Avx512Vnni,
                rows,
                &g,
                prefetch,
                XSource::Packed,
            )
        }
    };
    e.asm().xor(N, N)?;
    let name = |group: &str| format!("xp.r{rows}.batch{group}");
    let pairs = vector_groups(e, marks, name("3"), 3, None, packed(3))?;
    let singles = vector_groups(e, marks, name("2"), 2, Some(pairs), packed(2))?;
    each_vector_named(e, marks, name(""), Some(singles), packed(1))
}

/// Copy the pair (or, `!pair`, the single block) of x at PW into the entry
/// at PX: quants, correction, scales (module docs of [`packed_x_path`]).
fn pack_pair(e: &mut Emitter, g: &Regs, pair: bool) -> Result<(), EmitError> {
    let (xq, corr, sx) = (g.q, g.s, g.sw);
    let a = e.asm();
    // A ymm load zeroes the upper half: a single block's other half is 0.
    a.vmovdqu32(YMM[xq], ymmword_ptr(PW + 2))?;
    if pair {
        a.vinserti64x4(
            ZMM[xq],
            ZMM[xq],
            ymmword_ptr(PW + BLOCK_BYTES as i32 + 2),
            1,
        )?;
    }
    a.vmovdqa64(zmmword_ptr(PX), ZMM[xq])?;
    // corr = 0 - dot(0x80, x) = -128 · Σx per dword, as the other path.
    a.vpxord(ZMM[g.t], ZMM[g.t], ZMM[g.t])?;
    a.vpxord(ZMM[corr], ZMM[corr], ZMM[corr])?;
    a.vpdpbusd(ZMM[corr], ZMM[g.bias], ZMM[xq])?;
    a.vpsubd(ZMM[corr], ZMM[g.t], ZMM[corr])?;
    a.vmovdqa64(zmmword_ptr(PX + 64), ZMM[corr])?;
    scales512(e, sx, g, PW + 0, PW + BLOCK_BYTES as i32, pair)?;
    e.asm().vmovaps(zmmword_ptr(PX + 128), ZMM[sx])?;
    Ok(())
}

/// The entry of vector `n` of the pass (X: the stride between vectors).
fn xp_mem(n: usize, disp: i32) -> AsmMemoryOperand {
    match n {
        0 => PX + disp,
        1 => PX + X + disp,
        _ => PX + X * 2 + disp,
    }
}

/// Blocks `b, b+1` of W at `wdisp` from PW (only `b` when `!pair`), whose
/// packed x entries are at `xdisp` from PX, into accumulator pair `p` of
/// each row and vector of the pass.
fn xp_step(
    e: &mut Emitter,
    rows: usize,
    g: &Regs,
    wdisp: i32,
    xdisp: i32,
    p: usize,
    pair: bool,
) -> Result<(), EmitError> {
    let next = wdisp + BLOCK_BYTES as i32;
    for i in 0..rows {
        let a = e.asm();
        a.vmovdqu32(YMM[g.wq], ymmword_ptr(wmem(i, wdisp + 2)))?;
        if pair {
            a.vinserti64x4(ZMM[g.wq], ZMM[g.wq], ymmword_ptr(wmem(i, next + 2)), 1)?;
        }
        a.vpxorq(ZMM[g.wq], ZMM[g.wq], ZMM[g.bias])?;
        scales512(e, g.sw, g, wmem(i, wdisp), wmem(i, next), pair)?;
        for n in 0..g.vecs {
            let a = e.asm();
            a.vmovdqa64(ZMM[g.q], zmmword_ptr(xp_mem(n, xdisp + 64)))?;
            a.vpdpbusd(ZMM[g.q], ZMM[g.wq], zmmword_ptr(xp_mem(n, xdisp)))?;
            a.vcvtdq2ps(ZMM[g.q], ZMM[g.q])?;
            a.vmulps(ZMM[g.s], ZMM[g.sw], zmmword_ptr(xp_mem(n, xdisp + 128)))?;
            a.vmulps(ZMM[g.q], ZMM[g.q], ZMM[g.s])?;
            let acc = g.acc(i, n, p);
            a.vaddps(ZMM[acc], ZMM[acc], ZMM[g.q])?;
        }
    }
    Ok(())
}
