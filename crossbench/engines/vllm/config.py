"""Typed configuration of a ``vllm serve`` run (strict: unknown fields are errors).

The speculative method is the only thing a baseline and its speculative arm differ in: every
server setting lives on :class:`VllmServerConfig`, every speculative one on
:class:`VllmSpecConfig`, and only the latter reaches ``--speculative-config``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from crossbench.engines.affinity import CpuSettings
from crossbench.engines.auth import ApiKeySettings
from crossbench.engines.bind import host_warnings
from crossbench.engines.spec import HF_REPO, StrictModel, SynthRates
from crossbench.engines.vllm.profile import DEFAULT_VERSION, all_spec_fields

#: SpeculativeConfig fields crossbench sets from its own spec fields (name -> spec field)
RESERVED_SPEC_FIELDS = {
    "method": "type",
    "model": "draft_model",
    "num_speculative_tokens": "n",
    "synthetic_acceptance_rates": "synth_rates",
    "synthetic_acceptance_length": "synth_len",
}


@dataclass(frozen=True)
class ModelRef:
    """A model as vLLM takes it: a repository id or a local folder, and a revision."""

    name: str
    revision: str | None
    local: bool


def parse_model_ref(text: str, setting: str = "model") -> ModelRef:
    """Parse a local path, ``OWNER/REPO`` or ``hf://OWNER/REPO@REVISION``.

    Raises ValueError (the config turns it into a one-line error naming ``setting``).
    """
    if text.startswith("hf://"):
        repo, at, rev = text[len("hf://"):].partition("@")
        if not at or not rev:
            raise ValueError(f"{setting} {text!r} has no @REVISION; write "
                             "hf://OWNER/REPO@REVISION (a commit hash is best)")
        if "/" in rev:
            raise ValueError(f"{setting} {text!r} names a file; vLLM loads a whole repository, "
                             "so write hf://OWNER/REPO@REVISION without the file")
        if not HF_REPO.fullmatch(repo):
            raise ValueError(f"{setting} {text!r}: {repo!r} is not OWNER/REPO")
        return ModelRef(repo, rev, local=False)
    if text.startswith(("/", "./", "../", "~")) or Path(text).expanduser().exists():
        return ModelRef(str(Path(text).expanduser()), None, local=True)
    if HF_REPO.fullmatch(text):
        return ModelRef(text, None, local=False)
    return ModelRef(text, None, local=True)


class VllmSpecConfig(StrictModel):
    """Speculative decoding settings, written to ``--speculative-config`` as JSON.

    Fields of vLLM's SpeculativeConfig that crossbench does not type (``revision``,
    ``quantization``, ``suffix_decoding_max_tree_depth``, ``parallel_drafting``, ...) may be
    given at the top level by their vLLM names; they land in ``fields`` and are checked
    against the pinned release's profile.
    """

    type: str = Field("none", pattern=r"^[a-z0-9_]+$",
                      description="`method` of --speculative-config (ngram, draft_model, eagle, "
                      "eagle3, mtp or a model-specific MTP name, dflash, dspark, suffix, "
                      "medusa...), or none; checked against the pinned release's profile.")
    n: int | None = Field(None, ge=0, description="`num_speculative_tokens`: tokens drafted "
                          "per step (default: the length of synth_rates).")
    draft_model: str | None = Field(
        None, description="`model` of --speculative-config: a draft model, EAGLE/Medusa head "
        "or MTP weights, as a local path, OWNER/REPO or hf://OWNER/REPO@REVISION (the "
        "revision becomes the spec config's `revision`).")
    synth_rates: SynthRates = Field(
        None, description="`synthetic_acceptance_rates` with `rejection_sample_method: "
        "synthetic`: unconditional per-position acceptance probabilities, non-increasing, one "
        "per drafted position (benchmarking only: output is not valid text).")
    synth_len: float | None = Field(
        None, ge=1, description="`synthetic_acceptance_length` with `rejection_sample_method: "
        "synthetic`: target mean acceptance length including the bonus token; exclusive with "
        "synth_rates.")
    prompt_lookup_min: int | None = Field(None, ge=1, description="ngram: shortest n-gram "
                                          "matched in the prompt (vLLM default 5).")
    prompt_lookup_max: int | None = Field(None, ge=1, description="ngram: longest n-gram "
                                          "matched in the prompt (vLLM default 5).")
    draft_tensor_parallel_size: int | None = Field(
        None, ge=1, description="Tensor parallelism of the draft model (1 or the target's).")
    draft_sample_method: str | None = Field(
        None, description="greedy (argmax drafts) or probabilistic (sampled drafts, full "
        "rejection sampling); vLLM 0.33 and later.")
    rejection_sample_method: str | None = Field(
        None, description="standard, block or fly (synthetic is set for you by synth_rates "
        "and synth_len); vLLM 0.33 and later.")
    fields: dict[str, Any] = Field(
        default_factory=dict, description="Other SpeculativeConfig fields by their vLLM names, "
        "passed through as given after a check against the pinned release's profile.")

    @model_validator(mode="before")
    @classmethod
    def _route_vllm_fields(cls, data: Any) -> Any:
        """Move top-level SpeculativeConfig names (the matrix's ``spec:`` extras) into
        ``fields``; names that are neither crossbench's nor vLLM's stay to be refused."""
        if not isinstance(data, dict):
            return data
        ours = set(cls.model_fields)
        known = all_spec_fields()
        out: dict[str, Any] = {}
        extra: dict[str, Any] = dict(data.get("fields") or {})
        for key, value in data.items():
            if key in RESERVED_SPEC_FIELDS:
                raise ValueError(f"`{key}` is set through crossbench's "
                                 f"`{RESERVED_SPEC_FIELDS[key]}`; use that instead")
            if key in ours:
                out[key] = value
            elif key in known:
                extra[key] = value
            else:
                out[key] = value  # refused as an unknown field
        for key in extra:
            if key in RESERVED_SPEC_FIELDS:
                raise ValueError(f"fields.{key} is set through crossbench's "
                                 f"`{RESERVED_SPEC_FIELDS[key]}`; use that instead")
            if key in ours:
                raise ValueError(f"fields.{key} is a typed spec field; set it as `{key}`")
        if extra:
            out["fields"] = extra
        return out

    @field_validator("draft_model")
    @classmethod
    def _draft_ref(cls, v: str | None) -> str | None:
        if v is not None:
            parse_model_ref(v, "draft_model")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> VllmSpecConfig:
        if self.synth_rates is not None and self.synth_len is not None:
            raise ValueError("synth_rates and synth_len are mutually exclusive; keep one")
        if self.rejection_sample_method == "synthetic" and not self.synthetic:
            raise ValueError("rejection_sample_method synthetic needs synth_rates or "
                             "synth_len; set one of them (it sets the method for you)")
        if self.synthetic and self.rejection_sample_method not in (None, "synthetic"):
            raise ValueError(f"synthetic acceptance replaces rejection_sample_method "
                             f"{self.rejection_sample_method!r}; drop one of them")
        if (self.prompt_lookup_min is not None and self.prompt_lookup_max is not None
                and self.prompt_lookup_min > self.prompt_lookup_max):
            raise ValueError("prompt_lookup_min must be <= prompt_lookup_max")
        draft = self.draft_ref()
        pinned = self.fields.get("revision")
        if draft is not None and draft.revision and pinned and pinned != draft.revision:
            raise ValueError(f"draft_model pins revision {draft.revision!r} but revision is "
                             f"{pinned!r}; keep one")
        return self

    @property
    def enabled(self) -> bool:
        """Whether any speculative method is configured."""
        return self.type != "none"

    @property
    def synthetic(self) -> bool:
        """Whether acceptance is synthetic (benchmarking only)."""
        return self.synth_rates is not None or self.synth_len is not None

    @property
    def effective_n(self) -> int | None:
        """``num_speculative_tokens`` as passed: n, or the length of synth_rates."""
        if self.n is not None:
            return self.n
        return len(self.synth_rates) if self.synth_rates is not None else None

    def draft_ref(self) -> ModelRef | None:
        """The draft as vLLM takes it (None without one)."""
        return parse_model_ref(self.draft_model, "draft_model") if self.draft_model else None

    def vllm_fields(self) -> dict[str, Any]:
        """The ``--speculative-config`` object, in a fixed key order (empty when off)."""
        if not self.enabled:
            return {}
        out: dict[str, Any] = {"method": self.type}
        draft = self.draft_ref()
        if draft is not None:
            out["model"] = draft.name
            if draft.revision is not None:
                out["revision"] = draft.revision
        if self.effective_n is not None:
            out["num_speculative_tokens"] = self.effective_n
        for name in ("prompt_lookup_min", "prompt_lookup_max", "draft_tensor_parallel_size",
                     "draft_sample_method"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.synthetic:
            out["rejection_sample_method"] = "synthetic"
            if self.synth_rates is not None:
                out["synthetic_acceptance_rates"] = list(self.synth_rates)
            else:
                out["synthetic_acceptance_length"] = self.synth_len
        elif self.rejection_sample_method is not None:
            out["rejection_sample_method"] = self.rejection_sample_method
        for name in sorted(self.fields):
            out[name] = self.fields[name]
        return out


class VllmServerConfig(StrictModel, ApiKeySettings, CpuSettings):
    """One ``vllm serve`` configuration: release, model, server settings and speculation (and,
    for a server behind an API key, where the key is: ``api_key_env`` or ``api_key_file``)."""

    binary: Path | None = Field(None, description="The `vllm` executable to run (default: "
                                "`vllm` on PATH), or a stand-in launcher for tests.")
    version: str = Field(DEFAULT_VERSION, description="vLLM release the config is written for; "
                         "selects the profile (engines/vllm/VERSION.yaml) and must match "
                         "`vllm --version`.")
    model: str = Field(description="Target model: a local folder (start relative paths with "
                       "./), OWNER/REPO, or hf://OWNER/REPO@REVISION (gives --model OWNER/REPO "
                       "--revision REV).")
    revision: str | None = Field(None, description="`--revision` of the target (commit hash "
                                 "best); or put it in the model as hf://OWNER/REPO@REV.")
    served_model_name: str | None = Field(
        None, description="`--served-model-name`: the name requests must carry in `model` and "
        "the metrics carry in `model_name` (default: the model id).")
    tokenizer: str | None = Field(None, description="`--tokenizer`: another tokenizer.")
    dtype: str | None = Field(None, description="`--dtype` (auto, bfloat16, float16, ...).")
    quantization: str | None = Field(None, description="`--quantization` of the target.")
    seed: int | None = Field(None, description="`--seed`: engine RNG seed.")
    host: str = Field("127.0.0.1", description="`--host`: loopback unless told otherwise.")
    port: int | None = Field(None, ge=1, le=65535, description="`--port`; default: a free one.")
    tensor_parallel_size: int | None = Field(None, ge=1,
                                             description="`--tensor-parallel-size`.")
    data_parallel_size: int | None = Field(None, ge=1, description="`--data-parallel-size`: "
                                           "engines whose counters are summed (label engine).")
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1, description=
                                                 "`--gpu-memory-utilization` (a fraction).")
    max_model_len: int | None = Field(None, ge=1, description="`--max-model-len` in tokens.")
    max_num_seqs: int | None = Field(None, ge=1, description="`--max-num-seqs`.")
    max_num_batched_tokens: int | None = Field(None, ge=1,
                                               description="`--max-num-batched-tokens`.")
    enable_prefix_caching: bool | None = Field(None, description="`--enable-prefix-caching` "
                                               "(true) or `--no-enable-prefix-caching` "
                                               "(false); unset keeps vLLM's default.")
    enable_chunked_prefill: bool | None = Field(None, description="`--enable-chunked-prefill` "
                                                "or `--no-enable-chunked-prefill`.")
    enforce_eager: bool | None = Field(None, description="`--enforce-eager` (no CUDA graphs) "
                                       "or `--no-enforce-eager`.")
    async_scheduling: bool | None = Field(
        None, description="`--async-scheduling` or `--no-async-scheduling`. Unset, vLLM 0.26+ "
        "turns it on for a baseline but off for draft_model and ngram speculation, so the two "
        "arms run different schedulers: set it (false) to compare speculation alone.")
    per_request_spec_decode_metrics: Literal["none", "summary", "detailed"] | None = Field(
        None, description="`--per-request-spec-decode-metrics` (0.33+): acceptance per "
        "request in the response's metrics.speculative_decoding; passed only with speculation "
        "(vLLM refuses it without).")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables for "
                                "the server, e.g. VLLM_USE_V2_MODEL_RUNNER (recorded).")
    extra_args: list[str] = Field(default_factory=list, description="Raw extra flags, checked "
                                  "against the pinned release's flags.")
    ready_timeout_s: float = Field(1200.0, gt=0, description="Seconds allowed to load, "
                                   "compile, capture graphs and serve.")
    stop_timeout_s: float = Field(30.0, gt=0, description="Seconds between SIGTERM and "
                                  "SIGKILL of the process tree.")
    gpu_release_timeout_s: float = Field(60.0, ge=0, description="Seconds stop() waits for "
                                         "the server's GPU memory to be released (NVML).")
    cudagraph_sizes: Literal["default", "decode"] = Field(
        "default", description="CUDA graphs to capture: `default` (vLLM's list, up to twice "
        "max_num_seqs x (n+1) tokens) or `decode` (the default list up to the first size at "
        "or above max_num_seqs x (n+1), the largest decode step; every decode step pads to "
        "the same graph, start-up captures fewer). `decode` needs max_num_seqs and passes "
        "--compilation-config; see docs/vllm.md 'Start-up'.")
    compile_cache: Literal["crossbench", "vllm", "off"] = Field(
        "crossbench", description="torch.compile cache: `crossbench` (VLLM_CACHE_ROOT under "
        "~/.cache/crossbench/vllm-compile/<engine build>/, carried between machines by "
        "`crossbench engines compile-cache pack|unpack`), `vllm` (vLLM's own "
        "~/.cache/vllm) or `off` (VLLM_DISABLE_COMPILE_CACHE=1: every start compiles). An "
        "env VLLM_CACHE_ROOT wins over `crossbench`.")
    engine_process: Literal["spawn", "fork"] = Field(
        "spawn", description="How the API server starts vLLM's engine core process: `spawn` "
        "(what `vllm serve` chooses: a fresh interpreter that imports vLLM again) or `fork` "
        "(VLLM_WORKER_MULTIPROC_METHOD=fork: the engine core inherits the API server's "
        "imports; the same engine core, scheduler and IPC). Start-up only; one engine "
        "(data_parallel_size 1); see docs/vllm.md 'Start-up'.")
    kv_cache_memory_bytes: int | None = Field(
        None, ge=1, description="`--kv-cache-memory-bytes`: the KV cache's size, given "
        "instead of profiled (vLLM then skips its memory profiling and its CUDA graph memory "
        "estimate; gpu_memory_utilization no longer sizes the cache). Take it from a start of "
        "the same config: engine.startup.kv_cache_gib x 2**30.")
    spec: VllmSpecConfig = Field(default_factory=VllmSpecConfig,
                                 description="Speculative decoding settings.")

    @field_validator("model")
    @classmethod
    def _model_ref(cls, v: str) -> str:
        parse_model_ref(v, "model")
        return v

    @field_validator("env")
    @classmethod
    def _no_start_method(cls, v: dict[str, str]) -> dict[str, str]:
        if "VLLM_WORKER_MULTIPROC_METHOD" in v:
            raise ValueError("VLLM_WORKER_MULTIPROC_METHOD is set through engine_process "
                             "(spawn or fork), which the start record keeps; drop it from env "
                             "and set engine_process")
        return v

    @field_validator("engine_process")
    @classmethod
    def _one_engine(cls, v: str, info: ValidationInfo) -> str:
        if v == "fork" and (info.data.get("data_parallel_size") or 1) > 1:
            raise ValueError("fork is examined for one engine only (data_parallel_size 1); "
                             "set engine_process: spawn with data parallelism")
        return v

    @model_validator(mode="after")
    def _one_revision(self) -> VllmServerConfig:
        ref = parse_model_ref(self.model)
        if ref.revision and self.revision and ref.revision != self.revision:
            raise ValueError(f"model pins revision {ref.revision!r} but revision is "
                             f"{self.revision!r}; keep one")
        if self.cudagraph_sizes == "decode" and self.max_num_seqs is None:
            raise ValueError("cudagraph_sizes decode needs max_num_seqs (the most sequences "
                             "a decode step holds); set max_num_seqs to the cell's "
                             "concurrency or more")
        if self.cudagraph_sizes == "decode" and self.enforce_eager:
            raise ValueError("cudagraph_sizes decode with enforce_eager captures nothing; "
                             "drop one of them")
        return self

    def capture_sizes(self) -> list[int] | None:
        """The ``cudagraph_capture_sizes`` crossbench passes (None: vLLM's default)."""
        if self.cudagraph_sizes != "decode" or self.max_num_seqs is None:
            return None
        from crossbench.engines.vllm.startup_cut import decode_capture_sizes

        n = (self.spec.effective_n or 0) if self.spec.enabled else 0
        return decode_capture_sizes(self.max_num_seqs, n, self.max_num_batched_tokens)

    def warnings(self) -> list[str]:
        """A ``host`` that is not a loopback address (the server is then reachable from the
        network)."""
        return host_warnings(self.host)

    def model_ref(self) -> ModelRef:
        """The target as vLLM takes it (revision from the model or from ``revision``)."""
        ref = parse_model_ref(self.model)
        return ModelRef(ref.name, ref.revision or self.revision, ref.local)
