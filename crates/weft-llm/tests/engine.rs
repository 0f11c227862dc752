//! The planned forward pass against the scalar reference, and its logits'
//! independence from native emission.

use std::sync::Arc;

use weft_llm::reference::Reference;
use weft_llm::{synthetic, Config, Engine, KvCache};
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
        kv: KvCache::F16,
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
/// and on two (the executor's splits are bit-identical too), with either
/// KV cache type.
#[test]
fn logits_digest_is_identical_with_native_emission_off_and_on() {
    for kv in [KvCache::F16, KvCache::F32] {
        digest_is_identical_with_native_emission_off_and_on(&Config { kv, ..small() });
    }
}

fn digest_is_identical_with_native_emission_off_and_on(c: &Config) {
    let run = |mode, threads| {
        let mut e = engine(c, mode, threads);
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
fn smollm2_weights_are_streamed_past_the_cores_share_of_the_cache_and_a_small_model_stays_cached() {
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
    // A 256 MiB L3 holds the weights only for the 36 or more cores whose
    // 4 MiB shares add up past them; a 2-core guest of that socket streams.
    host.caches.l3 = Some(256 << 20);
    host.logical_cores = 36;
    assert_eq!(weight_residency(&smol, &host), Residency::Cached);
    host.logical_cores = 2;
    assert_eq!(weight_residency(&smol, &host), Residency::Streamed);
}

/// A prompt gives the same bits at every chunk length, 1 included: the
/// last token's logits and greedy choice, the digest, and the decode steps
/// after it (which read the prompt's KV cache), over 19 tokens (full
/// chunks and a ragged last one, a one-token last chunk at lengths 6, 9
/// and 18), with native emission on and off, on one and two threads, and
/// equal to 19 one-token steps. Every site computes each token's numbers
/// alone and the matrix products are `q8_0.matmul` at any batch, so
/// nothing depends on how the prompt is cut.
#[test]
fn prompts_give_the_same_bits_at_every_chunk_length_and_as_one_token_steps() {
    let c = small();
    let prompt: Vec<u32> = (0..19).map(|i| (i * 37 + 5) % 400).collect();
    // What one-token steps give: the last prompt token's logits and
    // greedy choice, then three greedy steps'.
    let bits = |l: &[f32]| l.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let mut e = engine(&c, EmitMode::Off, 1);
    let mut last = Vec::new();
    for &t in &prompt {
        last = bits(e.step(t).expect("prompt step"));
    }
    let mut steps = vec![(last, e.argmax())];
    for _ in 0..3 {
        let l = e.step(e.argmax()).expect("decode step");
        steps.push((bits(l), e.argmax()));
    }
    let mut prompt_digest = None;
    for (mode, threads) in [(EmitMode::Off, 1), (EmitMode::On, 1), (EmitMode::On, 2)] {
        let mut e = engine(&c, mode, threads);
        assert_eq!(
            e.prefill_chunk(),
            c.max_seq,
            "the whole cache, shorter than every chunk length"
        );
        for chunk in 1..=c.max_seq {
            e.reset();
            e.set_prefill_chunk(chunk).expect("chunk");
            let last = bits(e.prefill(&prompt).expect("prefill"));
            let mut got = vec![(last, e.argmax())];
            for _ in 0..3 {
                let l = e.step(e.argmax()).expect("decode step");
                got.push((bits(l), e.argmax()));
            }
            assert!(
                got == steps,
                "{mode:?}, {threads} threads, chunks of {chunk}: logits differ from one-token steps"
            );
            // A prompt's digest covers its last token's logits (only it
            // goes through the head), then the steps'.
            let d = e.digest();
            let first = prompt_digest.get_or_insert_with(|| d.clone());
            assert_eq!(first, &d, "{mode:?}, {threads} threads, chunks of {chunk}");
        }
    }
}

/// A chunk length the plan has no sites for is a named error, and a bad
/// token anywhere in a prompt is refused before any token is fed.
#[test]
fn a_bad_chunk_or_a_bad_prompt_token_is_a_named_error_that_feeds_nothing() {
    let c = small();
    let mut e = engine(&c, EmitMode::Off, 1);
    assert_eq!(e.set_prefill_chunk(0).unwrap_err().name(), "bad-chunk");
    assert_eq!(
        e.set_prefill_chunk(c.max_seq + 1).unwrap_err().name(),
        "bad-chunk"
    );
    assert_eq!(e.prefill(&[1, 2, 400]).unwrap_err().name(), "bad-token");
    assert_eq!(e.position(), 0);
    assert_eq!(e.prefill(&[]).unwrap_err().name(), "empty-prompt");
    let long = vec![1u32; c.max_seq + 1];
    assert_eq!(e.prefill(&long).unwrap_err().name(), "context-full");
    assert_eq!(e.position(), 0);
}

/// Rewinding to a position and feeding the same tokens again gives the
/// same logits bits as the first time; rewinding past the positions fed is
/// a named error that changes nothing.
#[test]
fn a_rewound_engine_decodes_again_exactly_as_the_first_time() {
    let c = small();
    let mut e = engine(&c, EmitMode::On, 1);
    let bits = |l: &[f32]| l.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    e.prefill(&[5, 6, 7, 8, 9, 10, 11]).expect("prefill");
    let first = e.argmax();
    let run = |e: &mut Engine| {
        let mut t = first;
        let mut out = Vec::new();
        for _ in 0..5 {
            out.push(bits(e.step(t).expect("step")));
            t = e.argmax();
        }
        out
    };
    let once = run(&mut e);
    assert_eq!(e.position(), 12);
    assert_eq!(e.rewind(13).unwrap_err().name(), "bad-rewind");
    assert_eq!(e.position(), 12);
    e.rewind(7).expect("rewind");
    assert_eq!(run(&mut e), once);
}
