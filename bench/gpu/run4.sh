#!/bin/bash
# Device run 4: training step time with and without gputrace, interleaved; top at 80x24.
cd "$(dirname "$0")"
B=$PWD/gputrace
export GPUTRACE_CACHE_DIR=/tmp/gtcache PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl && export PYTHONPATH=/tmp/site
for i in 1 2 3; do python3 train.py 2>&1 | sed 's/^/plain    /'; $B --summary none -- python3 train.py 2>/dev/null | sed 's/^/gputrace /'; done
python3 train_loop.py > /tmp/tl.out 2>&1 & TL=$!
sleep 12
python3 top_capture.py 80 24 6 $B top
kill $TL
