#!/usr/bin/env bash
# SGLang's live adapter check on one H200 (issue 16), in device calls chained while the machine
# stays warm. Every call runs this script; it does each step whose inputs have arrived:
#
#   1. crossbench's own wheels (.whl/) into /tmp/site;
#   2. the parts of the SGLang pack carried by this call (.carry/sglang-*/: `crossbench
#      engines pack sglang==0.5.17 ... --part-mb 45`, 4 parts) kept in /tmp/sg-pack;
#   3. the llama.cpp source (.carry/llama-cpp-python-*.src.tgz) unpacked for the real Qwen
#      tokenizer, then the tiny fixture pair with its Hugging Face folders;
#   4. once every part is there: `crossbench engines install sglang --from /tmp/sg-pack`, the
#      versions of what the launcher imports, and `crossbench engines check sglang` on the
#      tiny HF target drafting for itself (attention_backend triton: the pack drops
#      FlashAttention-3, engines/sglang/pack.yaml), in the background so that a call's end
#      cuts nothing; each call waits until the check ends or BUDGET_S is nearly spent.
# What comes back: $OUT/sglang-check.tgz with the check's folder (server log, scrapes,
# records), check.txt, the install log and record, imports.txt and calls.txt.
#
# Usage: OUT=/some/dir BUDGET_S=560 bash benchmarks/h200_sglang_check.sh
LOG=/tmp/sg-logs   # /tmp lasts while the machine stays warm
. "$(dirname "$0")/device_call.sh"   # OUT, BUDGET_S: left, cb, say; .whl/ installed
mkdir -p /tmp/sg-pack

# 2. this call's parts of the pack
for f in .carry/sglang-*/pack.json .carry/sglang-*/payload.tar.part*; do
  [ -f "$f" ] || continue
  cp -n "$f" /tmp/sg-pack/ && say "kept $(basename "$f") ($(stat -c %s "$f") bytes)"
done

# 3. the real Qwen tokenizer from the llama.cpp source, then the tiny pair with HF folders
src=$(ls .carry/llama-cpp-python-*.src.tgz 2>/dev/null | head -1)
if [ -n "$src" ] && [ ! -s "$LOG/fixtures.txt" ]; then
  python3 - "$src" <<'EOF' >>"$LOG/calls.txt" 2>&1
import sys
from pathlib import Path
from crossbench.engines.llamacpp.build import unpack_source
from crossbench.engines.llamacpp.pins import DEFAULT_PIN, get_pin
unpack_source(get_pin(DEFAULT_PIN), Path(sys.argv[1]))
EOF
  cb fixtures make --shape tiny --hf >"$LOG/fixtures.txt" 2>"$LOG/fixtures.err" \
    && say "fixtures: $(tr '\n' ' ' <"$LOG/fixtures.txt")" \
    || { say "fixtures failed: $(tail -2 "$LOG/fixtures.err")"; rm -f "$LOG/fixtures.txt"; }
fi

# 4. install once every part is there, then the check in the background
prefix=$(ls -d "$CROSSBENCH_CACHE"/engines/sglang-*/ 2>/dev/null | head -1)
if [ -z "$prefix" ] && pack_complete /tmp/sg-pack; then
  s=$(date +%s)
  cb engines install sglang --from /tmp/sg-pack >"$LOG/install.log" 2>&1 \
    && say "sglang installed in $(( $(date +%s) - s )) s: $(tail -1 "$LOG/install.log")" \
    || say "install failed: $(tail -3 "$LOG/install.log")"
  prefix=$(ls -d "$CROSSBENCH_CACHE"/engines/sglang-*/ 2>/dev/null | head -1)
fi
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
  setsid bash -c 'python3 -m crossbench engines check sglang --binary "$0" --model "$1" \
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
