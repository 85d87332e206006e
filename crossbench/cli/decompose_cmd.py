"""``crossbench decompose``: a speculative step's parts (verification forward, drafting), each
timed by llama-bench or, for the verification of any engine, read from the baseline's steps at
several concurrencies (``--verify-from``), against the cost model d + v n a study fitted."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from crossbench.cli.common import llama_bench_binary, progress, user_errors
from crossbench.errors import UserError


@click.command(epilog="""\b
Examples:
  crossbench decompose --target $(crossbench fixtures path target) \\
      --draft $(crossbench fixtures path draft) --n 1,2,4,8
  crossbench decompose --target t8b.gguf --draft d06b.gguf --n 2,4,8 --depth 300 \\
      --from examples/h200-methods/round1/h200-methods-round1.zip --arm draft-a0.9 \\
      --bench-arg=-ngl --bench-arg=99 --out decompose.json
  crossbench decompose --verify-from runs/h200-shapes --n 1,2,4,8,15 \\
      --from examples/h200-methods/round4/h200-methods-round4-vllm.zip --arm dflash-a0.9
""")
@click.option("--target", type=click.Path(path_type=Path),
              help="The target's GGUF (the file the study's server loaded); with "
                   "--verify-from only beside --draft, for the step the draft is counted in.")
@click.option("--verify-from", "verify_from", type=click.Path(path_type=Path),
              help="A run directory or archive with the baseline of one engine and target at "
                   "several concurrencies (matrices/h200-shapes.yaml): the verification of "
                   "n + 1 tokens is its step at concurrency n + 1 over its step at 1 (any "
                   "engine; interpolated between measured concurrencies, never beyond).")
@click.option("--engine", "engine_name", help="With --verify-from: the run's engine name "
              "(default: the --arm sweep's, else the run's only baseline); for an --arm at "
              "one n, also the engine whose cells of it to read.")
@click.option("--model", "model_name", help="With --verify-from: the run's target name "
              "(default: the --arm sweep's, else the run's only baseline).")
@click.option("--draft", type=click.Path(path_type=Path),
              help="A separate draft model's GGUF (its decode step per token is timed); "
                   "heads that read the target's states (EAGLE-3, DFlash, MTP) cannot be "
                   "timed alone.")
@click.option("--n", "n_spec", default="1,2,4,8", show_default=True,
              help="Draft lengths n (verification batches of n + 1 tokens), e.g. 1,2,4,8.")
@click.option("--depth", type=click.IntRange(0, 131072), default=256, show_default=True,
              help="Context tokens before each timed pass (about the study's prompt plus "
                   "half its output).")
@click.option("--gen", type=click.IntRange(4, 4096), default=32, show_default=True,
              help="Tokens of the plain-step (generation) test.")
@click.option("--reps", type=click.IntRange(1, 100), default=3, show_default=True,
              help="Timed llama-bench repetitions per test, their mean taken, after two "
                   "more left out (the CUDA graph's direct run and capture).")
@click.option("--from", "source", type=click.Path(path_type=Path),
              help="A run directory or archive whose n-sweep of --arm gives the fitted d and v "
                   "(an arm at fewer n than a line needs: each n's measured C(n) = MAL / "
                   "speedup).")
@click.option("--arm", help="With --from: the speculative arm whose cost model to compare.")
@click.option("--concurrency", type=click.IntRange(1), default=1, show_default=True,
              help="With --from: the sweep's concurrency.")
@click.option("--method", default="draft-simple", show_default=True,
              help="The method (without --from): heads (draft-eagle3, draft-dflash, "
                   "draft-mtp) leave drafting in the rest.")
@click.option("--bench", "bench", type=click.Path(path_type=Path),
              help="llama-bench binary (default: the one `crossbench engines install "
                   "llama.cpp` built, of --variant).")
@click.option("--variant", help="Which of crossbench's llama.cpp builds times the parts: cpu "
              "or cuda-smNN (default: with --from, the build the run's cells recorded, so the "
              "parts are timed by the build the study ran; else cpu).")
@click.option("--bench-arg", "bench_args", multiple=True,
              help="An argument passed on to llama-bench (repeatable; e.g. --bench-arg=-ngl "
                   "--bench-arg=99 on a GPU, as the server ran).")
@click.option("--out", type=click.Path(path_type=Path),
              help="Write the raw llama-bench tests and the rows as JSON to this file.")
@user_errors
def decompose(target: Path | None, verify_from: Path | None, engine_name: str | None,
              model_name: str | None, draft: Path | None, n_spec: str, depth: int, gen: int,
              reps: int, source: Path | None, arm: str | None, concurrency: int, method: str,
              bench: Path | None, variant: str | None, bench_args: tuple[str, ...],
              out: Path | None) -> None:
    """Split a speculative step into its target verification forward (n + 1 tokens) and its
    drafting, each timed by llama-bench in plain decode steps (or the verification read from
    the baseline's steps at concurrency n + 1, --verify-from, for any engine), and compare
    their sum with the cost model C(n) = d + v n a study fitted (--from, --arm): the rest is
    sampling, host work and what was not timed (docs/analysis.md "Where a step's cost
    goes")."""
    from crossbench.analysis import decompose as dec
    from crossbench.runner.axes import parse_int_axis

    n_values = parse_int_axis(n_spec, "--n")
    for flag, path in (("--target", target), ("--draft", draft)):
        if path is not None and not path.is_file():
            raise UserError(f"{flag} {path} is not a file", f"give {flag} a GGUF file")
    if verify_from is None and target is None:
        raise UserError("--target is required without --verify-from",
                        "give the target's GGUF, or --verify-from a run with its baseline at "
                        "several concurrencies")
    if verify_from is not None and (target is None) != (draft is None):
        raise UserError("with --verify-from, --target and --draft go together (the draft's "
                        "step is counted in the target's llama-bench step)",
                        "give both, or neither (the drafting then stays in the rest)")
    if (source is None) != (arm is None):
        raise UserError("--from and --arm go together",
                        "give both (the run and its speculative arm) or neither")
    if out is not None:
        from crossbench.store.rundir import check_out_file

        check_out_file(out)
    from crossbench.frames import open_run

    d = v = None
    sweep: dict[str, object] = {}
    measured: dict[int, float] = {}
    frames = None
    if source is not None and arm is not None:
        frames = open_run(source)
        try:
            d, v, method = dec.sweep_cost_model(frames.analysis, arm, concurrency)
            sweep = dec.find_sweep(frames.analysis, arm, concurrency)
        except UserError as no_fit:  # fewer n than a line needs: each n's own C(n)
            sweep = dec.arm_points(frames.analysis, arm, concurrency, engine_name)
            measured = dec.measured_costs(sweep)
            if not measured:
                raise no_fit from None
            method = str(sweep.get("method"))
            progress(f"{no_fit.message}: C(n) measured at n = "
                     f"{', '.join(map(str, measured))} (MAL / speedup), no fit")
        variant = variant or dec.recorded_variant(frames.run.cells)
    runs = reps + dec.GRAPH_WARMUP_REPS  # the first two left out: the CUDA graph's warm-up
    shape = None
    if verify_from is not None:
        vframes = frames if frames is not None and verify_from == source else \
            open_run(verify_from)  # held while its (unpacked) cells are read
        shape = dec.batch_shape(vframes.run.cells,
                                engine_name or _name(sweep.get("engine")),
                                model_name or _name(sweep.get("model")), depth)
        m = dec.from_batch_shape(shape, n_values, concurrency)
        if target is not None and draft is not None and method not in dec.HEADS:
            binary = llama_bench_binary(bench, variant)
            progress(f"timing {target.name} and {draft.name}: their decode steps")
            tt, dt = (dec.run_llama_bench(binary, p, [], gen, depth, runs, list(bench_args))
                      for p in (target, draft))
            m.draft_plain_ms, m.draft_ms_per_token = (
                dec.bench_step_ms(dec.steady_tests(tt), "target"),
                dec.bench_step_ms(dec.steady_tests(dt), "draft"))
            m.raw = {"target": tt, "draft": dt}
    else:
        assert target is not None  # checked above
        binary = llama_bench_binary(bench, variant)
        progress(f"timing {target.name}: plain step and verification of {n_values} + 1 tokens")
        tt = dec.run_llama_bench(binary, target, [n + 1 for n in n_values], gen, depth, runs,
                                 list(bench_args))
        dt = None
        if draft is not None and method not in dec.HEADS:
            progress(f"timing {draft.name}: its decode step")
            dt = dec.run_llama_bench(binary, draft, [], gen, depth, runs, list(bench_args))
        m = dec.from_bench(tt, dt, warmup=dec.GRAPH_WARMUP_REPS)
    rows = dec.decompose(m, n_values, d, v, method, measured)
    if frames is not None:  # the run's own telemetry: GPU work and idle per step
        split = dec.telemetry_split(frames.analysis, dict(sweep))
        for row in rows:
            row.update(split.get(row["n"], {}))
            row.update(dec.shape_split(row))
    if shape is not None:
        kv = shape.kv
        click.echo(f"plain step {m.plain_ms:.3f} ms: {shape.engine}/{shape.target} baseline "
                   f"at concurrency {concurrency} ({shape.workload}); KV bound: one sequence's "
                   f"cache{' and recurrent state' if kv.get('state_bytes_per_sequence') else ''}"
                   f" at {kv['context_tokens']} tokens is "
                   f"{kv['kv_bytes_per_sequence'] / 1e6:.1f} MB against "
                   f"{kv['weight_bytes'] / 1e9:.2f} GB of weights ({kv['shape']}; weights: "
                   f"{kv['weights_from']})")
    said = [f"plain step {m.plain_ms:.3f} ms at depth {m.depth}" if shape is None else
            f"target's llama-bench step {m.draft_plain_ms:.3f} ms" if m.draft_plain_ms else "",
            f"draft step {m.draft_ms_per_token:.3f} ms" if m.draft_ms_per_token else "",
            f"fitted d {d:.2f}, v {v:.3f} ({method})" if d is not None and v is not None
            else ""]
    if any(said):
        click.echo("; ".join(x for x in said if x))
    click.echo(dec.format_rows(rows))
    for note in m.notes:
        click.echo(f"warning: {note}", err=True)
    if out is not None:
        result = {"method": method, "d": d, "v": v,
                  "measured_cost": {str(n): c for n, c in measured.items()} or None,
                  "depth": m.depth,
                  "verify_source": "batch shape" if shape else "llama-bench", "rows": rows,
                  "warmup_reps": dec.GRAPH_WARMUP_REPS if m.raw.get("target") else 0,
                  "notes": m.notes, "raw": m.raw}
        if shape is not None:
            result["batch_shape"] = asdict(shape)
        out.write_text(json.dumps(result, indent=1) + "\n")
        progress(f"wrote {out}")


def _name(value: object) -> str | None:
    """A sweep's engine or model name, or None where it has none."""
    return value if isinstance(value, str) else None
