#!/bin/bash
# Device run 3: host cost per launch (C driver loop and the PyTorch loop):
# none / bare uprobe / gputrace; training step time; `gputrace stats` and a
# JSONL line of a real job; `gputrace top` captured; daemon /metrics.
cd "$(dirname "$0")"
B=$PWD/gputrace
export GPUTRACE_CACHE_DIR=/tmp/gtcache PYTHONUNBUFFERED=1
LIBCUDA=$(ls /usr/local/nvidia/lib64/libcuda.so.5* | head -1)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl && export PYTHONPATH=/tmp/site
w() { for i in $(seq 1200); do [ -f $1 ] && return 0; sleep 0.05; done; echo "timeout $1"; }
tracer() { # mode pid -> starts a tracer in the background, sets TP
  case $1 in
    none) TP="";;
    bare) $B __bare --library $LIBCUDA --symbols cuLaunchKernel --pid $2 >> $OUT/tracers.txt 2>&1 & TP=$!; sleep 1;;
    bare_ret) $B __bare --library $LIBCUDA --symbols cuLaunchKernel --pid $2 --ret >> $OUT/tracers.txt 2>&1 & TP=$!; sleep 1;;
    gputrace) $B --pid $2 --output /tmp/oh.jsonl --summary none 2>> $OUT/tracers.txt & TP=$!; sleep 2;;
    gputrace_args) $B --pid $2 --probes launch:args,memory,memcpy,sync,names,nccl --output /tmp/oh.jsonl --summary none 2>> $OUT/tracers.txt & TP=$!; sleep 2;;
  esac
}
untrace() { [ -n "$TP" ] && { kill -INT $TP; wait $TP; }; }
echo "== C driver loop: ns per cuLaunchKernel (median of 20000 calls, per round)"
gcc -O2 -o /tmp/launch_bench launch_bench.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64/stubs -lcuda || exit 1
MODES=(none bare bare_ret gputrace gputrace_args)
rm -f /tmp/lb.*; /tmp/launch_bench /tmp/lb 15 > $OUT/launch_bench.txt 2>&1 & LB=$!
for r in $(seq 0 14); do w /tmp/lb.ready.$r; P=$(head -1 $OUT/launch_bench.txt | cut -d' ' -f2); m=${MODES[$((r % 5))]}; tracer $m $P; echo "round $r $m" >> $OUT/lb_modes.txt; touch /tmp/lb.go.$r; w /tmp/lb.done.$r; untrace; done
wait $LB; paste -d' ' $OUT/lb_modes.txt <(grep round $OUT/launch_bench.txt)
echo "== PyTorch loop (20000 x.add_), us per launch"
MODES=(none bare_ret gputrace)
rm -f /tmp/oh.*; python3 overhead2.py /tmp/oh 9 > $OUT/overhead2.txt 2>&1 & PY=$!
for r in $(seq 0 8); do w /tmp/oh.ready.$r; P=$(cat /tmp/oh.ready.$r); m=${MODES[$((r % 3))]}; tracer $m $P; echo "round $r $m" >> $OUT/oh_modes.txt; touch /tmp/oh.go.$r; w /tmp/oh.done.$r; untrace; done
wait $PY; cat $OUT/oh_modes.txt $OUT/overhead2.txt
echo "== training step time"
for i in 1 2 3; do python3 train.py 2>&1 | sed 's/^/plain /'; $B --summary none -- python3 train.py 2>/dev/null | sed 's/^/gputrace /'; done | tee $OUT/train3.txt
echo "== a real job: stats, JSONL line, top, daemon"
python3 train_loop.py > /tmp/tl.out 2>&1 & TL=$!
sleep 12
$B --pid $TL --duration 3s --output /tmp/train.jsonl --summary none 2> $OUT/train_attach_stderr.txt
$B stats /tmp/train.jsonl > $OUT/stats.txt 2>&1; head -70 $OUT/stats.txt
grep -m1 '"cuLaunchKernel"' /tmp/train.jsonl > $OUT/jsonl_lines.txt; grep -m1 '"ncclAllReduce"' /tmp/train.jsonl >> $OUT/jsonl_lines.txt; grep -m1 '"cuMemcpyAsync"' /tmp/train.jsonl >> $OUT/jsonl_lines.txt; cat $OUT/jsonl_lines.txt
which tmux || echo "no tmux"
python3 top_capture.py 120 40 7 $B top > $OUT/top_120x40.txt 2>&1; cat $OUT/top_120x40.txt
python3 top_capture.py 80 24 5 $B top > $OUT/top_80x24.txt 2>&1
if $B daemon --help > /dev/null 2>&1; then
  $B daemon --listen 127.0.0.1:9464 > /tmp/d.out 2> /tmp/d.err & DP=$!; sleep 4
  python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9464/metrics').read().decode())" > $OUT/metrics.txt
  kill -TERM $DP; wait $DP; grep -E "^gputrace_api_calls_total|^gputrace_nccl|^gputrace_device|^gputrace_memcpy|^# HELP" $OUT/metrics.txt | head -30; cat /tmp/d.err | head -5
fi
kill $TL; wait $TL 2>/dev/null
