"""Provenance of a trial: what exactly ran, where, with what, collected when it runs.

:func:`collect` assembles one record; each part has its own function for callers that need
only that part. The engine's identity comes from the caller (the adapter's
:meth:`~crossbench.engines.base.EngineServer.identity`), so this module never branches on
engine names. Secrets never enter a record: environment variables whose names look secret
keep their name with the value ``<redacted>``, so do argv values of secret-looking flags, and
a last pass replaces any secret value of the environment wherever else it appears.

Format version and history: ``crossbench.store.rundir.FORMATS["provenance"]``.
"""

from __future__ import annotations

import functools
import hashlib
import math
import mmap
import os
import platform
import re
import struct
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from crossbench import __version__
from crossbench.engines.base import EngineIdentity
from crossbench.host import cpu_model, proc_field
from crossbench.paths import repo_root
from crossbench.store.rundir import PROVENANCE_KIND, PROVENANCE_SCHEMA
from crossbench.telemetry.gpu import Nvml, NvmlProvider, NvmlUnavailable

SCHEMA_VERSION = PROVENANCE_SCHEMA

#: environment variables that change how engines run (recorded with their values)
ENV_PREFIXES: tuple[str, ...] = ("CUDA_", "GGML_", "LLAMA_", "VLLM_", "HF_", "NCCL_", "OMP_",
                                 "TORCH_")
#: a variable or flag holds a secret when one of the words of its name (split at ``_``, ``-``
#: and ``.``) ends with one of these: ``HF_TOKEN``, ``--api-key`` and ``APIKEY`` do;
#: ``--max-num-batched-tokens`` and ``--tokenizer`` (token counts and tokenizer names,
#: everywhere in an LLM server's flags) do not
SECRET_MARKERS: tuple[str, ...] = ("TOKEN", "KEY", "KEYS", "SECRET", "SECRETS", "PASSWORD",
                                   "PASSWD")
#: ... unless its last word says it names where the secret is, not the secret:
#: ``--api-key-file PATH``, ``api_key_env NAME``, ``HF_TOKEN_PATH``
POINTER_WORDS: frozenset[str] = frozenset({"FILE", "PATH", "DIR", "ENV", "VAR"})
#: always secret, whatever the markers say
SECRET_NAMES: frozenset[str] = frozenset({"HF_TOKEN", "ZENODO_TOKEN"})
REDACTED = "<redacted>"
#: secret values shorter than this are not scrubbed from free text (too likely to collide)
MIN_SCRUB_LEN = 4
_WORD_SPLIT = re.compile(r"[_.\-]+")


def is_secret(name: str) -> bool:
    """Whether an environment variable or flag name (``HF_TOKEN``, ``--api-key``) looks like
    it holds a secret: one of its words ends with a :data:`SECRET_MARKERS` entry and its last
    word is not one of :data:`POINTER_WORDS`."""
    upper = name.upper().lstrip("-")
    words = [w for w in _WORD_SPLIT.split(upper) if w]
    if upper.replace("-", "_") in SECRET_NAMES:
        return True
    return bool(words) and words[-1] not in POINTER_WORDS and any(
        w.endswith(SECRET_MARKERS) for w in words)


def engine_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Variables named ``CUDA_*``, ``GGML_*``, ``LLAMA_*``, ``VLLM_*``, ``HF_*``, ``NCCL_*``,
    ``OMP_*``, ``TORCH_*``, sorted, with secret values replaced by ``<redacted>``."""
    env = os.environ if environ is None else environ
    return {k: (REDACTED if is_secret(k) else v) for k, v in sorted(env.items())
            if k.startswith(ENV_PREFIXES)}


def _secret_flag(arg: str) -> tuple[str, bool] | None:
    """(flag, whether its value is attached with ``=``) of a secret-looking flag, else None."""
    if not arg.startswith("-") or len(arg) < 2:
        return None
    flag, eq, _ = arg.partition("=")
    return (flag, bool(eq)) if is_secret(flag) else None


def redact_argv(argv: Sequence[str]) -> list[str]:
    """argv with the values of secret-looking flags replaced by ``<redacted>``, in both forms
    (``--api-key X`` and ``--hf-token=X``), also where another option carries the flag
    (crossbench's own ``--server-arg=--api-key=X``, ``--server-arg=--api-key
    --server-arg=X``, ``--server-arg --api-key --server-arg X``). The one redaction of
    command lines: manifests, trial entries, provenance, server.log headers and dry runs all
    go through it."""
    out: list[str] = []
    redact_next = wrapped = False
    for arg in argv:
        flag, eq, value = arg.partition("=")
        if redact_next and arg.startswith("--") and not eq:
            out.append(arg)  # a carrier: `--server-arg --token --server-arg X`
            continue
        if redact_next:
            keep = wrapped and eq and arg.startswith("-")  # the carrier of the value stays
            out.append(f"{flag}={REDACTED}" if keep else REDACTED)
            redact_next = wrapped = False
            continue
        found = _secret_flag(arg)
        if found is not None:
            out.append(f"{flag}={REDACTED}" if found[1] else arg)
            redact_next = not found[1]
        elif arg.startswith("-") and eq and value.startswith("-"):
            inner = _secret_flag(value)  # --server-arg=--api-key[=X]
            shown = redact_argv([value])[0] if inner is not None else value
            out.append(f"{flag}={shown}")
            redact_next = wrapped = inner is not None and not inner[1]
        else:
            out.append(arg)
    return out


def secret_values(argv: Sequence[str]) -> list[str]:
    """The values :func:`redact_argv` hides (``X`` of ``--api-key X`` and ``--token=X``), so
    that they can also be scrubbed wherever else they appear (a server that echoes its
    arguments into its log, an error message quoting a command)."""
    values: list[str] = []
    for arg, shown in zip(argv, redact_argv(argv), strict=True):
        if arg != shown:
            value = arg[len(shown) - len(REDACTED):]
            if value and value not in values:
                values.append(value)
    return values


NOT_CODE = ("examples/", "docs/", "tests/", "zenodo/", "README.md", "CHANGELOG.md")
"""Tracked paths a run does not execute or read: a tree modified only there (``dirty_code``
false) runs the commit's code."""


def modifies_code(porcelain: str) -> bool:
    """Whether ``git status --porcelain`` lines name a tracked file outside :data:`NOT_CODE`
    (a rename counts both its paths)."""
    paths = [p for line in porcelain.splitlines() if len(line) > 3
             for p in line[3:].split(" -> ")]
    return any(not p.strip('"').startswith(NOT_CODE) for p in paths)


def tree_sha256(roots: Sequence[tuple[str, Path]], skip: Sequence[str] = ()) -> str:
    """sha256 over every file under each ``(name, folder)`` of ``roots``: its path as
    ``name/relative/path`` and its bytes, in sorted order, so the same files hash the same
    wherever they lie. ``__pycache__`` folders, ``.pyc`` files and the top-level entries
    named in ``skip`` are left out."""
    files: list[tuple[str, Path]] = []
    for name, folder in roots:
        for path in folder.rglob("*"):
            rel = path.relative_to(folder)
            if (not path.is_file() or "__pycache__" in rel.parts or path.suffix == ".pyc"
                    or rel.parts[0] in skip):
                continue
            files.append((f"{name}/{rel.as_posix()}", path))
    h = hashlib.sha256()
    for rel_name, path in sorted(files):
        data = path.read_bytes()
        h.update(f"{rel_name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


@functools.cache
def code_sha256() -> str:
    """:func:`tree_sha256` of the harness as it runs: the ``crossbench`` package (without the
    ``_data`` copy a wheel carries) and the engine profiles (``engines/``). It names the code
    that ran where git cannot: a copy of a checkout whose ``.git`` is not the tree's (a
    device call's copy kept the session's first commit while its files were a later one's).
    Computed once per process."""
    from crossbench.paths import engines_dir

    package = Path(__file__).resolve().parents[1]
    return tree_sha256([("crossbench", package), ("engines", engines_dir())], skip=("_data",))


def crossbench_identity() -> dict[str, Any]:
    """crossbench's version, the sha256 of its code (:func:`code_sha256`), and the git
    commit (whether the tree is modified, and whether the modification touches code:
    ``dirty_code``) when the package runs from a git checkout; ``commit`` is None
    otherwise."""
    root = repo_root()
    out: dict[str, Any] = {"version": __version__, "code_sha256": code_sha256(),
                           "commit": None, "dirty": None}
    if not (root / ".git").exists():
        return out
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=False)
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                 "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return out
    if head.returncode == 0:
        out["commit"] = head.stdout.strip()
        out["dirty"] = bool(status.stdout.strip()) if status.returncode == 0 else None
        if status.returncode == 0:
            out["dirty_code"] = modifies_code(status.stdout)
    return out


#: the GGUF metadata keys provenance records
GGUF_KEYS = ("general.architecture", "general.name", "general.size_label", "general.file_type",
             "general.parameter_count", "tokenizer.chat_template")


def _scan_gguf(path: Path, keys: Sequence[str]) -> tuple[dict[str, Any], int]:
    """The wanted metadata values and the parameter count (sum over tensor shapes) of a
    little-endian GGUF, read from a memory map by :func:`crossbench.fixtures.vocab.read_header`
    (``gguf.GGUFReader`` decodes every field, which takes seconds on a real tokenizer)."""
    from crossbench.fixtures.vocab import read_header

    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        cur, n_tensors, entries = read_header(mm)
        values = {e.key: e.value for e in entries if e.key in keys and e.sub_type is None}
        params = 0
        for _ in range(n_tensors):
            cur.string()
            params += math.prod(cur.u64() for _ in range(cur.u32()))
            cur.u32()  # tensor type
            cur.u64()  # data offset
    if any(isinstance(v, bytes) for v in values.values()):
        raise ValueError("a metadata string is not valid UTF-8")
    return values, params


def _read_gguf_with_reader(path: Path, keys: Sequence[str]) -> tuple[dict[str, Any], int]:
    """The same facts through ``gguf.GGUFReader`` (slow; any byte order)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    values = {k: reader.fields[k].contents() for k in keys if k in reader.fields}
    return values, sum(int(t.n_elements) for t in reader.tensors)


def gguf_facts(path: Path) -> dict[str, Any]:
    """From a GGUF's metadata: architecture, file type and its quantization name, parameter
    count (metadata, else the sum over tensors), name, size label and the sha256 of the chat
    template string. A file that cannot be read gives ``{"error": ...}``."""
    from gguf import LlamaFileType

    try:
        try:
            values, tensor_params = _scan_gguf(path, GGUF_KEYS)
        except (ValueError, OSError, struct.error):
            values, tensor_params = _read_gguf_with_reader(path, GGUF_KEYS)
    except Exception as e:
        return {"error": f"not a readable GGUF ({e})"}
    file_type = values.get("general.file_type")
    quant = None
    if file_type is not None:
        try:
            quant = LlamaFileType(int(file_type)).name.removeprefix("MOSTLY_")
        except ValueError:
            quant = f"unknown ({file_type})"
    params = values.get("general.parameter_count")
    template = values.get("tokenizer.chat_template")
    return {
        "architecture": values.get("general.architecture"),
        "name": values.get("general.name"),
        "size_label": values.get("general.size_label"),
        "file_type": None if file_type is None else int(file_type),
        "quantization": quant,
        "parameter_count": int(params) if params is not None else tensor_params,
        "parameter_count_source": "metadata" if params is not None else "tensors",
        "chat_template_sha256": None if template is None
        else hashlib.sha256(str(template).encode()).hexdigest(),
    }


_FACTS: dict[tuple[str, int, int, str | None], dict[str, Any]] = {}


def model_facts(path: Path | str, ref: str | None = None) -> dict[str, Any]:
    """A model file's path, size and sha256 (plus its reference and Hugging Face snapshot
    commit) and, for GGUF files, :func:`gguf_facts`; a repository reference or directory is
    recorded as given. Remembered per process by path, size and mtime (every trial of a
    study records the same files)."""
    p = Path(path)
    if not p.is_file():
        out: dict[str, Any] = {"path": str(p), "exists": p.exists()}
        if ref is not None:
            out["ref"] = ref
        return out
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns, ref)
    if key not in _FACTS:
        from crossbench.models import file_record

        out = dict(file_record(p, ref))
        with p.open("rb") as fh:
            is_gguf = fh.read(4) == b"GGUF"
        if is_gguf:
            out["gguf"] = gguf_facts(p)
        _FACTS[key] = out
    return dict(_FACTS[key])


def boot_id() -> str | None:
    """This boot's random id (``/proc/sys/kernel/random/boot_id``): two trials with the same
    id ran on one machine without a reboot between them; it names no host."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def host_facts() -> dict[str, Any]:
    """CPU model and count, RAM, platform, OS release, machine, Python version and boot id."""
    kib = (proc_field(Path("/proc/meminfo"), "MemTotal:") or "").split()  # "131072 kB"
    ram = int(kib[0]) * 1024 if kib and kib[0].isdigit() else None
    os_name = None
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        os_name = None
    return {"cpu": cpu_model(), "cpus": os.cpu_count(), "ram_bytes": ram,
            "platform": platform.platform(), "os": os_name or platform.system(),
            "machine": platform.machine(), "python": sys.version.split()[0],
            "boot_id": boot_id()}


def gpu_facts(nvml: NvmlProvider | None = None) -> dict[str, Any]:
    """Driver, CUDA driver version and :meth:`Nvml.device_facts` of each visible GPU
    (``CUDA_VISIBLE_DEVICES``); ``{"available": False, "reason": ...}`` without a GPU."""
    try:
        nv = Nvml.open(nvml)
    except NvmlUnavailable as e:
        return {"available": False, "reason": e.reason, "count": 0, "gpus": []}
    with nv:
        visible = nv.indices()
        return {"available": True, "reason": None, **nv.system_facts(), "count": len(visible),
                "gpus": [nv.device_facts(i) for i in visible]}


def collect(engine: EngineIdentity | Mapping[str, Any], argv: Sequence[str],
            models: Mapping[str, Path | str] | None = None,
            model_refs: Mapping[str, str] | None = None,
            environ: Mapping[str, str] | None = None,
            nvml: NvmlProvider | None = None,
            placement: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The provenance record of one trial (JSON-ready, secrets removed).

    ``engine`` is the adapter's :class:`~crossbench.engines.base.EngineIdentity` (or its dict);
    ``argv`` the exact server command; ``models`` maps a role (``model``, ``draft``) to a file
    path or repository reference, ``model_refs`` the same roles to how the user named them.
    ``placement``: where a scheduler put the trial (``crossbench matrix --executor ray``: the
    Ray node id, the GPU ids it assigned), recorded under ``placement`` when given.
    """
    env = os.environ if environ is None else environ
    refs = model_refs or {}
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": PROVENANCE_KIND,
        "collected_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "crossbench": crossbench_identity(),
        "engine": asdict(engine) if isinstance(engine, EngineIdentity) else dict(engine),
        "argv": redact_argv(argv),
        "env": engine_environment(env),
        "models": {role: model_facts(p, refs.get(role)) for role, p in (models or {}).items()},
        "host": host_facts(),
        "gpu": gpu_facts(nvml),
        **({"placement": dict(placement)} if placement is not None else {}),
    }
    secrets = [v for k, v in env.items() if is_secret(k) and len(v) >= MIN_SCRUB_LEN]
    scrubbed: dict[str, Any] = scrub(record, secrets)
    return scrubbed


def scrub(obj: Any, secrets: Sequence[str]) -> Any:
    """A copy of a JSON-like object with every occurrence of each secret string replaced."""
    if isinstance(obj, str):
        for s in secrets:
            obj = obj.replace(s, REDACTED)
        return obj
    if isinstance(obj, Mapping):
        return {scrub(k, secrets): scrub(v, secrets) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [scrub(v, secrets) for v in obj]
    return obj
