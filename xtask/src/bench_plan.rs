//! `cargo xtask bench plan`: milliseconds to compile a plan of SmolLM2-135M's
//! decode sites with weft-plan and weft-cost's model of this host, cold
//! (an empty cache directory: every twin validated, every close price
//! raced, every arm built) and warm (a fresh planner in the same process
//! reading the verdicts, races and arm bodies the cold compile saved).
//!
//! The sites follow one decoder layer after another (norm, quantise, the
//! q/k/v/o/gate/up/down matvecs, RoPE, attention, SiLU-gated product,
//! residual adds) until the plan has `--sites=N` sites (200 by default).
//! So that a plan is not one cache key repeated, each layer decodes a
//! different batch (1 to 4 tokens) and its attention sees a different
//! context length. Rounds interleave a cold and several warm compiles;
//! medians are reported. Every warm plan's image must equal its cold
//! plan's (a cache may make a compile faster, never different).
//! `cargo xtask bench` always runs from a release build (see `main.rs`).

use std::collections::BTreeSet;
use std::time::Instant;

use weft_attention::KvType;
use weft_kernel::{Family, Geometry, Host, Site};
use weft_loopnest::{Add, NestOp, RmsNorm, Rope, SiluMul};
use weft_plan::{CacheLocation, Catalogue, CompiledPlan, Options, Planner};

const DIM: u64 = 576;
const FFN: u64 = 1536;
const HEADS: u64 = 9;
const KV_HEADS: u64 = 3;
const HEAD_DIM: u64 = 64;
const LAYERS: u64 = 30;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// One decoder layer's sites at `batch` tokens and a context of `context` keys.
fn layer(batch: u64, context: u64) -> Result<Vec<Site>, String> {
    let site = |family: &'static str, g: Geometry| Site::new(Family(family), g);
    let b = batch as usize;
    let norm = site(
        RmsNorm::FAMILY,
        RmsNorm::new(DIM as usize, b).map_err(err)?.geometry(),
    );
    let quant = |cols| {
        site(
            weft_q8::quantize::FAMILY,
            weft_q8::quantize::geometry(cols, batch),
        )
    };
    // Where the model's weights are on this host, as the engine says.
    let weights =
        weft_llm::engine::weight_residency(&weft_llm::Config::smollm2_135m(), weft_host::host());
    let matvec = |rows, cols| {
        site(weft_q8::FAMILY, weft_q8::geometry(rows, cols, batch)).with_residency(weights)
    };
    let add = site(
        Add::FAMILY,
        Add::new((DIM * batch) as usize).map_err(err)?.geometry(),
    );
    Ok(vec![
        norm.clone(),
        quant(DIM),
        matvec(DIM, DIM),
        matvec(KV_HEADS * HEAD_DIM, DIM),
        matvec(KV_HEADS * HEAD_DIM, DIM),
        site(
            Rope::FAMILY,
            Rope::new(HEADS as usize, KV_HEADS as usize, 64, 64, b)
                .map_err(err)?
                .geometry(),
        ),
        site(
            weft_attention::FAMILY,
            weft_attention::geometry(HEAD_DIM, batch, context, HEADS, KV_HEADS, true, KvType::F32),
        ),
        quant(DIM),
        matvec(DIM, DIM),
        add.clone(),
        norm,
        quant(DIM),
        matvec(FFN, DIM),
        matvec(FFN, DIM),
        site(
            SiluMul::FAMILY,
            SiluMul::new((FFN * batch) as usize)
                .map_err(err)?
                .geometry(),
        ),
        quant(FFN),
        matvec(DIM, FFN),
        add,
    ])
}

/// The first `n` sites of a decode step through the layers (wrapping
/// round to layer 0 if `n` asks for more than one pass).
fn sites(n: usize) -> Result<Vec<Site>, String> {
    let mut out = Vec::with_capacity(n);
    for l in (0..LAYERS).cycle() {
        if out.len() >= n {
            break;
        }
        out.extend(layer(1 + l % 4, 96 + 13 * l)?);
    }
    out.truncate(n);
    Ok(out)
}

fn catalogue() -> Result<Catalogue, String> {
    let mut c = Catalogue::new();
    c.register(weft_q8::entry()).map_err(err)?;
    c.register(weft_q8::quantize::entry()).map_err(err)?;
    c.register(weft_attention::entry()).map_err(err)?;
    c.register_all(weft_loopnest::entries()).map_err(err)?;
    Ok(c)
}

fn compile(
    dir: &std::path::Path,
    sites: &[Site],
    cache_bodies: bool,
) -> Result<(f64, CompiledPlan), String> {
    let options = Options {
        cache: CacheLocation::File(dir.join("plan.bin")),
        cache_bodies,
        ..Options::from_env().map_err(err)?
    };
    let t = Instant::now();
    let mut planner = Planner::for_host(catalogue()?, Host::detect(), options);
    let plan = planner.compile(sites).map_err(err)?;
    Ok((t.elapsed().as_secs_f64() * 1e3, plan))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn flag(args: &[String], name: &str, default: usize) -> Result<usize, String> {
    let prefix = format!("--{name}=");
    match args.iter().find_map(|a| a.strip_prefix(&prefix)) {
        Some(v) => v
            .parse()
            .map_err(|_| format!("bench plan: --{name} wants a number, not `{v}`")),
        None => Ok(default),
    }
}

/// Entry point: `bench plan [--sites=N] [--rounds=N] [--warm=N] [--rebuilt=0|1]`.
pub fn run(args: &[String]) -> Result<(), String> {
    match args.first().map(String::as_str) {
        Some("plan") => {}
        other => return Err(format!("bench: unknown benchmark {other:?} (plan)")),
    }
    let n = flag(args, "sites", 200)?.max(1);
    let rounds = flag(args, "rounds", 3)?.max(1);
    let warm_per_round = flag(args, "warm", 3)?.max(1);
    // 0 skips the warm compiles that build every body again (for profiling).
    let rebuild = flag(args, "rebuilt", 1)? != 0;
    let sites = sites(n)?;
    let keys: BTreeSet<(String, String)> = sites
        .iter()
        .map(|s| (s.family.name().to_owned(), s.geometry.to_string()))
        .collect();
    println!(
        "  {} sites, {} distinct (family, geometry); {rounds} rounds of 1 cold + {warm_per_round} warm",
        sites.len(),
        keys.len()
    );
    let (mut cold, mut warm, mut rebuilt) = (Vec::new(), Vec::new(), Vec::new());
    let mut last = None;
    for round in 0..rounds {
        let dir = tempfile_dir(round)?;
        let (cold_ms, cold_plan) = compile(&dir, &sites, true)?;
        cold.push(cold_ms);
        let (mut w_ms, mut r_ms) = (Vec::new(), Vec::new());
        // Interleaved: warm with saved bodies, then warm building every
        // body again (verdicts and races still cached).
        for _ in 0..warm_per_round {
            for bodies in [true, false] {
                if !bodies && !rebuild {
                    continue;
                }
                let (ms, plan) = compile(&dir, &sites, bodies)?;
                if plan.image() != cold_plan.image() {
                    return Err("bench plan: a warm plan differs from its cold plan".to_owned());
                }
                let c = &plan.report().cache;
                if c.validations != 0 || c.races != 0 || (bodies && c.builds != 0) {
                    return Err(format!(
                        "bench plan: a warm compile validated {} twins, ran {} races and built {} bodies",
                        c.validations, c.races, c.builds
                    ));
                }
                if bodies {
                    w_ms.push(ms);
                    last = Some(plan);
                } else {
                    r_ms.push(ms);
                }
            }
        }
        let list = |v: &[f64]| {
            v.iter()
                .map(|m| format!("{m:.1}"))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        println!(
            "  round {round}: cold {cold_ms:>8.1} ms   warm {}   warm, bodies rebuilt {}",
            list(&w_ms),
            list(&r_ms)
        );
        warm.extend(w_ms);
        rebuilt.extend(r_ms);
        if round + 1 == rounds {
            // What the warm compile starts with: reading the cache file.
            let path = dir.join("plan.bin");
            let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            let fp = Host::detect().fingerprint();
            let t = Instant::now();
            let cache = weft_plan::PlanCache::open(&path, fp);
            let open_ms = t.elapsed().as_secs_f64() * 1e3;
            println!(
                "  cache file: {} KiB, {} verdicts, {} races, {} bodies, opened in {open_ms:.1} ms",
                bytes >> 10,
                cache.verdict_count(),
                cache.race_count(),
                cache.body_count()
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    if let Some(plan) = &last {
        let c = &plan.report().cache;
        println!(
            "  warm cache: {} verdicts, {} races and {} bodies read",
            c.verdict_hits, c.race_hits, c.body_hits
        );
    }
    let (c, w) = (median(cold), median(warm));
    let r = if rebuilt.is_empty() {
        f64::NAN
    } else {
        median(rebuilt)
    };
    println!("  medians: cold {c:.1} ms, warm {w:.1} ms, warm with bodies rebuilt {r:.1} ms");
    println!("bench plan: cold_ms={c:.1} warm_ms={w:.1}");
    Ok(())
}

/// A fresh, empty directory for one round's cache.
fn tempfile_dir(round: usize) -> Result<std::path::PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("weft-bench-plan-{}-{round}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(err)?;
    Ok(dir)
}
