//! Conversions through files: Q4_1 → Q8_0 equals dequantise-then-quantise
//! block by block, for any thread count; F16/F32/Q8_0 paths agree with the
//! block modules; round trips of random files (proptest).

use proptest::prelude::*;
use weft_gguf::block::{q4_1, q8_0};
use weft_gguf::{q8_0_lens, to_q8_0_into, to_q8_0_many, Gguf, GgufWriter, TensorType, Value};

/// Deterministic bytes (xorshift), so failures reproduce.
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect()
}

/// Q4_1 blocks with finite, plausible scales and random nibbles, plus
/// blocks with special scales (zeros, subnormals, negatives, huge).
fn q4_1_blocks(n: usize, seed: u64) -> Vec<u8> {
    let mut bytes = noise(n * q4_1::BLOCK_BYTES, seed);
    let specials: [(u16, u16); 8] = [
        (0x0000, 0x0000),
        (0x0001, 0x8001),
        (0x03ff, 0x0000),
        (0xbc00, 0x3c00),
        (0x7bff, 0xfbff),
        (0x2e66, 0xb4cd),
        (0x1400, 0x9400),
        (0x8000, 0x0000),
    ];
    for (i, block) in bytes.chunks_exact_mut(q4_1::BLOCK_BYTES).enumerate() {
        let (d, m) = if i < specials.len() {
            specials[i]
        } else {
            // Scales around real weights: exponent 2^-12..2^-4, either sign for m.
            let r = u16::from_le_bytes([block[0], block[1]]);
            (
                0x1000 | (r & 0x0fff),
                (0x1000 | (r.rotate_left(5) & 0x0fff)) | (r & 0x8000),
            )
        };
        block[..2].copy_from_slice(&d.to_le_bytes());
        block[2..4].copy_from_slice(&m.to_le_bytes());
    }
    bytes
}

#[test]
fn q4_1_requantisation_is_dequantise_then_reference_quantise_for_any_thread_count() {
    let rows = 7;
    let cols = 32 * 300; // 2100 blocks: several work chunks
    let src = q4_1_blocks(rows * cols / 32, 7);
    let mut w = GgufWriter::new();
    w.tensor("w", &[cols as u64, rows as u64], TensorType::Q4_1, &src);
    let g = Gguf::from_bytes(w.to_bytes()).expect("file");
    let t = g.tensor("w").expect("tensor");

    let mut want = Vec::new();
    for block in src.chunks_exact(q4_1::BLOCK_BYTES) {
        let b: &[u8; 20] = block.try_into().expect("20 bytes");
        let x = q4_1::BlockQ4_1::from_bytes(b).dequantize();
        want.extend_from_slice(&q8_0::quantize_block(&x).to_bytes());
    }
    for threads in [1, 2, 3, 8, 0] {
        let got = to_q8_0_many(&[t], threads).expect("convertible");
        assert_eq!(got[0], want, "{threads} threads");
    }
    let f = t.to_f32().expect("dequantise");
    assert_eq!(q8_0::quantize_row(&f).expect("whole blocks"), want);
}

#[test]
fn many_tensors_of_mixed_types_convert_in_order() {
    let f32s: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) * 0.13).collect();
    let f32_bytes: Vec<u8> = f32s.iter().flat_map(|x| x.to_le_bytes()).collect();
    let f16_bytes: Vec<u8> = f32s
        .iter()
        .flat_map(|x| half::f16::from_f32(*x).to_bits().to_le_bytes())
        .collect();
    let q8 = q8_0::quantize_row(&f32s).expect("row");
    let q4 = q4_1_blocks(2, 3);
    let mut w = GgufWriter::new();
    w.tensor("f32", &[64], TensorType::F32, &f32_bytes)
        .tensor("f16", &[32, 2], TensorType::F16, &f16_bytes)
        .tensor("q8", &[64], TensorType::Q8_0, &q8)
        .tensor("q4", &[64], TensorType::Q4_1, &q4);
    let g = Gguf::from_bytes(w.to_bytes()).expect("file");
    let ts = g.tensors().expect("all known");
    let out = to_q8_0_many(&ts, 2).expect("all convertible");
    assert_eq!(out[0], q8);
    let widened: Vec<f32> = f32s
        .iter()
        .map(|x| half::f16::from_f32(*x).to_f32())
        .collect();
    assert_eq!(out[1], q8_0::quantize_row(&widened).expect("row"));
    assert_eq!(out[2], q8, "Q8_0 is copied");
    let mut q4_to_q8 = vec![0u8; 68];
    q4_1::requantize_into(&q4, &mut q4_to_q8).expect("lengths");
    assert_eq!(out[3], q4_to_q8);
    // Into the caller's memory: the same bytes; a destination of the wrong
    // length is refused by name before any is written.
    let lens = q8_0_lens(&ts).expect("all convertible");
    assert_eq!(lens, out.iter().map(Vec::len).collect::<Vec<_>>());
    let mut mem: Vec<Vec<u8>> = lens.iter().map(|&l| vec![0xee; l]).collect();
    let mut outs: Vec<&mut [u8]> = mem.iter_mut().map(Vec::as_mut_slice).collect();
    to_q8_0_into(&ts, &mut outs, 1).expect("fits");
    assert_eq!(mem, out);
    let mut short = vec![0xee; lens[1] - 1];
    let mut mem: Vec<Vec<u8>> = lens.iter().map(|&l| vec![0xee; l]).collect();
    let mut outs: Vec<&mut [u8]> = mem.iter_mut().map(Vec::as_mut_slice).collect();
    outs[1] = &mut short;
    let e = to_q8_0_into(&ts, &mut outs, 1).expect_err("short destination");
    assert_eq!(e.name(), "bad-destination");
    assert!(mem[0].iter().all(|&b| b == 0xee), "nothing written");
    assert_eq!(
        to_q8_0_into(&ts[..2], &mut [], 1)
            .expect_err("no destinations")
            .name(),
        "destination-count"
    );
    assert_eq!(g.tensor("f32").expect("f32").to_f32().expect("f32"), f32s);
    assert_eq!(
        g.tensor("f16").expect("f16").to_f32().expect("f16"),
        widened
    );
}

#[test]
fn f32_rows_that_are_not_whole_q8_blocks_are_refused() {
    let mut w = GgufWriter::new();
    w.tensor("v", &[3], TensorType::F32, &[0; 12]);
    let g = Gguf::from_bytes(w.to_bytes()).expect("file");
    let e = g
        .tensor("v")
        .expect("v")
        .to_q8_0()
        .expect_err("3 is not a multiple of 32");
    assert_eq!(e.name(), "ragged-row");
}

#[test]
fn opening_from_disk_maps_the_same_bytes() {
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", Value::String("llama".into()))
        .tensor("t", &[32], TensorType::Q8_0, &noise(34, 9));
    let bytes = w.to_bytes();
    let path = std::env::temp_dir().join(format!("weft-gguf-open-{}.gguf", std::process::id()));
    std::fs::write(&path, &bytes).expect("write temp file");
    let g = Gguf::open(&path).expect("open");
    std::fs::remove_file(&path).ok();
    assert_eq!(g.bytes(), &bytes[..]);
    assert_eq!(g.architecture().expect("arch"), "llama");
    assert_eq!(g.tensor("t").expect("t").bytes(), &noise(34, 9)[..]);
    let missing = Gguf::open(path.with_extension("absent")).expect_err("no file");
    assert_eq!(missing.name(), "io");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Law: whatever the writer writes, the reader reads back unchanged.
    #[test]
    fn written_files_read_back(
        version in 2u32..=3,
        keys in proptest::collection::btree_map("[a-z.]{1,12}", any::<i64>(), 0..8),
        shapes in proptest::collection::vec((1u64..4, 1u64..3), 0..6),
        align_pow in 0u32..9,
    ) {
        let mut w = GgufWriter::new();
        w.version(version);
        w.metadata("general.alignment", Value::U32(1 << align_pow));
        for (k, v) in &keys {
            w.metadata(&format!("x.{k}"), Value::I64(*v));
        }
        let mut want = Vec::new();
        for (i, (blocks, rows)) in shapes.iter().enumerate() {
            let bytes = noise((blocks * rows) as usize * 34, i as u64 + 1);
            w.tensor(&format!("t{i}"), &[blocks * 32, *rows], TensorType::Q8_0, &bytes);
            want.push(bytes);
        }
        let g = Gguf::from_bytes(w.to_bytes()).expect("written file reads");
        prop_assert_eq!(g.version(), version);
        prop_assert_eq!(g.alignment(), 1 << align_pow);
        for (k, v) in &keys {
            prop_assert_eq!(g.metadata::<i64>(&format!("x.{k}")).expect("key"), *v);
        }
        for (i, bytes) in want.iter().enumerate() {
            let t = g.tensor(&format!("t{i}")).expect("tensor");
            prop_assert_eq!(t.bytes(), &bytes[..]);
            prop_assert_eq!(t.to_q8_0().expect("copy"), bytes.clone());
        }
    }

    /// Law: no byte string makes the reader panic; flipping bytes of a
    /// valid file gives either a file or a named error.
    #[test]
    fn corrupted_files_never_panic(flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)) {
        let mut w = GgufWriter::new();
        w.metadata("general.architecture", Value::String("llama".into()))
            .metadata("tokens", Value::Array(weft_gguf::Array::String(vec!["a".into(), "bc".into()])))
            .tensor("a", &[32, 2], TensorType::Q4_1, &noise(40, 1))
            .tensor("b", &[4], TensorType::F32, &noise(16, 2));
        let mut bytes = w.to_bytes();
        for (i, b) in flips {
            let at = i.index(bytes.len());
            bytes[at] = b;
        }
        if let Ok(g) = Gguf::from_bytes(bytes) {
            for t in g.tensor_infos() {
                if let Ok(t) = g.tensor(t.name()) {
                    let _ = t.to_f32();
                    let _ = t.to_q8_0();
                }
            }
        }
    }
}

/// 256 real Q4_1 blocks (64 from the start of each of `blk.0.attn_k`,
/// `blk.0.ffn_down`, `blk.17.attn_q`, `blk.29.ffn_up` of
/// SmolLM2-135M-Instruct.Q4_1.gguf, Apache-2.0) and their Q8_0
/// re-quantisation computed once by an independent implementation: the
/// `gguf` Python package 0.19 (`gguf.quants.Q4_1.dequantize_blocks`, then
/// `Q8_0.quantize_blocks`, which its authors keep bit-exact with
/// ggml-quants.c).
#[test]
fn real_q4_1_blocks_requantise_as_the_gguf_python_package_does() {
    let src = include_bytes!("fixtures/smollm2_q4_1_blocks.bin");
    let want = include_bytes!("fixtures/smollm2_q4_1_blocks_as_q8_0.bin");
    assert_eq!((src.len(), want.len()), (256 * 20, 256 * 34));
    let mut got = vec![0u8; want.len()];
    q4_1::requantize_into(src, &mut got).expect("lengths");
    for (i, (g, w)) in got.chunks(34).zip(want.chunks(34)).enumerate() {
        assert_eq!(g, w, "block {i}");
    }
}
