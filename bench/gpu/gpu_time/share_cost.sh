#!/bin/bash
# What --gpu-time costs a training step, exact and sampled
# (--gpu-time-share), beside the probes alone and torch.profiler: the DDP
# job of ddp_bench.py under torchrun, windows interleaved per round:
# untraced, probes under the default budget, + --gpu-time, + --gpu-time
# --gpu-time-share 10; then torch.profiler run by the job itself.
#
#   share_cost.sh GPUTRACE [NRANKS] [ROUNDS] [WINDOW_S]
#   (SPLIT=1: the sampled windows also write a JSONL, and share_split.py
#   compares the steps made while CUPTI collected with those made while it
#   was off, within each window: the cost of collecting without the drift
#   between windows; JOBARGS: more ddp_bench.py arguments, e.g. "--tiny 2000": each step
#   launches 2,000 tiny kernels and synchronises, so what a launch costs
#   shows on the step; PROFILER=0: no torch.profiler window)
#
# Results in $OUT (else /tmp/gpu_share): report.txt (report.py's medians
# and ratios), summary_MODE_ROUND.txt (what each window's summary says).
set -u
B=$(readlink -f "${1:?usage: share_cost.sh GPUTRACE [NRANKS] [ROUNDS] [WINDOW_S]}")
NR=${2:-2} ROUNDS=${3:-3} WIN=${4:-10}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
RES=${OUT:-/tmp/gpu_share}
. "$HERE/ddp_job.sh"
start_ddp_job gpu_share 29515 ${JOBARGS:-}
# A window's gputrace arguments (every one under the default budget).
mode_args() {
  case "$1" in
    budget) echo "--overhead-budget 1" ;;
    gpu_time) echo "--overhead-budget 1 --gpu-time" ;;
    share*) echo "--overhead-budget 1 --gpu-time --gpu-time-share ${1#share}" ;;
  esac
}
mode_env() { case "$1" in *kernel) echo "GPUTRACE_GPU_KINDS=kernel" ;; esac; }
for round in $(seq 1 "$ROUNDS"); do
  win "untraced_$round"; sleep "$WIN"
  for m in ${MODES:-budget gpu_time share10}; do
    win "${m}_$round"
    out=()
    case "$m" in share*) [ "${SPLIT:-0}" = 1 ] && out=(--output "$W/${m}_$round.jsonl") ;; esac
    env $(mode_env "$m") $B --pid "$PIDS" $(mode_args "${m%_kernel}") --duration "${WIN}s" "${out[@]}" \
       > "$RES/summary_${m}_$round.txt" 2>> "$RES/stderr.txt"
  done
done
win "untraced_after"; sleep "$WIN"
if [ "${PROFILER:-1}" = 1 ]; then
  win "profiler_1"
  touch "$W/profile"; sleep "$WIN"
fi
win "end"
stop_ddp_job
$PY "$HERE/report.py" "$RES" > "$RES/report.txt" 2>&1
if [ "${SPLIT:-0}" = 1 ]; then
  cp "$W"/rank*.pid "$RES/"
  $PY "$HERE/share_split.py" "$RES" "$W"/share*.jsonl > "$RES/split.txt" 2>&1
  cat "$RES/split.txt"
fi
cat "$RES/report.txt"; grep -v "^$" "$RES/stderr.txt" | sort | uniq -c | sort -rn | head -12
grep -h -A3 "GPU time sampled\|GPU busy" "$RES"/summary_share*_1.txt | head -20
