"""Decode roofline of a model on this GPU: measured device copy bandwidth / model bytes.

Single-stream decoding reads every weight once per generated token, so no engine can decode
faster than ``bandwidth / weight bytes`` tokens per second. The bandwidth is measured here,
with a device-to-device copy through PyTorch (read + write counted), not taken from a data
sheet. Without torch or a GPU it says so and exits 2.

Usage::

    python benchmarks/roofline.py MODEL.gguf [--gib 4] [--repeats 20] [--out roofline.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def copy_bandwidth_gbs(gib: float, repeats: int) -> tuple[float, str]:
    """Bytes moved per second (read + write) by a device-to-device copy, and the GPU name."""
    import torch

    n = int(gib * 2**30)
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    return 2 * n * repeats / seconds / 1e9, torch.cuda.get_device_name(0)


def main() -> int:
    """Measure, divide, print and write JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("model", type=Path, help="the model file whose weights decode reads")
    ap.add_argument("--gib", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    try:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
    except (ImportError, RuntimeError) as e:
        print(f"roofline: cannot measure here ({e}); run it on the GPU machine", file=sys.stderr)
        return 2
    gbs, name = copy_bandwidth_gbs(args.gib, args.repeats)
    weight_bytes = args.model.stat().st_size
    result = {"gpu": name, "copy_bandwidth_gb_s": round(gbs, 1), "model": args.model.name,
              "model_bytes": weight_bytes,
              "roofline_tok_s": round(gbs * 1e9 / weight_bytes, 1),
              "note": "bandwidth counts read + write of a device-to-device copy; weight bytes "
                      "are the file's size (metadata and tokenizer included, a slight over-count)"}
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
