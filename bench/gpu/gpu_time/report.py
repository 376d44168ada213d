# The cost windows of run.sh: per window, the median step time of every
# rank (steps ending inside it, the first 2 s of each window skipped),
# and each mode against the untraced window of its round; torch.profiler's
# steps are those marked P.
#
#   report.py RESULTS_DIR
import glob, gzip, statistics, sys

d = sys.argv[1]
wins = [l.split() for l in open(f"{d}/windows.tsv") if l.strip()]
wins = [(n, float(t)) for n, t in wins]
steps = []
for f in sorted(glob.glob(f"{d}/rank*.steps.gz")):
    for line in gzip.open(f, "rt"):
        p = line.split()
        steps.append((float(p[0]), float(p[1]), len(p) > 6 and p[6] == "P"))
med = {}
for (name, start), (_, end) in zip(wins, wins[1:]):
    if name.startswith("profiler"):
        xs = [ms for t, ms, prof in steps if start <= t <= end and prof]
    else:
        xs = [ms for t, ms, prof in steps if start + 2 <= t <= end and not prof]
    if xs:
        med[name] = statistics.median(xs)
        print(f"{name:16} {len(xs):5} steps  median {med[name]:8.3f} ms")
print()
for name, m in med.items():
    if name.startswith("untraced"):
        continue
    rnd = name.rsplit("_", 1)[-1]
    base = med.get(f"untraced_{rnd}") or med.get("untraced_1")
    if name in ("cycles",) or name.startswith(("gpu_kernels", "gpu_no_api", "profiler")):
        # After the rounds: against the untraced window after the cycles,
        # and the last round's.
        base = med.get("untraced_after") or base
    if base:
        print(f"{name:16} {100 * (m - base) / base:+6.2f}% step time vs untraced")
if "cycles" in med and "untraced_after" in med and "untraced_1" in med:
    print(f"after 20 attach/detach cycles: {100 * (med['untraced_after'] - med['untraced_1']) / med['untraced_1']:+.2f}% vs the first untraced window")
