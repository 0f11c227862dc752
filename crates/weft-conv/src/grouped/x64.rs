//! The AVX-512 twin of the grouped arm: the arm's offer ([`super::GROUPED_LAYOUT`]),
//! the body emitted through weft-x64, each output's FMAs in the arm's
//! order (kh, kw, ci within its group).
//!
//! A panel (one zmm: 16 output channels, `16 / cout_g` groups) at a pixel
//! and tap needs, in lane `l` and step `ci`, `x[pixel, (g0 + l / cout_g) ·
//! cin_g + ci]`: the panel's `n = (16 / cout_g) · cin_g` input channels are
//! contiguous in NHWC, so the tap loads them once (a masked load of `n ≤
//! 16` lanes, or two when `n ≤ 32`) and each `ci` permutes them with the
//! index vector `(l / cout_g) · cin_g + ci` (`vpermps`, or `vpermi2ps`
//! across the two loads), then one FMA against the panel's weight line.
//! The index vector starts from a line built on the stack at entry and
//! steps by one per `ci` (`vpaddd`).
//!
//! Walk: panels outermost; per output row, the left border one pixel at a
//! time with column checks, the interior (`ow_lo..ow_hi`, every tap column
//! inside) in tiles of 8 pixels, then at most one of 4 and one of 2, and
//! the rest one at a time with column checks. Taps whose row lies outside
//! are skipped for the whole tile (a row is inside or outside for all of a
//! tile's pixels alike), and so are a checked pixel's outside columns:
//! nothing is multiplied by the padding. Stores are masked to the
//! channels below `cout`; loads of x to the panel's existing groups (the
//! last panel may hold fewer than `16 / cout_g`).
//!
//! The body is emitted twice, for one-load and two-load panels; a test of
//! `(16 / cout_g) · cin_g > 16` at entry picks one for the call.

use std::sync::Arc;

use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};
use weft_x64::iced_x86::code_asm::{
    cl, eax, ecx, edx, k1, k2, k3, ptr, qword_ptr, r10, r12, r13, r14, r14d, r15, r15d, r8, r9,
    rax, rbp, rbx, rcx, rdi, rdx, rsi, rsp, AsmMemoryOperand, AsmRegister64, CodeLabel,
};
use weft_x64::regs::ZMM;
use weft_x64::{Abi, EmitError, Emitter};

use super::{check_offer, panels};
use crate::twin_x64::{S_IMGIN, S_PIXIN, S_ROWIN};
use crate::{offsets, ConvGeometry, Shape};

/// The AVX-512 twin's name.
pub const AVX512_NAME: &str = "conv.direct.grouped.twin.avx512.8x16";

/// Pixels of an interior tile, then the leftover tiles (each at most once).
pub const TILE: usize = 8;
const LEFTOVERS: [usize; 2] = [4, 2];

const ARGS: AsmRegister64 = rdi;
const PW: AsmRegister64 = rsi;
const PX: [AsmRegister64; 2] = [rbp, r10];
const XS: AsmRegister64 = r8;
const XS3: AsmRegister64 = r9;
const KH: AsmRegister64 = r14;
const KW: AsmRegister64 = r15;
const ROW: AsmRegister64 = rbx;
const OW: AsmRegister64 = r12;

// Stack slots, as the direct twins lay them out; x's sizes (`S_PIXIN` at
// 64, `S_ROWIN` at 72, `S_IMGIN` at 120) are theirs, written by
// `twin_x64::input_sizes`.
const S_P: i32 = 0;
const S_WPANEL: i32 = 8;
const S_BIASP: i32 = 16;
const S_YROW: i32 = 24;
const S_XB: i32 = 32;
const S_IH0: i32 = 40;
const S_IW0: i32 = 48;
const S_XROW: i32 = 56;
const S_TAPB: i32 = 80;
const S_PIXOUT: i32 = 88;
const S_WB: i32 = 96;
const S_PSTRIDE: i32 = 104;
const S_PANELS: i32 = 112;
const S_ROWOUT: i32 = 128;
const S_XSTEP: i32 = 136;
const S_XPANEL: i32 = 144;
const S_SH: i32 = 152;
/// The index line for `ci = 0`: lane `l` holds `(l / cout_g) · cin_g`.
const S_IDX: i32 = 192;
const FRAME: i32 = 320;

/// zmm plan: accumulators 0–7, the first load of each pixel 8–15, the
/// second 16–23, the index 24, ones 25, the weight line 27, temporaries
/// 28–31 (zero and six of the epilogue after the `ci` loops).
const IDX: usize = 24;
const ONES: usize = 25;
const W: usize = 27;

fn t(r: usize) -> usize {
    28 + r % 4
}

/// The AVX-512 twin for a calling convention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupedX64 {
    abi: Abi,
}

impl GroupedX64 {
    /// For the host's calling convention.
    pub const fn new() -> GroupedX64 {
        GroupedX64 { abi: Abi::host() }
    }

    /// For another calling convention (tests call a Win64 body on Linux).
    pub const fn with_abi(abi: Abi) -> GroupedX64 {
        GroupedX64 { abi }
    }
}

impl Default for GroupedX64 {
    fn default() -> Self {
        GroupedX64::new()
    }
}

/// The x64 twins of the grouped arm: AVX-512, then AVX2.
pub fn twins() -> Vec<Arc<dyn Twin>> {
    vec![Arc::new(GroupedX64::new()), Arc::new(GroupedAvx2::new())]
}

const FEATURES: &[Feature] = &[Feature::Avx, Feature::Fma, Feature::Avx512f];

// SAFETY: the body reads x only at taps inside the input (rows checked,
// columns checked outside `ow_lo..ow_hi`, which `ConvArgs` derives), only
// the panel's existing groups' channels (masked loads), the packed
// filter's lines, and writes y only in its rows and channels below cout
// (masked stores); it returns normally. Validation checks it against the
// arm.
unsafe impl Twin for GroupedX64 {
    fn name(&self) -> &'static str {
        AVX512_NAME
    }

    fn isa(&self) -> Isa {
        Isa::X86_64
    }

    fn requires(&self) -> &'static [Feature] {
        FEATURES
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        check_offer(AVX512_NAME, offer)?;
        crate::twin_x64::native(AVX512_NAME, emit(self.abi))
    }

    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        match ConvGeometry::from_geometry(&offer.contract.geometry) {
            Ok((g, s)) => crate::silu::after(nest(&g, &s), &g, &s, 16, true),
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

/// Whether a call at `g` takes the two-load body.
pub fn two_loads(g: &ConvGeometry) -> bool {
    let groups = g.groups.max(1);
    let cout_g = (g.cout / groups).max(1);
    (16 / cout_g).max(1) * (g.cin / groups) > 16
}

/// The loop nest of the twin at `g` for a call over every row, in the
/// order the emitter writes its loops: the one-load body, then the
/// two-load one, the one not taken with zero trips.
pub fn nest(g: &ConvGeometry, s: &Shape) -> Vec<LoopTrip> {
    let two = two_loads(g);
    let mut out = Vec::new();
    for body in [false, true] {
        let on = u64::from(body == two);
        out.push(trip("panels", on * panels(g), 0));
        out.push(trip("rows", g.batch * s.out_h, 1));
        let taps = |out: &mut Vec<LoopTrip>, d: u32, run: bool| {
            let k = u64::from(run);
            out.push(trip("kh", k * g.k_h, d));
            out.push(trip("kw", g.k_w, d + 1));
            out.push(trip("ci", g.cin / g.groups, d + 2));
        };
        out.push(trip("left", s.ow_lo, 2));
        taps(&mut out, 3, true);
        let width = s.ow_hi - s.ow_lo;
        let tiles = width / TILE as u64;
        out.push(trip("tiles", tiles, 2));
        taps(&mut out, 3, true);
        let mut left = width - tiles * TILE as u64;
        for h in LEFTOVERS {
            let run = left >= h as u64;
            if run {
                left -= h as u64;
            }
            taps(&mut out, 2, run);
        }
        let done = s.ow_lo + width - left;
        out.push(trip("rest", s.out_w - done, 2));
        taps(&mut out, 3, true);
    }
    out
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

/// A label on a zero-byte marker (one label an instruction).
fn land(e: &mut Emitter, label: &mut CodeLabel) -> Result<(), EmitError> {
    e.set_label(label)?;
    e.asm().zero_bytes()?;
    Ok(())
}

/// x of tile pixel `r`, `disp` bytes on.
fn x_elem(r: usize, disp: i32) -> AsmMemoryOperand {
    let base = PX[r / 4];
    match r % 4 {
        0 => ptr(base + disp),
        1 => ptr(base + XS + disp),
        2 => ptr(base + XS * 2 + disp),
        _ => ptr(base + XS3 + disp),
    }
}

/// The loops over a pixel's taps: `kh` rows whose input row is inside,
/// `kw` columns (checked when `checked`); `inner` emits the tap with rax
/// holding its input column.
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

/// The epilogue on `accs` (zmm 28 and 29 free), the contract's
/// comparisons operand for operand.
fn epilogue(e: &mut Emitter, accs: &[usize]) -> Result<(), EmitError> {
    let (zero, six) = (28, 29);
    let mut done = e.create_label();
    let a = e.asm();
    a.cmp(qword_ptr(ARGS + offsets::ACT), 0)?;
    a.je(done)?;
    // SiLU is the pass after the tiles (crate::silu).
    a.cmp(qword_ptr(ARGS + offsets::ACT), crate::silu::CODE as i32)?;
    a.je(done)?;
    a.vpxord(ZMM[zero], ZMM[zero], ZMM[zero])?;
    for &r in accs {
        // r = 0 > r ? 0 : r
        a.vmaxps(ZMM[r], ZMM[zero], ZMM[r])?;
    }
    a.cmp(
        qword_ptr(ARGS + offsets::ACT),
        crate::Activation::Relu6 as i32,
    )?;
    a.jne(done)?;
    a.mov(eax, 6.0f32.to_bits())?;
    a.vpbroadcastd(ZMM[six], eax)?;
    for &r in accs {
        // r = 6 < r ? 6 : r
        a.vminps(ZMM[r], ZMM[six], ZMM[r])?;
    }
    land(e, &mut done)
}

/// One tile of `pixels` from column `OW` × the panel `S_P`, columns
/// checked when `checked`, with one or two loads of x a tap.
fn tile(e: &mut Emitter, pixels: usize, checked: bool, two: bool) -> Result<(), EmitError> {
    e.asm().mov(rax, qword_ptr(rsp + S_BIASP))?;
    for acc in ZMM.iter().take(pixels) {
        e.asm().vmovups(*acc, ptr(rax))?;
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
        a.mov(rax, KH)?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::K_W))?;
        a.add(rax, KW)?;
        a.imul_2(rax, qword_ptr(rsp + S_TAPB))?;
        a.add(rax, qword_ptr(rsp + S_WPANEL))?;
        a.mov(PW, rax)?;
        for r in 0..pixels {
            a.vmovups(ZMM[8 + r].k1().z(), x_elem(r, 0))?;
            if two {
                a.vmovups(ZMM[16 + r].k2().z(), x_elem(r, 64))?;
            }
        }
        a.vmovdqu32(ZMM[IDX], ptr(rsp + S_IDX))?;
        a.mov(rcx, qword_ptr(ARGS + offsets::CIN_G))?;
        let mut ci = e.create_label();
        e.set_label(&mut ci)?;
        let a = e.asm();
        a.vmovups(ZMM[W], ptr(PW))?;
        for r in 0..pixels {
            if two {
                a.vmovaps(ZMM[t(r)], ZMM[IDX])?;
                a.vpermi2ps(ZMM[t(r)], ZMM[8 + r], ZMM[16 + r])?;
            } else {
                a.vpermps(ZMM[t(r)], ZMM[IDX], ZMM[8 + r])?;
            }
            a.vfmadd231ps(ZMM[r], ZMM[t(r)], ZMM[W])?;
        }
        a.vpaddd(ZMM[IDX], ZMM[IDX], ZMM[ONES])?;
        a.add(PW, 64)?;
        a.dec(rcx)?;
        a.jne(ci)?;
        Ok(())
    })?;
    let accs: Vec<usize> = (0..pixels).collect();
    epilogue(e, &accs)?;
    let a = e.asm();
    a.mov(rax, OW)?;
    a.imul_2(rax, qword_ptr(rsp + S_PIXOUT))?;
    a.add(rax, qword_ptr(rsp + S_YROW))?;
    a.mov(rdx, qword_ptr(rsp + S_PIXOUT))?;
    for (r, acc) in ZMM.iter().take(pixels).enumerate() {
        a.vmovups(ptr(rax).k3(), *acc)?;
        if r + 1 < pixels {
            a.add(rax, rdx)?;
        }
    }
    Ok(())
}

/// Per row: `S_XB` (the image plus the panel's x channels), `S_IH0` and
/// `S_YROW` (the row's first output plus the panel's channels).
fn row_setup(e: &mut Emitter) -> Result<(), EmitError> {
    let a = e.asm();
    a.mov(rax, ROW)?;
    a.xor(edx, edx)?;
    a.div(qword_ptr(ARGS + offsets::OUT_H))?;
    a.imul_2(rdx, qword_ptr(ARGS + offsets::STRIDE))?;
    a.sub(rdx, qword_ptr(ARGS + offsets::PAD))?;
    a.mov(qword_ptr(rsp + S_IH0), rdx)?;
    a.imul_2(rax, qword_ptr(rsp + S_IMGIN))?;
    a.add(rax, qword_ptr(ARGS + offsets::X))?;
    a.add(rax, qword_ptr(rsp + S_XPANEL))?;
    a.mov(qword_ptr(rsp + S_XB), rax)?;
    a.mov(rax, ROW)?;
    a.imul_2(rax, qword_ptr(rsp + S_ROWOUT))?;
    a.add(rax, qword_ptr(ARGS + offsets::Y))?;
    a.mov(rdx, qword_ptr(rsp + S_P))?;
    a.shl(rdx, 6)?;
    a.add(rax, rdx)?;
    a.mov(qword_ptr(rsp + S_YROW), rax)?;
    Ok(())
}

/// `k = (1 << min(n, 16)) − 1` for `n` in rdx (clobbers rcx, rax).
fn lane_mask(
    e: &mut Emitter,
    k: weft_x64::iced_x86::code_asm::AsmRegisterK,
) -> Result<(), EmitError> {
    let a = e.asm();
    a.mov(ecx, 16)?;
    a.cmp(rdx, rcx)?;
    a.cmova(rdx, rcx)?;
    a.mov(ecx, edx)?;
    a.mov(eax, 1)?;
    a.shl(eax, cl)?;
    a.dec(eax)?;
    a.kmovw(k, eax)?;
    Ok(())
}

/// The panel `S_P`'s pointers and masks: `S_WPANEL`, `S_BIASP`,
/// `S_XPANEL`; k3 the channels below cout, k1 and k2 the x lanes of the
/// panel's existing groups (first and second load).
fn panel_setup(e: &mut Emitter) -> Result<(), EmitError> {
    let a = e.asm();
    a.mov(rax, qword_ptr(rsp + S_P))?;
    a.imul_2(rax, qword_ptr(rsp + S_PSTRIDE))?;
    a.add(rax, qword_ptr(rsp + S_WB))?;
    a.mov(qword_ptr(rsp + S_WPANEL), rax)?;
    a.mov(rax, qword_ptr(rsp + S_P))?;
    a.shl(rax, 6)?;
    a.add(rax, qword_ptr(ARGS + offsets::FILT))?;
    a.mov(qword_ptr(rsp + S_BIASP), rax)?;
    a.mov(rax, qword_ptr(rsp + S_P))?;
    a.imul_2(rax, qword_ptr(rsp + S_XSTEP))?;
    a.mov(qword_ptr(rsp + S_XPANEL), rax)?;
    // lanes = min(cout − 16p, 16) → k3; groups = ⌈lanes / cout_g⌉.
    a.mov(rdx, qword_ptr(rsp + S_P))?;
    a.shl(rdx, 4)?;
    a.neg(rdx)?;
    a.add(rdx, qword_ptr(ARGS + offsets::COUT))?;
    a.mov(r13, rdx)?;
    lane_mask(e, k3)?;
    let a = e.asm();
    a.mov(rdx, r13)?;
    a.cmp(rdx, 16)?;
    let mut ok = e.create_label();
    e.asm().jbe(ok)?;
    e.asm().mov(edx, 16)?;
    land(e, &mut ok)?;
    let a = e.asm();
    a.add(rdx, qword_ptr(ARGS + offsets::COUT_G))?;
    a.dec(rdx)?;
    a.mov(rcx, qword_ptr(rsp + S_SH))?;
    a.shr(rdx, cl)?;
    a.imul_2(rdx, qword_ptr(ARGS + offsets::CIN_G))?;
    a.mov(r13, rdx)?;
    lane_mask(e, k1)?;
    // The second load: lanes n − 16 (none when n ≤ 16).
    let a = e.asm();
    a.mov(rdx, r13)?;
    a.sub(rdx, 16)?;
    a.mov(eax, 0)?;
    a.cmovb(rdx, rax)?;
    lane_mask(e, k2)
}

/// One body (one or two loads a tap): panels, rows, tiles.
fn body(e: &mut Emitter, two: bool) -> Result<(), EmitError> {
    e.asm().mov(qword_ptr(rsp + S_P), 0)?;
    while_loop(
        e,
        |e, done| {
            e.asm().mov(rax, qword_ptr(rsp + S_P))?;
            e.asm().cmp(rax, qword_ptr(rsp + S_PANELS))?;
            e.asm().jae(done)?;
            Ok(())
        },
        |e| {
            panel_setup(e)?;
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
                    e.asm().xor(OW, OW)?;
                    while_loop(
                        e,
                        |e, done| {
                            e.asm().cmp(OW, qword_ptr(ARGS + offsets::OW_LO))?;
                            e.asm().jae(done)?;
                            Ok(())
                        },
                        |e| {
                            tile(e, 1, true, two)?;
                            e.asm().inc(OW)?;
                            Ok(())
                        },
                    )?;
                    let fits = |e: &mut Emitter, h: usize, skip: CodeLabel| {
                        e.asm().lea(rax, ptr(OW + h as i32))?;
                        e.asm().cmp(rax, qword_ptr(ARGS + offsets::OW_HI))?;
                        e.asm().ja(skip)?;
                        Ok::<(), EmitError>(())
                    };
                    while_loop(
                        e,
                        |e, done| fits(e, TILE, done),
                        |e| {
                            tile(e, TILE, false, two)?;
                            e.asm().add(OW, TILE as i32)?;
                            Ok(())
                        },
                    )?;
                    for h in LEFTOVERS {
                        let mut skip = e.create_label();
                        fits(e, h, skip)?;
                        tile(e, h, false, two)?;
                        e.asm().add(OW, h as i32)?;
                        land(e, &mut skip)?;
                    }
                    while_loop(
                        e,
                        |e, done| {
                            e.asm().cmp(OW, qword_ptr(ARGS + offsets::OUT_W))?;
                            e.asm().jae(done)?;
                            Ok(())
                        },
                        |e| {
                            tile(e, 1, true, two)?;
                            e.asm().inc(OW)?;
                            Ok(())
                        },
                    )?;
                    e.asm().inc(ROW)?;
                    Ok(())
                },
            )?;
            e.asm().add(qword_ptr(rsp + S_P), 1)?;
            Ok(())
        },
    )
}

/// Both tiers' entry: the frame (`frame` bytes, the vector registers of
/// the tier declared), `ARGS`, and the sizes every body reads from the
/// stack (`S_PIXIN` … `S_XSTEP`); leaves `sh = log2 cout_g` in rcx.
fn enter(abi: Abi, avx512: bool, frame: i32) -> Result<Emitter, EmitError> {
    let mut e = crate::twin_x64::open(abi, avx512)?;
    let a = e.asm();
    a.sub(rsp, frame)?;
    crate::twin_x64::input_sizes(a)?;
    a.mov(rax, qword_ptr(ARGS + offsets::CIN_G))?;
    a.shl(rax, 6)?;
    a.mov(qword_ptr(rsp + S_TAPB), rax)?;
    a.imul_2(rax, qword_ptr(ARGS + offsets::K_H))?;
    a.imul_2(rax, qword_ptr(ARGS + offsets::K_W))?;
    a.mov(qword_ptr(rsp + S_PSTRIDE), rax)?;
    a.mov(rax, qword_ptr(ARGS + offsets::COUT))?;
    a.shl(rax, 2)?;
    a.mov(qword_ptr(rsp + S_PIXOUT), rax)?;
    a.imul_2(rax, qword_ptr(ARGS + offsets::OUT_W))?;
    a.mov(qword_ptr(rsp + S_ROWOUT), rax)?;
    // panels = ⌈cout / 16⌉; the weights after the bias lines.
    a.mov(rax, qword_ptr(ARGS + offsets::COUT))?;
    a.add(rax, 15)?;
    a.shr(rax, 4)?;
    a.mov(qword_ptr(rsp + S_PANELS), rax)?;
    a.shl(rax, 6)?;
    a.add(rax, qword_ptr(ARGS + offsets::FILT))?;
    a.mov(qword_ptr(rsp + S_WB), rax)?;
    // sh = log2 cout_g; a panel's x channels: (16 >> sh) · cin_g.
    a.bsf(rcx, qword_ptr(ARGS + offsets::COUT_G))?;
    a.mov(qword_ptr(rsp + S_SH), rcx)?;
    a.mov(eax, 16)?;
    a.shr(eax, cl)?;
    a.imul_2(rax, qword_ptr(ARGS + offsets::CIN_G))?;
    a.shl(rax, 2)?;
    a.mov(qword_ptr(rsp + S_XSTEP), rax)?;
    Ok(e)
}

fn emit(abi: Abi) -> Result<weft_x64::Emitted, EmitError> {
    let mut e = enter(abi, true, FRAME)?;
    {
        let a = e.asm();
        // The panel's input channels (full panel).
        a.mov(r13, qword_ptr(rsp + S_XSTEP))?;
        a.shr(r13, 2)?;
        // The index line of ci = 0: (l >> sh) · cin_g.
        a.mov(rdx, qword_ptr(ARGS + offsets::CIN_G))?;
        for l in 0..16 {
            a.mov(eax, l as u32)?;
            a.shr(eax, cl)?;
            a.imul_2(eax, edx)?;
            a.mov(
                weft_x64::iced_x86::code_asm::dword_ptr(rsp + S_IDX + 4 * l),
                eax,
            )?;
        }
        a.mov(eax, 1)?;
        a.vpbroadcastd(ZMM[ONES], eax)?;
        // The pixel step of a tile: stride · cin · 4.
        a.mov(rax, qword_ptr(rsp + S_PIXIN))?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::STRIDE))?;
        a.mov(XS, rax)?;
        a.lea(XS3, ptr(XS + XS * 2))?;
    }
    let mut two = e.create_label();
    let mut end = e.create_label();
    e.asm().cmp(r13, 16)?;
    e.asm().ja(two)?;
    body(&mut e, false)?;
    e.asm().jmp(end)?;
    land(&mut e, &mut two)?;
    body(&mut e, true)?;
    land(&mut e, &mut end)?;
    crate::silu::x64_pass(&mut e, true, ARGS)?;
    e.asm().add(rsp, FRAME)?;
    e.epilogue()?;
    e.finish()
}

// ---------------------------------------------------------------------
// The AVX2 + FMA twin.
// ---------------------------------------------------------------------

/// The AVX2 twin's name.
pub const AVX2_NAME: &str = "conv.direct.grouped.twin.avx2.2x16";

const AVX2_FEATURES: &[Feature] = &[Feature::Avx, Feature::Avx2, Feature::Fma];

/// The AVX2 twin: a panel is two ymm halves of 8 lanes, half `h` holding
/// the groups from `g0 + 8h / cout_g`, whose `n_h = (8 / cout_g) · cin_g`
/// input channels are loaded once a tap (`vmaskmovps`, masked to the
/// half's existing groups) and permuted per `ci` with `vpermps`; when
/// `n_h > 8` two loads a half, both permuted and blended by the index's
/// bit 3 (`vblendvps`). Tiles: 2 pixels (one load a half) or 1 (two),
/// the borders one pixel at a time with column checks, as the AVX-512
/// twin; a test at entry picks the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupedAvx2 {
    abi: Abi,
}

impl GroupedAvx2 {
    /// For the host's calling convention.
    pub const fn new() -> GroupedAvx2 {
        GroupedAvx2 { abi: Abi::host() }
    }

    /// For another calling convention.
    pub const fn with_abi(abi: Abi) -> GroupedAvx2 {
        GroupedAvx2 { abi }
    }
}

impl Default for GroupedAvx2 {
    fn default() -> Self {
        GroupedAvx2::new()
    }
}

// SAFETY: as for the AVX-512 twin: x read only at taps inside the input
// and only the half's existing groups' channels (vmaskmovps: masked-off
// lanes never fault), the packed filter's lines, y written only in its
// rows and channels below cout (vmaskmovps stores); it returns normally.
// Validation checks it against the arm.
unsafe impl Twin for GroupedAvx2 {
    fn name(&self) -> &'static str {
        AVX2_NAME
    }

    fn isa(&self) -> Isa {
        Isa::X86_64
    }

    fn requires(&self) -> &'static [Feature] {
        AVX2_FEATURES
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        check_offer(AVX2_NAME, offer)?;
        crate::twin_x64::native(AVX2_NAME, emit_avx2(self.abi))
    }

    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        match ConvGeometry::from_geometry(&offer.contract.geometry) {
            Ok((g, s)) => crate::silu::after(nest_avx2(&g, &s), &g, &s, 8, false),
            Err(_) => offer.loops.clone(),
        }
    }
}

/// Whether a call at `g` takes the AVX2 twin's two-load body.
pub fn two_loads_avx2(g: &ConvGeometry) -> bool {
    let groups = g.groups.max(1);
    let cout_g = (g.cout / groups).max(1);
    (8 / cout_g).max(1) * (g.cin / groups) > 8
}

/// The AVX2 twin's nest: the one-load body (tiles of 2), then the
/// two-load one (tiles of 1), the one not taken with zero trips.
pub fn nest_avx2(g: &ConvGeometry, s: &Shape) -> Vec<LoopTrip> {
    let two = two_loads_avx2(g);
    let mut out = Vec::new();
    for body in [false, true] {
        let on = u64::from(body == two);
        let width = if body { 1 } else { 2 };
        out.push(trip("panels", on * panels(g), 0));
        out.push(trip("rows", g.batch * s.out_h, 1));
        let tiles = (s.ow_hi - s.ow_lo) / width;
        for (name, trips) in [
            ("left", s.ow_lo),
            ("tiles", tiles),
            ("rest", s.out_w - s.ow_lo - tiles * width),
        ] {
            out.push(trip(name, trips, 2));
            out.push(trip("kh", g.k_h, 3));
            out.push(trip("kw", g.k_w, 4));
            out.push(trip("ci", g.cin / g.groups, 5));
        }
    }
    out
}

use weft_x64::iced_x86::code_asm::r11;
use weft_x64::regs::{XMM, YMM};

/// x offset of half 1 from half 0 (`(8 >> sh) · cin_g · 4` bytes).
const S_XHALF: i32 = 160;
/// 0 … 7, for the lane masks.
const S_IOTA: i32 = 256;
/// The panel's masks: x loads (half 0 first load, half 0 second, half 1
/// first, half 1 second), then the stores of half 0 and 1.
const S_MASKS: i32 = 320;
const FRAME2: i32 = 576;

/// The ymm mask of lanes `l < rdx` (rdx clamped to 0..8 by the caller's
/// arithmetic being anything: clamped here) into the stack at `slot`.
/// Clobbers rdx, ymm15.
fn ymm_mask(e: &mut Emitter, slot: i32) -> Result<(), EmitError> {
    let a = e.asm();
    // rdx as a signed count: ≤ 0 keeps none, ≥ 8 all.
    a.vmovd(XMM[15], edx)?;
    a.vpbroadcastd(YMM[15], XMM[15])?;
    a.vpcmpgtd(YMM[15], YMM[15], ptr(rsp + S_IOTA))?;
    a.vmovups(ptr(rsp + slot), YMM[15])?;
    Ok(())
}

/// The panel `S_P`'s pointers and masks (AVX2): `S_WPANEL`, `S_BIASP`,
/// `S_XPANEL`, and the six masks of `S_MASKS`.
fn panel_setup_avx2(e: &mut Emitter) -> Result<(), EmitError> {
    let a = e.asm();
    a.mov(rax, qword_ptr(rsp + S_P))?;
    a.imul_2(rax, qword_ptr(rsp + S_PSTRIDE))?;
    a.add(rax, qword_ptr(rsp + S_WB))?;
    a.mov(qword_ptr(rsp + S_WPANEL), rax)?;
    a.mov(rax, qword_ptr(rsp + S_P))?;
    a.shl(rax, 6)?;
    a.add(rax, qword_ptr(ARGS + offsets::FILT))?;
    a.mov(qword_ptr(rsp + S_BIASP), rax)?;
    a.mov(rax, qword_ptr(rsp + S_P))?;
    a.imul_2(rax, qword_ptr(rsp + S_XSTEP))?;
    a.mov(qword_ptr(rsp + S_XPANEL), rax)?;
    // lanes = min(cout − 16p, 16) in r13.
    a.mov(r13, qword_ptr(rsp + S_P))?;
    a.shl(r13, 4)?;
    a.neg(r13)?;
    a.add(r13, qword_ptr(ARGS + offsets::COUT))?;
    a.mov(eax, 16)?;
    a.cmp(r13, rax)?;
    a.cmova(r13, rax)?;
    // Stores: half 0 keeps lanes < lanes, half 1 lanes < lanes − 8.
    a.mov(rdx, r13)?;
    ymm_mask(e, S_MASKS + 128)?;
    e.asm().lea(rdx, ptr(r13 - 8))?;
    ymm_mask(e, S_MASKS + 160)?;
    // Groups of the panel: ng = ⌈lanes / cout_g⌉; half h's groups start
    // at gh = (8h) >> sh, so it has ng − gh of them (≤ 0: none), and
    // (ng − gh) · cin_g channels: loads of lanes < n and < n − 8.
    let a = e.asm();
    a.mov(rax, r13)?;
    a.add(rax, qword_ptr(ARGS + offsets::COUT_G))?;
    a.dec(rax)?;
    a.mov(rcx, qword_ptr(rsp + S_SH))?;
    a.shr(rax, cl)?;
    a.mov(r13, rax)?; // ng
    for h in 0..2i32 {
        let a = e.asm();
        a.mov(eax, 8 * h as u32)?;
        a.mov(rcx, qword_ptr(rsp + S_SH))?;
        a.shr(eax, cl)?;
        a.mov(rdx, r13)?;
        a.sub(rdx, rax)?;
        a.imul_2(rdx, qword_ptr(ARGS + offsets::CIN_G))?;
        a.mov(r11, rdx)?;
        ymm_mask(e, S_MASKS + 64 * h)?;
        e.asm().lea(rdx, ptr(r11 - 8))?;
        ymm_mask(e, S_MASKS + 64 * h + 32)?;
    }
    Ok(())
}

/// The epilogue on ymm `accs` (ymm 14 and 15 free).
fn epilogue_avx2(e: &mut Emitter, accs: &[usize]) -> Result<(), EmitError> {
    let (zero, six) = (14, 15);
    let mut done = e.create_label();
    let a = e.asm();
    a.cmp(qword_ptr(ARGS + offsets::ACT), 0)?;
    a.je(done)?;
    // SiLU is the pass after the tiles (crate::silu).
    a.cmp(qword_ptr(ARGS + offsets::ACT), crate::silu::CODE as i32)?;
    a.je(done)?;
    a.vxorps(YMM[zero], YMM[zero], YMM[zero])?;
    for &r in accs {
        a.vmaxps(YMM[r], YMM[zero], YMM[r])?;
    }
    a.cmp(
        qword_ptr(ARGS + offsets::ACT),
        crate::Activation::Relu6 as i32,
    )?;
    a.jne(done)?;
    a.mov(eax, 6.0f32.to_bits())?;
    a.vmovd(XMM[six], eax)?;
    a.vbroadcastss(YMM[six], XMM[six])?;
    for &r in accs {
        a.vminps(YMM[r], YMM[six], YMM[r])?;
    }
    land(e, &mut done)
}

/// One AVX2 tile: `pixels` (1 or 2; 1 when `two`) from column `OW`.
///
/// One load a half: acc(r, h) = 2r + h, x(r, h) = 4 + 2r + h, index 8,
/// ones 9, temporaries 10–11, mask 12, weights 13. Two loads: acc h,
/// first loads 2 + h, second 4 + h, index 8, ones 9, the high-half
/// selector 10, temporaries 11–12, mask 13.
fn tile_avx2(e: &mut Emitter, pixels: usize, checked: bool, two: bool) -> Result<(), EmitError> {
    let acc = |r: usize, h: usize| if two { h } else { 2 * r + h };
    e.asm().mov(rax, qword_ptr(rsp + S_BIASP))?;
    for r in 0..pixels {
        for h in 0..2 {
            e.asm().vmovups(YMM[acc(r, h)], ptr(rax + 32 * h as i32))?;
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
        // Pixel r half h at PXH[r][h].
        a.mov(rbp, rax)?;
        a.mov(rdx, rax)?;
        a.add(rdx, qword_ptr(rsp + S_XHALF))?;
        if pixels > 1 {
            a.lea(r10, ptr(rbp + XS))?;
            a.lea(r11, ptr(rdx + XS))?;
        }
        a.mov(rax, KH)?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::K_W))?;
        a.add(rax, KW)?;
        a.imul_2(rax, qword_ptr(rsp + S_TAPB))?;
        a.add(rax, qword_ptr(rsp + S_WPANEL))?;
        a.mov(PW, rax)?;
        let base = |r: usize, h: usize| [[rbp, rdx], [r10, r11]][r][h];
        let mreg = if two { 13 } else { 12 };
        for h in 0..2 {
            a.vmovups(YMM[mreg], ptr(rsp + S_MASKS + 64 * h as i32))?;
            for r in 0..pixels {
                let dst = if two { 2 + h } else { 4 + 2 * r + h };
                a.vmaskmovps(YMM[dst], YMM[mreg], ptr(base(r, h)))?;
            }
            if two {
                a.vmovups(YMM[mreg], ptr(rsp + S_MASKS + 64 * h as i32 + 32))?;
                a.vmaskmovps(YMM[4 + h], YMM[mreg], ptr(base(0, h) + 32))?;
            }
        }
        a.vmovdqu(YMM[8], ptr(rsp + S_IDX))?;
        a.mov(rcx, qword_ptr(ARGS + offsets::CIN_G))?;
        let mut ci = e.create_label();
        e.set_label(&mut ci)?;
        let a = e.asm();
        if two {
            // Lanes whose index is ≥ 8 take the second load.
            a.vpslld(YMM[10], YMM[8], 28)?;
            for h in 0..2 {
                a.vpermps(YMM[11], YMM[8], YMM[2 + h])?;
                a.vpermps(YMM[12], YMM[8], YMM[4 + h])?;
                a.vblendvps(YMM[11], YMM[11], YMM[12], YMM[10])?;
                a.vfmadd231ps(YMM[h], YMM[11], ptr(PW + 32 * h as i32))?;
            }
        } else {
            for h in 0..2 {
                a.vmovups(YMM[13], ptr(PW + 32 * h as i32))?;
                for r in 0..pixels {
                    let t = 10 + r;
                    a.vpermps(YMM[t], YMM[8], YMM[4 + 2 * r + h])?;
                    a.vfmadd231ps(YMM[acc(r, h)], YMM[t], YMM[13])?;
                }
            }
        }
        a.vpaddd(YMM[8], YMM[8], YMM[9])?;
        a.add(PW, 64)?;
        a.dec(rcx)?;
        a.jne(ci)?;
        Ok(())
    })?;
    let accs: Vec<usize> = (0..pixels)
        .flat_map(|r| (0..2).map(move |h| acc(r, h)))
        .collect();
    epilogue_avx2(e, &accs)?;
    let a = e.asm();
    a.vmovups(YMM[12], ptr(rsp + S_MASKS + 128))?;
    a.vmovups(YMM[13], ptr(rsp + S_MASKS + 160))?;
    a.mov(rax, OW)?;
    a.imul_2(rax, qword_ptr(rsp + S_PIXOUT))?;
    a.add(rax, qword_ptr(rsp + S_YROW))?;
    a.mov(rdx, qword_ptr(rsp + S_PIXOUT))?;
    for r in 0..pixels {
        for h in 0..2 {
            a.vmaskmovps(ptr(rax + 32 * h as i32), YMM[12 + h], YMM[acc(r, h)])?;
        }
        if r + 1 < pixels {
            a.add(rax, rdx)?;
        }
    }
    Ok(())
}

/// One AVX2 body: panels, rows, tiles of `width` (2, or 1 when `two`).
fn body_avx2(e: &mut Emitter, two: bool) -> Result<(), EmitError> {
    let width = if two { 1 } else { 2 };
    e.asm().mov(qword_ptr(rsp + S_P), 0)?;
    while_loop(
        e,
        |e, done| {
            e.asm().mov(rax, qword_ptr(rsp + S_P))?;
            e.asm().cmp(rax, qword_ptr(rsp + S_PANELS))?;
            e.asm().jae(done)?;
            Ok(())
        },
        |e| {
            panel_setup_avx2(e)?;
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
                    e.asm().xor(OW, OW)?;
                    while_loop(
                        e,
                        |e, done| {
                            e.asm().cmp(OW, qword_ptr(ARGS + offsets::OW_LO))?;
                            e.asm().jae(done)?;
                            Ok(())
                        },
                        |e| {
                            tile_avx2(e, 1, true, two)?;
                            e.asm().inc(OW)?;
                            Ok(())
                        },
                    )?;
                    while_loop(
                        e,
                        |e, done| {
                            e.asm().lea(rax, ptr(OW + width as i32))?;
                            e.asm().cmp(rax, qword_ptr(ARGS + offsets::OW_HI))?;
                            e.asm().ja(done)?;
                            Ok(())
                        },
                        |e| {
                            tile_avx2(e, width, false, two)?;
                            e.asm().add(OW, width as i32)?;
                            Ok(())
                        },
                    )?;
                    while_loop(
                        e,
                        |e, done| {
                            e.asm().cmp(OW, qword_ptr(ARGS + offsets::OUT_W))?;
                            e.asm().jae(done)?;
                            Ok(())
                        },
                        |e| {
                            tile_avx2(e, 1, true, two)?;
                            e.asm().inc(OW)?;
                            Ok(())
                        },
                    )?;
                    e.asm().inc(ROW)?;
                    Ok(())
                },
            )?;
            e.asm().add(qword_ptr(rsp + S_P), 1)?;
            Ok(())
        },
    )
}

fn emit_avx2(abi: Abi) -> Result<weft_x64::Emitted, EmitError> {
    let mut e = enter(abi, false, FRAME2)?;
    {
        let a = e.asm();
        a.mov(eax, 8)?;
        a.shr(eax, cl)?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::CIN_G))?;
        a.mov(r13, rax)?; // a half's input channels (full panel)
        a.shl(rax, 2)?;
        a.mov(qword_ptr(rsp + S_XHALF), rax)?;
        a.mov(rdx, qword_ptr(ARGS + offsets::CIN_G))?;
        for l in 0..8 {
            a.mov(eax, l as u32)?;
            a.shr(eax, cl)?;
            a.imul_2(eax, edx)?;
            a.mov(
                weft_x64::iced_x86::code_asm::dword_ptr(rsp + S_IDX + 4 * l),
                eax,
            )?;
            a.mov(
                weft_x64::iced_x86::code_asm::dword_ptr(rsp + S_IOTA + 4 * l),
                l as u32,
            )?;
        }
        a.mov(eax, 1)?;
        a.vmovd(XMM[9], eax)?;
        a.vpbroadcastd(YMM[9], XMM[9])?;
        a.mov(rax, qword_ptr(rsp + S_PIXIN))?;
        a.imul_2(rax, qword_ptr(ARGS + offsets::STRIDE))?;
        a.mov(XS, rax)?;
    }
    let mut two = e.create_label();
    let mut end = e.create_label();
    e.asm().cmp(r13, 8)?;
    e.asm().ja(two)?;
    body_avx2(&mut e, false)?;
    e.asm().jmp(end)?;
    land(&mut e, &mut two)?;
    body_avx2(&mut e, true)?;
    land(&mut e, &mut end)?;
    crate::silu::x64_pass(&mut e, false, ARGS)?;
    e.asm().add(rsp, FRAME2)?;
    e.epilogue()?;
    e.finish()
}
