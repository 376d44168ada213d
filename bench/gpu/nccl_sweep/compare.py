# Puts gputrace's "Collectives by size" rows (summary JSON, per process)
# beside sweep.py's own timing of the same all-reduces, per rank and size.
#
#   compare.py RESULTS_DIR   (rank*.json and summary.json in it)
# Exit 1 when a size's calls differ from what ran or a row has no GPU time.
import glob, json, sys


def fill_gpu_us(p):
    """gputrace's GPU median of the overhead phase's fill kernels."""
    for k in ((p or {}).get("gpu") or {}).get("kernels", []):
        if "FillFunctor<float>" in k["name"] and k.get("med_ns"):
            return k["med_ns"] / 1e3
    return None

d = sys.argv[1]
summ = json.load(open(f"{d}/summary.json"))
procs = {p.get("pid"): p for p in summ.get("processes", [])}
bad = 0
print("prog µs: the per-op CUDA events' median; less ovh: less what such events add around a")
print("cross-stream op (their median around a fill kernel less its GPU time); busbw in GB/s")
print(f"{'rank':>4} {'size':>10} {'calls':>11} {'prog µs':>9} {'less ovh':>9} {'gputrace µs':>11} {'diff':>7} "
      f"{'diff-ovh':>8} {'prog busbw':>10} {'(less ovh)':>10} {'gputrace busbw (med)':>20} {'(mean)':>8} {'batch busbw':>11}")
for f in sorted(glob.glob(f"{d}/rank*.json")):
    r = json.load(open(f))
    factor = 2 * (r["world"] - 1) / r["world"]
    p = procs.get(r["pid"])
    rows = ((p or {}).get("collectives") or {}).get("rows", [])
    fill = fill_gpu_us(p)
    ovh = r["events_cross_stream_median_us"] - fill if fill is not None else 0.0
    print(f"rank {r['rank']}: events around the fill kernel {r['events_cross_stream_median_us']:.2f} µs, "
          f"its GPU time {fill if fill is not None else float('nan'):.2f} µs: the events add {ovh:.2f} µs")
    for s, m in sorted(r["sizes"].items(), key=lambda kv: int(kv[0])):
        s = int(s)
        row = next((x for x in rows if x["op"] == "AllReduce" and x["size_min"] == s), None)
        if row is None:
            print(f"{r['rank']:>4} {s:>10} no row"); bad += 1; continue
        g = row.get("gpu") or {}
        med = g.get("med_ns")
        calls = row["calls"]
        if calls != r["n"] or not med:
            bad += 1
        us = med / 1e3 if med else float("nan")
        bus_med = s / med * factor if med else float("nan")
        prog = m["per_op_median_us"]
        less = prog - ovh
        diff = 100 * (us - prog) / prog
        diff2 = 100 * (us - less) / less
        print(f"{r['rank']:>4} {s:>10} {calls:>5}/{r['n']:<5} {prog:>9.1f} {less:>9.1f} {us:>11.1f} {diff:>+6.1f}% "
              f"{diff2:>+7.1f}% {m['busbw_per_op_gbps']:>10.2f} {s / (less * 1e3) * factor:>10.2f} {bus_med:>20.2f} "
              f"{row['busbw_gbps'] or float('nan'):>8.2f} {m['busbw_batch_gbps']:>11.2f}")
sys.exit(1 if bad else 0)
