"""``crossbench demo``: the embedded default study, end to end on this machine."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from crossbench.cli.common import progress, user_errors

ARMS: list[tuple[str, dict[str, Any]]] = [
    ("baseline", {"type": "none"}),
    ("draft-simple n=4", {"type": "draft-simple", "n": 4, "draft": True}),
    ("draft-simple n=4, synthetic 0.9,0.7,0.5,0.2",
     {"type": "draft-simple", "n": 4, "draft": True, "synth_rates": [0.9, 0.7, 0.5, 0.2]}),
    ("ngram-mod", {"type": "ngram-mod"}),
]


@click.command(epilog="""\b
Example:
  crossbench demo --out runs/demo
""")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Parent folder of the run directories (default: runs/demo-<time>).")
@click.option("--requests", type=int, default=8, show_default=True)
@click.option("--max-tokens", type=int, default=96, show_default=True)
@click.option("--trials", type=int, default=2, show_default=True)
@user_errors
def demo(out: Path | None, requests: int, max_tokens: int, trials: int) -> None:
    """Build llama-server, make the fixture models, and run baseline vs three speculative arms.

    Every arm is a full `crossbench run` directory (raw records, server logs, metrics
    snapshots, summary). The printed speedups are ratios of pooled decode rates from this run
    alone, without confidence intervals.
    """
    from crossbench.cli.fixtures_cmd import ensure_fixtures
    from crossbench.engines.llamacpp.build import install
    from crossbench.runner.config import RunConfig
    from crossbench.runner.single import run as run_once

    install(progress=progress)
    target, draft = ensure_fixtures()
    root = out or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    rows = []
    for i, (label, arm) in enumerate(ARMS):
        spec = {k: v for k, v in arm.items() if k != "draft"}
        if arm.get("draft"):
            spec["draft_model"] = str(draft)
        cfg = RunConfig.model_validate({
            "engine_config": {"model": str(target), "spec": spec}, "trials": trials,
            "load": {"requests": requests, "max_tokens": max_tokens}})
        progress(f"arm {i + 1}/{len(ARMS)}: {label}")
        s = run_once(cfg, root / f"arm{i}", progress=progress)
        rows.append((label, s))
    base = rows[0][1]["throughput"]["pooled_tok_s"]
    click.echo(f"{'arm':<45} {'tok/s':>8} {'vs base':>8} {'accept':>7} {'MAL':>5}  integrity")
    for label, s in rows:
        rate = s["throughput"]["pooled_tok_s"]
        acc = s["acceptance"]
        ratio = f"{rate / base:.2f}x" if rate and base else "n/a"
        ar = acc["draft_acceptance_rate"]
        mal = acc["mean_acceptance_length"]
        click.echo(f"{label:<45} {rate or 0:>8.1f} {ratio:>8} "
                   f"{'-' if ar is None else f'{ar:.3f}':>7} "
                   f"{'-' if mal is None else f'{mal:.2f}':>5}  "
                   f"{'pass' if s['integrity']['passed'] else 'FAIL'}")
    progress(f"run directories in {root}; single-run ratios, no confidence intervals")
