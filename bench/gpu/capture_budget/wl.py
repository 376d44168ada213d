# Eager busy steps (many small launches, so that an overhead budget
# samples) with a CUDA graph of an 8-layer MLP captured again every
# RECAPTURE steps and replayed 3 times a step. Each capture sleeps
# SLEEP_MS in its middle (a capture long enough for the sampler's probes
# to change during it). The exact trace of the same run is the reference
# for the kernels each captured graph holds.
# Usage: wl.py STEPS RECAPTURE SLEEP_MS
import sys, time, torch
steps, recapture, sleep_ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
torch.manual_seed(0)
layers = [torch.nn.Linear(512, 512) for _ in range(8)]
m = torch.nn.Sequential(*[l for pair in zip(layers, [torch.nn.ReLU()] * 8) for l in pair]).cuda()
x = torch.randn(64, 512, device="cuda")
side = torch.cuda.Stream()

def eager(n=300):
    y = x
    for _ in range(n):
        y = y * 1.0001
    return y

def capture():
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        m(x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        h = x
        for i, mod in enumerate(m):
            h = mod(h)
            if i == 7 and sleep_ms:
                time.sleep(sleep_ms / 1000)
    return g

g = None
captures = 0
t0 = time.time()
for step in range(steps):
    eager()
    if step % recapture == 0:
        g = None
        g = capture()
        captures += 1
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
print(f"steps={steps} captures={captures} seconds={time.time() - t0:.1f}", flush=True)
