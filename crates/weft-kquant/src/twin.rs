//! What every twin of these families shares, whichever its ISA: the
//! checks of an offer before emitting, and the loop nest (rows outermost,
//! then the batch's vectors, then every block of the row, so each row is
//! one linear stream) that the [`x64`](crate::x64) and
//! [`a64`](crate::a64) frames both emit.

use weft_kernel::{LoopTrip, Offer, Refusal};
use weft_quant::Format;

/// The loops, outermost first, with their depths.
pub(crate) const LOOPS: [(&str, u32); 3] = [("rows", 0), ("batch", 1), ("blocks", 2)];

/// The loop that fills a body's per-call table (one entry per activation
/// block of every vector), before the rows, with its depth.
pub(crate) const TABLE_LOOP: (&str, u32) = ("table", 0);

/// The checks every K-quant twin (either ISA) makes of `offer` before it
/// emits: `family`'s contract, no packed operand, and a geometry the
/// contract admits for weights of `w`.
pub(crate) fn check_offer(
    w: Format,
    who: &str,
    family: &str,
    offer: &Offer,
) -> Result<(), Refusal> {
    if offer.contract.family != family || offer.contract.args != crate::ARGS_NAME {
        return Err(Refusal::UnsupportedGeometry {
            reason: format!(
                "{who} serves {family} with {}, not {} with {}",
                crate::ARGS_NAME,
                offer.contract.family,
                offer.contract.args
            ),
        });
    }
    if let Some(p) = offer.packed.first() {
        return Err(Refusal::UnknownLayout {
            layout: p.layout.to_owned(),
        });
    }
    crate::site_dims(&offer.contract.geometry, w)?;
    Ok(())
}

/// The loop nest of every twin for weights of `w` at `offer`'s geometry:
/// rows, the batch's vectors, every block of a row.
pub(crate) fn nest(offer: &Offer, w: Format) -> Vec<LoopTrip> {
    let g = &offer.contract.geometry;
    let trips = [
        g.get("rows").unwrap_or(0),
        g.get("batch").unwrap_or(1),
        g.get("cols").unwrap_or(0) / w.block_len() as u64,
    ];
    LOOPS
        .iter()
        .zip(trips)
        .map(|(&(name, depth), trips)| LoopTrip {
            name: name.to_owned(),
            trips,
            depth,
        })
        .collect()
}

/// [`nest`] after the loop that fills a per-call table: the batch's
/// activation blocks, once.
pub(crate) fn nest_with_table(offer: &Offer, w: Format) -> Vec<LoopTrip> {
    let g = &offer.contract.geometry;
    let blocks = g.get("cols").unwrap_or(0) / w.block_len() as u64;
    let table = LoopTrip {
        name: TABLE_LOOP.0.to_owned(),
        trips: g.get("batch").unwrap_or(1) * blocks,
        depth: TABLE_LOOP.1,
    };
    std::iter::once(table).chain(nest(offer, w)).collect()
}
