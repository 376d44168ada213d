//! cuBLASLt calls: `cublasLtMatmul` and the descriptor calls that say
//! what its opaque descriptors hold (cublasLt.h).
//!
//! A matmul's problem is in its matmul descriptor (compute type,
//! operations) and its matrix layouts (type, rows, columns, batch count),
//! opaque structs whose contents differ between builds. gputrace does not
//! read them: it sees them made. `cublasLtMatmulDescCreate` and
//! `cublasLtMatrixLayoutCreate` give the values and (at return) the
//! handle, `*SetAttribute` the changes, `*Destroy` the end; the matmul is
//! given the problem of the descriptors it names (`decode::lt`). A
//! descriptor made before gputrace attached, or initialised in place
//! (`*Init`), is not known: its matmuls have no shape, never a guessed one.

use crate::model::gemm::Gemm;

/// What a cuBLASLt entry point does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LtOp {
    /// `cublasLtMatmulDescCreate(desc*, computeType, scaleType)`.
    DescCreate,
    /// `cublasLtMatmulDescSetAttribute(desc, attr, buf, size)`.
    DescSet,
    /// `cublasLtMatmulDescDestroy(desc)`.
    DescDestroy,
    /// `cublasLtMatrixLayoutCreate(layout*, type, rows, cols, ld)`.
    LayoutCreate,
    /// `cublasLtMatrixLayoutSetAttribute(layout, attr, buf, size)`.
    LayoutSet,
    /// `cublasLtMatrixLayoutDestroy(layout)`.
    LayoutDestroy,
    /// `cublasLtMatmul(handle, computeDesc, alpha, A, Adesc, B, Bdesc,
    /// beta, C, Cdesc, D, Ddesc, algo, workspace, size, stream)`.
    Matmul,
}

/// `cublasLtMatmulDescAttributes_t` values gputrace follows.
pub const DESC_COMPUTE_TYPE: u32 = 0;
pub const DESC_TRANSA: u32 = 3;
pub const DESC_TRANSB: u32 = 4;
/// `cublasLtMatrixLayoutAttribute_t` values gputrace follows.
pub const LAYOUT_TYPE: u32 = 0;
pub const LAYOUT_ROWS: u32 = 2;
pub const LAYOUT_COLS: u32 = 3;
pub const LAYOUT_BATCH_COUNT: u32 = 5;

/// A cuBLASLt call's arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LtCall {
    /// The descriptor made (`None`: the call failed or had no return
    /// probe), its compute and scale types.
    DescCreate {
        desc: Option<u64>,
        compute: u32,
        scale: u32,
    },
    LayoutCreate {
        layout: Option<u64>,
        dtype: u32,
        rows: u64,
        cols: u64,
        ld: i64,
    },
    /// An attribute set: its value as the integer the caller pointed to
    /// (`None`: unreadable, or not 4 or 8 bytes).
    DescSet {
        desc: u64,
        attr: u32,
        value: Option<i64>,
    },
    LayoutSet {
        layout: u64,
        attr: u32,
        value: Option<i64>,
    },
    DescDestroy {
        desc: u64,
    },
    LayoutDestroy {
        layout: u64,
    },
    /// A matmul whose descriptors were not all seen made (a matmul whose
    /// descriptors were known is an `Args::Gemm`).
    Matmul {
        desc: u64,
        a: u64,
        b: u64,
        c: u64,
    },
}

/// A matmul descriptor as made and changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LtDesc {
    pub compute: u32,
    /// `cublasOperation_t` of A and B (N unless set).
    pub transa: u32,
    pub transb: u32,
}

/// A matrix layout as made and changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LtLayout {
    pub dtype: u32,
    pub rows: u64,
    pub cols: u64,
    /// 1 unless set.
    pub batch: i64,
}

impl LtDesc {
    pub fn set(&mut self, attr: u32, v: i64) {
        match attr {
            DESC_COMPUTE_TYPE => self.compute = v as u32,
            DESC_TRANSA => self.transa = v as u32,
            DESC_TRANSB => self.transb = v as u32,
            _ => {}
        }
    }
}

impl LtLayout {
    pub fn set(&mut self, attr: u32, v: i64) {
        match attr {
            LAYOUT_TYPE => self.dtype = v as u32,
            LAYOUT_ROWS => self.rows = v as u64,
            LAYOUT_COLS => self.cols = v as u64,
            LAYOUT_BATCH_COUNT => self.batch = v,
            _ => {}
        }
    }
}

/// The GEMM a matmul computes: D = op(A) op(B) (+ C), op(A) m × k,
/// op(B) k × n, C and D m × n, each `batch` times (C's batch count).
pub fn matmul_gemm(d: &LtDesc, a: &LtLayout, b: &LtLayout, c: &LtLayout) -> Gemm {
    let known = |v: u32| Some(v).filter(|v| crate::model::gemm::op_name(*v).is_some());
    let k = if d.transa == 0 { a.cols } else { a.rows };
    let ty = |t: u32| Some(t).filter(|t| crate::model::gemm::dtype_name(*t).is_some());
    Gemm {
        transa: known(d.transa),
        transb: known(d.transb),
        m: c.rows as i64,
        n: c.cols as i64,
        k: k as i64,
        batch: Some(c.batch),
        a_type: ty(a.dtype),
        b_type: ty(b.dtype),
        c_type: ty(c.dtype),
        compute: Some(d.compute).filter(|c| crate::model::gemm::compute_name(*c).is_some()),
    }
}

/// The integer an attribute's buffer holds: `size` bytes (4 or 8) of
/// `word`, the first 8 bytes the probe read.
pub fn attr_value(word: u64, size: u64) -> Option<i64> {
    match size {
        4 => Some(word as u32 as i32 as i64),
        8 => Some(word as i64),
        _ => None,
    }
}
