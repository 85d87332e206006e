"""``crossbench demo``: the embedded default study (matrices/cpu-smoke.yaml), end to end,
then a closing summary read from the run's analysis (:func:`closing_summary`); exit 1 when a
trial or an integrity check failed, as ``crossbench run`` does.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from crossbench.cli.common import progress, user_errors
from crossbench.cli.live import make_view
from crossbench.paths import data_root

DEFAULT_MATRIX = "matrices/cpu-smoke.yaml"

SYNTH_LEVEL = 0.95
"""Joint level of the synthetic-acceptance check: every position at once (Bonferroni)."""


@click.command(epilog="""\b
Examples:
  crossbench demo
  crossbench demo --out runs/demo
""")
@click.option("--matrix", "matrix_file", type=click.Path(path_type=Path), default=None,
              help=f"Matrix to run (default: {DEFAULT_MATRIX}).")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Run directory (default: runs/demo-<time>).")
@user_errors
def demo(matrix_file: Path | None, out: Path | None) -> None:
    """Build llama-server and the fixture models if missing, then run the CPU smoke matrix.

    Baseline, draft-simple n in {2,4} and synthetic acceptance on the 48 built-in prompts, and
    ngram-mod on builtin:repeat (3 prompts asked again, so that n-gram drafting has text to
    draft from) beside its own baseline, on the project's fixture pair, 3 interleaved trials
    each. Prints the per-cell table, then a summary: each arm's speedup over its baseline with
    its 95 % interval, synthetic acceptance measured against configured, and whether the host
    was too busy for the figures to mean anything. Exit 1 when a trial or an integrity check
    failed.
    """
    from crossbench.analysis.analyze import analyze
    from crossbench.cli.matrix_cmd import format_status
    from crossbench.engines.llamacpp.build import install
    from crossbench.errors import CrossbenchError
    from crossbench.fixtures.resolve import ensure_fixtures
    from crossbench.runner.matrix import expand, read_matrix
    from crossbench.runner.matrix_run import run_matrix

    install(progress=progress)
    for role, gguf in zip(("target", "draft"), ensure_fixtures(say=None), strict=True):
        progress(f"fixture {role}: {gguf} ({gguf.stat().st_size / 1e6:.1f} MB)")
    source = read_matrix(matrix_file or data_root() / DEFAULT_MATRIX)
    root = out or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    with make_view("auto") as view:
        summary = run_matrix(source, root, progress=view.message, on_tick=view.tick)
    click.echo(format_status(summary))
    try:
        result = analyze(root)
    except CrossbenchError as e:
        click.echo(f"summary: none, the analysis could not run: {e.one_line()}")
    else:
        configured = {c.id: c.engine_config["spec"].get("synth_rates")
                      for c in expand(source.matrix, source.path)}
        click.echo("\n".join(closing_summary(result, configured)))
    progress(f"run directory: {root} (per cell: cells/<id>/summary.json; "
             f"`crossbench status {root}`)")
    progress(f"next: `crossbench analyze {root}` (every pair's tables and warnings), "
             f"`crossbench report {root}` (HTML report)")
    failed = summary["totals"]["failed"]
    broken = [r["id"] for r in summary["cells"] if r.get("integrity_passed") is False]
    if failed:
        click.echo(f"crossbench: failed: {failed} trial(s) failed (fix: see the cells' "
                   f"server.log and `crossbench status {root}`)", err=True)
    if broken:
        click.echo(f"crossbench: failed: the integrity checks of {len(broken)} cell(s) failed, "
                   f"first {broken[0]} (fix: read `integrity` in its summary.json)", err=True)
    if failed or broken:
        sys.exit(1)


def _label(pair: Mapping[str, Any], workloads: int) -> str:
    """An arm as a newcomer reads it: its name, n, and its workload when there are several."""
    text = str(pair.get("arm") or pair.get("method"))
    if pair.get("n") is not None:
        text += f" n={pair['n']}"
    if workloads > 1:
        text += f" on {pair.get('workload')}"
    return text


def _speedup(pair: Mapping[str, Any]) -> str:
    sp = pair["speedup"]
    ci = sp.get("ci95")
    interval = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else " (no interval)"
    return f"{sp['geomean']:.2f}x{interval}, {pair['verdict']}"


def _synthetic(label: str, configured: Sequence[float], acc: Mapping[str, Any]) -> str:
    """Measured per-position acceptance against the configured rates, each within the joint
    sampling band of its drafts (binomial, Bonferroni over the positions) or not."""
    drafts = int(acc.get("drafts") or 0)
    measured = list(acc.get("per_position") or [])[:len(configured)]
    shown = (f"{label}: configured {' '.join(f'{r:.2f}' for r in configured)}, measured "
             f"{' '.join(f'{r:.2f}' for r in measured) or 'nothing'} over {drafts} drafts")
    if not drafts or len(measured) < len(configured):
        return f"{shown}: not recovered (nothing or too few positions measured)"
    z = statistics.NormalDist().inv_cdf(1 - (1 - SYNTH_LEVEL) / (2 * len(configured)))
    bands = [z * math.sqrt(r * (1 - r) / drafts) for r in configured]
    off = [k for k, (c, m, b) in enumerate(zip(configured, measured, bands, strict=True))
           if abs(m - c) > b + 1e-9]
    if not off:
        return (f"{shown}: recovered, every position within its sampling band "
                f"(+-{max(bands):.3f}), so acceptance is counted right")
    k = off[0]
    return (f"{shown}: NOT recovered at position {k} ({measured[k]:.3f} against "
            f"{configured[k]:.2f} +- {bands[k]:.3f}): acceptance counting is off here")


def _drafted(acc: Mapping[str, Any]) -> str:
    """What an arm drafted: in how many requests (where the engine reports it per request),
    else how many tokens (its counters), and the share accepted."""
    drafted = int(acc.get("requests_with_drafts") or 0)
    total = drafted + int(acc.get("requests_without_drafts") or 0)
    tokens = float(acc.get("draft_tokens") or 0)
    rate = acc.get("draft_acceptance_rate")
    accepted = f" ({rate:.0%} of its drafts accepted)" if rate is not None else ""
    if drafted:
        return f"drafted in {drafted} of {total} requests{accepted}"
    if tokens:
        return f"drafted {tokens:g} tokens{accepted}"
    return "drafted nothing"


def _host(result: Mapping[str, Any]) -> str:
    """Whether the host was quiet enough, from the runner's own warnings on trials (other
    inference processes beside a trial) and the spread of each cell's per-trial rates."""
    found = result.get("stability") or []
    crowded = sorted({str(f.get("cell")) for f in found if f.get("kind") == "trial_warnings"})
    spread = {str(c["cell"]): c["trial_cv"] for c in result.get("cells") or []
              if c.get("trial_cv") is not None}
    wide = sorted({str(f.get("cell")) for f in found if f.get("kind") == "trial_spread"})
    if not crowded and not wide:
        worst = max(spread.values(), default=0.0)
        return (f"host: quiet enough: no other inference process beside any trial, and each "
                f"cell's trials agree within {worst:.0%} (CV; the limit is 10 %)")
    why = []
    if crowded:
        why.append(f"other inference processes ran beside trials of {len(crowded)} cell(s)")
    if wide:
        worst_cell = max(wide, key=lambda c: spread.get(c, 0.0))
        why.append(f"the trials of {len(wide)} cell(s) disagree by more than 10 % (CV; "
                   f"{worst_cell}: {spread.get(worst_cell, math.nan):.0%})")
    return ("host: TOO BUSY for these figures to mean anything: " + "; ".join(why)
            + ". Stop other programs (other engines, builds, test runs) and run it again")


def closing_summary(result: Mapping[str, Any],
                    configured: Mapping[str, Sequence[float] | None]) -> list[str]:
    """The demo's last lines, from an analysis result (``crossbench.analysis.analyze``) and
    each cell's configured synthetic rates (cell id -> rates, None for real acceptance)."""
    pairs = [p for p in result.get("pairs") or [] if p["speedup"].get("geomean") is not None]
    cells = {str(c["cell"]): c for c in result.get("cells") or []}
    workloads = len({p.get("workload") for p in pairs})
    lines = ["summary (decode rate of each arm over its baseline's on the same prompts, "
             "geometric mean with its 95 % interval):"]
    ranked = sorted(pairs, key=lambda p: -float(p["speedup"]["geomean"]))
    faster = [p for p in ranked if p["verdict"] == "faster"]
    first = faster[0] if faster else ranked[0] if ranked else None
    if first is not None:
        lines.append(("  fastest: " if faster else "  no arm was shown faster than its "
                      "baseline; the best: ") + f"{_label(first, workloads)}: {_speedup(first)}")
    lines += [f"  {_label(p, workloads)}: {_speedup(p)}" for p in ranked if p is not first]
    for p in ranked:
        rates = configured.get(str(p["cell"]))
        acc = (cells.get(str(p["cell"])) or {}).get("acceptance") or {}
        if rates:
            lines.append("  synthetic acceptance of " + _synthetic(_label(p, workloads), rates,
                                                                   acc))
        elif str(p.get("method", "")).startswith("ngram"):
            lines.append(f"  {_label(p, workloads)} {_drafted(acc)}: n-gram drafting copies "
                         "text the server has seen before, so only a prompt asked again "
                         "gives it something to draft")
    confounded: dict[str, list[str]] = {}
    for p in ranked:
        if p["verdict"] == "confounded":
            fields = (p.get("confounds") or {}).get("confounding_fields") or []
            confounded.setdefault(", ".join(fields) or "other settings",
                                  []).append(_label(p, workloads))
    lines += [f"  confounded ({'; '.join(labels)}): besides the method, {fields} differed from "
              "the baseline's trials (`crossbench analyze` lists them)"
              for fields, labels in confounded.items()]
    lines.append("  " + _host(result))
    return lines
