/*
 * workload_nccl.h - the NCCL section of gputrace-workload (workload_nccl.c):
 * one rank in one process (--nccl alone), or one rank of a communicator
 * shared by several processes (--ranks), with injected lateness and stops.
 * README.md ("NCCL section") is the contract.
 */
#ifndef GPUTRACE_WORKLOAD_NCCL_H
#define GPUTRACE_WORKLOAD_NCCL_H

#include "cuda_sim.h"
#include "nccl_sim.h"

#include <signal.h>
#include <stdint.h>

struct nccl_opts {
    uint64_t iters;          /* --nccl N */
    int config;              /* --nccl-config */
    int ranks;               /* --ranks N; 0: the single-process section */
    int rank;                /* --rank R */
    int have_rank;
    const char *id_file;     /* --id-file PATH */
    int init_early;          /* --nccl-init-early */
    int allreduce_only;      /* --nccl-allreduce-only */
    int scalable;            /* --nccl-scalable */
    int have_split;          /* --split-color C */
    int split_color;
    uint64_t late_ms;        /* --late-ms D */
    uint64_t late_every;     /* --late-every K (default 1) */
    int have_stop;           /* --stop-after N */
    uint64_t stop_after;
    int have_sigstop;        /* --sigstop-at N */
    uint64_t sigstop_at;
    uint64_t ahead;          /* --nccl-ahead K */
    uint64_t distinct_comms; /* --distinct-comms N */
};

extern struct nccl_opts nopt;

/* workload.c: one-line usage error (exit 2), decimal parsing. */
void usage_error(const char *fmt, const char *arg) __attribute__((noreturn));
uint64_t parse_u64(const char *flag, const char *s);

/* The multi-rank flags; 1 if `a` was one (value in val or argv[++*i]). */
int parse_nccl_flag(const char *a, const char *val, int argc, char **argv, int *i);
/* After parsing: the combinations README.md forbids are usage errors. */
void check_nccl_flags(int ranks_flags, int bench, unsigned threads, int have_duration);
extern volatile sig_atomic_t g_stop; /* workload.c: set by SIGTERM/SIGINT */

/* Multi-rank, --nccl-init-early: buffers, id and communicator during setup (uncounted). */
void wnccl_setup_early(void);
/* One pass's NCCL section on worker `idx`; counted calls are added to *calls.
 * Returns 1 when this rank stopped (--stop-after) or was interrupted: no more passes. */
int wnccl_pass(int idx, CUstream s, uint64_t *calls);
/* Worker, after its last pass: waits for a signal if stopped; counted teardown. */
void wnccl_finish(int idx, uint64_t *calls);
/* Main thread teardown (uncounted) of what wnccl_setup_early made. */
void wnccl_teardown_early(void);
/* The multi-rank figures line (nothing in the single-process section). */
void wnccl_print_figures(void);

/* Bench: the single-process communicator (uncounted). */
void wnccl_bench_init(int idx, ncclComm_t *comm);

#endif /* GPUTRACE_WORKLOAD_NCCL_H */
