"""``crossbench verify-curve``: the target's forward time over k tokens per sequence (k =
1..16), at batch 1 timed by llama-bench, with P sequences a pass by llama-batched-bench,
against the expert-union prediction for an MoE target."""

from __future__ import annotations

import json
from pathlib import Path

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

On a CPU build the figures measure nothing about a GPU: they check the command, not the
mechanism.
""")
@click.option("--target", "targets", required=True, multiple=True,
              type=click.Path(path_type=Path),
              help="A target's GGUF (repeatable: e.g. the MoE target and its dense twin).")
@click.option("--k", "k_spec", default="1-16", show_default=True,
              help="Block sizes k (tokens per forward pass), 1..512, e.g. 1-16 or 1,2,4,8.")
@click.option("--parallel", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Sequences in each pass (a verification at concurrency P): above 1 the "
                   "passes are timed by llama-batched-bench, each on a cleared context.")
@click.option("--depth", type=click.IntRange(0, 131072), default=256, show_default=True,
              help="Context tokens before each timed pass (with --parallel above 1: 0, "
                   "llama-batched-bench clears the context before each pass).")
@click.option("--gen", type=click.IntRange(4, 4096), default=32, show_default=True,
              help="Tokens of the plain-step (generation) test, the unit of `plain steps`.")
@click.option("--reps", type=click.IntRange(1, 100), default=3, show_default=True,
              help="Repetitions per test (with --parallel above 1: passes per k, the "
                   "median taken, after one untimed warm-up pass).")
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
              help="Write the rows, each target's byte split and its raw llama-bench tests as "
                   "JSON to this file.")
@click.pass_context
@user_errors
def verify_curve(ctx: click.Context, targets: tuple[Path, ...], k_spec: str, parallel: int,
                 depth: int, gen: int, reps: int, bench: Path | None, variant: str | None,
                 bench_args: tuple[str, ...], out: Path | None) -> None:
    """Time each target's forward pass over k tokens at batch 1 (a verification block of k =
    n + 1 tokens) with llama-bench, in ms, in plain decode steps and relative to k = 1, and
    for an MoE target (its GGUF header names experts) set beside it the expert-union
    prediction: the relative cost if the pass were memory-bound and loaded the expected
    number of distinct experts k tokens route to under uniform random routing (real routers
    are more local). A dense target has no prediction. With --parallel P, each pass holds P
    sequences of k tokens (a verification at concurrency P, timed by llama-batched-bench),
    its unit the plain step of one token per sequence, its prediction that of P k tokens
    against P. On a CPU the figures measure nothing about a GPU (docs/moe-vs-dense.md
    "Measuring the verification curve")."""
    from crossbench.analysis import decompose as dec
    from crossbench.analysis import verify_curve as vc
    from crossbench.runner.axes import parse_int_axis

    ks = parse_int_axis(k_spec, "--k")
    vc.check_k(ks)
    batched = parallel > 1
    if batched and depth != 0:
        if ctx.get_parameter_source("depth") is not click.core.ParameterSource.DEFAULT:
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
    splits = {path: vc.weight_split(path) for path in targets}
    tool = "llama-batched-bench" if batched else "llama-bench"
    binary = llama_bench_binary(bench, variant, tool)
    prompts = sorted({1, *ks})  # k = 1 always, the reference of `x k=1`
    click.echo(f"prediction: {vc.ASSUMPTION}")
    results = []
    for path in targets:
        split = splits[path]
        each = f" for each of {parallel} sequences" if batched else ""
        progress(f"timing {path.name}: plain step and forward passes of {ks} tokens{each}")
        if batched:
            tests = vc.run_batched_bench(binary, path, prompts, parallel, gen, reps,
                                         list(bench_args))
            m = vc.from_batched(tests)
        else:
            tests = dec.run_llama_bench(binary, path, prompts, gen, depth, reps,
                                        list(bench_args))
            m = dec.from_bench(tests)
        rows = vc.curve(m, ks, split, parallel)
        kind = ("dense: no prediction" if split is None else
                f"MoE: {split.n_experts} experts, top-{split.top_k}, {split.moe_layers} MoE "
                f"layers, {split.dense_bytes / 1e6:.2f} MB dense + "
                f"{split.bytes_per_expert / 1e6:.3f} MB per expert")
        where = (f"one token for each of {parallel} sequences, passes on a cleared context"
                 if batched else f"at depth {m.depth}")
        click.echo(f"{path.name}: plain step {m.plain_ms:.3f} ms ({where}); {kind}")
        click.echo(vc.format_rows(path.name, rows))
        results.append({"target": str(path), "name": path.name, "depth": m.depth,
                        "plain_ms": m.plain_ms, "split": vc.split_dict(split), "rows": rows,
                        "raw": m.raw["target"]})
    if out is not None:
        out.write_text(json.dumps({"assumption": vc.ASSUMPTION, "k": ks, "parallel": parallel,
                                   "depth": depth, "reps": reps, "gen": gen, "tool": tool,
                                   "bench": str(binary),
                                   "bench_args": list(bench_args), "targets": results},
                                  indent=1) + "\n")
        progress(f"wrote {out}")
