//! x64 twins of the elementwise family: `exp` and `erf` on an AVX2 tier
//! (ymm: 4 binary64 lanes per register) and an AVX-512 tier (zmm: 8 lanes).
//! A loop iteration is two interleaved register-wide halves (8 f32 on
//! AVX2, 16 on AVX-512), except erf on AVX2 (one half: its coefficients
//! fill the 16 registers). Values live across a half's slow block but
//! unused in it are parked in the frame while it runs. [`emit_map`] emits
//! exp-based maps ([`map`](super::map)) the same way, two halves at both
//! tiers, reading [`MapArgs`](super::map::MapArgs) (second stream in `rsi`,
//! saved on Win64; its tail staged through a second stack buffer).
//!
//! One job: emit, for the arm's offer, a body that computes exactly the
//! binary64 operations of the contract (parent module), in the same order,
//! so the fast-path rate and the proof are the arm's.
//!
//! How: the algorithm is not re-typed here. The reference's generic steps
//! ([`reference::exp_fast`], [`reference::exp_slow`], [`reference::erf_eval`],
//! …) are run once over a *recorder* that implements [`Lanes`] by writing
//! down every operation (a straight-line SSA list), plus the few steps the
//! reference writes as scalar Rust (the f32 narrowing, the rounding test,
//! [`reference::round_dd_to_f32`]) spelt out in the same vocabulary; the
//! recorder and the list are shared with the a64 twins (`record.rs`). A
//! linear-scan allocator gives each value a register, and the list is
//! lowered to AVX2 or AVX-512 instructions through weft-x64. One IEEE
//! operation in the list is one IEEE instruction in the body, so a twin is
//! right by construction and validated bit for bit anyway.
//!
//! Invariants:
//!
//! - **Leaf ABI**, SysV or Win64 (the façade's frame saves `xmm6`–`xmm15`
//!   on Win64); only volatile GPRs are written, and `rsi` by a map body
//!   (declared, so pushed and popped on Win64); no call leaves the body.
//! - **Constants are built from immediates**: the fast path's constants are
//!   broadcast into registers before the loop when registers allow, the
//!   rest are broadcast once per call into the body's own stack frame and
//!   read from there (never a constant pool, never a relocation); the slow
//!   path, and every 32-bit constant, is broadcast at the point of use.
//! - **Table from the arguments**: lookups read [`ElementwiseArgs::table`]
//!   (exp: one gather per half; erf: its eight coefficients per lane are one
//!   row, so each lane's row is loaded whole and transposed in registers).
//! - **Any length and alignment**: full steps read and write in place;
//!   the last `len % lanes` elements are staged through a zero-padded stack
//!   buffer, so nothing outside `input[..len]`/`output[..len]` is touched
//!   (for a map: nothing outside `[start, end)` of `a`, `b`, `out`).
//! - **Slow path inside the body**: when any lane of a step fails the
//!   rounding test, the whole step runs the double-double slow path (as
//!   vectors) and the failing lanes take its result.
//!
//! [`ElementwiseArgs::table`]: super::ElementwiseArgs
//! [`reference::exp_fast`]: super::reference::exp_fast
//! [`reference::exp_slow`]: super::reference::exp_slow
//! [`reference::erf_eval`]: super::reference::erf_eval
//! [`reference::round_dd_to_f32`]: super::reference::round_dd_to_f32
//! [`Lanes`]: super::reference::Lanes

use std::collections::HashMap;

use weft_kernel::{Feature, Isa, LoopAnnotation, LoopTrip, NativeCode, Offer, Refusal, Twin};
use weft_x64::iced_x86::code_asm::registers::k::{k1, k2, k3, k4, k5, k6, k7};
use weft_x64::iced_x86::code_asm::registers::{xmm, ymm, zmm};
use weft_x64::iced_x86::code_asm::{
    dword_ptr, eax, qword_bcst, qword_ptr, r10, r11, r8, r9, rax, rcx, rdx, rsi, rsp, xmmword_ptr,
    ymmword_ptr, zmmword_ptr, AsmRegisterK, AsmRegisterXmm, AsmRegisterYmm, AsmRegisterZmm,
    CodeAssembler, CodeLabel,
};
use weft_x64::iced_x86::IcedError;
use weft_x64::{Clobbers, EmitError, Emitter, Encoding};

/// The calling convention a body is emitted for (weft-x64's), re-exported
/// for callers of [`emit_map`] and [`X64Twin::emit_for`].
pub use weft_x64::Abi;

/// Why a body could not be emitted (becomes a `Refusal::EmitError`).
#[derive(Debug)]
struct Fail(String);

impl From<EmitError> for Fail {
    fn from(e: EmitError) -> Self {
        Fail(e.to_string())
    }
}
use super::map::ExpMap;
use super::record::{record_erf, record_exp, record_map, Layout, Op, Pred, Recorder, Val};

// --------------------------------------------------------------- values ---

/// What a value is, which decides its register class and width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Binary64 (or 64-bit integer) lanes: ymm / zmm.
    Full,
    /// Binary32 (or 32-bit integer) lanes, one per binary64 lane: xmm / ymm.
    Half,
    /// A per-lane mask of a `Full` comparison: ymm / k.
    Mask,
    /// A per-lane mask of a `Half` comparison: xmm / k.
    HalfMask,
    /// No value (stores, branches).
    Nothing,
}

impl Kind {
    /// The kind of the value `op` defines.
    fn of(op: &Op) -> Kind {
        use Op::*;
        match op {
            Const(_) | Input(_) | Add(..) | Sub(..) | Mul(..) | Min(..) | Max(..) | And(..)
            | Xor(..) | IAdd(..) | Shl(..) | Ushr(..) | Floor(_) | Tab(..) | Select(..)
            | Widen(_) => Kind::Full,
            Const32(_) | Load32(..) | Narrow(_) | IAdd32(..) | And32(..) | Or32(..) | Xor32(..)
            | FAdd32(..) | FMul32(..) | FDiv32(..) | Select32(..) => Kind::Half,
            Cmp(..) | MaskAndNot(..) | MaskAnd(..) => Kind::Mask,
            Eq32(..) => Kind::HalfMask,
            SkipIfAll(_) | Join | Assign(..) | Store(..) => Kind::Nothing,
        }
    }
}

/// The `vcmppd` predicate of a recorded comparison (ordered predicates are
/// false when either side is NaN).
fn vcmp_predicate(p: Pred) -> i32 {
    match p {
        Pred::Eq => 0x00,
        Pred::Lt => 0x11,
        Pred::Nlt => 0x15,
        Pred::Ge => 0x1d,
        Pred::Gt => 0x1e,
    }
}

/// `vcmppd`'s unordered predicate (true when either side is NaN).
const VCMP_UNORD: i32 = 0x03;

// ----------------------------------------------------------- allocation ---

/// The two vector tiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// AVX2: ymm (4 × f64) for binary64 lanes, xmm for their f32s; 16 registers.
    Avx2,
    /// AVX-512: zmm (8 × f64), ymm for the f32s, k registers for masks; 32 registers.
    Avx512,
}

impl Tier {
    /// f32 elements per step.
    pub fn lanes(self) -> usize {
        match self {
            Tier::Avx2 => 4,
            Tier::Avx512 => 8,
        }
    }
    /// Vector registers the allocator may hand out (scratch registers excluded).
    fn vec_pool(self) -> Vec<u8> {
        match self {
            Tier::Avx2 => (0..14).collect(),
            // zmm30/zmm31 are scratch.
            Tier::Avx512 => (0..30).collect(),
        }
    }
    /// Scratch vector registers, never allocated.
    fn scratch(self) -> (u8, u8) {
        match self {
            Tier::Avx2 => (14, 15),
            Tier::Avx512 => (30, 31),
        }
    }
    fn k_pool(self) -> Vec<u8> {
        match self {
            Tier::Avx2 => Vec::new(),
            Tier::Avx512 => (2..8).collect(),
        }
    }
    fn masks_in_k(self) -> bool {
        self == Tier::Avx512
    }
    /// Bytes of one stack-staged constant.
    fn slot_bytes(self) -> i32 {
        match self {
            Tier::Avx2 => 32,
            Tier::Avx512 => 8,
        }
    }
}

/// Where a constant is read from at one use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Home {
    /// A register it was broadcast into before the loop.
    Reg(u8),
    /// Its broadcast copy in the frame, at this offset from rsp.
    Stack(i32),
}

/// A fast-path constant: every one has a frame slot; the most used also
/// live in a register on the fast path (released to the slow path, which
/// reads the slot, and reloaded from the slot at the join).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ConstHome {
    bits: u64,
    reg: Option<u8>,
    slot: i32,
}

/// Where a value is when it is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loc {
    None,
    Vec(u8),
    K(u8),
    Home(Home),
}

/// One slow block's parking: its `SkipIfAll` index, its `Join` index, and
/// `(register, offset)` of each parked value.
type Parked = (usize, usize, Vec<(u8, i32)>);

struct Plan {
    locs: Vec<Loc>,
    /// Fast-path constants, most used first.
    homes: Vec<ConstHome>,
    /// Bytes of stack slots.
    slot_area: i32,
    /// Highest vector register number used, plus one.
    vec_high: u8,
    /// Per slow block (`SkipIfAll` index, `Join` index): the registers of
    /// values live across it but unused in it, parked in the frame (at
    /// these offsets past the constant slots) while the block runs.
    parked: Vec<Parked>,
    /// Bytes of the parking area.
    park_area: i32,
}

/// Constant bit patterns used before the first `SkipIfAll` (the fast path),
/// by how much a register saves (a use that needs the constant in a
/// register counts 4, one that can read memory 1; ties: first use first).
fn fast_constants(ops: &[(Op, Kind)]) -> Vec<u64> {
    let end = ops
        .iter()
        .position(|(op, _)| matches!(op, Op::SkipIfAll(_)))
        .unwrap_or(ops.len());
    let mut count: Vec<(u64, usize, usize)> = Vec::new();
    for (i, (op, _)) in ops[..end].iter().enumerate() {
        let operands = op.operands();
        for (n, v) in operands.iter().enumerate() {
            if let Op::Const(bits) = ops[v.0 as usize].0 {
                let memory_ok = match op {
                    Op::Add(..)
                    | Op::Mul(..)
                    | Op::And(..)
                    | Op::Xor(..)
                    | Op::IAdd(..)
                    | Op::Cmp(..) => true,
                    Op::Sub(..) => n == 1,
                    _ => false,
                };
                let weight = if memory_ok { 1 } else { 4 };
                match count.iter_mut().find(|(b, _, _)| *b == bits) {
                    Some(e) => e.1 += weight,
                    None => count.push((bits, weight, i)),
                }
            }
        }
    }
    count.sort_by(|a, b| b.1.cmp(&a.1).then(a.2.cmp(&b.2)));
    count.into_iter().map(|(b, _, _)| b).collect()
}

/// Row lookups: eight `Tab(base + k, j)`, `k = 0..8`, with one index `j`
/// read eight consecutive table words per lane. Within each run of
/// consecutive `Tab` operations (which depend only on earlier values, so
/// may be reordered), every such group is made contiguous and in order.
/// Returns the reordered list and the first index of each group.
fn fuse_rows(ops: &[(Op, Kind)]) -> (Vec<(Op, Kind)>, Vec<usize>) {
    let mut order: Vec<usize> = Vec::with_capacity(ops.len());
    let mut i = 0;
    while i < ops.len() {
        if !matches!(ops[i].0, Op::Tab(..)) {
            order.push(i);
            i += 1;
            continue;
        }
        let end = (i..ops.len())
            .find(|&k| !matches!(ops[k].0, Op::Tab(..)))
            .unwrap_or(ops.len());
        // Group the run by index value, in first-appearance order.
        let mut groups: Vec<(Val, Vec<usize>)> = Vec::new();
        for (k, (op, _)) in ops.iter().enumerate().take(end).skip(i) {
            if let Op::Tab(_, j) = *op {
                match groups.iter_mut().find(|(g, _)| *g == j) {
                    Some((_, m)) => m.push(k),
                    None => groups.push((j, vec![k])),
                }
            }
        }
        for (_, members) in groups {
            order.extend(members);
        }
        i = end;
    }
    let mut new_index = vec![0u32; ops.len()];
    for (n, &old) in order.iter().enumerate() {
        new_index[old] = n as u32;
    }
    let out: Vec<(Op, Kind)> = order
        .iter()
        .map(|&old| (ops[old].0.map(|v| Val(new_index[v.0 as usize])), ops[old].1))
        .collect();
    let mut starts = Vec::new();
    let mut k = 0;
    while k + 8 <= out.len() {
        let group = match out[k].0 {
            Op::Tab(base, j) => (0..8).all(|m| out[k + m].0 == Op::Tab(base + m, j)),
            _ => false,
        };
        if group {
            starts.push(k);
            k += 8;
        } else {
            k += 1;
        }
    }
    (out, starts)
}

fn last_uses(ops: &[(Op, Kind)]) -> Vec<usize> {
    let mut last: Vec<usize> = (0..ops.len()).collect();
    for (i, (op, _)) in ops.iter().enumerate() {
        for v in op.operands() {
            last[v.0 as usize] = i;
        }
    }
    last
}

/// Linear-scan allocation with the first `hoisted` fast-path constants in
/// registers (on the fast path) and every fast-path constant in a slot.
fn allocate(tier: Tier, ops: &[(Op, Kind)], hoisted: usize) -> Result<Plan, String> {
    let consts = fast_constants(ops);
    let mut vec_free = tier.vec_pool();
    let mut k_free = tier.k_pool();
    let mut homes = Vec::new();
    let mut hoisted_regs = Vec::new();
    for (n, &bits) in consts.iter().enumerate() {
        let reg = if n < hoisted {
            let Some(r) = vec_free.pop() else {
                return Err("no register left to hoist a constant".into());
            };
            hoisted_regs.push(r);
            Some(r)
        } else {
            None
        };
        homes.push(ConstHome {
            bits,
            reg,
            slot: n as i32 * tier.slot_bytes(),
        });
    }
    let slot_area = consts.len() as i32 * tier.slot_bytes();
    let home_of: HashMap<u64, ConstHome> = homes.iter().map(|h| (h.bits, *h)).collect();
    let last = last_uses(ops);
    let mut locs = vec![Loc::None; ops.len()];
    let mut vec_high = hoisted_regs.iter().map(|r| r + 1).max().unwrap_or(0);
    let free = |loc: Loc, vec_free: &mut Vec<u8>, k_free: &mut Vec<u8>| match loc {
        Loc::Vec(r) => vec_free.push(r),
        Loc::K(r) => k_free.push(r),
        Loc::None | Loc::Home(_) => {}
    };
    let mut in_slow = false;
    let mut parked: Vec<Parked> = Vec::new();
    let mut park_area = 0;
    let park_bytes = match tier {
        Tier::Avx2 => 32,
        Tier::Avx512 => 64,
    };
    for (i, (op, kind)) in ops.iter().enumerate() {
        let operands = op.operands();
        if in_slow {
            if let Some(v) = operands
                .iter()
                .find(|v| matches!(locs[v.0 as usize], Loc::Home(Home::Reg(_))))
            {
                return Err(format!(
                    "op {i} uses fast-path constant {} on the slow path",
                    v.0
                ));
            }
        }
        let dying: Vec<Val> = {
            let mut d: Vec<Val> = operands
                .into_iter()
                .filter(|v| last[v.0 as usize] == i)
                .collect();
            d.sort_by_key(|v| v.0);
            d.dedup();
            d
        };
        // A gather's destination must differ from its index: free after.
        let free_first = !matches!(op, Op::Tab(..));
        if free_first {
            for v in &dying {
                free(locs[v.0 as usize], &mut vec_free, &mut k_free);
            }
        }
        if let Op::Join = op {
            // Parked values come back (reloaded by the lowering).
            if let Some((_, _, regs)) = parked.last() {
                for (r, _) in regs {
                    let Some(at) = vec_free.iter().position(|f| f == r) else {
                        return Err(format!("parked register {r} still busy at the join"));
                    };
                    vec_free.swap_remove(at);
                }
            }
            // The hoisted constants come back (reloaded by the lowering).
            for r in &hoisted_regs {
                let Some(at) = vec_free.iter().position(|f| f == r) else {
                    return Err(format!("register {r} still busy at the join"));
                };
                vec_free.swap_remove(at);
            }
            in_slow = false;
        }
        let loc = match (op, kind) {
            (_, Kind::Nothing) => Loc::None,
            (Op::Const(bits), _) if home_of.contains_key(bits) => {
                let h = home_of[bits];
                match h.reg {
                    Some(r) if !in_slow => Loc::Home(Home::Reg(r)),
                    _ => Loc::Home(Home::Stack(h.slot)),
                }
            }
            (_, Kind::Mask | Kind::HalfMask) if tier.masks_in_k() => {
                k_free.sort_unstable_by(|a, b| b.cmp(a));
                match k_free.pop() {
                    Some(r) => Loc::K(r),
                    None => return Err(format!("out of mask registers at op {i}")),
                }
            }
            _ => {
                vec_free.sort_unstable_by(|a, b| b.cmp(a));
                match vec_free.pop() {
                    Some(r) => {
                        vec_high = vec_high.max(r + 1);
                        Loc::Vec(r)
                    }
                    None => return Err(format!("out of vector registers at op {i}")),
                }
            }
        };
        locs[i] = loc;
        if !free_first {
            for v in &dying {
                free(locs[v.0 as usize], &mut vec_free, &mut k_free);
            }
        }
        // A value nobody uses dies where it is defined.
        if last[i] == i {
            free(loc, &mut vec_free, &mut k_free);
        }
        if let Op::SkipIfAll(_) = op {
            // The slow path may use the hoisted registers; it reads slots.
            vec_free.extend(hoisted_regs.iter().copied());
            in_slow = true;
            // Values live across the block but unused in it are parked.
            let join = (i..ops.len())
                .find(|&k| matches!(ops[k].0, Op::Join))
                .ok_or_else(|| format!("op {i}: a skip without a join"))?;
            let used_inside: Vec<Val> = ops[i + 1..=join]
                .iter()
                .flat_map(|(o, _)| o.operands())
                .collect();
            let mut regs = Vec::new();
            for v in 0..i {
                if last[v] > join && !used_inside.contains(&Val(v as u32)) {
                    if let Loc::Vec(r) = locs[v] {
                        regs.push((r, regs.len() as i32 * park_bytes));
                        vec_free.push(r);
                    }
                }
            }
            park_area = park_area.max(regs.len() as i32 * park_bytes);
            parked.push((i, join, regs));
        }
    }
    Ok(Plan {
        locs,
        homes,
        slot_area,
        vec_high,
        parked,
        park_area,
    })
}

/// The plan with as many fast-path constants in registers as fit.
fn plan(tier: Tier, ops: &[(Op, Kind)]) -> Result<Plan, Fail> {
    let n = fast_constants(ops).len();
    let mut last_err = String::new();
    for hoisted in (0..=n.min(tier.vec_pool().len())).rev() {
        match allocate(tier, ops, hoisted) {
            Ok(p) => return Ok(p),
            Err(e) => last_err = e,
        }
    }
    Err(Fail(format!("register allocation: {last_err}")))
}

// ------------------------------------------------------------- lowering ---

const XMM: [AsmRegisterXmm; 32] = {
    use xmm::*;
    [
        xmm0, xmm1, xmm2, xmm3, xmm4, xmm5, xmm6, xmm7, xmm8, xmm9, xmm10, xmm11, xmm12, xmm13,
        xmm14, xmm15, xmm16, xmm17, xmm18, xmm19, xmm20, xmm21, xmm22, xmm23, xmm24, xmm25, xmm26,
        xmm27, xmm28, xmm29, xmm30, xmm31,
    ]
};
const YMM: [AsmRegisterYmm; 32] = {
    use ymm::*;
    [
        ymm0, ymm1, ymm2, ymm3, ymm4, ymm5, ymm6, ymm7, ymm8, ymm9, ymm10, ymm11, ymm12, ymm13,
        ymm14, ymm15, ymm16, ymm17, ymm18, ymm19, ymm20, ymm21, ymm22, ymm23, ymm24, ymm25, ymm26,
        ymm27, ymm28, ymm29, ymm30, ymm31,
    ]
};
const ZMM: [AsmRegisterZmm; 32] = {
    use zmm::*;
    [
        zmm0, zmm1, zmm2, zmm3, zmm4, zmm5, zmm6, zmm7, zmm8, zmm9, zmm10, zmm11, zmm12, zmm13,
        zmm14, zmm15, zmm16, zmm17, zmm18, zmm19, zmm20, zmm21, zmm22, zmm23, zmm24, zmm25, zmm26,
        zmm27, zmm28, zmm29, zmm30, zmm31,
    ]
};
const KREG: [AsmRegisterK; 8] = [k1, k1, k2, k3, k4, k5, k6, k7];

/// `r{k}`: writes masked by k register `k` (2..=7; anything else is k1).
fn masked_zmm(r: AsmRegisterZmm, k: u8) -> AsmRegisterZmm {
    match k {
        2 => r.k2(),
        3 => r.k3(),
        4 => r.k4(),
        5 => r.k5(),
        6 => r.k6(),
        7 => r.k7(),
        _ => r.k1(),
    }
}

/// `r{k}` for ymm.
fn masked_ymm(r: AsmRegisterYmm, k: u8) -> AsmRegisterYmm {
    match k {
        2 => r.k2(),
        3 => r.k3(),
        4 => r.k4(),
        5 => r.k5(),
        6 => r.k6(),
        7 => r.k7(),
        _ => r.k1(),
    }
}

/// Frame layout (offsets from the 64-byte-aligned rsp): the staging
/// buffer of the first input stream (and of the output), the caller's rsp,
/// where a row lookup spills its lane indices, the staging buffer of a
/// map's second stream, then the constant slots (at [`slots`]).
const BUF: i32 = 0;
const SAVED_RSP: i32 = 64;
const IDX: i32 = 128;
const BUF_B: i32 = 192;

/// Where the constant slots start for a body reading `layout`.
fn slots(layout: Layout) -> i32 {
    match layout {
        Layout::Unary => 192,
        Layout::Map => 256,
    }
}

fn iced(context: &'static str) -> impl Fn(IcedError) -> Fail {
    move |e| Fail(format!("iced-x86 rejected {context}: {e}"))
}

/// A `Full` source operand: a register, or a stack-staged constant.
#[derive(Clone, Copy)]
enum Src {
    Reg(u8),
    Mem(i32),
}

struct Lower<'p> {
    tier: Tier,
    plan: &'p Plan,
    ops: &'p [(Op, Kind)],
    join: Option<CodeLabel>,
    /// First index of each row-lookup group (see [`fuse_rows`]).
    rows: Vec<usize>,
    /// Where the constant slots start ([`slots`]).
    slots: i32,
}

/// Emits `$m` on Full operands: `d = s1 op s2` with `s2` a register or a
/// stack constant (ymm memory / zmm `{1to8}` broadcast).
macro_rules! full3 {
    ($a:expr, $tier:expr, $m:ident, $d:expr, $s1:expr, $s2:expr) => {
        match ($tier, $s2) {
            (Tier::Avx2, Src::Reg(b)) => {
                $a.$m(YMM[$d as usize], YMM[$s1 as usize], YMM[b as usize])
            }
            (Tier::Avx2, Src::Mem(o)) => {
                $a.$m(YMM[$d as usize], YMM[$s1 as usize], ymmword_ptr(rsp + o))
            }
            (Tier::Avx512, Src::Reg(b)) => {
                $a.$m(ZMM[$d as usize], ZMM[$s1 as usize], ZMM[b as usize])
            }
            (Tier::Avx512, Src::Mem(o)) => {
                $a.$m(ZMM[$d as usize], ZMM[$s1 as usize], qword_bcst(rsp + o))
            }
        }
    };
}

/// Emits `$m` on Half registers (xmm / ymm).
macro_rules! half3 {
    ($a:expr, $tier:expr, $m:ident, $d:expr, $s1:expr, $s2:expr) => {
        match $tier {
            Tier::Avx2 => $a.$m(XMM[$d as usize], XMM[$s1 as usize], XMM[$s2 as usize]),
            Tier::Avx512 => $a.$m(YMM[$d as usize], YMM[$s1 as usize], YMM[$s2 as usize]),
        }
    };
}

impl Lower<'_> {
    fn loc(&self, v: Val) -> Loc {
        self.plan.locs[v.0 as usize]
    }

    fn is_mem(&self, v: Val) -> bool {
        matches!(self.loc(v), Loc::Home(Home::Stack(_)))
    }

    fn src(&self, v: Val) -> Result<Src, Fail> {
        match self.loc(v) {
            Loc::Vec(r) | Loc::Home(Home::Reg(r)) => Ok(Src::Reg(r)),
            Loc::Home(Home::Stack(o)) => Ok(Src::Mem(self.slots + o)),
            Loc::K(_) | Loc::None => Err(self.bad(v, "is not a vector value")),
        }
    }

    fn bad(&self, v: Val, what: &str) -> Fail {
        Fail(format!(
            "lowering: value {} ({:?}) {what}",
            v.0, self.ops[v.0 as usize].0
        ))
    }

    /// `v` in a register: its own, or loaded into `scratch` when it lives
    /// in the frame.
    fn reg(&self, a: &mut CodeAssembler, v: Val, scratch: u8) -> Result<u8, Fail> {
        match self.src(v)? {
            Src::Reg(r) => Ok(r),
            Src::Mem(o) => {
                match self.tier {
                    Tier::Avx2 => a.vmovupd(YMM[scratch as usize], ymmword_ptr(rsp + o)),
                    Tier::Avx512 => a.vbroadcastsd(ZMM[scratch as usize], qword_ptr(rsp + o)),
                }
                .map_err(iced("a constant load"))?;
                Ok(scratch)
            }
        }
    }

    fn vreg(&self, v: Val) -> Result<u8, Fail> {
        match self.loc(v) {
            Loc::Vec(r) | Loc::Home(Home::Reg(r)) => Ok(r),
            _ => Err(self.bad(v, "is not in a vector register")),
        }
    }

    fn kreg(&self, v: Val) -> Result<AsmRegisterK, Fail> {
        match self.loc(v) {
            Loc::K(r) => Ok(KREG[r as usize]),
            _ => Err(self.bad(v, "is not in a mask register")),
        }
    }

    fn knum(&self, v: Val) -> Result<u8, Fail> {
        match self.loc(v) {
            Loc::K(r) => Ok(r),
            _ => Err(self.bad(v, "is not in a mask register")),
        }
    }

    fn dst(&self, i: usize) -> Result<u8, Fail> {
        self.vreg(Val(i as u32))
    }

    /// Broadcast a 64-bit pattern into vector register `r` (clobbers rax).
    fn broadcast64(&self, a: &mut CodeAssembler, r: u8, bits: u64) -> Result<(), Fail> {
        let r = r as usize;
        if bits == 0 {
            return match self.tier {
                Tier::Avx2 => a.vpxor(YMM[r], YMM[r], YMM[r]),
                Tier::Avx512 => a.vpxorq(ZMM[r], ZMM[r], ZMM[r]),
            }
            .map_err(iced("a zero constant"));
        }
        a.mov(rax, bits).map_err(iced("a constant"))?;
        match self.tier {
            Tier::Avx2 => {
                a.vmovq(XMM[r], rax).map_err(iced("a constant"))?;
                a.vpbroadcastq(YMM[r], XMM[r]).map_err(iced("a constant"))
            }
            Tier::Avx512 => a.vpbroadcastq(ZMM[r], rax).map_err(iced("a constant")),
        }
    }

    /// Broadcast a fast-path constant into its slot (and its register).
    fn materialize(&self, a: &mut CodeAssembler, h: &ConstHome) -> Result<(), Fail> {
        let o = self.slots + h.slot;
        let (s1, _) = self.tier.scratch();
        match self.tier {
            Tier::Avx2 => {
                let r = h.reg.unwrap_or(s1);
                self.broadcast64(a, r, h.bits)?;
                a.vmovdqu(ymmword_ptr(rsp + o), YMM[r as usize])
                    .map_err(iced("a frame constant"))?;
            }
            Tier::Avx512 => {
                a.mov(rax, h.bits).map_err(iced("a frame constant"))?;
                a.mov(qword_ptr(rsp + o), rax)
                    .map_err(iced("a frame constant"))?;
                if let Some(r) = h.reg {
                    a.vpbroadcastq(ZMM[r as usize], rax)
                        .map_err(iced("a frame constant"))?;
                }
            }
        }
        Ok(())
    }

    /// Emits op `i`.
    fn op(&mut self, e: &mut Emitter, i: usize) -> Result<(), Fail> {
        let (op, _) = self.ops[i];
        let tier = self.tier;
        let (s1, s2) = tier.scratch();
        match op {
            Op::Const(bits) => {
                if let Loc::Vec(r) = self.loc(Val(i as u32)) {
                    let a = e.asm();
                    self.broadcast64(a, r, bits)?;
                }
            }
            Op::Const32(bits) => {
                let d = self.dst(i)? as usize;
                match tier {
                    Tier::Avx2 => e.broadcast_i32(XMM[d], bits as i32)?,
                    Tier::Avx512 => e.broadcast_i32(YMM[d], bits as i32)?,
                }
            }
            Op::Input(n) => {
                let d = self.dst(i)? as usize;
                let o = i32::from(n) * 4 * tier.lanes() as i32;
                let a = e.asm();
                match tier {
                    Tier::Avx2 => a.vcvtps2pd(YMM[d], xmmword_ptr(r8 + o)),
                    Tier::Avx512 => a.vcvtps2pd(ZMM[d], ymmword_ptr(r8 + o)),
                }
                .map_err(iced("the input load"))?;
            }
            Op::Load32(stream, n) => {
                let d = self.dst(i)? as usize;
                let base = if stream == 0 { r8 } else { rsi };
                let o = i32::from(n) * 4 * tier.lanes() as i32;
                let a = e.asm();
                match tier {
                    Tier::Avx2 => a.vmovups(XMM[d], xmmword_ptr(base + o)),
                    Tier::Avx512 => a.vmovups(YMM[d], ymmword_ptr(base + o)),
                }
                .map_err(iced("an input load"))?;
            }
            Op::Add(x, y) | Op::Mul(x, y) | Op::And(x, y) | Op::Xor(x, y) | Op::IAdd(x, y) => {
                // Commutative: keep a frame constant in the second place.
                let (x, y) = if self.is_mem(x) { (y, x) } else { (x, y) };
                let d = self.dst(i)?;
                let a = e.asm();
                let r1 = self.reg(a, x, s1)?;
                let r2 = self.src(y)?;
                match op {
                    Op::Add(..) => full3!(a, tier, vaddpd, d, r1, r2),
                    Op::Mul(..) => full3!(a, tier, vmulpd, d, r1, r2),
                    Op::And(..) => match (tier, r2) {
                        (Tier::Avx2, Src::Reg(b)) => {
                            a.vpand(YMM[d as usize], YMM[r1 as usize], YMM[b as usize])
                        }
                        (Tier::Avx2, Src::Mem(o)) => {
                            a.vpand(YMM[d as usize], YMM[r1 as usize], ymmword_ptr(rsp + o))
                        }
                        (Tier::Avx512, _) => full3!(a, tier, vpandq, d, r1, r2),
                    },
                    Op::Xor(..) => match (tier, r2) {
                        (Tier::Avx2, Src::Reg(b)) => {
                            a.vpxor(YMM[d as usize], YMM[r1 as usize], YMM[b as usize])
                        }
                        (Tier::Avx2, Src::Mem(o)) => {
                            a.vpxor(YMM[d as usize], YMM[r1 as usize], ymmword_ptr(rsp + o))
                        }
                        (Tier::Avx512, _) => full3!(a, tier, vpxorq, d, r1, r2),
                    },
                    _ => full3!(a, tier, vpaddq, d, r1, r2),
                }
                .map_err(iced("a binary operation"))?;
            }
            Op::Sub(x, y) => {
                let d = self.dst(i)?;
                let a = e.asm();
                let r1 = self.reg(a, x, s1)?;
                let r2 = self.src(y)?;
                full3!(a, tier, vsubpd, d, r1, r2).map_err(iced("a subtraction"))?;
            }
            Op::Min(x, y) | Op::Max(x, y) => self.min_max(e, i, op, x, y)?,
            Op::Shl(x, n) | Op::Ushr(x, n) => {
                let d = self.dst(i)? as usize;
                let a = e.asm();
                let r = self.reg(a, x, s1)? as usize;
                let n = i32::from(n);
                match (tier, op) {
                    (Tier::Avx2, Op::Shl(..)) => a.vpsllq(YMM[d], YMM[r], n),
                    (Tier::Avx2, _) => a.vpsrlq(YMM[d], YMM[r], n),
                    (Tier::Avx512, Op::Shl(..)) => a.vpsllq(ZMM[d], ZMM[r], n),
                    (Tier::Avx512, _) => a.vpsrlq(ZMM[d], ZMM[r], n),
                }
                .map_err(iced("a shift"))?;
            }
            Op::Floor(x) => {
                let d = self.dst(i)? as usize;
                let a = e.asm();
                let r = self.reg(a, x, s1)? as usize;
                // Round toward -inf, precision exception suppressed.
                match tier {
                    Tier::Avx2 => a.vroundpd(YMM[d], YMM[r], 0x09),
                    Tier::Avx512 => a.vrndscalepd(ZMM[d], ZMM[r], 0x09),
                }
                .map_err(iced("a floor"))?;
            }
            Op::Tab(..) if self.rows.contains(&i) => self.row_lookup(e, i)?,
            Op::Tab(..) if self.rows.iter().any(|&g| g < i && i < g + 8) => {
                // Loaded with its group's first member.
            }
            Op::Tab(base, j) => {
                let d = self.dst(i)? as usize;
                let a = e.asm();
                let j = self.reg(a, j, s1)? as usize;
                let disp = (base * 8) as i32;
                match tier {
                    Tier::Avx2 => {
                        let m = YMM[s2 as usize];
                        a.vpcmpeqq(m, m, m).map_err(iced("a gather mask"))?;
                        a.vpgatherqq_3(YMM[d], qword_ptr(r11 + YMM[j] * 8 + disp), m)
                    }
                    Tier::Avx512 => {
                        a.kxnorw(k1, k1, k1).map_err(iced("a gather mask"))?;
                        a.vpgatherqq(ZMM[d].k1(), qword_ptr(r11 + ZMM[j] * 8 + disp))
                    }
                }
                .map_err(iced("a table gather"))?;
            }
            Op::Cmp(p, x, y) => {
                let a = e.asm();
                let r1 = self.reg(a, x, s1)? as usize;
                let imm = vcmp_predicate(p);
                match (tier, self.src(y)?) {
                    (Tier::Avx2, src) => {
                        let d = self.dst(i)? as usize;
                        match src {
                            Src::Reg(b) => a.vcmppd(YMM[d], YMM[r1], YMM[b as usize], imm),
                            Src::Mem(o) => a.vcmppd(YMM[d], YMM[r1], ymmword_ptr(rsp + o), imm),
                        }
                    }
                    (Tier::Avx512, src) => {
                        let k = self.kreg(Val(i as u32))?;
                        match src {
                            Src::Reg(b) => a.vcmppd(k, ZMM[r1], ZMM[b as usize], imm),
                            Src::Mem(o) => a.vcmppd(k, ZMM[r1], qword_bcst(rsp + o), imm),
                        }
                    }
                }
                .map_err(iced("a comparison"))?;
            }
            Op::MaskAndNot(x, y) | Op::MaskAnd(x, y) => {
                let not = matches!(op, Op::MaskAndNot(..));
                let a = e.asm();
                match tier {
                    Tier::Avx2 => {
                        let (d, x, y) = (self.dst(i)?, self.vreg(x)?, self.vreg(y)?);
                        if not {
                            full3!(a, tier, vandnpd, d, x, Src::Reg(y))
                        } else {
                            full3!(a, tier, vandpd, d, x, Src::Reg(y))
                        }
                    }
                    Tier::Avx512 => {
                        let (d, x, y) = (self.kreg(Val(i as u32))?, self.kreg(x)?, self.kreg(y)?);
                        if not {
                            a.kandnw(d, x, y)
                        } else {
                            a.kandw(d, x, y)
                        }
                    }
                }
                .map_err(iced("a mask operation"))?;
            }
            Op::Select(m, t, f) => {
                let d = self.dst(i)? as usize;
                let a = e.asm();
                let f = self.reg(a, f, s1)? as usize;
                let t = self.reg(a, t, s2)? as usize;
                match tier {
                    Tier::Avx2 => {
                        let m = self.vreg(m)? as usize;
                        a.vblendvpd(YMM[d], YMM[f], YMM[t], YMM[m])
                    }
                    Tier::Avx512 => {
                        let k = self.knum(m)?;
                        a.vblendmpd(masked_zmm(ZMM[d], k), ZMM[f], ZMM[t])
                    }
                }
                .map_err(iced("a select"))?;
            }
            Op::Narrow(x) => {
                let d = self.dst(i)? as usize;
                let a = e.asm();
                let r = self.reg(a, x, s1)? as usize;
                match tier {
                    Tier::Avx2 => a.vcvtpd2ps(XMM[d], YMM[r]),
                    Tier::Avx512 => a.vcvtpd2ps(YMM[d], ZMM[r]),
                }
                .map_err(iced("a narrowing"))?;
            }
            Op::Widen(x) => {
                let d = self.dst(i)? as usize;
                let r = self.vreg(x)? as usize;
                let a = e.asm();
                match tier {
                    Tier::Avx2 => a.vcvtps2pd(YMM[d], XMM[r]),
                    Tier::Avx512 => a.vcvtps2pd(ZMM[d], YMM[r]),
                }
                .map_err(iced("a widening"))?;
            }
            Op::IAdd32(x, y)
            | Op::And32(x, y)
            | Op::Or32(x, y)
            | Op::Xor32(x, y)
            | Op::FAdd32(x, y)
            | Op::FMul32(x, y)
            | Op::FDiv32(x, y) => {
                let (d, x, y) = (self.dst(i)?, self.vreg(x)?, self.vreg(y)?);
                let a = e.asm();
                match (op, tier) {
                    (Op::IAdd32(..), _) => half3!(a, tier, vpaddd, d, x, y),
                    (Op::FAdd32(..), _) => half3!(a, tier, vaddps, d, x, y),
                    (Op::FMul32(..), _) => half3!(a, tier, vmulps, d, x, y),
                    (Op::FDiv32(..), _) => half3!(a, tier, vdivps, d, x, y),
                    (Op::Xor32(..), Tier::Avx2) => half3!(a, tier, vpxor, d, x, y),
                    (Op::Xor32(..), Tier::Avx512) => half3!(a, tier, vpxord, d, x, y),
                    (Op::And32(..), Tier::Avx2) => half3!(a, tier, vpand, d, x, y),
                    (Op::And32(..), Tier::Avx512) => half3!(a, tier, vpandd, d, x, y),
                    (_, Tier::Avx2) => half3!(a, tier, vpor, d, x, y),
                    (_, Tier::Avx512) => half3!(a, tier, vpord, d, x, y),
                }
                .map_err(iced("a 32-bit lane operation"))?;
            }
            Op::Eq32(x, y) => {
                let (x, y) = (self.vreg(x)? as usize, self.vreg(y)? as usize);
                let a = e.asm();
                match tier {
                    Tier::Avx2 => {
                        let d = self.dst(i)? as usize;
                        a.vpcmpeqd(XMM[d], XMM[x], XMM[y])
                    }
                    Tier::Avx512 => {
                        let k = self.kreg(Val(i as u32))?;
                        a.vpcmpeqd(k, YMM[x], YMM[y])
                    }
                }
                .map_err(iced("a 32-bit comparison"))?;
            }
            Op::Select32(m, t, f) => {
                let (d, t, f) = (
                    self.dst(i)? as usize,
                    self.vreg(t)? as usize,
                    self.vreg(f)? as usize,
                );
                let a = e.asm();
                match tier {
                    Tier::Avx2 => {
                        let m = self.vreg(m)? as usize;
                        a.vblendvps(XMM[d], XMM[f], XMM[t], XMM[m])
                    }
                    Tier::Avx512 => {
                        let k = self.knum(m)?;
                        a.vpblendmd(masked_ymm(YMM[d], k), YMM[f], YMM[t])
                    }
                }
                .map_err(iced("a 32-bit select"))?;
            }
            Op::SkipIfAll(m) => {
                let join = e.create_label();
                self.join = Some(join);
                let a = e.asm();
                match tier {
                    Tier::Avx2 => {
                        let m = self.vreg(m)? as usize;
                        a.vmovmskps(eax, XMM[m]).map_err(iced("a lane test"))?;
                        a.cmp(eax, 0xf).map_err(iced("a lane test"))?;
                        a.je(join).map_err(iced("a lane test"))?;
                    }
                    Tier::Avx512 => {
                        let k = self.kreg(m)?;
                        // CF = every one of the 8 lanes set.
                        a.kortestb(k, k).map_err(iced("a lane test"))?;
                        a.jb(join).map_err(iced("a lane test"))?;
                    }
                }
                self.park(e, i, true)?;
            }
            Op::Join => {
                let mut join = self
                    .join
                    .take()
                    .ok_or_else(|| Fail("lowering: a join without a skip".into()))?;
                // Only the slow path gets here before the label: give the
                // parked values and the hoisted constants their registers back.
                let skip = self
                    .plan
                    .parked
                    .iter()
                    .find(|(_, j, _)| *j == i)
                    .map(|(s, _, _)| *s);
                if let Some(skip) = skip {
                    self.park(e, skip, false)?;
                }
                for h in &self.plan.homes {
                    if let Some(r) = h.reg {
                        let o = self.slots + h.slot;
                        match tier {
                            Tier::Avx2 => e.asm().vmovupd(YMM[r as usize], ymmword_ptr(rsp + o)),
                            Tier::Avx512 => {
                                e.asm().vbroadcastsd(ZMM[r as usize], qword_ptr(rsp + o))
                            }
                        }
                        .map_err(iced("a constant reload"))?;
                    }
                }
                e.set_label(&mut join)?;
            }
            Op::Assign(dst, src) => {
                let (d, s) = (self.vreg(dst)? as usize, self.vreg(src)? as usize);
                let a = e.asm();
                match tier {
                    Tier::Avx2 => a.vmovaps(XMM[d], XMM[s]),
                    Tier::Avx512 => a.vmovaps(YMM[d], YMM[s]),
                }
                .map_err(iced("an assignment"))?;
            }
            Op::Store(v, n) => {
                let r = self.vreg(v)? as usize;
                let o = i32::from(n) * 4 * tier.lanes() as i32;
                let a = e.asm();
                match tier {
                    Tier::Avx2 => a.vmovups(xmmword_ptr(r9 + o), XMM[r]),
                    Tier::Avx512 => a.vmovups(ymmword_ptr(r9 + o), YMM[r]),
                }
                .map_err(iced("the output store"))?;
            }
        }
        Ok(())
    }

    /// Saves (`save`) or restores the registers parked around the slow
    /// block that starts at op `skip`.
    fn park(&self, e: &mut Emitter, skip: usize, save: bool) -> Result<(), Fail> {
        let Some((_, _, regs)) = self.plan.parked.iter().find(|(s, _, _)| *s == skip) else {
            return Ok(());
        };
        let base = self.slots + self.plan.slot_area;
        let a = e.asm();
        for &(r, o) in regs {
            let r = r as usize;
            match (self.tier, save) {
                (Tier::Avx2, true) => a.vmovdqu(ymmword_ptr(rsp + base + o), YMM[r]),
                (Tier::Avx2, false) => a.vmovdqu(YMM[r], ymmword_ptr(rsp + base + o)),
                (Tier::Avx512, true) => a.vmovdqu64(zmmword_ptr(rsp + base + o), ZMM[r]),
                (Tier::Avx512, false) => a.vmovdqu64(ZMM[r], zmmword_ptr(rsp + base + o)),
            }
            .map_err(iced("a parked register"))?;
        }
        Ok(())
    }

    /// Eight `Tab(base + k, j)` at once: each lane's eight consecutive
    /// words are one row load, and an in-register transpose turns rows
    /// (lanes) into the eight coefficient vectors. The group's destinations
    /// are all free here: only its own members are allocated between its
    /// first and last op, and the index dies after the last.
    fn row_lookup(&self, e: &mut Emitter, i: usize) -> Result<(), Fail> {
        let tier = self.tier;
        let (s1, _) = tier.scratch();
        let Op::Tab(base, j) = self.ops[i].0 else {
            return Err(Fail("lowering: a row lookup without a table op".into()));
        };
        let mut d = [0usize; 8];
        for (k, dk) in d.iter_mut().enumerate() {
            *dk = self.dst(i + k)? as usize;
        }
        let disp = (base * 8) as i32;
        let a = e.asm();
        let jr = self.vreg(j)? as usize;
        let s = s1 as usize;
        let t = iced("a row lookup");
        match tier {
            Tier::Avx512 => {
                a.vmovdqu64(zmmword_ptr(rsp + IDX), ZMM[jr]).map_err(&t)?;
                for (lane, &dl) in d.iter().enumerate() {
                    a.mov(rax, qword_ptr(rsp + IDX + 8 * lane as i32))
                        .map_err(&t)?;
                    a.vmovupd(ZMM[dl], zmmword_ptr(r11 + rax * 8 + disp))
                        .map_err(&t)?;
                }
                // 8x8 transpose, in place, one scratch: unpack pairs, then
                // 128-bit lane shuffles at distance 2 and 4.
                for (x, y) in [(0, 1), (2, 3), (4, 5), (6, 7)] {
                    let (p, q) = (ZMM[d[x]], ZMM[d[y]]);
                    a.vunpcklpd(ZMM[s], p, q).map_err(&t)?;
                    a.vunpckhpd(q, p, q).map_err(&t)?;
                    a.vmovapd(p, ZMM[s]).map_err(&t)?;
                }
                for pairs in [
                    [(0, 2), (1, 3), (4, 6), (5, 7)],
                    [(0, 4), (1, 5), (2, 6), (3, 7)],
                ] {
                    for (x, y) in pairs {
                        let (p, q) = (ZMM[d[x]], ZMM[d[y]]);
                        a.vshuff64x2(ZMM[s], p, q, 0x88).map_err(&t)?;
                        a.vshuff64x2(q, p, q, 0xdd).map_err(&t)?;
                        a.vmovapd(p, ZMM[s]).map_err(&t)?;
                    }
                }
            }
            Tier::Avx2 => {
                a.vmovdqu(ymmword_ptr(rsp + IDX), YMM[jr]).map_err(&t)?;
                // Two 4x4 transposes: words 0-3 of each row, then 4-7.
                for half in 0..2 {
                    let dh = &d[4 * half..4 * half + 4];
                    for (lane, &dl) in dh.iter().enumerate() {
                        a.mov(rax, qword_ptr(rsp + IDX + 8 * lane as i32))
                            .map_err(&t)?;
                        a.vmovupd(
                            YMM[dl],
                            ymmword_ptr(r11 + rax * 8 + disp + 32 * half as i32),
                        )
                        .map_err(&t)?;
                    }
                    for (x, y) in [(0, 1), (2, 3)] {
                        let (p, q) = (YMM[dh[x]], YMM[dh[y]]);
                        a.vunpcklpd(YMM[s], p, q).map_err(&t)?;
                        a.vunpckhpd(q, p, q).map_err(&t)?;
                        a.vmovapd(p, YMM[s]).map_err(&t)?;
                    }
                    for (x, y) in [(0, 2), (1, 3)] {
                        let (p, q) = (YMM[dh[x]], YMM[dh[y]]);
                        a.vperm2f128(YMM[s], p, q, 0x20).map_err(&t)?;
                        a.vperm2f128(q, p, q, 0x31).map_err(&t)?;
                        a.vmovapd(p, YMM[s]).map_err(&t)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The contract's NaN-propagating `fmin`/`fmax`. `vminpd d, a, b`
    /// returns `b` when either is NaN: with a constant first (never NaN) the
    /// variable's NaN propagates; otherwise a NaN `a` is blended back in.
    fn min_max(&self, e: &mut Emitter, i: usize, op: Op, x: Val, y: Val) -> Result<(), Fail> {
        let tier = self.tier;
        let (s1, s2) = tier.scratch();
        let is_const = |v: Val| matches!(self.ops[v.0 as usize].0, Op::Const(_));
        let is_min = matches!(op, Op::Min(..));
        let d = self.dst(i)?;
        let a = e.asm();
        let emit = |a: &mut CodeAssembler, d: u8, p: u8, q: Src| {
            if is_min {
                full3!(a, tier, vminpd, d, p, q)
            } else {
                full3!(a, tier, vmaxpd, d, p, q)
            }
        };
        if is_const(x) || is_const(y) {
            // min/max of a constant and a variable: commutative except for
            // NaN (and signed zeros, which no clamp constant is).
            let (c, v) = if is_const(x) { (x, y) } else { (y, x) };
            let c = self.reg(a, c, s1)?;
            let v = self.src(v)?;
            emit(a, d, c, v).map_err(iced("a clamp"))?;
            return Ok(());
        }
        let xr = self.reg(a, x, s1)?;
        let yr = self.src(y)?;
        emit(a, s2, xr, yr).map_err(iced("a min/max"))?;
        match tier {
            Tier::Avx2 => {
                let (t, xx) = (YMM[s2 as usize], YMM[xr as usize]);
                // d = unord(x, x) ? x : t (x is not a constant, so not in s1).
                let m = YMM[s1 as usize];
                a.vcmppd(m, xx, xx, VCMP_UNORD).map_err(iced("a min/max"))?;
                a.vblendvpd(YMM[d as usize], t, xx, m)
                    .map_err(iced("a min/max"))?;
            }
            Tier::Avx512 => {
                let (t, xx) = (ZMM[s2 as usize], ZMM[xr as usize]);
                a.vcmppd(k1, xx, xx, VCMP_UNORD)
                    .map_err(iced("a min/max"))?;
                a.vblendmpd(ZMM[d as usize].k1(), t, xx)
                    .map_err(iced("a min/max"))?;
            }
        }
        Ok(())
    }
}

/// Emits the whole body for `rec`'s step at `tier` under `abi`, reading
/// arguments laid out as `layout`.
fn emit_body(
    tier: Tier,
    halves: usize,
    abi: Abi,
    layout: Layout,
    rec: &Recorder,
) -> Result<NativeCode, Fail> {
    let recorded: Vec<(Op, Kind)> = rec.ops.iter().map(|&op| (op, Kind::of(&op))).collect();
    // A map whose expression never reads `b` never touches it (its tail is
    // not staged either), so such a map's `b` may be any pointer.
    let stages_b = layout == Layout::Map && rec.ops.iter().any(|op| matches!(op, Op::Load32(1, _)));
    let (fused, rows) = fuse_rows(&recorded);
    let ops = &fused;
    let plan = plan(tier, ops)?;
    let lanes = (halves * tier.lanes()) as i32;
    let step_bytes = 4 * lanes;
    let slots = slots(layout);
    let frame = slots + plan.slot_area + plan.park_area;
    if frame > 4000 {
        return Err(Fail(format!(
            "{frame} bytes of frame would need a stack probe"
        )));
    }
    let mut e = Emitter::new(abi)?;
    if tier == Tier::Avx512 {
        e.set_encoding(Encoding::Evex);
    }
    let mut clobbers = Clobbers::none();
    for r in 0..plan.vec_high.max(16) {
        clobbers = clobbers.with(XMM[r as usize]);
    }
    if layout == Layout::Map {
        // The second stream's pointer (callee-saved on Win64).
        clobbers = clobbers.with(rsi);
    }
    e.prologue(clobbers)?;
    let args = e.args_reg();
    match layout {
        Layout::Unary => {
            let a = e.asm();
            a.mov(r8, qword_ptr(args)).map_err(iced("the arguments"))?;
            a.mov(r9, qword_ptr(args + 8))
                .map_err(iced("the arguments"))?;
            a.mov(r10, qword_ptr(args + 16))
                .map_err(iced("the arguments"))?;
            a.mov(r11, qword_ptr(args + 24))
                .map_err(iced("the arguments"))?;
        }
        Layout::Map => {
            // r10 = end - start elements from `start` on, or none unless
            // start <= end <= len; every argument is read before rcx (the
            // Win64 argument register) is written.
            let mut bad = e.create_label();
            let mut good = e.create_label();
            let t = iced("the arguments");
            let a = e.asm();
            a.mov(rax, qword_ptr(args + 40)).map_err(&t)?;
            a.mov(r10, qword_ptr(args + 48)).map_err(&t)?;
            a.mov(rdx, qword_ptr(args + 32)).map_err(&t)?;
            a.mov(r8, qword_ptr(args)).map_err(&t)?;
            a.mov(rsi, qword_ptr(args + 8)).map_err(&t)?;
            a.mov(r9, qword_ptr(args + 16)).map_err(&t)?;
            a.mov(r11, qword_ptr(args + 24)).map_err(&t)?;
            a.cmp(rax, r10).map_err(&t)?;
            a.ja(bad).map_err(&t)?;
            a.cmp(r10, rdx).map_err(&t)?;
            a.ja(bad).map_err(&t)?;
            a.sub(r10, rax).map_err(&t)?;
            a.lea(r8, qword_ptr(r8 + rax * 4)).map_err(&t)?;
            a.lea(rsi, qword_ptr(rsi + rax * 4)).map_err(&t)?;
            a.lea(r9, qword_ptr(r9 + rax * 4)).map_err(&t)?;
            a.jmp(good).map_err(&t)?;
            e.set_label(&mut bad)?;
            e.asm().xor(r10, r10).map_err(&t)?;
            e.set_label(&mut good)?;
        }
    }
    {
        let a = e.asm();
        // An aligned frame of our own; the caller's rsp is kept in it.
        a.mov(rax, rsp).map_err(iced("the frame"))?;
        a.sub(rsp, frame).map_err(iced("the frame"))?;
        a.and(rsp, -64).map_err(iced("the frame"))?;
        a.mov(qword_ptr(rsp + SAVED_RSP), rax)
            .map_err(iced("the frame"))?;
    }
    let mut lower = Lower {
        tier,
        plan: &plan,
        ops,
        join: None,
        rows,
        slots,
    };
    // Fast-path constants: into their slots, and the hoisted ones into
    // their registers too.
    for h in &plan.homes {
        lower.materialize(e.asm(), h)?;
    }
    let mut top = e.create_label();
    let mut body = e.create_label();
    let mut tail = e.create_label();
    let tail_out = e.create_label();
    let mut exit = e.create_label();
    e.asm().xor(rdx, rdx).map_err(iced("the loop"))?;
    e.set_label(&mut top)?;
    e.asm().cmp(r10, lanes).map_err(iced("the loop"))?;
    e.asm().jb(tail).map_err(iced("the loop"))?;
    e.set_label(&mut body)?;
    let body_offset_label = body;
    for i in 0..ops.len() {
        lower.op(&mut e, i)?;
    }
    {
        let a = e.asm();
        a.test(rdx, rdx).map_err(iced("the loop"))?;
        a.jne(tail_out).map_err(iced("the loop"))?;
        a.add(r8, step_bytes).map_err(iced("the loop"))?;
        a.add(r9, step_bytes).map_err(iced("the loop"))?;
        if layout == Layout::Map {
            a.add(rsi, step_bytes).map_err(iced("the loop"))?;
        }
        a.sub(r10, lanes).map_err(iced("the loop"))?;
        a.jmp(top).map_err(iced("the loop"))?;
    }
    // Tail: stage the last `len` (< lanes) inputs in the zeroed buffer, run
    // the step on it once, copy `len` outputs back.
    e.set_label(&mut tail)?;
    {
        let a = e.asm();
        a.test(r10, r10).map_err(iced("the tail"))?;
        a.je(exit).map_err(iced("the tail"))?;
        // Scratch only: hoisted constants stay live across the tail.
        let z = tier.scratch().1 as usize;
        match tier {
            Tier::Avx2 => a.vpxor(YMM[z], YMM[z], YMM[z]),
            Tier::Avx512 => a.vpxorq(ZMM[z], ZMM[z], ZMM[z]),
        }
        .map_err(iced("the tail"))?;
        let bufs: &[i32] = match layout {
            Layout::Unary => &[BUF],
            Layout::Map => &[BUF, BUF_B],
        };
        for &buf in bufs {
            match tier {
                Tier::Avx2 => a.vmovdqu(ymmword_ptr(rsp + buf), YMM[z]),
                Tier::Avx512 => a.vmovdqu64(zmmword_ptr(rsp + buf), ZMM[z]),
            }
            .map_err(iced("the tail"))?;
        }
        a.xor(rcx, rcx).map_err(iced("the tail"))?;
    }
    let mut copy_in = e.create_label();
    e.set_label(&mut copy_in)?;
    {
        let a = e.asm();
        a.mov(eax, dword_ptr(r8 + rcx * 4))
            .map_err(iced("the tail"))?;
        a.mov(dword_ptr(rsp + rcx * 4 + BUF), eax)
            .map_err(iced("the tail"))?;
        if stages_b {
            a.mov(eax, dword_ptr(rsi + rcx * 4))
                .map_err(iced("the tail"))?;
            a.mov(dword_ptr(rsp + rcx * 4 + BUF_B), eax)
                .map_err(iced("the tail"))?;
        }
        a.inc(rcx).map_err(iced("the tail"))?;
        a.cmp(rcx, r10).map_err(iced("the tail"))?;
        a.jb(copy_in).map_err(iced("the tail"))?;
        a.mov(rdx, r9).map_err(iced("the tail"))?;
        a.lea(r8, qword_ptr(rsp + BUF)).map_err(iced("the tail"))?;
        a.lea(r9, qword_ptr(rsp + BUF)).map_err(iced("the tail"))?;
        if stages_b {
            a.lea(rsi, qword_ptr(rsp + BUF_B))
                .map_err(iced("the tail"))?;
        }
        a.jmp(body_offset_label).map_err(iced("the tail"))?;
    }
    let mut tail_out = tail_out;
    e.set_label(&mut tail_out)?;
    e.asm().xor(rcx, rcx).map_err(iced("the tail"))?;
    let mut copy_out = e.create_label();
    e.set_label(&mut copy_out)?;
    {
        let a = e.asm();
        a.mov(eax, dword_ptr(rsp + rcx * 4 + BUF))
            .map_err(iced("the tail"))?;
        a.mov(dword_ptr(rdx + rcx * 4), eax)
            .map_err(iced("the tail"))?;
        a.inc(rcx).map_err(iced("the tail"))?;
        a.cmp(rcx, r10).map_err(iced("the tail"))?;
        a.jb(copy_out).map_err(iced("the tail"))?;
    }
    e.set_label(&mut exit)?;
    e.asm()
        .mov(rsp, qword_ptr(rsp + SAVED_RSP))
        .map_err(iced("the frame"))?;
    e.epilogue()?;
    let emitted = e.finish()?;
    let head = emitted.label_offset(&top).unwrap_or(0);
    let tail_at = emitted.label_offset(&tail).unwrap_or(0);
    let back_edge = emitted
        .listing
        .lines
        .iter()
        .rev()
        .find(|l| l.offset < tail_at)
        .map_or(0, |l| l.offset);
    Ok(NativeCode {
        isa: Isa::X86_64,
        pool: None,
        bytes: emitted.bytes,
        loops: vec![LoopAnnotation {
            name: "elements".into(),
            head,
            back_edge,
        }],
    })
}

// ---------------------------------------------------------------- twins ---

/// The functions a twin can compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TwinFunc {
    /// `exp`, with the rounding test and the slow path.
    Exp,
    /// `erf`.
    Erf,
}

/// An x64 twin of an elementwise arm: one function at one tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct X64Twin {
    /// The function.
    pub func: TwinFunc,
    /// The tier.
    pub tier: Tier,
}

const AVX2_FEATURES: &[Feature] = &[Feature::Avx, Feature::Avx2];
const AVX512_FEATURES: &[Feature] = &[
    Feature::Avx,
    Feature::Avx2,
    Feature::Avx512f,
    Feature::Avx512dq,
    Feature::Avx512vl,
];

impl X64Twin {
    /// Halves (register-wide steps) per loop iteration: two, interleaved,
    /// except erf on AVX2, whose eight live coefficients per half leave no
    /// room in 16 registers for a second half.
    pub fn halves(self) -> usize {
        match (self.func, self.tier) {
            (TwinFunc::Erf, Tier::Avx2) => 1,
            _ => 2,
        }
    }

    /// f32 elements per loop iteration.
    pub fn per_iteration(self) -> usize {
        self.halves() * self.tier.lanes()
    }

    /// The steps this twin records (exposed for tests and listings).
    fn record(self) -> Recorder {
        match self.func {
            TwinFunc::Exp => record_exp(self.halves() == 2),
            TwinFunc::Erf => record_erf(self.halves() == 2),
        }
    }

    /// The body for `abi` (the host's is what [`Twin::emit`] gives; the
    /// other is for tests that call it through `extern "win64"`).
    pub fn emit_for(self, abi: Abi) -> Result<NativeCode, Refusal> {
        emit_body(self.tier, self.halves(), abi, Layout::Unary, &self.record()).map_err(
            |Fail(e)| Refusal::EmitError {
                message: format!("{}: {e}", Twin::name(&self)),
            },
        )
    }
}

// SAFETY: the body reads and writes only what the arguments' extents name
// and returns normally (module docs); validation checks its results.
unsafe impl Twin for X64Twin {
    fn name(&self) -> &'static str {
        match (self.func, self.tier) {
            (TwinFunc::Exp, Tier::Avx2) => "exp.twin.avx2",
            (TwinFunc::Exp, Tier::Avx512) => "exp.twin.avx512",
            (TwinFunc::Erf, Tier::Avx2) => "erf.twin.avx2",
            (TwinFunc::Erf, Tier::Avx512) => "erf.twin.avx512",
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

    /// The step loop (full steps of [`X64Twin::per_iteration`] elements),
    /// inside it the copy of a short tail into the stack buffer (the tail
    /// step re-enters the loop body), and after it the copy back out.
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        match offer.contract.geometry.get("len") {
            Some(len) => body_loops(self.per_iteration() as u64, len),
            None => offer.loops.clone(),
        }
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        let c = &offer.contract;
        if c.args != super::ARGS_NAME {
            return Err(Refusal::BadOperand {
                operand: "args".into(),
                reason: format!(
                    "{} takes ElementwiseArgs, the offer names {}",
                    self.name(),
                    c.args
                ),
            });
        }
        let family = match self.func {
            TwinFunc::Exp => "elementwise.exp",
            TwinFunc::Erf => "elementwise.erf",
        };
        if c.family != family {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!(
                    "{} computes {family}, the offer is for {}",
                    self.name(),
                    c.family
                ),
            });
        }
        self.emit_for(Abi::host())
    }
}

/// The name of the arm the exp twins mirror.
pub const ARM_EXP: &str = "exp.arm.f32x4";
/// The name of the arm the erf twins mirror.
pub const ARM_ERF: &str = "erf.arm.f32x4";

/// Every x64 twin of the elementwise family, widest tier first (for the
/// catalogue and for `cargo xtask bench` / `exhaustive`).
pub fn x64_twins() -> Vec<Box<dyn Twin>> {
    let mut out: Vec<Box<dyn Twin>> = Vec::new();
    for func in [TwinFunc::Exp, TwinFunc::Erf] {
        for tier in [Tier::Avx512, Tier::Avx2] {
            out.push(Box::new(X64Twin { func, tier }));
        }
    }
    out
}

// ----------------------------------------------------------------- maps ---

/// Halves per loop iteration of a map body: two, interleaved, at both tiers.
pub const MAP_HALVES: usize = 2;

/// f32 elements per loop iteration of a map body at `tier`.
pub fn map_per_iteration(tier: Tier) -> usize {
    MAP_HALVES * tier.lanes()
}

/// The loops of a body of `per` elements a step over `len` elements, as
/// `emit_body` writes them: the step loop, inside it the copy of a short
/// tail into the stack buffers (the tail step re-enters the loop body),
/// after it the copy back out.
fn body_loops(per: u64, len: u64) -> Vec<LoopTrip> {
    let trip = |name: &str, trips, depth| LoopTrip {
        name: name.to_owned(),
        trips,
        depth,
    };
    vec![
        trip("steps", len / per, 0),
        trip("stage-in", len % per, 1),
        trip("stage-out", len % per, 0),
    ]
}

/// The loops of [`emit_map`]'s body at `tier` over `elements` elements
/// (`end - start`), with their trip counts.
pub fn map_loops(tier: Tier, elements: u64) -> Vec<LoopTrip> {
    body_loops(map_per_iteration(tier) as u64, elements)
}

/// The body of the exp-based map `map` at `tier` under `abi`: the
/// [`map`](super::map) module's contract, [`MapArgs`](super::map::MapArgs)
/// layout. Steps of [`map_per_iteration`] elements; the last
/// `(end - start) % map_per_iteration(tier)` elements are staged through
/// zeroed stack buffers, each stream the map reads (a map that never
/// reads `b` never dereferences it).
pub fn emit_map(map: &ExpMap, tier: Tier, abi: Abi) -> Result<NativeCode, Refusal> {
    let rec = record_map(map, MAP_HALVES == 2);
    emit_body(tier, MAP_HALVES, abi, Layout::Map, &rec).map_err(|Fail(e)| Refusal::EmitError {
        message: format!("exp map at {tier:?}: {e}"),
    })
}
