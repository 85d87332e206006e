"""The report's figures, drawn with matplotlib's Agg backend and saved as PNG and SVG.

Each function of :data:`FIGURES` takes the study and returns a :class:`Plot`, or None when
the study has nothing to draw (docs/report.md "Report" lists the figures). Output is
reproducible byte for byte: a fixed SVG hash salt, no dates, no tool versions in the files'
metadata.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import matplotlib

matplotlib.use("Agg")  # before pyplot could be imported anywhere: files only, no display
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from crossbench.report.study import Study
from crossbench.telemetry.derive import read_trace

#: settings every figure is drawn and saved with (deterministic files, one look)
RC: dict[str, Any] = {
    "svg.hashsalt": "crossbench",
    "svg.fonttype": "path",
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "savefig.dpi": 110,
}
SVG_METADATA: dict[str, Any] = {"Date": None, "Creator": "crossbench"}
PNG_METADATA: dict[str, Any] = {"Software": "crossbench"}
NET_LOSS_COLOR = "#d62728"


@dataclass(frozen=True)
class Plot:
    """A named figure with the caption the report prints under it."""

    name: str  # file stem: plots/<name>.png and .svg
    title: str
    caption: str
    figure: Figure


@contextmanager
def style() -> Iterator[None]:
    """The report's matplotlib settings, for drawing and saving."""
    with matplotlib.rc_context(cast(Any, RC)):
        yield


def render(plot: Plot) -> tuple[bytes, bytes]:
    """(PNG bytes, SVG bytes) of a figure."""
    out = []
    with style():
        for fmt, meta in (("png", PNG_METADATA), ("svg", SVG_METADATA)):
            buf = io.BytesIO()
            plot.figure.savefig(buf, format=fmt, metadata=meta)
            out.append(buf.getvalue())
    return out[0], out[1]


def pair_label(study: Study, pair: dict[str, Any], without_n: bool = False) -> str:
    """A pair's short name (the coordinates that vary across the study)."""
    return study.label({"engine": pair.get("engine"), "target": pair.get("model"),
                        "arm": pair.get("arm"), "method": pair.get("method"),
                        "n": None if without_n else pair.get("n"),
                        "workload": pair.get("workload"),
                        "concurrency": pair.get("concurrency")})


def _unity(ax: Axes) -> None:
    ax.axhline(1.0, color="0.3", linestyle="--", linewidth=1)


def speedup_vs_n(study: Study) -> Plot | None:
    """Decode speedup against n, one line (and interval band) per method and model."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for p in study.analysis.get("pairs", []):
        if p.get("n") is not None and p["speedup"].get("geomean") is not None:
            groups.setdefault(pair_label(study, p, without_n=True), []).append(p)
    if not groups:
        return None
    with style():
        fig = Figure(figsize=(6.4, 3.8), layout="constrained")
        ax = fig.subplots()
        for label, pairs in groups.items():
            pairs.sort(key=lambda p: int(p["n"]))
            ns = [int(p["n"]) for p in pairs]
            ys = [float(p["speedup"]["geomean"]) for p in pairs]
            cis = [p["speedup"].get("ci95") or [y, y] for p, y in zip(pairs, ys, strict=True)]
            (line,) = ax.plot(ns, ys, marker="o", label=label)
            ax.fill_between(ns, [c[0] for c in cis], [c[1] for c in cis],
                            color=line.get_color(), alpha=0.18, linewidth=0)
            ax.errorbar(ns, ys, yerr=[[y - c[0] for y, c in zip(ys, cis, strict=True)],
                                      [c[1] - y for y, c in zip(ys, cis, strict=True)]],
                        fmt="none", ecolor=line.get_color(), capsize=3, linewidth=1)
        _unity(ax)
        ax.set_xlabel("n (most tokens drafted per step)")
        ax.set_ylabel("decode speedup (x baseline)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=8)
    return Plot("speedup_vs_n", "Decode speedup against n",
                f"Geometric mean of paired per-request speedups; bands and bars are the "
                f"{study.level} bootstrap interval. Below the dashed line the method is slower "
                "than no speculation.", fig)


def acceptance_curves(study: Study) -> Plot | None:
    """Per-position acceptance of every speculative cell that has a per-position curve."""
    pairs = [p for p in study.analysis.get("pairs", [])
             if (p.get("acceptance") or {}).get("per_position")]
    if not pairs:
        return None
    with style():
        fig = Figure(figsize=(6.4, 3.6), layout="constrained")
        ax = fig.subplots()
        for p in pairs:
            curve = [float(x) for x in p["acceptance"]["per_position"]]
            line, = ax.plot(range(len(curve)), curve, marker="o", label=pair_label(study, p))
            expected = p["acceptance"].get("expected_per_position")
            if expected:  # what the counters should read under the configured synthetic rates
                ax.plot(range(len(expected)), [float(x) for x in expected], linestyle="--",
                        color=line.get_color(), linewidth=1)
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("draft position k (0 = first drafted token)")
        ax.set_ylabel("acceptance p_k (share of drafts)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=8)
    return Plot("acceptance_curves", "Per-position acceptance",
                "Share of drafts whose accepted prefix reaches position k (unconditional, so "
                "each curve falls); mean acceptance length = 1 + the sum of the curve. Dashed: "
                "what the counters should read under the configured synthetic rates, as the "
                "engine counts them (llama-server clips its drafts to the tokens a request has "
                "left; vLLM clips none).", fig)


def acceptance_vs_speedup(study: Study) -> Plot | None:
    """Acceptance rate against speedup; below 1 (shaded) the method loses time."""
    pairs = [p for p in study.analysis.get("pairs", [])
             if (p.get("acceptance") or {}).get("draft_acceptance_rate") is not None
             and p["speedup"].get("geomean") is not None]
    if not pairs:
        return None
    with style():
        fig = Figure(figsize=(6.4, 3.8), layout="constrained")
        ax = fig.subplots()
        lows, highs = [1.0], [1.0]
        for p in pairs:
            x = float(p["acceptance"]["draft_acceptance_rate"])
            y = float(p["speedup"]["geomean"])
            ci = p["speedup"].get("ci95") or [y, y]
            lows.append(float(ci[0]))
            highs.append(float(ci[1]))
            ax.errorbar([x], [y], yerr=[[y - ci[0]], [ci[1] - y]], fmt="o", capsize=3,
                        label=pair_label(study, p))
        span = max(highs) - min(lows)
        bottom, top = min(lows) - 0.1 * span - 0.05, max(highs) + 0.1 * span + 0.05
        ax.axhspan(bottom, 1.0, color=NET_LOSS_COLOR, alpha=0.10, linewidth=0)
        ax.text(0.02, bottom + 0.04 * (top - bottom), "net loss (speedup < 1)",
                color=NET_LOSS_COLOR, fontsize=8)
        _unity(ax)
        ax.set_xlim(0, 1)
        ax.set_ylim(bottom, top)
        ax.set_xlabel("draft acceptance rate (accepted / drafted tokens)")
        ax.set_ylabel("decode speedup (x baseline)")
        ax.legend(fontsize=8)
    return Plot("acceptance_vs_speedup", "Acceptance against speedup",
                "High acceptance does not guarantee a gain: in the shaded region drafting and "
                "verifying cost more than the accepted tokens save.", fig)


def throughput_vs_concurrency(study: Study) -> Plot | None:
    """Wall output throughput against concurrency, for cells that differ only in it."""
    groups: dict[str, list[tuple[int, float]]] = {}
    for c in study.analysis.get("cells", []):
        th = c.get("throughput") or {}
        rate = th.get("wall_output_tok_s") or th.get("pooled_tok_s")
        if c.get("concurrency") is None or rate is None:
            continue
        coords = {k: c.get(k) for k in ("engine", "target", "arm", "method", "n", "workload")}
        groups.setdefault(study.label(coords), []).append((int(c["concurrency"]), float(rate)))
    groups = {k: sorted(v) for k, v in groups.items() if len({x for x, _ in v}) > 1}
    if not groups:
        return None
    with style():
        fig = Figure(figsize=(6.4, 3.6), layout="constrained")
        ax = fig.subplots()
        for label, points in groups.items():
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel("output tokens/s (wall)")
        ax.legend(fontsize=8)
    return Plot("throughput_vs_concurrency", "Throughput against concurrency",
                "All output tokens over the measured wall time of each trial, pooled.", fig)


TELEMETRY_ROWS: tuple[tuple[str, str], ...] = (
    ("sm_clock_mhz", "SM clock (MHz)"), ("power_w", "power (W)"),
    ("temperature_c", "temperature (°C)"))


def telemetry_strip(study: Study) -> Plot | None:
    """SM clock, power and temperature of every GPU over the study, coloured by cell."""
    traces = [(cell, trial, samples) for cell, trial, path in study.traces()
              if (samples := read_trace(path))]
    if not traces:
        return None
    t0 = min(s.t_ns for _, _, samples in traces for s in samples)
    with style():
        fig = Figure(figsize=(7.2, 4.8), layout="constrained")
        axes = fig.subplots(len(TELEMETRY_ROWS), 1, sharex=True)
        colors: dict[str, str] = {}
        cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
        for cell, _, samples in sorted(traces, key=lambda t: t[2][0].t_ns):
            label = study.label(cell.coords)
            fresh = label not in colors
            color = colors.setdefault(label, cycle[len(colors) % len(cycle)])
            for gpu in sorted({s.gpu for s in samples}):
                rows = [s for s in samples if s.gpu == gpu]
                xs = [(s.t_ns - t0) / 1e9 for s in rows]
                for ax, (attr, _) in zip(axes, TELEMETRY_ROWS, strict=True):
                    ys = [getattr(s, attr) for s in rows]
                    ax.plot(xs, [float("nan") if y is None else y for y in ys], color=color,
                            linewidth=1, label=label if fresh and ax is axes[0] else None)
                fresh = False
        for ax, (_, name) in zip(axes, TELEMETRY_ROWS, strict=True):
            ax.set_ylabel(name, fontsize=8)
        axes[-1].set_xlabel("seconds since the first sample")
        axes[0].legend(fontsize=7, ncol=3)
    return Plot("telemetry", "GPU telemetry",
                "NVML samples of every trial (idle, loading, measuring, stopping), on the "
                "study's wall clock; gaps are pauses between trials.", fig)


FIGURES: tuple[Callable[[Study], Plot | None], ...] = (
    speedup_vs_n, acceptance_curves, acceptance_vs_speedup, throughput_vs_concurrency,
    telemetry_strip)
"""Every figure function, in report order."""


def figures(study: Study) -> list[Plot]:
    """The study's figures (those with something to draw), in report order."""
    return [p for p in (f(study) for f in FIGURES) if p is not None]
