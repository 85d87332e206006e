"""Typed configuration of an SGLang server run (strict: unknown fields are errors).

crossbench's ``n`` (tokens drafted per step) maps onto SGLang's three knobs one way for every
algorithm: ``--speculative-num-draft-tokens n+1`` (SGLang counts the verified root), and
for the draft-model algorithms (EAGLE, EAGLE3, NEXTN, STANDALONE) a chain of
``--speculative-num-steps n`` with ``--speculative-eagle-topk 1``, so that each
verification step checks exactly n drafted tokens. DFLASH drafts a whole block in one
forward pass: its block (``--speculative-dflash-block-size``, SGLang's alias of
``--speculative-num-draft-tokens`` for DFLASH) is the current token plus n drafts, so n+1;
SGLang fixes its steps and topk at 1 itself (``arg_groups/speculative_hook.py``
``_handle_dflash`` of 0.5.17).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from crossbench.engines.affinity import CpuSettings
from crossbench.engines.auth import ApiKeySettings
from crossbench.engines.sglang.profile import DEFAULT_VERSION

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

_REPO_RE = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def split_model(text: str, setting: str) -> tuple[str, str | None]:
    """(path or OWNER/REPO, revision) from a folder, ``OWNER/REPO`` or
    ``hf://OWNER/REPO@REVISION``; ValueError naming ``setting`` otherwise."""
    if text.startswith("hf://"):
        repo, at, rev = text[len("hf://"):].partition("@")
        if not at or not rev or "/" in rev or not _REPO_RE.fullmatch(repo):
            raise ValueError(f"{setting} {text!r} is not hf://OWNER/REPO@REVISION (SGLang "
                             "loads a whole repository: no file after the revision)")
        return repo, rev
    return text, None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SglangSpecConfig(_Strict):
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
    synth_rates: list[float] | None = Field(None, description="Not available: SGLang has no "
                                            "synthetic acceptance (refused with the fix).")
    synth_len: float | None = Field(None, description="Not available: SGLang has no "
                                    "synthetic acceptance (refused with the fix).")

    @field_validator("draft_model")
    @classmethod
    def _draft_ref(cls, v: str | None) -> str | None:
        if v is not None:
            split_model(v, "draft_model")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> SglangSpecConfig:
        if self.synth_rates is not None or self.synth_len is not None:
            raise ValueError("SGLang has no synthetic acceptance; drop synth_rates/synth_len "
                             "(measure real acceptance, or use llama-server or vLLM for "
                             "scripted acceptance)")
        if self.type == "none":
            if self.n is not None or self.draft_model is not None:
                raise ValueError("n and draft_model need a speculative method; set type "
                                 "(DFLASH, EAGLE, EAGLE3, NEXTN, NGRAM or STANDALONE) or drop "
                                 "them")
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
        return self

    @property
    def enabled(self) -> bool:
        """Whether a speculative algorithm is configured."""
        return self.type != "none"


class SglangServerConfig(_Strict, ApiKeySettings, CpuSettings):
    """One ``python -m sglang.launch_server`` configuration: interpreter, release, model,
    server settings and speculation."""

    binary: Path | None = Field(None, description="The Python interpreter that has sglang "
                                "installed (default: python3 on PATH; on a host without "
                                "network, the PREFIX/bin/python that `crossbench engines "
                                "install sglang --from DIR` prints), or a stand-in launcher "
                                "for tests.")
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

    def model_path(self) -> tuple[str, str | None]:
        """(``--model-path``, ``--revision``) of the target."""
        path, rev = split_model(self.model, "model")
        return path, rev or self.revision

    def warnings(self) -> list[str]:
        """A ``host`` that is not a loopback address (reachable from the network)."""
        from crossbench.engines.bind import exposure_warning

        warning = exposure_warning(self.host, "host")
        return [warning] if warning else []
