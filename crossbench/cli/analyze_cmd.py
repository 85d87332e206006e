"""``crossbench analyze``, ``crossbench compare`` and ``crossbench import``: statistics from
raw records, for crossbench's own runs and for results other tools published."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from crossbench.cli.common import progress, user_errors
from crossbench.errors import UserError


def _opts(resamples: int, seed: int, level: float, min_samples: int,
          strata: str = "auto", equivalence: float | None = None) -> Any:
    from crossbench.analysis.paired import StatsOptions

    if resamples < 100:
        raise UserError(f"--resamples {resamples} is too few for a percentile interval",
                        "use at least 1000 (10000 is the default)")
    if not 0.5 <= level < 1.0:
        raise UserError(f"--level {level} is not a confidence level",
                        "give a fraction such as 0.95 (not a percentage)")
    if min_samples < 2:
        raise UserError(f"--min-samples {min_samples} is below 2",
                        "use at least 2 (10 is the default)")
    if equivalence is None:
        equivalence = StatsOptions().equivalence
    if not 0.0 <= equivalence < 1.0:
        raise UserError(f"--equivalence {equivalence} is not a relative band",
                        "give a fraction from 0 (no band) to below 1, e.g. 0.02 for +-2 %")
    return StatsOptions(resamples=resamples, seed=seed, level=level, min_samples=min_samples,
                        strata=strata, equivalence=equivalence)


def stats_options(fn: Any) -> Any:
    """The bootstrap and verdict options shared by analyze and compare."""
    for opt in reversed([
        click.option("--resamples", type=int, default=10_000, show_default=True,
                     help="Bootstrap resamples per interval."),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="Seed of the bootstrap (same seed, same intervals)."),
        click.option("--level", type=float, default=0.95, show_default=True,
                     help="Confidence level of the intervals (a fraction)."),
        click.option("--min-samples", type=int, default=10, show_default=True,
                     help="Fewest paired samples for a verdict (and at least two prompts)."),
        click.option("--strata", type=click.Choice(["auto", "category", "none"]),
                     default="auto", show_default=True,
                     help="Resample prompts within their categories (category: a workload "
                          "with a fixed number of prompts per category) or across all (none); "
                          "auto: category for crossbench's runs, none for imports. Clusters "
                          "are prompts and trials either way (docs/analysis.md)."),
        click.option("--equivalence", type=float, default=0.02, show_default=True,
                     help="Practical-equivalence band, relative: an interval wholly within "
                          "[1/(1+E), 1+E] reads indistinguishable even where it excludes 1 "
                          "(a baseline rerun against its baseline); 0: no band "
                          "(docs/analysis.md)."),
    ]):
        fn = opt(fn)
    return fn


@click.command(epilog="""\b
Examples:
  crossbench analyze runs/smoke                 # verdict table; analysis.json + analysis/
  crossbench analyze runs/smoke --json          # the analysis object on stdout
  crossbench analyze runs/smoke --resamples 2000 --seed 1 --level 0.9
  crossbench analyze runs/imported-vllm         # directories of `crossbench import` too
""")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the analysis object.")
@click.option("--start-spread", "spread_file", type=Path, default=None, metavar="FILE",
              help="A known start spread (`crossbench start-spread RUN -o FILE`): each "
                   "interval also takes the spread between server starts into account, so "
                   "few starts per cell cannot claim more than they show (docs/analysis.md "
                   "\"Known start spread\"); default: the spread a matrix run decided with "
                   "(its start-spread.json), if any.")
@stats_options
@user_errors
def analyze(run_dir: Path, as_json: bool, spread_file: Path | None, resamples: int, seed: int,
            level: float, min_samples: int, strata: str, equivalence: float) -> None:
    """Paired speedups with intervals and verdicts, acceptance, n-sweeps, output parity and
    stability warnings, from a run directory's raw records alone.

    Writes RUN_DIR/analysis.json and RUN_DIR/analysis/{verdicts,cells,per_category,sweeps,
    warnings}.{md,csv}. Works on matrix runs, single runs (per-cell figures, no pairs) and
    imported directories. Definitions: docs/metrics.md and docs/analysis.md.
    """
    from crossbench.analysis.analyze import analyze as run_analysis
    from crossbench.analysis.analyze import verdict_table, write_outputs
    from crossbench.store.rundir import START_SPREAD

    opts = _opts(resamples, seed, level, min_samples, strata, equivalence)
    if spread_file is not None:
        from dataclasses import replace

        from crossbench.analysis.start_spread import StartSpread

        opts = replace(opts, start_spread=StartSpread.load(spread_file))
    elif (run_dir / START_SPREAD).is_file():
        progress(f"with the start spread the run decided with ({run_dir / START_SPREAD}; "
                 "--start-spread FILE names another)")
    result = run_analysis(run_dir, opts)
    written = write_outputs(run_dir, result)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(verdict_table(result))
    progress(f"wrote {written[0]} and tables in {written[-1].parent}")


@click.command("start-spread", epilog="""\b
Examples:
  crossbench start-spread runs/calibration -o spread.json   # measure, save
  crossbench start-spread runs/a runs/b                      # pool two runs, print only
  crossbench analyze runs/reused --start-spread spread.json
""")
@click.argument("runs", nargs=-1, required=True,
                type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("-o", "--out", type=Path, default=None, metavar="FILE",
              help="Write the spreads (JSON) for `analyze --start-spread FILE`.")
@user_errors
def start_spread(runs: tuple[Path, ...], out: Path | None) -> None:
    """How far a fresh server start moves a cell's decode rate, per engine and role
    (baseline or speculative method), pooled over the cells of RUNS that ran on at least two
    server starts (docs/analysis.md "Known start spread").

    Measure it on a run of the default design (a fresh server per trial, 3 or more trials),
    on the engine, models and machine type you will use: a design that reuses one server per
    cell cannot see this spread itself.
    """
    from crossbench.analysis.start_spread import measure
    from crossbench.store.rundir import check_out_file

    if out is not None:  # before the runs are read: a bad --out is one line, not a traceback
        check_out_file(out)
    known = measure(list(runs))
    click.echo(f"{'engine':14s} {'role':14s} {'sigma (log)':>11s} {'cv':>7s} {'df':>4s} "
               f"{'cells':>5s} {'starts':>6s}")
    for s in known.spreads:
        click.echo(f"{s.engine:14s} {s.role:14s} {s.sigma_log:11.4f} "
                   f"{100 * s.to_dict()['cv']:6.2f}% {s.df:4d} {s.cells:5d} {s.starts:6d}")
        if s.measured_sigma_log is not None:
            click.echo(f"  measured {s.measured_sigma_log:.4f}, below the floor of "
                       f"{s.sigma_log}: the file carries the floor (intervals err wide)")
    if out is not None:
        try:
            known.save(out)
        except OSError as e:  # a read-only file system, /proc, a full disk
            raise UserError(f"--out {out} cannot be written ({e.strerror or e})",
                            "give --out a file path in a folder you can write to") from None
        progress(f"wrote {out}")


@click.command(epilog="""\b
Examples:
  crossbench compare runs/base runs/draft                 # two `crossbench run` directories
  crossbench compare runs/smoke:llama/tiny-target/draft-simple/n2/builtin-mixed/c1 \\
                     runs/smoke:llama/tiny-target/draft-simple/n4/builtin-mixed/c1
""")
@click.argument("a")
@click.argument("b")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@stats_options
@user_errors
def compare(a: str, b: str, as_json: bool, resamples: int, seed: int, level: float,
            min_samples: int, strata: str, equivalence: float) -> None:
    """Compare B against A: which recorded settings differ, and the paired speedup of B.

    A and B are run directories, matrix cell folders, or MATRIX_DIR:CELL_ID. The comparison
    is labelled multi-variable when anything besides the speculative settings differs.
    """
    from crossbench.analysis.compare import compare as run_compare
    from crossbench.analysis.compare import format_compare, resolve

    result = run_compare(resolve(a), resolve(b),
                         _opts(resamples, seed, level, min_samples, strata, equivalence))
    click.echo(json.dumps(result, indent=2) if as_json else format_compare(result))


@click.group(name="import")
def import_() -> None:
    """Turn results other tools wrote into a run directory `crossbench analyze` reads."""


def _report(state: dict[str, Any], out: Path) -> None:
    for note in state["source"].get("notes") or []:  # table and llama-logs imports
        progress(f"note: {note}")
    for item in state["not_imported"]:
        what = "note" if "imported with" in item["reason"] else "not imported"
        progress(f"{what}: {item['file']}: {item['reason']}")
    click.echo(f"{len(state['cells'])} cells written to {out}")
    for c in state["cells"]:
        click.echo(f"  {c['id']}" + (f"  vs {c['baseline']}" if c["baseline"] else
                                     "  (baseline)"))
    progress(f"next: crossbench analyze {out}")


def arm_options(fn: Any) -> Any:
    """What each arm ran with, for importers: settings, methods and server starts."""
    for opt in reversed([
        click.option("--arm-setting", "arm_setting", multiple=True, metavar="ARM:KEY=VALUE",
                     help="What ARM ran with, for the confound rules (repeatable; ARM '*' is "
                          "every arm): a serve flag (gpu_memory_utilization=0.9, "
                          "max_num_seqs=8, enable_prefix_caching=false, cache_type_k=q8_0), "
                          "engine.version=BUILD, load.KEY or spec.KEY."),
        click.option("--settings", "settings_file",
                     type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     default=None, metavar="FILE",
                     help="The same as YAML {ARM: {KEY: VALUE}}, e.g. a file beside the data; "
                          "--arm-setting wins where both set a key."),
        click.option("--arm-method", "arm_method", multiple=True, metavar="ARM=METHOD",
                     help="Method of ARM (repeatable): several methods in one import, or "
                          "ARM=none for a baseline rerun, paired against the baseline."),
        click.option("--trials-per-start", type=click.IntRange(min=1), default=None,
                     help="Consecutive trials one server start served (all trials from one "
                          "start: the number of trials), so verdicts carry the one-start "
                          "caveat; default: a fresh start per trial."),
    ]):
        fn = opt(fn)
    return fn


def arm_kwargs(arm_setting: tuple[str, ...], settings_file: Path | None,
               arm_method: tuple[str, ...], trials_per_start: int | None) -> dict[str, Any]:
    """The importers' keyword arguments of the :func:`arm_options` given."""
    from crossbench.importers.records import parse_arm_methods, parse_arm_settings

    return {"arm_settings": parse_arm_settings(arm_setting, settings_file),
            "arm_methods": parse_arm_methods(arm_method), "trials_per_start": trials_per_start}


@import_.command("llama-server", epilog="""\b
Examples:
  crossbench import llama-server raw/ --pattern '{model}_{arm}_p{prompt}.json' \\
      --baseline-arm baseline --out runs/imported
  crossbench import llama-server raw/ --pattern '{model}_{arm}_t{trial}_p{prompt}.json' \\
      --baseline-arm base --n-from-arm 'n(\\d+)' --prompts prompts.jsonl --out runs/imp
  crossbench import llama-server raw/ --pattern '{model}_{arm}_p{prompt}.json' \\
      --baseline-arm base --arm-method rerun=none --arm-method dflash=draft-dflash \\
      --arm-setting '*:cache_type_k=q8_0' --trials-per-start 3 --out runs/imp
""")
@click.argument("raw_dir", type=click.Path(path_type=Path))
@click.option("--pattern", required=True,
              help="File names with {model}, {arm}, {prompt} and optional {trial}, {start} "
                   "(the server start, digits), {category}.")
@click.option("--baseline-arm", required=True, help="The arm that ran without speculation.")
@click.option("--n-from-arm", default=None,
              help="Regex whose first group is n in an arm's name, e.g. 'n(\\d+)'.")
@click.option("--prompts", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Prompts with ids and categories: JSONL or a JSON array of "
              "{id, category, prompt} objects.")
@click.option("--method", default=None,
              help="Method of the speculative arms when the bodies do not name it (e.g. "
                   "draft-dflash); without it such arms are recorded as method 'unknown'.")
@arm_options
@click.option("--out", type=click.Path(path_type=Path), required=True, help="New directory.")
@user_errors
def import_llama_server(raw_dir: Path, pattern: str, baseline_arm: str, n_from_arm: str | None,
                        prompts: Path | None, method: str | None, arm_setting: tuple[str, ...],
                        settings_file: Path | None, arm_method: tuple[str, ...],
                        trials_per_start: int | None, out: Path) -> None:
    """Import a folder of llama-server response bodies (one JSON file per request)."""
    from crossbench.importers.llama_server_raw import import_llama_server_raw

    _report(import_llama_server_raw(
        raw_dir, pattern, baseline_arm, out, n_from_arm, prompts, method,
        **arm_kwargs(arm_setting, settings_file, arm_method, trials_per_start)), out)


@import_.command("vllm-bench", epilog="""\b
Examples:
  crossbench import vllm-bench base.json eagle3-n3.json --engine vllm --out runs/vllm
  # label arms when running vllm bench serve: --metadata method=eagle3 n=3 engine=vllm
  crossbench import vllm-bench base.json mtp.json --engine vllm --prompts prompts.jsonl \\
      --arm-setting '*:enable_prefix_caching=false' --arm-setting mtp:max_num_seqs=8 \\
      --trials-per-start 3 --out runs/vllm
""")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False,
                                                    path_type=Path))
@click.option("--engine", default=None,
              help="The server that ran the study (vllm, sglang, llama-server); required "
                   "unless each result says --metadata engine=...: vLLM's `backend` field "
                   "names the client's protocol, not the server.")
@click.option("--prompts", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Prompts in the order they were sent (JSONL or a JSON array "
              "of {id, category, prompt}); request i is prompt i modulo their number, so "
              "repeats of a prompt count as one. Default: every request its own prompt.")
@click.option("--baseline-arm", default=None,
              help="The baseline among several arms without speculation (the others are "
                   "paired with it as reruns).")
@arm_options
@click.option("--out", type=click.Path(path_type=Path), required=True, help="New directory.")
@user_errors
def import_vllm_bench(files: tuple[Path, ...], engine: str | None, prompts: Path | None,
                      baseline_arm: str | None, arm_setting: tuple[str, ...],
                      settings_file: Path | None, arm_method: tuple[str, ...],
                      trials_per_start: int | None, out: Path) -> None:
    """Import `vllm bench serve --save-result` files (--save-detailed keeps per-request data)."""
    from crossbench.importers.vllm_bench import import_vllm_bench as run_import

    _report(run_import(list(files), out, engine=engine, baseline_arm=baseline_arm,
                       prompts=prompts,
                       **arm_kwargs(arm_setting, settings_file, arm_method, trials_per_start)),
            out)


@import_.command("llama-bench", epilog="""\b
Examples:
  llama-bench -m model.gguf -p 512 -n 128 -r 5 -o json > bench.json
  crossbench import llama-bench bench.json --out runs/llama-bench
""")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), required=True, help="New directory.")
@user_errors
def import_llama_bench(file: Path, out: Path) -> None:
    """Import `llama-bench -o json` output (one cell per test, one record per repetition)."""
    from crossbench.importers.llama_bench import import_llama_bench as run_import

    _report(run_import(file, out), out)
