//! x64 twins of `q8_0.quantize`: the arm's offer, the body emitted through
//! weft-x64. One loop over flat blocks; per block:
//!
//! - **amax**: `vandps` with `0x7fffffff` and a `vmaxps` tree (exact when
//!   no lane is NaN: the maximum of non-NaN values is order-free). Any NaN
//!   lane (`vcmpps unord`) sends the block to an out-of-line path that
//!   folds the 32 values left to right with `vmaxss amax, amax, |x_i|`,
//!   which *is* C's `MAX(amax, a) = amax > a ? amax : a` (`maxss` returns
//!   its second operand when either is NaN or they are equal).
//! - **scale**: `vdivss` by 127, `id = 1/d` masked by `vcmpss neq_uq`
//!   (true for NaN), and `vcvtps2ph` with immediate 0 (round to nearest
//!   even, whatever MXCSR says) for the stored binary16.
//! - **quants**: `y = x · id`; NaN lanes to 0 (`cmp ord`), clamp to ±127
//!   (`roundf` is monotone); truncate (`vroundps`/`vrndscaleps` mode 3) and
//!   add `copysign(1, y)` where `|y - trunc(y)| ≥ 0.5`: `roundf`, exactly.
//!   AVX-512 narrows with `vpmovsdb` straight to memory; AVX2 packs with
//!   `vpackssdw`/`vpacksswb` and restores the order with `vpermd`.
//!
//! Loads and stores are unaligned; only `x[32k..32k+32]` and
//! `out[34k..34k+34]` of the blocks in range are touched. Frame: SysV or
//! Win64 ([`QuantizeX64::with_abi`]); constants are built in registers.

use weft_kernel::{Feature, Isa, LoopAnnotation, NativeCode, Offer, Refusal, Twin};
use weft_x64::iced_x86::code_asm::{
    ax, dword_ptr, eax, k1, k2, k3, qword_ptr, r8, r9, rax, rcx, rdx, rsi, word_ptr, xmmword_ptr,
    ymmword_ptr, zmmword_ptr, AsmRegister64,
};
use weft_x64::regs::{XMM, YMM, ZMM};
use weft_x64::{Abi, Clobbers, EmitError, Emitter};

use super::super::{BLOCK_BYTES, BLOCK_LEN};
use super::{dims, offsets, ARGS_NAME, FAMILY};

/// Which instruction set a twin is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// AVX2 + F16C, four ymm per block.
    Avx2,
    /// AVX-512 F (+VL for the xmm/ymm EVEX forms), two zmm per block.
    Avx512,
}

/// One x64 twin of the `q8_0.quantize` arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QuantizeX64 {
    tier: Tier,
    abi: Abi,
}

/// Every x64 twin of the family.
pub const TWINS: [QuantizeX64; 2] = [QuantizeX64::new(Tier::Avx2), QuantizeX64::new(Tier::Avx512)];

const AVX2_FEATURES: &[Feature] = &[Feature::Avx, Feature::Avx2, Feature::F16c];
const AVX512_FEATURES: &[Feature] = &[
    Feature::Avx,
    Feature::Avx2,
    Feature::F16c,
    Feature::Avx512f,
    Feature::Avx512vl,
];

impl QuantizeX64 {
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

    /// The body and the offsets of its block loop (head, back edge).
    pub fn emit_body(&self) -> Result<(weft_x64::Emitted, (usize, usize)), Refusal> {
        emit(self.tier, self.abi).map_err(|e| Refusal::EmitError {
            message: format!("{}: {e}", self.name()),
        })
    }
}

// SAFETY: the body reads and writes only what the arguments' extents name
// and returns normally (module docs); validation checks its results.
unsafe impl Twin for QuantizeX64 {
    fn name(&self) -> &'static str {
        match self.tier {
            Tier::Avx2 => "q8_0.quantize.twin.avx2",
            Tier::Avx512 => "q8_0.quantize.twin.avx512",
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
        dims(&offer.contract.geometry)?;
        let (emitted, (head, back_edge)) = self.emit_body()?;
        Ok(NativeCode {
            isa: Isa::X86_64,
            pool: None,
            bytes: emitted.bytes,
            loops: vec![LoopAnnotation {
                name: "blocks".to_owned(),
                head,
                back_edge,
            }],
        })
    }

    // The nest is the arm's (one loop over the blocks); the NaN fold is
    // straight-line code.
}

// ---------------------------------------------------------------- body ---

// GPRs (all caller-saved in SysV; Win64 saves rsi, which the frame does).
const PX: AsmRegister64 = rsi;
const PO: AsmRegister64 = rdx;
const COUNT: AsmRegister64 = rcx;
const ARGS: AsmRegister64 = r8;

/// Predicates of `vcmpps`/`vcmpss`.
const CMP_UNORD_Q: i32 = 3;
const CMP_NEQ_UQ: i32 = 4;
const CMP_ORD_Q: i32 = 7;
const CMP_GE_OQ: i32 = 0x1d;
/// `vroundps`/`vrndscaleps`: toward zero, no precision exception.
const ROUND_TRUNC: i32 = 0x0b;

/// Vector registers: data, constants, temporaries.
struct Regs {
    /// The block's values (AVX2: 4 ymm, AVX-512: 2 zmm), then its quants.
    v: [usize; 4],
    abs: usize,
    c127: usize,
    cm127: usize,
    half: usize,
    one: usize,
    /// AVX2: the `vpermd` order after the packs.
    perm: usize,
    zero: usize,
    t: [usize; 5],
}

impl Regs {
    fn of(tier: Tier) -> Regs {
        match tier {
            Tier::Avx2 => Regs {
                v: [0, 1, 2, 3],
                abs: 4,
                c127: 5,
                cm127: 6,
                half: 7,
                one: 8,
                perm: 9,
                zero: 10,
                t: [11, 12, 13, 14, 15],
            },
            // Upper registers: nothing for Win64 to save.
            Tier::Avx512 => Regs {
                v: [16, 17, 18, 19],
                abs: 20,
                c127: 21,
                cm127: 22,
                half: 23,
                one: 24,
                perm: 25,
                zero: 26,
                t: [27, 28, 29, 30, 31],
            },
        }
    }
}

fn emit(tier: Tier, abi: Abi) -> Result<(weft_x64::Emitted, (usize, usize)), EmitError> {
    let g = Regs::of(tier);
    let mut e = Emitter::new(abi)?;
    let mut clobbers = Clobbers::none().with(rsi);
    for z in ZMM {
        clobbers = clobbers.with(z);
    }
    e.prologue(clobbers)?;
    let from = e.args_reg();
    e.asm().mov(ARGS, from)?;
    let mut head = e.create_label();
    let mut back = e.create_label();
    let mut done = e.create_label();
    let mut slow = e.create_label();
    let mut merge = e.create_label();
    let mut run = |e: &mut Emitter| -> Result<(), EmitError> {
        let a = e.asm();
        a.mov(PX, qword_ptr(ARGS + offsets::X))?;
        a.mov(PO, qword_ptr(ARGS + offsets::OUT))?;
        a.mov(rax, qword_ptr(ARGS + offsets::BLOCK_START))?;
        a.mov(COUNT, qword_ptr(ARGS + offsets::BLOCK_END))?;
        a.sub(COUNT, rax)?;
        a.jbe(done)?;
        // px = x + 128·start, po = out + 34·start.
        a.imul_3(r9, rax, BLOCK_BYTES as i32)?;
        a.add(PO, r9)?;
        a.shl(rax, 7)?;
        a.add(PX, rax)?;
        let avx512 = tier == Tier::Avx512;
        let vreg = |n: usize| -> weft_x64::VectorReg {
            if avx512 {
                ZMM[n].into()
            } else {
                YMM[n].into()
            }
        };
        e.broadcast_i32(vreg(g.abs), 0x7fff_ffff)?;
        e.broadcast_f32(vreg(g.c127), 127.0)?;
        e.broadcast_f32(vreg(g.cm127), -127.0)?;
        e.broadcast_f32(vreg(g.half), 0.5)?;
        e.broadcast_f32(vreg(g.one), 1.0)?;
        e.broadcast_f32(vreg(g.zero), 0.0)?;
        if !avx512 {
            // dword order [0, 4, 1, 5, 2, 6, 3, 7] (see `quants_avx2`).
            let a = e.asm();
            a.mov(rax, 0x0703_0602_0501_0400u64)?;
            a.vmovq(XMM[g.perm], rax)?;
            a.vpmovzxbd(YMM[g.perm], XMM[g.perm])?;
        }
        e.set_label(&mut head)?;
        let amax = g.t[4];
        match tier {
            Tier::Avx512 => amax_avx512(e, &g, slow)?,
            Tier::Avx2 => amax_avx2(e, &g, slow)?,
        }
        e.set_label(&mut merge)?;
        scale(e, &g, amax)?;
        match tier {
            Tier::Avx512 => quants_avx512(e, &g)?,
            Tier::Avx2 => quants_avx2(e, &g)?,
        }
        let a = e.asm();
        a.add(PX, (BLOCK_LEN * 4) as i32)?;
        a.add(PO, BLOCK_BYTES as i32)?;
        a.dec(COUNT)?;
        e.set_label(&mut back)?;
        e.asm().jne(head)?;
        e.set_label(&mut done)?;
        Ok(())
    };
    if tier == Tier::Avx512 {
        e.evex(run)?;
    } else {
        run(&mut e)?;
    }
    e.epilogue()?;
    // Out of line: a block with a NaN folds left to right, then rejoins.
    e.set_label(&mut slow)?;
    let amax = XMM[g.t[4]];
    let t = XMM[g.t[0]];
    let abs = XMM[g.abs];
    let body = |e: &mut Emitter| -> Result<(), EmitError> {
        let a = e.asm();
        // AVX-512F has no EVEX `vandps`/`vxorps` (those are DQ): integer forms.
        if tier == Tier::Avx512 {
            a.vpxord(amax, amax, amax)?;
        } else {
            a.vxorps(amax, amax, amax)?;
        }
        for i in 0..BLOCK_LEN as i32 {
            a.vmovss(t, dword_ptr(PX + 4 * i))?;
            if tier == Tier::Avx512 {
                a.vpandd(t, t, abs)?;
            } else {
                a.vandps(t, t, abs)?;
            }
            a.vmaxss(amax, amax, t)?;
        }
        a.jmp(merge)?;
        Ok(())
    };
    if tier == Tier::Avx512 {
        e.evex(body)?;
    } else {
        body(&mut e)?;
    }
    let emitted = e.finish()?;
    let offsets = match (emitted.label_offset(&head), emitted.label_offset(&back)) {
        (Some(h), Some(b)) => (h, b),
        _ => {
            return Err(EmitError::FrameOrder {
                problem: "the block loop's labels were not placed",
            })
        }
    };
    Ok((emitted, offsets))
}

/// AVX-512: the block's two zmm, NaN test (to `slow`), `|x|` maximum into
/// xmm `t[4]`.
fn amax_avx512(
    e: &mut Emitter,
    g: &Regs,
    slow: weft_x64::iced_x86::code_asm::CodeLabel,
) -> Result<(), EmitError> {
    let a = e.asm();
    let [v0, v1, ..] = g.v;
    let [t0, t1, _, _, m] = g.t;
    a.vmovups(ZMM[v0], zmmword_ptr(PX))?;
    a.vmovups(ZMM[v1], zmmword_ptr(PX + 64))?;
    a.vcmpps(k1, ZMM[v0], ZMM[v1], CMP_UNORD_Q)?;
    a.kortestw(k1, k1)?;
    a.jne(slow)?;
    a.vpandd(ZMM[t0], ZMM[v0], ZMM[g.abs])?;
    a.vpandd(ZMM[t1], ZMM[v1], ZMM[g.abs])?;
    a.vmaxps(ZMM[t0], ZMM[t0], ZMM[t1])?;
    a.vextractf64x4(YMM[t1], ZMM[t0], 1)?;
    a.vmaxps(YMM[t0], YMM[t0], YMM[t1])?;
    a.vextractf32x4(XMM[t1], YMM[t0], 1)?;
    a.vmaxps(XMM[t0], XMM[t0], XMM[t1])?;
    a.vmovhlps(XMM[t1], XMM[t1], XMM[t0])?;
    a.vmaxps(XMM[t0], XMM[t0], XMM[t1])?;
    a.vmovshdup(XMM[t1], XMM[t0])?;
    a.vmaxss(XMM[m], XMM[t0], XMM[t1])?;
    Ok(())
}

/// AVX2: the block's four ymm, NaN test (to `slow`), `|x|` maximum into
/// xmm `t[4]`.
fn amax_avx2(
    e: &mut Emitter,
    g: &Regs,
    slow: weft_x64::iced_x86::code_asm::CodeLabel,
) -> Result<(), EmitError> {
    let a = e.asm();
    let [t0, t1, t2, t3, m] = g.t;
    for (i, &v) in g.v.iter().enumerate() {
        a.vmovups(YMM[v], ymmword_ptr(PX + 32 * i as i32))?;
    }
    a.vcmpps(YMM[t0], YMM[g.v[0]], YMM[g.v[1]], CMP_UNORD_Q)?;
    a.vcmpps(YMM[t1], YMM[g.v[2]], YMM[g.v[3]], CMP_UNORD_Q)?;
    a.vorps(YMM[t0], YMM[t0], YMM[t1])?;
    a.vtestps(YMM[t0], YMM[t0])?;
    a.jne(slow)?;
    for (i, &v) in g.v.iter().enumerate() {
        a.vandps(YMM[[t0, t1, t2, t3][i]], YMM[v], YMM[g.abs])?;
    }
    a.vmaxps(YMM[t0], YMM[t0], YMM[t1])?;
    a.vmaxps(YMM[t2], YMM[t2], YMM[t3])?;
    a.vmaxps(YMM[t0], YMM[t0], YMM[t2])?;
    a.vextractf128(XMM[t1], YMM[t0], 1)?;
    a.vmaxps(XMM[t0], XMM[t0], XMM[t1])?;
    a.vmovhlps(XMM[t1], XMM[t1], XMM[t0])?;
    a.vmaxps(XMM[t0], XMM[t0], XMM[t1])?;
    a.vmovshdup(XMM[t1], XMM[t0])?;
    a.vmaxss(XMM[m], XMM[t0], XMM[t1])?;
    Ok(())
}

/// From `amax` (xmm): store the binary16 scale at `[PO]`, broadcast `id`
/// into `t[3]` (the full width of the tier).
fn scale(e: &mut Emitter, g: &Regs, amax: usize) -> Result<(), EmitError> {
    let a = e.asm();
    let [d, r, m, id, _] = g.t;
    a.vdivss(XMM[d], XMM[amax], XMM[g.c127])?;
    a.vcvtps2ph(XMM[r], XMM[d], 0)?;
    a.vmovd(eax, XMM[r])?;
    a.mov(word_ptr(PO), ax)?;
    a.vdivss(XMM[r], XMM[g.one], XMM[d])?;
    if g.v[0] >= 16 {
        // EVEX compares write a mask: zero `1/d` where `d == 0`.
        a.vcmpss(k2, XMM[d], XMM[g.zero], CMP_NEQ_UQ)?;
        a.vmovaps(XMM[r].k2().z(), XMM[r])?;
        a.vbroadcastss(ZMM[id], XMM[r])?;
    } else {
        a.vcmpss(XMM[m], XMM[d], XMM[g.zero], CMP_NEQ_UQ)?;
        a.vandps(XMM[r], XMM[r], XMM[m])?;
        a.vbroadcastss(YMM[id], XMM[r])?;
    }
    Ok(())
}

/// AVX-512: quants of both zmm, narrowed and stored at `[PO + 2]`.
fn quants_avx512(e: &mut Emitter, g: &Regs) -> Result<(), EmitError> {
    let a = e.asm();
    let [t0, t1, t2, id, _] = g.t;
    for (i, &v) in g.v[..2].iter().enumerate() {
        let (y, t, s) = (ZMM[v], ZMM[t0], ZMM[t1]);
        a.vmulps(y, y, ZMM[id])?;
        a.vcmpps(k1, y, y, CMP_ORD_Q)?;
        a.vminps(y, y, ZMM[g.c127])?;
        a.vmaxps(y.k1().z(), y, ZMM[g.cm127])?;
        a.vrndscaleps(t, y, ROUND_TRUNC)?;
        a.vsubps(s, y, t)?;
        a.vpandd(s, s, ZMM[g.abs])?;
        a.vcmpps(k3, s, ZMM[g.half], CMP_GE_OQ)?;
        // copysign(1, y) = (y & sign) | 1.0
        a.vpandnd(s, ZMM[g.abs], y)?;
        a.vpord(s, s, ZMM[g.one])?;
        a.vaddps(t.k3(), t, s)?;
        a.vcvtps2dq(ZMM[t2], t)?;
        a.vpmovsdb(xmmword_ptr(PO + 2 + 16 * i as i32), ZMM[t2])?;
    }
    Ok(())
}

/// AVX2: quants of the four ymm, packed, ordered and stored at `[PO + 2]`.
fn quants_avx2(e: &mut Emitter, g: &Regs) -> Result<(), EmitError> {
    let a = e.asm();
    let [t0, t1, t2, id, _] = g.t;
    for &v in &g.v {
        let (y, t, s, m) = (YMM[v], YMM[t0], YMM[t1], YMM[t2]);
        a.vmulps(y, y, YMM[id])?;
        a.vcmpps(m, y, y, CMP_ORD_Q)?;
        a.vminps(y, y, YMM[g.c127])?;
        a.vmaxps(y, y, YMM[g.cm127])?;
        a.vandps(y, y, m)?;
        a.vroundps(t, y, ROUND_TRUNC)?;
        a.vsubps(s, y, t)?;
        a.vandps(s, s, YMM[g.abs])?;
        a.vcmpps(m, s, YMM[g.half], CMP_GE_OQ)?;
        a.vandnps(s, YMM[g.abs], y)?;
        a.vorps(s, s, YMM[g.one])?;
        a.vandps(s, s, m)?;
        a.vaddps(t, t, s)?;
        a.vcvtps2dq(y, t)?;
    }
    // Packs work per 128-bit lane: bytes come out as dwords
    // [a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7] for the four vectors
    // a..d; vpermd by [0,4,1,5,2,6,3,7] restores a0-7 b0-7 c0-7 d0-7.
    let [v0, v1, v2, v3] = g.v.map(|n| YMM[n]);
    a.vpackssdw(v0, v0, v1)?;
    a.vpackssdw(v2, v2, v3)?;
    a.vpacksswb(v0, v0, v2)?;
    a.vpermd(v0, YMM[g.perm], v0)?;
    a.vmovdqu(ymmword_ptr(PO + 2), v0)?;
    Ok(())
}
