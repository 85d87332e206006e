#!/usr/bin/env bash
# The H200 study driver: one device call of at most 10 minutes, chained while the machine
# stays warm. The rounds are data (benchmarks/study/rounds.yaml, read by study.py: each round's
# matrices, --only/--skip selections, variants and needs); docs/h200-rounds.md lists them.
# Every call runs this script; it does each step whose inputs have arrived and that is not
# done yet, within BUDGET_S:
#
#   1. crossbench's own wheels (.whl/) into /tmp/site, once per machine (the image lacks
#      pydantic, gguf, orjson...);
#   2. the vLLM pack's parts carried so far (.carry/vllm-*/: `crossbench engines pack`) kept
#      in /tmp/cb-pack (a call carries at most 64 MiB, so the pack comes over several calls);
#   3. in the background (setsid: it outlives the call): the CUDA llama.cpp build from the
#      carried source, the qwen3-8b fixtures in F16 with their HF folders and their tensor
#      checksums (`fixtures verify-hf`, unless the round says verify_hf: false) while nvcc
#      builds, the EAGLE-3 and DFlash drafters (drafters: true), then the build is waited for
#      (or stopped: build: false, vLLM-only rounds) and the Q4_K_M target made (q4: true);
#   4. once every part is there: `crossbench engines install vllm --from /tmp/cb-pack`;
#   5. with ROUND set, the build done and vLLM installed (rounds with vllm: true): the round
#      (`study.py run ROUND DIR`) in its own process session, so that no trial is cut at a
#      call's end; each call waits until BUDGET_S is nearly spent, then packs what finished.
#      A later call on the same machine keeps waiting; on another machine the round resumes
#      (`--resume`; docs/cross-engine.md: the engines are rebuilt, recorded as engine epochs,
#      and trial pairs that straddle machines read `confounded`);
#   6. with FINISH=1: the tensor checksums, if the setup did not make them.
# What comes back: run.tgz (the round's run directory, $CROSSBENCH_CACHE/h200-cross-round<ROUND>)
# and logs.tgz (/tmp/cross-logs); analysis, parity, archives and reports are made from run.tgz
# (docs/cross-engine.md has the commands).
#
# Usage: OUT=/some/dir BUDGET_S=560 [ROUND=name [PART=n]] [FINISH=1] bash benchmarks/study/run.sh
#        python3 benchmarks/study/study.py list          # the rounds
#        python3 benchmarks/study/study.py dry ROUND     # the commands a round runs
set -uo pipefail
: "${OUT:?set OUT to a directory for the results}"
LOG=/tmp/cross-logs   # /tmp lasts while the machine stays warm
export CROSSBENCH_CACHE=$PWD/.cbcache PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
budget=${BUDGET_S:-560}; t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) )); }
cb() { python3 -m crossbench "$@"; }
mkdir -p "$LOG" /tmp/cb-pack
say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG/calls.txt"; }

# 1. crossbench's dependencies from the carried wheels
if ls .whl/*.whl >/dev/null 2>&1 && [ ! -f /tmp/site/.done ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
    && touch /tmp/site/.done
fi
export PYTHONPATH=/tmp/site:$PYTHONPATH
study() { python3 benchmarks/study/study.py "$@"; }
pack_complete() {
  [ -f "$1/pack.json" ] && python3 - "$1" <<'EOF'
import json, os, sys
parts = json.load(open(os.path.join(sys.argv[1], "pack.json")))["parts"]
sys.exit(0 if all(os.path.exists(os.path.join(sys.argv[1], p["name"])) for p in parts) else 1)
EOF
}

# the round's needs (rounds.yaml); without ROUND: the setup alone, build and checksums kept
need_vllm=0 need_build=1 need_q4=0 need_drafters=0 need_verify_hf=1
if [ -n "${ROUND:-}" ]; then
  needs=$(study env "$ROUND") || { say "unknown ROUND $ROUND (or PART ${PART:-})"; exit 2; }
  eval "$needs"
fi

# 2. parts of the vLLM pack carried by this call. A call carries at most 64 MiB with the
#    working tree (about 15 MB now), so a 52 MB part travels as halves split here with
#    `split -b 26000000 -d -a 1 PART PART.h` into .carry/sK/ (one folder per call): they are
#    joined once both have arrived
for f in .carry/vllm-*/pack.json .carry/vllm-*/payload.tar.part* .carry/s*/*.h[0-9]; do
  [ -f "$f" ] || continue
  cp -n "$f" /tmp/cb-pack/ && say "kept $(basename "$f") ($(stat -c %s "$f") bytes)"
done
for h in /tmp/cb-pack/*.h0; do
  [ -f "$h" ] || continue
  part=${h%.h0}
  [ -f "$part.h1" ] && cat "$h" "$part.h1" >"$part" && rm "$h" "$part.h1" \
    && say "joined $(basename "$part")"
done

# 3. background setup: CUDA build, fixtures (F16 + HF while nvcc runs), drafters, Q4_K_M
if [ ! -f "$LOG/setup.started" ]; then
  touch "$LOG/setup.started"
  nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader \
    >"$LOG/gpu.txt" 2>&1
  python3 -m pip list --format=freeze >"$LOG/host-pip-freeze.txt" 2>/dev/null
  setsid bash -c '
    s=$(date +%s)
    setsid python3 -m crossbench engines install llama.cpp --cuda --cuda-arch 90 \
      --source-archive .carry/llama-cpp-python-0.3.36.src.tgz >'"$LOG"'/build.log 2>&1 &
    b=$!
    until ls "$CROSSBENCH_CACHE"/sources/*/.unpacked >/dev/null 2>&1; do sleep 2; done
    python3 -m crossbench fixtures make --shape qwen3-8b --hf >'"$LOG"'/fixtures.log 2>&1
    echo "fixtures_f16_hf_s=$(( $(date +%s) - s ))" >>'"$LOG"'/timing.txt
    [ '"$need_verify_hf"' = 0 ] || python3 -m crossbench fixtures verify-hf \
      --shape qwen3-8b >'"$LOG"'/verify-hf.txt 2>&1  # vLLM rounds: checked by round 1
    echo "verify_hf_exit=$? verify_hf_s=$(( $(date +%s) - s ))" >>'"$LOG"'/timing.txt
    if [ '"$need_drafters"' = 1 ]; then  # the EAGLE-3 and DFlash drafters: HF, then GGUF
      python3 -m crossbench fixtures make --shape qwen3-8b --drafter eagle3 \
        --drafter dflash >'"$LOG"'/drafters.txt 2>&1
      echo "drafters_exit=$? drafters_s=$(( $(date +%s) - s ))" >>'"$LOG"'/timing.txt
      for m in "$CROSSBENCH_CACHE"/fixtures/qwen3-8b-*/drafter-*/crossbench-drafter.json; do
        [ -f "$m" ] && cp "$m" '"$LOG"'/"$(basename "$(dirname "$m")")".json
      done  # each tensor checked against its HF original, as written by fixtures make
    fi
    if [ '"$need_build"' = 0 ]; then  # vLLM-only rounds need no llama-server: the build
      # stops here rather than cost minutes of GPU lease (its nvcc beside a vLLM start would
      # slow the start)
      kill -TERM -- -$b 2>/dev/null; wait $b
      echo "build_exit=skipped build_s=$(( $(date +%s) - s ))" >>'"$LOG"'/timing.txt
    else
      wait $b; echo "build_exit=$? build_s=$(( $(date +%s) - s ))" >>'"$LOG"'/timing.txt
    fi
    if [ '"$need_q4"' = 1 ]; then
      python3 -m crossbench fixtures make --shape qwen3-8b --quant Q4_K_M \
        >>'"$LOG"'/fixtures.log 2>&1
    fi
    echo "setup_exit=$? setup_s=$(( $(date +%s) - s ))" >>'"$LOG"'/timing.txt
    touch '"$LOG"'/setup.done' </dev/null >"$LOG/setup.out" 2>&1 &
  say "background setup started"
fi

# 4. vLLM from the pack, once every part has arrived
vprefix=$(ls -d "$CROSSBENCH_CACHE"/engines/vllm-*/ 2>/dev/null | head -1)
if [ -z "$vprefix" ] && [ -f /tmp/cb-pack/pack.json ]; then
  if pack_complete /tmp/cb-pack; then
    s=$(date +%s)
    cb engines install vllm --from /tmp/cb-pack >"$LOG/vllm-install.log" 2>&1 \
      && say "vllm installed in $(( $(date +%s) - s )) s: $(tail -1 "$LOG/vllm-install.log")"
    vprefix=$(ls -d "$CROSSBENCH_CACHE"/engines/vllm-*/ 2>/dev/null | head -1)
  fi
fi
[ -n "$vprefix" ] && export PATH=${vprefix%/}/bin:$PATH

wait_setup() {  # until the build and the F16/HF fixtures are done, or the budget nearly spent
  # (the Q4_K_M target, made last, is waited for only by rounds that use it). vLLM-only rounds
  # (build: false) wait until the build is stopped: a vLLM start timed beside nvcc or the
  # checksums would read slow
  local mark="build_exit=(0|skipped)"; [ "${1:-}" = all ] && mark="setup_exit=0"
  until grep -qE "$mark" "$LOG/timing.txt" 2>/dev/null || [ "$(left)" -le 60 ]; do sleep 5; done
  grep -qE "$mark" "$LOG/timing.txt" 2>/dev/null
}

RUN=$CROSSBENCH_CACHE/h200-cross-round${ROUND:-1}
# 5. a round: `study.py run` in its own process session. It outlives this call, so no trial
#    is cut at a call's end (a vLLM start alone takes minutes). Each call waits while it runs
#    and then packs what has finished; the last call packs what finished before the lease ended.
if [ -n "${ROUND:-}" ] && { [ -n "$vprefix" ] || [ "$need_vllm" = 0 ]; } && wait_setup; then
  if ! pgrep -f "crossbench matrix" >/dev/null \
      && ! pgrep -f "benchmarks/study/study.py run" >/dev/null \
      && [ ! -f "$LOG/matrix-round$ROUND.exit" ]; then
    say "round $ROUND: started in the background"
    setsid bash -c 'python3 benchmarks/study/study.py run "$0" "$1" \
        >>'"$LOG"'/matrix-round'"$ROUND"'.log 2>&1
      echo "matrix_exit=$?" >'"$LOG"'/matrix-round'"$ROUND"'.exit' \
      "$ROUND" "$RUN" </dev/null >/dev/null 2>&1 &
  fi
  until [ -f "$LOG/matrix-round$ROUND.exit" ] || [ "$(left)" -le "${PACK_S:-25}" ]; do
    sleep 5; done
  say "round $ROUND: $(cat "$LOG/matrix-round$ROUND.exit" 2>/dev/null || echo running)"
  for d in "$RUN" "$RUN"/*/; do [ -f "$d/state.json" ] && cb status "$d"; done \
    >"$LOG/status-round${ROUND}.txt" 2>&1
fi

# 6. finish: the tensor checksums of both weight files (also made by the background setup
#    while nvcc builds; the analysis, archives and reports are made from run.tgz on any
#    machine: every figure is re-derived from the raw records)
if [ -n "${FINISH:-}" ] && wait_setup && [ ! -s "$LOG/verify-hf.txt" ]; then
  cb fixtures verify-hf --shape qwen3-8b >"$LOG/verify-hf.txt" 2>&1
  say "verify-hf exit $?"
fi
tar -C /tmp -czf "$OUT/logs.tgz" cross-logs 2>/dev/null
[ -d "$RUN" ] && tar -C "$CROSSBENCH_CACHE" -czf "$OUT/run.tgz" "$(basename "$RUN")" 2>/dev/null
ls -la "$OUT"; cat "$LOG/calls.txt" 2>/dev/null | tail -20; cat "$LOG/timing.txt" 2>/dev/null
