#!/usr/bin/env bash
# The recorded runs of benchmarks/gpu_time_per_verdict.py on one H200, one after the other
# (started by benchmarks/h200_cross.sh with ROUND=verdict, in its own process session):
#
#   1. llama naive: matrices/h200-verdict.yaml, a fresh server per trial, every cell;
#   2. llama crossbench: the same file with trials_per_start 3 and probe_predict (probes 3,
#      holdout 1), written by `gpu_time_per_verdict.py variant`;
#   3. vLLM crossbench: round 1's vLLM cells of matrices/h200-cross.yaml with
#      trials_per_start 3 (round 1, examples/h200-cross/round1, is their naive design).
#
# Each step resumes its run directory if a previous call left one. Usage: bash $0 DIR
. "$(dirname "$0")/run_steps.sh" "$@"   # dir, step, variant
variant matrices/h200-verdict.yaml "$dir/h200-verdict-crossbench.yaml" --trials-per-start 3 \
  --probes 3 --holdout 1
variant matrices/h200-cross.yaml "$dir/h200-cross-reuse.yaml" --trials-per-start 3
step llama-naive matrices/h200-verdict.yaml
step llama-crossbench "$dir/h200-verdict-crossbench.yaml"
step vllm-crossbench "$dir/h200-cross-reuse.yaml" --skip engine=llama \
  --skip target=t8b-q4 --skip concurrency=4 --skip concurrency=16 --skip arm=synth-a0.6 \
  --skip arm=synth-a0.8 --skip arm=synth-a1.0 --skip arm=ngram --skip n=1 --skip n=3 \
  --skip n=6 --skip n=8
