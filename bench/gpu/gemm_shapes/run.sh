#!/bin/bash
# "GEMMs by shape" on the GPU machine: job.py's GEMMs traced with
# --gpu-time from before its phases; compare.py checks counts and GPU
# medians against CUDA events. Results in $OUT (else /tmp/gemm_shapes).
#
#   run.sh GPUTRACE
set -u
B=$(readlink -f "${1:?usage: run.sh GPUTRACE}")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
RES=${OUT:-/tmp/gemm_shapes}
export PYTHONUNBUFFERED=1 GPUTRACE_CACHE_DIR=${GPUTRACE_CACHE_DIR:-/tmp/gtcache}
W=$(mktemp -d /tmp/gemm_shapes.XXXXXX)
mkdir -p "$RES"
$PY "$HERE/job.py" "$W" > "$W/job.out" 2>&1 &
JOB=$!
while [ ! -s "$W/job.pid" ]; do sleep 0.2; done
sleep 4
$B --pid "$(cat "$W/job.pid")" --gpu-time --duration 60s --output "$W/t.jsonl" \
   > "$RES/summary.txt" 2> "$RES/stderr.txt" &
T=$!
for i in $(seq 1 60); do grep -q "GPU time from its CUPTI" "$RES/stderr.txt" && break; sleep 0.5; done
sleep 1
touch "$W/go"
while [ ! -e "$W/done" ]; do sleep 0.5; done
sleep 3
kill -INT $T; wait $T; echo "gputrace exit $?" >> "$RES/stderr.txt"
tail -1 "$W/t.jsonl" > "$RES/summary.json"
cp "$W/phases.json" "$RES/"
$PY "$HERE/compare.py" "$RES/phases.json" "$RES/summary.json" > "$RES/compare.txt" 2>&1
echo "compare exit $?" >> "$RES/compare.txt"
$B stats "$W/t.jsonl" > "$RES/stats.txt" 2>&1
touch "$W/stop"; wait $JOB
tail -3 "$W/job.out" >> "$RES/stderr.txt"
cat "$RES/compare.txt"; grep -A 30 "GEMMs by shape" "$RES/summary.txt" | head -40; grep -i "cublas" "$RES/summary.txt" | head -20; tail -5 "$RES/stderr.txt"
