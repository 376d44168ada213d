# GEMMs of known shapes for "GEMMs by shape": every op of a phase timed
# with CUDA events, counted exactly, run only after DIR/go exists (so a
# tracer attached before that sees every one of them).
#
#   job.py DIR   (writes DIR/job.pid, DIR/phases.json, DIR/done; runs until DIR/stop)
#
# Each shape runs 3 times before DIR/go (cuBLAS picks its kernels then);
# while waiting it runs other shapes, which the phases' rows must not count.
import json, os, sys, time
import torch

d = sys.argv[1]
with open(os.path.join(d, "job.pid"), "w") as f:
    f.write(str(os.getpid()))
dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = False
bf = torch.bfloat16

a32, b32 = torch.randn(2048, 1024, device=dev), torch.randn(1024, 4096, device=dev)
a16, b16 = torch.randn(4096, 4096, device=dev, dtype=bf), torch.randn(4096, 4096, device=dev, dtype=bf)
ba, bb = torch.randn(16, 512, 1024, device=dev, dtype=bf), torch.randn(16, 1024, 256, device=dev, dtype=bf)
lin = torch.nn.Linear(1024, 4096, bias=True, device=dev, dtype=bf)
x = torch.randn(2048, 1024, device=dev, dtype=bf)
# (name, op, count, cuBLAS's (b, m, n, k): column-major, so (M×K)@(K×N) is
# m=N, n=M; A's type)
phases = [
    ("mm_fp32", lambda: torch.mm(a32, b32), 300, (1, 4096, 2048, 1024), "fp32"),
    ("mm_bf16", lambda: torch.mm(a16, b16), 300, (1, 4096, 4096, 4096), "bf16"),
    ("bmm_bf16", lambda: torch.bmm(ba, bb), 300, (16, 256, 512, 1024), "bf16"),
    ("linear_bf16", lambda: lin(x), 300, (1, 4096, 2048, 1024), "bf16"),
    # What the events add around any kernel: a kernel that does nothing
    # (compare.py subtracts its events' median minus its GPU time).
    ("empty_kernel", lambda: torch.cuda._sleep(1), 300, None, None),
]
for _, op, _, _, _ in phases:
    for _ in range(3):
        op()
torch.cuda.synchronize()
wa, wb = torch.randn(640, 384, device=dev, dtype=bf), torch.randn(384, 896, device=dev, dtype=bf)
go = os.path.join(d, "go")
while not os.path.exists(go):
    torch.mm(wa, wb)
    torch.cuda.synchronize()
    time.sleep(0.01)
time.sleep(0.5)
out = {}
for name, op, n, shape, dtype in phases:
    torch.cuda.synchronize()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    start = time.time_ns()
    # The GPU held back while the ops are queued: the events then bracket
    # each op's time on the GPU, not the host's time to launch it (small
    # ops launch slower than they run).
    torch.cuda._sleep(int(n * 400_000))
    for e0, e1 in evs:
        e0.record()
        op()
        e1.record()
    torch.cuda.synchronize()
    out[name] = {"n": n, "shape": shape, "dtype": dtype, "start_ns": start, "end_ns": time.time_ns(),
                 "ms": [e0.elapsed_time(e1) for e0, e1 in evs]}
with open(os.path.join(d, "phases.json"), "w") as f:
    json.dump(out, f)
open(os.path.join(d, "done"), "w").close()
while not os.path.exists(os.path.join(d, "stop")):
    torch.mm(wa, wb)
    torch.cuda.synchronize()
    time.sleep(0.05)
