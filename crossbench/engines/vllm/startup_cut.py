"""Shorter vLLM start-ups that leave the measured decode unchanged (issue 33, item 5).

Server settings recorded in the manifest (docs/vllm.md "Start-up" says why each leaves the
decode unchanged); the first two are on by choice in the studies, the last two opt-in and not
yet measured on a GPU:

- **CUDA graphs for the decode sizes only** (``cudagraph_sizes: decode``):
  :func:`decode_capture_sizes` keeps the prefix of vLLM's default
  ``cudagraph_capture_sizes`` (``VllmConfig._set_cudagraph_sizes`` of 0.26.0) that every
  decode step of up to ``max_num_seqs`` sequences pads to, also under the V1 runner's full
  decode graphs (``adjust_cudagraph_sizes_for_spec_decode``).
- **A crossbench-managed compile cache** (``compile_cache: crossbench``): ``VLLM_CACHE_ROOT``
  is ``~/.cache/crossbench/vllm-compile/<engine build key>/``, and
  ``crossbench engines compile-cache pack|unpack`` carries the folder to the next machine.
- **The engine core forked** (``engine_process: fork``): :func:`process_environment` sets
  ``VLLM_WORKER_MULTIPROC_METHOD=fork``, which ``vllm serve`` otherwise sets to ``spawn``
  (``cli_env_setup``), so the engine core inherits the API server's imports instead of
  importing vLLM again.
- **A given KV cache size** (``kv_cache_memory_bytes``): ``--kv-cache-memory-bytes``, with
  which the worker skips its memory profiling (``Worker.determine_available_memory``).

"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from crossbench.engines import cache_pack
from crossbench.errors import UserError

#: vLLM's default ``max_num_batched_tokens`` where crossbench leaves it unset (0.26.0 on a
#: GPU for the OpenAI server: 8192 at most; the cut only needs an upper bound)
DEFAULT_MAX_BATCHED = 8192

COMPILE_CACHE_DIR = "vllm-compile"
"""Folder under crossbench's cache holding one ``VLLM_CACHE_ROOT`` per engine build."""

COMPILE_CACHE_ENV = "CROSSBENCH_VLLM_COMPILE_CACHE"
"""Environment variable naming another folder for the per-build ``VLLM_CACHE_ROOT`` folders (a
bigger disk; the test suite points it at a temporary folder so that its stand-in starts never
reach the user's cache)."""

PACK_FORMAT = 1
"""Version of the compile-cache pack's ``crossbench-compile-cache.json`` (1: first)."""

_PACK_MANIFEST = "crossbench-compile-cache.json"
_INDEX = "crossbench-starts.jsonl"
#: what of VLLM_CACHE_ROOT a pack carries (torch.compile artifacts, not downloads or assets)
_PACKED = ("torch_compile_cache", "torch_aot_compile")
MODELINFOS = "modelinfos"
"""The folder of VLLM_CACHE_ROOT where vLLM 0.26.0 keeps what it learnt of each model class
(``_LazyRegisteredModel.inspect_model_cls``: one JSON per class, keyed by a hash of the class's
source file). Where a class has none, vLLM imports it in a subprocess to inspect it: 19 s at
the first start of each architecture on an H100 (2026-12-07, ``Resolved architecture``), which
a pack spares the next machine. Carried beside the entries, not counted as one (a start's cold
or warm is its compilation's)."""


def default_capture_sizes(max_num_seqs: int, n: int,
                          max_num_batched_tokens: int | None = None) -> list[int]:
    """vLLM 0.26.0's default ``cudagraph_capture_sizes`` (performance mode "balanced")."""
    if max_num_seqs < 1 or n < 0:
        raise ValueError("max_num_seqs must be >= 1 and n >= 0")
    max_tokens = max_num_batched_tokens or DEFAULT_MAX_BATCHED
    cap = min(max_num_seqs * (1 + n) * 2, 512, max_tokens)
    sizes = [i for i in (1, 2, 4) if i <= cap]
    if cap >= 8:
        sizes += list(range(8, min(cap + 1, 256), 8))
    if cap >= 256:
        sizes += list(range(256, cap + 1, 16))
    if max_tokens <= cap and max_tokens not in sizes:
        sizes.append(max_tokens)
    return sorted(set(sizes))


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def decode_capture_sizes(max_num_seqs: int, n: int,
                         max_num_batched_tokens: int | None = None) -> list[int]:
    """vLLM's default sizes up to the first at or above both graphs the largest decode step
    (``max_num_seqs * (n + 1)`` tokens) can pad to: ``s*``, the first default size at or above
    it, and ``T``, the first default size rounded up to a multiple of ``n + 1`` at or above it
    (the V1 runner's full decode graphs); the whole default list where no such size exists.

    >>> decode_capture_sizes(16, 2)     # default: [1, 2, 4, 8, 16, 24, ..., 96]
    [1, 2, 4, 8, 16, 24, 32, 40, 48]
    >>> decode_capture_sizes(16, 0)     # default: [1, 2, 4, 8, 16, 24, 32]
    [1, 2, 4, 8, 16]
    """
    full = default_capture_sizes(max_num_seqs, n, max_num_batched_tokens)
    q = n + 1
    need = max_num_seqs * q
    cap = full[-1]
    s_star = next((s for s in full if s >= need), None)
    t_round = min((r for r in (_round_up(s, q) for s in full) if need <= r <= cap),
                  default=None)
    if s_star is None or t_round is None:
        return full
    top = next((s for s in full if s >= max(s_star, t_round)), None)
    return full if top is None else [s for s in full if s <= top]


def cache_root(key: str, base: Path | None = None) -> Path:
    """``VLLM_CACHE_ROOT`` of an engine build: ``BASE/vllm-compile/KEY`` with ``base`` given,
    else ``$CROSSBENCH_VLLM_COMPILE_CACHE/KEY`` where that is set, else
    ``~/.cache/crossbench/vllm-compile/KEY`` (``CROSSBENCH_CACHE`` honoured)."""
    from crossbench.paths import cache_dir

    if base is None and os.environ.get(COMPILE_CACHE_ENV):
        return Path(os.environ[COMPILE_CACHE_ENV]).expanduser() / key
    return (base or cache_dir()) / COMPILE_CACHE_DIR / key


def cache_entries(root: Path) -> list[str]:
    """vLLM's compile-cache entries under ``root``, sorted: ``torch_compile_cache/<hash>``,
    and the AOT artifacts vLLM 0.26.0 keeps in ``torch_compile_cache/torch_aot_compile/<hash>``
    (or ``torch_aot_compile/<hash>``); empty for a cold root."""
    out = []
    for part in _PACKED:
        d = root / part
        if not d.is_dir():
            continue
        for p in sorted(d.iterdir()):
            if p.is_dir() and p.name == "torch_aot_compile":
                out += [f"{part}/{p.name}/{q.name}" for q in sorted(p.iterdir()) if q.is_dir()]
            elif p.is_dir():
                out.append(f"{part}/{p.name}")
    return sorted(out)


def _entry_of(name: str) -> str:
    """The entry a pack member belongs to (its first two parts, three under an AOT folder)."""
    parts = name.split("/")
    return "/".join(parts[:3] if len(parts) > 1 and parts[1] == "torch_aot_compile"
                    else parts[:2])


def note_start(root: Path, facts: dict[str, Any]) -> None:
    """Append one start's facts (model, config hash, cache dir it used, warm or cold) to the
    root's ``crossbench-starts.jsonl``, which a pack carries as its index."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / _INDEX).open("a") as f:
        f.write(json.dumps(facts, sort_keys=True) + "\n")


def read_index(root: Path) -> list[dict[str, Any]]:
    """The starts noted under ``root`` (malformed lines skipped)."""
    path = root / _INDEX
    return _index_items(path.read_text().splitlines()) if path.is_file() else []


def _index_items(lines: list[str]) -> list[dict[str, Any]]:
    """The starts of an index's lines (malformed lines skipped)."""
    out = []
    for line in lines:
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(item, dict):
            out.append(item)
    return out


_MAKER = "crossbench engines compile-cache pack"


def pack(root: Path, out: Path, key: str) -> dict[str, Any]:
    """Write ``out`` (a .tar.gz) holding ``root``'s compile artifacts and index, with a
    manifest naming the build key, the entries and the models and configs that filled them.
    UserError when ``root`` holds no entry."""
    entries = cache_entries(root)
    if not entries:
        raise UserError(f"compile-cache: {root} holds no compile-cache entry",
                        "start the configuration once on this machine (or check --build)")
    starts = read_index(root)
    manifest = {"format": PACK_FORMAT, "build_key": key, "entries": entries,
                "created": cache_pack.utc_now(),
                "models": sorted({str(s.get("model")) for s in starts if s.get("model")}),
                "config_hashes": sorted({str(s.get("config_hash")) for s in starts
                                         if s.get("config_hash")}),
                "gpus": sorted({str(g) for s in starts for g in s.get("gpus") or []})}
    infos = sorted(p.name for p in (root / MODELINFOS).glob("*.json") if p.is_file())
    if infos:
        manifest["modelinfos"] = infos
    index = [(root / _INDEX, _INDEX)] if (root / _INDEX).is_file() else []
    cache_pack.write(out, _PACK_MANIFEST, manifest,
                     [*index, *((root / entry, entry) for entry in entries),
                      *((root / MODELINFOS / name, f"{MODELINFOS}/{name}") for name in infos)])
    return manifest


def _pack_head(path: Path) -> tuple[dict[str, Any], bytes]:
    """A pack's manifest and its start index's bytes, read from the stream's head
    (:func:`crossbench.engines.cache_pack.read_head`: ``pack`` writes both before the
    entries); UserError for anything that is not a pack."""
    data, extra = cache_pack.read_head(path, _PACK_MANIFEST, "compile-cache", _MAKER, (_INDEX,))
    return (cache_pack.check_manifest(data, path, PACK_FORMAT, "compile-cache", _MAKER),
            extra.get(_INDEX, b""))


def read_pack_manifest(path: Path) -> dict[str, Any]:
    """The manifest of a pack; UserError for anything that is not one."""
    return _pack_head(path)[0]


def pack_starts(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A pack's manifest and the starts its index notes, each with the ``entry`` it used
    (``torch_compile_cache/<hash>``, None where the start logged no folder) and the
    ``module`` (backbone, eagle_head, draft_model); read without unpacking. Starts noted
    before crossbench recorded GPU names carry ``gpus`` None: which machine made such an
    entry is not in the pack."""
    manifest, index = _pack_head(path)
    starts = []
    for item in _index_items(index.decode(errors="replace").splitlines()):
        cache_dir = str(item.get("cache_dir") or "")
        at = cache_dir.find("/torch_compile_cache/")
        rel = cache_dir[at + 1:].split("/") if at >= 0 else []
        starts.append({**item, "gpus": item.get("gpus"),
                       "entry": "/".join(rel[:2]) if len(rel) >= 2 else None,
                       "module": rel[-1] if len(rel) >= 4 else None})
    return manifest, starts


def unpack(path: Path, base: Path | None = None) -> tuple[dict[str, Any], Path, list[str]]:
    """Extract a pack into its build's cache root, keeping entries already there (vLLM's
    entries are content-keyed: one already present is the same compilation), and the model
    class infos (:data:`MODELINFOS`) the root lacks (vLLM checks each against its class's
    source hash and inspects the class again where it is stale). Returns the
    manifest, the root and the entries added. Only regular files and folders under the
    packed folders are extracted (tarfile's ``data`` filter refuses links out and absolute
    paths)."""
    manifest, index = _pack_head(path)
    root = cache_root(manifest["build_key"], base)
    root.mkdir(parents=True, exist_ok=True)
    before = set(cache_entries(root))
    def place(name: str) -> tuple[Path, str] | None:
        top = name.split("/", 1)[0]
        if top in _PACKED:
            return (root, name) if _entry_of(name) not in before else None
        if top == MODELINFOS and name != MODELINFOS:  # a model class's info: kept if present
            return (root, name) if not (root / name).exists() else None
        return None

    cache_pack.extract(path, place, "compile-cache", _MAKER)
    if index:
        with (root / _INDEX).open("ab") as f:
            f.write(index)
    added = sorted(set(cache_entries(root)) - before)
    return manifest, root, added


def environment(mode: str, key: str, env: dict[str, str]) -> dict[str, str]:
    """The variables a start needs for a ``compile_cache`` mode (``crossbench``: its build's
    root; ``off``: ``VLLM_DISABLE_COMPILE_CACHE=1``; ``vllm``: nothing). A
    ``VLLM_CACHE_ROOT`` already in ``env`` wins (the config chose a place)."""
    if mode == "off":
        return {"VLLM_DISABLE_COMPILE_CACHE": "1"}
    if mode == "crossbench" and "VLLM_CACHE_ROOT" not in env:
        return {"VLLM_CACHE_ROOT": str(cache_root(key))}
    return {}


def effective_root(env: dict[str, str]) -> Path:
    """The ``VLLM_CACHE_ROOT`` a server with environment ``env`` uses."""
    return Path(os.path.expanduser(env.get("VLLM_CACHE_ROOT", "~/.cache/vllm")))


START_METHOD = "VLLM_WORKER_MULTIPROC_METHOD"
"""vLLM's variable for how its processes start (vLLM 0.26.0 ``envs.py``: spawn or fork)."""


def process_environment(engine_process: str) -> dict[str, str]:
    """The variable an ``engine_process`` needs: ``fork`` sets
    ``VLLM_WORKER_MULTIPROC_METHOD=fork`` (vLLM 0.26.0's ``get_mp_context`` reads it when it
    starts the engine core); ``spawn`` sets nothing, and the server leaves out any inherited
    value, so ``vllm serve`` chooses spawn itself (``cli_env_setup``)."""
    return {START_METHOD: "fork"} if engine_process == "fork" else {}
