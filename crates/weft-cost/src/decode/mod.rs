//! Bytes to instructions: the facts pricing needs about each reachable
//! instruction, in one ISA-neutral shape ([`Inst`]).
//!
//! Decoding follows control flow from offset 0 (recursive traversal, not
//! a linear sweep), so constant pools placed after the code — Cranelift's
//! and the arm64 twins' — are never mistaken for instructions.

pub(crate) mod a64;
pub(crate) mod x64;

use crate::class::{Class, Width};
use crate::CostError;

/// A register in the dependency analysis: general registers `0..=31`
/// (x64 uses 0–15, arm64 0–30 and 31 for `sp`), the flags, vector
/// registers, mask registers. Stack slots get numbers above [`Reg::SLOTS`]
/// while a loop is analysed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Reg(pub(crate) u16);

impl Reg {
    /// The condition flags (x64 RFLAGS, arm64 NZCV).
    pub(crate) const FLAGS: Reg = Reg(32);
    /// First vector register.
    const VEC: u16 = 33;
    /// First mask register (x64 `k0`).
    const MASK: u16 = 65;
    /// Stack-slot pseudo-registers start here.
    pub(crate) const SLOTS: u16 = 80;

    pub(crate) const fn gpr(n: u8) -> Reg {
        Reg(n as u16)
    }

    pub(crate) const fn vec(n: u8) -> Reg {
        Reg(Reg::VEC + n as u16)
    }

    pub(crate) const fn mask(n: u8) -> Reg {
        Reg(Reg::MASK + n as u16)
    }

    /// The stack pointer of either ISA (x64 `rsp` is 4, arm64 `sp` is 31).
    pub(crate) fn is_stack_pointer(self, isa: weft_kernel::Isa) -> bool {
        match isa {
            weft_kernel::Isa::X86_64 => self.0 == 4 || self.0 == 5,
            _ => self.0 == 31 || self.0 == 29,
        }
    }
}

/// Up to eight registers, without allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Regs {
    n: u8,
    r: [u16; 8],
}

impl Regs {
    pub(crate) fn push(&mut self, reg: Reg) {
        if self.iter().any(|r| r == reg) {
            return;
        }
        if (self.n as usize) < self.r.len() {
            self.r[self.n as usize] = reg.0;
            self.n += 1;
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Reg> + '_ {
        self.r[..self.n as usize].iter().map(|&r| Reg(r))
    }
}

/// Where control goes after an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    /// To the next instruction.
    Next,
    /// Always to `target`.
    Jump(u32),
    /// To `target` or the next instruction.
    Branch(u32),
    /// Out of the function.
    Return,
    /// A trap or breakpoint: nothing follows.
    Stop,
}

/// A memory operand's address, as far as dependencies need it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Address {
    pub(crate) base: Option<Reg>,
    pub(crate) index: Option<Reg>,
    pub(crate) disp: i64,
}

/// How an instruction touches memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    None,
    Read(Address),
    Write(Address),
    ReadWrite(Address),
}

/// One decoded instruction, reduced to what pricing needs.
#[derive(Clone, Debug)]
pub(crate) struct Inst {
    /// Byte offset in the code.
    pub(crate) offset: u32,
    /// Length in bytes.
    pub(crate) len: u32,
    pub(crate) flow: Flow,
    pub(crate) class: Class,
    pub(crate) width: Width,
    /// Whether the decoder knew the instruction (arm64 words outside
    /// weft-a64's table are not known).
    pub(crate) known: bool,
    /// Registers read (address registers included).
    pub(crate) reads: Regs,
    /// Registers written (including a written-back address base).
    pub(crate) writes: Regs,
    pub(crate) memory: Access,
    /// Width of the memory access (for folded loads and stores).
    pub(crate) mem_width: Width,
    /// Bytes the memory access covers (0 when unknown or none).
    pub(crate) mem_bytes: u32,
    /// The instruction moves or tests vector lanes into the flags or a
    /// general register (`vptest`, `kortest`, `vmovmskps`, arm64 `umov`):
    /// a branch on such a value is an all-lanes test.
    pub(crate) lane_test: bool,
    /// Extra micro-ops beyond the class row (x64 `push`/`pop` of rsp, …).
    pub(crate) extra_uops: u8,
}

impl Inst {
    /// The end offset.
    pub(crate) fn end(&self) -> u32 {
        self.offset + self.len
    }
}

/// The decoded, reachable instructions of one body, sorted by offset.
#[derive(Clone, Debug)]
pub(crate) struct Decoded {
    pub(crate) insts: Vec<Inst>,
    /// Instructions the decoder did not know (priced conservatively).
    pub(crate) unknown: u32,
}

impl Decoded {
    /// The index of the instruction starting at `offset`.
    pub(crate) fn index_of(&self, offset: u32) -> Option<usize> {
        self.insts.binary_search_by_key(&offset, |i| i.offset).ok()
    }
}

/// Decode every instruction reachable from offset 0 of `bytes`.
pub(crate) fn decode(isa: weft_kernel::Isa, bytes: &[u8]) -> Result<Decoded, CostError> {
    if bytes.is_empty() {
        return Err(CostError::EmptyCode);
    }
    match isa {
        weft_kernel::Isa::X86_64 => x64::decode(bytes),
        weft_kernel::Isa::Aarch64 => a64::decode(bytes),
        weft_kernel::Isa::Other => Err(CostError::UnsupportedIsa),
    }
}

/// Recursive traversal shared by both decoders: `one(offset)` decodes the
/// instruction at `offset`; the walk follows its flow, refusing targets
/// outside the code and falling off the end by name.
pub(crate) fn traverse(
    len: usize,
    mut one: impl FnMut(u32) -> Result<Inst, CostError>,
) -> Result<Vec<Inst>, CostError> {
    let mut seen = vec![false; len];
    let mut out = Vec::new();
    let mut work = vec![0u32];
    while let Some(start) = work.pop() {
        let mut at = start;
        loop {
            if at as usize >= len {
                return Err(CostError::FallsOffEnd {
                    offset: at as usize,
                });
            }
            if seen[at as usize] {
                break;
            }
            let inst = one(at)?;
            seen[at as usize] = true;
            let next = inst.end();
            let flow = inst.flow;
            out.push(inst);
            let check = |t: u32| {
                if (t as usize) < len {
                    Ok(t)
                } else {
                    Err(CostError::BranchOutsideCode {
                        offset: at as usize,
                        target: t as usize,
                    })
                }
            };
            match flow {
                Flow::Next => at = next,
                Flow::Jump(t) => {
                    work.push(check(t)?);
                    break;
                }
                Flow::Branch(t) => {
                    work.push(check(t)?);
                    at = next;
                }
                Flow::Return | Flow::Stop => break,
            }
        }
    }
    out.sort_by_key(|i| i.offset);
    // Overlapping instructions (a jump into the middle of another) cannot
    // be priced as a CFG.
    for w in out.windows(2) {
        if w[0].end() > w[1].offset {
            return Err(CostError::OverlappingInstructions {
                offset: w[1].offset as usize,
            });
        }
    }
    Ok(out)
}
