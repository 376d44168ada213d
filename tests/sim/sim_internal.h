/*
 * sim_internal.h - what the files of the simulated libcuda.so.1 (cuda.c,
 * capture.c, graph.c, exec.c) share.  Nothing here is exported: the version
 * script (libcuda.map) makes every symbol local except the cu* entry points
 * and the two simulator-only getters, and SIM_HIDDEN keeps these helpers out
 * of the dynamic symbol table even before the version script applies.
 */
#ifndef GPUTRACE_SIM_INTERNAL_H
#define GPUTRACE_SIM_INTERNAL_H

#include "cuda_sim.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_HIDDEN __attribute__((visibility("hidden")))
#define UNUSED(x) ((void)(x))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ------------------------------------------------------------------ */
/* Handle magics                                                       */
/* ------------------------------------------------------------------ */

#define MAGIC_FUNC    0x434e5546434d4953ULL /* "SIMCFUNC" */
#define MAGIC_KERNEL  0x4e52454b434d4953ULL /* "SIMCKERN" */
#define MAGIC_MODULE  0x444f4d43434d4953ULL /* "SIMCCMOD" */
#define MAGIC_LIBRARY 0x42494c43434d4953ULL /* "SIMCCLIB" */
#define MAGIC_CTX     0x58544343434d4953ULL /* "SIMCCCTX" */
#define MAGIC_STREAM  0x4d525453434d4953ULL /* "SIMCSTRM" */
#define MAGIC_EVENT   0x544e5645434d4953ULL /* "SIMCEVNT" */
#define MAGIC_GRAPH   0x48505247434d4953ULL /* "SIMCGRPH" */
#define MAGIC_GNODE   0x444f4e47434d4953ULL /* "SIMCGNOD" */
#define MAGIC_GEXEC   0x43455847434d4953ULL /* "SIMCGXEC" */
#define MAGIC_PLAN    0x4e414c50434d4953ULL /* "SIMCPLAN" */
#define MAGIC_CAPTURE 0x50414343434d4953ULL /* "SIMCCCAP" */
#define MAGIC_DEAD    0x44414544434d4953ULL /* "SIMCDEAD" */

/* ------------------------------------------------------------------ */
/* Functions, kernels, modules, contexts                               */
/* ------------------------------------------------------------------ */

enum func_kind {
    FUNC_KIND_MODULE_FUNCTION = 1, /* from cuModuleGetFunction */
    FUNC_KIND_LIBRARY_KERNEL  = 2, /* CUkernel from cuLibraryGetKernel */
    FUNC_KIND_KERNEL_FUNCTION = 3, /* CUfunction from cuKernelGetFunction */
};

/*
 * CUfunction.  The kernel name pointer deliberately does NOT sit at offset 8:
 * it is at offset 40, after a magic, the owning module and a few 32-bit
 * attributes.  The name string is owned by the module/library.
 */
struct CUfunc_st {
    uint64_t magic;                 /*  0 */
    void *owner;                    /*  8: struct sim_image * */
    uint32_t index;                 /* 16: entry index in the image */
    uint32_t kind;                  /* 20: enum func_kind */
    uint32_t num_regs;              /* 24 */
    uint32_t max_threads_per_block; /* 28 */
    uint32_t shared_size_bytes;     /* 32 */
    uint32_t ptx_version;           /* 36 */
    const char *name;               /* 40 */
    struct CUfunc_st *function;     /* 48: for a CUkernel, its CUfunction */
};
_Static_assert(offsetof(struct CUfunc_st, name) == 40, "CUfunc_st.name must be at offset 40");

/* CUkernel: same layout as CUfunction (name at offset 40 too). */
struct CUkern_st {
    struct CUfunc_st f;
};
_Static_assert(offsetof(struct CUkern_st, f.name) == 40, "CUkern_st name must be at offset 40");

/* Common representation of a loaded module (CUmodule) or library (CUlibrary). */
struct sim_image {
    uint64_t magic;
    unsigned count;
    char **names;                 /* malloc'd copies, owned here */
    struct CUfunc_st **funcs;     /* module: functions; library: kernel functions */
    struct CUkern_st **kernels;   /* library only */
};
struct CUmod_st { struct sim_image img; };
struct CUlib_st { struct sim_image img; };

struct CUctx_st {
    uint64_t magic;
    CUdevice dev;
    unsigned int flags;
    int primary;
};

/* ------------------------------------------------------------------ */
/* Streams and events, with their stream-capture state                 */
/* ------------------------------------------------------------------ */

/* A set of graph nodes: what the next captured node will depend on. */
struct sim_nodeset {
    CUgraphNode *nodes;
    size_t n, cap;
};

struct sim_capture;

struct CUstream_st {
    uint64_t magic;
    unsigned int flags;
    unsigned int id;
    struct sim_capture *cap;   /* the capture sequence this stream takes part in, or NULL */
    struct sim_nodeset deps;   /* while capturing: the stream's current dependencies */
    CUgraphEdgeData *edge_data; /* zeroed, deps.n entries, for cuStreamGetCaptureInfo_v3 */
};

struct CUevent_st {
    uint64_t magic;
    unsigned int flags;
    unsigned int id;
    uint64_t cap_id;           /* capture sequence it was last recorded in (0: none) */
    struct sim_nodeset deps;   /* the recording stream's dependencies at the record */
};

/* ------------------------------------------------------------------ */
/* Shared state and helpers (cuda.c)                                   */
/* ------------------------------------------------------------------ */

extern SIM_HIDDEN pthread_mutex_t g_lock;
extern SIM_HIDDEN int g_initialized;          /* accessed with __atomic builtins */
extern SIM_HIDDEN unsigned int g_next_id;     /* stream/event/graph ids (under g_lock) */

static inline int initialized(void)
{
    return __atomic_load_n(&g_initialized, __ATOMIC_ACQUIRE);
}

#define REQUIRE_INIT()                                                  \
    do {                                                                \
        if (UNLIKELY(!initialized())) return CUDA_ERROR_NOT_INITIALIZED; \
    } while (0)

static inline int stream_is_special(CUstream s)
{
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

static inline int stream_ok(CUstream s)
{
    return stream_is_special(s) || s->magic == MAGIC_STREAM;
}

/* A real stream that is part of a capture sequence.  Cheap: launches call it. */
static inline int stream_capturing(CUstream s)
{
    return !stream_is_special(s) && s->magic == MAGIC_STREAM && s->cap != NULL;
}

static inline int ctx_ok(CUcontext c)
{
    return c != NULL && c->magic == MAGIC_CTX;
}

static inline int event_ok(CUevent e)
{
    return e != NULL && e->magic == MAGIC_EVENT;
}

/* A fresh id for a stream, event, graph or capture sequence. */
SIM_HIDDEN unsigned int sim_next_id(void);

/* CU_MEMORYTYPE_DEVICE if addr lies inside a live device-style allocation,
 * CU_MEMORYTYPE_HOST otherwise (how the simulator types a unified copy). */
SIM_HIDDEN CUmemorytype sim_memory_type(uint64_t addr);

/* ------------------------------------------------------------------ */
/* Stream capture (capture.c)                                          */
/* ------------------------------------------------------------------ */

/* What a captured operation becomes; filled by the caller. */
struct sim_captured_kernel {
    CUfunction func;
    CUkernel kern;
    unsigned int grid[3], block[3], shmem;
    void **params;
};

/* Records an operation issued to a capturing stream as a node of the
 * capture graph (not executed).  Return CUDA_SUCCESS or the capture error. */
SIM_HIDDEN CUresult sim_capture_kernel(CUstream s, const struct sim_captured_kernel *k);
SIM_HIDDEN CUresult sim_capture_memcpy(CUstream s, const CUDA_MEMCPY3D *p);
SIM_HIDDEN CUresult sim_capture_memset(CUstream s, CUdeviceptr dst, unsigned int value,
                                       unsigned int elem, size_t n);
/* cuEventRecord / cuStreamWaitEvent on capture-aware paths. */
SIM_HIDDEN CUresult sim_capture_event_record(CUevent e, CUstream s);
SIM_HIDDEN CUresult sim_capture_stream_wait(CUstream s, CUevent e, unsigned int flags);
/* Synchronising a capturing stream is not allowed: it invalidates the capture. */
SIM_HIDDEN CUresult sim_capture_sync_stream(CUstream s);
/* An event last recorded in a live capture cannot be waited on by the host. */
SIM_HIDDEN int sim_capture_event_live(CUevent e);
/* Drops a destroyed event's captured dependencies. */
SIM_HIDDEN void sim_capture_event_destroy(CUevent e);
/* Is g the graph of a live capture sequence?  Under g_graph_lock. */
SIM_HIDDEN int sim_capture_uses_graph(CUgraph g);

/* ------------------------------------------------------------------ */
/* Graphs (graph.c) used by capture.c and exec.c                       */
/* ------------------------------------------------------------------ */

struct CUgraphNode_st {
    uint64_t magic;
    CUgraphNodeType type;
    unsigned int index;        /* creation number within its graph */
    CUgraph graph;
    struct sim_nodeset deps;
    union {
        struct sim_captured_kernel kernel;
        CUDA_MEMCPY3D copy;
        CUDA_MEMSET_NODE_PARAMS_v1 memset;
        CUgraph child;         /* GRAPH: the node's own graph (a clone, or moved in) */
        CUevent event;         /* EVENT_RECORD / WAIT_EVENT */
    } u;
};

struct CUgraph_st {
    uint64_t magic;
    unsigned int flags;
    unsigned int id;
    CUgraphNode *nodes;        /* creation order, which is a topological order */
    size_t n, cap;
    int owned_by_node;         /* a child graph: destroyed with its node, not by cuGraphDestroy */
};

static inline uint64_t sim_memcpy_bytes(const CUDA_MEMCPY3D *p)
{
    return (uint64_t)p->WidthInBytes * (p->Height ? p->Height : 1) * (p->Depth ? p->Depth : 1);
}

static inline uint64_t sim_memset_bytes(const CUDA_MEMSET_NODE_PARAMS_v1 *p)
{
    return (uint64_t)p->elementSize * p->width * (p->height ? p->height : 1);
}

/* The graph lock guards every graph, node, executable graph, capture
 * sequence and the graph statistics. */
extern SIM_HIDDEN pthread_mutex_t g_graph_lock;

SIM_HIDDEN int sim_nodeset_add(struct sim_nodeset *s, CUgraphNode n);
SIM_HIDDEN int sim_nodeset_copy(struct sim_nodeset *dst, const struct sim_nodeset *src);
SIM_HIDDEN void sim_nodeset_free(struct sim_nodeset *s);

/* Under g_graph_lock. */
SIM_HIDDEN CUgraph sim_graph_new(void);
SIM_HIDDEN void sim_graph_free(CUgraph g);
SIM_HIDDEN int sim_graph_ok(CUgraph g);
SIM_HIDDEN int sim_node_ok(CUgraphNode n);
/* A node of type `type` in g depending on deps[0..ndeps); NULL on OOM. */
SIM_HIDDEN CUgraphNode sim_node_add(CUgraph g, CUgraphNodeType type, const CUgraphNode *deps, size_t ndeps);
SIM_HIDDEN void sim_node_set_kernel(CUgraphNode n, const struct sim_captured_kernel *k);

/* Per kernel name: runs through graph launches, launches captured. */
struct sim_kstat {
    char *name;
    uint64_t graph_runs;
    uint64_t captured;
    struct sim_kstat *next;
};
SIM_HIDDEN struct sim_kstat *sim_kstat_for(const char *name);
SIM_HIDDEN const char *sim_kernel_name(CUfunction f, CUkernel k);

struct sim_graph_counters {
    uint64_t graph_launches, kernels_run, copies_run, copy_bytes_run, memsets_run, memset_bytes_run;
    uint64_t captured_launches, captured_copies, captured_memsets;
};
extern SIM_HIDDEN struct sim_graph_counters g_graph_counters;

/* ------------------------------------------------------------------ */
/* The observer (observe.c): what the simulated CUPTI sees             */
/* ------------------------------------------------------------------ */

#include "sim_observer.h"
#include "cupti_sim.h" /* SIM_CBID_* values */

extern SIM_HIDDEN const struct sim_observer *g_observer; /* __atomic builtins */

static inline const struct sim_observer *sim_observer(void)
{
    return __atomic_load_n(&g_observer, __ATOMIC_ACQUIRE);
}

/* The calling thread's current context (cuda.c). */
SIM_HIDDEN CUcontext sim_current_ctx(void);
/* Is addr inside a page-locked host allocation?  (cuda.c) */
SIM_HIDDEN int sim_host_pinned(uint64_t addr);
/* A launch's kernel name, or NULL (checks the handle's magic). */
SIM_HIDDEN const char *sim_func_name(CUfunction f);
/* Fills *c and calls o->enter. */
SIM_HIDDEN void sim_obs_begin(const struct sim_observer *o, struct sim_obs_call *c, uint32_t cbid,
                              const char *function, const char *symbol);
SIM_HIDDEN uint32_t sim_obs_stream_id(CUstream s, pid_t tid);
SIM_HIDDEN void sim_obs_kernel(const struct sim_observer *o, struct sim_obs_call *c, CUfunction f,
                               unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shmem, CUstream s, int cooperative);
/* dt/st: CUmemorytype, or 0 to infer from the address (sim_memory_type). */
SIM_HIDDEN void sim_obs_copy(const struct sim_observer *o, struct sim_obs_call *c, CUmemorytype dt, uint64_t dst,
                             CUmemorytype st, uint64_t src, size_t n, CUstream s, int peer);
SIM_HIDDEN void sim_obs_memset(const struct sim_observer *o, struct sim_obs_call *c, unsigned value,
                               unsigned elem, size_t n, CUstream s);

/*
 * The body of an observed entry point: `return CALL;` when no observer is
 * set; otherwise enter, CALL, WORK (a statement using o_ and c_; only when
 * CALL succeeded and STREAM was not capturing), exit.
 */
#define SIM_OBSERVED(CBID, SYMBOL, STREAM, CALL, WORK)                      \
    do {                                                                  \
        const struct sim_observer *o_ = sim_observer();                   \
        if (LIKELY(o_ == NULL)) return (CALL);                            \
        struct sim_obs_call c_;                                           \
        sim_obs_begin(o_, &c_, (CBID), __func__, (SYMBOL));               \
        const int runs_ = !stream_capturing(STREAM);                      \
        const CUresult r_ = (CALL);                                       \
        if (r_ == CUDA_SUCCESS && runs_) { WORK; }                        \
        o_->exit(&c_, (int)r_);                                           \
        return r_;                                                        \
    } while (0)

#endif /* GPUTRACE_SIM_INTERNAL_H */
