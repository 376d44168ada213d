# One rank of the DDP benchmark (issue 13): a GPT-2-small-shaped model
# (transformers GPT2Config/GPT2LMHeadModel, random weights, no download;
# the same shape from torch.nn alone where transformers is missing),
# bf16, batch 8x512 (--batch), trained with DistributedDataParallel under torchrun.
# Every step's end time, length, issue time and the issuing threads' CPU
# time (and cycles, where the machine has hardware counters) go to
# DIR/rank{R}.steps as they happen, so the driver (budget/run.sh) can cut
# them into windows by wall clock.
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
ap.add_argument("--batch", type=int, default=8,
                help="sequences of 512 tokens a step (the benchmark's 8; budget/paired.sh runs two jobs on one GPU at 2)")
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


# When the step's work was all issued (set by each step just before it
# waits for the GPU).
issued = [0.0]


def mark_issued():
    issued[0] = time.perf_counter()


class ThreadMeter:
    """The CPU time, and where the machine lends hardware counters the
    cycles and instructions (user and kernel), of the threads that issue
    the work: the main thread and PyTorch's autograd threads (which run
    the backward pass's launches). Opened after the warmup, once those
    threads exist."""

    def __init__(self):
        import ctypes, struct
        me = os.getpid()
        self.tids = [t for t in map(int, os.listdir("/proc/self/task"))
                     if t == me or open(f"/proc/self/task/{t}/comm").read().startswith("pt_autograd")]
        self.stat = [os.open(f"/proc/self/task/{t}/schedstat", os.O_RDONLY) for t in self.tids]
        self.counters = []
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            # struct perf_event_attr, PERF_ATTR_SIZE_VER0 (64 bytes): type,
            # size, config, sample_period, sample_type, read_format, flags
            # (offset 40; exclude_hv = bit 6), wakeup_events, bp_type, bp_addr.
            for config in (0, 1):  # PERF_COUNT_HW_CPU_CYCLES, _INSTRUCTIONS
                fds = []
                for t in self.tids:
                    buf = ctypes.create_string_buffer(64)
                    struct.pack_into("<IIQ", buf, 0, 0, 64, config)  # PERF_TYPE_HARDWARE
                    struct.pack_into("<Q", buf, 40, 1 << 6)
                    fd = libc.syscall(298, buf, t, -1, -1, 0)  # perf_event_open, x86_64
                    if fd < 0:
                        raise OSError(ctypes.get_errno(), "perf_event_open")
                    fds.append(fd)
                self.counters.append(fds)
        except OSError as e:
            print(f"no hardware counters here ({e}); CPU time only", flush=True)
            self.counters = []
        print(f"rank threads measured: {self.tids}, counters: {bool(self.counters)}", flush=True)

    def read(self):
        cpu = sum(int(os.pread(fd, 64, 0).split()[0]) for fd in self.stat)
        hw = [sum(int.from_bytes(os.pread(fd, 8, 0), "little") for fd in fds) for fds in self.counters]
        return cpu, hw


PROFILED_STEPS = 150


def loop(step, rank, should_stop=stop_requested):
    # Each step: its end (wall clock), its length, the time to issue it
    # (until it waits for the GPU), the issuing threads' CPU time in ms,
    # and their cycles and instructions ("-" without counters).
    out = rank_files(rank)
    for _ in range(a.warmup):
        step()
    meter = ThreadMeter()
    open(os.path.join(a.dir, f"rank{rank}.ready"), "w").close()
    cpu0, hw0 = meter.read()
    # DIR/profile appearing: the next PROFILED_STEPS steps run under
    # torch.profiler (CPU and CUDA activities), marked P in the step file,
    # for comparing its cost with gputrace's on the same job.
    profile_flag = os.path.join(a.dir, "profile")
    prof, prof_left = None, 0
    for i in range(a.max_steps):
        if prof is None and not a.dry and os.path.exists(profile_flag):
            os.remove(profile_flag)
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA])
            prof.__enter__()
            prof_left = PROFILED_STEPS
        t = time.perf_counter()
        issued[0] = 0.0
        step()
        now = time.perf_counter()
        end = time.time()
        cpu, hw = meter.read()
        d = [x - y for x, y in zip(hw, hw0)] or ["-", "-"]
        issue = (issued[0] - t) * 1e3 if issued[0] else float("nan")
        mark = " P" if prof is not None else ""
        out.write(f"{end:.6f} {(now - t) * 1e3:.4f} {issue:.4f} {(cpu - cpu0) / 1e6:.4f} {d[0]} {d[1]}{mark}\n")
        cpu0, hw0 = cpu, hw
        if prof is not None:
            prof_left -= 1
            if prof_left == 0:
                prof.__exit__(None, None, None)
                prof = None
                cpu0, hw0 = meter.read()
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
        mark_issued()
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
        mark_issued()
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
x = torch.randint(0, VOCAB, (a.batch, 512), device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    loss = forward(model, x)
    loss.backward()
    opt.step()
    mark_issued()
    torch.cuda.synchronize()


loop(step, rank, both_stop)
dist.destroy_process_group()
