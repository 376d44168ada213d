# perf5 report: step time of the budget daemon's windows (from its first
# settled sampled period on) against the untraced windows; launch counts
# per step from the estimated-until gauge against the exact daemon.
import csv, os, statistics as st, sys
from benchlib import interval, step_lines
res = sys.argv[1]
steps = []
# Per step: rank, end time, then the metrics of METRICS (older files have
# the step time only).
METRICS = ["step ms", "issue ms", "CPU ms", "cycles", "instructions"]
RANKS = [r for r in range(64) if os.path.exists(f"{res}/rank{r}.steps") or os.path.exists(f"{res}/rank{r}.steps.gz")]
for r in RANKS:
    path = f"{res}/rank{r}.steps"
    for line in step_lines(path):
        f = line.split()
        vals = [float(x) if x != "-" else None for x in f[1:]]
        steps.append((r, float(f[0]), float(f[1]), vals + [None] * (len(METRICS) - len(vals))))
rows = list(csv.DictReader(open(f"{res}/windows.tsv"), delimiter="\t"))
def q(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(p * len(v)))]
def launches(w):
    """Each rank's launches in the window (older files: launches0, launches1)."""
    if "launches" in w:
        return None if "-" in w["launches"] or not w["launches"] else [int(x) for x in w["launches"].split(",")]
    return None if w["launches0"] in ("-", "") else [int(w["launches0"]), int(w["launches1"])]


def per_step(w):
    ls = launches(w)
    if ls is None:
        return None
    out = []
    for k in RANKS:
        if w["u_on"] not in ("-", "") and "-" not in w["u_on"]:
            a, b = float(w["u_on"].split(",")[k]), float(w["u_off"].split(",")[k])
        else:
            a, b = float(w["c_on"]), float(w["c_off"])
        n = sum(1 for (r, t, _, _) in steps if r == k and a < t <= b)
        out.append(ls[k] / n if n else float("nan"))
    return out
win = []
extra = []  # per window, per metric: the steps' values
for w in rows:
    on, off = float(w["t_on"]), float(w["t_off"])
    ms = [m for (_, t, m, _) in steps if on <= t <= off]
    win.append((w, ms, per_step(w)))
    extra.append([[v[i] for (_, t, _, v) in steps if on <= t <= off and v[i] is not None and v[i] == v[i]] for i in range(len(METRICS))])
print(f"DDP step time per window ({len(RANKS)} ranks; budget windows from the first settled sampled period on)")
print(f"{'mode':<9}{'round':>6}{'steps':>7}{'median':>9}{'mean':>9}{'p10':>8}{'p90':>8}  launches/step")
for (w, ms, lps) in win:
    print(f"{w['mode']:<9}{w['round']:>6}{len(ms):>7}{st.median(ms):>9.2f}{st.mean(ms):>9.2f}{q(ms,.1):>8.2f}{q(ms,.9):>8.2f}  " + (" ".join(f"{v:.1f}" for v in lps) if lps else "-"))
print()
modes = list(dict.fromkeys(w["mode"] for w in rows))


def per_round(mode, values, centre=st.median):
    """Each round's ratio of `mode`'s median (or other centre) to the
    untraced window's; `values[i]`: window i's values."""
    by_round = {}
    for (w, _, _), v in zip(win, values):
        if v:
            by_round.setdefault(w["round"], {})[w["mode"]] = v
    return sorted(centre(v[mode]) / centre(v["untraced"]) for v in by_round.values() if mode in v and "untraced" in v)


for mode in modes:
    if mode == "untraced":
        continue
    rs = per_round(mode, [ms for (_, ms, _) in win])
    print(f"{mode}: per-round median ratio to untraced: median {st.median(rs):.4f} mean {st.mean(rs):.4f} (n={len(rs)}) all: " + " ".join(f"{x:.3f}" for x in rs))
    if len(rs) >= 3:
        lo, hi = interval(rs)
        print(f"{mode}: mean per-round slowdown {100*(st.mean(rs)-1):+.2f}%, 95% interval {100*(lo-1):+.2f}% to {100*(hi-1):+.2f}%")
    pooled = [m for (w, ms, _) in win if w["mode"] == mode for m in ms]
    base = [m for (w, ms, _) in win if w["mode"] == "untraced" for m in ms]
    print(f"{mode}: all steps pooled: median {st.median(pooled):.3f} vs untraced {st.median(base):.3f} ms ({100*(st.median(pooled)/st.median(base)-1):+.2f}%); mean {st.mean(pooled):.3f} vs {st.mean(base):.3f} ({100*(st.mean(pooled)/st.mean(base)-1):+.2f}%)")
print()
# The issuing threads' per-step measures (newer step files): the time to
# issue a step (until it waits for the GPU), their CPU time and, where the
# machine lends hardware counters, cycles and instructions.
for i in range(1, len(METRICS)):
    col = [e[i] for e in extra]
    if not any(col):
        continue
    # A thread that never sleeps has its CPU time read in whole clock
    # ticks (4 ms on the GPU host), so its per-step median takes only a
    # few values: the CPU time is compared by its mean.
    centre, name = (st.mean, "means") if METRICS[i] == "CPU ms" else (st.median, "medians")
    for mode in modes:
        if mode == "untraced":
            continue
        rs = per_round(mode, col, centre)
        if len(rs) >= 3:
            lo, hi = interval(rs)
            print(f"{METRICS[i]} per step, {mode}: per-round ratio mean {100*(st.mean(rs)-1):+.2f}% (95% interval {100*(lo-1):+.2f}% to {100*(hi-1):+.2f}%), median {100*(st.median(rs)-1):+.2f}%, n={len(rs)}")
    print(f"{METRICS[i]} per step, window {name}: " + " ".join(f"{w['mode'][0]}{centre(v):.4g}" for (w, _, _), v in zip(win, col) if v))
print()
ex = [v for (w, _, l) in win if w["mode"] == "exact" and l for v in l]
ref = st.median(ex) if ex else None
for mode in modes:
    v = [x for (w, _, l) in win if w["mode"] == mode and l for x in l]
    if v and mode != "exact":
        print(f"launches per step, {mode}: median {st.median(v):.1f} mean {st.mean(v):.1f}" + (f" vs exact {ref:.1f} ({100*(st.median(v)/ref-1):+.2f}% median, {100*(st.mean(v)/ref-1):+.2f}% mean)" if ref else "") + " all: " + " ".join(f"{x:.1f}" for x in v))
        if ref:
            e = [100 * (x / ref - 1) for x in v]
            print(f"launches per step, {mode}: each rank-window against exact: " + " ".join(f"{x:+.1f}%" for x in e) + f" (largest {max(map(abs, e)):.1f}%)")
print()
# The ranks' threads' time (/proc/PID/task/TID/stat, in 100 Hz ticks):
# uprobe traps and the eBPF programs run in the kernel, and these threads
# otherwise hardly enter it (they spin while the GPU works), so the rise of
# their kernel time is the probes' own cost to them, free of the step
# time's noise. "main": the main threads; "issuing": the main threads and
# PyTorch's autograd threads, which make most of the backward pass's calls
# (newer runs only).
hz = os.sysconf("SC_CLK_TCK")


def thread_share(col):
    """mode -> each rank-window's share (%) of `col`'s ticks over its time."""
    out = {}
    for w in rows:
        if w.get(f"{col}_a", "-") in ("-", "", None):
            continue
        dt = float(w["t_off"]) - float(w["t_on"])
        for a, b in zip(w[f"{col}_a"].split(","), w[f"{col}_b"].split(",")):
            out.setdefault(w["mode"], []).append(100 * (int(b) - int(a)) / hz / dt)
    return out


for col, label in (("msys", "main threads' kernel time"), ("isys", "issuing threads' kernel time"), ("iusr", "issuing threads' user time")):
    share = thread_share(col)
    if not share:
        continue
    print(f"{label}, % of one CPU (each rank-window): " + "; ".join(
        f"{m} median {st.median(v):.2f}% ({min(v):.2f}-{max(v):.2f}, n={len(v)})" for m, v in share.items()))
    if "untraced" in share:
        base = st.median(share["untraced"])
        print("  over untraced (medians): " + ", ".join(f"{m} {st.median(v) - base:+.2f}%" for m, v in share.items() if m != "untraced"))
# Time the machine's host took from its CPUs (/proc/stat steal), % of all.
try:
    ncpu = int(open(f"{res}/env.txt").read().split("\n")[2])
except (OSError, ValueError, IndexError):
    ncpu = None
steal = {}
for w in rows:
    if ncpu and w.get("steal_a", "-") not in ("-", "", None):
        dt = float(w["t_off"]) - float(w["t_on"])
        steal.setdefault(w["mode"], []).append(100 * (int(w["steal_b"]) - int(w["steal_a"])) / hz / dt / ncpu)
if steal:
    print("steal time, % of the machine's CPUs: " + "; ".join(f"{m} median {st.median(v):.2f}% (max {max(v):.2f})" for m, v in steal.items()))
# What a traced call cost the issuing threads where every call is traced
# (exact windows): their kernel time over the untraced windows' median,
# per call the daemon counted (calls of every API, both ranks' threads
# issuing them; other threads' calls are few).
base = thread_share("isys").get("untraced")
if base:
    for w in rows:
        if w["mode"] != "exact" or w.get("calls_on", "-") in ("-", "", None) or "-" in w["calls_on"]:
            continue
        dt = float(w["t_off"]) - float(w["t_on"])
        per = []
        for a, b, c0, c1 in zip(w["isys_a"].split(","), w["isys_b"].split(","), w["calls_on"].split(","), w["calls_off"].split(",")):
            extra_s = (int(b) - int(a)) / hz - st.median(base) / 100 * dt
            per.append(f"{extra_s / max(1, int(c1) - int(c0)) * 1e9:.0f} ns ({(int(c1) - int(c0)) / dt:.0f} calls/s)")
        print(f"exact round {w['round']}: the issuing threads' added kernel time per call traced: " + ", ".join(per))

# Each traced window's calls a second of every API, per rank (from the
# daemon's counters at the window's start and end; estimates where
# sampled): which APIs a job calls most, and so which always-traced ones
# set the budget's floor.
import re
pat = re.compile(r'^gputrace_api_calls_total\{api="([^"]*)",pid="(\d+)"[^}]*\} (\S+)', re.M)
for n, w in enumerate(rows, 1):
    on, off = f"{res}/apis.win{n}.on", f"{res}/apis.win{n}.off"
    if not (os.path.exists(on) and os.path.exists(off)):
        continue
    def read(path):
        return {(m.group(1), m.group(2)): float(m.group(3)) for m in pat.finditer(open(path).read())}
    a, b = read(on), read(off)
    dt = float(w["t_off"]) - float(w["t_on"])
    pids = sorted({p for (_, p) in b})
    rates = {}
    for (api, pid), v in b.items():
        rates.setdefault(api, {})[pid] = (v - a.get((api, pid), 0.0)) / dt
    top = sorted(rates.items(), key=lambda kv: -sum(kv[1].values()))
    print(f"window {n} ({w['mode']}, round {w['round']}, {dt:.0f} s): calls a second per rank (pids {' '.join(pids)})")
    for api, r in top[:25]:
        print(f"  {api:<32}" + "".join(f"{r.get(p, 0.0):>10.0f}" for p in pids))
