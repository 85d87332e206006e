"""Check the vLLM adapter against a real vLLM on your own GPU machine, in one command
(``crossbench engines check vllm``): synthetic acceptance at known rates (ngram on releases
without it), one ``ok``/``FAIL`` line per check. The checks, their tolerances and the expected
output: docs/vllm.md, "Validate the adapter on your GPU machine".
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crossbench.analysis import acceptance
from crossbench.engines import registry
from crossbench.engines.vllm.metrics import SPEC_PREFIX
from crossbench.engines.vllm.profile import is_standin, parse_version, profile_for
from crossbench.engines.vllm.server import VllmServer
from crossbench.errors import CrossbenchError
from crossbench.runner.engine_check import (
    Report,
    check_ready,
    post_json,
    run_server,
    settled,
    stream_load,
)
from crossbench.store import rundir

RATES = [0.9, 0.6, 0.3]
#: the counters that must stop moving before a scrape counts (vLLM records a step's
#: statistics after it streams the step's tokens)
SETTLE = [SPEC_PREFIX + n for n in ("num_drafts", "num_accepted_tokens")]


def version_text(binary: str) -> str:
    """The last line ``BINARY --version`` prints (vLLM logs before it)."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=300,
                         check=False)
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def run_check(binary: str, model: str, draft: str | None, out: Path, requests: int,
              max_tokens: int, say: Callable[[str], None] = print,
              server: dict[str, Any] | None = None) -> int:
    """Run the checks; returns the number that failed."""
    rep = Report(say)
    out.mkdir(parents=True, exist_ok=True)
    text = version_text(binary)
    release, _ = parse_version(text)
    try:
        prof = profile_for(release or "?")
    except CrossbenchError as e:
        rep.check("profile", False, f"`{binary} --version` says {text!r}: {e.one_line()}")
        return rep.failed
    rep.check("profile", True, f"{text} -> {prof.origin}"
              + (" (crossbench's STAND-IN, not vLLM)" if is_standin(text) else ""))
    synthetic = "synthetic_acceptance_rates" in prof.spec_fields
    spec: dict[str, Any] = (
        {"type": "draft_model", "draft_model": draft or model, "synth_rates": RATES}
        if synthetic else {"type": "ngram", "n": len(RATES)})
    config: dict[str, Any] = {"binary": binary, "version": prof.version, "model": model,
                              "seed": 0, "max_model_len": 2048, "spec": spec, **(server or {})}
    if prof.per_request is not None:
        config["per_request_spec_decode_metrics"] = "summary"
    return run_server(rep, "vllm", VllmServer, config, out / rundir.SERVER_LOG, prof.origin,
                      lambda srv: _serve_and_measure(rep, srv, out, requests, max_tokens,
                                                     synthetic))


def _serve_and_measure(rep: Report, srv: VllmServer, out: Path, requests: int,
                       max_tokens: int, synthetic: bool) -> None:
    if not check_ready(rep, srv):
        return
    facts = srv.startup_facts()
    got = {k: v for k, v in (facts.to_dict() if facts else {}).items()
           if k != "lines" and v is not None}
    rep.check("startup log", "version" in got and "kv_cache_tokens" in got,
              json.dumps(got, default=str))
    before, after, records = stream_load(rep, srv, srv.served_model_name, out, requests,
                                         max_tokens, SETTLE)
    d = acceptance.counter_delta(before.samples, after.samples,
                                 registry.spec_metric_prefix("vllm"))
    acc = acceptance.compute(d, records)
    mal = acc.mean_acceptance_length
    figures = (f"{d.drafts:g} drafts, per position {[round(p, 3) for p in acc.per_position]}"
               f", MAL {'-' if mal is None else round(mal, 3)}")
    if synthetic:
        close = (len(acc.per_position) == len(RATES) and d.drafts >= 1000
                 and all(abs(a - b) <= 0.05 for a, b in zip(acc.per_position, RATES,
                                                              strict=True))
                 and abs((acc.mean_acceptance_length or 0) - 1 - sum(RATES)) <= 0.1)
        rep.check("acceptance", close, f"{figures}; configured {RATES}")
    else:
        bad = [c.detail for c in acceptance.integrity(acc, d, len(RATES), True)
               if c.name in ("accepted_le_drafted", "mal_le_n_plus_1",
                             "per_position_consistent") and not c.passed]
        rep.check("acceptance", d.present and not bad, figures + "; " + "; ".join(bad))
    if srv.profile.per_request is not None:
        _check_per_request(rep, srv, max_tokens)


def _check_per_request(rep: Report, srv: VllmServer, max_tokens: int) -> None:
    before = settled(srv, SETTLE).samples
    answer = post_json(srv, "/v1/completions", {
        "model": srv.served_model_name, "prompt": "Count from one to fifty:",
        "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})
    per = (answer.get("metrics") or {}).get("speculative_decoding") or {}
    d = acceptance.counter_delta(before, settled(srv, SETTLE).samples,
                                 registry.spec_metric_prefix("vllm"))
    same = (per.get("num_spec_steps") == d.drafts and per.get("num_draft_tokens") ==
            d.draft_tokens and per.get("num_accepted_draft_tokens") == d.accepted)
    rep.check("per-request metrics", same, f"response {per or 'has no metrics'}; counters "
              f"drafts {d.drafts:g}, drafted {d.draft_tokens:g}, accepted {d.accepted:g}")
