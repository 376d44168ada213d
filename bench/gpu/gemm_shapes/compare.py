# "GEMMs by shape" of a gputrace summary (JSON) against job.py's phases:
# per phase, the shape's calls against the ops run, its GPU median against
# the CUDA events' median, and TFLOP/s both ways. A pair of events around a
# kernel also times the GPU's start of that kernel: the `empty_kernel`
# phase measures it (its events' median minus its kernel's GPU median), and
# `diff-ovh` compares after taking it off the events. Exits 1 when a count
# differs or that difference is over 5%.
#
#   compare.py PHASES.json SUMMARY.json
import json, statistics, sys

phases = json.load(open(sys.argv[1]))
summary = json.load(open(sys.argv[2]))
rows = [r for p in summary["processes"] if p.get("gemms") for r in p["gemms"]["shapes"]]
kernels = [k for p in summary["processes"] if p.get("gpu") for k in p["gpu"]["kernels"]]
empty = phases.pop("empty_kernel")
spin = [k for k in kernels if "sleep" in (k["name"] or "") or "spin" in (k["name"] or "")]
ovh = statistics.median(empty["ms"]) * 1e6 - (spin[0]["med_ns"] if spin else 0)
print(f"events around an empty kernel: median {statistics.median(empty['ms'])*1e3:.2f} us, its kernel {(spin[0]['med_ns'] if spin else float('nan'))/1e3:.2f} us on the GPU ({spin[0]['name'] if spin else 'not found'}): {ovh/1e3:.2f} us added by the events")
bad = 0
print(f"{'phase':<12} {'shape b×m×n×k':<22} {'ran':>5} {'traced':>6} {'events med':>11} {'gputrace med':>13} {'diff':>7} {'diff-ovh':>8} {'TFLOP/s ev':>10} {'TFLOP/s gt':>10}  kernels")
for name, p in phases.items():
    b, m, n, k = p["shape"]
    match = [r for r in rows if (r["batch"], r["m"], r["n"], r["k"], r["a_type"]) == (b, m, n, k, p["dtype"])]
    ev = statistics.median(p["ms"]) * 1e6
    flops = 2.0 * b * m * n * k
    if not match:
        print(f"{name:<12} {b}×{m}×{n}×{k}: NOT FOUND")
        bad = 1
        continue
    r = match[0]
    med = (r["gpu"] or {}).get("med_ns")
    diff = (med - ev) / ev * 100 if med else float("nan")
    diff2 = (med - (ev - ovh)) / (ev - ovh) * 100 if med else float("nan")
    if r["calls"] != p["n"] or not med or abs(diff2) > 5:
        bad = 1
    ks = ", ".join(f"{(kk['name'] or '(name not known)')[:60]} ×{kk['launches']}" for kk in r["kernels"])
    print(f"{name:<12} {r['transa']},{r['transb']} {b}×{m}×{n}×{k:<8} {p['n']:>5} {r['calls']:>6} {ev/1e3:>9.1f}us {(med or 0)/1e3:>11.1f}us {diff:>6.2f}% {diff2:>7.2f}% {flops/ev/1e3:>10.1f} {(r['tflops'] or 0):>10.1f}  {r['a_type']}->{r['c_type']} {r['compute']}; {ks}")
print("lt_without_shape:", [p["gemms"]["lt_without_shape"] for p in summary["processes"] if p.get("gemms")])
sys.exit(bad)
