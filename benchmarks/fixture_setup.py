"""How long making an 8B-class Qwen3.5 target takes, phase by phase: the HF folder (drawing
the random tensors, writing and hashing them), llama.cpp's converter, and the tensor check
with the GGUF's hash.

Every H200 lease of the MoE study starts by making its targets (the MoE target in both formats
took 475 s of a 932 s lease on 2026-12-07), so this is lease time. The run makes a target of
the fixtures' ``qwen3-8b`` family into a temporary folder with the crossbench found on
``PYTHONPATH`` (so an older checkout can be timed the same way), restricted to ``--cpus``
cores through the affinity mask the writers size their thread pools from, and records each
phase and the manifest's digests (the same digests from two runs: the same bytes).

Usage (by hand; minutes; a quiet machine, since every phase is CPU- or disk-bound)::

    python benchmarks/fixture_setup.py --shape qwen3-8b-l4 --cpus 1 --out one.json
    python benchmarks/fixture_setup.py --shape qwen3-8b-l4 --out all.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def run(shape: str, role: str, cpus: int | None, keep: Path | None) -> dict[str, Any]:
    """Make the target once, timing its phases; returns the figures and the digests."""
    if cpus is not None:
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:cpus]))
    from crossbench.fixtures import drafters
    from crossbench.fixtures.mtp import make_mtp_target, mtp_spec, sizes
    from crossbench.fixtures.resolve import _converter_inputs, ensure_hf_fixture

    tok = ensure_hf_fixture("tiny", "target", 0)  # inputs first, outside the timed part
    _folder, tree, never = _converter_inputs("tiny", 0)
    marks: list[tuple[str, float]] = []
    convert = drafters.convert

    def timed_convert(*a: Any, **k: Any) -> Any:
        marks.append(("convert start", time.monotonic()))
        out = convert(*a, **k)
        marks.append(("convert end", time.monotonic()))
        return out

    drafters.convert = timed_convert  # type: ignore[assignment]
    root = keep or Path(tempfile.mkdtemp(prefix="fixture-setup-"))
    try:
        t0 = time.monotonic()
        made = make_mtp_target(shape, tok, root / role, tree, never, 0,
                               lambda m: marks.append((m, time.monotonic())), role)
        total = time.monotonic() - t0
        at = dict(marks)
        write_end = next(v for k, v in marks if k.startswith("wrote") and k.endswith("MB)"))
        phases = {"hf_folder_s": write_end - t0,
                  "convert_s": at["convert end"] - at["convert start"],
                  "check_and_hash_s": t0 + total - at["convert end"], "total_s": total}
        files = made.manifest["files"]
        nbytes = sum(int(f["bytes"]) for f in files.values())
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    spec = mtp_spec(shape, role)
    return {"shape": shape, "role": role, "cpus": len(os.sched_getaffinity(0)),
            "machine": platform.machine(), "python": platform.python_version(),
            "predicted_bytes": sizes(spec, 151936), "bytes_written": nbytes,
            "phases": phases,
            "digests": {k: v["sha256"] for k, v in sorted(files.items())},
            "tensor_digests": [t["sha256"] for t in made.manifest["tensors"]]}


def main() -> None:
    """Parse the arguments, run once, print the phases and write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen3-8b-l4",
                    help="a fixture shape of the role (qwen3-8b-l4: 9.7 GB a format)")
    ap.add_argument("--role", default="moe-target", choices=["moe-target", "dense-twin"])
    ap.add_argument("--cpus", type=int, default=None, help="cores to run on (default: all)")
    ap.add_argument("--keep", type=Path, default=None, help="make it here and keep it")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    result = run(args.shape, args.role, args.cpus, args.keep)
    gb = result["bytes_written"] / 1e9
    print(f"{args.role} {args.shape} on {result['cpus']} CPU(s), {gb:.1f} GB written:")
    for k, v in result["phases"].items():
        print(f"  {k:18s} {v:7.1f} s")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
