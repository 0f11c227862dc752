//! A plan from scratch, the way a downstream project builds one: register
//! the Q8_0 families, describe two sites (quantise the activations, then
//! multiply them by a weight matrix), compile with weft-cost's model of
//! this host, print the selection report, run both kernels through the
//! executor on real data and check every output against the families'
//! scalar references, bit for bit.
//!
//! ```text
//! cargo run --release -p weft-plan --example matvec [ROWS COLS BATCH THREADS]
//! ```
//!
//! Defaults: SmolLM2-135M's q projection (576 × 576), one token, two
//! threads. The cache is the user's (`WEFT_CACHE_DIR` moves it), so a
//! second run reuses the first run's verdicts and races;
//! `WEFT_NATIVE_EMIT=off` plans with the arms alone. `tests/example.rs`
//! runs [`run`] in CI.

use std::error::Error;
use std::io::Write;

use weft_kernel::{Family, Host, Site};
use weft_plan::{Catalogue, Executor, Kind, Options, Planner};
use weft_q8::quantize::{self, Q8QuantizeArgs};
use weft_q8::{Q8Activations, Q8MatvecArgs, Q8Weights};

/// What a run computed and chose.
#[derive(Debug)]
pub struct Outcome {
    /// The matvec site's chosen candidate, and whether it is a twin.
    pub matvec: (String, bool),
    /// The quantise site's chosen candidate, and whether it is a twin.
    pub quantize: (String, bool),
    /// The outputs (`batch × rows`).
    pub y: Vec<f32>,
    /// Largest `|y - exact| / Σ|w·x|` against the unquantised f64 product:
    /// the quantisation error, for information.
    pub quantisation_error: f64,
}

/// Deterministic values in `[-1, 1)` (xorshift), standing in for a model's.
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

/// Plan, run and check `y = W·x` for a `rows × cols` matrix and `batch`
/// vectors on `threads` threads, writing the report and results to `out`.
pub fn run(
    options: Options,
    (rows, cols, batch): (usize, usize, usize),
    threads: usize,
    out: &mut dyn Write,
) -> Result<Outcome, Box<dyn Error>> {
    // 1. The catalogue: every arm and twin of the two families, all ISAs;
    //    the planner keeps what this host can run.
    let mut catalogue = Catalogue::new();
    catalogue.register(quantize::entry())?;
    catalogue.register(weft_q8::entry())?;

    // 2. The sites, in the order the kernels run.
    let sites = [
        Site::new(
            Family(quantize::FAMILY),
            quantize::geometry(cols as u64, batch as u64),
        ),
        Site::new(
            Family(weft_q8::FAMILY),
            weft_q8::geometry(rows as u64, cols as u64, batch as u64),
        ),
    ];

    // 3. Compile: arms choose the offer, validated twins compete for the
    //    body, weft-cost prices every survivor from its bytes.
    let mut planner = Planner::for_host(catalogue, Host::detect(), options);
    let plan = planner.compile(&sites)?;
    writeln!(out, "{}", plan.report())?;
    let chosen = |i: usize| {
        let s = &plan.sites()[i];
        (s.candidate.to_owned(), matches!(s.kind, Kind::Twin { .. }))
    };

    // 4. Real data: f32 weights quantised once (what a model loader does),
    //    f32 activations quantised by the plan's first kernel.
    let w = Q8Weights::quantize(&values(rows * cols, 0x5eed), rows, cols)?;
    let x = values(batch * cols, 0xfeed);
    let exec = Executor::new(threads);

    let quantise = plan.kernel::<Q8QuantizeArgs>(0)?;
    let blocks = batch * cols / weft_q8::BLOCK_LEN;
    let mut xq = vec![0u8; blocks * weft_q8::BLOCK_BYTES];
    let args = Q8QuantizeArgs::new(&x, &mut xq, cols, batch, 0..blocks)?;
    // SAFETY: `args` was checked against `x` and `xq`, both live and
    // untouched until the call returns.
    unsafe { quantise.run(&exec, &args) };
    let xq = Q8Activations::from_bytes(xq, cols, batch)?;

    let matvec = plan.kernel::<Q8MatvecArgs>(1)?;
    let mut y = vec![f32::NAN; batch * rows];
    let args = Q8MatvecArgs::new(&w, &xq, &mut y, 0..rows)?;
    // SAFETY: `args` was checked against `w`, `xq` and `y`, all live and
    // untouched until the call returns.
    unsafe { matvec.run(&exec, &args) };

    // 5. Check against the scalar references, bit for bit.
    let want_xq = quantize::reference(&x, cols, batch)?;
    if xq.bytes() != want_xq.bytes() {
        return Err("the quantised activations differ from the scalar quantiser".into());
    }
    let mut want_y = vec![0.0f32; batch * rows];
    weft_q8::reference::matvec(&w, &xq, &mut want_y, 0..rows);
    if let Some(i) = (0..y.len()).find(|&i| y[i].to_bits() != want_y[i].to_bits()) {
        return Err(format!(
            "y[{i}] = {:e} ({:#010x}), the scalar reference gives {:e} ({:#010x})",
            y[i],
            y[i].to_bits(),
            want_y[i],
            want_y[i].to_bits()
        )
        .into());
    }

    // And how far quantisation moved the result from the f32 inputs' product.
    let wf = values(rows * cols, 0x5eed);
    let mut quantisation_error = 0.0f64;
    for n in 0..batch {
        let xv = &x[n * cols..][..cols];
        for r in 0..rows {
            let wr = &wf[r * cols..][..cols];
            let exact: f64 = wr.iter().zip(xv).map(|(a, b)| f64::from(a * b)).sum();
            let scale: f64 = wr.iter().zip(xv).map(|(a, b)| f64::from(a * b).abs()).sum();
            let e = (f64::from(y[n * rows + r]) - exact).abs() / scale.max(f64::MIN_POSITIVE);
            quantisation_error = quantisation_error.max(e);
        }
    }
    writeln!(
        out,
        "ran {} then {} on {} thread(s): {} outputs equal the scalar reference bit for bit; \
         quantisation error at most {:.2e} of Σ|w·x|",
        plan.sites()[0].candidate,
        plan.sites()[1].candidate,
        exec.threads(),
        y.len(),
        quantisation_error
    )?;
    let head: Vec<String> = y.iter().take(6).map(|v| format!("{v:.5}")).collect();
    writeln!(out, "y[..6] = [{}]", head.join(", "))?;
    Ok(Outcome {
        matvec: chosen(1),
        quantize: chosen(0),
        y,
        quantisation_error,
    })
}

// `tests/example.rs` compiles this file too and calls `run` instead.
#[allow(dead_code)]
fn main() -> Result<(), Box<dyn Error>> {
    let arg = |i: usize, default: usize| -> Result<usize, Box<dyn Error>> {
        match std::env::args().nth(i) {
            Some(a) => Ok(a.parse().map_err(|_| format!("`{a}` is not a number"))?),
            None => Ok(default),
        }
    };
    let shape = (arg(1, 576)?, arg(2, 576)?, arg(3, 1)?);
    let threads = arg(4, 2)?;
    run(
        Options::from_env()?,
        shape,
        threads,
        &mut std::io::stdout().lock(),
    )?;
    Ok(())
}
