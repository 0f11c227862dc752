//! What the K-quant families' validation cases share: a deterministic
//! generator, special values, and buffers placed at odd offsets.

use weft_quant::Format;
use weft_validate::align_up_elements;

use crate::Activations;

/// Guard f32s on each side of Y.
pub const Y_GUARD: usize = 8;

/// Deterministic xorshift, the cases' source of randomness.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (never the all-zero state).
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value in `[-2, 2)` on a 2^-22 grid.
    pub fn f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
    }

    /// A binary16 scale: a normal value around 2^-7 of either sign, or
    /// with `specials` one draw in eight from [`SPECIAL_HALVES`].
    pub fn half(&mut self, specials: bool) -> u16 {
        let r = self.next_u64();
        if specials && r.is_multiple_of(8) {
            SPECIAL_HALVES[(r >> 8) as usize % SPECIAL_HALVES.len()]
        } else {
            (0x1800 + (r >> 16) as u16 % 0x1000) | (((r >> 40) & 1) as u16) << 15
        }
    }
}

/// Binary16 values a twin's widening could get wrong: ±0, ±smallest and
/// ±largest subnormal, smallest normal, ±1, ±inf, a quiet and a
/// signalling NaN, the largest finite.
pub const SPECIAL_HALVES: [u16; 14] = [
    0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x0400, 0x3c00, 0xbc00, 0x7c00, 0xfc00, 0x7e00,
    0x7d01, 0x7bff,
];

/// f32 activation scales worth a case: ±0, a subnormal, ±inf, NaN, huge.
pub const SPECIAL_DX: [u32; 7] = [
    0x0000_0000,
    0x8000_0000,
    0x0000_0003,
    0x7f80_0000,
    0xff80_0000,
    0x7fc0_0001,
    0x7e00_0000,
];

/// `bytes` copied into a fresh buffer at `misalign` bytes past a 64-byte
/// boundary; returns the buffer and where the copy starts.
pub fn misaligned_copy(bytes: &[u8], misalign: usize) -> (Vec<u8>, usize) {
    let mut buf = vec![0u8; bytes.len() + 64 + misalign];
    let start = align_up_elements(buf.as_ptr(), 64) + misalign;
    buf[start..start + bytes.len()].copy_from_slice(bytes);
    (buf, start)
}

/// Activations of `format` (Q8_K or Q8_0) of random quants (-128
/// included; Q8_K with their true `bsums`), and special scales on every
/// other block: f32 ones from [`SPECIAL_DX`] for Q8_K, binary16 ones from
/// [`SPECIAL_HALVES`] for Q8_0.
pub fn raw_activations(format: Format, blocks: usize, batch: usize, seed: u64) -> Activations {
    let mut rng = Rng::new(seed);
    let mut bytes = Vec::with_capacity(blocks * batch * format.block_bytes());
    for i in 0..blocks * batch {
        let start = bytes.len();
        let special = i % 2 == 1;
        if format == Format::Q8_K {
            let dx = if special {
                f32::from_bits(SPECIAL_DX[(i / 2) % SPECIAL_DX.len()])
            } else {
                rng.f32() / 127.0
            };
            bytes.extend_from_slice(&dx.to_le_bytes());
        } else {
            let d = if special {
                SPECIAL_HALVES[(i / 2) % SPECIAL_HALVES.len()]
            } else {
                rng.half(false)
            };
            bytes.extend_from_slice(&d.to_le_bytes());
        }
        for _ in 0..format.block_len() / 8 {
            bytes.extend_from_slice(&rng.next_u64().to_le_bytes());
        }
        if format == Format::Q8_K {
            let sums = crate::bsums_of(&bytes[start..]);
            bytes.extend_from_slice(&sums);
        }
    }
    Activations::from_bytes(bytes, format, blocks * format.block_len(), batch).expect("activations")
}

/// `batch` random activation vectors through ggml's quantiser for
/// `format` (Q8_K or Q8_0).
pub fn random_activations(format: Format, blocks: usize, batch: usize, seed: u64) -> Activations {
    let mut rng = Rng::new(seed);
    let cols = blocks * format.block_len();
    let x: Vec<f32> = (0..cols * batch).map(|_| rng.f32()).collect();
    crate::quantize_activations(&x, format, cols, batch).expect("activations")
}
