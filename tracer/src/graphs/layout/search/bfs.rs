//! The breadth-first search of `exec_search`: what is reachable from an
//! executable graph's handle, and where graph A's function handles sit in
//! it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

use crate::graphs::layout::search::KnownGraph;
use crate::graphs::layout::Mem;

/// Limits of the search.
const MAX_DEPTH: usize = 4;
const MAX_BLOCKS: usize = 200_000;
pub(super) const BEFORE: i64 = 256;
pub(super) const WINDOW: [i64; MAX_DEPTH + 1] = [16384, 4096, 2048, 1024, 1024];
const MAX_HITS: usize = 20_000;

pub(super) struct Block {
    pub(super) addr: u64,
    pub(super) parent: Option<usize>,
    /// The offset, in the parent, of the pointer that led here.
    pub(super) off: i32,
    pub(super) depth: usize,
}

/// A function handle of A found at `block + off`.
pub(super) struct Hit {
    pub(super) block: usize,
    pub(super) off: i32,
}

/// Memory reads with a cache (a walk reads the same words many times).
pub(super) struct Cached<'a> {
    pub(super) mem: &'a dyn Mem,
    pub(super) words: std::cell::RefCell<HashMap<u64, Option<u64>>>,
}

impl Mem for Cached<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        if buf.len() == 8 {
            let mut words = self.words.borrow_mut();
            let v = *words.entry(addr).or_insert_with(|| self.mem.u64_at(addr));
            return match v {
                Some(v) => {
                    buf.copy_from_slice(&v.to_ne_bytes());
                    true
                }
                None => false,
            };
        }
        self.mem.read(addr, buf)
    }
}

/// Reads `[addr - BEFORE, addr + len)`, or the readable pages of it that
/// hold `addr`; returns the bytes and the offset of their start from `addr`.
pub(super) fn window(mem: &dyn Mem, addr: u64, len: i64) -> Option<(Vec<u8>, i64)> {
    let lo = addr.saturating_sub(BEFORE as u64);
    let hi = addr.checked_add(len as u64)?;
    let mut buf = vec![0u8; (hi - lo) as usize];
    if mem.read(lo, &mut buf) {
        return Some((buf, lo as i64 - addr as i64));
    }
    // Page by page: the pages around `addr` that can be read.
    let page = |a: u64| a & !4095;
    let mut start = None;
    let mut end = lo;
    let mut p = page(lo);
    while p < hi {
        let (s, e) = (p.max(lo), (p + 4096).min(hi));
        let ok = mem.read(s, &mut buf[(s - lo) as usize..(e - lo) as usize]);
        if ok {
            start.get_or_insert(s);
            end = e;
        } else if p <= addr {
            start = None;
        } else {
            break;
        }
        p += 4096;
    }
    let s = start?;
    (s <= addr && end > addr).then(|| {
        (
            buf[(s - lo) as usize..(end - lo) as usize].to_vec(),
            s as i64 - addr as i64,
        )
    })
}

pub(super) fn looks_like_pointer(v: u64) -> bool {
    (1 << 16..1 << 47).contains(&v) && v.is_multiple_of(8)
}

/// The offsets from the root to `block`.
pub(super) fn path_of(blocks: &[Block], mut b: usize) -> Vec<i32> {
    let mut out = Vec::new();
    while let Some(p) = blocks[b].parent {
        out.push(blocks[b].off);
        b = p;
    }
    out.reverse();
    out
}

/// Where A's functions are, reading from its handle outwards.
pub(super) fn bfs(mem: &dyn Mem, a: &KnownGraph, deadline: Instant) -> (Vec<Block>, Vec<Hit>) {
    let funcs: HashSet<u64> = a.kernels.iter().map(|k| k.func).collect();
    let mut blocks = vec![Block {
        addr: a.exec,
        parent: None,
        off: 0,
        depth: 0,
    }];
    let mut seen: HashSet<u64> = [a.exec].into();
    let mut hits = Vec::new();
    let mut queue: VecDeque<usize> = [0].into();
    while let Some(bi) = queue.pop_front() {
        if Instant::now() > deadline {
            break;
        }
        let (addr, depth) = (blocks[bi].addr, blocks[bi].depth);
        let Some((buf, rel)) = window(mem, addr, WINDOW[depth]) else {
            continue;
        };
        // 8-aligned words of the window.
        let skip = ((8 - (addr as i64 + rel).rem_euclid(8)) % 8) as usize;
        for o in (skip..buf.len().saturating_sub(7)).step_by(8) {
            let v = u64::from_ne_bytes(buf[o..o + 8].try_into().expect("8 bytes"));
            let off = (rel + o as i64) as i32;
            if funcs.contains(&v) && hits.len() < MAX_HITS {
                hits.push(Hit { block: bi, off });
            }
            if depth < MAX_DEPTH
                && blocks.len() < MAX_BLOCKS
                && looks_like_pointer(v)
                && seen.insert(v)
            {
                blocks.push(Block {
                    addr: v,
                    parent: Some(bi),
                    off,
                    depth: depth + 1,
                });
                queue.push_back(blocks.len() - 1);
            }
        }
    }
    (blocks, hits)
}
