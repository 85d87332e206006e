"""What makes a trial on a reused server start as a fresh one would: each engine's cache reset,
against the real llama-server, the vLLM stand-in (which serves vLLM's dev-mode route) and the
SGLang stand-in (which serves SGLang's /flush_cache)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from standins.sglang import write_launcher as write_sglang
from standins.vllm import write_launcher

from crossbench.engines import registry
from crossbench.engines.process import http_post

FAST = ("--standin-step-ms", "0", "--standin-prefill-ms", "0")


def _vllm(tmp_path: Path, **config: Any) -> Any:
    """A vLLM adapter on the stand-in (named as one: it serves no model)."""
    binary = write_launcher(tmp_path / "vllm", *FAST)
    return registry.create("vllm", {"binary": str(binary), "model": "Qwen/Qwen3-8B", **config},
                           tmp_path / "server.log")


def _complete(base_url: str, prompt: str, cache_prompt: bool) -> None:
    body = {"prompt": prompt, "max_tokens": 4, "temperature": 0, "cache_prompt": cache_prompt}
    req = urllib.request.Request(base_url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200


def test_llama_server_erases_every_slot(llama_server: Path, fixture_models: tuple[Path, Path],
                                        tmp_path: Path) -> None:
    target, _ = fixture_models
    srv = registry.create("llama-server", {"binary": str(llama_server), "model": str(target),
                                           "parallel": 2, "slot_save_path": str(tmp_path)},
                          tmp_path / "server.log")
    assert "--slot-save-path" in srv.command()
    with srv:
        _complete(srv.base_url, "The quick brown fox jumps over the lazy dog " * 4, True)
        first = srv.reset_cache()
        assert first["method"] == "slot-erase" and first["ok"] and first["slots"] == 2
        assert first["tokens_erased"] > 20  # the prompt the slot kept (cache_prompt: true)
        again = srv.reset_cache()
        assert again["ok"] and again["tokens_erased"] == 0  # nothing left to erase


def test_llama_server_without_slot_save_path_says_what_to_set(
        llama_server: Path, fixture_models: tuple[Path, Path], tmp_path: Path) -> None:
    target, _ = fixture_models
    srv = registry.create("llama-server", {"binary": str(llama_server), "model": str(target)},
                          tmp_path / "server.log")
    assert "--slot-save-path" not in srv.command()
    with srv:
        status, _ = http_post(srv.base_url + "/slots/0?action=erase")
        assert status != 200  # llama-server refuses slot actions without the flag
        out = srv.reset_cache()
    assert out["method"] == "none" and not out["ok"] and "slot_save_path" in out["reason"]


def test_vllm_reset_prefix_cache_in_dev_mode(tmp_path: Path) -> None:
    srv = _vllm(tmp_path, env={"VLLM_SERVER_DEV_MODE": "1"})
    with srv:
        assert srv.reset_cache() == {"method": "reset_prefix_cache", "ok": True}
    assert "Resetting prefix cache..." in (tmp_path / "server.log").read_text()


def test_vllm_without_dev_mode_or_with_caching_off(tmp_path: Path) -> None:
    srv = _vllm(tmp_path)
    with srv:
        status, _ = http_post(srv.base_url + "/reset_prefix_cache")
        assert status == 404  # as vLLM: the dev routes exist only in dev mode
        out = srv.reset_cache()
    assert out["method"] == "none" and "VLLM_SERVER_DEV_MODE" in out["reason"]
    off = _vllm(tmp_path, enable_prefix_caching=False)
    assert off.reset_cache() == {"method": "none-needed", "ok": True,
                                 "reason": "prefix caching is off"}


def test_reuse_settings_enable_each_engines_reset(tmp_path: Path) -> None:
    llama = registry.reuse_settings("llama-server", {"model": "m.gguf"}, tmp_path)
    assert llama == {"model": "m.gguf", "slot_save_path": str(tmp_path / "slots")}
    assert (tmp_path / "slots").is_dir()
    mine = {"model": "m.gguf", "slot_save_path": "/kept"}
    assert registry.reuse_settings("llama-server", mine, tmp_path) == mine
    vllm = registry.reuse_settings("vllm", {"model": "m", "env": {"A": "1"}}, tmp_path)
    assert vllm["env"] == {"A": "1", "VLLM_SERVER_DEV_MODE": "1"}
    off = {"model": "m", "enable_prefix_caching": False}
    assert registry.reuse_settings("vllm", off, tmp_path) == off


def test_sglang_flushes_its_radix_cache_or_needs_nothing(tmp_path: Path) -> None:
    """SGLang: `/flush_cache` where the radix cache is on (the stand-in logs SGLang's line);
    with `disable_radix_cache` nothing is kept, so nothing is flushed and the record says so
    (the study's SGLang trials on a shared start warned before, 2026-12-06)."""
    py = write_sglang(tmp_path / "python", "--standin-step-ms", "0")
    srv = registry.create("sglang", {"binary": str(py), "model": "Qwen/Qwen3-8B"},
                          tmp_path / "server.log")
    with srv:
        assert srv.reset_cache() == {"method": "flush_cache", "ok": True}
    assert "Cache flushed successfully!" in (tmp_path / "server.log").read_text()
    off = registry.create("sglang", {"binary": str(py), "model": "Qwen/Qwen3-8B",
                                     "disable_radix_cache": True}, tmp_path / "off.log")
    assert off.reset_cache() == {"method": "none-needed", "ok": True,
                                 "reason": "the radix cache is off (disable_radix_cache)"}
    # NGRAM's corpus outlives the radix cache: flushed whatever disable_radix_cache says
    ngram = registry.create("sglang", {"binary": str(py), "model": "Qwen/Qwen3-8B",
                                       "disable_radix_cache": True,
                                       "spec": {"type": "NGRAM", "n": 4}},
                            tmp_path / "ngram.log")
    with ngram:
        assert ngram.reset_cache() == {
            "method": "flush_cache", "ok": True,
            "reason": "NGRAM's corpus keeps every served request's tokens"}
    assert "Cache flushed successfully!" in (tmp_path / "ngram.log").read_text()
    down = registry.create("sglang", {"binary": str(py), "model": "Qwen/Qwen3-8B",
                                      "port": 9}, tmp_path / "down.log")
    failed = down.reset_cache()  # no server: the record says what went wrong
    assert failed["method"] == "flush_cache" and not failed["ok"] and failed["error"]
