#!/bin/bash
# What a uprobe costs by the probed function's first instruction: the kernel
# emulates some (push) and single-steps others out of line (sub, mov), which
# takes a second trap. Three functions that differ only in their first
# instruction (prologues.S), each called N times in a loop (loop.c) with no
# probe and with gputrace's bare counting uprobe on it.
#   sudo bash bench/uprobe-prologue/run.sh [GPUTRACE] [N]
# (GPUTRACE: default target/release/gputrace). Needs gcc.
set -eu
D=$(cd "$(dirname "$0")" && pwd)
G=$(readlink -f "${1:-target/release/gputrace}")
N=${2:-200000}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
gcc -O2 -shared -fPIC -o "$W/libprologues.so" "$D/prologues.S"
gcc -O2 -o "$W/loop" "$D/loop.c" -L"$W" -lprologues -Wl,-rpath,"$W"
for k in push sub endbr; do
  for mode in none uprobe; do
    mkfifo "$W/go"
    "$W/loop" $k $N < "$W/go" > "$W/out" 2>&1 &
    L=$!
    exec 7>"$W/go"
    BP=""
    if [ $mode = uprobe ]; then
      "$G" __bare --library "$W/libprologues.so" --symbols f_$k > /dev/null 2>&1 & BP=$!
      sleep 2
    fi
    echo >&7; exec 7>&-
    wait $L
    [ -n "$BP" ] && { kill -INT $BP; wait $BP || true; }
    rm -f "$W/go"
    printf "%-6s %-7s %s\n" $k $mode "$(tail -1 "$W/out" | sed 's/.*ns\/call //') ns/call"
  done
done
