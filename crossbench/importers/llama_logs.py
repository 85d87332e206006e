"""Import llama.cpp timing logs: llama-server's per-request timings and the
``llama_perf_context_print`` block of llama-completion and the other single-run tools.

Formats, as the pinned llama.cpp (b11312) prints them: ``server_slot::print_timings``
(``tools/server/server-context.cpp``), one block per request, each line prefixed
``slot print_timing: id S | task T |``::

      prompt eval time =   23.45 ms /   17 tokens (  1.38 ms per token, 724.95 tokens per second)
             eval time =  812.30 ms /  128 tokens (  6.35 ms per token, 157.58 tokens per second)
            total time =  835.75 ms /  145 tokens
      draft acceptance = 0.75000 (   60 accepted /    80 generated), mean len =  2.50

and ``llama_perf_context_print`` (``src/llama-context.cpp``) or ``common_perf_print``
(``common/sampling.cpp``), one block per run, whose ``eval`` line counts ``runs``. How each is
read (TTFT = prompt eval time, decode = eval time, runs + 1 tokens for a perf block), the perf
blocks listed rather than read, and the labels: docs/analysis.md, "``import llama-logs``".
A log has no clock: requests are laid end to end, 1 ms apart, only to hold their durations
(no wall throughput). Values are checked as ``import llama-server`` checks a body's timings;
a request that fails is listed in ``not_imported`` (``FILE request K``) with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossbench.errors import UserError
from crossbench.importers.records import (
    LAYOUT_FIGURES,
    MAX_SOURCE_BYTES,
    NS_PER_MS,
    WALL_FIGURE,
    ImportedCell,
    Invalid,
    Setting,
    check_declared,
    check_decode,
    count,
    file_labels,
    finish_cells,
    new_cell,
    nothing_imported,
    number,
    read_prompts,
    timed_record,
    write_import,
)
from crossbench.importers.table import pattern_regex
from crossbench.textfile import read_text

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan)"
_TIMING = re.compile(
    r"(?P<what>prompt eval time|eval time|total time)\s*=\s*(?P<ms>" + _NUM + r")\s*ms\s*/"
    r"\s*(?P<n>-?\d+)\s*(?P<unit>tokens|runs)"
    r"(?:\s*\(\s*(?:" + _NUM + r")\s*ms per token,\s*(?P<tps>" + _NUM + r")\s*tokens per "
    r"second\))?", re.IGNORECASE)
_SLOT = re.compile(r"slot\s+print_timing\w*:\s*id\s+(?P<slot>\d+)\s*\|\s*task\s+(?P<task>-?\d+)"
                   r"\s*\|")
_PERF = re.compile(r"(?P<fn>llama_perf_context_print|common_perf_print):")
_DRAFT = re.compile(r"draft acceptance\s*=\s*(?:" + _NUM + r")\s*\(\s*(?P<acc>\d+)\s*accepted"
                    r"\s*/\s*(?P<drafted>\d+)\s*generated\)")
_SESSION_SPLIT = "saved session before last token"
"""common_prompt_batch_decode's line when ``--prompt-cache`` decodes the prompt's last token
alone: the perf print then counts that prefill step as an eval run."""
_SPECULATIVE_TOOL = re.compile(r"^\s*(?:\S+\s+)?n_drafted\s*=\s*\d+", re.MULTILINE)
_BUILD = re.compile(r"\(build (?P<num>\d+), commit (?P<commit>\w+)\)|^build: (?P<num2>\d+) "
                    r"\((?P<commit2>\w+)\)", re.MULTILINE)
_MODEL_NAME = re.compile(r"general\.name\s+(?:str\s+)?=\s*(?P<name>[^\n]+)")
_MODEL_FILE = re.compile(r"load_model: loading model '(?P<path>[^'\n]+)'")


@dataclass
class Block:
    """One request's timing lines: the numbers as printed, and where they came from."""

    kind: str  # "server" or "perf"
    key: tuple[Any, ...]
    values: dict[str, tuple[str, str, str | None]] = field(default_factory=dict)
    draft: tuple[int, int] | None = None  # (drafted, accepted)


@dataclass
class Log:
    """What one log file holds: its request blocks, build, model name and slots."""

    blocks: list[Block]
    speculative_tool: bool
    session_split: bool
    build: tuple[int, str] | None
    model: str | None
    slots: set[int]


def parse_log(text: str) -> Log:
    """The timing blocks of a llama.cpp log, in order (module docstring)."""
    blocks: list[Block] = []
    open_blocks: dict[tuple[Any, ...], Block] = {}
    header: tuple[Any, ...] | None = None
    perf_seq = 0
    slots: set[int] = set()
    for raw in text.splitlines():
        line = _ANSI.sub("", raw)
        slot = _SLOT.search(line)
        timing = _TIMING.search(line)
        draft = _DRAFT.search(line)
        if slot is not None:
            header = ("server", int(slot["slot"]), int(slot["task"]))
            slots.add(int(slot["slot"]))
        if timing is None and draft is None:
            continue
        perf = _PERF.search(line)
        key: tuple[Any, ...] | None
        if perf is not None:
            kind, key = "perf", ("perf", perf_seq)
        elif slot is not None or (header is not None and (
                timing is None or timing["unit"].lower() == "tokens")):
            kind, key = "server", header
        elif timing is not None:
            kind, key = "perf", ("perf", perf_seq)  # a bare block, as the perf print has it
        else:
            continue
        assert key is not None
        what = timing["what"].lower() if timing is not None else "draft"
        block = open_blocks.get(key)
        if block is None or (what == "prompt eval time" and "prompt eval time" in block.values):
            block = Block(kind, key)
            open_blocks[key] = block
            blocks.append(block)
        if timing is not None:
            block.values[what] = (timing["ms"], timing["n"], timing["tps"])
            if kind == "perf" and what == "total time":
                perf_seq += 1
                open_blocks.pop(key, None)
        else:
            assert draft is not None
            block.draft = (int(draft["drafted"]), int(draft["acc"]))
    build = _BUILD.search(text)
    name, file = _MODEL_NAME.search(text), _MODEL_FILE.search(text)
    model = name["name"].strip() if name else Path(file["path"]).stem if file else None
    return Log(blocks, bool(_SPECULATIVE_TOOL.search(text)), _SESSION_SPLIT in text,
               (int(build["num"] or build["num2"]), str(build["commit"] or build["commit2"]))
               if build else None, model or None, slots)


def _float(text: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise Invalid(f"{where} is {text!r}, not a number") from None


def check_block(block: Block) -> dict[str, Any]:
    """The request of one block as (ttft_ms, decode_ms, tokens, timings); :class:`Invalid`
    naming the line when a value could not come from llama.cpp."""
    for what in ("prompt eval time", "eval time"):
        if what not in block.values:
            raise Invalid(f"no '{what}' line in the block")
    p_ms, p_n, _ = block.values["prompt eval time"]
    e_ms, e_n, tps = block.values["eval time"]
    prompt_ms = number(_float(p_ms, "prompt eval time"), "prompt eval time")
    prompt_n = count(int(p_n), "prompt eval tokens")
    eval_ms = number(_float(e_ms, "eval time"), "eval time")
    runs = count(int(e_n), "eval tokens" if block.kind == "server" else "eval runs")
    tokens = runs if block.kind == "server" else runs + 1
    if tokens == 0:
        raise Invalid("eval time counts 0 tokens: a response without output cannot be timed")
    if prompt_ms == 0 and prompt_n != 0:
        raise Invalid(f"prompt eval time is 0 ms for {prompt_n} tokens: evaluating a prompt "
                      "takes time")
    check_decode(eval_ms, tokens, "eval time")
    timings: dict[str, Any] = {}
    if block.kind == "server":
        timings = {"prompt_ms": prompt_ms, "prompt_n": prompt_n, "predicted_ms": eval_ms,
                   "predicted_n": runs}
        if tps is not None:
            timings["predicted_per_second"] = number(_float(tps, "eval tokens per second"),
                                                     "eval tokens per second", maximum=None)
        if block.draft is not None:
            drafted, accepted = block.draft
            if accepted > drafted:
                raise Invalid(f"draft acceptance: {accepted} accepted is above {drafted} "
                              "generated")
            timings.update(draft_n=drafted, draft_n_accepted=accepted)
    return {"ttft_ms": prompt_ms, "decode_ms": eval_ms, "tokens": tokens,
            "prompt_tokens": prompt_n, "timings": timings}


_FIX_LOG = "pass llama-server logs (its print_timings lines) or llama-completion/llama-cli output"


def import_llama_logs(files: list[Path], out: Path, *, baseline_arm: str,
                      pattern: str | None = None, model: str | None = None,
                      concurrency: int | None = None, method: str | None = None,
                      prompts: Path | None = None,
                      arm_settings: dict[str, dict[str, Setting]] | None = None,
                      arm_methods: dict[str, str] | None = None,
                      trials_per_start: int | None = None) -> dict[str, Any]:
    """Convert llama.cpp timing logs into an import directory at ``out`` (module
    docstring); returns its state. ``arm_settings``, ``arm_methods`` and
    ``trials_per_start``: :mod:`crossbench.importers.records`."""
    if not files:
        raise UserError("no FILE given", _FIX_LOG)
    rx = pattern_regex(pattern) if pattern else None
    names = set(rx.groupindex) if rx else set()
    if "arm" not in names:
        raise UserError("no arm: the logs do not say which arm ran",
                        "name it in --pattern, e.g. --pattern '{arm}_t{trial}.log'")
    for name, value, option in (("concurrency", concurrency, "--concurrency"),
                                ("model", model, "--model")):
        if value is not None and name in names:
            raise UserError(f"{option} and {{{name}}} in --pattern both given",
                            f"take {name} from one place")
    order, categories = read_prompts(prompts)
    skipped: list[dict[str, str]] = []
    found: list[tuple[dict[str, str], Path, Log]] = []
    for path in files:
        labels = file_labels(path, path.name, "a log file", rx, pattern, skipped)
        if labels is None:
            continue
        log = parse_log(read_text(path, "llama.cpp log", MAX_SOURCE_BYTES,
                                  "split the log into one file per run"))
        if not log.blocks:
            raise UserError(f"{path} holds no llama.cpp timing lines ('prompt eval time = "
                            "... ms / N tokens')", _FIX_LOG)
        if "concurrency" not in labels and concurrency is None and len(log.slots) > 1:
            raise UserError(f"{path.name}: requests on {len(log.slots)} server slots, and the "
                            "log does not say how many the client sent at once",
                            "give --concurrency N (1 if it sent one request at a time) or "
                            "{concurrency} in --pattern")
        if "model" not in labels and model is None and log.model is None:
            raise UserError(f"{path.name}: the log does not name its model (no general.name "
                            "or 'loading model' line)", "give --model NAME or {model} in "
                            "--pattern")
        found.append((labels, path, log))
    if not found:
        raise nothing_imported("log", skipped, "fix --pattern or the files")
    groups: dict[tuple[Any, ...], list[tuple[int | None, Path, Log, dict[str, str]]]] = {}
    for labels, path, log in found:
        key = (labels.get("model") or model or log.model, labels["arm"],
               labels.get("method"), int(labels["n"]) if labels.get("n") else None,
               int(labels.get("concurrency") or concurrency or 1))
        trial = int(labels["trial"]) if labels.get("trial") else None
        groups.setdefault(key, []).append((trial, path, log, labels))
    methods, settings = arm_methods or {}, arm_settings or {}
    check_declared(baseline_arm, methods, settings, sorted({k[1] for k in groups}), "the logs")
    notes: list[str] = []
    cells = [_cell(key, members, baseline_arm, methods.get(key[1]) or key[2] or method,
                   order, categories, prompts, skipped, notes)
             for key, members in groups.items()]
    cells = [c for c in cells if c.records]  # every block listed in not_imported
    if not cells:
        raise nothing_imported("request", skipped, "fix or leave out the logs listed")
    finish_cells(cells, baseline_arm, settings, trials_per_start)
    notes.append("the logs carry no clock: no wall throughput (requests are laid end to end "
                 "only to hold their durations)")
    source = {"tool": "llama-logs", "format": "llama.cpp timing logs (llama-server "
              "print_timings, llama_perf_context_print)", "files": [str(p) for p in files],
              "pattern": pattern, "baseline_arm": baseline_arm, "method": method,
              "prompts": str(prompts) if prompts else None, "arm_methods": methods or None,
              "trials_per_start": trials_per_start, "notes": notes}
    return write_import(out, cells, source, skipped)


def _cell(key: tuple[Any, ...], members: list[tuple[int | None, Path, Log, dict[str, str]]],
          baseline_arm: str, given_method: str | None, order: list[str],
          categories: dict[str, str], prompts: Path | None, skipped: list[dict[str, str]],
          notes: list[str]) -> ImportedCell:
    model, arm, _, n, conc = key
    records: list[dict[str, Any]] = []
    kinds: set[str] = set()
    build: tuple[int, str] | None = None
    trials: list[int] = []
    for rank, (trial_label, path, log, labels) in enumerate(members):
        trial = trial_label if trial_label is not None else rank
        trials.append(trial)
        build = build or log.build
        clock, pos = 0, 0
        for k, block in enumerate(log.blocks):
            where = f"{path.name} request {k}"
            if block.kind == "perf" and log.speculative_tool:
                skipped.append({"file": where, "reason": "a speculative tool's perf print "
                                "counts verification batches as prompt eval: its eval line is "
                                "not the decode time"})
                continue
            if block.kind == "perf" and log.session_split:
                skipped.append({"file": where, "reason": "a --prompt-cache run decodes the "
                                "prompt's last token alone, which the perf print counts as an "
                                "eval run: its eval line is not the decode alone"})
                continue
            if block.kind == "perf" and any(b.kind == "server" for b in log.blocks):
                skipped.append({"file": where, "reason": "a perf print in a server log sums "
                                "the whole context, not one request"})
                continue
            try:
                req = check_block(block)
            except Invalid as e:
                skipped.append({"file": where, "reason": str(e)})
                continue
            kinds.add(block.kind)
            if labels.get("prompt"):
                prompt, category = labels["prompt"], labels.get("category") or "unknown"
            elif order:
                prompt = order[pos % len(order)]
                category = categories[prompt]
            else:
                prompt, category = f"r{pos:05d}", labels.get("category") or "unknown"
            rec = timed_record(
                trial=trial, index=pos, prompt_id=prompt, category=category, t_sent_ns=clock,
                ttft_ns=round(req["ttft_ms"] * NS_PER_MS),
                decode_ns=round(req["decode_ms"] * NS_PER_MS), tokens=req["tokens"],
                usage={"completion_tokens": req["tokens"],
                       "prompt_tokens": req["prompt_tokens"]},
                max_tokens=None, text=None, source=path.name)
            if req["timings"]:
                rec["timings"] = req["timings"]
            if labels.get("server_start"):
                rec["server_start"] = int(labels["server_start"])
            records.append(rec)
            clock = rec["t_done_ns"] + NS_PER_MS
            pos += 1
        if order and not labels.get("prompt") and pos % len(order):
            notes.append(f"{path.name}: {pos} requests for the {len(order)} prompts of "
                         f"{prompts.name if prompts else 'the prompt file'}: the last round "
                         "is partial")
    engine = "llama-server" if kinds != {"perf"} else "llama-cli"
    method = "none" if arm == baseline_arm else (given_method or "unknown")
    workload = f"import:{prompts.stem}" if prompts else "import:llama-logs"
    identity = {"version": f"b{build[0]}-{build[1]}", "build_number": build[0],
                "commit": build[1]} if build else None
    timing = ("llama-server print_timings: prompt eval time as TTFT, eval time as decode time "
              "(the server's prompt_ms and predicted_ms)" if engine == "llama-server" else
              "llama_perf_context_print: prompt eval time as TTFT, eval time as decode time, "
              "runs + 1 output tokens (rate = the line's tokens per second)")
    imported = {"arm": arm, "files": [p.name for _, p, _, _ in members],
                "trials": sorted(set(trials)),
                "timing": timing + "; requests laid end to end, 1 ms apart (no clock)",
                "unknown_figures": [*LAYOUT_FIGURES, WALL_FIGURE]}
    return new_cell(records, imported, engine=engine, model=str(model), target=model, arm=arm,
                    method=method, n=n, workload=workload, concurrency=conc,
                    trials=len(set(trials)), identity=identity)
