"""Typed configuration of an SGLang server run (strict: unknown fields are errors).

crossbench's ``n`` (tokens drafted per step) maps onto SGLang's knobs one way for every
algorithm (docs/sglang.md): ``--speculative-num-draft-tokens n+1``, a chain of
``--speculative-num-steps n`` with ``--speculative-eagle-topk 1`` for the draft-model
algorithms, and for DFLASH a block of n+1 (``--speculative-dflash-block-size``; SGLang fixes
its steps and topk at 1 itself: ``_handle_dflash`` in ``arg_groups/speculative_hook.py`` of
0.5.17). ``synth_len`` sets SGLang's simulated mean accepted length per verification step
(``SGLANG_SIMULATE_ACC_LEN``, ``environ.py``:347-349; :meth:`SglangSpecConfig.simulate_env`);
a matrix arm's ``synth_alpha`` a becomes ``synth_len`` 1 + a + ... + a^n (``SYNTH_ALPHA_AS``).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from crossbench.engines.affinity import CpuSettings
from crossbench.engines.auth import ApiKeySettings
from crossbench.engines.bind import host_warnings
from crossbench.engines.sglang.profile import DEFAULT_VERSION
from crossbench.engines.spec import HF_REPO, StrictModel

SglangMethod = Literal["none", "DFLASH", "EAGLE", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE"]

#: what each algorithm needs from ``draft_model``
DRAFT_RULES: dict[str, Literal["required", "optional", "forbidden"]] = {
    "DFLASH": "required", "EAGLE": "required", "EAGLE3": "required", "STANDALONE": "required",
    "NEXTN": "optional", "NGRAM": "forbidden",
}
#: algorithms that draft through a draft model's chain of steps
CHAIN = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
#: algorithms that draft a block of n tokens in one pass (block size n+1)
BLOCK = ("DFLASH",)
#: beginning of SGLang's simulated-acceptance variables (``SGLANG_SIMULATE_ACC_LEN``,
#: ``_METHOD``, ``_TOKEN_MODE``): set only from ``spec.synth_len``, never inherited or in env
SIMULATE_PREFIX = "SGLANG_SIMULATE_ACC_"
#: ``SGLANG_SIMULATE_ACC_TOKEN_MODE`` per ``synth_tokens``
TOKEN_MODES = {"draft": "real-draft-token", "fixed": "fixed"}


def split_model(text: str, setting: str) -> tuple[str, str | None]:
    """(path or OWNER/REPO, revision) from a folder, ``OWNER/REPO`` or
    ``hf://OWNER/REPO@REVISION``; ValueError naming ``setting`` otherwise."""
    if text.startswith("hf://"):
        repo, at, rev = text[len("hf://"):].partition("@")
        if not at or not rev or "/" in rev or not HF_REPO.fullmatch(repo):
            raise ValueError(f"{setting} {text!r} is not hf://OWNER/REPO@REVISION (SGLang "
                             "loads a whole repository: no file after the revision)")
        return repo, rev
    return text, None


class SglangSpecConfig(StrictModel):
    """Speculative decoding settings of ``launch_server``."""

    type: SglangMethod = Field("none", description="`--speculative-algorithm`: DFLASH (a "
                               "DFlash block drafter as draft_model), EAGLE, EAGLE3 (a "
                               "trained head as draft_model), NEXTN (the target's own MTP "
                               "layers), NGRAM (drafts from earlier text), STANDALONE (a "
                               "small draft model), or none.")
    n: int | None = Field(None, ge=1, le=64, description="Tokens drafted per step: "
                          "--speculative-num-draft-tokens n+1 and, for the draft-model "
                          "algorithms, --speculative-num-steps n with --speculative-eagle-"
                          "topk 1; for DFLASH --speculative-dflash-block-size n+1 (at most "
                          "the drafter's block size, checked on a local folder).")
    draft_model: str | None = Field(None, description="`--speculative-draft-model-path`: a "
                                    "folder, OWNER/REPO or hf://OWNER/REPO@REVISION.")
    synth_rates: list[float] | None = Field(None, description="Refused: SGLang has no "
                                            "per-position synthetic acceptance; the error "
                                            "gives the synth_len of the same mean.")
    synth_len: float | None = Field(None, ge=1, description="`SGLANG_SIMULATE_ACC_LEN` "
                                    "(benchmarking only): a simulated mean accepted length "
                                    "per verification step, the bonus token included, at "
                                    "most n+1. Each step commits the floor or the ceiling "
                                    "of it, one draw for the whole batch "
                                    "(SGLANG_SIMULATE_ACC_METHOD match-expected); not "
                                    "per-position rates. Output text is invalid.")
    synth_tokens: Literal["draft", "fixed"] | None = Field(
        None, description="`SGLANG_SIMULATE_ACC_TOKEN_MODE` with synth_len: draft "
        "(real-draft-token: the forced accepted tokens are the drafts, the last the "
        "target's argmax; default for the chain and block algorithms) or fixed (every "
        "emitted token is id 100; default, and the only mode, for NGRAM).")

    #: the field a matrix arm's ``synth_alpha`` becomes: a mean length, not rates
    SYNTH_ALPHA_AS: ClassVar[str] = "synth_len"

    @field_validator("draft_model")
    @classmethod
    def _draft_ref(cls, v: str | None) -> str | None:
        if v is not None:
            split_model(v, "draft_model")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> SglangSpecConfig:
        if self.synth_rates is not None:
            mean = 1 + sum(self.synth_rates)
            raise ValueError("synth_rates: SGLang has no per-position synthetic acceptance "
                             "(SGLANG_SIMULATE_ACC_LEN sets a mean accepted length per step); "
                             f"set synth_len: {mean:.6g} instead (1 + the sum of the rates, "
                             "the same mean), or synth_alpha on a matrix arm")
        if self.synth_tokens is not None and self.synth_len is None:
            raise ValueError("synth_tokens needs synth_len (the simulated mean accepted "
                             "length); set synth_len or drop synth_tokens")
        if self.type == "none":
            if self.n is not None or self.draft_model is not None or \
                    self.synth_len is not None:
                raise ValueError("n, draft_model and synth_len need a speculative method; "
                                 "set type (DFLASH, EAGLE, EAGLE3, NEXTN, NGRAM or "
                                 "STANDALONE) or drop them")
            return self
        rule = DRAFT_RULES[self.type]
        if rule == "required" and self.draft_model is None:
            what = "a DFlash block drafter (config.json architectures DFlashDraftModel)" \
                if self.type == "DFLASH" else "a draft model"
            raise ValueError(f"{self.type} needs {what}; set draft_model (a folder, "
                             "OWNER/REPO or hf://OWNER/REPO@REVISION)")
        if rule == "forbidden" and self.draft_model is not None:
            raise ValueError(f"{self.type} takes no draft model; drop draft_model")
        if self.n is None:
            raise ValueError(f"{self.type} needs n (tokens drafted per step); set n, "
                             "e.g. n: 4")
        if self.synth_len is not None and self.synth_len > self.n + 1:
            raise ValueError(f"synth_len {self.synth_len:g} exceeds n + 1 = {self.n + 1} "
                             "(a step commits at most its n drafts plus one; SGLang would "
                             f"clamp it silently); set synth_len <= {self.n + 1}")
        if self.synth_tokens == "draft" and self.type == "NGRAM":
            raise ValueError("synth_tokens draft: SGLang 0.5.17 forces real draft tokens only "
                             "on a chain (speculative_eagle_topk 1), and NGRAM verifies a "
                             "tree; set synth_tokens: fixed or drop it")
        return self

    @property
    def enabled(self) -> bool:
        """Whether a speculative algorithm is configured."""
        return self.type != "none"

    def simulate_env(self) -> dict[str, str]:
        """The ``SGLANG_SIMULATE_ACC_*`` variables of the server with ``synth_len`` (empty
        without). SGLang 0.5.17 reads them once, at import (``speculative/spec_utils.py``
        :171-173), and applies them after every verification (``eagle_sample`` in
        ``eagle_utils.py``:838-871 for EAGLE, EAGLE3, NEXTN, STANDALONE and NGRAM;
        ``dflash_worker_v2.py``:1810-1836 for DFLASH). The method is pinned to
        match-expected, whose mean is synth_len; SGLang's other method, multinomial, rounds
        a normal draw and misses the mean (``spec_utils.py``:357-369)."""
        if self.synth_len is None:
            return {}
        tokens = self.synth_tokens or ("fixed" if self.type == "NGRAM" else "draft")
        return {"SGLANG_SIMULATE_ACC_LEN": repr(float(self.synth_len)),
                "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
                "SGLANG_SIMULATE_ACC_TOKEN_MODE": TOKEN_MODES[tokens]}


class SglangServerConfig(StrictModel, ApiKeySettings, CpuSettings):
    """One ``python -m sglang.launch_server`` configuration: interpreter, release, model,
    server settings and speculation."""

    binary: Path | None = Field(None, description="The Python interpreter that has sglang "
                                "installed (default: the PREFIX/bin/python that `crossbench "
                                "engines install sglang` wrote for this release, else "
                                "python3 on PATH), or a stand-in launcher for tests.")
    version: str = Field(DEFAULT_VERSION, description="SGLang release the config is written "
                         "for; selects engines/sglang/VERSION.yaml and must match the "
                         "installed sglang.__version__.")
    model: str = Field(description="`--model-path`: a folder, OWNER/REPO or "
                       "hf://OWNER/REPO@REVISION (gives --revision REV).")
    revision: str | None = Field(None, description="`--revision` of the target.")
    served_model_name: str | None = Field(None, description="`--served-model-name` (default: "
                                          "the model path).")
    host: str = Field("127.0.0.1", description="`--host`: loopback unless told otherwise.")
    port: int | None = Field(None, ge=1, le=65535, description="`--port`; default: a free one.")
    tp_size: int | None = Field(None, ge=1, description="`--tp-size`: tensor parallelism.")
    mem_fraction_static: float | None = Field(None, gt=0, lt=1, description=
                                              "`--mem-fraction-static`: weights and KV cache "
                                              "share of GPU memory.")
    context_length: int | None = Field(None, ge=1, description="`--context-length`.")
    max_running_requests: int | None = Field(None, ge=1,
                                             description="`--max-running-requests`.")
    chunked_prefill_size: int | None = Field(None, description="`--chunked-prefill-size`.")
    disable_radix_cache: bool | None = Field(None, description="`--disable-radix-cache` "
                                             "(true): no prefix reuse across requests.")
    random_seed: int | None = Field(None, description="`--random-seed`.")
    dtype: str | None = Field(None, description="`--dtype` (auto, bfloat16, float16, ...).")
    attention_backend: str | None = Field(None, description="`--attention-backend` (triton, "
                                          "flashinfer, fa3, ...); unset, SGLang picks one per "
                                          "GPU (fa3 on Hopper). A pack without FlashAttention-3 "
                                          "(engines/sglang/pack.yaml) needs triton or "
                                          "flashinfer.")
    trust_remote_code: bool | None = Field(None, description="`--trust-remote-code`.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables for "
                                "the server (recorded).")
    extra_args: list[str] = Field(default_factory=list, description="Raw extra flags, checked "
                                  "against the release's profile.")
    ready_timeout_s: float = Field(1200.0, gt=0, description="Seconds allowed to load, "
                                   "capture CUDA graphs and serve.")
    stop_timeout_s: float = Field(30.0, gt=0, description="Seconds between SIGTERM and "
                                  "SIGKILL of the server's session (its scheduler and "
                                  "detokenizer processes included).")
    gpu_release_timeout_s: float = Field(60.0, ge=0, description="Seconds stop() waits for "
                                         "the server's processes to release GPU memory (a "
                                         "note in the stop report if they do not).")
    spec: SglangSpecConfig = Field(default_factory=SglangSpecConfig,
                                   description="Speculative decoding settings.")

    @field_validator("model")
    @classmethod
    def _model_ref(cls, v: str) -> str:
        split_model(v, "model")
        return v

    @field_validator("env")
    @classmethod
    def _no_simulated_acceptance(cls, v: dict[str, str]) -> dict[str, str]:
        scripted = sorted(k for k in v if k.startswith(SIMULATE_PREFIX))
        if scripted:
            raise ValueError(f"{', '.join(scripted)} is set by crossbench from "
                             "spec.synth_len (so that a run records its simulated "
                             "acceptance); drop it from env and set spec.synth_len")
        return v

    def model_path(self) -> tuple[str, str | None]:
        """(``--model-path``, ``--revision``) of the target."""
        path, rev = split_model(self.model, "model")
        return path, rev or self.revision

    def warnings(self) -> list[str]:
        """A ``host`` that is not a loopback address (reachable from the network)."""
        return host_warnings(self.host)
