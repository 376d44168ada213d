# Writes input.jsonl: a fixed, hand-made trace of two processes covering every
# family, with chosen durations so the summary's arithmetic can be checked by
# hand. Run once; the golden outputs are regenerated with UPDATE_GOLDEN=1.
import json
T0 = 1_700_000_000_000_000_000
lines = []
def ev(ts, dur, pid, tid, comm, api, ret, args):
    lines.append({"ts_ns": T0 + ts, "dur_ns": dur, "pid": pid, "tid": tid, "comm": comm, "api": api, "ret": ret, "args": args})
S = "0x5000"
A, B = 100, 200
# process A: 6 launches of two kernels (durations 1..6 us), one Ex launch, one unnamed
for i in range(6):
    k = "vector_add(float const*, float const*, float*, int)" if i % 2 == 0 else "relu(float*, int)"
    ev(1000 * i, 1000 * (i + 1), A, 101, "trainer", "cuLaunchKernel", 0,
       {"function": "0x10" if i % 2 == 0 else "0x20", "kernel": k, "grid": [64, 2, 1], "block": [256, 1, 1], "shared_mem_bytes": 0, "stream": S})
ev(7000, 4000, A, 101, "trainer", "cuLaunchKernelEx", 0,
   {"function": "0x30", "kernel": "void cublas::gemm<float>(float const*, float const*, float*, int, int, int)", "grid": [32, 4, 2], "block": [128, 2, 1], "shared_mem_bytes": 8192, "stream": S})
ev(8000, 2000, A, 102, "trainer", "cuLaunchKernel", 0,
   {"function": "0x40", "kernel": None, "grid": [1, 1, 1], "block": [32, 1, 1], "shared_mem_bytes": 0, "stream": S})
# allocations: 1 MiB and 2 MiB, a failed one, a host alloc, a free
ev(9000, 10000, A, 101, "trainer", "cuMemAlloc_v2", 0, {"dptr": "0x7f0000000000", "bytes": 1048576, "kind": "device"})
ev(20000, 20000, A, 101, "trainer", "cuMemAlloc_v2", 0, {"dptr": "0x7f0000200000", "bytes": 2097152, "kind": "device"})
ev(41000, 5000, A, 101, "trainer", "cuMemAlloc_v2", 2, {"dptr": None, "bytes": 137438953472, "kind": "device"})
ev(47000, 3000, A, 101, "trainer", "cuMemAllocHost_v2", 0, {"dptr": "0x7fff00000000", "bytes": 4096, "kind": "host"})
ev(51000, 1000, A, 101, "trainer", "cuMemFree_v2", 0, {"dptr": "0x7f0000000000"})
# copies
ev(53000, 8000, A, 101, "trainer", "cuMemcpyHtoDAsync_v2", 0, {"dst": "0x7f0000200000", "src": "0x7fff00000000", "bytes": 4096, "direction": "HtoD", "stream": S})
ev(62000, 12000, A, 101, "trainer", "cuMemcpyDtoHAsync_v2", 0, {"dst": "0x7fff00000000", "src": "0x7f0000200000", "bytes": 1024, "direction": "DtoH", "stream": S})
ev(75000, 4000, A, 101, "trainer", "cuMemcpyAsync", 0, {"dst": "0x7fff00000000", "src": "0x7f0000200000", "bytes": 3072, "direction": "DtoH", "stream": S})
ev(80000, 1000, A, 101, "trainer", "cuMemsetD32_v2", 0, {"dst": "0x7f0000200000", "src": None, "bytes": 1024, "direction": "memset", "stream": None, "value": 0})
# a wait
ev(82000, 500000, A, 101, "trainer", "cuStreamSynchronize", 0, {"stream": S})
# process B: NCCL on one communicator of 4 ranks (rank 2)
C = "0xc0"
ev(1000, 300000, B, 201, "worker", "ncclCommInitRankConfig", 0, {"comm": C, "nranks": 4, "rank": 2})
for i in range(3):
    ev(400000 + i * 10000, 1000 * (i + 1), B, 201, "worker", "ncclAllReduce", 0,
       {"op": "AllReduce", "count": 1048576, "datatype": "float32", "bytes": 4194304, "redop": "sum", "root": None, "peer": None, "comm": C, "stream": S})
ev(440000, 2000, B, 201, "worker", "ncclBroadcast", 0,
   {"op": "Broadcast", "count": 1000, "datatype": "int8", "bytes": 1000, "redop": None, "root": 0, "peer": None, "comm": C, "stream": S})
ev(443000, 500, B, 202, "worker", "cuLaunchKernel", 0,
   {"function": "0x10", "kernel": "relu(float*, int)", "grid": [8, 1, 1], "block": [128, 1, 1], "shared_mem_bytes": 0, "stream": S})
# a call traced --probes launch:args (no latency, no return code)
ev(444000, None, B, 202, "worker", "cuLaunchKernel", None,
   {"function": "0x10", "kernel": "relu(float*, int)", "grid": [8, 1, 1], "block": [128, 1, 1], "shared_mem_bytes": 0, "stream": S})
with open("input.jsonl", "w") as f:
    for l in lines:
        f.write(json.dumps(l, separators=(",", ":")) + "\n")
    f.write(json.dumps({"type": "summary", "events": len(lines), "lost": 3,
                        "lost_detail": {"ring_full": 3, "inflight_full": 0, "unpaired": 0, "read_failed": 0}}) + "\n")
