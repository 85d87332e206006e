"""The PR datapoint: a compact Markdown block to paste into an upstream pull request.

One table (the chosen pairs), the environment in a few lines (GPU and driver, engine build
and commit, model with quantization and hash prefix, the server flags that matter), the exact
server and client commands, the caveats the confound check raised, and a placeholder for the
archive's DOI. It always fits in :data:`MAX_LINES` lines; a selection that would not is
refused with the fix (pick cells with ``--cells``).
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any

from crossbench.analysis.stability import WarningKind
from crossbench.errors import UserError
from crossbench.report import commands
from crossbench.report.card import engine_line, gpu_line, model_files, model_line
from crossbench.report.html import ci_text, num, verdict_text
from crossbench.report.plots import pair_label
from crossbench.report.study import Cell, Study

MAX_LINES = 59
"""A datapoint has fewer than 60 lines."""
MAX_ROWS = 12
"""Most pairs in one datapoint's table."""
DOI_PLACEHOLDER = "https://doi.org/10.5281/zenodo.XXXXXXX"


def select_pairs(study: Study, patterns: list[str] | None) -> list[dict[str, Any]]:
    """The pairs whose speculative cell id matches a pattern (exact or glob); all by default."""
    pairs = list(study.analysis.get("pairs", []))
    if not pairs:
        raise UserError(f"{study.root} has no speculative cell paired with a baseline",
                        "a datapoint compares a method with its baseline: run a matrix with "
                        "`method: none` and a speculative arm")
    if not patterns:
        chosen = pairs
    else:
        chosen = [p for p in pairs
                  if any(p["cell"] == pat or fnmatch.fnmatchcase(p["cell"], pat)
                         for pat in patterns)]
        if not chosen:
            ids = ", ".join(p["cell"] for p in pairs[:6])
            raise UserError(f"--cells {' '.join(patterns)} matches no speculative cell",
                            f"use cell ids or globs, e.g. {ids}")
    if len(chosen) > MAX_ROWS:
        raise UserError(f"{len(chosen)} pairs do not fit one datapoint (at most {MAX_ROWS})",
                        "pick the cells that make your point with --cells (globs work, e.g. "
                        "--cells '*/n4/*'); the report shows them all")
    return chosen


def _cell(study: Study, cell_id: str) -> Cell:
    cell = study.cell(cell_id)
    if cell is None:
        raise UserError(f"cell {cell_id} has no manifest in {study.root}",
                        "point at a complete run directory")
    return cell


def environment(study: Study, pairs: list[dict[str, Any]]) -> list[str]:
    """GPU and driver, engine builds, models, flags, workload: a few bullet lines."""
    spec_cells = [_cell(study, p["cell"]) for p in pairs]
    base_cells = [_cell(study, p["baseline_cell"]) for p in pairs]
    cells = base_cells + spec_cells
    prov = cells[0].provenance()
    gpu = prov.get("gpu") or {}
    host = prov.get("host") or cells[0].manifest.get("host") or {}
    lines = []
    gpu_text = gpu_line(gpu) if gpu else "not recorded"
    if gpu.get("driver"):
        gpu_text += f", driver {gpu['driver']}"
        if gpu.get("cuda_driver_version"):
            gpu_text += f" (CUDA {gpu['cuda_driver_version']})"
    lines.append(f"- **GPU**: {gpu_text}; CPU {host.get('cpu', 'n/a')} "
                 f"({host.get('cpus', '?')} cores)")
    engines = sorted({engine_line(c) for c in cells})
    lines.append(f"- **Engine**: {'; '.join(engines)}")
    models = list(dict.fromkeys(f"{name} `{ref}` ({model_line(facts, hash_chars=12)})"
                                for name, ref, facts in model_files(cells)))
    lines.append(f"- **Models**: {'; '.join(models) or 'not recorded'}")
    base_argv = base_cells[0].argv()
    if base_argv:
        lines.append(f"- **Flags**: `{commands.quote(commands.flags_that_matter(base_argv))}`"
                     " (both arms)")
    load = dict((base_cells[0].manifest.get("config") or {}).get("load") or {})
    wl = base_cells[0].manifest.get("workload") or {}
    planned = (base_cells[0].manifest.get("config") or {}).get("trials")
    done = sorted({len(c.trials) for c in base_cells if c.trials})  # imports keep no list
    trials = (f"{planned}" if not done or done == [planned] else
              f"{'-'.join(str(d) for d in sorted({done[0], done[-1]}))} of {planned} "
              "planned")
    lines.append(f"- **Workload**: {workload_text(wl, load, trials)}")
    return lines


def workload_text(wl: dict[str, Any], load: dict[str, Any], trials: str) -> str:
    """The workload in one line, with only what the record knows: an import leaves unknown
    (None) what its source did not say, and that is left out rather than printed."""
    spec = wl.get("spec") or load.get("workload") or "workload not recorded"
    text = f"{spec} ({wl['prompts']} prompts)" if wl.get("prompts") is not None else str(spec)
    runs = f"{trials} trials"
    if load.get("requests") is not None:
        runs = f"{load['requests']} requests x {runs}"
    parts = [text, runs]
    parts += [f"{k} {load[k]}" for k in ("max_tokens", "temperature", "concurrency")
              if load.get(k) is not None]
    return ", ".join(parts)


def source_line(study: Study) -> str:
    """Where the requests came from: crossbench's client (a matrix or a single run), or the
    files an import read and the tool that wrote them."""
    if study.kind == "matrix":
        return "# client: crossbench's streaming client, driven by the study's matrix file"
    if study.kind != "import":
        return "# client: crossbench's streaming client (`crossbench run`)"
    source = (study.state or {}).get("source") or {}
    tool = str(source.get("tool") or "another tool")
    if tool == "synthetic":
        return "# source: synthetic records with known figures (no engine, no client)"
    files = [Path(str(f)).name for f in source.get("files") or []]
    where = (", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
             if files else str(source.get("dir") or source.get("file") or "its files"))
    what = f" ({source['format']})" if source.get("format") else ""
    return (f"# source: {tool} results{what} from {where}, measured by the study's own tools "
            f"and read with `crossbench import {tool}`")


def _table(study: Study, pairs: list[dict[str, Any]]) -> list[str]:
    cells = {c["cell"]: c for c in study.analysis.get("cells", [])}
    lines = [f"| config | speedup ({study.level} CI) | verdict | acceptance | MAL | "
             "tok/s base → spec | TPOT p50 ms base → spec |",
             "|---|---|---|---|---|---|---|"]
    for p in pairs:
        sp, acc = p["speedup"], p["acceptance"]
        tpot = [((cells.get(k) or {}).get("latency_ms") or {}).get("tpot", {}).get("p50")
                for k in (p["baseline_cell"], p["cell"])]
        lines.append(
            f"| {pair_label(study, p)} | {num(sp.get('geomean'))} {ci_text(sp.get('ci95'))} | "
            f"{verdict_text(p)} | {num(acc.get('draft_acceptance_rate'))} | "
            f"{num(acc.get('mean_acceptance_length'))} | {num(p.get('baseline_tok_s'), '.1f')}"
            f" → {num(p.get('spec_tok_s'), '.1f')} | {num(tpot[0], '.2f')} → "
            f"{num(tpot[1], '.2f')} |")
    return lines


_WARNING_CAVEATS = (
    (WarningKind.SINGLE_TRIAL, "single trial: one trial per cell, so one server start per "
     "side, and the intervals leave out start-to-start variation"),
    (WarningKind.SINGLE_START, "single start: every trial ran on one server start per side, "
     "so the intervals leave out start-to-start variation"),
    (WarningKind.STARTS_DISAGREE, "starts disagree: with each server start as one sample the "
     "interval holds 1; the verdict rests on fewer starts than their spread needs"),
    (WarningKind.HOST_BOUND, "host-bound: the speculative arm's GPU waited on the host CPU "
     "more than half its measured time, so this speedup holds for this host; another CPU or "
     "load gives another"),
)
"""The caveat line of each pair warning a datapoint names, in the order it names them."""


def caveats(pairs: list[dict[str, Any]]) -> list[str]:
    """What the confound check raised for these pairs, and verdicts from one server start
    per side (deduplicated)."""
    seen: list[str] = []
    for p in pairs:
        conf = p.get("confounds") or {}
        if not conf.get("checked", True):
            seen.append(f"confounds not checked: {conf.get('reason')}")
        fields = conf.get("confounding_fields") or []
        if fields:
            seen.append(f"besides the speculative settings these differ: {', '.join(fields)}")
        for f in conf.get("findings") or []:
            if f.get("rule") == "synthetic-acceptance":  # one line for all its cells
                seen.append(f"{f.get('severity')}: synthetic acceptance: acceptance is "
                            "scripted, not the draft's; the output text is invalid and the "
                            "speed shows what that acceptance would give")
                continue
            seen.append(f"{f.get('severity')}: {f.get('message')}")
        kinds = {w.get("kind") for w in p.get("warnings") or []}
        seen += [text for kind, text in _WARNING_CAVEATS if kind in kinds]
    return list(dict.fromkeys(seen))


def datapoint(study: Study, patterns: list[str] | None = None) -> str:
    """The Markdown block (see the module docstring)."""
    pairs = select_pairs(study, patterns)
    base = _cell(study, pairs[0]["baseline_cell"])
    lines = [f"#### crossbench datapoint: {study.name}", ""]
    lines += _table(study, pairs)
    lines.append("")
    lines += environment(study, pairs)
    lines += ["", "<details><summary>Commands</summary>", "", "```sh"]
    base_cmd = commands.server_command(base)
    if base_cmd:
        lines += ["# server, baseline (as run; the port was picked free)", base_cmd]
    for p in pairs:
        cmd = commands.server_command(_cell(study, p["cell"]))
        if cmd:
            lines += [f"# server, {pair_label(study, p)}", cmd]
    lines += [source_line(study),
              *commands.client_commands(study, [p["cell"] for p in pairs]), "```", "",
              "</details>", ""]
    tail = ["", f"Raw records, analysis and report: {DOI_PLACEHOLDER} (replace with the "
            "archive's DOI)"]
    notes = caveats(pairs)
    room = MAX_LINES - len(lines) - len(tail) - 1
    if len(notes) > room:
        notes = [*notes[:max(room - 1, 0)], f"... {len(notes) - max(room - 1, 0)} more: see "
                 "the report's Confounds section"]
    lines.append("**Caveats (confound check)**: " + ("none raised" if not notes else ""))
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines + tail) + "\n"
