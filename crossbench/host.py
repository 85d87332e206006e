"""Facts about the machine crossbench runs on."""

from __future__ import annotations

import hashlib
import platform
import shutil
import subprocess
from pathlib import Path


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags_digest() -> str:
    """Digest of the CPU's feature flags: a native CPU build is only valid on the same set."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = " ".join(sorted(line.split(":", 1)[1].split()))
                return hashlib.sha256(flags.encode()).hexdigest()[:16]
    except OSError:
        pass
    return "unknown"


def gpu_names() -> list[str]:
    """Names of the NVIDIA GPUs ``nvidia-smi`` sees (empty without a driver or GPU)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]


def hardware_mismatch(gpu: str | None, gpu_count: int | None) -> str | None:
    """A warning when this host lacks the GPUs a study expects, else None."""
    if gpu is None and not gpu_count:
        return None
    names = gpu_names()
    want = f"{gpu_count or 1} x {gpu or 'GPU'}"
    have = ", ".join(names) if names else "no NVIDIA GPU visible (nvidia-smi finds none)"
    matching = [n for n in names if gpu is None or gpu.lower() in n.lower()]
    if len(matching) < (gpu_count or 1):
        return (f"the matrix expects {want}, this host has {have}: its results will not "
                "describe that hardware; run it there, or change `hardware` to what you have")
    return None
