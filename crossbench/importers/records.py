"""What every importer shares: records from known timings, cells, and the directory writer.

An imported record has crossbench's record fields (see ``crossbench.load.client``). When the
source gives durations rather than arrival times, :func:`timed_record` lays them on a
synthetic clock: the request is sent at ``t_sent_ns``, its first token arrives ``ttft_ns``
later and its last token ``decode_ns`` after the first, so ``summary.request_metrics`` gives
back exactly the source's TTFT and decode rate ((tokens - 1) / decode time). Requests of a
trial are laid end to end (concurrency 1); each record names its ``source`` file. A figure
that layout would make up is listed in the cell's ``unknown_figures`` and left empty, or
replaced by the source's own (``source_figures``), in the summary and the analysis.

What the data cannot say, the user declares, and the helpers under "what each arm ran with"
write it where the confound rules read it: each arm's settings (``arm_settings``), method
(``arm_methods``; ``none`` is a baseline rerun, paired against the baseline arm) and server
starts (``trials_per_start`` consecutive trials per start), the same for every importer.

Sources are untrusted: files are read with a size limit (:data:`MAX_SOURCE_BYTES`), and every
value an importer uses passes :func:`number` or :func:`count` (Python's json module accepts
``NaN`` and ``Infinity``, so finiteness is checked with :func:`math.isfinite`). A value no
measurement can have raises :class:`Invalid`, whose message the importer lists in
``not_imported`` (``FILE: REASON``) while it leaves that record, result or test out.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from crossbench import __version__
from crossbench.analysis.summary import summarize_run_dir
from crossbench.errors import UserError
from crossbench.load.workloads import load_workload
from crossbench.store import rundir
from crossbench.store.rundir import IMPORT_SCHEMA as IMPORT_SCHEMA
from crossbench.store.rundir import MANIFEST_SCHEMA as MANIFEST_SCHEMA
from crossbench.textfile import MIB, not_regular, read_text

MAX_SOURCE_BYTES = 256 * MIB
"""Largest source file an importer reads: a ``--save-detailed`` vLLM result of 10,000
requests of 256 tokens is about 50 MB; a larger file is a wrong path, never one result."""

MAX_TOKENS = 2**31 - 1
"""Most tokens a count may hold: llama-server and llama-bench count tokens in 32-bit ints, and
no context window comes near it."""

MAX_MS = 1e9
"""Longest duration a source may report for one request or repetition, in milliseconds
(about 11.6 days): a longer one is a broken clock or a typo, and its nanoseconds would not fit
the records' integer clock once summed over a trial."""


MIN_MS_PER_TOKEN = 0.05
"""Least decode time a source may report per output token after the first, in milliseconds
(20,000 tokens/s for one sequence, 23 times the H200's roofline for an 8B Q4 target): a faster
time is a broken clock or a unit slip; ``docs/input-guarantees.md`` gives the reasons and the
one case that could come near it. crossbench's own runs have no such floor."""


NS_PER_MS = 1_000_000
"""Nanoseconds per millisecond: sources give milliseconds, records hold nanoseconds."""

LAYOUT_FIGURES = ("latency_ms.chunk_gap", "latency_ms.token_itl")
"""Figures a two-chunk record makes up (one first token, then the rest at once): an importer
lists them in ``unknown_figures``."""

WALL_FIGURE = "throughput.wall_output_tok_s"
"""The wall throughput the analysis computes from the records' windows: unknown too when the
requests were laid end to end (no clock)."""


class Invalid(Exception):
    """A source value no measurement can have; the message is the reason ``not_imported``
    lists, naming the field as the source spells it."""


def shown(value: Any) -> str:
    """A short, one-line description of a source value for a reason."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 30 else repr(value[:30]) + "..."
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):  # the non-finite ones as JSON spells them
        return f"{value:g}" if math.isfinite(value) else json.dumps(value)
    if isinstance(value, int):
        return str(value) if value.bit_length() < 200 else f"a {len(str(abs(value)))}-digit number"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _numeric(value: Any, field: str, what: str) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        kind = " (a string)" if isinstance(value, str) else ""
        raise Invalid(f"{field} is {shown(value)}{kind}, not {what}")


def number(value: Any, field: str, *, positive: bool = False, maximum: float | None = MAX_MS,
           unit: str = "ms") -> float:
    """A finite number >= 0 (> 0 with ``positive``, <= ``maximum``), or :class:`Invalid`."""
    _numeric(value, field, "a number")
    if isinstance(value, int) and value.bit_length() > 1000:
        raise Invalid(f"{field} is {shown(value)}, out of range")
    x = float(value)
    if not math.isfinite(x):
        raise Invalid(f"{field} is {shown(value)}, not a finite number")
    if x < 0:
        raise Invalid(f"{field} is {shown(value)}: it cannot be negative")
    if positive and x == 0:
        raise Invalid(f"{field} is 0: it must be above 0")
    if maximum is not None and x > maximum:
        raise Invalid(f"{field} is {shown(value)}, above {maximum:g} {unit}".rstrip())
    return x


def check_decode(ms: float, tokens: int, field: str) -> None:
    """Raise :class:`Invalid` when ``ms`` milliseconds for ``tokens`` output tokens decode the
    tokens after the first faster than :data:`MIN_MS_PER_TOKEN` allows (0 included)."""
    if tokens >= 2 and ms < MIN_MS_PER_TOKEN * (tokens - 1):
        raise Invalid(f"{field} is {shown(ms)} ms for {tokens - 1} tokens after the first: "
                      f"faster than {MIN_MS_PER_TOKEN:g} ms a token (20,000 tokens/s for one "
                      "sequence), which no engine decodes")


def count(value: Any, field: str, *, minimum: int = 0, maximum: int = MAX_TOKENS) -> int:
    """A whole number in [minimum, maximum] (an integral float such as ``16.0`` counts), or
    :class:`Invalid`."""
    _numeric(value, field, "a whole number")
    if isinstance(value, float) and not math.isfinite(value):
        raise Invalid(f"{field} is {shown(value)}, not a finite number")
    if value < minimum:
        raise Invalid(f"{field} is {shown(value)}, below {minimum}")
    if value > maximum:
        raise Invalid(f"{field} is {shown(value)}, above {maximum}")
    if isinstance(value, float) and not value.is_integer():
        raise Invalid(f"{field} is {shown(value)}, not a whole number")
    return int(value)


def obj(value: Any, field: str) -> dict[str, Any]:
    """An object (``{}`` for null or a missing one), or :class:`Invalid`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Invalid(f"{field} is {shown(value)}, not an object")
    return value


def text_or_none(value: Any, field: str) -> str | None:
    """A string or null, or :class:`Invalid`."""
    if value is not None and not isinstance(value, str):
        raise Invalid(f"{field} is {shown(value)}, not a string")
    return value


def finite_everywhere(value: Any, field: str, depth: int = 0) -> None:
    """Raise :class:`Invalid` for a NaN or an infinity anywhere in ``value`` (lists and
    objects searched 4 levels deep; deeper garbage is not read by any importer)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise Invalid(f"{field} is {shown(value)}, not a finite number")
    if depth >= 4:
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            finite_everywhere(v, f"{field}[{i}]", depth + 1)
    elif isinstance(value, dict):
        for k, v in value.items():
            finite_everywhere(v, f"{field}.{k}" if field else str(k), depth + 1)


def timed_record(*, trial: int, index: int, prompt_id: str, category: str, t_sent_ns: int,
                 ttft_ns: int | None, decode_ns: int | None, tokens: int | None,
                 **extra: Any) -> dict[str, Any]:
    """A record whose chunks reproduce a known TTFT and decode time (module docstring).

    The first chunk carries one token, the last the other ``tokens - 1``; with no tokens (a
    prompt-only test) there are no chunks and ``t_first_chunk_ns`` marks the end of prefill.
    """
    first = t_sent_ns + ttft_ns if ttft_ns is not None else None
    chunks: list[list[int]] = []
    done = first if first is not None else t_sent_ns
    if first is not None and tokens:
        chunks.append([first, 1])
        if tokens >= 2 and decode_ns is not None:
            chunks.append([first + decode_ns, tokens - 1])
        done = chunks[-1][0]
    return {
        "trial": trial, "request_index": index, "prompt_id": prompt_id, "category": category,
        "warmup": False, "t_sent_ns": t_sent_ns, "t_first_chunk_ns": first, "t_done_ns": done,
        "chunks": chunks, "n_chunks": len(chunks), "status": "ok", "error": None, **extra,
    }


@dataclass
class ImportedCell:
    """One cell of an import: coordinates, a run config, engine identity and records."""

    coords: dict[str, Any]
    config: dict[str, Any]
    engine: dict[str, Any]
    records: list[dict[str, Any]]
    imported: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """Cell id, built like a matrix cell's: engine/target/arm[/nN]/workload/cC."""
        c = self.coords
        parts = [c["engine"], c["target"], c["arm"]]
        if c.get("n") is not None:
            parts.append(f"n{c['n']}")
        parts += [c["workload"], f"c{c['concurrency']}"]
        return "/".join(slug(str(p)) for p in parts)

    @property
    def trials(self) -> list[int]:
        """Trials present in the records (or declared by the importer)."""
        found = {int(r["trial"]) for r in self.records}
        return sorted(found | set(self.imported.get("trials", [])))


def json_or_lines(path: Path, text: str, what: str, fix: str, lines: bool = True) -> Any:
    """The JSON document of ``text``, else (with ``lines``) the list of its lines' documents
    (JSON Lines); a UserError that ``path`` is not ``what`` when it is neither."""
    try:
        try:
            return json.loads(text)
        except ValueError:
            if not lines:
                raise
            return [json.loads(line) for line in text.splitlines() if line.strip()]
    except (ValueError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else e
        raise UserError(f"{path} is not {what} ({why})", fix) from None


def read_json_objects(path: Path, tool: str, fix: str, *, item: str, keys: tuple[str, ...],
                      wrong: str, wrong_fix: str | None = None) -> list[dict[str, Any]]:
    """The JSON objects of a file that holds one, an array of them, or one per line (JSON
    Lines); a UserError naming ``tool``'s format and ``fix`` when it is neither, when it holds
    no ``item``, or when a value lacks one of ``keys`` (it is not ``wrong``: ``wrong_fix``)."""
    text = read_text(path, tool, MAX_SOURCE_BYTES,
                     "pass the tool's own result file; split a larger one")
    data = json_or_lines(path, text, tool, fix)
    items = data if isinstance(data, list) else [data]
    if not items:
        raise UserError(f"{path} holds no {item}", fix)
    for it in items:
        if not isinstance(it, dict) or any(k not in it for k in keys):
            raise UserError(f"{path} is not {wrong} (no {'/'.join(keys)})", wrong_fix or fix)
    return items


def placeholder_regex(pattern: str, digits: Callable[[str], bool]) -> re.Pattern[str]:
    """The regex of a checked file-name pattern: each ``{name}`` a named group, of digits
    where ``digits(name)``, else of any text (shortest match)."""
    out, pos = "", 0
    for m in re.finditer(r"\{([^{}]*)\}", pattern):
        out += re.escape(pattern[pos:m.start()])
        out += rf"(?P<{m[1]}>\d+)" if digits(m[1]) else rf"(?P<{m[1]}>.+?)"
        pos = m.end()
    return re.compile(out + re.escape(pattern[pos:]) + r"\Z")


def file_labels(path: Path, name: str, what: str, rx: re.Pattern[str] | None,
                pattern: str | None, skipped: list[dict[str, str]]) -> dict[str, str] | None:
    """The labels ``rx`` (``--pattern``) reads from ``name`` (else from the file's own name);
    ``{}`` without a pattern. None, the file listed in ``skipped``, for an entry that is not a
    regular file (a FIFO would hang the read, /dev/zero fill memory) or a name that does not
    match."""
    kind = not_regular(path)
    if kind is not None:
        skipped.append({"file": name, "reason": f"is {kind}, not {what}"})
        return None
    m = (rx.match(name) or rx.match(path.name)) if rx else None
    if rx is not None and m is None:
        skipped.append({"file": name, "reason": f"does not match --pattern {pattern!r}"})
        return None
    return m.groupdict() if m else {}


def read_prompts(prompts: Path | None) -> tuple[list[str], dict[str, str]]:
    """The prompt ids of a ``--prompts`` file in its order and their categories (both empty
    without one)."""
    if prompts is None:
        return [], {}
    listed = load_workload(f"file:{prompts}").prompts
    return [p.id for p in listed], {p.id: p.category for p in listed}


def nothing_imported(what: str, skipped: list[dict[str, str]], fix: str) -> UserError:
    """The error when no ``what`` could be imported, naming the first one left out."""
    first = skipped[0] if skipped else {"file": "-", "reason": "no requests"}
    return UserError(f"no {what} could be imported (first: {first['file']}: "
                     f"{first['reason']})", fix)


def slug(text: str) -> str:
    """A path- and id-safe form of a label."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "x"


def run_config(*, engine: str, model: str, spec: dict[str, Any], load: dict[str, Any],
               trials: int) -> dict[str, Any]:
    """A ``crossbench run`` config as far as the source tells it (unknowns are None)."""
    return {"engine": engine, "engine_config": {"model": model, "spec": spec},
            "load": load, "trials": trials, "model_refs": {}}


def new_cell(records: list[dict[str, Any]], imported: dict[str, Any], *, engine: str,
             model: str, target: Any, arm: str, method: str, n: int | None, workload: str,
             concurrency: Any, trials: int, load: dict[str, Any] | None = None,
             identity: dict[str, Any] | None = None) -> ImportedCell:
    """An importer's cell: its coordinates, a run config whose load settings are ``load`` and
    None where the source does not say them, and an engine identity of what ``identity``
    gives of the build (no binary)."""
    coords = {"engine": engine, "target": target, "arm": arm, "method": method, "n": n,
              "workload": workload, "concurrency": concurrency}
    spec = {"type": method} | ({"n": n} if n is not None else {})
    load = {"workload": workload, "max_tokens": None, "temperature": None, "ignore_eos": None,
            "cache_prompt": None, "concurrency": concurrency, **(load or {})}
    identity = {"kind": engine, "version": None, "build_number": None, "commit": None,
                "binary": None, "sha256": None, **(identity or {})}
    config = run_config(engine=engine, model=model, spec=spec, load=load, trials=trials)
    return ImportedCell(coords, config, identity, records, imported)


# -- what each arm ran with, as the user declares it -----------------------------------------

Setting = str | int | float | bool
"""A declared setting's value: YAML's scalars (``0.9``, ``8``, ``false``, ``q8_0``)."""

ENGINE_SETTINGS = ("version", "build_number", "commit")
"""Engine identity keys an import may declare (``engine.version``; ``build`` is short for it):
the build rule compares them."""

SETTINGS_FIX = ("write ARM:KEY=VALUE, e.g. --arm-setting mtp:gpu_memory_utilization=0.8 "
                "(KEY: a serve flag such as max_num_seqs or enable_prefix_caching, or "
                "engine.version, load.temperature, spec.draft_model; ARM '*' is every arm)")

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def setting_key(key: str, where: str) -> str:
    """The normalized field of a declared setting: ``server.KEY`` for a serve flag (dashes
    and a leading ``--`` as a command line spells it are accepted), ``engine.version``,
    ``engine.build_number`` or ``engine.commit`` for the build, ``load.KEY`` and ``spec.KEY``
    as written; a UserError naming ``where`` for anything else."""
    name = key.strip().removeprefix("--").replace("-", "_")
    if name == "build":
        name = "engine.version"
    if not _KEY.match(name):
        raise UserError(f"{where}: {key!r} is not a setting name", SETTINGS_FIX)
    space, _, rest = name.partition(".")
    if not rest:
        return f"server.{name}"
    if space == "engine" and rest not in ENGINE_SETTINGS:
        raise UserError(f"{where}: {key!r} cannot be declared",
                        f"declare the build as engine.{', engine.'.join(ENGINE_SETTINGS)}; "
                        "the engine itself is --engine")
    if space == "spec" and rest in ("type", "n"):
        raise UserError(f"{where}: {key!r} is the arm's method or n",
                        "give the method with --arm-method ARM=METHOD; n comes from the data "
                        "(or --n-from-arm, or metadata n)")
    if space not in ("server", "engine", "load", "spec") or "." in rest:
        raise UserError(f"{where}: {key!r} is not a setting name", SETTINGS_FIX)
    return name


def setting_value(text: Any, where: str) -> Setting:
    """A declared value as YAML reads a scalar (``0.9`` a number, ``false`` a bool, ``q8_0``
    text); a UserError naming ``where`` for a list, a mapping, null or a non-finite number."""
    value = text
    if isinstance(text, str):
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError:
            value = None
    if isinstance(value, float) and not math.isfinite(value):
        value = None
    if not isinstance(value, str | int | float | bool) or (
            isinstance(value, int) and value.bit_length() > 64):
        raise UserError(f"{where}: value {shown(text)} is not a single setting",
                        "give a number, true/false or a word, e.g. gpu_memory_utilization=0.9")
    return value


def parse_arm_settings(items: list[str] | tuple[str, ...],
                       file: Path | None = None) -> dict[str, dict[str, Setting]]:
    """Declared settings by arm (``*``: every arm), from ``--arm-setting ARM:KEY=VALUE``
    items and a YAML file ``{ARM: {KEY: VALUE}}`` (the items win); keys normalized by
    :func:`setting_key`."""
    out: dict[str, dict[str, Setting]] = {}
    if file is not None:
        text = read_text(file, "settings file", MIB, "keep the file to {ARM: {KEY: VALUE}}")
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise UserError(f"--settings {file} is not YAML ({str(e).splitlines()[0]})",
                            "write {ARM: {KEY: VALUE}}, e.g. 'mtp: {max_num_seqs: 8}'") from None
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise UserError(f"--settings {file} is not a mapping of arms to settings",
                            "write {ARM: {KEY: VALUE}}, e.g. 'mtp: {max_num_seqs: 8}'")
        for arm, settings in data.items():
            for key, value in settings.items():
                where = f"--settings {file}: {arm}.{key}"
                out.setdefault(str(arm), {})[setting_key(str(key), where)] = setting_value(
                    value, where)
    for item in items:
        arm, colon, rest = item.partition(":")
        key, eq, value = rest.partition("=")
        where = f"--arm-setting {item!r}"
        if not colon or not eq or not arm.strip() or not key.strip():
            raise UserError(f"{where} is not ARM:KEY=VALUE", SETTINGS_FIX)
        out.setdefault(arm.strip(), {})[setting_key(key, where)] = setting_value(value, where)
    return out


def parse_arm_methods(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``--arm-method ARM=METHOD`` items as {arm: method} (``none`` makes an arm a baseline
    rerun); a UserError for a malformed one."""
    out: dict[str, str] = {}
    for item in items:
        arm, eq, method = (x.strip() for x in item.partition("="))
        if not eq or not arm or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.,+-]*", method):
            raise UserError(f"--arm-method {item!r} is not ARM=METHOD",
                            "write e.g. --arm-method rerun=none or --arm-method mtp=mtp")
        out[arm] = method
    return out


def check_arms(option: str, named: list[str] | set[str], arms: set[str]) -> None:
    """A UserError when ``option`` names an arm no cell has (``*`` names them all)."""
    unknown = sorted(a for a in named if a != "*" and a not in arms)
    if unknown:
        raise UserError(f"{option} names arm {unknown[0]!r}, which the import has not",
                        f"use one of the arms found: {', '.join(sorted(arms))}")


def apply_settings(cell: ImportedCell, names: tuple[str, ...],
                   settings: dict[str, dict[str, Setting]]) -> None:
    """Write the settings declared for any of ``names`` (the arm as the source names it and
    its label) or for ``*`` into the cell's config and engine identity, where the confound
    rules read them (``server.*`` is the engine config)."""
    merged: dict[str, Setting] = {}
    for arm in ("*", *names):
        merged.update(settings.get(arm, {}))
    ec = cell.config.setdefault("engine_config", {})
    for key, value in merged.items():
        space, _, name = key.partition(".")
        if space == "server":
            ec[name] = value
        elif space == "engine":
            cell.engine[name] = value
        elif space == "load":
            cell.config.setdefault("load", {})[name] = value
        else:
            ec.setdefault("spec", {})[name] = value
    if merged:
        cell.imported["declared"] = dict(sorted(merged.items()))


def assign_starts(cell: ImportedCell, trials_per_start: int | None) -> None:
    """Mark which server start served each record: ``trials_per_start`` consecutive trials
    share one (trial // k * k), as ``crossbench run --trials-per-start`` records it; a record
    whose source named its start keeps it. The config records ``trials_per_start`` so the
    analysis and the confound view see the design."""
    if trials_per_start is not None:
        for r in cell.records:
            if r.get("server_start") is None:
                r["server_start"] = int(r["trial"]) // trials_per_start * trials_per_start
        cell.config["trials_per_start"] = trials_per_start
    if trials_per_start is not None or any(r.get("server_start") is not None
                                           for r in cell.records):
        cell.imported["server_starts"] = len({r.get("server_start") for r in cell.records})


def check_declared(baseline_arm: str | None, methods: dict[str, str],
                   settings: dict[str, dict[str, Setting]] | None, arms: list[str],
                   of: str | None = None) -> None:
    """UserErrors for what the user declared about ``arms`` (sorted): a ``--baseline-arm``
    that is no arm of ``of`` (checked where ``of`` is given), an ``--arm-method`` or
    ``--arm-setting`` (checked where ``settings`` is given) naming an unknown arm, and a
    method other than ``none`` for the baseline arm."""
    if of is not None and baseline_arm not in arms:
        raise UserError(f"--baseline-arm {baseline_arm!r} is not an arm of {of}",
                        f"use one of the arms found: {', '.join(arms)}")
    check_arms("--arm-method", list(methods), set(arms))
    if settings is not None:
        check_arms("--arm-setting", list(settings), set(arms))
    if baseline_arm is not None and methods.get(baseline_arm, "none") != "none":
        raise UserError(f"--arm-method gives the baseline arm {baseline_arm!r} method "
                        f"{methods[baseline_arm]!r}",
                        "the --baseline-arm ran without speculation: drop its --arm-method")


def finish_cells(cells: list[ImportedCell], baseline_arm: str | None,
                 settings: dict[str, dict[str, Setting]], trials_per_start: int | None,
                 by_label: bool = False) -> None:
    """Flag the cells of ``baseline_arm`` as the baseline and write each cell's declared
    settings (:func:`apply_settings`: for its source arm, and its label with ``by_label``)
    and server starts (:func:`assign_starts`)."""
    for c in cells:
        if c.imported["arm"] == baseline_arm:
            c.imported["baseline"] = True
        names = (c.imported["arm"], str(c.coords["arm"])) if by_label else (c.imported["arm"],)
        apply_settings(c, names, settings)
        assign_starts(c, trials_per_start)


def pair_baselines(cells: list[ImportedCell]) -> dict[str, str | None]:
    """Baseline of each cell: same engine, target, workload and concurrency, method none.

    Where a group has several method-none cells, the one flagged ``imported["baseline"]``
    (``--baseline-arm``) is the baseline and the others are reruns paired against it;
    without a flag the last is the baseline and the others stay unpaired."""
    key = ("engine", "target", "workload", "concurrency")
    base: dict[tuple[Any, ...], ImportedCell] = {}
    for c in cells:
        k = tuple(c.coords[x] for x in key)
        if c.coords["method"] == "none" and (
                c.imported.get("baseline") or not base.get(k, c).imported.get("baseline")):
            base[k] = c
    out: dict[str, str | None] = {}
    for c in cells:
        b = base.get(tuple(c.coords[x] for x in key))
        if b is None or b is c:
            out[c.id] = None
        elif c.coords["method"] == "none":
            out[c.id] = b.id if b.imported.get("baseline") else None
        else:
            out[c.id] = b.id
    return out


def _fix_summary(summary: dict[str, Any], imported: dict[str, Any]) -> dict[str, Any]:
    """The summary with the figures the importer's layout made (``unknown_figures``) left
    empty and those the source gave itself (``source_figures``) in their place."""
    given = dict(imported.get("source_figures") or {})
    for dotted in [*imported.get("unknown_figures", []), *given]:
        group, _, key = dotted.partition(".")
        for part in [summary, *summary.get("per_trial", [])]:
            if isinstance(part.get(group), dict) and key in part[group]:
                part[group][key] = given.get(dotted) if part is summary else None
    return summary


def write_import(out: Path, cells: list[ImportedCell], source: dict[str, Any],
                 not_imported: list[dict[str, str]]) -> dict[str, Any]:
    """Write an import directory (see the package docstring); returns its state."""
    if out.exists() and any(out.iterdir()):
        raise UserError(f"--out {out} already exists and is not empty",
                        "choose a new --out directory (imports never overwrite)")
    ids = [c.id for c in cells]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise UserError(f"two imported cells share the id {dup[0]}",
                        "their labels differ only in characters ids cannot hold: rename them")
    baselines = pair_baselines(cells)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    state_cells = []
    for c in cells:
        entry = rundir.cell_entry(c.id, c.coords, baselines[c.id])
        writer = rundir.RunWriter(out / entry["dir"])
        manifest = {
            "schema_version": MANIFEST_SCHEMA, "kind": rundir.RUN_KIND,
            "crossbench_version": __version__, "created_utc": created, "argv": [],
            "imported": {**c.imported, "source": source["tool"],
                         "not_imported": not_imported},
            "config": c.config, "engine": c.engine, "models": {},
            "workload": {"spec": c.coords["workload"], "digest": None,
                         "prompts": len({r["prompt_id"] for r in c.records})},
            "host": source.get("host", {}), "status": "complete",
            "trials": [{"trial": t, "status": "ok", "error": None} for t in c.trials],
        }
        writer.write_manifest(manifest)
        writer.write_records(c.records)
        writer.write_summary(_fix_summary(summarize_run_dir(writer.root), c.imported))
        state_cells.append(entry)
    state = {"schema_version": IMPORT_SCHEMA, "kind": rundir.IMPORT_KIND,
             "study": f"import:{source['tool']}", "source": source,
             "trials": max((len(c.trials) for c in cells), default=0),
             "cells": state_cells, "not_imported": not_imported}
    rundir.write_state(out, state)
    return state
