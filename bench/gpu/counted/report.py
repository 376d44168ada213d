# counted/run.sh's report: per window, steps per second and the calls per
# step the daemon counted.
import csv, sys
res = sys.argv[1]
steps = [tuple(map(float, l.split())) for l in open(f"{res}/steps") if len(l.split()) == 2]
def rate(t0, t1):
    v = [(t, s) for (t, s) in steps if t0 <= t <= t1]
    if len(v) < 2:
        return None, None
    return (v[-1][1] - v[0][1]) / (v[-1][0] - v[0][0]), (t0, t1)
print("window mode    steps/s  cuLaunchKernel/step  cuEventRecordWithFlags/step  cuStreamWaitEvent/step")
for w in csv.DictReader(open(f"{res}/windows.tsv"), delimiter="\t"):
    t0, t1 = float(w["t_on"]), float(w["t_off"])
    r, _ = rate(t0, t1)
    per = ""
    if w["calls_on"] != "-" and r:
        a = [float(x) for x in w["calls_on"].split(",")]
        b = [float(x) for x in w["calls_off"].split(",")]
        n = r * (t1 - t0)
        per = "  ".join(f"{(y - x) / n:18.2f}" for x, y in zip(a, b))
    print(f"{w['window']:>6} {w['mode']:<7} {r or 0:8.1f}  {per}")
