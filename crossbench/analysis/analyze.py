"""``crossbench analyze``: a run directory -> ``analysis.json`` and tables, from raw records.

The object holds ``cells`` (per cell: throughput, latency, per-trial rates, acceptance,
``host_time``), ``pairs`` (each speculative cell against its baseline: speedups with verdicts,
acceptance, per-category speedups, output parity, the pair's warnings), ``sweeps``
(``sweep.py``), ``stability`` (every warning, ``stability.py``) and, for a matrix run with
``probe_predict:``, ``predictions`` (``sweep.prediction_checks``). The tables go to
``RUN_DIR/analysis/`` as Markdown and CSV (docs/analysis.md).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from crossbench import __version__
from crossbench.analysis import host_time, paired, parity, stability, start_spread, stats, sweep
from crossbench.analysis.confounding import confounds
from crossbench.analysis.metrics import token_itl_ms
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.rundir import COORDS, CellData, RunData, load_run, paused_gc
from crossbench.analysis.stability import Finding, WarningKind
from crossbench.analysis.stats import cv
from crossbench.analysis.summary import dist, summarize_records
from crossbench.store import rundir

MIN_PROMPT_CLUSTERS = 10
"""Fewest prompts (bootstrap clusters) below which an interval is flagged as optimistic."""

START_SPREAD_NOTE = ("113-233 tok/s over six fresh starts of one vLLM 0.26.0 draft_model cell "
                     "on H200s, its baseline 134-156 tok/s")
"""How far fresh server starts of one cell were seen apart, quoted by the ``single_start``
warning (re-derived from the archived naive runs by tests/test_gpu_time_per_verdict.py)."""
ONE_START = "one server start per side"
"""The words the ``single_start`` warning and its verdict caveat share."""
STARTS_DISAGREE_NOTE = ("the server starts disagree: with each start as one sample the "
                        "interval holds 1")
"""The words the ``starts_disagree`` verdict caveat and the verdict table's footnote share."""
KNOWN_SPREAD_NOTE = "the known start spread widened the interval"
"""The words of the verdict caveat of a verdict the start spread made more conservative."""
BORROWED_SPREAD_NOTE = "the start spread is borrowed"
"""The words of the verdict caveat of a pair whose method has no spread of its own in the
start-spread file (it takes its engine's largest speculative one)."""
RUNNER_WARNED = "ran with runner warnings"
"""The words of a verdict caveat for trials the runner warned about."""

ANALYSIS_SCHEMA = rundir.ANALYSIS_SCHEMA
"""Newest ``analysis.json`` (its history: ``crossbench.store.rundir.FORMATS["analysis"]``)."""
ANALYSIS_REDEFINED: Mapping[int, tuple[str, ...]] = rundir.FORMATS["analysis"].redefined
"""Fields whose meaning changed in a version (``store.rundir.Format.redefined``)."""


def cell_figures(cell: CellData) -> dict[str, Any]:
    """Per-cell statistics: throughput, latency, per-trial rates, acceptance."""
    base = summarize_records(cell.records)
    itl = token_itl_ms(r for r in cell.records
                       if not r.get("warmup") and r.get("status") == "ok").tolist()
    rates = cell.trial_rates
    acc = cell.acceptance
    out: dict[str, Any] = {
        "cell": cell.id, **{k: cell.coords.get(k) for k in COORDS},
        "baseline_cell": cell.baseline,
        "requests": base["requests"], "throughput": base["throughput"],
        "latency_ms": {**base["latency_ms"], "token_itl": dist(itl)},
        "per_trial_pooled_tok_s": {str(t): r for t, r in rates.items()},
        "trial_cv": cv(list(rates.values())),
        "acceptance": {"enabled": cell.speculative, "n": stability.spec_n(cell),
                       **acc.to_dict(), **cell.expected_acceptance},
        "synthetic_acceptance": cell.synthetic,
        "imported": cell.imported.get("source") if cell.imported else None,
        "host_time": host_time.cell_host_time(cell),
    }
    aggregate = (cell.imported or {}).get("aggregate")
    if aggregate:
        out["aggregate"] = aggregate
    unknown = list((cell.imported or {}).get("unknown_figures") or [])
    for dotted in unknown:  # made by the importer's timing layout, not by the source
        group, _, key = dotted.partition(".")
        if isinstance(out.get(group), dict) and key in out[group]:
            out[group][key] = dist([]) if isinstance(out[group][key], dict) else None
    if unknown:
        out["not_from_source"] = unknown
    given = dict((cell.imported or {}).get("source_figures") or {})
    for dotted, value in given.items():  # the source's own figure where records cannot say
        group, _, key = dotted.partition(".")
        if isinstance(out.get(group), dict):
            out[group][key] = value
    if given:
        out["from_source_aggregates"] = sorted(given)
    return out


def _decode_rate(cell_fig: dict[str, Any]) -> float | None:
    pooled = cell_fig["throughput"]["pooled_tok_s"]
    if pooled is None and cell_fig.get("aggregate"):
        pooled = cell_fig["aggregate"].get("decode_tok_s")
    return float(pooled) if pooled is not None else None


def analyze_pair(spec: CellData, base: CellData, figs: dict[str, dict[str, Any]],
                 checks: dict[str, list[Finding]], opts: StatsOptions
                 ) -> tuple[dict[str, Any], list[Finding]]:
    """One speculative cell against its baseline (a ``pairs`` entry), and the findings that
    concern the pair itself (its cells' own checks are in ``checks``)."""
    c = spec.coords
    spreads: paired.PairSpreads | str | None = None
    if opts.start_spread is not None:
        role = str(spec.spec.get("type") or "none")
        spreads = start_spread.pair_spreads(opts.start_spread, str(spec.config.get("engine")),
                                            role)
    result = paired.compare(spec.figures, base.figures, opts,
                            spreads if isinstance(spreads, tuple) else None)
    result["pairing"]["ended_early"] = _ended_early(spec, base)
    conf = confounds(spec, base, trial_caveats=True)
    sp = result["speedup"]
    acc = spec.acceptance
    source = acc.source
    if spec.imported and spec.imported.get("acceptance"):
        source = f"counters reported by {spec.imported.get('source')}"
    out: dict[str, Any] = {
        "cell": spec.id, "baseline_cell": base.id, "model": c.get("target"),
        "engine": c.get("engine"), "method": c.get("method"), "n": c.get("n"),
        "arm": c.get("arm"), "workload": c.get("workload"),
        "concurrency": c.get("concurrency"),
        "baseline_tok_s": _decode_rate(figs[base.id]), "spec_tok_s": _decode_rate(figs[spec.id]),
        "baseline_engine_tok_s": figs[base.id]["throughput"].get("engine_reported_tok_s"),
        "spec_engine_tok_s": figs[spec.id]["throughput"].get("engine_reported_tok_s"),
        "speedup": result["speedup"], "speedup_e2e": result["speedup_e2e"],
        "verdict": stats.verdict(tuple(sp["ci95"]) if sp["ci95"] else None,
                                 sp["n_samples"], sp["n_prompts"], opts.min_samples,
                                 confounded=conf["confounded"], equivalence=opts.equivalence),
        "statistical_verdict": result["verdict"], "pairing": result["pairing"],
        "lengths": result["lengths"],
        "confounds": {k: v for k, v in conf.items() if k != "text"},
        "acceptance": {"draft_acceptance_rate": acc.draft_acceptance_rate,
                       "mean_acceptance_length": acc.mean_acceptance_length,
                       "mean_acceptance_length_estimate": acc.mean_acceptance_length_estimate,
                       "mal_note": acc.mal_note,
                       "per_position": acc.per_position, "source": source,
                       "synthetic": spec.synthetic,
                       "expected_per_position":
                           spec.expected_acceptance["expected_per_position"],
                       "expected_note": spec.expected_acceptance["expected_note"],
                       "counter_suspect": stability.counter_suspect(spec)},
        "per_category": result["per_category"],
        "parity": parity.parity(spec, base),
    }
    if out["baseline_tok_s"] and out["spec_tok_s"]:
        out["pooled_ratio"] = out["spec_tok_s"] / out["baseline_tok_s"]
    # the runner's own warnings on the pair's trials mark the verdict (the numbers stay)
    warned = {side: sorted(stability.trial_warnings(cell)) for side, cell in
              (("spec", spec), ("baseline", base))}
    out["verdict_caveats"] = [
        f"{side} trial(s) {', '.join(map(str, ts))} {RUNNER_WARNED} (other inference "
        "processes, a busy GPU...): see warnings" for side, ts in warned.items() if ts]
    if isinstance(spreads, str):
        out["verdict_caveats"].append(spreads)
    elif isinstance(spreads, tuple) and not spreads[2]:
        out["verdict_caveats"].append(
            f"{BORROWED_SPREAD_NOTE}: the file has no spread for {spec.spec.get('type')} on "
            f"{spreads[0].engine}, so the spread measured for {spreads[0].role} "
            f"(sigma_log {spreads[0].sigma_log:.4g}) stands for it: measure this method's own "
            "with `crossbench start-spread`")
    elif opts.start_spread is not None and sp["start_prior"] is not None:
        known = sp["start_prior"]
        alone = stats.verdict(tuple(known["bootstrap_ci95"]), sp["n_samples"],
                              sp["n_prompts"], opts.min_samples,
                              equivalence=opts.equivalence)
        if alone != result["verdict"]:
            out["verdict_caveats"].append(
                f"{KNOWN_SPREAD_NOTE} ({known['spec_starts']} speculative and "
                f"{known['baseline_starts']} baseline start(s), spreads measured on "
                f"{start_spread.sources_text(opts.start_spread)}): the bootstrap alone gave "
                f"{alone} {_ci(known['bootstrap_ci95'])}")
    own = _pair_findings(out, spec)
    bound = host_time.host_bound(figs[spec.id]["host_time"], figs[base.id]["host_time"])
    if bound:
        own.append(Finding(
            WarningKind.HOST_BOUND, bound,
            "compare this pair only with runs on the same machine and run several server "
            "starts per cell (a verdict from another host or start can differ by more than "
            "its interval: on H200s one vLLM draft_model cell ran at 100-233 tok/s with the "
            "same GPU time per token), report the CPU and what "
            "else ran on it, and keep other load off the engine's cores; an engine option "
            "that overlaps host and GPU work (vLLM's async scheduling, where the method "
            "allows it) shrinks the host's share", spec.id))
    if any(f.kind is WarningKind.DRAFT_REPLAY for f in checks[spec.id]):
        out["verdict_caveats"].append(
            "the speculative cell's drafts can replay outputs of earlier requests on its "
            "start (draft_replay): see warnings")
    if any(f.kind is WarningKind.SINGLE_TRIAL for f in own):
        out["verdict_caveats"].append(
            f"one trial per cell, so {ONE_START}: the interval leaves out start-to-start "
            "variation: see warnings")
    if any(f.kind is WarningKind.SINGLE_START for f in own):
        out["verdict_caveats"].append(
            f"every trial ran on {ONE_START} ({sp['n_trials']} trials): the interval leaves "
            "out start-to-start variation: see warnings")
    if any(f.kind is WarningKind.STARTS_DISAGREE for f in own):
        lo, hi = sp["start_ci95"]
        out["verdict_caveats"].append(
            f"{STARTS_DISAGREE_NOTE} ([{lo:.3f}, {hi:.3f}]): see warnings")
    out["warnings"] = [f.to_dict() for f in checks[spec.id] + checks[base.id] + own]
    return out, own


def _ended_early(spec: CellData, base: CellData) -> int:
    """Baseline requests whose partner was never sent: the speculative trial ended early by
    design (``ended_early``, a look of ``sequential.look_every``) before reaching them."""
    ended = {int(t["trial"]): int(t["ended_early"]["after_requests"])
             for t in spec.manifest.get("trials") or [] if t.get("ended_early")}
    if not ended:
        return 0
    warm = int((spec.config.get("load") or {}).get("warmup", 0))
    return sum(1 for f in base.figures
               if f.trial in ended and f.request_index - warm >= ended[f.trial])


def _pair_findings(pair: dict[str, Any], spec: CellData) -> list[Finding]:
    found: list[Finding] = []
    pr = pair["pairing"]
    unmatched_base = pr["unmatched_baseline"] - pr.get("ended_early", 0)
    if pr["unmatched_spec"] or unmatched_base:
        found.append(Finding(
            WarningKind.UNPAIRED,
            f"{pr['unmatched_spec']} speculative and {unmatched_base} baseline "
            "requests have no partner (same trial, prompt and occurrence) and are left out"
            + (f" ({pr['ended_early']} more were left unsent on purpose: their speculative "
               "trial ended early)" if pr.get("ended_early") else ""),
            "run both cells with the same workload, requests and trials; rerun failed trials "
            "so every request has its partner", spec.id))
    sp = pair["speedup"]
    if sp["verdict"] == "too few samples":
        aggregate = bool((spec.imported or {}).get("aggregate")) and not sp["n_samples"]
        found.append(Finding(
            WarningKind.AGGREGATE_ONLY if aggregate else WarningKind.TOO_FEW_SAMPLES,
            "only aggregates and end-to-end latencies were imported: no paired decode "
            "statistics" if aggregate else
            f"{sp['n_samples']} paired samples over {sp['n_prompts']} prompts: no verdict",
            "rerun `vllm bench serve` with --save-detailed to keep per-request figures"
            if aggregate else "raise requests or trials (at least --min-samples paired "
            "samples over two or more prompts), or lower --min-samples knowingly", spec.id))
    if sp["n_prompts"] and sp["n_prompts"] < MIN_PROMPT_CLUSTERS and \
            sp["verdict"] != "too few samples":
        found.append(Finding(
            WarningKind.FEW_CLUSTERS,
            f"the interval resamples {sp['n_prompts']} prompts: with fewer than "
            f"{MIN_PROMPT_CLUSTERS} clusters a cluster bootstrap under-covers (Cameron, "
            "Gelbach and Miller 2008), so this interval is optimistic",
            f"use {MIN_PROMPT_CLUSTERS} or more prompts (builtin:mixed has 48), or read the "
            "interval as a lower bound on the uncertainty", spec.id))
    if sp["n_trials"] == 1 and sp["verdict"] != "too few samples":
        found.append(Finding(
            WarningKind.SINGLE_TRIAL,
            "one trial per cell: the interval resamples prompts only, so it leaves out how "
            "much a server start moves a whole trial (up to 25 % for speculative cells on "
            "the H200 study)",
            "run 3 or more trials (a matrix's `trials:`, `crossbench run --trials`); for a "
            "speedup within about 10 % of 1, also repeat on a separate occasion", spec.id))
    if sp.get("n_server_starts") == 1 and sp["verdict"] != "too few samples" \
            and sp.get("start_prior") is None:  # a known start spread covers the starts
        found.append(Finding(
            WarningKind.SINGLE_START,
            f"all {sp['n_trials']} trials of this pair ran on {ONE_START}: the interval "
            "resamples prompts only, so it leaves out how much a server start moves "
            f"a whole cell (seen: {START_SPREAD_NOTE})",
            "give every cell two or more server starts: trials_per_start at most half of "
            "trials (e.g. trials: 4, trials_per_start: 2), or share_servers over two or more "
            "rounds; keep one start per cell only for an engine whose fresh starts agree "
            "(benchmarks/README.md, 'Start-to-start spread'), or analyse with its measured "
            "start spread (`crossbench start-spread`, then `analyze --start-spread FILE`)",
            spec.id))
    start_ci = sp.get("start_ci95")
    if start_ci and sp["verdict"] in ("faster", "slower") and start_ci[0] <= 1 <= start_ci[1]:
        units = sp.get("n_server_starts") or sp["n_trials"]
        what = "server starts per side" if sp.get("n_server_starts") else \
            "trials (a server start each)"
        found.append(Finding(
            WarningKind.STARTS_DISAGREE,
            f"the verdict rests on {units} {what}, and they disagree: with each one's mean "
            f"ratio as one sample (Student's t, {units - 1} df) the speedup is "
            f"[{start_ci[0]:.3f}, {start_ci[1]:.3f}], which holds 1; a bootstrap over so few "
            "starts under-covers (Cameron, Gelbach and Miller 2008)",
            "run more server starts per cell (more trials, trials_per_start 1 or a smaller "
            "one, or rounds on separate occasions) until the two intervals agree; until then "
            "report the verdict as indistinguishable at this number of starts", spec.id))
    ln = pair["lengths"]
    if ln["mismatched"]:
        found.append(Finding(
            WarningKind.LENGTH_MISMATCH,
            f"{ln['mismatched']} of {ln['compared']} pairs produced different numbers of output "
            f"tokens (mean {ln['spec_mean_tokens']:.1f} speculative, "
            f"{ln['baseline_mean_tokens']:.1f} baseline): their end-to-end speedup compares "
            "latency per output token, not whole latencies; the decode speedup is a rate "
            "either way, but the two sides did not do the same work",
            "send both arms the same requests with ignore_eos and one max_tokens at "
            "temperature 0, so each pair generates as many tokens; else read only per-token "
            "figures (decode speedup, TPOT)", spec.id))
    conf = pair["confounds"]
    for f in conf.get("findings", []):
        kind = (WarningKind.CONFOUNDED if f["severity"] == "confounding"
                else WarningKind.CONFOUND_CAVEAT)
        found.append(Finding(kind, f"{f['message']} [{f['source']}]", f["action"], spec.id))
    ruled = {f["rule"] for f in conf.get("findings", [])}
    if conf.get("confounding_fields") and "engine-builds-differ" not in ruled:
        fields = conf["confounding_fields"]
        found.append(Finding(
            WarningKind.CONFOUNDED,
            f"besides the speculative settings, {len(fields)} setting(s) differ from the "
            f"baseline: {', '.join(fields[:6])}{' ...' if len(fields) > 6 else ''}; the "
            "verdict reads `confounded` (the numbers stay)",
            "run both cells with identical non-speculative settings (one matrix, one engine "
            "entry); `crossbench compare` lists every difference", spec.id))
    net = sweep.net_loss_finding(pair)
    if net is not None:
        found.append(net)
    par = pair["parity"]
    if par["verdict"] == "diverges":
        found.append(Finding(
            WarningKind.OUTPUT_DIVERGES,
            f"greedy output differs from the baseline in {1 - par['exact_match_rate']:.0%} of "
            f"{par['compared']} pairs (first divergence at character "
            f"{par['first_divergence_chars']['min']:.0f} at the earliest)",
            "a lossless method should reproduce greedy output: check draft sampling settings "
            "and whether the engine's batched verification changes numerics; judge speedups "
            "with this in mind", spec.id))
    return found


def analyze(root: Path, opts: StatsOptions | None = None) -> dict[str, Any]:
    """The whole analysis of a run directory (see the module docstring). A matrix run that
    decided with a known start spread (its ``start-spread.json``) is analysed with it unless
    ``opts`` names another, so its verdicts rest on what its decisions rested on."""
    return analyze_run(load_run(root), run_opts(root, opts))


def run_opts(root: Path, opts: StatsOptions | None = None) -> StatsOptions:
    """``opts`` (default: :class:`StatsOptions`) with the run's recorded start spread (a
    matrix run's ``start-spread.json``, the spread it decided with) where ``opts`` names
    none."""
    opts = opts or StatsOptions()
    if opts.start_spread is None:
        recorded = start_spread.run_start_spread(root)
        if recorded is not None:
            opts = replace(opts, start_spread=recorded)
    return opts


@paused_gc()
def analyze_run(run: RunData, opts: StatsOptions) -> dict[str, Any]:
    """The analysis of loaded cells (with the cyclic garbage collector paused)."""
    opts = opts.for_run(run.kind)
    cooldown = None
    if run.matrix is not None:
        cooldown = float(run.matrix.get("cooldown_s", 0.0))
    by_id = {c.id: c for c in run.cells}
    figs: dict[str, dict[str, Any]] = {}
    checks: dict[str, list[Finding]] = {}
    for c in run.cells:  # one cell's chunks in memory at a time
        figs[c.id] = cell_figures(c)
        checks[c.id] = stability.cell_checks(c, cooldown)
        c.release_chunks()
    found = [f for c in run.cells for f in checks[c.id]]
    pairs = []
    for c in run.cells:
        if c.baseline is None:
            continue
        if c.baseline not in by_id:
            found.append(Finding(WarningKind.UNPAIRED, f"its baseline {c.baseline} has no "
                                 "records, so the cell has no paired statistics",
                                 "run the baseline (`crossbench matrix FILE --resume`)", c.id))
            continue
        pair, own = analyze_pair(c, by_id[c.baseline], figs, checks, opts)
        pairs.append(pair)
        found += own
    extra: dict[str, Any] = {}
    decisions = rundir.read_predictions(run.root) if run.kind == "matrix" else {}
    if decisions:  # probe-and-predict: which cells were predicted, and the checks
        extra["predictions"] = sweep.prediction_checks(decisions, pairs)
    return {
        "schema_version": ANALYSIS_SCHEMA,
        "kind": rundir.ANALYSIS_KIND,
        "crossbench_version": __version__,
        "run": {"dir": str(run.root), "kind": run.kind, "cells": len(run.cells)},
        "options": opts.to_record(),
        "cells": list(figs.values()),
        "pairs": pairs,
        "sweeps": sweep.sweeps(pairs, by_id, opts),
        "stability": [f.to_dict() for f in found],
        **extra,
    }


# -- tables ------------------------------------------------------------------------------------

def marked_verdict(pair: dict[str, Any]) -> str:
    """A pair's verdict word, with ``*`` when it carries ``verdict_caveats`` (one trial per
    cell, a runner warning, ...): the mark every table of verdicts prints."""
    return str(pair["verdict"]) + ("*" if pair.get("verdict_caveats") else "")


def _num(v: Any, spec: str = ".3f") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, (int, float)):
        return format(v, spec)
    return str(v)


def natural_key(text: str) -> list[tuple[int, Any]]:
    """Sort key that orders the digits in a name as numbers: n2 before n11."""
    return [(0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", text) if t]


def _row_key(row: dict[str, Any]) -> list[tuple[int, Any]]:
    return natural_key(str(row["cell"]))


def _mal(acc: dict[str, Any]) -> str:
    """Mean acceptance length for a table: measured, estimated (marked), or why it is n/a."""
    if acc.get("mean_acceptance_length") is not None:
        return _num(acc["mean_acceptance_length"])
    if acc.get("mean_acceptance_length_estimate") is not None:
        return f"~{acc['mean_acceptance_length_estimate']:.3f} (tokens/step)"
    return f"n/a ({acc['mal_note']})" if acc.get("mal_note") else "n/a"


def _ci(ci: list[float] | None) -> str:
    return "n/a" if not ci else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _lengths(ln: dict[str, Any] | None) -> str:
    """Pairs whose output lengths differ, of those compared (their e2e is per token)."""
    if not ln or not ln.get("compared"):
        return "n/a"
    return f"{ln['mismatched']}/{ln['compared']}"


def _band_only(p: dict[str, Any]) -> bool:
    """A pair that reads indistinguishable only through the equivalence band: its interval
    lies within the band but excludes 1."""
    ci = p["speedup"].get("ci95")
    return bool(p["speedup"].get("within_band") and ci and not ci[0] <= 1.0 <= ci[1]
                and p["verdict"] == "indistinguishable")


def tables(result: dict[str, Any]) -> dict[str, tuple[list[str], list[list[str]]]]:
    """Every table of an analysis as (header, rows), by name."""
    out: dict[str, tuple[list[str], list[list[str]]]] = {}
    out["verdicts"] = (
        ["cell", "model", "method", "n", "baseline tok/s", "spec tok/s",
         "baseline tok/s (engine)", "spec tok/s (engine)", "speedup",
         "ci", "verdict", "e2e speedup", "e2e ci", "lengths differ", "net loss share",
         "samples", "acceptance", "MAL", "parity", "warnings"],
        [[p["cell"], str(p["model"]), str(p["method"]), _num(p["n"], "d"),
          _num(p["baseline_tok_s"], ".2f"), _num(p["spec_tok_s"], ".2f"),
          _num(p.get("baseline_engine_tok_s"), ".2f"), _num(p.get("spec_engine_tok_s"), ".2f"),
          _num(p["speedup"]["geomean"]), _ci(p["speedup"]["ci95"]),
          marked_verdict(p),
          _num(p["speedup_e2e"]["geomean"]), _ci(p["speedup_e2e"]["ci95"]),
          _lengths(p.get("lengths")),
          _num(p["speedup"]["net_loss_share"], ".2f"), str(p["speedup"]["n_samples"]),
          _num(p["acceptance"]["draft_acceptance_rate"], ".3f"),
          _mal(p["acceptance"]), p["parity"]["verdict"],
          str(len(p["warnings"]))] for p in sorted(result["pairs"], key=_row_key)])
    out["cells"] = (
        ["cell", "method", "n", "ok", "failed", "pooled tok/s", "engine tok/s",
         "request-mean tok/s",
         "wall tok/s", "TTFT p50 ms", "TPOT p50 ms", "token ITL p50 ms", "chunk gap p50 ms",
         "e2e p50 ms", "trial CV", "GPU busy", "acceptance", "MAL"],
        [[c["cell"], str(c["method"]), _num(c["n"], "d"), str(c["requests"].get("ok", 0)),
          str(c["requests"].get("error", 0) + c["requests"].get("incomplete", 0)),
          _num(c["throughput"]["pooled_tok_s"], ".2f"),
          _num(c["throughput"].get("engine_reported_tok_s"), ".2f"),
          _num(c["throughput"]["request_mean_tok_s"], ".2f"),
          _num(c["throughput"]["wall_output_tok_s"], ".2f"),
          *[_num(c["latency_ms"][k]["p50"]) for k in ("ttft", "tpot", "token_itl",
                                                      "chunk_gap", "e2e")],
          _num(c["trial_cv"], ".3f"),
          _num((c.get("host_time") or {}).get("gpu_busy_share"), ".2f"),
          _num(c["acceptance"]["draft_acceptance_rate"], ".3f"),
          _mal(c["acceptance"]) if c["acceptance"]["enabled"] else "n/a"]
         for c in sorted(result["cells"], key=_row_key)])
    out["per_category"] = (
        ["cell", "category", "speedup", "ci", "verdict", "e2e speedup", "samples", "prompts"],
        [[p["cell"], cat, _num(v["speedup"]["geomean"]), _ci(v["speedup"]["ci95"]),
          v["speedup"]["verdict"], _num(v["speedup_e2e"]["geomean"]),
          str(v["speedup"]["n_samples"]), str(v["speedup"]["n_prompts"])]
         for p in sorted(result["pairs"], key=_row_key)
         for cat, v in p["per_category"].items()])
    sweep_rows = []
    for s in sorted(result["sweeps"], key=lambda s: natural_key(
            f"{s['engine']}/{s['model']}/{s['arm']}/{s['workload']}/{s['concurrency']}")):
        best, cm = s["best"] or {}, s["cost_model"]
        for pt in s["points"]:
            sweep_rows.append([
                f"{s['engine']}/{s['model']}/{s['arm']}", _num(pt["n"], "d"),
                _num(pt["speedup"]),
                _ci(pt["ci95"]), pt["verdict"], _num(pt["draft_acceptance_rate"]),
                _num(pt["mean_acceptance_length"]),
                "yes" if best.get("n") == pt["n"] else "",
                ("yes" if best.get("distinguishable") else "no")
                if best.get("n") == pt["n"] else "",
                _num(cm.get("d")), _ci(cm.get("d_ci95")), _num(cm.get("v")),
                _ci(cm.get("v_ci95")), _num(cm.get("r2")),
                _num(cm.get("predicted_best_n"), "d"),
                _num(s.get("loses_from"), "d"), negative_text(cm),
                cm.get("reason") or cm.get("tau_note") or ""])
    out["sweeps"] = (["sweep", "n", "speedup", "ci", "verdict", "acceptance", "MAL", "best",
                      "best distinguishable", "cost d", "d ci", "cost v", "v ci", "R^2",
                      "predicted best n", "loses from", "predicted negative from",
                      "cost model note"], sweep_rows)
    if result.get("predictions"):
        def ci_open(ci: list[Any] | None) -> str:
            if not ci:
                return "n/a"
            return f"[{ci[0]:.3f}, {'inf' if ci[1] is None else format(ci[1], '.3f')}]"

        out["predictions"] = (
            ["cell", "n", "action", "predicted speedup", "predicted ci", "predicted verdict",
             "measured speedup", "measured ci", "measured verdict", "inside", "reason"],
            [[r["cell"], _num(r["n"], "d"), str(r["action"]),
              _num(r["predicted"].get("speedup")), ci_open(r["predicted"].get("ci95")),
              str(r["predicted"].get("verdict") or "-"),
              _num((r["measured"] or {}).get("speedup")),
              _ci((r["measured"] or {}).get("ci95")),
              str((r["measured"] or {}).get("verdict") or "-"),
              {True: "yes", False: "no"}.get(r["inside"], "-"), str(r["reason"])]
             for r in result["predictions"]["cells"]])
    out["warnings"] = (["kind", "cell", "message", "action"],
                       [[w["kind"], str(w["cell"]), w["message"], w["action"]]
                        for w in result["stability"]])
    return out


def negative_text(cm: dict[str, Any]) -> str:
    """A cost model's predicted negative-from n with its interval, e.g. ``5 [4, >6]`` (``>N``:
    the line does not turn negative up to N, the largest n it predicts; ``none``: not within
    the predicted n)."""
    predicted = [p["n"] for p in cm.get("predicted") or []]
    if not cm.get("fitted") or not predicted:
        return "n/a"
    top = f">{max(predicted)}"
    point = cm.get("predicted_negative_from")
    text = "none" if point is None else str(point)
    ci = cm.get("predicted_negative_from_ci95")
    if ci:
        text += f" [{top if ci[0] is None else ci[0]}, {top if ci[1] is None else ci[1]}]"
    return text


def markdown(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub Markdown table."""
    def esc(s: str) -> str:
        return s.replace("|", "\\|")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(esc(x) for x in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def csv_text(header: list[str], rows: list[list[str]]) -> str:
    """CSV with a header line."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def plain(header: list[str], rows: list[list[str]]) -> str:
    """An aligned plain-text table (the CLI's verdict table)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*header), *(fmt.format(*r) for r in rows)])


def verdict_table(result: dict[str, Any]) -> str:
    """What ``crossbench analyze`` prints: verdicts of the pairs, else the cells' figures."""
    t = tables(result)
    if result["pairs"]:
        keep = ["cell", "baseline tok/s", "baseline tok/s (engine)", "spec tok/s",
                "spec tok/s (engine)", "speedup", "ci", "verdict", "e2e speedup", "e2e ci",
                "lengths differ", "samples", "acceptance", "MAL", "parity"]
        name = "verdicts"
    else:
        keep = ["cell", "method", "n", "ok", "pooled tok/s", "request-mean tok/s",
                "TTFT p50 ms", "TPOT p50 ms", "trial CV", "acceptance", "MAL"]
        name = "cells"
    header, rows = t[name]
    # the engine's own figure beside the suite's, where the engine reports one; the
    # length column where some pair's lengths differ
    mismatched = [p for p in result["pairs"] if (p.get("lengths") or {}).get("mismatched")]
    keep = [k for k in keep if ("(engine)" not in k
            or any(r[header.index(k)] != "n/a" for r in rows))
            and (k != "lengths differ" or mismatched)]
    idx = [header.index(k) for k in keep]
    text = plain(keep, [[r[i] for i in idx] for r in rows])
    designs = sorted({p["speedup"].get("design") for p in result["pairs"]
                      if p["speedup"].get("ci95")} - {None})
    if designs:
        level = result["options"].get("level", 0.95)
        text += (f"\nintervals: {level:.0%} percentile bootstrap over "
                 f"{'; '.join(designs)} (--strata {result['options'].get('strata')})")
    band = result["options"].get("equivalence")
    inside = [p["cell"] for p in result["pairs"] if _band_only(p)]
    if inside and band:
        text += (f"\nindistinguishable within the +-{band:.0%} equivalence band (the interval "
                 f"excludes 1 but lies within [{1 / (1 + band):.3f}, {1 + band:.3f}]; "
                 f"--equivalence): {', '.join(sorted(inside, key=natural_key))}")
    if mismatched:
        text += (f"\nlengths differ: in {len(mismatched)} pair(s) some requests produced "
                 "different numbers of output tokens; their e2e speedup compares latency per "
                 "output token (length_mismatch)")
    caveats = "\n".join(c for p in result["pairs"] for c in p.get("verdict_caveats") or [])
    pair_kinds = {w["kind"] for p in result["pairs"] for w in p.get("warnings") or []}
    for seen, note in (
            (RUNNER_WARNED in caveats, "the runner warned on some of the pair's trials (other "
             "inference processes, a busy GPU): the verdict stands on trials whose speed may "
             "be off"),
            (WarningKind.SINGLE_START in pair_kinds, "every trial of the pair ran on one server "
             "start per side: the interval leaves out start-to-start variation (single_start)"),
            (KNOWN_SPREAD_NOTE in caveats, f"{KNOWN_SPREAD_NOTE} (--start-spread) and made the "
             "verdict more conservative than the bootstrap's alone: see verdict_caveats"),
            (start_spread.NO_SPREAD in caveats, f"{start_spread.NO_SPREAD} for some pair's "
             "engine or method: its interval leaves out start-to-start variation (see "
             "verdict_caveats)"),
            (WarningKind.STARTS_DISAGREE in pair_kinds, f"{STARTS_DISAGREE_NOTE}: the verdict "
             "rests on fewer starts than their spread needs (starts_disagree)")):
        if seen:
            text += f"\n* {note}"
    text += engines_text(result)
    n_warn = len(result["stability"])
    if n_warn:
        kinds = sorted({w["kind"] for w in result["stability"]})
        text += f"\n{n_warn} warnings ({', '.join(kinds)}): see analysis/warnings.md"
    return text


def engines_text(result: dict[str, Any]) -> str:
    """One line per arm the run holds in two engines (``crossbench report``'s "Across
    engines"): the later engine's speculative and plain step over the earlier's, with
    Welch's interval over their starts where every trial had its own; empty otherwise."""
    from crossbench.analysis.step_cost import across_engines, fmt

    lines = []
    for g in across_engines(result, float(result["options"].get("level", 0.95))):
        for r in g["ratios"]:
            a, b, f = g["sides"][r["a"]], g["sides"][r["b"]], r["figures"]
            lines.append(f"  {g['arm']} n={g['n']} c={g['concurrency']}: {b['engine']} / "
                         f"{a['engine']} step {fmt(f['step_ms'], 'ratio')}, plain step "
                         f"{fmt(f['plain_ms'], 'ratio')}")
    if not lines:
        return ""
    return ("\nacross engines (multi-variable: kernels, formats and settings differ; Welch "
            "over server starts, `crossbench report` has the rest):\n" + "\n".join(lines))


def table_files(result: dict[str, Any]) -> dict[str, str]:
    """The analysis tables as files: ``{"verdicts.md": text, "verdicts.csv": text, ...}``."""
    files: dict[str, str] = {}
    for name, (header, rows) in tables(result).items():
        md = markdown(header, rows)
        if name == "sweeps" and not rows:
            md += "\n" + sweep.absent_reason(result["pairs"]) + "\n"
        files[f"{name}.md"] = md
        files[f"{name}.csv"] = csv_text(header, rows)
    return files


def write_outputs(root: Path, result: dict[str, Any]) -> list[Path]:
    """Write ``analysis.json`` and ``analysis/<table>.md|.csv`` (``store.rundir``); returns
    the paths."""
    return rundir.write_analysis(root, result, table_files(result))
