//! `cargo xtask roofline`: one SVG of every kernel family on this host's
//! roofline.
//!
//! The roofs are measured in this run, one thread: the f32 FMA peak and the
//! int8 peak ([`crate::peaks`]), and the shared streaming-read ceiling
//! ([`crate::ceiling`], the best of its loops) over three buffer sizes —
//! half of L1d, half of L2, and [`DRAM_BYTES`] — giving one memory roof per
//! level. The points are the latest one-thread results the benches saved
//! ([`crate::results`]: `bench q8-matvec`, `bench attention`), each
//! candidate at each shape placed at its arithmetic intensity (work per
//! byte it must read) and its rate. A point above the highest roof at its
//! intensity means a roof is wrong; the command names it.
//!
//! Writes `docs/roofline/<host>.svg` (`family23-model1.svg`) and prints the
//! roofs and the points. Results from another host are skipped, by name.

use std::hint::black_box;
use std::time::Instant;

use plotters::prelude::*;
use weft_kernel::Host;

use crate::ceiling::{self, Ceiling, Read};
use crate::peaks;
use crate::results::{self, Arith, Point};

/// The buffer the DRAM roof streams: larger than any L3 this runs on.
pub const DRAM_BYTES: usize = 256 << 20;
/// Interleaved rounds of the read loops; medians.
const ROUNDS: usize = 9;
/// Target length of one read sample.
const SAMPLE_SECS: f64 = 0.02;

/// A memory roof: the level, the bytes read, the best loop.
struct Roof {
    level: &'static str,
    bytes: usize,
    ceiling: Ceiling,
}

impl Roof {
    fn gbs(&self) -> f64 {
        self.bytes as f64 / self.ceiling.secs / 1e9
    }
}

/// The best read loop over `bytes` of fresh data, one thread.
fn memory_roof(level: &'static str, bytes: usize) -> Result<Roof, String> {
    let buf = ceiling::buffer(bytes);
    let loops = ceiling::loops();
    let once = |l: &ceiling::ReadLoop, reps: usize| {
        let t = Instant::now();
        for _ in 0..reps {
            black_box(l.read(black_box(&buf)));
        }
        t.elapsed().as_secs_f64() / reps as f64
    };
    let reps: Vec<usize> = loops
        .iter()
        .map(|l| {
            once(l, 1);
            ((SAMPLE_SECS / once(l, 1).max(1e-9)) as usize).clamp(1, 1 << 16)
        })
        .collect();
    let mut samples = vec![Vec::new(); loops.len()];
    for r in 0..ROUNDS {
        for i in 0..loops.len() {
            let j = (i + r) % loops.len();
            samples[j].push(once(&loops[j], reps[j]));
        }
    }
    let reads: Vec<Read> = loops
        .iter()
        .zip(&samples)
        .map(|(l, s)| Read {
            name: l.name().to_owned(),
            threads: 1,
            secs: crate::cycles::median(s),
        })
        .collect();
    let ceiling = Ceiling::best(&reads, 1).ok_or("roofline: no read loop ran")?;
    Ok(Roof {
        level,
        bytes,
        ceiling,
    })
}

/// The roof over `arith` at intensity `i`, under memory roof `m`.
fn attainable(peak: f64, m: &Roof, i: f64) -> f64 {
    peak.min(m.gbs() * i)
}

/// Entry point: `roofline`.
pub fn run(args: &[String]) -> Result<(), String> {
    if let [_, extra, ..] = args {
        return Err(format!("roofline takes no arguments (got `{extra}`)"));
    }
    if cfg!(debug_assertions) {
        println!(
            "  (debug build: run `cargo run --release -p xtask -- roofline` for real figures)"
        );
    }
    let host = Host::detect();
    let slug = crate::cpu::slug();
    let (fma, fma_work) = peaks::fma(&host)?;
    let (int8, int8_work, int8_what) = peaks::int8(&host)?;
    let fma_gflops = fma_work / peaks::time(&fma, 21) / 1e9;
    let int8_gops = int8_work / peaks::time(&int8, 21) / 1e9;
    let l1 = host.caches.l1d.unwrap_or(32 << 10) as usize;
    let l2 = host.caches.l2.unwrap_or(1 << 20) as usize;
    let roofs = [
        memory_roof("L1", l1 / 2)?,
        memory_roof("L2", l2 / 2)?,
        memory_roof("DRAM", DRAM_BYTES)?,
    ];
    println!("roofline: {} ({slug}), one thread", host.model);
    println!("  f32 peak  {fma_gflops:8.1} GFLOP/s (vfmadd231ps)");
    println!("  int8 peak {int8_gops:8.1} GOP/s   ({int8_what}, 2 ops per byte pair)");
    for r in &roofs {
        println!(
            "  {:<4} read {:8.1} GB/s over {} KiB ({})",
            r.level,
            r.gbs(),
            r.bytes >> 10,
            r.ceiling.name
        );
    }

    let mut points: Vec<(String, Point)> = Vec::new();
    for (bench, from, pts) in results::load_all()? {
        if from != host.model {
            println!("  skipped bench-results/{bench}.json: measured on {from}, not this host");
            continue;
        }
        points.extend(pts.into_iter().map(|p| (bench.clone(), p)));
    }
    if points.is_empty() {
        println!("  no bench results of this host yet: run `cargo xtask bench q8-matvec` and `cargo xtask bench attention` first");
    }
    let peak_of = |a: Arith| match a {
        Arith::F32 => fma_gflops,
        Arith::Int8 => int8_gops,
    };
    let mut above = 0;
    println!();
    println!(
        "  {:<14} {:<28} {:<30} {:>9} {:>9} {:>8}",
        "family", "candidate", "shape", "ops/byte", "G(FL)OP/s", "of roof"
    );
    for (_, p) in &points {
        let i = p.work / p.bytes;
        let rate = p.work / p.secs / 1e9;
        // The highest roof at this intensity, whichever level's read it is.
        let roof = roofs
            .iter()
            .map(|m| attainable(peak_of(p.arith), m, i))
            .fold(0.0, f64::max);
        let mark = if rate > roof {
            above += 1;
            "  (above-roof)"
        } else {
            ""
        };
        println!(
            "  {:<14} {:<28} {:<30} {:>9.3} {:>9.1} {:>8.2}{mark}",
            p.family,
            p.candidate,
            p.shape,
            i,
            rate,
            rate / roof
        );
    }

    let dir = crate::workspace_root().join("docs/roofline");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(format!("{slug}.svg"));
    draw(
        &path,
        &format!("{} ({slug}), one thread", host.model),
        fma_gflops,
        int8_gops,
        &roofs,
        &points,
    )
    .map_err(|e| format!("roofline: drawing {}: {e}", path.display()))?;
    println!();
    println!(
        "roofline: wrote {} ({} points, {above} above their roof)",
        path.display(),
        points.len()
    );
    if above > 0 {
        return Err(format!(
            "roofline: {above} point(s) above the highest roof: a roof is wrong (see the table)"
        ));
    }
    Ok(())
}

/// Intensities the roofs are drawn over (log-spaced), ops per byte.
fn intensities() -> impl Iterator<Item = f64> {
    (0..=120).map(|k| 10f64.powf(-2.0 + 5.0 * f64::from(k) / 120.0))
}

fn draw(
    path: &std::path::Path,
    title: &str,
    fma: f64,
    int8: f64,
    roofs: &[Roof],
    points: &[(String, Point)],
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1100, 760)).into_drawing_area();
    root.fill(&WHITE)?;
    let top = fma.max(int8) * 2.0;
    let lowest = points
        .iter()
        .map(|(_, p)| p.work / p.secs / 1e9)
        .fold(top / 100.0, f64::min);
    let (x0, x1) = (0.01f64, 1000f64);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d((x0..x1).log_scale(), ((lowest / 2.0)..top).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("arithmetic intensity (ops per byte read)")
        .y_desc("GFLOP/s (f32) or GOP/s (int8)")
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .draw()?;
    // The peaks, flat across; each memory level's read ceiling as its
    // slope up to the higher peak.
    for (name, peak, color) in [
        ("f32 FMA peak", fma, RGBColor(200, 40, 40)),
        ("int8 peak", int8, RGBColor(40, 90, 200)),
    ] {
        chart
            .draw_series(LineSeries::new(
                [(x0, peak), (x1, peak)],
                color.stroke_width(2),
            ))?
            .label(format!("{name} {peak:.1} G/s"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    let greys = [
        RGBColor(60, 60, 60),
        RGBColor(120, 120, 120),
        RGBColor(170, 170, 170),
    ];
    for (m, color) in roofs.iter().zip(greys) {
        chart
            .draw_series(LineSeries::new(
                intensities().map(|i| (i, attainable(fma.max(int8), m, i))),
                color.stroke_width(2),
            ))?
            .label(format!(
                "{} read {:.1} GB/s ({})",
                m.level,
                m.gbs(),
                m.ceiling.name
            ))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    let palette = [
        RGBColor(0, 130, 60),
        RGBColor(150, 60, 180),
        RGBColor(220, 120, 0),
        RGBColor(0, 150, 170),
    ];
    let mut families: Vec<&str> = points.iter().map(|(_, p)| p.family.as_str()).collect();
    families.sort_unstable();
    families.dedup();
    for (f, family) in families.iter().enumerate() {
        let color = palette[f % palette.len()];
        for kind in ["twin", "arm", "chain"] {
            let xy: Vec<(f64, f64)> = points
                .iter()
                .filter(|(_, p)| p.family == *family && p.kind == kind)
                .map(|(_, p)| (p.work / p.bytes, p.work / p.secs / 1e9))
                .collect();
            if xy.is_empty() {
                continue;
            }
            let label = format!("{family} {kind}s");
            let series =
                match kind {
                    "twin" => chart.draw_series(
                        xy.iter()
                            .map(|&c| Circle::new(c, 5, color.filled()).into_dyn()),
                    )?,
                    "arm" => chart
                        .draw_series(xy.iter().map(|&c| {
                            TriangleMarker::new(c, 6, color.stroke_width(2)).into_dyn()
                        }))?,
                    _ => chart.draw_series(
                        xy.iter()
                            .map(|&c| Cross::new(c, 5, color.stroke_width(2)).into_dyn()),
                    )?,
                };
            let legend =
                move |(x, y): (i32, i32)| -> DynElement<'static, SVGBackend<'_>, (i32, i32)> {
                    match kind {
                        "twin" => Circle::new((x + 10, y), 4, color.filled()).into_dyn(),
                        "arm" => {
                            TriangleMarker::new((x + 10, y), 5, color.stroke_width(2)).into_dyn()
                        }
                        _ => Cross::new((x + 10, y), 4, color.stroke_width(2)).into_dyn(),
                    }
                };
            series.label(label).legend(legend);
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_roof_is_the_memory_slope_then_the_peak() {
        let m = Roof {
            level: "DRAM",
            bytes: 1_000_000_000,
            ceiling: Ceiling {
                name: "read-ymm".into(),
                threads: 1,
                secs: 0.1, // 10 GB/s
            },
        };
        assert!((m.gbs() - 10.0).abs() < 1e-9);
        assert!((attainable(100.0, &m, 0.5) - 5.0).abs() < 1e-9);
        assert_eq!(attainable(100.0, &m, 50.0), 100.0);
        let i: Vec<f64> = intensities().collect();
        assert!((i[0] - 0.01).abs() < 1e-12 && (i[120] - 1000.0).abs() < 1e-9);
    }
}
