//! The scalar definition of the family: the contract's three steps, one
//! output at a time, with `f32::mul_add` as the fused multiply-add. Every
//! arm and twin must give these bits (NaNs by class).

use std::ops::Range;

use crate::MatRef;

/// `C ← α·A·B + β·C` over `rows × cols`, exactly as the contract says;
/// `b(kk, j)` reads B in whatever layout the caller holds it.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    a: MatRef<'_>,
    b: impl Fn(usize, usize) -> f32,
    c: &mut [f32],
    ldc: usize,
    (alpha, beta): (f32, f32),
    rows: Range<usize>,
    cols: Range<usize>,
) {
    for i in rows {
        for j in cols.clone() {
            let out = &mut c[i * ldc + j];
            let mut acc = if beta != 0.0 { beta * *out } else { 0.0 };
            for kk in 0..a.cols {
                acc = (alpha * a.data[i * a.ld + kk]).mul_add(b(kk, j), acc);
            }
            *out = acc;
        }
    }
}
