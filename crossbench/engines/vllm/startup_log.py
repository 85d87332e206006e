"""Facts read from a ``vllm serve`` startup log, and the lines that carry them.

Each fact comes from one message whose format string the profile records from the wheel's
sources (``log_formats`` in ``engines/vllm/X.Y.Z.yaml``); docs/vllm.md "Startup facts" lists
every fact beside its 0.33.0 message. ``torch_compile_s`` and ``profile_run_s`` are summed
over their lines (one per compiled module: backbone, draft_model); ``compile_cache`` is
``hit``, ``miss`` or ``partial`` over the modules of ``compile_cache_modules``.

Every line of vLLM's log starts ``(PROCESS pid=N) LEVEL MM-DD HH:MM:SS [file.py:line]``; the
regular expressions below search whole lines, so the prefix does not matter. The lines
themselves are rendered for the tests by ``tests/standins/vllm_formats.py``.
:func:`log_marks` times a start's phase lines from those stamps, :func:`spawn_forced` reads
vLLM's override of ``engine_process: fork``.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import asdict, dataclass, field
from typing import Any

_VERSION = re.compile(r"vLLM (?:API )?server version (\S+?)(?:, serving model (\S+))?\s*$")
_LOGO_VERSION = re.compile(r"█\s+version\s+(\S+)\s*$")
_LOGO_MODEL = re.compile(r"█\s+model\s+(\S+)\s*$")
_ENGINE = re.compile(r"LLM engine \(v(\S+)\) with config: (.*)$")
_CAPTURE = re.compile(r"'cudagraph_capture_sizes': \[([\d,\s]*)\]")
_SPEC = re.compile(r"speculative_config=(None|SpeculativeConfig\(.*?\)), ")
_RUNNER_V2 = re.compile(r"Using V2 Model Runner")
_RUNNER_FALLBACK = re.compile(r"(Model Runner V2 (?:does not yet support .*?|requires Triton); "
                              r"using the V1 model runner instead\.)")
_KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens(?:, Maximum concurrency for [\d,]+ "
                        r"tokens per request: ([\d.]+)x)?")
_KV_GIB = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
_ATTN = re.compile(r"Using (\S+) attention backend out of potential backends: \[(.*?)\]")
_ATTN_CHOSEN = re.compile(r"\] Using (\S+) backend\.\s*$|^Using (\S+) backend\.\s*$")
_ATTN_V010 = re.compile(r"Using (.+?) backend on V1 engine\.")
_SCHED = re.compile(r"max_num_scheduled_tokens is set to (\d+) based on the speculative "
                    r"decoding settings")
_GRAPHS = re.compile(r"Graph capturing finished in (\d+) secs, took ([\d.]+) GiB")
_ASYNC = re.compile(r"Asynchronous scheduling is (enabled|disabled)\.")
_ASYNC_OFF = re.compile(r"Async scheduling (?:is disabled|not supported|will be disabled)")
_CACHE_DIR = re.compile(r"Using cache directory: (\S+) for vLLM's torch\.compile")
_CACHE_HIT = re.compile(r"Directly load the compiled graph\(s\) for .* from the cache")
_CACHE_MISS = re.compile(r"Compiling a graph for .* takes [\d.]+ s")
_TORCH_COMPILE = re.compile(r"torch\.compile took ([\d.]+) s in total")
_PROFILE_RUN = re.compile(r"Initial profiling/warmup run took ([\d.]+) s")
_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"
                   r"(?: \(compilation: ([\d.]+) s)?")


@dataclass
class StartupFacts:
    """What the startup log says about the engine actually running (None: not logged)."""

    version: str | None = None
    model: str | None = None
    model_runner: str | None = None
    model_runner_fallback: str | None = None
    kv_cache_tokens: int | None = None
    kv_cache_gib: float | None = None
    max_concurrency: float | None = None
    cudagraph_capture_sizes: list[int] | None = None
    attention_backend: str | None = None
    attention_backends_valid: list[str] | None = None
    max_num_scheduled_tokens: int | None = None
    graph_capture_s: float | None = None
    graph_capture_gib: float | None = None
    speculative_config: str | None = None
    async_scheduling: str | None = None
    engine_init_s: float | None = None
    compile_s: float | None = None
    torch_compile_s: float | None = None
    profile_run_s: float | None = None
    compile_cache: str | None = None
    compile_cache_modules: dict[str, str] = field(default_factory=dict)
    lines: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view (``lines`` keeps the log line each fact came from)."""
        return asdict(self)


def cache_dir_of(line: str | None) -> str | None:
    """The folder a ``Using cache directory: %s for vLLM's torch.compile`` line names."""
    m = _CACHE_DIR.search(line or "")
    return m.group(1) if m else None


def parse(text: str) -> StartupFacts:
    """Facts of one start-up (pass the log from the start of this server's output)."""
    f = StartupFacts()
    module: list[str] = ["model"]  # the module the last "Using cache directory" named
    for line in text.splitlines():
        _parse_line(f, line.rstrip(), module)
    if f.compile_cache_modules:
        seen = set(f.compile_cache_modules.values())
        f.compile_cache = seen.pop() if len(seen) == 1 else "partial"
    return f


def _parse_line(f: StartupFacts, line: str, module: list[str]) -> None:
    if m := _CACHE_DIR.search(line):
        module[0] = m.group(1).rstrip("/").rsplit("/", 1)[-1]
        f.lines["compile_cache_dir"] = line
    elif _CACHE_HIT.search(line):
        f.compile_cache_modules.setdefault(module[0], "hit")
    elif _CACHE_MISS.search(line):
        f.compile_cache_modules[module[0]] = "miss"  # one miss of a module's ranges: a miss
    elif m := _VERSION.search(line):
        f.version, f.lines["version"] = m.group(1), line
        f.model = m.group(2) or f.model
    elif m := _LOGO_VERSION.search(line):
        f.version, f.lines["version"] = m.group(1), line
    elif m := _LOGO_MODEL.search(line):
        f.model = m.group(1)
    elif m := _ENGINE.search(line):
        f.version = f.version or m.group(1)
        f.lines["engine_config"] = line
        if c := _CAPTURE.search(m.group(2)):
            f.cudagraph_capture_sizes = [int(x) for x in c.group(1).split(",") if x.strip()]
        if s := _SPEC.search(m.group(2)):
            f.speculative_config = None if s.group(1) == "None" else s.group(1)
    elif _RUNNER_V2.search(line):
        f.model_runner, f.lines["model_runner"] = "V2", line
    elif m := _RUNNER_FALLBACK.search(line):
        f.model_runner, f.model_runner_fallback = "V1", m.group(1)
        f.lines["model_runner"] = line
    elif m := _KV_TOKENS.search(line):
        f.kv_cache_tokens = int(m.group(1).replace(",", ""))
        f.max_concurrency = float(m.group(2)) if m.group(2) else None
        f.lines["kv_cache_tokens"] = line
    elif m := _KV_GIB.search(line):
        f.kv_cache_gib, f.lines["kv_cache_gib"] = float(m.group(1)), line
    elif m := _ATTN.search(line):
        f.attention_backend, f.lines["attention_backend"] = m.group(1), line
        f.attention_backends_valid = [x.strip(" '\"") for x in m.group(2).split(",") if x]
    elif m := _ATTN_V010.search(line):
        f.attention_backend, f.lines["attention_backend"] = m.group(1), line
    elif (m := _ATTN_CHOSEN.search(line)) and f.attention_backend is None:
        f.attention_backend, f.lines["attention_backend"] = m.group(1) or m.group(2), line
    elif m := _SCHED.search(line):
        f.max_num_scheduled_tokens, f.lines["max_num_scheduled_tokens"] = int(m.group(1)), line
    elif m := _GRAPHS.search(line):
        f.graph_capture_s, f.graph_capture_gib = float(m.group(1)), float(m.group(2))
        f.lines["graph_capture"] = line
    elif m := _ASYNC.search(line):
        f.async_scheduling, f.lines["async_scheduling"] = m.group(1), line
    elif _ASYNC_OFF.search(line):  # the reason; 0.33 logs only this, never "enabled"
        f.async_scheduling, f.lines["async_scheduling_reason"] = "disabled", line
    elif m := _TORCH_COMPILE.search(line):
        # one line per compiled module (backbone, draft_model): the sum is the compilation
        f.torch_compile_s = round((f.torch_compile_s or 0.0) + float(m.group(1)), 3)
        f.lines["torch_compile"] = line
    elif m := _PROFILE_RUN.search(line):  # one line per module, like torch.compile's
        f.profile_run_s = round((f.profile_run_s or 0.0) + float(m.group(1)), 3)
        f.lines["profile_run"] = line
    elif m := _INIT.search(line):
        f.engine_init_s = float(m.group(1))
        f.compile_s = float(m.group(2)) if m.group(2) else None
        f.lines["engine_init"] = line


#: what vLLM 0.26.0 logs when it overrides fork (``_maybe_force_spawn``: CUDA initialized...)
_FORCED = re.compile(r"We must use the `spawn` multiprocessing start method\..*?Reasons: (.*)$")
#: "MM-DD HH:MM:SS [" of vLLM's log prefix (local time, whole seconds)
_STAMP = re.compile(r"\b(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) \[")
#: the phase lines of a vLLM 0.26.0 start (name, message, last occurrence or first)
_MARKS = (
    # the last model class resolved (the drafter's after the target's): where vLLM has no
    # info of a class in VLLM_CACHE_ROOT/modelinfos it inspects it in a subprocess first
    ("resolved", re.compile(r"Resolved architecture: "), True),  # model.py:623
    ("engine_core", re.compile(r"Initializing a V1 LLM engine"), False),  # core.py:116
    ("model_load", re.compile(r"Starting to load model"), False),  # gpu_model_runner.py:5250
    ("weights_loaded", re.compile(r"Model loading took"), False),  # gpu_model_runner.py:5347
    ("compiled", _TORCH_COMPILE, True),  # monitor.py:53
    ("kv_cache", _KV_TOKENS, False),  # kv_cache_utils.py:2177
    ("init_done", _INIT, False),  # core.py:340
    ("api_start", re.compile(r"Starting vLLM (?:API )?server on"), False),  # api_server.py:677
)


def spawn_forced(text: str) -> str | None:
    """vLLM's reasons when it started the engine core with ``spawn`` although the
    environment asked for ``fork`` (None when it did not say so)."""
    for line in text.splitlines():
        if m := _FORCED.search(line):
            return m.group(1).strip()
    return None


def log_marks(text: str, spawn_wall: float, ready_s: float) -> dict[str, float]:
    """Seconds from the spawn (``spawn_wall``, a ``time.time()``) to the first stamped line
    (``first_line``) and to each phase line of :data:`_MARKS`, from the log's local-time
    stamps: whole seconds, so a mark is up to 1 s early. Empty when no line is stamped or a
    mark falls outside the start (-1 s to ``ready_s`` + 1 s: the log's clock or time zone is
    not crossbench's).

    Round 4's warm start on the H200 (spawned 20:12:09.4, ready 72.8 s later) gives
    ``{'first_line': 18.6, 'engine_core': 43.6, ..., 'api_start': 71.6}``.
    """
    spawn = dt.datetime.fromtimestamp(spawn_wall)
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _STAMP.search(line)
        if m is None:
            continue
        month, day, hour, minute, second = map(int, m.groups())
        try:
            at = spawn.replace(month=month, day=day, hour=hour, minute=minute, second=second,
                               microsecond=0)
        except ValueError:
            continue
        if (at - spawn).days < -180:  # stamped in January, spawned in December
            at = at.replace(year=at.year + 1)
        s = round((at - spawn).total_seconds(), 1) + 0.0  # + 0.0: no -0.0
        out.setdefault("first_line", s)
        for name, pattern, last in _MARKS:
            if (last or name not in out) and pattern.search(line):
                out[name] = s
    if any(not -1.0 <= s <= ready_s + 1.0 for s in out.values()):
        return {}
    return out
