#!/bin/bash
# Short PyTorch processes under the daemon's default budget beside a busy
# one (each estimated from slices of its own), then the same process under
# an exact daemon (its launch count) and untraced (its burst time).
#   bash bench/gpu/budget/short_torch.sh [GPUTRACE] [LAUNCHES]
# (docs/performance.md#short-processes-under-a-budget). Writes the
# budget daemon's stderr to $OUT when set.
PY=${PYTHON:-/opt/torch/.venv/bin/python3}
GPUTRACE=${1:-gputrace}
export GPUTRACE_CACHE_DIR=${GPUTRACE_CACHE_DIR:-/tmp/gtcache}
N=${2:-500000}
W=$(mktemp -d /tmp/sh.XXXXXX)
cat > $W/busy.py <<'EOF'
import torch, time, sys
x = torch.zeros(1024, device='cuda')
t = time.time()
while time.time() - t < float(sys.argv[1]):
    for _ in range(200):
        x.add_(1)
    torch.cuda.synchronize()
EOF
cat > $W/short.py <<'EOF'
import torch, time, sys, os
torch.zeros(1, device='cuda'); torch.cuda.synchronize()
time.sleep(float(sys.argv[2]))
x = torch.zeros(1024, device='cuda')
n = int(sys.argv[1])
t0 = time.time()
for i in range(n):
    x.add_(1)
    if i % 1000 == 999:
        torch.cuda.synchronize()
torch.cuda.synchronize()
print(os.getpid(), n, "%.3f" % (time.time() - t0), flush=True)
EOF
metric() { curl -s "http://127.0.0.1:$PORT/metrics" | grep "^$1{" | grep "pid=\"$2\"" | grep "$3" | awk '{print $2}' | head -1; }
short() { # WAIT_S
  local line pid end
  line=$($PY $W/short.py $N $1)
  end=$(date +%s)
  pid=${line%% *}
  for _ in $(seq 40); do
    sleep 1
    u=$(metric gputrace_sampling_estimated_until_seconds $pid '')
    [ -n "$u" ] && [ "${u%.*}" -ge "$end" ] && break
  done
  echo "wait $1 s: pid launches burst_s = $line; exported $(metric gputrace_api_calls_total $pid 'api="cuLaunchKernel"') ratio $(metric gputrace_sampling_ratio $pid 'family="launch"')"
}
echo "untraced: $($PY $W/short.py $N 0)"
echo "untraced: $($PY $W/short.py $N 0)"
PORT=9471
"$GPUTRACE" daemon --listen 127.0.0.1:$PORT --overhead-budget 1 --verbose 2> $W/d.err &
D=$!
until grep -q attached $W/d.err; do sleep 0.2; done
$PY $W/busy.py 400 &
B=$!
for i in $(seq 60); do
  sleep 1
  r=$(metric gputrace_sampling_ratio $B 'family="launch"')
  [ -n "$r" ] && awk "BEGIN{exit !($r<0.2)}" && break
done
echo "busy pid $B ratio $r after $i s"
for w in 0 1.5 0 3; do short $w; done
kill -TERM $D; wait $D
grep -E "overhead budget.*(slices of their own|attached .* of each period|periods,)" $W/d.err | tail -4
PORT=9472
"$GPUTRACE" daemon --listen 127.0.0.1:$PORT --overhead-budget 0 2> $W/e.err &
D=$!
until grep -q attached $W/e.err; do sleep 0.2; done
sleep 2
line=$($PY $W/short.py $N 0); pid=${line%% *}; sleep 3
echo "exact daemon: $line; cuLaunchKernel $(metric gputrace_api_calls_total $pid 'api="cuLaunchKernel"')"
line=$($PY $W/short.py $N 1.5); pid=${line%% *}; sleep 3
echo "exact daemon: $line; cuLaunchKernel $(metric gputrace_api_calls_total $pid 'api="cuLaunchKernel"')"
kill $B; kill -TERM $D; wait $D
[ -n "${OUT:-}" ] && mkdir -p "$OUT" && cp $W/d.err "$OUT/budget-daemon.err"
rm -rf "$W"
