"""Import per-request tables that studies write themselves: JSON, JSON Lines or CSV.

``crossbench import table FILE... --map FIELD[:UNIT]=PATH`` says where each figure is
(:data:`FIELDS`; a time's unit is declared, never guessed; paths as ``a.b[].c``). Requests
without ``start`` times are laid end to end only to hold their durations: the figures that
layout would make up are ``unknown_figures``, and the file's own wall throughput is kept as a
``source_figures`` entry. Values are checked as the other importers check theirs
(:mod:`crossbench.importers.records`); a request that fails is listed in ``not_imported``.
Fields, units, paths, trials, throughput and errors: docs/analysis.md, "``import table``".
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from crossbench.errors import UserError
from crossbench.importers.records import (
    LAYOUT_FIGURES,
    MAX_MS,
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
    json_or_lines,
    new_cell,
    nothing_imported,
    number,
    placeholder_regex,
    read_prompts,
    shown,
    timed_record,
    write_import,
)
from crossbench.textfile import read_text


@dataclass(frozen=True)
class Field:
    """One field ``--map`` can name: its kind (``time``, ``count``, ``rate``, ``label``,
    ``whole`` or ``error``) and its level (``request``, ``trial`` or ``label``)."""

    kind: str
    level: str


FIELDS: dict[str, Field] = {
    "output_tokens": Field("count", "request"), "ttft": Field("time", "request"),
    "decode": Field("time", "request"), "tpot": Field("time", "request"),
    "elapsed": Field("time", "request"), "start": Field("time", "request"),
    "input_tokens": Field("count", "request"), "drafted": Field("count", "request"),
    "accepted": Field("count", "request"), "error": Field("error", "request"),
    "wall": Field("time", "trial"), "throughput": Field("rate", "trial"),
    "arm": Field("label", "label"), "trial": Field("whole", "label"),
    "prompt": Field("label", "label"), "category": Field("label", "label"),
    "concurrency": Field("whole", "label"), "model": Field("label", "label"),
    "method": Field("label", "label"), "n": Field("whole", "label"),
    "server_start": Field("whole", "label"),
}
"""Fields of ``--map``, in this order in messages; what each means: docs/analysis.md,
"``import table``"."""

TIME_UNITS: dict[str, float] = {"s": 1e3, "ms": 1.0, "us": 1e-3, "ns": 1e-6}
"""Time units ``--map FIELD:UNIT=PATH`` takes, as milliseconds per unit."""

RATE_UNITS = ("tok/s",)
"""Units of ``throughput``."""

DECODE_SOURCES = ("decode", "tpot", "elapsed")
"""Fields that give a request's decode time, in order of preference."""

LABELS = tuple(k for k, f in FIELDS.items() if f.level == "label")
"""Fields a file-name ``--pattern`` may hold as ``{placeholder}``."""

_FIX_MAP = ("write --map FIELD[:UNIT]=PATH, e.g. --map ttft:ms=ttft_ms "
            "(fields: " + ", ".join(FIELDS) + ")")

MAX_PATH_PARTS = 32
"""Most keys and ``[]`` one ``--map`` path may hold (each is a level the lookup recurses)."""

Seg = tuple[str, Any]  # ("key", name) | ("each", None) | ("index", k)


@dataclass(frozen=True)
class FieldMap:
    """One ``--map`` item: the field, its unit, the path as written and parsed."""

    field: str
    unit: str | None
    path: str
    segs: tuple[Seg, ...]
    raw: str

    @property
    def depth(self) -> int:
        """How many ``[]`` the path runs over."""
        return sum(1 for kind, _ in self.segs if kind == "each")

    def ms(self, value: float) -> float:
        """A time in this map's unit as milliseconds."""
        return value * TIME_UNITS[str(self.unit)]


Found = dict[str, tuple[FieldMap, dict[tuple[int, ...], Any]]]
"""Per mapped field found in a file: its map (with the file's path) and values by index."""


def parse_path(path: str, raw: str) -> tuple[Seg, ...]:
    """The segments of a path (docs/analysis.md, "Paths"); UserError naming ``raw`` when
    malformed."""
    segs: list[Seg] = []
    if path.startswith("["):
        path = "." + path
    for part in path.split(".")[1 if path.startswith(".") else 0:]:
        m = re.fullmatch(r"([^\[\]]*)((?:\[\d*\])*)", part)
        if m is None or (not m[1] and not m[2]):
            raise UserError(f"--map {raw!r}: {path!r} is not a path",
                            "join keys with dots, [] for each element of a list, e.g. "
                            "results[].ttft_ms")
        if m[1]:
            segs.append(("key", m[1]))
        for idx in re.findall(r"\[(\d*)\]", m[2]):
            segs.append(("each", None) if idx == "" else ("index", int(idx[:18])))
    if len(segs) > MAX_PATH_PARTS:
        raise UserError(f"--map {raw!r}: the path has {len(segs)} parts",
                        f"a table's path has at most {MAX_PATH_PARTS} keys and []")
    return tuple(segs)


def parse_maps(items: list[str]) -> dict[str, FieldMap]:
    """``--map`` items by field; UserError naming the item and the fix for a bad one."""
    out: dict[str, FieldMap] = {}
    for raw in items:
        name, eq, path = raw.partition("=")
        name, _, unit = name.strip().partition(":")
        path = path.strip()
        if not eq or not name or not path:
            raise UserError(f"--map {raw!r} is not FIELD=PATH", _FIX_MAP)
        if name not in FIELDS:
            raise UserError(f"--map {raw!r}: unknown field {name!r}", _FIX_MAP)
        kind = FIELDS[name].kind
        if kind == "time":
            if not unit:
                raise UserError(f"--map {raw!r}: no unit for {name}",
                                f"declare it, e.g. --map {name}:ms={path} "
                                f"(units: {', '.join(TIME_UNITS)})")
            if unit not in TIME_UNITS:
                raise UserError(f"--map {raw!r}: unknown unit {unit!r} for {name}",
                                f"use one of {', '.join(TIME_UNITS)}, e.g. "
                                f"--map {name}:ms={path}")
        elif kind == "rate":
            unit = unit or RATE_UNITS[0]
            if unit not in RATE_UNITS:
                raise UserError(f"--map {raw!r}: unknown unit {unit!r} for {name}",
                                f"give {name} in tok/s: --map {name}={path}")
        elif unit:
            raise UserError(f"--map {raw!r}: {name} is a {kind}, it takes no unit",
                            f"write --map {name}={path}")
        if name in out:
            raise UserError(f"--map names {name} twice ({out[name].raw!r} and {raw!r})",
                            "keep one --map per field")
        out[name] = FieldMap(name, unit or None, path, parse_path(path, raw), raw)
    return out


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """The regex of a file-name pattern with ``{label}`` placeholders (:data:`LABELS`);
    ``{trial}``, ``{concurrency}`` and ``{n}`` match digits. Errors name ``--pattern``."""
    names = re.findall(r"\{([^{}]*)\}", pattern)
    unknown = [n for n in names if n not in LABELS]
    if unknown or len(names) != len(set(names)):
        problem = f"unknown placeholder {{{unknown[0]}}}" if unknown else \
            "a placeholder used twice"
        raise UserError(f"--pattern {pattern!r}: {problem}",
                        "use each of {" + "}, {".join(LABELS) + "} at most once, e.g. "
                        "'{arm}_c{concurrency}_t{trial}.json'")
    return placeholder_regex(pattern, lambda name: FIELDS[name].kind == "whole")


def resolve(doc: Any, segs: tuple[Seg, ...], idx: tuple[int, ...] = ()
            ) -> Iterator[tuple[tuple[int, ...], Any]]:
    """(indexes of the ``[]`` run over, value) of every place ``segs`` reach in ``doc``."""
    if not segs:
        yield idx, doc
        return
    kind, arg = segs[0]
    if kind == "key":
        if isinstance(doc, dict) and arg in doc:
            yield from resolve(doc[arg], segs[1:], idx)
    elif kind == "index":
        if isinstance(doc, list) and arg < len(doc):
            yield from resolve(doc[arg], segs[1:], idx)
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from resolve(value, segs[1:], (*idx, i))


def explain(doc: Any, segs: tuple[Seg, ...]) -> str:
    """Where a path stops in ``doc`` (first elements of lists followed), in words."""
    where = ""
    for kind, arg in segs:
        here = where or "the top level"
        if kind == "key":
            if not isinstance(doc, dict):
                return f"{here} is {shown(doc)}, not an object with {arg!r}"
            if arg not in doc:
                keys = sorted(str(k) for k in doc)
                more = ", ..." if len(keys) > 12 else ""
                return f"{here} has no {arg!r} (it has: {', '.join(keys[:12])}{more})"
            doc, where = doc[arg], f"{where}.{arg}" if where else str(arg)
        else:
            k = 0 if kind == "each" else arg
            if not isinstance(doc, list) or k >= len(doc):
                return f"{here} is {shown(doc)}, not a list with element {k}"
            doc, where = doc[k], f"{where}[{'' if kind == 'each' else k}]"
    return f"{where or 'the top level'} is there"


def spelled(segs: tuple[Seg, ...], idx: tuple[int, ...]) -> str:
    """A path with its ``[]`` filled by ``idx``, as a message names one value."""
    out, it = "", iter(idx)
    for kind, arg in segs:
        if kind == "key":
            out += f".{arg}" if out else str(arg)
        else:
            out += f"[{next(it, '') if kind == 'each' else arg}]"
    return out


def _csv_value(text: str | None) -> Any:
    s = (text or "").strip()
    if not s:
        return None
    for conv in (int, float):
        try:
            return conv(s)
        except ValueError:
            pass
    if s.lower() in ("true", "false"):
        return s.lower() == "true"
    return s


@dataclass
class Source:
    """One file read: its rows (a list) or its object, and whether paths start at a row."""

    path: Path
    doc: Any
    rows: bool
    csv: bool = False

    def segs(self, fm: FieldMap) -> tuple[Seg, ...]:
        """The segments of ``fm`` for this file: a CSV column, or a path from a row."""
        if self.csv:
            return (("each", None), ("key", fm.path))
        if self.rows and not fm.path.startswith("["):
            return (("each", None), *fm.segs)
        return fm.segs


_FIX_FILE = "pass the study's own JSON, JSON Lines or CSV file"


def read_source(path: Path) -> Source:
    """A JSON, JSON Lines or CSV file (CSV by its ``.csv`` name); UserError when it is none."""
    text = read_text(path, "table", MAX_SOURCE_BYTES, "split it into smaller files")
    if path.suffix.lower() == ".csv":
        try:
            rows = [{k: _csv_value(v) for k, v in row.items() if k is not None}
                    for row in csv.DictReader(io.StringIO(text))]
        except csv.Error as e:
            raise UserError(f"{path} is not CSV ({e})", _FIX_FILE) from None
        return Source(path, rows, True, True)
    data = json_or_lines(path, text, "JSON or JSON Lines", _FIX_FILE)
    return Source(path, data, isinstance(data, list))


@dataclass
class Request:
    """One checked request: its cell, trial and prompt labels and its figures (ms)."""

    source: str
    cell: tuple[str, str, str | None, int | None, int]  # model, arm, method, n, concurrency
    trial_key: tuple[Any, ...]
    prompt: str | None
    category: str | None
    ttft_ms: float | None
    decode_ms: float | None
    tokens: int | None
    input_tokens: int | None = None
    start_ms: float | None = None
    drafted: int | None = None
    accepted: int | None = None
    error: str | None = None
    server_start: int | None = None
    wall_s: float | None = None
    throughput: float | None = None


def _label(value: Any, name: str) -> str:
    if isinstance(value, bool) or value is None or isinstance(value, dict | list):
        raise Invalid(f"{name} is {shown(value)}, not a label")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value).strip()
    if not text or any(c in text for c in "\n\r\x00"):
        raise Invalid(f"{name} is {shown(value)}, not a label")
    return text


def _whole(value: Any, name: str, minimum: int = 0) -> int:
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit() \
            and len(value.strip()) < 10:
        value = int(value.strip())
    return count(value, name, minimum=minimum, maximum=10**9)


class _Row:
    """The values one request sees, by field: its own and those of the objects above it."""

    def __init__(self, found: Found, idx: tuple[int, ...], labels: dict[str, str]) -> None:
        self.found, self.idx, self.labels = found, idx, labels

    def has(self, name: str) -> bool:
        if name in self.labels:
            return True
        if name not in self.found:
            return False
        fm, values = self.found[name]
        return self.idx[:fm.depth] in values

    def get(self, name: str) -> tuple[Any, str]:
        """(value, its name as the file spells it); (None, "") where the request has none."""
        if name in self.labels:
            return self.labels[name], f"{{{name}}} of the file name"
        if not self.has(name):
            return None, ""
        fm, values = self.found[name]
        key = self.idx[:fm.depth]
        return values[key], spelled(fm.segs, key)


def _time(row: _Row, name: str, positive: bool = False,
          maximum: float | None = MAX_MS) -> float | None:
    value, where = row.get(name)
    if value is None:
        return None
    fm = row.found[name][0]
    ms = fm.ms(number(value, where, maximum=None, unit=""))
    if positive and ms == 0:
        raise Invalid(f"{where} is 0: it must be above 0")
    if maximum is not None and ms > maximum:
        raise Invalid(f"{where} is {shown(value)} {fm.unit}, above {maximum:g} ms")
    return ms


def _request(row: _Row, maps: dict[str, FieldMap], fixed: dict[str, Any], fi: int,
             source: str, trial_depth: int) -> Request:
    """Check one request's values (module docstring); :class:`Invalid` when one is wrong."""
    labels: dict[str, Any] = {}
    for name in LABELS:
        if row.has(name):
            value, where = row.get(name)
            if value is None:
                raise Invalid(f"{where} is null: {name} is a label every request needs")
            labels[name] = (_whole(value, where, 1 if name == "concurrency" else 0)
                            if FIELDS[name].kind == "whole" else _label(value, where))
        elif name in fixed:
            labels[name] = fixed[name]
    if "arm" not in labels:
        raise Invalid(f"no arm ({maps['arm'].path})" if "arm" in maps else "no arm")
    err: str | None = None
    value, where = row.get("error")
    if isinstance(value, str):
        err = value.strip() or None
    elif isinstance(value, bool):
        err = "failed (the file's error field is true)" if value else None
    elif value is not None:
        raise Invalid(f"{where} is {shown(value)}, not a text or true/false")
    tokens: int | None = None
    decode: float | None = None
    if row.has("output_tokens"):
        value, where = row.get("output_tokens")
        if value is not None or err is None:
            tokens = count(value, where, minimum=0 if err else 1)
    elif err is None:
        raise Invalid(f"no output_tokens ({maps['output_tokens'].path})")
    ttft = _time(row, "ttft", positive=err is None)
    if ttft is None and err is None:
        raise Invalid(f"no ttft ({maps['ttft'].path})")
    if err is None and ttft is not None and tokens is not None and tokens >= 2:
        for name in DECODE_SOURCES:
            value = _time(row, name)
            if value is None:
                continue
            where = row.get(name)[1]
            if name == "decode":
                decode = value
            elif name == "tpot":
                decode = value * (tokens - 1)
            else:
                decode = value - ttft
                if decode < 0:
                    raise Invalid(f"{where} ({value:g} ms) is below the ttft ({ttft:g} ms)")
            check_decode(decode, tokens, where)
            break
        else:
            raise Invalid("no decode time (" + ", ".join(
                maps[n].path for n in DECODE_SOURCES if n in maps) + ")")
    elif err is None:
        decode = 0.0
    trial_key = ("label", labels["trial"]) if "trial" in labels else \
        ("file", fi, row.idx[:trial_depth])
    req = Request(source, (str(labels.get("model")), str(labels["arm"]),
                           labels.get("method"), labels.get("n"),
                           int(labels["concurrency"])), trial_key,
                  labels.get("prompt"), labels.get("category"), ttft, decode, tokens,
                  error=err, server_start=labels.get("server_start"))
    for name in ("input_tokens", "drafted", "accepted"):
        value, where = row.get(name)
        if value is not None:
            setattr(req, name, count(value, where))
    if (req.accepted or 0) > (req.drafted or 0):
        raise Invalid(f"{row.get('accepted')[1]} ({req.accepted}) is above the drafted "
                      f"tokens ({req.drafted or 0})")
    req.start_ms = _time(row, "start", maximum=1e15)
    wall = _time(row, "wall", positive=True, maximum=None)
    req.wall_s = wall / 1e3 if wall is not None else None
    value, where = row.get("throughput")
    if value is not None:
        req.throughput = number(value, where, positive=True, maximum=1e9, unit="tok/s")
    return req


_FILE_NEEDS = ("output_tokens", "ttft", "arm", "trial", "prompt", "concurrency", "model")
"""Mapped fields without which a file's requests cannot be placed: a file that lacks one
is listed whole (once), not request by request."""


def _find(src: Source, maps: dict[str, FieldMap],
          why_missing: dict[str, tuple[Source, str]]) -> Found:
    """The values of every mapped field in one file; a field found nowhere in it is noted
    in ``why_missing`` (the first such file, and where its path stops)."""
    found: Found = {}
    for name, fm in maps.items():
        segs = src.segs(fm)
        values = dict(resolve(src.doc, segs))
        if values:
            found[name] = (replace(fm, segs=segs), values)
        else:
            why_missing.setdefault(name, (src, explain(src.doc, segs)))
    return found


def import_table(files: list[Path], map_items: list[str], out: Path, *, engine: str,
                 baseline_arm: str, model: str | None = None, pattern: str | None = None,
                 concurrency: int | None = None, method: str | None = None,
                 prompts: Path | None = None,
                 arm_settings: dict[str, dict[str, Setting]] | None = None,
                 arm_methods: dict[str, str] | None = None,
                 trials_per_start: int | None = None) -> dict[str, Any]:
    """Convert per-request tables into an import directory at ``out`` (module docstring);
    returns its state, whose ``source.notes`` say which figures the files could not give.
    ``arm_settings``, ``arm_methods`` and ``trials_per_start`` (where no ``server_start``
    label says it): :mod:`crossbench.importers.records`."""
    from crossbench.engines import registry

    if not files:
        raise UserError("no FILE given", "pass the study's per-request JSON, JSONL or CSV files")
    if engine not in registry.names():
        raise UserError(f"--engine {engine!r} is not an engine crossbench knows",
                        f"name the server the study ran: {', '.join(registry.names())}")
    maps = parse_maps(map_items)
    rx = pattern_regex(pattern) if pattern else None
    in_name = set(rx.groupindex) if rx else set()
    for name in sorted(in_name & set(maps)):
        raise UserError(f"{name} is both in --pattern and --map {maps[name].raw!r}",
                        f"take {name} from one place")
    fixed: dict[str, Any] = {}
    for name, value, option in (("concurrency", concurrency, "--concurrency"),
                                ("model", model, "--model")):
        if value is None:
            continue
        if name in maps or name in in_name:
            raise UserError(f"{option} and {name} from the files both given",
                            f"take {name} from one place")
        fixed[name] = value
    for name, hint in (("output_tokens", "--map output_tokens=PATH"),
                       ("ttft", "--map ttft:ms=PATH"),
                       ("arm", "--map arm=PATH or {arm} in --pattern"),
                       ("concurrency", "--concurrency N, --map concurrency=PATH or "
                                       "{concurrency} in --pattern"),
                       ("model", "--model NAME, --map model=PATH or {model} in --pattern")):
        if name not in maps and name not in in_name and name not in fixed:
            raise UserError(f"no {name}: the files' {name} is not mapped", f"give {hint}")
    if not any(n in maps for n in DECODE_SOURCES):
        raise UserError("no decode time: none of decode, tpot or elapsed is mapped",
                        "map one, e.g. --map tpot:ms=tpot_ms or --map elapsed:s=latency")
    request_depth = max((fm.depth for fm in maps.values() if FIELDS[fm.field].level == "request"),
                        default=0)
    for fm in maps.values():
        if fm.depth > request_depth:
            raise UserError(f"--map {fm.raw!r}: its path runs over more [] than the "
                            "requests' paths",
                            f"map {fm.field} where one value serves each request or a group "
                            "of them")
    trial_depth = min((maps[n].depth for n in ("wall", "throughput") if n in maps), default=None)

    skipped: list[dict[str, str]] = []
    requests: list[Request] = []
    found_anywhere: set[str] = set()
    why_missing: dict[str, tuple[Source, str]] = {}  # field -> first file without it, why
    read_files = 0
    for fi, path in enumerate(files):
        labels = file_labels(path, path.name, "a table file", rx, pattern, skipped)
        if labels is None:
            continue
        src = read_source(path)
        if src.rows and not src.doc:
            skipped.append({"file": path.name, "reason": "holds no rows"})
            continue
        read_files += 1
        found = _find(src, maps, why_missing)
        found_anywhere |= set(found)
        need = [n for n in maps if n not in found and n in _FILE_NEEDS]
        if need or not any(n in found for n in DECODE_SOURCES):
            name = need[0] if need else next(n for n in DECODE_SOURCES if n in maps)
            skipped.append({"file": path.name, "reason": f"--map {maps[name].raw!r}: "
                            f"{why_missing[name][1]}"})
            continue
        depth = max((found[n][0].depth for n in found if FIELDS[n].level == "request"),
                    default=0)
        idxs = sorted({k for n in found if FIELDS[n].level == "request"
                       for k in found[n][1] if len(k) == depth})
        # the objects that hold wall/throughput above the requests are the trials; at the
        # requests' own level (a row per request) the file is
        held = 0 if trial_depth is None else trial_depth + (depth - request_depth)
        for idx in idxs:
            try:
                requests.append(_request(_Row(found, idx, labels), maps, fixed, fi, path.name,
                                         held if held < depth else 0))
            except Invalid as e:
                where = ".".join(map(str, idx)) or "0"
                skipped.append({"file": f"{path.name} request {where}", "reason": str(e)})
    for name, fm in maps.items():
        if name not in found_anywhere and read_files:
            src, why = why_missing[name]
            raise UserError(f"--map {fm.raw!r}: {fm.path} is in none of the {read_files} "
                            f"files ({src.path.name}: {why})",
                            f"write the path to {name} as the files spell it")
    if not requests:
        raise nothing_imported("request", skipped, "fix the --map paths or the files listed")
    methods, settings = arm_methods or {}, arm_settings or {}
    check_declared(baseline_arm, methods, settings, sorted({r.cell[1] for r in requests}),
                   "the files")
    categories = read_prompts(prompts)[1]
    notes: list[str] = []
    cells = _cells(requests, maps, engine, baseline_arm, method, categories, prompts, notes,
                   methods)
    finish_cells(cells, baseline_arm, settings, trials_per_start)
    source = {"tool": "table", "format": "per-request table (JSON, JSON Lines or CSV)",
              "files": [str(p) for p in files], "map": [fm.raw for fm in maps.values()],
              "pattern": pattern, "engine": engine, "baseline_arm": baseline_arm,
              "method": method, "prompts": str(prompts) if prompts else None,
              "arm_methods": methods or None, "trials_per_start": trials_per_start,
              "notes": notes}
    return write_import(out, cells, source, skipped)


def _trial_numbers(requests: list[Request]) -> dict[tuple[Any, ...], int]:
    """Trial keys as numbers: labels as written; else in order of appearance per cell."""
    out: dict[tuple[Any, ...], int] = {}
    order: dict[tuple[Any, ...], int] = {}
    for r in requests:
        key = (r.cell, r.trial_key)
        if key in out:
            continue
        if r.trial_key[0] == "label":
            out[key] = int(r.trial_key[1])
        else:
            out[key] = order.get(r.cell, 0)
            order[r.cell] = out[key] + 1
    return out


def _one(values: set[float], what: str, arm: str, c: int, trial: int,
         maps: dict[str, FieldMap]) -> float | None:
    if len(values) > 1:
        shown_values = ", ".join(f"{v:g}" for v in sorted(values)[:3])
        raise UserError(f"--map {maps[what].raw!r} gives {len(values)} values for trial "
                        f"{trial} of arm {arm} at concurrency {c} ({shown_values})",
                        "map trial (--map trial=PATH or {trial} in --pattern) so that each "
                        "trial has one " + what)
    return next(iter(values), None)


def _cells(requests: list[Request], maps: dict[str, FieldMap], engine: str,
           baseline_arm: str, given_method: str | None, categories: dict[str, str],
           prompts: Path | None, notes: list[str], methods: dict[str, str]
           ) -> list[ImportedCell]:
    trial_no = _trial_numbers(requests)
    by_cell: dict[tuple[Any, ...], list[Request]] = {}
    for r in requests:
        by_cell.setdefault(r.cell, []).append(r)
    workload = f"import:{prompts.stem}" if prompts else "import:table"
    cells = []
    for key, reqs in by_cell.items():
        model, arm, method_label, n, conc = key
        trials: dict[int, list[Request]] = {}
        for r in reqs:
            trials.setdefault(trial_no[(r.cell, r.trial_key)], []).append(r)
        records: list[dict[str, Any]] = []
        per_trial = []
        for t in sorted(trials):
            rs = trials[t]
            starts = [r.start_ms for r in rs if r.start_ms is not None]
            origin = min(starts) if len(starts) == len(rs) else None
            clock = 0
            for pos, r in enumerate(rs):
                sent = (round((r.start_ms - origin) * NS_PER_MS)
                        if origin is not None and r.start_ms is not None else clock)
                prompt = r.prompt if r.prompt is not None else f"r{pos:05d}"
                category = r.category or categories.get(prompt, "unknown")
                rec = timed_record(
                    trial=t, index=pos, prompt_id=prompt, category=category, t_sent_ns=sent,
                    ttft_ns=round(r.ttft_ms * NS_PER_MS) if r.ttft_ms is not None else None,
                    decode_ns=round(r.decode_ms * NS_PER_MS) if r.decode_ms is not None
                    else None, tokens=r.tokens if r.error is None else None,
                    usage={"completion_tokens": r.tokens, "prompt_tokens": r.input_tokens},
                    max_tokens=None, text=None, source=r.source)
                if r.drafted is not None:
                    rec["timings"] = {"draft_n": r.drafted,
                                      "draft_n_accepted": r.accepted or 0}
                if r.server_start is not None:
                    rec["server_start"] = r.server_start
                if r.error is not None:
                    rec.update(status="error", error=r.error)
                records.append(rec)
                clock = rec["t_done_ns"] + NS_PER_MS
            wall = _one({r.wall_s for r in rs if r.wall_s is not None}, "wall", arm, conc, t,
                        maps)
            thr = _one({r.throughput for r in rs if r.throughput is not None}, "throughput",
                       arm, conc, t, maps)
            tokens = sum(r.tokens or 0 for r in rs if r.error is None)
            per_trial.append({"trial": t, "wall_s": wall, "output_tok_s": thr,
                              "output_tokens": tokens,
                              "start_times": origin is not None})
        aggregate, wall_known = _aggregate(per_trial, notes, f"{arm} at concurrency {conc}")
        method = "none" if arm == baseline_arm else (
            methods.get(arm) or method_label or given_method or "unknown")
        unknown = list(LAYOUT_FIGURES)
        if not wall_known:
            unknown.append(WALL_FIGURE)
        imported: dict[str, Any] = {
            "arm": arm, "files": sorted({r.source for r in reqs}), "trials": sorted(trials),
            "timing": "the table's own times: TTFT as sent-to-first-token, decode as first "
                      "token to last" + ("; sent at the mapped start times"
                                         if all(p["start_times"] for p in per_trial) else
                                         "; requests laid end to end, 1 ms apart (no clock)"),
            "map": {fm.field: fm.raw for fm in maps.values()},
            "unknown_figures": unknown,
        }
        if aggregate is not None:
            imported["aggregate"] = aggregate
            if aggregate.get("wall_output_tok_s") is not None:  # the file's own figure
                imported["source_figures"] = {WALL_FIGURE: aggregate["wall_output_tok_s"]}
                imported["figure_notes"] = {WALL_FIGURE: aggregate["definition"]}
        if any(r.drafted is not None for r in reqs):
            imported["acceptance_source"] = "per-request drafted/accepted of the table"
        cells.append(new_cell(records, imported, engine=engine, model=model, target=model,
                              arm=arm, method=method, n=n, workload=workload, concurrency=conc,
                              trials=len(trials)))
    return cells


def _aggregate(per_trial: list[dict[str, Any]], notes: list[str], cell: str
               ) -> tuple[dict[str, Any] | None, bool]:
    """The cell's wall throughput from the trials' own figures (docs/analysis.md, "Throughput") and
    whether the cell has a wall figure at all; a note says why when it has none."""
    walls = [p["wall_s"] for p in per_trial]
    thrs = [p["output_tok_s"] for p in per_trial]
    value: float | None = None
    if all(x is not None for x in thrs):
        if all(w is not None for w in walls):
            value = sum(x * w for x, w in zip(thrs, walls, strict=True)) / sum(walls)
            definition = "the trials' own throughput, pooled over their own wall times"
        else:
            value = sum(thrs) / len(thrs)
            definition = "the mean of the trials' own throughput (no wall time to pool by)"
    elif all(w is not None for w in walls):
        value = sum(p["output_tokens"] for p in per_trial) / sum(walls)
        definition = "imported output tokens over the trials' own wall times"
    has_any = any(x is not None for x in thrs) or any(w is not None for w in walls)
    if value is None:
        if has_any:
            notes.append(f"{cell}: no wall throughput: some trials give no wall time or "
                         "throughput (every trial needs one)")
        elif not all(p["start_times"] for p in per_trial):
            notes.append(f"{cell}: no wall throughput: the files give no per-trial wall time "
                         "or throughput and no request start times (map wall, throughput or "
                         "start); requests are never laid end to end for one")
            return None, False
        else:
            return None, True  # the records' own windows, from the mapped start times
        return {"per_trial": per_trial, "wall_output_tok_s": None}, False
    assert math.isfinite(value)
    return {"per_trial": per_trial, "wall_output_tok_s": value,
            "definition": definition}, True
