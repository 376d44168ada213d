/*
 * cublas.c - the gputrace simulator's libcublas.so.13: a handle with a
 * stream, and the GEMM entry points of cublas_api.h (the typed v2 forms,
 * GemmEx, the strided-batched and batched forms, and _64 variants),
 * prototypes in tests/sim/include/cublas_sim.h. Each GEMM launches its
 * kernels on the handle's stream through libcublasLt.so.13
 * (sim_blas_launch), as real cuBLAS runs its GEMMs through cuBLASLt.
 */
#include <stdlib.h>

#include "cublas_sim.h"

#define API __attribute__((visibility("default")))

struct sim_cublas_context {
    uint64_t magic;
    CUstream stream;
};
#define BLAS_MAGIC 0x73696d426c6173ULL

API cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
    if (handle == NULL) return CUBLAS_STATUS_INVALID_VALUE;
    struct sim_cublas_context *h = calloc(1, sizeof(*h));
    if (h == NULL) return CUBLAS_STATUS_ALLOC_FAILED;
    h->magic = BLAS_MAGIC;
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
    if (handle == NULL || handle->magic != BLAS_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->magic = 0;
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, CUstream streamId)
{
    if (handle == NULL || handle->magic != BLAS_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = streamId;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, CUstream *streamId)
{
    if (handle == NULL || handle->magic != BLAS_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (streamId == NULL) return CUBLAS_STATUS_INVALID_VALUE;
    *streamId = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}

/* Checks the handle and sizes, then launches. */
static cublasStatus_t gemm(cublasHandle_t h, int type, int64_t m, int64_t n, int64_t k, int64_t batch)
{
    if (h == NULL || h->magic != BLAS_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS; /* nothing to do: no kernel */
    if (!sim_blas_launch(h->stream, type, (uint64_t)m, (uint64_t)n, (uint64_t)k, (uint64_t)batch))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    return CUBLAS_STATUS_SUCCESS;
}

#define UNUSED_GEMM_ARGS (void)transa; (void)transb; (void)alpha; (void)A; (void)lda; (void)B; (void)ldb; \
    (void)beta; (void)C; (void)ldc

API cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                  int m, int n, int k, const float *alpha, const float *A, int lda,
                                  const float *B, int ldb, const float *beta, float *C, int ldc)
{
    UNUSED_GEMM_ARGS;
    return gemm(handle, CUDA_R_32F, m, n, k, 1);
}

API cublasStatus_t cublasDgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                  int m, int n, int k, const double *alpha, const double *A, int lda,
                                  const double *B, int ldb, const double *beta, double *C, int ldc)
{
    UNUSED_GEMM_ARGS;
    return gemm(handle, CUDA_R_64F, m, n, k, 1);
}

API cublasStatus_t cublasHgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                               int m, int n, int k, const __half *alpha, const __half *A, int lda,
                               const __half *B, int ldb, const __half *beta, __half *C, int ldc)
{
    UNUSED_GEMM_ARGS;
    return gemm(handle, CUDA_R_16F, m, n, k, 1);
}

API cublasStatus_t cublasSgemm_v2_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                     int64_t m, int64_t n, int64_t k, const float *alpha, const float *A,
                                     int64_t lda, const float *B, int64_t ldb, const float *beta, float *C,
                                     int64_t ldc)
{
    UNUSED_GEMM_ARGS;
    return gemm(handle, CUDA_R_32F, m, n, k, 1);
}

API cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
                                int lda, const void *B, cudaDataType Btype, int ldb, const void *beta, void *C,
                                cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                cublasGemmAlgo_t algo)
{
    UNUSED_GEMM_ARGS;
    (void)Btype; (void)Ctype; (void)computeType; (void)algo;
    return gemm(handle, Atype, m, n, k, 1);
}

API cublasStatus_t cublasGemmEx_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                   int64_t m, int64_t n, int64_t k, const void *alpha, const void *A,
                                   cudaDataType Atype, int64_t lda, const void *B, cudaDataType Btype,
                                   int64_t ldb, const void *beta, void *C, cudaDataType Ctype, int64_t ldc,
                                   cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    UNUSED_GEMM_ARGS;
    (void)Btype; (void)Ctype; (void)computeType; (void)algo;
    return gemm(handle, Atype, m, n, k, 1);
}

API cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                             cublasOperation_t transb, int m, int n, int k, const float *alpha,
                                             const float *A, int lda, long long int strideA, const float *B,
                                             int ldb, long long int strideB, const float *beta, float *C, int ldc,
                                             long long int strideC, int batchCount)
{
    UNUSED_GEMM_ARGS;
    (void)strideA; (void)strideB; (void)strideC;
    return gemm(handle, CUDA_R_32F, m, n, k, batchCount);
}

API cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                              cublasOperation_t transb, int m, int n, int k, const void *alpha,
                                              const void *A, cudaDataType Atype, int lda, long long int strideA,
                                              const void *B, cudaDataType Btype, int ldb, long long int strideB,
                                              const void *beta, void *C, cudaDataType Ctype, int ldc,
                                              long long int strideC, int batchCount,
                                              cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    UNUSED_GEMM_ARGS;
    (void)strideA; (void)strideB; (void)strideC; (void)Btype; (void)Ctype; (void)computeType; (void)algo;
    return gemm(handle, Atype, m, n, k, batchCount);
}

API cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                       int m, int n, int k, const void *alpha, const void *const Aarray[],
                                       cudaDataType Atype, int lda, const void *const Barray[],
                                       cudaDataType Btype, int ldb, const void *beta, void *const Carray[],
                                       cudaDataType Ctype, int ldc, int batchCount,
                                       cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    const void *A = Aarray, *B = Barray;
    void *C = (void *)Carray;
    UNUSED_GEMM_ARGS;
    (void)Btype; (void)Ctype; (void)computeType; (void)algo;
    return gemm(handle, Atype, m, n, k, batchCount);
}
