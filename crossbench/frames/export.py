"""``crossbench export``: a run's frames as Parquet or CSV (with each column's unit and
meaning), and its cells as ``vllm bench serve --save-result --save-detailed`` JSON, one
result per trial on its own line. Units as vLLM writes them: per-request lists in seconds,
aggregates in milliseconds, ``spec_decode_acceptance_rate`` a percentage (0-100). What each
format holds: docs/python-api.md, "crossbench export".
"""

from __future__ import annotations

import itertools
import json
import statistics
import time
from pathlib import Path
from typing import Any

from crossbench import __version__
from crossbench.analysis.rundir import CellData
from crossbench.analysis.summary import output_tokens, summarize_run_dir
from crossbench.errors import UserError
from crossbench.frames import RunFrames
from crossbench.frames.columns import FRAMES
from crossbench.store import rundir
from crossbench.store.atomic import write_bytes_atomic

FORMATS = ("parquet", "csv", "vllm-bench")


def export(frames: RunFrames, fmt: str, out: Path) -> list[Path]:
    """Write ``frames`` in ``fmt`` under ``out`` (created); returns the files written."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}",
                        "choose parquet, csv or vllm-bench")
    rundir.check_new_out(out, rundir.EXPORT_KIND)  # never among a user's or a run's files
    rundir.make_out_dir(out)
    rundir.mark_output(out, rundir.EXPORT_KIND)
    if fmt == "parquet":
        return _parquet(frames, out)
    if fmt == "csv":
        return _csv(frames, out)
    return _vllm_bench(frames, out)


def _parquet(frames: RunFrames, out: Path) -> list[Path]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError("Parquet export needs pyarrow",
                        "pip install 'crossbench[parquet]' (or pyarrow), or use --format csv"
                        ) from None
    written = []
    for name, cols in FRAMES.items():
        df = getattr(frames, name)
        table = pa.Table.from_pandas(df, preserve_index=False)
        fields = []
        for f in table.schema:
            c = next(c for c in cols if c.name == f.name)
            fields.append(f.with_metadata({"unit": c.unit, "description": c.description}))
        meta = {b"crossbench_version": __version__.encode(), b"frame": name.encode(),
                b"source": str(frames.root).encode()}
        table = table.cast(pa.schema(fields, metadata=meta))
        path = out / f"{name}.parquet"
        pq.write_table(table, path)
        written.append(path)
    return written


def _csv(frames: RunFrames, out: Path) -> list[Path]:
    written = []
    for name in FRAMES:
        path = out / f"{name}.csv"
        write_bytes_atomic(path, getattr(frames, name).to_csv(index=False).encode())
        written.append(path)
    lines = ["frame,column,unit,description"]
    for name, cols in FRAMES.items():
        lines += [",".join([name, c.name, c.unit, json.dumps(c.description)]) for c in cols]
    path = out / "columns.csv"
    write_bytes_atomic(path, ("\n".join(lines) + "\n").encode())
    return [*written, path]


# -- vllm bench serve --save-result ------------------------------------------------------------

def _stats(name: str, values: list[float]) -> dict[str, float]:
    """vLLM's mean/median/std/p99 aggregates of one figure, in milliseconds."""
    if not values:
        return {f"{k}_{name}_ms": 0.0 for k in ("mean", "median", "std", "p99")}
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {f"mean_{name}_ms": statistics.fmean(values),
            f"median_{name}_ms": statistics.median(values),
            f"std_{name}_ms": statistics.pstdev(values), f"p99_{name}_ms": p99}


def trial_result(cell: CellData, trial: int, records: list[dict[str, Any]],
                 summary: dict[str, Any]) -> dict[str, Any]:
    """One trial of one cell as a ``vllm bench serve --save-result --save-detailed`` object."""
    cell_id = cell.id
    c = cell.coords
    measured = [r for r in records if not r.get("warmup")]
    ok = [r for r in measured if r.get("status") == "ok" and r.get("chunks")]
    t0 = min((r["t_sent_ns"] for r in measured), default=0)
    t1 = max((r["chunks"][-1][0] for r in ok), default=t0)
    duration = (t1 - t0) / 1e9
    ttfts, itls, lats, outs, ins, texts, errors, starts = [], [], [], [], [], [], [], []
    tpots, all_itls, e2els = [], [], []
    for r in measured:
        chunks = r.get("chunks") or []
        good = r.get("status") == "ok" and bool(chunks)
        n_out = output_tokens(r) or 0
        starts.append((r["t_sent_ns"] - t0) / 1e9)
        if good:
            ttft = (chunks[0][0] - r["t_sent_ns"]) / 1e9
            gaps = [(b[0] - a[0]) / 1e9 for a, b in itertools.pairwise(chunks)]
            lat = (chunks[-1][0] - r["t_sent_ns"]) / 1e9
            if n_out > 1:
                tpots.append((lat - ttft) / (n_out - 1) * 1e3)
            all_itls += [g * 1e3 for g in gaps]
            e2els.append(lat * 1e3)
        else:
            ttft, gaps, lat, n_out = 0.0, [], 0.0, 0
        ttfts.append(ttft)
        itls.append(gaps)
        lats.append(lat)
        outs.append(n_out)
        ins.append(int((r.get("usage") or {}).get("prompt_tokens") or 0))
        texts.append(r.get("text") or "")
        errors.append("" if good else str(r.get("error") or r.get("status")))
    done = sum(1 for e in errors if not e)
    total_out = sum(outs)
    started = next((e.get("started_utc") for e in cell.manifest.get("trials") or []
                    if e.get("trial") == trial), None)
    try:  # vLLM's date format, from the trial's own start (the file is reproducible)
        date = time.strftime("%Y%m%d-%H%M%S", time.strptime(str(started), "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        date = ""
    result: dict[str, Any] = {
        "date": date,
        "endpoint_type": "openai-chat" if cell.load.get("endpoint") == "chat" else "openai",
        "backend": str(c.get("engine")), "label": str(c.get("arm")),
        "model_id": str(c.get("target")), "tokenizer_id": str(c.get("target")),
        "num_prompts": len(measured), "request_rate": "inf", "burstiness": 1.0,
        "max_concurrency": c.get("concurrency"), "duration": duration,
        "completed": done, "failed": len(measured) - done,
        "total_input_tokens": sum(ins), "total_output_tokens": total_out,
        "request_throughput": done / duration if duration else 0.0,
        "output_throughput": total_out / duration if duration else 0.0,
        "total_token_throughput": (total_out + sum(ins)) / duration if duration else 0.0,
        "input_lens": ins, "output_lens": outs, "ttfts": ttfts, "itls": itls,
        "start_times": starts, "latencies": lats, "generated_texts": texts, "errors": errors,
        **_stats("ttft", [t * 1e3 for t, e in zip(ttfts, errors, strict=True) if not e]),
        **_stats("tpot", tpots), **_stats("itl", all_itls), **_stats("e2el", e2els),
    }
    acc = summary.get("acceptance") or {}
    if cell.speculative and acc.get("drafts"):
        result.update({
            "spec_decode_acceptance_rate": 100.0 * (acc.get("draft_acceptance_rate") or 0.0),
            "spec_decode_acceptance_length": acc.get("mean_acceptance_length"),
            "spec_decode_num_drafts": int(acc["drafts"]),
            "spec_decode_draft_tokens": int(acc.get("draft_tokens") or 0),
            "spec_decode_accepted_tokens": int(acc.get("accepted_tokens") or 0),
            "spec_decode_per_position_acceptance_rates": list(acc.get("per_position") or [])})
    result.update({"arm": c.get("arm"), "method": c.get("method"), "trial": trial,
                   "crossbench_cell": cell_id, "crossbench_version": __version__})
    if c.get("n") is not None:
        result["n"] = c.get("n")
    return result


def _vllm_bench(frames: RunFrames, out: Path) -> list[Path]:
    from crossbench.analysis.rundir import load_cell_dir

    written = []
    for shown in frames.run.cells:
        # read afresh: the frames may have released the chunk arrivals this needs
        cell = load_cell_dir(shown.root, shown.id, dict(shown.coords), shown.baseline)
        per = {int(t["trial"]): t for t in
               summarize_run_dir(cell.root, chunk_gaps=False)["per_trial"]}
        by_trial: dict[int, list[dict[str, Any]]] = {}
        for r in cell.records:
            by_trial.setdefault(int(r.get("trial", 0)), []).append(r)
        lines = [json.dumps(trial_result(cell, t, recs, per.get(t, {})))
                 for t, recs in sorted(by_trial.items())]
        if not lines:
            continue
        path = out / (cell.id.replace("/", "__") + ".json")
        write_bytes_atomic(path, ("\n".join(lines) + "\n").encode())
        written.append(path)
    return written
