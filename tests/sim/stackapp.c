/*
 * stackapp.c - known call chains into the simulated libcuda and libcudart,
 * for the call-stack tests (`--stacks`).  Built -O2 -fomit-frame-pointer
 * (as most distributions' binaries are): the tracer must unwind it from
 * .eh_frame, not frame pointers.  README.md is the contract.
 *
 *   main -> app_step -> app_launch  -> cuLaunchKernel
 *   main -> app_step -> app_sync    -> cuStreamSynchronize
 *   main -> app_step -> app_runtime -> cudaLaunchKernel -> cuLaunchKernel
 *
 * The last one is a probed call nested in another: its stack crosses the
 * return address the outer call's uretprobe replaced.
 *
 * Usage: gputrace-stackapp STEPS [--wait] [--linger MS]
 *   --wait: print "ready" and wait for a line on stdin before the steps, and
 *           after "done", for another line before exiting;
 *   --linger MS: sleep MS milliseconds before exiting (a tracer resolves
 *           stacks while the process lives).
 * Prints "done steps=STEPS" after the steps.
 */
#define _GNU_SOURCE
#include "cuda_sim.h"
#include "cudart_sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

/* Results land here so no call is a tail call (each frame stays on the stack). */
static volatile int g_sink;

static const char k_ptx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n\n"
    ".visible .entry _Z10app_kernelPf(\n\t.param .u64 _Z10app_kernelPf_param_0\n)\n{\n\tret;\n}\n";

static const simFatBinWrapper k_fatbin = { SIM_FATBINC_MAGIC, SIM_FATBINC_VERSION, k_ptx, NULL };

/* The host stub nvcc would generate for app_kernel. */
NOINLINE void app_kernel_stub(float *p)
{
    g_sink += (p != NULL);
}

static CUfunction g_function;

NOINLINE int app_launch(int step)
{
    int r = cuLaunchKernel(g_function, 1 + step % 2, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
    g_sink += r;
    return r;
}

NOINLINE int app_sync(int step)
{
    int r = cuStreamSynchronize(NULL);
    g_sink += r + step;
    return r;
}

NOINLINE int app_runtime(int step)
{
    dim3 grid = { 1u + (unsigned)step % 2, 1, 1 };
    dim3 block = { 32, 1, 1 };
    int r = cudaLaunchKernel((const void *)app_kernel_stub, grid, block, NULL, 0, NULL);
    g_sink += r;
    return r;
}

NOINLINE int app_step(int step)
{
    int r = app_launch(step);
    r |= app_sync(step);
    r |= app_runtime(step);
    g_sink += step;
    return r;
}

static void fail(const char *what, int r)
{
    fprintf(stderr, "gputrace-stackapp: %s failed: %d\n", what, r);
    exit(1);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gputrace-stackapp STEPS [--wait]\n");
        return 2;
    }
    int steps = atoi(argv[1]);
    int wait = 0;
    long linger_ms = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--wait") == 0)
            wait = 1;
        else if (strcmp(argv[i], "--linger") == 0 && i + 1 < argc)
            linger_ms = atol(argv[++i]);
        else {
            fprintf(stderr, "gputrace-stackapp: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    int r;
    char line[16];
    if ((r = cuInit(0)) != CUDA_SUCCESS) fail("cuInit", r);
    void **handle = __cudaRegisterFatBinary((void *)&k_fatbin);
    if (handle == NULL) fail("__cudaRegisterFatBinary", -1);
    __cudaRegisterFunction(handle, (const char *)app_kernel_stub, (char *)"_Z10app_kernelPf", "_Z10app_kernelPf", -1,
                           NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterFatBinaryEnd(handle);
    CUmodule module;
    if ((r = cuModuleLoadData(&module, k_ptx)) != CUDA_SUCCESS) fail("cuModuleLoadData", r);
    if ((r = cuModuleGetFunction(&g_function, module, "_Z10app_kernelPf")) != CUDA_SUCCESS)
        fail("cuModuleGetFunction", r);
    if (wait) {
        printf("ready\n");
        fflush(stdout);
        if (fgets(line, sizeof line, stdin) == NULL) return 1;
    }
    for (int i = 0; i < steps; i++)
        if ((r = app_step(i)) != 0) fail("app_step", r);
    printf("done steps=%d\n", steps);
    fflush(stdout);
    if (wait && fgets(line, sizeof line, stdin) == NULL) return 1;
    if (linger_ms > 0) {
        struct timespec ts = { linger_ms / 1000, (linger_ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
    }
    __cudaUnregisterFatBinary(handle);
    return 0;
}
