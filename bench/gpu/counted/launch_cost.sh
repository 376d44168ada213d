#!/bin/bash
# Host cost of one cuLaunchKernel on the real driver (launch_bench.c: an
# empty kernel, median of 20,000 calls a round), rounds interleaved:
# untraced, a bare uprobe+uretprobe, gputrace --pid (a record per call),
# daemon launch:counts (one call in 16 timed) and the same with every call
# timed (--counts-time-every 1). After each daemon round its metrics give
# the calls counted and those timed.
#   NEW=path/to/gputrace bash bench/gpu/counted/launch_cost.sh   (results in $OUT/launch-cost)
set -u
D=$(cd "$(dirname "$0")/.." && pwd)
R=${OUT:-/tmp/out}/launch-cost; rm -rf "$R"; mkdir -p "$R"
NEW=$(readlink -f "${NEW:-gputrace}")
LIBCUDA=$(ls /usr/local/nvidia/lib64/libcuda.so.5* 2>/dev/null | head -1)
[ -n "$LIBCUDA" ] || LIBCUDA=$(ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}')
ROUNDS=${ROUNDS:-3} PORT=19466
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
w() { for i in $(seq 1200); do [ -f "$1" ] && return 0; sleep 0.05; done; echo "timeout $1"; }
gcc -O2 -o "$W/launch_bench" "$D/launch_bench.c" -I/usr/local/cuda/include -L/usr/local/cuda/lib64/stubs -lcuda || exit 1
MODES=(none bare_ret gputrace counts counts_every)
N=$((ROUNDS * ${#MODES[@]}))
"$W/launch_bench" "$W/lb" $N > "$R/launch_bench.txt" 2>&1 &
LB=$!
for r in $(seq 0 $((N - 1))); do
  w "$W/lb.ready.$r"
  P=$(head -1 "$R/launch_bench.txt" | cut -d' ' -f2)
  m=${MODES[$((r % ${#MODES[@]}))]}
  TP=
  case $m in
    bare_ret) "$NEW" __bare --library "$LIBCUDA" --symbols cuLaunchKernel --pid $P --ret >> "$R/tracers.txt" 2>&1 & TP=$!; sleep 1 ;;
    gputrace) "$NEW" --pid $P --output "$W/t.jsonl" --summary none 2>> "$R/tracers.txt" & TP=$!; sleep 2 ;;
    counts|counts_every)
      every=16; [ $m = counts_every ] && every=1
      "$NEW" daemon --listen 127.0.0.1:$PORT --overhead-budget 0 --probes launch:counts --counts-time-every $every 2> "$W/d.err" & TP=$!
      for i in $(seq 100); do grep -q "attached [1-9].*libcuda" "$W/d.err" && break; sleep 0.1; done ;;
  esac
  echo "round $r $m" >> "$R/modes.txt"
  touch "$W/lb.go.$r"; w "$W/lb.done.$r"
  if [ "${m#counts}" != "$m" ]; then
    sleep 1.5
    python3 - $PORT $P $m $r <<'PY' >> "$R/counted.txt"
import sys, urllib.request
port, pid, mode, r = sys.argv[1:5]
body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
v = {}
for l in body.splitlines():
    if 'api="cuLaunchKernel"' in l and f'pid="{pid}"' in l:
        v[l.split("{")[0]] = float(l.rsplit(" ", 1)[1])
calls = v.get("gputrace_api_calls_total", 0)
timed = v.get("gputrace_api_duration_seconds_count", 0)
s = v.get("gputrace_api_duration_seconds_sum", 0)
print(f"round {r} {mode} calls {calls:.0f} timed {timed:.0f} mean_us {1e6 * s / max(timed, 1):.2f}")
PY
    cat "$W/d.err" >> "$R/tracers.txt"
  fi
  [ -n "$TP" ] && { kill -INT $TP; wait $TP; }
done
wait $LB
paste -d' ' "$R/modes.txt" <(grep round "$R/launch_bench.txt") | tee "$R/rounds.txt"
cat "$R/counted.txt"
python3 - "$R/rounds.txt" <<'PY' | tee "$R/report.txt"
import sys, statistics
by = {}
for l in open(sys.argv[1]):
    f = l.split()
    by.setdefault(f[2], []).append(float(f[f.index("median_ns") + 1]))
base = statistics.median(by.get("bare_ret", [float("nan")]))
for m, xs in by.items():
    med = statistics.median(xs)
    print(f"{m:14s} median {med / 1000:.2f} us  rounds {' '.join(f'{x / 1000:.2f}' for x in xs)}  vs bare pair {med / base:.3f}")
PY
