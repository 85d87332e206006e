# The step runner of the H200 run lists (h200_verdict_runs.sh, h200_shared_runs.sh,
# h200_gate_runs.sh), sourced with the run directory parent as $1. It gives them:
#   dir    that parent, made if missing;
#   step NAME MATRIX [matrix options...]   one `crossbench matrix` run into $dir/NAME,
#          resumed if a previous call left it, its output in $dir/NAME.log;
#   variant SRC DST [options...]   `gpu_time_per_verdict.py variant`: the crossbench design
#          of a naive matrix.
set -uo pipefail
dir=${1:?run directory parent}; mkdir -p "$dir"
variant() { python3 benchmarks/gpu_time_per_verdict.py variant "$@"; }
step() {
  local name=$1 matrix=$2; shift 2
  local resume=""; [ -f "$dir/$name/state.json" ] && resume=--resume
  echo "[$(date -u +%H:%M:%S)] $name: start $resume"
  python3 -m crossbench matrix "$matrix" --out "$dir/$name" $resume --progress plain "$@" \
    >>"$dir/$name.log" 2>&1
  local rc=$?  # before the date below: a command substitution resets $?
  echo "[$(date -u +%H:%M:%S)] $name: exit $rc"
}
