"""``crossbench run``: one engine configuration, N trials, one run directory."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from crossbench.cli.common import field_settings, progress, user_errors
from crossbench.errors import UserError, first_validation_error

EPILOG = """\b
Examples:
  # baseline vs draft model on the project's fixture pair
  crossbench run --model "$(crossbench fixtures path target)" --spec none --out runs/base
  crossbench run --model "$(crossbench fixtures path target)" \\
      --draft "$(crossbench fixtures path draft)" --spec draft-simple --n 4 --out runs/dft
  # acceptance as a known quantity (ground truth for the suite's acceptance figures)
  crossbench run --model T.gguf --draft D.gguf --spec draft-simple --n 4 \\
      --synth-rates 0.9,0.7,0.5,0.2 --out runs/synth
  # a server behind an API key: the key stays in the environment, out of every record
  export LAB_SERVER_KEY=...
  crossbench run --model T.gguf --api-key-env LAB_SERVER_KEY --out runs/keyed
  # another engine: --spec takes its own method names, --set any field of its config
  crossbench run --engine vllm --model Qwen/Qwen3-8B --spec ngram --n 4 \\
      --set max_num_seqs=8 --out runs/vllm-ngram
"""

#: engine-config fields of the spec, and the ``run`` option that sets each (for errors)
SPEC_OPTIONS = {"type": "spec", "draft_model": "draft", "n": "n", "synth_rates": "synth_rates",
                "synth_len": "synth_len"}


INTEGRITY_HINTS = {
    "spec_configured_and_drafting": "n-gram methods draft only from repeated text (try a "
    "workload that repeats prompts); a draft method needs a draft model with the target's "
    "vocabulary",
    "counters_present": "use a llama-server build that exports spec_decode_* in /metrics",
    "per_request_sums_equal_counters": "another client used the server during the run; give "
    "crossbench the server to itself",
}


def parse_rates(value: str | None) -> list[float] | None:
    """``0.9,0.7`` -> [0.9, 0.7]; a clear error for anything else."""
    if value is None:
        return None
    try:
        rates = [float(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--synth-rates {value!r} is not a comma-separated list of numbers",
                        "write fractions such as 0.9,0.7,0.5,0.2") from None
    if any(r > 1.0 for r in rates):
        raise UserError(f"--synth-rates {value!r} has values above 1",
                        "rates are fractions in [0, 1], not percentages: write 0.9, not 90")
    return rates


def format_table(summary: dict[str, Any], engine: str | None = None) -> str:
    """The human table printed after a run of ``engine`` (a registered name; its declared
    counters say whether drafted tokens are counted at all)."""
    from crossbench.engines import registry

    counted = engine is None or registry.spec_counters(engine).draft_tokens is not None
    def f(v: Any, spec: str = ".2f") -> str:
        return "n/a" if v is None else format(v, spec)

    th, lat, acc = summary["throughput"], summary["latency_ms"], summary["acceptance"]
    req = summary["requests"]
    rows = [
        ("requests ok / error / incomplete", f"{req['ok']} / {req['error']} / {req['incomplete']}"),
        ("output tok/s pooled (sum tokens / sum decode time)", f(th["pooled_tok_s"])),
        ("output tok/s request-mean", f(th["request_mean_tok_s"])),
        ("output tok/s server's own timing (pooled, same window)",
         f(th["server_pooled_tok_s"]) + (f" (client {th['client_vs_server']:+.2%})"
                                         if th.get("client_vs_server") is not None else "")),
        ("TTFT ms p50 / p99", f"{f(lat['ttft']['p50'])} / {f(lat['ttft']['p99'])}"),
        ("TPOT ms p50 / p99 (per token after the first)",
         f"{f(lat['tpot']['p50'], '.3f')} / {f(lat['tpot']['p99'], '.3f')}"),
        ("chunk gap ms p50 / p99", f"{f(lat['chunk_gap']['p50'], '.3f')} / "
                                   f"{f(lat['chunk_gap']['p99'], '.3f')}"),
    ]
    if acc["enabled"]:
        per_pos = acc["per_position"]
        rows += [
            (f"draft acceptance rate (accepted/drafted, from {acc['source']})",
             f(acc["draft_acceptance_rate"], ".4f")),
            ("mean acceptance length (1 + accepted/drafts)",
             f(acc["mean_acceptance_length"], ".3f")),
            ("per-position acceptance (position 0 first)",
             ", ".join(f"{p:.3f}" for p in per_pos) if per_pos else "n/a"),
        ]
        expected = acc.get("expected_per_position")
        if expected:  # synthetic acceptance as the engine counts it (analysis/synthetic.py)
            from crossbench.analysis.synthetic import CLIP_NOTE

            how = ("clipped drafts" if str(acc.get("expected_note") or "").startswith(CLIP_NOTE)
                   else "as configured")
            rows.append((f"expected per position (synthetic, {how})",
                         ", ".join(f"{p:.3f}" for p in expected)))
        rows += [
            ("drafts / drafted / accepted", f"{f(acc['drafts'], '.0f')} / "
             + (f"{acc['draft_tokens']:.0f}" if counted or acc["source"] != "metrics"
                else "n/a (not counted by the engine)")
             + f" / {acc['accepted_tokens']:.0f}"),
        ]
    integ = summary["integrity"]
    failed = [c["name"] for c in integ["checks"] if not c["passed"]]
    rows.append(("integrity", "pass" if integ["passed"] else "FAIL: " + ", ".join(failed)))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


@click.command(epilog=EPILOG)
@click.option("--engine", default="llama-server", show_default=True,
              help="Engine adapter (a registered name: llama-server, vllm, ...).")
@click.option("--model", required=True,
              help="Target GGUF: a path, or hf://OWNER/REPO@REVISION/FILE.gguf.")
@click.option("--draft", default=None, help="Draft GGUF: a path or an hf:// reference.")
@click.option("--spec", "spec_type", default="none", show_default=True, metavar="METHOD",
              help="Speculative method as the engine names it (llama-server: a --spec-type "
              "such as draft-simple or ngram-mod; vllm: a --speculative-config method such "
              "as ngram or eagle3), or none.")
@click.option("--n", type=int, default=None, help="Most tokens drafted per step.")
@click.option("--synth-rates", default=None,
              help="Synthetic per-position acceptance, e.g. 0.9,0.7,0.5,0.2 (fractions).")
@click.option("--synth-len", type=float, default=None, help="Synthetic mean acceptance length.")
@click.option("--prompts", "workload", default="builtin:mixed", show_default=True,
              help="builtin:mixed | builtin:<category> | builtin:repeat | random:<N> | "
                   "file:<jsonl>.")
@click.option("--requests", type=int, default=20, show_default=True, help="Per trial.")
@click.option("--warmup", type=int, default=1, show_default=True, help="Warm-up requests.")
@click.option("--max-tokens", type=int, default=256, show_default=True)
@click.option("--trials", type=int, default=3, show_default=True)
@click.option("--concurrency", type=int, default=1, show_default=True)
@click.option("--rate", type=float, default=None, help="Poisson request rate (req/s).")
@click.option("--endpoint", type=click.Choice(["completions", "chat"]), default="completions",
              show_default=True)
@click.option("--temperature", type=float, default=0.0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--cache-prompt/--no-cache-prompt", default=False, show_default=True)
@click.option("--binary", type=click.Path(path_type=Path), default=None,
              help="The engine's executable (llama-server: your own build; default: "
              "crossbench's build of --pin).")
@click.option("--pin", default=None, help="Build pin to use (engines built by crossbench; "
              "default: the config's).")
@click.option("--variant", default=None, help="cpu or cuda-smNN (engines built by crossbench; "
              "default: cpu).")
@click.option("--ctx-size", type=int, default=None,
              help="Context size in tokens (engines with a ctx_size setting; default 4096).")
@click.option("--ngl", default=None, help="Layers on GPU (-ngl).")
@click.option("--threads", type=int, default=None, help="Server threads (-t).")
@click.option("--port", type=int, default=None, help="Server port (default: a free one).")
@click.option("--server-arg", "server_args", multiple=True,
              help="Extra raw server flag (repeatable), checked against the engine build; "
              "values of secret flags (--api-key) are recorded redacted.")
@click.option("--set", "settings", multiple=True, metavar="FIELD=VALUE",
              help="Any field of the engine's config (repeatable; VALUE is YAML), e.g. "
              "--set max_num_seqs=8; see the engine's page for its fields.")
@click.option("--api-key-env", default=None, metavar="NAME",
              help="Environment variable holding the server's API key: passed to the server "
              "in its environment, sent as Authorization: Bearer, never recorded.")
@click.option("--api-key-file", type=click.Path(path_type=Path), default=None,
              help="File whose first line is the server's API key (instead of --api-key-env).")
@click.option("--reuse-server", is_flag=True, help="One server for all trials (default: fresh), "
              "its cache reset and a warm-up before each.")
@click.option("--trials-per-start", type=click.IntRange(min=1), default=1, show_default=True,
              help="Trials back to back on one server start (cache reset and warm-up before "
              "each); the analysis resamples starts, not reused trials.")
@click.option("--json", "as_json", is_flag=True, help="Print summary.json instead of a table.")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Run directory.")
@user_errors
def run(**o: Any) -> None:
    """Run one configuration for N trials and write raw records plus a summary."""
    from crossbench.engines import registry
    from crossbench.models import parse_model_ref, resolve_model
    from crossbench.runner.config import RunConfig
    from crossbench.runner.single import run as run_once

    refs = {k: o[k] for k in ("model", "draft") if o[k] is not None and o[k].startswith("hf://")}
    for key in ("model", "draft"):
        if o[key] is not None:
            o[key] = resolve_model(parse_model_ref(o[key]))
    engine = o["engine"]
    methods = registry.spec_methods(engine)
    if methods is not None and o["spec_type"] not in methods:
        raise UserError(f"--spec {o['spec_type']!r} is not a {engine} method",
                        f"use one of: {', '.join(methods)}")
    spec: dict[str, Any] = {"type": o["spec_type"]}
    for key, val in (("n", o["n"]), ("draft_model", o["draft"]),
                     ("synth_rates", parse_rates(o["synth_rates"])),
                     ("synth_len", o["synth_len"])):
        if val is not None:
            spec[key] = val
    engine_cfg = engine_config(engine, o, click.get_current_context())
    engine_cfg.update(model=o["model"], spec=spec)
    engine_cfg.update(field_settings(o["settings"], "max_num_seqs=8"))
    options = {f: opt for opt, f in registry.run_options(engine).items()}
    try:
        cfg = RunConfig.model_validate({
            "engine": engine,
            "engine_config": json.loads(json.dumps(engine_cfg, default=str)),
            "trials": o["trials"], "fresh_server": not o["reuse_server"],
            "trials_per_start": o["trials_per_start"], "model_refs": refs,
            "load": {"workload": o["workload"], "requests": o["requests"],
                     "warmup": o["warmup"], "max_tokens": o["max_tokens"],
                     "endpoint": o["endpoint"], "temperature": o["temperature"],
                     "seed": o["seed"], "cache_prompt": o["cache_prompt"],
                     "concurrency": o["concurrency"], "rate": o["rate"]},
        })
        registry.config_class(engine).model_validate(cfg.engine_config)
    except ValidationError as e:
        field, _, msg = first_validation_error(e)
        raise UserError(f"{field}: {msg}", f"fix {_flag(field, options, o['settings'])}") \
            from None
    summary = run_once(cfg, o["out"], progress=progress, argv=sys.argv)
    if o["as_json"]:
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(format_table(summary, engine))
        progress(f"raw records and summary in {o['out']}")
    failed = [c for c in summary["integrity"]["checks"] if not c["passed"]]
    if failed:
        click.echo(f"crossbench: failed: integrity check {failed[0]['name']}: "
                   f"{failed[0]['detail']} (fix: {INTEGRITY_HINTS.get(failed[0]['name'], '')})",
                   err=True)
        sys.exit(1)


def engine_config(engine: str, o: dict[str, Any], ctx: click.Context) -> dict[str, Any]:
    """The engine config that ``crossbench run``'s engine options give: each option the
    engine takes (:func:`crossbench.engines.registry.run_options`, derived from its config
    model) as given, else its config field's default when that is set; an option given for
    an engine without the setting is a UserError naming it."""
    from pydantic_core import PydanticUndefined

    from crossbench.engines import registry

    takes = registry.run_options(engine)
    fields = registry.config_class(engine).model_fields
    out: dict[str, Any] = {}
    for opt in registry.RUN_OPTION_FIELDS:
        given = ctx.get_parameter_source(opt) not in (None, click.core.ParameterSource.DEFAULT)
        if opt not in takes:
            if given:
                flag = "--" + opt.replace("_", "-")
                raise UserError(f"{flag}: {engine} has no {registry.RUN_OPTION_FIELDS[opt]} "
                                "setting", f"drop {flag}, or set one of the engine's own "
                                "fields with --set FIELD=VALUE")
            continue
        name = takes[opt]
        value = o[opt]
        if isinstance(value, tuple):
            value = list(value)
        if not given:
            default = fields[name].get_default(call_default_factory=True)
            value = None if default is PydanticUndefined else default
        if value is not None:
            out[name] = value
    return out


def _flag(field: str, options: dict[str, str], settings: tuple[str, ...]) -> str:
    """The ``run`` option that sets an engine-config field named in a validation error."""
    head, _, rest = field.partition(".")
    if head == "engine_config":
        head, _, rest = rest.partition(".")
    if head == "spec" and rest.split(".")[0] in SPEC_OPTIONS:
        return "--" + SPEC_OPTIONS[rest.split(".")[0]].replace("_", "-")
    if head in options:
        return "--" + options[head].replace("_", "-")
    if any(s.partition("=")[0].strip() == head for s in settings):
        return f"--set {head}=..."
    return "--" + field.split(".")[-1].replace("_", "-")


@click.command(epilog="""\b
Examples:
  crossbench summarize runs/synth            # print the table again
  crossbench summarize runs/synth --check    # exit 1 if summary.json does not re-derive
""")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--check", is_flag=True,
              help="Compare with the stored summary.json instead of printing; exit 1 on any "
              "difference.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@user_errors
def summarize(run_dir: Path, check: bool, as_json: bool) -> None:
    """Recompute a run's summary from its raw files alone (records and /metrics snapshots)."""
    from crossbench.analysis.summary import summarize_run_dir
    from crossbench.store import rundir

    if not rundir.is_run(run_dir):
        raise UserError(f"{run_dir} has no {rundir.MANIFEST}",
                        "point at a `crossbench run --out` dir")
    # read through store.rundir: a newer manifest, a damaged line or a request recorded
    # twice is a one-line error naming the file, as in `crossbench analyze`
    fresh = summarize_run_dir(run_dir)
    if check:
        path = run_dir / rundir.SUMMARY
        stored = rundir.read_summary(path, f"regenerate it with `crossbench summarize "
                                           f"{run_dir} --json > {path}`")
        if not _same_summary(stored, json.loads(json.dumps(fresh))):
            click.echo(f"crossbench: failed: {run_dir}/summary.json does not match its raw "
                       "files (fix: regenerate it with `crossbench summarize`)", err=True)
            sys.exit(1)
        click.echo(f"{run_dir}: summary.json re-derives from the raw records")
        return
    from crossbench.engines import registry

    kind = (rundir.read_manifest(run_dir).get("config") or {}).get("engine")
    click.echo(json.dumps(fresh, indent=2) if as_json else
               format_table(fresh, kind if kind in registry.names() else None))


def _same_summary(stored: dict[str, Any], fresh: dict[str, Any]) -> bool:
    """Whether a stored summary re-derives: every field for the current version; for an
    older one, the fields it defines as this crossbench does (as ``archive verify`` does)."""
    from crossbench.analysis.summary import SUMMARY_REDEFINED, SUMMARY_SCHEMA

    version = stored.get("schema_version")
    if not isinstance(version, int) or version >= SUMMARY_SCHEMA:
        return stored == fresh
    from crossbench.archive.verify import differences, not_compared

    skip = not_compared(version, SUMMARY_SCHEMA, SUMMARY_REDEFINED)
    return not any(differences(stored, fresh, skip=skip))
