//! The cases a twin of `f32.gemm` is judged on, and the micro-race bench.
//!
//! Bodies read every extent from their arguments, so cases need not share
//! the offer's geometry; they sweep what breaks tiled code:
//!
//! - each of `m`, `n`, `k` over 1..=17, 31, 33, 63, 65, 127, 129, 255,
//!   257, 1000 with the other two ragged (`k` past 256 crosses the arms'
//!   `k` blocks), `k = 0`, and a few shapes where all three are ragged;
//! - row strides above the row (`lda = k + 3`, `ldb = n + 5`, `ldc = n +
//!   1`) and starts off alignment (A, B and C begin 1–3 floats into
//!   their buffers);
//! - `(α, β)` in `(1, 0)`, `(1, 1)`, `(0.5, -2.25)`, `(-3, 0)`; when
//!   `β = 0`, C starts as NaN, which must not leak;
//! - special values sown into A and B (NaN, ±∞, ±0, subnormals, values
//!   whose products overflow), B transposed at plan time for packing arms;
//! - sub-rectangles (member views along `m` and along `n`, empty ones).
//!
//! The output is the whole C buffer, guards and gaps between rows
//! included, so a store outside the rectangle is a mismatch too.

use weft_kernel::{Bench, Kernel, Offer, PlacedCode, Refusal, Workbench};
use weft_validate::{f32_special_values, Element, Outputs, SplitMix64, Validation, CANARY_F32};

use crate::pack::PackedB;
use crate::{dims, Axis, BLayout, BRef, GemmArgs, MatRef, ARGS_NAME};

/// One case: operands in their own buffers (with offsets), the scale
/// factors, and the rectangle to compute.
#[derive(Clone, Debug)]
pub struct GemmCase {
    /// `m`, `n`, `k`.
    pub shape: (usize, usize, usize),
    /// A's buffer, its start offset and row stride.
    pub a: (Vec<f32>, usize, usize),
    /// B's buffer, start offset and row stride (`k × n` rows).
    pub b: (Vec<f32>, usize, usize),
    /// B packed (for packing arms), from the same values.
    pub packed: Option<PackedB>,
    /// C's initial buffer, start offset and row stride.
    pub c: (Vec<f32>, usize, usize),
    /// `(α, β)`.
    pub scale: (f32, f32),
    /// Rows computed.
    pub rows: std::ops::Range<usize>,
    /// Columns computed.
    pub cols: std::ops::Range<usize>,
    /// The split axis the arguments carry.
    pub axis: Axis,
}

/// The ragged extents every dimension is swept over.
pub const RAGGED: [usize; 23] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 31, 33, 63, 65, 127, 129,
];

/// Extents past the ragged list (k crosses the k blocks; one large m, n).
pub const LARGE: [usize; 4] = [255, 257, 1000, 1000];

struct Gen {
    rng: SplitMix64,
    specials: Vec<u32>,
}

impl Gen {
    fn value(&mut self) -> f32 {
        // Exact small multiples of 1/64 half the time (sums that cancel
        // and tie), wide random values the other half.
        if self.rng.next_u32() & 1 == 0 {
            (self.rng.below(513) as f32 - 256.0) / 64.0
        } else {
            let u = self.rng.unit_f64() * 2.0 - 1.0;
            (u * 8.0f64.powf(self.rng.unit_f64() * 4.0 - 2.0)) as f32
        }
    }

    fn buffer(
        &mut self,
        offset: usize,
        rows: usize,
        cols: usize,
        ld: usize,
        special: bool,
    ) -> Vec<f32> {
        let len = offset + if rows == 0 { 0 } else { (rows - 1) * ld + cols } + 3;
        let mut v: Vec<f32> = (0..len).map(|_| self.value()).collect();
        if special && len > 0 {
            for _ in 0..(len / 16).max(2) {
                let at = self.rng.below(len as u64) as usize;
                let s = self.specials[self.rng.below(self.specials.len() as u64) as usize];
                v[at] = f32::from_bits(s);
            }
        }
        v
    }
}

/// Build one case of `m × n × k` with the given strides' slack, offsets,
/// scale and rectangle.
#[allow(clippy::too_many_arguments)]
fn case(
    g: &mut Gen,
    (m, n, k): (usize, usize, usize),
    slack: usize,
    scale: (f32, f32),
    rect: Option<(std::ops::Range<usize>, std::ops::Range<usize>, Axis)>,
    special: bool,
    packed: Option<BLayout>,
) -> GemmCase {
    let off = |i: usize| if slack == 0 { 0 } else { i };
    let (lda, ldb, ldc) = (k + 3 * slack, n + 5 * slack, n + slack);
    let a = g.buffer(off(1), m, k, lda, special);
    let b = g.buffer(off(3), k, n, ldb, special);
    let mut c = g.buffer(off(1), m, n, ldc, false);
    if scale.1 == 0.0 {
        c.iter_mut().for_each(|x| *x = f32::NAN);
    }
    let packed = packed.map(|layout| {
        let bm = MatRef {
            data: &b[off(3)..],
            rows: k,
            cols: n,
            ld: ldb,
        };
        match layout {
            BLayout::Rows => PackedB::pack(bm, BLayout::Rows).expect("checked extents"),
            BLayout::Transposed => {
                // B given n × k, as a GGUF weight matrix is.
                let t: Vec<f32> = (0..n)
                    .flat_map(|j| (0..k).map(move |kk| (j, kk)))
                    .map(|(j, kk)| bm.data[kk * ldb + j])
                    .collect();
                PackedB::pack(MatRef::dense(&t, n, k), BLayout::Transposed)
                    .expect("checked extents")
            }
        }
    });
    let (rows, cols, axis) = rect.unwrap_or((0..m, 0..n, Axis::M));
    GemmCase {
        shape: (m, n, k),
        a: (a, off(1), lda),
        b: (b, off(3), ldb),
        packed,
        c: (c, off(1), ldc),
        scale,
        rows,
        cols,
        axis,
    }
}

const SCALES: [(f32, f32); 4] = [(1.0, 0.0), (1.0, 1.0), (0.5, -2.25), (-3.0, 0.0)];

/// The cases, deterministic in `seed`; `packs` says whether the arm reads
/// B packed (then the cases carry panels, half of them packed from an
/// `n × k` B).
pub fn cases(seed: u64, packs: bool) -> Vec<GemmCase> {
    let mut g = Gen {
        rng: SplitMix64::new(seed),
        specials: f32_special_values(),
    };
    let mut out = Vec::new();
    let mut idx = 0usize;
    let mut push = |g: &mut Gen, shape, rect, special| {
        let scale = SCALES[idx % SCALES.len()];
        let slack = idx % 2;
        let packed = packs.then_some(if idx.is_multiple_of(3) {
            BLayout::Transposed
        } else {
            BLayout::Rows
        });
        out.push(case(g, shape, slack, scale, rect, special, packed));
        idx += 1;
    };
    for &v in RAGGED.iter().chain(&LARGE[..3]) {
        push(&mut g, (v, 37, 19), None, v % 5 == 0);
        push(&mut g, (13, v, 23), None, v % 5 == 1);
        push(&mut g, (7, 35, v), None, v % 5 == 2);
    }
    for shape in [
        (65, 129, 257),
        (33, 63, 300),
        (129, 17, 255),
        (1, 1000, 33),
        (8, 200, 64),
        (17, 31, 1000),
        (3, 5, 0),
    ] {
        push(&mut g, shape, None, false);
        push(&mut g, shape, None, true);
    }
    // Member views along m and n, single rows and columns, empty ones.
    for rect in [
        (3..10, 0..40, Axis::M),
        (24..48, 0..40, Axis::M),
        (0..30, 5..29, Axis::N),
        (0..30, 32..40, Axis::N),
        (29..30, 0..40, Axis::M),
        (0..30, 39..40, Axis::N),
        (7..7, 0..40, Axis::M),
        (0..30, 16..16, Axis::N),
    ] {
        push(&mut g, (50, 40, 21), Some(rect), true);
    }
    out
}

/// Validation of `f32.gemm` twins against their arm.
pub struct GemmValidation;

fn packs(offer: &Offer) -> bool {
    offer.packed.iter().any(|p| p.name == "b")
}

impl GemmCase {
    /// A as a matrix.
    pub fn a(&self) -> MatRef<'_> {
        let (m, _, k) = self.shape;
        MatRef {
            data: &self.a.0[self.a.1..],
            rows: m,
            cols: k,
            ld: self.a.2,
        }
    }

    /// B as a body reads it: the panels when the case packs, else rows.
    pub fn b(&self) -> BRef<'_> {
        let (_, n, k) = self.shape;
        match &self.packed {
            Some(p) => BRef::Panels(p),
            None => BRef::Rows(MatRef {
                data: &self.b.0[self.b.1..],
                rows: k,
                cols: n,
                ld: self.b.2,
            }),
        }
    }

    /// The arguments of this case over `c` (a copy of its C buffer).
    pub fn args(&self, c: &mut [f32]) -> Result<GemmArgs, Refusal> {
        GemmArgs::new(
            self.a(),
            self.b(),
            &mut c[self.c.1..],
            self.c.2,
            self.scale,
            self.rows.clone(),
            self.cols.clone(),
            self.axis,
        )
    }
}

// SAFETY: `Args` is the `#[repr(C)]` struct of contracts naming ARGS_NAME,
// and `run` calls a kernel only with arguments built by `GemmArgs::new`,
// which checks every extent against buffers that outlive the call.
unsafe impl Validation for GemmValidation {
    type Args = GemmArgs;
    type Case = GemmCase;

    fn args_name(&self) -> &str {
        ARGS_NAME
    }

    fn generator(&self) -> String {
        "f32.gemm cases v1".to_owned()
    }

    fn cases(&self, offer: &Offer, seed: u64) -> Vec<GemmCase> {
        cases(seed, packs(offer))
    }

    fn run(&self, kernel: &Kernel<GemmArgs>, case: &GemmCase) -> Result<Outputs, Refusal> {
        let mut c = case.c.0.clone();
        c.extend(std::iter::repeat_n(f32::from_bits(CANARY_F32), 16));
        let args = case.args(&mut c)?;
        // SAFETY: `GemmArgs::new` checked the extents against `case` and
        // `c`, which outlive the call.
        unsafe { kernel.call(&args) };
        let mut out = Outputs::from_f32(c);
        out.element = Element::F32;
        Ok(out)
    }

    fn describe_input(&self, case: &GemmCase, index: usize) -> String {
        let (m, n, k) = case.shape;
        let e = index.wrapping_sub(case.c.1);
        format!(
            "m {m} n {n} k {k} lda {} ldb {} ldc {} α,β {:?} rows {:?} cols {:?}{}: C[{}, {}]",
            case.a.2,
            case.b.2,
            case.c.2,
            case.scale,
            case.rows,
            case.cols,
            if case.packed.is_some() { " packed" } else { "" },
            e / case.c.2,
            e % case.c.2
        )
    }
}

/// Runs a body on random operands at its offer's geometry (B the offer's
/// own packed panels when it packs), for the planner's micro-race.
#[derive(Clone, Copy, Debug, Default)]
pub struct GemmBench;

struct Prepared {
    case: GemmCase,
    c: Vec<f32>,
}

impl Workbench for GemmBench {
    fn prepare(&self, offer: &Offer, seed: u64) -> Result<Box<dyn Bench>, Refusal> {
        if offer.contract.args != ARGS_NAME {
            return Err(Refusal::BadOperand {
                operand: "args".to_owned(),
                reason: format!(
                    "the gemm bench runs {ARGS_NAME}, not {}",
                    offer.contract.args
                ),
            });
        }
        let (m, n, k, _) = dims(&offer.contract.geometry)?;
        let (m, n, k) = (m as usize, n as usize, k as usize);
        let mut g = Gen {
            rng: SplitMix64::new(seed),
            specials: Vec::new(),
        };
        let mut case = case(&mut g, (m, n, k), 0, (1.0, 0.0), None, false, None);
        if let Some(op) = offer.packed.iter().find(|p| p.name == "b") {
            case.packed = Some(PackedB::from_operand(op, k, n)?);
        }
        let c = case.c.0.clone();
        Ok(Box::new(Prepared { case, c }))
    }
}

impl Bench for Prepared {
    unsafe fn run(&mut self, code: &std::sync::Arc<PlacedCode>) -> Result<(), Refusal> {
        // SAFETY: the caller promises `code` is a body built for a gemm
        // offer, which honours the leaf ABI for `GemmArgs`.
        let kernel = unsafe { Kernel::<GemmArgs>::from_placed(code.clone(), 0)? };
        let args = self.case.args(&mut self.c)?;
        // SAFETY: `new` checked the extents against buffers owned by `self`.
        unsafe { kernel.call(&args) };
        Ok(())
    }
}
