//! Validation of `loopnest.silu_mul` twins against the arm: the cases that
//! hunt for differences and how one case runs.
//!
//! Cases: every pair of a special `g` and a special `u` (±0, ±inf, quiet
//! and signalling NaNs of both signs, subnormals, ±max, the negated inputs
//! of exp's slow path, `g` around the overflow of `exp(−g)` near −88.72
//! where silu becomes −0, around +87.3/+88.7/+103.97/+104 where `exp(−g)`
//! goes subnormal and to zero, around 16.64 where `1 ⊕ e` becomes 1, huge
//! and tiny `u`); each slow-path input at every position of a 33-element
//! range; every tail length 0..=33 from starts 0, 1, 2, 3, 5, 16 and 17
//! (ranges inside longer buffers: start > 0 and end < len); dense sweeps
//! over the boundary regions; random values and random bit patterns; and
//! the offer's own length (up to 2^17), whole and as an inner range.
//! `g`, `u` and `h` start 0–3 elements past a 64-byte boundary; guard f32s
//! around `h` must come back untouched, and elements of `h` outside the
//! range keep what they held (a copy of `g`, so the in-place run, `h == g`,
//! which the contract allows and the validator always makes, compares word
//! for word).
//!
//! Library code, not a test helper: the planner validates twins through
//! [`checker`] on these same cases.

use std::ops::Range;

use weft_kernel::{Kernel, Offer, Refusal};
use weft_validate::{align_up_elements, Checker, Outputs, Validation, CANARY_F32};

use super::{SiluMul, SiluMulArgs, ARGS_NAME};

/// Guard f32s on each side of `h`.
pub const GUARD: usize = 8;

/// The f32 inputs of exp that take its slow path (the elementwise family's
/// list); silu evaluates `exp(−g)`, so the cases put their negations in `g`.
pub const EXP_SLOW_INPUTS: [u32; 3] = [0xbae0_e25c, 0xbbf0_edf1, 0xc169_12cd];

/// Deterministic xorshift, the cases' source of randomness.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in `[lo, hi)` on a 2^-24 grid of the width.
    fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
    }
    /// Any bit pattern.
    fn bits(&mut self) -> f32 {
        f32::from_bits((self.next_u64() >> 32) as u32)
    }
    /// Mostly ordinary values, with specials, subnormals and huge or tiny
    /// ones mixed in.
    fn hunting(&mut self, specials: &[f32]) -> f32 {
        let r = self.next_u64();
        match r % 16 {
            0 | 1 => specials[(r >> 8) as usize % specials.len()],
            2 => f32::from_bits((r >> 8) as u32 & 0x807f_ffff),
            3 => self.bits(),
            4 => self.uniform(-4.0, 4.0) * 1e30,
            5 => self.uniform(-4.0, 4.0) * 1e-30,
            6 | 7 => self.uniform(-110.0, 110.0),
            _ => self.uniform(-8.0, 8.0),
        }
    }
}

/// `bits ± 0..=k` ulps (by bit pattern), as f32s.
fn around(bits: u32, k: u32) -> impl Iterator<Item = f32> {
    (0..=k).flat_map(move |d| {
        [bits.wrapping_add(d), bits.wrapping_sub(d)]
            .into_iter()
            .map(f32::from_bits)
    })
}

/// Special gates: every class, exp's slow-path inputs negated, and the
/// boundaries of `exp(−g)` and of `1 ⊕ e`.
pub fn special_g() -> Vec<f32> {
    let mut v = vec![
        0.0f32,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::from_bits(0x7fc0_0000), // quiet NaN
        f32::from_bits(0xffc0_0000), // −quiet NaN
        f32::from_bits(0x7f80_0001), // signalling NaN
        f32::from_bits(0xffa0_0000), // −signalling NaN
        f32::from_bits(0x7fe1_2345), // quiet NaN with payload
        1.0,
        -1.0,
        0.5,
        -0.5,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x8000_0001),
        f32::from_bits(0x007f_ffff),
        f32::from_bits(0x807f_ffff),
        f32::MAX,
        f32::MIN,
        1e-8,
        -1e-8,
        20.0,
        -20.0,
        88.7,
        -88.7,
        89.0,
        -89.0,
        104.0,
        -104.0,
        150.0,
        -150.0,
    ];
    v.extend(EXP_SLOW_INPUTS.map(|b| -f32::from_bits(b)));
    // exp(−g) overflows for −g >= 0x42b17218: silu(g) = g/inf = −0.
    v.extend(around(0xc2b1_7218, 3));
    // exp(−g) leaves the normal range (−g = −87.33654) and underflows to 0
    // (−g = −103.97208).
    v.extend(around(0x42ae_ac4f, 2));
    v.extend(around(0x42cf_f1b4, 2));
    // 1 ⊕ e rounds to 1 once e <= 2^-24 (g >= 24 ln 2 ≈ 16.6355).
    v.extend(around(0x4185_1592, 2));
    v
}

/// Special values of `u`.
pub fn special_u() -> Vec<f32> {
    vec![
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        2.0,
        -7.25,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::from_bits(0x7fc0_0000),
        f32::from_bits(0xff80_0001),
        f32::from_bits(0x7fa0_0000),
        f32::MAX,
        f32::MIN,
        3.0e38,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x807f_ffff),
        1e-30,
        -1e30,
    ]
}

/// One case: the buffers' contents, the range computed, and how far past a
/// 64-byte boundary each of `g`, `u`, `h` starts.
#[derive(Clone, Debug)]
pub struct Case {
    /// `len` gates.
    pub g: Vec<f32>,
    /// `len` values.
    pub u: Vec<f32>,
    /// The elements computed.
    pub range: Range<usize>,
    /// Elements past a 64-byte boundary of `g`, `u` and `h`.
    pub misalign: [usize; 3],
}

impl Case {
    fn len(&self) -> usize {
        self.g.len()
    }
}

/// `n` values copied into a fresh buffer `misalign` elements past a 64-byte
/// boundary, `GUARD` canaries either side; returns the buffer and where the
/// values start.
fn placed(values: &[f32], misalign: usize) -> (Vec<f32>, usize) {
    let mut buf = vec![f32::from_bits(CANARY_F32); values.len() + 2 * GUARD + 16 + misalign];
    let start = align_up_elements(buf.as_ptr(), 64) + misalign;
    let start = if start < GUARD { start + 16 } else { start };
    buf[start..start + values.len()].copy_from_slice(values);
    (buf, start)
}

/// The words compared: `h` and its guards.
fn outputs(buf: &[f32], start: usize, len: usize) -> Outputs {
    Outputs::from_f32(buf[start - GUARD..start + len + GUARD].iter().copied())
}

/// Validation of `loopnest.silu_mul` twins.
#[derive(Clone, Copy, Debug, Default)]
pub struct SiluMulValidation;

/// The family's twin check: [`SiluMulValidation`] through weft-validate.
pub fn checker() -> Checker<SiluMulValidation> {
    Checker(SiluMulValidation)
}

// SAFETY: `Args` is the `#[repr(C)]` struct of contracts naming ARGS_NAME,
// and `run`/`run_aliased` call a kernel only with args built by
// `SiluMulArgs::new`/`in_place`, which check every extent against buffers
// that live across the call.
unsafe impl Validation for SiluMulValidation {
    type Args = SiluMulArgs;
    type Case = Case;

    fn args_name(&self) -> &str {
        ARGS_NAME
    }

    fn generator(&self) -> String {
        "loopnest.silu_mul cases v1".to_owned()
    }

    fn cases(&self, offer: &Offer, seed: u64) -> Vec<Case> {
        let mut out = Vec::new();
        let mut n = 0usize;
        let mut push = |out: &mut Vec<Case>, g: Vec<f32>, u: Vec<f32>, range: Range<usize>| {
            n += 1;
            out.push(Case {
                g,
                u,
                range,
                misalign: [n % 4, (n + 1) % 4, (n + 3) % 4],
            });
        };
        let (sg, su) = (special_g(), special_u());
        // Every special g with every special u, twice: the second time
        // shifted so each pair meets another lane, over an inner range.
        let pairs: Vec<(f32, f32)> = sg
            .iter()
            .flat_map(|&g| su.iter().map(move |&u| (g, u)))
            .collect();
        let (g, u): (Vec<f32>, Vec<f32>) = pairs.iter().copied().unzip();
        let len = g.len();
        push(&mut out, g.clone(), u.clone(), 0..len);
        let mut g2 = g;
        g2.rotate_left(7);
        push(&mut out, g2, u, 3..len - 2);
        // exp's slow-path inputs at every position of a 33-element range.
        let mut rng = Rng::new(seed);
        for b in EXP_SLOW_INPUTS {
            for pos in 0..33 {
                let mut g: Vec<f32> = (0..33).map(|_| rng.uniform(-12.0, 12.0)).collect();
                g[pos] = -f32::from_bits(b);
                let u = (0..33).map(|_| rng.hunting(&su)).collect();
                push(&mut out, g, u, 0..33);
            }
        }
        // Every tail length from several starts, inside longer buffers.
        for start in [0usize, 1, 2, 3, 5, 16, 17] {
            for len in 0..=33usize {
                let total = start + len + 1 + len % 3;
                let g = (0..total).map(|_| rng.hunting(&sg)).collect();
                let u = (0..total).map(|_| rng.hunting(&su)).collect();
                push(&mut out, g, u, start..start + len);
            }
        }
        // Dense sweeps over the boundary regions, random values, random bits.
        for (lo, hi) in [
            (-89.5f32, -87.5f32),
            (86.5, 89.5),
            (103.0, 105.0),
            (-1e-3, 1e-3),
            (15.0, 18.5),
            (-20.0, 20.0),
        ] {
            let g = (0..2048).map(|_| rng.uniform(lo, hi)).collect();
            let u = (0..2048).map(|_| rng.hunting(&su)).collect();
            push(&mut out, g, u, 0..2048);
        }
        let g = (0..4099).map(|_| rng.bits()).collect();
        let u = (0..4099).map(|_| rng.bits()).collect();
        push(&mut out, g, u, 1..4099);
        let g = (0..4096)
            .map(|_| f32::from_bits((rng.next_u64() as u32) & 0x807f_ffff))
            .collect();
        let u = (0..4096).map(|_| rng.hunting(&su)).collect();
        push(&mut out, g, u, 0..4096);
        // The offer's own length, whole and as an inner range.
        if let Some(len) = offer.contract.geometry.get("len") {
            let len = len as usize;
            if (1..=1 << 17).contains(&len) {
                let g: Vec<f32> = (0..len).map(|_| rng.hunting(&sg)).collect();
                let u: Vec<f32> = (0..len).map(|_| rng.hunting(&su)).collect();
                push(&mut out, g.clone(), u.clone(), 0..len);
                push(&mut out, g, u, len / 3..len - len / 5);
            }
        }
        out
    }

    fn run(&self, kernel: &Kernel<SiluMulArgs>, case: &Case) -> Result<Outputs, Refusal> {
        let len = case.len();
        let op = SiluMul::new(len)?;
        let (gbuf, gs) = placed(&case.g, case.misalign[0]);
        let (ubuf, us) = placed(&case.u, case.misalign[1]);
        // `h` starts as a copy of `g`, so elements outside the range read
        // the same as in place.
        let (mut hbuf, hs) = placed(&case.g, case.misalign[2]);
        let args = SiluMulArgs::new(
            &op,
            &gbuf[gs..gs + len],
            &ubuf[us..us + len],
            &mut hbuf[hs..hs + len],
            case.range.clone(),
        )?;
        // SAFETY: `new` checked the extents against the buffers, which
        // outlive the call.
        unsafe { kernel.call(&args) };
        Ok(outputs(&hbuf, hs, len))
    }

    fn describe_input(&self, case: &Case, index: usize) -> String {
        let len = case.len();
        let head = format!(
            "len {len} range {:?} misalign {:?}",
            case.range, case.misalign
        );
        match index.checked_sub(GUARD) {
            Some(i) if i < len => format!(
                "{head}: h[{i}] of g {:#010x} ({:e}), u {:#010x} ({:e})",
                case.g[i].to_bits(),
                case.g[i],
                case.u[i].to_bits(),
                case.u[i]
            ),
            _ => format!("{head}: guard f32 {index} around h"),
        }
    }

    fn aliasable(&self) -> &[(&'static str, &'static str)] {
        &[("g", "h")]
    }

    fn run_aliased(
        &self,
        kernel: &Kernel<SiluMulArgs>,
        case: &Case,
        a: &str,
        b: &str,
    ) -> Result<Outputs, Refusal> {
        if !matches!((a, b), ("g", "h") | ("h", "g")) {
            return Err(Refusal::AliasingUnvalidated {
                a: a.to_owned(),
                b: b.to_owned(),
            });
        }
        let len = case.len();
        let op = SiluMul::new(len)?;
        let (mut ghbuf, s) = placed(&case.g, case.misalign[0]);
        let (ubuf, us) = placed(&case.u, case.misalign[1]);
        let args = SiluMulArgs::in_place(
            &op,
            &mut ghbuf[s..s + len],
            &ubuf[us..us + len],
            case.range.clone(),
        )?;
        // SAFETY: `in_place` checked the extents against the buffers, which
        // outlive the call; `h == g` is the overlap the contract allows.
        unsafe { kernel.call(&args) };
        Ok(outputs(&ghbuf, s, len))
    }
}

/// The family's [`Workbench`](weft_kernel::Workbench): gates and values at
/// an offer's length (ordinary magnitudes, so every body runs the path it
/// runs on a model's activations). When prices cannot separate the
/// candidates (or a body cannot be priced from its bytes), the planner
/// orders them by racing them on this.
#[derive(Clone, Copy, Debug, Default)]
pub struct SiluMulBench;

/// Prepared inputs of [`SiluMulBench`].
struct Prepared {
    op: SiluMul,
    g: Vec<f32>,
    u: Vec<f32>,
    h: Vec<f32>,
}

impl weft_kernel::Workbench for SiluMulBench {
    fn prepare(&self, offer: &Offer, seed: u64) -> Result<Box<dyn weft_kernel::Bench>, Refusal> {
        if offer.contract.args != ARGS_NAME {
            return Err(Refusal::BadOperand {
                operand: "args".to_owned(),
                reason: format!("SiluMulBench runs {ARGS_NAME}, not {}", offer.contract.args),
            });
        }
        let op = <SiluMul as super::NestOp>::from_geometry(&offer.contract.geometry)?;
        let mut rng = Rng::new(seed);
        Ok(Box::new(Prepared {
            op,
            g: (0..op.len).map(|_| rng.uniform(-8.0, 8.0)).collect(),
            u: (0..op.len).map(|_| rng.uniform(-2.0, 2.0)).collect(),
            h: vec![0.0; op.len],
        }))
    }
}

impl weft_kernel::Bench for Prepared {
    unsafe fn run(
        &mut self,
        code: &std::sync::Arc<weft_kernel::PlacedCode>,
    ) -> Result<(), Refusal> {
        // SAFETY: the caller promises `code` is a loopnest.silu_mul body,
        // which honours the leaf ABI for `SiluMulArgs`.
        let kernel = unsafe { Kernel::<SiluMulArgs>::from_placed(code.clone(), 0)? };
        let args = SiluMulArgs::new(&self.op, &self.g, &self.u, &mut self.h, 0..self.op.len)?;
        // SAFETY: `new` checked the extents against buffers owned by `self`,
        // which outlive the call.
        unsafe { kernel.call(&args) };
        Ok(())
    }
}
