#!/bin/bash
# jax_job.py traced from after its matmul was compiled and run 20 times.
#   run_jax.sh GPUTRACE
set -u
B=$(readlink -f "${1:?usage: run_jax.sh GPUTRACE}")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
RES=${OUT:-/tmp/lt_plan_jax}
export PYTHONUNBUFFERED=1 GPUTRACE_CACHE_DIR=${GPUTRACE_CACHE_DIR:-/tmp/gtcache}
export XLA_FLAGS="--xla_gpu_enable_triton_gemm=false --xla_gpu_enable_cublaslt=true" XLA_PYTHON_CLIENT_PREALLOCATE=false
W=$(mktemp -d /tmp/lt_jax.XXXXXX)
mkdir -p "$RES"
$PY "$HERE/jax_job.py" "$W" > "$W/job.out" 2>&1 &
JOB=$!
while [ ! -s "$W/job.pid" ]; do sleep 0.2; kill -0 $JOB 2>/dev/null || { cat "$W/job.out"; exit 1; }; done
P=$(cat "$W/job.pid")
grep -o '/[^ ]*libcublas[^ ]*' /proc/$P/maps | sort -u > "$RES/maps.txt"
$B --pid "$P" --duration 60s --summary json --summary-file "$RES/summary.json" > /dev/null 2> "$RES/stderr.txt" &
T=$!
sleep 4; touch "$W/go"
while [ ! -e "$W/done" ]; do sleep 0.5; kill -0 $JOB 2>/dev/null || break; done
sleep 2
kill -INT $T; wait $T; echo "gputrace exit $?" >> "$RES/stderr.txt"
touch "$W/stop"; wait $JOB
tail -2 "$W/job.out" >> "$RES/stderr.txt"
cat "$RES/maps.txt" "$RES/stderr.txt"
$PY - "$RES" <<'PY'
import json, sys
s = json.load(open(f"{sys.argv[1]}/summary.json"))
for p in s["processes"]:
    g = p.get("gemms") or {}
    print("without shape:", g.get("lt_without_shape"))
    for row in g.get("shapes", []):
        print(row["op"], row["transa"], row["transb"], row["batch"], row["m"], row["n"], row["k"],
              row["a_type"], row["compute"], "calls", row["calls"], [k["name"][:40] for k in row["kernels"]])
PY
