/*
 * sim_observer.h - how the simulated libcuda.so.1 reports API calls and the
 * GPU work they start to an observer (the simulated libcupti.so.13).
 *
 * Not a CUDA interface.  libcuda exports one simulator-only function,
 * sim_cuda_set_observer (symbol version libcuda.so.1); the simulated CUPTI
 * finds it with dlopen("libcuda.so.1", RTLD_NOLOAD) + dlsym.  With no
 * observer set, an observed entry point costs one atomic load and a branch.
 *
 * For each call of an observed entry point (README.md lists them), with an
 * observer set when the call begins:
 *   enter(call)          before the call does anything
 *   work(call, w)        for each piece of GPU work the call ran (none when
 *                        it failed or was captured into a graph); a graph
 *                        launch reports each kernel/memcpy/memset record of
 *                        its executable graph, in plan order
 *   exit(call, result)   after, with the call's CUresult
 * all on the calling thread, with the same `call` object.  Calls never nest
 * (no exported function calls another).
 */
#ifndef GPUTRACE_SIM_OBSERVER_H
#define GPUTRACE_SIM_OBSERVER_H

#include <stdint.h>
#include <sys/types.h>

#define SIM_OBSERVER_VERSION 1

struct sim_obs_call {
    uint32_t cbid;          /* CUPTI driver callback id (cupti_driver_cbid.h value) */
    uint32_t correlation;   /* assigned by libcuda: 1, 2, 3, ... process-wide */
    pid_t tid;              /* Linux thread id of the caller */
    uint32_t pad;
    const char *function;   /* exported name, e.g. "cuLaunchKernel_ptsz" */
    const char *symbol;     /* launches: the kernel's name, else NULL */
    void *context;          /* the calling thread's current CUcontext (may be NULL) */
    uint64_t scratch[4];    /* the observer's, between enter and exit */
};

enum sim_obs_work_kind {
    SIM_OBS_KERNEL = 1,
    SIM_OBS_MEMCPY = 2,
    SIM_OBS_MEMSET = 3,
};

/* Stream ids: a stream from cuStreamCreate has its id (positive, from the
 * simulator's id counter); NULL and CU_STREAM_LEGACY are 0;
 * CU_STREAM_PER_THREAD (and the per-thread default stream of the _ptds
 * synchronous calls) is SIM_OBS_PER_THREAD_STREAM | (tid & 0xffffff). */
#define SIM_OBS_PER_THREAD_STREAM 0x80000000u

struct sim_obs_work {
    uint32_t kind;          /* enum sim_obs_work_kind */
    uint32_t stream_id;
    uint32_t graph_id;      /* 0 unless run by a graph launch: the id of the graph the executable graph came from */
    uint32_t cooperative;   /* kernels: 1 from cuLaunchCooperativeKernel* */
    uint64_t graph_node_id; /* graph launches: (graph_id << 32) | (position in the plan + 1) */
    /* kernels */
    const char *name;
    uint32_t grid[3], block[3];
    uint32_t dynamic_shared, static_shared, registers;
    /* memcpy: CUmemorytype of each side (1 host, 2 device) and whether a
     * host side is page-locked (cuMemAllocHost_v2 / cuMemHostAlloc) */
    uint32_t src_type, dst_type, src_pinned, dst_pinned;
    uint32_t peer;          /* cuMemcpyPeer*: 1 if the two contexts differ */
    /* memcpy and memset */
    uint64_t bytes;
    /* memset */
    uint32_t value, element_size;
};

struct sim_observer {
    uint32_t version;       /* SIM_OBSERVER_VERSION */
    void (*enter)(struct sim_obs_call *call);
    void (*work)(struct sim_obs_call *call, const struct sim_obs_work *work);
    void (*exit)(struct sim_obs_call *call, int result);
};

/* Exported by the simulated libcuda.so.1.  NULL removes the observer; calls
 * already inside an entry point finish with the observer they started with
 * (which must therefore stay valid: the simulated CUPTI never frees its). */
void sim_cuda_set_observer(const struct sim_observer *observer);

#endif /* GPUTRACE_SIM_OBSERVER_H */
