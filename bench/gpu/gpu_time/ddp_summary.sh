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
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 GPUTRACE_CACHE_DIR=${GPUTRACE_CACHE_DIR:-/tmp/gtcache}
W=$(mktemp -d /tmp/gpu_time_ddp.XXXXXX)
mkdir -p "$RES"
JOB=""
cleanup() { touch "$W/stop"; sleep 2; [ -n "$JOB" ] && kill $JOB 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT
torchrun --nproc_per_node "$NR" --master_port 29513 "$HERE/../ddp_bench.py" --dir "$W" > "$W/job.out" 2>&1 &
JOB=$!
for r in $(seq 0 $((NR - 1))); do
  while [ ! -e "$W/rank$r.ready" ]; do sleep 0.5; done
done
PIDS=$(for f in "$W"/rank*.pid; do cat "$f"; echo; done | paste -sd, -)
win() { echo "$1 $(date +%s.%N)" >> "$RES/windows.tsv"; }
: > "$RES/windows.tsv"
win untraced_1; sleep "$WIN"
win gpu_time_1
$B --pid "$PIDS" --gpu-time --duration "${WIN}s" --output "$W/ddp.pftrace" \
   > "$RES/summary.txt" 2> "$RES/stderr.txt"
echo "gputrace exit $?" >> "$RES/stderr.txt"
win untraced_after; sleep "$WIN"
win end
$B stats "$W/ddp.pftrace" > "$RES/stats.txt" 2>&1
touch "$W/stop"; wait $JOB; JOB=""
for f in "$W"/rank*.steps; do gzip -c "$f" > "$RES/$(basename "$f").gz"; done
$PY "$HERE/report.py" "$RES" > "$RES/report.txt" 2>&1
ls -la "$W/ddp.pftrace" >> "$RES/stderr.txt"
cat "$RES/report.txt"; head -c 6000 "$RES/summary.txt"; tail -5 "$RES/stderr.txt"
