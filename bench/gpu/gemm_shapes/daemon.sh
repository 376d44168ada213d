#!/bin/bash
# The daemon's GEMM series on a real job: job.py's 300 calls per shape,
# traced exactly (--overhead-budget 0) with --gpu-time; /metrics scraped
# after the phases.
#
#   daemon.sh GPUTRACE   (results in $OUT)
B=$(readlink -f "${1:?usage: daemon.sh GPUTRACE}")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gemm_daemon}
export GPUTRACE_CACHE_DIR=/tmp/gtcache
W=$(mktemp -d /tmp/dg.XXXXXX)
$B daemon --listen 127.0.0.1:9466 --gpu-time --overhead-budget 0 > $W/d.out 2> $W/d.err &
D=$!
sleep 3
$PY "$HERE/job.py" $W > $W/job.out 2>&1 &
while [ ! -s $W/job.pid ]; do sleep 0.2; done
sleep 8
touch $W/go; while [ ! -e $W/done ]; do sleep 0.5; done
sleep 4
curl -s 127.0.0.1:9466/metrics > $W/m.txt
touch $W/stop; sleep 1; kill -TERM $D; wait $D; echo "daemon exit $?"
grep -E "^gputrace_gemm_(calls_total|gpu_seconds_total)" $W/m.txt | head -20
grep -c "^gputrace_gemm_seconds_bucket" $W/m.txt
tail -5 $W/d.err
mkdir -p $OUT; cp $W/m.txt $OUT/metrics.txt
