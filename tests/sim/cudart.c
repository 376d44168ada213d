/*
 * cudart.c - simulated CUDA runtime (libcudart.so.13) for gputrace tests.
 *
 * Implements just what an nvcc-compiled program needs to launch kernels
 * through the runtime: the registration calls its generated host code makes
 * at start-up (__cudaRegisterFatBinary, __cudaRegisterFunction, ...), the
 * launch entry points (cudaLaunchKernel, cudaLaunchKernelExC and their
 * _ptsz variants) and the error calls.  Everything is forwarded to the
 * simulated driver (libcuda.so.1, DT_NEEDED, found through RUNPATH $ORIGIN):
 *
 *   __cudaRegisterFatBinary  -> [cuInit, cuDeviceGet, cuDevicePrimaryCtxRetain,
 *                                cuCtxSetCurrent: first registration only],
 *                               cuModuleLoadData(PTX)
 *   __cudaRegisterFunction   -> cuModuleGetFunction (eagerly, at registration)
 *   cudaLaunchKernel[_ptsz]  -> cuLaunchKernel[_ptsz]        (exactly one call)
 *   cudaLaunchKernelExC[_ptsz] -> cuLaunchKernelEx[_ptsz]    (exactly one call)
 *   __cudaUnregisterFatBinary -> cuModuleUnload [, cuDevicePrimaryCtxRelease_v2
 *                                after the last live fat binary]
 *
 * Built with -fvisibility=hidden; only the CUDART_EXPORT functions below are
 * exported (default visibility, unversioned).  No exported function calls
 * another exported function of this library (shared code is in static
 * helpers), so one runtime API call is exactly one uprobe hit here.
 * README.md is the contract.
 */
#define _GNU_SOURCE
#include "cuda_sim.h"
#include "cudart_sim.h"

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CUDART_EXPORT __attribute__((visibility("default")))

/* cudaLaunchAttribute is passed to the driver as CUlaunchAttribute: the two
 * have the same layout and the same attribute id values. */
_Static_assert(sizeof(cudaLaunchAttribute) == sizeof(CUlaunchAttribute), "launch attribute layouts differ");
_Static_assert(offsetof(cudaLaunchAttribute, val) == offsetof(CUlaunchAttribute, value), "launch attribute layouts differ");

/* ------------------------------------------------------------------ */
/* State                                                               */
/* ------------------------------------------------------------------ */

/*
 * One registered fat binary.  The handle returned by
 * __cudaRegisterFatBinary is &fb->wrapper (so *handle is the fatCubin
 * pointer the program passed, as with the real runtime).
 */
struct fatbin {
    void *wrapper;          /* must stay the first member */
    CUmodule module;        /* NULL when the image could not be loaded */
    struct fatbin *next;
};

/* One host stub -> kernel registration that resolved successfully. */
struct reg {
    const void *stub;       /* hostFun: address of the host stub */
    char *name;             /* deviceFun (copied) */
    CUfunction func;        /* from cuModuleGetFunction */
    struct fatbin *fb;
    struct reg *next;
};

static pthread_rwlock_t g_lock = PTHREAD_RWLOCK_INITIALIZER; /* guards everything below */
static struct fatbin *g_fatbins;
static unsigned g_live_fatbins;
static struct reg *g_regs;
static int g_ctx_held;      /* the runtime holds one primary-context reference */
static CUdevice g_dev;
static CUcontext g_ctx;

static __thread cudaError_t t_last_error = cudaSuccess;

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static cudaError_t record(cudaError_t e)
{
    if (e != cudaSuccess) t_last_error = e;
    return e;
}

/* CUresult -> cudaError_t (README.md, "Error mapping"). */
static cudaError_t from_driver(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS:               return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE:   return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY:   return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_INVALID_IMAGE:   return cudaErrorInvalidKernelImage;
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_INVALID_HANDLE:  return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_NOT_FOUND:       return cudaErrorSymbolNotFound;
    default:                         return cudaErrorUnknown;
    }
}

/* Caller holds g_lock (read or write). */
static struct fatbin *find_fatbin(void **handle)
{
    for (struct fatbin *fb = g_fatbins; fb != NULL; fb = fb->next)
        if ((void **)&fb->wrapper == handle) return fb;
    return NULL;
}

/* Caller holds g_lock (read or write). */
static struct reg *find_reg(const void *stub)
{
    for (struct reg *r = g_regs; r != NULL; r = r->next)
        if (r->stub == stub) return r;
    return NULL;
}

static CUfunction lookup(const void *stub)
{
    CUfunction f = NULL;
    pthread_rwlock_rdlock(&g_lock);
    struct reg *r = find_reg(stub);
    if (r != NULL) f = r->func;
    pthread_rwlock_unlock(&g_lock);
    return f;
}

/* Caller holds g_lock for writing. */
static void drop_regs_of(struct fatbin *fb)
{
    struct reg **pp = &g_regs;
    while (*pp != NULL) {
        struct reg *r = *pp;
        if (r->fb == fb) {
            *pp = r->next;
            free(r->name);
            free(r);
        } else {
            pp = &r->next;
        }
    }
}

/* Caller holds g_lock for writing.  The driver calls of the first
 * registration: cuInit, cuDeviceGet, cuDevicePrimaryCtxRetain, cuCtxSetCurrent. */
static CUresult ensure_context(void)
{
    if (g_ctx_held) return CUDA_SUCCESS;
    CUresult r = cuInit(0);
    if (r == CUDA_SUCCESS) r = cuDeviceGet(&g_dev, 0);
    if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&g_ctx, g_dev);
    if (r != CUDA_SUCCESS) return r;
    g_ctx_held = 1;
    return cuCtxSetCurrent(g_ctx);
}

static cudaError_t launch(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
                          cudaStream_t stream, int ptsz)
{
    CUfunction f = lookup(func);
    if (f == NULL) return record(cudaErrorInvalidDeviceFunction);
    if (shmem > UINT_MAX) return record(cudaErrorInvalidValue);
    CUresult r;
    if (ptsz)
        r = cuLaunchKernel_ptsz(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned int)shmem,
                                (CUstream)stream, args, NULL);
    else
        r = cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned int)shmem,
                           (CUstream)stream, args, NULL);
    return record(from_driver(r));
}

static cudaError_t launch_ex(const cudaLaunchConfig_t *config, const void *func, void **args, int ptsz)
{
    if (config == NULL) return record(cudaErrorInvalidValue);
    CUfunction f = lookup(func);
    if (f == NULL) return record(cudaErrorInvalidDeviceFunction);
    if (config->dynamicSmemBytes > UINT_MAX) return record(cudaErrorInvalidValue);
    CUlaunchConfig c;
    memset(&c, 0, sizeof(c));
    c.gridDimX = config->gridDim.x;
    c.gridDimY = config->gridDim.y;
    c.gridDimZ = config->gridDim.z;
    c.blockDimX = config->blockDim.x;
    c.blockDimY = config->blockDim.y;
    c.blockDimZ = config->blockDim.z;
    c.sharedMemBytes = (unsigned int)config->dynamicSmemBytes;
    c.hStream = (CUstream)config->stream;
    c.attrs = (CUlaunchAttribute *)(void *)config->attrs;
    c.numAttrs = config->numAttrs;
    CUresult r = ptsz ? cuLaunchKernelEx_ptsz(&c, f, args, NULL) : cuLaunchKernelEx(&c, f, args, NULL);
    return record(from_driver(r));
}

/* ------------------------------------------------------------------ */
/* Registration (crt/host_runtime.h)                                   */
/* ------------------------------------------------------------------ */

CUDART_EXPORT void **CUDARTAPI __cudaRegisterFatBinary(void *fatCubin)
{
    struct fatbin *fb = calloc(1, sizeof(*fb));
    if (fb == NULL) {
        record(cudaErrorMemoryAllocation);
        return NULL;
    }
    fb->wrapper = fatCubin;

    pthread_rwlock_wrlock(&g_lock);
    const simFatBinWrapper *w = fatCubin;
    if (w == NULL || w->magic != SIM_FATBINC_MAGIC || w->version != SIM_FATBINC_VERSION || w->data == NULL) {
        record(cudaErrorInvalidKernelImage); /* no driver call */
    } else {
        CUresult r = ensure_context();
        if (r == CUDA_SUCCESS) r = cuModuleLoadData(&fb->module, w->data);
        if (r != CUDA_SUCCESS) {
            fb->module = NULL;
            record(from_driver(r));
        }
    }
    fb->next = g_fatbins;
    g_fatbins = fb;
    g_live_fatbins++;
    pthread_rwlock_unlock(&g_lock);
    return (void **)&fb->wrapper;
}

CUDART_EXPORT void CUDARTAPI __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
    /* Nothing to finish: modules and functions are resolved eagerly. */
    (void)fatCubinHandle;
}

CUDART_EXPORT void CUDARTAPI __cudaUnregisterFatBinary(void **fatCubinHandle)
{
    pthread_rwlock_wrlock(&g_lock);
    struct fatbin *fb = find_fatbin(fatCubinHandle);
    if (fb == NULL) {
        pthread_rwlock_unlock(&g_lock);
        record(cudaErrorInvalidResourceHandle);
        return;
    }
    for (struct fatbin **pp = &g_fatbins; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == fb) {
            *pp = fb->next;
            break;
        }
    }
    drop_regs_of(fb);
    if (fb->module != NULL) {
        CUresult r = cuModuleUnload(fb->module);
        if (r != CUDA_SUCCESS) record(from_driver(r));
    }
    free(fb);
    g_live_fatbins--;
    if (g_live_fatbins == 0 && g_ctx_held) {
        CUresult r = cuDevicePrimaryCtxRelease_v2(g_dev);
        if (r != CUDA_SUCCESS) record(from_driver(r));
        g_ctx_held = 0;
        g_ctx = NULL;
    }
    pthread_rwlock_unlock(&g_lock);
}

CUDART_EXPORT void CUDARTAPI __cudaRegisterFunction(void **fatCubinHandle,
                                                    const char *hostFun,
                                                    char *deviceFun,
                                                    const char *deviceName,
                                                    int thread_limit,
                                                    uint3 *tid,
                                                    uint3 *bid,
                                                    dim3 *bDim,
                                                    dim3 *gDim,
                                                    int *wSize)
{
    (void)deviceName;
    (void)thread_limit;
    (void)tid;
    (void)bid;
    (void)bDim;
    (void)gDim;
    (void)wSize;

    pthread_rwlock_wrlock(&g_lock);
    struct fatbin *fb = find_fatbin(fatCubinHandle);
    if (fb == NULL) {
        record(cudaErrorInvalidResourceHandle);
    } else if (hostFun == NULL || deviceFun == NULL) {
        record(cudaErrorInvalidValue);
    } else if (fb->module == NULL) {
        record(cudaErrorInvalidKernelImage); /* image did not load: no driver call */
    } else {
        CUfunction f = NULL;
        CUresult r = cuModuleGetFunction(&f, fb->module, deviceFun);
        char *name = r == CUDA_SUCCESS ? strdup(deviceFun) : NULL;
        if (r != CUDA_SUCCESS) {
            record(from_driver(r));
        } else if (name == NULL) {
            record(cudaErrorMemoryAllocation);
        } else {
            struct reg *old = find_reg(hostFun);
            if (old != NULL) { /* a later registration of the same stub replaces it */
                free(old->name);
                old->name = name;
                old->func = f;
                old->fb = fb;
            } else {
                struct reg *n = calloc(1, sizeof(*n));
                if (n == NULL) {
                    free(name);
                    record(cudaErrorMemoryAllocation);
                } else {
                    n->stub = hostFun;
                    n->name = name;
                    n->func = f;
                    n->fb = fb;
                    n->next = g_regs;
                    g_regs = n;
                }
            }
        }
    }
    pthread_rwlock_unlock(&g_lock);
}

/* ------------------------------------------------------------------ */
/* Execution control (cuda_runtime_api.h)                              */
/* ------------------------------------------------------------------ */

CUDART_EXPORT cudaError_t CUDARTAPI cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                                     size_t sharedMem, cudaStream_t stream)
{
    return launch(func, gridDim, blockDim, args, sharedMem, stream, 0);
}

CUDART_EXPORT cudaError_t CUDARTAPI cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                                          size_t sharedMem, cudaStream_t stream)
{
    return launch(func, gridDim, blockDim, args, sharedMem, stream, 1);
}

CUDART_EXPORT cudaError_t CUDARTAPI cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
                                                        void **args)
{
    return launch_ex(config, func, args, 0);
}

CUDART_EXPORT cudaError_t CUDARTAPI cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func,
                                                             void **args)
{
    return launch_ex(config, func, args, 1);
}

/* ------------------------------------------------------------------ */
/* Error handling                                                      */
/* ------------------------------------------------------------------ */

CUDART_EXPORT cudaError_t CUDARTAPI cudaGetLastError(void)
{
    cudaError_t e = t_last_error;
    t_last_error = cudaSuccess;
    return e;
}

CUDART_EXPORT const char *CUDARTAPI cudaGetErrorString(cudaError_t error)
{
    switch (error) {
    case cudaSuccess:                    return "no error";
    case cudaErrorInvalidValue:          return "invalid argument";
    case cudaErrorMemoryAllocation:      return "out of memory";
    case cudaErrorInitializationError:   return "initialization error";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorInvalidKernelImage:    return "device kernel image is invalid";
    case cudaErrorDeviceUninitialized:   return "invalid device context";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorSymbolNotFound:        return "named symbol not found";
    case cudaErrorUnknown:               return "unknown error";
    }
    return "unrecognized error code";
}

/* ------------------------------------------------------------------ */
/* Simulator-only                                                      */
/* ------------------------------------------------------------------ */

CUDART_EXPORT void *simCudartFunctionFor(const void *stub)
{
    return (void *)lookup(stub);
}
