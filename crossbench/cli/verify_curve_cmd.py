"""``crossbench verify-curve``: the target's forward time over k tokens per sequence (k =
1..16), at batch 1 timed by llama-bench, with P sequences a pass by llama-batched-bench, or
for any engine read from a run's baseline at several concurrencies, against the expert-union
prediction for an MoE target."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from crossbench.cli.common import llama_bench_binary, progress, user_errors
from crossbench.errors import UserError


@click.command("verify-curve", epilog="""\b
Examples:
  crossbench verify-curve --target $(crossbench fixtures path moe-target) \\
      --target $(crossbench fixtures path dense-twin) --k 1,2,4,8 --depth 64 --reps 1
  crossbench verify-curve --target moe.gguf --target dense.gguf --k 1-16 --depth 300 \\
      --variant cuda-sm90 --bench-arg=-ngl --bench-arg=99 --out verify-curve.json
  crossbench verify-curve --target moe.gguf --target dense.gguf --k 1-16 --parallel 16 \\
      --variant cuda-sm90 --bench-arg=-ngl --bench-arg=99 --out verify-curve-c16.json
  crossbench verify-curve --verify-from runs/h200-moe-shapes --engine vllm-q35 --k 1-16

On a CPU build the figures measure nothing about a GPU: they check the command, not the
mechanism.
""")
@click.option("--target", "targets", multiple=True, type=click.Path(path_type=Path),
              help="A target's GGUF (repeatable: e.g. the MoE target and its dense twin).")
@click.option("--verify-from", "verify_from", type=click.Path(path_type=Path),
              help="Instead of --target: a run (or archive) whose baseline ran at several "
                   "concurrencies (any engine): a pass of k tokens for each of P sequences is "
                   "read as its step at concurrency P k, interpolated between measured "
                   "concurrencies, never extrapolated.")
@click.option("--engine", "engine_name", help="With --verify-from: the engine name of the "
              "baselines to read (default: every one in the run).")
@click.option("--model", "model_names", multiple=True, help="With --verify-from: a target "
              "name of the run (repeatable; default: every one).")
@click.option("--k", "k_spec", default="1-16", show_default=True,
              help="Block sizes k (tokens per forward pass), 1..512, e.g. 1-16 or 1,2,4,8.")
@click.option("--parallel", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Sequences in each pass (a verification at concurrency P): above 1 the "
                   "passes are timed by llama-batched-bench, each on a cleared context.")
@click.option("--depth", type=click.IntRange(0, 131072), default=256, show_default=True,
              help="Context tokens before each timed pass (with --parallel above 1: 0, "
                   "llama-batched-bench clears the context before each pass; with "
                   "--verify-from: the KV bound's context where the run recorded none).")
@click.option("--gen", type=click.IntRange(4, 4096), default=32, show_default=True,
              help="Tokens of the plain-step (generation) test, the unit of `plain steps`.")
@click.option("--reps", type=click.IntRange(1, 100), default=3, show_default=True,
              help="Timed repetitions per test, their mean taken (at batch 1 after two "
                   "more left out: the CUDA graph's direct run and capture; with --parallel "
                   "above 1: passes per k, the median taken, after one untimed warm-up "
                   "pass).")
@click.option("--bench", type=click.Path(path_type=Path),
              help="llama-bench binary, or with --parallel above 1 llama-batched-bench "
                   "(default: the one `crossbench engines install llama.cpp` built, of "
                   "--variant).")
@click.option("--variant", help="Which of crossbench's llama.cpp builds times the passes: cpu "
              "or cuda-smNN (default cpu).")
@click.option("--bench-arg", "bench_args", multiple=True,
              help="An argument passed on to llama-bench (repeatable; e.g. --bench-arg=-ngl "
                   "--bench-arg=99 on a GPU).")
@click.option("--out", type=click.Path(path_type=Path),
              help="Write the rows, each target's byte split and its raw llama-bench tests (or "
                   "batch-shape cells) as JSON to this file.")
@click.pass_context
@user_errors
def verify_curve(ctx: click.Context, targets: tuple[Path, ...], verify_from: Path | None,
                 engine_name: str | None, model_names: tuple[str, ...], k_spec: str,
                 parallel: int, depth: int, gen: int, reps: int, bench: Path | None,
                 variant: str | None, bench_args: tuple[str, ...], out: Path | None) -> None:
    """Time each target's forward pass over k tokens at batch 1 (a verification block of k =
    n + 1 tokens) with llama-bench, in ms, in plain decode steps and relative to k = 1, and
    for an MoE target (its GGUF header names experts) set beside it the expert-union
    prediction: the relative cost if the pass were memory-bound and loaded the expected
    number of distinct experts k tokens route to under uniform random routing (real routers
    are more local). A dense target has no prediction. With --parallel P, each pass holds P
    sequences of k tokens (a verification at concurrency P, timed by llama-batched-bench),
    its unit the plain step of one token per sequence, its prediction that of P k tokens
    against P. With --verify-from, the passes are a run's baseline steps at concurrency P k
    (any engine; vLLM's curve), the prediction from the recorded target (a fixture's shape,
    a local GGUF or Hugging Face folder). For an MoE target it also fits the measured times
    as a line in the bytes the prediction says each pass reads (a fixed part plus a read
    rate, with R²): how much of the growth the expert bytes explain. On a CPU the figures
    measure nothing about a GPU (docs/moe-vs-dense.md "Measuring the verification curve")."""
    from crossbench.analysis import verify_curve as vc
    from crossbench.runner.axes import parse_int_axis

    ks = parse_int_axis(k_spec, "--k")
    vc.check_k(ks)

    def given(name: str) -> bool:
        return ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT

    if (verify_from is None) == (not targets):
        raise UserError("give --target or --verify-from (one of them)",
                        "--target GGUF files to time with llama-bench, or --verify-from a run "
                        "whose baseline ran at several concurrencies")
    if verify_from is None and (engine_name or model_names):
        raise UserError("--engine and --model pick baselines of --verify-from",
                        "give --verify-from RUN, or leave them out")
    if verify_from is not None:
        unused = [f"--{n.replace('_', '-')}" for n in ("gen", "reps", "bench", "variant")
                  if given(n)] + (["--bench-arg"] if bench_args else [])
        if unused:
            raise UserError(f"{unused[0]}: not used with --verify-from (the run's baseline "
                            "steps are the measurement)", f"leave {', '.join(unused)} out")
    elif parallel > 1 and depth != 0:
        if given("depth"):
            raise UserError(f"--depth {depth}: with --parallel {parallel} each pass runs on a "
                            "cleared context (llama-batched-bench's prompt phase)",
                            "leave --depth out (or give 0) with --parallel")
        depth = 0
    for path in targets:
        if not path.is_file():
            raise UserError(f"--target {path} is not a file", "give --target a GGUF file")
    if out is not None:
        from crossbench.store.rundir import check_out_file

        check_out_file(out)
    if verify_from is not None:
        doc = _from_shapes(verify_from, engine_name, model_names, ks, parallel, depth)
    else:
        doc = _from_gguf(targets, ks, parallel, depth, gen, reps, bench, variant, bench_args)
    if out is not None:
        out.write_text(json.dumps({"assumption": vc.ASSUMPTION, "k": ks, "parallel": parallel,
                                   **doc}, indent=1) + "\n")
        progress(f"wrote {out}")


def _kind(split: Any) -> str:
    """One line on a target's byte split (or that it is dense)."""
    if split is None:
        return "dense: no prediction"
    return (f"MoE: {split.n_experts} experts, top-{split.top_k}, {split.moe_layers} MoE layers, "
            f"{split.dense_bytes / 1e6:.2f} MB dense + {split.bytes_per_expert / 1e6:.3f} MB "
            "per expert")


def _from_gguf(targets: tuple[Path, ...], ks: list[int], parallel: int, depth: int, gen: int,
               reps: int, bench: Path | None, variant: str | None,
               bench_args: tuple[str, ...]) -> dict[str, Any]:
    """Time each GGUF with llama-bench (P = 1) or llama-batched-bench, print its rows, return
    the ``--out`` fields."""
    from crossbench.analysis import decompose as dec
    from crossbench.analysis import verify_curve as vc

    batched = parallel > 1
    splits = {path: vc.weight_split(path) for path in targets}
    tool = "llama-batched-bench" if batched else "llama-bench"
    binary = llama_bench_binary(bench, variant, tool)
    prompts = sorted({1, *ks})  # k = 1 always, the reference of `x k=1`
    click.echo(f"prediction: {vc.ASSUMPTION}")
    if bench is None and (variant or "cpu") == "cpu":
        click.echo("note: timed by crossbench's CPU build: this is a CPU's curve and says "
                   "nothing about a GPU (give --variant cuda-smNN on a GPU host)")
    results = []
    for path in targets:
        split = splits[path]
        each = f" for each of {parallel} sequences" if batched else ""
        progress(f"timing {path.name}: plain step and forward passes of {ks} tokens{each}")
        if batched:
            tests = vc.run_batched_bench(binary, path, prompts, parallel, gen, reps,
                                         list(bench_args))
            m = vc.from_batched(tests)
        else:  # two more repetitions, left out of the rows: the CUDA graph's warm-up
            tests = dec.run_llama_bench(binary, path, prompts, gen, depth,
                                        reps + dec.GRAPH_WARMUP_REPS, list(bench_args))
            m = dec.from_bench(tests, warmup=dec.GRAPH_WARMUP_REPS)
        rows = vc.curve(m, ks, split, parallel)
        where = (f"one token for each of {parallel} sequences, passes on a cleared context"
                 if batched else f"at depth {m.depth}")
        click.echo(f"{path.name}: plain step {m.plain_ms:.3f} ms ({where}); {_kind(split)}")
        click.echo(vc.format_rows(path.name, rows))
        line = vc.bytes_line(split, rows)
        if line is not None:
            click.echo(vc.format_bytes_line(line))
        results.append({"target": str(path), "name": path.name, "depth": m.depth,
                        "plain_ms": m.plain_ms, "split": vc.split_dict(split), "rows": rows,
                        "bytes_line": line, "raw": m.raw["target"]})
    return {"source": tool, "depth": depth, "reps": reps,
            "warmup_reps": 0 if batched else dec.GRAPH_WARMUP_REPS, "gen": gen, "tool": tool,
            "bench": str(binary), "bench_args": list(bench_args), "targets": results}


def _from_shapes(source: Path, engine_name: str | None, model_names: tuple[str, ...],
                 ks: list[int], parallel: int, depth: int) -> dict[str, Any]:
    """Read each baseline of ``source`` (matching the names) at concurrency P k, print its
    rows, return the ``--out`` fields."""
    from crossbench.analysis import decompose as dec
    from crossbench.analysis import verify_curve as vc
    from crossbench.frames import open_run

    with open_run(source) as frames:
        cells = frames.run.cells
        groups = sorted({(str(c.coords.get("engine")), str(c.coords.get("target")))
                         for c in cells if not c.speculative
                         and engine_name in (None, c.coords.get("engine"))
                         and (not model_names or c.coords.get("target") in model_names)})
        if not groups:
            have = sorted({f"{c.coords.get('engine')}/{c.coords.get('target')}"
                           for c in cells if not c.speculative})
            raise UserError(f"--verify-from {source}: no baseline matches --engine/--model "
                            f"(the run's: {', '.join(have) or 'none'})",
                            "name an engine and target the run's baseline ran on")
        click.echo(f"prediction: {vc.ASSUMPTION}")
        results = []
        for engine, target in groups:
            shape = dec.batch_shape(cells, engine, target, depth)
            m = dec.from_batch_shape(shape, [k - 1 for k in sorted({1, *ks})], parallel)
            base = next(c for c in cells if not c.speculative
                        and (c.coords.get("engine"), c.coords.get("target")) == (engine, target))
            ref = str((base.config.get("model_refs") or {}).get("model") or "")
            split, split_from = vc.model_weight_split(ref)
            rows = vc.curve(m, ks, split, parallel)
            for row in rows:
                row.update(m.verify_extra.get(row["k"], {}))
            name = f"{engine}/{target}"
            ran = ", ".join(str(c["concurrency"]) for c in shape.cells)
            share = max(r["kv_extra_share"] for r in rows)
            click.echo(f"{name}: plain step {m.plain_ms:.3f} ms (its baseline at concurrency "
                       f"{parallel}; a pass of k tokens a sequence read as its step at "
                       f"concurrency {parallel} k; measured at c = {ran}); "
                       f"{_kind(split) if split else split_from}")
            state = " and recurrent state" if shape.kv.get("state_bytes_per_sequence") else ""
            click.echo(f"  the extra sequences' KV{state} reads: at most {share:.1%} of the "
                       f"bytes a step reads ({shape.kv['shape']})")
            click.echo(vc.format_rows(name, rows))
            line = vc.bytes_line(split, rows)
            if line is not None:
                click.echo(vc.format_bytes_line(line))
            results.append({"name": name, "engine": engine, "target": target, "model": ref,
                            "plain_ms": m.plain_ms, "split": vc.split_dict(split),
                            "split_from": split_from, "rows": rows, "bytes_line": line,
                            "cells": shape.cells, "kv": shape.kv})
    return {"source": "batch shape", "verify_from": str(source), "targets": results}
