//! The grouped arm of `conv.direct` (`conv.direct.grouped`): for grouped
//! convolutions whose groups have few output channels, a panel of 16
//! output channels spans `16 / cout_g` consecutive groups instead of
//! leaving most of a one-group panel's lanes idle.
//!
//! # Geometry
//!
//! `groups > 1` (not depthwise), `cout_g = cout / groups` dividing 16
//! but below it (1, 2, 4, 8), and `(16 / cout_g) · cin_g ≤ 32` (a panel's
//! input channels fit two zmm: `cin_g ≤ 2, 4, 8, 16` at `cout_g = 1, 2,
//! 4, 8`); any kernel, stride, padding, dilation, batch and size.
//! Anything else is refused by name (`unsupported-geometry`, naming why)
//! and left to the direct arm.
//!
//! # Contract
//!
//! The direct family's, unchanged ([`crate::contract`], crate docs): per
//! output `acc = bias`, then for `kh`, `kw`, `ci` (within the group) in
//! order, taps outside the input skipped, `acc = fma(x, w, acc)`, then
//! the epilogue. So this arm's bits are the direct arm's; the planner
//! chooses between them by price alone.
//!
//! # Packing ([`GROUPED_LAYOUT`])
//!
//! Channel `co` at lane `co % 16` of panel `co / 16` (`⌈cout / 16⌉`
//! panels; panel `p` holds the groups from `g0 = 16p / cout_g`, lane `l`
//! channel `(g0 + l / cout_g) · cout_g + l % cout_g`): the bias lines,
//! then per (panel, kh, kw, ci) one line of `w[co, kh, kw, ci]`, lanes
//! past `cout` `+0.0` ([`crate::pack`]).
//!
//! # Bodies
//!
//! The arm ([`arm`]): the direct arm's walk (panels outermost, rows, a
//! checked left border, unchecked tiles of two pixels, a checked rest)
//! with each f32x4 of the panel broadcasting its own group's x (at
//! `cout_g` 1 and 2, loading its lanes' x one by one). The AVX-512 twin
//! ([`x64`]): tiles of 8, 4, 2 and 1 pixels × one zmm panel, a panel's
//! input channels loaded once a tap and permuted per `ci` (`vpermps`, or
//! `vpermi2ps` across two loads). The AVX2 twin: the panel as two ymm
//! halves, each permuting its own groups' channels (`vpermps`; two loads
//! blended by the index's bit 3 when a half's channels exceed 8), tiles
//! of 2 pixels (1 with two loads).
//!
//! The NEON twin ([`a64`]): the same walk with tiles of 6, 4, 2 and 1
//! pixels × the panel (four `.4s` vectors), one body a `cout_g` picked at
//! entry: at `cout_g` 4 and 8 each vector's x is one `ldr s` and an
//! `fmla` by element; at 1 and 2 lane loads (`ld1 {t.s}[i]`, and `zip1`
//! to pair the lanes at 2) build each vector's x for a vector `fmla`. The
//! ragged last panel runs one pixel at a time with each lane's x offset
//! clamped to the panel's last existing group.

pub mod a64;
pub mod arm;
pub mod validation;
pub mod x64;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use weft_kernel::{Family, Host, Isa, LoopTrip, NativeCode, Offer, Refusal, Site};

use crate::pack::PackedFilter;
use crate::{bad, contract, ConvGeometry, Shape, DIRECT, PANEL};

/// The arm's candidate name.
pub const NAME: &str = "conv.direct.grouped";

/// The packed layout's name, as offers and twins check it.
pub const GROUPED_LAYOUT: &str = "conv.direct.grouped.bias+lanes16";

/// Output pixels in the arm's interior tile.
pub const ARM_PIXELS: u64 = 2;

/// Whether the arm computes `g` (`unsupported-geometry`, naming why, if not).
pub fn serves(g: &ConvGeometry) -> Result<(), Refusal> {
    let groups = g.groups.max(1);
    let (cin_g, cout_g) = (g.cin / groups, g.cout / groups);
    let why = if g.groups <= 1 {
        Some(format!("groups = {}, not above 1", g.groups))
    } else if crate::family_of(g) != DIRECT {
        Some("groups = cin = cout is conv.depthwise's".to_owned())
    } else if !g.cin.is_multiple_of(groups) || !g.cout.is_multiple_of(groups) {
        Some(format!(
            "cin = {}, cout = {} not multiples of {groups} groups",
            g.cin, g.cout
        ))
    } else if ![1, 2, 4, 8].contains(&cout_g) {
        Some(format!("cout / groups = {cout_g}, not 1, 2, 4 or 8"))
    } else if (PANEL as u64 / cout_g) * cin_g > 2 * PANEL as u64 {
        Some(format!(
            "a panel's {} input channels (16 / cout_g · cin_g) exceed 32",
            (PANEL as u64 / cout_g) * cin_g
        ))
    } else {
        None
    };
    match why {
        Some(reason) => Err(Refusal::UnsupportedGeometry {
            reason: format!(
                "{NAME} serves groups > 1 with cout / groups of 1, 2, 4 or 8 and at most 32 \
                 input channels a panel: {reason}"
            ),
        }),
        None => Ok(()),
    }
}

/// Panels of 16 output channels (`⌈cout / 16⌉`).
pub fn panels(g: &ConvGeometry) -> u64 {
    g.cout.div_ceil(PANEL as u64)
}

fn trip(name: &str, trips: u64, depth: u32) -> LoopTrip {
    LoopTrip {
        name: name.to_owned(),
        trips,
        depth,
    }
}

/// The arm's loop nest at `g` for a call over every row ([`arm`]).
pub fn nest(g: &ConvGeometry, s: &Shape) -> Vec<LoopTrip> {
    let mut out = vec![
        trip("panels", panels(g), 0),
        trip("rows", g.batch * s.out_h, 1),
    ];
    let tiles = (s.ow_hi - s.ow_lo) / ARM_PIXELS;
    for (name, trips) in [
        ("left", s.ow_lo),
        ("tiles", tiles),
        ("rest", s.out_w - s.ow_lo - tiles * ARM_PIXELS),
    ] {
        out.push(trip(name, trips, 2));
        out.push(trip("kh", g.k_h, 3));
        out.push(trip("kw", g.k_w, 4));
        // The broadcast ci loop, then the lane-by-lane one (module docs
        // of [`arm`]); the one not taken has zero trips.
        let small = u64::from(g.cout / g.groups < 4);
        out.push(trip("ci", (1 - small) * (g.cin / g.groups), 5));
        out.push(trip("ci_lanes", small * (g.cin / g.groups), 5));
    }
    out
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
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
    let packed = PackedFilter::pack_grouped(&g, &f32s(&w.bytes), bias.as_deref())?;
    let operand = packed.operand();
    let bytes = 4 * (g.x_len() + g.y_len(&s)) as u64 + operand.bytes.len() as u64;
    Ok(Offer {
        contract: contract(DIRECT, &site.geometry),
        packed: vec![operand],
        views: Some(crate::arm::views(&g, &s)),
        loops: crate::silu::after(nest(&g, &s), &g, &s, 4, false),
        flops: 2 * g.macs(&s),
        bytes_moved: bytes,
    })
}

/// The arm as a [`weft_kernel::Arm`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupedArm;

// SAFETY: the body reads x only inside `batch × in_h × in_w × cin` (taps
// outside skipped; a vector of a group past the last reads the last
// group's channels), the packed filter's lines, and writes y only in its
// rows `row_start..row_end` and channels below cout; it returns.
// Validation checks it against the reference.
unsafe impl weft_kernel::Arm for GroupedArm {
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

/// `offer` is a grouped offer of `conv.direct` (`name` refuses otherwise).
pub(crate) fn check_offer(name: &str, offer: &Offer) -> Result<(), Refusal> {
    crate::check_offer(name, offer, DIRECT, Some(GROUPED_LAYOUT))
}

/// The grouped arm's registration: the arm, its AVX-512 and AVX2 twins
/// ([`x64::twins`]) and its NEON twin ([`a64::twins`]), its check (on the
/// grouped cases, against the arm) and the family's bench.
pub fn arm_entry() -> weft_kernel::ArmEntry {
    use weft_validate::Checker;
    weft_kernel::ArmEntry::new(
        Arc::new(GroupedArm),
        x64::twins().into_iter().chain(a64::twins()).collect(),
        Arc::new(Checker(validation::GroupedValidation)),
        Some(Arc::new(crate::validation::ConvBench(
            crate::arm::ArmKind::Direct,
        ))),
    )
}
