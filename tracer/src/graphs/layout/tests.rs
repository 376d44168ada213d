//! Executable graphs laid out in this process's memory as two different
//! drivers do (the simulator's made-up layout, and the real driver 580's as
//! the GPU exploration found it), searched and read.

use std::time::{Duration, Instant};

use crate::graphs::layout::search::search;
use crate::graphs::layout::search::KnownGraph;
use crate::graphs::layout::search::KnownKernel;
use crate::graphs::layout::*;

/// Fake CUfunction objects: their addresses are the handles.
pub(crate) struct Funcs(Arena);

impl Funcs {
    pub(crate) fn new(n: usize) -> Self {
        let mut arena = Arena::default();
        for i in 0..n {
            let at = arena.alloc(64);
            for w in 0..8 {
                arena.put64(at + 8 * w, 0x5eed + i as u64);
            }
        }
        Self(arena)
    }
    pub(crate) fn at(&self, i: usize) -> u64 {
        self.0.base + (Arena::MARGIN + (64 + Arena::GAP) * i) as u64
    }
}

/// Words of memory, kept alive while a test reads them: a mapping of their
/// own, with a margin either side wider than the search's windows, so the
/// search reads only what the test laid out (never the heap, which the
/// other tests running at the same time keep changing).
pub(crate) struct Arena {
    base: u64,
    used: usize,
}

impl Default for Arena {
    fn default() -> Self {
        // SAFETY: a fresh private anonymous mapping, unmapped on drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(
            p,
            libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        Self {
            base: p as u64,
            used: Self::MARGIN,
        }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `default`, no longer used.
        unsafe { libc::munmap(self.base as *mut libc::c_void, Self::LEN) };
    }
}

impl Arena {
    const LEN: usize = 16 << 20;
    /// Wider than the search's widest window (16 KiB).
    const MARGIN: usize = 64 << 10;
    /// Past the furthest field the layouts read from a block's start.
    const GAP: usize = 4096;

    /// A block of `bytes`, a gap after it (as heap blocks are never
    /// back to back with the one allocated before: no field of one is at a
    /// fixed offset from the other).
    pub(crate) fn alloc(&mut self, bytes: usize) -> u64 {
        let at = self.used;
        self.used += bytes.max(1).div_ceil(64) * 64 + Self::GAP;
        assert!(self.used + Self::MARGIN <= Self::LEN, "the arena is full");
        self.base + at as u64
    }
    pub(crate) fn put64(&mut self, addr: u64, v: u64) {
        self.with(addr, |w, i| w[i] = v);
    }
    pub(crate) fn put32(&mut self, addr: u64, v: u32) {
        let (word, hi) = (addr & !7, addr % 8 == 4);
        self.with(word, |w, i| {
            w[i] = if hi {
                (w[i] & 0xffff_ffff) | (u64::from(v) << 32)
            } else {
                (w[i] & !0xffff_ffff) | u64::from(v)
            }
        });
    }
    pub(crate) fn dims(&mut self, addr: u64, d: [u32; 3]) {
        for (i, v) in d.into_iter().enumerate() {
            self.put32(addr + 4 * i as u64, v);
        }
    }
    fn with(&mut self, addr: u64, f: impl FnOnce(&mut [u64], usize)) {
        let (start, end) = (
            self.base + Self::MARGIN as u64,
            self.base + self.used as u64,
        );
        assert!(
            addr >= start && addr + 8 <= end && addr.is_multiple_of(8),
            "{addr:#x} is not in the arena"
        );
        // SAFETY: the words allocated so far, in our own mapping.
        let words = unsafe {
            std::slice::from_raw_parts_mut(start as *mut u64, (end - start) as usize / 8)
        };
        f(words, ((addr - start) / 8) as usize)
    }
}

fn kernels(f: &Funcs, n: usize, seed: u32) -> Vec<KnownKernel> {
    (0..n as u32)
        .map(|i| KnownKernel {
            func: f.at((i as usize + seed as usize) % 8),
            grid: [seed * 1000 + 17 * i, 3 + i, 2],
            block: [32 * (i + 1), 2, 1],
            shared: 256 * (i + 1),
        })
        .collect()
}

/// The real driver's layout (driver 580, GPU exploration, graphs3 dumps):
/// 1896-byte records, every record of the exec on one list from exec+104
/// (next at +1160, node-index order), as many as the u32 at exec+200. A
/// record: node index +0, node type +4 (kernel 0, memset 2), owner exec
/// +24, function +32, grid +40, block +52, shared +64, flags +688 (0x100:
/// the head the driver puts before a run of kernels, 0x10000: a copy it
/// runs as a kernel of its own), next kernel of the run +728, next record
/// of the branch +1672. `others` > 0 builds graph C's shape (a kernel, a
/// memset, a copy, an empty node, the rest kernels); `fork` a graph with
/// parallel branches (no heads, each kernel its own run).
pub(crate) fn real_like(a: &mut Arena, ks: &[KnownKernel], others: usize, fork: bool) -> u64 {
    const REC: u64 = 1896;
    #[derive(Clone, Copy, PartialEq)]
    enum R {
        Head,
        Kernel(usize),
        Memset,
        Copy,
    }
    let order: Vec<R> = if fork {
        (0..ks.len()).map(R::Kernel).collect()
    } else if others > 0 {
        [R::Kernel(0), R::Memset, R::Head, R::Copy]
            .into_iter()
            .chain((1..ks.len()).map(R::Kernel))
            .collect()
    } else {
        [R::Head]
            .into_iter()
            .chain((0..ks.len()).map(R::Kernel))
            .collect()
    };
    let driver = a.alloc(64);
    let exec = a.alloc(1200);
    a.put64(exec, 0x2_0000_0002);
    // Records of a slab, not in list order (the head comes last).
    let recs = a.alloc(REC as usize * (order.len() + 2));
    let at = |i: usize| recs + REC * ((i + 1) % order.len()) as u64;
    a.put64(exec + 104, at(0));
    a.put64(exec + 112, at(order.len() - 1));
    a.put32(exec + 200, order.len() as u32);
    let nodes = (ks.len() + others) as u32;
    for (i, r) in order.iter().enumerate() {
        let e = at(i);
        let next = if i + 1 < order.len() { at(i + 1) } else { 0 };
        a.put32(e + 8, 0xffff_ffff);
        a.put64(e + 24, exec);
        a.put64(e + 1160, next);
        // A branch: the fork's root, its first branch and the join.
        let branch = match (fork, i) {
            (false, _) => next,
            (true, 0) => at(1),
            (true, 1) => at(order.len() - 1),
            (true, _) => 0,
        };
        a.put64(e + 1672, branch);
        // The next kernel of the run: runs are broken by memsets and
        // heads, and every kernel of a fork is a run of its own.
        let run_next = match order.get(i + 1) {
            Some(R::Kernel(_) | R::Copy) if !fork && *r != R::Memset => at(i + 1),
            _ => 0,
        };
        a.put64(e + 728, if i == 0 && others > 0 { 0 } else { run_next });
        match *r {
            R::Head => {
                a.put32(e, nodes);
                a.put64(e + 32, driver);
                a.dims(e + 52, [1, 1, 1]);
                a.put32(e + 688, 0x100);
            }
            R::Kernel(n) => {
                let k = &ks[n];
                a.put32(e, n as u32);
                a.put64(e + 32, k.func);
                a.dims(e + 40, k.grid);
                a.dims(e + 52, k.block);
                a.put32(e + 64, k.shared);
            }
            R::Memset => {
                a.put32(e, 1);
                a.put32(e + 4, 2);
                a.put64(e + 32, 5);
            }
            R::Copy => {
                a.put32(e, 2);
                a.put64(e + 32, driver + 8);
                a.dims(e + 40, [4, 1, 1]);
                a.dims(e + 52, [256, 1, 1]);
                a.put32(e + 688, 0x10000);
            }
        }
    }
    exec
}

/// The simulator's layout (tests/sim/README.md): exec+32 → plan (+12 record
/// count, +24 first record); 128-byte records, kind at 0, block +16, shared
/// +28, grid +32, function +48, next +112; other nodes are records without
/// a function.
pub(crate) fn sim_like(a: &mut Arena, ks: &[KnownKernel], others: usize, _fork: bool) -> u64 {
    let exec = a.alloc(48);
    a.put64(exec, 0x4345_5847_434d_4953);
    let plan = a.alloc(40);
    a.put64(exec + 32, plan);
    let n = ks.len() + others;
    a.put32(plan + 12, n as u32);
    a.put32(plan + 16, ks.len() as u32);
    let mut prev = None;
    for i in 0..n {
        let r = a.alloc(128);
        a.put32(r + 4, i as u32);
        // The other nodes come second, third and fourth, as in graph C.
        let k = match i {
            0 => Some(&ks[0]),
            1..=3 if others > 0 => None,
            _ => Some(&ks[i - others.min(3)]),
        };
        match k {
            Some(k) => {
                a.put32(r, 0x11);
                a.dims(r + 16, k.block);
                a.put32(r + 28, k.shared);
                a.dims(r + 32, k.grid);
                a.put64(r + 48, k.func);
            }
            None => a.put32(r, 0x12),
        }
        match prev {
            None => a.put64(plan + 24, r),
            Some(p) => a.put64(p + 112, r),
        }
        prev = Some(r);
    }
    a.put64(plan + 32, prev.expect("nodes"));
    exec
}

type Build = fn(&mut Arena, &[KnownKernel], usize, bool) -> u64;

/// Graphs A, B, C (mixed), E, F (parallel branches), as calibration builds.
fn graphs(arena: &mut Arena, f: &Funcs, build: Build) -> [KnownGraph; 5] {
    let g = |arena: &mut Arena, name, n, seed, others, fork| {
        let ks = kernels(f, n, seed);
        KnownGraph {
            name,
            exec: build(arena, &ks, others, fork),
            kernels: ks,
            others,
        }
    };
    [
        g(arena, "A", 5, 1, 0, false),
        g(arena, "B", 8, 2, 0, false),
        g(arena, "C", 5, 3, 3, false),
        g(arena, "E", 6, 4, 0, false),
        g(arena, "F", 5, 5, 0, true),
    ]
}

/// The searches read this whole process's memory: one at a time, so that
/// no other test's graphs change under one (they share the heap).
static SEARCHING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    SEARCHING.lock().unwrap_or_else(|e| e.into_inner())
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

/// What tells driver 580's records apart (`real580.rs` learns it from the
/// real ones): the node type at record +4 (kernel 0, memset 2), the flags
/// at record +688 (0 on a kernel node, 0x100 on a run head, 0x10000 on a
/// copy run as a kernel of the driver's), both relative to the function
/// at +32.
pub(crate) fn kinds_580() -> Kinds {
    Kinds {
        kind: -28,
        kernel: 0,
        others: vec![2],
        flags: Some(Flags {
            off: 656,
            kernel: 0,
            driver: vec![0x100, 0x10000],
        }),
    }
}

/// Graphs laid out as `build` does, and the layout the search finds from
/// them (one search at a time); the memory stays alive with it.
struct Searched {
    _one: std::sync::MutexGuard<'static, ()>,
    _funcs: Funcs,
    arena: Arena,
    graphs: [KnownGraph; 5],
    layout: ExecLayout,
}

fn searched(build: Build) -> Searched {
    let one = one_at_a_time();
    let funcs = Funcs::new(8);
    let mut arena = Arena::default();
    let graphs = graphs(&mut arena, &funcs, build);
    let [a, b, c, e, fork] = &graphs;
    let me = ProcessMem(std::process::id());
    let layout = search(&me, a, &[b, e, fork], c, deadline()).unwrap();
    Searched {
        _one: one,
        _funcs: funcs,
        arena,
        graphs,
        layout,
    }
}

#[test]
fn finds_the_real_drivers_layout() {
    let s = searched(real_like);
    let (l, [a, b, c, e, fork]) = (&s.layout, &s.graphs);
    let me = ProcessMem(std::process::id());
    assert_eq!(
        (l.prefix.as_slice(), l.walk, l.inner.as_slice(), l.func),
        (&[104][..], Walk::List { link: 1160 }, &[][..], 32),
        "{}",
        l.describe()
    );
    assert_eq!((l.grid, l.block, l.shared_mem), (8, 20, Some(32)));
    assert_eq!(l.count, Some(CountField { level: 0, off: 200 }));
    assert_eq!(l.mixed, Mixed::Exact);
    assert_eq!(l.kinds, Some(kinds_580()), "{}", l.describe());
    assert!(l.is_plausible());
    for g in [a, b, c, e, fork] {
        let read = l.read(&me, g.exec).unwrap();
        assert_eq!(
            read.iter()
                .map(|k| (k.function, k.grid, k.block, k.shared_mem_bytes))
                .collect::<Vec<_>>(),
            g.kernels
                .iter()
                .map(|k| (k.func, k.grid, k.block, k.shared))
                .collect::<Vec<_>>(),
            "graph {}",
            g.name
        );
    }
}

/// Without a graph of parallel branches, the per-branch list (+1672) reads
/// every calibration graph as well as the all-records list: calibration
/// must build one (it does: F).
#[test]
fn a_fork_tells_the_record_list_from_the_branch_list() {
    let _one = one_at_a_time();
    let f = Funcs::new(8);
    let mut arena = Arena::default();
    let [a, _, c, _, fork] = graphs(&mut arena, &f, real_like);
    let me = ProcessMem(std::process::id());
    let branch = ExecLayout {
        prefix: vec![104],
        walk: Walk::List { link: 1672 },
        ..search(&me, &a, &[&fork], &c, deadline()).unwrap()
    };
    assert!(branch.read(&me, a.exec).is_some());
    assert_eq!(branch.read(&me, fork.exec), None, "one branch of the fork");
}

/// An element of a kind calibration never saw makes the whole graph
/// opaque, never a graph with a node left out.
#[test]
fn an_unknown_element_refuses_the_graph() {
    let mut s = searched(real_like);
    let (l, b) = (s.layout.clone(), s.graphs[1].clone());
    let arena = &mut s.arena;
    let me = ProcessMem(std::process::id());
    let third = l.walk(&me, b.exec, 64).unwrap().slots[3];
    // Flags of a kind never seen (a cluster launch, say) on a kernel.
    arena.put32(third + 656, 0x4);
    assert_eq!(l.read(&me, b.exec), None);
    arena.put32(third + 656, 0);
    assert_eq!(l.read(&me, b.exec).unwrap().len(), 8);
    // A node type never seen (a host node, 3).
    arena.put32(third - 28, 3);
    assert_eq!(l.read(&me, b.exec), None);
}

#[test]
fn finds_the_simulators_layout() {
    let s = searched(sim_like);
    let (l, c) = (&s.layout, &s.graphs[2]);
    let me = ProcessMem(std::process::id());
    assert_eq!(
        (l.prefix.as_slice(), l.walk, l.func),
        (&[32, 24][..], Walk::List { link: 112 }, 48),
        "{}",
        l.describe()
    );
    assert_eq!((l.grid, l.block, l.shared_mem), (-16, -32, Some(-20)));
    assert_eq!(l.count, Some(CountField { level: 1, off: 12 }));
    assert_eq!(l.mixed, Mixed::Exact);
    assert_eq!(
        l.kinds, None,
        "the simulator's other nodes hold no function"
    );
    let read = l.read(&me, c.exec).unwrap();
    assert_eq!(
        read.iter().map(|k| k.function).collect::<Vec<_>>(),
        c.kernels.iter().map(|k| k.func).collect::<Vec<_>>()
    );
}

#[test]
fn reads_that_do_not_fit_give_nothing() {
    let _one = one_at_a_time();
    let f = Funcs::new(8);
    let mut arena = Arena::default();
    let ks = kernels(&f, 3, 1);
    let exec = sim_like(&mut arena, &ks, 0, false);
    let me = ProcessMem(std::process::id());
    let l = ExecLayout {
        prefix: vec![32, 24],
        walk: Walk::List { link: 112 },
        inner: vec![],
        func: 48,
        grid: -16,
        block: -32,
        shared_mem: Some(-20),
        count: Some(CountField { level: 1, off: 12 }),
        mixed: Mixed::Exact,
        kinds: None,
    };
    assert_eq!(l.read(&me, exec).unwrap().len(), 3);
    let plan = me.u64_at(exec + 32).unwrap();
    // A count that disagrees with the list.
    arena.put32(plan + 12, 4);
    assert_eq!(l.read(&me, exec), None);
    arena.put32(plan + 12, 3);
    // A ring that does not come back to the first element.
    let first = me.u64_at(plan + 24).unwrap();
    let second = me.u64_at(first + 112).unwrap();
    let third = me.u64_at(second + 112).unwrap();
    arena.put64(third + 112, second);
    assert_eq!(l.read(&me, exec), None);
    arena.put64(third + 112, 0);
    // An impossible block size.
    arena.dims(second + 16, [2048, 1, 1]);
    assert_eq!(l.read(&me, exec), None);
    arena.dims(second + 16, [64, 1, 1]);
    assert!(l.read(&me, exec).is_some());
    // Not a pointer at all.
    assert_eq!(l.read(&me, 8), None);
    let mut bad = l.clone();
    bad.walk = Walk::Array { stride: 4 };
    assert!(!bad.is_plausible());
    bad.walk = Walk::List { link: 1 << 20 };
    assert!(!bad.is_plausible());
}
