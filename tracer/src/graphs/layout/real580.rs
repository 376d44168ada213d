//! The layout calibration found on driver 580.159, read on records cut out
//! of that driver's memory on the GPU machine (explore1: graph A, five
//! kernel nodes built node by node; graph C, a kernel, a memset, a device
//! copy, an empty node, a kernel from a CUkernel, a child graph of two
//! kernels, a kernel). The fixture is (u64 address, u32 length, bytes)*,
//! little-endian: whole 1896-byte records where the dump had them.

use crate::graphs::layout::search::check;
use crate::graphs::layout::search::KnownGraph;
use crate::graphs::layout::search::KnownKernel;
use crate::graphs::layout::search::Reading;
use crate::graphs::layout::*;

/// Memory from a fixture.
pub(super) struct Fixture(Vec<(u64, Vec<u8>)>);

impl Fixture {
    pub(super) fn parse(mut b: &[u8]) -> Self {
        let mut out = Vec::new();
        while b.len() >= 12 {
            let addr = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
            let len = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")) as usize;
            out.push((addr, b[12..12 + len].to_vec()));
            b = &b[12 + len..];
        }
        Self(out)
    }
}

impl Mem for Fixture {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.0.iter().any(|(a, b)| {
            let fits = addr >= *a && addr + buf.len() as u64 <= a + b.len() as u64;
            if fits {
                let o = (addr - a) as usize;
                buf.copy_from_slice(&b[o..o + buf.len()]);
            }
            fits
        })
    }
}

fn k(func: u64, grid: [u32; 3], block: [u32; 3], shared: u32) -> KnownKernel {
    KnownKernel {
        func,
        grid,
        block,
        shared,
    }
}

fn explore1() -> (Fixture, KnownGraph, KnownGraph) {
    let mem = Fixture::parse(include_bytes!(
        "../../../tests/fixtures/exec580_explore1.bin"
    ));
    let f = [
        0x55ed0056dc30,
        0x55ed008eb480,
        0x55ed00fe9a40,
        0x55ed00fe95a0,
        0x55ed00fe9100,
    ];
    let a = KnownGraph {
        name: "A",
        exec: 0x55ed008f7a50,
        kernels: (0..5u32)
            .map(|i| {
                k(
                    f[i as usize],
                    [1000 + 17 * i, 3 + i, 2],
                    [32 * (i + 1), 2, 1],
                    256 * (i + 1),
                )
            })
            .collect(),
        others: 0,
    };
    let c = KnownGraph {
        name: "C",
        exec: 0x55ed01001a90,
        kernels: vec![
            k(0x55ed0056dc30, [3000, 5, 5], [64, 1, 1], 512),
            k(0x55ed008f40b0, [3100, 6, 6], [96, 1, 1], 768),
            k(0x55ed00feb190, [3200, 7, 7], [64, 1, 1], 1024),
            k(0x55ed00feacf0, [3300, 8, 8], [32, 2, 1], 1280),
            k(0x55ed00fea850, [3400, 9, 9], [128, 1, 1], 1536),
        ],
        others: 3,
    };
    (mem, a, c)
}

fn list(prefix: &[i32], link: i32, count: Option<CountField>) -> ExecLayout {
    ExecLayout {
        prefix: prefix.to_vec(),
        walk: Walk::List { link },
        inner: vec![],
        func: 32,
        grid: 8,
        block: 20,
        shared_mem: Some(32),
        count,
        mixed: Mixed::Refused,
        kinds: None,
    }
}

/// The layout in the GPU run's cache reads the kernel-only graph exactly
/// and refuses the mixed one (opaque), never misreads it.
#[test]
fn the_calibrated_580_layout_reads_a_and_refuses_c() {
    let (mem, a, c) = explore1();
    let l = list(&[104, 728], 728, Some(CountField { level: 1, off: 0 }));
    assert_eq!(check(&mem, &l, &a), Reading::Exact);
    let read = l.read(&mem, a.exec).unwrap();
    assert_eq!(
        read.iter()
            .map(|k| (k.function, k.grid))
            .collect::<Vec<_>>(),
        a.kernels
            .iter()
            .map(|k| (k.func, k.grid))
            .collect::<Vec<_>>()
    );
    assert_eq!(l.read(&mem, c.exec), None);
}

/// In these two linear graphs every record of the exec is on the list
/// from *(exec+104) with next at +1672 (as many as the u32 at exec+200):
/// the head of each run of kernels (no kernel node), a memset, and a device
/// copy the driver runs as a kernel of its own among the kernels. (On
/// graphs with parallel branches +1672 is per branch: see the graphs3
/// test below, where +1160 holds every record.) Read as kernels that list
/// is wrong, and the layout's own checks refuse it (never a misread).
#[test]
fn every_580_record_is_on_one_list_that_is_no_kernel_list() {
    let (mem, a, c) = explore1();
    let all = list(&[104], 1672, None);
    assert_eq!(all.walk(&mem, a.exec, 64).unwrap().slots.len(), 6);
    assert_eq!(all.walk(&mem, c.exec, 64).unwrap().slots.len(), 8);
    // The record count at exec+200 (u32) counts them.
    assert_eq!(mem.u32_at(a.exec + 200), Some(6));
    assert_eq!(mem.u32_at(c.exec + 200), Some(8));
    assert!(matches!(check(&mem, &all, &a), Reading::Wrong(_)));
    assert!(matches!(check(&mem, &all, &c), Reading::Wrong(_)));
    assert_eq!(all.read(&mem, a.exec), None);
    assert_eq!(all.read(&mem, c.exec), None);
}

/// From the graphs3 GPU run (session 3): JAX's command-buffer exec (64
/// kernel nodes on parallel branches), torch's forward graph (27 kernels,
/// a memset), and two graphs of known shapes (kernel, device copy, kernel;
/// five kernels in a row): for each exec, the first 208 bytes and, for
/// every record on the +1160 list, bytes +0..+80, +688..+696, +728..+736
/// and +1160..+1168.
fn graphs3() -> Fixture {
    Fixture::parse(include_bytes!(
        "../../../tests/fixtures/exec580_graphs3.bin"
    ))
}

const JAX: u64 = 0xbc62d70;
const TORCH_FORWARD: u64 = 0x246ba540;
const SHAPE_MEMCPY: u64 = 0x563ba919de90;
const SHAPE_LINEAR: u64 = 0x563ba9c544e0;

/// Every record of an exec (kernel nodes, memsets, run heads, copies run
/// as kernels) is on one list from *(exec+104), next at +1160, as many as
/// the u32 at exec+200; JAX's exec has kernel records only, so that list
/// reads its 64 kernels exactly, where the calibrated layout (a run's
/// +728 list) refuses it: why it read as opaque.
#[test]
fn the_580_record_list_reads_jax_and_the_calibrated_layout_does_not() {
    let mem = graphs3();
    let all = list(&[104], 1160, Some(CountField { level: 0, off: 200 }));
    let calibrated = list(&[104, 728], 728, Some(CountField { level: 1, off: 0 }));
    let jax = all.read(&mem, JAX).unwrap();
    assert_eq!(jax.len(), 64);
    assert_eq!(
        (
            jax[0].function,
            jax[0].grid,
            jax[0].block,
            jax[0].shared_mem_bytes
        ),
        (0xc198b60, [256, 1, 1], [128, 1, 1], 16384)
    );
    assert_eq!(jax[63].function, 0xb932970);
    let distinct: std::collections::HashSet<u64> = jax.iter().map(|k| k.function).collect();
    assert_eq!(distinct.len(), 64);
    assert_eq!(calibrated.read(&mem, JAX), None);
    // Torch's forward graph: 30 records for 27 kernels and a memset (two
    // run heads); neither layout reads it (never a misread).
    assert_eq!(mem.u32_at(TORCH_FORWARD + 200), Some(30));
    assert_eq!(all.walk(&mem, TORCH_FORWARD, 64).unwrap().slots.len(), 30);
    assert_eq!(all.read(&mem, TORCH_FORWARD), None);
    assert_eq!(calibrated.read(&mem, TORCH_FORWARD), None);
    // Five kernels in a row: one run, its head first; the calibrated
    // layout reads them, the record list meets the head (grid 0) and
    // refuses.
    assert_eq!(calibrated.read(&mem, SHAPE_LINEAR).unwrap().len(), 5);
    assert_eq!(all.read(&mem, SHAPE_LINEAR), None);
}

/// What tells records apart on that driver (all records of the run: 220
/// kernels, 15 run heads, 4 memsets, 1 copy): u32 +4 is the node type (2
/// for a memset), u32 +688 is 0x100 for a run head, 0x10000 for a device
/// copy the driver runs as a kernel of its own, 0 for a kernel node.
#[test]
fn a_580_device_copy_is_a_kernel_record_of_the_drivers() {
    let mem = graphs3();
    let all = list(&[104], 1160, Some(CountField { level: 0, off: 200 }));
    let slots = all.walk(&mem, SHAPE_MEMCPY, 16).unwrap().slots;
    let flags: Vec<(u32, u32)> = slots
        .iter()
        .map(|s| (mem.u32_at(s - 28).unwrap(), mem.u32_at(s + 656).unwrap()))
        .collect();
    assert_eq!(flags, vec![(0, 0x100), (0, 0), (0, 0x10000), (0, 0)]);
    let copy = all.kernel_at(&mem, slots[2]).unwrap();
    assert_eq!((copy.grid, copy.block), ([4, 1, 1], [256, 1, 1]));
    assert!(plausible(&copy), "a copy looks like a kernel by its fields");
}

/// What calibration learns from the real records of graphs A and C
/// (explore1: C has a memset, a device copy, an empty node and a child
/// graph) tells every record apart: the node type at record +4 (kernel 0,
/// memset 2) and the flags at record +688 (0 on a kernel node, 0x100 on a
/// run head, 0x10000 on a copy run as a kernel of the driver's).
fn learned_580() -> Kinds {
    let (mem, a, c) = explore1();
    // In this fixture C's records are whole along +1672 only (the memset
    // record was cut at 1056 bytes); in these linear graphs +1672 holds
    // every record too.
    let l = list(&[104], 1672, Some(CountField { level: 0, off: 200 }));
    crate::graphs::layout::search::records::learn_kinds(&mem, &l, &[&a, &c]).unwrap()
}

#[test]
fn calibration_learns_the_580_record_kinds() {
    assert_eq!(learned_580(), crate::graphs::layout::tests::kinds_580());
}

/// With those kinds, the list of every record reads what the GPU run's
/// graphs ran: JAX's 64 kernels on parallel branches, torch's forward
/// graph (27 kernels, a memset, two run heads), a graph with a device copy
/// between two kernels, five kernels in a row; and explore1's A and C.
#[test]
fn the_580_record_list_with_kinds_reads_every_graph() {
    let kinds = learned_580();
    let all = ExecLayout {
        kinds: Some(kinds),
        mixed: Mixed::Exact,
        ..list(&[104], 1160, Some(CountField { level: 0, off: 200 }))
    };
    let mem = graphs3();
    let n = |exec| all.read(&mem, exec).map(|k| k.len());
    assert_eq!(n(JAX), Some(64));
    assert_eq!(n(TORCH_FORWARD), Some(27));
    assert_eq!(n(SHAPE_MEMCPY), Some(2));
    assert_eq!(n(SHAPE_LINEAR), Some(5));
    let torch = all.read(&mem, TORCH_FORWARD).unwrap();
    assert!(torch.iter().all(plausible));
    assert!(torch
        .iter()
        .all(|k| k.grid != [4, 1, 1] || k.block != [256, 1, 1]));
    let (mem, a, c) = explore1();
    let branch = ExecLayout {
        walk: Walk::List { link: 1672 },
        ..all.clone()
    };
    assert_eq!(check(&mem, &branch, &a), Reading::Exact);
    assert_eq!(check(&mem, &branch, &c), Reading::Exact);
    // C's record list is cut short in this fixture: refused, not misread.
    assert_eq!(all.read(&mem, c.exec), None);
}
