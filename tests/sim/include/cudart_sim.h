/*
 * cudart_sim.h - the subset of the CUDA runtime API implemented by the
 * gputrace simulator library libcudart.so.13 (tests/sim/cudart.c).
 *
 * Types, enum values, struct layouts and prototypes follow the CUDA 12.2
 * toolkit headers cuda_runtime_api.h (cudaLaunchKernel, cudaLaunchKernelExC,
 * cudaGetLastError, cudaGetErrorString), driver_types.h (cudaError,
 * cudaStream_t, cudaLaunchAttribute, cudaLaunchConfig_t), vector_types.h
 * (uint3, dim3) and crt/host_runtime.h (the __cudaRegister* functions nvcc's
 * generated host code calls).  Like cuda_sim.h, prototypes are declared
 * under their EXPORTED names: cuda_runtime_api.h maps cudaLaunchKernel and
 * cudaLaunchKernelExC to ..._ptsz when CUDA_API_PER_THREAD_DEFAULT_STREAM is
 * defined (__CUDART_API_PTSZ); this header declares both names and does no
 * remapping.
 *
 * Self-contained (does not include cuda_sim.h); cudaStream_t is
 * "struct CUstream_st *", the same type as the driver's CUstream, exactly as
 * in driver_types.h.
 */
#ifndef GPUTRACE_CUDART_SIM_H
#define GPUTRACE_CUDART_SIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUDARTAPI

/* ------------------------------------------------------------------ */
/* vector_types.h                                                      */
/* ------------------------------------------------------------------ */
struct uint3 {
    unsigned int x, y, z;
};
typedef struct uint3 uint3;

struct dim3 {
    unsigned int x, y, z;
};
typedef struct dim3 dim3;

/* ------------------------------------------------------------------ */
/* driver_types.h                                                      */
/* ------------------------------------------------------------------ */

/* The subset of enum cudaError used by the stand-in (values as in
 * driver_types.h). */
enum cudaError {
    cudaSuccess                    = 0,
    cudaErrorInvalidValue          = 1,
    cudaErrorMemoryAllocation      = 2,
    cudaErrorInitializationError   = 3,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorInvalidKernelImage    = 200,
    cudaErrorDeviceUninitialized   = 201,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorSymbolNotFound        = 500,
    cudaErrorUnknown               = 999
};
typedef enum cudaError cudaError_t;

typedef struct CUstream_st *cudaStream_t;

/* Subset of cudaLaunchAttributeID (int-sized enum). */
typedef enum cudaLaunchAttributeID {
    cudaLaunchAttributeIgnore                          = 0,
    cudaLaunchAttributeAccessPolicyWindow              = 1,
    cudaLaunchAttributeCooperative                     = 2,
    cudaLaunchAttributeSynchronizationPolicy           = 3,
    cudaLaunchAttributeClusterDimension                = 4,
    cudaLaunchAttributeClusterSchedulingPolicyPreference = 5,
    cudaLaunchAttributeProgrammaticStreamSerialization = 6,
    cudaLaunchAttributeProgrammaticEvent               = 7,
    cudaLaunchAttributePriority                        = 8,
    cudaLaunchAttributeMemSyncDomainMap                = 9,
    cudaLaunchAttributeMemSyncDomain                   = 10
} cudaLaunchAttributeID;

/* driver_types.h's cudaLaunchAttributeValue is a union padded to 64 bytes
 * with alignment 8 (it holds a cudaEvent_t); only a subset of its members
 * is spelled out here, size and alignment are identical. */
typedef union cudaLaunchAttributeValue {
    char pad[64];
    int cooperative;
    struct {
        unsigned int x;
        unsigned int y;
        unsigned int z;
    } clusterDim;
    int programmaticStreamSerializationAllowed;
    struct {
        void *event;
        int flags;
        int triggerAtBlockStart;
    } programmaticEvent;
    int priority;
} cudaLaunchAttributeValue;

typedef struct cudaLaunchAttribute_st {
    cudaLaunchAttributeID id;
    char pad[8 - sizeof(cudaLaunchAttributeID)];
    cudaLaunchAttributeValue val;
} cudaLaunchAttribute;

typedef struct cudaLaunchConfig_st {
    dim3 gridDim;               /* offset 0  */
    dim3 blockDim;              /* offset 12 */
    size_t dynamicSmemBytes;    /* offset 24 */
    cudaStream_t stream;        /* offset 32 */
    cudaLaunchAttribute *attrs; /* offset 40; nullable if numAttrs == 0 */
    unsigned int numAttrs;      /* offset 48 */
} cudaLaunchConfig_t;

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && defined(__LP64__)
_Static_assert(sizeof(dim3) == 12, "dim3 size");
_Static_assert(sizeof(cudaLaunchAttributeValue) == 64, "cudaLaunchAttributeValue size");
_Static_assert(sizeof(cudaLaunchAttribute) == 72, "cudaLaunchAttribute size");
_Static_assert(offsetof(cudaLaunchAttribute, val) == 8, "cudaLaunchAttribute.val");
_Static_assert(offsetof(cudaLaunchConfig_t, blockDim) == 12, "cudaLaunchConfig_t.blockDim");
_Static_assert(offsetof(cudaLaunchConfig_t, dynamicSmemBytes) == 24, "cudaLaunchConfig_t.dynamicSmemBytes");
_Static_assert(offsetof(cudaLaunchConfig_t, stream) == 32, "cudaLaunchConfig_t.stream");
_Static_assert(offsetof(cudaLaunchConfig_t, attrs) == 40, "cudaLaunchConfig_t.attrs");
_Static_assert(offsetof(cudaLaunchConfig_t, numAttrs) == 48, "cudaLaunchConfig_t.numAttrs");
_Static_assert(sizeof(cudaLaunchConfig_t) == 56, "cudaLaunchConfig_t size");
#endif

/* ------------------------------------------------------------------ */
/* Fat binary wrapper (simulator format)                               */
/* ------------------------------------------------------------------ */

/*
 * What __cudaRegisterFatBinary's argument points to.  Same layout as the
 * real __fatBinC_Wrapper_t (fatbinary_section.h: int magic, int version,
 * const unsigned long long *data, void *filename_or_fatbins), but `data`
 * is NUL-terminated PTX text instead of a fatbin container.
 */
#define SIM_FATBINC_MAGIC   0x466243b1 /* FATBINC_MAGIC */
#define SIM_FATBINC_VERSION 1          /* FATBINC_VERSION */

typedef struct simFatBinWrapper {
    int magic;                 /* SIM_FATBINC_MAGIC */
    int version;               /* SIM_FATBINC_VERSION */
    const char *data;          /* NUL-terminated PTX text */
    void *filename_or_fatbins; /* unused, NULL */
} simFatBinWrapper;

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && defined(__LP64__)
_Static_assert(offsetof(simFatBinWrapper, data) == 8, "simFatBinWrapper.data");
_Static_assert(sizeof(simFatBinWrapper) == 24, "simFatBinWrapper size");
#endif

/* ------------------------------------------------------------------ */
/* Prototypes (exported symbol names)                                  */
/* ------------------------------------------------------------------ */

/* crt/host_runtime.h: registration calls made by nvcc-generated host code */
void **CUDARTAPI __cudaRegisterFatBinary(void *fatCubin);
void CUDARTAPI __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void CUDARTAPI __cudaUnregisterFatBinary(void **fatCubinHandle);
void CUDARTAPI __cudaRegisterFunction(void **fatCubinHandle,
                                      const char *hostFun,
                                      char *deviceFun,
                                      const char *deviceName,
                                      int thread_limit,
                                      uint3 *tid,
                                      uint3 *bid,
                                      dim3 *bDim,
                                      dim3 *gDim,
                                      int *wSize);

/* cuda_runtime_api.h: execution control */
cudaError_t CUDARTAPI cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                       size_t sharedMem, cudaStream_t stream);
cudaError_t CUDARTAPI cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                            size_t sharedMem, cudaStream_t stream);
cudaError_t CUDARTAPI cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args);
cudaError_t CUDARTAPI cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func, void **args);

/* cuda_runtime_api.h: error handling */
cudaError_t CUDARTAPI cudaGetLastError(void);
const char *CUDARTAPI cudaGetErrorString(cudaError_t error);

/*
 * Simulator-only debug getter (not a CUDA API): the CUfunction the runtime
 * resolved for the host stub `stub` at __cudaRegisterFunction time, or NULL
 * for an unknown stub.  Returned as void * so that this header does not
 * depend on cuda_sim.h.  Makes no driver call.
 */
void *simCudartFunctionFor(const void *stub);

#ifdef __cplusplus
}
#endif

#endif /* GPUTRACE_CUDART_SIM_H */
