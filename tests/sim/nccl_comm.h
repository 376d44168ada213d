/*
 * nccl_comm.h - internals of the simulated libnccl.so.2: the communicator's
 * memory layout and the cross-process rendezvous (nccl_rdv.c).
 *
 * The layout is deliberately unlike NCCL's (README.md, "Communicator memory
 * layout"): a calibration that finds commHash, rank, nRanks, cudaDev and the
 * operation counters in real NCCL's struct ncclComm must find them here too
 * without being written for these offsets.
 */
#ifndef GPUTRACE_NCCL_COMM_H
#define GPUTRACE_NCCL_COMM_H

#include "nccl_sim.h"

#include <stddef.h>
#include <stdint.h>

#define SIM_MAX_RANKS 64
#define SIM_COMM_BYTES 4096
#define SIM_LAST_ERROR_BYTES 256

/* NCCL's ncclFunc_t for the five collectives that have a seqNumber. */
enum sim_func { SIM_BROADCAST = 0, SIM_REDUCE = 1, SIM_ALLGATHER = 2, SIM_REDUCESCATTER = 3, SIM_ALLREDUCE = 4, SIM_NUM_FUNCS = 5 };

struct sim_rdv;

/* What a reader of the target's memory must not need: kept past offset 0x800. */
struct sim_comm_private {
    struct sim_rdv *rdv;          /* NULL for a 1-rank communicator */
    size_t rdv_bytes;
    uint64_t entered;             /* rendezvous collectives this rank entered */
    int split_count;              /* ncclCommSplit calls made on this communicator */
    int joined_all;               /* every rank has joined the rendezvous */
    int timeout_ms;
    char last_error[SIM_LAST_ERROR_BYTES];
};

struct ncclComm {
    uint64_t magic;                          /* 0x000 */
    uint8_t junk0[0x140 - 0x008];
    int32_t cudaDev;                         /* 0x140 */
    int32_t nNodes;                          /* 0x144 distinct NCCL_HOSTID values among the ranks */
    int32_t localRank;                       /* 0x148 rank among the ranks of the same host */
    int32_t localRanks;                      /* 0x14c ranks on this rank's host */
    uint8_t junk1[0x1c0 - 0x150];
    uint64_t apiCalls;                       /* 0x1c0 decoy: collective and p2p calls on this comm */
    int32_t nRanks;                          /* 0x1c8 */
    int32_t blocking;                        /* 0x1cc */
    uint8_t junk2[0x2a0 - 0x1d0];
    uint64_t opCount;                        /* 0x2a0 +1 per launch (ungrouped call or group end) */
    uint64_t commHash;                       /* 0x2a8 */
    int32_t rank;                            /* 0x2b0 right after commHash, as in every NCCL 2.18 .. 2.30 */
    int32_t asyncResult;                     /* 0x2b4 */
    uint8_t junk3[0x3f8 - 0x2b8];
    uint64_t bytesQueued;                    /* 0x3f8 decoy: bytes of every collective and p2p call */
    uint8_t junk4[0x520 - 0x400];
    uint64_t seqNumber[SIM_NUM_FUNCS];       /* 0x520 indexed by enum sim_func (NCCL's ncclFunc_t) */
    uint64_t collOpCount;                    /* 0x548 += collectives per launch */
    uint8_t junk5[0x800 - 0x550];
    struct sim_comm_private priv;            /* 0x800 */
    uint8_t junk6[SIM_COMM_BYTES - 0x800 - sizeof(struct sim_comm_private)];
};

_Static_assert(offsetof(struct ncclComm, cudaDev) == 0x140, "cudaDev");
_Static_assert(offsetof(struct ncclComm, apiCalls) == 0x1c0, "apiCalls");
_Static_assert(offsetof(struct ncclComm, nRanks) == 0x1c8, "nRanks");
_Static_assert(offsetof(struct ncclComm, opCount) == 0x2a0, "opCount");
_Static_assert(offsetof(struct ncclComm, commHash) == 0x2a8, "commHash");
_Static_assert(offsetof(struct ncclComm, rank) == 0x2b0, "rank");
_Static_assert(offsetof(struct ncclComm, bytesQueued) == 0x3f8, "bytesQueued");
_Static_assert(offsetof(struct ncclComm, seqNumber) == 0x520, "seqNumber");
_Static_assert(offsetof(struct ncclComm, collOpCount) == 0x548, "collOpCount");
_Static_assert(offsetof(struct ncclComm, priv) == 0x800, "priv");
_Static_assert(sizeof(struct ncclComm) == SIM_COMM_BYTES, "ncclComm size");

#define SIM_COMM_MAGIC 0x4d4d4f434c43434eULL /* "NCCLCOMM" */
#define SIM_COMM_DEAD  0x444145444c43434eULL /* "NCCLDEAD" */


/* Allocates a communicator (junk-filled, fields set, no rendezvous yet). */
struct ncclComm *sim_comm_alloc(int nranks, int rank, uint64_t hash, int blocking);
void sim_comm_free(struct ncclComm *c);
void sim_set_error(struct ncclComm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Rendezvous (nranks > 1). A cross-process one is a file in /dev/shm named
 * after the commHash; the last rank to join unlinks it. A process-local one
 * (ncclCommInitAll) is an anonymous shared mapping.
 */
ncclResult_t sim_rdv_attach(struct ncclComm *c);              /* named, by c->commHash */
ncclResult_t sim_rdv_attach_local(struct ncclComm **comms, int n);
ncclResult_t sim_rdv_join(struct ncclComm *c);                /* claim the rank's slot */
ncclResult_t sim_rdv_wait_joined(struct ncclComm *c);         /* every rank joined; sets nNodes, localRank(s) */
void sim_rdv_detach(struct ncclComm *c);
/* Collective entry: bumps this rank's entered count, returns it (1-based). */
uint64_t sim_rdv_enter(struct ncclComm *c);
/* Waits until every rank has entered collective number seq (1-based). */
ncclResult_t sim_rdv_wait(struct ncclComm *c, uint64_t seq, const char *op);
/* ncclCommSplit's exchange: every rank's (color, key) for split number n. */
ncclResult_t sim_rdv_split_exchange(struct ncclComm *c, int n, int color, int key, int *colors, int *keys);

/* Prints an NCCL-style INFO line to stdout when NCCL_DEBUG=INFO (or TRACE). */
void sim_info(int cuda_dev, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* GPUTRACE_NCCL_COMM_H */
