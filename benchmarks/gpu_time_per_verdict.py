"""GPU time per verdict: a naive study against crossbench's design of the same cells, both
recorded on the GPU, per engine.

The naive design is a matrix run with a fresh server per trial and every cell x trial x prompt
(`crossbench matrix`'s default). The crossbench design is the same matrix file with server
reuse (``trials_per_start``) and, for n-sweeps, probe-and-predict added (``variant`` writes
it; nothing else changes). For each engine this reads both run directories and reports:

- ``naive_gpu_s``, ``crossbench_gpu_s``: GPU-held seconds, summed over the
  engine's trials of the named phases of each trial (server start-up and stop, warm-up,
  metrics scrapes, the measured requests), plus, for probe-and-predict, the seconds its
  decisions took (``decide_s``: the GPU stays held). Time outside the named phases is left
  out of both and reported apart (``other_s``): it is harness overhead that changed between
  crossbench versions (round 1's vLLM trials spent about 20 s in it on ``vllm --version``,
  since fixed), not GPU work either design needs.
- ``calibration``: the runs a design decided with, charged in full. A crossbench run whose
  matrix names a ``start_spread:`` file (its ``start-spread.json``) used the runs that file
  was measured on (its ``sources``); each must be given (``--calibration`` or
  ``--spread-from``), matched by folder name and matrix sha256, and the GPU seconds of its
  cells of the engine kinds the file names are charged (``calibration_gpu_s``).
- ``ratio``: the full cost, (``crossbench_gpu_s`` + ``calibration_gpu_s``) /
  ``naive_gpu_s``: what a study that measures its own spread pays. ``ratio_design`` leaves
  the calibration out; ``ratio_amortised`` charges each calibration run split evenly over
  the studies of this file that declare they use it (``shared_by``), never over studies that
  do not.
- ``workload_coverage``: the prompts each measured crossbench verdict rests on against the
  naive verdict's (a design that stops a trial after 12 of 48 prompts covers 12):
  ``naive_prompts``, ``crossbench_prompts`` as [min, max] over measured cells, and
  ``cells_full`` of ``cells_measured`` with every prompt the naive verdict had.
- ``verdicts_total``, ``verdicts_same``, ``verdicts_flipped`` (faster <-> slower: must be 0),
  ``verdicts_conservative`` (naive decisive, crossbench not: allowed only inside the
  equivalence band, else counted in ``verdicts_lost``), ``verdicts_bolder`` (crossbench
  decisive where naive was not). A predicted cell's verdict is its prediction's.
  ``verdicts_one_start``: measured crossbench verdicts whose trials all ran on one server
  start per side: one reused start (the analysis's ``single_start`` warning) or, in a design
  with a fresh server per trial, one trial (its ``single_trial`` warning); either way their
  interval leaves out start-to-start variation unless a known spread is joined to it;
  ``verdicts_starts_disagree``: measured crossbench verdicts whose starts, each taken as one
  sample (``start_ci95``, Student's t), give an interval that holds 1 (the analysis's
  ``starts_disagree`` warning); ``verdicts_host_bound``: measured crossbench verdicts whose
  speculative arm's GPU waited on the host more than half its measured time (the analysis's
  ``host_bound`` warning; each cell's ``spec_host_ms_per_token`` and
  ``baseline_host_ms_per_token`` give that wait per output token over its trials as [min,
  max], in both runs, so a verdict that changed between machines can be set beside how much
  slower one machine's host was). ``meets_target``: the full-cost ``ratio`` <= 0.3 with no
  verdict flipped, lost or bolder (the issue's "the same or more conservative");
  ``meets_target_amortised`` the same with ``ratio_amortised``.
- The naive run may cover a subset of the crossbench run's cells (a naive design too costly
  to run whole): verdicts are compared on the cells both ran (``crossbench_only`` lists the
  rest), while the crossbench run's GPU time is counted in full, its extra cells too. A
  naive study too costly for one session may be several runs that cover different cells
  (each cell's baseline and speculative trials in one run, so each pair stays on one
  machine): their GPU seconds add up, and ``naive_run`` lists them.
- ``prediction_checks``: probe-and-predict's measured follow-ups and holdouts against their
  predictions (inside the predicted interval, same verdict).
- ``reuse_bias``: for the cells both designs measured, the ratio of the crossbench design's
  trial decode rates (reused servers) to the naive design's (fresh servers), per cell and
  pooled, with 95 % bootstrap intervals. The designs ran one after the other, not
  interleaved: drift over the session is in this ratio too.
- ``start_spread``: for each cell of the naive run, the range and coefficient of variation of
  its trials' decode rates, each trial a fresh server start: how far one start can be from
  another, which a design of one start per cell cannot see.
- ``with_start_spread`` (with ``--spread-from``): the crossbench run analysed again with the
  known start spread (``crossbench analyze --start-spread``, docs/analysis.md), measured on
  the ``--spread-from`` runs other than the study's own naive runs (so the naive design the
  verdicts are checked against never calibrates them): its verdict counts and
  ``meets_target`` as above, ``verdicts_decisive``, and ``naive_inside`` (of
  ``naive_inside_of`` measured cells): how many of its intervals hold the naive design's
  speedup, against ``naive_inside_bootstrap`` for the bootstrap intervals alone. A predicted
  cell keeps the interval its prediction had when the run decided it (the runner decides
  without a start spread). The naive verdicts stay the bootstrap's. Its verdicts need the
  calibration runs too: their cells of the study's engine kinds are charged (with the
  design's own calibration, each run once) in its ``ratio``, ``ratio_amortised`` and
  ``meets_target``.

A study is named by its engine id, or ``NAME=ENGINE_ID`` when one engine has several (the
same naive run against two crossbench runs of different crossbench versions).

``planned`` is for a crossbench run with no naive counterpart (its naive design would cost
too much GPU time to run, e.g. 18 vLLM starts): it reports the run's measured GPU seconds and
verdicts against the naive design's GPU time as ``crossbench plan`` costs it from recorded
timings (``naive_planned_gpu_s``: planned, not measured; ``ratio_planned``), in its own file.

Commands::

    python benchmarks/gpu_time_per_verdict.py variant matrices/h200-verdict.yaml OUT.yaml \\
        --trials-per-start 3 --probes 3 --holdout 1
    python benchmarks/gpu_time_per_verdict.py compute \\
        --study [NAME=]ENGINE_ID NAIVE_RUN[,NAIVE_RUN...] CROSSBENCH_RUN [--study ...] \\
        [--spread-from RUN ...] [--calibration RUN ...] [--min-samples 10] [--band 0.05] \\
        [--out benchmarks/results/gpu-time-per-verdict.json]
    python benchmarks/gpu_time_per_verdict.py planned ENGINE_ID RUN --from RECORDED ... \\
        [--out benchmarks/results/gpu-time-per-verdict-planned.json]

Runs of a stand-in engine are refused (their figures are not an engine's).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from crossbench.analysis.analyze import analyze
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.start_spread import StartSpread, run_start_spread
from crossbench.analysis.start_spread import measure as measure_spread
from crossbench.runner.matrix_run import read_state
from crossbench.store.rundir import read_predictions

OUT = Path(__file__).parent / "results" / "gpu-time-per-verdict.json"
PLANNED_OUT = Path(__file__).parent / "results" / "gpu-time-per-verdict-planned.json"
NAMED = ("startup", "stop", "warmup", "scrape_write", "measured")
"""The phases of a trial that hold the GPU for the measurement's sake."""
DECISIVE = ("faster", "slower")
TARGET_RATIO = 0.3
"""The issue's bar: at most this share of the naive GPU time, with every verdict the same as
the naive design's or more conservative (no flipped, lost or bolder verdict)."""


def variant(src: Path, dst: Path, trials_per_start: int, probes: int | None,
            holdout: int, trials: int | None = None, requests: int | None = None,
            max_tokens: int | None = None, seed: int | None = None,
            baselines_first: bool = False, requests_per_concurrency: int | None = None,
            own_starts: bool = False) -> None:
    """Write the crossbench design of the naive matrix ``src``: server reuse and, with
    ``probes``, probe-and-predict; with ``trials``, that many trials per cell (so
    ``trials / trials_per_start`` starts per server group); with ``requests`` and
    ``max_tokens``, the load's (longer requests give the decode-only telemetry window room:
    docs/analysis.md); with ``seed``, the schedule's shuffle seed (a seed that runs the
    baseline's start first keeps a round cut short by the lease analysable); with
    ``baselines_first``, every interleaved round runs its baseline cells first (the matrix's
    ``schedule.baselines_first``: a lease cut short keeps each finished trial's baseline in
    every round, not only the first); with ``requests_per_concurrency``, the load's requests
    per concurrent slot above c=1; with ``own_starts``, no two cells share a server start
    (``share_servers: false``: a method whose drafts outlive a trial, such as llama-server's
    ngram-mod, sees only its own cell's requests); every other line of the study stays as it
    was."""
    doc = yaml.safe_load(src.read_text())
    doc["trials_per_start"] = trials_per_start
    if trials is not None:
        doc["trials"] = trials
    load = {"requests": requests, "max_tokens": max_tokens,
            "requests_per_concurrency": requests_per_concurrency}
    doc["load"] = {**doc.get("load", {}), **{k: v for k, v in load.items() if v is not None}}
    if own_starts:
        doc["share_servers"] = False
    if seed is not None:
        doc["schedule"] = {**doc.get("schedule", {}), "seed": seed}
    if baselines_first:
        doc["schedule"] = {**doc.get("schedule", {}), "baselines_first": True}
    if probes is not None:
        doc["probe_predict"] = {"probes": probes, "holdout": holdout, "seed": 0}
    doc["study"]["name"] = f"{doc['study']['name']}-crossbench"
    doc["study"]["notes"] = (f"{doc['study'].get('notes', '').strip()} Crossbench design of "
                             f"{src.name}: trials_per_start {trials_per_start}"
                             + (f", trials {trials}" if trials is not None else "")
                             + "".join(f", {k} {v}" for k, v in load.items() if v is not None)
                             + (f", schedule seed {seed}" if seed is not None else "")
                             + (", baselines first" if baselines_first else "")
                             + (", own starts per cell" if own_starts else "")
                             + (f", probe_predict probes {probes} holdout {holdout}"
                                if probes is not None else "") + ".")
    dst.write_text(yaml.safe_dump(doc, sort_keys=False))


def gpu_seconds(run: Path, engine: str | None, kinds: set[str] | None = None) -> dict[str, Any]:
    """GPU-held seconds of the cells of engine id ``engine`` in a matrix run (module
    docstring), with trial counts, server starts and the time outside the named phases;
    with ``engine`` None, of the cells whose engine kind is in ``kinds`` (a calibration
    run's)."""
    state = read_state(run, ("cells",))
    ids = {c["id"] for c in state["cells"] if engine is None or c["coords"]["engine"] == engine}
    decide = {r.get("decide_s") for cid, r in read_predictions(run).items() if cid in ids}
    row: dict[str, Any] = {"gpu_s": 0.0, "other_s": 0.0, "trials": 0, "starts": 0}
    for c in state["cells"]:
        path = run / c["dir"] / "manifest.json"
        if c["id"] not in ids or not path.exists():
            continue
        man = json.loads(path.read_text())
        if kinds is not None and str(man["config"].get("engine")) not in kinds:
            continue
        if (man.get("engine") or {}).get("standin") is True:
            raise SystemExit(f"{path}: a stand-in engine's run; its times are not an engine's")
        for t in man["trials"]:
            ph = t.get("phase_s") or {}
            named = sum(float(ph.get(k) or 0.0) for k in NAMED)
            row["gpu_s"] += named
            row["other_s"] += max(0.0, float(ph.get("total") or named) - named)
            row["trials"] += 1
            row["starts"] += 1 if float(ph.get("startup") or 0.0) > 0 else 0
    if not row["trials"] and engine is not None:
        raise SystemExit(f"{run}: no trial of engine {engine or sorted(kinds or ())!r}")
    row["decide_s"] = sum(float(d) for d in decide if d is not None)
    row["gpu_s"] += row["decide_s"]
    return row


def verdicts(run: Path, engine: str, result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Verdict of every speculative cell of engine id ``engine`` by cell id: the analysis's
    (``result``, the run's) for measured cells, the prediction's for predicted ones."""
    host = {c["cell"]: host_ms(c.get("host_time")) for c in result["cells"]}
    got = {p["cell"]: {"verdict": p["verdict"], "speedup": p["speedup"]["geomean"],
                       "ci95": p["speedup"]["ci95"], "source": "measured",
                       "one_start": one_start(p["speedup"]),
                       "prompts": p["speedup"].get("n_prompts"),
                       "start_ci95": p["speedup"].get("start_ci95"),
                       "bootstrap_ci95": (p["speedup"].get("start_prior") or {}).get(
                           "bootstrap_ci95", p["speedup"]["ci95"]),
                       "starts_disagree": any(w["kind"] == "starts_disagree"
                                              for w in p.get("warnings") or []),
                       "host_bound": any(w["kind"] == "host_bound"
                                         for w in p.get("warnings") or []),
                       "spec_host_ms_per_token": host.get(p["cell"]),
                       "baseline_host_ms_per_token": host.get(p["baseline_cell"])}
           for p in result["pairs"] if p["engine"] == engine}
    state = read_state(run, ("cells",))
    ids = {c["id"] for c in state["cells"] if c["coords"]["engine"] == engine}
    for cid, d in read_predictions(run).items():
        if d.get("action") == "predict" and cid in ids:
            p = d["predicted"]
            got[cid] = {"verdict": p["verdict"], "speedup": p["speedup"], "ci95": p["ci95"],
                        "source": "predicted"}
    return got


def one_start(speedup: dict[str, Any]) -> bool:
    """Whether a pair's verdict rests on one server start per side: one reused start
    (``n_server_starts``), or, where every trial had a fresh server (no
    ``n_server_starts``), one trial."""
    starts = speedup.get("n_server_starts")
    return (starts if starts is not None else speedup.get("n_trials")) == 1


def host_ms(fig: dict[str, Any] | None) -> list[float] | None:
    """A cell's host milliseconds per output token over its trials as [min, max] (the
    analysis's ``host_time``), or None without GPU telemetry."""
    if not fig:
        return None
    h = fig["host_ms_per_token"]
    return [round(h["min"], 2), round(h["max"], 2)]


def classify(naive: dict[str, Any], ours: dict[str, Any], band: float) -> str:
    """How the crossbench design's verdict of a cell relates to the naive one's."""
    a, b = naive["verdict"], ours["verdict"]
    if a == b:
        return "same"
    if {a, b} == set(DECISIVE):
        return "flipped"
    if a in DECISIVE and b not in DECISIVE:
        g = naive.get("speedup")
        inside = g is not None and abs(math.log(g)) <= math.log1p(band)
        return "conservative" if inside else "lost"
    if b in DECISIVE and a not in DECISIVE:
        return "bolder"
    return "same"  # two undecided verdicts of different wording (e.g. too few samples)


def trial_rates(run: Path, engine: str) -> dict[str, list[float]]:
    """Pooled decode rate of every ok trial of engine id ``engine`` by cell id."""
    state = read_state(run, ("cells",))
    out: dict[str, list[float]] = {}
    for c in state["cells"]:
        path = run / c["dir"] / "manifest.json"
        if path.exists() and c["coords"]["engine"] == engine:
            man = json.loads(path.read_text())
            out[c["id"]] = [float(t["load"]["pooled_tok_s"]) for t in man["trials"]
                            if t["status"] == "ok" and (t.get("load") or {}).get("pooled_tok_s")]
    return out


def merged(parts: list[dict[str, Any]], runs: list[Path], what: str) -> dict[str, Any]:
    """The union of per-cell dicts of several naive runs, which must not share a cell."""
    out: dict[str, Any] = {}
    seen: dict[str, Path] = {}
    for part, run in zip(parts, runs, strict=True):
        for cid, value in part.items():
            if cid in seen:
                raise SystemExit(f"{what}: cell {cid} is in both {seen[cid]} and {run}; the "
                                 "naive runs of one study must cover different cells")
            seen[cid] = run
            out[cid] = value
    return out


def start_spread(fresh: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """How far the fresh server starts of each naive cell lie apart (``fresh``: each cell's
    trial decode rates, a fresh start each): their range and coefficient of variation, by
    cell id (module docstring)."""
    out = {}
    for cid, rates in sorted(fresh.items()):
        if len(rates) >= 2:
            out[cid] = {"starts": len(rates), "min_tok_s": round(min(rates), 1),
                        "max_tok_s": round(max(rates), 1),
                        "cv": round(float(np.std(rates, ddof=1) / np.mean(rates)), 3)}
    return out


def reuse_bias(a: dict[str, list[float]], b: dict[str, list[float]],
               seed: int = 0) -> dict[str, Any]:
    """Reused (``b``, the crossbench run's) / fresh (``a``, the naive runs') trial decode rates
    by cell id, of the cells both measured (module docstring)."""
    g = np.random.default_rng(seed)
    cells, logs_a, logs_b = [], [], []
    for cid in sorted(set(a) & set(b)):
        if len(a[cid]) < 2 or len(b[cid]) < 2:
            continue
        la, lb = np.log(a[cid]), np.log(b[cid])
        draws = (g.choice(lb, (10_000, lb.size)).mean(1) -
                 g.choice(la, (10_000, la.size)).mean(1))
        lo, hi = np.quantile(draws, [0.025, 0.975])
        cells.append({"cell": cid, "ratio": float(np.exp(lb.mean() - la.mean())),
                      "ci95": [float(np.exp(lo)), float(np.exp(hi))],
                      "fresh_trials": len(la), "reused_trials": len(lb)})
        logs_a.append(la)
        logs_b.append(lb)
    if not cells:
        return {"cells": [], "pooled": None}
    k = len(cells)
    pooled = []
    for _ in range(2000):  # resample trials within each cell and design, then cells
        pick = g.integers(0, k, k)
        pooled.append(np.mean([g.choice(logs_b[i], logs_b[i].size).mean() -
                               g.choice(logs_a[i], logs_a[i].size).mean() for i in pick]))
    lo, hi = np.quantile(pooled, [0.025, 0.975])
    point = float(np.exp(np.mean([lb.mean() - la.mean()
                                  for la, lb in zip(logs_a, logs_b, strict=True)])))
    return {"cells": cells, "pooled": {"ratio": point, "ci95": [float(np.exp(lo)),
                                                                float(np.exp(hi))],
                                       "cells": k}}


def run_id(run: Path) -> dict[str, Any]:
    """What identifies a run wherever it was unpacked: its folder name, study and the sha256
    of the matrix file it ran."""
    state = read_state(run, ("cells",))
    return {"dir": run.name, "study": state.get("study"),
            "matrix_sha256": state.get("matrix_sha256")}


def counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    """How many cells of ``rows`` fall in each relation of :func:`classify`."""
    return {k: sum(1 for r in rows if r["relation"] == k)
            for k in ("same", "flipped", "conservative", "lost", "bolder")}


def inside(naive: dict[str, Any], ci: list[float] | None) -> bool | None:
    """Whether a measured interval holds the naive design's speedup (None: no interval)."""
    g = naive.get("speedup")
    return None if ci is None or g is None else ci[0] <= g <= ci[1]


def charges(spread: StartSpread, pool: list[Path], kinds: set[str],
            what: str) -> list[dict[str, Any]]:
    """The calibration runs a start spread was measured on (its ``sources``), found in
    ``pool`` by folder name and matrix sha256, with the GPU seconds of their cells of the
    engine kinds in ``kinds`` that the spread measured (module docstring)."""
    if not spread.sources:
        raise SystemExit(f"{what}: its start spread names no source runs, so its "
                         "calibration cannot be charged; make it with `crossbench "
                         "start-spread RUN... -o FILE`")
    ids = {(rid["dir"], rid["matrix_sha256"]): r for r in pool for rid in [run_id(r)]}
    out = []
    for src in spread.sources:
        used = set(src.get("engines") or {}) & kinds
        if not used:
            continue
        run = ids.get((src.get("dir"), src.get("matrix_sha256")))
        if run is None:
            raise SystemExit(f"{what}: decided with the start spread measured on run "
                             f"{src.get('dir')} (study {src.get('study')}); give that run "
                             "with --calibration RUN so its GPU time is charged")
        t = gpu_seconds(run, None, used)
        out.append({**run_id(run), "engines": sorted(used), "gpu_s": t["gpu_s"],
                    "trials": t["trials"], "starts": t["starts"]})
    return out


def charge_key(row: dict[str, Any]) -> str:
    """One calibration run's cells of some engine kinds: the unit shared between studies."""
    return f"{row['dir']}@{row['matrix_sha256']}:{','.join(row['engines'])}"


def union(*rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Calibration charges of several lists, each run and engine kinds once."""
    seen: dict[str, dict[str, Any]] = {}
    for part in rows:
        for r in part:
            seen.setdefault(charge_key(r), dict(r))  # a copy: each list is amortised apart
    return list(seen.values())


def costs(crossbench_gpu_s: float, naive_gpu_s: float,
          calibration: list[dict[str, Any]]) -> dict[str, Any]:
    """The full-cost figures of a design with its calibration runs charged in full; the
    amortised ones are filled in by :func:`amortise` once every study is known."""
    cal = sum(r["gpu_s"] for r in calibration)
    return {"calibration": {"runs": calibration, "gpu_s": cal,
                            "crossbench_gpu_s": crossbench_gpu_s, "naive_gpu_s": naive_gpu_s},
            "calibration_gpu_s": round(cal, 1),
            "ratio": round((crossbench_gpu_s + cal) / naive_gpu_s, 3),
            "ratio_design": round(crossbench_gpu_s / naive_gpu_s, 3)}


def clean(count: dict[str, int]) -> bool:
    """No verdict flipped, lost or bolder: the target's verdict half."""
    return not any(count[k] for k in ("flipped", "lost", "bolder"))


def amortise(studies: dict[str, dict[str, Any]]) -> None:
    """Each calibration run's GPU seconds split evenly over the studies of this file that
    declare they use it (design calibrations and the known-spread analyses counted apart):
    ``shared_by``, ``ratio_amortised`` and ``meets_target_amortised``."""
    def fill(rows: list[dict[str, Any]]) -> None:
        users = Counter(charge_key(c) for row in rows for c in row["calibration"]["runs"])
        for row in rows:
            cal = row["calibration"]
            for c in cal["runs"]:
                c["shared_by"] = users[charge_key(c)]
            cal["amortised_gpu_s"] = sum(c["gpu_s"] / c["shared_by"] for c in cal["runs"])
            row["ratio_amortised"] = round((cal["crossbench_gpu_s"] + cal["amortised_gpu_s"])
                                           / cal["naive_gpu_s"], 3)
            row["meets_target_amortised"] = (row["ratio_amortised"] <= TARGET_RATIO
                                             and row["verdicts_clean"])
    fill(list(studies.values()))
    fill([s["with_start_spread"] for s in studies.values() if s["with_start_spread"]])


def with_spread(engine: str, naive: list[Path], ours: Path, opts: StatsOptions,
                band: float, va: dict[str, dict[str, Any]], gpu: tuple[float, float],
                calibration: list[Path], design: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The crossbench design's verdicts with the known start spread (module docstring),
    measured on the ``calibration`` runs other than this study's naive ones, whose GPU
    seconds are charged with the design's own calibration runs (``design``; ``gpu``: the
    crossbench and naive GPU seconds); None when none is left."""
    own = {r.resolve() for r in naive}
    runs = [r for r in calibration if r.resolve() not in own]
    if not runs:
        return None
    known = measure_spread(runs)
    kinds = used_engines(ours, engine)
    charged = union(design, charges(known, runs, kinds, engine))
    vb = verdicts(ours, engine, analyze(ours, replace(opts, start_spread=known)))
    rows = []
    for cid in sorted(va):
        ours_v = vb[cid]
        rows.append({"cell": cid, "verdict": ours_v["verdict"], "ci95": ours_v["ci95"],
                     "bootstrap_ci95": ours_v.get("bootstrap_ci95"),
                     "source": ours_v["source"],
                     "relation": classify(va[cid], ours_v, band),
                     "naive_inside": inside(va[cid], ours_v["ci95"]),
                     "naive_inside_bootstrap": inside(va[cid], ours_v.get("bootstrap_ci95"))})
    count = counts(rows)
    measured = [r for r in rows if r["source"] == "measured" and r["naive_inside"] is not None]
    cost = costs(gpu[0], gpu[1], charged)
    return {"calibration_runs": [run_id(r) for r in runs], **cost,
            "verdicts_clean": clean(count),
            "spreads": [s.to_dict() for s in known.spreads if s.engine in kinds],
            "verdicts_same": count["same"], "verdicts_flipped": count["flipped"],
            "verdicts_conservative": count["conservative"], "verdicts_lost": count["lost"],
            "verdicts_bolder": count["bolder"],
            "verdicts_decisive": sum(1 for r in rows if r["verdict"] in DECISIVE),
            "meets_target": cost["ratio"] <= TARGET_RATIO and clean(count),
            "naive_inside": sum(1 for r in measured if r["naive_inside"]),
            "naive_inside_bootstrap": sum(1 for r in measured if r["naive_inside_bootstrap"]),
            "naive_inside_of": len(measured),
            "cells": rows}


def used_engines(run: Path, engine: str) -> set[str]:
    """The engine kinds (``llama-server``, ``vllm``) of engine id ``engine``'s cells."""
    state = read_state(run, ("cells",))
    out = set()
    for c in state["cells"]:
        path = run / c["dir"] / "manifest.json"
        if path.exists() and c["coords"]["engine"] == engine:
            out.add(str(json.loads(path.read_text())["config"].get("engine")))
    return out


def study(engine: str, naive: list[Path], ours: Path, opts: StatsOptions,
          band: float, calibration: list[Path] | None = None,
          charged: list[Path] | None = None) -> dict[str, Any]:
    """One engine's comparison (module docstring): ``engine`` is its id in every matrix;
    ``naive``: one naive run, or several that cover different cells; ``calibration``: runs
    to measure the known start spread on (``with_start_spread``); ``charged``: further runs
    that a design's own start spread may have been measured on (``calibration``)."""
    times = [gpu_seconds(r, engine) for r in naive]
    ta = {k: sum(t[k] for t in times) for k in times[0]}
    tb = gpu_seconds(ours, engine)
    analysed = analyze(ours, opts)  # once: verdicts and prediction checks read it
    va = merged([verdicts(r, engine, analyze(r, opts)) for r in naive], naive, engine)
    vb = verdicts(ours, engine, analysed)
    fresh = merged([trial_rates(r, engine) for r in naive], naive, engine)
    if not set(va) <= set(vb):
        raise SystemExit(f"{engine}: the naive run has speculative cells the crossbench run "
                         f"lacks: {sorted(set(va) - set(vb))}")
    rows = [{"cell": cid, "naive": va[cid], "crossbench": vb[cid],
             "relation": classify(va[cid], vb[cid], band)} for cid in sorted(va)]
    count = counts(rows)
    ids = [run_id(r) for r in naive]
    spread = run_start_spread(ours)
    design = [] if spread is None else charges(
        spread, [*(charged or []), *(calibration or [])], used_engines(ours, engine),
        f"{engine}: {ours.name}")
    cost = costs(tb["gpu_s"], ta["gpu_s"], design)
    return {"engine": engine, "naive_run": ids[0] if len(ids) == 1 else ids,
            "crossbench_run": run_id(ours),
            "naive_gpu_s": round(ta["gpu_s"], 1), "crossbench_gpu_s": round(tb["gpu_s"], 1),
            **cost, "naive": ta, "crossbench": tb,
            "meets_target": cost["ratio"] <= TARGET_RATIO and clean(count),
            "verdicts_clean": clean(count),
            "workload_coverage": coverage(rows),
            "verdicts_total": len(rows), "verdicts_same": count["same"],
            "verdicts_flipped": count["flipped"],
            "verdicts_conservative": count["conservative"], "verdicts_lost": count["lost"],
            "verdicts_bolder": count["bolder"],
            "verdicts_one_start": sum(1 for r in rows if r["crossbench"].get("one_start")),
            "verdicts_starts_disagree": sum(1 for r in rows
                                            if r["crossbench"].get("starts_disagree")),
            "verdicts_host_bound": sum(1 for r in rows if r["crossbench"].get("host_bound")),
            "cells": rows,
            "crossbench_only": sorted(set(vb) - set(va)),
            "reuse_bias": reuse_bias(fresh, trial_rates(ours, engine)),
            "start_spread": start_spread(fresh),
            "prediction_checks": prediction_checks(ours, engine, analysed),
            "with_start_spread": with_spread(engine, naive, ours, opts, band, va,
                                             (tb["gpu_s"], ta["gpu_s"]), calibration or [],
                                             design)}


def coverage(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The prompts the measured crossbench verdicts rest on against the naive ones' (module
    docstring, ``workload_coverage``)."""
    measured = [r for r in rows if r["crossbench"]["source"] == "measured"
                and r["crossbench"].get("prompts") is not None]
    if not measured:
        return {"naive_prompts": None, "crossbench_prompts": None, "cells_full": 0,
                "cells_measured": 0}
    ours = [r["crossbench"]["prompts"] for r in measured]
    naive = [r["naive"].get("prompts") or 0 for r in measured]
    return {"naive_prompts": max(naive), "crossbench_prompts": [min(ours), max(ours)],
            "cells_full": sum(1 for a, b in zip(naive, ours, strict=True) if b >= a),
            "cells_measured": len(measured)}


def prediction_checks(run: Path, engine: str, result: dict[str, Any]) -> dict[str, Any] | None:
    """Probe-and-predict's measured cells against their predictions (``result``'s
    ``predictions`` section, this engine's cells), or None without probe-and-predict."""
    checks = result.get("predictions")
    if checks is None:
        return None
    state = read_state(run, ("cells",))
    ids = {c["id"] for c in state["cells"] if c["coords"]["engine"] == engine}
    rows = [r for r in checks["cells"] if r["cell"] in ids]
    held = [r for r in rows if r["action"] == "holdout" and r["measured"] is not None]
    return {"cells": rows, "holdouts": len(held),
            "holdouts_inside": sum(1 for r in held if r["inside"]),
            "holdouts_verdict_agrees": sum(1 for r in held if r["verdict_agrees"])}


def planned(engine: str, run: Path, recorded: list[Path], opts: StatsOptions) -> dict[str, Any]:
    """A crossbench run's measured GPU seconds and verdicts against the naive design of its
    matrix as planned from ``recorded`` runs' timings (module docstring)."""
    from crossbench.runner.matrix import expand, load_matrix
    from crossbench.runner.plan import PlanOptions, make_plan, read_recorded
    from crossbench.store.rundir import MATRIX_FILE

    ours = gpu_seconds(run, engine)
    matrix_file = run / MATRIX_FILE
    m = load_matrix(matrix_file)
    cells = [c for c in expand(m, matrix_file) if c.coords["engine"] == engine]
    plan = make_plan(m, cells, read_recorded(recorded),
                     PlanOptions(block=m.block, share=m.share_servers))
    naive = next(r for r in plan.rows if (r.design, r.engine) == ("naive", engine))
    result = analyze(run, opts)
    return {"engine": engine, "crossbench_run": run_id(run),
            "crossbench_gpu_s": round(ours["gpu_s"], 1), "crossbench": ours,
            "naive_planned_gpu_s": round(naive.gpu_s, 1),
            "naive_planned_starts": naive.server_starts,
            "ratio_planned": round(ours["gpu_s"] / naive.gpu_s, 3),
            "naive": "planned by `crossbench plan` from the timings of the runs in "
                     "timings_from, not run",
            "timings_from": [Path(p).name for p in recorded],
            "timings": plan.to_dict()["timings"],
            "verdicts": {cid: {k: v[k] for k in ("verdict", "speedup", "ci95")}
                         for cid, v in verdicts(run, engine, result).items()}}


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("variant", help="write the crossbench design of a naive matrix")
    v.add_argument("src", type=Path)
    v.add_argument("dst", type=Path)
    v.add_argument("--trials-per-start", type=int, default=3)
    v.add_argument("--probes", type=int, default=None)
    v.add_argument("--holdout", type=int, default=1)
    v.add_argument("--trials", type=int, default=None,
                   help="trials per cell (default: the matrix's own)")
    v.add_argument("--requests", type=int, default=None,
                   help="measured requests per cell at c=1 (the load's requests)")
    v.add_argument("--max-tokens", type=int, default=None,
                   help="tokens per request (the load's max_tokens)")
    v.add_argument("--seed", type=int, default=None,
                   help="the schedule's shuffle seed (the order of the server starts)")
    v.add_argument("--baselines-first", action="store_true",
                   help="every interleaved round runs its baseline cells first")
    v.add_argument("--requests-per-concurrency", type=int, default=None,
                   help="measured requests per concurrent slot above c=1 (the load's "
                   "requests_per_concurrency)")
    v.add_argument("--own-starts", action="store_true",
                   help="no two cells share a server start (share_servers: false)")
    c = sub.add_parser("compute", help="compare recorded runs")
    c.add_argument("--study", nargs=3, action="append", required=True,
                   metavar=("[NAME=]ENGINE_ID", "NAIVE_RUN[,NAIVE_RUN...]", "CROSSBENCH_RUN"),
                   help="an engine id of the matrices (named NAME in the output), the naive "
                   "run directory (or several, comma-separated, that cover different cells) "
                   "and the crossbench one")
    c.add_argument("--min-samples", type=int, default=10,
                   help="pairs a verdict needs (the analysis's --min-samples)")
    c.add_argument("--band", type=float, default=0.05,
                   help="equivalence band: a lost verdict is allowed where the naive "
                   "speedup lies within 1 +- band")
    c.add_argument("--spread-from", type=Path, action="append", default=[],
                   metavar="RUN", help="a run with several fresh starts per cell to measure "
                   "the known start spread on (repeatable); each study uses those that are "
                   "not its own naive runs (with_start_spread)")
    c.add_argument("--calibration", type=Path, action="append", default=[],
                   metavar="RUN", help="a run a crossbench design's start_spread file was "
                   "measured on (repeatable; --spread-from runs count too): its GPU time is "
                   "charged to the studies that decided with it")
    c.add_argument("--out", type=Path, default=OUT)
    pl = sub.add_parser("planned", help="a crossbench run against its planned naive design")
    pl.add_argument("engine", metavar="ENGINE_ID")
    pl.add_argument("run", type=Path)
    pl.add_argument("--from", dest="recorded", type=Path, action="append", required=True,
                    help="a run or archive whose trials' phases give the plan's timings")
    pl.add_argument("--min-samples", type=int, default=10)
    pl.add_argument("--out", type=Path, default=PLANNED_OUT)
    args = ap.parse_args(argv)
    if args.cmd == "variant":
        variant(args.src, args.dst, args.trials_per_start, args.probes, args.holdout,
                args.trials, args.requests, args.max_tokens, args.seed, args.baselines_first,
                args.requests_per_concurrency, args.own_starts)
        return 0
    opts = StatsOptions(min_samples=args.min_samples)
    if args.cmd == "planned":
        row = planned(args.engine, args.run, args.recorded, opts)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"benchmark": "gpu-time-per-verdict-planned",
                                        "options": {"min_samples": args.min_samples},
                                        "studies": {args.engine: row}}, indent=2) + "\n")
        print(f"{args.engine}: crossbench {row['crossbench_gpu_s']:.0f} s measured, naive "
              f"{row['naive_planned_gpu_s']:.0f} s planned (not run), ratio "
              f"{row['ratio_planned']:.3f}")
        return 0
    studies = {}
    for spec, a, b in args.study:
        name, _, engine = spec.rpartition("=")
        studies[name or engine] = study(engine, [Path(r) for r in a.split(",")], Path(b),
                                        opts, args.band, args.spread_from, args.calibration)
    amortise(studies)
    doc = {"benchmark": "gpu-time-per-verdict",
           "target": f"ratio <= {TARGET_RATIO} (full cost: calibration runs charged), no "
                     "verdict flipped, lost or bolder",
           "options": {"min_samples": args.min_samples, "band": args.band,
                       "gpu_s": "sum of the named trial phases " + ", ".join(NAMED)
                                + " plus probe-and-predict decision time",
                       "spread_from": [run_id(r)["dir"] for r in args.spread_from],
                       "calibration": [run_id(r)["dir"] for r in args.calibration]},
           "studies": studies}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    for name, s in studies.items():
        cov = s["workload_coverage"]
        print(f"{name}: naive {s['naive_gpu_s']:.0f} s, crossbench {s['crossbench_gpu_s']:.0f} "
              f"s + calibration {s['calibration_gpu_s']:.0f} s, ratio {s['ratio']:.3f} "
              f"(design alone {s['ratio_design']:.3f}, calibration amortised "
              f"{s['ratio_amortised']:.3f}); prompts per verdict {cov['crossbench_prompts']} "
              f"of {cov['naive_prompts']}; verdicts {s['verdicts_total']}: same "
              f"{s['verdicts_same']}, flipped {s['verdicts_flipped']}, conservative "
              f"{s['verdicts_conservative']}, lost {s['verdicts_lost']}, bolder "
              f"{s['verdicts_bolder']} ({s['verdicts_one_start']} on one server start, "
              f"{s['verdicts_starts_disagree']} with disagreeing starts, "
              f"{s['verdicts_host_bound']} host-bound); "
              f"target {'met' if s['meets_target'] else 'not met'}")
        w = s["with_start_spread"]
        if w:
            print(f"  with the known start spread: same {w['verdicts_same']}, flipped "
                  f"{w['verdicts_flipped']}, conservative {w['verdicts_conservative']}, lost "
                  f"{w['verdicts_lost']}, bolder {w['verdicts_bolder']} ({w['verdicts_decisive']} "
                  f"decisive); the naive speedup inside {w['naive_inside']} of "
                  f"{w['naive_inside_of']} measured intervals (bootstrap alone "
                  f"{w['naive_inside_bootstrap']}); ratio {w['ratio']:.3f} with calibration "
                  f"{w['calibration_gpu_s']:.0f} s (amortised {w['ratio_amortised']:.3f}); target "
                  f"{'met' if w['meets_target'] else 'not met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
