//! `cargo xtask bench loopnest`: nanoseconds per call of each generated
//! kernel of weft-loopnest at SmolLM2-135M's shapes (one token), next to a
//! plain Rust loop doing the same work (rustc release, whatever LLVM
//! vectorises; glibc `expf` for SiLU). The peer is a speed yardstick only:
//! its sums run in another order, so its bits may differ. Candidates run
//! interleaved (one timed batch each per round, rounds repeated) and each
//! reports its median. `cargo xtask bench` always runs from a release
//! build (see `main.rs`).

use std::hint::black_box;
use std::time::Instant;

use weft_loopnest::ops::embed::Table;
use weft_loopnest::{
    Add, AddKernel, Argmax, ArgmaxKernel, EmbedKernel, EmbedQ8_0, RmsNorm, RmsNormKernel, Rope,
    RopeKernel, RopeTable, SiluMul, SiluMulKernel,
};

extern "C" {
    fn expf(x: f32) -> f32;
}

/// Calls per timed batch.
const CALLS: usize = 256;
/// Interleaved rounds; the median is reported.
const ROUNDS: usize = 31;

const DIM: usize = 576;
const FFN: usize = 1536;
const HEADS: usize = 9;
const KV_HEADS: usize = 3;
const HEAD_DIM: usize = 64;
const VOCAB: usize = 49152;

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
        })
        .collect()
}

/// Median nanoseconds per call of `a` (the arm) and `b` (the peer), timed
/// in alternating batches.
fn race(
    mut a: impl FnMut() -> Result<(), String>,
    mut b: impl FnMut(),
) -> Result<(f64, f64), String> {
    a()?;
    b();
    let (mut ta, mut tb) = (Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS));
    for _ in 0..ROUNDS {
        let t = Instant::now();
        for _ in 0..CALLS {
            a()?;
        }
        ta.push(t.elapsed().as_nanos() as f64 / CALLS as f64);
        let t = Instant::now();
        for _ in 0..CALLS {
            b();
        }
        tb.push(t.elapsed().as_nanos() as f64 / CALLS as f64);
    }
    Ok((median(ta), median(tb)))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn err(e: weft_kernel::Refusal) -> String {
    e.to_string()
}

/// Entry point: `bench loopnest`.
pub fn run(args: &[String]) -> Result<(), String> {
    match args.first().map(String::as_str) {
        Some("loopnest") => {}
        other => return Err(format!("bench: unknown benchmark {other:?} (loopnest)")),
    }
    let mut rows: Vec<(&str, f64, f64)> = Vec::new();

    // RMSNorm, one row of 576.
    let k = RmsNormKernel::of_arm(RmsNorm::new(DIM, 1).map_err(err)?).map_err(err)?;
    let (x, w) = (values(DIM, 1), values(DIM, 2));
    let (mut y1, mut y2) = (vec![0f32; DIM], vec![0f32; DIM]);
    let (a, b) = race(
        || k.run(black_box(&x), &w, &mut y1, 1e-5).map_err(err),
        || {
            let x = black_box(&x);
            let ss: f32 = x.iter().map(|v| v * v).sum();
            let scale = 1.0 / (ss / DIM as f32 + 1e-5).sqrt();
            for ((o, v), w) in y2.iter_mut().zip(x).zip(&w) {
                *o = v * scale * w;
            }
            black_box(&mut y2);
        },
    )?;
    rows.push(("rmsnorm 576", a, b));

    // RoPE on Q (9×64) and K (3×64) at position 100.
    let table = RopeTable::new(100000.0, HEAD_DIM, 128).map_err(err)?;
    let k = RopeKernel::of_arm(Rope::new(HEADS, KV_HEADS, HEAD_DIM, HEAD_DIM, 1).map_err(err)?)
        .map_err(err)?;
    let (mut q1, mut k1) = (values(HEADS * HEAD_DIM, 3), values(KV_HEADS * HEAD_DIM, 4));
    let (mut q2, mut k2) = (q1.clone(), k1.clone());
    let t = table.as_slice();
    let (a, b) = race(
        || k.run(black_box(&mut q1), &mut k1, &table, 100).map_err(err),
        || {
            let row = &t[100 * 2 * HEAD_DIM..][..2 * HEAD_DIM];
            for buf in [black_box(&mut q2), &mut k2] {
                for head in buf.chunks_exact_mut(HEAD_DIM) {
                    for i in 0..HEAD_DIM / 2 {
                        let (c, s) = (row[2 * i], row[HEAD_DIM + 2 * i + 1]);
                        let (x0, x1) = (head[2 * i], head[2 * i + 1]);
                        head[2 * i] = x0 * c - x1 * s;
                        head[2 * i + 1] = x0 * s + x1 * c;
                    }
                }
            }
        },
    )?;
    rows.push(("rope 9+3 heads × 64", a, b));

    // SiLU-gated product over the FFN width.
    let k = SiluMulKernel::of_arm(SiluMul::new(FFN).map_err(err)?).map_err(err)?;
    let (g, u) = (values(FFN, 5), values(FFN, 6));
    let (mut h1, mut h2) = (vec![0f32; FFN], vec![0f32; FFN]);
    let (a, b) = race(
        || k.run(black_box(&g), &u, &mut h1).map_err(err),
        || {
            for ((o, g), u) in h2.iter_mut().zip(black_box(&g)).zip(&u) {
                // SAFETY: expf is a pure libm function.
                *o = g / (1.0 + unsafe { expf(-g) }) * u;
            }
            black_box(&mut h2);
        },
    )?;
    rows.push(("silu_mul 1536", a, b));

    // Residual add.
    let k = AddKernel::of_arm(Add::new(DIM).map_err(err)?).map_err(err)?;
    let y = values(DIM, 7);
    let (mut x1, mut x2) = (values(DIM, 8), values(DIM, 8));
    let (a, b) = race(
        || k.run(black_box(&mut x1), &y).map_err(err),
        || {
            for (x, y) in black_box(&mut x2).iter_mut().zip(&y) {
                *x += y;
            }
        },
    )?;
    rows.push(("add 576", a, b));

    // One token's row from the Q8_0 embedding table.
    let op = EmbedQ8_0::new(VOCAB, DIM, 1).map_err(err)?;
    let k = EmbedKernel::of_arm(op).map_err(err)?;
    let bytes: Vec<u8> = (0..VOCAB * op.row_bytes())
        .map(|i| if i % 34 == 1 { 0x1c } else { (i * 131) as u8 })
        .collect();
    let (mut e1, mut e2) = (vec![0f32; DIM], vec![0f32; DIM]);
    let ids = [12345u32];
    let (a, b) = race(
        || {
            k.run(Table::Q8_0(&bytes), black_box(&ids), &mut e1)
                .map_err(err)
        },
        || {
            let row = &bytes[black_box(ids[0]) as usize * op.row_bytes()..][..op.row_bytes()];
            for (blk, out) in row.chunks_exact(34).zip(e2.chunks_exact_mut(32)) {
                let d = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
                for (o, q) in out.iter_mut().zip(&blk[2..]) {
                    *o = d * f32::from(*q as i8);
                }
            }
            black_box(&mut e2);
        },
    )?;
    rows.push(("embed_q8_0 1 × 576", a, b));

    // Argmax over the vocabulary.
    let k = ArgmaxKernel::of_arm(Argmax::new(VOCAB).map_err(err)?).map_err(err)?;
    let logits = values(VOCAB, 9);
    let (a, b) = race(
        || k.run(black_box(&logits)).map(|_| ()).map_err(err),
        || {
            let l = black_box(&logits);
            let mut best = 0;
            for (i, v) in l.iter().enumerate() {
                if *v > l[best] {
                    best = i;
                }
            }
            black_box(best);
        },
    )?;
    rows.push(("argmax 49152", a, b));

    println!(
        "  {:<22} {:>10} {:>10} {:>8}",
        "op", "arm ns", "rust ns", "ratio"
    );
    for (name, a, b) in &rows {
        println!("  {name:<22} {a:>10.1} {b:>10.1} {:>8.2}", b / a);
    }
    let total_arm: f64 = rows.iter().map(|r| r.1).sum();
    let total_peer: f64 = rows.iter().map(|r| r.2).sum();
    println!(
        "bench loopnest: arm_total_ns={total_arm:.0} rust_total_ns={total_peer:.0} \
         speedup_vs_rust={:.2}",
        total_peer / total_arm
    );
    Ok(())
}
