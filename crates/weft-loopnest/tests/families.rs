//! The loop-nest families as a planner sees them: entries, offers from
//! sites, bodies built through the `Arm` trait for both ISAs, placed as
//! `Kernel<A>` and split across threads with `KernelArgs::restrict`, and
//! the CLIF of one small nest as a snapshot.

use weft_kernel::{
    Arm, Family, Feature, Geometry, Host, Isa, Judged, Kernel, KernelArgs, NativeCode, Offer,
    Refusal, Site, Twin,
};
use weft_loopnest::ops::embed::Table;
use weft_loopnest::{
    entries, Add, AddArgs, EmbedArgs, EmbedQ8_0, NestOp, RmsNorm, RmsNormArgs, Rope, RopeArgs,
    RopeTable, SiluMul, SiluMulArgs,
};
use weft_managed::arm_build::host_isa;
use weft_managed::Target;

fn host() -> Host {
    Host::detect()
}

/// The geometries of SmolLM2-135M's sites (one token).
fn smollm2_sites() -> Vec<Site> {
    let g = Geometry::new;
    vec![
        Site::new(
            Family("loopnest.rmsnorm"),
            g().with("dim", 576).with("rows", 1),
        ),
        Site::new(
            Family("loopnest.rope"),
            g().with("heads", 9)
                .with("kv_heads", 3)
                .with("head_dim", 64)
                .with("rope_dims", 64),
        ),
        Site::new(Family("loopnest.silu_mul"), g().with("len", 1536)),
        Site::new(Family("loopnest.add"), g().with("len", 576)),
        // The residual add fused into the RMSNorm after it.
        Site::new(
            Family("loopnest.add_rmsnorm"),
            g().with("dim", 576).with("rows", 1),
        ),
        Site::new(
            Family("loopnest.embed_q8_0"),
            g().with("vocab", 49152).with("dim", 576),
        ),
        Site::new(
            Family("loopnest.embed_f32"),
            g().with("vocab", 49152).with("dim", 576),
        ),
        Site::new(Family("loopnest.argmax"), g().with("len", 49152)),
    ]
}

#[test]
fn entries_register_each_family_once_with_its_arm_and_its_twins() {
    let es = entries();
    let mut names: Vec<_> = es.iter().map(|e| e.family.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), es.len());
    for e in &es {
        assert_eq!(e.arms.len(), 1);
        assert_eq!(e.arms[0].arm.family(), e.family);
        // SiLU·mul has weft-elementwise's exp-map twins
        // (tests/silu_mul_twins.rs); the nests the native lowerings
        // express have their generated AVX-512, AVX2 (tests/native_twins.rs)
        // and NEON (tests/native_a64_twins.rs) twins: every other family.
        // Either way three, one of them for arm64.
        let twins = &e.arms[0].twins;
        assert_eq!(twins.len(), 3, "{}", e.family);
        let arm64 = twins
            .iter()
            .filter(|t| t.isa() == weft_kernel::Isa::Aarch64)
            .count();
        assert_eq!(arm64, 1, "{}", e.family);
    }
}

#[test]
fn every_family_offers_and_builds_at_smollm2_geometry() {
    let es = entries();
    for site in smollm2_sites() {
        let e = es
            .iter()
            .find(|e| e.family == site.family)
            .expect("registered");
        let offer = e.arms[0].arm.offer(&site, &host()).expect("offer");
        assert_eq!(offer.contract.family, site.family.name());
        assert!(!offer.loops.is_empty(), "{}", site.family);
        assert!(offer.bytes_moved > 0);
        let code = e.arms[0].arm.build(&offer, host_isa()).expect("build");
        assert_eq!(code.isa, host_isa());
        assert!(!code.bytes.is_empty() && !weft_managed::listing(&code).is_empty());
    }
}

#[test]
fn every_family_cross_compiles_for_the_other_isa() {
    let other = match host_isa() {
        Isa::X86_64 => Isa::Aarch64,
        _ => Isa::X86_64,
    };
    let es = entries();
    for site in smollm2_sites() {
        let e = es.iter().find(|e| e.family == site.family).unwrap();
        let offer = e.arms[0].arm.offer(&site, &host()).unwrap();
        // Baseline features on the other ISA (x86-64: SSE2 only) suffice.
        let code = e.arms[0]
            .arm
            .build(&offer, other)
            .unwrap_or_else(|r| panic!("{}: {r}", site.family));
        assert_eq!(code.isa, other);
    }
}

/// Every arm's stated nest is the loops its bytes have, on both ISAs, so
/// weft-cost prices it: no arm is left to a race for a `nest-mismatch`
/// (SiLU·mul's exp has a lane loop for its slow path inside the vector
/// loop, which its nest states).
#[test]
fn every_arm_is_priced_from_its_bytes_on_both_isas() {
    use weft_cost::{CostModel, TableId};
    let es = entries();
    for (isa, table) in [
        (Isa::X86_64, TableId::Zen4),
        (Isa::Aarch64, TableId::NeoverseV2),
    ] {
        let model = CostModel::with_table(table);
        for site in smollm2_sites() {
            let arm = &es.iter().find(|e| e.family == site.family).unwrap().arms[0].arm;
            let offer = arm.offer(&site, &host()).unwrap();
            let code = arm.build(&offer, isa).unwrap();
            let priced = model
                .price(&code, &arm.nest(&offer), &offer)
                .unwrap_or_else(|e| panic!("{} on {isa:?}: {e}", site.family));
            assert!(priced.price.cycles > 0.0, "{} on {isa:?}", site.family);
        }
    }
}

#[test]
fn offers_name_the_args_and_the_split_axis() {
    let es = entries();
    let find = |f: &str| es.iter().find(|e| e.family.name() == f).unwrap();
    let site = |f: &'static str, g: Geometry| Site::new(Family(f), g);
    let o = find("loopnest.rmsnorm").arms[0]
        .arm
        .offer(
            &site(
                "loopnest.rmsnorm",
                Geometry::new().with("dim", 576).with("rows", 5),
            ),
            &host(),
        )
        .unwrap();
    assert_eq!(o.contract.args, RmsNormArgs::NAME);
    let v = o.views.expect("rows split");
    assert_eq!((v.axis.as_str(), v.extent, v.granule), ("rows", 5, 1));
    let trips: Vec<_> = o
        .loops
        .iter()
        .map(|l| (l.name.as_str(), l.trips, l.depth))
        .collect();
    // The reduction's remainder (576 % 16 = 0 here) is straight-line
    // code, never a loop; the vector loop's tail is one even when empty.
    assert_eq!(
        trips,
        [
            ("rows", 5, 0),
            ("squares", 36, 1),
            ("scale", 144, 1),
            ("scale.tail", 0, 1)
        ]
    );
    let o = find("loopnest.argmax").arms[0]
        .arm
        .offer(
            &site("loopnest.argmax", Geometry::new().with("len", 49152)),
            &host(),
        )
        .unwrap();
    assert!(o.views.is_none());
}

#[test]
fn bad_sites_are_refused_by_name() {
    let es = entries();
    let rms = &es
        .iter()
        .find(|e| e.family.name() == "loopnest.rmsnorm")
        .unwrap()
        .arms[0]
        .arm;
    let wrong = Site::new(Family("loopnest.add"), Geometry::new().with("len", 4));
    assert_eq!(
        rms.offer(&wrong, &host()).unwrap_err().name(),
        "unsupported-geometry"
    );
    let missing = Site::new(Family("loopnest.rmsnorm"), Geometry::new());
    assert_eq!(
        rms.offer(&missing, &host()).unwrap_err().name(),
        "missing-dimension"
    );
    let zero = Site::new(Family("loopnest.rmsnorm"), Geometry::new().with("dim", 0));
    assert_eq!(
        rms.offer(&zero, &host()).unwrap_err().name(),
        "unsupported-geometry"
    );
}

/// A twin that exists only to be checked.
struct Stranger;

// SAFETY: `emit` never returns a body.
unsafe impl Twin for Stranger {
    fn name(&self) -> &'static str {
        "stranger"
    }
    fn isa(&self) -> Isa {
        host_isa()
    }
    fn requires(&self) -> &'static [Feature] {
        &[]
    }
    fn emit(&self, _offer: &Offer) -> Result<NativeCode, Refusal> {
        Err(Refusal::EmitError {
            message: "never".into(),
        })
    }
}

/// `NestOp::twin_check`'s default, for a family without twins (every
/// family has twins now, so it is held to its promise directly).
#[test]
fn the_default_twin_check_refuses_every_twin_as_no_checker() {
    use weft_kernel::TwinCheck;
    for e in entries() {
        let site = smollm2_sites()
            .into_iter()
            .find(|s| s.family == e.family)
            .unwrap();
        let offer = e.arms[0].arm.offer(&site, &host()).unwrap();
        let code = NativeCode {
            isa: host_isa(),
            bytes: vec![0xc3],
            pool: None,
            loops: Vec::new(),
        };
        let r = weft_loopnest::NoTwins
            .check(
                Judged {
                    name: "arm",
                    code: &code,
                },
                Judged {
                    name: Stranger.name(),
                    code: &code,
                },
                &offer,
                &host(),
                1,
            )
            .unwrap_err();
        assert_eq!(r.name(), "no-checker");
    }
}

/// Build `op`'s body through its arm and place it as a `Kernel<O::Args>`,
/// as a planner does.
fn placed<O: NestOp>(op: &O) -> Kernel<O::Args> {
    let arm = weft_loopnest::NestArm::<O>::new();
    let site = Site::new(Family(O::FAMILY), op.geometry());
    let offer = arm.offer(&site, &host()).expect("offer");
    assert_eq!(offer.contract.args, O::Args::NAME);
    let code = arm.build(&offer, host_isa()).expect("build");
    // SAFETY: the arm's body for this offer honours the leaf ABI for
    // `O::Args` (the `Arm` impl's promise).
    unsafe { Kernel::from_native(&code) }.expect("placed")
}

/// Run `whole` once, and again split into `parts` restricted copies on
/// scoped threads; the caller compares the buffers.
fn split_run<A: KernelArgs>(k: &Kernel<A>, whole: &A, parts: u64, granule: u64) {
    let r = whole.range();
    let views = weft_kernel::MemberViews {
        axis: "split".into(),
        extent: r.end - r.start,
        granule,
    };
    std::thread::scope(|s| {
        for part in views.split(parts) {
            let a = whole.restrict(r.start + part.start..r.start + part.end);
            // SAFETY: `whole` was built by a checked constructor over
            // buffers that outlive the scope; restricted copies over
            // disjoint ranges touch disjoint memory (`KernelArgs`).
            s.spawn(move || unsafe { k.call(&a) });
        }
    });
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / 4e9 - 0.5)
        .collect()
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.iter()
        .zip(b)
        .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

#[test]
fn planner_style_thread_splits_are_bit_identical() {
    // RMSNorm over 7 rows.
    let op = RmsNorm::new(40, 7).unwrap();
    let k = placed(&op);
    let (x, w) = (values(280, 1), values(40, 2));
    let (mut y1, mut y2) = (vec![0f32; 280], vec![0f32; 280]);
    let a = RmsNormArgs::new(&op, &x, &w, &mut y1, 1e-5, 0..7).unwrap();
    // SAFETY: checked constructor; buffers outlive the call.
    unsafe { k.call(&a) };
    let a = RmsNormArgs::new(&op, &x, &w, &mut y2, 1e-5, 0..7).unwrap();
    split_run(&k, &a, 3, 1);
    assert!(same_bits(&y1, &y2));

    // SiLU-gated product over 100 elements, granule 16.
    let op = SiluMul::new(100).unwrap();
    let k = placed(&op);
    let (g, u) = (values(100, 3), values(100, 4));
    let (mut h1, mut h2) = (vec![0f32; 100], vec![0f32; 100]);
    let a = SiluMulArgs::new(&op, &g, &u, &mut h1, 0..100).unwrap();
    // SAFETY: checked constructor; buffers outlive the call.
    unsafe { k.call(&a) };
    let a = SiluMulArgs::new(&op, &g, &u, &mut h2, 0..100).unwrap();
    split_run(&k, &a, 3, 16);
    assert!(same_bits(&h1, &h2));

    // Residual add.
    let op = Add::new(77).unwrap();
    let k = placed(&op);
    let y = values(77, 5);
    let (mut x1, mut x2) = (values(77, 6), values(77, 6));
    let a = AddArgs::new(&op, &mut x1, &y, 0..77).unwrap();
    // SAFETY: checked constructor; buffers outlive the call.
    unsafe { k.call(&a) };
    let a = AddArgs::new(&op, &mut x2, &y, 0..77).unwrap();
    split_run(&k, &a, 2, 16);
    assert!(same_bits(&x1, &x2));

    // RoPE over 5 tokens.
    let op = Rope::new(3, 1, 8, 8, 5).unwrap();
    let k = placed(&op);
    let table = RopeTable::new(10000.0, 8, 16).unwrap();
    let (mut q1, mut k1) = (values(120, 7), values(40, 8));
    let (mut q2, mut k2) = (q1.clone(), k1.clone());
    let a = RopeArgs::new(&op, &mut q1, &mut k1, &table, 4, 0..5).unwrap();
    // SAFETY: checked constructor; buffers outlive the call.
    unsafe { k.call(&a) };
    let a = RopeArgs::new(&op, &mut q2, &mut k2, &table, 4, 0..5).unwrap();
    split_run(&k, &a, 3, 1);
    assert!(same_bits(&q1, &q2) && same_bits(&k1, &k2));

    // Embedding of 6 tokens from a Q8_0 table.
    let op = EmbedQ8_0::new(4, 64, 6).unwrap();
    let k = placed(&op);
    let table: Vec<u8> = (0..4 * 2 * 34)
        .map(|i: u32| if i % 34 == 1 { 0x3c } else { (i * 37) as u8 })
        .collect();
    let ids = [3u32, 0, 2, 2, 1, 3];
    let (mut o1, mut o2) = (vec![0f32; 6 * 64], vec![0f32; 6 * 64]);
    let a = EmbedArgs::new(&op, Table::Q8_0(&table), &ids, &mut o1, 0..6).unwrap();
    // SAFETY: checked constructor; buffers outlive the call.
    unsafe { k.call(&a) };
    let a = EmbedArgs::new(&op, Table::Q8_0(&table), &ids, &mut o2, 0..6).unwrap();
    split_run(&k, &a, 4, 1);
    assert!(same_bits(&o1, &o2));
}

#[test]
fn a_body_called_with_another_shape_touches_nothing() {
    // Compiled for dim 8, called with args for dim 4: the entry guard
    // returns before any access.
    let k = placed(&RmsNorm::new(8, 1).unwrap());
    let other = RmsNorm::new(4, 1).unwrap();
    let (x, w) = ([1f32; 4], [1f32; 4]);
    let mut y = [-7f32; 4];
    let a = RmsNormArgs::new(&other, &x, &w, &mut y, 0.0, 0..1).unwrap();
    // SAFETY: the args are valid for their own (smaller) shape; the body's
    // guard refuses them, which is what this test shows.
    unsafe { k.call(&a) };
    assert_eq!(y, [-7f32; 4]);
}

#[test]
fn clif_of_the_add_nest() {
    let op = Add::new(16).unwrap();
    let target = Target::host().expect("host target");
    let text = weft_loopnest::lower::clif_text(&op.nest(), &target).expect("lowers");
    insta::assert_snapshot!(text);
}

#[test]
#[ignore = "prints the host listings of the SmolLM2 sites' bodies"]
fn print_listings() {
    let es = entries();
    for site in smollm2_sites() {
        let e = es.iter().find(|e| e.family == site.family).unwrap();
        let offer = e.arms[0].arm.offer(&site, &host()).unwrap();
        let code = e.arms[0].arm.build(&offer, host_isa()).unwrap();
        println!(
            "== {} ({} bytes)\n{}",
            site.family,
            code.bytes.len(),
            weft_managed::listing(&code)
        );
    }
}
