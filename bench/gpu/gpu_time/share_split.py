# The sampled windows of share_cost.sh (SPLIT=1) cut by what CUPTI did:
# in each window's JSONL, the launches that have a GPU record show when
# the agent collected (CUPTI on); every step is then "on" (all of it
# between the first and last recorded launch of one stretch), "off" (no
# recorded launch within MARGIN of it) or mixed (left out). Steps on and
# off alternate within every second of one window, so their difference is
# what collecting costs a step, free of the drift between windows; the
# steps off, against the round's untraced and budget windows, are what the
# agent costs while it is attached and off.
#
#   share_split.py RESULTS_DIR MODE_ROUND.jsonl...
#   (RESULTS_DIR: windows.tsv, rank*.steps.gz, rank*.pid)
import glob, gzip, json, os, re, statistics, sys

GAP_NS = 60_000_000  # launches further apart than this: two stretches
MARGIN_NS = 60_000_000
SKIP_NS = 1_000_000_000  # the attach's first second

d = sys.argv[1]
rank_of = {int(open(f).read()): int(re.search(r"rank(\d+)", f).group(1))
           for f in glob.glob(f"{d}/rank*.pid")}
ns = lambda t: round(t * 1e9)  # the step lines' wall clock, as gputrace's ts_ns
steps = {}
for f in glob.glob(f"{d}/rank*.steps.gz"):
    r = int(re.search(r"rank(\d+)", f).group(1))
    xs = []
    for line in gzip.open(f, "rt"):
        p = line.split()
        if len(p) > 6 and p[6] == "P":
            continue
        end = ns(float(p[0]))
        ms = float(p[1])
        xs.append((end - round(ms * 1e6), end, ms))
    steps[r] = xs


def window_medians():
    """report.py's medians per window (steps ending in it, first 2 s skipped)."""
    wins = [(n, float(t)) for n, t in (l.split() for l in open(f"{d}/windows.tsv") if l.strip())]
    out = {}
    for (name, a), (_, b) in zip(wins, wins[1:]):
        xs = []
        for r, ss in steps.items():
            lo, hi = ns(a + 2), ns(b)
            xs += [ms for s, e, ms in ss if lo <= e <= hi]
        if xs:
            out[name] = statistics.median(xs)
    return out


def stretches(ts):
    ts.sort()
    out = []
    for t in ts:
        if out and t - out[-1][1] <= GAP_NS:
            out[-1][1] = t
        else:
            out.append([t, t])
    return out


wmed = window_medians()
pooled = {}
print(f"{'window':14} {'rank':>4} {'on':>5} {'on ms':>8} {'off':>5} {'off ms':>8} {'on vs off':>9} "
      f"{'CUPTI on':>8} {'off vs untraced':>15} {'off vs budget':>13}")
for path in sorted(sys.argv[2:]):
    name = os.path.basename(path).removesuffix(".jsonl")
    mode, rnd = name.rsplit("_", 1)
    launches, span = {}, {}
    with open(path) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            e = json.loads(line)
            pid, ts = e.get("pid"), e.get("ts_ns")
            if pid in rank_of and isinstance(ts, int):
                lo, hi = span.get(pid, (ts, ts))
                span[pid] = (min(lo, ts), max(hi, ts))
            if e.get("type") == "gpu" and e.get("launch") and pid in rank_of:
                launches.setdefault(pid, []).append(e["launch"]["api_ts_ns"])
    for pid, ts in sorted(launches.items()):
        r = rank_of[pid]
        st = stretches(ts)
        lo, hi = span[pid]
        on, off = [], []
        for s, e, ms in steps[r]:
            if s < lo + SKIP_NS or e > hi:
                continue
            if any(a <= s and e <= b for a, b in st):
                on.append(ms)
            elif not any(s < b + MARGIN_NS and a - MARGIN_NS < e for a, b in st):
                off.append(ms)
        collected = sum(b - a for a, b in st if b > lo + SKIP_NS) / max(1, hi - lo - SKIP_NS)
        pooled.setdefault(mode, ([], [], []))
        pooled[mode][0].extend(on)
        pooled[mode][1].extend(off)
        if not on or not off:
            print(f"{name:14} {r:>4} {len(on):>5} {'-':>8} {len(off):>5}")
            continue
        mon, moff = statistics.median(on), statistics.median(off)
        pooled[mode][2].append(100 * (mon - moff) / moff)
        un, bu = wmed.get(f"untraced_{rnd}"), wmed.get(f"budget_{rnd}")
        vs = lambda base: f"{100 * (moff - base) / base:+.2f}%" if base else "-"
        print(f"{name:14} {r:>4} {len(on):>5} {mon:>8.3f} {len(off):>5} {moff:>8.3f} "
              f"{100 * (mon - moff) / moff:>+8.2f}% {100 * collected:>7.1f}% {vs(un):>15} {vs(bu):>13}")
print()
for mode, (on, off, diffs) in pooled.items():
    if on and off:
        mon, moff = statistics.median(on), statistics.median(off)
        print(f"{mode}: pooled {len(on)} steps on, median {mon:.3f} ms; {len(off)} off, {moff:.3f} ms: "
              f"collecting costs a step {100 * (mon - moff) / moff:+.2f}% "
              f"(median of the windows' own: {statistics.median(diffs):+.2f}%)")
