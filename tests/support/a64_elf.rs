//! Run emitted AArch64 bytes on any host: wrap them in a tiny static AArch64
//! ELF and run it under `qemu-aarch64 -cpu max` (the fast route of
//! DESIGN.md, "Testing arm64 on x86 machines").
//!
//! The image is two `PT_LOAD` segments and nothing is both writable and
//! executable:
//!
//! ```text
//! code  R+X  vaddr 0x40_0000: ELF header, program headers, at 0x100 the
//!            fixed entry stub (STUB, constant words written by hand, NOT by
//!            weft-a64), two literals (data address, kernel address), then the
//!            kernel bytes at 0x1c0
//! data  R+W  at the next 64 KiB boundary: a header the stub reads and writes
//!            (DATA_* offsets below), the kernel's argument struct at
//!            ARGS_OFFSET, then the regions a test placed (inputs, outputs),
//!            each between guard bytes
//! ```
//!
//! The stub loads canaries into every callee-saved register (x20–x29,
//! d8–d15), records `sp`, calls the kernel with `x0` = the argument struct
//! (`blr`), stores the callee-saved registers and `sp` again, writes the whole
//! data segment to stdout with `write(2)` and exits 0. [`Image::run`] reads
//! the segment back and refuses the run when the kernel broke AAPCS64
//! (callee-saved registers, `sp`), wrote outside its output regions, changed
//! an input, or did not come back (signal, timeout).

// Each test binary uses the part of this helper it needs.
#![allow(dead_code)]

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Virtual address the code segment is loaded at.
const BASE: u64 = 0x40_0000;
/// Alignment of both segments in the file and in memory (64 KiB pages are
/// the largest an AArch64 Linux kernel uses).
const SEGMENT_ALIGN: usize = 0x1_0000;
/// File offset (and offset from [`BASE`]) of the stub, which is the entry.
const STUB_OFFSET: usize = 0x100;
/// Offset of the kernel's first instruction: after the stub and its two
/// literals.
pub const KERNEL_OFFSET: usize = STUB_OFFSET + STUB.len() * 4 + 16;

/// The entry stub, as constant words (checked once against llvm-mc 14,
/// `llvm-mc -triple=aarch64 -filetype=obj`; each comment is the source line).
/// Register use: x19 = data segment base (callee-saved, so it survives the
/// call), x16 = kernel address, x9 scratch, x0–x2 and x8 for the syscalls.
const STUB: [u32; 44] = [
    0x5800_0593, // 0x00 ldr  x19, lit_data          ; pc-relative, +0xb0
    0x5800_05b0, // 0x04 ldr  x16, lit_kernel        ; pc-relative, +0xb4 -> 0xb8
    0xa941_5674, // 0x08 ldp  x20, x21, [x19, #16]   ; canaries in
    0xa942_5e76, // 0x0c ldp  x22, x23, [x19, #32]
    0xa943_6678, // 0x10 ldp  x24, x25, [x19, #48]
    0xa944_6e7a, // 0x14 ldp  x26, x27, [x19, #64]
    0xa945_767c, // 0x18 ldp  x28, x29, [x19, #80]
    0x6d46_2668, // 0x1c ldp  d8, d9, [x19, #96]
    0x6d47_2e6a, // 0x20 ldp  d10, d11, [x19, #112]
    0x6d48_366c, // 0x24 ldp  d12, d13, [x19, #128]
    0x6d49_3e6e, // 0x28 ldp  d14, d15, [x19, #144]
    0x9100_03e9, // 0x2c mov  x9, sp
    0xf900_a669, // 0x30 str  x9, [x19, #328]        ; sp before the call
    0x9108_0260, // 0x34 add  x0, x19, #512          ; x0 = &args
    0xd63f_0200, // 0x38 blr  x16                    ; the kernel
    0xa90a_5273, // 0x3c stp  x19, x20, [x19, #160]  ; callee-saved out
    0xa90b_5a75, // 0x40 stp  x21, x22, [x19, #176]
    0xa90c_6277, // 0x44 stp  x23, x24, [x19, #192]
    0xa90d_6a79, // 0x48 stp  x25, x26, [x19, #208]
    0xa90e_727b, // 0x4c stp  x27, x28, [x19, #224]
    0xf900_7a7d, // 0x50 str  x29, [x19, #240]
    0x6d10_2668, // 0x54 stp  d8, d9, [x19, #256]
    0x6d11_2e6a, // 0x58 stp  d10, d11, [x19, #272]
    0x6d12_366c, // 0x5c stp  d12, d13, [x19, #288]
    0x6d13_3e6e, // 0x60 stp  d14, d15, [x19, #304]
    0x9100_03e9, // 0x64 mov  x9, sp
    0xf900_a269, // 0x68 str  x9, [x19, #320]        ; sp after the call
    0xf940_0261, // 0x6c ldr  x1, [x19]              ; write buffer
    0xf940_0662, // 0x70 ldr  x2, [x19, #8]          ; bytes left
    0xb400_0122, // 0x74 wl: cbz x2, done            ; -> 0x98
    0xd280_0020, // 0x78 mov  x0, #1                 ; stdout
    0xd280_0808, // 0x7c mov  x8, #64                ; __NR_write
    0xd400_0001, // 0x80 svc  #0
    0xf100_001f, // 0x84 cmp  x0, #0
    0x5400_00ed, // 0x88 b.le fail                   ; -> 0xa4
    0x8b00_0021, // 0x8c add  x1, x1, x0
    0xcb00_0042, // 0x90 sub  x2, x2, x0
    0x17ff_fff8, // 0x94 b    wl                     ; -> 0x74
    0xd280_0000, // 0x98 done: mov x0, #0
    0xd280_0ba8, // 0x9c mov  x8, #93                ; __NR_exit
    0xd400_0001, // 0xa0 svc  #0
    0xd280_0060, // 0xa4 fail: mov x0, #3            ; exit status 3: write failed
    0xd280_0ba8, // 0xa8 mov  x8, #93
    0xd400_0001, // 0xac svc  #0
];
// 0xb0 lit_data: u64, 0xb8 lit_kernel: u64 (written by `Image::elf`).

/// Data-segment header, as the stub reads and writes it.
const DATA_WRITE_ADDR: usize = 0; // u64: what the stub writes to stdout ...
const DATA_WRITE_LEN: usize = 8; // u64: ... and how many bytes
const DATA_CANARY_X: usize = 16; // x20..=x29 loaded before the call
const DATA_CANARY_D: usize = 96; // d8..=d15 loaded before the call
const DATA_AFTER_X: usize = 160; // x19..=x29 stored after the call
const DATA_AFTER_D: usize = 256; // d8..=d15 stored after the call
const DATA_SP_AFTER: usize = 320;
const DATA_SP_BEFORE: usize = 328;
/// Offset of the kernel's argument struct in the data segment (`x0`).
pub const ARGS_OFFSET: usize = 512;
/// Room for the argument struct; regions start after it.
pub const ARGS_MAX: usize = 512;
/// Guard bytes before and after every region.
const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xa5;

/// Per-call time bound for qemu.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(20);

/// Where a test placed bytes in the data segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// The guest address of the first byte (what goes in the argument struct).
    pub addr: u64,
    offset: usize,
    len: usize,
    input: bool,
}

impl Region {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Why a run gave no trustworthy output.
#[derive(Debug)]
pub enum RunError {
    /// qemu could not be started.
    Spawn(String),
    /// The process did not finish within the time bound and was killed.
    Timeout(Duration),
    /// The process ended other than by `exit(0)` (a fault in the kernel shows
    /// up as a signal here).
    Failed {
        /// The exit status, rendered.
        status: String,
        /// What qemu said.
        stderr: String,
    },
    /// stdout did not carry exactly the data segment.
    ShortOutput {
        /// Bytes expected.
        expected: usize,
        /// Bytes read.
        got: usize,
    },
    /// A callee-saved register or `sp` differed after the call.
    CalleeSaved {
        /// The register's name.
        register: String,
        /// Its value before the call.
        before: u64,
        /// Its value after.
        after: u64,
    },
    /// The kernel wrote a guard byte or an input region.
    WroteOutside {
        /// Data-segment offset of the first changed byte.
        offset: usize,
        /// What it was.
        what: &'static str,
    },
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Spawn(e) => write!(f, "spawn: {e}"),
            RunError::Timeout(t) => write!(f, "timeout: killed after {t:?}"),
            RunError::Failed { status, stderr } => write!(f, "failed: {status}; stderr: {stderr}"),
            RunError::ShortOutput { expected, got } => {
                write!(f, "short-output: {got} of {expected} bytes")
            }
            RunError::CalleeSaved {
                register,
                before,
                after,
            } => write!(
                f,
                "callee-saved: {register} was {before:#018x}, is {after:#018x} after the call"
            ),
            RunError::WroteOutside { offset, what } => {
                write!(
                    f,
                    "wrote-outside: {what} changed at data offset {offset:#x}"
                )
            }
        }
    }
}

/// How to run a static AArch64 ELF on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Runner {
    /// Under qemu-user at this path, `-cpu max`.
    Qemu(PathBuf),
    /// Directly (this is an AArch64 Linux host without qemu-user).
    Native,
}

/// The message a test fails with when no runner exists.
pub const MISSING_QEMU: &str = "qemu-aarch64 not found on PATH: the emitted-bytes tests \
     need it. Install it (Debian/Ubuntu: `apt-get install qemu-user`); without it \
     `cargo test` reports these tests as ignored, and only `--include-ignored` runs them.";

/// Pick a runner from a `PATH` value: qemu-aarch64 when `PATH` has it,
/// native execution on an AArch64 Linux host, and otherwise an error saying
/// what to install. Pure, so the rule itself is testable.
pub fn choose_runner(path: Option<&str>) -> Result<Runner, String> {
    let found = path.and_then(|p| {
        std::env::split_paths(p)
            .map(|dir| dir.join("qemu-aarch64"))
            .find(|exe| is_executable(exe))
    });
    if let Some(exe) = found {
        return Ok(Runner::Qemu(exe));
    }
    if cfg!(all(target_arch = "aarch64", target_os = "linux")) {
        return Ok(Runner::Native);
    }
    Err(MISSING_QEMU.to_owned())
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The runner for this process's environment; panics with [`MISSING_QEMU`]
/// when there is none (the tests that call it are ignored by default off
/// AArch64 Linux, so this fires only when they were asked for).
pub fn runner() -> Runner {
    let path = std::env::var("PATH").ok();
    choose_runner(path.as_deref()).unwrap_or_else(|msg| panic!("{msg}"))
}

/// A kernel and its data segment, ready to be written as an ELF and run.
#[derive(Clone, Debug)]
pub struct Image {
    kernel: Vec<u8>,
    data: Vec<u8>,
    data_base: u64,
    regions: Vec<Region>,
}

fn align_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// The callee-saved canaries: distinct, and none of them a plausible result.
fn canary(i: usize) -> u64 {
    0xc0de_0000_0000_0000 | ((i as u64) << 32) | 0x5a5a_5a5a
}

impl Image {
    /// An image running `kernel` (the bytes of one leaf-ABI function).
    pub fn new(kernel: &[u8]) -> Self {
        assert!(kernel.len().is_multiple_of(4), "A64 code is whole words");
        let code_end = KERNEL_OFFSET + kernel.len();
        let data_offset = align_up(code_end, SEGMENT_ALIGN);
        let mut data = vec![0u8; ARGS_OFFSET + ARGS_MAX];
        for i in 0..10 {
            put_u64(&mut data, DATA_CANARY_X + 8 * i, canary(i));
        }
        for i in 0..8 {
            put_u64(&mut data, DATA_CANARY_D + 8 * i, canary(10 + i));
        }
        Image {
            kernel: kernel.to_vec(),
            data,
            data_base: BASE + data_offset as u64,
            regions: Vec::new(),
        }
    }

    /// The guest address of the argument struct.
    pub fn args_addr(&self) -> u64 {
        self.data_base + ARGS_OFFSET as u64
    }

    /// Set the argument struct's bytes (a `#[repr(C)]` struct of 64-bit
    /// fields, given as words).
    pub fn set_args(&mut self, words: &[u64]) {
        assert!(words.len() * 8 <= ARGS_MAX);
        for (i, w) in words.iter().enumerate() {
            put_u64(&mut self.data, ARGS_OFFSET + 8 * i, *w);
        }
    }

    fn place(&mut self, bytes: &[u8], skew: usize, input: bool) -> Region {
        let start = align_up(self.data.len() + GUARD, 64) + skew;
        self.data.resize(start - GUARD, 0);
        self.data.resize(start, GUARD_BYTE);
        self.data.extend_from_slice(bytes);
        self.data.resize(start + bytes.len() + GUARD, GUARD_BYTE);
        let r = Region {
            addr: self.data_base + start as u64,
            offset: start,
            len: bytes.len(),
            input,
        };
        self.regions.push(r);
        r
    }

    /// Place an input the kernel must only read, starting `skew` bytes past
    /// a 64-byte boundary.
    pub fn input(&mut self, bytes: &[u8], skew: usize) -> Region {
        self.place(bytes, skew, true)
    }

    /// Place f32 inputs, `skew` bytes past a 64-byte boundary.
    pub fn input_f32(&mut self, vals: &[f32], skew: usize) -> Region {
        self.input(&f32_bytes(vals), skew)
    }

    /// Reserve an output of `len` bytes, each set to `fill` before the run.
    pub fn output(&mut self, len: usize, fill: u8, skew: usize) -> Region {
        self.place(&vec![fill; len], skew, false)
    }

    /// The ELF file's bytes.
    pub fn elf(&self) -> Vec<u8> {
        let code_end = KERNEL_OFFSET + self.kernel.len();
        let data_offset = (self.data_base - BASE) as usize;
        let mut f = vec![0u8; data_offset + self.data.len()];
        // ELF64 header.
        f[0..4].copy_from_slice(b"\x7fELF");
        f[4] = 2; // ELFCLASS64
        f[5] = 1; // ELFDATA2LSB
        f[6] = 1; // EV_CURRENT
        put_u16(&mut f, 16, 2); // e_type = ET_EXEC
        put_u16(&mut f, 18, 183); // e_machine = EM_AARCH64
        put_u32(&mut f, 20, 1); // e_version
        put_u64(&mut f, 24, BASE + STUB_OFFSET as u64); // e_entry
        put_u64(&mut f, 32, 64); // e_phoff
        put_u64(&mut f, 40, 0); // e_shoff: no sections
        put_u32(&mut f, 48, 0); // e_flags
        put_u16(&mut f, 52, 64); // e_ehsize
        put_u16(&mut f, 54, 56); // e_phentsize
        put_u16(&mut f, 56, 3); // e_phnum
        put_u16(&mut f, 58, 64); // e_shentsize
                                 // Program headers: code R+X, data R+W, stack R+W (not executable).
        const PT_LOAD: u32 = 1;
        const PT_GNU_STACK: u32 = 0x6474_e551;
        const PF_X: u32 = 1;
        const PF_W: u32 = 2;
        const PF_R: u32 = 4;
        let phdrs = [
            (PT_LOAD, PF_R | PF_X, 0, BASE, code_end, SEGMENT_ALIGN),
            (
                PT_LOAD,
                PF_R | PF_W,
                data_offset,
                self.data_base,
                self.data.len(),
                SEGMENT_ALIGN,
            ),
            (PT_GNU_STACK, PF_R | PF_W, 0, 0, 0, 16),
        ];
        for (i, (ty, flags, off, vaddr, size, align)) in phdrs.into_iter().enumerate() {
            let p = 64 + 56 * i;
            put_u32(&mut f, p, ty);
            put_u32(&mut f, p + 4, flags);
            put_u64(&mut f, p + 8, off as u64);
            put_u64(&mut f, p + 16, vaddr);
            put_u64(&mut f, p + 24, vaddr); // p_paddr
            put_u64(&mut f, p + 32, size as u64); // p_filesz
            put_u64(&mut f, p + 40, size as u64); // p_memsz
            put_u64(&mut f, p + 48, align as u64);
        }
        for (i, w) in STUB.iter().enumerate() {
            put_u32(&mut f, STUB_OFFSET + 4 * i, *w);
        }
        let lit = STUB_OFFSET + STUB.len() * 4;
        put_u64(&mut f, lit, self.data_base);
        put_u64(&mut f, lit + 8, BASE + KERNEL_OFFSET as u64);
        f[KERNEL_OFFSET..code_end].copy_from_slice(&self.kernel);
        // The data segment, with the write header filled in.
        let mut data = self.data.clone();
        put_u64(&mut data, DATA_WRITE_ADDR, self.data_base);
        let len = data.len() as u64;
        put_u64(&mut data, DATA_WRITE_LEN, len);
        f[data_offset..].copy_from_slice(&data);
        f
    }

    /// Run the image with the time bound [`DEFAULT_TIMEOUT`].
    pub fn run(&self, runner: &Runner) -> Result<Outcome, RunError> {
        self.run_with_timeout(runner, DEFAULT_TIMEOUT)
    }

    /// Run the image, killing it after `timeout`; check the ABI and the
    /// guards, and return the data segment as the kernel left it.
    pub fn run_with_timeout(
        &self,
        runner: &Runner,
        timeout: Duration,
    ) -> Result<Outcome, RunError> {
        let path = write_temp_elf(&self.elf()).map_err(|e| RunError::Spawn(e.to_string()))?;
        let result = run_elf(runner, &path, timeout);
        let _ = std::fs::remove_file(&path);
        let out = result?;
        if out.len() != self.data.len() {
            return Err(RunError::ShortOutput {
                expected: self.data.len(),
                got: out.len(),
            });
        }
        self.check(&out)?;
        Ok(Outcome { data: out })
    }

    fn check(&self, out: &[u8]) -> Result<(), RunError> {
        let x_names = (19..=29).map(|i| format!("x{i}"));
        let x_before = std::iter::once(self.data_base).chain((0..10).map(canary));
        for (i, (name, before)) in x_names.zip(x_before).enumerate() {
            let after = get_u64(out, DATA_AFTER_X + 8 * i);
            if after != before {
                return Err(RunError::CalleeSaved {
                    register: name,
                    before,
                    after,
                });
            }
        }
        for i in 0..8 {
            let (before, after) = (canary(10 + i), get_u64(out, DATA_AFTER_D + 8 * i));
            if after != before {
                return Err(RunError::CalleeSaved {
                    register: format!("d{}", 8 + i),
                    before,
                    after,
                });
            }
        }
        let (before, after) = (get_u64(out, DATA_SP_BEFORE), get_u64(out, DATA_SP_AFTER));
        if before != after {
            return Err(RunError::CalleeSaved {
                register: "sp".into(),
                before,
                after,
            });
        }
        let first_diff =
            |range: std::ops::Range<usize>| range.clone().find(|&o| out[o] != self.data[o]);
        if let Some(offset) = first_diff(ARGS_OFFSET..ARGS_OFFSET + ARGS_MAX) {
            return Err(RunError::WroteOutside {
                offset,
                what: "argument struct",
            });
        }
        for r in &self.regions {
            let guards = [
                (r.offset - GUARD)..r.offset,
                (r.offset + r.len)..(r.offset + r.len + GUARD),
            ];
            for g in guards {
                if let Some(offset) = first_diff(g) {
                    return Err(RunError::WroteOutside {
                        offset,
                        what: "guard",
                    });
                }
            }
            if r.input {
                if let Some(offset) = first_diff(r.offset..r.offset + r.len) {
                    return Err(RunError::WroteOutside {
                        offset,
                        what: "input",
                    });
                }
            }
        }
        Ok(())
    }
}

/// The data segment after a successful run.
#[derive(Clone, Debug)]
pub struct Outcome {
    data: Vec<u8>,
}

impl Outcome {
    /// The bytes of `r` as the kernel left them.
    pub fn bytes(&self, r: Region) -> &[u8] {
        &self.data[r.offset..r.offset + r.len]
    }

    /// The bytes of `r` as f32 values.
    pub fn f32s(&self, r: Region) -> Vec<f32> {
        self.bytes(r)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
}

/// f32 values as little-endian bytes.
pub fn f32_bytes(vals: &[f32]) -> Vec<u8> {
    vals.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A64 instruction words as little-endian bytes.
pub fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn write_temp_elf(elf: &[u8]) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("weft-a64-{}-{n}.elf", std::process::id()));
    std::fs::write(&path, elf)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

/// Run `elf` with core dumps off (`ulimit -c 0`: qemu's are huge), collect
/// stdout, kill it after `timeout`.
fn run_elf(runner: &Runner, elf: &Path, timeout: Duration) -> Result<Vec<u8>, RunError> {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c");
    match runner {
        Runner::Qemu(qemu) => {
            cmd.arg(r#"ulimit -c 0 && exec "$0" -cpu max "$1""#)
                .arg(qemu)
                .arg(elf);
        }
        Runner::Native => {
            cmd.arg(r#"ulimit -c 0 && exec "$0""#).arg(elf);
        }
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| RunError::Spawn(format!("{runner:?}: {e}")))?;
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(RunError::Timeout(timeout));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(RunError::Spawn(format!("wait: {e}"))),
        }
    };
    let out = out_reader.join().unwrap_or_default();
    let err = err_reader.join().unwrap_or_default();
    if !status.success() {
        return Err(RunError::Failed {
            status: status.to_string(),
            stderr: err,
        });
    }
    Ok(out)
}
