# A small real training loop: an MLP on random data, 450 steps; prints the
# median step time after 50 warm-up steps.
import time, torch, torch.nn as nn
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.LayerNorm(1024), nn.Linear(1024, 10)).cuda()
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
x = torch.randn(256, 512, device="cuda"); y = torch.randint(0, 10, (256,), device="cuda")
times = []
for step in range(450):
    torch.cuda.synchronize(); t = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(m(x), y)
    loss.backward(); opt.step()
    torch.cuda.synchronize(); times.append(time.perf_counter() - t)
times = sorted(times[50:])
print(f"train step median {times[len(times)//2]*1e3:.3f} ms p90 {times[int(len(times)*0.9)]*1e3:.3f} ms loss {loss.item():.3f}", flush=True)
