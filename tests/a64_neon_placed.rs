//! The real arm64 path, end to end: NEON kernels emitted by weft-a64, placed
//! through weft-jitmem (W^X, with the arm64 cache maintenance), called
//! through `weft_kernel::Kernel<A>` with a `#[repr(C)]` argument struct, and
//! checked against Rust.
//!
//! AArch64 only (empty elsewhere). On x86 machines it runs under
//! qemu-user: `cargo test -p weft-tests --target aarch64-unknown-linux-gnu
//! --test a64_neon_placed`.
#![cfg(target_arch = "aarch64")]

#[path = "support/a64_kernels.rs"]
mod a64_kernels;

use a64_kernels::{inputs, same};

use std::sync::Arc;

use weft_kernel::{Isa, Kernel, NativeCode};

/// The argument struct of the binary kernels in `a64_kernels`:
/// `out[i] = op(a[i], b[i], c[i])` for `i < len`. Pointers need no
/// alignment.
#[repr(C)]
struct TernaryArgs {
    a: *const u8,
    b: *const u8,
    c: *const u8,
    out: *mut u8,
    len: usize,
}

/// A byte buffer holding `n` f32 values starting `skew` bytes in, with
/// guard bytes on both sides.
struct Buf {
    bytes: Vec<u8>,
    skew: usize,
    n: usize,
}

const GUARD: usize = 32;
const GUARD_BYTE: u8 = 0xa5;

impl Buf {
    fn new(vals: &[f32], skew: usize) -> Buf {
        let mut bytes = vec![GUARD_BYTE; GUARD + skew + 4 * vals.len() + GUARD];
        for (i, v) in vals.iter().enumerate() {
            let at = GUARD + skew + 4 * i;
            bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        Buf {
            bytes,
            skew,
            n: vals.len(),
        }
    }

    fn start(&self) -> usize {
        GUARD + self.skew
    }

    fn ptr(&self) -> *const u8 {
        self.bytes[self.start()..].as_ptr()
    }

    fn mut_ptr(&mut self) -> *mut u8 {
        let s = self.start();
        self.bytes[s..].as_mut_ptr()
    }

    fn get(&self, i: usize) -> f32 {
        let at = self.start() + 4 * i;
        f32::from_le_bytes(self.bytes[at..at + 4].try_into().unwrap())
    }

    fn guards_intact(&self) -> bool {
        let end = self.start() + 4 * self.n;
        self.bytes[..self.start()]
            .iter()
            .chain(&self.bytes[end..])
            .all(|&b| b == GUARD_BYTE)
    }
}

/// Place `bytes` and wrap them as a `Kernel<TernaryArgs>`.
fn place(bytes: Vec<u8>) -> Kernel<TernaryArgs> {
    let code = NativeCode {
        isa: Isa::Aarch64,
        bytes,
        pool: None,
        loops: Vec::new(),
    };
    let placed = code.place().unwrap_or_else(|e| panic!("{}: {e}", e.name()));
    // SAFETY: every kernel in `a64_kernels` is a leaf-ABI function for
    // `TernaryArgs`: it reads `len` f32 from `a`, `b`, `c`, writes `len` f32
    // to `out`, touches nothing else and returns (the ELF tests check the
    // same bytes for callee-saved registers, sp and stray stores).
    unsafe { Kernel::from_placed(placed, 0) }.expect("entry 0 is inside the code")
}

/// Call `k` on `a`, `b`, `c` into `out` (which it fills). The lengths must agree.
fn call(k: &Kernel<TernaryArgs>, a: &Buf, b: &Buf, c: &Buf, out: &mut Buf) {
    assert!(a.n == out.n && b.n == out.n && c.n == out.n);
    let args = TernaryArgs {
        a: a.ptr(),
        b: b.ptr(),
        c: c.ptr(),
        out: out.mut_ptr(),
        len: out.n,
    };
    // SAFETY: the four buffers hold `len` f32s each (asserted) and outlive the call.
    unsafe { k.call(&args) };
}

/// What a kernel is compared with.
type Reference = fn(f32, f32, f32) -> f32;

/// Run `k` on `n` elements with the given byte skews and compare with `want`.
fn check(k: &Kernel<TernaryArgs>, n: usize, skews: [usize; 4], want: Reference) {
    let (va, vb, vc) = (
        inputs(n, 3 + n as u64),
        inputs(n, 50 + n as u64),
        inputs(n, 90 + n as u64),
    );
    let (a, b, c) = (
        Buf::new(&va, skews[0]),
        Buf::new(&vb, skews[1]),
        Buf::new(&vc, skews[2]),
    );
    let mut out = Buf::new(&vec![f32::from_bits(0x7fc0_dead); n], skews[3]);
    call(k, &a, &b, &c, &mut out);
    for i in 0..n {
        let w = want(va[i], vb[i], vc[i]);
        assert!(
            same(out.get(i), w),
            "len {n}, skews {skews:?}, index {i}: want {w:e} ({:#010x}), got {:e} ({:#010x})",
            w.to_bits(),
            out.get(i),
            out.get(i).to_bits()
        );
    }
    assert!(
        out.guards_intact(),
        "len {n}, skews {skews:?}: a store outside out"
    );
    assert!(a.guards_intact() && b.guards_intact() && c.guards_intact());
}

fn fma(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}

fn add(a: f32, b: f32, _c: f32) -> f32 {
    a + b
}

#[test]
fn placed_fmla_kernel_matches_rust_mul_add_for_lengths_0_to_33_at_every_start_alignment() {
    let k = place(a64_kernels::fma_kernel());
    for n in 0..=33 {
        // Byte offsets 0..16 cover every position relative to a 16-byte
        // vector, word-aligned or not; each array gets a different one.
        for s in 0..16 {
            check(&k, n, [s, (s + 5) % 16, (s + 10) % 16, (s + 3) % 16], fma);
        }
    }
}

#[test]
fn placed_add_kernel_matches_rust_addition_for_lengths_0_to_33() {
    let k = place(a64_kernels::add_kernel());
    for n in 0..=33 {
        check(&k, n, [4 * (n % 4), 1, 2, 3], add);
    }
}

#[test]
fn replacing_dropped_code_runs_the_new_code_not_stale_instructions() {
    // Place, call, drop, place different code of the same size (the
    // allocator tends to hand back the same pages), call: each call must run
    // what was placed last. Under qemu this exercises the cache-maintenance
    // path of weft-jitmem and qemu's own translation-cache invalidation.
    let (fma_bytes, add_bytes) = (a64_kernels::fma_kernel(), a64_kernels::add_kernel());
    assert_eq!(
        fma_bytes.len(),
        add_bytes.len(),
        "same size, so a reused address is likely"
    );
    assert_ne!(fma_bytes, add_bytes);
    let mut same_address = 0;
    let mut last: Option<usize> = None;
    for round in 0..24 {
        let (bytes, want): (&Vec<u8>, Reference) = if round % 2 == 0 {
            (&fma_bytes, fma)
        } else {
            (&add_bytes, add)
        };
        let k = place(bytes.clone());
        let addr = k.code().as_ptr() as usize;
        same_address += usize::from(last == Some(addr));
        last = Some(addr);
        check(&k, 9 + round, [0, 4, 8, 12], want);
        drop(k);
    }
    eprintln!("re-placed code landed on the previous address {same_address} times of 23");
}

#[test]
fn one_placed_kernel_called_from_four_threads_gives_the_same_results() {
    let k = Arc::new(place(a64_kernels::fma_kernel()));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let k = Arc::clone(&k);
            std::thread::spawn(move || {
                for n in (t..40).step_by(4) {
                    check(&k, n, [4, 8, 12, 0], fma);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("no thread panicked");
    }
}
