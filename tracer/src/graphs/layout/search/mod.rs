//! Finding an [`ExecLayout`] in the calibration helper's own memory, from
//! executable graphs of known kernels (`exec_known` builds them).
//!
//! From graph A's `CUgraphExec` handle, a breadth-first search reads what is
//! reachable (windows around each pointer, four levels deep) and notes
//! where A's function handles sit. Each place suggests a path with one
//! indexed level: a list (an element, and the offset of a link that leads
//! from it to every other node) or an array (paths of every node that differ
//! in one offset). For each, the grid, block and shared memory are looked for
//! near the function slot, the path must then read graphs B and E (another
//! node count, built by capture, after heap churn) exactly, and a count of
//! elements is looked for along the way. Graph C (copies, a memset, an empty
//! node, a child graph) must be read exactly or refused through the count.
//! What passes is re-checked by the caller after updates of A.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use crate::graphs::layout::add;
use crate::graphs::layout::follow;
use crate::graphs::layout::CountField;
use crate::graphs::layout::Element;
use crate::graphs::layout::ExecLayout;
use crate::graphs::layout::Mem;
use crate::graphs::layout::Mixed;
use crate::graphs::layout::Walk;

/// A kernel node as built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KnownKernel {
    /// The function handle the element should hold (for a node made from a
    /// CUkernel: its CUfunction).
    pub func: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared: u32,
}

/// An executable graph as built: its kernels in order (child graphs in
/// place), and how many nodes of other kinds it has.
#[derive(Clone, Debug)]
pub(crate) struct KnownGraph {
    /// What the graph is, in `GPUTRACE_DEBUG` lines (through `Debug`).
    #[allow(dead_code)]
    pub name: &'static str,
    pub exec: u64,
    pub kernels: Vec<KnownKernel>,
    pub others: usize,
}

/// A candidate path: fields still to be found.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Path {
    prefix: Vec<i32>,
    walk: Walk,
    inner: Vec<i32>,
    func: i32,
}

fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.abs(), b.abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

mod bfs;
pub(crate) mod records;

use bfs::{bfs, looks_like_pointer, path_of, window, Block, Cached, Hit, BEFORE, WINDOW};

/// Which of `g`'s kernels a function slot holds.
fn node_at(mem: &dyn Mem, g: &KnownGraph, slot: u64) -> Option<usize> {
    let f = mem.u64_at(slot)?;
    g.kernels.iter().position(|k| k.func == f && f != 0)
}

fn walk(mem: &dyn Mem, p: &Path, count: Option<CountField>, exec: u64, max: usize) -> Vec<u64> {
    let l = ExecLayout {
        prefix: p.prefix.clone(),
        walk: p.walk,
        inner: p.inner.clone(),
        func: p.func,
        grid: 0,
        block: 0,
        shared_mem: None,
        count,
        mixed: Mixed::Exact,
        kinds: None,
    };
    l.walk(mem, exec, max).map(|w| w.slots).unwrap_or_default()
}

/// A hit that still reads as one of A's functions: the offsets from the
/// handle, the function offset, the node, the block.
type HitPath = (Vec<i32>, i32, usize, usize);

/// Candidate paths from the hits.
fn derive(
    mem: &dyn Mem,
    a: &KnownGraph,
    blocks: &[Block],
    hits: &[Hit],
    deadline: Instant,
) -> Vec<Path> {
    let paths: Vec<HitPath> = hits
        .iter()
        .filter_map(|h| {
            let f = mem.u64_at(add(blocks[h.block].addr, h.off)?)?;
            let node = a.kernels.iter().position(|k| k.func == f)?;
            Some((path_of(blocks, h.block), h.off, node, h.block))
        })
        .collect();
    let mut out = arrays(&paths, a.kernels.len());
    lists(mem, a, blocks, &paths, deadline, &mut out);
    out
}

/// Arrays: the paths of every node, equal but in one offset.
fn arrays(paths: &[HitPath], nk: usize) -> Vec<Path> {
    let mut out: Vec<Path> = Vec::new();
    // Grouped by the path with that offset left out.
    type Group = (HashSet<usize>, i64, i32);
    let mut groups: HashMap<(Vec<i32>, usize), Group> = HashMap::new();
    for (pa, fa, node, _) in paths {
        let full: Vec<i32> = pa.iter().copied().chain([*fa]).collect();
        for diff in 0..full.len() {
            let mut key = full.clone();
            key[diff] = 0;
            let g = groups
                .entry((key, diff))
                .or_insert_with(|| (HashSet::new(), 0, full[diff]));
            g.0.insert(*node);
            g.1 = gcd(g.1, i64::from(full[diff]) - i64::from(g.2));
            g.2 = g.2.min(full[diff]);
        }
    }
    for ((full, diff), (nodes, stride, lo)) in groups {
        if nodes.len() != nk || stride < 8 {
            continue;
        }
        let n = full.len() - 1;
        let (prefix, inner, func) = if diff == n {
            (full[..n].to_vec(), Vec::new(), lo)
        } else {
            let mut inner = vec![lo];
            inner.extend_from_slice(&full[diff + 1..n]);
            (full[..diff].to_vec(), inner, full[n])
        };
        let p = Path {
            prefix,
            walk: Walk::Array {
                stride: stride as i32,
            },
            inner,
            func,
        };
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// Lists: an element on a hit's path whose link reaches every node (added
/// to `out` where new).
fn lists(
    mem: &dyn Mem,
    a: &KnownGraph,
    blocks: &[Block],
    paths: &[HitPath],
    deadline: Instant,
    out: &mut Vec<Path>,
) {
    let nk = a.kernels.len();
    let mut elems: Vec<(u64, Vec<i32>, Vec<i32>, i32)> = Vec::new();
    let mut seen = HashSet::new();
    for (pa, fa, _, block) in paths {
        for level in 1..=pa.len() {
            let mut b = *block;
            for _ in level..pa.len() {
                b = blocks[b].parent.expect("deep enough");
            }
            let inner = pa[level..].to_vec();
            if seen.insert((blocks[b].addr, inner.clone(), *fa)) {
                elems.push((blocks[b].addr, pa[..level].to_vec(), inner, *fa));
            }
        }
    }
    for (elem, prefix, inner, func) in elems {
        if Instant::now() > deadline {
            break;
        }
        for link in (-(BEFORE as i32)..1024).step_by(8) {
            let Some(next) = add(elem, link).and_then(|x| mem.u64_at(x)) else {
                continue;
            };
            if !looks_like_pointer(next) || next == elem {
                continue;
            }
            let mut found = HashSet::new();
            let mut e = elem;
            for _ in 0..4 * nk + 8 {
                match follow(mem, e, &inner)
                    .and_then(|s| add(s, func))
                    .and_then(|s| node_at(mem, a, s))
                {
                    Some(n) => {
                        found.insert(n);
                    }
                    // The first element holds the first node.
                    None if e == elem => break,
                    None => {}
                }
                match add(e, link).and_then(|x| mem.u64_at(x)) {
                    Some(n) if n != 0 && n != elem => e = n,
                    _ => break,
                }
            }
            if found.len() == nk && nk > 1 {
                let p = Path {
                    prefix: prefix.clone(),
                    walk: Walk::List { link },
                    inner: inner.clone(),
                    func,
                };
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
    }
}

/// Other ways to the same list or array: every word, in the blocks near
/// the handle, that holds the address a path's prefix leads to. The search
/// reaches each address once, by whatever pointer it met first (often a
/// neighbouring allocation's); the driver's own pointer may be deeper.
fn alternatives(mem: &dyn Mem, a: &KnownGraph, blocks: &[Block], paths: &[Path]) -> Vec<Path> {
    let mut targets: HashMap<u64, Vec<&Path>> = HashMap::new();
    for p in paths {
        if let Some(t) = follow(mem, a.exec, &p.prefix) {
            targets.entry(t).or_default().push(p);
        }
    }
    let mut out: Vec<Path> = Vec::new();
    for (bi, b) in blocks.iter().enumerate() {
        if b.depth > 2 || out.len() > 256 {
            break; // blocks are in depth order
        }
        let Some((buf, rel)) = window(mem, b.addr, WINDOW[b.depth]) else {
            continue;
        };
        let skip = ((8 - (b.addr as i64 + rel).rem_euclid(8)) % 8) as usize;
        for o in (skip..buf.len().saturating_sub(7)).step_by(8) {
            let v = u64::from_ne_bytes(buf[o..o + 8].try_into().expect("8 bytes"));
            let Some(ps) = targets.get(&v) else { continue };
            let mut prefix = path_of(blocks, bi);
            prefix.push((rel + o as i64) as i32);
            for p in ps {
                let alt = Path {
                    prefix: prefix.clone(),
                    ..(*p).clone()
                };
                if !paths.contains(&alt) && !out.contains(&alt) {
                    out.push(alt);
                }
            }
        }
    }
    out
}

/// Grid, block and shared memory near the function slot, the same for
/// every kernel of A.
fn fields(mem: &dyn Mem, p: &Path, a: &KnownGraph) -> Option<(i32, i32, Option<i32>)> {
    let slots = walk(mem, p, None, a.exec, 2 * a.kernels.len() + 4);
    let mut by_node = vec![None; a.kernels.len()];
    for s in slots {
        if let Some(n) = node_at(mem, a, s) {
            by_node[n].get_or_insert(s);
        }
    }
    if crate::log::debug_enabled() && matches!(p.walk, Walk::List { .. }) {
        crate::log::say_raw(format_args!("fields {p:?} by_node {by_node:x?}"));
    }
    let by_node: Vec<u64> = by_node.into_iter().collect::<Option<_>>()?;
    let all = |f: &dyn Fn(u64, &KnownKernel) -> bool| {
        by_node.iter().zip(&a.kernels).all(|(s, k)| f(*s, k))
    };
    let mut offs: Vec<i32> = (-1024..=1024).step_by(4).collect();
    offs.sort_by_key(|d: &i32| d.abs());
    let find = |f: &dyn Fn(u64, i32, &KnownKernel) -> bool| {
        offs.iter()
            .copied()
            .find(|d| all(&|s, k| add(s, *d).is_some_and(|x| f(x, *d, k))))
    };
    let grid = find(&|x, _, k| mem.dims_at(x) == Some(k.grid))?;
    let block = find(&|x, _, k| mem.dims_at(x) == Some(k.block))?;
    let shared = find(&|x, _, k| mem.u32_at(x) == Some(k.shared));
    Some((grid, block, shared))
}

/// How a layout reads graph `g`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reading {
    /// Every kernel once, with its fields, and one element without a
    /// function for each other node.
    Exact,
    /// Nothing at all.
    Empty,
    /// Anything else.
    Wrong(String),
}

/// Reads `g` with `l` and compares with what was built.
pub(crate) fn check(mem: &dyn Mem, l: &ExecLayout, g: &KnownGraph) -> Reading {
    let Some(walked) = l.walk(mem, g.exec, 4 * (g.kernels.len() + g.others) + 8) else {
        return Reading::Wrong("the path cannot be followed".into());
    };
    if walked.slots.is_empty() {
        return Reading::Empty;
    }
    let mut seen = vec![false; g.kernels.len()];
    let mut others = 0;
    for s in &walked.slots {
        let element = match &l.kinds {
            Some(kinds) => match kinds.element(mem, *s) {
                Some(e) => e,
                None => return Reading::Wrong("an element of no kind calibration saw".into()),
            },
            None if mem.u64_at(*s) == Some(0) => Element::Other,
            None => Element::Kernel,
        };
        match element {
            Element::Other => others += 1,
            // Not a node: records the driver adds (run heads, copies run as
            // kernels; a graph's copy node may be one of those).
            Element::Driver => {}
            Element::Kernel => {
                let Some(n) = node_at(mem, g, *s) else {
                    return Reading::Wrong("an element with an unknown function".into());
                };
                if seen[n] {
                    return Reading::Wrong(format!("kernel {n} twice"));
                }
                seen[n] = true;
                let k = l.kernel_at(mem, *s);
                let want = &g.kernels[n];
                if k.is_none_or(|k| {
                    k.grid != want.grid
                        || k.block != want.block
                        || (l.shared_mem.is_some() && k.shared_mem_bytes != want.shared)
                }) {
                    return Reading::Wrong(format!("kernel {n}: fields differ"));
                }
                // In order: the graph's order is the launch order.
                if seen[..n].iter().any(|s| !s) {
                    return Reading::Wrong(format!("kernel {n} out of order"));
                }
            }
        }
    }
    // Empty and child-graph nodes need no element where kinds tell
    // elements apart (driver 580), and a copy may be the driver's own.
    let others_fit = match l.kinds {
        Some(_) => others <= g.others,
        None => others == g.others,
    };
    if seen.iter().any(|s| !s) || !others_fit {
        return Reading::Wrong(format!(
            "{} of {} kernels, {others} other elements for {} other nodes",
            seen.iter().filter(|s| **s).count(),
            g.kernels.len(),
            g.others
        ));
    }
    match walked.count {
        Some(c) if c as usize != walked.slots.len() => {
            Reading::Wrong(format!("count {c} for {} elements", walked.slots.len()))
        }
        _ => Reading::Exact,
    }
}

/// u32 fields along the prefix that hold the number of kernels of A, B,
/// E (or, for a list with elements of other kinds, of elements).
fn counts(mem: &dyn Mem, p: &Path, graphs: &[&KnownGraph], elements: bool) -> Vec<CountField> {
    let want: Vec<u32> = graphs
        .iter()
        .map(|g| match elements {
            false => g.kernels.len() as u32,
            true => walk(mem, p, None, g.exec, 4 * (g.kernels.len() + g.others) + 8).len() as u32,
        })
        .collect();
    let mut out = Vec::new();
    for level in (0..=p.prefix.len()).rev() {
        let bases: Option<Vec<u64>> = graphs
            .iter()
            .map(|g| follow(mem, g.exec, &p.prefix[..level]))
            .collect();
        let Some(bases) = bases else { continue };
        for off in (-(BEFORE as i32)..1024).step_by(4) {
            if want
                .iter()
                .zip(&bases)
                .all(|(w, b)| add(*b, off).and_then(|x| mem.u32_at(x)) == Some(*w))
            {
                out.push(CountField {
                    level: level as u8,
                    off,
                });
            }
        }
    }
    out
}

/// Finds the layout: `a` to search from, `same` kernel-only graphs it must
/// read exactly, `mixed` one with other nodes.
pub(crate) fn search(
    mem: &dyn Mem,
    a: &KnownGraph,
    same: &[&KnownGraph],
    mixed: &KnownGraph,
    deadline: Instant,
) -> Result<ExecLayout, String> {
    let mem = &Cached {
        mem,
        words: Default::default(),
    };
    let (blocks, hits) = bfs(mem, a, deadline);
    if hits.is_empty() {
        return Err(format!(
            "no function handle of graph A within {} blocks of memory reachable from its CUgraphExec",
            blocks.len()
        ));
    }
    let mut paths = derive(mem, a, &blocks, &hits, deadline);
    if crate::log::debug_enabled() {
        debug_dump(mem, a, &blocks, &hits, &paths);
    }
    paths.retain(|p| fields(mem, p, a).is_some());
    let alt = alternatives(mem, a, &blocks, &paths);
    paths.extend(alt);
    // (From the alternatives too: the driver's own pointer to a list of
    // kernels is often one of those, and a list of every element starts
    // a level up from it.)
    let mut records = records::record_lists(mem, a, &paths, deadline);
    records.retain(|p| fields(mem, p, a).is_some());
    paths.extend(records);
    let kernel_only: Vec<&KnownGraph> = [a].into_iter().chain(same.iter().copied()).collect();
    let every: Vec<&KnownGraph> = kernel_only.iter().copied().chain([mixed]).collect();
    let mut tried = 0;
    let mut best: Option<ExecLayout> = None;
    for p in &paths {
        let Some((grid, block, shared_mem)) = fields(mem, p, a) else {
            continue;
        };
        tried += 1;
        let base = ExecLayout {
            prefix: p.prefix.clone(),
            walk: p.walk,
            inner: p.inner.clone(),
            func: p.func,
            grid,
            block,
            shared_mem,
            count: None,
            mixed: Mixed::Exact,
            kinds: None,
        };
        let mut found = counts(mem, p, &kernel_only, false);
        found.extend(counts(mem, p, &kernel_only, true));
        found.dedup();
        // With each count candidate (arrays need one), then without.
        let options = found
            .into_iter()
            .map(Some)
            .chain(matches!(p.walk, Walk::List { .. }).then_some(None));
        for count in options {
            let mut l = ExecLayout {
                count,
                ..base.clone()
            };
            let exact = |l: &ExecLayout| {
                kernel_only
                    .iter()
                    .all(|g| check(mem, l, g) == Reading::Exact)
            };
            if !exact(&l) {
                // Elements of other kinds on the walk: read it only if
                // they can be told apart.
                l.kinds = records::learn_kinds(mem, &l, &every);
                if l.kinds.is_none() || !exact(&l) {
                    continue;
                }
            }
            l.mixed = match check(mem, &l, mixed) {
                Reading::Exact => Mixed::Exact,
                Reading::Empty if count.is_none() => Mixed::Empty,
                // The count disagrees with what the walk finds: refused.
                _ if count.is_some() && l.read(mem, mixed.exec).is_none() => Mixed::Refused,
                _ => continue,
            };
            if best.as_ref().is_none_or(|b| rank(&l) < rank(b)) {
                best = Some(l);
            }
        }
    }
    best.ok_or_else(|| {
        format!(
            "{} places of graph A's functions, {} paths, {tried} with grid and block: none reads graphs B, C and E",
            hits.len(),
            paths.len()
        )
    })
}

/// `GPUTRACE_DEBUG`: what the search found, for a developer looking at a
/// libcuda build it fails on.
fn debug_dump(mem: &dyn Mem, a: &KnownGraph, blocks: &[Block], hits: &[Hit], paths: &[Path]) {
    crate::log::say_raw(format_args!(
        "blocks {} hits {} derived {}",
        blocks.len(),
        hits.len(),
        paths.len()
    ));
    for p in paths
        .iter()
        .filter(|p| matches!(p.walk, Walk::List { .. }))
        .take(30)
    {
        crate::log::say_raw(format_args!("  {p:?} fields {:?}", fields(mem, p, a)));
    }
    let plan = mem.u64_at(a.exec + 32).unwrap_or(0);
    let r0 = mem.u64_at(plan + 24).unwrap_or(0);
    crate::log::say_raw(format_args!(
        "exec {:#x} plan {:#x} (rel {}) r0 {:#x} (rel {})",
        a.exec,
        plan,
        plan as i64 - a.exec as i64,
        r0,
        r0 as i64 - a.exec as i64
    ));
    for (i, b) in blocks.iter().enumerate() {
        if b.addr == plan || b.addr == r0 {
            crate::log::say_raw(format_args!(
                "  block {i} {:#x} depth {} path {:?}",
                b.addr,
                b.depth,
                path_of(blocks, i)
            ));
        }
    }
    for k in &a.kernels {
        crate::log::say_raw(format_args!("  func {:#x}", k.func));
    }
    crate::log::say_raw(format_args!(
        "  r0+48 = {:?}",
        mem.u64_at(r0 + 48).map(|v| format!("{v:#x}"))
    ));
    for h in hits.iter().take(40) {
        crate::log::say_raw(format_args!(
            "  hit {:?} @{} depth {}",
            path_of(blocks, h.block),
            h.off,
            blocks[h.block].depth
        ));
    }
}

/// Best first: mixed graphs read, a count to check reads against, no
/// kinds to tell apart, short paths.
fn rank(l: &ExecLayout) -> (u8, u8, u8, usize, i64) {
    let mixed = match l.mixed {
        Mixed::Exact => 0,
        Mixed::Refused => 1,
        Mixed::Empty => 2,
    };
    let depth = l.prefix.len() + l.inner.len();
    let spread = l
        .prefix
        .iter()
        .chain(&l.inner)
        .map(|o| i64::from(*o).abs())
        .sum();
    (
        mixed,
        u8::from(l.count.is_none()),
        u8::from(l.kinds.is_some()),
        depth,
        spread,
    )
}
