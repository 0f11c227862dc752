//! Emitted bytes decoded back to Intel syntax.

use std::fmt;

use iced_x86::{Decoder, DecoderOptions, Formatter, Instruction, IntelFormatter};

/// One decoded instruction of a [`Listing`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListingLine {
    /// Byte offset from the start of the function.
    pub offset: usize,
    /// The instruction's bytes.
    pub bytes: Vec<u8>,
    /// Intel syntax, e.g. `vfmadd213ps ymm0, ymm1, [rdx+rax*4]`; `(bad)` for
    /// bytes that do not decode.
    pub text: String,
}

/// A function's bytes as Intel-syntax lines with offsets. `Display` prints
/// one line per instruction, each ending in a newline:
///
/// ```text
/// 0000  53                             push rbx
/// 0001  c5 f8 77                       vzeroupper
/// ```
///
/// Offset: 4 hex digits; bytes: hex, space-separated, padded to 30
/// columns; numbers in the text are hex with a `0x` prefix, branch targets
/// are function offsets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// The lines, in address order.
    pub lines: Vec<ListingLine>,
}

/// Width of the bytes column in [`Listing`]'s `Display` (the same columns
/// as `weft_managed::listing`, which renders every body's listing).
const BYTES_COLUMN: usize = 32;

impl Listing {
    /// Decodes `bytes` as 64-bit code starting at offset 0.
    pub fn decode(bytes: &[u8]) -> Listing {
        let mut formatter = IntelFormatter::new();
        let options = formatter.options_mut();
        options.set_hex_prefix("0x");
        options.set_hex_suffix("");
        options.set_uppercase_hex(false);
        options.set_branch_leading_zeros(false);
        options.set_space_after_operand_separator(true);
        let mut decoder = Decoder::with_ip(64, bytes, 0, DecoderOptions::NONE);
        let mut instruction = Instruction::default();
        let mut lines = Vec::new();
        while decoder.can_decode() {
            decoder.decode_out(&mut instruction);
            let offset = instruction.ip() as usize;
            if instruction.is_invalid() {
                // One byte at a time, so decoding resynchronises as soon as
                // it can.
                lines.push(ListingLine {
                    offset,
                    bytes: bytes[offset..offset + 1].to_vec(),
                    text: "(bad)".to_string(),
                });
                if decoder.set_position(offset + 1).is_err() {
                    break;
                }
                decoder.set_ip(offset as u64 + 1);
                continue;
            }
            let end = (offset + instruction.len()).min(bytes.len());
            let mut text = String::new();
            formatter.format(&instruction, &mut text);
            lines.push(ListingLine {
                offset,
                bytes: bytes[offset..end].to_vec(),
                text,
            });
        }
        Listing { lines }
    }

    /// The instruction texts alone, one per line (handy for asserting on
    /// a shape without offsets).
    pub fn texts(&self) -> Vec<&str> {
        self.lines.iter().map(|l| l.text.as_str()).collect()
    }
}

impl fmt::Display for ListingLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex: Vec<String> = self.bytes.iter().map(|b| format!("{b:02x}")).collect();
        let hex = hex.join(" ");
        write!(f, "{:06x}  {hex:<BYTES_COLUMN$} {}", self.offset, self.text)
    }
}

impl fmt::Display for Listing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in &self.lines {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}
