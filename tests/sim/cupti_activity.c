/*
 * cupti_activity.c - the activity API of the simulated libcupti.so.13:
 * kinds, per-cbid driver-API records, client buffers, the records written
 * into them with known GPU times, flushing.
 * README.md ("libcupti.so.13") is the contract.
 */
#define _GNU_SOURCE
#include "cupti_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_FULL 64        /* full buffers waiting for delivery */
#define MAX_STREAMS 1024   /* stream timelines (open addressing) */
#define MAX_CONTEXTS 64

/* Under g_cupti.lock. */
static uint8_t *g_buf;                   /* the buffer being filled */
static size_t g_buf_size, g_buf_used;
static struct { uint8_t *buf; size_t size, used; } g_full[MAX_FULL];
static unsigned g_nfull;
static struct { uint32_t id; int used; uint64_t end; } g_streams[MAX_STREAMS];
static void *g_contexts[MAX_CONTEXTS];
static int64_t g_next_grid_id = 1;
struct name { char *s; const char *src; struct name *next; };
static struct name *g_names;             /* interned kernel names (CUPTI owns them) */

static int kind_on(CUpti_ActivityKind k)
{
    return (g_cupti.kinds >> k) & 1u;
}

/* ------------------------------------------------------------------ */
/* Buffers                                                             */
/* ------------------------------------------------------------------ */

/* Room for `size` bytes, asking the client for a buffer when needed; NULL
 * (and one more dropped record) when there is none. */
static uint8_t *room_locked(size_t size)
{
    if (g_buf != NULL && g_buf_size - g_buf_used >= size) return g_buf + g_buf_used;
    if (g_buf != NULL) {
        if (g_nfull == MAX_FULL) goto drop;
        g_full[g_nfull].buf = g_buf;
        g_full[g_nfull].size = g_buf_size;
        g_full[g_nfull].used = g_buf_used;
        g_nfull++;
        g_buf = NULL;
    }
    if (g_cupti.request == NULL) goto drop;
    uint8_t *b = NULL;
    size_t bsize = 0, maxrec = 0;
    int saved = t_cupti_site;
    cupti_cb_enter(SIM_CUPTI_SITE_BUFFER);
    g_cupti.request(&b, &bsize, &maxrec);
    cupti_cb_leave(saved);
    if (b != NULL && (((uintptr_t)b & 7) != 0 || bsize < size)) {
        /* Unusable: hand it back empty (with the next delivery). */
        if (g_nfull < MAX_FULL) {
            g_full[g_nfull].buf = b;
            g_full[g_nfull].size = bsize;
            g_full[g_nfull].used = 0;
            g_nfull++;
        }
        b = NULL;
    }
    if (b == NULL) goto drop;
    g_buf = b;
    g_buf_size = bsize;
    g_buf_used = 0;
    return g_buf;
drop:
    g_cupti.dropped++;
    g_cupti.dropped_total++;
    return NULL;
}

static void commit_locked(size_t size)
{
    g_buf_used += size;
    g_cupti.records++;
}

/* Hands every full buffer to the client, one at a time, outside the lock. */
CUPTI_HIDDEN void cupti_deliver(void)
{
    for (;;) {
        pthread_mutex_lock(&g_cupti.lock);
        if (g_nfull == 0 || g_cupti.complete == NULL) {
            pthread_mutex_unlock(&g_cupti.lock);
            return;
        }
        uint8_t *b = g_full[0].buf;
        size_t size = g_full[0].size, used = g_full[0].used;
        memmove(&g_full[0], &g_full[1], (g_nfull - 1) * sizeof(g_full[0]));
        g_nfull--;
        CUpti_BuffersCallbackCompleteFunc done = g_cupti.complete;
        g_cupti.delivering++;
        g_cupti.buffers_completed++;
        int saved = t_cupti_site;
        cupti_cb_enter(SIM_CUPTI_SITE_BUFFER);
        pthread_mutex_unlock(&g_cupti.lock);
        done(NULL, 0, b, size, used);
        pthread_mutex_lock(&g_cupti.lock);
        cupti_cb_leave(saved);
        g_cupti.delivering--;
        pthread_cond_broadcast(&g_cupti.delivered);
        pthread_mutex_unlock(&g_cupti.lock);
    }
}

/* ------------------------------------------------------------------ */
/* Records                                                             */
/* ------------------------------------------------------------------ */

/* The GPU timeline of one stream: when its last work ends. */
static uint64_t *stream_end_locked(uint32_t id)
{
    unsigned h = (id * 2654435761u) % MAX_STREAMS;
    for (unsigned i = 0; i < MAX_STREAMS; i++) {
        unsigned k = (h + i) % MAX_STREAMS;
        if (!g_streams[k].used) {
            g_streams[k].used = 1;
            g_streams[k].id = id;
            g_streams[k].end = 0;
        }
        if (g_streams[k].id == id) return &g_streams[k].end;
    }
    static uint64_t overflow; /* more streams than slots: they share one timeline */
    return &overflow;
}

static uint32_t context_id_locked(void *ctx)
{
    if (ctx == NULL) return 0;
    for (unsigned i = 0; i < MAX_CONTEXTS; i++) {
        if (g_contexts[i] == ctx) return i + 1;
        if (g_contexts[i] == NULL) {
            g_contexts[i] = ctx;
            return i + 1;
        }
    }
    return MAX_CONTEXTS + 1;
}

static const char *intern_locked(const char *s)
{
    if (s == NULL) return NULL;
    for (struct name *n = g_names; n; n = n->next)
        if (n->src == s && strcmp(n->s, s) == 0) return n->s;
    struct name *n = malloc(sizeof(*n));
    if (n == NULL) return NULL;
    n->s = strdup(s);
    if (n->s == NULL) {
        free(n);
        return NULL;
    }
    n->src = s;
    n->next = g_names;
    g_names = n;
    return n->s;
}

static uint8_t memory_kind(uint32_t type, uint32_t pinned)
{
    if (type == 2) return CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    return pinned ? CUPTI_ACTIVITY_MEMORY_KIND_PINNED : CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
}

static uint8_t copy_kind(const struct sim_obs_work *w)
{
    const int sd = w->src_type == 2, dd = w->dst_type == 2;
    if (sd && dd) return w->peer ? CUPTI_ACTIVITY_MEMCPY_KIND_PTOP : CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
    if (dd) return CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    if (sd) return CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
    return CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
}

/*
 * GPU durations (ns): a kernel runs max(1, threads / 64) with threads =
 * grid.x*grid.y*grid.z*block.x*block.y*block.z; a copy bytes/10 + 1000; a
 * memset bytes/40 + 500 (integer division).  Work on one stream runs in
 * order: start = max(API start + 2000, end of the stream's previous work).
 */
CUPTI_HIDDEN void cupti_record_work_locked(const struct sim_obs_call *call, const struct sim_obs_work *w)
{
    uint64_t dur;
    if (w->kind == SIM_OBS_KERNEL) {
        uint64_t threads = (uint64_t)w->grid[0] * w->grid[1] * w->grid[2] * w->block[0] * w->block[1] * w->block[2];
        dur = threads / 64 ? threads / 64 : 1;
    } else if (w->kind == SIM_OBS_MEMCPY) {
        dur = w->bytes / 10 + 1000;
    } else {
        dur = w->bytes / 40 + 500;
    }
    uint64_t *tl = stream_end_locked(w->stream_id);
    uint64_t start = call->scratch[0] + 2000;
    if (*tl > start) start = *tl;
    const uint64_t end = start + dur;
    *tl = end;
    const uint32_t ctx = context_id_locked(call->context);

    if (w->kind == SIM_OBS_KERNEL) {
        const int conc = kind_on(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        if (!conc && !kind_on(CUPTI_ACTIVITY_KIND_KERNEL)) return;
        CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)room_locked(sizeof(*k));
        if (k == NULL) return;
        memset(k, 0, sizeof(*k));
        k->kind = conc ? CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL : CUPTI_ACTIVITY_KIND_KERNEL;
        k->registersPerThread = (uint16_t)w->registers;
        k->start = start;
        k->end = end;
        k->completed = end;
        k->contextId = ctx;
        k->streamId = w->stream_id;
        k->gridX = (int32_t)w->grid[0];
        k->gridY = (int32_t)w->grid[1];
        k->gridZ = (int32_t)w->grid[2];
        k->blockX = (int32_t)w->block[0];
        k->blockY = (int32_t)w->block[1];
        k->blockZ = (int32_t)w->block[2];
        k->staticSharedMemory = (int32_t)w->static_shared;
        k->dynamicSharedMemory = (int32_t)w->dynamic_shared;
        k->correlationId = call->correlation;
        k->gridId = g_next_grid_id++;
        k->name = intern_locked(w->name);
        k->launchType = w->cooperative ? CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE
                                       : CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
        k->graphNodeId = w->graph_node_id;
        k->graphId = w->graph_id;
        commit_locked(sizeof(*k));
    } else if (w->kind == SIM_OBS_MEMCPY) {
        if (!kind_on(CUPTI_ACTIVITY_KIND_MEMCPY)) return;
        CUpti_ActivityMemcpy6 *m = (CUpti_ActivityMemcpy6 *)room_locked(sizeof(*m));
        if (m == NULL) return;
        memset(m, 0, sizeof(*m));
        m->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
        m->copyKind = copy_kind(w);
        m->srcKind = memory_kind(w->src_type, w->src_pinned);
        m->dstKind = memory_kind(w->dst_type, w->dst_pinned);
        m->bytes = w->bytes;
        m->start = start;
        m->end = end;
        m->contextId = ctx;
        m->streamId = w->stream_id;
        m->correlationId = call->correlation;
        m->graphNodeId = w->graph_node_id;
        m->graphId = w->graph_id;
        m->copyCount = 1;
        commit_locked(sizeof(*m));
    } else {
        if (!kind_on(CUPTI_ACTIVITY_KIND_MEMSET)) return;
        CUpti_ActivityMemset4 *m = (CUpti_ActivityMemset4 *)room_locked(sizeof(*m));
        if (m == NULL) return;
        memset(m, 0, sizeof(*m));
        m->kind = CUPTI_ACTIVITY_KIND_MEMSET;
        m->value = w->value;
        m->bytes = w->bytes;
        m->start = start;
        m->end = end;
        m->contextId = ctx;
        m->streamId = w->stream_id;
        m->correlationId = call->correlation;
        m->memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
        m->graphNodeId = w->graph_node_id;
        m->graphId = w->graph_id;
        commit_locked(sizeof(*m));
    }
}

CUPTI_HIDDEN void cupti_record_api_locked(const struct sim_obs_call *call, uint64_t end, int result)
{
    /* As CUPTI 13 does: API records only while DRIVER is on, for the cbids
     * not switched off since. */
    if (!kind_on(CUPTI_ACTIVITY_KIND_DRIVER) || (call->cbid < SIM_CBID_SIZE && g_cupti.driver_api_off[call->cbid]))
        return;
    CUpti_ActivityAPI *a = (CUpti_ActivityAPI *)room_locked(sizeof(*a));
    if (a == NULL) return;
    memset(a, 0, sizeof(*a));
    a->kind = CUPTI_ACTIVITY_KIND_DRIVER;
    a->cbid = call->cbid;
    a->start = call->scratch[0];
    a->end = end;
    a->processId = (uint32_t)getpid();
    a->threadId = g_cupti.thread_id_type == CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM ? (uint32_t)call->tid
                                                                                 : (uint32_t)pthread_self();
    a->correlationId = call->correlation;
    a->returnValue = (uint32_t)result;
    commit_locked(sizeof(*a));
}

CUPTI_HIDDEN void cupti_activity_reset_locked(void)
{
    g_buf = NULL;
    g_buf_size = g_buf_used = 0;
    g_nfull = 0;
    memset(g_streams, 0, sizeof(g_streams));
    memset(g_contexts, 0, sizeof(g_contexts));
    while (g_names) {
        struct name *n = g_names;
        g_names = n->next;
        free(n->s);
        free(n);
    }
    g_cupti.dropped = 0;
}

/* ------------------------------------------------------------------ */
/* Activity API                                                        */
/* ------------------------------------------------------------------ */

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind)
{
    if (kind != CUPTI_ACTIVITY_KIND_MEMCPY && kind != CUPTI_ACTIVITY_KIND_MEMSET &&
        kind != CUPTI_ACTIVITY_KIND_KERNEL && kind != CUPTI_ACTIVITY_KIND_DRIVER &&
        kind != CUPTI_ACTIVITY_KIND_RUNTIME && kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
        return CUPTI_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&g_cupti.lock);
    CUptiResult rc = cupti_init_locked();
    if (rc == CUPTI_SUCCESS) g_cupti.kinds |= 1u << kind;
    /* Enabling DRIVER overrides earlier per-cbid settings. */
    if (rc == CUPTI_SUCCESS && kind == CUPTI_ACTIVITY_KIND_DRIVER)
        memset(g_cupti.driver_api_off, 0, sizeof(g_cupti.driver_api_off));
    pthread_mutex_unlock(&g_cupti.lock);
    return rc;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind)
{
    if ((unsigned)kind >= 32) return CUPTI_ERROR_INVALID_KIND;
    pthread_mutex_lock(&g_cupti.lock);
    g_cupti.kinds &= ~(1u << kind);
    pthread_mutex_unlock(&g_cupti.lock);
    return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t enable)
{
    if (cbid >= SIM_CBID_SIZE) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_cupti.lock);
    CUptiResult rc = cupti_init_locked();
    if (rc == CUPTI_SUCCESS) g_cupti.driver_api_off[cbid] = enable ? 0 : 1;
    pthread_mutex_unlock(&g_cupti.lock);
    return rc;
}

/* Accepted and remembered nowhere: the runtime domain is not simulated
 * (the simulated libcudart calls the driver's exported functions, which
 * are observed as driver calls). */
CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable)
{
    (void)enable;
    return cbid < SIM_RUNTIME_CBID_SIZE ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc funcBufferRequested,
                                                                 CUpti_BuffersCallbackCompleteFunc funcBufferCompleted)
{
    if (funcBufferRequested == NULL || funcBufferCompleted == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_cupti.lock);
    CUptiResult rc = cupti_init_locked();
    if (rc == CUPTI_SUCCESS) {
        g_cupti.request = funcBufferRequested;
        g_cupti.complete = funcBufferCompleted;
    }
    pthread_mutex_unlock(&g_cupti.lock);
    return rc;
}

/*
 * Hands the buffer being filled (if it holds any record) and every full one
 * to the client, and returns once no delivery is in progress on another
 * thread.  Every simulated record is complete when written, so the flag
 * changes nothing.
 */
CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag)
{
    (void)flag;
    pthread_mutex_lock(&g_cupti.lock);
    if (g_cupti.complete == NULL) {
        pthread_mutex_unlock(&g_cupti.lock);
        return CUPTI_ERROR_INVALID_OPERATION;
    }
    if (g_buf != NULL && g_buf_used > 0 && g_nfull < MAX_FULL) {
        g_full[g_nfull].buf = g_buf;
        g_full[g_nfull].size = g_buf_size;
        g_full[g_nfull].used = g_buf_used;
        g_nfull++;
        g_buf = NULL;
    }
    pthread_mutex_unlock(&g_cupti.lock);
    cupti_deliver();
    pthread_mutex_lock(&g_cupti.lock);
    const int mine = t_cupti_site == SIM_CUPTI_SITE_BUFFER ? 1 : 0;
    while (g_cupti.delivering > mine) pthread_cond_wait(&g_cupti.delivered, &g_cupti.lock);
    pthread_mutex_unlock(&g_cupti.lock);
    return CUPTI_SUCCESS;
}
