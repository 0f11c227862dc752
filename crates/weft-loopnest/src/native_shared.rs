//! What both native lowerings ([`crate::native_x64`], [`crate::native_a64`])
//! read off a nest the same way: which loops are innermost (vectorised),
//! how many steps each loop and reduction takes at a vector width (the
//! trip counts weft-cost prices), and an access's loop-invariant base.
//! Only the width differs between the ISAs, so it is a parameter here.

use weft_kernel::LoopTrip;

use crate::ir::{Affine, Extent, Loop, ParamId, Reduce, ReduceOp, Stmt, Term, VarId};

/// A loop whose body is only `Let`s and `Store`s: the one a lowering
/// vectorises, `lanes` iterations a step.
pub(crate) fn innermost(l: &Loop) -> bool {
    l.body
        .iter()
        .all(|s| matches!(s, Stmt::Let { .. } | Stmt::Store { .. }))
}

/// Lanes one step of reduction `r` folds at a vector width of `lanes`:
/// a sum's own lanes; argmax at least four registers' worth.
pub(crate) fn reduce_lanes(r: &Reduce, lanes: u32) -> u32 {
    match r.op {
        ReduceOp::Sum => r.lanes,
        ReduceOp::ArgMax => r.lanes.max(4 * lanes),
    }
}

/// The loops of `body` at `depth` and below with their trip counts at a
/// vector width of `lanes` (innermost loops step `lanes` iterations,
/// reductions a group of [`reduce_lanes`]), in the order they appear.
pub(crate) fn trips(
    body: &[Stmt],
    depth: u32,
    lanes: u32,
    value: &dyn Fn(ParamId) -> u64,
    out: &mut Vec<LoopTrip>,
) {
    let ext = |e: Extent| match e {
        Extent::Const(c) => c,
        Extent::Param(p) => value(p),
    };
    for s in body {
        match s {
            Stmt::Loop(l) => {
                let n = ext(l.end).saturating_sub(ext(l.start));
                let count = if innermost(l) {
                    n / u64::from(lanes)
                } else {
                    n
                };
                out.push(LoopTrip {
                    name: l.name.to_owned(),
                    trips: count,
                    depth,
                });
                trips(&l.body, depth + 1, lanes, value, out);
            }
            Stmt::Reduce(r) => {
                let groups = (r.end - r.start) / u64::from(reduce_lanes(r, lanes));
                if groups > 0 {
                    out.push(LoopTrip {
                        name: r.name.to_owned(),
                        trips: groups,
                        depth,
                    });
                }
            }
            _ => {}
        }
    }
}

/// An access's loop-invariant part: the buffer and its index with the
/// loop variable's term removed, in bytes of `size`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BaseKey {
    pub(crate) buf: ParamId,
    pub(crate) rest: Affine,
    pub(crate) size: u64,
}

/// The base of an access to `buf` at `at` in a loop over `var`.
pub(crate) fn base_key(buf: ParamId, at: &Affine, var: VarId, size: u64) -> BaseKey {
    BaseKey {
        buf,
        rest: Affine {
            terms: at
                .terms
                .iter()
                .filter(|(_, t)| *t != Term::Var(var))
                .copied()
                .collect(),
            constant: at.constant,
        },
        size,
    }
}

/// Elements a map's one loop covers (`end - start` at the geometry): what
/// sizes a map-route body's loops ([`crate::map_route`]).
pub(crate) fn map_elements(kernel: &crate::ir::Kernel, value: &dyn Fn(ParamId) -> u64) -> u64 {
    let ext = |e: Extent| match e {
        Extent::Const(c) => c,
        Extent::Param(p) => value(p),
    };
    match kernel.body.first() {
        Some(Stmt::Loop(l)) => ext(l.end).saturating_sub(ext(l.start)),
        _ => 0,
    }
}
