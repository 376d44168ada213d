# Warm up a PyTorch loop (so every kernel handle exists before any tracer
# attaches), then run it under torch.profiler while gputrace is attached,
# and print the profiler's kernel names and counts for comparison.
import json, os, sys, time, torch
import torch.nn.functional as F
ready, go, out = sys.argv[1], sys.argv[2], sys.argv[3]
x = torch.randn(1024, 1024, device="cuda")
w1 = torch.randn(1024, 1024, device="cuda")
w2 = torch.randn(1024, 512, device="cuda")
def step():
    y = x + 1.0
    y = F.softmax(y, dim=1)
    s = y.sum(dim=0)
    r = F.relu(y)
    z = r @ w1
    z = z @ w2
    return s, z
for _ in range(20): step()
torch.cuda.synchronize()
open(ready, "w").write(str(os.getpid()))
while not os.path.exists(go): time.sleep(0.02)
N = 200
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(N): step()
    torch.cuda.synchronize()
kernels = {}
for e in prof.events():
    if e.device_type == torch.autograd.DeviceType.CUDA:
        kernels[e.name] = kernels.get(e.name, 0) + 1
json.dump({"steps": N, "kernels": kernels}, open(out, "w"), indent=1)
print("profiler kernels:", sum(kernels.values()), "distinct:", len(kernels), flush=True)
time.sleep(1.0)
