/*
 * cupti.c - simulated CUPTI (libcupti.so.13) for gputrace tests: the
 * callback API (one subscriber), the observer that libcuda reports its
 * calls to, timestamps, thread ids, cuptiFinalize, walking a buffer's
 * records, and the test hook sim_cupti_get_state.  Activity kinds, records
 * and buffers: cupti_activity.c.
 * README.md ("libcupti.so.13") is the contract.
 */
#define _GNU_SOURCE
#include "cupti_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

CUPTI_HIDDEN struct cupti_state g_cupti = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .delivered = PTHREAD_COND_INITIALIZER,
};
CUPTI_HIDDEN int g_cupti_inflight;
CUPTI_HIDDEN __thread int t_cupti_site;

struct CUpti_Subscriber_st {
    uint64_t magic;
};
#define SUBSCRIBER_MAGIC 0x4255534954505543ULL /* "CUPTISUB" */
static struct CUpti_Subscriber_st g_subscriber = { SUBSCRIBER_MAGIC };

CUPTI_HIDDEN void cupti_cb_enter(int site)
{
    __atomic_add_fetch(&g_cupti_inflight, 1, __ATOMIC_ACQ_REL);
    t_cupti_site = site;
}

CUPTI_HIDDEN void cupti_cb_leave(int saved_site)
{
    t_cupti_site = saved_site;
    __atomic_sub_fetch(&g_cupti_inflight, 1, __ATOMIC_ACQ_REL);
}

CUPTI_HIDDEN uint64_t cupti_now(void)
{
    CUpti_TimestampCallbackFunc ts = __atomic_load_n(&g_cupti.timestamp, __ATOMIC_ACQUIRE);
    if (ts != NULL) {
        int saved = t_cupti_site;
        cupti_cb_enter(saved);
        uint64_t v = ts();
        cupti_cb_leave(saved);
        return v;
    }
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

/* ------------------------------------------------------------------ */
/* The observer: libcuda's calls                                       */
/* ------------------------------------------------------------------ */

/* Calls the subscriber's callback for this call and site, if enabled. */
static void api_callback(struct sim_obs_call *call, CUpti_ApiCallbackSite site, const int *result)
{
    pthread_mutex_lock(&g_cupti.lock);
    CUpti_CallbackFunc cb = NULL;
    void *ud = NULL;
    if (g_cupti.subscribed && call->cbid < SIM_CBID_SIZE && g_cupti.driver_cb[call->cbid]) {
        cb = g_cupti.callback;
        ud = g_cupti.userdata;
    }
    const int saved = t_cupti_site;
    if (cb) cupti_cb_enter(site == CUPTI_API_ENTER ? SIM_CUPTI_SITE_API_ENTER : SIM_CUPTI_SITE_API_EXIT);
    pthread_mutex_unlock(&g_cupti.lock);
    if (cb == NULL) return;
    CUpti_CallbackData d;
    memset(&d, 0, sizeof(d));
    d.callbackSite = site;
    d.functionName = call->function;
    d.functionReturnValue = site == CUPTI_API_EXIT ? (const void *)result : NULL;
    d.symbolName = call->symbol;
    d.context = call->context;
    d.correlationData = &call->scratch[2];
    d.correlationId = call->correlation;
    cb(ud, CUPTI_CB_DOMAIN_DRIVER_API, call->cbid, &d);
    cupti_cb_leave(saved);
}

static void obs_enter(struct sim_obs_call *call)
{
    /* The entry callback first: a subscriber's own start (read in it) is
     * then never later than the API record's start. */
    api_callback(call, CUPTI_API_ENTER, NULL);
    call->scratch[0] = cupti_now(); /* the API record's start */
}

static void obs_work(struct sim_obs_call *call, const struct sim_obs_work *w)
{
    pthread_mutex_lock(&g_cupti.lock);
    cupti_record_work_locked(call, w);
    pthread_mutex_unlock(&g_cupti.lock);
    cupti_deliver();
}

static void obs_exit(struct sim_obs_call *call, int result)
{
    uint64_t end = cupti_now();
    pthread_mutex_lock(&g_cupti.lock);
    cupti_record_api_locked(call, end, result);
    pthread_mutex_unlock(&g_cupti.lock);
    cupti_deliver();
    api_callback(call, CUPTI_API_EXIT, &result);
}

static const struct sim_observer k_observer = {
    SIM_OBSERVER_VERSION, obs_enter, obs_work, obs_exit,
};

static void (*g_set_observer)(const struct sim_observer *);

CUPTI_HIDDEN CUptiResult cupti_init_locked(void)
{
    if (g_cupti.observing) return CUPTI_SUCCESS;
    if (g_set_observer == NULL) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (h == NULL) return CUPTI_ERROR_NOT_INITIALIZED;
        g_set_observer = (void (*)(const struct sim_observer *))dlsym(h, "sim_cuda_set_observer");
        if (g_set_observer == NULL) {
            dlclose(h);
            return CUPTI_ERROR_NOT_INITIALIZED;
        }
        /* h stays open: libcuda stays loaded while CUPTI may observe it. */
    }
    g_set_observer(&k_observer);
    g_cupti.observing = 1;
    return CUPTI_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Callback API                                                        */
/* ------------------------------------------------------------------ */

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
                                                 void *userdata)
{
    if (subscriber == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_cupti.lock);
    CUptiResult rc = cupti_init_locked();
    if (rc == CUPTI_SUCCESS && g_cupti.subscribed) {
        g_cupti.refused_subscribes++;
        rc = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    }
    if (rc == CUPTI_SUCCESS) {
        g_cupti.subscribed = 1;
        g_cupti.callback = callback;
        g_cupti.userdata = userdata;
        memset(g_cupti.driver_cb, 0, sizeof(g_cupti.driver_cb));
        g_cupti.subscribes++;
        *subscriber = &g_subscriber;
    }
    pthread_mutex_unlock(&g_cupti.lock);
    return rc;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle subscriber)
{
    pthread_mutex_lock(&g_cupti.lock);
    CUptiResult rc = CUPTI_ERROR_INVALID_PARAMETER;
    if (subscriber == &g_subscriber && g_cupti.subscribed) {
        g_cupti.subscribed = 0;
        g_cupti.callback = NULL;
        g_cupti.userdata = NULL;
        memset(g_cupti.driver_cb, 0, sizeof(g_cupti.driver_cb));
        rc = CUPTI_SUCCESS;
    }
    pthread_mutex_unlock(&g_cupti.lock);
    return rc;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                                      CUpti_CallbackDomain domain, CUpti_CallbackId cbid)
{
    pthread_mutex_lock(&g_cupti.lock);
    CUptiResult rc = CUPTI_SUCCESS;
    if (subscriber != &g_subscriber || !g_cupti.subscribed || domain <= CUPTI_CB_DOMAIN_INVALID ||
        domain >= CUPTI_CB_DOMAIN_SIZE)
        rc = CUPTI_ERROR_INVALID_PARAMETER;
    else if (domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid < SIM_CBID_SIZE)
        g_cupti.driver_cb[cbid] = enable ? 1 : 0;
    /* Other domains are accepted and never called back (not simulated). */
    pthread_mutex_unlock(&g_cupti.lock);
    return rc;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                                    CUpti_CallbackDomain domain)
{
    pthread_mutex_lock(&g_cupti.lock);
    CUptiResult rc = CUPTI_SUCCESS;
    if (subscriber != &g_subscriber || !g_cupti.subscribed || domain <= CUPTI_CB_DOMAIN_INVALID ||
        domain >= CUPTI_CB_DOMAIN_SIZE)
        rc = CUPTI_ERROR_INVALID_PARAMETER;
    else if (domain == CUPTI_CB_DOMAIN_DRIVER_API)
        memset(g_cupti.driver_cb, enable ? 1 : 0, sizeof(g_cupti.driver_cb));
    pthread_mutex_unlock(&g_cupti.lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Timestamps, thread ids, finalize                                    */
/* ------------------------------------------------------------------ */

static int env_set(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc funcTimestamp)
{
    if (funcTimestamp == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
    if (env_set("GPUTRACE_SIM_CUPTI_NO_TIMESTAMP_CALLBACK")) return CUPTI_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&g_cupti.lock);
    CUptiResult rc = cupti_init_locked();
    if (rc == CUPTI_SUCCESS) __atomic_store_n(&g_cupti.timestamp, funcTimestamp, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_cupti.lock);
    return rc;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t *timestamp)
{
    if (timestamp == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
    *timestamp = cupti_now();
    return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiSetThreadIdType(CUpti_ActivityThreadIdType type)
{
    if (type != CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT && type != CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)
        return CUPTI_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&g_cupti.lock);
    g_cupti.thread_id_type = (int)type;
    pthread_mutex_unlock(&g_cupti.lock);
    return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiGetThreadIdType(CUpti_ActivityThreadIdType *type)
{
    if (type == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_cupti.lock);
    *type = (CUpti_ActivityThreadIdType)g_cupti.thread_id_type;
    pthread_mutex_unlock(&g_cupti.lock);
    return CUPTI_SUCCESS;
}

/*
 * Detaches CUPTI: the observer leaves libcuda, and after every other thread
 * has left the client's callbacks (at most ~5 s), subscriber, kinds,
 * callbacks, buffers (undelivered ones are forgotten) and the timestamp
 * callback are reset.  Allowed anywhere (as in CUPTI); where it was called
 * from is kept for sim_cupti_get_state.  A later CUPTI call starts afresh.
 */
CUPTI_EXPORT CUptiResult CUPTIAPI cuptiFinalize(void)
{
    const int self = t_cupti_site != 0 ? 1 : 0;
    pthread_mutex_lock(&g_cupti.lock);
    g_cupti.finalizes++;
    g_cupti.finalize_site = self ? (uint32_t)t_cupti_site : SIM_CUPTI_SITE_OUTSIDE;
    if (g_cupti.observing && g_set_observer) g_set_observer(NULL);
    g_cupti.observing = 0;
    g_cupti.subscribed = 0;
    g_cupti.callback = NULL;
    g_cupti.userdata = NULL;
    g_cupti.kinds = 0;
    memset(g_cupti.driver_cb, 0, sizeof(g_cupti.driver_cb));
    memset(g_cupti.driver_api_off, 0, sizeof(g_cupti.driver_api_off));
    pthread_mutex_unlock(&g_cupti.lock);
    for (int i = 0; i < 50000 && __atomic_load_n(&g_cupti_inflight, __ATOMIC_ACQUIRE) > self; i++) {
        struct timespec ts = { 0, 100000 };
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&g_cupti.lock);
    g_cupti.request = NULL;
    g_cupti.complete = NULL;
    __atomic_store_n(&g_cupti.timestamp, NULL, __ATOMIC_RELEASE);
    g_cupti.thread_id_type = CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT;
    cupti_activity_reset_locked();
    pthread_mutex_unlock(&g_cupti.lock);
    return CUPTI_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Reading buffers (cupti_activity.c writes them)                      */
/* ------------------------------------------------------------------ */

static size_t record_size(CUpti_ActivityKind kind)
{
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_DRIVER: return sizeof(CUpti_ActivityAPI);
    default: return 0;
    }
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t *buffer, size_t validBufferSizeBytes,
                                                             CUpti_Activity **record)
{
    if (buffer == NULL || record == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
    size_t off = 0;
    if (*record != NULL) {
        const uint8_t *r = (const uint8_t *)*record;
        if (r < buffer || (size_t)(r - buffer) + 4 > validBufferSizeBytes) return CUPTI_ERROR_INVALID_PARAMETER;
        size_t sz = record_size((*record)->kind);
        if (sz == 0) return CUPTI_ERROR_INVALID_KIND;
        off = (size_t)(r - buffer) + sz;
    }
    if (off + 4 > validBufferSizeBytes) return CUPTI_ERROR_MAX_LIMIT_REACHED;
    CUpti_Activity *next = (CUpti_Activity *)(buffer + off);
    size_t sz = record_size(next->kind);
    if (sz == 0 || off + sz > validBufferSizeBytes) return CUPTI_ERROR_INVALID_KIND;
    *record = next;
    return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(void *context, uint32_t streamId, size_t *dropped)
{
    (void)context;
    (void)streamId;
    if (dropped == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_cupti.lock);
    *dropped = (size_t)g_cupti.dropped;
    g_cupti.dropped = 0;
    pthread_mutex_unlock(&g_cupti.lock);
    return CUPTI_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Version, strings, test hook                                         */
/* ------------------------------------------------------------------ */

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiGetVersion(uint32_t *version)
{
    if (version == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
    const char *v = getenv("GPUTRACE_SIM_CUPTI_VERSION");
    *version = v && *v ? (uint32_t)strtoul(v, NULL, 10) : SIM_CUPTI_API_VERSION;
    return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char **str)
{
    if (str == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
    switch (result) {
    case CUPTI_SUCCESS: *str = "CUPTI_SUCCESS"; break;
    case CUPTI_ERROR_INVALID_PARAMETER: *str = "CUPTI_ERROR_INVALID_PARAMETER"; break;
    case CUPTI_ERROR_INVALID_OPERATION: *str = "CUPTI_ERROR_INVALID_OPERATION"; break;
    case CUPTI_ERROR_MAX_LIMIT_REACHED: *str = "CUPTI_ERROR_MAX_LIMIT_REACHED"; break;
    case CUPTI_ERROR_NOT_INITIALIZED: *str = "CUPTI_ERROR_NOT_INITIALIZED"; break;
    case CUPTI_ERROR_INVALID_KIND: *str = "CUPTI_ERROR_INVALID_KIND"; break;
    case CUPTI_ERROR_NOT_SUPPORTED: *str = "CUPTI_ERROR_NOT_SUPPORTED"; break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
        *str = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED";
        break;
    case CUPTI_ERROR_UNKNOWN: *str = "CUPTI_ERROR_UNKNOWN"; break;
    default: *str = NULL; return CUPTI_ERROR_INVALID_PARAMETER;
    }
    return CUPTI_SUCCESS;
}

CUPTI_EXPORT int sim_cupti_get_state(struct sim_cupti_state *out)
{
    pthread_mutex_lock(&g_cupti.lock);
    memset(out, 0, sizeof(*out));
    out->subscribed = (uint32_t)g_cupti.subscribed;
    out->subscribes = g_cupti.subscribes;
    out->refused_subscribes = g_cupti.refused_subscribes;
    out->finalizes = g_cupti.finalizes;
    out->finalize_site = g_cupti.finalize_site;
    out->observing = (uint32_t)g_cupti.observing;
    out->kinds = g_cupti.kinds;
    out->timestamp_callback = __atomic_load_n(&g_cupti.timestamp, __ATOMIC_ACQUIRE) != NULL;
    out->records = g_cupti.records;
    out->dropped = g_cupti.dropped_total;
    out->buffers_completed = g_cupti.buffers_completed;
    pthread_mutex_unlock(&g_cupti.lock);
    return 0;
}
