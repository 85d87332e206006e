"""The report as one self-contained HTML file, and its Markdown twin.

The HTML needs nothing but itself: CSS is inline, figures are embedded as ``data:`` URIs
(SVG), and a Content-Security-Policy forbids every fetch, so it opens the same offline, in a
mail attachment or in an archive years later. The Markdown twin has the same sections
(docs/report.md "Report" lists them) and links the PNG files beside it.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from typing import Any

from crossbench import __version__
from crossbench.analysis.analyze import markdown as md_table
from crossbench.analysis.analyze import marked_verdict, negative_text
from crossbench.report import commands
from crossbench.report.card import Card
from crossbench.report.plots import Plot, pair_label
from crossbench.report.study import Study
from crossbench.store import rundir

CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
       "base-uri 'none'; form-action 'none'")
"""Nothing may be fetched: images are data URIs, styles inline, no scripts."""

CSS = """
:root { --fg: #1d2330; --muted: #5b6475; --line: #dde1e8; --bg: #ffffff; --soft: #f5f7fa;
        --faster: #1a7f37; --slower: #c62828; --same: #57606a; --conf: #b26a00; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
       font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 1120px; margin: 0 auto; padding: 28px 24px 64px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 36px 0 10px; padding-bottom: 4px;
     border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 18px 0 6px; }
p.lead { font-size: 17px; margin: 8px 0 4px; }
p.muted, .muted { color: var(--muted); }
table { border-collapse: collapse; width: 100%; font-size: 13px; margin: 6px 0 10px; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid var(--line);
         vertical-align: top; }
th { background: var(--soft); font-weight: 600; }
td.num { font-variant-numeric: tabular-nums; white-space: nowrap; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px;
         font-weight: 600; color: #fff; background: var(--same); white-space: nowrap; }
.badge.faster { background: var(--faster); } .badge.slower { background: var(--slower); }
.badge.confounded { background: var(--conf); }
.figures { display: grid; grid-template-columns: repeat(auto-fit, minmax(480px, 1fr)); gap: 18px; }
figure { margin: 0; padding: 10px; border: 1px solid var(--line); border-radius: 8px; }
figure img { width: 100%; height: auto; display: block; }
figcaption { font-size: 13px; color: var(--muted); margin-top: 6px; }
figcaption b { color: var(--fg); }
dl.card { display: grid; grid-template-columns: 200px 1fr; gap: 2px 14px; margin: 0;
          font-size: 14px; }
dl.card dt { color: var(--muted); } dl.card dd { margin: 0; overflow-wrap: anywhere; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(500px, 1fr));
         gap: 4px 28px; }
pre { background: var(--soft); border: 1px solid var(--line); border-radius: 6px; padding: 10px;
      overflow-x: auto; font-size: 12.5px; }
code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
details { margin: 8px 0; } summary { cursor: pointer; color: var(--muted); }
ul.tight { margin: 4px 0; padding-left: 20px; }
.ok { color: var(--faster); } .bad { color: var(--slower); } .warn { color: var(--conf); }
footer { margin-top: 40px; font-size: 12px; color: var(--muted); }
"""


@dataclass(frozen=True)
class Image:
    """A rendered figure: the plot and its PNG and SVG bytes."""

    plot: Plot
    png: bytes
    svg: bytes


@dataclass(frozen=True)
class Table:
    """A header and rows of text."""

    header: list[str]
    rows: list[list[str]]


def num(v: Any, spec: str = ".3f") -> str:
    """A number, or ``n/a``."""
    return "n/a" if v is None else format(v, spec)


def ci_text(ci: list[float] | None) -> str:
    """``[lo, hi]`` or ``n/a``."""
    return "n/a" if not ci else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _p50(cell: dict[str, Any] | None, key: str) -> Any:
    return None if cell is None else ((cell.get("latency_ms") or {}).get(key) or {}).get("p50")


def _vram(study: Study, cell_id: str) -> int | None:
    cell = study.cell(cell_id)
    return None if cell is None else cell.peak_vram_bytes()


def vram_text(study: Study, spec: str, base: str) -> str:
    """Peak VRAM of baseline and speculative cell (``n/a`` without a GPU trace)."""
    b, s = _vram(study, base), _vram(study, spec)
    if b is None and s is None:
        return "n/a"
    return f"{num(None if b is None else b / 2**30, '.2f')} → " \
           f"{num(None if s is None else s / 2**30, '.2f')} GiB"


def verdict_text(pair: dict[str, Any]) -> str:
    """The verdict, with the statistical one when the pair is confounded, and ``*`` when it
    carries a caveat (``verdict_caveats``: one trial per cell, a runner warning, ...), as
    ``crossbench analyze`` prints it; :func:`verdict_notes` says what each means."""
    if pair["verdict"] == "confounded":
        return f"confounded (statistically {pair.get('statistical_verdict')})"
    return marked_verdict(pair)


def verdict_notes(study: Study) -> str | None:
    """One sentence under the verdict table naming every distinct verdict caveat of the
    run's pairs (None when no verdict has one)."""
    seen = list(dict.fromkeys(c for p in study.analysis.get("pairs", [])
                              if p.get("verdict") != "confounded"
                              for c in p.get("verdict_caveats") or []))
    return ("A verdict marked * carries a caveat: " + "; ".join(seen) + ".") if seen else None


def verdict_table(study: Study) -> Table:
    """One row per pair: speedup with interval, verdict, acceptance, MAL, TPOT, TTFT, VRAM."""
    cells = {c["cell"]: c for c in study.analysis.get("cells", [])}
    header = ["pair", "speedup", f"{study.level} CI", "verdict", "acceptance", "MAL",
              "TPOT p50 ms (base → spec)", "TTFT p50 ms (base → spec)", "peak VRAM",
              "pairs"]
    rows = []
    for p in study.analysis.get("pairs", []):
        sp, acc = p["speedup"], p["acceptance"]
        spec, base = cells.get(p["cell"]), cells.get(p["baseline_cell"])
        rows.append([
            pair_label(study, p), num(sp.get("geomean")), ci_text(sp.get("ci95")),
            verdict_text(p), num(acc.get("draft_acceptance_rate")),
            num(acc.get("mean_acceptance_length")),
            f"{num(_p50(base, 'tpot'), '.2f')} → {num(_p50(spec, 'tpot'), '.2f')}",
            f"{num(_p50(base, 'ttft'), '.1f')} → {num(_p50(spec, 'ttft'), '.1f')}",
            vram_text(study, p["cell"], p["baseline_cell"]), str(sp.get("n_samples"))])
    return Table(header, rows)


def cell_table(study: Study) -> Table:
    """Per cell figures (the report of a study without pairs shows these)."""
    header = ["cell", "ok", "failed", "pooled tok/s", "TTFT p50 ms", "TPOT p50 ms",
              "acceptance", "MAL", "peak VRAM"]
    rows = []
    for c in study.analysis.get("cells", []):
        req = c.get("requests") or {}
        peak = _vram(study, c["cell"])
        rows.append([study.label(c), str(req.get("ok", 0)),
                     str(req.get("error", 0) + req.get("incomplete", 0)),
                     num(c["throughput"].get("pooled_tok_s"), ".2f"),
                     num(_p50(c, "ttft"), ".1f"), num(_p50(c, "tpot"), ".2f"),
                     num(c["acceptance"].get("draft_acceptance_rate")),
                     num(c["acceptance"].get("mean_acceptance_length")),
                     "n/a" if peak is None else f"{peak / 2**30:.2f} GiB"])
    return Table(header, rows)


def start_table(study: Study) -> Table | None:
    """Every server start, by the trial that made it: crossbench's time from launch to ready
    and, where the engine logs them (vLLM), whether the start found its compile cache
    (``cold``/``warm``; SGLang's: whether it added to its kernel caches), its engine init
    and its torch.compile; None without a start."""
    rows = []
    for c in study.cells:
        for entry in c.manifest.get("trials") or []:
            start = rundir.trial_start(entry)
            if start is None:  # a trial on a running server
                continue
            rows.append([study.label(c.coords), str(entry.get("trial")),
                         f"{start.startup_s:.1f}", start.cache or "n/a",
                         num(start.engine_init_s, ".1f"), num(start.compile_s, ".1f")])
    return Table(["cell", "trial", "start-up s", "compile cache", "engine init s",
                  "compile s"], rows) if rows else None


def sweep_table(study: Study) -> Table | None:
    """Best n of every n-sweep, whether it is distinguishable, and the cost model."""
    sweeps = study.analysis.get("sweeps") or []
    if not sweeps:
        return None
    rows = []
    for s in sweeps:
        best, cm = s.get("best") or {}, s.get("cost_model") or {}
        rows.append([
            pair_label(study, s, without_n=True),
            ", ".join(str(p["n"]) for p in s.get("points", [])),
            num(best.get("n"), "d"), num(best.get("speedup")), ci_text(best.get("ci95")),
            "yes" if best.get("distinguishable") else "no",
            num(cm.get("d")), num(cm.get("v")), num(cm.get("predicted_best_n"), "d"),
            num(s.get("loses_from"), "d"), negative_text(cm),
            ", ".join(str(n) for n in s.get("net_loss_despite_high_acceptance") or []) or "-"])
    return Table(["sweep", "n", "best n", "speedup", "CI", "best distinguishable",
                  "cost d", "cost v", "predicted best n", "loses from",
                  "predicted negative from", "net loss despite acceptance"], rows)


ENGINES_NOTE = ("Across engines more than the engine differs (kernels, model formats, server "
                "settings): every such comparison is multi-variable (see Confounds; "
                "`crossbench compare A B` lists the settings). Step: one speculative step, "
                "MAL tokens, in ms; plain step: the engine's own baseline, per token; C(n) = "
                "step / plain step. A ratio (B / A) is the figure of the engine later in name "
                "order over the earlier's, "
                "with Welch's interval over the two engines' server starts, given only where "
                "every trial of both had its own start and each side has two or more.")
"""What the "Across engines" tables mean, printed under them."""


def _ms_text(fig: dict[str, Any] | None) -> str:
    return "n/a" if fig is None else (
        f"{fig['geomean']:.2f}" + (f" [{fig['ci'][0]:.2f}, {fig['ci'][1]:.2f}]"
                                   if fig.get("ci") else ""))


def engine_tables(study: Study) -> tuple[Table, Table] | None:
    """The "Across engines" section: every arm the run holds at one n, concurrency and
    workload in two or more engines (:func:`crossbench.analysis.step_cost.across_engines`):
    per engine its speedup and step, then each two engines' ratios. None when no arm ran in
    two engines."""
    from crossbench.analysis.step_cost import across_engines

    groups = across_engines(study.analysis, study.options.level)
    if not groups:
        return None
    per, ratios = [], []
    for g in groups:
        label = study.label({"arm": g["arm"], "n": g["n"], "concurrency": g["concurrency"],
                             "workload": g["workload"]})
        names = [f"{s['engine']} ({s['target']})" for s in g["sides"]]
        for name, s in zip(names, g["sides"], strict=True):
            step, sp = s["step"], s["speedup"]
            per.append([label, name, str(step["tok_s"]["starts"]) if step else "n/a",
                        f"{num(sp.get('geomean'))} {ci_text(sp.get('ci95'))}",
                        _ms_text(step and step["plain_ms"]), _ms_text(step and step["step_ms"]),
                        _ms_text(step and step["cost"])])
        for r in g["ratios"]:
            f = r["figures"]
            ratios.append([label, f"{names[r['b']]} / {names[r['a']]}",
                           *(f"{num(f[k]['ratio'])} {ci_text(f[k]['ci'])}"
                             for k in ("step_ms", "tok_s", "plain_ms", "cost")),
                           "trials shared starts: no interval" if not r["own_starts"] else
                           "starts" if f["step_ms"]["ci"] else "one start a side: no interval"])
    return (Table(["pair", "engine (target)", "trials", "speedup", "plain step ms",
                   "step ms", "C(n)"], per),
            Table(["pair", "B / A", "step ms", "decode rate", "plain step ms", "C(n)",
                   "samples"], ratios))


def confound_items(study: Study) -> list[tuple[str, str, list[str]]]:
    """Per pair: (label, status, lines): what besides the speculative settings differs."""
    out = []
    for p in study.analysis.get("pairs", []):
        conf = p.get("confounds") or {}
        lines: list[str] = []
        if not conf.get("checked"):
            status = "not checked"
            lines.append(str(conf.get("reason") or "no readable manifest"))
        elif conf.get("confounded"):
            status = "confounded"
        else:
            status = "clean"
        fields = conf.get("confounding_fields") or []
        if fields:
            lines.append("differs besides the speculative settings: " + ", ".join(fields))
        for f in conf.get("findings") or []:
            lines.append(f"{f.get('severity')}: {f.get('message')} (fix: {f.get('action')}) "
                         f"[{f.get('source')}]")
        if status == "clean" and not lines:
            lines.append("only the speculative settings differ; no known-interaction rule "
                         "fired")
        out.append((pair_label(study, p), status, lines))
    return out


def warning_table(study: Study) -> Table:
    """Every stability warning with the action it asks for."""
    cells = {c.id: c.coords for c in study.cells}
    return Table(["kind", "cell", "message", "action"],
                 [[str(w["kind"]), study.label(cells.get(str(w.get("cell")), {}))
                   if w.get("cell") in cells else str(w.get("cell")), str(w["message"]),
                   str(w["action"])] for w in study.analysis.get("stability", [])])


def failed_table(study: Study) -> Table:
    """Failed trials, and cells with failed or incomplete requests."""
    rows = [[study.label(c.coords) if (c := study.cell(f["cell"])) else f["cell"],
             str(f["trial"]), str(f["error"] or "failed")] for f in study.failed_trials()]
    for c in study.analysis.get("cells", []):
        req = c.get("requests") or {}
        bad = req.get("error", 0) + req.get("incomplete", 0)
        if bad:
            rows.append([study.label(c), "all", f"{bad} failed or incomplete requests "
                         "(counted, never dropped)"])
    return Table(["cell", "trial", "what failed"], rows)


def headline(study: Study) -> str:
    """One sentence: how many pairs, their verdicts, the best one."""
    pairs = study.analysis.get("pairs", [])
    if not pairs:
        return (f"{len(study.cells)} cell(s), no speculative cell paired with a baseline: "
                "per-cell figures only.")
    counts: dict[str, int] = {}
    for p in pairs:
        counts[str(p["verdict"])] = counts.get(str(p["verdict"]), 0) + 1
    tally = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda x: -x[1]))
    scored = [p for p in pairs if p["speedup"].get("geomean") is not None]
    text = f"{len(pairs)} speculative configuration(s) against their baselines: {tally}."
    if scored:
        best = max(scored, key=lambda p: float(p["speedup"]["geomean"]))
        text += (f" Highest speedup: {pair_label(study, best)} at "
                 f"{best['speedup']['geomean']:.3f}x {ci_text(best['speedup'].get('ci95'))}"
                 f" ({verdict_text(best)}).")
    return text


# -- HTML ----------------------------------------------------------------------------------

def _e(s: Any) -> str:
    return html.escape(str(s), quote=True)


def html_table(t: Table, numeric: tuple[str, ...] = ()) -> str:
    """A table; the ``verdict`` column as badges, ``numeric`` columns aligned as numbers."""
    head = "".join(f"<th>{_e(h)}</th>" for h in t.header)
    body = []
    for r in t.rows:
        tds = []
        for h, v in zip(t.header, r, strict=True):
            if h == "verdict":
                word = v.split(" ")[0].rstrip("*")  # the badge's colour: the verdict word
                tds.append(f'<td><span class="badge {_e(word)}">{_e(v)}</span></td>')
            elif h in numeric:
                tds.append(f'<td class="num">{_e(v)}</td>')
            else:
                tds.append(f"<td>{_e(v)}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _figure(img: Image) -> str:
    data = base64.b64encode(img.svg).decode("ascii")
    return (f'<figure><img alt="{_e(img.plot.title)}" src="data:image/svg+xml;base64,{data}">'
            f"<figcaption><b>{_e(img.plot.title)}.</b> {_e(img.plot.caption)}</figcaption>"
            "</figure>")


def _dl(rows: list[tuple[str, str]]) -> str:
    return '<dl class="card">' + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>"
                                         for k, v in rows) + "</dl>"


def render_html(study: Study, card: Card, images: list[Image], here: str = "") -> str:
    """The self-contained HTML report (see the module docstring); ``here`` is the run
    directory as its reproduce commands name it (empty: the current directory)."""
    a = study.analysis
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_e(CSP)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>crossbench report: {_e(study.name)}</title>",
        f"<style>{CSS}</style></head><body><main>",
        f"<h1>{_e(study.name)}</h1>",
        f'<p class="muted">crossbench study report &middot; {_e(study.kind)} run &middot; '
        f"{len(study.cells)} cells</p>",
    ]
    if study.notes:
        parts.append(f'<p class="muted">{_e(study.notes)}</p>')
    parts += [f'<p class="warn">Run warning: {_e(w)}</p>' for w in study.run_warnings]
    parts.append(f'<p class="lead">{_e(headline(study))}</p>')
    numeric = ("speedup", "acceptance", "MAL", "pairs", "ok", "failed", "pooled tok/s",
               "TTFT p50 ms", "TPOT p50 ms")
    if a.get("pairs"):
        parts += ["<h2>Verdicts</h2>", html_table(verdict_table(study), numeric),
                  f'<p class="muted">Speedup: geometric mean of paired per-request decode '
                  f"speedups (spec / baseline decode rate, same prompt, trial and occurrence); "
                  f"interval: bootstrap clustered by prompt, {study.options.resamples} "
                  f"resamples, seed {study.options.seed}. MAL: mean acceptance length.</p>"]
        notes = verdict_notes(study)
        if notes:
            parts.append(f"<p>{_e(notes)}</p>")
    parts += ["<h2>Cells</h2>", html_table(cell_table(study), numeric)]
    starts = start_table(study)
    if starts is not None:
        parts += ["<h2>Server starts</h2>",
                  html_table(starts, ("start-up s", "engine init s", "compile s"))]
    engines = engine_tables(study)
    if engines is not None:
        parts += ["<h2>Across engines</h2>", *(html_table(t) for t in engines),
                  f'<p class="muted">{_e(ENGINES_NOTE)}</p>']
    if images:
        parts += ["<h2>Figures</h2>", '<div class="figures">',
                  *(_figure(i) for i in images), "</div>"]
    sweeps = sweep_table(study)
    if sweeps is not None:
        parts += ["<h2>n-sweeps</h2>", html_table(sweeps),
                  '<p class="muted">Cost model C(n) = tau / speedup = d + v n, in baseline '
                  "token-times (d: fixed cost of a verification step, v: cost per drafted "
                  "token).</p>"]
    parts.append("<h2>Study card</h2>")
    parts.append('<div class="cards">' + "".join(
        f"<section><h3>{_e(s.title)}</h3>{_dl(s.rows)}</section>" for s in card.sections)
        + "</div>")
    if card.varied:
        parts.append(f"<p><b>Varied between cells:</b> {_e(', '.join(card.varied))}</p>")
    if card.fixed:
        parts.append(f"<details><summary>Held fixed in every cell: {len(card.fixed)} "
                     f"settings</summary>{_dl(card.fixed)}</details>")
    items = confound_items(study)
    if items:
        parts.append("<h2>Confounds</h2>")
        for label, status, lines in items:
            cls = {"clean": "ok", "confounded": "bad"}.get(status, "warn")
            parts.append(f'<h3>{_e(label)}: <span class="{cls}">{_e(status)}</span></h3>'
                         '<ul class="tight">' + "".join(f"<li>{_e(x)}</li>" for x in lines)
                         + "</ul>")
    warnings = warning_table(study)
    parts.append("<h2>Stability warnings</h2>")
    parts.append(html_table(warnings) if warnings.rows
                 else '<p class="ok">No stability warning.</p>')
    failed = failed_table(study)
    parts.append("<h2>Failed trials</h2>")
    parts.append(html_table(failed) if failed.rows else '<p class="ok">No failed trial.</p>')
    parts += ["<h2>How to reproduce</h2>",
              f"<pre><code>{_e(chr(10).join(commands.reproduce(study, here)))}</code></pre>",
              "<details><summary>Server command of every cell (first trial, as run)</summary>"]
    for c in study.cells:
        cmd = commands.server_command(c)
        if cmd:
            parts.append(f"<h3>{_e(study.label(c.coords))}</h3><pre><code>{_e(cmd)}</code></pre>")
    parts.append("</details>")
    parts.append(f"<footer>crossbench {_e(__version__)} &middot; analysis "
                 f"schema {_e(a.get('schema_version'))} by crossbench "
                 f"{_e(a.get('crossbench_version'))} &middot; every number re-derives from "
                 "the run directory's raw records (<code>crossbench analyze</code>)</footer>")
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"


# -- Markdown ------------------------------------------------------------------------------

def render_markdown(study: Study, card: Card, images: list[Image],
                    plot_dir: str = "plots", here: str = "") -> str:
    """The Markdown twin of the HTML report; figures link ``plot_dir/<name>.png``."""
    a = study.analysis
    out = [f"# {study.name}", "", f"crossbench study report, {study.kind} run, "
           f"{len(study.cells)} cells.", ""]
    if study.notes:
        out += [study.notes, ""]
    for w in study.run_warnings:
        out += [f"**Run warning:** {w}", ""]
    out += [f"**{headline(study)}**", ""]
    if a.get("pairs"):
        t = verdict_table(study)
        out += ["## Verdicts", "", md_table(t.header, t.rows)]
        notes = verdict_notes(study)
        if notes:
            out += [notes.replace("*", "\\*", 1), ""]
    t = cell_table(study)
    out += ["## Cells", "", md_table(t.header, t.rows)]
    starts = start_table(study)
    if starts is not None:
        out += ["## Server starts", "", md_table(starts.header, starts.rows)]
    engines = engine_tables(study)
    if engines is not None:
        out += ["## Across engines", "", *(md_table(t.header, t.rows) for t in engines),
                ENGINES_NOTE, ""]
    if images:
        out += ["## Figures", ""]
        for i in images:
            out += [f"![{i.plot.title}]({plot_dir}/{i.plot.name}.png)", "",
                    f"*{i.plot.title}.* {i.plot.caption}", ""]
    sweeps = sweep_table(study)
    if sweeps is not None:
        out += ["## n-sweeps", "", md_table(sweeps.header, sweeps.rows)]
    out += ["## Study card", ""]
    for s in card.sections:
        out += [f"### {s.title}", "", *(f"- {k}: {v}" for k, v in s.rows), ""]
    if card.varied:
        out += [f"Varied between cells: {', '.join(card.varied)}", ""]
    if card.fixed:
        out += ["<details><summary>Held fixed in every cell: "
                f"{len(card.fixed)} settings</summary>", "",
                *(f"- `{k}`: {v}" for k, v in card.fixed), "", "</details>", ""]
    items = confound_items(study)
    if items:
        out += ["## Confounds", ""]
        for label, status, lines in items:
            out += [f"### {label}: {status}", "", *(f"- {x}" for x in lines), ""]
    warnings = warning_table(study)
    out += ["## Stability warnings", ""]
    out += [md_table(warnings.header, warnings.rows)] if warnings.rows else \
        ["No stability warning.", ""]
    failed = failed_table(study)
    out += ["## Failed trials", ""]
    out += [md_table(failed.header, failed.rows)] if failed.rows else ["No failed trial.", ""]
    out += ["## How to reproduce", "", "```sh", *commands.reproduce(study, here), "```", ""]
    for c in study.cells:
        cmd = commands.server_command(c)
        if cmd:
            out += [f"Server, {study.label(c.coords)}:", "", "```sh", cmd, "```", ""]
    out.append(f"crossbench {__version__}; analysis schema {a.get('schema_version')}; every "
               "number re-derives from the run directory's raw records.")
    return "\n".join(out) + "\n"
