"""An installed wheel carries what the checkout keeps at its top level: engine profiles,
archive templates and the example matrices (``crossbench.paths.data_root``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, crossbench
from crossbench.paths import data_root, engines_dir
from crossbench.engines.llamacpp.profile import profiles_dir
from crossbench.engines.vllm.profile import profiles_dir as vllm_dir
from crossbench.archive.metadata import template_dir
print(json.dumps({"package": crossbench.__file__, "data": str(data_root()),
                  "llama": sorted(p.name for p in profiles_dir().glob("*.yaml")),
                  "vllm": sorted(p.name for p in vllm_dir().glob("*.yaml")),
                  "hosts": sorted(p.name for p in (engines_dir() / "hosts").glob("*.txt")),
                  "templates": str(template_dir()),
                  "matrix": (data_root() / "matrices" / "cpu-smoke.yaml").is_file()}))
"""


def _clean_tree(dest: Path) -> Path:
    """The files a build reads, copied apart (a checkout's own build/ could hide a broken
    build hook: setuptools reuses it)."""
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    for name in ("crossbench", "engines", "zenodo", "matrices"):
        shutil.copytree(ROOT / name, dest / name,
                        ignore=shutil.ignore_patterns("__pycache__", "_data", "*.egg-info"))
    return dest


def test_installed_wheel_finds_profiles_templates_and_matrices(tmp_path: Path) -> None:
    wheels, site, src = tmp_path / "wheels", tmp_path / "site", tmp_path / "src"
    src.mkdir()
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels), str(_clean_tree(src))],
                   check=True, cwd=tmp_path)
    (wheel,) = wheels.glob("crossbench-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, cwd=tmp_path)
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, cwd=tmp_path, env=env,
                         capture_output=True, text=True).stdout
    got = json.loads(out)
    assert Path(got["package"]).is_relative_to(site)  # the wheel's copy, not the checkout
    assert got["data"] == str(site / "crossbench" / "_data")
    assert {"b11312.yaml", "b11434.yaml", "options.yaml"} <= set(got["llama"])
    assert {"0.33.0.yaml", "0.10.2.yaml"} <= set(got["vllm"])
    assert "h200-cuda.txt" in got["hosts"]  # hosts' package lists (engines pack --against)
    assert got["templates"] == str(site / "crossbench" / "_data" / "zenodo")
    assert got["matrix"] is True
