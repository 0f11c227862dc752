//! A ready-made [`Validation`] for elementwise `f32 -> f32` functions:
//! `out[i] = f(in[i])` for any length and alignment.

use std::fmt;
use std::marker::PhantomData;

use weft_kernel::{Kernel, Offer, Refusal};

use crate::inputs::{
    align_up_elements, f32_neighbours, f32_special_values, f32_subnormals, SplitMix64, CANARY_F32,
    GUARD_ELEMENTS,
};
use crate::{Outputs, Validation};

/// Which inputs an `f32 -> f32` function is validated on.
///
/// The pool of values is: [`f32_special_values`], every boundary with its
/// neighbours `±1..=neighbour_ulps`, `subnormals` random subnormals,
/// `per_range` uniform samples of each range, and `random_bits` random bit
/// patterns. The cases are the whole pool at every start offset
/// `0..=max_offset` elements from a 64-byte boundary, then every length
/// `0..=2 * vector_lanes` at every start offset, each a window of the pool.
#[derive(Clone, Debug, PartialEq)]
pub struct UnaryF32Inputs {
    /// The twin's vector width in `f32` lanes (16 for zmm); decides the
    /// tail lengths tried.
    pub vector_lanes: usize,
    /// Range-reduction and special-case boundaries of the function.
    pub boundaries: Vec<f32>,
    /// How many representable values either side of each boundary.
    pub neighbour_ulps: u32,
    /// Intervals `[lo, hi]` where the function is interesting, sampled uniformly.
    pub ranges: Vec<(f32, f32)>,
    /// Samples per range.
    pub per_range: usize,
    /// Random subnormals.
    pub subnormals: usize,
    /// Random bit patterns (any class).
    pub random_bits: usize,
    /// The largest start offset, in elements, from a 64-byte boundary.
    pub max_offset: usize,
}

impl UnaryF32Inputs {
    /// Defaults for a twin `vector_lanes` wide: 3 ulps around boundaries,
    /// 256 subnormals, 4096 random bit patterns, 4096 samples per range,
    /// offsets 0 to 3; no boundaries or ranges yet.
    pub fn new(vector_lanes: usize) -> Self {
        Self {
            vector_lanes,
            boundaries: Vec::new(),
            neighbour_ulps: 3,
            ranges: Vec::new(),
            per_range: 4096,
            subnormals: 256,
            random_bits: 4096,
            max_offset: 3,
        }
    }

    /// These inputs with `boundaries` added.
    pub fn with_boundaries(mut self, boundaries: &[f32]) -> Self {
        self.boundaries.extend_from_slice(boundaries);
        self
    }

    /// These inputs with the range `[lo, hi]` added.
    pub fn with_range(mut self, lo: f32, hi: f32) -> Self {
        self.ranges.push((lo, hi));
        self
    }

    /// The pool of input values, as bits, deterministic in `seed`.
    pub fn values(&self, seed: u64) -> Vec<u32> {
        let mut rng = SplitMix64::new(seed);
        let mut pool = f32_special_values();
        pool.extend(f32_neighbours(&self.boundaries, self.neighbour_ulps));
        pool.extend(f32_subnormals(&mut rng, self.subnormals));
        for &(lo, hi) in &self.ranges {
            let (lo, hi) = (f64::from(lo.min(hi)), f64::from(lo.max(hi)));
            if !(lo.is_finite() && hi.is_finite()) {
                continue;
            }
            for _ in 0..self.per_range {
                let v = (lo + (hi - lo) * rng.unit_f64()) as f32;
                pool.push(v.clamp(lo as f32, hi as f32).to_bits());
            }
        }
        pool.extend((0..self.random_bits).map(|_| rng.next_u32()));
        pool
    }

    /// The cases, deterministic in `seed`.
    pub fn cases(&self, seed: u64) -> Vec<UnaryCase> {
        let pool = self.values(seed);
        let mut cases = Vec::new();
        for offset in 0..=self.max_offset {
            cases.push(UnaryCase {
                input: pool.clone(),
                offset,
                kind: CaseKind::Pool,
            });
        }
        let mut rng = SplitMix64::new(seed ^ 0x7a11_7a11_7a11_7a11);
        for len in 0..=2 * self.vector_lanes {
            for offset in 0..=self.max_offset {
                // Specials first, then a random window of the pool.
                let start = if offset == 0 {
                    0
                } else {
                    rng.below(pool.len().saturating_sub(len) as u64 + 1) as usize
                };
                let input = pool.iter().copied().cycle().skip(start).take(len).collect();
                cases.push(UnaryCase {
                    input,
                    offset,
                    kind: CaseKind::Tail,
                });
            }
        }
        cases
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CaseKind {
    Pool,
    Tail,
}

/// One case of a unary `f32` function: the inputs (as bits) and the start
/// offset, in elements, of both slices from a 64-byte boundary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnaryCase {
    /// The input elements, as bits.
    pub input: Vec<u32>,
    /// Start offset of the input and output slices, in elements, from a
    /// 64-byte-aligned address.
    pub offset: usize,
    kind: CaseKind,
}

impl UnaryCase {
    /// A case with these inputs at this offset.
    pub fn new(input: Vec<u32>, offset: usize) -> Self {
        Self {
            input,
            offset,
            kind: CaseKind::Tail,
        }
    }
}

impl fmt::Display for UnaryCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            CaseKind::Pool => "pool",
            CaseKind::Tail => "tail",
        };
        write!(
            f,
            "{kind} case, len {}, start +{} elements from a 64-byte boundary",
            self.input.len(),
            self.offset
        )
    }
}

/// The [`Validation`] of an elementwise `f32 -> f32` kernel whose argument
/// struct `A` is built from the input and output pointers and the length by
/// `make_args`. Its operands are called `input` and `output`; when the
/// contract lets them be equal, each case also runs in place.
///
/// [`Validation::run`] lays both slices `offset` elements past a 64-byte
/// boundary with [`GUARD_ELEMENTS`] canary words ([`CANARY_F32`]) either side
/// of the output; the output words come first, then the guard words after
/// the end, then those before the start, so an overrun is a `mismatch`
/// whose index is at or past the case's length.
pub struct UnaryF32<A, F> {
    args_name: String,
    inputs: UnaryF32Inputs,
    make_args: F,
    _args: PhantomData<fn() -> A>,
}

impl<A, F: Fn(*const f32, *mut f32, usize) -> A> UnaryF32<A, F> {
    /// A validation for kernels taking the struct `args_name`.
    ///
    /// # Safety
    ///
    /// `A` must be the `#[repr(C)]` struct contracts call `args_name`, and
    /// `make_args(input, output, len)` (two pointers valid for `len` f32s,
    /// disjoint or equal) must return an `A` that describes exactly those
    /// two runs of `len` elements, so that a kernel honouring the contract
    /// reads and writes only inside them (plus whatever `A` points to that
    /// `make_args` keeps alive, such as a table).
    pub unsafe fn new(args_name: impl Into<String>, inputs: UnaryF32Inputs, make_args: F) -> Self {
        Self {
            args_name: args_name.into(),
            inputs,
            make_args,
            _args: PhantomData,
        }
    }

    /// The inputs this validation uses.
    pub fn inputs(&self) -> &UnaryF32Inputs {
        &self.inputs
    }
}

/// An `f32` buffer with room to start a slice at any offset from a 64-byte
/// boundary, with guard words before and after.
struct Laid {
    buf: Vec<f32>,
    start: usize,
    len: usize,
}

impl Laid {
    fn new(len: usize, offset: usize, fill: impl Fn(usize) -> u32) -> Self {
        let total = GUARD_ELEMENTS + 16 + offset + len + GUARD_ELEMENTS;
        let mut buf = vec![f32::from_bits(CANARY_F32); total];
        let base = align_up_elements(buf.as_ptr().wrapping_add(GUARD_ELEMENTS), 64);
        let start = GUARD_ELEMENTS + base + offset;
        for i in 0..len {
            buf[start + i] = f32::from_bits(fill(i));
        }
        Self { buf, start, len }
    }

    fn words(&self) -> impl Iterator<Item = f32> + '_ {
        let s = self.start;
        let e = s + self.len;
        let body = &self.buf[s..e];
        let after = &self.buf[e..e + GUARD_ELEMENTS];
        let before = &self.buf[s - GUARD_ELEMENTS..s];
        body.iter().chain(after).chain(before.iter().rev()).copied()
    }
}

/// The operand pair a unary kernel may run in place.
const IN_PLACE: [(&str, &str); 1] = [("input", "output")];

// SAFETY: `UnaryF32::new`'s caller promised that `A` is the struct named
// `args_name` and that `make_args` describes exactly the two runs it is
// given; `run` and `run_aliased` hand it pointers into buffers of at least
// `len` elements that live until the call returns.
unsafe impl<A, F: Fn(*const f32, *mut f32, usize) -> A> Validation for UnaryF32<A, F> {
    type Args = A;
    type Case = UnaryCase;

    fn args_name(&self) -> &str {
        &self.args_name
    }

    fn generator(&self) -> String {
        format!("unary-f32 cases v1 {:?}", self.inputs)
    }

    fn cases(&self, _offer: &Offer, seed: u64) -> Vec<UnaryCase> {
        self.inputs.cases(seed)
    }

    fn run(&self, kernel: &Kernel<A>, case: &UnaryCase) -> Result<Outputs, Refusal> {
        let len = case.input.len();
        let input = Laid::new(len, case.offset, |i| case.input[i]);
        let mut output = Laid::new(len, case.offset, |_| CANARY_F32);
        let args = (self.make_args)(
            input.buf[input.start..].as_ptr(),
            output.buf[output.start..].as_mut_ptr(),
            len,
        );
        // SAFETY: `make_args` built `args` from two pointers with `len`
        // elements each behind them, in `input` and `output`, which live
        // across the call (the `Validation` promise).
        unsafe { kernel.call(&args) };
        drop(args);
        Ok(Outputs::from_f32(output.words()))
    }

    fn aliasable(&self) -> &[(&'static str, &'static str)] {
        &IN_PLACE
    }

    fn run_aliased(
        &self,
        kernel: &Kernel<A>,
        case: &UnaryCase,
        a: &str,
        b: &str,
    ) -> Result<Outputs, Refusal> {
        if !IN_PLACE
            .iter()
            .any(|&(x, y)| (x, y) == (a, b) || (y, x) == (a, b))
        {
            return Err(Refusal::AliasingUnvalidated {
                a: a.to_owned(),
                b: b.to_owned(),
            });
        }
        // One buffer holding the input, guarded like `run`'s output, so the
        // words compare one for one with a separate-buffer run.
        let len = case.input.len();
        let mut data = Laid::new(len, case.offset, |i| case.input[i]);
        let p = data.buf[data.start..].as_mut_ptr();
        let args = (self.make_args)(p, p, len);
        // SAFETY: as in `run`, with input and output the same `len`
        // elements of `data`, which lives across the call.
        unsafe { kernel.call(&args) };
        drop(args);
        Ok(Outputs::from_f32(data.words()))
    }

    fn describe_input(&self, case: &UnaryCase, index: usize) -> String {
        let len = case.input.len();
        if index < len {
            let bits = case.input[index];
            format!(
                "in[{index}] = {bits:#010x} ({:e}); {case}",
                f32::from_bits(bits)
            )
        } else if index < len + GUARD_ELEMENTS {
            format!(
                "guard word {} after the end of the output (a write past the end); {case}",
                index - len + 1
            )
        } else {
            format!(
                "guard word {} before the start of the output (a write before out[0]); {case}",
                index - len - GUARD_ELEMENTS + 1
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_cover_every_tail_length_and_offset() {
        let inputs = UnaryF32Inputs::new(8)
            .with_boundaries(&[88.0, -103.0])
            .with_range(-1.0, 1.0);
        let cases = inputs.cases(42);
        assert_eq!(cases.len(), 4 + 17 * 4);
        for len in 0..=16 {
            for off in 0..=3 {
                assert!(cases
                    .iter()
                    .any(|c| c.input.len() == len && c.offset == off));
            }
        }
        assert_eq!(inputs.cases(42), cases, "deterministic in the seed");
        let pool = inputs.values(42);
        assert_eq!(&pool[..21], &f32_special_values()[..]);
        assert!(pool.contains(&(88.0f32.to_bits() + 3)));
        assert!(pool.contains(&((-103.0f32).to_bits() - 3)));
        assert_eq!(pool.len(), 21 + 2 * 7 + 256 + 4096 + 4096);
    }

    #[test]
    fn laid_slices_start_where_asked_with_guards() {
        for off in 0..4 {
            let l = Laid::new(5, off, |i| i as u32);
            let p = l.buf[l.start..].as_ptr() as usize;
            assert_eq!(p % 64, off * 4);
            let words: Vec<u32> = l.words().map(f32::to_bits).collect();
            assert_eq!(words.len(), 5 + 2 * GUARD_ELEMENTS);
            assert_eq!(&words[..5], &[0, 1, 2, 3, 4]);
            assert!(words[5..].iter().all(|w| *w == CANARY_F32));
        }
    }
}
