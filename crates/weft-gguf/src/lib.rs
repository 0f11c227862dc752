//! weft-gguf: read GGUF model files (versions 2 and 3) and convert their
//! tensors to the formats Weft's kernels take.
//!
//! One job: turn the bytes of a GGUF file into checked metadata, tensor
//! infos and tensor byte slices, and convert tensors to the formats the
//! kernels take: every type the current llama.cpp GGUF files use (F32,
//! F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K…Q6_K) to f32, and
//! Q4_1/F16/F32/Q8_0 to Q8_0, exactly as ggml would.
//!
//! Invariants:
//! - Opening a file checks all of its layout: magic, version, every count
//!   against the bytes left, strings (UTF-8, at most [`MAX_STRING_LEN`]),
//!   value types, nesting ([`MAX_ARRAY_DEPTH`]), unique keys and tensor
//!   names, `general.alignment` (a power-of-two `uint32`, default 32),
//!   shapes (at most 4 dimensions, no overflow, whole blocks per row),
//!   tensor offsets (aligned, inside the file, not overlapping). Bad input
//!   is a [`GgufError`] naming the problem; nothing panics, nothing reads
//!   out of bounds, and no allocation is larger than the file justifies.
//! - A tensor type ggml never assigned is accepted when opening and
//!   refused only when that tensor is used ([`GgufError::UnknownTensorType`]).
//! - Conversions are deterministic: Q4_1 → Q8_0 gives the bytes of ggml's
//!   `dequantize_row_q4_1` followed by `quantize_row_q8_0_ref`, for any
//!   number of threads.
//!
//! ```
//! use weft_gguf::{Gguf, GgufWriter, TensorType, Value};
//! let mut w = GgufWriter::new();
//! w.metadata("llama.block_count", Value::U32(30));
//! w.tensor("norm.weight", &[4], TensorType::F32, &[0u8; 16]);
//! let gguf = Gguf::from_bytes(w.to_bytes())?;
//! assert_eq!(gguf.metadata::<u32>("llama.block_count")?, 30);
//! let t = gguf.tensor("norm.weight")?;
//! assert_eq!((t.dims(), t.tensor_type()), (&[4u64][..], TensorType::F32));
//! assert_eq!(t.to_f32()?, vec![0.0; 4]);
//! # Ok::<(), weft_gguf::GgufError>(())
//! ```

pub use weft_quant as block;
mod convert;
mod error;
mod parse;
mod types;
mod value;
pub mod writer;

pub use convert::{q8_0_lens, to_q8_0_into, to_q8_0_many, Q8_0_NAME};
pub use error::GgufError;
pub use parse::{
    TensorInfo, DEFAULT_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_DIMS, MAX_STRING_LEN, MAX_TENSOR_NAME,
};
pub use types::TensorType;
pub use value::{Array, FromValue, Value, ValueType};
pub use writer::GgufWriter;

use parse::Parsed;
use std::path::Path;

/// Where a file's bytes live.
enum Storage {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
    Static(&'static [u8]),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
            Storage::Static(s) => s,
        }
    }
}

/// An open, checked GGUF file.
pub struct Gguf {
    storage: Storage,
    parsed: Parsed,
}

impl std::fmt::Debug for Gguf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gguf")
            .field("version", &self.parsed.version)
            .field("metadata_entries", &self.parsed.metadata.len())
            .field("tensors", &self.parsed.tensors.len())
            .field("alignment", &self.parsed.alignment)
            .finish()
    }
}

impl Gguf {
    /// Open and check a file, mapping it read-only.
    ///
    /// The map is private and read-only; like every memory-mapped reader,
    /// it assumes no other process truncates or rewrites the file while it
    /// is open (Weft's own files are written once, then renamed into place).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: a read-only private map; see the doc above for the one
        // assumption (the file is not changed underneath us).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Self::new(Storage::Mapped(map))
    }

    /// Check a file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, GgufError> {
        Self::new(Storage::Owned(bytes))
    }

    /// Check a file embedded in the binary (`include_bytes!`).
    pub fn from_static(bytes: &'static [u8]) -> Result<Self, GgufError> {
        Self::new(Storage::Static(bytes))
    }

    fn new(storage: Storage) -> Result<Self, GgufError> {
        let parsed = parse::parse(storage.bytes())?;
        Ok(Self { storage, parsed })
    }

    /// The file's GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.parsed.version
    }

    /// The data section's alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> u32 {
        self.parsed.alignment
    }

    /// Offset of the data section from the start of the file.
    pub fn data_offset(&self) -> u64 {
        self.parsed.data_offset
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// A metadata value read as `T`, strictly typed:
    /// `gguf.metadata::<u32>("llama.block_count")`,
    /// `gguf.metadata::<&[String]>("tokenizer.ggml.tokens")`.
    pub fn metadata<'a, T: FromValue<'a>>(&'a self, key: &str) -> Result<T, GgufError> {
        self.metadata_opt(key)?
            .ok_or_else(|| GgufError::MissingKey { key: key.into() })
    }

    /// Like [`Gguf::metadata`], but a missing key is `Ok(None)`; a key of
    /// another type is still an error.
    pub fn metadata_opt<'a, T: FromValue<'a>>(&'a self, key: &str) -> Result<Option<T>, GgufError> {
        match self.value(key) {
            None => Ok(None),
            Some(v) => T::from_value(v)
                .map(Some)
                .ok_or_else(|| GgufError::WrongType {
                    key: key.into(),
                    expected: T::EXPECTED,
                    found: v.type_description(),
                }),
        }
    }

    /// The raw value of a key.
    pub fn value(&self, key: &str) -> Option<&Value> {
        let i = *self.parsed.key_index.get(key)?;
        Some(&self.parsed.metadata[i].1)
    }

    /// All metadata entries in file order.
    pub fn metadata_entries(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.parsed.metadata.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// `general.architecture` (`"llama"` for SmolLM2).
    pub fn architecture(&self) -> Result<&str, GgufError> {
        self.metadata("general.architecture")
    }

    /// Every tensor's info, in file order.
    pub fn tensor_infos(&self) -> &[TensorInfo] {
        &self.parsed.tensors
    }

    /// The info of one tensor.
    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        let i = *self.parsed.tensor_index.get(name)?;
        Some(&self.parsed.tensors[i])
    }

    /// One tensor: its info, type and bytes.
    pub fn tensor(&self, name: &str) -> Result<Tensor<'_>, GgufError> {
        let info = self
            .tensor_info(name)
            .ok_or_else(|| GgufError::NoSuchTensor { name: name.into() })?;
        self.tensor_of(info)
    }

    /// Every tensor of a known type, in file order (a tensor of unknown
    /// type is an error here too: asking for all is using it).
    pub fn tensors(&self) -> Result<Vec<Tensor<'_>>, GgufError> {
        self.parsed
            .tensors
            .iter()
            .map(|i| self.tensor_of(i))
            .collect()
    }

    fn tensor_of<'a>(&'a self, info: &'a TensorInfo) -> Result<Tensor<'a>, GgufError> {
        let (Some(ty), Some(size)) = (info.tensor_type(), info.n_bytes) else {
            return Err(GgufError::UnknownTensorType {
                name: info.name.clone(),
                id: info.type_id,
            });
        };
        // Parsing proved data_offset + offset + size <= file length.
        let start = (self.parsed.data_offset + info.offset) as usize;
        let bytes = &self.storage.bytes()[start..start + size as usize];
        Ok(Tensor { info, ty, bytes })
    }
}

/// One tensor of a known type, borrowed from its file.
#[derive(Clone, Copy, Debug)]
pub struct Tensor<'a> {
    info: &'a TensorInfo,
    ty: TensorType,
    bytes: &'a [u8],
}

impl<'a> Tensor<'a> {
    /// Its entry in the file's table.
    pub fn info(&self) -> &'a TensorInfo {
        self.info
    }

    /// Its name.
    pub fn name(&self) -> &'a str {
        &self.info.name
    }

    /// Dimensions, innermost first (ggml's `ne`).
    pub fn dims(&self) -> &'a [u64] {
        &self.info.dims
    }

    /// Its type.
    pub fn tensor_type(&self) -> TensorType {
        self.ty
    }

    /// Its bytes in the file (only byte-aligned in general).
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.info.n_elements
    }

    /// All values as f32, as ggml's `to_float` gives them: F32 bit for
    /// bit, F16 and BF16 widened exactly, every block type weft-quant's
    /// [`block::Format`] knows dequantised (NaN payloads included).
    /// Another type is [`GgufError::UnsupportedConversion`].
    pub fn to_f32(&self) -> Result<Vec<f32>, GgufError> {
        convert::to_f32(self)
    }

    /// The tensor as Q8_0 bytes (row-major blocks of 34 bytes): Q8_0
    /// copied, Q4_1 re-quantised, F32/F16 quantised, all as llama.cpp's
    /// reference quantiser; see [`to_q8_0_many`] for the threaded form.
    pub fn to_q8_0(&self) -> Result<Vec<u8>, GgufError> {
        let mut out = to_q8_0_many(std::slice::from_ref(self), 1)?;
        Ok(out.pop().unwrap_or_default())
    }
}
