#!/bin/bash
# What --gpu-time costs per launch, and attach/detach cycles on a training job.
#  1. ddp_bench.py --tiny N (one rank): each step launches N tiny kernels
#     and synchronises, so whatever a launch costs is on the step. Windows,
#     ROUNDS times: untraced; --gpu-time with GPUTRACE_GPU_KINDS=kernel;
#     --gpu-time (all kinds: API records too); the probes alone. Per launch:
#     (step time traced - untraced) / N.
#  2. the GPT-2 DDP job (ddp_bench.py, one rank): CYCLES cycles of
#     `--gpu-time --duration 1s`, the job checked alive after each; then an
#     untraced window against one before the cycles. The job's output and
#     the kernel log's last lines are kept.
#
#   launch_cost.sh GPUTRACE [N] [ROUNDS] [WINDOW_S] [CYCLES]
#
# Results in $OUT (else /tmp/launch_cost): report.txt, tiny_summary.txt,
# cycles.txt, job_tail.txt.
set -u
B=$(readlink -f "${1:?usage: launch_cost.sh GPUTRACE [N] [ROUNDS] [WINDOW_S] [CYCLES]}")
N=${2:-2000} ROUNDS=${3:-2} WIN=${4:-10} CYCLES=${5:-20}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
RES=${OUT:-/tmp/launch_cost}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 GPUTRACE_CACHE_DIR=${GPUTRACE_CACHE_DIR:-/tmp/gtcache}
W=$(mktemp -d /tmp/launch_cost.XXXXXX)
mkdir -p "$RES" "$W/tiny" "$W/gpt"
JOB=""
cleanup() { touch "$W/tiny/stop" "$W/gpt/stop"; sleep 2; [ -n "$JOB" ] && kill $JOB 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT
ready() { while [ ! -e "$1/rank0.ready" ]; do sleep 0.5; done; cat "$1/rank0.pid"; }

# --- 1. per launch ---
torchrun --nproc_per_node 1 --master_port 29514 "$HERE/../ddp_bench.py" --tiny "$N" --dir "$W/tiny" > "$W/tiny/job.out" 2>&1 &
JOB=$!
P=$(ready "$W/tiny")
T=$RES/tiny; mkdir -p "$T"
win() { echo "$1 $(date +%s.%N)" >> "$T/windows.tsv"; }
: > "$T/windows.tsv"
for r in $(seq 1 "$ROUNDS"); do
  win "untraced_$r"; sleep "$WIN"
  win "gpu_kernels_$r"
  GPUTRACE_GPU_KINDS=kernel $B --pid "$P" --gpu-time --duration "${WIN}s" --summary none 2>> "$RES/stderr.txt"
  win "gpu_all_$r"
  $B --pid "$P" --gpu-time --duration "${WIN}s" > "$RES/tiny_summary.txt" 2>> "$RES/stderr.txt"
  win "probes_$r"
  $B --pid "$P" --duration "${WIN}s" --summary none 2>> "$RES/stderr.txt"
done
win end
touch "$W/tiny/stop"; wait $JOB; JOB=""
gzip -c "$W/tiny/rank0.steps" > "$T/rank0.steps.gz"
$PY "$HERE/report.py" "$T" > "$RES/report.txt" 2>&1
$PY - "$T" "$N" >> "$RES/report.txt" <<'PYEOF'
import glob, gzip, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
wins = [(a, float(b)) for a, b in (l.split() for l in open(f"{d}/windows.tsv") if l.strip())]
steps = [(float(l.split()[0]), float(l.split()[1])) for l in gzip.open(f"{d}/rank0.steps.gz", "rt")]
med = {}
for (name, s), (_, e) in zip(wins, wins[1:]):
    xs = [ms for t, ms in steps if s + 2 <= t <= e]
    if xs:
        med[name] = statistics.median(xs)
print(f"\nper launch ({n} launches a step):")
for name, m in med.items():
    if not name.startswith("untraced"):
        base = med.get("untraced_" + name.rsplit("_", 1)[-1])
        if base:
            print(f"  {name:16} {(m - base) / n * 1e3:+7.2f} us")
PYEOF

# --- 2. cycles on the GPT-2 job ---
torchrun --nproc_per_node 1 --master_port 29515 "$HERE/../ddp_bench.py" --dir "$W/gpt" > "$W/gpt/job.out" 2>&1 &
JOB=$!
P=$(ready "$W/gpt")
: > "$RES/cycles.txt"
for i in $(seq 1 "$CYCLES"); do
  $B --pid "$P" --gpu-time --duration 1s --summary none 2>> "$RES/cycles_stderr.txt"
  rc=$?
  if ! kill -0 "$P" 2>/dev/null; then echo "cycle $i: the job died (gputrace exit $rc)" >> "$RES/cycles.txt"; break; fi
  echo "cycle $i: gputrace exit $rc, job alive" >> "$RES/cycles.txt"
done
echo "attached: $(grep -c 'GPU time from its CUPTI' "$RES/cycles_stderr.txt")" >> "$RES/cycles.txt"
echo "not finalized: $(grep -c 'waits for the process' "$RES/cycles_stderr.txt")" >> "$RES/cycles.txt"
echo "agent maps left: $(grep -c gputrace-agent /proc/$P/maps 2>/dev/null)" >> "$RES/cycles.txt"
touch "$W/gpt/stop"; sleep 3
{ tail -40 "$W/gpt/job.out"; echo "--- kernel log"; dmesg 2>/dev/null | tail -15; } > "$RES/job_tail.txt"
wait $JOB; JOB=""
cat "$RES/report.txt" "$RES/cycles.txt"; tail -30 "$RES/job_tail.txt"; head -60 "$RES/tiny_summary.txt"
