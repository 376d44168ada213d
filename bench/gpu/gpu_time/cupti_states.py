# What a launch costs in each state CUPTI can be left in, in one PyTorch
# process (ctypes on the libcupti PyTorch maps): never touched, subscribed,
# kernel records on, kinds disabled again, finalized, and subscribed and
# enabled again after the finalize. The sampled windows of --gpu-time-share
# switch between two of these states; this says which state is cheap.
#
#   python3 cupti_states.py [LAUNCHES] [REPS]
# Prints µs per launch (median of REPS loops of LAUNCHES x.add_(1)) per
# state, and how long each switch took.
import ctypes, glob, os, statistics, sys, time
import torch

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
REPS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
KIND_CONCURRENT_KERNEL = 10

x = torch.zeros(16, device="cuda")
torch.cuda.synchronize()
path = next(l.split()[-1] for l in open("/proc/self/maps") if "libcupti.so" in l)
cupti = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)

REQ = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
COMP = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)
CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p)
BUF = 8 << 20
bufs, records = [], [0]


@REQ
def requested(buf, size, maxrec):
    b = ctypes.create_string_buffer(BUF + 8)
    bufs.append(b)
    addr = (ctypes.addressof(b) + 7) & ~7
    buf[0] = addr
    size[0] = BUF
    maxrec[0] = 0


@COMP
def completed(ctx, stream, buf, size, valid):
    records[0] += valid


@CB
def callback(ud, domain, cbid, data):
    pass


def check(what, r):
    if r != 0:
        sys.exit(f"{what}: CUPTI error {r}")


def per_launch():
    out = []
    for _ in range(REPS):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(N):
            x.add_(1)
        out.append((time.perf_counter() - t) / N * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


sub = ctypes.c_void_p()


def timed(steps):
    """Runs (name, call) pairs; their times in ms, by name."""
    out = {}
    for name, call in steps:
        t = time.perf_counter()
        check(name, call())
        out[name] = (time.perf_counter() - t) * 1e3
    return out


def attach():
    return timed([
        ("cuptiSubscribe", lambda: cupti.cuptiSubscribe(ctypes.byref(sub), callback, None)),
        ("cuptiActivityRegisterCallbacks", lambda: cupti.cuptiActivityRegisterCallbacks(requested, completed)),
        ("cuptiActivityEnable", lambda: cupti.cuptiActivityEnable(KIND_CONCURRENT_KERNEL)),
    ])


def detach():
    return timed([
        ("cuptiActivityDisable", lambda: cupti.cuptiActivityDisable(KIND_CONCURRENT_KERNEL)),
        ("cuptiActivityFlushAll", lambda: cupti.cuptiActivityFlushAll(1)),
        ("cuptiUnsubscribe", lambda: cupti.cuptiUnsubscribe(sub)),
        ("cuptiFinalize", lambda: cupti.cuptiFinalize()),
    ])


def say(ms):
    return ", ".join(f"{k} {v:.2f}" for k, v in ms.items()) + " ms"


per_launch()  # warm
print(f"{'state':44} µs/launch")
print(f"{'untouched':44} {per_launch():8.3f}")
t = time.perf_counter()
check("cuptiSubscribe", cupti.cuptiSubscribe(ctypes.byref(sub), callback, None))
print(f"{'subscribed, nothing enabled':44} {per_launch():8.3f}   (subscribe {1e3 * (time.perf_counter() - t):.2f} ms)")
t = time.perf_counter()
check("cuptiActivityRegisterCallbacks", cupti.cuptiActivityRegisterCallbacks(requested, completed))
check("cuptiActivityEnable", cupti.cuptiActivityEnable(KIND_CONCURRENT_KERNEL))
print(f"{'kernel records on':44} {per_launch():8.3f}   (enable {1e3 * (time.perf_counter() - t):.2f} ms)")
t = time.perf_counter()
check("cuptiActivityDisable", cupti.cuptiActivityDisable(KIND_CONCURRENT_KERNEL))
d = (time.perf_counter() - t) * 1e3
print(f"{'kernel records disabled (still subscribed)':44} {per_launch():8.3f}   (disable {d:.2f} ms)")
t = time.perf_counter()
check("cuptiActivityEnable", cupti.cuptiActivityEnable(KIND_CONCURRENT_KERNEL))
print(f"{'enabled again':44} {per_launch():8.3f}   (enable {1e3 * (time.perf_counter() - t):.2f} ms)")
d = detach()
print(f"{'finalized':44} {per_launch():8.3f}   ({say(d)})")
for i in range(3):
    a = attach()
    on = per_launch()
    d = detach()
    off = per_launch()
    print(f"{'re-attached %d: on / finalized' % (i + 1):44} {on:8.3f} / {off:.3f}")
    print(f"    attach: {say(a)}; detach: {say(d)}")
# A disable and enable while subscribed, again and again (what the
# sampled windows did before they finalized CUPTI between windows).
attach()
for i in range(3):
    d = timed([("cuptiActivityDisable", lambda: cupti.cuptiActivityDisable(KIND_CONCURRENT_KERNEL))])
    off = per_launch()
    e = timed([("cuptiActivityEnable", lambda: cupti.cuptiActivityEnable(KIND_CONCURRENT_KERNEL))])
    on = per_launch()
    print(f"{'disabled / enabled again %d' % (i + 1):44} {off:8.3f} / {on:.3f}   ({say(d)}, {say(e)})")
detach()
print(f"records: {records[0]} bytes")
