/*
 * workload.c - gputrace-workload: drives the simulated libcuda.so.1,
 * libnccl.so.2 and libcudart.so.13 in a scripted, countable way.  README.md
 * is the contract (every flag, every call, every argument value); keep the
 * two in sync.
 */
#define _GNU_SOURCE
#include "workload.h"
#include "cudart_sim.h"
#include "workload_nccl.h"
#include "workload_cupti.h"
#include "workload_blas.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define GiB (1ULL << 30)
#define MAX_THREADS 1024
#define DEFAULT_BENCH_CALLS 1000000ULL
#define FAIL_ALLOC_BYTES (128ULL * GiB)
#define FAIL_SENTINEL 0xdeadbeefcafef00dULL

/* ------------------------------------------------------------------ */
/* Kernels                                                             */
/* ------------------------------------------------------------------ */

static const char *const k_kernel_names[3] = {
    "_Z10vector_addPKfS0_Pfi",                    /* vector_add(float const*, float const*, float*, int) */
    "_ZN3sim6detail13reduce_kernelILi256EEEvPKfPfi", /* void sim::detail::reduce_kernel<256>(float const*, float*, int) */
    "_Z4reluPfi",                                 /* relu(float*, int) */
};
static const char k_gemm_name[] = "_ZN6cublas4gemmIfEEvPKT_S3_PS1_iii"; /* void cublas::gemm<float>(float const*, float const*, float*, int, int, int) */

static const char k_module_ptx[] =
    "//\n// gputrace simulator module\n//\n"
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry _Z10vector_addPKfS0_Pfi(\n"
    "\t.param .u64 _Z10vector_addPKfS0_Pfi_param_0,\n"
    "\t.param .u64 _Z10vector_addPKfS0_Pfi_param_1,\n"
    "\t.param .u64 _Z10vector_addPKfS0_Pfi_param_2,\n"
    "\t.param .u32 _Z10vector_addPKfS0_Pfi_param_3\n"
    ")\n{\n\tret;\n}\n"
    "\n"
    ".visible .entry _ZN3sim6detail13reduce_kernelILi256EEEvPKfPfi(\n"
    "\t.param .u64 _ZN3sim6detail13reduce_kernelILi256EEEvPKfPfi_param_0,\n"
    "\t.param .u64 _ZN3sim6detail13reduce_kernelILi256EEEvPKfPfi_param_1,\n"
    "\t.param .u32 _ZN3sim6detail13reduce_kernelILi256EEEvPKfPfi_param_2\n"
    ")\n{\n\tret;\n}\n"
    "\n"
    ".entry _Z4reluPfi(\n"
    "\t.param .u64 _Z4reluPfi_param_0,\n"
    "\t.param .u32 _Z4reluPfi_param_1\n"
    ")\n{\n\tret;\n}\n";

static const char k_library_ptx[] =
    "//\n// gputrace simulator library\n//\n"
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry _ZN6cublas4gemmIfEEvPKT_S3_PS1_iii(\n"
    "\t.param .u64 _ZN6cublas4gemmIfEEvPKT_S3_PS1_iii_param_0,\n"
    "\t.param .u64 _ZN6cublas4gemmIfEEvPKT_S3_PS1_iii_param_1,\n"
    "\t.param .u64 _ZN6cublas4gemmIfEEvPKT_S3_PS1_iii_param_2,\n"
    "\t.param .u32 _ZN6cublas4gemmIfEEvPKT_S3_PS1_iii_param_3,\n"
    "\t.param .u32 _ZN6cublas4gemmIfEEvPKT_S3_PS1_iii_param_4,\n"
    "\t.param .u32 _ZN6cublas4gemmIfEEvPKT_S3_PS1_iii_param_5\n"
    ")\n{\n\tret;\n}\n";

/* ------------------------------------------------------------------ */
/* Runtime kernels: host stubs and their fat binary                    */
/* ------------------------------------------------------------------ */

/*
 * Host stubs, as nvcc emits them for __global__ functions: ordinary host
 * functions whose ELF symbol is the kernel's mangled name; their address is
 * what a program passes to cudaLaunchKernel.  The asm labels give them those
 * names.  _Z12scale_kernelPff and _Z9transposeIfLi32EEvPKT_PS0_ii are
 * exported into .dynsym by the Makefile (--export-dynamic-symbol);
 * _ZN3sim5saxpyEifPKfPf is static, so it is only in .symtab.  The workload
 * never calls them; each body bumps its own counter so that no two stubs
 * can be folded into one.
 */
void stub_scale_kernel(float *p, float a) __asm__("_Z12scale_kernelPff");
static void stub_saxpy(int n, float a, const float *x, float *y) __asm__("_ZN3sim5saxpyEifPKfPf");
void stub_transpose(const float *in, float *out, int w, int h) __asm__("_Z9transposeIfLi32EEvPKT_PS0_ii");

static volatile unsigned long g_scale_stub_calls, g_saxpy_stub_calls, g_transpose_stub_calls;

/* scale_kernel(float*, float) */
__attribute__((used, noinline, noclone)) void stub_scale_kernel(float *p, float a)
{
    (void)p;
    (void)a;
    g_scale_stub_calls++;
}

/* sim::saxpy(int, float, float const*, float*) */
__attribute__((used, noinline, noclone)) static void stub_saxpy(int n, float a, const float *x, float *y)
{
    (void)n;
    (void)a;
    (void)x;
    (void)y;
    g_saxpy_stub_calls += 2;
}

/* void transpose<float, 32>(float const*, float*, int, int) */
__attribute__((used, noinline, noclone)) void stub_transpose(const float *in, float *out, int w, int h)
{
    (void)in;
    (void)out;
    (void)w;
    (void)h;
    g_transpose_stub_calls += 3;
}

/* stub[i]: launch order of the runtime section */
static const void *const g_stubs[3] = {
    (const void *)stub_scale_kernel,
    (const void *)stub_saxpy,
    (const void *)stub_transpose,
};
static const char *const k_runtime_kernel_names[3] = {
    "_Z12scale_kernelPff",             /* scale_kernel(float*, float) */
    "_ZN3sim5saxpyEifPKfPf",           /* sim::saxpy(int, float, float const*, float*) */
    "_Z9transposeIfLi32EEvPKT_PS0_ii", /* void transpose<float, 32>(float const*, float*, int, int) */
};

static const char k_runtime_ptx[] =
    "//\n// gputrace simulator runtime fat binary\n//\n"
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry _Z12scale_kernelPff(\n"
    "\t.param .u64 _Z12scale_kernelPff_param_0,\n"
    "\t.param .f32 _Z12scale_kernelPff_param_1\n"
    ")\n{\n\tret;\n}\n"
    "\n"
    ".visible .entry _ZN3sim5saxpyEifPKfPf(\n"
    "\t.param .u32 _ZN3sim5saxpyEifPKfPf_param_0,\n"
    "\t.param .f32 _ZN3sim5saxpyEifPKfPf_param_1,\n"
    "\t.param .u64 _ZN3sim5saxpyEifPKfPf_param_2,\n"
    "\t.param .u64 _ZN3sim5saxpyEifPKfPf_param_3\n"
    ")\n{\n\tret;\n}\n"
    "\n"
    ".weak .entry _Z9transposeIfLi32EEvPKT_PS0_ii(\n"
    "\t.param .u64 _Z9transposeIfLi32EEvPKT_PS0_ii_param_0,\n"
    "\t.param .u64 _Z9transposeIfLi32EEvPKT_PS0_ii_param_1,\n"
    "\t.param .u32 _Z9transposeIfLi32EEvPKT_PS0_ii_param_2,\n"
    "\t.param .u32 _Z9transposeIfLi32EEvPKT_PS0_ii_param_3\n"
    ")\n{\n\tret;\n}\n";

static const simFatBinWrapper k_runtime_fatbin = {
    SIM_FATBINC_MAGIC, SIM_FATBINC_VERSION, k_runtime_ptx, NULL,
};

/* ------------------------------------------------------------------ */
/* Options                                                             */
/* ------------------------------------------------------------------ */

enum bench_kind { BENCH_NONE = 0, BENCH_LAUNCH, BENCH_LAUNCH_EX, BENCH_MEMCPY, BENCH_NCCL, BENCH_ALLOC };
static const char *const k_bench_names[] = { "", "launch", "launch-ex", "memcpy", "nccl", "alloc" };

struct options opt = { .threads = 1, .calls = DEFAULT_BENCH_CALLS };

/* ------------------------------------------------------------------ */
/* Shared state                                                        */
/* ------------------------------------------------------------------ */

static CUdevice g_dev;
CUcontext g_ctx;
static CUmodule g_module;
CUfunction g_funcs[3];
static CUlibrary g_library;
CUkernel g_gemm_kernel;
CUfunction g_gemm_func;
static CUgraph g_graph;
static CUgraphExec g_gexec;
static void **g_fatbin_handle;       /* from __cudaRegisterFatBinary (--runtime only) */
struct worker *g_workers;
static pthread_barrier_t g_started, g_go;
volatile sig_atomic_t g_stop; /* also read by workload_nccl.c */
static int g_skip;                   /* written before g_go, read after */
static struct timespec g_start;      /* written before g_go, read after */

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static const char *usage_text =
    "usage: gputrace-workload [--threads T] [--launches N] [--distinct-kernels N] [--distinct-comms N] [--launch-ex N] [--coop N] [--graphs N] "
    "[--runtime N] [--allocs N] [--copies N] [--syncs N] [--capture-checks N] [--fail N] [--nccl N] [--nccl-config] "
    "[--pace-us US] [--spin-ns NS] [--exit-main] [--gemms N] "
    "[--ranks N --rank R [--id-file PATH] [--nccl-init-early] [--nccl-allreduce-only] [--nccl-scalable] "
    "[--split-color C] [--late-ms D [--late-every K]] [--stop-after N] [--sigstop-at N] [--nccl-timeout-ms MS] [--cuda-dev N]] [--ptsz] "
    "[--graph-replays R] [--graph-update] [--graphs-before-wait] [--graph-linger-ms N] [--capture-sleep-ms N] "
    "[--per-thread-stream] [--wait-stdin] [--delay-ms N] [--names-after-wait] [--loop] "
    "[--duration-ms N] [--sync-us US] [--print-handles] "
    "[--varied N] [--map-cupti] [--subscribe-cupti] [--load-agent PATH [--agent-cupti PATH] [--agent-kinds N] "
    "[--agent-ring N] [--agent-names N] [--agent-flush-ms N] [--agent-hello-ms N] [--agent-finalize-ms N] "
    "[--agent-buffers N] [--agent-buffer-size N] [--agent-join]] [--cupti-report] [--wait-stdin-end] [--fork-child] [--take-cupti] "
    "[--end-launches N] "
    "[--bench launch|launch-ex|memcpy|nccl|alloc [--calls N]] [--exec-then PROGRAM [ARG...]]";

void usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "gputrace-workload: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "; %s\n", usage_text);
    exit(2);
}

void die_cu(int thread, const char *what, int rc)
{
    if (thread < 0) fprintf(stderr, "gputrace-workload: main: %s failed: CUresult %d\n", what, rc);
    else fprintf(stderr, "gputrace-workload: thread %d: %s failed: CUresult %d\n", thread, what, rc);
    fflush(stderr);
    exit(1);
}

static void die_rt(int thread, const char *what, int rc)
{
    fprintf(stderr, "gputrace-workload: thread %d: %s failed: cudaError_t %d\n", thread, what, rc);
    fflush(stderr);
    exit(1);
}

static void die_nccl(int thread, const char *what, int rc)
{
    fprintf(stderr, "gputrace-workload: thread %d: %s failed: ncclResult_t %d\n", thread, what, rc);
    fflush(stderr);
    exit(1);
}

void die_msg(int thread, const char *what)
{
    fprintf(stderr, "gputrace-workload: thread %d: %s\n", thread, what);
    fflush(stderr);
    exit(1);
}

/* Uncounted call made by a worker (bench setup/teardown, ctx binding). */
#define WSETUP(call)                                                    \
    do {                                                                \
        CUresult r_ = (call);                                           \
        if (UNLIKELY(r_ != CUDA_SUCCESS)) die_cu((int)w->idx, #call, r_); \
    } while (0)
#define WSETUP_NCCL(call)                                               \
    do {                                                                \
        ncclResult_t r_ = (call);                                       \
        if (UNLIKELY(r_ != ncclSuccess)) die_nccl((int)w->idx, #call, r_); \
    } while (0)

/* Counted driver call. */
#define CC(call)                                                        \
    do {                                                                \
        CUresult r_ = (call);                                           \
        w->calls++;                                                     \
        if (UNLIKELY(r_ != CUDA_SUCCESS)) die_cu((int)w->idx, #call, r_); \
    } while (0)

/* Counted CUDA runtime call. */
#define RC(call)                                                        \
    do {                                                                \
        cudaError_t r_ = (call);                                        \
        w->calls++;                                                     \
        if (UNLIKELY(r_ != cudaSuccess)) die_rt((int)w->idx, #call, r_); \
    } while (0)

/* Counted NCCL call. */
#define NC(call)                                                        \
    do {                                                                \
        ncclResult_t r_ = (call);                                       \
        w->calls++;                                                     \
        if (UNLIKELY(r_ != ncclSuccess)) die_nccl((int)w->idx, #call, r_); \
    } while (0)

static uint64_t ts_diff_ns(const struct timespec *a, const struct timespec *b)
{
    return (uint64_t)(b->tv_sec - a->tv_sec) * 1000000000ULL + (uint64_t)b->tv_nsec - (uint64_t)a->tv_nsec;
}

void sleep_ms(uint64_t ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
        if (g_stop) return;
    }
}

static void on_signal(int sig)
{
    (void)sig;
    if (g_stop) _exit(0); /* second signal: leave at once */
    g_stop = 1;
    simNcclInterrupt(); /* a rank blocked in a collective gives up now */
}

void print_handle(const char *name, const void *p)
{
    printf("handle %s=0x%" PRIxPTR "\n", name, (uintptr_t)p);
}

/* ------------------------------------------------------------------ */
/* Setup pieces                                                        */
/* ------------------------------------------------------------------ */

static void load_names(void)
{
    SETUP(cuModuleLoadData(&g_module, k_module_ptx));
    for (int i = 0; i < 3; i++) SETUP(cuModuleGetFunction(&g_funcs[i], g_module, k_kernel_names[i]));
    SETUP(cuLibraryLoadData(&g_library, k_library_ptx, NULL, NULL, 0, NULL, NULL, 0));
    SETUP(cuLibraryGetKernel(&g_gemm_kernel, g_library, k_gemm_name));
    SETUP(cuKernelGetFunction(&g_gemm_func, g_gemm_kernel));
    if (opt.print_handles) {
        print_handle("module", g_module);
        print_handle("function[0]", g_funcs[0]);
        print_handle("function[1]", g_funcs[1]);
        print_handle("function[2]", g_funcs[2]);
        print_handle("library", g_library);
        print_handle("kernel", g_gemm_kernel);
        print_handle("kernel_function", g_gemm_func);
        fflush(stdout);
    }
}

/*
 * What nvcc-generated start-up code does (here called explicitly at the
 * start of the setup phase, see README.md): register the fat binary, each
 * kernel's host stub under its mangled name, and end the registration.  The
 * stand-in runtime makes its driver calls inside these.
 */
static void register_runtime(void)
{
    g_fatbin_handle = __cudaRegisterFatBinary((void *)&k_runtime_fatbin);
    if (g_fatbin_handle == NULL) {
        fprintf(stderr, "gputrace-workload: main: __cudaRegisterFatBinary failed\n");
        exit(1);
    }
    for (int i = 0; i < 3; i++)
        __cudaRegisterFunction(g_fatbin_handle, (const char *)g_stubs[i], (char *)k_runtime_kernel_names[i],
                               k_runtime_kernel_names[i], -1, NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterFatBinaryEnd(g_fatbin_handle);
    for (int i = 0; i < 3; i++) {
        if (simCudartFunctionFor(g_stubs[i]) == NULL) {
            fprintf(stderr, "gputrace-workload: main: __cudaRegisterFunction(%s) did not resolve\n",
                    k_runtime_kernel_names[i]);
            exit(1);
        }
    }
    if (opt.print_handles) {
        char name[32];
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof(name), "stub[%d]", i);
            print_handle(name, g_stubs[i]);
            snprintf(name, sizeof(name), "runtime_function[%d]", i);
            print_handle(name, simCudartFunctionFor(g_stubs[i]));
        }
        fflush(stdout);
    }
}

/* ------------------------------------------------------------------ */
/* Counted phase                                                       */
/* ------------------------------------------------------------------ */

/*
 * --distinct-kernels N: N kernels of distinct names (unique over threads and
 * passes), each got from a module of up to 1,000 and launched once: what
 * grows a tracer's tables of kernel names.
 */
static void launch_distinct(struct worker *w)
{
    static uint64_t next;
    const uint64_t chunk = 1000;
    const size_t cap = chunk * 64 + 256;
    char *ptx = malloc(cap);
    if (ptx == NULL) die_msg((int)w->idx, "out of memory");
    for (uint64_t done = 0; done < opt.distinct_kernels && !g_stop;) {
        uint64_t left = opt.distinct_kernels - done;
        uint64_t n = left < chunk ? left : chunk;
        uint64_t base = __atomic_fetch_add(&next, n, __ATOMIC_RELAXED);
        size_t len = (size_t)snprintf(ptx, cap, ".version 8.0\n.target sm_90\n.address_size 64\n");
        for (uint64_t i = 0; i < n; i++)
            len += (size_t)snprintf(ptx + len, cap - len, ".visible .entry _Z11kd%09" PRIu64 "v()\n{\n}\n",
                                    (uint64_t)((base + i) % 1000000000ULL));
        CUmodule m;
        WSETUP(cuModuleLoadData(&m, ptx));
        for (uint64_t i = 0; i < n; i++) {
            char name[32];
            CUfunction f;
            snprintf(name, sizeof(name), "_Z11kd%09" PRIu64 "v", (uint64_t)((base + i) % 1000000000ULL));
            WSETUP(cuModuleGetFunction(&f, m, name));
            CC(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, w->stream, w->params, NULL));
        }
        done += n;
    }
    free(ptx);
}

/* CPU work for `ns` (a launch loop's own work between launches). */
static void spin_ns(uint64_t ns)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while (ts_diff_ns(&a, &b) < ns);
}

static void run_pass(struct worker *w)
{
    const int pt = opt.per_thread;
    const int launch_ptsz = opt.ptsz || opt.per_thread;
    CUstream s = w->stream;
    CUevent ev = w->event;
    void **params = w->params;

    /* --launches */
    for (uint64_t i = 0; i < opt.launches; i++) {
        CUfunction f = g_funcs[i % 3];
        if (launch_ptsz) CC(cuLaunchKernel_ptsz(f, 64, 2, 1, 256, 1, 1, 4096, s, params, NULL));
        else CC(cuLaunchKernel(f, 64, 2, 1, 256, 1, 1, 4096, s, params, NULL));
        if (opt.pace_us) usleep((useconds_t)opt.pace_us);
        if (opt.spin_ns) spin_ns(opt.spin_ns);
    }
    if (opt.distinct_kernels) launch_distinct(w);

    /* --launch-ex */
    if (opt.launch_ex) {
        CUlaunchConfig cfg;
        memset(&cfg, 0, sizeof(cfg));
        cfg.gridDimX = 32;
        cfg.gridDimY = 4;
        cfg.gridDimZ = 2;
        cfg.blockDimX = 128;
        cfg.blockDimY = 2;
        cfg.blockDimZ = 1;
        cfg.sharedMemBytes = 8192;
        cfg.hStream = s;
        cfg.attrs = NULL;
        cfg.numAttrs = 0;
        for (uint64_t i = 0; i < opt.launch_ex; i++) {
            if (pt) CC(cuLaunchKernelEx_ptsz(&cfg, g_gemm_func, params, NULL));
            else CC(cuLaunchKernelEx(&cfg, g_gemm_func, params, NULL));
        }
    }

    /* --coop */
    for (uint64_t i = 0; i < opt.coop; i++) {
        if (pt) CC(cuLaunchCooperativeKernel_ptsz(g_funcs[0], 16, 1, 1, 512, 1, 1, 0, s, params));
        else CC(cuLaunchCooperativeKernel(g_funcs[0], 16, 1, 1, 512, 1, 1, 0, s, params));
    }

    /* --graphs */
    for (uint64_t i = 0; i < opt.graphs; i++) {
        if (pt) CC(cuGraphLaunch_ptsz(g_gexec, s));
        else CC(cuGraphLaunch(g_gexec, s));
    }

    /* --runtime: N x cudaLaunchKernel, then once cudaLaunchKernelExC */
    if (opt.runtime) {
        const dim3 grid = { 8, 1, 1 };
        const dim3 block = { 128, 1, 1 };
        for (uint64_t i = 0; i < opt.runtime; i++) {
            const void *stub = g_stubs[i % 3];
            if (pt) RC(cudaLaunchKernel_ptsz(stub, grid, block, params, 0, s));
            else RC(cudaLaunchKernel(stub, grid, block, params, 0, s));
        }
        cudaLaunchConfig_t rcfg;
        memset(&rcfg, 0, sizeof(rcfg));
        rcfg.gridDim.x = 4;
        rcfg.gridDim.y = 4;
        rcfg.gridDim.z = 1;
        rcfg.blockDim.x = 32;
        rcfg.blockDim.y = 8;
        rcfg.blockDim.z = 1;
        rcfg.dynamicSmemBytes = 1024;
        rcfg.stream = s;
        rcfg.attrs = NULL;
        rcfg.numAttrs = 0;
        if (pt) RC(cudaLaunchKernelExC_ptsz(&rcfg, g_stubs[0], params));
        else RC(cudaLaunchKernelExC(&rcfg, g_stubs[0], params));
    }

    /* --allocs: 18 calls per iteration */
    if (opt.allocs) {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof(prop));
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 0;
        for (uint64_t i = 0; i < opt.allocs; i++) {
            CUdeviceptr d = 0, d2 = 0, m = 0, p = 0, va = 0;
            size_t pitch = 0;
            void *h = NULL, *h2 = NULL;
            CUmemGenericAllocationHandle handle = 0;
            CC(cuMemAlloc_v2(&d, 1 * MiB));
            if (pt) CC(cuMemAllocAsync_ptsz(&d2, 2 * MiB, s));
            else CC(cuMemAllocAsync(&d2, 2 * MiB, s));
            CC(cuMemAllocManaged(&m, 4 * MiB, CU_MEM_ATTACH_GLOBAL));
            CC(cuMemAllocPitch_v2(&p, &pitch, 1000, 100, 4));
            if (pitch != 1024) die_msg((int)w->idx, "cuMemAllocPitch_v2 returned a pitch other than 1024");
            CC(cuMemHostAlloc(&h, 1 * MiB, 0));
            CC(cuMemAllocHost_v2(&h2, 1 * MiB));
            CC(cuMemCreate(&handle, 2 * MiB, &prop, 0));
            CC(cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0));
            CC(cuMemMap(va, 2 * MiB, 0, handle, 0));
            CC(cuMemUnmap(va, 2 * MiB));
            CC(cuMemAddressFree(va, 2 * MiB));
            CC(cuMemRelease(handle));
            CC(cuMemFree_v2(d));
            if (pt) CC(cuMemFreeAsync_ptsz(d2, s));
            else CC(cuMemFreeAsync(d2, s));
            CC(cuMemFree_v2(m));
            CC(cuMemFree_v2(p));
            CC(cuMemFreeHost(h));
            CC(cuMemFreeHost(h2));
        }
    }

    /* --copies: 3 + 12 per iteration + 3 */
    if (opt.copies) {
        CUdeviceptr dev = 0, dev2 = 0;
        void *pinned = NULL;
        CC(cuMemAlloc_v2(&dev, 1 * MiB));
        CC(cuMemAlloc_v2(&dev2, 1 * MiB));
        CC(cuMemAllocHost_v2(&pinned, 1 * MiB));
        void *host = malloc(1 * MiB);
        if (host == NULL) die_msg((int)w->idx, "malloc failed");
        memset(host, 0, 1 * MiB);
        const CUdeviceptr host_p = (CUdeviceptr)(uintptr_t)host;
        const CUdeviceptr pinned_p = (CUdeviceptr)(uintptr_t)pinned;
        for (uint64_t i = 0; i < opt.copies; i++) {
            if (pt) {
                CC(cuMemcpyHtoD_v2_ptds(dev, host, 4096));
                CC(cuMemcpyDtoH_v2_ptds(host, dev, 8192));
                CC(cuMemcpyDtoD_v2_ptds(dev2, dev, 16384));
                CC(cuMemcpyHtoDAsync_v2_ptsz(dev, pinned, 4096, s));
                CC(cuMemcpyDtoHAsync_v2_ptsz(pinned, dev, 8192, s));
                CC(cuMemcpyDtoDAsync_v2_ptsz(dev2, dev, 16384, s));
                CC(cuMemcpy_ptds(dev, host_p, 1000));
                CC(cuMemcpy_ptds(host_p, dev + 512, 2000));
                CC(cuMemcpyAsync_ptsz(dev2, dev, 3000, s));
                CC(cuMemcpyAsync_ptsz(host_p, pinned_p, 4000, s));
                CC(cuMemcpyPeer_ptds(dev2, g_ctx, dev, g_ctx, 5000));
                CC(cuMemsetD32_v2_ptds(dev, 0, 256));
            } else {
                CC(cuMemcpyHtoD_v2(dev, host, 4096));
                CC(cuMemcpyDtoH_v2(host, dev, 8192));
                CC(cuMemcpyDtoD_v2(dev2, dev, 16384));
                CC(cuMemcpyHtoDAsync_v2(dev, pinned, 4096, s));
                CC(cuMemcpyDtoHAsync_v2(pinned, dev, 8192, s));
                CC(cuMemcpyDtoDAsync_v2(dev2, dev, 16384, s));
                CC(cuMemcpy(dev, host_p, 1000));
                CC(cuMemcpy(host_p, dev + 512, 2000));
                CC(cuMemcpyAsync(dev2, dev, 3000, s));
                CC(cuMemcpyAsync(host_p, pinned_p, 4000, s));
                CC(cuMemcpyPeer(dev2, g_ctx, dev, g_ctx, 5000));
                CC(cuMemsetD32_v2(dev, 0, 256));
            }
        }
        CC(cuMemFree_v2(dev));
        CC(cuMemFree_v2(dev2));
        CC(cuMemFreeHost(pinned));
        free(host);
    }

    /* --syncs: 5 calls per iteration */
    for (uint64_t i = 0; i < opt.syncs; i++) {
        if (pt) {
            CC(cuEventRecord_ptsz(ev, s));
            CC(cuStreamWaitEvent_ptsz(s, ev, 0));
            CC(cuEventSynchronize(ev));
            CC(cuStreamSynchronize_ptsz(s));
        } else {
            CC(cuEventRecord(ev, s));
            CC(cuStreamWaitEvent(s, ev, 0));
            CC(cuEventSynchronize(ev));
            CC(cuStreamSynchronize(s));
        }
        CC(cuCtxSynchronize());
    }

    /* --capture-checks: 2 calls per iteration, as a library asks before
       its work on a stream (the stream is not capturing) */
    for (uint64_t i = 0; i < opt.capture_checks; i++) {
        CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        cuuint64_t id = 0;
        CUgraph g = NULL;
        const CUgraphNode *deps = NULL;
        const CUgraphEdgeData *edges = NULL;
        size_t n = 0;
        if (pt) {
            CC(cuStreamIsCapturing_ptsz(s, &st));
            CC(cuStreamGetCaptureInfo_v3_ptsz(s, &st, &id, &g, &deps, &edges, &n));
        } else {
            CC(cuStreamIsCapturing(s, &st));
            CC(cuStreamGetCaptureInfo_v3(s, &st, &id, &g, &deps, &edges, &n));
        }
        if (st != CU_STREAM_CAPTURE_STATUS_NONE) die_msg((int)w->idx, "a capture check found the stream capturing");
    }

    /* --fail: each call must return CUDA_ERROR_OUT_OF_MEMORY and leave *dptr alone */
    for (uint64_t i = 0; i < opt.fail; i++) {
        CUdeviceptr d = (CUdeviceptr)FAIL_SENTINEL;
        CUresult r = cuMemAlloc_v2(&d, FAIL_ALLOC_BYTES);
        w->calls++;
        if (r != CUDA_ERROR_OUT_OF_MEMORY) die_cu((int)w->idx, "cuMemAlloc_v2(&d, 128 GiB) [expected CUDA_ERROR_OUT_OF_MEMORY]", r);
        if (d != (CUdeviceptr)FAIL_SENTINEL) die_msg((int)w->idx, "failed cuMemAlloc_v2 modified its out-pointer");
    }

    /* --nccl (workload_nccl.c) */
    if (wnccl_pass((int)w->idx, s, &w->calls)) w->halted = 1;

    /* --graph-replays: capture, node-by-node construction, replays, updates */
    if (opt.graph_replays) graphs_pass(w);

    /* --varied (workload_cupti.c) */
    if (copt.varied) wcupti_pass(w);

    /* --gemms (workload_blas.c) */
    wblas_pass(w);
}

static int keep_going(void)
{
    if (g_stop) return 0;
    if (opt.have_duration) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        return ts_diff_ns(&g_start, &now) < opt.duration_ms * 1000000ULL;
    }
    return opt.loop;
}

/* ------------------------------------------------------------------ */
/* Bench                                                               */
/* ------------------------------------------------------------------ */

static void bench_setup(struct worker *w)
{
    switch (opt.bench) {
    case BENCH_MEMCPY:
        WSETUP(cuMemAlloc_v2(&w->b_dev, 1 * MiB));
        WSETUP(cuMemAllocHost_v2(&w->b_pinned, 1 * MiB));
        break;
    case BENCH_NCCL:
        WSETUP(cuMemAlloc_v2(&w->b_send, 8 * MiB));
        WSETUP(cuMemAlloc_v2(&w->b_recv, 8 * MiB));
        wnccl_bench_init((int)w->idx, &w->b_comm);
        break;
    default:
        break;
    }
}

static void bench_teardown(struct worker *w)
{
    switch (opt.bench) {
    case BENCH_MEMCPY:
        WSETUP(cuMemFree_v2(w->b_dev));
        WSETUP(cuMemFreeHost(w->b_pinned));
        break;
    case BENCH_NCCL:
        WSETUP_NCCL(ncclCommDestroy(w->b_comm));
        WSETUP(cuMemFree_v2(w->b_send));
        WSETUP(cuMemFree_v2(w->b_recv));
        break;
    default:
        break;
    }
}

static uint64_t bench_calls_per_thread(void)
{
    if (opt.bench == BENCH_ALLOC) return (opt.calls + 1) / 2 * 2;
    return opt.calls;
}

static void run_bench(struct worker *w)
{
    const uint64_t n = opt.calls;
    CUstream s = w->stream;
    void **params = w->params;
    struct timespec t0, t1, c0, c1;
    CUresult r = CUDA_SUCCESS;

    /* The thread's own CPU time too: unlike the wall time it does not
     * count time other processes took the CPU (a shared machine). */
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    switch (opt.bench) {
    case BENCH_LAUNCH: {
        CUfunction f = g_funcs[0];
        if (opt.ptsz || opt.per_thread) {
            for (uint64_t i = 0; i < n; i++) {
                r = cuLaunchKernel_ptsz(f, 64, 2, 1, 256, 1, 1, 4096, s, params, NULL);
                if (UNLIKELY(r != CUDA_SUCCESS)) die_cu((int)w->idx, "cuLaunchKernel_ptsz", r);
            }
        } else {
            for (uint64_t i = 0; i < n; i++) {
                r = cuLaunchKernel(f, 64, 2, 1, 256, 1, 1, 4096, s, params, NULL);
                if (UNLIKELY(r != CUDA_SUCCESS)) die_cu((int)w->idx, "cuLaunchKernel", r);
            }
        }
        break;
    }
    case BENCH_LAUNCH_EX: {
        CUlaunchConfig cfg;
        memset(&cfg, 0, sizeof(cfg));
        cfg.gridDimX = 32; cfg.gridDimY = 4; cfg.gridDimZ = 2;
        cfg.blockDimX = 128; cfg.blockDimY = 2; cfg.blockDimZ = 1;
        cfg.sharedMemBytes = 8192;
        cfg.hStream = s;
        CUfunction f = g_gemm_func;
        if (opt.per_thread) {
            for (uint64_t i = 0; i < n; i++) {
                r = cuLaunchKernelEx_ptsz(&cfg, f, params, NULL);
                if (UNLIKELY(r != CUDA_SUCCESS)) die_cu((int)w->idx, "cuLaunchKernelEx_ptsz", r);
            }
        } else {
            for (uint64_t i = 0; i < n; i++) {
                r = cuLaunchKernelEx(&cfg, f, params, NULL);
                if (UNLIKELY(r != CUDA_SUCCESS)) die_cu((int)w->idx, "cuLaunchKernelEx", r);
            }
        }
        break;
    }
    case BENCH_MEMCPY: {
        CUdeviceptr dev = w->b_dev;
        const void *pinned = w->b_pinned;
        if (opt.per_thread) {
            for (uint64_t i = 0; i < n; i++) {
                r = cuMemcpyHtoDAsync_v2_ptsz(dev, pinned, 4096, s);
                if (UNLIKELY(r != CUDA_SUCCESS)) die_cu((int)w->idx, "cuMemcpyHtoDAsync_v2_ptsz", r);
            }
        } else {
            for (uint64_t i = 0; i < n; i++) {
                r = cuMemcpyHtoDAsync_v2(dev, pinned, 4096, s);
                if (UNLIKELY(r != CUDA_SUCCESS)) die_cu((int)w->idx, "cuMemcpyHtoDAsync_v2", r);
            }
        }
        break;
    }
    case BENCH_NCCL: {
        const void *sb = (const void *)(uintptr_t)w->b_send;
        void *rb = (void *)(uintptr_t)w->b_recv;
        ncclComm_t comm = w->b_comm;
        for (uint64_t i = 0; i < n; i++) {
            ncclResult_t nr = ncclAllReduce(sb, rb, 1048576, ncclFloat32, ncclSum, comm, s);
            if (UNLIKELY(nr != ncclSuccess)) die_nccl((int)w->idx, "ncclAllReduce", nr);
        }
        break;
    }
    case BENCH_ALLOC: {
        const uint64_t pairs = (n + 1) / 2;
        for (uint64_t i = 0; i < pairs; i++) {
            CUdeviceptr d = 0;
            r = cuMemAlloc_v2(&d, 1 * MiB);
            if (UNLIKELY(r != CUDA_SUCCESS)) die_cu((int)w->idx, "cuMemAlloc_v2", r);
            r = cuMemFree_v2(d);
            if (UNLIKELY(r != CUDA_SUCCESS)) die_cu((int)w->idx, "cuMemFree_v2", r);
        }
        break;
    }
    default:
        break;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    w->bench_ns = ts_diff_ns(&t0, &t1);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    w->bench_cpu_ns = ts_diff_ns(&c0, &c1);
    w->bench_calls = bench_calls_per_thread();
    w->calls += w->bench_calls;
}

/* ------------------------------------------------------------------ */
/* Threads                                                             */
/* ------------------------------------------------------------------ */

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char name[16];
    snprintf(name, sizeof(name), "worker-%u", w->idx);
    pthread_setname_np(pthread_self(), name);
    w->tid = (pid_t)syscall(SYS_gettid);

    w->arg_a = w->arg_b = w->arg_c = 0;
    w->arg_n = 1048576;
    w->arg_m = w->arg_k = 256;
    w->params[0] = &w->arg_a;
    w->params[1] = &w->arg_b;
    w->params[2] = &w->arg_c;
    w->params[3] = &w->arg_n;
    w->params[4] = &w->arg_m;
    w->params[5] = &w->arg_k;

    WSETUP(cuCtxSetCurrent(g_ctx));
    if (opt.bench) bench_setup(w);
    if (opt.graph_replays && opt.graphs_before_wait) graphs_worker_setup(w);

    pthread_barrier_wait(&g_started);
    pthread_barrier_wait(&g_go);
    if (g_skip) {
        if (opt.graph_replays) graphs_worker_teardown(w);
        return NULL;
    }

    if (opt.bench) {
        run_bench(w);
        bench_teardown(w);
        return NULL;
    }
    struct timespec win;
    clock_gettime(CLOCK_MONOTONIC, &win);
    w->window_start_ns = (uint64_t)win.tv_sec * 1000000000ULL + (uint64_t)win.tv_nsec;
    do {
        run_pass(w);
        w->passes++;
    } while (!w->halted && keep_going());
    clock_gettime(CLOCK_MONOTONIC, &win);
    w->window_end_ns = (uint64_t)win.tv_sec * 1000000000ULL + (uint64_t)win.tv_nsec;
    wnccl_finish((int)w->idx, &w->calls);
    if (opt.graph_replays) graphs_worker_teardown(w);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Argument parsing                                                    */
/* ------------------------------------------------------------------ */

uint64_t parse_u64(const char *flag, const char *s)
{
    if (s == NULL) usage_error("%s needs a value", flag);
    if (*s < '0' || *s > '9') usage_error("bad number '%s'", s);
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == NULL || *end != '\0') usage_error("bad number '%s'", s);
    return (uint64_t)v;
}

static void parse_args(int argc, char **argv)
{
    int counted_flags = 0, ranks_flags = 0, cupti_counted = 0;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        char *val = NULL;
        char flagbuf[64];
        char *eq = strchr(a, '=');
        if (strncmp(a, "--", 2) == 0 && eq != NULL && (size_t)(eq - a) < sizeof(flagbuf)) {
            memcpy(flagbuf, a, (size_t)(eq - a));
            flagbuf[eq - a] = '\0';
            val = eq + 1;
            a = flagbuf;
        }
#define TAKE_VALUE() (val != NULL ? val : (i + 1 < argc ? argv[++i] : NULL))
#define NO_VALUE() do { if (val != NULL) usage_error("%s takes no value", a); } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("%s\n", usage_text);
            exit(0);
        } else if (!strcmp(a, "--threads")) {
            uint64_t t = parse_u64(a, TAKE_VALUE());
            if (t < 1 || t > MAX_THREADS) usage_error("--threads must be 1..1024, got %s", argv[i]);
            opt.threads = (unsigned)t;
        } else if (!strcmp(a, "--launches")) { opt.launches = parse_u64(a, TAKE_VALUE()); counted_flags++; }
        else if (!strcmp(a, "--distinct-kernels")) { opt.distinct_kernels = parse_u64(a, TAKE_VALUE()); counted_flags++; }
        else if (!strcmp(a, "--distinct-comms")) { nopt.distinct_comms = parse_u64(a, TAKE_VALUE()); counted_flags++; }
        else if (!strcmp(a, "--launch-ex")) { opt.launch_ex = parse_u64(a, TAKE_VALUE()); counted_flags++; }
        else if (!strcmp(a, "--coop")) { opt.coop = parse_u64(a, TAKE_VALUE()); counted_flags++; }
        else if (!strcmp(a, "--graphs")) { opt.graphs = parse_u64(a, TAKE_VALUE()); counted_flags++; }
        else if (!strcmp(a, "--runtime")) { opt.runtime = parse_u64(a, TAKE_VALUE()); counted_flags++; }
        else if (!strcmp(a, "--allocs")) { opt.allocs = parse_u64(a, TAKE_VALUE()); counted_flags++; }
        else if (!strcmp(a, "--copies")) { opt.copies = parse_u64(a, TAKE_VALUE()); counted_flags++; }
        else if (!strcmp(a, "--syncs")) { opt.syncs = parse_u64(a, TAKE_VALUE()); counted_flags++; }
        else if (!strcmp(a, "--capture-checks")) { opt.capture_checks = parse_u64(a, TAKE_VALUE()); counted_flags++; }
        else if (!strcmp(a, "--fail")) { opt.fail = parse_u64(a, TAKE_VALUE()); counted_flags++; }
        else if (!strcmp(a, "--nccl")) { nopt.iters = parse_u64(a, TAKE_VALUE()); counted_flags++; }
        else if (!strcmp(a, "--graph-replays")) { opt.graph_replays = parse_u64(a, TAKE_VALUE()); counted_flags++; }
        else if (!strcmp(a, "--graph-update")) { NO_VALUE(); opt.graph_update = 1; }
        else if (!strcmp(a, "--graphs-before-wait")) { NO_VALUE(); opt.graphs_before_wait = 1; }
        else if (!strcmp(a, "--graph-linger-ms")) { opt.graph_linger_ms = parse_u64(a, TAKE_VALUE()); }
        else if (!strcmp(a, "--capture-sleep-ms")) { opt.capture_sleep_ms = parse_u64(a, TAKE_VALUE()); }
        else if (!strcmp(a, "--nccl-config")) { NO_VALUE(); nopt.config = 1; }
        else if (parse_nccl_flag(a, val, argc, argv, &i)) { ranks_flags++; }
        else if (parse_cupti_flag(a, val, argc, argv, &i, &cupti_counted)) { counted_flags += cupti_counted; }
        else if (parse_blas_flag(a, val, argc, argv, &i)) { counted_flags++; }
        else if (!strcmp(a, "--ptsz")) { NO_VALUE(); opt.ptsz = 1; }
        else if (!strcmp(a, "--per-thread-stream")) { NO_VALUE(); opt.per_thread = 1; }
        else if (!strcmp(a, "--wait-stdin")) { NO_VALUE(); opt.wait_stdin = 1; }
        else if (!strcmp(a, "--delay-ms")) { opt.delay_ms = parse_u64(a, TAKE_VALUE()); }
        else if (!strcmp(a, "--names-after-wait")) { NO_VALUE(); opt.names_after_wait = 1; }
        else if (!strcmp(a, "--pace-us")) { opt.pace_us = parse_u64(a, TAKE_VALUE()); }
        else if (!strcmp(a, "--spin-ns")) { opt.spin_ns = parse_u64(a, TAKE_VALUE()); }
        else if (!strcmp(a, "--exit-main")) { NO_VALUE(); opt.exit_main = 1; }
        else if (!strcmp(a, "--exec-then")) {
            NO_VALUE();
            if (i + 1 >= argc) usage_error("%s needs a program", "--exec-then");
            opt.exec_argv = &argv[i + 1];
            break; /* the rest is the program's */
        }
        else if (!strcmp(a, "--loop")) { NO_VALUE(); opt.loop = 1; counted_flags++; }
        else if (!strcmp(a, "--duration-ms")) { opt.duration_ms = parse_u64(a, TAKE_VALUE()); opt.have_duration = 1; counted_flags++; }
        else if (!strcmp(a, "--sync-us")) {
            const char *v = TAKE_VALUE();
            (void)parse_u64(a, v);
            opt.sync_us = v;
        } else if (!strcmp(a, "--print-handles")) { NO_VALUE(); opt.print_handles = 1; }
        else if (!strcmp(a, "--bench")) {
            const char *k = TAKE_VALUE();
            if (k == NULL) usage_error("%s needs a value", "--bench");
            opt.bench = BENCH_NONE;
            for (int b = BENCH_LAUNCH; b <= BENCH_ALLOC; b++)
                if (!strcmp(k, k_bench_names[b])) opt.bench = (enum bench_kind)b;
            if (opt.bench == BENCH_NONE) usage_error("unknown --bench kind '%s'", k);
        } else if (!strcmp(a, "--calls")) {
            opt.calls = parse_u64(a, TAKE_VALUE());
            if (opt.calls == 0) usage_error("%s must be at least 1", "--calls");
            opt.have_calls = 1;
        } else {
            usage_error("unknown argument '%s'", argv[i]);
        }
#undef TAKE_VALUE
#undef NO_VALUE
    }
    if (opt.have_calls && !opt.bench) usage_error("%s requires --bench", "--calls");
    check_nccl_flags(ranks_flags, opt.bench != BENCH_NONE, opt.threads, opt.have_duration);
    if ((opt.graph_update || opt.graphs_before_wait) && !opt.graph_replays)
        usage_error("%s requires --graph-replays (at least 1)", opt.graph_update ? "--graph-update" : "--graphs-before-wait");
    if (opt.graphs_before_wait && opt.names_after_wait)
        usage_error("%s cannot be combined with --names-after-wait (the graphs need the kernels)", "--graphs-before-wait");
    if (opt.bench && counted_flags)
        usage_error("%s cannot be combined with counted-phase flags, --loop or --duration-ms", "--bench");
    if (opt.exit_main && (opt.bench || opt.exec_argv))
        usage_error("%s cannot be combined with --bench or --exec-then", "--exit-main");
}

/* ------------------------------------------------------------------ */
/* main                                                                */
/* ------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    parse_args(argc, argv);

    if (opt.sync_us && setenv("GPUTRACE_SIM_SYNC_US", opt.sync_us, 1) != 0) {
        perror("gputrace-workload: setenv");
        return 1;
    }

    wcupti_setup(); /* --map-cupti, --subscribe-cupti */
    wblas_setup();  /* --gemms */

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a blocked stdin read returns */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    const unsigned T = opt.threads;
    g_workers = calloc(T, sizeof(*g_workers));
    if (g_workers == NULL) {
        perror("gputrace-workload: calloc");
        return 1;
    }

    /* ---- setup phase (not counted) ---- */
    if (opt.runtime) register_runtime(); /* nvcc's start-up registration, before anything else */
    SETUP(cuInit(0));
    SETUP(cuDeviceGet(&g_dev, 0));
    SETUP(cuDevicePrimaryCtxRetain(&g_ctx, g_dev));
    SETUP(cuCtxSetCurrent(g_ctx));
    if (opt.print_handles) print_handle("ctx", g_ctx);
    if (!opt.names_after_wait) load_names();
    for (unsigned t = 0; t < T; t++) {
        g_workers[t].idx = t;
        SETUP(cuStreamCreate(&g_workers[t].stream, CU_STREAM_NON_BLOCKING));
        SETUP(cuEventCreate(&g_workers[t].event, CU_EVENT_DISABLE_TIMING));
    }
    SETUP(cuGraphCreate(&g_graph, 0));
    SETUP(cuGraphInstantiateWithFlags(&g_gexec, g_graph, 0));
    if (opt.graph_replays) graphs_setup_main();
    if (opt.print_handles) {
        char name[32];
        for (unsigned t = 0; t < T; t++) {
            snprintf(name, sizeof(name), "stream[%u]", t);
            print_handle(name, g_workers[t].stream);
            snprintf(name, sizeof(name), "event[%u]", t);
            print_handle(name, g_workers[t].event);
        }
        print_handle("graph", g_graph);
        print_handle("graph_exec", g_gexec);
        if (opt.graph_replays) {
            for (unsigned t = 0; t < T; t++) {
                snprintf(name, sizeof(name), "stream2[%u]", t);
                print_handle(name, g_workers[t].gs.stream2);
                snprintf(name, sizeof(name), "event_fork[%u]", t);
                print_handle(name, g_workers[t].gs.ev_fork);
                snprintf(name, sizeof(name), "event_join[%u]", t);
                print_handle(name, g_workers[t].gs.ev_join);
            }
        }
    }

    wnccl_setup_early(); /* --ranks --nccl-init-early: the communicator exists before the ready lines */

    if (pthread_barrier_init(&g_started, NULL, T + 1) != 0 || pthread_barrier_init(&g_go, NULL, T + 1) != 0) {
        fprintf(stderr, "gputrace-workload: pthread_barrier_init failed\n");
        return 1;
    }
    for (unsigned t = 0; t < T; t++) {
        int e = pthread_create(&g_workers[t].thread, NULL, worker_main, &g_workers[t]);
        if (e != 0) {
            fprintf(stderr, "gputrace-workload: pthread_create: %s\n", strerror(e));
            return 1;
        }
    }
    pthread_barrier_wait(&g_started);
    if (opt.print_handles && opt.graph_replays && opt.graphs_before_wait) graphs_print_exec_handles();

    printf("ready pid=%d\n", (int)getpid());
    for (unsigned t = 0; t < T; t++) printf("thread %u tid=%d\n", t, (int)g_workers[t].tid);
    fflush(stdout);
    wcupti_start_agent(); /* --load-agent: prints the `agent start=` line */

    /* ---- wait ---- */
    if (opt.wait_stdin && !g_stop) {
        char line[256];
        if (fgets(line, sizeof(line), stdin) == NULL) {
            /* EOF, error or signal: go on */
        }
    }
    if (opt.delay_ms && !g_stop) sleep_ms(opt.delay_ms);

    if (g_stop) {
        g_skip = 1;
    } else if (opt.names_after_wait) {
        load_names();
    }

    wcupti_take_start(); /* --take-cupti */
    clock_gettime(CLOCK_MONOTONIC, &g_start);
    pthread_barrier_wait(&g_go);
    /* --exit-main: the workers go on alone; the process ends (status 0)
     * when the last of them returns. */
    if (opt.exit_main && !g_skip) {
        printf("main exits\n");
        fflush(stdout);
        pthread_exit(NULL);
    }

    uint64_t total = 0, max_ns = 0, per_thread_calls = 0, cpu_ns = 0;
    for (unsigned t = 0; t < T; t++) {
        pthread_join(g_workers[t].thread, NULL);
        total += g_workers[t].calls;
        cpu_ns += g_workers[t].bench_cpu_ns;
        if (g_workers[t].bench_ns > max_ns) max_ns = g_workers[t].bench_ns;
        per_thread_calls = g_workers[t].bench_calls;
    }

    wcupti_end_wait(); /* --wait-stdin-end */

    /* ---- teardown (not counted) ---- */
    for (unsigned t = 0; t < T; t++) {
        SETUP(cuEventDestroy_v2(g_workers[t].event));
        SETUP(cuStreamDestroy_v2(g_workers[t].stream));
    }
    if (opt.graph_replays) graphs_teardown_main();
    SETUP(cuGraphExecDestroy(g_gexec));
    SETUP(cuGraphDestroy(g_graph));
    if (g_library) SETUP(cuLibraryUnload(g_library));
    if (g_module) SETUP(cuModuleUnload(g_module));
    if (g_fatbin_handle) __cudaUnregisterFatBinary(g_fatbin_handle);
    wnccl_teardown_early();
    SETUP(cuDevicePrimaryCtxRelease_v2(g_dev));

    if (opt.bench && !g_skip) {
        double ns_per_call = per_thread_calls ? (double)max_ns / (double)per_thread_calls : 0.0;
        double cpu_per_call = per_thread_calls ? (double)cpu_ns / (double)(T * per_thread_calls) : 0.0;
        printf("bench kind=%s threads=%u calls=%" PRIu64 " ns_per_call=%.3f cpu_ns_per_call=%.3f\n",
               k_bench_names[opt.bench], T, (uint64_t)T * per_thread_calls, ns_per_call, cpu_per_call);
    }
    wnccl_print_figures();
    if (opt.graph_replays) graphs_report();
    wcupti_report();
    printf("done calls=%" PRIu64 "\n", total);
    fflush(stdout);
    pthread_barrier_destroy(&g_started);
    pthread_barrier_destroy(&g_go);
    free(g_workers);
    if (opt.exec_argv != NULL && !g_skip) {
        execv(opt.exec_argv[0], opt.exec_argv);
        perror("gputrace-workload: execv");
        return 1;
    }
    return 0;
}
