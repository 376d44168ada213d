# One rank of the DDP benchmark (issue 13): a GPT-2-small-shaped model
# (transformers GPT2Config/GPT2LMHeadModel, random weights, no download;
# the same shape from torch.nn alone where transformers is missing),
# bf16, batch 8x512, trained with DistributedDataParallel under torchrun.
# Every step's end time and length go to DIR/rank{R}.steps as they happen,
# so the driver (ddp_bench.sh) can cut them into windows by wall clock.
# Runs until DIR/stop exists (or --max-steps).
#
# --dry: no GPU: each "step" makes 300 cuLaunchKernel calls and a
# cuCtxSynchronize into the simulated libcuda of tests/sim (GPUTRACE_SIM
# = its folder), plus 20 ms of pretend GPU time; for checking the driver
# on a CPU machine. Two ranks are then two plain processes.
import argparse, os, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--dir", required=True)
ap.add_argument("--warmup", type=int, default=20)
ap.add_argument("--max-steps", type=int, default=1_000_000)
ap.add_argument("--dry", action="store_true")
ap.add_argument("--rank", type=int, default=None, help="--dry only")
ap.add_argument("--tiny", type=int, default=0, metavar="N",
                help="instead of training: each step launches N tiny kernels and synchronises "
                     "(every probe's cost is on the step's critical path)")
ap.add_argument("--idle-ms", type=float, default=0.0,
                help="with --tiny: then sleep this long (a step's pace without GPU-bound noise)")
a = ap.parse_args()


def rank_files(rank):
    base = os.path.join(a.dir, f"rank{rank}")
    with open(base + ".pid", "w") as f:
        f.write(str(os.getpid()))
    return open(base + ".steps", "w", buffering=1)


def stop_requested():
    return os.path.exists(os.path.join(a.dir, "stop"))


def loop(step, rank, should_stop=stop_requested):
    out = rank_files(rank)
    for _ in range(a.warmup):
        step()
    open(os.path.join(a.dir, f"rank{rank}.ready"), "w").close()
    for i in range(a.max_steps):
        t = time.perf_counter()
        step()
        end = time.time()
        out.write(f"{end:.6f} {(time.perf_counter() - t) * 1e3:.4f}\n")
        if i % 10 == 0 and should_stop():
            break


if a.dry:
    import ctypes
    sim = os.environ.get("GPUTRACE_SIM", "target/sim")
    cu = ctypes.CDLL(os.path.join(sim, "libcuda.so.1"))
    assert cu.cuInit(0) == 0
    handle = ctypes.create_string_buffer(64)
    f = ctypes.c_void_p(ctypes.addressof(handle))
    u = ctypes.c_uint
    cu.cuLaunchKernel.argtypes = [ctypes.c_void_p, u, u, u, u, u, u, u, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]

    def step():
        for _ in range(300):
            cu.cuLaunchKernel(f, 64, 1, 1, 256, 1, 1, 0, None, None, None)
        cu.cuCtxSynchronize()
        time.sleep(0.02)

    loop(step, a.rank)
    sys.exit(0)

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
torch.manual_seed(rank)


def both_stop():
    # The ranks must leave at the same step, or one waits forever in the
    # next all-reduce.
    flag = torch.tensor([1 if stop_requested() else 0], device="cuda")
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


VOCAB = 50257
if a.tiny:
    x = torch.zeros(16, device="cuda")

    def tiny_step():
        for _ in range(a.tiny):
            x.add_(1)
        torch.cuda.synchronize()
        if a.idle_ms:
            time.sleep(a.idle_ms / 1e3)

    loop(tiny_step, rank, both_stop)
    dist.destroy_process_group()
    sys.exit(0)
try:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=12, n_head=12, n_embd=768, n_positions=512, vocab_size=VOCAB)
    net = GPT2LMHeadModel(cfg)
    forward = lambda m, x: m(input_ids=x, labels=x).loss
    print(f"rank {rank}: transformers GPT2LMHeadModel", flush=True)
except ImportError:
    # Without transformers: the same shape from torch alone (12 pre-norm
    # layers, 768 wide, 12 heads, causal, tied-size LM head).
    class GPT2Shape(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = torch.nn.Embedding(VOCAB, 768)
            self.pos = torch.nn.Embedding(512, 768)
            layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.1, activation="gelu", batch_first=True, norm_first=True)
            self.blocks = torch.nn.TransformerEncoder(layer, 12)
            self.norm = torch.nn.LayerNorm(768)
            self.head = torch.nn.Linear(768, VOCAB, bias=False)

        def forward(self, x):
            mask = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device, dtype=self.head.weight.dtype)
            h = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
            logits = self.head(self.norm(self.blocks(h, mask=mask, is_causal=True)))
            return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), x[:, 1:].flatten())

    net = GPT2Shape()
    forward = lambda m, x: m(x)
    print(f"rank {rank}: no transformers here; a GPT-2-shaped torch model", flush=True)
model = DDP(net.to(device="cuda", dtype=torch.bfloat16))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randint(0, VOCAB, (8, 512), device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    loss = forward(model, x)
    loss.backward()
    opt.step()
    torch.cuda.synchronize()


loop(step, rank, both_stop)
dist.destroy_process_group()
