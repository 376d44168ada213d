# How well a sampled period's launches are estimated from a slice of it,
# replayed on an exact trace (.jsonl or .jsonl.zst from `gputrace --output`):
# for every slice [p, p+ON) of a period [p, p+L) (p in 10 ms steps), the
# launches seen in the slice scaled (1) by time, L/ON; (2) by the process's
# rare calls (never sampled) of the period over those in the slice; (3) by
# each thread's rare calls likewise (gputrace's rule: the thread's, where 50
# came in the slice and the ratio is within half to twice time's; else the
# process's; else time). Prints the error's spread and mean against the
# period's true launch count.
#   python3 bench/gpu/budget/estimators.py TRACE [--skip S]
import bisect, json, statistics as st, subprocess, sys

path = sys.argv[1]
skip = float(sys.argv[sys.argv.index("--skip") + 1]) if "--skip" in sys.argv else 2.0
src = subprocess.Popen(["zstd", "-dc", path], stdout=subprocess.PIPE, text=True).stdout if path.endswith(".zst") else open(path)


def samplable(api):
    return (api.startswith(("cuLaunch", "cudaLaunch", "cuGraphLaunch", "cudaGraphLaunch"))
            or (api.startswith(("cuMemcpy", "cuMemset", "cudaMemcpy", "cudaMemset")) and "Async" in api)
            or api.startswith(("cuEventRecord", "cudaEventRecord", "cuStreamWaitEvent", "cudaStreamWaitEvent")))


launch, rare = {}, {}  # tid -> sorted times (s)
t0 = None
for line in src:
    d = json.loads(line)
    if "api" not in d:
        continue
    t0 = d["ts_ns"] if t0 is None else min(t0, d["ts_ns"])
    if d["api"].startswith(("cuLaunchKernel", "cudaLaunchKernel")):
        launch.setdefault(d["tid"], []).append(d["ts_ns"])
    elif not samplable(d["api"]):
        rare.setdefault(d["tid"], []).append(d["ts_ns"])
for m in (launch, rare):
    for k in m:
        m[k] = sorted((t - t0) / 1e9 for t in m[k])
end = max(v[-1] for v in launch.values())
tids = sorted(set(launch) | set(rare))
print(f"{path}: {sum(map(len, launch.values()))} launches, {sum(map(len, rare.values()))} rare calls, {len(tids)} threads, {end:.1f} s (from {skip} s on)")


def n(v, a, b):
    return bisect.bisect_left(v, b) - bisect.bisect_left(v, a) if v else 0


for on in (0.1, 0.25, 0.5):
    for length in (2.0, 8.0):
        errs = {"time": [], "process": [], "thread": []}
        p = skip
        while p + length < end:
            true = sum(n(launch.get(k), p, p + length) for k in tids)
            seen = {k: n(launch.get(k), p, p + on) for k in tids}
            r_all = {k: n(rare.get(k), p, p + length) for k in tids}
            r_on = {k: n(rare.get(k), p, p + on) for k in tids}
            by_time = length / on
            def ratio(a, o, fallback):  # gputrace's rule: 50 while on, within half to twice time's
                return a / o if o >= 50 and by_time / 2 <= a / o <= by_time * 2 else fallback

            proc = ratio(sum(r_all.values()), sum(r_on.values()), by_time)
            errs["time"].append(sum(seen.values()) * by_time / true - 1)
            errs["process"].append(sum(seen.values()) * proc / true - 1)
            errs["thread"].append(sum(seen[k] * ratio(r_all[k], r_on[k], proc) for k in tids) / true - 1)
            p += 0.01
        print(f"slice {on * 1e3:4.0f} ms of {length:.0f} s: " + " | ".join(
            f"{k} sd {100 * st.pstdev(v):5.2f}% mean {100 * st.mean(v):+5.2f}%" for k, v in errs.items()))
