// The test library injected into victims. Built with -shared -fPIC
// -fno-omit-frame-pointer -DPROBE_ID=N. Its constructor and destructor append
// "loaded PID id N" / "unloaded PID id N" to the file named by $PROBE_MARKER.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#ifndef PROBE_ID
#define PROBE_ID 1
#endif

static int64_t calls;

static void mark(const char *what) {
    const char *path = getenv("PROBE_MARKER");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s %d id %d\n", what, (int)getpid(), PROBE_ID);
    fclose(f);
}

__attribute__((constructor)) static void probe_init(void) { mark("loaded"); }
__attribute__((destructor)) static void probe_fini(void) { mark("unloaded"); }

// arg: two int64; returns their sum + 1000 * PROBE_ID.
int64_t probe_add(const int64_t *arg) {
    calls++;
    return arg[0] + arg[1] + 1000 * PROBE_ID;
}

int64_t probe_calls(const void *arg) { (void)arg; return calls; }
int64_t probe_getpid(const void *arg) { (void)arg; return getpid(); }
int64_t probe_is_null(const void *arg) { return arg == NULL; }
int64_t probe_self(const void *arg) { (void)arg; return (int64_t)(intptr_t)&probe_add; }

// 1 when the ABI stack alignment holds (rbp % 16 == 0 after the prologue)
// and the argument copy is 16-byte aligned; 0 otherwise.
int64_t probe_aligned(const void *arg) {
    uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
    return fp % 16 == 0 && (uintptr_t)arg % 16 == 0;
}

// arg: int64 n, then n bytes; returns n * 1000000 + sum of the bytes.
int64_t probe_sum(const uint8_t *arg) {
    int64_t n = *(const int64_t *)arg, sum = 0;
    for (int64_t i = 0; i < n; i++) sum += arg[8 + i];
    return n * 1000000 + sum;
}

// Faults (SIGSEGV at address 16).
int64_t probe_crash(const void *arg) {
    (void)arg;
    *(volatile int *)16 = 1;
    return 0;
}

// arg: int64 milliseconds. Sleeps (nanosleep) / spins (no system call).
int64_t probe_sleep_ms(const int64_t *ms) {
    struct timespec ts = {*ms / 1000, (*ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
    return 1;
}
int64_t probe_spin_ms(const int64_t *ms) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < *ms);
    return 2;
}
