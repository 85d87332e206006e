"""How many distinct experts the MoE fixture's routers load for k consecutive tokens, measured,
against the uniform-routing prediction the verification curve's bytes rest on.

docs/moe-vs-dense.md predicts a verification pass's expert bytes from
``expected_distinct_experts`` (each token's top-k uniform and independent) and says the
fixture's random routers should route close to uniformly. This script measures it: it runs
the MoE target's Hugging Face folder through transformers' own ``Qwen3_5Moe`` implementation
on the CPU (float16, the stored weights), records every layer's routed experts per token for
a text, and counts the distinct experts in every window of k consecutive tokens
(``crossbench.analysis.moe.distinct_experts_in_windows``). Routing is per token and causal,
so a window of a text's tokens routes as a verification block of the same tokens would. The
CPU's float16 rounding differs from a GPU's, which can move a near-tie between two experts,
not the count's mean.

Usage (by hand; makes the target's HF folder if missing, 16.4 GB; needs crossbench[convert])::

    python benchmarks/moe_routing.py --shape qwen3-8b --out moe-routing.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

TEXT = Path(__file__).resolve().parents[1] / "docs" / "moe-vs-dense.md"


def measure(shape: str, tokens: int, ks: list[int]) -> dict[str, Any]:
    """Route ``tokens`` tokens of :data:`TEXT` through the target; the windows' counts."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeTopKRouter

    from crossbench.analysis.moe import distinct_experts_in_windows, expected_distinct_experts
    from crossbench.fixtures.mtp import mtp_spec
    from crossbench.fixtures.resolve import ensure_mtp_target_hf

    spec = mtp_spec(shape, "moe-target")
    hf = ensure_mtp_target_hf(shape, 0, "moe-target")
    t0 = time.monotonic()
    model, info = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float16,
                                                       output_loading_info=True)
    missing = [k for k in info["missing_keys"] if "mtp" not in k]
    if missing:  # a weight left at its random init would measure transformers, not the fixture
        raise SystemExit(f"weights not loaded from {hf}: {missing[:5]}")
    load_s = time.monotonic() - t0
    routes: dict[str, list[list[int]]] = {}

    def hook(name: str) -> Any:
        def record(_mod: Any, _inp: Any, out: Any) -> None:
            routes[name] = out[2].tolist()
        return record

    for name, mod in model.named_modules():
        if isinstance(mod, Qwen3_5MoeTopKRouter):
            mod.register_forward_hook(hook(name))
    ids = AutoTokenizer.from_pretrained(hf)(TEXT.read_text())["input_ids"][:tokens]
    t0 = time.monotonic()
    with torch.no_grad():
        model(torch.tensor([ids]))
    forward_s = time.monotonic() - t0
    layers = {name: {str(k): distinct_experts_in_windows(r, k) for k in ks}
              for name, r in sorted(routes.items())}
    mean = {str(k): sum(v[str(k)] for v in layers.values()) / len(layers) for k in ks}
    return {"shape": shape, "experts": spec.n_expert, "top_k": spec.n_expert_used,
            "text": TEXT.name, "tokens": len(ids), "layers": len(layers),
            "k": ks, "uniform": {str(k): expected_distinct_experts(
                spec.n_expert, spec.n_expert_used, k) for k in ks},
            "measured_mean": mean, "measured_by_layer": layers,
            "expert_use_top": _top_use(routes, spec.n_expert),
            "load_s": load_s, "forward_s": forward_s, "torch": torch.__version__,
            "machine": platform.machine()}


def _top_use(routes: dict[str, list[list[int]]], n_experts: int) -> dict[str, float]:
    """Per layer, the share of routed slots the busiest expert takes (uniform: 1/n_experts)."""
    out = {}
    for name, r in sorted(routes.items()):
        counts = [0] * n_experts
        for token in r:
            for e in token:
                counts[e] += 1
        out[name] = max(counts) / sum(counts)
    return out


def main() -> None:
    """Parse the arguments, measure, print the table and write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen3-8b", help="MoE fixture shape")
    ap.add_argument("--tokens", type=int, default=512, help="tokens of the text routed")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    ks = [1, 2, 3, 5, 9, 16]
    r = measure(args.shape, args.tokens, ks)
    print(f"{r['shape']}: {r['layers']} MoE layers, {r['tokens']} tokens of {r['text']}")
    print("k  uniform  measured (mean over layers)")
    for k in ks:
        print(f"{k:2d} {r['uniform'][str(k)]:8.2f} {r['measured_mean'][str(k)]:8.2f}")
    if args.out:
        args.out.write_text(json.dumps(r, indent=2) + "\n")


if __name__ == "__main__":
    main()
