//! x64 twins of the Winograd arm: AVX-512 (blocks of 7 tiles × 32
//! output channels) and AVX2 + FMA (blocks of 6 tiles × 16 channels),
//! the arm's offer and packed `U`, the contract's operations per output.
//!
//! A call walks the tiles of its rows in flattened `(b, th, tw)` order,
//! in blocks of `T` consecutive tiles (a block may span tile rows and
//! images; the call's last one is cut short: its missing tiles read only
//! padding and store nothing). Per block:
//!
//! 1. **V** (`v_tiles`, `v_chunks`): per tile, its rows' and columns'
//!    positions; per vector of input channels (16 or 8, the last one
//!    masked), each input row's four pixels loaded under column masks
//!    (zero outside; a row outside is zero without a load), the row step
//!    `e = d B` into a stack scratch, then the column step `V = Bᵀ e`
//!    stored to `V[ξ][t][ci]` on the stack (`16 · T · ⌈cin/16⌉·16` floats).
//! 2. **Products** (`groups`, `xi`, `ci`): per group of output channels
//!    and position ξ, `T × 2` accumulators from +0; per `ci` two vectors of
//!    `U`, one broadcast of `V[ξ][t][ci]` per tile, `2T` FMAs (`fma(V, U,
//!    m)`); the accumulators go to `M[ξ][t]` on the stack.
//! 3. **Output** (`o_tiles`): per tile and vector, `Y = Aᵀ M A` from the
//!    stack in the contract's order, `+ bias`, the epilogue (`vmaxps acc,
//!    zero, acc`, `vminps acc, six, acc`), and the stores of the pixels in
//!    the call's rows and the image's columns (masked to `cout`).
//!
//! The frame is fixed (under [`super::STACK_BYTES`]), allocated page by
//! page with a touch of each (no probe call: bodies are leaves).

use std::sync::Arc;

use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};
use weft_x64::iced_x86::code_asm::{
    cl, dword_ptr, eax, ecx, edx, k1, k2, k3, k4, k5, k6, ptr, qword_ptr, r10, r11, r12, r13, r13b,
    r13d, r14, r14b, r14d, r15, r8, r9, rax, rbp, rbx, rcx, rdi, rdx, rsi, rsp, AsmMemoryOperand,
    AsmRegister64, AsmRegisterK, CodeLabel,
};
use weft_x64::regs::{XMM, YMM, ZMM};
use weft_x64::{Abi, Clobbers, EmitError, Emitter};

use super::{check_offer, tiles, trip, MAX_CIN};
use crate::{offsets, ConvGeometry, Shape};

/// Which instruction set a twin is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// AVX2 + FMA: 16 ymm.
    Avx2,
    /// AVX-512F: 32 zmm and opmasks.
    Avx512,
}

impl Tier {
    /// f32 lanes per vector.
    pub fn lanes(self) -> usize {
        match self {
            Tier::Avx2 => 8,
            Tier::Avx512 => 16,
        }
    }

    /// Tiles per block (the register tile's rows).
    pub fn tiles(self) -> usize {
        match self {
            Tier::Avx2 => 6,
            Tier::Avx512 => 7,
        }
    }

    fn vlb(self) -> i32 {
        4 * self.lanes() as i32
    }

    /// Output channels per group (two vectors).
    pub fn group(self) -> u64 {
        2 * self.lanes() as u64
    }
}

/// One Winograd x64 twin: a tier and a calling convention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WinogradX64 {
    tier: Tier,
    abi: Abi,
}

impl WinogradX64 {
    /// The twin in `tier` for the host's calling convention.
    pub const fn new(tier: Tier) -> WinogradX64 {
        WinogradX64 {
            tier,
            abi: Abi::host(),
        }
    }

    /// The same twin for another calling convention.
    pub const fn with_abi(self, abi: Abi) -> WinogradX64 {
        WinogradX64 { abi, ..self }
    }
}

/// The Winograd arm's x64 twins: AVX-512, then AVX2.
pub fn twins() -> Vec<Arc<dyn Twin>> {
    [Tier::Avx512, Tier::Avx2]
        .into_iter()
        .map(|t| Arc::new(WinogradX64::new(t)) as Arc<dyn Twin>)
        .collect()
}

const AVX512_FEATURES: &[Feature] = &[Feature::Avx, Feature::Fma, Feature::Avx512f];
const AVX2_FEATURES: &[Feature] = &[Feature::Avx, Feature::Avx2, Feature::Fma];

// SAFETY: the body reads x only at pixels inside the input (rows checked,
// columns under masks, channels past cin masked off), the packed filter's
// lines, its own frame (which it allocates page by page), and writes y
// only in its rows, columns below out_w and channels below cout (masked
// stores); it returns normally. Validation checks it against the arm.
unsafe impl Twin for WinogradX64 {
    fn name(&self) -> &'static str {
        match self.tier {
            Tier::Avx512 => "conv.direct.winograd.twin.avx512.7x32",
            Tier::Avx2 => "conv.direct.winograd.twin.avx2.6x16",
        }
    }

    fn isa(&self) -> Isa {
        Isa::X86_64
    }

    fn requires(&self) -> &'static [Feature] {
        match self.tier {
            Tier::Avx512 => AVX512_FEATURES,
            Tier::Avx2 => AVX2_FEATURES,
        }
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        check_offer(self.name(), offer)?;
        crate::twin_x64::native(self.name(), emit(self.tier, self.abi))
    }

    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        match ConvGeometry::from_geometry(&offer.contract.geometry) {
            Ok((g, s)) => {
                let wide = self.tier == Tier::Avx512;
                let lanes = crate::silu::x64_lanes(wide);
                crate::silu::after(nest(self.tier, &g, &s), &g, &s, lanes, wide)
            }
            Err(_) => offer.loops.clone(),
        }
    }
}

/// The twin's loop nest at `g` for a call over every row (module docs).
pub fn nest(tier: Tier, g: &ConvGeometry, s: &Shape) -> Vec<LoopTrip> {
    let (th, tw) = tiles(s);
    let t = tier.tiles() as u64;
    let blocks = (g.batch * th * tw).div_ceil(t);
    let groups = g.cout.div_ceil(tier.group());
    vec![
        trip("blocks", blocks, 0),
        trip("v_tiles", t, 1),
        trip("v_chunks", g.cin.div_ceil(tier.lanes() as u64), 2),
        trip("groups", groups, 1),
        trip("xi", 16, 2),
        trip("ci", g.cin, 3),
        trip("o_tiles", t, 2),
    ]
}

// Registers.
const ARGS: AsmRegister64 = rdi;
const PW: AsmRegister64 = rsi;
const PX0: AsmRegister64 = r8;
const PX1: AsmRegister64 = r9;
const CH: AsmRegister64 = r10;
const XS: AsmRegister64 = r11;
const XS3: AsmRegister64 = r12;
const XI: AsmRegister64 = r15;
const TT: AsmRegister64 = rbx;

// Scalar slots (bytes from rsp).
const S_PIXIN: i32 = 0;
const S_ROWIN: i32 = 8;
const S_IMGIN: i32 = 16;
const S_PIXOUT: i32 = 24;
const S_ROWOUT: i32 = 32;
const S_TILESW: i32 = 40;
const S_UB: i32 = 48;
const S_CIBYTES: i32 = 56;
const S_XISTRIDE: i32 = 64;
const S_XS: i32 = 72;
const S_VXI: i32 = 80;
const S_GROUPS: i32 = 88;
const S_TH: i32 = 96;
const S_TW: i32 = 104;
const S_IMGROW: i32 = 112;
const S_XIMG: i32 = 120;
const S_G: i32 = 136;
const S_GCH: i32 = 152;
const S_GBIAS: i32 = 160;
const S_UG: i32 = 168;
const S_GFULL: i32 = 176;
const S_CIN4: i32 = 184;
const S_VT: i32 = 192;
/// Four row pointers (0: the row is outside).
const S_ROWP: i32 = 256;
/// Four column offsets (bytes; 0 when outside).
const S_COLOFF: i32 = 288;
/// The 4 × 4 row-step scratch `e`, 64 bytes a vector.
const S_E: i32 = 512;
/// Four column masks: AVX-512 qwords, AVX2 32-byte vectors (−1 / 0).
const S_COLOK: i32 = 1536;
/// AVX2: the chunk's column masks (4 × 32 bytes).
const S_CM: i32 = 1664;
/// AVX2: 0 … 7 as dwords.
const S_IOTA: i32 = 1792;
/// AVX2: the group's store masks (2 × 32 bytes).
const S_SMASK: i32 = 1856;
/// Per block tile `t`, 64 bytes at `S_TILES + 64 t`: ih0, iw0, ximg,
/// ypix, store row 0, store row 1, store column 1.
const S_TILES: i32 = 1920;
const T_IH0: i32 = 0;
const T_IW0: i32 = 8;
const T_XIMG: i32 = 16;
const T_YPIX: i32 = 24;
const T_ST0: i32 = 32;
const T_ST1: i32 = 40;
const T_STC1: i32 = 48;
/// `M[ξ][t][u]`.
const S_M: i32 = 2432;

fn m_bytes(tier: Tier) -> i32 {
    16 * tier.tiles() as i32 * 2 * tier.vlb()
}

fn s_v(tier: Tier) -> i32 {
    S_M + m_bytes(tier)
}

/// The whole frame, a multiple of 4096.
pub fn frame_bytes(tier: Tier) -> i32 {
    let v = 16 * tier.tiles() as i32 * MAX_CIN as i32 * 4;
    (s_v(tier) + v + 4095) / 4096 * 4096
}

fn land(e: &mut Emitter, l: &mut CodeLabel) -> Result<(), EmitError> {
    e.asm().nop()?;
    e.set_label(l)
}

/// `while cond { body }`, top-tested: `cond` jumps to its label to leave.
fn while_loop(
    e: &mut Emitter,
    cond: impl FnOnce(&mut Emitter, CodeLabel) -> Result<(), EmitError>,
    body: impl FnOnce(&mut Emitter) -> Result<(), EmitError>,
) -> Result<(), EmitError> {
    let mut head = e.create_label();
    let mut done = e.create_label();
    e.set_label(&mut head)?;
    cond(e, done)?;
    body(e)?;
    e.asm().jmp(head)?;
    land(e, &mut done)
}

fn kreg(k: usize) -> AsmRegisterK {
    [k1, k2, k3, k4, k5, k6][k - 1]
}

fn zmm_kz(z: usize, k: usize) -> weft_x64::iced_x86::code_asm::AsmRegisterZmm {
    let z = ZMM[z];
    [z.k1().z(), z.k2().z(), z.k3().z(), z.k4().z()][k - 1]
}

/// Vector operations of a tier, on register numbers.
#[derive(Clone, Copy)]
struct V(Tier);

impl V {
    fn load(self, e: &mut Emitter, d: usize, m: AsmMemoryOperand) -> Result<(), EmitError> {
        match self.0 {
            Tier::Avx512 => e.asm().vmovups(ZMM[d], m)?,
            Tier::Avx2 => e.asm().vmovups(YMM[d], m)?,
        }
        Ok(())
    }
    fn store(self, e: &mut Emitter, m: AsmMemoryOperand, s: usize) -> Result<(), EmitError> {
        match self.0 {
            Tier::Avx512 => e.asm().vmovups(m, ZMM[s])?,
            Tier::Avx2 => e.asm().vmovups(m, YMM[s])?,
        }
        Ok(())
    }
    fn zero(self, e: &mut Emitter, d: usize) -> Result<(), EmitError> {
        match self.0 {
            Tier::Avx512 => e.asm().vpxord(ZMM[d], ZMM[d], ZMM[d])?,
            Tier::Avx2 => e.asm().vxorps(YMM[d], YMM[d], YMM[d])?,
        }
        Ok(())
    }
    /// d = a + b.
    fn add(self, e: &mut Emitter, d: usize, a: usize, b: usize) -> Result<(), EmitError> {
        match self.0 {
            Tier::Avx512 => e.asm().vaddps(ZMM[d], ZMM[a], ZMM[b])?,
            Tier::Avx2 => e.asm().vaddps(YMM[d], YMM[a], YMM[b])?,
        }
        Ok(())
    }
    /// d = a − b.
    fn sub(self, e: &mut Emitter, d: usize, a: usize, b: usize) -> Result<(), EmitError> {
        match self.0 {
            Tier::Avx512 => e.asm().vsubps(ZMM[d], ZMM[a], ZMM[b])?,
            Tier::Avx2 => e.asm().vsubps(YMM[d], YMM[a], YMM[b])?,
        }
        Ok(())
    }
    /// d = a + [m].
    fn add_m(
        self,
        e: &mut Emitter,
        d: usize,
        a: usize,
        m: AsmMemoryOperand,
    ) -> Result<(), EmitError> {
        match self.0 {
            Tier::Avx512 => e.asm().vaddps(ZMM[d], ZMM[a], m)?,
            Tier::Avx2 => e.asm().vaddps(YMM[d], YMM[a], m)?,
        }
        Ok(())
    }
    /// d = a − [m].
    fn sub_m(
        self,
        e: &mut Emitter,
        d: usize,
        a: usize,
        m: AsmMemoryOperand,
    ) -> Result<(), EmitError> {
        match self.0 {
            Tier::Avx512 => e.asm().vsubps(ZMM[d], ZMM[a], m)?,
            Tier::Avx2 => e.asm().vsubps(YMM[d], YMM[a], m)?,
        }
        Ok(())
    }
    fn bcast(self, e: &mut Emitter, d: usize, m: AsmMemoryOperand) -> Result<(), EmitError> {
        match self.0 {
            Tier::Avx512 => e.asm().vbroadcastss(ZMM[d], m)?,
            Tier::Avx2 => e.asm().vbroadcastss(YMM[d], m)?,
        }
        Ok(())
    }
    /// acc += a · b, one rounding.
    fn fma(self, e: &mut Emitter, acc: usize, a: usize, b: usize) -> Result<(), EmitError> {
        match self.0 {
            Tier::Avx512 => e.asm().vfmadd231ps(ZMM[acc], ZMM[a], ZMM[b])?,
            Tier::Avx2 => e.asm().vfmadd231ps(YMM[acc], YMM[a], YMM[b])?,
        }
        Ok(())
    }

    /// The epilogue on `accs` (crate docs), `zero` and `six` free.
    fn epilogue(
        self,
        e: &mut Emitter,
        accs: &[usize],
        zero: usize,
        six: usize,
    ) -> Result<(), EmitError> {
        let mut done = e.create_label();
        e.asm().cmp(qword_ptr(ARGS + offsets::ACT), 0)?;
        e.asm().je(done)?;
        // SiLU is the pass after the tiles (crate::silu).
        e.asm()
            .cmp(qword_ptr(ARGS + offsets::ACT), crate::silu::CODE as i32)?;
        e.asm().je(done)?;
        self.zero(e, zero)?;
        for &a in accs {
            match self.0 {
                Tier::Avx512 => e.asm().vmaxps(ZMM[a], ZMM[zero], ZMM[a])?,
                Tier::Avx2 => e.asm().vmaxps(YMM[a], YMM[zero], YMM[a])?,
            }
        }
        e.asm().cmp(
            qword_ptr(ARGS + offsets::ACT),
            crate::Activation::Relu6 as i32,
        )?;
        e.asm().jne(done)?;
        e.asm().mov(eax, 6.0f32.to_bits())?;
        match self.0 {
            Tier::Avx512 => e.asm().vpbroadcastd(ZMM[six], eax)?,
            Tier::Avx2 => {
                e.asm().vmovd(XMM[six], eax)?;
                e.asm().vbroadcastss(YMM[six], XMM[six])?;
            }
        }
        for &a in accs {
            match self.0 {
                Tier::Avx512 => e.asm().vminps(ZMM[a], ZMM[six], ZMM[a])?,
                Tier::Avx2 => e.asm().vminps(YMM[a], YMM[six], YMM[a])?,
            }
        }
        land(e, &mut done)
    }
}

/// `ecx` = (1 << clamp(rdx, 0, 16)) − 1 (clobbers rdx, ecx, eax).
fn bits16(e: &mut Emitter) -> Result<(), EmitError> {
    let a = e.asm();
    a.xor(eax, eax)?;
    a.test(rdx, rdx)?;
    a.cmovs(rdx, rax)?;
    a.mov(eax, 16)?;
    a.cmp(rdx, rax)?;
    a.cmova(rdx, rax)?;
    a.mov(ecx, edx)?;
    a.mov(eax, 1)?;
    a.shl(eax, cl)?;
    a.dec(eax)?;
    a.mov(ecx, eax)?;
    Ok(())
}

/// AVX2: ymm `d` = lanes `l` with `edx > l` all ones (edx signed).
fn avx2_lanes_below(e: &mut Emitter, d: usize) -> Result<(), EmitError> {
    let a = e.asm();
    a.vmovd(XMM[d], edx)?;
    a.vpbroadcastd(YMM[d], XMM[d])?;
    a.vpcmpgtd(YMM[d], YMM[d], ptr(rsp + S_IOTA))?;
    Ok(())
}

/// Set up one tile of the block (`TT` is its index) from the cursor,
/// and advance the cursor if the tile is in the call.
fn tile_setup(e: &mut Emitter) -> Result<(), EmitError> {
    let mut invalid = e.create_label();
    let mut done = e.create_label();
    let mut same_row = e.create_label();
    let mut same_img = e.create_label();
    let a = e.asm();
    // rdx = &tile info.
    a.mov(rdx, TT)?;
    a.shl(rdx, 6)?;
    a.lea(rdx, ptr(rsp + rdx + S_TILES))?;
    a.mov(rax, qword_ptr(rsp + S_TH))?;
    a.add(rax, rax)?;
    a.add(rax, qword_ptr(rsp + S_IMGROW))?; // r0
    a.cmp(rax, qword_ptr(ARGS + offsets::ROW_END))?;
    a.jae(invalid)?;
    // st0 = r0 ≥ row_start.
    a.xor(ecx, ecx)?;
    a.cmp(rax, qword_ptr(ARGS + offsets::ROW_START))?;
    a.setae(cl)?;
    a.mov(qword_ptr(rdx + T_ST0), rcx)?;
    // st1 = r0 + 1 < row_end and 2·th + 1 < out_h.
    a.lea(rcx, ptr(rax + 1))?;
    a.xor(r13d, r13d)?;
    a.cmp(rcx, qword_ptr(ARGS + offsets::ROW_END))?;
    a.setb(r13b)?;
    a.mov(rcx, qword_ptr(rsp + S_TH))?;
    a.lea(rcx, ptr(rcx + rcx + 1))?;
    a.xor(r14d, r14d)?;
    a.cmp(rcx, qword_ptr(ARGS + offsets::OUT_H))?;
    a.setb(r14b)?;
    a.and(r13, r14)?;
    a.mov(qword_ptr(rdx + T_ST1), r13)?;
    // ypix = y + (r0 · out_w + 2·tw) · pixout.
    a.imul_2(rax, qword_ptr(ARGS + offsets::OUT_W))?;
    a.mov(rcx, qword_ptr(rsp + S_TW))?;
    a.add(rcx, rcx)?;
    a.add(rax, rcx)?;
    a.imul_2(rax, qword_ptr(rsp + S_PIXOUT))?;
    a.add(rax, qword_ptr(ARGS + offsets::Y))?;
    a.mov(qword_ptr(rdx + T_YPIX), rax)?;
    // stc1 = 2·tw + 1 < out_w; iw0 = 2·tw − pad.
    a.lea(rax, ptr(rcx + 1))?;
    a.xor(r13, r13)?;
    a.cmp(rax, qword_ptr(ARGS + offsets::OUT_W))?;
    a.setb(r13b)?;
    a.mov(qword_ptr(rdx + T_STC1), r13)?;
    a.sub(rcx, qword_ptr(ARGS + offsets::PAD))?;
    a.mov(qword_ptr(rdx + T_IW0), rcx)?;
    a.mov(rax, qword_ptr(rsp + S_TH))?;
    a.add(rax, rax)?;
    a.sub(rax, qword_ptr(ARGS + offsets::PAD))?;
    a.mov(qword_ptr(rdx + T_IH0), rax)?;
    a.mov(rax, qword_ptr(rsp + S_XIMG))?;
    a.mov(qword_ptr(rdx + T_XIMG), rax)?;
    // Advance: tw + 1, or the next tile row, or the next image.
    a.mov(rax, qword_ptr(rsp + S_TW))?;
    a.inc(rax)?;
    a.mov(qword_ptr(rsp + S_TW), rax)?;
    a.cmp(rax, qword_ptr(rsp + S_TILESW))?;
    a.jb(same_row)?;
    a.mov(qword_ptr(rsp + S_TW), 0)?;
    a.mov(rax, qword_ptr(rsp + S_TH))?;
    a.inc(rax)?;
    a.mov(qword_ptr(rsp + S_TH), rax)?;
    a.add(rax, rax)?;
    a.cmp(rax, qword_ptr(ARGS + offsets::OUT_H))?;
    a.jb(same_img)?;
    a.mov(qword_ptr(rsp + S_TH), 0)?;
    a.mov(rax, qword_ptr(ARGS + offsets::OUT_H))?;
    a.add(qword_ptr(rsp + S_IMGROW), rax)?;
    a.mov(rax, qword_ptr(rsp + S_IMGIN))?;
    a.add(qword_ptr(rsp + S_XIMG), rax)?;
    e.set_label(&mut same_img)?;
    e.asm().nop()?;
    e.set_label(&mut same_row)?;
    e.asm().jmp(done)?;
    // A tile past the call: every row outside, nothing stored.
    e.set_label(&mut invalid)?;
    let a = e.asm();
    a.mov(rax, 1u64 << 62)?;
    a.mov(qword_ptr(rdx + T_IH0), rax)?;
    a.mov(qword_ptr(rdx + T_IW0), 0)?;
    a.mov(qword_ptr(rdx + T_ST0), 0)?;
    a.mov(qword_ptr(rdx + T_ST1), 0)?;
    a.mov(qword_ptr(rdx + T_STC1), 0)?;
    a.mov(rax, qword_ptr(ARGS + offsets::X))?;
    a.mov(qword_ptr(rdx + T_XIMG), rax)?;
    a.mov(rax, qword_ptr(ARGS + offsets::Y))?;
    a.mov(qword_ptr(rdx + T_YPIX), rax)?;
    land(e, &mut done)
}

/// The tile's rows and columns (from its info at `rdx`... recomputed from
/// `TT`): row pointers, column offsets and column masks.
fn tile_positions(e: &mut Emitter, tier: Tier) -> Result<(), EmitError> {
    let a = e.asm();
    a.mov(rdx, TT)?;
    a.shl(rdx, 6)?;
    a.lea(rdx, ptr(rsp + rdx + S_TILES))?;
    for i in 0..4i32 {
        // rax = ih0 + i; inside → ximg + ih · rowin, else 0.
        a.mov(rax, qword_ptr(rdx + T_IH0))?;
        a.add(rax, i)?;
        a.mov(rcx, rax)?;
        a.imul_2(rcx, qword_ptr(rsp + S_ROWIN))?;
        a.add(rcx, qword_ptr(rdx + T_XIMG))?;
        a.xor(r13, r13)?;
        a.cmp(rax, qword_ptr(ARGS + offsets::IN_H))?;
        a.cmovae(rcx, r13)?;
        a.mov(qword_ptr(rsp + S_ROWP + 8 * i), rcx)?;
    }
    for j in 0..4i32 {
        let a = e.asm();
        a.mov(rax, qword_ptr(rdx + T_IW0))?;
        a.add(rax, j)?;
        a.mov(rcx, rax)?;
        a.imul_2(rcx, qword_ptr(rsp + S_PIXIN))?;
        a.xor(r13, r13)?;
        a.cmp(rax, qword_ptr(ARGS + offsets::IN_W))?;
        a.cmovae(rcx, r13)?;
        a.mov(qword_ptr(rsp + S_COLOFF + 8 * j), rcx)?;
        // −1 inside, 0 outside.
        a.sbb(eax, eax)?;
        match tier {
            Tier::Avx512 => a.mov(qword_ptr(rsp + S_COLOK + 8 * j), rax)?,
            Tier::Avx2 => {
                a.vmovd(XMM[15], eax)?;
                a.vpbroadcastd(YMM[15], XMM[15])?;
                a.vmovdqu(ptr(rsp + S_COLOK + 32 * j), YMM[15])?;
            }
        }
    }
    Ok(())
}

/// One chunk of input channels (`CH` bytes in) of the tile: V into the
/// stack at `S_VT + CH + ξ · VXI`.
fn tile_chunk(e: &mut Emitter, tier: Tier) -> Result<(), EmitError> {
    let v = V(tier);
    // Channel mask of the chunk, then the column masks.
    {
        let a = e.asm();
        a.mov(rdx, qword_ptr(rsp + S_CIN4))?;
        a.sub(rdx, CH)?;
        a.shr(rdx, 2)?;
    }
    match tier {
        Tier::Avx512 => {
            bits16(e)?;
            for j in 0..4usize {
                let a = e.asm();
                a.mov(eax, ecx)?;
                a.and(eax, dword_ptr(rsp + S_COLOK + 8 * j as i32))?;
                a.kmovw(kreg(j + 1), eax)?;
            }
        }
        Tier::Avx2 => {
            avx2_lanes_below(e, 15)?;
            for j in 0..4i32 {
                let a = e.asm();
                a.vpand(YMM[14], YMM[15], ptr(rsp + S_COLOK + 32 * j))?;
                a.vmovdqu(ptr(rsp + S_CM + 32 * j), YMM[14])?;
            }
        }
    }
    // Rows: e[i][·] = d[i][·] B.
    for i in 0..4i32 {
        let mut zero = e.create_label();
        let mut next = e.create_label();
        e.asm().mov(rax, qword_ptr(rsp + S_ROWP + 8 * i))?;
        e.asm().test(rax, rax)?;
        e.asm().je(zero)?;
        e.asm().add(rax, CH)?;
        for (j, ymm) in YMM.iter().take(4).enumerate() {
            e.asm().mov(rcx, qword_ptr(rsp + S_COLOFF + 8 * j as i32))?;
            match tier {
                Tier::Avx512 => e.asm().vmovups(zmm_kz(j, j + 1), ptr(rax + rcx))?,
                Tier::Avx2 => {
                    e.asm().vmovdqu(YMM[15], ptr(rsp + S_CM + 32 * j as i32))?;
                    e.asm().vmaskmovps(*ymm, YMM[15], ptr(rax + rcx))?;
                }
            }
        }
        v.sub(e, 4, 0, 2)?; // d0 − d2
        v.add(e, 5, 1, 2)?; // d1 + d2
        v.sub(e, 6, 2, 1)?; // d2 − d1
        v.sub(e, 7, 1, 3)?; // d1 − d3
        for j in 0..4i32 {
            v.store(e, ptr(rsp + S_E + 64 * (4 * i + j)), 4 + j as usize)?;
        }
        e.asm().jmp(next)?;
        e.set_label(&mut zero)?;
        v.zero(e, 4)?;
        for j in 0..4i32 {
            v.store(e, ptr(rsp + S_E + 64 * (4 * i + j)), 4)?;
        }
        land(e, &mut next)?;
    }
    // Columns: V[·][j] = Bᵀ e[·][j], stored at ξ = 4i + j.
    {
        let a = e.asm();
        a.mov(rax, qword_ptr(rsp + S_VT))?;
        a.add(rax, CH)?;
        a.mov(rdx, qword_ptr(rsp + S_VXI))?;
        a.lea(r13, ptr(rdx * 4))?;
    }
    for j in 0..4i32 {
        for i in 0..4i32 {
            v.load(e, i as usize, ptr(rsp + S_E + 64 * (4 * i + j)))?;
        }
        v.sub(e, 4, 0, 2)?; // e0 − e2
        v.add(e, 5, 1, 2)?; // e1 + e2
        v.sub(e, 6, 2, 1)?; // e2 − e1
        v.sub(e, 7, 1, 3)?; // e1 − e3
        e.asm().mov(rcx, rax)?;
        for i in 0..4usize {
            v.store(e, ptr(rcx), 4 + i)?;
            if i < 3 {
                e.asm().add(rcx, r13)?;
            }
        }
        if j < 3 {
            e.asm().add(rax, rdx)?;
        }
    }
    Ok(())
}

/// The broadcast operand of tile `t`'s V at the current `ci`.
fn v_elem(t: usize) -> AsmMemoryOperand {
    match t {
        0 => ptr(PX0),
        1 => ptr(PX0 + XS),
        2 => ptr(PX0 + XS * 2),
        3 => ptr(PX0 + XS3),
        4 => ptr(PX1),
        5 => ptr(PX1 + XS),
        _ => ptr(PX1 + XS * 2),
    }
}

/// The group's products at position `XI` into `M[ξ]`.
fn products(e: &mut Emitter, tier: Tier) -> Result<(), EmitError> {
    let v = V(tier);
    let t = tier.tiles();
    let (u0, u1) = (2 * t, 2 * t + 1);
    let bc = |r: usize| match tier {
        Tier::Avx512 => 16 + r,
        Tier::Avx2 => 14 + r % 2,
    };
    for a in 0..2 * t {
        v.zero(e, a)?;
    }
    {
        let a = e.asm();
        a.mov(PW, XI)?;
        a.imul_2(PW, qword_ptr(rsp + S_XISTRIDE))?;
        a.add(PW, qword_ptr(rsp + S_UG))?;
        a.mov(PX0, XI)?;
        a.imul_2(PX0, qword_ptr(rsp + S_VXI))?;
        a.lea(PX0, ptr(rsp + PX0 + s_v(tier)))?;
        a.mov(XS, qword_ptr(rsp + S_XS))?;
        a.lea(XS3, ptr(XS + XS * 2))?;
        a.lea(PX1, ptr(PX0 + XS * 4))?;
        a.mov(rcx, qword_ptr(ARGS + offsets::CIN))?;
    }
    let mut ci = e.create_label();
    e.set_label(&mut ci)?;
    v.load(e, u0, ptr(PW))?;
    v.load(e, u1, ptr(PW + tier.vlb()))?;
    for r in 0..t {
        v.bcast(e, bc(r), v_elem(r))?;
        v.fma(e, 2 * r, u0, bc(r))?;
        v.fma(e, 2 * r + 1, u1, bc(r))?;
    }
    {
        let a = e.asm();
        a.add(PW, 128)?;
        a.add(PX0, 4)?;
        a.add(PX1, 4)?;
        a.dec(rcx)?;
        a.jne(ci)?;
    }
    let per_xi = t as i32 * 2 * tier.vlb();
    e.asm().imul_3(rax, XI, per_xi)?;
    for r in 0..2 * t {
        v.store(e, ptr(rsp + rax + S_M + tier.vlb() * r as i32), r)?;
    }
    Ok(())
}

/// The output transform of tile `TT` for the group, stored (its M in
/// r12: the epilogue clobbers eax).
fn output(e: &mut Emitter, tier: Tier) -> Result<(), EmitError> {
    let v = V(tier);
    let t = tier.tiles() as i32;
    let vlb = tier.vlb();
    let per_xi = t * 2 * vlb;
    {
        let a = e.asm();
        a.imul_3(r12, TT, 2 * vlb)?;
        a.lea(r12, ptr(rsp + r12 + S_M))?;
        a.mov(rdx, TT)?;
        a.shl(rdx, 6)?;
        a.lea(rdx, ptr(rsp + rdx + S_TILES))?;
    }
    for u in 0..2i32 {
        let m = |xi: i32| ptr(r12 + (xi * per_xi + u * vlb));
        for j in 0..4i32 {
            let (r0, r1) = (j as usize, 4 + j as usize);
            v.load(e, r0, m(j))?;
            v.add_m(e, r0, r0, m(4 + j))?;
            v.add_m(e, r0, r0, m(8 + j))?;
            v.load(e, r1, m(4 + j))?;
            v.sub_m(e, r1, r1, m(8 + j))?;
            v.sub_m(e, r1, r1, m(12 + j))?;
        }
        // Y00, Y01 (row 0), Y10, Y11 (row 1) into 8 … 11.
        for a in 0..2usize {
            let r = 4 * a;
            v.add(e, 8 + 2 * a, r, r + 1)?;
            v.add(e, 8 + 2 * a, 8 + 2 * a, r + 2)?;
            v.sub(e, 9 + 2 * a, r + 1, r + 2)?;
            v.sub(e, 9 + 2 * a, 9 + 2 * a, r + 3)?;
        }
        e.asm().mov(rcx, qword_ptr(rsp + S_GBIAS))?;
        for y in 8..12 {
            v.add_m(e, y, y, ptr(rcx + u * vlb))?;
        }
        v.epilogue(e, &[8, 9, 10, 11], 12, 13)?;
        // The stores: rcx = this vector's first pixel.
        {
            let a = e.asm();
            a.mov(rcx, qword_ptr(rdx + T_YPIX))?;
            a.add(rcx, qword_ptr(rsp + S_GCH))?;
            if u == 1 {
                a.add(rcx, vlb)?;
            }
            a.mov(r13, qword_ptr(rsp + S_PIXOUT))?;
            a.mov(rbp, rcx)?;
            a.add(rbp, qword_ptr(rsp + S_ROWOUT))?;
        }
        if tier == Tier::Avx2 {
            e.asm().vmovdqu(YMM[14], ptr(rsp + S_SMASK + 32 * u))?;
        }
        let pixels = [
            (T_ST0, false, 8usize, ptr(rcx)),
            (T_ST0, true, 9, ptr(rcx + r13)),
            (T_ST1, false, 10, ptr(rbp)),
            (T_ST1, true, 11, ptr(rbp + r13)),
        ];
        for (row, right, reg, at) in pixels {
            let mut skip = e.create_label();
            e.asm().cmp(qword_ptr(rdx + row), 0)?;
            e.asm().je(skip)?;
            if right {
                e.asm().cmp(qword_ptr(rdx + T_STC1), 0)?;
                e.asm().je(skip)?;
            }
            store_out(e, tier, at, reg, u)?;
            land(e, &mut skip)?;
        }
    }
    Ok(())
}

/// Store `reg` at `at`, masked to the group's channels (vector `u`).
fn store_out(
    e: &mut Emitter,
    tier: Tier,
    at: AsmMemoryOperand,
    reg: usize,
    u: i32,
) -> Result<(), EmitError> {
    match tier {
        Tier::Avx512 => {
            let m = if u == 0 { at.k5() } else { at.k6() };
            e.asm().vmovups(m, ZMM[reg])?;
        }
        Tier::Avx2 => {
            let mut masked = e.create_label();
            let mut done = e.create_label();
            e.asm().cmp(qword_ptr(rsp + S_GFULL), 0)?;
            e.asm().je(masked)?;
            e.asm().vmovups(at, YMM[reg])?;
            e.asm().jmp(done)?;
            e.set_label(&mut masked)?;
            e.asm().vmaskmovps(at, YMM[14], YMM[reg])?;
            land(e, &mut done)?;
        }
    }
    Ok(())
}

/// The group `S_G`'s pointers and store masks.
fn group_setup(e: &mut Emitter, tier: Tier) -> Result<(), EmitError> {
    let a = e.asm();
    a.mov(rax, qword_ptr(rsp + S_G))?;
    match tier {
        Tier::Avx512 => {
            a.mov(rcx, rax)?;
            a.imul_2(rcx, qword_ptr(rsp + S_CIBYTES))?;
            a.add(rcx, qword_ptr(rsp + S_UB))?;
            a.mov(qword_ptr(rsp + S_UG), rcx)?;
            a.shl(rax, 7)?; // 32 channels · 4 bytes
        }
        Tier::Avx2 => {
            a.mov(rcx, rax)?;
            a.shr(rcx, 1)?;
            a.imul_2(rcx, qword_ptr(rsp + S_CIBYTES))?;
            a.add(rcx, qword_ptr(rsp + S_UB))?;
            a.mov(rdx, rax)?;
            a.and(rdx, 1)?;
            a.shl(rdx, 6)?;
            a.add(rcx, rdx)?;
            a.mov(qword_ptr(rsp + S_UG), rcx)?;
            a.shl(rax, 6)?; // 16 channels · 4 bytes
        }
    }
    a.mov(qword_ptr(rsp + S_GCH), rax)?;
    a.add(rax, qword_ptr(ARGS + offsets::FILT))?;
    a.mov(qword_ptr(rsp + S_GBIAS), rax)?;
    // rdx = channels left from the group's first.
    a.mov(rdx, qword_ptr(rsp + S_GCH))?;
    a.shr(rdx, 2)?;
    a.neg(rdx)?;
    a.add(rdx, qword_ptr(ARGS + offsets::COUT))?;
    a.xor(ecx, ecx)?;
    a.cmp(rdx, tier.group() as i32)?;
    a.setge(cl)?;
    a.mov(qword_ptr(rsp + S_GFULL), rcx)?;
    match tier {
        Tier::Avx512 => {
            a.mov(r13, rdx)?;
            bits16(e)?;
            e.asm().kmovw(k5, ecx)?;
            e.asm().lea(rdx, ptr(r13 - 16))?;
            bits16(e)?;
            e.asm().kmovw(k6, ecx)?;
        }
        Tier::Avx2 => {
            avx2_lanes_below(e, 15)?;
            e.asm().vmovdqu(ptr(rsp + S_SMASK), YMM[15])?;
            e.asm().sub(edx, 8)?;
            avx2_lanes_below(e, 15)?;
            e.asm().vmovdqu(ptr(rsp + S_SMASK + 32), YMM[15])?;
        }
    }
    Ok(())
}

fn emit(tier: Tier, abi: Abi) -> Result<weft_x64::Emitted, EmitError> {
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
    let frame = frame_bytes(tier);
    // The frame, a page at a time, each page touched.
    for _ in 0..frame / 4096 {
        e.asm().sub(rsp, 4096)?;
        e.asm().mov(dword_ptr(rsp), 0)?;
    }
    let t = tier.tiles() as i32;
    {
        let a = e.asm();
        a.mov(rax, qword_ptr(ARGS + offsets::CIN))?;
        a.shl(rax, 2)?;
        a.mov(qword_ptr(rsp + S_CIN4), rax)?;
        a.mov(qword_ptr(rsp + S_PIXIN), rax)?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::IN_W))?;
        a.mov(qword_ptr(rsp + S_ROWIN), rax)?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::IN_H))?;
        a.mov(qword_ptr(rsp + S_IMGIN), rax)?;
        a.mov(rax, qword_ptr(ARGS + offsets::COUT))?;
        a.shl(rax, 2)?;
        a.mov(qword_ptr(rsp + S_PIXOUT), rax)?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::OUT_W))?;
        a.mov(qword_ptr(rsp + S_ROWOUT), rax)?;
        a.mov(rax, qword_ptr(ARGS + offsets::OUT_W))?;
        a.inc(rax)?;
        a.shr(rax, 1)?;
        a.mov(qword_ptr(rsp + S_TILESW), rax)?;
        // Panels of 32: the bias lines are 2 per panel.
        a.mov(rax, qword_ptr(ARGS + offsets::PANELS))?;
        a.inc(rax)?;
        a.shr(rax, 1)?;
        a.mov(rcx, rax)?;
        a.shl(rcx, 7)?;
        a.add(rcx, qword_ptr(ARGS + offsets::FILT))?;
        a.mov(qword_ptr(rsp + S_UB), rcx)?;
        a.mov(rcx, qword_ptr(ARGS + offsets::CIN))?;
        a.shl(rcx, 7)?;
        a.mov(qword_ptr(rsp + S_CIBYTES), rcx)?;
        a.imul_2(rcx, rax)?;
        a.mov(qword_ptr(rsp + S_XISTRIDE), rcx)?;
        match tier {
            Tier::Avx512 => a.mov(qword_ptr(rsp + S_GROUPS), rax)?,
            Tier::Avx2 => {
                a.mov(rcx, qword_ptr(ARGS + offsets::PANELS))?;
                a.mov(qword_ptr(rsp + S_GROUPS), rcx)?;
            }
        }
        // V: a tile's row is ⌈cin/16⌉·16 floats; a position's, T rows.
        a.mov(rax, qword_ptr(ARGS + offsets::CIN))?;
        a.add(rax, 15)?;
        a.and(rax, -16)?;
        a.shl(rax, 2)?;
        a.mov(qword_ptr(rsp + S_XS), rax)?;
        a.imul_3(rax, rax, t)?;
        a.mov(qword_ptr(rsp + S_VXI), rax)?;
        // The cursor.
        a.mov(rax, qword_ptr(ARGS + offsets::OH_START))?;
        a.shr(rax, 1)?;
        a.mov(qword_ptr(rsp + S_TH), rax)?;
        a.mov(qword_ptr(rsp + S_TW), 0)?;
        a.mov(rax, qword_ptr(ARGS + offsets::IMG_START))?;
        a.mov(rcx, rax)?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::OUT_H))?;
        a.mov(qword_ptr(rsp + S_IMGROW), rax)?;
        a.imul_2(rcx, qword_ptr(rsp + S_IMGIN))?;
        a.add(rcx, qword_ptr(ARGS + offsets::X))?;
        a.mov(qword_ptr(rsp + S_XIMG), rcx)?;
        if tier == Tier::Avx2 {
            for l in 0..8 {
                a.mov(dword_ptr(rsp + S_IOTA + 4 * l), l as u32)?;
            }
        }
    }
    while_loop(
        &mut e,
        |e, done| {
            let a = e.asm();
            a.mov(rax, qword_ptr(rsp + S_TH))?;
            a.add(rax, rax)?;
            a.add(rax, qword_ptr(rsp + S_IMGROW))?;
            a.cmp(rax, qword_ptr(ARGS + offsets::ROW_END))?;
            a.jae(done)?;
            Ok(())
        },
        |e| {
            // V for the block's tiles.
            e.asm().xor(TT, TT)?;
            while_loop(
                e,
                |e, done| {
                    e.asm().cmp(TT, t)?;
                    e.asm().jae(done)?;
                    Ok(())
                },
                |e| {
                    tile_setup(e)?;
                    tile_positions(e, tier)?;
                    {
                        let a = e.asm();
                        a.mov(rax, TT)?;
                        a.imul_2(rax, qword_ptr(rsp + S_XS))?;
                        a.lea(rax, ptr(rsp + rax + s_v(tier)))?;
                        a.mov(qword_ptr(rsp + S_VT), rax)?;
                        a.xor(CH, CH)?;
                    }
                    while_loop(
                        e,
                        |e, done| {
                            e.asm().cmp(CH, qword_ptr(rsp + S_CIN4))?;
                            e.asm().jae(done)?;
                            Ok(())
                        },
                        |e| {
                            tile_chunk(e, tier)?;
                            e.asm().add(CH, tier.vlb())?;
                            Ok(())
                        },
                    )?;
                    e.asm().inc(TT)?;
                    Ok(())
                },
            )?;
            // Groups of output channels.
            e.asm().mov(qword_ptr(rsp + S_G), 0)?;
            while_loop(
                e,
                |e, done| {
                    e.asm().mov(rax, qword_ptr(rsp + S_G))?;
                    e.asm().cmp(rax, qword_ptr(rsp + S_GROUPS))?;
                    e.asm().jae(done)?;
                    Ok(())
                },
                |e| {
                    group_setup(e, tier)?;
                    e.asm().xor(XI, XI)?;
                    while_loop(
                        e,
                        |e, done| {
                            e.asm().cmp(XI, 16)?;
                            e.asm().jae(done)?;
                            Ok(())
                        },
                        |e| {
                            products(e, tier)?;
                            e.asm().inc(XI)?;
                            Ok(())
                        },
                    )?;
                    e.asm().xor(TT, TT)?;
                    while_loop(
                        e,
                        |e, done| {
                            e.asm().cmp(TT, t)?;
                            e.asm().jae(done)?;
                            Ok(())
                        },
                        |e| {
                            output(e, tier)?;
                            e.asm().inc(TT)?;
                            Ok(())
                        },
                    )?;
                    e.asm().inc(qword_ptr(rsp + S_G))?;
                    Ok(())
                },
            )?;
            Ok(())
        },
    )?;
    crate::silu::x64_pass(&mut e, tier == Tier::Avx512, ARGS)?;
    e.asm().add(rsp, frame)?;
    e.epilogue()?;
    e.finish()
}
