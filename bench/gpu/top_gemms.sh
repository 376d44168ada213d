#!/bin/bash
# `gputrace top --gpu-time` on gemm_shapes/job.py's waiting loop (a bf16
# 640x384 @ 384x896 matmul, over and over), the GEMMs pane shown.
#   top_gemms.sh GPUTRACE
set -u
B=$(readlink -f "${1:?usage: top_gemms.sh GPUTRACE}")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}  # the job; top_capture.py runs under TOPPY (a python with pyte)
export PYTHONUNBUFFERED=1 GPUTRACE_CACHE_DIR=${GPUTRACE_CACHE_DIR:-/tmp/gtcache}
W=$(mktemp -d /tmp/top_gemms.XXXXXX)
$PY "$HERE/gemm_shapes/job.py" "$W" > "$W/job.out" 2>&1 &
JOB=$!
while [ ! -s "$W/job.pid" ]; do sleep 0.2; done
sleep 5
KEYS=$'\t\t\t' ${TOPPY:-python3} "$HERE/top_capture.py" 120 30 16 "$B" top --pid "$(cat "$W/job.pid")" --gpu-time
touch "$W/stop"; kill $JOB 2>/dev/null; wait $JOB 2>/dev/null
