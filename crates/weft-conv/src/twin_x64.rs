//! x64 twins of both arms: the same offer (packed filter, row views), the
//! body emitted through weft-x64 in two tiers, AVX-512 (zmm, opmasks) and
//! AVX2 + FMA (ymm, `vmaskmovps`), each performing its arm's FMAs per
//! output in the arm's order (kh, kw, ci).
//!
//! One skeleton serves both arms. Panels are taken in groups while whole
//! (AVX-512: two panels = two zmm per pixel; AVX2: one panel = two ymm),
//! then one at a time with masked stores (and, for depthwise, masked x
//! loads: x's lanes past `cout` are the next pixel's) for the rest. For
//! each group and output row, the interior columns (`ow_lo..ow_hi`, every
//! tap column inside) run without column checks in tiles of 12 (AVX-512)
//! or 6 (AVX2) pixels, then leftover tiles of 8, 4, 2 (each at most
//! once), each tile holding `pixels × vectors` accumulators. A border pass
//! then computes the columns left (the borders, and an odd interior's
//! last column) one pixel at a time with column checks, over blocks of
//! four panels (outermost, so a block's weights stay in cache for every
//! row), so that a pixel has four (zmm) or eight (ymm) independent
//! accumulators: one pixel's one or two would leave it bound by the FMA
//! latency. Per tap, the direct
//! tile runs a `ci` loop that loads the group's weights once and
//! broadcasts one x per pixel; the depthwise tile loads the tap's weights
//! once and multiplies each pixel's x vectors by them (no `ci` loop).
//!
//! Short rows. When the interior is narrower than one 12-pixel tile (7 × 7
//! at pad 1 has 5 interior columns of 7), the AVX-512 direct twin takes
//! another path for the whole call (a test of `ow_hi − ow_lo` at entry):
//! tiles of 7 consecutive pixels of the flattened `(b, oh, ow)` axis — a
//! tile may span rows and images; the call's last one is cut short, its
//! missing pixels never inside and never stored — × groups of three panels
//! (21 accumulators, 3 weight vectors, 7 broadcasts), then two, one, and a
//! masked one. Per tap, each pixel gets an opmask (k1–k7), all ones when
//! that tap's row and column are inside the input for it, and its x
//! pointer (x's first pixel when outside, so the loads stay inside x); the
//! `ci` loop's FMAs merge under the masks, so an outside tap leaves the
//! pixel's accumulator untouched — skipped, as the contract says — and a
//! tap outside for all seven is not run. Every pixel is tiled, borders
//! included; no border pass runs.
//!
//! Groups. The direct twins run all of the above once per group `g` (an
//! outer loop, `cgroups` in the nest): the group's weights start at panel
//! `g · group_panels`, its x at channel `g · cin_g` and its y at channel
//! `g · cout_g` (stack slots the bodies read instead of the arguments'
//! bases), and inside it every panel count, mask and `ci` loop is the
//! group's (`group_panels`, `cout_g`, `cin_g`), so a tile of several
//! panels never spans two groups. At `groups = 1` the loop runs once.
//!
//! The epilogue is `vmaxps acc, zero, acc` (0 > acc ? 0 : acc) and
//! `vminps acc, six, acc` (6 < acc ? 6 : acc), the contract's comparisons
//! operand for operand. Frame: SysV or Win64 ([`ConvX64::with_abi`]); the
//! argument pointer is kept in `rdi`; `rbx`, `rbp`, `r12`–`r15` (and on
//! Win64 `rdi`, `rsi`, `xmm6`–`xmm15`) are saved; 256 bytes of stack hold
//! loop state.

use std::sync::Arc;

use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};
use weft_x64::iced_x86::code_asm::{
    dword_ptr, eax, ecx, edx, k1, ptr, qword_ptr, r10, r11, r12, r12d, r13, r14, r14d, r15, r15d,
    r8, r9, rax, rbp, rbx, rcx, rdi, rdx, rsi, rsp, word_ptr, AsmMemoryOperand, AsmRegister64,
    CodeAssembler, CodeLabel,
};
use weft_x64::regs::{XMM, YMM, ZMM};
use weft_x64::{Abi, Clobbers, EmitError, Emitter};

use crate::arm::ArmKind;
use crate::{offsets, ConvGeometry, Shape, PANEL};

/// Which instruction set a twin is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// AVX2 + FMA: 16 ymm of 8 lanes.
    Avx2,
    /// AVX-512F: 32 zmm of 16 lanes and opmasks.
    Avx512,
}

impl Tier {
    /// f32 lanes per vector register.
    pub fn lanes(self) -> usize {
        match self {
            Tier::Avx2 => 8,
            Tier::Avx512 => 16,
        }
    }

    /// Vector registers per 16-channel panel.
    fn per_panel(self) -> usize {
        PANEL / self.lanes()
    }

    /// Whole panels a group holds.
    pub fn group(self) -> usize {
        match self {
            Tier::Avx512 => 2,
            Tier::Avx2 => 1,
        }
    }

    /// Pixels in an interior tile, then the leftover tiles (even: an odd
    /// interior leaves its last column to the border pass).
    pub fn pixels(self) -> (u64, &'static [u64]) {
        match self {
            Tier::Avx512 => (12, &[8, 4, 2]),
            Tier::Avx2 => (6, &[4, 2]),
        }
    }
}

/// One x64 twin: an arm kind, a tier and a calling convention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvX64 {
    kind: ArmKind,
    tier: Tier,
    abi: Abi,
}

impl ConvX64 {
    /// The twin of `kind` in `tier`, for the host's calling convention.
    pub const fn new(kind: ArmKind, tier: Tier) -> ConvX64 {
        ConvX64 {
            kind,
            tier,
            abi: Abi::host(),
        }
    }

    /// The same twin for another calling convention (tests call a Win64
    /// body on Linux through `extern "win64"`).
    pub const fn with_abi(self, abi: Abi) -> ConvX64 {
        ConvX64 { abi, ..self }
    }
}

/// The x64 twins of `kind`'s offer: AVX-512, then AVX2.
pub fn twins(kind: ArmKind) -> Vec<Arc<dyn Twin>> {
    [Tier::Avx512, Tier::Avx2]
        .into_iter()
        .map(|t| Arc::new(ConvX64::new(kind, t)) as Arc<dyn Twin>)
        .collect()
}

const AVX512_FEATURES: &[Feature] = &[Feature::Avx, Feature::Fma, Feature::Avx512f];
const AVX2_FEATURES: &[Feature] = &[Feature::Avx, Feature::Avx2, Feature::Fma];

// SAFETY: the body reads x only at taps inside the input (row and column
// checked, interior tiles by `ow_lo..ow_hi`, which `ConvArgs` derives;
// the flattened tiles read x's first pixel instead for a tap outside),
// channel lanes past cout only under masks, the packed filter's lines,
// and writes y only in its rows and channels below cout (masked stores);
// it returns normally. Validation checks it against the arm.
unsafe impl Twin for ConvX64 {
    fn name(&self) -> &'static str {
        match (self.kind, self.tier) {
            (ArmKind::Direct, Tier::Avx512) => "conv.direct.twin.avx512.12x32",
            (ArmKind::Direct, Tier::Avx2) => "conv.direct.twin.avx2.6x16",
            (ArmKind::Depthwise, Tier::Avx512) => "conv.depthwise.twin.avx512.12x32",
            (ArmKind::Depthwise, Tier::Avx2) => "conv.depthwise.twin.avx2.6x16",
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
        crate::check_offer(
            self.name(),
            offer,
            self.kind.family(),
            Some(crate::PackedFilter::layout(self.kind)),
        )?;
        crate::twin_x64::native(self.name(), emit(self.kind, self.tier, self.abi))
    }

    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        match ConvGeometry::from_geometry(&offer.contract.geometry) {
            Ok((g, s)) => {
                let wide = self.tier == Tier::Avx512;
                let lanes = crate::silu::x64_lanes(wide);
                crate::silu::after(nest(self.kind, self.tier, &g, &s), &g, &s, lanes, wide)
            }
            Err(_) => offer.loops.clone(),
        }
    }
}

fn trip(name: &str, trips: u64, depth: u32) -> LoopTrip {
    LoopTrip {
        name: name.to_owned(),
        trips,
        depth,
    }
}

/// The loop nest of a twin at `g` for a call over every row, in the order
/// the emitter writes its loops (module docs).
pub fn nest(kind: ArmKind, tier: Tier, g: &ConvGeometry, s: &Shape) -> Vec<LoopTrip> {
    let inner = group_nest(kind, tier, g, s);
    if kind == ArmKind::Depthwise {
        return inner;
    }
    // The direct twins run everything once per group (module docs).
    let mut out = vec![trip("cgroups", g.groups, 0)];
    out.extend(inner.into_iter().map(|t| LoopTrip {
        depth: t.depth + 1,
        ..t
    }));
    out
}

/// Output channels of a group and its panels, as the bodies walk them
/// (for depthwise, all of them: one group).
fn group_channels(kind: ArmKind, g: &ConvGeometry, s: &Shape) -> (u64, u64) {
    match kind {
        ArmKind::Direct => (g.cout / g.groups, s.group_panels),
        ArmKind::Depthwise => (g.cout, s.panels),
    }
}

/// The nest of one group's work (the whole call for depthwise).
fn group_nest(kind: ArmKind, tier: Tier, g: &ConvGeometry, s: &Shape) -> Vec<LoopTrip> {
    let rows = g.batch * s.out_h;
    let (cout_g, panels) = group_channels(kind, g, s);
    let whole = cout_g / PANEL as u64;
    let taps = |out: &mut Vec<LoopTrip>, depth: u32, used: bool| {
        out.push(trip("kh", if used { g.k_h } else { 0 }, depth));
        out.push(trip("kw", g.k_w, depth + 1));
        out.push(trip("ci", g.cin / g.groups, depth + 2));
    };
    let mut out = Vec::new();
    if kind == ArmKind::Direct && tier == Tier::Avx512 {
        // The flattened path first, then the row tiles: the call takes one
        // (a path of zero trips is the one not taken).
        let on = flat(s);
        let used = |b: bool, n: u64| if on && b { n } else { 0 };
        let tiles = (rows * s.out_w).div_ceil(FLAT_PIXELS as u64);
        let groups = whole / FLAT_GROUP as u64;
        let mut left = whole - groups * FLAT_GROUP as u64;
        out.push(trip("flat_groups", used(true, groups), 0));
        out.push(trip("flat_tiles", tiles, 1));
        taps(&mut out, 2, true);
        let mut guarded = Vec::new();
        for n in (1..FLAT_GROUP as u64).rev() {
            guarded.push(left >= n);
            if left >= n {
                left -= n;
            }
        }
        guarded.push(panels > whole);
        for g in guarded {
            out.push(trip("flat_tiles", used(g, tiles), 0));
            taps(&mut out, 1, true);
        }
        let generic = out.len();
        out.extend(generic_nest(kind, tier, g, s));
        if on {
            out[generic..].iter_mut().for_each(|t| t.trips = 0);
        }
        return out;
    }
    out.extend(generic_nest(kind, tier, g, s));
    out
}

/// The row tiles' and border pass's nest (module docs).
fn generic_nest(kind: ArmKind, tier: Tier, g: &ConvGeometry, s: &Shape) -> Vec<LoopTrip> {
    let rows = g.batch * s.out_h;
    let (cout_g, panels) = group_channels(kind, g, s);
    let whole = cout_g / PANEL as u64;
    let group = tier.group() as u64;
    let (groups, rest) = (whole / group, panels - whole / group * group);
    let channels = kind == ArmKind::Direct;
    let taps = |out: &mut Vec<LoopTrip>, depth: u32, used: bool| {
        out.push(trip("kh", if used { g.k_h } else { 0 }, depth));
        out.push(trip("kw", g.k_w, depth + 1));
        if channels {
            out.push(trip("ci", g.cin / g.groups, depth + 2));
        }
    };
    let (tile, leftovers) = tier.pixels();
    let tiles = (s.ow_hi - s.ow_lo) / tile;
    let mut out = Vec::new();
    for (name, trips) in [("groups", groups), ("panels", rest)] {
        out.push(trip(name, trips, 0));
        out.push(trip("rows", rows, 1));
        out.push(trip("tiles", tiles, 2));
        taps(&mut out, 3, true);
        let mut rem = s.ow_hi - s.ow_lo - tiles * tile;
        for &h in leftovers {
            let used = rem >= h;
            if used {
                rem -= h;
            }
            taps(&mut out, 2, used);
        }
    }
    // The border pass: panel blocks, then single panels, each over every
    // row's left columns and right ones (the interior's odd column
    // included).
    let blocks = whole / BORDER_PANELS as u64;
    let single = panels - blocks * BORDER_PANELS as u64;
    let right = s.out_w - (s.ow_hi - ((s.ow_hi - s.ow_lo) & 1));
    for (name, trips) in [("border_blocks", blocks), ("border_panels", single)] {
        out.push(trip(name, trips, 0));
        out.push(trip("border_rows", rows, 1));
        for (side, n) in [("left", s.ow_lo), ("right", right)] {
            out.push(trip(side, n, 2));
            taps(&mut out, 3, true);
        }
    }
    out
}

// Registers held across the body.
pub(crate) const ARGS: AsmRegister64 = rdi;
const PW: AsmRegister64 = rsi;
const PX: [AsmRegister64; 3] = [r8, r9, r10];
const XS: AsmRegister64 = r11;
const XS3: AsmRegister64 = r12;
const VSTRIDE: AsmRegister64 = r13;
const KH: AsmRegister64 = r14;
const KW: AsmRegister64 = r15;
const ROW: AsmRegister64 = rbx;
const OW: AsmRegister64 = rbp;

// Stack slots (bytes from rsp).
const S_P: i32 = 0;
const S_WPANEL: i32 = 8;
const S_BIASP: i32 = 16;
const S_YROW: i32 = 24;
const S_XB: i32 = 32;
const S_IH0: i32 = 40;
const S_IW0: i32 = 48;
const S_XROW: i32 = 56;
pub(crate) const S_PIXIN: i32 = 64;
pub(crate) const S_ROWIN: i32 = 72;
const S_TAPB: i32 = 80;
const S_PIXOUT: i32 = 88;
const S_WB: i32 = 96;
const S_PSTRIDE: i32 = 104;
const S_WHOLE: i32 = 112;
pub(crate) const S_IMGIN: i32 = 120;
const S_ROWOUT: i32 = 128;
/// x's offset of the group's first channel: `16 · p · 4` for depthwise
/// (x's channels are the outputs'), 0 for direct.
const S_XPANEL: i32 = 144;
const S_MASK: i32 = 160;
const S_IOTA: i32 = 224;
// The flattened tiles' state (AVX-512 direct only).
/// The tile's first flattened pixel `q = (b · out_h + oh) · out_w + ow`.
const S_Q: i32 = 256;
/// `row_end · out_w`.
const S_QEND: i32 = 264;
/// Whether any pixel of the tile has the current tap inside.
const S_ANY: i32 = 272;
/// The ragged panel's channel mask (k1 holds pixel masks meanwhile).
const S_CMASK: i32 = 280;
/// `x + 4 · cin`: the biased pointer of a tap outside the input (its
/// loads, masked out of every FMA, stay inside x).
const S_SAFE: i32 = 288;
/// `k_h · dil`, `k_w · dil`.
const S_KHEND: i32 = 296;
const S_KWEND: i32 = 304;
/// The current tap's weights of the panel `S_P`.
const S_TAPW: i32 = 312;
/// Per tile pixel `r`, 24 bytes from `S_PIX + 24 · r`: `oh · stride −
/// pad` (or 2⁶² for a pixel past the call's end: never inside), `ow ·
/// stride − pad`, and its biased x pointer (`x + image + ih0 · row +
/// iw0 · pixel + 4 · cin`).
const S_PIX: i32 = 320;
// The group walk (direct; for depthwise the whole call is one group).
/// The group `g` (direct only).
const S_CG: i32 = 512;
/// The weights after the bias lines (`filt + panels · 64`).
const S_WB0: i32 = 520;
/// The group's first bias line (`filt + g · group_panels · 64`).
const S_BIASB: i32 = 528;
/// x's group channel `g · cin_g` (`x + 4 · g · cin_g`).
const S_XG: i32 = 536;
/// y's group channel `g · cout_g` (`y + 4 · g · cout_g`).
const S_YG: i32 = 544;
/// Panels of a group (`group_panels`; depthwise: `panels`).
const S_GPANELS: i32 = 552;
/// Output channels of a group (`cout_g`; depthwise: `cout`).
const S_COUTG: i32 = 560;
const FRAME: i32 = 576;

/// The vector operations both tiers share, on register numbers.
#[derive(Clone, Copy)]
struct V(Tier);

impl V {
    fn load(self, e: &mut Emitter, dst: usize, m: AsmMemoryOperand) -> Result<(), EmitError> {
        match self.0 {
            Tier::Avx512 => e.asm().vmovups(ZMM[dst], m)?,
            Tier::Avx2 => e.asm().vmovups(YMM[dst], m)?,
        }
        Ok(())
    }

    /// A load of the lanes the mask of vector `u` keeps (zero elsewhere;
    /// faults suppressed): k1 (AVX-512) or the ymm `mask` (AVX2).
    fn load_masked(
        self,
        e: &mut Emitter,
        dst: usize,
        m: AsmMemoryOperand,
        mask: usize,
    ) -> Result<(), EmitError> {
        match self.0 {
            Tier::Avx512 => e.asm().vmovups(ZMM[dst].k1().z(), m)?,
            Tier::Avx2 => e.asm().vmaskmovps(YMM[dst], YMM[mask], m)?,
        }
        Ok(())
    }

    fn store(self, e: &mut Emitter, m: AsmMemoryOperand, src: usize) -> Result<(), EmitError> {
        match self.0 {
            Tier::Avx512 => e.asm().vmovups(m, ZMM[src])?,
            Tier::Avx2 => e.asm().vmovups(m, YMM[src])?,
        }
        Ok(())
    }

    fn store_masked(
        self,
        e: &mut Emitter,
        m: AsmMemoryOperand,
        src: usize,
        mask: usize,
    ) -> Result<(), EmitError> {
        match self.0 {
            Tier::Avx512 => e.asm().vmovups(m.k1(), ZMM[src])?,
            Tier::Avx2 => e.asm().vmaskmovps(m, YMM[mask], YMM[src])?,
        }
        Ok(())
    }

    fn broadcast(self, e: &mut Emitter, dst: usize, m: AsmMemoryOperand) -> Result<(), EmitError> {
        match self.0 {
            Tier::Avx512 => e.asm().vbroadcastss(ZMM[dst], m)?,
            Tier::Avx2 => e.asm().vbroadcastss(YMM[dst], m)?,
        }
        Ok(())
    }

    /// `acc += a · b`, one rounding.
    fn fma(self, e: &mut Emitter, acc: usize, a: usize, b: usize) -> Result<(), EmitError> {
        match self.0 {
            Tier::Avx512 => e.asm().vfmadd231ps(ZMM[acc], ZMM[a], ZMM[b])?,
            Tier::Avx2 => e.asm().vfmadd231ps(YMM[acc], YMM[a], YMM[b])?,
        }
        Ok(())
    }

    /// `acc += a · [m]`, one rounding.
    fn fma_mem(
        self,
        e: &mut Emitter,
        acc: usize,
        a: usize,
        m: AsmMemoryOperand,
    ) -> Result<(), EmitError> {
        match self.0 {
            Tier::Avx512 => e.asm().vfmadd231ps(ZMM[acc], ZMM[a], m)?,
            Tier::Avx2 => e.asm().vfmadd231ps(YMM[acc], YMM[a], m)?,
        }
        Ok(())
    }

    /// The epilogue on accumulators `accs`, with `zero` and `six` free.
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
        match self.0 {
            Tier::Avx512 => e.asm().vpxord(ZMM[zero], ZMM[zero], ZMM[zero])?,
            Tier::Avx2 => e.asm().vxorps(YMM[zero], YMM[zero], YMM[zero])?,
        }
        for &a in accs {
            // a = 0 > a ? 0 : a
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
            // a = 6 < a ? 6 : a
            match self.0 {
                Tier::Avx512 => e.asm().vminps(ZMM[a], ZMM[six], ZMM[a])?,
                Tier::Avx2 => e.asm().vminps(YMM[a], YMM[six], YMM[a])?,
            }
        }
        land(e, &mut done)
    }

    /// The masks of the panel `rax` of its group (clobbers rax, rcx,
    /// rdx): lanes `cout_g − 16·panel` of 16 kept (`S_COUTG`). AVX-512: k1. AVX2: the two ymm
    /// halves' masks into ymm `regs.0` and `regs.1`.
    fn panel_masks(self, e: &mut Emitter, regs: (usize, usize)) -> Result<(), EmitError> {
        let a = e.asm();
        a.shl(rax, 4)?;
        a.mov(rdx, qword_ptr(rsp + S_COUTG))?;
        a.sub(rdx, rax)?; // ≥ 1: the panel exists
        match self.0 {
            Tier::Avx512 => {
                a.mov(ecx, 16)?;
                a.cmp(rdx, rcx)?;
                a.cmova(rdx, rcx)?;
                a.mov(ecx, edx)?;
                a.mov(eax, 1)?;
                a.shl(eax, weft_x64::iced_x86::code_asm::cl)?;
                a.dec(eax)?;
                a.kmovw(k1, eax)?;
            }
            Tier::Avx2 => {
                // Half h keeps lanes l with 8h + l < left.
                a.mov(ecx, 16)?;
                a.cmp(rdx, rcx)?;
                a.cmova(rdx, rcx)?;
                a.vmovd(XMM[regs.0], edx)?;
                a.vpbroadcastd(YMM[regs.0], XMM[regs.0])?;
                a.sub(edx, 8)?;
                a.vmovd(XMM[regs.1], edx)?;
                a.vpbroadcastd(YMM[regs.1], XMM[regs.1])?;
                a.vpcmpgtd(YMM[regs.0], YMM[regs.0], ptr(rsp + S_IOTA))?;
                a.vpcmpgtd(YMM[regs.1], YMM[regs.1], ptr(rsp + S_IOTA))?;
            }
        }
        Ok(())
    }
}

/// The loops over a pixel's taps: `kh` rows whose input row is inside,
/// `kw` columns (checked when `checked`); `inner` emits the tap with rax
/// holding its input column `iw` (the row's address in `S_XROW`).
fn taps(
    e: &mut Emitter,
    checked: bool,
    inner: impl FnOnce(&mut Emitter) -> Result<(), EmitError>,
) -> Result<(), EmitError> {
    let mut kh_head = e.create_label();
    let mut kh_next = e.create_label();
    let mut kh_done = e.create_label();
    let mut kw_head = e.create_label();
    let mut kw_next = e.create_label();
    e.asm().xor(r14d, r14d)?;
    e.set_label(&mut kh_head)?;
    {
        let a = e.asm();
        a.cmp(KH, qword_ptr(ARGS + offsets::K_H))?;
        a.jae(kh_done)?;
        a.mov(rax, KH)?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::DIL))?;
        a.add(rax, qword_ptr(rsp + S_IH0))?;
        a.cmp(rax, qword_ptr(ARGS + offsets::IN_H))?;
        a.jae(kh_next)?;
        a.imul_2(rax, qword_ptr(rsp + S_ROWIN))?;
        a.add(rax, qword_ptr(rsp + S_XB))?;
        a.mov(qword_ptr(rsp + S_XROW), rax)?;
        a.xor(r15d, r15d)?;
    }
    e.set_label(&mut kw_head)?;
    {
        let a = e.asm();
        a.cmp(KW, qword_ptr(ARGS + offsets::K_W))?;
        a.jae(kh_next)?;
        a.mov(rax, KW)?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::DIL))?;
        a.add(rax, qword_ptr(rsp + S_IW0))?;
        if checked {
            a.cmp(rax, qword_ptr(ARGS + offsets::IN_W))?;
            a.jae(kw_next)?;
        }
    }
    inner(e)?;
    e.set_label(&mut kw_next)?;
    e.asm().inc(KW)?;
    e.asm().jmp(kw_head)?;
    e.set_label(&mut kh_next)?;
    e.asm().inc(KH)?;
    e.asm().jmp(kh_head)?;
    land(e, &mut kh_done)
}

/// The direct twins' register plan for a tile of `pixels × vectors`.
struct DirectRegs {
    tier: Tier,
    vectors: usize,
}

impl DirectRegs {
    fn acc(&self, r: usize, u: usize) -> usize {
        r * self.vectors + u
    }
    fn w(&self, u: usize) -> usize {
        match self.tier {
            Tier::Avx512 => 24 + u,
            Tier::Avx2 => 12 + u,
        }
    }
    fn t(&self, r: usize) -> usize {
        match self.tier {
            Tier::Avx512 => 26 + r % 4,
            Tier::Avx2 => 14,
        }
    }
    /// Zero and six for the epilogue (free once the `ci` loops are done).
    fn consts(&self) -> (usize, usize) {
        match self.tier {
            Tier::Avx512 => (30, 31),
            Tier::Avx2 => (14, 15),
        }
    }
}

/// x of tile pixel `r`, `disp` bytes on (the current `ci` for direct,
/// a vector of channels for depthwise).
fn x_elem(r: usize, disp: i32) -> AsmMemoryOperand {
    let base = PX[r / 4];
    match r % 4 {
        0 => ptr(base + disp),
        1 => ptr(base + XS + disp),
        2 => ptr(base + XS * 2 + disp),
        _ => ptr(base + XS3 + disp),
    }
}

/// One tile: `pixels` from column `OW` × the group's `vectors` (all of
/// `panels` panels), columns checked when `checked`, stores (and
/// depthwise x loads) masked when `masked` (then `panels` is one).
#[allow(clippy::too_many_arguments)]
fn tile(
    e: &mut Emitter,
    kind: ArmKind,
    tier: Tier,
    pixels: usize,
    panels: usize,
    checked: bool,
    masked: bool,
) -> Result<(), EmitError> {
    let v = V(tier);
    let vectors = panels * tier.per_panel();
    let z = DirectRegs { tier, vectors };
    let vl = 4 * tier.lanes() as i32;
    e.asm().mov(rax, qword_ptr(rsp + S_BIASP))?;
    for r in 0..pixels {
        for u in 0..vectors {
            v.load(e, z.acc(r, u), ptr(rax + vl * u as i32))?;
        }
    }
    {
        let a = e.asm();
        a.mov(rax, OW)?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::STRIDE))?;
        a.sub(rax, qword_ptr(ARGS + offsets::PAD))?;
        a.mov(qword_ptr(rsp + S_IW0), rax)?;
    }
    taps(e, checked, |e| {
        let a = e.asm();
        a.imul_2(rax, qword_ptr(rsp + S_PIXIN))?;
        a.add(rax, qword_ptr(rsp + S_XROW))?;
        a.mov(PX[0], rax)?;
        if pixels > 4 {
            a.lea(PX[1], ptr(PX[0] + XS * 4))?;
        }
        if pixels > 8 {
            a.lea(PX[2], ptr(PX[1] + XS * 4))?;
        }
        a.mov(rax, KH)?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::K_W))?;
        a.add(rax, KW)?;
        a.imul_2(rax, qword_ptr(rsp + S_TAPB))?;
        a.add(rax, qword_ptr(rsp + S_WPANEL))?;
        a.mov(PW, rax)?;
        let wvec = |u: usize| match (tier, u) {
            (Tier::Avx512, 0) => ptr(PW),
            (Tier::Avx512, _) => ptr(PW + VSTRIDE),
            (Tier::Avx2, u) => ptr(PW + 32 * u as i32),
        };
        if kind == ArmKind::Depthwise {
            // The tap's weights once, each pixel's channels against them.
            for u in 0..vectors {
                v.load(e, z.w(u), wvec(u))?;
            }
            for u in 0..vectors {
                if masked && tier == Tier::Avx2 {
                    e.asm()
                        .vmovups(YMM[15], ptr(rsp + S_MASK + 32 * u as i32))?;
                }
                for r in 0..pixels {
                    let x = x_elem(r, vl * u as i32);
                    if masked {
                        v.load_masked(e, z.t(r), x, 15)?;
                        v.fma(e, z.acc(r, u), z.w(u), z.t(r))?;
                    } else {
                        v.fma_mem(e, z.acc(r, u), z.w(u), x)?;
                    }
                }
            }
            return Ok(());
        }
        e.asm().mov(rcx, qword_ptr(ARGS + offsets::CIN_G))?;
        let mut ci = e.create_label();
        e.set_label(&mut ci)?;
        for u in 0..vectors {
            v.load(e, z.w(u), wvec(u))?;
        }
        for r in 0..pixels {
            v.broadcast(e, z.t(r), x_elem(r, 0))?;
            for u in 0..vectors {
                v.fma(e, z.acc(r, u), z.w(u), z.t(r))?;
            }
        }
        let a = e.asm();
        for px in PX.iter().take(pixels.div_ceil(4)) {
            a.add(*px, 4)?;
        }
        a.add(PW, 64)?;
        a.dec(rcx)?;
        a.jne(ci)?;
        Ok(())
    })?;
    let accs: Vec<usize> = (0..pixels)
        .flat_map(|r| (0..vectors).map(move |u| r * vectors + u))
        .collect();
    let (zero, six) = z.consts();
    v.epilogue(e, &accs, zero, six)?;
    if masked && tier == Tier::Avx2 {
        for u in 0..vectors {
            e.asm()
                .vmovups(YMM[z.w(u)], ptr(rsp + S_MASK + 32 * u as i32))?;
        }
    }
    let a = e.asm();
    a.mov(rax, OW)?;
    a.imul_2(rax, qword_ptr(rsp + S_PIXOUT))?;
    a.add(rax, qword_ptr(rsp + S_YROW))?;
    a.mov(rdx, qword_ptr(rsp + S_PIXOUT))?;
    for r in 0..pixels {
        for u in 0..vectors {
            let m = ptr(rax + vl * u as i32);
            if masked {
                v.store_masked(e, m, z.acc(r, u), z.w(u))?;
            } else {
                v.store(e, m, z.acc(r, u))?;
            }
        }
        if r + 1 < pixels {
            e.asm().add(rax, rdx)?;
        }
    }
    Ok(())
}

/// `while cond { body }` where `cond` sets flags and names the exit jump.
fn while_loop(
    e: &mut Emitter,
    test: impl FnOnce(&mut Emitter, CodeLabel) -> Result<(), EmitError>,
    body: impl FnOnce(&mut Emitter) -> Result<(), EmitError>,
) -> Result<(), EmitError> {
    let mut head = e.create_label();
    let mut done = e.create_label();
    e.set_label(&mut head)?;
    test(e, done)?;
    body(e)?;
    e.asm().jmp(head)?;
    land(e, &mut done)
}

/// Set `label` on a zero-byte marker, so that a label set next (a loop
/// head right after a loop) lands on the same address but another
/// instruction (iced allows one label an instruction).
pub(crate) fn land(e: &mut Emitter, label: &mut CodeLabel) -> Result<(), EmitError> {
    e.set_label(label)?;
    e.asm().zero_bytes()?;
    Ok(())
}

/// `body` for every output row of the call's range (`ROW` from
/// `ROW_START` to `ROW_END`), after [`row_setup`].
fn each_row(
    e: &mut Emitter,
    body: impl FnOnce(&mut Emitter) -> Result<(), EmitError>,
) -> Result<(), EmitError> {
    e.asm().mov(ROW, qword_ptr(ARGS + offsets::ROW_START))?;
    while_loop(
        e,
        |e, done| {
            e.asm().cmp(ROW, qword_ptr(ARGS + offsets::ROW_END))?;
            e.asm().jae(done)?;
            Ok(())
        },
        |e| {
            row_setup(e)?;
            body(e)?;
            e.asm().inc(ROW)?;
            Ok(())
        },
    )
}

/// The rows of one panel group (`panels` panels from `S_P`), pixels as
/// the module docs say.
fn rows(
    e: &mut Emitter,
    kind: ArmKind,
    tier: Tier,
    panels: usize,
    masked: bool,
) -> Result<(), EmitError> {
    each_row(e, |e| {
        e.asm().mov(OW, qword_ptr(ARGS + offsets::OW_LO))?;
        let (width, leftovers) = tier.pixels();
        let fits = |e: &mut Emitter, h: u64, skip: CodeLabel| -> Result<(), EmitError> {
            e.asm().lea(rax, ptr(OW + h as i32))?;
            e.asm().cmp(rax, qword_ptr(ARGS + offsets::OW_HI))?;
            e.asm().ja(skip)?;
            Ok(())
        };
        while_loop(
            e,
            |e, done| fits(e, width, done),
            |e| {
                tile(e, kind, tier, width as usize, panels, false, masked)?;
                e.asm().add(OW, width as i32)?;
                Ok(())
            },
        )?;
        for &h in leftovers {
            let mut skip = e.create_label();
            fits(e, h, skip)?;
            tile(e, kind, tier, h as usize, panels, false, masked)?;
            e.asm().add(OW, h as i32)?;
            land(e, &mut skip)?;
        }
        Ok(())
    })
}

/// Per row: `S_XB` (the image, plus `S_XPANEL`), `S_IH0` (`oh · stride −
/// pad`) and `S_YROW` (the row's first output, plus the panel `S_P`'s
/// channels). Clobbers rax, rdx.
fn row_setup(e: &mut Emitter) -> Result<(), EmitError> {
    let a = e.asm();
    a.mov(rax, ROW)?;
    a.xor(edx, edx)?;
    a.div(qword_ptr(ARGS + offsets::OUT_H))?;
    a.imul_2(rdx, qword_ptr(ARGS + offsets::STRIDE))?;
    a.sub(rdx, qword_ptr(ARGS + offsets::PAD))?;
    a.mov(qword_ptr(rsp + S_IH0), rdx)?;
    a.imul_2(rax, qword_ptr(rsp + S_IMGIN))?;
    a.add(rax, qword_ptr(rsp + S_XG))?;
    a.add(rax, qword_ptr(rsp + S_XPANEL))?;
    a.mov(qword_ptr(rsp + S_XB), rax)?;
    a.mov(rax, ROW)?;
    a.imul_2(rax, qword_ptr(rsp + S_ROWOUT))?;
    a.add(rax, qword_ptr(rsp + S_YG))?;
    a.mov(rdx, qword_ptr(rsp + S_P))?;
    a.shl(rdx, 6)?;
    a.add(rax, rdx)?;
    a.mov(qword_ptr(rsp + S_YROW), rax)?;
    Ok(())
}

/// The body: whole groups, then single masked panels.
fn body(e: &mut Emitter, kind: ArmKind, tier: Tier) -> Result<(), EmitError> {
    let group = tier.group();
    let a = e.asm();
    a.mov(rax, qword_ptr(rsp + S_PIXIN))?;
    a.imul_2(rax, qword_ptr(ARGS + offsets::STRIDE))?;
    a.mov(XS, rax)?;
    a.lea(XS3, ptr(XS + XS * 2))?;
    a.mov(VSTRIDE, qword_ptr(rsp + S_PSTRIDE))?;
    a.mov(qword_ptr(rsp + S_P), 0)?;
    let panel_setup = |e: &mut Emitter| panel_setup(e, kind);
    let flat = kind == ArmKind::Direct && tier == Tier::Avx512;
    let mut generic = e.create_label();
    let mut end = e.create_label();
    if flat {
        // Short interiors take the flattened tiles (module docs).
        let a = e.asm();
        a.mov(rax, qword_ptr(ARGS + offsets::OW_HI))?;
        a.sub(rax, qword_ptr(ARGS + offsets::OW_LO))?;
        a.cmp(rax, FLAT_BELOW as i32)?;
        a.jae(generic)?;
        flat_body(e)?;
        e.asm().jmp(end)?;
        land(e, &mut generic)?;
    }
    while_loop(
        e,
        |e, done| {
            e.asm().mov(rax, qword_ptr(rsp + S_P))?;
            e.asm().add(rax, group as i32)?;
            e.asm().cmp(rax, qword_ptr(rsp + S_WHOLE))?;
            e.asm().ja(done)?;
            Ok(())
        },
        |e| {
            panel_setup(e)?;
            rows(e, kind, tier, group, false)?;
            e.asm().add(qword_ptr(rsp + S_P), group as i32)?;
            Ok(())
        },
    )?;
    while_loop(
        e,
        |e, done| {
            e.asm().mov(rax, qword_ptr(rsp + S_P))?;
            e.asm().cmp(rax, qword_ptr(rsp + S_GPANELS))?;
            e.asm().jae(done)?;
            Ok(())
        },
        |e| {
            panel_setup(e)?;
            e.asm().mov(rax, qword_ptr(rsp + S_P))?;
            // AVX2: the masks go to the stack (the tile needs every register).
            V(tier).panel_masks(e, (12, 13))?;
            if tier == Tier::Avx2 {
                e.asm().vmovups(ptr(rsp + S_MASK), YMM[12])?;
                e.asm().vmovups(ptr(rsp + S_MASK + 32), YMM[13])?;
            }
            rows(e, kind, tier, 1, true)?;
            e.asm().add(qword_ptr(rsp + S_P), 1)?;
            Ok(())
        },
    )?;
    border(e, kind, tier)?;
    if flat {
        land(e, &mut end)?;
    }
    Ok(())
}

/// Sets `S_WPANEL` and `S_BIASP` (and, depthwise, `S_XPANEL`) for the
/// panel `S_P`. Clobbers rax.
fn panel_setup(e: &mut Emitter, kind: ArmKind) -> Result<(), EmitError> {
    let a = e.asm();
    a.mov(rax, qword_ptr(rsp + S_P))?;
    a.imul_2(rax, qword_ptr(rsp + S_PSTRIDE))?;
    a.add(rax, qword_ptr(rsp + S_WB))?;
    a.mov(qword_ptr(rsp + S_WPANEL), rax)?;
    a.mov(rax, qword_ptr(rsp + S_P))?;
    a.shl(rax, 6)?;
    a.add(rax, qword_ptr(rsp + S_BIASB))?;
    a.mov(qword_ptr(rsp + S_BIASP), rax)?;
    if kind == ArmKind::Depthwise {
        a.mov(rax, qword_ptr(rsp + S_P))?;
        a.shl(rax, 6)?;
        a.mov(qword_ptr(rsp + S_XPANEL), rax)?;
    }
    Ok(())
}

/// Panels a border pixel's block holds: four (AVX-512: four zmm chains;
/// AVX2: eight ymm), enough independent accumulators to hide the FMA
/// latency that one pixel's one or two would expose.
pub const BORDER_PANELS: usize = 4;

/// `P` of the border pass (free there: its tiles are one pixel wide).
const BP: AsmRegister64 = r12;
/// `PW + 3 · VSTRIDE`: the fourth panel's weights.
const PW3: AsmRegister64 = r9;

/// The border pass: every row's columns that the interior tiles left —
/// `0..ow_lo`, and from the interior's last even-width tile to `out_w` —
/// one pixel at a time with column checks, for the panels in blocks of
/// [`BORDER_PANELS`] while whole, then one at a time under masks (the
/// blocks outermost, so a block's weights are read from cache by every
/// row).
fn border(e: &mut Emitter, kind: ArmKind, tier: Tier) -> Result<(), EmitError> {
    // The rows' setup adds no panel: each block adds its own.
    e.asm().mov(qword_ptr(rsp + S_P), 0)?;
    e.asm().mov(qword_ptr(rsp + S_XPANEL), 0)?;
    e.asm().xor(r12d, r12d)?;
    while_loop(
        e,
        |e, done| {
            e.asm().lea(rax, ptr(BP + BORDER_PANELS as i32))?;
            e.asm().cmp(rax, qword_ptr(rsp + S_WHOLE))?;
            e.asm().ja(done)?;
            Ok(())
        },
        |e| {
            border_rows(e, kind, tier, BORDER_PANELS, false)?;
            e.asm().add(BP, BORDER_PANELS as i32)?;
            Ok(())
        },
    )?;
    while_loop(
        e,
        |e, done| {
            e.asm().cmp(BP, qword_ptr(rsp + S_GPANELS))?;
            e.asm().jae(done)?;
            Ok(())
        },
        |e| {
            e.asm().mov(rax, BP)?;
            V(tier).panel_masks(e, (12, 13))?;
            if tier == Tier::Avx2 {
                e.asm().vmovups(ptr(rsp + S_MASK), YMM[12])?;
                e.asm().vmovups(ptr(rsp + S_MASK + 32), YMM[13])?;
            }
            border_rows(e, kind, tier, 1, true)?;
            e.asm().inc(BP)?;
            Ok(())
        },
    )
}

/// Every row's border pixels for the `panels` panels from `BP`: the
/// block's weights stay in cache while the rows walk them.
fn border_rows(
    e: &mut Emitter,
    kind: ArmKind,
    tier: Tier,
    panels: usize,
    masked: bool,
) -> Result<(), EmitError> {
    each_row(e, |e| {
        e.asm().xor(eax, eax)?;
        e.asm().mov(OW, rax)?;
        while_loop(
            e,
            |e, done| {
                e.asm().cmp(OW, qword_ptr(ARGS + offsets::OW_LO))?;
                e.asm().jae(done)?;
                Ok(())
            },
            |e| {
                border_block(e, kind, tier, panels, masked)?;
                e.asm().inc(OW)?;
                Ok(())
            },
        )?;
        // The interior's tiles covered an even width from ow_lo.
        let a = e.asm();
        a.mov(OW, qword_ptr(ARGS + offsets::OW_HI))?;
        a.mov(rax, OW)?;
        a.sub(rax, qword_ptr(ARGS + offsets::OW_LO))?;
        a.and(eax, 1)?;
        a.sub(OW, rax)?;
        while_loop(
            e,
            |e, done| {
                e.asm().cmp(OW, qword_ptr(ARGS + offsets::OUT_W))?;
                e.asm().jae(done)?;
                Ok(())
            },
            |e| {
                border_block(e, kind, tier, panels, masked)?;
                e.asm().inc(OW)?;
                Ok(())
            },
        )?;
        Ok(())
    })
}

/// One border pixel `OW` × `panels` panels from `BP`: accumulators
/// 0..8, x temporaries 8..12, the weights read by the FMAs from memory;
/// masked (one panel) when `masked`.
fn border_block(
    e: &mut Emitter,
    kind: ArmKind,
    tier: Tier,
    panels: usize,
    masked: bool,
) -> Result<(), EmitError> {
    let v = V(tier);
    let vectors = panels * tier.per_panel();
    let vl = 4 * tier.lanes() as i32;
    let mask_reg = 13;
    let load_mask = |e: &mut Emitter, u: usize| -> Result<(), EmitError> {
        if masked && tier == Tier::Avx2 {
            e.asm()
                .vmovups(YMM[mask_reg], ptr(rsp + S_MASK + 32 * u as i32))?;
        }
        Ok(())
    };
    {
        let a = e.asm();
        a.mov(rax, BP)?;
        a.shl(rax, 6)?;
        a.add(rax, qword_ptr(rsp + S_BIASB))?;
    }
    for u in 0..vectors {
        v.load(e, u, ptr(rax + vl * u as i32))?;
    }
    {
        let a = e.asm();
        a.mov(rax, OW)?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::STRIDE))?;
        a.sub(rax, qword_ptr(ARGS + offsets::PAD))?;
        a.mov(qword_ptr(rsp + S_IW0), rax)?;
    }
    let wmem = |u: usize| {
        let (panel, half) = (u / tier.per_panel(), vl * (u % tier.per_panel()) as i32);
        match panel {
            0 => ptr(PW + half),
            1 => ptr(PW + VSTRIDE + half),
            2 => ptr(PW + VSTRIDE * 2 + half),
            _ => ptr(PW3 + half),
        }
    };
    taps(e, true, |e| {
        let a = e.asm();
        a.imul_2(rax, qword_ptr(rsp + S_PIXIN))?;
        a.add(rax, qword_ptr(rsp + S_XROW))?;
        a.mov(PX[0], rax)?;
        if kind == ArmKind::Depthwise {
            a.mov(rax, BP)?;
            a.shl(rax, 6)?;
            a.add(PX[0], rax)?;
        }
        a.mov(rax, KH)?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::K_W))?;
        a.add(rax, KW)?;
        a.imul_2(rax, qword_ptr(rsp + S_TAPB))?;
        a.add(rax, qword_ptr(rsp + S_WB))?;
        a.mov(PW, BP)?;
        a.imul_2(PW, VSTRIDE)?;
        a.add(PW, rax)?;
        if panels > 3 {
            a.lea(PW3, ptr(PW + VSTRIDE * 2))?;
            a.add(PW3, VSTRIDE)?;
        }
        if kind == ArmKind::Depthwise {
            for u in 0..vectors {
                let x = ptr(PX[0] + vl * u as i32);
                let t = 8 + u % 4;
                if masked {
                    load_mask(e, u)?;
                    v.load_masked(e, t, x, mask_reg)?;
                } else {
                    v.load(e, t, x)?;
                }
                v.fma_mem(e, u, t, wmem(u))?;
            }
            return Ok(());
        }
        e.asm().mov(rcx, qword_ptr(ARGS + offsets::CIN_G))?;
        let mut ci = e.create_label();
        e.set_label(&mut ci)?;
        v.broadcast(e, 8, ptr(PX[0]))?;
        for u in 0..vectors {
            v.fma_mem(e, u, 8, wmem(u))?;
        }
        let a = e.asm();
        a.add(PX[0], 4)?;
        a.add(PW, 64)?;
        if panels > 3 {
            a.add(PW3, 64)?;
        }
        a.dec(rcx)?;
        a.jne(ci)?;
        Ok(())
    })?;
    let accs: Vec<usize> = (0..vectors).collect();
    v.epilogue(e, &accs, 14, 15)?;
    {
        let a = e.asm();
        a.mov(rax, OW)?;
        a.imul_2(rax, qword_ptr(rsp + S_PIXOUT))?;
        a.add(rax, qword_ptr(rsp + S_YROW))?;
        a.mov(rdx, BP)?;
        a.shl(rdx, 6)?;
        a.add(rax, rdx)?;
    }
    for u in 0..vectors {
        let m = ptr(rax + vl * u as i32);
        if masked {
            load_mask(e, u)?;
            v.store_masked(e, m, u, mask_reg)?;
        } else {
            v.store(e, m, u)?;
        }
    }
    Ok(())
}

/// The direct body once per group `g`: its weights from panel `g ·
/// group_panels` (`S_WB`, `S_BIASB`), its x channels from `g · cin_g`
/// (`S_XG`) and its y channels from `g · cout_g` (`S_YG`); inside, every
/// panel index, mask and reduction is the group's.
fn groups(e: &mut Emitter, tier: Tier) -> Result<(), EmitError> {
    e.asm().mov(qword_ptr(rsp + S_CG), 0)?;
    while_loop(
        e,
        |e, done| {
            e.asm().mov(rax, qword_ptr(rsp + S_CG))?;
            e.asm().cmp(rax, qword_ptr(ARGS + offsets::GROUPS))?;
            e.asm().jae(done)?;
            Ok(())
        },
        |e| {
            let a = e.asm();
            a.mov(rcx, rax)?;
            a.imul_2(rcx, qword_ptr(ARGS + offsets::GROUP_PANELS))?;
            a.mov(rdx, rcx)?;
            a.imul_2(rdx, qword_ptr(rsp + S_PSTRIDE))?;
            a.add(rdx, qword_ptr(rsp + S_WB0))?;
            a.mov(qword_ptr(rsp + S_WB), rdx)?;
            a.shl(rcx, 6)?;
            a.add(rcx, qword_ptr(ARGS + offsets::FILT))?;
            a.mov(qword_ptr(rsp + S_BIASB), rcx)?;
            a.mov(rcx, rax)?;
            a.imul_2(rcx, qword_ptr(ARGS + offsets::CIN_G))?;
            a.shl(rcx, 2)?;
            a.add(rcx, qword_ptr(ARGS + offsets::X))?;
            a.mov(qword_ptr(rsp + S_XG), rcx)?;
            a.mov(rcx, rax)?;
            a.imul_2(rcx, qword_ptr(ARGS + offsets::COUT_G))?;
            a.shl(rcx, 2)?;
            a.add(rcx, qword_ptr(ARGS + offsets::Y))?;
            a.mov(qword_ptr(rsp + S_YG), rcx)?;
            body(e, ArmKind::Direct, tier)?;
            e.asm().add(qword_ptr(rsp + S_CG), 1)?;
            Ok(())
        },
    )
}

/// An emitted body as `name`'s [`NativeCode`] (an emit error refused by
/// name).
pub(crate) fn native(
    name: &str,
    emitted: Result<weft_x64::Emitted, EmitError>,
) -> Result<NativeCode, Refusal> {
    let emitted = emitted.map_err(|e| Refusal::EmitError {
        message: format!("{name}: {e}"),
    })?;
    Ok(NativeCode {
        isa: Isa::X86_64,
        bytes: emitted.bytes,
        pool: None,
        loops: Vec::new(),
    })
}

/// A conv body's entry for `abi`: the frame saving every register the
/// conv twins use (rdi, rsi, rbx, rbp, r12–r15, and all zmm or the 16
/// ymm), and the argument pointer moved to `ARGS`.
pub(crate) fn open(abi: Abi, avx512: bool) -> Result<Emitter, EmitError> {
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
    if avx512 {
        ZMM.iter().for_each(|z| clobbers = clobbers.with(*z));
    } else {
        YMM[..16].iter().for_each(|y| clobbers = clobbers.with(*y));
    }
    e.prologue(clobbers)?;
    if e.args_reg() != ARGS {
        let from = e.args_reg();
        e.asm().mov(ARGS, from)?;
    }
    Ok(e)
}

/// x's sizes in bytes into their slots: a pixel (`S_PIXIN`), a row
/// (`S_ROWIN`), an image (`S_IMGIN`). Clobbers rax.
pub(crate) fn input_sizes(a: &mut CodeAssembler) -> Result<(), EmitError> {
    a.mov(rax, qword_ptr(ARGS + offsets::CIN))?;
    a.shl(rax, 2)?;
    a.mov(qword_ptr(rsp + S_PIXIN), rax)?;
    a.imul_2(rax, qword_ptr(ARGS + offsets::IN_W))?;
    a.mov(qword_ptr(rsp + S_ROWIN), rax)?;
    a.imul_2(rax, qword_ptr(ARGS + offsets::IN_H))?;
    a.mov(qword_ptr(rsp + S_IMGIN), rax)?;
    Ok(())
}

fn emit(kind: ArmKind, tier: Tier, abi: Abi) -> Result<weft_x64::Emitted, EmitError> {
    let mut e = open(abi, tier == Tier::Avx512)?;
    {
        let a = e.asm();
        a.sub(rsp, FRAME)?;
        // Sizes in bytes, once.
        input_sizes(a)?;
        // A tap's weights: cin lines (direct) or one (depthwise); a
        // panel's: every tap's.
        match kind {
            ArmKind::Direct => {
                a.mov(rax, qword_ptr(ARGS + offsets::CIN_G))?;
                a.shl(rax, 6)?;
            }
            ArmKind::Depthwise => a.mov(rax, 64u64)?,
        }
        a.mov(qword_ptr(rsp + S_TAPB), rax)?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::K_H))?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::K_W))?;
        a.mov(qword_ptr(rsp + S_PSTRIDE), rax)?;
        a.mov(qword_ptr(rsp + S_XPANEL), 0)?;
        a.mov(rax, qword_ptr(ARGS + offsets::COUT))?;
        a.shl(rax, 2)?;
        a.mov(qword_ptr(rsp + S_PIXOUT), rax)?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::OUT_W))?;
        a.mov(qword_ptr(rsp + S_ROWOUT), rax)?;
        // A group's channels and panels (depthwise: one group of all).
        let (cout_g, gpanels) = match kind {
            ArmKind::Direct => (offsets::COUT_G, offsets::GROUP_PANELS),
            ArmKind::Depthwise => (offsets::COUT, offsets::PANELS),
        };
        a.mov(rax, qword_ptr(ARGS + cout_g))?;
        a.mov(qword_ptr(rsp + S_COUTG), rax)?;
        a.shr(rax, 4)?;
        a.mov(qword_ptr(rsp + S_WHOLE), rax)?;
        a.mov(rax, qword_ptr(ARGS + gpanels))?;
        a.mov(qword_ptr(rsp + S_GPANELS), rax)?;
        a.mov(rax, qword_ptr(ARGS + offsets::PANELS))?;
        a.shl(rax, 6)?;
        a.add(rax, qword_ptr(ARGS + offsets::FILT))?;
        a.mov(qword_ptr(rsp + S_WB), rax)?;
        a.mov(qword_ptr(rsp + S_WB0), rax)?;
        a.mov(rax, qword_ptr(ARGS + offsets::FILT))?;
        a.mov(qword_ptr(rsp + S_BIASB), rax)?;
        a.mov(rax, qword_ptr(ARGS + offsets::X))?;
        a.mov(qword_ptr(rsp + S_XG), rax)?;
        a.mov(rax, qword_ptr(ARGS + offsets::Y))?;
        a.mov(qword_ptr(rsp + S_YG), rax)?;
        if tier == Tier::Avx2 {
            for l in 0..8 {
                a.mov(
                    weft_x64::iced_x86::code_asm::dword_ptr(rsp + S_IOTA + 4 * l),
                    l as u32,
                )?;
            }
        }
    }
    match kind {
        ArmKind::Direct => groups(&mut e, tier)?,
        ArmKind::Depthwise => body(&mut e, kind, tier)?,
    }
    crate::silu::x64_pass(&mut e, tier == Tier::Avx512, ARGS)?;
    e.asm().add(rsp, FRAME)?;
    e.epilogue()?;
    e.finish()
}

/// The flattened tiles take a call whose interior is narrower than this
/// (the 12-pixel interior tile would not run once): short rows, where the
/// border pass would compute most pixels one at a time.
pub const FLAT_BELOW: u64 = 12;

/// Pixels of a flattened tile: one opmask each (k1–k7).
pub const FLAT_PIXELS: usize = 7;

/// Whole panels of a flattened tile's group: 7 pixels × 3 zmm = 21
/// accumulators, 3 weight vectors and 7 broadcasts in 32 zmm.
pub const FLAT_GROUP: usize = 3;

/// Whether the AVX-512 direct twin takes its flattened tiles at `s`.
pub fn flat(s: &Shape) -> bool {
    s.ow_hi - s.ow_lo < FLAT_BELOW
}

/// The flattened tiles' x pointers, one a pixel (rbx and rbp are free:
/// this path keeps its rows and columns on the stack).
const FP: [AsmRegister64; FLAT_PIXELS] = [r8, r9, r10, r11, r12, rbx, rbp];

fn kmask(k: usize) -> weft_x64::iced_x86::code_asm::AsmRegisterK {
    use weft_x64::iced_x86::code_asm::{k2, k3, k4, k5, k6, k7};
    [k1, k2, k3, k4, k5, k6, k7][k]
}

fn zmm_k(z: usize, k: usize) -> weft_x64::iced_x86::code_asm::AsmRegisterZmm {
    let z = ZMM[z];
    [z.k1(), z.k2(), z.k3(), z.k4(), z.k5(), z.k6(), z.k7()][k]
}

/// The AVX-512 direct body for short rows: tiles of [`FLAT_PIXELS`]
/// consecutive pixels of the flattened `(b, oh, ow)` axis (a tile may
/// span rows and images; the call's last is cut short) × groups of
/// [`FLAT_GROUP`] panels while whole, then two, one, and a masked one.
/// Per tap, each pixel's opmask says whether the tap is inside the input
/// for it; the FMAs merge under it, so a tap outside leaves the
/// accumulator untouched (skipped, as the contract says) and every pixel
/// of every row is tiled, borders included.
fn flat_body(e: &mut Emitter) -> Result<(), EmitError> {
    {
        let a = e.asm();
        a.mov(rax, qword_ptr(ARGS + offsets::ROW_END))?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::OUT_W))?;
        a.mov(qword_ptr(rsp + S_QEND), rax)?;
        a.mov(rax, qword_ptr(ARGS + offsets::CIN_G))?;
        a.shl(rax, 2)?;
        a.add(rax, qword_ptr(rsp + S_XG))?;
        a.mov(qword_ptr(rsp + S_SAFE), rax)?;
        a.mov(rax, qword_ptr(ARGS + offsets::K_H))?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::DIL))?;
        a.mov(qword_ptr(rsp + S_KHEND), rax)?;
        a.mov(rax, qword_ptr(ARGS + offsets::K_W))?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::DIL))?;
        a.mov(qword_ptr(rsp + S_KWEND), rax)?;
    }
    let fits = |e: &mut Emitter, n: usize, skip: CodeLabel| -> Result<(), EmitError> {
        e.asm().mov(rax, qword_ptr(rsp + S_P))?;
        e.asm().add(rax, n as i32)?;
        e.asm().cmp(rax, qword_ptr(rsp + S_WHOLE))?;
        e.asm().ja(skip)?;
        Ok(())
    };
    while_loop(
        e,
        |e, done| fits(e, FLAT_GROUP, done),
        |e| {
            panel_setup(e, ArmKind::Direct)?;
            flat_tiles(e, FLAT_GROUP, false)?;
            e.asm().add(qword_ptr(rsp + S_P), FLAT_GROUP as i32)?;
            Ok(())
        },
    )?;
    for n in (1..FLAT_GROUP).rev() {
        let mut skip = e.create_label();
        fits(e, n, skip)?;
        panel_setup(e, ArmKind::Direct)?;
        flat_tiles(e, n, false)?;
        e.asm().add(qword_ptr(rsp + S_P), n as i32)?;
        land(e, &mut skip)?;
    }
    let mut skip = e.create_label();
    e.asm().mov(rax, qword_ptr(rsp + S_P))?;
    e.asm().cmp(rax, qword_ptr(rsp + S_GPANELS))?;
    e.asm().jae(skip)?;
    panel_setup(e, ArmKind::Direct)?;
    e.asm().mov(rax, qword_ptr(rsp + S_P))?;
    V(Tier::Avx512).panel_masks(e, (0, 0))?;
    e.asm().kmovw(word_ptr(rsp + S_CMASK), k1)?;
    flat_tiles(e, 1, true)?;
    land(e, &mut skip)
}

/// Every flattened tile of the call for the `vectors` panels from `S_P`
/// (stores under the channel mask when `masked`).
fn flat_tiles(e: &mut Emitter, vectors: usize, masked: bool) -> Result<(), EmitError> {
    let v = V(Tier::Avx512);
    let acc = |r: usize, u: usize| r * vectors + u;
    let w = |u: usize| 21 + u;
    let t = |r: usize| 24 + r;
    {
        let a = e.asm();
        a.mov(rax, qword_ptr(ARGS + offsets::ROW_START))?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::OUT_W))?;
        a.mov(qword_ptr(rsp + S_Q), rax)?;
    }
    while_loop(
        e,
        |e, done| {
            e.asm().mov(rax, qword_ptr(rsp + S_Q))?;
            e.asm().cmp(rax, qword_ptr(rsp + S_QEND))?;
            e.asm().jae(done)?;
            Ok(())
        },
        |e| {
            flat_pixels(e)?;
            e.asm().mov(rax, qword_ptr(rsp + S_BIASP))?;
            for r in 0..FLAT_PIXELS {
                for u in 0..vectors {
                    v.load(e, acc(r, u), ptr(rax + 64 * u as i32))?;
                }
            }
            e.asm().mov(rax, qword_ptr(rsp + S_WPANEL))?;
            e.asm().mov(qword_ptr(rsp + S_TAPW), rax)?;
            e.asm().xor(r14d, r14d)?;
            while_loop(
                e,
                |e, done| {
                    e.asm().cmp(KH, qword_ptr(rsp + S_KHEND))?;
                    e.asm().jae(done)?;
                    Ok(())
                },
                |e| {
                    e.asm().xor(r15d, r15d)?;
                    while_loop(
                        e,
                        |e, done| {
                            e.asm().cmp(KW, qword_ptr(rsp + S_KWEND))?;
                            e.asm().jae(done)?;
                            Ok(())
                        },
                        |e| {
                            flat_tap(e, vectors, &acc, &w, &t)?;
                            let a = e.asm();
                            a.mov(rax, qword_ptr(rsp + S_TAPB))?;
                            a.add(qword_ptr(rsp + S_TAPW), rax)?;
                            a.add(KW, qword_ptr(ARGS + offsets::DIL))?;
                            Ok(())
                        },
                    )?;
                    e.asm().add(KH, qword_ptr(ARGS + offsets::DIL))?;
                    Ok(())
                },
            )?;
            let accs: Vec<usize> = (0..FLAT_PIXELS * vectors).collect();
            v.epilogue(e, &accs, 30, 31)?;
            let mut stored = e.create_label();
            let a = e.asm();
            a.mov(rcx, qword_ptr(rsp + S_QEND))?;
            a.sub(rcx, qword_ptr(rsp + S_Q))?;
            a.mov(rax, qword_ptr(rsp + S_Q))?;
            a.imul_2(rax, qword_ptr(rsp + S_PIXOUT))?;
            a.add(rax, qword_ptr(rsp + S_YG))?;
            a.mov(rdx, qword_ptr(rsp + S_P))?;
            a.shl(rdx, 6)?;
            a.add(rax, rdx)?;
            a.mov(rdx, qword_ptr(rsp + S_PIXOUT))?;
            if masked {
                a.kmovw(k1, word_ptr(rsp + S_CMASK))?;
            }
            for r in 0..FLAT_PIXELS {
                if r > 0 {
                    // Pixels past the call's end are not stored.
                    e.asm().cmp(rcx, r as i32)?;
                    e.asm().jbe(stored)?;
                }
                for u in 0..vectors {
                    let m = ptr(rax + 64 * u as i32);
                    if masked {
                        e.asm().vmovups(m.k1(), ZMM[acc(r, u)])?;
                    } else {
                        v.store(e, m, acc(r, u))?;
                    }
                }
                if r + 1 < FLAT_PIXELS {
                    e.asm().add(rax, rdx)?;
                }
            }
            land(e, &mut stored)?;
            e.asm().add(qword_ptr(rsp + S_Q), FLAT_PIXELS as i32)?;
            Ok(())
        },
    )
}

/// The tile's pixels from `S_Q` into `S_PIX` (two divisions a pixel, once
/// a tile: nothing next to its taps). Clobbers rax, rcx, rdx.
fn flat_pixels(e: &mut Emitter) -> Result<(), EmitError> {
    for r in 0..FLAT_PIXELS {
        let slot = S_PIX + 24 * r as i32;
        let mut past = e.create_label();
        let mut next = e.create_label();
        let a = e.asm();
        a.mov(rax, qword_ptr(rsp + S_Q))?;
        if r > 0 {
            a.add(rax, r as i32)?;
        }
        a.cmp(rax, qword_ptr(rsp + S_QEND))?;
        a.jae(past)?;
        a.xor(edx, edx)?;
        a.div(qword_ptr(ARGS + offsets::OUT_W))?;
        a.imul_2(rdx, qword_ptr(ARGS + offsets::STRIDE))?;
        a.sub(rdx, qword_ptr(ARGS + offsets::PAD))?;
        a.mov(qword_ptr(rsp + slot + 8), rdx)?;
        a.imul_2(rdx, qword_ptr(rsp + S_PIXIN))?;
        a.mov(rcx, rdx)?;
        a.xor(edx, edx)?;
        a.div(qword_ptr(ARGS + offsets::OUT_H))?;
        a.imul_2(rdx, qword_ptr(ARGS + offsets::STRIDE))?;
        a.sub(rdx, qword_ptr(ARGS + offsets::PAD))?;
        a.mov(qword_ptr(rsp + slot), rdx)?;
        a.imul_2(rdx, qword_ptr(rsp + S_ROWIN))?;
        a.add(rcx, rdx)?;
        a.imul_2(rax, qword_ptr(rsp + S_IMGIN))?;
        a.add(rcx, rax)?;
        a.add(rcx, qword_ptr(rsp + S_SAFE))?;
        a.mov(qword_ptr(rsp + slot + 16), rcx)?;
        a.jmp(next)?;
        e.set_label(&mut past)?;
        let a = e.asm();
        a.mov(rax, 1u64 << 62)?;
        a.mov(qword_ptr(rsp + slot), rax)?;
        land(e, &mut next)?;
    }
    Ok(())
}

/// One tap (`KH` = kh · dil, `KW` = kw · dil) of a flattened tile: each
/// pixel's opmask and x pointer, then, if any pixel has the tap inside,
/// the `ci` loop (merge-masked FMAs; loads of a pixel outside read x's
/// first pixel instead).
fn flat_tap(
    e: &mut Emitter,
    vectors: usize,
    acc: &dyn Fn(usize, usize) -> usize,
    w: &dyn Fn(usize) -> usize,
    t: &dyn Fn(usize) -> usize,
) -> Result<(), EmitError> {
    let v = V(Tier::Avx512);
    {
        let a = e.asm();
        // The tap's offset from a pixel's first tap: (kh·dil·in_w + kw·dil) pixels.
        a.mov(rdx, KH)?;
        a.imul_2(rdx, qword_ptr(ARGS + offsets::IN_W))?;
        a.add(rdx, KW)?;
        a.imul_2(rdx, qword_ptr(rsp + S_PIXIN))?;
        a.mov(dword_ptr(rsp + S_ANY), 0)?;
        for (r, &px) in FP.iter().enumerate() {
            let slot = S_PIX + 24 * r as i32;
            // eax = −1 when ih and iw are both inside (unsigned compares
            // catch the negative ones), 0 otherwise.
            a.mov(rax, qword_ptr(rsp + slot))?;
            a.add(rax, KH)?;
            a.cmp(rax, qword_ptr(ARGS + offsets::IN_H))?;
            a.sbb(ecx, ecx)?;
            a.mov(rax, qword_ptr(rsp + slot + 8))?;
            a.add(rax, KW)?;
            a.cmp(rax, qword_ptr(ARGS + offsets::IN_W))?;
            a.sbb(eax, eax)?;
            a.and(eax, ecx)?;
            a.kmovw(kmask(r), eax)?;
            a.or(dword_ptr(rsp + S_ANY), eax)?;
            a.mov(px, qword_ptr(rsp + slot + 16))?;
            a.add(px, rdx)?;
            a.test(eax, eax)?;
            a.cmove(px, qword_ptr(rsp + S_SAFE))?;
        }
        a.mov(PW, qword_ptr(rsp + S_TAPW))?;
    }
    let mut done = e.create_label();
    e.asm().cmp(dword_ptr(rsp + S_ANY), 0)?;
    e.asm().je(done)?;
    // ci counts up from −4·cin_g to 0; the pointers are biased by 4·cin_g.
    e.asm().mov(rcx, qword_ptr(ARGS + offsets::CIN_G))?;
    e.asm().shl(rcx, 2)?;
    e.asm().neg(rcx)?;
    let mut ci = e.create_label();
    e.set_label(&mut ci)?;
    for u in 0..vectors {
        let m = match u {
            0 => ptr(PW),
            1 => ptr(PW + VSTRIDE),
            _ => ptr(PW + VSTRIDE * 2),
        };
        v.load(e, w(u), m)?;
    }
    for (r, &px) in FP.iter().enumerate() {
        v.broadcast(e, t(r), ptr(px + rcx))?;
        for u in 0..vectors {
            e.asm()
                .vfmadd231ps(zmm_k(acc(r, u), r), ZMM[w(u)], ZMM[t(r)])?;
        }
    }
    let a = e.asm();
    a.add(PW, 64)?;
    a.add(rcx, 4)?;
    a.jne(ci)?;
    land(e, &mut done)
}
