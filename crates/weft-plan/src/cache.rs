//! Per-host caches, FFTW-wisdom style: validation verdicts, race results
//! and built bodies, saved with serde + bincode in the user's cache
//! directory.
//!
//! One file per host (`plan-<fingerprint>.bin`), laid out as
//! `b"WEFTPLAN"`, the body's length (`u64` little-endian), the body
//! (bincode, fixed-width integers), then the first 16 bytes of SHA-256 over
//! the body. The body names the format, the host fingerprint and the
//! crate version it was written by.
//!
//! Invariants:
//!
//! - **Never trusted, never a crash.** A file that is truncated, corrupt
//!   (bad magic, bad checksum, undecodable, oversized) or foreign (another
//!   host, another crate version or format) is ignored: its problem is
//!   recorded once ([`PlanCache::problem`]) and the file is rewritten on the
//!   next [`PlanCache::save`]. A missing file is not a problem.
//! - **Keys name everything a result depends on.** A verdict is keyed by
//!   the twin's name, the hashes of the twin's and the arm's bytes and the
//!   hash of the contract; a race by both bodies' hashes and the
//!   [`GeometryClass`]; a body by the candidate's name, the hash of the
//!   offer it was built for and the [`BuildId`] of the program that built
//!   it; host and crate version are the file's.
//! - **Bodies never outlive their build.** Verdicts and races are facts
//!   about bytes, true whatever program reads them; a saved body is only
//!   what *this* program's arm or twin would build, so it is used only by
//!   the same executable (path, size and modification time), and the
//!   bodies of all but the last [`MAX_BUILDS`] builds are dropped.
//! - **Atomic writes**: a new file is written beside the old and renamed
//!   over it, so a crash mid-save leaves the old file or the new one.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bincode::Options as _;
use serde::{Deserialize, Serialize};
use weft_host::{Fingerprint, Isa};
use weft_kernel::{Checked, Geometry, LoopAnnotation, NativeCode, Refusal, Residency};

use crate::hash::ContentHash;

/// The on-disk format; a file of another format is foreign.
pub const CACHE_FORMAT: u32 = 5;

/// Builds whose saved bodies a file keeps (the current one and the most
/// recent others, so two programs sharing a cache do not evict each other).
pub const MAX_BUILDS: usize = 4;

const MAGIC: [u8; 8] = *b"WEFTPLAN";

/// Files larger than this are refused as corrupt without being read.
const MAX_FILE_BYTES: u64 = 64 << 20;

/// The crate version written into (and required of) cache files.
pub const CRATE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A geometry rounded to powers of two per dimension: races measured at
/// one geometry stand for every geometry of its class.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GeometryClass(pub Vec<(String, u32)>);

impl GeometryClass {
    /// The class of `g`: each extent `e` becomes `ceil(log2(e))` (0 for 0 and 1).
    pub fn of(g: &Geometry) -> GeometryClass {
        GeometryClass(
            g.dims()
                .map(|(n, e)| (n.to_owned(), 64 - e.saturating_sub(1).leading_zeros()))
                .collect(),
        )
    }
}

/// What a saved verdict names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VerdictKey {
    /// The twin's candidate name.
    pub twin: String,
    /// Hash of the twin's bytes.
    pub twin_code: ContentHash,
    /// Hash of the arm's bytes it was checked against.
    pub arm_code: ContentHash,
    /// Hash of the offer's contract.
    pub contract: ContentHash,
    /// Hash of what judged: the validator's version, the family's case
    /// generator and the seed ([`weft_kernel::TwinCheck::cases_id`]), so a
    /// stronger case set judges again.
    pub cases: ContentHash,
}

/// A validation verdict as saved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SavedVerdict {
    /// Matched its arm on every case.
    Accepted(Checked),
    /// Refused (a mismatch or emit error: a fault of the twin's bytes).
    Refused(Refusal),
}

/// What a saved race names: two bodies (in canonical order) and a class.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RaceKey {
    /// The smaller of the two bodies' hashes.
    pub a: ContentHash,
    /// The larger.
    pub b: ContentHash,
    /// Where they were raced.
    pub class: GeometryClass,
    /// With the data cached or streamed.
    pub residency: Residency,
}

impl RaceKey {
    /// The key of a race between `x` and `y` at `class` and `residency`,
    /// whichever order.
    pub fn new(
        x: ContentHash,
        y: ContentHash,
        class: GeometryClass,
        residency: Residency,
    ) -> RaceKey {
        let (a, b) = if x <= y { (x, y) } else { (y, x) };
        RaceKey {
            a,
            b,
            class,
            residency,
        }
    }
}

/// A race's result as saved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedRace {
    /// The faster body, or `None` when the race could not tell them apart.
    pub winner: Option<ContentHash>,
    /// Median nanoseconds per call of [`RaceKey::a`].
    pub a_ns: f64,
    /// Median nanoseconds per call of [`RaceKey::b`].
    pub b_ns: f64,
    /// Interleaved rounds run.
    pub rounds: u32,
}

/// The program that built a body: a hash of its executable's path, size
/// and modification time, so any rebuild (a changed arm, a new Cranelift)
/// is a new build whose bodies are built afresh.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BuildId(pub u64);

impl BuildId {
    /// This process's build, or `None` when its executable cannot be
    /// examined (then no body is saved or read).
    pub fn current() -> Option<BuildId> {
        static CURRENT: std::sync::OnceLock<Option<BuildId>> = std::sync::OnceLock::new();
        *CURRENT.get_or_init(|| {
            let exe = std::env::current_exe().ok()?;
            let meta = std::fs::metadata(&exe).ok()?;
            let mtime = meta
                .modified()
                .ok()?
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?;
            let id = ContentHash::of_value(&(
                exe.to_string_lossy().as_ref(),
                meta.len(),
                mtime.as_secs(),
                mtime.subsec_nanos(),
            ));
            let mut word = [0u8; 8];
            word.copy_from_slice(&id.0[..8]);
            Some(BuildId(u64::from_le_bytes(word)))
        })
    }
}

/// What a saved body names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BodyKey {
    /// The candidate (arm or twin) that built it.
    pub candidate: String,
    /// Hash of the offer it was built for.
    pub offer: ContentHash,
    /// The program that built it.
    pub build: BuildId,
}

/// A body as saved: [`NativeCode`], field for field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct SavedBody {
    isa: Isa,
    bytes: Vec<u8>,
    pool: Option<usize>,
    loops: Vec<LoopAnnotation>,
}

impl SavedBody {
    fn of(code: &NativeCode) -> SavedBody {
        SavedBody {
            isa: code.isa,
            bytes: code.bytes.clone(),
            pool: code.pool,
            loops: code.loops.clone(),
        }
    }

    fn into_code(self) -> Arc<NativeCode> {
        Arc::new(NativeCode {
            isa: self.isa,
            bytes: self.bytes,
            pool: self.pool,
            loops: self.loops,
        })
    }
}

/// Why a cache file was not used (reported once, then rewritten).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CacheProblem {
    /// It could not be read.
    #[error("cache-unreadable: {path}: {cause}")]
    Unreadable {
        /// The file.
        path: String,
        /// The I/O error.
        cause: String,
    },
    /// It ends early.
    #[error("cache-truncated: {path}: {have} bytes, {need} needed")]
    Truncated {
        /// The file.
        path: String,
        /// Bytes present.
        have: u64,
        /// Bytes its header promises.
        need: u64,
    },
    /// Its bytes are not a cache file, or fail their checksum.
    #[error("cache-corrupt: {path}: {reason}")]
    Corrupt {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A valid file from another host, crate version or format.
    #[error(
        "cache-foreign: {path}: written for host {host}, weft-plan {version}, format {format}"
    )]
    Foreign {
        /// The file.
        path: String,
        /// Its host fingerprint.
        host: String,
        /// Its crate version.
        version: String,
        /// Its format.
        format: u32,
    },
}

impl CacheProblem {
    /// The problem's stable name, as printed before the colon.
    pub fn name(&self) -> &'static str {
        match self {
            CacheProblem::Unreadable { .. } => "cache-unreadable",
            CacheProblem::Truncated { .. } => "cache-truncated",
            CacheProblem::Corrupt { .. } => "cache-corrupt",
            CacheProblem::Foreign { .. } => "cache-foreign",
        }
    }
}

/// Saving failed (the in-memory cache is intact).
#[derive(Debug, thiserror::Error)]
#[error("cache-save-failed: {path}: {cause}")]
pub struct CacheSaveError {
    /// The file.
    pub path: String,
    /// What failed.
    pub cause: String,
}

#[derive(Serialize, Deserialize)]
struct Body {
    format: u32,
    host: u64,
    version: String,
    verdicts: Vec<(VerdictKey, SavedVerdict)>,
    races: Vec<(RaceKey, SavedRace)>,
    /// The builds whose bodies are kept, most recent last.
    builds: Vec<BuildId>,
    bodies: Vec<(BodyKey, SavedBody)>,
}

fn codec() -> impl bincode::Options {
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_limit(MAX_FILE_BYTES)
        .reject_trailing_bytes()
}

/// The verdicts, races and bodies of one host, in memory, with the file
/// they came from (if any).
pub struct PlanCache {
    path: Option<PathBuf>,
    host: Fingerprint,
    verdicts: BTreeMap<VerdictKey, SavedVerdict>,
    races: BTreeMap<RaceKey, SavedRace>,
    /// This program's build (`None`: bodies are neither read nor saved).
    build: Option<BuildId>,
    builds: Vec<BuildId>,
    bodies: BTreeMap<BodyKey, Arc<NativeCode>>,
    dirty: bool,
    problem: Option<CacheProblem>,
}

impl fmt::Debug for PlanCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlanCache")
            .field("path", &self.path)
            .field("host", &self.host)
            .field("verdicts", &self.verdicts.len())
            .field("races", &self.races.len())
            .field("bodies", &self.bodies.len())
            .field("build", &self.build)
            .field("problem", &self.problem)
            .finish()
    }
}

impl PlanCache {
    /// An empty cache that is never saved.
    pub fn in_memory(host: Fingerprint) -> PlanCache {
        PlanCache {
            path: None,
            host,
            verdicts: BTreeMap::new(),
            races: BTreeMap::new(),
            build: BuildId::current(),
            builds: Vec::new(),
            bodies: BTreeMap::new(),
            dirty: false,
            problem: None,
        }
    }

    /// The default file for `host`: `$WEFT_CACHE_DIR/plan-<fp>.bin` if that
    /// variable is set, else `<user cache dir>/weft/plan-<fp>.bin`.
    pub fn default_path(host: Fingerprint) -> Option<PathBuf> {
        let dir = match std::env::var_os("WEFT_CACHE_DIR") {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => dirs::cache_dir()?.join("weft"),
        };
        Some(dir.join(format!("plan-{host}.bin")))
    }

    /// Load the cache at `path` for `host`. Never fails: an unusable file
    /// leaves the cache empty with its [`CacheProblem`] recorded.
    pub fn open(path: &Path, host: Fingerprint) -> PlanCache {
        let mut cache = PlanCache::in_memory(host);
        cache.path = Some(path.to_owned());
        match read_file(path, host) {
            Ok(Some(body)) => {
                cache.verdicts = body.verdicts.into_iter().collect();
                cache.races = body.races.into_iter().collect();
                cache.builds = body.builds;
                cache.bodies = body
                    .bodies
                    .into_iter()
                    .map(|(k, b)| (k, b.into_code()))
                    .collect();
            }
            Ok(None) => {}
            Err(problem) => {
                cache.problem = Some(problem);
                // Rewrite it at the next save, even if nothing new is learnt.
                cache.dirty = true;
            }
        }
        cache
    }

    /// The same cache serving bodies for `build` instead of this
    /// program's (`None`: no bodies are read or saved).
    pub fn with_build(mut self, build: Option<BuildId>) -> PlanCache {
        self.build = build;
        self
    }

    /// The build whose bodies this cache serves.
    pub fn build(&self) -> Option<BuildId> {
        self.build
    }

    /// Why the file was not used, if it was not.
    pub fn problem(&self) -> Option<&CacheProblem> {
        self.problem.as_ref()
    }

    /// The file this cache saves to.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Saved verdicts.
    pub fn verdict_count(&self) -> usize {
        self.verdicts.len()
    }

    /// Saved races.
    pub fn race_count(&self) -> usize {
        self.races.len()
    }

    /// The saved verdict for `key`.
    pub fn verdict(&self, key: &VerdictKey) -> Option<&SavedVerdict> {
        self.verdicts.get(key)
    }

    /// Save a verdict.
    pub fn put_verdict(&mut self, key: VerdictKey, verdict: SavedVerdict) {
        if self.verdicts.get(&key) != Some(&verdict) {
            self.verdicts.insert(key, verdict);
            self.dirty = true;
        }
    }

    /// The saved race for `key`.
    pub fn race(&self, key: &RaceKey) -> Option<&SavedRace> {
        self.races.get(key)
    }

    /// Save a race.
    pub fn put_race(&mut self, key: RaceKey, race: SavedRace) {
        self.races.insert(key, race);
        self.dirty = true;
    }

    /// Saved bodies, of every kept build.
    pub fn body_count(&self) -> usize {
        self.bodies.len()
    }

    /// The body `candidate` built for the offer hashed `offer` in this
    /// program's build, if saved.
    pub fn body(&self, candidate: &str, offer: ContentHash) -> Option<Arc<NativeCode>> {
        let key = BodyKey {
            candidate: candidate.to_owned(),
            offer,
            build: self.build?,
        };
        self.bodies.get(&key).cloned()
    }

    /// Save the body `candidate` built for the offer hashed `offer` (a
    /// no-op without a build).
    pub fn put_body(&mut self, candidate: &str, offer: ContentHash, code: &Arc<NativeCode>) {
        let Some(build) = self.build else {
            return;
        };
        let key = BodyKey {
            candidate: candidate.to_owned(),
            offer,
            build,
        };
        if self.bodies.get(&key).map(|c| **c != **code).unwrap_or(true) {
            self.bodies.insert(key, Arc::clone(code));
            self.dirty = true;
        }
    }

    /// The builds to keep bodies of (this one last) and whether that drops any.
    fn kept_builds(&self) -> Vec<BuildId> {
        let mut kept: Vec<BuildId> = self
            .builds
            .iter()
            .copied()
            .filter(|b| Some(*b) != self.build)
            .chain(self.build)
            .collect();
        let excess = kept.len().saturating_sub(MAX_BUILDS);
        kept.drain(..excess);
        kept
    }

    /// Write the cache to its file if anything changed (or the file was
    /// unusable). A cache without a file saves nothing.
    pub fn save(&mut self) -> Result<(), CacheSaveError> {
        let Some(path) = self.path.clone() else {
            return Ok(());
        };
        if !self.dirty {
            return Ok(());
        }
        let fail = |cause: String| CacheSaveError {
            path: path.display().to_string(),
            cause,
        };
        let builds = self.kept_builds();
        let body = Body {
            format: CACHE_FORMAT,
            host: self.host.0,
            version: CRATE_VERSION.to_owned(),
            verdicts: self
                .verdicts
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            races: self
                .races
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            bodies: self
                .bodies
                .iter()
                .filter(|(k, _)| builds.contains(&k.build))
                .map(|(k, v)| (k.clone(), SavedBody::of(v)))
                .collect(),
            builds: builds.clone(),
        };
        let bytes = codec().serialize(&body).map_err(|e| fail(e.to_string()))?;
        let mut out = Vec::with_capacity(bytes.len() + 32);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(&bytes);
        out.extend_from_slice(&ContentHash::of(&bytes).0);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&out)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        if let Err(e) = write() {
            let _ = std::fs::remove_file(&tmp);
            return Err(fail(e.to_string()));
        }
        self.bodies.retain(|k, _| builds.contains(&k.build));
        self.builds = builds;
        self.dirty = false;
        Ok(())
    }
}

/// Read and check the file: `Ok(None)` when it does not exist.
fn read_file(path: &Path, host: Fingerprint) -> Result<Option<Body>, CacheProblem> {
    let shown = path.display().to_string();
    let corrupt = |reason: &str| CacheProblem::Corrupt {
        path: shown.clone(),
        reason: reason.to_owned(),
    };
    let len = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(CacheProblem::Unreadable {
                path: shown,
                cause: e.to_string(),
            })
        }
    };
    if len > MAX_FILE_BYTES {
        return Err(corrupt(&format!("{len} bytes is more than a cache holds")));
    }
    let bytes = std::fs::read(path).map_err(|e| CacheProblem::Unreadable {
        path: shown.clone(),
        cause: e.to_string(),
    })?;
    let have = bytes.len() as u64;
    if have < 16 {
        return Err(CacheProblem::Truncated {
            path: shown,
            have,
            need: 16,
        });
    }
    if bytes[..8] != MAGIC {
        return Err(corrupt("not a weft plan cache (bad magic)"));
    }
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&bytes[8..16]);
    let body_len = u64::from_le_bytes(len_bytes);
    let need = body_len.saturating_add(16 + 16);
    if have < need {
        return Err(CacheProblem::Truncated {
            path: shown,
            have,
            need,
        });
    }
    if have > need {
        return Err(corrupt("trailing bytes after the checksum"));
    }
    // `need <= have <= MAX_FILE_BYTES`, so these fit in usize.
    let body = &bytes[16..16 + body_len as usize];
    let sum = &bytes[16 + body_len as usize..];
    if sum != ContentHash::of(body).0 {
        return Err(corrupt("checksum mismatch"));
    }
    let body: Body = codec()
        .deserialize(body)
        .map_err(|e| corrupt(&format!("undecodable body: {e}")))?;
    if body.format != CACHE_FORMAT || body.host != host.0 || body.version != CRATE_VERSION {
        return Err(CacheProblem::Foreign {
            path: shown,
            host: Fingerprint(body.host).to_string(),
            version: body.version,
            format: body.format,
        });
    }
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> VerdictKey {
        VerdictKey {
            twin: format!("t{n}"),
            twin_code: ContentHash([n; 16]),
            arm_code: ContentHash([1; 16]),
            contract: ContentHash([2; 16]),
            cases: ContentHash([3; 16]),
        }
    }

    fn filled(path: &Path, host: Fingerprint) -> PlanCache {
        let mut c = PlanCache::open(path, host);
        c.put_verdict(
            key(7),
            SavedVerdict::Accepted(Checked { cases: 3, words: 9 }),
        );
        c.put_verdict(
            key(8),
            SavedVerdict::Refused(Refusal::EmitError {
                message: "x".into(),
            }),
        );
        let class = GeometryClass::of(&Geometry::new().with("rows", 576));
        c.put_race(
            RaceKey::new(
                ContentHash([9; 16]),
                ContentHash([3; 16]),
                class,
                Residency::Cached,
            ),
            SavedRace {
                winner: Some(ContentHash([3; 16])),
                a_ns: 1.0,
                b_ns: 2.0,
                rounds: 5,
            },
        );
        c
    }

    #[test]
    fn saved_cache_round_trips() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plan.bin");
        let host = Fingerprint(0xabc);
        filled(&path, host).save().expect("save");
        let c = PlanCache::open(&path, host);
        assert_eq!(c.problem(), None);
        assert_eq!(c.verdict_count(), 2);
        assert_eq!(c.race_count(), 1);
        assert_eq!(
            c.verdict(&key(7)),
            Some(&SavedVerdict::Accepted(Checked { cases: 3, words: 9 }))
        );
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_refused_by_name_not_trusted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plan.bin");
        let host = Fingerprint(0xabc);
        filled(&path, host).save().expect("save");
        let good = std::fs::read(&path).expect("read");
        for cut in 0..good.len() {
            std::fs::write(&path, &good[..cut]).expect("write");
            let c = PlanCache::open(&path, host);
            let p = c.problem().expect("a truncated file is a problem");
            assert!(
                matches!(p.name(), "cache-truncated" | "cache-corrupt"),
                "cut {cut}: {p}"
            );
            assert_eq!(c.verdict_count(), 0);
        }
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x40;
            std::fs::write(&path, &bad).expect("write");
            let c = PlanCache::open(&path, host);
            let p = c.problem().expect("a flipped byte is a problem");
            assert!(
                matches!(p.name(), "cache-truncated" | "cache-corrupt"),
                "byte {i}: {p}"
            );
            assert_eq!(c.verdict_count(), 0);
        }
    }

    #[test]
    fn foreign_host_file_is_ignored_and_rewritten_on_save() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plan.bin");
        filled(&path, Fingerprint(1)).save().expect("save");
        let mut c = PlanCache::open(&path, Fingerprint(2));
        assert_eq!(c.problem().map(|p| p.name()), Some("cache-foreign"));
        assert_eq!(c.verdict_count(), 0);
        c.save().expect("rewrite");
        let again = PlanCache::open(&path, Fingerprint(2));
        assert_eq!(again.problem(), None);
    }

    #[test]
    fn garbage_and_huge_files_are_corrupt_and_missing_files_are_fine() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plan.bin");
        let host = Fingerprint(5);
        assert_eq!(PlanCache::open(&path, host).problem(), None);
        std::fs::write(
            &path,
            b"WEFTPLAN\xff\xff\xff\xff\xff\xff\xff\xffxxxxxxxxxxxxxxxx",
        )
        .expect("write");
        assert_eq!(
            PlanCache::open(&path, host).problem().map(|p| p.name()),
            Some("cache-truncated")
        );
        std::fs::write(&path, vec![0u8; 100]).expect("write");
        assert_eq!(
            PlanCache::open(&path, host).problem().map(|p| p.name()),
            Some("cache-corrupt")
        );
        // A directory where the file should be cannot be read.
        let as_dir = dir.path().join("dir.bin");
        std::fs::create_dir(&as_dir).expect("mkdir");
        assert_eq!(
            PlanCache::open(&as_dir, host).problem().map(|p| p.name()),
            Some("cache-unreadable")
        );
    }

    fn code(n: u8) -> Arc<NativeCode> {
        Arc::new(NativeCode {
            isa: Isa::X86_64,
            bytes: vec![n, 0xc3],
            pool: None,
            loops: vec![LoopAnnotation {
                name: "rows".into(),
                head: 0,
                back_edge: 1,
            }],
        })
    }

    #[test]
    fn saved_bodies_are_read_back_by_the_same_build_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plan.bin");
        let host = Fingerprint(0xabc);
        let offer = ContentHash([4; 16]);
        let mut c = PlanCache::open(&path, host).with_build(Some(BuildId(1)));
        c.put_body("arm", offer, &code(7));
        c.save().expect("save");
        let same = PlanCache::open(&path, host).with_build(Some(BuildId(1)));
        assert_eq!(same.problem(), None);
        assert_eq!(same.body("arm", offer), Some(code(7)));
        assert_eq!(same.body("arm", ContentHash([5; 16])), None);
        assert_eq!(same.body("twin", offer), None);
        // Another build of the program must build its own.
        let other = PlanCache::open(&path, host).with_build(Some(BuildId(2)));
        assert_eq!(other.body("arm", offer), None);
        // A program that cannot name its build neither reads nor saves bodies.
        let mut none = PlanCache::open(&path, host).with_build(None);
        assert_eq!(none.body("arm", offer), None);
        none.put_body("arm2", offer, &code(8));
        assert_eq!(none.body_count(), 1);
    }

    #[test]
    fn bodies_of_all_but_the_last_builds_are_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plan.bin");
        let host = Fingerprint(0xabc);
        let offer = ContentHash([4; 16]);
        let last = MAX_BUILDS as u64 + 2;
        for b in 1..=last {
            let mut c = PlanCache::open(&path, host).with_build(Some(BuildId(b)));
            c.put_body("arm", offer, &code(b as u8));
            c.save().expect("save");
        }
        for b in 1..=last {
            let c = PlanCache::open(&path, host).with_build(Some(BuildId(b)));
            let kept = b + MAX_BUILDS as u64 > last;
            assert_eq!(c.body("arm", offer).is_some(), kept, "build {b}");
        }
        assert_eq!(PlanCache::open(&path, host).body_count(), MAX_BUILDS);
        // Verdicts are not a build's: they survive every rebuild.
        let mut c = PlanCache::open(&path, host).with_build(Some(BuildId(1)));
        c.put_verdict(
            key(1),
            SavedVerdict::Accepted(Checked { cases: 1, words: 1 }),
        );
        c.save().expect("save");
        let c = PlanCache::open(&path, host).with_build(Some(BuildId(99)));
        assert_eq!(c.verdict_count(), 1);
    }

    #[test]
    fn this_program_has_a_build() {
        assert!(BuildId::current().is_some());
        assert_eq!(BuildId::current(), BuildId::current());
    }

    #[test]
    fn geometry_classes_round_extents_up_to_powers_of_two() {
        let g = Geometry::new()
            .with("rows", 576)
            .with("cols", 1)
            .with("batch", 4);
        assert_eq!(
            GeometryClass::of(&g).0,
            vec![
                ("batch".to_owned(), 2),
                ("cols".to_owned(), 0),
                ("rows".to_owned(), 10)
            ]
        );
        let h = Geometry::new()
            .with("rows", 1000)
            .with("cols", 1)
            .with("batch", 3);
        assert_eq!(GeometryClass::of(&g), GeometryClass::of(&h));
    }
}
