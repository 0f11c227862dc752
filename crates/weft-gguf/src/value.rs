//! Metadata values: the thirteen GGUF value types, arrays kept typed (a
//! token list is a `Vec<String>`, token types a `Vec<i32>`), and
//! [`FromValue`], which the typed accessors use.

use std::fmt;

/// A GGUF value type, with its id in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// `uint8` (id 0).
    U8,
    /// `int8` (id 1).
    I8,
    /// `uint16` (id 2).
    U16,
    /// `int16` (id 3).
    I16,
    /// `uint32` (id 4).
    U32,
    /// `int32` (id 5).
    I32,
    /// `float32` (id 6).
    F32,
    /// `bool`, one byte 0 or 1 (id 7).
    Bool,
    /// UTF-8 `string`, u64 length then bytes (id 8).
    String,
    /// `array`: element type, u64 count, elements (id 9).
    Array,
    /// `uint64` (id 10).
    U64,
    /// `int64` (id 11).
    I64,
    /// `float64` (id 12).
    F64,
}

impl ValueType {
    /// The type with this id, if GGUF defines it.
    pub fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The id of this type in a file.
    pub fn id(self) -> u32 {
        use ValueType::*;
        match self {
            U8 => 0,
            I8 => 1,
            U16 => 2,
            I16 => 3,
            U32 => 4,
            I32 => 5,
            F32 => 6,
            Bool => 7,
            String => 8,
            Array => 9,
            U64 => 10,
            I64 => 11,
            F64 => 12,
        }
    }

    /// The fewest bytes one value of this type takes in a file (a string
    /// its length, an array its element type and count). Bounds every
    /// count before anything is allocated for it.
    pub fn min_encoded_len(self) -> u64 {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }

    /// The type's name in the GGUF specification.
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "uint8",
            I8 => "int8",
            U16 => "uint16",
            I16 => "int16",
            U32 => "uint32",
            I32 => "int32",
            F32 => "float32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "uint64",
            I64 => "int64",
            F64 => "float64",
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)] // each variant is the value type of the same name
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A metadata array: one element type, stored as a typed vector. Arrays
/// may nest (an array of arrays, each with its own element type).
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)] // each variant holds elements of the value type of the same name
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<Array>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl Value {
    /// This value's type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// A short description of the type for error messages: `uint32`,
    /// `array of string`, `array of array`.
    pub fn type_description(&self) -> String {
        match self {
            Value::Array(a) => format!("array of {}", a.element_type()),
            v => v.value_type().name().to_string(),
        }
    }
}

impl Array {
    /// The element type.
    pub fn element_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A Rust type a metadata value can be read as, strictly: a `u32` key is
/// read as `u32` and nothing else, as llama.cpp reads it.
pub trait FromValue<'a>: Sized {
    /// What the accessor expected, for [`crate::GgufError::WrongType`].
    const EXPECTED: &'static str;
    /// The value as `Self`, or `None` if it has another type.
    fn from_value(value: &'a Value) -> Option<Self>;
}

macro_rules! scalar_from_value {
    ($($t:ty => $variant:ident, $name:literal;)*) => {$(
        impl FromValue<'_> for $t {
            const EXPECTED: &'static str = $name;
            fn from_value(value: &Value) -> Option<Self> {
                match value {
                    Value::$variant(v) => Some(*v),
                    _ => None,
                }
            }
        }
        impl<'a> FromValue<'a> for &'a [$t] {
            const EXPECTED: &'static str = concat!("array of ", $name);
            fn from_value(value: &'a Value) -> Option<Self> {
                match value {
                    Value::Array(Array::$variant(v)) => Some(v.as_slice()),
                    _ => None,
                }
            }
        }
    )*};
}

scalar_from_value! {
    u8 => U8, "uint8";
    i8 => I8, "int8";
    u16 => U16, "uint16";
    i16 => I16, "int16";
    u32 => U32, "uint32";
    i32 => I32, "int32";
    f32 => F32, "float32";
    bool => Bool, "bool";
    u64 => U64, "uint64";
    i64 => I64, "int64";
    f64 => F64, "float64";
}

impl<'a> FromValue<'a> for &'a str {
    const EXPECTED: &'static str = "string";
    fn from_value(value: &'a Value) -> Option<Self> {
        match value {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
}

impl<'a> FromValue<'a> for &'a [String] {
    const EXPECTED: &'static str = "array of string";
    fn from_value(value: &'a Value) -> Option<Self> {
        match value {
            Value::Array(Array::String(v)) => Some(v),
            _ => None,
        }
    }
}

impl<'a> FromValue<'a> for &'a Array {
    const EXPECTED: &'static str = "array";
    fn from_value(value: &'a Value) -> Option<Self> {
        match value {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl<'a> FromValue<'a> for &'a Value {
    const EXPECTED: &'static str = "any value";
    fn from_value(value: &'a Value) -> Option<Self> {
        Some(value)
    }
}
