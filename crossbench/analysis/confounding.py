"""What else differs between the two sides of a comparison, and whether that confounds it.

Both sides are normalized (``crossbench.confounds.normalize``) from their run directories,
diffed field by field with the comparison's axis as the intended difference, and checked by
the known-interaction rules. A comparison is *confounded* when any difference is classified
confounding or any rule finding has severity ``confounding``; its verdict then reads
``confounded`` (``crossbench.analysis.stats.verdict``) while its numbers stay as measured.
"""

from __future__ import annotations

from typing import Any

from crossbench.analysis.rundir import CellData
from crossbench.confounds.diff import AXES, diff
from crossbench.confounds.normalize import normalize_run_dir
from crossbench.confounds.rules import check_pair
from crossbench.errors import UserError


def confounds(a: CellData, b: CellData, axis: str = "spec",
              labels: tuple[str, str] = ("spec", "baseline")) -> dict[str, Any]:
    """The classified differences and rule findings of ``a`` against ``b`` (first trials).

    ``axis`` names the intended difference: ``spec`` (a speculative cell against its
    baseline), ``engine`` (two engines: every other difference still counts), or ``none``.
    Returns ``{"checked": False, "reason": ...}`` when a side has no readable manifest.
    """
    try:
        va, vb = normalize_run_dir(a.root), normalize_run_dir(b.root)
    except (UserError, OSError, ValueError, KeyError) as e:
        return {"checked": False, "confounded": False, "reason": str(e)}
    d = diff(va, vb, AXES[axis])
    findings = check_pair(va, vb, labels=labels, axis=axis)
    bad = [f for f in findings if f.severity == "confounding"]
    return {
        "checked": True,
        "axis": axis,
        "confounded": d.confounded or bool(bad),
        "confounding_fields": [x.field for x in d.confounding],
        "diff": d.to_dict(),
        "findings": [f.to_dict() for f in findings],
        "text": d.render(labels),
    }
