/*
 * workload_nccl.c - the NCCL section of gputrace-workload. README.md
 * ("NCCL section", "Several ranks") is the contract: every call, every
 * printed figure.
 *
 * With --ranks, each process is one rank of one communicator: rank 0 makes
 * the ncclUniqueId and writes it to --id-file, the others read it. The
 * simulated libnccl makes every collective return only once all ranks have
 * entered it, so a rank that is late (--late-ms) delays the others and a rank
 * that stops (--stop-after) leaves them blocked: what gputrace must detect.
 * The figures printed here (collectives entered, delays injected) are what
 * the tests compare gputrace's analysis with.
 */
#define _GNU_SOURCE
#include "workload_nccl.h"
#include "nccl_comm.h"
#include "nccl_hash.h"

#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MiB (1ULL << 20)
#define ID_BYTES ((size_t)NCCL_UNIQUE_ID_BYTES)
#define DEFAULT_ID_WAIT_MS 60000

struct nccl_opts nopt = { .late_every = 1 };

/* Multi-rank state: one rank (one worker thread) per process. */
static CUdeviceptr g_send, g_recv;
static ncclComm_t g_comm;     /* from the init call */
static ncclComm_t g_work;     /* the communicator collectives use: g_comm or its split child */
static int g_made;            /* g_comm exists */
static uint64_t g_entered;    /* rendezvous collectives entered = next sequence number */
static uint64_t g_completed;
static uint64_t g_delays, g_delay_ms;
static int g_stopped, g_interrupted;

static void die(int thread, const char *what, const char *kind, int rc, const char *detail)
{
    if (thread < 0) fprintf(stderr, "gputrace-workload: main: %s failed: %s %d", what, kind, rc);
    else fprintf(stderr, "gputrace-workload: thread %d: %s failed: %s %d", thread, what, kind, rc);
    if (detail != NULL && *detail) fprintf(stderr, " (%s)", detail);
    fputc('\n', stderr);
    fflush(stderr);
    exit(1);
}

#define CU_CALL(idx, calls, call)                                           \
    do {                                                                    \
        CUresult r_ = (call);                                               \
        if (calls) (*(calls))++;                                            \
        if (r_ != CUDA_SUCCESS) die((idx), #call, "CUresult", r_, NULL);    \
    } while (0)

#define NC_CALL(idx, calls, comm, call)                                     \
    do {                                                                    \
        ncclResult_t r_ = (call);                                           \
        if (calls) (*(calls))++;                                            \
        if (r_ != ncclSuccess) die((idx), #call, "ncclResult_t", r_, ncclGetLastError(comm)); \
    } while (0)

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static int id_wait_ms(void)
{
    const char *v = getenv("GPUTRACE_SIM_NCCL_TIMEOUT_MS");
    return v && *v >= '0' && *v <= '9' ? atoi(v) : DEFAULT_ID_WAIT_MS;
}

static void print_hex_id(const char *what, uint64_t v)
{
    printf("%s0x%" PRIx64, what, v);
}

/* ------------------------------------------------------------------ */
/* Flags                                                               */
/* ------------------------------------------------------------------ */

/* The multi-rank NCCL flags (README.md, "Several ranks"); 1 if `a` was one. */
int parse_nccl_flag(const char *a, const char *val, int argc, char **argv, int *i)
{
#define NCCL_VALUE() (val != NULL ? val : (*i + 1 < argc ? argv[++*i] : NULL))
#define NCCL_SWITCH() do { if (val != NULL) usage_error("%s takes no value", a); } while (0)
    if (!strcmp(a, "--ranks")) {
        uint64_t n = parse_u64(a, NCCL_VALUE());
        if (n < 1 || n > 64) usage_error("--ranks must be 1..64, got %s", argv[*i]);
        nopt.ranks = (int)n;
    } else if (!strcmp(a, "--rank")) {
        uint64_t r = parse_u64(a, NCCL_VALUE());
        if (r > 63) usage_error("--rank must be 0..63, got %s", argv[*i]);
        nopt.rank = (int)r;
        nopt.have_rank = 1;
    } else if (!strcmp(a, "--id-file")) {
        nopt.id_file = NCCL_VALUE();
        if (nopt.id_file == NULL || *nopt.id_file == '\0') usage_error("%s needs a path", a);
    } else if (!strcmp(a, "--nccl-init-early")) { NCCL_SWITCH(); nopt.init_early = 1; }
    else if (!strcmp(a, "--nccl-allreduce-only")) { NCCL_SWITCH(); nopt.allreduce_only = 1; }
    else if (!strcmp(a, "--nccl-scalable")) { NCCL_SWITCH(); nopt.scalable = 1; }
    else if (!strcmp(a, "--split-color")) {
        uint64_t c = parse_u64(a, NCCL_VALUE());
        if (c > 0x7fffffff) usage_error("--split-color too large: %s", argv[*i]);
        nopt.split_color = (int)c;
        nopt.have_split = 1;
    } else if (!strcmp(a, "--late-ms")) { nopt.late_ms = parse_u64(a, NCCL_VALUE()); }
    else if (!strcmp(a, "--late-every")) {
        nopt.late_every = parse_u64(a, NCCL_VALUE());
        if (nopt.late_every == 0) usage_error("%s must be at least 1", "--late-every");
    } else if (!strcmp(a, "--stop-after")) {
        nopt.stop_after = parse_u64(a, NCCL_VALUE());
        nopt.have_stop = 1;
    } else if (!strcmp(a, "--sigstop-at")) {
        nopt.sigstop_at = parse_u64(a, NCCL_VALUE());
        nopt.have_sigstop = 1;
    } else if (!strcmp(a, "--nccl-ahead")) {
        nopt.ahead = parse_u64(a, NCCL_VALUE());
        if (nopt.ahead == 0) usage_error("%s must be at least 1", "--nccl-ahead");
    } else if (!strcmp(a, "--nccl-timeout-ms")) {
        const char *v = NCCL_VALUE();
        if (parse_u64(a, v) > 0x7fffffff) usage_error("--nccl-timeout-ms too large: %s", v);
        setenv("GPUTRACE_SIM_NCCL_TIMEOUT_MS", v, 1);
    } else if (!strcmp(a, "--cuda-dev")) {
        const char *v = NCCL_VALUE();
        if (parse_u64(a, v) > 1023) usage_error("--cuda-dev must be 0..1023, got %s", v);
        setenv("GPUTRACE_SIM_NCCL_CUDA_DEV", v, 1);
    } else {
        return 0;
    }
    return 1;
#undef NCCL_VALUE
#undef NCCL_SWITCH
}

void check_nccl_flags(int ranks_flags, int bench, unsigned threads, int have_duration)
{
    if (nopt.ranks == 0) {
        if (ranks_flags) usage_error("%s", "--rank, --id-file, --nccl-init-early, --nccl-allreduce-only, --nccl-scalable, "
                                           "--split-color, --late-ms, --late-every, --stop-after, --sigstop-at, --nccl-ahead, "
                                           "--nccl-timeout-ms and --cuda-dev require --ranks");
        return;
    }
    if (bench) usage_error("%s cannot be combined with --bench", "--ranks");
    if (nopt.iters == 0) usage_error("%s requires --nccl N (N >= 1)", "--ranks");
    if (threads != 1) usage_error("%s requires --threads 1 (one rank per process)", "--ranks");
    if (nopt.ranks > 1 && !nopt.have_rank) usage_error("%s > 1 requires --rank", "--ranks");
    if (nopt.rank >= nopt.ranks) {
        char msg[64];
        snprintf(msg, sizeof(msg), "%d (--ranks %d)", nopt.rank, nopt.ranks);
        usage_error("--rank must be below --ranks, got %s", msg);
    }
    if (nopt.ranks > 1 && nopt.id_file == NULL) usage_error("%s > 1 requires --id-file", "--ranks");
    if (nopt.ranks > 1 && have_duration)
        usage_error("%s", "--duration-ms cannot be used with --ranks > 1 (ranks would disagree on the number of passes)");
    if (nopt.config && nopt.scalable) usage_error("%s", "--nccl-config and --nccl-scalable exclude each other");
    if (nopt.ahead > 0 && !(nopt.init_early && nopt.allreduce_only && !nopt.have_split && nopt.ahead < nopt.iters))
        usage_error("%s", "--nccl-ahead K requires --nccl-init-early, --nccl-allreduce-only, no --split-color and K < --nccl N");
}

/* ------------------------------------------------------------------ */
/* The single-process section (--nccl without --ranks)                 */
/* ------------------------------------------------------------------ */

static void legacy_config(ncclConfig_t *config)
{
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.blocking = 1;
    c.cgaClusterSize = 4;
    c.minCTAs = 2;
    c.maxCTAs = 16;
    c.commName = "gputrace-sim";
    *config = c;
}

static void legacy_init(int idx, ncclComm_t *comm, uint64_t *calls)
{
    ncclUniqueId id;
    ncclConfig_t config;
    legacy_config(&config);
    NC_CALL(idx, calls, NULL, ncclGetUniqueId(&id));
    if (nopt.config) NC_CALL(idx, calls, NULL, ncclCommInitRankConfig(comm, 1, id, 0, &config));
    else NC_CALL(idx, calls, NULL, ncclCommInitRank(comm, 1, id, 0));
}

void wnccl_bench_init(int idx, ncclComm_t *comm)
{
    legacy_init(idx, comm, NULL);
}

static void legacy_pass(int idx, CUstream s, uint64_t *calls)
{
    CUdeviceptr sendbuf = 0, recvbuf = 0;
    ncclComm_t comm = NULL;
    CU_CALL(idx, calls, cuMemAlloc_v2(&sendbuf, 8 * MiB));
    CU_CALL(idx, calls, cuMemAlloc_v2(&recvbuf, 8 * MiB));
    legacy_init(idx, &comm, calls);
    const void *sb = (const void *)(uintptr_t)sendbuf;
    void *rb = (void *)(uintptr_t)recvbuf;
    for (uint64_t i = 0; i < nopt.iters; i++) {
        NC_CALL(idx, calls, comm, ncclAllReduce(sb, rb, 1048576, ncclFloat32, ncclSum, comm, s));
        NC_CALL(idx, calls, comm, ncclBroadcast(sb, rb, 1000, ncclInt8, 0, comm, s));
        NC_CALL(idx, calls, comm, ncclReduce(sb, rb, 4096, ncclFloat64, ncclMax, 0, comm, s));
        NC_CALL(idx, calls, comm, ncclAllGather(sb, rb, 2048, ncclBfloat16, comm, s));
        NC_CALL(idx, calls, comm, ncclReduceScatter(sb, rb, 512, ncclInt32, ncclMin, comm, s));
        NC_CALL(idx, calls, comm, ncclGroupStart());
        NC_CALL(idx, calls, comm, ncclSend(sb, 256, ncclFloat16, 0, comm, s));
        NC_CALL(idx, calls, comm, ncclRecv(rb, 256, ncclFloat16, 0, comm, s));
        NC_CALL(idx, calls, comm, ncclGroupEnd());
    }
    NC_CALL(idx, calls, comm, ncclCommDestroy(comm));
    CU_CALL(idx, calls, cuMemFree_v2(sendbuf));
    CU_CALL(idx, calls, cuMemFree_v2(recvbuf));
}

/* ------------------------------------------------------------------ */
/* Several ranks                                                       */
/* ------------------------------------------------------------------ */

static void write_id_file(const ncclUniqueId *id)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", nopt.id_file, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, id->internal, ID_BYTES) != (ssize_t)ID_BYTES || close(fd) != 0 ||
        rename(tmp, nopt.id_file) != 0) {
        fprintf(stderr, "gputrace-workload: cannot write the id file %s: %s\n", nopt.id_file, strerror(errno));
        exit(1);
    }
}

/* Rank 0 renames the complete file into place, so a file that exists is whole. */
static void read_id_file(ncclUniqueId *id)
{
    const int limit = id_wait_ms();
    for (int waited = 0;; waited += 5) {
        int fd = open(nopt.id_file, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t n = read(fd, id->internal, ID_BYTES);
            close(fd);
            if (n == (ssize_t)ID_BYTES) return;
            fprintf(stderr, "gputrace-workload: the id file %s does not hold %zu bytes\n", nopt.id_file, ID_BYTES);
            exit(1);
        }
        if (waited >= limit || g_stop) {
            fprintf(stderr, "gputrace-workload: no id file %s after %d ms (is rank 0 running?)\n", nopt.id_file,
                    waited);
            exit(1);
        }
        sleep_ms(5);
    }
}

/* Buffers, id, communicator (and its split child): counted when calls != NULL. */
static void ranks_init(int idx, uint64_t *calls)
{
    ncclUniqueId id;
    ncclConfig_t config;
    const char *api = "ncclCommInitRank";
    CU_CALL(idx, calls, cuMemAlloc_v2(&g_send, 8 * MiB));
    CU_CALL(idx, calls, cuMemAlloc_v2(&g_recv, 8 * MiB));
    if (nopt.rank == 0) {
        NC_CALL(idx, calls, NULL, ncclGetUniqueId(&id));
        if (nopt.id_file) write_id_file(&id);
    } else {
        read_id_file(&id);
    }
    if (nopt.config) {
        legacy_config(&config);
        api = "ncclCommInitRankConfig";
        NC_CALL(idx, calls, NULL, ncclCommInitRankConfig(&g_comm, nopt.ranks, id, nopt.rank, &config));
    } else if (nopt.scalable) {
        api = "ncclCommInitRankScalable";
        NC_CALL(idx, calls, NULL, ncclCommInitRankScalable(&g_comm, nopt.ranks, nopt.rank, 1, &id, NULL));
    } else {
        NC_CALL(idx, calls, NULL, ncclCommInitRank(&g_comm, nopt.ranks, id, nopt.rank));
    }
    g_made = 1;
    const uint64_t hash = sim_get_hash(id.internal, ID_BYTES);
    printf("nccl comm=0x%" PRIxPTR " rank=%d nranks=%d", (uintptr_t)g_comm, nopt.rank, nopt.ranks);
    print_hex_id(" comm_id=", hash);
    printf(" api=%s\n", api);
    fflush(stdout);
    g_work = g_comm;
    if (nopt.have_split) {
        ncclComm_t child = NULL;
        NC_CALL(idx, calls, g_comm, ncclCommSplit(g_comm, nopt.split_color, nopt.rank, &child, NULL));
        g_work = child;
        printf("nccl comm=0x%" PRIxPTR " rank=%d nranks=%d", (uintptr_t)child, nopt.rank, nopt.ranks);
        print_hex_id(" comm_id=", sim_split_hash(hash, 1, nopt.split_color));
        printf(" api=ncclCommSplit parent=0x%" PRIxPTR " color=%d\n", (uintptr_t)g_comm, nopt.split_color);
    }
    fflush(stdout);
}

static void ranks_teardown(int idx, uint64_t *calls)
{
    if (!g_made) return;
    if (g_work != g_comm) NC_CALL(idx, calls, g_work, ncclCommDestroy(g_work));
    NC_CALL(idx, calls, g_comm, ncclCommDestroy(g_comm));
    CU_CALL(idx, calls, cuMemFree_v2(g_send));
    CU_CALL(idx, calls, cuMemFree_v2(g_recv));
    g_made = 0;
}

/* --nccl-ahead K: this rank's first K AllReduces, issued in one group by a
 * thread of their own during setup. The group enters them all, then waits
 * for the other ranks (which enter them only once told to go): like real
 * NCCL, whose calls return once enqueued, this rank runs K collectives
 * ahead, and a tracer attached during the wait sees none of them. */
static pthread_t g_ahead_thread;
static ncclResult_t g_ahead_result;
static uint64_t g_ahead_left; /* of the K, still to skip in the first pass */

static void *ahead_main(void *arg)
{
    (void)arg;
    const void *sb = (const void *)(uintptr_t)g_send;
    void *rb = (void *)(uintptr_t)g_recv;
    ncclResult_t r = ncclGroupStart();
    for (uint64_t i = 0; r == ncclSuccess && i < nopt.ahead; i++)
        r = ncclAllReduce(sb, rb, 1048576, ncclFloat32, ncclSum, g_work, NULL);
    ncclResult_t end = ncclGroupEnd();
    g_ahead_result = r != ncclSuccess ? r : end;
    return NULL;
}

static void ahead_start(void)
{
    if (pthread_create(&g_ahead_thread, NULL, ahead_main, NULL) != 0) {
        fprintf(stderr, "gputrace-workload: pthread_create failed\n");
        exit(1);
    }
    /* Entered once the group's end has bumped NCCL's own counter. */
    const uint64_t *seq = &((const struct ncclComm *)g_work)->seqNumber[SIM_ALLREDUCE];
    while (__atomic_load_n(seq, __ATOMIC_ACQUIRE) < nopt.ahead) sleep_ms(1);
    g_entered = nopt.ahead;
    g_ahead_left = nopt.ahead;
    printf("nccl ahead=%" PRIu64 " pid=%d\n", nopt.ahead, (int)getpid());
    fflush(stdout);
}

static void ahead_join(int idx, uint64_t *calls)
{
    if (nopt.ahead == 0 || !g_made) return;
    pthread_join(g_ahead_thread, NULL);
    if (g_ahead_result != ncclSuccess) die(idx, "ncclGroupEnd (--nccl-ahead)", "ncclResult_t", g_ahead_result, "");
    g_completed += nopt.ahead;
    *calls += nopt.ahead + 2;
    nopt.ahead = 0;
}

void wnccl_setup_early(void)
{
    if (nopt.ranks > 0 && nopt.init_early) ranks_init(-1, NULL);
    if (nopt.ahead > 0) ahead_start();
}

void wnccl_teardown_early(void)
{
    if (nopt.ranks > 0 && nopt.init_early) ranks_teardown(-1, NULL);
}

/* Before collective number g_entered: stop here, or be late. Returns 1 to stop. */
static int before_collective(const char *op)
{
    if (nopt.have_stop && g_entered == nopt.stop_after) {
        g_stopped = 1;
        printf("nccl stopped after=%" PRIu64 " pid=%d\n", g_entered, (int)getpid());
        fflush(stdout);
        return 1;
    }
    if (nopt.late_ms > 0 && (g_entered + 1) % nopt.late_every == 0) {
        sleep_ms(nopt.late_ms);
        g_delays++;
        g_delay_ms += nopt.late_ms;
        printf("nccl delay seq=%" PRIu64 " op=%s ms=%" PRIu64 "\n", g_entered, op, nopt.late_ms);
        fflush(stdout);
    }
    if (nopt.have_sigstop && g_entered == nopt.sigstop_at) {
        /* Stopped outside any NCCL call, at a known point: a test's own
         * SIGSTOP could land inside a blocking collective. */
        printf("nccl sigstop seq=%" PRIu64 " pid=%d\n", g_entered, (int)getpid());
        fflush(stdout);
        raise(SIGSTOP);
    }
    return 0;
}

/* After a collective: 1 when it was interrupted by a signal (this rank stops). */
static int after_collective(int idx, ncclResult_t r, const char *op)
{
    g_entered++;
    if (r == ncclSuccess) {
        g_completed++;
        return 0;
    }
    if (r == ncclRemoteError && g_stop) {
        g_interrupted = 1;
        printf("nccl interrupted seq=%" PRIu64 " op=%s\n", g_entered - 1, op);
        fflush(stdout);
        return 1;
    }
    char what[64];
    snprintf(what, sizeof(what), "nccl%s #%" PRIu64, op, g_entered - 1);
    die(idx, what, "ncclResult_t", r, ncclGetLastError(g_work));
    return 1;
}

#define COLL(op, call)                                                      \
    do {                                                                    \
        if (before_collective(op)) return 1;                                \
        ncclResult_t r_ = (call);                                           \
        (*calls)++;                                                         \
        if (after_collective(idx, r_, op)) return 1;                        \
    } while (0)

static int ranks_pass(int idx, CUstream s, uint64_t *calls)
{
    const void *sb = (const void *)(uintptr_t)g_send;
    void *rb = (void *)(uintptr_t)g_recv;
    ncclComm_t comm = g_work;
    const int next = (nopt.rank + 1) % nopt.ranks;
    const int prev = (nopt.rank + nopt.ranks - 1) % nopt.ranks;
    const uint64_t from = g_ahead_left;
    g_ahead_left = 0;
    for (uint64_t i = from; i < nopt.iters; i++) {
        COLL("AllReduce", ncclAllReduce(sb, rb, 1048576, ncclFloat32, ncclSum, comm, s));
        if (nopt.allreduce_only) continue;
        COLL("Broadcast", ncclBroadcast(sb, rb, 1000, ncclInt8, 0, comm, s));
        COLL("Reduce", ncclReduce(sb, rb, 4096, ncclFloat64, ncclMax, 0, comm, s));
        COLL("AllGather", ncclAllGather(sb, rb, 2048, ncclBfloat16, comm, s));
        COLL("ReduceScatter", ncclReduceScatter(sb, rb, 512, ncclInt32, ncclMin, comm, s));
        NC_CALL(idx, calls, comm, ncclGroupStart());
        NC_CALL(idx, calls, comm, ncclSend(sb, 256, ncclFloat16, next, comm, s));
        NC_CALL(idx, calls, comm, ncclRecv(rb, 256, ncclFloat16, prev, comm, s));
        NC_CALL(idx, calls, comm, ncclGroupEnd());
    }
    return 0;
}

/*
 * --distinct-comms N: N one-rank communicators, each made and used by one
 * ncclAllReduce, kept (4 KiB each) so that each has its own ncclComm_t: what
 * grows a tracer's per-communicator state.
 */
static void distinct_comms_pass(int idx, CUstream s, uint64_t *calls)
{
    CUdeviceptr buf = 0;
    CU_CALL(idx, calls, cuMemAlloc_v2(&buf, 4096));
    void *b = (void *)(uintptr_t)buf;
    for (uint64_t i = 0; i < nopt.distinct_comms && !g_stop; i++) {
        ncclComm_t comm = NULL;
        legacy_init(idx, &comm, calls);
        NC_CALL(idx, calls, comm, ncclAllReduce(b, b, 256, ncclFloat32, ncclSum, comm, s));
    }
    CU_CALL(idx, calls, cuMemFree_v2(buf));
}

int wnccl_pass(int idx, CUstream s, uint64_t *calls)
{
    if (nopt.distinct_comms && nopt.ranks == 0) distinct_comms_pass(idx, s, calls);
    if (nopt.iters == 0) return 0;
    if (nopt.ranks == 0) {
        legacy_pass(idx, s, calls);
        return 0;
    }
    if (!g_made) ranks_init(idx, calls);
    return ranks_pass(idx, s, calls);
}

void wnccl_finish(int idx, uint64_t *calls)
{
    if (nopt.ranks == 0) return;
    /* A stopped rank stays alive, like a hung process, until it is told to go. */
    while (g_stopped && !g_stop) sleep_ms(10);
    ahead_join(idx, calls);
    if (!nopt.init_early) ranks_teardown(idx, calls);
}

void wnccl_print_figures(void)
{
    if (nopt.ranks == 0) return;
    printf("nccl rank=%d nranks=%d collectives=%" PRIu64 " completed=%" PRIu64 " delays=%" PRIu64
           " delay_ms=%" PRIu64 " stopped=%d interrupted=%d\n",
           nopt.rank, nopt.ranks, g_entered, g_completed, g_delays, g_delay_ms, g_stopped, g_interrupted);
}
