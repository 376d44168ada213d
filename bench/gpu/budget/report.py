# perf5 report: step time of the budget daemon's windows (from its first
# settled sampled period on) against the untraced windows; launch counts
# per step from the estimated-until gauge against the exact daemon.
import csv, gzip, os, statistics as st, sys
res = sys.argv[1]
steps = []
for r in (0, 1):
    path = f"{res}/rank{r}.steps"
    for line in (open(path) if os.path.exists(path) else gzip.open(path + ".gz", "rt")):
        t, ms = line.split()
        steps.append((r, float(t), float(ms)))
rows = list(csv.DictReader(open(f"{res}/windows.tsv"), delimiter="\t"))
def q(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(p * len(v)))]
def per_step(w):
    if w["launches0"] in ("-", ""):
        return None
    out = []
    for k in (0, 1):
        if w["u_on"] not in ("-", "") and "-" not in w["u_on"]:
            a, b = float(w["u_on"].split(",")[k]), float(w["u_off"].split(",")[k])
        else:
            a, b = float(w["c_on"]), float(w["c_off"])
        n = sum(1 for (r, t, _) in steps if r == k and a < t <= b)
        out.append(int(w[f"launches{k}"]) / n if n else float("nan"))
    return out
win = []
for w in rows:
    on, off = float(w["t_on"]), float(w["t_off"])
    ms = [m for (_, t, m) in steps if on <= t <= off]
    win.append((w, ms, per_step(w)))
print("DDP step time per window (both ranks; budget windows from the first settled sampled period on)")
print(f"{'mode':<9}{'round':>6}{'steps':>7}{'median':>9}{'mean':>9}{'p10':>8}{'p90':>8}  launches/step")
for (w, ms, lps) in win:
    print(f"{w['mode']:<9}{w['round']:>6}{len(ms):>7}{st.median(ms):>9.2f}{st.mean(ms):>9.2f}{q(ms,.1):>8.2f}{q(ms,.9):>8.2f}  " + (" ".join(f"{v:.1f}" for v in lps) if lps else "-"))
print()
modes = list(dict.fromkeys(w["mode"] for w in rows))
by_round = {}
for (w, ms, _) in win:
    by_round.setdefault(w["round"], {})[w["mode"]] = ms
for mode in modes:
    if mode == "untraced":
        continue
    rs = sorted(st.median(v[mode]) / st.median(v["untraced"]) for v in by_round.values() if mode in v and "untraced" in v)
    print(f"{mode}: per-round median ratio to untraced: median {st.median(rs):.4f} mean {st.mean(rs):.4f} (n={len(rs)}) all: " + " ".join(f"{x:.3f}" for x in rs))
    if len(rs) >= 3:
        # 95% interval of the mean per-round slowdown (Student's t).
        t95 = {2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086}
        df = len(rs) - 1
        t = t95.get(df) or t95[max(k for k in t95 if k <= df)]
        half = t * st.stdev(rs) / len(rs) ** 0.5
        print(f"{mode}: mean per-round slowdown {100*(st.mean(rs)-1):+.2f}%, 95% interval {100*(st.mean(rs)-half-1):+.2f}% to {100*(st.mean(rs)+half-1):+.2f}%")
    pooled = [m for (w, ms, _) in win if w["mode"] == mode for m in ms]
    base = [m for (w, ms, _) in win if w["mode"] == "untraced" for m in ms]
    print(f"{mode}: all steps pooled: median {st.median(pooled):.3f} vs untraced {st.median(base):.3f} ms ({100*(st.median(pooled)/st.median(base)-1):+.2f}%); mean {st.mean(pooled):.3f} vs {st.mean(base):.3f} ({100*(st.mean(pooled)/st.mean(base)-1):+.2f}%)")
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
# The ranks' main threads' kernel time (/proc/PID/task/PID/stat stime, in
# 100 Hz ticks): uprobe traps and the eBPF programs run there, and these
# threads otherwise hardly enter the kernel (they spin while the GPU works),
# so its rise is the probes' own cost to the thread, free of the step
# time's noise. (The autograd thread, which makes most of the backward
# pass's calls, is not read.)
hz = os.sysconf("SC_CLK_TCK")
share = {}
for w in rows:
    if w.get("msys_a", "-") in ("-", ""):
        continue
    dt = float(w["t_off"]) - float(w["t_on"])
    for a, b in zip(w["msys_a"].split(","), w["msys_b"].split(",")):
        share.setdefault(w["mode"], []).append(100 * (int(b) - int(a)) / hz / dt)
if share:
    print("main threads' kernel time, % of their time (each rank-window): " + "; ".join(
        f"{m} median {st.median(v):.2f}% ({min(v):.2f}-{max(v):.2f}, n={len(v)})" for m, v in share.items()))
    if "untraced" in share:
        base = st.median(share["untraced"])
        print("  over untraced (medians): " + ", ".join(f"{m} {st.median(v) - base:+.2f}%" for m, v in share.items() if m != "untraced"))
