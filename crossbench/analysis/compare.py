"""``crossbench compare A B``: any two cells or runs, with what differs between them.

A and B are run directories or ``DIR:CELL_ID``. Every recorded setting that differs is
classified by ``crossbench.analysis.confounding`` (one diff for analyze and compare), the
comparison is labelled (``identical configuration``, ``single-variable (spec settings
only)``, ``multi-variable``, ``multi-variable (cross-engine)`` or ``unchecked (...)``:
docs/analysis.md, "crossbench compare A B"), and B is measured against A with the paired
statistics of ``paired.py`` (B as the speculative side, A as the baseline).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crossbench.analysis import paired, parity, stats
from crossbench.analysis.confounding import confounds
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.rundir import CellData, load_cell_dir, matrix_cell
from crossbench.errors import UserError
from crossbench.store import rundir


def resolve(target: str) -> CellData:
    """A run directory, or ``DIR:CELL_ID`` inside a matrix/import directory, as a cell."""
    path = Path(target)
    if rundir.is_run(path):
        return load_cell_dir(path, str(path))
    if rundir.is_matrix(path):
        raise UserError(f"{target} holds several cells",
                        f"name one as {target}:CELL_ID (see its state.json or "
                        "`crossbench status`)")
    root, sep, cell_id = target.partition(":")
    if sep and rundir.is_matrix(Path(root)):
        return matrix_cell(Path(root), cell_id)
    raise UserError(f"{target} is not a run directory or DIR:CELL_ID",
                    "give a `crossbench run --out` directory, a matrix cell folder, or "
                    "MATRIX_DIR:CELL_ID")


def label(diffs: list[dict[str, Any]]) -> str:
    """``identical configuration``, ``single-variable (spec settings only)`` or
    ``multi-variable``."""
    if not diffs:
        return "identical configuration"
    if all(d["spec"] for d in diffs):
        return "single-variable (spec settings only)"
    return "multi-variable"


def compare(a: CellData, b: CellData, opts: StatsOptions) -> dict[str, Any]:
    """B against A: classified differences (``crossbench.analysis.confounding``), the label,
    paired speedups and output parity.

    Two engines are always ``multi-variable (cross-engine)``: everything differs at once.
    Otherwise the intended axis is the speculative settings, and any confounding difference
    or rule finding makes the comparison ``multi-variable`` and its verdict ``confounded``.
    """
    cross_engine = (a.manifest.get("engine") or {}).get("kind") != \
        (b.manifest.get("engine") or {}).get("kind")
    conf = confounds(a, b, axis="engine" if cross_engine else "spec", labels=("A", "B"))
    diffs = [{**d, "spec": d["kind"] == "intended"}
             for d in (conf["diff"]["differences"] if conf["checked"] else [])
             if d["kind"] != "benign"]
    opts = opts.for_run("import" if a.imported or b.imported else "run")
    result = paired.compare(b.figures, a.figures, opts)
    sp = result["speedup"]
    lab = ("multi-variable (cross-engine)" if cross_engine else
           "multi-variable" if conf["confounded"] else
           label(diffs) if conf["checked"] else f"unchecked ({conf['reason']})")
    return {
        "a": {"cell": a.id, "dir": str(a.root), "coords": a.coords},
        "b": {"cell": b.id, "dir": str(b.root), "coords": b.coords},
        "differences": diffs,
        "confounds": {k: v for k, v in conf.items() if k != "text"},
        "diff_text": conf.get("text"),
        "label": lab,
        "speedup": result["speedup"], "speedup_e2e": result["speedup_e2e"],
        "verdict": stats.verdict(tuple(sp["ci95"]) if sp["ci95"] else None, sp["n_samples"],
                                 sp["n_prompts"], opts.min_samples,
                                 confounded=lab.startswith("multi-variable"),
                                 equivalence=opts.equivalence),
        "statistical_verdict": result["verdict"], "pairing": result["pairing"],
        "per_category": result["per_category"],
        "acceptance": {"a": a.acceptance.draft_acceptance_rate,
                       "b": b.acceptance.draft_acceptance_rate},
        "parity": parity.parity(b, a),
    }


def format_compare(r: dict[str, Any]) -> str:
    """The text ``crossbench compare`` prints."""
    def short(v: Any) -> str:
        s = str(v)
        return s if len(s) <= 40 else s[:37] + "..."

    lines = [f"A: {r['a']['cell']}", f"B: {r['b']['cell']}", f"comparison: {r['label']}"]
    if r["differences"]:
        lines.append("differing settings (A -> B), each with its class:")
        for d in r["differences"]:
            tag = d.get("kind") or ("spec" if d["spec"] else "OTHER")
            lines.append(f"  [{tag}] {d['field']}: {short(d['a'])} -> {short(d['b'])}")
    for f in r["confounds"].get("findings", []):
        lines.append(f"  {f['severity']}: {f['message']} (fix: {f['action']}) [{f['source']}]")
    for name in ("speedup", "speedup_e2e"):
        s = r[name]
        ci = s["ci95"]
        lines.append(
            f"{'decode' if name == 'speedup' else 'end-to-end'} speedup B/A: "
            + ("n/a" if s["geomean"] is None else
               f"{s['geomean']:.3f} (median {s['median']:.3f}, "
               f"{s['ci_level']:.0%} CI [{ci[0]:.3f}, {ci[1]:.3f}])" if ci else
               f"{s['geomean']:.3f}")
            + f", {s['n_samples']} paired samples over {s['n_prompts']} prompts: "
            f"{s['verdict']}")
    lines.append(f"output parity: {r['parity']['verdict']}")
    if r["label"].startswith("multi-variable"):
        lines.append("note: more than the speculative settings differ, so this speedup "
                     "cannot be credited to the speculative method alone")
    return "\n".join(lines)
