//! weft-managed: Cranelift plumbing for the managed arms.
//!
//! One job: turn a CLIF [`Function`] into machine-code bytes for an ISA —
//! the host (with the host's features, via cranelift-native) or the other
//! supported ISA (x86_64 ↔ aarch64, baseline features, for inspection) — and
//! place host bytes in executable memory through `weft-jitmem`.
//!
//! Invariants:
//! - The bytes are captured from `Context::compile` before anything runs; the
//!   bytes in [`ArmCode::bytes`] are exactly the bytes that get placed.
//! - An arm is a leaf: `extern "C" fn(*const Args)` in the target's default
//!   calling convention, no relocations, no calls. Code with relocations or
//!   call sites is refused by name ([`ManagedError::Relocations`],
//!   [`ManagedError::CallSites`]).
//! - All executable memory goes through `weft_jitmem::place` (one W^X path).
//!   cranelift-jit's `JITModule` is therefore not used and not a dependency:
//!   a leaf function with no relocations needs no linker, and placing the
//!   bytes ourselves keeps the listed bytes and the run bytes identical.
//! - A Cranelift panic (it panics on some unsupported IR, e.g. f16
//!   arithmetic on aarch64) is contained with `catch_unwind` under a quiet
//!   panic hook and returned as [`ManagedError::CodegenPanicked`].

pub mod arm_build;

use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::{self, AbiParam, Function, Signature, UserFuncName};
use cranelift_codegen::isa::{self, OwnedTargetIsa, TargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::Context;

pub use cranelift_codegen;
pub use cranelift_frontend;

/// The instruction set architectures an arm can be compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// x86-64 (SysV calling convention on Linux/macOS, Win64 on Windows).
    X86_64,
    /// AArch64 (AAPCS64).
    Aarch64,
}

impl Arch {
    /// The architecture this process runs on, if it is one Weft supports.
    pub fn host() -> Option<Arch> {
        if cfg!(target_arch = "x86_64") {
            Some(Arch::X86_64)
        } else if cfg!(target_arch = "aarch64") {
            Some(Arch::Aarch64)
        } else {
            None
        }
    }

    /// The other supported architecture (x86_64 ↔ aarch64).
    pub fn other(self) -> Arch {
        match self {
            Arch::X86_64 => Arch::Aarch64,
            Arch::Aarch64 => Arch::X86_64,
        }
    }

    /// A target triple for compiling for this architecture from here (same
    /// OS family as the host, so the default calling convention matches).
    fn triple_name(self) -> &'static str {
        match (self, cfg!(target_os = "windows"), cfg!(target_os = "macos")) {
            (Arch::X86_64, true, _) => "x86_64-pc-windows-msvc",
            (Arch::X86_64, _, true) => "x86_64-apple-darwin",
            (Arch::X86_64, _, _) => "x86_64-unknown-linux-gnu",
            (Arch::Aarch64, true, _) => "aarch64-pc-windows-msvc",
            (Arch::Aarch64, _, true) => "aarch64-apple-darwin",
            (Arch::Aarch64, _, _) => "aarch64-unknown-linux-gnu",
        }
    }
}

/// Everything that can go wrong between CLIF and placed code, each by name.
#[derive(Debug, thiserror::Error)]
pub enum ManagedError {
    /// This process runs on an architecture Weft has no backend for.
    #[error("unsupported-host: this architecture has no Weft backend")]
    UnsupportedHost,
    /// cranelift-native could not describe the host.
    #[error("host-isa: cranelift-native refused the host: {0}")]
    HostIsa(String),
    /// `isa::lookup` refused the target triple.
    #[error("isa-lookup: no Cranelift backend for {triple}: {message}")]
    IsaLookup {
        /// The triple asked for.
        triple: &'static str,
        /// Cranelift's message.
        message: String,
    },
    /// A shared or ISA flag was refused (a bug in this crate).
    #[error("settings: {0}")]
    Settings(String),
    /// Cranelift returned an error (verifier, unsupported, limits, …).
    #[error("codegen: {0}")]
    Codegen(String),
    /// Cranelift panicked while compiling; the panic was contained.
    #[error("codegen-panicked: Cranelift panicked compiling `{function}`: {message}")]
    CodegenPanicked {
        /// The function's name.
        function: String,
        /// The panic message.
        message: String,
    },
    /// The compiled code has relocations: it is not a self-contained leaf.
    #[error("relocations: `{function}` has {count} relocation(s); an arm must be a leaf")]
    Relocations {
        /// The function's name.
        function: String,
        /// How many relocations.
        count: usize,
    },
    /// The compiled code calls something: it is not a leaf.
    #[error("call-sites: `{function}` has {count} call site(s); an arm must be a leaf")]
    CallSites {
        /// The function's name.
        function: String,
        /// How many call sites.
        count: usize,
    },
    /// The code was compiled for another ISA and cannot run here.
    #[error("foreign-code: code for {code:?} cannot run on {host:?}")]
    ForeignCode {
        /// The code's architecture.
        code: Arch,
        /// The host's architecture.
        host: Option<Arch>,
    },
    /// weft-jitmem refused to place the bytes.
    #[error("place: {0}")]
    Place(String),
}

/// A Cranelift target plus the architecture it stands for.
pub struct Target {
    arch: Arch,
    host: bool,
    isa: OwnedTargetIsa,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("arch", &self.arch)
            .field("host", &self.host)
            .field("triple", &self.isa.triple().to_string())
            .finish()
    }
}

fn shared_flags() -> Result<settings::Flags, ManagedError> {
    let mut b = settings::builder();
    for (k, v) in [
        ("opt_level", "speed"),
        ("enable_verifier", "true"),
        ("is_pic", "false"),
    ] {
        b.set(k, v)
            .map_err(|e| ManagedError::Settings(format!("{k}={v}: {e}")))?;
    }
    Ok(settings::Flags::new(b))
}

impl Target {
    /// The host ISA with every feature the host has (cranelift-native).
    pub fn host() -> Result<Target, ManagedError> {
        let arch = Arch::host().ok_or(ManagedError::UnsupportedHost)?;
        let builder =
            cranelift_native::builder().map_err(|e| ManagedError::HostIsa(e.to_string()))?;
        let isa = builder
            .finish(shared_flags()?)
            .map_err(|e| ManagedError::Settings(e.to_string()))?;
        Ok(Target {
            arch,
            host: true,
            isa,
        })
    }

    /// `arch` with its baseline features, for inspection (cross-compiling);
    /// if `arch` is the host's, the code may still be placed and run.
    pub fn baseline(arch: Arch) -> Result<Target, ManagedError> {
        let triple = arch.triple_name();
        let builder = isa::lookup_by_name(triple).map_err(|e| ManagedError::IsaLookup {
            triple,
            message: e.to_string(),
        })?;
        let isa = builder
            .finish(shared_flags()?)
            .map_err(|e| ManagedError::Settings(e.to_string()))?;
        Ok(Target {
            arch,
            host: Arch::host() == Some(arch),
            isa,
        })
    }

    /// `arch` with its baseline features plus the boolean ISA settings
    /// `enable` (Cranelift's names, e.g. `has_dotprod`): what an arm
    /// compiles to on a host with those features, listed from any host.
    /// For inspection only: the code may need features this host lacks,
    /// so it is never marked as the host's.
    pub fn baseline_with(arch: Arch, enable: &[&str]) -> Result<Target, ManagedError> {
        let triple = arch.triple_name();
        let mut builder = isa::lookup_by_name(triple).map_err(|e| ManagedError::IsaLookup {
            triple,
            message: e.to_string(),
        })?;
        for flag in enable {
            builder
                .enable(flag)
                .map_err(|e| ManagedError::Settings(format!("{flag}: {e}")))?;
        }
        let isa = builder
            .finish(shared_flags()?)
            .map_err(|e| ManagedError::Settings(e.to_string()))?;
        Ok(Target {
            arch,
            host: false,
            isa,
        })
    }

    /// The architecture.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The Cranelift ISA (for types, calling convention, feature queries).
    pub fn isa(&self) -> &dyn TargetIsa {
        &*self.isa
    }

    /// The pointer type of the target.
    pub fn pointer_type(&self) -> ir::Type {
        self.isa.pointer_type()
    }

    /// The leaf-ABI signature: one pointer argument, no results, the
    /// target's default calling convention (`extern "C"`).
    pub fn leaf_signature(&self) -> Signature {
        let mut sig = Signature::new(self.isa.default_call_conv());
        sig.params.push(AbiParam::new(self.pointer_type()));
        sig
    }

    /// An empty leaf-ABI function named `name`, ready for a FunctionBuilder.
    pub fn leaf_function(&self, name: &str) -> Function {
        Function::with_name_signature(UserFuncName::testcase(name), self.leaf_signature())
    }

    /// The frontend configuration to pass to `FunctionBuilder::finalize`.
    pub fn frontend_config(&self) -> cranelift_codegen::isa::TargetFrontendConfig {
        self.isa.frontend_config()
    }

    /// Compile `func` and capture its bytes and listing. Contains panics.
    pub fn compile(&self, func: Function) -> Result<ArmCode, ManagedError> {
        let name = func.name.to_string();
        let isa = &*self.isa;
        let outcome = quietly(|| {
            let mut ctx = Context::for_function(func);
            let mut ctrl = ControlPlane::default();
            match ctx.compile(isa, &mut ctrl) {
                Ok(code) => {
                    let relocs = code.buffer.relocs().len();
                    let calls = code.buffer.call_sites().count();
                    Ok((code.code_buffer().to_vec(), relocs, calls))
                }
                Err(e) => Err(e.inner.to_string()),
            }
        });
        let (bytes, relocs, calls) = match outcome {
            Ok(Ok(v)) => v,
            Ok(Err(msg)) => return Err(ManagedError::Codegen(msg)),
            Err(message) => {
                return Err(ManagedError::CodegenPanicked {
                    function: name,
                    message,
                })
            }
        };
        if relocs > 0 {
            return Err(ManagedError::Relocations {
                function: name,
                count: relocs,
            });
        }
        if calls > 0 {
            return Err(ManagedError::CallSites {
                function: name,
                count: calls,
            });
        }
        let listing = listing_of(self.arch, &bytes);
        Ok(ArmCode {
            arch: self.arch,
            name,
            bytes,
            listing,
        })
    }
}

/// Compiled code of one arm: its architecture, bytes and listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArmCode {
    /// The architecture the bytes are for.
    pub arch: Arch,
    /// The CLIF function's name.
    pub name: String,
    /// The machine code, exactly as Cranelift emitted it (constant pool
    /// included, at the end).
    pub bytes: Vec<u8>,
    /// A disassembly ([`listing_of`]): x64 via weft-x64 (Intel syntax), arm64 via weft-a64
    /// (words it does not know as `.word`).
    pub listing: String,
}

impl ArmCode {
    /// Place the bytes in executable memory (host code only).
    pub fn place(&self) -> Result<PlacedArm, ManagedError> {
        let host = Arch::host();
        if host != Some(self.arch) {
            return Err(ManagedError::ForeignCode {
                code: self.arch,
                host,
            });
        }
        let placed =
            weft_jitmem::place(&self.bytes).map_err(|e| ManagedError::Place(e.to_string()))?;
        Ok(PlacedArm { placed })
    }
}

/// Placed, executable code of one arm. Freed when dropped.
pub struct PlacedArm {
    placed: weft_jitmem::PlacedCode,
}

impl std::fmt::Debug for PlacedArm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlacedArm")
            .field("entry", &self.entry())
            .finish()
    }
}

impl PlacedArm {
    /// The entry point. Calling it is `extern "C" fn(*const Args)` with the
    /// Args layout of the arm's contract.
    pub fn entry(&self) -> *const u8 {
        self.placed.as_ptr()
    }
}

/// The listing of `code`: one instruction a line as `offset  bytes  text`
/// (offset in hex, the instruction's bytes in memory order, then the
/// instruction) — the one format for arms and twins on both ISAs.
/// A body's constant pool (from [`NativeCode::pool`](weft_kernel::NativeCode::pool)
/// on) is shown as `.word`s marked `pool`, never decoded as instructions.
pub fn listing(code: &weft_kernel::NativeCode) -> String {
    let arch = match code.isa {
        weft_kernel::Isa::X86_64 => Arch::X86_64,
        weft_kernel::Isa::Aarch64 => Arch::Aarch64,
        weft_kernel::Isa::Other => return String::new(),
    };
    let pool = code.pool.unwrap_or(code.bytes.len()).min(code.bytes.len());
    let mut out = listing_of(arch, &code.bytes[..pool]);
    for (i, w) in code.bytes[pool..].chunks(4).enumerate() {
        let text = format!(".word {:#010x} // pool", word_of(w));
        listing_line(&mut out, pool + 4 * i, w, &text);
    }
    out
}

/// One listing line: offset, the bytes in memory order, the text.
fn listing_line(out: &mut String, offset: usize, raw: &[u8], text: &str) {
    let hex: Vec<String> = raw.iter().map(|b| format!("{b:02x}")).collect();
    let _ = writeln!(out, "{offset:06x}  {:<32} {text}", hex.join(" "));
}

/// Up to four bytes as a little-endian word (a short tail zero-extended).
fn word_of(w: &[u8]) -> u32 {
    let mut word = [0u8; 4];
    word[..w.len()].copy_from_slice(w);
    u32::from_le_bytes(word)
}

/// [`listing`] of raw `bytes` for `arch`, all taken as instructions.
pub fn listing_of(arch: Arch, bytes: &[u8]) -> String {
    let mut out = String::new();
    match arch {
        Arch::X86_64 => {
            // weft-x64 decodes (Intel syntax, resynchronising after a bad
            // byte); the line format is this function's.
            for l in weft_x64::Listing::decode(bytes).lines {
                listing_line(&mut out, l.offset, &l.bytes, &l.text);
            }
        }
        Arch::Aarch64 => {
            // weft-a64 decodes the forms it knows; others (and Cranelift's
            // constant pool) stay as `.word`.
            for (i, w) in bytes.chunks(4).enumerate() {
                let word = word_of(w);
                let text = weft_a64::decode(word)
                    .map_or_else(|| format!(".word {word:#010x}"), |inst| inst.to_string());
                listing_line(&mut out, i * 4, w, &text);
            }
        }
    }
    out
}

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// Run `f`, containing a panic: the panic message is returned as `Err` and
/// nothing is printed for it. Other threads' panics print as before (the
/// installed hook is quiet only on a thread inside `quietly`).
fn quietly<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if QUIET.with(Cell::get) {
                let msg = if let Some(s) = info.payload().downcast_ref::<&str>() {
                    (*s).to_string()
                } else if let Some(s) = info.payload().downcast_ref::<String>() {
                    s.clone()
                } else {
                    "non-string panic payload".to_string()
                };
                let loc = info
                    .location()
                    .map(|l| format!(" at {}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{msg}{loc}")));
            } else {
                previous(info);
            }
        }));
    });
    let was = QUIET.with(|q| q.replace(true));
    let r = panic::catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was));
    r.map_err(|_| {
        LAST_PANIC
            .with(|p| p.borrow_mut().take())
            .unwrap_or_else(|| "panic".to_string())
    })
}

#[cfg(test)]
mod tests;
