//! Tensor conversions: to f32, and to Q8_0 on many threads.
//!
//! Every output block depends on one input block only, so the work is cut
//! into chunks of blocks that threads take from a shared queue, and the
//! result is the same bytes for any number of threads.

use crate::block::{f16, q4_1, q8_0, Format};
use crate::{GgufError, Tensor, TensorType};
use std::sync::Mutex;

/// The target name used in [`GgufError::UnsupportedConversion`] for Q8_0.
pub const Q8_0_NAME: &str = "Q8_0";

/// Q8_0 blocks per unit of work: 128 KiB of output, small enough to
/// balance two to a few dozen threads over the 135M model's tensors.
const CHUNK_BLOCKS: usize = 4096;

#[derive(Clone, Copy)]
enum Source {
    Q8_0,
    Q4_1,
    F32,
    F16,
}

impl Source {
    fn of(t: &Tensor<'_>) -> Result<Self, GgufError> {
        Ok(match t.tensor_type() {
            TensorType::Q8_0 => Source::Q8_0,
            TensorType::Q4_1 => Source::Q4_1,
            TensorType::F32 => Source::F32,
            TensorType::F16 => Source::F16,
            from => {
                return Err(GgufError::UnsupportedConversion {
                    name: t.name().into(),
                    from,
                    to: Q8_0_NAME,
                })
            }
        })
    }

    /// Source bytes per Q8_0 block of output.
    fn bytes_per_block(self) -> usize {
        match self {
            Source::Q8_0 => q8_0::BLOCK_BYTES,
            Source::Q4_1 => q4_1::BLOCK_BYTES,
            Source::F32 => 4 * q8_0::BLOCK_LEN,
            Source::F16 => 2 * q8_0::BLOCK_LEN,
        }
    }
}

struct Job<'s, 'd> {
    source: Source,
    src: &'s [u8],
    dst: &'d mut [u8],
}

impl Job<'_, '_> {
    fn run(self) {
        let step = self.source.bytes_per_block();
        let blocks = self
            .src
            .chunks_exact(step)
            .zip(self.dst.chunks_exact_mut(q8_0::BLOCK_BYTES));
        match self.source {
            Source::Q8_0 => self.dst.copy_from_slice(self.src),
            Source::Q4_1 => {
                for (s, d) in blocks {
                    let s: &[u8; q4_1::BLOCK_BYTES] = s.try_into().expect("exact chunk");
                    d.copy_from_slice(&q4_1::requantize_block(s));
                }
            }
            Source::F32 | Source::F16 => {
                let mut x = [0.0f32; q8_0::BLOCK_LEN];
                for (s, d) in blocks {
                    let widened = match self.source {
                        Source::F32 => f16::f32_from_le_into(s, &mut x),
                        _ => f16::f16_to_f32_into(s, &mut x),
                    };
                    debug_assert!(widened.is_ok(), "chunks are whole blocks");
                    d.copy_from_slice(&q8_0::quantize_block(&x).to_bytes());
                }
            }
        }
    }
}

/// Convert many tensors to Q8_0 bytes on `threads` threads (0: as many as
/// the host has). Returns one byte vector per tensor, in order.
///
/// Accepts Q8_0 (copied), Q4_1 (re-quantised as llama.cpp's
/// `llama-quantize --allow-requantize` does), F32 and F16 (quantised with
/// `quantize_row_q8_0_ref`); the row length must be a multiple of 32.
/// Anything else is [`GgufError::UnsupportedConversion`], reported before
/// any work starts.
pub fn to_q8_0_many(tensors: &[Tensor<'_>], threads: usize) -> Result<Vec<Vec<u8>>, GgufError> {
    let mut outputs: Vec<Vec<u8>> = q8_0_lens(tensors)?
        .into_iter()
        .map(|len| vec![0u8; len])
        .collect();
    let mut outs: Vec<&mut [u8]> = outputs.iter_mut().map(Vec::as_mut_slice).collect();
    to_q8_0_into(tensors, &mut outs, threads)?;
    Ok(outputs)
}

/// The Q8_0 bytes each tensor converts to, in order, or the error
/// [`to_q8_0_many`] would report before any work.
pub fn q8_0_lens(tensors: &[Tensor<'_>]) -> Result<Vec<usize>, GgufError> {
    Ok(plan(tensors)?
        .into_iter()
        .map(|(_, blocks)| blocks * q8_0::BLOCK_BYTES)
        .collect())
}

/// [`to_q8_0_many`] into the caller's memory: tensor `i`'s Q8_0 bytes into
/// `outs[i]`, which must hold exactly [`q8_0_lens`]`[i]` bytes
/// ([`GgufError::DestinationCount`] or [`GgufError::BadDestination`]
/// otherwise, before any work). A loader
/// converts straight into the arena its kernels read.
pub fn to_q8_0_into(
    tensors: &[Tensor<'_>],
    outs: &mut [&mut [u8]],
    threads: usize,
) -> Result<(), GgufError> {
    let plan = plan(tensors)?;
    if outs.len() != tensors.len() {
        return Err(GgufError::DestinationCount {
            tensors: tensors.len(),
            destinations: outs.len(),
        });
    }
    for ((t, &(_, blocks)), out) in tensors.iter().zip(&plan).zip(outs.iter()) {
        if out.len() != blocks * q8_0::BLOCK_BYTES {
            return Err(GgufError::BadDestination {
                name: t.name().into(),
                expected: blocks * q8_0::BLOCK_BYTES,
                got: out.len(),
            });
        }
    }
    let mut jobs = Vec::new();
    for ((t, &(source, _)), out) in tensors.iter().zip(&plan).zip(outs.iter_mut()) {
        let step = source.bytes_per_block();
        for (src, dst) in t
            .bytes()
            .chunks(CHUNK_BLOCKS * step)
            .zip(out.chunks_mut(CHUNK_BLOCKS * q8_0::BLOCK_BYTES))
        {
            jobs.push(Job { source, src, dst });
        }
    }
    run_jobs(jobs, threads);
    Ok(())
}

/// Each tensor's source format and block count, or the first tensor that
/// cannot be converted.
fn plan(tensors: &[Tensor<'_>]) -> Result<Vec<(Source, usize)>, GgufError> {
    let mut plan = Vec::with_capacity(tensors.len());
    for t in tensors {
        let source = Source::of(t)?;
        if t.info().row_len() % q8_0::BLOCK_LEN as u64 != 0 {
            return Err(GgufError::RaggedRow {
                name: t.name().into(),
                ty: TensorType::Q8_0,
                row_len: t.info().row_len(),
                block_len: q8_0::BLOCK_LEN as u64,
            });
        }
        // The tensor's bytes are in memory, so its block count fits usize.
        let blocks = t.bytes().len() / source.bytes_per_block();
        plan.push((source, blocks));
    }
    Ok(plan)
}

fn run_jobs(jobs: Vec<Job<'_, '_>>, threads: usize) {
    let threads = match threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .min(jobs.len().max(1));
    if threads <= 1 {
        jobs.into_iter().for_each(Job::run);
        return;
    }
    let queue = Mutex::new(jobs.into_iter());
    let next = || queue.lock().unwrap_or_else(|p| p.into_inner()).next();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while let Some(job) = next() {
                    job.run();
                }
            });
        }
    });
}

/// The block format a tensor type decodes with, if Weft reads it.
pub(crate) fn format_of(ty: TensorType) -> Option<Format> {
    Some(match ty {
        TensorType::F32 => Format::F32,
        TensorType::F16 => Format::F16,
        TensorType::BF16 => Format::BF16,
        TensorType::Q4_0 => Format::Q4_0,
        TensorType::Q4_1 => Format::Q4_1,
        TensorType::Q5_0 => Format::Q5_0,
        TensorType::Q5_1 => Format::Q5_1,
        TensorType::Q8_0 => Format::Q8_0,
        TensorType::Q2_K => Format::Q2_K,
        TensorType::Q3_K => Format::Q3_K,
        TensorType::Q4_K => Format::Q4_K,
        TensorType::Q5_K => Format::Q5_K,
        TensorType::Q6_K => Format::Q6_K,
        TensorType::Q8_K => Format::Q8_K,
        _ => return None,
    })
}

/// All values of a tensor as f32.
pub(crate) fn to_f32(t: &Tensor<'_>) -> Result<Vec<f32>, GgufError> {
    let Some(format) = format_of(t.tensor_type()) else {
        return Err(GgufError::UnsupportedConversion {
            name: t.name().into(),
            from: t.tensor_type(),
            to: "F32",
        });
    };
    let mut out = vec![0.0f32; t.n_elements() as usize];
    // Parsing sized the bytes from the element count in whole blocks, so a
    // length error here would be a reader bug, not bad input.
    let decoded = format.dequantize(t.bytes(), &mut out);
    debug_assert!(decoded.is_ok(), "tensor {}: {decoded:?}", t.name());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgufWriter;

    #[test]
    fn every_readable_type_has_ggmls_block_geometry_and_name() {
        let mut readable = 0;
        for &ty in TensorType::ALL {
            if let Some(f) = format_of(ty) {
                assert_eq!(f.block_len() as u64, ty.block_len(), "{ty}");
                assert_eq!(f.block_bytes() as u64, ty.block_bytes(), "{ty}");
                assert!(f.name().eq_ignore_ascii_case(ty.name()), "{ty}");
                readable += 1;
            }
        }
        assert_eq!(readable, Format::ALL.len());
    }

    #[test]
    fn a_k_quant_tensor_reads_as_f32_and_an_unreadable_type_is_named() {
        // One Q4_K super-block: d = 1, dmin = 0, sub-block scales 1, quants
        // counting 0..16, so the values are 0..16 repeating.
        let mut block = vec![0u8; 144];
        block[..2].copy_from_slice(&0x3c00u16.to_le_bytes());
        for j in 0..4 {
            block[4 + j] = 1; // scales 0..4 = 1, mins 0
            block[12 + j] = 1; // scales 4..8 = 1 (low nibble), mins 0
        }
        for (l, q) in block[16..].iter_mut().enumerate() {
            *q = (l % 16) as u8 | (((l + 1) % 16) as u8) << 4;
        }
        let mut w = GgufWriter::new();
        w.tensor("w", &[256], TensorType::Q4_K, &block);
        w.tensor("iq", &[256], TensorType::IQ2_XXS, &[0u8; 66]);
        let g = crate::Gguf::from_bytes(w.to_bytes()).expect("valid file");
        let v = g
            .tensor("w")
            .expect("present")
            .to_f32()
            .expect("Q4_K reads");
        assert_eq!(&v[..3], &[0.0, 1.0, 2.0]);
        assert_eq!(v[32], 1.0, "high nibbles follow the 32 low ones");
        let err = g.tensor("iq").expect("present").to_f32().unwrap_err();
        assert!(err.to_string().contains("IQ2_XXS"), "{err}");
    }
}
