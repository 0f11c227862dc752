//! A three-layer CNN through the planner, from weights in a file: a 3×3
//! convolution with ReLU, a depthwise 3×3 with SiLU, then a pointwise
//! (1×1) projection — a MobileNet block's shape. The example writes the
//! weights to a small file, reads them back as a downstream project would
//! read its own model (every length checked, a bad file is an error, never
//! a panic), plans the three layers as one plan (the pointwise layer as a
//! region: the convolution or the GEMM over pixels, as the planner
//! chooses, `weft_conv::pointwise`), runs them on two threads layer after
//! layer, and checks each layer's output against the scalar
//! reference: bit for bit where the planner chose a body of the shared
//! contract, and as the largest difference where it chose an arm with an
//! arithmetic of its own.
//!
//! ```text
//! cargo run --release -p weft-conv --example cnn [SIZE [THREADS]]
//! ```
//!
//! Defaults: a 56×56×3 image on two threads. The weights go to
//! `weft-cnn.bin` in the system's temporary directory.

use std::error::Error;
use std::path::Path;
use std::time::Instant;

use weft_conv::{pointwise, reference, Activation, ConvArgs, ConvGeometry, PackedFilter};
use weft_plan::{Alternative, Catalogue, Executor, Options, Planner};

/// How a layer runs: its site (index, packed filter) or its region.
enum Run {
    Site(usize, PackedFilter),
    Region(Box<pointwise::Pointwise>),
}

/// The file's first bytes.
const MAGIC: &[u8; 8] = b"WEFTCNN1";

/// One layer as the file stores it.
struct Layer {
    cin: u64,
    cout: u64,
    k: u64,
    stride: u64,
    pad: u64,
    groups: u64,
    act: Activation,
    /// OHWI.
    w: Vec<f32>,
    bias: Vec<f32>,
}

impl Layer {
    /// Its geometry over a `size × size` input.
    fn geometry(&self, size: u64) -> ConvGeometry {
        ConvGeometry {
            groups: self.groups,
            ..ConvGeometry::square(1, size, self.cin, self.cout, self.k, self.stride, self.pad)
        }
        .with_act(self.act)
    }

    fn w_len(&self) -> Result<usize, String> {
        let per = self.cin.checked_div(self.groups).ok_or("groups is 0")?;
        self.cout
            .checked_mul(self.k * self.k)
            .and_then(|v| v.checked_mul(per))
            .filter(|v| *v <= 1 << 28)
            .map(|v| v as usize)
            .ok_or_else(|| "a layer's filter is too large".to_owned())
    }
}

fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            scale * ((s >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        })
        .collect()
}

/// The model: 3 → 32 channels (3×3, stride 2, ReLU), depthwise 3×3 over
/// 32 (ReLU), 32 → 64 pointwise.
fn model() -> Vec<Layer> {
    let shapes = [
        (3, 32, 3, 2, 1, 1, Activation::Relu),
        (32, 32, 3, 1, 1, 32, Activation::Silu),
        (32, 64, 1, 1, 0, 1, Activation::None),
    ];
    shapes
        .into_iter()
        .enumerate()
        .map(|(i, (cin, cout, k, stride, pad, groups, act))| {
            let mut l = Layer {
                cin,
                cout,
                k,
                stride,
                pad,
                groups,
                act,
                w: Vec::new(),
                bias: values(cout as usize, 100 + i as u64, 0.1),
            };
            let fan_in = (k * k * cin / groups) as f32;
            l.w = values(l.w_len().unwrap_or(0), 1 + i as u64, 1.0 / fan_in.sqrt());
            l
        })
        .collect()
}

fn write(path: &Path, layers: &[Layer]) -> std::io::Result<()> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&(layers.len() as u32).to_le_bytes());
    for l in layers {
        for v in [l.cin, l.cout, l.k, l.stride, l.pad, l.groups, l.act as u64] {
            out.extend_from_slice(&(v as u32).to_le_bytes());
        }
        for v in l.w.iter().chain(&l.bias) {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    std::fs::write(path, out)
}

/// Reads what [`write`] wrote; a short, foreign or inconsistent file is an
/// error naming what is wrong.
fn read(path: &Path) -> Result<Vec<Layer>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], String> {
        let end = at.checked_add(n).filter(|e| *e <= bytes.len());
        let end = end.ok_or_else(|| format!("truncated at byte {at} (wanted {n} more)"))?;
        let s = &bytes[at..end];
        at = end;
        Ok(s)
    };
    if take(8)? != MAGIC {
        return Err("not a weft-cnn file".to_owned());
    }
    let u32_at = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64;
    let count = u32_at(take(4)?);
    if count > 64 {
        return Err(format!("{count} layers"));
    }
    let mut layers = Vec::new();
    for _ in 0..count {
        let f: Vec<u64> = take(28)?.chunks_exact(4).map(u32_at).collect();
        let act = Activation::from_code(f[6]).ok_or_else(|| format!("activation {}", f[6]))?;
        let mut l = Layer {
            cin: f[0],
            cout: f[1],
            k: f[2],
            stride: f[3],
            pad: f[4],
            groups: f[5],
            act,
            w: Vec::new(),
            bias: Vec::new(),
        };
        let floats = |b: &[u8]| -> Vec<f32> {
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        let n = l.w_len()?;
        l.w = floats(take(4 * n)?);
        l.bias = floats(take(4 * l.cout as usize)?);
        layers.push(l);
    }
    if at != bytes.len() {
        return Err(format!("{} bytes after the last layer", bytes.len() - at));
    }
    Ok(layers)
}

fn main() -> Result<(), Box<dyn Error>> {
    let arg = |i: usize, default: u64| -> Result<u64, Box<dyn Error>> {
        match std::env::args().nth(i) {
            Some(a) => Ok(a.parse().map_err(|_| format!("`{a}` is not a number"))?),
            None => Ok(default),
        }
    };
    let (size, threads) = (arg(1, 56)?, arg(2, 2)? as usize);
    let path = std::env::temp_dir().join("weft-cnn.bin");
    write(&path, &model())?;
    let layers = read(&path)?;
    println!("weights: {} ({} layers)", path.display(), layers.len());

    // Each layer's geometry follows from the one before.
    let mut geometries = Vec::new();
    let mut side = size;
    for (i, l) in layers.iter().enumerate() {
        let g = l.geometry(side);
        let s = g.check().map_err(|e| format!("layer {i}: {e}"))?;
        if i > 0 && l.cin != layers[i - 1].cout {
            return Err(format!(
                "layer {i} takes {} channels, gets {}",
                l.cin,
                layers[i - 1].cout
            )
            .into());
        }
        side = s.out_w;
        geometries.push(g);
    }
    // A 1 × 1 layer is a region: the planner chooses between the
    // convolution and the GEMM over pixels (`weft_conv::pointwise`).
    let mut sites = Vec::new();
    let mut regions = Vec::new();
    for (i, (l, g)) in layers.iter().zip(&geometries).enumerate() {
        let label = format!("layer{i}");
        if pointwise::serves(g).is_ok() {
            regions.push(pointwise::region(&label, g, &l.w, Some(&l.bias))?);
        } else {
            sites.push(weft_conv::site(g, &l.w, Some(&l.bias))?.with_label(label));
        }
    }

    let mut catalogue = Catalogue::new();
    catalogue.register_all(weft_conv::entries())?;
    catalogue.register_all([pointwise::entry(), weft_gemm::entry()])?;
    let mut planner = Planner::for_host(catalogue, weft_host::Host::detect(), Options::from_env()?);
    let plan = planner.compile_with_regions(&sites, &regions)?;
    println!("{}", plan.report());

    // How each layer runs: its site's kernel and packed filter, or its
    // region's runner.
    let mut runs = Vec::new();
    for (i, g) in geometries.iter().enumerate() {
        let label = format!("layer{i}");
        runs.push(if pointwise::serves(g).is_ok() {
            Run::Region(Box::new(pointwise::Pointwise::new(&plan, &label, g)?))
        } else {
            let at = plan.resolve(&label)?;
            Run::Site(
                at,
                PackedFilter::from_site(plan.sites()[at].packed("w"), g)?,
            )
        });
    }
    let exec = Executor::new(threads);
    let image = values(geometries[0].x_len(), 7, 1.0);
    let mut best = f64::INFINITY;
    let mut acts: Vec<Vec<f32>> = Vec::new();
    for _ in 0..5 {
        acts = vec![image.clone()];
        let t = Instant::now();
        for (i, g) in geometries.iter().enumerate() {
            let mut y = vec![0.0f32; g.y_len(&g.check()?)];
            match &runs[i] {
                Run::Site(at, filter) => {
                    let args = ConvArgs::new(g, &acts[i], filter, &mut y)?;
                    let kernel = plan.kernel::<ConvArgs>(*at)?;
                    // SAFETY: `args` was checked against the input, the
                    // packed filter and `y`, all live and untouched until
                    // it returns.
                    unsafe { kernel.run(&exec, &args) };
                }
                Run::Region(layer) => layer.run(&plan, &exec, &acts[i], &mut y)?,
            }
            acts.push(y);
        }
        best = best.min(t.elapsed().as_secs_f64());
    }

    let mut macs = 0;
    for (i, g) in geometries.iter().enumerate() {
        let shape = g.check()?;
        macs += g.macs(&shape);
        let mut want = vec![0.0f32; g.y_len(&shape)];
        let l = &layers[i];
        reference::conv2d(g, &acts[i], &l.w, Some(&l.bias), &mut want, 0..shape.out_h);
        let got = &acts[i + 1];
        // A region's alternatives both keep the conv contract.
        let (how, shared) = match &runs[i] {
            Run::Site(at, _) => {
                let s = &plan.sites()[*at];
                (
                    format!("{} by {}", s.family, s.candidate),
                    s.contract == weft_conv::contract(s.family, &s.geometry),
                )
            }
            Run::Region(layer) => {
                let r = plan.region(&format!("layer{i}"))?;
                let name = |at: &usize| plan.sites()[*at].candidate.to_string();
                let chosen = match layer.choice() {
                    Alternative::Chain => r.chain.iter().map(name).collect::<Vec<_>>().join(" → "),
                    Alternative::Fused => name(&r.fused),
                };
                (
                    format!("1 × 1 region, {:?}: {chosen}", layer.choice()),
                    true,
                )
            }
        };
        let same = got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        println!(
            "layer{i}: {} → {}×{}×{} ({}): {}",
            how,
            shape.out_h,
            shape.out_w,
            g.cout,
            if shared {
                "the shared contract"
            } else {
                "an arithmetic of its own"
            },
            if same {
                "bit for bit the reference".to_owned()
            } else {
                format!("largest difference from the reference {worst:e}")
            }
        );
        if shared && !same {
            return Err(format!("layer{i}: {how} does not give the reference's bits").into());
        }
    }
    println!(
        "three layers: {:.3} ms on {threads} threads ({:.1} GFLOP/s)",
        best * 1e3,
        2.0 * macs as f64 / best / 1e9
    );
    Ok(())
}
