# The launch loop of the issue (20000 x.add_(1)), timed 5 times per phase;
# phases are interleaved (none, bare uprobe+uretprobe, gputrace) over rounds,
# for a 1024x1024 tensor and for a 1-element one (purely launch-bound).
import os, sys, time, torch
base, rounds = sys.argv[1], int(sys.argv[2])
xs = {"1024x1024": torch.randn(1024, 1024, device="cuda"), "1elem": torch.zeros(1, device="cuda")}
for x in xs.values():
    for i in range(3000): x.add_(1.0)
torch.cuda.synchronize()
def loop(x):
    torch.cuda.synchronize(); t = time.perf_counter()
    for i in range(20000): x.add_(1.0)
    torch.cuda.synchronize(); return (time.perf_counter() - t) / 20000 * 1e6
for r in range(rounds):
    open(f"{base}.ready.{r}", "w").write(str(os.getpid()))
    while not os.path.exists(f"{base}.go.{r}"): time.sleep(0.02)
    for name, x in xs.items():
        res = sorted(loop(x) for _ in range(5))
        print(f"round {r} {name} us_per_launch median {res[2]:.3f} all {[round(v, 3) for v in res]}", flush=True)
    open(f"{base}.done.{r}", "w").close()
