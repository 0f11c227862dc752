//! `cargo xtask bench loopnest`: nanoseconds per call of each generated
//! kernel of weft-loopnest at SmolLM2-135M's shapes (one token), next to
//! plain Rust doing the same work, compiled by this bench with
//! `rustc -C opt-level=3 -C target-cpu=native` (`peers/loopnest_native.rs`,
//! loaded as a shared library): every vector extension of the host open to
//! LLVM, reductions written so LLVM can vectorise them, an argmax that
//! vectorises both its max and its search. The peer is a speed yardstick
//! only: its sums run in another order, so its bits may differ.
//!
//! The totals weight each op by its calls per decoded token in SmolLM2-135M
//! ([`LAYERS`] layers: two RMSNorms, one RoPE, one SiLU-gated product and
//! two residual adds per layer; a final RMSNorm; one embedding row and one
//! argmax per token). Arm and peer run in alternating batches, the first
//! of the pair alternating each round, and each reports its median.
//! `cargo xtask bench` always runs from a release build (see `main.rs`).

use std::ffi::{c_void, CString};
use std::hint::black_box;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use weft_loopnest::ops::embed::Table;
use weft_loopnest::{
    Add, AddKernel, Argmax, ArgmaxKernel, EmbedKernel, EmbedQ8_0, RmsNorm, RmsNormKernel, Rope,
    RopeKernel, RopeTable, SiluMul, SiluMulKernel,
};

/// Calls per timed batch.
const CALLS: usize = 256;
/// Interleaved rounds; the median is reported.
const ROUNDS: usize = 31;

const LAYERS: usize = 30;
const DIM: usize = 576;
const FFN: usize = 1536;
const HEADS: usize = 9;
const KV_HEADS: usize = 3;
const HEAD_DIM: usize = 64;
const VOCAB: usize = 49152;

/// The peer's source, compiled at bench time for this host.
const PEER_SOURCE: &str = include_str!("../peers/loopnest_native.rs");

type RmsNormFn = unsafe extern "C" fn(*const f32, *const f32, *mut f32, usize, f32);
type RopeFn = unsafe extern "C" fn(*mut f32, usize, usize, *const f32);
type SiluMulFn = unsafe extern "C" fn(*const f32, *const f32, *mut f32, usize);
type AddFn = unsafe extern "C" fn(*mut f32, *const f32, usize);
type EmbedFn = unsafe extern "C" fn(*const u8, usize, usize, *mut f32, usize);
type ArgmaxFn = unsafe extern "C" fn(*const f32, usize) -> usize;

/// The native-compiled peer's entry points (the library stays loaded for
/// the life of the process: it is never closed).
struct Peer {
    rmsnorm: RmsNormFn,
    rope: RopeFn,
    silu_mul: SiluMulFn,
    add: AddFn,
    embed_q8_0: EmbedFn,
    argmax: ArgmaxFn,
}

impl Peer {
    /// Compile `PEER_SOURCE` with the toolchain running this xtask and load it.
    fn build() -> Result<Peer, String> {
        let dir = crate::peer::dir().join("loopnest");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let src = dir.join("loopnest_native.rs");
        std::fs::write(&src, PEER_SOURCE).map_err(|e| format!("{}: {e}", src.display()))?;
        let lib: PathBuf = dir.join("libweft_loopnest_peer.so");
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let status = Command::new(&rustc)
            .args(["--edition", "2021", "--crate-type", "cdylib"])
            .args([
                "-C",
                "opt-level=3",
                "-C",
                "target-cpu=native",
                "-C",
                "panic=abort",
            ])
            .arg("-o")
            .arg(&lib)
            .arg(&src)
            .status()
            .map_err(|e| format!("cannot run {}: {e}", rustc.to_string_lossy()))?;
        if !status.success() {
            return Err(format!("the native Rust peer did not compile ({status})"));
        }
        let path = CString::new(lib.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: `path` is a NUL-terminated path; the library has no
        // initialisers beyond Rust's std runtime.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(format!("dlopen {} failed", lib.display()));
        }
        let sym = |name: &str| -> Result<*mut c_void, String> {
            let c = CString::new(name).map_err(|e| e.to_string())?;
            // SAFETY: `handle` is a live library handle, `c` a NUL-terminated name.
            let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
            if p.is_null() {
                Err(format!("the native peer lacks {name}"))
            } else {
                Ok(p)
            }
        };
        // SAFETY: each symbol is the `extern "C"` function of the same name in
        // PEER_SOURCE, whose signature the matching alias spells out.
        unsafe {
            Ok(Peer {
                rmsnorm: std::mem::transmute::<*mut c_void, RmsNormFn>(sym("peer_rmsnorm")?),
                rope: std::mem::transmute::<*mut c_void, RopeFn>(sym("peer_rope")?),
                silu_mul: std::mem::transmute::<*mut c_void, SiluMulFn>(sym("peer_silu_mul")?),
                add: std::mem::transmute::<*mut c_void, AddFn>(sym("peer_add")?),
                embed_q8_0: std::mem::transmute::<*mut c_void, EmbedFn>(sym("peer_embed_q8_0")?),
                argmax: std::mem::transmute::<*mut c_void, ArgmaxFn>(sym("peer_argmax")?),
            })
        }
    }
}

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
/// in alternating batches; who goes first alternates each round.
fn race(
    mut a: impl FnMut() -> Result<(), String>,
    mut b: impl FnMut(),
) -> Result<(f64, f64), String> {
    a()?;
    b();
    let (mut ta, mut tb) = (Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS));
    for round in 0..ROUNDS {
        for side in [round % 2, 1 - round % 2] {
            let t = Instant::now();
            for _ in 0..CALLS {
                if side == 0 {
                    a()?;
                } else {
                    b();
                }
            }
            let ns = t.elapsed().as_nanos() as f64 / CALLS as f64;
            if side == 0 {
                ta.push(ns);
            } else {
                tb.push(ns);
            }
        }
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
    let peer = Peer::build()?;
    // (op, calls per token, arm ns, peer ns)
    let mut rows: Vec<(&str, usize, f64, f64)> = Vec::new();

    // RMSNorm, one row of 576.
    let k = RmsNormKernel::of_arm(RmsNorm::new(DIM, 1).map_err(err)?).map_err(err)?;
    let (x, w) = (values(DIM, 1), values(DIM, 2));
    let (mut y1, mut y2) = (vec![0f32; DIM], vec![0f32; DIM]);
    let (a, b) = race(
        || k.run(black_box(&x), &w, &mut y1, 1e-5).map_err(err),
        // SAFETY: x, w and y2 hold DIM floats each.
        || unsafe {
            (peer.rmsnorm)(
                black_box(x.as_ptr()),
                w.as_ptr(),
                y2.as_mut_ptr(),
                DIM,
                1e-5,
            )
        },
    )?;
    rows.push(("rmsnorm 576", 2 * LAYERS + 1, a, b));

    // RoPE on Q (9×64) and K (3×64) at position 100.
    let table = RopeTable::new(100000.0, HEAD_DIM, 128).map_err(err)?;
    let k = RopeKernel::of_arm(Rope::new(HEADS, KV_HEADS, HEAD_DIM, HEAD_DIM, 1).map_err(err)?)
        .map_err(err)?;
    let (mut q1, mut k1) = (values(HEADS * HEAD_DIM, 3), values(KV_HEADS * HEAD_DIM, 4));
    let (mut q2, mut k2) = (q1.clone(), k1.clone());
    let row = &table.as_slice()[100 * 2 * HEAD_DIM..][..2 * HEAD_DIM];
    let (a, b) = race(
        || k.run(black_box(&mut q1), &mut k1, &table, 100).map_err(err),
        // SAFETY: q2 and k2 hold HEADS and KV_HEADS heads of HEAD_DIM; `row`
        // holds 2 × HEAD_DIM floats.
        || unsafe {
            (peer.rope)(black_box(q2.as_mut_ptr()), HEADS, HEAD_DIM, row.as_ptr());
            (peer.rope)(k2.as_mut_ptr(), KV_HEADS, HEAD_DIM, row.as_ptr());
        },
    )?;
    rows.push(("rope 9+3 heads × 64", LAYERS, a, b));

    // SiLU-gated product over the FFN width.
    let k = SiluMulKernel::of_arm(SiluMul::new(FFN).map_err(err)?).map_err(err)?;
    let (g, u) = (values(FFN, 5), values(FFN, 6));
    let (mut h1, mut h2) = (vec![0f32; FFN], vec![0f32; FFN]);
    let (a, b) = race(
        || k.run(black_box(&g), &u, &mut h1).map_err(err),
        // SAFETY: g, u and h2 hold FFN floats each.
        || unsafe { (peer.silu_mul)(black_box(g.as_ptr()), u.as_ptr(), h2.as_mut_ptr(), FFN) },
    )?;
    rows.push(("silu_mul 1536", LAYERS, a, b));

    // Residual add.
    let k = AddKernel::of_arm(Add::new(DIM).map_err(err)?).map_err(err)?;
    let y = values(DIM, 7);
    let (mut x1, mut x2) = (values(DIM, 8), values(DIM, 8));
    let (a, b) = race(
        || k.run(black_box(&mut x1), &y).map_err(err),
        // SAFETY: x2 and y hold DIM floats each.
        || unsafe { (peer.add)(black_box(x2.as_mut_ptr()), y.as_ptr(), DIM) },
    )?;
    rows.push(("add 576", 2 * LAYERS, a, b));

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
        // SAFETY: `bytes` holds VOCAB rows of `row_bytes`, the id is below
        // VOCAB and e2 holds DIM floats.
        || unsafe {
            (peer.embed_q8_0)(
                bytes.as_ptr(),
                op.row_bytes(),
                black_box(ids[0]) as usize,
                e2.as_mut_ptr(),
                DIM,
            )
        },
    )?;
    rows.push(("embed_q8_0 1 × 576", 1, a, b));

    // Argmax over the vocabulary.
    let k = ArgmaxKernel::of_arm(Argmax::new(VOCAB).map_err(err)?).map_err(err)?;
    let logits = values(VOCAB, 9);
    let (arm_pick, peer_pick) = (
        k.run(&logits).map_err(err)? as usize,
        // SAFETY: `logits` holds VOCAB floats.
        unsafe { (peer.argmax)(logits.as_ptr(), VOCAB) },
    );
    if arm_pick != peer_pick {
        return Err(format!(
            "argmax: the arm picks {arm_pick}, the native peer {peer_pick}: the peer is wrong or the arm is"
        ));
    }
    let (a, b) = race(
        || k.run(black_box(&logits)).map(|_| ()).map_err(err),
        || {
            // SAFETY: `logits` holds VOCAB floats.
            black_box(unsafe { (peer.argmax)(black_box(logits.as_ptr()), VOCAB) });
        },
    )?;
    rows.push(("argmax 49152", 1, a, b));

    println!(
        "  {:<22} {:>6} {:>10} {:>12} {:>8}",
        "op", "×/tok", "arm ns", "native ns", "ratio"
    );
    for (name, n, a, b) in &rows {
        println!("  {name:<22} {n:>6} {a:>10.1} {b:>12.1} {:>8.2}", b / a);
    }
    let total_arm: f64 = rows.iter().map(|r| r.1 as f64 * r.2).sum();
    let total_peer: f64 = rows.iter().map(|r| r.1 as f64 * r.3).sum();
    println!(
        "bench loopnest: arm_ns_per_token={total_arm:.0} native_rust_ns_per_token={total_peer:.0} \
         speedup_vs_native_rust={:.2}",
        total_peer / total_arm
    );
    Ok(())
}
