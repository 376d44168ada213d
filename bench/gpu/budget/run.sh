#!/bin/bash
# The overhead budget on the DDP benchmark (issue 13): torchrun, 2 ranks of
# ddp_bench.py (GPT-2 small shape, bf16, batch 8x512); rounds of an untraced
# window (UNTRACED s) and a `gputrace daemon --overhead-budget 1` window
# (WINDOW s, counted from the daemon's first settled sampled period); round
# 0 also an exact daemon window (--overhead-budget 0) for the launch count
# reference. Launch counts per step come from gputrace_api_calls_total and
# gputrace_sampling_estimated_until_seconds (steps up to that time).
# Kind nvidia-h200-x2, from the repository root:
#   NEW=path/to/gputrace WINDOW=30 UNTRACED=20 ROUNDS=5 bash bench/gpu/budget/run.sh
# (about 6.5 minutes). NRANKS (default 2): ranks of the job (1 where a
# machine has one GPU; the figures are per rank). EXACT_WINDOW: the exact window's length (WINDOW
# unless given). Each traced window's calls of every API at its start and
# end: apis.winN.on / .off. BENCH_ARGS="--tiny 2000 --idle-ms 40": each step
# launches 2,000 tiny kernels and sleeps 40 ms instead of training.
# Results in $OUT/perf5 (report.txt, windows.tsv, daemon.stderr, the ranks'
# step files). DRY=1: two simulated-libcuda
# processes instead of torchrun, to check the script on a CPU machine.
D=$(cd "$(dirname "$0")" && pwd)
. "$D/prelude.sh" perf5 .gpu/gputrace-s4
WINDOW=${WINDOW:-25} ROUNDS=${ROUNDS:-6} NRANKS=${NRANKS:-2}
RANKS=$(seq 0 $((NRANKS - 1)))
LAST=$((NRANKS - 1))
MODES=${MODES:-"untraced new"}
export GPUTRACE_CACHE_DIR=/tmp/gtcache-perf5
timeout -s TERM 12 "$NEW" daemon --listen 127.0.0.1:0 --overhead-budget 1 --verbose > "$R/hitcost.$(basename "$NEW").txt" 2>&1
cat "$R"/hitcost.*.txt
W=$(mktemp -d /tmp/perf5.XXXXXX)
PORT=$((19000 + $$ % 1000))
JOB="" TP=""
cleanup() { [ -n "$TP" ] && kill -TERM $TP 2>/dev/null; touch "$W/stop"; sleep 3; [ -n "$JOB" ] && kill $JOB 2>/dev/null; for j in $JOB; do timeout 20 tail --pid=$j -f /dev/null; done; }
trap cleanup EXIT
if [ -n "${DRY:-}" ]; then  # a CPU check of this script: simulated libcuda (target/sim)
  export GPUTRACE_SIM=$(readlink -f target/sim)
  for k in $RANKS; do $PY "$D/../ddp_bench.py" --dry --rank $k --dir "$W" --warmup 5 > "$W/rank$k.log" 2>&1 & JOB="$JOB $!"; done
else
  $PY -m torch.distributed.run --standalone --nproc_per_node=$NRANKS "$D/../ddp_bench.py" --dir "$W" ${BENCH_ARGS:-} > "$W/job.log" 2>&1 & JOB=$!
fi
for i in $(seq 1200); do [ -f "$W/rank0.ready" ] && [ -f "$W/rank$LAST.ready" ] && break; sleep 0.25; done
[ -f "$W/rank$LAST.ready" ] || { echo "ranks did not start"; tail -30 "$W/job.log"; exit 1; }
PIDS=$(for k in $RANKS; do cat "$W/rank$k.pid"; echo; done | xargs)
echo "ranks $PIDS ready after $(( $(date +%s) - START )) s; window ${WINDOW}s, $ROUNDS rounds, modes: $MODES"
for p in $PIDS; do echo "pid $p: $(wc -l < /proc/$p/maps) mappings, $(ls /proc/$p/task | wc -l) threads"; done
now() { date +%s.%N; }
procstat() { # -> "cpu0,cpu1 mainsys0,mainsys1 vcs0,vcs1 nvcs0,nvcs1 isys0,isys1 iusr0,iusr1 steal"
  # (ticks; main thread's switches; i*: the issuing threads, main and
  # autograd; steal: the machine's, from /proc/stat)
  $PY - $PIDS <<'PYEOF'
import os, sys
out = [[], [], [], [], [], []]
def stat(p, t):
    return open(f"/proc/{p}/task/{t}/stat").read().rsplit(")", 1)[1].split()
for p in sys.argv[1:]:
    f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
    issuing = {k: stat(p, k) for k in os.listdir(f"/proc/{p}/task")
               if k == p or open(f"/proc/{p}/task/{k}/comm").read().startswith("pt_autograd")}
    s = dict(l.split(":", 1) for l in open(f"/proc/{p}/task/{p}/status") if ":" in l)
    out[0].append(str(int(f[11]) + int(f[12]))); out[1].append(issuing[p][12])
    out[2].append(s["voluntary_ctxt_switches"].strip()); out[3].append(s["nonvoluntary_ctxt_switches"].strip())
    out[4].append(str(sum(int(x[12]) for x in issuing.values()))); out[5].append(str(sum(int(x[11]) for x in issuing.values())))
steal = open("/proc/stat").readline().split()[8]
print(" ".join(",".join(x) for x in out), steal)
PYEOF
}
launches_metrics() { # -> "L0,L1 when until0,until1 calls0,calls1" (calls: every API)
  $PY - "$PORT" $PIDS <<'PYEOF'
import re, sys, time, urllib.request
port, pids = sys.argv[1], sys.argv[2:]
try:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
except Exception:
    print("- - - -"); sys.exit()
n = {p: 0.0 for p in pids}
every = {p: 0.0 for p in pids}
for m in re.finditer(r'^gputrace_api_calls_total\{api="[^"]*",pid="(\d+)"[^}]*\} (\S+)', body, re.M):
    if m.group(1) in every:
        every[m.group(1)] += float(m.group(2))
u = {p: "-" for p in pids}
for m in re.finditer(r'^gputrace_api_calls_total\{api="(cuLaunchKernel[^"]*)",pid="(\d+)"[^}]*\} (\S+)', body, re.M):
    if m.group(2) in n:
        n[m.group(2)] += float(m.group(3))
for m in re.finditer(r'^gputrace_sampling_estimated_until_seconds\{pid="(\d+)"[^}]*\} (\S+)', body, re.M):
    if m.group(1) in u:
        u[m.group(1)] = m.group(2)
print(",".join(str(int(n[p])) if n[p] else "-" for p in pids), f"{time.time():.6f}", ",".join(u[p] for p in pids),
      ",".join(str(int(every[p])) for p in pids))
PYEOF
}
api_dump() { # FILE: each pid's calls of every API (gputrace_api_calls_total)
  $PY - "$PORT" "$1" <<'PYEOF'
import sys, urllib.request
port, path = sys.argv[1:]
try:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
except Exception:
    body = ""
open(path, "w").write("".join(l + "\n" for l in body.splitlines() if l.startswith("gputrace_api_calls_total{")))
PYEOF
}
printf "mode\tround\tt_on\tt_off\tlaunches\tc_on\tc_off\tu_on\tu_off\tcpu_a\tcpu_b\tmsys_a\tmsys_b\tvcs_a\tvcs_b\tnvcs_a\tnvcs_b\tdaemon_cpu\tisys_a\tisys_b\tiusr_a\tiusr_b\tsteal_a\tsteal_b\tcalls_on\tcalls_off\n" > "$R/windows.tsv"
n=0
for r in $(seq 0 $((ROUNDS - 1))); do
  modes=$MODES; [ $r = 0 ] && modes="$MODES exact"
  for m in $modes; do
    n=$((n + 1)); L=- c_on=- c_off=- u_on=- u_off=- dcpu=- x_on=- x_off=-
    if [ $m = untraced ]; then
      read ca ma va na ia ua sa < <(procstat); t_on=$(now); sleep ${UNTRACED:-20}; t_off=$(now); read cb mb vb nb ib ub sb < <(procstat)
    else
      case $m in
        new|new_again) cmd=("$NEW" daemon --overhead-budget 1 --verbose);;  # new_again: reported apart (a daemon started again, from the ratio the one before read)
        new_p5) cmd=(env GPUTRACE_SAMPLE_PERIOD=5s "$NEW" daemon --overhead-budget 1 --verbose);;
        exact) cmd=("$NEW" daemon --overhead-budget 0);;
      esac
      "${cmd[@]}" --listen 127.0.0.1:$PORT > "$W/win$n.out" 2> "$W/win$n.err" & TP=$!
      # Counts from when the first sampled period is settled (exact: once both pids show).
      for i in $(seq 400); do read a w u x < <(launches_metrics); [[ "$a" != *-* ]] && { [ $m = exact ] || [[ "$u" != *-* ]]; } && break; sleep 0.1; done
      read a0 c_on u_on x_on < <(launches_metrics); read ca ma va na ia ua sa < <(procstat)
      d0=$(awk '{print $14+$15}' /proc/$TP/stat 2>/dev/null || echo 0)
      api_dump "$R/apis.win$n.on"
      t_on=$(now); sleep $([ $m = exact ] && echo ${EXACT_WINDOW:-$WINDOW} || echo $WINDOW); t_off=$(now)
      read a1 c_off u_off x_off < <(launches_metrics); read cb mb vb nb ib ub sb < <(procstat)
      api_dump "$R/apis.win$n.off"
      d1=$(awk '{print $14+$15}' /proc/$TP/stat 2>/dev/null || echo 0); dcpu=$((d1 - d0))
      kill -TERM $TP; wait $TP; TP=""
      { echo "== window $n $m"; cat "$W/win$n.err"; } >> "$R/daemon.stderr"
      [[ "$a0$a1" != *-* ]] && L=$($PY -c 'import sys; print(",".join(str(int(b) - int(a)) for a, b in zip(sys.argv[1].split(","), sys.argv[2].split(","))))' "$a0" "$a1")
    fi
    printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" $m $r $t_on $t_off $L $c_on $c_off $u_on $u_off $ca $cb $ma $mb $va $vb $na $nb $dcpu $ia $ib $ua $ub $sa $sb $x_on $x_off >> "$R/windows.tsv"
    echo "$(date +%T) round $r $m done"
  done
done
cp "$W"/rank*.steps "$R/"
$PY "$D/report.py" "$R" | tee "$R/report.txt"
echo "perf5 done after $(( $(date +%s) - START )) s"
