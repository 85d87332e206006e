"""Where a speculative step's cost goes: its parts, each measured by a run of its own, against
the cost model C(n) = d + v n that a study's n-sweep fitted (``analysis.sweep.cost_model``).

The parts: verification (the target's forward pass over n + 1 tokens, from llama-bench or
from the baseline's batch shape, :func:`batch_shape`), drafting (a separate draft model's n
steps; a head reading the target's hidden states cannot be timed alone) and the rest (C(n)
minus the measured parts). Every part is in units of the plain step measured the same way,
and the raw llama-bench output (``raw``) or the batch shape's cells are kept, so each figure
re-derives. Method, the KV bound and the H200 figures: docs/analysis.md, "Where a step's cost
goes".
"""

from __future__ import annotations

import json
import statistics
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossbench.errors import UserError

if TYPE_CHECKING:
    from crossbench.analysis.rundir import CellData
    from crossbench.fixtures.make import ModelSpec
    from crossbench.fixtures.mtp import MtpSpec

EXPLAINED = 0.10
"""Relative gap between the measured parts and the fitted C(n) within which the parts are
said to explain the step (the issue's 10 %)."""

WARMUP = 0.05
"""How far a llama-bench test's mean may lie above the median of its repetitions before
:func:`repetition_notes` says slow repetitions pull it up (on an H100, 2026-12-07, the
first two of ten took 10-18 ms where the other eight took 8.1-9.4: the mean 15 % above; those
two were the CUDA graph's warm-up, :data:`GRAPH_WARMUP_REPS`, now left out)."""

HEADS = ("draft-eagle3", "draft-dflash", "draft-mtp", "eagle3", "dflash", "mtp", "qwen3_5_mtp")
"""Methods whose drafter reads the target's hidden states: not timeable alone."""


@dataclass
class Measured:
    """Per-part times in milliseconds from llama-bench, with the raw tests they came from."""

    plain_ms: float
    verify_ms: dict[int, float]
    draft_ms_per_token: float | None = None
    depth: int = 0
    raw: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    draft_plain_ms: float | None = None
    """The plain step the draft is counted in, where it differs from ``plain_ms`` (the
    verification from a batch shape, the draft from llama-bench)."""
    verify_extra: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Fields added to the row of each verification size (the batch shape's sources)."""
    notes: list[str] = field(default_factory=list)
    """What :func:`repetition_notes` found in the llama-bench tests the times come from."""


def _samples_ms(test: dict[str, Any]) -> list[float]:
    """The positive repetitions of one llama-bench test in ms (its ``samples_ns``, else its
    ``avg_ns`` as one)."""
    samples = test.get("samples_ns") or [test.get("avg_ns")]
    return [float(s) / 1e6 for s in samples if isinstance(s, int | float) and s > 0]


def _mean_ms(test: dict[str, Any]) -> float:
    """Mean time of one llama-bench test in ms (:func:`_samples_ms`)."""
    values = _samples_ms(test)
    if not values:
        raise UserError("a llama-bench test has no positive samples_ns",
                        "run llama-bench again; check its output with -o json")
    return sum(values) / len(values)


def repetition_notes(tests: list[dict[str, Any]], who: str) -> list[str]:
    """One note per llama-bench test of ``who`` whose mean (what decompose uses) lies more
    than :data:`WARMUP` above the median of its repetitions: slow repetitions pull the mean
    up, and with few repetitions the median is no cure, so the note names the fix. Tests of
    fewer than 3 repetitions are not judged."""
    notes = []
    for t in tests:
        values = _samples_ms(t) if t.get("samples_ns") else []
        if len(values) < 3:
            continue
        mean, median = sum(values) / len(values), statistics.median(values)
        if mean > (1 + WARMUP) * median:
            what = (f"pass over {t.get('n_prompt')} tokens" if t.get("n_gen") == 0
                    else f"{t.get('n_gen')}-token generation")
            notes.append(f"the {who}'s {what}: the mean of {len(values)} repetitions "
                         f"({mean:.2f} ms) is {100 * (mean / median - 1):.0f} % above their "
                         f"median ({median:.2f} ms), slowest {max(values):.2f} ms: slow "
                         "repetitions pull the mean up (the CUDA graph's warm-up, the first "
                         "two, is left out of decompose's and verify-curve's rows; others are "
                         "not); run it with more repetitions (`--reps 10`) and read the steady "
                         "ones in `raw`")
    return notes


GRAPH_WARMUP_REPS = 2
"""llama-bench repetitions of each test that ``decompose`` and ``verify-curve`` run before the
timed ones and leave out of their rows. The pinned build's CUDA backend runs a graph of a new
shape directly once, captures it into a CUDA graph on the second call with the same
properties, and replays it from the third (``ggml/src/ggml-cuda/ggml-cuda.cu:4455-4476``);
llama-bench's prompt test runs one pass a repetition, so its first two repetitions time the
direct run and the capture (the H200's MoE target at k = 1 on 2026-12-07: 2.367, 3.125,
then 1.266 ms; the H100's MTP target on 2026-12-07: 10.0-18.1 ms, then 8.08-9.36). On a CPU
build the two are simply more samples."""


def steady_tests(tests: list[dict[str, Any]], drop: int = GRAPH_WARMUP_REPS
                 ) -> list[dict[str, Any]]:
    """Copies of llama-bench's tests without the first ``drop`` repetitions' samples (see
    :data:`GRAPH_WARMUP_REPS`); a test with no sample left is refused."""
    out = []
    for t in tests:
        samples = list(t.get("samples_ns") or [])
        if len(samples) <= drop:
            raise UserError(f"a llama-bench test has {len(samples)} repetitions, not more than "
                            f"the {drop} warm-up ones", "give --reps 1 or more")
        out.append({**t, "samples_ns": samples[drop:]})
    return out


def bench_step_ms(tests: list[dict[str, Any]], who: str) -> float:
    """One decode step in ms: the single generation test (``n_prompt`` 0) of ``tests``."""
    plain = [t for t in tests if t.get("n_prompt") == 0 and t.get("n_gen")]
    if len(plain) != 1:
        raise UserError(f"the {who}'s llama-bench output holds {len(plain)} generation tests "
                        "(n_prompt 0), not 1", "run it with `-p 0 -n N` once")
    return _mean_ms(plain[0]) / int(plain[0]["n_gen"])


def from_bench(target_tests: list[dict[str, Any]],
               draft_tests: list[dict[str, Any]] | None = None, warmup: int = 0) -> Measured:
    """The parts' times from ``llama-bench -o json`` tests: the target's generation test
    (``n_prompt`` 0) gives the plain step per token, its prompt tests (``n_gen`` 0) the
    verification forward of ``n_prompt`` tokens; a draft model's generation test its step.
    The first ``warmup`` repetitions of every test are left out of the times and notes
    (:data:`GRAPH_WARMUP_REPS`), and kept in ``raw``."""
    raw = {"target": target_tests, "draft": draft_tests or []}
    if warmup:
        target_tests = steady_tests(target_tests, warmup)
        draft_tests = steady_tests(draft_tests, warmup) if draft_tests else None
    plain_ms = bench_step_ms(target_tests, "target")
    verify = {int(t["n_prompt"]): _mean_ms(t) for t in target_tests
              if t.get("n_gen") == 0 and t.get("n_prompt")}
    if not verify:
        raise UserError("the target's llama-bench output holds no prompt test (n_gen 0)",
                        "run it with `-p K1,K2,... -n 0` for the verification sizes n + 1")
    depths = {int(t.get("n_depth") or 0) for t in target_tests}
    if len(depths) != 1:
        raise UserError(f"the target's tests ran at several depths {sorted(depths)}",
                        "run every test at one `-d DEPTH`")
    draft_ms = bench_step_ms(draft_tests, "draft") if draft_tests else None
    return Measured(plain_ms=plain_ms, verify_ms=verify,
                    draft_ms_per_token=draft_ms, depth=depths.pop(), raw=raw,
                    notes=[*repetition_notes(target_tests, "target"),
                           *repetition_notes(draft_tests or [], "draft")])


def decompose(m: Measured, n_values: list[int], d: float | None = None,
              v: float | None = None, method: str = "draft-simple",
              measured: dict[int, float] | None = None) -> list[dict[str, Any]]:
    """One row per n: verification and drafting in plain steps, their sum, the fitted C(n)
    (when ``d`` and ``v`` are given) and the rest, with whether the parts explain C(n).
    Without a fit, ``measured`` (n -> C(n) = MAL / speedup of the arm's own pair at that n,
    :func:`measured_costs`) stands in for the n it holds, as ``measured_steps``."""
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
            draft = n * m.draft_ms_per_token / (m.draft_plain_ms or m.plain_ms)
        parts = verify + (draft or 0.0)
        row: dict[str, Any] = {"n": n, "verify_tokens": k, "verify_ms": m.verify_ms[k],
                               "verify_steps": verify, "draft_steps": draft,
                               "parts_steps": parts, "plain_ms": m.plain_ms,
                               **m.verify_extra.get(k, {})}
        cost = d + v * n if d is not None and v is not None else (measured or {}).get(n)
        if cost is not None:
            rest = cost - parts
            row |= {"fitted_steps" if d is not None else "measured_steps": cost,
                    "rest_steps": rest, "rest_share": rest / cost if cost else None,
                    "explained": abs(rest) <= EXPLAINED * cost}
        row["draft_note"] = ("not measured: a head reads the target's hidden states, so "
                             "llama-bench cannot time it alone; its cost is in the rest"
                             if head else None if draft is not None else
                             "not measured: no draft model given; its cost is in the rest")
        rows.append(row)
    return rows


def find_sweep(analysis: dict[str, Any], arm: str, concurrency: int = 1) -> dict[str, Any]:
    """The n-sweep of ``arm`` at ``concurrency`` in an analysis (its first, where several)."""
    found = [s for s in analysis.get("sweeps", []) if s.get("arm") == arm
             and s.get("concurrency") == concurrency]
    if not found:
        arms = sorted({f"{s.get('arm')} (c={s.get('concurrency')})"
                       for s in analysis.get("sweeps", [])})
        raise UserError(f"no n-sweep of arm {arm!r} at concurrency {concurrency}",
                        f"sweeps: {', '.join(arms) or 'none'}")
    return dict(found[0])


def telemetry_split(analysis: dict[str, Any], sweep: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Per n of ``sweep``: the arm's GPU work and GPU idle (host) time per speculative step
    from the run's own telemetry (each cell's ``host_time``, per output token, times the
    cell's MAL), in milliseconds and in the baseline's time per token by the same telemetry.
    The window (``window``) is the decode alone where both cells have it
    (``host_time.decode``: prefill and the gaps between requests left out), else the trial's
    wall window, whose prefill and gaps the baseline's own cancel only where they are small
    against the decode. A third instrument beside the fit and the timed parts: where the GPU
    work per step matches the timed parts, the idle is the rest."""
    cells = {c.get("cell"): c for c in analysis.get("cells", [])}
    base = (cells.get(sweep.get("baseline_cell")) or {}).get("host_time") or {}
    if not base:
        return {}
    out: dict[int, dict[str, Any]] = {}
    for point in sweep.get("points", []):
        ht = (cells.get(point.get("cell")) or {}).get("host_time") or {}
        mal = point.get("mean_acceptance_length")
        if not ht or not mal:
            continue
        window, arm, ref = "trial", ht, base
        missing = [d.get("reason") or "no decode figures" for d in
                   (ht.get("decode") or {}, base.get("decode") or {}) if not d.get("available")]
        if not missing:
            window, arm, ref = "decode", ht["decode"], base["decode"]
        base_busy = ref["busy_ms_per_token"]["mean"]
        base_ms = base_busy + ref["host_ms_per_token"]["mean"]
        gpu = arm["busy_ms_per_token"]["mean"] * mal
        host = arm["host_ms_per_token"]["mean"] * mal
        out[int(point["n"])] = {"gpu_ms_per_step": gpu, "host_ms_per_step": host,
                                "telemetry_base_ms": base_ms,
                                "telemetry_base_busy_ms": base_busy, "window": window,
                                "window_note": missing[0] if missing else None,
                                "telemetry_steps": (gpu + host) / base_ms}
    return out


def shape_split(row: dict[str, Any]) -> dict[str, float]:
    """A step's telemetry in three parts, in the baseline's telemetry steps, for a row whose
    verification comes from a batch shape (``verify_from``) and that carries
    :func:`telemetry_split`'s figures: the verification's GPU work (the batch shape's ratio
    times the baseline's own GPU work a step: the ratio is of whole steps, so it scales the
    GPU work, not the step's idle), the GPU work beyond it (the drafter's forwards, sampling
    and the acceptance kernels, together: NVML cannot tell kernels apart) and the GPU idle
    (host work the GPU waits on). They add up to ``telemetry_steps``. Empty for any other row
    (llama-bench's parts are timed passes already, in ms)."""
    base_busy = row.get("telemetry_base_busy_ms")
    if row.get("verify_from") != "batch shape" or not base_busy or "gpu_ms_per_step" not in row:
        return {}
    base_ms = float(row["telemetry_base_ms"])
    verify_gpu = float(row["verify_steps"]) * float(base_busy)
    return {"verify_gpu_steps": verify_gpu / base_ms,
            "beyond_gpu_steps": (float(row["gpu_ms_per_step"]) - verify_gpu) / base_ms,
            "idle_steps": float(row["host_ms_per_step"]) / base_ms,
            "base_idle_steps": 1.0 - float(base_busy) / base_ms}


def arm_points(analysis: dict[str, Any], arm: str, concurrency: int = 1,
               engine: str | None = None, where: str = "--from") -> dict[str, Any]:
    """The analysed pairs of ``arm`` at ``concurrency`` (of ``engine`` where given), shaped as a
    sweep (its baseline cell and points) for an arm measured at fewer n than a fit needs (one n
    in a verdicts run): each point's C(n) is measured (:func:`measured_costs`), none fitted.
    UserError naming the arms there are when it has no pair with an n, and (as ``crossbench
    fit``) when the arm ran on several engines or targets, whose n would mix."""
    from crossbench.analysis.fit import pairs_of_arm
    from crossbench.analysis.sweep import sweep_point

    pairs = pairs_of_arm(analysis, where, arm, engine, concurrency)
    if not pairs:
        arms = sorted({f"{p.get('arm')} (c={p.get('concurrency')})"
                       for p in analysis.get("pairs", []) if p.get("n") is not None})
        raise UserError(f"no cell of arm {arm!r} with an n at concurrency {concurrency}",
                        f"arms with an n: {', '.join(arms) or 'none'}")
    return {key: pairs[0].get(key) for key in ("arm", "engine", "model", "method",
                                                "concurrency", "baseline_cell")} | {
        "points": [sweep_point(p) for p in pairs]}


def measured_costs(sweep: dict[str, Any]) -> dict[int, float]:
    """n -> C(n) = MAL / speedup of each point of a sweep (or of :func:`arm_points`) that has
    both: what one speculative step cost, in the baseline's plain steps, at that n."""
    return {int(p["n"]): float(p["mean_acceptance_length"]) / float(p["speedup"])
            for p in sweep.get("points", [])
            if p.get("mean_acceptance_length") and p.get("speedup")}


def sweep_cost_model(analysis: dict[str, Any], arm: str, concurrency: int = 1
                     ) -> tuple[float, float, str]:
    """(d, v, method) of the n-sweep of ``arm`` at ``concurrency`` in an analysis."""
    sweep = find_sweep(analysis, arm, concurrency)
    cm = sweep["cost_model"]
    if not cm.get("fitted"):
        raise UserError(f"the sweep of {arm!r} has no fitted cost model",
                        "it needs three or more n with acceptance counts")
    return float(cm["d"]), float(cm["v"]), str(sweep.get("method"))


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

    fitted = not any("measured_steps" in r for r in rows)
    head = ["n", "verify ms", "verify", "draft", "parts",
            "fitted C(n)" if fitted else "measured C(n)", "rest", "explained"]
    lines = ["  ".join(f"{h:>11}" for h in head)]
    for r in rows:
        share = r.get("rest_share")
        expl = ("-" if "explained" not in r else
                ("yes" if r["explained"] else f"no ({share:+.0%})"))
        cells = [r["n"], r["verify_ms"], r["verify_steps"], r["draft_steps"], r["parts_steps"],
                 r.get("fitted_steps", r.get("measured_steps")), r.get("rest_steps"), expl]
        lines.append("  ".join(f"{f(c):>11}" for c in cells))
    for r in rows:
        if "verify_gpu_steps" in r:
            lines.append(f"  n={r['n']}: by telemetry a step is {r['telemetry_steps']:.2f} of the "
                         f"baseline's steps: the verification's GPU work "
                         f"{r['verify_gpu_steps']:.2f} (the batch shape's "
                         f"{r['verify_steps']:.2f} x the baseline's GPU share "
                         f"{1 - r['base_idle_steps']:.2f}), GPU work beyond it "
                         f"{r['beyond_gpu_steps']:.2f} (drafting, sampling), GPU idle "
                         f"{r['idle_steps']:.2f} (host; the baseline's "
                         f"{r['base_idle_steps']:.2f}) ({r['window']} window)")
        elif "telemetry_steps" in r:
            lines.append(f"  n={r['n']}: telemetry GPU work {r['gpu_ms_per_step']:.2f} ms a step "
                         f"(timed parts {r['parts_steps'] * r['plain_ms']:.2f} ms), GPU idle "
                         f"{r['host_ms_per_step']:.2f} ms; work + idle "
                         f"{r['telemetry_steps']:.2f} of the baseline's steps "
                         f"({r['window']} window)")
    windows = {r["window_note"] for r in rows if r.get("window_note")}
    lines += [f"  no decode-only window: {w}" for w in sorted(windows)]
    notes = {r["draft_note"] for r in rows if r["draft_note"]}
    shares = [r["kv_extra_share"] for r in rows if "kv_extra_share" in r]
    what = ("KV and recurrent state" if any(r.get("state_extra_share") for r in rows)
            else "KV")
    verify = ([f"verify: the baseline's step at concurrency c (n + 1) over that at c (batch "
               f"shape); its k sequences' extra {what} reads are at most "
               f"{max(shares):.1%} of the weights' bytes"] if shares else [])
    cost = ([] if fitted else ["measured C(n): MAL / speedup of the arm's own pair at that n "
                               "(no fit: the run has fewer n of the arm than a line needs)"])
    return "\n".join(lines + verify + [f"draft: {n}" for n in sorted(notes)] + cost)


def recorded_variant(cells: Iterable[Any]) -> str | None:
    """The llama.cpp build variant (``cpu``, ``cuda-smNN``) a run's llama.cpp cells recorded in
    their manifests (``engine.build.variant``), or None where none did."""
    for cell in cells:
        build = ((getattr(cell, "manifest", None) or {}).get("engine") or {}).get("build") or {}
        if isinstance(build.get("variant"), str):
            return str(build["variant"])
    return None


# -- the batch-shape source of the verification part -------------------------------------------

ASSUMED_SHAPE = {"n_layer": 36, "n_head_kv": 8, "head_dim": 128, "weight_bytes": 16_388_039_712}
"""Where a run records no shape: the Qwen3-8B-shaped fixture target (its F16 GGUF's bytes)."""

KV_ELEMENT_BYTES = 2
"""One cached K or V element: F16, llama-server's and vLLM's cache type for an F16 target."""

VOCAB = 151936
"""The fixtures' vocabulary (Qwen3's tokenizer), for a fixture shape's weight count."""

STATE_ELEMENT_BYTES = 4
"""One element of a gated delta-net layer's recurrent state (convolution and delta-rule
state): F32, as llama.cpp keeps it (src/llama-model.cpp:2765-2766, ``recurrent_type_k/v``
of the hybrid memory; src/llama-memory-recurrent.cpp:101-103 allocates them). vLLM keeps it
in the config's ``mamba_ssm_dtype`` (F32 in the fixtures' configs, as in Qwen3.5's
published ones); an engine keeping it in 16 bits reads half."""



@dataclass
class BatchShape:
    """The baseline of one engine and target at several concurrencies: per cell its pooled
    decode rate and per-step time (``cells``, ascending concurrency), and the KV bound."""

    engine: str
    target: str
    workload: str
    cells: list[dict[str, Any]]
    kv: dict[str, Any]

    def step_ms(self, k: int) -> tuple[float, list[int]]:
        """The per-step time at concurrency ``k`` and the concurrencies it came from: the
        measured one, or the two around ``k`` interpolated linearly; never extrapolated."""
        by_c = {int(c["concurrency"]): float(c["step_ms"]) for c in self.cells}
        if k in by_c:
            return by_c[k], [k]
        if k > max(by_c) or k < min(by_c):
            raise UserError(
                f"the baseline of {self.engine}/{self.target} ran at concurrency "
                f"{', '.join(map(str, sorted(by_c)))}: a step of {k} sequences is outside them "
                "(no extrapolation)", f"run the baseline at concurrency {k}"
                + (" or more" if k > max(by_c) else "") + " (matrices/h200-shapes.yaml runs "
                "1, 2, 3, 5, 9, 16), or give smaller --n")
        lo, hi = max(c for c in by_c if c < k), min(c for c in by_c if c > k)
        return by_c[lo] + (k - lo) / (hi - lo) * (by_c[hi] - by_c[lo]), [lo, hi]


def _fixture_parts(ref: str) -> tuple[str, str, str | None] | None:
    """(shape, role, quant) of a ``fixture:[SHAPE/]ROLE[@QUANT]`` reference (shape tiny by
    default, as the matrix reads it), or None for any other model reference."""
    if not ref.startswith("fixture:"):
        return None
    name, _, quant = ref.removeprefix("fixture:").partition("@")
    shape, _, role = name.rpartition("/")
    return shape or "tiny", role, quant or None


def _fixture_shape(ref: str) -> ModelSpec | None:
    """The fixture :class:`ModelSpec` a ``fixture:[SHAPE/]target[@QUANT]`` reference names,
    or None."""
    from crossbench.fixtures.make import SHAPES

    parts = _fixture_parts(ref)
    if parts is None or parts[1] != "target" or parts[0] not in SHAPES:
        return None
    return SHAPES[parts[0]].target


def qwen35_fixture(ref: str) -> tuple[MtpSpec, str | None] | None:
    """The Qwen3.5 fixture target (:data:`crossbench.fixtures.mtp.TARGET_KINDS`: mtp-target,
    moe-target, dense-twin) and quantization (None, ``hf``, ``Q4_K_M``...) a
    ``fixture:[SHAPE/]ROLE[@QUANT]`` reference names, or None."""
    from crossbench.fixtures.mtp import TARGET_KINDS

    parts = _fixture_parts(ref)
    if parts is None:
        return None
    shape, role, quant = parts
    spec = TARGET_KINDS.get(role, {}).get(shape)
    return (spec, quant) if spec is not None else None


def qwen35_state_bytes(spec: MtpSpec) -> int:
    """Bytes of one sequence's recurrent state over the target's gated delta-net layers, at
    :data:`STATE_ELEMENT_BYTES` an element, whatever the context length."""
    # llama.cpp's per-layer sizes for qwen35 / qwen35moe, with the converter's hparams
    # (conversion/qwen.py:377-381: ssm_d_conv = conv kernel, ssm_d_state = key head dim,
    # ssm_n_group = key heads, ssm_d_inner = value heads x value head dim):
    # n_embd_r, the short convolution's state (src/llama-hparams.cpp:229):
    #   (ssm_d_conv - 1) * (ssm_d_inner + 2 * ssm_n_group * ssm_d_state)
    # n_embd_s, the delta rule's state (src/llama-hparams.cpp:257): ssm_d_state * ssm_d_inner
    # Only the target's own layers are recurrent, the MTP layer is not (src/models/qwen35.cpp:21,
    # src/models/qwen35moe.cpp:24). Paths: the pinned tree's llama.cpp/.
    conv_dim = 2 * spec.lin_k_heads * spec.lin_k_dim + spec.lin_v_heads * spec.lin_v_dim
    per_layer = (spec.lin_v_heads * spec.lin_v_dim * spec.lin_k_dim
                 + (spec.conv_kernel - 1) * conv_dim)
    return spec.layer_types.count("linear_attention") * per_layer * STATE_ELEMENT_BYTES


def qwen35_step_bytes(spec: MtpSpec) -> int:
    """Bytes of the weights one plain decode step of one token reads, at the fixture's HF
    dtypes (F16, a few F32): every tensor but the MTP layer's (``mtp.*``, not run by the
    target's forward pass) and the embedding table's other rows; of an MoE's routed experts
    ``n_expert_used`` a layer (the router, the shared expert and the rest are read whole)."""
    from crossbench.analysis.moe import hf_bytes
    from crossbench.fixtures.mtp import tensor_bytes

    dense, experts, _, _ = hf_bytes(tensor_bytes(spec, VOCAB))
    return dense + (experts // spec.n_expert * spec.n_expert_used if spec.is_moe else 0)


def _qwen35_bound(ref: str, spec: MtpSpec, quant: str | None, recorded: object
                  ) -> dict[str, Any]:
    """:func:`kv_bound`'s shape fields for a Qwen3.5 fixture target: K and V of the
    full-attention layers only, the linear-attention layers' recurrent state per sequence,
    and the bytes one step reads (scaled to a quantized file by its recorded size)."""
    from crossbench.fixtures.mtp import sizes

    # the target's KV cache holds the full-attention layers below n_layer() alone, the MTP
    # layer's is not in it (src/llama-model.cpp:2699-2700, filter_attn of the hybrid memory)
    n_full = spec.layer_types.count("full_attention")
    state = qwen35_state_bytes(spec)
    weights = qwen35_step_bytes(spec)
    moe = (f"dense + top-{spec.n_expert_used} of {spec.n_expert} routed experts a layer, "
           if spec.is_moe else "")
    weights_from = (f"its fixture shape: the bytes one step reads at F16 ({moe}the MTP layer "
                    "and all but one embedding row left out)")
    if quant not in (None, "hf", "F16", "BF16"):
        if isinstance(recorded, int) and recorded > 0:
            whole = sizes(spec, VOCAB)["hf_bytes"]
            weights = round(weights * recorded / whole)
            weights_from += (f", times the recorded {quant} file's size over the shape's F16 "
                             "bytes (an average: quantization differs by tensor)")
        else:
            weights_from += f"; a {quant} file reads fewer (no file size recorded)"
    shape = (f"{ref}: K and V of {n_full} full-attention layers ({spec.n_head_kv} KV heads of "
             f"{spec.head_dim}, F16 cache) + the recurrent state of "
             f"{spec.n_layer - n_full} gated delta-net linear-attention layers "
             f"({state / 1e6:.2f} MB a sequence at any context, F32)")
    return {"shape": shape, "dims": (n_full, spec.n_head_kv, spec.head_dim),
            "state": state, "weights": weights, "weights_from": weights_from}


def kv_bound(cell: CellData, context: int | None, depth: int) -> dict[str, Any]:
    """What one sequence's KV cache (and, for a Qwen3.5 target, its linear-attention layers'
    recurrent state) weighs against the bytes of weights a step reads, from ``cell``'s
    recorded target (fixture shape, file size) or the assumed Qwen3-8B shape, at ``context``
    tokens (the largest recorded; ``depth`` where none is)."""
    ref = str((cell.config.get("model_refs") or {}).get("model") or "")
    recorded = ((cell.manifest.get("models") or {}).get("model") or {}).get("bytes")
    spec = _fixture_shape(ref)
    hybrid = None if spec else qwen35_fixture(ref)
    state, state_note = 0, "no recurrent layers: the cache is K and V alone"
    if hybrid:
        q = _qwen35_bound(ref, *hybrid, recorded)
        dims, shape, state = q["dims"], q["shape"], q["state"]
        weights, weights_from = q["weights"], q["weights_from"]
        state_note = (f"the linear-attention layers' recurrent state at {STATE_ELEMENT_BYTES} "
                      "bytes an element (llama.cpp keeps it in F32); an engine keeping it in "
                      "16 bits reads half")
    else:
        dims = ((spec.n_layer, spec.n_head_kv, spec.head_dim) if spec else
                (ASSUMED_SHAPE["n_layer"], ASSUMED_SHAPE["n_head_kv"],
                 ASSUMED_SHAPE["head_dim"]))
        shape = (f"{ref}: " if spec else "assumed (no recorded fixture shape): Qwen3-8B, ") + \
            f"{dims[0]} layers, {dims[1]} KV heads of {dims[2]}, F16 cache"
        if isinstance(recorded, int) and recorded > 0:
            weights, weights_from = recorded, "the target file's recorded size"
        elif spec:
            weights, weights_from = 2 * spec.n_params(VOCAB), "its fixture shape at F16"
        else:
            weights = ASSUMED_SHAPE["weight_bytes"]
            weights_from = "assumed: the Qwen3-8B F16 GGUF"
    per_token = 2 * dims[0] * dims[1] * dims[2] * KV_ELEMENT_BYTES
    tokens = context if context else depth
    return {"shape": shape, "shape_assumed": spec is None and hybrid is None,
            "kv_bytes_per_token": per_token, "context_tokens": tokens,
            "context_from": "the largest prompt + output recorded"
            if context else "assumed (--depth): no token counts recorded",
            "state_bytes_per_sequence": state, "state_note": state_note,
            "kv_bytes_per_sequence": per_token * tokens + state, "weight_bytes": weights,
            "weights_from": weights_from}


def batch_shape(cells: Iterable[CellData], engine: str | None = None, target: str | None = None,
                depth: int = 256) -> BatchShape:
    """The baseline cells (no speculation) of one engine and target of a run, by
    concurrency; ``engine``/``target`` pick them where the run holds several."""
    from crossbench.analysis.metrics import pooled_rate

    def group(c: CellData) -> tuple[str, ...]:
        return tuple(str(c.coords.get(k)) for k in ("engine", "target", "workload"))

    every = [c for c in cells if not c.speculative]
    base = [c for c in every if engine in (None, c.coords.get("engine"))
            and target in (None, c.coords.get("target"))]
    groups = sorted({group(c) for c in base})
    if len(groups) != 1:
        named = "".join(f" {k} {v}" for k, v in (("engine", engine), ("target", target)) if v)
        raise UserError(f"{len(groups)} baselines (engine/target/workload) match{named}; the "
                        "run's: " + (", ".join(sorted({"/".join(group(c)) for c in every}))
                                     or "none"),
                        "name one with --engine and --model (the run's names)")
    rows, context = [], None
    for c in sorted(base, key=lambda c: int(c.coords.get("concurrency") or 1)):
        figs = [f for f in c.figures if f.rate_tok_s is not None and f.decode_ms
                and f.tokens is not None]
        rate = pooled_rate(figs)
        if rate is None:
            raise UserError(f"baseline cell {c.id} has no decode rate",
                            "its requests need two or more streamed chunks each")
        rows.append({"cell": c.id, "concurrency": int(c.coords.get("concurrency") or 1),
                     "requests": len(figs), "pooled_tok_s": rate, "step_ms": 1e3 / rate,
                     "decode_tokens": sum(f.tokens - 1 for f in figs if f.tokens),
                     "decode_s": sum(f.decode_ms for f in figs if f.decode_ms) / 1e3})
        for r in c.records:
            u = r.get("usage") or {}
            if not r.get("warmup") and isinstance(u.get("prompt_tokens"), int):
                context = max(context or 0, u["prompt_tokens"] + int(u.get("completion_tokens")
                                                                     or 0))
    cs = [r["concurrency"] for r in rows]
    if len(set(cs)) != len(cs):
        raise UserError(f"the baseline of {'/'.join(groups[0])} has two cells at one "
                        f"concurrency ({cs})", "give a run with one cell per concurrency")
    (eng, tgt, workload), = groups
    return BatchShape(eng, tgt, workload, rows, kv_bound(base[0], context, depth))


def from_batch_shape(shape: BatchShape, n_values: list[int], concurrency: int = 1) -> Measured:
    """The verification of n + 1 tokens per sequence at the sweep's ``concurrency`` c as the
    baseline's step of c (n + 1) sequences, in steps of c sequences."""
    plain, _ = shape.step_ms(concurrency)
    verify, extra = {}, {}
    per_seq, weights = shape.kv["kv_bytes_per_sequence"], shape.kv["weight_bytes"]
    state = shape.kv.get("state_bytes_per_sequence") or 0
    for n in n_values:
        k = concurrency * (n + 1)
        verify[n + 1], used = shape.step_ms(k)
        extra[n + 1] = {"verify_from": "batch shape", "batch_sequences": k,
                        "verify_concurrencies": used,
                        "kv_extra_share": (k - concurrency) * per_seq / weights,
                        "state_extra_share": (k - concurrency) * state / weights}
    return Measured(plain_ms=plain, verify_ms=verify, depth=shape.kv["context_tokens"],
                    verify_extra=extra)
