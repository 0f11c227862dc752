//! Hand-made malformed and hostile files: each is refused with the error
//! that names its problem, and none panics or allocates for a lie.

use weft_gguf::writer::{put_string, put_value};
use weft_gguf::{Gguf, GgufError, GgufWriter, TensorType, Value, ValueType};

/// A header with explicit counts, then `body`.
fn file(version: u32, n_tensors: u64, n_kv: u64, body: &[u8]) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&n_tensors.to_le_bytes());
    out.extend_from_slice(&n_kv.to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// One metadata entry: key, type id, encoded value.
fn kv(key: &str, type_id: u32, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_string(&mut out, key);
    out.extend_from_slice(&type_id.to_le_bytes());
    out.extend_from_slice(value);
    out
}

/// One tensor info.
fn info(name: &str, dims: &[u64], type_id: u32, offset: u64) -> Vec<u8> {
    let mut out = Vec::new();
    put_string(&mut out, name);
    out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
    for d in dims {
        out.extend_from_slice(&d.to_le_bytes());
    }
    out.extend_from_slice(&type_id.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out
}

fn refused(bytes: Vec<u8>) -> GgufError {
    match Gguf::from_bytes(bytes) {
        Ok(g) => panic!("accepted a bad file: {g:?}"),
        Err(e) => e,
    }
}

fn error_name(bytes: Vec<u8>) -> &'static str {
    refused(bytes).name()
}

#[test]
fn wrong_magic_and_short_files_are_bad_magic() {
    assert!(
        matches!(refused(b"GGML\x03\0\0\0".to_vec()), GgufError::BadMagic { found } if &found == b"GGML")
    );
    assert_eq!(error_name(Vec::new()), "bad-magic");
    assert_eq!(error_name(b"GG".to_vec()), "bad-magic");
}

#[test]
fn versions_other_than_2_and_3_are_refused_by_name() {
    assert!(matches!(
        refused(file(1, 0, 0, &[])),
        GgufError::UnsupportedVersion { version: 1 }
    ));
    assert!(matches!(
        refused(file(4, 0, 0, &[])),
        GgufError::UnsupportedVersion { version: 4 }
    ));
    assert!(matches!(
        refused(file(3u32.swap_bytes(), 0, 0, &[])),
        GgufError::BigEndian { version: 3 }
    ));
    for v in [2, 3] {
        assert_eq!(
            Gguf::from_bytes(file(v, 0, 0, &[]))
                .expect("empty file")
                .version(),
            v
        );
    }
}

#[test]
fn truncation_anywhere_is_truncated_never_a_panic() {
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", Value::String("llama".into()))
        .metadata(
            "a.list",
            Value::Array(weft_gguf::Array::String(vec!["x".into(), "yz".into()])),
        )
        .tensor("t", &[32], TensorType::Q8_0, &[7u8; 34]);
    let whole = w.to_bytes();
    Gguf::from_bytes(whole.clone()).expect("whole file");
    for len in 4..whole.len() {
        let e = refused(whole[..len].to_vec());
        assert!(
            matches!(
                e.name(),
                "truncated" | "count-too-large" | "tensor-out-of-range"
            ),
            "cut at {len}: {e}"
        );
    }
}

#[test]
fn huge_counts_are_refused_before_allocating() {
    assert!(matches!(
        refused(file(3, 0, u64::MAX, &[])),
        GgufError::CountTooLarge {
            what: "metadata entry",
            count: u64::MAX,
            ..
        }
    ));
    assert!(matches!(
        refused(file(3, 1 << 40, 0, &[0; 64])),
        GgufError::CountTooLarge { what: "tensor", .. }
    ));
    // An array claiming 2^61 uint64 elements: the product overflows u64.
    let mut v = 10u32.to_le_bytes().to_vec();
    v.extend_from_slice(&(1u64 << 61).to_le_bytes());
    let e = refused(file(3, 0, 1, &kv("a", 9, &v)));
    assert!(
        matches!(
            e,
            GgufError::CountTooLarge {
                what: "array element",
                ..
            }
        ),
        "{e}"
    );
    // An array of strings claiming more strings than 8-byte lengths fit.
    let mut v = 8u32.to_le_bytes().to_vec();
    v.extend_from_slice(&1000u64.to_le_bytes());
    v.extend_from_slice(&[0; 80]);
    assert_eq!(
        error_name(file(3, 0, 1, &kv("a", 9, &v))),
        "count-too-large"
    );
}

#[test]
fn strings_must_be_utf8_and_not_huge() {
    let mut v = Vec::new();
    v.extend_from_slice(&3u64.to_le_bytes());
    v.extend_from_slice(&[b'a', 0xff, b'b']);
    let e = refused(file(3, 0, 1, &kv("k", 8, &v)));
    assert!(matches!(e, GgufError::NotUtf8 { bad_at: 1, .. }), "{e}");
    // A key that is not UTF-8.
    let mut body = 2u64.to_le_bytes().to_vec();
    body.extend_from_slice(&[0xc3, 0x28]);
    body.extend_from_slice(&0u32.to_le_bytes());
    body.push(1);
    assert_eq!(error_name(file(3, 0, 1, &body)), "not-utf8");
    // A length beyond the cap is refused by the cap, not by reading.
    let v = (weft_gguf::MAX_STRING_LEN + 1).to_le_bytes();
    assert!(matches!(
        refused(file(3, 0, 1, &kv("k", 8, &v))),
        GgufError::StringTooLong { .. }
    ));
    let v = u64::MAX.to_le_bytes();
    assert_eq!(
        error_name(file(3, 0, 1, &kv("k", 8, &v))),
        "string-too-long"
    );
}

#[test]
fn unknown_value_types_and_bad_bools_are_named() {
    assert!(matches!(
        refused(file(3, 0, 1, &kv("k", 13, &[0; 8]))),
        GgufError::UnknownValueType { id: 13, .. }
    ));
    assert!(matches!(
        refused(file(3, 0, 1, &kv("k", 7, &[2]))),
        GgufError::InvalidBool { byte: 2, .. }
    ));
    // An array whose element type is unknown.
    let mut v = 99u32.to_le_bytes().to_vec();
    v.extend_from_slice(&0u64.to_le_bytes());
    assert_eq!(
        error_name(file(3, 0, 1, &kv("k", 9, &v))),
        "unknown-value-type"
    );
}

#[test]
fn nesting_is_bounded() {
    // 100 arrays, each holding one array: the depth limit stops it.
    let mut v = Vec::new();
    for _ in 0..100 {
        v.extend_from_slice(&9u32.to_le_bytes());
        v.extend_from_slice(&1u64.to_le_bytes());
    }
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(&0u64.to_le_bytes());
    assert!(matches!(
        refused(file(3, 0, 1, &kv("k", 9, &v))),
        GgufError::NestingTooDeep { .. }
    ));
}

#[test]
fn nested_arrays_within_the_limit_are_read() {
    use weft_gguf::Array;
    let nested = Array::Array(vec![
        Array::U8(vec![1, 2]),
        Array::String(vec!["é".into()]),
        Array::Array(vec![Array::F64(vec![0.5])]),
        Array::Bool(vec![]),
    ]);
    let mut w = GgufWriter::new();
    w.metadata("n", Value::Array(nested.clone()));
    let g = Gguf::from_bytes(w.to_bytes()).expect("nested arrays");
    assert_eq!(g.metadata::<&Array>("n").expect("array"), &nested);
}

#[test]
fn duplicate_keys_and_tensor_names_are_refused() {
    let mut w = GgufWriter::new();
    w.metadata("k", Value::U8(1)).metadata("k", Value::U8(2));
    assert!(matches!(refused(w.to_bytes()), GgufError::DuplicateKey { key } if key == "k"));
    let mut w = GgufWriter::new();
    w.tensor("t", &[1], TensorType::F32, &[0; 4])
        .tensor("t", &[1], TensorType::F32, &[0; 4]);
    assert!(matches!(refused(w.to_bytes()), GgufError::DuplicateTensor { name } if name == "t"));
}

#[test]
fn alignment_must_be_a_power_of_two_uint32() {
    for bad in [0u32, 3, 48] {
        let mut w = GgufWriter::new();
        w.metadata("general.alignment", Value::U32(bad));
        assert!(
            matches!(refused(w.to_bytes()), GgufError::BadAlignment { alignment } if alignment == bad)
        );
    }
    let mut w = GgufWriter::new();
    w.metadata("general.alignment", Value::U64(64));
    assert!(matches!(
        refused(w.to_bytes()),
        GgufError::AlignmentType {
            found: ValueType::U64
        }
    ));
}

#[test]
fn a_custom_alignment_places_the_data() {
    let mut w = GgufWriter::new();
    w.metadata("general.alignment", Value::U32(256))
        .tensor("a", &[3], TensorType::F32, &[1; 12])
        .tensor("b", &[2], TensorType::F16, &[2; 4]);
    let g = Gguf::from_bytes(w.to_bytes()).expect("aligned file");
    assert_eq!(g.alignment(), 256);
    assert_eq!(g.data_offset() % 256, 0);
    assert_eq!(g.tensor_info("b").expect("b").offset(), 256);
    assert_eq!(g.tensor("b").expect("b").bytes(), &[2; 4]);
}

#[test]
fn misaligned_out_of_range_and_overlapping_tensors_are_refused() {
    let data = [0u8; 256];
    let with = |infos: Vec<Vec<u8>>| {
        let body: Vec<u8> = infos.concat();
        let mut f = file(3, infos.len() as u64, 0, &body);
        f.resize(f.len().div_ceil(32) * 32, 0);
        f.extend_from_slice(&data);
        f
    };
    let e = refused(with(vec![info("a", &[4], 0, 8)]));
    assert!(
        matches!(
            e,
            GgufError::MisalignedTensor {
                offset: 8,
                alignment: 32,
                ..
            }
        ),
        "{e}"
    );
    let e = refused(with(vec![info("a", &[128], 0, 32)]));
    assert!(
        matches!(
            e,
            GgufError::TensorOutOfRange {
                offset: 32,
                size: 512,
                data_len: 256,
                ..
            }
        ),
        "{e}"
    );
    let e = refused(with(vec![info("a", &[4], 0, u64::MAX - 31)]));
    assert_eq!(e.name(), "tensor-out-of-range");
    let e = refused(with(vec![info("a", &[16], 0, 0), info("b", &[4], 0, 32)]));
    assert!(
        matches!(e, GgufError::OverlappingTensors { ref first, ref second } if first == "a" && second == "b"),
        "{e}"
    );
    // Touching is not overlapping.
    Gguf::from_bytes(with(vec![info("a", &[8], 0, 0), info("b", &[4], 0, 32)]))
        .expect("adjacent tensors");
}

#[test]
fn absurd_shapes_are_refused() {
    let e = refused(file(3, 1, 0, &info("a", &[1 << 32, 1 << 32], 0, 0)));
    assert!(matches!(e, GgufError::ShapeOverflow { .. }), "{e}");
    let e = refused(file(3, 1, 0, &info("a", &[u64::MAX], 0, 0)));
    assert_eq!(e.name(), "shape-overflow");
    // Elements fit, bytes do not: 2^62 F32 elements.
    let e = refused(file(3, 1, 0, &info("a", &[1 << 62], 0, 0)));
    assert_eq!(e.name(), "shape-overflow");
    let e = refused(file(3, 1, 0, &info("a", &[1, 1, 1, 1, 1], 0, 0)));
    assert!(matches!(e, GgufError::TooManyDims { n_dims: 5, .. }), "{e}");
    let e = refused(file(3, 1, 0, &info("a", &[33, 2], 8, 0)));
    assert!(
        matches!(
            e,
            GgufError::RaggedRow {
                row_len: 33,
                block_len: 32,
                ..
            }
        ),
        "{e}"
    );
    let long = "x".repeat(64);
    assert_eq!(
        error_name(file(3, 1, 0, &info(&long, &[1], 0, 0))),
        "tensor-name-too-long"
    );
}

#[test]
fn unknown_tensor_types_fail_only_when_used() {
    let mut w = GgufWriter::new();
    w.tensor("known", &[32], TensorType::Q8_0, &[0; 34])
        .tensor_with_type_id("mystery", &[32], 4, &[0; 20])
        .tensor("i_quant", &[256], TensorType::IQ2_XXS, &[0; 66]);
    let g = Gguf::from_bytes(w.to_bytes()).expect("opens despite the unknown type");
    assert_eq!(g.tensor("known").expect("known").bytes().len(), 34);
    assert!(matches!(
        g.tensor("mystery"),
        Err(GgufError::UnknownTensorType { id: 4, .. })
    ));
    assert!(g.tensors().is_err());
    // A named type we cannot convert gives its bytes but no conversion.
    let k = g.tensor("i_quant").expect("IQ2_XXS bytes");
    assert_eq!(k.bytes().len(), 66);
    assert!(matches!(
        k.to_q8_0(),
        Err(GgufError::UnsupportedConversion {
            from: TensorType::IQ2_XXS,
            ..
        })
    ));
    assert!(matches!(
        k.to_f32(),
        Err(GgufError::UnsupportedConversion { to: "F32", .. })
    ));
    assert!(matches!(
        g.tensor("absent"),
        Err(GgufError::NoSuchTensor { .. })
    ));
}

#[test]
fn typed_accessors_name_missing_and_wrong_typed_keys() {
    let mut w = GgufWriter::new();
    w.metadata("llama.block_count", Value::U32(30))
        .metadata(
            "tokens",
            Value::Array(weft_gguf::Array::String(vec!["a".into()])),
        )
        .metadata("ids", Value::Array(weft_gguf::Array::I32(vec![1, -2])));
    let g = Gguf::from_bytes(w.to_bytes()).expect("file");
    assert_eq!(g.metadata::<u32>("llama.block_count").expect("u32"), 30);
    assert_eq!(g.metadata::<&[String]>("tokens").expect("strings"), ["a"]);
    assert_eq!(g.metadata::<&[i32]>("ids").expect("i32s"), [1, -2]);
    let e = g
        .metadata::<u64>("llama.block_count")
        .expect_err("u32 is not u64");
    assert!(
        matches!(&e, GgufError::WrongType { expected: "uint64", found, .. } if found == "uint32"),
        "{e}"
    );
    let e = g
        .metadata::<&[u32]>("tokens")
        .expect_err("strings are not u32s");
    assert!(
        matches!(&e, GgufError::WrongType { found, .. } if found == "array of string"),
        "{e}"
    );
    assert!(matches!(
        g.metadata::<u32>("nope"),
        Err(GgufError::MissingKey { .. })
    ));
    assert_eq!(g.metadata_opt::<u32>("nope").expect("absent is fine"), None);
    assert!(g.metadata_opt::<f32>("llama.block_count").is_err());
}

#[test]
fn every_scalar_type_reads_back() {
    let values = [
        Value::U8(200),
        Value::I8(-100),
        Value::U16(60000),
        Value::I16(-30000),
        Value::U32(4_000_000_000),
        Value::I32(-2_000_000_000),
        Value::F32(-1.5),
        Value::Bool(true),
        Value::String("ok".into()),
        Value::U64(u64::MAX),
        Value::I64(i64::MIN),
        Value::F64(0.1),
    ];
    let mut w = GgufWriter::new();
    for (i, v) in values.iter().enumerate() {
        w.metadata(&format!("k{i}"), v.clone());
    }
    let g = Gguf::from_bytes(w.to_bytes()).expect("file");
    for (i, v) in values.iter().enumerate() {
        assert_eq!(g.value(&format!("k{i}")), Some(v));
    }
    let keys: Vec<&str> = g.metadata_entries().map(|(k, _)| k).collect();
    assert_eq!(keys.len(), values.len());
}

#[test]
fn put_value_encodes_what_the_reader_reads() {
    let mut bytes = Vec::new();
    put_value(&mut bytes, &Value::U16(0x1234));
    assert_eq!(bytes, [0x34, 0x12]);
}

/// The block types the K-quant and Q5 files bring, each with the
/// offset of its binary16 scale in a block.
const NEW_BLOCK_TYPES: &[(TensorType, usize)] = &[
    (TensorType::Q4_0, 0),
    (TensorType::Q5_0, 0),
    (TensorType::Q5_1, 0),
    (TensorType::Q2_K, 80),
    (TensorType::Q3_K, 108),
    (TensorType::Q4_K, 0),
    (TensorType::Q5_K, 0),
    (TensorType::Q6_K, 208),
    (TensorType::BF16, 0),
];

#[test]
fn rows_that_are_not_whole_blocks_of_a_new_type_are_refused_at_open() {
    for &(ty, _) in NEW_BLOCK_TYPES {
        let block = ty.block_len();
        if block == 1 {
            continue;
        }
        // A row of one block and one element: the bytes cannot be sized.
        let bytes = vec![0u8; 2 * ty.block_bytes() as usize];
        let mut w = GgufWriter::new();
        w.tensor("ragged", &[block + 1, 1], ty, &bytes);
        assert_eq!(error_name(w.to_bytes()), "ragged-row", "{ty}");
    }
}

#[test]
fn a_file_cut_inside_a_block_of_a_new_type_is_refused_as_out_of_range() {
    for &(ty, _) in NEW_BLOCK_TYPES {
        let n = ty.block_len() * 2;
        let bytes = vec![0x55u8; 2 * ty.block_bytes() as usize];
        let mut w = GgufWriter::new();
        w.tensor("w", &[n], ty, &bytes);
        let mut file = w.to_bytes();
        file.truncate(file.len() - ty.block_bytes() as usize / 2);
        assert_eq!(error_name(file), "tensor-out-of-range", "{ty}");
    }
}

#[test]
fn nan_and_infinite_scales_decode_to_non_finite_values_without_panicking() {
    for &(ty, at) in NEW_BLOCK_TYPES {
        // binary16 NaN and infinity; for BF16 its own.
        let specials = if ty == TensorType::BF16 {
            [(0x7fc0u16, true), (0x7f80u16, false)]
        } else {
            [(0x7e00u16, true), (0x7c00u16, false)]
        };
        for (scale, want_nan) in specials {
            let mut bytes = vec![0x5au8; ty.block_bytes() as usize];
            bytes[at..at + 2].copy_from_slice(&scale.to_le_bytes());
            let mut w = GgufWriter::new();
            w.tensor("w", &[ty.block_len()], ty, &bytes);
            let g = Gguf::from_bytes(w.to_bytes()).expect("valid file");
            let v = g
                .tensor("w")
                .expect("present")
                .to_f32()
                .expect("readable type");
            if want_nan {
                assert!(v.iter().any(|x| x.is_nan()), "{ty}: a NaN scale");
            } else {
                assert!(v.iter().any(|x| !x.is_finite()), "{ty}: an infinite scale");
            }
        }
    }
}
