//! Structure: basic blocks, the control-flow graph, dominators and
//! post-dominators, natural loops found from back edges, and their nesting.
//!
//! A back edge is an edge whose target dominates its source; the natural
//! loop of a header is the header plus every block that reaches one of its
//! back edges without passing through it. A retreating edge (a DFS back
//! edge) whose target does not dominate its source means a loop with two
//! entries — irreducible control flow — which is refused by name: no trip
//! count can be matched to it.

use crate::decode::{Decoded, Flow};
use crate::CostError;

/// A basic block: instructions `first..end` of the decoded list.
#[derive(Clone, Debug)]
pub(crate) struct Block {
    pub(crate) first: usize,
    pub(crate) end: usize,
    /// Byte offset of the first instruction.
    pub(crate) offset: u32,
    pub(crate) succs: Vec<usize>,
    pub(crate) preds: Vec<usize>,
    /// The block ends in a return (or a trap).
    pub(crate) exits_function: bool,
}

/// One natural loop.
#[derive(Clone, Debug)]
pub struct Loop {
    /// Index of the header block.
    pub(crate) header: usize,
    /// Blocks of the loop (header included), sorted.
    pub(crate) blocks: Vec<usize>,
    /// Sources of the back edges into the header.
    pub(crate) latches: Vec<usize>,
    /// The innermost loop containing this one.
    pub(crate) parent: Option<usize>,
    /// Nesting depth, 0 for outermost.
    pub(crate) depth: u32,
}

impl Loop {
    pub(crate) fn contains(&self, block: usize) -> bool {
        self.blocks.binary_search(&block).is_ok()
    }
}

/// The control-flow graph with its loops.
#[derive(Clone, Debug)]
pub(crate) struct Cfg {
    pub(crate) blocks: Vec<Block>,
    /// Immediate dominator of each block (the entry's is itself).
    pub(crate) idom: Vec<usize>,
    /// Immediate post-dominator (`None` for blocks that reach no exit and
    /// for exits themselves).
    pub(crate) ipdom: Vec<Option<usize>>,
    /// Loops in pre-order of the nesting tree (a loop, then the loops
    /// nested in it), siblings in code order: the order of a nest.
    pub(crate) loops: Vec<Loop>,
    /// Innermost loop of each block.
    pub(crate) loop_of: Vec<Option<usize>>,
    /// Reverse post-order of the blocks from the entry.
    pub(crate) rpo: Vec<usize>,
}

impl Cfg {
    /// Build the CFG of decoded code.
    pub(crate) fn build(code: &Decoded) -> Result<Cfg, CostError> {
        let insts = &code.insts;
        let n = insts.len();
        // Leaders: the entry, branch targets, and whatever follows a branch
        // or a gap in the decoded instructions.
        let mut leader = vec![false; n];
        if n > 0 {
            leader[0] = true;
        }
        for (i, inst) in insts.iter().enumerate() {
            match inst.flow {
                Flow::Jump(t) | Flow::Branch(t) => {
                    let j = code.index_of(t).ok_or(CostError::BranchIntoInstruction {
                        offset: inst.offset as usize,
                        target: t as usize,
                    })?;
                    leader[j] = true;
                    if i + 1 < n {
                        leader[i + 1] = true;
                    }
                }
                Flow::Return | Flow::Stop => {
                    if i + 1 < n {
                        leader[i + 1] = true;
                    }
                }
                Flow::Next => {
                    if i + 1 < n && insts[i + 1].offset != inst.end() {
                        leader[i + 1] = true;
                    }
                }
            }
        }
        let starts: Vec<usize> = (0..n).filter(|&i| leader[i]).collect();
        let mut block_of = vec![0usize; n];
        let mut blocks: Vec<Block> = Vec::with_capacity(starts.len());
        for (b, &s) in starts.iter().enumerate() {
            let e = starts.get(b + 1).copied().unwrap_or(n);
            for slot in &mut block_of[s..e] {
                *slot = b;
            }
            blocks.push(Block {
                first: s,
                end: e,
                offset: insts[s].offset,
                succs: Vec::new(),
                preds: Vec::new(),
                exits_function: false,
            });
        }
        for b in 0..blocks.len() {
            let last = &insts[blocks[b].end - 1];
            let fall = || {
                insts
                    .get(blocks[b].end)
                    .filter(|next| next.offset == last.end())
                    .map(|_| b + 1)
            };
            let mut succs = Vec::new();
            match last.flow {
                Flow::Next => succs.extend(fall()),
                Flow::Jump(t) => succs.push(block_of[code.index_of(t).unwrap_or(0)]),
                Flow::Branch(t) => {
                    succs.push(block_of[code.index_of(t).unwrap_or(0)]);
                    succs.extend(fall());
                }
                Flow::Return | Flow::Stop => blocks[b].exits_function = true,
            }
            succs.dedup();
            blocks[b].succs = succs;
        }
        for b in 0..blocks.len() {
            for s in blocks[b].succs.clone() {
                blocks[s].preds.push(b);
            }
        }
        let rpo = reverse_post_order(&blocks, 0, |b| &blocks[b].succs);
        let idom = dominators(&blocks, &rpo, |b| &blocks[b].preds, 0);
        let ipdom = post_dominators(&blocks);
        // Back edges and irreducibility, from a DFS.
        let mut order = vec![usize::MAX; blocks.len()];
        for (k, &b) in rpo.iter().enumerate() {
            order[b] = k;
        }
        let mut headers: Vec<(usize, Vec<usize>)> = Vec::new();
        for &b in &rpo {
            for &s in &blocks[b].succs {
                let retreating = order[s] <= order[b];
                if !retreating {
                    continue;
                }
                if dominates(&idom, s, b) {
                    match headers.iter_mut().find(|(h, _)| *h == s) {
                        Some((_, latches)) => latches.push(b),
                        None => headers.push((s, vec![b])),
                    }
                } else {
                    return Err(CostError::Irreducible {
                        offset: blocks[b].offset as usize,
                        target: blocks[s].offset as usize,
                    });
                }
            }
        }
        let mut loops: Vec<Loop> = headers
            .into_iter()
            .map(|(header, mut latches)| {
                latches.sort_unstable();
                let mut inside = vec![false; blocks.len()];
                inside[header] = true;
                let mut work: Vec<usize> = latches.clone();
                while let Some(x) = work.pop() {
                    if inside[x] {
                        continue;
                    }
                    inside[x] = true;
                    work.extend(
                        blocks[x]
                            .preds
                            .iter()
                            .copied()
                            .filter(|&p| order[p] != usize::MAX),
                    );
                }
                Loop {
                    header,
                    blocks: (0..blocks.len()).filter(|&x| inside[x]).collect(),
                    latches,
                    parent: None,
                    depth: 0,
                }
            })
            .collect();
        loops.sort_by_key(|l| blocks[l.header].offset);
        // Nesting: the parent is the smallest other loop containing the header.
        let parents: Vec<Option<usize>> = (0..loops.len())
            .map(|i| {
                let h = loops[i].header;
                (0..loops.len())
                    .filter(|&j| {
                        j != i
                            && loops[j].contains(h)
                            && loops[j].blocks.len() > loops[i].blocks.len()
                    })
                    .min_by_key(|&j| loops[j].blocks.len())
            })
            .collect();
        // Pre-order of the loop tree, siblings in code order: the order a
        // nest lists its loops in (outermost first, then what is inside it).
        let mut order_of_loops = Vec::with_capacity(loops.len());
        fn visit(i: usize, parents: &[Option<usize>], out: &mut Vec<usize>) {
            out.push(i);
            for j in 0..parents.len() {
                if parents[j] == Some(i) {
                    visit(j, parents, out);
                }
            }
        }
        for i in 0..loops.len() {
            if parents[i].is_none() {
                visit(i, &parents, &mut order_of_loops);
            }
        }
        let mut new_index = vec![0usize; loops.len()];
        for (k, &i) in order_of_loops.iter().enumerate() {
            new_index[i] = k;
        }
        let mut sorted: Vec<Loop> = order_of_loops.iter().map(|&i| loops[i].clone()).collect();
        for (k, &i) in order_of_loops.iter().enumerate() {
            sorted[k].parent = parents[i].map(|p| new_index[p]);
        }
        let mut loops = sorted;
        for i in 0..loops.len() {
            let mut d = 0;
            let mut p = loops[i].parent;
            while let Some(j) = p {
                d += 1;
                p = loops[j].parent;
            }
            loops[i].depth = d;
        }
        let loop_of: Vec<Option<usize>> = (0..blocks.len())
            .map(|b| {
                (0..loops.len())
                    .filter(|&j| loops[j].contains(b))
                    .min_by_key(|&j| loops[j].blocks.len())
            })
            .collect();
        Ok(Cfg {
            blocks,
            idom,
            ipdom,
            loops,
            loop_of,
            rpo,
        })
    }

    /// Whether `a` dominates `b`.
    pub(crate) fn dominates(&self, a: usize, b: usize) -> bool {
        dominates(&self.idom, a, b)
    }

    /// Whether block `b` is in loop `l` (or a loop nested in it).
    pub(crate) fn in_loop(&self, l: usize, b: usize) -> bool {
        self.loops[l].contains(b)
    }
}

fn dominates(idom: &[usize], a: usize, mut b: usize) -> bool {
    loop {
        if a == b {
            return true;
        }
        let up = idom[b];
        if up == b || up == usize::MAX {
            return false;
        }
        b = up;
    }
}

fn reverse_post_order<'a>(
    blocks: &'a [Block],
    entry: usize,
    succs: impl Fn(usize) -> &'a Vec<usize>,
) -> Vec<usize> {
    let mut seen = vec![false; blocks.len()];
    let mut post = Vec::with_capacity(blocks.len());
    // Iterative DFS: (block, next successor index).
    let mut stack = vec![(entry, 0usize)];
    seen[entry] = true;
    while let Some(&mut (b, ref mut k)) = stack.last_mut() {
        let s = succs(b);
        if *k < s.len() {
            let next = s[*k];
            *k += 1;
            if !seen[next] {
                seen[next] = true;
                stack.push((next, 0));
            }
        } else {
            post.push(b);
            stack.pop();
        }
    }
    post.reverse();
    post
}

/// Cooper, Harvey and Kennedy's iterative dominator algorithm ("A Simple,
/// Fast Dominance Algorithm", 2001) over `rpo`, with `preds` giving the
/// edges into a node. Nodes not in `rpo` get `usize::MAX`.
fn dominators<'a>(
    blocks: &'a [Block],
    rpo: &[usize],
    preds: impl Fn(usize) -> &'a Vec<usize>,
    entry: usize,
) -> Vec<usize> {
    let n = blocks.len();
    let mut order = vec![usize::MAX; n];
    for (k, &b) in rpo.iter().enumerate() {
        order[b] = k;
    }
    let mut idom = vec![usize::MAX; n];
    idom[entry] = entry;
    let intersect = |idom: &[usize], mut a: usize, mut b: usize| {
        while a != b {
            while order[a] > order[b] {
                a = idom[a];
            }
            while order[b] > order[a] {
                b = idom[b];
            }
        }
        a
    };
    let mut changed = true;
    while changed {
        changed = false;
        for &b in rpo.iter().skip(1) {
            let mut new = usize::MAX;
            for &p in preds(b) {
                if order[p] == usize::MAX || idom[p] == usize::MAX {
                    continue;
                }
                new = if new == usize::MAX {
                    p
                } else {
                    intersect(&idom, p, new)
                };
            }
            if new != usize::MAX && idom[b] != new {
                idom[b] = new;
                changed = true;
            }
        }
    }
    idom
}

/// Immediate post-dominators: dominators of the reversed graph rooted at a
/// virtual exit joined to every returning block.
fn post_dominators(blocks: &[Block]) -> Vec<Option<usize>> {
    let n = blocks.len();
    // Reversed graph with a virtual exit node `n`.
    let virt = n;
    let mut rev: Vec<Block> = blocks
        .iter()
        .map(|b| Block {
            first: b.first,
            end: b.end,
            offset: b.offset,
            succs: b.preds.clone(),
            preds: b.succs.clone(),
            exits_function: false,
        })
        .collect();
    let exits: Vec<usize> = (0..n).filter(|&b| blocks[b].exits_function).collect();
    rev.push(Block {
        first: 0,
        end: 0,
        offset: u32::MAX,
        succs: exits.clone(),
        preds: Vec::new(),
        exits_function: false,
    });
    for &e in &exits {
        rev[e].preds.push(virt);
    }
    let rpo = reverse_post_order(&rev, virt, |b| &rev[b].succs);
    let idom = dominators(&rev, &rpo, |b| &rev[b].preds, virt);
    (0..n)
        .map(|b| match idom[b] {
            x if x == usize::MAX || x == virt => None,
            x => Some(x),
        })
        .collect()
}
