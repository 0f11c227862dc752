//! Validation of `attention.fused` twins against their arm: the cases
//! that hunt for differences and how one case runs.
//!
//! A body is built for one head dimension and one K/V type (the offer's),
//! so the cases vary everything the arguments carry. Over the list of
//! [`specs`], every value of each axis the issue names appears: `lk` ∈
//! {1, 2, 31, 33, 512, 4096}, `lq` ∈ {1, 7, 64}, causal off and on, GQA
//! groups of 1, 2, 3, 4, 8 and 9, head-major and token-major layouts with a
//! cache capacity above `lk`, a member view that starts inside the call,
//! and data that stresses the softmax: large scores (the running maximum
//! jumps and `α` rescales by tiny factors), blocks whose scores are all
//! `-inf` (the shift rule), all-equal scores, subnormals, and inf, NaN and
//! `-0` in Q, K and V. Every pair of (`lk`, `lq`) values appears; the
//! product with causal, groups and data kinds is covered, not complete
//! (the whole list runs in about a second per body natively; under qemu
//! the three largest specs, 512×64, 4096×7 and 4096×64, are left out and
//! every value of each axis still appears). Running the list on the test suite's four head
//! dimensions × two K/V types covers those axes too.
//!
//! Library code, not a test helper: the planner validates twins through
//! [`entry`](super::entry)'s [`Checker`](weft_validate::Checker) on these
//! same cases.

use std::ops::Range;

use weft_kernel::{Kernel, KernelArgs, Offer, Refusal};
use weft_validate::{Element, Outputs, SplitMix64, Validation, CANARY_F32};

use super::{AttentionArgs, AttentionShape, KvSlice, KvType, Layout, SiteShape, ARGS_NAME};

/// What the data of a case stress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Data {
    /// Uniform in `[-1, 1)`.
    Random,
    /// Q and K up to ±8 and scale 4: scores in the hundreds; the running
    /// maximum jumps between blocks.
    Large,
    /// The first 16 keys score `-inf` (their dot products overflow), the
    /// rest are finite: the shift rule keeps them at weight 0.
    NegInf,
    /// Every key the same: all scores equal.
    Equal,
    /// Q, K and V in the subnormal range.
    Subnormal,
    /// inf, NaN, `-0` and subnormals sprinkled into Q, K and V.
    Specials,
}

/// How operands are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutKind {
    /// [`Layout::head_major`] with a cache capacity of `lk + 3`.
    HeadMajor,
    /// [`Layout::token_major`], O rows with 16 unused elements between them.
    TokenMajor,
}

/// One case's recipe.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// Keys.
    pub lk: usize,
    /// Query rows.
    pub lq: usize,
    /// Causal mask.
    pub causal: bool,
    /// Position of row 0.
    pub q_offset: usize,
    /// Query heads.
    pub heads: usize,
    /// KV heads.
    pub kv_heads: usize,
    /// Layout.
    pub layout: LayoutKind,
    /// Data.
    pub data: Data,
    /// The units computed, as a fraction `(start, end)` of all units in
    /// eighths (`(0, 8)` is every unit).
    pub units_8ths: (usize, usize),
}

/// A recipe covering every unit.
#[allow(clippy::too_many_arguments)]
pub fn spec(
    lk: usize,
    lq: usize,
    causal: bool,
    q_offset: usize,
    heads: usize,
    kv_heads: usize,
    layout: LayoutKind,
    data: Data,
) -> Spec {
    Spec {
        lk,
        lq,
        causal,
        q_offset,
        heads,
        kv_heads,
        layout,
        data,
        units_8ths: (0, 8),
    }
}

/// The case recipes (see the module docs).
pub fn specs() -> Vec<Spec> {
    use Data::*;
    use LayoutKind::*;
    let mut v = vec![
        spec(1, 1, false, 0, 1, 1, HeadMajor, Random),
        spec(1, 7, true, 0, 2, 1, TokenMajor, Random),
        spec(1, 64, false, 0, 1, 1, HeadMajor, Specials),
        spec(2, 1, true, 1, 3, 3, HeadMajor, Random),
        spec(2, 7, true, 0, 2, 1, HeadMajor, Large),
        spec(2, 64, false, 0, 1, 1, TokenMajor, Equal),
        spec(31, 1, false, 0, 1, 1, HeadMajor, NegInf),
        spec(31, 7, true, 24, 4, 2, TokenMajor, Subnormal),
        spec(31, 64, false, 0, 1, 1, TokenMajor, Random),
        spec(33, 1, true, 32, 9, 3, HeadMajor, Random),
        spec(33, 7, false, 0, 2, 2, HeadMajor, Large),
        spec(33, 64, true, 0, 2, 1, HeadMajor, Specials),
        spec(64, 64, true, 0, 1, 1, HeadMajor, Random),
        spec(512, 1, true, 511, 9, 3, TokenMajor, Large),
        spec(512, 7, true, 505, 4, 2, HeadMajor, Random),
        spec(512, 7, false, 0, 1, 1, HeadMajor, NegInf),
        spec(4096, 1, false, 0, 3, 1, HeadMajor, Random),
        // Decode tiles of 2, 4 and 8 heads on one KV head: the x64 group
        // step serves up to 4 (fewer at larger d), the rest go pair by pair.
        spec(48, 1, true, 47, 4, 2, TokenMajor, Large),
        spec(64, 1, false, 0, 8, 2, HeadMajor, Specials),
        spec(40, 1, false, 0, 8, 1, HeadMajor, NegInf),
    ];
    if cfg!(not(target_arch = "aarch64")) {
        // Cheap natively, tens of seconds under qemu; every axis value
        // still appears without them.
        v.push(spec(512, 64, false, 0, 1, 1, HeadMajor, Equal));
        v.push(spec(4096, 7, true, 4089, 2, 1, TokenMajor, Large));
    }
    // A member view that starts and ends inside the call.
    let mut part = spec(40, 64, true, 0, 2, 1, HeadMajor, Random);
    part.units_8ths = (3, 6);
    v.push(part);
    let mut part = spec(100, 1, false, 0, 9, 3, TokenMajor, Specials);
    part.units_8ths = (2, 7);
    v.push(part);
    if cfg!(not(target_arch = "aarch64")) {
        v.push(spec(4096, 64, true, 4032, 1, 1, HeadMajor, Random));
    }
    v
}

/// K/V data of one case.
#[derive(Clone, Debug, PartialEq)]
pub enum KvData {
    /// binary32.
    F32(Vec<f32>),
    /// binary16 bits.
    F16(Vec<u16>),
}

impl KvData {
    /// The data as a slice.
    pub fn slice(&self) -> KvSlice<'_> {
        match self {
            KvData::F32(v) => KvSlice::F32(v),
            KvData::F16(v) => KvSlice::F16(v),
        }
    }
}

/// One case: a shape, a layout, the operands and the units computed.
#[derive(Clone, Debug)]
pub struct Case {
    /// The recipe.
    pub spec: Spec,
    /// The shape.
    pub shape: AttentionShape,
    /// The layout.
    pub layout: Layout,
    /// Q.
    pub q: Vec<f32>,
    /// K.
    pub k: KvData,
    /// V.
    pub v: KvData,
    /// Elements of O (including gaps between rows).
    pub o_len: usize,
    /// The units computed.
    pub units: Range<usize>,
}

fn f16_bits(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

/// Special f32 values for Q, K and V.
const SPECIALS: [f32; 8] = [
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    -0.0,
    0.0,
    1.0e-40,
    -3.0e-41,
    65504.0,
];

struct Gen {
    rng: SplitMix64,
}

impl Gen {
    fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.rng.unit_f64() as f32
    }
    /// Uniform in `[-1, 1)`, or one time in 97 a special value.
    fn value_or_special(&mut self) -> f32 {
        if self.rng.below(97) == 0 {
            SPECIALS[self.rng.below(SPECIALS.len() as u64) as usize]
        } else {
            self.uniform(-1.0, 1.0)
        }
    }
}

/// Build the case of `spec` for a body of `d` and `kv`, from `seed`.
pub fn build_case(spec: &Spec, d: usize, kv: KvType, seed: u64) -> Case {
    let shape = AttentionShape {
        d,
        lq: spec.lq,
        lk: spec.lk,
        heads: spec.heads,
        kv_heads: spec.kv_heads,
        q_offset: spec.q_offset,
        causal: spec.causal,
        scale: match spec.data {
            Data::Large => 4.0,
            _ => 1.0 / (d as f32).sqrt(),
        },
        kv,
    };
    let layout = match spec.layout {
        LayoutKind::HeadMajor => Layout::head_major(&shape, spec.lk + 3),
        LayoutKind::TokenMajor => {
            let mut l = Layout::token_major(&shape);
            l.o_row = spec.heads * d + 16;
            l
        }
    };
    let mut g = Gen {
        rng: SplitMix64::new(seed),
    };
    let q_len = layout.q_len(&shape).unwrap_or(0);
    let k_len = layout.k_len(&shape).unwrap_or(0);
    let v_len = layout.v_len(&shape).unwrap_or(0);
    // Elements no (head, row, column) or (KV head, position, column) names
    // (a cache's spare capacity) hold NaN: a body that read them would show.
    let mut q = vec![f32::NAN; q_len];
    let mut kf = vec![f32::NAN; k_len];
    let mut vf = vec![f32::NAN; v_len];
    let (big_q, big_k) = match kv {
        KvType::F32 => (1.0e20, -1.0e20),
        KvType::F16 => (1.0e36, -65504.0),
    };
    let key0: Vec<f32> = (0..spec.kv_heads * d)
        .map(|_| g.uniform(-1.0, 1.0))
        .collect();
    for h in 0..spec.heads {
        for i in 0..spec.lq {
            for c in 0..d {
                q[h * layout.q_head + i * layout.q_row + c] = match spec.data {
                    Data::Random | Data::Equal => g.uniform(-1.0, 1.0),
                    Data::Large => g.uniform(-8.0, 8.0),
                    Data::Subnormal => g.uniform(-1.0, 1.0) * 1.0e-20,
                    Data::NegInf => big_q,
                    Data::Specials => g.value_or_special(),
                };
            }
        }
    }
    for gh in 0..spec.kv_heads {
        for j in 0..spec.lk {
            for c in 0..d {
                kf[gh * layout.k_head + j * layout.k_pos + c] = match spec.data {
                    Data::Random => g.uniform(-1.0, 1.0),
                    Data::Equal => key0[gh * d + c],
                    Data::Large => g.uniform(-8.0, 8.0),
                    Data::Subnormal => g.uniform(-1.0, 1.0) * 1.0e-20,
                    Data::NegInf if j < 16 => big_k,
                    Data::NegInf => g.uniform(-1.0, 1.0) * 1.0e-30,
                    Data::Specials => g.value_or_special(),
                };
                vf[gh * layout.v_head + j * layout.v_pos + c] = match spec.data {
                    Data::Large => g.uniform(-4.0, 4.0),
                    Data::Subnormal => g.uniform(-1.0, 1.0) * 1.0e-39,
                    Data::Specials => g.value_or_special(),
                    _ => g.uniform(-1.0, 1.0),
                };
            }
        }
    }
    let (k, v) = match kv {
        KvType::F32 => (KvData::F32(kf), KvData::F32(vf)),
        KvType::F16 => (
            KvData::F16(kf.iter().map(|x| f16_bits(*x)).collect()),
            KvData::F16(vf.iter().map(|x| f16_bits(*x)).collect()),
        ),
    };
    let units_all = shape.units().unwrap_or(0);
    let units = units_all * spec.units_8ths.0 / 8..units_all * spec.units_8ths.1 / 8;
    Case {
        spec: spec.clone(),
        shape,
        layout,
        q,
        k,
        v,
        o_len: layout.o_len(&shape).unwrap_or(0),
        units,
    }
}

/// Every case for a body of `d` and `kv`.
pub fn cases_for(d: usize, kv: KvType, seed: u64) -> Vec<Case> {
    specs()
        .iter()
        .enumerate()
        .map(|(n, s)| build_case(s, d, kv, seed.wrapping_add(7919 * n as u64)))
        .collect()
}

/// Validation of `attention.fused` twins.
pub struct AttentionValidation;

/// Run `kernel` on `case`: O starts as canaries (gaps and rows outside the
/// units must keep them).
pub fn run_case(kernel: &Kernel<AttentionArgs>, case: &Case) -> Result<Vec<f32>, Refusal> {
    let mut o = vec![f32::from_bits(CANARY_F32); case.o_len];
    let whole = AttentionArgs::new(
        &case.shape,
        &case.layout,
        &case.q,
        case.k.slice(),
        case.v.slice(),
        &mut o,
    )?;
    let args = whole.restrict(case.units.start as u64..case.units.end as u64);
    // SAFETY: `AttentionArgs::new` checked every extent against the case's
    // buffers and `o`, which outlive the call; the restricted copy covers
    // a sub-range of the units.
    unsafe { kernel.call(&args) };
    Ok(o)
}

// SAFETY: `Args` is the `#[repr(C)]` struct of contracts naming
// ARGS_NAME, and `run` calls a kernel only with arguments built by
// `AttentionArgs::new` (then restricted), which checks every extent
// against buffers that live across the call.
unsafe impl Validation for AttentionValidation {
    type Args = AttentionArgs;
    type Case = Case;

    fn args_name(&self) -> &str {
        ARGS_NAME
    }

    fn generator(&self) -> String {
        "attention.fused cases v1".to_owned()
    }

    fn cases(&self, offer: &Offer, seed: u64) -> Vec<Case> {
        match SiteShape::from_geometry(&offer.contract.geometry) {
            Ok(s) => cases_for(s.d, s.kv, seed),
            Err(_) => Vec::new(),
        }
    }

    fn run(&self, kernel: &Kernel<AttentionArgs>, case: &Case) -> Result<Outputs, Refusal> {
        let o = run_case(kernel, case)?;
        let mut out = Outputs::from_f32(o);
        out.element = Element::F32;
        Ok(out)
    }

    fn describe_input(&self, case: &Case, index: usize) -> String {
        let s = &case.shape;
        let l = &case.layout;
        let mut at = String::from("a gap between rows");
        for h in 0..s.heads {
            for i in 0..s.lq {
                let start = h * l.o_head + i * l.o_row;
                if (start..start + s.d).contains(&index) {
                    at = format!("head {h} row {i} column {}", index - start);
                }
            }
        }
        format!(
            "{:?} d {} {:?} units {:?}: {at}",
            case.spec, s.d, s.kv, case.units
        )
    }
}

/// Inputs for a micro-race of `attention.fused` bodies at an offer's
/// site: uniform data in a head-major layout; a causal site is a prefill
/// continuation (`q_offset = lk - lq`, so decode is `lq = 1` at the end of
/// the cache).
#[derive(Clone, Copy, Debug, Default)]
pub struct AttentionWorkbench;

/// Prepared inputs of [`AttentionWorkbench`].
struct Prepared {
    shape: AttentionShape,
    layout: Layout,
    q: Vec<f32>,
    k: KvData,
    v: KvData,
    o: Vec<f32>,
}

impl weft_kernel::Workbench for AttentionWorkbench {
    fn prepare(&self, offer: &Offer, seed: u64) -> Result<Box<dyn weft_kernel::Bench>, Refusal> {
        if offer.contract.args != ARGS_NAME {
            return Err(Refusal::BadOperand {
                operand: "args".to_owned(),
                reason: format!(
                    "AttentionWorkbench runs {ARGS_NAME}, not {}",
                    offer.contract.args
                ),
            });
        }
        let s = SiteShape::from_geometry(&offer.contract.geometry)?;
        let too_big = || Refusal::UnsupportedGeometry {
            reason: "the site is too large to prepare".to_owned(),
        };
        let shape = AttentionShape {
            d: s.d,
            lq: usize::try_from(s.lq).map_err(|_| too_big())?,
            lk: usize::try_from(s.lk).map_err(|_| too_big())?,
            heads: usize::try_from(s.heads).map_err(|_| too_big())?,
            kv_heads: usize::try_from(s.kv_heads).map_err(|_| too_big())?,
            q_offset: if s.causal {
                usize::try_from(s.lk.saturating_sub(s.lq)).map_err(|_| too_big())?
            } else {
                0
            },
            causal: s.causal,
            scale: 1.0 / (s.d as f32).sqrt(),
            kv: s.kv,
        };
        shape.check()?;
        let layout = Layout::head_major(&shape, shape.lk);
        let mut g = Gen {
            rng: SplitMix64::new(seed),
        };
        let mut vec = |n: Option<usize>| -> Result<Vec<f32>, Refusal> {
            let n = n.ok_or_else(too_big)?;
            Ok((0..n).map(|_| g.uniform(-1.0, 1.0)).collect())
        };
        let q = vec(layout.q_len(&shape))?;
        let kf = vec(layout.k_len(&shape))?;
        let vf = vec(layout.v_len(&shape))?;
        let o = vec![0.0; layout.o_len(&shape).ok_or_else(too_big)?];
        let (k, v) = match s.kv {
            KvType::F32 => (KvData::F32(kf), KvData::F32(vf)),
            KvType::F16 => (
                KvData::F16(kf.iter().map(|x| f16_bits(*x)).collect()),
                KvData::F16(vf.iter().map(|x| f16_bits(*x)).collect()),
            ),
        };
        Ok(Box::new(Prepared {
            shape,
            layout,
            q,
            k,
            v,
            o,
        }))
    }
}

impl weft_kernel::Bench for Prepared {
    unsafe fn run(
        &mut self,
        code: &std::sync::Arc<weft_kernel::PlacedCode>,
    ) -> Result<(), Refusal> {
        // SAFETY: the caller promises `code` is an attention.fused body for
        // this offer, which honours the leaf ABI for `AttentionArgs`.
        let kernel = unsafe { Kernel::<AttentionArgs>::from_placed(code.clone(), 0)? };
        let args = AttentionArgs::new(
            &self.shape,
            &self.layout,
            &self.q,
            self.k.slice(),
            self.v.slice(),
            &mut self.o,
        )?;
        // SAFETY: `new` checked the extents against buffers owned by
        // `self`, which outlive the call.
        unsafe { kernel.call(&args) };
        Ok(())
    }
}
