//! ggml tensor types: their ids in a GGUF file, names, and block geometry.
//!
//! Every type ggml has given an id is named here, so a file holding one we
//! cannot convert still opens and lists; only using such a tensor's values
//! is an error. Ids that ggml never assigned (or retired: 4, 5, 31–33,
//! 36–38) stay unknown: such a tensor's size cannot be known, so asking for
//! it is [`crate::GgufError::UnknownTensorType`].
//!
//! Sources for the table: ggml's `ggml.h` (`enum ggml_type`) and the
//! `static_assert`s on block sizes in `ggml-common.h` (which give Q8_1 as
//! 36 bytes: fp16 `d` and `s`), cross-checked against the `gguf` Python
//! package 0.19's `GGML_QUANT_SIZES`.

use std::fmt;

macro_rules! tensor_types {
    ($($variant:ident = $id:literal, $name:literal, $block:literal, $bytes:literal;)*) => {
        /// A ggml tensor type with an assigned id.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[allow(non_camel_case_types)]
        pub enum TensorType {
            $(
                #[doc = concat!("`", $name, "`: id ", $id, ", ", $block, " elements in ", $bytes, " bytes.")]
                $variant,
            )*
        }

        impl TensorType {
            /// Every named type, in id order.
            pub const ALL: &'static [TensorType] = &[$(TensorType::$variant),*];

            /// The type with this id in a GGUF file, if ggml assigned it.
            pub fn from_id(id: u32) -> Option<Self> {
                match id {
                    $($id => Some(TensorType::$variant),)*
                    _ => None,
                }
            }

            /// The id this type has in a GGUF file.
            pub fn id(self) -> u32 {
                match self { $(TensorType::$variant => $id,)* }
            }

            /// ggml's name for the type.
            pub fn name(self) -> &'static str {
                match self { $(TensorType::$variant => $name,)* }
            }

            /// Elements per block (1 for plain element types).
            pub fn block_len(self) -> u64 {
                match self { $(TensorType::$variant => $block,)* }
            }

            /// Bytes per block.
            pub fn block_bytes(self) -> u64 {
                match self { $(TensorType::$variant => $bytes,)* }
            }
        }
    };
}

tensor_types! {
    F32 = 0, "F32", 1, 4;
    F16 = 1, "F16", 1, 2;
    Q4_0 = 2, "Q4_0", 32, 18;
    Q4_1 = 3, "Q4_1", 32, 20;
    Q5_0 = 6, "Q5_0", 32, 22;
    Q5_1 = 7, "Q5_1", 32, 24;
    Q8_0 = 8, "Q8_0", 32, 34;
    Q8_1 = 9, "Q8_1", 32, 36;
    Q2_K = 10, "Q2_K", 256, 84;
    Q3_K = 11, "Q3_K", 256, 110;
    Q4_K = 12, "Q4_K", 256, 144;
    Q5_K = 13, "Q5_K", 256, 176;
    Q6_K = 14, "Q6_K", 256, 210;
    Q8_K = 15, "Q8_K", 256, 292;
    IQ2_XXS = 16, "IQ2_XXS", 256, 66;
    IQ2_XS = 17, "IQ2_XS", 256, 74;
    IQ3_XXS = 18, "IQ3_XXS", 256, 98;
    IQ1_S = 19, "IQ1_S", 256, 50;
    IQ4_NL = 20, "IQ4_NL", 32, 18;
    IQ3_S = 21, "IQ3_S", 256, 110;
    IQ2_S = 22, "IQ2_S", 256, 82;
    IQ4_XS = 23, "IQ4_XS", 256, 136;
    I8 = 24, "I8", 1, 1;
    I16 = 25, "I16", 1, 2;
    I32 = 26, "I32", 1, 4;
    I64 = 27, "I64", 1, 8;
    F64 = 28, "F64", 1, 8;
    IQ1_M = 29, "IQ1_M", 256, 56;
    BF16 = 30, "BF16", 1, 2;
    TQ1_0 = 34, "TQ1_0", 256, 54;
    TQ2_0 = 35, "TQ2_0", 256, 66;
    MXFP4 = 39, "MXFP4", 32, 17;
    NVFP4 = 40, "NVFP4", 64, 36;
    Q1_0 = 41, "Q1_0", 128, 18;
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_retired_ids_are_unknown() {
        for &t in TensorType::ALL {
            assert_eq!(TensorType::from_id(t.id()), Some(t));
            assert!(t.block_len() > 0 && t.block_bytes() > 0);
        }
        for retired in [4, 5, 31, 32, 33, 36, 37, 38, 42, u32::MAX] {
            assert_eq!(TensorType::from_id(retired), None, "{retired}");
        }
    }
}
