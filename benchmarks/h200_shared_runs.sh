#!/usr/bin/env bash
# The H200 runs of 2026-12-01's second session (started by benchmarks/h200_cross.sh with
# ROUND=shared, in its own process session), one after the other:
#
#   1. llama crossbench: matrices/h200-verdict.yaml with trials_per_start 3 and probe_predict
#      (probes 3, holdout 1), written by `gpu_time_per_verdict.py variant` as in
#      h200_verdict_runs.sh, run by this version's probe rules (the best n is contended only
#      while it may beat the baseline) and holdout gate; its naive counterpart is the
#      recorded llama naive run (benchmarks/results/gpu-time-per-verdict/h200-runs.tgz);
#   2. vLLM shared: matrices/h200-shared.yaml, three concurrency levels per server start
#      (share_servers), no naive counterpart (it would take 18 vLLM starts): `crossbench
#      plan` costs that design from the measured timings instead, and says so.
#
# Each step resumes its run directory if a previous call left one. Usage: bash $0 DIR
. "$(dirname "$0")/run_steps.sh" "$@"   # dir, step, variant
variant matrices/h200-verdict.yaml \
  "$dir/h200-verdict-crossbench.yaml" --trials-per-start 3 --probes 3 --holdout 1
step llama-crossbench "$dir/h200-verdict-crossbench.yaml"
step vllm-shared matrices/h200-shared.yaml
