"""Model references: a local file, or a Hugging Face repo pinned to a revision plus a file.

Written ``hf://OWNER/REPO@REVISION/FILE.gguf``. The revision is required (a commit hash is
best: a branch such as ``main`` moves, and the same reference would then name other bytes).
Files are fetched with ``huggingface_hub.hf_hub_download`` into the standard Hugging Face
cache, so ``HF_HUB_OFFLINE=1`` and a filled cache work without network. A token comes only
from the environment (``HF_TOKEN``) and is never written anywhere by crossbench.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from crossbench.errors import RunError, UserError

_HF = re.compile(r"^hf://(?P<repo>[\w.-]+/[\w.-]+)@(?P<rev>[\w./-]+?)/(?P<file>[^@]+)$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class HFModelRef:
    """A file in a Hugging Face model repository at a fixed revision."""

    repo: str
    revision: str
    filename: str

    @property
    def pinned_to_commit(self) -> bool:
        """Whether the revision is a full commit hash (immutable)."""
        return bool(_COMMIT.match(self.revision))

    def __str__(self) -> str:
        return f"hf://{self.repo}@{self.revision}/{self.filename}"


def parse_model_ref(text: str) -> Path | HFModelRef:
    """A local path, or an :class:`HFModelRef` for ``hf://`` references."""
    if not text.startswith("hf://"):
        return Path(text).expanduser()
    m = _HF.match(text)
    if not m:
        raise UserError(f"model reference {text!r} is not hf://OWNER/REPO@REVISION/FILE",
                        "write e.g. hf://Qwen/Qwen3-8B-GGUF@<commit>/Qwen3-8B-Q4_K_M.gguf")
    return HFModelRef(m["repo"], m["rev"], m["file"])


def resolve_model(ref: Path | HFModelRef) -> Path:
    """Local path of a model, downloading an ``hf://`` file into the Hugging Face cache."""
    if isinstance(ref, Path):
        return ref
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError as e:  # pragma: no cover - dependency of the package
        raise UserError("hf:// models need huggingface_hub",
                        "pip install huggingface_hub") from e
    try:
        return Path(hf_hub_download(repo_id=ref.repo, filename=ref.filename,
                                    revision=ref.revision))
    except LocalEntryNotFoundError as e:
        raise RunError(f"{ref} is not in the local Hugging Face cache and cannot be fetched",
                       "download it on a machine with network, or unset HF_HUB_OFFLINE") from e
    except RevisionNotFoundError as e:
        raise UserError(f"{ref}: revision {ref.revision!r} does not exist in {ref.repo}",
                        "use a commit hash from the repo's history") from e
    except EntryNotFoundError as e:
        raise UserError(f"{ref}: no file {ref.filename!r} at that revision",
                        "check the file name in the repo's file list") from e
    except RepositoryNotFoundError as e:
        raise UserError(f"{ref}: repository {ref.repo!r} not found (or gated)",
                        "check the name; gated repos need HF_TOKEN in the environment") from e


def file_record(path: Path, ref: str | None = None) -> dict[str, object]:
    """Provenance of a model file: path, size, sha256 (cached by path, size and mtime), the
    reference it came from, and for Hugging Face files the commit of the snapshot."""
    import json

    from crossbench.paths import cache_dir
    from crossbench.store.atomic import sha256_file, write_json_atomic

    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    cache = cache_dir() / "hashes.json"
    try:
        known: dict[str, str] = json.loads(cache.read_text())
    except (OSError, ValueError):  # none yet, or unreadable: start afresh
        known = {}
    digest = known.get(key)
    if digest is None:
        digest = sha256_file(path)
        known[key] = digest
        write_json_atomic(cache, known)
    out: dict[str, object] = {"path": str(path), "bytes": st.st_size, "sha256": digest}
    if ref is not None:
        out["ref"] = ref
    parts = path.parts
    if "snapshots" in parts and parts.index("snapshots") + 1 < len(parts):
        out["hf_commit"] = parts[parts.index("snapshots") + 1]
    return out
