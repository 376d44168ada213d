# A training loop that runs until killed (for top): a small MLP and an
# all_reduce of its gradients on a one-rank NCCL group each step.
import os, time, torch, torch.nn as nn, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29556")
dist.init_process_group("nccl", rank=0, world_size=1)
m = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.LayerNorm(1024), nn.Linear(1024, 10)).cuda()
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
x = torch.randn(256, 512, device="cuda"); y = torch.randint(0, 10, (256,), device="cuda")
while True:
    opt.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(m(x), y).backward()
    for p in m.parameters(): dist.all_reduce(p.grad)
    opt.step()
    h = x[:8].cpu()
