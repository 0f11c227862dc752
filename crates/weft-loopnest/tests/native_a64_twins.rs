//! The generated arm64 twins (one NEON lowering for every nest): registered
//! for the families whose nests it expresses, every word a form weft-a64
//! knows and none a fused multiply-add, their stated nests the loops their
//! bytes have (so weft-cost prices them on Neoverse V2), listings
//! snapshotted, nests the lowering cannot express refused by name — and,
//! on an aarch64 host (the CI's leg under `qemu-aarch64 -cpu max`:
//! `cargo test -p weft-loopnest --target aarch64-unknown-linux-gnu`),
//! accepted bit for bit by each family's own check at every partial step,
//! bodies with one instruction changed refused by it.

mod common;

use std::sync::Arc;

use weft_kernel::{Arm, Family, Feature, Geometry, Host, Isa, NativeCode, Offer, Site, Twin};
use weft_loopnest::native_a64;
use weft_loopnest::ops::native::NestA64Twin;
use weft_loopnest::{
    family_entry, Add, AddRmsNorm, Argmax, EmbedF32, EmbedQ8_0, NestArm, NestOp, RmsNorm, Rope,
    SiluMul,
};

fn host() -> Host {
    Host::detect()
}

/// The arm's offer at `g`.
fn offer<O: NestOp>(g: Geometry) -> Offer {
    let arm = NestArm::<O>::new();
    let site = Site::new(Family(O::FAMILY), g);
    arm.offer(&site, &host()).expect("offer")
}

/// `O`'s registered arm64 twin.
fn neon_of<O: NestOp>() -> Arc<dyn Twin> {
    let twins = family_entry::<O>().arms[0].twins.clone();
    let mut neon: Vec<_> = twins
        .into_iter()
        .filter(|t| t.isa() == Isa::Aarch64)
        .collect();
    assert_eq!(neon.len(), 1, "{}", O::FAMILY);
    neon.remove(0)
}

fn rmsnorm(dim: u64) -> Geometry {
    Geometry::new().with("dim", dim).with("rows", 1)
}

fn rope(heads: u64, kv_heads: u64, head_dim: u64, rope_dims: u64) -> Geometry {
    Geometry::new()
        .with("heads", heads)
        .with("kv_heads", kv_heads)
        .with("head_dim", head_dim)
        .with("rope_dims", rope_dims)
}

fn len(n: u64) -> Geometry {
    Geometry::new().with("len", n)
}

fn embed(vocab: u64, dim: u64) -> Geometry {
    Geometry::new().with("vocab", vocab).with("dim", dim)
}

/// The shapes each family is judged at (the x64 twins' own, ragged).
fn rmsnorm_dims() -> Vec<Geometry> {
    (1..=33)
        .chain([64, 576, 640, 960, 1000])
        .map(rmsnorm)
        .collect()
}

fn add_rmsnorm_dims() -> Vec<Geometry> {
    (1..=33).chain([64, 576, 640, 960]).map(rmsnorm).collect()
}

fn add_lens() -> Vec<Geometry> {
    vec![len(1), len(7), len(64), len(576), len(640), len(4096)]
}

fn rope_shapes() -> Vec<Geometry> {
    vec![
        rope(9, 3, 64, 64),
        rope(4, 1, 256, 256),
        rope(4, 2, 64, 32),
        rope(3, 1, 40, 40),
        rope(2, 2, 6, 4),
        rope(1, 1, 2, 2),
        rope(2, 1, 30, 26),
        rope(2, 1, 14, 14),
    ]
}

fn embed_f32_shapes() -> Vec<Geometry> {
    let mut shapes: Vec<Geometry> = [1u64, 2, 3, 5, 7, 8, 15, 16, 17, 31, 33]
        .map(|d| embed(50, d))
        .to_vec();
    shapes.push(embed(49_152, 576));
    shapes.push(embed(1, 640));
    shapes
}

fn embed_q8_shapes() -> Vec<Geometry> {
    let mut shapes: Vec<Geometry> = [32u64, 64, 96, 160].map(|d| embed(50, d)).to_vec();
    shapes.push(embed(49_152, 576));
    shapes.push(embed(1, 640));
    shapes
}

fn argmax_lens() -> Vec<Geometry> {
    (1..=33)
        .chain([48, 63, 64, 100, 1000, 49_152, 262_144])
        .map(len)
        .collect()
}

#[test]
fn every_generated_family_registers_a_neon_twin_after_its_x64_ones() {
    fn names<O: NestOp>() -> Vec<(&'static str, Isa, &'static [Feature])> {
        family_entry::<O>().arms[0]
            .twins
            .iter()
            .map(|t| (t.name(), t.isa(), t.requires()))
            .collect()
    }
    fn check<O: NestOp>(prefix: &str) {
        let got = names::<O>();
        let want: Vec<String> = ["avx512", "avx2", "neon"]
            .iter()
            .map(|t| format!("{prefix}.twin.{t}"))
            .collect();
        assert_eq!(
            got.iter().map(|t| t.0).collect::<Vec<_>>(),
            want,
            "{prefix}"
        );
        assert_eq!(got[2].1, Isa::Aarch64);
        assert_eq!(got[2].2, &[Feature::Neon][..]);
        assert_eq!(got[2].2, native_a64::REQUIRES);
        assert!(got[..2].iter().all(|t| t.1 == Isa::X86_64));
    }
    check::<Add>("loopnest.add");
    check::<RmsNorm>("loopnest.rmsnorm");
    check::<AddRmsNorm>("loopnest.add_rmsnorm");
    check::<Rope>("loopnest.rope");
    check::<EmbedF32>("loopnest.embed_f32");
    check::<EmbedQ8_0>("loopnest.embed_q8_0");
    check::<Argmax>("loopnest.argmax");
}

/// Every word of `code`, decoded: a form weft-a64 knows, and not a fused
/// multiply-add (the IR has none) or an estimate.
fn words_are_known_and_unfused(name: &str, code: &NativeCode) {
    assert_eq!(code.isa, Isa::Aarch64, "{name}");
    assert_eq!(code.bytes.len() % 4, 0, "{name}");
    for (i, w) in code.bytes.chunks_exact(4).enumerate() {
        let word = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        let ins = weft_a64::decode(word)
            .unwrap_or_else(|| panic!("{name}: word {i} ({word:#010x}) is no known form"));
        let text = ins.to_string();
        let mnemonic = text.split_whitespace().next().unwrap_or("");
        assert!(
            !matches!(
                mnemonic,
                "fmla" | "fmls" | "fmadd" | "fmsub" | "fnmadd" | "fnmsub" | "frecpe" | "frsqrte"
            ),
            "{name}: word {i} is `{text}`"
        );
    }
    // The body ends in `ret`.
    let last = &code.bytes[code.bytes.len() - 4..];
    assert_eq!(
        u32::from_le_bytes([last[0], last[1], last[2], last[3]]),
        0xd65f_03c0,
        "{name}"
    );
}

/// Every family's arm64 twin at every shape it is judged at: it emits, its
/// words are known and unfused, its annotated loops are the loops its nest
/// states, in order, and weft-cost prices its bytes with that nest on
/// Neoverse V2. This runs on any host (emission only).
#[test]
fn each_neon_twin_emits_known_unfused_words_and_states_its_loops() {
    use weft_cost::{CostModel, TableId};
    let model = CostModel::with_table(TableId::NeoverseV2);
    fn all<O: NestOp>(shapes: &[Geometry], model: &CostModel, priced: &[Geometry]) {
        let t = neon_of::<O>();
        for g in shapes {
            let o = offer::<O>(g.clone());
            let code = t
                .emit(&o)
                .unwrap_or_else(|r| panic!("{} at {g:?}: {r}", t.name()));
            words_are_known_and_unfused(t.name(), &code);
            let nest = t.nest(&o);
            let annotated: Vec<_> = code.loops.iter().map(|l| l.name.as_str()).collect();
            let stated: Vec<_> = nest.iter().map(|l| l.name.as_str()).collect();
            assert_eq!(annotated, stated, "{} at {g:?}", t.name());
            for l in &code.loops {
                assert!(l.head < l.back_edge && l.back_edge < code.bytes.len());
            }
            if priced.contains(g) {
                let p = model
                    .price(&code, &nest, &o)
                    .unwrap_or_else(|e| panic!("{} at {g:?}: {e}", t.name()));
                assert!(p.price.cycles > 0.0, "{}", t.name());
            }
        }
    }
    all::<RmsNorm>(&rmsnorm_dims(), &model, &[rmsnorm(576), rmsnorm(7)]);
    all::<AddRmsNorm>(&add_rmsnorm_dims(), &model, &[rmsnorm(576), rmsnorm(7)]);
    all::<Add>(&add_lens(), &model, &[len(576), len(1)]);
    all::<Rope>(
        &rope_shapes(),
        &model,
        &[rope(9, 3, 64, 64), rope(2, 2, 6, 4)],
    );
    all::<EmbedF32>(&embed_f32_shapes(), &model, &[embed(49_152, 576)]);
    all::<EmbedQ8_0>(&embed_q8_shapes(), &model, &[embed(49_152, 576)]);
    all::<Argmax>(&argmax_lens(), &model, &[len(49_152), len(7), len(16)]);
}

/// The same nest gives the same bytes every time (the planner hashes and
/// caches bodies by their bytes).
#[test]
fn neon_emission_is_deterministic() {
    fn twice<O: NestOp>(g: Geometry) {
        let o = offer::<O>(g);
        let t = neon_of::<O>();
        let first = t.emit(&o).expect("emits");
        for _ in 0..8 {
            assert_eq!(t.emit(&o).expect("emits"), first, "{}", t.name());
        }
    }
    twice::<Add>(len(100));
    twice::<RmsNorm>(rmsnorm(100));
    twice::<AddRmsNorm>(rmsnorm(100));
    twice::<Rope>(rope(9, 3, 64, 64));
    twice::<EmbedF32>(embed(100, 100));
    twice::<Argmax>(len(100));
    twice::<EmbedQ8_0>(embed(100, 96));
}

/// Every `Loop` of a nest, outermost first, for tests that bend a nest.
fn loops(body: &mut [weft_loopnest::ir::Stmt], f: &mut dyn FnMut(&mut weft_loopnest::ir::Loop)) {
    for s in body {
        if let weft_loopnest::ir::Stmt::Loop(l) = s {
            f(l);
            loops(&mut l.body, f);
        }
    }
}

/// RMSNorm's nest with the sum of squares over `lanes` lanes.
fn rmsnorm_with_lanes(dim: usize, lanes: u32) -> weft_loopnest::ir::Kernel {
    let mut nest = RmsNorm::new(dim, 1).expect("shape").nest();
    fn set(body: &mut [weft_loopnest::ir::Stmt], lanes: u32) {
        for s in body {
            match s {
                weft_loopnest::ir::Stmt::Reduce(r) => {
                    r.lanes = lanes;
                    r.width = r.width.min(lanes);
                }
                weft_loopnest::ir::Stmt::Loop(l) => set(&mut l.body, lanes),
                _ => {}
            }
        }
    }
    set(&mut nest.body, lanes);
    nest
}

#[test]
fn nests_the_neon_lowering_cannot_express_are_refused_by_name() {
    // exp where no exp-based map is (the residual add's sum through exp).
    let silu = common::exp_outside_a_map();
    // An innermost loop of width 1.
    let mut scalar = Add::new(64).expect("shape").nest();
    loops(&mut scalar.body, &mut |l| l.width = 1);
    // A sum over fewer lanes than a register holds.
    let narrow = rmsnorm_with_lanes(64, 2);
    for (nest, what) in [
        (silu, "exp outside an exp-based map"),
        (scalar, "width 1"),
        (narrow, "2 lanes"),
    ] {
        nest.check().expect("a well-formed nest");
        let e = native_a64::emit(&nest).unwrap_err();
        assert!(e.to_string().contains(what), "{}: {e}", nest.name);
        assert_eq!(e.refusal(&nest.name).name(), "unsupported-geometry");
    }
    // A sum over one register's lanes is expressed (its own rounding).
    native_a64::emit(&rmsnorm_with_lanes(64, 4)).expect("4 lanes lower");
    // exp in an exp-based map takes the map route: SiLU·mul emits.
    let o = offer::<SiluMul>(len(64));
    let t = NestA64Twin::<SiluMul>::new("silu_mul.probe");
    t.emit(&o).expect("SiLU·mul lowers through the map route");
}

#[test]
fn a_foreign_offer_is_refused_by_name() {
    let o = offer::<RmsNorm>(rmsnorm(64));
    assert_eq!(neon_of::<Add>().emit(&o).unwrap_err().name(), "bad-operand");
    let mut o = offer::<Add>(len(64));
    o.contract.family = "loopnest.silu_mul".into();
    assert_eq!(
        neon_of::<Add>().emit(&o).unwrap_err().name(),
        "unsupported-geometry"
    );
}

#[test]
fn neon_listings_are_snapshotted() {
    let code = neon_of::<Add>()
        .emit(&offer::<Add>(len(64)))
        .expect("emits");
    insta::assert_snapshot!("add_neon", weft_managed::listing(&code));
    let code = neon_of::<RmsNorm>()
        .emit(&offer::<RmsNorm>(rmsnorm(40)))
        .expect("emits");
    insta::assert_snapshot!("rmsnorm_40_neon", weft_managed::listing(&code));
    let code = neon_of::<Argmax>()
        .emit(&offer::<Argmax>(len(21)))
        .expect("emits");
    insta::assert_snapshot!("argmax_21_neon", weft_managed::listing(&code));
}

/// The judged tests: only an aarch64 host can run the bodies.
#[cfg(target_arch = "aarch64")]
mod on_aarch64 {
    use super::*;
    use weft_kernel::{Judged, Refusal};
    use weft_validate::testing::judge_with;

    /// The arm's offer at `g` and the arm's body for the host.
    fn arm_offer<O: NestOp>(g: Geometry) -> (Offer, NativeCode) {
        let arm = NestArm::<O>::new();
        let site = Site::new(Family(O::FAMILY), g);
        let offer = arm.offer(&site, &host()).expect("offer");
        let code = arm.build(&offer, host().isa).expect("arm builds");
        (offer, code)
    }

    /// `twin` judged by `O`'s registered check at `g`.
    fn judge<O: NestOp>(twin: &dyn Twin, g: &Geometry) -> Result<weft_kernel::Checked, Refusal> {
        let (offer, arm_code) = arm_offer::<O>(g.clone());
        let entry = family_entry::<O>();
        judge_with(
            entry.arms[0].check.as_ref(),
            twin,
            &arm_code,
            &offer,
            &host(),
            0x5eed,
        )
    }

    /// `O`'s NEON twin accepted at every geometry of `shapes`.
    fn accepted_at<O: NestOp>(shapes: &[Geometry]) {
        let t = neon_of::<O>();
        assert!(
            weft_kernel::require_features(&host(), t.requires()).is_ok(),
            "an aarch64 host without NEON"
        );
        for g in shapes {
            match judge::<O>(t.as_ref(), g) {
                Ok(c) => assert!(c.cases > 0 && c.words > 0, "{} at {g:?}", t.name()),
                Err(r) => panic!("{} at {g:?}: {r}", t.name()),
            }
        }
    }

    #[test]
    fn add_neon_twin_is_accepted_by_the_family_check() {
        // The cases hold every range length 0..=33 from several starts.
        accepted_at::<Add>(&add_lens());
    }

    #[test]
    fn rmsnorm_neon_twin_is_accepted_at_every_tail_dim() {
        accepted_at::<RmsNorm>(&rmsnorm_dims());
    }

    #[test]
    fn fused_add_rmsnorm_neon_twin_is_accepted_at_every_tail_dim() {
        accepted_at::<AddRmsNorm>(&add_rmsnorm_dims());
    }

    #[test]
    fn rope_neon_twin_is_accepted_at_partial_and_whole_steps() {
        accepted_at::<Rope>(&rope_shapes());
    }

    #[test]
    fn embed_f32_neon_twin_is_accepted_with_ids_in_and_out_of_range() {
        accepted_at::<EmbedF32>(&embed_f32_shapes());
    }

    #[test]
    fn embed_q8_0_neon_twin_is_accepted_on_every_scale_class() {
        accepted_at::<EmbedQ8_0>(&embed_q8_shapes());
    }

    #[test]
    fn argmax_neon_twin_is_accepted_at_every_remainder() {
        accepted_at::<Argmax>(&argmax_lens());
    }

    /// A twin whose body is fixed bytes: what the judge sees.
    struct Fixed {
        name: &'static str,
        code: NativeCode,
    }

    // SAFETY: the bytes are a generated twin's with one instruction
    // changed for another of the same class (same registers, no memory
    // access changed) or a lowering of the same nest with another lane
    // count: they touch what the twin touches.
    unsafe impl Twin for Fixed {
        fn name(&self) -> &'static str {
            self.name
        }
        fn isa(&self) -> Isa {
            Isa::Aarch64
        }
        fn requires(&self) -> &'static [Feature] {
            &[]
        }
        fn emit(&self, _offer: &Offer) -> Result<NativeCode, Refusal> {
            Ok(self.code.clone())
        }
    }

    /// `code` with the `nth` word whose decoded text starts with `from`
    /// re-encoded with `to` as its mnemonic (same operands).
    fn mutate(code: &NativeCode, from: &str, nth: usize, to: &'static str) -> NativeCode {
        let mut out = code.clone();
        let mut seen = 0;
        for at in (0..code.bytes.len()).step_by(4) {
            let word = u32::from_le_bytes(code.bytes[at..at + 4].try_into().expect("4 bytes"));
            let Some(ins) = weft_a64::decode(word) else {
                continue;
            };
            if ins.to_string().starts_with(&format!("{from} ")) {
                if seen == nth {
                    let changed = weft_a64::Inst::with_mnemonic(to, ins.operands())
                        .expect("same operands")
                        .encode()
                        .expect("encodes");
                    out.bytes[at..at + 4].copy_from_slice(&changed.to_le_bytes());
                    return out;
                }
                seen += 1;
            }
        }
        panic!("no {nth}th `{from}`");
    }

    fn refused<O: NestOp>(name: &'static str, g: &Geometry, code: NativeCode) {
        match judge::<O>(&Fixed { name, code }, g) {
            Err(r) => assert_eq!(r.name(), "mismatch", "{name}: {r}"),
            Ok(c) => panic!("{name} accepted on {} cases", c.cases),
        }
    }

    #[test]
    fn neon_bodies_with_one_operation_changed_are_refused() {
        let emit = |t: Arc<dyn Twin>, o: &Offer| t.emit(o).expect("emits");
        // add: x + y becomes x - y.
        let g = len(576);
        let code = emit(neon_of::<Add>(), &offer::<Add>(g.clone()));
        refused::<Add>("mutant.add-subtracts", &g, mutate(&code, "fadd", 0, "fsub"));
        // rmsnorm: x·x in the sum of squares becomes x + x.
        let g = rmsnorm(576);
        let code = emit(neon_of::<RmsNorm>(), &offer::<RmsNorm>(g.clone()));
        refused::<RmsNorm>("mutant.rmsnorm-adds", &g, mutate(&code, "fmul", 0, "fadd"));
        // add_rmsnorm at a ragged dim: the partial step's fused add.
        let g = rmsnorm(33);
        let code = emit(neon_of::<AddRmsNorm>(), &offer::<AddRmsNorm>(g.clone()));
        refused::<AddRmsNorm>(
            "mutant.add-rmsnorm-divides",
            &g,
            mutate(&code, "fmul", 1, "fdiv"),
        );
        // rope: x·C becomes x + C.
        let g = rope(9, 3, 64, 64);
        let code = emit(neon_of::<Rope>(), &offer::<Rope>(g.clone()));
        refused::<Rope>("mutant.rope-adds", &g, mutate(&code, "fmul", 0, "fadd"));
        // argmax: a later tie wins (`>=` becomes `>`).
        let g = len(1000);
        let code = emit(neon_of::<Argmax>(), &offer::<Argmax>(g.clone()));
        refused::<Argmax>(
            "mutant.argmax-later-tie-wins",
            &g,
            mutate(&code, "fcmge", 0, "fcmgt"),
        );
    }

    #[test]
    fn a_sum_in_another_lane_order_is_refused_as_a_mismatch() {
        for dim in [576usize, 33] {
            let g = rmsnorm(dim as u64);
            let code = native_a64::emit(&rmsnorm_with_lanes(dim, 32)).expect("emits");
            refused::<RmsNorm>("mutant.32-lanes", &g, code);
        }
    }

    #[test]
    fn a_body_that_does_nothing_is_refused_as_a_mismatch() {
        let (o, arm_code) = arm_offer::<Add>(len(576));
        let ret = NativeCode {
            isa: Isa::Aarch64,
            bytes: 0xd65f_03c0u32.to_le_bytes().to_vec(),
            pool: None,
            loops: Vec::new(),
        };
        let r = family_entry::<Add>().arms[0]
            .check
            .check(
                Judged {
                    name: "arm",
                    code: &arm_code,
                },
                Judged {
                    name: "ret",
                    code: &ret,
                },
                &o,
                &host(),
                1,
            )
            .unwrap_err();
        assert_eq!(r.name(), "mismatch", "{r}");
    }

    /// The planner validates the NEON twins with each family's check at
    /// decode shapes (its choice among validated bodies is its price's).
    #[test]
    fn the_planner_validates_the_neon_twins_at_decode_shapes() {
        use weft_plan::{CacheLocation, Catalogue, Options, Planner, VerdictReport};
        let mut catalogue = Catalogue::new();
        catalogue
            .register_all(weft_loopnest::entries())
            .expect("registers");
        let sites = vec![
            Site::new(Family(RmsNorm::FAMILY), rmsnorm(576)),
            Site::new(Family(AddRmsNorm::FAMILY), rmsnorm(576)),
            Site::new(Family(Add::FAMILY), len(576)),
            Site::new(Family(Rope::FAMILY), rope(9, 3, 64, 64)),
            Site::new(Family(EmbedF32::FAMILY), embed(1000, 576)),
            Site::new(Family(EmbedQ8_0::FAMILY), embed(1000, 576)),
            Site::new(Family(Argmax::FAMILY), len(49_152)),
        ];
        let options = Options {
            cache: CacheLocation::InMemory,
            ..Options::default()
        };
        let mut planner = Planner::for_host(catalogue, host(), options);
        let plan = planner.compile(&sites).expect("plans");
        eprintln!("{}", plan.report());
        for report in &plan.report().sites {
            let neon: Vec<_> = report
                .candidates
                .iter()
                .filter(|c| c.name.ends_with(".twin.neon"))
                .collect();
            assert_eq!(neon.len(), 1, "{}", report.family);
            assert!(
                matches!(neon[0].verdict, VerdictReport::Validated { .. }),
                "{}: {:?}",
                neon[0].name,
                neon[0].verdict
            );
        }
    }

    /// `i8` loads in a partial step (which no family's nest has, and the
    /// x64 lowering refuses): a Q8_0 gather whose blocks are cut to 21,
    /// 22, 23 and 29 quants, against the interpreter running the same cut
    /// nest.
    #[test]
    fn i8_loads_in_a_partial_step_compute_the_interpreters_bits() {
        use weft_loopnest::interp::{self, Arg, Buffer};
        use weft_loopnest::ir::Extent;
        use weft_loopnest::{EmbedArgs, Table};
        let (vocab, dim) = (10usize, 64usize);
        let op = EmbedQ8_0::from_geometry(&embed(vocab as u64, dim as u64)).expect("shape");
        // Row r, block b: an f16 scale (finite, varied), then 32 quants.
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut table = Vec::new();
        for _ in 0..vocab * dim / 32 {
            let scale = half::f16::from_f32((next() % 2000) as f32 / 997.0 - 1.0).to_bits();
            table.extend_from_slice(&scale.to_le_bytes());
            table.extend((0..32).map(|_| next() as u8));
        }
        let ids = [3u32, 0, 9, 7, 3, 1];
        for end in [21u64, 22, 23, 29] {
            let mut nest = op.nest();
            loops(&mut nest.body, &mut |l| {
                if l.name == "quants" {
                    l.end = Extent::Const(end);
                }
            });
            nest.check().expect("a well-formed nest");
            let code = native_a64::emit(&nest).expect("emits");
            // SAFETY: the body is a nest of `op`'s with fewer quants per
            // block: it touches a subset of what `op`'s body touches.
            let placed = unsafe { weft_loopnest::Placed::from_native(&code, op) }.expect("places");
            for range in [0..ids.len(), 1..4] {
                let mut out = vec![-7.5f32; ids.len() * dim];
                let args = EmbedArgs::new(&op, Table::Q8_0(&table), &ids, &mut out, range.clone())
                    .expect("args");
                // SAFETY: `new` checked the extents against live buffers.
                unsafe { placed.kernel().call(&args) };
                let ix = |v: usize| Arg::Index(v as u64);
                let mut want = vec![
                    Arg::Buffer(Buffer::Bytes(table.clone())),
                    Arg::Buffer(Buffer::U32(ids.to_vec())),
                    Arg::Buffer(Buffer::F32(vec![-7.5f32; ids.len() * dim])),
                    ix(vocab),
                    ix(dim),
                    ix(ids.len()),
                    ix(range.start),
                    ix(range.end),
                ];
                interp::run(&nest, &mut want).expect("interprets");
                let want = want[2].f32s().expect("f32s").to_vec();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&out), bits(&want), "{end} quants, rows {range:?}");
            }
        }
    }

    /// The NEON bodies against the interpreter directly (not only against
    /// the arm): RMSNorm and the fused add→RMSNorm at ragged dims, argmax
    /// with ties and NaNs.
    #[test]
    fn neon_bodies_compute_the_interpreters_bits() {
        use weft_loopnest::{AddRmsNormArgs, ArgmaxArgs, RmsNormArgs};
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for d in (1..=33).chain([64, 576]) {
            let op = RmsNorm::new(d, 2).expect("shape");
            let code = native_a64::emit(&op.nest()).expect("emits");
            // SAFETY: the body is the nest's NEON lowering for the host.
            let placed = unsafe { weft_loopnest::Placed::from_native(&code, op) }.expect("places");
            let x: Vec<f32> = (0..2 * d).map(|j| (j as f32 * 0.37).sin() * 3.0).collect();
            let w: Vec<f32> = (0..d).map(|j| 1.0 + (j % 5) as f32 * 0.1).collect();
            let (mut y, mut want) = (vec![0f32; 2 * d], vec![0f32; 2 * d]);
            let args = RmsNormArgs::new(&op, &x, &w, &mut y, 1e-5, 0..2).expect("args");
            // SAFETY: `new` checked the extents against live buffers.
            unsafe { placed.kernel().call(&args) };
            op.reference(&x, &w, &mut want, 1e-5, 0..2)
                .expect("reference");
            assert_eq!(bits(&y), bits(&want), "rmsnorm dim {d}");

            let op = AddRmsNorm::new(d, 1).expect("shape");
            let code = native_a64::emit(&op.nest()).expect("emits");
            // SAFETY: as above.
            let placed = unsafe { weft_loopnest::Placed::from_native(&code, op) }.expect("places");
            let mut h: Vec<f32> = (0..d).map(|j| (j as f32 * 0.11).cos()).collect();
            let r: Vec<f32> = (0..d).map(|j| j as f32 * 0.25 - 3.0).collect();
            let mut want_h = h.clone();
            let (mut out, mut want) = (vec![0f32; d], vec![0f32; d]);
            let args =
                AddRmsNormArgs::new(&op, &mut h, &r, &w, &mut out, 1e-5, 0..1).expect("args");
            // SAFETY: as above.
            unsafe { placed.kernel().call(&args) };
            op.reference(&mut want_h, &r, &w, &mut want, 1e-5, 0..1)
                .expect("reference");
            assert_eq!(bits(&h), bits(&want_h), "add_rmsnorm sum dim {d}");
            assert_eq!(bits(&out), bits(&want), "add_rmsnorm dim {d}");
        }
        for n in (1..=40).chain([1000]) {
            let op = Argmax::new(n).expect("shape");
            let code = native_a64::emit(&op.nest()).expect("emits");
            // SAFETY: as above.
            let placed = unsafe { weft_loopnest::Placed::from_native(&code, op) }.expect("places");
            for pattern in 0..4 {
                let logits: Vec<f32> = (0..n)
                    .map(|j| match pattern {
                        0 => (j % 7) as f32,
                        1 => -((j % 5) as f32),
                        2 if j == n / 2 => f32::NAN,
                        2 => j as f32,
                        _ => -0.0,
                    })
                    .collect();
                let mut out = u32::MAX;
                let args = ArgmaxArgs::new(&op, &logits, &mut out).expect("args");
                // SAFETY: as above.
                unsafe { placed.kernel().call(&args) };
                assert_eq!(
                    out,
                    op.reference(&logits).expect("reference"),
                    "argmax n {n} pattern {pattern}"
                );
            }
        }
    }
}
