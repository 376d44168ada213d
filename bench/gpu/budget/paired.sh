#!/bin/bash
# Step time under a 1% overhead budget, measured against a twin run at the
# same moment (issue 13). On the GPU machine the untraced windows of
# run.sh drift by 5-15% from one minute to the next (the steps are
# CPU-bound and the host's CPUs change pace), more than the 1% to be
# resolved. Here two
# identical one-rank jobs (A and B: ddp_bench.py, GPT-2 small shape,
# batch BATCH x 512, DDP over NCCL) run side by side on one GPU, each
# issuing from its own CPU, and every round has
#   - a window with neither traced: B's step time over A's, the pair's own
#     difference at that moment;
#   - a window with one traced (A in even rounds, B in odd ones) by
#     `gputrace --pid P --overhead-budget 1`, counted from SETTLE s after
#     it started: the traced job's step time over the other's.
# A round's slowdown is the second ratio over the first, so a drift both
# jobs share cancels, and so does any difference between the two jobs.
# On the H200 host (bench/results/gpu/budget-twin-jobs-h200-2026-11-23) the twins did not drift together: each
# issuing thread ran at its own core's pace, ±6% apart from one window to
# the next, so 8 rounds gave a 95% interval of ±3.5%.
# BATCH (default 2, the benchmark's 8 over 4) keeps the GPU from being
# what paces two jobs: each step's work is issued by the CPU as before
# (the same ~960 launches), the GPU has a quarter as much to do.
#   NEW=path/to/gputrace WINDOW=20 SETTLE=8 LIMIT=420 bash bench/gpu/budget/paired.sh
# Rounds run until LIMIT s have passed (each about 2 x WINDOW + SETTLE).
# Results in $OUT/paired (report.txt from paired.py, windows.tsv, the
# jobs' step files, gputrace's stderr). DRY=1: two simulated-libcuda
# processes (ddp_bench.py --dry), to check the script on a CPU machine.
D=$(cd "$(dirname "$0")" && pwd)
. "$D/prelude.sh" paired ''
WINDOW=${WINDOW:-20} SETTLE=${SETTLE:-8} LIMIT=${LIMIT:-420} BATCH=${BATCH:-2}
export GPUTRACE_CACHE_DIR=/tmp/gtcache-paired
W=$(mktemp -d /tmp/paired.XXXXXX)
JOBS="" TP=""
cleanup() {
  [ -n "$TP" ] && kill -TERM $TP 2>/dev/null
  touch "$W/A/stop" "$W/B/stop"; sleep 3
  for j in $JOBS; do kill $j 2>/dev/null; timeout 20 tail --pid=$j -f /dev/null; done
}
trap cleanup EXIT
for j in A B; do
  mkdir -p "$W/$j"
  if [ -n "${DRY:-}" ]; then
    GPUTRACE_SIM=$(readlink -f target/sim) $PY "$D/../ddp_bench.py" --dry --rank 0 --dir "$W/$j" --warmup 5 > "$W/$j.log" 2>&1 &
  else
    $PY -m torch.distributed.run --standalone --nproc_per_node=1 "$D/../ddp_bench.py" --dir "$W/$j" --batch "$BATCH" > "$W/$j.log" 2>&1 &
  fi
  JOBS="$JOBS $!"
done
for i in $(seq 1200); do [ -f "$W/A/rank0.ready" ] && [ -f "$W/B/rank0.ready" ] && break; sleep 0.25; done
[ -f "$W/B/rank0.ready" ] && [ -f "$W/A/rank0.ready" ] || { echo "the jobs did not start"; tail -20 "$W/A.log" "$W/B.log"; exit 1; }
PA=$(cat "$W/A/rank0.pid") PB=$(cat "$W/B/rank0.pid")
echo "jobs A=$PA B=$PB ready after $(( $(date +%s) - START )) s; batch $BATCH x 512, windows ${WINDOW} s, settle ${SETTLE} s"
# The hit cost is measured once (cached for every round after).
timeout -s TERM 15 "$NEW" daemon --listen 127.0.0.1:0 --overhead-budget 1 --verbose > "$R/hitcost.txt" 2>&1
ticks() { awk '{print $14","$15}' /proc/$1/stat; }  # utime,stime of the whole process
now() { date +%s.%N; }
printf "round\ttraced\tt_on\tt_off\ta_a\ta_b\tb_a\tb_b\n" > "$R/windows.tsv"
r=0
while [ $(( $(date +%s) - START + 2 * WINDOW + SETTLE + 10 )) -le $LIMIT ]; do
  # Neither traced.
  a0=$(ticks $PA) b0=$(ticks $PB) t0=$(now); sleep $WINDOW; t1=$(now) a1=$(ticks $PA) b1=$(ticks $PB)
  printf "%s\t-\t%s\t%s\t%s\t%s\t%s\t%s\n" $r $t0 $t1 $a0 $a1 $b0 $b1 >> "$R/windows.tsv"
  # One traced, A and B in turn.
  if [ $((r % 2)) = 0 ]; then T=A P=$PA; else T=B P=$PB; fi
  "$NEW" --pid $P --overhead-budget 1 --summary none --verbose > /dev/null 2> "$W/trace$r.err" & TP=$!
  sleep $SETTLE
  a0=$(ticks $PA) b0=$(ticks $PB) t0=$(now); sleep $WINDOW; t1=$(now) a1=$(ticks $PA) b1=$(ticks $PB)
  printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" $r $T $t0 $t1 $a0 $a1 $b0 $b1 >> "$R/windows.tsv"
  kill -TERM $TP; wait $TP; TP=""
  { echo "== round $r, $T traced"; cat "$W/trace$r.err"; } >> "$R/gputrace.stderr"
  echo "$(date +%T) round $r done ($T traced)"
  r=$((r + 1))
done
cp "$W/A/rank0.steps" "$R/A.steps"; cp "$W/B/rank0.steps" "$R/B.steps"
$PY "$D/paired.py" "$R" | tee "$R/report.txt"
echo "paired done after $(( $(date +%s) - START )) s"
