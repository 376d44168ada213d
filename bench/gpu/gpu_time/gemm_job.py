# The --gpu-time accuracy job: known GEMMs timed with CUDA events, and a
# CUDA graph captured before gputrace attaches, so that the GPU time
# gputrace reads through CUPTI can be compared with the program's own.
#
#   gemm_job.py DIR   (writes DIR/job.pid, DIR/phases.json; runs until DIR/stop)
#
# Timeline (seconds from start): warm-up until 8 (gputrace attaches at ~3),
# then phase "bf16_4096": 200 x torch.mm of bf16 4096x4096 @ 4096x4096;
# phase "fp32_2048x1024x8192": 200 x fp32 (2048x1024) @ (1024x8192);
# phase "graph_gemm": 100 replays of a graph of one bf16 2048x4096x4096
# GEMM; phase "graph": 50 replays of a 10-kernel graph. Both graphs are
# captured at start, before gputrace attaches. Each
# op is bracketed by CUDA events (no synchronisation in between); the
# Unix-ns window of each phase and every event time go to phases.json.
# Afterwards it keeps making small CUDA calls (so an agent that is told to
# detach finds an API call to finalize at) until DIR/stop exists.
import json, os, sys, time
import torch

d = sys.argv[1]
with open(os.path.join(d, "job.pid"), "w") as f:
    f.write(str(os.getpid()))
dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = False

# A graph of ten elementwise kernels, captured before anyone attaches.
gx = torch.randn(1 << 22, device=dev)
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        y = gx
        for i in range(10):
            y = y * 1.0001 + 0.5
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    gy = gx
    for i in range(10):
        gy = gy * 1.0001 + 0.5

a16 = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
b16 = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
# A graph of one known GEMM (bf16 2048x4096 @ 4096x4096), captured before
# anyone attaches: its kernel's GPU time against the events around a replay.
c16 = torch.randn(2048, 4096, device=dev, dtype=torch.bfloat16)
with torch.cuda.stream(s):
    for _ in range(3):
        torch.mm(c16, b16)
torch.cuda.current_stream().wait_stream(s)
gg = torch.cuda.CUDAGraph()
with torch.cuda.graph(gg):
    gout = torch.mm(c16, b16)
a32 = torch.randn(2048, 1024, device=dev)
b32 = torch.randn(1024, 8192, device=dev)

t0 = time.time()
while time.time() - t0 < 8:
    torch.mm(a16, b16)
    torch.mm(a32, b32)
    g.replay()
    torch.cuda.synchronize()

phases = {}
for name, op, n in [
    ("bf16_4096", lambda: torch.mm(a16, b16), 200),
    ("fp32_2048x1024x8192", lambda: torch.mm(a32, b32), 200),
    ("graph_gemm", gg.replay, 100),
    ("graph", g.replay, 50),
]:
    torch.cuda.synchronize()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    start = time.time_ns()
    for e0, e1 in evs:
        e0.record()
        op()
        e1.record()
    torch.cuda.synchronize()
    end = time.time_ns()
    phases[name] = {
        "start_ns": start,
        "end_ns": end,
        "ms": [e0.elapsed_time(e1) for e0, e1 in evs],
    }
    time.sleep(0.2)
with open(os.path.join(d, "phases.json"), "w") as f:
    json.dump(phases, f)
print("phases done", flush=True)
small = torch.ones(16, device=dev)
while not os.path.exists(os.path.join(d, "stop")):
    small.add_(1)
    torch.cuda.synchronize()
    time.sleep(0.01)
