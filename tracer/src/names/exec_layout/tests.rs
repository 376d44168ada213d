//! Executable graphs laid out in this process's memory as two different
//! drivers do (the simulator's made-up layout, and the real driver 580's as
//! the GPU exploration found it), searched and read.

use std::time::{Duration, Instant};

use super::*;
use crate::names::exec_search::{search, KnownGraph, KnownKernel};

/// Fake CUfunction objects: their addresses are the handles.
pub struct Funcs(Vec<[u64; 8]>);

impl Funcs {
    pub fn new(n: usize) -> Self {
        Self((0..n).map(|i| [0x5eed + i as u64; 8]).collect())
    }
    pub fn at(&self, i: usize) -> u64 {
        &self.0[i] as *const [u64; 8] as u64
    }
}

/// Words of memory, kept alive while a test reads them.
#[derive(Default)]
pub struct Arena(Vec<Vec<u64>>);

impl Arena {
    pub fn alloc(&mut self, bytes: usize) -> u64 {
        self.0.push(vec![0u64; bytes.div_ceil(8)]);
        self.0.last().expect("pushed").as_ptr() as u64
    }
    pub fn put64(&mut self, addr: u64, v: u64) {
        self.with(addr, |w, i| w[i] = v);
    }
    pub fn put32(&mut self, addr: u64, v: u32) {
        let (word, hi) = (addr & !7, addr % 8 == 4);
        self.with(word, |w, i| {
            w[i] = if hi {
                (w[i] & 0xffff_ffff) | (u64::from(v) << 32)
            } else {
                (w[i] & !0xffff_ffff) | u64::from(v)
            }
        });
    }
    pub fn dims(&mut self, addr: u64, d: [u32; 3]) {
        for (i, v) in d.into_iter().enumerate() {
            self.put32(addr + 4 * i as u64, v);
        }
    }
    fn with(&mut self, addr: u64, f: impl FnOnce(&mut Vec<u64>, usize)) {
        for w in &mut self.0 {
            let base = w.as_ptr() as u64;
            if addr >= base && addr < base + 8 * w.len() as u64 {
                let i = ((addr - base) / 8) as usize;
                return f(w, i);
            }
        }
        panic!("{addr:#x} is not in the arena");
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

/// The real driver's layout (driver 580, GPU exploration): exec+104 → a
/// head record (node count at +0) whose +728 is the first record; records
/// 1896 bytes apart, next at +728, function at +32, grid +40, block +52,
/// shared +64. A graph with other nodes is not on that list (its head's
/// +728 is NULL) but its count says 8.
pub fn real_like(a: &mut Arena, ks: &[KnownKernel], others: usize) -> u64 {
    const REC: u64 = 1896;
    let exec = a.alloc(400);
    a.put64(exec, 0x2_0000_0002);
    let recs = a.alloc(REC as usize * (ks.len() + 6));
    let head = recs + REC * (ks.len() as u64 + 5);
    a.put64(exec + 104, head);
    a.put64(exec + 112, recs + REC * (ks.len() as u64 - 1));
    a.put32(head, (ks.len() + others) as u32);
    a.put64(head + 24, exec);
    for (i, k) in ks.iter().enumerate() {
        let r = recs + REC * i as u64;
        a.put64(r, i as u64);
        a.put64(r + 24, exec);
        a.put64(r + 32, k.func);
        a.dims(r + 40, k.grid);
        a.dims(r + 52, k.block);
        a.put32(r + 64, k.shared);
        let next = if i + 1 < ks.len() { r + REC } else { 0 };
        a.put64(r + 728, next);
        a.put64(r + 1160, next);
        a.put64(r + 1152, if i == 0 { head } else { r - REC });
    }
    if others == 0 {
        a.put64(head + 728, recs);
    }
    exec
}

/// The simulator's layout (tests/sim/README.md): exec+32 → plan (+12 record
/// count, +24 first record); 128-byte records, kind at 0, block +16, shared
/// +28, grid +32, function +48, next +112; other nodes are records without
/// a function.
pub fn sim_like(a: &mut Arena, ks: &[KnownKernel], others: usize) -> u64 {
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

type Build = fn(&mut Arena, &[KnownKernel], usize) -> u64;

fn graphs(
    arena: &mut Arena,
    f: &Funcs,
    build: Build,
) -> (KnownGraph, KnownGraph, KnownGraph, KnownGraph) {
    let g = |arena: &mut Arena, name, n, seed, others| {
        let ks = kernels(f, n, seed);
        KnownGraph {
            name,
            exec: build(arena, &ks, others),
            kernels: ks,
            others,
        }
    };
    (
        g(arena, "A", 5, 1, 0),
        g(arena, "B", 8, 2, 0),
        g(arena, "C", 5, 3, 3),
        g(arena, "E", 6, 4, 0),
    )
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

#[test]
fn finds_the_real_drivers_layout() {
    let f = Funcs::new(8);
    let mut arena = Arena::default();
    let (a, b, c, e) = graphs(&mut arena, &f, real_like);
    let me = ProcessMem(std::process::id());
    let l = search(&me, &a, &[&b, &e], &c, deadline()).unwrap();
    assert_eq!(
        (l.prefix.as_slice(), l.walk, l.inner.as_slice(), l.func),
        (&[104, 728][..], Walk::List { link: 728 }, &[][..], 32),
        "{}",
        l.describe()
    );
    assert_eq!((l.grid, l.block, l.shared_mem), (8, 20, Some(32)));
    assert_eq!(l.count, Some(CountField { level: 1, off: 0 }));
    assert_eq!(l.mixed, Mixed::Refused);
    assert!(l.is_plausible());
    let read = l.read(&me, b.exec).unwrap();
    assert_eq!(read.len(), 8);
    assert_eq!(
        (read[3].function, read[3].grid),
        (b.kernels[3].func, b.kernels[3].grid)
    );
    assert_eq!(l.read(&me, c.exec), None, "the mixed graph is refused");
}

#[test]
fn finds_the_simulators_layout() {
    let f = Funcs::new(8);
    let mut arena = Arena::default();
    let (a, b, c, e) = graphs(&mut arena, &f, sim_like);
    let me = ProcessMem(std::process::id());
    let l = search(&me, &a, &[&b, &e], &c, deadline()).unwrap();
    assert_eq!(
        (l.prefix.as_slice(), l.walk, l.func),
        (&[32, 24][..], Walk::List { link: 112 }, 48),
        "{}",
        l.describe()
    );
    assert_eq!((l.grid, l.block, l.shared_mem), (-16, -32, Some(-20)));
    assert_eq!(l.count, Some(CountField { level: 1, off: 12 }));
    assert_eq!(l.mixed, Mixed::Exact);
    let read = l.read(&me, c.exec).unwrap();
    assert_eq!(
        read.iter().map(|k| k.function).collect::<Vec<_>>(),
        c.kernels.iter().map(|k| k.func).collect::<Vec<_>>()
    );
}

#[test]
fn reads_that_do_not_fit_give_nothing() {
    let f = Funcs::new(8);
    let mut arena = Arena::default();
    let ks = kernels(&f, 3, 1);
    let exec = sim_like(&mut arena, &ks, 0);
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
