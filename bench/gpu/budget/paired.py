# paired.sh's report: per round, the traced job's step time over its twin's
# in the traced window, over the same ratio in the window before with
# neither traced; the mean of those round ratios with a 95% interval
# (Student's t); the same for the time to issue a step and the issuing
# threads' CPU time per step; and the traced process's kernel and user
# time against its twin's in the same window.
import csv, os, statistics as st, sys
from benchlib import interval, step_lines

res = sys.argv[1]
METRICS = ["step ms", "issue ms", "CPU ms"]


def read_steps(job):
    out = []
    path = f"{res}/{job}.steps"
    for line in step_lines(path):
        f = line.split()
        out.append((float(f[0]), [float(x) for x in f[1:4]]))
    return out


steps = {j: read_steps(j) for j in "AB"}
rows = list(csv.DictReader(open(f"{res}/windows.tsv"), delimiter="\t"))
hz = os.sysconf("SC_CLK_TCK")


def med(job, w, i):
    """Job's median of metric i over window w; the CPU time's mean: a
    thread that never sleeps has its CPU time read in whole clock ticks
    (4 ms here), so its per-step median only takes a few values."""
    on, off = float(w["t_on"]), float(w["t_off"])
    v = [m[i] for (t, m) in steps[job] if on <= t <= off and m[i] == m[i]]
    return (st.mean(v) if METRICS[i] == "CPU ms" else st.median(v)) if v else None


def share(w, job, k):
    """Job's user (k=0) or kernel (k=1) time in window w, % of one CPU."""
    a, b = w[f"{job.lower()}_a"].split(","), w[f"{job.lower()}_b"].split(",")
    return 100 * (int(b[k]) - int(a[k])) / hz / (float(w["t_off"]) - float(w["t_on"]))


by_round = {}
for w in rows:
    by_round.setdefault(w["round"], {})["none" if w["traced"] == "-" else "traced"] = w
print("round traced  neither: A ms  B ms   traced: A ms  B ms   traced/twin over the same with neither")
rounds = []
for r, p in sorted(by_round.items(), key=lambda kv: int(kv[0])):
    if "none" not in p or "traced" not in p:
        continue
    t = p["traced"]["traced"]
    u = "B" if t == "A" else "A"
    ratios = []
    for i in range(len(METRICS)):
        vals = [med(j, p[k], i) for k in ("none", "traced") for j in (t, u)]
        ratios.append(None if None in vals else (vals[2] / vals[3]) / (vals[0] / vals[1]))
    n, tr = p["none"], p["traced"]
    print(f"{r:>5} {t:>6}  {med('A', n, 0):>13.2f} {med('B', n, 0):>5.2f}  {med('A', tr, 0):>13.2f} {med('B', tr, 0):>5.2f}   {100 * (ratios[0] - 1):+.2f}%")
    rounds.append((t, u, n, tr, ratios))
print()
for i, name in enumerate(METRICS):
    rs = [x[4][i] for x in rounds if x[4][i] is not None]
    if len(rs) < 3:
        continue
    lo, hi = interval(rs)
    print(f"{name} per step, traced over twin: mean {100 * (st.mean(rs) - 1):+.2f}% (95% interval {100 * (lo - 1):+.2f}% to {100 * (hi - 1):+.2f}%), median {100 * (st.median(rs) - 1):+.2f}%, n={len(rs)}; "
          + "rounds: " + " ".join(f"{100 * (x - 1):+.1f}" for x in rs))
# Without the pair: the traced windows' step time against the windows
# with neither traced, each job against itself (what run.sh measures).
solo = [med(t, tr, 0) / med(t, n, 0) for (t, _, n, tr, _) in rounds]
if len(solo) >= 3:
    lo, hi = interval(solo)
    print(f"step ms, traced window over the window before (no twin): mean {100 * (st.mean(solo) - 1):+.2f}% (95% interval {100 * (lo - 1):+.2f}% to {100 * (hi - 1):+.2f}%)")
print()
for k, label in ((1, "kernel"), (0, "user")):
    d = [share(tr, t, k) - share(tr, u, k) for (t, u, _, tr, _) in rounds]
    d0 = [share(n, t, k) - share(n, u, k) for (t, u, n, _, _) in rounds]
    x = [a - b for a, b in zip(d, d0)]
    if x:
        print(f"{label} time, % of one CPU (whole processes), traced minus twin, less the same with neither traced: "
              f"median {st.median(x):+.2f}% ({min(x):+.2f} to {max(x):+.2f}, n={len(x)})")
