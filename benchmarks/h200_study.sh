#!/usr/bin/env bash
# Issue 8's study on H200s, in device calls of at most 10 minutes: each call builds what is
# missing (CUDA llama-server, then the qwen3-8b fixtures: their vocabulary comes from the
# llama.cpp source the build unpacks), runs
# `crossbench matrix matrices/h200.yaml` with --resume until BUDGET_S is nearly spent, and
# copies the run directories to $OUT (h200-<lane>.tgz) with every log of every call
# (logs.tgz: three files back per call, under the device's limit of eight); the call that finds the study complete also runs the
# analysis, llama-bench tg128 and the roofline. The cache lives in the working tree
# (.cbcache/, ignored), so it survives between calls while the machine stays warm.
#
# One GPU: the whole matrix in one run directory (h200-run).
# Two GPUs or more, Ray importable and a matrix of two lanes or more (a lane: a baseline and
# its speculative cells): one run, `crossbench matrix --executor ray --lane-gpus 1` (h200-ray),
# Ray giving each lane one GPU (docs/matrix.md, "Running on several GPUs or hosts (Ray)").
# Fallback for matrices/h200.yaml (no Ray, or one lane: it has a single baseline, which Ray
# would keep on one card): two hand-made lanes at once, each pinned to one GPU by UUID
# (CUDA_VISIBLE_DEVICES, which crossbench's telemetry and checks follow), each with its own
# baseline cell, so every speedup is paired on one GPU: gpu0 runs the alpha 0.6 and 0.8 sweeps,
# gpu1 the alpha 0.9 and 1.0 sweeps, the real draft and ngram-mod (11 to 12 minutes each, at
# once). Another MATRIX of one lane, or without Ray, runs whole on the visible GPUs (h200-run).
# Usage: OUT=/some/dir BUDGET_S=560 [MATRIX=matrices/h200.yaml] bash benchmarks/h200_study.sh
set -uo pipefail
: "${OUT:?set OUT to a directory for the results}"
export CROSSBENCH_CACHE=$PWD/.cbcache PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if ls .whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
fi
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site:$PYTHONPATH
budget=${BUDGET_S:-560}; t0=$(date +%s)
LOG=/tmp/h200-logs/call-$t0; mkdir -p "$LOG"  # /tmp lasts while the machine stays warm
left() { echo $(( budget - ($(date +%s) - t0) )); }
cb() { python3 -m crossbench "$@"; }
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,power.limit,clocks.max.sm \
  --format=csv,noheader | tee -a "$LOG/gpu.txt"
mapfile -t uuids < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)
MATRIX=${MATRIX:-matrices/h200.yaml}
n_lanes=$(python3 -c "import sys; from pathlib import Path
from crossbench.runner.matrix import expand, load_matrix
from crossbench.runner.ray_exec import plan_lanes
p = Path(sys.argv[1]); print(len(plan_lanes(expand(load_matrix(p), p), [])))" \
  "$MATRIX" 2>/dev/null || echo 0)
if [ "${#uuids[@]}" -ge 2 ] && [ "$n_lanes" -ge 2 ] && python3 -c "import ray" 2>/dev/null; then
  lanes=(ray)  # Ray spreads the lanes over the GPUs; the hand-made lanes below are the fallback
elif [ "${#uuids[@]}" -ge 2 ] && [ "$MATRIX" = matrices/h200.yaml ]; then
  lanes=(gpu0 gpu1)  # the --skip lists split matrices/h200.yaml's arms
  skips_gpu0=(--skip arm=synth-a0.9 --skip arm=synth-a1.0 --skip arm=real --skip arm=ngram-mod)
  skips_gpu1=(--skip arm=synth-a0.6 --skip arm=synth-a0.8)
else
  lanes=(run)
fi
bin=("$CROSSBENCH_CACHE"/engines/*-cuda-sm90/build/bin)
if [ ! -x "${bin[0]}/llama-server" ]; then
  s=$(date +%s)
  cb engines install llama.cpp --cuda --cuda-arch 90 \
    --source-archive .carry/llama-cpp-python-0.3.36.src.tgz >"$LOG/build.log" 2>&1 || exit 1
  echo "build_seconds=$(( $(date +%s) - s ))" | tee -a "$LOG/gpu.txt"
  bin=("$CROSSBENCH_CACHE"/engines/*-cuda-sm90/build/bin)
fi
s=$(date +%s)
cb fixtures make --shape qwen3-8b --quant Q4_K_M --draft-quant Q8_0 2>&1 | tail -3
echo "fixtures_seconds=$(( $(date +%s) - s ))" | tee -a "$LOG/gpu.txt"
run_s=$(( $(left) - 45 ))
pids=()
for i in "${!lanes[@]}"; do
  lane=${lanes[$i]}; run=$CROSSBENCH_CACHE/h200-$lane
  resume=(); [ -f "$run/state.json" ] && resume=(--resume)
  skips=(); [ "$lane" = gpu0 ] && skips=("${skips_gpu0[@]}")
  [ "$lane" = gpu1 ] && skips=("${skips_gpu1[@]}")
  visible=(); [ "$lane" = gpu0 ] || [ "$lane" = gpu1 ] && \
    visible=(env "CUDA_VISIBLE_DEVICES=${uuids[$i]}")
  executor=(); [ "$lane" = ray ] && executor=(--executor ray --lane-gpus 1)
  if [ "$run_s" -gt 30 ]; then
    "${visible[@]}" timeout -s INT "$run_s" python3 -m crossbench matrix "$MATRIX" \
      --out "$run" "${resume[@]}" "${skips[@]}" "${executor[@]}" --progress plain \
      >"$LOG/matrix-$lane.log" 2>&1 &
    pids+=($!)
  fi
done
for p in "${pids[@]}"; do wait "$p"; echo "lane exit $?"; done
missing=0
for lane in "${lanes[@]}"; do
  run=$CROSSBENCH_CACHE/h200-$lane
  cb status "$run" --json >"$LOG/status-$lane.json" 2>/dev/null
  m=$(python3 -c "import json;print(json.load(open('$LOG/status-$lane.json'))['totals']['missing'])" \
      2>/dev/null || echo unknown)
  echo "$lane: trials missing: $m"
  [ "$m" = 0 ] || missing=1
done
if [ "$missing" = 0 ]; then
  for lane in "${lanes[@]}"; do  # 3 trials x 3 prompts: 9 pairs a cell
    cb analyze "$CROSSBENCH_CACHE/h200-$lane" --min-samples 9 >"$LOG/verdicts-$lane.txt" 2>&1
  done
  target=$(ls "$CROSSBENCH_CACHE"/fixtures/qwen3-8b*/target-Q4_K_M.gguf | head -1)
  for i in "${!uuids[@]}"; do  # the engine's own reference, on every GPU of the study
    CUDA_VISIBLE_DEVICES=${uuids[$i]} "${bin[0]}/llama-bench" -m "$target" -ngl 99 -p 0 \
      -n 128 -r 3 -o json >"$LOG/llama-bench-tg128-gpu$i.json" 2>"$LOG/llama-bench-gpu$i.log"
  done
  CUDA_VISIBLE_DEVICES=${uuids[0]} python3 benchmarks/roofline.py "$target" --out "$LOG/roofline.json"
fi
# Occasion check (two GPUs): the baseline and the alpha 1.0 sweep again on gpu1, alone on the
# host, after the lanes: does a repeat on another occasion land inside the lanes' intervals?
solo=$CROSSBENCH_CACHE/h200-solo-gpu1
if [ "$missing" = 0 ] && [ "${#lanes[@]}" = 2 ] && [ "$(left)" -gt 320 ]; then
  resume=(); [ -f "$solo/state.json" ] && resume=(--resume)
  CUDA_VISIBLE_DEVICES=${uuids[1]} timeout -s INT $(( $(left) - 30 )) python3 -m crossbench \
    matrix matrices/h200.yaml --out "$solo" "${resume[@]}" --skip arm=synth-a0.6 \
    --skip arm=synth-a0.8 --skip arm=synth-a0.9 --skip arm=real --skip arm=ngram-mod \
    --progress plain >"$LOG/matrix-solo-gpu1.log" 2>&1
  echo "solo exit $?"
fi
for lane in "${lanes[@]}" solo-gpu1; do
  [ -d "$CROSSBENCH_CACHE/h200-$lane" ] || continue
  tar -C "$CROSSBENCH_CACHE" -czf "$OUT/h200-$lane.tgz" "h200-$lane" 2>/dev/null
done
tar -C /tmp -czf "$OUT/logs.tgz" h200-logs
ls -la "$OUT"
