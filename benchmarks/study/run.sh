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
#      carried source (build: false, vLLM-only rounds: the source unpacked, no build), the
#      round's fixtures (rounds.yaml `fixtures`, each made only where the
#      disk has room; default: the qwen3-8b pair in F16 with their HF folders) and their tensor
#      checksums (`fixtures verify-hf`, unless the round says verify_hf: false) while nvcc
#      builds, the EAGLE-3 and DFlash drafters (drafters: true), then the build is waited for
#      (build: true) and the Q4_K_M target made (q4: true);
#  3b. a round chained after another on the same machine: the build, its fixtures and the
#      drafters where it needs them and the machine's setup did not make them, made then;
#   4. once every part is there: `crossbench engines install vllm --from /tmp/cb-pack` (rounds
#      with sglang: true likewise SGLang's pack, .carry/sglang-*/, via /tmp/sg-pack), then
#      the vLLM compile caches of earlier leases (.carry/vllm-compile/, parts joined by
#      benchmarks/study/carry.py) and, for SGLang, its kernel caches (.carry/sglang-kernels/)
#      unpacked before the round starts;
#   5. with ROUND set, the build done and vLLM installed (rounds with vllm: true): the round
#      (`study.py run ROUND DIR`) in its own process session, so that no trial is cut at a
#      call's end; each call waits until BUDGET_S is nearly spent, or past RETURN_S (240 s) until
#      a trial has finished since the last return, then packs what finished.
#      A later call on the same machine keeps waiting; on another machine the round resumes
#      (`--resume`; docs/cross-engine.md: the engines are rebuilt, recorded as engine epochs,
#      and trial pairs that straddle machines read `confounded`);
#   6. with FINISH=1: the tensor checksums, if the setup did not make them;
#   7. once a vLLM round has ended: its compile cache, packed, the next parts each call; once
#      an SGLang round has ended, SGLang's kernel caches likewise.
# What comes back: run.tgz (the round's run directory, $CROSSBENCH_CACHE/h200-cross-round<ROUND>)
# and logs.tgz (/tmp/cross-logs); analysis, parity, archives and reports are made from run.tgz
# (docs/cross-engine.md has the commands); vllm-compile.tgz.pKofN and sglang-kernels.tgz.pKofN
# (step 7), which `study.py land` keeps in .carry/vllm-compile/ and .carry/sglang-kernels/ for
# the next lease.
#
# Rounds of another kind (rounds.yaml `kind`) have their own flow, each a function below:
# ROUND=synthetic (issue 8's study, one lane per GPU: lanes_round), ROUND=sglang-check
# (SGLang's live adapter check: sglang_check_round), ROUND=smoke (the first CUDA smoke run of
# the pipeline: smoke_round).
#
# Usage: OUT=/some/dir BUDGET_S=560 [ROUND=name [PART=n] [STEPS=a,b]] [FINISH=1] \
#          bash benchmarks/study/run.sh
#        (STEPS: only these steps of the round, for a lease too short for all of them)
#        python3 benchmarks/study/study.py list          # the rounds
#        python3 benchmarks/study/study.py dry ROUND     # the commands a round runs
set -uo pipefail
: "${OUT:?set OUT to a directory for the results}"
study() { python3 benchmarks/study/study.py "$@"; }
# the round's kind and needs (rounds.yaml); without ROUND: the setup alone, build and
# checksums kept
kind=cross need_vllm=0 need_sglang=0 need_build=1 need_q4=0 need_drafters=0 need_verify_hf=1
fixtures_args=("make --shape qwen3-8b --hf") fixtures_min_gb=(0)
if [ -n "${ROUND:-}" ]; then
  needs=$(study env "$ROUND") || { echo "unknown ROUND $ROUND (or PART ${PART:-}, STEPS ${STEPS:-})"; exit 2; }
  eval "$needs"
fi

# The prelude of a chained device call (cross and sglang-check rounds), with LOG set to a
# folder under /tmp (it lasts while the machine stays warm): left (seconds of BUDGET_S, default
# 560, this call has left), cb (crossbench from the checkout), say (a timestamped line on
# stdout and in $LOG/calls.txt), pack_complete DIR (whether every part DIR/pack.json lists has
# arrived), and 1. crossbench's own dependencies (pydantic, gguf, orjson...), which the image
# lacks, from the carried .whl/ into /tmp/site, once per machine.
device_prelude() {
export CROSSBENCH_CACHE=$PWD/.cbcache PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
budget=${BUDGET_S:-560}; t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) )); }
cb() { python3 -m crossbench "$@"; }
mkdir -p "$LOG" /tmp/cb-pack
say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG/calls.txt"; }
# Background jobs (the setup, a late setup, the round, SGLang's check) outlive their call and
# run on while later calls come, and each call lays its copy of the working tree over the
# checkout: an import at that moment can find its file missing (2026-12-07: the setup's
# `fixtures make` died with "No module named 'crossbench.fixtures.hf'" as a call arrived). So
# `bg_job CMD...` runs CMD in its own process session (setsid) from bg_code's folder: a copy of
# the code made as the job starts (the package, the engine profiles, benchmarks/, matrices/,
# zenodo/), every other entry of the checkout linked so relative paths still resolve, and
# .git left out (the archives name the code by its code_sha256; their commit is null).
bg_code() {
  local d e; d=$(mktemp -d -t cb-code.XXXXXX) || return 1  # (under $TMPDIR, else /tmp)
  for e in "$PWD"/* "$PWD"/.[!.]*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    case ${e##*/} in
      crossbench|engines|benchmarks|matrices|zenodo|pyproject.toml|setup.py)
        cp -a "$e" "$d"/ || return 1 ;;
      .git) ;;
      *) ln -s "$e" "$d"/ ;;
    esac
  done
  echo "$d"
}
bg_job() {
  local here=$PWD code; code=$(bg_code) || { say "bg_job: no copy of the code; runs from the \
checkout"; code=$PWD; }
  ( cd "$code" && PYTHONPATH=${PYTHONPATH//$here/$code} exec setsid "$@" )
}

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
unpack_llama_source() {  # SRC: the carried llama.cpp source unpacked (no build), for the
  # fixtures' tokenizer and the drafters' converter; the folder goes to $LOG/calls.txt
  python3 - "$1" >>"$LOG/calls.txt" 2>&1 <<'EOF'
import sys
from pathlib import Path
from crossbench.engines.llamacpp.build import unpack_source
from crossbench.engines.llamacpp.pins import DEFAULT_PIN, get_pin
print(f"unpacked {unpack_source(get_pin(DEFAULT_PIN), Path(sys.argv[1]))} (no build)")
EOF
}
# SGLang's pack: this call's parts (.carry/sglang-*/) kept in /tmp/sg-pack, installed once
# every part is there (log: $1); sets sprefix to the install's folder (empty until then)
sglang_from_pack() {
  mkdir -p /tmp/sg-pack
  for f in .carry/sglang-*/pack.json .carry/sglang-*/payload.tar.part*; do
    [ -f "$f" ] || continue
    cp -n "$f" /tmp/sg-pack/ && say "kept $(basename "$f") ($(stat -c %s "$f") bytes)"
  done
  sprefix=$(ls -d "$CROSSBENCH_CACHE"/engines/sglang-*/ 2>/dev/null | head -1)
  if [ -z "$sprefix" ] && pack_complete /tmp/sg-pack; then
    local s; s=$(date +%s)
    cb engines install sglang --from /tmp/sg-pack >"$1" 2>&1 \
      && say "sglang installed in $(( $(date +%s) - s )) s: $(tail -1 "$1")" \
      || say "install failed: $(tail -3 "$1")"
    sprefix=$(ls -d "$CROSSBENCH_CACHE"/engines/sglang-*/ 2>/dev/null | head -1)
  fi
}
}

# ---- cross rounds: the llama.cpp-versus-vLLM setup, then the round's steps (study.py run) ----
cross_round() {
LOG=/tmp/cross-logs
device_prelude
mkdir -p /tmp/cb-pack
# 2. parts of the vLLM pack carried by this call. A call carries at most 64 MiB with the
#    working tree (37 MB on 2026-12-05: parts of 25 MB), so a 52 MB part travels as halves
#    split here with `split -b 26000000 -d -a 1 PART PART.h` into .carry/sK/ (one folder per
#    call): they are joined once both have arrived
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

# 3. background setup: CUDA build, fixtures (F16 + HF while nvcc runs), drafters, Q4_K_M.
#    It needs the llama.cpp source (the fixtures' tokenizer, the drafters' converter, the
#    build), kept outside the checkout from the call that carries it; without it the setup
#    waits for a later call. On 2026-12-06 a first call without the source started a setup
#    that waited for one, and the next call's setup ran beside it (fixtures and drafters twice)
fixture_step() {  # MIN_FREE_GB ARGS: `crossbench fixtures ARGS`, if the disk has room; its
  # exit goes to timing.txt (seconds from the caller's `s`), which fixture_steps --missing reads
  local free; free=$(df -BG --output=avail "$CROSSBENCH_CACHE" | tail -1 | tr -dc 0-9)
  if [ "$free" -lt "$1" ]; then
    echo "fixtures_skipped=\"$2\" free_gb=$free min_free_gb=$1" >>"$LOG/timing.txt"
    return 0
  fi
  python3 -m crossbench fixtures $2 >>"$LOG/fixtures.log" 2>&1
  local rc=$?
  echo "fixtures_exit=$rc fixtures=\"$2\" s=$(( $(date +%s) - s ))" >>"$LOG/timing.txt"
  keep_manifests
  return $rc
}
keep_manifests() {  # every Qwen3.5 target's manifests (each file's and each tensor's sha256)
  # into the logs, so a fixture can be compared tensor by tensor across hosts: on 2026-12-07
  # the H200's MoE target and dense twin GGUFs and the ones made on the CPU machine had other
  # sha256 at the same size (transformers' version ruled out; not located)
  local m d
  for m in "$CROSSBENCH_CACHE"/fixtures/*/*/crossbench-mtp*.json; do
    [ -f "$m" ] || continue
    d=$(dirname "$m")
    cp "$m" "$LOG/manifest-$(basename "$(dirname "$d")")-$(basename "$d")-$(basename "$m")"
  done
}
export -f fixture_step keep_manifests
fixture_steps() {  # the round's fixtures (rounds.yaml), one `fixture_step MIN_FREE_GB ARGS`
  # line each, in order; with --missing only those this machine has not made yet
  local i
  for i in "${!fixtures_args[@]}"; do
    [ "${1:-}" = --missing ] && grep -qF "fixtures_exit=0 fixtures=\"${fixtures_args[$i]}\"" \
      "$LOG/timing.txt" 2>/dev/null && continue
    printf 'fixture_step %d %q\n' "${fixtures_min_gb[$i]}" "${fixtures_args[$i]}"
  done
}
SRC=/tmp/cb-src/llama-cpp-python-0.3.36.src.tgz
if [ ! -f "$SRC" ] && [ -f .carry/llama-cpp-python-0.3.36.src.tgz ]; then
  mkdir -p /tmp/cb-src && cp .carry/llama-cpp-python-0.3.36.src.tgz "$SRC.tmp" \
    && mv "$SRC.tmp" "$SRC" && say "kept the llama.cpp source ($(stat -c %s "$SRC") bytes)"
fi
# the source in parts, where the tree left it no room whole (`study.py calls` cuts it:
# carry.split): each call's parts kept beside it, joined and checked as a gzip tar once all came
for f in .carry/llama-cpp-python-0.3.36.src.tgz.parts/llama-cpp-python-0.3.36.src.tgz.p*of*; do
  [ -f "$f" ] && [ ! -f "$SRC" ] && [ ! -f "/tmp/cb-src/parts/${f##*/}" ] || continue
  mkdir -p /tmp/cb-src/parts && cp "$f" "/tmp/cb-src/parts/${f##*/}.tmp" \
    && mv "/tmp/cb-src/parts/${f##*/}.tmp" "/tmp/cb-src/parts/${f##*/}" \
    && say "kept ${f##*/} ($(stat -c %s "$f") bytes)"
done
if [ ! -f "$SRC" ] && [ -d /tmp/cb-src/parts ]; then
  python3 benchmarks/study/carry.py join /tmp/cb-src/parts | sed 's/^/  /'
  [ -f /tmp/cb-src/parts/llama-cpp-python-0.3.36.src.tgz ] \
    && mv /tmp/cb-src/parts/llama-cpp-python-0.3.36.src.tgz "$SRC" \
    && say "joined the llama.cpp source ($(stat -c %s "$SRC") bytes)"
fi
if [ ! -f "$LOG/setup.started" ] && [ ! -f "$SRC" ]; then
  say "setup waits: no llama.cpp source has come (carry .carry/llama-cpp-python-0.3.36.src.tgz \
as \`study.py calls\` lists it)"
elif [ ! -f "$LOG/setup.started" ]; then
  touch "$LOG/setup.started"
  say "the tree brought $(find examples -type f 2>/dev/null | wc -l) files under examples/ \
(none where \`carry.py lean on\` left it behind)"
  nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader \
    >"$LOG/gpu.txt" 2>&1
  python3 -m pip list --format=freeze >"$LOG/host-pip-freeze.txt" 2>/dev/null
  mkdir -p "$CROSSBENCH_CACHE"; df -h "$CROSSBENCH_CACHE" >"$LOG/disk.txt" 2>&1
  fixture_steps >"$LOG/fixtures.sh"
  if [ "$need_build" = 0 ]; then
    # vLLM-only rounds: the llama.cpp source only (the fixtures' tokenizer and the drafters'
    # converter), no CUDA build: 16 nvcc jobs beside the fixtures slowed them (round 4: the
    # fixtures 149 s and the drafters 153 s beside the build, where the round waited for both)
    unpack_llama_source "$SRC"
  fi
  LOG=$LOG bg_job bash -c '
    s=$(date +%s)
    b=""
    if [ '"$need_build"' = 1 ]; then
      setsid python3 -m crossbench engines install llama.cpp --cuda --cuda-arch 90 \
        --source-archive '"$SRC"' >'"$LOG"'/build.log 2>&1 &
      b=$!
    fi
    until ls "$CROSSBENCH_CACHE"/sources/*/.unpacked >/dev/null 2>&1; do sleep 2; done
    . '"$LOG"'/fixtures.sh  # the fixtures the round entry names (default: make --shape qwen3-8b --hf)
    echo "fixtures_f16_hf_s=$(( $(date +%s) - s ))" >>'"$LOG"'/timing.txt
    df -h "$CROSSBENCH_CACHE" >>'"$LOG"'/disk.txt 2>&1
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
    if [ -z "$b" ]; then  # vLLM-only rounds need no llama-server (nor nvcc beside a vLLM
      # start, which would slow the start): never built
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

# 3b. a round chained after another on this machine (docs/h200-rounds.md "Two rounds in one
#     lease") that needs what the machine's setup did not make: the CUDA build (a llama.cpp
#     round after a vLLM-only one), the round's fixtures (fixture_steps --missing: those no
#     fixtures_exit=0 line names) and the drafters, made in the background once the first
#     setup is done (the fixtures before the drafters, as there); `late-setup.done` when all
#     succeeded, `late-setup.failed` otherwise (wait_setup holds the round until the first,
#     and never starts it after the second). The same late setup makes again what the first
#     setup failed to make (a fixture or the drafters without its exit-0 line), before the
#     round starts (wait_setup), and it never starts while a round runs: on 2026-12-07 the
#     first setup's fixtures failed, the round started anyway, and the next call's late setup
#     rewrote the draft's folder under a running start
late_needs() {  # the words "build", "fixtures" and "drafters" this round needs and the
  # setup did not make
  local t="$LOG/timing.txt" needs=""
  [ "$need_build" = 1 ] && grep -q "build_exit=skipped" "$t" 2>/dev/null && needs+=" build"
  [ -n "$(fixture_steps --missing)" ] && needs+=" fixtures"
  [ "$need_drafters" = 1 ] && ! grep -q "drafters_exit=0" "$t" 2>/dev/null \
    && needs+=" drafters"
  echo "${needs# }"
}
round_running() { pgrep -f "benchmarks/study/study.py run" >/dev/null \
  || pgrep -f "crossbench matrix" >/dev/null; }
late_setup() {  # starts the late setup where the round needs one (a no-op otherwise)
  [ -n "${ROUND:-}" ] && [ -f "$LOG/setup.done" ] && [ ! -f "$LOG/late-setup.started" ] \
    && ! round_running || return 0
  local late; late=$(late_needs)
  if [ -n "$late" ]; then
    touch "$LOG/late-setup.started"
    say "round $ROUND needs what this machine's setup did not make ($late): made now"
    fixture_steps --missing >"$LOG/late-fixtures.sh"
    LOG=$LOG SRC=$SRC bg_job bash -c '
      s=$(date +%s) ok=1 b=""
      mark() { echo "late_$1_exit=$2 late_$1_s=$(( $(date +%s) - s ))" >>"$LOG"/timing.txt
        [ "$2" = 0 ] || ok=0; }
      if [[ " $0 " == *" build "* ]]; then
        setsid python3 -m crossbench engines install llama.cpp --cuda --cuda-arch 90 \
          --source-archive "$SRC" >"$LOG"/build.log 2>&1 &
        b=$!
      fi
      if [[ " $0 " == *" fixtures "* ]]; then  # before the drafters, as in the setup
        # room first: an earlier round'"'"'s target folders this round does not name go when
        # the disk is short (2026-12-07: mtp2'"'"'s 33.6 GB MTP target left ngram2 no room)
        python3 benchmarks/study/study.py room "$ROUND" --cache "$CROSSBENCH_CACHE" \
          >>"$LOG"/timing.txt 2>>"$LOG"/late-setup.out
        f=0; while IFS= read -r step; do eval "$step" || f=1; done <"$LOG"/late-fixtures.sh
        mark fixtures $f
      fi
      if [[ " $0 " == *" drafters "* ]]; then
        python3 -m crossbench fixtures make --shape qwen3-8b --drafter eagle3 \
          --drafter dflash >"$LOG"/drafters.txt 2>&1
        mark drafters $?
      fi
      if [ -n "$b" ]; then wait $b; mark build $?; fi
      if [ "$ok" = 1 ]; then touch "$LOG"/late-setup.done; else touch "$LOG"/late-setup.failed; fi
    ' "$late" </dev/null >"$LOG/late-setup.out" 2>&1 &
  fi
}
late_setup

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

# 4c. vLLM compile caches of earlier leases (`land` keeps them in .carry/vllm-compile/MODELS/
#     as parts NAME.pKofN, one pack per model set; `study.py calls` picks the one holding the
#     round's targets, and each call carries what fits: docs/h200-rounds.md), joined once every
#     part has come (benchmarks/study/carry.py join) and unpacked before the round starts, so
#     that a configuration an earlier machine started starts warm here (each start records
#     hit or miss)
carried_parts() {  # DEST GLOB...: the cache parts (NAME.pKofN) this call carried, kept in
  # DEST until their set is whole
  local dest=$1 f; shift
  mkdir -p "$dest"
  for f in "$@"; do
    [ -f "$f" ] || continue
    cp -n "$f" "$dest"/ && say "kept $(basename "$f") ($(stat -c %s "$f") bytes)"
  done
}
unpack_carried() {  # DIR LOG WHAT CMD...: DIR's whole part sets joined (carry.py join, each
  # checked as a gzip tar), then `CMD PACK` for each joined pack not unpacked yet (once: a
  # refused pack is not tried again, and the round starts cold), LOG the output; false where
  # this call unpacked none
  local dir=$1 log=$2 what=$3 p n=0; shift 3
  python3 benchmarks/study/carry.py join "$dir" >>"$log" 2>&1
  for p in "$dir"/*.tgz; do
    { [ -f "$p" ] && [ ! -f "$p.unpacked" ]; } || continue
    if "$@" "$p" >>"$log" 2>&1; then
      say "$what $(basename "$p") unpacked: $(grep -E 'entries added' "$log" | tail -1)"
    else
      say "$what $(basename "$p") NOT unpacked: $(tail -1 "$log")"
    fi
    touch "$p.unpacked"; n=$((n + 1))
  done
  [ "$n" -gt 0 ]
}
carried_parts /tmp/cc-in .carry/vllm-compile/*.p[0-9]*of[0-9]* \
  .carry/vllm-compile/*/*.p[0-9]*of[0-9]*
if [ -n "$vprefix" ] && [ ! -f "$LOG/round.started" ]; then
  unpack_carried /tmp/cc-in "$LOG/compile-cache.txt" "compile cache" \
    cb engines compile-cache unpack \
    && cb engines compile-cache list >>"$LOG/compile-cache.txt" 2>&1
fi

# 4b. SGLang from its pack (rounds with sglang: true): the parts carried so far, then the
#     install once all are there. The matrix's sglang engine finds the installed interpreter
#     itself (crossbench/engines/sglang: `binary` defaults to the installed release)
sprefix=""
[ "$need_sglang" = 1 ] && sglang_from_pack "$LOG/sglang-install.log"

# 4d. SGLang's kernel caches of earlier leases (rounds with sglang: true): `land` keeps them
#     in .carry/sglang-kernels/BUILD-smNN/ as parts NAME.pKofN, `study.py calls` carries the
#     set this lease's SGLang pack built; joined once every part has come and unpacked into
#     the tvm-ffi and Triton caches before the round starts, so that the first SGLang start
#     finds the JIT modules and Triton kernels an earlier machine built (2026-12-07: 216.8 s
#     cold against about 83 s warm). `engines kernel-cache unpack` refuses a pack of another
#     compute capability or engine build: the round then starts cold
if [ "$need_sglang" = 1 ]; then
  carried_parts /tmp/kc-in .carry/sglang-kernels/*/*.p[0-9]*of[0-9]*
  if [ -n "$sprefix" ] && [ ! -f "$LOG/round.started" ]; then
    unpack_carried /tmp/kc-in "$LOG/kernel-cache.txt" "kernel cache" \
      cb engines kernel-cache unpack --binary "${sprefix%/}/bin/python" \
      && cb engines kernel-cache list >>"$LOG/kernel-cache.txt" 2>&1
  fi
fi

wait_setup() {  # until the build and the F16/HF fixtures are done, or the budget nearly spent
  # (the Q4_K_M target, made last, is waited for only by rounds that use it). vLLM-only rounds
  # (build: false) wait until the build is stopped: a vLLM start timed beside nvcc or the
  # checksums would read slow. A chained round's late setup (3b) is waited for too
  local mark="build_exit=(0|skipped)"; [ "${1:-}" = all ] && mark="setup_exit=0"
  round_running && return 0  # (a round that runs has had its setup)
  setup_ready() {  # (a step the first setup failed holds the round until the late setup,
    # started here once the first setup is done, has made it)
    grep -qE "$mark" "$LOG/timing.txt" 2>/dev/null || return 1
    late_setup
    if [ -f "$LOG/late-setup.started" ]; then [ -f "$LOG/late-setup.done" ]
    else [ -z "$(late_needs)" ]; fi
  }
  until setup_ready || [ -f "$LOG/late-setup.failed" ] || [ "$(left)" -le 60 ]; do sleep 5; done
  [ -f "$LOG/late-setup.failed" ] && say "round ${ROUND:-}: not started, its late setup \
failed ($(tail -1 "$LOG/timing.txt")): see build.log, drafters.txt in logs.tgz"
  setup_ready
}

RUN=$CROSSBENCH_CACHE/h200-cross-round${ROUND:-1}
# a round's markers (matrix-roundKEY.log, .exit, status-roundKEY.txt) by round and part, so a
# second part chained on the machine starts (2026-12-06: keyed by ROUND alone, PART=2 after
# PART=1 found the first part's .exit and would not start)
RKEY=${ROUND:-}${PART:+-part$PART}
# 5. a round: `study.py run` in its own process session. It outlives this call, so no trial
#    is cut at a call's end (a vLLM start alone takes minutes). Each call waits while it runs
#    and then packs what has finished; the last call packs what finished before the lease ended.
#    A compile or kernel cache whose parts have begun to come holds the round's start until
#    the rest has come (a round started without it runs cold): call again with them, or
#    CC_COLD=1 (for either).
cc_ready() {
  [ -f "$LOG/round.started" ] || [ -n "${CC_COLD:-}" ] && return 0
  local w; w=$(python3 benchmarks/study/carry.py waiting /tmp/cc-in /tmp/kc-in) && return 0
  say "round ${ROUND:-}: not started, the carried caches' parts are not all here ($w): carry \
the rest (.carry/vllm-compile/, .carry/sglang-kernels/) in the next call, or call with \
CC_COLD=1 to start without them"
  return 1
}
# A call waits while the round runs, until it ends or BUDGET_S is nearly spent (PACK_S left
# to pack), and returns early once RETURN_S (default 240) seconds have passed and a trial has
# finished since the last return (a line more in the journals than $LOG/returned-trials says
# came back): a machine taken back mid-round loses at most what finished after the last
# return (2026-12-06: an H100 taken back 6 minutes into a 9-minute call lost the trials of
# those minutes). Each return costs the call's transfers (a few seconds of lease).
# (it never fails: under pipefail a missing journal, as the round's top folder has none and a
# step's folder none before its first trial, made cat's exit its own and stopped the `&&`
# that packs run.tgz: on 2026-12-07 five calls of a running round came back without it)
finished_trials() {
  cat "$RUN"/journal.jsonl "$RUN"/*/journal.jsonl 2>/dev/null | wc -l || true
}
round_wait() {
  local returned; returned=$(cat "$LOG/returned-trials" 2>/dev/null || echo 0)
  until [ -f "$LOG/matrix-round$RKEY.exit" ] || [ "$(left)" -le "${PACK_S:-25}" ] \
      || { [ $(( $(date +%s) - t0 )) -ge "${RETURN_S:-240}" ] \
           && [ "$(finished_trials)" -gt "$returned" ]; }; do
    sleep "${WAIT_POLL_S:-5}"; done
}
if [ -n "${ROUND:-}" ] && { [ -n "$vprefix" ] || [ "$need_vllm" = 0 ]; } \
    && { [ -n "$sprefix" ] || [ "$need_sglang" = 0 ]; } && cc_ready && wait_setup; then
  if ! round_running && [ ! -f "$LOG/matrix-round$RKEY.exit" ]; then
    say "round $ROUND: started in the background"
    touch "$LOG/round.started"
    bg_job bash -c 'python3 benchmarks/study/study.py run "$0" "$1" \
        >>'"$LOG"'/matrix-round'"$RKEY"'.log 2>&1
      echo "matrix_exit=$?" >'"$LOG"'/matrix-round'"$RKEY"'.exit' \
      "$ROUND" "$RUN" </dev/null >/dev/null 2>&1 &
  fi
  round_wait
  say "round $ROUND: $(cat "$LOG/matrix-round$RKEY.exit" 2>/dev/null || echo running)"
  for d in "$RUN" "$RUN"/*/; do [ -f "$d/state.json" ] && cb status "$d"; done \
    >"$LOG/status-round${RKEY}.txt" 2>&1
fi

# 6. finish: the tensor checksums of both weight files (also made by the background setup
#    while nvcc builds; the analysis, archives and reports are made from run.tgz on any
#    machine: every figure is re-derived from the raw records)
if [ -n "${FINISH:-}" ] && wait_setup && [ ! -s "$LOG/verify-hf.txt" ]; then
  cb fixtures verify-hf --shape qwen3-8b >"$LOG/verify-hf.txt" 2>&1
  say "verify-hf exit $?"
fi
# the kernel and compile caches this machine holds, their size and entries (which one a
# first SGLang start fills, and whether carrying it between leases as vLLM's would pay)
# (from the call that starts a round on: the calls before it only carry parts)
[ -f "$LOG/round.started" ] && for d in "${TVM_FFI_CACHE_DIR:-$HOME/.cache/tvm-ffi}" \
    "${TRITON_CACHE_DIR:-$HOME/.triton/cache}" "$HOME/.cache/flashinfer" \
    "/tmp/torchinductor_$(id -un)"; do
  [ -d "$d" ] || continue  # (a missing last one left the loop's status 1)
  echo "$(du -sk "$d" | cut -f1) KiB $(ls "$d" | wc -l) entries $d"
done >"$LOG/kernel-caches.txt" 2>/dev/null
tar -C /tmp -czf "$OUT/logs.tgz" cross-logs 2>/dev/null
# (the count first: what the tar holds is at least that many trials)
if [ -d "$RUN" ]; then
  finished_trials >"$LOG/returned-trials"
  tar -C "$CROSSBENCH_CACHE" -czf "$OUT/run.tgz" "$(basename "$RUN")" 2>"$LOG/run-tar.err" \
    || say "run.tgz: tar exit $? ($(tail -1 "$LOG/run-tar.err"))"
fi
# 7. once the round has ended: the vLLM compile cache this machine filled (the carried one
#    included), and for SGLang its kernel caches, each packed and cut once; each later call
#    returns the next parts its return has room for beside run.tgz and logs.tgz, and says how
#    many are left (benchmarks/study/carry.py out: call again until every part is returned);
#    `land` and `carry.py keep` keep the parts (the newest pack only)
pack_cache() {  # DIR NAME LOG WHAT CMD...: sets PACKED, the pack (DIR/NAME.tgz) whose parts
  # this call returns: packed by `CMD --out PACK` after the lease's first round ends; a round
  # chained after that pack (another ROUND, the same machine) packs again under the next name
  # (NAME-2.tgz, ...), every entry so far, and the earlier pack's unsent parts are dropped
  # (keep would keep only the newer pack anyway)
  local d=$1 name=$2 log=$3 what=$4 k next
  shift 4
  mkdir -p "$d"
  PACKED=$(ls -t "$d"/"$name"*.tgz 2>/dev/null | head -1)
  if [ -n "$PACKED" ] && [ ! "$PACKED" -ot "$LOG/matrix-round$RKEY.exit" ]; then
    return 0
  fi
  k=$(ls "$d"/"$name"*.tgz 2>/dev/null | wc -l)
  if [ "$k" -eq 0 ]; then next=$d/$name.tgz; else next=$d/$name-$((k + 1)).tgz; fi
  if "$@" --out "$next" >>"$log" 2>&1; then
    [ -n "$PACKED" ] && say "$what: round ${ROUND:-} ended after $(basename "$PACKED") \
was packed: packed again as $(basename "$next") (every entry); $(basename "$PACKED")'s \
unsent parts are dropped"
    PACKED=$next
  else
    rm -f "$next"
    say "$what not packed: $(tail -1 "$log")"
  fi
}
cc_pack() {  # sets CC_PACK: vLLM's compile cache (pack_cache)
  pack_cache /tmp/cc-out vllm-compile "$LOG/compile-cache.txt" "compile cache" \
    cb engines compile-cache pack --binary "${vprefix%/}/bin/vllm"
  CC_PACK=$PACKED
}
kc_pack() {  # sets KC_PACK: SGLang's kernel caches (pack_cache)
  pack_cache /tmp/kc-out sglang-kernels "$LOG/kernel-cache.txt" "kernel cache" \
    cb engines kernel-cache pack --binary "${sprefix%/}/bin/python"
  KC_PACK=$PACKED
}
if [ -f "$LOG/matrix-round$RKEY.exit" ]; then
  if [ "$need_vllm" = 1 ] && [ -n "$vprefix" ]; then
    cc_pack
    [ -n "$CC_PACK" ] && say "compile cache: $(python3 benchmarks/study/carry.py out \
      "$CC_PACK" "$OUT")"
  fi
  if [ "$need_sglang" = 1 ] && [ -n "$sprefix" ]; then
    kc_pack
    [ -n "$KC_PACK" ] && say "kernel cache: $(python3 benchmarks/study/carry.py out \
      "$KC_PACK" "$OUT")"
  fi
  tar -C /tmp -czf "$OUT/logs.tgz" cross-logs 2>/dev/null  # with these lines
fi
ls -la "$OUT"; cat "$LOG/calls.txt" 2>/dev/null | tail -20; cat "$LOG/timing.txt" 2>/dev/null
}

# ---- ROUND=sglang-check: SGLang's live adapter check on one H200 (issue 16) ----
# Every call does each step whose inputs have arrived:
#   2. the parts of the SGLang pack carried by this call (.carry/sglang-*/: `crossbench
#      engines pack sglang==0.5.17 ... --part-mb 30`, 5 parts) kept in /tmp/sg-pack;
#   3. the llama.cpp source (.carry/llama-cpp-python-*.src.tgz) unpacked for the real Qwen
#      tokenizer, then the tiny fixture pair with its Hugging Face folders;
#   4. once every part is there: `crossbench engines install sglang --from /tmp/sg-pack`, the
#      versions of what the launcher imports, and `crossbench engines check sglang` on the
#      tiny HF target drafting for itself (attention_backend triton: the pack drops
#      FlashAttention-3, engines/sglang/pack.yaml), in the background so that a call's end
#      cuts nothing; each call waits until the check ends or BUDGET_S is nearly spent.
# What comes back: $OUT/sglang-check.tgz with the check's folder (server log, scrapes,
# records), check.txt, the install log and record, imports.txt and calls.txt.
sglang_check_round() {
LOG=/tmp/sg-logs
device_prelude

# 2. this call's parts of the pack: kept by sglang_from_pack (step 4), which installs them
#    once all are there

# 3. the real Qwen tokenizer from the llama.cpp source, then the tiny pair with HF folders
src=$(ls .carry/llama-cpp-python-*.src.tgz 2>/dev/null | head -1)
if [ -n "$src" ] && [ ! -s "$LOG/fixtures.txt" ]; then
  unpack_llama_source "$src"
  cb fixtures make --shape tiny --hf >"$LOG/fixtures.txt" 2>"$LOG/fixtures.err" \
    && say "fixtures: $(tr '\n' ' ' <"$LOG/fixtures.txt")" \
    || { say "fixtures failed: $(tail -2 "$LOG/fixtures.err")"; rm -f "$LOG/fixtures.txt"; }
fi

# 4. the pack's parts, installed once every part is there, then the check in the background
sglang_from_pack "$LOG/install.log"; prefix=$sprefix
PY=${prefix%/}/bin/python
hf=$(sed -n 3p "$LOG/fixtures.txt" 2>/dev/null)
if [ -n "$prefix" ] && [ -x "$PY" ] && [ -n "$hf" ] && [ ! -f "$LOG/check.started" ]; then
  touch "$LOG/check.started"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$LOG/gpu.txt"
  "$PY" - >"$LOG/imports.txt" 2>&1 <<'EOF'
import importlib, importlib.metadata as md
for dist in ("sglang", "sglang-kernel", "flashinfer-python", "xgrammar", "transformers",
             "tokenizers", "torch", "triton", "numpy"):
    try:
        print(f"{dist}=={md.version(dist)}")
    except md.PackageNotFoundError:
        print(f"{dist}: not installed")
for mod in ("sgl_kernel", "flashinfer.sampling", "sglang.srt.entrypoints.http_server",
            "sglang.srt.managers.scheduler", "sglang.srt.model_executor.model_runner",
            "sglang.srt.models.qwen3", "sglang.srt.layers.attention.triton_backend",
            "sglang.srt.speculative.standalone_worker_v2", "sglang.srt.layers.sampler"):
    try:
        importlib.import_module(mod)
        print(f"import ok   {mod}")
    except BaseException as e:  # noqa: BLE001 - every failure is the finding
        print(f"import FAIL {mod}: {type(e).__name__}: {e}")
EOF
  say "imports: $(grep -c 'import ok' "$LOG/imports.txt") ok, $(grep -c FAIL "$LOG/imports.txt") failed"
  bg_job bash -c 'python3 -m crossbench engines check sglang --binary "$0" --model "$1" \
      --out "$2" --set attention_backend=triton >"$3/check.txt" 2>&1
    echo "check_exit=$?" >"$3/check.exit"' "$PY" "$hf" "$LOG/sglang-check" "$LOG" \
    </dev/null >/dev/null 2>&1 &
  say "check started: $PY on $hf"
fi
if [ -f "$LOG/check.started" ]; then
  until [ -f "$LOG/check.exit" ] || [ "$(left)" -le 20 ]; do sleep 5; done
  say "check: $(cat "$LOG/check.exit" 2>/dev/null || echo running)"
fi
[ -n "$prefix" ] && cp "${prefix%/}/install.json" "$LOG/" 2>/dev/null
say "left $(left) s"
# one file back (a device call returns only a few files): the logs, the check's folder and
# the install record
tar czf "$OUT/sglang-check.tgz" -C "$(dirname "$LOG")" "$(basename "$LOG")"
}

# ---- ROUND=synthetic: issue 8's study on H200s (examples/h200-synthetic) ----
# Each call builds what is missing (CUDA llama-server, then the qwen3-8b fixtures: their
# vocabulary comes from the llama.cpp source the build unpacks), runs `crossbench matrix
# MATRIX` (rounds.yaml's, or MATRIX=...) with --resume until BUDGET_S is nearly spent, and
# copies the run directories to $OUT (h200-<lane>.tgz) with every log of every call (logs.tgz:
# three files back per call); the call that finds the study complete also runs the analysis,
# llama-bench tg128 and the roofline. The cache lives in the working tree (.cbcache/,
# ignored), so it survives between calls while the machine stays warm.
# One GPU: the whole matrix in one run directory (h200-run). Two GPUs or more, Ray importable
# and a matrix of two lanes or more (a lane: a baseline and its speculative cells): one run,
# `crossbench matrix --executor ray --lane-gpus 1` (h200-ray), Ray giving each lane one GPU
# (docs/matrix.md, "Running on several GPUs or hosts (Ray)"). Fallback for the round's matrix
# (no Ray, or one lane: matrices/h200.yaml has a single baseline, which Ray would keep on one
# card): two hand-made lanes at once, each pinned to one GPU by UUID (CUDA_VISIBLE_DEVICES,
# which crossbench's telemetry and checks follow), each with its own baseline cell, so every
# speedup is paired on one GPU: gpu0 runs the alpha 0.6 and 0.8 sweeps, gpu1 the alpha 0.9
# and 1.0 sweeps, the real draft and ngram-mod (rounds.yaml's lanes). Another MATRIX of one
# lane, or without Ray, runs whole on the visible GPUs (h200-run).
lanes_round() {
export CROSSBENCH_CACHE=$PWD/.cbcache PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if ls .whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
fi
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site:$PYTHONPATH
budget=${BUDGET_S:-560}; t0=$(date +%s)
LOG=/tmp/h200-logs/call-$t0; mkdir -p "$LOG"  # /tmp lasts while the machine stays warm
left() { echo $(( budget - ($(date +%s) - t0) )); }
cb() { python3 -m crossbench "$@"; }
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,power.limit,clocks.max.sm \
  --format=csv,noheader | tee -a "$LOG/gpu.txt"
mapfile -t uuids < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)
MATRIX=${MATRIX:-$study_matrix}
n_lanes=$(python3 -c "import sys; from pathlib import Path
from crossbench.runner.matrix import expand, load_matrix
from crossbench.runner.ray_exec import plan_lanes
p = Path(sys.argv[1]); print(len(plan_lanes(expand(load_matrix(p), p), [])))" \
  "$MATRIX" 2>/dev/null || echo 0)
if [ "${#uuids[@]}" -ge 2 ] && [ "$n_lanes" -ge 2 ] && python3 -c "import ray" 2>/dev/null; then
  lanes=(ray)  # Ray spreads the lanes over the GPUs; the hand-made lanes below are the fallback
elif [ "${#uuids[@]}" -ge 2 ] && [ "$MATRIX" = "$study_matrix" ]; then
  lanes=(gpu0 gpu1)  # rounds.yaml's --skip lists (skips_gpu0, skips_gpu1) split its arms
else
  lanes=(run)
fi
bin=("$CROSSBENCH_CACHE"/engines/*-cuda-sm90/build/bin)
if [ ! -x "${bin[0]}/llama-server" ]; then
  s=$(date +%s)
  cb engines install llama.cpp --cuda --cuda-arch 90 \
    --source-archive .carry/llama-cpp-python-0.3.36.src.tgz >"$LOG/build.log" 2>&1 || exit 1
  echo "build_seconds=$(( $(date +%s) - s ))" | tee -a "$LOG/gpu.txt"
  bin=("$CROSSBENCH_CACHE"/engines/*-cuda-sm90/build/bin)
fi
s=$(date +%s)
cb fixtures make --shape qwen3-8b --quant Q4_K_M --draft-quant Q8_0 2>&1 | tail -3
echo "fixtures_seconds=$(( $(date +%s) - s ))" | tee -a "$LOG/gpu.txt"
run_s=$(( $(left) - 45 ))
pids=()
for i in "${!lanes[@]}"; do
  lane=${lanes[$i]}; run=$CROSSBENCH_CACHE/h200-$lane
  resume=(); [ -f "$run/state.json" ] && resume=(--resume)
  skips=(); [ "$lane" = gpu0 ] && skips=("${skips_gpu0[@]}")
  [ "$lane" = gpu1 ] && skips=("${skips_gpu1[@]}")
  visible=(); [ "$lane" = gpu0 ] || [ "$lane" = gpu1 ] && \
    visible=(env "CUDA_VISIBLE_DEVICES=${uuids[$i]}")
  executor=(); [ "$lane" = ray ] && executor=(--executor ray --lane-gpus 1)
  if [ "$run_s" -gt 30 ]; then
    "${visible[@]}" timeout -s INT "$run_s" python3 -m crossbench matrix "$MATRIX" \
      --out "$run" "${resume[@]}" "${skips[@]}" "${executor[@]}" --progress plain \
      >"$LOG/matrix-$lane.log" 2>&1 &
    pids+=($!)
  fi
done
for p in "${pids[@]}"; do wait "$p"; echo "lane exit $?"; done
missing=0
for lane in "${lanes[@]}"; do
  run=$CROSSBENCH_CACHE/h200-$lane
  cb status "$run" --json >"$LOG/status-$lane.json" 2>/dev/null
  m=$(python3 -c "import json;print(json.load(open('$LOG/status-$lane.json'))['totals']['missing'])" \
      2>/dev/null || echo unknown)
  echo "$lane: trials missing: $m"
  [ "$m" = 0 ] || missing=1
done
if [ "$missing" = 0 ]; then
  for lane in "${lanes[@]}"; do  # 3 trials x 3 prompts: 9 pairs a cell
    cb analyze "$CROSSBENCH_CACHE/h200-$lane" --min-samples 9 >"$LOG/verdicts-$lane.txt" 2>&1
  done
  target=$(ls "$CROSSBENCH_CACHE"/fixtures/qwen3-8b*/target-Q4_K_M.gguf | head -1)
  for i in "${!uuids[@]}"; do  # the engine's own reference, on every GPU of the study
    CUDA_VISIBLE_DEVICES=${uuids[$i]} "${bin[0]}/llama-bench" -m "$target" -ngl 99 -p 0 \
      -n 128 -r 3 -o json >"$LOG/llama-bench-tg128-gpu$i.json" 2>"$LOG/llama-bench-gpu$i.log"
  done
  CUDA_VISIBLE_DEVICES=${uuids[0]} python3 benchmarks/roofline.py "$target" --out "$LOG/roofline.json"
fi
# Occasion check (two GPUs): the baseline and the alpha 1.0 sweep again on gpu1, alone on the
# host, after the lanes: does a repeat on another occasion land inside the lanes' intervals?
solo=$CROSSBENCH_CACHE/h200-solo-gpu1
if [ "$missing" = 0 ] && [ "${#lanes[@]}" = 2 ] && [ "$(left)" -gt 320 ]; then
  resume=(); [ -f "$solo/state.json" ] && resume=(--resume)
  CUDA_VISIBLE_DEVICES=${uuids[1]} timeout -s INT $(( $(left) - 30 )) python3 -m crossbench \
    matrix "$study_matrix" --out "$solo" "${resume[@]}" "${skips_solo[@]}" \
    --progress plain >"$LOG/matrix-solo-gpu1.log" 2>&1
  echo "solo exit $?"
fi
for lane in "${lanes[@]}" solo-gpu1; do
  [ -d "$CROSSBENCH_CACHE/h200-$lane" ] || continue
  tar -C "$CROSSBENCH_CACHE" -czf "$OUT/h200-$lane.tgz" "h200-$lane" 2>/dev/null
done
tar -C /tmp -czf "$OUT/logs.tgz" h200-logs
ls -la "$OUT"
}

# ---- ROUND=smoke: the first CUDA smoke run of the whole pipeline (docs/gpu.md) ----
# Needs: the pruned source from `crossbench engines pack-source --out .carry/<pin>.src.tgz`,
# wheels of the Python dependencies the host lacks in .whl/ (docs/gpu.md), nvcc, cmake, ninja.
smoke_round() (
set -euo pipefail
export CROSSBENCH_CACHE=${CROSSBENCH_CACHE:-/tmp/crossbench-cache}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
cb() { python3 -m crossbench "$@"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
t0=$(date +%s)
cb engines install llama.cpp --cuda --cuda-arch 90 \
  --source-archive .carry/llama-cpp-python-0.3.36.src.tgz 2>&1 | grep -v "build: step" | tail -4
echo "build_seconds=$(( $(date +%s) - t0 ))" | tee -a "$OUT/gpu.txt"
target=$(cb fixtures path target 2>/dev/null); draft=$(cb fixtures path draft 2>/dev/null)
common=(--variant cuda-sm90 --ngl 99 --model "$target" --requests 16 --max-tokens 256 --trials 3)
cb run "${common[@]}" --spec none --out "$OUT/runs/base" | tee "$OUT/base.txt"
cb run "${common[@]}" --spec draft-simple --n 4 --draft "$draft" --out "$OUT/runs/draft" \
  | tee "$OUT/draft.txt"
cb run "${common[@]}" --spec draft-simple --n 4 --draft "$draft" \
  --synth-rates 0.9,0.7,0.5,0.2 --out "$OUT/runs/synth" | tee "$OUT/synth.txt"
cb run "${common[@]}" --spec ngram-mod --out "$OUT/runs/ngram" | tee "$OUT/ngram.txt"
tar -C "$OUT" -czf "$OUT/runs.tar.gz" runs && rm -rf "$OUT/runs"
)

case "$kind" in
  cross) cross_round ;;
  sglang-check) sglang_check_round ;;
  lanes) lanes_round ;;
  smoke) smoke_round ;;
esac
