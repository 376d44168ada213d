//! cuBLASLt's descriptors of one process, as its calls made and changed
//! them: what gives a `cublasLtMatmul` its problem (`model::lt`).
//!
//! Bounded: [`MAX_DESCRIPTORS`] of each kind; a descriptor made past it is
//! not kept (its matmuls have no shape) and counted. A handle destroyed is
//! forgotten at once (its address may come back for another descriptor),
//! and one made again at the same address replaces the old.

use rustc_hash::FxHashMap as HashMap;

use crate::model::call::Args;
use crate::model::lt::{matmul_gemm, LtCall, LtDesc, LtLayout};

/// Live descriptors of each kind kept per process (PyTorch keeps a few
/// per matmul, for the call's length).
pub(crate) const MAX_DESCRIPTORS: usize = 4096;

/// Under `--overhead-budget` these calls are sampled: a descriptor is used
/// only if its calls were traced without a break from its making to the
/// matmul (else a change, or its destruction and another made at the same
/// address, may have been missed).
#[derive(Debug, Default)]
pub(crate) struct LtBook {
    /// Handle → (the descriptor, when it was made: CLOCK_MONOTONIC ns).
    descs: HashMap<u64, (LtDesc, u64)>,
    layouts: HashMap<u64, (LtLayout, u64)>,
    /// Descriptors not kept (past the bound).
    pub over: u64,
    /// Matmuls whose descriptors were not all known.
    pub unknown: u64,
    /// Matmuls whose problem was read from the descriptors' bytes the
    /// probe copied (`lt`).
    pub read: u64,
}

/// What a matmul's descriptors hold, read from the bytes its probe copied
/// (`None`: no copy, or its library's offsets are not known).
pub(crate) type FromMemory<'a> = &'a mut dyn FnMut() -> Option<(LtDesc, [LtLayout; 3])>;

impl LtBook {
    /// Follows a cuBLASLt call made at `now_ns` (CLOCK_MONOTONIC); a matmul
    /// whose descriptors are all known, and were followed without a break
    /// (`traced(from, to)`: the sampled probes were on throughout), becomes
    /// the GEMM they describe; one whose descriptors are not all known, the
    /// GEMM `from_memory` reads (made before the attach, or while sampled).
    pub(crate) fn apply(
        &mut self,
        args: &mut Args,
        ok: bool,
        now_ns: u64,
        traced: &dyn Fn(u64, u64) -> bool,
        from_memory: FromMemory<'_>,
    ) {
        let Args::Lt(call) = args else { return };
        match *call {
            LtCall::DescCreate {
                desc: Some(h),
                compute,
                ..
            } if ok => {
                let d = LtDesc {
                    compute,
                    ..LtDesc::default()
                };
                insert(&mut self.descs, h, (d, now_ns), &mut self.over);
            }
            LtCall::LayoutCreate {
                layout: Some(h),
                dtype,
                rows,
                cols,
                ..
            } if ok => {
                let l = LtLayout {
                    dtype,
                    rows,
                    cols,
                    batch: 1,
                };
                insert(&mut self.layouts, h, (l, now_ns), &mut self.over);
            }
            LtCall::DescSet { desc, attr, value } => match (value, self.descs.get_mut(&desc)) {
                (Some(v), Some(d)) if ok => d.0.set(attr, v),
                // A change not seen: the descriptor is no longer known.
                (_, Some(_)) if ok => {
                    self.descs.remove(&desc);
                }
                _ => {}
            },
            LtCall::LayoutSet {
                layout,
                attr,
                value,
            } => match (value, self.layouts.get_mut(&layout)) {
                (Some(v), Some(l)) if ok => l.0.set(attr, v),
                (_, Some(_)) if ok => {
                    self.layouts.remove(&layout);
                }
                _ => {}
            },
            LtCall::DescDestroy { desc } => {
                self.descs.remove(&desc);
            }
            LtCall::LayoutDestroy { layout } => {
                self.layouts.remove(&layout);
            }
            LtCall::Matmul { desc, a, b, c } => {
                let found = (
                    self.descs.get(&desc),
                    self.layouts.get(&a),
                    self.layouts.get(&b),
                    self.layouts.get(&c),
                );
                match found {
                    (Some(d), Some(a), Some(b), Some(c))
                        if traced(d.1.min(a.1).min(b.1).min(c.1), now_ns) =>
                    {
                        *args = Args::Gemm(matmul_gemm(&d.0, &a.0, &b.0, &c.0))
                    }
                    _ => match from_memory() {
                        Some((d, [a, b, c])) => {
                            self.read += 1;
                            *args = Args::Gemm(matmul_gemm(&d, &a, &b, &c));
                        }
                        None => self.unknown += 1,
                    },
                }
            }
            _ => {}
        }
    }
}

fn insert<V>(map: &mut HashMap<u64, V>, h: u64, v: V, over: &mut u64) {
    if map.len() < MAX_DESCRIPTORS || map.contains_key(&h) {
        map.insert(h, v);
    } else {
        *over += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gemm::{compute_name, dtype_name, op_name};

    fn lt(call: LtCall) -> Args {
        Args::Lt(call)
    }

    /// A call at time 0, every call traced.
    fn apply(book: &mut LtBook, args: &mut Args, ok: bool) {
        book.apply(args, ok, 0, &|_, _| true, &mut || None);
    }

    /// What PyTorch's Lt path does for one matmul: a descriptor with its
    /// operations set, three layouts, the matmul, the teardown.
    fn matmul(book: &mut LtBook, batch: Option<i64>) -> Args {
        apply(
            book,
            &mut lt(LtCall::DescCreate {
                desc: Some(0xd0),
                compute: 68,
                scale: 0,
            }),
            true,
        );
        apply(
            book,
            &mut lt(LtCall::DescSet {
                desc: 0xd0,
                attr: 3,
                value: Some(1),
            }),
            true,
        );
        for (h, rows, cols) in [(0xa0, 8192, 1024), (0xb0, 8192, 512), (0xc0, 1024, 512)] {
            apply(
                book,
                &mut lt(LtCall::LayoutCreate {
                    layout: Some(h),
                    dtype: 14,
                    rows,
                    cols,
                    ld: rows as i64,
                }),
                true,
            );
            if let Some(b) = batch {
                apply(
                    book,
                    &mut lt(LtCall::LayoutSet {
                        layout: h,
                        attr: 5,
                        value: Some(b),
                    }),
                    true,
                );
            }
        }
        let mut m = lt(LtCall::Matmul {
            desc: 0xd0,
            a: 0xa0,
            b: 0xb0,
            c: 0xc0,
        });
        apply(book, &mut m, true);
        for h in [0xa0, 0xb0, 0xc0] {
            apply(book, &mut lt(LtCall::LayoutDestroy { layout: h }), true);
        }
        apply(book, &mut lt(LtCall::DescDestroy { desc: 0xd0 }), true);
        m
    }

    #[test]
    fn a_matmul_gets_the_problem_its_descriptors_say() {
        let mut book = LtBook::default();
        let Args::Gemm(g) = matmul(&mut book, Some(4)) else {
            panic!("no shape")
        };
        assert_eq!(g.transa.and_then(op_name), Some("T"));
        assert_eq!(g.transb.and_then(op_name), Some("N"));
        // op(A) = A^T: k is A's rows.
        assert_eq!((g.m, g.n, g.k, g.batch), (1024, 512, 8192, Some(4)));
        assert_eq!(g.a_type.and_then(dtype_name), Some("bf16"));
        assert_eq!(g.compute.and_then(compute_name), Some("32F"));
        // Destroyed: a matmul naming the same handles now has no shape.
        let mut again = lt(LtCall::Matmul {
            desc: 0xd0,
            a: 0xa0,
            b: 0xb0,
            c: 0xc0,
        });
        apply(&mut book, &mut again, true);
        assert!(matches!(again, Args::Lt(LtCall::Matmul { .. })));
        assert_eq!(book.unknown, 1);
        let Args::Gemm(g) = matmul(&mut book, None) else {
            panic!("no shape")
        };
        assert_eq!(g.batch, Some(1));
    }

    /// Descriptors made before the attach: the matmul's problem is what
    /// its copy holds, when it could be read; else it has none.
    #[test]
    fn a_matmul_of_unknown_descriptors_takes_what_memory_says() {
        let mut book = LtBook::default();
        let desc = LtDesc {
            compute: 68,
            transa: 0,
            transb: 1,
        };
        let l = |rows, cols| LtLayout {
            dtype: 14,
            rows,
            cols,
            batch: 4,
        };
        let mut m = lt(LtCall::Matmul {
            desc: 1,
            a: 2,
            b: 3,
            c: 4,
        });
        book.apply(&mut m, true, 0, &|_, _| true, &mut || {
            Some((desc, [l(256, 2048), l(512, 2048), l(256, 512)]))
        });
        let Args::Gemm(g) = m else { panic!("no shape") };
        assert_eq!((g.m, g.n, g.k, g.batch), (256, 512, 2048, Some(4)));
        assert_eq!(g.transb.and_then(op_name), Some("T"));
        assert_eq!((book.read, book.unknown), (1, 0));
        let mut m = lt(LtCall::Matmul {
            desc: 1,
            a: 2,
            b: 3,
            c: 4,
        });
        apply(&mut book, &mut m, true);
        assert!(matches!(m, Args::Lt(LtCall::Matmul { .. })));
        assert_eq!((book.read, book.unknown), (1, 1));
    }

    #[test]
    fn an_attribute_not_read_forgets_the_descriptor_and_the_bound_holds() {
        let mut book = LtBook::default();
        apply(
            &mut book,
            &mut lt(LtCall::DescCreate {
                desc: Some(1),
                compute: 68,
                scale: 0,
            }),
            true,
        );
        apply(
            &mut book,
            &mut lt(LtCall::DescSet {
                desc: 1,
                attr: 3,
                value: None,
            }),
            true,
        );
        assert!(book.descs.is_empty());
        // Made while the sampled probes were on, used after a break: no shape.
        let mut fresh = LtBook::default();
        let Args::Gemm(_) = matmul(&mut fresh, None) else {
            panic!("no shape")
        };
        let mut m = lt(LtCall::Matmul {
            desc: 0xd0,
            a: 0xa0,
            b: 0xb0,
            c: 0xc0,
        });
        for h in [0xa0, 0xb0, 0xc0] {
            fresh.apply(
                &mut lt(LtCall::LayoutCreate {
                    layout: Some(h),
                    dtype: 14,
                    rows: 8,
                    cols: 8,
                    ld: 8,
                }),
                true,
                10,
                &|_, _| true,
                &mut || None,
            );
        }
        fresh.apply(
            &mut lt(LtCall::DescCreate {
                desc: Some(0xd0),
                compute: 68,
                scale: 0,
            }),
            true,
            20,
            &|_, _| true,
            &mut || None,
        );
        fresh.apply(
            &mut m,
            true,
            30,
            &|from, to| !(from <= 25 && 25 <= to),
            &mut || None,
        );
        assert!(matches!(m, Args::Lt(LtCall::Matmul { .. })), "{m:?}");
        for h in 0..(MAX_DESCRIPTORS as u64 + 3) {
            apply(
                &mut book,
                &mut lt(LtCall::LayoutCreate {
                    layout: Some(h + 1),
                    dtype: 0,
                    rows: 1,
                    cols: 1,
                    ld: 1,
                }),
                true,
            );
        }
        assert_eq!(book.layouts.len(), MAX_DESCRIPTORS);
        assert_eq!(book.over, 3);
    }
}
