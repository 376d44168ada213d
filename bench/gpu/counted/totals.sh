#!/bin/bash
# Exactness on a real libcuda: a daemon (exact, then launch:counts, twice
# each) is started, then a job of STEPS fixed steps (job.py STEPS) that
# exits; once it is gone its series are scraped: the counted totals must
# equal the recorded ones.   NEW=path/to/gputrace bash totals.sh
set -u
export PYTHONUNBUFFERED=1
D=$(cd "$(dirname "$0")" && pwd)
R=${OUT:-/tmp/out}/counted-totals; rm -rf "$R"; mkdir -p "$R"
NEW=$(readlink -f "${NEW:-gputrace}")
PY=/opt/torch/.venv/bin/python3; [ -x "$PY" ] || PY=python3
STEPS=${STEPS:-1500} PORT=19465
for mode in exact counts exact counts; do
  case $mode in
    exact) P="" ;;
    counts) P="--probes launch:counts,memory,memcpy,sync:counts,names,runtime,nccl,graphs:counts,blas" ;;
  esac
  "$NEW" daemon --listen 127.0.0.1:$PORT --overhead-budget 0 $P 2> "$R/daemon-$mode.err" &
  GT=$!
  for i in $(seq 100); do grep -q "attached" "$R/daemon-$mode.err" && break; sleep 0.1; done
  $PY "$D/job.py" "$R/steps-$mode" "$STEPS" > "$R/job-$mode.log" 2>&1 &
  JOB=$!; wait $JOB; sleep 2
  $PY - $PORT $JOB $mode <<'PY' | tee -a "$R/totals.txt"
import sys, urllib.request
port, pid, mode = sys.argv[1:4]
body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
rows = {}
for l in body.splitlines():
    if l.startswith("gputrace_api_calls_total{") and f'pid="{pid}"' in l:
        api = l.split('api="')[1].split('"')[0]
        rows[api] = int(float(l.rsplit(" ", 1)[1]))
pick = [a for a in sorted(rows) if a.startswith(("cuLaunch", "cuEventRecord", "cuStreamWaitEvent", "cuStreamIsCapturing", "cuStreamGetCaptureInfo"))]
print(mode, " ".join(f"{a}={rows[a]}" for a in pick))
PY
  kill -TERM $GT; wait $GT
done
tail -n 1 "$R"/daemon-*.err
