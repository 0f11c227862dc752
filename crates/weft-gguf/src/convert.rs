//! Tensor conversions: to f32, and to Q8_0 on many threads.
//!
//! Every output block depends on one input block only, so the work is cut
//! into chunks of blocks that threads take from a shared queue, and the
//! result is the same bytes for any number of threads.

use crate::block::{f16, q4_1, q8_0};
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

/// All values of a tensor as f32.
pub(crate) fn to_f32(t: &Tensor<'_>) -> Result<Vec<f32>, GgufError> {
    let n = t.n_elements() as usize;
    let mut out = vec![0.0f32; n];
    let bytes = t.bytes();
    let ok = match t.tensor_type() {
        TensorType::F32 => f16::f32_from_le_into(bytes, &mut out).is_ok(),
        TensorType::F16 => f16::f16_to_f32_into(bytes, &mut out).is_ok(),
        TensorType::Q8_0 => {
            for (s, d) in bytes
                .chunks_exact(q8_0::BLOCK_BYTES)
                .zip(out.chunks_exact_mut(q8_0::BLOCK_LEN))
            {
                let s: &[u8; q8_0::BLOCK_BYTES] = s.try_into().expect("exact chunk");
                d.copy_from_slice(&q8_0::BlockQ8_0::from_bytes(s).dequantize());
            }
            true
        }
        TensorType::Q4_1 => {
            for (s, d) in bytes
                .chunks_exact(q4_1::BLOCK_BYTES)
                .zip(out.chunks_exact_mut(q4_1::BLOCK_LEN))
            {
                let s: &[u8; q4_1::BLOCK_BYTES] = s.try_into().expect("exact chunk");
                d.copy_from_slice(&q4_1::BlockQ4_1::from_bytes(s).dequantize());
            }
            true
        }
        from => {
            return Err(GgufError::UnsupportedConversion {
                name: t.name().into(),
                from,
                to: "F32",
            })
        }
    };
    // Parsing sized the bytes from the element count; a mismatch here
    // would be a reader bug, not bad input.
    debug_assert!(ok, "tensor {} bytes match its element count", t.name());
    Ok(out)
}
