//! The `blas` probe family: every GEMM entry point libcublas exports (the
//! typed, Ex, batched and strided-batched forms and their `_64` variants),
//! and cublasLtMatmul with the descriptor calls that say its problem
//! (`model::lt`). Prototypes as in cublas_api.h and cublasLt.h (CUDA 13);
//! argument positions 0-based.

use crate::model::gemm::GemmForm;
use crate::model::lt::LtOp;

/// What a BLAS entry point is.
#[derive(Clone, Copy)]
pub(crate) enum Blas {
    /// A libcublas GEMM; `wide`: the `_64` form.
    Gemm { form: GemmForm, wide: bool },
    /// A libcublasLt call.
    Lt(LtOp),
}

/// One row: the symbol and what it is.
pub(crate) struct BlasRow(pub &'static str, pub Blas);

/// `cudaDataType_t` of the typed forms.
const R32F: u32 = 0;
const R64F: u32 = 1;
const R16F: u32 = 2;
const C32F: u32 = 4;
const C64F: u32 = 5;

/// Every BLAS API gputrace probes.
#[rustfmt::skip]
pub(crate) fn rows() -> Vec<BlasRow> {
    use GemmForm::{BatchedEx, Ex, SEx, StridedEx, Typed, TypedBatched, TypedStrided};
    let mut out = Vec::new();
    let mut gemm = |name: &'static str, wide_name: &'static str, form| {
        out.push(BlasRow(name, Blas::Gemm { form, wide: false }));
        out.push(BlasRow(wide_name, Blas::Gemm { form, wide: true }));
    };
    gemm("cublasSgemm_v2", "cublasSgemm_v2_64", Typed(R32F));
    gemm("cublasDgemm_v2", "cublasDgemm_v2_64", Typed(R64F));
    gemm("cublasHgemm", "cublasHgemm_64", Typed(R16F));
    gemm("cublasCgemm_v2", "cublasCgemm_v2_64", Typed(C32F));
    gemm("cublasZgemm_v2", "cublasZgemm_v2_64", Typed(C64F));
    gemm("cublasSgemmStridedBatched", "cublasSgemmStridedBatched_64", TypedStrided(R32F));
    gemm("cublasDgemmStridedBatched", "cublasDgemmStridedBatched_64", TypedStrided(R64F));
    gemm("cublasHgemmStridedBatched", "cublasHgemmStridedBatched_64", TypedStrided(R16F));
    gemm("cublasSgemmBatched", "cublasSgemmBatched_64", TypedBatched(R32F));
    gemm("cublasDgemmBatched", "cublasDgemmBatched_64", TypedBatched(R64F));
    gemm("cublasHgemmBatched", "cublasHgemmBatched_64", TypedBatched(R16F));
    gemm("cublasSgemmEx", "cublasSgemmEx_64", SEx);
    gemm("cublasGemmEx", "cublasGemmEx_64", Ex);
    gemm("cublasGemmStridedBatchedEx", "cublasGemmStridedBatchedEx_64", StridedEx);
    gemm("cublasGemmBatchedEx", "cublasGemmBatchedEx_64", BatchedEx);
    for (name, op) in [
        ("cublasLtMatmulDescCreate", LtOp::DescCreate),
        ("cublasLtMatmulDescSetAttribute", LtOp::DescSet),
        ("cublasLtMatmulDescDestroy", LtOp::DescDestroy),
        ("cublasLtMatrixLayoutCreate", LtOp::LayoutCreate),
        ("cublasLtMatrixLayoutSetAttribute", LtOp::LayoutSet),
        ("cublasLtMatrixLayoutDestroy", LtOp::LayoutDestroy),
        ("cublasLtMatmul", LtOp::Matmul),
    ] {
        out.push(BlasRow(name, Blas::Lt(op)));
    }
    out
}
