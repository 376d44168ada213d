/*
 * workload_cupti.c - gputrace-workload's CUPTI and agent flags: map the
 * simulated libcupti.so.13 as PyTorch does, subscribe to it as
 * torch.profiler does, load gputrace's agent and call gputrace_agent_start
 * (what gputrace's injector does with ptrace), and the --varied section.
 * README.md ("CUPTI and the agent") is the contract.
 */
#define _GNU_SOURCE
#include "workload_cupti.h"
#include "cupti_sim.h"
#include "workload_nccl.h"

#include <dirent.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

struct cupti_opts copt;

/* The agent's argument (tracer-common's gpu::AgentArgs, protocol 1). */
#define AGENT_PROTOCOL 2
#define AGENT_PATH_LEN 4096
struct agent_args {
    uint32_t version, kinds;
    uint64_t ring_capacity, names_size;
    uint32_t flush_period_ms, hello_timeout_ms, finalize_timeout_ms, buffer_count, buffer_size, sample_percent;
    char cupti_path[AGENT_PATH_LEN];
};
_Static_assert(sizeof(struct agent_args) == 48 + AGENT_PATH_LEN, "AgentArgs layout");
_Static_assert(offsetof(struct agent_args, cupti_path) == 48, "AgentArgs.cupti_path");

static void *g_cupti_handle;   /* --map-cupti / --subscribe-cupti */
static void *g_agent_handle;   /* --load-agent */
static int64_t g_agent_start_rc;

/* Path of `name` in the workload's own directory. */
static void own_dir_path(char *out, size_t n, const char *name)
{
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len <= 0) {
        snprintf(out, n, "%s", name);
        return;
    }
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    size_t dir = slash ? (size_t)(slash - exe) : 0;
    size_t nl = strlen(name);
    if (dir + 1 + nl + 1 > n) {
        snprintf(out, n, "%s", name);
        return;
    }
    memcpy(out, exe, dir);
    out[dir] = '/';
    memcpy(out + dir + 1, name, nl + 1);
}

int parse_cupti_flag(const char *a, const char *val, int argc, char **argv, int *i, int *counted)
{
#define CUPTI_VALUE() (val != NULL ? val : (*i + 1 < argc ? argv[++*i] : NULL))
#define CUPTI_SWITCH() do { if (val != NULL) usage_error("%s takes no value", a); } while (0)
    *counted = 0;
    if (!strcmp(a, "--varied")) { copt.varied = parse_u64(a, CUPTI_VALUE()); *counted = 1; }
    else if (!strcmp(a, "--map-cupti")) { CUPTI_SWITCH(); copt.map_cupti = 1; }
    else if (!strcmp(a, "--subscribe-cupti")) { CUPTI_SWITCH(); copt.subscribe_cupti = 1; }
    else if (!strcmp(a, "--load-agent") || !strcmp(a, "--agent-cupti")) {
        const char *p = CUPTI_VALUE();
        if (p == NULL || *p == '\0') usage_error("%s needs a path", a);
        if (a[2] == 'l') copt.agent = p;
        else copt.agent_cupti = p;
    } else if (!strcmp(a, "--agent-kinds")) copt.kinds = parse_u64(a, CUPTI_VALUE());
    else if (!strcmp(a, "--agent-ring")) copt.ring = parse_u64(a, CUPTI_VALUE());
    else if (!strcmp(a, "--agent-names")) copt.names = parse_u64(a, CUPTI_VALUE());
    else if (!strcmp(a, "--agent-flush-ms")) copt.flush_ms = parse_u64(a, CUPTI_VALUE());
    else if (!strcmp(a, "--agent-hello-ms")) copt.hello_ms = parse_u64(a, CUPTI_VALUE());
    else if (!strcmp(a, "--agent-finalize-ms")) copt.finalize_ms = parse_u64(a, CUPTI_VALUE());
    else if (!strcmp(a, "--agent-buffers")) copt.buffers = parse_u64(a, CUPTI_VALUE());
    else if (!strcmp(a, "--agent-buffer-size")) copt.buffer_size = parse_u64(a, CUPTI_VALUE());
    else if (!strcmp(a, "--agent-join")) { CUPTI_SWITCH(); copt.agent_join = 1; }
    else if (!strcmp(a, "--cupti-report")) { CUPTI_SWITCH(); copt.cupti_report = 1; }
    else if (!strcmp(a, "--wait-stdin-end")) { CUPTI_SWITCH(); copt.end_wait = 1; }
    else if (!strcmp(a, "--fork-child")) { CUPTI_SWITCH(); copt.fork_child = 1; }
    else if (!strcmp(a, "--end-launches")) copt.end_launches = parse_u64(a, CUPTI_VALUE());
    else if (!strcmp(a, "--take-cupti")) { CUPTI_SWITCH(); copt.take_cupti = 1; }
    else return 0;
    return 1;
#undef CUPTI_VALUE
#undef CUPTI_SWITCH
}

static void cupti_die(const char *what, const char *detail)
{
    fprintf(stderr, "gputrace-workload: main: %s failed: %s\n", what, detail ? detail : "?");
    fflush(stderr);
    exit(1);
}

/* The workload's own subscriber callback: never enabled for anything. */
static void own_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data)
{
    (void)userdata;
    (void)domain;
    (void)cbid;
    (void)data;
}

void wcupti_setup(void)
{
    if (!copt.map_cupti && !copt.subscribe_cupti) return;
    char path[PATH_MAX];
    own_dir_path(path, sizeof(path), "libcupti.so.13");
    g_cupti_handle = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (g_cupti_handle == NULL) cupti_die("dlopen(libcupti.so.13)", dlerror());
    if (!copt.subscribe_cupti) return;
    CUptiResult (*sub)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *) =
        (CUptiResult(*)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *))dlsym(g_cupti_handle, "cuptiSubscribe");
    if (sub == NULL) cupti_die("dlsym(cuptiSubscribe)", dlerror());
    CUpti_SubscriberHandle h = NULL;
    CUptiResult r = sub(&h, own_callback, NULL);
    if (r != CUPTI_SUCCESS) {
        char msg[32];
        snprintf(msg, sizeof(msg), "CUptiResult %d", (int)r);
        cupti_die("cuptiSubscribe", msg);
    }
}

/* --take-cupti: a tool that wants CUPTI while the workers launch (as
 * torch.profiler started mid-run): tries to subscribe every 2 ms, for 10 s
 * at most, and keeps the subscription it gets. */
static void *take_cupti(void *arg)
{
    (void)arg;
    CUptiResult (*sub)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *) =
        (CUptiResult(*)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *))dlsym(g_cupti_handle, "cuptiSubscribe");
    if (sub == NULL) cupti_die("dlsym(cuptiSubscribe)", dlerror());
    for (unsigned tries = 1; tries <= 5000; tries++) {
        CUpti_SubscriberHandle h = NULL;
        if (sub(&h, own_callback, NULL) == CUPTI_SUCCESS) {
            printf("own cupti subscribed tries=%u\n", tries);
            fflush(stdout);
            return NULL;
        }
        struct timespec ts = { 0, 2000000 };
        nanosleep(&ts, NULL);
    }
    printf("own cupti never subscribed\n");
    fflush(stdout);
    return NULL;
}

void wcupti_take_start(void)
{
    if (!copt.take_cupti) return;
    if (g_cupti_handle == NULL) cupti_die("--take-cupti", "needs --map-cupti");
    pthread_t t;
    if (pthread_create(&t, NULL, take_cupti, NULL) != 0) cupti_die("pthread_create", "--take-cupti");
    pthread_detach(t);
}

void wcupti_start_agent(void)
{
    if (copt.agent == NULL) return;
    g_agent_handle = dlopen(copt.agent, RTLD_NOW | RTLD_LOCAL);
    if (g_agent_handle == NULL) cupti_die("dlopen(agent)", dlerror());
    int64_t (*start)(const struct agent_args *) =
        (int64_t(*)(const struct agent_args *))dlsym(g_agent_handle, "gputrace_agent_start");
    if (start == NULL) cupti_die("dlsym(gputrace_agent_start)", dlerror());
    static struct agent_args args;
    memset(&args, 0, sizeof(args));
    args.version = AGENT_PROTOCOL;
    args.kinds = (uint32_t)(copt.kinds ? copt.kinds : 15);
    args.ring_capacity = copt.ring;
    args.names_size = copt.names;
    args.flush_period_ms = (uint32_t)copt.flush_ms;
    args.hello_timeout_ms = (uint32_t)copt.hello_ms;
    args.finalize_timeout_ms = (uint32_t)copt.finalize_ms;
    args.buffer_count = (uint32_t)copt.buffers;
    args.buffer_size = (uint32_t)copt.buffer_size;
    if (copt.agent_cupti) snprintf(args.cupti_path, sizeof(args.cupti_path), "%s", copt.agent_cupti);
    else own_dir_path(args.cupti_path, sizeof(args.cupti_path), "libcupti.so.13");
    g_agent_start_rc = start(&args);
    printf("agent start=%" PRId64 " pid=%d\n", g_agent_start_rc, (int)getpid());
    fflush(stdout);
}

/* --varied: N x cuLaunchKernel with grids and blocks that vary with i. */
void wcupti_pass(struct worker *w)
{
    const int ptsz = opt.ptsz || opt.per_thread;
    for (uint64_t i = 0; i < copt.varied; i++) {
        const unsigned gx = 1 + (unsigned)(i % 5), gy = 1 + (unsigned)(i % 3), gz = 1 + (unsigned)(i % 2);
        const unsigned bx = 32 * (1 + (unsigned)(i % 4)), by = 1 + (unsigned)(i % 2);
        CUfunction f = g_funcs[i % 3];
        CUresult r = ptsz ? cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, 1, 0, w->stream, w->params, NULL)
                          : cuLaunchKernel(f, gx, gy, gz, bx, by, 1, 0, w->stream, w->params, NULL);
        w->calls++;
        if (UNLIKELY(r != CUDA_SUCCESS)) die_cu((int)w->idx, ptsz ? "cuLaunchKernel_ptsz" : "cuLaunchKernel", r);
    }
}

static void fork_child(void);

void wcupti_end_wait(void)
{
    if (copt.fork_child) fork_child();
    if (copt.end_wait) {
        printf("passes done\n");
        fflush(stdout);
        char line[256];
        if (fgets(line, sizeof(line), stdin) == NULL) {
            /* EOF, error or signal: go on */
        }
    }
    void *params[6] = { 0 };
    for (uint64_t i = 0; i < copt.end_launches; i++) {
        CUresult r = cuLaunchKernel(g_funcs[0], 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
        if (r != CUDA_SUCCESS) die_cu(-1, "cuLaunchKernel (--end-launches)", r);
    }
}

/* Does this process hold a descriptor of the agent's memfd? */
static int holds_agent_memfd(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL) return 0;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[300], target[256];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, target, sizeof(target) - 1);
        if (n > 0) {
            target[n] = '\0';
            if (strstr(target, "gputrace-gpu")) found = 1;
        }
    }
    closedir(d);
    return found;
}

/* --fork-child: a child makes 20 launches (observed by its copy of CUPTI)
 * and exits 0, or 3 if it still holds the agent's memfd; a crash shows as
 * 128 + signal. */
static void fork_child(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        void *params[6] = { 0 };
        for (int i = 0; i < 20; i++) cuLaunchKernel(g_funcs[0], 64, 1, 1, 64, 1, 1, 0, NULL, params, NULL);
        _exit(holds_agent_memfd() ? 3 : 0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) die_msg(-1, "fork/waitpid failed");
    printf("fork child_status=%d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

void wcupti_report(void)
{
    if (copt.agent != NULL) {
        for (unsigned t = 0; t < opt.threads; t++)
            printf("agent window thread=%u tid=%d start_ns=%" PRIu64 " end_ns=%" PRIu64 "\n", t,
                   (int)g_workers[t].tid, g_workers[t].window_start_ns, g_workers[t].window_end_ns);
    }
    if (copt.agent != NULL && copt.agent_join) {
        int64_t (*join)(const void *) = (int64_t(*)(const void *))dlsym(g_agent_handle, "gputrace_agent_join");
        int64_t rc = join ? join(NULL) : -1;
        int unloaded = 0;
        if (rc == 0) unloaded = dlclose(g_agent_handle) == 0;
        printf("agent join=%" PRId64 " unloaded=%d\n", rc, unloaded);
    }
    if (copt.cupti_report) {
        void *h = g_cupti_handle ? g_cupti_handle : dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
        int (*get)(struct sim_cupti_state *) = h ? (int (*)(struct sim_cupti_state *))dlsym(h, "sim_cupti_get_state") : NULL;
        struct sim_cupti_state st;
        memset(&st, 0, sizeof(st));
        if (get) get(&st);
        printf("cupti loaded=%d subscribed=%u subscribes=%u refused=%u finalizes=%u finalize_site=%u observing=%u "
               "kinds=%u records=%" PRIu64 " dropped=%" PRIu64 " buffers=%" PRIu64 "\n",
               get != NULL, st.subscribed, st.subscribes, st.refused_subscribes, st.finalizes, st.finalize_site,
               st.observing, st.kinds, st.records, st.dropped, st.buffers_completed);
    }
    fflush(stdout);
}
