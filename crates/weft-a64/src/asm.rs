//! The assembler kernel authors use: emit instructions, bind labels, and
//! let `finish` resolve branch fixups.

use crate::operand::*;
use crate::{EncodeError, Inst, IntoOperands, Op};

/// Collects instructions and resolves label fixups at [`Assembler::finish`].
#[derive(Debug, Default)]
pub struct Assembler {
    words: Vec<u32>,
    insts: Vec<Option<Inst>>,
    labels: Vec<Option<usize>>,
}

macro_rules! mnemonics {
    ($($name:ident / $mn:literal ( $($a:ident),* );)*) => {
        impl Assembler {
            $(
                #[doc = concat!("Emit `", $mn, "`: the first `", $mn, "` form of the table that takes these operands.")]
                pub fn $name(&mut self, $($a: impl Into<Operand>),*) -> Result<(), EncodeError> {
                    self.emit(Inst::with_mnemonic($mn, [$($a.into()),*])?)
                }
            )*
        }
    };
}

mnemonics! {
    add/"add"(d, n, m); sub/"sub"(d, n, m); adds/"adds"(d, n, m); subs/"subs"(d, n, m);
    and/"and"(d, n, m); orr/"orr"(d, n, m); eor/"eor"(d, n, m); ands/"ands"(d, n, m); bic/"bic"(d, n, m);
    movz/"movz"(d, i, sh); movk/"movk"(d, i, sh); movn/"movn"(d, i, sh);
    lsl/"lsl"(d, n, m); lsr/"lsr"(d, n, m); asr/"asr"(d, n, m);
    madd/"madd"(d, n, m, a); msub/"msub"(d, n, m, a); udiv/"udiv"(d, n, m); sdiv/"sdiv"(d, n, m);
    csel/"csel"(d, n, m, c); csinc/"csinc"(d, n, m, c);
    b/"b"(t); bl/"bl"(t); cbz/"cbz"(r, t); cbnz/"cbnz"(r, t); tbz/"tbz"(r, bit, t); tbnz/"tbnz"(r, bit, t);
    br/"br"(r); blr/"blr"(r); adr/"adr"(d, t); brk/"brk"(i); dsb/"dsb"(o);
    ldur/"ldur"(t, m); stur/"stur"(t, m);
    ldrb/"ldrb"(t, m); strb/"strb"(t, m); ldrh/"ldrh"(t, m); strh/"strh"(t, m);
    ldp/"ldp"(t, t2, m); stp/"stp"(t, t2, m); prfm/"prfm"(op, m);
    ld1/"ld1"(list, m); st1/"st1"(list, m); ld1r/"ld1r"(list, m);
    dup/"dup"(d, n); umov/"umov"(d, n); movi/"movi"(d, i); fmov/"fmov"(d, n);
    fadd/"fadd"(d, n, m); fsub/"fsub"(d, n, m); fmul/"fmul"(d, n, m); fdiv/"fdiv"(d, n, m);
    fmax/"fmax"(d, n, m); fmin/"fmin"(d, n, m); fmaxnm/"fmaxnm"(d, n, m); fminnm/"fminnm"(d, n, m);
    fmla/"fmla"(d, n, m); fmls/"fmls"(d, n, m); faddp/"faddp"(d, n, m); fmaxp/"fmaxp"(d, n, m);
    fmaxv/"fmaxv"(d, n); fminv/"fminv"(d, n);
    fabs/"fabs"(d, n); fneg/"fneg"(d, n); fsqrt/"fsqrt"(d, n);
    frintn/"frintn"(d, n); frintm/"frintm"(d, n); frintz/"frintz"(d, n); frintp/"frintp"(d, n);
    fcvtl/"fcvtl"(d, n); fcvtl2/"fcvtl2"(d, n); fcvtn/"fcvtn"(d, n); fcvtn2/"fcvtn2"(d, n);
    fcvtzs/"fcvtzs"(d, n); fcvtzu/"fcvtzu"(d, n); fcvtns/"fcvtns"(d, n); fcvtms/"fcvtms"(d, n);
    scvtf/"scvtf"(d, n); ucvtf/"ucvtf"(d, n); fcvt/"fcvt"(d, n);
    fmadd/"fmadd"(d, n, m, a); fmsub/"fmsub"(d, n, m, a);
    fcmgt/"fcmgt"(d, n, m); fcmge/"fcmge"(d, n, m); fcmeq/"fcmeq"(d, n, m);
    mla/"mla"(d, n, m); addp/"addp"(d, n, m); addv/"addv"(d, n);
    saddlp/"saddlp"(d, n); saddlv/"saddlv"(d, n);
    smull/"smull"(d, n, m); smull2/"smull2"(d, n, m); smlal/"smlal"(d, n, m); smlal2/"smlal2"(d, n, m);
    sshll/"sshll"(d, n, s); ushll/"ushll"(d, n, s); sshll2/"sshll2"(d, n, s); ushll2/"ushll2"(d, n, s);
    xtn/"xtn"(d, n); xtn2/"xtn2"(d, n); sqxtn/"sqxtn"(d, n); shrn/"shrn"(d, n, s);
    shl/"shl"(d, n, s); ushr/"ushr"(d, n, s); sshr/"sshr"(d, n, s); srshr/"srshr"(d, n, s);
    bsl/"bsl"(d, n, m); bit/"bit"(d, n, m); bif/"bif"(d, n, m);
    cmeq/"cmeq"(d, n, m); cmgt/"cmgt"(d, n, m); cmge/"cmge"(d, n, m);
    zip1/"zip1"(d, n, m); zip2/"zip2"(d, n, m); uzp1/"uzp1"(d, n, m); uzp2/"uzp2"(d, n, m);
    trn1/"trn1"(d, n, m); trn2/"trn2"(d, n, m); ext/"ext"(d, n, m, i); tbl/"tbl"(d, list, m);
    sdot/"sdot"(d, n, m); udot/"udot"(d, n, m); usdot/"usdot"(d, n, m);
    smmla/"smmla"(d, n, m); ummla/"ummla"(d, n, m); usmmla/"usmmla"(d, n, m);
    bfdot/"bfdot"(d, n, m); bfmmla/"bfmmla"(d, n, m);
    abs/"abs"(d, n); cnt/"cnt"(d, n); smov/"smov"(d, n); mvni/"mvni"(d, i);
    sxtw/"sxtw"(d, n); sxth/"sxth"(d, n); sxtb/"sxtb"(d, n); uxth/"uxth"(d, n); uxtb/"uxtb"(d, n);
    csinv/"csinv"(d, n, m, c); csneg/"csneg"(d, n, m, c); smaxv/"smaxv"(d, n); sminv/"sminv"(d, n);
    umaxv/"umaxv"(d, n); uminv/"uminv"(d, n); sqxtun/"sqxtun"(d, n); uqxtn/"uqxtn"(d, n);
}

impl Assembler {
    /// An empty assembler.
    pub fn new() -> Assembler {
        Assembler::default()
    }

    /// A fresh, unbound label.
    pub fn new_label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() as u32 - 1)
    }

    /// Bind `label` to the next instruction. Binding twice is an error.
    pub fn bind(&mut self, label: Label) -> Result<(), EncodeError> {
        let slot = self
            .labels
            .get_mut(label.0 as usize)
            .ok_or(EncodeError::UnresolvedLabel)?;
        if slot.is_some() {
            return Err(EncodeError::LabelRebound);
        }
        *slot = Some(self.words.len());
        Ok(())
    }

    /// The number of instructions emitted so far.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// True when nothing has been emitted.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Append `inst`; a label target is resolved at [`Assembler::finish`].
    pub fn emit(&mut self, inst: Inst) -> Result<(), EncodeError> {
        let has_label = inst
            .operands()
            .iter()
            .any(|o| matches!(o, Operand::Target(Target::Label(_))));
        if has_label {
            self.words.push(0);
            self.insts.push(Some(inst));
        } else {
            self.words.push(inst.encode()?);
            self.insts.push(None);
        }
        Ok(())
    }

    /// Emit the instruction of form `op` with `ops` (see [`Inst::new`]).
    pub fn op(&mut self, op: Op, ops: impl IntoOperands) -> Result<(), EncodeError> {
        self.emit(Inst::new(op, ops)?)
    }

    /// `ret` (to x30).
    pub fn ret(&mut self) -> Result<(), EncodeError> {
        self.op(Op::RET, ())
    }

    /// `nop`.
    pub fn nop(&mut self) -> Result<(), EncodeError> {
        self.op(Op::NOP, ())
    }

    /// `isb`.
    pub fn isb(&mut self) -> Result<(), EncodeError> {
        self.op(Op::ISB, ())
    }

    /// `b.<cond> target`.
    pub fn b_cond(&mut self, cond: Cond, target: impl Into<Operand>) -> Result<(), EncodeError> {
        self.op(Op::B_COND, (cond, target.into()))
    }

    /// `cmp n, m|#imm` (SUBS to the zero register).
    pub fn cmp(&mut self, n: Gpr, m: impl Into<Operand>) -> Result<(), EncodeError> {
        self.subs(zr_like(n), n, m)
    }

    /// `mov`: register to register (ORR, or ADD #0 when SP is involved),
    /// immediate to register (MOVZ, MOVN or ORR bitmask, whichever encodes),
    /// vector to vector (ORR), and the FMOV/INS/UMOV/DUP moves.
    pub fn mov(&mut self, d: impl Into<Operand>, n: impl Into<Operand>) -> Result<(), EncodeError> {
        self.emit(mov_inst(d.into(), n.into())?)
    }

    /// `mul d, n, m`: MADD with a zero addend for general registers, the
    /// vector MUL otherwise.
    pub fn mul(
        &mut self,
        d: impl Into<Operand>,
        n: impl Into<Operand>,
        m: impl Into<Operand>,
    ) -> Result<(), EncodeError> {
        let (d, n, m) = (d.into(), n.into(), m.into());
        match d {
            Operand::Gpr(g) => self.madd(d, n, m, zr_like(g)),
            _ => self.emit(Inst::with_mnemonic("mul", [d, n, m])?),
        }
    }

    /// `neg d, m`: SUB from the zero register, or the vector NEG.
    pub fn neg(&mut self, d: impl Into<Operand>, m: impl Into<Operand>) -> Result<(), EncodeError> {
        let (d, m) = (d.into(), m.into());
        match d {
            Operand::Gpr(g) => self.sub(d, zr_like(g), m),
            _ => self.emit(Inst::with_mnemonic("neg", [d, m])?),
        }
    }

    /// `cmn n, m|#imm` (ADDS to the zero register).
    pub fn cmn(&mut self, n: Gpr, m: impl Into<Operand>) -> Result<(), EncodeError> {
        self.adds(zr_like(n), n, m)
    }

    /// `tst n, m|#imm` (ANDS to the zero register).
    pub fn tst(&mut self, n: Gpr, m: impl Into<Operand>) -> Result<(), EncodeError> {
        self.ands(zr_like(n), n, m)
    }

    /// `cset d, cond` (CSINC d, zr, zr, !cond).
    pub fn cset(&mut self, d: Gpr, cond: Cond) -> Result<(), EncodeError> {
        let zr = zr_like(d);
        self.csinc(d, zr, zr, cond.invert())
    }

    /// `sxtl d, n` (SSHLL #0): sign-extend each element to twice its width.
    pub fn sxtl(
        &mut self,
        d: impl Into<Operand>,
        n: impl Into<Operand>,
    ) -> Result<(), EncodeError> {
        self.sshll(d, n, 0)
    }

    /// `uxtl d, n` (USHLL #0): zero-extend each element to twice its width.
    pub fn uxtl(
        &mut self,
        d: impl Into<Operand>,
        n: impl Into<Operand>,
    ) -> Result<(), EncodeError> {
        self.ushll(d, n, 0)
    }

    /// `sxtl2 d, n` (SSHLL2 #0): the upper half, sign-extended.
    pub fn sxtl2(
        &mut self,
        d: impl Into<Operand>,
        n: impl Into<Operand>,
    ) -> Result<(), EncodeError> {
        self.sshll2(d, n, 0)
    }

    /// `uxtl2 d, n` (USHLL2 #0): the upper half, zero-extended.
    pub fn uxtl2(
        &mut self,
        d: impl Into<Operand>,
        n: impl Into<Operand>,
    ) -> Result<(), EncodeError> {
        self.ushll2(d, n, 0)
    }

    /// `ldr t, m`: unsigned-offset, pre/post-index, register-offset and
    /// literal forms; a negative or unaligned offset falls back to LDUR.
    pub fn ldr(&mut self, t: impl Into<Operand>, m: impl Into<Operand>) -> Result<(), EncodeError> {
        let (t, m) = (t.into(), m.into());
        let i = Inst::with_mnemonic("ldr", [t, m])
            .or_else(|e| Inst::with_mnemonic("ldur", [t, m]).map_err(|_| e))?;
        self.emit(i)
    }

    /// `str t, m`: like [`Assembler::ldr`], falling back to STUR.
    pub fn str(&mut self, t: impl Into<Operand>, m: impl Into<Operand>) -> Result<(), EncodeError> {
        let (t, m) = (t.into(), m.into());
        let i = Inst::with_mnemonic("str", [t, m])
            .or_else(|e| Inst::with_mnemonic("stur", [t, m]).map_err(|_| e))?;
        self.emit(i)
    }

    /// The words, with every label fixup resolved.
    pub fn finish(self) -> Result<Vec<u32>, EncodeError> {
        let mut words = self.words;
        for (pc, inst) in self.insts.iter().enumerate() {
            let Some(inst) = inst else { continue };
            let mut ops = inst.operands().to_vec();
            for o in ops.iter_mut() {
                if let Operand::Target(Target::Label(l)) = *o {
                    let at = self
                        .labels
                        .get(l.0 as usize)
                        .copied()
                        .flatten()
                        .ok_or(EncodeError::UnresolvedLabel)?;
                    *o = Operand::Target(Target::Offset((at as i64 - pc as i64) * 4));
                }
            }
            let form = inst.form();
            words[pc] = form.encode(&ops).map_err(|e| match e {
                EncodeError::ImmOutOfRange { form, value, .. } => EncodeError::BranchOutOfRange {
                    form,
                    offset: value,
                },
                e => e,
            })?;
        }
        Ok(words)
    }

    /// The code as little-endian bytes.
    pub fn finish_bytes(self) -> Result<Vec<u8>, EncodeError> {
        Ok(self
            .finish()?
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect())
    }
}

fn zr_like(g: Gpr) -> Gpr {
    if g.is_64() {
        XZR
    } else {
        WZR
    }
}

fn mov_inst(d: Operand, n: Operand) -> Result<Inst, EncodeError> {
    use Operand as O;
    match (d, n) {
        (O::Gpr(dg), O::Gpr(ng)) if dg.is_sp() || ng.is_sp() => Inst::new(
            if dg.is_64() {
                Op::ADD_IMM_X
            } else {
                Op::ADD_IMM_W
            },
            (d, n, 0),
        ),
        (O::Gpr(dg), O::Gpr(_)) => {
            let (op, zr) = if dg.is_64() {
                (Op::ORR_SREG_X, XZR)
            } else {
                (Op::ORR_SREG_W, WZR)
            };
            Inst::new(op, (d, zr, n))
        }
        (O::Gpr(dg), O::Imm(v)) => {
            let x64 = dg.is_64();
            let width = if x64 { 64 } else { 32 };
            let u = if x64 {
                v as u64
            } else {
                v as u64 & 0xffff_ffff
            };
            let inv = if x64 { !u } else { !u & 0xffff_ffff };
            for sh in (0..width).step_by(16) {
                if u & !(0xffffu64 << sh) == 0 {
                    let op = if x64 { Op::MOVZ_X } else { Op::MOVZ_W };
                    return Inst::new(op, (d, (u >> sh) as i64, sh as i64));
                }
            }
            for sh in (0..width).step_by(16) {
                if inv & !(0xffffu64 << sh) == 0 {
                    let op = if x64 { Op::MOVN_X } else { Op::MOVN_W };
                    return Inst::new(op, (d, (inv >> sh) as i64, sh as i64));
                }
            }
            let (op, zr) = if x64 {
                (Op::ORR_IMM_X, XZR)
            } else {
                (Op::ORR_IMM_W, WZR)
            };
            Inst::new(op, (d, zr, u as i64))
        }
        (O::V(..), O::V(..)) => Inst::new(Op::ORR_V, (d, n, n)),
        (O::Elem(..), O::Gpr(_)) => Inst::with_mnemonic("mov", [d, n]),
        _ => Inst::with_mnemonic("mov", [d, n]).or_else(|_| Inst::with_mnemonic("fmov", [d, n])),
    }
}
