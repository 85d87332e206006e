"""Workloads: which prompts a run sends, named by a spec string and pinned by a digest.

Specs: ``builtin:mixed``, ``builtin:<category>``, ``builtin:repeat`` (prompts asked again, so
n-gram drafting has text to draft from), ``random:<N>`` (N seeded token ids) and
``file:<path.jsonl>`` (your prompts, in the shipped format). ``digest`` is the sha256 of the
canonical bytes the prompts came from, so a record says exactly what was sent. Each form, the
format and what the digest covers: docs/matrix.md "Workloads".
"""

from __future__ import annotations

import hashlib
import itertools
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from crossbench.errors import UserError
from crossbench.textfile import read_bytes

CATEGORIES = ("code", "math", "creative", "factual", "analysis", "howto")
"""Categories of the built-in prompt set, in their round-robin order."""

RANDOM_TOKEN_LOW = 1000
"""Lowest token id ``random:`` draws: ids below it are often special or control tokens."""

RANDOM_TOKEN_HIGH_CAP = 150_000
"""Ids are drawn below ``min(vocab_size, RANDOM_TOKEN_HIGH_CAP)``: the tail of large
vocabularies holds added and special tokens."""

MAX_WORKLOAD_BYTES = 256 * 1024 * 1024
"""Largest workload file read (256 MiB): some 100,000 long prompts; a larger file, or a device
such as /dev/zero, is a wrong path, never a workload."""
DEFAULT_RANDOM_PROMPTS = 64
"""Distinct prompts ``random:`` generates when ``count`` is not given."""

VALID_SPECS = (
    "builtin:mixed",
    "builtin:<category> with category one of " + ", ".join(CATEGORIES),
    "builtin:repeat",
    "random:<N> (N tokens per prompt, needs the model's vocab_size)",
    "file:<path.jsonl>",
)


@dataclass(frozen=True)
class Prompt:
    """One prompt: exactly one of ``text`` and ``token_ids`` is set."""

    id: str
    category: str
    text: str | None
    token_ids: list[int] | None

    def __post_init__(self) -> None:
        if (self.text is None) == (self.token_ids is None):
            raise ValueError(f"prompt {self.id!r}: set exactly one of text and token_ids")


@dataclass(frozen=True)
class RequestSpec:
    """One request of a run: a prompt and the request's own index (prompts may repeat)."""

    prompt: Prompt
    request_index: int


@dataclass(frozen=True)
class Workload:
    """The prompts a spec resolved to, in send order, and the digest of their source."""

    spec: str
    prompts: list[Prompt]
    digest: str

    def requests(self, start_index: int = 0) -> list[RequestSpec]:
        """One :class:`RequestSpec` per prompt, indexed from ``start_index``."""
        return [RequestSpec(p, start_index + i) for i, p in enumerate(self.prompts)]


def _bad_spec(spec: str, why: str) -> UserError:
    return UserError(f"workload spec {spec!r}: {why}", hint="use one of: " + "; ".join(VALID_SPECS))


def _canonical(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _entries(data: bytes, source: str) -> list[tuple[str, Any]]:
    """(where, parsed object) of each prompt: a JSON array of objects (many published studies
    keep prompts so) or JSON lines; errors name the source and line or item."""
    if data.lstrip().startswith(b"["):
        try:
            items = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise UserError(f"{source}: not a JSON array ({exc})",
                            hint="a JSON array of prompt objects, or one object per line"
                            ) from exc
        if not isinstance(items, list):
            raise UserError(f"{source}: not a JSON array", hint="a JSON array of objects")
        return [(f"{source} item {i}", obj) for i, obj in enumerate(items)]
    out: list[tuple[str, Any]] = []
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{source} line {lineno}"
        try:
            out.append((where, orjson.loads(line)))
        except orjson.JSONDecodeError as exc:
            raise UserError(f"{where}: not JSON ({exc})",
                            hint="one JSON object per line, or a JSON array of objects"
                            ) from exc
    return out


def _parse_jsonl(data: bytes, source: str) -> list[Prompt]:
    """Prompts from JSONL or JSON-array bytes; errors name the source and line (or item)."""
    prompts: list[Prompt] = []
    seen: set[str] = set()
    for where, obj in _entries(data, source):
        if not isinstance(obj, dict):
            raise UserError(f"{where}: not a JSON object",
                            hint="each prompt is an object with id, category and prompt")
        pid, cat = obj.get("id"), obj.get("category")
        text, ids = obj.get("prompt"), obj.get("token_ids")
        if not isinstance(pid, str) or not pid or not isinstance(cat, str) or not cat:
            raise UserError(f"{where}: needs string fields 'id' and 'category'",
                            hint='write lines like {"id": "q-01", "category": "code", '
                            '"prompt": "..."}')
        if pid in seen:
            raise UserError(f"{where}: duplicate id {pid!r}", hint="give every prompt its own id")
        seen.add(pid)
        ok_text = isinstance(text, str) and text != "" and ids is None
        ok_ids = (text is None and isinstance(ids, list) and len(ids) > 0
                  and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids))
        if not (ok_text or ok_ids):
            raise UserError(f"{where}: prompt {pid!r} needs exactly one of a non-empty 'prompt' "
                            "string and a non-empty 'token_ids' list of non-negative integers",
                            hint="drop one of the two fields")
        prompts.append(Prompt(pid, cat, text if ok_text else None, ids if ok_ids else None))
    if not prompts:
        raise UserError(f"{source}: no prompts", hint="add at least one JSON line")
    return prompts


def _interleave(prompts: list[Prompt], order: tuple[str, ...]) -> list[Prompt]:
    """Round-robin by category in ``order`` (others after, in first-seen order)."""
    by_cat: dict[str, list[Prompt]] = {c: [] for c in order}
    for p in prompts:
        by_cat.setdefault(p.category, []).append(p)
    out: list[Prompt] = []
    for group in itertools.zip_longest(*by_cat.values()):
        out.extend(p for p in group if p is not None)
    return out


REPEAT = "repeat"
"""``builtin:repeat``: the shipped prompts of ``prompts/repeat.jsonl``, which a run cycles."""


def builtin_bytes(name: str = "builtin") -> bytes:
    """A shipped prompt file (``prompts/<name>.jsonl``: ``builtin``, or ``repeat``), byte for
    byte."""
    return resources.files("crossbench.load").joinpath(f"prompts/{name}.jsonl").read_bytes()


def _cycle(prompts: list[Prompt], count: int | None) -> list[Prompt]:
    if count is None:
        return prompts
    return [prompts[i % len(prompts)] for i in range(count)]


def _random_prompts(n_tokens: int, vocab_size: int, seed: int,
                    count: int) -> tuple[list[Prompt], str]:
    high = min(vocab_size, RANDOM_TOKEN_HIGH_CAP)
    rng = random.Random(seed)
    prompts = [Prompt(id=f"random-{i:05d}", category="random", text=None,
                      token_ids=[rng.randrange(RANDOM_TOKEN_LOW, high) for _ in range(n_tokens)])
               for i in range(count)]
    source = {
        "generator": "crossbench.random/1: random.Random(seed).randrange(low, high) per token",
        "n_tokens": n_tokens,
        "vocab_size": vocab_size,
        "low": RANDOM_TOKEN_LOW,
        "high": high,
        "seed": seed,
        "count": count,
        "prompts": [[p.id, p.token_ids] for p in prompts],
    }
    return prompts, _sha256(_canonical(source))


def load_workload(spec: str, *, vocab_size: int | None = None, seed: int = 0,
                  count: int | None = None) -> Workload:
    """Resolve a workload spec to its prompts, in send order.

    ``count`` cycles ``builtin:`` and ``file:`` prompts (ids repeat) to that many requests, and
    is the number of distinct prompts for ``random:``. ``seed`` only affects ``random:``.
    Raises :class:`UserError` naming the valid forms on a bad spec.
    """
    if count is not None and count < 1:
        raise UserError(f"workload count must be at least 1, got {count}", hint="drop it or use 1+")
    kind, sep, arg = spec.partition(":")
    if not sep or not arg:
        raise _bad_spec(spec, "not of the form kind:argument")
    if kind == "builtin" and arg == REPEAT:
        data = builtin_bytes(REPEAT)
        return Workload(spec, _cycle(_parse_jsonl(data, f"{REPEAT}.jsonl"), count),
                        _sha256(data))
    if kind == "builtin":
        data = builtin_bytes()
        prompts = _parse_jsonl(data, "builtin.jsonl")
        if arg == "mixed":
            return Workload(spec, _cycle(_interleave(prompts, CATEGORIES), count), _sha256(data))
        if arg not in CATEGORIES:
            raise _bad_spec(spec, f"unknown category {arg!r}")
        chosen = [p for p in prompts if p.category == arg]
        canon = _canonical([{"id": p.id, "category": p.category, "prompt": p.text} for p in chosen])
        return Workload(spec, _cycle(chosen, count), _sha256(canon))
    if kind == "random":
        try:
            n_tokens = int(arg)
        except ValueError:
            raise _bad_spec(spec, f"{arg!r} is not a whole number of tokens") from None
        if n_tokens < 1:
            raise _bad_spec(spec, "the number of tokens must be at least 1")
        if vocab_size is None:
            raise UserError(f"workload spec {spec!r} needs the model's vocabulary size",
                            hint="pass vocab_size (the engine reports it; for GGUF it is the "
                            "length of tokenizer.ggml.tokens)")
        if vocab_size <= RANDOM_TOKEN_LOW:
            raise UserError(f"vocab_size {vocab_size} leaves no ids in the safe range "
                            f"[{RANDOM_TOKEN_LOW}, {RANDOM_TOKEN_HIGH_CAP})",
                            hint="use a text workload (builtin:mixed) for this model")
        n_prompts = count if count is not None else DEFAULT_RANDOM_PROMPTS
        prompts, digest = _random_prompts(n_tokens, vocab_size, seed, n_prompts)
        return Workload(spec, prompts, digest)
    if kind == "file":
        path = Path(arg).expanduser()
        try:  # a regular file under the cap: /dev/zero, a FIFO or a directory is one line
            data = read_bytes(path, "workload file", MAX_WORKLOAD_BYTES,
                              "split it, or use fewer prompts (a workload is prompts)")
        except UserError as exc:
            if not exc.message.startswith("cannot read"):
                raise
            raise UserError(f"workload file {str(path)!r} cannot be read: "
                            f"{exc.message.rpartition(': ')[2]}",
                            hint="check the path after 'file:'") from None
        return Workload(spec, _cycle(_parse_jsonl(data, str(path)), count), _sha256(data))
    raise _bad_spec(spec, f"unknown kind {kind!r}")


def category_counts(prompts: list[Prompt]) -> dict[str, int]:
    """How many prompts of each category (for balance checks and reports)."""
    counts: dict[str, int] = {}
    for p in prompts:
        counts[p.category] = counts.get(p.category, 0) + 1
    return counts
