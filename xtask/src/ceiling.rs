//! The streaming-read ceiling: the one yardstick every bandwidth figure of
//! the benches is a fraction of (`bench q8-matvec`, `bench attention`'s
//! decode, `bench decode`).
//!
//! No single read loop is the fastest on every host: one is limited by the
//! hardware prefetchers' reach, another by the load ports, a third by the
//! caches it pollutes. So the ceiling is not one loop but the **best of
//! several**, each run as its own candidate in the bench's interleaved
//! rounds over the same bytes as the kernels it bounds:
//!
//! - the widest loads the host has (`zmm` with AVX-512F, else `ymm`), four
//!   independent accumulators, 256 bytes per iteration, no prefetch; with
//!   AVX-512 also the same at `ymm` width (Zen 4 splits `zmm` loads);
//! - the same with a software prefetch (`prefetcht0`) of every line
//!   [`PREFETCH_DISTANCES`] bytes ahead;
//! - the same with a non-temporal prefetch (`prefetchnta`) at
//!   [`NTA_DISTANCE`] bytes ahead;
//!
//! each at 1 and 2 threads (two contiguous halves on the bench's executor).
//! The ceiling at `t` threads is the smallest median among the loops run
//! at **at most** `t` threads (a 2-thread kernel could leave a thread
//! idle), and [`Ceiling`] names the loop that set it. A kernel measured
//! above 1.00 of its ceiling means the ceiling is wrong (a read loop that
//! is not the best this host can do): the benches flag it.
//!
//! Every loop returns the same wrapping sum of the bytes as little-endian
//! u64 words (plus the tail bytes), so none can be optimised away and a
//! test proves they all read every byte.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use weft_plan::Executor;

/// Software-prefetch distances tried, in bytes ahead of the load.
pub const PREFETCH_DISTANCES: [usize; 3] = [1024, 4096, 16384];
/// The non-temporal prefetch's distance, in bytes ahead of the load.
pub const NTA_DISTANCE: usize = 4096;

/// Load width of a read loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Width {
    /// Portable u64 words (hosts without AVX2).
    Words,
    /// 32-byte `ymm` loads (AVX2).
    Ymm,
    /// 64-byte `zmm` loads (AVX-512F).
    Zmm,
}

/// Prefetch of a read loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prefetch {
    None,
    /// `prefetcht0` this many bytes ahead.
    T0(usize),
    /// `prefetchnta` this many bytes ahead.
    Nta(usize),
}

/// One read loop: how it loads and what it prefetches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadLoop {
    name: String,
    width: Width,
    prefetch: Prefetch,
}

impl ReadLoop {
    fn new(width: Width, prefetch: Prefetch) -> ReadLoop {
        let w = match width {
            Width::Words => "u64",
            Width::Ymm => "ymm",
            Width::Zmm => "zmm",
        };
        let name = match prefetch {
            Prefetch::None => format!("read-{w}"),
            Prefetch::T0(d) => format!("read-{w}-t0-{}K", d / 1024),
            Prefetch::Nta(d) => format!("read-{w}-nta-{}K", d / 1024),
        };
        ReadLoop {
            name,
            width,
            prefetch,
        }
    }

    /// The loop's name as the tables print it (`read-ymm-t0-4K`: `ymm`
    /// loads, `prefetcht0` 4 KiB ahead).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Read every byte of `bytes` on this thread; the wrapping sum of its
    /// little-endian u64 words and tail bytes.
    pub fn read(&self, bytes: &[u8]) -> u64 {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_MM_HINT_NTA, _MM_HINT_T0};
            let (hint_nta, d) = match self.prefetch {
                Prefetch::None => (false, 0),
                Prefetch::T0(d) => (false, d),
                Prefetch::Nta(d) => (true, d),
            };
            // `loops()` builds a Ymm or Zmm loop only when the host has AVX2
            // or AVX-512F.
            match (self.width, hint_nta) {
                // SAFETY: Zmm loops exist only on AVX-512F hosts (above).
                (Width::Zmm, false) => return unsafe { read_zmm::<_MM_HINT_T0>(bytes, d) },
                // SAFETY: as above.
                (Width::Zmm, true) => return unsafe { read_zmm::<_MM_HINT_NTA>(bytes, d) },
                // SAFETY: Ymm loops exist only on AVX2 hosts (above).
                (Width::Ymm, false) => return unsafe { read_ymm::<_MM_HINT_T0>(bytes, d) },
                // SAFETY: as above.
                (Width::Ymm, true) => return unsafe { read_ymm::<_MM_HINT_NTA>(bytes, d) },
                (Width::Words, _) => {}
            }
        }
        read_words(bytes)
    }

    /// Read every byte of `bytes` in `parts` contiguous pieces (64-byte
    /// aligned boundaries) shared among `exec`'s threads; the same sum as
    /// [`ReadLoop::read`].
    pub fn read_parts(&self, exec: &Executor, bytes: &[u8], parts: usize) -> u64 {
        let n = parts.max(1);
        if n == 1 {
            return self.read(bytes);
        }
        let piece = bytes.len().div_ceil(n).next_multiple_of(64).max(64);
        let sums: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
        exec.for_each_part(n, &|i| {
            let lo = (i * piece).min(bytes.len());
            let hi = ((i + 1) * piece).min(bytes.len());
            sums[i].store(self.read(black_box(&bytes[lo..hi])), Ordering::Relaxed);
        });
        sums.iter()
            .fold(0u64, |a, v| a.wrapping_add(v.load(Ordering::Relaxed)))
    }
}

/// The read loops this host runs (see the module doc).
pub fn loops() -> Vec<ReadLoop> {
    let mut widths = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            widths.push(Width::Zmm);
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            widths.push(Width::Ymm);
        }
    }
    if widths.is_empty() {
        widths.push(Width::Words);
    }
    let widest = widths[0];
    let mut v: Vec<ReadLoop> = widths
        .iter()
        .map(|&w| ReadLoop::new(w, Prefetch::None))
        .collect();
    if widest != Width::Words {
        for d in PREFETCH_DISTANCES {
            v.push(ReadLoop::new(widest, Prefetch::T0(d)));
        }
        v.push(ReadLoop::new(widest, Prefetch::Nta(NTA_DISTANCE)));
    }
    v
}

/// `len` bytes for the read loops that no pass can skip: a xorshift
/// stream, so no page is the shared zero page. They live in a
/// [`weft_arena`] arena, on huge pages as the model's weights do: the
/// ceiling is read from the best memory a kernel can be given (on 4 KiB
/// pages the same loops read about a fifth slower on the KVM guests
/// measured, which would put the weights' reads above their ceiling).
pub fn buffer(len: usize) -> weft_arena::Bytes {
    let mut b = weft_arena::ArenaBuilder::new(len);
    let r = b.push_with(len, |s| {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for chunk in s.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
        }
    });
    b.seal()
        .unwrap_or_else(|e| panic!("the read loops' buffer: {e}"))
        .view(r)
}

/// One measured read: which loop, at how many threads, its median seconds
/// (per call, per token: whatever unit the bench uses for its kernels).
#[derive(Clone, Debug, PartialEq)]
pub struct Read {
    pub name: String,
    pub threads: u64,
    pub secs: f64,
}

/// The ceiling at one thread count: the fastest read at most that many
/// threads, and which loop it was.
#[derive(Clone, Debug, PartialEq)]
pub struct Ceiling {
    pub name: String,
    pub threads: u64,
    pub secs: f64,
}

impl Ceiling {
    /// The ceiling for kernels run on `threads` threads, from the reads
    /// measured in the same rounds; `None` without any.
    pub fn best<'a>(reads: impl IntoIterator<Item = &'a Read>, threads: u64) -> Option<Ceiling> {
        reads
            .into_iter()
            .filter(|r| r.threads <= threads)
            .min_by(|a, b| a.secs.total_cmp(&b.secs))
            .map(|r| Ceiling {
                name: r.name.clone(),
                threads: r.threads,
                secs: r.secs,
            })
    }

    /// What a kernel taking `secs` for the same bytes reaches of the
    /// ceiling (ceiling time / kernel time; 1.00 is the ceiling).
    pub fn fraction(&self, secs: f64) -> f64 {
        self.secs / secs
    }

    /// `read-ymm-t0-4K/2t`: the winner, for tables and summary lines.
    pub fn label(&self) -> String {
        format!("{}/{}t", self.name, self.threads)
    }
}

/// A fraction for a summary line; marked when it is above the ceiling,
/// which is a defect of the ceiling, not a result.
pub fn fmt_fraction(f: Option<f64>) -> String {
    match f {
        None => "absent".to_owned(),
        Some(f) if f > 1.0 => format!("{f:.2}(above-ceiling)"),
        Some(f) => format!("{f:.2}"),
    }
}

/// The portable read: u64 words into eight accumulators.
fn read_words(bytes: &[u8]) -> u64 {
    let (words, tail) = bytes.as_chunks::<8>();
    let (octets, rest) = words.as_chunks::<8>();
    let mut acc = [0u64; 8];
    for o in octets {
        for (a, w) in acc.iter_mut().zip(o) {
            *a = a.wrapping_add(u64::from_le_bytes(*w));
        }
    }
    for (a, w) in acc.iter_mut().zip(rest) {
        *a = a.wrapping_add(u64::from_le_bytes(*w));
    }
    let t = tail.iter().fold(0u64, |s, &b| s.wrapping_add(u64::from(b)));
    acc.iter().fold(t, |s, &a| s.wrapping_add(a))
}

/// AVX-512: four 64-byte loads per 256-byte block into four accumulators;
/// with `distance > 0`, each line is prefetched (hint `HINT`) that many
/// bytes ahead. The rest through [`read_words`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn read_zmm<const HINT: i32>(bytes: &[u8], distance: usize) -> u64 {
    use std::arch::x86_64::*;
    let (blocks, rest) = bytes.as_chunks::<256>();
    let mut acc = [_mm512_setzero_si512(); 4];
    for b in blocks {
        let p = b.as_ptr();
        if distance > 0 {
            for k in 0..4 {
                // A prefetch never faults; `wrapping_add` keeps the address
                // arithmetic defined past the end of the slice.
                _mm_prefetch::<HINT>(p.wrapping_add(distance + 64 * k).cast());
            }
        }
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: `b` is 256 bytes, so bytes 64k..64k+64 are in it; the
            // load has no alignment requirement.
            let v = unsafe { _mm512_loadu_si512(p.add(64 * k).cast()) };
            *a = _mm512_add_epi64(*a, v);
        }
    }
    let sum = _mm512_add_epi64(
        _mm512_add_epi64(acc[0], acc[1]),
        _mm512_add_epi64(acc[2], acc[3]),
    );
    (_mm512_reduce_add_epi64(sum) as u64).wrapping_add(read_words(rest))
}

/// AVX2: eight 32-byte loads per 256-byte block into four accumulators;
/// prefetch as [`read_zmm`]. The rest through [`read_words`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn read_ymm<const HINT: i32>(bytes: &[u8], distance: usize) -> u64 {
    use std::arch::x86_64::*;
    let (blocks, rest) = bytes.as_chunks::<256>();
    let mut acc = [_mm256_setzero_si256(); 4];
    for b in blocks {
        let p = b.as_ptr();
        if distance > 0 {
            for k in 0..4 {
                // A prefetch never faults; `wrapping_add` keeps the address
                // arithmetic defined past the end of the slice.
                _mm_prefetch::<HINT>(p.wrapping_add(distance + 64 * k).cast());
            }
        }
        for k in 0..8 {
            // SAFETY: `b` is 256 bytes, so bytes 32k..32k+32 are in it; the
            // load has no alignment requirement.
            let v = unsafe { _mm256_loadu_si256(p.add(32 * k).cast()) };
            acc[k % 4] = _mm256_add_epi64(acc[k % 4], v);
        }
    }
    let s = _mm256_add_epi64(
        _mm256_add_epi64(acc[0], acc[1]),
        _mm256_add_epi64(acc[2], acc[3]),
    );
    let mut lanes = [0u64; 4];
    // SAFETY: `lanes` is 32 bytes; unaligned store.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), s) };
    lanes
        .iter()
        .fold(read_words(rest), |a, &l| a.wrapping_add(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 131 + 7) as u8).collect()
    }

    fn reference(b: &[u8]) -> u64 {
        let (words, tail) = b.as_chunks::<8>();
        words
            .iter()
            .map(|w| u64::from_le_bytes(*w))
            .chain(tail.iter().map(|&t| u64::from(t)))
            .fold(0u64, u64::wrapping_add)
    }

    #[test]
    fn every_read_loop_reads_every_byte_at_every_length_and_offset() {
        let data = bytes(4096 + 300);
        let exec = Executor::new(2);
        for l in loops() {
            for len in [0, 1, 7, 8, 255, 256, 257, 1000, 4096] {
                for start in [0, 1, 5] {
                    let b = &data[start..start + len];
                    assert_eq!(l.read(b), reference(b), "{} len {len}+{start}", l.name());
                    for parts in [1, 2, 3] {
                        assert_eq!(
                            l.read_parts(&exec, b, parts),
                            reference(b),
                            "{} in {parts} parts, len {len}+{start}",
                            l.name()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_host_runs_a_plain_loop_three_prefetch_distances_and_a_non_temporal_one() {
        let v = loops();
        let names: Vec<&str> = v.iter().map(ReadLoop::name).collect();
        if names[0] == "read-u64" {
            assert_eq!(names, ["read-u64"]);
            return;
        }
        assert_eq!(v.iter().filter(|l| l.prefetch == Prefetch::None).count(), {
            if names.contains(&"read-zmm") {
                2
            } else {
                1
            }
        });
        let t0: Vec<_> = v
            .iter()
            .filter_map(|l| match l.prefetch {
                Prefetch::T0(d) => Some(d),
                _ => None,
            })
            .collect();
        assert_eq!(t0, PREFETCH_DISTANCES);
        assert!(names.iter().any(|n| n.contains("-nta-")), "{names:?}");
    }

    #[test]
    fn the_ceiling_at_two_threads_may_be_a_one_thread_read_but_not_the_reverse() {
        let reads = [
            Read {
                name: "a".into(),
                threads: 1,
                secs: 2.0,
            },
            Read {
                name: "b".into(),
                threads: 2,
                secs: 3.0,
            },
            Read {
                name: "c".into(),
                threads: 2,
                secs: 1.0,
            },
        ];
        let one = Ceiling::best(&reads, 1).expect("one");
        assert_eq!((one.name.as_str(), one.secs), ("a", 2.0));
        let two = Ceiling::best(&reads, 2).expect("two");
        assert_eq!((two.name.as_str(), two.threads), ("c", 2));
        assert_eq!(two.fraction(2.0), 0.5);
        assert!(Ceiling::best(&reads[..0], 2).is_none());
        let slow_two = Ceiling::best(&reads[..2], 2).expect("slow");
        assert_eq!(
            slow_two.name, "a",
            "a faster 1-thread read bounds 2 threads"
        );
        assert_eq!(fmt_fraction(Some(1.2)), "1.20(above-ceiling)");
        assert_eq!(fmt_fraction(Some(0.5)), "0.50");
    }
}
