//! Cycles for one region (a loop, or the code outside every loop): port
//! pressure, issue width and dependency chains over its instructions,
//! weighted by how often each block runs.
//!
//! Per iteration of a loop the bound is the largest of
//!
//! - **port pressure**: for every union `U` of the port sets the region's
//!   µops may use, the cycles of work that must run inside `U` divided by
//!   `|U|` (the exact lower bound of scheduling that work on those ports);
//! - **issue**: µops over the core's issue width;
//! - **recurrence**: the loop-carried dependency chain, as the maximum cycle
//!   mean (Karp, 1978) of the graph "value at the start of an iteration →
//!   value at its end" over registers and stack slots, with latencies from
//!   the table;
//! - **taken branches**: one per cycle;
//! - **window**: the critical path of one iteration (loop-carried or not)
//!   divided by the number of iterations the reorder window holds
//!   (`window / µops per iteration`): a long chain inside each iteration is
//!   hidden only by overlapping that many iterations;
//! - **scheduler** (tables that measured it): an iteration of `U` µops
//!   overlaps the next by only the `S` µops the schedulers hold waiting,
//!   so `(U − S) / U` of its critical path is exposed. On Zen 5 a chain
//!   is hidden by 67 µops, not by the 448 the reorder buffer holds.
//!
//! Work that runs once per entry of the loop (its tail pass) is priced by
//! ports and issue alone. Code outside every loop adds its critical path
//! (it runs once, so its latency is not hidden).

use std::collections::BTreeMap;

use weft_kernel::Isa;

use crate::cfg::Cfg;
use crate::class::{Class, Width};
use crate::decode::{Access, Decoded, Inst, Reg, Regs};
use crate::freq::Estimate;
use crate::table::PortTable;

/// What limits a loop iteration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bound {
    /// The busiest set of ports (their names joined by `|`).
    Ports(String),
    /// The issue width.
    Issue,
    /// A loop-carried dependency chain.
    Recurrence,
    /// One taken branch per cycle.
    TakenBranch,
    /// An iteration's critical path over the iterations the reorder window
    /// holds.
    Window,
    /// Instruction counts (no port table for this host).
    InstructionCount,
}

/// Cost of one region.
#[derive(Clone, Debug)]
pub(crate) struct RegionCost {
    /// Cycles per iteration (per call for the outside region).
    pub(crate) per_iteration: f64,
    /// What limits it.
    pub(crate) bound: Bound,
    /// Cycles per entry (the tail pass).
    pub(crate) per_entry: f64,
    /// Instructions executed per iteration and per entry.
    pub(crate) insts_per_iteration: f64,
    pub(crate) insts_per_entry: f64,
    /// Instruction offsets of the blocks that run every iteration, in order.
    pub(crate) body: Vec<usize>,
}

/// The µop cost of one instruction under a table, computed once per body.
#[derive(Clone, Debug)]
pub(crate) struct Cost {
    uops: f64,
    usage: Vec<(u32, f64)>,
    latency: f64,
    /// Extra latency for inputs that come through memory.
    load_latency: f64,
}

/// The cost of every instruction of `code` under `table`.
pub(crate) fn costs(table: &PortTable, code: &Decoded) -> Vec<Cost> {
    code.insts.iter().map(|i| cost(table, i)).collect()
}

fn cost(table: &PortTable, inst: &Inst) -> Cost {
    let row = if inst.known {
        table.row(inst.class, inst.width)
    } else {
        table.unknown()
    };
    let mut usage = row.usage.clone();
    let vector = inst.width != Width::Scalar || inst.mem_width != Width::Scalar;
    let (reads_mem, writes_mem) = match inst.memory {
        Access::None => (false, false),
        Access::Read(_) => (true, false),
        Access::Write(_) => (false, true),
        Access::ReadWrite(_) => (true, true),
    };
    let mut load_latency = 0.0;
    if reads_mem && !inst.class.is_memory() {
        let load = if vector {
            table.row(Class::VecLoad, inst.mem_width.max(Width::V128))
        } else {
            table.row(Class::Load, Width::Scalar)
        };
        usage.extend(load.usage.iter().copied());
        load_latency = load.latency;
    }
    if writes_mem && !inst.class.is_memory() {
        let store = if vector {
            table.row(Class::VecStore, inst.mem_width.max(Width::V128))
        } else {
            table.row(Class::Store, Width::Scalar)
        };
        usage.extend(store.usage.iter().copied());
    }
    Cost {
        uops: row.uops + f64::from(inst.extra_uops),
        usage,
        latency: row.latency,
        load_latency,
    }
}

/// Work accumulated over a region: cycles per port-set mask, µops, taken
/// branches.
#[derive(Default)]
struct Work {
    by_mask: BTreeMap<u32, f64>,
    uops: f64,
    insts: f64,
}

impl Work {
    fn add(&mut self, c: &Cost, weight: f64) {
        for &(mask, cycles) in &c.usage {
            *self.by_mask.entry(mask).or_insert(0.0) += cycles * weight;
        }
        self.uops += c.uops * weight;
        self.insts += weight;
    }

    /// The port-pressure bound and the busiest union of port sets.
    fn port_bound(&self) -> (f64, u32) {
        // Independent groups of overlapping masks are bounded separately.
        let masks: Vec<(u32, f64)> = self.by_mask.iter().map(|(m, c)| (*m, *c)).collect();
        let mut groups: Vec<Vec<(u32, f64)>> = Vec::new();
        for (m, c) in masks {
            let overlapping: Vec<usize> = groups
                .iter()
                .enumerate()
                .filter(|(_, g)| g.iter().any(|(x, _)| x & m != 0))
                .map(|(i, _)| i)
                .collect();
            let mut merged = vec![(m, c)];
            for &i in overlapping.iter().rev() {
                merged.extend(groups.remove(i));
            }
            groups.push(merged);
        }
        let mut best = (0.0, 0u32);
        for g in &groups {
            if g.len() > 16 {
                // Too many sets to enumerate: each set alone, and all together.
                for &(m, c) in g {
                    let v = c / f64::from(m.count_ones());
                    if v > best.0 {
                        best = (v, m);
                    }
                }
                let all = g.iter().fold(0, |a, (m, _)| a | m);
                let v = g.iter().map(|(_, c)| c).sum::<f64>() / f64::from(all.count_ones());
                if v > best.0 {
                    best = (v, all);
                }
                continue;
            }
            for subset in 1u32..(1 << g.len()) {
                let union = (0..g.len())
                    .filter(|i| subset & (1 << i) != 0)
                    .fold(0, |a, i| a | g[i].0);
                // All work whose set lies inside the union must run there.
                let inside: f64 = g
                    .iter()
                    .filter(|(m, _)| m & !union == 0)
                    .map(|(_, c)| c)
                    .sum();
                let v = inside / f64::from(union.count_ones());
                if v > best.0 + 1e-12 {
                    best = (v, union);
                }
            }
        }
        best
    }
}

fn port_names(table: &PortTable, mask: u32) -> String {
    (0..table.ports.len())
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| table.ports[i].as_str())
        .collect::<Vec<_>>()
        .join("|")
}

/// Stack memory as pseudo-registers, eight bytes each: an access to
/// `[sp + d]` (or the frame pointer) with no index touches the 8-byte
/// chunks its bytes cover, so a store and a later load of any part of it
/// (a vector spilled and read back as scalars, say) are linked by a
/// dependency.
struct Slots {
    keys: Vec<(u16, i64)>,
}

impl Slots {
    /// The chunks `inst` touches on the stack (at most 8).
    fn of(&mut self, isa: Isa, inst: &Inst) -> Regs {
        let mut out = Regs::default();
        let a = match inst.memory {
            Access::Read(a) | Access::Write(a) | Access::ReadWrite(a) => a,
            Access::None => return out,
        };
        let Some(base) = a.base else {
            return out;
        };
        if a.index.is_some() || !base.is_stack_pointer(isa) {
            return out;
        }
        let bytes = i64::from(inst.mem_bytes.clamp(1, 64));
        let first = a.disp.div_euclid(8);
        let last = (a.disp + bytes - 1).div_euclid(8);
        for chunk in first..=last {
            let key = (base.0, chunk);
            let k = match self.keys.iter().position(|x| *x == key) {
                Some(k) => k,
                None => {
                    self.keys.push(key);
                    self.keys.len() - 1
                }
            };
            out.push(Reg(Reg::SLOTS + k as u16));
        }
        out
    }
}

/// Longest-path dependencies of each register's current value on the
/// values registers had at the start: `(source, cycles)` pairs.
type Deps = Vec<Option<Vec<(u16, f64)>>>;

fn deps_of(deps: &Deps, r: Reg, varying: Option<&[bool]>) -> Vec<(u16, f64)> {
    match deps.get(r.0 as usize).and_then(|d| d.as_ref()) {
        Some(d) => d.clone(),
        // A start value no instruction of the loop writes is the same every
        // iteration: no recurrence runs through it.
        None if varying.is_some_and(|v| !v.get(r.0 as usize).copied().unwrap_or(false)) => {
            Vec::new()
        }
        None => vec![(r.0, 0.0)],
    }
}

/// Run `insts` once through the dependency analysis. Returns, for every
/// register written, its dependencies on the start values, and the longest
/// path seen.
fn chain(
    isa: Isa,
    table: &PortTable,
    insts: &[(&Inst, &Cost)],
    slots: &mut Slots,
    loop_carried: bool,
) -> (Deps, f64) {
    // Bytes of the store that last wrote each stack chunk (from the end of
    // the previous pass, then as this pass goes), to tell a forward of the
    // same bytes from a load of part of a wider store.
    let mut writer: Vec<u32> = Vec::new();
    for &(inst, _) in insts {
        if matches!(inst.memory, Access::Write(_) | Access::ReadWrite(_)) {
            for s in slots.of(isa, inst).iter() {
                let i = (s.0 - Reg::SLOTS) as usize;
                if writer.len() <= i {
                    writer.resize(i + 1, 0);
                }
                writer[i] = inst.mem_bytes;
            }
        }
    }
    let mut deps: Deps = Vec::new();
    let mut longest = 0.0f64;
    // In a loop, only values the loop writes can carry a recurrence.
    let varying: Option<Vec<bool>> = loop_carried.then(|| {
        let mut v = Vec::new();
        let mut mark = |r: Reg| {
            let i = r.0 as usize;
            if v.len() <= i {
                v.resize(i + 1, false);
            }
            v[i] = true;
        };
        for &(inst, _) in insts {
            for w in inst.writes.iter() {
                mark(w);
            }
            if matches!(inst.memory, Access::Write(_) | Access::ReadWrite(_)) {
                for s in slots.of(isa, inst).iter() {
                    mark(s);
                }
            }
        }
        v
    });
    let varying = varying.as_deref();
    // Completion time of every value within one pass, start values at 0:
    // the pass's critical path, loop-carried or not.
    let mut ready: Vec<f64> = Vec::new();
    let at = |ready: &Vec<f64>, r: Reg| ready.get(r.0 as usize).copied().unwrap_or(0.0);
    for &(inst, c) in insts {
        if matches!(inst.class, Class::Branch) {
            continue; // predicted: branches produce no value on the path
        }
        let slot = slots.of(isa, inst);
        let mut merged: BTreeMap<u16, f64> = BTreeMap::new();
        let mut add = |list: Vec<(u16, f64)>, extra: f64| {
            for (s, l) in list {
                let v = l + extra;
                let e = merged.entry(s).or_insert(f64::NEG_INFINITY);
                if v > *e {
                    *e = v;
                }
            }
        };
        let address: Vec<Reg> = match inst.memory {
            Access::Read(a) | Access::Write(a) | Access::ReadWrite(a) => {
                a.base.into_iter().chain(a.index).collect()
            }
            Access::None => Vec::new(),
        };
        let reads_mem = matches!(inst.memory, Access::Read(_) | Access::ReadWrite(_));
        let mem_latency = if inst.class.is_memory() {
            c.latency
        } else {
            c.latency + c.load_latency
        };
        // A load of stack bytes an earlier store wrote waits for the
        // forward, not for the cache.
        let forward = |s: Reg| {
            let wrote = writer
                .get((s.0 - Reg::SLOTS) as usize)
                .copied()
                .unwrap_or(0);
            let through = if wrote > inst.mem_bytes {
                table.forward_partial
            } else if inst.width == Width::Scalar && inst.mem_width == Width::Scalar {
                table.forward_gpr
            } else {
                table.forward_vec
            };
            mem_latency
                - c.load_latency.max(if inst.class.is_memory() {
                    c.latency
                } else {
                    0.0
                })
                + through
        };
        for r in inst.reads.iter() {
            let extra = if address.contains(&r) && reads_mem {
                mem_latency
            } else {
                c.latency
            };
            add(deps_of(&deps, r, varying), extra);
        }
        if reads_mem {
            for s in slot.iter() {
                add(deps_of(&deps, s, varying), forward(s));
            }
        }
        let value: Vec<(u16, f64)> = merged.into_iter().collect();
        let mut done = c.latency;
        for r in inst.reads.iter() {
            let extra = if address.contains(&r) && reads_mem {
                mem_latency
            } else {
                c.latency
            };
            done = done.max(at(&ready, r) + extra);
        }
        if reads_mem {
            for s in slot.iter() {
                done = done.max(at(&ready, s) + forward(s));
            }
        }
        longest = longest.max(done);
        let mut set_ready = |r: Reg| {
            let i = r.0 as usize;
            if ready.len() <= i {
                ready.resize(i + 1, 0.0);
            }
            ready[i] = done;
        };
        for w in inst.writes.iter() {
            set_ready(w);
        }
        if matches!(inst.memory, Access::Write(_) | Access::ReadWrite(_)) {
            for s in slot.iter() {
                set_ready(s);
                let i = (s.0 - Reg::SLOTS) as usize;
                if writer.len() <= i {
                    writer.resize(i + 1, 0);
                }
                writer[i] = inst.mem_bytes;
            }
        }
        let mut write = |r: Reg, v: Vec<(u16, f64)>| {
            let i = r.0 as usize;
            if deps.len() <= i {
                deps.resize(i + 1, None);
            }
            deps[i] = Some(v);
        };
        for w in inst.writes.iter() {
            write(w, value.clone());
        }
        if matches!(inst.memory, Access::Write(_) | Access::ReadWrite(_)) {
            for s in slot.iter() {
                write(s, value.clone());
            }
        }
    }
    (deps, longest)
}

/// Maximum cycle mean of the graph whose edges are `(from, to, weight)`
/// (Karp's algorithm over a virtual source joined to every node).
fn max_cycle_mean(edges: &[(u16, u16, f64)]) -> f64 {
    // Only nodes with both an edge in and an edge out can be on a cycle:
    // drop the others until none is left to drop.
    let mut edges: Vec<(u16, u16, f64)> = edges.to_vec();
    loop {
        let before = edges.len();
        let has_in: std::collections::BTreeSet<u16> = edges.iter().map(|e| e.1).collect();
        let has_out: std::collections::BTreeSet<u16> = edges.iter().map(|e| e.0).collect();
        edges.retain(|e| has_in.contains(&e.0) && has_out.contains(&e.1));
        if edges.len() == before {
            break;
        }
    }
    let mut nodes: Vec<u16> = edges.iter().flat_map(|e| [e.0, e.1]).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let n = nodes.len();
    if n == 0 {
        return 0.0;
    }
    let idx = |r: u16| nodes.binary_search(&r).unwrap_or(0);
    let e: Vec<(usize, usize, f64)> = edges
        .iter()
        .map(|(a, b, w)| (idx(*a), idx(*b), *w))
        .collect();
    // d[k][v]: heaviest walk of exactly k edges from the virtual source
    // (which reaches every node with one 0-weight edge, so k counts from 1).
    let mut d = vec![vec![f64::NEG_INFINITY; n]; n + 1];
    d[0] = vec![0.0; n];
    for k in 1..=n {
        for &(a, b, w) in &e {
            if d[k - 1][a] > f64::NEG_INFINITY {
                let v = d[k - 1][a] + w;
                if v > d[k][b] {
                    d[k][b] = v;
                }
            }
        }
    }
    let mut best = 0.0f64;
    for (v, &last) in d[n].iter().enumerate() {
        if last == f64::NEG_INFINITY {
            continue;
        }
        let worst = d[..n]
            .iter()
            .enumerate()
            .filter(|(_, row)| row[v] > f64::NEG_INFINITY)
            .map(|(k, row)| (last - row[v]) / (n - k) as f64)
            .fold(f64::INFINITY, f64::min);
        if worst.is_finite() {
            best = best.max(worst);
        }
    }
    best
}

/// The cost of `region` (a loop index, or `None` for the code outside
/// every loop) under `table`.
/// Memoised chain results: region, offsets of its every-iteration
/// instructions, (recurrence, critical path).
pub(crate) type ChainMemo = std::sync::Mutex<Vec<(Option<usize>, Vec<usize>, (f64, f64))>>;

#[allow(clippy::too_many_arguments)]
pub(crate) fn region_cost(
    isa: Isa,
    table: &PortTable,
    code: &Decoded,
    costs: &[Cost],
    chains: &ChainMemo,
    cfg: &Cfg,
    est: &Estimate,
    region: Option<usize>,
) -> RegionCost {
    let own: Vec<usize> = cfg
        .rpo
        .iter()
        .copied()
        .filter(|&b| cfg.loop_of[b] == region)
        .collect();
    let mut per_iter = Work::default();
    let mut per_entry = Work::default();
    let mut taken = 0.0;
    let mut every: Vec<(&Inst, &Cost)> = Vec::new();
    for &b in &own {
        let blk = &cfg.blocks[b];
        let (a, e) = match region {
            Some(_) => (est.per_iteration[b], est.per_entry[b]),
            None => (est.per_iteration[b] + est.per_entry[b], 0.0),
        };
        for c in &costs[blk.first..blk.end] {
            if a > 0.0 {
                per_iter.add(c, a);
            }
            if e > 0.0 {
                per_entry.add(c, e);
            }
        }
        // A block that does not fall through to its successor ends in a
        // taken branch; count one per block with more than one way out or
        // an unconditional jump.
        let last = &code.insts[blk.end - 1];
        if matches!(last.flow, crate::decode::Flow::Jump(_)) {
            taken += a;
        } else if matches!(last.flow, crate::decode::Flow::Branch(_)) {
            taken += a * 0.5;
        }
        if a >= 1.0 - 1e-9 {
            every.extend(
                code.insts[blk.first..blk.end]
                    .iter()
                    .zip(&costs[blk.first..blk.end]),
            );
        }
    }
    // The chains depend only on which instructions run every iteration:
    // memoised per region and instruction set, so pricing the same bytes
    // at another geometry does not redo them.
    let key: Vec<usize> = every.iter().map(|(i, _)| i.offset as usize).collect();
    let memo = chains.lock().ok().and_then(|m| {
        m.iter()
            .find(|(r, k, _)| *r == region && *k == key)
            .map(|(_, _, v)| *v)
    });
    let (recurrence, longest) = match memo {
        Some(v) => v,
        None => {
            let mut slots = Slots { keys: Vec::new() };
            let (deps, longest) = chain(isa, table, &every, &mut slots, region.is_some());
            let mut edges = Vec::new();
            if region.is_some() {
                for (to, d) in deps.iter().enumerate() {
                    if let Some(d) = d {
                        for &(from, w) in d {
                            edges.push((from, to as u16, w));
                        }
                    }
                }
            }
            let v = (max_cycle_mean(&edges), longest);
            if let Ok(mut m) = chains.lock() {
                m.push((region, key.clone(), v));
            }
            v
        }
    };
    let (ports, mask) = per_iter.port_bound();
    let issue = per_iter.uops / table.issue;
    let mut candidates = vec![
        (ports, Bound::Ports(port_names(table, mask))),
        (issue, Bound::Issue),
    ];
    match region {
        Some(_) => {
            candidates.push((recurrence, Bound::Recurrence));
            candidates.push((taken.max(1.0), Bound::TakenBranch));
            // Iterations in flight are limited by the reorder window: an
            // iteration's critical path is hidden only across the
            // `window / µops` iterations that fit in it.
            if table.window > 0.0 && per_iter.uops > 0.0 {
                let in_flight = (table.window / per_iter.uops).max(1.0);
                candidates.push((longest / in_flight, Bound::Window));
            }
            // The schedulers hold only `scheduler` µops waiting on a chain:
            // an iteration longer than that overlaps the next one only by
            // that many µops, so the rest of its critical path is exposed.
            if table.scheduler > 0.0 && per_iter.uops > table.scheduler {
                let exposed = (per_iter.uops - table.scheduler) / per_iter.uops;
                candidates.push((longest * exposed, Bound::Window));
            }
        }
        None => candidates.push((longest, Bound::Recurrence)),
    }
    let (per_iteration, bound) =
        candidates.into_iter().fold(
            (0.0, Bound::Issue),
            |best, c| if c.0 > best.0 { c } else { best },
        );
    let (entry_ports, _) = per_entry.port_bound();
    let per_entry_cycles = entry_ports.max(per_entry.uops / table.issue);
    RegionCost {
        per_iteration,
        bound,
        per_entry: per_entry_cycles,
        insts_per_iteration: per_iter.insts,
        insts_per_entry: per_entry.insts,
        body: key,
    }
}

/// The instruction-count model's cost of a region: instructions over an
/// assumed sustained rate.
pub(crate) fn region_count(
    code: &Decoded,
    cfg: &Cfg,
    est: &Estimate,
    region: Option<usize>,
    per_cycle: f64,
) -> RegionCost {
    let mut a_sum = 0.0;
    let mut e_sum = 0.0;
    let mut body = Vec::new();
    for &b in cfg.rpo.iter().filter(|&&b| cfg.loop_of[b] == region) {
        let blk = &cfg.blocks[b];
        let n = (blk.end - blk.first) as f64;
        let (a, e) = match region {
            Some(_) => (est.per_iteration[b], est.per_entry[b]),
            None => (est.per_iteration[b] + est.per_entry[b], 0.0),
        };
        a_sum += n * a;
        e_sum += n * e;
        if a >= 1.0 - 1e-9 {
            body.extend(
                code.insts[blk.first..blk.end]
                    .iter()
                    .map(|i| i.offset as usize),
            );
        }
    }
    RegionCost {
        per_iteration: a_sum / per_cycle,
        bound: Bound::InstructionCount,
        per_entry: e_sum / per_cycle,
        insts_per_iteration: a_sum,
        insts_per_entry: e_sum,
        body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_cycle_mean_finds_the_heaviest_cycle_per_edge() {
        // A self-loop of 3, and a two-node cycle of (4 + 2) / 2 = 3.
        let edges = [(1, 1, 3.0), (2, 3, 4.0), (3, 2, 2.0), (1, 2, 10.0)];
        assert!((max_cycle_mean(&edges) - 3.0).abs() < 1e-9);
        let edges = [(5, 5, 1.0), (6, 6, 4.5)];
        assert!((max_cycle_mean(&edges) - 4.5).abs() < 1e-9);
        assert_eq!(max_cycle_mean(&[(1, 2, 5.0)]), 0.0);
    }

    #[test]
    fn port_bound_takes_the_busiest_union() {
        let mut w = Work::default();
        // 4 cycles that must run on port 0, 2 that may run on 0 or 1: the
        // pair {0,1} holds 6 cycles over 2 ports = 3, but port 0 alone
        // holds 4.
        w.by_mask.insert(0b01, 4.0);
        w.by_mask.insert(0b11, 2.0);
        let (b, m) = w.port_bound();
        assert!((b - 4.0).abs() < 1e-9);
        assert_eq!(m, 0b01);
        let mut w = Work::default();
        w.by_mask.insert(0b01, 2.0);
        w.by_mask.insert(0b11, 4.0);
        let (b, m) = w.port_bound();
        assert!((b - 3.0).abs() < 1e-9);
        assert_eq!(m, 0b11);
    }
}
