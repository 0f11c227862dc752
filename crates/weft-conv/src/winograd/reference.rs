//! The scalar definition of the Winograd arm's contract, tile by tile,
//! over the caller's own OHWI filter (its own transform of it, never the
//! packed `U`, so packing is checked too), with `f32::mul_add` as the
//! fused multiply-add. Every Winograd body must give these bits (NaNs by
//! class).

use std::ops::Range;

use crate::ConvGeometry;

/// `G g Gᵀ` of one `(co, ci)`: rows of `g` first, then columns (the
/// contract's step 3), written apart from the packing's.
fn transform_filter(g: &[[f32; 3]; 3]) -> [f32; 16] {
    let half = 0.5f32;
    let col = |a: f32, b: f32, c: f32| [a, ((a + b) + c) * half, ((a - b) + c) * half, c];
    // s is 4 × 3: column k of g transformed.
    let mut s = [[0.0f32; 3]; 4];
    for k in 0..3 {
        let t = col(g[0][k], g[1][k], g[2][k]);
        for (i, v) in t.into_iter().enumerate() {
            s[i][k] = v;
        }
    }
    let mut u = [0.0f32; 16];
    for i in 0..4 {
        let t = col(s[i][0], s[i][1], s[i][2]);
        u[4 * i..4 * i + 4].copy_from_slice(&t);
    }
    u
}

/// `Bᵀ d B` of one 4 × 4 tile (row-major), columns within a row first.
fn transform_input(d: &[f32; 16]) -> [f32; 16] {
    let b = |a0: f32, a1: f32, a2: f32, a3: f32| [a0 - a2, a1 + a2, a2 - a1, a1 - a3];
    let mut e = [0.0f32; 16];
    for i in 0..4 {
        let r = b(d[4 * i], d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]);
        e[4 * i..4 * i + 4].copy_from_slice(&r);
    }
    let mut v = [0.0f32; 16];
    for j in 0..4 {
        let c = b(e[j], e[4 + j], e[8 + j], e[12 + j]);
        for (i, x) in c.into_iter().enumerate() {
            v[4 * i + j] = x;
        }
    }
    v
}

/// `Aᵀ M A` of one position grid (row-major 4 × 4), rows first: the 2 × 2
/// outputs, row-major.
fn transform_output(m: &[f32; 16]) -> [f32; 4] {
    let a = |a0: f32, a1: f32, a2: f32, a3: f32| [(a0 + a1) + a2, (a1 - a2) - a3];
    let mut r = [[0.0f32; 4]; 2];
    for j in 0..4 {
        let c = a(m[j], m[4 + j], m[8 + j], m[12 + j]);
        r[0][j] = c[0];
        r[1][j] = c[1];
    }
    let y0 = a(r[0][0], r[0][1], r[0][2], r[0][3]);
    let y1 = a(r[1][0], r[1][1], r[1][2], r[1][3]);
    [y0[0], y0[1], y1[0], y1[1]]
}

/// y's flattened output rows `rows` for `g` (which the Winograd arm must
/// serve), exactly as the contract says; `w` is OHWI, `bias` is `cout` or
/// absent; `x` and `y` dense NHWC. Panics on an unchecked geometry (a
/// test oracle, not a kernel).
pub fn conv2d(
    g: &ConvGeometry,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    rows: Range<u64>,
) {
    let s = g.check().expect("the reference runs checked geometries");
    assert!(super::serves(g).is_ok(), "a geometry the arm serves");
    let (cin, cout) = (g.cin as usize, g.cout as usize);
    let (in_h, in_w) = (g.in_h as i64, g.in_w as i64);
    let (out_h, out_w) = (s.out_h, s.out_w);
    // U[co][ci][ξ].
    let mut u = vec![[0.0f32; 16]; cout * cin];
    for co in 0..cout {
        for ci in 0..cin {
            let mut t = [[0.0f32; 3]; 3];
            for (r, row) in t.iter_mut().enumerate() {
                for (c, v) in row.iter_mut().enumerate() {
                    *v = w[((co * 3 + r) * 3 + c) * cin + ci];
                }
            }
            u[co * cin + ci] = transform_filter(&t);
        }
    }
    let mut v = vec![[0.0f32; 16]; cin];
    for b in 0..g.batch {
        for th in 0..out_h.div_ceil(2) {
            let r0 = b * out_h + 2 * th;
            let wanted = |oh: u64| oh < out_h && rows.contains(&(b * out_h + oh));
            if !wanted(2 * th) && !wanted(2 * th + 1) {
                continue;
            }
            for tw in 0..out_w.div_ceil(2) {
                for (ci, vc) in v.iter_mut().enumerate() {
                    let mut d = [0.0f32; 16];
                    for i in 0..4 {
                        for j in 0..4 {
                            let ih = 2 * th as i64 - g.pad as i64 + i as i64;
                            let iw = 2 * tw as i64 - g.pad as i64 + j as i64;
                            if (0..in_h).contains(&ih) && (0..in_w).contains(&iw) {
                                let at = ((b as i64 * in_h + ih) * in_w + iw) as usize * cin + ci;
                                d[4 * i + j] = x[at];
                            }
                        }
                    }
                    *vc = transform_input(&d);
                }
                for co in 0..cout {
                    let mut m = [0.0f32; 16];
                    for (xi, mx) in m.iter_mut().enumerate() {
                        let mut acc = 0.0f32;
                        for (ci, vc) in v.iter().enumerate() {
                            acc = vc[xi].mul_add(u[co * cin + ci][xi], acc);
                        }
                        *mx = acc;
                    }
                    let out = transform_output(&m);
                    let bv = bias.map_or(0.0, |bs| bs[co]);
                    for a in 0..2u64 {
                        for c in 0..2u64 {
                            let (oh, ow) = (2 * th + a, 2 * tw + c);
                            if ow < out_w && wanted(oh) {
                                let at = ((r0 + a) * out_w + ow) as usize * cout + co;
                                y[at] = g.act.apply(out[(2 * a + c) as usize] + bv);
                            }
                        }
                    }
                }
            }
        }
    }
}
