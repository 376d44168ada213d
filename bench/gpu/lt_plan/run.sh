#!/bin/bash
# cuBLASLt plans made before the attach, on the GPU machine: the real
# libcublasLt calibrated (__calibrate-lt), then job.py traced with
# --gpu-time from after its descriptors were made. Results in $OUT.
#
#   run.sh GPUTRACE
set -u
B=$(readlink -f "${1:?usage: run.sh GPUTRACE}")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
RES=${OUT:-/tmp/lt_plan}
export PYTHONUNBUFFERED=1 GPUTRACE_CACHE_DIR=${GPUTRACE_CACHE_DIR:-/tmp/gtcache}
W=$(mktemp -d /tmp/lt_plan.XXXXXX)
mkdir -p "$RES"
$PY "$HERE/job.py" "$W" > "$W/job.out" 2>&1 &
JOB=$!
while [ ! -s "$W/job.pid" ]; do sleep 0.2; kill -0 $JOB 2>/dev/null || { cat "$W/job.out"; exit 1; }; done
P=$(cat "$W/job.pid")
LIB=$(grep -m1 -o '/[^ ]*libcublasLt.so[^ ]*' /proc/$P/maps)
{ echo "library: $LIB"; readelf -d "$LIB" | grep NEEDED; /usr/bin/time -f "helper: %e s, %M KiB" "$B" __calibrate-lt "$LIB"; } > "$RES/calibrate.txt" 2>&1
$B --pid "$P" --gpu-time --duration 60s --summary json --summary-file "$RES/summary.json" \
   --output "$W/t.jsonl" > /dev/null 2> "$RES/stderr.txt" &
T=$!
for i in $(seq 1 60); do grep -q "GPU time from its CUPTI" "$RES/stderr.txt" && break; sleep 0.5; done
sleep 1
touch "$W/go"
while [ ! -e "$W/done" ]; do sleep 0.5; kill -0 $JOB 2>/dev/null || break; done
sleep 3
kill -INT $T; wait $T; echo "gputrace exit $?" >> "$RES/stderr.txt"
cp "$W/phases.json" "$RES/" 2>/dev/null
$B stats "$W/t.jsonl" > "$RES/stats.txt" 2>&1
touch "$W/stop"; wait $JOB
tail -3 "$W/job.out" >> "$RES/stderr.txt"
cat "$RES/calibrate.txt"; cat "$RES/stderr.txt"
$PY - "$RES" <<'PY'
import json, sys
r = sys.argv[1]
ph = json.load(open(f"{r}/phases.json"))
s = json.load(open(f"{r}/summary.json"))
for p in s["processes"]:
    g = p.get("gemms") or {}
    print("without shape:", g.get("lt_without_shape"))
    for row in g.get("shapes", []):
        gpu = row.get("gpu") or {}
        print(row["op"], row["transa"], row["transb"], row["batch"], row["m"], row["n"], row["k"],
              row["a_type"], row["compute"], "calls", row["calls"], "gpu med us",
              gpu.get("med_ns", 0) / 1e3, "tflops", row.get("tflops"),
              [k["name"][:40] for k in row["kernels"]])
for n, v in ph.items():
    print(n, v)
PY
