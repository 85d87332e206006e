# The prelude of one device call, sourced by h200_sglang_check.sh, which runs in chained calls
# of at most 10 minutes (benchmarks/study/run.sh carries the same prelude inline). The caller sets LOG (a folder under
# /tmp, which lasts while the machine stays warm) before sourcing it; it gives them:
#   left   seconds of BUDGET_S (default 560) this call has left;
#   cb     crossbench from the checkout;
#   say    a timestamped line on stdout and in $LOG/calls.txt;
#   pack_complete DIR   whether every part that DIR/pack.json lists has arrived in DIR;
# and installs crossbench's own dependencies (pydantic, gguf, orjson...), which the image
# lacks, from the carried .whl/ into /tmp/site, once per machine.
set -uo pipefail
: "${OUT:?set OUT to a directory for the results}"
: "${LOG:?set LOG to a folder under /tmp before sourcing device_call.sh}"
export CROSSBENCH_CACHE=$PWD/.cbcache PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
budget=${BUDGET_S:-560}; t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) )); }
cb() { python3 -m crossbench "$@"; }
mkdir -p "$LOG"
say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG/calls.txt"; }

if ls .whl/*.whl >/dev/null 2>&1 && [ ! -f /tmp/site/.done ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
    && touch /tmp/site/.done
fi
export PYTHONPATH=/tmp/site:$PYTHONPATH

pack_complete() {
  [ -f "$1/pack.json" ] && python3 - "$1" <<'EOF'
import json, os, sys
parts = json.load(open(os.path.join(sys.argv[1], "pack.json")))["parts"]
sys.exit(0 if all(os.path.exists(os.path.join(sys.argv[1], p["name"])) for p in parts) else 1)
EOF
}
