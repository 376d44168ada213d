#!/bin/bash
# --gpu-time on the GPU machine:
#  1. accuracy: gemm_job.py's GEMMs and a graph captured before attach,
#     GPU time by gputrace (attached mid-run) against CUDA events;
#  2. cost: the DDP benchmark job (ddp_bench.py, GPT-2 small, bf16; NRANKS
#     ranks under torchrun) in windows: untraced, `gputrace --pid
#     --overhead-budget 1`, the same with --gpu-time, and torch.profiler
#     (CPU and CUDA activities) run by the job itself; ROUNDS rounds;
#  3. 20 attach/detach cycles of --gpu-time, then an untraced window.
#
#   run.sh GPUTRACE [NRANKS] [ROUNDS] [WINDOW_S]
#
# Results in $OUT (else /tmp/gpu_time): accuracy.txt, acc_summary.txt,
# windows.tsv, rank*.steps.gz, report.txt.
set -u
B=$(readlink -f "${1:?usage: run.sh GPUTRACE [NRANKS] [ROUNDS] [WINDOW_S]}")
NR=${2:-1} ROUNDS=${3:-2} WIN=${4:-15}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
RES=${OUT:-/tmp/gpu_time}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 GPUTRACE_CACHE_DIR=${GPUTRACE_CACHE_DIR:-/tmp/gtcache}
W=$(mktemp -d /tmp/gpu_time.XXXXXX)
mkdir -p "$RES" "$W/acc" "$W/ddp"
JOB=""
cleanup() { touch "$W/acc/stop" "$W/ddp/stop"; sleep 2; [ -n "$JOB" ] && kill $JOB 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT

# --- 1. accuracy ---
$PY "$HERE/gemm_job.py" "$W/acc" > "$W/acc/job.out" 2>&1 &
JOB=$!
while [ ! -s "$W/acc/job.pid" ]; do sleep 0.2; done
sleep 2
$B --pid "$(cat "$W/acc/job.pid")" --gpu-time --duration 16s --output "$W/acc/t.jsonl" \
   > "$RES/acc_summary.txt" 2> "$RES/acc_stderr.txt"
echo "gputrace exit $?" >> "$RES/acc_stderr.txt"
while [ ! -s "$W/acc/phases.json" ]; do sleep 0.5; done
$PY "$HERE/compare.py" "$W/acc/phases.json" "$W/acc/t.jsonl" > "$RES/accuracy.txt" 2>&1
echo "compare exit $?" >> "$RES/accuracy.txt"
$B stats "$W/acc/t.jsonl" > "$RES/acc_stats.txt" 2>&1
touch "$W/acc/stop"; wait $JOB; JOB=""

# --- 2. cost ---
torchrun --nproc_per_node "$NR" --master_port 29511 "$HERE/../ddp_bench.py" --dir "$W/ddp" > "$W/ddp/job.out" 2>&1 &
JOB=$!
for r in $(seq 0 $((NR - 1))); do
  while [ ! -e "$W/ddp/rank$r.ready" ]; do sleep 0.5; done
done
PIDS=$(for f in "$W"/ddp/rank*.pid; do cat "$f"; echo; done | paste -sd, -)
win() { echo "$1 $(date +%s.%N)" >> "$RES/windows.tsv"; }
: > "$RES/windows.tsv"
for round in $(seq 1 "$ROUNDS"); do
  win "untraced_$round"; sleep "$WIN"
  win "budget_$round"
  $B --pid "$PIDS" --overhead-budget 1 --duration "${WIN}s" --summary none 2>> "$RES/cost_stderr.txt"
  win "gpu_time_$round"
  $B --pid "$PIDS" --overhead-budget 1 --gpu-time --duration "${WIN}s" --summary none 2>> "$RES/cost_stderr.txt"
done
# What each kind of CUPTI record costs.
win "gpu_kernels_only_1"
GPUTRACE_GPU_KINDS=kernel $B --pid "$PIDS" --overhead-budget 1 --gpu-time --duration "${WIN}s" --summary none 2>> "$RES/cost_stderr.txt"
win "gpu_no_api_1"
GPUTRACE_GPU_KINDS=kernel,memcpy,memset $B --pid "$PIDS" --overhead-budget 1 --gpu-time --duration "${WIN}s" --summary none 2>> "$RES/cost_stderr.txt"
# --- 3. 20 cycles, then untraced ---
win "cycles"
for i in $(seq 1 20); do
  $B --pid "$PIDS" --gpu-time --duration 1s --summary none 2>> "$RES/cycles_stderr.txt" || echo "cycle $i failed" >> "$RES/cycles_stderr.txt"
done
grep -c "waits for the process" "$RES/cycles_stderr.txt" > "$RES/cycles_not_finalized.txt"
grep -c "GPU time from its CUPTI" "$RES/cycles_stderr.txt" > "$RES/cycles_attached.txt"
for p in $(cat "$W"/ddp/rank*.pid); do grep -c gputrace-agent /proc/$p/maps; done > "$RES/agent_maps_after_cycles.txt"
win "untraced_after"; sleep "$WIN"
# torch.profiler last: it keeps CUPTI subscribed (and the process slower)
# once it ran, so no --gpu-time can follow it in the same process.
win "profiler_1"
touch "$W/ddp/profile"; sleep "$WIN"
win "end"
touch "$W/ddp/stop"; wait $JOB; JOB=""
for f in "$W"/ddp/rank*.steps; do gzip -c "$f" > "$RES/$(basename "$f").gz"; done
$PY "$HERE/report.py" "$RES" > "$RES/report.txt" 2>&1
cat "$RES/accuracy.txt" "$RES/report.txt" "$RES/cycles_attached.txt" "$RES/cycles_not_finalized.txt" "$RES/agent_maps_after_cycles.txt"
# At most a few files come back from the GPU machine: the rest in one archive.
(cd "$RES" && tar czf all.tgz --exclude all.tgz . && find . -maxdepth 1 -type f ! -name all.tgz ! -name accuracy.txt ! -name report.txt ! -name acc_summary.txt -delete)
