"""``crossbench validate``: expand and check a matrix; launches nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from crossbench.cli.common import progress, user_errors
from crossbench.cli.live import Mode, make_view


@click.command(epilog="""\b
Examples:
  crossbench validate matrices/cpu-smoke.yaml
  crossbench validate matrices/cpu-smoke.yaml --json
""")
@click.argument("matrix_file", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print cells and pairs as JSON.")
@user_errors
def validate(matrix_file: Path, as_json: bool) -> None:
    """Expand a matrix, check every cell against its engine's profile, print cells and pairs.

    Checks: engines, models and arms exist and fit together; every speculative cell has a
    baseline; each method's draft and n limits; every flag exists in the expected engine build;
    local model files exist. Notes (not errors) include cells whose n-gram drafts would
    replay earlier outputs (the analysis's draft_replay). Nothing is started.
    """
    from crossbench.runner.matrix import (
        decode_estimate_s,
        expand,
        load_matrix,
        run_order,
        server_groups,
        trial_work,
        validate_cells,
    )

    m = load_matrix(matrix_file)
    cells = expand(m, matrix_file)
    notes = validate_cells(m, cells, matrix_file)
    order = run_order(m, cells)
    work = [trial_work(c.load) for c in cells]
    requests = sum(w.requests for w in work) * m.trials
    tokens = sum(w.output_tokens for w in work) * m.trials
    servers = len(set(server_groups(cells).values())) if m.share_servers else len(cells)
    starts = servers * -(-m.trials // m.block)  # the most: a failed trial starts one more
    if as_json:
        click.echo(json.dumps({
            "study": m.study.name, "trials": m.trials, "schedule": m.schedule.order,
            "cells": [{"id": c.id, "coords": c.coords, "baseline": c.baseline}
                      for c in cells],
            "runs": len(order), "server_starts": starts, "requests": requests,
            "output_tokens": tokens, "notes": notes}, indent=2))
        return
    click.echo(f"study {m.study.name}: {len(cells)} cells x {m.trials} trials = {len(order)} "
               f"runs ({m.schedule.order}), {requests} requests, {tokens} output tokens")
    click.echo(f"server starts: {starts} ({servers} "
               + ("server group(s) sharing starts" if m.share_servers else "cell(s)")
               + f", {m.block} trial(s) per start)")
    for c in cells:
        pair = f"  vs {c.baseline}" if c.baseline else "  (baseline)"
        click.echo(f"  {c.id}{pair}")
    decode_s = decode_estimate_s(m, tokens)
    if decode_s is not None:
        click.echo(f"estimated decode time: {decode_s / 60:.1f} min at {m.estimate_tok_s:g} "
                   "tok/s (plus server start-up per run; `crossbench plan` adds it)")
    else:
        click.echo("estimated duration: unknown (set estimate_tok_s in the matrix)")
    for note in notes:
        progress(f"note: {note}")


@click.command(epilog="""\b
Examples:
  crossbench matrix matrices/cpu-smoke.yaml --out runs/smoke
  crossbench matrix matrices/cpu-smoke.yaml --out runs/smoke --resume
  crossbench matrix matrices/cpu-smoke.yaml --only method=none --dry-run
  crossbench matrix study.yaml --out runs/study --executor ray --lane-gpus 1
  crossbench matrix study.yaml --out /shared/runs/study --executor ray \\
      --address head-node:6379
""")
@click.argument("matrix_file", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Run directory (default: the matrix's `out`, else runs/<study>). With "
                   "--executor ray on several nodes it must be on a filesystem every node "
                   "sees: the workers write the cells there.")
@click.option("--resume", is_flag=True, help="Continue a run directory: only what is missing.")
@click.option("--only", multiple=True,
              help="Run only cells with KEY=VALUE (repeatable: a key given twice matches "
                   "either value; K=V,K2=V2 matches both).")
@click.option("--skip", multiple=True,
              help="Skip cells with KEY=VALUE (repeatable; K=V,K2=V2 skips cells matching "
                   "both).")
@click.option("--dry-run", is_flag=True, help="Print each trial's server command; run nothing.")
@click.option("--progress", "progress_mode", type=click.Choice(["auto", "live", "plain"]),
              default="auto", show_default=True,
              help="Live panel on stderr (auto: when stderr is a terminal) or plain lines.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local",
              show_default=True,
              help="local: every trial here, one at a time. ray: lanes (a baseline and its "
                   "speculative cells) side by side on the GPUs of a Ray cluster, one trial "
                   "at a time per lane (needs pip install 'crossbench[ray]').")
@click.option("--address", default=None,
              help="With --executor ray: the Ray cluster to join (ray.init(address=...), "
                   "e.g. head-node:6379); default: RAY_ADDRESS, else a cluster `ray start` "
                   "started on this host, else a new local one for this run.")
@click.option("--lane-gpus", type=click.IntRange(min=1), default=None,
              help="With --executor ray: GPUs per lane (Ray sets CUDA_VISIBLE_DEVICES for "
                   "each lane); default 1.")
@user_errors
def matrix(matrix_file: Path, out: Path | None, resume: bool, only: tuple[str, ...],
           skip: tuple[str, ...], dry_run: bool, progress_mode: Mode, executor: str,
           address: str | None, lane_gpus: int | None) -> None:
    """Run a matrix: every cell's trials in the schedule's order, resumable.

    Each finished trial is journaled atomically; a kill loses at most the trial in flight, and
    --resume runs only what is missing (refusing a changed matrix file or engine build).
    With --executor ray the run directory must be on a filesystem every node sees (on one
    node, any local directory); the journal is written by this process only.
    """
    from crossbench.errors import UserError
    from crossbench.runner.matrix import read_matrix
    from crossbench.runner.matrix_run import Executor, run_matrix

    runner: Executor | None = None
    if executor == "ray":
        from crossbench.runner.ray_exec import RayExecutor

        runner = RayExecutor(address=address, lane_gpus=lane_gpus or 1)
    elif address is not None or lane_gpus is not None:
        raise UserError("--address and --lane-gpus go with --executor ray",
                        "add --executor ray, or drop them")
    source = read_matrix(matrix_file)  # read once: what is run is what is digested
    if out is None:
        m = source.matrix
        out = Path(m.out) if m.out else Path("runs") / m.study.name
    with make_view(progress_mode) as view:
        result = run_matrix(source, out, resume=resume, only=only, skip=skip,
                            dry_run=dry_run, progress=view.message, on_tick=view.tick,
                            executor=runner)
    if dry_run:
        from crossbench.confounds.provenance import redact_argv

        for step in result["dry_run"]:
            click.echo(f"# {step['cell']} trial {step['trial']}")
            click.echo(" ".join(redact_argv(step["argv"])))
        return
    click.echo(format_status(result))
    progress(f"results in {out}")
    if result["totals"]["failed"]:
        click.echo(f"crossbench: failed: {result['totals']['failed']} trials failed (fix: see "
                   f"the cells' server.log and `crossbench status {out}`)", err=True)
        sys.exit(1)


def format_status(summary: dict[str, Any]) -> str:
    """Per-cell table of a matrix run."""
    lines = [f"{'cell':<60} {'done':>4} {'fail':>4} {'miss':>4} {'tok/s':>8} {'accept':>7}"
             "  integrity"]
    for r in summary["cells"]:
        rate = r.get("pooled_tok_s")
        acc = r.get("draft_acceptance_rate")
        lines.append(f"{r['id']:<60} {r['done']:>4} {r['failed']:>4} {r['missing']:>4} "
                     f"{'-' if rate is None else f'{rate:.1f}':>8} "
                     f"{'-' if acc is None else f'{acc:.3f}':>7}  "
                     f"{ {True: 'pass', False: 'FAIL'}.get(r.get('integrity_passed'), '-')}")
    t = summary["totals"]
    stopped = f", {t['stopped']} not needed (sequential stops)" if t.get("stopped") else ""
    predicted = (f", {t['predicted']} not run (predicted by probe-and-predict)"
                 if t.get("predicted") else "")
    lines.append(f"trials: {t['done']} done, {t['failed']} failed, {t['missing']} missing"
                 f"{stopped}{predicted}")
    for r in summary["cells"]:
        stop = r.get("stop")
        if stop:
            lines.append(f"stopped: {r['id']}: {stop.get('reason')}")
        pred = r.get("prediction")
        if pred:
            ci = pred.get("ci95") or [None, None]
            hi = "inf" if ci[1] is None else f"{ci[1]:.3f}"
            lines.append(f"predicted: {r['id']}: {pred.get('verdict')}, speedup "
                         f"{pred['speedup']:.3f} [{ci[0]:.3f}, {hi}] (cost model; not run)")
    if any(r.get("integrity_passed") is False for r in summary["cells"]):
        lines.append("integrity FAIL: see the cell's summary.json `integrity` (an n-gram "
                     "method that drafted nothing fails `spec_configured_and_drafting`)")
    return "\n".join(lines)


@click.command(epilog="""\b
Example:
  crossbench status runs/smoke --json
""")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="JSON: cells[].id, done, failed, missing.")
@user_errors
def status(run_dir: Path, as_json: bool) -> None:
    """Per cell of a matrix run: trials done, failed and missing."""
    from crossbench.runner.matrix_run import matrix_status

    s = matrix_status(run_dir)
    for warning in s["warnings"]:
        progress(f"warning: {warning}")
    click.echo(json.dumps(s, indent=2) if as_json else format_status(s))
