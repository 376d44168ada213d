#!/bin/bash
# What `gputrace top` costs: CPU when idle, and how fast a key is answered
# at the highest event rate the simulated workload reaches.
#   sudo bench/top-cost.sh [GPUTRACE_BIN] [SIM_DIR]
# Needs tmux. Prints one line per measurement.
set -euo pipefail
BIN=${1:-target/release/gputrace}
SIM=${2:-target/sim}
SOCK=gputrace-bench-$$
tm() { tmux -u -f /dev/null -L "$SOCK" "$@"; }
trap 'tm kill-server 2>/dev/null || true' EXIT
tm new-session -d -s t -x 120 -y 40 "env PS1='$ ' sh"
tm set-option -s escape-time 0
tm send-keys -t t "GPUTRACE_CACHE_DIR=/tmp/gputrace-bench-cache $BIN top" Enter
for _ in $(seq 100); do tm capture-pane -p -t t | grep -q "Processes:" && break; sleep 0.1; done
PID=$(pgrep -f "^$BIN top" | head -1)
cpu() { awk '{print $14+$15}' "/proc/$PID/stat"; }
HZ=$(getconf CLK_TCK)

# 1. Idle: no GPU activity for 30 s.
sleep 3
a=$(cpu); t0=$(date +%s.%N); sleep 30; b=$(cpu); t1=$(date +%s.%N)
echo "idle: $(echo "scale=2; ($b-$a)*100/$HZ/($t1-$t0)" | bc)% of one core over 30 s"

# 2. Busy: the launch bench, 2 threads; toggle the help overlay and time
#    from the key to the screen showing the change.
# Held 3 s after start so that the scan attaches before it runs.
"$SIM/gputrace-workload" --delay-ms 3000 --bench launch --threads 2 --calls 5000000 >/tmp/gputrace-bench-wl.out &
WL=$!
sleep 6
a=$(cpu); t0=$(date +%s.%N)
worst=0; sum=0; n=0
for i in $(seq 20); do
  if (( i % 2 )); then want=1; else want=0; fi
  s=$(date +%s%N)
  tm send-keys -t t '?'
  while true; do
    if tm capture-pane -p -t t | grep -q "│ ?  h"; then on=1; else on=0; fi
    [ "$on" = "$want" ] && break
  done
  ms=$(( ($(date +%s%N) - s) / 1000000 ))
  sum=$((sum + ms)); n=$((n + 1)); (( ms > worst )) && worst=$ms
  sleep 0.2
done
b=$(cpu); t1=$(date +%s.%N)
echo "busy: key answered in $((sum / n)) ms on average, $worst ms at worst ($n keys); top used $(echo "scale=1; ($b-$a)*100/$HZ/($t1-$t0)" | bc)% of one core"
tm capture-pane -p -t t | head -5
wait $WL || true
cat /tmp/gputrace-bench-wl.out | grep bench || true
tm send-keys -t t q
