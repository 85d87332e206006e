#!/usr/bin/env bash
# The H200 run of the llama.cpp start-spread calibration (started by benchmarks/h200_cross.sh
# with ROUND=spread, in its own process session): matrices/h200-start-spread.yaml, 5 cells x 6
# trials, each trial on a fresh server start. `crossbench start-spread` reads the spread off
# the run; gpu_time_per_verdict.py uses it as the llama.cpp prior. No vLLM.
#
# Usage: bash $0 DIR (resumes DIR/llama-spread if a previous call left it)
. "$(dirname "$0")/run_steps.sh" "$@"   # dir, step
step llama-spread matrices/h200-start-spread.yaml
