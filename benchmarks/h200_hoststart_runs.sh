#!/usr/bin/env bash
# Host time against the host CPU (started by benchmarks/h200_cross.sh with ROUND=hoststart, in
# its own process session): the naive design's concurrency-1 cells of
# matrices/h200-shared-naive.yaml (vLLM 0.26.0 baseline and draft_model alpha 0.9 at n = 4,
# a fresh server per trial: 6 starts), with benchmarks/host_sampler.py writing the CPU's
# time shares (steal among them) and a single-thread probe once a second to
# $dir/host-cpu.csv. The draft arm's host time per token moved 1.47-7.66 ms between starts
# and machines while its GPU work stayed at 2.81-3.05 ms (benchmarks/README.md, "Host-bound
# speculative arms"); benchmarks/host_steal.py sets each trial's host time beside the
# sampler's rows of its measured window.
#
# Resumes its run directory if a previous call left one. Usage: bash $0 DIR
. "$(dirname "$0")/run_steps.sh" "$@"   # dir, step, variant
python3 benchmarks/host_sampler.py "$dir/host-cpu.csv" &
sampler=$!
trap 'kill $sampler 2>/dev/null' EXIT
step vllm-naive-c1 matrices/h200-shared-naive.yaml --skip concurrency=8
