//! The arm64 NEON twin of `attention.fused`, emitted with weft-a64 for
//! one head dimension `d ≤ 128` and one K/V type.
//!
//! Shape: for each unit, for each row, the contract's blocks of 16 keys,
//! four keys at a time: 16 accumulators (`v16`–`v31`, the contract's 16
//! lanes of a key in four `.4s` registers, `fmla` with the q chunk in
//! `v0`–`v3`), each key folded by two vertical adds (lanes 8 apart, then 4
//! apart) and the four keys by two rounds of `faddp` (neighbours), which
//! leaves their scores in key order in one register. Absent keys point
//! at the block's first row and their scores become `-inf` (`bif`). The
//! softmax update runs on the four score registers with the constants in
//! `v0`–`v3` (by-element `fmla`, `fmul`, `dup`); `2^n` is the integer shift
//! and add of the reference. The row's output is its `o` accumulator
//! (`o·α`, then one `fmla` per present key with `ld1r` of `p_k`) until the
//! final division; `m` and the 16 `l` lanes live in the stack frame.
//! binary16 K/V rows are widened with `fcvtl`/`fcvtl2` (exact).
//!
//! AAPCS64: x19–x28 and d8–d15 are saved and restored; x18 is not touched;
//! constants come from a literal pool after the code (`adr`), so the body
//! has no relocations.

use weft_a64::{mem, q, s, v, w, x, Arr, Assembler, Cond, EncodeError, Op, Operand, SP};
use weft_kernel::{Feature, Isa, NativeCode, Offer, Refusal, Twin};

use super::{exp_consts, offsets, KvType, SiteShape, ARGS_NAME, FAMILY, MAX_TWIN_D_A64};

/// The NEON twin of the fused arm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AttentionNeon;

const NEON: &[Feature] = &[Feature::Neon];

// Frame (from sp): x19–x28, d8–d15, p (64 bytes), l (64 bytes), m.
const FR_X: i64 = 0;
const FR_D: i64 = 80;
const FR_P: i64 = 144;
const FR_L: i64 = 208;
const FR_M: i64 = 272;
const FRAME: i64 = 288;

// Pool (from its label): four constant vectors, then four index vectors.
const POOL_IDX: i64 = 64;

// GPRs.
const ARGS: u8 = 0;
const QROW: u8 = 1;
const OROW: u8 = 2;
const NB: u8 = 3;
const KB: u8 = 4;
const VB: u8 = 5;
const KSTRIDE: u8 = 6;
const VSTRIDE: u8 = 7;
const U: u8 = 19;
const ROW_BLOCKS: u8 = 20;
const I: u8 = 21;
const I1: u8 = 22;
const QH: u8 = 23;
const OH: u8 = 24;
const KH: u8 = 25;
const VH: u8 = 26;
const N: u8 = 27;
const B0: u8 = 28;

type R = Result<(), EncodeError>;

impl AttentionNeon {
    /// The body for head dimension `d` and `kv`.
    pub fn body(&self, d: usize, kv: KvType) -> Result<NativeCode, Refusal> {
        if d == 0 || !d.is_multiple_of(16) || d > MAX_TWIN_D_A64 {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!(
                    "{} serves head dimensions that are multiples of 16 up to {MAX_TWIN_D_A64}, not {d}",
                    self.name()
                ),
            });
        }
        emit(d, kv).map_err(|e| Refusal::EmitError {
            message: format!("{}: {e}", self.name()),
        })
    }
}

// SAFETY: the body reads Q, K, V and writes the output rows of the units
// in its range only, inside the extents AttentionArgs::new checks, keeps
// AAPCS64's callee-saved registers, and returns normally (module docs);
// validation checks its results.
unsafe impl Twin for AttentionNeon {
    fn name(&self) -> &'static str {
        "attention.fused.twin.neon"
    }

    fn isa(&self) -> Isa {
        Isa::Aarch64
    }

    fn requires(&self) -> &'static [Feature] {
        NEON
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
        if let Some(p) = offer.packed.first() {
            return Err(Refusal::UnknownLayout {
                layout: p.layout.to_owned(),
            });
        }
        let s = SiteShape::from_geometry(&offer.contract.geometry)?;
        self.body(s.d, s.kv)
    }
}

fn ld_arg(a: &mut Assembler, r: u8, off: i32) -> R {
    a.ldr(x(r), mem(x(ARGS)).off(i64::from(off)))
}

fn emit(d: usize, kv: KvType) -> Result<NativeCode, String> {
    let mut a = Assembler::new();
    let err = |e: EncodeError| e.to_string();
    let pool = a.new_label();
    body(&mut a, d, kv, pool).map_err(err)?;
    while !a.len().is_multiple_of(4) {
        a.brk(0).map_err(err)?;
    }
    a.bind(pool).map_err(err)?;
    let code_words = a.len();
    let mut words = a.finish().map_err(err)?;
    let c = &exp_consts::C;
    let pool_words: [u32; 32] = [
        exp_consts::LOG2E,
        exp_consts::NEG_LN2_HI,
        exp_consts::NEG_LN2_LO,
        exp_consts::MAGIC,
        c[0],
        c[1],
        c[2],
        c[3],
        c[4],
        c[5],
        c[6],
        c[7],
        exp_consts::LO,
        exp_consts::ONE_BITS,
        f32::NEG_INFINITY.to_bits(),
        0,
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9,
        10,
        11,
        12,
        13,
        14,
        15,
    ];
    words.extend_from_slice(&pool_words);
    Ok(NativeCode {
        isa: Isa::Aarch64,
        bytes: words.iter().flat_map(|wd| wd.to_le_bytes()).collect(),
        pool: Some(4 * code_words),
        loops: Vec::new(),
    })
}

fn body(a: &mut Assembler, d: usize, kv: KvType, pool: weft_a64::Label) -> R {
    let es = kv.bytes().trailing_zeros() as i64;
    // Prologue.
    a.sub(SP, SP, FRAME)?;
    for k in 0..5u8 {
        a.stp(
            x(19 + 2 * k),
            x(20 + 2 * k),
            mem(SP).off(FR_X + 16 * i64::from(k)),
        )?;
    }
    for k in 0..4u8 {
        a.stp(
            weft_a64::d(8 + 2 * k),
            weft_a64::d(9 + 2 * k),
            mem(SP).off(FR_D + 16 * i64::from(k)),
        )?;
    }
    let (unit_loop, row_loop, unit_next, done) =
        (a.new_label(), a.new_label(), a.new_label(), a.new_label());
    let (block_loop, row_fin, n_done) = (a.new_label(), a.new_label(), a.new_label());

    ld_arg(a, 8, offsets::LQ)?;
    a.add(x(8), x(8), 15)?;
    a.lsr(x(ROW_BLOCKS), x(8), 4)?;
    ld_arg(a, U, offsets::UNIT_START)?;

    a.bind(unit_loop)?;
    ld_arg(a, 8, offsets::UNIT_END)?;
    a.cmp(x(U), x(8))?;
    a.b_cond(Cond::Hs, done)?;
    a.udiv(x(9), x(U), x(ROW_BLOCKS))?; // h
    a.msub(x(10), x(9), x(ROW_BLOCKS), x(U))?; // rb
    ld_arg(a, 8, offsets::GROUP)?;
    a.udiv(x(11), x(9), x(8))?; // g
    a.lsl(x(I), x(10), 4)?;
    a.add(x(I1), x(I), 16)?;
    ld_arg(a, 8, offsets::LQ)?;
    a.cmp(x(I1), x(8))?;
    a.csel(x(I1), x(8), x(I1), Cond::Hi)?;
    for (dst, base, stride, shift, of) in [
        (QH, offsets::Q, offsets::Q_HEAD, 2, 9),
        (OH, offsets::O, offsets::O_HEAD, 2, 9),
        (KH, offsets::K, offsets::K_HEAD, es, 11),
        (VH, offsets::V, offsets::V_HEAD, es, 11),
    ] {
        ld_arg(a, 12, stride)?;
        a.mul(x(12), x(of), x(12))?;
        if shift > 0 {
            a.lsl(x(12), x(12), shift)?;
        }
        ld_arg(a, 13, base)?;
        a.add(x(dst), x(13), x(12))?;
    }

    a.bind(row_loop)?;
    a.cmp(x(I), x(I1))?;
    a.b_cond(Cond::Hs, unit_next)?;
    for (dst, base, stride) in [(QROW, QH, offsets::Q_ROW), (OROW, OH, offsets::O_ROW)] {
        ld_arg(a, 8, stride)?;
        a.lsl(x(8), x(8), 2)?;
        a.madd(x(dst), x(I), x(8), x(base))?;
    }
    ld_arg(a, N, offsets::LK)?;
    ld_arg(a, 8, offsets::CAUSAL)?;
    a.cbz(x(8), n_done)?;
    ld_arg(a, 8, offsets::Q_OFFSET)?;
    a.add(x(8), x(8), x(I))?;
    a.add(x(8), x(8), 1)?;
    a.cmp(x(8), x(N))?;
    a.csel(x(N), x(8), x(N), Cond::Lo)?;
    a.bind(n_done)?;
    // Fresh state: l = +0, m = -inf, o = +0.
    a.movi(v(16).d2(), 0)?;
    a.stp(q(16), q(16), mem(SP).off(FR_L))?;
    a.stp(q(16), q(16), mem(SP).off(FR_L + 32))?;
    a.mov(w(8), i64::from(f32::NEG_INFINITY.to_bits()))?;
    a.str(w(8), mem(SP).off(FR_M))?;
    for m in 0..d / 4 {
        a.str(q(16), mem(x(OROW)).off(16 * m as i64))?;
    }
    a.mov(x(B0), 0)?;

    a.bind(block_loop)?;
    a.cmp(x(B0), x(N))?;
    a.b_cond(Cond::Hs, row_fin)?;
    a.sub(x(NB), x(N), x(B0))?;
    a.mov(x(8), 16)?;
    a.cmp(x(NB), x(8))?;
    a.csel(x(NB), x(8), x(NB), Cond::Hi)?;
    ld_arg(a, KSTRIDE, offsets::K_POS)?;
    a.lsl(x(KSTRIDE), x(KSTRIDE), es)?;
    a.madd(x(KB), x(B0), x(KSTRIDE), x(KH))?;
    ld_arg(a, VSTRIDE, offsets::V_POS)?;
    a.lsl(x(VSTRIDE), x(VSTRIDE), es)?;
    a.madd(x(VB), x(B0), x(VSTRIDE), x(VH))?;
    scores(a, d, kv)?;
    softmax(a, pool)?;
    pv(a, d, kv)?;
    a.add(x(B0), x(B0), 16)?;
    a.b(block_loop)?;

    // row_fin: O = o / fold(l).
    a.bind(row_fin)?;
    a.ldp(q(16), q(17), mem(SP).off(FR_L))?;
    a.ldp(q(18), q(19), mem(SP).off(FR_L + 32))?;
    a.fadd(v(20).s4(), v(16).s4(), v(18).s4())?;
    a.fadd(v(21).s4(), v(17).s4(), v(19).s4())?;
    a.fadd(v(20).s4(), v(20).s4(), v(21).s4())?;
    a.faddp(v(20).s4(), v(20).s4(), v(20).s4())?;
    a.op(Op::FADDP_SCALAR, (s(20), v(20).s2()))?;
    a.dup(v(20).s4(), v(20).s(0))?;
    for m in 0..d / 4 {
        let at = mem(x(OROW)).off(16 * m as i64);
        a.ldr(q(16), at)?;
        a.fdiv(v(16).s4(), v(16).s4(), v(20).s4())?;
        a.str(q(16), at)?;
    }
    a.add(x(I), x(I), 1)?;
    a.b(row_loop)?;

    a.bind(unit_next)?;
    a.add(x(U), x(U), 1)?;
    a.b(unit_loop)?;

    a.bind(done)?;
    for k in 0..5u8 {
        a.ldp(
            x(19 + 2 * k),
            x(20 + 2 * k),
            mem(SP).off(FR_X + 16 * i64::from(k)),
        )?;
    }
    for k in 0..4u8 {
        a.ldp(
            weft_a64::d(8 + 2 * k),
            weft_a64::d(9 + 2 * k),
            mem(SP).off(FR_D + 16 * i64::from(k)),
        )?;
    }
    a.add(SP, SP, FRAME)?;
    a.ret()
}

/// Four K (or V) chunks of four f32 at `x(ptr) + 16·4·chunk4` elements
/// into `v4`–`v7` (binary16 widened through `v8`, `v9`).
fn load16(a: &mut Assembler, kv: KvType, ptr: u8, chunk4: usize) -> R {
    match kv {
        KvType::F32 => {
            a.add(x(9), x(ptr), (64 * chunk4) as i64)?;
            a.ld1(v(4).list(4, Arr::S4), mem(x(9)))
        }
        KvType::F16 => {
            a.add(x(9), x(ptr), (32 * chunk4) as i64)?;
            a.ld1(v(8).list(2, Arr::H8), mem(x(9)))?;
            a.fcvtl(v(4).s4(), v(8).h4())?;
            a.fcvtl2(v(5).s4(), v(8).h8())?;
            a.fcvtl(v(6).s4(), v(9).h4())?;
            a.fcvtl2(v(7).s4(), v(9).h8())
        }
    }
}

/// The 16 scores of the block into `v12`–`v15` (keys in order).
fn scores(a: &mut Assembler, d: usize, kv: KvType) -> R {
    for grp in 0..4usize {
        for j in 0..4usize {
            let key = (4 * grp + j) as i64;
            a.mov(x(8), key)?;
            a.madd(x(9), x(8), x(KSTRIDE), x(KB))?;
            a.cmp(x(NB), key)?;
            a.csel(x(12 + j as u8), x(9), x(KB), Cond::Hi)?;
        }
        for r in 16..32u8 {
            a.movi(v(r).d2(), 0)?;
        }
        for m in 0..d / 16 {
            a.add(x(8), x(QROW), (64 * m) as i64)?;
            a.ld1(v(0).list(4, Arr::S4), mem(x(8)))?;
            for j in 0..4u8 {
                load16(a, kv, 12 + j, m)?;
                for t in 0..4u8 {
                    a.fmla(v(16 + 4 * j + t).s4(), v(t).s4(), v(4 + t).s4())?;
                }
            }
        }
        for j in 0..4u8 {
            let b = 16 + 4 * j;
            a.fadd(v(10).s4(), v(b).s4(), v(b + 2).s4())?;
            a.fadd(v(11).s4(), v(b + 1).s4(), v(b + 3).s4())?;
            a.fadd(v(b).s4(), v(10).s4(), v(11).s4())?;
        }
        a.faddp(v(10).s4(), v(16).s4(), v(20).s4())?;
        a.faddp(v(11).s4(), v(24).s4(), v(28).s4())?;
        a.faddp(v(12 + grp as u8).s4(), v(10).s4(), v(11).s4())?;
    }
    Ok(())
}

/// `E(x)` in place on `v(xr)`; constants in `v0`–`v3`; `v16`–`v19` scratch.
fn exp(a: &mut Assembler, xr: u8) -> R {
    let (t1, t2, t3, mk) = (16u8, 17u8, 18u8, 19u8);
    let ck = |k: usize| -> Operand {
        if k < 4 {
            v(1).s(k as u8)
        } else {
            v(2).s((k - 4) as u8)
        }
    };
    a.dup(v(t1).s4(), v(3).s(0))?; // LO
    a.fcmgt(v(mk).s4(), v(t1).s4(), v(xr).s4())?; // x < LO
    a.dup(v(t1).s4(), v(0).s(3))?; // MAGIC
    a.fmla(v(t1).s4(), v(xr).s4(), v(0).s(0))?; // t = x·LOG2E + MAGIC
    a.dup(v(t2).s4(), v(0).s(3))?;
    a.fsub(v(t2).s4(), v(t1).s4(), v(t2).s4())?; // n
    a.mov(v(t3).b16(), v(xr).b16())?;
    a.fmla(v(t3).s4(), v(t2).s4(), v(0).s(1))?; // r = n·(-ln2_hi) + x
    a.fmla(v(t3).s4(), v(t2).s4(), v(0).s(2))?; // r = n·(-ln2_lo) + r
    a.dup(v(xr).s4(), ck(7))?;
    let (mut cur, mut other) = (xr, t2);
    for k in (0..7).rev() {
        a.dup(v(other).s4(), ck(k))?;
        a.fmla(v(other).s4(), v(cur).s4(), v(t3).s4())?; // p = p·r + C_k
        std::mem::swap(&mut cur, &mut other);
    }
    // After seven steps p is in t2 and xr is free.
    a.shl(v(t1).s4(), v(t1).s4(), 23)?;
    a.dup(v(xr).s4(), v(3).s(1))?;
    a.add(v(t1).s4(), v(t1).s4(), v(xr).s4())?; // 2^n
    a.fmul(v(xr).s4(), v(cur).s4(), v(t1).s4())?;
    a.bic(v(xr).b16(), v(xr).b16(), v(mk).b16())?; // +0 where x < LO
    Ok(())
}

/// Scale, mask, maximum, shift, α (`v10`), `p` (`v12`–`v15`), `l`.
fn softmax(a: &mut Assembler, pool: weft_a64::Label) -> R {
    a.adr(x(8), pool)?;
    a.ldp(q(0), q(1), mem(x(8)))?;
    a.ldp(q(2), q(3), mem(x(8)).off(32))?;
    a.ldr(s(9), mem(x(ARGS)).off(i64::from(offsets::SCALE)))?;
    a.mov(v(3).s(3), v(9).s(0))?;
    for g in 0..4u8 {
        a.fmul(v(12 + g).s4(), v(12 + g).s4(), v(3).s(3))?;
    }
    // Lanes at or past nb score -inf.
    a.dup(v(10).s4(), w(NB))?;
    a.dup(v(8).s4(), v(3).s(2))?;
    for g in 0..4u8 {
        a.ldr(q(11), mem(x(8)).off(POOL_IDX + 16 * i64::from(g)))?;
        a.cmgt(v(11).s4(), v(10).s4(), v(11).s4())?;
        a.bif(v(12 + g).b16(), v(8).b16(), v(11).b16())?;
    }
    // Block maximum (any order), m', u.
    a.fmax(v(9).s4(), v(12).s4(), v(13).s4())?;
    a.fmax(v(10).s4(), v(14).s4(), v(15).s4())?;
    a.fmax(v(9).s4(), v(9).s4(), v(10).s4())?;
    a.fmaxv(s(9), v(9).s4())?;
    a.dup(v(9).s4(), v(9).s(0))?;
    a.add(x(9), SP, FR_M)?;
    a.ld1r(v(10).list(1, Arr::S4), mem(x(9)))?;
    a.fmax(v(11).s4(), v(10).s4(), v(9).s4())?;
    a.str(s(11), mem(SP).off(FR_M))?;
    a.fcmeq(v(9).s4(), v(11).s4(), v(8).s4())?;
    a.bic(v(9).b16(), v(11).b16(), v(9).b16())?; // u
    a.fsub(v(10).s4(), v(10).s4(), v(9).s4())?; // m - u
    for g in 0..4u8 {
        a.fsub(v(12 + g).s4(), v(12 + g).s4(), v(9).s4())?;
    }
    exp(a, 10)?;
    for g in 0..4u8 {
        exp(a, 12 + g)?;
    }
    // l = fma(l, α, p); p to the frame.
    a.ldp(q(20), q(21), mem(SP).off(FR_L))?;
    a.ldp(q(22), q(23), mem(SP).off(FR_L + 32))?;
    for g in 0..4u8 {
        a.mov(v(24 + g).b16(), v(12 + g).b16())?;
        a.fmla(v(24 + g).s4(), v(20 + g).s4(), v(10).s4())?;
    }
    a.stp(q(24), q(25), mem(SP).off(FR_L))?;
    a.stp(q(26), q(27), mem(SP).off(FR_L + 32))?;
    a.stp(q(12), q(13), mem(SP).off(FR_P))?;
    a.stp(q(14), q(15), mem(SP).off(FR_P + 32))
}

/// `o = o·α`, then `o = fma(p_k, v_k, o)` for the present keys, sixteen
/// `.4s` chunks of the row at a time in `v16`–`v31`.
fn pv(a: &mut Assembler, d: usize, kv: KvType) -> R {
    let chunks = d / 4;
    for g0 in (0..chunks).step_by(16) {
        let g1 = (g0 + 16).min(chunks);
        for m in g0..g1 {
            let r = 16 + (m - g0) as u8;
            a.ldr(q(r), mem(x(OROW)).off(16 * m as i64))?;
            a.fmul(v(r).s4(), v(r).s4(), v(10).s4())?;
        }
        let top = a.new_label();
        a.mov(x(10), x(VB))?;
        a.add(x(11), SP, FR_P)?;
        a.mov(x(14), x(NB))?;
        a.bind(top)?;
        a.ld1r(v(8).list(1, Arr::S4), mem(x(11)).post(4))?;
        for c4 in (g0 / 4)..(g1 / 4) {
            match kv {
                KvType::F32 => {
                    a.add(x(9), x(10), (64 * c4) as i64)?;
                    a.ld1(v(4).list(4, Arr::S4), mem(x(9)))?;
                }
                KvType::F16 => {
                    a.add(x(9), x(10), (32 * c4) as i64)?;
                    a.ld1(v(6).list(2, Arr::H8), mem(x(9)))?;
                    a.fcvtl(v(4).s4(), v(6).h4())?;
                    a.fcvtl2(v(5).s4(), v(6).h8())?;
                    a.fcvtl(v(6).s4(), v(7).h4())?;
                    a.fcvtl2(v(7).s4(), v(7).h8())?;
                }
            }
            for t in 0..4 {
                let r = 16 + (4 * c4 - g0 + t) as u8;
                a.fmla(v(r).s4(), v(8).s4(), v(4 + t as u8).s4())?;
            }
        }
        a.add(x(10), x(10), x(VSTRIDE))?;
        a.subs(x(14), x(14), 1)?;
        a.b_cond(Cond::Ne, top)?;
        for m in g0..g1 {
            let r = 16 + (m - g0) as u8;
            a.str(q(r), mem(x(OROW)).off(16 * m as i64))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neon_twin_emits_on_any_host_and_every_code_word_decodes() {
        // Three bodies: the listing decodes every word, slow under qemu.
        for (d, kv) in [
            (16, KvType::F32),
            (80, KvType::F16),
            (MAX_TWIN_D_A64, KvType::F32),
        ] {
            {
                let code = AttentionNeon.body(d, kv).expect("emits");
                assert_eq!(code.isa, Isa::Aarch64);
                assert!(
                    !weft_managed::listing(&code)
                        .lines()
                        .any(|l| l.contains(".word") && !l.contains("pool")),
                    "d {d} {kv:?}: an undecodable word"
                );
            }
        }
        for d in [0, 8, 40, 144] {
            assert_eq!(
                AttentionNeon.body(d, KvType::F32).unwrap_err().name(),
                "unsupported-geometry"
            );
        }
    }

    #[test]
    fn neon_twin_saves_what_aapcs64_says_and_never_touches_x18() {
        let code = AttentionNeon.body(64, KvType::F16).expect("emits");
        for needle in ["stp x19, x20", "stp d8, d9", "ldp x27, x28", "ldp d14, d15"] {
            assert!(weft_managed::listing(&code).contains(needle), "{needle}");
        }
        assert!(!weft_managed::listing(&code).contains("x18"));
    }
}
