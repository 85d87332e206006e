#!/usr/bin/env bash
# The llama.cpp-versus-vLLM study (matrices/h200-cross.yaml) on one H200, in device calls of at
# most 10 minutes chained while the machine stays warm. Every call runs this script; it does
# each step whose inputs have arrived and that is not done yet, within BUDGET_S:
#
#   1. crossbench's own wheels (.whl/) into /tmp/site;
#   2. the vLLM pack's parts carried so far (.carry/vllm-*/: `crossbench engines pack`) kept
#      in /tmp/cb-pack (a call carries at most 64 MiB, so the pack comes over several calls);
#   3. in the background (setsid: it outlives the call): the CUDA llama.cpp build from the
#      carried source, the qwen3-8b fixtures in F16 with their HF folders and their tensor
#      checksums (`fixtures verify-hf`) while nvcc builds, then (rounds other than 1) the
#      Q4_K_M target through the built llama-quantize;
#   4. once every part is there: `crossbench engines install vllm --from /tmp/cb-pack`;
#   5. with ROUND set and the build done: the round's cells of the matrix (ROUND=verdict,
#      shared, gate, naive, twostart, hoststart, spread, known, all, methods:
#      benchmarks/h200_verdict_runs.sh,
#      h200_shared_runs.sh, h200_gate_runs.sh, h200_naive_shared_runs.sh,
#      h200_twostart_runs.sh, h200_hoststart_runs.sh, h200_spread_runs.sh, h200_known_runs.sh,
#      h200_all_runs.sh, h200_methods_runs.sh; gate, spread, known, all and methods
#      need no vLLM, nor methods but its PART=3; methods also makes the EAGLE-3 and DFlash
#      drafters, and with PART=3 (vLLM only) stops the llama.cpp build), in the background
#      too, so that no trial is cut at a call's end; each call waits until BUDGET_S is nearly
#      spent, then packs what finished. A later call on the same machine keeps waiting; on
#      another machine the round resumes (`--resume`; see docs/cross-engine.md: the engines
#      are rebuilt, recorded as engine epochs, and trial pairs that straddle machines read
#      `confounded`);
#   6. with FINISH=1: the tensor checksums, if the setup did not make them.
# What comes back: run.tgz (the round's run directory) and logs.tgz; analysis, cross-engine
# parity, archives and reports are made from run.tgz (docs/cross-engine.md has the commands).
#
# Usage: OUT=/some/dir BUDGET_S=560 [ROUND=1] [FINISH=1] bash benchmarks/h200_cross.sh
LOG=/tmp/cross-logs   # /tmp lasts while the machine stays warm
. "$(dirname "$0")/device_call.sh"   # OUT, BUDGET_S: left, cb, say; .whl/ installed
mkdir -p /tmp/cb-pack

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

# 3. background setup: CUDA build, fixtures (F16 + HF while nvcc runs), then Q4_K_M
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
    [ "'"${PART:-}"'" -ge 3 ] 2>/dev/null || python3 -m crossbench fixtures verify-hf \
      --shape qwen3-8b >'"$LOG"'/verify-hf.txt 2>&1  # vLLM rounds: checked by round 1
    echo "verify_hf_exit=$? verify_hf_s=$(( $(date +%s) - s ))" >>'"$LOG"'/timing.txt
    if [ "'"${ROUND:-}"'" = methods ]; then  # the EAGLE-3 and DFlash drafters: HF, then GGUF
      python3 -m crossbench fixtures make --shape qwen3-8b --drafter eagle3 \
        --drafter dflash >'"$LOG"'/drafters.txt 2>&1
      echo "drafters_exit=$? drafters_s=$(( $(date +%s) - s ))" >>'"$LOG"'/timing.txt
      for m in "$CROSSBENCH_CACHE"/fixtures/qwen3-8b-*/drafter-*/crossbench-drafter.json; do
        [ -f "$m" ] && cp "$m" '"$LOG"'/"$(basename "$(dirname "$m")")".json
      done  # each tensor checked against its HF original, as written by fixtures make
    fi
    case "'"${ROUND:-}${PART:+-$PART}"'" in
      naive|twostart|hoststart|methods-3|methods-4)  # vLLM-only rounds need no llama-server: the build stops here rather
        # than cost minutes of GPU lease (its nvcc beside a vLLM start would slow the start)
        kill -TERM -- -$b 2>/dev/null; wait $b
        echo "build_exit=skipped build_s=$(( $(date +%s) - s ))" >>'"$LOG"'/timing.txt ;;
      *) wait $b; echo "build_exit=$? build_s=$(( $(date +%s) - s ))" >>'"$LOG"'/timing.txt ;;
    esac
    case "'"${ROUND:-1}"'" in 1|verdict|shared|gate|naive|twostart|hoststart|spread|known|all|methods) q4=no ;; *) q4=yes ;; esac
    if [ "$q4" = yes ]; then
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
  # (naive, twostart, hoststart) wait until the build is stopped: a vLLM start timed beside nvcc or the
  # checksums would read slow
  local mark="build_exit=(0|skipped)"; [ "${1:-}" = all ] && mark="setup_exit=0"
  until grep -qE "$mark" "$LOG/timing.txt" 2>/dev/null || [ "$(left)" -le 60 ]; do sleep 5; done
  grep -qE "$mark" "$LOG/timing.txt" 2>/dev/null
}

RUN=$CROSSBENCH_CACHE/h200-cross-round${ROUND:-1}
# 5. a round: the cells this session can afford (docs/cross-engine.md lists each round);
#    ROUND=verdict, shared, gate, naive, twostart, hoststart, spread, known and all run
#    benchmarks/h200_<ROUND>_runs.sh
#    (naive: h200_naive_shared_runs.sh; GPU time per verdict) instead
if [ -n "${ROUND:-}" ] && { [ -n "$vprefix" ] || [ "$ROUND" = gate ] || [ "$ROUND" = spread ] \
    || [ "$ROUND" = known ] || [ "$ROUND" = all ] \
    || { [ "$ROUND" = methods ] && [ "${PART:-1}" -le 2 ]; }; } \
    && wait_setup; then
  case "$ROUND" in
    1) sel=(--skip target=t8b-q4 --skip concurrency=4 --skip concurrency=16
            --skip arm=synth-a0.6 --skip arm=synth-a0.8 --skip arm=synth-a1.0 --skip arm=ngram
            --skip n=1 --skip n=3 --skip n=6 --skip n=8) ;;
    verdict|shared|gate|naive|twostart|hoststart|spread|known|all|methods) ;;
    *) say "unknown ROUND $ROUND"; exit 2 ;;
  esac
  # The matrix runs in its own process session: it outlives this call, so no trial is cut at
  # a call's end (a vLLM start alone takes minutes). Each call waits while it runs and then
  # packs what has finished; the last call packs what finished before the lease ended.
  if ! pgrep -f "crossbench matrix" >/dev/null \
      && ! pgrep -f "h200_(verdict|shared|gate|naive_shared|twostart|hoststart|spread|known|all|methods)_runs" >/dev/null \
      && [ ! -f "$LOG/matrix-round$ROUND.exit" ]; then
    say "round $ROUND: started in the background"
    if [ "$ROUND" != 1 ]; then
      script=$ROUND; [ "$ROUND" = naive ] && script=naive_shared
      setsid bash -c 'bash benchmarks/h200_'"$script"'_runs.sh "$0" \
          >>'"$LOG"'/matrix-round'"$ROUND"'.log 2>&1
        echo "matrix_exit=$?" >'"$LOG"'/matrix-round'"$ROUND"'.exit' \
        "$RUN" </dev/null >/dev/null 2>&1 &
    else
      resume=""; [ -f "$RUN/state.json" ] && resume=--resume
      setsid bash -c 'python3 -m crossbench matrix matrices/h200-cross.yaml --out "$0" $1 \
          "${@:2}" --progress plain >>'"$LOG"'/matrix-round'"$ROUND"'.log 2>&1
        echo "matrix_exit=$?" >'"$LOG"'/matrix-round'"$ROUND"'.exit' \
        "$RUN" "$resume" "${sel[@]}" </dev/null >/dev/null 2>&1 &
    fi
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
