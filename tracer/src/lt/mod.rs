//! cuBLASLt's opaque descriptors read as a matmul is made, for the
//! matmuls whose descriptors were made before gputrace attached (XLA
//! keeps a plan's descriptors for the life of the program; `decode::lt`
//! knows only those it saw made).
//!
//! The probe on `cublasLtMatmul` copies, at entry, the first 64 bytes of
//! the matmul descriptor and of the A, B and C layouts ([`SNAPSHOT`]
//! bytes: the eBPF side's `BLOB_LT_MATMUL`). Where a build keeps each field in them
//! is found from the library itself (`calibrate`: a helper process makes
//! descriptors of known values with the library's own calls and finds the
//! values' offsets), per library file (`files`). A field not found, or a
//! value that is not plausible, leaves the matmul without a shape: never
//! a guessed one.

pub(crate) mod calibrate;
pub(crate) mod files;

use serde::{Deserialize, Serialize};

use crate::model::lt::{LtDesc, LtLayout};

/// Bytes of each descriptor the probe copies.
pub(crate) const PART: usize = tracer_common::LT_PART;
/// The copy: the matmul descriptor, then the A, B and C layouts.
pub(crate) const SNAPSHOT: usize = 4 * PART;

/// Where a field is in a descriptor: its byte offset, and whether it is
/// 64 bits wide (else 32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Field {
    pub off: u16,
    pub wide: bool,
}

impl Field {
    fn read(self, part: &[u8]) -> Option<u64> {
        let off = usize::from(self.off);
        if self.wide {
            Some(u64::from_le_bytes(part.get(off..off + 8)?.try_into().ok()?))
        } else {
            Some(u64::from(u32::from_le_bytes(
                part.get(off..off + 4)?.try_into().ok()?,
            )))
        }
    }

    fn is_plausible(self) -> bool {
        let len = if self.wide { 8 } else { 4 };
        usize::from(self.off) + len <= PART && self.off.is_multiple_of(4)
    }
}

/// Where one libcublasLt build keeps what gives a matmul its problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LtOffsets {
    /// In the matmul descriptor.
    pub compute: Field,
    pub transa: Field,
    pub transb: Field,
    /// In a matrix layout.
    pub dtype: Field,
    pub rows: Field,
    pub cols: Field,
    pub batch: Field,
}

/// Sizes above this are not believed (a stale or foreign read).
const MAX_DIM: u64 = 1 << 40;

impl LtOffsets {
    /// Within the bytes copied, 4-aligned: anything else (from a hostile
    /// helper) is refused.
    pub(crate) fn is_plausible(&self) -> bool {
        [
            self.compute,
            self.transa,
            self.transb,
            self.dtype,
            self.rows,
            self.cols,
            self.batch,
        ]
        .iter()
        .all(|f| f.is_plausible())
    }

    /// The descriptor and the A, B, C layouts in a snapshot, when every
    /// value read is one a matmul can have.
    pub(crate) fn decode(&self, snap: &[u8]) -> Option<(LtDesc, [LtLayout; 3])> {
        if snap.len() < SNAPSHOT {
            return None;
        }
        let desc = &snap[..PART];
        let op = |f: Field| f.read(desc).filter(|v| *v <= 2).map(|v| v as u32);
        let d = LtDesc {
            compute: self.compute.read(desc).filter(|v| *v < 1 << 16)? as u32,
            transa: op(self.transa)?,
            transb: op(self.transb)?,
        };
        let layout = |i: usize| -> Option<LtLayout> {
            let p = &snap[PART * i..PART * (i + 1)];
            let dim = |f: Field| f.read(p).filter(|v| (1..=MAX_DIM).contains(v));
            Some(LtLayout {
                dtype: self.dtype.read(p).filter(|v| *v < 256)? as u32,
                rows: dim(self.rows)?,
                cols: dim(self.cols)?,
                batch: self
                    .batch
                    .read(p)
                    .map(|v| v as u32 as i32 as i64)
                    .filter(|v| (1..=1 << 31).contains(v))?,
            })
        };
        Some((d, [layout(1)?, layout(2)?, layout(3)?]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(off: u16, wide: bool) -> Field {
        Field { off, wide }
    }

    /// The simulator's packing (tests/sim/cublaslt.c).
    fn sim() -> LtOffsets {
        LtOffsets {
            compute: f(16, false),
            transa: f(28, false),
            transb: f(24, false),
            dtype: f(12, false),
            rows: f(24, true),
            cols: f(16, true),
            batch: f(48, false),
        }
    }

    fn put(buf: &mut [u8], at: usize, v: u64, wide: bool) {
        let n = if wide { 8 } else { 4 };
        buf[at..at + n].copy_from_slice(&v.to_le_bytes()[..n]);
    }

    #[test]
    fn a_snapshot_decodes_to_its_problem_and_implausible_values_to_none() {
        let o = sim();
        assert!(o.is_plausible());
        let mut s = vec![0u8; SNAPSHOT];
        put(&mut s, 16, 68, false);
        put(&mut s, 28, 0, false);
        put(&mut s, 24, 1, false);
        for (i, (rows, cols)) in [(256u64, 2048u64), (512, 2048), (256, 512)]
            .into_iter()
            .enumerate()
        {
            let p = PART * (i + 1);
            put(&mut s, p + 12, 14, false);
            put(&mut s, p + 24, rows, true);
            put(&mut s, p + 16, cols, true);
            put(&mut s, p + 48, 4, false);
        }
        let (d, [a, b, c]) = o.decode(&s).expect("decodes");
        assert_eq!((d.compute, d.transa, d.transb), (68, 0, 1));
        assert_eq!((a.rows, a.cols, b.rows, c.cols), (256, 2048, 512, 512));
        assert_eq!((a.dtype, c.batch), (14, 4));
        let g = crate::model::lt::matmul_gemm(&d, &a, &b, &c);
        assert_eq!((g.m, g.n, g.k, g.batch), (256, 512, 2048, Some(4)));
        // A layout freed and zeroed, an operation out of range, a short copy.
        let mut zero = s.clone();
        put(&mut zero, PART * 2 + 24, 0, true);
        assert!(o.decode(&zero).is_none());
        let mut bad = s.clone();
        put(&mut bad, 28, 7, false);
        assert!(o.decode(&bad).is_none());
        assert!(o.decode(&s[..SNAPSHOT - 1]).is_none());
        // Offsets past the copy are refused.
        let mut far = sim();
        far.rows = f(60, true);
        assert!(!far.is_plausible());
        far.rows = f(30, false);
        assert!(!far.is_plausible());
    }
}
