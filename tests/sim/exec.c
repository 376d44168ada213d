/*
 * exec.c - executable graphs (CUgraphExec) for the simulated libcuda.so.1:
 * instantiation, whole-graph update, per-node updates, upload, launch,
 * destruction.
 *
 * The memory an executable graph keeps is laid out on purpose unlike the
 * real driver's (whatever that is), so that gputrace's calibration, which
 * finds the layout per libcuda build, is tested against one it was not
 * written for.  README.md documents it:
 *
 *   CUgraphExec ──(+32)──▶ plan ──(+24)──▶ record ──(+112)──▶ record ─▶ … ─▶ NULL
 *                           +12: number of records
 *
 * One record per node of the instantiated graph, child graphs flattened in
 * place, in the graph's creation order.
 */
#define _GNU_SOURCE
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>

/* Record kinds: deliberately not the CUgraphNodeType values. */
enum sim_rec_kind {
    SIM_REC_KERNEL       = 0x11,
    SIM_REC_MEMCPY       = 0x12,
    SIM_REC_MEMSET       = 0x13,
    SIM_REC_EMPTY        = 0x14,
    SIM_REC_EVENT_RECORD = 0x15,
    SIM_REC_EVENT_WAIT   = 0x16,
};

struct sim_rec {
    uint32_t kind;              /*   0: enum sim_rec_kind */
    uint32_t index;             /*   4: position in the plan */
    CUgraphNode origin;         /*   8: the node it was instantiated from */
    uint32_t block[3];          /*  16 */
    uint32_t shmem;             /*  28 */
    uint32_t grid[3];           /*  32 */
    uint32_t pad;               /*  44 */
    CUfunction func;            /*  48: for a CUkernel node, the kernel's CUfunction */
    CUkernel kern;              /*  56: the CUkernel, or NULL */
    void **params;              /*  64 */
    union {                     /*  72: copies and memsets */
        struct { uint64_t dst, src, bytes; uint32_t dst_type, src_type; } copy;
        struct { uint64_t dst, bytes; uint32_t value, elem; } set;
        CUevent event;
    } u;
    CUgraphNode owner;          /* 104: the top-level node (a child-graph node for its graph's records) */
    struct sim_rec *next;       /* 112 */
    struct sim_kstat *stat;     /* 120: kernels: statistics for the kernel's name */
};
_Static_assert(offsetof(struct sim_rec, grid) == 32, "sim_rec.grid");
_Static_assert(offsetof(struct sim_rec, func) == 48, "sim_rec.func");
_Static_assert(offsetof(struct sim_rec, next) == 112, "sim_rec.next");

struct sim_plan {
    uint64_t magic;             /*   0: "SIMCPLAN" */
    uint32_t generation;        /*   8: bumped by cuGraphExecUpdate */
    uint32_t nrec;              /*  12 */
    uint32_t nkernels;          /*  16 */
    uint32_t reserved;          /*  20 */
    struct sim_rec *head;       /*  24 */
    struct sim_rec *tail;       /*  32 */
};
_Static_assert(offsetof(struct sim_plan, nrec) == 12, "sim_plan.nrec");
_Static_assert(offsetof(struct sim_plan, head) == 24, "sim_plan.head");

struct CUgraphExec_st {
    uint64_t magic;             /*   0: "SIMCGXEC" */
    uint64_t flags;             /*   8: instantiation flags */
    uint32_t graph_id;          /*  16: the graph it was instantiated from */
    uint32_t generation;        /*  20 */
    uint64_t launches;          /*  24 */
    struct sim_plan *plan;      /*  32 */
    uint64_t uploads;           /*  40 */
};
_Static_assert(offsetof(struct CUgraphExec_st, plan) == 32, "CUgraphExec_st.plan");

/* ------------------------------------------------------------------ */
/* Plans                                                               */
/* ------------------------------------------------------------------ */

static void plan_free(struct sim_plan *p)
{
    if (!p) return;
    for (struct sim_rec *r = p->head, *next; r; r = next) {
        next = r->next;
        free(r);
    }
    p->magic = MAGIC_DEAD;
    free(p);
}

static void rec_set_kernel(struct sim_rec *r, const struct sim_captured_kernel *k)
{
    r->func = k->func ? k->func : k->kern->f.function;
    r->kern = k->kern;
    memcpy(r->grid, k->grid, sizeof(r->grid));
    memcpy(r->block, k->block, sizeof(r->block));
    r->shmem = k->shmem;
    r->params = k->params;
    const char *name = sim_kernel_name(k->func, k->kern);
    r->stat = name ? sim_kstat_for(name) : NULL;
}

static void rec_set_copy(struct sim_rec *r, const CUDA_MEMCPY3D *c)
{
    r->u.copy.dst = c->dstMemoryType == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)c->dstHost : c->dstDevice;
    r->u.copy.src = c->srcMemoryType == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)c->srcHost : c->srcDevice;
    r->u.copy.bytes = sim_memcpy_bytes(c);
    r->u.copy.dst_type = c->dstMemoryType;
    r->u.copy.src_type = c->srcMemoryType;
}

static void rec_set_memset(struct sim_rec *r, const CUDA_MEMSET_NODE_PARAMS_v1 *m)
{
    r->u.set.dst = m->dst;
    r->u.set.bytes = sim_memset_bytes(m);
    r->u.set.value = m->value;
    r->u.set.elem = m->elementSize;
}

static int plan_append(struct sim_plan *p, CUgraphNode n, CUgraphNode owner)
{
    struct sim_rec *r = calloc(1, sizeof(*r));
    if (!r) return -1;
    r->index = p->nrec;
    r->origin = n;
    r->owner = owner;
    switch (n->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        r->kind = SIM_REC_KERNEL;
        rec_set_kernel(r, &n->u.kernel);
        p->nkernels++;
        break;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        r->kind = SIM_REC_MEMCPY;
        rec_set_copy(r, &n->u.copy);
        break;
    case CU_GRAPH_NODE_TYPE_MEMSET:
        r->kind = SIM_REC_MEMSET;
        rec_set_memset(r, &n->u.memset);
        break;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        r->kind = SIM_REC_EVENT_RECORD;
        r->u.event = n->u.event;
        break;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        r->kind = SIM_REC_EVENT_WAIT;
        r->u.event = n->u.event;
        break;
    default:
        r->kind = SIM_REC_EMPTY;
        break;
    }
    if (p->tail) p->tail->next = r;
    else p->head = r;
    p->tail = r;
    p->nrec++;
    return 0;
}

/* Child graphs are flattened: their records take the child node's place. */
static int plan_add_graph(struct sim_plan *p, CUgraph g, CUgraphNode owner)
{
    for (size_t i = 0; i < g->n; i++) {
        CUgraphNode n = g->nodes[i];
        int rc = n->type == CU_GRAPH_NODE_TYPE_GRAPH ? plan_add_graph(p, n->u.child, owner ? owner : n)
                                                     : plan_append(p, n, owner ? owner : n);
        if (rc != 0) return rc;
    }
    return 0;
}

static struct sim_plan *plan_build(CUgraph g)
{
    struct sim_plan *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    p->magic = MAGIC_PLAN;
    if (plan_add_graph(p, g, NULL) != 0) {
        plan_free(p);
        return NULL;
    }
    return p;
}

static int exec_ok(CUgraphExec e)
{
    return e != NULL && e->magic == MAGIC_GEXEC;
}

/* ------------------------------------------------------------------ */
/* Instantiation                                                       */
/* ------------------------------------------------------------------ */

#define KNOWN_INSTANTIATE_FLAGS                                                                   \
    (CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |     \
     CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY)

static CUresult instantiate_impl(CUgraphExec *ph, CUgraph g, unsigned long long flags, CUstream upload)
{
    REQUIRE_INIT();
    if (ph == NULL || (flags & ~(unsigned long long)KNOWN_INSTANTIATE_FLAGS)) return CUDA_ERROR_INVALID_VALUE;
    if ((flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) && !stream_ok(upload)) return CUDA_ERROR_INVALID_HANDLE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    if (!sim_graph_ok(g)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (sim_capture_uses_graph(g)) {
        rc = CUDA_ERROR_ILLEGAL_STATE;
    } else {
        struct CUgraphExec_st *e = calloc(1, sizeof(*e));
        struct sim_plan *p = plan_build(g);
        if (!e || !p) {
            free(e);
            plan_free(p);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            e->magic = MAGIC_GEXEC;
            e->flags = flags;
            e->graph_id = g->id;
            e->plan = p;
            e->uploads = (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) ? 1 : 0;
            *ph = e;
        }
    }
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

/* The CUDA 10/11 entry points: no flags, an error node and a log buffer. */
static CUresult instantiate_legacy(CUgraphExec *ph, CUgraph g, CUgraphNode *err, char *log, size_t size)
{
    if (err) *err = NULL;
    if (log && size) log[0] = '\0';
    return instantiate_impl(ph, g, 0, NULL);
}

CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                    char *logBuffer, size_t bufferSize)
{
    return instantiate_legacy(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                       char *logBuffer, size_t bufferSize)
{
    return instantiate_legacy(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
    /* Uploading at instantiation needs a stream: only WithParams has one. */
    if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return instantiate_impl(phGraphExec, hGraph, flags, NULL);
}

static CUresult instantiate_params(CUgraphExec *ph, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    if (p == NULL) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = instantiate_impl(ph, g, p->flags, p->hUploadStream);
    p->hErrNode_out = NULL;
    p->result_out = rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    return rc;
}

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    return instantiate_params(phGraphExec, hGraph, instantiateParams);
}

CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    return instantiate_params(phGraphExec, hGraph, instantiateParams);
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    REQUIRE_INIT();
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    if (!exec_ok(hGraphExec)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        plan_free(hGraphExec->plan);
        hGraphExec->magic = MAGIC_DEAD;
        free(hGraphExec);
    }
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Whole-graph update                                                  */
/* ------------------------------------------------------------------ */

/*
 * Nodes are paired by position in creation order (the real driver pairs by
 * topology); the executable graph gets a new plan with the new parameters,
 * so its records move in memory, and keeps answering to the nodes it was
 * instantiated from.
 */
static CUresult update_impl(CUgraphExec e, CUgraph g, CUgraphExecUpdateResult *result, CUgraphNode *err_node)
{
    REQUIRE_INIT();
    *result = CU_GRAPH_EXEC_UPDATE_ERROR;
    *err_node = NULL;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    struct sim_plan *p = NULL;
    if (!exec_ok(e) || !sim_graph_ok(g)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if ((p = plan_build(g)) == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (p->nrec != e->plan->nrec) {
        *result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
        rc = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    } else {
        for (struct sim_rec *n = p->head, *o = e->plan->head; n && rc == CUDA_SUCCESS; n = n->next, o = o->next) {
            if (n->kind != o->kind) {
                *result = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
                *err_node = n->origin;
                rc = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
            }
        }
    }
    if (rc == CUDA_SUCCESS) {
        for (struct sim_rec *n = p->head, *o = e->plan->head; n; n = n->next, o = o->next) {
            n->origin = o->origin;
            n->owner = o->owner;
        }
        p->generation = e->plan->generation + 1;
        plan_free(e->plan);
        e->plan = p;
        e->generation = p->generation;
        *result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    } else {
        plan_free(p);
    }
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

CUresult CUDAAPI cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out,
                                   CUgraphExecUpdateResult *updateResult_out)
{
    if (hErrorNode_out == NULL || updateResult_out == NULL)
        return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return update_impl(hGraphExec, hGraph, updateResult_out, hErrorNode_out);
}

CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo)
{
    if (resultInfo == NULL) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    resultInfo->errorFromNode = NULL;
    return update_impl(hGraphExec, hGraph, &resultInfo->result, &resultInfo->errorNode);
}

/* ------------------------------------------------------------------ */
/* Per-node updates                                                    */
/* ------------------------------------------------------------------ */

/* The record of a top-level node, if it has that kind.  Under the lock. */
static struct sim_rec *rec_of(CUgraphExec e, CUgraphNode n, uint32_t kind)
{
    if (!exec_ok(e) || !sim_node_ok(n)) return NULL;
    for (struct sim_rec *r = e->plan->head; r; r = r->next)
        if (r->origin == n && r->owner == n) return r->kind == kind ? r : NULL;
    return NULL;
}

static CUresult exec_set_kernel(CUgraphExec e, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS_v2 *p)
{
    REQUIRE_INIT();
    if (p == NULL || (p->func == NULL && p->kern == NULL)) return CUDA_ERROR_INVALID_VALUE;
    if (p->func ? p->func->magic != MAGIC_FUNC : p->kern->f.magic != MAGIC_KERNEL) return CUDA_ERROR_INVALID_HANDLE;
    if (!p->gridDimX || !p->gridDimY || !p->gridDimZ || !p->blockDimX || !p->blockDimY || !p->blockDimZ)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_captured_kernel k = {
        p->func, p->func ? NULL : p->kern,
        { p->gridDimX, p->gridDimY, p->gridDimZ },
        { p->blockDimX, p->blockDimY, p->blockDimZ },
        p->sharedMemBytes, p->kernelParams,
    };
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    struct sim_rec *r = rec_of(e, n, SIM_REC_KERNEL);
    if (r) rec_set_kernel(r, &k);
    else rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    if (nodeParams == NULL) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUDA_KERNEL_NODE_PARAMS_v2 v2;
    memset(&v2, 0, sizeof(v2));
    memcpy(&v2, nodeParams, sizeof(*nodeParams));
    if (v2.func == NULL) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return exec_set_kernel(hGraphExec, hNode, &v2);
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams)
{
    return exec_set_kernel(hGraphExec, hNode, nodeParams);
}

static CUresult exec_set_copy(CUgraphExec e, CUgraphNode n, const CUDA_MEMCPY3D *c, CUcontext ctx)
{
    REQUIRE_INIT();
    if (c == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (!ctx_ok(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    struct sim_rec *r = rec_of(e, n, SIM_REC_MEMCPY);
    /* The memory types may not change (cuda.h, cuGraphExecMemcpyNodeSetParams). */
    if (r && r->u.copy.dst_type == (uint32_t)c->dstMemoryType && r->u.copy.src_type == (uint32_t)c->srcMemoryType)
        rec_set_copy(r, c);
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    return exec_set_copy(hGraphExec, hNode, copyParams, ctx);
}

static CUresult exec_set_memset(CUgraphExec e, CUgraphNode n, const CUDA_MEMSET_NODE_PARAMS_v1 *m, CUcontext ctx)
{
    REQUIRE_INIT();
    if (m == NULL || (m->elementSize != 1 && m->elementSize != 2 && m->elementSize != 4) || !m->width || !m->height)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ctx_ok(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    struct sim_rec *r = rec_of(e, n, SIM_REC_MEMSET);
    if (r) rec_set_memset(r, m);
    else rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
    return exec_set_memset(hGraphExec, hNode, memsetParams, ctx);
}

CUresult CUDAAPI cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
    if (nodeParams == NULL) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    switch (nodeParams->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        return exec_set_kernel(hGraphExec, hNode, &nodeParams->kernel);
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return exec_set_copy(hGraphExec, hNode, &nodeParams->memcpy.copyParams, nodeParams->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        const CUDA_MEMSET_NODE_PARAMS_v2 *m = &nodeParams->memset;
        CUDA_MEMSET_NODE_PARAMS_v1 v1 = { m->dst, m->pitch, m->value, m->elementSize, m->width, m->height };
        return exec_set_memset(hGraphExec, hNode, &v1, m->ctx);
    }
    default:
        return initialized() ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_NOT_INITIALIZED;
    }
}

/*
 * A child-graph node's records take the new child graph's parameters; the
 * new graph must have the same nodes (count and kinds, in order).
 */
CUresult CUDAAPI cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraph childGraph)
{
    REQUIRE_INIT();
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    struct sim_plan *p = NULL;
    if (!exec_ok(hGraphExec) || !sim_node_ok(hNode) || hNode->type != CU_GRAPH_NODE_TYPE_GRAPH ||
        !sim_graph_ok(childGraph)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if ((p = plan_build(childGraph)) == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        struct sim_rec *first = hGraphExec->plan->head;
        while (first && first->owner != hNode) first = first->next;
        struct sim_rec *o = first, *n = p->head;
        for (; o && o->owner == hNode && n; o = o->next, n = n->next)
            if (o->kind != n->kind) rc = CUDA_ERROR_INVALID_VALUE;
        if (!first || n || (o && o->owner == hNode)) rc = CUDA_ERROR_INVALID_VALUE;
        for (o = first, n = p->head; rc == CUDA_SUCCESS && n; o = o->next, n = n->next) {
            struct sim_rec *next = o->next;
            uint32_t index = o->index;
            CUgraphNode origin = o->origin, owner = o->owner;
            *o = *n;
            o->next = next;
            o->index = index;
            o->origin = origin;
            o->owner = owner;
        }
    }
    plan_free(p);
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Upload and launch                                                   */
/* ------------------------------------------------------------------ */

static CUresult upload_impl(CUgraphExec e, CUstream s)
{
    REQUIRE_INIT();
    if (!stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    if (exec_ok(e)) e->uploads++;
    else rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
    return upload_impl(hGraphExec, hStream);
}

CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return upload_impl(hGraphExec, hStream);
}

/* An executable graph's record as the observer's work (graph launches). */
static void report_record(const struct sim_observer *o, struct sim_obs_call *c, CUgraphExec e,
                          const struct sim_rec *r, CUstream s)
{
    struct sim_obs_work w;
    memset(&w, 0, sizeof(w));
    w.stream_id = sim_obs_stream_id(s, c->tid);
    w.graph_id = e->graph_id;
    w.graph_node_id = ((uint64_t)e->graph_id << 32) | (r->index + 1u);
    switch (r->kind) {
    case SIM_REC_KERNEL:
        w.kind = SIM_OBS_KERNEL;
        w.name = sim_func_name(r->func);
        memcpy(w.grid, r->grid, sizeof(w.grid));
        memcpy(w.block, r->block, sizeof(w.block));
        w.dynamic_shared = r->shmem;
        if (w.name != NULL) {
            w.static_shared = r->func->shared_size_bytes;
            w.registers = r->func->num_regs;
        }
        break;
    case SIM_REC_MEMCPY:
        w.kind = SIM_OBS_MEMCPY;
        w.dst_type = r->u.copy.dst_type;
        w.src_type = r->u.copy.src_type;
        w.dst_pinned = w.dst_type == CU_MEMORYTYPE_HOST ? (uint32_t)sim_host_pinned(r->u.copy.dst) : 0;
        w.src_pinned = w.src_type == CU_MEMORYTYPE_HOST ? (uint32_t)sim_host_pinned(r->u.copy.src) : 0;
        w.bytes = r->u.copy.bytes;
        break;
    case SIM_REC_MEMSET:
        w.kind = SIM_OBS_MEMSET;
        w.bytes = r->u.set.bytes;
        w.value = r->u.set.value;
        w.element_size = r->u.set.elem;
        break;
    default:
        return;
    }
    o->work(c, &w);
}

/* "Runs" every record: counts kernels by name, copies and memsets; reports
 * each to the observer `o` (NULL: none). */
static CUresult graph_launch_impl(CUgraphExec e, CUstream s, const struct sim_observer *o, struct sim_obs_call *call)
{
    REQUIRE_INIT();
    if (UNLIKELY(!stream_ok(s))) return CUDA_ERROR_INVALID_HANDLE;
    /* Launching a graph into a capture is not simulated. */
    if (UNLIKELY(stream_capturing(s))) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    if (UNLIKELY(!exec_ok(e))) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        struct sim_graph_counters *c = &g_graph_counters;
        for (struct sim_rec *r = e->plan->head; r; r = r->next) {
            if (o != NULL) report_record(o, call, e, r, s);
            switch (r->kind) {
            case SIM_REC_KERNEL:
                c->kernels_run++;
                if (r->stat) r->stat->graph_runs++;
                break;
            case SIM_REC_MEMCPY:
                c->copies_run++;
                c->copy_bytes_run += r->u.copy.bytes;
                break;
            case SIM_REC_MEMSET:
                c->memsets_run++;
                c->memset_bytes_run += r->u.set.bytes;
                break;
            default:
                break;
            }
        }
        c->graph_launches++;
        e->launches++;
    }
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    const struct sim_observer *o = sim_observer();
    if (LIKELY(o == NULL)) return graph_launch_impl(hGraphExec, hStream, NULL, NULL);
    struct sim_obs_call c;
    sim_obs_begin(o, &c, SIM_CBID_cuGraphLaunch, __func__, NULL);
    const CUresult r = graph_launch_impl(hGraphExec, hStream, o, &c);
    o->exit(&c, (int)r);
    return r;
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    const struct sim_observer *o = sim_observer();
    if (LIKELY(o == NULL)) return graph_launch_impl(hGraphExec, hStream, NULL, NULL);
    struct sim_obs_call c;
    sim_obs_begin(o, &c, SIM_CBID_cuGraphLaunch_ptsz, __func__, NULL);
    const CUresult r = graph_launch_impl(hGraphExec, hStream, o, &c);
    o->exit(&c, (int)r);
    return r;
}
