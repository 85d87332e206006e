"""Import ``vllm bench serve --save-result`` JSON files (vLLM 0.33's ``benchmarks/serve.py``).

Results of one configuration become the trials of one cell; with ``--save-detailed`` each
request becomes a record (seconds in the file, nanoseconds in the record; acceptance kept as
counts, vLLM's 0-100 rate recomputed as a fraction). What the file cannot say is given or
left unknown, never guessed; every field read is checked (:func:`check_result`), and a result
that fails is listed in ``not_imported``. Units, pairing and checks: docs/analysis.md,
"``import vllm-bench``".
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from crossbench.errors import UserError
from crossbench.importers.records import (
    MAX_MS,
    NS_PER_MS,
    WALL_FIGURE,
    ImportedCell,
    Invalid,
    Setting,
    check_arms,
    check_declared,
    check_decode,
    count,
    finish_cells,
    finite_everywhere,
    new_cell,
    nothing_imported,
    number,
    read_json_objects,
    read_prompts,
    setting_key,
    setting_value,
    shown,
    text_or_none,
    timed_record,
    write_import,
)

NS = 1_000_000_000
PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times",
               "queue_times", "generated_texts", "errors", "server_queue_times",
               "server_ttfts")
KNOWN = {
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency", "ramp_up_strategy", "ramp_up_start_rps",
    "ramp_up_end_rps", "duration", "completed", "failed", "total_input_tokens",
    "total_output_tokens", "request_throughput", "request_goodput", "output_throughput",
    "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
    "rps_change_events", *PER_REQUEST,
}
NUMERIC = {"duration", "burstiness", "total_input_tokens", "total_output_tokens",
           "request_throughput", "request_goodput", "output_throughput",
           "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests"}
"""Fields vLLM writes as numbers (besides the ``*_ms`` and ``spec_decode_*`` metrics)."""
_METRIC = re.compile(r"^(mean|median|std|p[\d.]+)_\w+_ms$|^(spec_decode|diffusion|probe)_")
_ARM_KEYS = ("arm", "method", "n", "num_speculative_tokens", "trial", "server_start")
NOT_SETTINGS = (*_ARM_KEYS, "dataset", "vllm_version", "max_tokens", "temperature", "engine",
                "crossbench_cell", "crossbench_version")
"""``--metadata`` keys that label a result rather than set the server; every other key is a
serve setting (``gpu_memory_utilization=0.9``) and reaches the engine config."""
ENGINE_FIX = ("pass --engine vllm (or sglang, llama-server: the server the study ran), or "
              "run vllm bench serve with --metadata engine=vllm")


def read_results(path: Path) -> list[dict[str, Any]]:
    """The result objects of one file (one object, or one per line)."""
    return read_json_objects(path, "vllm bench JSON",
                             "pass files written by `vllm bench serve --save-result`",
                             item="vllm bench serve result", keys=("model_id", "completed"),
                             wrong="a vllm bench serve result")


_MAX_S = MAX_MS / 1000
_CLOCK_S = 1e10  # start_times are perf_counter() readings: seconds since boot


def _per_request(res: dict[str, Any], key: str, size: int) -> list[Any] | None:
    value = res.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise Invalid(f"{key} is {shown(value)}, not a list")
    if len(value) != size:
        raise Invalid(f"{key} has {len(value)} entries for {size} latencies")
    return value


def check_result(res: dict[str, Any]) -> None:
    """Raise :class:`~crossbench.importers.records.Invalid` for a result whose fields could
    not come from ``vllm bench serve`` (see the module docstring); fields are named as vLLM
    spells them, per-request values with their index (``ttfts[3]``)."""
    if not isinstance(res["model_id"], str) or not res["model_id"]:
        raise Invalid(f"model_id is {shown(res['model_id'])}, not a model name")
    for key in ("backend", "label", "endpoint_type", "tokenizer_id", "date"):
        text_or_none(res.get(key), key)
    count(res["completed"], "completed")
    for key, least in (("failed", 0), ("num_prompts", 0), ("max_concurrency", 1)):
        if res.get(key) is not None:
            count(res[key], key, minimum=least)
    rate = res.get("request_rate")
    if rate is not None and not isinstance(rate, str) and rate != math.inf:
        number(rate, "request_rate", positive=True, maximum=None)
    meta = metadata(res)
    for key in ("arm", "method", "trial", "dataset", "vllm_version", "engine"):
        if meta.get(key) is not None and not isinstance(meta[key], str | int):
            raise Invalid(f"metadata {key} is {shown(meta[key])}, not a label")
    for key in ("n", "num_speculative_tokens", "server_start"):
        value = meta.get(key)
        if isinstance(value, str):  # --metadata n=3 is written as the string "3"
            digits = value.strip()
            if not digits.isascii() or not digits.isdigit():
                raise Invalid(f"metadata {key} is {shown(value)}, not a whole number")
            if len(digits) > 4:
                raise Invalid(f"metadata {key} is {shown(value)}, above 1024")
            value = int(digits)
        if value is not None:
            count(value, f"metadata {key}", maximum=1024)
    for key in ("max_tokens", "temperature"):
        if meta.get(key) is not None and not isinstance(meta[key], str | int | float):
            raise Invalid(f"metadata {key} is {shown(meta[key])}, not a value")
    for key, value in res.items():
        if key in PER_REQUEST or key == "request_rate":
            continue
        finite_everywhere(value, key)
        if value is not None and (key in NUMERIC or key.endswith("_ms") or (
                key.startswith("spec_decode_") and not isinstance(value, list))):
            number(value, key, maximum=None)  # times, rates and acceptance figures: >= 0
    _check_spec(res)
    latencies = res.get("latencies")
    if latencies is None:
        return
    if not isinstance(latencies, list):
        raise Invalid(f"latencies is {shown(latencies)}, not a list")
    size = len(latencies)
    ttfts, itls = _per_request(res, "ttfts", size), _per_request(res, "itls", size)
    starts = _per_request(res, "start_times", size)
    lens = {k: _per_request(res, k, size) for k in ("output_lens", "input_lens")}
    errors = _per_request(res, "errors", size) or [None] * size
    texts = _per_request(res, "generated_texts", size) or [None] * size
    if ttfts is not None and itls is not None:
        for key, values in lens.items():
            if values is None:
                raise Invalid(f"{key} is missing beside ttfts and itls")
    for i, lat in enumerate(latencies):
        latency = number(lat, f"latencies[{i}]", maximum=_MAX_S, unit="s")
        error = text_or_none(errors[i], f"errors[{i}]")
        text_or_none(texts[i], f"generated_texts[{i}]")
        if starts is not None:
            number(starts[i], f"start_times[{i}]", maximum=_CLOCK_S, unit="s")
        tokens = {k: count(v[i], f"{k}[{i}]") for k, v in lens.items() if v is not None}
        done = not error and latency > 0  # 0: a failed request (zero_latency lists it)
        out_len = tokens.get("output_lens")
        if done and out_len is not None and (ttfts is None or itls is None):
            check_decode(latency * 1000, out_len, f"latencies[{i}]")
        if ttfts is not None:
            ttft = number(ttfts[i], f"ttfts[{i}]", maximum=_MAX_S, unit="s")
            if done and ttft == 0:
                raise Invalid(f"ttfts[{i}] is 0 for a completed request: the first token "
                              "takes time")
        if itls is not None:
            gaps = itls[i]
            if not isinstance(gaps, list):
                raise Invalid(f"itls[{i}] is {shown(gaps)}, not a list")
            decode = sum(number(gap, f"itls[{i}][{j}]", maximum=_MAX_S, unit="s")
                         for j, gap in enumerate(gaps))
            if done and out_len is not None:
                check_decode(decode * 1000, out_len, f"itls[{i}] (their sum)")
        if done and out_len == 0:
            raise Invalid(f"output_lens[{i}] is 0 for a completed request")


def zero_latency(res: dict[str, Any]) -> list[int]:
    """Indexes of a checked result's requests with latency 0 and no error: vLLM's record of a
    failed request whose error text was empty. They are imported as failed requests, never
    dropped, and listed in ``not_imported`` so that no sample changes status unsaid."""
    latencies = res.get("latencies") or []
    errors = res.get("errors") or [None] * len(latencies)
    return [i for i, lat in enumerate(latencies) if lat == 0 and not errors[i]]


def _check_spec(res: dict[str, Any]) -> None:
    """Acceptance counts: whole, accepted <= drafted; per-position rates within 0-1."""
    if "spec_decode_num_drafts" not in res:
        return
    drafts = count(res["spec_decode_num_drafts"], "spec_decode_num_drafts", maximum=2**62)
    drafted = count(res.get("spec_decode_draft_tokens", 0), "spec_decode_draft_tokens",
                    maximum=2**62)
    accepted = count(res.get("spec_decode_accepted_tokens", 0),
                     "spec_decode_accepted_tokens", maximum=2**62)
    if accepted > drafted:
        raise Invalid(f"spec_decode_accepted_tokens ({accepted}) is above "
                      f"spec_decode_draft_tokens ({drafted})")
    if drafted and not drafts:
        raise Invalid(f"spec_decode_num_drafts is 0 for {drafted} drafted tokens")
    rates = res.get("spec_decode_per_position_acceptance_rates")
    if rates is None:
        return
    if not isinstance(rates, list) or len(rates) > 1024:
        raise Invalid("spec_decode_per_position_acceptance_rates is "
                      f"{shown(rates)}, not a list of up to 1024 rates")
    for k, r in enumerate(rates):
        number(r, f"spec_decode_per_position_acceptance_rates[{k}]", maximum=1.0, unit="")


def metadata(result: dict[str, Any]) -> dict[str, Any]:
    """Fields that are neither vLLM's own nor metrics: the ``--metadata KEY=VALUE`` pairs."""
    return {k: v for k, v in result.items() if k not in KNOWN and not _METRIC.match(k)}


def arm_of(result: dict[str, Any]) -> tuple[str, str, int | None]:
    """(arm, method, n) of a result (see the module docstring)."""
    meta = metadata(result)
    spec = "spec_decode_num_drafts" in result
    method = str(meta.get("method") or ("speculative" if spec else "none"))
    n_raw = meta.get("n", meta.get("num_speculative_tokens"))
    rates = result.get("spec_decode_per_position_acceptance_rates") or []
    n = int(n_raw) if n_raw is not None else (len(rates) or None) if spec else None
    arm = str(meta.get("arm") or result.get("label") or
              (method if method != "none" else "baseline"))
    return arm, method, n


def _identity(result: dict[str, Any]) -> tuple[Any, ...]:
    meta = {k: v for k, v in metadata(result).items() if k not in _ARM_KEYS}
    return (result["model_id"], result.get("backend"), *arm_of(result),
            result.get("max_concurrency"), str(result.get("request_rate")),
            result.get("num_prompts"), json.dumps(meta, sort_keys=True),
            "ttfts" in result)


def engine_of(result: dict[str, Any], given: str | None) -> str | None:
    """The server that ran a result: ``--engine``, else ``--metadata engine=...``, else the
    ``backend`` of a file crossbench exported (it writes its engine there); never vLLM's own
    ``backend``, which names the client's protocol (``openai-chat``), not the server."""
    if given is not None:
        return given
    meta = metadata(result)
    if meta.get("engine"):
        return str(meta["engine"])
    if meta.get("crossbench_cell") and result.get("backend"):
        return str(result["backend"])
    return None


def import_vllm_bench(files: list[Path], out: Path, *, engine: str | None = None,
                      arm_settings: dict[str, dict[str, Setting]] | None = None,
                      arm_methods: dict[str, str] | None = None,
                      baseline_arm: str | None = None, prompts: Path | None = None,
                      trials_per_start: int | None = None) -> dict[str, Any]:
    """Convert vllm bench result files into an import directory at ``out``.

    ``engine`` names the server (else each result's ``--metadata engine``; the import is
    refused when neither says); ``baseline_arm`` picks the baseline among several method-none
    arms (the others are paired with it as reruns); ``prompts`` gives the prompt of request i
    (i modulo the prompt count, in the file's order); ``arm_settings``, ``arm_methods`` and
    ``trials_per_start``: :mod:`crossbench.importers.records`."""
    if not files:
        raise UserError("no FILE given", "pass one or more --save-result JSON files")
    from crossbench.engines import registry

    if engine is not None and engine not in registry.names():
        raise UserError(f"--engine {engine!r} is not an engine crossbench knows",
                        f"use one of: {', '.join(registry.names())}")
    groups: dict[tuple[Any, ...], list[tuple[Path, dict[str, Any]]]] = {}
    skipped: list[dict[str, str]] = []
    for path in files:
        results = read_results(path)
        for k, res in enumerate(results):
            where = path.name if len(results) == 1 else f"{path.name} result {k}"
            try:
                check_result(res)
            except Invalid as e:
                skipped.append({"file": where, "reason": str(e)})
                continue
            kind = engine_of(res, engine)
            if kind is None:
                raise UserError(f"{where} does not say which server ran it (backend "
                                f"{shown(res.get('backend'))} is the client's protocol, not "
                                "the engine)", ENGINE_FIX)
            if kind not in registry.names():
                raise UserError(f"{where}: metadata engine {kind!r} is not an engine crossbench "
                                "knows", f"pass --engine, one of: {', '.join(registry.names())}")
            groups.setdefault((kind, *_identity(res)), []).append((path, res))
            skipped += [{"file": f"{where} request {i}",
                         "reason": f"latencies[{i}] is 0 with no error: imported as a failed "
                                   "request (vLLM writes 0 only for one)"}
                        for i in zero_latency(res)]
    if not groups:
        raise nothing_imported("result", skipped, "fix or leave out the files listed")
    order, categories = read_prompts(prompts)
    methods = arm_methods or {}
    cells = [_cell(key[0], members, methods, order, categories, skipped)
             for key, members in groups.items()]
    arms = {c.imported["arm"] for c in cells}
    settings = arm_settings or {}
    check_declared(baseline_arm, methods, settings, sorted(arms))
    if baseline_arm is not None:
        check_arms("--baseline-arm", [baseline_arm], arms)
    else:  # two arms without speculation: which is the baseline?
        plain: dict[tuple[Any, ...], set[str]] = {}
        for c in cells:
            if c.coords["method"] == "none":
                key = tuple(c.coords[k] for k in ("target", "workload", "concurrency"))
                plain.setdefault(key, set()).add(c.imported["arm"])
        several = next((sorted(a) for a in plain.values() if len(a) > 1), None)
        if several:
            raise UserError(f"arms {', '.join(several)} all ran without speculation",
                            f"name the baseline with --baseline-arm {several[0]} (the others "
                            "are paired with it as reruns)")
    ids = [c.id for c in cells]
    for c in cells:
        if c.imported["arm"] == baseline_arm and c.coords["method"] != "none":
            raise UserError(f"--baseline-arm {baseline_arm!r} ran method "
                            f"{c.coords['method']!r}, not none",
                            f"add --arm-method {baseline_arm}=none if it ran without "
                            "speculation, or name the arm that did")
        if ids.count(c.id) > 1 and not c.imported.get("detailed"):  # beside a detailed run
            c.coords["arm"] = f"{c.coords['arm']}-aggregate"
    finish_cells(cells, baseline_arm, settings, trials_per_start)
    source = {"tool": "vllm-bench", "format": "vllm bench serve --save-result",
              "files": [str(p) for p in files], "engine": engine,
              "prompts": str(prompts) if prompts else None,
              "trials_per_start": trials_per_start}
    return write_import(out, cells, source, skipped)


def _wall_figure(members: list[tuple[Path, dict[str, Any]]], detailed: bool,
                 concurrency: Any, skipped: list[dict[str, str]]) -> dict[str, Any]:
    """The cell's wall throughput where records cannot measure it: results without
    per-request start times (or token counts) take the file's own ``duration`` and
    ``total_output_tokens`` (else its ``output_throughput``); none when the file has neither
    and requests of a concurrent run would have to be laid end to end. Returns the
    ``imported`` keys that say so; a note goes to ``skipped``."""
    results = [res for _, res in members]
    if detailed and all(r.get("start_times") is not None for r in results):
        return {}  # the records hold when each request was sent: they measure it
    key = WALL_FIGURE
    names = ", ".join(sorted({p.name for p, _ in members}))
    why = ("no per-request token counts (run without --save-detailed)" if not detailed else
           f"no per-request start_times at concurrency {concurrency}")
    tokens = [float(r["total_output_tokens"]) for r in results
              if r.get("total_output_tokens") is not None]
    spans = [float(r["duration"]) for r in results if r.get("duration")]
    rates = [float(r["output_throughput"]) for r in results
             if r.get("output_throughput") is not None]
    value: float | None = None
    if len(tokens) == len(spans) == len(results):
        value = sum(tokens) / sum(spans)
        how = "the file's own total_output_tokens / duration"
    elif len(rates) == len(results):
        value = sum(rates) / len(rates)
        how = "the file's own output_throughput (mean over trials)"
    if value is not None:
        skipped.append({"file": names, "reason": f"{why}: wall throughput imported with "
                                                 f"{how}, {value:.2f} tok/s"})
        return {"source_figures": {key: value}, "figure_notes": {key: f"{why}; {how}"}}
    if detailed and concurrency == 1:
        return {}  # one request at a time: laid end to end, they hold the wall window
    note = (f"{why} and no duration or output_throughput: imported with no wall throughput "
            "(requests of a concurrent run cannot be laid end to end)")
    skipped.append({"file": names, "reason": note})
    return {"unknown_figures": [key], "figure_notes": {key: note}}


_AGGREGATE = ("output_throughput", "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms",
              "median_tpot_ms", "mean_itl_ms", "mean_e2el_ms", "completed", "failed")
"""The figures of an aggregate-only result kept per trial in the manifest."""


def _cell(engine: str, members: list[tuple[Path, dict[str, Any]]], methods: dict[str, str],
          order: list[str], categories: dict[str, str],
          skipped: list[dict[str, str]]) -> ImportedCell:
    first = members[0][1]
    arm, method, n = arm_of(first)
    method = methods.get(arm, method)
    records: list[dict[str, Any]] = []
    counts = [0.0, 0.0, 0.0]  # drafts, drafted tokens, accepted tokens over all trials
    per_pos = [0.0] * len(first.get("spec_decode_per_position_acceptance_rates") or [])
    spec = "spec_decode_num_drafts" in first
    kept, aggregates = [], []
    for trial, (path, res) in enumerate(members):
        records += _records(res, trial, path.name, order, categories)
        kept.append({"file": path.name, **{k: v for k, v in res.items()
                                           if k not in PER_REQUEST}})
        aggregates.append({k: res.get(k) for k in _AGGREGATE})
        if spec:
            drafts = float(res.get("spec_decode_num_drafts", 0))
            counts[0] += drafts
            counts[1] += float(res.get("spec_decode_draft_tokens", 0))
            counts[2] += float(res.get("spec_decode_accepted_tokens", 0))
            rates = res.get("spec_decode_per_position_acceptance_rates") or []
            # vLLM divides each position's count by the drafts: multiply back to counts
            per_pos = [a + round(r * drafts) for a, r in zip(per_pos, rates, strict=False)]
    meta = metadata(first)
    concurrency = first.get("max_concurrency")
    workload = str(meta.get("dataset") or f"vllm-bench-{first.get('num_prompts')}-prompts")
    detailed = "ttfts" in first
    imported: dict[str, Any] = {
        "arm": arm, "files": sorted({p.name for p, _ in members}), "results": kept,
        "detailed": detailed, "trials": list(range(len(members))),
        "timing": "vllm bench per-request seconds (start_times, ttfts, itls, latencies)"
        if detailed else "end-to-end latencies only (run without --save-detailed)",
        **_wall_figure(members, detailed, concurrency, skipped),
    }
    if spec:
        imported["acceptance"] = {"drafts": counts[0], "draft_tokens": counts[1],
                                  "accepted": counts[2], "per_position": per_pos}
    if not detailed:
        imported["aggregate"] = _mean_aggregate(aggregates)
    load = {"max_tokens": meta.get("max_tokens"), "temperature": meta.get("temperature"),
            "concurrency": concurrency, "rate": first.get("request_rate"),
            "requests": len(first.get("latencies") or []) or first.get("num_prompts")}
    cell = new_cell(records, imported, engine=engine, model=first["model_id"],
                    target=first["model_id"], arm=arm, method=method, n=n, workload=workload,
                    concurrency=concurrency if concurrency is not None
                    else f"rate-{first.get('request_rate')}", trials=len(members), load=load,
                    identity={"version": meta.get("vllm_version")})
    cell.config["engine_config"].update(serve_settings(meta))
    return cell


def serve_settings(meta: dict[str, Any]) -> dict[str, Setting]:
    """The ``--metadata`` keys that set the server (every key but :data:`NOT_SETTINGS`), as
    engine-config fields with their values read as YAML scalars (``"0.9"`` is 0.9); a key
    that is not a setting name is left in the manifest's results only."""
    out: dict[str, Setting] = {}
    for key, value in meta.items():
        if key in NOT_SETTINGS:
            continue
        try:
            field = setting_key(str(key), f"metadata {key}")
            parsed = setting_value(value, f"metadata {key}")
        except UserError:
            continue
        if field.startswith("server."):
            out[field.removeprefix("server.")] = parsed
    return out


def _ns(seconds: float) -> int:
    return round(seconds * NS)


def _records(res: dict[str, Any], trial: int, source: str, order: list[str],
             categories: dict[str, str]) -> list[dict[str, Any]]:
    latencies: list[float] = res.get("latencies") or []
    start = metadata(res).get("server_start")
    ttfts, itls = res.get("ttfts"), res.get("itls")
    starts = res.get("start_times")
    errors = res.get("errors") or [""] * len(latencies)
    texts = res.get("generated_texts") or [None] * len(latencies)
    out = []
    cursor = 0
    for i, lat in enumerate(latencies):
        sent = _ns(starts[i]) if starts else cursor
        if ttfts is None or itls is None:  # aggregate-only result: end-to-end latency alone
            arrivals = [sent + _ns(lat)]
            extra: dict[str, Any] = {"text": None, "usage": None}
        else:
            arrivals = [sent + _ns(ttfts[i])]
            for gap in itls[i]:
                arrivals.append(arrivals[-1] + _ns(gap))
            extra = {"text": texts[i], "usage": {"completion_tokens": res["output_lens"][i],
                                                 "prompt_tokens": res["input_lens"][i]}}
        pid = order[i % len(order)] if order else f"p{i:05d}"
        rec = timed_record(trial=trial, index=i, prompt_id=pid,
                           category=categories.get(pid, "unknown"),
                           t_sent_ns=sent, ttft_ns=None, decode_ns=None, tokens=None,
                           source=source, max_tokens=None, **extra)
        rec.update(t_first_chunk_ns=arrivals[0] if ttfts is not None else None,
                   t_done_ns=arrivals[-1], chunks=[[t, None] for t in arrivals],
                   n_chunks=len(arrivals))
        if errors[i] or lat <= 0:
            rec.update(status="error", error=errors[i] or "vllm bench recorded no latency")
        if start is not None:
            rec["server_start"] = int(start)
        out.append(rec)
        cursor = rec["t_done_ns"] + NS_PER_MS
    return out


def _mean_aggregate(items: list[dict[str, Any]]) -> dict[str, Any]:
    tpots = [float(a["mean_tpot_ms"]) for a in items if a.get("mean_tpot_ms")]
    return {"per_trial": items,
            "decode_tok_s": 1000.0 / (sum(tpots) / len(tpots)) if tpots else None,
            "note": "decode_tok_s = 1000 / mean_tpot_ms (vLLM's TPOT excludes the first "
                    "token, as crossbench's does; a mean over requests, not pooled)"}
