"""A run as pandas DataFrames, for notebooks: ``crossbench.open_run(PATH)``.

Example::

    import crossbench
    run = crossbench.open_run("runs/h200")            # a run directory, or an archive .zip
    run.pairs[["cell", "speedup", "speedup_ci_low", "speedup_ci_high", "verdict"]]
    run.requests.groupby("cell")["decode_tok_s"].median()
    run.analysis["sweeps"][0]["cost_model"]           # the same dict as `analyze --json`
    run.engines[["arm", "engine_b", "engine_a", "step_ms_ratio"]]  # a run of two engines

Every frame is built from the run-directory reader (:mod:`crossbench.analysis.rundir`) and
the analysis (:mod:`crossbench.analysis.analyze`), never from a parser of its own: a figure
here is the figure `crossbench analyze` prints. Columns, units and meanings are in
:mod:`crossbench.frames.columns` (and docs/python-api.md). pandas is a dependency of
crossbench; Parquet export needs pyarrow (``pip install 'crossbench[parquet]'``).
"""

from __future__ import annotations

import tempfile
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from crossbench.analysis.analyze import run_opts
from crossbench.analysis.host_time import trial_host, trial_times
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.rundir import COORDS, CellData, RunData, load_run
from crossbench.analysis.summary import request_metrics, summarize_run_dir
from crossbench.errors import UserError
from crossbench.frames.columns import FRAMES
from crossbench.store import rundir

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["FRAMES", "RunFrames", "open_run"]


def open_run(path: str | Path, opts: StatsOptions | None = None) -> RunFrames:
    """Open a run directory (``crossbench run``, ``matrix`` or ``import``) or an archive
    (``.zip`` or folder from ``crossbench archive``; a zip is unpacked, with every check of
    an untrusted zip, into a temporary folder that lives as long as the object and is
    removed at once when the zip is refused). One member of a zip may declare at most
    :data:`crossbench.archive.verify.MAX_MEMBER_BYTES` (1 GiB, what the run reader reads of
    one file).

    ``opts`` are the statistics options of :attr:`RunFrames.analysis` (default: those of
    ``crossbench analyze``); as there, a matrix run that decided with a known start spread
    (its ``start-spread.json``) is analysed with it unless ``opts`` names another.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"{p} does not exist", "give a run directory or an archive .zip")
    tmp: tempfile.TemporaryDirectory[str] | None = None
    root = p
    if p.is_file() or (p / "SHA256SUMS").exists() or not (
            rundir.is_matrix(p) or rundir.is_run(p)):
        from crossbench.archive.verify import MAX_MEMBER_BYTES, Limits, unpack

        if p.is_file():
            tmp = tempfile.TemporaryDirectory(prefix="crossbench-open-")
        try:
            root = unpack(p, Path(tmp.name) if tmp else p, Limits(member=MAX_MEMBER_BYTES))
        except BaseException:
            if tmp is not None:
                tmp.cleanup()
            raise
    return RunFrames(load_run(root), run_opts(root, opts), tmp)


class RunFrames:
    """One run's requests, trials, cells, pairs, sweeps and engines as DataFrames (see the
    module docstring); each is built on first use and kept."""

    def __init__(self, run: RunData, opts: StatsOptions,
                 tmp: tempfile.TemporaryDirectory[str] | None = None) -> None:
        self.run = run
        self.opts = opts
        self._tmp = tmp  # an unpacked archive: removed with this object

    @property
    def root(self) -> Path:
        """The run directory read (inside the temporary folder for a zip)."""
        return self.run.root

    def close(self) -> None:
        """Remove the temporary folder of an unpacked archive (frames already built stay)."""
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> RunFrames:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @cached_property
    def analysis(self) -> dict[str, Any]:
        """The analysis object, as ``crossbench analyze --json`` prints it."""
        from crossbench.analysis.analyze import analyze_run

        result: dict[str, Any] = analyze_run(self.run, self.opts)
        return result

    @cached_property
    def requests(self) -> pd.DataFrame:
        """One row per request record (warm-ups included, flagged)."""
        from crossbench.analysis.rundir import load_cell_dir, paused_gc

        rows: list[dict[str, Any]] = []
        with paused_gc():  # records hold no cycles: the collector would only rescan them
            for shown in self.run.cells:
                rows += _request_rows(load_cell_dir(shown.root, shown.id, dict(shown.coords),
                                                    shown.baseline))
        return _frame("requests", rows)

    @cached_property
    def trials(self) -> pd.DataFrame:
        """One row per trial of every cell (outcome, per-trial rates and acceptance, phases,
        where it ran)."""
        rows = []
        for cell in self.run.cells:
            per = {int(t["trial"]): t for t in
                   summarize_run_dir(cell.root, chunk_gaps=False)["per_trial"]}
            times = {t.trial: t for t in trial_times(cell)}
            for e in cell.manifest.get("trials") or []:
                t = int(e["trial"])
                s = per.get(t, {})
                th, acc, req = (s.get("throughput") or {}, s.get("acceptance") or {},
                                s.get("requests") or {})
                phases = e.get("phase_s") or {}
                prov = e.get("provenance") or {}
                gpus = (prov.get("gpu") or {}).get("gpus") or []
                rows.append({
                    **_coords(cell), "trial": t, "status": e.get("status"),
                    "error": e.get("error"), "started_utc": e.get("started_utc"),
                    "requests_ok": req.get("ok"),
                    "requests_failed": (req.get("error") or 0) + (req.get("incomplete") or 0)
                    if req else None,
                    "pooled_tok_s": th.get("pooled_tok_s"),
                    "server_pooled_tok_s": th.get("server_pooled_tok_s"),
                    "drafts": acc.get("drafts"), "draft_tokens": acc.get("draft_tokens"),
                    "accepted_tokens": acc.get("accepted_tokens"),
                    "draft_acceptance_rate": acc.get("draft_acceptance_rate"),
                    "mean_acceptance_length": acc.get("mean_acceptance_length"),
                    "startup_s": phases.get("startup"), "measured_s": phases.get("measured"),
                    "total_s": phases.get("total"),
                    "gpu_busy_share": times[t].gpu_busy_share if t in times else None,
                    "busy_ms_per_token": times[t].busy_ms_per_token if t in times else None,
                    "host_ms_per_token": times[t].host_ms_per_token if t in times else None,
                    "boot_id": (prov.get("host") or {}).get("boot_id"),
                    "gpus": ",".join(str(g.get("uuid")) for g in gpus) or None,
                    **_host_columns(trial_host(e))})
        return _frame("trials", rows)

    @cached_property
    def cells(self) -> pd.DataFrame:
        """One row per cell: the analysis's per-cell figures."""
        rows = []
        for c in self.analysis["cells"]:
            th, lat, acc, req = c["throughput"], c["latency_ms"], c["acceptance"], c["requests"]
            ht = c.get("host_time") or {}
            dw = ht.get("decode") or {}
            rows.append({
                **{k: c.get(k) for k in ("cell", *COORDS)},
                "baseline_cell": c.get("baseline_cell"), "requests_ok": req.get("ok", 0),
                "requests_failed": req.get("error", 0) + req.get("incomplete", 0),
                "pooled_tok_s": th.get("pooled_tok_s"),
                "request_mean_tok_s": th.get("request_mean_tok_s"),
                "server_pooled_tok_s": th.get("server_pooled_tok_s"),
                "engine_reported_tok_s": th.get("engine_reported_tok_s"),
                "wall_output_tok_s": th.get("wall_output_tok_s"),
                "ttft_p50_ms": lat["ttft"]["p50"], "ttft_p99_ms": lat["ttft"]["p99"],
                "tpot_p50_ms": lat["tpot"]["p50"], "tpot_p99_ms": lat["tpot"]["p99"],
                "chunk_gap_p50_ms": lat["chunk_gap"]["p50"], "e2e_p50_ms": lat["e2e"]["p50"],
                "trial_cv": c.get("trial_cv"),
                "gpu_busy_share": ht.get("gpu_busy_share"),
                "busy_ms_per_token": (ht.get("busy_ms_per_token") or {}).get("mean"),
                "host_ms_per_token": (ht.get("host_ms_per_token") or {}).get("mean"),
                "decode_gpu_busy_share": dw.get("gpu_busy_share"),
                "decode_busy_ms_per_token": (dw.get("busy_ms_per_token") or {}).get("mean"),
                "decode_host_ms_per_token": (dw.get("host_ms_per_token") or {}).get("mean"),
                "draft_acceptance_rate": acc.get("draft_acceptance_rate"),
                "mean_acceptance_length": acc.get("mean_acceptance_length"),
                "synthetic_acceptance": bool(c.get("synthetic_acceptance")),
                "expected_mean_acceptance_length": acc.get("expected_mean_acceptance_length")})
        return _frame("cells", rows)

    @cached_property
    def pairs(self) -> pd.DataFrame:
        """One row per speculative cell against its baseline."""
        rows = []
        for p in self.analysis["pairs"]:
            sp, e2e = p["speedup"], p["speedup_e2e"]
            ci, eci = sp.get("ci95") or [None, None], e2e.get("ci95") or [None, None]
            rows.append({
                **{k: p.get(k) for k in ("cell", *COORDS)}, "target": p.get("model"),
                "baseline_cell": p["baseline_cell"],
                "baseline_tok_s": p.get("baseline_tok_s"), "spec_tok_s": p.get("spec_tok_s"),
                "speedup": sp["geomean"], "speedup_ci_low": ci[0], "speedup_ci_high": ci[1],
                "ci_level": sp.get("ci_level"), "design": sp.get("design"),
                "verdict": p["verdict"], "statistical_verdict": p.get("statistical_verdict"),
                "speedup_e2e": e2e["geomean"], "speedup_e2e_ci_low": eci[0],
                "speedup_e2e_ci_high": eci[1], "net_loss_share": sp.get("net_loss_share"),
                "n_samples": sp.get("n_samples"), "n_prompts": sp.get("n_prompts"),
                "n_trials": sp.get("n_trials"),
                "draft_acceptance_rate": p["acceptance"].get("draft_acceptance_rate"),
                "mean_acceptance_length": p["acceptance"].get("mean_acceptance_length"),
                "parity": p["parity"].get("verdict"),
                "confounded": bool(p["confounds"].get("confounded")),
                "caveats": "; ".join(p.get("verdict_caveats") or []) or None,
                "warnings": len(p.get("warnings") or [])})
        return _frame("pairs", rows)

    @cached_property
    def sweeps(self) -> pd.DataFrame:
        """One row per point of every n-sweep, with the sweep's cost model on each row."""
        rows = []
        for s in self.analysis["sweeps"]:
            cm, best = s["cost_model"], s.get("best") or {}
            dci, vci = cm.get("d_ci95") or [None, None], cm.get("v_ci95") or [None, None]
            nci = cm.get("predicted_negative_from_ci95") or [None, None]
            for pt in s["points"]:
                ci = pt.get("ci95") or [None, None]
                rows.append({
                    **{k: s.get(k) for k in ("engine", "model", "arm", "method", "workload",
                                             "concurrency")},
                    "n": pt["n"], "cell": pt["cell"], "speedup": pt.get("speedup"),
                    "speedup_ci_low": ci[0], "speedup_ci_high": ci[1],
                    "verdict": pt.get("verdict"),
                    "draft_acceptance_rate": pt.get("draft_acceptance_rate"),
                    "mean_acceptance_length": pt.get("mean_acceptance_length"),
                    "best": best.get("n") == pt["n"], "cost_d": cm.get("d"),
                    "cost_d_ci_low": dci[0], "cost_d_ci_high": dci[1],
                    "cost_v": cm.get("v"), "cost_v_ci_low": vci[0], "cost_v_ci_high": vci[1],
                    "predicted_best_n": cm.get("predicted_best_n"),
                    "loses_from": s.get("loses_from"),
                    "predicted_negative_from": cm.get("predicted_negative_from"),
                    "predicted_negative_from_ci_low": nci[0],
                    "predicted_negative_from_ci_high": nci[1]})
        return _frame("sweeps", rows)

    @cached_property
    def engines(self) -> pd.DataFrame:
        """One row per arm the run holds in two engines at one n, concurrency and workload
        (and per two engines): each side's step and the ratios with their intervals
        (:func:`crossbench.analysis.step_cost.across_engines`, the report's "Across
        engines"); empty for a run of one engine."""
        from crossbench.analysis.step_cost import across_engines

        rows = []
        for g in across_engines(self.analysis, self.opts.level):
            for r in g["ratios"]:
                a, b = g["sides"][r["a"]], g["sides"][r["b"]]
                sa, sb = a["step"], b["step"]
                row: dict[str, Any] = {
                    "arm": g["arm"], "n": g["n"], "workload": g["workload"],
                    "concurrency": g["concurrency"], "engine_a": a["engine"],
                    "model_a": a["target"], "engine_b": b["engine"], "model_b": b["target"],
                    "trials_a": sa["tok_s"]["starts"], "trials_b": sb["tok_s"]["starts"],
                    "own_starts": r["own_starts"],
                    "mal_a": sa["mal"], "mal_b": sb["mal"]}
                for key in ("plain_ms", "step_ms", "cost"):
                    row[f"{key}_a"], row[f"{key}_b"] = sa[key]["geomean"], sb[key]["geomean"]
                for key, fig in r["figures"].items():
                    ci = fig["ci"] or [None, None]
                    row[f"{key}_ratio"] = fig["ratio"]
                    row[f"{key}_ratio_ci_low"], row[f"{key}_ratio_ci_high"] = ci
                rows.append(row)
        return _frame("engines", rows)


def _request_rows(cell: CellData) -> list[dict[str, Any]]:
    """One row of the requests frame per record of ``cell``."""
    rows: list[dict[str, Any]] = []
    base = _coords(cell)
    for r in cell.records:
        m = request_metrics(r)
        t = r.get("timings") or {}
        sd = (r.get("metrics") or {}).get("speculative_decoding") or {}
        usage = r.get("usage") or {}
        rows.append({
            **base, "trial": r.get("trial"), "request_index": r.get("request_index"),
            "prompt_id": r.get("prompt_id"), "category": r.get("category"),
            "warmup": bool(r.get("warmup")), "status": r.get("status"),
            "error": r.get("error"), "t_sent_ns": r.get("t_sent_ns"),
            "t_first_chunk_ns": r.get("t_first_chunk_ns"),
            "t_done_ns": r.get("t_done_ns"), "ttft_ms": m["ttft_ms"],
            "decode_ms": m["decode_ms"], "tpot_ms": m["tpot_ms"],
            "decode_tok_s": m["rate_tok_s"], "e2e_ms": m["e2e_ms"],
            "output_tokens": m["tokens"],
            "prompt_tokens": usage.get("prompt_tokens", t.get("prompt_n")),
            "chunks": len(r.get("chunks") or []) or r.get("n_chunks"),
            "server_decode_tok_s": m["server_rate_tok_s"],
            "draft_tokens": t.get("draft_n", sd.get("num_draft_tokens")),
            "accepted_tokens": t.get("draft_n_accepted",
                                     sd.get("num_accepted_draft_tokens")),
            "finish_reason": r.get("finish_reason"), "retries": r.get("retries"),
            "failed_attempts": (len(r["failed_attempts"])
                                if isinstance(r.get("failed_attempts"), list) else None)})
    return rows


def _host_columns(host: dict[str, Any]) -> dict[str, Any]:
    """The trials frame's host columns from :func:`~crossbench.analysis.host_time.trial_host`."""
    renamed = {"governor": "cpu_governor", "cpu_busy_share": "host_cpu_busy_share"}
    return {renamed.get(k, k): v for k, v in host.items()}


def _coords(cell: CellData) -> dict[str, Any]:
    return {"cell": cell.id, **{k: cell.coords.get(k) for k in COORDS}}


#: pandas dtypes of columns that must keep their kind when values are missing
_INT_COLUMNS = {"n", "trial", "request_index", "t_sent_ns", "t_first_chunk_ns",
                "t_done_ns", "output_tokens", "prompt_tokens", "chunks", "draft_tokens",
                "accepted_tokens", "requests_ok", "requests_failed", "n_samples", "n_prompts",
                "n_trials", "warnings", "predicted_best_n", "loses_from",
                "predicted_negative_from", "predicted_negative_from_ci_low",
                "predicted_negative_from_ci_high", "retries",
                "failed_attempts", "cpus", "cpus_usable", "runnable_before",
                "runnable_after"}


def _frame(name: str, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A DataFrame with exactly the documented columns, in order, with their units and
    meanings in ``df.attrs["columns"]``."""
    import pandas as pd

    cols = FRAMES[name]
    df = pd.DataFrame(rows, columns=[c.name for c in cols])
    for c in cols:
        if c.name in _INT_COLUMNS:
            df[c.name] = pd.to_numeric(df[c.name], errors="coerce").astype("Int64")
    df.attrs["frame"] = name
    df.attrs["columns"] = {c.name: {"unit": c.unit, "description": c.description}
                           for c in cols}
    return df
