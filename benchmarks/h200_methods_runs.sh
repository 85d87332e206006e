#!/usr/bin/env bash
# The H200 rounds of the methods study (matrices/h200-methods.yaml), started by
# benchmarks/h200_cross.sh with ROUND=methods (PART=1, in its own process session), or by hand
# on the same warm machine with PART=2 into the same run directory (--resume adds the cells):
#   PART=1  llama.cpp, alpha 0.9, n = 2, 4, 8 (DFlash also 15): draft model, EAGLE-3 head,
#           DFlash drafter, n-gram and the baseline, c = 1 and 16 on shared starts, two fresh
#           starts per server group;
#   PART=2  the rest of llama.cpp's cells: alpha 0.7, and n = 1 at both alphas;
#   PART=3  vLLM, alpha 0.9: EAGLE-3 head at n = 2, 4, 8, DFlash at n = 4, 8, 15, draft model
#           at n = 4, n-gram (n = 4) and the baseline, c = 1 and 16 on shared starts, one
#           start per server group (9 starts; the matrix's trials: 1).
# Planned with (PART=1; PART=2 is --only engine=llama less PART=1's cells)
#   crossbench plan matrices/h200-methods.yaml --block 1 --only engine=llama \
#     --skip arm=draft-a0.7 --skip arm=eagle3-a0.7 --skip arm=dflash-a0.7 --skip n=1
# vLLM's cells need its pack carried first (docs/vllm-offline.md). PART=3 was planned with
#   crossbench plan matrices/h200-methods.yaml --block 1 $VLLM_R2   (about 18.5 min)
#
# Usage: [PART=1|2|3|4] bash $0 DIR (resumes what a previous call left in DIR)
. "$(dirname "$0")/run_steps.sh" "$@"   # dir, step
VLLM_R2="--only engine=vllm --skip arm=draft-a0.7 --skip arm=eagle3-a0.7 --skip arm=dflash-a0.7
  --skip n=1 --skip arm=dflash-a0.9,n=2 --skip arm=draft-a0.9,n=2 --skip arm=draft-a0.9,n=8"
# PART=4: the methods PART=3 did not reach before its machine was lost, with a baseline of
# their own on the new machine: DFlash n = 8, draft model n = 4, n-gram
VLLM_R2B="--only engine=vllm --skip arm=draft-a0.7 --skip arm=eagle3-a0.7 --skip arm=dflash-a0.7
  --skip arm=eagle3-a0.9 --skip n=1 --skip n=2 --skip arm=dflash-a0.9,n=4
  --skip arm=dflash-a0.9,n=15 --skip arm=draft-a0.9,n=8"
case "${PART:-1}" in
  1) step llama-methods matrices/h200-methods.yaml --only engine=llama \
       --skip arm=draft-a0.7 --skip arm=eagle3-a0.7 --skip arm=dflash-a0.7 --skip n=1 ;;
  2) step llama-methods matrices/h200-methods.yaml --only engine=llama ;;
  3) step vllm-methods matrices/h200-methods.yaml $VLLM_R2 ;;
  4) step vllm-methods-b matrices/h200-methods.yaml $VLLM_R2B ;;
esac
