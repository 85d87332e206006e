"""A normalized, flat view of a trial's setup: ``{dotted.field: value}``, from a run
directory's manifest with one trial entry and the trial's provenance record (:mod:`.provenance`).

Engine and load settings of crossbench's own runs are completed with their defaults (left out
equals set to the default); imported runs keep exactly what their source recorded. Values are
``str``, ``int``, ``float`` or ``bool``, unset ones left out (:func:`flatten`). The sources and
namespaces, on which the classes of :mod:`.diff` key: docs/confounds.md, "Normalized view".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crossbench.confounds.provenance import REDACTED, is_secret
from crossbench.engines.confound_rule import Scalar
from crossbench.errors import UserError
from crossbench.store import rundir

View = dict[str, Scalar]

#: engine-config keys that hold the speculative settings (llama-server ``spec``; vLLM's
#: adapter may name it ``speculative_config``)
SPEC_KEYS = ("spec", "speculative_config")
#: engine-config keys that name the target model
MODEL_KEYS = ("model",)


def flatten(prefix: str, obj: Any, out: View) -> View:
    """Add ``obj`` under ``prefix`` to ``out``: mappings by key, lists of mappings by index,
    lists of scalars as JSON text, None left out."""
    if obj is None:
        return out
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(obj, list | tuple):
        if any(isinstance(v, Mapping) for v in obj):
            for i, v in enumerate(obj):
                flatten(f"{prefix}.{i}", v, out)
        else:
            out[prefix] = json.dumps(list(obj), separators=(",", ":"))
    elif isinstance(obj, bool | int | float | str):
        out[prefix] = obj
    else:
        out[prefix] = str(obj)
    return out


def mask_port(argv: list[str]) -> str:
    """A command as one string with the value after ``--port`` (or ``--port=``) masked."""
    out = list(argv)
    for i, a in enumerate(out):
        if a == "--port" and i + 1 < len(out):
            out[i + 1] = "<port>"
        elif a.startswith("--port="):
            out[i] = "--port=<port>"
    return " ".join(out)


def _effective(cls_name: str, engine: str | None, data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` validated by its model and dumped with defaults; as given when that fails."""
    try:
        if cls_name == "load":
            from crossbench.load.settings import LoadSettings

            return LoadSettings.model_validate(dict(data)).model_dump(mode="json")
        from crossbench.engines import registry

        if engine is None:
            return dict(data)
        return registry.config_class(engine).model_validate(dict(data)).model_dump(mode="json")
    except Exception:
        return dict(data)


def normalize_config(config: Mapping[str, Any], defaults: bool = True) -> View:
    """The view of a ``RunConfig`` dump (``manifest["config"]``).

    ``defaults=False`` keeps the settings as recorded: an import records what its source
    said, and a default filled in on one side only (where the config validates) would be a
    difference the data never had."""
    out: View = {}
    engine = config.get("engine")
    ec = (_effective("engine", engine, config.get("engine_config") or {}) if defaults
          else dict(config.get("engine_config") or {}))
    for key, value in ec.items():
        if key == "env" and isinstance(value, Mapping):  # the server's own environment
            value = {k: (REDACTED if is_secret(k) else v) for k, v in value.items()}
        if key in SPEC_KEYS:
            flatten("spec", value, out)
        elif key in MODEL_KEYS:
            flatten("model.path", value, out)
        else:
            flatten(f"server.{key}", value, out)
    load = config.get("load") or {}
    flatten("load", _effective("load", None, load) if defaults else
            {k: v for k, v in load.items() if v is not None}, out)
    flatten("run.trials", config.get("trials"), out)
    flatten("run.fresh_server", config.get("fresh_server"), out)
    if (config.get("trials_per_start") or 1) > 1:  # absent from older records: 1
        flatten("run.trials_per_start", config.get("trials_per_start"), out)
    for role, ref in (config.get("model_refs") or {}).items():
        flatten(f"{_role(role)}.ref", ref, out)
    return out


def _role(role: str) -> str:
    return "model" if role in ("model", "target") else role


def normalize_provenance(record: Mapping[str, Any]) -> View:
    """The view of a provenance record (:func:`crossbench.confounds.provenance.collect`)."""
    out: View = {}
    flatten("crossbench", record.get("crossbench"), out)
    flatten("engine", record.get("engine"), out)
    if record.get("argv"):
        out["engine.argv"] = mask_port(list(record["argv"]))
    flatten("env", record.get("env"), out)
    for role, facts in (record.get("models") or {}).items():
        flatten(_role(role), facts, out)
    flatten("host", record.get("host"), out)
    gpu = dict(record.get("gpu") or {})
    gpus = gpu.pop("gpus", [])
    flatten("gpu", gpu, out)
    for i, g in enumerate(gpus):  # by position: the engine's CUDA device i, whichever card
        flatten(f"gpus.{i}", {k: v for k, v in g.items() if k != "index"}, out)
    return out


def normalize_trial(manifest: Mapping[str, Any], trial: int | None = None,
                    provenance: Mapping[str, Any] | None = None) -> View:
    """The view of one trial of a run directory's manifest.

    ``trial`` picks the trial entry by its number (default: the first that finished ``ok``,
    else the first). The provenance record is ``provenance`` if given, else the trial entry's
    or the manifest's ``provenance`` key; its facts override the manifest's where both exist.
    """
    out: View = {}
    flatten("crossbench.version", manifest.get("crossbench_version"), out)
    argv = manifest.get("argv")
    if argv:
        out["crossbench.argv"] = " ".join(argv)
    flatten("run.created_utc", manifest.get("created_utc"), out)
    out.update(normalize_config(manifest.get("config") or {},
                                defaults="imported" not in manifest))
    flatten("engine", manifest.get("engine"), out)
    for role, facts in (manifest.get("models") or {}).items():
        flatten(_role(role), facts, out)
    flatten("workload", manifest.get("workload"), out)
    flatten("host", manifest.get("host"), out)
    entry = _pick(manifest.get("trials") or [], trial)
    if entry is not None:
        out["trial.index"] = int(entry["trial"])
        for k in ("started_utc", "ended_utc"):
            flatten(f"trial.{k}", entry.get(k), out)
        if entry.get("argv"):
            out["engine.argv"] = mask_port(list(entry["argv"]))
        warnings = [str(w) for w in entry.get("warnings") or []]
        out["trial.other_engines_running"] = bool(entry.get("other_engines")) or any(
            "other inference processes" in w for w in warnings)
        props = dict(entry.get("server_props") or {})
        # start-up facts (vLLM's log) belong to the engine, wherever the runner kept them;
        # the speculative settings a server reports (SGLang's speculative_algorithm,
        # _num_steps...) are the speculative axis: server_props.startup.speculative.*
        startup = dict(props.pop("startup", None) or entry.get("startup") or {})
        reported = {k.removeprefix("speculative_"): startup.pop(k) for k in list(startup)
                    if k.startswith("speculative_") and k != "speculative_config"}
        flatten("engine.startup", startup or None, out)
        flatten("server_props.startup.speculative", reported or None, out)
        flatten("server_props", props, out)
    record = provenance
    if record is None and entry is not None:
        record = entry.get("provenance")
    if record is None:
        record = manifest.get("provenance")
    if record is not None:
        out.update(normalize_provenance(record))
    return out


def _pick(entries: list[dict[str, Any]], trial: int | None) -> dict[str, Any] | None:
    if trial is not None:
        for e in entries:
            if int(e["trial"]) == trial:
                return e
        raise UserError(f"no trial {trial} in this run",
                        f"trials recorded: {sorted(int(e['trial']) for e in entries)}")
    ok = [e for e in entries if e.get("status") == "ok"]
    return next(iter(ok or entries), None)


def normalize_run_dir(run_dir: Path, trial: int | None = None) -> View:
    """The view of one trial of a ``crossbench run`` directory (or a matrix cell folder)."""
    if not rundir.is_run(run_dir):
        raise UserError(f"{run_dir} holds no run (no {rundir.MANIFEST})",
                        "point at a `crossbench run --out` directory or a matrix cell folder")
    return normalize_trial(rundir.read_manifest(run_dir), trial)
