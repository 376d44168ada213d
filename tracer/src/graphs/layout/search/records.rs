//! Lists that hold every element of an executable graph, not only its
//! kernels, and what tells the elements apart. On driver 580 every record of
//! an exec (kernel nodes, memsets, records of the driver's own before each
//! run of kernels, copies it runs as kernels of its own) is on one list, the
//! only list that holds all the kernels of a graph with parallel branches
//! (the per-run lists hold one run each). Reading it needs the kind of each
//! element, learned here from graphs of known nodes: a field with one value
//! on every kernel node and others on the memset, and, where elements of
//! the kernel kind are no kernel node, a field that tells those apart.

use std::time::Instant;

use crate::graphs::layout::add;
use crate::graphs::layout::follow;
use crate::graphs::layout::search::node_at;
use crate::graphs::layout::search::walk;
use crate::graphs::layout::search::KnownGraph;
use crate::graphs::layout::search::Path;
use crate::graphs::layout::search::BEFORE;
use crate::graphs::layout::ExecLayout;
use crate::graphs::layout::Flags;
use crate::graphs::layout::Kinds;
use crate::graphs::layout::Mem;
use crate::graphs::layout::Walk;

/// Links looked for (a driver 580 record is 1896 bytes: its all-records
/// link is at +1160).
const LINKS: i32 = 2048;
/// Where kind fields are looked for, around the function slot.
const SPAN: i32 = 2048;
/// Most values a kind field may have on the elements that are no kernel.
const MAX_VALUES: usize = 8;

/// From each list of kernels found: lists from the same place or a level
/// up that hold every kernel of A, in order, and other elements besides.
pub(super) fn record_lists(
    mem: &dyn Mem,
    a: &KnownGraph,
    paths: &[Path],
    deadline: Instant,
) -> Vec<Path> {
    let nk = a.kernels.len();
    let limit = 4 * nk + 8;
    let mut out: Vec<Path> = Vec::new();
    for p in paths {
        if !matches!(p.walk, Walk::List { .. }) || !p.inner.is_empty() {
            continue;
        }
        for level in 1..=p.prefix.len() {
            let prefix = &p.prefix[..level];
            if follow(mem, a.exec, prefix).is_none() {
                continue;
            }
            for link in (-(BEFORE as i32)..LINKS).step_by(8) {
                if Instant::now() > deadline {
                    return out;
                }
                let cand = Path {
                    prefix: prefix.to_vec(),
                    walk: Walk::List { link },
                    inner: Vec::new(),
                    func: p.func,
                };
                if out.contains(&cand) || paths.contains(&cand) {
                    continue;
                }
                let slots = walk(mem, &cand, None, a.exec, limit);
                // More than the kernels, and a list that ends.
                if slots.len() <= nk || slots.len() >= limit {
                    continue;
                }
                let nodes: Vec<usize> = slots.iter().filter_map(|s| node_at(mem, a, *s)).collect();
                if nodes.iter().copied().eq(0..nk) {
                    out.push(cand);
                }
            }
        }
    }
    out
}

/// The u32 at `slot + off` of each slot, if all can be read.
fn values(mem: &dyn Mem, slots: &[u64], off: i32) -> Option<Vec<u32>> {
    slots
        .iter()
        .map(|s| add(*s, off).and_then(|x| mem.u32_at(x)))
        .collect()
}

/// The one value of the u32 at `off` on every slot.
fn common(mem: &dyn Mem, slots: &[u64], off: i32) -> Option<u32> {
    let v = values(mem, slots, off)?;
    let first = *v.first()?;
    v.iter().all(|x| *x == first).then_some(first)
}

fn distinct(mut v: Vec<u32>) -> Vec<u32> {
    v.sort_unstable();
    v.dedup();
    v
}

/// Fields that tell the kernel nodes on `l`'s walk of `graphs` from its
/// other elements; `None` when no field does, or nothing needs telling.
pub(crate) fn learn_kinds(mem: &dyn Mem, l: &ExecLayout, graphs: &[&KnownGraph]) -> Option<Kinds> {
    let (mut kernels, mut rest) = (Vec::new(), Vec::new());
    for g in graphs {
        let limit = 4 * (g.kernels.len() + g.others) + 8;
        for s in l.walk(mem, g.exec, limit)?.slots {
            match node_at(mem, g, s) {
                Some(_) => kernels.push(s),
                None => rest.push(s),
            }
        }
    }
    if kernels.is_empty() || rest.is_empty() {
        return None;
    }
    // The kind: one value on every kernel node, another on some element (a
    // memset is one). A field of CUgraphNodeType values (kernel 0, memset
    // 2) first, then the one nearest the function.
    let mut kind: Option<(bool, i32, u32, Vec<u32>)> = None;
    for off in (-SPAN..=SPAN).step_by(4) {
        let Some(k) = common(mem, &kernels, off) else {
            continue;
        };
        let Some(v) = values(mem, &rest, off) else {
            continue;
        };
        let others = distinct(v.into_iter().filter(|v| *v != k).collect());
        if others.is_empty() || others.len() > MAX_VALUES {
            continue;
        }
        let node_type = k == 0 && others.contains(&2);
        if kind
            .as_ref()
            .is_none_or(|b| (!node_type, off.abs()) < (!b.0, b.1.abs()))
        {
            kind = Some((node_type, off, k, others));
        }
    }
    let (_, kind, kernel, others) = kind?;
    // Elements of the kernel kind that are no kernel node: a field whose
    // value on every kernel differs from theirs. One with 0 on the kernels
    // and single bits on the others first (flags), then the nearest.
    let driver: Vec<u64> = rest
        .iter()
        .copied()
        .filter(|s| add(*s, kind).and_then(|x| mem.u32_at(x)) == Some(kernel))
        .collect();
    let flags = if driver.is_empty() {
        None
    } else {
        let mut best: Option<((bool, bool, i32), Flags)> = None;
        for off in (-SPAN..=SPAN).step_by(4) {
            let Some(k) = common(mem, &kernels, off) else {
                continue;
            };
            let Some(v) = values(mem, &driver, off) else {
                continue;
            };
            if v.contains(&k) {
                continue;
            }
            let v = distinct(v);
            if v.len() > MAX_VALUES {
                continue;
            }
            let rank = (k != 0, !v.iter().all(|x| x.is_power_of_two()), off.abs());
            if best.as_ref().is_none_or(|b| rank < b.0) {
                best = Some((
                    rank,
                    Flags {
                        off,
                        kernel: k,
                        driver: v,
                    },
                ));
            }
        }
        Some(best?.1)
    };
    Some(Kinds {
        kind,
        kernel,
        others,
        flags,
    })
}
