"""Per-run summary computed from raw request records (``requests.jsonl``).

TTFT, decode time, TPOT, the decode rates (per request, pooled, request-mean, server,
engine-reported), chunk gaps, end-to-end latency and wall output rate are defined in
docs/metrics.md, "Latency and throughput"; times come from the client's monotonic clock.
Warm-up records and failed records are counted but never enter the timing statistics.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from crossbench.analysis.records import output_tokens as output_tokens  # re-exported
from crossbench.store import rundir

if TYPE_CHECKING:
    from crossbench.analysis.acceptance import CounterDelta

NS_PER_MS = 1e6


def rate_definition(predicted_n: int, predicted_ms: float, reported: float) -> str:
    """Which definition an engine used for its per-request rate (llama-server's
    ``predicted_per_second``): ``predicted_n - 1`` (b11312 and b11434: tokens after the first
    over the time from the first to the last), ``predicted_n`` (older builds divide all
    tokens by that time), or ``other``."""
    s = predicted_ms / 1e3
    if s <= 0:
        return "other"
    for name, n in (("predicted_n - 1", predicted_n - 1), ("predicted_n", predicted_n)):
        # JSON may round the figures; the two definitions differ by 1/predicted_n
        if abs(reported - n / s) <= min(1e-4, 0.25 / max(predicted_n, 1)) * abs(reported):
            return name
    return "other"


def dist(values: Iterable[float]) -> dict[str, float | int | None]:
    """count, mean, p50, p90, p99, min, max of a sample (None when empty)."""
    a = np.asarray(list(values), dtype=float)
    if a.size == 0:
        return {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None,
                "min": None, "max": None}
    return {"count": int(a.size), "mean": float(a.mean()),
            "p50": float(np.percentile(a, 50)), "p90": float(np.percentile(a, 90)),
            "p99": float(np.percentile(a, 99)), "min": float(a.min()), "max": float(a.max())}


def request_metrics(r: Mapping[str, Any]) -> dict[str, float | None]:
    """Client-side timing figures of one completed request (ms and tok/s)."""
    chunks = r.get("chunks") or []
    sent, first = r.get("t_sent_ns"), r.get("t_first_chunk_ns")
    n = output_tokens(r)
    out: dict[str, float | None] = {"ttft_ms": None, "decode_ms": None, "tpot_ms": None,
                                    "rate_tok_s": None, "e2e_ms": None,
                                    "server_rate_tok_s": None, "tokens": None}
    out["tokens"] = float(n) if n is not None else None
    if sent is not None and first is not None:
        out["ttft_ms"] = (first - sent) / NS_PER_MS
    if chunks and sent is not None:
        out["e2e_ms"] = (chunks[-1][0] - sent) / NS_PER_MS
    if len(chunks) >= 2 and n is not None and n >= 2:
        decode_ns = chunks[-1][0] - chunks[0][0]
        if decode_ns > 0:
            out["decode_ms"] = decode_ns / NS_PER_MS
            out["tpot_ms"] = decode_ns / NS_PER_MS / (n - 1)
            out["rate_tok_s"] = (n - 1) / (decode_ns / 1e9)
    t = r.get("timings") or {}
    if t.get("predicted_ms") and isinstance(t.get("predicted_n"), int) and t["predicted_n"] >= 2:
        out["server_rate_tok_s"] = (t["predicted_n"] - 1) / (float(t["predicted_ms"]) / 1e3)
    return out


def summarize_records(records: Iterable[Mapping[str, Any]],
                      chunk_gaps: bool = True) -> dict[str, Any]:
    """Throughput, latency and status counts of the measured (non-warm-up) records;
    ``chunk_gaps=False`` leaves the chunk-gap distribution empty (it visits every chunk, the
    costliest part, and per-trial tables do not show it)."""
    counts = {"ok": 0, "error": 0, "incomplete": 0, "warmup": 0}
    ttft, tpot, e2e, gaps, rates = [], [], [], [], []
    sum_tok = 0.0
    sum_decode_s = 0.0
    server_tok = server_s = 0.0
    engine_tok = engine_s = 0.0  # the engine's own per-request figure, weighted by its time
    definitions: dict[str, int] = {}
    total_tokens = 0
    span: dict[int, list[int]] = {}  # trial -> [first send, last chunk]
    for r in records:
        if r.get("warmup"):
            counts["warmup"] += 1
            continue
        status = str(r.get("status", "error"))
        counts[status] = counts.get(status, 0) + 1
        if status != "ok":
            continue
        m = request_metrics(r)
        chunks = r.get("chunks") or []
        if chunks:
            sp = span.setdefault(int(r.get("trial", 0)), [r["t_sent_ns"], chunks[-1][0]])
            sp[0], sp[1] = min(sp[0], r["t_sent_ns"]), max(sp[1], chunks[-1][0])
        for a, b in itertools.pairwise(chunks if chunk_gaps else ()):
            gaps.append((b[0] - a[0]) / NS_PER_MS)
        if m["ttft_ms"] is not None:
            ttft.append(m["ttft_ms"])
        if m["e2e_ms"] is not None:
            e2e.append(m["e2e_ms"])
        if m["tokens"] is not None:
            total_tokens += int(m["tokens"])
        if m["tpot_ms"] is not None and m["rate_tok_s"] is not None and m["decode_ms"]:
            tpot.append(m["tpot_ms"])
            rates.append(m["rate_tok_s"])
            sum_tok += (m["tokens"] or 0) - 1
            sum_decode_s += m["decode_ms"] / 1e3
        t = r.get("timings") or {}
        if m["server_rate_tok_s"] is not None:  # predicted_n >= 2 over predicted_ms
            server_tok += t["predicted_n"] - 1
            server_s += float(t["predicted_ms"]) / 1e3
            reported = t.get("predicted_per_second")
            if isinstance(reported, int | float) and reported > 0:
                engine_tok += float(reported) * float(t["predicted_ms"]) / 1e3
                engine_s += float(t["predicted_ms"]) / 1e3
                d = rate_definition(t["predicted_n"], float(t["predicted_ms"]), reported)
                definitions[d] = definitions.get(d, 0) + 1
    # wall time of each trial's measured window, summed: server restarts between trials
    # are not output time
    wall_s = sum(b - a for a, b in span.values()) / 1e9 if span else None
    return {
        "requests": counts,
        "throughput": {
            "pooled_tok_s": sum_tok / sum_decode_s if sum_decode_s else None,
            "request_mean_tok_s": float(np.mean(rates)) if rates else None,
            "server_pooled_tok_s": server_tok / server_s if server_s else None,
            "server_rate_source": "timings" if server_s else None,
            "engine_reported_tok_s": engine_tok / engine_s if engine_s else None,
            "engine_rate_definition": (max(definitions, key=lambda k: definitions[k])
                                       if definitions else None),
            "wall_output_tok_s": total_tokens / wall_s if wall_s else None,
            "output_tokens_total": total_tokens,
        },
        "latency_ms": {"ttft": dist(ttft), "tpot": dist(tpot), "chunk_gap": dist(gaps),
                       "e2e": dist(e2e)},
    }


SUMMARY_SCHEMA = rundir.SUMMARY_SCHEMA
"""Newest ``summary.json`` (its history: ``crossbench.store.rundir.FORMATS["summary"]``)."""
SUMMARY_REDEFINED: Mapping[int, tuple[str, ...]] = rundir.FORMATS["summary"].redefined
"""Fields whose meaning changed in a version (``store.rundir.Format.redefined``)."""


def spec_of(config: Mapping[str, Any]) -> tuple[bool, int | None]:
    """Whether a run config speculates, and its drafted tokens per step (``n``, else the
    number of synthetic rates), as recorded."""
    spec = (config.get("engine_config") or {}).get("spec") or {}
    enabled = spec.get("type", "none") != "none"
    n = spec.get("n")
    if n is None and spec.get("synth_rates"):
        n = len(spec["synth_rates"])
    return enabled, n


def decode_histograms(manifest: Mapping[str, Any]) -> tuple[str, str] | None:
    """The engine's (tokens, decode seconds) histograms: recorded, else registered."""
    from crossbench.engines import registry

    engine = manifest.get("engine") or {}
    if "decode_histograms" in engine:
        got = engine["decode_histograms"]
        return (str(got[0]), str(got[1])) if got else None
    kind = (manifest.get("config") or {}).get("engine")
    return registry.decode_histograms(kind) if kind in registry.names() else None


def server_decode(before: Mapping[str, float], after: Mapping[str, float],
                  histograms: tuple[str, str]) -> tuple[float, float] | None:
    """(tokens after each request's first, decode seconds) the server counted between two
    scrapes, from its per-request histograms' ``_sum`` and ``_count`` (summed over label
    sets, e.g. vLLM's ``engine`` under data parallel); None when a series is missing."""
    from crossbench.analysis.acceptance import series_delta

    tokens, seconds = histograms
    tok_sum, tok_count, dec_sum = (series_delta(before, after, name) for name in
                                   (tokens + "_sum", tokens + "_count", seconds + "_sum"))
    if tok_sum is None or tok_count is None or dec_sum is None:
        return None
    return tok_sum - tok_count, dec_sum


def metric_prefix(manifest: Mapping[str, Any]) -> str:
    """The engine's speculative counter prefix: recorded in the manifest, else registered."""
    from crossbench.analysis.acceptance import PREFIX
    from crossbench.engines import registry

    recorded = (manifest.get("engine") or {}).get("spec_metric_prefix")
    if isinstance(recorded, str):
        return recorded
    kind = (manifest.get("config") or {}).get("engine")
    return registry.spec_metric_prefix(kind) if kind in registry.names() else PREFIX


@dataclass
class TrialWindow:
    """A trial's measured window as the server counted it: the parsed ``/metrics`` scrapes
    before and after its measured requests and the speculative counters' delta between them."""

    before: dict[str, float]
    after: dict[str, float]
    delta: CounterDelta


def trial_windows(root: Path, manifest: Mapping[str, Any],
                  trials: Iterable[int]) -> dict[int, TrialWindow | None]:
    """The counter window of each trial (None where a snapshot is missing), from the run
    directory's ``/metrics`` snapshots, with the engine's counter prefix
    (:func:`metric_prefix`): the one per-trial counter-delta computation, shared by the
    summary and the analysis."""
    from crossbench.analysis.acceptance import counter_delta
    from crossbench.engines.prometheus import parse_samples

    prefix = metric_prefix(manifest)
    out: dict[int, TrialWindow | None] = {}
    for t in trials:
        texts = rundir.read_snapshots(root, t)
        if texts is None:
            out[t] = None
            continue
        before, after = parse_samples(texts[0]), parse_samples(texts[1])
        out[t] = TrialWindow(before, after, counter_delta(before, after, prefix))
    return out


def summarize_run_dir(run_dir: Any, chunk_gaps: bool = True) -> dict[str, Any]:
    """Recompute ``summary.json`` from a run directory's raw files alone (``chunk_gaps=False``:
    without the chunk-gap distributions, for callers that do not show them). Read through
    ``store.rundir``: a newer manifest, a damaged record line or a request recorded twice is
    a one-line error naming the file."""
    from crossbench.analysis import acceptance as acc_mod
    from crossbench.analysis.synthetic import expected_for_run

    root = Path(run_dir)
    manifest = rundir.read_manifest(root)
    records = rundir.read_records(root, manifest)
    enabled, n = spec_of(manifest.get("config", {}))
    histograms = decode_histograms(manifest)
    server_tok = server_s = 0.0
    per_trial: list[dict[str, Any]] = []
    trials = sorted({int(r.get("trial", 0)) for r in records})
    windows = trial_windows(root, manifest, trials)
    total: acc_mod.CounterDelta | None = acc_mod.CounterDelta()
    for t in trials:
        recs = [r for r in records if int(r.get("trial", 0)) == t]
        window = windows[t]
        trial_sum = summarize_records(recs, chunk_gaps)
        if window is None:
            total = None  # a snapshot is missing: no counter figures for the run
        elif total is not None:
            total.add(window.delta)
        server = (server_decode(window.before, window.after, histograms)
                  if window is not None and histograms is not None else None)
        if server is not None and server[1] > 0:
            server_tok += server[0]
            server_s += server[1]
            trial_sum["throughput"].update(server_pooled_tok_s=server[0] / server[1],
                                           server_rate_source=histograms[0] if histograms
                                           else None)
        trial_acc = acc_mod.compute(window.delta if window else None,
                                    [r for r in recs if not r.get("warmup")])
        per_trial.append({"trial": t, **trial_sum, "acceptance": trial_acc.to_dict()})
    acc = acc_mod.compute(total, [r for r in records if not r.get("warmup")])
    checks = acc_mod.integrity(acc, total, n, enabled)
    expected = expected_for_run(manifest.get("config") or {}, records)
    base = summarize_records(records, chunk_gaps)
    if server_s > 0 and histograms is not None:
        base["throughput"].update(server_pooled_tok_s=server_tok / server_s,
                                  server_rate_source=f"{histograms[0]}, {histograms[1]}")
    th = base["throughput"]
    if th["pooled_tok_s"] and th["server_pooled_tok_s"]:
        th["client_vs_server"] = th["pooled_tok_s"] / th["server_pooled_tok_s"] - 1.0
    return {
        "schema_version": SUMMARY_SCHEMA,
        "kind": rundir.SUMMARY_KIND,
        "run_status": manifest.get("status"),
        **base,
        "acceptance": {"enabled": enabled, "n": n, **acc.to_dict(), **expected},
        "integrity": {"passed": all(c.passed for c in checks),
                      "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail}
                                 for c in checks]},
        "per_trial": per_trial,
    }
