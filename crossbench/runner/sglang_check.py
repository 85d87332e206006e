"""Check the SGLang adapter against a real SGLang on your own GPU machine, in one command
(``crossbench engines check sglang``): speculative decoding whose outcome is known (the target
as its own STANDALONE draft: MAL n+1), one ``ok``/``FAIL`` line per check, everything seen kept
under ``--out``. The checks, the known truth and its tolerance: docs/sglang.md, "Checking the
adapter on a GPU machine".
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crossbench.analysis import acceptance
from crossbench.engines import registry
from crossbench.engines.prometheus import total
from crossbench.engines.sglang.metrics import GENERATED, REQUESTS, VERIFY_CALLS
from crossbench.engines.sglang.profile import SglangProfile, is_standin, profile_for
from crossbench.engines.sglang.server import SglangServer
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

ALGORITHM = "STANDALONE"
"""The algorithm of the known-truth arm: a whole model as draft (here the target itself)."""
TRUTH_SHARE = 0.9
"""Least share of n+1 the mean acceptance length must reach with draft = target (bf16
near-ties; docs/sglang.md, "The known truth")."""
MIN_STEPS = 200
"""Least verification steps behind the acceptance figure."""
PROMPT = "Count from one to fifty:"
#: the counters that must stop moving before a scrape counts (SGLang counts a request when
#: it finishes)
SETTLE = [VERIFY_CALLS, GENERATED, REQUESTS]


def run_check(binary: str, model: str, draft: str | None, out: Path, requests: int,
              max_tokens: int, n: int = 3, say: Callable[[str], None] = print,
              server: dict[str, Any] | None = None) -> int:
    """Run the checks against the interpreter ``binary``; returns the number that failed.
    ``server`` adds adapter config fields (e.g. ``mem_fraction_static``)."""
    rep = Report(say)
    out.mkdir(parents=True, exist_ok=True)
    log = out / rundir.SERVER_LOG
    prof = _profile(rep, binary, model, log)
    if prof is None:
        return rep.failed
    config: dict[str, Any] = {
        "binary": binary, "version": prof.version, "model": model, "random_seed": 0,
        "context_length": 2048,
        "spec": {"type": ALGORITHM, "n": n, "draft_model": draft or model}, **(server or {})}
    known = draft is None or draft == model
    return run_server(rep, "sglang", SglangServer, config, log, prof.origin,
                      lambda srv: _serve_and_measure(rep, srv, out, requests, max_tokens, n,
                                                     known))


def _profile(rep: Report, binary: str, model: str, log: Path) -> SglangProfile | None:
    """The profile of the interpreter's sglang (its ``profile`` line), None when none."""
    try:
        probe = registry.create("sglang", {"binary": binary, "model": model}, log)
        assert isinstance(probe, SglangServer)
        text = probe.version_text()
    except CrossbenchError as e:
        rep.check("profile", False, e.one_line())
        return None
    try:
        prof = profile_for(text.partition("+")[0])
    except CrossbenchError as e:
        rep.check("profile", False, f"{binary} has sglang {text!r}: {e.one_line()}")
        return None
    rep.check("profile", True, f"sglang {text} -> {prof.origin}"
              + (" (crossbench's STAND-IN, not SGLang)" if is_standin(text) else ""))
    return prof


def _serve_and_measure(rep: Report, srv: SglangServer, out: Path, requests: int,
                       max_tokens: int, n: int, known: bool) -> None:
    if not check_ready(rep, srv):
        return
    _check_server_info(rep, srv, n)
    before, after, records = stream_load(rep, srv, srv.served_model_name, out, requests,
                                         max_tokens, SETTLE)
    d = acceptance.counter_delta(before.samples, after.samples,
                                 registry.spec_metric_prefix("sglang"))
    acc = acceptance.compute(d, records)
    mal = acc.mean_acceptance_length
    bad = [c.detail for c in acceptance.integrity(acc, d, n, True)
           if c.name in ("accepted_le_drafted", "mal_le_n_plus_1") and not c.passed]
    figures = (f"{d.drafts:g} verification steps, {d.accepted:g} accepted drafts, MAL "
               f"{'-' if mal is None else round(mal, 3)}")
    if known:
        low = TRUTH_SHARE * (n + 1)
        if mal is None or mal < low:
            bad.append(f"MAL below {low:g} = {TRUTH_SHARE:g} x (n+1)")
        if d.drafts < MIN_STEPS:
            bad.append(f"fewer than {MIN_STEPS} verification steps (fix: raise --requests "
                       "or --max-tokens)")
        truth = f"known truth (draft = target, greedy): MAL n+1 = {n + 1}, wanted in " \
                f"[{low:g}, {n + 1}] over >= {MIN_STEPS} steps"
    else:
        truth = "no known truth (the draft is not the target): bounds only"
    rep.check("acceptance", d.present and mal is not None and not bad,
              "; ".join([figures, truth, *bad]))
    if "/generate" in srv.profile.routes:
        _check_per_request(rep, srv, max_tokens, n)


def _check_server_info(rep: Report, srv: SglangServer, n: int) -> None:
    props = srv.props()
    info = props.get("startup") or {}
    name = srv.served_model_name
    want = {"served_model_name": name, "version": srv.version_text(),
            "speculative_algorithm": ALGORITHM, "speculative_num_steps": n,
            "speculative_eagle_topk": 1, "speculative_num_draft_tokens": n + 1}
    wrong = [f"{k} is {info.get(k)!r}, not {v!r}" for k, v in want.items() if info.get(k) != v]
    if name not in props.get("served_models", []):
        wrong.append(f"/v1/models lists {props.get('served_models')}, not {name!r}")
    rep.check("server info", not wrong,
              json.dumps(props, default=str) + "".join(f"; {w}" for w in wrong))


def _check_per_request(rep: Report, srv: SglangServer, max_tokens: int, n: int) -> None:
    name = "per-request meta_info"
    before = settled(srv, SETTLE).samples
    try:
        answer = post_json(srv, "/generate", {"text": PROMPT, "sampling_params": {
            "temperature": 0, "max_new_tokens": max_tokens, "ignore_eos": True}})
    except (OSError, ValueError) as e:
        rep.check(name, False, f"POST /generate: {e}")
        return
    after = settled(srv, SETTLE).samples
    meta = answer.get("meta_info") or {}
    d = acceptance.counter_delta(before, after, registry.spec_metric_prefix("sglang"))
    generated = (total(after, GENERATED) or 0.0) - (total(before, GENERATED) or 0.0)
    steps, tokens = meta.get("spec_verify_ct"), meta.get("completion_tokens")
    correct = meta.get("spec_num_correct_drafts")
    wrong = []
    if steps != d.drafts:
        wrong.append(f"spec_verify_ct {steps} != {d.drafts:g} counted")
    if tokens != generated:
        wrong.append(f"completion_tokens {tokens} != {generated:g} counted")
    if correct is not None and not (isinstance(correct, int | float)
                                    and 0 <= correct - d.accepted <= n):
        wrong.append(f"spec_num_correct_drafts {correct} not in [{d.accepted:g}, "
                     f"{d.accepted + n:g}] (derived from the counters, + up to n cut at "
                     "max_new_tokens)")
    shown = {k: meta.get(k) for k in ("completion_tokens", "spec_verify_ct",
                                      "spec_num_correct_drafts", "spec_num_proposed_drafts",
                                      "spec_accept_length")}
    rep.check(name, not wrong, f"response {shown}; counters: verification steps "
              f"{d.drafts:g}, generated {generated:g}, accepted (derived) {d.accepted:g}"
              + "".join(f"; {w}" for w in wrong))
