//! The attention family through its public API, as a language model uses
//! it: a decode loop against a KV cache whose length grows by one each
//! step, every placed candidate (arm and the host's twins) bit for bit
//! against the reference; and the twins' listings as snapshots.

use weft_attention::arm::{body_site, offer_for, AttentionKernel};
use weft_attention::reference;
use weft_attention::twin_a64::AttentionNeon;
use weft_attention::twin_x64::TWINS;
use weft_attention::{AttentionShape, KvSlice, KvType, Layout};
use weft_kernel::{Host, Twin};

/// The candidates this host runs for `d` and `kv`: the arm, then twins.
fn candidates(d: usize, kv: KvType) -> Vec<(String, AttentionKernel)> {
    let host = Host::detect();
    let mut v = vec![(
        "arm".to_owned(),
        AttentionKernel::of_arm(d, kv).expect("arm"),
    )];
    let offer = offer_for(&body_site(d, kv));
    let twins: Vec<Box<dyn Twin>> = vec![
        Box::new(TWINS[0]),
        Box::new(TWINS[1]),
        Box::new(AttentionNeon),
    ];
    for t in twins {
        if t.isa() != host.isa || weft_kernel::require_features(&host, t.requires()).is_err() {
            continue;
        }
        let code = t.emit(&offer).expect("emits");
        // SAFETY: attention.fused twins honour the leaf ABI for
        // AttentionArgs at the d and K/V type they were emitted for (and
        // are validated against the arm in the crate's unit tests).
        let k = unsafe { AttentionKernel::from_native(&code, d, kv) }.expect("place");
        v.push((t.name().to_owned(), k));
    }
    v
}

fn same(a: &[f32], b: &[f32]) -> bool {
    a.iter()
        .zip(b)
        .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

#[test]
fn decode_against_a_growing_kv_cache_matches_the_reference_at_every_step() {
    // SmolLM2-135M's attention: 9 query heads over 3 KV heads, d = 64,
    // binary16 cache of capacity 40, token-major Q and O.
    let (heads, kv_heads, d, capacity) = (9, 3, 64, 40);
    let cands = candidates(d, KvType::F16);
    let mut rng = weft_validate::SplitMix64::new(99);
    let mut k = vec![0u16; kv_heads * capacity * d];
    let mut v = vec![0u16; kv_heads * capacity * d];
    let steps = if cfg!(target_arch = "aarch64") {
        20
    } else {
        capacity
    };
    for lk in 1..=steps {
        // Append position lk - 1 of every KV head.
        for g in 0..kv_heads {
            for c in 0..d {
                let at = g * capacity * d + (lk - 1) * d + c;
                let x = (rng.unit_f64() * 2.0 - 1.0) as f32;
                let y = (rng.unit_f64() * 2.0 - 1.0) as f32;
                k[at] = half::f16::from_f32(x).to_bits();
                v[at] = half::f16::from_f32(y).to_bits();
            }
        }
        let shape = AttentionShape {
            d,
            lq: 1,
            lk,
            heads,
            kv_heads,
            q_offset: lk - 1,
            causal: true,
            scale: 0.125,
            kv: KvType::F16,
        };
        let mut layout = Layout::token_major(&shape);
        layout.k_head = capacity * d;
        layout.k_pos = d;
        layout.v_head = capacity * d;
        layout.v_pos = d;
        let q: Vec<f32> = (0..heads * d)
            .map(|_| (rng.unit_f64() * 2.0 - 1.0) as f32)
            .collect();
        let mut want = vec![0.0f32; heads * d];
        reference::attention(
            &shape,
            &layout,
            &q,
            KvSlice::F16(&k),
            KvSlice::F16(&v),
            &mut want,
            0..heads,
        );
        for (name, kernel) in &cands {
            let mut got = vec![0.0f32; heads * d];
            kernel
                .run(
                    &shape,
                    &layout,
                    &q,
                    KvSlice::F16(&k),
                    KvSlice::F16(&v),
                    &mut got,
                )
                .expect("run");
            assert!(same(&want, &got), "{name} at lk {lk}");
        }
    }
}

#[test]
fn listings_are_snapshotted() {
    let offer = offer_for(&body_site(32, KvType::F32));
    for t in TWINS {
        let code = t.with_abi(weft_x64::Abi::SysV).emit(&offer).expect("emits");
        insta::assert_snapshot!(t.name().replace('.', "_"), weft_managed::listing(&code));
    }
    let code = AttentionNeon.emit(&offer).expect("emits");
    insta::assert_snapshot!("attention_fused_twin_neon", weft_managed::listing(&code));
}
