#!/usr/bin/env bash
# The H200 run of the calibrated holdout gate (started by benchmarks/h200_cross.sh with
# ROUND=gate, in its own process session): the llama.cpp crossbench design of
# matrices/h200-verdict.yaml (trials_per_start 3, probe_predict with probes 3 and holdout 1,
# written by `gpu_time_per_verdict.py variant`), as in h200_shared_runs.sh, run by the gate
# that widens the predictions by the holdouts' miss instead of measuring them all when the
# verdict was right. Its naive counterpart is the recorded llama naive run. No vLLM.
#
# Usage: bash $0 DIR (resumes DIR/llama-crossbench if a previous call left it)
. "$(dirname "$0")/run_steps.sh" "$@"   # dir, step, variant
variant matrices/h200-verdict.yaml "$dir/h200-verdict-crossbench.yaml" --trials-per-start 3 \
  --probes 3 --holdout 1
step llama-crossbench "$dir/h200-verdict-crossbench.yaml"
