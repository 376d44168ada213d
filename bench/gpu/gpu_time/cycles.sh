#!/bin/bash
# Does a job run as fast after 20 attach/detach cycles of --gpu-time as
# before them? The DDP job of ddp_bench.py under torchrun: an untraced
# window, 20 cycles of `gputrace --pid --gpu-time --duration 1s` on every
# rank, then two untraced windows; report.py compares them (the "cycles"
# window is the cycles themselves). Also checks each cycle attached and
# finalized and that no agent mapping is left.
#
#   cycles.sh GPUTRACE [NRANKS] [WINDOW_S]
#
# Results in $OUT (else /tmp/gpu_cycles): report.txt, cycles.txt.
set -u
B=$(readlink -f "${1:?usage: cycles.sh GPUTRACE [NRANKS] [WINDOW_S]}")
NR=${2:-2} WIN=${3:-8}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
RES=${OUT:-/tmp/gpu_cycles}
. "$HERE/ddp_job.sh"
start_ddp_job gpu_cycles 29519
win untraced_1; sleep "$WIN"
win cycles
: > "$RES/cycles.txt"
for i in $(seq 1 20); do
  $B --pid "$PIDS" --gpu-time --duration 1s --summary none 2>> "$W/cycles_stderr.txt"
  echo "cycle $i: gputrace exit $?" >> "$RES/cycles.txt"
done
win untraced_after; sleep "$WIN"
win untraced_after2; sleep "$WIN"
win end
{
  echo "attached: $(grep -c 'GPU time from its CUPTI' "$W/cycles_stderr.txt") of $((20 * NR))"
  echo "not finalized: $(grep -c 'waits for the process' "$W/cycles_stderr.txt")"
  for p in ${PIDS//,/ }; do echo "process $p: agent mappings left $(grep -c gputrace-agent /proc/$p/maps)"; done
} >> "$RES/cycles.txt"
stop_ddp_job
$PY "$HERE/report.py" "$RES" > "$RES/report.txt" 2>&1
$PY - "$RES" >> "$RES/report.txt" <<'PYEOF'
import sys
med = {}
for l in open(f"{sys.argv[1]}/report.txt"):
    p = l.split()
    if len(p) >= 5 and p[2] == "steps":
        med[p[0]] = float(p[4])
for w in ("untraced_after", "untraced_after2"):
    if w in med and "untraced_1" in med:
        print(f"{w} vs untraced_1: {100 * (med[w] - med['untraced_1']) / med['untraced_1']:+.2f}%")
PYEOF
cat "$RES/report.txt"; tail -4 "$RES/cycles.txt"
