//! The emitter: a CodeAssembler plus an ABI frame, labels, broadcasts and a
//! final check of the clobber declaration.

use std::collections::BTreeSet;
use std::ops::Range;

use iced_x86::code_asm::registers::gpr64::get_gpr64;
use iced_x86::code_asm::{
    eax, qword_ptr, rsp, xmmword_ptr, AsmRegister64, AsmRegisterXmm, AsmRegisterYmm,
    AsmRegisterZmm, CodeAssembler, CodeLabel,
};
use iced_x86::{
    BlockEncoderOptions, Code, CpuidFeature, Decoder, DecoderOptions, Formatter,
    InstructionInfoFactory, IntelFormatter, OpAccess, Register,
};

use crate::error::iced;
use crate::{Abi, Clobbers, EmitError, Listing};

/// Which encoding to pick for instructions that have both a VEX and an EVEX
/// form.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// VEX where it exists (iced's default). Beware: VEX `vpdpbusd` is
    /// AVX-VNNI, which Zen 4 and Ice Lake lack even though they have
    /// AVX-512 VNNI.
    #[default]
    Vex,
    /// EVEX where it exists (AVX-512; xmm/ymm forms need AVX512VL).
    Evex,
}

/// A vector register of any width, for the helpers that accept all three.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VectorReg {
    /// 128-bit.
    Xmm(AsmRegisterXmm),
    /// 256-bit.
    Ymm(AsmRegisterYmm),
    /// 512-bit (always EVEX).
    Zmm(AsmRegisterZmm),
}

impl VectorReg {
    /// iced's register.
    pub fn register(self) -> Register {
        match self {
            VectorReg::Xmm(r) => r.into(),
            VectorReg::Ymm(r) => r.into(),
            VectorReg::Zmm(r) => r.into(),
        }
    }

    /// The register number, 0–31.
    pub fn number(self) -> usize {
        self.register().number()
    }

    /// The xmm register with the same number (the low 128 bits).
    pub fn xmm(self) -> AsmRegisterXmm {
        crate::regs::XMM[self.number() & 31]
    }
}

impl From<AsmRegisterXmm> for VectorReg {
    fn from(r: AsmRegisterXmm) -> Self {
        VectorReg::Xmm(r)
    }
}
impl From<AsmRegisterYmm> for VectorReg {
    fn from(r: AsmRegisterYmm) -> Self {
        VectorReg::Ymm(r)
    }
}
impl From<AsmRegisterZmm> for VectorReg {
    fn from(r: AsmRegisterZmm) -> Self {
        VectorReg::Zmm(r)
    }
}

/// What the prologue saved, so the epilogue restores the same.
#[derive(Clone, Debug, Default)]
struct Frame {
    /// Pushed GPRs, in push order.
    gprs: Vec<AsmRegister64>,
    /// Spilled xmm registers; xmm `i` of this list lives at `[rsp + 16*i]`.
    xmms: Vec<AsmRegisterXmm>,
    /// Bytes subtracted from rsp after the pushes (spill area + alignment).
    spill_bytes: i32,
}

/// Emits one x86-64 function: entry and exit for an [`Abi`], a body written
/// through [`asm`](Emitter::asm) and the helpers, then [`finish`](Emitter::finish)
/// encodes it at offset 0.
///
/// A typical body:
///
/// ```
/// use weft_x64::{Abi, Clobbers, Emitter};
/// use weft_x64::iced_x86::code_asm::*;
///
/// # fn main() -> Result<(), weft_x64::EmitError> {
/// let mut e = Emitter::new(Abi::SysV)?;
/// e.prologue(Clobbers::none().with(rbx))?;
/// e.load_arg(rbx, 8)?; // second field of the argument struct
/// e.broadcast_f32(ymm0, 1.5)?;
/// e.asm().vmovups(ymmword_ptr(rbx), ymm0)?;
/// e.epilogue()?;
/// let emitted = e.finish()?;
/// assert!(emitted.listing.to_string().contains("vbroadcastss ymm0, xmm0"));
/// # Ok(())
/// # }
/// ```
///
/// The frame (see [`prologue`](Emitter::prologue)) pushes the declared
/// callee-saved GPRs and, on Win64, spills the declared `xmm6`–`xmm15` to a
/// 16-byte-aligned area; the epilogue undoes it, runs `vzeroupper` and
/// returns. The frame and the broadcasts use VEX instructions, so every
/// function emitted here needs AVX.
pub struct Emitter {
    asm: CodeAssembler,
    abi: Abi,
    encoding: Encoding,
    frame: Option<Frame>,
    /// Instruction-index ranges emitted by prologue/epilogue (exempt from
    /// the clobber check: they are the saves and restores).
    frame_instructions: Vec<Range<usize>>,
    labels: Vec<CodeLabel>,
}

/// The result of [`Emitter::finish`]: the function's bytes (entry at offset
/// 0) and their listing.
#[derive(Clone, Debug)]
pub struct Emitted {
    /// Machine code, position-independent unless the body used absolute
    /// addresses.
    pub bytes: Vec<u8>,
    /// The bytes decoded back to Intel syntax.
    pub listing: Listing,
    label_offsets: Vec<(CodeLabel, usize)>,
    cpuid_features: Vec<CpuidFeature>,
}

impl Emitted {
    /// The byte offset of a label set with [`Emitter::set_label`], if it
    /// was.
    pub fn label_offset(&self, label: &CodeLabel) -> Option<usize> {
        self.label_offsets
            .iter()
            .find(|(l, _)| l == label)
            .map(|(_, offset)| *offset)
    }

    /// Every CPUID feature the decoded bytes need (sorted, unique), e.g.
    /// `AVX2`, `FMA`, `AVX512_VNNI`, `AVX_VNNI`: what a host must have to run
    /// them.
    pub fn cpuid_features(&self) -> &[CpuidFeature] {
        &self.cpuid_features
    }
}

impl Emitter {
    /// A new, empty 64-bit function entered with `abi`.
    pub fn new(abi: Abi) -> Result<Emitter, EmitError> {
        let asm = CodeAssembler::new(64).map_err(iced("a 64-bit CodeAssembler"))?;
        Ok(Emitter {
            asm,
            abi,
            encoding: Encoding::Vex,
            frame: None,
            frame_instructions: Vec::new(),
            labels: Vec::new(),
        })
    }

    /// The ABI this function is entered with.
    pub fn abi(&self) -> Abi {
        self.abi
    }

    /// The register holding the argument-struct pointer on entry (`rdi`
    /// SysV, `rcx` Win64). The prologue leaves it intact.
    pub fn args_reg(&self) -> AsmRegister64 {
        self.abi.args_reg()
    }

    /// The underlying assembler, for every instruction the façade does not
    /// wrap. Instructions added here obey [`Encoding`] like the rest.
    pub fn asm(&mut self) -> &mut CodeAssembler {
        &mut self.asm
    }

    /// The current encoding preference.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// Sets the encoding preference for the instructions that follow.
    pub fn set_encoding(&mut self, encoding: Encoding) {
        self.encoding = encoding;
        self.asm.set_prefer_vex(encoding == Encoding::Vex);
    }

    /// Runs `body` with `encoding` in force, then restores the previous
    /// preference (also when `body` fails).
    pub fn with_encoding<R>(
        &mut self,
        encoding: Encoding,
        body: impl FnOnce(&mut Emitter) -> Result<R, EmitError>,
    ) -> Result<R, EmitError> {
        let previous = self.encoding;
        self.set_encoding(encoding);
        let result = body(self);
        self.set_encoding(previous);
        result
    }

    /// [`with_encoding`](Emitter::with_encoding)`(Encoding::Evex, body)`:
    /// e.g. the AVX-512 VNNI `vpdpbusd` rather than the AVX-VNNI one.
    pub fn evex<R>(
        &mut self,
        body: impl FnOnce(&mut Emitter) -> Result<R, EmitError>,
    ) -> Result<R, EmitError> {
        self.with_encoding(Encoding::Evex, body)
    }

    /// Emits the entry: pushes the callee-saved GPRs among `clobbers` (in
    /// the order of [`Abi::callee_saved_gprs`]) and, on Win64, spills the
    /// declared `xmm6`–`xmm15` to a 16-byte-aligned area below them with
    /// `vmovaps`. After it, `rsp` is 16-byte aligned whenever xmm registers
    /// were spilled. Call it at most once, before the body and any
    /// epilogue ([`EmitError::FrameOrder`] otherwise); a function that
    /// touches no callee-saved register may skip it.
    pub fn prologue(&mut self, clobbers: Clobbers) -> Result<(), EmitError> {
        if self.frame.is_some() {
            return Err(EmitError::FrameOrder {
                problem: "prologue() emitted twice",
            });
        }
        if !self.frame_instructions.is_empty() {
            return Err(EmitError::FrameOrder {
                problem: "prologue() after an epilogue()",
            });
        }
        let gprs: Vec<AsmRegister64> = self
            .abi
            .callee_saved_gprs()
            .iter()
            .filter(|r| clobbers.contains(**r))
            .filter_map(|r| get_gpr64(*r))
            .collect();
        let xmms: Vec<AsmRegisterXmm> = self
            .abi
            .callee_saved_vectors()
            .map(|n| crate::regs::XMM[usize::from(n) & 31])
            .filter(|x| clobbers.contains(Register::from(*x)))
            .collect();
        // On entry rsp = 8 (mod 16); each push adds 8 more.
        let spill_bytes = if xmms.is_empty() {
            0
        } else {
            let misalignment = if gprs.len().is_multiple_of(2) { 8 } else { 0 };
            16 * xmms.len() as i32 + misalignment
        };
        let start = self.asm.instructions().len();
        for &r in &gprs {
            self.asm.push(r).map_err(iced("a prologue push"))?;
        }
        if spill_bytes > 0 {
            self.asm
                .sub(rsp, spill_bytes)
                .map_err(iced("the prologue's stack adjustment"))?;
        }
        for (i, &x) in xmms.iter().enumerate() {
            self.asm
                .vex()
                .vmovaps(xmmword_ptr(rsp + 16 * i as i32), x)
                .map_err(iced("a prologue xmm spill"))?;
        }
        self.frame_instructions
            .push(start..self.asm.instructions().len());
        self.frame = Some(Frame {
            gprs,
            xmms,
            spill_bytes,
        });
        Ok(())
    }

    /// Emits an exit: restores what [`prologue`](Emitter::prologue) saved,
    /// `vzeroupper` (no dirty upper state leaks to the caller; xmm return
    /// values survive it), `ret`. May be emitted more than once (several
    /// exits); without a prologue it is `vzeroupper; ret`.
    pub fn epilogue(&mut self) -> Result<(), EmitError> {
        let frame = self.frame.clone().unwrap_or_default();
        let start = self.asm.instructions().len();
        for (i, &x) in frame.xmms.iter().enumerate() {
            self.asm
                .vex()
                .vmovaps(x, xmmword_ptr(rsp + 16 * i as i32))
                .map_err(iced("an epilogue xmm restore"))?;
        }
        if frame.spill_bytes > 0 {
            self.asm
                .add(rsp, frame.spill_bytes)
                .map_err(iced("the epilogue's stack adjustment"))?;
        }
        for &r in frame.gprs.iter().rev() {
            self.asm.pop(r).map_err(iced("an epilogue pop"))?;
        }
        self.asm.vzeroupper().map_err(iced("vzeroupper"))?;
        self.asm.ret().map_err(iced("ret"))?;
        self.frame_instructions
            .push(start..self.asm.instructions().len());
        Ok(())
    }

    /// `mov dst, qword ptr [args_reg + offset]`: loads a 64-bit field
    /// (pointer, `usize`, `u64`) of the argument struct.
    pub fn load_arg(&mut self, dst: AsmRegister64, offset: i32) -> Result<(), EmitError> {
        let args = self.args_reg();
        self.asm
            .mov(dst, qword_ptr(args + offset))
            .map_err(iced(format!("load_arg at offset {offset}")))
    }

    /// A fresh label, to be placed with [`set_label`](Emitter::set_label).
    pub fn create_label(&mut self) -> CodeLabel {
        self.asm.create_label()
    }

    /// Places `label` at the next instruction emitted (at most one label
    /// per instruction) and remembers it for [`Emitted::label_offset`].
    pub fn set_label(&mut self, label: &mut CodeLabel) -> Result<(), EmitError> {
        self.asm.set_label(label).map_err(iced("set_label"))?;
        self.labels.push(*label);
        Ok(())
    }

    /// Emits a loop that runs `body` `counter` times, counting `counter`
    /// down to zero; a zero count skips the body:
    ///
    /// ```text
    ///     test counter, counter
    ///     je done
    /// top:
    ///     body
    ///     dec counter
    ///     jne top
    /// done:
    /// ```
    ///
    /// `body` is emitted once and must not change `counter`. `done` labels
    /// the next instruction emitted after this call, so do not set another
    /// label right after it.
    pub fn counted_loop(
        &mut self,
        counter: AsmRegister64,
        body: impl FnOnce(&mut Emitter) -> Result<(), EmitError>,
    ) -> Result<(), EmitError> {
        let mut top = self.create_label();
        let mut done = self.create_label();
        self.asm.test(counter, counter).map_err(iced("loop test"))?;
        self.asm.je(done).map_err(iced("loop entry branch"))?;
        self.set_label(&mut top)?;
        body(self)?;
        self.asm.dec(counter).map_err(iced("loop decrement"))?;
        self.asm.jne(top).map_err(iced("loop back-edge"))?;
        self.set_label(&mut done)
    }

    /// Broadcasts an f32 constant into every lane of `dst`, built at the
    /// point of use (no constant pool, no memory load). Clobbers `eax`.
    ///
    /// * `0.0` (bits 0): `vpxor xmm, xmm, xmm` (AVX; `vpxord` from xmm16 up).
    /// * VEX (xmm/ymm 0–15 under [`Encoding::Vex`]): `mov eax, bits;
    ///   vmovd xmm, eax; vbroadcastss dst, xmm` (AVX2).
    /// * EVEX (zmm, registers 16–31, or [`Encoding::Evex`]): `mov eax,
    ///   bits; vpbroadcastd dst, eax` (AVX512F, +VL below zmm).
    pub fn broadcast_f32(
        &mut self,
        dst: impl Into<VectorReg>,
        value: f32,
    ) -> Result<(), EmitError> {
        self.broadcast(dst.into(), value.to_bits(), Lane::F32)
    }

    /// Broadcasts an i32 constant into every lane of `dst`, like
    /// [`broadcast_f32`](Emitter::broadcast_f32) but with `vpbroadcastd`
    /// on the VEX path. Clobbers `eax`.
    pub fn broadcast_i32(
        &mut self,
        dst: impl Into<VectorReg>,
        value: i32,
    ) -> Result<(), EmitError> {
        self.broadcast(dst.into(), value as u32, Lane::I32)
    }

    /// Broadcasts a u16 constant into every 16-bit lane of `dst` with
    /// `vpbroadcastw` (AVX2 on the VEX path; AVX512BW on the EVEX path).
    /// Clobbers `eax`.
    pub fn broadcast_u16(
        &mut self,
        dst: impl Into<VectorReg>,
        value: u16,
    ) -> Result<(), EmitError> {
        self.broadcast(dst.into(), u32::from(value), Lane::U16)
    }

    fn broadcast(&mut self, dst: VectorReg, bits: u32, lane: Lane) -> Result<(), EmitError> {
        let what = || format!("a broadcast of {bits:#x} into {:?}", dst.register());
        let x = dst.xmm();
        let high = dst.number() >= 16;
        if bits == 0 {
            let a = &mut self.asm;
            let r = match dst {
                _ if !high => a.vex().vpxor(x, x, x),
                VectorReg::Xmm(d) => a.evex().vpxord(d, d, d),
                VectorReg::Ymm(d) => a.evex().vpxord(d, d, d),
                VectorReg::Zmm(d) => a.evex().vpxord(d, d, d),
            };
            return r.map_err(iced(what()));
        }
        self.asm.mov(eax, bits).map_err(iced(what()))?;
        let use_evex = high || self.encoding == Encoding::Evex || matches!(dst, VectorReg::Zmm(_));
        let a = &mut self.asm;
        let r = if use_evex {
            match (dst, lane) {
                (VectorReg::Xmm(d), Lane::U16) => a.evex().vpbroadcastw(d, eax),
                (VectorReg::Ymm(d), Lane::U16) => a.evex().vpbroadcastw(d, eax),
                (VectorReg::Zmm(d), Lane::U16) => a.evex().vpbroadcastw(d, eax),
                (VectorReg::Xmm(d), _) => a.evex().vpbroadcastd(d, eax),
                (VectorReg::Ymm(d), _) => a.evex().vpbroadcastd(d, eax),
                (VectorReg::Zmm(d), _) => a.evex().vpbroadcastd(d, eax),
            }
        } else {
            a.vex().vmovd(x, eax).map_err(iced(what()))?;
            match (dst, lane) {
                (VectorReg::Xmm(d), Lane::F32) => a.vex().vbroadcastss(d, x),
                (VectorReg::Ymm(d), Lane::F32) => a.vex().vbroadcastss(d, x),
                (VectorReg::Xmm(d), Lane::I32) => a.vex().vpbroadcastd(d, x),
                (VectorReg::Ymm(d), Lane::I32) => a.vex().vpbroadcastd(d, x),
                (VectorReg::Xmm(d), Lane::U16) => a.vex().vpbroadcastw(d, x),
                (VectorReg::Ymm(d), Lane::U16) => a.vex().vpbroadcastw(d, x),
                // zmm always takes the EVEX path above.
                (VectorReg::Zmm(d), _) => a.evex().vpbroadcastd(d, eax),
            }
        };
        r.map_err(iced(what()))
    }

    /// Checks the clobber declaration, encodes at offset 0, and decodes the
    /// bytes back into a [`Listing`].
    pub fn finish(mut self) -> Result<Emitted, EmitError> {
        self.check_clobbers()?;
        let result = self
            .asm
            .assemble_options(0, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)
            .map_err(iced("the function (encoding)"))?;
        let mut label_offsets = Vec::with_capacity(self.labels.len());
        for label in &self.labels {
            let ip = result.label_ip(label).map_err(iced("a label offset"))?;
            label_offsets.push((*label, ip as usize));
        }
        let bytes = result.inner.code_buffer;
        let listing = Listing::decode(&bytes);
        let mut features = BTreeSet::new();
        let mut decoder = Decoder::with_ip(64, &bytes, 0, DecoderOptions::NONE);
        for instruction in &mut decoder {
            features.extend(instruction.cpuid_features().iter().copied());
        }
        Ok(Emitted {
            bytes,
            listing,
            label_offsets,
            cpuid_features: features.into_iter().collect(),
        })
    }

    /// Every write to a callee-saved register outside the frame's own saves
    /// and restores must have been declared (and so saved).
    fn check_clobbers(&self) -> Result<(), EmitError> {
        let saved: Vec<Register> = match &self.frame {
            Some(frame) => frame
                .gprs
                .iter()
                .map(|r| Register::from(*r))
                .chain(
                    frame
                        .xmms
                        .iter()
                        .map(|x| Register::from(*x).full_register()),
                )
                .collect(),
            None => Vec::new(),
        };
        let mut info = InstructionInfoFactory::new();
        for (index, instruction) in self.asm.instructions().iter().enumerate() {
            if self.frame_instructions.iter().any(|r| r.contains(&index)) {
                continue;
            }
            // vzeroupper clears only bits 128 and up, which Win64 does not
            // preserve either.
            if instruction.code() == Code::VEX_Vzeroupper {
                continue;
            }
            for used in info.info(instruction).used_registers() {
                let writes = matches!(
                    used.access(),
                    OpAccess::Write
                        | OpAccess::CondWrite
                        | OpAccess::ReadWrite
                        | OpAccess::ReadCondWrite
                );
                let full = used.register().full_register();
                if writes
                    && full != Register::RSP
                    && self.abi.is_callee_saved(full)
                    && !saved.contains(&full)
                {
                    let mut text = String::new();
                    IntelFormatter::new().format(instruction, &mut text);
                    let register = IntelFormatter::new().format_register(full).to_string();
                    return Err(EmitError::UndeclaredClobber {
                        register,
                        abi: self.abi,
                        instruction: text,
                        index,
                    });
                }
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Lane {
    F32,
    I32,
    U16,
}
