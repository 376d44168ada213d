# Checks the agent against the real CUPTI 13 in a PyTorch process, without an
# injector: the process loads the agent itself, starts it with the libcupti it
# maps, reads the ring as gputrace would, detaches, joins, unloads and goes on.
# Usage (on a GPU machine with PyTorch cu13):
#   python3 gpu_check.py [path/to/libgputrace_agent.so]
# (default: libgputrace_agent.so beside this script). See DESIGN.md.
import collections, ctypes, glob, mmap, os, struct, sys, time
try:
    import torch
except Exception as e:
    print("no torch:", e); sys.exit(0)
HERE = os.path.dirname(os.path.abspath(__file__))
dev = "cuda"
a = torch.randn(1024, 1024, device=dev); b = a @ a; torch.cuda.synchronize()
maps = open("/proc/self/maps").read()
cupti = sorted({l.split()[-1] for l in maps.splitlines() if "libcupti" in l})
print("cupti mapped:", cupti)
if not cupti:
    cand = glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "*", "lib", "libcupti.so*"))
    print("candidates:", cand)
    if not cand: sys.exit(0)
    cupti = [os.path.realpath(cand[0])]
path = cupti[0]
# a CUDA graph captured before the agent starts
static_x = torch.randn(256, 256, device=dev)
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3): y = torch.relu(static_x @ static_x)
torch.cuda.current_stream().wait_stream(s); torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = torch.relu(static_x @ static_x)
torch.cuda.synchronize()

class Args(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("kinds", ctypes.c_uint32), ("ring", ctypes.c_uint64),
                ("names", ctypes.c_uint64), ("flush", ctypes.c_uint32), ("hello", ctypes.c_uint32),
                ("finalize", ctypes.c_uint32), ("bufcount", ctypes.c_uint32), ("bufsize", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32), ("path", ctypes.c_char * 4096)]
assert ctypes.sizeof(Args) == 4144
so = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "libgputrace_agent.so")
agent = ctypes.CDLL(os.path.abspath(so), mode=os.RTLD_NOW | os.RTLD_LOCAL)
agent.gputrace_agent_start.restype = ctypes.c_int64; agent.gputrace_agent_start.argtypes = [ctypes.c_void_p]
agent.gputrace_agent_join.restype = ctypes.c_int64; agent.gputrace_agent_join.argtypes = [ctypes.c_void_p]
args = Args(version=1, kinds=15, flush=50, path=path.encode())
t0 = time.monotonic_ns()
fd = agent.gputrace_agent_start(ctypes.byref(args))
print("start returned", fd, "in %.1f ms" % ((time.monotonic_ns() - t0) / 1e6))
if fd < 0:
    print("reason", (-fd) & 0xffff, "detail", (-fd) >> 16); sys.exit(1)
size = os.fstat(fd).st_size
mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
u32 = lambda o: struct.unpack_from("<I", mm, o)[0]
u64 = lambda o: struct.unpack_from("<Q", mm, o)[0]
i64 = lambda o: struct.unpack_from("<q", mm, o)[0]
print("state", u32(20), "clock", u32(72), "offset", i64(80), "err", u64(88), "cupti_version", u32(96),
      "kinds", u32(104), "features", u32(108), "pid", u32(24), os.getpid())
w = os.open("/proc/self/fd/%d" % struct.unpack_from("<i", mm, 28)[0], os.O_WRONLY)
os.write(w, b"H")
w0 = time.monotonic_ns()
for i in range(100): y = a @ a
for i in range(10): g.replay()
h = torch.ones(1 << 20).pin_memory(); d = h.to(dev, non_blocking=True); h2 = d.cpu()
z = torch.zeros(1 << 20, device=dev)
libcuda = ctypes.CDLL("libcuda.so.1")
rc = libcuda.cuMemsetD8_v2(ctypes.c_uint64(z.data_ptr()), ctypes.c_ubyte(7), ctypes.c_size_t(4096))
print("direct cuMemsetD8_v2:", rc)
torch.cuda.synchronize()
w1 = time.monotonic_ns()
time.sleep(0.5)
cap, names_off = u64(40), u64(48)
recs = []
def poll():
    head, tail = u64(128), u64(256)
    for i in range(tail, head):
        o = 4096 + (i % cap) * 96
        recs.append(bytes(mm[o:o + 96]))
    struct.pack_into("<Q", mm, 256, head)
poll()
def name(nid):
    if nid == 0: return "?"
    n = struct.unpack_from("<H", mm, names_off + nid)[0]
    return bytes(mm[names_off + nid + 2: names_off + nid + 2 + n]).decode(errors="replace")
kinds = collections.Counter(struct.unpack_from("<H", r, 0)[0] for r in recs)
print("records", len(recs), dict(kinds), "written", u64(136), "ring_dropped", u64(144), "cupti_dropped", u64(152),
      "skipped", u64(192), "buffers", u64(176))
apis = {}
cb = collections.Counter()
for r in recs:
    if struct.unpack_from("<H", r, 0)[0] == 4:
        corr = struct.unpack_from("<I", r, 16)[0]
        apis[corr] = r; cb[(struct.unpack_from("<I", r, 56)[0], struct.unpack_from("<I", r, 40)[0])] += 1
print("api (domain, cbid)", dict(cb))
matched = unmatched = inwin = graphk = 0
kn = collections.Counter(); durs = []
for r in recs:
    k = struct.unpack_from("<H", r, 0)[0]
    if k in (1, 2, 3):
        corr, st, en = struct.unpack_from("<IxxxxQQ", r, 16)
        if corr in apis: matched += 1
        else: unmatched += 1
        if w0 <= st and en <= w1 + 10**9: inwin += 1
        durs.append(en - st)
    if k == 1:
        gid = struct.unpack_from("<I", r, 88)[0]
        if gid: graphk += 1
        kn[(name(struct.unpack_from("<I", r, 76)[0])[:60], bool(gid))] += 1
    if k == 2: print(" memcpy bytes", struct.unpack_from("<Q", r, 40)[0], "kind", r[48], r[49], r[50])
    if k == 3: print(" memset bytes", struct.unpack_from("<Q", r, 40)[0])
print("gpu records matched to API", matched, "unmatched", unmatched, "inside window", inwin, "graph kernels", graphk)
print("durations ns min/max", min(durs) if durs else None, max(durs) if durs else None)
for (n, gph), c in kn.most_common(8): print("  kernel", c, "graph" if gph else "", n)
api_tids = collections.Counter(struct.unpack_from("<I", r, 44)[0] for r in apis.values())
print("api tids", dict(api_tids), "my tid", ctypes.CDLL(None).syscall(186))
api_inwin = sum(1 for r in apis.values() if w0 <= struct.unpack_from("<Q", r, 24)[0] <= struct.unpack_from("<Q", r, 32)[0] <= w1)
print("api records inside the monotonic window", api_inwin, "of", len(apis))
# detach while the program goes on launching
os.write(w, b"S")
t = time.monotonic_ns(); n = 0
while u32(20) != 6 and time.monotonic_ns() - t < 10 * 10**9:
    y = a @ a; n += 1
    if n % 50 == 0: torch.cuda.synchronize()
torch.cuda.synchronize()
print("state", u32(20), "reason", u32(120), "after %.1f ms and %d launches" % ((time.monotonic_ns() - t) / 1e6, n))
poll(); print("records after stop", len(recs), "written", u64(136))
for i in range(20): y = a @ a; g.replay()
torch.cuda.synchronize()
r = agent.gputrace_agent_join(None); print("join", r)
if r == 0:
    import _ctypes
    _ctypes.dlclose(agent._handle); print("unloaded")
    print("agent still mapped:", "libgputrace_agent" in open("/proc/self/maps").read())
for i in range(200): y = a @ a; g.replay()
d2 = h.to(dev); torch.cuda.synchronize()
print("alive after unload; result ok:", bool(torch.isfinite(y).all().item()))
