//! `cargo xtask bench loopnest`: nanoseconds per call of each generated
//! kernel of weft-loopnest at SmolLM2-135M's shapes (one token), next to
//! plain Rust doing the same work, compiled by this bench with
//! `rustc -C opt-level=3 -C target-cpu=native` (`peers/loopnest_native.rs`,
//! loaded as a shared library): every vector extension of the host open to
//! LLVM, reductions written so LLVM can vectorise them, an argmax that
//! vectorises both its max and its search. The peer is a speed yardstick
//! only: its sums run in another order, so its bits may differ. Beside
//! both, the arm's twin the host runs (the widest tier): for every op
//! but the SiLU-gated product the body weft-loopnest's native lowering
//! generates from the nest, for that one weft-elementwise's exp map; each
//! is judged bit for bit against the arm by the family's own check before
//! it is timed.
//!
//! The totals weight each op by its calls per decoded token in SmolLM2-135M
//! ([`LAYERS`] layers: two RMSNorms, one RoPE, one SiLU-gated product and
//! two residual adds per layer; a final RMSNorm; one embedding row and one
//! argmax per token). Arm, peer and twin run in interleaved batches, who
//! goes first rotating each round, and each reports its median.
//! `cargo xtask bench` always runs from a release build (see `main.rs`).
//!
//! The last line: `bench loopnest: twin_vs_arm_per_token=…
//! twin_vs_native_rust_per_token=… fused_vs_chain_per_token=absent
//! exp_generated_vs_hand=absent …` — the token's arm time over its twins'
//! (an op without a twin counted at its arm's time), the plain Rust
//! peer's over the twins'; fused regions and a generated exp are not
//! built yet; then the per-token totals in ns.

use std::ffi::{c_void, CString};
use std::hint::black_box;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use weft_kernel::{require_features, Host, Judged};
use weft_loopnest::ops::embed::Table;
use weft_loopnest::ops::offer_for;
use weft_loopnest::{
    family_entry, Add, AddKernel, Argmax, ArgmaxKernel, EmbedKernel, EmbedQ8_0, NestOp, Placed,
    RmsNorm, RmsNormKernel, Rope, RopeKernel, RopeTable, SiluMul, SiluMulKernel,
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

/// Median nanoseconds per call of each body, timed in interleaved
/// batches; who goes first rotates each round.
fn race(bodies: &mut [&mut dyn FnMut() -> Result<(), String>]) -> Result<Vec<f64>, String> {
    let n = bodies.len();
    for b in bodies.iter_mut() {
        b()?;
    }
    let mut times = vec![Vec::with_capacity(ROUNDS); n];
    for round in 0..ROUNDS {
        for k in 0..n {
            let side = (round + k) % n;
            let t = Instant::now();
            for _ in 0..CALLS {
                bodies[side]()?;
            }
            times[side].push(t.elapsed().as_nanos() as f64 / CALLS as f64);
        }
    }
    Ok(times.into_iter().map(median).collect())
}

/// The host's widest twin of `op`'s arm, judged bit for bit against the
/// arm by the family's own check and placed; `None` when the family has
/// none the host runs.
fn judged_twin<O: NestOp>(op: O) -> Result<Option<(&'static str, Placed<O>)>, String> {
    let host = Host::detect();
    let offer = offer_for(&op);
    let entry = family_entry::<O>();
    let arm = &entry.arms[0];
    let arm_code = arm.arm.build(&offer, host.isa).map_err(err)?;
    for t in &arm.twins {
        if t.isa() != host.isa || require_features(&host, t.requires()).is_err() {
            continue;
        }
        let code = t.emit(&offer).map_err(err)?;
        let judged = |name, code| Judged { name, code };
        arm.check
            .check(
                judged("arm", &arm_code),
                judged(t.name(), &code),
                &offer,
                &host,
                0x5eed,
            )
            .map_err(|r| format!("{}: {r}", t.name()))?;
        // SAFETY: a twin body for this offer, accepted just above against
        // the arm's body (which honours the leaf ABI for `O::Args`).
        let k = unsafe { Placed::<O>::from_native(&code, op) }.map_err(err)?;
        return Ok(Some((t.name(), k)));
    }
    Ok(None)
}

/// One row of the table: the op, its calls per token, arm and peer ns,
/// and the twin's name and ns if it has one.
type Row = (&'static str, usize, f64, f64, Option<(&'static str, f64)>);

/// A body the race calls.
type Body<'a> = Box<dyn FnMut() -> Result<(), String> + 'a>;

/// The row of `name`: arm, peer and (if any) the named twin raced.
fn timed(
    name: &'static str,
    per_token: usize,
    arm: &mut dyn FnMut() -> Result<(), String>,
    peer: &mut dyn FnMut() -> Result<(), String>,
    twin: Option<(&'static str, Body<'_>)>,
) -> Result<Row, String> {
    match twin {
        Some((twin_name, mut t)) => {
            let ns = race(&mut [arm, peer, &mut *t])?;
            Ok((name, per_token, ns[0], ns[1], Some((twin_name, ns[2]))))
        }
        None => {
            let ns = race(&mut [arm, peer])?;
            Ok((name, per_token, ns[0], ns[1], None))
        }
    }
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
    let mut rows: Vec<Row> = Vec::new();

    // RMSNorm, one row of 576.
    let op = RmsNorm::new(DIM, 1).map_err(err)?;
    let k = RmsNormKernel::of_arm(op).map_err(err)?;
    let twin = judged_twin(op)?;
    let (x, w) = (values(DIM, 1), values(DIM, 2));
    let (mut y1, mut y2, mut y3) = (vec![0f32; DIM], vec![0f32; DIM], vec![0f32; DIM]);
    let mut arm = || k.run(black_box(&x), &w, &mut y1, 1e-5).map_err(err);
    let mut native = || {
        // SAFETY: x, w and y2 hold DIM floats each.
        unsafe {
            (peer.rmsnorm)(
                black_box(x.as_ptr()),
                w.as_ptr(),
                y2.as_mut_ptr(),
                DIM,
                1e-5,
            )
        };
        Ok(())
    };
    rows.push(timed(
        "rmsnorm 576",
        2 * LAYERS + 1,
        &mut arm,
        &mut native,
        twin.as_ref().map(|(n, t)| {
            (
                *n,
                Box::new(|| t.run(black_box(&x), &w, &mut y3, 1e-5).map_err(err)) as Body<'_>,
            )
        }),
    )?);

    // RoPE on Q (9×64) and K (3×64) at position 100.
    let table = RopeTable::new(100000.0, HEAD_DIM, 128).map_err(err)?;
    let op = Rope::new(HEADS, KV_HEADS, HEAD_DIM, HEAD_DIM, 1).map_err(err)?;
    let k = RopeKernel::of_arm(op).map_err(err)?;
    let twin = judged_twin(op)?;
    let (mut q1, mut k1) = (values(HEADS * HEAD_DIM, 3), values(KV_HEADS * HEAD_DIM, 4));
    let (mut q2, mut k2) = (q1.clone(), k1.clone());
    let (mut q3, mut k3) = (q1.clone(), k1.clone());
    let row = &table.as_slice()[100 * 2 * HEAD_DIM..][..2 * HEAD_DIM];
    let mut arm = || k.run(black_box(&mut q1), &mut k1, &table, 100).map_err(err);
    let mut native = || {
        // SAFETY: q2 and k2 hold HEADS and KV_HEADS heads of HEAD_DIM; `row`
        // holds 2 × HEAD_DIM floats.
        unsafe {
            (peer.rope)(black_box(q2.as_mut_ptr()), HEADS, HEAD_DIM, row.as_ptr());
            (peer.rope)(k2.as_mut_ptr(), KV_HEADS, HEAD_DIM, row.as_ptr());
        }
        Ok(())
    };
    rows.push(timed(
        "rope 9+3 heads × 64",
        LAYERS,
        &mut arm,
        &mut native,
        twin.as_ref().map(|(n, t)| {
            (
                *n,
                Box::new(|| t.run(black_box(&mut q3), &mut k3, &table, 100).map_err(err))
                    as Body<'_>,
            )
        }),
    )?);

    // SiLU-gated product over the FFN width.
    let op = SiluMul::new(FFN).map_err(err)?;
    let k = SiluMulKernel::of_arm(op).map_err(err)?;
    let twin = judged_twin(op)?;
    let (g, u) = (values(FFN, 5), values(FFN, 6));
    let (mut h1, mut h2, mut h3) = (vec![0f32; FFN], vec![0f32; FFN], vec![0f32; FFN]);
    let mut arm = || k.run(black_box(&g), &u, &mut h1).map_err(err);
    let mut native = || {
        // SAFETY: g, u and h2 hold FFN floats each.
        unsafe { (peer.silu_mul)(black_box(g.as_ptr()), u.as_ptr(), h2.as_mut_ptr(), FFN) };
        Ok(())
    };
    rows.push(timed(
        "silu_mul 1536",
        LAYERS,
        &mut arm,
        &mut native,
        twin.as_ref().map(|(n, t)| {
            (
                *n,
                Box::new(|| t.run(black_box(&g), &u, &mut h3).map_err(err)) as Body<'_>,
            )
        }),
    )?);

    // Residual add.
    let op = Add::new(DIM).map_err(err)?;
    let k = AddKernel::of_arm(op).map_err(err)?;
    let twin = judged_twin(op)?;
    let y = values(DIM, 7);
    let (mut x1, mut x2, mut x3) = (values(DIM, 8), values(DIM, 8), values(DIM, 8));
    let mut arm = || k.run(black_box(&mut x1), &y).map_err(err);
    let mut native = || {
        // SAFETY: x2 and y hold DIM floats each.
        unsafe { (peer.add)(black_box(x2.as_mut_ptr()), y.as_ptr(), DIM) };
        Ok(())
    };
    rows.push(timed(
        "add 576",
        2 * LAYERS,
        &mut arm,
        &mut native,
        twin.as_ref().map(|(n, t)| {
            (
                *n,
                Box::new(|| t.run(black_box(&mut x3), &y).map_err(err)) as Body<'_>,
            )
        }),
    )?);

    // One token's row from the Q8_0 embedding table.
    let op = EmbedQ8_0::new(VOCAB, DIM, 1).map_err(err)?;
    let k = EmbedKernel::of_arm(op).map_err(err)?;
    let twin = judged_twin(op)?;
    let bytes: Vec<u8> = (0..VOCAB * op.row_bytes())
        .map(|i| if i % 34 == 1 { 0x1c } else { (i * 131) as u8 })
        .collect();
    let (mut e1, mut e2) = (vec![0f32; DIM], vec![0f32; DIM]);
    let ids = [12345u32];
    let mut arm = || {
        k.run(Table::Q8_0(&bytes), black_box(&ids), &mut e1)
            .map_err(err)
    };
    let mut native = || {
        // SAFETY: `bytes` holds VOCAB rows of `row_bytes`, the id is below
        // VOCAB and e2 holds DIM floats.
        unsafe {
            (peer.embed_q8_0)(
                bytes.as_ptr(),
                op.row_bytes(),
                black_box(ids[0]) as usize,
                e2.as_mut_ptr(),
                DIM,
            )
        };
        Ok(())
    };
    let mut e3 = vec![0f32; DIM];
    rows.push(timed(
        "embed_q8_0 1 × 576",
        1,
        &mut arm,
        &mut native,
        twin.as_ref().map(|(n, t)| {
            (
                *n,
                Box::new(|| {
                    t.run(Table::Q8_0(&bytes), black_box(&ids), &mut e3)
                        .map_err(err)
                }) as Body<'_>,
            )
        }),
    )?);

    // Argmax over the vocabulary.
    let op = Argmax::new(VOCAB).map_err(err)?;
    let k = ArgmaxKernel::of_arm(op).map_err(err)?;
    let twin = judged_twin(op)?;
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
    let mut arm = || k.run(black_box(&logits)).map(|_| ()).map_err(err);
    let mut native = || {
        // SAFETY: `logits` holds VOCAB floats.
        black_box(unsafe { (peer.argmax)(black_box(logits.as_ptr()), VOCAB) });
        Ok(())
    };
    rows.push(timed(
        "argmax 49152",
        1,
        &mut arm,
        &mut native,
        twin.as_ref().map(|(n, t)| {
            (
                *n,
                Box::new(|| t.run(black_box(&logits)).map(|_| ()).map_err(err)) as Body<'_>,
            )
        }),
    )?);

    println!(
        "  {:<22} {:>6} {:>10} {:>12} {:>8} {:>10} {:>8}  twin",
        "op", "×/tok", "arm ns", "native ns", "ratio", "twin ns", "ratio"
    );
    for (name, n, a, b, t) in &rows {
        let (tn, tns) = match t {
            Some((tn, tns)) => (*tn, format!("{tns:>10.1} {:>8.2}", tns / a)),
            None => ("—", format!("{:>10} {:>8}", "—", "—")),
        };
        println!(
            "  {name:<22} {n:>6} {a:>10.1} {b:>12.1} {:>8.2} {tns}  {tn}",
            b / a
        );
    }
    let total_arm: f64 = rows.iter().map(|r| r.1 as f64 * r.2).sum();
    let total_peer: f64 = rows.iter().map(|r| r.1 as f64 * r.3).sum();
    // Ops without a twin count at the arm's time.
    let total_twin: f64 = rows
        .iter()
        .map(|r| r.1 as f64 * r.4.map_or(r.2, |(_, t)| t))
        .sum();
    // The names first (fusion and a generated exp are not built:
    // absent), then the totals they come from.
    println!(
        "bench loopnest: twin_vs_arm_per_token={:.2} twin_vs_native_rust_per_token={:.2} \
         fused_vs_chain_per_token=absent exp_generated_vs_hand=absent \
         arm_ns_per_token={total_arm:.0} native_rust_ns_per_token={total_peer:.0} \
         twins_ns_per_token={total_twin:.0} arm_vs_native_rust={:.2}",
        total_arm / total_twin,
        total_peer / total_twin,
        total_peer / total_arm,
    );
    Ok(())
}
