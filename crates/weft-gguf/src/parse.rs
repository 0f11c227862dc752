//! The parser: bytes → header, metadata, tensor infos, checked layout.
//!
//! Every read goes through [`Cursor`], which checks the length first, so no
//! read can pass the end. Every count is checked against the bytes left
//! (at the smallest encoding of one element) before anything is allocated
//! for it, so a hostile count costs nothing. Strings are capped at
//! [`MAX_STRING_LEN`] and must be UTF-8; arrays nest at most
//! [`MAX_ARRAY_DEPTH`] deep, so recursion is bounded.

use crate::error::GgufError;
use crate::types::TensorType;
use crate::value::{Array, Value, ValueType};
use std::collections::HashMap;

/// The longest string accepted, in bytes (chat templates are tens of KiB;
/// 16 MiB leaves room and stops a hostile length from copying gigabytes
/// out of a mapped file).
pub const MAX_STRING_LEN: u64 = 16 << 20;

/// How deep arrays may nest (GGUF files in the wild use 1).
pub const MAX_ARRAY_DEPTH: usize = 8;

/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: u32 = 4;

/// ggml's `GGML_MAX_NAME`: a name must be shorter than this.
pub const MAX_TENSOR_NAME: usize = 64;

/// The alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u32 = 32;

/// One tensor's entry in the file's table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub(crate) name: String,
    pub(crate) dims: Vec<u64>,
    pub(crate) type_id: u32,
    pub(crate) offset: u64,
    pub(crate) n_elements: u64,
    pub(crate) n_bytes: Option<u64>,
}

impl TensorInfo {
    /// The tensor's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Dimensions, innermost (contiguous) first, as ggml's `ne`: a
    /// `rows × cols` matrix is `[cols, rows]`.
    pub fn dims(&self) -> &[u64] {
        &self.dims
    }

    /// The raw type id from the file.
    pub fn type_id(&self) -> u32 {
        self.type_id
    }

    /// The tensor type, if its id is one ggml assigned.
    pub fn tensor_type(&self) -> Option<TensorType> {
        TensorType::from_id(self.type_id)
    }

    /// Offset of the tensor's bytes from the start of the data section.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Number of elements (product of the dimensions; 1 for no dimensions).
    pub fn n_elements(&self) -> u64 {
        self.n_elements
    }

    /// Size in bytes, if the type is known.
    pub fn n_bytes(&self) -> Option<u64> {
        self.n_bytes
    }

    /// Length of one row: the first dimension (1 for a scalar).
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }

    /// Number of rows: the product of the other dimensions.
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }
}

/// A parsed header: everything but the tensor bytes.
#[derive(Clone, Debug)]
pub(crate) struct Parsed {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub key_index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    pub tensor_index: HashMap<String, usize>,
    pub alignment: u32,
    pub data_offset: u64,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], GgufError> {
        let available = self.remaining();
        if n > available {
            return Err(GgufError::Truncated {
                what,
                offset: self.offset(),
                needed: n,
                available,
            });
        }
        // n <= remaining <= usize::MAX, so the cast and the add are exact.
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.buf[start..self.pos])
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], GgufError> {
        let bytes = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A count of elements that take at least `min_len` bytes each.
    fn count(&mut self, what: &'static str, min_len: u64) -> Result<usize, GgufError> {
        let offset = self.offset();
        let count = self.u64(what)?;
        let available = self.remaining();
        match count.checked_mul(min_len) {
            Some(bytes) if bytes <= available => Ok(count as usize),
            _ => Err(GgufError::CountTooLarge {
                what,
                count,
                offset,
                available,
            }),
        }
    }

    fn string(&mut self, what: &'static str) -> Result<String, GgufError> {
        let offset = self.offset();
        let len = self.u64(what)?;
        if len > MAX_STRING_LEN {
            return Err(GgufError::StringTooLong {
                offset,
                len,
                max: MAX_STRING_LEN,
            });
        }
        let start = self.offset();
        let bytes = self.take(len, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(GgufError::NotUtf8 {
                offset: start,
                bad_at: e.valid_up_to(),
            }),
        }
    }

    fn bool(&mut self) -> Result<bool, GgufError> {
        let offset = self.offset();
        match self.array::<1>("bool")?[0] {
            0 => Ok(false),
            1 => Ok(true),
            byte => Err(GgufError::InvalidBool { offset, byte }),
        }
    }

    fn value_type(&mut self) -> Result<ValueType, GgufError> {
        let offset = self.offset();
        let id = self.u32("value type")?;
        ValueType::from_id(id).ok_or(GgufError::UnknownValueType { offset, id })
    }

    fn value(&mut self, ty: ValueType, depth: usize) -> Result<Value, GgufError> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>("uint8")?[0]),
            ValueType::I8 => Value::I8(self.array::<1>("int8")?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array("uint16")?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array("int16")?)),
            ValueType::U32 => Value::U32(self.u32("uint32")?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array("int32")?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array("float32")?)),
            ValueType::Bool => Value::Bool(self.bool()?),
            ValueType::String => Value::String(self.string("string")?),
            ValueType::Array => Value::Array(self.array_value(depth + 1)?),
            ValueType::U64 => Value::U64(self.u64("uint64")?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array("int64")?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array("float64")?)),
        })
    }

    /// Fixed-width elements, read in one checked slice.
    fn fixed<const N: usize, T>(
        &mut self,
        n: usize,
        what: &'static str,
        f: impl Fn([u8; N]) -> T,
    ) -> Result<Vec<T>, GgufError> {
        // `count` proved n * N fits in what is left.
        let bytes = self.take((n * N) as u64, what)?;
        Ok(bytes
            .chunks_exact(N)
            .map(|c| {
                let mut a = [0u8; N];
                a.copy_from_slice(c);
                f(a)
            })
            .collect())
    }

    fn array_value(&mut self, depth: usize) -> Result<Array, GgufError> {
        let start = self.offset();
        if depth > MAX_ARRAY_DEPTH {
            return Err(GgufError::NestingTooDeep {
                offset: start,
                max: MAX_ARRAY_DEPTH,
            });
        }
        let ty = self.value_type()?;
        let n = self.count("array element", ty.min_encoded_len())?;
        Ok(match ty {
            ValueType::U8 => Array::U8(self.fixed(n, "uint8 array", |[b]| b)?),
            ValueType::I8 => Array::I8(self.fixed(n, "int8 array", |[b]| b as i8)?),
            ValueType::U16 => Array::U16(self.fixed(n, "uint16 array", u16::from_le_bytes)?),
            ValueType::I16 => Array::I16(self.fixed(n, "int16 array", i16::from_le_bytes)?),
            ValueType::U32 => Array::U32(self.fixed(n, "uint32 array", u32::from_le_bytes)?),
            ValueType::I32 => Array::I32(self.fixed(n, "int32 array", i32::from_le_bytes)?),
            ValueType::F32 => Array::F32(self.fixed(n, "float32 array", f32::from_le_bytes)?),
            ValueType::U64 => Array::U64(self.fixed(n, "uint64 array", u64::from_le_bytes)?),
            ValueType::I64 => Array::I64(self.fixed(n, "int64 array", i64::from_le_bytes)?),
            ValueType::F64 => Array::F64(self.fixed(n, "float64 array", f64::from_le_bytes)?),
            ValueType::Bool => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.bool()?);
                }
                Array::Bool(v)
            }
            ValueType::String => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.string("string array element")?);
                }
                Array::String(v)
            }
            ValueType::Array => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.array_value(depth + 1)?);
                }
                Array::Array(v)
            }
        })
    }
}

/// Parse a whole file held in `buf`.
pub(crate) fn parse(buf: &[u8]) -> Result<Parsed, GgufError> {
    let mut c = Cursor { buf, pos: 0 };
    if buf.len() < 4 || &buf[..4] != b"GGUF" {
        let mut found = [0u8; 4];
        let n = buf.len().min(4);
        found[..n].copy_from_slice(&buf[..n]);
        return Err(GgufError::BadMagic { found });
    }
    c.pos = 4;
    let version = c.u32("version")?;
    match version {
        2 | 3 => {}
        v if matches!(v.swap_bytes(), 2 | 3) => {
            return Err(GgufError::BigEndian {
                version: v.swap_bytes(),
            })
        }
        v => return Err(GgufError::UnsupportedVersion { version: v }),
    }
    // The smallest tensor info: empty name (8), n_dims (4), type (4), offset (8).
    let n_tensors_field = c.u64("tensor count")?;
    let n_kv_field = c.u64("metadata count")?;
    // Metadata first: the smallest entry is an empty key (8), a type (4) and a byte.
    let n_kv = check_count(n_kv_field, 13, "metadata entry", 16, c.remaining())?;

    let mut metadata = Vec::with_capacity(n_kv);
    let mut key_index = HashMap::with_capacity(n_kv);
    for _ in 0..n_kv {
        let key = c.string("metadata key")?;
        let ty = c.value_type()?;
        let value = c.value(ty, 0)?;
        if key_index.contains_key(&key) {
            return Err(GgufError::DuplicateKey { key });
        }
        key_index.insert(key.clone(), metadata.len());
        metadata.push((key, value));
    }

    let alignment = match key_index.get("general.alignment").map(|&i| &metadata[i].1) {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if a.is_power_of_two() => *a,
        Some(Value::U32(a)) => return Err(GgufError::BadAlignment { alignment: *a }),
        Some(v) => {
            return Err(GgufError::AlignmentType {
                found: v.value_type(),
            })
        }
    };

    let n_tensors = check_count(n_tensors_field, 24, "tensor", 8, c.remaining())?;
    let mut tensors = Vec::with_capacity(n_tensors);
    let mut tensor_index = HashMap::with_capacity(n_tensors);
    for _ in 0..n_tensors {
        let info = tensor_info(&mut c)?;
        if tensor_index.contains_key(&info.name) {
            return Err(GgufError::DuplicateTensor { name: info.name });
        }
        tensor_index.insert(info.name.clone(), tensors.len());
        tensors.push(info);
    }

    // The data section starts at the next multiple of the alignment.
    let align = u64::from(alignment);
    let data_offset = c.offset().div_ceil(align) * align;
    let data_len = (buf.len() as u64).saturating_sub(data_offset);
    check_layout(&tensors, align, data_len)?;

    Ok(Parsed {
        version,
        metadata,
        key_index,
        tensors,
        tensor_index,
        alignment,
        data_offset,
    })
}

/// A header count must fit in the bytes left at `min_len` bytes each.
fn check_count(
    count: u64,
    min_len: u64,
    what: &'static str,
    field_offset: u64,
    available: u64,
) -> Result<usize, GgufError> {
    match count.checked_mul(min_len) {
        Some(bytes) if bytes <= available => Ok(count as usize),
        _ => Err(GgufError::CountTooLarge {
            what,
            count,
            offset: field_offset,
            available,
        }),
    }
}

fn tensor_info(c: &mut Cursor<'_>) -> Result<TensorInfo, GgufError> {
    let name = c.string("tensor name")?;
    if name.len() >= MAX_TENSOR_NAME {
        return Err(GgufError::TensorNameTooLong {
            len: name.len(),
            name,
            max: MAX_TENSOR_NAME - 1,
        });
    }
    let n_dims = c.u32("tensor dimension count")?;
    if n_dims > MAX_DIMS {
        return Err(GgufError::TooManyDims { name, n_dims });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(c.u64("tensor dimension")?);
    }
    let type_id = c.u32("tensor type")?;
    let offset = c.u64("tensor offset")?;

    // ggml keeps `ne` as int64_t: every dimension and the element count
    // must fit, and so must the byte size.
    let n_elements = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64 && dims.iter().all(|&d| d <= i64::MAX as u64));
    let Some(n_elements) = n_elements else {
        return Err(GgufError::ShapeOverflow { name, dims });
    };
    let n_bytes = match TensorType::from_id(type_id) {
        None => None,
        Some(ty) => {
            let row_len = dims.first().copied().unwrap_or(1);
            if row_len % ty.block_len() != 0 {
                return Err(GgufError::RaggedRow {
                    name,
                    ty,
                    row_len,
                    block_len: ty.block_len(),
                });
            }
            match (n_elements / ty.block_len()).checked_mul(ty.block_bytes()) {
                Some(b) => Some(b),
                None => return Err(GgufError::ShapeOverflow { name, dims }),
            }
        }
    };
    Ok(TensorInfo {
        name,
        dims,
        type_id,
        offset,
        n_elements,
        n_bytes,
    })
}

/// Offsets aligned, ranges inside the data section, no two overlapping.
/// Tensors of unknown type have no known size; they are checked when used.
fn check_layout(tensors: &[TensorInfo], align: u64, data_len: u64) -> Result<(), GgufError> {
    let mut ranges = Vec::with_capacity(tensors.len());
    for t in tensors {
        if t.offset % align != 0 {
            return Err(GgufError::MisalignedTensor {
                name: t.name.clone(),
                offset: t.offset,
                alignment: align,
            });
        }
        let Some(size) = t.n_bytes else { continue };
        match t.offset.checked_add(size) {
            Some(end) if end <= data_len => {
                if size > 0 {
                    ranges.push((t.offset, end, &t.name));
                }
            }
            _ => {
                return Err(GgufError::TensorOutOfRange {
                    name: t.name.clone(),
                    offset: t.offset,
                    size,
                    data_len,
                })
            }
        }
    }
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if b.0 < a.1 {
            return Err(GgufError::OverlappingTensors {
                first: a.2.clone(),
                second: b.2.clone(),
            });
        }
    }
    Ok(())
}
