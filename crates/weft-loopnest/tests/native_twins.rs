//! The generated twins (one native x64 lowering for every nest): registered
//! for the families whose nests it expresses, accepted bit for bit by each
//! family's own check at every partial step, bodies with one instruction
//! changed refused by it, their stated nests the loops their bytes have
//! (so weft-cost prices them), chosen by the planner at decode shapes, and
//! nests the lowering cannot express refused by name.

#![cfg(target_arch = "x86_64")]

mod common;

use std::sync::Arc;

use weft_kernel::{
    require_features, Arm, Family, Geometry, Host, Judged, NativeCode, Offer, Refusal, Site, Twin,
};
use weft_loopnest::native_x64::{self, Tier};
use weft_loopnest::ops::native::NestX64Twin;
use weft_loopnest::{
    family_entry, Add, AddRmsNorm, Argmax, EmbedF32, EmbedQ8_0, NestArm, NestOp, RmsNorm, Rope,
    SiluMul,
};
use weft_validate::testing::judge_with;
use weft_x64::iced_x86::{Code, Decoder, DecoderOptions, Encoder, Instruction};
use weft_x64::Abi;

fn host() -> Host {
    Host::detect()
}

fn runnable(t: &dyn Twin) -> bool {
    require_features(&host(), t.requires()).is_ok()
}

/// The arm's offer at `g` and the arm's body for the host.
fn arm_offer<O: NestOp>(g: Geometry) -> (Offer, NativeCode) {
    let arm = NestArm::<O>::new();
    let site = Site::new(Family(O::FAMILY), g);
    let offer = arm.offer(&site, &host()).expect("offer");
    let code = arm.build(&offer, host().isa).expect("arm builds");
    (offer, code)
}

/// `O`'s registered x64 twins (its arm64 one is `native_a64_twins.rs`'s).
fn twins_of<O: NestOp>() -> Vec<Arc<dyn Twin>> {
    family_entry::<O>().arms[0]
        .twins
        .iter()
        .filter(|t| t.isa() == weft_kernel::Isa::X86_64)
        .cloned()
        .collect()
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

/// Every runnable twin of `O` accepted at every geometry of `shapes`.
fn accepted_at<O: NestOp>(shapes: &[Geometry]) {
    let twins = twins_of::<O>();
    assert_eq!(twins.len(), 2, "{}", O::FAMILY);
    for t in twins.iter().filter(|t| runnable(t.as_ref())) {
        for g in shapes {
            match judge::<O>(t.as_ref(), g) {
                Ok(c) => assert!(c.cases > 0 && c.words > 0, "{} at {g:?}", t.name()),
                Err(r) => panic!("{} at {g:?}: {r}", t.name()),
            }
        }
    }
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

#[test]
fn generated_twins_are_registered_for_the_families_the_lowering_expresses() {
    let names =
        |ts: Vec<Arc<dyn Twin>>| -> Vec<&'static str> { ts.iter().map(|t| t.name()).collect() };
    assert_eq!(
        names(twins_of::<Add>()),
        ["loopnest.add.twin.avx512", "loopnest.add.twin.avx2"]
    );
    assert_eq!(
        names(twins_of::<RmsNorm>()),
        ["loopnest.rmsnorm.twin.avx512", "loopnest.rmsnorm.twin.avx2"]
    );
    assert_eq!(
        names(twins_of::<Rope>()),
        ["loopnest.rope.twin.avx512", "loopnest.rope.twin.avx2"]
    );
    assert_eq!(
        names(twins_of::<EmbedF32>()),
        [
            "loopnest.embed_f32.twin.avx512",
            "loopnest.embed_f32.twin.avx2"
        ]
    );
    for t in twins_of::<Add>() {
        let want = if t.name().ends_with("avx512") {
            Tier::Avx512
        } else {
            Tier::Avx2
        };
        assert_eq!(t.requires(), want.requires());
    }
    assert_eq!(
        names(twins_of::<EmbedQ8_0>()),
        [
            "loopnest.embed_q8_0.twin.avx512",
            "loopnest.embed_q8_0.twin.avx2"
        ]
    );
    assert_eq!(
        names(twins_of::<Argmax>()),
        ["loopnest.argmax.twin.avx512", "loopnest.argmax.twin.avx2"]
    );
    let id = family_entry::<RmsNorm>().arms[0]
        .check
        .cases_id(&arm_offer::<RmsNorm>(rmsnorm(64)).0, 1);
    assert!(id.contains("loopnest.rmsnorm cases v1"), "{id}");
}

#[test]
fn add_twins_are_accepted_by_the_family_check() {
    // The body serves any length; the cases hold every range length
    // 0..=33 from several starts, and the offer's own length.
    accepted_at::<Add>(&[len(576), len(640), len(4096)]);
}

#[test]
fn rmsnorm_twins_are_accepted_at_every_tail_dim() {
    let dims: Vec<Geometry> = (1..=33)
        .chain([64, 576, 640, 960, 1000])
        .map(rmsnorm)
        .collect();
    accepted_at::<RmsNorm>(&dims);
}

#[test]
fn fused_add_rmsnorm_twins_are_generated_and_accepted_at_every_tail_dim() {
    // The fused nest (an IR sequence with the add inlined and written
    // back) goes through the same generic lowering as every nest.
    let names: Vec<&str> = twins_of::<AddRmsNorm>().iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        [
            "loopnest.add_rmsnorm.twin.avx512",
            "loopnest.add_rmsnorm.twin.avx2"
        ]
    );
    let dims: Vec<Geometry> = (1..=33).chain([64, 576, 640, 960]).map(rmsnorm).collect();
    accepted_at::<AddRmsNorm>(&dims);
}

#[test]
fn rope_twins_are_accepted_at_partial_and_whole_steps() {
    accepted_at::<Rope>(&[
        // SmolLM2-135M, Gemma 3 270M.
        rope(9, 3, 64, 64),
        rope(4, 1, 256, 256),
        // Partial rotations, partial steps of every tier, one pair.
        rope(4, 2, 64, 32),
        rope(3, 1, 40, 40),
        rope(2, 2, 6, 4),
        rope(1, 1, 2, 2),
        rope(2, 1, 30, 26),
    ]);
}

#[test]
fn embed_q8_0_twins_are_accepted_on_every_scale_class() {
    let mut shapes: Vec<Geometry> = [32u64, 64, 96, 160].map(|d| embed(50, d)).to_vec();
    // SmolLM2-135M's table (27 MB, only the named rows touched).
    shapes.push(embed(49_152, 576));
    shapes.push(embed(1, 640));
    accepted_at::<EmbedQ8_0>(&shapes);
}

#[test]
fn argmax_twins_are_accepted_at_every_remainder() {
    let lens: Vec<Geometry> = (1..=33)
        .chain([48, 63, 64, 100, 1000, 49_152, 262_144])
        .map(len)
        .collect();
    accepted_at::<Argmax>(&lens);
}

fn embed(vocab: u64, dim: u64) -> Geometry {
    Geometry::new().with("vocab", vocab).with("dim", dim)
}

#[test]
fn embed_f32_twins_are_accepted_with_ids_in_and_out_of_range() {
    let mut shapes: Vec<Geometry> = [1u64, 7, 8, 15, 16, 17, 31, 33]
        .map(|d| embed(50, d))
        .to_vec();
    // SmolLM2-135M's table (113 MB, only the named rows touched).
    shapes.push(embed(49_152, 576));
    shapes.push(embed(1, 640));
    accepted_at::<EmbedF32>(&shapes);
}

/// `code` with the `nth` instruction that `pick` selects changed by
/// `change` and re-encoded in place (it must keep its length), or `None`
/// if there is no such instruction.
fn mutate(
    code: &NativeCode,
    pick: impl Fn(&Instruction) -> bool,
    nth: usize,
    change: impl Fn(&mut Instruction),
) -> Option<NativeCode> {
    let mut decoder = Decoder::with_ip(64, &code.bytes, 0, DecoderOptions::NONE);
    let ins = decoder.iter().filter(|i| pick(i)).nth(nth)?;
    let mut changed = ins;
    change(&mut changed);
    let mut encoder = Encoder::new(64);
    let n = encoder.encode(&changed, ins.ip()).expect("encodes");
    assert_eq!(n, ins.len(), "{ins} changed keeps its length");
    let mut out = code.clone();
    let at = ins.ip() as usize;
    out.bytes[at..at + n].copy_from_slice(&encoder.take_buffer());
    Some(out)
}

fn is(code: Code) -> impl Fn(&Instruction) -> bool {
    move |i| i.code() == code
}

/// A twin whose body is fixed bytes: what the judge sees.
struct Fixed {
    name: &'static str,
    code: NativeCode,
}

// SAFETY: the bytes are a generated twin's with one instruction changed
// (same operands, same memory accesses) or a lowering of the same nest
// with another lane count: they touch what the twin touches.
unsafe impl Twin for Fixed {
    fn name(&self) -> &'static str {
        self.name
    }
    fn isa(&self) -> weft_kernel::Isa {
        weft_kernel::Isa::X86_64
    }
    fn requires(&self) -> &'static [weft_kernel::Feature] {
        &[]
    }
    fn emit(&self, _offer: &Offer) -> Result<NativeCode, Refusal> {
        Ok(self.code.clone())
    }
}

/// The host's widest generated twin of `O` and its body at `g`.
fn host_twin<O: NestOp>(g: &Geometry) -> (Tier, NativeCode) {
    let tier = if runnable(&NestX64Twin::<O>::new(Tier::Avx512, "probe")) {
        Tier::Avx512
    } else {
        Tier::Avx2
    };
    let offer = arm_offer::<O>(g.clone()).0;
    let code = NestX64Twin::<O>::new(tier, "probe")
        .emit(&offer)
        .expect("emits");
    (tier, code)
}

fn binary(tier: Tier, op: &str) -> Code {
    match (tier, op) {
        (Tier::Avx512, "add") => Code::EVEX_Vaddps_zmm_k1z_zmm_zmmm512b32_er,
        (Tier::Avx512, "sub") => Code::EVEX_Vsubps_zmm_k1z_zmm_zmmm512b32_er,
        (Tier::Avx512, "mul") => Code::EVEX_Vmulps_zmm_k1z_zmm_zmmm512b32_er,
        (Tier::Avx2, "add") => Code::VEX_Vaddps_ymm_ymm_ymmm256,
        (Tier::Avx2, "sub") => Code::VEX_Vsubps_ymm_ymm_ymmm256,
        (Tier::Avx2, "mul") => Code::VEX_Vmulps_ymm_ymm_ymmm256,
        _ => unreachable!("{op}"),
    }
}

fn permute(tier: Tier) -> Code {
    match tier {
        Tier::Avx512 => Code::EVEX_Vpermilps_zmm_k1z_zmmm512b32_imm8,
        Tier::Avx2 => Code::VEX_Vpermilps_ymm_ymmm256_imm8,
    }
}

#[test]
#[cfg_attr(
    not(all(weft_host_has = "avx", weft_host_has = "avx2")),
    ignore = "needs avx2, which this host lacks"
)]
fn a_changed_instruction_is_refused_as_a_mismatch() {
    let refused =
        |name,
         g: &Geometry,
         code: NativeCode,
         judge: &dyn Fn(&dyn Twin, &Geometry) -> Result<weft_kernel::Checked, Refusal>| {
            match judge(&Fixed { name, code }, g) {
                Err(r) => assert_eq!(r.name(), "mismatch", "{name}: {r}"),
                Ok(c) => panic!("{name} was accepted on {} cases", c.cases),
            }
        };
    let to = |c: Code| move |i: &mut Instruction| i.set_code(c);

    // add: the whole step's `vaddps` becomes `vsubps`.
    let g = len(576);
    let (tier, code) = host_twin::<Add>(&g);
    let m = mutate(&code, is(binary(tier, "add")), 0, to(binary(tier, "sub"))).expect("an add");
    refused("mutant.add-subtracts", &g, m, &judge::<Add>);

    // rmsnorm: the scale loop's first product becomes a sum; the fold's
    // 4 → 2 step reads lanes 0, 1 instead of 2, 3.
    let g = rmsnorm(576);
    let (tier, code) = host_twin::<RmsNorm>(&g);
    let m = mutate(&code, is(binary(tier, "mul")), 1, to(binary(tier, "add"))).expect("a mul");
    refused("mutant.scale-adds", &g, m, &judge::<RmsNorm>);
    let m = mutate(&code, is(permute(tier)), 0, |i| i.set_immediate8(0xE4)).expect("a permute");
    refused("mutant.fold-reads-itself", &g, m, &judge::<RmsNorm>);
    // The control: 0x4E moves the same lanes 2, 3 to lanes 0, 1 (only the
    // unused lanes 2, 3 differ), so the same check accepts it.
    let control =
        mutate(&code, is(permute(tier)), 0, |i| i.set_immediate8(0x4E)).expect("a permute");
    judge::<RmsNorm>(
        &Fixed {
            name: "control.fold-upper-lanes",
            code: control,
        },
        &g,
    )
    .unwrap_or_else(|r| panic!("the control: {r}"));

    // embed_f32: the partial step's mask loses its last lane (dim 44:
    // 12 elements past two zmm steps, 4 past five ymm steps).
    let g = embed(50, 44);
    let (tier, code) = host_twin::<EmbedF32>(&g);
    let m = match tier {
        Tier::Avx512 => mutate(
            &code,
            |i| i.code() == Code::Mov_r32_imm32 && i.immediate32() == 0xfff,
            0,
            |i| i.set_immediate32(0x7ff),
        ),
        Tier::Avx2 => mutate(
            &code,
            |i| i.code() == Code::VEX_Vmovdqu_ymm_ymmm256 && i.memory_displacement64() == 16,
            0,
            |i| i.set_memory_displacement64(20),
        ),
    }
    .expect("a partial step's mask");
    refused("mutant.embed-short-mask", &g, m, &judge::<EmbedF32>);

    // embed_q8_0: binary16 scales from 0x200 up taken for normals; an
    // infinite or NaN scale taken for a normal one.
    let g = embed(50, 64);
    let (_, code) = host_twin::<EmbedQ8_0>(&g);
    for (from, to, name) in [
        (0x400u32, 0x200u32, "mutant.q8-subnormals-from-0x200"),
        (0x7bff, 0x7c00, "mutant.q8-inf-is-normal"),
    ] {
        let imm = move |i: &Instruction| i.code() == Code::Mov_r32_imm32 && i.immediate32() == from;
        let m = mutate(&code, imm, 0, |i| i.set_immediate32(to)).expect("the constant");
        refused(name, &g, m, &judge::<EmbedQ8_0>);
    }

    // argmax: the step's `new <= acc` becomes `new < acc`, so a later
    // equal value wins.
    let g = len(1000);
    let (_, code) = host_twin::<Argmax>(&g);
    let le = |i: &Instruction| {
        matches!(
            i.code(),
            Code::EVEX_Vcmpps_kr_k1_zmm_zmmm512b32_imm8_sae | Code::VEX_Vcmpps_ymm_ymm_ymmm256_imm8
        ) && i.immediate8() == 0x12
    };
    let m = mutate(&code, le, 0, |i| i.set_immediate8(0x11)).expect("a compare");
    refused("mutant.argmax-later-tie-wins", &g, m, &judge::<Argmax>);

    // rope: `x ⊗ C` becomes `x ⊕ C`.
    let g = rope(9, 3, 64, 64);
    let (tier, code) = host_twin::<Rope>(&g);
    let m = mutate(&code, is(binary(tier, "mul")), 0, to(binary(tier, "add"))).expect("a mul");
    refused("mutant.rope-adds", &g, m, &judge::<Rope>);
}

/// RMSNorm's nest with the sum of squares over `lanes` lanes: another
/// rounding order of the same sum.
fn rmsnorm_with_lanes(dim: usize, lanes: u32) -> weft_loopnest::ir::Kernel {
    let mut nest = RmsNorm::new(dim, 1).expect("shape").nest();
    fn set(body: &mut [weft_loopnest::ir::Stmt], lanes: u32) {
        for s in body {
            match s {
                weft_loopnest::ir::Stmt::Reduce(r) => r.lanes = lanes,
                weft_loopnest::ir::Stmt::Loop(l) => set(&mut l.body, lanes),
                _ => {}
            }
        }
    }
    set(&mut nest.body, lanes);
    nest
}

#[test]
#[cfg_attr(
    not(all(weft_host_has = "avx", weft_host_has = "avx2")),
    ignore = "needs avx2, which this host lacks"
)]
fn a_sum_in_another_lane_order_is_refused_as_a_mismatch() {
    for dim in [576usize, 33] {
        let g = rmsnorm(dim as u64);
        let code =
            native_x64::emit(&rmsnorm_with_lanes(dim, 32), Tier::Avx2, Abi::host()).expect("emits");
        match judge::<RmsNorm>(
            &Fixed {
                name: "mutant.32-lanes",
                code,
            },
            &g,
        ) {
            Err(r) => assert_eq!(r.name(), "mismatch", "dim {dim}: {r}"),
            Ok(c) => panic!("32 lanes accepted at dim {dim} on {} cases", c.cases),
        }
    }
}

#[test]
fn a_body_that_does_nothing_is_refused_as_a_mismatch() {
    let g = len(576);
    let (offer, arm_code) = arm_offer::<Add>(g);
    let ret = NativeCode {
        isa: host().isa,
        bytes: vec![0xc3],
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
            &offer,
            &host(),
            1,
        )
        .unwrap_err();
    assert_eq!(r.name(), "mismatch", "{r}");
}

/// Every generated twin at the SmolLM2 decode sites and a few others:
/// its annotated loops are the loops its nest states, in order, and
/// weft-cost prices its bytes with that nest on Zen 4.
#[test]
fn each_twin_states_the_loops_its_bytes_have_and_is_priced() {
    use weft_cost::{CostModel, TableId};
    let model = CostModel::with_table(TableId::Zen4);
    let check = |twins: Vec<Arc<dyn Twin>>, offer: &Offer| {
        for t in twins {
            let code = t
                .emit(offer)
                .unwrap_or_else(|r| panic!("{}: {r}", t.name()));
            let nest = t.nest(offer);
            let annotated: Vec<_> = code.loops.iter().map(|l| l.name.as_str()).collect();
            let stated: Vec<_> = nest.iter().map(|l| l.name.as_str()).collect();
            assert_eq!(annotated, stated, "{}", t.name());
            let priced = model
                .price(&code, &nest, offer)
                .unwrap_or_else(|e| panic!("{}: {e}", t.name()));
            assert!(priced.price.cycles > 0.0, "{}", t.name());
        }
    };
    for g in [len(576), len(1)] {
        check(twins_of::<Add>(), &arm_offer::<Add>(g).0);
    }
    for g in [rmsnorm(576), rmsnorm(640), rmsnorm(7)] {
        check(twins_of::<RmsNorm>(), &arm_offer::<RmsNorm>(g).0);
    }
    for g in [rmsnorm(576), rmsnorm(7)] {
        check(twins_of::<AddRmsNorm>(), &arm_offer::<AddRmsNorm>(g).0);
    }
    for g in [rope(9, 3, 64, 64), rope(2, 2, 6, 4)] {
        check(twins_of::<Rope>(), &arm_offer::<Rope>(g).0);
    }
    for g in [embed(49_152, 576), embed(10, 7)] {
        check(twins_of::<EmbedF32>(), &arm_offer::<EmbedF32>(g).0);
    }
    for g in [len(49_152), len(7), len(16)] {
        check(twins_of::<Argmax>(), &arm_offer::<Argmax>(g).0);
    }
    for g in [embed(49_152, 576), embed(10, 32)] {
        check(twins_of::<EmbedQ8_0>(), &arm_offer::<EmbedQ8_0>(g).0);
    }
}

/// Every `Loop` of `nest`, outermost first, for tests that bend a nest.
fn loops(body: &mut [weft_loopnest::ir::Stmt], f: &mut dyn FnMut(&mut weft_loopnest::ir::Loop)) {
    for s in body {
        if let weft_loopnest::ir::Stmt::Loop(l) = s {
            f(l);
            loops(&mut l.body, f);
        }
    }
}

#[test]
fn nests_the_lowering_cannot_express_are_refused_by_name() {
    use weft_loopnest::ir::Extent;
    // exp where no exp-based map is (the residual add's sum through exp).
    let silu = common::exp_outside_a_map();
    // An innermost loop of width 1.
    let mut scalar = Add::new(64).expect("shape").nest();
    loops(&mut scalar.body, &mut |l| l.width = 1);
    // A sum over fewer lanes than a register holds.
    let narrow = rmsnorm_with_lanes(64, 4);
    // `i8` quants in a partial step: a Q8_0 block cut to 20 quants.
    let g = Geometry::new().with("vocab", 100).with("dim", 64);
    let mut cut = EmbedQ8_0::from_geometry(&g).expect("shape").nest();
    loops(&mut cut.body, &mut |l| {
        if l.name == "quants" {
            l.end = Extent::Const(20);
        }
    });
    for (nest, what) in [
        (silu, "exp outside an exp-based map"),
        (scalar, "width 1"),
        (narrow, "4 lanes"),
        (cut, "a partial step of I8 loads"),
    ] {
        nest.check().expect("a well-formed nest");
        for tier in [Tier::Avx512, Tier::Avx2] {
            let e = native_x64::emit(&nest, tier, Abi::SysV).unwrap_err();
            assert!(e.to_string().contains(what), "{}: {e}", nest.name);
            assert_eq!(e.refusal(&nest.name).name(), "unsupported-geometry");
        }
    }
    // exp in an exp-based map takes the map route: SiLU·mul emits.
    let offer = arm_offer::<SiluMul>(len(64)).0;
    let t = NestX64Twin::<SiluMul>::new(Tier::Avx2, "silu_mul.probe");
    t.emit(&offer)
        .expect("SiLU·mul lowers through the map route");
}

#[test]
fn a_foreign_offer_is_refused_by_name() {
    let (offer, _) = arm_offer::<RmsNorm>(rmsnorm(64));
    for t in twins_of::<Add>() {
        assert_eq!(t.emit(&offer).unwrap_err().name(), "bad-operand");
    }
    let (mut offer, _) = arm_offer::<Add>(len(64));
    offer.contract.family = "loopnest.silu_mul".into();
    for t in twins_of::<Add>() {
        assert_eq!(t.emit(&offer).unwrap_err().name(), "unsupported-geometry");
    }
}

/// `O`'s body at `g` for Win64, at both tiers.
fn win64<O: NestOp>(g: Geometry) -> Vec<NativeCode> {
    let offer = arm_offer::<O>(g).0;
    [Tier::Avx512, Tier::Avx2]
        .into_iter()
        .map(|tier| {
            NestX64Twin::<O>::new(tier, "win64")
                .emit_for(&offer, Abi::Win64)
                .unwrap_or_else(|r| panic!("{} {tier:?}: {r}", O::FAMILY))
        })
        .collect()
}

/// Win64 bodies declare (and so save) the callee-saved registers they
/// write: the emitter refuses a body that does not, so emitting is the
/// check; the RoPE body, which needs many registers, saves `rbx`.
#[test]
fn the_twins_emit_for_win64_too() {
    win64::<Add>(len(576));
    win64::<RmsNorm>(rmsnorm(576));
    win64::<EmbedF32>(embed(100, 576));
    win64::<Argmax>(len(49_152));
    win64::<EmbedQ8_0>(embed(100, 576));
    for code in win64::<Rope>(rope(9, 3, 64, 64)) {
        let listing = weft_managed::listing(&code);
        assert!(listing.contains("push rbx"), "{listing}");
        assert!(listing.contains("pop rbx"), "{listing}");
    }
}

#[test]
fn listings_are_snapshotted() {
    for tier in [Tier::Avx512, Tier::Avx2] {
        let t = NestX64Twin::<Add>::new(tier, "add");
        let code = t
            .emit_for(&arm_offer::<Add>(len(64)).0, Abi::SysV)
            .expect("emits");
        insta::assert_snapshot!(format!("add_{tier:?}"), weft_managed::listing(&code));
        let t = NestX64Twin::<RmsNorm>::new(tier, "rmsnorm");
        let code = t
            .emit_for(&arm_offer::<RmsNorm>(rmsnorm(40)).0, Abi::SysV)
            .expect("emits");
        insta::assert_snapshot!(format!("rmsnorm_40_{tier:?}"), weft_managed::listing(&code));
    }
}

/// At SmolLM2's (576) and a 640-wide model's decode shapes the planner
/// validates the generated twins with the family's check and, pricing them
/// from their bytes on this host, chooses one over the arm; the chosen
/// body computes the interpreter's bits.
#[test]
#[cfg_attr(
    not(all(weft_host_has = "avx512f", weft_host_has = "bmi2")),
    ignore = "needs avx512f and bmi2, which this host lacks"
)]
fn the_planner_chooses_a_generated_twin_at_decode_shapes() {
    use weft_plan::{CacheLocation, Catalogue, Executor, Options, Planner, VerdictReport};
    let mut catalogue = Catalogue::new();
    catalogue
        .register_all(weft_loopnest::entries())
        .expect("registers");
    let sites: Vec<Site> = [576u64, 640]
        .iter()
        .flat_map(|&d| {
            [
                Site::new(Family(RmsNorm::FAMILY), rmsnorm(d)),
                Site::new(Family(Add::FAMILY), len(d)),
            ]
        })
        .chain([Site::new(Family(Argmax::FAMILY), len(49_152))])
        .collect();
    let options = Options {
        cache: CacheLocation::InMemory,
        ..Options::default()
    };
    let mut planner = Planner::for_host(catalogue, host(), options);
    let plan = planner.compile(&sites).expect("plans");
    eprintln!("{}", plan.report());
    for report in &plan.report().sites {
        for c in report.candidates.iter().filter(|c| c.arm.is_some()) {
            if c.name.ends_with("avx512") || c.name.ends_with("avx2") {
                assert!(
                    matches!(c.verdict, VerdictReport::Validated { .. }),
                    "{}: {:?}",
                    c.name,
                    c.verdict
                );
            }
        }
        assert!(
            report
                .chosen
                .starts_with(&format!("{}.twin.", report.family)),
            "{}: chose {} ({:?}: {})",
            report.family,
            report.chosen,
            report.rule,
            report.reason
        );
    }
    // The chosen bodies against the interpreter.
    let exec = Executor::new(1);
    for (i, d) in [576usize, 640].iter().enumerate() {
        let op = RmsNorm::new(*d, 1).expect("shape");
        let x: Vec<f32> = (0..*d).map(|j| (j as f32 * 0.37).sin() * 3.0).collect();
        let w: Vec<f32> = (0..*d).map(|j| 1.0 + (j % 5) as f32 * 0.1).collect();
        let (mut y, mut want) = (vec![0f32; *d], vec![0f32; *d]);
        let k = plan
            .kernel::<weft_loopnest::RmsNormArgs>(2 * i)
            .expect("kernel");
        let args = weft_loopnest::RmsNormArgs::new(&op, &x, &w, &mut y, 1e-5, 0..1).expect("args");
        // SAFETY: `new` checked the extents against live buffers that
        // outlive the call.
        unsafe { k.run(&exec, &args) };
        op.reference(&x, &w, &mut want, 1e-5, 0..1)
            .expect("reference");
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&y), bits(&want), "rmsnorm dim {d}");

        let op = Add::new(*d).expect("shape");
        let mut a: Vec<f32> = (0..*d).map(|j| j as f32 * 0.5 - 100.0).collect();
        let mut want = a.clone();
        let b: Vec<f32> = (0..*d).map(|j| (j as f32).sqrt()).collect();
        let k = plan
            .kernel::<weft_loopnest::AddArgs>(2 * i + 1)
            .expect("kernel");
        let args = weft_loopnest::AddArgs::new(&op, &mut a, &b, 0..*d).expect("args");
        // SAFETY: as above.
        unsafe { k.run(&exec, &args) };
        op.reference(&mut want, &b, 0..*d).expect("reference");
        assert_eq!(bits(&a), bits(&want), "add len {d}");
    }
}

/// Every instruction of every generated body needs only what its tier
/// requires (beyond the x86-64 baseline): decoded from the bytes.
#[test]
fn each_body_needs_only_the_features_its_tier_requires() {
    use weft_kernel::Feature;
    use weft_x64::iced_x86::CpuidFeature;
    let offers = [
        (twins_of::<Add>(), arm_offer::<Add>(len(100)).0),
        (twins_of::<RmsNorm>(), arm_offer::<RmsNorm>(rmsnorm(100)).0),
        (twins_of::<Rope>(), arm_offer::<Rope>(rope(3, 1, 40, 38)).0),
        (
            twins_of::<EmbedF32>(),
            arm_offer::<EmbedF32>(embed(50, 100)).0,
        ),
        (twins_of::<Argmax>(), arm_offer::<Argmax>(len(100)).0),
        (
            twins_of::<EmbedQ8_0>(),
            arm_offer::<EmbedQ8_0>(embed(50, 96)).0,
        ),
    ];
    for (twins, offer) in &offers {
        for t in twins {
            let code = t.emit(offer).expect("emits");
            let decoder = Decoder::with_ip(64, &code.bytes, 0, DecoderOptions::NONE);
            for ins in decoder {
                for f in ins.cpuid_features() {
                    let needs = match f {
                        CpuidFeature::INTEL8086
                        | CpuidFeature::INTEL386
                        | CpuidFeature::X64
                        | CpuidFeature::CMOV => None,
                        CpuidFeature::AVX => Some(Feature::Avx),
                        CpuidFeature::AVX2 => Some(Feature::Avx2),
                        CpuidFeature::AVX512F => Some(Feature::Avx512f),
                        CpuidFeature::BMI2 => Some(Feature::Bmi2),
                        other => panic!("{}: `{ins}` needs {other:?}", t.name()),
                    };
                    if let Some(needs) = needs {
                        assert!(
                            t.requires().contains(&needs),
                            "{}: `{ins}` needs {needs:?}",
                            t.name()
                        );
                    }
                }
            }
        }
    }
}

/// The same nest gives the same bytes every time (the planner hashes and
/// caches bodies by their bytes): registers are never handed out in a
/// hash map's order.
#[test]
fn emission_is_deterministic() {
    fn twice<O: NestOp>(g: Geometry) {
        let offer = arm_offer::<O>(g).0;
        for t in twins_of::<O>() {
            let first = t.emit(&offer).expect("emits");
            for _ in 0..8 {
                assert_eq!(t.emit(&offer).expect("emits"), first, "{}", t.name());
            }
        }
    }
    twice::<Add>(len(100));
    twice::<RmsNorm>(rmsnorm(100));
    twice::<Rope>(rope(9, 3, 64, 64));
    twice::<EmbedF32>(embed(100, 100));
    twice::<Argmax>(len(100));
    twice::<EmbedQ8_0>(embed(100, 96));
}

/// RMSNorm's nest with its sum of squares over `lanes` lanes of
/// `x[r, i] · x[r, 0]`: a load that does not move with the reduction (no
/// term in its variable) beside one that does.
fn rmsnorm_with_an_invariant_load(dim: usize, lanes: u32) -> weft_loopnest::ir::Kernel {
    use weft_loopnest::ir::{Binary, Expr, Stmt, Term};
    let mut nest = RmsNorm::new(dim, 1).expect("shape").nest();
    fn set(body: &mut [Stmt], lanes: u32) {
        for s in body {
            match s {
                Stmt::Reduce(r) => {
                    r.lanes = lanes;
                    let var = r.var;
                    let Expr::Binary(Binary::Mul, a, _) = &r.value else {
                        panic!("RMSNorm squares x: {:?}", r.value)
                    };
                    let Expr::Load {
                        buf,
                        elem,
                        at,
                        swap_pairs,
                    } = a.as_ref().clone()
                    else {
                        panic!("RMSNorm squares a load: {a:?}")
                    };
                    let mut fixed = at.clone();
                    fixed.terms.retain(|(_, t)| *t != Term::Var(var));
                    let pinned = Expr::Load {
                        buf,
                        elem,
                        at: fixed,
                        swap_pairs,
                    };
                    r.value = Expr::Binary(Binary::Mul, a.clone(), Box::new(pinned));
                }
                Stmt::Loop(l) => set(&mut l.body, lanes),
                _ => {}
            }
        }
    }
    set(&mut nest.body, lanes);
    nest.check().expect("a well-formed nest");
    nest
}

/// A load whose index does not move with a reduction reads the same
/// element in every register of a step: the generated body gives the CLIF
/// arm's bits for the same nest when a step spans several registers (32
/// lanes: two zmm, four ymm) and at every remainder.
#[test]
fn a_load_fixed_along_a_reduction_reads_one_element_in_every_register() {
    use weft_loopnest::RmsNormArgs;
    for dim in [1usize, 7, 16, 31, 32, 33, 64, 100] {
        let nest = rmsnorm_with_an_invariant_load(dim, 32);
        let arm = weft_loopnest::ops::build_nest(&nest, host().isa).expect("the arm builds");
        let rows = 3;
        let x: Vec<f32> = (0..dim * rows)
            .map(|i| ((i * 37 % 101) as f32 + 1.0) / 7.0)
            .collect();
        let w: Vec<f32> = (0..dim).map(|i| 1.0 + (i % 5) as f32 / 8.0).collect();
        let op = RmsNorm::new(dim, rows).expect("shape");
        let run = |code: &NativeCode| -> Vec<u32> {
            let mut y = vec![f32::NAN; dim * rows];
            let args = RmsNormArgs::new(&op, &x, &w, &mut y, 1e-5, 0..rows).expect("args");
            // SAFETY: both bodies were built from a nest over RmsNormArgs'
            // fields, whose extents `RmsNormArgs::new` checked against x, w
            // and y, live until the call returns.
            unsafe {
                let k = weft_kernel::Kernel::<RmsNormArgs>::from_native(code).expect("placed");
                k.call(&args);
            }
            y.iter().map(|v| v.to_bits()).collect()
        };
        let want = run(&arm);
        for tier in [Tier::Avx512, Tier::Avx2] {
            let needs = match tier {
                Tier::Avx512 => &[weft_kernel::Feature::Avx512f][..],
                Tier::Avx2 => &[weft_kernel::Feature::Avx2, weft_kernel::Feature::Fma][..],
            };
            if require_features(&host(), needs).is_err() {
                continue;
            }
            let code = native_x64::emit(&nest, tier, Abi::host()).expect("emits");
            assert_eq!(run(&code), want, "dim {dim}, {tier:?}");
        }
    }
}
