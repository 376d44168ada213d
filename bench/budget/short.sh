#!/bin/bash
# Short busy processes under the daemon's default 1% budget
# (docs/performance.md#short-processes-under-a-budget):
#   sudo bash bench/budget/short.sh [GPUTRACE] [SIM_DIR]
# A daemon with --overhead-budget 1; a process that maps the simulated
# libcuda and waits (so the daemon's probes are on that file before the
# others start); then, one after the other, processes launching in a
# tight loop (`--bench launch --calls N`), each for a second or a few.
# Prints, per process, the launches made, its run time and what the daemon
# exported once the period it ended in was settled
# (gputrace_api_calls_total and gputrace_sampling_ratio); "none" is a
# missing series.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
GPUTRACE=${1:-$target/debug/gputrace}
SIM=${2:-$target/sim}
tmp=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
"$GPUTRACE" daemon --listen "127.0.0.1:$port" --overhead-budget 1 2>"$tmp/err" &
daemon=$!
sleep 1000 | "$SIM/gputrace-workload" --wait-stdin --launches 1 >/dev/null &
holder=$!
trap 'kill $daemon 2>/dev/null; pkill -P $$ sleep 2>/dev/null; kill $holder 2>/dev/null; rm -rf "$tmp"' EXIT
metric() { # NAME PID LABEL
    curl -s "http://127.0.0.1:$port/metrics" | grep "^$1{" | grep "pid=\"$2\"" | grep "$3" | awk '{print $2}' | head -1 || true
}
until grep -q "attached" "$tmp/err"; do sleep 0.2; done
# The daemon probes the simulated libcuda within a scan of /proc.
sleep 3
printf '%14s %8s %14s %8s\n' launches seconds exported ratio
for calls in 300000000 1000000000; do
    coproc W { exec "$SIM/gputrace-workload" --wait-stdin --bench launch --calls "$calls"; }
    wpid=$W_PID
    read -r line <&"${W[0]}"
    pid=${line#ready pid=}
    t0=$(date +%s.%N)
    echo >&"${W[1]}"
    cat <&"${W[0]}" >/dev/null
    wait "$wpid" 2>/dev/null || true
    secs=$(echo "$(date +%s.%N) - $t0" | bc)
    end=$(date +%s)
    # The estimate settles when the period the process ended in does: wait
    # until its estimates run past its end (or 35 s, the longest period).
    for _ in $(seq 35); do
        sleep 1
        until_s=$(metric gputrace_sampling_estimated_until_seconds "$pid" '')
        [ -n "$until_s" ] && [ "${until_s%.*}" -ge "$end" ] && break
    done
    now=$(metric gputrace_api_calls_total "$pid" 'api="cuLaunchKernel"')
    printf '%14d %8.1f %14s %8s\n' "$calls" "$secs" "${now:-none}" \
        "$(metric gputrace_sampling_ratio "$pid" 'family="launch"' || true)"
done
