# Sourced by the DDP cost scripts (cycles.sh, ddp_summary.sh,
# share_cost.sh), with NR, PY, RES and HERE set: the job they measure.
#
#   start_ddp_job NAME PORT [ddp_bench.py ARGS...]
#     ddp_bench.py under torchrun ($TORCHRUN, else the one beside $PY, else
#     the one on PATH)
#     with NR ranks in a scratch folder /tmp/NAME.XXXXXX; waits until every
#     rank is ready. Sets W (the folder), JOB, PIDS (the ranks' pids,
#     comma-separated); empties $RES/windows.tsv. The job is stopped on exit.
#   win NAME        marks the start of window NAME in $RES/windows.tsv
#   stop_ddp_job    ends the job; its step files go to $RES (gzipped)
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 GPUTRACE_CACHE_DIR=${GPUTRACE_CACHE_DIR:-/tmp/gtcache}
JOB=""
cleanup() {
  [ -n "${W:-}" ] && touch "$W/stop"
  sleep 2
  [ -n "$JOB" ] && kill $JOB 2>/dev/null
  wait 2>/dev/null
}
trap cleanup EXIT

start_ddp_job() {
  local name=$1 port=$2 r tr=${TORCHRUN:-}
  shift 2
  if [ -z "$tr" ]; then
    case "$PY" in */*) tr=$(dirname "$PY")/torchrun ;; *) tr=torchrun ;; esac
  fi
  W=$(mktemp -d "/tmp/$name.XXXXXX")
  mkdir -p "$RES"
  "$tr" --nproc_per_node "$NR" --master_port "$port" \
    "$HERE/../ddp_bench.py" --dir "$W" "$@" > "$W/job.out" 2>&1 &
  JOB=$!
  for r in $(seq 0 $((NR - 1))); do
    while [ ! -e "$W/rank$r.ready" ]; do sleep 0.5; done
  done
  PIDS=$(for f in "$W"/rank*.pid; do cat "$f"; echo; done | paste -sd, -)
  : > "$RES/windows.tsv"
}

win() { echo "$1 $(date +%s.%N)" >> "$RES/windows.tsv"; }

stop_ddp_job() {
  touch "$W/stop"
  wait $JOB
  JOB=""
  for f in "$W"/rank*.steps; do gzip -c "$f" > "$RES/$(basename "$f").gz"; done
}
