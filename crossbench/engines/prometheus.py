"""Prometheus text parsing shared by engine adapters (a real parser, not prefix matching)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def sample_key(name: str, labels: dict[str, str]) -> str:
    """Canonical key of a sample: ``name{a="1",b="2"}`` with labels sorted, or just ``name``."""
    if not labels:
        return name
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def parse_samples(text: str) -> dict[str, float]:
    """Every sample of a Prometheus text exposition, keyed by :func:`sample_key`.

    ``_created`` series (timestamps, not counts) are dropped.
    """
    return {sample_key(s.name, dict(s.labels)): float(s.value)
            for fam in text_string_to_metric_families(text) for s in fam.samples
            if not s.name.endswith("_created")}


def counter(samples: dict[str, float], name: str) -> float | None:
    """A counter's value, accepting the name with or without the ``_total`` suffix."""
    base = name.removesuffix("_total")
    return next((samples[c] for c in (base + "_total", base) if c in samples), None)


def labelled(samples: dict[str, float], name: str, label: str) -> dict[str, float]:
    """``{label value: value}`` for one metric (``_total`` optional), summed over other labels."""
    base = name.removesuffix("_total")
    out: dict[str, float] = {}
    for key, value in samples.items():
        metric, _, rest = key.partition("{")
        if metric not in (base, base + "_total") or not rest:
            continue
        for part in rest.rstrip("}").split(","):
            k, _, v = part.partition("=")
            if k == label:
                lv = v.strip('"')
                out[lv] = out.get(lv, 0.0) + value
    return out


def total(samples: dict[str, float], name: str) -> float | None:
    """Sum of every series of one metric whatever its labels (``_total`` optional), e.g. a
    vLLM counter or gauge over its ``engine`` label under data parallel; None when absent.

    Only the metric itself counts: a histogram named ``x_total`` shows as ``x_total_bucket``,
    ``x_total_sum`` and ``x_total_count``, none of which is ``x_total``.
    """
    base = name.removesuffix("_total")
    names = (base, base + "_total")
    values = [v for k, v in samples.items() if k.partition("{")[0] in names]
    return sum(values) if values else None
