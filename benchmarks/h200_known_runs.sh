#!/usr/bin/env bash
# The H200 run of the known-spread design of the llama.cpp verdict study (started by
# benchmarks/h200_cross.sh with ROUND=known, in its own process session):
# matrices/h200-verdict-known.yaml, the cells of matrices/h200-verdict.yaml with
# known-spread sequential stopping on starts of 3 trials (at most 6) and probe-and-predict.
# gpu_time_per_verdict.py compares it with the recorded naive study. No vLLM.
#
# Usage: bash $0 DIR (resumes DIR/llama-known if a previous call left it)
. "$(dirname "$0")/run_steps.sh" "$@"   # dir, step
step llama-known matrices/h200-verdict-known.yaml
