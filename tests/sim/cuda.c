/*
 * cuda.c - simulated CUDA driver (libcuda.so.1) for gputrace tests.
 *
 * No GPU is involved.  Exported functions have the real names and the real C
 * signatures of cuda.h (see include/cuda_sim.h), so that uprobes attached to
 * them see the same register/stack layout as with the real driver.
 *
 * Rules that keep the traced call counts exact:
 *   - an exported function never calls another exported function; shared
 *     behaviour lives in static helpers (so the _ptsz/_ptds variants are
 *     separate entry points that do not re-enter the plain ones);
 *   - the library is built with -fno-ipa-icf so that identical entry points
 *     are not folded into one another.
 */
#define _GNU_SOURCE
#include "sim_internal.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ */
/* Global state                                                        */
/* ------------------------------------------------------------------ */

SIM_HIDDEN pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
SIM_HIDDEN int g_initialized;          /* accessed with __atomic builtins */
static unsigned long g_sync_us;        /* GPUTRACE_SIM_SYNC_US, read at cuInit */
SIM_HIDDEN unsigned int g_next_id = 1; /* stream/event/graph ids (under g_lock) */
static struct CUctx_st g_primary_ctx = { MAGIC_CTX, 0, 0, 1 };
static unsigned int g_primary_refs; /* under g_lock */
static __thread CUcontext t_current_ctx;

static const char k_device_name[] = "Simulated GPU";

SIM_HIDDEN CUcontext sim_current_ctx(void)
{
    return t_current_ctx;
}

SIM_HIDDEN unsigned int sim_next_id(void)
{
    pthread_mutex_lock(&g_lock);
    unsigned int id = g_next_id++;
    pthread_mutex_unlock(&g_lock);
    return id;
}

static void sim_sync_sleep(void)
{
    unsigned long us = g_sync_us;
    if (us == 0) return;
    struct timespec ts = { (time_t)(us / 1000000UL), (long)(us % 1000000UL) * 1000L };
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

/* ------------------------------------------------------------------ */
/* Fake device address space and allocation records                    */
/* ------------------------------------------------------------------ */

#define DEV_BASE   0x7f0000000000ULL
#define DEV_ALIGN  (2ULL << 20)         /* 2 MiB */
#define MAX_ALLOC  (64ULL << 30)        /* 64 GiB */
#define PITCH_ALIGN 512ULL

enum rec_kind {
    REC_DEVICE  = 1 << 0, /* cuMemAlloc_v2 */
    REC_ASYNC   = 1 << 1, /* cuMemAllocAsync */
    REC_MANAGED = 1 << 2, /* cuMemAllocManaged */
    REC_PITCH   = 1 << 3, /* cuMemAllocPitch_v2 */
    REC_VA      = 1 << 4, /* cuMemAddressReserve */
    REC_PHYS    = 1 << 5, /* cuMemCreate (base = handle value) */
    REC_HOST    = 1 << 6, /* cuMemHostAlloc / cuMemAllocHost_v2 (real memory) */
};
#define REC_FREEABLE (REC_DEVICE | REC_ASYNC | REC_MANAGED | REC_PITCH)

struct rec { uint64_t base; uint64_t size; uint64_t span; int kind; };
struct span { uint64_t base; uint64_t span; };

static struct rec *g_recs;        /* live records (under g_lock) */
static size_t g_nrecs, g_caprecs;
static struct span *g_free;       /* freed address ranges, reused by exact span, lowest address first */
static size_t g_nfree, g_capfree;
static uint64_t g_next_va = DEV_BASE;
static uint64_t g_next_handle = 1;

static inline uint64_t round_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

/*
 * Reserve a fake address range; caller holds g_lock.  A previously freed
 * range with exactly the same span (and suitable alignment) is reused, the
 * lowest such address first; otherwise the bump pointer advances.
 */
static uint64_t va_take(uint64_t span, uint64_t align)
{
    size_t best = (size_t)-1;
    for (size_t i = 0; i < g_nfree; i++) {
        if (g_free[i].span == span && g_free[i].base % align == 0 &&
            (best == (size_t)-1 || g_free[i].base < g_free[best].base))
            best = i;
    }
    if (best != (size_t)-1) {
        uint64_t base = g_free[best].base;
        g_free[best] = g_free[--g_nfree];
        return base;
    }
    uint64_t base = round_up(g_next_va, align);
    g_next_va = base + span;
    return base;
}

static int va_give_back(uint64_t base, uint64_t span)
{
    if (g_nfree == g_capfree) {
        size_t cap = g_capfree ? g_capfree * 2 : 64;
        struct span *n = realloc(g_free, cap * sizeof(*n));
        if (!n) return -1;
        g_free = n;
        g_capfree = cap;
    }
    g_free[g_nfree].base = base;
    g_free[g_nfree].span = span;
    g_nfree++;
    return 0;
}

static int rec_add(uint64_t base, uint64_t size, uint64_t span, int kind)
{
    if (g_nrecs == g_caprecs) {
        size_t cap = g_caprecs ? g_caprecs * 2 : 64;
        struct rec *n = realloc(g_recs, cap * sizeof(*n));
        if (!n) return -1;
        g_recs = n;
        g_caprecs = cap;
    }
    g_recs[g_nrecs].base = base;
    g_recs[g_nrecs].size = size;
    g_recs[g_nrecs].span = span;
    g_recs[g_nrecs].kind = kind;
    g_nrecs++;
    return 0;
}

static struct rec *rec_find(uint64_t base, int kinds)
{
    for (size_t i = 0; i < g_nrecs; i++)
        if (g_recs[i].base == base && (g_recs[i].kind & kinds)) return &g_recs[i];
    return NULL;
}

static struct rec *rec_find_containing(uint64_t addr, uint64_t len, int kinds)
{
    for (size_t i = 0; i < g_nrecs; i++) {
        struct rec *r = &g_recs[i];
        if ((r->kind & kinds) && addr >= r->base && len <= r->span && addr - r->base <= r->span - len) return r;
    }
    return NULL;
}

static void rec_remove(struct rec *r)
{
    *r = g_recs[--g_nrecs];
}

SIM_HIDDEN CUmemorytype sim_memory_type(uint64_t addr)
{
    pthread_mutex_lock(&g_lock);
    struct rec *r = rec_find_containing(addr, 1, REC_FREEABLE);
    pthread_mutex_unlock(&g_lock);
    return r ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
}

SIM_HIDDEN int sim_host_pinned(uint64_t addr)
{
    pthread_mutex_lock(&g_lock);
    struct rec *r = rec_find_containing(addr, 1, REC_HOST);
    pthread_mutex_unlock(&g_lock);
    return r != NULL;
}

/* Device-style allocation: fake address, 2 MiB aligned. */
static CUresult dev_alloc(CUdeviceptr *dptr, uint64_t bytesize, int kind)
{
    REQUIRE_INIT();
    if (dptr == NULL || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    if (bytesize > MAX_ALLOC) return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t span = round_up(bytesize, DEV_ALIGN);
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_lock);
    uint64_t base = va_take(span, DEV_ALIGN);
    if (rec_add(base, bytesize, span, kind) != 0) {
        va_give_back(base, span);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&g_lock);
    if (rc == CUDA_SUCCESS) *dptr = (CUdeviceptr)base;
    return rc;
}

static CUresult dev_free(CUdeviceptr dptr)
{
    REQUIRE_INIT();
    if (dptr == 0) return CUDA_SUCCESS;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct rec *r = rec_find(dptr, REC_FREEABLE);
    if (r) {
        uint64_t base = r->base, span = r->span;
        rec_remove(r);
        va_give_back(base, span);
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static CUresult host_alloc(void **pp, size_t bytesize)
{
    REQUIRE_INIT();
    if (pp == NULL || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    if ((uint64_t)bytesize > MAX_ALLOC) return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytesize) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_lock);
    int err = rec_add((uint64_t)(uintptr_t)p, bytesize, bytesize, REC_HOST);
    pthread_mutex_unlock(&g_lock);
    if (err) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Error strings                                                       */
/* ------------------------------------------------------------------ */

struct err_desc { CUresult code; const char *name; const char *str; };
#define E(code, str) { code, #code, str }
static const struct err_desc k_errors[] = {
    E(CUDA_SUCCESS, "no error"),
    E(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    E(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    E(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    E(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled while using external profiling tool"),
    E(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
    E(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable"),
    E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    E(CUDA_ERROR_DEVICE_NOT_LICENSED, "device doesn't have valid Grid license"),
    E(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
    E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    E(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
    E(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
    E(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
    E(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
    E(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device"),
    E(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
    E(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"),
    E(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid"),
    E(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
    E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    E(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
    E(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    E(CUDA_ERROR_NOT_READY, "device not ready"),
    E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
    E(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated"),
    E(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
    E(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch"),
    E(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
    E(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
    E(CUDA_ERROR_FUNCTION_NOT_LOADED, "the function handle is not loaded when calling an API that requires a loaded function"),
    E(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef E

static const struct err_desc *err_lookup(CUresult error)
{
    for (size_t i = 0; i < sizeof(k_errors) / sizeof(k_errors[0]); i++)
        if (k_errors[i].code == error) return &k_errors[i];
    return NULL;
}

/* Usable before cuInit, like the real driver. */
CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
    if (pStr == NULL) return CUDA_ERROR_INVALID_VALUE;
    const struct err_desc *d = err_lookup(error);
    if (d == NULL) {
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pStr = d->str;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    if (pStr == NULL) return CUDA_ERROR_INVALID_VALUE;
    const struct err_desc *d = err_lookup(error);
    if (d == NULL) {
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pStr = d->name;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Initialization, version, device                                     */
/* ------------------------------------------------------------------ */

CUresult CUDAAPI cuInit(unsigned int Flags)
{
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    if (!initialized()) {
        unsigned long us = 0;
        const char *s = getenv("GPUTRACE_SIM_SYNC_US");
        if (s && *s) {
            char *end = NULL;
            errno = 0;
            unsigned long long v = strtoull(s, &end, 10);
            if (errno == 0 && end && *end == '\0' && s[0] != '-') us = (unsigned long)v;
        }
        g_sync_us = us;
        __atomic_store_n(&g_initialized, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

/* Usable before cuInit, like the real driver. */
CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
    if (driverVersion == NULL) return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = SIM_CUDA_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    REQUIRE_INIT();
    if (device == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
    *device = 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    REQUIRE_INIT();
    if (count == NULL) return CUDA_ERROR_INVALID_VALUE;
    *count = 1;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    REQUIRE_INIT();
    if (name == NULL || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    size_t n = sizeof(k_device_name) - 1;
    if (n > (size_t)len - 1) n = (size_t)len - 1;
    memcpy(name, k_device_name, n);
    name[n] = '\0';
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Contexts                                                            */
/* ------------------------------------------------------------------ */

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    REQUIRE_INIT();
    if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    g_primary_refs++;
    pthread_mutex_unlock(&g_lock);
    *pctx = &g_primary_ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    REQUIRE_INIT();
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (g_primary_refs == 0) rc = CUDA_ERROR_INVALID_CONTEXT;
    else g_primary_refs--;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    REQUIRE_INIT();
    if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    struct CUctx_st *c = calloc(1, sizeof(*c));
    if (c == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    c->magic = MAGIC_CTX;
    c->dev = dev;
    c->flags = flags;
    c->primary = 0;
    t_current_ctx = c;
    *pctx = c;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
    REQUIRE_INIT();
    if (!ctx_ok(ctx) || ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
    if (t_current_ctx == ctx) t_current_ctx = NULL;
    ctx->magic = MAGIC_DEAD;
    free(ctx);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    REQUIRE_INIT();
    if (ctx != NULL && !ctx_ok(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    t_current_ctx = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    REQUIRE_INIT();
    if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
    *pctx = t_current_ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    REQUIRE_INIT();
    sim_sync_sleep();
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Modules and libraries                                               */
/* ------------------------------------------------------------------ */

static int ptx_ident_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '$' || c == '%' || c == '.';
}

static void image_free(struct sim_image *img)
{
    for (unsigned i = 0; i < img->count; i++) {
        if (img->kernels && img->kernels[i]) {
            img->kernels[i]->f.magic = MAGIC_DEAD;
            free(img->kernels[i]);
        }
        if (img->funcs && img->funcs[i]) {
            img->funcs[i]->magic = MAGIC_DEAD;
            free(img->funcs[i]);
        }
        if (img->names) free(img->names[i]);
    }
    free(img->kernels);
    free(img->funcs);
    free(img->names);
    img->magic = MAGIC_DEAD;
    free(img);
}

static int image_add_name(struct sim_image *img, unsigned *cap, const char *s, size_t n)
{
    if (img->count == *cap) {
        unsigned ncap = *cap ? *cap * 2 : 8;
        char **nn = realloc(img->names, ncap * sizeof(*nn));
        if (!nn) return -1;
        img->names = nn;
        *cap = ncap;
    }
    char *copy = malloc(n + 1);
    if (!copy) return -1;
    memcpy(copy, s, n);
    copy[n] = '\0';
    img->names[img->count++] = copy;
    return 0;
}

static struct CUfunc_st *func_new(struct sim_image *img, unsigned index, uint32_t kind, uint64_t magic)
{
    /* sizeof(struct CUkern_st) == sizeof(struct CUfunc_st): one allocation shape. */
    struct CUfunc_st *f = calloc(1, sizeof(struct CUkern_st) > sizeof(*f) ? sizeof(struct CUkern_st) : sizeof(*f));
    if (!f) return NULL;
    f->magic = magic;
    f->owner = img;
    f->index = index;
    f->kind = kind;
    f->num_regs = 32;
    f->max_threads_per_block = 1024;
    f->shared_size_bytes = 0;
    f->ptx_version = 80;
    f->name = img->names[index];
    f->function = NULL;
    return f;
}

/*
 * Parse PTX text: every ".entry NAME(" (with ".visible"/".weak" prefixes or
 * not) declares a kernel.  Returns a CUresult.
 */
static CUresult image_load(struct sim_image **out, const void *image, int is_library)
{
    if (out == NULL || image == NULL) return CUDA_ERROR_INVALID_VALUE;
    const char *ptx = image;
    if (strncmp(ptx, "\177ELF", 4) == 0) return CUDA_ERROR_INVALID_IMAGE; /* cubin: not simulated */

    struct sim_image *img = calloc(1, sizeof(*img));
    if (!img) return CUDA_ERROR_OUT_OF_MEMORY;
    img->magic = is_library ? MAGIC_LIBRARY : MAGIC_MODULE;
    unsigned cap = 0;

    const char *p = ptx;
    while ((p = strstr(p, ".entry")) != NULL) {
        const char *q = p + 6;
        int boundary_before = (p == ptx) || isspace((unsigned char)p[-1]);
        if (!boundary_before || !isspace((unsigned char)*q)) {
            p = q;
            continue;
        }
        while (isspace((unsigned char)*q)) q++;
        const char *s = q;
        while (ptx_ident_char(*q)) q++;
        const char *e = q;
        while (isspace((unsigned char)*q)) q++;
        if (e == s || *q != '(') {
            p = q;
            continue;
        }
        if (image_add_name(img, &cap, s, (size_t)(e - s)) != 0) {
            image_free(img);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        p = q;
    }

    if (img->count) {
        img->funcs = calloc(img->count, sizeof(*img->funcs));
        if (!img->funcs) goto oom;
        if (is_library) {
            img->kernels = calloc(img->count, sizeof(*img->kernels));
            if (!img->kernels) goto oom;
        }
        for (unsigned i = 0; i < img->count; i++) {
            if (is_library) {
                struct CUfunc_st *k = func_new(img, i, FUNC_KIND_LIBRARY_KERNEL, MAGIC_KERNEL);
                if (!k) goto oom;
                img->kernels[i] = (struct CUkern_st *)k;
                img->funcs[i] = func_new(img, i, FUNC_KIND_KERNEL_FUNCTION, MAGIC_FUNC);
                if (!img->funcs[i]) goto oom;
                k->function = img->funcs[i];
            } else {
                img->funcs[i] = func_new(img, i, FUNC_KIND_MODULE_FUNCTION, MAGIC_FUNC);
                if (!img->funcs[i]) goto oom;
            }
        }
    }
    *out = img;
    return CUDA_SUCCESS;
oom:
    image_free(img);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static int image_find(const struct sim_image *img, const char *name)
{
    for (unsigned i = 0; i < img->count; i++)
        if (strcmp(img->names[i], name) == 0) return (int)i;
    return -1;
}

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
    REQUIRE_INIT();
    if (module == NULL) return CUDA_ERROR_INVALID_VALUE;
    struct sim_image *img = NULL;
    pthread_mutex_lock(&g_lock);
    CUresult rc = image_load(&img, image, 0);
    pthread_mutex_unlock(&g_lock);
    if (rc == CUDA_SUCCESS) *module = (CUmodule)img;
    return rc;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
    REQUIRE_INIT();
    if (hmod == NULL || hmod->img.magic != MAGIC_MODULE) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&g_lock);
    image_free(&hmod->img);
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    REQUIRE_INIT();
    if (hfunc == NULL || name == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (hmod == NULL || hmod->img.magic != MAGIC_MODULE) return CUDA_ERROR_INVALID_HANDLE;
    CUresult rc = CUDA_ERROR_NOT_FOUND;
    pthread_mutex_lock(&g_lock);
    int i = image_find(&hmod->img, name);
    if (i >= 0) {
        *hfunc = hmod->img.funcs[i];
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code,
                                   CUjit_option *jitOptions, void **jitOptionsValues, unsigned int numJitOptions,
                                   CUlibraryOption *libraryOptions, void **libraryOptionValues, unsigned int numLibraryOptions)
{
    UNUSED(jitOptions);
    UNUSED(jitOptionsValues);
    UNUSED(libraryOptions);
    UNUSED(libraryOptionValues);
    REQUIRE_INIT();
    if (library == NULL) return CUDA_ERROR_INVALID_VALUE;
    if ((numJitOptions && (!jitOptions || !jitOptionsValues)) ||
        (numLibraryOptions && (!libraryOptions || !libraryOptionValues)))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_image *img = NULL;
    pthread_mutex_lock(&g_lock);
    CUresult rc = image_load(&img, code, 1);
    pthread_mutex_unlock(&g_lock);
    if (rc == CUDA_SUCCESS) *library = (CUlibrary)img;
    return rc;
}

CUresult CUDAAPI cuLibraryUnload(CUlibrary library)
{
    REQUIRE_INIT();
    if (library == NULL || library->img.magic != MAGIC_LIBRARY) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&g_lock);
    image_free(&library->img);
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    REQUIRE_INIT();
    if (pKernel == NULL || name == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (library == NULL || library->img.magic != MAGIC_LIBRARY) return CUDA_ERROR_INVALID_HANDLE;
    CUresult rc = CUDA_ERROR_NOT_FOUND;
    pthread_mutex_lock(&g_lock);
    int i = image_find(&library->img, name);
    if (i >= 0) {
        *pKernel = library->img.kernels[i];
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    REQUIRE_INIT();
    if (pFunc == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (kernel == NULL || kernel->f.magic != MAGIC_KERNEL) return CUDA_ERROR_INVALID_HANDLE;
    *pFunc = kernel->f.function;
    return CUDA_SUCCESS;
}

#ifndef SIM_NO_FUNC_GET_NAME
CUresult CUDAAPI cuFuncGetName(const char **name, CUfunction hfunc)
{
    REQUIRE_INIT();
    if (name == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (hfunc == NULL) return CUDA_ERROR_INVALID_HANDLE;
    *name = hfunc->name; /* load from offset 40 */
    return CUDA_SUCCESS;
}
#endif

/* ------------------------------------------------------------------ */
/* Launches: kept to an init check and a NULL check                    */
/* ------------------------------------------------------------------ */

/*
 * A launch on a stream under capture is not run: it becomes a kernel node of
 * the capture graph, and the call still returns CUDA_SUCCESS.  The check is a
 * pointer compare and two loads on the fast path.
 */
static inline CUresult launch_impl(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz,
                                   unsigned int shmem, CUstream s, void **params)
{
    REQUIRE_INIT();
    if (UNLIKELY(f == NULL)) return CUDA_ERROR_INVALID_HANDLE;
    if (UNLIKELY(stream_capturing(s))) {
        struct sim_captured_kernel k = { f, NULL, { gx, gy, gz }, { bx, by, bz }, shmem, params };
        return sim_capture_kernel(s, &k);
    }
    return CUDA_SUCCESS;
}

static inline CUresult launch_ex_impl(const CUlaunchConfig *config, CUfunction f, void **params)
{
    REQUIRE_INIT();
    if (UNLIKELY(config == NULL)) return CUDA_ERROR_INVALID_VALUE;
    if (UNLIKELY(f == NULL)) return CUDA_ERROR_INVALID_HANDLE;
    if (UNLIKELY(stream_capturing(config->hStream))) {
        struct sim_captured_kernel k = {
            f, NULL,
            { config->gridDimX, config->gridDimY, config->gridDimZ },
            { config->blockDimX, config->blockDimY, config->blockDimZ },
            config->sharedMemBytes, params,
        };
        return sim_capture_kernel(config->hStream, &k);
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f,
                                unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream,
                                void **kernelParams, void **extra)
{
    UNUSED(extra);
    SIM_OBSERVED(SIM_CBID_cuLaunchKernel, sim_func_name(f), hStream,
                 launch_impl(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                             hStream, kernelParams),
                 sim_obs_kernel(o_, &c_, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, 0));
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f,
                                unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream,
                                void **kernelParams, void **extra)
{
    UNUSED(extra);
    SIM_OBSERVED(SIM_CBID_cuLaunchKernel_ptsz, sim_func_name(f), hStream,
                 launch_impl(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                             hStream, kernelParams),
                 sim_obs_kernel(o_, &c_, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, 0));
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
    UNUSED(extra);
    SIM_OBSERVED(SIM_CBID_cuLaunchKernelEx, sim_func_name(f), config ? config->hStream : NULL,
                 launch_ex_impl(config, f, kernelParams),
                 sim_obs_kernel(o_, &c_, f, config->gridDimX, config->gridDimY, config->gridDimZ,
                                config->blockDimX, config->blockDimY, config->blockDimZ,
                                config->sharedMemBytes, config->hStream, 0));
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
    UNUSED(extra);
    SIM_OBSERVED(SIM_CBID_cuLaunchKernelEx_ptsz, sim_func_name(f), config ? config->hStream : NULL,
                 launch_ex_impl(config, f, kernelParams),
                 sim_obs_kernel(o_, &c_, f, config->gridDimX, config->gridDimY, config->gridDimZ,
                                config->blockDimX, config->blockDimY, config->blockDimZ,
                                config->sharedMemBytes, config->hStream, 0));
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f,
                                unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)
{
    SIM_OBSERVED(SIM_CBID_cuLaunchCooperativeKernel, sim_func_name(f), hStream,
                 launch_impl(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                             hStream, kernelParams),
                 sim_obs_kernel(o_, &c_, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, 1));
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f,
                                unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)
{
    SIM_OBSERVED(SIM_CBID_cuLaunchCooperativeKernel_ptsz, sim_func_name(f), hStream,
                 launch_impl(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                             hStream, kernelParams),
                 sim_obs_kernel(o_, &c_, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, 1));
}

/* ------------------------------------------------------------------ */
/* Memory allocation                                                   */
/* ------------------------------------------------------------------ */

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return dev_alloc(dptr, bytesize, REC_DEVICE);
}

static inline CUresult mem_alloc_async_impl(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    REQUIRE_INIT();
    if (!stream_ok(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    return dev_alloc(dptr, bytesize, REC_ASYNC);
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return mem_alloc_async_impl(dptr, bytesize, hStream);
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return mem_alloc_async_impl(dptr, bytesize, hStream);
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    REQUIRE_INIT();
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
    return dev_alloc(dptr, bytesize, REC_MANAGED);
}

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height, unsigned int ElementSizeBytes)
{
    REQUIRE_INIT();
    if (dptr == NULL || pPitch == NULL || WidthInBytes == 0 || Height == 0) return CUDA_ERROR_INVALID_VALUE;
    if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) return CUDA_ERROR_INVALID_VALUE;
    if ((uint64_t)WidthInBytes > MAX_ALLOC || (uint64_t)Height > MAX_ALLOC) return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t pitch = round_up(WidthInBytes, PITCH_ALIGN);
    if (pitch > MAX_ALLOC / Height) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = dev_alloc(dptr, pitch * Height, REC_PITCH);
    if (rc == CUDA_SUCCESS) *pPitch = (size_t)pitch;
    return rc;
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    REQUIRE_INIT();
    if (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
        return CUDA_ERROR_INVALID_VALUE;
    return host_alloc(pp, bytesize);
}

CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return host_alloc(pp, bytesize);
}

CUresult CUDAAPI cuMemFreeHost(void *p)
{
    REQUIRE_INIT();
    if (p == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct rec *r = rec_find((uint64_t)(uintptr_t)p, REC_HOST);
    if (r) {
        rec_remove(r);
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&g_lock);
    if (rc == CUDA_SUCCESS) free(p);
    return rc;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    return dev_free(dptr);
}

static inline CUresult mem_free_async_impl(CUdeviceptr dptr, CUstream hStream)
{
    REQUIRE_INIT();
    if (!stream_ok(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    return dev_free(dptr);
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return mem_free_async_impl(dptr, hStream);
}

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return mem_free_async_impl(dptr, hStream);
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags)
{
    REQUIRE_INIT();
    if (handle == NULL || prop == NULL || size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.id != 0) return CUDA_ERROR_INVALID_DEVICE;
    if (size % DEV_ALIGN != 0) return CUDA_ERROR_INVALID_VALUE;
    if ((uint64_t)size > MAX_ALLOC) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = CUDA_SUCCESS;
    uint64_t h = 0;
    pthread_mutex_lock(&g_lock);
    h = g_next_handle++;
    if (rec_add(h, size, size, REC_PHYS) != 0) rc = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&g_lock);
    if (rc == CUDA_SUCCESS) *handle = h;
    return rc;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
    REQUIRE_INIT();
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct rec *r = rec_find(handle, REC_PHYS);
    if (r) {
        rec_remove(r);
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags)
{
    REQUIRE_INIT();
    UNUSED(addr); /* placement hint: ignored */
    if (ptr == NULL || size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (size % DEV_ALIGN != 0) return CUDA_ERROR_INVALID_VALUE;
    if (alignment == 0) alignment = DEV_ALIGN;
    if ((alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
    if (alignment < DEV_ALIGN) alignment = DEV_ALIGN;
    if ((uint64_t)size > MAX_ALLOC) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_lock);
    uint64_t base = va_take(size, alignment);
    if (rec_add(base, size, size, REC_VA) != 0) {
        va_give_back(base, size);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&g_lock);
    if (rc == CUDA_SUCCESS) *ptr = base;
    return rc;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    REQUIRE_INIT();
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct rec *r = rec_find(ptr, REC_VA);
    if (r && r->size == size) {
        uint64_t base = r->base, span = r->span;
        rec_remove(r);
        va_give_back(base, span);
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    REQUIRE_INIT();
    if (size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g_lock);
    struct rec *va = rec_find_containing(ptr, size, REC_VA);
    struct rec *ph = rec_find(handle, REC_PHYS);
    if (va == NULL || ph == NULL) rc = CUDA_ERROR_INVALID_VALUE;
    else if (offset > ph->size || size > ph->size - offset) rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    REQUIRE_INIT();
    if (size == 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    struct rec *va = rec_find_containing(ptr, size, REC_VA);
    pthread_mutex_unlock(&g_lock);
    return va ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------ */
/* Copies and memsets: never touch device memory                       */
/* ------------------------------------------------------------------ */

static inline CUresult copy_impl(CUstream hStream)
{
    REQUIRE_INIT();
    if (UNLIKELY(!stream_ok(hStream))) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

static inline CUresult copy_host_impl(const void *host, size_t n, CUstream hStream)
{
    REQUIRE_INIT();
    if (UNLIKELY(host == NULL && n != 0)) return CUDA_ERROR_INVALID_VALUE;
    if (UNLIKELY(!stream_ok(hStream))) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

static inline CUresult copy_peer_impl(CUcontext dst, CUcontext src, CUstream hStream)
{
    REQUIRE_INIT();
    if (UNLIKELY(!ctx_ok(dst) || !ctx_ok(src))) return CUDA_ERROR_INVALID_CONTEXT;
    if (UNLIKELY(!stream_ok(hStream))) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

#define UNUSED3(a, b, c) do { UNUSED(a); UNUSED(b); UNUSED(c); } while (0)

/* Memory types: HOST/DEVICE where the API says so, inferred (sim_memory_type)
 * for the unified cuMemcpyAsync. */
#define MT_INFER ((CUmemorytype)0)

/*
 * An asynchronous copy: on a stream under capture it becomes a memcpy node
 * (CUDA_MEMCPY3D, 1-D) instead of being done.
 */
static CUresult copy_async_impl(CUmemorytype dt, uint64_t dst, CUmemorytype st, uint64_t src, size_t n,
                                CUstream s)
{
    REQUIRE_INIT();
    if (UNLIKELY(!stream_ok(s))) return CUDA_ERROR_INVALID_HANDLE;
    if (LIKELY(!stream_capturing(s))) return CUDA_SUCCESS;
    CUDA_MEMCPY3D p;
    memset(&p, 0, sizeof(p));
    p.dstMemoryType = dt == MT_INFER ? sim_memory_type(dst) : dt;
    p.srcMemoryType = st == MT_INFER ? sim_memory_type(src) : st;
    if (p.dstMemoryType == CU_MEMORYTYPE_HOST) p.dstHost = (void *)(uintptr_t)dst;
    else p.dstDevice = dst;
    if (p.srcMemoryType == CU_MEMORYTYPE_HOST) p.srcHost = (const void *)(uintptr_t)src;
    else p.srcDevice = src;
    p.WidthInBytes = n;
    p.Height = 1;
    p.Depth = 1;
    return sim_capture_memcpy(s, &p);
}

static CUresult memset_async_impl(CUdeviceptr dst, unsigned int value, unsigned int elem, size_t n, CUstream s)
{
    REQUIRE_INIT();
    if (UNLIKELY(!stream_ok(s))) return CUDA_ERROR_INVALID_HANDLE;
    if (LIKELY(!stream_capturing(s))) return CUDA_SUCCESS;
    return sim_capture_memset(s, dst, value, elem, n);
}

static CUresult htod_async_impl(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
{
    if (UNLIKELY(srcHost == NULL && ByteCount != 0)) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return copy_async_impl(CU_MEMORYTYPE_DEVICE, dstDevice, CU_MEMORYTYPE_HOST, (uintptr_t)srcHost, ByteCount, hStream);
}

static CUresult dtoh_async_impl(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    if (UNLIKELY(dstHost == NULL && ByteCount != 0)) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return copy_async_impl(CU_MEMORYTYPE_HOST, (uintptr_t)dstHost, CU_MEMORYTYPE_DEVICE, srcDevice, ByteCount, hStream);
}

static CUresult peer_async_impl(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
                                size_t ByteCount, CUstream hStream)
{
    CUresult rc = copy_peer_impl(dstContext, srcContext, hStream);
    if (rc != CUDA_SUCCESS) return rc;
    return copy_async_impl(CU_MEMORYTYPE_DEVICE, dstDevice, CU_MEMORYTYPE_DEVICE, srcDevice, ByteCount, hStream);
}

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpy, NULL, NULL,
                 copy_impl(NULL),
                 sim_obs_copy(o_, &c_, 0, dst, 0, src, ByteCount, NULL, 0));
}
CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpy_ptds, NULL, CU_STREAM_PER_THREAD,
                 copy_impl(NULL),
                 sim_obs_copy(o_, &c_, 0, dst, 0, src, ByteCount, CU_STREAM_PER_THREAD, 0));
}
CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpyAsync, NULL, hStream,
                 copy_async_impl(MT_INFER, dst, MT_INFER, src, ByteCount, hStream),
                 sim_obs_copy(o_, &c_, 0, dst, 0, src, ByteCount, hStream, 0));
}
CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpyAsync_ptsz, NULL, hStream,
                 copy_async_impl(MT_INFER, dst, MT_INFER, src, ByteCount, hStream),
                 sim_obs_copy(o_, &c_, 0, dst, 0, src, ByteCount, hStream, 0));
}

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpyHtoD_v2, NULL, NULL,
                 copy_host_impl(srcHost, ByteCount, NULL),
                 sim_obs_copy(o_, &c_, CU_MEMORYTYPE_DEVICE, dstDevice, CU_MEMORYTYPE_HOST, (uintptr_t)srcHost, ByteCount, NULL, 0));
}
CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpyHtoD_v2_ptds, NULL, CU_STREAM_PER_THREAD,
                 copy_host_impl(srcHost, ByteCount, NULL),
                 sim_obs_copy(o_, &c_, CU_MEMORYTYPE_DEVICE, dstDevice, CU_MEMORYTYPE_HOST, (uintptr_t)srcHost, ByteCount, CU_STREAM_PER_THREAD, 0));
}
CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpyDtoH_v2, NULL, NULL,
                 copy_host_impl(dstHost, ByteCount, NULL),
                 sim_obs_copy(o_, &c_, CU_MEMORYTYPE_HOST, (uintptr_t)dstHost, CU_MEMORYTYPE_DEVICE, srcDevice, ByteCount, NULL, 0));
}
CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpyDtoH_v2_ptds, NULL, CU_STREAM_PER_THREAD,
                 copy_host_impl(dstHost, ByteCount, NULL),
                 sim_obs_copy(o_, &c_, CU_MEMORYTYPE_HOST, (uintptr_t)dstHost, CU_MEMORYTYPE_DEVICE, srcDevice, ByteCount, CU_STREAM_PER_THREAD, 0));
}
CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpyDtoD_v2, NULL, NULL,
                 copy_impl(NULL),
                 sim_obs_copy(o_, &c_, CU_MEMORYTYPE_DEVICE, dstDevice, CU_MEMORYTYPE_DEVICE, srcDevice, ByteCount, NULL, 0));
}
CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpyDtoD_v2_ptds, NULL, CU_STREAM_PER_THREAD,
                 copy_impl(NULL),
                 sim_obs_copy(o_, &c_, CU_MEMORYTYPE_DEVICE, dstDevice, CU_MEMORYTYPE_DEVICE, srcDevice, ByteCount, CU_STREAM_PER_THREAD, 0));
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpyHtoDAsync_v2, NULL, hStream,
                 htod_async_impl(dstDevice, srcHost, ByteCount, hStream),
                 sim_obs_copy(o_, &c_, CU_MEMORYTYPE_DEVICE, dstDevice, CU_MEMORYTYPE_HOST, (uintptr_t)srcHost, ByteCount, hStream, 0));
}
CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpyHtoDAsync_v2_ptsz, NULL, hStream,
                 htod_async_impl(dstDevice, srcHost, ByteCount, hStream),
                 sim_obs_copy(o_, &c_, CU_MEMORYTYPE_DEVICE, dstDevice, CU_MEMORYTYPE_HOST, (uintptr_t)srcHost, ByteCount, hStream, 0));
}
CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpyDtoHAsync_v2, NULL, hStream,
                 dtoh_async_impl(dstHost, srcDevice, ByteCount, hStream),
                 sim_obs_copy(o_, &c_, CU_MEMORYTYPE_HOST, (uintptr_t)dstHost, CU_MEMORYTYPE_DEVICE, srcDevice, ByteCount, hStream, 0));
}
CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpyDtoHAsync_v2_ptsz, NULL, hStream,
                 dtoh_async_impl(dstHost, srcDevice, ByteCount, hStream),
                 sim_obs_copy(o_, &c_, CU_MEMORYTYPE_HOST, (uintptr_t)dstHost, CU_MEMORYTYPE_DEVICE, srcDevice, ByteCount, hStream, 0));
}
CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpyDtoDAsync_v2, NULL, hStream,
                 copy_async_impl(CU_MEMORYTYPE_DEVICE, dstDevice, CU_MEMORYTYPE_DEVICE, srcDevice, ByteCount, hStream),
                 sim_obs_copy(o_, &c_, CU_MEMORYTYPE_DEVICE, dstDevice, CU_MEMORYTYPE_DEVICE, srcDevice, ByteCount, hStream, 0));
}
CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpyDtoDAsync_v2_ptsz, NULL, hStream,
                 copy_async_impl(CU_MEMORYTYPE_DEVICE, dstDevice, CU_MEMORYTYPE_DEVICE, srcDevice, ByteCount, hStream),
                 sim_obs_copy(o_, &c_, CU_MEMORYTYPE_DEVICE, dstDevice, CU_MEMORYTYPE_DEVICE, srcDevice, ByteCount, hStream, 0));
}

CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpyPeer, NULL, NULL,
                 copy_peer_impl(dstContext, srcContext, NULL),
                 sim_obs_copy(o_, &c_, CU_MEMORYTYPE_DEVICE, dstDevice, CU_MEMORYTYPE_DEVICE, srcDevice, ByteCount, NULL, dstContext != srcContext));
}
CUresult CUDAAPI cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpyPeer_ptds, NULL, CU_STREAM_PER_THREAD,
                 copy_peer_impl(dstContext, srcContext, NULL),
                 sim_obs_copy(o_, &c_, CU_MEMORYTYPE_DEVICE, dstDevice, CU_MEMORYTYPE_DEVICE, srcDevice, ByteCount, CU_STREAM_PER_THREAD, dstContext != srcContext));
}
CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount, CUstream hStream)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpyPeerAsync, NULL, hStream,
                 peer_async_impl(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream),
                 sim_obs_copy(o_, &c_, CU_MEMORYTYPE_DEVICE, dstDevice, CU_MEMORYTYPE_DEVICE, srcDevice, ByteCount, hStream, dstContext != srcContext));
}
CUresult CUDAAPI cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount, CUstream hStream)
{
    SIM_OBSERVED(SIM_CBID_cuMemcpyPeerAsync_ptsz, NULL, hStream,
                 peer_async_impl(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream),
                 sim_obs_copy(o_, &c_, CU_MEMORYTYPE_DEVICE, dstDevice, CU_MEMORYTYPE_DEVICE, srcDevice, ByteCount, hStream, dstContext != srcContext));
}

CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    UNUSED(dstDevice);
    SIM_OBSERVED(SIM_CBID_cuMemsetD8_v2, NULL, NULL, copy_impl(NULL),
                 sim_obs_memset(o_, &c_, uc, 1, N, NULL));
}
CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    UNUSED(dstDevice);
    SIM_OBSERVED(SIM_CBID_cuMemsetD8_v2_ptds, NULL, CU_STREAM_PER_THREAD, copy_impl(NULL),
                 sim_obs_memset(o_, &c_, uc, 1, N, CU_STREAM_PER_THREAD));
}
CUresult CUDAAPI cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    UNUSED(dstDevice);
    SIM_OBSERVED(SIM_CBID_cuMemsetD16_v2, NULL, NULL, copy_impl(NULL),
                 sim_obs_memset(o_, &c_, us, 2, N, NULL));
}
CUresult CUDAAPI cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    UNUSED(dstDevice);
    SIM_OBSERVED(SIM_CBID_cuMemsetD16_v2_ptds, NULL, CU_STREAM_PER_THREAD, copy_impl(NULL),
                 sim_obs_memset(o_, &c_, us, 2, N, CU_STREAM_PER_THREAD));
}
CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    UNUSED(dstDevice);
    SIM_OBSERVED(SIM_CBID_cuMemsetD32_v2, NULL, NULL, copy_impl(NULL),
                 sim_obs_memset(o_, &c_, ui, 4, N, NULL));
}
CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    UNUSED(dstDevice);
    SIM_OBSERVED(SIM_CBID_cuMemsetD32_v2_ptds, NULL, CU_STREAM_PER_THREAD, copy_impl(NULL),
                 sim_obs_memset(o_, &c_, ui, 4, N, CU_STREAM_PER_THREAD));
}
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    SIM_OBSERVED(SIM_CBID_cuMemsetD8Async, NULL, hStream, memset_async_impl(dstDevice, uc, 1, N, hStream),
                 sim_obs_memset(o_, &c_, uc, 1, N, hStream));
}
CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    SIM_OBSERVED(SIM_CBID_cuMemsetD8Async_ptsz, NULL, hStream, memset_async_impl(dstDevice, uc, 1, N, hStream),
                 sim_obs_memset(o_, &c_, uc, 1, N, hStream));
}
CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
    SIM_OBSERVED(SIM_CBID_cuMemsetD16Async, NULL, hStream, memset_async_impl(dstDevice, us, 2, N, hStream),
                 sim_obs_memset(o_, &c_, us, 2, N, hStream));
}
CUresult CUDAAPI cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
    SIM_OBSERVED(SIM_CBID_cuMemsetD16Async_ptsz, NULL, hStream, memset_async_impl(dstDevice, us, 2, N, hStream),
                 sim_obs_memset(o_, &c_, us, 2, N, hStream));
}
CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    SIM_OBSERVED(SIM_CBID_cuMemsetD32Async, NULL, hStream, memset_async_impl(dstDevice, ui, 4, N, hStream),
                 sim_obs_memset(o_, &c_, ui, 4, N, hStream));
}
CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    SIM_OBSERVED(SIM_CBID_cuMemsetD32Async_ptsz, NULL, hStream, memset_async_impl(dstDevice, ui, 4, N, hStream),
                 sim_obs_memset(o_, &c_, ui, 4, N, hStream));
}

/* ------------------------------------------------------------------ */
/* Streams and events                                                  */
/* ------------------------------------------------------------------ */

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    REQUIRE_INIT();
    if (phStream == NULL || (Flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s = calloc(1, sizeof(*s));
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    s->magic = MAGIC_STREAM;
    s->flags = Flags;
    pthread_mutex_lock(&g_lock);
    s->id = g_next_id++;
    pthread_mutex_unlock(&g_lock);
    *phStream = s;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
    REQUIRE_INIT();
    if (hStream == NULL || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD ||
        hStream->magic != MAGIC_STREAM)
        return CUDA_ERROR_INVALID_HANDLE;
    /* The simulator refuses to destroy a stream in the middle of a capture. */
    if (stream_capturing(hStream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    hStream->magic = MAGIC_DEAD;
    free(hStream->deps.nodes);
    free(hStream->edge_data);
    free(hStream);
    return CUDA_SUCCESS;
}

static inline CUresult stream_sync_impl(CUstream hStream)
{
    REQUIRE_INIT();
    if (!stream_ok(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    if (UNLIKELY(stream_capturing(hStream))) return sim_capture_sync_stream(hStream);
    sim_sync_sleep();
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    return stream_sync_impl(hStream);
}

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
    return stream_sync_impl(hStream);
}

static inline CUresult stream_wait_event_impl(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    REQUIRE_INIT();
    if (!stream_ok(hStream) || !event_ok(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
    if (Flags & ~1u) return CUDA_ERROR_INVALID_VALUE; /* CU_EVENT_WAIT_DEFAULT / CU_EVENT_WAIT_EXTERNAL */
    /* Joining a capture (waiting on an event recorded in one) or waiting
     * inside one is capture bookkeeping; an ordinary wait does nothing. */
    if (UNLIKELY(hEvent->cap_id != 0 || stream_capturing(hStream)))
        return sim_capture_stream_wait(hStream, hEvent, Flags);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    return stream_wait_event_impl(hStream, hEvent, Flags);
}

CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    return stream_wait_event_impl(hStream, hEvent, Flags);
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    REQUIRE_INIT();
    if (phEvent == NULL || (Flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUevent_st *e = calloc(1, sizeof(*e));
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = MAGIC_EVENT;
    e->flags = Flags;
    pthread_mutex_lock(&g_lock);
    e->id = g_next_id++;
    pthread_mutex_unlock(&g_lock);
    *phEvent = e;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent)
{
    REQUIRE_INIT();
    if (!event_ok(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
    sim_capture_event_destroy(hEvent);
    hEvent->magic = MAGIC_DEAD;
    free(hEvent);
    return CUDA_SUCCESS;
}

static inline CUresult event_record_impl(CUevent hEvent, CUstream hStream)
{
    REQUIRE_INIT();
    if (!event_ok(hEvent) || !stream_ok(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    /* Recording in a capturing stream (or re-recording an event that was
     * recorded in a capture) goes through the capture bookkeeping. */
    if (UNLIKELY(stream_capturing(hStream) || hEvent->cap_id != 0)) return sim_capture_event_record(hEvent, hStream);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
    return event_record_impl(hEvent, hStream);
}

CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    return event_record_impl(hEvent, hStream);
}

/* CU_EVENT_RECORD_DEFAULT 0 or CU_EVENT_RECORD_EXTERNAL 1 (PyTorch records
 * its events with this entry point). */
CUresult CUDAAPI cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    if (flags > 1) return CUDA_ERROR_INVALID_VALUE;
    return event_record_impl(hEvent, hStream);
}

CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    if (flags > 1) return CUDA_ERROR_INVALID_VALUE;
    return event_record_impl(hEvent, hStream);
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
    REQUIRE_INIT();
    if (!event_ok(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
    if (UNLIKELY(hEvent->cap_id != 0 && sim_capture_event_live(hEvent))) return CUDA_ERROR_CAPTURED_EVENT;
    sim_sync_sleep();
    return CUDA_SUCCESS;
}
