#!/bin/bash
# Device run 1: core counts (-- CMD), names after attach vs torch.profiler,
# launch overhead (none / bare uprobe / gputrace), training step time.
cd "$(dirname "$0")"
B=$PWD/gputrace
export GPUTRACE_CACHE_DIR=/tmp/gtcache PYTHONUNBUFFERED=1
exec > >(tee $OUT/log.txt) 2>&1
nvidia-smi -L; uname -r; python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'
LIBCUDA=$(ls /usr/local/nvidia/lib64/libcuda.so.5* | head -1); echo $LIBCUDA
NCCL=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib/libnccl.so.2"))')
$B __symbols $LIBCUDA > $OUT/symbols_cuda.txt; tail -1 $OUT/symbols_cuda.txt
$B __symbols $NCCL > $OUT/symbols_nccl.txt; tail -1 $OUT/symbols_nccl.txt
echo "== calibrate"; time $B __calibrate $LIBCUDA
ldconfig -p | grep -E "libcuda|libnccl" | head -3
echo "== 1. reference workload from its first call"
time $B --output /tmp/cmd.jsonl --summary text -- python3 torch_workload.py > $OUT/cmd_summary.txt 2> $OUT/cmd_stderr.txt
tail -5 $OUT/cmd_stderr.txt; grep -E "launch loop|matmul" $OUT/cmd_summary.txt
python3 counts.py /tmp/cmd.jsonl > $OUT/cmd_counts.txt; cat $OUT/cmd_counts.txt
echo "== 2. attach after warm-up: names vs torch.profiler"
rm -f /tmp/an.*; python3 attach_names.py /tmp/an.ready /tmp/an.go $OUT/profiler_kernels.json &
while [ ! -f /tmp/an.ready ]; do sleep 0.1; done; P=$(cat /tmp/an.ready)
$B --pid $P --output /tmp/attach.jsonl --summary text > $OUT/attach_summary.txt 2> $OUT/attach_stderr.txt &
TP=$!; for i in $(seq 100); do grep -q attached $OUT/attach_stderr.txt && break; sleep 0.1; done; cat $OUT/attach_stderr.txt
touch /tmp/an.go; wait $TP; wait
python3 compare_names.py /tmp/attach.jsonl $OUT/profiler_kernels.json > $OUT/attach_names.txt 2>&1; cat $OUT/attach_names.txt
echo "== 3. overhead per launch"
rm -f /tmp/oh.*; python3 overhead.py /tmp/oh none,bare,bare_ret,gputrace,gputrace_args > $OUT/overhead.txt &
w() { while [ ! -f /tmp/oh.$1 ]; do sleep 0.05; done; }
w ready.none; P=$(cat /tmp/oh.ready.none); touch /tmp/oh.go.none; w done.none
w ready.bare; $B __bare --library $LIBCUDA --symbols cuLaunchKernel --pid $P > $OUT/bare.txt 2>&1 & BP=$!; sleep 1; touch /tmp/oh.go.bare; w done.bare; kill -INT $BP; wait $BP
w ready.bare_ret; $B __bare --library $LIBCUDA --symbols cuLaunchKernel --pid $P --ret >> $OUT/bare.txt 2>&1 & BP=$!; sleep 1; touch /tmp/oh.go.bare_ret; w done.bare_ret; kill -INT $BP; wait $BP
w ready.gputrace; $B --pid $P --output /tmp/oh.jsonl --summary none 2>> $OUT/bare.txt & BP=$!; sleep 2; touch /tmp/oh.go.gputrace; w done.gputrace; kill -INT $BP; wait $BP
w ready.gputrace_args; $B --pid $P --probes launch:args,memory,memcpy,sync,names,nccl --output /tmp/oh2.jsonl --summary none 2>> $OUT/bare.txt & BP=$!; sleep 2; touch /tmp/oh.go.gputrace_args; w done.gputrace_args; kill -INT $BP; wait $BP
wait; cat $OUT/overhead.txt $OUT/bare.txt
echo "== 4. training loop"
python3 train.py > $OUT/train.txt 2>&1
$B --summary text --output /tmp/train.jsonl -- python3 train.py > $OUT/train_traced.txt 2>&1
cat $OUT/train.txt; grep -E "train step|Events lost|EVENTS|gputrace summary" $OUT/train_traced.txt
head -50 $OUT/attach_summary.txt
cp /tmp/attach.jsonl $OUT/ 2>/dev/null; gzip -c /tmp/cmd.jsonl > $OUT/cmd.jsonl.gz
