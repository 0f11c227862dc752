//! x64: iced-x86's decoder for lengths and flow, its
//! `InstructionInfoFactory` for registers and memory, and one table
//! ([`MNEMONIC_CLASSES`]) from mnemonic to [`Class`].

use std::sync::OnceLock;

use iced_x86::{
    Decoder, DecoderOptions, FlowControl, InstructionInfoFactory, Mnemonic, OpAccess, OpKind,
    Register,
};

use super::{traverse, Access, Address, Decoded, Flow, Inst, Reg, Regs};
use crate::class::{Class, Width};
use crate::CostError;

/// Mnemonics (as iced names them, lower case) by class. Mnemonics whose
/// class depends on the operands (`mov`, vector moves, broadcasts, …) are
/// resolved in [`classify`]; anything not listed is [`Class::Unknown`].
///
/// Source of the grouping: the instruction groups of the AMD Family 19h
/// optimisation guide's latency spreadsheet and LLVM's x86 scheduling
/// classes (`WriteALU`, `WriteVecALU`, `WriteFShuffle`, …), which the port
/// tables then price per microarchitecture.
pub(crate) const MNEMONIC_CLASSES: &[(Class, &[&str])] = &[
    (
        Class::IntAlu,
        &[
            "add", "sub", "and", "or", "xor", "cmp", "test", "inc", "dec", "neg", "not", "adc",
            "sbb", "movzx", "movsx", "movsxd", "cdq", "cqo", "cdqe", "bt", "sete", "setne", "setb",
            "setae", "setbe", "seta", "setl", "setge", "setle", "setg", "sets", "setns", "setp",
            "setnp", "seto", "setno", "cmove", "cmovne", "cmovb", "cmovae", "cmovbe", "cmova",
            "cmovl", "cmovge", "cmovle", "cmovg", "cmovs", "cmovns", "cmovp", "cmovnp", "cmovo",
            "cmovno", "andn", "blsr", "blsi", "blsmsk", "popcnt", "lzcnt", "tzcnt", "bswap", "lea",
        ],
    ),
    (
        Class::IntShift,
        &[
            "shl", "shr", "sar", "rol", "ror", "shlx", "shrx", "sarx", "rorx", "bzhi", "bextr",
            "shld", "shrd", "bsf", "bsr",
        ],
    ),
    (Class::IntMul, &["imul", "mul", "mulx"]),
    (Class::IntDiv, &["div", "idiv"]),
    (
        Class::Nop,
        &["nop", "endbr64", "vzeroupper", "lfence", "sfence", "pause"],
    ),
    (
        Class::Prefetch,
        &[
            "prefetcht0",
            "prefetcht1",
            "prefetcht2",
            "prefetchnta",
            "prefetchw",
        ],
    ),
    (
        Class::VecLogic,
        &[
            "pand",
            "pandn",
            "por",
            "pxor",
            "vpand",
            "vpandn",
            "vpor",
            "vpxor",
            "vpandd",
            "vpandq",
            "vpandnd",
            "vpandnq",
            "vpord",
            "vporq",
            "vpxord",
            "vpxorq",
            "andps",
            "andpd",
            "andnps",
            "andnpd",
            "orps",
            "orpd",
            "xorps",
            "xorpd",
            "vandps",
            "vandpd",
            "vandnps",
            "vandnpd",
            "vorps",
            "vorpd",
            "vxorps",
            "vxorpd",
            "vpternlogd",
            "vpternlogq",
        ],
    ),
    (
        Class::VecIntAlu,
        &[
            "paddb", "paddw", "paddd", "paddq", "psubb", "psubw", "psubd", "psubq", "vpaddb",
            "vpaddw", "vpaddd", "vpaddq", "vpsubb", "vpsubw", "vpsubd", "vpsubq", "pcmpeqb",
            "pcmpeqw", "pcmpeqd", "pcmpeqq", "pcmpgtb", "pcmpgtw", "pcmpgtd", "pcmpgtq",
            "vpcmpeqb", "vpcmpeqw", "vpcmpeqd", "vpcmpeqq", "vpcmpgtb", "vpcmpgtw", "vpcmpgtd",
            "vpcmpgtq", "vpcmpd", "vpcmpq", "vpcmpud", "vpcmpuq", "pmaxsd", "pminsd", "pmaxud",
            "pminud", "vpmaxsd", "vpminsd", "vpmaxud", "vpminud", "vpmaxsb", "vpminsb", "vpmaxub",
            "vpminub", "vpmaxsw", "vpminsw", "vpmaxuw", "vpminuw", "vpmaxsq", "vpminsq", "vpmaxuq",
            "vpminuq",
        ],
    ),
    (
        Class::VecIntAluSlow,
        &[
            "pabsb", "pabsw", "pabsd", "vpabsb", "vpabsw", "vpabsd", "vpabsq", "psignb", "psignw",
            "psignd", "vpsignb", "vpsignw", "vpsignd", "paddsb", "paddsw", "paddusb", "paddusw",
            "psubsb", "psubsw", "psubusb", "psubusw", "vpaddsb", "vpaddsw", "vpaddusb", "vpaddusw",
            "vpsubsb", "vpsubsw", "vpsubusb", "vpsubusw", "pavgb", "pavgw", "vpavgb", "vpavgw",
        ],
    ),
    (
        Class::VecIntMul,
        &[
            "pmaddubsw",
            "pmaddwd",
            "vpmaddubsw",
            "vpmaddwd",
            "pmulld",
            "pmullw",
            "pmulhw",
            "pmuludq",
            "pmuldq",
            "vpmulld",
            "vpmullw",
            "vpmulhw",
            "vpmulhuw",
            "vpmuludq",
            "vpmuldq",
            "vpmullq",
            "psadbw",
            "vpsadbw",
        ],
    ),
    (
        Class::VecHorizontalAdd,
        &[
            "phaddw", "phaddd", "phaddsw", "phsubw", "phsubd", "phsubsw", "vphaddw", "vphaddd",
            "vphaddsw", "vphsubw", "vphsubd", "vphsubsw", "haddps", "haddpd", "hsubps", "hsubpd",
            "vhaddps", "vhaddpd", "vhsubps", "vhsubpd",
        ],
    ),
    (
        Class::VecShift,
        &[
            "psllw", "pslld", "psllq", "psrlw", "psrld", "psrlq", "psraw", "psrad", "vpsllw",
            "vpslld", "vpsllq", "vpsrlw", "vpsrld", "vpsrlq", "vpsraw", "vpsrad", "vpsraq",
            "vpsllvd", "vpsllvq", "vpsrlvd", "vpsrlvq", "vpsravd", "vpsravq", "vprold", "vprolq",
            "vprord", "vprorq",
        ],
    ),
    (
        Class::VecShuffle,
        &[
            "punpcklbw",
            "punpcklwd",
            "punpckldq",
            "punpcklqdq",
            "punpckhbw",
            "punpckhwd",
            "punpckhdq",
            "punpckhqdq",
            "vpunpcklbw",
            "vpunpcklwd",
            "vpunpckldq",
            "vpunpcklqdq",
            "vpunpckhbw",
            "vpunpckhwd",
            "vpunpckhdq",
            "vpunpckhqdq",
            "unpcklps",
            "unpcklpd",
            "unpckhps",
            "unpckhpd",
            "vunpcklps",
            "vunpcklpd",
            "vunpckhps",
            "vunpckhpd",
            "pshufd",
            "pshufb",
            "pshuflw",
            "pshufhw",
            "vpshufd",
            "vpshufb",
            "vpshuflw",
            "vpshufhw",
            "shufps",
            "shufpd",
            "vshufps",
            "vshufpd",
            "movshdup",
            "movsldup",
            "movddup",
            "vmovshdup",
            "vmovsldup",
            "vmovddup",
            "movhlps",
            "movlhps",
            "vmovhlps",
            "vmovlhps",
            "vpermilps",
            "vpermilpd",
            "palignr",
            "vpalignr",
            "insertps",
            "vinsertps",
            "packssdw",
            "packsswb",
            "packusdw",
            "packuswb",
            "vpackssdw",
            "vpacksswb",
            "vpackusdw",
            "vpackuswb",
            "pmovsxbw",
            "pmovsxbd",
            "pmovsxwd",
            "pmovzxbw",
            "pmovzxbd",
            "pmovzxwd",
            "pmovsxdq",
            "pmovzxdq",
            "vpmovsxbw",
            "vpmovsxbd",
            "vpmovsxwd",
            "vpmovzxbw",
            "vpmovzxbd",
            "vpmovzxwd",
            "vpmovsxdq",
            "vpmovzxdq",
            "vpmovqd",
            "vpmovdw",
            "vpmovdb",
            "vpmovwb",
        ],
    ),
    (
        Class::VecShuffleCross,
        &[
            "vextractf128",
            "vextracti128",
            "vextractf32x4",
            "vextracti32x4",
            "vextractf64x2",
            "vextracti64x2",
            "vextractf32x8",
            "vextracti32x8",
            "vextractf64x4",
            "vextracti64x4",
            "vperm2f128",
            "vperm2i128",
            "vpermd",
            "vpermq",
            "vpermps",
            "vpermpd",
            "vpermb",
            "vpermw",
            "vpermi2d",
            "vpermi2q",
            "vpermi2ps",
            "vpermi2pd",
            "vpermt2d",
            "vpermt2q",
            "vpermt2ps",
            "vpermt2pd",
            "vshuff32x4",
            "vshuff64x2",
            "vshufi32x4",
            "vshufi64x2",
            "valignd",
            "valignq",
            "vpcompressd",
            "vpcompressq",
            "vpexpandd",
            "vpexpandq",
        ],
    ),
    (
        Class::VecInsert,
        &[
            "vinsertf128",
            "vinserti128",
            "vinsertf32x4",
            "vinserti32x4",
            "vinsertf64x2",
            "vinserti64x2",
            "vinsertf32x8",
            "vinserti32x8",
            "vinsertf64x4",
            "vinserti64x4",
        ],
    ),
    (
        Class::VecBlend,
        &[
            "blendps",
            "blendpd",
            "pblendw",
            "vblendps",
            "vblendpd",
            "vpblendw",
            "vpblendd",
            "vblendmps",
            "vblendmpd",
            "vpblendmb",
            "vpblendmw",
            "vpblendmd",
            "vpblendmq",
        ],
    ),
    (
        Class::VecBlendVar,
        &[
            "blendvps",
            "blendvpd",
            "pblendvb",
            "vblendvps",
            "vblendvpd",
            "vpblendvb",
        ],
    ),
    (
        Class::FpAdd,
        &[
            "addps",
            "addpd",
            "addss",
            "addsd",
            "subps",
            "subpd",
            "subss",
            "subsd",
            "vaddps",
            "vaddpd",
            "vaddss",
            "vaddsd",
            "vsubps",
            "vsubpd",
            "vsubss",
            "vsubsd",
            "vaddsubps",
            "vaddsubpd",
        ],
    ),
    (
        Class::FpMul,
        &[
            "mulps",
            "mulpd",
            "mulss",
            "mulsd",
            "vmulps",
            "vmulpd",
            "vmulss",
            "vmulsd",
            "vscalefpd",
            "vscalefps",
        ],
    ),
    (
        Class::Fma,
        &[
            "vfmadd132ps",
            "vfmadd213ps",
            "vfmadd231ps",
            "vfmadd132pd",
            "vfmadd213pd",
            "vfmadd231pd",
            "vfmadd132ss",
            "vfmadd213ss",
            "vfmadd231ss",
            "vfmadd132sd",
            "vfmadd213sd",
            "vfmadd231sd",
            "vfmsub132ps",
            "vfmsub213ps",
            "vfmsub231ps",
            "vfmsub132pd",
            "vfmsub213pd",
            "vfmsub231pd",
            "vfnmadd132ps",
            "vfnmadd213ps",
            "vfnmadd231ps",
            "vfnmadd132pd",
            "vfnmadd213pd",
            "vfnmadd231pd",
            "vfnmadd231sd",
            "vfnmadd231ss",
        ],
    ),
    (
        Class::FpMinMax,
        &[
            "minps", "minpd", "minss", "minsd", "maxps", "maxpd", "maxss", "maxsd", "vminps",
            "vminpd", "vminss", "vminsd", "vmaxps", "vmaxpd", "vmaxss", "vmaxsd",
        ],
    ),
    (
        Class::FpCmp,
        &[
            "cmpps",
            "cmppd",
            "cmpss",
            "cmpsd",
            "vcmpps",
            "vcmppd",
            "vcmpss",
            "vcmpsd",
            "vfpclasspd",
            "vfpclassps",
        ],
    ),
    (
        Class::FpCmpFlags,
        &[
            "ucomiss", "ucomisd", "comiss", "comisd", "vucomiss", "vucomisd", "vcomiss", "vcomisd",
        ],
    ),
    (
        Class::FpCvt,
        &[
            "cvtdq2ps",
            "cvtps2dq",
            "cvttps2dq",
            "cvtsi2ss",
            "cvtsi2sd",
            "cvttss2si",
            "cvttsd2si",
            "cvtss2si",
            "cvtsd2si",
            "vcvtdq2ps",
            "vcvtps2dq",
            "vcvttps2dq",
            "vcvtsi2ss",
            "vcvtsi2sd",
            "vcvttss2si",
            "vcvttsd2si",
            "vcvtss2si",
            "vcvtsd2si",
            "vcvtqq2pd",
            "vcvtpd2qq",
            "vcvttpd2qq",
            "vcvtuqq2pd",
            "vcvtudq2ps",
            "vcvtusi2sd",
            "vcvtusi2ss",
        ],
    ),
    (
        Class::FpCvtWiden,
        &[
            "cvtps2pd",
            "cvtdq2pd",
            "cvtss2sd",
            "vcvtps2pd",
            "vcvtdq2pd",
            "vcvtss2sd",
            "vcvtph2ps",
        ],
    ),
    (
        Class::FpCvtNarrow,
        &[
            "cvtpd2ps",
            "cvtpd2dq",
            "cvttpd2dq",
            "cvtsd2ss",
            "vcvtpd2ps",
            "vcvtpd2dq",
            "vcvttpd2dq",
            "vcvtsd2ss",
            "vcvtps2ph",
        ],
    ),
    (
        Class::FpRound,
        &[
            "roundps",
            "roundpd",
            "roundss",
            "roundsd",
            "vroundps",
            "vroundpd",
            "vroundss",
            "vroundsd",
            "vrndscaleps",
            "vrndscalepd",
            "vrndscaless",
            "vrndscalesd",
            "vgetexppd",
            "vgetexpps",
            "vgetmantpd",
            "vgetmantps",
        ],
    ),
    (
        Class::FpDiv,
        &[
            "divps", "divpd", "divss", "divsd", "vdivps", "vdivpd", "vdivss", "vdivsd", "rcpps",
            "vrcpps", "vrcp14ps", "vrcp14pd",
        ],
    ),
    (
        Class::FpSqrt,
        &[
            "sqrtps",
            "sqrtpd",
            "sqrtss",
            "sqrtsd",
            "vsqrtps",
            "vsqrtpd",
            "vsqrtss",
            "vsqrtsd",
            "rsqrtps",
            "vrsqrtps",
            "vrsqrt14ps",
            "vrsqrt14pd",
        ],
    ),
    (
        Class::DotI8,
        &[
            "vpdpbusd",
            "vpdpbusds",
            "vpdpwssd",
            "vpdpwssds",
            "vdpbf16ps",
        ],
    ),
    (
        Class::MaskOp,
        &[
            "kandb", "kandw", "kandd", "kandq", "kandnb", "kandnw", "kandnd", "kandnq", "korb",
            "korw", "kord", "korq", "kxorb", "kxorw", "kxord", "kxorq", "kxnorb", "kxnorw",
            "kxnord", "kxnorq", "knotb", "knotw", "knotd", "knotq", "kshiftlb", "kshiftlw",
            "kshiftrb", "kshiftrw", "kunpckbw", "kaddb", "kaddw",
        ],
    ),
    (
        Class::VecTest,
        &[
            "ptest",
            "vptest",
            "vtestps",
            "vtestpd",
            "kortestb",
            "kortestw",
            "kortestd",
            "kortestq",
            "ktestb",
            "ktestw",
            "ktestd",
            "ktestq",
            "vptestmd",
            "vptestmq",
            "vptestnmd",
            "vptestnmq",
            // Vector to mask register, on the same pipes as vptestm.
            "vptestmb",
            "vptestnmb",
            "vpmovb2m",
            "vpmovw2m",
            "vpmovd2m",
            "vpmovq2m",
        ],
    ),
    (
        Class::VecToGpr,
        &[
            "movmskps",
            "movmskpd",
            "pmovmskb",
            "vmovmskps",
            "vmovmskpd",
            "vpmovmskb",
            "pextrb",
            "pextrw",
            "pextrd",
            "pextrq",
            "vpextrb",
            "vpextrw",
            "vpextrd",
            "vpextrq",
            "extractps",
            "vextractps",
        ],
    ),
    (
        Class::GprToVec,
        &[
            "pinsrb", "pinsrw", "pinsrd", "pinsrq", "vpinsrb", "vpinsrw", "vpinsrd", "vpinsrq",
        ],
    ),
    (
        Class::Gather,
        &[
            "vpgatherdd",
            "vpgatherdq",
            "vpgatherqd",
            "vpgatherqq",
            "vgatherdps",
            "vgatherdpd",
            "vgatherqps",
            "vgatherqpd",
        ],
    ),
];

/// Mnemonics whose class comes from their operands (resolved in [`classify`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Special {
    /// `mov`: move, immediate, load or store.
    Mov,
    /// A full-register vector move: register move, load or store.
    VecMov,
    /// `movd`/`movq` and friends: to or from a general register, or memory.
    MovGprVec,
    /// `movss`/`movsd`: load, store, or a merge of two registers.
    MovScalar,
    /// A broadcast: from memory, a vector register or a general register.
    Broadcast,
    /// `kmov`: between mask registers, general registers and memory.
    Kmov,
    /// `push`.
    Push,
    /// `pop`.
    Pop,
}

const SPECIALS: &[(Special, &[&str])] = &[
    (Special::Mov, &["mov"]),
    (
        Special::VecMov,
        &[
            "movaps",
            "movapd",
            "movups",
            "movupd",
            "movdqa",
            "movdqu",
            "vmovaps",
            "vmovapd",
            "vmovups",
            "vmovupd",
            "vmovdqa",
            "vmovdqu",
            "vmovdqa32",
            "vmovdqa64",
            "vmovdqu8",
            "vmovdqu16",
            "vmovdqu32",
            "vmovdqu64",
            "movntps",
            "movntpd",
            "movntdq",
            "vmovntps",
            "vmovntpd",
            "vmovntdq",
            "vmovntdqa",
            "lddqu",
            "vlddqu",
        ],
    ),
    (Special::MovGprVec, &["movd", "movq", "vmovd", "vmovq"]),
    (
        Special::MovScalar,
        &[
            "movss", "movsd", "vmovss", "vmovsd", "movlps", "movlpd", "movhps", "movhpd",
            "vmovlps", "vmovlpd", "vmovhps", "vmovhpd",
        ],
    ),
    (
        Special::Broadcast,
        &[
            "vpbroadcastb",
            "vpbroadcastw",
            "vpbroadcastd",
            "vpbroadcastq",
            "vbroadcastss",
            "vbroadcastsd",
            "vbroadcastf128",
            "vbroadcasti128",
            "vbroadcastf32x4",
            "vbroadcasti32x4",
            "vbroadcastf64x4",
            "vbroadcasti64x4",
        ],
    ),
    (Special::Kmov, &["kmovb", "kmovw", "kmovd", "kmovq"]),
    (Special::Push, &["push"]),
    (Special::Pop, &["pop"]),
];

/// What a mnemonic is, before operands are looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Fixed(Class),
    Special(Special),
    /// A register-clearing idiom when both sources are one register.
    Unlisted,
}

/// The per-mnemonic lookup, built once from the two tables above.
struct Lookup {
    kind: Vec<Kind>,
    /// Scalar floating point on xmm (`addsd`, `vcvtss2sd`, …).
    scalar_fp: Vec<bool>,
    /// `xor r, r`-style idioms whose result does not depend on the sources.
    zero_idiom: Vec<bool>,
}

fn lookup() -> &'static Lookup {
    static LOOKUP: OnceLock<Lookup> = OnceLock::new();
    LOOKUP.get_or_init(|| {
        let n = Mnemonic::values().len();
        let mut kind = vec![Kind::Unlisted; n];
        let mut scalar_fp = vec![false; n];
        let mut zero_idiom = vec![false; n];
        let names: Vec<String> = Mnemonic::values()
            .map(|m| format!("{m:?}").to_ascii_lowercase())
            .collect();
        let index = |name: &str| names.iter().position(|n| n == name);
        for (class, list) in MNEMONIC_CLASSES {
            for name in *list {
                if let Some(i) = index(name) {
                    kind[i] = Kind::Fixed(*class);
                }
            }
        }
        for (special, list) in SPECIALS {
            for name in *list {
                if let Some(i) = index(name) {
                    kind[i] = Kind::Special(*special);
                }
            }
        }
        for (i, name) in names.iter().enumerate() {
            let fp = matches!(
                kind[i],
                Kind::Fixed(
                    Class::FpAdd
                        | Class::FpMul
                        | Class::Fma
                        | Class::FpMinMax
                        | Class::FpCmp
                        | Class::FpCmpFlags
                        | Class::FpCvt
                        | Class::FpCvtWiden
                        | Class::FpCvtNarrow
                        | Class::FpRound
                        | Class::FpDiv
                        | Class::FpSqrt
                )
            );
            scalar_fp[i] = fp && (name.ends_with("ss") || name.ends_with("sd"));
            zero_idiom[i] = matches!(
                name.as_str(),
                "xor"
                    | "sub"
                    | "pxor"
                    | "vpxor"
                    | "vpxord"
                    | "vpxorq"
                    | "xorps"
                    | "xorpd"
                    | "vxorps"
                    | "vxorpd"
                    | "psubd"
                    | "vpsubd"
                    | "vpsubq"
                    | "kxorw"
                    | "kxorb"
            );
        }
        Lookup {
            kind,
            scalar_fp,
            zero_idiom,
        }
    })
}

fn reg_of(r: Register) -> Option<Reg> {
    if r == Register::None {
        return None;
    }
    let full = r.full_register();
    if full.is_gpr64() {
        Some(Reg::gpr(full.number() as u8))
    } else if full.is_zmm() {
        Some(Reg::vec(full.number() as u8))
    } else if full.is_k() {
        Some(Reg::mask(full.number() as u8))
    } else {
        None
    }
}

fn width_of_register(r: Register) -> Width {
    if r.is_zmm() {
        Width::V512
    } else if r.is_ymm() {
        Width::V256
    } else if r.is_xmm() {
        Width::V128
    } else {
        Width::Scalar
    }
}

fn width_of_bytes(bytes: usize) -> Width {
    match bytes {
        0..=8 => Width::Scalar,
        9..=16 => Width::V128,
        17..=32 => Width::V256,
        _ => Width::V512,
    }
}

/// The class of `instr` given its mnemonic's kind and its operands.
fn classify(instr: &iced_x86::Instruction, kind: Kind) -> Class {
    let op0_mem = instr.op_count() > 0 && instr.op0_kind() == OpKind::Memory;
    let any_mem = (0..instr.op_count()).any(|i| instr.op_kind(i) == OpKind::Memory);
    let reg = |i: u32| {
        if i < instr.op_count() && instr.op_kind(i) == OpKind::Register {
            instr.op_register(i)
        } else {
            Register::None
        }
    };
    match kind {
        Kind::Fixed(c) => c,
        Kind::Unlisted => Class::Unknown,
        Kind::Special(s) => match s {
            Special::Mov => {
                if op0_mem {
                    Class::Store
                } else if any_mem {
                    Class::Load
                } else if instr.op1_kind() == OpKind::Register {
                    Class::Move
                } else {
                    Class::MovImm
                }
            }
            Special::VecMov => {
                if op0_mem {
                    Class::VecStore
                } else if any_mem {
                    Class::VecLoad
                } else {
                    Class::VecMove
                }
            }
            Special::MovGprVec => {
                if op0_mem {
                    Class::VecStore
                } else if any_mem {
                    Class::VecLoad
                } else if reg(0).is_gpr() {
                    Class::VecToGpr
                } else if reg(1).is_gpr() {
                    Class::GprToVec
                } else {
                    Class::VecMove
                }
            }
            Special::MovScalar => {
                if op0_mem {
                    Class::VecStore
                } else if any_mem {
                    Class::VecLoad
                } else {
                    Class::VecShuffle
                }
            }
            Special::Broadcast => {
                if any_mem {
                    Class::VecBroadcastLoad
                } else if reg(1).is_gpr() {
                    Class::GprToVec
                } else {
                    Class::VecInsert
                }
            }
            Special::Kmov => {
                if op0_mem {
                    Class::Store
                } else if any_mem {
                    Class::Load
                } else if reg(0).is_gpr() {
                    Class::VecToGpr
                } else if reg(1).is_gpr() {
                    Class::GprToVec
                } else {
                    Class::MaskOp
                }
            }
            Special::Push => Class::Store,
            Special::Pop => Class::Load,
        },
    }
}

/// Decode the reachable x64 instructions of `bytes`.
pub(crate) fn decode(bytes: &[u8]) -> Result<Decoded, CostError> {
    let table = lookup();
    let mut decoder = Decoder::with_ip(64, bytes, 0, DecoderOptions::NONE);
    let mut factory = InstructionInfoFactory::new();
    let mut instr = iced_x86::Instruction::default();
    let insts = traverse(bytes.len(), |at| {
        decoder
            .set_position(at as usize)
            .map_err(|_| CostError::Undecodable {
                offset: at as usize,
            })?;
        decoder.set_ip(u64::from(at));
        decoder.decode_out(&mut instr);
        if instr.is_invalid() {
            return Err(CostError::Undecodable {
                offset: at as usize,
            });
        }
        let target = || instr.near_branch_target() as u32;
        let flow = match instr.flow_control() {
            FlowControl::Next => Flow::Next,
            FlowControl::UnconditionalBranch => Flow::Jump(target()),
            FlowControl::ConditionalBranch => Flow::Branch(target()),
            FlowControl::Return => Flow::Return,
            FlowControl::Interrupt | FlowControl::Exception => Flow::Stop,
            FlowControl::IndirectBranch => {
                return Err(CostError::IndirectBranch {
                    offset: at as usize,
                })
            }
            FlowControl::Call | FlowControl::IndirectCall => {
                return Err(CostError::Call {
                    offset: at as usize,
                })
            }
            FlowControl::XbeginXabortXend => {
                return Err(CostError::Undecodable {
                    offset: at as usize,
                })
            }
        };
        let m = instr.mnemonic() as usize;
        let kind = table.kind[m];
        let mut class = if matches!(flow, Flow::Next) {
            classify(&instr, kind)
        } else if matches!(flow, Flow::Stop) {
            Class::Nop
        } else {
            Class::Branch
        };
        // Width: the widest vector register operand, else the memory size.
        let mut width = Width::Scalar;
        for i in 0..instr.op_count() {
            if instr.op_kind(i) == OpKind::Register {
                width = width.max(width_of_register(instr.op_register(i)));
            }
        }
        let mem_bytes = instr.memory_size().size();
        let mem_width = width_of_bytes(mem_bytes);
        if width == Width::Scalar && class.is_memory() {
            width = mem_width;
        }
        if table.scalar_fp[m] {
            width = Width::Scalar;
        }
        let info = factory.info(&instr);
        let mut reads = Regs::default();
        let mut writes = Regs::default();
        for u in info.used_registers() {
            let Some(r) = reg_of(u.register()) else {
                continue;
            };
            match u.access() {
                OpAccess::Read | OpAccess::CondRead => reads.push(r),
                OpAccess::Write | OpAccess::CondWrite => writes.push(r),
                OpAccess::ReadWrite | OpAccess::ReadCondWrite => {
                    reads.push(r);
                    writes.push(r);
                }
                OpAccess::None | OpAccess::NoMemAccess => {}
            }
        }
        if instr.rflags_read() != 0 {
            reads.push(Reg::FLAGS);
        }
        if instr.rflags_written() != 0 || instr.rflags_modified() != 0 {
            writes.push(Reg::FLAGS);
        }
        let mut memory = Access::None;
        for mem in info.used_memory() {
            let address = Address {
                base: reg_of(mem.base()),
                index: reg_of(mem.index()),
                disp: mem.displacement() as i64,
            };
            memory = match (mem.access(), memory) {
                (OpAccess::Read | OpAccess::CondRead, Access::None) => Access::Read(address),
                (OpAccess::Write | OpAccess::CondWrite, Access::None) => Access::Write(address),
                (OpAccess::ReadWrite | OpAccess::ReadCondWrite, _) => Access::ReadWrite(address),
                (OpAccess::Write | OpAccess::CondWrite, Access::Read(_)) => {
                    Access::ReadWrite(address)
                }
                (_, m) => m,
            };
        }
        // Dependency-breaking idioms: the result does not depend on a
        // register combined with itself.
        let two_sources_same = {
            let n = instr.op_count();
            n >= 2
                && instr.op_kind(n - 1) == OpKind::Register
                && instr.op_kind(n - 2) == OpKind::Register
                && instr.op_register(n - 1) == instr.op_register(n - 2)
        };
        if table.zero_idiom[m] && two_sources_same && memory == Access::None {
            class = Class::ZeroIdiom;
            reads = Regs::default();
        }
        let lane_test = matches!(class, Class::VecTest)
            || (class == Class::VecToGpr
                && !matches!(
                    instr.mnemonic(),
                    Mnemonic::Vmovq | Mnemonic::Movq | Mnemonic::Vmovd | Mnemonic::Movd
                ))
            || (class == Class::VecToGpr && (0..instr.op_count()).any(|i| reg(&instr, i).is_k()));
        let extra_uops = u8::from(matches!(kind, Kind::Special(Special::Push | Special::Pop)));
        Ok(Inst {
            offset: at,
            len: instr.len() as u32,
            flow,
            class,
            width,
            known: true,
            reads,
            writes,
            memory,
            mem_width,
            mem_bytes: mem_bytes as u32,
            lane_test,
            extra_uops,
        })
    })?;
    Ok(Decoded { insts, unknown: 0 })
}

fn reg(instr: &iced_x86::Instruction, i: u32) -> Register {
    if instr.op_kind(i) == OpKind::Register {
        instr.op_register(i)
    } else {
        Register::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_mnemonic_exists_in_iced() {
        let names: Vec<String> = Mnemonic::values()
            .map(|m| format!("{m:?}").to_ascii_lowercase())
            .collect();
        for (_, list) in MNEMONIC_CLASSES {
            for name in *list {
                assert!(
                    names.iter().any(|n| n == name),
                    "{name} is not an iced mnemonic"
                );
            }
        }
        for (_, list) in SPECIALS {
            for name in *list {
                assert!(
                    names.iter().any(|n| n == name),
                    "{name} is not an iced mnemonic"
                );
            }
        }
    }

    #[test]
    fn no_mnemonic_is_listed_twice() {
        let mut all: Vec<&str> = MNEMONIC_CLASSES
            .iter()
            .flat_map(|(_, l)| l.iter().copied())
            .chain(SPECIALS.iter().flat_map(|(_, l)| l.iter().copied()))
            .collect();
        all.sort_unstable();
        let n = all.len();
        all.dedup();
        assert_eq!(all.len(), n, "a mnemonic appears in two lists");
    }
}
