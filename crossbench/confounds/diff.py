"""Compare two normalized views field by field and classify every difference.

``intended`` (on the comparison's axis, glob patterns: :data:`AXES`), ``benign`` (cannot
change speed: :data:`BENIGN`, and paths of identical files: :data:`SAME_FILE`) or
``confounding`` (:data:`CONFOUNDING`; a field this module does not know is confounding too,
with a note saying so: nothing slips by unclassified). The classes: docs/confounds.md, "Diff
and classes".

Example::

    d = diff(normalize_run_dir(spec_dir), normalize_run_dir(base_dir), AXES["spec"])
    if d.confounded:
        print(d.render(("spec", "baseline")))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any

from crossbench.engines.confound_rule import Scalar


class Kind(StrEnum):
    """The class of a difference."""

    INTENDED = "intended"
    CONFOUNDING = "confounding"
    BENIGN = "benign"


#: intended fields of the usual comparisons (glob patterns over normalized field names)
AXES: dict[str, tuple[str, ...]] = {
    # a speculative cell vs its baseline: the speculative settings and the draft model, and
    # what the engine derives from them at start-up (vLLM's speculative_config line; SGLang's
    # speculative_* server info is normalized to server_props.startup.speculative.*; the
    # draft's memory shrinks the KV cache: vLLM's kv_cache_*, SGLang's KV pool
    # max_total_num_tokens; vLLM sizes graphs and its token budget by the speculative
    # settings). Any other cause of those start-up facts (gpu_memory_utilization,
    # mem_fraction_static, max_num_batched_tokens...) is compared in its own field.
    "spec": ("spec.*", "draft.*", "server_props.*.speculative.*",
             "engine.startup.speculative_config", "engine.startup.kv_cache_*",
             "engine.startup.max_total_num_tokens",
             "engine.startup.max_concurrency", "engine.startup.max_num_scheduled_tokens",
             "engine.startup.cudagraph_capture_sizes", "engine.startup.graph_capture_gib"),
    # the same configuration on two engine builds or engines (a multi-variable comparison)
    "engine": ("engine.*", "server.pin", "server.variant", "server.binary", "server_props.*"),
    # two runs of the same configuration (today vs last month): nothing is intended
    "none": (),
}

#: path-like fields that are benign when the files they name are identical: the field whose
#: equal value on both sides proves it (a glob: every match must be equal, and one exist)
SAME_FILE: dict[str, str] = {
    "model.path": "model.sha256",
    "model.ref": "model.sha256",
    "model.hf_commit": "model.sha256",
    "server_props.model_path": "model.sha256",
    "draft.path": "draft.sha256",
    "draft.ref": "draft.sha256",
    "draft.hf_commit": "draft.sha256",
    "spec.draft_model": "draft.sha256",
    "engine.binary": "engine.sha256.*",
    "server.binary": "engine.sha256.*",
}

_DERIVED = "derived from the configuration, whose fields are compared one by one"
BENIGN: tuple[tuple[str, str], ...] = (
    ("*_utc", "timestamp"),
    ("*timestamp*", "timestamp"),
    ("trial.index", "trial number"),
    ("*.port", "port"),
    ("server.host", "bind address"),
    ("*.pid", "process id"),
    ("*log_path", "log path"),
    ("*.schema_version", "record format version"),
    ("engine.argv", _DERIVED),
    ("engine.startup.lines.*", "the log line a start-up fact came from (time, pid); the fact "
     "itself is compared"),
    ("engine.startup.compile_s", "a start-up duration (short when the compile cache hits), "
     "not a setting"),
    # every start-up fact in seconds (graph_capture_s, engine_init_s, profile_run_s, ...)
    ("engine.startup.*_s", "a start-up duration, not a setting"),
    ("engine.startup.compile_cache", "whether torch.compile's cache held the configuration: "
     "changes the start-up time, not the compiled code"),
    ("engine.startup.compile_cache_modules.*", "the compile cache per module: changes the "
     "start-up time, not the compiled code"),
    ("server.compile_cache", "where torch.compile's artifacts come from (vLLM keys them by "
     "the whole configuration): changes the start-up time, not the compiled code"),
    ("server_props.startup_cut.*", "a start-up record (durations, cold or warm, cache folder); "
     "its settings are compared as server.cudagraph_sizes, server.engine_process, "
     "server.kv_cache_memory_bytes, server.max_num_seqs and spec.n"),
    ("crossbench.argv", _DERIVED),
    ("*timeout_s", "a time limit, not a speed setting"),
    ("run.trials", "number of trials: changes precision, not speed"),
    ("gpus.*.pcie_link_gen_current", "follows the GPU's power state at the moment it was "
     "read (idle GPUs drop to a lower generation); the maximum is compared"),
    ("server.slot_save_path", "where llama-server would save slots: set under server reuse "
     "so that slots can be erased; nothing is saved"),
    ("env.HF_HOME", "cache location; model files are compared by sha256"),
    ("env.HF_HUB_CACHE", "cache location; model files are compared by sha256"),
    ("env.HF_HUB_OFFLINE", "download policy; model files are compared by sha256"),
    ("env.HF_TOKEN", "credential (redacted)"),
)

CONFOUNDING: tuple[tuple[str, str], ...] = (
    ("engine.kind", "engine"),
    ("engine.version", "engine build"),
    ("engine.build_number", "engine build"),
    ("engine.commit", "engine build"),
    ("engine.sha256.*", "engine binary or shared library"),
    ("engine.startup.*", "what the engine set up at start (model runner, kernels, KV cache)"),
    ("engine.*", "engine identity"),
    ("server.pin", "engine build"),
    ("server.variant", "engine build variant"),
    ("server.tensor_parallel_size", "GPUs per model (tensor parallel size)"),
    ("server.pipeline_parallel_size", "pipeline parallel size"),
    ("server.data_parallel_size", "data parallel size"),
    ("server.gpu_memory_utilization", "memory for weights and KV cache"),
    ("server.max_num_seqs", "most sequences scheduled together"),
    ("server.max_num_batched_tokens", "token budget per scheduler step"),
    ("server.*prefix_caching*", "prefix caching"),
    ("server.*chunked_prefill*", "chunked prefill"),
    ("server.enforce_eager", "CUDA graphs (enforce_eager)"),
    ("server.async_scheduling", "scheduler (async scheduling)"),
    ("server.*cuda_graph*", "CUDA graphs"),
    ("server.cudagraph_sizes", "CUDA graphs captured (cudagraph_sizes: mixed prefill steps "
     "above the decode sizes run without a graph under decode)"),
    ("server.compilation_config*", "compilation and CUDA graphs"),
    ("server.engine_process", "how vLLM's engine core starts (spawn or fork)"),
    ("server.kv_cache_memory_bytes", "KV cache size (given, not profiled)"),
    ("server.kv_cache_dtype", "KV cache type"),
    ("server.cache_type_*", "KV cache type"),
    ("server.ctx_size", "context size"),
    ("server.max_model_len", "context size"),
    ("server.parallel", "parallel slots"),
    ("server.flash_attn", "flash attention"),
    ("server.n_gpu_layers", "layers offloaded to the GPU"),
    ("server.threads*", "CPU threads"),
    ("server.quantization", "quantization"),
    ("server.dtype", "weight precision"),
    ("server.extra_args", "raw engine flags"),
    ("server.*", "engine setting"),
    ("spec.*", "speculative setting"),
    ("model.gguf.quantization", "quantization"),
    ("model.gguf.file_type", "quantization"),
    ("model.*", "model file"),
    ("draft.*", "draft model file"),
    ("load.temperature", "sampling temperature"),
    ("load.top_p", "sampling (top_p)"),
    ("load.seed", "sampling seed"),
    ("load.max_tokens", "output length"),
    ("load.ignore_eos", "output length (ignore_eos)"),
    ("load.thinking", "thinking mode"),
    ("load.workload", "prompt set"),
    ("load.endpoint", "endpoint (chat template applied or not)"),
    ("load.cache_prompt", "prompt cache reuse"),
    ("load.*", "load shape"),
    ("workload.*", "prompt set digest"),
    ("run.fresh_server", "server reuse between trials"),
    ("trial.other_engines_running", "other inference processes ran beside the trial"),
    ("crossbench.*", "harness version"),
    ("gpu.count", "GPU count"),
    ("gpu.*", "GPU driver or availability"),
    ("gpus.*.power_limit_w", "power limit"),
    ("gpus.*.enforced_power_limit_w", "power limit"),
    ("gpus.*clock*", "clocks"),
    ("gpus.*", "GPU"),
    ("host.*", "host"),
    ("env.*", "engine environment variable"),
    ("server_props.*", "setting reported by the server"),
)

UNKNOWN_NOTE = ("unclassified field: treated as confounding until crossbench.confounds.diff "
                "classifies it")


@dataclass(frozen=True)
class Difference:
    """One field that differs: its values on each side (None: unset) and its class."""

    field: str
    a: Scalar | None
    b: Scalar | None
    kind: Kind
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view."""
        return {"field": self.field, "a": self.a, "b": self.b, "kind": str(self.kind),
                "reason": self.reason}


@dataclass(frozen=True)
class ConfigDiff:
    """Every difference between two views, classified."""

    differences: tuple[Difference, ...]
    intended_axis: tuple[str, ...]

    def of(self, kind: Kind) -> list[Difference]:
        """The differences of one class."""
        return [d for d in self.differences if d.kind == kind]

    @property
    def confounding(self) -> list[Difference]:
        """Differences that can change speed besides the intended variable."""
        return self.of(Kind.CONFOUNDING)

    @property
    def intended(self) -> list[Difference]:
        """Differences on the comparison's axis."""
        return self.of(Kind.INTENDED)

    @property
    def benign(self) -> list[Difference]:
        """Differences that cannot change speed."""
        return self.of(Kind.BENIGN)

    @property
    def confounded(self) -> bool:
        """Whether anything besides the intended variable can explain a speed difference."""
        return bool(self.confounding)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view: the axis, counts per class and every difference."""
        return {"intended_axis": list(self.intended_axis), "confounded": self.confounded,
                "counts": {str(k): len(self.of(k)) for k in Kind},
                "differences": [d.to_dict() for d in self.differences]}

    def render(self, labels: tuple[str, str] = ("A", "B"), benign: bool = False) -> str:
        """Human-readable lines, confounding first (benign ones only when asked)."""
        order = [Kind.CONFOUNDING, Kind.INTENDED] + ([Kind.BENIGN] if benign else [])
        lines = [f"{len(self.confounding)} confounding, {len(self.intended)} intended, "
                 f"{len(self.benign)} benign differences ({labels[0]} -> {labels[1]})"]
        for kind in order:
            for d in self.of(kind):
                lines.append(f"  {kind:<11} {d.field}: {_show(d.a)} -> {_show(d.b)}  "
                             f"({d.reason})")
        return "\n".join(lines)


def _show(v: Scalar | None) -> str:
    if v is None:
        return "(unset)"
    text = repr(v) if isinstance(v, str) else str(v)
    text = text.replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def _same_files(proof: str, a: Mapping[str, Scalar], b: Mapping[str, Scalar]) -> bool:
    keys_a = {k for k in a if fnmatchcase(k, proof)}
    keys_b = {k for k in b if fnmatchcase(k, proof)}
    return bool(keys_a) and keys_a == keys_b and all(a[k] == b[k] for k in keys_a)


def classify(field: str, a: Mapping[str, Scalar], b: Mapping[str, Scalar],
             intended: Iterable[str] = ()) -> tuple[Kind, str]:
    """The class of a differing field, and why: the axis first, then paths of identical files,
    then the first matching pattern of :data:`BENIGN`, then of :data:`CONFOUNDING`."""
    if any(fnmatchcase(field, p) for p in intended):
        return Kind.INTENDED, "the comparison's axis"
    if field == "crossbench.dirty" and a.get("crossbench.dirty_code") is False \
            and b.get("crossbench.dirty_code") is False:
        return Kind.BENIGN, ("the trees differ outside the harness's code only (examples, "
                             "docs, tests: crossbench.dirty_code false on both sides)")
    if field in ("crossbench.commit", "crossbench.dirty", "crossbench.dirty_code") \
            and a.get("crossbench.code_sha256") is not None \
            and a.get("crossbench.code_sha256") == b.get("crossbench.code_sha256"):
        return Kind.BENIGN, ("the same harness code ran on both sides (crossbench.code_sha256 "
                             "equal): the commits or git states differ, not the code")
    proof = SAME_FILE.get(field)
    if proof is not None:
        if _same_files(proof, a, b):
            return Kind.BENIGN, f"path of identical files ({proof} equal)"
        return Kind.CONFOUNDING, f"different files ({proof} differs or is unknown)"
    for kind, table in ((Kind.BENIGN, BENIGN), (Kind.CONFOUNDING, CONFOUNDING)):
        for pattern, reason in table:
            if fnmatchcase(field, pattern):
                return kind, reason
    return Kind.CONFOUNDING, UNKNOWN_NOTE


def diff(a: Mapping[str, Scalar], b: Mapping[str, Scalar],
         intended: Iterable[str] = ()) -> ConfigDiff:
    """Every field whose value differs between views ``a`` and ``b`` (a field set on one side
    only counts), classified; ``intended`` holds glob patterns of the comparison's axis."""
    axis = tuple(intended)
    out = []
    for field in sorted(set(a) | set(b)):
        va, vb = a.get(field), b.get(field)
        if (va == vb and type(va) is type(vb)) or _equal_numbers(va, vb):
            continue
        kind, reason = classify(field, a, b, axis)
        out.append(Difference(field, va, vb, kind, reason))
    return ConfigDiff(tuple(out), axis)


def _equal_numbers(x: Scalar | None, y: Scalar | None) -> bool:
    """1 and 1.0 are equal; True and 1 are not (a flag is not a count)."""
    numeric = (int, float)
    return (isinstance(x, numeric) and isinstance(y, numeric)
            and not isinstance(x, bool) and not isinstance(y, bool) and x == y)
