/*
 * cublaslt.c - the gputrace simulator's libcublasLt.so.13: cublasLtMatmul
 * with its matmul descriptors and matrix layouts (cublasLt.h prototypes,
 * tests/sim/include/cublas_sim.h), and the GEMM kernels both simulated
 * BLAS libraries launch through the simulated libcuda.
 *
 * A GEMM launches one kernel named as cuBLAS's are (an sm90 xmma kernel
 * for fp32 and fp64, an nvjet kernel for fp16 and bf16), on a grid of
 * 128x128 tiles with the batch in z; with k of 8192 or more a split-K
 * reduction kernel follows. The descriptors (256 bytes) and layouts (64)
 * are opaque structs of cublasLt.h's sizes; what they hold where is the
 * simulator's own choice.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cublas_sim.h"

#define API __attribute__((visibility("default")))

static const char k_blas_ptx[] =
    "//\n// gputrace simulator: cuBLAS kernels\n//\n"
    ".version 8.0\n.target sm_90\n.address_size 64\n\n"
    ".visible .entry sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas(\n"
    "\t.param .u64 p0\n)\n{\n\tret;\n}\n\n"
    ".visible .entry nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_TNT(\n"
    "\t.param .u64 p0\n)\n{\n\tret;\n}\n\n"
    ".visible .entry sm90_xmma_gemm_f64f64_f64f64_f64_nn_n_tilesize64x64x16_cublas(\n"
    "\t.param .u64 p0\n)\n{\n\tret;\n}\n\n"
    ".visible .entry cublasSplitKreduce_kernel(\n"
    "\t.param .u64 p0\n)\n{\n\tret;\n}\n";

enum { K_F32, K_HALF, K_F64, K_SPLITK, K_COUNT };
static const char *const k_blas_kernels[K_COUNT] = {
    "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_TNT",
    "sm90_xmma_gemm_f64f64_f64f64_f64_nn_n_tilesize64x64x16_cublas",
    "cublasSplitKreduce_kernel",
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static CUmodule g_module;
static CUfunction g_kernels[K_COUNT];

/* The driver, found in the process at first use: like the real
 * libcublasLt, this library does not link libcuda (so it loads, and its
 * descriptors work, in a process without it). */
static __typeof__(cuModuleLoadData) *p_load;
static __typeof__(cuModuleGetFunction) *p_get_function;
static __typeof__(cuLaunchKernel) *p_launch;

/* Loads the kernels once (cuBLAS loads its own at first use). */
static int load_kernels(void)
{
    int ok = 1;
    pthread_mutex_lock(&g_lock);
    if (g_module == NULL) {
        p_load = (__typeof__(p_load))dlsym(RTLD_DEFAULT, "cuModuleLoadData");
        p_get_function = (__typeof__(p_get_function))dlsym(RTLD_DEFAULT, "cuModuleGetFunction");
        p_launch = (__typeof__(p_launch))dlsym(RTLD_DEFAULT, "cuLaunchKernel");
        CUmodule m = NULL;
        ok = p_load != NULL && p_get_function != NULL && p_launch != NULL &&
             p_load(&m, k_blas_ptx) == CUDA_SUCCESS;
        for (int i = 0; ok && i < K_COUNT; i++)
            ok = p_get_function(&g_kernels[i], m, k_blas_kernels[i]) == CUDA_SUCCESS;
        if (ok) g_module = m;
    }
    pthread_mutex_unlock(&g_lock);
    return ok;
}

static unsigned tiles(uint64_t n, uint64_t tile)
{
    uint64_t t = (n + tile - 1) / tile;
    return t == 0 ? 1 : (unsigned)(t > 65535 ? 65535 : t);
}

API int sim_blas_launch(CUstream stream, int type, uint64_t m, uint64_t n, uint64_t k, uint64_t batch)
{
    if (!load_kernels()) return 0;
    int which = K_F32;
    if (type == CUDA_R_16F || type == CUDA_R_16BF || type == CUDA_R_8F_E4M3 || type == CUDA_R_8F_E5M2)
        which = K_HALF;
    else if (type == CUDA_R_64F)
        which = K_F64;
    void *arg = NULL;
    void *params[] = { &arg };
    unsigned z = batch == 0 ? 1 : (unsigned)(batch > 65535 ? 65535 : batch);
    if (p_launch(g_kernels[which], tiles(m, 128), tiles(n, 128), z, 256, 1, 1, 65536, stream, params, NULL) !=
        CUDA_SUCCESS)
        return 0;
    if (k >= 8192 &&
        p_launch(g_kernels[K_SPLITK], tiles(m * n, 256), 1, z, 256, 1, 1, 0, stream, params, NULL) !=
            CUDA_SUCCESS)
        return 0;
    return 1;
}

/* ------------------------------------------------------------------ */
/* Handles, descriptors, layouts                                       */
/* ------------------------------------------------------------------ */
struct sim_cublaslt_context {
    uint64_t magic;
};
#define LT_MAGIC 0x73696d4c74ULL

/* What the opaque structs hold, and where: the simulator's own packing
 * (32-bit fields beside 64-bit ones, after a magic word), so that a
 * tracer must find the offsets from the library as it would for a real
 * build. The descriptor fills the first 64 of its 256 bytes. */
struct sim_desc {
    uint64_t magic;
    uint32_t scale;
    uint32_t pointer_mode;
    uint32_t compute;
    uint32_t epilogue;
    uint32_t transb;
    uint32_t transa;
};
struct sim_layout {
    uint64_t magic;
    uint32_t order;
    uint32_t type;
    uint64_t cols;
    uint64_t rows;
    int64_t ld;
    int64_t stride;
    int32_t batch;
    uint32_t pad;
};
_Static_assert(sizeof(struct sim_desc) <= 64, "the descriptor's fields in its first 64 bytes");
_Static_assert(sizeof(struct sim_layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "a layout fits");
#define DESC_MAGIC 0x6465736353494dULL
#define LAYOUT_MAGIC 0x6c61795353494dULL
#define DESC(d) ((struct sim_desc *)(void *)(d))
#define LAYOUT(l) ((struct sim_layout *)(void *)(l))

API cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle)
{
    if (lightHandle == NULL) return CUBLAS_STATUS_INVALID_VALUE;
    struct sim_cublaslt_context *h = calloc(1, sizeof(*h));
    if (h == NULL) return CUBLAS_STATUS_ALLOC_FAILED;
    h->magic = LT_MAGIC;
    *lightHandle = h;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle)
{
    if (lightHandle == NULL || lightHandle->magic != LT_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    lightHandle->magic = 0;
    free(lightHandle);
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,
                                            cudaDataType scaleType)
{
    if (matmulDesc == NULL) return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatmulDesc_t d = calloc(1, sizeof(*d));
    if (d == NULL) return CUBLAS_STATUS_ALLOC_FAILED;
    DESC(d)->magic = DESC_MAGIC;
    DESC(d)->compute = (uint32_t)computeType;
    DESC(d)->scale = (uint32_t)scaleType;
    *matmulDesc = d;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc)
{
    free(matmulDesc);
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                  cublasLtMatmulDescAttributes_t attr, const void *buf,
                                                  size_t sizeInBytes)
{
    if (matmulDesc == NULL || buf == NULL || sizeInBytes != 4) return CUBLAS_STATUS_INVALID_VALUE;
    int32_t v;
    memcpy(&v, buf, 4);
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: DESC(matmulDesc)->compute = (uint32_t)v; break;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: DESC(matmulDesc)->scale = (uint32_t)v; break;
    case CUBLASLT_MATMUL_DESC_TRANSA: DESC(matmulDesc)->transa = (uint32_t)v; break;
    case CUBLASLT_MATMUL_DESC_TRANSB: DESC(matmulDesc)->transb = (uint32_t)v; break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type, uint64_t rows,
                                              uint64_t cols, int64_t ld)
{
    if (matLayout == NULL) return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatrixLayout_t l = calloc(1, sizeof(*l));
    if (l == NULL) return CUBLAS_STATUS_ALLOC_FAILED;
    LAYOUT(l)->magic = LAYOUT_MAGIC;
    LAYOUT(l)->type = (uint32_t)type;
    LAYOUT(l)->rows = rows;
    LAYOUT(l)->cols = cols;
    LAYOUT(l)->ld = ld;
    LAYOUT(l)->batch = 1;
    *matLayout = l;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout)
{
    free(matLayout);
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                    cublasLtMatrixLayoutAttribute_t attr, const void *buf,
                                                    size_t sizeInBytes)
{
    if (matLayout == NULL || buf == NULL) return CUBLAS_STATUS_INVALID_VALUE;
    int64_t v = 0;
    if (sizeInBytes == 4) {
        int32_t w;
        memcpy(&w, buf, 4);
        v = w;
    } else if (sizeInBytes == 8) {
        memcpy(&v, buf, 8);
    } else {
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: LAYOUT(matLayout)->batch = (int32_t)v; break;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: LAYOUT(matLayout)->stride = v; break;
    case CUBLASLT_MATRIX_LAYOUT_ORDER: LAYOUT(matLayout)->order = (uint32_t)v; break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* D = alpha op(A) op(B) + beta C: m and n from D's layout, k from A's. */
API cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,
                                  const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                                  cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
                                  cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
                                  const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspaceSizeInBytes,
                                  CUstream stream)
{
    (void)alpha; (void)A; (void)B; (void)beta; (void)C; (void)D; (void)algo; (void)workspace;
    (void)workspaceSizeInBytes; (void)Cdesc;
    if (lightHandle == NULL || lightHandle->magic != LT_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (computeDesc == NULL || Adesc == NULL || Bdesc == NULL || Ddesc == NULL) return CUBLAS_STATUS_INVALID_VALUE;
    if (DESC(computeDesc)->magic != DESC_MAGIC || LAYOUT(Adesc)->magic != LAYOUT_MAGIC ||
        LAYOUT(Ddesc)->magic != LAYOUT_MAGIC)
        return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t m = LAYOUT(Ddesc)->rows, n = LAYOUT(Ddesc)->cols;
    uint64_t k = DESC(computeDesc)->transa == CUBLAS_OP_N ? LAYOUT(Adesc)->cols : LAYOUT(Adesc)->rows;
    if (!sim_blas_launch(stream, (int)LAYOUT(Adesc)->type, m, n, k, (uint64_t)LAYOUT(Ddesc)->batch))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    return CUBLAS_STATUS_SUCCESS;
}
