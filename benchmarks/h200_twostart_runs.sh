#!/usr/bin/env bash
# GPU time per verdict with two server starts per cell (started by benchmarks/h200_cross.sh
# with ROUND=twostart, in its own process session), one after the other:
#
#   1. vllm-twostart: matrices/h200-shared.yaml with trials_per_start 2 (written by
#      `gpu_time_per_verdict.py variant`): every cell's 3 trials on 2 shared starts (blocks of
#      2 and 1), so its interval samples start-to-start variation, which the one-start
#      shared run of 2026-12-01 could not (docs/matrix.md, "Server reuse"); 4 vLLM starts;
#   2. vllm-naive-c4: matrices/h200-shared-naive-c4.yaml, the naive design's concurrency-4
#      cells (6 starts), which with the recorded naive run of c1 and c8
#      (benchmarks/results/gpu-time-per-verdict/h200-runs-naive.tgz) makes the whole naive
#      study of these cells.
#
# Each step resumes its run directory if a previous call left one. Usage: bash $0 DIR
. "$(dirname "$0")/run_steps.sh" "$@"   # dir, step, variant
variant matrices/h200-shared.yaml "$dir/h200-shared-twostart.yaml" --trials-per-start 2
step vllm-twostart "$dir/h200-shared-twostart.yaml"
step vllm-naive-c4 matrices/h200-shared-naive-c4.yaml
