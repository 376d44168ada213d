/*
 * A booby-trapped libcuda.so.1, built by the security tests
 * (tests/tests/untrusted_libraries.rs) in a directory that an unprivileged
 * user owns. Whoever loads it runs its constructor: it leaves a marker file
 * in MARKER_DIR whose name says who ran it (uid, euid, no_new_privs,
 * seccomp mode, effective capabilities, executable). Loaded by gputrace's
 * calibration helper it also waits TRAP_HELPER_MS so the test can read the
 * helper's /proc/PID/status while it runs.
 *
 * Its cu* functions answer calibration with a layout of its own choosing
 * (the kernel name pointer at handle+8, where the simulated driver keeps
 * it at +40): a result that must never reach the calibration cache.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef MARKER_DIR
#error "build with -DMARKER_DIR=\"/abs/dir\""
#endif
#ifndef TRAP_HELPER_MS
#define TRAP_HELPER_MS 1500
#endif

/* The value of `key` (e.g. "NoNewPrivs:") in /proc/self/status, or "?". */
static void status_field(const char *status, const char *key, char *out, size_t n)
{
    const char *p = strstr(status, key);
    snprintf(out, n, "?");
    if (!p)
        return;
    p += strlen(key);
    while (*p == ' ' || *p == '\t')
        p++;
    size_t i = 0;
    while (p[i] && p[i] != '\n' && i + 1 < n) {
        out[i] = p[i];
        i++;
    }
    out[i] = 0;
}

__attribute__((constructor)) static void trap(void)
{
    char status[8192] = {0};
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, status, sizeof status - 1);
        if (n < 0)
            n = 0;
        status[n] = 0;
        close(fd);
    }
    char nnp[32], seccomp[32], capeff[32];
    status_field(status, "NoNewPrivs:", nnp, sizeof nnp);
    status_field(status, "Seccomp:", seccomp, sizeof seccomp);
    status_field(status, "CapEff:", capeff, sizeof capeff);
    char exe[256] = {0};
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len < 0)
        snprintf(exe, sizeof exe, "?");
    for (char *c = exe; *c; c++)
        if (*c == '/')
            *c = '_';
    char name[1024];
    snprintf(name, sizeof name, "%s/uid=%d,euid=%d,pid=%d,nnp=%s,seccomp=%s,capeff=%s,exe=%s",
             MARKER_DIR, (int)getuid(), (int)geteuid(), (int)getpid(), nnp, seccomp, capeff, exe);
    fd = open(name, O_CREAT | O_WRONLY | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0)
        close(fd);
    /* In gputrace's helper (not in the victim): stay a while, to be seen. */
    size_t el = strlen(exe);
    if (el >= 9 && strcmp(exe + el - 9, "_gputrace") == 0) {
        struct timespec ts = {TRAP_HELPER_MS / 1000, (TRAP_HELPER_MS % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

typedef int CUresult;
struct trap_func {
    uint64_t magic;
    const char *name; /* +8 */
};

CUresult cuInit(unsigned int flags) { (void)flags; return 0; }
CUresult cuDeviceGet(int *dev, int ordinal) { (void)ordinal; *dev = 0; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) { (void)dev; *ctx = (void *)0x1000; return 0; }
CUresult cuCtxSetCurrent(void *ctx) { (void)ctx; return 0; }
CUresult cuModuleLoadData(void **module, const void *image) { *module = (void *)image; return 0; }

CUresult cuModuleGetFunction(void **f, void *module, const char *name)
{
    (void)module;
    struct trap_func *p = malloc(sizeof *p);
    if (!p)
        return 2;
    p->magic = 0x5041525450415254ULL;
    p->name = strdup(name);
    *f = p;
    return 0;
}

CUresult cuFuncGetName(const char **name, void *f)
{
    *name = ((struct trap_func *)f)->name;
    return 0;
}

/* Something for the probes to attach to. */
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void *stream, void **params, void **extra)
{
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz;
    (void)shared; (void)stream; (void)params; (void)extra;
    return 0;
}

CUresult cuMemAlloc_v2(uint64_t *dptr, size_t bytes)
{
    (void)bytes;
    *dptr = 0x7f0000000000ULL;
    return 0;
}
