#!/usr/bin/env bash
# The measured naive counterpart of the shared-start vLLM run (started by
# benchmarks/h200_cross.sh with ROUND=naive, in its own process session):
# matrices/h200-shared-naive.yaml, the cells of matrices/h200-shared.yaml at concurrency 1 and
# 8 with a fresh server per trial (12 vLLM starts). Its crossbench counterpart is the recorded
# shared run (benchmarks/results/gpu-time-per-verdict/h200-runs-shared.tgz, vllm-shared).
#
# Resumes DIR/vllm-naive if a previous call left it. Usage: bash $0 DIR
. "$(dirname "$0")/run_steps.sh" "$@"   # dir, step, variant
step vllm-naive matrices/h200-shared-naive.yaml
