/*
 * capture.c - stream capture for the simulated libcuda.so.1.
 *
 * What cuStreamBeginCapture* starts: work issued to a capturing stream is
 * not run, it becomes a node of the capture graph (the API call still
 * returns CUDA_SUCCESS); an event recorded in a capturing stream carries the
 * stream's current dependencies, and another stream that waits on it joins
 * the capture (a fork); cuStreamEndCapture on the stream that began it
 * returns the graph once every joined stream has been joined back.  The
 * rules follow cuda.h's documentation; README.md lists what is simplified.
 */
#define _GNU_SOURCE
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>

struct sim_capture {
    uint64_t magic;
    uint64_t id;
    CUgraph graph;
    CUstream origin;
    CUstreamCaptureMode mode;
    CUstreamCaptureStatus status; /* ACTIVE or INVALIDATED */
    int to_graph;                 /* the graph came from cuStreamBeginCaptureToGraph */
    pthread_t thread;             /* that began it */
    CUstream *streams;            /* every stream in the sequence, origin first */
    size_t nstreams, capstreams;
    struct sim_capture *next;
};

/* Live capture sequences (under g_graph_lock). */
static struct sim_capture *g_captures;
static __thread CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static struct sim_capture *capture_find(uint64_t id)
{
    for (struct sim_capture *c = g_captures; c; c = c->next)
        if (c->id == id) return c;
    return NULL;
}

static int capture_add_stream(struct sim_capture *c, CUstream s)
{
    if (c->nstreams == c->capstreams) {
        size_t cap = c->capstreams ? c->capstreams * 2 : 4;
        CUstream *n = realloc(c->streams, cap * sizeof(*n));
        if (!n) return -1;
        c->streams = n;
        c->capstreams = cap;
    }
    c->streams[c->nstreams++] = s;
    s->cap = c;
    return 0;
}

/* Every stream leaves the sequence; the sequence is freed (not its graph). */
static void capture_end(struct sim_capture *c)
{
    for (size_t i = 0; i < c->nstreams; i++) {
        c->streams[i]->cap = NULL;
        c->streams[i]->deps.n = 0;
    }
    for (struct sim_capture **p = &g_captures; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    c->magic = MAGIC_DEAD;
    free(c->streams);
    free(c);
}

SIM_HIDDEN int sim_capture_uses_graph(CUgraph g)
{
    for (struct sim_capture *c = g_captures; c; c = c->next)
        if (c->graph == g) return 1;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Begin / end                                                         */
/* ------------------------------------------------------------------ */

static CUresult begin_impl(CUstream s, CUgraph graph, const CUgraphNode *deps, size_t ndeps, CUstreamCaptureMode mode)
{
    REQUIRE_INIT();
    if (stream_is_special(s)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (s->magic != MAGIC_STREAM) return CUDA_ERROR_INVALID_HANDLE;
    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
    if (ndeps && deps == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    if (s->cap) {
        rc = CUDA_ERROR_ILLEGAL_STATE;
        goto out;
    }
    if (graph) {
        if (!sim_graph_ok(graph) || graph->owned_by_node || sim_capture_uses_graph(graph)) {
            rc = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
        for (size_t i = 0; i < ndeps; i++) {
            if (!sim_node_ok(deps[i]) || deps[i]->graph != graph) {
                rc = CUDA_ERROR_INVALID_VALUE;
                goto out;
            }
        }
    }
    struct sim_capture *c = calloc(1, sizeof(*c));
    CUgraph g = graph ? graph : sim_graph_new();
    if (!c || !g) {
        free(c);
        if (g && !graph) sim_graph_free(g);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    c->magic = MAGIC_CAPTURE;
    c->id = sim_next_id();
    c->graph = g;
    c->origin = s;
    c->mode = mode;
    c->status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    c->to_graph = graph != NULL;
    c->thread = pthread_self();
    s->deps.n = 0;
    for (size_t i = 0; i < ndeps && rc == CUDA_SUCCESS; i++)
        if (sim_nodeset_add(&s->deps, deps[i]) != 0) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS && capture_add_stream(c, s) != 0) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc != CUDA_SUCCESS) {
        s->cap = NULL;
        s->deps.n = 0;
        free(c->streams);
        free(c);
        if (!graph) sim_graph_free(g);
        goto out;
    }
    c->next = g_captures;
    g_captures = c;
out:
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream)
{
    return begin_impl(hStream, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream hStream)
{
    return begin_impl(hStream, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_impl(hStream, NULL, NULL, 0, mode);
}

CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_impl(hStream, NULL, NULL, 0, mode);
}

static CUresult begin_to_graph_impl(CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *data,
                                    size_t ndeps, CUstreamCaptureMode mode)
{
    UNUSED(data); /* edge annotations: all edges are ordinary in the simulator */
    if (g == NULL) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return begin_impl(s, g, deps, ndeps, mode);
}

CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                             const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                             CUstreamCaptureMode mode)
{
    return begin_to_graph_impl(hStream, hGraph, dependencies, dependencyData, numDependencies, mode);
}

CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                                  const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                                  CUstreamCaptureMode mode)
{
    return begin_to_graph_impl(hStream, hGraph, dependencies, dependencyData, numDependencies, mode);
}

/* Is `n` one of `roots` or an ancestor of one of them? */
static int reaches(CUgraphNode n, const struct sim_nodeset *roots)
{
    struct sim_nodeset todo = { 0 }, seen = { 0 };
    int found = 0;
    for (size_t i = 0; i < roots->n; i++) sim_nodeset_add(&todo, roots->nodes[i]);
    while (todo.n && !found) {
        CUgraphNode x = todo.nodes[--todo.n];
        if (x == n) found = 1;
        int was_seen = 0;
        for (size_t i = 0; i < seen.n; i++) was_seen |= seen.nodes[i] == x;
        if (was_seen) continue;
        sim_nodeset_add(&seen, x);
        for (size_t i = 0; i < x->deps.n; i++) sim_nodeset_add(&todo, x->deps.nodes[i]);
    }
    sim_nodeset_free(&todo);
    sim_nodeset_free(&seen);
    return found;
}

static CUresult end_impl(CUstream s, CUgraph *phGraph)
{
    REQUIRE_INIT();
    if (phGraph == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (stream_is_special(s)) return CUDA_ERROR_ILLEGAL_STATE;
    if (s->magic != MAGIC_STREAM) return CUDA_ERROR_INVALID_HANDLE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    struct sim_capture *c = s->cap;
    if (c == NULL) {
        rc = CUDA_ERROR_ILLEGAL_STATE;
        goto out;
    }
    if (c->origin != s) {
        c->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
        rc = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
        goto out;
    }
    if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self())) {
        rc = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
        goto out;
    }
    if (c->status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    /* Every forked stream's last work must be an ancestor of the origin's. */
    for (size_t i = 1; i < c->nstreams && rc == CUDA_SUCCESS; i++) {
        const struct sim_nodeset *d = &c->streams[i]->deps;
        for (size_t j = 0; j < d->n && rc == CUDA_SUCCESS; j++)
            if (!reaches(d->nodes[j], &s->deps)) rc = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    }
    CUgraph g = c->graph;
    int to_graph = c->to_graph;
    capture_end(c);
    if (rc == CUDA_SUCCESS) {
        *phGraph = g;
    } else {
        *phGraph = NULL;
        if (!to_graph) sim_graph_free(g);
    }
out:
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    return end_impl(hStream, phGraph);
}

CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    return end_impl(hStream, phGraph);
}

/* ------------------------------------------------------------------ */
/* Queries                                                             */
/* ------------------------------------------------------------------ */

static CUresult info_impl(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                          const CUgraphNode **deps, const CUgraphEdgeData **edge_data, size_t *ndeps)
{
    REQUIRE_INIT();
    if (status == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (!stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
    if (stream_is_special(s)) {
        *status = CU_STREAM_CAPTURE_STATUS_NONE;
        return CUDA_SUCCESS;
    }
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    struct sim_capture *c = s->cap;
    *status = c ? c->status : CU_STREAM_CAPTURE_STATUS_NONE;
    if (c && c->status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        if (id) *id = c->id;
        if (graph) *graph = c->graph;
        if (deps) *deps = s->deps.n ? s->deps.nodes : NULL;
        if (ndeps) *ndeps = s->deps.n;
        if (edge_data) {
            /* All edges are ordinary: an array of zeroed CUgraphEdgeData. */
            free(s->edge_data);
            s->edge_data = s->deps.n ? calloc(s->deps.n, sizeof(CUgraphEdgeData)) : NULL;
            if (s->deps.n && !s->edge_data) rc = CUDA_ERROR_OUT_OF_MEMORY;
            *edge_data = s->edge_data;
        }
    }
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return info_impl(hStream, captureStatus, NULL, NULL, NULL, NULL, NULL);
}

CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return info_impl(hStream, captureStatus, NULL, NULL, NULL, NULL, NULL);
}

CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out)
{
    return info_impl(hStream, captureStatus_out, id_out, NULL, NULL, NULL, NULL);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out)
{
    return info_impl(hStream, captureStatus_out, id_out, NULL, NULL, NULL, NULL);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                                           CUgraph *graph_out, const CUgraphNode **dependencies_out,
                                           size_t *numDependencies_out)
{
    return info_impl(hStream, captureStatus_out, id_out, graph_out, dependencies_out, NULL, numDependencies_out);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                                cuuint64_t *id_out, CUgraph *graph_out,
                                                const CUgraphNode **dependencies_out, size_t *numDependencies_out)
{
    return info_impl(hStream, captureStatus_out, id_out, graph_out, dependencies_out, NULL, numDependencies_out);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                                           CUgraph *graph_out, const CUgraphNode **dependencies_out,
                                           const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
    return info_impl(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                     numDependencies_out);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                                cuuint64_t *id_out, CUgraph *graph_out,
                                                const CUgraphNode **dependencies_out,
                                                const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
    return info_impl(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                     numDependencies_out);
}

/* The mode is kept per thread and swapped; the simulator does not refuse
 * "potentially unsafe" calls during a capture (README.md). */
CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    REQUIRE_INIT();
    if (mode == NULL || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = t_capture_mode;
    t_capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Work issued to a capturing stream (called from cuda.c)             */
/* ------------------------------------------------------------------ */

/* Appends a node after the stream's dependencies and makes it the stream's
 * only dependency.  Caller holds g_graph_lock and checked s->cap. */
static CUresult capture_node(CUstream s, CUgraphNodeType type, CUgraphNode *out)
{
    struct sim_capture *c = s->cap;
    if (c->status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    CUgraphNode n = sim_node_add(c->graph, type, s->deps.nodes, s->deps.n);
    if (n == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    s->deps.n = 0;
    if (sim_nodeset_add(&s->deps, n) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    *out = n;
    return CUDA_SUCCESS;
}

SIM_HIDDEN CUresult sim_capture_kernel(CUstream s, const struct sim_captured_kernel *k)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    CUgraphNode n = NULL;
    /* The capture may have ended since the caller looked: then the launch "runs". */
    if (s->cap && (rc = capture_node(s, CU_GRAPH_NODE_TYPE_KERNEL, &n)) == CUDA_SUCCESS) {
        sim_node_set_kernel(n, k);
        g_graph_counters.captured_launches++;
        const char *name = sim_kernel_name(k->func, k->kern);
        struct sim_kstat *st = name ? sim_kstat_for(name) : NULL;
        if (st) st->captured++;
    }
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

SIM_HIDDEN CUresult sim_capture_memcpy(CUstream s, const CUDA_MEMCPY3D *p)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    CUgraphNode n = NULL;
    if (s->cap && (rc = capture_node(s, CU_GRAPH_NODE_TYPE_MEMCPY, &n)) == CUDA_SUCCESS) {
        n->u.copy = *p;
        g_graph_counters.captured_copies++;
    }
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

SIM_HIDDEN CUresult sim_capture_memset(CUstream s, CUdeviceptr dst, unsigned int value, unsigned int elem, size_t count)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    CUgraphNode n = NULL;
    if (s->cap && (rc = capture_node(s, CU_GRAPH_NODE_TYPE_MEMSET, &n)) == CUDA_SUCCESS) {
        CUDA_MEMSET_NODE_PARAMS_v1 m = { dst, 0, value, elem, count, 1 };
        n->u.memset = m;
        g_graph_counters.captured_memsets++;
    }
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

SIM_HIDDEN CUresult sim_capture_event_record(CUevent e, CUstream s)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    struct sim_capture *c = stream_capturing(s) ? s->cap : NULL;
    if (c == NULL) {
        e->cap_id = 0; /* recorded outside any capture again */
        e->deps.n = 0;
    } else if (c->status != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else if (sim_nodeset_copy(&e->deps, &s->deps) != 0) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        e->cap_id = c->id;
    }
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

static void invalidate(struct sim_capture *c)
{
    if (c) c->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
}

SIM_HIDDEN CUresult sim_capture_stream_wait(CUstream s, CUevent e, unsigned int flags)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_graph_lock);
    struct sim_capture *ec = e->cap_id ? capture_find(e->cap_id) : NULL;
    struct sim_capture *sc = stream_capturing(s) ? s->cap : NULL;
    if (e->cap_id && !ec) {
        e->cap_id = 0; /* that capture has ended: an ordinary event again */
        e->deps.n = 0;
    }
    if (ec) {
        if (stream_is_special(s)) {
            /* The legacy stream cannot join a capture. */
            invalidate(ec);
            rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        } else if (ec->status != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
            rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else if (sc == NULL) {
            /* A fork: s joins the capture, after the recorded work. */
            s->deps.n = 0;
            if (sim_nodeset_copy(&s->deps, &e->deps) != 0 || capture_add_stream(ec, s) != 0)
                rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else if (sc == ec) {
            /* A join inside the capture: s also waits for the recorded work. */
            for (size_t i = 0; i < e->deps.n && rc == CUDA_SUCCESS; i++) {
                int have = 0;
                for (size_t j = 0; j < s->deps.n; j++) have |= s->deps.nodes[j] == e->deps.nodes[i];
                if (!have && sim_nodeset_add(&s->deps, e->deps.nodes[i]) != 0) rc = CUDA_ERROR_OUT_OF_MEMORY;
            }
        } else {
            invalidate(ec);
            invalidate(sc);
            rc = CUDA_ERROR_STREAM_CAPTURE_MERGE;
        }
    } else if (sc) {
        if (flags & CU_EVENT_WAIT_EXTERNAL) {
            /* An external wait becomes an event-wait node. */
            CUgraphNode n = NULL;
            rc = capture_node(s, CU_GRAPH_NODE_TYPE_WAIT_EVENT, &n);
            if (rc == CUDA_SUCCESS) n->u.event = e;
        } else {
            /* A dependency on work outside the capture would cross its boundary. */
            invalidate(sc);
            rc = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
        }
    }
    pthread_mutex_unlock(&g_graph_lock);
    return rc;
}

SIM_HIDDEN CUresult sim_capture_sync_stream(CUstream s)
{
    pthread_mutex_lock(&g_graph_lock);
    invalidate(s->cap);
    pthread_mutex_unlock(&g_graph_lock);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

SIM_HIDDEN int sim_capture_event_live(CUevent e)
{
    pthread_mutex_lock(&g_graph_lock);
    int live = capture_find(e->cap_id) != NULL;
    pthread_mutex_unlock(&g_graph_lock);
    return live;
}

SIM_HIDDEN void sim_capture_event_destroy(CUevent e)
{
    pthread_mutex_lock(&g_graph_lock);
    sim_nodeset_free(&e->deps);
    e->cap_id = 0;
    pthread_mutex_unlock(&g_graph_lock);
}
