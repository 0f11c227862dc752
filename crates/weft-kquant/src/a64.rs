//! The frame every K-quant matrix-vector arm64 twin shares, the A64
//! counterpart of [`x64`](crate::x64), with the same loop nest
//! ([`twin`](crate::twin)): one row at a time (each row one
//! linear stream of blocks), vectors next, blocks innermost, and the
//! store. A family supplies its [`Body`]: constants, what clears its
//! accumulators, what one block does, and the fold that leaves the output
//! in `s`[`RESULT`].
//!
//! General registers: `x0` the arguments, `x1` W, `x2` X, `x3` Y, `x4`
//! rows, `x5` blocks per row, `x6` batch, `x7` the row, `x8` the end row,
//! `x9`/`x10` bytes per W row / X vector, [`PW`] and [`PX`] (`x11`,
//! `x12`) the current block of W and X, `x13` the blocks left, `x14` the
//! vector. The body's scratch is [`GP_SCRATCH`] (`x15`–`x17`, `x19`–`x22`;
//! never `x18`, the platform register). Vector registers: every one is
//! the body's. The frame saves what AAPCS64 calls callee-saved among them
//! (`x19`–`x22`, the low halves `d8`–`d15`) around the whole call, so a
//! body need not care which it uses.

use weft_a64::{d, mem, s, v, x, Assembler, Cond, EncodeError, Gpr, Label, Op, SP, XZR};
use weft_kernel::{Isa, LoopAnnotation, NativeCode, Offer, Refusal};
use weft_quant::Format;

use crate::offsets;

const ARGS: Gpr = x(0);
const W: Gpr = x(1);
const X: Gpr = x(2);
const Y: Gpr = x(3);
const ROWS: Gpr = x(4);
const BLOCKS: Gpr = x(5);
const BATCH: Gpr = x(6);
const R: Gpr = x(7);
const ROW_END: Gpr = x(8);
const W_ROW: Gpr = x(9);
const X_VEC: Gpr = x(10);
/// The current weight block.
pub(crate) const PW: Gpr = x(11);
/// The current activation block.
pub(crate) const PX: Gpr = x(12);
const K: Gpr = x(13);
const N: Gpr = x(14);
/// General registers the body may write.
pub(crate) const GP_SCRATCH: [Gpr; 7] = [x(15), x(16), x(17), x(19), x(20), x(21), x(22)];

/// Bytes of the frame's save area: `d8`–`d15`, then `x19`–`x22`.
const SAVES: i64 = 96;

/// The vector register whose lane 0 (`s`) holds the output after the fold.
pub(crate) const RESULT: u8 = 31;

use crate::twin::LOOPS;

/// What a family's twin emits inside the frame.
pub(crate) trait Body {
    /// The weights' block format (the activations' is its pairing).
    fn format(&self) -> Format;
    /// Once per call, before any row (constants).
    fn setup(&self, a: &mut Assembler) -> Result<(), EncodeError>;
    /// Before each (row, vector): clear the accumulators.
    fn clear(&self, a: &mut Assembler) -> Result<(), EncodeError>;
    /// The block at [`PW`] against the one at [`PX`]; the frame advances
    /// both afterwards.
    fn block(&self, a: &mut Assembler) -> Result<(), EncodeError>;
    /// After the last block: the output into `s`[`RESULT`].
    fn fold(&self, a: &mut Assembler) -> Result<(), EncodeError>;
}

/// Twin `who`'s body for `offer`, of family `family`: the offer checked
/// as the x64 frame checks it, then the whole function emitted around
/// `body`, its loops annotated; a failure is `who`'s refusal.
pub(crate) fn emit(
    body: &dyn Body,
    who: &str,
    family: &str,
    offer: &Offer,
) -> Result<NativeCode, Refusal> {
    crate::twin::check_offer(body.format(), who, family, offer)?;
    let (words, loops) = frame(body).map_err(|e| Refusal::EmitError {
        message: format!("{who}: {e}"),
    })?;
    Ok(NativeCode {
        isa: Isa::Aarch64,
        bytes: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
        pool: None,
        loops,
    })
}

/// A loop's head, in bytes from the start.
struct Head {
    label: Label,
    at: usize,
}

fn head(a: &mut Assembler) -> Result<Head, EncodeError> {
    let label = a.new_label();
    a.bind(label)?;
    Ok(Head {
        label,
        at: 4 * a.len(),
    })
}

/// The back edge `b.<cond> head`, recorded as loop `name`.
fn back(
    a: &mut Assembler,
    h: Head,
    cond: Option<Cond>,
    name: &str,
    loops: &mut Vec<LoopAnnotation>,
) -> Result<(), EncodeError> {
    let back_edge = 4 * a.len();
    match cond {
        Some(c) => a.b_cond(c, h.label)?,
        None => a.b(h.label)?,
    }
    loops.push(LoopAnnotation {
        name: name.to_owned(),
        head: h.at,
        back_edge,
    });
    Ok(())
}

fn frame(body: &dyn Body) -> Result<(Vec<u32>, Vec<LoopAnnotation>), EncodeError> {
    let mut a = Assembler::new();
    let mut loops = Vec::new();
    // The callee-saved registers the body may use.
    a.stp(d(8), d(9), mem(SP).pre(-SAVES))?;
    a.stp(d(10), d(11), mem(SP).off(16))?;
    a.stp(d(12), d(13), mem(SP).off(32))?;
    a.stp(d(14), d(15), mem(SP).off(48))?;
    a.stp(x(19), x(20), mem(SP).off(64))?;
    a.stp(x(21), x(22), mem(SP).off(80))?;
    for (reg, off) in [
        (W, offsets::WEIGHTS),
        (X, offsets::X),
        (Y, offsets::Y),
        (ROWS, offsets::ROWS),
        (BLOCKS, offsets::BLOCKS),
        (BATCH, offsets::BATCH),
        (R, offsets::ROW_START),
        (ROW_END, offsets::ROW_END),
    ] {
        a.ldr(reg, mem(ARGS).off(i64::from(off)))?;
    }
    let w_bytes = body.format().block_bytes() as i64;
    let x_bytes = crate::x_format(body.format()).map_or(0, |f| f.block_bytes()) as i64;
    let tmp = GP_SCRATCH[0];
    a.mov(tmp, w_bytes)?;
    a.mul(W_ROW, BLOCKS, tmp)?;
    a.mov(tmp, x_bytes)?;
    a.mul(X_VEC, BLOCKS, tmp)?;
    body.setup(&mut a)?;

    let done = a.new_label();
    let rows = head(&mut a)?;
    a.cmp(R, ROW_END)?;
    a.b_cond(Cond::Hs, done)?;
    a.mov(N, XZR)?;
    let batch = head(&mut a)?;
    a.madd(PW, R, W_ROW, W)?;
    a.madd(PX, N, X_VEC, X)?;
    body.clear(&mut a)?;
    a.mov(K, BLOCKS)?;
    let blocks = head(&mut a)?;
    body.block(&mut a)?;
    a.add(PW, PW, w_bytes)?;
    a.add(PX, PX, x_bytes)?;
    a.subs(K, K, 1)?;
    back(&mut a, blocks, Some(Cond::Ne), "blocks", &mut loops)?;
    body.fold(&mut a)?;
    // y[N · rows + R] = result.
    a.madd(tmp, N, ROWS, R)?;
    a.str(s(RESULT), mem(Y).idx_scaled(tmp))?;
    a.add(N, N, 1)?;
    a.cmp(N, BATCH)?;
    back(&mut a, batch, Some(Cond::Lo), "batch", &mut loops)?;
    a.add(R, R, 1)?;
    back(&mut a, rows, None, "rows", &mut loops)?;
    a.bind(done)?;
    a.ldp(x(21), x(22), mem(SP).off(80))?;
    a.ldp(x(19), x(20), mem(SP).off(64))?;
    a.ldp(d(14), d(15), mem(SP).off(48))?;
    a.ldp(d(12), d(13), mem(SP).off(32))?;
    a.ldp(d(10), d(11), mem(SP).off(16))?;
    a.ldp(d(8), d(9), mem(SP).post(SAVES))?;
    a.ret()?;
    // Outermost first, as the nest states them.
    loops.reverse();
    debug_assert!(loops.iter().zip(LOOPS).all(|(l, (n, _))| l.name == n));
    Ok((a.finish()?, loops))
}

/// `value` into general register `reg`: `movz` and a `movk` per further
/// non-zero 16-bit chunk (or one `mov` where a single instruction does).
pub(crate) fn mov_u64(a: &mut Assembler, reg: Gpr, value: u64) -> Result<(), EncodeError> {
    if a.mov(reg, value as i64).is_ok() {
        return Ok(());
    }
    a.movz(reg, (value & 0xffff) as i64, 0)?;
    for shift in [16u8, 32, 48] {
        let chunk = (value >> shift) & 0xffff;
        if chunk != 0 {
            a.movk(reg, chunk as i64, i64::from(shift))?;
        }
    }
    Ok(())
}

/// Both doublewords of `v`[`reg`] set to `value` (through `GP_SCRATCH[0]`).
pub(crate) fn splat_u64(a: &mut Assembler, reg: u8, value: u64) -> Result<(), EncodeError> {
    mov_u64(a, GP_SCRATCH[0], value)?;
    a.dup(v(reg).d2(), GP_SCRATCH[0])
}

/// The low doubleword of `v`[`reg`] set to `lo`, the high one to `hi`.
pub(crate) fn set_u64x2(a: &mut Assembler, reg: u8, lo: u64, hi: u64) -> Result<(), EncodeError> {
    splat_u64(a, reg, lo)?;
    mov_u64(a, GP_SCRATCH[0], hi)?;
    a.mov(v(reg).d(1), GP_SCRATCH[0])
}

/// The contract's fold of eight lanes held as `lo` (lanes 0–3) and `hi`
/// (lanes 4–7): `u[l] = lo[l] ⊕ hi[l]`, then `(u0 ⊕ u2) ⊕ (u1 ⊕ u3)`
/// into `s`[`RESULT`]. Overwrites `lo` and `hi`.
pub(crate) fn fold8(a: &mut Assembler, lo: u8, hi: u8) -> Result<(), EncodeError> {
    a.fadd(v(lo).s4(), v(lo).s4(), v(hi).s4())?;
    // (u0 + u2, u1 + u3) in lanes 0 and 1, then their sum.
    a.ext(v(hi).b16(), v(lo).b16(), v(lo).b16(), 8)?;
    a.fadd(v(lo).s4(), v(lo).s4(), v(hi).s4())?;
    a.op(Op::FADDP_SCALAR, (s(RESULT), v(lo).s2()))
}
