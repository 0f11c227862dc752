//! GPT-2's byte ↔ character table: byte-level BPE vocabularies spell every
//! byte as one printable character, so a token string is a sequence of
//! these characters (a space is `Ġ`, U+0120).
//!
//! Bytes that are printable Latin-1 (`!`..=`~`, `¡`..=`¬`, `®`..=`ÿ`) stand
//! for themselves; the other 68 take U+0100 onwards in byte order. This is
//! `bytes_to_unicode` from OpenAI's GPT-2 encoder, which llama.cpp and
//! Hugging Face tokenizers both reproduce.

/// Whether byte `b` is spelled by its own Latin-1 character.
const fn is_self(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xa1..=0xac | 0xae..=0xff)
}

/// The character that spells each byte.
pub fn byte_to_char() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 0x100u32;
    for b in 0..=255u8 {
        table[b as usize] = if is_self(b) {
            char::from(b)
        } else {
            let c = char::from_u32(next).expect("U+0100..U+0143 are characters");
            next += 1;
            c
        };
    }
    table
}

/// The byte a character spells, if it is one of the 256.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let u = c as u32;
    if u < 0x100 {
        let b = u as u8;
        return is_self(b).then_some(b);
    }
    // The n-th non-self byte (in byte order) is U+0100 + n.
    let n = u.checked_sub(0x100)?;
    (0..=255u8).filter(|&b| !is_self(b)).nth(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_a_bijection_with_gpt2_landmarks() {
        let t = byte_to_char();
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'\t' as usize], 'ĉ');
        assert_eq!(t[0], 'Ā');
        assert_eq!(t[0xa0], 'ł');
        assert_eq!(t[0xad], 'Ń');
        assert_eq!(t[b'a' as usize], 'a');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(t[b as usize]), Some(b), "byte {b}");
        }
        let distinct: std::collections::HashSet<char> = t.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
        assert_eq!(char_to_byte(' '), None);
        assert_eq!(char_to_byte('\u{144}'), None);
        assert_eq!(char_to_byte('é'), Some(0xe9));
    }
}
