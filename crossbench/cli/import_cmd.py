"""``crossbench import table`` and ``crossbench import llama-logs``: studies' own per-request
tables and llama.cpp's timing logs, added to the ``import`` group of ``analyze_cmd``."""

from __future__ import annotations

from pathlib import Path

import click

from crossbench.cli.analyze_cmd import _report, arm_kwargs, arm_options
from crossbench.cli.common import user_errors


@click.command("table", epilog="""\b
Examples:
  # one JSON file per arm, concurrency and trial: {"duration": ..., "output_throughput": ...,
  #   "requests": [{"ttft_ms": ..., "tpot_ms": ..., "output_tokens": ...}, ...]}
  crossbench import table results/*.json --engine vllm --model Qwen3-8B \\
      --pattern '{arm}_c{concurrency}_t{trial}.json' --baseline-arm baseline --method mtp \\
      --map output_tokens=requests[].output_tokens --map ttft:ms=requests[].ttft_ms \\
      --map tpot:ms=requests[].tpot_ms --map wall:s=duration \\
      --map throughput=output_throughput --out runs/study
  # one CSV row per request, labels in columns
  crossbench import table requests.csv --engine llama-server --model m \\
      --map arm=arm --map concurrency=conc --map trial=run --map prompt=prompt_id \\
      --map output_tokens=n_out --map ttft:s=ttft_s --map elapsed:s=latency_s \\
      --baseline-arm base --out runs/csv
""")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False,
                                                    path_type=Path))
@click.option("--map", "maps", multiple=True, metavar="FIELD[:UNIT]=PATH",
              help="Where FIELD is in the files (repeatable). Per request: output_tokens, "
                   "ttft (required), decode | tpot | elapsed (one required), start, "
                   "input_tokens, drafted, accepted, error; per trial: wall, throughput "
                   "(tok/s); labels: arm, trial, prompt, category, concurrency, model, "
                   "method, n, server_start. Times need a unit: s, ms, us or ns "
                   "(ttft:ms=ttft_ms). PATH: keys joined by dots, [] for each element of a list "
                   "(requests[].ttft_ms); a CSV column as written.")
@click.option("--pattern", default=None,
              help="File names with {label} placeholders (arm, trial, prompt, category, "
                   "concurrency, model, method, n, server_start), e.g. "
                   "'{arm}_c{concurrency}_t{trial}.json'.")
@click.option("--engine", required=True,
              help="The server the study ran (llama-server, vllm, sglang): its confound "
                   "rules apply; never guessed.")
@click.option("--model", default=None, help="Target model, when the files do not name it.")
@click.option("--concurrency", type=click.IntRange(min=1), default=None,
              help="Client concurrency, when the files do not give it.")
@click.option("--baseline-arm", required=True, help="The arm that ran without speculation.")
@click.option("--method", default=None,
              help="Method of the other arms when the files do not name it (e.g. mtp); "
                   "without it they are recorded as method 'unknown'.")
@click.option("--prompts", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Prompts with ids and categories: JSONL or a JSON array of "
              "{id, category, prompt} objects.")
@arm_options
@click.option("--out", type=click.Path(path_type=Path), required=True, help="New directory.")
@user_errors
def import_table(files: tuple[Path, ...], maps: tuple[str, ...], pattern: str | None,
                 engine: str, model: str | None, concurrency: int | None, baseline_arm: str,
                 method: str | None, prompts: Path | None, arm_setting: tuple[str, ...],
                 settings_file: Path | None, arm_method: tuple[str, ...],
                 trials_per_start: int | None, out: Path) -> None:
    """Import per-request tables a study wrote itself (JSON, JSON Lines or CSV).

    Per-trial wall time and throughput, where the files give them, are the wall throughput
    printed; without them (or request start times) none is printed, and the import says why.
    Fields, paths and units: docs/analysis.md "Importing other tools' results".
    """
    from crossbench.importers.table import import_table as run_import

    _report(run_import(list(files), list(maps), out, engine=engine,
                       baseline_arm=baseline_arm, model=model, pattern=pattern,
                       concurrency=concurrency, method=method, prompts=prompts,
                       **arm_kwargs(arm_setting, settings_file, arm_method, trials_per_start)),
            out)


@click.command("llama-logs", epilog="""\b
Examples:
  # llama-server logs, one file per arm and trial (its print_timings lines)
  crossbench import llama-logs logs/*.log --pattern '{arm}_t{trial}.log' \\
      --baseline-arm base --method draft-simple --model Qwen3-8B --out runs/logs
  # llama-completion / llama-cli output with llama_perf_context_print, prompts in order
  crossbench import llama-logs cli/*.txt --pattern '{arm}_{trial}.txt' \\
      --baseline-arm base --prompts prompts.jsonl --out runs/cli
""")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False,
                                                    path_type=Path))
@click.option("--pattern", required=True,
              help="File names with {arm} and optional {trial}, {prompt}, {category}, "
                   "{concurrency}, {model}, {method}, {n}, {server_start}, e.g. "
                   "'{arm}_t{trial}.log'.")
@click.option("--baseline-arm", required=True, help="The arm that ran without speculation.")
@click.option("--model", default=None,
              help="Target model, when the log has no general.name line and the pattern "
                   "no {model}.")
@click.option("--concurrency", type=click.IntRange(min=1), default=None,
              help="Client concurrency (default 1; required when a server log shows several "
                   "slots).")
@click.option("--method", default=None,
              help="Method of the other arms (e.g. draft-simple); without it they are "
                   "recorded as method 'unknown'.")
@click.option("--prompts", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Prompts in the order each log ran them (JSONL or a JSON "
              "array of {id, category, prompt}); default: requests numbered in log order.")
@arm_options
@click.option("--out", type=click.Path(path_type=Path), required=True, help="New directory.")
@user_errors
def import_llama_logs(files: tuple[Path, ...], pattern: str, baseline_arm: str,
                      model: str | None, concurrency: int | None, method: str | None,
                      prompts: Path | None, arm_setting: tuple[str, ...],
                      settings_file: Path | None, arm_method: tuple[str, ...],
                      trials_per_start: int | None, out: Path) -> None:
    """Import llama.cpp timing logs: llama-server's per-request print_timings lines and
    llama_perf_context_print blocks (llama-completion, llama-cli).

    TTFT = prompt eval time, decode time = eval time (docs/analysis.md); a log has no clock,
    so no wall throughput is printed.
    """
    from crossbench.importers.llama_logs import import_llama_logs as run_import

    _report(run_import(list(files), out, baseline_arm=baseline_arm, pattern=pattern,
                       model=model, concurrency=concurrency, method=method, prompts=prompts,
                       **arm_kwargs(arm_setting, settings_file, arm_method, trials_per_start)),
            out)
