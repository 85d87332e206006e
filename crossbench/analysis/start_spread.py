"""The known start spread: how far a fresh server start moves a cell's decode rate, measured on
runs with several starts per cell, and the verdict interval it gives a design with few starts.

:func:`measure` pools the spread per engine kind and role (``crossbench start-spread``),
:class:`StartSpread` is its checked file, and :class:`Prior` gives one pair the interval with
the starts' share (se_w^2 + sigma_s^2 / k_s + sigma_b^2 / k_b, Student's t with
Welch-Satterthwaite df), joined to the bootstrap's so the spread can only make a verdict more
conservative. Method, checks and tests: docs/analysis.md, "Known start spread".
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from crossbench.analysis.stats import t_quantile
from crossbench.errors import UserError
from crossbench.textfile import decode_text, read_bytes

KIND = "crossbench-start-spread"
"""The ``kind`` of a start-spread file."""
SCHEMA = 1
"""The ``schema_version`` of a start-spread file."""
BASELINE = "baseline"
"""The role of cells without speculative decoding."""
NO_SPREAD = "the start-spread file has no spread"
"""The words of the verdict caveat of a pair the file has no spread for."""
MIN_SIGMA_LOG = 0.005
"""Smallest start spread (log SD) a file may carry: half a percent, a quarter of the smallest
measured between fresh starts on the H200 (docs/analysis.md); below it the file was edited. A
measurement below it (fresh starts of a tiny model on a quiet CPU host agree to 0.3 %) is
kept as ``measured_sigma_log`` and the spread carries the floor, which errs wide."""
MAX_SIGMA_LOG = 2.0
"""Largest start spread a file may carry (a start moving the rate by a factor e^2 = 7.4; the
largest measured is 0.33): beyond it the number is a typo or a unit error."""
MAX_FILE_BYTES = 64 * 1024 * 1024
"""Largest start-spread file read (64 MiB): one calibrated cell takes about 200 bytes, so
this is some 300,000 cells; a larger file is a wrong path (a model, a log, /dev/zero)."""
MAX_DF = 1_000_000
"""Most degrees of freedom a spread may claim (a million fresh starts)."""


@dataclass(frozen=True)
class Spread:
    """The pooled spread between server starts of one role of one engine kind."""

    engine: str
    """The engine's kind (``llama-server``, ``vllm``...)."""
    role: str
    """``baseline`` or the speculative method's type (``draft-simple``, ``draft_model``...)."""
    sigma_log: float
    """Standard deviation of a start's mean log decode rate about its cell's mean."""
    df: int
    """Degrees of freedom of ``sigma_log``: the sum over cells of (starts - 1)."""
    cells: int
    """Cells pooled."""
    starts: int
    """Server starts over those cells."""
    measured_sigma_log: float | None = None
    """The measured spread where it fell below :data:`MIN_SIGMA_LOG` (``sigma_log`` is then
    the floor); None where ``sigma_log`` is the measurement itself."""

    def to_dict(self) -> dict[str, Any]:
        """The spread as a JSON object (``cv`` is exp(sigma_log) - 1, for reading)."""
        out = {"engine": self.engine, "role": self.role, "sigma_log": self.sigma_log,
               "cv": math.expm1(self.sigma_log), "df": self.df, "cells": self.cells,
               "starts": self.starts}
        if self.measured_sigma_log is not None:
            out["measured_sigma_log"] = self.measured_sigma_log
        return out


@dataclass(frozen=True)
class StartSpread:
    """Start spreads by engine kind and role, with the runs they were measured on."""

    spreads: tuple[Spread, ...]
    sources: tuple[dict[str, Any], ...]
    """Per run: its directory name, study, matrix sha256, GPU, engine kinds and versions, and
    each measured cell's per-start geometric-mean decode rates (``start_tok_s``), from which
    every spread can be recomputed."""

    def lookup(self, engine: str, role: str) -> tuple[Spread, bool] | None:
        """The spread of ``role`` on engine kind ``engine`` and whether the role matched; a
        speculative role without its own spread takes the engine's largest speculative one
        (False); None when the file has no such role for the engine at all."""
        mine = [s for s in self.spreads if s.engine == engine]
        for s in mine:
            if s.role == role:
                return s, True
        if role == BASELINE:
            return None
        spec = [s for s in mine if s.role != BASELINE]
        return (max(spec, key=lambda s: s.sigma_log), False) if spec else None

    def to_record(self) -> dict[str, Any]:
        """The file's JSON object (also recorded in analysis.json's ``options``)."""
        return {"kind": KIND, "schema_version": SCHEMA,
                "spreads": [s.to_dict() for s in self.spreads],
                "sources": list(self.sources)}

    @classmethod
    def from_record(cls, doc: Any, where: str = "start spread") -> StartSpread:
        """Read :meth:`to_record`'s object back; a malformed one is a UserError naming the
        field."""
        fix = "make the file with `crossbench start-spread RUN... -o FILE`"
        if not isinstance(doc, dict) or doc.get("kind") != KIND:
            raise UserError(f"{where}: not a start-spread file (kind is not {KIND!r})", fix)
        if doc.get("schema_version") != SCHEMA:
            raise UserError(f"{where}: schema_version {doc.get('schema_version')!r} is not "
                            f"{SCHEMA}", fix)
        out = []
        spreads, sources = doc.get("spreads"), doc.get("sources", [])
        if not isinstance(spreads, list) or not isinstance(sources, list) \
                or not all(isinstance(x, dict) for x in [*spreads, *sources]):
            raise UserError(f"{where}: spreads and sources must be lists of objects", fix)
        seen: set[tuple[str, str]] = set()
        for i, s in enumerate(spreads):
            try:
                sp = Spread(_field(s, "engine", _text), _field(s, "role", _text),
                            _field(s, "sigma_log", _number), _field(s, "df", _whole),
                            _field(s, "cells", _whole), _field(s, "starts", _whole),
                            _field(s, "measured_sigma_log", _number)
                            if s.get("measured_sigma_log") is not None else None)
            except (KeyError, TypeError, ValueError) as e:
                raise UserError(f"{where}: spreads[{i}] lacks or mistypes {e}", fix) from None
            if not MIN_SIGMA_LOG <= sp.sigma_log <= MAX_SIGMA_LOG:
                raise UserError(f"{where}: spreads[{i}] has sigma_log {sp.sigma_log} "
                                f"({sp.engine} {sp.role}), outside [{MIN_SIGMA_LOG}, "
                                f"{MAX_SIGMA_LOG}]: no measurement of fresh starts gives it "
                                "(docs/analysis.md, \"Known start spread\")", fix)
            if not 1 <= sp.df <= MAX_DF or sp.df >= sp.starts or sp.cells < 1:
                raise UserError(f"{where}: spreads[{i}] has df {sp.df} from {sp.starts} starts "
                                f"of {sp.cells} cells; df must be 1 to {MAX_DF} and below "
                                "the starts (starts - 1 per cell)", fix)
            if (sp.engine, sp.role) in seen:
                raise UserError(f"{where}: spreads[{i}] repeats {sp.engine} {sp.role}",
                                "keep one spread per engine and role (measure them together: "
                                "`crossbench start-spread RUN... -o FILE`)")
            seen.add((sp.engine, sp.role))
            out.append(sp)
        if not out:
            raise UserError(f"{where}: spreads is empty", fix)
        keys = [json.dumps(x, sort_keys=True) for x in sources]
        if len(set(keys)) < len(keys):
            raise UserError(f"{where}: sources lists one run twice (its starts would count "
                            "twice in df)", fix)
        return cls(tuple(out), tuple(sources))

    def save(self, path: Path) -> None:
        """Write the file (JSON)."""
        path.write_text(json.dumps(self.to_record(), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> StartSpread:
        """Read a file written by :meth:`save`: a regular UTF-8 file of at most
        :data:`MAX_FILE_BYTES` (a device, a FIFO or a binary file is one line)."""
        fix = "give the file `crossbench start-spread RUN -o FILE` wrote"
        try:
            text = decode_text(read_bytes(path, "--start-spread", MAX_FILE_BYTES, fix), path,
                               "--start-spread")
        except UserError as e:
            if e.message.startswith("cannot read"):
                why = e.message.rpartition(": ")[2]
                raise UserError(f"--start-spread {path}: cannot be read ({why})", fix) from None
            raise
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(f"--start-spread {path}: not JSON ({e.msg}, line {e.lineno})",
                            fix) from None
        except RecursionError:
            raise UserError(f"--start-spread {path}: nested too deeply", fix) from None
        return cls.from_record(doc, f"--start-spread {path}")


def _field(doc: dict[str, Any], key: str, read: Any) -> Any:
    """``doc[key]`` read by ``read``; a missing or mistyped value raises KeyError or TypeError
    naming the key (``'df'``, ``df: inf (a whole number ...)``)."""
    if key not in doc:
        raise KeyError(key)
    try:
        return read(doc[key])
    except TypeError as e:
        raise TypeError(f"{key}: {e}") from None


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{value!r} (a name)")
    return value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value):
        raise TypeError(f"{value!r} (a finite number)")
    return float(value)


def _whole(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not float(value).is_integer() or abs(value) > MAX_DF * 1000:
        raise TypeError(f"{value!r} (a whole number up to {MAX_DF * 1000})")
    return int(value)


def run_start_spread(root: Path) -> StartSpread | None:
    """The start spread a matrix run decided with (its copy of the matrix's
    ``start_spread``), or None when it had none."""
    from crossbench.store.rundir import START_SPREAD

    path = root / START_SPREAD
    if not path.is_file():
        return None
    return StartSpread.load(path)


def start_means(figures: Sequence[Any]) -> list[float]:
    """Each server start's mean log decode rate over the (prompt, occurrence) keys that every
    start of the cell served (``figures``: a cell's RequestFigures)."""
    by_start: dict[int, dict[tuple[str, int], list[float]]] = {}
    for f in figures:
        if f.rate_tok_s and f.rate_tok_s > 0:
            by_start.setdefault(f.server_start, {}).setdefault(
                (f.prompt_id, f.occurrence), []).append(math.log(f.rate_tok_s))
    if len(by_start) < 2:
        return []
    common = set.intersection(*(set(k) for k in by_start.values()))
    if not common:
        return []
    return [float(np.mean([v for k in sorted(common) for v in per[k]]))
            for _, per in sorted(by_start.items())]


def measure(roots: Sequence[Path]) -> StartSpread:
    """The start spread of every role seen in ``roots`` (runs; module docstring)."""
    from crossbench.analysis.rundir import load_run

    ss: dict[tuple[str, str], list[float]] = {}  # sum (k-1) s^2, df, cells, starts
    sources = []
    resolved = [Path(r).resolve() for r in roots]
    for i, r in enumerate(resolved):
        if r in resolved[:i]:
            raise UserError(f"{roots[i]}: the same run as {roots[resolved.index(r)]} (given "
                            "twice, its starts would count twice in df)", "give each run once")
    for root in roots:
        run = load_run(root)
        if run.kind == "import":
            raise UserError(f"{root}: an import has no server starts (its trials are the "
                            "source tool's runs, not fresh starts crossbench saw), so no start "
                            "spread can be measured on it", "measure it on a crossbench run "
                            "or matrix with several fresh starts per cell")
        engines: dict[str, str] = {}
        per_cell = []
        for cell in run.cells:
            eng = cell.manifest.get("engine") or {}
            if eng.get("standin") is True:
                raise UserError(f"{root}: cell {cell.id} ran on a stand-in engine; its start "
                                "spread is not an engine's",
                                "measure the spread on a run of the real engine")
            kind = str(cell.config.get("engine") or eng.get("kind") or "unknown")
            version = str(eng.get("version") or "").strip().splitlines()
            engines[kind] = version[0] if version else engines.get(kind, "")
            means = start_means(cell.figures)
            if len(means) < 2:
                continue
            role = str(cell.spec.get("type") or "none")
            role = BASELINE if role == "none" else role
            per_cell.append({"cell": cell.id, "engine": kind, "role": role,
                             "start_tok_s": [round(math.exp(m), 3) for m in means]})
            acc = ss.setdefault((kind, role), [0.0, 0, 0, 0])
            k = len(means)
            acc[0] += (k - 1) * float(np.var(means, ddof=1))
            acc[1] += k - 1
            acc[2] += 1
            acc[3] += k
        state = run.state or {}
        hardware = (run.matrix or {}).get("hardware") or {}
        sources.append({"dir": Path(root).name, "study": state.get("study"),
                        "matrix_sha256": state.get("matrix_sha256"),
                        "gpu": hardware.get("gpu"), "engines": engines,
                        "cells": per_cell})
    if not ss:
        raise UserError(f"{', '.join(map(str, roots))}: no cell has two server starts, so no "
                        "start spread can be measured",
                        "measure it on a run with several fresh starts per cell (the default "
                        "design: no trials_per_start, trials >= 3)")
    spreads = []
    for (engine, role), a in sorted(ss.items()):
        sigma = math.sqrt(a[0] / a[1])  # the starts are fresh ones: each trial its own start
        low = sigma < MIN_SIGMA_LOG     # a quiet host: carry the floor, keep the measurement
        spreads.append(Spread(engine, role, MIN_SIGMA_LOG if low else sigma, int(a[1]),
                              int(a[2]), int(a[3]), measured_sigma_log=sigma if low else None))
    return StartSpread(tuple(spreads), tuple(sources))


@dataclass(frozen=True)
class Prior:
    """The start spreads of one pair's two sides and how many starts each side ran."""

    spec: Spread
    base: Spread
    spec_matched: bool
    k_spec: float
    """Speculative server starts, effective (:func:`effective_starts`)."""
    k_base: float
    """Baseline server starts, effective."""

    def interval(self, mean_log: float, within_ci: tuple[float, float] | None,
                 level: float) -> dict[str, Any]:
        """The pair's interval with the starts' known share (module docstring), from its mean
        log ratio and its prompt-only bootstrap interval ``within_ci`` (ratios, at
        ``level``)."""
        return self.interval_se(mean_log, within_se(within_ci, level), level)

    def interval_se(self, mean_log: float, se_w: float, level: float) -> dict[str, Any]:
        """:meth:`interval` from the within-start standard error ``se_w`` (log scale)."""
        v_s = self.spec.sigma_log ** 2 / self.k_spec
        v_b = self.base.sigma_log ** 2 / self.k_base
        var = se_w ** 2 + v_s + v_b
        denom = v_s ** 2 / self.spec.df + v_b ** 2 / self.base.df
        df = var ** 2 / denom if denom > 0 else math.inf
        q = (NormalDist().inv_cdf((1 + level) / 2) if df > 1000
             else t_quantile((1 + level) / 2, max(1, math.floor(df))))
        half = q * math.sqrt(var)
        return {"ci95": [math.exp(mean_log - half), math.exp(mean_log + half)],
                "df": None if math.isinf(df) else round(df, 2),
                "within_se_log": se_w,
                "sigma_spec_log": self.spec.sigma_log, "sigma_baseline_log": self.base.sigma_log,
                "spec_role": self.spec.role, "role_matched": self.spec_matched,
                "spec_starts": _count(self.k_spec), "baseline_starts": _count(self.k_base)}


def effective_starts(starts: Sequence[object]) -> float:
    """The effective number of server starts behind a mean over pairs, ``starts`` holding each
    pair's start: (sum n_i)^2 / sum n_i^2 for n_i pairs of start i (Kish). Starts of equal
    shares count as themselves; unequal ones as fewer, since the mean weighs each start's
    shift by its share of the pairs (0 without pairs)."""
    counts = Counter(starts).values()
    total = sum(counts)
    return total * total / sum(n * n for n in counts) if total else 0.0


def _count(k: float) -> float | int:
    """A start count as recorded: whole counts as integers, effective ones to 2 places."""
    return int(k) if float(k).is_integer() else round(k, 2)


def start_shifts(known: StartSpread, points: Sequence[tuple[str, str, float, float]],
                 resamples: int, seed: int) -> np.ndarray:
    """Draws of the starts' share of several speedups that share one baseline cell (a
    sweep's points): ``resamples`` x points log shifts. ``points``: each one's engine kind,
    speculative role, speculative and baseline server starts (effective counts). A point's
    shift is normal with variance sigma_spec^2 / starts_spec, its own, plus one baseline
    shift of variance sigma_base^2 / starts_base shared by every point (the same baseline
    requests divide them all); a point the file has no spread for gets none."""
    rng = np.random.default_rng([seed, 1])  # apart from the bootstrap's own stream
    out = np.zeros((resamples, len(points)))
    shared = rng.standard_normal(resamples)
    for i, (engine, role, k_spec, k_base) in enumerate(points):
        got = pair_spreads(known, engine, role)
        own = rng.standard_normal(resamples)
        if isinstance(got, str):
            continue
        out[:, i] = (own * got[0].sigma_log / math.sqrt(max(1, k_spec))
                     + shared * got[1].sigma_log / math.sqrt(max(1, k_base)))
    return out


def within_se(within_ci: tuple[float, float] | None, level: float) -> float:
    """The within-start standard error (log scale) a prompt-only bootstrap interval at
    ``level`` implies: half its log width over z (0 without an interval)."""
    if not within_ci:
        return 0.0
    z = NormalDist().inv_cdf((1 + level) / 2)
    return (math.log(within_ci[1]) - math.log(within_ci[0])) / (2 * z)


def pair_spreads(known: StartSpread, engine: str, role: str
                 ) -> tuple[Spread, Spread, bool] | str:
    """The spreads of a pair on engine kind ``engine`` whose speculative side is ``role``
    (speculative, baseline, whether the role matched), or why there are none."""
    spec = known.lookup(engine, role)
    base = known.lookup(engine, BASELINE)
    if spec is None or base is None:
        return (f"{lacking(known, engine, role)}, so this interval leaves out "
                "start-to-start variation: measure one (`crossbench start-spread`) on a run "
                "of this engine and method with several fresh starts per cell")
    return spec[0], base[0], spec[1]


def lacking(known: StartSpread, engine: str, role: str) -> str | None:
    """What ``known`` lacks for a pair of ``role`` on engine kind ``engine``, in words (e.g.
    ``the start-spread file has no spread (ngram and baseline on engine vllm)``), or None."""
    missing = " and ".join(r for r in (role, BASELINE) if known.lookup(engine, r) is None)
    return f"{NO_SPREAD} ({missing} on engine {engine})" if missing else None


def sources_text(known: StartSpread) -> str:
    """Where a file's spreads were measured, in a few words (run directories and GPUs)."""
    return ", ".join(f"{s.get('dir')} ({s.get('gpu') or 'GPU not recorded'})"
                     for s in known.sources) or "sources not recorded"
