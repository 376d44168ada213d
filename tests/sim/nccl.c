/*
 * nccl.c - simulated NCCL (libnccl.so.2) for gputrace tests.
 *
 * Built with -fvisibility=hidden; the public API is exported exactly the way
 * NCCL's NCCL_API macro (PROFAPI build) does it: ncclX is a WEAK default-
 * visibility symbol and pncclX a GLOBAL alias of it (same address).
 *
 * An exported function never calls another exported function (ncclBcast
 * does not call ncclBroadcast, ...), so every traced call is one uprobe hit.
 * Nothing is communicated; calls validate their arguments and return.
 */
#define _GNU_SOURCE
#include "nccl_sim.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NCCL_API(ret, func, args...)                                    \
    __attribute__((visibility("default"))) __attribute__((alias(#func))) \
    ret p##func(args);                                                  \
    __attribute__((visibility("default"))) __attribute__((weak))        \
    ret func(args)

#define COMM_MAGIC 0x4d4d4f434c43434eULL /* "NCCLCOMM" */
#define COMM_DEAD  0x444145444c43434eULL /* "NCCLDEAD" */

struct ncclComm {
    uint64_t magic;
    int nranks;
    int rank;
    int cudaDev;
    int blocking;
    ncclUniqueId id;
};

static uint64_t g_uid_seq;          /* __atomic */
static __thread int t_group_depth;

static int comm_ok(const struct ncclComm *c)
{
    return c != NULL && c->magic == COMM_MAGIC;
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

/* ------------------------------------------------------------------ */

NCCL_API(ncclResult_t, ncclGetVersion, int *version);
ncclResult_t ncclGetVersion(int *version)
{
    if (version == NULL) return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

/*
 * Unique id layout (documented in README.md):
 *   bytes 0..7    ASCII "gpusimid"
 *   bytes 8..15   little-endian uint64 sequence number (1 for the first call
 *                 in the process, then 2, 3, ...)
 *   bytes 16..127 byte i has value i
 */
NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    if (uniqueId == NULL) return ncclInvalidArgument;
    uint64_t seq = __atomic_add_fetch(&g_uid_seq, 1, __ATOMIC_RELAXED);
    memcpy(uniqueId->internal, "gpusimid", 8);
    for (int i = 0; i < 8; i++) uniqueId->internal[8 + i] = (char)(uint8_t)(seq >> (8 * i));
    for (int i = 16; i < NCCL_UNIQUE_ID_BYTES; i++) uniqueId->internal[i] = (char)(uint8_t)i;
    return ncclSuccess;
}

static ncclResult_t comm_create(ncclComm_t *comm, int nranks, const ncclUniqueId *id, int rank, int blocking)
{
    if (comm == NULL || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    struct ncclComm *c = calloc(1, sizeof(*c));
    if (c == NULL) return ncclSystemError;
    c->magic = COMM_MAGIC;
    c->nranks = nranks;
    c->rank = rank;
    c->cudaDev = 0;
    c->blocking = blocking;
    if (id) c->id = *id;
    *comm = c;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config)
{
    int blocking = 1;
    if (config != NULL) {
        if (config->magic != NCCL_API_MAGIC || config->size < offsetof(ncclConfig_t, netName))
            return ncclInvalidArgument;
        if (config->blocking != NCCL_CONFIG_UNDEF_INT) blocking = config->blocking;
    }
    return comm_create(comm, nranks, &commId, rank, blocking);
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    return comm_create(comm, nranks, &commId, rank, 1);
}

NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comm, int ndev, const int *devlist);
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
    (void)devlist;
    if (comm == NULL || ndev < 1) return ncclInvalidArgument;
    for (int i = 0; i < ndev; i++) {
        ncclResult_t r = comm_create(&comm[i], ndev, NULL, i, 1);
        if (r != ncclSuccess) {
            for (int j = 0; j < i; j++) {
                comm[j]->magic = COMM_DEAD;
                free(comm[j]);
                comm[j] = NULL;
            }
            return r;
        }
    }
    return ncclSuccess;
}

static ncclResult_t comm_free(ncclComm_t comm)
{
    if (comm == NULL) return ncclInvalidArgument;
    if (!comm_ok(comm)) return ncclInvalidArgument;
    comm->magic = COMM_DEAD;
    free(comm);
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    return comm_free(comm);
}

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    return comm_free(comm);
}

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    if (!comm_ok(comm) || count == NULL) return ncclInvalidArgument;
    *count = comm->nranks;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    if (!comm_ok(comm) || rank == NULL) return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
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
    ncclResult_t r = coll_check(comm, datatype);
    if (r != ncclSuccess) return r;
    if (!op_ok(op) || root < 0 || root >= comm->nranks || !buf_ok(sendbuff, count)) return ncclInvalidArgument;
    if (comm->rank == root && !buf_ok(recvbuff, count)) return ncclInvalidArgument;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclBcast, void *buff, size_t count, ncclDataType_t datatype, int root,
         ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                       ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    ncclResult_t r = coll_check(comm, datatype);
    if (r != ncclSuccess) return r;
    if (root < 0 || root >= comm->nranks || !buf_ok(buff, count)) return ncclInvalidArgument;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           int root, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    ncclResult_t r = coll_check(comm, datatype);
    if (r != ncclSuccess) return r;
    if (root < 0 || root >= comm->nranks || !buf_ok(recvbuff, count)) return ncclInvalidArgument;
    if (comm->rank == root && !buf_ok(sendbuff, count)) return ncclInvalidArgument;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    ncclResult_t r = coll_check(comm, datatype);
    if (r != ncclSuccess) return r;
    if (!op_ok(op) || !buf_ok(sendbuff, count) || !buf_ok(recvbuff, count)) return ncclInvalidArgument;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff,
         size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
         cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff,
                               size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream)
{
    (void)stream;
    ncclResult_t r = coll_check(comm, datatype);
    if (r != ncclSuccess) return r;
    if (!op_ok(op) || !buf_ok(sendbuff, recvcount) || !buf_ok(recvbuff, recvcount)) return ncclInvalidArgument;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    ncclResult_t r = coll_check(comm, datatype);
    if (r != ncclSuccess) return r;
    if (!buf_ok(sendbuff, sendcount) || !buf_ok(recvbuff, sendcount)) return ncclInvalidArgument;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    ncclResult_t r = coll_check(comm, datatype);
    if (r != ncclSuccess) return r;
    if (peer < 0 || peer >= comm->nranks || !buf_ok(sendbuff, count)) return ncclInvalidArgument;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    ncclResult_t r = coll_check(comm, datatype);
    if (r != ncclSuccess) return r;
    if (peer < 0 || peer >= comm->nranks || !buf_ok(recvbuff, count)) return ncclInvalidArgument;
    return ncclSuccess;
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
    t_group_depth--;
    return ncclSuccess;
}
