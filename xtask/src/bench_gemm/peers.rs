//! The peers of `bench gemm`: three sgemm libraries behind one safe call,
//! `C ← A·B` with A `m × k`, B `k × n` and C `m × n`, all row-major and
//! dense, at 1 or 2 threads.
//!
//! - [`Peer::Gemm`]: the `gemm` crate (`gemm::gemm`), `Parallelism::None`
//!   or `Parallelism::Rayon(2)` on rayon's global pool.
//! - [`Peer::MatrixMultiply`]: `matrixmultiply::sgemm`, one thread only:
//!   its `threading` feature fixes the thread count for the whole process
//!   at the first call (`MATMUL_NUM_THREADS`), so it cannot run at 1 and 2
//!   threads in the same rounds; it is built without that feature.
//! - [`Peer::OpenBlas`]: `cblas_sgemm` of the system's OpenBLAS
//!   (`libopenblas.so.0`, Debian's `libopenblas0`, pulled in by
//!   `libopenblas-dev`), opened at run time with `dlopen`, so a machine
//!   without it still builds and runs xtask (the peer is then absent).
//!   Its thread count is set with `openblas_set_num_threads` before every
//!   call.
//!
//! Every peer reads B in rows and packs it itself inside each call, as
//! its API does; Weft's packing arms read B packed once at plan time.

use std::sync::OnceLock;

/// A peer library.
#[derive(Clone, Copy, Debug)]
pub enum Peer {
    /// The `gemm` crate.
    Gemm,
    /// `matrixmultiply::sgemm` (one thread).
    MatrixMultiply,
    /// The system's OpenBLAS, opened at run time.
    OpenBlas(&'static OpenBlas),
}

impl Peer {
    /// The peer's name in the tables.
    pub fn name(&self) -> &'static str {
        match self {
            Peer::Gemm => "peer gemm (crate)",
            Peer::MatrixMultiply => "peer matrixmultiply",
            Peer::OpenBlas(_) => "peer OpenBLAS",
        }
    }

    /// Whether the peer can run on `threads` threads.
    pub fn runs_on(&self, threads: u64) -> bool {
        match self {
            Peer::MatrixMultiply => threads == 1,
            Peer::Gemm | Peer::OpenBlas(_) => threads == 1 || threads == 2,
        }
    }

    /// Every peer this machine has: the two crates, and OpenBLAS when
    /// `libopenblas.so.0` opens (else why not, as the second value).
    pub fn all() -> (Vec<Peer>, Option<String>) {
        let mut v = vec![Peer::Gemm, Peer::MatrixMultiply];
        match openblas() {
            Ok(o) => {
                v.push(Peer::OpenBlas(o));
                (v, None)
            }
            Err(e) => (v, Some(e)),
        }
    }

    /// `c ← a·b` (`m × k` by `k × n`, row-major, dense) on `threads`
    /// threads. Refused when a buffer is too short or the peer does not
    /// run on that many threads.
    #[allow(clippy::too_many_arguments)]
    pub fn sgemm(
        &self,
        threads: u64,
        (m, n, k): (usize, usize, usize),
        a: &[f32],
        b: &[f32],
        c: &mut [f32],
    ) -> Result<(), String> {
        if a.len() < m * k || b.len() < k * n || c.len() < m * n {
            return Err(format!(
                "{}: buffers of {}, {}, {} elements for {m} × {n} × {k}",
                self.name(),
                a.len(),
                b.len(),
                c.len()
            ));
        }
        if !self.runs_on(threads) {
            return Err(format!("{} does not run on {threads} threads", self.name()));
        }
        let int = |v: usize| isize::try_from(v).map_err(|e| e.to_string());
        let (mi, ni, ki) = (int(m)?, int(n)?, int(k)?);
        match self {
            Peer::Gemm => {
                let par = if threads == 1 {
                    gemm::Parallelism::None
                } else {
                    gemm::Parallelism::Rayon(2)
                };
                // SAFETY: A, B and C hold m·k, k·n and m·n elements
                // (checked above), the strides describe dense row-major
                // matrices inside them, C is a distinct `&mut`, and
                // `read_dst = false` means C is only written.
                unsafe {
                    gemm::gemm(
                        m,
                        n,
                        k,
                        c.as_mut_ptr(),
                        1,
                        ni,
                        false,
                        a.as_ptr(),
                        1,
                        ki,
                        b.as_ptr(),
                        1,
                        ni,
                        0.0f32,
                        1.0f32,
                        false,
                        false,
                        false,
                        par,
                    )
                }
            }
            Peer::MatrixMultiply => {
                // SAFETY: as for `gemm` above: extents checked, row-major
                // strides inside the buffers, β = 0 so C is not read.
                unsafe {
                    matrixmultiply::sgemm(
                        m,
                        k,
                        n,
                        1.0,
                        a.as_ptr(),
                        ki,
                        1,
                        b.as_ptr(),
                        ni,
                        1,
                        0.0,
                        c.as_mut_ptr(),
                        ni,
                        1,
                    )
                }
            }
            Peer::OpenBlas(o) => {
                let t = i32::try_from(threads).map_err(|e| e.to_string())?;
                let blas_int = |v: isize| i32::try_from(v).map_err(|e| e.to_string());
                let (m, n, k) = (blas_int(mi)?, blas_int(ni)?, blas_int(ki)?);
                // SAFETY: the symbols have the C signatures of OpenBLAS's
                // cblas.h (`openblas()` looked them up by those names);
                // the extents were checked above, lda = k, ldb = n and
                // ldc = n describe dense row-major matrices inside the
                // buffers, and β = 0 means C is only written.
                unsafe {
                    (o.set_num_threads)(t);
                    (o.sgemm)(
                        CBLAS_ROW_MAJOR,
                        CBLAS_NO_TRANS,
                        CBLAS_NO_TRANS,
                        m,
                        n,
                        k,
                        1.0,
                        a.as_ptr(),
                        k,
                        b.as_ptr(),
                        n,
                        0.0,
                        c.as_mut_ptr(),
                        n,
                    )
                }
            }
        }
        Ok(())
    }
}

/// `CblasRowMajor` of cblas.h.
const CBLAS_ROW_MAJOR: i32 = 101;
/// `CblasNoTrans` of cblas.h.
const CBLAS_NO_TRANS: i32 = 111;

/// `cblas_sgemm` (Debian's OpenBLAS is built with 32-bit `blasint`).
type CblasSgemm = unsafe extern "C" fn(
    order: i32,
    trans_a: i32,
    trans_b: i32,
    m: i32,
    n: i32,
    k: i32,
    alpha: f32,
    a: *const f32,
    lda: i32,
    b: *const f32,
    ldb: i32,
    beta: f32,
    c: *mut f32,
    ldc: i32,
);

/// `openblas_set_num_threads`.
type SetNumThreads = unsafe extern "C" fn(i32);

/// `openblas_get_corename` / `openblas_get_config`.
type GetString = unsafe extern "C" fn() -> *const std::ffi::c_char;

/// The entry points of an opened `libopenblas.so.0` (never closed).
#[derive(Debug)]
pub struct OpenBlas {
    sgemm: CblasSgemm,
    set_num_threads: SetNumThreads,
    /// What the library says it is: its config string and the core it
    /// chose for this CPU.
    pub describe: String,
}

/// The library's file name: Debian's `libopenblas0` (any of its pthread,
/// openmp or serial flavours, by alternatives).
pub const OPENBLAS_SONAME: &str = "libopenblas.so.0";

/// How long an idle OpenBLAS worker spins before it sleeps, as the
/// exponent of a cycle count (`OPENBLAS_THREAD_TIMEOUT`, 4..=30; the
/// library's default is 28, about 0.1 s). 20 (about 0.4 ms) is close to
/// Weft's executor (300 µs): a worker that spins for a tenth of a second
/// after a call would take a core from the candidate timed next.
pub const OPENBLAS_THREAD_TIMEOUT: &str = "20";

/// OpenBLAS, opened once per process; `Err` says why it is absent.
pub fn openblas() -> Result<&'static OpenBlas, String> {
    static LIB: OnceLock<Result<OpenBlas, String>> = OnceLock::new();
    LIB.get_or_init(open).as_ref().map_err(Clone::clone)
}

#[cfg(unix)]
fn open() -> Result<OpenBlas, String> {
    use std::ffi::{CStr, CString};
    if std::env::var_os("OPENBLAS_THREAD_TIMEOUT").is_none() {
        // Read by the library when it loads, just below.
        std::env::set_var("OPENBLAS_THREAD_TIMEOUT", OPENBLAS_THREAD_TIMEOUT);
    }
    let name = CString::new(OPENBLAS_SONAME).map_err(|e| e.to_string())?;
    // SAFETY: a NUL-terminated name; loading OpenBLAS runs its
    // initialisers, which start its thread pool and touch nothing of ours.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns NULL or a NUL-terminated message.
        let why = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                "unknown error".to_owned()
            } else {
                CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        return Err(format!(
            "{OPENBLAS_SONAME} does not open ({why}): apt-get install libopenblas-dev"
        ));
    }
    let sym = |s: &str| -> Result<*mut libc::c_void, String> {
        let c = CString::new(s).map_err(|e| e.to_string())?;
        // SAFETY: `handle` is a live handle from dlopen, `c` a C string.
        let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
        if p.is_null() {
            Err(format!("{OPENBLAS_SONAME} has no `{s}`"))
        } else {
            Ok(p)
        }
    };
    // SAFETY: these symbols are functions with the signatures of OpenBLAS's
    // cblas.h and openblas_config.h, which the types above copy.
    let (sgemm, set_num_threads) = unsafe {
        (
            std::mem::transmute::<*mut libc::c_void, CblasSgemm>(sym("cblas_sgemm")?),
            std::mem::transmute::<*mut libc::c_void, SetNumThreads>(sym(
                "openblas_set_num_threads",
            )?),
        )
    };
    let text = |s: &str| -> String {
        let Ok(p) = sym(s) else {
            return "?".to_owned();
        };
        // SAFETY: as above; the function returns a static C string.
        unsafe {
            let f = std::mem::transmute::<*mut libc::c_void, GetString>(p);
            let s = f();
            if s.is_null() {
                "?".to_owned()
            } else {
                CStr::from_ptr(s).to_string_lossy().trim().to_owned()
            }
        }
    };
    let describe = format!(
        "{} (core {})",
        text("openblas_get_config"),
        text("openblas_get_corename")
    );
    Ok(OpenBlas {
        sgemm,
        set_num_threads,
        describe,
    })
}

#[cfg(not(unix))]
fn open() -> Result<OpenBlas, String> {
    Err(format!(
        "{OPENBLAS_SONAME} is opened with dlopen: not on this OS"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `m × n × k` operands of small exact values, and C by f64 sums
    /// (exact here: every product and partial sum is a small multiple
    /// of 1/16).
    fn operands(m: usize, n: usize, k: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 4.0)
            .collect();
        let b: Vec<f32> = (0..k * n)
            .map(|i| ((i * 5 % 11) as f32 - 5.0) / 4.0)
            .collect();
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k)
                    .map(|kk| f64::from(a[i * k + kk]) * f64::from(b[kk * n + j]))
                    .sum();
                c[i * n + j] = s as f32;
            }
        }
        (a, b, c)
    }

    fn check(peer: Peer) {
        for (m, n, k) in [(1, 1, 1), (7, 13, 9), (33, 65, 70), (5, 100, 300)] {
            let (a, b, want) = operands(m, n, k);
            for t in [1, 2].into_iter().filter(|&t| peer.runs_on(t)) {
                let mut c = vec![f32::NAN; m * n];
                peer.sgemm(t, (m, n, k), &a, &b, &mut c).expect("runs");
                assert_eq!(c, want, "{} {m}×{n}×{k} at {t} threads", peer.name());
            }
        }
        let mut c = vec![0f32; 3];
        assert!(peer
            .sgemm(1, (2, 2, 2), &[0.0; 4], &[0.0; 4], &mut c)
            .is_err());
    }

    #[test]
    fn the_crate_peers_compute_the_product() {
        check(Peer::Gemm);
        check(Peer::MatrixMultiply);
        assert!(!Peer::MatrixMultiply.runs_on(2));
    }

    #[test]
    #[ignore = "needs libopenblas (apt-get install libopenblas-dev)"]
    fn openblas_computes_the_product() {
        let o = openblas().expect("libopenblas.so.0 opens");
        assert!(!o.describe.is_empty());
        check(Peer::OpenBlas(o));
    }
}
