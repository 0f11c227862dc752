//! The planned forward pass against the scalar reference, and its logits'
//! independence from native emission.

use std::sync::Arc;

use weft_llm::reference::Reference;
use weft_llm::{synthetic, Config, Engine};
use weft_plan::{CacheLocation, EmitMode, Kind, Options};

/// A small model of SmolLM2's architecture: grouped-query heads, RoPE on
/// part of each head, a vocabulary larger than a cache line of logits.
fn small() -> Config {
    Config {
        dim: 128,
        hidden: 320,
        layers: 3,
        heads: 4,
        kv_heads: 2,
        vocab: 400,
        rms_eps: 1e-5,
        rope_base: 10_000.0,
        rope_dims: 32,
        max_seq: 24,
    }
}

fn options(mode: EmitMode) -> Options {
    Options {
        mode,
        cache: CacheLocation::InMemory,
        racing: false,
        ..Options::default()
    }
}

fn engine(c: &Config, mode: EmitMode, threads: usize) -> Engine {
    let w = Arc::new(synthetic::weights(c));
    Engine::new(w, options(mode), threads, &mut |_, _| {}).expect("the plan compiles")
}

const TOKENS: [u32; 8] = [1, 17, 300, 42, 42, 399, 0, 256];

/// The plan computes the model the reference computes. They differ by f32
/// against f64 rounding, the contract's exp against `exp`, and where that
/// moves an activation across a Q8_0 rounding step; the bound is 2% of
/// the reference logits' largest magnitude at every step, and the greedy
/// choice must agree wherever the reference's top two logits are apart
/// by more than that bound.
#[test]
fn planned_logits_match_the_scalar_reference_within_two_percent() {
    let c = small();
    let w = synthetic::weights(&c);
    let mut reference = Reference::new(&w);
    let mut e = engine(&c, EmitMode::On, 1);
    for (step, &t) in TOKENS.iter().enumerate() {
        let want = reference.step(t);
        let got = e.step(t).expect("step").to_vec();
        let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let bound = 0.02 * scale;
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(
            worst <= bound,
            "step {step}: largest difference {worst} > {bound} (2% of {scale})"
        );
        let mut sorted = want.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let top = want.iter().position(|v| *v == sorted[0]).unwrap() as u32;
        if sorted[0] - sorted[1] > 2.0 * bound {
            assert_eq!(e.argmax(), top, "step {step}: greedy choice");
        }
    }
    assert_eq!(e.position(), TOKENS.len());
}

/// Twins compute their arms' bits, so the digest of every logit of a run
/// is the same with `WEFT_NATIVE_EMIT=off` as with it on, on one thread
/// and on two (the executor's splits are bit-identical too).
#[test]
fn logits_digest_is_identical_with_native_emission_off_and_on() {
    let c = small();
    let run = |mode, threads| {
        let mut e = engine(&c, mode, threads);
        for &t in &TOKENS {
            e.step(t).expect("step");
        }
        let twins = e
            .plan()
            .sites()
            .iter()
            .filter(|s| matches!(s.kind, Kind::Twin { .. }))
            .count();
        (e.digest(), twins)
    };
    let (off, off_twins) = run(EmitMode::Off, 1);
    let (on, on_twins) = run(EmitMode::On, 1);
    let (on2, _) = run(EmitMode::On, 2);
    assert_eq!(off_twins, 0, "the kill switch chose a twin");
    if cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        assert!(
            on_twins > 0,
            "no twin was chosen: the comparison proves nothing"
        );
    }
    assert_eq!(on, off);
    assert_eq!(on2, off);
}

#[test]
fn a_full_context_and_an_unknown_token_are_named_errors() {
    let mut c = small();
    c.max_seq = 2;
    let mut e = engine(&c, EmitMode::Off, 1);
    assert_eq!(e.step(400).unwrap_err().name(), "bad-token");
    e.step(1).expect("first");
    e.step(2).expect("second");
    assert_eq!(e.step(3).unwrap_err().name(), "context-full");
}

#[test]
fn smollm2_weights_are_streamed_past_a_32_mib_cache_and_a_small_model_stays_cached() {
    use weft_kernel::Residency;
    use weft_llm::engine::{weight_bytes, weight_residency};
    let smol = Config::smollm2_135m();
    // 30 layers of q, k, v, o, gate, up, down and the 49152 × 576 output,
    // 34 bytes per 32 weights.
    assert_eq!(weight_bytes(&smol), 142_884_864);
    let mut host = weft_host::Host::detect();
    host.caches.l3 = Some(32 << 20);
    assert_eq!(weight_residency(&smol, &host), Residency::Streamed);
    assert_eq!(weight_residency(&small(), &host), Residency::Cached);
    host.caches.l3 = Some(256 << 20);
    assert_eq!(weight_residency(&smol, &host), Residency::Cached);
}
