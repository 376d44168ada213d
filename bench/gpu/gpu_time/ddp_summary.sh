#!/bin/bash
# --gpu-time on a multi-rank DDP job (ddp_bench.py under torchrun): the
# summary and stats a user sees (NCCL kernels' GPU time per rank), and the
# step time in windows: untraced, `gputrace --pid --gpu-time`, untraced.
#
#   ddp_summary.sh GPUTRACE [NRANKS] [WINDOW_S]
#
# Results in $OUT (else /tmp/gpu_time_ddp): summary.txt, stats.txt,
# report.txt, stderr.txt.
set -u
B=$(readlink -f "${1:?usage: ddp_summary.sh GPUTRACE [NRANKS] [WINDOW_S]}")
NR=${2:-2} WIN=${3:-15}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
RES=${OUT:-/tmp/gpu_time_ddp}
. "$HERE/ddp_job.sh"
start_ddp_job gpu_time_ddp 29513
win untraced_1; sleep "$WIN"
win gpu_time_1
$B --pid "$PIDS" --gpu-time --duration "${WIN}s" --output "$W/ddp.pftrace" \
   > "$RES/summary.txt" 2> "$RES/stderr.txt"
echo "gputrace exit $?" >> "$RES/stderr.txt"
win untraced_after; sleep "$WIN"
win end
$B stats "$W/ddp.pftrace" > "$RES/stats.txt" 2>&1
stop_ddp_job
$PY "$HERE/report.py" "$RES" > "$RES/report.txt" 2>&1
ls -la "$W/ddp.pftrace" >> "$RES/stderr.txt"
cat "$RES/report.txt"; head -c 6000 "$RES/summary.txt"; tail -5 "$RES/stderr.txt"
