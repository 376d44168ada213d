# Sourced by run.sh and paired.sh: `. prelude.sh NAME` makes the results
# folder $OUT/NAME (R), logs the script's output to R/run.log, and sets
# NEW (the gputrace binary, from $NEW or the given default), PY (the
# GPU machine's PyTorch Python, else python3), START and R/env.txt.
set -u
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}/$1
mkdir -p "$R"
exec > >(tee "$R/run.log") 2>&1
NEW=$(readlink -f "${NEW:-$2}")
[ -x "$NEW" ] || { echo "no gputrace binary at ${NEW:-$2} (NEW=path/to/gputrace)"; exit 2; }
PY=/opt/torch/.venv/bin/python3; [ -x "$PY" ] || PY=python3
START=$(date +%s)
{ date -u; uname -r; nproc; nvidia-smi -L 2>/dev/null; "$NEW" --version; } > "$R/env.txt" 2>&1
