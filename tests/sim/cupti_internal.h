/*
 * cupti_internal.h - what the two files of the simulated libcupti.so.13
 * share: cupti.c (subscriber, callbacks, observer, finalize) and
 * cupti_activity.c (activity kinds, buffers, records).  README.md is the
 * contract.
 */
#ifndef GPUTRACE_CUPTI_INTERNAL_H
#define GPUTRACE_CUPTI_INTERNAL_H

#include "cupti_sim.h"
#include "sim_observer.h"

#include <pthread.h>
#include <stdint.h>

#define CUPTI_EXPORT __attribute__((visibility("default")))
#define CUPTI_HIDDEN __attribute__((visibility("hidden")))

/* Everything below is guarded by g_cupti.lock unless said otherwise. */
struct cupti_state {
    pthread_mutex_t lock;
    pthread_cond_t delivered;      /* a buffer delivery ended */
    int observing;                 /* observer installed in libcuda */
    /* callback API */
    int subscribed;
    CUpti_CallbackFunc callback;
    void *userdata;
    uint8_t driver_cb[SIM_CBID_SIZE];    /* callbacks enabled per driver cbid */
    /* activity API */
    uint32_t kinds;                      /* bit k: CUpti_ActivityKind k */
    uint8_t driver_api_off[SIM_CBID_SIZE]; /* cuptiActivityEnableDriverApi(cbid, 0) since DRIVER was enabled */
    CUpti_BuffersCallbackRequestFunc request;
    CUpti_BuffersCallbackCompleteFunc complete;
    CUpti_TimestampCallbackFunc timestamp; /* also read with __atomic builtins */
    int thread_id_type;
    uint64_t dropped;                    /* since the last cuptiActivityGetNumDroppedRecords */
    int delivering;                      /* buffer deliveries in progress */
    /* statistics (sim_cupti_get_state) */
    uint32_t subscribes, refused_subscribes, finalizes, finalize_site;
    uint64_t records, dropped_total, buffers_completed;
};

extern CUPTI_HIDDEN struct cupti_state g_cupti;

/* Threads inside a client callback (subscriber, buffer or timestamp);
 * __atomic builtins.  cuptiFinalize waits for the others to leave. */
extern CUPTI_HIDDEN int g_cupti_inflight;

/* Which client callback this thread is in (enum sim_cupti_site; 0 none). */
extern CUPTI_HIDDEN __thread int t_cupti_site;

CUPTI_HIDDEN void cupti_cb_enter(int site);
CUPTI_HIDDEN void cupti_cb_leave(int saved_site);

/* Installs the observer in libcuda if not yet done (under the lock).
 * CUPTI_ERROR_NOT_INITIALIZED when no simulated libcuda.so.1 is loaded. */
CUPTI_HIDDEN CUptiResult cupti_init_locked(void);

/* Now, on the records' clock: the client's timestamp callback, else
 * CLOCK_REALTIME (CUPTI's default on Linux).  Not under the lock. */
CUPTI_HIDDEN uint64_t cupti_now(void);

/* cupti_activity.c: the observer's work and exit records, under the lock;
 * then deliver full buffers with cupti_deliver (not under the lock). */
CUPTI_HIDDEN void cupti_record_work_locked(const struct sim_obs_call *call, const struct sim_obs_work *w);
CUPTI_HIDDEN void cupti_record_api_locked(const struct sim_obs_call *call, uint64_t end, int result);
CUPTI_HIDDEN void cupti_deliver(void);
/* Forgets buffers, names, streams, contexts (cuptiFinalize). */
CUPTI_HIDDEN void cupti_activity_reset_locked(void);

#endif /* GPUTRACE_CUPTI_INTERNAL_H */
