//! `cargo xtask bench elementwise`: elements per nanosecond of the exp and
//! erf arms, each twin (when present) and two glibc peers, side by side:
//! scalar `expf`/`erff` (correctly rounded in practice, one call per
//! element) and libmvec's vector `expf`/`erff` (`_ZGVeN16v_*` with
//! AVX-512F, else `_ZGVdN8v_*`; within 4 ulp, not correctly rounded — the
//! fast peer a compiler reaches for under `-ffast-math`). Candidates run
//! interleaved (one timed batch each per round, the first candidate rotating
//! each round, rounds repeated) and each reports its median, so drifting
//! clocks and neighbours hit every candidate alike. `cargo xtask bench`
//! always runs from a release build (see `main.rs`).

use std::hint::black_box;
use std::time::Instant;

use weft_elementwise::arm::{ElementwiseArm, ElementwiseKernel};
use weft_elementwise::Func;
use weft_kernel::{require_features, Arm, Geometry, Host, Site};

extern "C" {
    fn expf(x: f32) -> f32;
    fn erff(x: f32) -> f32;
}

#[cfg(target_arch = "x86_64")]
mod mvec {
    //! glibc's libmvec, called through its vector ABI (`_ZGV<isa>N<lanes>v_`:
    //! the argument in the first vector register, the result in the same,
    //! every caller-saved register clobbered). Rust cannot pass SIMD types
    //! through `extern "C"` on stable, so the call is one `call` in inline
    //! assembly with that contract spelled out.

    use std::arch::asm;
    use std::arch::x86_64::{
        __m256, __m512, _mm256_loadu_ps, _mm256_storeu_ps, _mm512_loadu_ps, _mm512_storeu_ps,
    };

    use weft_elementwise::Func;

    #[link(name = "mvec")]
    extern "C" {
        // Signatures are not used: only the addresses are taken.
        fn _ZGVdN8v_expf();
        fn _ZGVdN8v_erff();
        fn _ZGVeN16v_expf();
        fn _ZGVeN16v_erff();
    }

    /// Lanes of the widest variant this host runs.
    pub fn lanes() -> usize {
        if std::is_x86_feature_detected!("avx512f") {
            16
        } else {
            8
        }
    }

    /// `out[i] = f(xs[i])` through the variant of `lanes` lanes; the tail
    /// goes through one padded vector.
    pub fn run(f: Func, lanes: usize, xs: &[f32], out: &mut [f32]) {
        assert!(std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma"));
        assert!(lanes == 8 || std::is_x86_feature_detected!("avx512f"));
        let n = xs.len().min(out.len());
        // SAFETY: the features each variant needs were checked above.
        unsafe {
            if lanes == 16 {
                run16(f, &xs[..n], &mut out[..n])
            } else {
                run8(f, &xs[..n], &mut out[..n])
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn call8(f: Func, v: __m256) -> __m256 {
        let p = match f {
            Func::Exp => _ZGVdN8v_expf as *const () as usize,
            Func::Erf => _ZGVdN8v_erff as *const () as usize,
        };
        let r: __m256;
        // SAFETY: the `d` variants take and return ymm0 and need AVX2 (enabled
        // here); clobber_abi covers every register the vector ABI may clobber,
        // and Rust aligns the stack for a call in an asm block without `nostack`.
        unsafe { asm!("call {p}", p = in(reg) p, inout("ymm0") v => r, clobber_abi("C")) };
        r
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn call16(f: Func, v: __m512) -> __m512 {
        let p = match f {
            Func::Exp => _ZGVeN16v_expf as *const () as usize,
            Func::Erf => _ZGVeN16v_erff as *const () as usize,
        };
        let r: __m512;
        // SAFETY: as in `call8`, with zmm0 and AVX-512F.
        unsafe { asm!("call {p}", p = in(reg) p, inout("zmm0") v => r, clobber_abi("C")) };
        r
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn run8(f: Func, xs: &[f32], out: &mut [f32]) {
        let mut i = 0;
        while i + 8 <= xs.len() {
            // SAFETY: i + 8 <= len of both slices (equal lengths).
            unsafe {
                let v = call8(f, _mm256_loadu_ps(xs.as_ptr().add(i)));
                _mm256_storeu_ps(out.as_mut_ptr().add(i), v);
            }
            i += 8;
        }
        if i < xs.len() {
            let n = xs.len() - i;
            let mut t = [0f32; 8];
            t[..n].copy_from_slice(&xs[i..]);
            // SAFETY: `t` holds 8 floats.
            unsafe { _mm256_storeu_ps(t.as_mut_ptr(), call8(f, _mm256_loadu_ps(t.as_ptr()))) };
            out[i..].copy_from_slice(&t[..n]);
        }
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn run16(f: Func, xs: &[f32], out: &mut [f32]) {
        let mut i = 0;
        while i + 16 <= xs.len() {
            // SAFETY: i + 16 <= len of both slices (equal lengths).
            unsafe {
                let v = call16(f, _mm512_loadu_ps(xs.as_ptr().add(i)));
                _mm512_storeu_ps(out.as_mut_ptr().add(i), v);
            }
            i += 16;
        }
        if i < xs.len() {
            let n = xs.len() - i;
            let mut t = [0f32; 16];
            t[..n].copy_from_slice(&xs[i..]);
            // SAFETY: `t` holds 16 floats.
            unsafe { _mm512_storeu_ps(t.as_mut_ptr(), call16(f, _mm512_loadu_ps(t.as_ptr()))) };
            out[i..].copy_from_slice(&t[..n]);
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// The asm call convention is right when libmvec's results sit within
        /// its documented 4 ulp of glibc's scalar functions, tail included.
        #[test]
        #[cfg_attr(not(weft_host_has = "avx2"), ignore = "needs avx2")]
        #[cfg_attr(not(weft_host_has = "fma"), ignore = "needs fma")]
        fn libmvec_through_the_vector_abi_agrees_with_scalar_glibc() {
            let xs: Vec<f32> = (0..37).map(|i| i as f32 * 0.37 - 6.0).collect();
            for lanes in [8, lanes()] {
                for f in [Func::Exp, Func::Erf] {
                    let mut out = vec![f32::NAN; xs.len()];
                    run(f, lanes, &xs, &mut out);
                    for (&x, &y) in xs.iter().zip(&out) {
                        // SAFETY: pure libm functions.
                        let want = unsafe {
                            match f {
                                Func::Exp => super::super::expf(x),
                                Func::Erf => super::super::erff(x),
                            }
                        };
                        let ulps = (y.to_bits() as i64 - want.to_bits() as i64).abs();
                        assert!(ulps <= 4, "{f:?}({x}) lanes={lanes}: {y} vs {want}");
                    }
                }
            }
        }
    }
}

/// Elements per call (input + output stay in L1/L2).
const N: usize = 4096;
/// Calls per timed batch.
const CALLS: usize = 64;
/// Interleaved rounds; the median is reported.
const ROUNDS: usize = 21;

enum Runner {
    Kernel(ElementwiseKernel),
    Glibc(Func),
    /// libmvec at this many lanes.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Libmvec(Func, usize),
}

struct Candidate {
    name: String,
    twin: bool,
    runner: Runner,
}

/// The candidates for `f`: the arm, glibc scalar, libmvec (x86-64 with
/// AVX2), then every twin the host runs (from [`twin_kernels`]).
fn candidates(f: Func) -> Result<Vec<Candidate>, String> {
    let arm = ElementwiseKernel::of_arm(f).map_err(|e| e.to_string())?;
    let mut v = vec![
        Candidate {
            name: format!("{}.arm", f.name()),
            twin: false,
            runner: Runner::Kernel(arm),
        },
        Candidate {
            name: format!("glibc {}f", f.name()),
            twin: false,
            runner: Runner::Glibc(f),
        },
    ];
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        let lanes = mvec::lanes();
        v.push(Candidate {
            name: format!("libmvec {}f x{lanes}", f.name()),
            twin: false,
            runner: Runner::Libmvec(f, lanes),
        });
    }
    for (name, k) in twin_kernels(f) {
        v.push(Candidate {
            name: name.to_string(),
            twin: true,
            runner: Runner::Kernel(k),
        });
    }
    Ok(v)
}

fn inputs(f: Func) -> Vec<f32> {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let span = match f {
        Func::Exp => 170.0,
        Func::Erf => 8.0,
    };
    (0..N)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * span
        })
        .collect()
}

fn batch(c: &Candidate, xs: &[f32], out: &mut [f32]) -> Result<f64, String> {
    let t = Instant::now();
    for _ in 0..CALLS {
        match &c.runner {
            Runner::Kernel(k) => k.run(black_box(xs), out).map_err(|e| e.to_string())?,
            Runner::Glibc(f) => {
                for (o, &x) in out.iter_mut().zip(black_box(xs)) {
                    // SAFETY: expf/erff are pure libm functions.
                    *o = unsafe {
                        match f {
                            Func::Exp => expf(x),
                            Func::Erf => erff(x),
                        }
                    };
                }
            }
            #[cfg(target_arch = "x86_64")]
            Runner::Libmvec(f, lanes) => mvec::run(*f, *lanes, black_box(xs), out),
            #[cfg(not(target_arch = "x86_64"))]
            Runner::Libmvec(..) => unreachable!("libmvec is offered on x86-64 only"),
        }
        black_box(&mut *out);
    }
    let ns = t.elapsed().as_nanos().max(1) as f64;
    Ok((CALLS * xs.len()) as f64 / ns)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One function's medians in elements/ns.
struct Figures {
    arm: f64,
    /// The best twin, if any ran.
    twin: Option<f64>,
    glibc: f64,
    libmvec: Option<f64>,
}

fn bench(f: Func) -> Result<Figures, String> {
    let cands = candidates(f)?;
    let xs = inputs(f);
    let mut out = vec![0f32; N];
    let mut samples = vec![Vec::with_capacity(ROUNDS); cands.len()];
    // one warm-up round
    for c in &cands {
        batch(c, &xs, &mut out)?;
    }
    for round in 0..ROUNDS {
        // rotate who goes first, so no candidate always follows the same one
        for k in 0..cands.len() {
            let i = (round + k) % cands.len();
            samples[i].push(batch(&cands[i], &xs, &mut out)?);
        }
    }
    let mut fig = Figures {
        arm: 0.0,
        twin: None,
        glibc: 0.0,
        libmvec: None,
    };
    for (c, s) in cands.iter().zip(samples) {
        let m = median(s);
        println!("  {:<24} {m:>8.4} elements/ns", c.name);
        match c.runner {
            Runner::Glibc(_) => fig.glibc = m,
            Runner::Libmvec(..) => fig.libmvec = Some(m),
            Runner::Kernel(_) if c.twin => fig.twin = Some(fig.twin.map_or(m, |t| t.max(m))),
            Runner::Kernel(_) => fig.arm = m,
        }
    }
    Ok(fig)
}

/// Entry point: `bench elementwise`.
pub fn run(args: &[String]) -> Result<(), String> {
    match args.first().map(String::as_str) {
        Some("elementwise") => {}
        other => return Err(format!("bench: unknown benchmark {other:?} (elementwise)")),
    }
    if cfg!(debug_assertions) {
        println!("  (debug build: run `cargo run --release -p xtask -- bench elementwise` for real figures)");
    }
    let e = bench(Func::Exp)?;
    let r = bench(Func::Erf)?;
    let ratio = |t: Option<f64>, d: Option<f64>| match (t, d) {
        (Some(t), Some(d)) => format!("{:.2}", t / d),
        _ => "absent".to_string(),
    };
    println!(
        "bench elementwise: exp_arm_vs_glibc={:.2} erf_arm_vs_glibc={:.2} exp_arm_vs_libmvec={} erf_arm_vs_libmvec={}",
        e.arm / e.glibc,
        r.arm / r.glibc,
        ratio(Some(e.arm), e.libmvec),
        ratio(Some(r.arm), r.libmvec),
    );
    if e.twin.is_none() && r.twin.is_none() {
        println!("  twins are absent: no twin figures");
    }
    println!(
        "bench elementwise: exp_twin_vs_arm={} exp_twin_vs_glibc={} exp_twin_vs_libmvec={} erf_twin_vs_arm={} erf_twin_vs_glibc={} erf_twin_vs_libmvec={}",
        ratio(e.twin, Some(e.arm)),
        ratio(e.twin, Some(e.glibc)),
        ratio(e.twin, e.libmvec),
        ratio(r.twin, Some(r.arm)),
        ratio(r.twin, Some(r.glibc)),
        ratio(r.twin, r.libmvec),
    );
    Ok(())
}

/// The placed twins of `f`'s arm that this host can run; a twin that
/// refuses is reported on stdout and left out.
pub fn twin_kernels(f: Func) -> Vec<(&'static str, ElementwiseKernel)> {
    let arm = ElementwiseArm::new(f);
    let host = Host::detect();
    let site = Site::new(arm.family(), Geometry::new().with("len", 1 << 16));
    let offer = match arm.offer(&site, &host) {
        Ok(o) => o,
        Err(e) => {
            println!("  {}: no offer: {e}", arm.name());
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for t in weft_elementwise::twins_of(f) {
        if t.isa() != host.isa {
            continue;
        }
        if let Err(e) = require_features(&host, t.requires()) {
            println!("  {}: skipped: {e}", t.name());
            continue;
        }
        let placed = t.emit(&offer).and_then(|code| {
            // SAFETY: a twin's body honours its arm's leaf ABI (the
            // elementwise contract); that is what a twin promises.
            unsafe { ElementwiseKernel::from_native(&code) }
        });
        match placed {
            Ok(k) => out.push((t.name(), k)),
            Err(e) => println!("  {}: refused: {e}", t.name()),
        }
    }
    out
}
