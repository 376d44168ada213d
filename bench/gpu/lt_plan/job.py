"""cuBLASLt matmuls of descriptors made once, before gputrace attaches (as
XLA's cached plans are), called through the real libcublasLt that PyTorch
maps. Writes W/job.pid once the descriptors exist, waits for W/go, then
makes 300 calls of each plan, each timed by a pair of CUDA events, and
writes W/phases.json (plan -> shape, calls, median event time in ms).

    python3 job.py W
"""
import ctypes
import json
import os
import statistics
import sys
import time

import torch

W = sys.argv[1]
torch.cuda.init()
a = torch.randn(64, 64, device="cuda")
(a @ a).sum().item()  # maps libcublasLt
path = next(
    l.split()[-1] for l in open("/proc/self/maps") if "libcublasLt.so" in l
)
lt = ctypes.CDLL(path)
vp = ctypes.c_void_p


def ok(r, what):
    if r != 0:
        raise SystemExit(f"{what}: cublasStatus_t {r}")


handle = vp()
ok(lt.cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
lt.cublasLtMatrixLayoutCreate.argtypes = [ctypes.POINTER(vp), ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64]
lt.cublasLtMatmulDescCreate.argtypes = [ctypes.POINTER(vp), ctypes.c_int, ctypes.c_int]
for f in ("cublasLtMatrixLayoutSetAttribute", "cublasLtMatmulDescSetAttribute"):
    getattr(lt, f).argtypes = [vp, ctypes.c_int, vp, ctypes.c_size_t]
lt.cublasLtMatmul.argtypes = [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, ctypes.c_size_t, vp]

BF16, FP16, R32F, C32F = 14, 2, 0, 68


def set_i(fn, h, attr, v, size=4):
    x = (ctypes.c_int32 if size == 4 else ctypes.c_int64)(v)
    ok(fn(h, attr, ctypes.cast(ctypes.byref(x), vp), size), f"set attr {attr}")


def layout(ty, rows, cols, batch):
    h = vp()
    ok(lt.cublasLtMatrixLayoutCreate(ctypes.byref(h), ty, rows, cols, rows), "layout")
    if batch > 1:
        set_i(lt.cublasLtMatrixLayoutSetAttribute, h, 5, batch)
        set_i(lt.cublasLtMatrixLayoutSetAttribute, h, 6, rows * cols, 8)
    return h


def plan(ty, ta, tb, m, n, k, batch, dt):
    d = vp()
    ok(lt.cublasLtMatmulDescCreate(ctypes.byref(d), C32F, R32F), "desc")
    set_i(lt.cublasLtMatmulDescSetAttribute, d, 3, ta)
    set_i(lt.cublasLtMatmulDescSetAttribute, d, 4, tb)
    ar, ac = (m, k) if ta == 0 else (k, m)
    br, bc = (k, n) if tb == 0 else (n, k)
    A = torch.randn(batch * ar * ac, device="cuda").to(dt)
    B = torch.randn(batch * br * bc, device="cuda").to(dt)
    C = torch.zeros(batch * m * n, device="cuda").to(dt)
    return dict(d=d, a=layout(ty, ar, ac, batch), b=layout(ty, br, bc, batch),
                c=layout(ty, m, n, batch), A=A, B=B, C=C,
                shape=dict(ta="NT"[ta], tb="NT"[tb], batch=batch, m=m, n=n, k=k,
                           dtype={BF16: "bf16", FP16: "fp16"}[ty]))


plans = {
    "bmm_bf16_NT": plan(BF16, 0, 1, 256, 512, 2048, 4, torch.bfloat16),
    "mm_fp16_TN": plan(FP16, 1, 0, 1024, 2048, 4096, 1, torch.float16),
}
one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
stream = vp(torch.cuda.current_stream().cuda_stream)


def call(p):
    ok(lt.cublasLtMatmul(handle, p["d"], ctypes.byref(one), p["A"].data_ptr(), p["a"],
                         p["B"].data_ptr(), p["b"], ctypes.byref(zero), p["C"].data_ptr(), p["c"],
                         p["C"].data_ptr(), p["c"], None, None, 0, stream), "cublasLtMatmul")


for p in plans.values():  # warm up (algorithm selection)
    for _ in range(5):
        call(p)
torch.cuda.synchronize()
open(f"{W}/job.pid.tmp", "w").write(str(os.getpid()))
os.rename(f"{W}/job.pid.tmp", f"{W}/job.pid")
while not os.path.exists(f"{W}/go"):
    time.sleep(0.1)
out = {}
for name, p in plans.items():
    times = []
    for _ in range(300):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        call(p)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    out[name] = dict(p["shape"], calls=300, event_median_ms=statistics.median(times))
json.dump(out, open(f"{W}/phases.json", "w"), indent=1)
open(f"{W}/done", "w").write("")
print(json.dumps(out))
while not os.path.exists(f"{W}/stop"):
    time.sleep(0.1)
