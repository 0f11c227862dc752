//! The arms against the scalar reference, the geometry's typed errors,
//! the packing layouts, the argument checks, the x64 twins before the
//! judge (a mutated body included) and the nests against the bytes.

use weft_kernel::{Arm, Host, Kernel, Site};

use crate::arm::{ArmKind, ConvArm};
use crate::validation::{cases, ConvCase};
use crate::*;

fn reference_output(case: &ConvCase) -> Vec<f32> {
    let mut y = case.y.0.clone();
    reference::conv2d(
        &case.g,
        &case.x.0[case.x.1..],
        &case.w,
        case.bias.as_deref(),
        &mut y[case.y.1..],
        case.rows.clone(),
    );
    y
}

pub(crate) fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

pub(crate) fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 20) as f32 - 8.0
        })
        .collect()
}

fn site_for(kind: ArmKind, g: &ConvGeometry) -> Site {
    let g = match kind {
        ArmKind::Direct => *g,
        ArmKind::Depthwise => g.depthwise(g.cin),
    };
    site(&g, &values(g.w_len(), 3), Some(&values(g.cout as usize, 4))).unwrap()
}

fn arm_kernel(kind: ArmKind, site: &Site) -> (weft_kernel::Offer, weft_kernel::NativeCode) {
    let arm = ConvArm(kind);
    let offer = arm.offer(site, &Host::detect()).unwrap();
    let code = arm
        .build(&offer, weft_managed::arm_build::host_isa())
        .unwrap();
    (offer, code)
}

/// Every arm, on every validation case, gives the scalar reference's bits
/// (NaNs by class) over the whole y buffer: the rows computed as the
/// contract says (from the OHWI filter, not the packed one), everything
/// else untouched.
#[test]
fn every_arm_meets_the_reference_on_every_case() {
    for kind in ArmKind::ALL {
        let (_, code) = arm_kernel(
            kind,
            &site_for(kind, &ConvGeometry::square(1, 8, 8, 8, 3, 1, 1)),
        );
        // SAFETY: the arm's body honours the leaf ABI for ConvArgs.
        let kernel: Kernel<ConvArgs> = unsafe { Kernel::from_native(&code) }.unwrap();
        let all = cases(kind, 11);
        assert!(all.len() > 40, "{kind:?}: {} cases", all.len());
        for (ci, case) in all.iter().enumerate() {
            let want = reference_output(case);
            let mut y = case.y.0.clone();
            let args = case.args(&mut y).unwrap();
            // SAFETY: checked by ConvArgs::rows against live buffers.
            unsafe { kernel.call(&args) };
            if let Some(i) = (0..y.len()).find(|&i| !same(y[i], want[i])) {
                panic!(
                    "{} case {ci} ({:?} rows {:?}): y[{i}] = {:e}, reference {:e}",
                    kind.name(),
                    case.g,
                    case.rows,
                    y[i],
                    want[i]
                );
            }
        }
    }
}

/// The reference itself on a hand-computed case: a 3 × 3 input, one
/// channel, a 2 × 2 kernel of ones, pad 1 at the corners sums only the
/// taps inside, bias added first, and ReLU6 clamps.
#[test]
fn the_reference_sums_only_taps_inside_the_input() {
    let g = ConvGeometry {
        k_h: 2,
        k_w: 2,
        ..ConvGeometry::square(1, 3, 1, 1, 2, 2, 1)
    };
    let s = g.check().unwrap();
    assert_eq!((s.out_h, s.out_w), (2, 2));
    let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    let mut y = vec![0.0; 4];
    reference::conv2d(&g, &x, &[1.0; 4], Some(&[0.5]), &mut y, 0..2);
    // Output (0,0) sees x[0,0] only; (0,1) x[0,1], x[0,2]; (1,0) x[1,0],
    // x[2,0]; (1,1) x[1,1], x[1,2], x[2,1], x[2,2].
    assert_eq!(y, vec![1.5, 5.5, 11.5, 28.5]);
    let mut y6 = vec![0.0; 4];
    reference::conv2d(
        &g.with_act(Activation::Relu6),
        &x,
        &[1.0; 4],
        Some(&[0.5]),
        &mut y6,
        0..2,
    );
    assert_eq!(y6, vec![1.5, 5.5, 6.0, 6.0]);
}

/// The epilogue: ReLU keeps NaN and −0, maps negatives to +0; ReLU6
/// clamps at 6 and keeps NaN.
#[test]
fn the_epilogue_keeps_nan_and_negative_zero() {
    let r = Activation::Relu;
    assert!(r.apply(f32::NAN).is_nan());
    assert_eq!(r.apply(-0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(r.apply(-3.0).to_bits(), 0.0f32.to_bits());
    assert_eq!(r.apply(f32::NEG_INFINITY), 0.0);
    let r6 = Activation::Relu6;
    assert!(r6.apply(f32::NAN).is_nan());
    assert_eq!(r6.apply(f32::INFINITY), 6.0);
    assert_eq!(r6.apply(5.5), 5.5);
    assert_eq!(Activation::None.apply(-2.0), -2.0);
}

/// Impossible geometries are typed errors, by name, and never panics:
/// zero extents, no output, channels not divisible by the groups, sizes
/// that overflow; a site geometry without a dimension or with an unknown
/// epilogue is `bad-geometry`.
#[test]
fn impossible_geometries_are_typed_errors() {
    let ok = ConvGeometry::square(2, 9, 4, 8, 3, 2, 1);
    let s = ok.check().unwrap();
    assert_eq!(
        (s.out_h, s.out_w, s.ow_lo, s.ow_hi, s.panels),
        (5, 5, 1, 4, 1)
    );
    let name = |g: ConvGeometry| g.check().unwrap_err().name();
    assert_eq!(name(ConvGeometry { stride: 0, ..ok }), "zero-extent");
    assert_eq!(name(ConvGeometry { cin: 0, ..ok }), "zero-extent");
    assert_eq!(name(ConvGeometry { k_h: 12, ..ok }), "empty-output");
    assert_eq!(
        name(ConvGeometry {
            dil: 6,
            pad: 0,
            ..ok
        }),
        "empty-output"
    );
    assert_eq!(name(ConvGeometry { groups: 3, ..ok }), "groups-indivisible");
    assert_eq!(
        name(ConvGeometry {
            in_h: 1 << 40,
            ..ok
        }),
        "too-large"
    );
    assert_eq!(
        name(ConvGeometry {
            dil: u64::MAX,
            ..ok
        }),
        "too-large"
    );
    assert_eq!(
        name(ConvGeometry {
            pad: u64::MAX,
            ..ok
        }),
        "too-large"
    );
    assert_eq!(
        name(ConvGeometry {
            batch: 1 << 20,
            in_h: 1 << 10,
            in_w: 1 << 10,
            ..ok
        }),
        "too-large"
    );
    let mut geo = ok.to_geometry();
    assert_eq!(ConvGeometry::from_geometry(&geo).unwrap(), (ok, s));
    geo.set("act", 7);
    assert_eq!(
        ConvGeometry::from_geometry(&geo).unwrap_err().name(),
        "bad-geometry"
    );
    let partial = weft_kernel::Geometry::new().with("batch", 1);
    assert_eq!(
        ConvGeometry::from_geometry(&partial).unwrap_err().name(),
        "bad-geometry"
    );
    // Random extents, huge ones included: an answer, never a panic.
    let mut rng = weft_validate::SplitMix64::new(5);
    for _ in 0..20_000 {
        let mut v = || match rng.below(4) {
            0 => rng.below(4),
            1 => rng.below(64),
            2 => rng.next_u64(),
            _ => 1 << rng.below(64),
        };
        let g = ConvGeometry {
            batch: v(),
            in_h: v(),
            in_w: v(),
            cin: v(),
            cout: v(),
            k_h: v(),
            k_w: v(),
            stride: v(),
            pad: v(),
            dil: v(),
            groups: v(),
            act: Activation::None,
        };
        if let Ok(s) = g.check() {
            assert!(s.ow_lo <= s.ow_hi && s.ow_hi <= s.out_w);
            assert!(g.y_len(&s) as u64 <= MAX_ELEMENTS);
        }
    }
}

/// The interior columns are exactly those whose every tap column is
/// inside the input, at every small geometry.
#[test]
fn interior_columns_are_exactly_those_with_every_tap_inside() {
    for in_w in 1..12u64 {
        for k in 1..6u64 {
            for stride in 1..4u64 {
                for pad in 0..5u64 {
                    for dil in 1..3u64 {
                        let g = ConvGeometry {
                            in_w,
                            k_w: k,
                            dil,
                            ..ConvGeometry::square(1, 4, 1, 1, 1, stride, pad)
                        };
                        let Ok(s) = g.check() else { continue };
                        // The columns with every tap inside, computed
                        // by brute force, are exactly ow_lo..ow_hi.
                        let inside: Vec<u64> = (0..s.out_w)
                            .filter(|&ow| {
                                (0..k).all(|kw| {
                                    let iw = (ow * stride + kw * dil) as i64 - pad as i64;
                                    (0..in_w as i64).contains(&iw)
                                })
                            })
                            .collect();
                        let claimed: Vec<u64> = (s.ow_lo..s.ow_hi).collect();
                        assert_eq!(inside, claimed, "{g:?}");
                    }
                }
            }
        }
    }
}

/// Packing puts every weight and bias where the layout says, pads with
/// zeros, and survives a round trip through an offer's bytes; a filter
/// of the wrong length, a bias of the wrong length and a geometry the
/// arm does not serve are refused by name.
#[test]
fn packing_puts_each_weight_where_the_layout_says() {
    for kind in ArmKind::ALL {
        let base = ConvGeometry {
            k_h: 2,
            ..ConvGeometry::square(1, 5, 5, 21, 3, 1, 1)
        };
        let g = match kind {
            ArmKind::Direct => base,
            ArmKind::Depthwise => base.depthwise(21),
        };
        let w: Vec<f32> = (0..g.w_len()).map(|i| i as f32 + 1.0).collect();
        let bias: Vec<f32> = (0..21).map(|i| -(i as f32)).collect();
        let p = PackedFilter::pack(kind, &g, &w, Some(&bias)).unwrap();
        let cin_g = (g.cin / g.groups) as usize;
        for co in 0..32usize {
            let b = if co < 21 { -(co as f32) } else { 0.0 };
            assert_eq!(p.bias(co).to_bits(), b.to_bits());
            for kh in 0..2 {
                for kw in 0..3 {
                    for ci in 0..cin_g {
                        let want = if co < 21 {
                            w[((co * 2 + kh) * 3 + kw) * cin_g + ci]
                        } else {
                            0.0
                        };
                        assert_eq!(p.get(co, kh, kw, ci).to_bits(), want.to_bits());
                    }
                }
            }
        }
        // The raw bytes: line (p · taps + t) · cin + ci after the bias.
        let bytes = p.to_bytes();
        let (co, kh, kw, ci) = (17usize, 1usize, 2usize, cin_g - 1);
        let t = kh * 3 + kw;
        let line = 2 + match kind {
            ArmKind::Direct => (6 + t) * cin_g + ci,
            ArmKind::Depthwise => 6 + t,
        };
        let at = line * 64 + (co % 16) * 4;
        let v = f32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        assert_eq!(v, w[((co * 2 + kh) * 3 + kw) * cin_g + ci]);
        let back = PackedFilter::from_site(Some(&p.operand()), &g).unwrap();
        assert_eq!(back, p);
        let other = ConvGeometry { cout: 16, ..g };
        assert_eq!(
            PackedFilter::from_site(Some(&p.operand()), &other)
                .unwrap_err()
                .name(),
            match kind {
                ArmKind::Direct => "bad-operand",
                ArmKind::Depthwise => "unsupported-geometry",
            }
        );
        assert_eq!(
            PackedFilter::pack(kind, &g, &w[1..], None)
                .unwrap_err()
                .name(),
            "bad-operand"
        );
        assert_eq!(
            PackedFilter::pack(kind, &g, &w, Some(&bias[1..]))
                .unwrap_err()
                .name(),
            "bad-operand"
        );
    }
    let grouped = ConvGeometry {
        groups: 2,
        ..ConvGeometry::square(1, 5, 4, 4, 3, 1, 1)
    };
    assert_eq!(
        PackedFilter::pack(
            ArmKind::Depthwise,
            &grouped,
            &vec![0.0; grouped.w_len()],
            None
        )
        .unwrap_err()
        .name(),
        "unsupported-geometry"
    );
}

/// The direct layout of a grouped filter, by hand: 3 groups of `cin_g =
/// 2` → `cout_g = 17` channels make 2 panels a group (6 in all), panel
/// `g · 2 + q` holding channels `17g + 16q + lane` below 17 within the
/// group and zeros past them; the bias lines likewise; the offset of
/// every weight in the raw bytes; a round trip through the offer's
/// bytes; and a filter packed for another grouping does not fit.
#[test]
fn grouped_packing_keeps_each_panel_inside_its_group() {
    let g = ConvGeometry {
        groups: 3,
        k_h: 2,
        ..ConvGeometry::square(1, 5, 6, 51, 3, 1, 1)
    };
    let s = g.check().unwrap();
    assert_eq!((s.panels, s.group_panels), (6, 2));
    let w: Vec<f32> = (0..g.w_len()).map(|i| i as f32 + 1.0).collect();
    let bias: Vec<f32> = (0..51).map(|i| -(i as f32) - 1.0).collect();
    let p = PackedFilter::pack(ArmKind::Direct, &g, &w, Some(&bias)).unwrap();
    let bytes = p.to_bytes();
    assert_eq!(bytes.len(), 6 * (1 + 6 * 2) * 64);
    let at = |line: usize, lane: usize| {
        let o = line * 64 + lane * 4;
        f32::from_le_bytes(bytes[o..o + 4].try_into().unwrap())
    };
    for panel in 0..6usize {
        let (grp, q) = (panel / 2, panel % 2);
        for lane in 0..16usize {
            let j = 16 * q + lane;
            let co = (j < 17).then_some(17 * grp + j);
            assert_eq!(
                at(panel, lane).to_bits(),
                co.map_or(0.0, |c| bias[c]).to_bits()
            );
            if let Some(c) = co {
                assert_eq!(p.bias(c).to_bits(), bias[c].to_bits());
            }
            for t in 0..6usize {
                for ci in 0..2usize {
                    let line = 6 + (panel * 6 + t) * 2 + ci;
                    let want = co.map_or(0.0, |c| w[(c * 6 + t) * 2 + ci]);
                    assert_eq!(at(line, lane).to_bits(), want.to_bits());
                    if let Some(c) = co {
                        let v = p.get(c, t / 3, t % 3, ci);
                        assert_eq!(v.to_bits(), want.to_bits());
                    }
                }
            }
        }
    }
    let back = PackedFilter::from_site(Some(&p.operand()), &g).unwrap();
    assert_eq!(back, p);
    // The same channels in one group, or in 17 groups: not this packing.
    for other in [
        ConvGeometry { groups: 1, ..g },
        ConvGeometry {
            groups: 17,
            cin: 17,
            ..g
        },
    ] {
        let mut y = vec![0.0f32; 10_000];
        let x = vec![0.0f32; other.x_len()];
        assert_eq!(
            ConvArgs::new(&other, &x, &p, &mut y).unwrap_err().name(),
            "bad-operand",
            "{other:?}"
        );
    }
    // groups = 1: byte for byte the layout as it was (channel co at lane
    // co % 16 of panel co / 16, cin lines a tap).
    let one = ConvGeometry { groups: 1, ..g };
    let w1: Vec<f32> = (0..one.w_len()).map(|i| i as f32 * 0.5).collect();
    let p1 = PackedFilter::pack(ArmKind::Direct, &one, &w1, None).unwrap();
    let b1 = p1.to_bytes();
    let panels = 51usize.div_ceil(16);
    assert_eq!(b1.len(), panels * (1 + 6 * 6) * 64);
    for co in 0..51usize {
        for t in 0..6usize {
            for ci in 0..6usize {
                let line = panels + ((co / 16) * 6 + t) * 6 + ci;
                let o = line * 64 + (co % 16) * 4;
                let v = f32::from_le_bytes(b1[o..o + 4].try_into().unwrap());
                assert_eq!(v.to_bits(), w1[(co * 6 + t) * 6 + ci].to_bits());
            }
        }
    }
}

/// Every body of the direct family this host runs — the arm, and the
/// twins of this ISA whose features the host has — gives the reference's
/// bits on every grouped geometry of the validation cases (groups 2–4,
/// `cin / groups` and `cout / groups` from 1 to 33 and 48, 64, channel
/// multipliers, kernels 1 and 3–5, strides, dilations, paddings, batches,
/// short rows, member views), with bias, each epilogue, x and y off their
/// buffers' starts, NaN guards around y.
#[test]
fn grouped_bodies_meet_the_reference() {
    let host = weft_host::Host::detect();
    let (offer, arm_code) = arm_kernel(
        ArmKind::Direct,
        &site_for(
            ArmKind::Direct,
            &ConvGeometry {
                groups: 2,
                ..ConvGeometry::square(1, 9, 16, 16, 3, 1, 1)
            },
        ),
    );
    let mut bodies = vec![("conv.direct.arm", arm_code)];
    for twin in entry(ArmKind::Direct).arms.remove(0).twins {
        if twin.isa() == host.isa && twin.requires().iter().all(|f| host.has(*f)) {
            bodies.push((twin.name(), twin.emit(&offer).unwrap()));
        }
    }
    let grouped = validation::grouped();
    assert!(grouped.len() >= 50, "{} grouped geometries", grouped.len());
    for (name, code) in &bodies {
        // SAFETY: every body of the family honours the leaf ABI for ConvArgs.
        let kernel: Kernel<ConvArgs> = unsafe { Kernel::from_native(code) }.unwrap();
        for (i, (g, rows)) in grouped.iter().enumerate() {
            let g = g.with_act(crate::validation::activation(i));
            assert!(g.groups > 1 && family_of(&g) == DIRECT, "{g:?}");
            let s = g.check().unwrap();
            let off = i % 4;
            let w = values(g.w_len(), 60 + i as u64);
            let bias = values(g.cout as usize, 61 + i as u64);
            let mut x = vec![0.0f32; off];
            x.extend(values(g.x_len(), 62 + i as u64));
            let f = PackedFilter::pack(ArmKind::Direct, &g, &w, Some(&bias)).unwrap();
            let rows = rows.clone().unwrap_or(0..g.batch * s.out_h);
            let mut want = vec![f32::NAN; off + g.y_len(&s) + 3];
            reference::conv2d(
                &g,
                &x[off..],
                &w,
                Some(&bias),
                &mut want[off..],
                rows.clone(),
            );
            let mut y = vec![f32::NAN; want.len()];
            let args = ConvArgs::rows(&g, &x[off..], &f, &mut y[off..], rows.clone()).unwrap();
            // SAFETY: checked by ConvArgs::rows against live buffers.
            unsafe { kernel.call(&args) };
            if let Some(at) = (0..y.len()).find(|&j| !same(y[j], want[j])) {
                panic!(
                    "{name} at {g:?} rows {rows:?}: y[{at}] = {:e}, reference {:e}",
                    y[at], want[at]
                );
            }
        }
    }
    // The judge's cases carry them too.
    let n = cases(ArmKind::Direct, 11)
        .iter()
        .filter(|c| c.g.groups > 1)
        .count();
    assert_eq!(n, grouped.len());
}

/// Arms refuse what they cannot serve, by name: another family's site, a
/// grouped convolution at the depthwise arm, indivisible groups, a site without its filter or with a filter of the
/// wrong size.
#[test]
fn arms_refuse_sites_they_cannot_serve() {
    let host = Host::detect();
    let g = ConvGeometry::square(1, 6, 4, 4, 3, 1, 1);
    let direct = site_for(ArmKind::Direct, &g);
    let dw = site_for(ArmKind::Depthwise, &g);
    assert_eq!(direct.family.name(), DIRECT);
    assert_eq!(dw.family.name(), DEPTHWISE);
    assert!(ConvArm(ArmKind::Direct).offer(&direct, &host).is_ok());
    assert!(ConvArm(ArmKind::Depthwise).offer(&dw, &host).is_ok());
    for (kind, s) in [(ArmKind::Direct, &dw), (ArmKind::Depthwise, &direct)] {
        assert_eq!(
            ConvArm(kind).offer(s, &host).unwrap_err().name(),
            "unsupported-geometry"
        );
    }
    // A grouped convolution is the direct arm's; the depthwise arm
    // refuses it (and the direct arm refuses depthwise, above).
    let grouped = ConvGeometry { groups: 2, ..g };
    let s = site(&grouped, &vec![1.0; grouped.w_len()], None).unwrap();
    assert_eq!(s.family.name(), DIRECT);
    assert!(ConvArm(ArmKind::Direct).offer(&s, &host).is_ok());
    let mut as_dw = s.clone();
    as_dw.family = weft_kernel::Family(DEPTHWISE);
    assert_eq!(
        ConvArm(ArmKind::Depthwise)
            .offer(&as_dw, &host)
            .unwrap_err()
            .name(),
        "unsupported-geometry"
    );
    let bare = weft_kernel::Site::new(weft_kernel::Family(DIRECT), g.to_geometry());
    assert_eq!(
        ConvArm(ArmKind::Direct)
            .offer(&bare, &host)
            .unwrap_err()
            .name(),
        "bad-operand"
    );
    let short = site(&g, &vec![1.0; g.w_len() - 1], None).unwrap();
    assert_eq!(
        ConvArm(ArmKind::Direct)
            .offer(&short, &host)
            .unwrap_err()
            .name(),
        "bad-operand"
    );
    let mut odd = direct.clone();
    odd.geometry.set("groups", 3);
    assert_eq!(
        ConvArm(ArmKind::Direct)
            .offer(&odd, &host)
            .unwrap_err()
            .name(),
        "unsupported-geometry"
    );
}

/// Short buffers, a filter packed for another geometry and rows outside
/// the output are refused by name, before any body runs.
#[test]
fn bad_arguments_are_refused_by_name() {
    let g = ConvGeometry::square(2, 5, 3, 4, 3, 1, 1);
    let s = g.check().unwrap();
    let f = PackedFilter::pack(ArmKind::Direct, &g, &vec![1.0; g.w_len()], None).unwrap();
    let x = vec![0.0f32; g.x_len()];
    let mut y = vec![0.0f32; g.y_len(&s)];
    assert!(ConvArgs::new(&g, &x, &f, &mut y).is_ok());
    let other = ConvGeometry { cout: 5, ..g };
    let mut big = vec![0.0f32; 1000];
    let errs = [
        ConvArgs::new(&g, &x[1..], &f, &mut y).unwrap_err(),
        ConvArgs::new(&g, &x, &f, &mut y[1..]).unwrap_err(),
        ConvArgs::new(&other, &x, &f, &mut big).unwrap_err(),
        ConvArgs::rows(&g, &x, &f, &mut y, 3..11).unwrap_err(),
        #[allow(clippy::reversed_empty_ranges)]
        ConvArgs::rows(&g, &x, &f, &mut y, 4..3).unwrap_err(),
    ];
    for (i, e) in errs.iter().enumerate() {
        assert_eq!(e.name(), "bad-operand", "case {i}: {e}");
    }
    let zero = ConvGeometry { k_w: 0, ..g };
    assert_eq!(
        ConvArgs::new(&zero, &x, &f, &mut y).unwrap_err().name(),
        "unsupported-geometry"
    );
}

/// Splitting a call over member views gives the unsplit call's bits:
/// each output is the same sequence of operations.
#[test]
fn split_calls_give_the_unsplit_bits() {
    let host = weft_host::Host::detect();
    let base = ConvGeometry::square(2, 11, 19, 19, 3, 1, 1).with_act(Activation::Relu);
    let grouped = ConvGeometry {
        groups: 3,
        cin: 15,
        cout: 51,
        ..base
    };
    let short = ConvGeometry {
        groups: 2,
        ..ConvGeometry::square(3, 7, 34, 40, 3, 1, 1)
    };
    for (kind, g) in [
        (ArmKind::Direct, base),
        (ArmKind::Depthwise, base.depthwise(19)),
        (ArmKind::Direct, grouped),
        (ArmKind::Direct, short),
    ] {
        let site = site_for(kind, &g);
        let (offer, code) = arm_kernel(kind, &site);
        let mut bodies = vec![code];
        if g.groups > 1 {
            // The grouped ones through every body this host runs.
            for twin in entry(kind).arms.remove(0).twins {
                if twin.isa() == host.isa && twin.requires().iter().all(|f| host.has(*f)) {
                    bodies.push(twin.emit(&offer).unwrap());
                }
            }
        }
        for code in bodies {
            // SAFETY: the arm's body honours the leaf ABI for ConvArgs.
            let kernel: Kernel<ConvArgs> = unsafe { Kernel::from_native(&code) }.unwrap();
            let f = PackedFilter::from_site(offer.packed.first(), &g).unwrap();
            let s = g.check().unwrap();
            let x = values(g.x_len(), 9);
            let mut whole = vec![0.0f32; g.y_len(&s)];
            let args = ConvArgs::new(&g, &x, &f, &mut whole).unwrap();
            // SAFETY: checked against live buffers.
            unsafe { kernel.call(&args) };
            let mut parts = vec![0.0f32; g.y_len(&s)];
            let args = ConvArgs::new(&g, &x, &f, &mut parts).unwrap();
            for r in offer.views.as_ref().unwrap().split(3) {
                // SAFETY: a restricted copy of checked arguments.
                unsafe { kernel.call(&weft_kernel::KernelArgs::restrict(&args, r)) };
            }
            assert!(
                whole
                    .iter()
                    .zip(&parts)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{kind:?} {g:?}"
            );
        }
    }
}

/// weft-cost finds in every arm's and every twin's bytes (the twins of
/// this host's ISA) the loops their nests state (no `nest-mismatch`), at
/// ResNet- and MobileNet-like geometries, so the planner can price every
/// candidate.
#[test]
fn every_body_has_the_loops_its_nest_states() {
    let host = Host::detect();
    let model = weft_cost::CostModel::for_host(&host);
    let geos = [
        ConvGeometry::square(1, 14, 64, 64, 3, 1, 1),
        ConvGeometry::square(1, 7, 33, 17, 3, 2, 1),
        ConvGeometry::square(1, 30, 3, 64, 7, 2, 3),
        // Grouped (the depthwise arm takes their cin as its channels):
        // ResNeXt's 32 groups of 4, short rows, a channel multiplier.
        ConvGeometry {
            groups: 32,
            ..ConvGeometry::square(1, 14, 128, 128, 3, 1, 1)
        },
        ConvGeometry {
            groups: 3,
            ..ConvGeometry::square(1, 7, 15, 99, 3, 1, 1)
        },
        ConvGeometry {
            groups: 8,
            ..ConvGeometry::square(1, 28, 8, 16, 3, 2, 1)
        },
    ];
    for kind in ArmKind::ALL {
        for g in geos {
            let (offer, code) = arm_kernel(kind, &site_for(kind, &g));
            let arm = ConvArm(kind);
            model
                .price(&code, &arm.nest(&offer), &offer)
                .unwrap_or_else(|e| panic!("{} at {g:?}: {e}", kind.name()));
            let twins = entry(kind).arms.remove(0).twins;
            for twin in twins.iter().filter(|t| t.isa() == host.isa) {
                let body = twin.emit(&offer).unwrap();
                model
                    .price(&body, &twin.nest(&offer), &offer)
                    .unwrap_or_else(|e| panic!("{} at {g:?}: {e}", twin.name()));
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn judge_all(tier: twin_x64::Tier) {
    use weft_validate::testing::judge_twin;
    let host = Host::detect();
    for kind in ArmKind::ALL {
        let (offer, arm_code) = arm_kernel(
            kind,
            &site_for(kind, &ConvGeometry::square(1, 9, 16, 16, 3, 1, 1)),
        );
        let twin = twin_x64::ConvX64::new(kind, tier);
        let outcome = judge_twin(
            &twin,
            &arm_code,
            &offer,
            &host,
            &validation::ConvValidation(kind),
            7,
        );
        assert!(
            outcome.is_accepted(),
            "{}: {}",
            weft_kernel::Twin::name(&twin),
            outcome.refusal().map(|r| r.to_string()).unwrap_or_default()
        );
        // Every case ran, and the outputs compared are the whole buffers.
        let v = outcome.verdict().unwrap();
        let cases = cases(kind, 7);
        let words: usize = cases.iter().map(|c| c.y.0.len() + 16).sum();
        assert_eq!((v.cases, v.words), (cases.len(), words));
    }
}

/// The AVX-512 twins of both arms are accepted by the judge against their
/// arm's body on the family's cases (the ragged sweep of the validation
/// module).
#[cfg(target_arch = "x86_64")]
#[test]
#[cfg_attr(
    not(weft_host_has = "avx512f"),
    ignore = "needs an AVX-512F host to run the AVX-512 twins"
)]
fn every_avx512_twin_matches_its_arm_bit_for_bit() {
    judge_all(twin_x64::Tier::Avx512);
}

/// The AVX2 + FMA twins likewise.
#[cfg(target_arch = "x86_64")]
#[test]
#[cfg_attr(
    not(all(weft_host_has = "avx2", weft_host_has = "fma")),
    ignore = "needs an AVX2 + FMA host to run the AVX2 twins"
)]
fn every_avx2_twin_matches_its_arm_bit_for_bit() {
    judge_all(twin_x64::Tier::Avx2);
}

/// The AVX-512 direct twin takes its flattened tiles exactly when the
/// interior is narrower than one 12-pixel tile: at ResNet's 7 × 7 stage
/// and short rows, not at 56, 28, 14 or the stem; and there, over batches
/// of short rows, borders and dilations, every remainder of panels and
/// member views starting mid-image, it gives the reference's bits.
#[cfg(target_arch = "x86_64")]
#[test]
#[cfg_attr(
    not(weft_host_has = "avx512f"),
    ignore = "needs an AVX-512F host to run the AVX-512 twins"
)]
fn the_flattened_tiles_meet_the_reference_on_short_rows() {
    use weft_kernel::Twin;
    let shape = |g: ConvGeometry| g.check().unwrap();
    for (size, c) in [(56, 64), (28, 128), (14, 256)] {
        assert!(!twin_x64::flat(&shape(ConvGeometry::square(
            1, size, c, c, 3, 1, 1
        ))));
    }
    assert!(!twin_x64::flat(&shape(ConvGeometry::square(
        1, 224, 3, 64, 7, 2, 3
    ))));
    assert!(twin_x64::flat(&shape(ConvGeometry::square(
        1, 7, 512, 512, 3, 1, 1
    ))));
    let geos = [
        (ConvGeometry::square(1, 7, 64, 80, 3, 1, 1), None),
        (ConvGeometry::square(3, 7, 33, 113, 3, 1, 1), Some(2..17)),
        (
            ConvGeometry {
                in_h: 5,
                in_w: 9,
                ..ConvGeometry::square(2, 5, 17, 40, 5, 1, 2)
            },
            None,
        ),
        (
            ConvGeometry {
                dil: 2,
                ..ConvGeometry::square(1, 7, 48, 96, 3, 1, 2)
            },
            Some(1..6),
        ),
        (ConvGeometry::square(2, 13, 20, 64, 3, 2, 1), None),
        (ConvGeometry::square(1, 4, 9, 33, 5, 1, 3), None),
    ];
    for (i, (g, rows)) in geos.into_iter().enumerate() {
        let g = g.with_act(crate::validation::activation(i));
        let s = shape(g);
        assert!(twin_x64::flat(&s), "{g:?}");
        let site = site_for(ArmKind::Direct, &g);
        let (offer, _) = arm_kernel(ArmKind::Direct, &site);
        let code = twin_x64::ConvX64::new(ArmKind::Direct, twin_x64::Tier::Avx512)
            .emit(&offer)
            .unwrap();
        // SAFETY: the twin's body honours the leaf ABI for ConvArgs.
        let kernel: Kernel<ConvArgs> = unsafe { Kernel::from_native(&code) }.unwrap();
        let f = PackedFilter::from_site(offer.packed.first(), &g).unwrap();
        let (w, bias) = (values(g.w_len(), 3), values(g.cout as usize, 4));
        let x = values(g.x_len(), 40 + i as u64);
        let rows = rows.unwrap_or(0..g.batch * s.out_h);
        let mut want = vec![f32::NAN; g.y_len(&s)];
        reference::conv2d(&g, &x, &w, Some(&bias), &mut want, rows.clone());
        let mut y = vec![f32::NAN; g.y_len(&s)];
        let args = ConvArgs::rows(&g, &x, &f, &mut y, rows).unwrap();
        // SAFETY: checked by ConvArgs::rows against live buffers.
        unsafe { kernel.call(&args) };
        if let Some(at) = (0..y.len()).find(|&j| !same(y[j], want[j])) {
            panic!("{g:?}: y[{at}] = {:e}, reference {:e}", y[at], want[at]);
        }
    }
}

/// A twin whose body differs from its arm is refused by the judge with a
/// `mismatch`: the first `vfmadd231ps` of each accepted body rewritten as
/// `vfmadd213ps` (the accumulator and a factor swap roles; no memory
/// access changes).
#[cfg(target_arch = "x86_64")]
#[test]
#[cfg_attr(
    not(all(weft_host_has = "avx2", weft_host_has = "fma")),
    ignore = "needs an AVX2 + FMA host to run the AVX2 twins"
)]
fn a_mutated_twin_body_is_refused_by_the_judge() {
    use weft_kernel::{Judged, Twin};
    use weft_x64::iced_x86::{Decoder, DecoderOptions, Mnemonic};
    let host = Host::detect();
    for kind in ArmKind::ALL {
        let (offer, arm_code) = arm_kernel(
            kind,
            &site_for(kind, &ConvGeometry::square(1, 9, 16, 16, 3, 1, 1)),
        );
        let twin = twin_x64::ConvX64::new(kind, twin_x64::Tier::Avx2);
        let mut body = twin.emit(&offer).unwrap();
        let mut d = Decoder::with_ip(64, &body.bytes, 0, DecoderOptions::NONE);
        let fma = d
            .iter()
            .find(|i| i.mnemonic() == Mnemonic::Vfmadd231ps && i.op_count() == 3)
            .expect("a vfmadd231ps");
        // VEX three-byte form: C4 xx xx, opcode B8 (231) → A8 (213).
        let at = fma.ip() as usize + 3;
        assert_eq!(
            (body.bytes[fma.ip() as usize], body.bytes[at]),
            (0xC4, 0xB8)
        );
        body.bytes[at] = 0xA8;
        let outcome = weft_validate::validate(
            Judged {
                name: "arm",
                code: &arm_code,
            },
            Judged {
                name: twin.name(),
                code: &body,
            },
            &offer,
            &host,
            &validation::ConvValidation(kind),
            7,
        );
        assert_eq!(
            outcome.refusal().map(|r| r.name()),
            Some("mismatch"),
            "{}",
            twin.name()
        );
    }
}

/// The Win64 body of a twin, called through `extern "win64"`, gives the
/// SysV body's bits (it saves what Win64 makes callee-saved).
#[cfg(target_arch = "x86_64")]
#[test]
#[cfg_attr(
    not(all(weft_host_has = "avx2", weft_host_has = "fma")),
    ignore = "needs an AVX2 + FMA host to run the AVX2 twins"
)]
fn the_win64_body_computes_what_the_sysv_body_does() {
    use weft_kernel::Twin;
    let g = ConvGeometry::square(1, 9, 17, 21, 3, 1, 1).with_act(Activation::Relu6);
    let (offer, _) = arm_kernel(ArmKind::Direct, &site_for(ArmKind::Direct, &g));
    let f = PackedFilter::from_site(offer.packed.first(), &g).unwrap();
    let s = g.check().unwrap();
    let x = values(g.x_len(), 21);
    let run = |abi: weft_x64::Abi| {
        let code = twin_x64::ConvX64::new(ArmKind::Direct, twin_x64::Tier::Avx2)
            .with_abi(abi)
            .emit(&offer)
            .unwrap();
        let placed = code.place().unwrap();
        let mut y = vec![0.0f32; g.y_len(&s)];
        let args = ConvArgs::new(&g, &x, &f, &mut y).unwrap();
        match abi {
            weft_x64::Abi::Win64 => {
                // SAFETY: the bytes are a Win64 leaf body for ConvArgs,
                // placed executable; `args` was checked against live buffers.
                let f: extern "win64" fn(*const ConvArgs) =
                    unsafe { std::mem::transmute(placed.as_ptr()) };
                f(&args);
            }
            _ => {
                // SAFETY: as above, SysV.
                let f: extern "C" fn(*const ConvArgs) =
                    unsafe { std::mem::transmute(placed.as_ptr()) };
                f(&args);
            }
        }
        y
    };
    let (sysv, win) = (run(weft_x64::Abi::SysV), run(weft_x64::Abi::Win64));
    assert!(sysv
        .iter()
        .zip(&win)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
}

/// Both families register their arm, with its two x64 twins and its
/// NEON twin; `conv.direct` then its Winograd arm's two x64 twins and
/// its NEON twin, then its grouped arm's AVX-512, AVX2 and NEON twins.
#[test]
fn both_families_register_their_arm_and_twins() {
    let e = entries();
    let names: Vec<(&str, Vec<&str>)> = e
        .iter()
        .map(|f| {
            (
                f.family.name(),
                f.twins().map(|(_, t)| t.name()).collect::<Vec<_>>(),
            )
        })
        .collect();
    assert_eq!(
        names,
        vec![
            (
                DIRECT,
                vec![
                    "conv.direct.twin.avx512.12x32",
                    "conv.direct.twin.avx2.6x16",
                    "conv.direct.twin.neon.6x16",
                    "conv.direct.winograd.twin.avx512.7x32",
                    "conv.direct.winograd.twin.avx2.6x16",
                    "conv.direct.winograd.twin.neon.6x16",
                    "conv.direct.grouped.twin.avx512.8x16",
                    "conv.direct.grouped.twin.avx2.2x16",
                    "conv.direct.grouped.twin.neon.6x16"
                ]
            ),
            (
                DEPTHWISE,
                vec![
                    "conv.depthwise.twin.avx512.12x32",
                    "conv.depthwise.twin.avx2.6x16",
                    "conv.depthwise.twin.neon.6x16"
                ]
            ),
        ]
    );
}

/// The NEON twins encode for offers at several geometries on any host,
/// every word decodes as an A64 instruction, and the body ends in `ret`
/// (they are judged against their arms on arm64: the test below).
#[test]
fn the_neon_twins_encode_and_decode_on_any_host() {
    use weft_kernel::Twin;
    for kind in ArmKind::ALL {
        for g in [
            ConvGeometry::square(1, 9, 16, 16, 3, 1, 1),
            ConvGeometry::square(1, 7, 33, 17, 5, 2, 2),
        ] {
            let (offer, _) = arm_kernel(kind, &site_for(kind, &g));
            let twin = twin_a64::ConvA64(kind);
            let body = twin.emit(&offer).unwrap();
            assert_eq!(body.isa, weft_kernel::Isa::Aarch64);
            let words: Vec<u32> = body
                .bytes
                .chunks_exact(4)
                .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect();
            for (i, w) in words.iter().enumerate() {
                assert!(
                    weft_a64::decode(*w).is_some(),
                    "{}: word {i} {w:#010x} does not decode",
                    twin.name()
                );
            }
            assert_eq!(words.last(), Some(&0xd65f_03c0), "ends in ret");
        }
    }
}

/// On arm64 the NEON twins of both arms are accepted by the judge against
/// their arm's body on the family's cases.
#[cfg(target_arch = "aarch64")]
#[test]
fn every_neon_twin_matches_its_arm_bit_for_bit() {
    use weft_validate::testing::judge_twin;
    let host = Host::detect();
    for kind in ArmKind::ALL {
        let (offer, arm_code) = arm_kernel(
            kind,
            &site_for(kind, &ConvGeometry::square(1, 9, 16, 16, 3, 1, 1)),
        );
        let twin = twin_a64::ConvA64(kind);
        let outcome = judge_twin(
            &twin,
            &arm_code,
            &offer,
            &host,
            &validation::ConvValidation(kind),
            7,
        );
        assert!(
            outcome.is_accepted(),
            "{}: {}",
            weft_kernel::Twin::name(&twin),
            outcome.refusal().map(|r| r.to_string()).unwrap_or_default()
        );
        let v = outcome.verdict().unwrap();
        assert_eq!(v.cases, cases(kind, 7).len());
    }
}
