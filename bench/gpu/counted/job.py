# A training loop that runs until killed: a small MLP's forward, backward
# and AdamW step with an event record and a stream wait each step (so
# launches, event records and stream waits are all busy). Every step
# appends "unix_seconds step" to STEPS (one line each 10 steps).
import sys, time, torch, torch.nn as nn
steps_file = open(sys.argv[1], "a", buffering=1)
m = nn.Sequential(*[nn.Sequential(nn.Linear(1024, 1024), nn.GELU(), nn.LayerNorm(1024)) for _ in range(8)], nn.Linear(1024, 10)).cuda()
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
x = torch.randn(64, 1024, device="cuda"); y = torch.randint(0, 10, (64,), device="cuda")
side = torch.cuda.Stream()
step = 0
limit = int(sys.argv[2]) if len(sys.argv) > 2 else None
while limit is None or step < limit:
    opt.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(m(x), y).backward()
    opt.step()
    ev = torch.cuda.Event()
    ev.record()
    side.wait_event(ev)
    if step % 10 == 0:
        torch.cuda.synchronize()
        steps_file.write(f"{time.time():.6f} {step}\n")
    step += 1
