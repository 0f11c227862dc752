//! Every way a GGUF file can be refused, or a request on it fail.

use crate::types::TensorType;
use crate::value::ValueType;
use std::path::PathBuf;

/// A GGUF error. Offsets are byte offsets from the start of the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// The file could not be opened or mapped.
    #[error("io: cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The first four bytes are not `GGUF`.
    #[error("bad-magic: not a GGUF file: magic {found:02x?}, expected \"GGUF\"")]
    BadMagic {
        /// The bytes found (zero-padded when the file is shorter).
        found: [u8; 4],
    },
    /// A version this reader does not read (it reads 2 and 3).
    #[error("unsupported-version: GGUF version {version} is not supported (2 and 3 are)")]
    UnsupportedVersion {
        /// The version field.
        version: u32,
    },
    /// The version reads as a byte-swapped 2 or 3: a big-endian file.
    #[error("big-endian: big-endian GGUF (version {version} byte-swapped) is not supported")]
    BigEndian {
        /// The version, read big-endian.
        version: u32,
    },
    /// The file ends inside a field.
    #[error("truncated: {what} at offset {offset} needs {needed} bytes, {available} left")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Where it starts.
        offset: u64,
        /// Bytes it needs.
        needed: u64,
        /// Bytes left in the file.
        available: u64,
    },
    /// A count (of keys, tensors or array elements) larger than the rest
    /// of the file could hold even at the smallest encoding.
    #[error("count-too-large: {what} count {count} at offset {offset} cannot fit in the {available} bytes left")]
    CountTooLarge {
        /// What is counted.
        what: &'static str,
        /// The count read.
        count: u64,
        /// Where the count field is.
        offset: u64,
        /// Bytes left after it.
        available: u64,
    },
    /// A string longer than [`crate::MAX_STRING_LEN`].
    #[error(
        "string-too-long: string at offset {offset} is {len} bytes, more than the limit of {max}"
    )]
    StringTooLong {
        /// Where the string's length field is.
        offset: u64,
        /// Its claimed length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A string whose bytes are not UTF-8.
    #[error(
        "not-utf8: string at offset {offset} is not UTF-8 (bad byte at {bad_at} of the string)"
    )]
    NotUtf8 {
        /// Where the string's bytes start.
        offset: u64,
        /// Index of the first invalid byte within the string.
        bad_at: usize,
    },
    /// A bool byte other than 0 or 1.
    #[error("invalid-bool: bool at offset {offset} is {byte}, not 0 or 1")]
    InvalidBool {
        /// Where it is.
        offset: u64,
        /// The byte.
        byte: u8,
    },
    /// A value type id GGUF does not define.
    #[error("unknown-value-type: unknown value type {id} at offset {offset}")]
    UnknownValueType {
        /// Where the type field is.
        offset: u64,
        /// The id read.
        id: u32,
    },
    /// Arrays nested deeper than [`crate::MAX_ARRAY_DEPTH`].
    #[error("nesting-too-deep: arrays nested more than {max} deep at offset {offset}")]
    NestingTooDeep {
        /// Where the too-deep array starts.
        offset: u64,
        /// The limit.
        max: usize,
    },
    /// Two metadata entries with one key.
    #[error("duplicate-key: duplicate metadata key {key:?}")]
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// Two tensors with one name.
    #[error("duplicate-tensor: duplicate tensor name {name:?}")]
    DuplicateTensor {
        /// The name.
        name: String,
    },
    /// A tensor name of 64 bytes or more (ggml's `GGML_MAX_NAME` limit).
    #[error("tensor-name-too-long: tensor name of {len} bytes is too long (ggml allows {max}): {name:?}")]
    TensorNameTooLong {
        /// The name.
        name: String,
        /// Its length in bytes.
        len: usize,
        /// The longest allowed.
        max: usize,
    },
    /// More than four dimensions (ggml's `GGML_MAX_DIMS`).
    #[error("too-many-dims: tensor {name:?} has {n_dims} dimensions, at most 4 allowed")]
    TooManyDims {
        /// The tensor.
        name: String,
        /// The dimension count read.
        n_dims: u32,
    },
    /// A dimension above `i64::MAX`, or a product of dimensions (or the
    /// tensor's byte size) that overflows.
    #[error("shape-overflow: tensor {name:?} has dimensions {dims:?} whose element count or size overflows")]
    ShapeOverflow {
        /// The tensor.
        name: String,
        /// Its dimensions, innermost first.
        dims: Vec<u64>,
    },
    /// A tensor whose row (first dimension) is not a whole number of blocks.
    #[error("ragged-row: tensor {name:?} of type {ty}: row length {row_len} is not a multiple of the block length {block_len}")]
    RaggedRow {
        /// The tensor.
        name: String,
        /// Its type.
        ty: TensorType,
        /// Its first dimension.
        row_len: u64,
        /// The type's block length.
        block_len: u64,
    },
    /// `general.alignment` is not a `uint32`.
    #[error("alignment-type: general.alignment must be uint32, found {found}")]
    AlignmentType {
        /// The type found.
        found: ValueType,
    },
    /// `general.alignment` is zero or not a power of two.
    #[error("bad-alignment: general.alignment {alignment} is not a power of two")]
    BadAlignment {
        /// The value.
        alignment: u32,
    },
    /// A tensor offset that is not a multiple of the alignment.
    #[error(
        "misaligned-tensor: tensor {name:?} at data offset {offset} is not aligned to {alignment}"
    )]
    MisalignedTensor {
        /// The tensor.
        name: String,
        /// Its offset within the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// A tensor whose bytes run past the end of the file.
    #[error("tensor-out-of-range: tensor {name:?} at data offset {offset} with {size} bytes ends past the data section's {data_len} bytes")]
    TensorOutOfRange {
        /// The tensor.
        name: String,
        /// Its offset within the data section.
        offset: u64,
        /// Its size in bytes.
        size: u64,
        /// Bytes in the data section.
        data_len: u64,
    },
    /// Two tensors whose byte ranges overlap.
    #[error("overlapping-tensors: tensors {first:?} and {second:?} overlap")]
    OverlappingTensors {
        /// The one that starts first.
        first: String,
        /// The one that starts inside it.
        second: String,
    },
    /// The metadata key is absent.
    #[error("missing-key: metadata key {key:?} is missing")]
    MissingKey {
        /// The key.
        key: String,
    },
    /// The metadata key holds another type than asked for.
    #[error("wrong-type: metadata key {key:?} is {found}, expected {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// What the caller asked for.
        expected: &'static str,
        /// What the file holds.
        found: String,
    },
    /// No tensor has this name.
    #[error("no-such-tensor: no tensor named {name:?}")]
    NoSuchTensor {
        /// The name asked for.
        name: String,
    },
    /// The tensor's type id is not one ggml assigned, so its size is unknown.
    #[error("unknown-tensor-type: tensor {name:?} has unknown type id {id}")]
    UnknownTensorType {
        /// The tensor.
        name: String,
        /// The type id.
        id: u32,
    },
    /// The tensor's type has no conversion to the one asked for.
    #[error("unsupported-conversion: tensor {name:?} of type {from} cannot be converted to {to}")]
    UnsupportedConversion {
        /// The tensor.
        name: String,
        /// Its type.
        from: TensorType,
        /// The target format.
        to: &'static str,
    },
    /// A caller's destination for a tensor's converted bytes has the
    /// wrong length (see [`to_q8_0_into`](crate::to_q8_0_into)).
    #[error("bad-destination: tensor {name:?} converts to {expected} bytes, its destination holds {got}")]
    BadDestination {
        /// The tensor.
        name: String,
        /// Bytes its conversion writes.
        expected: usize,
        /// Bytes the destination holds.
        got: usize,
    },
    /// A caller gave another number of destinations than tensors (see
    /// [`to_q8_0_into`](crate::to_q8_0_into)).
    #[error("destination-count: {tensors} tensors to convert, {destinations} destinations")]
    DestinationCount {
        /// Tensors to convert.
        tensors: usize,
        /// Destinations given.
        destinations: usize,
    },
}

impl GgufError {
    /// A short stable name for the error, for logs and tests
    /// (`truncated`, `count-too-large`, …).
    pub fn name(&self) -> &'static str {
        match self {
            GgufError::Io { .. } => "io",
            GgufError::BadDestination { .. } => "bad-destination",
            GgufError::DestinationCount { .. } => "destination-count",
            GgufError::BadMagic { .. } => "bad-magic",
            GgufError::UnsupportedVersion { .. } => "unsupported-version",
            GgufError::BigEndian { .. } => "big-endian",
            GgufError::Truncated { .. } => "truncated",
            GgufError::CountTooLarge { .. } => "count-too-large",
            GgufError::StringTooLong { .. } => "string-too-long",
            GgufError::NotUtf8 { .. } => "not-utf8",
            GgufError::InvalidBool { .. } => "invalid-bool",
            GgufError::UnknownValueType { .. } => "unknown-value-type",
            GgufError::NestingTooDeep { .. } => "nesting-too-deep",
            GgufError::DuplicateKey { .. } => "duplicate-key",
            GgufError::DuplicateTensor { .. } => "duplicate-tensor",
            GgufError::TensorNameTooLong { .. } => "tensor-name-too-long",
            GgufError::TooManyDims { .. } => "too-many-dims",
            GgufError::ShapeOverflow { .. } => "shape-overflow",
            GgufError::RaggedRow { .. } => "ragged-row",
            GgufError::AlignmentType { .. } => "alignment-type",
            GgufError::BadAlignment { .. } => "bad-alignment",
            GgufError::MisalignedTensor { .. } => "misaligned-tensor",
            GgufError::TensorOutOfRange { .. } => "tensor-out-of-range",
            GgufError::OverlappingTensors { .. } => "overlapping-tensors",
            GgufError::MissingKey { .. } => "missing-key",
            GgufError::WrongType { .. } => "wrong-type",
            GgufError::NoSuchTensor { .. } => "no-such-tensor",
            GgufError::UnknownTensorType { .. } => "unknown-tensor-type",
            GgufError::UnsupportedConversion { .. } => "unsupported-conversion",
        }
    }
}
