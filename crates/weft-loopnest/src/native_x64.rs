//! Lowering a checked [`Kernel`] straight to x64 machine code (AVX2 or
//! AVX-512), through weft-x64's emitter: one lowering for every nest, so
//! every family whose nest it can express gets a twin of its arm.
//!
//! One job: turn the IR into a leaf body that computes the arm's bits.
//! It mirrors [`crate::lower`] construct by construct (the functions have
//! the same names: `entry`, `guard`, `body`, `lower_loop`, `vector_step`,
//! `expr`, `load`, `lower_reduce`, `step`, `argmax_step`, `argmax_merge`,
//! `fold_pair`); what differs is only how many iterations one step
//! covers:
//!
//! - **Entry**: the guards are evaluated on the argument struct; if one
//!   fails the body returns having touched nothing.
//! - **Loops with inner loops** are counted loops on a general register
//!   (`head: i < end`, body, `latch: i += 1`), as in the arm.
//! - **Innermost loops** run [`Tier::lanes`] iterations a step (16 in a
//!   zmm, 8 in a ymm) while `i + lanes <= end`, then one masked step for
//!   what is left: loads masked (the masked-out lanes are not read, so
//!   nothing outside the range is touched), stores masked. The IR's tile
//!   rule (a stored buffer is read only at the stored element or its pair
//!   partner, never after the store) makes any number of iterations at
//!   once give the bits of one at a time, so the wider step is exact; each
//!   element still sees the arm's operations in the arm's order.
//! - **Reductions** keep their lanes (a sum's are the IR's; an argmax's,
//!   below) in `lanes / tier.lanes()`
//!   registers (global lane `L` is lane `L mod w` of register `L / w`),
//!   run a loop of `lanes` elements a step, then the remainder (whole
//!   registers, then one register under a mask that adds only the lanes
//!   the remainder reaches), then [`Fold::Halving`] over the global lanes:
//!   registers pairwise, then the halves of the last register down to one
//!   lane. That is the arm's fold, which depends only on `lanes`, not on
//!   how lanes are grouped into registers. `a ⊕ b` always has the lower
//!   lane as the first operand, as the arm has.
//! - **Gather**: a `u32` load; out of range jumps to the enclosing loop's
//!   latch (or the return).
//!
//! Statements outside innermost loops compute every lane alike (loads and
//! parameters broadcast), so a value bound there is a broadcast register
//! that vector steps use as it is.
//!
//! [`ReduceOp::ArgMax`] keeps its values and their indices (i32 lanes) in
//! register pairs — four pairs at least, since its answer does not depend
//! on the lanes (the IR says so; a sum's lanes are the IR's, which fix its
//! rounding) — and takes the arm's two combines as they are: the step
//! (`!(new <= acc)` and `acc` not a NaN: a later element wins only by
//! ranking higher) and the fold's merge (also: the same rank, equal or
//! both NaN, with a smaller index), as per-lane masks (`k` registers under
//! AVX-512, all-ones lanes under AVX2) and selects.
//!
//! Narrower loads widen as the arm's do (`i8` sign-extended by
//! `vpmovsxbd`, `u16` zero-extended by `vpmovzxwd`), `IntToF32` is
//! `vcvtdq2ps`, and `F16ToF32` is the arm's integer sequence (rebias,
//! `m ⊗ 2^-24` for subnormals, rebias twice for infinities and NaNs, the
//! sign), so NaN payloads are kept as the arm keeps them.
//!
//! A nest that takes `exp` goes down the map route ([`map_route`]): when it
//! is an exp-based elementwise map (SiLU·mul, `y = exp(x)`), it is read
//! back as weft-elementwise's map language and emitted by that crate's map
//! lowering, the exp twins' recorded steps inlined between the map's own
//! f32 operations; its loops are the map body's (`steps`, `stage-in`,
//! `stage-out`). Any other `exp` is refused by name.
//!
//! Not yet expressed, and refused by name ([`NativeError::Unsupported`],
//! a `unsupported-geometry` refusal) rather than approximated: `exp`
//! outside an exp-based map, `i8` and `u16` loads in a partial step (a
//! narrower masked load: no family's nest has one), innermost loops of
//! width 1, and reductions with fewer lanes than one register holds.
//!
//! Invariants: no fused multiply-add, no approximation instructions; every
//! load of a partial step is masked; the callee-saved registers a body
//! writes are exactly those declared (a first pass finds them, the second
//! emits with them declared: the allocation is deterministic); the loops in
//! the bytes are the loops [`loop_trips`] states, in the same order, and
//! are annotated with their names.

use std::collections::{BTreeSet, HashMap};

use weft_kernel::{Feature, Isa, LoopAnnotation, LoopTrip, NativeCode, Refusal};
use weft_x64::iced_x86::code_asm::registers::gpr32::get_gpr32;
use weft_x64::iced_x86::code_asm::registers::gpr64::get_gpr64;
use weft_x64::iced_x86::code_asm::{
    dword_ptr, eax, ptr, qword_ptr, r10, r10d, r11, rax, rsp, AsmRegister32, AsmRegister64,
    CodeLabel,
};
use weft_x64::iced_x86::{Code, Instruction, MemoryOperand, Register};
use weft_x64::{Abi, Clobbers, EmitError, Emitter};

use crate::ir::{
    Affine, Binary, Elem, Expr, Extent, Fold, Guard, IrError, Kernel, Loop, ParamId, Reduce,
    ReduceOp, Stmt, Term, Unary, ValId, VarId, F16_REBIAS, F16_SUBNORMAL_SCALE,
};
use crate::map_route;
use crate::native_shared::{base_key, innermost, map_elements, reduce_lanes, trips, BaseKey};
use weft_elementwise::twin_x64;

/// Which x64 vector extension a body is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// VEX ymm registers (8 f32 lanes, 16 registers); partial steps through
    /// `vmaskmovps` with masks read from a 64-byte window on the stack.
    Avx2,
    /// EVEX zmm registers (16 f32 lanes, 32 registers); partial steps
    /// under `k1`, built by `bzhi`.
    Avx512,
}

const AVX2_FEATURES: &[Feature] = &[Feature::Avx, Feature::Avx2];
const AVX512_FEATURES: &[Feature] = &[
    Feature::Avx,
    Feature::Avx2,
    Feature::Avx512f,
    Feature::Avx512dq,
    Feature::Avx512vl,
    Feature::Bmi2,
];

impl Tier {
    /// f32 lanes in one register: iterations per vector step.
    pub fn lanes(self) -> u32 {
        match self {
            Tier::Avx2 => 8,
            Tier::Avx512 => 16,
        }
    }

    /// What a host must have to run a body of this tier: AVX2 (ymm
    /// arithmetic, `vbroadcastss` from a register); AVX-512 F (zmm, `k`
    /// masks) and BMI2 (`bzhi`, which builds a partial step's mask), with
    /// AVX2 for the frame; DQ and VL for the map route's exp
    /// ([`map_route`]: `kortestb`, EVEX ymm).
    pub fn requires(self) -> &'static [Feature] {
        match self {
            Tier::Avx2 => AVX2_FEATURES,
            Tier::Avx512 => AVX512_FEATURES,
        }
    }

    /// weft-elementwise's tier of the same width, for nests that take the
    /// map route ([`map_route`]).
    fn map_tier(self) -> twin_x64::Tier {
        match self {
            Tier::Avx2 => twin_x64::Tier::Avx2,
            Tier::Avx512 => twin_x64::Tier::Avx512,
        }
    }

    fn registers(self) -> u8 {
        match self {
            Tier::Avx2 => 16,
            Tier::Avx512 => 32,
        }
    }

    /// Register `n` at this tier's width.
    fn reg(self, n: u8) -> Register {
        match self {
            Tier::Avx2 => Register::YMM0 + u32::from(n),
            Tier::Avx512 => Register::ZMM0 + u32::from(n),
        }
    }

    fn binary(self, op: Binary) -> Code {
        match (self, op) {
            (Tier::Avx2, Binary::Add) => Code::VEX_Vaddps_ymm_ymm_ymmm256,
            (Tier::Avx2, Binary::Sub) => Code::VEX_Vsubps_ymm_ymm_ymmm256,
            (Tier::Avx2, Binary::Mul) => Code::VEX_Vmulps_ymm_ymm_ymmm256,
            (Tier::Avx2, Binary::Div) => Code::VEX_Vdivps_ymm_ymm_ymmm256,
            (Tier::Avx512, Binary::Add) => Code::EVEX_Vaddps_zmm_k1z_zmm_zmmm512b32_er,
            (Tier::Avx512, Binary::Sub) => Code::EVEX_Vsubps_zmm_k1z_zmm_zmmm512b32_er,
            (Tier::Avx512, Binary::Mul) => Code::EVEX_Vmulps_zmm_k1z_zmm_zmmm512b32_er,
            (Tier::Avx512, Binary::Div) => Code::EVEX_Vdivps_zmm_k1z_zmm_zmmm512b32_er,
        }
    }

    fn load(self) -> Code {
        match self {
            Tier::Avx2 => Code::VEX_Vmovups_ymm_ymmm256,
            Tier::Avx512 => Code::EVEX_Vmovups_zmm_k1z_zmmm512,
        }
    }

    fn store(self) -> Code {
        match self {
            Tier::Avx2 => Code::VEX_Vmovups_ymmm256_ymm,
            Tier::Avx512 => Code::EVEX_Vmovups_zmmm512_k1z_zmm,
        }
    }

    /// `vbroadcastss` from memory or from an xmm register's lane 0.
    fn broadcast(self, from_memory: bool) -> Code {
        match (self, from_memory) {
            (Tier::Avx2, true) => Code::VEX_Vbroadcastss_ymm_m32,
            (Tier::Avx2, false) => Code::VEX_Vbroadcastss_ymm_xmm,
            (Tier::Avx512, _) => Code::EVEX_Vbroadcastss_zmm_k1z_xmmm32,
        }
    }

    fn sqrt(self) -> Code {
        match self {
            Tier::Avx2 => Code::VEX_Vsqrtps_ymm_ymmm256,
            Tier::Avx512 => Code::EVEX_Vsqrtps_zmm_k1z_zmmm512b32_er,
        }
    }

    fn xor(self) -> Code {
        match self {
            Tier::Avx2 => Code::VEX_Vxorps_ymm_ymm_ymmm256,
            Tier::Avx512 => Code::EVEX_Vpxord_zmm_k1z_zmm_zmmm512b32,
        }
    }

    fn permute(self) -> Code {
        match self {
            Tier::Avx2 => Code::VEX_Vpermilps_ymm_ymmm256_imm8,
            Tier::Avx512 => Code::EVEX_Vpermilps_zmm_k1z_zmmm512b32_imm8,
        }
    }
}

/// Why a nest has no native body.
#[derive(Debug, thiserror::Error)]
pub enum NativeError {
    /// The kernel is not well formed.
    #[error("{0}")]
    Ir(#[from] IrError),
    /// The nest uses something this lowering does not express yet.
    #[error("not lowered natively: {0}")]
    Unsupported(String),
    /// More values live at once than the tier has registers.
    #[error("out of registers: {0}")]
    Registers(String),
    /// The emitter refused an instruction or the frame.
    #[error("{0}")]
    Emit(#[from] EmitError),
    /// The exp-based map emitter refused the nest's map.
    #[error("exp map: {0}")]
    Map(String),
    /// The encoded function lost a loop's labels (never expected: every
    /// label is placed through the emitter, which records it).
    #[error("unplaced label: loop `{0}`")]
    UnplacedLabel(String),
}

impl NativeError {
    /// The refusal a twin gives: a nest the lowering cannot express is
    /// `unsupported-geometry`, anything else `emit-error`.
    pub fn refusal(&self, nest: &str) -> Refusal {
        match self {
            NativeError::Unsupported(_) | NativeError::Registers(_) => {
                Refusal::UnsupportedGeometry {
                    reason: format!("loop nest `{nest}`: {self}"),
                }
            }
            NativeError::Ir(_)
            | NativeError::Emit(_)
            | NativeError::Map(_)
            | NativeError::UnplacedLabel(_) => Refusal::EmitError {
                message: format!("loop nest `{nest}`: {self}"),
            },
        }
    }
}

fn unsupported(what: impl Into<String>) -> NativeError {
    NativeError::Unsupported(what.into())
}

fn iced(e: weft_x64::iced_x86::IcedError) -> NativeError {
    NativeError::Emit(EmitError::from(e))
}

/// The body of `kernel` at `tier`, entered with `abi`.
pub fn emit(kernel: &Kernel, tier: Tier, abi: Abi) -> Result<NativeCode, NativeError> {
    kernel.check()?;
    let map = map_route::exp_map(kernel)
        .map_err(|why| unsupported(format!("exp outside an exp-based map ({why})")))?;
    if let Some(map) = map {
        return twin_x64::emit_map(&map, tier.map_tier(), abi)
            .map_err(|r| NativeError::Map(r.to_string()));
    }
    // First pass: which registers the body writes and whether it needs the
    // AVX2 mask window; the second emits with them declared.
    let first = Native::run(kernel, tier, abi, Clobbers::all(), tier == Tier::Avx2)?;
    let mut clobbers = Clobbers::none();
    for r in &first.gprs {
        clobbers = clobbers.with(*r);
    }
    for n in &first.vectors {
        clobbers = clobbers.with(tier.reg(*n));
    }
    let second = Native::run(kernel, tier, abi, clobbers, first.window)?;
    Ok(second.code)
}

/// The loops of `kernel`'s native body at `tier`, outermost first, with
/// trip counts (`value` gives each `Index` parameter at the geometry): a
/// loop with inner loops has `end - start` trips; an innermost loop
/// `(end - start) / tier.lanes()` (its partial step is straight-line
/// code); a reduction `(end - start) / lanes` when that is at least one,
/// no loop otherwise (an argmax's lanes: four registers' worth at least).
/// The names are the IR's.
pub fn loop_trips(kernel: &Kernel, tier: Tier, value: &dyn Fn(ParamId) -> u64) -> Vec<LoopTrip> {
    if let Ok(Some(_)) = map_route::exp_map(kernel) {
        return twin_x64::map_loops(tier.map_tier(), map_elements(kernel, value));
    }
    let mut out = Vec::new();
    trips(&kernel.body, 0, tier.lanes(), value, &mut out);
    out
}

/// What one pass produced.
struct Pass {
    code: NativeCode,
    gprs: BTreeSet<Register>,
    vectors: BTreeSet<u8>,
    window: bool,
}

/// A vector value: a temporary the consumer frees, or a register bound to
/// a `Let`, a reduction or a hoisted invariant (never freed by a use).
#[derive(Clone, Copy, Debug)]
enum V {
    Temp(u8),
    Bound(u8),
}

impl V {
    fn reg(self) -> u8 {
        match self {
            V::Temp(n) | V::Bound(n) => n,
        }
    }
}

/// The mask of a partial step.
#[derive(Clone, Copy, Debug)]
enum Mask {
    /// `k1` (AVX-512).
    K1,
    /// A ymm register whose active lanes are all ones (AVX2).
    Lanes(u8),
}

/// A reduction's accumulator register: the values, and for
/// [`ReduceOp::ArgMax`] their indices (i32 lanes).
#[derive(Clone, Copy, Debug)]
struct Acc {
    value: u8,
    index: Option<u8>,
}

/// A per-lane condition: a `k` register (AVX-512) or a vector register
/// of all-ones and all-zeros lanes (AVX2).
#[derive(Clone, Copy, Debug)]
enum Cmp {
    K(Register),
    V(u8),
}

/// Operations on i32 lanes.
#[derive(Clone, Copy, Debug)]
enum IntOp {
    And,
    Or,
    Add,
}

/// Operations on two [`Cmp`]s.
#[derive(Clone, Copy, Debug)]
enum MaskOp {
    And,
    AndNot,
    Or,
}

/// `vcmpps` predicates (ordered or unordered, quiet: the predicates only
/// differ in which exceptions they flag, never in the result).
const CMP_EQ_OQ: i32 = 0x00;
const CMP_UNORD_Q: i32 = 0x03;
const CMP_ORD_Q: i32 = 0x07;
const CMP_LE_OQ: i32 = 0x12;
/// `vpcmpd` predicate: signed less than.
const CMP_LT: i32 = 0x01;

/// How an expression is evaluated.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// Outside innermost loops: one value, in every lane.
    Broadcast,
    /// `tier.lanes()` consecutive values of `var`, the first at `var +
    /// offset`; loads under `mask` in a partial step.
    Vector {
        var: VarId,
        offset: i64,
        mask: Option<Mask>,
    },
}

/// A loop-invariant leaf held in a register for the length of a loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Leaf {
    Const(u32),
    Param(ParamId),
}

/// Bytes below `rsp` of the AVX2 mask window: 8 words of ones, 8 of zeros.
const WINDOW_BYTES: i32 = 64;

struct Native<'k> {
    k: &'k Kernel,
    e: Emitter,
    tier: Tier,
    args: AsmRegister64,
    free_gprs: Vec<AsmRegister64>,
    free_vectors: Vec<u8>,
    used_gprs: BTreeSet<Register>,
    used_vectors: BTreeSet<u8>,
    vars: HashMap<VarId, AsmRegister64>,
    vals: HashMap<ValId, u8>,
    /// Bases of the accesses of the innermost loop or reduction being
    /// emitted.
    bases: HashMap<BaseKey, AsmRegister64>,
    /// Invariant leaves of the innermost loop or reduction being emitted.
    leaves: HashMap<Leaf, u8>,
    window: bool,
    window_used: bool,
    /// Instruction count when the last label was set: a second label on the
    /// same instruction needs a `nop` between them.
    last_label_at: Option<usize>,
    loops: Vec<(String, CodeLabel, CodeLabel)>,
}

impl<'k> Native<'k> {
    fn run(
        k: &'k Kernel,
        tier: Tier,
        abi: Abi,
        clobbers: Clobbers,
        window: bool,
    ) -> Result<Pass, NativeError> {
        let e = Emitter::new(abi)?;
        let args = e.args_reg();
        let scratch = [Register::RAX, Register::R10, Register::R11, Register::RSP];
        // Volatile registers first, so small nests save nothing.
        let order: &[Register] = match abi {
            Abi::SysV => &[
                Register::RSI,
                Register::RDX,
                Register::RCX,
                Register::R8,
                Register::R9,
                Register::RBX,
                Register::RBP,
                Register::R12,
                Register::R13,
                Register::R14,
                Register::R15,
            ],
            Abi::Win64 => &[
                Register::RDX,
                Register::R8,
                Register::R9,
                Register::RBX,
                Register::RBP,
                Register::RDI,
                Register::RSI,
                Register::R12,
                Register::R13,
                Register::R14,
                Register::R15,
            ],
        };
        let mut free_gprs: Vec<AsmRegister64> = order
            .iter()
            .filter(|r| !scratch.contains(r) && **r != Register::from(args))
            .filter_map(|r| get_gpr64(*r))
            .collect();
        free_gprs.reverse();
        let mut free_vectors: Vec<u8> = match tier {
            Tier::Avx2 => (0..16).collect(),
            Tier::Avx512 => (0..6).chain(16..32).chain(6..16).collect(),
        };
        free_vectors.reverse();
        let mut n = Native {
            k,
            e,
            tier,
            args,
            free_gprs,
            free_vectors,
            used_gprs: BTreeSet::new(),
            used_vectors: BTreeSet::new(),
            vars: HashMap::new(),
            vals: HashMap::new(),
            bases: HashMap::new(),
            leaves: HashMap::new(),
            window,
            window_used: false,
            last_label_at: None,
            loops: Vec::new(),
        };
        n.entry(clobbers)?;
        let Native {
            e,
            loops,
            used_gprs,
            used_vectors,
            window_used,
            ..
        } = n;
        let emitted = e.finish()?;
        let mut annotations = Vec::with_capacity(loops.len());
        for (name, head, back) in &loops {
            let (Some(head), Some(back_edge)) =
                (emitted.label_offset(head), emitted.label_offset(back))
            else {
                return Err(NativeError::UnplacedLabel(name.clone()));
            };
            annotations.push(LoopAnnotation {
                name: name.clone(),
                head,
                back_edge,
            });
        }
        Ok(Pass {
            code: NativeCode {
                isa: Isa::X86_64,
                bytes: emitted.bytes,
                pool: None,
                loops: annotations,
            },
            gprs: used_gprs,
            vectors: used_vectors,
            window: window_used,
        })
    }

    // ---- registers and labels -------------------------------------------

    fn gpr(&mut self, what: &str) -> Result<AsmRegister64, NativeError> {
        let r = self.free_gprs.pop().ok_or_else(|| {
            NativeError::Registers(format!("no general register left for {what}"))
        })?;
        self.used_gprs.insert(Register::from(r));
        Ok(r)
    }

    fn free_gpr(&mut self, r: AsmRegister64) {
        self.free_gprs.push(r);
    }

    fn vector(&mut self) -> Result<u8, NativeError> {
        let n = self.free_vectors.pop().ok_or_else(|| {
            NativeError::Registers(format!(
                "more than {} vector values live at once",
                self.tier.registers()
            ))
        })?;
        self.used_vectors.insert(n);
        Ok(n)
    }

    fn free(&mut self, v: V) {
        if let V::Temp(n) = v {
            self.free_vectors.push(n);
        }
    }

    fn free_vector(&mut self, n: u8) {
        self.free_vectors.push(n);
    }

    fn set_label(&mut self, label: &mut CodeLabel) -> Result<(), NativeError> {
        let here = self.e.asm().instructions().len();
        if self.last_label_at == Some(here) {
            // iced places one label per instruction.
            self.e.asm().nop().map_err(iced)?;
        }
        self.e.set_label(label)?;
        self.last_label_at = Some(self.e.asm().instructions().len());
        Ok(())
    }

    fn ins(
        &mut self,
        i: Result<Instruction, weft_x64::iced_x86::IcedError>,
    ) -> Result<(), NativeError> {
        let i = i.map_err(iced)?;
        self.e.asm().add_instruction(i).map_err(iced)
    }

    fn masked(&mut self, mut i: Instruction, zeroing: bool) -> Result<(), NativeError> {
        i.set_op_mask(Register::K1);
        i.set_zeroing_masking(zeroing);
        self.e.asm().add_instruction(i).map_err(iced)
    }

    fn vreg(&self, n: u8) -> Register {
        self.tier.reg(n)
    }

    // ---- entry and guards -----------------------------------------------

    fn entry(&mut self, clobbers: Clobbers) -> Result<(), NativeError> {
        self.e.prologue(clobbers)?;
        if self.window {
            // Eight words of ones, then eight of zeros: the mask of the
            // first `c` lanes is the 32 bytes at `rsp + 32 - 4c`.
            self.e.asm().sub(rsp, WINDOW_BYTES).map_err(iced)?;
            let t = self.vector()?;
            let y = self.vreg(t);
            self.ins(Instruction::with3(
                Code::VEX_Vpcmpeqd_ymm_ymm_ymmm256,
                y,
                y,
                y,
            ))?;
            self.ins(Instruction::with2(
                Code::VEX_Vmovdqu_ymmm256_ymm,
                MemoryOperand::with_base(Register::RSP),
                y,
            ))?;
            self.ins(Instruction::with3(
                Code::VEX_Vxorps_ymm_ymm_ymmm256,
                y,
                y,
                y,
            ))?;
            self.ins(Instruction::with2(
                Code::VEX_Vmovdqu_ymmm256_ymm,
                MemoryOperand::with_base_displ(Register::RSP, 32),
                y,
            ))?;
            self.free_vector(t);
        }
        let mut exit = self.e.create_label();
        for g in &self.k.guards {
            self.guard(g, exit)?;
        }
        let body = &self.k.body;
        self.body(body, exit)?;
        self.set_label(&mut exit)?;
        if self.window {
            self.e.asm().add(rsp, WINDOW_BYTES).map_err(iced)?;
        }
        self.e.epilogue()?;
        Ok(())
    }

    /// `dst = e` (a constant or an `Index` parameter).
    fn extent(&mut self, dst: AsmRegister64, e: Extent) -> Result<(), NativeError> {
        match e {
            Extent::Const(c) => match u32::try_from(c) {
                // A 32-bit move zero-extends: the short encoding.
                Ok(c) => self.e.asm().mov(low32(dst)?, c).map_err(iced),
                Err(_) => self.e.asm().mov(dst, c as i64).map_err(iced),
            },
            Extent::Param(p) => {
                let off = self.offset(p)?;
                self.e
                    .asm()
                    .mov(dst, qword_ptr(self.args + off))
                    .map_err(iced)
            }
        }
    }

    fn offset(&self, p: ParamId) -> Result<i32, NativeError> {
        Ok(self.k.param(p)?.offset as i32)
    }

    /// Jump to `fail` unless `g` holds (unsigned, as the arm compares).
    fn guard(&mut self, g: &Guard, fail: CodeLabel) -> Result<(), NativeError> {
        match g {
            Guard::SumLe(terms, limit) => {
                // t0 <= rem, rem -= t0, t1 <= rem, …: no sum ever overflows.
                self.extent(rax, *limit)?;
                for (n, t) in terms.iter().enumerate() {
                    self.extent(r10, *t)?;
                    let a = self.e.asm();
                    a.cmp(r10, rax).map_err(iced)?;
                    a.ja(fail).map_err(iced)?;
                    if n + 1 < terms.len() {
                        a.sub(rax, r10).map_err(iced)?;
                    }
                }
            }
            Guard::Eq(a, b) => {
                self.extent(rax, *a)?;
                self.extent(r10, *b)?;
                let a = self.e.asm();
                a.cmp(rax, r10).map_err(iced)?;
                a.jne(fail).map_err(iced)?;
            }
        }
        Ok(())
    }

    // ---- addresses ------------------------------------------------------

    /// `dst = buf + size · (at without the terms of `skip`)`; uses `rax`
    /// and `r10`.
    fn address(
        &mut self,
        dst: AsmRegister64,
        buf: ParamId,
        at: &Affine,
        skip: Option<VarId>,
        size: u64,
        swap: bool,
    ) -> Result<(), NativeError> {
        let size = size as i64;
        let off = self.offset(buf)?;
        let args = self.args;
        if at
            .terms
            .iter()
            .all(|(_, t)| Some(*t) == skip.map(Term::Var))
            && at.constant == 0
            && !swap
        {
            // Index 0: the buffer's own pointer.
            return self.e.asm().mov(dst, qword_ptr(args + off)).map_err(iced);
        }
        // The index in r10, then scaled into dst.
        self.e.asm().xor(r10, r10).map_err(iced)?;
        for (c, t) in &at.terms {
            let src = match t {
                Term::Var(v) if Some(*v) == skip => continue,
                Term::Var(v) => *self
                    .vars
                    .get(v)
                    .ok_or(NativeError::Ir(IrError::VarScope(*v)))?,
                Term::Param(p) => {
                    let o = self.offset(*p)?;
                    self.e.asm().mov(rax, qword_ptr(args + o)).map_err(iced)?;
                    rax
                }
            };
            let c = i32::try_from(*c).map_err(|_| unsupported("a coefficient beyond i32"))?;
            let a = self.e.asm();
            a.imul_3(rax, src, c).map_err(iced)?;
            a.add(r10, rax).map_err(iced)?;
        }
        if at.constant != 0 {
            self.e.asm().mov(rax, at.constant).map_err(iced)?;
            self.e.asm().add(r10, rax).map_err(iced)?;
        }
        if swap {
            self.e.asm().xor(r10, 1).map_err(iced)?;
        }
        let a = self.e.asm();
        a.mov(dst, qword_ptr(args + off)).map_err(iced)?;
        match size {
            1 | 2 | 4 | 8 => a.lea(dst, ptr(dst + r10 * (size as u32))).map_err(iced)?,
            _ => return Err(unsupported(format!("elements of {size} bytes"))),
        }
        Ok(())
    }

    /// The bases of every access of `exprs` (and the stores `stores`) along
    /// `var`, in fresh registers, and the invariant leaves in vector
    /// registers; both for the length of one loop.
    fn prepare_loop(
        &mut self,
        var: VarId,
        exprs: &[&Expr],
        stores: &[(ParamId, &Affine)],
    ) -> Result<(), NativeError> {
        let mut keys: Vec<BaseKey> = Vec::new();
        let mut leaves: Vec<Leaf> = Vec::new();
        for e in exprs {
            collect(e, var, &mut keys, &mut leaves)?;
        }
        for (buf, at) in stores {
            keys.push(base_key(*buf, at, var, 4));
        }
        for key in keys {
            if self.bases.contains_key(&key) {
                continue;
            }
            let r = self.gpr("an access's base")?;
            let at = key.rest.clone();
            self.address(r, key.buf, &at, None, key.size, false)?;
            self.bases.insert(key, r);
        }
        for leaf in leaves {
            if self.leaves.contains_key(&leaf) {
                continue;
            }
            let n = self.vector()?;
            self.leaf(n, leaf)?;
            self.leaves.insert(leaf, n);
        }
        Ok(())
    }

    /// Frees the loop's bases and leaves in register order (not the maps'
    /// order, which varies from map to map), so the registers allocated
    /// next, and so the bytes, are the same in every pass and every run.
    fn release_loop(&mut self) {
        let mut bases: Vec<_> = self.bases.drain().map(|(_, r)| r).collect();
        bases.sort_by_key(|r| Register::from(*r).number());
        for r in bases {
            self.free_gpr(r);
        }
        let mut leaves: Vec<_> = self.leaves.drain().map(|(_, n)| n).collect();
        leaves.sort_unstable();
        for n in leaves {
            self.free_vector(n);
        }
    }

    fn leaf(&mut self, n: u8, leaf: Leaf) -> Result<(), NativeError> {
        match leaf {
            Leaf::Const(bits) => match self.tier {
                Tier::Avx2 => self
                    .e
                    .broadcast_f32(weft_x64::regs::YMM[usize::from(n)], f32::from_bits(bits))?,
                Tier::Avx512 => self
                    .e
                    .broadcast_f32(weft_x64::regs::ZMM[usize::from(n)], f32::from_bits(bits))?,
            },
            Leaf::Param(p) => {
                let off = self.offset(p)?;
                let m = MemoryOperand::with_base_displ(Register::from(self.args), i64::from(off));
                self.ins(Instruction::with2(
                    self.tier.broadcast(true),
                    self.vreg(n),
                    m,
                ))?;
            }
        }
        Ok(())
    }

    // ---- statements -----------------------------------------------------

    fn body(&mut self, body: &[Stmt], skip: CodeLabel) -> Result<(), NativeError> {
        let mut bound_vals = Vec::new();
        let mut bound_vars = Vec::new();
        for s in body {
            match s {
                Stmt::Loop(l) => self.lower_loop(l)?,
                Stmt::Let { val, value } => {
                    let v = self.expr(value, Mode::Broadcast)?;
                    let n = self.own(v)?;
                    self.vals.insert(*val, n);
                    bound_vals.push(*val);
                }
                Stmt::Store { buf, at, value } => {
                    // f32 or i32 (an argmax's index): the lane's bits.
                    let v = self.expr(value, Mode::Broadcast)?;
                    self.address(r11, *buf, at, None, 4, false)?;
                    let n = v.reg();
                    let code = if n < 16 {
                        Code::VEX_Vmovss_m32_xmm
                    } else {
                        Code::EVEX_Vmovss_m32_k1_xmm
                    };
                    self.ins(Instruction::with2(
                        code,
                        MemoryOperand::with_base(Register::R11),
                        Register::XMM0 + u32::from(n),
                    ))?;
                    self.free(v);
                }
                Stmt::Reduce(r) => {
                    self.lower_reduce(r)?;
                    bound_vals.push(r.result);
                }
                Stmt::Gather {
                    var,
                    buf,
                    at,
                    below,
                } => {
                    self.address(r11, *buf, at, None, 4, false)?;
                    let r = self.gpr("a gathered index")?;
                    self.e.asm().mov(low32(r)?, dword_ptr(r11)).map_err(iced)?;
                    self.extent(rax, *below)?;
                    self.e.asm().cmp(r, rax).map_err(iced)?;
                    self.e.asm().jae(skip).map_err(iced)?;
                    self.vars.insert(*var, r);
                    bound_vars.push(*var);
                }
            }
        }
        for v in bound_vals {
            if let Some(n) = self.vals.remove(&v) {
                self.free_vector(n);
            }
        }
        for v in bound_vars {
            if let Some(r) = self.vars.remove(&v) {
                self.free_gpr(r);
            }
        }
        Ok(())
    }

    /// `v` as a register this scope owns (a copy if it is bound elsewhere).
    fn own(&mut self, v: V) -> Result<u8, NativeError> {
        match v {
            V::Temp(n) => Ok(n),
            V::Bound(src) => {
                let n = self.vector()?;
                let (d, s) = (self.vreg(n), self.vreg(src));
                let code = match self.tier {
                    Tier::Avx2 => Code::VEX_Vmovups_ymm_ymmm256,
                    Tier::Avx512 => Code::EVEX_Vmovups_zmm_k1z_zmmm512,
                };
                self.ins(Instruction::with2(code, d, s))?;
                Ok(n)
            }
        }
    }

    fn lower_loop(&mut self, l: &Loop) -> Result<(), NativeError> {
        if innermost(l) {
            return self.lower_innermost(l);
        }
        let slot = self.loops.len();
        let var = self.gpr("a loop variable")?;
        self.vars.insert(l.var, var);
        self.extent(var, l.start)?;
        let (mut head, mut latch, mut back, mut exit) = (
            self.e.create_label(),
            self.e.create_label(),
            self.e.create_label(),
            self.e.create_label(),
        );
        self.set_label(&mut head)?;
        self.extent(rax, l.end)?;
        self.e.asm().cmp(var, rax).map_err(iced)?;
        self.e.asm().jae(exit).map_err(iced)?;
        self.body(&l.body, latch)?;
        self.set_label(&mut latch)?;
        self.e.asm().inc(var).map_err(iced)?;
        self.set_label(&mut back)?;
        self.e.asm().jmp(head).map_err(iced)?;
        self.set_label(&mut exit)?;
        // Outermost first: the loop goes before those nested in it.
        self.loops.insert(slot, (l.name.to_owned(), head, back));
        self.vars.remove(&l.var);
        self.free_gpr(var);
        Ok(())
    }

    /// An innermost loop: whole vector steps, then one masked step.
    fn lower_innermost(&mut self, l: &Loop) -> Result<(), NativeError> {
        if l.width == 1 {
            return Err(unsupported(format!(
                "loop `{}`: an innermost loop of width 1",
                l.name
            )));
        }
        let w = i64::from(self.tier.lanes());
        let mut exprs = Vec::new();
        let mut stores = Vec::new();
        for s in &l.body {
            match s {
                Stmt::Let { value, .. } => exprs.push(value),
                Stmt::Store { buf, at, value } => {
                    exprs.push(value);
                    stores.push((*buf, at));
                }
                _ => unreachable!("innermost bodies hold only Let and Store"),
            }
        }
        let var = self.gpr("a loop variable")?;
        self.vars.insert(l.var, var);
        self.prepare_loop(l.var, &exprs, &stores)?;
        self.extent(var, l.start)?;
        let end = match l.end {
            Extent::Param(_) => {
                let r = self.gpr("a loop bound")?;
                self.extent(r, l.end)?;
                Some(r)
            }
            Extent::Const(_) => None,
        };
        let (mut head, mut back, mut tail) = (
            self.e.create_label(),
            self.e.create_label(),
            self.e.create_label(),
        );
        // Whole steps while `i + lanes <= end`.
        self.set_label(&mut head)?;
        self.e.asm().lea(rax, ptr(var + w as i32)).map_err(iced)?;
        match (end, l.end) {
            (Some(r), _) => self.e.asm().cmp(rax, r).map_err(iced)?,
            (None, Extent::Const(c)) => match i32::try_from(c) {
                Ok(c) => self.e.asm().cmp(rax, c).map_err(iced)?,
                Err(_) => {
                    self.e.asm().mov(r10, c as i64).map_err(iced)?;
                    self.e.asm().cmp(rax, r10).map_err(iced)?;
                }
            },
            (None, Extent::Param(_)) => unreachable!("a parameter bound has a register"),
        }
        self.e.asm().ja(tail).map_err(iced)?;
        self.vector_step(l, None)?;
        self.e.asm().add(var, w as i32).map_err(iced)?;
        self.set_label(&mut back)?;
        self.e.asm().jmp(head).map_err(iced)?;
        self.set_label(&mut tail)?;
        // The partial step: `end - i` (a whole number of granules, below
        // `lanes`) iterations under a mask.
        match (l.start, l.end) {
            (Extent::Const(s), Extent::Const(e)) => {
                let rem = (e - s) % w as u64;
                if rem > 0 {
                    let mask = self.mask_static(rem as u32)?;
                    self.vector_step(l, Some(mask))?;
                    self.release_mask(mask);
                }
            }
            _ => {
                let mut done = self.e.create_label();
                match end {
                    Some(r) => self.e.asm().mov(rax, r).map_err(iced)?,
                    None => self.extent(rax, l.end)?,
                }
                self.e.asm().sub(rax, var).map_err(iced)?;
                self.e.asm().jbe(done).map_err(iced)?;
                let mask = self.mask_dynamic()?;
                self.vector_step(l, Some(mask))?;
                self.release_mask(mask);
                self.set_label(&mut done)?;
            }
        }
        self.loops.push((l.name.to_owned(), head, back));
        if let Some(r) = end {
            self.free_gpr(r);
        }
        self.release_loop();
        self.vars.remove(&l.var);
        self.free_gpr(var);
        Ok(())
    }

    /// The mask of the first `count` lanes (`0 < count < lanes`).
    fn mask_static(&mut self, count: u32) -> Result<Mask, NativeError> {
        match self.tier {
            Tier::Avx512 => {
                let bits = (1u32 << count) - 1;
                self.e.asm().mov(eax, bits).map_err(iced)?;
                self.e
                    .asm()
                    .kmovw(weft_x64::iced_x86::code_asm::k1, eax)
                    .map_err(iced)?;
                Ok(Mask::K1)
            }
            Tier::Avx2 => {
                self.window_used = true;
                let n = self.vector()?;
                let m = MemoryOperand::with_base_displ(Register::RSP, 32 - 4 * i64::from(count));
                self.ins(Instruction::with2(
                    Code::VEX_Vmovdqu_ymm_ymmm256,
                    self.vreg(n),
                    m,
                ))?;
                Ok(Mask::Lanes(n))
            }
        }
    }

    /// The mask of the first `rax` lanes (`0 < rax < lanes`); uses `r10`.
    fn mask_dynamic(&mut self) -> Result<Mask, NativeError> {
        match self.tier {
            Tier::Avx512 => {
                let a = self.e.asm();
                a.mov(r10d, -1).map_err(iced)?;
                a.bzhi(eax, r10d, eax).map_err(iced)?;
                a.kmovw(weft_x64::iced_x86::code_asm::k1, eax)
                    .map_err(iced)?;
                Ok(Mask::K1)
            }
            Tier::Avx2 => {
                self.window_used = true;
                self.e.asm().neg(rax).map_err(iced)?;
                let n = self.vector()?;
                let m = MemoryOperand::with_base_index_scale_displ_size(
                    Register::RSP,
                    Register::RAX,
                    4,
                    32,
                    1,
                );
                self.ins(Instruction::with2(
                    Code::VEX_Vmovdqu_ymm_ymmm256,
                    self.vreg(n),
                    m,
                ))?;
                Ok(Mask::Lanes(n))
            }
        }
    }

    fn release_mask(&mut self, m: Mask) {
        if let Mask::Lanes(n) = m {
            self.free_vector(n);
        }
    }

    /// One step of an innermost loop: every statement on `lanes`
    /// iterations at once (loads before the stores they feed), as the
    /// arm's `vector_step`.
    fn vector_step(&mut self, l: &Loop, mask: Option<Mask>) -> Result<(), NativeError> {
        let mode = Mode::Vector {
            var: l.var,
            offset: 0,
            mask,
        };
        let mut bound = Vec::new();
        for s in &l.body {
            match s {
                Stmt::Let { val, value } => {
                    let v = self.expr(value, mode)?;
                    let n = self.own(v)?;
                    self.vals.insert(*val, n);
                    bound.push(*val);
                }
                Stmt::Store { buf, at, value } => {
                    let v = self.expr(value, mode)?;
                    let m = self.vector_address(*buf, at, l.var, 4, 0)?;
                    self.store(m, v.reg(), mask)?;
                    self.free(v);
                }
                _ => unreachable!("innermost bodies hold only Let and Store"),
            }
        }
        for v in bound {
            if let Some(n) = self.vals.remove(&v) {
                self.free_vector(n);
            }
        }
        Ok(())
    }

    /// `[base + var·size + offset·size]` of an access along `var`.
    fn vector_address(
        &self,
        buf: ParamId,
        at: &Affine,
        var: VarId,
        size: u64,
        offset: i64,
    ) -> Result<MemoryOperand, NativeError> {
        let key = base_key(buf, at, var, size);
        let base = *self
            .bases
            .get(&key)
            .ok_or_else(|| unsupported("an access without a base"))?;
        let displ = offset * size as i64;
        let displ_size = u32::from(displ != 0);
        Ok(match at.coefficient(var) {
            // Not moving with `var`: the same element at every offset.
            0 => MemoryOperand::with_base(Register::from(base)),
            _ => {
                let index = *self
                    .vars
                    .get(&var)
                    .ok_or(NativeError::Ir(IrError::VarScope(var)))?;
                MemoryOperand::with_base_index_scale_displ_size(
                    Register::from(base),
                    Register::from(index),
                    size as u32,
                    displ,
                    displ_size,
                )
            }
        })
    }

    fn store(&mut self, m: MemoryOperand, n: u8, mask: Option<Mask>) -> Result<(), NativeError> {
        let src = self.vreg(n);
        match mask {
            None => self.ins(Instruction::with2(self.tier.store(), m, src)),
            Some(Mask::K1) => {
                let i = Instruction::with2(self.tier.store(), m, src).map_err(iced)?;
                self.masked(i, false)
            }
            Some(Mask::Lanes(k)) => self.ins(Instruction::with3(
                Code::VEX_Vmaskmovps_m256_ymm_ymm,
                m,
                self.vreg(k),
                src,
            )),
        }
    }

    // ---- expressions ----------------------------------------------------

    /// A destination for an operation on `a` (and `b`): a temporary operand
    /// is reused, the other freed.
    fn dest(&mut self, a: V, b: Option<V>) -> Result<u8, NativeError> {
        Ok(match (a, b) {
            (V::Temp(n), Some(other)) => {
                self.free(other);
                n
            }
            (V::Temp(n), None) => n,
            (V::Bound(_), Some(V::Temp(n))) => n,
            (V::Bound(_), _) => self.vector()?,
        })
    }

    fn expr(&mut self, e: &Expr, mode: Mode) -> Result<V, NativeError> {
        Ok(match e {
            Expr::Load {
                buf,
                elem,
                at,
                swap_pairs,
            } => self.load(*buf, *elem, at, *swap_pairs, mode)?,
            Expr::Const(bits) => match self.leaves.get(&Leaf::Const(*bits)) {
                Some(n) if matches!(mode, Mode::Vector { .. }) => V::Bound(*n),
                _ => {
                    let n = self.vector()?;
                    self.leaf(n, Leaf::Const(*bits))?;
                    V::Temp(n)
                }
            },
            Expr::Param(p) => match self.leaves.get(&Leaf::Param(*p)) {
                Some(n) if matches!(mode, Mode::Vector { .. }) => V::Bound(*n),
                _ => {
                    let n = self.vector()?;
                    self.leaf(n, Leaf::Param(*p))?;
                    V::Temp(n)
                }
            },
            Expr::Val(v) => V::Bound(
                *self
                    .vals
                    .get(v)
                    .ok_or(NativeError::Ir(IrError::ValScope(*v)))?,
            ),
            Expr::Unary(op, x) => {
                let x = self.expr(x, mode)?;
                match op {
                    Unary::Neg => {
                        // The sign bit flipped, NaN included (the arm's fneg).
                        let sign = self.expr(&Expr::Const(0x8000_0000), mode)?;
                        let d = self.dest(x, None)?;
                        let code = self.tier.xor();
                        let (dr, xr, sr) =
                            (self.vreg(d), self.vreg(x.reg()), self.vreg(sign.reg()));
                        self.ins(Instruction::with3(code, dr, xr, sr))?;
                        self.free(sign);
                        V::Temp(d)
                    }
                    Unary::Sqrt => {
                        let d = self.dest(x, None)?;
                        let (dr, xr) = (self.vreg(d), self.vreg(x.reg()));
                        self.ins(Instruction::with2(self.tier.sqrt(), dr, xr))?;
                        V::Temp(d)
                    }
                    Unary::Exp => {
                        return Err(unsupported(
                            "exp (its correctly rounded steps are weft-libm's CLIF; \
                             SiLU·mul's twins are weft-elementwise's exp maps)",
                        ))
                    }
                    Unary::IntToF32 => {
                        let d = self.dest(x, None)?;
                        let code = match self.tier {
                            Tier::Avx2 => Code::VEX_Vcvtdq2ps_ymm_ymmm256,
                            Tier::Avx512 => Code::EVEX_Vcvtdq2ps_zmm_k1z_zmmm512b32_er,
                        };
                        let (dr, xr) = (self.vreg(d), self.vreg(x.reg()));
                        self.ins(Instruction::with2(code, dr, xr))?;
                        V::Temp(d)
                    }
                    Unary::F16ToF32 => self.widen_f16(x)?,
                }
            }
            // Both operands the same expression (`x ⊗ x`, a fused
            // producer's `(x ⊕ y) ⊗ (x ⊕ y)`): evaluated once. An
            // expression has no stores inside it, so its two evaluations
            // would read the same memory and give the same value.
            Expr::Binary(op, a, b) if a == b => {
                let x = self.expr(a, mode)?;
                let d = self.dest(x, None)?;
                let (dr, xr) = (self.vreg(d), self.vreg(x.reg()));
                self.ins(Instruction::with3(self.tier.binary(*op), dr, xr, xr))?;
                V::Temp(d)
            }
            Expr::Binary(op, a, b) => {
                let a = self.expr(a, mode)?;
                let code = self.tier.binary(*op);
                if let Some(m) = self.memory_operand(b, mode)? {
                    let d = self.dest(a, None)?;
                    let (dr, ar) = (self.vreg(d), self.vreg(a.reg()));
                    self.ins(Instruction::with3(code, dr, ar, m))?;
                    return Ok(V::Temp(d));
                }
                let b = self.expr(b, mode)?;
                let d = self.dest(a, Some(b))?;
                let (dr, ar, br) = (self.vreg(d), self.vreg(a.reg()), self.vreg(b.reg()));
                self.ins(Instruction::with3(code, dr, ar, br))?;
                V::Temp(d)
            }
        })
    }

    /// A whole-step f32 load of stride 1 (no swap, no mask) as the second
    /// operand of an arithmetic instruction.
    fn memory_operand(&self, e: &Expr, mode: Mode) -> Result<Option<MemoryOperand>, NativeError> {
        let Mode::Vector {
            var,
            offset,
            mask: None,
        } = mode
        else {
            return Ok(None);
        };
        match e {
            Expr::Load {
                buf,
                elem: Elem::F32,
                at,
                swap_pairs: false,
            } if at.coefficient(var) == 1 => {
                Ok(Some(self.vector_address(*buf, at, var, 4, offset)?))
            }
            _ => Ok(None),
        }
    }

    fn load(
        &mut self,
        buf: ParamId,
        elem: Elem,
        at: &Affine,
        swap: bool,
        mode: Mode,
    ) -> Result<V, NativeError> {
        let size = elem.size();
        // The one element every lane reads, or where the step's start.
        let (m, whole, mask) = match mode {
            Mode::Broadcast => {
                self.address(r11, buf, at, None, size, swap)?;
                (MemoryOperand::with_base(Register::R11), false, None)
            }
            Mode::Vector { var, offset, mask } => (
                self.vector_address(buf, at, var, size, offset)?,
                at.coefficient(var) != 0,
                mask,
            ),
        };
        let n = self.vector()?;
        let d = self.vreg(n);
        if !whole {
            // One element for every lane; it exists whenever a step runs.
            self.broadcast_element(n, m, elem)?;
            return Ok(V::Temp(n));
        }
        match (elem, mask) {
            (Elem::F32 | Elem::U32, None) => {
                self.ins(Instruction::with2(self.tier.load(), d, m))?;
            }
            (Elem::F32 | Elem::U32, Some(Mask::K1)) => {
                let i = Instruction::with2(self.tier.load(), d, m).map_err(iced)?;
                self.masked(i, true)?;
            }
            (Elem::F32 | Elem::U32, Some(Mask::Lanes(k))) => self.ins(Instruction::with3(
                Code::VEX_Vmaskmovps_ymm_ymm_m256,
                d,
                self.vreg(k),
                m,
            ))?,
            // Widened as they are loaded: sign-extended bytes, zero-extended
            // halfwords.
            (Elem::I8, None) => {
                let code = match self.tier {
                    Tier::Avx2 => Code::VEX_Vpmovsxbd_ymm_xmmm64,
                    Tier::Avx512 => Code::EVEX_Vpmovsxbd_zmm_k1z_xmmm128,
                };
                self.ins(Instruction::with2(code, d, m))?;
            }
            (Elem::U16, None) => {
                let code = match self.tier {
                    Tier::Avx2 => Code::VEX_Vpmovzxwd_ymm_xmmm128,
                    Tier::Avx512 => Code::EVEX_Vpmovzxwd_zmm_k1z_ymmm256,
                };
                self.ins(Instruction::with2(code, d, m))?;
            }
            (Elem::I8 | Elem::U16, Some(_)) => {
                return Err(unsupported(format!(
                    "a partial step of {elem:?} loads (a narrower masked load)"
                )))
            }
        }
        if swap {
            // Lanes (1, 0, 3, 2, …): every lane's pair partner (pairs never
            // straddle a step: even start, even granule).
            self.ins(Instruction::with3(self.tier.permute(), d, d, 0xB1i32))?;
        }
        Ok(V::Temp(n))
    }

    /// The element at `m` in every lane of `n`: 32-bit elements by
    /// `vbroadcastss`, narrower ones widened through `eax` (`i8`
    /// sign-extended, `u16` zero-extended, as the arm's `sload8`/`uload16`).
    fn broadcast_element(
        &mut self,
        n: u8,
        m: MemoryOperand,
        elem: Elem,
    ) -> Result<(), NativeError> {
        let d = self.vreg(n);
        let widen = match elem {
            Elem::F32 | Elem::U32 => {
                return self.ins(Instruction::with2(self.tier.broadcast(true), d, m));
            }
            Elem::I8 => Code::Movsx_r32_rm8,
            Elem::U16 => Code::Movzx_r32_rm16,
        };
        self.ins(Instruction::with2(widen, Register::EAX, m))?;
        match self.tier {
            Tier::Avx512 => self.ins(Instruction::with2(
                Code::EVEX_Vpbroadcastd_zmm_k1z_r32,
                d,
                Register::EAX,
            )),
            Tier::Avx2 => {
                let x = Register::XMM0 + u32::from(n);
                self.ins(Instruction::with2(
                    Code::VEX_Vmovd_xmm_rm32,
                    x,
                    Register::EAX,
                ))?;
                self.ins(Instruction::with2(Code::VEX_Vpbroadcastd_ymm_xmmm32, d, x))
            }
        }
    }

    /// `op` on i32 lanes: `and`, `or`, `add`.
    fn int_op(&mut self, op: IntOp, d: u8, a: u8, b: u8) -> Result<(), NativeError> {
        let code = match (self.tier, op) {
            (Tier::Avx2, IntOp::And) => Code::VEX_Vpand_ymm_ymm_ymmm256,
            (Tier::Avx2, IntOp::Or) => Code::VEX_Vpor_ymm_ymm_ymmm256,
            (Tier::Avx2, IntOp::Add) => Code::VEX_Vpaddd_ymm_ymm_ymmm256,
            (Tier::Avx512, IntOp::And) => Code::EVEX_Vpandd_zmm_k1z_zmm_zmmm512b32,
            (Tier::Avx512, IntOp::Or) => Code::EVEX_Vpord_zmm_k1z_zmm_zmmm512b32,
            (Tier::Avx512, IntOp::Add) => Code::EVEX_Vpaddd_zmm_k1z_zmm_zmmm512b32,
        };
        let (dr, ar, br) = (self.vreg(d), self.vreg(a), self.vreg(b));
        self.ins(Instruction::with3(code, dr, ar, br))
    }

    /// `d = a << bits` on i32 lanes.
    fn shift_left(&mut self, d: u8, a: u8, bits: i32) -> Result<(), NativeError> {
        let code = match self.tier {
            Tier::Avx2 => Code::VEX_Vpslld_ymm_ymm_imm8,
            Tier::Avx512 => Code::EVEX_Vpslld_zmm_k1z_zmmm512b32_imm8,
        };
        let (dr, ar) = (self.vreg(d), self.vreg(a));
        self.ins(Instruction::with3(code, dr, ar, bits))
    }

    /// A fresh register holding the 32-bit pattern `bits` in every lane.
    fn constant(&mut self, bits: u32) -> Result<u8, NativeError> {
        let n = self.vector()?;
        self.leaf(n, Leaf::Const(bits))?;
        Ok(n)
    }

    /// [`crate::ir::f16_bits_to_f32`] on every lane, the arm's
    /// `widen_f16` step for step: normals by rebiasing the exponent,
    /// subnormals as `m ⊗ 2^-24` (exact), infinities and NaNs by rebiasing
    /// twice (payload kept, not quietened), then the sign.
    fn widen_f16(&mut self, h: V) -> Result<V, NativeError> {
        let c = self.constant(0x7fff)?;
        let em = self.vector()?;
        self.int_op(IntOp::And, em, h.reg(), c)?;
        self.leaf(c, Leaf::Const(0x8000))?;
        let sign = self.vector()?;
        self.int_op(IntOp::And, sign, h.reg(), c)?;
        self.free(h);
        self.shift_left(sign, sign, 16)?;
        let normal = self.vector()?;
        self.shift_left(normal, em, 13)?;
        self.leaf(c, Leaf::Const(F16_REBIAS))?;
        self.int_op(IntOp::Add, normal, normal, c)?;
        let special = self.vector()?;
        self.int_op(IntOp::Add, special, normal, c)?;
        let sub = self.vector()?;
        let cvt = match self.tier {
            Tier::Avx2 => Code::VEX_Vcvtdq2ps_ymm_ymmm256,
            Tier::Avx512 => Code::EVEX_Vcvtdq2ps_zmm_k1z_zmmm512b32_er,
        };
        let (sr, er) = (self.vreg(sub), self.vreg(em));
        self.ins(Instruction::with2(cvt, sr, er))?;
        self.leaf(c, Leaf::Const(F16_SUBNORMAL_SCALE.to_bits()))?;
        let cr = self.vreg(c);
        self.ins(Instruction::with3(
            self.tier.binary(Binary::Mul),
            sr,
            sr,
            cr,
        ))?;
        // em >= 0x7c00 (signed) is 0x7bff < em; em < 0x400 as it is.
        let [is_special, is_sub] = self.masks([Register::K2, Register::K3])?;
        self.leaf(c, Leaf::Const(0x7bff))?;
        self.compare(is_special, c, em, CMP_LT, true)?;
        self.leaf(c, Leaf::Const(0x400))?;
        self.compare(is_sub, em, c, CMP_LT, true)?;
        self.select(is_special, normal, special)?;
        self.select(is_sub, normal, sub)?;
        self.int_op(IntOp::Or, normal, normal, sign)?;
        self.release_masks([is_special, is_sub]);
        for t in [c, em, sign, special, sub] {
            self.free_vector(t);
        }
        Ok(V::Temp(normal))
    }

    // ---- reductions -----------------------------------------------------

    fn lower_reduce(&mut self, r: &Reduce) -> Result<(), NativeError> {
        if r.fold != Fold::Halving {
            return Err(unsupported(format!(
                "reduce `{}`: fold {:?}",
                r.name, r.fold
            )));
        }
        let w = u64::from(self.tier.lanes());
        let lanes = u64::from(reduce_lanes(r, self.tier.lanes()));
        if lanes < w {
            return Err(unsupported(format!(
                "reduce `{}`: {lanes} lanes, fewer than a register's {w}",
                r.name
            )));
        }
        // Every load along the reduction must be of stride 0 or 1, unswapped
        // (the checker asks this only of vector reductions).
        let mut loads = Vec::new();
        crate::ir::collect_loads(&r.value, &mut loads);
        for (_, at, swap) in loads {
            let c = at.coefficient(r.var);
            if swap || (c != 0 && c != 1) {
                return Err(unsupported(format!(
                    "reduce `{}`: a load of stride {c} or a pair swap",
                    r.name
                )));
            }
        }
        let n = r.end - r.start;
        let (groups, rem) = (n / lanes, n % lanes);
        let regs = (lanes / w) as usize;

        // Accumulators, at the identity: +0, or (-inf, their own index).
        let iota = match r.op {
            ReduceOp::Sum => None,
            ReduceOp::ArgMax => Some(self.iota()?),
        };
        let mut accs = Vec::with_capacity(regs);
        for a in 0..regs {
            let value = self.vector()?;
            let acc = match (r.op, iota) {
                (ReduceOp::ArgMax, Some(iota)) => {
                    self.leaf(value, Leaf::Const(f32::NEG_INFINITY.to_bits()))?;
                    let index = self.vector()?;
                    self.index_lanes(index, iota, None, r.start + a as u64 * w)?;
                    Acc {
                        value,
                        index: Some(index),
                    }
                }
                _ => {
                    self.zero(value)?;
                    Acc { value, index: None }
                }
            };
            accs.push(acc);
        }
        let g = self.gpr("a reduction variable")?;
        self.vars.insert(r.var, g);
        let mut exprs = vec![&r.value];
        let mut stores = Vec::new();
        for s in &r.body {
            match s {
                Stmt::Let { value, .. } => exprs.push(value),
                Stmt::Store { buf, at, value } => {
                    exprs.push(value);
                    stores.push((*buf, at));
                }
                _ => {
                    return Err(unsupported(format!(
                        "reduce `{}`: a nested statement",
                        r.name
                    )))
                }
            }
        }
        self.prepare_loop(r.var, &exprs, &stores)?;
        self.extent(g, Extent::Const(r.start))?;

        // Whole groups of `lanes` elements.
        if groups > 0 {
            let stop = r.start + groups * lanes;
            let (mut head, mut back, mut exit) = (
                self.e.create_label(),
                self.e.create_label(),
                self.e.create_label(),
            );
            self.set_label(&mut head)?;
            match i32::try_from(stop) {
                Ok(stop) => self.e.asm().cmp(g, stop).map_err(iced)?,
                Err(_) => {
                    self.e.asm().mov(rax, stop as i64).map_err(iced)?;
                    self.e.asm().cmp(g, rax).map_err(iced)?;
                }
            }
            self.e.asm().jae(exit).map_err(iced)?;
            for (a, acc) in accs.iter().enumerate() {
                self.step(r, *acc, iota, g, (a as u64 * w) as i64, None)?;
            }
            self.e.asm().add(g, lanes as i32).map_err(iced)?;
            self.set_label(&mut back)?;
            self.e.asm().jmp(head).map_err(iced)?;
            self.set_label(&mut exit)?;
            self.loops.push((r.name.to_owned(), head, back));
        }

        // The remainder: whole registers into their accumulators, then the
        // last elements into their lanes only.
        for (a, acc) in accs.iter().enumerate().take((rem / w) as usize) {
            self.step(r, *acc, iota, g, (a as u64 * w) as i64, None)?;
        }
        if rem % w != 0 {
            let a = (rem / w) as usize;
            let mask = self.mask_static((rem % w) as u32)?;
            self.step(r, accs[a], iota, g, (a as u64 * w) as i64, Some(mask))?;
            self.release_mask(mask);
        }
        self.release_loop();
        self.vars.remove(&r.var);
        self.free_gpr(g);
        if let Some(iota) = iota {
            self.free_vector(iota);
        }

        // The halving fold: registers pairwise, then within the last one.
        let mut live = accs;
        while live.len() > 1 {
            let h = live.len() / 2;
            for a in 0..h {
                self.fold_pair(r.op, live[a], live[a + h])?;
            }
            for dead in live.split_off(h) {
                self.free_vector(dead.value);
                if let Some(i) = dead.index {
                    self.free_vector(i);
                }
            }
        }
        let acc = live[0];
        self.fold_register(r.op, acc)?;
        // The result: the sum, or the index (the values are done with).
        let result = match acc.index {
            Some(index) => {
                self.free_vector(acc.value);
                index
            }
            None => acc.value,
        };
        self.vals.insert(r.result, result);
        Ok(())
    }

    /// Element(s) at `offset` past the reduction variable `g`: the
    /// reduction's body (its stores under `mask`), then the value into
    /// `acc` (the arm's `step`); under `mask` only the masked lanes change.
    fn step(
        &mut self,
        r: &Reduce,
        acc: Acc,
        iota: Option<u8>,
        g: AsmRegister64,
        offset: i64,
        mask: Option<Mask>,
    ) -> Result<(), NativeError> {
        let mode = Mode::Vector {
            var: r.var,
            offset,
            mask,
        };
        let mut bound = Vec::new();
        for s in &r.body {
            match s {
                Stmt::Let { val, value } => {
                    let v = self.expr(value, mode)?;
                    let n = self.own(v)?;
                    self.vals.insert(*val, n);
                    bound.push(*val);
                }
                Stmt::Store { buf, at, value } => {
                    let v = self.expr(value, mode)?;
                    let m = self.vector_address(*buf, at, r.var, 4, offset)?;
                    self.store(m, v.reg(), mask)?;
                    self.free(v);
                }
                _ => {
                    return Err(unsupported(format!(
                        "reduce `{}`: a nested statement",
                        r.name
                    )))
                }
            }
        }
        self.step_value(r, acc, iota, g, offset, mask)?;
        for v in bound {
            if let Some(n) = self.vals.remove(&v) {
                self.free_vector(n);
            }
        }
        Ok(())
    }

    /// The value of the element(s) at `offset` into `acc`.
    fn step_value(
        &mut self,
        r: &Reduce,
        acc: Acc,
        iota: Option<u8>,
        g: AsmRegister64,
        offset: i64,
        mask: Option<Mask>,
    ) -> Result<(), NativeError> {
        match (acc.index, iota) {
            (Some(index), Some(iota)) => {
                let mode = Mode::Vector {
                    var: r.var,
                    offset,
                    mask,
                };
                let v = self.expr(&r.value, mode)?;
                let vi = self.vector()?;
                // The elements' indices: g + offset + lane.
                self.e
                    .asm()
                    .lea(rax, ptr(g + offset as i32))
                    .map_err(iced)?;
                self.index_lanes(vi, iota, Some(rax), 0)?;
                let new = Acc {
                    value: v.reg(),
                    index: Some(vi),
                };
                self.argmax_step(
                    Acc {
                        value: acc.value,
                        index: Some(index),
                    },
                    new,
                    mask,
                )?;
                self.free(v);
                self.free_vector(vi);
                Ok(())
            }
            _ => self.accumulate(r, acc.value, offset, mask),
        }
    }

    /// `acc ⊕= value` at `offset` elements past the reduction variable;
    /// under `mask` only the masked lanes change.
    fn accumulate(
        &mut self,
        r: &Reduce,
        acc: u8,
        offset: i64,
        mask: Option<Mask>,
    ) -> Result<(), NativeError> {
        let mode = Mode::Vector {
            var: r.var,
            offset,
            mask,
        };
        let add = self.tier.binary(Binary::Add);
        let a = self.vreg(acc);
        if mask.is_none() {
            if let Some(m) = self.memory_operand(&r.value, mode)? {
                return self.ins(Instruction::with3(add, a, a, m));
            }
        }
        let v = self.expr(&r.value, mode)?;
        let vr = self.vreg(v.reg());
        match mask {
            None => self.ins(Instruction::with3(add, a, a, vr))?,
            Some(Mask::K1) => {
                let i = Instruction::with3(add, a, a, vr).map_err(iced)?;
                self.masked(i, false)?;
            }
            Some(Mask::Lanes(k)) => {
                let t = self.vector()?;
                let tr = self.vreg(t);
                self.ins(Instruction::with3(add, tr, a, vr))?;
                self.ins(Instruction::with4(
                    Code::VEX_Vblendvps_ymm_ymm_ymmm256_ymm,
                    a,
                    a,
                    tr,
                    self.vreg(k),
                ))?;
                self.free_vector(t);
            }
        }
        self.free(v);
        Ok(())
    }

    fn zero(&mut self, n: u8) -> Result<(), NativeError> {
        let r = self.vreg(n);
        self.ins(Instruction::with3(self.tier.xor(), r, r, r))
    }

    /// `t`'s lanes `0..h` = `a`'s lanes `h..2h` (other lanes of `t`:
    /// whatever; every lane of a register is computed, only the low ones
    /// are read).
    fn halve(&mut self, t: u8, a: u8, h: u32) -> Result<(), NativeError> {
        let (ar, tr) = (self.vreg(a), self.vreg(t));
        let (tx, ty) = (Register::XMM0 + u32::from(t), Register::YMM0 + u32::from(t));
        match (self.tier, h) {
            (Tier::Avx512, 8) => self.ins(Instruction::with3(
                Code::EVEX_Vextractf64x4_ymmm256_k1z_zmm_imm8,
                ty,
                ar,
                1i32,
            )),
            (Tier::Avx512, 4) => self.ins(Instruction::with3(
                Code::EVEX_Vextractf32x4_xmmm128_k1z_zmm_imm8,
                tx,
                ar,
                1i32,
            )),
            (Tier::Avx2, 4) => self.ins(Instruction::with3(
                Code::VEX_Vextractf128_xmmm128_ymm_imm8,
                tx,
                ar,
                1i32,
            )),
            // Lanes 2, 3 to 0, 1; lane 1 to 0.
            (_, 2) => self.ins(Instruction::with3(self.tier.permute(), tr, ar, 0xEEi32)),
            (_, 1) => self.ins(Instruction::with3(self.tier.permute(), tr, ar, 0x01i32)),
            _ => Err(unsupported(format!("a fold step of {h} lanes"))),
        }
    }

    /// Lane 0 of `n` into every lane.
    fn broadcast_lane0(&mut self, n: u8) -> Result<(), NativeError> {
        let (r, x) = (self.vreg(n), Register::XMM0 + u32::from(n));
        self.ins(Instruction::with2(self.tier.broadcast(false), r, x))
    }

    /// The last register's lanes folded by halves down to lane 0, which
    /// is then broadcast (the arm's fold after its accumulators are one).
    fn fold_register(&mut self, op: ReduceOp, acc: Acc) -> Result<(), NativeError> {
        let mut h = self.tier.lanes() / 2;
        let tv = self.vector()?;
        let ti = match acc.index {
            Some(_) => Some(self.vector()?),
            None => None,
        };
        while h >= 1 {
            self.halve(tv, acc.value, h)?;
            if let (Some(ti), Some(ai)) = (ti, acc.index) {
                self.halve(ti, ai, h)?;
            }
            self.fold_pair(
                op,
                acc,
                Acc {
                    value: tv,
                    index: ti,
                },
            )?;
            h /= 2;
        }
        self.free_vector(tv);
        if let Some(ti) = ti {
            self.free_vector(ti);
        }
        self.broadcast_lane0(acc.index.unwrap_or(acc.value))
    }

    /// `a = a ⊕ b` lane by lane, `a` holding the lower lanes.
    fn fold_pair(&mut self, op: ReduceOp, a: Acc, b: Acc) -> Result<(), NativeError> {
        match (op, a.index, b.index) {
            (ReduceOp::Sum, _, _) => {
                let (x, y) = (self.vreg(a.value), self.vreg(b.value));
                self.ins(Instruction::with3(self.tier.binary(Binary::Add), x, x, y))
            }
            (ReduceOp::ArgMax, Some(_), Some(_)) => self.argmax_merge(a, b),
            (ReduceOp::ArgMax, _, _) => Err(unsupported("an argmax without indices")),
        }
    }

    /// `[0, 1, …, lanes − 1]` as i32 lanes, built without memory: lane
    /// `l` gets `2^b` added for each bit `b` set in `l`.
    fn iota(&mut self) -> Result<u8, NativeError> {
        let n = self.vector()?;
        self.zero(n)?;
        let t = self.vector()?;
        let bits: &[(u32, u32)] = match self.tier {
            Tier::Avx512 => &[(0xAAAA, 1), (0xCCCC, 2), (0xF0F0, 4), (0xFF00, 8)],
            Tier::Avx2 => &[(0xAA, 1), (0xCC, 2), (0xF0, 4)],
        };
        for &(lanes, add) in bits {
            self.leaf(t, Leaf::Const(add))?;
            let (nr, tr) = (self.vreg(n), self.vreg(t));
            match self.tier {
                Tier::Avx512 => {
                    self.e.asm().mov(eax, lanes).map_err(iced)?;
                    self.e
                        .asm()
                        .kmovw(weft_x64::iced_x86::code_asm::k2, eax)
                        .map_err(iced)?;
                    let mut i =
                        Instruction::with3(Code::EVEX_Vpaddd_zmm_k1z_zmm_zmmm512b32, nr, nr, tr)
                            .map_err(iced)?;
                    i.set_op_mask(Register::K2);
                    self.e.asm().add_instruction(i).map_err(iced)?;
                }
                Tier::Avx2 => {
                    // t keeps `add` only in the lanes of `lanes`.
                    let z = self.vector()?;
                    self.zero(z)?;
                    let zr = self.vreg(z);
                    self.ins(Instruction::with4(
                        Code::VEX_Vpblendd_ymm_ymm_ymmm256_imm8,
                        tr,
                        zr,
                        tr,
                        lanes as i32,
                    ))?;
                    self.free_vector(z);
                    self.ins(Instruction::with3(
                        Code::VEX_Vpaddd_ymm_ymm_ymmm256,
                        nr,
                        nr,
                        tr,
                    ))?;
                }
            }
        }
        self.free_vector(t);
        Ok(n)
    }

    /// `dst = iota + (gpr + base)` in every lane (`gpr`: `rax` or none).
    fn index_lanes(
        &mut self,
        dst: u8,
        iota: u8,
        gpr: Option<AsmRegister64>,
        base: u64,
    ) -> Result<(), NativeError> {
        let base = i32::try_from(base).map_err(|_| unsupported("an index beyond i32"))?;
        let (d, i) = (self.vreg(dst), self.vreg(iota));
        match (gpr, self.tier) {
            (Some(r), Tier::Avx512) => {
                self.ins(Instruction::with2(
                    Code::EVEX_Vpbroadcastd_zmm_k1z_r32,
                    d,
                    Register::from(low32(r)?),
                ))?;
            }
            (Some(r), Tier::Avx2) => {
                let x = Register::XMM0 + u32::from(dst);
                self.ins(Instruction::with2(
                    Code::VEX_Vmovd_xmm_rm32,
                    x,
                    Register::from(low32(r)?),
                ))?;
                self.ins(Instruction::with2(Code::VEX_Vpbroadcastd_ymm_xmmm32, d, x))?;
            }
            (None, _) => self.leaf(dst, Leaf::Const(base as u32))?,
        }
        let add = match self.tier {
            Tier::Avx512 => Code::EVEX_Vpaddd_zmm_k1z_zmm_zmmm512b32,
            Tier::Avx2 => Code::VEX_Vpaddd_ymm_ymm_ymmm256,
        };
        if gpr.is_some() && base != 0 {
            return Err(unsupported("an index from a register and a constant"));
        }
        self.ins(Instruction::with3(add, d, d, i))
    }

    /// A per-lane compare of `a` and `b` into a mask: `k` (AVX-512) or the
    /// vector register `v` (AVX2).
    fn compare(
        &mut self,
        into: Cmp,
        a: u8,
        b: u8,
        pred: i32,
        ints: bool,
    ) -> Result<(), NativeError> {
        let (ar, br) = (self.vreg(a), self.vreg(b));
        match into {
            Cmp::K(k) => {
                let code = if ints {
                    Code::EVEX_Vpcmpd_kr_k1_zmm_zmmm512b32_imm8
                } else {
                    Code::EVEX_Vcmpps_kr_k1_zmm_zmmm512b32_imm8_sae
                };
                self.ins(Instruction::with4(code, k, ar, br, pred))
            }
            Cmp::V(v) => {
                let vr = self.vreg(v);
                if ints {
                    // Signed `a < b` is `b > a`.
                    if pred != CMP_LT {
                        return Err(unsupported("an integer compare other than <"));
                    }
                    self.ins(Instruction::with3(
                        Code::VEX_Vpcmpgtd_ymm_ymm_ymmm256,
                        vr,
                        br,
                        ar,
                    ))
                } else {
                    self.ins(Instruction::with4(
                        Code::VEX_Vcmpps_ymm_ymm_ymmm256_imm8,
                        vr,
                        ar,
                        br,
                        pred,
                    ))
                }
            }
        }
    }

    /// `x = y op x` on masks (`and`, `andn`: `!x & y`, `or`).
    fn mask_op(&mut self, code: MaskOp, x: Cmp, y: Cmp) -> Result<(), NativeError> {
        match (x, y) {
            (Cmp::K(x), Cmp::K(y)) => {
                let c = match code {
                    MaskOp::And => Code::VEX_Kandw_kr_kr_kr,
                    MaskOp::AndNot => Code::VEX_Kandnw_kr_kr_kr,
                    MaskOp::Or => Code::VEX_Korw_kr_kr_kr,
                };
                self.ins(Instruction::with3(c, x, x, y))
            }
            (Cmp::V(x), Cmp::V(y)) => {
                let c = match code {
                    MaskOp::And => Code::VEX_Vandps_ymm_ymm_ymmm256,
                    MaskOp::AndNot => Code::VEX_Vandnps_ymm_ymm_ymmm256,
                    MaskOp::Or => Code::VEX_Vorps_ymm_ymm_ymmm256,
                };
                let (xr, yr) = (self.vreg(x), self.vreg(y));
                self.ins(Instruction::with3(c, xr, xr, yr))
            }
            _ => Err(unsupported("masks of two kinds")),
        }
    }

    /// `dst = m ? src : dst` per lane, for values and indices alike.
    fn select(&mut self, m: Cmp, dst: u8, src: u8) -> Result<(), NativeError> {
        let (d, s) = (self.vreg(dst), self.vreg(src));
        match m {
            Cmp::K(k) => {
                let mut i =
                    Instruction::with2(Code::EVEX_Vmovdqa32_zmm_k1z_zmmm512, d, s).map_err(iced)?;
                i.set_op_mask(k);
                self.e.asm().add_instruction(i).map_err(iced)
            }
            Cmp::V(v) => {
                let vr = self.vreg(v);
                self.ins(Instruction::with4(
                    Code::VEX_Vblendvps_ymm_ymm_ymmm256_ymm,
                    d,
                    d,
                    s,
                    vr,
                ))
            }
        }
    }

    /// Two masks for this tier: `k` registers, or vector temporaries.
    fn masks(&mut self, ks: [Register; 2]) -> Result<[Cmp; 2], NativeError> {
        Ok(match self.tier {
            Tier::Avx512 => [Cmp::K(ks[0]), Cmp::K(ks[1])],
            Tier::Avx2 => [Cmp::V(self.vector()?), Cmp::V(self.vector()?)],
        })
    }

    fn release_masks(&mut self, ms: [Cmp; 2]) {
        for m in ms {
            if let Cmp::V(v) = m {
                self.free_vector(v);
            }
        }
    }

    /// Element(s) `new` (later indices than anything in `acc`) into `acc`
    /// (the arm's `argmax_step`): it wins if `!(new <= acc)` and `acc` is
    /// not a NaN, i.e. it ranks higher (a NaN above numbers); equal ranks
    /// keep `acc`. Under `mask` only the masked lanes may change.
    fn argmax_step(&mut self, acc: Acc, new: Acc, mask: Option<Mask>) -> Result<(), NativeError> {
        let (Some(ai), Some(ni)) = (acc.index, new.index) else {
            return Err(unsupported("an argmax without indices"));
        };
        let [not_above, acc_number] = self.masks([Register::K2, Register::K3])?;
        self.compare(not_above, new.value, acc.value, CMP_LE_OQ, false)?;
        self.compare(acc_number, acc.value, acc.value, CMP_ORD_Q, false)?;
        // take = !not_above & acc_number, into `not_above`.
        self.mask_op(MaskOp::AndNot, not_above, acc_number)?;
        match mask {
            None => {}
            Some(Mask::K1) => self.mask_op(MaskOp::And, not_above, Cmp::K(Register::K1))?,
            Some(Mask::Lanes(m)) => self.mask_op(MaskOp::And, not_above, Cmp::V(m))?,
        }
        self.select(not_above, acc.value, new.value)?;
        self.select(not_above, ai, ni)?;
        self.release_masks([not_above, acc_number]);
        Ok(())
    }

    /// The general combine (the arm's `argmax_merge`, the fold): `b` wins
    /// if it ranks higher, or ranks the same (equal, or both NaN) with a
    /// smaller index. `a` holds the result.
    fn argmax_merge(&mut self, a: Acc, b: Acc) -> Result<(), NativeError> {
        let (Some(ai), Some(bi)) = (a.index, b.index) else {
            return Err(unsupported("an argmax without indices"));
        };
        // `same` from the operands as they are, before the step changes `a`.
        let [same, t] = self.masks([Register::K4, Register::K5])?;
        let u = match self.tier {
            Tier::Avx512 => Cmp::K(Register::K6),
            Tier::Avx2 => Cmp::V(self.vector()?),
        };
        self.compare(same, b.value, a.value, CMP_EQ_OQ, false)?;
        self.compare(t, b.value, b.value, CMP_UNORD_Q, false)?;
        self.compare(u, a.value, a.value, CMP_UNORD_Q, false)?;
        self.mask_op(MaskOp::And, t, u)?;
        self.mask_op(MaskOp::Or, same, t)?;
        self.compare(t, bi, ai, CMP_LT, true)?;
        self.mask_op(MaskOp::And, same, t)?;
        if let Cmp::V(v) = u {
            self.free_vector(v);
        }
        self.argmax_step(a, b, None)?;
        self.select(same, a.value, b.value)?;
        self.select(same, ai, bi)?;
        self.release_masks([same, t]);
        Ok(())
    }
}

/// The low 32 bits of `r` (writing them zero-extends into `r`).
fn low32(r: AsmRegister64) -> Result<AsmRegister32, NativeError> {
    get_gpr32(Register::EAX + Register::from(r).number() as u32)
        .ok_or_else(|| unsupported("a 32-bit view of a register"))
}

/// The bases and invariant leaves of `e` along `var`.
fn collect(
    e: &Expr,
    var: VarId,
    keys: &mut Vec<BaseKey>,
    leaves: &mut Vec<Leaf>,
) -> Result<(), NativeError> {
    match e {
        Expr::Load { buf, elem, at, .. } => {
            let c = at.coefficient(var);
            if c != 0 && c != 1 {
                return Err(unsupported(format!(
                    "a load of stride {c} in a vector step"
                )));
            }
            keys.push(base_key(*buf, at, var, elem.size()));
        }
        Expr::Const(bits) => leaves.push(Leaf::Const(*bits)),
        Expr::Param(p) => leaves.push(Leaf::Param(*p)),
        Expr::Val(_) => {}
        Expr::Unary(op, x) => {
            if *op == Unary::Neg {
                leaves.push(Leaf::Const(0x8000_0000));
            }
            collect(x, var, keys, leaves)?;
        }
        Expr::Binary(_, a, b) => {
            collect(a, var, keys, leaves)?;
            collect(b, var, keys, leaves)?;
        }
    }
    Ok(())
}
