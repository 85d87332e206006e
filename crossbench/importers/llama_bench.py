"""Import ``llama-bench -o json`` (or ``-o jsonl``) output.

One cell per test configuration, one record per repetition: a generation test (``tg``) is a
request whose decode rate equals llama-bench's t/s exactly, a prompt test (``pp``) a request
with no output whose TTFT is the sample time; a combined test (``pg``) is listed in
``not_imported``. Every cell is a baseline (llama-bench runs no speculative decoding). Every
field read is checked (:func:`check_test`). Details: docs/analysis.md, "``import
llama-bench``".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from crossbench.errors import UserError
from crossbench.importers.records import (
    LAYOUT_FIGURES,
    MAX_MS,
    NS_PER_MS,
    WALL_FIGURE,
    ImportedCell,
    Invalid,
    check_decode,
    count,
    finite_everywhere,
    new_cell,
    read_json_objects,
    shown,
    text_or_none,
    timed_record,
    write_import,
)

RESULT_FIELDS = {"test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts", "samples_ns",
                 "samples_ts"}
"""Fields that are measurements, not parameters of the test."""

HOST_FIELDS = {"build_commit", "build_number", "cpu_info", "gpu_info", "backends",
               "model_type", "model_size", "model_n_params"}
"""Fields that describe the build, host and model rather than the test."""


def read_tests(path: Path) -> list[dict[str, Any]]:
    """Test objects of a ``-o json`` array or ``-o jsonl`` file."""
    return read_json_objects(path, "llama-bench JSON",
                             "write it with `llama-bench -o json` or `-o jsonl`",
                             item="llama-bench test", keys=("samples_ns", "n_gen"),
                             wrong="llama-bench output",
                             wrong_fix="write it with `llama-bench -o json` (a recent build)")


def check_test(t: dict[str, Any]) -> None:
    """Raise :class:`~crossbench.importers.records.Invalid` for a test whose fields could not
    come from llama-bench (see the module docstring); fields named as llama-bench spells them."""
    finite_everywhere(t, "")
    n_prompt, n_gen = count(t["n_prompt"], "n_prompt"), count(t["n_gen"], "n_gen")
    if t.get("n_depth") is not None:
        count(t["n_depth"], "n_depth")
    if not n_prompt and not n_gen:
        raise Invalid("n_prompt and n_gen are both 0: the test timed nothing")
    samples = t["samples_ns"]
    if not isinstance(samples, list) or not samples:
        raise Invalid(f"samples_ns is {shown(samples)}, not a list of repetitions")
    for k, ns in enumerate(samples):
        if count(ns, f"samples_ns[{k}]", maximum=int(MAX_MS * 1e6)) == 0:
            raise Invalid(f"samples_ns[{k}] is 0: a repetition takes time")
        if not n_prompt:  # a tg test's record decodes n_gen - 1 tokens in (n_gen - 1) / n_gen
            check_decode(ns / 1e6 * (n_gen - 1) / n_gen, n_gen, f"samples_ns[{k}] (scaled)")
    for key in ("model_filename", "build_commit", "cpu_info", "gpu_info", "backends"):
        text_or_none(t.get(key), key)
    if t.get("build_number") is not None:
        count(t["build_number"], "build_number")


def import_llama_bench(path: Path, out: Path) -> dict[str, Any]:
    """Convert a llama-bench JSON file into an import directory at ``out``."""
    cells: list[ImportedCell] = []
    skipped: list[dict[str, str]] = []
    tests: list[tuple[int, dict[str, Any]]] = []
    for i, t in enumerate(read_tests(path)):
        try:
            check_test(t)
        except Invalid as e:
            skipped.append({"file": f"{path.name} test {i}", "reason": str(e)})
            continue
        tests.append((i, t))
    if not tests:
        raise UserError(f"{path} has no test to import (first: {skipped[0]['file']}: "
                        f"{skipped[0]['reason']})", "fix the file, or import another")
    first = tests[0][1]
    params = [k for k in first if k not in RESULT_FIELDS | HOST_FIELDS
              and k not in ("model_filename", "n_prompt", "n_gen", "n_depth")]
    varying = [k for k in params if len({json.dumps(t.get(k)) for _, t in tests}) > 1]
    for i, t in tests:
        label = _workload(t, varying)
        if t["n_prompt"] and t["n_gen"]:
            skipped.append({"file": f"{path.name} test {i} ({label})",
                            "reason": "a combined prompt+generation test cannot be split into "
                                      "prefill and decode"})
            continue
        cells.append(_cell(t, i, label, path.name))
    if not cells:
        raise UserError(f"{path} has no pp or tg test to import",
                        "run llama-bench with -p and -n tests (not only -pg)")
    source = {"tool": "llama-bench", "format": "llama-bench -o json", "files": [str(path)],
              "host": {"cpu": first.get("cpu_info"), "gpu": first.get("gpu_info"),
                       "backends": first.get("backends")}}
    return write_import(out, cells, source, skipped)


def _workload(t: dict[str, Any], varying: list[str]) -> str:
    parts = ([f"pp{t['n_prompt']}"] if t["n_prompt"] else []) + (
        [f"tg{t['n_gen']}"] if t["n_gen"] else [])
    kind = "+".join(parts)
    extra = "".join(f"-{k}={t.get(k)}" for k in varying)
    return f"llama-bench-{kind}" + (f"@d{t['n_depth']}" if t.get("n_depth") else "") + extra


def _cell(t: dict[str, Any], index: int, workload: str, source: str) -> ImportedCell:
    model = Path(str(t.get("model_filename", "model"))).name
    records = []
    sent = 0
    for rep, ns in enumerate(t["samples_ns"]):
        ns = int(ns)
        if t["n_gen"]:
            n = int(t["n_gen"])
            rec = timed_record(trial=rep, index=0, prompt_id=workload, category="tg",
                               t_sent_ns=sent, ttft_ns=ns // n, decode_ns=ns - ns // n,
                               tokens=n, usage={"completion_tokens": n, "prompt_tokens": 0},
                               max_tokens=n, text=None, source=source)
        else:
            rec = timed_record(trial=rep, index=0, prompt_id=workload, category="pp",
                               t_sent_ns=sent, ttft_ns=ns, decode_ns=None, tokens=0,
                               usage={"completion_tokens": 0,
                                      "prompt_tokens": int(t["n_prompt"])},
                               max_tokens=0, text=None, source=source)
        records.append(rec)
        sent = rec["t_done_ns"] + NS_PER_MS
    imported = {
        "test_index": index, "test": dict(t),
        "timing": "one record per repetition: tg tests as n_gen tokens, the first taking "
                  "1/n_gen of the sample (TTFT not measured); pp tests as prefill only",
        "unknown_figures": [*LAYOUT_FIGURES, WALL_FIGURE, "latency_ms.ttft"]}
    load = {"max_tokens": t["n_gen"], "n_prompt": t["n_prompt"], "n_depth": t.get("n_depth", 0)}
    identity = {"version": f"b{t.get('build_number')}-{t.get('build_commit')}",
                "build_number": t.get("build_number"), "commit": t.get("build_commit")}
    cell = new_cell(records, imported, engine="llama-bench", model=str(t.get("model_filename")),
                    target=model, arm="none", method="none", n=None, workload=workload,
                    concurrency=1, trials=len(records), load=load, identity=identity)
    cell.config["engine_config"].update({k: v for k, v in t.items()
                                         if k not in RESULT_FIELDS | HOST_FIELDS
                                         and k != "model_filename"})
    return cell
