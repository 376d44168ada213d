/*
 * workload_graphs.c - the graph section of gputrace-workload
 * (--graph-replays R, --graph-update, --graphs-before-wait).
 *
 * Each worker builds three executable graphs, one by stream capture (as
 * PyTorch's CUDAGraph does), one node by node with a child graph (as XLA's
 * command buffers do), and one from a clone of the second; replays each R
 * times; with --graph-update changes them (per-node setters on the
 * executable graph, a child-graph swap, a whole-graph update from a second
 * capture) and replays them R times more.  Every worker also keeps what the
 * simulator should have run and captured; at the end the workload prints the
 * simulator's own counts and exits 1 if they differ from that.  README.md
 * lists every call and every value.
 */
#define _GNU_SOURCE
#include "workload.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_gk_names[GK_COUNT] = {
    "_Z10vector_addPKfS0_Pfi",
    "_ZN3sim6detail13reduce_kernelILi256EEEvPKfPfi",
    "_Z4reluPfi",
    "_ZN6cublas4gemmIfEEvPKT_S3_PS1_iii",
};

/* The three executable graphs' contents, in kernel runs per launch. */
static const uint64_t k_captured_runs[GK_COUNT] = { 1, 1, 1, 1 };
static const uint64_t k_nodes_runs[GK_COUNT] = { 1, 1, 2, 1 };
static const uint64_t k_nodes_updated_runs[GK_COUNT] = { 0, 1, 3, 1 };

#define CAPTURED_COPY_BYTES 4096ULL
#define CAPTURED_MEMSET_BYTES 1024ULL /* 256 x 4 bytes */
#define NODES_COPY_BYTES 8192ULL
#define NODES_MEMSET_BYTES 4096ULL    /* 4096 x 1 byte */
#define NODES_UPDATED_MEMSET_BYTES 8192ULL /* 2048 x 4 bytes */

/* A graph-section call: counted in `done calls=` unless made before the wait. */
#define GC(call)                                                        \
    do {                                                                \
        CUresult r_ = (call);                                           \
        if (counted) w->calls++;                                        \
        if (UNLIKELY(r_ != CUDA_SUCCESS)) die_cu((int)w->idx, #call, r_); \
    } while (0)

static CUDA_KERNEL_NODE_PARAMS_v2 kparams(CUfunction f, CUkernel k, unsigned gx, unsigned gy, unsigned gz,
                                          unsigned bx, unsigned by, unsigned bz, unsigned shmem, void **params)
{
    CUDA_KERNEL_NODE_PARAMS_v2 p;
    memset(&p, 0, sizeof(p));
    p.func = f;
    p.kern = k;
    p.gridDimX = gx;
    p.gridDimY = gy;
    p.gridDimZ = gz;
    p.blockDimX = bx;
    p.blockDimY = by;
    p.blockDimZ = bz;
    p.sharedMemBytes = shmem;
    p.kernelParams = params;
    return p;
}

/*
 * The captured graph: a fork to stream2 and a join back.  4 launches, one
 * memset and one copy are recorded, none is run.  Returns the graph.
 * first_grid_x is vector_add's grid x (64, or 128 for the update).
 */
static CUgraph capture(struct worker *w, int counted, unsigned first_grid_x)
{
    struct graph_state *gs = &w->gs;
    const int pt = opt.per_thread, lpt = opt.ptsz || opt.per_thread;
    CUstream s = w->stream, s2 = gs->stream2;
    void **params = w->params;
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.gridDimX = 32;
    cfg.gridDimY = 4;
    cfg.gridDimZ = 2;
    cfg.blockDimX = 128;
    cfg.blockDimY = 2;
    cfg.blockDimZ = 1;
    cfg.sharedMemBytes = 8192;
    cfg.hStream = s2;
    CUgraph g = NULL;

    if (pt) GC(cuStreamBeginCapture_v2_ptsz(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    else GC(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    if (lpt) GC(cuLaunchKernel_ptsz(g_funcs[0], first_grid_x, 2, 1, 256, 1, 1, 4096, s, params, NULL));
    else GC(cuLaunchKernel(g_funcs[0], first_grid_x, 2, 1, 256, 1, 1, 4096, s, params, NULL));
    if (opt.capture_sleep_ms) sleep_ms(opt.capture_sleep_ms);
    if (pt) {
        GC(cuEventRecord_ptsz(gs->ev_fork, s));
        GC(cuStreamWaitEvent_ptsz(s2, gs->ev_fork, 0));
        GC(cuLaunchKernelEx_ptsz(&cfg, g_gemm_func, params, NULL));
        GC(cuMemsetD32Async_ptsz(gs->dev, 0, 256, s2));
    } else {
        GC(cuEventRecord(gs->ev_fork, s));
        GC(cuStreamWaitEvent(s2, gs->ev_fork, 0));
        GC(cuLaunchKernelEx(&cfg, g_gemm_func, params, NULL));
        GC(cuMemsetD32Async(gs->dev, 0, 256, s2));
    }
    if (lpt) GC(cuLaunchKernel_ptsz(g_funcs[1], 16, 1, 1, 512, 1, 1, 0, s, params, NULL));
    else GC(cuLaunchKernel(g_funcs[1], 16, 1, 1, 512, 1, 1, 0, s, params, NULL));
    if (pt) {
        GC(cuMemcpyHtoDAsync_v2_ptsz(gs->dev, gs->pinned, 4096, s));
        GC(cuEventRecordWithFlags_ptsz(gs->ev_join, s2, 0));
        GC(cuStreamWaitEvent_ptsz(s, gs->ev_join, 0));
    } else {
        GC(cuMemcpyHtoDAsync_v2(gs->dev, gs->pinned, 4096, s));
        GC(cuEventRecordWithFlags(gs->ev_join, s2, 0));
        GC(cuStreamWaitEvent(s, gs->ev_join, 0));
    }
    if (lpt) GC(cuLaunchKernel_ptsz(g_funcs[2], 8, 1, 1, 128, 1, 1, 0, s, params, NULL));
    else GC(cuLaunchKernel(g_funcs[2], 8, 1, 1, 128, 1, 1, 0, s, params, NULL));
    if (pt) GC(cuStreamEndCapture_ptsz(s, &g));
    else GC(cuStreamEndCapture(s, &g));

    for (int k = 0; k < GK_COUNT; k++) gs->exp.captured[k]++;
    gs->exp.captured_copies++;
    gs->exp.captured_memsets++;
    return g;
}

/* A child graph of two relu nodes. */
static CUgraph child_graph(struct worker *w, int counted, unsigned gx0, unsigned gx1, unsigned gy1)
{
    CUgraph c = NULL;
    CUgraphNode c0 = NULL, c1 = NULL;
    CUDA_KERNEL_NODE_PARAMS_v2 p0 = kparams(g_funcs[2], NULL, gx0, 1, 1, 64, 1, 1, 0, w->params);
    CUDA_KERNEL_NODE_PARAMS_v2 p1 = kparams(g_funcs[2], NULL, gx1, gy1, 1, 32, 4, 1, 256, w->params);
    GC(cuGraphCreate(&c, 0));
    GC(cuGraphAddKernelNode_v2(&c0, c, NULL, 0, &p0));
    GC(cuGraphAddKernelNode_v2(&c1, c, &c0, 1, &p1));
    return c;
}

static void build(struct worker *w, int counted)
{
    struct graph_state *gs = &w->gs;
    void **params = w->params;
    size_t n = 0;

    /* 1. By capture, instantiated as PyTorch does; the graph is dropped at once. */
    CUgraph ga = capture(w, counted, 64);
    GC(cuGraphGetNodes(ga, NULL, &n));
    if (n != 6) die_msg((int)w->idx, "the captured graph does not have 6 nodes");
    GC(cuGraphInstantiateWithFlags(&gs->captured, ga, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
    GC(cuGraphDestroy(ga));

    /* 2. Node by node, with a child graph, a CUkernel node and cuGraphAddNode. */
    CUgraph gc = child_graph(w, counted, 4, 2, 2);
    CUgraph gb = NULL;
    CUgraphNode b1 = NULL, b3 = NULL, b5 = NULL, b6 = NULL;
    CUDA_KERNEL_NODE_PARAMS_v2 p0 = kparams(g_funcs[0], NULL, 10, 1, 1, 64, 1, 1, 0, params);
    CUDA_KERNEL_NODE_PARAMS_v2 p1 = kparams(NULL, g_gemm_kernel, 32, 4, 2, 128, 2, 1, 8192, params);
    CUDA_MEMSET_NODE_PARAMS ms = { gs->dev, 0, 7, 1, 4096, 1 };
    CUDA_MEMCPY3D cp;
    memset(&cp, 0, sizeof(cp));
    cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.srcDevice = gs->dev;
    cp.dstMemoryType = CU_MEMORYTYPE_HOST;
    cp.dstHost = gs->pinned;
    cp.WidthInBytes = 8192;
    cp.Height = 1;
    cp.Depth = 1;
    CUgraphNodeParams np;
    memset(&np, 0, sizeof(np));
    np.type = CU_GRAPH_NODE_TYPE_KERNEL;
    np.kernel = kparams(g_funcs[1], NULL, 6, 1, 1, 256, 1, 1, 1024, params);
    CUDA_KERNEL_NODE_PARAMS_v2 p0b = kparams(g_funcs[0], NULL, 12, 1, 1, 64, 1, 1, 0, params);
    GC(cuGraphCreate(&gb, 0));
    GC(cuGraphAddKernelNode_v2(&gs->b0, gb, NULL, 0, &p0));
    GC(cuGraphAddKernelNode_v2(&b1, gb, &gs->b0, 1, &p1));
    GC(cuGraphAddMemsetNode(&gs->b2, gb, &b1, 1, &ms, g_ctx));
    GC(cuGraphAddMemcpyNode(&b3, gb, &gs->b2, 1, &cp, g_ctx));
    GC(cuGraphAddChildGraphNode(&gs->b4, gb, &b3, 1, gc));
    GC(cuGraphAddEmptyNode(&b5, gb, &gs->b4, 1));
    GC(cuGraphAddNode_v2(&b6, gb, &b5, NULL, 1, &np));
    GC(cuGraphKernelNodeSetParams_v2(gs->b0, &p0b));
    GC(cuGraphDestroy(gc));
    CUDA_GRAPH_INSTANTIATE_PARAMS ip;
    memset(&ip, 0, sizeof(ip));
    ip.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
    ip.hUploadStream = w->stream;
    if (opt.per_thread) GC(cuGraphInstantiateWithParams_ptsz(&gs->nodes, gb, &ip));
    else GC(cuGraphInstantiateWithParams(&gs->nodes, gb, &ip));
    if (ip.result_out != CUDA_GRAPH_INSTANTIATE_SUCCESS) die_msg((int)w->idx, "cuGraphInstantiateWithParams: result_out is not success");
    gs->nodes_graph = gb;

    /* 3. A clone of graph 2 without its empty node. */
    CUgraph gd = NULL;
    CUgraphNode dn[7];
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_KERNEL;
    GC(cuGraphClone(&gd, gb));
    GC(cuGraphGetNodes(gd, NULL, &n));
    if (n != 7) die_msg((int)w->idx, "the cloned graph does not have 7 nodes");
    GC(cuGraphGetNodes(gd, dn, &n));
    GC(cuGraphNodeGetType(dn[5], &type));
    if (type != CU_GRAPH_NODE_TYPE_EMPTY) die_msg((int)w->idx, "node 5 of the cloned graph is not the empty node");
    GC(cuGraphDestroyNode(dn[5]));
    GC(cuGraphInstantiateWithFlags(&gs->clone, gd, 0));
    GC(cuGraphDestroy(gd));

    gs->built = 1;
    gs->nodes_updated = 0;
}

static void replay(struct worker *w, CUgraphExec e, const uint64_t runs[GK_COUNT], uint64_t copy_bytes,
                   uint64_t memset_bytes)
{
    const int counted = 1;
    struct graph_expect *x = &w->gs.exp;
    for (uint64_t i = 0; i < opt.graph_replays; i++) {
        if (opt.per_thread) GC(cuGraphLaunch_ptsz(e, w->stream));
        else GC(cuGraphLaunch(e, w->stream));
        x->launches++;
        for (int k = 0; k < GK_COUNT; k++) x->kernels[k] += runs[k];
        x->copies++;
        x->copy_bytes += copy_bytes;
        x->memsets++;
        x->memset_bytes += memset_bytes;
    }
}

static void replay_all(struct worker *w)
{
    struct graph_state *gs = &w->gs;
    replay(w, gs->captured, k_captured_runs, CAPTURED_COPY_BYTES, CAPTURED_MEMSET_BYTES);
    if (gs->nodes_updated) replay(w, gs->nodes, k_nodes_updated_runs, NODES_COPY_BYTES, NODES_UPDATED_MEMSET_BYTES);
    else replay(w, gs->nodes, k_nodes_runs, NODES_COPY_BYTES, NODES_MEMSET_BYTES);
    replay(w, gs->clone, k_nodes_runs, NODES_COPY_BYTES, NODES_MEMSET_BYTES);
}

/* Per-node setters on `nodes`, a child-graph swap, a whole-graph update of `captured`. */
static void update(struct worker *w)
{
    const int counted = 1;
    struct graph_state *gs = &w->gs;
    CUDA_KERNEL_NODE_PARAMS_v2 kp = kparams(g_funcs[2], NULL, 20, 1, 1, 32, 1, 1, 0, w->params);
    CUDA_MEMSET_NODE_PARAMS ms = { gs->dev, 0, 9, 4, 2048, 1 };
    GC(cuGraphExecKernelNodeSetParams_v2(gs->nodes, gs->b0, &kp));
    GC(cuGraphExecMemsetNodeSetParams(gs->nodes, gs->b2, &ms, g_ctx));
    CUgraph gc = child_graph(w, counted, 5, 3, 3);
    GC(cuGraphExecChildGraphNodeSetParams(gs->nodes, gs->b4, gc));
    GC(cuGraphDestroy(gc));
    CUgraph ga = capture(w, counted, 128);
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof(info));
    GC(cuGraphExecUpdate_v2(gs->captured, ga, &info));
    if (info.result != CU_GRAPH_EXEC_UPDATE_SUCCESS) die_msg((int)w->idx, "cuGraphExecUpdate_v2: result is not success");
    GC(cuGraphDestroy(ga));
    gs->nodes_updated = 1;
}

static void destroy(struct worker *w, int counted)
{
    struct graph_state *gs = &w->gs;
    if (!gs->built) return;
    GC(cuGraphExecDestroy(gs->captured));
    GC(cuGraphExecDestroy(gs->nodes));
    GC(cuGraphExecDestroy(gs->clone));
    GC(cuGraphDestroy(gs->nodes_graph));
    gs->built = 0;
}

void graphs_worker_setup(struct worker *w)
{
    build(w, 0);
}

void graphs_pass(struct worker *w)
{
    if (!opt.graphs_before_wait) build(w, 1);
    replay_all(w);
    if (opt.graph_linger_ms) sleep_ms(opt.graph_linger_ms);
    if (opt.graph_update) {
        update(w);
        replay_all(w);
        if (opt.graph_linger_ms) sleep_ms(opt.graph_linger_ms);
    }
    if (!opt.graphs_before_wait) destroy(w, 1);
}

void graphs_worker_teardown(struct worker *w)
{
    destroy(w, 0);
}

void graphs_setup_main(void)
{
    for (unsigned t = 0; t < opt.threads; t++) {
        struct graph_state *gs = &g_workers[t].gs;
        SETUP(cuStreamCreate(&gs->stream2, CU_STREAM_NON_BLOCKING));
        SETUP(cuEventCreate(&gs->ev_fork, CU_EVENT_DISABLE_TIMING));
        SETUP(cuEventCreate(&gs->ev_join, CU_EVENT_DISABLE_TIMING));
        SETUP(cuMemAlloc_v2(&gs->dev, 1 * MiB));
        SETUP(cuMemAllocHost_v2(&gs->pinned, 1 * MiB));
    }
}

void graphs_print_exec_handles(void)
{
    char name[48];
    for (unsigned t = 0; t < opt.threads; t++) {
        struct graph_state *gs = &g_workers[t].gs;
        snprintf(name, sizeof(name), "graph_exec_captured[%u]", t);
        print_handle(name, gs->captured);
        snprintf(name, sizeof(name), "graph_exec_nodes[%u]", t);
        print_handle(name, gs->nodes);
        snprintf(name, sizeof(name), "graph_exec_clone[%u]", t);
        print_handle(name, gs->clone);
    }
    fflush(stdout);
}

void graphs_teardown_main(void)
{
    for (unsigned t = 0; t < opt.threads; t++) {
        struct graph_state *gs = &g_workers[t].gs;
        SETUP(cuEventDestroy_v2(gs->ev_fork));
        SETUP(cuEventDestroy_v2(gs->ev_join));
        SETUP(cuStreamDestroy_v2(gs->stream2));
        SETUP(cuMemFree_v2(gs->dev));
        SETUP(cuMemFreeHost(gs->pinned));
    }
}

static int check(const char *what, unsigned long long got, uint64_t want)
{
    if (got == want) return 0;
    fprintf(stderr, "gputrace-workload: main: simulator counted %s=%llu, the workload expected %" PRIu64 "\n", what,
            got, want);
    return 1;
}

void graphs_report(void)
{
    struct graph_expect x;
    memset(&x, 0, sizeof(x));
    for (unsigned t = 0; t < opt.threads; t++) {
        const struct worker *w = &g_workers[t];
        const struct graph_expect *e = &w->gs.exp;
        /* --graphs N launches the empty setup graph N times per pass. */
        x.launches += e->launches + w->passes * opt.graphs;
        for (int k = 0; k < GK_COUNT; k++) {
            x.kernels[k] += e->kernels[k];
            x.captured[k] += e->captured[k];
        }
        x.copies += e->copies;
        x.copy_bytes += e->copy_bytes;
        x.memsets += e->memsets;
        x.memset_bytes += e->memset_bytes;
        x.captured_copies += e->captured_copies;
        x.captured_memsets += e->captured_memsets;
    }

    simGraphStats st;
    simGetGraphStats(&st);
    int bad = 0;
    const char *name = NULL;
    unsigned long long runs = 0, captured = 0;
    uint64_t want_kernels = 0, want_captured = 0;
    for (unsigned i = 0; simGraphKernelStat(i, &name, &runs, &captured); i++) {
        printf("graph kernel=%s runs=%llu captured=%llu\n", name, runs, captured);
        int k = 0;
        while (k < GK_COUNT && strcmp(name, k_gk_names[k]) != 0) k++;
        char what[160];
        snprintf(what, sizeof(what), "runs of %s", name);
        bad |= check(what, runs, k < GK_COUNT ? x.kernels[k] : 0);
        snprintf(what, sizeof(what), "captured launches of %s", name);
        bad |= check(what, captured, k < GK_COUNT ? x.captured[k] : 0);
    }
    for (int k = 0; k < GK_COUNT; k++) {
        want_kernels += x.kernels[k];
        want_captured += x.captured[k];
    }
    printf("graph launches=%llu kernels=%llu copies=%llu copy_bytes=%llu memsets=%llu memset_bytes=%llu\n",
           st.graph_launches, st.kernels_run, st.copies_run, st.copy_bytes_run, st.memsets_run,
           st.memset_bytes_run);
    printf("captured launches=%llu copies=%llu memsets=%llu\n", st.captured_launches, st.captured_copies,
           st.captured_memsets);
    fflush(stdout);
    bad |= check("graph launches", st.graph_launches, x.launches);
    bad |= check("kernels run", st.kernels_run, want_kernels);
    bad |= check("copies run", st.copies_run, x.copies);
    bad |= check("copy bytes run", st.copy_bytes_run, x.copy_bytes);
    bad |= check("memsets run", st.memsets_run, x.memsets);
    bad |= check("memset bytes run", st.memset_bytes_run, x.memset_bytes);
    bad |= check("captured launches", st.captured_launches, want_captured);
    bad |= check("captured copies", st.captured_copies, x.captured_copies);
    bad |= check("captured memsets", st.captured_memsets, x.captured_memsets);
    if (bad) exit(1);
}
