#!/bin/bash
# The DDP overhead benchmark of issue 13: torchrun, 2 ranks of ddp_bench.py
# (GPT-2 small shape, bf16, batch 8x512), and windows interleaved over
# rounds: untraced; `gputrace --pid` both ranks (every family); the same
# with `--probes launch:args,...` (no return probe on launches);
# `gputrace daemon`; and `daemon --overhead-budget 1` when the binary has
# it. MODES="untraced daemon_exact daemon_counts" (any of these, and
# daemon_exact: --overhead-budget 0; daemon_counts: the same with the busy
# calls counted in the kernel) picks the windows. Prints per-window step-time medians and spread, each mode's ratio to
# the untraced windows, launches per step exported by the daemon against
# the traced-in-full windows, and bytes per event of the timeline formats
# (the traced windows rotate .jsonl / .jsonl.zst / .pftrace).
#
#   ddp_bench.sh GPUTRACE [--window S] [--rounds N] [--out DIR] [--dry [--sim DIR]]
#
# GPUTRACE: a built gputrace binary (no cargo needed). Results go to
# --out (default $OUT/ddp_bench when $OUT is set, else /tmp/ddp_bench):
# report.txt, windows.tsv, the ranks' step files, ddp.pftrace (3 s of the
# job, for Perfetto UI). About 6 minutes with the defaults on 2 H200s.
# --dry: no GPU: two processes of ddp_bench.py --dry calling the simulated
# libcuda (tests/sim, built into target/sim by `cargo xtask sim`) stand in
# for the ranks; for checking this script on a CPU machine (as root).
set -u
B=$(readlink -f "${1:?usage: ddp_bench.sh GPUTRACE [--window S] [--rounds N] [--out DIR] [--dry [--sim DIR]]}")
shift
WINDOW=12 ROUNDS=3 DRY=0 SIM="" RES="${OUT:+$OUT/ddp_bench}"
RES=${RES:-/tmp/ddp_bench}
while [ $# -gt 0 ]; do
  case $1 in
    --window) WINDOW=$2; shift;;
    --rounds) ROUNDS=$2; shift;;
    --out) RES=$2; shift;;
    --dry) DRY=1;;
    --sim) SIM=$2; shift;;
    *) echo "ddp_bench.sh: unknown argument $1" >&2; exit 2;;
  esac
  shift
done
[ -x "$B" ] || { echo "ddp_bench.sh: $B is not an executable gputrace" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 GPUTRACE_CACHE_DIR=${GPUTRACE_CACHE_DIR:-/tmp/gtcache}
W=$(mktemp -d /tmp/ddp_bench.XXXXXX)
mkdir -p "$RES"
PORT=$((19000 + $$ % 1000))
JOB="" TP=""
cleanup() {
  [ -n "$TP" ] && kill -INT $TP 2>/dev/null
  touch "$W/stop"
  sleep 2
  [ -n "$JOB" ] && kill $JOB 2>/dev/null
  wait 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
trap "exit 1" INT TERM

# --- the job ---
if [ $DRY = 1 ]; then
  if [ -z "$SIM" ]; then
    for d in "$(dirname "$B")/sim" "$(dirname "$B")/../sim"; do [ -f "$d/libcuda.so.1" ] && SIM=$d && break; done
  fi
  [ -f "$SIM/libcuda.so.1" ] || { echo "ddp_bench.sh: --dry needs the simulated libcuda: --sim DIR (cargo xtask sim builds target/sim)" >&2; exit 2; }
  export GPUTRACE_SIM=$(readlink -f "$SIM")
  for r in 0 1; do $PY "$HERE/ddp_bench.py" --dry --rank $r --dir "$W" --warmup 5 > "$W/rank$r.log" 2>&1 & JOB="$JOB $!"; done
else
  $PY -m torch.distributed.run --standalone --nproc_per_node=2 "$HERE/ddp_bench.py" --dir "$W" > "$W/job.log" 2>&1 & JOB=$!
fi
for i in $(seq 1200); do [ -f "$W/rank0.ready" ] && [ -f "$W/rank1.ready" ] && break; sleep 0.25; done
[ -f "$W/rank0.ready" ] && [ -f "$W/rank1.ready" ] || { echo "the ranks did not start:"; tail -20 "$W"/*.log; exit 1; }
P0=$(cat "$W/rank0.pid") P1=$(cat "$W/rank1.pid")
echo "ranks: $P0 $P1 ($(date +%T)); window ${WINDOW}s, $ROUNDS rounds"

if [ -z "${MODES:-}" ]; then
  MODES="untraced pid pid_args daemon"
  "$B" daemon --help 2>&1 | grep -q -- --overhead-budget && MODES="$MODES daemon_budget"
fi
ARGS_PROBES="launch:args,memory,memcpy,sync,names,nccl"
FORMATS=(jsonl jsonl.zst pftrace)
now() { date +%s.%N; }
launches_metrics() { # -> "r0 r1 when": cuLaunchKernel* calls exported for the two pids, and when
  $PY - "$PORT" "$P0" "$P1" <<'PYEOF'
import re, sys, time, urllib.request
port, pids = sys.argv[1], sys.argv[2:]
try:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    when = time.time()
except Exception:
    print("- - -"); sys.exit()
n = {p: 0.0 for p in pids}
for m in re.finditer(r'^gputrace_api_calls_total\{api="(cuLaunchKernel[^"]*)",pid="(\d+)"[^}]*\} (\S+)', body, re.M):
    if m.group(2) in n:
        n[m.group(2)] += float(m.group(3))
print(" ".join(str(int(n[p])) if n[p] else "-" for p in pids), f"{when:.6f}")
PYEOF
}
wait_attached() { # file -> 0 once gputrace said it attached
  for i in $(seq 600); do grep -q "gputrace: attached" "$1" 2>/dev/null && return 0; kill -0 $TP 2>/dev/null || return 1; sleep 0.1; done; return 1
}

# t_on/t_off: the window for step times; c_on/c_off: the span the launch
# counts cover (a traced window: its first and last call; the daemon: the
# two scrapes), for launches per step.
printf "mode\tround\tt_on\tt_off\tlaunches0\tlaunches1\tc_on\tc_off\tformat\tbytes\tevents\tstats\n" > "$RES/windows.tsv"
n=0
for r in $(seq 0 $((ROUNDS - 1))); do
  for m in $MODES; do
    n=$((n + 1))
    fmt=${FORMATS[$((r % 3))]}
    L0=- L1=- bytes=- events=- stats=- f=- c_on=- c_off=-
    case $m in
      untraced)
        t_on=$(now); sleep $WINDOW; t_off=$(now);;
      pid|pid_args)
        f="$W/win$n.$fmt"
        probes=(); [ $m = pid_args ] && probes=(--probes $ARGS_PROBES)
        "$B" --pid $P0 --pid $P1 "${probes[@]}" --output "$f" --summary json > "$W/win$n.json" 2> "$W/win$n.err" & TP=$!
        wait_attached "$W/win$n.err" || { echo "window $n: gputrace did not attach:"; cat "$W/win$n.err"; TP=""; continue; }
        t_on=$(now); sleep $WINDOW; t_off=$(now)
        kill -INT $TP; wait $TP; TP=""
        read L0 L1 events c_on c_off < <($PY - "$W/win$n.json" $P0 $P1 <<'PYEOF'
import json, sys
s = json.load(open(sys.argv[1]))
n = {p["pid"]: sum(a["calls"] for a in p["apis"] if a["name"].startswith("cuLaunchKernel")) for p in s["processes"]}
span = {p["pid"]: (p["first_ts_ns"] / 1e9, p["last_ts_ns"] / 1e9) for p in s["processes"]}
a, b = (span.get(int(p), (0, 0)) for p in sys.argv[2:4])
print(n.get(int(sys.argv[2]), "-"), n.get(int(sys.argv[3]), "-"), s["events"], f"{a[0]:.6f},{b[0]:.6f}", f"{a[1]:.6f},{b[1]:.6f}")
PYEOF
)
        bytes=$(stat -c %s "$f")
        if [ $m = pid ]; then
          # gputrace stats must read the file back to the same event count.
          s_events=$("$B" stats "$f" --format json 2> "$W/win$n.stats.err" | $PY -c "import json,sys; print(json.load(sys.stdin)['events'])" 2>/dev/null)
          stats=$([ "$s_events" = "$events" ] && echo same || echo "DIFFERS:$s_events")
        fi
        rm -f "$f"; f=$fmt;;
      daemon|daemon_budget|daemon_exact|daemon_counts)
        case $m in
          daemon) extra=() ;;
          daemon_budget) extra=(--overhead-budget 1) ;;
          daemon_exact) extra=(--overhead-budget 0) ;;
          daemon_counts) extra=(--overhead-budget 0 --probes "launch:counts,memory,memcpy,sync:counts,names,runtime,nccl,graphs:counts,blas") ;;
        esac
        "$B" daemon --listen 127.0.0.1:$PORT "${extra[@]}" > "$W/win$n.out" 2> "$W/win$n.err" & TP=$!
        for i in $(seq 300); do read a b w < <(launches_metrics); [ "$a" != - ] && [ "$b" != - ] && break; sleep 0.2; done
        read a0 b0 c_on < <(launches_metrics)
        t_on=$(now); sleep $WINDOW; t_off=$(now)
        read a1 b1 c_off < <(launches_metrics)
        kill -TERM $TP; wait $TP; TP=""
        if [ "$a0" != - ] && [ "$a1" != - ]; then L0=$((a1 - a0)) L1=$((b1 - b0)); fi;;
    esac
    printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" $m $r $t_on $t_off $L0 $L1 $c_on $c_off $f $bytes $events $stats >> "$RES/windows.tsv"
    echo "$(date +%T) round $r $m done"
  done
done

# A short trace for Perfetto UI (and bench/perfetto/check_trace.py).
"$B" --pid $P0 --pid $P1 --duration 3s --output "$RES/ddp.pftrace" --summary none 2> "$W/pftrace.err"
"$B" stats "$RES/ddp.pftrace" > "$RES/ddp_pftrace_stats.txt" 2>&1 || echo "gputrace stats on ddp.pftrace failed: $(tail -1 "$RES/ddp_pftrace_stats.txt")"
cp "$W"/rank*.steps "$RES/"

$PY - "$RES" <<'PYEOF' | tee "$RES/report.txt"
import csv, statistics as st, sys
res = sys.argv[1]
steps = []
for r in (0, 1):
    for line in open(f"{res}/rank{r}.steps"):
        t, ms = line.split()[:2]
        steps.append((r, float(t), float(ms)))
rows = list(csv.DictReader(open(f"{res}/windows.tsv"), delimiter="\t"))
SETTLE = 1.0  # seconds after attach before steps count
def q(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(p * len(v)))]
win = []
for w in rows:
    on, off = float(w["t_on"]), float(w["t_off"])
    ms = [m for (_, t, m) in steps if on + SETTLE <= t <= off]
    # Steps that ended inside the span the launch counts cover (per rank
    # for a traced window: its first and last call in that process).
    def span(k):
        if w["c_on"] in ("-", ""):
            return on, off
        a, b = w["c_on"].split(","), w["c_off"].split(",")
        return float(a[min(k, len(a) - 1)]), float(b[min(k, len(b) - 1)])
    per_rank = [sum(1 for (r, t, _) in steps if r == k and span(k)[0] <= t <= span(k)[1]) for k in (0, 1)]
    win.append((w, ms, per_rank))
base = [st.median(ms) for (w, ms, _) in win if w["mode"] == "untraced" and ms]
ref = st.median(base) if base else float("nan")
print(f"DDP step time per window (both ranks, steps ending >= {SETTLE:.0f} s after attach)")
print(f"{'mode':<14}{'round':>6}{'steps':>7}{'median ms':>11}{'p10':>9}{'p90':>9}{'ratio':>8}")
for (w, ms, _) in win:
    if not ms:
        print(f"{w['mode']:<14}{w['round']:>6}     0"); continue
    print(f"{w['mode']:<14}{w['round']:>6}{len(ms):>7}{st.median(ms):>11.2f}{q(ms, .1):>9.2f}{q(ms, .9):>9.2f}{st.median(ms) / ref:>8.3f}")
print()
print(f"{'mode':<14}{'windows':>8}{'median of medians':>19}{'spread (min-max)':>22}{'ratio':>8}")
for mode in dict.fromkeys(w["mode"] for w in rows):
    meds = [st.median(ms) for (w, ms, _) in win if w["mode"] == mode and ms]
    if meds:
        print(f"{mode:<14}{len(meds):>8}{st.median(meds):>19.2f}{min(meds):>11.2f} - {max(meds):<8.2f}{st.median(meds) / ref:>8.3f}")
print()
print("launches per step and rank (traced window: gputrace's summary; daemon: /metrics delta over the window)")
full, exact_daemon = [], []
for (w, ms, per_rank) in win:
    if w["launches0"] in ("-", "") or w["mode"] == "untraced":
        continue
    lps = [int(w[f"launches{k}"]) / per_rank[k] for k in (0, 1) if per_rank[k]]
    if w["mode"] == "pid":
        full += lps
    elif w["mode"] == "daemon_exact":
        exact_daemon += lps
    print(f"  {w['mode']:<14} round {w['round']}: " + "  ".join(f"rank{k} {v:.1f}" for k, v in enumerate(lps)))
full = full or exact_daemon
if full:
    exact = st.median(full)
    for mode in ("daemon", "daemon_budget", "daemon_counts"):
        v = [int(w[f"launches{k}"]) / pr[k] for (w, _, pr) in win if w["mode"] == mode and w["launches0"] not in ("-", "") for k in (0, 1) if pr[k]]
        if v:
            print(f"  {mode}: {st.median(v):.1f} per step against {exact:.1f} traced in full ({100 * (st.median(v) / exact - 1):+.2f}%)")
print()
print("timeline formats (traced windows, both ranks)")
for w in rows:
    if w["mode"] in ("pid", "pid_args") and w["bytes"] not in ("-", ""):
        ev = int(w["events"])
        print(f"  {w['mode']:<9} round {w['round']} .{w['format']:<10} {int(w['bytes']) / 1e6:9.1f} MB {ev:>9} events {int(w['bytes']) / max(ev, 1):7.1f} B/event  stats: {w['stats']}")
PYEOF
