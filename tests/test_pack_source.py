"""``crossbench engines pack-source``: what a carried llama.cpp source keeps and drops."""

from __future__ import annotations

import tarfile
from pathlib import Path

from crossbench.engines.llamacpp.build import pack_source
from crossbench.engines.llamacpp.pins import DEFAULT_PIN, get_pin


def test_pruned_source_keeps_the_hf_converter_and_its_packages(tmp_path: Path) -> None:
    out = pack_source(get_pin(DEFAULT_PIN), tmp_path / "src.tgz")
    with tarfile.open(out) as tar:
        names = set(tar.getnames())
    # convert_hf_to_gguf.py imports `conversion` and `gguf` (gguf-py): both travel with it
    for needed in ("llama.cpp/convert_hf_to_gguf.py", "llama.cpp/conversion/__init__.py",
                   "llama.cpp/gguf-py/gguf/__init__.py", "llama.cpp/CMakeLists.txt",
                   "llama.cpp/models/ggml-vocab-qwen35.gguf", "sdist.json"):
        assert needed in names, needed
    assert not any(n.startswith(("llama.cpp/docs/", "llama.cpp/tests/")) for n in names)
    assert [n for n in names if n.startswith("llama.cpp/models/")] == [
        "llama.cpp/models/ggml-vocab-qwen35.gguf"]
    # deterministic: the same pin gives the same bytes
    again = pack_source(get_pin(DEFAULT_PIN), tmp_path / "again.tgz")
    assert again.read_bytes() == out.read_bytes()
