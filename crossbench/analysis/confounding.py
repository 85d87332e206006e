"""What else differs between the two sides of a comparison, and whether that confounds it.

Both sides are normalized (``crossbench.confounds.normalize``) from their run directories,
diffed field by field with the comparison's axis as the intended difference, and checked by
the known-interaction rules. A comparison is *confounded* when any difference is classified
confounding or any rule finding has severity ``confounding``; its verdict then reads
``confounded`` (``crossbench.analysis.stats.verdict``) while its numbers stay as measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossbench.analysis.rundir import CellData
from crossbench.confounds.diff import AXES, diff
from crossbench.confounds.normalize import normalize_trial
from crossbench.confounds.rules import check_pair
from crossbench.errors import UserError


def confounds(a: CellData, b: CellData, axis: str = "spec",
              labels: tuple[str, str] = ("spec", "baseline"),
              trial_caveats: bool = False) -> dict[str, Any]:
    """The classified differences and rule findings of ``a`` against ``b`` (first trials).

    ``axis`` names the intended difference: ``spec`` (a speculative cell against its
    baseline), ``engine`` (two engines: every other difference still counts), or ``none``.
    ``trial_caveats``: runner warnings (other inference processes) are judged per trial by
    the caller (the analysis's ``verdict_caveats``), so the first trials' flag is no
    difference here; ``compare`` keeps it as one.
    Returns ``{"checked": False, "reason": ...}`` when a side has no readable manifest.
    """
    for side, cell in zip(labels, (a, b), strict=True):
        if cell.manifest.get("trials") == []:  # a run whose trials never finished
            return {"checked": False, "confounded": False,
                    "reason": f"the {side} cell ({cell.id}) has no recorded trial: nothing "
                              "ran to compare with"}
    try:
        # the manifests the analysis already holds: never read twice
        va, vb = normalize_trial(a.manifest), normalize_trial(b.manifest)
    except (UserError, OSError, ValueError, KeyError) as e:
        return {"checked": False, "confounded": False, "reason": str(e)}
    if trial_caveats:  # the analysis judges runner warnings trial by trial instead
        for v in (va, vb):
            v.pop("trial.other_engines_running", None)
    d = diff(va, vb, AXES[axis])
    findings = [f.to_dict() for f in check_pair(va, vb, labels=labels, axis=axis)]
    split = split_occasions(a.manifest, b.manifest)
    if split:
        findings.append(_split_finding(split, labels))
    differ = cpu_sets(a.manifest), cpu_sets(b.manifest)
    if differ[0] and differ[1] and differ[0] != differ[1] and not (
            {"host.cpu", "host.cpus"} & {x.field for x in d.confounding}):
        findings.append(_cpu_finding(differ, labels))
    bad = [f for f in findings if f["severity"] == "confounding"]
    return {
        "checked": True,
        "axis": axis,
        "confounded": d.confounded or bool(bad),
        "confounding_fields": [x.field for x in d.confounding],
        "diff": d.to_dict(),
        "findings": findings,
        "text": d.render(labels),
    }


Occasion = tuple[str | None, tuple[str | None, ...]]
"""Where a trial ran: (boot id of the host, its GPUs)."""


def occasion_of(prov: Mapping[str, Any]) -> Occasion:
    """Where one trial ran, from its provenance record: (boot id of the host, UUIDs of the
    visible GPUs).

    Where the trial saw no GPU through NVML (a host without NVIDIA GPUs, logical GPUs handed
    out by a scheduler such as Ray), its ``CUDA_VISIBLE_DEVICES`` (provenance ``env``) stands
    for the GPUs, as ``("CUDA_VISIBLE_DEVICES=1",)``: two trials given different cards read as
    two occasions even then; unset, the GPUs are the empty tuple. A scheduler's node id
    (provenance ``placement``) is not part of it: a Ray cluster started again on the same
    machine gets new node ids for the same cards.
    """
    host = prov.get("host") or {}
    gpus = (prov.get("gpu") or {}).get("gpus") or []
    cards: tuple[str | None, ...] = tuple(g.get("uuid") for g in gpus if isinstance(g, Mapping))
    env = prov.get("env")
    visible = env.get("CUDA_VISIBLE_DEVICES") if isinstance(env, Mapping) else None
    if not cards and visible is not None:
        cards = (f"CUDA_VISIBLE_DEVICES={visible}",)
    return host.get("boot_id"), cards


def occasions(manifest: Mapping[str, Any]) -> dict[int, Occasion]:
    """Where each trial of a run directory's manifest ran (:func:`occasion_of`); trials
    recorded without provenance are left out."""
    out: dict[int, Occasion] = {}
    for entry in manifest.get("trials") or []:
        prov = entry.get("provenance") if isinstance(entry, Mapping) else None
        if isinstance(prov, Mapping) and "trial" in entry:
            out[int(entry["trial"])] = occasion_of(prov)
    return out


def same_occasion(a: Occasion, b: Occasion) -> bool:
    """Whether two trials ran on the same GPUs of the same boot of one machine (a side that
    recorded no boot id, as older runs, is compared by its GPUs only)."""
    (boot_a, gpus_a), (boot_b, gpus_b) = a, b
    return gpus_a == gpus_b and not (boot_a and boot_b and boot_a != boot_b)


def split_occasions(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[int]:
    """Trial numbers that both sides ran but on different machines (or boots, or GPUs).

    Trials are paired by number (trial k of the speculative cell with trial k of its baseline,
    run in the same interleaved round); a matrix resumed on another machine in the middle of a
    round leaves such trials (``--executor ray`` runs the partner again instead). Where a side
    recorded no boot id (older runs), only GPUs are compared.
    """
    oa, ob = occasions(a), occasions(b)
    return [t for t in sorted(set(oa) & set(ob)) if not same_occasion(oa[t], ob[t])]


CpuKey = tuple[str | None, int | None]
"""A host's CPU as the confound check compares it: (model, logical CPUs)."""


def cpu_sets(manifest: Mapping[str, Any]) -> frozenset[CpuKey]:
    """The CPUs (model, logical count) that a run directory's trials ran on, from each trial's
    ``host`` record, else its provenance's ``host`` (trials with neither are left out)."""
    out: set[CpuKey] = set()
    for entry in manifest.get("trials") or []:
        if not isinstance(entry, Mapping):
            continue
        rec = _mapping(entry.get("host"))
        host = _mapping(_mapping(entry.get("provenance")).get("host"))
        cpu, cpus = rec.get("cpu") or host.get("cpu"), rec.get("cpus") or host.get("cpus")
        if cpu is not None or cpus is not None:
            out.add((cpu, int(cpus) if isinstance(cpus, int) else None))
    return frozenset(out)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _cpu_text(cpus: frozenset[CpuKey]) -> str:
    return "; ".join(f"{m or 'unknown CPU'} ({n if n is not None else '?'} CPUs)"
                     for m, n in sorted(cpus, key=str))


def _cpu_finding(cpus: tuple[frozenset[CpuKey], frozenset[CpuKey]],
                 labels: tuple[str, str]) -> dict[str, Any]:
    return {"rule": "different_cpus", "severity": "confounding",
            "message": f"the {labels[0]} cell's trials ran on {_cpu_text(cpus[0])} and the "
                       f"{labels[1]} cell's on {_cpu_text(cpus[1])}: the host's CPU is a "
                       "second variable (a speculative arm's host work per step follows it)",
            "action": "run both cells on one machine (a new --out with --only on the host "
                      "that ran the other), or compare only trials that share a CPU",
            "source": "crossbench.analysis.confounding.cpu_sets"}


def _split_finding(trials: list[int], labels: tuple[str, str]) -> dict[str, Any]:
    listed = ", ".join(str(t) for t in trials)
    return {"rule": "split_occasion", "severity": "confounding",
            "message": f"trial(s) {listed} of {labels[0]} and {labels[1]} ran on different "
                       "machines, boots or GPUs (a resume on another machine in the middle of "
                       "a round): those pairs compare two machines, not two settings",
            "action": "re-run those trials of both cells on one machine (a new --out with "
                      "--only), or analyze only the trials that share a machine",
            "source": "crossbench.analysis.confounding.split_occasions"}
