#!/usr/bin/env bash
# The H200 round of the methods study (matrices/h200-methods.yaml) that one session's device
# time affords (started by benchmarks/h200_cross.sh with ROUND=methods, in its own process
# session): llama.cpp, alpha 0.9, n = 2, 4, 8 (DFlash also 15), draft model, EAGLE-3 head,
# DFlash drafter, n-gram and the baseline, at concurrency 1 and 16 on shared starts, two fresh
# starts per server group. Planned with
#   crossbench plan matrices/h200-methods.yaml --block 1 --only engine=llama \
#     --skip arm=draft-a0.7 --skip arm=eagle3-a0.7 --skip arm=dflash-a0.7 --skip n=1
# Later rounds (alpha 0.7, n = 1, vLLM) resume the same run directory with other filters.
#
# Usage: bash $0 DIR (resumes what a previous call left in DIR)
. "$(dirname "$0")/run_steps.sh" "$@"   # dir, step
step llama-methods matrices/h200-methods.yaml --only engine=llama \
  --skip arm=draft-a0.7 --skip arm=eagle3-a0.7 --skip arm=dflash-a0.7 --skip n=1
