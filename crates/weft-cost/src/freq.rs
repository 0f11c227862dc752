//! How often each block runs: the loops found in the bytes matched to the
//! candidate's nest, trip counts multiplied down the nesting, and a stated
//! static rule for blocks reached conditionally.
//!
//! # Matching
//!
//! The nest lists loops outermost first, each followed by the loops nested
//! in it, siblings in code order, with their depths. The loops found in the
//! bytes are listed the same way ([`crate::cfg::Cfg::loops`]); the two lists
//! must have the same length and the same depths, else the price is refused
//! as `nest-mismatch`.
//!
//! # The execution estimate
//!
//! Each entry of a loop runs its `trips` iterations. Inside one iteration
//! (or one call, for code outside every loop) a unit of *iteration mass*
//! starts at the header and flows forward; a second kind, *entry mass*,
//! stands for work done once per entry of the loop (the failing test of a
//! top-tested loop, a tail pass). At each two-way branch the first rule that
//! applies decides the split:
//!
//! 1. **Loop structure.** A back edge ends the iteration; an exit edge leaves
//!    the loop once per entry, so iteration mass stays inside. Entry mass at
//!    the header of a top-tested loop leaves through its exit (the header
//!    runs `trips + 1` times per entry).
//! 2. **Loop guard.** A branch that either enters an inner loop's header or
//!    skips to that loop's exit goes into the loop when its trip count is
//!    non-zero, past it otherwise.
//!    **Path guard.** Otherwise, a branch one of whose sides dominates
//!    loops that all have zero trips while the other dominates a loop with
//!    trips goes the second way: the geometry chose between two paths (a
//!    body with a packed copy of its operand, or without).
//!    **Early out.** Outside every loop, a branch one of whose sides can
//!    reach no loop (it returns without work: an empty range, a degenerate
//!    argument) while the other dominates a loop with trips goes the
//!    second way: at this geometry the call has work.
//! 3. **Rare lanes.** A branch whose condition comes (within its block) from
//!    an all-lanes vector test (`vptest`, `kortest`, a vector-to-general
//!    register move, arm64 `umov`/`fmov`) guards per-lane exceptional work:
//!    the side that goes round the loop again (a latch) — or, when neither
//!    or both do, the side that is the branch's post-dominator — is taken,
//!    the other never (such blocks are counted as rare).
//! 4. **Epilogue.** When both sides stay in the loop and only one of them can
//!    reach an exit of the loop without passing its header or a latch — or
//!    both can, and only the other dominates every latch — that side is the
//!    loop's way out (a tail pass): it runs once per entry, not once per
//!    iteration.
//! 5. **Otherwise** each side gets half (the static default of Wu and Larus,
//!    "Static branch frequency and program profile analysis", MICRO 1994).
//!    Entry mass at a non-header exit also splits half and half.
//!
//! Rule 5 is what prices a tail that the geometry decides (a `blocks % 4`
//! remainder written as guarded copies): a chain of `k` guarded blocks is
//! priced at `1/2 + 1/4 + … + 1/2^k` executions per iteration.

use weft_kernel::LoopTrip;

use crate::cfg::Cfg;
use crate::decode::{Decoded, Flow, Reg};
use crate::CostError;

/// Executions per call of every block and loop.
#[derive(Clone, Debug)]
pub(crate) struct Estimate {
    /// Executions of each block per call.
    pub(crate) count: Vec<f64>,
    /// Per block: iteration mass (runs per iteration of its innermost loop).
    pub(crate) per_iteration: Vec<f64>,
    /// Per block: entry mass (runs per entry of its innermost loop).
    pub(crate) per_entry: Vec<f64>,
    /// Entries per call of each loop.
    pub(crate) entries: Vec<f64>,
    /// Iterations per call of each loop (entries × trips).
    pub(crate) iterations: Vec<f64>,
    /// Blocks priced as never run by the rare-lanes rule.
    pub(crate) rare_blocks: u32,
}

/// Check `nest` against the loops of `cfg`.
pub(crate) fn match_nest(cfg: &Cfg, nest: &[LoopTrip]) -> Result<Vec<u64>, CostError> {
    let found: Vec<u32> = cfg.loops.iter().map(|l| l.depth).collect();
    let stated: Vec<u32> = nest.iter().map(|t| t.depth).collect();
    if found != stated {
        return Err(CostError::NestMismatch {
            found: describe_found(cfg),
            stated: describe_nest(nest),
        });
    }
    Ok(nest.iter().map(|t| t.trips).collect())
}

fn describe_found(cfg: &Cfg) -> String {
    let parts: Vec<String> = cfg
        .loops
        .iter()
        .map(|l| format!("@{:#x}:{}", cfg.blocks[l.header].offset, l.depth))
        .collect();
    format!("[{}]", parts.join(", "))
}

fn describe_nest(nest: &[LoopTrip]) -> String {
    let parts: Vec<String> = nest
        .iter()
        .map(|t| format!("{}:{}", t.name, t.depth))
        .collect();
    format!("[{}]", parts.join(", "))
}

/// Which successor of each two-way block the rare-lanes rule never takes.
pub(crate) fn rare_edges(code: &Decoded, cfg: &Cfg) -> Vec<Option<usize>> {
    let mut rare = vec![None; cfg.blocks.len()];
    let latch_blocks: Vec<bool> = (0..cfg.blocks.len())
        .map(|b| cfg.loops.iter().any(|l| l.latches.contains(&b)))
        .collect();
    for (b, block) in cfg.blocks.iter().enumerate() {
        if block.succs.len() != 2 || !branch_tests_lanes(code, block.first, block.end) {
            continue;
        }
        // The common side goes round the loop again (a latch) or rejoins
        // (the post-dominator); the latch decides when both qualify.
        let (s0, s1) = (block.succs[0], block.succs[1]);
        let by = |common: &dyn Fn(usize) -> bool| match (common(s0), common(s1)) {
            (true, false) => Some(s1),
            (false, true) => Some(s0),
            _ => None,
        };
        rare[b] = by(&|s| latch_blocks[s]).or_else(|| by(&|s| cfg.ipdom[b] == Some(s)));
    }
    rare
}

/// Whether the branch ending instructions `first..end` decides on a value
/// that came, within the block, from a vector lane test.
fn branch_tests_lanes(code: &Decoded, first: usize, end: usize) -> bool {
    let insts = &code.insts[first..end];
    let Some((last, body)) = insts.split_last() else {
        return false;
    };
    if !matches!(last.flow, Flow::Branch(_)) {
        return false;
    }
    // Registers whose producers we still look for, walking backwards.
    let mut wanted: Vec<Reg> = last.reads.iter().collect();
    for inst in body.iter().rev() {
        if wanted.is_empty() {
            break;
        }
        let produces: Vec<Reg> = inst.writes.iter().filter(|w| wanted.contains(w)).collect();
        if produces.is_empty() {
            continue;
        }
        if inst.lane_test {
            return true;
        }
        wanted.retain(|w| !produces.contains(w));
        for r in inst.reads.iter() {
            if !wanted.contains(&r) && wanted.len() < 8 {
                wanted.push(r);
            }
        }
    }
    false
}

/// A node of one region's acyclic flow graph: one of its own blocks, or a
/// loop nested in it, seen from outside as one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    Block(usize),
    Loop(usize),
}

/// The region a block belongs to at `region`'s level: itself, a child
/// loop, or nothing (outside `region`).
fn node_of(cfg: &Cfg, region: Option<usize>, b: usize) -> Option<Node> {
    if let Some(r) = region {
        if !cfg.in_loop(r, b) {
            return None;
        }
    }
    // The outermost loop below `region` containing `b`.
    let mut l = cfg.loop_of[b];
    let mut child = None;
    while let Some(x) = l {
        if Some(x) == region {
            break;
        }
        child = Some(x);
        l = cfg.loops[x].parent;
    }
    Some(match child {
        Some(c) => Node::Loop(c),
        None => Node::Block(b),
    })
}

/// One region's flow graph, precomputed from the bytes alone.
#[derive(Clone, Debug)]
struct RegionGraph {
    /// Nodes in reverse post-order.
    nodes: Vec<Node>,
    /// Per node: the successors that stay in the region (block, node
    /// index), forward only.
    succs: Vec<Vec<(usize, usize)>>,
    /// Per node: whether some successor leaves the region (an exit, a back
    /// edge, a return).
    leaves: Vec<bool>,
    /// The start node.
    start: Option<usize>,
    /// The header tests the loop's exit (a top-tested loop).
    header_exits: bool,
}

/// Everything the estimate needs that depends only on the bytes.
#[derive(Clone, Debug)]
pub(crate) struct Shape {
    rare: Vec<Option<usize>>,
    /// Per loop, per block: the block reaches an exit of the loop without
    /// passing its header or a latch (rule 4).
    exit_reach: Vec<Vec<bool>>,
    /// Region 0 is the function, region `1 + l` loop `l`.
    regions: Vec<RegionGraph>,
}

impl Shape {
    /// Precompute the flow graphs of `cfg`.
    pub(crate) fn of(code: &Decoded, cfg: &Cfg) -> Shape {
        let nb = cfg.blocks.len();
        let nl = cfg.loops.len();
        let rare = rare_edges(code, cfg);
        let exit_reach = (0..nl).map(|l| exit_reach(cfg, l, &rare)).collect();
        let mut order = vec![usize::MAX; nb];
        for (k, &b) in cfg.rpo.iter().enumerate() {
            order[b] = k;
        }
        let regions = std::iter::once(None)
            .chain((0..nl).map(Some))
            .map(|region| {
                let mut nodes: Vec<(usize, Node)> = Vec::new();
                for b in 0..nb {
                    if order[b] == usize::MAX {
                        continue;
                    }
                    match node_of(cfg, region, b) {
                        Some(Node::Block(x)) => nodes.push((order[x], Node::Block(x))),
                        Some(Node::Loop(c)) if cfg.loops[c].header == b => {
                            nodes.push((order[b], Node::Loop(c)))
                        }
                        _ => {}
                    }
                }
                nodes.sort_by_key(|(k, _)| *k);
                let nodes: Vec<Node> = nodes.into_iter().map(|(_, n)| n).collect();
                let mut block_index = vec![usize::MAX; nb];
                let mut loop_index = vec![usize::MAX; nl];
                for (i, n) in nodes.iter().enumerate() {
                    match n {
                        Node::Block(b) => block_index[*b] = i,
                        Node::Loop(c) => loop_index[*c] = i,
                    }
                }
                let index_of = |s: usize| match node_of(cfg, region, s) {
                    Some(Node::Block(b)) => Some(block_index[b]),
                    Some(Node::Loop(c)) => Some(loop_index[c]),
                    None => None,
                };
                let header = region.map(|l| cfg.loops[l].header);
                let mut succs = Vec::with_capacity(nodes.len());
                let mut leaves = Vec::with_capacity(nodes.len());
                for (k, n) in nodes.iter().enumerate() {
                    let out: Vec<usize> = match *n {
                        Node::Block(b) => cfg.blocks[b].succs.clone(),
                        Node::Loop(c) => {
                            // One share per exit edge of the child loop.
                            let mut exits = Vec::new();
                            for &x in &cfg.loops[c].blocks {
                                for &s in &cfg.blocks[x].succs {
                                    if !cfg.in_loop(c, s) {
                                        exits.push(s);
                                    }
                                }
                            }
                            exits
                        }
                    };
                    let inside: Vec<(usize, usize)> = out
                        .iter()
                        .copied()
                        .filter(|&s| Some(s) != header)
                        .filter_map(|s| {
                            index_of(s)
                                .filter(|&i| i != usize::MAX && i > k)
                                .map(|i| (s, i))
                        })
                        .collect();
                    leaves.push(inside.len() < out.len());
                    succs.push(inside);
                }
                let start = match region {
                    // The entry may itself head a loop.
                    None => index_of(0),
                    Some(l) => Some(block_index[cfg.loops[l].header]),
                }
                .filter(|&i| i != usize::MAX);
                // A top-tested loop: the header tests the exit and is not
                // itself the bottom of the loop (a one-block loop is
                // bottom-tested).
                let header_exits = region.is_some_and(|l| {
                    let lp = &cfg.loops[l];
                    let h = lp.header;
                    !lp.latches.contains(&h)
                        && cfg.blocks[h].succs.iter().any(|&s| !cfg.in_loop(l, s))
                });
                RegionGraph {
                    nodes,
                    succs,
                    leaves,
                    start,
                    header_exits,
                }
            })
            .collect();
        Shape {
            rare,
            exit_reach,
            regions,
        }
    }
}

/// Estimate executions per call with the rules of the module docs.
pub(crate) fn estimate(shape: &Shape, cfg: &Cfg, trips: &[u64]) -> Estimate {
    let nb = cfg.blocks.len();
    let nl = cfg.loops.len();
    let mut est = Estimate {
        count: vec![0.0; nb],
        per_iteration: vec![0.0; nb],
        per_entry: vec![0.0; nb],
        entries: vec![0.0; nl],
        iterations: vec![0.0; nl],
        rare_blocks: 0,
    };
    // Loop entry masses, filled in as parents are processed (parents come
    // first in the pre-order).
    let mut entry_in: Vec<(f64, f64)> = vec![(0.0, 0.0); nl];
    for (r, g) in shape.regions.iter().enumerate() {
        let region = r.checked_sub(1);
        let (iters, entries) = match region {
            None => (1.0, 1.0),
            Some(l) => {
                let (a, e) = entry_in[l];
                let parent_iters = cfg.loops[l].parent.map_or(1.0, |p| est.iterations[p]);
                let parent_entries = cfg.loops[l].parent.map_or(1.0, |p| est.entries[p]);
                let entries = a * parent_iters + e * parent_entries;
                est.entries[l] = entries;
                est.iterations[l] = entries * trips[l] as f64;
                (est.iterations[l], entries)
            }
        };
        let mut mass: Vec<(f64, f64)> = vec![(0.0, 0.0); g.nodes.len()];
        if let Some(i) = g.start {
            mass[i] = (1.0, if g.header_exits { 1.0 } else { 0.0 });
        }
        for k in 0..g.nodes.len() {
            let (a, e) = mass[k];
            let inside = &g.succs[k];
            match (g.nodes[k], inside.as_slice()) {
                (Node::Block(b), _) => {
                    est.per_iteration[b] = a;
                    est.per_entry[b] = e;
                    est.count[b] = a * iters + e * entries;
                }
                (Node::Loop(c), _) => entry_in[c] = (a, e),
            }
            let mut push = |i: usize, da: f64, de: f64| {
                mass[i].0 += da;
                mass[i].1 += de;
            };
            match (g.nodes[k], inside.as_slice()) {
                (_, []) => {}
                (Node::Loop(_), targets) => {
                    let share = 1.0 / targets.len() as f64;
                    for &(_, i) in targets {
                        push(i, a * share, e * share);
                    }
                }
                (Node::Block(b), [(_, i)]) => {
                    // One way on inside; the other (if any) leaves the region.
                    let is_header = region.is_some_and(|l| cfg.loops[l].header == b);
                    let e_on = match (g.leaves[k], is_header) {
                        (false, _) => e,
                        (true, true) => 0.0,
                        (true, false) => e * 0.5,
                    };
                    push(*i, a, e_on);
                }
                (Node::Block(b), [(s0, i0), (s1, i1), ..]) => {
                    let (s0, i0, s1, i1) = (*s0, *i0, *s1, *i1);
                    let at = |s: usize| if s == s0 { i0 } else { i1 };
                    match decide(shape, cfg, region, b, s0, s1, trips) {
                        Split::Only(s, other) => {
                            push(at(s), a, e);
                            if shape.rare[b] == Some(other) {
                                est.rare_blocks += 1;
                            }
                        }
                        Split::Epilogue { body, out } => {
                            push(at(body), a, 0.0);
                            push(at(out), 0.0, a + e);
                        }
                        Split::Half => {
                            push(i0, a * 0.5, e * 0.5);
                            push(i1, a * 0.5, e * 0.5);
                        }
                    }
                }
            }
        }
    }
    est
}

/// How a two-way branch inside a region splits.
enum Split {
    /// All to the first, none to the second.
    Only(usize, usize),
    /// Iteration mass to `body`, the rest once per entry to `out`.
    Epilogue { body: usize, out: usize },
    /// Half each.
    Half,
}

fn decide(
    shape: &Shape,
    cfg: &Cfg,
    region: Option<usize>,
    b: usize,
    s0: usize,
    s1: usize,
    trips: &[u64],
) -> Split {
    // Rule 2: a guard around an inner loop.
    for (into, past) in [(s0, s1), (s1, s0)] {
        if let Some(c) = cfg.loops.iter().position(|l| l.header == into) {
            let l = &cfg.loops[c];
            let exits_to_past = l
                .blocks
                .iter()
                .any(|&x| cfg.blocks[x].succs.contains(&past));
            if !l.contains(b) && exits_to_past {
                return if trips[c] > 0 {
                    Split::Only(into, past)
                } else {
                    Split::Only(past, into)
                };
            }
        }
    }
    // Rule 2b: a path guard, choosing between regions of loops. The loops
    // a side leads to are the outermost of those whose headers it
    // dominates (an inner loop's trips count only when its parent runs).
    let led_to = |s: usize| {
        let dominated = |l: &crate::cfg::Loop| !l.contains(b) && cfg.dominates(s, l.header);
        cfg.loops
            .iter()
            .enumerate()
            .filter(move |(_, l)| {
                dominated(l) && !l.parent.is_some_and(|p| dominated(&cfg.loops[p]))
            })
            .map(|(c, _)| c)
            .collect::<Vec<_>>()
    };
    let zero_only = |s: usize| {
        let led = led_to(s);
        !led.is_empty() && led.iter().all(|&c| trips[c] == 0)
    };
    let runs_some = |s: usize| led_to(s).iter().any(|&c| trips[c] > 0);
    for (dead, live) in [(s0, s1), (s1, s0)] {
        if zero_only(dead) && runs_some(live) {
            return Split::Only(live, dead);
        }
    }
    // Rule 2c: an early out. Outside every loop, a side from which no loop
    // can be reached leaves the call without work; when the other side
    // leads to a loop that runs, the geometry says there is work to do.
    if region.is_none() {
        for (out, live) in [(s0, s1), (s1, s0)] {
            if !reaches_a_loop(cfg, out) && runs_some(live) {
                return Split::Only(live, out);
            }
        }
    }
    // Rule 3: rare lanes.
    if let Some(r) = shape.rare[b] {
        let common = if r == s0 { s1 } else { s0 };
        return Split::Only(common, r);
    }
    // Rule 4: the loop's way out.
    if let Some(l) = region {
        let reach0 = shape.exit_reach[l][s0];
        let reach1 = shape.exit_reach[l][s1];
        let dominates_latches =
            |s: usize| cfg.loops[l].latches.iter().all(|&x| cfg.dominates(s, x));
        match (reach0, reach1) {
            (true, false) => return Split::Epilogue { body: s1, out: s0 },
            (false, true) => return Split::Epilogue { body: s0, out: s1 },
            (true, true) => match (dominates_latches(s0), dominates_latches(s1)) {
                (true, false) => return Split::Epilogue { body: s0, out: s1 },
                (false, true) => return Split::Epilogue { body: s1, out: s0 },
                _ => {}
            },
            (false, false) => {}
        }
    }
    Split::Half
}

/// Whether the header of some loop can be reached from block `from`.
fn reaches_a_loop(cfg: &Cfg, from: usize) -> bool {
    let mut seen = vec![false; cfg.blocks.len()];
    let mut work = vec![from];
    while let Some(x) = work.pop() {
        if std::mem::replace(&mut seen[x], true) {
            continue;
        }
        if cfg.loops.iter().any(|l| l.header == x) {
            return true;
        }
        work.extend(cfg.blocks[x].succs.iter().copied());
    }
    false
}

/// Per block: whether some exit of loop `l` is reachable from it without
/// passing through `l`'s header or one of its latches (the exit at the
/// bottom of a loop is where every iteration goes, not a way out of the
/// iteration) and without taking a rare edge.
fn exit_reach(cfg: &Cfg, l: usize, rare: &[Option<usize>]) -> Vec<bool> {
    let lp = &cfg.loops[l];
    let excluded = |x: usize| x == lp.header || lp.latches.contains(&x);
    let mut reach = vec![false; cfg.blocks.len()];
    let mut work: Vec<usize> = lp
        .blocks
        .iter()
        .copied()
        .filter(|&x| !excluded(x))
        .filter(|&x| {
            cfg.blocks[x]
                .succs
                .iter()
                .any(|&s| !lp.contains(s) && rare[x] != Some(s))
        })
        .collect();
    while let Some(x) = work.pop() {
        if reach[x] {
            continue;
        }
        reach[x] = true;
        for &p in &cfg.blocks[x].preds {
            if lp.contains(p) && !excluded(p) && !reach[p] && rare[p] != Some(x) {
                work.push(p);
            }
        }
    }
    reach
}
