//! The arms against the scalar reference, the packing layout, the
//! argument checks and the registration.

use weft_kernel::{Arm, Host, Kernel, Site};

use crate::arm::{ArmKind, GemmArm};
use crate::validation::{cases, GemmCase};
use crate::*;

fn reference_output(case: &GemmCase) -> Vec<f32> {
    let mut c = case.c.0.clone();
    let (b, bo, ldb) = (&case.b.0, case.b.1, case.b.2);
    reference::gemm(
        case.a(),
        |kk, j| b[bo + kk * ldb + j],
        &mut c[case.c.1..],
        case.c.2,
        case.scale,
        case.rows.clone(),
        case.cols.clone(),
    );
    c
}

fn site_for(kind: ArmKind, m: usize, n: usize, k: usize) -> Site {
    let b = vec![0.25f32; k * n];
    site(m, n, k, BLayout::Rows, kind.packs_b().then_some(&b[..]))
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Every arm, on every validation case, gives the scalar reference's bits
/// (NaNs by class) over the whole C buffer: the rectangle computed as the
/// contract says, everything outside it untouched.
#[test]
fn every_arm_meets_the_reference_on_every_case() {
    let host = Host::detect();
    for kind in ArmKind::ALL {
        let arm = GemmArm(kind);
        let m = if kind == ArmKind::SmallM { 7 } else { 64 };
        let offer = arm.offer(&site_for(kind, m, 48, 40), &host).unwrap();
        let code = arm
            .build(&offer, weft_managed::arm_build::host_isa())
            .unwrap();
        // SAFETY: the arm's body honours the leaf ABI for GemmArgs.
        let kernel: Kernel<GemmArgs> = unsafe { Kernel::from_native(&code) }.unwrap();
        for (ci, case) in cases(11, kind.packs_b()).iter().enumerate() {
            let want = reference_output(case);
            let mut c = case.c.0.clone();
            let args = case.args(&mut c).unwrap();
            // SAFETY: checked by GemmArgs::new against live buffers.
            unsafe { kernel.call(&args) };
            if let Some(i) = (0..c.len()).find(|&i| !same(c[i], want[i])) {
                panic!(
                    "{} case {ci} ({:?} rows {:?} cols {:?} scale {:?}): C[{i}] = {:e}, reference {:e}",
                    kind.name(),
                    case.shape,
                    case.rows,
                    case.cols,
                    case.scale,
                    c[i],
                    want[i]
                );
            }
        }
    }
}

/// Packing puts `(kk, j)` where the layout says, reads an `n × k` B as
/// its transpose, pads with zeros, and survives a round trip through an
/// offer's bytes.
#[test]
fn panels_hold_b_where_the_layout_says() {
    let (k, n) = (5, 37);
    let b: Vec<f32> = (0..k * n).map(|i| i as f32).collect();
    let p = PackedB::pack(MatRef::dense(&b, k, n), BLayout::Rows).unwrap();
    let t: Vec<f32> = (0..n)
        .flat_map(|j| (0..k).map(move |kk| (kk * n + j) as f32))
        .collect();
    let q = PackedB::pack(MatRef::dense(&t, n, k), BLayout::Transposed).unwrap();
    assert_eq!(p, q);
    let bytes = p.to_bytes();
    assert_eq!(bytes.len(), 3 * k * 64);
    for kk in 0..k {
        for j in 0..48 {
            let at = ((j / 16) * k + kk) * 16 + j % 16;
            let v = f32::from_le_bytes(bytes[4 * at..4 * at + 4].try_into().unwrap());
            assert_eq!(v, if j < n { (kk * n + j) as f32 } else { 0.0 });
        }
    }
    assert_eq!(PackedB::from_operand(&p.operand(), k, n).unwrap(), p);
    let wrong = PackedB::from_operand(&p.operand(), k, n + 16).unwrap_err();
    assert_eq!(wrong.name(), "bad-operand");
}

/// Short buffers, strides below a row, disagreeing inner dimensions and
/// rectangles outside C are refused by name, before any body runs.
#[test]
fn bad_arguments_are_refused_by_name() {
    let a = vec![0.0f32; 12];
    let b = vec![0.0f32; 12];
    let mut c = vec![0.0f32; 9];
    let am = MatRef::dense(&a, 3, 4);
    let bm = MatRef::dense(&b, 4, 3);
    let ok = GemmArgs::new(
        am,
        BRef::Rows(bm),
        &mut c,
        3,
        (1.0, 0.0),
        0..3,
        0..3,
        Axis::M,
    );
    assert!(ok.is_ok());
    let cases: Vec<Result<GemmArgs, weft_kernel::Refusal>> = vec![
        GemmArgs::new(
            MatRef::dense(&a, 3, 5),
            BRef::Rows(bm),
            &mut c,
            3,
            (1.0, 0.0),
            0..3,
            0..3,
            Axis::M,
        ),
        GemmArgs::new(
            am,
            BRef::Rows(MatRef::dense(&b, 3, 4)),
            &mut c,
            4,
            (1.0, 0.0),
            0..3,
            0..3,
            Axis::M,
        ),
        GemmArgs::new(
            am,
            BRef::Rows(bm),
            &mut c,
            2,
            (1.0, 0.0),
            0..3,
            0..3,
            Axis::M,
        ),
        GemmArgs::new(
            am,
            BRef::Rows(bm),
            &mut c,
            3,
            (1.0, 0.0),
            0..4,
            0..3,
            Axis::M,
        ),
        GemmArgs::new(
            am,
            BRef::Rows(bm),
            &mut c,
            3,
            (1.0, 0.0),
            0..3,
            #[allow(clippy::reversed_empty_ranges)]
            (2..1),
            Axis::N,
        ),
        GemmArgs::new(
            am,
            BRef::Rows(MatRef {
                data: &b,
                rows: 4,
                cols: 3,
                ld: 4,
            }),
            &mut c,
            3,
            (1.0, 0.0),
            0..3,
            0..3,
            Axis::M,
        ),
    ];
    for (i, r) in cases.into_iter().enumerate() {
        assert_eq!(r.unwrap_err().name(), "bad-operand", "case {i}");
    }
}

/// Arms refuse what they cannot serve, by name: the direct arm an `n × k`
/// B or any B given at plan time, the packing arms a site without B or with a B of the wrong size,
/// small_m more than eight rows, anyone an empty C or a bad `bt`.
#[test]
fn arms_refuse_sites_they_cannot_serve() {
    let host = Host::detect();
    let b = vec![1.0f32; 6 * 4];
    let t = site(4, 6, 4, BLayout::Transposed, Some(&b));
    assert_eq!(
        GemmArm(ArmKind::Direct)
            .offer(&t, &host)
            .unwrap_err()
            .name(),
        "unsupported-geometry"
    );
    assert!(GemmArm(ArmKind::Panels).offer(&t, &host).is_ok());
    let given = site(4, 6, 4, BLayout::Rows, Some(&b));
    assert_eq!(
        GemmArm(ArmKind::Direct)
            .offer(&given, &host)
            .unwrap_err()
            .name(),
        "unsupported-geometry"
    );
    let bare = site(4, 6, 4, BLayout::Rows, None);
    assert!(GemmArm(ArmKind::Direct).offer(&bare, &host).is_ok());
    assert_eq!(
        GemmArm(ArmKind::Panels)
            .offer(&bare, &host)
            .unwrap_err()
            .name(),
        "bad-operand"
    );
    let short = site(4, 6, 5, BLayout::Rows, Some(&b));
    assert_eq!(
        GemmArm(ArmKind::SmallM)
            .offer(&short, &host)
            .unwrap_err()
            .name(),
        "bad-operand"
    );
    let tall = site(9, 6, 4, BLayout::Rows, Some(&b));
    assert_eq!(
        GemmArm(ArmKind::SmallM)
            .offer(&tall, &host)
            .unwrap_err()
            .name(),
        "unsupported-geometry"
    );
    let empty = site(0, 6, 4, BLayout::Rows, None);
    assert_eq!(
        GemmArm(ArmKind::Direct)
            .offer(&empty, &host)
            .unwrap_err()
            .name(),
        "unsupported-geometry"
    );
    let mut odd = site(4, 6, 4, BLayout::Rows, None);
    odd.geometry.set("bt", 2);
    assert_eq!(
        GemmArm(ArmKind::Direct)
            .offer(&odd, &host)
            .unwrap_err()
            .name(),
        "unsupported-geometry"
    );
}

/// Splitting a call over member views (either axis) gives the unsplit
/// call's bits: each output is the same sequence of operations.
#[test]
fn split_calls_give_the_unsplit_bits() {
    let host = Host::detect();
    let (m, n, k) = (70, 90, 300);
    let a: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7919) % 1000) as f32 / 37.0 - 13.0)
        .collect();
    let b: Vec<f32> = (0..k * n)
        .map(|i| ((i * 104_729) % 997) as f32 / 91.0 - 5.0)
        .collect();
    for kind in [ArmKind::Direct, ArmKind::Panels] {
        let arm = GemmArm(kind);
        let offer = arm
            .offer(
                &site(m, n, k, BLayout::Rows, kind.packs_b().then_some(&b[..])),
                &host,
            )
            .unwrap();
        let code = arm
            .build(&offer, weft_managed::arm_build::host_isa())
            .unwrap();
        // SAFETY: the arm's body honours the leaf ABI for GemmArgs.
        let kernel: Kernel<GemmArgs> = unsafe { Kernel::from_native(&code) }.unwrap();
        let ops = SiteOperands::new(offer.packed.first(), offer.views.as_ref(), k, n).unwrap();
        let mut whole = vec![0.0f32; m * n];
        let args = ops
            .args(
                MatRef::dense(&a, m, k),
                Some(MatRef::dense(&b, k, n)),
                &mut whole,
                n,
                (1.0, 0.0),
            )
            .unwrap();
        // SAFETY: checked against live buffers.
        unsafe { kernel.call(&args) };
        for axis in [Axis::M, Axis::N] {
            let mut parts = vec![0.0f32; m * n];
            let mut args = ops
                .args(
                    MatRef::dense(&a, m, k),
                    Some(MatRef::dense(&b, k, n)),
                    &mut parts,
                    n,
                    (1.0, 0.0),
                )
                .unwrap();
            args.axis = axis as u64;
            let views = weft_kernel::MemberViews {
                axis: if axis == Axis::M { "m" } else { "n" }.to_owned(),
                extent: if axis == Axis::M { m } else { n } as u64,
                granule: if axis == Axis::M {
                    M_GRANULE
                } else {
                    N_GRANULE
                },
            };
            for r in views.split(3) {
                // SAFETY: a restricted copy of checked arguments.
                unsafe { kernel.call(&weft_kernel::KernelArgs::restrict(&args, r)) };
            }
            assert!(
                whole
                    .iter()
                    .zip(&parts)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "{kind:?} {axis:?}"
            );
        }
    }
}

/// Every x64 twin of every arm that this host can run is accepted by the
/// judge against its arm's body, on the family's cases, for offers at
/// several geometries (the validation cases sweep the ragged shapes).
#[cfg(target_arch = "x86_64")]
#[test]
#[cfg_attr(
    not(weft_host_has = "avx512f"),
    ignore = "needs an AVX-512F host to run the x64 twins"
)]
fn every_x64_twin_matches_its_arm_bit_for_bit() {
    use weft_validate::testing::judge_twin;
    let host = Host::detect();
    let mut judged = 0;
    for kind in ArmKind::ALL {
        let arm = GemmArm(kind);
        let m = if kind == ArmKind::SmallM { 5 } else { 100 };
        let offer = arm.offer(&site_for(kind, m, 70, 33), &host).unwrap();
        let arm_code = arm
            .build(&offer, weft_managed::arm_build::host_isa())
            .unwrap();
        for twin in twin_x64::twins(kind) {
            let outcome = judge_twin(
                &*twin,
                &arm_code,
                &offer,
                &host,
                &validation::GemmValidation,
                7,
            );
            assert!(
                outcome.is_accepted(),
                "{}: {:?}",
                twin.name(),
                outcome.refusal()
            );
            judged += 1;
        }
    }
    assert_eq!(judged, 7);
}

/// The Win64 body of an x64 twin, called through `extern "win64"`, gives
/// the SysV body's bits (it saves what Win64 makes callee-saved).
#[cfg(target_arch = "x86_64")]
#[test]
#[cfg_attr(
    not(weft_host_has = "avx512f"),
    ignore = "needs an AVX-512F host to run the x64 twins"
)]
fn the_win64_body_computes_what_the_sysv_body_does() {
    use weft_kernel::Twin;
    let host = Host::detect();
    let (m, n, k) = (29, 45, 300);
    let offer = GemmArm(ArmKind::Direct)
        .offer(&site_for(ArmKind::Direct, m, n, k), &host)
        .unwrap();
    let a: Vec<f32> = (0..m * k).map(|i| (i % 17) as f32 - 8.5).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 13) as f32 * 0.25).collect();
    let run = |abi: weft_x64::Abi| {
        let code = twin_x64::GemmX64::new(ArmKind::Direct, 12, 2)
            .with_abi(abi)
            .emit(&offer)
            .unwrap();
        let placed = code.place().unwrap();
        let mut c = vec![1.0f32; m * n];
        let args = GemmArgs::new(
            MatRef::dense(&a, m, k),
            BRef::Rows(MatRef::dense(&b, k, n)),
            &mut c,
            n,
            (0.5, 2.0),
            0..m,
            0..n,
            Axis::M,
        )
        .unwrap();
        match abi {
            weft_x64::Abi::Win64 => {
                // SAFETY: the bytes are a Win64 leaf body for GemmArgs,
                // placed executable; `args` was checked against live buffers.
                let f: extern "win64" fn(*const GemmArgs) =
                    unsafe { std::mem::transmute(placed.as_ptr()) };
                f(&args);
            }
            _ => {
                // SAFETY: as above, SysV.
                let f: extern "C" fn(*const GemmArgs) =
                    unsafe { std::mem::transmute(placed.as_ptr()) };
                f(&args);
            }
        }
        c
    };
    let (sysv, win) = (run(weft_x64::Abi::SysV), run(weft_x64::Abi::Win64));
    assert!(sysv
        .iter()
        .zip(&win)
        .all(|(x, y)| x.to_bits() == y.to_bits()));
}

proptest::proptest! {
    /// Packing is a layout change and nothing else: every element of B,
    /// given `k × n` or `n × k`, is found where `get` looks, padding is
    /// zero, and an offer's bytes unpack to the same panels.
    #[test]
    fn packing_keeps_every_element_of_b(k in 0usize..40, n in 1usize..70, seed in 0u64..1000) {
        let b: Vec<f32> = (0..k * n).map(|i| ((i as u64 * 2654435761 + seed) % 1009) as f32 - 504.0).collect();
        let p = PackedB::pack(MatRef::dense(&b, k, n), BLayout::Rows).unwrap();
        let t: Vec<f32> = (0..n * k).map(|e| b[(e % k) * n + e / k]).collect();
        let q = PackedB::pack(MatRef::dense(&t, n, k), BLayout::Transposed).unwrap();
        proptest::prop_assert_eq!(&p, &q);
        for kk in 0..k {
            for j in 0..n.div_ceil(16) * 16 {
                let want = if j < n { b[kk * n + j] } else { 0.0 };
                proptest::prop_assert_eq!(p.get(kk, j).to_bits(), want.to_bits());
            }
        }
        proptest::prop_assert_eq!(PackedB::from_operand(&p.operand(), k, n).unwrap(), p);
    }
}

/// The AVX2 twins (6 × 16 tiles, masked 6 × 8 edges) are accepted against
/// their arms on every case, at the same offers as the AVX-512 ones.
#[cfg(target_arch = "x86_64")]
#[test]
#[cfg_attr(
    not(all(weft_host_has = "avx2", weft_host_has = "fma")),
    ignore = "needs an AVX2 + FMA host to run the AVX2 twins"
)]
fn every_avx2_twin_matches_its_arm_bit_for_bit() {
    use weft_validate::testing::judge_twin;
    let host = Host::detect();
    for kind in ArmKind::ALL {
        let arm = GemmArm(kind);
        for m in [if kind == ArmKind::SmallM { 5 } else { 100 }, 1] {
            let offer = arm.offer(&site_for(kind, m, 70, 33), &host).unwrap();
            let arm_code = arm
                .build(&offer, weft_managed::arm_build::host_isa())
                .unwrap();
            let twin = twin_x64::GemmX64::avx2(kind);
            let outcome = judge_twin(
                &twin,
                &arm_code,
                &offer,
                &host,
                &validation::GemmValidation,
                9,
            );
            assert!(
                outcome.is_accepted(),
                "{}: {:?}",
                weft_kernel::Twin::name(&twin),
                outcome.refusal()
            );
        }
    }
}

/// Threads split rows unless that is far less even than columns: 64 rows
/// at a granule of 24 would split 48 + 16, so a 64 × 1536 site splits its
/// columns; 1024 rows split 528 + 496, close enough to keep rows; small_m
/// always splits `n`.
#[test]
fn views_split_the_axis_that_halves_most_evenly() {
    assert_eq!(arm::views(ArmKind::Panels, 64, 1536).axis, "n");
    assert_eq!(arm::views(ArmKind::Panels, 480, 480).axis, "m");
    assert_eq!(arm::views(ArmKind::Panels, 1024, 1024).axis, "m");
    assert_eq!(arm::views(ArmKind::Direct, 1000, 40).axis, "m");
    assert_eq!(arm::views(ArmKind::SmallM, 8, 1536).axis, "n");
}
