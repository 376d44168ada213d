/*
 * cupti_sim.h - the subset of CUPTI 13 (CUPTI_API_VERSION 130001) that the
 * simulated libcupti.so.13 implements: the real prototypes, enum values and
 * activity-record layouts, written for the simulator (layouts checked
 * against the CUDA 13 headers: sizes and offsets asserted below).
 */
#ifndef GPUTRACE_CUPTI_SIM_H
#define GPUTRACE_CUPTI_SIM_H

#include <stddef.h>
#include <stdint.h>

#define CUPTIAPI
#define SIM_CUPTI_API_VERSION 130001

typedef enum {
    CUPTI_SUCCESS = 0,
    CUPTI_ERROR_INVALID_PARAMETER = 1,
    CUPTI_ERROR_INVALID_OPERATION = 7,
    CUPTI_ERROR_MAX_LIMIT_REACHED = 12,
    CUPTI_ERROR_NOT_INITIALIZED = 15,
    CUPTI_ERROR_INVALID_KIND = 21,
    CUPTI_ERROR_NOT_SUPPORTED = 27,
    CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39,
    CUPTI_ERROR_UNKNOWN = 999,
} CUptiResult;

typedef enum {
    CUPTI_ACTIVITY_KIND_INVALID = 0,
    CUPTI_ACTIVITY_KIND_MEMCPY = 1,
    CUPTI_ACTIVITY_KIND_MEMSET = 2,
    CUPTI_ACTIVITY_KIND_KERNEL = 3,
    CUPTI_ACTIVITY_KIND_DRIVER = 4,
    CUPTI_ACTIVITY_KIND_RUNTIME = 5,
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL = 10,
} CUpti_ActivityKind;

typedef enum {
    CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN = 0,
    CUPTI_ACTIVITY_MEMCPY_KIND_HTOD = 1,
    CUPTI_ACTIVITY_MEMCPY_KIND_DTOH = 2,
    CUPTI_ACTIVITY_MEMCPY_KIND_DTOD = 8,
    CUPTI_ACTIVITY_MEMCPY_KIND_HTOH = 9,
    CUPTI_ACTIVITY_MEMCPY_KIND_PTOP = 10,
} CUpti_ActivityMemcpyKind;

typedef enum {
    CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN = 0,
    CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE = 1,
    CUPTI_ACTIVITY_MEMORY_KIND_PINNED = 2,
    CUPTI_ACTIVITY_MEMORY_KIND_DEVICE = 3,
} CUpti_ActivityMemoryKind;

typedef enum {
    CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR = 0,
    CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE = 1,
} CUpti_ActivityLaunchType;

typedef enum {
    CUPTI_ACTIVITY_FLAG_NONE = 0,
    CUPTI_ACTIVITY_FLAG_FLUSH_FORCED = 1,
} CUpti_ActivityFlag;

typedef enum {
    CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT = 0,
    CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM = 1,
} CUpti_ActivityThreadIdType;

typedef enum {
    CUPTI_CB_DOMAIN_INVALID = 0,
    CUPTI_CB_DOMAIN_DRIVER_API = 1,
    CUPTI_CB_DOMAIN_RUNTIME_API = 2,
    CUPTI_CB_DOMAIN_SIZE = 7,
} CUpti_CallbackDomain;

typedef enum {
    CUPTI_API_ENTER = 0,
    CUPTI_API_EXIT = 1,
} CUpti_ApiCallbackSite;

typedef uint32_t CUpti_CallbackId;

/* CUpti_driver_api_trace_cbid values of the observed entry points. */
enum {
    SIM_CBID_cuMemsetD8Async = 216,
    SIM_CBID_cuMemsetD16Async = 218,
    SIM_CBID_cuMemsetD32Async = 220,
    SIM_CBID_cuMemsetD8_v2 = 249,
    SIM_CBID_cuMemsetD16_v2 = 250,
    SIM_CBID_cuMemsetD32_v2 = 251,
    SIM_CBID_cuMemcpyHtoD_v2 = 276,
    SIM_CBID_cuMemcpyHtoDAsync_v2 = 277,
    SIM_CBID_cuMemcpyDtoH_v2 = 278,
    SIM_CBID_cuMemcpyDtoHAsync_v2 = 279,
    SIM_CBID_cuMemcpyDtoD_v2 = 280,
    SIM_CBID_cuMemcpyDtoDAsync_v2 = 281,
    SIM_CBID_cuMemcpy = 305,
    SIM_CBID_cuMemcpyAsync = 306,
    SIM_CBID_cuLaunchKernel = 307,
    SIM_CBID_cuMemcpyPeer = 318,
    SIM_CBID_cuMemcpyPeerAsync = 319,
    SIM_CBID_cuMemcpyHtoD_v2_ptds = 397,
    SIM_CBID_cuMemcpyDtoH_v2_ptds = 398,
    SIM_CBID_cuMemcpyDtoD_v2_ptds = 399,
    SIM_CBID_cuMemcpy_ptds = 408,
    SIM_CBID_cuMemcpyPeer_ptds = 409,
    SIM_CBID_cuMemsetD8_v2_ptds = 411,
    SIM_CBID_cuMemsetD16_v2_ptds = 412,
    SIM_CBID_cuMemsetD32_v2_ptds = 413,
    SIM_CBID_cuMemcpyAsync_ptsz = 418,
    SIM_CBID_cuMemcpyHtoDAsync_v2_ptsz = 421,
    SIM_CBID_cuMemcpyDtoHAsync_v2_ptsz = 422,
    SIM_CBID_cuMemcpyDtoDAsync_v2_ptsz = 423,
    SIM_CBID_cuMemcpyPeerAsync_ptsz = 426,
    SIM_CBID_cuMemsetD8Async_ptsz = 428,
    SIM_CBID_cuMemsetD16Async_ptsz = 429,
    SIM_CBID_cuMemsetD32Async_ptsz = 430,
    SIM_CBID_cuLaunchKernel_ptsz = 442,
    SIM_CBID_cuLaunchCooperativeKernel = 477,
    SIM_CBID_cuLaunchCooperativeKernel_ptsz = 478,
    SIM_CBID_cuGraphLaunch = 514,
    SIM_CBID_cuGraphLaunch_ptsz = 515,
    SIM_CBID_cuLaunchKernelEx = 652,
    SIM_CBID_cuLaunchKernelEx_ptsz = 653,
    SIM_CBID_SIZE = 807, /* CUPTI_DRIVER_TRACE_CBID_SIZE of CUDA 13 */
    SIM_RUNTIME_CBID_SIZE = 523, /* CUPTI_RUNTIME_TRACE_CBID_SIZE of CUDA 13 */
};

typedef struct CUpti_Subscriber_st *CUpti_SubscriberHandle;

typedef void (CUPTIAPI *CUpti_CallbackFunc)(void *userdata, CUpti_CallbackDomain domain,
                                            CUpti_CallbackId cbid, const void *cbdata);
typedef void (CUPTIAPI *CUpti_BuffersCallbackRequestFunc)(uint8_t **buffer, size_t *size,
                                                          size_t *maxNumRecords);
typedef void (CUPTIAPI *CUpti_BuffersCallbackCompleteFunc)(void *context, uint32_t streamId,
                                                           uint8_t *buffer, size_t size,
                                                           size_t validSize);
typedef uint64_t (CUPTIAPI *CUpti_TimestampCallbackFunc)(void);

/* Data passed to a driver/runtime API callback (CUpti_CallbackData). */
typedef struct {
    CUpti_ApiCallbackSite callbackSite;   /*  0 */
    const char *functionName;             /*  8 */
    const void *functionParams;           /* 16: NULL in the simulator */
    const void *functionReturnValue;      /* 24: exit only: the CUresult */
    const char *symbolName;               /* 32 */
    void *context;                        /* 40 */
    uint32_t contextUid;                  /* 48 */
    uint64_t *correlationData;            /* 56 */
    uint32_t correlationId;               /* 64 */
} CUpti_CallbackData;
_Static_assert(sizeof(CUpti_CallbackData) == 72, "CUpti_CallbackData");
_Static_assert(offsetof(CUpti_CallbackData, correlationId) == 64, "CUpti_CallbackData.correlationId");

#define SIM_CUPTI_RECORD __attribute__((packed, aligned(8)))

typedef struct SIM_CUPTI_RECORD {
    CUpti_ActivityKind kind;
} CUpti_Activity;

/* CUPTI_ACTIVITY_KIND_KERNEL / CONCURRENT_KERNEL */
typedef struct SIM_CUPTI_RECORD {
    CUpti_ActivityKind kind;              /*   0 */
    uint8_t cacheConfig;                  /*   4 */
    uint8_t sharedMemoryConfig;           /*   5 */
    uint16_t registersPerThread;          /*   6 */
    uint8_t partitionedGlobalCacheRequested[4]; /*   8 (enum) */
    uint8_t partitionedGlobalCacheExecuted[4];  /*  12 (enum) */
    uint64_t start, end, completed;       /*  16, 24, 32 */
    uint32_t deviceId, contextId, streamId; /* 40, 44, 48 */
    int32_t gridX, gridY, gridZ;          /*  52 */
    int32_t blockX, blockY, blockZ;       /*  64 */
    int32_t staticSharedMemory;           /*  76 */
    int32_t dynamicSharedMemory;          /*  80 */
    uint32_t localMemoryPerThread;        /*  84 */
    uint32_t localMemoryTotal;            /*  88 */
    uint32_t correlationId;               /*  92 */
    int64_t gridId;                       /*  96 */
    const char *name;                     /* 104 */
    void *reserved0;                      /* 112 */
    uint64_t queued, submitted;           /* 120, 128 */
    uint8_t launchType;                   /* 136 */
    uint8_t isSharedMemoryCarveoutRequested;
    uint8_t sharedMemoryCarveoutRequested;
    uint8_t padding;
    uint32_t sharedMemoryExecuted;        /* 140 */
    uint64_t graphNodeId;                 /* 144 */
    uint32_t shmemLimitConfig;            /* 152 (enum) */
    uint32_t graphId;                     /* 156 */
    void *pAccessPolicyWindow;            /* 160 */
    uint32_t channelID;                   /* 168 */
    uint32_t channelType;                 /* 172 (enum) */
    uint32_t clusterX, clusterY, clusterZ;/* 176 */
    uint32_t clusterSchedulingPolicy;     /* 188 */
    uint64_t localMemoryTotal_v2;         /* 192 */
    uint32_t maxPotentialClusterSize;     /* 200 */
    uint32_t maxActiveClusters;           /* 204 */
    uint8_t isDeviceLaunched;             /* 208 */
    uint8_t padding3[7];
} CUpti_ActivityKernel10;
_Static_assert(sizeof(CUpti_ActivityKernel10) == 216, "CUpti_ActivityKernel10");
_Static_assert(offsetof(CUpti_ActivityKernel10, correlationId) == 92, "Kernel10.correlationId");
_Static_assert(offsetof(CUpti_ActivityKernel10, name) == 104, "Kernel10.name");
_Static_assert(offsetof(CUpti_ActivityKernel10, launchType) == 136, "Kernel10.launchType");
_Static_assert(offsetof(CUpti_ActivityKernel10, graphNodeId) == 144, "Kernel10.graphNodeId");
_Static_assert(offsetof(CUpti_ActivityKernel10, graphId) == 156, "Kernel10.graphId");
_Static_assert(offsetof(CUpti_ActivityKernel10, isDeviceLaunched) == 208, "Kernel10.isDeviceLaunched");

/* CUPTI_ACTIVITY_KIND_MEMCPY */
typedef struct SIM_CUPTI_RECORD {
    CUpti_ActivityKind kind;              /*  0 */
    uint8_t copyKind, srcKind, dstKind, flags; /* 4 */
    uint64_t bytes;                       /*  8 */
    uint64_t start, end;                  /* 16, 24 */
    uint32_t deviceId, contextId, streamId, correlationId; /* 32 */
    uint32_t runtimeCorrelationId;        /* 48 */
    uint32_t pad;                         /* 52 */
    void *reserved0;                      /* 56 */
    uint64_t graphNodeId;                 /* 64 */
    uint32_t graphId;                     /* 72 */
    uint32_t channelID;                   /* 76 */
    uint32_t channelType;                 /* 80 */
    uint8_t isDeviceLaunched;             /* 84 */
    uint8_t pad2[3];
    uint64_t copyCount;                   /* 88 */
} CUpti_ActivityMemcpy6;
_Static_assert(sizeof(CUpti_ActivityMemcpy6) == 96, "CUpti_ActivityMemcpy6");
_Static_assert(offsetof(CUpti_ActivityMemcpy6, correlationId) == 44, "Memcpy6.correlationId");
_Static_assert(offsetof(CUpti_ActivityMemcpy6, graphNodeId) == 64, "Memcpy6.graphNodeId");
_Static_assert(offsetof(CUpti_ActivityMemcpy6, copyCount) == 88, "Memcpy6.copyCount");

/* CUPTI_ACTIVITY_KIND_MEMSET */
typedef struct SIM_CUPTI_RECORD {
    CUpti_ActivityKind kind;              /*  0 */
    uint32_t value;                       /*  4 */
    uint64_t bytes;                       /*  8 */
    uint64_t start, end;                  /* 16, 24 */
    uint32_t deviceId, contextId, streamId, correlationId; /* 32 */
    uint16_t flags;                       /* 48 */
    uint16_t memoryKind;                  /* 50 */
    uint32_t pad;                         /* 52 */
    void *reserved0;                      /* 56 */
    uint64_t graphNodeId;                 /* 64 */
    uint32_t graphId;                     /* 72 */
    uint32_t channelID;                   /* 76 */
    uint32_t channelType;                 /* 80 */
    uint8_t isDeviceLaunched;             /* 84 */
    uint8_t pad2[3];
} CUpti_ActivityMemset4;
_Static_assert(sizeof(CUpti_ActivityMemset4) == 88, "CUpti_ActivityMemset4");
_Static_assert(offsetof(CUpti_ActivityMemset4, memoryKind) == 50, "Memset4.memoryKind");
_Static_assert(offsetof(CUpti_ActivityMemset4, graphId) == 72, "Memset4.graphId");

/* CUPTI_ACTIVITY_KIND_DRIVER / RUNTIME */
typedef struct SIM_CUPTI_RECORD {
    CUpti_ActivityKind kind;              /*  0 */
    CUpti_CallbackId cbid;                /*  4 */
    uint64_t start, end;                  /*  8, 16 */
    uint32_t processId, threadId;         /* 24, 28 */
    uint32_t correlationId;               /* 32 */
    uint32_t returnValue;                 /* 36 */
} CUpti_ActivityAPI;
_Static_assert(sizeof(CUpti_ActivityAPI) == 40, "CUpti_ActivityAPI");

CUptiResult CUPTIAPI cuptiGetVersion(uint32_t *version);
CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char **str);
CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
                                    void *userdata);
CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle subscriber);
CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                         CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
CUptiResult CUPTIAPI cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                       CUpti_CallbackDomain domain);
CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc funcBufferRequested,
                                                    CUpti_BuffersCallbackCompleteFunc funcBufferCompleted);
CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc funcTimestamp);
CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind);
CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind);
CUptiResult CUPTIAPI cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t enable);
CUptiResult CUPTIAPI cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable);
CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag);
CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t *buffer, size_t validBufferSizeBytes,
                                                CUpti_Activity **record);
CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(void *context, uint32_t streamId, size_t *dropped);
CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t *timestamp);
CUptiResult CUPTIAPI cuptiSetThreadIdType(CUpti_ActivityThreadIdType type);
CUptiResult CUPTIAPI cuptiGetThreadIdType(CUpti_ActivityThreadIdType *type);
CUptiResult CUPTIAPI cuptiFinalize(void);

/* ---- simulator only (not CUPTI) ---- */

/* Where cuptiFinalize was last called from. */
enum sim_cupti_site {
    SIM_CUPTI_SITE_NONE = 0,       /* never called */
    SIM_CUPTI_SITE_OUTSIDE = 1,    /* not from inside a CUPTI callback */
    SIM_CUPTI_SITE_API_ENTER = 2,  /* from an API callback at CUPTI_API_ENTER */
    SIM_CUPTI_SITE_API_EXIT = 3,   /* from an API callback at CUPTI_API_EXIT */
    SIM_CUPTI_SITE_BUFFER = 4,     /* from a buffer callback */
};

struct sim_cupti_state {
    uint32_t subscribed;           /* a subscriber exists now */
    uint32_t subscribes;           /* successful cuptiSubscribe calls */
    uint32_t refused_subscribes;   /* CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED returned */
    uint32_t finalizes;            /* cuptiFinalize calls */
    uint32_t finalize_site;        /* enum sim_cupti_site of the last one */
    uint32_t observing;            /* the observer is installed in libcuda */
    uint32_t kinds;                /* bit k: activity kind k enabled */
    uint32_t timestamp_callback;   /* a timestamp callback is registered */
    uint64_t records;              /* activity records written into client buffers */
    uint64_t dropped;              /* records dropped (no buffer), ever */
    uint64_t buffers_completed;    /* buffers handed back to the client */
};

/* Fills *out; returns 0. */
int sim_cupti_get_state(struct sim_cupti_state *out);

#endif /* GPUTRACE_CUPTI_SIM_H */
