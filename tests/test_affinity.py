"""CPU pinning of engine servers (``cpus``): the CPU-list syntax, the errors that name the
field before anything starts, and a real llama-server whose every thread runs on the
configured CPU only (read back from /proc)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from crossbench.engines.affinity import format_cpus, parse_cpus, usable_cpus
from crossbench.engines.llamacpp.config import LlamaServerConfig
from crossbench.engines.llamacpp.server import LlamaServer
from crossbench.engines.vllm.config import VllmServerConfig
from crossbench.errors import UserError


@pytest.mark.parametrize(("text", "want"), [
    ("0", {0}), ("2-4", {2, 3, 4}), ("0,2,4-5", {0, 2, 4, 5}), (" 1 , 3 ", {1, 3})])
def test_cpu_lists_parse_as_taskset_reads_them(text: str, want: set[int]) -> None:
    assert parse_cpus(text) == frozenset(want)
    assert parse_cpus(format_cpus(frozenset(want))) == frozenset(want)


def test_format_is_compact() -> None:
    assert format_cpus(frozenset({0, 1, 2, 5, 7, 8})) == "0-2,5,7-8"


@pytest.mark.parametrize(("text", "says"), [
    ("a-b", "is not a CPU list"), ("4-2", "runs backwards: write 2-4"), ("1,,2", "not a CPU")])
def test_a_bad_list_is_refused_when_the_config_is_read(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_cpus(text)
    with pytest.raises(ValidationError, match="cpus"):
        LlamaServerConfig(model=Path("/m.gguf"), cpus=text)
    with pytest.raises(ValidationError, match="cpus"):
        VllmServerConfig(model="m", cpus=text)


def test_cpus_this_machine_lacks_are_refused_with_the_ones_it_has() -> None:
    have = os.sched_getaffinity(0)
    beyond = max(have) + 1
    with pytest.raises(UserError) as e:
        usable_cpus(f"0,{beyond}")
    assert f"cpus: CPU(s) {beyond} of '0,{beyond}' are not available" in str(e.value)
    assert f"set cpus to a list within {format_cpus(frozenset(have))}" in (e.value.hint or "")


def _allowed(pid: int) -> set[str]:
    """Cpus_allowed_list of every thread of a process."""
    out = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                out.add(line.split(":", 1)[1].strip())
    return out


@pytest.mark.server
def test_a_real_llama_server_runs_on_the_configured_cpu_only(
        llama_server: Path, fixture_models: tuple[Path, Path], tmp_path: Path) -> None:
    ours = os.sched_getaffinity(0)
    cpu = min(ours)
    target, _ = fixture_models
    # a CPU this machine lacks: refused before anything is spawned
    lacking = LlamaServer(LlamaServerConfig(model=target, binary=llama_server,
                                            cpus=str(max(ours) + 1)), tmp_path / "no.log")
    with pytest.raises(UserError, match="not available to crossbench here"):
        lacking.start()
    assert lacking.pid is None
    server = LlamaServer(LlamaServerConfig(model=target, binary=llama_server, ctx_size=512,
                                           cpus=str(cpu)), tmp_path / "server.log")
    server.start()
    try:
        server.wait_ready()
        assert server.pid is not None
        threads = list(Path(f"/proc/{server.pid}/task").iterdir())
        assert len(threads) > 1  # llama-server's worker threads inherit the pin
        assert _allowed(server.pid) == {str(cpu)}
    finally:
        server.stop()
    assert os.sched_getaffinity(0) == ours  # the pin is the child's, not crossbench's
