//! The Winograd F(2 × 2, 3 × 3) arm of `conv.direct` (`conv.direct.winograd`):
//! a different arithmetic, so a different arm with its own contract. The
//! planner chooses it (stage 1: among the family's arms, by the price of
//! their bytes) where it is cheaper than the direct arm; `WEFT_NATIVE_EMIT`
//! does not change that choice, only which body of the chosen arm runs.
//!
//! # Geometry
//!
//! 3 × 3 kernels, stride 1, dilation 1, one group, any padding, batch,
//! size and channel counts, with `cin ≤` [`MAX_CIN`]; anything else is
//! refused by name (`unsupported-geometry`, naming why). The bound on
//! `cin` is the stack: bodies are leaves (no calls, no allocation) and
//! keep the transformed input of a block of tiles for every input channel
//! on their stack ([`STACK_BYTES`]; see [`x64`]).
//!
//! # Contract (how every body rounds)
//!
//! With `fma` one fused multiply-add rounding to nearest even and every
//! `+`/`−` one f32 rounding, for every image `b` and output tile
//! `(th, tw)` of 2 × 2 pixels (`oh = 2·th + a`, `ow = 2·tw + c`,
//! `a, c ∈ {0, 1}`):
//!
//! 1. **Input tile.** `d[i][j] = x[b, 2·th − pad + i, 2·tw − pad + j, ci]`
//!    for `i, j = 0 … 3`, an element outside the input reading **+0.0**
//!    (unlike the direct arm, which skips the taps in the padding: here
//!    the padding takes part in the transform, so `∞` or NaN in a tile
//!    reaches all of that tile's outputs).
//! 2. **Input transform** `V = Bᵀ d B`, columns within each row first:
//!    `e[i][0] = d[i][0] − d[i][2]`, `e[i][1] = d[i][1] + d[i][2]`,
//!    `e[i][2] = d[i][2] − d[i][1]`, `e[i][3] = d[i][1] − d[i][3]`; then rows:
//!    `V[0][j] = e[0][j] − e[2][j]`, `V[1][j] = e[1][j] + e[2][j]`,
//!    `V[2][j] = e[2][j] − e[1][j]`, `V[3][j] = e[1][j] − e[3][j]`;
//!    position `ξ = 4·i + j`.
//! 3. **Filter transform** `U = G g Gᵀ`, on the host at plan time (in
//!    packing, so every body reads the same bits), for each `(co, ci)`
//!    with `g[r][s] = w[co, r, s, ci]`, rows of `g` combined first:
//!    `s[0][k] = g[0][k]`, `s[1][k] = ((g[0][k] + g[1][k]) + g[2][k]) · ½`,
//!    `s[2][k] = ((g[0][k] − g[1][k]) + g[2][k]) · ½`, `s[3][k] = g[2][k]`;
//!    then columns: `U[i][0] = s[i][0]`,
//!    `U[i][1] = ((s[i][0] + s[i][1]) + s[i][2]) · ½`,
//!    `U[i][2] = ((s[i][0] − s[i][1]) + s[i][2]) · ½`, `U[i][3] = s[i][2]`.
//! 4. **Products.** For each `ξ` and `co`: `m ← +0.0`, then for
//!    `ci = 0 … cin − 1` in order `m ← fma(V[ξ][ci], U[ξ][ci][co], m)`;
//!    `M[ξ][co] = m`.
//! 5. **Output transform** `Y = Aᵀ M A`, rows first: for `j = 0 … 3`,
//!    `r[0][j] = (M[0][j] + M[1][j]) + M[2][j]`,
//!    `r[1][j] = (M[1][j] − M[2][j]) − M[3][j]`; then columns:
//!    `Y[a][0] = (r[a][0] + r[a][1]) + r[a][2]`,
//!    `Y[a][1] = (r[a][1] − r[a][2]) − r[a][3]`.
//! 6. **Epilogue.** `y = act(Y[a][c] + bias[co])` (one add; `+0.0` when the
//!    site has no bias), `act` exactly as [`crate::Activation::apply`].
//! 7. A tile at the bottom or right edge (odd `out_h` or `out_w`) is
//!    computed whole; only the outputs that exist are stored.
//!
//! So the products are sequential over `ci`, one accumulator per `(ξ,
//! co)`; bodies differ in tiling (how many tiles and channels a register
//! tile holds), never in numerics. [`reference`](mod@reference) is the definition.
//!
//! # Packing ([`WINOGRAD_LAYOUT`])
//!
//! 64-byte lines of 16 f32. First the bias: `2·⌈cout / 32⌉` lines, channel
//! `co` at lane `co % 16` of line `co / 16`. Then `U` in panels of 32
//! output channels: for position `ξ`, panel `p` (channels `32p …
//! 32p + 31`) and input channel `ci`, the two lines
//! `bias + ((ξ · ⌈cout/32⌉ + p) · cin + ci) · 2 + h` hold
//! `U[ξ][ci][32p + 16h + lane]`. Lanes past `cout` are `+0.0`.
//!
//! # Threads
//!
//! Member view `rows` (the flattened `(b, oh)` axis). A tile straddles two
//! output rows, so when `out_h` is even the granule is 2 and no split cuts
//! a tile (cutting one makes both parts compute it: at 56×56 in eight
//! parts, a seventh more work). When `out_h` is odd no granule keeps tiles
//! whole across images, so it is 1. Either way a call over
//! `row_start..row_end` computes every tile that has a row in the range and
//! stores only the rows inside it: a range starting or ending at an odd row
//! computes its edge tile whole (the neighbour computes it too), and every
//! output is the same operations in any split.
//!
//! # Bodies
//!
//! The arm ([`arm`]): per tile, `V` for every `ci` (four channels a step)
//! into a stack slot, then
//! per 16-channel panel two positions at a time (eight f32x4
//! accumulators), `M` into a second slot, the output transform. The x64
//! twins ([`x64`]): blocks of 7 (AVX-512) or 6 (AVX2) consecutive tiles of
//! the flattened `(b, th, tw)` axis, `V` vectorised over `ci` into the
//! stack, then per group of 32 (16) output channels and position a
//! register tile of tiles × two vectors over `ci`. The NEON twin
//! ([`a64`]): the same walk in blocks of 6 tiles, `V` four channels a
//! step (the rest one at a time) with a zero line standing in for the
//! padding, then per 16-channel panel and position 6 × 4 `.4s`
//! accumulators, `fmla` by element over `ci`.

pub mod a64;
pub mod arm;
pub mod reference;
pub mod validation;
pub mod x64;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use weft_kernel::{
    Aliasing, ArithmeticContract, Contract, Family, FmaUse, Geometry, Host, Isa, LoopTrip,
    MemberViews, NanRule, NativeCode, Offer, ReductionOrder, Refusal, Site,
};

use crate::pack::PackedFilter;
use crate::{bad, ConvGeometry, Shape, ARGS_NAME, DIRECT};

/// The arm's candidate name.
pub const NAME: &str = "conv.direct.winograd";

/// The packed layout's name, as offers and twins check it.
pub const WINOGRAD_LAYOUT: &str = "conv.direct.winograd-f2x3.bias+u16xi.panels32";

/// Output channels per panel of `U`.
pub const WPANEL: usize = 32;

/// Largest `cin` served: the AVX-512 twin's transformed input for a block
/// of 7 tiles, `16 · 7 · cin · 4` bytes, plus its products, `16 · 7 · 32
/// · 4`, must fit [`STACK_BYTES`].
pub const MAX_CIN: u64 = 512;

/// The most stack any Winograd body takes (bytes).
pub const STACK_BYTES: u64 = 256 * 1024;

/// The order of the adds, spelt out (the contract's notes).
pub const NOTES: &str =
    "Winograd F(2x2,3x3): d = 4x4 input tile at (2th-pad, 2tw-pad), outside = +0; \
e[i] = (d0-d2, d1+d2, d2-d1, d1-d3) per row, V = same per column of e; \
U = G g G^T at plan time, rows then columns, s1 = ((g0+g1)+g2)*0.5, s2 = ((g0-g1)+g2)*0.5; \
M[xi][co] = +0 then fma(V[xi][ci], U[xi][ci][co], m) for ci in order; \
r0 = (M0+M1)+M2, r1 = (M1-M2)-M3 per column, Y = ((r0+r1)+r2, (r1-r2)-r3) per row; \
y = act(Y + bias)";

/// Whether the arm computes `g` (`unsupported-geometry`, naming why, if not).
pub fn serves(g: &ConvGeometry) -> Result<(), Refusal> {
    let why = if g.groups != 1 {
        Some(format!("groups = {}, not 1", g.groups))
    } else if (g.k_h, g.k_w) != (3, 3) {
        Some(format!("a {}x{} kernel, not 3x3", g.k_h, g.k_w))
    } else if g.stride != 1 {
        Some(format!("stride {}, not 1", g.stride))
    } else if g.dil != 1 {
        Some(format!("dilation {}, not 1", g.dil))
    } else if g.cin > MAX_CIN {
        Some(format!(
            "cin = {} > {MAX_CIN}: the transformed input of a block of tiles \
             would not fit the bodies' {STACK_BYTES}-byte stack",
            g.cin
        ))
    } else {
        None
    };
    match why {
        Some(reason) => Err(Refusal::UnsupportedGeometry {
            reason: format!("{NAME} serves 3x3, stride 1, dilation 1, one group: {reason}"),
        }),
        None => Ok(()),
    }
}

/// Panels of [`WPANEL`] output channels.
pub fn wpanels(cout: u64) -> u64 {
    cout.div_ceil(WPANEL as u64)
}

/// Output tiles along a row and down a column: `(⌈out_h/2⌉, ⌈out_w/2⌉)`.
pub fn tiles(s: &Shape) -> (u64, u64) {
    (s.out_h.div_ceil(2), s.out_w.div_ceil(2))
}

/// `U = G g Gᵀ` for one `(co, ci)`, `g[r][s]` the 3 × 3 taps, in the
/// contract's order (rows of `g` first): what packing stores.
pub fn filter_transform(g: [[f32; 3]; 3]) -> [[f32; 4]; 4] {
    let mut s = [[0.0f32; 3]; 4];
    for k in 0..3 {
        s[0][k] = g[0][k];
        s[1][k] = ((g[0][k] + g[1][k]) + g[2][k]) * 0.5;
        s[2][k] = ((g[0][k] - g[1][k]) + g[2][k]) * 0.5;
        s[3][k] = g[2][k];
    }
    let mut u = [[0.0f32; 4]; 4];
    for i in 0..4 {
        u[i][0] = s[i][0];
        u[i][1] = ((s[i][0] + s[i][1]) + s[i][2]) * 0.5;
        u[i][2] = ((s[i][0] - s[i][1]) + s[i][2]) * 0.5;
        u[i][3] = s[i][2];
    }
    u
}

/// The contract of the Winograd arm at `g` (module docs).
pub fn contract(g: &Geometry) -> Contract {
    Contract {
        family: DIRECT.to_owned(),
        geometry: g.clone(),
        args: ARGS_NAME.to_owned(),
        arithmetic: ArithmeticContract {
            accumulator_lanes: 1,
            reduction: ReductionOrder::Described(
                "per (xi, co): from +0, sequential over ci; transforms' adds in the fixed order of \
                 the notes"
                    .to_owned(),
            ),
            fma: FmaUse::AsSpecified,
            nan: NanRule::ByClass,
            notes: NOTES.to_owned(),
        },
        aliasing: Aliasing::disjoint(),
    }
}

/// The member views: the flattened output rows, granule 2 when `out_h` is
/// even (whole tiles), else 1 (module docs).
pub fn views(g: &ConvGeometry, s: &Shape) -> MemberViews {
    MemberViews {
        axis: "rows".to_owned(),
        extent: g.batch * s.out_h,
        granule: if s.out_h.is_multiple_of(2) { 2 } else { 1 },
    }
}

pub(crate) fn trip(name: &str, trips: u64, depth: u32) -> LoopTrip {
    LoopTrip {
        name: name.to_owned(),
        trips,
        depth,
    }
}

/// Positions the arm computes at once (eight f32x4 accumulators).
pub const ARM_POSITIONS: u64 = 2;

/// The arm's loop nest at `g` for a call over every row ([`arm`]).
pub fn nest(g: &ConvGeometry, s: &Shape) -> Vec<LoopTrip> {
    let (th, tw) = tiles(s);
    vec![
        trip("tile_rows", g.batch * th, 0),
        trip("tiles", tw, 1),
        trip("v_ci4", g.cin / 4, 2),
        trip("v_ci1", g.cin % 4, 2),
        trip("panels", s.panels, 2),
        trip("positions", 16 / ARM_POSITIONS, 3),
        trip("ci", g.cin, 4),
    ]
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}

/// Tiles of a call over every row.
pub fn tile_count(g: &ConvGeometry, s: &Shape) -> u64 {
    let (th, tw) = tiles(s);
    g.batch * th * tw
}

/// The offer at `site`, or why the arm cannot serve it.
pub fn offer(site: &Site) -> Result<Offer, Refusal> {
    if site.family.name() != DIRECT {
        return Err(Refusal::UnsupportedGeometry {
            reason: format!("family {} is not {DIRECT}", site.family),
        });
    }
    let (g, s) = ConvGeometry::from_geometry(&site.geometry)?;
    serves(&g)?;
    let w = site
        .operand("w")
        .ok_or_else(|| bad("w", "packing needs the filter at plan time".to_owned()))?;
    let bias = site.operand("bias").map(|b| f32s(&b.bytes));
    let packed = PackedFilter::pack_winograd(&g, &f32s(&w.bytes), bias.as_deref())?;
    let operand = packed.operand();
    let bytes = 4 * (g.x_len() + g.y_len(&s)) as u64 + operand.bytes.len() as u64;
    let t = tile_count(&g, &s);
    Ok(Offer {
        contract: contract(&site.geometry),
        packed: vec![operand],
        views: Some(views(&g, &s)),
        loops: crate::silu::after(nest(&g, &s), &g, &s, 4, false),
        flops: 2 * 16 * t * g.cin * g.cout + 32 * t * g.cin + 28 * t * g.cout,
        bytes_moved: bytes,
    })
}

/// The arm as a [`weft_kernel::Arm`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WinogradArm;

// SAFETY: the body reads x only inside `batch × in_h × in_w × cin` (a tile
// element outside the input is a select of +0 whose load reads x's first
// element), the packed filter's lines, its own stack slots, and writes y
// only in its rows `row_start..row_end`, columns below out_w and channels
// below cout; it returns. Validation checks it against the reference.
unsafe impl weft_kernel::Arm for WinogradArm {
    fn name(&self) -> &'static str {
        NAME
    }

    fn family(&self) -> Family {
        Family(DIRECT)
    }

    fn offer(&self, site: &Site, _host: &Host) -> Result<Offer, Refusal> {
        offer(site)
    }

    fn build(&self, offer: &Offer, isa: Isa) -> Result<NativeCode, Refusal> {
        check_offer(NAME, offer)?;
        weft_managed::arm_build::build_native(isa, |t| t.compile(arm::build_function(t)))
    }
}

/// `offer` is a Winograd offer of `conv.direct` (`name` refuses otherwise).
pub(crate) fn check_offer(name: &str, offer: &Offer) -> Result<(), Refusal> {
    crate::check_offer(name, offer, DIRECT, Some(WINOGRAD_LAYOUT))
}

/// Every twin of the Winograd arm: the x64 ones ([`x64::twins`]), then
/// the NEON one ([`a64::twins`]); the planner keeps those the host runs.
pub fn twins() -> Vec<Arc<dyn weft_kernel::Twin>> {
    x64::twins().into_iter().chain(a64::twins()).collect()
}

/// The Winograd arm's registration: the arm, its x64 and NEON twins, its
/// check (against the arm, on the Winograd cases) and the family's bench.
pub fn arm_entry() -> weft_kernel::ArmEntry {
    use weft_validate::Checker;
    weft_kernel::ArmEntry::new(
        Arc::new(WinogradArm),
        twins(),
        Arc::new(Checker(validation::WinogradValidation)),
        Some(Arc::new(crate::validation::ConvBench(
            crate::arm::ArmKind::Direct,
        ))),
    )
}
