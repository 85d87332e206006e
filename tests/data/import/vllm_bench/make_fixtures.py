"""Write the vllm bench fixtures: `python tests/data/import/vllm_bench/make_fixtures.py`.

No vLLM server runs here, so the files are built to the schema of vLLM 0.33.0's
`vllm/benchmarks/serve.py` (`pip download vllm==0.33.0 --no-deps`): the keys and their order
come from `main` (result_json: date ... max_concurrency, then the benchmark result), the
per-request lists from `benchmark` (`ttfts`, `itls`, `latencies`, `start_times` in seconds),
the aggregates from `process_one_metric` (milliseconds; TPOT = (latency - ttft) /
(output_len - 1)), the speculative fields from `benchmark` (acceptance rate in percent,
per-position rates as fractions of drafts). `--metadata KEY=VALUE` values are strings, and
without `--save-detailed` vLLM deletes input_lens, output_lens, start_times, ttfts, itls,
generated_texts and errors but keeps latencies and queue_times.

Truth the tests check: 8 prompts x 2 trials, 128 output tokens each; baseline decode 10 ms per
token, eagle3 6.25 ms (decode speedup 1.6); eagle3 per-position acceptance 0.8, 0.6, 0.4 at
n = 3 (acceptance 60 %, mean acceptance length 2.8).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
PROMPTS, OUT_LEN, TRIALS = 8, 128, 2


def result(label: str, tpot_s: float, trial: int, spec: bool, detailed: bool,
           meta: dict[str, str]) -> dict[str, object]:
    rng = random.Random(f"{label}-{trial}")
    start, t = [], 1000.0 + 100 * trial
    ttfts, itls, lats, texts = [], [], [], []
    for p in range(PROMPTS):
        start.append(t)
        ttft = 0.020 + 0.001 * p
        gaps: list[float] = []
        left = OUT_LEN - 1
        while left:  # speculative chunks carry 1-4 tokens, plain decoding one
            k = min(left, rng.randint(1, 4)) if spec else 1
            gaps.append(k * tpot_s)
            left -= k
        ttfts.append(ttft)
        itls.append(gaps)
        lats.append(ttft + sum(gaps))
        texts.append(" ".join(f"w{p}-{i}" for i in range(12)))
        t += lats[-1] + 0.001
    duration = start[-1] + lats[-1] - start[0]
    inp = [20 + p for p in range(PROMPTS)]
    outl = [OUT_LEN] * PROMPTS
    tpots = [(lat - tt) / (o - 1) for lat, tt, o in zip(lats, ttfts, outl, strict=True)]
    flat = [g for row in itls for g in row]
    res: dict[str, object] = {
        "date": f"20261129-12000{trial}", "endpoint_type": "vllm", "backend": "vllm",
        "label": label, "model_id": "Qwen/Qwen3-8B", "tokenizer_id": "Qwen/Qwen3-8B",
        "num_prompts": PROMPTS, **meta, "request_rate": "inf", "burstiness": 1.0,
        "max_concurrency": 1, "duration": duration, "completed": PROMPTS, "failed": 0,
        "total_input_tokens": sum(inp), "total_output_tokens": sum(outl),
        "request_throughput": PROMPTS / duration, "request_goodput": None,
        "output_throughput": sum(outl) / duration,
        "total_token_throughput": (sum(inp) + sum(outl)) / duration,
        "input_lens": inp, "output_lens": outl, "ttfts": ttfts, "itls": itls,
        "latencies": lats, "start_times": start, "queue_times": [0.0001] * PROMPTS,
        "generated_texts": texts, "errors": [""] * PROMPTS,
        "max_output_tokens_per_s": 1 / tpot_s, "max_concurrent_requests": 1, "rtfx": 0.0,
    }
    if spec:
        drafts = 1000 + 10 * trial
        rates = [0.8, 0.6, 0.4]
        accepted = round(drafts * sum(rates))
        res.update({
            "spec_decode_acceptance_rate": accepted / (3 * drafts) * 100,
            "spec_decode_acceptance_length": 1 + accepted / drafts,
            "spec_decode_num_drafts": drafts, "spec_decode_draft_tokens": 3 * drafts,
            "spec_decode_accepted_tokens": accepted,
            "spec_decode_per_position_acceptance_rates": rates,
        })
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", flat), ("e2el", lats)):
        res[f"mean_{name}_ms"] = float(np.mean(values)) * 1000
        res[f"median_{name}_ms"] = float(np.median(values)) * 1000
        res[f"std_{name}_ms"] = float(np.std(values)) * 1000
        res[f"p99_{name}_ms"] = float(np.percentile(values, 99)) * 1000
    if not detailed:
        for key in ("input_lens", "output_lens", "start_times", "ttfts", "itls",
                    "generated_texts", "errors"):
            del res[key]
    return res


def write(name: str, items: list[dict[str, object]]) -> None:
    # --append-result writes one object per line
    (HERE / name).write_text("\n".join(json.dumps(i) for i in items) + "\n")


def main() -> None:
    eagle = {"method": "eagle3", "n": "3"}
    for detailed, suffix in ((True, ""), (False, "-summary")):
        write(f"baseline{suffix}.json", [result("baseline", 0.010, t, False, detailed, {})
                                         for t in range(TRIALS)])
        write(f"eagle3-n3{suffix}.json", [result("eagle3", 0.00625, t, True, detailed, eagle)
                                          for t in range(TRIALS)])


if __name__ == "__main__":
    main()
