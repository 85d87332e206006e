"""vLLM start-up with and without crossbench's cuts, and the decode rate behind each start.

Issue 33 item 5: starts of 63-161 s dominate vLLM's GPU time. This benchmark starts one cell
(a vLLM server config and a concurrency) ``--rounds`` times per variant (``--variants``,
default ``default,cut``):

- ``default``: vLLM's own CUDA graph sizes (``cudagraph_sizes: default``);
- ``cut``: ``cudagraph_sizes: decode`` (docs/vllm.md 'Start-up');
- ``fork``: the cut with ``engine_process: fork`` (the engine core forked, not spawned);
- ``kv``: the cut with ``kv_cache_memory_bytes`` (no memory profiling), the size taken from a
  profiled start of the same graph sizes (``Available KV cache memory``), or
  ``--kv-cache-memory-bytes``;
- ``next``: the cut with both;
- ``trace``: the cut with ``VLLM_LOGGING_LEVEL=DEBUG`` and ``PYTHONPROFILEIMPORTTIME=1`` (every
  import's time and vLLM's debug lines in the start's log, to split what the INFO lines do
  not; its phases carry the tracing's cost, and its decode rate is compared with nothing).

Variants of the same graph sizes share one compile cache per round (vLLM 0.26.0 leaves
VLLM_WORKER_MULTIPROC_METHOD, VLLM_LOGGING_LEVEL and the KV cache size out of its compile
hash): the first start on an empty cache is cold and is followed by a warm one; later
variants of the round start warm only. Variants alternate their order per round so drift hits
all alike. After each start it runs the cell's load (``--requests`` requests of
``--max-tokens`` tokens at ``--concurrency``) and records every request's decode rate (tokens
after the first chunk over the time from the first to the last chunk), vLLM's KV cache size
(fewer graphs leave vLLM's memory profiler a smaller graph estimate to subtract, so the cut's
KV cache can be slightly larger; it matters only where a cell would preempt) and the seconds
from the spawn to vLLM's phase lines (``log_marks_s``).

Report (stdout, and ``OUT/startup_cut.json`` with every start's record): per variant and
start kind, the seconds to ready, vLLM's phases (init engine, torch.compile, graph capture)
and phase lines, and the decode rate per start. Each decode verdict compares a variant's mean
per-start rate with its reference's (``cut`` with ``default``; ``fork``, ``kv`` and ``next``
with ``cut``): ``unchanged`` when the difference is within the start-to-start spread (the
larger max-min range of per-start rates of the two), else ``changed``. The warm-start target
is 40 s to ready.

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

A start takes 1-3 minutes on the H200, so a whole run outlasts a 10-minute device command
unless it runs in the background (benchmarks/study/run.sh's ROUND=startup-next does):
``--round R`` runs one round and every start's record lands in ``OUT/starts/`` as it
finishes; the report covers every record there, and ``--report`` only reports. Keep ``OUT``
and ``--cache`` (default ``OUT/cache``: compile artifacts, hundreds of MB for an 8B model) on
the machine between commands. Without a GPU it refuses with one line, unless ``--standin``
runs it against crossbench's vLLM stand-in (not vLLM: for testing this script only; its
numbers measure nothing about vLLM).
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
from crossbench.engines.vllm import startup_cut
from crossbench.engines.vllm.server import VllmServer
from crossbench.errors import CrossbenchError, UserError
from crossbench.load.client import ClientConfig, ConcurrencyMode, run_load_sync
from crossbench.load.workloads import Prompt, RequestSpec

AUTO = "auto"
"""``kv_cache_memory_bytes`` of a variant: taken from a profiled start (:func:`kv_bytes`)."""
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {"cudagraph_sizes": "default"},
    "cut": {"cudagraph_sizes": "decode"},
    "fork": {"cudagraph_sizes": "decode", "engine_process": "fork"},
    "kv": {"cudagraph_sizes": "decode", "kv_cache_memory_bytes": AUTO},
    "next": {"cudagraph_sizes": "decode", "engine_process": "fork",
             "kv_cache_memory_bytes": AUTO},
    "trace": {"cudagraph_sizes": "decode",
              "env": {"VLLM_LOGGING_LEVEL": "DEBUG", "PYTHONPROFILEIMPORTTIME": "1"}},
}
"""Each variant's server settings over the cell's config."""
REFERENCE = {"cut": "default", "fork": "cut", "kv": "cut", "next": "cut"}
"""The variant each one's decode rate is compared with (the same but for its one setting)."""
DEFAULT_VARIANTS = ("default", "cut")
TARGET_WARM_S = 40.0
PHASES = ("ready_s", "engine_init_s", "torch_compile_s", "compile_s", "graph_capture_s")
MARKS = ("first_line", "resolved", "engine_core", "model_load", "weights_loaded", "compiled",
         "kv_cache", "init_done", "api_start")
"""vLLM's phase lines, in seconds after the spawn (``log_marks_s`` of the start record)."""


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
              concurrency: int, requests: int, max_tokens: int,
              kv_cache_bytes: int | None = None) -> dict[str, Any]:
    """Start the server as ``variant`` (``kv_cache_bytes`` fills its ``auto`` KV size), wait,
    run the load, stop; the start's record."""
    over = dict(VARIANTS[variant])
    env = {**(config.get("env") or {}), **over.pop("env", {}), "VLLM_CACHE_ROOT": str(root)}
    if over.get("kv_cache_memory_bytes") == AUTO:
        over["kv_cache_memory_bytes"] = kv_cache_bytes
    cfg = {**config, **over, "compile_cache": "crossbench", "env": env}
    srv = registry.create("vllm", cfg, log)
    assert isinstance(srv, VllmServer)
    records: list[dict[str, Any]] = []
    srv.start()
    try:
        srv.wait_ready()
        cut = srv.startup_cut_record()
        facts = srv.startup_facts()
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
            "cache_group": cfg["cudagraph_sizes"],
            **{k: cut.get(k) for k in PHASES}, "capture_sizes": cut.get("capture_sizes"),
            "logged_capture_sizes": cut.get("logged_capture_sizes"),
            "engine_process": cut.get("engine_process"), "spawn_forced": cut.get("spawn_forced"),
            "kv_cache_memory_bytes": cut.get("kv_cache_memory_bytes"),
            "log_marks_s": cut.get("log_marks_s") or {},
            "kv_cache_tokens": facts.kv_cache_tokens if facts is not None else None,
            "kv_cache_gib": facts.kv_cache_gib if facts is not None else None,
            "n_ok": stats.n_ok, "n_error": stats.n_error,
            "decode_tok_s": statistics.mean(rates) if rates else None,
            "decode_tok_s_requests": rates}


def kv_bytes(starts: list[dict[str, Any]], group: str) -> tuple[int, str] | None:
    """The KV cache size of a profiled start of graph sizes ``group``, a warm one first (a
    cold start profiles beside torch.compile's leftovers: round 4's cut logged 101.98 GiB
    cold, 102.48 GiB warm), in bytes from its logged ``Available KV cache memory`` (2
    decimals of GiB: within 5.4 MB of the profile), and the start it came from; None without
    one."""
    profiled = [s for s in starts if s.get("cache_group") == group and s.get("kv_cache_gib")
                and s.get("kv_cache_memory_bytes") is None]
    if not profiled:
        return None
    s = min(profiled, key=lambda s: s.get("start") != "warm")  # the first warm, else cold
    where = f"{s['variant']} round {s.get('round')} {s.get('intended')}"
    return round(float(s["kv_cache_gib"]) * 2**30), f"{where} ({s['kv_cache_gib']} GiB)"


def _verdict(d: dict[str, Any], c: dict[str, Any]) -> dict[str, Any]:
    spread = max(d["max"] - d["min"], c["max"] - c["min"])
    diff = c["mean"] - d["mean"]
    return {"difference_tok_s": diff, "spread_tok_s": spread,
            "verdict": "unchanged" if abs(diff) <= spread else "changed",
            "rule": "variant mean minus reference mean, against the larger max-min range of "
                    "per-start decode rates"}


def summarize(starts: list[dict[str, Any]]) -> dict[str, Any]:
    """Phases and phase lines per variant and start kind, and each variant's decode verdict
    against its reference's rate and the start-to-start spread."""
    out: dict[str, Any] = {"phases": {}, "marks": {}, "decode": {}, "decode_verdicts": {},
                           "warm_targets": {}, "kv_cache_tokens": {}}
    present = [v for v in VARIANTS if any(s["variant"] == v for s in starts)]
    for variant in present:
        mine = [s for s in starts if s["variant"] == variant]
        for kind in ("cold", "warm"):
            group = [s for s in mine if s["start"] == kind]
            out["phases"][f"{variant}/{kind}"] = {
                k: _stats([s[k] for s in group if s.get(k) is not None]) for k in PHASES}
            marks = [s.get("log_marks_s") or {} for s in group]
            out["marks"][f"{variant}/{kind}"] = {
                k: _stats([m[k] for m in marks if k in m]) for k in MARKS}
        out["decode"][variant] = _stats([s["decode_tok_s"] for s in mine
                                         if s["decode_tok_s"] is not None])
        out["kv_cache_tokens"][variant] = sorted({s["kv_cache_tokens"] for s in mine
                                                  if s.get("kv_cache_tokens")})
        warm = out["phases"][f"{variant}/warm"]["ready_s"]
        if variant in REFERENCE and warm["n"]:  # not default's, nor the traced start's
            out["warm_targets"][variant] = {"warm_ready_max_s": warm["max"],
                                            "met": warm["max"] <= TARGET_WARM_S}
    for variant, ref in REFERENCE.items():
        d, c = out["decode"].get(ref, {"n": 0}), out["decode"].get(variant, {"n": 0})
        if d["n"] and c["n"]:
            out["decode_verdicts"][variant] = {"reference": ref, **_verdict(d, c)}
    if "cut" in out["decode_verdicts"]:  # the first cut's verdict and target, as before
        out["decode_verdict"] = {k: v for k, v in out["decode_verdicts"]["cut"].items()
                                 if k != "reference"}
    if "cut" in out["warm_targets"]:
        out["warm_target"] = {"target_s": TARGET_WARM_S,
                              "cut_warm_ready_max_s": out["warm_targets"]["cut"][
                                  "warm_ready_max_s"],
                              "met": out["warm_targets"]["cut"]["met"]}
    return out


def _stats(xs: list[float]) -> dict[str, Any]:
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "mean": statistics.mean(xs), "min": min(xs), "max": max(xs)}


def _table(rows: dict[str, dict[str, Any]], keys: tuple[str, ...], title: str) -> list[str]:
    lines = [f"{title:<14} " + " ".join(f"{k:>16}" for k in keys)]
    for name, row in rows.items():
        if not any(row[k]["n"] for k in keys):
            continue
        cells = [f"{row[k]['mean']:>7.1f} [{round(row[k]['min'])}..{round(row[k]['max'])}]"
                 if row[k]["n"] else f"{'-':>16}" for k in keys]
        lines.append(f"{name:<14} " + " ".join(f"{c:>16}" for c in cells))
    return lines


def render(summary: dict[str, Any], standin: bool,
           starts: list[dict[str, Any]] | None = None) -> str:
    """The report as text."""
    lines = []
    if standin:
        lines.append("STAND-IN (crossbench's vLLM stand-in, not vLLM): these numbers test the "
                     "script only")
    lines += _table(summary["phases"], PHASES, "variant/start")
    if any(st["n"] for row in summary.get("marks", {}).values() for st in row.values()):
        lines.append("seconds from the spawn to vLLM's phase lines (whole-second stamps):")
        lines += _table(summary["marks"], MARKS, "variant/start")
    for variant, st in summary["decode"].items():
        if st["n"]:
            kv = summary.get("kv_cache_tokens", {}).get(variant)
            lines.append(f"decode {variant}: {st['mean']:.2f} tok/s over {st['n']} starts "
                         f"(range {st['min']:.2f}-{st['max']:.2f})"
                         + (f", KV cache {', '.join(f'{t:,}' for t in kv)} tokens"
                            if kv else ""))
    for variant, v in summary.get("decode_verdicts", {}).items():
        lines.append(f"decode rate {v['verdict']}: {variant} - {v['reference']} = "
                     f"{v['difference_tok_s']:+.2f} tok/s, start-to-start spread "
                     f"{v['spread_tok_s']:.2f} tok/s")
    for variant, t in summary.get("warm_targets", {}).items():
        lines.append(f"warm start of {variant}: at most {t['warm_ready_max_s']:.1f} s to "
                     f"ready, target {TARGET_WARM_S:.0f} s: {'met' if t['met'] else 'missed'}")
    for s in starts or []:
        if s.get("error"):
            lines.append(f"{s['variant']} round {s.get('round')} {s.get('intended')}: failed: "
                         f"{s['error']}")
        if s.get("engine_process") == "fork" and s.get("spawn_forced"):
            lines.append(f"{s['variant']} round {s.get('round')} {s.get('intended')}: vLLM "
                         f"spawned the engine core anyway ({s['spawn_forced']}): no fork "
                         "was measured")
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
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                   help=f"comma-separated, of {', '.join(VARIANTS)} (default: %(default)s)")
    p.add_argument("--cache", type=Path, default=None,
                   help="folder of the compile caches (default OUT/cache; keep it out of a "
                   "folder that is archived)")
    p.add_argument("--kv-cache-memory-bytes", type=int, default=None,
                   help="the KV size of kv and next (default: a profiled start's)")
    args = p.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        print(f"vllm_startup_cut: --variants {args.variants!r}: choose of "
              f"{', '.join(VARIANTS)}", file=sys.stderr)
        return 2
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
            _run_round(args, config, out, rnd, variants if rnd % 2 == 0 else variants[::-1])
    except CrossbenchError as e:
        print(f"vllm_startup_cut: {e.one_line()}", file=sys.stderr)
        return 2 if isinstance(e, UserError) else 1
    (out / "config.json").write_text(json.dumps(config, indent=2, default=str))
    return _report(out, args.standin)


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((out / "starts").glob("*.json"))]


def _run_round(args: argparse.Namespace, config: dict[str, Any], out: Path, rnd: int,
               order: list[str]) -> None:
    """One round: each variant in ``order``, cold then warm where its compile cache is new
    this round, else warm; a start that fails is recorded with its error and the round goes
    on (UserError, a mistake in the config, ends it)."""
    cache = args.cache or out / "cache"
    for variant in order:
        group = VARIANTS[variant]["cudagraph_sizes"]
        root = cache / group / f"round{rnd}"
        started = any(r.get("round") == rnd and r.get("cache_group") == group
                      for r in _records(out))
        kinds = ["warm"] if started and startup_cut.cache_entries(root) else ["cold", "warm"]
        if kinds[0] == "cold":
            shutil.rmtree(root, ignore_errors=True)
        kv, kv_source = None, None
        if VARIANTS[variant].get("kv_cache_memory_bytes") == AUTO:
            found = ((args.kv_cache_memory_bytes, "--kv-cache-memory-bytes")
                     if args.kv_cache_memory_bytes else kv_bytes(_records(out), group))
            if found is None:
                raise UserError(f"--variants {variant}: no profiled start of cudagraph_sizes "
                                f"{group} to take the KV cache size from",
                                "put a variant without it first (e.g. cut), or pass "
                                "--kv-cache-memory-bytes")
            kv, kv_source = found
        for kind in kinds:
            log = out / f"{variant}-{rnd}-{kind}.log"
            try:
                rec = one_start(config, variant, root, log, args.concurrency,
                                args.requests or 3 * args.concurrency, args.max_tokens, kv)
            except UserError:
                raise
            except CrossbenchError as e:
                rec = {"variant": variant, "start": None, "cache_group": group,
                       "error": e.one_line(), "decode_tok_s": None}
            rec["round"], rec["intended"] = rnd, kind
            rec["standin"], rec["concurrency"] = args.standin, args.concurrency
            if kv_source is not None:
                rec["kv_source"] = kv_source
            (out / "starts" / f"{variant}-r{rnd}-{kind}.json").write_text(
                json.dumps(rec, indent=2, default=str))
            if "error" in rec:
                print(f"round {rnd} {variant} {kind}: failed: {rec['error']}", file=sys.stderr)
                break
            print(f"round {rnd} {variant} {kind}: ready {rec['ready_s']:.1f} s "
                  f"({rec['start']}), decode {rec['decode_tok_s'] or 0:.2f} tok/s",
                  file=sys.stderr)


def _report(out: Path, standin: bool) -> int:
    """Summarize every start record under ``OUT/starts`` into ``OUT/startup_cut.json``."""
    starts = _records(out)
    if not starts:
        print(f"vllm_startup_cut: no start records in {out / 'starts'}", file=sys.stderr)
        return 2
    standin = standin or any(s.get("standin") for s in starts)
    summary = summarize(starts)
    (out / "startup_cut.json").write_text(json.dumps(
        {"standin": standin, "starts": starts, "summary": summary}, indent=2, default=str))
    print(render(summary, standin, starts))
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
