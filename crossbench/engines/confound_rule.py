"""The interface of a confound rule (a known harmful interaction), shared by the rules of
:mod:`crossbench.confounds.rules` and each engine's own (``engines/*/rules.py``, named by
``rules`` of :func:`crossbench.engines.registry.register`).

It lives here, below both, so that an engine's rules import nothing above the engines and
the confound checks load them through the registry without a circle. A rule reads two
normalized views (:mod:`crossbench.confounds.normalize`), A and B, and returns
:class:`Finding` s: ``confounding`` (the comparison does not isolate its variable: the verdict
must not stay clean) or ``caveat`` (results are valid only with a qualification).

Example (an engine's own rule)::

    def _check(rule: Rule, a: View, b: View, ctx: PairContext) -> list[Finding]:
        return [rule.finding("caveat", f"{label}: ...", "do this") for label, v in
                arms(a, b, ctx) if kind(v) == "my-engine" and mtp(v)]

    RULES = (Rule("my-engine-mtp", "title", "explanation", "https://...", _check,
                  per_arm=True),)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

Scalar = str | int | float | bool
"""A value of a normalized view."""

Severity = Literal["confounding", "caveat"]
"""How a finding weighs: the comparison is confounded, or valid with a caveat."""
View = Mapping[str, Scalar]
"""A normalized view of one trial (field -> value)."""


@dataclass(frozen=True)
class Finding:
    """One rule firing on a trial or a pair."""

    rule: str
    severity: Severity
    message: str
    action: str
    source: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view."""
        return asdict(self)


@dataclass(frozen=True)
class PairContext:
    """What the comparison claims: arm labels, its axis (``spec``, ``engine``...), and
    whether it claims greedy output parity between the arms."""

    labels: tuple[str, str] = ("A", "B")
    axis: str | None = "spec"
    greedy_parity: bool = False
    single: bool = False  # one trial checked alone (a and b are the same view)


Check = Callable[["Rule", View, View, PairContext], list[Finding]]


@dataclass(frozen=True)
class Rule:
    """A known interaction: id, title, explanation, source URL and its check."""

    id: str
    title: str
    explanation: str
    source: str
    check: Check
    per_arm: bool = False  # meaningful for one trial alone

    def finding(self, severity: Severity, message: str, action: str) -> Finding:
        """A finding of this rule."""
        return Finding(self.id, severity, message, action, self.source)


# -- reading views ---------------------------------------------------------------------------


def arms(a: View, b: View, ctx: PairContext) -> Iterator[tuple[str, View]]:
    """(label, view) of each arm the check concerns: both of a pair, the one of a trial."""
    yield ctx.labels[0], a
    if not ctx.single:
        yield ctx.labels[1], b


def truthy(v: Scalar | None) -> bool:
    """Set and not false-like: ``True``, ``1``, ``"on"``, or a fact's text (e.g. the reason
    vLLM logged for a model runner fallback)."""
    if isinstance(v, str):
        return v.strip().lower() not in ("", "0", "false", "off", "no", "none", "disabled")
    return bool(v)


def kind(v: View) -> str:
    """The engine kind of a view (``llama-server``, ``vllm``...; empty when unknown)."""
    return str(v.get("engine.kind", ""))


def mtp(v: View) -> bool:
    """Whether the view's speculative method is MTP."""
    return any("mtp" in str(v.get(k, "")).lower() for k in ("spec.type", "spec.method"))


def synthetic_settings(v: View) -> dict[str, Scalar]:
    """The settings that script the view's acceptance (llama-server's ``spec.synth_rates`` /
    ``spec.synth_len``, vLLM's ``spec.rejection_sample_method: synthetic``); empty when the
    acceptance is the draft's own."""
    out = {k: x for k, x in v.items() if k.startswith("spec.") and "synth" in k
           and x not in ("", "[]", 0, False)}
    if str(v.get("spec.rejection_sample_method", "")).lower() == "synthetic":
        out["spec.rejection_sample_method"] = "synthetic"
    return out


def synthetic(v: View) -> bool:
    """Whether the view's acceptance is scripted, not the draft's."""
    return bool(synthetic_settings(v))


def num(v: Scalar | None) -> float | None:
    """A view value as a number (None when unset, a bool or not numeric)."""
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except ValueError:
        return None
