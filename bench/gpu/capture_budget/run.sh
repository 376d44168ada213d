#!/bin/bash
# Stream capture under --overhead-budget on the GPU (issue 13): the same
# workload traced exactly and under a 1% budget; every graph record of the
# budgeted run should have the exact run's kernel count (followed from the
# calls, or read from memory), none fewer. One GPU; from the repository
# root: GPUTRACE=.gpu/gputrace bash bench/gpu/capture_budget/run.sh
# (about 30 s). Results in $OUT/capbudget; bench/results/gpu/capbudget-*.
set -u
GT=$(readlink -f ${GPUTRACE:-.gpu/gputrace})
PY=/opt/torch/.venv/bin/python3; [ -x "$PY" ] || PY=python3
H=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}/capbudget; mkdir -p "$O"
export GPUTRACE_CACHE_DIR=$O/cache
STEPS=${STEPS:-400} RE=${RE:-10} SL=${SL:-20}
for mode in exact budget; do
  extra=(); [ $mode = budget ] && extra=(--overhead-budget 1 --verbose)
  timeout -k 5 150 "$GT" "${extra[@]}" --output "$O/$mode.jsonl" --summary json --summary-file "$O/$mode.summary.json" \
    -- "$PY" "$H/wl.py" "$STEPS" "$RE" "$SL" > "$O/$mode.out" 2> "$O/$mode.stderr"
  echo "$mode rc=$? $(cat $O/$mode.out)"
  "$PY" - "$O/$mode.jsonl" <<'PY'
import json, sys, collections
c = collections.Counter(); launches = collections.Counter(); apis = collections.Counter()
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("type") == "graph":
        n = e.get("nodes")
        k = None if n is None else sum(1 for x in n if x.get("kind") == "kernel")
        c[(e.get("source"), k)] += 1
    elif e.get("api"):
        apis[e["api"]] += 1
print("  graph records (source, kernel nodes):", dict(c))
print("  calls seen:", dict(apis.most_common(12)))
PY
  grep -E "captured CUDA graph|always-traced|sampl" "$O/$mode.stderr" | head -8 | cut -c1-400
done
gzip -f "$O"/*.jsonl
