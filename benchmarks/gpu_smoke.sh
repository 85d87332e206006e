#!/usr/bin/env bash
# GPU smoke run of the whole pipeline on a machine without network (how the H200 check was run).
# Needs: the pruned source from `crossbench engines pack-source --out .carry/<pin>.src.tgz`,
# wheels of the Python dependencies the host lacks in .whl/ (see docs/gpu.md), nvcc, cmake, ninja.
# Usage: OUT=/some/dir bash benchmarks/gpu_smoke.sh
set -euo pipefail
: "${OUT:?set OUT to a directory for the results}"
export CROSSBENCH_CACHE=${CROSSBENCH_CACHE:-/tmp/crossbench-cache}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
cb() { python3 -m crossbench "$@"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
t0=$(date +%s)
cb engines install llama.cpp --cuda --cuda-arch 90 \
  --source-archive .carry/llama-cpp-python-0.3.36.src.tgz 2>&1 | grep -v "build: step" | tail -4
echo "build_seconds=$(( $(date +%s) - t0 ))" | tee -a "$OUT/gpu.txt"
target=$(cb fixtures path target 2>/dev/null); draft=$(cb fixtures path draft 2>/dev/null)
common=(--variant cuda-sm90 --ngl 99 --model "$target" --requests 16 --max-tokens 256 --trials 3)
cb run "${common[@]}" --spec none --out "$OUT/runs/base" | tee "$OUT/base.txt"
cb run "${common[@]}" --spec draft-simple --n 4 --draft "$draft" --out "$OUT/runs/draft" \
  | tee "$OUT/draft.txt"
cb run "${common[@]}" --spec draft-simple --n 4 --draft "$draft" \
  --synth-rates 0.9,0.7,0.5,0.2 --out "$OUT/runs/synth" | tee "$OUT/synth.txt"
cb run "${common[@]}" --spec ngram-mod --out "$OUT/runs/ngram" | tee "$OUT/ngram.txt"
tar -C "$OUT" -czf "$OUT/runs.tar.gz" runs && rm -rf "$OUT/runs"
