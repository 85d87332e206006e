"""One method's cost model across runs (``crossbench fit``): C(n) = tau / speedup = d + v * n
over the sweep points of one arm in several runs, each point paired with its own run's
baseline.

Every point is in its own baseline's plain decode steps, so a line through points of several
runs (other machines, other days) is meaningful, and a run may give a single n. The interval
resamples each run on its own: a joint bootstrap of its points
(:func:`crossbench.analysis.sweep.joint_log_speedups`, seed ``opts.seed`` plus the run's rank
by its first trial's start, :func:`seed_ranks`), the runs' draws independent, the line
refitted per draw over all points (keyed by position: two runs may share an n). What the
interval does not hold (start-to-start spread of a point measured on one server start, a
machine-to-machine difference in plain-step units) is said in ``notes``; a setting that
differs between runs (engine version, target, load) is a ``warnings`` entry. Definitions:
docs/analysis.md, "A cost model across runs".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from crossbench import __version__
from crossbench.analysis import sweep as sw
from crossbench.analysis.analyze import START_SPREAD_NOTE
from crossbench.analysis.host_time import trial_host
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.rundir import CellData
from crossbench.errors import UserError

FIT_KIND = "crossbench.fit"
FIT_SCHEMA = 1
"""Version of the ``--json`` object: 1, the first."""

SETUP_FIELDS = ("engine", "method", "target", "engine.version", "model.ref", "load.requests",
                "load.max_tokens", "load.workload", "workload.digest")
"""What must match between the runs of one fit (engine, version, target, load): each field
that differs is a confound of the cross-run line and a ``warnings`` entry."""


@dataclass
class Source:
    """One run of a fit: its name (the path given), its analysis (``crossbench analyze``'s
    object), its cells by id and the statistics options the analysis ran with."""

    name: str
    analysis: dict[str, Any]
    cells: dict[str, CellData]
    opts: StatsOptions


def arm_pairs(src: Source, arm: str, engine: str | None = None,
              concurrency: int = 1, target: str | None = None) -> list[dict[str, Any]]:
    """The analysed pairs of ``arm`` with an n at ``concurrency`` in one run (of ``engine``
    and ``target`` where given), by n; UserError naming the run when it has none, or several
    engines, targets or workloads."""
    pairs = pairs_of_arm(src.analysis, src.name, arm, engine, concurrency, target)
    if not pairs:
        have = sorted({f"{p.get('engine')}/{p.get('model')}/{p.get('arm')} "
                       f"(c={p.get('concurrency')})"
                       for p in src.analysis.get("pairs", []) if p.get("n") is not None})
        on = (f" on engine {engine}" if engine else "") + (f" of target {target}"
                                                            if target else "")
        raise UserError(f"{src.name}: arm {arm!r} has no paired cell with an n at concurrency "
                        f"{concurrency}{on}",
                        f"give a run that measured it, or another --arm, --engine, --target "
                        f"or --concurrency (this run's engine/target/arm: "
                        f"{', '.join(have) or 'none'})")
    return pairs


def pairs_of_arm(analysis: dict[str, Any], where: str, arm: str, engine: str | None = None,
                 concurrency: int = 1, target: str | None = None) -> list[dict[str, Any]]:
    """The analysed pairs of ``arm`` with an n at ``concurrency`` (of ``engine`` and
    ``target``, the matrix's model name, where given), by n, possibly none; UserError naming
    ``where`` when they ran on several engines, targets or workloads (their n would mix)."""
    pairs = [p for p in analysis.get("pairs", []) if p.get("arm") == arm
             and p.get("concurrency") == concurrency and p.get("n") is not None
             and engine in (None, p.get("engine")) and target in (None, p.get("model"))]
    engines = sorted({str(p.get("engine")) for p in pairs})
    if len(engines) > 1:
        raise UserError(f"{where}: arm {arm!r} ran on {len(engines)} engines "
                        f"({', '.join(engines)})", "name one with --engine")
    groups = sorted({"/".join(str(p.get(k)) for k in ("model", "method", "workload"))
                     for p in pairs})
    if len(groups) > 1:
        models = sorted({str(p.get("model")) for p in pairs})
        raise UserError(f"{where}: arm {arm!r} at concurrency {concurrency} ran with "
                        f"{len(groups)} target/method/workload ({'; '.join(groups)})",
                        f"name one target with --target ({', '.join(models)})"
                        if len(models) > 1 else
                        "give a run in which the arm ran one method and workload")
    return sorted(pairs, key=lambda p: int(p["n"]))


def _machine(entry: dict[str, Any]) -> dict[str, Any]:
    """The host and GPUs one trial ran on, as its manifest entry records them."""
    prov = entry.get("provenance") or {}
    gpus = (prov.get("gpu") or {}).get("gpus") or []
    return {"cpu": trial_host(entry)["cpu"], "boot_id": (prov.get("host") or {}).get("boot_id"),
            "gpus": [{"name": g.get("name"), "uuid": g.get("uuid")} for g in gpus]}


def machines(cells: list[CellData]) -> list[dict[str, Any]]:
    """The distinct machines (CPU model, GPU names and UUIDs, boot id) the trials of
    ``cells`` ran on; a trial that records none is left out."""
    seen: dict[str, dict[str, Any]] = {}
    for cell in cells:
        for entry in cell.manifest.get("trials") or []:
            m = _machine(entry)
            if m["cpu"] or m["boot_id"] or m["gpus"]:
                seen.setdefault(json.dumps(m, sort_keys=True), m)
    return list(seen.values())


def machine_label(m: dict[str, Any]) -> str:
    """One machine in a line: GPUs (UUID shortened), CPU model, boot id (shortened)."""
    gpus = ", ".join(f"{g['name']} {str(g['uuid'])[:12]}" for g in m["gpus"])
    return ", ".join(x for x in (gpus, m["cpu"] or "",
                                 f"boot {m['boot_id'][:8]}" if m["boot_id"] else "") if x)


def _setup(src: Source, pair: dict[str, Any]) -> dict[str, Any]:
    """The :data:`SETUP_FIELDS` of a run's baseline cell for ``pair``."""
    from crossbench.confounds.normalize import normalize_trial

    view = normalize_trial(src.cells[pair["baseline_cell"]].manifest)
    named = {"engine": pair.get("engine"), "method": pair.get("method"),
             "target": pair.get("model")}
    return {k: named[k] if k in named else view.get(k) for k in SETUP_FIELDS}


def _baseline(pair: dict[str, Any]) -> dict[str, Any]:
    """A pair's baseline cell and its decode rate, in tok/s and ms per token."""
    rate = pair.get("baseline_tok_s")
    return {"baseline_cell": pair["baseline_cell"], "baseline_tok_s": rate,
            "baseline_ms_per_token": 1e3 / rate if rate else None}


def _one_start(pair: dict[str, Any]) -> bool:
    """Whether a pair's interval rests on one server start per side, without a known start
    spread to cover it."""
    sp = pair["speedup"]
    return sp.get("start_prior") is None and (sp.get("n_server_starts") or sp["n_trials"]) == 1


def fit_across(sources: list[Source], arm: str, engine: str | None = None,
               concurrency: int = 1, target: str | None = None) -> dict[str, Any]:
    """The cost model of ``arm`` over the sweep points of every source (module docstring);
    UserError when a source lacks the arm (before anything is computed) or the points hold
    fewer than two distinct n."""
    members = [arm_pairs(src, arm, engine, concurrency, target) for src in sources]
    unmeasured = [(i + 1, p) for i, pairs in enumerate(members) for p in pairs
                  if not _measured(p)]
    for src, pairs in zip(sources, members, strict=True):
        if not any(_measured(p) for p in pairs):
            raise UserError(f"{src.name}: no cell of arm {arm!r} at concurrency {concurrency} "
                            "has a measured trial (a run cut short before them)",
                            "leave the run out of the fit, or finish it (`crossbench matrix "
                            "... --resume`)")
    members = [[p for p in pairs if _measured(p)] for pairs in members]
    points: list[dict[str, Any]] = []
    columns: list[Any] = []
    out_sources = []
    first = sources[0].opts  # one number of resamples: the sources' draws stack as columns
    rank = seed_ranks(sources, members)
    for i, (src, pairs) in enumerate(zip(sources, members, strict=True)):
        opts = replace(src.opts, seed=src.opts.seed + rank[i], resamples=first.resamples)
        draws = sw.joint_log_speedups(pairs, src.cells, opts)
        columns += [None if draws is None else draws[int(p["n"])] for p in pairs]
        points += [{"source": i + 1, **sw.sweep_point(p), **_baseline(p),
                    "one_start": _one_start(p)} for p in pairs]
        ids = dict.fromkeys(c for p in pairs for c in (p["baseline_cell"], p["cell"]))
        cells = [src.cells[c] for c in ids if c in src.cells]
        out_sources.append({
            "source": i + 1, "path": src.name, "seed": opts.seed,
            "start_spread": src.opts.start_spread is not None, **_baseline(pairs[0]),
            "n": [int(p["n"]) for p in pairs], "machines": machines(cells),
            "setup": _setup(src, pairs[0])})
    ns = sorted({int(p["n"]) for p in points})
    if len(ns) < 2:
        raise UserError(f"arm {arm!r} has one n ({ns[0]}) over {len(sources)} source(s): a "
                        "line needs two distinct n", "add a run that measured another n of "
                        "the arm (with its own baseline)")
    logs = None if any(c is None for c in columns) else np.column_stack(columns)
    level = first.level
    model = sw.cost_model(points, None, logs, level)
    if not model["fitted"]:
        raise UserError(f"no cost model of arm {arm!r}: it {model['reason']}",
                        "give runs whose cells counted drafts (a mean acceptance length)")
    with_tau, _ = sw.measured_tau(points)
    for p, q in zip(points, with_tau, strict=True):
        tau = q.get("mean_acceptance_length")
        p["tau"] = tau
        p["step_cost"] = tau / p["speedup"] if tau and p["speedup"] else None
    distinct = len({p["n"] for p in points if p["step_cost"] is not None})
    fit = {"d": model["d"], "v": model["v"], "d_ci95": model["d_ci95"],
           "v_ci95": model["v_ci95"], "level": level,
           "r2": model["r2"] if distinct >= 3 else None, "points": model["points"],
           "distinct_n": distinct, "tau_note": model["tau_note"],
           "ci_method": "per source a joint two-way (prompt x trial) bootstrap of its points' "
                        "mean log speedups, each source on its own seed (independent across "
                        "sources), the line refitted per draw over all points"
                        if model["d_ci95"] else None}
    return {"schema_version": FIT_SCHEMA, "kind": FIT_KIND, "crossbench_version": __version__,
            "arm": arm, "engine": engine or out_sources[0]["setup"]["engine"],
            "target": target, "concurrency": concurrency, "resamples": first.resamples,
            "fit": fit, "points": points, "sources": out_sources,
            "notes": _notes(points, out_sources) + _same_n_notes(points, out_sources)
            + _unmeasured_note(unmeasured),
            "warnings": _warnings(out_sources)}


def _same_n_notes(points: list[dict[str, Any]], sources: list[dict[str, Any]]) -> list[str]:
    """Per n measured on more than one machine: the step costs there and how far apart they
    are, the size of the machine difference the interval leaves out."""
    where = {s["source"]: " | ".join(machine_label(m) for m in s["machines"])
             for s in sources if s["machines"]}
    out = []
    for n in sorted({p["n"] for p in points}):
        at = [(where[p["source"]], p["source"], p["step_cost"]) for p in points
              if p["n"] == n and p["source"] in where and p.get("step_cost")]
        if len({m for m, _, _ in at}) < 2:
            continue
        costs = [c for _, _, c in at]
        out.append(f"n = {n} ran on {len({m for m, _, _ in at})} machines: C(n) "
                   + ", ".join(f"{c:.3f} (source {i})" for _, i, c in at)
                   + f" plain steps, {max(costs) / min(costs) - 1:.1%} apart: a machine "
                   "difference of that size is in no interval")
    return out


def _measured(pair: dict[str, Any]) -> bool:
    """Whether a pair has paired samples: a cell of a run cut short before its trials has
    none, and would leave the whole fit without an interval."""
    return bool((pair.get("speedup") or {}).get("n_samples"))


def _unmeasured_note(left: list[tuple[int, dict[str, Any]]]) -> list[str]:
    """The note naming the arm's cells left out for want of a measured trial."""
    if not left:
        return []
    which = ", ".join(f"source {i} n={p['n']}" for i, p in left)
    return [f"left out {len(left)} cell(s) with no measured trial ({which}): their run was "
            "cut short before them; the line and its interval rest on the other points"]


def seed_ranks(sources: list[Source], members: list[list[dict[str, Any]]]) -> list[int]:
    """Each source's offset to the bootstrap seed: its rank by when its first trial of the
    fit's cells started (the name breaking ties), so the line and its intervals do not depend
    on the order the sources are given in, and a single source keeps the analysis's seed."""
    def key(i: int) -> tuple[str, str]:
        ids = {c for p in members[i] for c in (p["baseline_cell"], p["cell"])}
        starts = [str(t.get("started_utc")) for cid in ids if cid in sources[i].cells
                  for t in (sources[i].cells[cid].manifest or {}).get("trials", [])
                  if t.get("started_utc")]
        return (min(starts) if starts else "", sources[i].name)

    order = sorted(range(len(sources)), key=key)
    return [order.index(i) for i in range(len(sources))]


def _notes(points: list[dict[str, Any]], sources: list[dict[str, Any]]) -> list[str]:
    """What the interval leaves out: one-start points, machines that differ or are unknown."""
    notes = []
    single = [p for p in points if p["one_start"]]
    if single:
        which = ", ".join(f"source {p['source']} n={p['n']}" for p in single)
        notes.append(
            f"{len(single)} of {len(points)} points rest on one server start per side "
            f"({which}): the interval "
            "leaves out how much a fresh start moves a point (seen: "
            f"{START_SPREAD_NOTE}); run their cells on 3 or more server starts (a matrix "
            "run's start-spread.json, where it has one, is used)")
    seen = {json.dumps(m, sort_keys=True) for s in sources for m in s["machines"]}
    if len(seen) > 1:
        where = "; ".join(f"source {s['source']}: "
                          + (" | ".join(machine_label(m) for m in s["machines"]) or "unknown")
                          for s in sources)
        notes.append(
            f"the points come from {len(seen)} machines ({where}): each point is in its own "
            "baseline's plain steps, so a machine's overall speed cancels, but a difference "
            "between machines in what a speculative step costs in plain steps (drafting and "
            "verifying against a plain decode step: another GPU, driver, CPU or host load) is "
            "not in the interval; it moves or bends the line. An n measured on both machines "
            "shows its size")
    unknown = [s["source"] for s in sources if not s["machines"]]
    if unknown and len(sources) > 1:
        notes.append(f"source(s) {', '.join(map(str, unknown))} record no host or GPU "
                     "identity: whether their points come from another machine is unknown")
    return notes


def _warnings(sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per :data:`SETUP_FIELDS` field whose recorded values differ between sources."""
    out = []
    for field in SETUP_FIELDS:
        values = {s["source"]: s["setup"][field] for s in sources}
        if len({json.dumps(v) for v in values.values() if v is not None}) > 1:
            shown = "; ".join(f"{k}: {str(v).splitlines()[0] if v is not None else '-'}"
                              for k, v in values.items())
            out.append({"field": field, "values": values,
                        "message": f"sources differ in {field} ({shown}): a confound of the "
                                   "cross-run line",
                        "action": f"fit runs of one {field}, or read the line as mixing them"})
    return out


def format_fit(result: dict[str, Any]) -> str:
    """The fit as text: the line with its intervals, the points, the sources, notes and
    warnings."""
    def num(x: Any, spec: str = ".3f") -> str:
        return "-" if x is None else format(x, spec)

    def ci(c: list[float] | None, spec: str) -> str:
        return f" [{num(c[0], spec)}, {num(c[1], spec)}]" if c else " (no interval)"

    f = result["fit"]
    on = result["engine"] + (f", target {result['target']}" if result.get("target") else "")
    lines = [f"cost model of {result['arm']} ({on}, c={result['concurrency']}) "
             f"over {len(result['sources'])} source(s), {f['points']} points, "
             f"n = {', '.join(map(str, sorted({p['n'] for p in result['points']})))}",
             f"C(n) = d + v n: d {num(f['d'])}{ci(f['d_ci95'], '.3f')}, v {num(f['v'], '.4f')}"
             f"{ci(f['v_ci95'], '.4f')} ({f['level']:.0%} intervals), R^2 {num(f['r2'])}"
             + ("" if f["r2"] is not None else " (needs three distinct n)"), ""]
    head = ["src", "n", "tau", "speedup", "C(n)", "base tok/s", "ms/tok", "cell"]
    lines.append(f"{head[0]:>3}  {head[1]:>3}  {head[2]:>6}  {head[3]:>7}  {head[4]:>6}  "
                 f"{head[5]:>10}  {head[6]:>6}  {head[7]}")
    for p in result["points"]:
        lines.append(f"{p['source']:>3}  {p['n']:>3}  {num(p['tau']):>6}  "
                     f"{num(p['speedup']):>7}  {num(p['step_cost']):>6}  "
                     f"{num(p['baseline_tok_s'], '.1f'):>10}  "
                     f"{num(p['baseline_ms_per_token'], '.2f'):>6}  {p['cell']}")
    lines.append("")
    for s in result["sources"]:
        where = " | ".join(machine_label(m) for m in s["machines"]) or "no host/GPU recorded"
        lines.append(f"source {s['source']}: {s['path']} (n = {', '.join(map(str, s['n']))}; "
                     f"{where})")
    if f["tau_note"]:
        lines.append(f"note: {f['tau_note']}")
    lines += [f"note: {n}" for n in result["notes"]]
    lines += [f"warning: {w['message']}; {w['action']}" for w in result["warnings"]]
    return "\n".join(lines)
