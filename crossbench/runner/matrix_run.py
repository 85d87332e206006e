"""Run a matrix: every (cell, trial) of the schedule, resumable after any interruption.

Output directory::

    matrix.yaml        the matrix file as run (its sha256 is in state.json)
    state.json         matrix digest, cells, pairs and the schedule
    journal.jsonl      one line per finished trial (appended + fsynced): the resume point
    cells/<cell>/      a `crossbench run` directory per cell (records, logs, metrics, summary)
    summary.json       per cell: trials done / failed, the cell's headline figures

A kill at any moment loses at most the trial in flight; its server dies with crossbench
(parent-death signal). ``--resume`` runs only what the journal lacks and refuses a changed
matrix file or engine build.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossbench.errors import UserError
from crossbench.host import hardware_mismatch
from crossbench.runner.config import RunConfig
from crossbench.runner.matrix import (
    Cell,
    Matrix,
    ThermalGate,
    expand,
    load_matrix,
    matrix_digest,
    schedule,
    validate_cells,
)
from crossbench.runner.single import RunSession
from crossbench.store.atomic import JsonlAppender, read_jsonl, write_json_atomic

STATE_SCHEMA = 1
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Tick:
    """Where a matrix run stands: emitted before (``ended=False``) and after each trial."""

    index: int  # 0-based position in this invocation's to-do list
    total: int  # trials this invocation runs
    done_before: int  # trials a resumed run found finished
    cell: str
    trial: int  # 0-based
    trials: int
    failures: int  # failed trials so far, including earlier invocations
    eta_s: float | None
    last_tok_s: float | None
    ended: bool = False
    status: str | None = None  # the trial's outcome when ended


def _no_ticks(_: Tick) -> None:
    return None


def cell_dir(out: Path, cell_id: str) -> Path:
    """Folder of one cell's run directory."""
    return out / "cells" / cell_id.replace("/", "__")


def _resolve(ref: str) -> str:
    """A model reference as a local path (fixtures are made, hf files fetched, on first use)."""
    if ref.startswith("fixture:"):
        from crossbench.cli.fixtures_cmd import ensure_fixtures, ensure_hf_fixture, quantize
        from crossbench.runner.matrix import parse_fixture_ref

        shape, role, quant = parse_fixture_ref(ref, "model")
        if quant == "hf":  # the Hugging Face folder of the same tensors (vLLM)
            return str(ensure_hf_fixture(shape, role))
        target, draft = ensure_fixtures(shape)
        path = target if role == "target" else draft
        return str(quantize(path, quant) if quant else path)
    if ref.startswith("hf://") and ref.count("/") < 4:
        return ref  # a whole repository (hf://OWNER/REPO@REV): the engine fetches it
    if ref.startswith("hf://"):
        from crossbench.models import parse_model_ref, resolve_model

        return str(resolve_model(parse_model_ref(ref)))
    return ref


def run_config(cell: Cell, trials: int, fresh_server: bool, resolve: bool = True,
               telemetry_hz: float = 10.0, gpu_busy: str = "warn") -> RunConfig:
    """The `crossbench run` configuration of one cell, with model files resolved."""
    cfg = json.loads(json.dumps(cell.engine_config))
    if resolve:
        cfg["model"] = _resolve(cfg["model"])
        if "draft_model" in cfg["spec"]:
            cfg["spec"]["draft_model"] = _resolve(cfg["spec"]["draft_model"])
    return RunConfig.model_validate({"engine": cell.engine_kind, "engine_config": cfg,
                                     "load": cell.load, "trials": trials,
                                     "fresh_server": fresh_server,
                                     "telemetry_hz": telemetry_hz, "gpu_busy": gpu_busy,
                                     "model_refs": cell.model_refs})


def select(cells: list[Cell], only: tuple[str, ...], skip: tuple[str, ...]) -> list[Cell]:
    """Cells whose coordinates match every ``--only k=v`` and no ``--skip k=v``."""
    def parse(items: tuple[str, ...], flag: str) -> list[tuple[str, str]]:
        out = []
        for it in items:
            key, sep, val = it.partition("=")
            if not sep or key not in cells[0].coords:
                raise UserError(f"{flag} {it!r} is not KEY=VALUE with a known key",
                                f"keys: {', '.join(cells[0].coords)}")
            out.append((key, val))
        return out

    o, s = parse(only, "--only"), parse(skip, "--skip")

    def hit(c: Cell, k: str, v: str) -> bool:
        return str(c.coords[k]) == v

    return [c for c in cells if all(hit(c, k, v) for k, v in o)
            and not any(hit(c, k, v) for k, v in s)]


def read_journal(out: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Finished trials by (cell id, trial)."""
    path = out / "journal.jsonl"
    if not path.exists():
        return {}
    return {(r["cell"], int(r["trial"])): r for r in read_jsonl(path)}


def run_matrix(path: Path, out: Path, resume: bool = False, only: tuple[str, ...] = (),
               skip: tuple[str, ...] = (), dry_run: bool = False,
               progress: Progress = lambda _: None,
               on_tick: Callable[[Tick], None] = _no_ticks) -> dict[str, Any]:
    """Run (or with ``dry_run`` print) a matrix's schedule; returns the matrix summary.

    ``progress`` gets messages (warnings, each trial's steps); ``on_tick`` gets a :class:`Tick`
    before and after every trial (the CLI draws its live view from them).
    """
    m = load_matrix(path)
    cells = expand(m, path)
    validate_cells(m, cells, path)
    cells = select(cells, only, skip)
    if not cells:
        raise UserError("--only/--skip leave no cells", "loosen the filters")
    order = schedule(cells, m.trials, m.schedule.order, m.schedule.seed)
    digest = matrix_digest(path)
    by_id = {c.id: c for c in cells}
    if dry_run:
        from crossbench.engines import registry

        plan = []
        for cid, t in order:
            rc = run_config(by_id[cid], m.trials, m.fresh_server, resolve=False)
            srv = registry.create(rc.engine, rc.engine_config, Path("/dev/null"))
            plan.append({"cell": cid, "trial": t, "argv": srv.command()})
        return {"dry_run": plan}
    _check_versions(m, cells)
    state_path = out / "state.json"
    if state_path.exists():
        if not resume:
            raise UserError(f"--out {out} already holds a matrix run",
                            "add --resume to continue it, or choose a new --out")
        state = json.loads(state_path.read_text())
        if state["matrix_sha256"] != digest:
            raise UserError(f"{path} changed since {out} started (sha256 "
                            f"{state['matrix_sha256'][:12]} then, {digest[:12]} now)",
                            "resume with the same matrix file, or start a new --out")
    else:
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, out / "matrix.yaml")
        warning = hardware_mismatch(m.hardware.gpu, m.hardware.gpu_count)
        if warning:
            progress(f"warning: {warning}")
        write_json_atomic(state_path, {
            "schema_version": STATE_SCHEMA, "kind": "crossbench.matrix",
            "matrix_sha256": digest, "study": m.study.name, "trials": m.trials,
            "schedule": {"order": m.schedule.order, "seed": m.schedule.seed},
            "cells": [{"id": c.id, "coords": c.coords, "baseline": c.baseline,
                       "dir": str(cell_dir(out, c.id).relative_to(out))} for c in cells],
            "order": [[cid, t] for cid, t in order],
            "warnings": [warning] if warning else [],
        })
    done = read_journal(out)
    todo = [(cid, t) for cid, t in order if (cid, t) not in done]
    sessions: dict[str, RunSession] = {}
    t0 = time.monotonic()
    failures = sum(1 for r in done.values() if r["status"] != "ok")
    last: float | None = None
    with JsonlAppender(out / "journal.jsonl") as journal:
        for i, (cid, t) in enumerate(todo):
            if cid not in sessions:
                d = cell_dir(out, cid)
                sessions[cid] = RunSession(run_config(by_id[cid], m.trials, m.fresh_server,
                                                      telemetry_hz=m.telemetry_hz,
                                                      gpu_busy=m.gpu_busy), d,
                                           progress=progress,
                                           resume=(d / "manifest.json").exists())
            gate = _gate(m.thermal_gate, progress)
            eta = (time.monotonic() - t0) / i * (len(todo) - i) if i else None
            tick = Tick(i, len(todo), len(done), cid, t, m.trials, failures, eta, last)
            on_tick(tick)
            entry = sessions[cid].run_trial(t)
            if entry["status"] != "ok":
                failures += 1
            last = (entry.get("load") or {}).get("pooled_tok_s") or last
            journal.write({"cell": cid, "trial": t, "status": entry["status"],
                           "error": entry["error"],
                           **({"thermal_gate": gate} if gate is not None else {})})
            eta = (time.monotonic() - t0) / (i + 1) * (len(todo) - i - 1)
            on_tick(Tick(i, len(todo), len(done), cid, t, m.trials, failures, eta, last,
                         ended=True, status=entry["status"]))
            if m.cooldown_s and i + 1 < len(todo):
                time.sleep(m.cooldown_s)
    for cid in by_id:
        if cid not in sessions and cell_dir(out, cid).joinpath("manifest.json").exists():
            sessions[cid] = RunSession(run_config(by_id[cid], m.trials, m.fresh_server,
                                                  telemetry_hz=m.telemetry_hz,
                                                      gpu_busy=m.gpu_busy),
                                       cell_dir(out, cid), resume=True)
    cell_summaries = {cid: s.finish() for cid, s in sessions.items()}
    summary = matrix_status(out, cell_summaries)
    write_json_atomic(out / "summary.json", summary)
    return summary


def _check_versions(m: Matrix, cells: list[Cell]) -> None:
    """Refuse to start when an engine build misses its ``requires`` constraint."""
    from crossbench.engines import registry
    from crossbench.runner.versions import unmet

    for eid, entry in m.engines.items():
        cell = next((c for c in cells if c.coords["engine"] == eid), None)
        if entry.requires is None or cell is None:
            continue
        rc = run_config(cell, m.trials, m.fresh_server, resolve=False)
        server = registry.create(rc.engine, rc.engine_config, Path("/dev/null"))
        why = unmet(entry.requires, server.identity())
        if why:
            raise UserError(f"engines.{eid}.requires: {why}",
                            "install a build that satisfies it, or change `requires`")


def _gate(gate: ThermalGate | None, progress: Progress) -> dict[str, Any] | None:
    """Run the thermal gate if the matrix has one; warn when it cannot check or times out."""
    if gate is None:
        return None
    from crossbench.telemetry.gpu import thermal_gate

    res = thermal_gate(gate.max_temp_c, gate.timeout_s, gate.poll_s)
    if not res.checked:
        progress(f"warning: thermal gate not applied: {res.reason}; the trial runs ungated "
                 "(remove thermal_gate on hosts without NVIDIA GPUs)")
    elif not res.passed:
        progress(f"warning: thermal gate: {res.reason}; the trial runs hot (raise "
                 "thermal_gate.timeout_s or cooldown_s, or improve cooling)")
    return res.to_dict()


def matrix_status(out: Path, cell_summaries: dict[str, dict[str, Any]] | None = None
                  ) -> dict[str, Any]:
    """Per cell: trials done / failed / missing, and headline figures where summarized."""
    state_path = out / "state.json"
    if not state_path.exists():
        raise UserError(f"{out} holds no matrix run (no state.json)",
                        "point at a `crossbench matrix --out` directory")
    state = json.loads(state_path.read_text())
    journal = read_journal(out)
    rows = []
    for c in state["cells"]:
        got = [journal[(c["id"], t)] for t in range(state["trials"]) if (c["id"], t) in journal]
        row: dict[str, Any] = {
            "id": c["id"], "baseline": c["baseline"],
            "done": sum(1 for r in got if r["status"] == "ok"),
            "failed": sum(1 for r in got if r["status"] != "ok"),
            "missing": state["trials"] - len(got),
            "errors": [r["error"] for r in got if r["status"] != "ok"],
        }
        s = (cell_summaries or {}).get(c["id"])
        if s is None and (out / c["dir"] / "summary.json").exists():
            s = json.loads((out / c["dir"] / "summary.json").read_text())
        if s is not None:
            row["pooled_tok_s"] = s["throughput"]["pooled_tok_s"]
            row["draft_acceptance_rate"] = s["acceptance"]["draft_acceptance_rate"]
            row["mean_acceptance_length"] = s["acceptance"]["mean_acceptance_length"]
            row["integrity_passed"] = s["integrity"]["passed"]
        rows.append(row)
    totals = {k: sum(r[k] for r in rows) for k in ("done", "failed", "missing")}
    return {"schema_version": STATE_SCHEMA, "kind": "crossbench.matrix_summary",
            "study": state["study"], "cells": rows, "totals": totals}
