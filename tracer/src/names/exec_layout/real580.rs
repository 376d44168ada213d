//! The layout calibration found on driver 580.159, read on records cut out
//! of that driver's memory on the GPU machine (explore1: graph A, five
//! kernel nodes built node by node; graph C, a kernel, a memset, a device
//! copy, an empty node, a kernel from a CUkernel, a child graph of two
//! kernels, a kernel). The fixture is (u64 address, u32 length, bytes)*,
//! little-endian: whole 1896-byte records where the dump had them.

use super::*;
use crate::names::exec_search::{check, KnownGraph, KnownKernel, Reading};

/// Memory from a fixture.
pub struct Fixture(Vec<(u64, Vec<u8>)>);

impl Fixture {
    pub fn parse(mut b: &[u8]) -> Self {
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

/// What a reader of mixed graphs has to deal with on that driver (see
/// /work/notes/graphs.md, "graphs3"): every record of an exec is on one
/// list from *(exec+104), next at +1672, the head of each run of kernels
/// (no kernel node) and a memset among them, and a device copy that the
/// driver runs as a kernel of its own; that list read as kernels is wrong,
/// and the layout's own checks refuse it (never a misread).
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
