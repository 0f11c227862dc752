//! arm64: weft-a64's table of forms decodes each word (through an index by
//! the word's top byte, so a word is tried only against the forms that can
//! match it — the same first match as [`weft_a64::decode`]), and one table
//! ([`OP_CLASSES`]) maps a form to its [`Class`]. A word no form decodes
//! is an unknown instruction: priced by the table's conservative row,
//! counted, and taken to fall through.

use std::sync::OnceLock;

use weft_a64::{Addr, Gpr, Inst as A64Inst, Operand, Target, FORMS};

use super::{traverse, Access, Address, Decoded, Flow, Inst, Reg, Regs};
use crate::class::{Class, Width};
use crate::CostError;

/// weft-a64 form names by class. Forms not listed are [`Class::Unknown`].
///
/// Source of the grouping: the instruction groups of the Arm Neoverse V2
/// Software Optimization Guide (§3, "Instruction characteristics") and
/// LLVM's AArch64 scheduling classes, which the port tables price.
pub(crate) const OP_CLASSES: &[(Class, &[&str])] = &[
    (
        Class::IntAlu,
        &[
            "ADD_IMM_X",
            "ADD_IMM_W",
            "SUB_IMM_X",
            "SUB_IMM_W",
            "ADDS_IMM_X",
            "ADDS_IMM_W",
            "SUBS_IMM_X",
            "SUBS_IMM_W",
            "ADD_SREG_X",
            "ADD_SREG_W",
            "SUB_SREG_X",
            "SUB_SREG_W",
            "ADDS_SREG_X",
            "ADDS_SREG_W",
            "SUBS_SREG_X",
            "SUBS_SREG_W",
            "ADD_EXT_X",
            "ADD_EXT_W",
            "SUB_EXT_X",
            "SUB_EXT_W",
            "ADDS_EXT_X",
            "ADDS_EXT_W",
            "SUBS_EXT_X",
            "SUBS_EXT_W",
            "AND_IMM_X",
            "AND_IMM_W",
            "ORR_IMM_X",
            "ORR_IMM_W",
            "EOR_IMM_X",
            "EOR_IMM_W",
            "ANDS_IMM_X",
            "ANDS_IMM_W",
            "AND_SREG_X",
            "AND_SREG_W",
            "ORR_SREG_X",
            "ORR_SREG_W",
            "EOR_SREG_X",
            "EOR_SREG_W",
            "ANDS_SREG_X",
            "ANDS_SREG_W",
            "BIC_SREG_X",
            "BIC_SREG_W",
            "ORN_SREG_X",
            "ORN_SREG_W",
            "CSEL_X",
            "CSEL_W",
            "CSINC_X",
            "CSINC_W",
            "CSINV_X",
            "CSINV_W",
            "CSNEG_X",
            "CSNEG_W",
            "SXTW",
            "SXTH_X",
            "SXTB_X",
            "SXTH_W",
            "SXTB_W",
            "UXTH",
            "UXTB",
            "ADR",
        ],
    ),
    (
        Class::IntShift,
        &[
            "LSL_IMM_X",
            "LSL_IMM_W",
            "LSR_IMM_X",
            "LSR_IMM_W",
            "ASR_IMM_X",
            "ASR_IMM_W",
            "LSLV_X",
            "LSLV_W",
            "LSRV_X",
            "LSRV_W",
            "ASRV_X",
            "ASRV_W",
        ],
    ),
    (
        Class::IntMul,
        &["MADD_X", "MADD_W", "MSUB_X", "MSUB_W", "UMULH", "SMULH"],
    ),
    (Class::IntDiv, &["UDIV_X", "UDIV_W", "SDIV_X", "SDIV_W"]),
    (
        Class::MovImm,
        &["MOVZ_X", "MOVZ_W", "MOVN_X", "MOVN_W", "MOVK_X", "MOVK_W"],
    ),
    (
        Class::Branch,
        &[
            "B", "B_COND", "CBZ_X", "CBZ_W", "CBNZ_X", "CBNZ_W", "TBZ_X", "TBZ_W", "TBNZ_X",
            "TBNZ_W", "RET",
        ],
    ),
    (Class::Nop, &["NOP", "DSB", "ISB"]),
    (Class::Prefetch, &["PRFM_UOFF", "PRFM_REG"]),
    (
        Class::Load,
        &[
            "LDR_X_UOFF",
            "LDUR_X",
            "LDR_X_PRE",
            "LDR_X_POST",
            "LDR_X_REG",
            "LDR_W_UOFF",
            "LDUR_W",
            "LDR_W_PRE",
            "LDR_W_POST",
            "LDR_W_REG",
            "LDRB_W_UOFF",
            "LDURB_W",
            "LDRB_W_PRE",
            "LDRB_W_POST",
            "LDRB_W_REG",
            "LDRH_W_UOFF",
            "LDURH_W",
            "LDRH_W_PRE",
            "LDRH_W_POST",
            "LDRH_W_REG",
            "LDP_X_OFF",
            "LDP_X_PRE",
            "LDP_X_POST",
            "LDP_W_OFF",
            "LDP_W_PRE",
            "LDP_W_POST",
            "LDR_X_LIT",
            "LDR_W_LIT",
        ],
    ),
    (
        Class::Store,
        &[
            "STR_X_UOFF",
            "STUR_X",
            "STR_X_PRE",
            "STR_X_POST",
            "STR_X_REG",
            "STR_W_UOFF",
            "STUR_W",
            "STR_W_PRE",
            "STR_W_POST",
            "STR_W_REG",
            "STRB_W_UOFF",
            "STURB_W",
            "STRB_W_PRE",
            "STRB_W_POST",
            "STRB_W_REG",
            "STRH_W_UOFF",
            "STURH_W",
            "STRH_W_PRE",
            "STRH_W_POST",
            "STRH_W_REG",
            "STP_X_OFF",
            "STP_X_PRE",
            "STP_X_POST",
            "STP_W_OFF",
            "STP_W_PRE",
            "STP_W_POST",
        ],
    ),
    (
        Class::VecLoad,
        &[
            "LDR_B_UOFF",
            "LDUR_B",
            "LDR_B_PRE",
            "LDR_B_POST",
            "LDR_B_REG",
            "LDR_H_UOFF",
            "LDUR_H",
            "LDR_H_PRE",
            "LDR_H_POST",
            "LDR_H_REG",
            "LDR_S_UOFF",
            "LDUR_S",
            "LDR_S_PRE",
            "LDR_S_POST",
            "LDR_S_REG",
            "LDR_D_UOFF",
            "LDUR_D",
            "LDR_D_PRE",
            "LDR_D_POST",
            "LDR_D_REG",
            "LDR_Q_UOFF",
            "LDUR_Q",
            "LDR_Q_PRE",
            "LDR_Q_POST",
            "LDR_Q_REG",
            "LDP_S_OFF",
            "LDP_S_PRE",
            "LDP_S_POST",
            "LDP_D_OFF",
            "LDP_D_PRE",
            "LDP_D_POST",
            "LDP_Q_OFF",
            "LDP_Q_PRE",
            "LDP_Q_POST",
            "LD1_1",
            "LD1_1_POST",
            "LD1_1_POSTREG",
            "LD1_2",
            "LD1_2_POST",
            "LD1_2_POSTREG",
            "LD1_3",
            "LD1_3_POST",
            "LD1_3_POSTREG",
            "LD1_4",
            "LD1_4_POST",
            "LD1_4_POSTREG",
            "LD1_LANE",
            "LD1_LANE_POST",
            "LD1_LANE_POSTREG",
            "LDR_S_LIT",
            "LDR_D_LIT",
            "LDR_Q_LIT",
        ],
    ),
    (
        Class::VecStore,
        &[
            "STR_B_UOFF",
            "STUR_B",
            "STR_B_PRE",
            "STR_B_POST",
            "STR_B_REG",
            "STR_H_UOFF",
            "STUR_H",
            "STR_H_PRE",
            "STR_H_POST",
            "STR_H_REG",
            "STR_S_UOFF",
            "STUR_S",
            "STR_S_PRE",
            "STR_S_POST",
            "STR_S_REG",
            "STR_D_UOFF",
            "STUR_D",
            "STR_D_PRE",
            "STR_D_POST",
            "STR_D_REG",
            "STR_Q_UOFF",
            "STUR_Q",
            "STR_Q_PRE",
            "STR_Q_POST",
            "STR_Q_REG",
            "STP_S_OFF",
            "STP_S_PRE",
            "STP_S_POST",
            "STP_D_OFF",
            "STP_D_PRE",
            "STP_D_POST",
            "STP_Q_OFF",
            "STP_Q_PRE",
            "STP_Q_POST",
            "ST1_1",
            "ST1_1_POST",
            "ST1_1_POSTREG",
            "ST1_2",
            "ST1_2_POST",
            "ST1_2_POSTREG",
            "ST1_3",
            "ST1_3_POST",
            "ST1_3_POSTREG",
            "ST1_4",
            "ST1_4_POST",
            "ST1_4_POSTREG",
            "ST1_LANE",
            "ST1_LANE_POST",
            "ST1_LANE_POSTREG",
        ],
    ),
    (
        Class::VecBroadcastLoad,
        &["LD1R", "LD1R_POST", "LD1R_POSTREG"],
    ),
    (Class::VecMove, &["FMOV_S", "FMOV_D", "FMOV_H", "ORR_V"]),
    (
        Class::VecLogic,
        &[
            "AND_V",
            "EOR_V",
            "BIC_V",
            "ORN_V",
            "BSL_V",
            "BIT_V",
            "BIF_V",
            "NOT_V",
            "MOVI_B",
            "MOVI_S",
            "MOVI_H",
            "MVNI_S",
            "MVNI_H",
            "MOVI_2D",
            "FMOV_V_IMM",
            "FMOV_V_IMM_H",
            "FMOV_S_IMM",
            "FMOV_D_IMM",
            "FMOV_H_IMM",
        ],
    ),
    (
        Class::VecIntAlu,
        &[
            "ADD_V",
            "SUB_V",
            "ADDP_V",
            "CMEQ_V",
            "CMGT_V",
            "CMGE_V",
            "CMHI_V",
            "CMHS_V",
            "CMTST_V",
            "CMEQ_Z",
            "SMAX_V",
            "SMIN_V",
            "UMAX_V",
            "UMIN_V",
            "ABS_V",
            "NEG_V",
            "CNT_V",
            "SADDLP",
            "UADDLP",
            "ADDP_SCALAR",
        ],
    ),
    (
        Class::VecIntAluSlow,
        &[
            "ADDV", "SADDLV", "UADDLV", "SMAXV", "SMINV", "UMAXV", "UMINV",
        ],
    ),
    (
        Class::VecIntMul,
        &[
            "MUL_V", "MLA_V", "MLS_V", "SMULL", "SMULL2", "UMULL", "UMULL2", "SMLAL", "SMLAL2",
            "UMLAL", "UMLAL2",
        ],
    ),
    (
        Class::VecShift,
        &[
            "SSHL_V", "USHL_V", "SSHLL", "SSHLL2", "USHLL", "USHLL2", "SHRN", "SHL_V", "USHR_V",
            "SSHR_V", "SRSHR_V", "URSHR_V", "XTN", "XTN2", "SQXTN", "SQXTN2", "SQXTUN", "SQXTUN2",
            "UQXTN", "UQXTN2",
        ],
    ),
    (
        Class::VecShuffle,
        &[
            "ZIP1", "ZIP2", "UZP1", "UZP2", "TRN1", "TRN2", "EXT_V", "TBL_1", "TBL_2", "TBL_3",
            "TBL_4", "TBX_1",
        ],
    ),
    (Class::VecInsert, &["DUP_ELEM", "DUP_SCALAR", "INS_ELEM"]),
    (
        Class::FpAdd,
        &[
            "FADD_V",
            "FSUB_V",
            "FADDP_V",
            "FADD_VH",
            "FSUB_VH",
            "FADD_S",
            "FADD_D",
            "FADD_H",
            "FSUB_S",
            "FSUB_D",
            "FADDP_SCALAR",
            "FABS_V",
            "FNEG_V",
            "FABS_S",
            "FABS_D",
            "FNEG_S",
            "FNEG_D",
        ],
    ),
    (
        Class::FpMul,
        &[
            "FMUL_V",
            "FMUL_VH",
            "FMUL_ELEM",
            "FMUL_S",
            "FMUL_D",
            "FMUL_H",
            "FNMUL_S",
        ],
    ),
    (
        Class::Fma,
        &[
            "FMLA_V",
            "FMLS_V",
            "FMLA_VH",
            "FMLA_ELEM",
            "FMLS_ELEM",
            "FMADD_S",
            "FMADD_D",
            "FMSUB_S",
            "FMSUB_D",
        ],
    ),
    (
        Class::FpMinMax,
        &[
            "FMAX_V", "FMIN_V", "FMAXNM_V", "FMINNM_V", "FMAXP_V", "FMINP_V", "FMAX_S", "FMAX_D",
            "FMIN_S", "FMIN_D", "FMAXNM_S", "FMAXNM_D", "FMINNM_S", "FMINNM_D", "FMAXV", "FMINV",
            "FMAXNMV", "FMINNMV", "FCSEL_S", "FCSEL_D",
        ],
    ),
    (
        Class::FpCmp,
        &[
            "FCMEQ_V", "FCMGE_V", "FCMGT_V", "FCMEQ_Z", "FCMGE_Z", "FCMGT_Z",
        ],
    ),
    (Class::FpCmpFlags, &["FCMP_S", "FCMP_D", "FCMP_S_Z"]),
    (
        Class::FpCvt,
        &[
            "FCVTZS_V",
            "FCVTZU_V",
            "FCVTNS_V",
            "FCVTMS_V",
            "FCVTAS_V",
            "SCVTF_V",
            "UCVTF_V",
            "SCVTF_SCALAR",
            "UCVTF_SCALAR",
            "FCVTZS_SCALAR",
        ],
    ),
    (
        Class::FpCvtWiden,
        &["FCVTL", "FCVTL2", "FCVT_D_S", "FCVT_S_H"],
    ),
    (
        Class::FpCvtNarrow,
        &["FCVTN", "FCVTN2", "FCVT_S_D", "FCVT_H_S", "BFCVTN"],
    ),
    (
        Class::FpRound,
        &[
            "FRINTN_V", "FRINTM_V", "FRINTZ_V", "FRINTP_V", "FRINTA_V", "FRINTN_S", "FRINTM_S",
            "FRINTZ_S", "FRINTP_S", "FRINTN_D", "FRINTM_D",
        ],
    ),
    (Class::FpDiv, &["FDIV_V", "FDIV_S", "FDIV_D"]),
    (Class::FpSqrt, &["FSQRT_V", "FSQRT_S", "FSQRT_D"]),
    (
        Class::DotI8,
        &[
            "SDOT_V",
            "UDOT_V",
            "USDOT_V",
            "SDOT_ELEM",
            "UDOT_ELEM",
            "USDOT_ELEM",
            "SUDOT_ELEM",
            "SMMLA",
            "UMMLA",
            "USMMLA",
            "BFDOT_V",
            "BFDOT_ELEM",
            "BFMMLA",
        ],
    ),
    (
        Class::VecToGpr,
        &[
            "SMOV_W",
            "SMOV_X",
            "UMOV_BH",
            "UMOV_S",
            "UMOV_D",
            "FMOV_W_S",
            "FMOV_X_D",
            "FCVTZS_W_S",
            "FCVTZS_X_S",
            "FCVTZS_W_D",
            "FCVTZS_X_D",
            "FCVTZU_W_S",
            "FCVTZU_X_S",
            "FCVTZU_W_D",
            "FCVTZU_X_D",
            "FCVTNS_W_S",
            "FCVTNS_X_S",
            "FCVTNS_W_D",
            "FCVTNS_X_D",
            "FCVTMS_W_S",
            "FCVTMS_X_S",
            "FCVTMS_W_D",
            "FCVTMS_X_D",
        ],
    ),
    (
        Class::GprToVec,
        &[
            "DUP_GEN_W",
            "DUP_GEN_X",
            "INS_GEN_W",
            "INS_GEN_X",
            "FMOV_S_W",
            "FMOV_D_X",
            "SCVTF_S_W",
            "SCVTF_S_X",
            "SCVTF_D_W",
            "SCVTF_D_X",
            "UCVTF_S_W",
            "UCVTF_S_X",
            "UCVTF_D_W",
            "UCVTF_D_X",
        ],
    ),
];

/// Forms that read their destination (accumulate, insert, write half).
const READS_DESTINATION: &[&str] = &[
    "FMLA_V",
    "FMLS_V",
    "FMLA_VH",
    "FMLA_ELEM",
    "FMLS_ELEM",
    "MLA_V",
    "MLS_V",
    "SMLAL",
    "SMLAL2",
    "UMLAL",
    "UMLAL2",
    "SDOT_V",
    "UDOT_V",
    "USDOT_V",
    "SDOT_ELEM",
    "UDOT_ELEM",
    "USDOT_ELEM",
    "SUDOT_ELEM",
    "SMMLA",
    "UMMLA",
    "USMMLA",
    "BFDOT_V",
    "BFDOT_ELEM",
    "BFMMLA",
    "BSL_V",
    "BIT_V",
    "BIF_V",
    "INS_GEN_W",
    "INS_GEN_X",
    "INS_ELEM",
    "MOVK_X",
    "MOVK_W",
    "XTN2",
    "SQXTN2",
    "SQXTUN2",
    "UQXTN2",
    "FCVTN2",
    "TBX_1",
    "LD1_LANE",
    "LD1_LANE_POST",
    "LD1_LANE_POSTREG",
];

/// Forms that write the flags.
const WRITES_FLAGS: &[&str] = &[
    "ADDS_IMM_X",
    "ADDS_IMM_W",
    "SUBS_IMM_X",
    "SUBS_IMM_W",
    "ADDS_SREG_X",
    "ADDS_SREG_W",
    "SUBS_SREG_X",
    "SUBS_SREG_W",
    "ADDS_EXT_X",
    "ADDS_EXT_W",
    "SUBS_EXT_X",
    "SUBS_EXT_W",
    "ANDS_IMM_X",
    "ANDS_IMM_W",
    "ANDS_SREG_X",
    "ANDS_SREG_W",
    "FCMP_S",
    "FCMP_D",
    "FCMP_S_Z",
];

/// Forms that read the flags.
const READS_FLAGS: &[&str] = &[
    "B_COND", "CSEL_X", "CSEL_W", "CSINC_X", "CSINC_W", "CSINV_X", "CSINV_W", "CSNEG_X", "CSNEG_W",
    "FCSEL_S", "FCSEL_D",
];

/// Everything the decoder needs per form, built once.
struct Lookup {
    /// Forms that can match a word, by the word's top byte, in table order.
    by_top_byte: Vec<Vec<u16>>,
    class: Vec<Class>,
    reads_destination: Vec<bool>,
    writes_flags: Vec<bool>,
    reads_flags: Vec<bool>,
    /// Stores read operand 0 instead of writing it.
    store: Vec<bool>,
}

fn lookup() -> &'static Lookup {
    static LOOKUP: OnceLock<Lookup> = OnceLock::new();
    LOOKUP.get_or_init(|| {
        let n = FORMS.len();
        let mut by_top_byte = vec![Vec::new(); 256];
        for (i, form) in FORMS.iter().enumerate() {
            let mask = form.fixed_mask();
            for top in 0..256u32 {
                let word = top << 24;
                let fits = form.variants.iter().any(|v| {
                    let want = (form.base | v.bits) & mask;
                    (word ^ want) & mask & 0xff00_0000 == 0
                });
                if fits {
                    by_top_byte[top as usize].push(i as u16);
                }
            }
        }
        let index = |name: &str| FORMS.iter().position(|f| f.name == name);
        let mut class = vec![Class::Unknown; n];
        for (c, list) in OP_CLASSES {
            for name in *list {
                if let Some(i) = index(name) {
                    class[i] = *c;
                }
            }
        }
        let flags = |list: &[&str]| {
            let mut v = vec![false; n];
            for name in list {
                if let Some(i) = index(name) {
                    v[i] = true;
                }
            }
            v
        };
        let store = (0..n)
            .map(|i| matches!(class[i], Class::Store | Class::VecStore))
            .collect();
        Lookup {
            by_top_byte,
            class,
            reads_destination: flags(READS_DESTINATION),
            writes_flags: flags(WRITES_FLAGS),
            reads_flags: flags(READS_FLAGS),
            store,
        }
    })
}

/// Decode one word: the same result as [`weft_a64::decode`], trying only
/// the forms whose fixed bits can match the word's top byte.
pub(crate) fn decode_word(word: u32) -> Option<A64Inst> {
    let table = lookup();
    for &i in &table.by_top_byte[(word >> 24) as usize] {
        let form = &FORMS[i as usize];
        if let Some(ops) = form.decode(word) {
            let n = form.kinds.len();
            return A64Inst::new(form.op, &ops[..n]).ok();
        }
    }
    None
}

fn gpr(g: Gpr) -> Option<Reg> {
    match g {
        Gpr::X(n) | Gpr::W(n) => Some(Reg::gpr(n)),
        Gpr::Sp | Gpr::Wsp => Some(Reg::gpr(31)),
        Gpr::Xzr | Gpr::Wzr => None,
    }
}

/// The registers an operand names (a list names several).
fn regs_of(op: &Operand, out: &mut Regs) {
    match *op {
        Operand::Gpr(g) => {
            if let Some(r) = gpr(g) {
                out.push(r);
            }
        }
        Operand::Fp(_, n) | Operand::V(n, _) | Operand::Elem(n, _, _) => out.push(Reg::vec(n)),
        Operand::List(first, count, _) => {
            for k in 0..count {
                out.push(Reg::vec((first + k) % 32));
            }
        }
        _ => {}
    }
}

fn width_of(inst: &A64Inst, class: Class) -> Width {
    let vector = inst
        .operands()
        .iter()
        .any(|o| matches!(o, Operand::V(..) | Operand::List(..)));
    let q = inst
        .operands()
        .iter()
        .any(|o| matches!(o, Operand::Fp(weft_a64::FpWidth::Q, _)));
    if vector || q || (class == Class::DotI8) {
        Width::V128
    } else {
        Width::Scalar
    }
}

/// Decode the reachable arm64 instructions of `bytes`.
pub(crate) fn decode(bytes: &[u8]) -> Result<Decoded, CostError> {
    if !bytes.len().is_multiple_of(4) {
        return Err(CostError::Undecodable {
            offset: bytes.len() - bytes.len() % 4,
        });
    }
    let table = lookup();
    let mut unknown = 0u32;
    let insts = traverse(bytes.len(), |at| {
        let i = at as usize;
        if !i.is_multiple_of(4) {
            return Err(CostError::Undecodable { offset: i });
        }
        let word = u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let Some(inst) = decode_word(word) else {
            unknown += 1;
            return Ok(Inst {
                offset: at,
                len: 4,
                flow: Flow::Next,
                class: Class::Unknown,
                width: Width::V128,
                known: false,
                reads: Regs::default(),
                writes: Regs::default(),
                memory: Access::None,
                mem_width: Width::Scalar,
                mem_bytes: 0,
                lane_test: false,
                extra_uops: 0,
            });
        };
        let f = inst.op() as usize;
        let name = inst.form().name;
        let class = table.class[f];
        let ops = inst.operands();
        let target = ops.iter().find_map(|o| match o {
            Operand::Target(Target::Offset(d)) => Some(i64::from(at) + d),
            _ => None,
        });
        let to = |t: i64| -> Result<u32, CostError> {
            u32::try_from(t).map_err(|_| CostError::BranchOutsideCode {
                offset: i,
                target: usize::MAX,
            })
        };
        let flow = match name {
            "B" => Flow::Jump(to(target.unwrap_or(-1))?),
            "B_COND" | "CBZ_X" | "CBZ_W" | "CBNZ_X" | "CBNZ_W" | "TBZ_X" | "TBZ_W" | "TBNZ_X"
            | "TBNZ_W" => Flow::Branch(to(target.unwrap_or(-1))?),
            "RET" => Flow::Return,
            "BR" => return Err(CostError::IndirectBranch { offset: i }),
            "BL" | "BLR" => return Err(CostError::Call { offset: i }),
            "BRK" => Flow::Stop,
            _ => Flow::Next,
        };
        let mut reads = Regs::default();
        let mut writes = Regs::default();
        let mut memory = Access::None;
        let is_branch = !matches!(flow, Flow::Next);
        for (k, op) in ops.iter().enumerate() {
            match op {
                Operand::Mem(m) => {
                    let base = gpr(m.base);
                    let index = match m.addr {
                        Addr::Reg(g, _, _) | Addr::PostReg(g) => gpr(g),
                        _ => None,
                    };
                    let disp = match m.addr {
                        Addr::Offset(d) | Addr::PreIndex(d) => d,
                        _ => 0,
                    };
                    if let Some(b) = base {
                        reads.push(b);
                    }
                    if let Some(x) = index {
                        reads.push(x);
                    }
                    if matches!(
                        m.addr,
                        Addr::PreIndex(_) | Addr::PostIndex(_) | Addr::PostReg(_)
                    ) {
                        if let Some(b) = base {
                            writes.push(b);
                        }
                    }
                    let address = Address { base, index, disp };
                    memory = if table.store[f] {
                        Access::Write(address)
                    } else if class == Class::Prefetch {
                        Access::None
                    } else {
                        Access::Read(address)
                    };
                }
                _ if k == 0 && !is_branch && !table.store[f] => {
                    // The destination; a pair load also writes operand 1.
                    regs_of(op, &mut writes);
                    if table.reads_destination[f] {
                        regs_of(op, &mut reads);
                    }
                }
                _ if k == 1 && name.starts_with("LDP_") => regs_of(op, &mut writes),
                _ => regs_of(op, &mut reads),
            }
        }
        if name == "RET" {
            reads.push(Reg::gpr(30));
        }
        if table.writes_flags[f] {
            writes.push(Reg::FLAGS);
        }
        if table.reads_flags[f] {
            reads.push(Reg::FLAGS);
        }
        // Literal loads read the code itself: no register dependency.
        if name.ends_with("_LIT") {
            memory = Access::None;
        }
        let width = width_of(&inst, class);
        let mem_width = match name {
            n if n.contains("_Q_") || n.starts_with("LD1") || n.starts_with("ST1") => Width::V128,
            _ => Width::Scalar,
        };
        let element = match name {
            n if n.contains("_Q_") => 16,
            n if n.contains("_X_") || n.contains("_D_") => 8,
            n if n.contains("_W_") || n.contains("_S_") => 4,
            n if n.contains("RH_") || n.contains("_H_") || n.contains("URH") => 2,
            n if n.contains("RB_") || n.contains("_B_") || n.contains("URB") => 1,
            n if n.starts_with("LD1") || n.starts_with("ST1") => 16,
            _ => 8,
        };
        let registers = match name {
            n if n.starts_with("LDP_") || n.starts_with("STP_") || n.contains("1_2") => 2,
            n if n.contains("1_3") => 3,
            n if n.contains("1_4") => 4,
            _ => 1,
        };
        let mem_bytes = if matches!(memory, Access::None) {
            0
        } else {
            element * registers
        };
        // A second register of a pair, or each extra register of a list,
        // is one more µop through the load/store pipes.
        let extra_uops = match name {
            n if n.starts_with("LDP_") || n.starts_with("STP_") => 1,
            n if n.starts_with("LD1_2") || n.starts_with("ST1_2") => 1,
            n if n.starts_with("LD1_3") || n.starts_with("ST1_3") => 2,
            n if n.starts_with("LD1_4") || n.starts_with("ST1_4") => 3,
            _ => 0,
        };
        Ok(Inst {
            offset: at,
            len: 4,
            flow,
            class: if is_branch { Class::Branch } else { class },
            width: if is_branch { Width::Scalar } else { width },
            known: true,
            reads,
            writes,
            memory,
            mem_width,
            mem_bytes,
            lane_test: class == Class::VecToGpr,
            extra_uops,
        })
    })?;
    Ok(Decoded { insts, unknown })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_form_exists_in_weft_a64() {
        let lists = OP_CLASSES
            .iter()
            .flat_map(|(_, l)| l.iter())
            .chain(READS_DESTINATION)
            .chain(WRITES_FLAGS)
            .chain(READS_FLAGS);
        for name in lists {
            assert!(
                FORMS.iter().any(|f| f.name == *name),
                "{name} is not a weft-a64 form"
            );
        }
    }

    #[test]
    fn indexed_decode_agrees_with_weft_a64_on_sampled_words() {
        // Every form's base word (each variant), and a spread of other words.
        let mut words: Vec<u32> = FORMS
            .iter()
            .flat_map(|f| f.variants.iter().map(move |v| f.base | v.bits))
            .collect();
        let mut x = 0x9e37_79b9u32;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            words.push(x);
        }
        for w in words {
            assert_eq!(decode_word(w), weft_a64::decode(w), "word {w:#010x}");
        }
    }
}
