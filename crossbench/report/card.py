"""The study card: what ran, where, on what, and what was held fixed.

Built from the cells' manifests and their per-trial provenance records (never from the
matrix file alone: the card shows what was recorded, including hashes). ``fixed`` lists every
normalized setting (``crossbench.confounds.normalize``) that is identical in every cell, and
``varied`` the settings that are not, so a reader sees at once what the study compares.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossbench.confounds.normalize import normalize_trial
from crossbench.report.study import Cell, Study

#: normalized fields that describe when or how a cell was launched, not what it measured
_NOT_SETTINGS = ("run.created_utc", "trial.", "crossbench.argv")
_MAX_VALUE = 120


@dataclass(frozen=True)
class Section:
    """A titled list of (name, value) rows."""

    title: str
    rows: list[tuple[str, str]]


@dataclass(frozen=True)
class Card:
    """The study card (see the module docstring)."""

    sections: list[Section]
    fixed: list[tuple[str, str]]
    varied: list[str]


def distinct(values: Iterable[Any]) -> str:
    """The distinct values, in first-seen order, joined by `` / `` (``n/a`` when none)."""
    seen = dict.fromkeys(str(v) for v in values if v is not None and v != "")
    return " / ".join(seen) or "n/a"


def gib(n: Any) -> str | None:
    """Bytes as GiB with one decimal."""
    return None if n is None else f"{int(n) / 2**30:.1f} GiB"


def _config(c: Cell) -> dict[str, Any]:
    return dict(c.manifest.get("config") or {})


def _engine_config(c: Cell) -> dict[str, Any]:
    return dict(_config(c).get("engine_config") or {})


def _load(c: Cell) -> dict[str, Any]:
    return dict(_config(c).get("load") or {})


def hardware(cells: list[Cell]) -> Section:
    """CPU, memory, OS and GPUs with their driver, from provenance (else the manifest)."""
    hosts = [c.provenance().get("host") or c.manifest.get("host") or {} for c in cells]
    gpus = [c.provenance().get("gpu") or {} for c in cells]
    rows = [
        ("CPU", distinct(f"{h.get('cpu')} ({h.get('cpus')} cores)" for h in hosts
                         if h.get("cpu"))),
        ("memory", distinct(gib(h.get("ram_bytes")) for h in hosts)),
        ("OS", distinct(h.get("os") or h.get("platform") for h in hosts)),
        ("GPU", distinct(gpu_line(g) for g in gpus if g)),
        ("driver", distinct(g.get("driver") for g in gpus)),
        ("CUDA driver", distinct(g.get("cuda_driver_version") for g in gpus)),
    ]
    return Section("Hardware", [r for r in rows if r[1] != "n/a" or r[0] in ("CPU", "GPU")])


def gpu_line(gpu: dict[str, Any]) -> str:
    """``2 x NVIDIA H200 (139.8 GiB)`` or ``none: reason``."""
    if not gpu.get("available"):
        return f"none: {gpu.get('reason') or 'not recorded'}"
    names = [f"{g.get('name')} ({gib(g.get('memory_total_bytes'))})"
             for g in gpu.get("gpus") or []]
    if names and len(set(names)) == 1:
        return f"{len(names)} x {names[0]}"
    return ", ".join(names) or f"{gpu.get('count')} GPU(s)"


def engine_line(c: Cell) -> str:
    """The engine build of a cell: kind, build and commit, pin or binary, binary hash."""
    e = dict(c.manifest.get("engine") or {})
    prov = c.provenance().get("engine") or {}
    e = {**prov, **{k: v for k, v in e.items() if v is not None}}
    ec = _engine_config(c)
    parts = [str(e.get("kind") or c.coords.get("engine"))]
    if e.get("build_number") is not None:
        parts.append(f"build {e['build_number']}")
    if e.get("commit"):
        parts.append(f"commit {e['commit']}")
    elif e.get("version"):
        parts.append(str(e["version"]).splitlines()[0])
    origin = ec.get("pin") or (Path(str(ec["binary"])).name if ec.get("binary") else None)
    if origin:
        parts.append(f"({origin}{', ' + str(ec['variant']) if ec.get('variant') else ''})")
    sha = e.get("sha256") or {}
    binary = Path(str(e.get("binary") or "")).name
    if isinstance(sha, dict) and sha.get(binary):
        parts.append(f"{binary} sha256 {str(sha[binary])[:16]}")
    return " ".join(parts)


def engines(cells: list[Cell]) -> Section:
    """One row per engine id of the study."""
    by_id: dict[str, list[str]] = {}
    for c in cells:
        by_id.setdefault(str(c.coords.get("engine")), []).append(engine_line(c))
    return Section("Engines", [(k, distinct(v)) for k, v in by_id.items()])


def model_facts(c: Cell) -> dict[str, dict[str, Any]]:
    """Per role (``model``, ``draft``): the recorded file facts, provenance over manifest."""
    out: dict[str, dict[str, Any]] = {}
    for role, rec in (c.manifest.get("models") or {}).items():
        if isinstance(rec, dict):
            out[role] = dict(rec)
    for role, rec in (c.provenance().get("models") or {}).items():
        if isinstance(rec, dict):
            out[role] = {**out.get(role, {}), **rec}
    refs = _config(c).get("model_refs") or {}
    ec = _engine_config(c)
    paths = {"model": ec.get("model"), "draft": (ec.get("spec") or {}).get("draft_model")}
    for role, path in paths.items():
        if path and role not in out:
            out[role] = {"path": path}
        if role in out and refs.get(role) and not out[role].get("ref"):
            out[role]["ref"] = refs[role]
    return out


def model_line(facts: dict[str, Any], hash_chars: int = 64) -> str:
    """File name, quantization, parameters, size and sha256 of one model file."""
    gg = facts.get("gguf") or {}
    parts = [Path(str(facts.get("path") or facts.get("ref") or "?")).name]
    if gg.get("quantization"):
        parts.append(str(gg["quantization"]))
    if gg.get("parameter_count"):
        parts.append(f"{int(gg['parameter_count']) / 1e6:,.1f} M parameters")
    if facts.get("bytes"):
        parts.append(f"{int(facts['bytes']) / 1e6:,.1f} MB")
    if facts.get("sha256"):
        parts.append(f"sha256 {str(facts['sha256'])[:hash_chars]}")
    if facts.get("hf_commit"):
        parts.append(f"HF commit {str(facts['hf_commit'])[:12]}")
    return ", ".join(parts)


def model_files(cells: list[Cell]) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """(role as shown, reference, :func:`model_facts`) of every model file of every cell."""
    for c in cells:
        for role, facts in model_facts(c).items():
            ref = facts.get("ref") or c.coords.get("target")
            yield "target" if role == "model" else role, ref, facts


def models(cells: list[Cell]) -> Section:
    """Every distinct model file, by role and reference."""
    rows: dict[str, list[str]] = {}
    for name, ref, facts in model_files(cells):
        rows.setdefault(f"{name} {ref}", []).append(model_line(facts))
    return Section("Models", [(k, distinct(v)) for k, v in rows.items()])


def workload(cells: list[Cell]) -> Section:
    """Prompts, request shape and load."""
    loads = [_load(c) for c in cells]
    wl = [c.manifest.get("workload") or {} for c in cells]
    rows = [
        ("prompts", distinct(f"{w.get('spec')} ({w.get('prompts')} prompts, digest "
                             f"{str(w.get('digest'))[:12]})" if w.get("digest") else w.get("spec")
                             for w in wl)),
        ("requests per trial", distinct(f"{ld.get('requests')} + {ld.get('warmup', 0)} warm-up"
                                        for ld in loads if ld.get("requests") is not None)),
        ("endpoint", distinct(ld.get("endpoint") for ld in loads)),
        ("max tokens", distinct(ld.get("max_tokens") for ld in loads)),
        ("ignore EOS", distinct(ld.get("ignore_eos") for ld in loads)),
        ("concurrency", distinct(ld.get("concurrency") for ld in loads)),
        ("request rate", distinct(f"{ld['rate']} req/s" for ld in loads if ld.get("rate"))),
    ]
    return Section("Workload", [r for r in rows if r[1] != "n/a"])


def sampling(cells: list[Cell]) -> Section:
    """Sampling settings the client sent."""
    loads = [_load(c) for c in cells]
    rows = [(k.replace("_", " "), distinct(ld.get(k) for ld in loads))
            for k in ("temperature", "top_p", "seed", "cache_prompt", "thinking")]
    return Section("Sampling", [r for r in rows if r[1] != "n/a"])


def schedule(study: Study) -> Section:
    """Trials, order, pauses, thermal gate, telemetry rate and when it ran."""
    cfgs = [_config(c) for c in study.cells]
    sched = (study.state or {}).get("schedule") or {}
    m = study.matrix or {}
    started = sorted(str(e["started_utc"]) for c in study.cells for e in c.trials
                     if e.get("started_utc"))
    ended = sorted(str(e["ended_utc"]) for c in study.cells for e in c.trials
                   if e.get("ended_utc"))
    gate = m.get("thermal_gate")
    rows = [
        ("trials per cell", distinct(cfg.get("trials") for cfg in cfgs)),
        ("order", f"{sched['order']} (seed {sched.get('seed')})" if sched.get("order")
         else "n/a"),
        ("fresh server per trial", distinct(cfg.get("fresh_server") for cfg in cfgs)),
        ("cooldown between trials", f"{m['cooldown_s']} s" if m.get("cooldown_s") else "n/a"),
        ("thermal gate", json.dumps(gate, sort_keys=True) if gate else "n/a"),
        ("telemetry", distinct(f"{cfg['telemetry_hz']} Hz" for cfg in cfgs
                               if cfg.get("telemetry_hz"))),
        ("ran", f"{started[0]} to {ended[-1]}" if started and ended else "n/a"),
    ]
    return Section("Schedule", [r for r in rows if r[1] != "n/a"])


def held_fixed(cells: list[Cell]) -> tuple[list[tuple[str, str]], list[str]]:
    """(settings identical in every cell, settings that differ), by normalized field."""
    views = []
    for c in cells:
        try:
            views.append(normalize_trial(c.manifest))
        except Exception:  # a foreign manifest: the card still shows the rest
            continue
    if not views:
        return [], []
    keys = sorted(set().union(*views))
    fixed, varied = [], []
    for k in keys:
        if k.startswith(_NOT_SETTINGS):
            continue
        values = {json.dumps(v.get(k), sort_keys=True) for v in views}
        if len(values) == 1 and all(k in v for v in views):
            text = str(views[0][k])
            fixed.append((k, text if len(text) <= _MAX_VALUE else text[:_MAX_VALUE - 3] + "..."))
        else:
            varied.append(k)
    return fixed, varied


def study_card(study: Study) -> Card:
    """The card of a study (see the module docstring)."""
    cells = study.cells
    fixed, varied = held_fixed(cells)
    sections = [hardware(cells), engines(cells), models(cells), workload(cells),
                sampling(cells), schedule(study)]
    return Card([s for s in sections if s.rows], fixed, varied)
