# Which way of asking CUPTI 13 for per-API records produces them?
# Usage: python3 cupti_api_modes.py api_only|api_then_kernel|kernel_then_api|kind_then_disable
# On CUPTI 13.0 (H100, driver 580.159.04) only kind_then_disable records API
# calls: cuptiActivityEnable{Driver,Runtime}Api(cbid, 1) without the
# DRIVER/RUNTIME kind returns success and records nothing (DESIGN.md).
import ctypes, os, sys, collections
import torch
mode = sys.argv[1]
a = torch.randn(512, 512, device="cuda"); (a @ a); torch.cuda.synchronize()
path = [l.split()[-1] for l in open("/proc/self/maps") if "libcupti" in l][0]
cupti = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
REQ = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
DONE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)
bufs = []; kinds = collections.Counter(); cbids = collections.Counter()
@REQ
def req(b, s, m):
    buf = ctypes.create_string_buffer(1 << 22); bufs.append(buf)
    b[0] = ctypes.addressof(buf); s[0] = 1 << 22; m[0] = 0
@DONE
def done(ctx, sid, b, size, valid):
    rec = ctypes.c_void_p(0)
    while cupti.cuptiActivityGetNextRecord(ctypes.c_void_p(b), ctypes.c_size_t(valid), ctypes.byref(rec)) == 0:
        k = ctypes.c_uint32.from_address(rec.value).value; kinds[k] += 1
        if k in (4, 5): cbids[(k, ctypes.c_uint32.from_address(rec.value + 4).value)] += 1
print(mode, "register", cupti.cuptiActivityRegisterCallbacks(req, done))
D_MEMSET, R_LAUNCH = 249, 211
if mode == "api_only":
    print(" drv", cupti.cuptiActivityEnableDriverApi(D_MEMSET, 1), "rt", cupti.cuptiActivityEnableRuntimeApi(R_LAUNCH, 1))
elif mode == "api_then_kernel":
    print(" drv", cupti.cuptiActivityEnableDriverApi(D_MEMSET, 1), "rt", cupti.cuptiActivityEnableRuntimeApi(R_LAUNCH, 1))
    print(" conc", cupti.cuptiActivityEnable(10))
elif mode == "kernel_then_api":
    print(" conc", cupti.cuptiActivityEnable(10))
    print(" drv", cupti.cuptiActivityEnableDriverApi(D_MEMSET, 1), "rt", cupti.cuptiActivityEnableRuntimeApi(R_LAUNCH, 1))
elif mode == "kind_then_disable":
    print(" kinds", cupti.cuptiActivityEnable(4), cupti.cuptiActivityEnable(5), cupti.cuptiActivityEnable(10))
    bad = 0
    for c in range(1, 807):
        if c != D_MEMSET: bad += cupti.cuptiActivityEnableDriverApi(c, 0) != 0
    for c in range(1, 523):
        if c != R_LAUNCH: bad += cupti.cuptiActivityEnableRuntimeApi(c, 0) != 0
    print(" disable failures", bad)
libcuda = ctypes.CDLL("libcuda.so.1")
z = torch.zeros(1 << 16, device="cuda")
for i in range(5):
    libcuda.cuMemsetD8_v2(ctypes.c_uint64(z.data_ptr()), ctypes.c_ubyte(1), ctypes.c_size_t(4096)); y = a @ a; torch.relu(a)
torch.cuda.synchronize()
print(" flush", cupti.cuptiActivityFlushAll(1))
print(" kinds", dict(kinds), "api", dict(cbids))
