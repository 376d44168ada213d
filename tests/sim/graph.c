/*
 * graph.c - CUDA graphs (CUgraph, CUgraphNode) for the simulated
 * libcuda.so.1: explicit construction, node parameter setters, child
 * graphs, clone, destruction, and the simulator-only statistics getters.
 * Executable graphs are in exec.c, stream capture in capture.c.
 */
#define _GNU_SOURCE
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>

SIM_HIDDEN pthread_mutex_t g_graph_lock = PTHREAD_MUTEX_INITIALIZER;
SIM_HIDDEN struct sim_graph_counters g_graph_counters;

/* Kernel statistics by name, in order of first appearance (under g_graph_lock). */
static struct sim_kstat *g_kstats;
static struct sim_kstat **g_kstats_tail = &g_kstats;

/* ------------------------------------------------------------------ */
/* Node sets, graphs, nodes                                            */
/* ------------------------------------------------------------------ */

SIM_HIDDEN int sim_nodeset_add(struct sim_nodeset *s, CUgraphNode n)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4;
        CUgraphNode *m = realloc(s->nodes, cap * sizeof(*m));
        if (!m) return -1;
        s->nodes = m;
        s->cap = cap;
    }
    s->nodes[s->n++] = n;
    return 0;
}

SIM_HIDDEN int sim_nodeset_copy(struct sim_nodeset *dst, const struct sim_nodeset *src)
{
    dst->n = 0;
    for (size_t i = 0; i < src->n; i++)
        if (sim_nodeset_add(dst, src->nodes[i]) != 0) return -1;
    return 0;
}

SIM_HIDDEN void sim_nodeset_free(struct sim_nodeset *s)
{
    free(s->nodes);
    s->nodes = NULL;
    s->n = s->cap = 0;
}

SIM_HIDDEN CUgraph sim_graph_new(void)
{
    CUgraph g = calloc(1, sizeof(*g));
    if (!g) return NULL;
    g->magic = MAGIC_GRAPH;
    g->id = sim_next_id();
    return g;
}

static void node_free(CUgraphNode n)
{
    if (n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->u.child) sim_graph_free(n->u.child);
    sim_nodeset_free(&n->deps);
    n->magic = MAGIC_DEAD;
    free(n);
}

SIM_HIDDEN void sim_graph_free(CUgraph g)
{
    for (size_t i = 0; i < g->n; i++) node_free(g->nodes[i]);
    free(g->nodes);
    g->magic = MAGIC_DEAD;
    free(g);
}

SIM_HIDDEN int sim_graph_ok(CUgraph g)
{
    return g != NULL && g->magic == MAGIC_GRAPH;
}

SIM_HIDDEN int sim_node_ok(CUgraphNode n)
{
    return n != NULL && n->magic == MAGIC_GNODE;
}

SIM_HIDDEN CUgraphNode sim_node_add(CUgraph g, CUgraphNodeType type, const CUgraphNode *deps, size_t ndeps)
{
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 8;
        CUgraphNode *m = realloc(g->nodes, cap * sizeof(*m));
        if (!m) return NULL;
        g->nodes = m;
        g->cap = cap;
    }
    CUgraphNode n = calloc(1, sizeof(*n));
    if (!n) return NULL;
    n->magic = MAGIC_GNODE;
    n->type = type;
    n->index = g->n ? g->nodes[g->n - 1]->index + 1 : 0;
    n->graph = g;
    for (size_t i = 0; i < ndeps; i++) {
        if (sim_nodeset_add(&n->deps, deps[i]) != 0) {
            node_free(n);
            return NULL;
        }
    }
    g->nodes[g->n++] = n;
    return n;
}

SIM_HIDDEN void sim_node_set_kernel(CUgraphNode n, const struct sim_captured_kernel *k)
{
    n->u.kernel = *k;
}

/* Dependencies must be distinct nodes of g. */
static int deps_ok(CUgraph g, const CUgraphNode *deps, size_t n)
{
    if (n && deps == NULL) return 0;
    for (size_t i = 0; i < n; i++) {
        if (!sim_node_ok(deps[i]) || deps[i]->graph != g) return 0;
        for (size_t j = 0; j < i; j++)
            if (deps[j] == deps[i]) return 0;
    }
    return 1;
}

/* Deep copy (child graphs included); NULL on OOM. */
static CUgraph graph_clone(CUgraph src)
{
    CUgraph g = sim_graph_new();
    if (!g) return NULL;
    for (size_t i = 0; i < src->n; i++) {
        CUgraphNode o = src->nodes[i];
        CUgraphNode n = sim_node_add(g, o->type, NULL, 0);
        if (!n) goto oom;
        n->index = o->index;
        n->u = o->u;
        if (o->type == CU_GRAPH_NODE_TYPE_GRAPH) {
            n->u.child = NULL;
            CUgraph c = graph_clone(o->u.child);
            if (!c) goto oom;
            c->owned_by_node = 1;
            n->u.child = c;
        }
        /* Dependencies come earlier in creation order: map them by position. */
        for (size_t d = 0; d < o->deps.n; d++) {
            for (size_t j = 0; j < i; j++) {
                if (src->nodes[j] == o->deps.nodes[d] && sim_nodeset_add(&n->deps, g->nodes[j]) != 0) goto oom;
            }
        }
    }
    return g;
oom:
    sim_graph_free(g);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Parameters                                                          */
/* ------------------------------------------------------------------ */

static CUresult kernel_from_v2(struct sim_captured_kernel *k, const CUDA_KERNEL_NODE_PARAMS_v2 *p)
{
    if (p == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (p->func == NULL && p->kern == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (p->func != NULL && p->func->magic != MAGIC_FUNC) return CUDA_ERROR_INVALID_HANDLE;
    if (p->func == NULL && p->kern->f.magic != MAGIC_KERNEL) return CUDA_ERROR_INVALID_HANDLE;
    if (!p->gridDimX || !p->gridDimY || !p->gridDimZ || !p->blockDimX || !p->blockDimY || !p->blockDimZ)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->func == NULL && p->ctx != NULL && !ctx_ok(p->ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    struct sim_captured_kernel v = {
        p->func, p->func ? NULL : p->kern,
        { p->gridDimX, p->gridDimY, p->gridDimZ },
        { p->blockDimX, p->blockDimY, p->blockDimZ },
        p->sharedMemBytes, p->kernelParams,
    };
    *k = v;
    return CUDA_SUCCESS;
}

static CUresult kernel_from_v1(struct sim_captured_kernel *k, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    if (p == NULL || p->func == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUDA_KERNEL_NODE_PARAMS_v2 v2;
    memset(&v2, 0, sizeof(v2));
    memcpy(&v2, p, sizeof(*p));
    return kernel_from_v2(k, &v2);
}

static CUresult memset_check(const CUDA_MEMSET_NODE_PARAMS_v1 *p, CUcontext ctx)
{
    if (p == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) return CUDA_ERROR_INVALID_VALUE;
    if (p->width == 0 || p->height == 0) return CUDA_ERROR_INVALID_VALUE;
    if (!ctx_ok(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_SUCCESS;
}

static CUresult memcpy_check(const CUDA_MEMCPY3D *p, CUcontext ctx)
{
    if (p == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (p->srcMemoryType < CU_MEMORYTYPE_HOST || p->srcMemoryType > CU_MEMORYTYPE_UNIFIED ||
        p->dstMemoryType < CU_MEMORYTYPE_HOST || p->dstMemoryType > CU_MEMORYTYPE_UNIFIED)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ctx_ok(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Graph objects                                                       */
/* ------------------------------------------------------------------ */

CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    REQUIRE_INIT();
    if (phGraph == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    CUgraph g = sim_graph_new();
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraph = g;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
    REQUIRE_INIT();
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    if (!sim_graph_ok(hGraph) || hGraph->owned_by_node) rc = CUDA_ERROR_INVALID_VALUE;
    else if (sim_capture_uses_graph(hGraph)) rc = CUDA_ERROR_ILLEGAL_STATE;
    else sim_graph_free(hGraph);
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

CUresult CUDAAPI cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
    REQUIRE_INIT();
    if (phGraphClone == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    if (!sim_graph_ok(originalGraph)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        CUgraph g = graph_clone(originalGraph);
        if (g) *phGraphClone = g;
        else rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    REQUIRE_INIT();
    if (numNodes == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    if (!sim_graph_ok(hGraph)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (nodes == NULL) {
        *numNodes = hGraph->n;
    } else {
        size_t got = *numNodes < hGraph->n ? *numNodes : hGraph->n;
        for (size_t i = 0; i < *numNodes; i++) nodes[i] = i < got ? hGraph->nodes[i] : NULL;
        *numNodes = got;
    }
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    REQUIRE_INIT();
    if (type == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    if (!sim_node_ok(hNode)) rc = CUDA_ERROR_INVALID_VALUE;
    else *type = hNode->type;
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode hNode)
{
    REQUIRE_INIT();
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    if (!sim_node_ok(hNode)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (sim_capture_uses_graph(hNode->graph)) {
        rc = CUDA_ERROR_ILLEGAL_STATE;
    } else {
        CUgraph g = hNode->graph;
        size_t k = 0;
        for (size_t i = 0; i < g->n; i++) {
            CUgraphNode n = g->nodes[i];
            if (n == hNode) continue;
            /* Edges to the destroyed node go with it. */
            size_t m = 0;
            for (size_t d = 0; d < n->deps.n; d++)
                if (n->deps.nodes[d] != hNode) n->deps.nodes[m++] = n->deps.nodes[d];
            n->deps.n = m;
            g->nodes[k++] = n;
        }
        g->n = k;
        node_free(hNode);
    }
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Adding nodes                                                        */
/* ------------------------------------------------------------------ */

/*
 * The common path of every cuGraphAdd*Node: validate, add, let `fill` set
 * the parameters (already checked by the caller).
 */
static CUresult add_node(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUgraphNodeType type,
                         CUgraphNode *out)
{
    if (ph == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_graph_ok(g) || !deps_ok(g, deps, ndeps)) return CUDA_ERROR_INVALID_VALUE;
    if (sim_capture_uses_graph(g)) return CUDA_ERROR_ILLEGAL_STATE;
    CUgraphNode n = sim_node_add(g, type, deps, ndeps);
    if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
    *ph = n;
    *out = n;
    return CUDA_SUCCESS;
}

static CUresult add_kernel(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                           const struct sim_captured_kernel *k)
{
    pthread_mutex_lock(&g_graph_lock);
    CUgraphNode n = NULL;
    CUresult rc = add_node(ph, g, deps, ndeps, CU_GRAPH_NODE_TYPE_KERNEL, &n);
    if (rc == CUDA_SUCCESS) sim_node_set_kernel(n, k);
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                      size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    REQUIRE_INIT();
    struct sim_captured_kernel k;
    CUresult rc = kernel_from_v1(&k, nodeParams);
    if (rc != CUDA_SUCCESS) return rc;
    return add_kernel(phGraphNode, hGraph, dependencies, numDependencies, &k);
}

CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                         size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams)
{
    REQUIRE_INIT();
    struct sim_captured_kernel k;
    CUresult rc = kernel_from_v2(&k, nodeParams);
    if (rc != CUDA_SUCCESS) return rc;
    return add_kernel(phGraphNode, hGraph, dependencies, numDependencies, &k);
}

static CUresult set_kernel(CUgraphNode n, const struct sim_captured_kernel *k)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    if (!sim_node_ok(n) || n->type != CU_GRAPH_NODE_TYPE_KERNEL) rc = CUDA_ERROR_INVALID_VALUE;
    else sim_node_set_kernel(n, k);
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

CUresult CUDAAPI cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    REQUIRE_INIT();
    struct sim_captured_kernel k;
    CUresult rc = kernel_from_v1(&k, nodeParams);
    return rc == CUDA_SUCCESS ? set_kernel(hNode, &k) : rc;
}

CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams)
{
    REQUIRE_INIT();
    struct sim_captured_kernel k;
    CUresult rc = kernel_from_v2(&k, nodeParams);
    return rc == CUDA_SUCCESS ? set_kernel(hNode, &k) : rc;
}

static CUresult add_memcpy(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                           const CUDA_MEMCPY3D *copy, CUcontext ctx)
{
    CUresult rc = memcpy_check(copy, ctx);
    if (rc != CUDA_SUCCESS) return rc;
    pthread_mutex_lock(&g_graph_lock);
    CUgraphNode n = NULL;
    rc = add_node(ph, g, deps, ndeps, CU_GRAPH_NODE_TYPE_MEMCPY, &n);
    if (rc == CUDA_SUCCESS) n->u.copy = *copy;
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

static CUresult add_memset(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                           const CUDA_MEMSET_NODE_PARAMS_v1 *set, CUcontext ctx)
{
    CUresult rc = memset_check(set, ctx);
    if (rc != CUDA_SUCCESS) return rc;
    pthread_mutex_lock(&g_graph_lock);
    CUgraphNode n = NULL;
    rc = add_node(ph, g, deps, ndeps, CU_GRAPH_NODE_TYPE_MEMSET, &n);
    if (rc == CUDA_SUCCESS) n->u.memset = *set;
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

/* The parameters as set (func is NULL for a node made from a CUkernel). */
static CUresult get_kernel(CUgraphNode n, CUDA_KERNEL_NODE_PARAMS_v2 *p)
{
    if (p == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    if (!sim_node_ok(n) || n->type != CU_GRAPH_NODE_TYPE_KERNEL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        const struct sim_captured_kernel *k = &n->u.kernel;
        memset(p, 0, sizeof(*p));
        p->func = k->func;
        p->kern = k->kern;
        p->gridDimX = k->grid[0], p->gridDimY = k->grid[1], p->gridDimZ = k->grid[2];
        p->blockDimX = k->block[0], p->blockDimY = k->block[1], p->blockDimZ = k->block[2];
        p->sharedMemBytes = k->shmem;
        p->kernelParams = k->params;
    }
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    REQUIRE_INIT();
    CUDA_KERNEL_NODE_PARAMS_v2 v2;
    CUresult rc = nodeParams ? get_kernel(hNode, &v2) : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) memcpy(nodeParams, &v2, sizeof(*nodeParams));
    return rc;
}

CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams)
{
    REQUIRE_INIT();
    return get_kernel(hNode, nodeParams);
}

CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                      size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    REQUIRE_INIT();
    return add_memcpy(phGraphNode, hGraph, dependencies, numDependencies, copyParams, ctx);
}

CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                      size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
    REQUIRE_INIT();
    return add_memset(phGraphNode, hGraph, dependencies, numDependencies, memsetParams, ctx);
}

/* Child graph nodes own their graph: a clone, or (CUDA 13's MOVE) the graph itself. */
static CUresult add_child(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUgraph child, int move)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    if (!sim_graph_ok(child) || child == g || child->owned_by_node || sim_capture_uses_graph(child)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        CUgraph owned = move ? child : graph_clone(child);
        CUgraphNode n = NULL;
        if (!owned) rc = CUDA_ERROR_OUT_OF_MEMORY;
        else rc = add_node(ph, g, deps, ndeps, CU_GRAPH_NODE_TYPE_GRAPH, &n);
        if (rc == CUDA_SUCCESS) {
            owned->owned_by_node = 1;
            n->u.child = owned;
        } else if (owned && !move) {
            sim_graph_free(owned);
        }
    }
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                          size_t numDependencies, CUgraph childGraph)
{
    REQUIRE_INIT();
    return add_child(phGraphNode, hGraph, dependencies, numDependencies, childGraph, 0);
}

CUresult CUDAAPI cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph)
{
    REQUIRE_INIT();
    if (phGraph == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    if (!sim_node_ok(hNode) || hNode->type != CU_GRAPH_NODE_TYPE_GRAPH) rc = CUDA_ERROR_INVALID_VALUE;
    else *phGraph = hNode->u.child;
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

static CUresult add_plain(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUgraphNodeType type,
                          CUevent ev)
{
    pthread_mutex_lock(&g_graph_lock);
    CUgraphNode n = NULL;
    CUresult rc = add_node(ph, g, deps, ndeps, type, &n);
    if (rc == CUDA_SUCCESS) n->u.event = ev;
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                     size_t numDependencies)
{
    REQUIRE_INIT();
    return add_plain(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_EMPTY, NULL);
}

CUresult CUDAAPI cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                           size_t numDependencies, CUevent event)
{
    REQUIRE_INIT();
    if (!event_ok(event)) return CUDA_ERROR_INVALID_HANDLE;
    return add_plain(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event);
}

CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                         size_t numDependencies, CUevent event)
{
    REQUIRE_INIT();
    if (!event_ok(event)) return CUDA_ERROR_INVALID_HANDLE;
    return add_plain(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event);
}

/* The v2 memset parameters are v1 plus the context (at the end). */
static CUDA_MEMSET_NODE_PARAMS_v1 memset_v1(const CUDA_MEMSET_NODE_PARAMS_v2 *p)
{
    CUDA_MEMSET_NODE_PARAMS_v1 v = { p->dst, p->pitch, p->value, p->elementSize, p->width, p->height };
    return v;
}

/* cuGraphAddNode*: the node type and its parameters come in one tagged union. */
static CUresult add_node_params(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                CUgraphNodeParams *p)
{
    if (p == NULL) return CUDA_ERROR_INVALID_VALUE;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        struct sim_captured_kernel k;
        CUresult rc = kernel_from_v2(&k, &p->kernel);
        return rc == CUDA_SUCCESS ? add_kernel(ph, g, deps, ndeps, &k) : rc;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        if (p->memcpy.flags != 0 || p->memcpy.reserved != 0) return CUDA_ERROR_INVALID_VALUE;
        return add_memcpy(ph, g, deps, ndeps, &p->memcpy.copyParams, p->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS_v1 m = memset_v1(&p->memset);
        return add_memset(ph, g, deps, ndeps, &m, p->memset.ctx);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
        if ((unsigned)p->graph.ownership > CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE) return CUDA_ERROR_INVALID_VALUE;
        return add_child(ph, g, deps, ndeps, p->graph.graph, p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE);
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return add_plain(ph, g, deps, ndeps, CU_GRAPH_NODE_TYPE_EMPTY, NULL);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        if (!event_ok(p->eventRecord.event)) return CUDA_ERROR_INVALID_HANDLE;
        return add_plain(ph, g, deps, ndeps, CU_GRAPH_NODE_TYPE_EVENT_RECORD, p->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        if (!event_ok(p->eventWait.event)) return CUDA_ERROR_INVALID_HANDLE;
        return add_plain(ph, g, deps, ndeps, CU_GRAPH_NODE_TYPE_WAIT_EVENT, p->eventWait.event);
    default:
        /* Host, semaphore, allocation, batch-memop and conditional nodes are not simulated. */
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

CUresult CUDAAPI cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                size_t numDependencies, CUgraphNodeParams *nodeParams)
{
    REQUIRE_INIT();
    return add_node_params(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                   const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                   CUgraphNodeParams *nodeParams)
{
    REQUIRE_INIT();
    UNUSED(dependencyData); /* all edges are ordinary in the simulator */
    return add_node_params(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

/* Kernel, memcpy, memset and event nodes; the type must not change. */
CUresult CUDAAPI cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
    REQUIRE_INIT();
    if (nodeParams == NULL) return CUDA_ERROR_INVALID_VALUE;
    struct sim_captured_kernel k;
    CUDA_MEMSET_NODE_PARAMS_v1 m;
    CUresult rc = CUDA_SUCCESS;
    switch (nodeParams->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: rc = kernel_from_v2(&k, &nodeParams->kernel); break;
    case CU_GRAPH_NODE_TYPE_MEMCPY: rc = memcpy_check(&nodeParams->memcpy.copyParams, nodeParams->memcpy.copyCtx); break;
    case CU_GRAPH_NODE_TYPE_MEMSET:
        m = memset_v1(&nodeParams->memset);
        rc = memset_check(&m, nodeParams->memset.ctx);
        break;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        if (!event_ok(nodeParams->eventRecord.event)) rc = CUDA_ERROR_INVALID_HANDLE;
        break;
    default: rc = CUDA_ERROR_NOT_SUPPORTED; break;
    }
    if (rc != CUDA_SUCCESS) return rc;
    pthread_mutex_lock(&g_graph_lock);
    if (!sim_node_ok(hNode) || hNode->type != nodeParams->type) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        switch (nodeParams->type) {
        case CU_GRAPH_NODE_TYPE_KERNEL: sim_node_set_kernel(hNode, &k); break;
        case CU_GRAPH_NODE_TYPE_MEMCPY: hNode->u.copy = nodeParams->memcpy.copyParams; break;
        case CU_GRAPH_NODE_TYPE_MEMSET: hNode->u.memset = m; break;
        default: hNode->u.event = nodeParams->eventRecord.event; break;
        }
    }
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Statistics                                                          */
/* ------------------------------------------------------------------ */

SIM_HIDDEN const char *sim_kernel_name(CUfunction f, CUkernel k)
{
    if (f) return f->name;
    return k ? k->f.name : NULL;
}

SIM_HIDDEN struct sim_kstat *sim_kstat_for(const char *name)
{
    for (struct sim_kstat *s = g_kstats; s; s = s->next)
        if (strcmp(s->name, name) == 0) return s;
    struct sim_kstat *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->name = strdup(name);
    if (!s->name) {
        free(s);
        return NULL;
    }
    *g_kstats_tail = s;
    g_kstats_tail = &s->next;
    return s;
}

void simGetGraphStats(simGraphStats *out)
{
    if (out == NULL) return;
    pthread_mutex_lock(&g_graph_lock);
    const struct sim_graph_counters *c = &g_graph_counters;
    simGraphStats v = {
        c->graph_launches, c->kernels_run, c->copies_run, c->copy_bytes_run, c->memsets_run,
        c->memset_bytes_run, c->captured_launches, c->captured_copies, c->captured_memsets,
    };
    pthread_mutex_unlock(&g_graph_lock);
    *out = v;
}

int simGraphKernelStat(unsigned int i, const char **name, unsigned long long *graph_runs, unsigned long long *captured)
{
    int found = 0;
    pthread_mutex_lock(&g_graph_lock);
    struct sim_kstat *s = g_kstats;
    while (s && i--) s = s->next;
    if (s) {
        if (name) *name = s->name;
        if (graph_runs) *graph_runs = s->graph_runs;
        if (captured) *captured = s->captured;
        found = 1;
    }
    pthread_mutex_unlock(&g_graph_lock);
    return found;
}
