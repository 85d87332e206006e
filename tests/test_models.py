"""Hugging Face model references, resolved offline through a cache laid out as the hub does."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossbench.errors import RunError, UserError
from crossbench.models import HFModelRef, parse_model_ref, resolve_model

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def fill_cache(root: Path, repo: str, commit: str, filename: str, data: bytes) -> None:
    """Lay out a file exactly where huggingface_hub's cache keeps it."""
    folder = root / ("models--" + repo.replace("/", "--"))
    snap = folder / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / filename).write_bytes(data)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(commit)


def test_parse():
    ref = parse_model_ref(f"hf://Qwen/Qwen3-8B-GGUF@{COMMIT}/Qwen3-8B-Q4_K_M.gguf")
    assert ref == HFModelRef("Qwen/Qwen3-8B-GGUF", COMMIT, "Qwen3-8B-Q4_K_M.gguf")
    assert isinstance(ref, HFModelRef) and ref.pinned_to_commit
    assert parse_model_ref("m.gguf") == Path("m.gguf")
    with pytest.raises(UserError, match="not hf://OWNER/REPO@REVISION/FILE"):
        parse_model_ref("hf://Qwen/Qwen3-8B-GGUF/Qwen3-8B-Q4_K_M.gguf")


def test_resolve_offline_from_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    fill_cache(tmp_path, "org/repo", COMMIT, "m.gguf", b"GGUF-bytes")
    path = resolve_model(HFModelRef("org/repo", COMMIT, "m.gguf"))
    assert path.read_bytes() == b"GGUF-bytes"
    assert COMMIT in str(path)
    with pytest.raises(RunError, match="not in the local Hugging Face cache"):
        resolve_model(HFModelRef("org/repo", COMMIT, "other.gguf"))


def test_file_record_hashes_once_and_reads_the_hf_commit(tmp_path, monkeypatch):
    import hashlib

    from crossbench.models import file_record

    monkeypatch.setenv("CROSSBENCH_CACHE", str(tmp_path / "cache"))
    fill_cache(tmp_path / "hub", "org/repo", COMMIT, "m.gguf", b"weights")
    path = tmp_path / "hub" / "models--org--repo" / "snapshots" / COMMIT / "m.gguf"
    rec = file_record(path, f"hf://org/repo@{COMMIT}/m.gguf")
    assert rec["sha256"] == hashlib.sha256(b"weights").hexdigest()
    assert rec["hf_commit"] == COMMIT and rec["bytes"] == 7
    assert (tmp_path / "cache" / "hashes.json").exists()
