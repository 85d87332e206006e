"""vLLM version profiles: the generator (on a miniature wheel written here, and on the real
wheels when ``CROSSBENCH_VLLM_WHEELS`` names a folder holding them) and the checked-in
profiles of 0.33.0 and 0.10.2."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
import yaml

from crossbench.engines.vllm.profile import (
    is_standin,
    known_profiles,
    parse_version,
    profile_for,
    profiles_dir,
)
from crossbench.engines.vllm.tools import profile_gen

ARG_UTILS = '''
import argparse
from vllm.config import CacheConfig, ModelConfig, VllmConfig

class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        model_kwargs = get_kwargs(ModelConfig)
        cache_kwargs = get_kwargs(CacheConfig)
        vllm_kwargs = get_kwargs(VllmConfig)
        group = parser.add_argument_group("x")
        group.add_argument("--model", **model_kwargs["model"])
        group.add_argument("--enforce-eager", **model_kwargs["enforce_eager"])
        group.add_argument("--trust-remote-code", **model_kwargs["trust_remote_code"])
        group.add_argument("--quantization", "-q", **model_kwargs["quantization"])
        group.add_argument("--enable-prefix-caching",
                           **{**cache_kwargs["enable_prefix_caching"], "default": None})
        group.add_argument("--speculative-config", **vllm_kwargs["speculative_config"])
        parser.add_argument("--disable-log-stats", action="store_true")
        parser.add_argument("--enable-log-requests", action=argparse.BooleanOptionalAction)
        return parser

    def _is_v1_supported_oracle(self):
        if (self.speculative_config is not None
                and self.speculative_config.get("method") == "draft_model"):
            raise NotImplementedError(
                "Speculative decoding with draft model is not supported yet. "
                "Use eagle.")
'''
CONFIG = '''
from typing import Literal, Optional
from pydantic import SkipValidation

class ModelConfig:
    model: str = "m"
    enforce_eager: bool = False
    trust_remote_code: SkipValidation[bool] = False
    quantization: Optional[str] = None

class CacheConfig:
    enable_prefix_caching: bool | None = None

class ObservabilityConfig:
    per_request_spec_decode_metrics: Literal["none", "summary"] = "none"

class VllmConfig:
    speculative_config: Optional["SpeculativeConfig"] = None
'''
SPECULATIVE = '''
from typing import Literal
MTPModelTypes = Literal["deepseek_mtp", "mtp"]
EagleModelTypes = Literal["eagle", "eagle3", MTPModelTypes]
SpeculativeMethod = Literal["ngram", "draft_model", EagleModelTypes]
RejectionSampleMethod = Literal["standard", "synthetic"]

class SpeculativeConfig:
    num_speculative_tokens: int = None
    model: str | None = None
    method: SpeculativeMethod | None = None
    rejection_sample_method: RejectionSampleMethod = "standard"
    synthetic_acceptance_rates: list[float] | None = None
    target_model_config: SkipValidation[ModelConfig] = None

    def __post_init__(self):
        logger.warning("max_num_scheduled_tokens is set to"
                       f" {self.n} based on the speculative decoding settings. This may")
'''
FRONTEND = '''
class BaseFrontendArgs:
    enable_per_request_metrics: bool = False
    api_key: list[str] | None = None

class FrontendArgs(BaseFrontendArgs):
    host: str | None = None
    port: int = 8000

    @classmethod
    def add_cli_args(cls, parser):
        for key, value in get_kwargs(cls).items():
            parser.add_argument(f"--{key.replace('_', '-')}", **value)
        parser.add_argument("--per-request-spec-decode-metrics", choices=["none", "summary"])
'''
LOGGERS = '''
class PrometheusStatLogger:
    _counter_cls = Counter
    _gauge_cls = Gauge
    _histogram_cls = Histogram

    def __init__(self):
        labelnames = ["model_name", "engine"]
        self.g = self._gauge_cls(name="vllm:num_requests_running",
                                 documentation="Number of requests in model execution batches.",
                                 labelnames=labelnames)
        self.c = self._counter_cls(name="vllm:num_preemptions",
                                   documentation="Cumulative number of preemption.",
                                   labelnames=labelnames + ["extra"])
        self.h = self._histogram_cls(name="vllm:iteration_tokens_total",
                                     documentation="Histogram of tokens.",
                                     buckets=[1, 8, 16], labelnames=labelnames)
        logger.info("vLLM server version %s, serving model %s", 1, 2)
        logger.info("%s KV cache size: %s tokens, Maximum concurrency", 1, 2)
'''
SPEC_METRICS = '''
class SpecDecodingProm:
    _counter_cls = prometheus_client.Counter

    def __init__(self, labelnames):
        counter_specs = [("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.")]
        counters = [self._counter_cls(name=name, documentation=doc, labelnames=labelnames)
                    for name, doc in counter_specs]
        pos_labelnames = labelnames + ["position"]
        base = self._counter_cls(name="vllm:spec_decode_num_accepted_tokens_per_pos",
                                 documentation="Accepted tokens per draft position.",
                                 labelnames=pos_labelnames)
'''
PROTOCOL = '''
class SpeculativeDecodingMetrics(OpenAIBaseModel):
    mean_acceptance_length: float
    num_draft_tokens: int
'''


@pytest.fixture
def mini_wheel(tmp_path: Path) -> Path:
    """A wheel-shaped zip with just enough of vLLM's sources to exercise the generator."""
    path = tmp_path / "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("vllm-9.9.9.dist-info/METADATA",
                   "Metadata-Version: 2.1\nName: vllm\nVersion: 9.9.9\n"
                   "Requires-Dist: torch==9.0.0\nRequires-Dist: torchvision==1\n\nreadme\n")
        z.writestr("vllm/engine/arg_utils.py", ARG_UTILS)
        z.writestr("vllm/config/model.py", CONFIG)
        z.writestr("vllm/config/speculative.py", SPECULATIVE)
        z.writestr("vllm/entrypoints/common/cli_args.py", FRONTEND)
        z.writestr("vllm/v1/metrics/loggers.py", LOGGERS)
        z.writestr("vllm/v1/spec_decode/metrics.py", SPEC_METRICS)
        z.writestr("vllm/entrypoints/generate/base/protocol.py", PROTOCOL)
    return path


def test_generator_on_a_miniature_wheel(mini_wheel: Path) -> None:
    p = profile_gen.generate(mini_wheel)
    assert p["version"] == "9.9.9" and p["requires_torch"] == "torch==9.0.0"
    assert p["source"].startswith("vllm==9.9.9 (vllm-9.9.9-") and "sha256" in p["source"]
    assert p["serve_flags"] == sorted([
        "--model", "--enforce-eager", "--no-enforce-eager", "--trust-remote-code",
        "--no-trust-remote-code", "--quantization", "-q", "--enable-prefix-caching",
        "--no-enable-prefix-caching", "--speculative-config", "--disable-log-stats",
        "--enable-log-requests", "--no-enable-log-requests", "--enable-per-request-metrics",
        "--no-enable-per-request-metrics", "--api-key", "--host", "--port",
        "--per-request-spec-decode-metrics"])
    sc = p["speculative_config"]
    assert sc["methods"] == ["ngram", "draft_model", "eagle", "eagle3", "deepseek_mtp", "mtp"]
    assert sc["mtp_methods"] == ["deepseek_mtp", "mtp"]
    assert sc["choices"] == {"rejection_sample_method": ["standard", "synthetic"]}
    assert set(sc["fields"]) == {"num_speculative_tokens", "model", "method",
                                 "rejection_sample_method", "synthetic_acceptance_rates"}
    assert p["unsupported_methods"] == {
        "draft_model": "Speculative decoding with draft model is not supported yet. Use eagle."}
    fams = {f["name"]: f for f in p["metrics"]}
    assert fams["vllm:num_requests_running"] == {
        "name": "vllm:num_requests_running", "type": "gauge",
        "help": "Number of requests in model execution batches.",
        "labels": ["model_name", "engine"]}
    assert fams["vllm:num_preemptions"]["labels"] == ["model_name", "engine", "extra"]
    assert fams["vllm:iteration_tokens_total"]["buckets"] == [1.0, 8.0, 16.0]
    assert fams["vllm:spec_decode_num_drafts"]["labels"] == ["model_name", "engine"]
    assert fams["vllm:spec_decode_num_accepted_tokens_per_pos"]["labels"] == [
        "model_name", "engine", "position"]
    logs = p["log_formats"]
    assert logs["version"] == ["vLLM server version %s, serving model %s"]
    assert logs["max_num_scheduled_tokens"] == [
        "max_num_scheduled_tokens is set to {} based on the speculative decoding settings. "
        "This may"]
    assert p["per_request_spec_metrics"]["fields"] == ["mean_acceptance_length",
                                                       "num_draft_tokens"]
    assert p["per_request_spec_metrics"]["choices"] == ["none", "summary"]
    text = profile_gen.render(p)
    assert text.startswith("# vLLM engine profile, generated")
    assert yaml.safe_load(text) == p


def test_generator_reads_an_unpacked_wheel(mini_wheel: Path, tmp_path: Path) -> None:
    folder = tmp_path / "unpacked"
    with zipfile.ZipFile(mini_wheel) as z:
        z.extractall(folder)
    a, b = profile_gen.generate(mini_wheel), profile_gen.generate(folder)
    a.pop("source"), b.pop("source")
    assert a == b


WHEELS = os.environ.get("CROSSBENCH_VLLM_WHEELS")


@pytest.mark.skipif(not WHEELS, reason="set CROSSBENCH_VLLM_WHEELS to a folder of vllm wheels "
                    "(pip download vllm==0.33.0 --no-deps -d DIR) to check the profiles")
def test_checked_in_profiles_regenerate_from_the_real_wheels() -> None:
    assert WHEELS is not None
    wheels = sorted(Path(WHEELS).glob("vllm-*.whl"))
    assert wheels
    for wheel in wheels:
        made = profile_gen.render(profile_gen.generate(wheel))
        version = wheel.name.split("-")[1]
        assert made == (profiles_dir() / f"{version}.yaml").read_text(), wheel.name


def test_checked_in_profiles() -> None:
    assert [p.version for p in known_profiles()] == ["0.10.2", "0.26.0", "0.33.0"]
    mid = profile_for("0.26.0")  # the release that runs on torch 2.11 (the H200 image's)
    assert mid.requires_torch == "torch==2.11.0"
    assert mid.choices["rejection_sample_method"] == ("standard", "synthetic", "block")
    assert {"draft_model", "ngram", "eagle3", "mtp", "dflash"} <= set(mid.methods)
    assert {"synthetic_acceptance_rates", "synthetic_acceptance_length"} <= mid.spec_fields
    assert "--per-request-spec-decode-metrics" not in mid.flags and mid.per_request is None
    assert not mid.unsupported
    assert {"vllm:request_decode_time_seconds", "vllm:request_generation_tokens"} <= {
        str(f["name"]) for f in mid.metrics}
    new, old = profile_for("0.33.0"), profile_for("0.10.2")
    assert new.requires_torch == "torch==2.14.0" and old.requires_torch == "torch==2.8.0"
    assert {"ngram", "draft_model", "eagle", "eagle3", "mtp", "dflash", "dspark",
            "suffix"} <= set(new.methods)
    assert "medusa" not in new.methods and "medusa" in old.methods
    assert {"qwen3_next_mtp", "deepseek_mtp"} <= set(new.mtp_methods)
    assert new.choices["rejection_sample_method"] == ("standard", "synthetic", "block", "fly")
    assert {"synthetic_acceptance_rates", "synthetic_acceptance_length",
            "draft_sample_method"} <= new.spec_fields
    assert not {"synthetic_acceptance_rates", "draft_sample_method"} & old.spec_fields
    assert "draft_model" in old.unsupported and not new.unsupported
    for flag in ("--speculative-config", "--tensor-parallel-size", "--no-enable-prefix-caching",
                 "--max-num-batched-tokens", "--enforce-eager", "--port", "--host"):
        assert flag in new.flags and flag in old.flags
    assert "--per-request-spec-decode-metrics" in new.flags
    assert "--per-request-spec-decode-metrics" not in old.flags
    assert new.per_request is not None and new.per_request["response_field"] == \
        "metrics.speculative_decoding"
    assert old.per_request is None


def test_version_strings() -> None:
    assert parse_version("0.33.0") == ("0.33.0", None)
    assert parse_version("0.33.0+cu130\n") == ("0.33.0", "+cu130")
    assert parse_version("INFO ... \n0.10.2") == ("0.10.2", None)
    assert parse_version("0.33.0+crossbench.standin") == ("0.33.0", "+crossbench.standin")
    assert is_standin("0.33.0+crossbench.standin") and not is_standin("0.33.0+cu130")
