//! Large read-only byte arenas on transparent huge pages, and cheap shared
//! views into them.
//!
//! A decode step streams every weight byte once, so the weights' pages
//! matter as much as their bytes: with 4 KiB pages a token's 143 MB cross
//! 35,000 pages, each a TLB miss, and in a virtual machine each miss is a
//! two-level page walk. Measured on an Intel Xeon KVM guest (family 6
//! model 167): a 512-bit read loop over 143 MB ran at 12.0 GB/s on 4 KiB
//! pages (12.8 with software prefetch 16 KiB ahead) and at 15.5 GB/s on
//! 2 MiB pages. So every large operand a kernel streams lives in an
//! [`Arena`]: one anonymous mapping, started on a 2 MiB boundary and
//! advised `MADV_HUGEPAGE` on Linux (where transparent huge pages are
//! often `madvise`-only), filled once, then sealed read-only.
//!
//! Invariants:
//!
//! - An arena is written only while it is being built ([`ArenaBuilder`]);
//!   [`ArenaBuilder::seal`] makes the mapping read-only, and every
//!   [`Bytes`] view reads the sealed bytes for as long as it lives (views
//!   share the mapping by reference count).
//! - Every [`ArenaBuilder::push`] starts at a multiple of [`ALIGN`] bytes
//!   from the mapping's start, which is page aligned.
//! - Huge pages are a request, not a promise: where the OS declines
//!   (another OS, THP `never`, no free huge pages) the arena is ordinary
//!   memory with the same contents. [`Arena::huge_pages_advised`] says
//!   whether the request was made and accepted.
//! - A [`PageBuf`] is the writable sibling for state a kernel streams
//!   and writes (a KV cache): zeroed, typed through bytemuck's checked
//!   casts, never sealed.
//! - No `unsafe`: memmap2's safe anonymous maps and advice, bytemuck's
//!   checked casts.
//!
//! ```
//! let mut b = weft_arena::ArenaBuilder::new(3 * 4096);
//! let a = b.push(&[1, 2, 3]);
//! let c = b.push_with(5, |s| s.copy_from_slice(b"hello"));
//! let arena = b.seal().unwrap();
//! assert_eq!(&*arena.view(a), &[1, 2, 3]);
//! assert_eq!(&*arena.view(c), b"hello");
//! ```

use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;

use memmap2::{Mmap, MmapMut};

/// Alignment of every pushed range: a cache line, and a whole 512-bit
/// vector.
pub const ALIGN: usize = 64;

/// Bytes of a transparent huge page on x86-64 and 4 KiB-granule arm64.
pub const HUGE_PAGE: usize = 2 << 20;

/// An arena could not be mapped.
#[derive(Debug)]
pub struct ArenaError {
    /// Bytes asked for.
    pub bytes: usize,
    /// What the OS said.
    pub source: std::io::Error,
}

impl fmt::Display for ArenaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot map {} bytes: {}", self.bytes, self.source)
    }
}

impl std::error::Error for ArenaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Ranges of an arena under construction.
pub struct ArenaBuilder {
    map: Result<MmapMut, ArenaError>,
    /// Offset of the arena's first byte in `map` (the first 2 MiB boundary).
    base: usize,
    /// Bytes used, from `base`.
    used: usize,
    /// Bytes reserved for pushes, from `base`.
    capacity: usize,
    huge: bool,
}

impl ArenaBuilder {
    /// An arena for pushes totalling at most `capacity` bytes, each
    /// rounded up to [`ALIGN`]. A failed mapping is reported by
    /// [`ArenaBuilder::seal`], and pushes before it go nowhere.
    pub fn new(capacity: usize) -> ArenaBuilder {
        let capacity = capacity.max(1);
        let (map, base, huge) = match place(capacity) {
            Ok(p) => (Ok(p.map), p.base, p.huge),
            Err(e) => (Err(e), 0, false),
        };
        ArenaBuilder {
            map,
            base,
            used: 0,
            capacity,
            huge,
        }
    }

    /// Room for `len` more bytes, as a range of the arena.
    fn reserve(&mut self, len: usize) -> Range<usize> {
        let start = self.used.next_multiple_of(ALIGN);
        let end = start + len;
        assert!(
            end <= self.capacity,
            "arena overflow: {end} bytes pushed into an arena of {}",
            self.capacity
        );
        self.used = end;
        start..end
    }

    /// Appends a copy of `bytes`; the view of it, once sealed, is
    /// [`Arena::view`] of the returned range.
    ///
    /// # Panics
    ///
    /// When the pushes exceed the capacity given to [`ArenaBuilder::new`]
    /// (a caller's arithmetic error, not an input's).
    pub fn push(&mut self, bytes: &[u8]) -> Range<usize> {
        self.push_with(bytes.len(), |s| s.copy_from_slice(bytes))
    }

    /// Appends `len` bytes written by `fill` (they start zeroed).
    ///
    /// # Panics
    ///
    /// As [`ArenaBuilder::push`].
    pub fn push_with(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> Range<usize> {
        let r = self.reserve(len);
        if let Ok(m) = &mut self.map {
            fill(&mut m[self.base + r.start..self.base + r.end]);
        }
        r
    }

    /// Appends one piece per length of `lens` (each at [`ALIGN`], zeroed)
    /// and hands `fill` all of them at once, mutable and disjoint, in
    /// order: many pieces written in parallel, straight into the arena.
    /// Returns their ranges, or `fill`'s error. When the mapping failed,
    /// `fill` is not called ([`ArenaBuilder::seal`] reports it).
    ///
    /// # Panics
    ///
    /// As [`ArenaBuilder::push`].
    pub fn push_many_with<E>(
        &mut self,
        lens: &[usize],
        fill: impl FnOnce(&mut [&mut [u8]]) -> Result<(), E>,
    ) -> Result<Vec<Range<usize>>, E> {
        let ranges: Vec<Range<usize>> = lens.iter().map(|&len| self.reserve(len)).collect();
        if let Ok(m) = &mut self.map {
            let mut rest = &mut m[self.base..];
            let mut at = 0;
            let mut pieces = Vec::with_capacity(ranges.len());
            for r in &ranges {
                let (_, tail) = std::mem::take(&mut rest).split_at_mut(r.start - at);
                let (piece, tail) = tail.split_at_mut(r.len());
                pieces.push(piece);
                rest = tail;
                at = r.end;
            }
            fill(&mut pieces)?;
        }
        Ok(ranges)
    }

    /// Seals the arena read-only.
    pub fn seal(self) -> Result<Arena, ArenaError> {
        let len = self.map.as_ref().map(|m| m.len()).unwrap_or(0);
        let map = self
            .map?
            .make_read_only()
            .map_err(|source| ArenaError { bytes: len, source })?;
        Ok(Arena {
            map: Arc::new(map),
            base: self.base,
            len: self.used,
            huge: self.huge,
        })
    }
}

/// A fresh anonymous map that `bytes` bytes from `base` on fit in.
struct Placed {
    map: MmapMut,
    base: usize,
    /// Whether the OS accepted `MADV_HUGEPAGE`.
    huge: bool,
}

/// Maps room for `bytes` (at least 1). Less than a huge page cannot hold
/// one: it is mapped as it is. More gets a huge page extra, so that it
/// starts on a 2 MiB boundary and every whole 2 MiB of it can be backed by
/// one huge page, and is advised huge.
fn place(bytes: usize) -> Result<Placed, ArenaError> {
    let small = bytes < HUGE_PAGE;
    let len = if small {
        bytes
    } else {
        bytes.saturating_add(HUGE_PAGE)
    };
    let map = MmapMut::map_anon(len).map_err(|source| ArenaError { bytes: len, source })?;
    if small {
        return Ok(Placed {
            map,
            base: 0,
            huge: false,
        });
    }
    let base = (HUGE_PAGE - map.as_ptr() as usize % HUGE_PAGE) % HUGE_PAGE;
    // A refusal leaves ordinary pages: same contents, slower walks.
    let huge = advise_huge(&map);
    Ok(Placed { map, base, huge })
}

#[cfg(target_os = "linux")]
fn advise_huge(m: &MmapMut) -> bool {
    m.advise(memmap2::Advice::HugePage).is_ok()
}

#[cfg(not(target_os = "linux"))]
fn advise_huge(_: &MmapMut) -> bool {
    false
}

/// A sealed, read-only arena.
#[derive(Clone)]
pub struct Arena {
    map: Arc<Mmap>,
    base: usize,
    len: usize,
    huge: bool,
}

impl fmt::Debug for Arena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Arena({} bytes{})",
            self.len,
            if self.huge {
                ", huge pages advised"
            } else {
                ""
            }
        )
    }
}

impl Arena {
    /// A shared view of `range` (a range [`ArenaBuilder::push`] returned,
    /// or any sub-range of the arena).
    ///
    /// # Panics
    ///
    /// When `range` is not within the arena.
    pub fn view(&self, range: Range<usize>) -> Bytes {
        assert!(
            range.start <= range.end && range.end <= self.len,
            "view {range:?} of an arena of {} bytes",
            self.len
        );
        Bytes {
            map: Some(self.map.clone()),
            start: self.base + range.start,
            len: range.end - range.start,
        }
    }

    /// Bytes pushed.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the OS accepted the request for huge pages (it may still
    /// back some ranges with small ones).
    pub fn huge_pages_advised(&self) -> bool {
        self.huge
    }
}

/// A read-only view into an [`Arena`]: cheap to clone, dereferences to
/// its bytes.
#[derive(Clone)]
pub struct Bytes {
    /// `None` for the empty view.
    map: Option<Arc<Mmap>>,
    start: usize,
    len: usize,
}

impl Bytes {
    /// Bytes in one arena of their own: a convenience for small or
    /// synthetic operands.
    pub fn copy_from(bytes: &[u8]) -> Result<Bytes, ArenaError> {
        let mut b = ArenaBuilder::new(bytes.len());
        let r = b.push(bytes);
        Ok(b.seal()?.view(r))
    }

    /// The empty view.
    pub fn empty() -> Bytes {
        Bytes {
            map: None,
            start: 0,
            len: 0,
        }
    }
}

impl Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.map {
            Some(m) => &m[self.start..self.start + self.len],
            None => &[],
        }
    }
}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bytes({} bytes)", self.len)
    }
}

impl PartialEq for Bytes {
    fn eq(&self, other: &Bytes) -> bool {
        **self == **other
    }
}

impl Eq for Bytes {}

/// A zeroed, writable buffer of `len` values of `T` on huge pages (where
/// the OS grants them): state a kernel streams and writes, as a KV cache.
pub struct PageBuf<T> {
    map: Option<MmapMut>,
    base: usize,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: bytemuck::Pod> PageBuf<T> {
    /// `len` zeros (an anonymous map reads as zeros, and zero bits are a
    /// value of every `Pod` type this crate is used with: integers and
    /// floats).
    pub fn zeroed(len: usize) -> Result<PageBuf<T>, ArenaError> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| ArenaError {
                bytes: usize::MAX,
                source: std::io::Error::other("length overflows the address space"),
            })?;
        if bytes == 0 {
            return Ok(PageBuf {
                map: None,
                base: 0,
                len: 0,
                _t: std::marker::PhantomData,
            });
        }
        let p = place(bytes)?;
        Ok(PageBuf {
            map: Some(p.map),
            base: p.base,
            len: bytes,
            _t: std::marker::PhantomData,
        })
    }
}

impl<T: bytemuck::Pod> Deref for PageBuf<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match &self.map {
            // Page aligned plus a multiple of 2 MiB: aligned for any `T`.
            Some(m) => bytemuck::cast_slice(&m[self.base..self.base + self.len]),
            None => &[],
        }
    }
}

impl<T: bytemuck::Pod> std::ops::DerefMut for PageBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.map {
            Some(m) => bytemuck::cast_slice_mut(&mut m[self.base..self.base + self.len]),
            None => &mut [],
        }
    }
}

impl<T> fmt::Debug for PageBuf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PageBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_push_reads_back_its_bytes_at_an_aligned_offset() {
        let parts: Vec<Vec<u8>> = (0..20usize)
            .map(|n| (0..n * 37 + 1).map(|i| (i * 7 + n) as u8).collect())
            .collect();
        let total: usize = parts.iter().map(|p| p.len().next_multiple_of(ALIGN)).sum();
        let mut b = ArenaBuilder::new(total);
        let ranges: Vec<_> = parts.iter().map(|p| b.push(p)).collect();
        let arena = b.seal().unwrap();
        for (p, r) in parts.iter().zip(&ranges) {
            assert_eq!(r.start % ALIGN, 0);
            let v = arena.view(r.clone());
            assert_eq!(&*v, &p[..]);
            assert_eq!(
                v.as_ptr() as usize % ALIGN,
                0,
                "views start on a cache line"
            );
        }
    }

    #[test]
    fn pieces_filled_at_once_read_back_after_a_push_and_are_aligned() {
        let lens = [1usize, 130, 0, 64, 7];
        let total: usize = ALIGN
            + lens
                .iter()
                .map(|l| l.next_multiple_of(ALIGN))
                .sum::<usize>();
        let mut b = ArenaBuilder::new(total);
        let first = b.push(&[5; 8]);
        let ranges = b
            .push_many_with(&lens, |pieces| {
                assert_eq!(pieces.len(), lens.len());
                for (i, p) in pieces.iter_mut().enumerate() {
                    assert_eq!(p.len(), lens[i]);
                    assert!(p.iter().all(|&x| x == 0), "pieces start zeroed");
                    p.fill(i as u8 + 1);
                }
                Ok::<(), ()>(())
            })
            .unwrap();
        let arena = b.seal().unwrap();
        assert_eq!(&*arena.view(first), &[5; 8]);
        for (i, r) in ranges.into_iter().enumerate() {
            assert_eq!(r.start % ALIGN, 0);
            assert_eq!(r.len(), lens[i]);
            assert!(arena.view(r).iter().all(|&x| x == i as u8 + 1));
        }
    }

    #[test]
    fn a_failing_fill_returns_its_error() {
        let mut b = ArenaBuilder::new(128);
        let e = b.push_many_with(&[10, 20], |_| Err("no"));
        assert_eq!(e, Err("no"));
    }

    #[test]
    fn views_outlive_the_arena_handle_they_came_from() {
        let v = {
            let mut b = ArenaBuilder::new(4);
            let r = b.push(&[9, 8, 7, 6]);
            b.seal().unwrap().view(r)
        };
        assert_eq!(&*v, &[9, 8, 7, 6]);
        assert_eq!(v.clone(), v);
    }

    #[test]
    fn a_large_arena_starts_on_a_huge_page_boundary() {
        let mut b = ArenaBuilder::new(3 * HUGE_PAGE);
        let r = b.push_with(3 * HUGE_PAGE, |s| s.fill(1));
        let a = b.seal().unwrap();
        let v = a.view(r);
        assert_eq!(v.as_ptr() as usize % HUGE_PAGE, 0);
        assert!(v.iter().all(|&x| x == 1));
    }

    #[test]
    #[should_panic(expected = "arena overflow")]
    fn pushing_past_the_capacity_is_a_caller_error() {
        let mut b = ArenaBuilder::new(64);
        b.push(&[0; 64]);
        b.push(&[0; 1]);
    }

    #[test]
    fn a_page_buffer_starts_zeroed_and_keeps_what_is_written() {
        for len in [0, 1, 1000, HUGE_PAGE / 4 + 3] {
            let mut b = PageBuf::<f32>::zeroed(len).unwrap();
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&v| v.to_bits() == 0));
            for (i, v) in b.iter_mut().enumerate() {
                *v = i as f32;
            }
            assert!(b.iter().enumerate().all(|(i, &v)| v == i as f32));
        }
        assert!(PageBuf::<u16>::zeroed(usize::MAX).is_err());
    }

    #[test]
    fn empty_and_copied_views_read_what_they_hold() {
        assert!(Bytes::empty().is_empty());
        assert_eq!(&*Bytes::copy_from(b"weft").unwrap(), b"weft");
        assert_eq!(&*Bytes::copy_from(b"").unwrap(), b"");
    }
}
