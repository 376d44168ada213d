/*
 * observe.c - the simulated libcuda's observer hook (include/sim_observer.h):
 * sim_cuda_set_observer, correlation ids, and the work descriptions the
 * observed entry points (SIM_OBSERVED in sim_internal.h) report.
 */
#define _GNU_SOURCE
#include "sim_internal.h"

#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

SIM_HIDDEN const struct sim_observer *g_observer;
static uint32_t g_next_correlation; /* __atomic builtins */

void sim_cuda_set_observer(const struct sim_observer *observer)
{
    if (observer != NULL && observer->version != SIM_OBSERVER_VERSION) return;
    __atomic_store_n(&g_observer, observer, __ATOMIC_RELEASE);
}

SIM_HIDDEN const char *sim_func_name(CUfunction f)
{
    if (f == NULL || (f->magic != MAGIC_FUNC && f->magic != MAGIC_KERNEL)) return NULL;
    return f->name;
}

SIM_HIDDEN void sim_obs_begin(const struct sim_observer *o, struct sim_obs_call *c, uint32_t cbid,
                              const char *function, const char *symbol)
{
    memset(c, 0, sizeof(*c));
    c->cbid = cbid;
    c->correlation = __atomic_add_fetch(&g_next_correlation, 1, __ATOMIC_RELAXED);
    c->tid = (pid_t)syscall(SYS_gettid);
    c->function = function;
    c->symbol = symbol;
    c->context = sim_current_ctx();
    o->enter(c);
}

SIM_HIDDEN uint32_t sim_obs_stream_id(CUstream s, pid_t tid)
{
    if (s == NULL || s == CU_STREAM_LEGACY) return 0;
    if (s == CU_STREAM_PER_THREAD) return SIM_OBS_PER_THREAD_STREAM | ((uint32_t)tid & 0xffffffu);
    return s->magic == MAGIC_STREAM ? s->id : 0;
}

SIM_HIDDEN void sim_obs_kernel(const struct sim_observer *o, struct sim_obs_call *c, CUfunction f,
                               unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shmem, CUstream s, int cooperative)
{
    struct sim_obs_work w;
    memset(&w, 0, sizeof(w));
    w.kind = SIM_OBS_KERNEL;
    w.stream_id = sim_obs_stream_id(s, c->tid);
    w.cooperative = (uint32_t)cooperative;
    w.name = sim_func_name(f);
    w.grid[0] = gx;
    w.grid[1] = gy;
    w.grid[2] = gz;
    w.block[0] = bx;
    w.block[1] = by;
    w.block[2] = bz;
    w.dynamic_shared = shmem;
    if (w.name != NULL) {
        w.static_shared = f->shared_size_bytes;
        w.registers = f->num_regs;
    }
    o->work(c, &w);
}

static void side(CUmemorytype t, uint64_t addr, uint32_t *type, uint32_t *pinned)
{
    if (t == 0) t = sim_memory_type(addr);
    *type = (uint32_t)t;
    *pinned = t == CU_MEMORYTYPE_HOST ? (uint32_t)sim_host_pinned(addr) : 0;
}

SIM_HIDDEN void sim_obs_copy(const struct sim_observer *o, struct sim_obs_call *c, CUmemorytype dt, uint64_t dst,
                             CUmemorytype st, uint64_t src, size_t n, CUstream s, int peer)
{
    struct sim_obs_work w;
    memset(&w, 0, sizeof(w));
    w.kind = SIM_OBS_MEMCPY;
    w.stream_id = sim_obs_stream_id(s, c->tid);
    side(dt, dst, &w.dst_type, &w.dst_pinned);
    side(st, src, &w.src_type, &w.src_pinned);
    w.peer = (uint32_t)peer;
    w.bytes = n;
    o->work(c, &w);
}

SIM_HIDDEN void sim_obs_memset(const struct sim_observer *o, struct sim_obs_call *c, unsigned value,
                               unsigned elem, size_t n, CUstream s)
{
    struct sim_obs_work w;
    memset(&w, 0, sizeof(w));
    w.kind = SIM_OBS_MEMSET;
    w.stream_id = sim_obs_stream_id(s, c->tid);
    w.value = value;
    w.element_size = elem;
    w.bytes = (uint64_t)n * elem;
    o->work(c, &w);
}
