/*
 * nccl_rdv.c - simulated libnccl internals: communicator allocation with its
 * deliberately un-NCCL-like layout, and the rendezvous that makes ranks in
 * several processes (or threads) wait for one another.
 *
 * The rendezvous state lives in a small shared mapping: one monotonic
 * "entered" counter per rank, so collective number s is complete once every
 * rank's counter reached s (no reset, no generation race). A 32-bit futex word
 * is bumped on every change; waiters sleep on it (at most 100 ms at a time, to
 * notice a dead peer, a timeout or simNcclInterrupt).
 */
#define _GNU_SOURCE
#include "nccl_comm.h"
#include "nccl_hash.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RDV_MAGIC 0x52445653u /* "SVDR" */
#define DEFAULT_TIMEOUT_MS 60000
#define POLL_MS 100

struct sim_rdv {
    uint32_t ready;                        /* RDV_MAGIC once initialised (release) */
    int32_t nranks;
    uint64_t comm_hash;
    uint32_t futex;                        /* bumped on every change */
    uint32_t joined;                       /* ranks that claimed their slot */
    uint32_t local_refs;                   /* communicators sharing a process-local mapping */
    int32_t pid[SIM_MAX_RANKS];            /* 0 until the rank joined */
    uint64_t host_hash[SIM_MAX_RANKS];
    uint64_t entered[SIM_MAX_RANKS];
    int32_t split_color[SIM_MAX_RANKS];
    int32_t split_key[SIM_MAX_RANKS];
    int32_t split_posted[SIM_MAX_RANKS];   /* split number whose color/key the slot holds */
    int32_t split_read[SIM_MAX_RANKS];     /* last split number this rank finished reading */
};

static volatile sig_atomic_t g_interrupted;

__attribute__((visibility("default"))) void simNcclInterrupt(void)
{
    g_interrupted = 1;
}

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */
/* ------------------------------------------------------------------ */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Shared (not private) futex operations: the word may be in a file mapping
 * that other processes map at other addresses. */
static void futex_wait(uint32_t *word, uint32_t seen, long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, NULL, 0);
}

static void rdv_bump(struct sim_rdv *r)
{
    __atomic_add_fetch(&r->futex, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &r->futex, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    if (v == NULL || *v < '0' || *v > '9') return dflt;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (end == NULL || *end != '\0' || x < 0 || x > INT_MAX) return dflt;
    return (int)x;
}

static uint64_t host_hash(void)
{
    char host[256] = "";
    const char *id = getenv("NCCL_HOSTID");
    if (id == NULL || *id == '\0') {
        gethostname(host, sizeof(host) - 1);
        id = host;
    }
    return sim_get_hash(id, strlen(id));
}

void sim_set_error(struct ncclComm *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->priv.last_error, sizeof(c->priv.last_error), fmt, ap);
    va_end(ap);
}

void sim_info(int cuda_dev, const char *fmt, ...)
{
    const char *dbg = getenv("NCCL_DEBUG");
    if (dbg == NULL || (strcasecmp(dbg, "INFO") != 0 && strcasecmp(dbg, "TRACE") != 0)) return;
    char host[256] = "", line[512];
    gethostname(host, sizeof(host) - 1);
    char *dot = strchr(host, '.');
    if (dot) *dot = '\0';
    int n = snprintf(line, sizeof(line), "%s:%d:%d [%d] NCCL INFO ", host, (int)getpid(), (int)syscall(SYS_gettid),
                     cuda_dev);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(line)) vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    printf("%s\n", line);
    fflush(stdout);
}

/* ------------------------------------------------------------------ */
/* Communicator memory                                                 */
/* ------------------------------------------------------------------ */

/* Junk everywhere a reader should not look: a calibration must tell the
 * fields from noise, as it must in NCCL's 30-odd KiB of struct ncclComm. */
static void fill_junk(struct ncclComm *c, uint64_t seed)
{
    uint64_t x = seed | 1;
    uint8_t *p = (uint8_t *)c;
    for (size_t i = 0; i < sizeof(*c); i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
}

struct ncclComm *sim_comm_alloc(int nranks, int rank, uint64_t hash, int blocking)
{
    struct ncclComm *c = NULL;
    if (posix_memalign((void **)&c, 64, sizeof(*c)) != 0) return NULL;
    fill_junk(c, hash ^ ((uint64_t)(unsigned)rank << 32) ^ (uint64_t)getpid());
    c->magic = SIM_COMM_MAGIC;
    c->cudaDev = env_int("GPUTRACE_SIM_NCCL_CUDA_DEV", 0);
    c->nNodes = 1;
    c->localRank = rank;
    c->localRanks = nranks;
    c->apiCalls = 0;
    c->nRanks = nranks;
    c->blocking = blocking;
    c->opCount = 0;
    c->commHash = hash;
    c->rank = rank;
    c->asyncResult = ncclSuccess;
    c->bytesQueued = 0;
    memset(c->seqNumber, 0, sizeof(c->seqNumber));
    c->collOpCount = 0;
    memset(&c->priv, 0, sizeof(c->priv));
    c->priv.timeout_ms = env_int("GPUTRACE_SIM_NCCL_TIMEOUT_MS", DEFAULT_TIMEOUT_MS);
    return c;
}

void sim_comm_free(struct ncclComm *c)
{
    sim_rdv_detach(c);
    c->magic = SIM_COMM_DEAD;
    free(c);
}

/* ------------------------------------------------------------------ */
/* Attaching                                                           */
/* ------------------------------------------------------------------ */

static void rdv_path(char *buf, size_t n, uint64_t hash)
{
    snprintf(buf, n, "/dev/shm/gputrace-sim-nccl-%016" PRIx64, hash);
}

static void rdv_init(struct sim_rdv *r, int nranks, uint64_t hash)
{
    memset(r, 0, sizeof(*r));
    r->nranks = nranks;
    r->comm_hash = hash;
    __atomic_store_n(&r->ready, RDV_MAGIC, __ATOMIC_RELEASE);
}

ncclResult_t sim_rdv_attach(struct ncclComm *c)
{
    char path[96];
    rdv_path(path, sizeof(path), c->commHash);
    const size_t bytes = sizeof(struct sim_rdv);
    const uint64_t deadline = now_ms() + (uint64_t)c->priv.timeout_ms;
    int created = 1;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
        created = 0;
        fd = open(path, O_RDWR | O_CLOEXEC);
    }
    if (fd < 0) {
        sim_set_error(c, "gputrace sim: open %s: %s", path, strerror(errno));
        return ncclSystemError;
    }
    if (created && ftruncate(fd, (off_t)bytes) != 0) {
        sim_set_error(c, "gputrace sim: ftruncate %s: %s", path, strerror(errno));
        close(fd);
        unlink(path);
        return ncclSystemError;
    }
    /* The creator may not have sized the file yet. */
    struct stat st;
    while (fstat(fd, &st) == 0 && (size_t)st.st_size < bytes) {
        if (now_ms() > deadline) {
            sim_set_error(c, "gputrace sim: %s never reached its size", path);
            close(fd);
            return ncclSystemError;
        }
        sleep_ms(1);
    }
    struct sim_rdv *r = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (r == MAP_FAILED) {
        sim_set_error(c, "gputrace sim: mmap %s: %s", path, strerror(errno));
        return ncclSystemError;
    }
    if (created) rdv_init(r, c->nRanks, c->commHash);
    while (__atomic_load_n(&r->ready, __ATOMIC_ACQUIRE) != RDV_MAGIC) {
        if (now_ms() > deadline) {
            sim_set_error(c, "gputrace sim: %s was never initialised", path);
            munmap(r, bytes);
            return ncclSystemError;
        }
        sleep_ms(1);
    }
    if (r->nranks != c->nRanks || r->comm_hash != c->commHash) {
        sim_set_error(c, "gputrace sim: ranks disagree on nranks (%d here, %d elsewhere)", c->nRanks, r->nranks);
        munmap(r, bytes);
        return ncclInvalidUsage;
    }
    c->priv.rdv = r;
    c->priv.rdv_bytes = bytes;
    return ncclSuccess;
}

ncclResult_t sim_rdv_attach_local(struct ncclComm **comms, int n)
{
    const size_t bytes = sizeof(struct sim_rdv);
    struct sim_rdv *r = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) return ncclSystemError;
    rdv_init(r, n, comms[0]->commHash);
    r->local_refs = (uint32_t)n;
    for (int i = 0; i < n; i++) {
        comms[i]->priv.rdv = r;
        comms[i]->priv.rdv_bytes = bytes;
    }
    return ncclSuccess;
}

void sim_rdv_detach(struct ncclComm *c)
{
    struct sim_rdv *r = c->priv.rdv;
    if (r == NULL) return;
    c->priv.rdv = NULL;
    if (!c->priv.joined_all) {
        /* Leaving before everyone came: the name must not outlive the job. */
        char path[96];
        rdv_path(path, sizeof(path), c->commHash);
        unlink(path);
    }
    if (r->local_refs > 0 && __atomic_sub_fetch(&r->local_refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    munmap(r, c->priv.rdv_bytes);
}

/* ------------------------------------------------------------------ */
/* Waiting                                                             */
/* ------------------------------------------------------------------ */

/* Returns 1 when done; otherwise 0 and the rank it is waiting for. */
typedef int (*rdv_done_fn)(const struct sim_rdv *r, const void *arg, int *missing);

static ncclResult_t rdv_wait_until(struct ncclComm *c, rdv_done_fn done, const void *arg, const char *what)
{
    struct sim_rdv *r = c->priv.rdv;
    const uint64_t start = now_ms();
    const pid_t self = getpid();
    for (;;) {
        uint32_t seen = __atomic_load_n(&r->futex, __ATOMIC_SEQ_CST);
        int missing = -1;
        if (done(r, arg, &missing)) return ncclSuccess;
        uint64_t waited = now_ms() - start;
        if (g_interrupted) {
            sim_set_error(c, "gputrace sim: %s: interrupted after %" PRIu64 " ms waiting for rank %d", what, waited,
                          missing);
            return ncclRemoteError;
        }
        pid_t peer = missing >= 0 ? __atomic_load_n(&r->pid[missing], __ATOMIC_ACQUIRE) : 0;
        if (peer > 0 && peer != self && kill(peer, 0) != 0 && errno == ESRCH) {
            sim_set_error(c, "gputrace sim: %s: rank %d (pid %d) exited", what, missing, (int)peer);
            return ncclRemoteError;
        }
        if (waited >= (uint64_t)c->priv.timeout_ms) {
            sim_set_error(c, "gputrace sim: %s: timed out after %d ms waiting for rank %d", what, c->priv.timeout_ms,
                          missing);
            return ncclRemoteError;
        }
        long left = (long)((uint64_t)c->priv.timeout_ms - waited);
        futex_wait(&r->futex, seen, left < POLL_MS ? left : POLL_MS);
    }
}

ncclResult_t sim_rdv_join(struct ncclComm *c)
{
    struct sim_rdv *r = c->priv.rdv;
    int32_t expected = 0;
    if (!__atomic_compare_exchange_n(&r->pid[c->rank], &expected, (int32_t)getpid(), 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        sim_set_error(c, "gputrace sim: rank %d joined twice (also pid %d)", c->rank, (int)expected);
        return ncclInvalidUsage;
    }
    r->host_hash[c->rank] = host_hash();
    if (__atomic_add_fetch(&r->joined, 1, __ATOMIC_ACQ_REL) == (uint32_t)r->nranks && r->local_refs == 0) {
        /* Everyone has it mapped: the name is no longer needed. */
        char path[96];
        rdv_path(path, sizeof(path), c->commHash);
        unlink(path);
    }
    rdv_bump(r);
    return ncclSuccess;
}

static int all_joined(const struct sim_rdv *r, const void *arg, int *missing)
{
    (void)arg;
    for (int q = 0; q < r->nranks; q++) {
        if (__atomic_load_n(&r->pid[q], __ATOMIC_ACQUIRE) == 0) {
            *missing = q;
            return 0;
        }
    }
    return 1;
}

ncclResult_t sim_rdv_wait_joined(struct ncclComm *c)
{
    ncclResult_t res = rdv_wait_until(c, all_joined, NULL, "init");
    if (res != ncclSuccess) return res;
    struct sim_rdv *r = c->priv.rdv;
    const uint64_t mine = r->host_hash[c->rank];
    int nodes = 0, local_rank = 0, local_ranks = 0;
    for (int q = 0; q < r->nranks; q++) {
        int first = 1;
        for (int p = 0; p < q; p++)
            if (r->host_hash[p] == r->host_hash[q]) first = 0;
        nodes += first;
        if (r->host_hash[q] == mine) {
            if (q < c->rank) local_rank++;
            local_ranks++;
        }
    }
    c->nNodes = nodes;
    c->localRank = local_rank;
    c->localRanks = local_ranks;
    c->priv.joined_all = 1;
    return ncclSuccess;
}

uint64_t sim_rdv_enter(struct ncclComm *c)
{
    struct sim_rdv *r = c->priv.rdv;
    uint64_t seq = ++c->priv.entered;
    __atomic_store_n(&r->entered[c->rank], seq, __ATOMIC_RELEASE);
    rdv_bump(r);
    return seq;
}

static int all_entered(const struct sim_rdv *r, const void *arg, int *missing)
{
    const uint64_t seq = *(const uint64_t *)arg;
    for (int q = 0; q < r->nranks; q++) {
        if (__atomic_load_n(&r->entered[q], __ATOMIC_ACQUIRE) < seq) {
            *missing = q;
            return 0;
        }
    }
    return 1;
}

ncclResult_t sim_rdv_wait(struct ncclComm *c, uint64_t seq, const char *op)
{
    char what[64];
    snprintf(what, sizeof(what), "%s #%" PRIu64, op, seq - 1);
    return rdv_wait_until(c, all_entered, &seq, what);
}

/* ------------------------------------------------------------------ */
/* ncclCommSplit's exchange                                            */
/* ------------------------------------------------------------------ */

struct split_arg {
    int n;
    int posted; /* 1: wait for split_posted >= n; 0: wait for split_read >= n - 1 */
};

static int split_phase(const struct sim_rdv *r, const void *arg, int *missing)
{
    const struct split_arg *a = arg;
    for (int q = 0; q < r->nranks; q++) {
        int v = a->posted ? __atomic_load_n(&r->split_posted[q], __ATOMIC_ACQUIRE)
                          : __atomic_load_n(&r->split_read[q], __ATOMIC_ACQUIRE);
        if (v < (a->posted ? a->n : a->n - 1)) {
            *missing = q;
            return 0;
        }
    }
    return 1;
}

ncclResult_t sim_rdv_split_exchange(struct ncclComm *c, int n, int color, int key, int *colors, int *keys)
{
    struct sim_rdv *r = c->priv.rdv;
    /* Nobody may still be reading the previous split's slots. */
    struct split_arg before = { n, 0 };
    ncclResult_t res = rdv_wait_until(c, split_phase, &before, "ncclCommSplit");
    if (res != ncclSuccess) return res;
    r->split_color[c->rank] = color;
    r->split_key[c->rank] = key;
    __atomic_store_n(&r->split_posted[c->rank], n, __ATOMIC_RELEASE);
    rdv_bump(r);
    struct split_arg posted = { n, 1 };
    res = rdv_wait_until(c, split_phase, &posted, "ncclCommSplit");
    if (res != ncclSuccess) return res;
    for (int q = 0; q < r->nranks; q++) {
        colors[q] = r->split_color[q];
        keys[q] = r->split_key[q];
    }
    __atomic_store_n(&r->split_read[c->rank], n, __ATOMIC_RELEASE);
    rdv_bump(r);
    return ncclSuccess;
}
