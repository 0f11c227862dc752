//! The frame every K-quant matrix-vector x64 twin shares: one row at a
//! time (each row one linear stream of super-blocks), vectors next,
//! super-blocks innermost, and the store. A family supplies its
//! [`Body`]: what clears its accumulators, what one super-block does,
//! and the fold that leaves the output in [`RESULT`].
//!
//! General registers (SysV names; Win64 enters with the argument pointer
//! in `rcx`, which is moved to `rdi`): `rdi` the arguments, `r8` W, `r9`
//! X, `rbx` bytes per W row, `rbp` bytes per X vector, `rsi` super-blocks
//! per row, `r12` the row, `r13` the vector, `r14`/`r15` the current
//! super-block of W and X ([`PW`], [`PX`]), `rcx` the super-blocks left;
//! `rax`, `rdx`, `r10`, `r11` are the body's scratch. A 32-byte stack
//! slot at `rsp` is the body's too. Every vector register the body may
//! use (ymm0–15) is declared, so Win64 saves what it must.
//!
//! A body may ask for a table made once per call from the activations
//! alone ([`Body::table_bytes`], [`Body::table_entry`]): the frame puts it
//! below the stack, under a page (so no ABI needs probes; an offer whose
//! table would not fit is refused, a call beyond its offer traps), fills
//! it in an annotated `table` loop before the rows, and restores `rsp`
//! at the end.

use weft_kernel::{Isa, LoopAnnotation, NativeCode, Offer, Refusal};
use weft_quant::Format;
use weft_x64::iced_x86::code_asm::{
    dword_ptr, qword_ptr, r10, r11, r12, r13, r14, r15, r8, r9, rax, rbp, rbx, rcx, rdi, rdx, rsi,
    rsp, AsmRegister64, CodeLabel,
};
use weft_x64::regs::{XMM, YMM};
use weft_x64::{Abi, Clobbers, EmitError, Emitter};

use crate::offsets;

pub(crate) const ARGS: AsmRegister64 = rdi;
const W: AsmRegister64 = r8;
const X: AsmRegister64 = r9;
const W_ROW: AsmRegister64 = rbx;
const X_VEC: AsmRegister64 = rbp;
const BLOCKS: AsmRegister64 = rsi;
const R: AsmRegister64 = r12;
/// The vector.
pub(crate) const N: AsmRegister64 = r13;
/// The current weight super-block.
pub(crate) const PW: AsmRegister64 = r14;
/// The current activation super-block.
pub(crate) const PX: AsmRegister64 = r15;
const K: AsmRegister64 = rcx;

/// Bytes of stack the body may use at `rsp`.
pub(crate) const SLOT: i32 = 32;

/// The xmm register a body's fold leaves the output in (lane 0).
pub(crate) const RESULT: usize = 15;

use crate::twin::LOOPS;

/// Map an iced error into the emitter's.
pub(crate) fn iced(e: weft_x64::iced_x86::IcedError) -> EmitError {
    EmitError::from(e)
}

/// What a family's twin emits inside the frame.
pub(crate) trait Body {
    /// The weights' block format (the activations' is its pairing).
    fn format(&self) -> Format;
    /// Once per call, before any row (constants).
    fn setup(&self, e: &mut Emitter) -> Result<(), EmitError>;
    /// Before each (row, vector): clear the accumulators.
    fn clear(&self, e: &mut Emitter) -> Result<(), EmitError>;
    /// The super-block at [`PW`] against the one at [`PX`].
    fn super_block(&self, e: &mut Emitter) -> Result<(), EmitError>;
    /// After the last super-block: the output into xmm [`RESULT`].
    fn fold(&self, e: &mut Emitter) -> Result<(), EmitError>;
    /// Bytes per activation block of a table the body fills once per call
    /// and reads from its blocks ([`Body::table_entry`]); 0 for none. The
    /// frame keeps the whole table within [`TABLE_LIMIT`] bytes of stack.
    fn table_bytes(&self) -> i32 {
        0
    }
    /// The table's entry at `r10` for the activation block at `r11` (the
    /// frame walks every block of every vector, in order). While a body
    /// has a table, `[rsp + 8]` holds its bytes per vector and
    /// `[rsp + 16]` its start.
    fn table_entry(&self, _e: &mut Emitter) -> Result<(), EmitError> {
        Ok(())
    }
}

/// The most bytes a body's table entries may take: with the frame's
/// 64-byte header and its rounding, the stack grows by less than a page,
/// so it needs no probes on any ABI.
pub(crate) const TABLE_LIMIT: u64 = 4096 - 64 - 2 * 63;

/// Where the table's header keeps its bytes per vector.
pub(crate) const TABLE_STRIDE: i32 = 8;
/// Where the table's header keeps its start.
pub(crate) const TABLE_START: i32 = 16;

/// A loop the emitter wrote.
struct Mark {
    name: &'static str,
    head: CodeLabel,
    back: CodeLabel,
}

fn loop_head(e: &mut Emitter, name: &'static str) -> Result<Mark, EmitError> {
    let mut head = e.create_label();
    e.set_label(&mut head)?;
    Ok(Mark {
        name,
        head,
        back: e.create_label(),
    })
}

fn loop_back(
    e: &mut Emitter,
    mut mark: Mark,
    marks: &mut Vec<Mark>,
    branch: impl FnOnce(&mut Emitter, CodeLabel) -> Result<(), EmitError>,
) -> Result<(), EmitError> {
    e.set_label(&mut mark.back)?;
    branch(e, mark.head)?;
    marks.push(mark);
    Ok(())
}

/// Twin `who`'s body for `offer`, of family `family`: the offer checked
/// (the family's contract, no packed operand, a geometry the contract
/// admits), then the whole function emitted around `body`, its loops
/// annotated; a failure is `who`'s refusal.
pub(crate) fn emit(
    body: &dyn Body,
    abi: Abi,
    who: &str,
    family: &str,
    offer: &Offer,
) -> Result<NativeCode, Refusal> {
    crate::twin::check_offer(body.format(), who, family, offer)?;
    if body.table_bytes() > 0 {
        let g = &offer.contract.geometry;
        let blocks = g.get("cols").unwrap_or(0) / body.format().block_len() as u64;
        let entries = g.get("batch").unwrap_or(1) * blocks;
        if entries * body.table_bytes() as u64 > TABLE_LIMIT {
            return Err(Refusal::UnsupportedGeometry {
                reason: format!(
                    "{who}: {entries} activation blocks need more than the {TABLE_LIMIT} bytes of \
                     table it keeps on the stack"
                ),
            });
        }
    }
    let refusal = |e: EmitError| Refusal::EmitError {
        message: format!("{who}: {e}"),
    };
    let (emitted, marks) = frame(body, abi).map_err(refusal)?;
    let mut loops = Vec::with_capacity(LOOPS.len() + 1);
    let table = (body.table_bytes() > 0).then_some(crate::twin::TABLE_LOOP.0);
    for name in table.into_iter().chain(LOOPS.map(|(name, _)| name)) {
        let at = marks.iter().find(|m| m.name == name).and_then(|m| {
            Some((
                emitted.label_offset(&m.head)?,
                emitted.label_offset(&m.back)?,
            ))
        });
        let Some((head, back_edge)) = at else {
            return Err(Refusal::EmitError {
                message: format!("{who}: loop {name} has no offsets"),
            });
        };
        loops.push(LoopAnnotation {
            name: name.to_owned(),
            head,
            back_edge,
        });
    }
    Ok(NativeCode {
        isa: Isa::X86_64,
        pool: None,
        bytes: emitted.bytes,
        loops,
    })
}

fn frame(body: &dyn Body, abi: Abi) -> Result<(weft_x64::Emitted, Vec<Mark>), EmitError> {
    let mut e = Emitter::new(abi)?;
    let mut clobbers = Clobbers::none();
    for r in [
        rdi, rsi, rbx, rbp, r8, r9, r10, r11, r12, r13, r14, r15, rax, rcx, rdx,
    ] {
        clobbers = clobbers.with(r);
    }
    for y in YMM.iter().take(16) {
        clobbers = clobbers.with(*y);
    }
    e.prologue(clobbers)?;
    let args_in = e.args_reg();
    if args_in != ARGS {
        e.asm().mov(ARGS, args_in).map_err(iced)?;
    }
    e.asm().sub(rsp, SLOT).map_err(iced)?;
    e.load_arg(W, offsets::WEIGHTS)?;
    e.load_arg(X, offsets::X)?;
    e.load_arg(BLOCKS, offsets::BLOCKS)?;
    let w_bytes = body.format().block_bytes() as i32;
    let x_bytes = crate::x_format(body.format()).map_or(0, |f| f.block_bytes()) as i32;
    e.asm().imul_3(W_ROW, BLOCKS, w_bytes).map_err(iced)?;
    e.asm().imul_3(X_VEC, BLOCKS, x_bytes).map_err(iced)?;
    body.setup(&mut e)?;
    let mut marks = Vec::new();
    let mut oversize = e.create_label();
    if body.table_bytes() > 0 {
        table(&mut e, body, x_bytes, &mut marks, oversize)?;
    }
    e.load_arg(R, offsets::ROW_START)?;

    let mut done = e.create_label();
    let row_mark = loop_head(&mut e, "rows")?;
    e.asm()
        .cmp(R, qword_ptr(ARGS + offsets::ROW_END))
        .map_err(iced)?;
    e.asm().jae(done).map_err(iced)?;
    e.asm().xor(N, N).map_err(iced)?;
    let vec_mark = loop_head(&mut e, "batch")?;
    // PW = W + R · W_ROW; PX = X + N · X_VEC.
    e.asm().mov(PW, R).map_err(iced)?;
    e.asm().imul_2(PW, W_ROW).map_err(iced)?;
    e.asm().add(PW, W).map_err(iced)?;
    e.asm().mov(PX, N).map_err(iced)?;
    e.asm().imul_2(PX, X_VEC).map_err(iced)?;
    e.asm().add(PX, X).map_err(iced)?;
    body.clear(&mut e)?;
    e.asm().mov(K, BLOCKS).map_err(iced)?;
    let blk_mark = loop_head(&mut e, "blocks")?;
    body.super_block(&mut e)?;
    e.asm().add(PW, w_bytes).map_err(iced)?;
    e.asm().add(PX, x_bytes).map_err(iced)?;
    e.asm().dec(K).map_err(iced)?;
    loop_back(&mut e, blk_mark, &mut marks, |e, head| {
        e.asm().jne(head).map_err(iced)
    })?;
    body.fold(&mut e)?;
    // y[N · rows + R] = result
    e.asm().mov(rax, N).map_err(iced)?;
    e.asm()
        .imul_2(rax, qword_ptr(ARGS + offsets::ROWS))
        .map_err(iced)?;
    e.asm().add(rax, R).map_err(iced)?;
    e.asm()
        .mov(rdx, qword_ptr(ARGS + offsets::Y))
        .map_err(iced)?;
    e.asm()
        .vmovss(dword_ptr(rdx + rax * 4), XMM[RESULT])
        .map_err(iced)?;
    e.asm().inc(N).map_err(iced)?;
    e.asm()
        .cmp(N, qword_ptr(ARGS + offsets::BATCH))
        .map_err(iced)?;
    loop_back(&mut e, vec_mark, &mut marks, |e, head| {
        e.asm().jb(head).map_err(iced)
    })?;
    e.asm().inc(R).map_err(iced)?;
    loop_back(&mut e, row_mark, &mut marks, |e, head| {
        e.asm().jmp(head).map_err(iced)
    })?;
    e.set_label(&mut done)?;
    if body.table_bytes() > 0 {
        e.asm().mov(rsp, qword_ptr(rsp)).map_err(iced)?;
    }
    e.asm().add(rsp, SLOT).map_err(iced)?;
    e.epilogue()?;
    if body.table_bytes() > 0 {
        // Called outside the geometry its offer checked: stop, rather than
        // grow the stack by more than a page unprobed.
        e.set_label(&mut oversize)?;
        e.asm().ud2().map_err(iced)?;
    }
    Ok((e.finish()?, marks))
}

/// The body's table below the stack: 64 bytes of header (the old `rsp`,
/// bytes per vector, the start), then one entry per activation block of
/// every vector, filled by the body in a loop the frame annotates.
fn table(
    e: &mut Emitter,
    body: &dyn Body,
    x_bytes: i32,
    marks: &mut Vec<Mark>,
    oversize: CodeLabel,
) -> Result<(), EmitError> {
    let tb = body.table_bytes();
    let a = e.asm();
    a.mov(rcx, qword_ptr(ARGS + offsets::BATCH)).map_err(iced)?;
    a.imul_2(rcx, BLOCKS).map_err(iced)?;
    a.cmp(rcx, (TABLE_LIMIT / tb as u64) as i32).map_err(iced)?;
    a.ja(oversize).map_err(iced)?;
    a.imul_3(rax, rcx, tb).map_err(iced)?;
    a.add(rax, 64 + 63).map_err(iced)?;
    a.mov(r10, rsp).map_err(iced)?;
    a.mov(r11, rsp).map_err(iced)?;
    a.sub(r11, rax).map_err(iced)?;
    a.and(r11, -64).map_err(iced)?;
    a.mov(rsp, r11).map_err(iced)?;
    a.mov(qword_ptr(rsp), r10).map_err(iced)?;
    a.imul_3(rax, BLOCKS, tb).map_err(iced)?;
    a.mov(qword_ptr(rsp + TABLE_STRIDE), rax).map_err(iced)?;
    a.lea(r10, qword_ptr(rsp + 64)).map_err(iced)?;
    a.mov(qword_ptr(rsp + TABLE_START), r10).map_err(iced)?;
    a.mov(r11, X).map_err(iced)?;
    let mark = loop_head(e, crate::twin::TABLE_LOOP.0)?;
    body.table_entry(e)?;
    let a = e.asm();
    a.add(r10, tb).map_err(iced)?;
    a.add(r11, x_bytes).map_err(iced)?;
    a.dec(rcx).map_err(iced)?;
    loop_back(e, mark, marks, |e, head| e.asm().jne(head).map_err(iced))
}
