#!/usr/bin/env bash
# Issue 8's study on one H200, in device calls of at most 10 minutes: each call builds what is
# missing (CUDA llama-server, qwen3-8b fixtures), runs `crossbench matrix matrices/h200.yaml`
# with --resume until BUDGET_S is nearly spent, and copies the run directory to $OUT; the
# call that finds the matrix complete also runs the analysis, llama-bench tg128 and the
# roofline. The cache lives in the working tree (.cbcache/, ignored), so it survives between
# calls while the machine stays warm.
# Usage: OUT=/some/dir BUDGET_S=560 bash benchmarks/h200_study.sh
set -uo pipefail
: "${OUT:?set OUT to a directory for the results}"
export CROSSBENCH_CACHE=$PWD/.cbcache PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if ls .whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
fi
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site:$PYTHONPATH
budget=${BUDGET_S:-560}; t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) )); }
cb() { python3 -m crossbench "$@"; }
RUN=$CROSSBENCH_CACHE/h200-run
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm \
  --format=csv,noheader | tee -a "$OUT/gpu.txt"
if ! ls "$CROSSBENCH_CACHE"/engines/*-cuda-sm90/bin/llama-server >/dev/null 2>&1; then
  s=$(date +%s)
  cb engines install llama.cpp --cuda --cuda-arch 90 \
    --source-archive .carry/llama-cpp-python-0.3.36.src.tgz >"$OUT/build.log" 2>&1 || exit 1
  echo "build_seconds=$(( $(date +%s) - s ))" | tee -a "$OUT/gpu.txt"
fi
s=$(date +%s)
cb fixtures make --shape qwen3-8b --quant Q4_K_M --draft-quant Q8_0 2>&1 | tail -3
echo "fixtures_seconds=$(( $(date +%s) - s ))" | tee -a "$OUT/gpu.txt"
resume=(); [ -f "$RUN/state.json" ] && resume=(--resume)
run_s=$(( $(left) - 45 ))
if [ "$run_s" -gt 30 ]; then
  timeout -s INT "$run_s" python3 -m crossbench matrix matrices/h200.yaml --out "$RUN" \
    "${resume[@]}" --progress plain >"$OUT/matrix-$(date +%s).log" 2>&1
  echo "matrix exit $? after a budget of ${run_s}s"
fi
cb status "$RUN" --json >"$OUT/status.json" 2>/dev/null
missing=$(python3 -c "import json;print(json.load(open('$OUT/status.json'))['totals']['missing'])")
echo "trials missing: $missing"
if [ "$missing" = 0 ]; then
  cb analyze "$RUN" >"$OUT/verdicts.txt" 2>&1
  target=$(ls "$CROSSBENCH_CACHE"/fixtures/qwen3-8b*/target-Q4_K_M.gguf | head -1)
  bench=$(ls "$CROSSBENCH_CACHE"/engines/*-cuda-sm90/bin/llama-bench | head -1)
  "$bench" -m "$target" -ngl 99 -p 0 -n 128 -r 3 -o json >"$OUT/llama-bench-tg128.json" \
    2>"$OUT/llama-bench.log"
  python3 benchmarks/roofline.py "$target" --out "$OUT/roofline.json"
fi
tar -C "$CROSSBENCH_CACHE" -czf "$OUT/h200-run.tgz" h200-run 2>/dev/null
ls -la "$OUT"
