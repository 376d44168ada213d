# Compares the GPU time gputrace recorded (--gpu-time, JSONL) with the CUDA
# event times of gemm_job.py, phase by phase: per op, the GPU time of the
# kernels of that phase's window over the ops against the events' mean, and
# where each op is one kernel (or one graph replay) the median kernel time
# against the events' median (a few slow outliers move a mean). Exits 1
# when a phase's medians (else means) differ by more than 5%.
#
#   compare.py PHASES.json TRACE.jsonl
import json, statistics, sys

phases = json.load(open(sys.argv[1]))
gpu = []
for line in open(sys.argv[2]):
    v = json.loads(line)
    if v.get("type") == "gpu" and v.get("op") == "kernel":
        gpu.append(v)
worst = 0.0
for name, p in phases.items():
    ks = [k for k in gpu if p["start_ns"] <= k["ts_ns"] <= p["end_ns"] + 50_000_000]
    n = len(p["ms"])
    ev_mean = statistics.mean(p["ms"]) * 1e6
    ev_med = statistics.median(p["ms"]) * 1e6
    if name == "graph":
        # A replay's kernels share the cudaGraphLaunch's correlation id:
        # its span (first start to last end, the gaps between nodes
        # included) is what the events bracket.
        spans = {}
        for k in ks:
            c = k["correlation"]
            lo, hi = spans.get(c, (k["ts_ns"], k["ts_ns"] + k["dur_ns"]))
            spans[c] = (min(lo, k["ts_ns"]), max(hi, k["ts_ns"] + k["dur_ns"]))
        per_op = sum(hi - lo for lo, hi in spans.values()) / max(len(spans), 1)
        each = [hi - lo for lo, hi in spans.values()]
    else:
        per_op = sum(k["dur_ns"] for k in ks) / n
        each = [k["dur_ns"] for k in ks]
    one_each = len(each) == n
    graph = sum(1 for k in ks if k.get("graph_id") is not None)
    names = sorted({k["name"][:60] for k in ks})
    joined = sum(1 for k in ks if k["launch"] and k["launch"].get("call_ts_ns"))
    off = (per_op - ev_mean) / ev_mean * 100
    med = statistics.median(each) if one_each and each else None
    off_med = (med - ev_med) / ev_med * 100 if med is not None else None
    if med is not None:
        worst = max(worst, abs(off_med))
    elif name != "graph":
        # The elementwise graph's replays hold gaps between its ten small
        # nodes that no kernel's time covers: its kernels are counted, its
        # time only shown.
        worst = max(worst, abs(off))
    print(f"{name}: {n} ops, {len(ks)} kernels ({graph} in graphs, {joined} joined to their probed call); "
          f"GPU time per op {per_op/1e3:.1f} us by gputrace, {ev_mean/1e3:.1f} us by CUDA events "
          f"(median {ev_med/1e3:.1f} us): {off:+.2f}%")
    if med is not None:
        print(f"  one per op: median {med/1e3:.1f} us by gputrace, {ev_med/1e3:.1f} us by CUDA events: {off_med:+.2f}%")
    print(f"  kernels: {names}")
print(f"worst difference: {worst:.2f}%")
sys.exit(0 if worst <= 5.0 else 1)
