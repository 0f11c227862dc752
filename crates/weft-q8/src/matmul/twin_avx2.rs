//! The AVX2 twin of `q8_0.matmul` (`q8_0.matmul.twin.avx2.p1v2`): the
//! panel arm's body for hosts without AVX-512 VNNI, emitted through
//! weft-x64 with VEX encodings only (AVX2, FMA, F16C).
//!
//! A **tile** is one panel (16 rows: two ymm of i32 or f32 lanes) × two
//! vectors, which is what the 16 ymm registers hold: the two vectors'
//! four f32 accumulators, their four i32 block sums, the group's signed
//! and absolute weights (two each), `0x80` bytes, `1` words, a broadcast
//! and a temporary. Without `vpdpbusd` the integer part of a group of four
//! quants is the matvec twins' exact method: the biased quants flipped
//! back (`vpxor 0x80`), `vpabsb w` (shared by both vectors), and per
//! vector `vpsignb x, w`, `vpmaddubsw |w|, ±x` (no saturation: `|w| ≤
//! 128`, `|x| ≤ 127`, so a pair is at most 32,512), `vpmaddwd` with ones
//! and `vpaddd`. The block sums start at zero, so no bias correction and
//! no scratch table are needed. Per block each (half panel, vector) then
//! costs the contract's float part: `vcvtdq2ps`, `vmulps` (panel scales ×
//! the vector's scale, widened by `vcvtph2ps`) and `vfmadd231ps`.
//!
//! Loop order: panels outside, tiles of two vectors inside (then one tile
//! of the odd vector), blocks innermost, so a panel (`blocks · 576` bytes)
//! stays in L1/L2 while every tile reads it. A panel whose 16 rows are
//! all in `row_start..row_end` is stored with `vmovups`; an edge panel with
//! `vmaskmovps`, which writes only its rows in the range.
//!
//! Frame: SysV or Win64 ([`Q8MatmulAvx2::with_abi`]); the argument pointer
//! is moved to `rdi`; the façade saves the callee-saved registers (and on
//! Win64 `xmm6`–`xmm15`) the body uses.

use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};
use weft_x64::iced_x86::code_asm::{
    dword_ptr, eax, edx, qword_ptr, r10, r12, r13, r14, r15, rax, rbp, rbx, rcx, rdi, rdx, rsi,
    rsp, word_ptr, ymmword_ptr, AsmMemoryOperand, AsmRegister64, CodeLabel,
};
use weft_x64::regs::{XMM, YMM};
use weft_x64::{Abi, Clobbers, EmitError, Emitter};

use super::super::{offsets, BLOCK_BYTES};
use super::{dims, GROUPS, GROUP_BYTES, PANEL_BLOCK_BYTES, QUANTS_AT};
use crate::twin_x64::{loop_back, loop_head, native_code, Mark};

/// The AVX2 twin of the panel arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Q8MatmulAvx2 {
    abi: Abi,
}

/// Every AVX2 twin: one panel × two vectors (the tile the 16 ymm hold).
pub const TWINS: [Q8MatmulAvx2; 1] = [Q8MatmulAvx2::new()];

const FEATURES: &[Feature] = &[Feature::Avx, Feature::Avx2, Feature::Fma, Feature::F16c];

/// Vectors per full tile.
const TILE: usize = 2;

impl Q8MatmulAvx2 {
    /// The twin for the host's calling convention.
    pub const fn new() -> Self {
        Self { abi: Abi::host() }
    }

    /// The same twin entered with `abi` (to test Win64 on Linux).
    pub const fn with_abi(self, abi: Abi) -> Self {
        Self { abi }
    }

    /// Emit the body (independent of the geometry).
    pub fn emit_body(&self) -> Result<weft_x64::Emitted, Refusal> {
        Ok(self.emit_marked()?.0)
    }

    fn emit_marked(&self) -> Result<(weft_x64::Emitted, Vec<Mark>), Refusal> {
        let (emitted, mut marks) = emit(self.abi).map_err(|e| Refusal::EmitError {
            message: e.to_string(),
        })?;
        let names = loop_names();
        marks.sort_by_key(|m| names.iter().position(|(n, _)| *n == m.name));
        Ok((emitted, marks))
    }
}

impl Default for Q8MatmulAvx2 {
    fn default() -> Self {
        Self::new()
    }
}

/// The body's loops, outermost first, with their depths.
fn loop_names() -> Vec<(String, u32)> {
    vec![
        ("panels".to_owned(), 0),
        ("p1.tiles".to_owned(), 1),
        ("p1v2.blocks".to_owned(), 2),
        ("p1v1.blocks".to_owned(), 1),
    ]
}

// SAFETY: the body reads only the panels meeting row_start..row_end, the
// `batch` vectors' blocks and its own frame, writes only its frame and the
// outputs of rows in the range, and returns (module docs); validation
// checks its results against the arm.
unsafe impl Twin for Q8MatmulAvx2 {
    fn name(&self) -> &'static str {
        "q8_0.matmul.twin.avx2.p1v2"
    }

    fn isa(&self) -> Isa {
        Isa::X86_64
    }

    fn requires(&self) -> &'static [Feature] {
        FEATURES
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        super::arm::check_offer(offer, self.name())?;
        dims(&offer.contract.geometry)?;
        let (emitted, marks) = self.emit_marked()?;
        native_code(emitted, &marks, self.name())
    }

    /// Panels outermost (`panels`), each with `batch / 2` tiles
    /// (`p1.tiles`, each a `p1v2.blocks` loop) and, for an odd batch, one
    /// tile of the last vector (`p1v1.blocks`). Trips are at the offer's
    /// whole geometry (a member view runs a sub-range of the panels).
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        let g = &offer.contract.geometry;
        let rows = g.get("rows").unwrap_or(0);
        let blocks = g.get("cols").unwrap_or(0) / 32;
        let batch = g.get("batch").unwrap_or(1);
        let odd = batch % TILE as u64 == 1;
        loop_names()
            .into_iter()
            .map(|(name, depth)| {
                let trips = match name.as_str() {
                    "panels" => rows.div_ceil(16),
                    "p1.tiles" => batch / TILE as u64,
                    "p1v1.blocks" if !odd => 0,
                    _ => blocks,
                };
                LoopTrip { name, trips, depth }
            })
            .collect()
    }
}

// ---------------------------------------------------------------- body ---

const ARGS: AsmRegister64 = rdi;
const BLOCKS: AsmRegister64 = rsi;
/// Bytes between two vectors of x: `blocks · 34`.
const VB: AsmRegister64 = rbp;
/// Bytes between two vectors of y: `rows · 4`.
const R4: AsmRegister64 = r10;
/// y of (the tile's first vector, the panel's first row).
const YT: AsmRegister64 = r12;
/// The panel's first block.
const PBASE: AsmRegister64 = r13;
/// The tile's current panel block.
const PW: AsmRegister64 = r14;
/// The tile's first vector's current block.
const PX: AsmRegister64 = r15;
const COUNT: AsmRegister64 = rcx;

// Frame slots, from rsp.
const S_P: i32 = 0; // the panel
const S_PEND: i32 = 8; // one past the last panel meeting the range
const S_V: i32 = 16; // the tile's first vector
const S_LO: i32 = 24; // first row of the panel in the range (0..16)
const S_HI: i32 = 32; // one past the last (lo..=16)
const S_LANES: i32 = 64; // the lane numbers 0..16 as i32, for edge masks
const FRAME: i32 = 128;

// Vector registers.
const C80: usize = 0;
const ONES: usize = 1;
const fn facc(v: usize, h: usize) -> usize {
    2 + 2 * v + h
}
const fn iacc(v: usize, h: usize) -> usize {
    6 + 2 * v + h
}
const fn wsig(h: usize) -> usize {
    10 + h
}
const fn wabs(h: usize) -> usize {
    12 + h
}
const XB: usize = 14;
const TMP: usize = 15;

fn slot(off: i32) -> AsmMemoryOperand {
    qword_ptr(rsp + off)
}

fn arg(off: i32) -> AsmMemoryOperand {
    qword_ptr(ARGS + off)
}

/// `[PX + v · VB + disp]`: vector `v` of the tile.
fn xmem(v: usize, disp: i32) -> AsmMemoryOperand {
    match v {
        0 => PX + disp,
        _ => PX + VB + disp,
    }
}

fn emit(abi: Abi) -> Result<(weft_x64::Emitted, Vec<Mark>), EmitError> {
    let mut e = Emitter::new(abi)?;
    let mut clobbers = Clobbers::none()
        .with(rdi)
        .with(rsi)
        .with(rbx)
        .with(rbp)
        .with(r12)
        .with(r13)
        .with(r14)
        .with(r15);
    for y in YMM.iter().take(16) {
        clobbers = clobbers.with(*y);
    }
    e.prologue(clobbers)?;
    if e.args_reg() != ARGS {
        let from = e.args_reg();
        e.asm().mov(ARGS, from)?;
    }
    let mut marks = Vec::new();
    body(&mut e, &mut marks)?;
    e.epilogue()?;
    Ok((e.finish()?, marks))
}

fn body(e: &mut Emitter, marks: &mut Vec<Mark>) -> Result<(), EmitError> {
    let mut exit = e.create_label();
    let mut done = e.create_label();
    let a = e.asm();
    // An empty range reads and writes nothing.
    a.mov(rax, arg(offsets::ROW_START))?;
    a.cmp(rax, arg(offsets::ROW_END))?;
    a.jae(exit)?;
    a.sub(rsp, FRAME)?;
    e.broadcast_i32(YMM[C80], 0x8080_8080u32 as i32)?;
    e.broadcast_u16(YMM[ONES], 1)?;
    let a = e.asm();
    for lane in 0..16 {
        a.mov(dword_ptr(rsp + S_LANES + 4 * lane), lane)?;
    }
    a.mov(BLOCKS, arg(offsets::BLOCKS))?;
    a.imul_3(VB, BLOCKS, BLOCK_BYTES as i32)?;
    a.mov(R4, arg(offsets::ROWS))?;
    a.shl(R4, 2)?;
    a.mov(rax, arg(offsets::ROW_END))?;
    a.add(rax, 15)?;
    a.shr(rax, 4)?;
    a.mov(slot(S_PEND), rax)?;
    a.mov(rax, arg(offsets::ROW_START))?;
    a.shr(rax, 4)?;
    a.mov(slot(S_P), rax)?;

    let panels = loop_head(e, "panels".to_owned())?;
    let top = panels.head;
    let mut lo_ok = e.create_label();
    let mut hi_ok = e.create_label();
    let a = e.asm();
    a.mov(rax, slot(S_P))?;
    a.cmp(rax, slot(S_PEND))?;
    a.jae(done)?;
    // The panel's rows in the range: lo = max(row_start - 16P, 0), hi =
    // min(row_end - 16P, 16).
    a.shl(rax, 4)?;
    a.mov(rdx, arg(offsets::ROW_START))?;
    a.sub(rdx, rax)?;
    a.jns(lo_ok)?;
    a.xor(eax, eax)?;
    a.mov(rdx, rax)?;
    e.set_label(&mut lo_ok)?;
    let a = e.asm();
    a.mov(slot(S_LO), rdx)?;
    a.mov(rax, slot(S_P))?;
    a.shl(rax, 4)?;
    a.mov(rdx, arg(offsets::ROW_END))?;
    a.sub(rdx, rax)?;
    a.cmp(rdx, 16)?;
    a.jbe(hi_ok)?;
    a.mov(edx, 16)?;
    e.set_label(&mut hi_ok)?;
    let a = e.asm();
    a.mov(slot(S_HI), rdx)?;
    // PBASE = weights + P · blocks · 576.
    a.imul_3(PBASE, BLOCKS, PANEL_BLOCK_BYTES as i32)?;
    a.imul_2(PBASE, slot(S_P))?;
    a.add(PBASE, arg(offsets::WEIGHTS))?;
    a.mov(qword_ptr(rsp + S_V), 0)?;

    let mut rest = e.create_label();
    let mut next_panel = e.create_label();
    let tiles = loop_head(e, "p1.tiles".to_owned())?;
    let ttop = tiles.head;
    let a = e.asm();
    a.mov(rax, slot(S_V))?;
    a.add(rax, TILE as i32)?;
    a.cmp(rax, arg(offsets::BATCH))?;
    a.ja(rest)?;
    let mut stored = e.create_label();
    tile(e, marks, TILE, stored)?;
    e.set_label(&mut stored)?;
    e.asm().add(qword_ptr(rsp + S_V), TILE as i32)?;
    loop_back(e, tiles, marks)?;
    e.asm().jmp(ttop)?;
    e.set_label(&mut rest)?;
    let a = e.asm();
    a.mov(rax, slot(S_V))?;
    a.cmp(rax, arg(offsets::BATCH))?;
    a.jae(next_panel)?;
    tile(e, marks, 1, next_panel)?;
    e.set_label(&mut next_panel)?;
    e.asm().inc(qword_ptr(rsp + S_P))?;
    loop_back(e, panels, marks)?;
    e.asm().jmp(top)?;

    e.set_label(&mut done)?;
    e.asm().add(rsp, FRAME)?;
    e.set_label(&mut exit)?;
    Ok(())
}

/// One tile: the panel × vectors `S_V .. S_V + t`, all blocks, then the
/// stores; leaves through `out`, which the caller places next.
fn tile(e: &mut Emitter, marks: &mut Vec<Mark>, t: usize, out: CodeLabel) -> Result<(), EmitError> {
    let a = e.asm();
    // PX: the tile's first vector; YT: y of (S_V, 16 · S_P).
    a.mov(PX, slot(S_V))?;
    a.mov(YT, PX)?;
    a.imul_2(PX, VB)?;
    a.add(PX, arg(offsets::X))?;
    a.imul_2(YT, R4)?;
    a.mov(rax, slot(S_P))?;
    a.shl(rax, 6)?;
    a.add(YT, rax)?;
    a.add(YT, arg(offsets::Y))?;
    a.mov(PW, PBASE)?;
    for v in 0..t {
        for h in 0..2 {
            let z = YMM[facc(v, h)];
            a.vpxor(z, z, z)?;
        }
    }
    a.mov(COUNT, BLOCKS)?;
    let blocks = loop_head(e, format!("p1v{t}.blocks"))?;
    let top = blocks.head;
    let a = e.asm();
    for v in 0..t {
        for h in 0..2 {
            let z = YMM[iacc(v, h)];
            a.vpxor(z, z, z)?;
        }
    }
    for g in 0..GROUPS {
        let wd = (QUANTS_AT + GROUP_BYTES * g) as i32;
        for h in 0..2 {
            a.vpxor(YMM[wsig(h)], YMM[C80], ymmword_ptr(PW + wd + 32 * h as i32))?;
            a.vpabsb(YMM[wabs(h)], YMM[wsig(h)])?;
        }
        for v in 0..t {
            a.vpbroadcastd(YMM[XB], dword_ptr(xmem(v, 2 + 4 * g as i32)))?;
            for h in 0..2 {
                let s = YMM[TMP];
                a.vpsignb(s, YMM[XB], YMM[wsig(h)])?;
                a.vpmaddubsw(s, YMM[wabs(h)], s)?;
                a.vpmaddwd(s, s, YMM[ONES])?;
                a.vpaddd(YMM[iacc(v, h)], YMM[iacc(v, h)], s)?;
            }
        }
    }
    // The float part: the panel's row scales (f32) times the vector's
    // scale (binary16, widened exactly), one fma per half.
    for h in 0..2 {
        a.vmovups(YMM[wsig(h)], ymmword_ptr(PW + 32 * h as i32))?;
    }
    for v in 0..t {
        let dx = XMM[XB];
        a.movzx(eax, word_ptr(xmem(v, 0)))?;
        a.vmovd(dx, eax)?;
        a.vcvtph2ps(dx, dx)?;
        a.vbroadcastss(YMM[XB], dx)?;
        for h in 0..2 {
            let q = YMM[iacc(v, h)];
            a.vcvtdq2ps(q, q)?;
            a.vmulps(YMM[TMP], YMM[wsig(h)], YMM[XB])?;
            a.vfmadd231ps(YMM[facc(v, h)], q, YMM[TMP])?;
        }
    }
    a.add(PW, PANEL_BLOCK_BYTES as i32)?;
    a.add(PX, BLOCK_BYTES as i32)?;
    a.dec(COUNT)?;
    loop_back(e, blocks, marks)?;
    let a = e.asm();
    a.jne(top)?;
    stores(e, t, out)
}

/// The tile's outputs: whole panels straight to y, an edge panel with
/// `vmaskmovps` under a mask of its rows in the range (`lo ≤ lane < hi`
/// against the lane numbers in the frame); ends where `out` is placed (by
/// the caller, on the next instruction).
fn stores(e: &mut Emitter, t: usize, out: CodeLabel) -> Result<(), EmitError> {
    let mut edge = e.create_label();
    let a = e.asm();
    a.cmp(qword_ptr(rsp + S_LO), 0)?;
    a.jne(edge)?;
    a.cmp(qword_ptr(rsp + S_HI), 16)?;
    a.jne(edge)?;
    for v in 0..t {
        let base = if v == 0 { YT + 0 } else { YT + R4 };
        for h in 0..2 {
            a.vmovups(ymmword_ptr(base + 32 * h as i32), YMM[facc(v, h)])?;
        }
    }
    a.jmp(out)?;
    e.set_label(&mut edge)?;
    let a = e.asm();
    let (lo, hi, idx, below) = (YMM[wsig(0)], YMM[wsig(1)], YMM[wabs(0)], YMM[wabs(1)]);
    let mask = |h: usize| YMM[[XB, TMP][h]];
    a.vpbroadcastd(lo, dword_ptr(rsp + S_LO))?;
    a.vpbroadcastd(hi, dword_ptr(rsp + S_HI))?;
    for h in 0..2 {
        a.vmovdqu(idx, ymmword_ptr(rsp + S_LANES + 32 * h as i32))?;
        a.vpcmpgtd(mask(h), hi, idx)?;
        a.vpcmpgtd(below, lo, idx)?;
        a.vpandn(mask(h), below, mask(h))?;
    }
    for v in 0..t {
        let base = if v == 0 { YT + 0 } else { YT + R4 };
        for h in 0..2 {
            a.vmaskmovps(ymmword_ptr(base + 32 * h as i32), mask(h), YMM[facc(v, h)])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul::arm::{offer_for, Q8MatmulArm};
    use crate::matmul::validation::MatmulValidation;
    use crate::matmul::Q8PanelWeights;
    use crate::validation::random_weights;
    use weft_kernel::Arm;
    use weft_validate::Outcome;

    fn judge(twin: Q8MatmulAvx2, rows: usize, blocks: usize, batch: u64, seed: u64) {
        let host = weft_kernel::Host::detect();
        let w = random_weights(rows, blocks, seed, true);
        let offer = offer_for(&Q8PanelWeights::from_weights(&w), batch).expect("offer");
        let arm = Q8MatmulArm.build(&offer, host.isa).expect("arm builds");
        match weft_validate::testing::judge_twin(
            &twin,
            &arm,
            &offer,
            &host,
            &MatmulValidation,
            seed,
        ) {
            Outcome::Accepted(v) => assert!(v.words > 0),
            // A host without AVX2 + FMA + F16C cannot run the twin; the
            // judge says so by name, and that is all it can check here.
            Outcome::Refused(Refusal::MissingFeature { .. } | Refusal::WrongIsa { .. }) => {
                assert!(!host.has(Feature::Avx2) || !host.has(Feature::Fma));
            }
            Outcome::Refused(r) => panic!("{}: {r}", twin.name()),
        }
    }

    #[test]
    fn avx2_twin_matches_the_arm_bit_for_bit_at_ragged_rows_and_odd_batches() {
        for (rows, blocks, batch) in [(100, 18, 64), (16, 1, 1), (33, 3, 7), (48, 32, 17)] {
            judge(
                Q8MatmulAvx2::new(),
                rows,
                blocks,
                batch,
                rows as u64 * 7 + batch,
            );
        }
    }

    // `extern "win64"` exists only on x86-64 targets.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_twin_called_as_win64_matches_the_arm_on_an_edge_range() {
        use crate::matmul::Q8MatmulArgs;
        use crate::validation::random_activations;
        let host = weft_kernel::Host::detect();
        if weft_kernel::require_features(&host, FEATURES).is_err() {
            assert!(!host.has(Feature::Avx2) || !host.has(Feature::Fma));
            return;
        }
        let (rows, blocks, batch) = (40usize, 5usize, 3usize);
        let panels = Q8PanelWeights::from_weights(&random_weights(rows, blocks, 9, true));
        let x = random_activations(blocks, batch, 10);
        let offer = offer_for(&panels, batch as u64).expect("offer");
        let code = Q8MatmulArm.build(&offer, host.isa).expect("arm builds");
        // SAFETY: the arm's body honours the Q8MatmulArgs leaf ABI.
        let arm = unsafe { weft_kernel::Kernel::<Q8MatmulArgs>::from_native(&code) }.expect("arm");
        let range = 5..37;
        let mut want = vec![-1.0f32; rows * batch];
        let args = Q8MatmulArgs::new(&panels, &x, &mut want, range.clone()).expect("args");
        // SAFETY: `args` were checked against live buffers.
        unsafe { arm.call(&args) };
        let body = Q8MatmulAvx2::new()
            .with_abi(Abi::Win64)
            .emit_body()
            .expect("emit");
        let placed = weft_jitmem::place(&body.bytes).expect("place");
        let mut got = vec![-1.0f32; rows * batch];
        let args = Q8MatmulArgs::new(&panels, &x, &mut got, range).expect("args");
        // SAFETY: the body was emitted for the Win64 convention with the
        // leaf ABI for Q8MatmulArgs; `args` was checked against the
        // buffers, which outlive the call; `placed` stays mapped.
        unsafe {
            let f: unsafe extern "win64" fn(*const Q8MatmulArgs) =
                std::mem::transmute(placed.as_ptr());
            f(&args);
        }
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&want), bits(&got));
    }

    #[test]
    fn avx2_twin_uses_no_evex_encoding() {
        let bytes = Q8MatmulAvx2::new().emit_body().expect("emits").bytes;
        let mut d = weft_x64::iced_x86::Decoder::new(64, &bytes, 0);
        for i in d.iter() {
            assert_ne!(
                i.encoding(),
                weft_x64::iced_x86::EncodingKind::EVEX,
                "{i} needs AVX-512"
            );
        }
    }
}
