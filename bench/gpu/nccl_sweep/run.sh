#!/bin/bash
# "Collectives by size" on two GPUs: sweep.py's all-reduce sweep traced with
# --gpu-time on both ranks (attached after start-up, before the sweep);
# compare.py puts gputrace's bus bandwidth per size beside the program's.
# Results in $OUT (else /tmp/nccl_sweep).
#
#   run.sh GPUTRACE
set -u
B=$(readlink -f "${1:?usage: run.sh GPUTRACE}")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
RES=${OUT:-/tmp/nccl_sweep}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 GPUTRACE_CACHE_DIR=${GPUTRACE_CACHE_DIR:-/tmp/gtcache}
W=$(mktemp -d /tmp/nccl_sweep.XXXXXX)
mkdir -p "$RES"
TORCHRUN=${TORCHRUN:-$(dirname "$PY")/torchrun}
"$TORCHRUN" --nproc_per_node 2 --master_port 29517 "$HERE/sweep.py" "$W" > "$W/job.out" 2>&1 &
JOB=$!
for r in 0 1; do
  for i in $(seq 1 240); do [ -e "$W/rank$r.ready" ] && break; sleep 0.5; done
done
PIDS=$(cat "$W/rank0.pid"),$(cat "$W/rank1.pid")
$B --pid "$PIDS" --gpu-time --duration 120s --output "$W/t.jsonl" \
   > "$RES/summary.txt" 2> "$RES/stderr.txt" &
T=$!
for i in $(seq 1 60); do [ "$(grep -c "GPU time from its CUPTI" "$RES/stderr.txt")" -ge 2 ] && break; sleep 0.5; done
sleep 1
touch "$W/go"
for r in 0 1; do
  for i in $(seq 1 240); do [ -e "$W/rank$r.done" ] && break; sleep 0.5; done
done
sleep 2
kill -INT $T; wait $T; echo "gputrace exit $?" >> "$RES/stderr.txt"
tail -1 "$W/t.jsonl" > "$RES/summary.json"
cp "$W"/rank*.json "$RES/"
$PY "$HERE/compare.py" "$RES" > "$RES/compare.txt" 2>&1
echo "compare exit $?" >> "$RES/compare.txt"
$B stats "$W/t.jsonl" > "$RES/stats.txt" 2>&1
touch "$W/stop"; wait $JOB
tail -5 "$W/job.out" >> "$RES/stderr.txt"
cat "$RES/compare.txt"; grep -B2 -A 30 "Collectives by size" "$RES/summary.txt" | head -45; tail -8 "$RES/stderr.txt"
