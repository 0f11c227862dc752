//! Operand samples that hunt for encoding bugs, shared by
//! `cargo xtask check-encodings` and the property tests: every register
//! number in each register slot, every value of small fields, the ends and
//! scale steps of immediates, and seeded random picks. Deterministic: the
//! same seed gives the same instructions.

use crate::form::{Form, Kind, MemKind, Shape, Variant, BARRIERS};
use crate::operand::*;
use crate::{Inst, FORMS};

/// SplitMix64: a tiny deterministic generator (no `rand` dependency).
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A value in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    /// A value in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
}

fn shape_of(var: &Variant, form: &Form, slot: usize) -> Option<Shape> {
    let vi = form.kinds[..slot]
        .iter()
        .filter(|k| crate::form::is_shaped(**k))
        .count();
    Form::shape(var, vi)
}

fn gprs(x64: bool, r31: Gpr) -> Vec<Operand> {
    let mut v: Vec<Operand> = (0..31)
        .map(|n| Operand::Gpr(if x64 { Gpr::X(n) } else { Gpr::W(n) }))
        .collect();
    v.push(Operand::Gpr(r31));
    v
}

/// Ends, scale steps and random picks of an unsigned field of `width` bits.
fn uimm_values(width: u32, rng: &mut SplitMix64) -> Vec<i64> {
    let max = (1i64 << width) - 1;
    let mut v = vec![0, 1, max, max - 1];
    v.extend((0..width).map(|b| 1i64 << b));
    v.extend((0..6).map(|_| rng.range(0, max)));
    v
}

/// Ends, every scale step, and random multiples of a signed scaled field.
fn simm_values(width: u32, scale: u32, rng: &mut SplitMix64) -> Vec<i64> {
    let lim = 1i64 << (width - 1);
    let (lo, hi) = (-lim, lim - 1);
    let mut v = vec![0, 1, -1, lo, hi, lo + 1, hi - 1];
    v.extend((0..width - 1).map(|b| 1i64 << b));
    v.extend((0..width - 1).map(|b| -(1i64 << b)));
    v.extend((0..6).map(|_| rng.range(lo, hi)));
    v.into_iter().map(|x| x << scale).collect()
}

fn all_bitmasks(x64: bool) -> Vec<u64> {
    (0..(1u32 << 13))
        .filter_map(|f| {
            crate::decode_bitmask(f, x64).filter(|&v| crate::encode_bitmask(v, x64) == Some(f))
        })
        .collect()
}

/// The values that hunt for bugs in one operand slot of `form` in variant `var`.
pub fn slot_values(form: &Form, var: &Variant, slot: usize, rng: &mut SplitMix64) -> Vec<Operand> {
    let sh = shape_of(var, form, slot);
    let k = form.kinds[slot];
    let imms = |v: Vec<i64>| v.into_iter().map(Operand::Imm).collect::<Vec<_>>();
    match k {
        Kind::X(_) | Kind::XLr(_) => gprs(true, Gpr::Xzr),
        Kind::XSp(_) => gprs(true, Gpr::Sp),
        Kind::W(_) => gprs(false, Gpr::Wzr),
        Kind::WSp(_) => gprs(false, Gpr::Wsp),
        Kind::ExtRm(sf) => {
            let mut v = gprs(false, Gpr::Wzr);
            if sf {
                v.extend(gprs(true, Gpr::Xzr));
            }
            v
        }
        Kind::Fp(w, _) => (0..32).map(|n| Operand::Fp(w, n)).collect(),
        Kind::VFp(_) => match sh {
            Some(Shape::F(w)) => (0..32).map(|n| Operand::Fp(w, n)).collect(),
            _ => vec![],
        },
        Kind::V(_) => match sh {
            Some(Shape::A(a)) => (0..32).map(|n| Operand::V(n, a)).collect(),
            _ => vec![],
        },
        Kind::List(c, _) => match sh {
            Some(Shape::A(a)) => (0..32).map(|n| Operand::List(n, c, a)).collect(),
            _ => vec![],
        },
        Kind::Elem(..) | Kind::LaneList(_) => match sh {
            Some(Shape::E(e)) => {
                let max = match e {
                    Elem::B => 15,
                    Elem::H => 7,
                    Elem::S | Elem::B4 | Elem::H2 => 3,
                    Elem::D => 1,
                };
                let mut v: Vec<Operand> = (0..32)
                    .map(|n| Operand::Elem(n, e, rng.range(0, max) as u8))
                    .collect();
                v.extend((0..=max).map(|i| Operand::Elem(rng.range(0, 31) as u8, e, i as u8)));
                v
            }
            _ => vec![],
        },
        Kind::UImm(_, w) | Kind::UHex(_, w) => imms(uimm_values(w as u32, rng)),
        Kind::OptLsl(_, w, s) => imms((0..(1i64 << w)).map(|i| i * s as i64).collect()),
        Kind::Bitmask(x) => {
            let all = all_bitmasks(x);
            let mut v = vec![all[0], all[all.len() - 1]];
            v.extend((0..40).map(|_| all[rng.below(all.len() as u64) as usize]));
            v.into_iter().map(|b| Operand::Imm(b as i64)).collect()
        }
        Kind::Shift(sf, ror) => {
            let max = if sf { 63 } else { 31 };
            let kinds: &[ShiftKind] = if ror {
                &[
                    ShiftKind::Lsl,
                    ShiftKind::Lsr,
                    ShiftKind::Asr,
                    ShiftKind::Ror,
                ]
            } else {
                &[ShiftKind::Lsl, ShiftKind::Lsr, ShiftKind::Asr]
            };
            let mut v = vec![];
            for &t in kinds {
                for n in [0, 1, max, rng.range(0, max)] {
                    v.push(Operand::Shift(t, n as u8));
                }
            }
            v
        }
        Kind::Ext(_) => {
            let mut v = vec![];
            for e in 0..8 {
                for n in 0..=4 {
                    v.push(Operand::Extend(Extend::from_bits(e), n));
                }
            }
            v
        }
        Kind::Cond(_) => (0..16).map(|c| Operand::Cond(Cond::from_bits(c))).collect(),
        Kind::Br(_, w) => simm_values(w as u32, 2, rng)
            .into_iter()
            .map(offset)
            .collect(),
        Kind::Adr => simm_values(21, 0, rng).into_iter().map(offset).collect(),
        Kind::TbBit(x) => imms(if x {
            (32..64).collect()
        } else {
            (0..32).collect()
        }),
        Kind::LslImm(x) => imms((1..if x { 64 } else { 32 }).collect()),
        Kind::ShlImm(_) | Kind::ShrImm(_) => {
            let vi = match k {
                Kind::ShlImm(i) | Kind::ShrImm(i) => i as usize,
                _ => 0,
            };
            let es = match Form::shape(var, vi) {
                Some(Shape::A(a)) => a.esize() as i64,
                _ => 8,
            };
            imms(if matches!(k, Kind::ShlImm(_)) {
                (0..es).collect()
            } else {
                (1..=es).collect()
            })
        }
        Kind::FImm(_) | Kind::VFImm => (0..=255u8).map(Operand::FImm).collect(),
        Kind::Imm8Split => imms(uimm_values(8, rng)),
        Kind::Imm64Bytes => (0..256u64)
            .map(|m| {
                let mut v = 0u64;
                for b in 0..8 {
                    if m >> b & 1 == 1 {
                        v |= 0xff << (8 * b);
                    }
                }
                Operand::Imm(v as i64)
            })
            .collect(),
        Kind::Barrier => BARRIERS.iter().map(|b| Operand::Imm(b.0 as i64)).collect(),
        Kind::Prfop => imms((0..32).collect()),
        Kind::ExtIdx => imms((0..16).collect()),
        Kind::Mem(mk) => mem_values(mk, rng),
    }
}

fn mem_values(mk: MemKind, rng: &mut SplitMix64) -> Vec<Operand> {
    let mut bases: Vec<Gpr> = (0..31).map(Gpr::X).collect();
    bases.push(Gpr::Sp);
    let rb = |rng: &mut SplitMix64| bases[rng.below(32) as usize];
    let mut out = vec![];
    let mut addrs: Vec<Addr> = match mk {
        MemKind::Base => vec![Addr::Offset(0)],
        MemKind::Uoff(s) => uimm_values(12, rng)
            .into_iter()
            .map(|v| Addr::Offset(v << s))
            .collect(),
        MemKind::Simm9 => simm_values(9, 0, rng)
            .into_iter()
            .map(Addr::Offset)
            .collect(),
        MemKind::Pre9 => simm_values(9, 0, rng)
            .into_iter()
            .map(Addr::PreIndex)
            .collect(),
        MemKind::Post9 => simm_values(9, 0, rng)
            .into_iter()
            .map(Addr::PostIndex)
            .collect(),
        MemKind::PairOff(s) => simm_values(7, s as u32, rng)
            .into_iter()
            .map(Addr::Offset)
            .collect(),
        MemKind::PairPre(s) => simm_values(7, s as u32, rng)
            .into_iter()
            .map(Addr::PreIndex)
            .collect(),
        MemKind::PairPost(s) => simm_values(7, s as u32, rng)
            .into_iter()
            .map(Addr::PostIndex)
            .collect(),
        MemKind::RegOff(_) => {
            let mut v = vec![];
            for n in 0..32u8 {
                let x = if n == 31 { Gpr::Xzr } else { Gpr::X(n) };
                let w = if n == 31 { Gpr::Wzr } else { Gpr::W(n) };
                let sh = rng.below(2) == 1;
                v.push(Addr::Reg(x, Extend::Lsl, sh));
                v.push(Addr::Reg(
                    w,
                    [Extend::Uxtw, Extend::Sxtw][rng.below(2) as usize],
                    sh,
                ));
                v.push(Addr::Reg(x, Extend::Sxtx, !sh));
            }
            v
        }
        MemKind::PostImm(_) => vec![],
        MemKind::PostReg => (0..31).map(|n| Addr::PostReg(Gpr::X(n))).collect(),
    };
    if let MemKind::PostImm(_) = mk {
        // The only legal amount depends on the list; the caller fixes it up.
        addrs.push(Addr::PostIndex(-1));
    }
    for a in addrs.iter() {
        out.push(Operand::Mem(Mem {
            base: rb(rng),
            addr: *a,
        }));
    }
    for b in bases.clone() {
        let a = addrs[rng.below(addrs.len() as u64) as usize];
        out.push(Operand::Mem(Mem { base: b, addr: a }));
    }
    out
}

/// Replace a placeholder post-index amount with the one the list needs.
fn fix_post_imm(form: &Form, ops: &mut [Operand]) {
    for (i, k) in form.kinds.iter().enumerate() {
        if let (Kind::Mem(MemKind::PostImm(list)), Operand::Mem(m)) = (k, ops[i]) {
            let bytes = match ops[0] {
                Operand::List(_, n, a) if *list => n as i64 * a.bytes() as i64,
                Operand::List(_, n, a) => n as i64 * (a.esize() / 8) as i64,
                Operand::Elem(_, e, _) => 1i64 << e.log2_bytes(),
                _ => continue,
            };
            ops[i] = Operand::Mem(Mem {
                base: m.base,
                addr: Addr::PostIndex(bytes),
            });
        }
    }
}

fn random_fill(
    form: &Form,
    var: &Variant,
    values: &[Vec<Operand>],
    rng: &mut SplitMix64,
) -> Vec<Operand> {
    let _ = var;
    let mut ops: Vec<Operand> = values
        .iter()
        .map(|v| v[rng.below(v.len() as u64) as usize])
        .collect();
    fix_post_imm(form, &mut ops);
    ops
}

/// Valid instructions of `form`: each slot swept through its
/// [`slot_values`] (others random), plus `extra` random ones per variant.
pub fn cases(form: &Form, rng: &mut SplitMix64, extra: usize) -> Vec<Inst> {
    let mut out = vec![];
    for var in form.variants {
        let values: Vec<Vec<Operand>> = (0..form.kinds.len())
            .map(|s| slot_values(form, var, s, rng))
            .collect();
        if values.iter().any(|v| v.is_empty()) {
            continue;
        }
        for (slot, vals) in values.iter().enumerate() {
            for &val in vals {
                for _attempt in 0..8 {
                    let mut ops = random_fill(form, var, &values, rng);
                    ops[slot] = val;
                    fix_post_imm(form, &mut ops);
                    if let Ok(i) = Inst::new(form.op, ops.as_slice()) {
                        out.push(i);
                        break;
                    }
                }
            }
        }
        for _ in 0..extra {
            let ops = random_fill(form, var, &values, rng);
            if let Ok(i) = Inst::new(form.op, ops.as_slice()) {
                out.push(i);
            }
        }
    }
    out
}

/// One random valid instruction of a random form (for property tests).
pub fn random_inst(rng: &mut SplitMix64) -> Inst {
    loop {
        let form = &FORMS[rng.below(FORMS.len() as u64) as usize];
        let var = &form.variants[rng.below(form.variants.len() as u64) as usize];
        let values: Vec<Vec<Operand>> = (0..form.kinds.len())
            .map(|s| slot_values(form, var, s, rng))
            .collect();
        if values.iter().any(|v| v.is_empty()) {
            continue;
        }
        let ops = random_fill(form, var, &values, rng);
        if let Ok(i) = Inst::new(form.op, ops.as_slice()) {
            return i;
        }
    }
}

/// Inputs the encoder must reject, one list per form: out-of-range
/// immediates, unallocated arrangements and register-class mix-ups, each
/// made by breaking one slot of a valid instruction. Every returned
/// instruction fails [`Inst::encode`], and no other form with the same
/// mnemonic accepts its operands either (so its text is invalid assembly,
/// not a sibling form).
pub fn negatives(form: &Form, rng: &mut SplitMix64) -> Vec<Inst> {
    let Some(good) = cases(form, rng, 0).into_iter().nth(3) else {
        return vec![];
    };
    let mut out = vec![];
    for (slot, k) in form.kinds.iter().enumerate() {
        let mut bad = vec![];
        match (*k, good.operands()[slot]) {
            (Kind::X(_) | Kind::XSp(_), Operand::Gpr(_)) => {
                bad.push(Operand::Gpr(Gpr::W(rng.range(0, 30) as u8)))
            }
            (Kind::W(_) | Kind::WSp(_), Operand::Gpr(_)) => {
                bad.push(Operand::Gpr(Gpr::X(rng.range(0, 30) as u8)))
            }
            (Kind::UImm(_, w), _) => bad.push(Operand::Imm((1i64 << w) + 1)),
            (Kind::Bitmask(_), _) => bad.push(Operand::Imm(0)),
            (Kind::Shift(sf, _), _) => {
                bad.push(Operand::Shift(ShiftKind::Lsl, if sf { 64 } else { 32 }))
            }
            (Kind::Ext(_), Operand::Extend(e, _)) => bad.push(Operand::Extend(e, 5)),
            (Kind::Br(_, w), _) => {
                bad.push(offset(1i64 << (w + 1)));
                bad.push(offset(2));
            }
            (Kind::LslImm(x), _) => bad.push(Operand::Imm(if x { 64 } else { 32 })),
            (Kind::ShrImm(_), _) => bad.push(Operand::Imm(0)),
            (Kind::TbBit(true), _) => bad.push(Operand::Imm(64)),
            (Kind::ExtIdx, _) => bad.push(Operand::Imm(16)),
            (Kind::Elem(..), Operand::Elem(n, e, _)) => bad.push(Operand::Elem(n, e, 16)),
            (Kind::Mem(mk), Operand::Mem(m)) => {
                let a = match mk {
                    MemKind::Uoff(s) => Some(Addr::Offset(4096 << s)),
                    MemKind::Simm9 => Some(Addr::Offset(256)),
                    MemKind::Pre9 => Some(Addr::PreIndex(-257)),
                    MemKind::Post9 => Some(Addr::PostIndex(256)),
                    MemKind::PairOff(s) => Some(Addr::Offset(64 << s)),
                    MemKind::PairPre(s) => Some(Addr::PreIndex((1 << s) + 1)),
                    MemKind::PairPost(s) => Some(Addr::PostIndex(-(65 << s))),
                    MemKind::PostImm(_) => Some(Addr::PostIndex(3)),
                    _ => None,
                };
                if let Some(a) = a {
                    bad.push(Operand::Mem(Mem {
                        base: m.base,
                        addr: a,
                    }));
                }
                bad.push(Operand::Mem(Mem {
                    base: Gpr::W(rng.range(0, 30) as u8),
                    addr: m.addr,
                }));
            }
            _ => {}
        }
        for b in bad {
            let mut ops = good.operands().to_vec();
            ops[slot] = b;
            let i = Inst::new_unchecked(form.op, &ops);
            if rejected_by_all(&i) {
                out.push(i);
            }
        }
    }
    // An arrangement no variant has.
    if form.kinds.iter().any(|k| matches!(k, Kind::V(_))) {
        for a in ALL_ARRS {
            let ops: Vec<Operand> = good
                .operands()
                .iter()
                .map(|o| match *o {
                    Operand::V(n, _) => Operand::V(n, a),
                    o => o,
                })
                .collect();
            let i = Inst::new_unchecked(form.op, &ops);
            if rejected_by_all(&i) {
                out.push(i);
                break;
            }
        }
    }
    // LDP with Rt == Rt2.
    if form.asm_mnemonic() == "ldp" {
        let mut ops = good.operands().to_vec();
        ops[1] = ops[0];
        out.push(Inst::new_unchecked(form.op, &ops));
    }
    out
}

fn rejected_by_all(i: &Inst) -> bool {
    i.encode().is_err() && Inst::with_mnemonic(i.form().asm_mnemonic(), i.operands()).is_err()
}
