/*
 * workload.h - what workload.c and workload_graphs.c (the graph section of
 * gputrace-workload) share.  README.md is the contract.
 */
#ifndef GPUTRACE_WORKLOAD_H
#define GPUTRACE_WORKLOAD_H

#include "cuda_sim.h"
#include "nccl_sim.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define MiB (1ULL << 20)

struct options {
    uint64_t launches, launch_ex, coop, graphs, runtime, allocs, copies, syncs, fail, capture_checks; /* --nccl: workload_nccl.h */
    uint64_t graph_replays; /* --graph-replays: the graph section, each executable graph R times */
    int graph_update;       /* --graph-update */
    int graphs_before_wait; /* --graphs-before-wait */
    uint64_t graph_linger_ms; /* --graph-linger-ms */
    uint64_t capture_sleep_ms; /* --capture-sleep-ms */
    int ptsz;            /* --ptsz: cuLaunchKernel_ptsz instead of cuLaunchKernel */
    int per_thread;      /* --per-thread-stream: every per-thread variant */
    unsigned threads;
    int wait_stdin;
    uint64_t delay_ms;
    int names_after_wait;
    int loop;
    int have_duration;
    uint64_t duration_ms;
    const char *sync_us;
    int bench;           /* enum bench_kind in workload.c */
    int have_calls;
    uint64_t calls;
    int print_handles;
    uint64_t pace_us;    /* --pace-us: a pause after each --launches launch */
    uint64_t spin_ns;    /* --spin-ns: CPU work after each --launches launch */
    int exit_main;       /* --exit-main: the main thread ends (pthread_exit) once the workers run */
    char **exec_argv;    /* --exec-then PROGRAM ARGS...: execv at the end */
    uint64_t distinct_kernels; /* --distinct-kernels N */
};

/* Kernels the graph section uses, in the order of its expected counts. */
enum graph_kernel { GK_VECTOR_ADD, GK_REDUCE, GK_RELU, GK_GEMM, GK_COUNT };

/* What the graph section of one worker did, for the self-check. */
struct graph_expect {
    uint64_t launches;            /* cuGraphLaunch* of the section's graphs */
    uint64_t kernels[GK_COUNT];   /* kernel nodes run, by kernel */
    uint64_t copies, copy_bytes, memsets, memset_bytes;
    uint64_t captured[GK_COUNT];  /* launches captured, by kernel */
    uint64_t captured_copies, captured_memsets;
};

/* One worker's graphs and the resources they use. */
struct graph_state {
    CUstream stream2;             /* joins the capture (fork/join) */
    CUevent ev_fork, ev_join;
    CUdeviceptr dev;              /* 1 MiB device buffer for copy and memset nodes */
    void *pinned;                 /* 1 MiB page-locked host buffer */
    CUgraphExec captured, nodes, clone;
    CUgraph nodes_graph;          /* kept: the per-node updates name its nodes */
    CUgraphNode b0, b2, b4;       /* first kernel, memset and child-graph nodes of nodes_graph */
    int built;
    int nodes_updated;            /* the update step ran: `nodes` runs its new parameters */
    struct graph_expect exp;
};

struct worker {
    unsigned idx;
    pthread_t thread;
    pid_t tid;
    CUstream stream;
    CUevent event;
    uint64_t calls;      /* counted calls made by this thread */
    uint64_t passes;
    int halted;          /* this rank stopped or was interrupted: no more passes */
    uint64_t bench_ns;
    uint64_t bench_cpu_ns; /* the thread's CPU time in the loop */
    uint64_t bench_calls;
    uint64_t window_start_ns, window_end_ns; /* CLOCK_MONOTONIC around the counted passes */
    /* kernel arguments (never dereferenced by the simulator) */
    CUdeviceptr arg_a, arg_b, arg_c;
    int arg_n, arg_m, arg_k;
    void *params[6];
    /* bench resources */
    CUdeviceptr b_dev, b_send, b_recv;
    void *b_pinned;
    ncclComm_t b_comm;
    struct graph_state gs;
};

extern struct options opt;
extern CUcontext g_ctx;
extern CUfunction g_funcs[3];
extern CUkernel g_gemm_kernel;
extern CUfunction g_gemm_func;
extern struct worker *g_workers;

void die_cu(int thread, const char *what, int rc);
void die_msg(int thread, const char *what);
void print_handle(const char *name, const void *p);
void sleep_ms(uint64_t ms);

/* Setup / teardown call of the main thread (not counted). */
#define SETUP(call)                                                     \
    do {                                                                \
        CUresult r_ = (call);                                           \
        if (UNLIKELY(r_ != CUDA_SUCCESS)) die_cu(-1, #call, r_);        \
    } while (0)

/* workload_graphs.c */
void graphs_setup_main(void);           /* per-worker streams, events, buffers */
void graphs_worker_setup(struct worker *w);
void graphs_print_exec_handles(void);
void graphs_pass(struct worker *w);
void graphs_worker_teardown(struct worker *w);
void graphs_teardown_main(void);
void graphs_report(void);               /* the graph lines; exit 1 if the simulator disagrees */

#endif /* GPUTRACE_WORKLOAD_H */
