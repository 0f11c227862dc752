//! Validation of `q8_0.quantize` twins against their arm: blocks built to
//! find differences and how one case runs.
//!
//! Every case quantises `batch` vectors (every batch `1..=8`, several
//! `cols`) whose blocks mix the special inputs of the contract — ±0,
//! subnormals, ±inf, quiet and signalling NaNs with payloads in every
//! position (the last one makes `amax` NaN), values whose `x · id` lands
//! exactly on a half (and one ulp either side), `amax` ties between signs,
//! `amax` at the binary16 overflow and underflow boundaries of `d` (and a
//! few ulps around them), `1/d` overflowing — with random bit patterns and
//! random normal values. The input starts 0–3 f32s past a 64-byte
//! boundary and the output 0–7 bytes past one, the block range is
//! sometimes a member view inside the whole, and the output buffer carries
//! guard bytes on both sides that must come back untouched: the outputs
//! compared are every byte of that buffer.

use weft_kernel::{Kernel, Offer, Refusal};
use weft_validate::{align_up_elements, Element, Outputs, SplitMix64, Validation};

use super::super::BLOCK_BYTES;
use super::super::BLOCK_LEN;
use super::{Q8QuantizeArgs, ARGS_NAME};

/// Guard bytes on each side of the output (a multiple of 64, so the
/// output's misalignment is exactly its offset).
pub const GUARD: usize = 64;
/// The guard bytes' value.
pub const CANARY: u8 = 0xa5;

/// `d` values at the binary16 boundaries: largest finite, the overflow
/// tie, the smallest normal, the smallest subnormal and the underflow tie.
const D_BOUNDARIES: [f32; 7] = [
    65504.0,
    65520.0,
    6.103_515_6e-5, // 2^-14
    6.097_555_e-5,  // largest binary16 subnormal, 1023 · 2^-24
    5.960_464_5e-8, // 2^-24
    2.980_232_2e-8, // 2^-25, the tie below the smallest subnormal
    8.940_697e-8,   // 1.5 · 2^-24, a subnormal tie
];

/// One case: the input (with its leading padding), where the output
/// starts in its buffer, the geometry and the blocks computed.
#[derive(Clone, Debug)]
pub struct Case {
    /// Padding, then `batch · cols` values.
    pub x: Vec<f32>,
    /// f32s of padding before the input: it starts `x_offset mod 16`
    /// f32s past a 64-byte boundary.
    pub x_offset: usize,
    /// Bytes between the guard and the output (misalignment).
    pub out_offset: usize,
    /// Values per vector.
    pub cols: usize,
    /// Vectors.
    pub batch: usize,
    /// The flat blocks computed.
    pub blocks: std::ops::Range<usize>,
}

impl Case {
    /// The input values.
    pub fn input(&self) -> &[f32] {
        &self.x[self.x_offset..]
    }

    /// Total flat blocks.
    pub fn total_blocks(&self) -> usize {
        self.cols / BLOCK_LEN * self.batch
    }
}

/// Builds blocks of 32 values.
struct Blocks {
    rng: SplitMix64,
}

impl Blocks {
    fn bits(&mut self) -> f32 {
        f32::from_bits(self.rng.next_u32())
    }

    /// A random normal value of moderate magnitude, either sign.
    fn normal(&mut self) -> f32 {
        let e = (self.rng.below(40) as i32) - 20;
        let m = 1.0 + self.rng.unit_f64() as f32;
        let v = m * 2f32.powi(e);
        if self.rng.below(2) == 0 {
            v
        } else {
            -v
        }
    }

    fn special(&mut self) -> f32 {
        const S: [u32; 14] = [
            0x0000_0000,
            0x8000_0000,
            0x0000_0001,
            0x8000_0001,
            0x007f_ffff,
            0x0040_0000,
            0x7f80_0000,
            0xff80_0000,
            0x7fc0_0000,
            0xffc0_0000,
            0x7f80_0001, // signalling, low payload
            0x7fa0_1234, // signalling, high payload
            0xffc1_2345, // quiet, negative, payload
            0x7f7f_ffff,
        ];
        f32::from_bits(S[self.rng.below(S.len() as u64) as usize])
    }

    /// Block kind `kind` (cycled through by the cases).
    fn block(&mut self, kind: usize) -> [f32; BLOCK_LEN] {
        let mut b = [0f32; BLOCK_LEN];
        let pos = self.rng.below(BLOCK_LEN as u64) as usize;
        match kind % 12 {
            0 => b.iter_mut().for_each(|v| *v = self.normal()),
            1 => b.iter_mut().for_each(|v| *v = self.bits()),
            // Specials sprinkled into normal values.
            2 => {
                b.iter_mut().for_each(|v| *v = self.normal());
                for _ in 0..1 + self.rng.below(4) {
                    let i = self.rng.below(BLOCK_LEN as u64) as usize;
                    b[i] = self.special();
                }
            }
            // A NaN last (amax NaN), or NaN at `pos` with larger values
            // before it than after (the fold forgets them).
            3 => {
                b.iter_mut().for_each(|v| *v = self.normal());
                b[BLOCK_LEN - 1] = f32::from_bits(0x7fc0_0000 | self.rng.next_u32() & 0x803f_ffff);
            }
            4 => {
                for (i, v) in b.iter_mut().enumerate() {
                    *v = if i < pos { 1e6 } else { self.normal() };
                }
                b[pos] = f32::from_bits(0x7f80_0000 | (self.rng.next_u32() & 0x807f_ffff) | 1);
            }
            // Exact ties: amax = 127 · 2^k so d = 2^k and id = 2^-k; the
            // other values are (m + 1/2) · 2^k and their neighbours.
            5 => {
                let k = (self.rng.below(60) as i32) - 40;
                let d = 2f32.powi(k);
                b[0] = if self.rng.below(2) == 0 {
                    127.0 * d
                } else {
                    -127.0 * d
                };
                for v in b.iter_mut().skip(1) {
                    let m = self.rng.below(127) as f32 + 0.5;
                    let t = if self.rng.below(2) == 0 { m } else { -m } * d;
                    *v = match self.rng.below(3) {
                        0 => t,
                        1 => f32::from_bits(t.to_bits() + 1),
                        _ => f32::from_bits(t.to_bits() - 1),
                    };
                }
            }
            // amax ties between signs and positions.
            6 => {
                let a = self.normal().abs();
                for v in b.iter_mut() {
                    *v = match self.rng.below(3) {
                        0 => a,
                        1 => -a,
                        _ => self.normal() * 1e-3,
                    };
                }
            }
            // amax = 127 · d near a binary16 boundary of d, a few ulps off.
            7 => {
                let d = D_BOUNDARIES[self.rng.below(D_BOUNDARIES.len() as u64) as usize];
                let amax = d * 127.0;
                let step = self.rng.below(7) as i32 - 3;
                let amax = f32::from_bits((amax.to_bits() as i32 + step) as u32);
                b.iter_mut().for_each(|v| *v = self.normal() * amax * 1e-2);
                b[pos] = if self.rng.below(2) == 0 { amax } else { -amax };
            }
            // Subnormals only (1/d overflows for the smallest), or zeros.
            8 => b.iter_mut().for_each(|v| {
                let bits = self.rng.next_u32() & 0x807f_ffff;
                *v = f32::from_bits(if self.rng.below(5) == 0 {
                    bits & 0x8000_0000
                } else {
                    bits
                });
            }),
            9 => {
                let neg = self.rng.below(2) == 0;
                b.iter_mut().for_each(|v| *v = if neg { -0.0 } else { 0.0 });
                if self.rng.below(2) == 0 {
                    b[pos] = -0.0;
                }
            }
            // Infinities among normal values, sometimes with a NaN after.
            10 => {
                b.iter_mut().for_each(|v| *v = self.normal());
                b[pos] = if self.rng.below(2) == 0 {
                    f32::INFINITY
                } else {
                    f32::NEG_INFINITY
                };
                if self.rng.below(3) == 0 {
                    let j = self.rng.below(BLOCK_LEN as u64) as usize;
                    b[j] = f32::NAN;
                }
            }
            // Huge values (d overflows binary16, x · id near ±127).
            _ => b.iter_mut().for_each(|v| {
                let m = f32::MAX * (0.5 + 0.5 * self.rng.unit_f64() as f32);
                *v = if self.rng.below(2) == 0 { m } else { -m };
            }),
        }
        b
    }
}

/// Validation of `q8_0.quantize` twins.
pub struct QuantizeValidation;

/// The `(cols, batch)` of the cases: every batch `1..=8` at a few widths,
/// and the model widths 576 and 4096 at small batches.
pub fn geometries() -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    for batch in 1..=8 {
        for cols in [32usize, 96, 160] {
            v.push((cols, batch));
        }
    }
    v.extend([(576, 1), (576, 4), (4096, 1), (4096, 2)]);
    v
}

// SAFETY: `Args` is the `#[repr(C)]` struct of contracts naming ARGS_NAME,
// and `run` calls a kernel only with args from `Q8QuantizeArgs::new`,
// which checks every extent against slices that live across the call.
unsafe impl Validation for QuantizeValidation {
    type Args = Q8QuantizeArgs;
    type Case = Case;

    fn args_name(&self) -> &str {
        ARGS_NAME
    }

    fn generator(&self) -> String {
        "q8_0.quantize cases v1".to_owned()
    }

    fn cases(&self, _offer: &Offer, seed: u64) -> Vec<Case> {
        let mut gen = Blocks {
            rng: SplitMix64::new(seed),
        };
        let mut out = Vec::new();
        let mut kind = 0usize;
        for (i, (cols, batch)) in geometries().into_iter().enumerate() {
            let total = cols / BLOCK_LEN * batch;
            // The buffer never grows past its capacity, so the alignment
            // measured here is the one the kernels see.
            let mut x = Vec::with_capacity(16 + 4 + total * BLOCK_LEN);
            let x_offset = align_up_elements(x.as_ptr(), 64) + i % 4;
            x.resize(x_offset, f32::NAN);
            for _ in 0..total {
                x.extend(gen.block(kind));
                kind += 1;
            }
            // Every third case computes a member view inside the whole.
            let blocks = if i % 3 == 2 && total > 2 {
                1..total - 1
            } else {
                0..total
            };
            out.push(Case {
                x,
                x_offset,
                out_offset: i % 8,
                cols,
                batch,
                blocks,
            });
        }
        out
    }

    fn run(&self, kernel: &Kernel<Q8QuantizeArgs>, case: &Case) -> Result<Outputs, Refusal> {
        let len = case.total_blocks() * BLOCK_BYTES;
        let mut buf = vec![CANARY; 64 + GUARD + case.out_offset + len + GUARD];
        // The compared window starts on a 64-byte boundary.
        let base = align_up_elements(buf.as_ptr(), 64);
        let window = base..base + GUARD + case.out_offset + len + GUARD;
        let start = base + GUARD + case.out_offset;
        let args = Q8QuantizeArgs::new(
            case.input(),
            &mut buf[start..start + len],
            case.cols,
            case.batch,
            case.blocks.clone(),
        )?;
        // SAFETY: `Q8QuantizeArgs::new` checked the extents against the
        // input and the output slice, which outlive the call.
        unsafe { kernel.call(&args) };
        Ok(Outputs {
            element: Element::Int,
            bits: buf[window].iter().map(|b| u64::from(*b)).collect(),
        })
    }

    fn describe_input(&self, case: &Case, index: usize) -> String {
        let start = GUARD + case.out_offset;
        let end = start + case.total_blocks() * BLOCK_BYTES;
        if index < start || index >= end {
            return format!("guard byte {index} (output is bytes {start}..{end})");
        }
        let k = (index - start) / BLOCK_BYTES;
        let byte = (index - start) % BLOCK_BYTES;
        let values = &case.input()[k * BLOCK_LEN..(k + 1) * BLOCK_LEN];
        let bits: Vec<String> = values
            .iter()
            .map(|v| format!("{:08x}", v.to_bits()))
            .collect();
        format!(
            "cols {} batch {} blocks {:?}: block {k} byte {byte}, inputs [{}]",
            case.cols,
            case.batch,
            case.blocks,
            bits.join(" ")
        )
    }
}

/// The family's [`Workbench`](weft_kernel::Workbench): random normal
/// inputs at an offer's geometry (no NaN, so every body runs the path it
/// runs on a model's activations).
#[derive(Clone, Copy, Debug, Default)]
pub struct QuantizeBench;

/// Prepared inputs of [`QuantizeBench`].
struct Prepared {
    x: Vec<f32>,
    out: Vec<u8>,
    cols: usize,
    batch: usize,
}

impl weft_kernel::Workbench for QuantizeBench {
    fn prepare(&self, offer: &Offer, seed: u64) -> Result<Box<dyn weft_kernel::Bench>, Refusal> {
        if offer.contract.args != ARGS_NAME {
            return Err(Refusal::BadOperand {
                operand: "args".to_owned(),
                reason: format!(
                    "QuantizeBench runs {ARGS_NAME}, not {}",
                    offer.contract.args
                ),
            });
        }
        let (cols, batch, blocks) = super::dims(&offer.contract.geometry)?;
        let mut gen = Blocks {
            rng: SplitMix64::new(seed),
        };
        let x = (0..blocks * BLOCK_LEN as u64)
            .map(|_| gen.normal())
            .collect();
        Ok(Box::new(Prepared {
            x,
            out: vec![0; blocks as usize * BLOCK_BYTES],
            cols: cols as usize,
            batch: batch as usize,
        }))
    }
}

impl weft_kernel::Bench for Prepared {
    unsafe fn run(
        &mut self,
        code: &std::sync::Arc<weft_kernel::PlacedCode>,
    ) -> Result<(), Refusal> {
        // SAFETY: the caller promises `code` is a q8_0.quantize body, which
        // honours the leaf ABI for `Q8QuantizeArgs`.
        let kernel = unsafe { Kernel::<Q8QuantizeArgs>::from_placed(code.clone(), 0)? };
        let blocks = self.out.len() / BLOCK_BYTES;
        let args = Q8QuantizeArgs::new(&self.x, &mut self.out, self.cols, self.batch, 0..blocks)?;
        // SAFETY: `new` checked the extents against buffers owned by `self`,
        // which outlive the call.
        unsafe { kernel.call(&args) };
        Ok(())
    }
}
