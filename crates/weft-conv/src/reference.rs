//! The scalar definition of both families: the contract's steps, one
//! output at a time, with `f32::mul_add` as the fused multiply-add, over
//! the caller's own OHWI filter (never the packed one, so packing is
//! checked too). Every arm and twin must give these bits (NaNs by class).
//! It serves every geometry, grouped convolutions included.

use std::ops::Range;

use crate::ConvGeometry;

/// y's flattened output rows `rows` (`b · out_h + oh`) for `g`, exactly as
/// the contract says; `w` is OHWI, `bias` is `cout` or absent. `x` and `y`
/// are dense NHWC; `g` must be checked (panics otherwise: this is a test
/// oracle, not a kernel).
pub fn conv2d(
    g: &ConvGeometry,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    rows: Range<u64>,
) {
    let s = g.check().expect("the reference runs checked geometries");
    let (cin_g, cout_g) = (g.cin / g.groups, g.cout / g.groups);
    let at = |v: u64| v as usize;
    for row in rows {
        let (b, oh) = (row / s.out_h, row % s.out_h);
        for ow in 0..s.out_w {
            for co in 0..g.cout {
                let grp = co / cout_g;
                let mut acc = bias.map_or(0.0, |bs| bs[at(co)]);
                for kh in 0..g.k_h {
                    let ih = (oh * g.stride + kh * g.dil).wrapping_sub(g.pad);
                    if ih >= g.in_h {
                        continue;
                    }
                    for kw in 0..g.k_w {
                        let iw = (ow * g.stride + kw * g.dil).wrapping_sub(g.pad);
                        if iw >= g.in_w {
                            continue;
                        }
                        for ci in 0..cin_g {
                            let xv =
                                x[at(((b * g.in_h + ih) * g.in_w + iw) * g.cin + grp * cin_g + ci)];
                            let wv = w[at(((co * g.k_h + kh) * g.k_w + kw) * cin_g + ci)];
                            acc = xv.mul_add(wv, acc);
                        }
                    }
                }
                y[at((row * s.out_w + ow) * g.cout + co)] = g.act.apply(acc);
            }
        }
    }
}
