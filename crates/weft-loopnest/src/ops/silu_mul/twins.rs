//! The twins of `loopnest.silu_mul`: bodies Weft emits itself for x64
//! (AVX-512, AVX2) and arm64 (NEON), validated against the arm before a
//! planner may choose them ([`super::validation`]).
//!
//! One job: say *what* an element is, `g ⊘ (1 ⊕ exp(−g)) ⊗ u`, as an
//! exp-based map ([`silu_mul_map`]), and name the bodies weft-elementwise
//! emits for it. The exp, the recorder and both lowerings are
//! weft-elementwise's ([`weft_elementwise::map`]): the exp twins' own
//! steps, so its arithmetic is not re-typed here.
//!
//! Invariants:
//!
//! - **The arm's ABI.** [`SiluMulArgs`] has the field offsets of
//!   [`MapArgs`](weft_elementwise::map::MapArgs) (checked at compile time):
//!   `g` is stream `a`, `u` stream `b`, `h` the output.
//! - **The arm's operations.** One IEEE binary32 operation per node of the
//!   map in the contract's order, exp correctly rounded, no FMA; `h` may be
//!   `g` (every load of a step precedes its stores).
//! - **Nothing outside `[start, end)`.** Short last steps are staged
//!   through the body's stack (x64) or done with scalar loads and stores
//!   (arm64).

use std::mem::offset_of;
use std::sync::Arc;

use weft_elementwise::map::{ExpMap, MapExpr, MAP_ARGS_OFFSETS};
use weft_elementwise::twin_x64::Abi;
use weft_elementwise::twin_x64::{self, Tier};
use weft_kernel::{Feature, Isa, LoopTrip, NativeCode, Offer, Refusal, Twin};

use super::{SiluMulArgs, ARGS_NAME, FAMILY};

const _: () = {
    assert!(offset_of!(SiluMulArgs, g) == MAP_ARGS_OFFSETS[0]);
    assert!(offset_of!(SiluMulArgs, u) == MAP_ARGS_OFFSETS[1]);
    assert!(offset_of!(SiluMulArgs, h) == MAP_ARGS_OFFSETS[2]);
    assert!(offset_of!(SiluMulArgs, table) == MAP_ARGS_OFFSETS[3]);
    assert!(offset_of!(SiluMulArgs, len) == MAP_ARGS_OFFSETS[4]);
    assert!(offset_of!(SiluMulArgs, start) == MAP_ARGS_OFFSETS[5]);
    assert!(offset_of!(SiluMulArgs, end) == MAP_ARGS_OFFSETS[6]);
};

/// The contract's element as an exp-based map of `a = g`, `b = u`:
/// `(g ⊘ (1 ⊕ exp(−g))) ⊗ u`.
pub fn silu_mul_map() -> ExpMap {
    let g = MapExpr::a;
    let one_plus_e = MapExpr::c(1.0).plus((-g()).exp());
    match ExpMap::new(g().over(one_plus_e).times(MapExpr::b())) {
        Ok(m) => m,
        Err(e) => unreachable!("the SiLU·mul map has one exp: {e}"),
    }
}

/// The offer must be this family's, with its argument struct.
fn check_offer(name: &str, offer: &Offer) -> Result<(), Refusal> {
    let c = &offer.contract;
    if c.args != ARGS_NAME {
        return Err(Refusal::BadOperand {
            operand: "args".into(),
            reason: format!("{name} takes {ARGS_NAME}, the offer names {}", c.args),
        });
    }
    if c.family != FAMILY {
        return Err(Refusal::UnsupportedGeometry {
            reason: format!("{name} computes {FAMILY}, the offer is for {}", c.family),
        });
    }
    Ok(())
}

/// An x64 twin: the map at one vector tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SiluMulX64Twin {
    /// The tier.
    pub tier: Tier,
}

const AVX2_FEATURES: &[Feature] = &[Feature::Avx, Feature::Avx2];
const AVX512_FEATURES: &[Feature] = &[
    Feature::Avx,
    Feature::Avx2,
    Feature::Avx512f,
    Feature::Avx512dq,
    Feature::Avx512vl,
];

impl SiluMulX64Twin {
    /// The body for `abi` (the host's is what [`Twin::emit`] gives; the
    /// other is for tests and listings).
    pub fn emit_for(self, abi: Abi) -> Result<NativeCode, Refusal> {
        twin_x64::emit_map(&silu_mul_map(), self.tier, abi)
    }
}

// SAFETY: weft-elementwise's map bodies read `g[start..end]`,
// `u[start..end]`, the table, and write `h[start..end]` only, when
// `start <= end <= len` (nothing otherwise), and return normally (its
// `map` module's contract); validation checks their results.
unsafe impl Twin for SiluMulX64Twin {
    fn name(&self) -> &'static str {
        match self.tier {
            Tier::Avx512 => "loopnest.silu_mul.twin.avx512",
            Tier::Avx2 => "loopnest.silu_mul.twin.avx2",
        }
    }

    fn isa(&self) -> Isa {
        Isa::X86_64
    }

    /// AVX2: VEX ymm/xmm arithmetic and `vpgatherqq` (AVX2). AVX-512: zmm
    /// for binary64 lanes (F), EVEX ymm for f32 lanes (VL), and the slow
    /// path's lane test `kortestb` (DQ), as the exp twins' tier.
    fn requires(&self) -> &'static [Feature] {
        match self.tier {
            Tier::Avx2 => AVX2_FEATURES,
            Tier::Avx512 => AVX512_FEATURES,
        }
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        check_offer(self.name(), offer)?;
        self.emit_for(Abi::host())
    }

    /// The step loop, inside it the copy of a short tail into the stack
    /// buffers (the tail step re-enters the loop body), after it the copy
    /// back out.
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        let Some(len) = offer.contract.geometry.get("len") else {
            return offer.loops.clone();
        };
        let per = twin_x64::map_per_iteration(self.tier) as u64;
        let trip = |name: &str, trips, depth| LoopTrip {
            name: name.to_owned(),
            trips,
            depth,
        };
        vec![
            trip("steps", len / per, 0),
            trip("stage-in", len % per, 1),
            trip("stage-out", len % per, 0),
        ]
    }
}

/// The arm64 twin: the map in base NEON, two elements a step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SiluMulNeonTwin;

impl SiluMulNeonTwin {
    /// The body (independent of the offer: one body serves every length).
    pub fn body(self) -> Result<NativeCode, Refusal> {
        weft_elementwise::twin_a64::emit_map(&silu_mul_map())
    }
}

// SAFETY: as for the x64 twins (weft-elementwise's `map` contract).
unsafe impl Twin for SiluMulNeonTwin {
    fn name(&self) -> &'static str {
        "loopnest.silu_mul.twin.neon"
    }

    fn isa(&self) -> Isa {
        Isa::Aarch64
    }

    fn requires(&self) -> &'static [Feature] {
        &[Feature::Neon]
    }

    fn emit(&self, offer: &Offer) -> Result<NativeCode, Refusal> {
        check_offer(self.name(), offer)?;
        self.body()
    }

    /// One loop of two-element steps; an odd element is straight-line code
    /// after it.
    fn nest(&self, offer: &Offer) -> Vec<LoopTrip> {
        match offer.contract.geometry.get("len") {
            Some(len) => vec![LoopTrip {
                name: "pairs".to_owned(),
                trips: len / 2,
                depth: 0,
            }],
            None => offer.loops.clone(),
        }
    }
}

/// Every twin of the arm, widest x64 tier first, then arm64.
pub fn twins() -> Vec<Arc<dyn Twin>> {
    vec![
        Arc::new(SiluMulX64Twin { tier: Tier::Avx512 }),
        Arc::new(SiluMulX64Twin { tier: Tier::Avx2 }),
        Arc::new(SiluMulNeonTwin),
    ]
}
