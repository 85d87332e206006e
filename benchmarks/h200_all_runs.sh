#!/usr/bin/env bash
# The H200 runs of the llama.cpp verdict study with all prompts (started by
# benchmarks/h200_cross.sh with ROUND=all, in its own process session), both designs on one
# machine: first matrices/h200-verdict-all-known.yaml (known-spread sequential stopping with
# looks every 12 requests, probe-and-predict), then the naive matrices/h200-verdict-all.yaml
# (every cell x 3 fresh starts x 48 prompts). gpu_time_per_verdict.py compares them. No vLLM.
#
# Usage: bash $0 DIR (resumes what a previous call left in DIR)
. "$(dirname "$0")/run_steps.sh" "$@"   # dir, step
step llama-all-known matrices/h200-verdict-all-known.yaml
step llama-all-naive matrices/h200-verdict-all.yaml
