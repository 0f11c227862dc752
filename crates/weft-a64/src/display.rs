//! Text in llvm-mc 14's syntax, preferred aliases included.

use core::fmt;

use crate::form::{Alias, Form, Kind, MemKind, BARRIERS};
use crate::operand::*;
use crate::Inst;

/// A memory operand printed with the register-offset scale `1 << .1`'s log2.
pub(crate) struct MemFmt(pub Mem, pub u8);

impl fmt::Display for MemFmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let MemFmt(m, scale) = *self;
        match m.addr {
            Addr::Offset(0) => write!(f, "[{}]", m.base),
            Addr::Offset(o) => write!(f, "[{}, #{o}]", m.base),
            Addr::PreIndex(o) => write!(f, "[{}, #{o}]!", m.base),
            Addr::PostIndex(o) => write!(f, "[{}], #{o}", m.base),
            Addr::PostReg(r) => write!(f, "[{}], {r}", m.base),
            Addr::Reg(r, e, shifted) => {
                write!(f, "[{}, {r}", m.base)?;
                match (e, shifted) {
                    (Extend::Lsl, false) => {}
                    (e, false) => write!(f, ", {}", e.name())?,
                    (e, true) => write!(f, ", {} #{scale}", e.name())?,
                }
                f.write_str("]")
            }
        }
    }
}

fn sext(v: u64, width: u32) -> i64 {
    ((v << (64 - width)) as i64) >> (64 - width)
}

fn any_movz(v: u64, width: u32) -> bool {
    (0..width / 16).any(|i| v & !(0xffffu64 << (16 * i)) == 0)
}

fn any_movn(v: u64, width: u32) -> bool {
    let inv = if width == 32 { !v & 0xffff_ffff } else { !v };
    any_movz(inv, width)
}

/// The text of one operand in the context of its slot.
pub(crate) fn operand_text(form: &Form, slot: usize, ops: &[Operand]) -> String {
    let k = form.kinds[slot];
    let o = ops[slot];
    match (k, o) {
        (Kind::UHex(..), Operand::Imm(0)) => "#0".to_string(),
        (Kind::LaneList(_), Operand::Elem(n, e, i)) => {
            let v = Operand::Elem(n, e, i).to_string();
            let (reg, lane) = v.split_once('[').unwrap_or((&v, ""));
            format!("{{ {reg} }}[{lane}")
        }
        (Kind::UHex(..), Operand::Imm(v)) => format!("#0x{v:x}"),
        (Kind::Bitmask(_), Operand::Imm(v)) => format!("#0x{:x}", v as u64),
        (Kind::OptLsl(..), Operand::Imm(0)) => String::new(),
        (Kind::OptLsl(..), Operand::Imm(v)) => format!("lsl #{v}"),
        (Kind::Shift(..), Operand::Shift(ShiftKind::Lsl, 0)) => String::new(),
        (Kind::XLr(_), Operand::Gpr(Gpr::X(30))) => String::new(),
        (Kind::Ext(sf), Operand::Extend(e, n)) => {
            let sp = ops[..2]
                .iter()
                .any(|o| matches!(o, Operand::Gpr(g) if g.is_sp()));
            let lslish = if sf {
                e == Extend::Uxtx
            } else {
                e == Extend::Uxtw
            };
            if sp && lslish {
                if n == 0 {
                    String::new()
                } else {
                    format!("lsl #{n}")
                }
            } else if n == 0 {
                e.name().to_string()
            } else {
                format!("{} #{n}", e.name())
            }
        }
        (Kind::Mem(mk), Operand::Mem(m)) => {
            let scale = match mk {
                MemKind::RegOff(s) => s,
                _ => 0,
            };
            MemFmt(m, scale).to_string()
        }
        (Kind::Imm64Bytes, Operand::Imm(v)) => {
            if v == 0 {
                "#0000000000000000".to_string()
            } else {
                format!("#{:#016x}", v as u64)
            }
        }
        (Kind::Barrier, Operand::Imm(v)) => match BARRIERS.iter().find(|b| b.0 as i64 == v) {
            Some(b) => b.1.to_string(),
            None => format!("#{v}"),
        },
        (Kind::Prfop, Operand::Imm(v)) => {
            let t = v >> 3;
            let tgt = (v >> 1) & 3;
            if t < 3 && tgt < 3 {
                format!(
                    "{}l{}{}",
                    ["pld", "pli", "pst"][t as usize],
                    tgt + 1,
                    if v & 1 == 1 { "strm" } else { "keep" }
                )
            } else {
                format!("#{v}")
            }
        }
        _ => o.to_string(),
    }
}

fn join(parts: &[String]) -> String {
    parts
        .iter()
        .filter(|s| !s.is_empty())
        .cloned()
        .collect::<Vec<_>>()
        .join(", ")
}

fn plain(mn: &str, parts: &[String]) -> String {
    let ops = join(parts);
    if ops.is_empty() {
        mn.to_string()
    } else {
        format!("{mn} {ops}")
    }
}

/// The whole instruction text.
pub(crate) fn inst_text(inst: &Inst) -> String {
    let form = inst.form();
    let ops = inst.operands();
    let t: Vec<String> = (0..ops.len()).map(|i| operand_text(form, i, ops)).collect();
    if let Some(s) = alias_text(form, ops, &t) {
        return s;
    }
    template_text(form, &t)
}

/// The text without preferred aliases.
pub(crate) fn raw_text(inst: &Inst) -> String {
    let form = inst.form();
    let ops = inst.operands();
    let t: Vec<String> = (0..ops.len()).map(|i| operand_text(form, i, ops)).collect();
    template_text(form, &t)
}

fn template_text(form: &Form, t: &[String]) -> String {
    if form.mnemonic.contains('{') {
        let mut s = form.mnemonic.to_string();
        for (i, part) in t.iter().enumerate() {
            s = s.replace(&format!("{{{i}}}"), part);
        }
        return s;
    }
    plain(form.mnemonic, t)
}

fn gpr(o: Operand) -> Option<Gpr> {
    match o {
        Operand::Gpr(g) => Some(g),
        _ => None,
    }
}

fn alias_text(form: &Form, ops: &[Operand], t: &[String]) -> Option<String> {
    let zr = |i: usize| gpr(ops[i]).is_some_and(|g| g.is_zr());
    let x64 = ops.first().and_then(|o| gpr(*o)).is_some_and(|g| g.is_64());
    let width = if x64 { 64 } else { 32 };
    match form.alias {
        Alias::None => None,
        Alias::MovSp => {
            let sp =
                gpr(ops[0]).is_some_and(|g| g.is_sp()) || gpr(ops[1]).is_some_and(|g| g.is_sp());
            (sp && ops[2] == Operand::Imm(0) && ops[3] == Operand::Imm(0))
                .then(|| plain("mov", &t[..2]))
        }
        Alias::MovReg => (zr(1) && ops[3] == Operand::Shift(ShiftKind::Lsl, 0))
            .then(|| plain("mov", &[t[0].clone(), t[2].clone()])),
        Alias::Mvn => zr(1).then(|| plain("mvn", &[t[0].clone(), t[2].clone(), t[3].clone()])),
        Alias::MovBitmask => {
            let v = match ops[2] {
                Operand::Imm(v) => v as u64,
                _ => return None,
            };
            (zr(1) && !any_movz(v, width) && !any_movn(v, width))
                .then(|| format!("mov {}, #{}", t[0], sext(v, width)))
        }
        Alias::MovZ | Alias::MovN => {
            let (i, s) = match (ops[1], ops[2]) {
                (Operand::Imm(i), Operand::Imm(s)) => (i as u64, s as u32),
                _ => return None,
            };
            if i == 0 && s != 0 {
                return None;
            }
            let mut v = i << s;
            if form.alias == Alias::MovN {
                v = if width == 32 { !v & 0xffff_ffff } else { !v };
                if any_movz(v, width) {
                    return None;
                }
                // llvm keeps `movn wN, #0xffff` (a MOVZ can't make 0xffff0000 ... but it can).
            }
            Some(format!("mov {}, #{}", t[0], sext(v, width)))
        }
        Alias::Cmp => {
            if zr(0) {
                Some(plain("cmp", &t[1..]))
            } else if zr(1) && matches!(form.kinds[1], Kind::X(_) | Kind::W(_)) {
                Some(plain("negs", &[t[0].clone(), t[2].clone(), t[3].clone()]))
            } else {
                None
            }
        }
        Alias::Cmn => zr(0).then(|| plain("cmn", &t[1..])),
        Alias::Neg => zr(1).then(|| plain("neg", &[t[0].clone(), t[2].clone(), t[3].clone()])),
        Alias::Tst => zr(0).then(|| plain("tst", &t[1..])),
        Alias::Mul => zr(3).then(|| plain("mul", &t[..3])),
        Alias::Mneg => zr(3).then(|| plain("mneg", &t[..3])),
        Alias::Cinc | Alias::Cinv | Alias::Cneg => {
            let c = match ops[3] {
                Operand::Cond(c) => c,
                _ => return None,
            };
            if ops[1] != ops[2] || matches!(c, Cond::Al | Cond::Nv) {
                return None;
            }
            let inv = c.invert().name().to_string();
            let (one, set) = match form.alias {
                Alias::Cinc => ("cinc", Some("cset")),
                Alias::Cinv => ("cinv", Some("csetm")),
                _ => ("cneg", None),
            };
            match set {
                Some(set) if zr(1) => Some(plain(set, &[t[0].clone(), inv])),
                _ => Some(plain(one, &[t[0].clone(), t[1].clone(), inv])),
            }
        }
        Alias::MovV => (ops[1] == ops[2]).then(|| plain("mov", &t[..2])),
    }
}

impl fmt::Display for Inst {
    /// The instruction as llvm-mc 14 prints it after disassembly.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&inst_text(self))
    }
}
