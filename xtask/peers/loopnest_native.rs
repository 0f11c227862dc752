//! The plain-Rust peer of `cargo xtask bench loopnest`, compiled by the
//! bench itself with `rustc -C opt-level=3 -C target-cpu=native` into a
//! shared library: the same loops a user would write, with every vector
//! extension of the host open to LLVM. Speed yardstick only; sums run in
//! LLVM's order, so bits may differ from Weft's kernels.
//!
//! Every entry point takes raw pointers and lengths (the C ABI); the caller
//! passes live, correctly sized buffers.

#![allow(clippy::missing_safety_doc)]

use std::slice::{from_raw_parts, from_raw_parts_mut};

extern "C" {
    fn expf(x: f32) -> f32;
}

#[no_mangle]
pub unsafe extern "C" fn peer_rmsnorm(x: *const f32, w: *const f32, y: *mut f32, n: usize, eps: f32) {
    let (x, w, y) = (from_raw_parts(x, n), from_raw_parts(w, n), from_raw_parts_mut(y, n));
    // eight partial sums, so LLVM may vectorise the reduction without fast-math
    let mut acc = [0f32; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for j in 0..8 {
            acc[j] += c[j] * c[j];
        }
    }
    let mut ss: f32 = acc.iter().sum();
    for v in chunks.remainder() {
        ss += v * v;
    }
    let scale = 1.0 / (ss / n as f32 + eps).sqrt();
    for ((o, v), w) in y.iter_mut().zip(x).zip(w) {
        *o = v * scale * w;
    }
}

/// Rotate interleaved pairs of `heads × head_dim` values in place;
/// `row` is one position's row of Weft's `RopeTable`: `head_dim` cosines
/// (each duplicated per pair), then `head_dim` values `-sin, sin` per pair.
#[no_mangle]
pub unsafe extern "C" fn peer_rope(buf: *mut f32, heads: usize, head_dim: usize, row: *const f32) {
    let buf = from_raw_parts_mut(buf, heads * head_dim);
    let row = from_raw_parts(row, 2 * head_dim);
    let (cos, sin) = row.split_at(head_dim);
    for head in buf.chunks_exact_mut(head_dim) {
        for i in 0..head_dim / 2 {
            let (c, s) = (cos[2 * i], sin[2 * i + 1]);
            let (x0, x1) = (head[2 * i], head[2 * i + 1]);
            head[2 * i] = x0 * c - x1 * s;
            head[2 * i + 1] = x0 * s + x1 * c;
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn peer_silu_mul(g: *const f32, u: *const f32, h: *mut f32, n: usize) {
    let (g, u, h) = (from_raw_parts(g, n), from_raw_parts(u, n), from_raw_parts_mut(h, n));
    for ((o, g), u) in h.iter_mut().zip(g).zip(u) {
        *o = g / (1.0 + expf(-g)) * u;
    }
}

#[no_mangle]
pub unsafe extern "C" fn peer_add(x: *mut f32, y: *const f32, n: usize) {
    let (x, y) = (from_raw_parts_mut(x, n), from_raw_parts(y, n));
    for (x, y) in x.iter_mut().zip(y) {
        *x += y;
    }
}

/// IEEE half to single (no `half` crate here: this file builds alone).
fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // subnormal: m * 2^-24, exact in f32
            let v = m as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -v } else { v };
        }
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// One token's row of a Q8_0 table (34-byte blocks: f16 scale, 32 × i8).
#[no_mangle]
pub unsafe extern "C" fn peer_embed_q8_0(table: *const u8, row_bytes: usize, id: usize, out: *mut f32, dim: usize) {
    let row = from_raw_parts(table.add(id * row_bytes), row_bytes);
    let out = from_raw_parts_mut(out, dim);
    for (blk, out) in row.chunks_exact(34).zip(out.chunks_exact_mut(32)) {
        let d = f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
        for (o, q) in out.iter_mut().zip(&blk[2..]) {
            *o = d * f32::from(*q as i8);
        }
    }
}

/// The first index of the largest value (no NaN among the logits): a
/// lane-parallel max that vectorises, then a vectorised search for its
/// first position.
#[no_mangle]
pub unsafe extern "C" fn peer_argmax(x: *const f32, n: usize) -> usize {
    let x = from_raw_parts(x, n);
    let mut m = [f32::NEG_INFINITY; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for j in 0..16 {
            m[j] = if c[j] > m[j] { c[j] } else { m[j] };
        }
    }
    let mut best = f32::NEG_INFINITY;
    for v in m.iter().chain(chunks.remainder()) {
        best = if *v > best { *v } else { best };
    }
    // find the first 64-wide chunk holding `best` with a branch-free test
    // that vectorises, then its first position inside
    let mut base = 0;
    for c in x.chunks(64) {
        if c.iter().fold(false, |hit, v| hit | (*v == best)) {
            return base + c.iter().position(|v| *v == best).unwrap_or(0);
        }
        base += c.len();
    }
    0
}
