//! Multiply two matrices through the planner, the way a downstream project
//! would: register the family, describe one site (B given at plan time, so
//! arms may pack it), compile with weft-cost's model of this host, print
//! the selection report, run on two threads, check every output against
//! the scalar reference bit for bit, and time a few calls.
//!
//! ```text
//! cargo run --release -p weft-gemm --example multiply [M N K [THREADS]]
//! ```
//!
//! Defaults: 512 × 512 × 512 on two threads. The plan cache is the
//! user's (`WEFT_CACHE_DIR` moves it); `WEFT_NATIVE_EMIT=off` plans with
//! the arms alone and gives the same bits.

use std::error::Error;
use std::time::Instant;

use weft_gemm::{reference, site, BLayout, GemmArgs, MatRef, SiteOperands};
use weft_plan::{Catalogue, Executor, Options, Planner};

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn main() -> Result<(), Box<dyn Error>> {
    let arg = |i: usize, default: usize| -> Result<usize, Box<dyn Error>> {
        match std::env::args().nth(i) {
            Some(a) => Ok(a.parse().map_err(|_| format!("`{a}` is not a number"))?),
            None => Ok(default),
        }
    };
    let (m, n, k, threads) = (arg(1, 512)?, arg(2, 512)?, arg(3, 512)?, arg(4, 2)?);
    let (a, b) = (values(m * k, 1), values(k * n, 2));

    let mut catalogue = Catalogue::new();
    catalogue.register(weft_gemm::entry())?;
    let mut planner = Planner::for_host(catalogue, weft_host::Host::detect(), Options::from_env()?);
    let plan = planner.compile(&[site(m, n, k, BLayout::Rows, Some(&b))])?;
    println!("{}", plan.report());

    let s = &plan.sites()[0];
    let ops = SiteOperands::new(s.packed("b"), s.views.as_ref(), k, n)?;
    let kernel = plan.kernel::<GemmArgs>(0)?;
    let exec = Executor::new(threads);
    let mut c = vec![0.0f32; m * n];
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let args = ops.args(
            MatRef::dense(&a, m, k),
            Some(MatRef::dense(&b, k, n)),
            &mut c,
            n,
            (1.0, 0.0),
        )?;
        let t = Instant::now();
        // SAFETY: `args` was checked against `a`, `b` and `c`, all live and
        // untouched until the call returns.
        unsafe { kernel.run(&exec, &args) };
        best = best.min(t.elapsed().as_secs_f64());
    }
    let mut want = vec![0.0f32; m * n];
    reference::gemm(
        MatRef::dense(&a, m, k),
        |kk, j| b[kk * n + j],
        &mut want,
        n,
        (1.0, 0.0),
        0..m,
        0..n,
    );
    if let Some(i) = (0..c.len()).find(|&i| c[i].to_bits() != want[i].to_bits()) {
        return Err(format!(
            "C[{i}] = {:e}, the scalar reference gives {:e}",
            c[i], want[i]
        )
        .into());
    }
    println!(
        "{} on {} thread(s): {m} × {n} × {k} in {:.3} ms ({:.1} GFLOP/s), all {} outputs equal the scalar reference bit for bit",
        s.candidate,
        exec.threads(),
        best * 1e3,
        2.0 * (m * n * k) as f64 / best / 1e9,
        c.len()
    );
    Ok(())
}
