"""Import a folder of llama-server response bodies (one JSON file per request).

File names are matched against ``--pattern`` (placeholders :data:`REQUIRED` and
:data:`OPTIONAL`); one cell per (model, arm), ``--baseline-arm`` the baseline. Times come from
the server's ``timings`` (TTFT = ``prompt_ms``, decode time = ``predicted_ms``); a method is
read from the body or given, never guessed from an arm's name. Every field read is checked
(:func:`check_body`); a body that fails is listed in ``not_imported``. Accepted bodies and
checks: docs/analysis.md, "``import llama-server``".
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from crossbench.errors import UserError
from crossbench.importers.records import (
    LAYOUT_FIGURES,
    NS_PER_MS,
    WALL_FIGURE,
    ImportedCell,
    Invalid,
    Setting,
    check_arms,
    check_declared,
    check_decode,
    count,
    file_labels,
    finish_cells,
    json_or_lines,
    new_cell,
    number,
    obj,
    placeholder_regex,
    read_prompts,
    shown,
    text_or_none,
    timed_record,
    write_import,
)
from crossbench.textfile import MIB, read_text

REQUIRED = ("model", "arm", "prompt")
"""Placeholders every ``--pattern`` holds."""
OPTIONAL = ("trial", "category", "start")
"""Placeholders a ``--pattern`` may hold."""
DIGITS = ("trial", "start")
"""Placeholders that match digits only."""
BODY_FIELDS = ("content", "choices", "timings", "error", "tokens_predicted",
               "generation_settings")
"""Fields of which a llama-server response body has at least one: a JSON object with none
(a harness's own result file, a config) is not a body and is refused, never imported as a
failed request."""
MAX_BODY_BYTES = 64 * MIB
"""Largest response body read (one request's body: text, token ids and timings)."""
TIMING_COUNTS = ("cache_n", "prompt_n", "predicted_n", "draft_n", "draft_n_accepted")
"""Fields of llama-server's ``timings`` that count tokens (the ``*_ms`` fields are times)."""


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """The regex of a file-name pattern; errors name ``--pattern`` and the fix."""
    names = re.findall(r"\{([^{}]*)\}", pattern)
    unknown = [n for n in names if n not in REQUIRED + OPTIONAL]
    missing = [n for n in REQUIRED if n not in names]
    if unknown or missing or len(names) != len(set(names)):
        problem = (f"unknown placeholder {{{unknown[0]}}}" if unknown else
                   f"missing {{{missing[0]}}}" if missing else "a placeholder used twice")
        raise UserError(f"--pattern {pattern!r}: {problem}",
                        "use {model}, {arm} and {prompt} once each, optionally {trial}, "
                        "{start} and {category}, e.g. '{model}_{arm}_p{prompt}.json'")
    return placeholder_regex(pattern, lambda name: name in DIGITS)


def _n_regex(expr: str | None) -> re.Pattern[str] | None:
    if expr is None:
        return None
    try:
        rx = re.compile(expr)
    except re.error as e:
        raise UserError(f"--n-from-arm {expr!r} is not a regular expression ({e})",
                        "write e.g. 'n(\\d+)'") from None
    if rx.groups < 1:
        raise UserError(f"--n-from-arm {expr!r} has no group",
                        "put the digits of n in a group, e.g. 'n(\\d+)'")
    return rx


def _body(path: Path) -> dict[str, Any]:
    fix = "keep only llama-server response bodies matching --pattern"
    text = read_text(path, "response body", MAX_BODY_BYTES, fix)
    data = json_or_lines(path, text, "a JSON response body", fix, lines=False)
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a JSON object", "keep only response bodies")
    return data


def check_body(b: dict[str, Any]) -> None:
    """Raise :class:`~crossbench.importers.records.Invalid` for a body whose fields could not
    come from llama-server (module docstring), or an object with none of :data:`BODY_FIELDS`
    (not a response body at all). Fields are named as the body spells them."""
    if not any(k in b for k in BODY_FIELDS):
        keys = ", ".join(sorted(str(k) for k in b)[:4]) or "none"
        raise Invalid(f"not a llama-server response body (no content, choices, timings or "
                      f"error; its keys: {keys}): another tool's file? Move it out of the "
                      "folder or narrow --pattern")
    settings = obj(b.get("generation_settings"), "generation_settings")
    if settings.get("temperature") is not None:
        number(settings["temperature"], "generation_settings.temperature", maximum=None)
    if "ignore_eos" in settings and not isinstance(settings["ignore_eos"], bool | None):
        raise Invalid("generation_settings.ignore_eos is "
                      f"{shown(settings['ignore_eos'])}, not true or false")
    for key in ("n_predict", "max_tokens"):
        if settings.get(key) is not None:
            count(settings[key], f"generation_settings.{key}", minimum=-1)
    text_or_none(settings.get("speculative.types"), "generation_settings.speculative.types")
    for key in ("model", "system_fingerprint", "stop_type", "content"):
        text_or_none(b.get(key), key)
    if "choices" in b:
        choices = b["choices"]
        if not isinstance(choices, list) or not choices:
            raise Invalid(f"choices is {shown(choices)}, not a list of choices")
        choice = obj(choices[0], "choices[0]")
        message = obj(choice.get("message"), "choices[0].message")
        text_or_none(choice.get("text"), "choices[0].text")
        text_or_none(message.get("content"), "choices[0].message.content")
        text_or_none(choice.get("finish_reason"), "choices[0].finish_reason")
        usage = obj(b.get("usage"), "usage")
        tokens_field, tokens = "usage.completion_tokens", usage.get("completion_tokens")
        prompt_field, prompt = "usage.prompt_tokens", usage.get("prompt_tokens")
    else:
        tokens_field, tokens = "tokens_predicted", b.get("tokens_predicted")
        prompt_field, prompt = "tokens_evaluated", b.get("tokens_evaluated")
    if prompt is not None:
        count(prompt, prompt_field)
    t = obj(b.get("timings"), "timings")
    for key, value in t.items():
        if key in TIMING_COUNTS:
            count(value, f"timings.{key}")
        elif key.endswith("_ms"):
            number(value, f"timings.{key}")
        elif key.endswith("_per_second") or isinstance(value, float):
            number(value, f"timings.{key}", maximum=None)
    if "predicted_ms" not in t or "error" in b:
        return  # recorded as a failed request (no timings, or the server's error)
    if tokens is None:
        tokens_field, tokens = "timings.predicted_n", t.get("predicted_n")
    if tokens is None:
        raise Invalid(f"no token count ({tokens_field} and timings.predicted_n are missing)")
    n = count(tokens, tokens_field)
    if n == 0:
        raise Invalid(f"{tokens_field} is 0: a response without output cannot be timed")
    if "prompt_ms" not in t:
        raise Invalid("timings.prompt_ms is missing: the time to first token is unknown")
    if t["prompt_ms"] == 0 and t.get("prompt_n") != 0:
        raise Invalid("timings.prompt_ms is 0: evaluating a prompt takes time")
    check_decode(float(t["predicted_ms"]), n, "timings.predicted_ms")
    if t.get("draft_n_accepted", 0) > t.get("draft_n", 0):
        raise Invalid(f"timings.draft_n_accepted ({t['draft_n_accepted']}) is above "
                      f"timings.draft_n ({t.get('draft_n', 0)})")


_FINISH = {"limit": "length", "eos": "stop", "word": "stop"}


def body_fields(b: dict[str, Any]) -> dict[str, Any]:
    """Text, a thinking model's reasoning, token ids, usage, finish reason and settings of one
    response body."""
    settings = b.get("generation_settings") or {}
    reasoning = None
    if "choices" in b:
        ch = (b.get("choices") or [{}])[0]
        msg = ch.get("message") or {}
        text = ch.get("text") if "text" in ch else msg.get("content")
        reasoning = msg.get("reasoning_content") if isinstance(msg, dict) else None
        usage = b.get("usage")
        finish = ch.get("finish_reason")
        ids = None
    else:
        text, ids = b.get("content"), b.get("tokens")
        usage = {"completion_tokens": b.get("tokens_predicted"),
                 "prompt_tokens": b.get("tokens_evaluated")}
        finish = _FINISH.get(str(b.get("stop_type")), b.get("stop_type"))
    if not (isinstance(ids, list) and all(isinstance(i, int) for i in ids)) or not ids:
        ids = None
    return {"text": text, "token_ids": ids, "usage": usage, "finish_reason": finish,
            "reasoning_text": reasoning if isinstance(reasoning, str) and reasoning else None,
            "settings": settings, "model": b.get("model"),
            "fingerprint": b.get("system_fingerprint")}


#: the method of a speculative arm whose bodies do not name one and no --method was given
UNKNOWN_METHOD = "unknown"


def import_llama_server_raw(raw_dir: Path, pattern: str, baseline_arm: str, out: Path,
                            n_from_arm: str | None = None,
                            prompts: Path | None = None,
                            method: str | None = None, *,
                            arm_settings: dict[str, dict[str, Setting]] | None = None,
                            arm_methods: dict[str, str] | None = None,
                            trials_per_start: int | None = None) -> dict[str, Any]:
    """Convert ``raw_dir`` into an import directory at ``out``; returns its state.
    ``arm_settings``, ``arm_methods`` and ``trials_per_start`` (a ``{start}`` in the pattern
    names each file's start instead): :mod:`crossbench.importers.records`."""
    if not raw_dir.is_dir():
        raise UserError(f"RAW_DIR {raw_dir} is not a directory", "give the folder of bodies")
    rx, n_rx = pattern_regex(pattern), _n_regex(n_from_arm)
    order, categories = read_prompts(prompts)
    workload = f"import:{(prompts or raw_dir).stem}"
    matched: dict[tuple[str, str], list[tuple[dict[str, str], Path, dict[str, Any]]]] = {}
    unmatched: list[dict[str, str]] = []
    excluded: dict[str, list[dict[str, str]]] = {}  # arm -> bodies left out, with the reason
    for path in sorted(p for p in raw_dir.rglob("*") if not p.is_dir()):
        rel = str(path.relative_to(raw_dir))
        g = file_labels(path, rel, "a response body file", rx, pattern, unmatched)
        if g is None:
            continue
        body = _body(path)
        try:
            check_body(body)
        except Invalid as e:
            item = {"file": rel, "reason": str(e)}
            unmatched.append(item)
            excluded.setdefault(g["arm"], []).append(item)
            continue
        matched.setdefault((g["model"], g["arm"]), []).append((g, path, body))
    arms = sorted({a for _, a in matched})
    if not matched and not excluded:
        raise UserError(f"no file in {raw_dir} matches --pattern {pattern!r}",
                        "write the pattern for the file names there, e.g. "
                        "'{model}_{arm}_p{prompt}.json'")
    if baseline_arm not in arms:
        if baseline_arm in excluded:
            first = excluded[baseline_arm][0]
            raise UserError(f"--baseline-arm {baseline_arm!r}: every file was left out "
                            f"(first: {first['file']}: {first['reason']})",
                            "fix or replace the baseline's bodies; nothing can be paired "
                            "without them")
        raise UserError(f"--baseline-arm {baseline_arm!r} matches no file",
                        f"use one of the arms found: {', '.join(sorted({*arms, *excluded}))}")
    if prompts is not None:  # prompt ids the prompt file does not know: category unknown
        known = set(categories)
        for (_, _arm), files in sorted(matched.items()):
            for g, path, _ in files:
                if g["prompt"] not in known and not g.get("category"):
                    unmatched.append({"file": str(path.relative_to(raw_dir)),
                                      "reason": f"prompt id {g['prompt']!r} is not in "
                                                f"{prompts.name}: imported with category "
                                                "unknown"})
    methods, settings = arm_methods or {}, arm_settings or {}
    check_declared(baseline_arm, methods, None, arms)
    cells = [_cell(model, arm, files, arm == baseline_arm, n_rx, categories, order,
                   workload, methods.get(arm, method))
             for (model, arm), files in sorted(matched.items())]
    check_arms("--arm-setting", list(settings),
               {*arms, *(c.coords["arm"] for c in cells)})
    finish_cells(cells, baseline_arm, settings, trials_per_start, by_label=True)
    source = {"tool": "llama-server", "format": "response bodies", "dir": str(raw_dir),
              "pattern": pattern, "baseline_arm": baseline_arm, "n_from_arm": n_from_arm,
              "method": method, "prompts": str(prompts) if prompts else None,
              "arm_methods": methods or None, "trials_per_start": trials_per_start}
    return write_import(out, cells, source, unmatched)


def _cell(model: str, arm: str, files: list[tuple[dict[str, str], Path, dict[str, Any]]],
          baseline: bool, n_rx: re.Pattern[str] | None, categories: dict[str, str],
          order: list[str], workload: str, given_method: str | None = None) -> ImportedCell:
    rank = {p: i for i, p in enumerate(order)}
    files = sorted(files, key=lambda f: (int(f[0].get("trial") or 0),
                                         rank.get(f[0]["prompt"], len(rank)), f[0]["prompt"]))
    records: list[dict[str, Any]] = []
    clock: dict[int, int] = {}
    types: set[str] = set()
    temps: set[float] = set()
    ignore_eos: set[bool] = set()
    max_tokens: set[int] = set()
    fingerprint = engine_model = None
    for index, (g, path, body) in enumerate(files):
        trial = int(g.get("trial") or 0)
        f = body_fields(body)
        s = f["settings"]
        types.update(t for t in str(s.get("speculative.types") or "").split(",") if t)
        if s.get("temperature") is not None:
            temps.add(float(s["temperature"]))
        if isinstance(s.get("ignore_eos"), bool):
            ignore_eos.add(s["ignore_eos"])
        want = s.get("n_predict", s.get("max_tokens"))
        if isinstance(want, int) and want > 0:
            max_tokens.add(want)
        fingerprint = fingerprint or f["fingerprint"]
        engine_model = engine_model or f["model"]
        t = body.get("timings") or {}
        tokens = (f["usage"] or {}).get("completion_tokens") or t.get("predicted_n")
        category = g.get("category") or categories.get(g["prompt"], "unknown")
        sent = clock.get(trial, 0)
        ok = "predicted_ms" in t and "error" not in body
        ttft = int(float(t.get("prompt_ms", 0.0)) * NS_PER_MS) if ok else None
        decode = int(float(t.get("predicted_ms", 0.0)) * NS_PER_MS) if ok else None
        rec = timed_record(trial=trial, index=index, prompt_id=g["prompt"], category=category,
                           t_sent_ns=sent, ttft_ns=ttft, decode_ns=decode,
                           tokens=int(tokens) if ok and tokens else None,
                           endpoint="chat" if "message" in str(body.get("choices")) else
                           "completions", max_tokens=want if isinstance(want, int) else None,
                           text=f["text"], token_ids=f["token_ids"],
                           finish_reason=f["finish_reason"], usage=f["usage"], timings=t,
                           source=path.name)
        if f["reasoning_text"] is not None:  # parity compares reasoning and content
            rec["reasoning_text"] = f["reasoning_text"]
        if not ok:
            rec.update(status="error", error=str(body.get("error", "no timings in the body")))
        if g.get("start") is not None:
            rec["server_start"] = int(g["start"])
        records.append(rec)
        clock[trial] = rec["t_done_ns"] + NS_PER_MS  # next request 1 ms later
    method = "none" if baseline or given_method == "none" else _method(types, given_method)
    n, label = None, arm
    if n_rx is not None and method != "none":
        hit = n_rx.search(arm)
        if hit:  # the arm of an n-sweep is one arm at several n, as in a matrix
            try:
                n = int(hit[1])
            except (TypeError, ValueError):
                raise UserError(f"--n-from-arm: the group of {n_rx.pattern!r} matched "
                                f"{hit[1]!r} in arm {arm!r}, which is not a whole number",
                                "put only the digits of n in the group, e.g. 'n(\\d+)'"
                                ) from None
            label = n_rx.sub("", arm).strip("-_. ") or method
    load = {"max_tokens": max(max_tokens) if max_tokens else None,
            "temperature": max(temps) if temps else None,
            "ignore_eos": (ignore_eos == {True}) if ignore_eos else None}
    build = re.match(r"b(\d+)-(\w+)", str(fingerprint or ""))
    identity = {"version": fingerprint, "build_number": int(build[1]) if build else None,
                "commit": build[2] if build else None}
    imported = {"arm": arm, "files": [p.name for _, p, _ in files],
                "timing": "server timings (prompt_ms as TTFT, predicted_ms as decode time); "
                          "requests laid end to end, 1 ms apart",
                "unknown_figures": [*LAYOUT_FIGURES, WALL_FIGURE]}
    return new_cell(records, imported, engine="llama-server", model=str(engine_model or model),
                    target=model, arm=label, method=method, n=n, workload=workload,
                    concurrency=1, trials=len({r["trial"] for r in records}), load=load,
                    identity=identity)


def _method(types: set[str], given: str | None) -> str:
    """The method the bodies name, else the one given with --method, else unknown."""
    named = sorted(types - {"none"})
    if named:
        return ",".join(named)
    return given or UNKNOWN_METHOD
