"""The SGLang profiles are what the generator makes of the real wheels (when a wheel is at
hand: ``pip download sglang==VERSION --no-deps -d DIR`` and CROSSBENCH_SGLANG_WHEELS=DIR,
or /tmp/sgl), and what crossbench relies on is in them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from crossbench.engines.sglang.profile import known_profiles, profiles_dir
from crossbench.engines.sglang.tools import profile_gen


def _wheel(version: str) -> Path | None:
    folder = Path(os.environ.get("CROSSBENCH_SGLANG_WHEELS", "/tmp/sgl"))
    found = sorted(folder.glob(f"sglang-{version}-*.whl")) if folder.is_dir() else []
    return found[0] if found else None


@pytest.mark.parametrize("version", [p.version for p in known_profiles()])
def test_profile_is_the_generators_output(version: str) -> None:
    wheel = _wheel(version)
    if wheel is None:
        pytest.skip(f"no sglang {version} wheel at hand (pip download sglang=={version} "
                    "--no-deps -d /tmp/sgl)")
    stored = yaml.safe_load((profiles_dir() / f"{version}.yaml").read_text())
    assert profile_gen.generate(wheel) == stored


@pytest.mark.parametrize("prof", known_profiles(), ids=lambda p: p.version)
def test_profiles_hold_what_the_adapter_uses(prof) -> None:  # type: ignore[no-untyped-def]
    for algo in ("EAGLE", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE"):
        assert algo in prof.algorithms
    for flag in ("--model-path", "--host", "--port", "--enable-metrics", "--tp-size",
                 "--speculative-algorithm", "--speculative-num-steps",
                 "--speculative-eagle-topk", "--speculative-num-draft-tokens",
                 "--speculative-draft-model-path", "--disable-radix-cache"):
        assert flag in prof.flags, flag
    assert prof.flags["--enable-metrics"].get("switch") is True
    assert "/server_info" in prof.server_info_paths
    assert prof.requires_torch is not None and prof.requires_torch.startswith("torch==")
