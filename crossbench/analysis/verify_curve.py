"""The target's verification cost curve by block size k, and an MoE target's expert-union
prediction of it.

:func:`curve` gives, per k, the forward pass over k tokens per sequence in ms, in plain decode
steps and relative to one token per sequence: at batch 1 timed by llama-bench, with P
sequences a pass (a verification at concurrency P) by llama-batched-bench
(:func:`run_batched_bench`, :func:`from_batched`). For an MoE GGUF, :func:`weight_split`
splits the bytes a pass reads into dense bytes (read once whatever k is; the MTP layers left
out) and bytes per routed expert, and :func:`predicted_ratio` gives (dense + D(P k) *
per_expert) / (dense + D(P) * per_expert), D(1) = top_k, under the memory-bound
:data:`ASSUMPTION`. Method, assumption and figures:
docs/moe-vs-dense.md, "Measuring the verification curve".
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from crossbench.analysis import stats
from crossbench.analysis.decompose import Measured
from crossbench.analysis.moe import expected_distinct_experts, hf_bytes
from crossbench.errors import UserError

if TYPE_CHECKING:
    from crossbench.fixtures.mtp import MtpSpec

MAX_K = 512
"""Largest block size: ``run_llama_bench`` sets the batch to max(k, 512) tokens, and a
verification block is a few drafted tokens; a larger k is a typo."""

ASSUMPTION = ("memory-bound: a forward pass's time is proportional to the weight bytes it "
              "reads, each routed expert read once per pass; compute, the KV cache and "
              "per-pass overheads are left out; routing uniform random (real routers are "
              "more local)")
"""The prediction's model in one line, as the command prints it and writes it to --out."""

_EXPERT_TENSOR = re.compile(r"^blk\.(\d+)\.ffn_[a-z_]*_exps\.")
_LAYER = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class WeightSplit:
    """The bytes a forward pass of an MoE target reads, split for the union prediction."""

    n_experts: int
    top_k: int
    dense_bytes: int
    """Read once per pass whatever k is (attention, router, shared expert, head, one
    embedding row)."""
    bytes_per_expert: int
    """One routed expert's tensors summed over the MoE layers."""
    moe_layers: int
    skipped_mtp_bytes: int
    """Bytes of the MTP (nextn) layers, which the target's forward pass does not run."""


def predicted_ratio(split: WeightSplit, k: int, parallel: int = 1) -> float:
    """Predicted forward cost of k tokens per sequence over that of one token per sequence,
    for ``parallel`` sequences in the pass, under the memory-bound assumption
    (:data:`ASSUMPTION`): ``(dense + D(parallel * k) * per_expert) / (dense + D(parallel) *
    per_expert)``, D(1) being top_k. Routing is per token, so P sequences of k tokens route
    like one block of P k tokens."""
    one = pass_bytes(split, parallel)
    if one <= 0:
        raise UserError("the GGUF's forward pass reads no bytes",
                        "pass a GGUF with weights (a real model file)")
    return pass_bytes(split, parallel * k) / one


def pass_bytes(split: WeightSplit, tokens: int) -> float:
    """Bytes a pass of ``tokens`` tokens reads under :data:`ASSUMPTION`: the dense part once
    and each expected distinct expert once."""
    d = expected_distinct_experts(split.n_experts, split.top_k, tokens)
    return split.dense_bytes + d * split.bytes_per_expert


def _int_field(fields: dict[str, Any], key: str) -> int | None:
    """An integer metadata value of a GGUFReader's fields, or None when absent."""
    f = fields.get(key)
    if f is None:
        return None
    value = f.contents()
    if isinstance(value, list):  # per-layer arrays: the MoE layers share one value here
        nonzero = [int(v) for v in value if int(v) > 0]
        return max(nonzero) if nonzero else 0
    return int(value)


def weight_split(gguf: Path) -> WeightSplit | None:
    """The dense / per-expert byte split of ``gguf`` from its header, or None when its metadata
    names no routed experts (a dense model). Works for quantized GGUFs: sizes are the tensors'
    stored bytes."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(gguf))
    except (ValueError, OSError, IndexError, KeyError, TypeError) as e:  # a truncated file
        raise UserError(f"cannot read GGUF {gguf}: {e or type(e).__name__}",
                        "pass a GGUF model file") from e
    fields = reader.fields
    arch_field = fields.get("general.architecture")
    if arch_field is None:
        raise UserError(f"{gguf}: no general.architecture in its header",
                        "pass a GGUF model file")
    arch = str(arch_field.contents())
    n_experts = _int_field(fields, f"{arch}.expert_count") or 0
    top_k = _int_field(fields, f"{arch}.expert_used_count") or 0
    if n_experts <= 1 or top_k < 1:
        return None
    n_layer = _int_field(fields, f"{arch}.block_count") or 0
    n_mtp = _int_field(fields, f"{arch}.nextn_predict_layers") or 0
    first_mtp = n_layer - n_mtp if n_layer else None
    sizes = {t.name: (int(t.n_bytes), [int(x) for x in t.shape]) for t in reader.tensors}
    dense = expert = mtp = 0
    moe_layers: set[int] = set()
    for name, (nbytes, shape) in sizes.items():
        layer = _LAYER.match(name)
        if layer and first_mtp is not None and int(layer[1]) >= first_mtp:
            mtp += nbytes
        elif (m := _EXPERT_TENSOR.match(name)) is not None:
            if shape[-1] != n_experts:
                raise UserError(f"{gguf}: expert tensor {name} has {shape[-1]} experts, the "
                                f"header says {n_experts}", "pass an unmodified GGUF")
            expert += nbytes
            moe_layers.add(int(m[1]))
        elif name == "token_embd.weight" and "output.weight" in sizes:
            dense += nbytes // shape[-1]  # one row; the head is output.weight
        else:
            dense += nbytes  # with a tied head, token_embd is read whole as the head
    if not moe_layers:
        return None
    return WeightSplit(n_experts=n_experts, top_k=top_k, dense_bytes=dense,
                       bytes_per_expert=expert // n_experts, moe_layers=len(moe_layers),
                       skipped_mtp_bytes=mtp)


def split_from_hf_names(tensors: dict[str, tuple[tuple[int, ...], int]], n_experts: int,
                        top_k: int) -> WeightSplit | None:
    """The split of a Hugging Face checkpoint (:func:`crossbench.analysis.moe.hf_bytes`); None
    for a dense model or one whose experts are stored fused (no per-expert names)."""
    if n_experts <= 1 or top_k < 1:
        return None
    dense, expert, mtp, layers = hf_bytes(tensors)
    if not layers:
        return None
    return WeightSplit(n_experts=n_experts, top_k=top_k, dense_bytes=dense,
                       bytes_per_expert=expert // n_experts, moe_layers=layers,
                       skipped_mtp_bytes=mtp)


def hf_weight_split(folder: Path) -> WeightSplit | None:
    """:func:`split_from_hf_names` of a Hugging Face folder: the expert count and top-k from
    its ``config.json`` (``text_config`` where there is one), the tensors from its
    safetensors headers."""
    from crossbench.fixtures.hf import safetensors_sizes

    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {folder / 'config.json'}: {e}",
                        "give a Hugging Face model folder") from e
    text = config.get("text_config") or config
    tensors: dict[str, tuple[tuple[int, ...], int]] = {}
    for f in sorted(folder.glob("*.safetensors")):
        tensors.update(safetensors_sizes(f))
    return split_from_hf_names(tensors, int(text.get("num_experts") or 0),
                               int(text.get("num_experts_per_tok") or 0))


def fixture_weight_split(spec: MtpSpec) -> WeightSplit | None:
    """:func:`split_from_hf_names` of a Qwen3.5 fixture target from its tensor shapes (F16),
    without its files: the split of a run's ``fixture:SHAPE/ROLE@hf`` on any machine; None for
    the dense twin and the MTP target."""
    from crossbench.analysis.decompose import VOCAB
    from crossbench.fixtures.mtp import tensor_bytes

    return split_from_hf_names(tensor_bytes(spec, VOCAB), spec.n_expert, spec.n_expert_used)


def model_weight_split(ref: str) -> tuple[WeightSplit | None, str]:
    """The split of a run's recorded target (``model_refs.model``) and where it came from: a
    Qwen3.5 fixture from its shape, a local GGUF from its header, a local Hugging Face folder
    from its safetensors headers; (None, why) when there is no prediction."""
    from crossbench.analysis.decompose import qwen35_fixture

    if ref.startswith("fixture:"):
        found = qwen35_fixture(ref)
        if found is None:
            return None, f"dense: no prediction ({ref})"
        spec, quant = found
        split = fixture_weight_split(spec)
        scaled = f" (F16 proportions for {quant})" if quant not in (None, "hf", "F16") else ""
        return split, (f"its fixture shape{scaled}" if split else "dense: no prediction")
    if not ref:
        return None, "no prediction: the run records no target path"
    path = Path(ref).expanduser()
    if path.is_dir() and not (path / "config.json").is_file():
        return None, f"no prediction: {path} holds no config.json"
    if path.is_dir():
        split = hf_weight_split(path)
        return split, (f"{path}'s safetensors headers" if split else
                       "no routed experts named per expert: no prediction")
    if path.is_file():
        split = weight_split(path)
        return split, f"{path.name}'s GGUF header" if split else "dense: no prediction"
    return None, f"no prediction: the model's weights are not on this machine ({ref})"


def check_k(ks: list[int]) -> None:
    """UserError naming ``--k`` unless every block size is in 1..:data:`MAX_K`."""
    if not ks:
        raise UserError("--k: no block sizes", "give e.g. --k 1-16")
    bad = [k for k in ks if not 1 <= k <= MAX_K]
    if bad:
        raise UserError(f"--k: {bad[0]} is outside 1..{MAX_K}",
                        f"give block sizes from 1 to {MAX_K}, e.g. --k 1-16")


def curve(m: Measured, ks: list[int], split: WeightSplit | None,
          parallel: int = 1) -> list[dict[str, Any]]:
    """One row per k (tokens per sequence; ``parallel`` sequences a pass): ``verify_ms``,
    ``plain_steps`` (over the plain step of ``parallel`` sequences), ``x_k1`` (over the pass
    of one token per sequence, when k = 1 was measured) and, for an MoE target,
    ``distinct_experts`` (of the pass's ``parallel * k`` tokens) and ``predicted_x_k1``
    (:func:`predicted_ratio`)."""
    one = m.verify_ms.get(1)
    rows = []
    for k in ks:
        if k not in m.verify_ms:
            raise UserError(f"no forward pass of {k} tokens was measured",
                            f"add {k} to llama-bench's -p list")
        ms = m.verify_ms[k]
        row: dict[str, Any] = {"k": k, "tokens": parallel * k, "verify_ms": ms,
                               "plain_ms": m.plain_ms, "plain_steps": ms / m.plain_ms,
                               "x_k1": ms / one if one else None,
                               "distinct_experts": None, "predicted_x_k1": None}
        if split is not None:
            row["distinct_experts"] = expected_distinct_experts(split.n_experts, split.top_k,
                                                                parallel * k)
            row["predicted_x_k1"] = predicted_ratio(split, k, parallel)
        rows.append(row)
    return rows


def run_batched_bench(binary: Path, model: Path, ks: list[int], parallel: int, gen: int,
                      reps: int, extra: list[str]) -> list[dict[str, Any]]:
    """Run ``llama-batched-bench --output-format jsonl`` once for one model: ``parallel``
    sequences, for each k in ``ks`` ``reps`` times a pass of k tokens per sequence on a
    cleared context (its prompt phase, one forward pass: the batch holds all ``parallel * k``
    tokens) followed by ``gen`` plain steps of one token per sequence. The first entry is an
    untimed warm-up of the largest k (the tool's own warm-up is one 16-token pass), marked
    ``"warmup": true``."""
    big = max(ks)
    order = [big] + [k for k in ks for _ in range(reps)]
    batch = max(parallel * big, 512)
    cmd = [str(binary), "-m", str(model), "-c", str(parallel * (big + gen) + 16),
           "-b", str(batch), "-ub", str(batch), "-npp", ",".join(map(str, order)),
           "-ntg", str(gen), "-npl", str(parallel), "--output-format", "jsonl", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"llama-batched-bench failed on {model.name}: {last}",
                        "run it by hand to see why: " + " ".join(cmd))
    tests = []
    for line in (r.stdout + "\n" + r.stderr).splitlines():
        if line.startswith("{") and '"t_pp"' in line:
            tests.append(json.loads(line))
    if len(tests) != len(order):
        raise UserError(f"llama-batched-bench printed {len(tests)} of {len(order)} results "
                        f"for {model.name} (a pass of {parallel} x {big} + {gen} tokens may "
                        "not fit its context)", "run it by hand to see why: " + " ".join(cmd))
    for t, k in zip(tests, order, strict=True):
        if int(t["pp"]) != k or int(t["pl"]) != parallel or int(t["tg"]) != gen:
            raise UserError("llama-batched-bench's results are not in the order asked",
                            "use the pinned build's llama-batched-bench")
    tests[0]["warmup"] = True
    return tests


def from_batched(tests: list[dict[str, Any]]) -> Measured:
    """Per k the median prompt-phase time (``t_pp``: one pass of k tokens per sequence), and
    as the plain step the median ``t_tg / tg`` (one token per sequence), in ms, from
    :func:`run_batched_bench`'s entries (the warm-up left out)."""
    timed = [t for t in tests if not t.get("warmup")]
    if not timed:
        raise UserError("llama-batched-bench gave no timed result", "give --reps 1 or more")
    verify = {k: 1e3 * float(np.median([float(t["t_pp"]) for t in timed if int(t["pp"]) == k]))
              for k in sorted({int(t["pp"]) for t in timed})}
    plain = 1e3 * float(np.median([float(t["t_tg"]) / int(t["tg"]) for t in timed]))
    return Measured(plain_ms=plain, verify_ms=verify, depth=0, raw={"target": tests})


def bytes_line(split: WeightSplit | None, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The measured pass time as a line in the bytes the prediction says each pass reads
    (least squares over ``rows``): ``fixed_ms`` (the part no byte explains: launches, host,
    compute that does not grow with the experts), ``tb_per_s`` (the rate the extra bytes
    were read at, 1e12 bytes a second), ``r2`` and the ``k`` it went through. None for a
    dense target or fewer than three rows: the memory-bound assumption's check on the
    measurement, where :func:`predicted_ratio` is the assumption alone."""
    if split is None or len(rows) < 3:
        return None
    gb = np.array([pass_bytes(split, r["tokens"]) for r in rows]) / 1e9
    if np.ptp(gb) == 0:
        return None
    line = stats.fit_line(gb, [r["verify_ms"] for r in rows])
    return {"fixed_ms": line.intercept, "ms_per_gb": line.slope,
            "tb_per_s": 1 / line.slope if line.slope > 0 else None,
            "r2": line.r2, "k": [r["k"] for r in rows]}


def format_bytes_line(line: dict[str, Any]) -> str:
    """:func:`bytes_line` in one line, as the command prints it."""
    rate = (f"bytes / {line['tb_per_s']:.2f} TB/s" if line["tb_per_s"] is not None
            else f"{line['ms_per_gb']:.3f} ms a GB (no positive rate)")
    r2 = "-" if line["r2"] is None else f"{line['r2']:.3f}"
    ks = line["k"]
    return (f"  measured against the predicted bytes: {line['fixed_ms']:.2f} ms + {rate}, "
            f"R² {r2} over k = {ks[0]}..{ks[-1]} ({len(ks)} passes; the fixed part is what "
            "no byte explains)")


def split_dict(split: WeightSplit | None) -> dict[str, Any] | None:
    """The split as JSON-ready fields (None for a dense target)."""
    return None if split is None else asdict(split)


def format_rows(name: str, rows: list[dict[str, Any]]) -> str:
    """A plain-text table of :func:`curve`'s rows for one target."""
    def f(x: Any, spec: str = ".3f") -> str:
        return "-" if x is None else format(x, spec) if isinstance(x, float) else str(x)

    head = ["target", "k", "tokens", "ms", "plain steps", "x k=1", "predicted x k=1",
            "distinct exp"]
    lines = ["  ".join(f"{h:>15}" for h in head)]
    for r in rows:
        cells = [name, r["k"], r["tokens"], f(r["verify_ms"]), f(r["plain_steps"]),
                 f(r["x_k1"]), f(r["predicted_x_k1"]), f(r["distinct_experts"], ".2f")]
        lines.append("  ".join(f"{c:>15}" for c in cells))
    return "\n".join(lines)
