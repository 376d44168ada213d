# One rank of a 2-rank all-reduce sweep (under torchrun) for "Collectives
# by size": after DIR/go exists, N all_reduce of each size (fp32, powers of
# two, so each size is one of gputrace's size buckets), timed in the
# program two ways:
#  - per op: a CUDA event pair on the current stream around each call, the
#    GPU held back while they are queued (so the events time the GPU);
#  - nccl-tests' way: one event pair around the N calls, time / N.
# Bus bandwidth as nccl-tests defines it: size / time × 2(n-1)/n.
#
#   torchrun --nproc_per_node 2 sweep.py DIR
#   (writes DIR/rank{R}.pid, DIR/rank{R}.ready, DIR/rank{R}.json; runs until DIR/stop)
import json, os, statistics, sys, time
import torch
import torch.distributed as dist

d = sys.argv[1]
N = int(os.environ.get("SWEEP_N", "50"))
SIZES = [1 << k for k in range(13, 29, 2)] + [1 << 28]  # 8 KiB .. 256 MiB
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
dev = torch.device("cuda")
bufs = {s: torch.ones(s // 4, device=dev, dtype=torch.float32) for s in SIZES}
for s in SIZES:  # warm-up: NCCL's connections and buffers for every size
    for _ in range(3):
        dist.all_reduce(bufs[s])
torch.cuda.synchronize()
with open(f"{d}/rank{rank}.pid", "w") as f:
    f.write(str(os.getpid()))
open(f"{d}/rank{rank}.ready", "w").close()
small = torch.ones(1024, device=dev)
while not os.path.exists(f"{d}/go"):
    dist.all_reduce(small)  # 4 KiB: not one of the sweep's sizes
    torch.cuda.synchronize()
    time.sleep(0.05)
# Both ranks see go within the wait above: agree on it, then sweep.
dist.barrier()
torch.cuda.synchronize()
out = {"rank": rank, "pid": os.getpid(), "world": world, "n": N, "sizes": {}}
factor = 2 * (world - 1) / world
for s in SIZES:
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(N)]
    dist.all_reduce(small)
    torch.cuda.synchronize()
    torch.cuda._sleep(int(N * 200_000))
    for e0, e1 in evs:
        e0.record()
        dist.all_reduce(bufs[s])
        e1.record()
    torch.cuda.synchronize()
    per = [e0.elapsed_time(e1) * 1e3 for e0, e1 in evs]  # µs
    whole = evs[0][0].elapsed_time(evs[-1][1]) * 1e3 / N
    med = statistics.median(per)
    out["sizes"][s] = {
        "per_op_median_us": med, "per_op_mean_us": statistics.mean(per), "batch_avg_us": whole,
        "busbw_per_op_gbps": s / (med * 1e3) * factor, "busbw_batch_gbps": s / (whole * 1e3) * factor,
    }
# What the per-op events add around a collective: the same pattern
# (current stream -> another stream -> back) around a kernel that does
# nothing but fill 4 bytes; compare.py takes off its events' median less
# that kernel's GPU time (gputrace's FillFunctor<float> row).
s2 = torch.cuda.Stream()
one = torch.empty(1, device=dev)
evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(N)]
torch.cuda.synchronize()
cur = torch.cuda.current_stream()
torch.cuda._sleep(int(N * 200_000))
for e0, e1 in evs:
    e0.record()
    s2.wait_stream(cur)
    with torch.cuda.stream(s2):
        one.fill_(1.0)
    cur.wait_stream(s2)
    e1.record()
torch.cuda.synchronize()
out["events_cross_stream_median_us"] = statistics.median(e0.elapsed_time(e1) * 1e3 for e0, e1 in evs)
out["fill_kernels"] = N
with open(f"{d}/rank{rank}.json", "w") as f:
    json.dump(out, f)
open(f"{d}/rank{rank}.done", "w").close()
while not os.path.exists(f"{d}/stop"):
    time.sleep(0.2)
dist.destroy_process_group()
