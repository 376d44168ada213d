#!/bin/bash
# Calls counted in the kernel (`daemon --probes FAMILY:counts`) on a real
# libcuda: a PyTorch loop (job.py) runs; windows of W s follow one another:
# untraced, the exact daemon (--overhead-budget 0, every call recorded),
# the daemon with launch:counts,sync:counts,graphs:counts, twice. Each
# daemon starts SETTLE s before its window. Per window: steps per second and,
# from the daemon's metrics at the window's ends, cuLaunchKernel,
# cuEventRecordWithFlags and cuStreamWaitEvent per step (counted calls are
# read once a second, so a window's ends can miss up to a second of them;
# totals.sh compares whole runs).
#   NEW=path/to/gputrace bash bench/gpu/counted/run.sh   (results in $OUT/counted)
set -u
export PYTHONUNBUFFERED=1
D=$(cd "$(dirname "$0")" && pwd)
R=${OUT:-/tmp/out}/counted; rm -rf "$R"; mkdir -p "$R"
NEW=$(readlink -f "${NEW:-gputrace}")
PY=/opt/torch/.venv/bin/python3; [ -x "$PY" ] || PY=python3
W=${W:-12} SETTLE=${SETTLE:-4} PORT=19464
$PY "$D/job.py" "$R/steps" > "$R/job.log" 2>&1 &
JOB=$!
trap 'kill $JOB 2>/dev/null' EXIT
for i in $(seq 60); do [ -s "$R/steps" ] && break; sleep 1; done
sleep 5
scrape() { $PY - "$PORT" "$JOB" <<'PY'
import sys, urllib.request
port, pid = sys.argv[1], sys.argv[2]
body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
want = {"cuLaunchKernel": 0, "cuEventRecordWithFlags": 0, "cuStreamWaitEvent": 0}
for l in body.splitlines():
    if l.startswith("gputrace_api_calls_total{") and f'pid="{pid}"' in l:
        for a in want:
            if f'api="{a}"' in l:
                want[a] = float(l.rsplit(" ", 1)[1])
print(" ".join(f"{int(v)}" for v in want.values()))
PY
}
printf "window\tmode\tt_on\tt_off\tcalls_on\tcalls_off\n" > "$R/windows.tsv"
n=0
for mode in none exact counts none exact counts; do
  n=$((n+1))
  case $mode in
    none) DAEMON= ;;
    exact) DAEMON="--overhead-budget 0" ;;
    counts) DAEMON="--overhead-budget 0 --probes launch:counts,memory,memcpy,sync:counts,names,runtime,nccl,graphs:counts,blas" ;;
  esac
  if [ -n "$DAEMON" ]; then
    "$NEW" daemon --listen 127.0.0.1:$PORT $DAEMON 2> "$R/daemon-$n-$mode.err" &
    GT=$!
  fi
  sleep "$SETTLE"
  on=$(date +%s.%N); c_on=$([ -n "$DAEMON" ] && scrape | tr ' ' ,)
  sleep "$W"
  off=$(date +%s.%N); c_off=$([ -n "$DAEMON" ] && scrape | tr ' ' ,)
  printf "%s\t%s\t%s\t%s\t%s\t%s\n" $n $mode $on $off "${c_on:--}" "${c_off:--}" >> "$R/windows.tsv"
  if [ -n "$DAEMON" ]; then kill -TERM $GT; wait $GT; fi
  sleep 1
done
$PY "$D/report.py" "$R" | tee "$R/report.txt"
