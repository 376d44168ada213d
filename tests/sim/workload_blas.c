/*
 * workload_blas.c - --gemms N: each pass makes N rounds of four GEMMs of
 * known shapes on the worker's stream, through the simulated libcublas and
 * libcublasLt (dlopen'ed, so the other flags run without them):
 *
 *   cublasSgemm_v2              N N  m=128  n=256  k=64    fp32         1 kernel
 *   cublasGemmEx                T N  m=512  n=512  k=1024  bf16, 32F    1 kernel
 *   cublasGemmStridedBatchedEx  N N  m=64   n=64   k=128   fp16, b=8    1 kernel
 *   cublasLtMatmul              T N  m=1024 n=1024 k=8192  fp16, 32F    2 kernels (split-K)
 *
 * The Lt matmul builds its descriptor and three layouts and destroys them
 * after, as PyTorch does for each call. Every call counts in w->calls:
 * 4 GEMM calls, 10 descriptor and layout calls and 5 launches a round.
 *
 * --gemms-lt-plan: the Lt matmul is instead, as XLA's cached plans make
 * it, one of descriptors made once during setup (before the ready lines)
 * and kept: N,T m=256 n=512 k=2048 bf16, batch 4, compute 32F, one
 * kernel; 4 GEMM calls and 4 launches a round.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublas_sim.h"
#include "workload_blas.h"
#include "workload_nccl.h"

static uint64_t g_gemms;
static int g_lt_plan;
/* --gemms-lt-plan: the descriptor and layouts made in setup. */
static struct {
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t a, b, c;
} P;

static struct {
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*set_stream)(cublasHandle_t, CUstream);
    __typeof__(cublasSgemm_v2) *sgemm;
    __typeof__(cublasGemmEx) *gemm_ex;
    __typeof__(cublasGemmStridedBatchedEx) *strided_ex;
    __typeof__(cublasLtCreate) *lt_create;
    __typeof__(cublasLtMatmulDescCreate) *desc_create;
    __typeof__(cublasLtMatmulDescSetAttribute) *desc_set;
    __typeof__(cublasLtMatmulDescDestroy) *desc_destroy;
    __typeof__(cublasLtMatrixLayoutCreate) *layout_create;
    __typeof__(cublasLtMatrixLayoutDestroy) *layout_destroy;
    __typeof__(cublasLtMatrixLayoutSetAttribute) *layout_set;
    __typeof__(cublasLtMatmul) *matmul;
} B;

int parse_blas_flag(const char *a, const char *val, int argc, char **argv, int *i)
{
    if (!strcmp(a, "--gemms-lt-plan")) {
        if (val != NULL) {
            fprintf(stderr, "gputrace-workload: --gemms-lt-plan takes no value\n");
            exit(2);
        }
        g_lt_plan = 1;
        return 1;
    }
    if (strcmp(a, "--gemms") != 0) return 0;
    if (val == NULL && *i + 1 < argc) val = argv[++*i];
    if (val == NULL) {
        fprintf(stderr, "gputrace-workload: --gemms needs a value\n");
        exit(2);
    }
    g_gemms = parse_u64(a, val);
    return 1;
}

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (p == NULL) {
        fprintf(stderr, "gputrace-workload: %s: %s\n", name, dlerror());
        exit(1);
    }
    return p;
}

void wblas_setup(void)
{
    if (!g_gemms) return;
    void *blas = dlopen("libcublas.so.13", RTLD_NOW);
    void *lt = dlopen("libcublasLt.so.13", RTLD_NOW);
    if (blas == NULL || lt == NULL) {
        fprintf(stderr, "gputrace-workload: --gemms: %s\n", dlerror());
        exit(1);
    }
    B.create = sym(blas, "cublasCreate_v2");
    B.set_stream = sym(blas, "cublasSetStream_v2");
    B.sgemm = sym(blas, "cublasSgemm_v2");
    B.gemm_ex = sym(blas, "cublasGemmEx");
    B.strided_ex = sym(blas, "cublasGemmStridedBatchedEx");
    B.lt_create = sym(lt, "cublasLtCreate");
    B.desc_create = sym(lt, "cublasLtMatmulDescCreate");
    B.desc_set = sym(lt, "cublasLtMatmulDescSetAttribute");
    B.desc_destroy = sym(lt, "cublasLtMatmulDescDestroy");
    B.layout_create = sym(lt, "cublasLtMatrixLayoutCreate");
    B.layout_destroy = sym(lt, "cublasLtMatrixLayoutDestroy");
    B.layout_set = sym(lt, "cublasLtMatrixLayoutSetAttribute");
    B.matmul = sym(lt, "cublasLtMatmul");
    if (g_lt_plan) {
        int32_t n = CUBLAS_OP_N, t = CUBLAS_OP_T, batch = 4;
        int ok = B.desc_create(&P.d, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
                 B.desc_set(P.d, CUBLASLT_MATMUL_DESC_TRANSA, &n, sizeof(n)) == CUBLAS_STATUS_SUCCESS &&
                 B.desc_set(P.d, CUBLASLT_MATMUL_DESC_TRANSB, &t, sizeof(t)) == CUBLAS_STATUS_SUCCESS &&
                 B.layout_create(&P.a, CUDA_R_16BF, 256, 2048, 256) == CUBLAS_STATUS_SUCCESS && /* A: m x k */
                 B.layout_create(&P.b, CUDA_R_16BF, 512, 2048, 512) == CUBLAS_STATUS_SUCCESS && /* op(B) = B^T */
                 B.layout_create(&P.c, CUDA_R_16BF, 256, 512, 256) == CUBLAS_STATUS_SUCCESS;
        cublasLtMatrixLayout_t all[3] = { P.a, P.b, P.c };
        for (int i = 0; ok && i < 3; i++)
            ok = B.layout_set(all[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)) ==
                 CUBLAS_STATUS_SUCCESS;
        if (!ok) {
            fprintf(stderr, "gputrace-workload: --gemms-lt-plan: descriptor setup failed\n");
            exit(1);
        }
    }
}

#define BC(call)                                                                  \
    do {                                                                          \
        cublasStatus_t st_ = (call);                                              \
        w->calls++;                                                               \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                       \
            fprintf(stderr, "gputrace-workload: worker %u: %s failed: %d\n",      \
                    w->idx, #call, (int)st_);                                     \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

/* One Lt matmul as PyTorch makes it: descriptor, layouts, matmul, teardown. */
static void lt_matmul(struct worker *w, cublasLtHandle_t lt)
{
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t a, b, c;
    int32_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    const uint64_t M = 1024, N = 1024, K = 8192;
    float one = 1.0f, zero = 0.0f;
    BC(B.desc_create(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    BC(B.desc_set(d, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
    BC(B.desc_set(d, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n)));
    BC(B.layout_create(&a, CUDA_R_16F, K, M, (int64_t)K)); /* op(A) = A^T: m x k */
    BC(B.layout_create(&b, CUDA_R_16F, K, N, (int64_t)K));
    BC(B.layout_create(&c, CUDA_R_16F, M, N, (int64_t)M));
    BC(B.matmul(lt, d, &one, (void *)w->arg_a, a, (void *)w->arg_b, b, &zero, (void *)w->arg_c, c,
                (void *)w->arg_c, c, NULL, NULL, 0, w->stream));
    w->calls += 2; /* its kernel and the split-K reduction */
    BC(B.layout_destroy(a));
    BC(B.layout_destroy(b));
    BC(B.layout_destroy(c));
    BC(B.desc_destroy(d));
}

void wblas_pass(struct worker *w)
{
    if (!g_gemms) return;
    static __thread cublasHandle_t h;
    static __thread cublasLtHandle_t lt;
    if (h == NULL) {
        if (B.create(&h) != CUBLAS_STATUS_SUCCESS || B.set_stream(h, w->stream) != CUBLAS_STATUS_SUCCESS ||
            B.lt_create(&lt) != CUBLAS_STATUS_SUCCESS) {
            fprintf(stderr, "gputrace-workload: worker %u: cuBLAS setup failed\n", w->idx);
            exit(1);
        }
    }
    float one = 1.0f, zero = 0.0f;
    const void *A = (void *)w->arg_a, *Bm = (void *)w->arg_b;
    void *C = (void *)w->arg_c;
    for (uint64_t i = 0; i < g_gemms; i++) {
        BC(B.sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 128, 256, 64, &one, A, 128, Bm, 64, &zero, C, 128));
        BC(B.gemm_ex(h, CUBLAS_OP_T, CUBLAS_OP_N, 512, 512, 1024, &one, A, CUDA_R_16BF, 1024, Bm, CUDA_R_16BF,
                     1024, &zero, C, CUDA_R_16BF, 512, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        BC(B.strided_ex(h, CUBLAS_OP_N, CUBLAS_OP_N, 64, 64, 128, &one, A, CUDA_R_16F, 64, 64 * 128, Bm,
                        CUDA_R_16F, 128, 128 * 64, &zero, C, CUDA_R_16F, 64, 64 * 64, 8, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT));
        w->calls += 3; /* one kernel each */
        if (g_lt_plan) {
            BC(B.matmul(lt, P.d, &one, A, P.a, Bm, P.b, &zero, C, P.c, C, P.c, NULL, NULL, 0, w->stream));
            w->calls += 1; /* its kernel */
        } else {
            lt_matmul(w, lt);
        }
    }
}
