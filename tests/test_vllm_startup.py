"""Startup-log parsing against lines made from the format strings of vLLM's own sources (the
profiles' ``log_formats``, read from the 0.33.0 and 0.10.2 wheels)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from standins import vllm_formats

from crossbench.engines.vllm import startup_log
from crossbench.engines.vllm.profile import profile_for

DATA = Path(__file__).parent / "data" / "vllm"


def test_startup_033_fixture() -> None:
    f = startup_log.parse((DATA / "startup-0.33.0.log").read_text())
    assert (f.version, f.model) == ("0.33.0", "Qwen/Qwen3-8B")  # from the logo
    assert f.model_runner == "V2" and f.model_runner_fallback is None
    assert (f.kv_cache_tokens, f.kv_cache_gib, f.max_concurrency) == (412_160, 56.6, 100.62)
    assert f.cudagraph_capture_sizes == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    assert f.attention_backend == "FLASH_ATTN"
    assert f.attention_backends_valid == ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"]
    assert f.max_num_scheduled_tokens == 2048
    assert (f.graph_capture_s, f.graph_capture_gib) == (3.0, 0.12)
    assert f.speculative_config is not None and "eagle3" in f.speculative_config
    assert f.lines["kv_cache_tokens"].startswith("(EngineCore pid=4242) INFO ")


def test_startup_0102_fixture() -> None:
    f = startup_log.parse((DATA / "startup-0.10.2.log").read_text())
    assert f.version == "0.10.2"
    assert f.kv_cache_tokens == 412_160 and f.max_concurrency is None
    assert f.kv_cache_gib == 56.6
    assert f.attention_backend == "Flash Attention"
    assert f.model_runner is None  # 0.10 has one model runner and says nothing
    assert f.max_num_scheduled_tokens is None


SAMPLES: dict[str, tuple[dict[int, tuple[object, ...]], str, object]] = {
    # fact: (arguments by number of placeholders, attribute, expected value)
    "kv_cache_tokens": ({4: ("GPU", "1,024", "4,096", 0.25), 1: ("1,024",)},
                        "kv_cache_tokens", 1024),
    "kv_cache_memory": ({1: (7.5,)}, "kv_cache_gib", 7.5),
    "graph_capture": ({2: (12, 1.5)}, "graph_capture_s", 12.0),
    "max_num_scheduled_tokens": ({1: (1000,)}, "max_num_scheduled_tokens", 1000),
    "async_scheduling": ({0: (), 1: ("disabled",)}, "async_scheduling", "disabled"),
    "engine_init": ({1: (77.45,), 2: (77.45, 54.65), 4: (77.45, 54.65, 50.0, 4.65)},
                    "engine_init_s", 77.45),
}
#: facts a release does not log at all (its profile has no format for them)
ABSENT = {("0.10.2", "max_num_scheduled_tokens"), ("0.10.2", "async_scheduling")}


@pytest.mark.parametrize("version", ["0.33.0", "0.26.0", "0.10.2"])
@pytest.mark.parametrize("fact", sorted(SAMPLES))
def test_every_format_string_of_the_wheel_is_understood(version: str, fact: str) -> None:
    args, attr, want = SAMPLES[fact]
    checked = 0
    for fmt in profile_for(version).log_formats.get(fact, ()):
        n = fmt.count("%") + fmt.count("{}")
        line = vllm_formats.log_line(vllm_formats.render_message(fmt, *args[n]), fact, 7)[0]
        assert getattr(startup_log.parse(line), attr) == want, (fmt, line)
        checked += 1
    assert checked or (version, fact) in ABSENT


def test_real_startup_log_of_vllm_0260_on_an_h200() -> None:
    """A draft_model arm's log, as vLLM 0.26.0 wrote it on the H200 (2026-12-01)."""
    f = startup_log.parse((DATA / "startup-0.26.0-h200-draft.log").read_text())
    assert f.version == "0.26.0"
    assert f.async_scheduling == "disabled"  # vLLM's choice for draft_model speculation
    assert (f.engine_init_s, f.compile_s) == (77.45, 54.65)
    assert (f.graph_capture_s, f.graph_capture_gib) == (6.0, 0.28)
    assert f.attention_backend == "FLASH_ATTN"
    assert f.kv_cache_tokens == 412_272 and f.kv_cache_gib == 100.66
    assert f.model_runner is None  # V1 forced by VLLM_USE_V2_MODEL_RUNNER=0: nothing logged
    assert f.speculative_config is not None and "draft_model" in f.speculative_config
    base = startup_log.parse((DATA / "startup-0.26.0-h200-baseline-partial.log").read_text())
    assert base.async_scheduling == "enabled"  # the baseline, left at vLLM's default
    assert base.engine_init_s is None  # stopped before the engine was ready


@pytest.mark.parametrize("version", ["0.33.0", "0.10.2"])
def test_version_formats(version: str) -> None:
    formats = profile_for(version).log_formats
    for fmt in formats["version"]:
        args = ("9.9.9", "org/model")[: fmt.count("%s")]
        lines = vllm_formats.log_line(vllm_formats.render_message(fmt, *args), "version", 1)
        assert startup_log.parse("\n".join(lines)).version == "9.9.9"
    for fmt in formats.get("version_logo", ()):
        lines = vllm_formats.log_line(vllm_formats.render_message(fmt, "9.9.9", "org/m"),
                                     "version", 1)
        f = startup_log.parse("\n".join(lines))
        assert (f.version, f.model) == ("9.9.9", "org/m")


def test_model_runner_fallback_message() -> None:
    fmt = vllm_formats.pick(profile_for("0.33.0").log_formats, "model_runner",
                           "does not yet support")
    assert fmt == "Model Runner V2 does not yet support %s; using the V1 model runner instead."
    line = vllm_formats.log_line(vllm_formats.render_message(fmt, "EAGLE-3 with TP"),
                                "model_runner_fallback", 1)[0]
    f = startup_log.parse(line)
    assert f.model_runner == "V1"
    assert f.model_runner_fallback == ("Model Runner V2 does not yet support EAGLE-3 with TP; "
                                       "using the V1 model runner instead.")
    triton = vllm_formats.pick(profile_for("0.33.0").log_formats, "model_runner", "Triton")
    assert triton is not None and startup_log.parse(triton).model_runner == "V1"


def test_attention_backend_formats() -> None:
    formats = profile_for("0.33.0").log_formats["attention_backend"]
    chosen = next(s for s in formats if s == "Using %s backend.")
    line = vllm_formats.log_line(vllm_formats.render_message(chosen, "FLASHINFER"),
                                "attention_backend", 1)[0]
    assert startup_log.parse(line).attention_backend == "FLASHINFER"


def test_unrelated_lines_give_no_facts() -> None:
    f = startup_log.parse("(APIServer pid=1) INFO 01-01 00:00:00 [x.py:1] Route: /health\n"
                          "Traceback (most recent call last):\n")
    assert f.version is None and f.kv_cache_tokens is None and f.lines == {}


@pytest.mark.parametrize("version", ["0.33.0", "0.26.0", "0.10.2"])
def test_compile_cache_formats_of_every_wheel(version: str) -> None:
    """Each release's own cache messages: a module's directory, then a hit or a miss."""
    formats = profile_for(version).log_formats["compile_cache"]

    def line(fmt: str, text: str) -> str:
        """``fmt`` filled: its last ``%s`` with ``text``, other ``%s`` empty, floats 1.5."""
        specs = re.findall(r"%(?:\.\d+)?([sf])", fmt)
        last = max((i for i, k in enumerate(specs) if k == "s"), default=-1)
        args = [1.5 if k == "f" else (text if i == last else "") for i, k in enumerate(specs)]
        return vllm_formats.log_line(vllm_formats.render_message(fmt, *args), "x", 7)[0]

    cache_dir = next(f for f in formats if "cache directory" in f)
    hits = [f for f in formats if "Directly load" in f]
    misses = [f for f in formats if "Compiling a graph" in f]
    assert hits and misses
    for hit in hits:
        text = "\n".join([line(cache_dir, "/c/rank_0_0/backbone"), line(hit, "(1, 8192)")])
        f = startup_log.parse(text)
        assert (f.compile_cache, f.compile_cache_modules) == ("hit", {"backbone": "hit"}), text
    for miss in misses:
        text = "\n".join([line(cache_dir, "/c/rank_0_0/draft_model"),
                          line(miss, "(1, 8192)")])
        f = startup_log.parse(text)
        assert (f.compile_cache, f.compile_cache_modules) == ("miss", {"draft_model": "miss"})


def test_compile_cache_on_the_h200_cold_and_warm() -> None:
    """vLLM 0.26.0 on the H200 (2026-12-01): the first start of a draft_model configuration
    compiled target and draft (65 s), a later start of the same configuration loaded both
    from the cache (7 s)."""
    cold = startup_log.parse((DATA / "startup-0.26.0-h200-draft.log").read_text())
    assert cold.compile_cache == "miss"
    assert cold.compile_cache_modules == {"backbone": "miss", "draft_model": "miss"}
    warm = startup_log.parse((DATA / "startup-0.26.0-h200-draft-cache-hit.log").read_text())
    assert warm.compile_cache == "hit"
    assert warm.compile_cache_modules == {"backbone": "hit", "draft_model": "hit"}
    assert warm.compile_s is not None and cold.compile_s is not None
    assert warm.compile_s < cold.compile_s / 5
    mixed = startup_log.parse("\n".join(
        (DATA / "startup-0.26.0-h200-draft-cache-hit.log").read_text().splitlines()[:60]
        + [ln for ln in (DATA / "startup-0.26.0-h200-draft.log").read_text().splitlines()
           if "draft_model for vLLM" in ln or "takes 13." in ln]))
    assert mixed.compile_cache == "partial"
