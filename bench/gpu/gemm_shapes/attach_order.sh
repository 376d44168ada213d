#!/bin/bash
# Whether every GEMM call traced from the start of an attach owns its
# launch: job.py is attached (no --gpu-time) for 4 s of its warm-up loop;
# each cublasGemmEx call is checked for a launch inside it on its thread.
#
#   attach_order.sh GPUTRACE
B=$(readlink -f "${1:?usage: attach_order.sh GPUTRACE}")
PY=${PYTHON:-python3}
W=$(mktemp -d /tmp/idle.XXXXXX)
HERE=$(cd "$(dirname "$0")" && pwd)
$PY "$HERE/job.py" $W > $W/job.out 2>&1 &
while [ ! -s $W/job.pid ]; do sleep 0.2; done
sleep 4
$B --pid $(cat $W/job.pid) --duration 4s --output $W/t.jsonl > $W/sum.txt 2> $W/err.txt
touch $W/go; while [ ! -e $W/done ]; do sleep 0.5; done; touch $W/stop; wait
cat $W/err.txt
$PY - $W/t.jsonl <<'PY'
import json, sys, collections
ev = [json.loads(l) for l in open(sys.argv[1]) if '"api"' in l]
by_tid = collections.defaultdict(list)
for e in ev: by_tid[e["tid"]].append(e)
c = collections.Counter(e["api"] for e in ev); print(c.most_common(12))
gemms = [e for e in ev if e["api"] == "cublasGemmEx"]
no = 0
for g in gemms:
    s, t = g["ts_ns"], g["ts_ns"] + (g["dur_ns"] or 0)
    inside = [e for e in by_tid[g["tid"]] if e["api"].startswith("cuLaunch") and s <= e["ts_ns"] and e["ts_ns"] + (e["dur_ns"] or 0) <= t]
    if not inside:
        no += 1
        if no <= 3:
            near = [ (e["api"], e["ts_ns"] - s, e["dur_ns"]) for e in by_tid[g["tid"]] if abs(e["ts_ns"] - s) < 200_000]
            print("no launch inside", g["dur_ns"], near)
print("gemms", len(gemms), "without a launch inside", no)
PY
