//! Every dequantiser and the Q8_K quantiser against values ggml computed.
//!
//! `data/ggml_blocks.bin` is written by `cargo xtask peer quant-fixtures`:
//! a small C program linked to the peer's `libggml-base` (llama.cpp as
//! vendored in llama-cpp-python, built by `cargo xtask peer`) quantises
//! fixed rows with `ggml_quantize_chunk`, draws blocks of random bytes, and
//! records ggml's `to_float` of both, then ggml's `quantize_row_q8_K_ref`
//! of the rows. Weft's code plays no part in making the file.

use weft_quant::kquant::{quantize_q8_k, Q8_K_BYTES, QK_K};
use weft_quant::Format;

const FIXTURE: &[u8] = include_bytes!("data/ggml_blocks.bin");

struct Record<'a> {
    kind: u8,
    name: &'a str,
    elements: usize,
    bytes: &'a [u8],
    floats: Vec<f32>,
}

fn records() -> Vec<Record<'static>> {
    let mut at = 0;
    let mut take = |n: usize| {
        let s = &FIXTURE[at..at + n];
        at += n;
        s
    };
    assert_eq!(take(8), b"WEFTQFX1");
    let count = u32::from_le_bytes(take(4).try_into().unwrap());
    let mut out = Vec::new();
    for _ in 0..count {
        let kind = take(1)[0];
        let len = take(1)[0] as usize;
        let name = std::str::from_utf8(take(len)).unwrap();
        let elements = u32::from_le_bytes(take(4).try_into().unwrap()) as usize;
        let n_bytes = u32::from_le_bytes(take(4).try_into().unwrap()) as usize;
        let floats = |b: &[u8]| -> Vec<f32> {
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        let (bytes, floats) = if kind == 0 {
            let bytes = take(n_bytes);
            (bytes, floats(take(4 * elements)))
        } else {
            let f = floats(take(4 * elements));
            (take(n_bytes), f)
        };
        out.push(Record {
            kind,
            name,
            elements,
            bytes,
            floats,
        });
    }
    assert_eq!(at, FIXTURE.len(), "the fixture has no trailing bytes");
    out
}

fn format(name: &str) -> Format {
    *Format::ALL
        .iter()
        .find(|f| f.name() == name)
        .unwrap_or_else(|| panic!("unknown format {name}"))
}

/// Whether `got` is ggml's `want`: the same bits — but a NaN that
/// arithmetic made (`0 · ∞`) is the host's default NaN, negative on
/// x86-64 (where the fixture was made) and positive on aarch64, so off
/// x86-64 any NaN matches a NaN. (Propagated NaN payloads, such as a
/// binary16 NaN widened, keep their bits on both.)
fn same(got: f32, want: f32) -> bool {
    got.to_bits() == want.to_bits()
        || (!cfg!(target_arch = "x86_64") && got.is_nan() && want.is_nan())
}

#[test]
fn every_dequantiser_gives_ggmls_bits_on_quantised_and_random_blocks() {
    let mut seen = Vec::new();
    for r in records().iter().filter(|r| r.kind == 0) {
        let f = format(r.name);
        let mut got = vec![0.0f32; r.elements];
        f.dequantize(r.bytes, &mut got).expect("whole blocks");
        for (i, (&g, &w)) in got.iter().zip(&r.floats).enumerate() {
            assert!(
                same(g, w),
                "{f}: element {i} (block {}) is {g:e} ({:#010x}), ggml gives {w:e} ({:#010x})",
                i / f.block_len(),
                g.to_bits(),
                w.to_bits()
            );
        }
        seen.push(f);
    }
    for f in [
        Format::F16,
        Format::BF16,
        Format::Q4_0,
        Format::Q4_1,
        Format::Q5_0,
        Format::Q5_1,
        Format::Q8_0,
        Format::Q2_K,
        Format::Q3_K,
        Format::Q4_K,
        Format::Q5_K,
        Format::Q6_K,
    ] {
        assert_eq!(
            seen.iter().filter(|&&s| s == f).count(),
            2,
            "{f}: a quantised and a random record"
        );
    }
}

#[test]
fn the_random_records_reach_non_finite_and_subnormal_scales() {
    // The random records are worth having only if they hit the hostile
    // cases; prove they do rather than hope.
    let random: Vec<_> = records()
        .into_iter()
        .filter(|r| r.kind == 0)
        .skip(1)
        .step_by(2)
        .collect();
    let all: Vec<f32> = random
        .iter()
        .flat_map(|r| r.floats.iter().copied())
        .collect();
    assert!(all.iter().any(|v| v.is_nan()));
    assert!(all.iter().any(|v| v.is_infinite()));
    assert!(all
        .iter()
        .any(|v| v.is_subnormal() || (*v != 0.0 && v.abs() < 6.2e-5)));
}

#[test]
fn q8_k_quantiser_gives_ggmls_bytes() {
    let r = records()
        .into_iter()
        .find(|r| r.kind == 1 && r.name == "q8_K")
        .expect("a q8_K record");
    assert_eq!(r.bytes.len(), r.elements / QK_K * Q8_K_BYTES);
    for (k, (x, want)) in r
        .floats
        .chunks_exact(QK_K)
        .zip(r.bytes.chunks_exact(Q8_K_BYTES))
        .enumerate()
    {
        let got = quantize_q8_k(x.try_into().unwrap());
        assert_eq!(&got[..], want, "super-block {k}");
    }
}
