#!/bin/bash
# Peak RSS of gputrace on what grows its tables (docs/performance.md#memory):
#   sudo bash bench/memory/run.sh [GPUTRACE] [WORKLOAD]
# Live: the simulated workload launching 1,000,000 kernels of distinct names,
# and making 200,000 communicators (attached with --pid, so the workload's
# own memory is not counted), with --summary none and json. `stats`: files
# of 1,000,000 distinct kernel names (JSONL), 1,000,000 unknown API names
# (.jsonl.zst), 1,000 sequences of interned names (.pftrace), from
# gen_names.py. Needs /usr/bin/time, python3, zstd.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
GPUTRACE=${1:-$target/debug/gputrace}
WORKLOAD=${2:-$target/sim/gputrace-workload}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

live() { # FORMAT WORKLOAD-ARGS...
    local fmt=$1
    shift
    coproc W { exec "$WORKLOAD" --wait-stdin "$@"; }
    local line pid
    read -r line <&"${W[0]}"
    pid=${line#ready pid=}
    /usr/bin/time -f "%M" -o "$tmp/rss" "$GPUTRACE" --pid "$pid" --summary "$fmt" >"$tmp/summary" 2>"$tmp/err" &
    local t=$!
    until grep -q "attached" "$tmp/err"; do sleep 0.2; done
    echo >&"${W[1]}"
    cat <&"${W[0]}" >/dev/null
    wait "$t" || true
    printf '%-40s peak RSS %7d KiB, summary %d bytes\n' "live $* --summary $fmt" "$(cat "$tmp/rss")" "$(wc -c <"$tmp/summary")"
}

for fmt in none json; do
    live "$fmt" --distinct-kernels 1000000
    live "$fmt" --distinct-comms 200000
done

python3 "$here/gen_names.py" jsonl "$tmp/kernels.jsonl" 1000000 0
python3 "$here/gen_names.py" jsonl "$tmp/apis.jsonl" 0 1000000
zstd -q -19 --rm "$tmp/apis.jsonl" -o "$tmp/apis.jsonl.zst"
python3 "$here/gen_names.py" pftrace "$tmp/seqs.pftrace" 1000 200 200
for f in kernels.jsonl apis.jsonl.zst seqs.pftrace; do
    for fmt in text json; do
        /usr/bin/time -f "%M" -o "$tmp/rss" "$GPUTRACE" stats --format "$fmt" "$tmp/$f" >"$tmp/summary" 2>/dev/null || true
        printf '%-40s peak RSS %7d KiB, summary %d bytes\n' "stats --format $fmt $f ($(($(stat -c %s "$tmp/$f") / 1000000)) MB)" "$(cat "$tmp/rss")" "$(wc -c <"$tmp/summary")"
    done
done
