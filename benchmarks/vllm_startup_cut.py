"""vLLM start-up with and without crossbench's cut, and the decode rate behind each start.

Issue 33 item 5: starts of 63-161 s dominate vLLM's GPU time. This benchmark starts one cell
(a vLLM server config and a concurrency) ``--rounds`` times per variant, each round a cold
start (an empty ``VLLM_CACHE_ROOT``) then a warm one (the same root), for two variants:

- ``default``: vLLM's own CUDA graph sizes (``cudagraph_sizes: default``);
- ``cut``: ``cudagraph_sizes: decode`` (docs/vllm.md 'Start-up').

Both variants use crossbench's compile cache, so cold-vs-warm shows what the cache saves and
default-vs-cut what the capture sizes save. Variants alternate their order per round so drift
hits both alike. After each start it runs the cell's load (``--requests`` requests of
``--max-tokens`` tokens at ``--concurrency``) and records every request's decode rate
(tokens after the first chunk over the time from the first to the last chunk), and vLLM's
KV cache size (fewer graphs leave vLLM's memory profiler a smaller graph estimate to subtract,
so the cut's KV cache can be slightly larger; it matters only where a cell would preempt).

Report (stdout, and ``OUT/startup_cut.json`` with every start's record): per variant and
start kind, the seconds to ready and vLLM's phases (init engine, torch.compile, graph
capture), and the decode rate per start. The decode verdict compares the cut's mean per-start
rate with the default's: ``unchanged`` when the difference is within the start-to-start
spread (the larger max-min range of per-start rates of the two variants), else ``changed``.
The warm-start target is 40 s to ready.

On a GPU host::

    python benchmarks/vllm_startup_cut.py --config cell.yaml --concurrency 16 --out OUT

``cell.yaml`` is one vLLM server config (the ``server:`` of a matrix arm, with ``binary`` and
``model``; ``max_num_seqs`` defaults to the concurrency), e.g. the study's n=4 draft arm::

    binary: .carry/vllm-0.26.0/bin/vllm
    version: 0.26.0
    model: /work/main/.cbcache/fixtures/qwen3-8b-seed0-v1/hf-target
    dtype: float16
    max_model_len: 2048
    gpu_memory_utilization: 0.85
    enable_prefix_caching: false
    async_scheduling: false
    max_num_seqs: 16
    spec: {type: draft_model, n: 4,
           draft_model: /work/main/.cbcache/fixtures/qwen3-8b-seed0-v1/hf-draft}

A start takes 1-3 minutes on the H200, so a whole run (12 starts) outlasts a 10-minute device
command: ``--round R`` runs one round (4 starts) and every start's record lands in
``OUT/starts/`` as it finishes; the report covers every record there, and ``--report`` only
reports. Keep ``OUT`` on the machine between commands (the cold/warm pairs share
``OUT/cache``). Without a GPU it refuses with one line, unless ``--standin`` runs it against
crossbench's vLLM stand-in (not vLLM: for testing this script only; its numbers measure
nothing about vLLM).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from crossbench.engines import registry
from crossbench.engines.vllm.server import VllmServer
from crossbench.errors import CrossbenchError, UserError
from crossbench.load.client import ClientConfig, ConcurrencyMode, run_load_sync
from crossbench.load.workloads import Prompt, RequestSpec

VARIANTS = {"default": "default", "cut": "decode"}
TARGET_WARM_S = 40.0
PHASES = ("ready_s", "engine_init_s", "torch_compile_s", "compile_s", "graph_capture_s")


def gpu_present() -> bool:
    """Whether ``nvidia-smi -L`` lists a GPU."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30,
                             check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def decode_rates(records: list[dict[str, Any]]) -> list[float]:
    """Decode tokens per second of each complete request: tokens after the first chunk over
    the time from the first chunk to the last."""
    out = []
    for r in records:
        chunks = r.get("chunks") or []
        if r.get("warmup") or r.get("error") or len(chunks) < 2:
            continue
        span_s = (chunks[-1][0] - chunks[0][0]) / 1e9
        tokens = sum(n for _, n in chunks[1:])
        if span_s > 0 and tokens > 0:
            out.append(tokens / span_s)
    return out


def one_start(config: dict[str, Any], variant: str, root: Path, log: Path,
              concurrency: int, requests: int, max_tokens: int) -> dict[str, Any]:
    """Start the server, wait, run the load, stop; the start's record."""
    env = {**(config.get("env") or {}), "VLLM_CACHE_ROOT": str(root)}
    cfg = {**config, "cudagraph_sizes": VARIANTS[variant], "compile_cache": "crossbench",
           "env": env}
    srv = registry.create("vllm", cfg, log)
    assert isinstance(srv, VllmServer)
    records: list[dict[str, Any]] = []
    srv.start()
    try:
        srv.wait_ready()
        cut = srv.startup_cut_record()
        facts = srv.startup_facts()
        kv_tokens = facts.kv_cache_tokens if facts is not None else None
        client = ClientConfig(base_url=srv.base_url, model=srv.served_model_name,
                              max_tokens=max_tokens, ignore_eos=True, seed=1,
                              extra_body=srv.request_extras(False))
        reqs = [RequestSpec(Prompt(f"p{i}", "startup-cut", f"Write about topic {i}.", None), i)
                for i in range(requests)]
        warm = [RequestSpec(Prompt("w", "startup-cut", "Warm up.", None), 0)]
        stats = run_load_sync(client, reqs, ConcurrencyMode(concurrency=concurrency),
                              records.append, warmup=warm)
    finally:
        srv.stop()
    rates = decode_rates(records)
    return {"variant": variant, "start": cut.get("start"), "cache_root": str(root),
            **{k: cut.get(k) for k in PHASES}, "capture_sizes": cut.get("capture_sizes"),
            "logged_capture_sizes": cut.get("logged_capture_sizes"),
            "kv_cache_tokens": kv_tokens,
            "n_ok": stats.n_ok, "n_error": stats.n_error,
            "decode_tok_s": statistics.mean(rates) if rates else None,
            "decode_tok_s_requests": rates}


def summarize(starts: list[dict[str, Any]]) -> dict[str, Any]:
    """Phases per variant and start kind, and the decode verdict against the spread."""
    out: dict[str, Any] = {"phases": {}, "decode": {}}
    for variant in VARIANTS:
        for kind in ("cold", "warm"):
            group = [s for s in starts if s["variant"] == variant and s["start"] == kind]
            out["phases"][f"{variant}/{kind}"] = {
                k: _stats([s[k] for s in group if s.get(k) is not None]) for k in PHASES}
        rates = [s["decode_tok_s"] for s in starts
                 if s["variant"] == variant and s["decode_tok_s"] is not None]
        out["decode"][variant] = _stats(rates)
    d, c = out["decode"]["default"], out["decode"]["cut"]
    if d["n"] and c["n"]:
        spread = max(d["max"] - d["min"], c["max"] - c["min"])
        diff = c["mean"] - d["mean"]
        out["decode_verdict"] = {
            "difference_tok_s": diff, "spread_tok_s": spread,
            "verdict": "unchanged" if abs(diff) <= spread else "changed",
            "rule": "cut mean minus default mean, against the larger max-min range of "
                    "per-start decode rates"}
    warm = out["phases"]["cut/warm"]["ready_s"]
    if warm["n"]:
        out["warm_target"] = {"target_s": TARGET_WARM_S, "cut_warm_ready_max_s": warm["max"],
                              "met": warm["max"] <= TARGET_WARM_S}
    return out


def _stats(xs: list[float]) -> dict[str, Any]:
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "mean": statistics.mean(xs), "min": min(xs), "max": max(xs)}


def render(summary: dict[str, Any], standin: bool) -> str:
    """The report as text."""
    lines = []
    if standin:
        lines.append("STAND-IN (crossbench's vLLM stand-in, not vLLM): these numbers test the "
                     "script only")
    lines.append(f"{'variant/start':<14} " + " ".join(f"{k:>16}" for k in PHASES))
    for name, phases in summary["phases"].items():
        cells = []
        for k in PHASES:
            st = phases[k]
            cells.append(f"{st['mean']:>7.1f} [{st['min']:.0f}-{st['max']:.0f}]"
                         if st["n"] else f"{'-':>16}")
        lines.append(f"{name:<14} " + " ".join(f"{c:>16}" for c in cells))
    for variant, st in summary["decode"].items():
        if st["n"]:
            lines.append(f"decode {variant}: {st['mean']:.2f} tok/s over {st['n']} starts "
                         f"(range {st['min']:.2f}-{st['max']:.2f})")
    v = summary.get("decode_verdict")
    if v:
        lines.append(f"decode rate {v['verdict']}: cut - default = "
                     f"{v['difference_tok_s']:+.2f} tok/s, start-to-start spread "
                     f"{v['spread_tok_s']:.2f} tok/s")
    t = summary.get("warm_target")
    if t:
        lines.append(f"warm start with the cut: at most {t['cut_warm_ready_max_s']:.1f} s to "
                     f"ready, target {t['target_s']:.0f} s: {'met' if t['met'] else 'missed'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 2 on a usage error or a host without a GPU."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--config", type=Path, help="vLLM server config (YAML mapping)")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, default=0, help="default: 3 x concurrency")
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--round", type=int, default=None,
                   help="run only this round (0-based; starts of earlier rounds stay)")
    p.add_argument("--report", action="store_true",
                   help="start nothing: report the records already in OUT/starts")
    p.add_argument("--standin", action="store_true",
                   help="run against crossbench's vLLM stand-in (not vLLM), to test the script")
    args = p.parse_args(argv)
    if args.report:
        if args.out is None:
            print("vllm_startup_cut: --report needs --out OUT", file=sys.stderr)
            return 2
        return _report(args.out, args.standin)
    if not args.standin and not gpu_present():
        print("vllm_startup_cut: no GPU on this host (nvidia-smi lists none); run it on a GPU "
              "host, or pass --standin to test the script against the stand-in",
              file=sys.stderr)
        return 2
    if args.concurrency < 1 or args.rounds < 1:
        print("vllm_startup_cut: --concurrency and --rounds must be >= 1", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="startup-cut-"))
    out.mkdir(parents=True, exist_ok=True)
    try:
        config = _load_config(args, out)
        (out / "starts").mkdir(exist_ok=True)
        rounds = range(args.rounds) if args.round is None else [args.round]
        for rnd in rounds:
            order = list(VARIANTS) if rnd % 2 == 0 else list(reversed(VARIANTS))
            for variant in order:
                root = out / "cache" / variant / f"round{rnd}"
                shutil.rmtree(root, ignore_errors=True)
                for kind in ("cold", "warm"):
                    rec = one_start(config, variant, root, out / f"{variant}-{rnd}-{kind}.log",
                                    args.concurrency, args.requests or 3 * args.concurrency,
                                    args.max_tokens)
                    rec["round"], rec["intended"] = rnd, kind
                    rec["standin"], rec["concurrency"] = args.standin, args.concurrency
                    (out / "starts" / f"{variant}-r{rnd}-{kind}.json").write_text(
                        json.dumps(rec, indent=2, default=str))
                    print(f"round {rnd} {variant} {kind}: ready {rec['ready_s']:.1f} s "
                          f"({rec['start']}), decode {rec['decode_tok_s'] or 0:.2f} tok/s",
                          file=sys.stderr)
    except CrossbenchError as e:
        print(f"vllm_startup_cut: {e.one_line()}", file=sys.stderr)
        return 2 if isinstance(e, UserError) else 1
    (out / "config.json").write_text(json.dumps(config, indent=2, default=str))
    return _report(out, args.standin)


def _report(out: Path, standin: bool) -> int:
    """Summarize every start record under ``OUT/starts`` into ``OUT/startup_cut.json``."""
    starts = [json.loads(p.read_text()) for p in sorted((out / "starts").glob("*.json"))]
    if not starts:
        print(f"vllm_startup_cut: no start records in {out / 'starts'}", file=sys.stderr)
        return 2
    standin = standin or any(s.get("standin") for s in starts)
    summary = summarize(starts)
    (out / "startup_cut.json").write_text(json.dumps(
        {"standin": standin, "starts": starts, "summary": summary}, indent=2, default=str))
    print(render(summary, standin))
    print(f"records: {out / 'startup_cut.json'}")
    return 0


def _load_config(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    if args.config is None:
        if not args.standin:
            raise UserError("--config: no vLLM server config given",
                            "pass --config cell.yaml (a server: mapping with binary and model)")
        config: dict[str, Any] = {"model": "Qwen/Qwen3-8B"}
    else:
        data = yaml.safe_load(args.config.read_text())
        if not isinstance(data, dict):
            raise UserError(f"--config: {args.config} is not a mapping",
                            "write one vLLM server config (binary, model, ...)")
        config = data
    if args.standin:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from standins.vllm import write_launcher

        launcher = write_launcher(out / "vllm-standin", "--standin-step-ms", "1",
                                  "--standin-prefill-ms", "1", "--standin-compile-s", "1",
                                  "--standin-capture-ms", "20")
        config = {**config, "binary": str(launcher)}
    config.setdefault("max_num_seqs", args.concurrency)
    return config


if __name__ == "__main__":
    raise SystemExit(main())
