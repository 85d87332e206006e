"""Stability checks: each finding names what went wrong and what to change.

Every per-cell check is a ``_name(cell)`` function run by :func:`cell_checks`; pair-level
findings (``unpaired_requests``, ``single_start``, ...) are made by the analysis with the
same :class:`Finding` type. Each kind, when it fires and its threshold: docs/analysis.md,
"Stability warnings".
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from crossbench.analysis import acceptance as acc_mod
from crossbench.analysis import stats
from crossbench.analysis.records import output_tokens
from crossbench.analysis.rundir import CellData
from crossbench.analysis.summary import spec_of

SPREAD_CV = 0.10  # trial_spread: pyperf's rule of thumb for an unstable benchmark
DRIFT_SHARE = 0.05  # baseline_drift: least-squares change from the first round to the last
MAX_LISTED = 5


class WarningKind(StrEnum):
    """Every kind of finding the analysis can report."""

    TRIAL_SPREAD = "trial_spread"
    OUTLIERS = "outliers"
    BASELINE_DRIFT = "baseline_drift"
    OUTPUT_LENGTH = "output_length"
    PROMPT_CACHE = "prompt_cache"
    THINKING_TEXT = "thinking_text"
    FAILED_REQUESTS = "failed_requests"
    INTEGRITY = "integrity"
    NET_LOSS_HIGH_ACCEPTANCE = "net_loss_despite_high_acceptance"
    UNPAIRED = "unpaired_requests"
    OUTPUT_DIVERGES = "output_diverges"
    TOO_FEW_SAMPLES = "too_few_samples"
    SINGLE_TRIAL = "single_trial"
    SINGLE_START = "single_start"
    STARTS_DISAGREE = "starts_disagree"
    HOST_BOUND = "host_bound"
    AGGREGATE_ONLY = "aggregate_only"
    CONFOUNDED = "confounded"
    CONFOUND_CAVEAT = "confound_caveat"
    TRIAL_WARNINGS = "trial_warnings"
    FEW_CLUSTERS = "few_clusters"
    LENGTH_MISMATCH = "length_mismatch"
    ACCEPTANCE_COUNTER = "acceptance_counter"
    UNRATED_REQUESTS = "unrated_requests"
    DRAFT_REPLAY = "draft_replay"


@dataclass(frozen=True)
class Finding:
    """One warning: its kind, what was seen, what to change, and the cell it concerns."""

    kind: WarningKind
    message: str
    action: str
    cell: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view."""
        return {"kind": str(self.kind), "message": self.message, "action": self.action,
                "cell": self.cell}


def _spread(cell: CellData, rates: dict[int, float], cooldown: float | None) -> list[Finding]:
    c = stats.cv(list(rates.values()))
    if c is None or c <= SPREAD_CV:
        return []
    listed = ", ".join(f"t{t} {r:.1f}" for t, r in rates.items())
    steps = []
    if len(rates) < 5:
        more = max(5, 2 * len(rates))
        steps.append(f"run more trials (trials: {more} in a matrix, --trials {more} with "
                     "crossbench run)")
    if cooldown is not None and cooldown == 0:
        steps.append("set cooldown_s (e.g. 30) in the matrix so clocks settle between trials")
    steps.append("stop other programs on the host (crossbench warns when it sees another "
                 "engine) and fix the CPU/GPU clocks")
    return [Finding(WarningKind.TRIAL_SPREAD,
                    f"per-trial pooled decode rates vary by {c:.0%} (CV; tok/s: {listed}), "
                    f"over the {SPREAD_CV:.0%} limit", "; ".join(steps), cell.id)]


def _loo_residuals(logs: stats.FloatArray, groups: list[list[int]]) -> stats.FloatArray:
    """Each value minus the median of the rest of its group (NaN for groups under 3)."""
    resid = np.full_like(logs, np.nan)
    by_size: dict[int, list[list[int]]] = {}
    for g in groups:
        by_size.setdefault(len(g), []).append(g)
    for m, same in by_size.items():
        if m < 3:  # with two requests neither can be told apart as the odd one
            continue
        idx = np.array(same)
        others = np.array([[j for j in range(m) if j != i] for i in range(m)])
        vals = logs[idx]
        resid[idx] = vals - np.median(vals[:, others], axis=2)
    return resid


def _outliers(cell: CellData) -> list[Finding]:
    figs = [f for f in cell.figures if f.rate_tok_s]
    if len(figs) < 3:
        return []
    logs = np.log([f.rate_tok_s for f in figs if f.rate_tok_s])
    groups: dict[tuple[str, int], list[int]] = {}
    for i, f in enumerate(figs):
        groups.setdefault((f.prompt_id, f.occurrence), []).append(i)
    resid = _loo_residuals(logs, list(groups.values()))
    known = np.flatnonzero(~np.isnan(resid))
    z = np.zeros_like(logs)
    z[known] = stats.modified_z(resid[known])
    hits = np.flatnonzero(np.abs(z) > stats.MAD_THRESHOLD)
    if hits.size == 0:
        return []
    listed = ", ".join(f"{figs[i].prompt_id} t{figs[i].trial} ({figs[i].rate_tok_s:.1f} tok/s, "
                       f"z {z[i]:+.1f})" for i in hits[:MAX_LISTED])
    more = f" and {hits.size - MAX_LISTED} more" if hits.size > MAX_LISTED else ""
    return [Finding(WarningKind.OUTLIERS,
                    f"{hits.size} of {len(figs)} requests are outliers against the other "
                    f"trials of their prompt (|modified z| > {stats.MAD_THRESHOLD}): "
                    f"{listed}{more}",
                    "they are kept in every statistic; check server.log and the host's load "
                    "during those trials, and rerun the study if they cluster in one trial",
                    cell.id)]


def _drift(cell: CellData, rates: dict[int, float]) -> list[Finding]:
    if len(rates) < 3:
        return []
    t = np.array(list(rates), dtype=float)
    r = np.array(list(rates.values()))
    line = stats.fit_line(t, r)
    change = line.slope * (t[-1] - t[0]) / float(r.mean())
    steps = np.diff(r)
    monotone = bool(np.all(steps > 0) or np.all(steps < 0))
    if abs(change) <= DRIFT_SHARE or not monotone:
        return []
    way = "rises" if change > 0 else "falls"
    return [Finding(WarningKind.BASELINE_DRIFT,
                    f"the baseline's pooled decode rate {way} {abs(change):.0%} from the first "
                    f"round to the last ({', '.join(f'{x:.1f}' for x in r)} tok/s)",
                    "the machine changed during the study (thermal throttling, background "
                    "load, clocks): interleaved rounds spread the drift over every arm, but "
                    "add cooldown_s, fix the clocks, and rerun if speedups sit near 1",
                    cell.id)]


def _length(cell: CellData) -> list[Finding]:
    if not cell.load.get("ignore_eos"):
        return []
    off = []
    for r in cell.records:
        if r.get("warmup") or r.get("status") != "ok":
            continue
        n, want = output_tokens(r), r.get("max_tokens", cell.load.get("max_tokens"))
        if n is not None and want is not None and n != want:
            off.append((r.get("prompt_id"), n, want))
    if not off:
        return []
    ex = ", ".join(f"{p}: {n} of {w}" for p, n, w in off[:MAX_LISTED])
    return [Finding(WarningKind.OUTPUT_LENGTH,
                    f"{len(off)} outputs differ from max_tokens although ignore_eos was set "
                    f"({ex})",
                    "the engine ignored ignore_eos or hit the context size: check that the "
                    "engine honours ignore_eos and that ctx_size fits prompt + max_tokens; "
                    "the arms no longer generate equal work", cell.id)]


def _cache(cell: CellData) -> list[Finding]:
    if cell.load.get("cache_prompt") is not False:
        return []
    hits = sum(1 for r in cell.records if not r.get("warmup")
               and ((r.get("timings") or {}).get("cache_n") or 0) > 0)
    if not hits:
        return []
    return [Finding(WarningKind.PROMPT_CACHE,
                    f"{hits} requests reused cached prompt tokens (timings.cache_n > 0) "
                    "although cache_prompt was false",
                    "TTFT and end-to-end figures are too low for those requests: check that "
                    "the engine build honours cache_prompt: false (or disable its prompt cache "
                    "with a server flag) and rerun", cell.id)]


REPLAY_SHARE = 0.05
"""Share of a cell's measured requests repeating a prompt sent before them in their trial
from which :func:`_draft_replay` warns (a workload's warm-up prompt sent again among 32 is
3 %: too little to move a figure)."""


def _draft_replay(cell: CellData) -> list[Finding]:
    """A method that drafts from state every request of a start feeds (the engine registers
    which: ``registry.shared_drafts``) replays a prompt served before on its start under
    greedy decoding: a repeat inside a trial, or a trial after others on its start without a
    reset that clears the state. Scripted acceptance decides nothing by the drafts: skipped."""
    from crossbench.engines import registry

    if not cell.speculative or cell.synthetic:
        return []
    kind = str(cell.spec.get("type"))
    shared = registry.shared_drafts(str(cell.config.get("engine")), kind)
    if shared is None:
        return []
    seen: dict[int, set[str]] = {}
    repeats = measured = 0
    order = sorted(cell.records, key=lambda r: (int(r.get("trial", 0)),
                                                int(r.get("t_sent_ns") or 0),
                                                int(r.get("request_index") or 0)))
    for r in order:
        if r.get("prompt_id") is None:
            continue
        pid = str(r["prompt_id"])
        sent = seen.setdefault(int(r.get("trial", 0)), set())
        if not r.get("warmup"):
            measured += 1
            repeats += pid in sent
        sent.add(pid)
    carried = []
    for t in cell.manifest.get("trials") or []:
        reuse = t.get("reuse") or {}
        if int(reuse.get("position") or 0) == 0:
            continue
        reset = reuse.get("cache_reset") or {}
        if reset.get("ok") and reset.get("method") in shared.cleared_by:
            continue
        by = (reuse.get("started_by") or {}).get("cell")
        carried.append(f"{t.get('trial')} (after {by}; reset: {reset.get('method', 'none')})")
    many = measured and repeats >= REPLAY_SHARE * measured
    if not carried and not many:
        return []
    seen_text = []
    if many:
        seen_text.append(f"{repeats} of {measured} measured requests repeat a prompt sent "
                         "before them in their trial")
    if carried:
        seen_text.append(f"trial(s) {', '.join(carried)} followed other trials on their "
                         "server start without a reset that clears it")
    return [Finding(WarningKind.DRAFT_REPLAY,
                    f"{kind} drafts from {shared.kept_in}; " + "; ".join(seen_text)
                    + ": under greedy decoding such a request drafts an earlier copy's output, "
                    "so its acceptance and speedup overstate the method's",
                    "send each prompt once per server start (requests no more than the "
                    "workload's prompts) and give each trial a fresh start"
                    + (f" or a reset that clears it ({', '.join(shared.cleared_by)})"
                       if shared.cleared_by else "")
                    + "; read the method's acceptance from a trial that does both",
                    cell.id)]


def _thinking(cell: CellData) -> list[Finding]:
    # load.thinking, else the chat template kwarg; None: the template's default applies
    setting = cell.load.get("thinking")
    if setting is None:
        setting = (cell.load.get("chat_template_kwargs") or {}).get("enable_thinking")
    if setting:
        return []
    hits = sum(1 for r in cell.records if "<think>" in str(r.get("text") or ""))
    if not hits:
        return []
    if setting is not None:  # thinking was turned off
        action = ("the engine or template ignored load.thinking: false: check that the "
                  "endpoint is chat and the model's template reads enable_thinking (or add "
                  "/no_think to the prompts)")
    else:
        action = ("set load.thinking: false (the chat template's default thinks), or use "
                  "load.thinking: true if reasoning is part of the study")
    return [Finding(WarningKind.THINKING_TEXT,
                    f"{hits} outputs contain <think> although thinking was not asked for; "
                    "reasoning text changes output length and acceptance between arms",
                    action, cell.id)]


def _failed(cell: CellData) -> list[Finding]:
    s = cell.status
    if not (s.error or s.incomplete):
        return []
    if cell.imported:  # nothing of crossbench's ran: no server.log, no journal to resume
        action = (f"read the record errors (as {cell.imported.get('source')} recorded them); "
                  "a file listed as not imported is not among them; to replace the failures, "
                  "rerun the study with its own tool and import again into a new --out")
    else:
        action = ("read the record errors and server.log; after fixing the cause, run the "
                  "study again into a new --out (`matrix --resume` runs only trials its "
                  "journal lacks, never a finished trial with failed requests)")
    return [Finding(WarningKind.FAILED_REQUESTS,
                    f"{s.error} failed and {s.incomplete} incomplete requests (counted, kept "
                    "out of the timing statistics)", action, cell.id)]


def spec_n(cell: CellData) -> int | None:
    """Drafted tokens per step of a cell (``n``, else the number of synthetic rates)."""
    n = spec_of(cell.config)[1]
    return int(n) if n is not None else None


def _integrity(cell: CellData) -> list[Finding]:
    if not cell.manifest.get("trials"):  # never ran (a run cut short): nothing to check,
        return []  # and "nothing was drafted" would be a claim about trials that never were
    checks = acc_mod.integrity(cell.acceptance, cell.counters, spec_n(cell), cell.speculative)
    # an import whose source kept no draft counts at all cannot show drafting either way:
    # "nothing was drafted" would be a claim the data does not make
    uncounted = bool(cell.imported) and not (cell.imported or {}).get("acceptance") \
        and cell.acceptance.requests_with_drafts == 0
    bad = [c for c in checks if not c.passed
           and not (cell.imported and c.name == "counters_present")
           and not (uncounted and c.name == "spec_configured_and_drafting")]
    return [Finding(WarningKind.INTEGRITY, f"acceptance integrity check {c.name} failed: "
                    f"{c.detail}", "do not trust this cell's acceptance figures; "
                    "`crossbench summarize` on the cell explains the check", cell.id)
            for c in bad]


def synthetic_all_accepted(cell: CellData) -> bool:
    """Does the cell's synthetic acceptance accept every draft by design (``synth_rates``
    all 1.0, or ``synth_len`` at n + 1)? llama-server then reports accepted == drafted
    legitimately."""
    rates = cell.spec.get("synth_rates")
    if rates:
        return all(float(r) == 1.0 for r in rates)
    length, n = cell.spec.get("synth_len"), spec_n(cell)
    return length is not None and n is not None and float(length) >= n + 1


LOOKUP_METHODS = ("ngram", "suffix", "prompt_lookup")
"""Method name prefixes of drafters that copy text already seen (llama.cpp's ngram-*, vLLM's
ngram and suffix, SGLang's NGRAM): on a prompt asked again every copied draft can be right,
so accepted == drafted is no sign of a misread counter there."""


def copies_seen_text(cell: CellData) -> bool:
    """Is the cell's method a lookup drafter (:data:`LOOKUP_METHODS`)?"""
    method = str(cell.coords.get("method") or "").lower()
    return method.startswith(LOOKUP_METHODS)


def counter_suspect(cell: CellData) -> str | None:
    """What makes the cell's acceptance counters look misread, or None: accepted equals
    drafted in every request that drafted (or, without per-request counts, in the cell's
    counters), which no real drafter does over a whole cell. Not for a cell whose synthetic
    acceptance accepts every draft by design (:func:`synthetic_all_accepted`), nor for a
    lookup drafter copying text it has seen (:func:`copies_seen_text`)."""
    if not cell.speculative or synthetic_all_accepted(cell) or copies_seen_text(cell):
        return None
    every = acc_mod.all_accepted(cell.records)
    if every is not None:
        return (f"accepted equals drafted in every one of the {every[0]} requests that drafted "
                f"({every[1]:g} drafted tokens, all accepted)")
    acc = cell.acceptance
    if acc.requests_with_drafts == 0 and acc.source == "metrics" and acc.draft_tokens > 0 \
            and acc.accepted_tokens == acc.draft_tokens:
        return (f"the cell's counters say every drafted token was accepted "
                f"({acc.draft_tokens:g} drafted, {acc.accepted_tokens:g} accepted)")
    return None


def _counter(cell: CellData) -> list[Finding]:
    seen = counter_suspect(cell)
    if seen is None:
        return []
    return [Finding(
        WarningKind.ACCEPTANCE_COUNTER,
        f"{seen}: a real drafter has some drafts rejected, so the acceptance counter may be "
        "misread (the accepted count read from the drafted field, or both from one field of "
        "the source); how to tell: in one raw response, llama-server's timings.draft_n "
        "(drafted) and timings.draft_n_accepted (accepted), or vLLM's "
        "spec_decode_num_draft_tokens_total and spec_decode_num_accepted_tokens_total, must "
        "differ on some request; only synthetic acceptance at rate 1.0 (synth_rates all 1.0) "
        "accepts every draft by design",
        "check the drafted and accepted fields of one raw response or /metrics scrape against "
        "what the analysis read; fix the mapping (re-import) before reading the acceptance "
        "rate or a `net_loss_despite_high_acceptance` flag", cell.id)]


def trial_warnings(cell: CellData) -> dict[int, list[str]]:
    """The runner's warnings by trial (other inference processes, a busy GPU...)."""
    out: dict[int, list[str]] = {}
    for e in cell.manifest.get("trials") or []:
        if not isinstance(e, dict) or "trial" not in e:
            continue
        ws = [str(w) for w in e.get("warnings") or []]
        if e.get("other_engines") and not any("other inference processes" in w for w in ws):
            names = ", ".join(f"{o.get('name')} (pid {o.get('pid')})"
                              for o in e["other_engines"][:3])
            ws.append(f"other inference processes are running: {names}")
        if ws:
            out[int(e["trial"])] = ws
    return out


def _trial_warnings(cell: CellData) -> list[Finding]:
    by_trial = trial_warnings(cell)
    if not by_trial:
        return []
    n_trials = len(cell.manifest.get("trials") or [])
    kinds = sorted({w.split(":")[0].split(";")[0] for ws in by_trial.values() for w in ws})
    return [Finding(
        WarningKind.TRIAL_WARNINGS,
        f"{len(by_trial)} of {n_trials} trials carry runner warnings ({'; '.join(kinds[:3])}"
        f"{' ...' if len(kinds) > 3 else ''}): their speed may be off",
        "read the trials' warnings in the manifest; stop other inference processes (or run "
        "lanes on separate cards knowingly) and rerun the affected trials", cell.id)]


def _unrated(cell: CellData) -> list[Finding]:
    unrated = [f for f in cell.figures
               if f.rate_tok_s is None and f.tokens is not None and f.tokens >= 2]
    if not unrated:
        return []
    return [Finding(
        WarningKind.UNRATED_REQUESTS,
        f"{len(unrated)} of {len(cell.figures)} completed requests have no decode rate: each "
        "one's chunks arrived in one read of the stream, so the client saw no time pass "
        "between its tokens; they are left out of the paired speedups",
        "run on a quieter host (the client could not read the stream as it came), or give "
        "longer outputs (max_tokens) so a stream spans several reads", cell.id)]


def cell_checks(cell: CellData, cooldown_s: float | None) -> list[Finding]:
    """Every per-cell check; ``cooldown_s`` is the matrix's (None when unknown)."""
    rates = cell.trial_rates
    out = _failed(cell) + _spread(cell, rates, cooldown_s) + _outliers(cell)
    if not cell.speculative:
        out += _drift(cell, rates)
    return (out + _length(cell) + _cache(cell) + _thinking(cell) + _integrity(cell)
            + _counter(cell) + _unrated(cell) + _trial_warnings(cell) + _draft_replay(cell))
