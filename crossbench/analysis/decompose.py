"""Where a speculative step's cost goes: its parts, each measured by a run of its own, against
the cost model C(n) = d + v n that a study's n-sweep fitted (``analysis.sweep.cost_model``).

A speculative step at draft length n costs C(n) plain decode steps of its own baseline. Three
parts make it up:

- **verification**: the target's forward pass over n + 1 tokens at the study's context depth
  (``llama-bench -p n+1 -n 0 -d DEPTH``: a prompt batch of n + 1 tokens after DEPTH tokens of
  context, which is what a verification batch is);
- **drafting**: for a separate draft model, n of its own decode steps (``llama-bench -m DRAFT
  -p 0 -n N -d DEPTH``, per token). A head that reads the target's hidden states (EAGLE-3,
  DFlash, MTP) cannot run without the target, so llama-bench cannot time it alone: its cost
  stays in the rest, and the output says so;
- **the rest**: C(n) minus the measured parts: sampling, the acceptance check, KV-cache
  bookkeeping, the server's host work per step, and whatever drafting was not measured.

Every part is in units of the plain step measured in the same way (``llama-bench -p 0 -n N
-d DEPTH`` of the target), so the parts and the fitted C(n) share a unit. Where the measured
parts explain C(n) to within :data:`EXPLAINED` the decomposition says so; otherwise it names
the rest as the unexplained share.

The raw llama-bench output of every part is kept beside the figures (``raw``), so each
figure re-derives from it. What this does not measure: the draft model re-reading the tokens
accepted in the previous step (a small batch), and anything that differs between llama-bench
and the server (its slots, its sampling chain, its HTTP loop): that is what the rest holds.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossbench.errors import UserError

EXPLAINED = 0.10
"""Relative gap between the measured parts and the fitted C(n) within which the parts are
said to explain the step (the issue's 10 %)."""

HEADS = ("draft-eagle3", "draft-dflash", "draft-mtp", "eagle3", "dflash", "mtp")
"""Methods whose drafter reads the target's hidden states: not timeable alone."""


@dataclass
class Measured:
    """Per-part times in milliseconds from llama-bench, with the raw tests they came from."""

    plain_ms: float
    verify_ms: dict[int, float]
    draft_ms_per_token: float | None = None
    depth: int = 0
    raw: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def _mean_ms(test: dict[str, Any]) -> float:
    """Mean time of one llama-bench test in ms (its ``samples_ns``, else ``avg_ns``)."""
    samples = test.get("samples_ns") or [test.get("avg_ns")]
    values = [float(s) for s in samples if isinstance(s, int | float) and s > 0]
    if not values:
        raise UserError("a llama-bench test has no positive samples_ns",
                        "run llama-bench again; check its output with -o json")
    return sum(values) / len(values) / 1e6


def from_bench(target_tests: list[dict[str, Any]],
               draft_tests: list[dict[str, Any]] | None = None) -> Measured:
    """The parts' times from ``llama-bench -o json`` tests: the target's generation test
    (``n_prompt`` 0) gives the plain step per token, its prompt tests (``n_gen`` 0) the
    verification forward of ``n_prompt`` tokens; a draft model's generation test its step."""
    plain = [t for t in target_tests if t.get("n_prompt") == 0 and t.get("n_gen")]
    if len(plain) != 1:
        raise UserError(f"the target's llama-bench output holds {len(plain)} generation tests "
                        "(n_prompt 0), not 1", "run it with `-p 0 -n N` once")
    verify = {int(t["n_prompt"]): _mean_ms(t) for t in target_tests
              if t.get("n_gen") == 0 and t.get("n_prompt")}
    if not verify:
        raise UserError("the target's llama-bench output holds no prompt test (n_gen 0)",
                        "run it with `-p K1,K2,... -n 0` for the verification sizes n + 1")
    depths = {int(t.get("n_depth") or 0) for t in target_tests}
    if len(depths) != 1:
        raise UserError(f"the target's tests ran at several depths {sorted(depths)}",
                        "run every test at one `-d DEPTH`")
    draft_ms = None
    if draft_tests:
        dplain = [t for t in draft_tests if t.get("n_prompt") == 0 and t.get("n_gen")]
        if len(dplain) != 1:
            raise UserError("the draft's llama-bench output needs exactly one generation test",
                            "run it with `-p 0 -n N`")
        draft_ms = _mean_ms(dplain[0]) / int(dplain[0]["n_gen"])
    return Measured(plain_ms=_mean_ms(plain[0]) / int(plain[0]["n_gen"]), verify_ms=verify,
                    draft_ms_per_token=draft_ms, depth=depths.pop(),
                    raw={"target": target_tests, "draft": draft_tests or []})


def decompose(m: Measured, n_values: list[int], d: float | None = None,
              v: float | None = None, method: str = "draft-simple") -> list[dict[str, Any]]:
    """One row per n: verification and drafting in plain steps, their sum, the fitted C(n)
    (when ``d`` and ``v`` are given) and the rest, with whether the parts explain C(n)."""
    head = method in HEADS
    rows = []
    for n in n_values:
        k = n + 1
        if k not in m.verify_ms:
            raise UserError(f"no verification batch of {k} tokens was measured (n = {n})",
                            f"add {k} to llama-bench's -p list")
        verify = m.verify_ms[k] / m.plain_ms
        if head or m.draft_ms_per_token is None:
            draft = None
        else:
            draft = n * m.draft_ms_per_token / m.plain_ms
        parts = verify + (draft or 0.0)
        row: dict[str, Any] = {"n": n, "verify_tokens": k, "verify_ms": m.verify_ms[k],
                               "verify_steps": verify, "draft_steps": draft,
                               "parts_steps": parts, "plain_ms": m.plain_ms}
        if d is not None and v is not None:
            fitted = d + v * n
            rest = fitted - parts
            row |= {"fitted_steps": fitted, "rest_steps": rest,
                    "rest_share": rest / fitted if fitted else None,
                    "explained": abs(rest) <= EXPLAINED * fitted}
        row["draft_note"] = ("not measured: a head reads the target's hidden states, so "
                             "llama-bench cannot time it alone; its cost is in the rest"
                             if head else None if draft is not None else
                             "not measured: no draft model given")
        rows.append(row)
    return rows


def sweep_cost_model(analysis: dict[str, Any], arm: str, concurrency: int = 1
                     ) -> tuple[float, float, str]:
    """(d, v, method) of the n-sweep of ``arm`` at ``concurrency`` in an analysis."""
    found = [s for s in analysis.get("sweeps", []) if s.get("arm") == arm
             and s.get("concurrency") == concurrency]
    if not found:
        arms = sorted({f"{s.get('arm')} (c={s.get('concurrency')})"
                       for s in analysis.get("sweeps", [])})
        raise UserError(f"no n-sweep of arm {arm!r} at concurrency {concurrency}",
                        f"sweeps: {', '.join(arms) or 'none'}")
    cm = found[0]["cost_model"]
    if not cm.get("fitted"):
        raise UserError(f"the sweep of {arm!r} has no fitted cost model",
                        "it needs three or more n with acceptance counts")
    return float(cm["d"]), float(cm["v"]), str(found[0].get("method"))


def run_llama_bench(binary: Path, model: Path, prompts: list[int], n_gen: int, depth: int,
                    reps: int, extra: list[str]) -> list[dict[str, Any]]:
    """Run ``llama-bench -o json`` once for one model: a generation test of ``n_gen`` tokens
    and a prompt test per size in ``prompts``, all after ``depth`` tokens of context (filled
    outside the timed part); batch sizes are at least the largest prompt, so each prompt test
    is one forward pass."""
    big = max([*prompts, 512])
    cmd = [str(binary), "-m", str(model), "-d", str(depth), "-r", str(reps), "-b", str(big),
           "-ub", str(big), "-p", ",".join(map(str, prompts)) or "0", "-n", str(n_gen),
           "-o", "json", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"llama-bench failed on {model.name}: {last}",
                        "run it by hand to see why: " + " ".join(cmd))
    try:
        tests = json.loads(r.stdout)
    except json.JSONDecodeError as e:
        raise UserError(f"llama-bench printed no JSON ({e})",
                        "use a llama-bench with `-o json` (the pinned build has it)") from e
    if not isinstance(tests, list):
        raise UserError("llama-bench's JSON is not a list of tests", "use `-o json`")
    return tests


def format_rows(rows: list[dict[str, Any]]) -> str:
    """A plain-text table of :func:`decompose`'s rows."""
    def f(x: Any) -> str:
        return "-" if x is None else f"{x:.2f}" if isinstance(x, float) else str(x)

    head = ["n", "verify ms", "verify", "draft", "parts", "fitted C(n)", "rest", "explained"]
    lines = ["  ".join(f"{h:>11}" for h in head)]
    for r in rows:
        share = r.get("rest_share")
        expl = ("-" if "explained" not in r else
                ("yes" if r["explained"] else f"no ({share:+.0%})"))
        cells = [r["n"], r["verify_ms"], r["verify_steps"], r["draft_steps"], r["parts_steps"],
                 r.get("fitted_steps"), r.get("rest_steps"), expl]
        lines.append("  ".join(f"{f(c):>11}" for c in cells))
    notes = {r["draft_note"] for r in rows if r["draft_note"]}
    return "\n".join(lines + [f"draft: {n}" for n in sorted(notes)])


def recorded_variant(cells: Iterable[Any]) -> str | None:
    """The llama.cpp build variant (``cpu``, ``cuda-smNN``) a run's llama.cpp cells recorded in
    their manifests (``engine.build.variant``), or None where none did."""
    for cell in cells:
        build = ((getattr(cell, "manifest", None) or {}).get("engine") or {}).get("build") or {}
        if isinstance(build.get("variant"), str):
            return str(build["variant"])
    return None
