//! x64 twins of `q8_0.matvec`: the arm's offer, the body emitted through
//! weft-x64.
//!
//! - [`Tier::Avx512Vnni`]: zmm, two blocks per instruction. Quants of
//!   blocks `b, b+1` (34 bytes apart) are loaded as one zmm (a ymm load and
//!   `vinserti64x4`); the integer part is the bias method
//!   `vpdpbusd(c, w ^ 0x80, x)` with `c = -128 · Σx` (made once per pass
//!   with `vpdpbusd` on `0x80` bytes and shared by the pass's rows). Scales:
//!   two `vpbroadcastw`, `vinserti32x4`, `vcvtph2ps zmm` (F16C-exact
//!   widening). Accumulators: `A = acc[0]|acc[1]`, `B = acc[2]|acc[3]`.
//!   A ragged last block is loaded alone (upper half zero, scale zero).
//! - [`Tier::Avx2`]: ymm, one block per step, sign method
//!   (`vpabsb w`, `vpsignb x, w`, `vpmaddubsw`, `vpmaddwd` with ones: exact
//!   because activation quants are in `-127..=127`), `vpbroadcastw` +
//!   `vcvtph2ps ymm` for scales, four ymm accumulators per row.
//!
//! Both have a multi-row pass (`rows_per_pass` rows sharing the x loads and
//! x scales, each row's stream software-prefetched 2 KiB ahead: without it
//! the 2- and 4-row passes ran at about half speed from DRAM) followed by
//! a one-row pass for the remaining rows; rows are
//! the outer loop and vectors the inner one (a batch re-reads a pass's W
//! rows from cache). Every operation of the float part is the contract's
//! (`vmulps` then `vaddps`, never FMA), and the fold is the contract's
//! order.
//!
//! Frame: SysV or Win64 ([`Q8MatvecX64::with_abi`]); the argument pointer
//! is moved to `rdi` for the whole body (on Win64 it arrives in `rcx`,
//! which the block loops count with); `rbx`, `rbp`, `r12`–`r15` (and on
//! Win64 `rdi`, `rsi`, `xmm6`–`xmm15`) are saved by the façade's frame.
//! The body reads only the blocks of rows `row_start..row_end` and of the
//! `batch` vectors, and writes only their outputs.

use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};
use weft_x64::iced_x86::code_asm::registers::{xmm, ymm, zmm};
use weft_x64::iced_x86::code_asm::{
    byte_ptr, dword_ptr, qword_ptr, r10, r11, r12, r13, r14, r15, r8, r9, rax, rbp, rbx, rcx, rdi,
    rdx, rsi, word_ptr, ymmword_ptr, AsmMemoryOperand, AsmRegister64, AsmRegisterXmm,
    AsmRegisterYmm, AsmRegisterZmm,
};
use weft_x64::{Abi, Clobbers, EmitError, Emitter};

use super::arm::ARM_NAME;
use super::{offsets, ARGS_NAME, BLOCK_BYTES, FAMILY};

/// Which instruction set a twin is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// AVX2 + F16C, ymm registers, `vpmaddubsw`/`vpmaddwd`.
    Avx2,
    /// AVX-512 F/BW/VL + AVX-512 VNNI, zmm registers, EVEX `vpdpbusd`.
    Avx512Vnni,
}

/// One x64 twin of the `q8_0.matvec` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Q8MatvecX64 {
    tier: Tier,
    rows_per_pass: u8,
    abi: Abi,
}

/// Every twin this module offers.
pub const TWINS: [Q8MatvecX64; 5] = [
    Q8MatvecX64::new(Tier::Avx2, 1),
    Q8MatvecX64::new(Tier::Avx2, 2),
    Q8MatvecX64::new(Tier::Avx512Vnni, 1),
    Q8MatvecX64::new(Tier::Avx512Vnni, 2),
    Q8MatvecX64::new(Tier::Avx512Vnni, 4),
];

const AVX2_FEATURES: &[Feature] = &[Feature::Avx, Feature::Avx2, Feature::F16c];
const AVX512_FEATURES: &[Feature] = &[
    Feature::Avx,
    Feature::Avx2,
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

    /// Emit the body (independent of the geometry: any rows, blocks, batch
    /// the arguments name).
    pub fn emit_body(&self) -> Result<weft_x64::Emitted, Refusal> {
        let max = match self.tier {
            Tier::Avx2 => 2,
            Tier::Avx512Vnni => 4,
        };
        if !(1..=max).contains(&self.rows_per_pass) || self.rows_per_pass == 3 {
            return Err(Refusal::EmitError {
                message: format!("{:?} has no {}-row pass", self.tier, self.rows_per_pass),
            });
        }
        emit(self.tier, usize::from(self.rows_per_pass), self.abi).map_err(|e| Refusal::EmitError {
            message: e.to_string(),
        })
    }
}

// SAFETY: the body reads and writes only what the arguments' extents name
// and returns normally (module docs); validation checks its results.
unsafe impl Twin for Q8MatvecX64 {
    fn name(&self) -> &'static str {
        match (self.tier, self.rows_per_pass) {
            (Tier::Avx2, 1) => "q8_0.matvec.twin.avx2.r1",
            (Tier::Avx2, 2) => "q8_0.matvec.twin.avx2.r2",
            (Tier::Avx2, _) => "q8_0.matvec.twin.avx2",
            (Tier::Avx512Vnni, 1) => "q8_0.matvec.twin.avx512vnni.r1",
            (Tier::Avx512Vnni, 2) => "q8_0.matvec.twin.avx512vnni.r2",
            (Tier::Avx512Vnni, 4) => "q8_0.matvec.twin.avx512vnni.r4",
            (Tier::Avx512Vnni, _) => "q8_0.matvec.twin.avx512vnni",
        }
    }

    fn arm(&self) -> &'static str {
        ARM_NAME
    }

    fn isa(&self) -> Isa {
        Isa::X86_64
    }

    fn requires(&self) -> &'static [Feature] {
        match self.tier {
            Tier::Avx2 => AVX2_FEATURES,
            Tier::Avx512Vnni => AVX512_FEATURES,
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
        let emitted = self.emit_body()?;
        Ok(NativeCode {
            isa: Isa::X86_64,
            listing: emitted.listing.to_string(),
            bytes: emitted.bytes,
            loops: Vec::new(),
        })
    }

    /// Rows outside, vectors inside: a pass loop over `rows / rows_per_pass`
    /// multi-row passes (when `rows_per_pass > 1`), then a one-row loop
    /// over the remaining rows, each with the vectors loop and the
    /// four-block loop inside.
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        let g = &offer.contract.geometry;
        let (Some(rows), Some(cols)) = (g.get("rows"), g.get("cols")) else {
            return offer.loops.clone();
        };
        let batch = g.get("batch").unwrap_or(1);
        let per = u64::from(self.rows_per_pass.max(1));
        let blocks4 = cols / super::BLOCK_LEN as u64 / 4;
        let trip = |name: &str, trips, depth| LoopTrip {
            name: name.to_owned(),
            trips,
            depth,
        };
        let mut nest = Vec::new();
        if per > 1 {
            nest.push(trip("passes", rows / per, 0));
            nest.push(trip("vectors", batch, 1));
            nest.push(trip("blocks4", blocks4, 2));
        }
        nest.push(trip("rows", if per > 1 { rows % per } else { rows }, 0));
        nest.push(trip("vectors", batch, 1));
        nest.push(trip("blocks4", blocks4, 2));
        nest
    }
}

// ---------------------------------------------------------------- body ---

const ZMM: [AsmRegisterZmm; 32] = [
    zmm::zmm0,
    zmm::zmm1,
    zmm::zmm2,
    zmm::zmm3,
    zmm::zmm4,
    zmm::zmm5,
    zmm::zmm6,
    zmm::zmm7,
    zmm::zmm8,
    zmm::zmm9,
    zmm::zmm10,
    zmm::zmm11,
    zmm::zmm12,
    zmm::zmm13,
    zmm::zmm14,
    zmm::zmm15,
    zmm::zmm16,
    zmm::zmm17,
    zmm::zmm18,
    zmm::zmm19,
    zmm::zmm20,
    zmm::zmm21,
    zmm::zmm22,
    zmm::zmm23,
    zmm::zmm24,
    zmm::zmm25,
    zmm::zmm26,
    zmm::zmm27,
    zmm::zmm28,
    zmm::zmm29,
    zmm::zmm30,
    zmm::zmm31,
];
const YMM: [AsmRegisterYmm; 32] = [
    ymm::ymm0,
    ymm::ymm1,
    ymm::ymm2,
    ymm::ymm3,
    ymm::ymm4,
    ymm::ymm5,
    ymm::ymm6,
    ymm::ymm7,
    ymm::ymm8,
    ymm::ymm9,
    ymm::ymm10,
    ymm::ymm11,
    ymm::ymm12,
    ymm::ymm13,
    ymm::ymm14,
    ymm::ymm15,
    ymm::ymm16,
    ymm::ymm17,
    ymm::ymm18,
    ymm::ymm19,
    ymm::ymm20,
    ymm::ymm21,
    ymm::ymm22,
    ymm::ymm23,
    ymm::ymm24,
    ymm::ymm25,
    ymm::ymm26,
    ymm::ymm27,
    ymm::ymm28,
    ymm::ymm29,
    ymm::ymm30,
    ymm::ymm31,
];
const XMM: [AsmRegisterXmm; 32] = [
    xmm::xmm0,
    xmm::xmm1,
    xmm::xmm2,
    xmm::xmm3,
    xmm::xmm4,
    xmm::xmm5,
    xmm::xmm6,
    xmm::xmm7,
    xmm::xmm8,
    xmm::xmm9,
    xmm::xmm10,
    xmm::xmm11,
    xmm::xmm12,
    xmm::xmm13,
    xmm::xmm14,
    xmm::xmm15,
    xmm::xmm16,
    xmm::xmm17,
    xmm::xmm18,
    xmm::xmm19,
    xmm::xmm20,
    xmm::xmm21,
    xmm::xmm22,
    xmm::xmm23,
    xmm::xmm24,
    xmm::xmm25,
    xmm::xmm26,
    xmm::xmm27,
    xmm::xmm28,
    xmm::xmm29,
    xmm::xmm30,
    xmm::xmm31,
];

/// How far ahead (bytes) the multi-row passes prefetch each row.
const PREFETCH: i32 = 2048;

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

/// Vector register numbers (chosen outside xmm6–xmm15 where it is free to,
/// but every one is declared, so Win64 saves what it must).
struct Regs {
    /// Accumulators: row `i`, group pair `p` (AVX-512: 2 per row) or group
    /// `g` (AVX2: 4 per row).
    acc: Vec<usize>,
    bias: usize,
    ones: usize,
    xq: usize,
    corr: usize,
    sx: usize,
    wq: usize,
    q: usize,
    s: usize,
    t: usize,
    t2: usize,
}

impl Regs {
    fn new(tier: Tier, rows: usize) -> Regs {
        match tier {
            Tier::Avx512Vnni => Regs {
                acc: (16..16 + 2 * rows).collect(),
                bias: 0,
                ones: 1,
                xq: 2,
                corr: 3,
                sx: 4,
                wq: 5,
                q: 24,
                s: 25,
                t: 26,
                t2: 27,
            },
            Tier::Avx2 => Regs {
                // 4 per row: ymm0..3 (row 0), ymm4..5 + 8..9 (row 1).
                acc: [0, 1, 2, 3, 4, 5, 8, 9][..4 * rows].to_vec(),
                bias: 15, // unused
                ones: 6,
                xq: 7,
                corr: 15, // unused
                sx: 10,
                wq: 11,
                q: 12,
                s: 13,
                t: 14,
                t2: 15,
            },
        }
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

fn emit(tier: Tier, rows: usize, abi: Abi) -> Result<weft_x64::Emitted, EmitError> {
    let mut e = Emitter::new(abi)?;
    let regs_r = Regs::new(tier, rows);
    let regs_1 = Regs::new(tier, 1);
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
    let body = |e: &mut Emitter| -> Result<(), EmitError> {
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
            Tier::Avx2 => {
                e.broadcast_u16(YMM[regs_r.ones], 1)?;
            }
        }
        // Rows outside, vectors inside: a pass's W rows are read once per
        // vector while they are still in cache.
        let mut done = e.create_label();
        let mut r_multi = e.create_label();
        let mut r_single = e.create_label();
        e.asm().mov(R, qword_ptr(args + offsets::ROW_START))?;
        if rows > 1 {
            e.set_label(&mut r_multi)?;
            e.asm().lea(rax, R + rows as i32)?;
            e.asm().cmp(rax, qword_ptr(args + offsets::ROW_END))?;
            e.asm().ja(r_single)?;
            each_vector(e, |e| pass(e, tier, rows, &regs_r))?;
            e.asm().add(R, rows as i32)?;
            e.asm().jmp(r_multi)?;
        }
        e.set_label(&mut r_single)?;
        e.asm().cmp(R, qword_ptr(args + offsets::ROW_END))?;
        e.asm().jae(done)?;
        each_vector(e, |e| pass(e, tier, 1, &regs_1))?;
        e.asm().inc(R)?;
        e.asm().jmp(r_single)?;
        e.set_label(&mut done)?;
        Ok(())
    };
    match tier {
        Tier::Avx512Vnni => e.evex(body)?,
        Tier::Avx2 => body(&mut e)?,
    }
    e.epilogue()?;
    e.finish()
}

/// `body` for `N = 0..batch` (at least once: the contract has `batch ≥ 1`,
/// and the loop tests first anyway).
fn each_vector(
    e: &mut Emitter,
    body: impl FnOnce(&mut Emitter) -> Result<(), EmitError>,
) -> Result<(), EmitError> {
    let mut top = e.create_label();
    let mut out = e.create_label();
    e.asm().xor(N, N)?;
    e.set_label(&mut top)?;
    e.asm().cmp(N, qword_ptr(ARGS + offsets::BATCH))?;
    e.asm().jae(out)?;
    body(e)?;
    e.asm().inc(N)?;
    e.asm().jmp(top)?;
    e.set_label(&mut out)
}

/// One pass over `rows` rows starting at row `R` of vector `N`.
fn pass(e: &mut Emitter, tier: Tier, rows: usize, g: &Regs) -> Result<(), EmitError> {
    let a = e.asm();
    a.mov(PW, R)?;
    a.imul_2(PW, ROW_BYTES)?;
    a.add(PW, W)?;
    a.mov(PX, N)?;
    a.imul_2(PX, ROW_BYTES)?;
    a.add(PX, X)?;
    for &acc in &g.acc {
        match tier {
            Tier::Avx512Vnni => a.vpxord(ZMM[acc], ZMM[acc], ZMM[acc])?,
            Tier::Avx2 => a.vpxor(YMM[acc], YMM[acc], YMM[acc])?,
        }
    }
    a.mov(COUNT, BLOCKS)?;
    a.shr(COUNT, 2)?;
    e.counted_loop(COUNT, |e| {
        // Software prefetch of every row's stream, PREFETCH bytes ahead: a
        // multi-row pass reads several rows at once, which the hardware
        // prefetchers follow poorly from DRAM (measured: 4-row pass at
        // 4096×448, 4135 µs without, 2284 µs with 2 KiB).
        if rows > 1 {
            for i in 0..rows {
                for line in [0, 68] {
                    e.asm().prefetcht0(byte_ptr(wmem(i, PREFETCH + line)))?;
                }
            }
        }
        match tier {
            Tier::Avx512Vnni => {
                blocks512(e, rows, g, 0, 0, true)?;
                blocks512(e, rows, g, 2 * BLOCK_BYTES as i32, 1, true)?;
            }
            Tier::Avx2 => {
                for k in 0..4 {
                    block256(e, rows, g, k * BLOCK_BYTES as i32, k as usize)?;
                }
            }
        }
        e.asm().add(PW, 4 * BLOCK_BYTES as i32)?;
        e.asm().add(PX, 4 * BLOCK_BYTES as i32)?;
        Ok(())
    })?;
    // Tail: blocks % 4 more blocks into groups 0, 1, 2.
    let mut fold = e.create_label();
    let a = e.asm();
    a.mov(REM, BLOCKS)?;
    a.and(REM, 3)?;
    match tier {
        Tier::Avx512Vnni => {
            let mut one = e.create_label();
            let mut two = e.create_label();
            e.asm().cmp(REM, 1)?;
            e.asm().je(one)?;
            e.asm().cmp(REM, 2)?;
            e.asm().je(two)?;
            e.asm().cmp(REM, 3)?;
            e.asm().jne(fold)?;
            blocks512(e, rows, g, 0, 0, true)?;
            blocks512(e, rows, g, 2 * BLOCK_BYTES as i32, 1, false)?;
            e.asm().jmp(fold)?;
            e.set_label(&mut two)?;
            blocks512(e, rows, g, 0, 0, true)?;
            e.asm().jmp(fold)?;
            e.set_label(&mut one)?;
            blocks512(e, rows, g, 0, 0, false)?;
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
    // The contract's fold and one store per row.
    let a = e.asm();
    a.mov(rax, N)?;
    a.imul_2(rax, ROWS)?;
    a.add(rax, R)?;
    for i in 0..rows {
        let (t, h) = (g.t, g.t2);
        match tier {
            Tier::Avx512Vnni => {
                // (g0+g2 | g1+g3), then low + high.
                a.vaddps(ZMM[t], ZMM[g.acc[2 * i]], ZMM[g.acc[2 * i + 1]])?;
                a.vextractf64x4(YMM[h], ZMM[t], 1)?;
                a.vaddps(YMM[t], YMM[t], YMM[h])?;
            }
            Tier::Avx2 => {
                let acc = &g.acc[4 * i..4 * i + 4];
                a.vaddps(YMM[t], YMM[acc[0]], YMM[acc[2]])?;
                a.vaddps(YMM[h], YMM[acc[1]], YMM[acc[3]])?;
                a.vaddps(YMM[t], YMM[t], YMM[h])?;
            }
        }
        // u[j] = t[j] + t[j+4]; (u0+u2, u1+u3); v0 + v1.
        match tier {
            Tier::Avx512Vnni => a.vextractf32x4(XMM[h], YMM[t], 1)?,
            Tier::Avx2 => a.vextractf128(XMM[h], YMM[t], 1)?,
        }
        a.vaddps(XMM[t], XMM[t], XMM[h])?;
        a.vmovhlps(XMM[h], XMM[h], XMM[t])?;
        a.vaddps(XMM[t], XMM[t], XMM[h])?;
        a.vmovshdup(XMM[h], XMM[t])?;
        a.vaddss(XMM[t], XMM[t], XMM[h])?;
        a.vmovss(dword_ptr(Y + rax * 4 + 4 * i as i32), XMM[t])?;
    }
    Ok(())
}

/// AVX-512: blocks `b, b+1` at `disp` from PW/PX (only `b` when `!pair`)
/// into accumulator pair `p` of each row.
fn blocks512(
    e: &mut Emitter,
    rows: usize,
    g: &Regs,
    disp: i32,
    p: usize,
    pair: bool,
) -> Result<(), EmitError> {
    let a = e.asm();
    let next = disp + BLOCK_BYTES as i32;
    // x quants, -128·Σx, x scales: shared by the rows.
    a.vmovdqu32(YMM[g.xq], ymmword_ptr(PX + disp + 2))?;
    if pair {
        a.vinserti64x4(ZMM[g.xq], ZMM[g.xq], ymmword_ptr(PX + next + 2), 1)?;
    }
    a.vpxord(ZMM[g.corr], ZMM[g.corr], ZMM[g.corr])?;
    a.vpdpbusd(ZMM[g.corr], ZMM[g.bias], ZMM[g.xq])?;
    a.vpxord(ZMM[g.t], ZMM[g.t], ZMM[g.t])?;
    a.vpsubd(ZMM[g.corr], ZMM[g.t], ZMM[g.corr])?;
    scales512(e, g.sx, g, PX + disp, PX + next, pair)?;
    for i in 0..rows {
        let a = e.asm();
        a.vmovdqu32(YMM[g.wq], ymmword_ptr(wmem(i, disp + 2)))?;
        if pair {
            a.vinserti64x4(ZMM[g.wq], ZMM[g.wq], ymmword_ptr(wmem(i, next + 2)), 1)?;
        }
        a.vpxorq(ZMM[g.wq], ZMM[g.wq], ZMM[g.bias])?;
        a.vmovdqa64(ZMM[g.q], ZMM[g.corr])?;
        a.vpdpbusd(ZMM[g.q], ZMM[g.wq], ZMM[g.xq])?;
        a.vcvtdq2ps(ZMM[g.q], ZMM[g.q])?;
        scales512(e, g.s, g, wmem(i, disp), wmem(i, next), pair)?;
        let a = e.asm();
        a.vmulps(ZMM[g.s], ZMM[g.s], ZMM[g.sx])?;
        a.vmulps(ZMM[g.q], ZMM[g.q], ZMM[g.s])?;
        let acc = g.acc[2 * i + p];
        a.vaddps(ZMM[acc], ZMM[acc], ZMM[g.q])?;
    }
    Ok(())
}

/// `dst` = f32 of the scale at `lo` in lanes 0..8 and at `hi` in lanes
/// 8..16 (zero there when `!pair`).
fn scales512(
    e: &mut Emitter,
    dst: usize,
    g: &Regs,
    lo: AsmMemoryOperand,
    hi: AsmMemoryOperand,
    pair: bool,
) -> Result<(), EmitError> {
    let a = e.asm();
    a.vpbroadcastw(XMM[g.t], word_ptr(lo))?;
    if pair {
        a.vpbroadcastw(XMM[g.t2], word_ptr(hi))?;
        a.vinserti32x4(YMM[g.t], YMM[g.t], XMM[g.t2], 1)?;
    }
    a.vcvtph2ps(ZMM[dst], YMM[g.t])?;
    Ok(())
}

/// AVX2: block at `disp` from PW/PX into group `k` of each row.
fn block256(e: &mut Emitter, rows: usize, g: &Regs, disp: i32, k: usize) -> Result<(), EmitError> {
    let a = e.asm();
    a.vmovdqu(YMM[g.xq], ymmword_ptr(PX + disp + 2))?;
    a.vpbroadcastw(XMM[g.t], word_ptr(PX + disp))?;
    a.vcvtph2ps(YMM[g.sx], XMM[g.t])?;
    for i in 0..rows {
        a.vmovdqu(YMM[g.wq], ymmword_ptr(wmem(i, disp + 2)))?;
        // x' = sign(w)·x (exact: x ≠ -128), u = |w| (128 for -128, as u8).
        a.vpsignb(YMM[g.q], YMM[g.xq], YMM[g.wq])?;
        a.vpabsb(YMM[g.wq], YMM[g.wq])?;
        a.vpmaddubsw(YMM[g.q], YMM[g.wq], YMM[g.q])?;
        a.vpmaddwd(YMM[g.q], YMM[g.q], YMM[g.ones])?;
        a.vcvtdq2ps(YMM[g.q], YMM[g.q])?;
        a.vpbroadcastw(XMM[g.t], word_ptr(wmem(i, disp)))?;
        a.vcvtph2ps(YMM[g.s], XMM[g.t])?;
        a.vmulps(YMM[g.s], YMM[g.s], YMM[g.sx])?;
        a.vmulps(YMM[g.q], YMM[g.q], YMM[g.s])?;
        let acc = g.acc[4 * i + k];
        a.vaddps(YMM[acc], YMM[acc], YMM[g.q])?;
    }
    Ok(())
}
