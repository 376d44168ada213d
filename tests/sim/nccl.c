/*
 * nccl.c - simulated NCCL (libnccl.so.2) for gputrace tests: the API surface.
 *
 * Built with -fvisibility=hidden; the public API is exported exactly the way
 * NCCL's NCCL_API macro (PROFAPI build) does it: ncclX is a WEAK default-
 * visibility symbol and pncclX a GLOBAL alias of it (same address).
 *
 * An exported function never calls another exported function (ncclBcast
 * does not call ncclBroadcast, ...), so every traced call is one uprobe hit.
 * Nothing is communicated. A communicator of several ranks (in several
 * processes or threads) synchronises them: a collective returns once every
 * rank has entered it (nccl_rdv.c). The communicator's layout and counters
 * are in nccl_comm.h; README.md is the contract.
 */
#define _GNU_SOURCE
#include "nccl_comm.h"
#include "nccl_hash.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define NCCL_API(ret, func, args...)                                    \
    __attribute__((visibility("default"))) __attribute__((alias(#func))) \
    ret p##func(args);                                                  \
    __attribute__((visibility("default"))) __attribute__((weak))        \
    ret func(args)

/* Real NCCL carries this literal (its VERSION_STRING) in .rodata: a reader of
 * the library file can learn the version, hence the commHash function, from it. */
#ifndef SIM_FOREIGN_NCCL
__attribute__((used)) static const char k_version_string[] = "NCCL version 2.28.3+cuda13.0";
#endif
/* SIM_FOREIGN_NCCL: a build gputrace does not know (a fork, a new release):
 * no version string, and the collectives' NVTX payload does not read
 * commHash, so neither the commHash function nor its offset can be found. */

/*
 * The NVTX range every NCCL collective opens first
 * (NVTX3_FUNC_WITH_PARAMS): its payload carries comm->commHash, read
 * before anything else of the communicator, then the bytes and the op. The
 * simulator keeps the last payload per thread instead of calling NVTX.
 */
static int type_ok(ncclDataType_t t);
static size_t type_size(ncclDataType_t t);

struct nvtx_payload {
    uint64_t comm_hash;
    size_t bytes;
    int op;
};
static __thread struct nvtx_payload t_nvtx;

__attribute__((noinline)) static void nvtx_range(const char *func, uint64_t comm_hash, size_t bytes, int op)
{
    (void)func;
    t_nvtx = (struct nvtx_payload){ comm_hash, bytes, op };
    __asm__ volatile("" ::: "memory");
}

#ifdef SIM_FOREIGN_NCCL
#define NVTX_PAYLOAD(name, comm, count, datatype, op)                                                     \
    nvtx_range(name, 0, type_ok(datatype) ? (count) * type_size(datatype) : 0, (op))
#else
#define NVTX_PAYLOAD(name, comm, count, datatype, op)                                                     \
    nvtx_range(name, (comm) != NULL ? (comm)->commHash : 0,                                               \
               type_ok(datatype) ? (count) * type_size(datatype) : 0, (op))
#endif

static __thread int t_group_depth;
static __thread char t_last_error[SIM_LAST_ERROR_BYTES];

/* Work deferred to the outermost ncclGroupEnd of the calling thread. */
enum pending_kind { PENDING_INIT, PENDING_COLL, PENDING_P2P };
struct pending {
    struct ncclComm *comm;
    enum pending_kind kind;
    enum sim_func func;
    const char *op;
};
static __thread struct pending *t_pending;
static __thread int t_npending, t_cap;

static int comm_ok(const struct ncclComm *c)
{
    return c != NULL && c->magic == SIM_COMM_MAGIC;
}

static int type_ok(ncclDataType_t t)
{
    return (int)t >= 0 && (int)t < (int)ncclNumTypes;
}

static int op_ok(ncclRedOp_t op)
{
    return (int)op >= 0 && (int)op < (int)ncclNumOps;
}

static int buf_ok(const void *p, size_t count)
{
    return p != NULL || count == 0;
}

static size_t type_size(ncclDataType_t t)
{
    static const unsigned char sizes[ncclNumTypes] = { 1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1 };
    return sizes[t];
}

/* Keeps the calling thread's copy of a communicator's error for ncclGetLastError(NULL). */
static ncclResult_t fail(struct ncclComm *c, ncclResult_t res)
{
    if (c != NULL) {
        snprintf(t_last_error, sizeof(t_last_error), "%s", c->priv.last_error);
        c->asyncResult = res;
    }
    return res;
}

static int push_pending(struct ncclComm *c, enum pending_kind kind, enum sim_func func, const char *op)
{
    if (t_npending == t_cap) {
        int cap = t_cap ? 2 * t_cap : 16;
        struct pending *p = realloc(t_pending, (size_t)cap * sizeof(*p));
        if (p == NULL) return 0;
        t_pending = p;
        t_cap = cap;
    }
    t_pending[t_npending++] = (struct pending){ c, kind, func, op };
    return 1;
}

/* ------------------------------------------------------------------ */

NCCL_API(ncclResult_t, ncclGetVersion, int *version);
ncclResult_t ncclGetVersion(int *version)
{
    if (version == NULL) return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

/* 128 random bytes (real NCCL: 8 random bytes, the root's socket address, zeros). */
static int random_id(ncclUniqueId *id)
{
    size_t got = 0;
    while (got < sizeof(id->internal)) {
        ssize_t n = getrandom(id->internal + got, sizeof(id->internal) - got, 0);
        if (n <= 0) return 0;
        got += (size_t)n;
    }
    return 1;
}

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    if (uniqueId == NULL) return ncclInvalidArgument;
    return random_id(uniqueId) ? ncclSuccess : ncclSystemError;
}

static unsigned long bus_id(const struct ncclComm *c)
{
    return ((unsigned long)c->cudaDev + 1) << 12;
}

static ncclResult_t comm_init(ncclComm_t *comm, int nranks, uint64_t hash, int rank, int blocking,
                              const char *func)
{
    if (comm == NULL || nranks < 1 || nranks > SIM_MAX_RANKS || rank < 0 || rank >= nranks)
        return ncclInvalidArgument;
    struct ncclComm *c = sim_comm_alloc(nranks, rank, hash, blocking);
    if (c == NULL) return ncclSystemError;
    sim_info(c->cudaDev, "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init START",
             func, (void *)c, rank, nranks, c->cudaDev, c->cudaDev, bus_id(c), (unsigned long long)hash);
    ncclResult_t res = ncclSuccess;
    if (nranks > 1) {
        res = sim_rdv_attach(c);
        if (res == ncclSuccess) res = sim_rdv_join(c);
        if (res == ncclSuccess) {
            if (t_group_depth > 0) {
                /* Grouped inits complete together at ncclGroupEnd. */
                if (!push_pending(c, PENDING_INIT, 0, func)) res = ncclSystemError;
                else {
                    *comm = c;
                    return ncclSuccess;
                }
            } else {
                res = sim_rdv_wait_joined(c);
            }
        }
    }
    if (res != ncclSuccess) {
        fail(c, res);
        sim_comm_free(c);
        *comm = NULL;
        return res;
    }
    sim_info(c->cudaDev, "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init COMPLETE",
             func, (void *)c, rank, nranks, c->cudaDev, c->cudaDev, bus_id(c), (unsigned long long)hash);
    *comm = c;
    return ncclSuccess;
}

static int config_blocking(const ncclConfig_t *config, int *blocking)
{
    *blocking = 1;
    if (config == NULL) return 1;
    if (config->magic != NCCL_API_MAGIC || config->size < offsetof(ncclConfig_t, netName)) return 0;
    if (config->blocking != NCCL_CONFIG_UNDEF_INT) *blocking = config->blocking;
    return 1;
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config)
{
    int blocking;
    if (!config_blocking(config, &blocking)) return ncclInvalidArgument;
    return comm_init(comm, nranks, sim_get_hash(commId.internal, NCCL_UNIQUE_ID_BYTES), rank, blocking,
                     "ncclCommInitRankConfig");
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    return comm_init(comm, nranks, sim_get_hash(commId.internal, NCCL_UNIQUE_ID_BYTES), rank, 1, "ncclCommInitRank");
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks, int myrank, int nId, ncclUniqueId *commIds, ncclConfig_t *config);
ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId, ncclUniqueId *commIds,
                                      ncclConfig_t *config)
{
    int blocking;
    if (nId < 1 || nId > nranks || commIds == NULL || !config_blocking(config, &blocking)) return ncclInvalidArgument;
    return comm_init(newcomm, nranks, sim_get_hash(commIds[0].internal, NCCL_UNIQUE_ID_BYTES), myrank, blocking,
                     "ncclCommInitRankScalable");
}

NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comm, int ndev, const int *devlist);
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
    ncclUniqueId id;
    if (comm == NULL || ndev < 1 || ndev > SIM_MAX_RANKS) return ncclInvalidArgument;
    if (!random_id(&id)) return ncclSystemError;
    const uint64_t hash = sim_get_hash(id.internal, NCCL_UNIQUE_ID_BYTES);
    for (int i = 0; i < ndev; i++) {
        comm[i] = sim_comm_alloc(ndev, i, hash, 1);
        if (comm[i] == NULL) {
            for (int j = 0; j < i; j++) sim_comm_free(comm[j]);
            return ncclSystemError;
        }
        comm[i]->cudaDev = devlist ? devlist[i] : i;
    }
    if (ndev > 1) {
        /* One process holds every rank: a process-local rendezvous. */
        ncclResult_t res = sim_rdv_attach_local(comm, ndev);
        for (int i = 0; res == ncclSuccess && i < ndev; i++) res = sim_rdv_join(comm[i]);
        for (int i = 0; res == ncclSuccess && i < ndev; i++) res = sim_rdv_wait_joined(comm[i]);
        if (res != ncclSuccess) {
            for (int i = 0; i < ndev; i++) sim_comm_free(comm[i]);
            return res;
        }
    }
    for (int i = 0; i < ndev; i++)
        sim_info(comm[i]->cudaDev,
                 "ncclCommInitAll comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init COMPLETE",
                 (void *)comm[i], i, ndev, comm[i]->cudaDev, comm[i]->cudaDev, bus_id(comm[i]),
                 (unsigned long long)hash);
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
{
    int blocking;
    if (!comm_ok(comm) || newcomm == NULL || (color < 0 && color != NCCL_SPLIT_NOCOLOR) ||
        !config_blocking(config, &blocking))
        return ncclInvalidArgument;
    if (comm->asyncResult != ncclSuccess) return comm->asyncResult;
    *newcomm = NULL;
    const int n = ++comm->priv.split_count;
    int nranks = 1, rank = 0;
    if (comm->nRanks > 1) {
        int colors[SIM_MAX_RANKS], keys[SIM_MAX_RANKS];
        ncclResult_t res = sim_rdv_split_exchange(comm, n, color, key, colors, keys);
        if (res != ncclSuccess) return fail(comm, res);
        /* Members: the same color; new rank order: key, then parent rank. */
        nranks = 0;
        for (int q = 0; q < comm->nRanks; q++) {
            if (colors[q] != color) continue;
            nranks++;
            if (keys[q] < key || (keys[q] == key && q < comm->rank)) rank++;
        }
    }
    if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
    const uint64_t hash = sim_split_hash(comm->commHash, n, color);
    struct ncclComm *c = sim_comm_alloc(nranks, rank, hash, blocking);
    if (c == NULL) return ncclSystemError;
    c->cudaDev = comm->cudaDev;
    ncclResult_t res = ncclSuccess;
    if (nranks > 1) {
        res = sim_rdv_attach(c);
        if (res == ncclSuccess) res = sim_rdv_join(c);
        if (res == ncclSuccess) res = sim_rdv_wait_joined(c);
    }
    if (res != ncclSuccess) {
        fail(c, res);
        sim_comm_free(c);
        return res;
    }
    sim_info(c->cudaDev,
             "ncclCommSplit comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx parent %p splitCount %d color %d key %d - Init COMPLETE",
             (void *)c, rank, nranks, c->cudaDev, c->cudaDev, bus_id(c), (void *)comm, n, color, key);
    *newcomm = c;
    return ncclSuccess;
}

static ncclResult_t comm_free(ncclComm_t comm, const char *what)
{
    if (!comm_ok(comm)) return ncclInvalidArgument;
    sim_info(comm->cudaDev, "comm %p rank %d nranks %d cudaDev %d busId %lx - %s COMPLETE", (void *)comm, comm->rank,
             comm->nRanks, comm->cudaDev, bus_id(comm), what);
    sim_comm_free(comm);
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    return comm_free(comm, "Destroy");
}

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    return comm_free(comm, "Abort");
}

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    if (!comm_ok(comm) || count == NULL) return ncclInvalidArgument;
    *count = comm->nRanks;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    if (!comm_ok(comm) || rank == NULL) return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    if (!comm_ok(comm) || device == NULL) return ncclInvalidArgument;
    *device = comm->cudaDev;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (!comm_ok(comm) || asyncError == NULL) return ncclInvalidArgument;
    *asyncError = (ncclResult_t)comm->asyncResult;
    return ncclSuccess;
}

NCCL_API(const char *, ncclGetLastError, ncclComm_t comm);
const char *ncclGetLastError(ncclComm_t comm)
{
    return comm_ok(comm) ? comm->priv.last_error : t_last_error;
}

NCCL_API(const char *, ncclGetErrorString, ncclResult_t result);
const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

/* ------------------------------------------------------------------ */
/* Collectives and point-to-point                                      */
/* ------------------------------------------------------------------ */

static const char *const k_func_names[SIM_NUM_FUNCS] = { "Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                                         "AllReduce" };

/*
 * One launch of a multi-rank communicator, as NCCL 2.28 counts it:
 * seqNumber[func] +1 per collective, collOpCount +ncoll, opCount +1 (real
 * NCCL advances opCount and collOpCount only for launches with proxy
 * operations, i.e. network transports; the simulator behaves as if every
 * multi-rank launch had some). A 1-rank communicator counts nothing: NCCL
 * turns its collectives into a memcpy without a kernel plan.
 */
/*
 * seqNumber[func] +1, atomically, as NCCL 2.28 does in the function of this
 * name (hostStreamPlanTask -> ncclProfilerStartTaskEvents), whether or not
 * a profiler is loaded: RAS compares these counters across ranks.
 */
__attribute__((noinline)) static void ncclProfilerStartTaskEvents(struct ncclComm *c, enum sim_func func)
{
    __atomic_fetch_add(&c->seqNumber[func], 1, __ATOMIC_RELAXED);
}

static void count_launch(struct ncclComm *c, int ncoll)
{
    if (c->nRanks > 1) {
        c->opCount++;
        c->collOpCount += (uint64_t)ncoll;
    }
}

/* A validated collective (rendezvous) or point-to-point call. */
static ncclResult_t issue(struct ncclComm *c, enum pending_kind kind, enum sim_func func, size_t bytes)
{
    c->apiCalls++;
    c->bytesQueued += bytes;
    if (c->asyncResult != ncclSuccess) return (ncclResult_t)c->asyncResult;
    const char *op = kind == PENDING_COLL ? k_func_names[func] : "p2p";
    if (t_group_depth > 0) return push_pending(c, kind, func, op) ? ncclSuccess : ncclSystemError;
    if (c->nRanks == 1) return ncclSuccess;
    count_launch(c, kind == PENDING_COLL);
    if (kind != PENDING_COLL) return ncclSuccess;
    ncclProfilerStartTaskEvents(c, func);
    uint64_t seq = sim_rdv_enter(c);
    ncclResult_t res = sim_rdv_wait(c, seq, op);
    return res == ncclSuccess ? res : fail(c, res);
}

/* The outermost ncclGroupEnd: finish grouped inits, launch grouped ops. */
static ncclResult_t flush_group(void)
{
    ncclResult_t first = ncclSuccess;
    const int n = t_npending;
    uint64_t seqs[n > 0 ? n : 1];
    for (int i = 0; i < n; i++) {
        struct pending *p = &t_pending[i];
        if (p->kind != PENDING_INIT) continue;
        ncclResult_t res = sim_rdv_wait_joined(p->comm);
        if (res != ncclSuccess) {
            fail(p->comm, res);
            if (first == ncclSuccess) first = res;
        } else {
            const struct ncclComm *c = p->comm;
            sim_info(c->cudaDev,
                     "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init COMPLETE",
                     p->op, (void *)c, c->rank, c->nRanks, c->cudaDev, c->cudaDev, bus_id(c),
                     (unsigned long long)c->commHash);
        }
    }
    /* One launch per communicator with grouped ops. */
    for (int i = 0; i < n; i++) {
        struct pending *p = &t_pending[i];
        if (p->kind == PENDING_INIT || p->comm->nRanks == 1) continue;
        int seen = 0, ncoll = 0;
        for (int j = 0; j < n; j++) {
            if (t_pending[j].comm != p->comm || t_pending[j].kind == PENDING_INIT) continue;
            if (j < i) seen = 1;
            ncoll += t_pending[j].kind == PENDING_COLL;
        }
        if (!seen) count_launch(p->comm, ncoll);
        if (p->kind == PENDING_COLL) {
            ncclProfilerStartTaskEvents(p->comm, p->func);
            seqs[i] = sim_rdv_enter(p->comm);
        }
    }
    for (int i = 0; i < n; i++) {
        struct pending *p = &t_pending[i];
        if (p->kind != PENDING_COLL || p->comm->nRanks == 1 || p->comm->asyncResult != ncclSuccess) continue;
        ncclResult_t res = sim_rdv_wait(p->comm, seqs[i], p->op);
        if (res != ncclSuccess && first == ncclSuccess) first = fail(p->comm, res);
    }
    t_npending = 0;
    return first;
}

static ncclResult_t coll_check(ncclComm_t comm, ncclDataType_t datatype)
{
    if (!comm_ok(comm)) return ncclInvalidArgument;
    if (!type_ok(datatype)) return ncclInvalidArgument;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    NVTX_PAYLOAD("Reduce", comm, count, datatype, op);
    ncclResult_t r = coll_check(comm, datatype);
    if (r != ncclSuccess) return r;
    if (!op_ok(op) || root < 0 || root >= comm->nRanks || !buf_ok(sendbuff, count)) return ncclInvalidArgument;
    if (comm->rank == root && !buf_ok(recvbuff, count)) return ncclInvalidArgument;
    return issue(comm, PENDING_COLL, SIM_REDUCE, count * type_size(datatype));
}

NCCL_API(ncclResult_t, ncclBcast, void *buff, size_t count, ncclDataType_t datatype, int root,
         ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                       ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    NVTX_PAYLOAD("Broadcast", comm, count, datatype, 0);
    ncclResult_t r = coll_check(comm, datatype);
    if (r != ncclSuccess) return r;
    if (root < 0 || root >= comm->nRanks || !buf_ok(buff, count)) return ncclInvalidArgument;
    return issue(comm, PENDING_COLL, SIM_BROADCAST, count * type_size(datatype));
}

NCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           int root, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    NVTX_PAYLOAD("Broadcast", comm, count, datatype, 0);
    ncclResult_t r = coll_check(comm, datatype);
    if (r != ncclSuccess) return r;
    if (root < 0 || root >= comm->nRanks || !buf_ok(recvbuff, count)) return ncclInvalidArgument;
    if (comm->rank == root && !buf_ok(sendbuff, count)) return ncclInvalidArgument;
    return issue(comm, PENDING_COLL, SIM_BROADCAST, count * type_size(datatype));
}

NCCL_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    NVTX_PAYLOAD("AllReduce", comm, count, datatype, op);
    ncclResult_t r = coll_check(comm, datatype);
    if (r != ncclSuccess) return r;
    if (!op_ok(op) || !buf_ok(sendbuff, count) || !buf_ok(recvbuff, count)) return ncclInvalidArgument;
    return issue(comm, PENDING_COLL, SIM_ALLREDUCE, count * type_size(datatype));
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff,
         size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
         cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff,
                               size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream)
{
    (void)stream;
    NVTX_PAYLOAD("ReduceScatter", comm, recvcount, datatype, op);
    ncclResult_t r = coll_check(comm, datatype);
    if (r != ncclSuccess) return r;
    if (!op_ok(op) || !buf_ok(sendbuff, recvcount) || !buf_ok(recvbuff, recvcount)) return ncclInvalidArgument;
    return issue(comm, PENDING_COLL, SIM_REDUCESCATTER, recvcount * type_size(datatype));
}

NCCL_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    NVTX_PAYLOAD("AllGather", comm, sendcount, datatype, 0);
    ncclResult_t r = coll_check(comm, datatype);
    if (r != ncclSuccess) return r;
    if (!buf_ok(sendbuff, sendcount) || !buf_ok(recvbuff, sendcount)) return ncclInvalidArgument;
    return issue(comm, PENDING_COLL, SIM_ALLGATHER, sendcount * type_size(datatype));
}

NCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    ncclResult_t r = coll_check(comm, datatype);
    if (r != ncclSuccess) return r;
    if (peer < 0 || peer >= comm->nRanks || !buf_ok(sendbuff, count)) return ncclInvalidArgument;
    return issue(comm, PENDING_P2P, 0, count * type_size(datatype));
}

NCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    ncclResult_t r = coll_check(comm, datatype);
    if (r != ncclSuccess) return r;
    if (peer < 0 || peer >= comm->nRanks || !buf_ok(recvbuff, count)) return ncclInvalidArgument;
    return issue(comm, PENDING_P2P, 0, count * type_size(datatype));
}

NCCL_API(ncclResult_t, ncclGroupStart, void);
ncclResult_t ncclGroupStart(void)
{
    t_group_depth++;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGroupEnd, void);
ncclResult_t ncclGroupEnd(void)
{
    if (t_group_depth <= 0) return ncclInvalidUsage;
    if (--t_group_depth > 0) return ncclSuccess;
    return flush_group();
}
