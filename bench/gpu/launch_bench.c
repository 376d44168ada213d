// Host-side cost of one cuLaunchKernel (an empty kernel) on the real driver:
// each call timed alone, the stream synchronised every 256 launches so the
// queue never blocks a launch. Waits for a file before each round so a
// tracer can be attached between rounds; prints the median ns per call.
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static const char *ptx =
    ".version 6.0\n.target sm_50\n.address_size 64\n.visible .entry empty_kernel()\n{\n\tret;\n}\n";
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return x < y ? -1 : x > y; }
int main(int argc, char **argv) {
    const char *base = argv[1]; int rounds = atoi(argv[2]); int n = 20000;
    CUdevice d; CUcontext c; CUmodule m; CUfunction f; CUstream s;
    cuInit(0); cuDeviceGet(&d, 0); cuDevicePrimaryCtxRetain(&c, d); cuCtxSetCurrent(c);
    if (cuModuleLoadData(&m, ptx) || cuModuleGetFunction(&f, m, "empty_kernel")) { fprintf(stderr, "load failed\n"); return 1; }
    cuStreamCreate(&s, 1);
    double *t = malloc(sizeof(double) * n);
    for (int i = 0; i < 2000; i++) cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL);
    cuStreamSynchronize(s);
    printf("pid %d\n", getpid()); fflush(stdout);
    for (int r = 0; r < rounds; r++) {
        char path[256]; snprintf(path, sizeof path, "%s.go.%d", base, r);
        snprintf(path, sizeof path, "%s.ready.%d", base, r); fclose(fopen(path, "w"));
        snprintf(path, sizeof path, "%s.go.%d", base, r);
        while (access(path, F_OK) != 0) usleep(20000);
        for (int i = 0; i < n; i++) {
            double a = now();
            cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL);
            t[i] = now() - a;
            if (i % 256 == 255) cuStreamSynchronize(s);
        }
        cuStreamSynchronize(s);
        qsort(t, n, sizeof(double), cmp);
        printf("round %d median_ns %.0f p10 %.0f p90 %.0f\n", r, t[n / 2], t[n / 10], t[n * 9 / 10]); fflush(stdout);
        snprintf(path, sizeof path, "%s.done.%d", base, r); fclose(fopen(path, "w"));
    }
    return 0;
}
