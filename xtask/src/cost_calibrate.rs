//! `cargo xtask cost-calibrate`: check the host's port table against the
//! machine. For every instruction class the kernels use, a generated loop
//! times a representative instruction two ways:
//!
//! - **throughput**: 48 instances per iteration over 12 (VEX) or 24 (EVEX)
//!   independent registers, so latency is hidden: cycles per instruction;
//! - **latency**: 48 instances each feeding the next: cycles per link.
//!
//! Each loop runs on a pinned thread for about two million cycles, the
//! least of five runs counts, and the TSC is turned into core cycles by a
//! dependent-add chain timed right beside it ([`crate::cycles`]). The output
//! puts each measurement next to the table's prediction (reciprocal
//! throughput from the row's busiest port set or the issue width; the row's
//! latency). Then the scheduler probe (chains of dependent `vaddps zmm`,
//! one an iteration, iterations independent) measures how many waiting
//! µops hide a chain, beside the table's `scheduler` figure, and the
//! streaming-read bandwidths. The output ends with
//! `cost-calibrate: probes=N throughput_within_15pct=T latency_within_1=L`.
//! Only hosts with a table are checked; rows are corrected in the table
//! file by hand, citing this command (tag `weft-mb`).

use std::sync::Arc;

use weft_cost::{Class, CostModel, Width};
use weft_kernel::{Isa, Kernel, NativeCode};
use weft_x64::iced_x86::code_asm::registers::k;
use weft_x64::iced_x86::code_asm::*;
use weft_x64::iced_x86::IcedError;
use weft_x64::regs::{XMM as X, YMM as Y, ZMM as Z};

use crate::cycles::{pin_current_thread, ticks, Calibration};

/// Instructions per loop iteration.
const UNROLL: usize = 48;

/// The arguments of a probe body: iterations and a 4 KiB scratch buffer.
#[repr(C)]
struct ProbeArgs {
    iterations: u64,
    buffer: *mut u8,
}

/// Register file a probe's chains live in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum File {
    /// xmm/ymm 0–15 (VEX), 12 chains.
    Vex,
    /// zmm/ymm/xmm 0–31 (EVEX), 24 chains.
    Evex,
    /// General registers, 8 chains.
    Gpr,
}

impl File {
    fn chains(self) -> usize {
        match self {
            File::Vex => 12,
            File::Evex => 24,
            File::Gpr => 6,
        }
    }
}

/// How one instance is written: destination chain `d`, source chain `s`
/// (the same for a latency chain), scratch register index `t`.
type EmitFn = fn(&mut CodeAssembler, usize, usize) -> Result<(), IcedError>;

/// One probe: the table row it checks and the instruction that stands for it.
struct Probe {
    class: Class,
    width: Width,
    text: &'static str,
    file: File,
    emit: EmitFn,
    /// Whether a chain through the destination measures its latency.
    latency: bool,
}

/// General registers free in a probe body (rcx counts, rsi holds the buffer).
const G: [AsmRegister64; 6] = [rax, rdx, r8, r9, r10, r11];

/// The source register every throughput instance reads besides its own.
const VEX_SRC: usize = 15;
const EVEX_SRC: usize = 31;

macro_rules! probe {
    ($class:ident, $w:ident, $text:expr, $file:ident, $lat:expr, |$a:ident, $d:ident, $s:ident| $body:expr) => {
        Probe {
            class: Class::$class,
            width: Width::$w,
            text: $text,
            file: File::$file,
            emit: |$a: &mut CodeAssembler, $d: usize, $s: usize| $body,
            latency: $lat,
        }
    };
}

/// The probes: one or more representative instructions per row the
/// kernels meet.
fn probes() -> Vec<Probe> {
    vec![
        probe!(IntAlu, Scalar, "add r64, r64", Gpr, true, |a, d, _s| a
            .add(G[d], rsi)),
        probe!(IntShift, Scalar, "shl r64, 3", Gpr, true, |a, d, _s| a
            .shl(G[d], 3)),
        probe!(IntMul, Scalar, "imul r64, r64", Gpr, true, |a, d, _s| a
            .imul_2(G[d], rsi)),
        probe!(
            Load,
            Scalar,
            "mov r64, [rsi+8d] / [r64]",
            Gpr,
            true,
            |a, d, s| if d == s {
                a.mov(G[d], qword_ptr(G[d]))
            } else {
                a.mov(G[d], qword_ptr(rsi + 64 * d as i32))
            }
        ),
        probe!(
            Store,
            Scalar,
            "mov [rsi+64d], r64",
            Gpr,
            false,
            |a, d, _s| a.mov(qword_ptr(rsi + 64 * d as i32), G[d])
        ),
        probe!(
            VecLoad,
            V256,
            "vmovdqu ymm, [rsi+64d]",
            Vex,
            false,
            |a, d, _s| a.vmovdqu(Y[d], ymmword_ptr(rsi + 64 * d as i32))
        ),
        probe!(
            VecLoad,
            V512,
            "vmovdqu32 zmm, [rsi+64d]",
            Evex,
            false,
            |a, d, _s| a.vmovdqu32(Z[d], zmmword_ptr(rsi + 64 * (d % 16) as i32))
        ),
        probe!(
            VecStore,
            V256,
            "vmovdqu [rsi+64d], ymm",
            Vex,
            false,
            |a, d, _s| a.vmovdqu(ymmword_ptr(rsi + 64 * d as i32), Y[d])
        ),
        probe!(
            VecStore,
            V512,
            "vmovdqu32 [rsi+64d], zmm",
            Evex,
            false,
            |a, d, _s| a.vmovdqu32(zmmword_ptr(rsi + 64 * (d % 16) as i32), Z[d])
        ),
        probe!(
            VecBroadcastLoad,
            V128,
            "vpbroadcastw xmm, [rsi+64d]",
            Vex,
            false,
            |a, d, _s| a.vpbroadcastw(X[d], word_ptr(rsi + 64 * d as i32))
        ),
        probe!(
            VecBroadcastLoad,
            V256,
            "vbroadcastsd ymm, [rsi+64d]",
            Vex,
            false,
            |a, d, _s| a.vbroadcastsd(Y[d], qword_ptr(rsi + 64 * d as i32))
        ),
        probe!(
            VecBroadcastLoad,
            V512,
            "vbroadcastsd zmm, [rsi+64d]",
            Evex,
            false,
            |a, d, _s| a.vbroadcastsd(Z[d], qword_ptr(rsi + 64 * (d % 16) as i32))
        ),
        probe!(VecLogic, V256, "vpxor ymm", Vex, true, |a, d, _s| a
            .vpxor(Y[d], Y[d], Y[VEX_SRC])),
        probe!(VecLogic, V512, "vpxorq zmm", Evex, true, |a, d, _s| a
            .vpxorq(Z[d], Z[d], Z[EVEX_SRC])),
        probe!(VecIntAlu, V256, "vpaddd ymm", Vex, true, |a, d, _s| a
            .vpaddd(Y[d], Y[d], Y[VEX_SRC])),
        probe!(VecIntAlu, V512, "vpsubd zmm", Evex, true, |a, d, _s| a
            .vpsubd(Z[d], Z[d], Z[EVEX_SRC])),
        probe!(VecIntAluSlow, V256, "vpsignb ymm", Vex, true, |a, d, _s| a
            .vpsignb(Y[d], Y[d], Y[VEX_SRC])),
        probe!(VecIntAluSlow, V256, "vpabsb ymm", Vex, true, |a, d, _s| a
            .vpabsb(Y[d], Y[d])),
        probe!(VecIntMul, V256, "vpmaddubsw ymm", Vex, true, |a, d, _s| a
            .vpmaddubsw(Y[d], Y[d], Y[VEX_SRC])),
        probe!(VecIntMul, V256, "vpmaddwd ymm", Vex, true, |a, d, _s| a
            .vpmaddwd(Y[d], Y[d], Y[VEX_SRC])),
        probe!(VecIntMul, V128, "vpmaddwd xmm", Vex, true, |a, d, _s| a
            .vpmaddwd(X[d], X[d], X[VEX_SRC])),
        probe!(VecShift, V256, "vpsllq ymm, 3", Vex, true, |a, d, _s| a
            .vpsllq(Y[d], Y[d], 3)),
        probe!(VecShift, V512, "vpsllq zmm, 3", Evex, true, |a, d, _s| a
            .vpsllq(Z[d], Z[d], 3)),
        probe!(VecShuffle, V256, "vunpcklpd ymm", Vex, true, |a, d, _s| a
            .vunpcklpd(Y[d], Y[d], Y[VEX_SRC])),
        probe!(VecShuffle, V512, "vunpcklpd zmm", Evex, true, |a, d, _s| a
            .vunpcklpd(Z[d], Z[d], Z[EVEX_SRC])),
        probe!(VecShuffle, V128, "vmovshdup xmm", Vex, true, |a, d, _s| a
            .vmovshdup(X[d], X[d])),
        probe!(
            VecShuffleCross,
            V256,
            "vperm2f128 ymm",
            Vex,
            true,
            |a, d, _s| a.vperm2f128(Y[d], Y[d], Y[VEX_SRC], 0x21)
        ),
        probe!(
            VecInsert,
            V256,
            "vinserti32x4 ymm, xmm",
            Evex,
            true,
            |a, d, _s| a.vinserti32x4(Y[d], Y[d], X[EVEX_SRC], 1)
        ),
        probe!(
            VecInsert,
            V512,
            "vinserti64x4 zmm, ymm",
            Evex,
            true,
            |a, d, _s| a.vinserti64x4(Z[d], Z[d], Y[EVEX_SRC], 1)
        ),
        probe!(
            VecShuffleCross,
            V512,
            "vextractf64x4 ymm, zmm",
            Evex,
            true,
            |a, d, _s| a.vextractf64x4(Y[d], Z[d], 1)
        ),
        probe!(
            VecShuffleCross,
            V512,
            "vshuff64x2 zmm",
            Evex,
            true,
            |a, d, _s| a.vshuff64x2(Z[d], Z[d], Z[EVEX_SRC], 0x4e)
        ),
        probe!(
            VecInsert,
            V256,
            "vpbroadcastw ymm, xmm",
            Vex,
            true,
            |a, d, _s| a.vpbroadcastw(Y[d], X[d])
        ),
        probe!(
            VecBlend,
            V512,
            "vblendmpd zmm{k1}",
            Evex,
            true,
            |a, d, _s| a.vblendmpd(Z[d].k1(), Z[d], Z[EVEX_SRC])
        ),
        probe!(VecBlendVar, V256, "vblendvpd ymm", Vex, true, |a, d, _s| a
            .vblendvpd(Y[d], Y[d], Y[VEX_SRC], Y[14])),
        probe!(
            DotI8,
            V128,
            "vpdpbusd xmm (EVEX)",
            Evex,
            true,
            |a, d, _s| a.vpdpbusd(X[d], X[EVEX_SRC], X[30])
        ),
        probe!(
            DotI8,
            V256,
            "vpdpbusd ymm (EVEX)",
            Evex,
            true,
            |a, d, _s| a.vpdpbusd(Y[d], Y[EVEX_SRC], Y[30])
        ),
        probe!(DotI8, V512, "vpdpbusd zmm", Evex, true, |a, d, _s| a
            .vpdpbusd(Z[d], Z[EVEX_SRC], Z[30])),
        probe!(FpAdd, Scalar, "vaddsd xmm", Vex, true, |a, d, _s| a
            .vaddsd(X[d], X[d], X[VEX_SRC])),
        probe!(FpAdd, V128, "vaddps xmm", Vex, true, |a, d, _s| a
            .vaddps(X[d], X[d], X[VEX_SRC])),
        probe!(FpAdd, V256, "vaddpd ymm", Vex, true, |a, d, _s| a
            .vaddpd(Y[d], Y[d], Y[VEX_SRC])),
        probe!(FpAdd, V512, "vaddps zmm", Evex, true, |a, d, _s| a.vaddps(
            Z[d],
            Z[d],
            Z[EVEX_SRC]
        )),
        probe!(FpMul, V128, "vmulps xmm", Vex, true, |a, d, _s| a
            .vmulps(X[d], X[d], X[VEX_SRC])),
        probe!(FpMul, V256, "vmulpd ymm", Vex, true, |a, d, _s| a
            .vmulpd(Y[d], Y[d], Y[VEX_SRC])),
        probe!(FpMul, V512, "vmulps zmm", Evex, true, |a, d, _s| a.vmulps(
            Z[d],
            Z[d],
            Z[EVEX_SRC]
        )),
        probe!(Fma, V256, "vfmadd231ps ymm", Vex, true, |a, d, _s| a
            .vfmadd231ps(Y[d], Y[VEX_SRC], Y[14])),
        probe!(Fma, V512, "vfmadd231ps zmm", Evex, true, |a, d, _s| a
            .vfmadd231ps(Z[d], Z[EVEX_SRC], Z[30])),
        probe!(FpMinMax, V256, "vmaxpd ymm", Vex, true, |a, d, _s| a
            .vmaxpd(Y[d], Y[d], Y[VEX_SRC])),
        probe!(FpMinMax, V512, "vminpd zmm", Evex, true, |a, d, _s| a
            .vminpd(Z[d], Z[d], Z[EVEX_SRC])),
        probe!(FpCmp, V256, "vcmppd ymm", Vex, true, |a, d, _s| a
            .vcmppd(Y[d], Y[d], Y[VEX_SRC], 0x11)),
        probe!(FpCmp, V512, "vcmppd k, zmm", Evex, false, |a, d, _s| a
            .vcmppd(k::k2, Z[d], Z[EVEX_SRC], 0x11)),
        probe!(FpCvt, V128, "vcvtdq2ps xmm", Vex, true, |a, d, _s| a
            .vcvtdq2ps(X[d], X[d])),
        probe!(FpCvt, V256, "vcvtdq2ps ymm", Vex, true, |a, d, _s| a
            .vcvtdq2ps(Y[d], Y[d])),
        probe!(FpCvt, V512, "vcvtdq2ps zmm", Evex, true, |a, d, _s| a
            .vcvtdq2ps(Z[d], Z[d])),
        probe!(
            FpCvtWiden,
            V256,
            "vcvtph2ps ymm, xmm",
            Vex,
            true,
            |a, d, _s| a.vcvtph2ps(Y[d], X[d])
        ),
        probe!(
            FpCvtWiden,
            V512,
            "vcvtph2ps zmm, ymm",
            Evex,
            true,
            |a, d, _s| a.vcvtph2ps(Z[d], Y[d])
        ),
        probe!(
            FpCvtWiden,
            V256,
            "vcvtps2pd ymm, xmm",
            Vex,
            true,
            |a, d, _s| a.vcvtps2pd(Y[d], X[d])
        ),
        probe!(
            FpCvtWiden,
            V512,
            "vcvtps2pd zmm, ymm",
            Evex,
            true,
            |a, d, _s| a.vcvtps2pd(Z[d], Y[d])
        ),
        probe!(
            FpCvtNarrow,
            V256,
            "vcvtpd2ps xmm, ymm",
            Vex,
            true,
            |a, d, _s| a.vcvtpd2ps(X[d], Y[d])
        ),
        probe!(
            FpCvtNarrow,
            V512,
            "vcvtpd2ps ymm, zmm",
            Evex,
            true,
            |a, d, _s| a.vcvtpd2ps(Y[d], Z[d])
        ),
        probe!(FpRound, V256, "vroundpd ymm", Vex, true, |a, d, _s| a
            .vroundpd(Y[d], Y[d], 1)),
        probe!(FpRound, V512, "vrndscalepd zmm", Evex, true, |a, d, _s| a
            .vrndscalepd(Z[d], Z[d], 1)),
        probe!(MaskOp, Scalar, "kandw k", Evex, false, |a, d, _s| a.kandw(
            [k::k1, k::k2, k::k3, k::k4][d % 4],
            k::k5,
            k::k6
        )),
        probe!(VecTest, Scalar, "kortestw k", Evex, false, |a, _d, _s| a
            .kortestw(k::k5, k::k6)),
        probe!(VecTest, V256, "vptest ymm", Vex, false, |a, d, _s| a
            .vptest(Y[d], Y[VEX_SRC])),
        probe!(VecToGpr, V128, "vmovq r64, xmm", Vex, false, |a, d, _s| a
            .vmovq(G[d % 6], X[d])),
        probe!(
            VecToGpr,
            V256,
            "vmovmskpd r32, ymm",
            Vex,
            false,
            |a, d, _s| a.vmovmskpd(G[d % 6], Y[d])
        ),
        probe!(GprToVec, V128, "vmovq xmm, r64", Vex, false, |a, d, _s| a
            .vmovq(X[d], G[d % 6])),
        probe!(
            GprToVec,
            V512,
            "vpbroadcastd zmm, r32",
            Evex,
            false,
            |a, d, _s| a.vpbroadcastd(Z[d], [eax, edx, r8d, r9d, r10d, r11d][d % 6])
        ),
        probe!(
            Gather,
            V512,
            "kxnorw k1 + vpgatherqq zmm{k1}",
            Evex,
            false,
            |a, d, _s| {
                a.kxnorw(k::k1, k::k1, k::k1)?;
                a.vpgatherqq(
                    Z[d].k1(),
                    qword_ptr(rsi + Z[EVEX_SRC] * 8 + 64 * (d % 4) as i32),
                )
            }
        ),
        probe!(
            Gather,
            V512,
            "kxnorw kN + vpgatherqq zmm{kN}, N=1..7",
            Evex,
            false,
            |a, d, _s| {
                let m = [k::k1, k::k2, k::k3, k::k4, k::k5, k::k6, k::k7][d % 7];
                a.kxnorw(m, m, m)?;
                let dst = match d % 7 {
                    0 => Z[d].k1(),
                    1 => Z[d].k2(),
                    2 => Z[d].k3(),
                    3 => Z[d].k4(),
                    4 => Z[d].k5(),
                    5 => Z[d].k6(),
                    _ => Z[d].k7(),
                };
                a.vpgatherqq(dst, qword_ptr(rsi + Z[EVEX_SRC] * 8 + 64 * (d % 4) as i32))
            }
        ),
        probe!(
            Gather,
            V256,
            "vpcmpeqq mask + vpgatherqq ymm (VEX)",
            Vex,
            false,
            |a, d, _s| {
                a.vpcmpeqq(Y[14], Y[14], Y[14])?;
                a.vpgatherqq_3(
                    Y[d],
                    qword_ptr(rsi + Y[13] * 8 + 64 * (d % 4) as i32),
                    Y[14],
                )
            }
        ),
        probe!(
            MaskOp,
            Scalar,
            "kxnorw k1, k1, k1",
            Evex,
            true,
            |a, _d, _s| a.kxnorw(k::k1, k::k1, k::k1)
        ),
        probe!(
            Prefetch,
            Scalar,
            "prefetcht0 [rsi+64d]",
            Vex,
            false,
            |a, d, _s| a.prefetcht0(byte_ptr(rsi + 64 * d as i32))
        ),
        probe!(
            VecShuffle,
            V256,
            "mix vunpcklpd + vaddpd ymm",
            Vex,
            false,
            |a, d, _s| if d.is_multiple_of(2) {
                a.vunpcklpd(Y[d], Y[d], Y[VEX_SRC])
            } else {
                a.vaddpd(Y[d], Y[d], Y[VEX_SRC])
            }
        ),
        probe!(
            VecShuffle,
            V256,
            "mix vunpcklpd + vmulpd ymm",
            Vex,
            false,
            |a, d, _s| if d.is_multiple_of(2) {
                a.vunpcklpd(Y[d], Y[d], Y[VEX_SRC])
            } else {
                a.vmulpd(Y[d], Y[d], Y[VEX_SRC])
            }
        ),
        probe!(
            DotI8,
            V512,
            "mix vpdpbusd + vmulps zmm",
            Evex,
            false,
            |a, d, _s| if d.is_multiple_of(2) {
                a.vpdpbusd(Z[d], Z[EVEX_SRC], Z[30])
            } else {
                a.vmulps(Z[d], Z[d], Z[EVEX_SRC])
            }
        ),
        probe!(
            FpCvtWiden,
            V512,
            "mix vcvtph2ps + vaddps zmm",
            Evex,
            false,
            |a, d, _s| if d.is_multiple_of(2) {
                a.vcvtph2ps(Z[d], Y[d])
            } else {
                a.vaddps(Z[d], Z[d], Z[EVEX_SRC])
            }
        ),
        probe!(
            VecInsert,
            V512,
            "mix vinserti64x4 + vunpcklpd zmm",
            Evex,
            false,
            |a, d, _s| if d.is_multiple_of(2) {
                a.vinserti64x4(Z[d], Z[d], Y[EVEX_SRC], 1)
            } else {
                a.vunpcklpd(Z[d], Z[d], Z[EVEX_SRC])
            }
        ),
        probe!(
            VecMove,
            V512,
            "mix vmovapd zmm + vaddpd zmm",
            Evex,
            false,
            |a, d, _s| if d.is_multiple_of(2) {
                a.vmovapd(Z[d], Z[EVEX_SRC])
            } else {
                a.vaddpd(Z[d], Z[d], Z[EVEX_SRC])
            }
        ),
        probe!(
            VecBroadcastLoad,
            V128,
            "mix vpbroadcastw xmm,[m] + vunpcklpd zmm",
            Evex,
            false,
            |a, d, _s| if d.is_multiple_of(2) {
                a.vpbroadcastw(X[d], word_ptr(rsi + 64 * d as i32))
            } else {
                a.vunpcklpd(Z[d], Z[d], Z[EVEX_SRC])
            }
        ),
        probe!(
            VecInsert,
            V512,
            "mix vinserti64x4 zmm,[m] + vunpcklpd zmm",
            Evex,
            false,
            |a, d, _s| if d.is_multiple_of(2) {
                a.vinserti64x4(Z[d], Z[d], ymmword_ptr(rsi + 64 * d as i32), 1)
            } else {
                a.vunpcklpd(Z[d], Z[d], Z[EVEX_SRC])
            }
        ),
        // Store-to-load forwarding: a chain through memory, each link a
        // store, a load of part of it, and a move back (measured latency
        // minus the move's is the forwarding latency).
        probe!(
            Store,
            Scalar,
            "chain mov [rsp],r64; mov r64,[rsp]",
            Gpr,
            true,
            |a, d, _s| {
                a.mov(qword_ptr(rsp + 512 + 64 * d as i32), G[d])?;
                a.mov(G[d], qword_ptr(rsp + 512 + 64 * d as i32))
            }
        ),
        probe!(
            VecStore,
            V512,
            "chain vmovdqu64 [rsp],zmm; mov r,[rsp+8]; vmovq",
            Evex,
            true,
            |a, d, _s| {
                a.vmovdqu64(zmmword_ptr(rsp + 512 + 128 * (d % 8) as i32), Z[d])?;
                a.mov(G[d % 6], qword_ptr(rsp + 520 + 128 * (d % 8) as i32))?;
                a.vmovq(X[d], G[d % 6])
            }
        ),
        probe!(
            VecStore,
            V128,
            "chain vmovdqu [rsp],xmm; vmovdqu xmm,[rsp]",
            Vex,
            true,
            |a, d, _s| {
                a.vmovdqu(xmmword_ptr(rsp + 512 + 64 * d as i32), X[d])?;
                a.vmovdqu(X[d], xmmword_ptr(rsp + 512 + 64 * d as i32))
            }
        ),
        probe!(
            VecStore,
            V512,
            "chain vmovdqu64 [rsp],zmm; vmovdqu64 zmm,[rsp]",
            Evex,
            true,
            |a, d, _s| {
                a.vmovdqu64(zmmword_ptr(rsp + 512 + 128 * (d % 8) as i32), Z[d])?;
                a.vmovdqu64(Z[d], zmmword_ptr(rsp + 512 + 128 * (d % 8) as i32))
            }
        ),
        probe!(
            GprToVec,
            V128,
            "chain vmovq xmm,r64; vmovq r64,xmm",
            Vex,
            true,
            |a, d, _s| {
                a.vmovq(X[d], G[d % 6])?;
                a.vmovq(G[d % 6], X[d])
            }
        ),
        probe!(
            Nop,
            Scalar,
            "nop (dispatch only)",
            Vex,
            false,
            |a, _d, _s| a.nop()
        ),
        probe!(
            IntAlu,
            Scalar,
            "issue mix of six: 2 add, 3 vector ops, a load",
            Vex,
            false,
            |a, d, _s| {
                a.add(G[d % 6], rsi)?;
                a.vpaddd(Y[d], Y[d], Y[VEX_SRC])?;
                a.vpxor(Y[(d + 6) % 12], Y[(d + 6) % 12], Y[VEX_SRC])?;
                a.vmovdqu(Y[12 + d % 2], ymmword_ptr(rsi + 64 * d as i32))?;
                a.add(G[(d + 3) % 6], rsi)?;
                a.vpsubd(Y[d], Y[d], Y[VEX_SRC])
            }
        ),
        probe!(
            IntAlu,
            Scalar,
            "issue mix add r64 + vpaddd ymm",
            Vex,
            false,
            |a, d, _s| if d.is_multiple_of(2) {
                a.add(G[d % 6], rsi)
            } else {
                a.vpaddd(Y[d], Y[d], Y[VEX_SRC])
            }
        ),
        probe!(
            VecMove,
            V512,
            "vmovdqa64 zmm, zmm",
            Evex,
            false,
            |a, d, _s| a.vmovdqa64(Z[d], Z[EVEX_SRC])
        ),
    ]
}

/// Assemble a probe body: `iterations` of `UNROLL` instances.
fn assemble(p: &Probe, latency: bool) -> Result<Vec<u8>, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    a.set_prefer_vex(p.file != File::Evex);
    a.mov(rcx, qword_ptr(rdi))?;
    a.mov(rsi, qword_ptr(rdi + 8))?;
    // A frame of our own: the forwarding probes chain through stack bytes.
    a.sub(rsp, 4096)?;
    // Defined starting values: zeros everywhere, all-ones masks.
    let live = if p.file == File::Evex { 32 } else { 16 };
    for z in &Z[..live] {
        a.vpxord(*z, *z, *z)?;
    }
    for g in G {
        a.mov(g, rsi)?;
    }
    if p.class == Class::Gather {
        // Indices 0..8 (a different line for every lane) from the buffer.
        if p.file == File::Evex {
            a.vmovdqu64(Z[EVEX_SRC], zmmword_ptr(rsi + 2048))?;
        } else {
            a.vmovdqu(Y[13], ymmword_ptr(rsi + 2048))?;
        }
    }
    a.kxnorw(k::k1, k::k1, k::k1)?;
    a.kxnorw(k::k5, k::k5, k::k5)?;
    a.kxnorw(k::k6, k::k6, k::k6)?;
    let mut top = a.create_label();
    a.set_label(&mut top)?;
    let chains = p.file.chains();
    for i in 0..UNROLL {
        let d = if latency { 0 } else { i % chains };
        let s = if latency { 0 } else { d + 1 };
        (p.emit)(&mut a, d, if latency { d } else { s.min(chains) })?;
    }
    a.dec(rcx)?;
    a.jne(top)?;
    a.add(rsp, 4096)?;
    a.vzeroupper()?;
    a.ret()?;
    a.assemble(0)
}

/// Measured cycles per instruction of one body.
fn measure(bytes: Vec<u8>, buffer: &mut [u8]) -> Result<f64, String> {
    let code = NativeCode {
        isa: Isa::X86_64,
        bytes,
        pool: None,
        loops: Vec::new(),
    };
    let placed = code.place().map_err(|e| e.to_string())?;
    // SAFETY: the probe bodies read their two argument words, touch only
    // the 4 KiB buffer the arguments point to (every displacement is below
    // 64 · 24 + 64 bytes, the gather indexes it with zeros), write only
    // volatile registers and return.
    let kernel: Kernel<ProbeArgs> =
        unsafe { Kernel::from_placed(Arc::clone(&placed), 0) }.map_err(|e| e.to_string())?;
    let target_cycles = 2_000_000u64;
    let iterations = target_cycles / UNROLL as u64;
    let args = ProbeArgs {
        iterations,
        buffer: buffer.as_mut_ptr(),
    };
    // The pointer-chasing load probe follows the buffer's first word.
    let address = (buffer.as_ptr() as u64).to_le_bytes();
    buffer[..8].copy_from_slice(&address);
    // The gather probe's indices: lane i reads quadword 8·i (its own line).
    for i in 0..8u64 {
        buffer[2048 + 8 * i as usize..2056 + 8 * i as usize]
            .copy_from_slice(&(8 * i).to_le_bytes());
    }
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let cal = Calibration::measure(target_cycles);
        let t0 = ticks();
        // SAFETY: `args` points at a live buffer of 4 KiB (see above).
        unsafe { kernel.call(&args) };
        let t = (ticks() - t0) as f64;
        best = best.min(cal.cycles(t) / (iterations as f64 * UNROLL as f64));
    }
    Ok(best)
}

/// The model's prediction for a probe body: the port model's cycles per
/// iteration of its loop over the instances in it (so the classifier, the
/// port sets and the dependency chains are checked together).
fn predicted(model: &CostModel, bytes: &[u8]) -> Result<f64, String> {
    let code = NativeCode {
        isa: Isa::X86_64,
        bytes: bytes.to_vec(),
        pool: None,
        loops: Vec::new(),
    };
    let nest = [weft_kernel::LoopTrip {
        name: "probe".into(),
        trips: 1000,
        depth: 0,
    }];
    let p = model
        .price(&code, &nest, &weft_cost::bare_offer(0, 0))
        .map_err(|e| e.to_string())?;
    Ok(p.loops[0].cycles_per_iteration / UNROLL as f64)
}

/// Chain lengths of the scheduler probe: long enough that the chain, not
/// the two add pipes, bounds every one (2 cycles a link against 0.5), and
/// short enough that an iteration fits in the reorder window.
const SCHEDULER_CHAINS: [usize; 3] = [128, 256, 384];

/// The scheduler probe: every iteration one chain of `links` dependent
/// `vaddps zmm`, started afresh from a register no iteration writes, so
/// iterations depend on nothing but the loop counter. The next iteration
/// can start only as far ahead as the schedulers hold waiting µops, so the
/// cycles an iteration takes say how many that is.
fn scheduler_body(links: usize) -> Result<Vec<u8>, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    a.mov(rcx, qword_ptr(rdi))?;
    for z in [Z[0], Z[30], Z[31]] {
        a.vpxord(z, z, z)?;
    }
    let mut top = a.create_label();
    a.set_label(&mut top)?;
    a.vmovaps(Z[0], Z[31])?;
    for _ in 0..links {
        a.vaddps(Z[0], Z[0], Z[30])?;
    }
    a.dec(rcx)?;
    a.jne(top)?;
    a.vzeroupper()?;
    a.ret()?;
    a.assemble(0)
}

/// For a chain of `links`: measured and predicted cycles an iteration, and
/// the waiting µops the measurement implies. An iteration of `U` µops
/// whose chain takes `L` cycles overlaps the next by `S` µops when it
/// takes `L · (U − S) / U` cycles, so `S = U · (1 − cycles / L)`.
fn scheduler(
    model: &CostModel,
    buffer: &mut [u8],
    links: usize,
) -> Result<(f64, f64, f64), String> {
    let body = scheduler_body(links).map_err(|e| e.to_string())?;
    // `predicted` and `measure` divide by UNROLL instances an iteration.
    let scale = UNROLL as f64;
    let predicted_cycles = predicted(model, &body)? * scale;
    let cycles = measure(body, buffer)? * scale;
    let latency = 2.0 * links as f64; // vaddps zmm: 2 cycles (probed above)
    let uops = links as f64 + 3.0; // the chain, the move, dec + jne
    Ok((cycles, predicted_cycles, uops * (1.0 - cycles / latency)))
}

/// Streaming-read bandwidth, bytes per cycle, over a buffer of `bytes`
/// (eight 32-byte loads per iteration, the whole buffer per call).
fn bandwidth(bytes: usize) -> Result<f64, String> {
    let mut a = CodeAssembler::new(64).map_err(|e| e.to_string())?;
    let body = |a: &mut CodeAssembler| -> Result<(), IcedError> {
        a.mov(rcx, qword_ptr(rdi))?;
        a.mov(rsi, qword_ptr(rdi + 8))?;
        let mut top = a.create_label();
        a.set_label(&mut top)?;
        for (k, y) in Y[..8].iter().enumerate() {
            a.vmovdqu(*y, ymmword_ptr(rsi + 32 * k as i32))?;
        }
        a.add(rsi, 256)?;
        a.dec(rcx)?;
        a.jne(top)?;
        a.vzeroupper()?;
        a.ret()
    };
    body(&mut a).map_err(|e| e.to_string())?;
    let code = NativeCode {
        isa: Isa::X86_64,
        bytes: a.assemble(0).map_err(|e| e.to_string())?,
        pool: None,
        loops: Vec::new(),
    };
    let placed = code.place().map_err(|e| e.to_string())?;
    // SAFETY: the body reads `iterations · 256` bytes from the buffer the
    // arguments point to (exactly its length), writes only volatile
    // registers and returns.
    let kernel: Kernel<ProbeArgs> =
        unsafe { Kernel::from_placed(Arc::clone(&placed), 0) }.map_err(|e| e.to_string())?;
    let mut buffer = vec![1u8; bytes];
    let args = ProbeArgs {
        iterations: (bytes / 256) as u64,
        buffer: buffer.as_mut_ptr(),
    };
    let passes = (64 << 20) / bytes + 1;
    let mut best = 0.0f64;
    for _ in 0..5 {
        let cal = Calibration::measure(1_000_000);
        let t0 = ticks();
        for _ in 0..passes {
            // SAFETY: `args` names the live buffer (see above).
            unsafe { kernel.call(&args) };
        }
        let cycles = cal.cycles((ticks() - t0) as f64);
        best = best.max((bytes * passes) as f64 / cycles);
    }
    Ok(best)
}

/// A model pricing with `table` and `host`'s cache sizes, as
/// [`CostModel::for_host`] gives for a shipped table.
pub fn model_of(table: weft_cost::PortTable, host: &weft_kernel::Host) -> CostModel {
    // The model keeps a `'static` table; an xtask process is short.
    let mut m = CostModel::with_port_table(Box::leak(Box::new(table)));
    m.set_caches_from(host);
    m
}

/// Run every probe and print measured against predicted.
pub fn run(args: &[String]) -> Result<(), String> {
    // `cost-calibrate WORD`: only the probes whose text contains WORD.
    let only = args.iter().find(|a| !a.starts_with('-')).cloned();
    let host = weft_kernel::Host::detect();
    // `--table=FILE`: a table being drafted for this host, whatever its
    // `match` line says (with the host's cache sizes, as for a shipped one).
    let model = match args.iter().find_map(|a| a.strip_prefix("--table=")) {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            let table = weft_cost::PortTable::parse(&text).map_err(|e| format!("{path}: {e}"))?;
            model_of(table, &host)
        }
        None => CostModel::for_host(&host),
    };
    let Some(table) = model.table() else {
        return Err(format!(
            "no port table matches this host ({} {}): nothing to calibrate (try --table=FILE)",
            host.vendor, host.model
        ));
    };
    let cpu = pin_current_thread()?;
    println!(
        "cost-calibrate: table {} on {} {} (cpu {cpu}), load {}",
        table.id,
        host.vendor,
        host.model,
        load_average()
    );
    println!(
        "{:<18} {:<2} {:<34} {:>9} {:>9} {:>8} {:>8}",
        "class", "w", "instruction", "tput", "model", "lat", "model"
    );
    let mut buffer = vec![0u8; 4096];
    let all: Vec<Probe> = probes()
        .into_iter()
        .filter(|p| only.as_ref().is_none_or(|w| p.text.contains(w.as_str())))
        .collect();
    let mut tput_ok = 0;
    let mut lat_ok = 0;
    let mut lat_n = 0;
    for p in &all {
        let body = assemble(p, false).map_err(|e| e.to_string())?;
        let pt = predicted(&model, &body)?;
        let tput = measure(body, &mut buffer)?;
        let lat = match p.latency {
            true => {
                let body = assemble(p, true).map_err(|e| e.to_string())?;
                let pl = predicted(&model, &body)?;
                Some((measure(body, &mut buffer)?, pl))
            }
            false => None,
        };
        let t_good = (tput - pt).abs() <= 0.15 * pt.max(tput);
        tput_ok += usize::from(t_good);
        let lat_text = match lat {
            Some((l, pl)) => {
                lat_n += 1;
                let good = (l - pl).abs() <= 1.0;
                lat_ok += usize::from(good);
                format!("{l:>8.2} {pl:>8.2}{}", if good { "" } else { " *" })
            }
            None => format!("{:>8} {:>8}", "-", "-"),
        };
        println!(
            "{:<18} {:<2} {:<34} {tput:>9.3} {pt:>9.3}{} {lat_text}",
            p.class.name(),
            p.width.name(),
            p.text,
            if t_good { " " } else { "*" },
        );
    }
    if only.is_some() {
        return Ok(());
    }
    for links in SCHEDULER_CHAINS {
        let (cycles, predicted_cycles, waiting) = scheduler(&model, &mut buffer, links)?;
        println!(
            "scheduler: {links} dependent vaddps zmm an iteration, iterations independent: \
             {cycles:.0} cycles an iteration (model {predicted_cycles:.0}), so {waiting:.0} \
             µops wait ahead of a chain (table {:.0})",
            table.scheduler
        );
    }
    let (l1, l2, l3) = {
        let c = model.roofline().caches;
        (c.l1d, c.l2, c.l3)
    };
    let sizes = [
        ("l1", (l1 / 2) as usize),
        ("l2", (l2 / 2) as usize),
        ("l3", (l3 / 4) as usize),
        ("dram", (l3 * 8) as usize),
    ];
    let mut line = String::from("bandwidth (bytes/cycle, streaming 256-bit loads):");
    for (k, (name, size)) in sizes.iter().enumerate() {
        let bw = bandwidth(*size)?;
        line.push_str(&format!(
            " {name}={bw:.1} (table {:.1}, {} KiB)",
            table.bandwidth[k],
            size >> 10
        ));
    }
    println!("{line}");
    println!(
        "cost-calibrate: probes={} throughput_within_15pct={tput_ok} latency_within_1={lat_ok}/{lat_n} load={}",
        all.len(),
        load_average()
    );
    Ok(())
}

/// Instructions dispatched per cycle by a mix of independent integer adds
/// and 256-bit vector adds (6 on a Zen 4 core of one's own; a busy SMT
/// sibling halves it): a record of how shared the core was.
pub fn issue_rate() -> Result<f64, String> {
    let probe = probes()
        .into_iter()
        .find(|p| p.text.starts_with("issue mix add"))
        .ok_or("the issue probe is missing")?;
    let mut buffer = vec![0u8; 4096];
    let cycles = measure(
        assemble(&probe, false).map_err(|e| e.to_string())?,
        &mut buffer,
    )?;
    Ok(1.0 / cycles)
}

/// The 1-minute load average, as `/proc/loadavg` says (for the record).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}
